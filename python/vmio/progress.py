"""Progress of a long run on stderr.

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


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
