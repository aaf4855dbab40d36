"""`vmio fio`: fio's command line (check (d) of issue #14), a run that Ctrl-C stops, and the
tools of fio's users (bench-fio, fio-plot) on vmio's output (check (c))."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import STACK, require_tool, run_vmio

TWO_JOBS = """\
[global]
size=1m

[a]
rw=read

[b]
rw=write
bs=8k
"""

COMMAND_LINES = [
    ["--name=seq", "--rw=read", "--bs=1m", "--size=1m"],
    ["--name", "x", "--rw", "randread", "--bs", "4k", "--size", "1m", "--iodepth", "8"],
    ["-name=x", "-rw=write", "-bs=64k", "-size=1m"],
    ["--size=1m", "--name=a", "--name=b", "--bs=8k"],
    ["--name=t", "--rw=randrw", "--rwmixread=70", "--size=1m", "--time_based", "--runtime=1"],
    ["--name=j", "--numjobs=2", "--group_reporting", "--size=1m"],
    ["--bs=8k", "two.fio"],
    ["two.fio", "--name=extra", "--rw=write", "--size=1m"],
    ["--section=b", "two.fio"],
    ["--output-format=json", "--output=out.json", "--name=x", "--size=1m"],
    ["--eta=never", "--name=x", "--size=1m", "--name=y", "--stonewall", "--size=1m"],
    ["--name=x", "--size=1m", "--thread", "--norandommap", "--rw=randread", "--direct=1"],
    ["--name=x", "--size=1m", "--output-format=json", "--", "two.fio"],
]
"""Typical fio command lines; every one runs on a null engine (no file, no device)."""


def _workdir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "two.fio").write_text(TWO_JOBS, encoding="utf-8")
    (d / "stack.toml").write_text(
        STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8"
    )
    return d


def _json_of(run: subprocess.CompletedProcess[str], workdir: Path, args: list[str]) -> dict:
    if "--output=out.json" in args:
        return json.loads((workdir / "out.json").read_text(encoding="utf-8"))
    text = run.stdout
    return json.loads(text[text.index("{") :])


@pytest.mark.parametrize("args", COMMAND_LINES, ids=lambda a: " ".join(a))
def test_vmio_fio_accepts_the_command_lines_real_fio_accepts(tmp_path, args):
    require_tool("fio", "fio")
    fio_dir, vmio_dir = _workdir(tmp_path, "fio"), _workdir(tmp_path, "vmio")
    real = subprocess.run(
        ["fio", "--ioengine=null", *args],
        cwd=fio_dir,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert real.returncode == 0, real.stderr
    ours = run_vmio("fio", "--stack", "stack.toml", "--ioengine=null", *args, cwd=vmio_dir)
    assert ours.returncode == 0, ours.stderr
    assert "Traceback" not in ours.stderr
    if any(a.startswith("--output-format=json") for a in args):
        fio_json, vmio_json = _json_of(real, fio_dir, args), _json_of(ours, vmio_dir, args)
        # The same jobs, in the same order.
        names = [j["jobname"] for j in fio_json["jobs"]]
        assert [j["jobname"] for j in vmio_json["jobs"]] == names
        # The options before any --name are global options (with the job files' [global]).
        assert fio_json["global options"]["ioengine"] == "null"
        if vmio_json.get("global options"):  # issue #14 item 2 (fio/mod.rs keeps them)
            assert vmio_json["global options"] == fio_json["global options"]


def test_the_command_line_becomes_a_global_section_then_one_section_per_name():
    from vmio.fiocli import compose_job, parse_command_line

    cmd = parse_command_line(
        ["--ioengine=null", "--name", "a", "--bs=8k", "--time_based", "-name=b", "--rw", "write"]
    )
    job = compose_job(cmd, read=lambda p: "")
    assert job.text == (
        "[global]\nioengine=null\n[a]\nname=a\nbs=8k\ntime_based\n[b]\nname=b\nrw=write\n"
    )
    assert job.path == "command-line"


def test_a_flag_option_does_not_take_the_next_argument_as_its_value():
    from vmio.fiocli import parse_command_line

    cmd = parse_command_line(["--name=x", "--group_reporting", "job.fio", "--bs", "4k"])
    assert cmd.files == ["job.fio"]
    assert cmd.jobs == [("x", [("group_reporting", None), ("bs", "4k")])]


def test_section_keeps_only_the_named_sections_and_the_line_numbers():
    from vmio.fiocli import keep_sections

    kept = keep_sections(TWO_JOBS, ["b"])
    assert kept.splitlines() == ["[global]", "size=1m", "", "", "", "", "[b]", "rw=write", "bs=8k"]


def test_version_answers_as_fio_with_vmio_beside_it():
    r = run_vmio("fio", "--version")
    assert r.returncode == 0, r.stderr
    first = r.stdout.split()[0]
    assert first == "fio-3.33"
    assert "(vmio " in r.stdout
    require_tool("fio", "fio")
    real = subprocess.run(["fio", "--version"], capture_output=True, text=True, check=True)
    assert real.stdout.strip() == first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--client=host1", "--name=x"], "fio option '--client' is not supported by vmio fio"),
        (["--name=x", "--output-format=xml"], "accepted values are normal, terse, json, json+"),
        (["--name=x", "--bs"], "option '--bs' requires an argument"),
        (["--minimal=1", "--name=x"], "option '--minimal' doesn't allow an argument"),
        (["--ioengine=null"], "no job defined"),
        (["--name=x", "--eta=sometimes"], "--eta 'sometimes': accepted values are auto"),
    ],
)
def test_a_command_line_vmio_cannot_honour_is_one_error_line(tmp_path, args, message):
    d = _workdir(tmp_path, "w")
    r = run_vmio("fio", "--stack", "stack.toml", *args, cwd=d)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmio: error: "), r.stderr
    assert message in lines[0]


def test_with_output_the_notes_stay_out_of_stderr(tmp_path):
    d = _workdir(tmp_path, "w")
    args = ("--name=x", "--size=1m", "--write_bw_log=x", "--output-format=json")
    loud = run_vmio("fio", "--stack", "stack.toml", *args, cwd=d)
    assert loud.returncode == 0 and "vmio: note:" in loud.stderr
    quiet = run_vmio("fio", "--stack", "stack.toml", *args, "--output=o.json", cwd=d)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads((d / "o.json").read_text())["vmio"]


def test_the_shim_runs_vmio_fio_as_fio(tmp_path):
    d = _workdir(tmp_path, "w")
    r = run_vmio("fio", "--stack", "stack.toml", "--seed", "7", "--write-shim", "bin", cwd=d)
    assert r.returncode == 0, r.stderr
    shim = d / "bin" / "fio"
    out = subprocess.run(
        [shim, "--name=x", "--size=1m", "--output-format=json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["vmio"]["seed"] == 7
    assert subprocess.run([shim, "--version"], capture_output=True, text=True).stdout.startswith(
        "fio-3"
    )
