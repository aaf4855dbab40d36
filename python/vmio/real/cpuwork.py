"""The CPU time an I/O path spends per request on this machine, from the kernel's own
accounting (/proc/stat), and its fit to a line of the request's size: the `[nbd]` table's CPU
bound (crates/vmio-core/src/nbd.rs: `cores`, `cpu`, `cpu_rate`; `vmio calibrate --serve-path`,
vmio.real.servepath) and host-fs.toml's `[io_cpu]` (`vmio calibrate --host-fs`,
vmio.real.hostfscal), which the real image checks add up (vmio.real.images.Calibration).

Sources. Linux Documentation/filesystems/proc.rst (/proc/stat: the `cpu` line sums every CPU's
time in USER_HZ units: user, nice, system, idle, iowait, irq, softirq, steal, guest,
guest_nice; guest time is inside user), kernel/sched/cputime.c (the tick charges the running
CPU's state; hardirq and softirq time apart with CONFIG_IRQ_TIME_ACCOUNTING; steal: time the
hypervisor ran something else while this vCPU wanted to run), sysconf(3) `_SC_CLK_TCK`,
sched_getaffinity(2). fio 3.33 HOWTO.rst (`time_based`, `runtime`; the JSON's `job_runtime`
and `iops`).

Why the machine's busy time and not fio's `usr_cpu`/`sys_cpu`: those are fio's own threads
only; the path's CPU is also the server's threads (qemu-storage-daemon's, vmio serve's), the
kernel's work for them (socket copies, the block layer, the driver, interrupts, workqueues)
and, on a VM, the steal the hypervisor charges while they run. What a machine of `cores` CPUs
can give them all is what bounds the path's rate at depth.

What is counted (`Sampler`, `Load`):

```text
busy(t)   = (user + nice + system + irq + softirq + steal) / USER_HZ of /proc/stat's `cpu` line
            (every CPU; idle and iowait are not busy; guest is inside user), read every
            SAMPLE_S by a thread through a phase of runs (monotonic clock)
a run     = one fio process, time-based, runtime R (its JSON `job_runtime`); t_exit the moment
            the process exited. fio's start-up (its set-up, the engine's connect, a file's
            layout: 0.3 to 0.6 s here) lies between the launch and the steady run, so the
            window is taken back from the exit, where fio's tear-down and report take about
            20 ms here (fio's `timestamp_ms` against the exit):
              M = max(MARGIN_S, MARGIN_SHARE x R)
              window w = [t_exit - R + M, t_exit - M], narrowed to the samples inside it
background b = busy time per second over idle windows of the same phase (the server up, no
            fio): other processes' load (cores), measured before and after the runs
per request: cpu = (busy(w) - b |w|) / (X |w|), X fio's IOPS (the run is steady: the
            requests fio completed in the window are X |w|)
busy share = busy(w) / (|w| cores); the background's share b / cores beside it
cores     = len(sched_getaffinity(0)): the CPUs this process (and fio, and a server it
            starts) may run on
```

The fit (`fit`), over the points of one kind (the saturated ones of a path):

```text
y_i = cpu_i (ns per request), L_i the request's bytes
y = cpu + L / cpu_rate, least relative squares sum ((y_i - model_i) / y_i)^2 (`line`, the
    closed form of vmio.real.servepath's fit, one group: every direction shares both)
cpu < 0: 0, the slope refitted through 0 (a note)
slope <= 0 (the CPU does not grow with the size): cpu_rate = 0 (none), cpu = the least
    relative squares constant sum(1 / y) / sum(1 / y^2) (a note)
```

What this does not separate: a load of other processes that changes within a run (the
background is the mean of the idle windows, and a process that takes a core while the machine
is idle takes less of it while the runs keep the cores busy: above `BUSY_BACKGROUND` cores
the subtraction is not trusted, and the calibrations leave the keys out with a note);
the tick's sampling (USER_HZ 100: a window of 0.3 s on 2 CPUs holds 60 ticks, so one tick more
or less is about 2 %); the sampler itself (a read of /proc/stat every SAMPLE_S, in the
background windows too, so subtracted).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from vmio.real.calibrate import CalibrateError

SAMPLE_S = 0.02
MARGIN_S = 0.05
MARGIN_SHARE = 0.1
# A background above this many cores: other work shared the machine, the CPU is not measured.
BUSY_BACKGROUND = 0.25
# The `[nbd]` keys of the CPU bound (crates/vmio-core/src/nbd.rs) and host-fs.toml's
# `[io_cpu]` table (vmio.real.hostfscal): `cpu` a duration per request, `cpu_rate` bytes/s
# (0: none), `cores` the CPUs the work shares.
CORES, CPU, CPU_RATE = "cores", "cpu", "cpu_rate"
IO_CPU = "io_cpu"
# /proc/stat `cpu` fields: user nice system idle iowait irq softirq steal (guest, guest_nice
# are inside user and nice).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_s(stat: Path = Path("/proc/stat")) -> float:
    """The machine's busy CPU time so far, s (module doc: all CPUs, user + nice + system +
    irq + softirq + steal)."""
    with open(stat, encoding="ascii") as f:
        fields = f.readline().split()[1:]
    ticks = [int(x) for x in fields[:8]]
    return sum(ticks[i] for i in _BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def cores() -> int:
    """The CPUs this process may run on (module doc)."""
    return len(os.sched_getaffinity(0))


class Sampler:
    """busy_s() every `period` on a thread while entered (a context manager); `mark` takes a
    sample at once."""

    def __init__(
        self,
        period: float = SAMPLE_S,
        read: Callable[[], Any] = busy_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `read` gives the machine's busy seconds, or any value whose differences are
        # meaningful (vmio.real.threadcpu's totals by role): `between` subtracts two.
        self.period, self.read, self.clock = period, read, clock
        self.times: list[float] = []
        self.busy: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.idle: list[tuple[float, float]] = []
        """The background windows (`idle_window`): (seconds, busy seconds)."""

    def mark(self) -> float:
        """Take a sample now; its time."""
        with self._lock:
            t, b = self.clock(), self.read()
            # Samples stay in time order (the thread and the caller both add).
            i = bisect.bisect(self.times, t)
            self.times.insert(i, t)
            self.busy.insert(i, b)
        return t

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.mark()

    def __enter__(self) -> Sampler:
        self.mark()
        self._thread = threading.Thread(target=self._run, name="cpuwork-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.mark()

    def between(self, t0: float, t1: float) -> tuple[float, Any]:
        """(seconds, busy seconds) from the first sample at or after t0 to the last at or
        before t1 ((0, a zero difference) when no two samples are in it)."""
        with self._lock:
            i = bisect.bisect_left(self.times, t0)
            j = bisect.bisect_right(self.times, t1) - 1
            if j <= i:
                return 0.0, (self.busy[0] - self.busy[0] if self.busy else 0.0)
            return self.times[j] - self.times[i], self.busy[j] - self.busy[i]

    def idle_window(self, seconds: float) -> tuple[float, float]:
        """Sleep `seconds` (no run): a background window, kept in `idle`."""
        t0 = self.mark()
        time.sleep(seconds)
        w = self.between(t0, self.mark())
        self.idle.append(w)
        return w

    def background(self) -> float:
        """Busy cores of the idle windows (module doc: b); 0 without one."""
        seconds = sum(s for s, _ in self.idle)
        return sum(b for _, b in self.idle) / seconds if seconds > 0 else 0.0

    def run_window(self, exit_t: float, runtime_s: float) -> tuple[float, Any]:
        """(seconds, busy seconds) of the window inside a run that exited at `exit_t` after
        a time-based `runtime_s` (module doc)."""
        m = max(MARGIN_S, MARGIN_SHARE * runtime_s)
        return self.between(exit_t - runtime_s + m, exit_t - m)


@dataclass(frozen=True)
class Load:
    """A run's window: its length and busy time (s), the background subtracted (s), the
    requests fio completed in it, the machine's cores."""

    window_s: float
    busy_s: float
    background_s: float
    requests: float
    cores: int

    @classmethod
    def of(
        cls, sampler: Sampler, exit_t: float, runtime_s: float, iops: float, ncores: int
    ) -> Load:
        """The load of a run (module doc); CalibrateError when its window holds no two
        samples (a run shorter than its margins)."""
        seconds, busy = sampler.run_window(exit_t, runtime_s)
        if seconds <= 0 or iops <= 0:
            raise CalibrateError(
                f"a run of {runtime_s:g} s has no CPU window (at least {2 * MARGIN_S:g} s and "
                "two samples of /proc/stat needed): give the battery a longer budget"
            )
        return cls(seconds, busy, sampler.background() * seconds, iops * seconds, ncores)

    @property
    def cpu_ns(self) -> float:
        """CPU time per request, ns (module doc)."""
        return max(0.0, self.busy_s - self.background_s) / self.requests * 1e9

    @property
    def busy_share(self) -> float:
        """The machine's share busy over the window (the background's included)."""
        return self.busy_s / (self.window_s * self.cores)

    def record(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "busy_s": self.busy_s,
            "background_s": self.background_s,
            "requests": self.requests,
            "cores": self.cores,
            "busy_share": self.busy_share,
            "background_share": self.background_s / (self.window_s * self.cores),
            "cpu_ns": self.cpu_ns,
        }


@dataclass(frozen=True)
class CpuFit:
    """The fitted CPU line: `cpu_ns` per request, `cpu_rate` bytes/s (0: none), the notes."""

    cpu_ns: int
    cpu_rate: int
    notes: tuple[str, ...] = ()

    def at(self, nbytes: int) -> float:
        """CPU time per request of `nbytes`, ns."""
        return self.cpu_ns + (nbytes * 1e9 / self.cpu_rate if self.cpu_rate else 0.0)


def line(groups: Mapping[str, Sequence[tuple[float, float]]]) -> tuple[float, dict[str, float]]:
    """(intercept, {group: slope}) of y = intercept + x slope_g, least relative squares over
    every (x, y) of every group, the intercept shared (module doc); an intercept below 0 is
    0 and the slopes are refitted through it."""
    sums = {  # per group: A = sum w x y, B = sum w x, C = sum w x^2 with w = 1 / y^2
        g: (
            sum(x / y for x, y in pts),
            sum(x / y**2 for x, y in pts),
            sum((x / y) ** 2 for x, y in pts),
        )
        for g, pts in groups.items()
    }
    w = sum(1 / y**2 for pts in groups.values() for _, y in pts)
    wy = sum(1 / y for pts in groups.values() for _, y in pts)
    den = w - sum(b * b / c for _, b, c in sums.values())
    if den <= 0:
        raise CalibrateError(
            "the fit needs two sizes in a direction (each direction's points have one)"
        )
    intercept = max(0.0, (wy - sum(a * b / c for a, b, c in sums.values())) / den)
    return intercept, {g: (a - intercept * b) / c for g, (a, b, c) in sums.items()}


def ols(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Ordinary least squares of y = intercept + x slope over (x, y) `points` (two distinct
    x at least): (intercept, slope, the slope of the line through the origin)."""
    n = len(points)
    sx, sy = sum(x for x, _ in points), sum(y for _, y in points)
    sxx, sxy = sum(x * x for x, _ in points), sum(x * y for x, y in points)
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return (sy - slope * sx) / n, slope, sxy / sxx


def fit(points: Sequence[tuple[int, float]], what: str) -> CpuFit:
    """`cpu` and `cpu_rate` of (bytes, ns per request) points (module doc); `what` names
    them in the notes and errors."""
    pts = [(float(x), y) for x, y in points if y > 0]
    if len({x for x, _ in pts}) < 2:
        raise CalibrateError(f"{what}: the CPU fit needs points of two sizes with CPU time")
    intercept, slopes = line({what: pts})
    slope = slopes[what]
    notes = []
    if slope <= 0:
        const = sum(1 / y for _, y in pts) / sum(1 / y**2 for _, y in pts)
        notes.append(
            f"{what}: the CPU per request does not grow with the size: cpu_rate = 0 (none), "
            "cpu their least relative squares constant"
        )
        return CpuFit(round(const), 0, tuple(notes))
    if intercept == 0:
        notes.append(f"{what}: the CPU line crosses below 0 per request: cpu set to 0")
    return CpuFit(round(intercept), round(1e9 / slope), tuple(notes))


def background_note(b: float, what: str) -> str | None:
    """The note when the background took more than BUSY_BACKGROUND cores (module doc: the
    CPU's keys are then left out), else None."""
    if b <= BUSY_BACKGROUND:
        return None
    return (
        f"{what}: other processes kept {b:.2f} cores busy beside the runs (more than "
        f"{BUSY_BACKGROUND}): not measured, its keys are left out; measure again on a quieter "
        "machine"
    )


def unfit_note(error: str) -> str:
    """The note when the points do not make a fit (other processes' load changed during the
    runs, so the background subtracted took some points to 0): the keys are left out."""
    return (
        f"{error}: not measured, its keys are left out (other processes' load changed during "
        "the runs); measure again on a quieter machine"
    )


def table(ncores: int, f: CpuFit) -> dict[str, int | str]:
    """The three keys as a stack's `[nbd]` writes them."""
    return {CORES: ncores, CPU: f"{f.cpu_ns}ns", CPU_RATE: f.cpu_rate}


def io_table(f: CpuFit) -> dict[str, int | str]:
    """host-fs.toml's `[io_cpu]` table."""
    return {CPU: f"{f.cpu_ns}ns", CPU_RATE: f.cpu_rate}
