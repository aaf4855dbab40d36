"""The CPU of the NBD path thread by thread: how much of a request's CPU each of the threads
that carry it spends, and how often the server's main loop sleeps and is woken. The machine's
total per request is vmio.real.cpuwork's; this splits it by role, for the path's threads on
the cfs CPU layer (crates/vmio-core/src/nbd.rs).

Sources. Linux Documentation/filesystems/proc.rst (/proc/PID/task/TID/stat: fields 14 and 15,
utime and stime in clock ticks, counted after the command name in parentheses, which may hold
spaces; /proc/PID/task/TID/status: `voluntary_ctxt_switches`, the times the thread gave up
its CPU to wait, each followed by a wake-up; /proc/PID/task/TID/children: the thread's child
processes, with CONFIG_PROC_CHILDREN), sysconf(3) `_SC_CLK_TCK`. QEMU 7.2: the main loop is
the daemon's main thread (qemu-storage-daemon.c `main` -> `main_loop_wait` -> util/aio-posix.c
`aio_poll`, one ppoll per sleep), util/thread-pool.c `worker_thread` the pool's workers
(unnamed unless `-name debug-threads=on`, so told apart by not being the main thread; QEMU's
`call_rcu` thread is among them and idles). fio 3.33: the process vmio starts reports, its
job runs in a child process (fio's backend.c `fork_main` -> `thread_main`; the nbd engine's
libnbd calls on that child's thread).

```text
roles:  main   the server's main thread (tid == the server's pid): the NBD coroutines, the
               replies, the completions' bottom halves
        pool   the server's other threads (the thread pool's workers: the preadv / pwritev)
        client every thread of fio's job processes (children of a fio that this process
               started): libnbd's send and receive, fio's submit and reap
        fio    the fio processes this process started (their main threads: status, report)
read():  for each thread seen: (role, cpu = (utime + stime) / CLK_TCK, voluntary switches),
         kept at their last value once the thread has gone (so totals never fall);
         the totals by role
a run's window (cpuwork.Sampler with this read, the same window as the machine's total):
         per request: cpu_ns[role] = delta cpu[role] / requests,
                      wakes[main] = delta voluntary switches of main / requests
```

The main loop's split (`wake_split`): its CPU per request at depth d is `request + wakes(d)
x wake`, one ppoll return dispatching every handler ready then; over the points of one size
at QD1 (a wake-up or more a request) and at depth (fewer), least squares of the two
unknowns (closed form of two-variable linear least squares, both >= 0).

What this does not see: the kernel's work outside the threads (interrupts, softirqs run on
whatever thread was interrupted, so charged to it; the block layer's completion work in
softirq context when the CPU was idle is in no thread: the machine's total minus the threads'
is reported as `rest`); the tick's resolution (USER_HZ 100: a 1 s window of 2 CPUs holds 200
ticks, so a role below 1 % of a core is noise).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vmio.real import cpuwork
from vmio.real.calibrate import CalibrateError

MAIN, POOL, CLIENT, FIO = "main", "pool", "client", "fio"
ROLES = (MAIN, POOL, CLIENT, FIO)
# The threads are read less often than /proc/stat (cpuwork.SAMPLE_S): each read lists and
# reads every thread of the server and of fio, work the machine's total counts too.
SAMPLE_S = 0.05


def parse_stat(text: str) -> float:
    """utime + stime of a /proc/PID/task/TID/stat line, in clock ticks (module doc)."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): utime and stime are fields 14 and 15.
    return float(int(rest[11]) + int(rest[12]))


def parse_switches(text: str) -> int:
    """`voluntary_ctxt_switches` of a /proc/PID/task/TID/status text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:  # the thread or process has gone between the listing and the read
        return None


@dataclass(frozen=True)
class Totals:
    """CPU seconds and voluntary switches by role at one moment (`PathThreads.read`)."""

    cpu_s: Mapping[str, float]
    switches: Mapping[str, int]

    def __sub__(self, o: Totals) -> Totals:
        return Totals(
            {r: self.cpu_s.get(r, 0.0) - o.cpu_s.get(r, 0.0) for r in ROLES},
            {r: self.switches.get(r, 0) - o.switches.get(r, 0) for r in ROLES},
        )


class PathThreads:
    """The threads of a server process and of the fio processes this process starts
    (module doc), read through /proc (`proc`: another root, for the tests)."""

    def __init__(
        self, server_pid: int, launcher_pid: int | None = None, proc: Path = Path("/proc")
    ) -> None:
        self.server = server_pid
        self.launcher = os.getpid() if launcher_pid is None else launcher_pid
        self.proc = proc
        self.tick = float(os.sysconf("SC_CLK_TCK"))
        self.seen: dict[tuple[int, int], tuple[str, float, int]] = {}

    def _children(self, pid: int) -> list[int]:
        out: list[int] = []
        try:
            tids = os.listdir(self.proc / str(pid) / "task")
        except OSError:
            return out
        for tid in tids:
            text = _read(self.proc / str(pid) / "task" / tid / "children")
            if text:
                out += [int(c) for c in text.split()]
        return out

    def _comm(self, pid: int) -> str:
        return (_read(self.proc / str(pid) / "comm") or "").strip()

    def _take(self, pid: int, role_of_tid: dict[int, str] | str) -> None:
        try:
            tids = os.listdir(self.proc / str(pid) / "task")
        except OSError:
            return
        for t in tids:
            tid = int(t)
            base = self.proc / str(pid) / "task" / t
            stat, status = _read(base / "stat"), _read(base / "status")
            if stat is None or status is None:
                continue
            role = role_of_tid if isinstance(role_of_tid, str) else role_of_tid.get(tid, POOL)
            self.seen[(pid, tid)] = (role, parse_stat(stat) / self.tick, parse_switches(status))

    def read(self) -> Totals:
        """The totals by role now (module doc)."""
        self._take(self.server, {self.server: MAIN})
        for f in self._children(self.launcher):
            if self._comm(f) != "fio":
                continue
            self._take(f, FIO)
            for job in self._children(f):
                self._take(job, CLIENT)
        cpu = dict.fromkeys(ROLES, 0.0)
        sw = dict.fromkeys(ROLES, 0)
        for role, c, s in self.seen.values():
            cpu[role] += c
            sw[role] += s
        return Totals(cpu, sw)


@dataclass(frozen=True)
class RoleLoad:
    """A run's window split by role: CPU ns per request by role, the main loop's voluntary
    switches (wake-ups) per request, and the rest of the machine's per-request CPU (cpuwork's
    total less the roles')."""

    cpu_ns: Mapping[str, float]
    main_wakes: float
    rest_ns: float

    @classmethod
    def of(cls, delta: Totals, requests: float, total_ns: float) -> RoleLoad:
        if requests <= 0:
            raise CalibrateError("a run with no request has no CPU per request")
        per = {r: delta.cpu_s[r] * 1e9 / requests for r in ROLES}
        rest = total_ns - sum(per.values())
        return cls(per, delta.switches[MAIN] / requests, rest)

    def record(self) -> dict[str, float]:
        return {
            **{f"{r}_cpu_ns": round(v, 1) for r, v in self.cpu_ns.items()},
            "main_wakes": round(self.main_wakes, 4),
            "rest_ns": round(self.rest_ns, 1),
        }


def wake_split(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(request, wake) ns of the main loop from (wakes per request, CPU ns per request)
    points: least squares of cpu = request + wakes x wake (module doc), both >= 0 (one at 0:
    the other refitted alone). CalibrateError without two distinct wake counts."""
    if len({round(x, 6) for x, _ in points}) < 2:
        raise CalibrateError(
            "the main loop's split needs points with different wake-ups per request "
            "(QD1 and a depth)"
        )
    request, wake, through_0 = cpuwork.ols(points)
    if wake < 0:
        return max(0.0, sum(y for _, y in points) / len(points)), 0.0
    if request < 0:
        return 0.0, max(0.0, through_0)
    return request, wake


class _Point(Protocol):
    job: Any


def summary(points: Sequence[_Point], roles: Mapping[str, RoleLoad]) -> dict[str, Any]:
    """The record of a battery's split (module doc): the main loop's request and wake-up
    costs from its smallest-size points (QD1 and the depths, both directions; or the note
    why not), and each role's median CPU per request at depth and at QD1, ns."""
    mine = [(p.job, roles[p.job.name]) for p in points if p.job.name in roles]
    out: dict[str, Any] = {"sample_s": SAMPLE_S}
    if not mine:
        return out
    small = min(j.bs for j, _ in mine)
    try:
        request, wake = wake_split(
            [(r.main_wakes, r.cpu_ns[MAIN]) for j, r in mine if j.bs == small]
        )
        out["main"] = {"bs": small, "request_ns": round(request), "wake_ns": round(wake)}
    except CalibrateError as e:
        out["main"] = {"bs": small, "note": str(e)}
    for label, deep in (("depth", True), ("qd1", False)):
        rs = [r for j, r in mine if (j.iodepth > 1) == deep and j.bs == small]
        if rs:
            out[f"median_{label}_ns"] = {
                k: round(statistics.median(r.cpu_ns[k] for r in rs)) for k in ROLES
            } | {
                "rest": round(statistics.median(r.rest_ns for r in rs)),
                "main_wakes": round(statistics.median(r.main_wakes for r in rs), 3),
            }
    return out


def cfs_keys(summary_doc: Mapping[str, Any]) -> dict[str, str] | None:
    """The `[nbd]` thread keys of the cfs CPU layer (crates/vmio-core/src/nbd.rs: client_cpu,
    server_cpu, server_wake, pool_cpu) from a `summary`, or None without the main loop's
    split: the client's and the pool's CPU their medians at depth (the small size), the main
    loop's its request and wake-up costs. Per-byte costs are not in them."""
    main = summary_doc.get("main") or {}
    depth = summary_doc.get("median_depth_ns")
    if "request_ns" not in main or not depth:
        return None
    return {
        "client_cpu": f"{depth[CLIENT]}ns",
        "server_cpu": f"{main['request_ns']}ns",
        "server_wake": f"{main['wake_ns']}ns",
        "pool_cpu": f"{depth[POOL]}ns",
    }
