"""fio as the real checks run it (`vmio calibrate`, its serve path, `vmio validate`, the image
checks): one fio process whose JSON output is the result, and a progress line per point.

Sources: fio 3.33 fio/HOWTO.rst (`--output-format=json`; fio prints warnings and its job
banner before the JSON object on stdout, so the text from the first `{` is the JSON; a
failed job exits with a non-zero status and says why on stderr).

```text
fio_json(args, name, error):  run args; status != 0 or no "{" on stdout ->
                              error("fio job NAME failed: <first line of stderr or stdout>")
                              else stdout from its first "{"
PointProgress:                vmio.progress.Progress on a terminal; elsewhere one line per
                              point ("vmio: TITLE: <bar> LABEL"): a point takes seconds
```
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from vmio.progress import Progress
from vmio.sim import VmioError


def fio_json(args: Sequence[str], name: str, error: type[VmioError] = VmioError) -> str:
    """Run fio (`args`, the command line); the text of its JSON output (a failure: `error`
    with fio's first error line, module doc)."""
    r = subprocess.run(list(args), capture_output=True, text=True, check=False)
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
