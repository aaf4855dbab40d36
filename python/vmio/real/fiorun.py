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
run_group(args):              run args in a new session; any exception (Ctrl-C included)
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
from collections.abc import Sequence

from vmio.progress import Progress
from vmio.sim import VmioError


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to `proc`'s process group, up to 5 s for its leader, then SIGKILL to whatever
    of the group is left (fio's job processes outlive their parent)."""
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


def run_group(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run `args` in a session of its own, capturing text output; on any exception the whole
    process group is killed and reaped before the exception goes on (module doc)."""
    proc = subprocess.Popen(
        list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
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
