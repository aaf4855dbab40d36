"""One thread wake-up on this host, `[vm.disk.queue] wakeup` (crates/vmio-core/src/vdisk/queue.rs),
measured by `vmio calibrate --serve-path --server qemu-storage-daemon` (vmio.real.servepath)
with `qemu-img bench` over the serve path's RAM image.

Sources. QEMU 7.2 qemu-img.c `img_bench` (`-c` requests, `-d` in flight, `-s` buffer size,
`-t` cache mode, `-i` aio, `--image-opts`; it prints "Run completed in S seconds." timed from
the first submission to the last completion, the image open excluded), util/thread-pool.c
(`thread_pool_submit_aio`: `qemu_sem_post` wakes an idle worker, the worker's completion
`qemu_bh_schedule` → `aio_notify` → `event_notifier_set` wakes the AioContext's thread in
`ppoll`), block/io_uring.c (completions read from the ring when its fd is readable),
block/null.c (`null-co`: a request completes in its coroutine, no thread, no fd). The
engines' per-request work on the VMM thread is vmio's own estimate, crates/vmio-sim/src/
vdisk/aio.rs (threads: submit 2 us + complete 1 us; io_uring: submit 1 us + complete 0.5 us +
1 us of io_uring_enter per batch, a batch of one here).

What runs (`measure`), on the image the serve path wrote through (tmpfs):

```text
null      qemu-img bench --image-opts driver=raw,file.driver=null-co,file.size=SIZE
threads   qemu-img bench -f raw -t CACHE -i threads IMAGE
io_uring  qemu-img bench -f raw -t CACHE -i io_uring IMAGE   (left out, with a note, where
          QEMU or the kernel refuses it)
each: -d 1 -s 4096 -c COUNT, COUNT sized by a pilot run for TARGET seconds (1 s; --quick
    0.3 s); ROUNDS rounds (3; --quick 2), the kinds' order rotated each round
CACHE: none where the image takes O_DIRECT, else writeback (as the serve path)
L_kind = elapsed / COUNT, the mean time of one QD1 request
```

The closed form (`estimate`; R the RAM image's own psync 4 KiB read latency, the serve path's
`ram-randread-4k` point; work_e the engine's VMM-thread work of aio.rs):

```text
threads:  L_threads = L_null + R + work_threads + 2 wakeup   (the worker woken by the
          submission's qemu_sem_post, then the AioContext's thread by the completion's eventfd;
          the worker's preadv is the psync read R)
wakeup  = (L_threads - L_null - R - work_threads) / 2,  per round; the median of the rounds
io_uring, a cross-check: k = (L_io_uring - L_null - R - work_io_uring) / wakeup, the wake-ups
          io_uring's request paid here: 1 where the read completes on another context (the
          completion's fd wakes the thread in ppoll), 0 where io_uring_enter completes a tmpfs
          read inline (the ring's fd is readable before ppoll sleeps), 2 where the kernel punts
          it to an io-wq worker
```

Why not `(L_threads - L_io_uring) - (work_threads - work_io_uring)`, one wake-up where
io_uring pays one: on tmpfs io_uring's wake-ups are the kernel's choice (k above, 0 to 2),
so that difference is 0 to 2 wake-ups; it is kept in the record (`difference_ns`) beside k.
On this machine (Linux 6.18 in a 2-vCPU Firecracker VM, tmpfs) k came out 1.6 to 2.5 over
three runs: shmem reads are punted to io-wq, and that difference was -2.5 to +3.2 us, not a
wake-up. The null-co baseline has no thread and no fd: it takes QEMU's own block layer and
qemu-img's callback out of L_threads, leaving the read, the thread pool's work and its two
wake-ups. Three full runs here gave 6.9, 6.4 and 5.8 us (rounds' spread 18-37 %).
A round whose estimate is not positive (noise larger than the wake-ups) is kept in the record
and counted as 0; a median of 0 is an error (the machine too loaded to measure).
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio.real.calibrate import CalibrateError

QEMU_IMG = "qemu-img"
BUFFER = 4096
KINDS = ("null", "threads", "io_uring")
# aio.rs: each engine's VMM-thread work for one request in a batch of one (ns).
WORK_NS = {"threads": 2000 + 1000, "io_uring": 1000 + 500 + 1000}
# The wake-ups a thread-pool request pays (aio.rs THREAD_POOL_WAKEUPS).
THREAD_POOL_WAKEUPS = 2
TARGET_S, QUICK_TARGET_S = 1.0, 0.3
ROUNDS, QUICK_ROUNDS = 3, 2
PILOT_COUNT = 2000
MAX_COUNT = 5_000_000
_ELAPSED = re.compile(r"Run completed in ([0-9.]+) seconds")


def missing() -> str | None:
    """A one-line reason when qemu-img is not installed."""
    if shutil.which(QEMU_IMG) is None:
        return f"'{QEMU_IMG}' is not installed (apt-get install qemu-utils)"
    return None


def bench_args(kind: str, image: Path, size: int, cache: str, count: int) -> list[str]:
    """qemu-img bench's command line for one run of `kind` (module doc)."""
    common = ["-d", "1", "-s", str(BUFFER), "-c", str(count)]
    if kind == "null":
        opts = f"driver=raw,file.driver=null-co,file.size={size}"
        return [QEMU_IMG, "bench", "--image-opts", *common, opts]
    return [QEMU_IMG, "bench", "-f", "raw", "-t", cache, "-i", kind, *common, str(image)]


def elapsed_of(stdout: str) -> float:
    """The seconds of qemu-img bench's "Run completed in S seconds." line."""
    m = _ELAPSED.search(stdout)
    if m is None:
        raise CalibrateError(f"qemu-img bench printed no 'Run completed' line: {stdout.strip()!r}")
    return float(m.group(1))


class Refused(CalibrateError):
    """qemu-img bench refused an engine (its message, one line)."""


def run_bench(kind: str, image: Path, size: int, cache: str, count: int) -> float:
    """One qemu-img bench run: its elapsed seconds (Refused when it fails)."""
    args = bench_args(kind, image, size, cache, count)
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        why = " ".join((r.stderr or r.stdout).split()) or f"exit status {r.returncode}"
        raise Refused(f"qemu-img bench -i {kind}: {why}")
    return elapsed_of(r.stdout)


Runner = Callable[[str, int], float]
"""(kind, count) -> elapsed seconds."""


@dataclass(frozen=True)
class Round:
    """One round: each kind's per-request time (ns) and count."""

    lat_ns: dict[str, float]
    count: dict[str, int]


@dataclass(frozen=True)
class Estimate:
    """`estimate` of one set of per-request times (module doc), in ns."""

    wakeup_ns: float
    io_uring_wakeups: float | None
    difference_ns: float | None


def estimate(lat_ns: dict[str, float], psync_read_ns: float) -> Estimate:
    """The closed form of the module doc on one round's per-request times (ns)."""
    base = lat_ns["null"] + psync_read_ns
    w = (lat_ns["threads"] - base - WORK_NS["threads"]) / THREAD_POOL_WAKEUPS
    k = diff = None
    if "io_uring" in lat_ns:
        u = lat_ns["io_uring"]
        k = (u - base - WORK_NS["io_uring"]) / w if w > 0 else None
        diff = lat_ns["threads"] - u - (WORK_NS["threads"] - WORK_NS["io_uring"])
    return Estimate(w, k, diff)


@dataclass(frozen=True)
class Wakeup:
    """What `measure` made: the wake-up (ns, the rounds' median), the rounds, notes."""

    wakeup_ns: int
    rounds: list[Round]
    estimates: list[Estimate]
    psync_read_ns: float
    cache: str
    notes: list[str] = field(default_factory=list)

    @property
    def spread(self) -> float:
        """(max - min) / median of the rounds' estimates (0 with one round)."""
        ws = [e.wakeup_ns for e in self.estimates]
        return (max(ws) - min(ws)) / self.wakeup_ns if self.wakeup_ns else 0.0

    def comment(self) -> str:
        """The line the table's header gives it."""
        return (
            f"[queue] wakeup: qemu-img bench QD1 4k reads, (threads - null-co - psync read "
            f"{self.psync_read_ns / 1e3:.1f} us - thread pool work "
            f"{WORK_NS['threads'] / 1e3:g} us) / 2, median of {len(self.rounds)} rounds "
            f"(spread {100 * self.spread:.0f} %); vmio.real.wakeup"
        )

    def record(self) -> dict[str, Any]:
        """The measurement as serve-path-qsd.json holds it."""
        return {
            "wakeup_ns": self.wakeup_ns,
            "psync_read_ns": self.psync_read_ns,
            "cache": self.cache,
            "work_ns": WORK_NS,
            "rounds": [
                {
                    "lat_ns": r.lat_ns,
                    "count": r.count,
                    "wakeup_ns": e.wakeup_ns,
                    "io_uring_wakeups": e.io_uring_wakeups,
                    "difference_ns": e.difference_ns,
                }
                for r, e in zip(self.rounds, self.estimates, strict=True)
            ],
            "spread": self.spread,
            "notes": self.notes,
        }


def _count(seconds: float, target_s: float) -> int:
    """Requests for `target_s` given a pilot's `seconds` for PILOT_COUNT."""
    per = max(seconds, 1e-3) / PILOT_COUNT
    return max(PILOT_COUNT, min(MAX_COUNT, round(target_s / per)))


def measure_with(run: Runner, psync_read_ns: float, cache: str, quick: bool = False) -> Wakeup:
    """The rounds of the module doc on `run` (a fake in tests, `run_bench` for real)."""
    target, rounds = (QUICK_TARGET_S, QUICK_ROUNDS) if quick else (TARGET_S, ROUNDS)
    notes: list[str] = []
    kinds = list(KINDS)
    counts: dict[str, int] = {}
    for k in KINDS:
        try:
            counts[k] = _count(run(k, PILOT_COUNT), target)
        except Refused as e:
            if k != "io_uring":
                raise
            notes.append(f"io_uring left out: {e}")
            kinds.remove(k)
    done: list[Round] = []
    for r in range(rounds):
        order = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
        lat = {k: run(k, counts[k]) * 1e9 / counts[k] for k in order}
        done.append(Round({k: lat[k] for k in kinds}, {k: counts[k] for k in kinds}))
    ests = [estimate(r.lat_ns, psync_read_ns) for r in done]
    bad = [i for i, e in enumerate(ests) if e.wakeup_ns <= 0]
    if bad:
        notes.append(
            f"rounds {', '.join(str(i + 1) for i in bad)}: no positive estimate (noise larger "
            "than the wake-ups); counted as 0"
        )
    w = statistics.median(max(0.0, e.wakeup_ns) for e in ests)
    if w <= 0:
        raise CalibrateError(
            "the thread wake-up measured with qemu-img bench is not positive in most rounds "
            f"({', '.join(f'{e.wakeup_ns:.0f}' for e in ests)} ns): measure again on an idle "
            "machine"
        )
    return Wakeup(round(w), done, ests, psync_read_ns, cache, notes)


def measure(
    image: Path, size: int, cache: str, psync_read_ns: float, quick: bool = False
) -> Wakeup:
    """The wake-up on this machine, by qemu-img bench over `image` (module doc)."""
    if why := missing():
        raise CalibrateError(why)

    def run(kind: str, count: int) -> float:
        return run_bench(kind, image, size, cache, count)

    return measure_with(run, psync_read_ns, cache, quick)


def psync_read(points: Sequence[Any], name: str = "ram-randread-4k") -> float:
    """The serve path's RAM image psync 4 KiB read latency (ns) among its `points`."""
    for p in points:
        if p.job.name == name:
            return float(p.read.lat_mean_ns)
    raise CalibrateError(f"the serve path's battery has no {name} point to take the read from")
