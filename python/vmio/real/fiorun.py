"""fio as the real checks run it (`vmio calibrate`, its serve path, `vmio validate`, the image
checks): one fio process whose JSON output is the result, and a progress line per point.

Sources: fio 3.33 fio/HOWTO.rst (`--output-format=json`; fio prints warnings and its job
banner before the JSON object on stdout, so the text from the first `{` is the JSON; a
failed job exits with a non-zero status and says why on stderr). fio forks a process per job
(`thread` unset), and killing the parent alone leaves the job running: a job process that has
not yet opened its file then creates it again after the caller removed it (fio/backend.c
`fork_main`, fio/filesetup.c `extend_file`). So fio runs in a session of its own, and an
interrupted caller kills the whole process group and waits for it (POSIX `killpg`).

```text
run_group(args):              run args in a new session, SIGINT blocked until the child is
                              known; any exception (Ctrl-C included)
                              -> SIGTERM to the group, SIGKILL after 5 s, wait, re-raise
fio_json(args, name, error):  run_group(args); status != 0 or no "{" on stdout ->
                              error("fio job NAME failed: <first line of stderr or stdout>")
                              else stdout from its first "{"
PointProgress:                vmio.progress.Progress on a terminal; elsewhere one line per
                              point ("vmio: TITLE: <bar> LABEL"): a point takes seconds
```
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from vmio.progress import Progress
from vmio.sim import VmioError


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies do not count: their parent, or
    init for an orphan, reaps them; /proc/PID/stat's state and pgrp fields, proc(5))."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to `proc`'s process group, up to 5 s for its leader, then SIGKILL to whatever
    of the group is left (fio's job processes outlive their parent), and up to 10 s more
    until none of the group runs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
    proc.wait()
    deadline = time.monotonic() + 10.0
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def run_group(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run `args` in a session of its own, capturing text output; on any exception the whole
    process group is killed and reaped before the exception goes on (module doc)."""
    # A Ctrl-C between fork and exec would raise out of Popen with the child running and no
    # handle on it: SIGINT waits (blocked) until `proc` exists, the child unblocks it.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc = subprocess.Popen(
            list(args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, mask),
        )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        out, err = proc.communicate()
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)


def fio_json(args: Sequence[str], name: str, error: type[VmioError] = VmioError) -> str:
    """Run fio (`args`, the command line); the text of its JSON output (a failure: `error`
    with fio's first error line, module doc)."""
    r = run_group(args)
    if r.returncode != 0 or "{" not in r.stdout:
        lines = r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}"
        raise error(f"fio job {name} failed: {lines.splitlines()[0]}")
    return r.stdout[r.stdout.find("{") :]


class PointProgress(Progress):
    """vmio.progress.Progress, but one line per point off a terminal (points take seconds)."""

    def advance(self, label: str = "") -> None:
        if self.tty:
            super().advance(label)
            return
        self.done = min(self.done + 1, self.total)
        self.stream.write(f"vmio: {self.title}: {self.bar(label)}\n")
        self.stream.flush()
