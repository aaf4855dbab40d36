"""Runs whose simulated time is long (a rate of 1 byte/s, a device latency of 1000 days) keep
their memory bounded: each finishes under a 2 GiB address-space limit with the note that the
per-second timeline covers its first day, where the simulator used to allocate gigabytes and
abort (`memory allocation of 4327473152 bytes failed`)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

LIMIT_BYTES = 2 << 30
"""Address space of each run: the interpreter, the extension and a bounded run fit easily."""

SMALL_STACK = """\
[[device]]
name = "d"
model = "{model}"
{extra}
[[volume]]
name = "v"
layout = "single"
devices = ["d"]

[[vm]]
name = "vm1"

[[vm.disk]]
name = "vda"
volume = "v"
size = "16m"
cache = "none"
"""

NOTE = "cover the first 86400 s of simulated time"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vmio", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limited,
        timeout=600,
    )


def _stack(d: Path, model: str, extra: str = "") -> None:
    (d / "s.toml").write_text(SMALL_STACK.format(model=model, extra=extra), encoding="utf-8")


@pytest.mark.parametrize(
    ("model", "extra", "job", "args"),
    [
        # fio's command line: 4 KiB writes at 1 byte/s over the whole 16 MiB disk.
        ("hdd", "", None, ["--name=j", "--rw=write", "--bs=4k", "--rate=1"]),
        # The same as a three-line job file, no size (the whole disk).
        ("hdd", "", "[j]\nrw=write\nrate=1\n", []),
        # A RAM disk whose every request takes 1000 days.
        ("ram", 'latency = "1000d"\n', "[j]\nrw=read\nbs=4k\nsize=64k\ndirect=1\n", []),
    ],
    ids=["vmio-fio-rate-1", "job-rate-1-no-size", "ram-latency-1000d"],
)
def test_a_run_of_very_long_simulated_time_finishes_in_bounded_memory(
    tmp_path, model, extra, job, args
):
    _stack(tmp_path, model, extra)
    if job is None:
        r = _run(tmp_path, "fio", "--stack", "s.toml", *args, "--output-format=json")
    else:
        (tmp_path / "j.fio").write_text(job, encoding="utf-8")
        r = _run(tmp_path, "sim", "--stack", "s.toml", "j.fio", "--output-format=json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "memory allocation" not in r.stderr
    notes = [line for line in r.stderr.splitlines() if line.startswith("vmio: note:")]
    assert any(NOTE in n for n in notes), r.stderr
    result = json.loads(r.stdout)
    assert result["vmio"]["virtual_time_ns"] > 86_400 * 10**9
    assert len(result["vmio"]["vms"][0]["bytes_per_s"]) <= 86_400
