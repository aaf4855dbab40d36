"""Shared helpers: run the installed `vmio` command and write small stack and job files."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

STACK = """\
[host]
cores = 4
memory = "16g"

[[device]]
name = "sdb"
model = "hdd"
profile = "hdd-7200-2tb"

[[device]]
name = "sdc"
model = "hdd"
profile = "hdd-7200-2tb"

[[volume]]
name = "data"
layout = "{layout}"
devices = {devices}

[scheduler]
name = "mq-deadline"

[page_cache]
memory = "8g"

[[vm]]
name = "vm1"
vcpus = 2
memory = "4g"

[[vm.disk]]
name = "sda"
volume = "data"
size = "100g"
interface = "virtio-scsi"
cache = "none"
"""

JOB = """\
[global]
ioengine=libaio
direct=1
size=1g
runtime=1
time_based

[job1]
rw={rw}
bs={bs}
"""


def strict_tools() -> bool:
    """Under CI or the README's test command (scripts/test-all.sh sets VMIO_REQUIRE_TOOLS=1),
    a test whose real tool is missing fails; elsewhere it is skipped, and pytest reports it as
    skipped (never as passed)."""
    return bool(os.environ.get("VMIO_REQUIRE_TOOLS") or os.environ.get("CI"))


def missing_tool(why: str) -> None:
    """Fail (CI, the test command) or skip (a developer's run) a test that cannot test."""
    if strict_tools():
        pytest.fail(f"{why}; the test command (scripts/test-all.sh) installs it", pytrace=False)
    pytest.skip(why)


def require_tool(tool: str, package: str) -> None:
    """The test needs `tool` on PATH (from the Debian package `package`)."""
    if shutil.which(tool) is None:
        missing_tool(f"'{tool}' is not installed (apt-get install {package})")


def start_vmio_serve(
    workdir: Path, stack_text: str, *extra: str
) -> tuple[subprocess.Popen[str], Path]:
    """Write `stack_text` to workdir/stack.toml and start `vmio serve` on workdir/nbd.sock (in
    workdir); returns once the socket accepts connections: (process, socket path)."""
    (workdir / "stack.toml").write_text(stack_text, encoding="utf-8")
    sock = workdir / "nbd.sock"
    cmd = [sys.executable, "-m", "vmio", "serve", "--stack", "stack.toml", "--socket", str(sock)]
    # VMIO_SERVE_TEST_AIO=io_uring runs these servers with that engine (vmio serve --aio).
    if os.environ.get("VMIO_SERVE_TEST_AIO") and "--aio" not in extra:
        cmd += ["--aio", os.environ["VMIO_SERVE_TEST_AIO"]]
    proc = subprocess.Popen(
        [*cmd, *extra], cwd=workdir, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    t0 = time.monotonic()
    while True:
        assert proc.poll() is None, proc.stderr.read()
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
            return proc, sock
        except OSError:
            if time.monotonic() - t0 > 30:
                proc.kill()
                raise AssertionError("vmio serve did not listen within 30 s") from None
            time.sleep(0.05)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """`proc.communicate(timeout)`; on a timeout the process is killed (a test that fails
    must not leave a server or a long simulation loading the tests after it) and the
    timeout raised."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def run_vmio(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m vmio ARGS` (the installed package) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "vmio", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        # A guard against a hang, not a speed limit: a loaded 2-core machine runs a whole
        # study in a few minutes.
        timeout=1200,
    )


@pytest.fixture
def write_stack(tmp_path: Path) -> Callable[..., Path]:
    """Write a two-HDD stack file; `layout` and `devices` can be spoilt on purpose."""

    def write(name: str = "stack.toml", layout: str = "raid0", devices: str = '["sdb", "sdc"]'):
        path = tmp_path / name
        path.write_text(STACK.format(layout=layout, devices=devices), encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_job(tmp_path: Path) -> Callable[..., Path]:
    """Write a one-job fio file; line 9 is `rw=`."""

    def write(name: str = "job.fio", rw: str = "randread", bs: str = "32k") -> Path:
        path = tmp_path / name
        path.write_text(JOB.format(rw=rw, bs=bs), encoding="utf-8")
        return path

    return write
