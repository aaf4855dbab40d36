"""Bad input of every kind ends as one `vmio: error: ...` line and exit status 2.

Run in-process (`cli.main`) so that each case is quick; a traceback would fail the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmio import cli, sim
from vmio.cli import sim as cli_sim


def vmio(capsys, *args: str | Path) -> tuple[int, str]:
    """Run `vmio ARGS` in-process; (exit status, stderr)."""
    try:
        rc = cli.main([str(a) for a in args])
    except SystemExit as done:  # argparse
        rc = done.code
    return rc, capsys.readouterr().err


def one_error_line(rc: int, err: str) -> str:
    assert rc == 2, err
    assert err.startswith("vmio: error: ") and err.count("\n") == 1, err
    assert len(err) <= len("vmio: error: \n") + 300, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: Path("/dev/zero"), "is not a regular file"),
        (lambda d: (os.mkfifo(d / "fifo"), d / "fifo")[1], "is not a regular file"),
        (lambda d: d, "is a directory"),
        (
            lambda d: (d / "bad").write_bytes(b"[host]\nx = \xff\n") and d / "bad",
            "offset 11 (line 2, column 5)",
        ),
        (lambda d: (d / "nul").write_bytes(b"[host]\nx\0 = 1\n") and d / "nul", "NUL character"),
        (lambda d: d / "missing.toml", "does not exist"),
        (
            lambda d: (
                (os.truncate(d / "big", 17 << 20) if (d / "big").touch() is None else 0)
                or d / "big"
            ),
            "16 MiB",
        ),
    ],
    ids=["device", "fifo", "directory", "not-utf8", "nul", "missing", "too-big"],
)
def test_every_input_file_that_is_not_small_regular_text_is_one_error_naming_it(
    capsys, tmp_path, make, message
):
    path = make(tmp_path)
    err = one_error_line(*vmio(capsys, "sim", "--stack", path, "job.fio"))
    assert str(path) in err and message in err


def test_a_nul_in_a_path_is_an_error():
    with pytest.raises(sim.VmioError, match="NUL"):
        sim.read_text("a\0b", "stack file")


EXP = '[experiment]\nname = "t"\nstack = "stack.toml"\njob = "job.fio"\n'
AXIS = '[[axis]]\nname = "bs"\ntarget = "job:bs"\nvalues = ["4k"]\n'
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[experiment\n", "experiment.toml:1:12: invalid TOML"),
        (EXP + "x = [1,\n", "invalid TOML: Invalid value at the end of the file"),
        (EXP + f"seed = {HUGE}\n", "experiment.toml:5:8: invalid TOML: an integer of more than"),
        (EXP + "seed = 18446744073709551616\n" + AXIS, "'seed' must be an integer in 0..2**64-1"),
        ("axis = 5\n" + EXP, "'axis' must be [[axis]] tables, not 5"),
        ("axis = ['a']\n" + EXP, "'axis' must be [[axis]] tables"),
        ("calibration = 'x'\n" + EXP + AXIS, "'calibration' must be [[calibration]] tables"),
        (
            EXP + AXIS + f'[[calibration]]\nid = "c"\ndescription = "d"\nat_least = 1{"0" * 400}\n',
            "'at_least' must be a finite number",
        ),
        (EXP + AXIS + '[[calibration]]\nid = "c"\ndescription = "d"\nat_most = nan\n', "finite"),
        (EXP + "tolerance = -1\n" + AXIS, "'tolerance' must be >= 0"),
        (EXP + "vm = 5\n" + AXIS, "'vm' must be a VM name"),
    ],
)
def test_a_toml_surprise_in_an_experiment_file_is_one_line_naming_file_and_field(
    capsys, tmp_path, body, message
):
    path = tmp_path / "experiment.toml"
    path.write_text(body, encoding="utf-8")
    err = one_error_line(*vmio(capsys, "study", path, "--out", tmp_path / "out"))
    assert str(path) in err and message in err


def test_vm_as_a_value_instead_of_tables_in_a_stack_is_one_line(capsys, tmp_path):
    stack = tmp_path / "stack.toml"
    stack.write_text("vm = 5\n", encoding="utf-8")
    err = one_error_line(*vmio(capsys, "sim", "--stack", stack))
    # The stack's own parser says it (the per-VM workloads are read from the validated stack).
    assert f"{stack}:1:6: invalid type: integer `5`, expected a sequence" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["sim", "--stack", "s.toml", "--seed", "-1"],
            "--seed: '-1' is not an integer in 0..2**64-1",
        ),
        (["sim", "--stack", "s.toml", "--seed", "1" * 5000], "(5000 characters)"),
        (["study", "x", "--seed", "2**64"], "--seed"),
        (["study", "x", "--parallel", "0"], "--parallel: '0' is not an integer in 1..1024"),
        (["study", "x", "--parallel", "99999"], "1..1024"),
        (["trace", "synth", "msn", "--requests", "0"], "--requests: '0' is not an integer in"),
        (["trace", "synth", "msn", "--requests", "1e99"], "1..10000000"),
        (["trace", "synth", "msn", "--region", "1k"], "--region: '1k' is not a size in 4k..1p"),
        (["trace", "synth", "msn", "--region", "9" * 400 + "p"], "--region"),
        (["trace", "synth", "msn", "--seed", "x\x01y"], "'x\\x01y'"),
        (["bench", "serve", "img", "--size", "1k"], "--size: '1k' is not a size in 1m..1t"),
        (["bench", "serve", "img", "--runtime", "0"], "--runtime"),
        (["bench", "serve", "img", "--share-runtime", "99999"], "--share-runtime"),
        (
            ["bench", "serve", "img", "--servers", "vmio,qemu"],
            "--servers: 'vmio,qemu' is not a comma-separated list of distinct servers among vmio,",
        ),
    ],
)
def test_every_numeric_option_out_of_its_range_is_one_line_naming_the_flag(capsys, args, message):
    err = one_error_line(*vmio(capsys, *args))
    assert message in err


def test_parse_size_refuses_a_number_of_huge_digits():
    with pytest.raises(sim.VmioError, match="is not a size"):
        sim.parse_size("9" * 400 + ".5k")
    assert sim.parse_size("1.5k") == 1536 and sim.parse_size("2p") == 2 << 50


def test_an_unexpected_error_from_input_is_one_escaped_line_of_at_most_300_characters(
    capsys, monkeypatch
):
    def boom(args):
        raise OverflowError("out of range: " + "\x1b[31m" * 200)

    monkeypatch.setattr(cli_sim, "cmd_sim", boom)
    err = one_error_line(*vmio(capsys, "sim", "--stack", "s.toml"))
    assert "\\x1b[31m" in err and "\x1b" not in err and err.endswith("…\n")


def test_a_stack_too_large_for_the_process_memory_limit_is_refused_with_the_estimate(tmp_path):
    """Nine 256 GB SSDs need ~5 GB of FTL tables: under `ulimit -v` 2 GiB the run is refused
    before anything is allocated, with the estimate and what was available (never an
    aborted allocation)."""
    import resource
    import subprocess
    import sys

    devices = "".join(
        f'[[device]]\nname = "ssd{i}"\nmodel = "ssd"\nprofile = "samsung-840pro-256g"\n\n'
        for i in range(9)
    )
    names = ", ".join(f'"ssd{i}"' for i in range(9))
    stack = tmp_path / "stack.toml"
    stack.write_text(
        devices + f'[[volume]]\nname = "v"\nlayout = "linear"\ndevices = [{names}]\n\n'
        '[[vm]]\nname = "vm1"\n\n[[vm.disk]]\nname = "vda"\nvolume = "v"\nsize = "1g"\n',
        encoding="utf-8",
    )
    job = tmp_path / "job.fio"
    job.write_text("[j]\nrw=randread\nbs=4k\nsize=64m\nruntime=1\n", encoding="utf-8")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = subprocess.run(
        [sys.executable, "-m", "vmio", "sim", "--stack", str(stack), str(job)],
        capture_output=True,
        text=True,
        preexec_fn=cap,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("vmio: error: "), r.stderr
    assert "of FTL tables" in r.stderr and "of memory available" in r.stderr, r.stderr


def test_a_path_the_os_cannot_take_is_one_line_naming_the_option(tmp_path):
    from conftest import run_vmio

    r = run_vmio("sim", "--stack", "9" * 5000, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-500:]
    assert "stack file path '999" in r.stderr and "(5000 characters)" in r.stderr, r.stderr
    r = run_vmio("study", "x" * 300, cwd=tmp_path)
    assert r.returncode == 2 and "name longer than 255 bytes" in r.stderr, r.stderr[-500:]
