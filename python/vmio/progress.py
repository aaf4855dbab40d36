"""Progress of a long run on stderr: a study's points (`Progress`) and one long simulation
(`RunProgress`).

On a terminal: one bar redrawn in place, `[#####.....] 37/162 stripe/none/randread bs=128k
ETA 12s`. Elsewhere (a pipe, a CI log): one line each time another 10 % is done, so logs stay
short and readable. Progress goes to stderr only; stdout keeps the deterministic results.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def format_duration(seconds: float) -> str:
    """`7s`, `3m05s`, `1h02m`."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Counts finished steps out of `total` and shows them on `stream`."""

    def __init__(
        self,
        total: int,
        *,
        title: str = "",
        stream: TextIO | None = None,
        tty: bool | None = None,
        width: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(total, 0)
        self.done = 0
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else _isatty(self.stream)
        self.width = width
        self.clock = clock
        self.start = clock()
        self._last_decile = 0
        self._drawn = False

    def eta(self) -> float | None:
        """Seconds left, extrapolated from the mean time per finished step."""
        if self.done == 0:
            return None
        return (self.clock() - self.start) / self.done * (self.total - self.done)

    def bar(self, label: str = "") -> str:
        """The one-line bar for the current state."""
        filled = self.width * self.done // self.total if self.total else self.width
        eta = self.eta()
        parts = [
            f"[{'#' * filled}{'.' * (self.width - filled)}]",
            f"{self.done}/{self.total}",
        ]
        if label:
            parts.append(label)
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA ?")
        return " ".join(parts)

    def advance(self, label: str = "") -> None:
        """Record one finished step (`label` names it) and update the display."""
        self.done = min(self.done + 1, self.total)
        if self.tty:
            self.stream.write("\r" + self.bar(label) + "\x1b[K")
            self._drawn = True
        else:
            decile = 10 * self.done // self.total if self.total else 10
            if decile > self._last_decile:
                self._last_decile = decile
                prefix = f"{self.title}: " if self.title else ""
                pct = 100 * self.done // self.total if self.total else 100
                eta = self.eta() or 0.0
                self.stream.write(
                    f"vmio: {prefix}{pct}% ({self.done}/{self.total}) {label}"
                    + (f", ETA {format_duration(eta)}" if self.done < self.total else "")
                    + "\n"
                )
        self.stream.flush()

    def close(self) -> None:
        """Finish the display: end the bar's line and say how long it took."""
        elapsed = format_duration(self.clock() - self.start)
        prefix = f"{self.title}: " if self.title else ""
        if self._drawn:
            self.stream.write("\n")
        self.stream.write(f"vmio: {prefix}{self.done} of {self.total} done in {elapsed}\n")
        self.stream.flush()


class RunProgress:
    """The progress line of one long simulation, called by the simulator with the simulated
    time reached and the time the job file plans (None when a job ends on its bytes):
    `vmio: simulated 1.20 s of 3.00 s [########............] 40% ETA 4s`.

    `mode` is fio's `--eta`: `auto` draws on a terminal once the run has taken `after`
    seconds of wall time (short runs stay quiet), `always` draws anywhere (elsewhere than a
    terminal, one line each `every` seconds), `never` draws nothing. ETA = wall time so far
    × (planned − simulated) / simulated. `close` erases the line.
    """

    def __init__(
        self,
        mode: str = "auto",
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        after: float = 1.0,
        every: float = 1.0,
        width: int = 20,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream)
        self.show = mode == "always" or (mode == "auto" and self.tty)
        self.after = 0.0 if mode == "always" else after
        self.every = every
        self.width = width
        self.clock = clock
        self.start = clock()
        self._last_line = -every
        self._drawn = False

    def line(self, now_ns: int, planned_ns: int | None, elapsed: float) -> str:
        """The line for simulated time `now_ns` after `elapsed` wall seconds."""
        done = f"vmio: simulated {now_ns / 1e9:.2f} s"
        if not planned_ns:
            return f"{done} in {format_duration(elapsed)}"
        frac = min(now_ns / planned_ns, 1.0)
        filled = int(self.width * frac)
        eta = elapsed * (1 - frac) / frac if frac > 0 else None
        return (
            f"{done} of {planned_ns / 1e9:.2f} s [{'#' * filled}{'.' * (self.width - filled)}] "
            f"{int(100 * frac)}% ETA {format_duration(eta) if eta is not None else '?'}"
        )

    def __call__(self, now_ns: int, planned_ns: int | None) -> None:
        if not self.show:
            return
        elapsed = self.clock() - self.start
        if elapsed < self.after:
            return
        text = self.line(now_ns, planned_ns, elapsed)
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
            self._drawn = True
        elif elapsed - self._last_line >= self.every:
            self._last_line = elapsed
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
