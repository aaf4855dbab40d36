"""Bad input of every kind ends as one `vmio: error: ...` line and exit status 2 (issue #8).

Run in-process (`cli.main`) so that each case is quick; a traceback would fail the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmio import cli, sim


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
