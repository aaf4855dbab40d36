"""`vmio fio`: fio's command line, a run that Ctrl-C stops, and the
tools of fio's users (bench-fio, fio-plot) on vmio's output."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import JOB, STACK, finish, missing_tool, require_tool, run_vmio

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
    ["--minimal", "--name=x", "--size=1m"],
    ["--output-format=json+", "--name=x", "--size=1m", "--rw=randwrite"],
]
"""Typical fio command lines; every one runs on a null engine (no file, no device)."""


def _write_stack(d: Path) -> None:
    (d / "stack.toml").write_text(
        STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8"
    )


def _workdir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "two.fio").write_text(TWO_JOBS, encoding="utf-8")
    _write_stack(d)
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
    if "--output-format=json" in args or "--output=out.json" in args:
        fio_json, vmio_json = _json_of(real, fio_dir, args), _json_of(ours, vmio_dir, args)
        # The same jobs, in the same order.
        names = [j["jobname"] for j in fio_json["jobs"]]
        assert [j["jobname"] for j in vmio_json["jobs"]] == names
        # The options before any --name are global options (with the job files' [global]).
        assert fio_json["global options"]["ioengine"] == "null"
        if vmio_json.get("global options"):  # fio/mod.rs keeps them
            assert vmio_json["global options"] == fio_json["global options"]


def test_the_command_line_becomes_a_global_section_then_one_section_per_name():
    from vmio.cli.fio import compose_job, parse_command_line

    cmd = parse_command_line(
        ["--ioengine=null", "--name", "a", "--bs=8k", "--time_based", "-name=b", "--rw", "write"]
    )
    job = compose_job(cmd, read=lambda p: "")
    assert job.text == (
        "[global]\nioengine=null\n[a]\nname=a\nbs=8k\ntime_based\n[b]\nname=b\nrw=write\n"
    )
    assert job.path == "command-line"


def test_a_flag_option_does_not_take_the_next_argument_as_its_value():
    from vmio.cli.fio import parse_command_line

    cmd = parse_command_line(["--name=x", "--group_reporting", "job.fio", "--bs", "4k"])
    assert cmd.files == ["job.fio"]
    assert cmd.jobs == [("x", [("group_reporting", None), ("bs", "4k")])]


def test_section_keeps_only_the_named_sections_and_the_line_numbers():
    from vmio.cli.fio import keep_sections

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


def test_with_output_the_notes_stay_on_stderr_unless_quiet_notes(tmp_path):
    d = _workdir(tmp_path, "w")
    args = ("--name=x", "--size=1m", "--gtod_reduce=1", "--output-format=json")
    loud = run_vmio("fio", "--stack", "stack.toml", *args, cwd=d)
    assert loud.returncode == 0 and "vmio: note:" in loud.stderr
    still = run_vmio("fio", "--stack", "stack.toml", *args, "--output=o.json", cwd=d)
    assert still.returncode == 0 and "vmio: note:" in still.stderr
    quiet = run_vmio(
        "fio", "--stack", "stack.toml", *args, "--output=q.json", "--quiet-notes", cwd=d
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads((d / "q.json").read_text())["vmio"]


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


# --- Ctrl-C, the progress line, repeated notes -------------------------------------------

LONG_JOB = """\
[global]
ioengine=libaio
direct=1
size=10g
runtime=1000h
time_based

[long]
rw=randread
bs=4k
iodepth=16
numjobs=4
"""
"""A job of 1,000 simulated hours: minutes of wall time, so only Ctrl-C ends it soon."""


def _interrupt(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `vmio ARGS` (in tmp_path, with long.fio and stack.toml), send SIGINT once it has
    simulated for a while, and return its outcome and the seconds it took to stop."""
    (tmp_path / "long.fio").write_text(LONG_JOB, encoding="utf-8")
    _write_stack(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vmio", *args],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell without job control starts background commands with SIGINT ignored, and a
        # program keeps what it inherits (as nohup relies on): give the child Ctrl-C back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    if "--eta=always" in args:  # the progress line says when the simulation loop runs
        first = proc.stderr.readline()
        assert first.startswith("vmio: simulated "), first
    else:
        first = ""
        time.sleep(2.0)
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, 30)
    took = time.monotonic() - t0
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, first + err), took


def test_ctrl_c_stops_vmio_sim_within_a_second_with_the_report_of_what_ran(tmp_path):
    r, took = _interrupt(
        tmp_path, "sim", "--stack", "stack.toml", "long.fio", "--output-format", "json"
    )
    assert took < 1.0, f"stopped {took:.2f} s after SIGINT"
    assert r.returncode == 130, r.stderr
    result = json.loads(r.stdout)
    stop_ns = result["vmio"]["interrupted"]["virtual_time_ns"]
    assert 0 < stop_ns < 1000 * 3600 * 10**9
    read = result["jobs"][0]["read"]
    assert read["total_ios"] > 0 and read["bw_bytes"] > 0
    # The jobs ran up to the stop: the runtime (ms) is the simulated time reached.
    assert abs(read["runtime"] - stop_ns / 1e6) <= 1.0 + stop_ns / 1e6 * 0.01
    assert "vmio: note: interrupted at simulated time" in r.stderr
    assert "Traceback" not in r.stderr


def test_ctrl_c_stops_vmio_fio_with_fio_s_exit_status(tmp_path):
    r, took = _interrupt(tmp_path, "fio", "--stack", "stack.toml", "--eta=always", "long.fio")
    assert took < 1.0, f"stopped {took:.2f} s after SIGINT"
    assert r.returncode == 128, r.stderr
    assert "long: (groupid=0" in r.stdout  # fio's normal report of what ran
    assert "Traceback" not in r.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_extrapolates_the_eta_from_the_simulated_fraction():
    from vmio.progress import RunProgress

    clock = iter([0.0, 2.0, 2.5]).__next__
    tty = _Tty()
    line = RunProgress("auto", stream=tty, clock=clock)
    line(1 * 10**9, 4 * 10**9)  # 2 s of wall time for a quarter: 6 s left
    assert tty.getvalue() == (
        "\rvmio: simulated 1.00 s of 4.00 s [#####...............] 25% ETA 6s\x1b[K"
    )
    line(2 * 10**9, None)  # no planned time (a job ending on its bytes): no ETA
    assert tty.getvalue().endswith("\rvmio: simulated 2.00 s in 2s\x1b[K")
    line.close()
    assert tty.getvalue().endswith("\r\x1b[K")


def test_the_progress_line_stays_off_a_pipe_unless_eta_is_always():
    from vmio.progress import RunProgress

    pipe = io.StringIO()
    RunProgress("auto", stream=pipe, clock=iter([0.0, 5.0]).__next__)(10**9, None)
    RunProgress("never", stream=_Tty(), clock=iter([0.0, 5.0]).__next__)(10**9, None)
    assert pipe.getvalue() == ""
    always = RunProgress("always", stream=pipe, clock=iter([0.0, 0.1, 0.5, 1.2]).__next__)
    for t in (1, 2, 3):
        always(t * 10**9, None)
    # One line a second elsewhere than on a terminal: at 0.1 s and 1.2 s.
    assert pipe.getvalue().splitlines() == [
        "vmio: simulated 1.00 s in 0s",
        "vmio: simulated 3.00 s in 1s",
    ]


def test_a_note_repeated_by_every_clone_is_printed_once_with_its_count():
    from vmio.fioreport import collapse_repeats, result_notes

    assert collapse_repeats(["a", "b", "a", "a"]) == ["a (x3)", "b"]
    notes = result_notes({"vmio": {"notes": ["job 'x': slow"] * 12}}, "job.fio")
    assert notes == ["vmio: note: job 'x': slow (x12)"]


# --- bench-fio and fio-plot (check (c)) ----------------------------------------------------

STUDY = """\
[experiment]
name = "qd"
stack = "stack.toml"
job = "job.fio"

[[axis]]
name = "iodepth"
target = "job:iodepth"
values = ["1", "4"]

[[axis]]
name = "numjobs"
target = "job:numjobs"
values = ["1", "2"]
"""

CHARTS = {
    "-l": ["-d", "1", "4", "-n", "1"],
    "-L": ["-t", "iops", "-d", "1", "4", "-n", "1", "2"],
    "-N": ["-d", "1", "-n", "1", "2"],
    "-H": ["-d", "1", "-n", "1"],
}
"""fio-plot's chart types (2D iodepth bars, 3D iodepth x numjobs, numjobs bars, latency
histogram) with the iodepth/numjobs values each accepts."""


def _require_fio_plot() -> None:
    import importlib.util

    if (
        importlib.util.find_spec("fio_plot") is None
        or importlib.util.find_spec("bench_fio") is None
    ):
        missing_tool("fio-plot is not installed (pip install fio-plot: the test requirements)")


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _render(tmp_path: Path, data: Path, chart: str) -> Path:
    """fio-plot's `chart` of the fio JSON files in `data`; the PNG it wrote."""
    out = tmp_path / f"png{chart}"
    out.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "fio_plot", "-i", str(data), "-T", "t", chart, *CHARTS[chart]]
        + ["-r", "randread"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (png,) = out.glob("*.png")
    return png


def _assert_charts(tmp_path: Path, data: Path) -> None:
    for chart in CHARTS:
        png = _render(tmp_path, data, chart)
        width, height = _png_size(png)
        assert width >= 600 and height >= 400, (chart, width, height)
        assert png.stat().st_size > 20_000, (chart, png.stat().st_size)  # more than axes


def _bench_fio(tmp_path: Path, env: dict[str, str], target: str) -> Path:
    """bench-fio over iodepth 1, 4 x numjobs 1, 2 on `target` (a file in tmp_path); the
    directory of its JSON files."""
    r = subprocess.run(
        [sys.executable, "-m", "bench_fio", "-d", target, "-t", "file", "-s", "8M"]
        + ["-o", "out", "--iodepth", "1", "4", "--numjobs", "1", "2", "--runtime", "1"]
        + ["--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    data = tmp_path / "out" / target / "4k"
    names = sorted(p.name for p in data.glob("*.json"))
    assert names == [f"randread-{d}-{n}.json" for d in (1, 4) for n in (1, 2)]
    return data


def test_a_study_over_iodepth_and_numjobs_writes_bench_fio_s_layout(tmp_path):
    from vmio.study.benchfio import job_options

    _write_stack(tmp_path)
    (tmp_path / "job.fio").write_text(JOB.format(rw="randread", bs="4k"), encoding="utf-8")
    (tmp_path / "experiment.toml").write_text(STUDY, encoding="utf-8")
    r = run_vmio("study", "experiment.toml", "--out", "out", "--bench-fio-layout", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    layout = tmp_path / "out" / "bench-fio" / "sda"
    files = sorted(str(p.relative_to(layout)) for p in layout.rglob("*.json"))
    (bs,) = {Path(f).parent.name for f in files}  # the job's bs, as its JSON gives it
    assert files == [f"{bs}/randread-{d}-{n}.json" for d in (1, 4) for n in (1, 2)]
    for d in (1, 4):
        for n in (1, 2):
            result = json.loads((layout / bs / f"randread-{d}-{n}.json").read_text())
            options = job_options(result)  # fio-plot's reading: job over global options
            assert (options["iodepth"], options["numjobs"]) == (str(d), str(n))
            assert len(result["jobs"]) == n  # one entry per clone, as fio without group_reporting
    # The study's point JSON, unchanged.
    assert (layout / bs / "randread-4-2.json").read_text() == (
        tmp_path / "out" / "json" / "4-2.json"
    ).read_text()


def test_fio_plot_draws_its_charts_from_real_fio_run_by_bench_fio(tmp_path):
    """The check's machinery against fio itself: bench-fio runs real fio, fio-plot draws."""
    require_tool("fio", "fio")
    _require_fio_plot()
    (tmp_path / "target.img").write_bytes(b"\0" * (16 << 20))
    data = _bench_fio(tmp_path, dict(os.environ), "target.img")
    _assert_charts(tmp_path, data)


def test_bench_fio_drives_vmio_fio_and_fio_plot_draws_its_charts_from_vmio_output(tmp_path):
    """Check (c): bench-fio calls `fio` from PATH, here vmio's shim; fio-plot draws -l, -L,
    -N and -H from the files it wrote."""
    _require_fio_plot()
    _write_stack(tmp_path)
    r = run_vmio("fio", "--stack", "stack.toml", "--force", "--write-shim", "bin", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # bench-fio checks that its target exists: a file named as the VM's disk.
    (tmp_path / "sda").write_bytes(b"")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    data = _bench_fio(tmp_path, env, "sda")
    result = json.loads((data / "randread-4-2.json").read_text())
    assert result["vmio"]["seed"] == 1 and len(result["jobs"]) == 2
    _assert_charts(tmp_path, data)
