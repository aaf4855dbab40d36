"""fio's option checking in job files (`vmio sim`) and on `vmio fio`'s command line: a name
fio 3.33 does not know is refused as fio refuses it, with fio's did-you-mean; a name fio
knows and vmio does not model is a note on stderr, with or without `--output`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import STACK, run_vmio


def _setup(tmp_path: Path, job: str) -> Path:
    (tmp_path / "stack.toml").write_text(
        STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8"
    )
    (tmp_path / "job.fio").write_text(job, encoding="utf-8")
    return tmp_path


def _one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmio: error: "), r.stderr
    return lines[0]


def test_a_mistyped_option_in_a_job_file_is_refused_with_fio_s_suggestion(tmp_path):
    d = _setup(tmp_path, "[j]\nrw=randread\niodepht=32\nsize=1m\n")
    line = _one_error_line(run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d))
    assert line.startswith("vmio: error: job.fio:3: Bad option <iodepht=32>"), line
    assert "Did you mean iodepth?" in line
    assert line.endswith("cpu_*)"), line  # the whole line, not cut by the 300-character cap


def test_an_uppercase_name_is_refused_as_fio_refuses_it_with_the_lowercase_one_suggested(tmp_path):
    d = _setup(tmp_path, "[j]\nrw=read\nIODEPTH=4\nsize=1m\n")
    line = _one_error_line(run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d))
    assert "job.fio:3: Bad option <IODEPTH=4>" in line and "did you mean iodepth?" in line


def test_a_mistyped_option_in_an_included_file_names_that_file_and_line(tmp_path):
    d = _setup(tmp_path, "[j]\nsize=1m\ninclude inc.fio\n")
    (d / "inc.fio").write_text("rw=read\nruntim=2\n", encoding="utf-8")
    line = _one_error_line(run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d))
    assert "inc.fio:2: Bad option <runtim=2>" in line and "Did you mean runtime?" in line


def test_a_mistyped_option_on_vmio_fio_s_command_line_is_refused_with_fio_s_suggestion(tmp_path):
    d = _setup(tmp_path, "")
    r = run_vmio("fio", "--stack", "stack.toml", "--name=j", "--iodepht=32", cwd=d)
    line = _one_error_line(r)
    assert "fio: unrecognized option '--iodepht=32'" in line and "Did you mean iodepth?" in line


def test_an_engine_s_own_option_is_known_with_that_engine_only(tmp_path):
    d = _setup(tmp_path, "[j]\nioengine=io_uring\nhipri\nsize=1m\n")
    r = run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d)
    assert r.returncode == 0, r.stderr
    assert "vmio: note: fio option 'hipri' (job.fio:3) is not modelled; ignored" in r.stderr
    (tmp_path / "psync").mkdir()
    d2 = _setup(tmp_path / "psync", "[j]\nioengine=psync\nhipri\nsize=1m\n")
    line = _one_error_line(run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d2))
    assert "job.fio:3: Bad option <hipri>" in line and "ioengine=io_uring" in line


def test_an_alias_is_accepted_as_its_option(tmp_path):
    d = _setup(tmp_path, "[j]\nreadwrite=randread\nblocksize=8k\nsize=1m\nioengine=null\n")
    r = run_vmio("sim", "--stack", "stack.toml", "job.fio", "--output-format=json", cwd=d)
    assert r.returncode == 0, r.stderr
    assert "vmio: note" not in r.stderr
    job = json.loads(r.stdout)["jobs"][0]
    assert job["read"]["io_bytes"] == 1 << 20
    assert job["read"]["total_ios"] == 128  # 1 MiB of 8 KiB reads


def test_a_known_unmodelled_option_is_noted_on_stderr_with_and_without_output(tmp_path):
    d = _setup(tmp_path, "[j]\nrw=read\nsize=1m\ngtod_reduce=1\n")
    note = "vmio: note: fio option 'gtod_reduce' (job.fio:4) is not modelled; ignored"
    plain = run_vmio("sim", "--stack", "stack.toml", "job.fio", cwd=d)
    assert plain.returncode == 0 and note in plain.stderr, plain.stderr
    to_file = run_vmio("sim", "--stack", "stack.toml", "job.fio", "--output=o.txt", cwd=d)
    assert to_file.returncode == 0 and note in to_file.stderr, to_file.stderr
    # vmio fio, with and without --output (the command line's job file is `command-line`).
    args = ("--name=x", "--size=1m", "--gtod_reduce=1", "--output-format=json")
    loud = run_vmio("fio", "--stack", "stack.toml", *args, cwd=d)
    assert loud.returncode == 0 and "fio option 'gtod_reduce'" in loud.stderr
    out = run_vmio("fio", "--stack", "stack.toml", *args, "--output=o.json", cwd=d)
    assert out.returncode == 0 and "fio option 'gtod_reduce'" in out.stderr, out.stderr
    assert json.loads((d / "o.json").read_text())["vmio"]["ignored_options"]


def test_quiet_notes_keeps_them_in_the_json_only(tmp_path):
    d = _setup(tmp_path, "")
    args = ("--name=x", "--size=1m", "--gtod_reduce=1", "--output-format=json")
    r = run_vmio("fio", "--stack", "stack.toml", *args, "--output=o.json", "--quiet-notes", cwd=d)
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads((d / "o.json").read_text())["vmio"]["ignored_options"][0]["name"] == (
        "gtod_reduce"
    )


def test_a_note_echoes_an_option_name_of_at_most_80_characters_and_a_path_of_at_most_path_max():
    from vmio.fioreport import result_notes
    from vmio.sim import MAX_PATH_CHARS

    huge = {"name": "n" * 10**6, "line": 3, "file": "f" * 10**6}
    (line,) = result_notes({"vmio": {"ignored_options": [huge]}}, "job.fio")
    assert line == (
        f"vmio: note: fio option '{'n' * 80}…' ({'f' * MAX_PATH_CHARS}…:3) is not modelled; ignored"
    )
    # A real path (a long install prefix) is shown whole: the file must be found from it.
    long = "/" + "/".join(["d" * 60] * 10) + "/job.fio"
    (line,) = result_notes({"vmio": {"ignored_options": [{"name": "x", "line": 3}]}}, long)
    assert f"({long}:3)" in line
