"""iozone's record order and report, shared by the real engine (vmio.realiozone) and the
simulator's output (an `iozone=` job's `vmio_iozone` in the fio JSON).

Sources: iozone.c 3.4xx (github Thomas134/iozone, src/current/iozone.c): `random_perf_test`
draws the random passes' record order once, `srand48(0)` then for each index i a swap with
index `lrand48() % numrecs` (a permutation: every record once); `print_header` prints the
`-a` table's two header lines with `CONTROL_STRING3`, and `write_perf_test`,
`read_perf_test`, `random_perf_test` each append their two rates to the row (`%8lld` except
reread's `%9lld`). The Rust side is crates/vmio-core/src/workload/iozone.rs (same rules).

    srand48(s): x = s << 16 | 0x330E
    lrand48:    x' = (0x5DEECE66D * x + 0xB) mod 2^48, output x' >> 17
    rate = (bytes / seconds) >> 10   (KB/s, KiB/s)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

A = 0x5DEECE66D
C = 0xB
MASK = (1 << 48) - 1

# The table's columns in order (iozone's two header lines joined).
PHASES = ("write", "rewrite", "read", "reread", "random read", "random write")

# CONTROL_STRING3: "%16s%8s%8s%8s%8s%10s%8s%8s%8s %8s %8s%9s%9s%8s%9s" (the two literal
# spaces folded into the widths of the 10th and 11th columns).
_WIDTHS = (16, 8, 8, 8, 8, 10, 8, 8, 8, 9, 9, 9, 9, 8, 9)
_TOP = ("", "", "", "", "", "", "random", "random", "bkwd", "record", "stride", "", "", "", "")
_TITLES = (
    "KB", "reclen", "write", "rewrite", "read", "reread", "read", "write", "read", "rewrite",
    "read", "fwrite", "frewrite", "fread", "freread",
)  # fmt: skip
# Row widths: KB, reclen, then the six rates (reread is %9lld).
_ROW = (16, 8, 8, 8, 8, 9, 8, 8)


def lrand48(seed: int = 0) -> Iterator[int]:
    """lrand48's outputs after srand48(seed)."""
    x = ((seed & 0xFFFFFFFF) << 16) | 0x330E
    while True:
        x = (A * x + C) & MASK
        yield x >> 17


def shuffle(numrecs: int) -> list[int]:
    """random_perf_test's record order for `numrecs` records."""
    order = list(range(numrecs))
    draws = lrand48(0)
    for i in range(numrecs):
        j = next(draws) % numrecs
        order[i], order[j] = order[j], order[i]
    return order


@dataclass(frozen=True)
class Timing:
    """One timed pass: a cell of the table."""

    file_bytes: int
    record_bytes: int
    phase: str
    bytes: int
    ns: int

    def kb_per_s(self) -> int:
        return int(self.bytes / (max(self.ns, 1) / 1e9)) >> 10


def table(timings: Sequence[Timing]) -> str:
    """iozone's `-a` table: two header lines, one row per (file size, record size), each row
    stopping at its first pass not run."""

    def line(words: Sequence[str]) -> str:
        return "".join(f"{w:>{n}}" for w, n in zip(words, _WIDTHS, strict=True)) + "\n"

    out = line(_TOP) + line(_TITLES)
    rows: list[tuple[int, int]] = []
    for t in timings:
        if (t.file_bytes, t.record_bytes) not in rows:
            rows.append((t.file_bytes, t.record_bytes))
    for size, rec in rows:
        cells = [size >> 10, rec >> 10]
        for phase in PHASES:
            hit = [
                t for t in timings if (t.file_bytes, t.record_bytes, t.phase) == (size, rec, phase)
            ]
            if not hit:
                break
            cells.append(hit[0].kb_per_s())
        out += "".join(f"{c:>{n}}" for c, n in zip(cells, _ROW, strict=False)) + "\n"
    return out
