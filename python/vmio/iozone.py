"""iozone's record order, sizes, rates and report for the real engine (vmio.real.iozone): the
simulator's own (crates/vmio-core/src/workload/iozone.rs, through vmio._native), so the real
engine visits records in the simulator's order and prints the simulator's table.

Sources: iozone.c 3.4xx (github Thomas134/iozone, src/current/iozone.c): `random_perf_test`
draws the random passes' record order once, `srand48(0)` then for each index i a swap with
index `lrand48() % numrecs`; `print_header` and `CONTROL_STRING3` for the `-a` table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vmio.sim import native

# The table's columns in order (iozone's two header lines joined).
PHASES: tuple[str, ...] = tuple(native().iozone_phases())


def lrand48(seed: int, count: int) -> list[int]:
    """`count` outputs of lrand48 after srand48(seed)."""
    return native().iozone_lrand48(seed, count)


def shuffle(numrecs: int) -> list[int]:
    """random_perf_test's record order for `numrecs` records."""
    return native().iozone_shuffle(numrecs)


def size(flag: str, text: str) -> int:
    """Bytes of iozone's size argument of `flag` (-s, -r): KB, or a k, m, g suffix;
    ValueError naming the accepted forms otherwise."""
    return native().iozone_size(flag, text)


@dataclass(frozen=True)
class Timing:
    """One timed pass: a cell of the table."""

    file_bytes: int
    record_bytes: int
    phase: str
    bytes: int
    ns: int

    def kb_per_s(self) -> int:
        return native().iozone_rate(self.bytes, self.ns)


def table(timings: Sequence[Timing]) -> str:
    """iozone's `-a` table: two header lines, one row per (file size, record size), each row
    stopping at its first pass not run."""
    return native().iozone_table(
        [(t.file_bytes, t.record_bytes, t.phase, t.bytes, t.ns) for t in timings]
    )
