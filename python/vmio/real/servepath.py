"""`vmio calibrate --serve-path` (the raid0 part of `vmio validate`, docs/validation.md): the
costs of the NBD path, fio's nbd engine into `vmio serve` over a Unix socket, measured over a
RAM image so that no disk is in them, and fitted to the `[nbd]` table of `interface = "nbd"`
(crates/vmio-core/src/nbd.rs: `handoff`, `request`, `read_rate`, `write_rate`). With
`--server qemu-storage-daemon`, the same battery and fit of QEMU's own NBD server over the same
image (the server of the real image checks, vmio.real.images): its `[nbd]` table.

Sources. fio 3.33 engines/nbd.c (the `nbd` engine: libnbd's `nbd_aio_pread`/`nbd_aio_pwrite`
on the export `uri=nbd+unix:///EXPORT?socket=PATH`; `filename` is only a name, the engine
opens no file) and fio/HOWTO.rst (`psync`, `direct`, `time_based`, `runtime`, the JSON
`read`/`write` objects: `iops`, `lat_ns.mean`); vmio serve (docs/serve.md: a connection's
reader thread, the dispatcher and I/O workers, the writer thread; `cache = "none"` opens the
image with O_DIRECT, which tmpfs takes since Linux 6.6, mm/shmem.c `shmem_file_open`);
QEMU 7.2 docs/tools/qemu-storage-daemon.rst and qapi/block-core.json (BlockdevOptionsFile
`aio`, `cache.direct`; the raw format driver; `--export type=nbd`).

What runs (`battery`, `measure`):

```text
DIR (--dir, default /dev/shm) must be a tmpfs (or ramfs): the image is RAM, so what is
    measured is the path, not a disk. DIR/vmio-serve-path-PID.img (PID: this process's, so
    that calibrations running at once in one DIR each have their own), 256 MiB, is created,
    written through once (1 MiB sequential writes, vmio.real.calibrate.write_through) so that
    reads hit data, and removed afterwards (also on Ctrl-C); an existing one (a killed run's
    whose PID came back) is refused unless --force
the RAM image itself, before the server starts (fio psync, direct=1 where the file takes
    O_DIRECT, QD1): ram-rand{read,write}-{4k,128k[,1m]}  the image's own latency per size
the path (fio ioengine=nbd on the export path/disk of a `vmio serve` whose one device is the
    image: model "ram", layout single, [scheduler] name = "none", interface = "nbd",
    cache = "none", or "writeback" where the tmpfs refuses O_DIRECT, said in a note;
    --server qemu-storage-daemon: the export e0 of vmio.real.images.Server over the image,
    `--blockdev driver=file,aio=threads,cache.direct=on|off` (on where vmio serve would
    take cache = "none", off where the tmpfs refuses O_DIRECT) under `driver=raw`):
    nbd-rand{read,write}-{4k,128k[,1m]}-qd{1,16}     QD1: latency; QD16: saturation
    (1m: not with --quick)
--server qemu-storage-daemon, then: one thread wake-up (`[vm.disk.queue] wakeup`) by
    `qemu-img bench` QD1 4k reads of the same image with aio=threads and io_uring against
    QEMU's null-co driver (vmio.real.wakeup: its closed form; about 10 s, --quick 2 s, besides
    the budget)
budget: default 30 s, --quick 10 s, --budget S: the whole run. Each point time-based: the
    RAM image's the shortest run (MIN_RUNTIME_S: its latency of a few µs is steady), the
    path's an equal share of what is left (vmio.real.calibrate.Schedule: fio's start-up measured
    and taken off), SIM_RESERVE_S a path point kept for vmio sim's check
```

The fit (`fit`; d a direction, L a point's bytes, X its IOPS, T its mean latency, R(L, d) the
RAM image's psync latency of the same size and direction):

```text
saturated time per request  Y = 1 / X(QD16)  = request + L / rate_d    (the closed form of the
    [nbd] path at depth: hand-offs overlap, the serialized work does not)
request, 1 / rate_read, 1 / rate_write = the least relative squares sum ((Y_i - model_i) / Y_i)^2
    over every QD16 point, both directions sharing request (closed form, vmio.real.cpuwork.line):
    w = 1 / Y^2, per direction A_d = sum w L Y, B_d = sum w L, C_d = sum w L^2;
    request = (sum w Y - sum_d A_d B_d / C_d) / (sum w - sum_d B_d^2 / C_d)
    1 / rate_d = (A_d - request B_d) / C_d
    (request < 0: 0, the slopes refitted through 0, a note; a slope <= 0: an error)
QD1 residual  Z = T(QD1) - request - R(L, d) = handoff + L / qd1_rate_d   (the closed form at
    depth 1: the wake-ups, and the copies of one request alone on the path)
handoff, 1 / qd1_rate_read, 1 / qd1_rate_write = the same least relative squares over every
    QD1 point, both directions sharing handoff (handoff < 0: 0, the slopes refitted)
    (a residual <= 0 or a slope <= 0: handoff = max(0, median over the smallest size's QD1
    points of Z - L / rate_d), no depth-1 rate, a note)
```

Each cost is identified where it dominates. At QD16 the hand-offs overlap and the saturated
time is the serialized work, so `request` and the rates come from there, and they are charged
there (the simulator's saturated rate is 1 / (request + L / rate_d)). `handoff` only delays a
request, so it shows only at QD1, and there only the smallest size isolates it: a 4 KiB
payload's copies take about 2 µs at the fitted rates against tens of µs of wake-ups (fio's
thread wakes vmio serve's reader, the AIO completion thread wakes on the kernel's completion
and sends the reply, libnbd's poll wakes fio: crates/vmio-core/src/nbd.rs). A larger size's
QD1 residual also holds how much cheaper its copies are at depth 1 than at depth 16, which is
no hand-off: at QD16 the copies of 16 requests of 128 KiB (2 MiB a stage: the tmpfs page,
the server's buffer, the socket's skbs, the client's buffer; Linux mm/shmem.c
`shmem_file_read_iter`, net/unix/af_unix.c `unix_stream_sendmsg` and
`unix_stream_read_generic`, each a `copy_to_iter`/`copy_from_iter`) share two loaded cores
and spill out of their L2 (1 MiB a core on this machine's AMD EPYC, `lscpu`), while one
request's 128 KiB stays in it from one copy to the next. Measured (docs/performance.md, "The
serve-path calibration's QD1 errors"): with the median over every QD1 point, the 128 KiB
residuals came out negative, `handoff` 0, and the 4 KiB QD1 latencies were simulated 21 to
74 % too fast while the 128 KiB ones were 13 to 113 % too slow. With `handoff` of the
smallest size the 4 KiB points carry their wake-ups, but the larger sizes at QD1 kept the
depth's copy cost (128 KiB QD1 simulated a median +36 % too slow). So the QD1 points now
have their own per-byte rate a direction, `qd1_read_rate` and `qd1_write_rate` (the
simulator's rate of a request alone in flight on its disk, crates/vmio-core/src/nbd.rs "The
copies at depth 1"), fitted with `handoff` as one line through them: the intercept shared
by both directions is the wake-ups, each direction's slope its copies at depth 1. The
relative squares weigh the 4 KiB points most (their residuals are the smallest), so
`handoff` stays the smallest size's as before.

The path's CPU (`cpu_fit`, vmio.real.cpuwork: its accounting, window and fit): /proc/stat is
sampled through the path's points (a thread, every 20 ms); before the first and after the last
the server idles BACKGROUND_S (--quick QUICK_BACKGROUND_S, besides the budget) so that other
processes' load is known and subtracted; each QD16 point's window is taken back from fio's exit
(fio's start-up, before the steady run, is outside it):

```text
cpu_i = (busy CPU time of the window - background) / (fio's IOPS x the window)
        (user + nice + system + irq + softirq + steal over every CPU: fio, the server, the
        host kernel, the steal)
cpu, cpu_rate = cpuwork.fit over the QD16 points (both directions share both: one line)
cores = len(sched_getaffinity(0))
```

With `--server qemu-storage-daemon` the same windows are also split by thread
(vmio.real.threadcpu, read every threadcpu.SAMPLE_S): per point the CPU per request of the
server's main loop, its thread pool, fio's job (the client) and fio's own process, the main
loop's wake-ups per request, and what is in no thread (`rest`); the record's `threads` has
the main loop's request and wake-up costs (threadcpu.wake_split over the smallest size's
points) and each role's median. These are measured and recorded, not yet written as keys.

written as `[nbd]` `cores`, `cpu`, `cpu_rate` (left out, with a note, when other processes
kept more than cpuwork.BUSY_BACKGROUND cores busy in the idle windows) beside the fitted
costs (which are fitted as before, without them); the JSON's QD16 points carry their window
(`cpu`: busy share, background, requests, cpu_ns). The check's `sim_stack` gives the simulator
the three keys (`closed_form` takes the bound cores / (cpu + L / cpu_rate) beside the others
where it is given).

Not fitted: the RAM device is treated as free at depth (its psync time runs in the server's
workers, in parallel and beside the serialized path; it is taken off the QD1 latencies only);
the path's CPU is the machine's: fio, libnbd's and vmio serve's threads share its cores, so
on a 2-core machine the saturated points include that contention (a fair share of the
machine, which is what the raid0 runs of `vmio validate` meet too). One `request` serves both
directions (the table has one): when writes cost more per request than reads at 4 KiB, the
least squares split the difference, and the check below shows how far each direction lands.
Two depths only: a request of a depth between 1 and 16 copies at the depth's rate as soon as
another is in flight.

The check (`check`): `vmio sim` of every path point on `sim_stack`, the [nbd] table over a
`ram` device model (latency and bandwidth: the least relative squares line through the RAM
image's psync points, cpuwork.line with one group), beside the measured QD1 latency and QD16
IOPS.

Outputs: OUT/serve-path.toml (the `[nbd]` table, with the CPU bound's keys, under a comment
header naming the server and the machine, to paste into a stack or to give `vmio validate`'s
raid0 stack) and
OUT/serve-path.json (the server, the parameters, notes, the machine, every point with fio's
JSON and vmio sim's figures); with --server qemu-storage-daemon OUT/serve-path-qsd.toml and
OUT/serve-path-qsd.json (`out_names`), so that one calibration directory holds both tables:
vmio validate reads serve-path.toml, the real image checks serve-path-qsd.toml. The
qemu-storage-daemon table has a `[queue]` table beside `[nbd]` (`wakeup = "Nns"`, for a
disk's `[vm.disk.queue]`; its header line names the measurement), and its JSON the
measurement's rounds (`wakeup`) and `queue`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from vmio import stackfile
from vmio.real import cpuwork, images, machine, threadcpu, wakeup
from vmio.real.calibrate import (
    KIB,
    MIB,
    MIN_RUNTIME_S,
    SIM_RESERVE_S,
    TMPFS,
    CalibrateError,
    Job,
    Point,
    Schedule,
    Target,
    direct_ok,
    simulate,
    size_name,
    write_through,
)
from vmio.real.calibrate import (
    measure as measure_points,
)
from vmio.real.cpuwork import line as _line
from vmio.real.machineprofile import ProfileError, fio_missing, fio_version, mount_of
from vmio.version import __version__

DEFAULT_DIR = Path("/dev/shm")

IMAGE_SIZE = 256 * MIB
SIZES: tuple[int, ...] = (4 * KIB, 128 * KIB, MIB)
QUICK_SIZES: tuple[int, ...] = (4 * KIB, 128 * KIB)
SATURATED_QD = 16
DEPTHS: tuple[int, ...] = (1, SATURATED_QD)
DIRECTIONS = ("read", "write")
DEFAULT_BUDGET_S = 30.0
QUICK_BUDGET_S = 10.0
# fio's start-up with the nbd engine (measured here: about 0.3 s a run); the schedule measures
# it after the first point.
STARTUP_S = 0.3
# The served stack: one VM, one disk; fio's `filename` of the export.
VM, DISK = "path", "disk"
EXPORT = f"{VM}/{DISK}"
# The [nbd] keys that are durations (written in ns), in the table's order.
DURATIONS = ("handoff", "request", cpuwork.CPU)
# The idle windows around the path's points (module doc: the path's CPU), s.
BACKGROUND_S, QUICK_BACKGROUND_S = 1.0, 0.5
# The servers measured (--server): vmio serve, and QEMU's (the real image checks' server).
VMIO, QSD = "vmio", "qemu-storage-daemon"
SERVERS = (VMIO, QSD)


def image_name(pid: int | None = None) -> str:
    """The RAM image's file name in --dir of process `pid` (default: this one; module doc)."""
    return f"vmio-serve-path-{os.getpid() if pid is None else pid}.img"


def check_server(name: str) -> str:
    """`--server`: one of SERVERS."""
    if name not in SERVERS:
        raise CalibrateError(f"--server {name}: accepted: {', '.join(SERVERS)}")
    return name


def out_names(server: str) -> tuple[str, str]:
    """The table's and the record's file names of `server`'s calibration (module doc; the
    image checks read the tables by these names, vmio.real.images.Calibration)."""
    table = images.QSD_TABLE if server == QSD else images.VMIO_TABLE
    return table, table.removesuffix(".toml") + ".json"


def qsd_missing() -> str | None:
    """A one-line reason when qemu-storage-daemon is not installed."""
    if shutil.which(QSD) is None:
        return f"'{QSD}' is not installed (apt-get install qemu-system-common)"
    return None


def qsd_version() -> str:
    """`qemu-storage-daemon --version`'s first line ("qemu-storage-daemon version 7.2.22 ...")."""
    r = subprocess.run([QSD, "--version"], capture_output=True, text=True, check=False)
    return (r.stdout.strip().splitlines() or [f"{QSD} (version unknown)"])[0]


@dataclass(frozen=True)
class Probe(Job):
    """A battery job (vmio.real.calibrate.Job) on the path (`engine` "nbd": `uri` the export's,
    set once the server listens) or on the RAM image itself (`engine` "psync")."""

    engine: str = "nbd"
    uri: str | None = None

    @property
    def ioengine(self) -> str:
        return self.engine

    def options(self, size: int, runtime_ms: int | None, direct: int) -> list[tuple[str, str]]:
        """vmio.real.calibrate.Job's options, then the nbd engine's `uri` (an engine option: fio
        takes it after `ioengine`)."""
        opts = super().options(size, runtime_ms, direct)
        return opts + ([("uri", self.uri)] if self.uri else [])


def battery(quick: bool = False) -> tuple[Probe, ...]:
    """The RAM image's points, then the path's (module doc), in the order they run."""
    sizes = QUICK_SIZES if quick else SIZES
    ram = [
        Probe(f"ram-rand{d}-{size_name(bs)}", f"rand{d}", bs, 1, engine="psync")
        for d in DIRECTIONS
        for bs in sizes
    ]
    path = [
        Probe(f"nbd-rand{d}-{size_name(bs)}-qd{q}", f"rand{d}", bs, q)
        for d in DIRECTIONS
        for bs in sizes
        for q in DEPTHS
    ]
    return (*ram, *path)


def check_budget(budget_s: float | None, quick: bool, probes: Sequence[Probe]) -> float:
    """The budget in seconds (default by mode), refused below each point's shortest run (and
    a path point's simulation)."""
    budget = budget_s if budget_s is not None else QUICK_BUDGET_S if quick else DEFAULT_BUDGET_S
    sims = sum(p.engine == "nbd" for p in probes)
    low = math.ceil(len(probes) * (MIN_RUNTIME_S + STARTUP_S) + sims * SIM_RESERVE_S)
    if math.isnan(budget) or budget < low:
        raise CalibrateError(
            f"--budget {budget:g}: accepted: {low} seconds or more for the {len(probes)} "
            f"points of the serve path's battery (each at least {MIN_RUNTIME_S} s of fio and "
            "its start-up, a path point's simulation)"
        )
    return budget


def check_dir(directory: Path, force: bool) -> str:
    """The filesystem type of `directory`, which must be a tmpfs (module doc) with room for
    the image; refuses an existing image unless `force`."""
    accepted = f"accepted: a directory on a tmpfs (default {DEFAULT_DIR})"
    if not directory.is_dir():
        raise CalibrateError(f"--dir {directory}: no such directory; {accepted}")
    try:
        fstype = mount_of(directory)[1]
    except ProfileError as e:
        raise CalibrateError(f"--dir {e}; {accepted}") from None
    if fstype not in TMPFS:
        raise CalibrateError(
            f"--dir {directory} is on {fstype}, not a tmpfs: the image must be RAM so that no "
            f"disk is in the measurement; {accepted}"
        )
    image = directory / image_name()
    if image.exists() and not force:
        raise CalibrateError(
            f"--dir {directory}: {image} exists; pass --force to overwrite it (it is created "
            "and removed by the run)"
        )
    free = shutil.disk_usage(directory).free + (image.stat().st_size if image.exists() else 0)
    if free < IMAGE_SIZE:
        raise CalibrateError(
            f"--dir {directory}: {free} bytes free, the image needs {IMAGE_SIZE}; {accepted}"
        )
    return fstype


# --- the fit -------------------------------------------------------------------------------


def _side(p: Point) -> Any:
    """The point's figures in its direction (fio's `read` or `write`)."""
    return getattr(p, p.job.direction)


def _slopes(
    groups: Mapping[str, Sequence[tuple[float, float]]], what: str
) -> tuple[float, dict[str, float]]:
    """cpuwork.line, refusing a slope <= 0 (a time that does not grow with the size)."""
    intercept, slopes = _line(groups)
    for g, s in slopes.items():
        if s <= 0:
            sizes = ", ".join(f"{size_name(int(x))}: {y / 1e3:.1f} us" for x, y in groups[g])
            raise CalibrateError(
                f"{what} ({g}) do not grow with the size ({sizes}): no rate follows; "
                "measure again (a longer --budget) on an idle machine"
            )
    return intercept, slopes


@dataclass(frozen=True)
class Fit:
    """The `[nbd]` table (durations in ns, rates in bytes/s), the RAM image's device model
    for the check (`sim_stack`) and the notes."""

    nbd: dict[str, int]
    ram: dict[str, int]
    notes: tuple[str, ...]
    cpu: dict[str, int] = field(default_factory=dict)
    """The CPU bound (`cpu_fit`): `cores`, `cpu` (ns), `cpu_rate`; {} when not measured."""


def fit(points: Sequence[Point]) -> Fit:
    """The `[nbd]` parameters of the battery's `points` (module doc)."""
    path = [p for p in points if p.job.ioengine == "nbd"]
    ram = {
        (p.job.direction, p.job.bs): _side(p).lat_mean_ns for p in points if p.job.ioengine != "nbd"
    }
    sat = {
        d: [
            (p.job.bs, 1e9 / _side(p).iops)
            for p in path
            if p.job.iodepth > 1 and p.job.direction == d
        ]
        for d in DIRECTIONS
    }
    if not all(sat.values()):
        raise CalibrateError("the fit needs saturated (QD16) points of both directions")
    request, slopes = _slopes(sat, "the saturated times per request")
    notes = []
    if request == 0:
        notes.append("request: the saturated points' line crosses below 0; set to 0")
    qd1 = [p for p in path if p.job.iodepth == 1]
    missing = [p.job.name for p in qd1 if (p.job.direction, p.job.bs) not in ram]
    if not qd1 or missing:
        raise CalibrateError(
            "the fit needs QD1 points of the path and the RAM image's latency at their sizes"
            + (f" (none for {', '.join(missing)})" if missing else "")
        )
    handoff, qd1_rates = _qd1_fit(qd1, request, slopes, ram, notes)
    latency, ram_slope = _slopes(
        {"RAM image": [(bs, t) for (_, bs), t in ram.items()]}, "the psync latencies"
    )
    return Fit(
        nbd={
            "handoff": round(max(0.0, handoff)),
            "request": round(request),
            "read_rate": round(1e9 / slopes["read"]),
            "write_rate": round(1e9 / slopes["write"]),
            **{f"qd1_{d}_rate": round(1e9 / s) for d, s in qd1_rates.items()},
        },
        ram={"latency": round(latency), "bandwidth": round(1e9 / ram_slope["RAM image"])},
        notes=tuple(notes),
    )


def _qd1_fit(
    qd1: Sequence[Point],
    request: float,
    slopes: Mapping[str, float],
    ram: Mapping[tuple[str, int], float],
    notes: list[str],
) -> tuple[float, dict[str, float]]:
    """`handoff` and the per-byte costs at depth 1 ({direction: ns a byte}) of the QD1
    `points` (module doc), given `request`, the depth's `slopes` and the RAM image's
    latencies; appends its notes. Falls back to the smallest size's hand-off at the depth's
    rates (no depth-1 rate) when a residual is not positive or a slope comes out <= 0."""
    resid = {
        d: [
            (float(p.job.bs), _side(p).lat_mean_ns - request - ram[(d, p.job.bs)])
            for p in qd1
            if p.job.direction == d
        ]
        for d in DIRECTIONS
    }
    two_sizes = all(len({x for x, _ in pts}) >= 2 for pts in resid.values())
    if two_sizes and all(y > 0 for pts in resid.values() for _, y in pts):
        handoff, qd1_slopes = _line(resid)
        if all(s > 0 for s in qd1_slopes.values()):
            return handoff, qd1_slopes
    # The per-request delays where they dominate: the smallest size at QD1 (module doc).
    smallest = min(p.job.bs for p in qd1)
    handoff = statistics.median(
        y - x * slopes[d] for d, pts in resid.items() for x, y in pts if x == smallest
    )
    if handoff < 0:
        notes.append(
            f"handoff: the {size_name(smallest)} QD1 latencies are below request + copy + RAM; "
            "set to 0"
        )
    notes.append(
        "qd1_read_rate, qd1_write_rate: not fitted (the QD1 points give no positive line of "
        "their sizes); the depth's rates serve depth 1"
    )
    return handoff, {}


def cpu_fit(
    points: Sequence[Point], loads: Mapping[str, cpuwork.Load], ncores: int
) -> tuple[dict[str, int], tuple[str, ...]]:
    """The CPU bound's keys (`cores`, `cpu` in ns, `cpu_rate`) of the QD16 points' `loads`
    (by point name; module doc) and the fit's notes."""
    sat = [
        (p.job.bs, loads[p.job.name].cpu_ns)
        for p in points
        if p.job.ioengine == "nbd" and p.job.iodepth > 1 and p.job.name in loads
    ]
    try:
        f = cpuwork.fit(sat, "the path's CPU per request")
    except CalibrateError as e:
        # The load of other processes changed during the runs (the background subtracted
        # was more than some points' busy time): no bound rather than a wrong one.
        return {}, (cpuwork.unfit_note(str(e)),)
    return {cpuwork.CORES: ncores, cpuwork.CPU: f.cpu_ns, cpuwork.CPU_RATE: f.cpu_rate}, f.notes


def closed_form(
    nbd: Mapping[str, int], ram: Mapping[str, int], job: Job, cpu: Mapping[str, int] | None = None
) -> tuple[float, float]:
    """(IOPS, mean latency ns) of a path job on the [nbd] table's closed forms over the RAM
    model (crates/vmio-core/src/nbd.rs): QD1, device + handoff + request + L / qd1_rate_d
    (rate_d without it); at depth q, the closed loop's bound min(q / latency with rate_d,
    1 / the slower queue): the
    path's serialized work (request + L / rate_d) and the RAM model's copy (L / bandwidth) are
    queues, the device's latency and the hand-off only delay (latency q / X); with `cpu`
    (the CPU bound's `cores`, `cpu` ns, `cpu_rate`), the QD1 latency is at least the CPU of
    a request (cpu + L / cpu_rate, overlapping the path) and the rate at most
    cores / (cpu + L / cpu_rate). The bound is
    the simulator's rate where one of the two limits it; near the knee, where they are close,
    the path's two visits per request (submit, then reply) queue behind each other and the
    simulated rate falls a few per cent below it."""
    copy = job.bs * 1e9 / nbd[f"{job.direction}_rate"]
    qd1_rate = nbd.get(f"qd1_{job.direction}_rate") or nbd[f"{job.direction}_rate"]
    ram_copy = job.bs * 1e9 / ram["bandwidth"]
    base = ram["latency"] + ram_copy + nbd["handoff"] + nbd["request"]
    # At depth 1 a request is alone on the path and copies at its depth-1 rate; deeper, at
    # the depth's (crates/vmio-core/src/nbd.rs, "The copies at depth 1").
    lat1 = base + (job.bs * 1e9 / qd1_rate if job.iodepth == 1 else copy)
    per = 0.0  # the CPU a request takes of one core (the bound's), which the path overlaps
    if cpu and cpu.get(cpuwork.CORES):
        rate = cpu.get(cpuwork.CPU_RATE, 0)
        per = cpu[cpuwork.CPU] + (job.bs * 1e9 / rate if rate else 0.0)
        lat1 = max(lat1, per)
    if job.iodepth == 1:
        return 1e9 / lat1, lat1
    x = min(job.iodepth * 1e9 / lat1, 1e9 / max(nbd["request"] + copy, ram_copy))
    if per > 0:
        x = min(x, cpu[cpuwork.CORES] * 1e9 / per)
    return x, job.iodepth / x * 1e9


# --- the stacks ----------------------------------------------------------------------------


def stack(device: Mapping[str, Any], nbd: Mapping[str, int] | None, cache: str) -> str:
    """The one-device stack of the serve path: `device` (name "ram", model "ram" and its
    keys), layout single, [scheduler] none, one VM whose disk is `interface = "nbd"` with
    `cache`; with `nbd`, its [nbd] table."""
    doc: dict[str, Any] = {
        "host": {"cores": os.cpu_count() or 1, "hypervisor": "kvm"},
        "device": [{"name": "ram", "model": "ram", **device}],
        "volume": [{"name": "v", "layout": "single", "devices": ["ram"]}],
        "scheduler": {"name": "none"},
    }
    if nbd is not None:
        doc["nbd"] = nbd_table(nbd)
    doc["vm"] = [
        {
            "name": VM,
            "disk": [
                {
                    "name": DISK,
                    "volume": "v",
                    "interface": "nbd",
                    "cache": cache,
                    # The fitted [nbd] costs are measured with the real path's wake-ups in
                    # them: the simulator's wake-up spread is not charged on top.
                    "queue": {"wake_spread": "0ns"},
                }
            ],
        }
    ]
    return stackfile.render(doc)


def nbd_table(nbd: Mapping[str, int]) -> dict[str, int | str]:
    """The [nbd] table as a stack writes it: durations as "Nns"."""
    return {k: f"{v}ns" if k in DURATIONS else v for k, v in nbd.items()}


def queue_table(wakeup_ns: int) -> dict[str, str]:
    """The [queue] table as a stack writes it (a disk's `[vm.disk.queue]`): `wakeup` in ns,
    and no wake-up spread (`wake_spread = "0ns"`: the fitted [nbd] costs beside it are
    measured with the real path's wake-ups in them, as `stack` says)."""
    return {"wakeup": f"{wakeup_ns}ns", "wake_spread": "0ns"}


def sim_stack(f: Fit) -> str:
    """The stack `vmio sim` checks the fit on: the [nbd] table over the RAM image's model,
    with the CPU bound's keys (`f.cpu`) where they were measured."""
    dev = {
        "capacity": IMAGE_SIZE,
        "latency": f"{f.ram['latency']}ns",
        "bandwidth": f.ram["bandwidth"],
    }
    return stack(dev, {**f.nbd, **f.cpu}, "none")


# --- the run -------------------------------------------------------------------------------


class _Phases(Schedule):
    """vmio.real.calibrate.Schedule, but while `shortest` (the RAM image's points) each point runs
    MIN_RUNTIME_S: a psync latency of a few µs is steady over the hundreds of thousands of
    requests of that run, and the path's points get the rest. fio's start-up is measured
    throughout."""

    shortest = True

    def __init__(self, deadline: float, clock: Any = time.monotonic) -> None:
        super().__init__(deadline, clock)
        self.exits: list[float] = []
        """When each point's fio exited (the clock's time): the CPU windows' ends."""

    def runtime_ms(self, points_left: int) -> int:
        if self.shortest:
            return round(1000 * MIN_RUNTIME_S)
        return super().runtime_ms(points_left)

    def finished(self, wall_s: float, runtime_s: float) -> None:
        self.exits.append(self.clock())
        super().finished(wall_s, runtime_s)


@dataclass(frozen=True)
class ServePath:
    """What `measure` made: the fit, the measured points, vmio sim's run of each path point on
    `sim_stack`, and the two files."""

    fit: Fit
    points: list[Point]
    simulated: list[Point]
    toml_path: Path
    json_path: Path
    wakeup: wakeup.Wakeup | None = None
    loads: Mapping[str, cpuwork.Load] = field(default_factory=dict)
    """The QD16 points' CPU windows (module doc), by point name."""
    roles: Mapping[str, threadcpu.RoleLoad] = field(default_factory=dict)
    """qemu-storage-daemon's path points' CPU by thread role (vmio.real.threadcpu)."""


@contextmanager
def _served(
    server: str, image: Path, cache: str, work: Path
) -> Iterator[tuple[str, str, int | None]]:
    """`image` served by `server` on a socket in `work` (module doc), as (fio's uri, the
    export's name, qemu-storage-daemon's pid or None); stopped on leaving."""
    sock = work / "nbd.sock"
    if server == QSD:
        how = images.Serve("threads", None, direct=cache == "none")
        with images.Server(images.RAW_OFF, how, image, IMAGE_SIZE, sock) as srv:
            yield srv.uri, images.EXPORT, (srv.proc.pid if srv.proc is not None else None)
        return
    from vmio.real import serve

    dev = {"path": str(image), "size": IMAGE_SIZE}
    (work / "stack.toml").write_text(stack(dev, None, cache), encoding="utf-8")
    proc = serve.start_vmio(work / "stack.toml", sock)
    try:
        yield f"nbd+unix:///{EXPORT}?socket={sock}", EXPORT, None
    finally:
        serve._stop(proc)


def _run_path(
    image: Path,
    probes: Sequence[Probe],
    cache: str,
    schedule: _Phases,
    stream: TextIO,
    server: str = VMIO,
    background_s: float = BACKGROUND_S,
) -> tuple[list[Point], dict[str, cpuwork.Load], float, dict[str, threadcpu.RoleLoad]]:
    """Serve `image` with `server` (`_served`) and run the path's probes on its export; the
    QD16 points' CPU windows (module doc), by name, the background (busy cores), and with
    qemu-storage-daemon every point's CPU by thread role (vmio.real.threadcpu)."""
    ncores = cpuwork.cores()
    with tempfile.TemporaryDirectory(prefix="vmio-serve-path-") as tmp:
        with _served(server, image, cache, Path(tmp)) as (uri, name, pid):
            # fio's filename of an nbd job is the export's name: the engine opens no file.
            export = Target(
                Path(name), False, True, 0, IMAGE_SIZE, IMAGE_SIZE, name, "", None, True
            )
            on = [replace(p, uri=uri) for p in probes]
            threads = None
            if pid is not None:
                reader = threadcpu.PathThreads(pid)
                threads = cpuwork.Sampler(threadcpu.SAMPLE_S, reader.read)
            with cpuwork.Sampler() as sampler, threads or nullcontext():
                sampler.idle_window(background_s)
                first = len(schedule.exits)
                points = measure_points(export, on, schedule, stream)
                sampler.idle_window(background_s)
    exits = schedule.exits[first:]
    loads = {
        pt.job.name: cpuwork.Load.of(sampler, t, pt.runtime_s, pt.iops, ncores)
        for pt, t in zip(points, exits, strict=True)
        if pt.job.iodepth > 1
    }
    roles = {}
    if threads is not None:
        for pt, t in zip(points, exits, strict=True):
            seconds, delta = threads.run_window(t, pt.runtime_s)
            total = loads.get(pt.job.name)
            if total is None:  # a QD1 point's window, its first use
                try:
                    total = cpuwork.Load.of(sampler, t, pt.runtime_s, pt.iops, ncores)
                except CalibrateError:  # no window: no split either
                    continue
            if seconds > 0 and pt.iops > 0:
                # The roles' window is their own samples'; per request over its requests.
                roles[pt.job.name] = threadcpu.RoleLoad.of(delta, pt.iops * seconds, total.cpu_ns)
    # The battery's probes (without the socket of a server that is gone).
    points = [replace(pt, job=p) for pt, p in zip(points, probes, strict=True)]
    return points, loads, sampler.background(), roles


def describe_server(server: str, cache: str) -> str:
    """The server as the header and the record name it."""
    if server == QSD:
        direct = "on" if cache == "none" else "off"
        return f"{qsd_version()} (raw, aio=threads, cache.direct={direct})"
    return f'vmio serve (cache = "{cache}")'


def header(directory: Path, fstype: str, when: str, server: str = "vmio serve") -> list[str]:
    """serve-path.toml's comment lines: what was measured (`server`, as `describe_server`
    names it), where and on which machine."""
    u = os.uname()
    fio = fio_version()
    return [
        f"# vmio calibrate --serve-path {__version__}: fio's nbd engine into {server} over "
        f"{directory / image_name()} ({fstype}), {when}",
        f"# machine: {u.nodename}, {os.cpu_count()} cores, kernel {u.release}, {fio}",
    ]


def measure(
    directory: Path = DEFAULT_DIR,
    out_dir: Path = Path("."),
    quick: bool = False,
    budget_s: float | None = None,
    progress: TextIO | None = None,
    force: bool = False,
    server: str = VMIO,
) -> ServePath:
    """Measure `server`'s path over a RAM image in `directory`, fit [nbd], check it with vmio
    sim, write out_dir/serve-path.toml and serve-path.json (qemu-storage-daemon:
    serve-path-qsd.*; module doc)."""
    stream = progress or sys.stderr
    check_server(server)
    qsd = server == QSD
    if why := fio_missing() or (qsd_missing() or wakeup.missing() if qsd else None):
        raise CalibrateError(why)
    fstype = check_dir(directory, force)
    probes = battery(quick)
    path_probes = [p for p in probes if p.engine == "nbd"]
    budget = check_budget(budget_s, quick, probes)
    start = time.monotonic()
    background = QUICK_BACKGROUND_S if quick else BACKGROUND_S
    # The idle windows of the CPU accounting are besides the budget (module doc).
    schedule = _Phases(start + 2 * background + budget - SIM_RESERVE_S * len(path_probes))
    image = directory / image_name()
    notes: list[str] = []
    try:
        image.write_bytes(b"")
        direct = int(direct_ok(image))
        cache = "none" if direct else "writeback"
        if not direct:
            how = "cache.direct=off" if server == QSD else 'cache = "writeback"'
            notes.append(f"{directory} refuses O_DIRECT: served with {how}")
        stream.write(
            f"vmio: calibrate --serve-path: writing {image} through ({IMAGE_SIZE} bytes)\n"
        )
        write_through(image, IMAGE_SIZE, direct)
        ram = Target(image, False, True, direct, IMAGE_SIZE, IMAGE_SIZE, "ram", fstype, None, True)
        points = measure_points(ram, [p for p in probes if p.engine != "nbd"], schedule, stream)
        schedule.shortest = False
        path_points, loads, bg, roles = _run_path(
            image, path_probes, cache, schedule, stream, server, background
        )
        points += path_points
        wake = None
        if qsd:
            stream.write(
                "vmio: calibrate --serve-path: one thread wake-up by qemu-img bench over "
                f"{image} (threads, io_uring, null-co)\n"
            )
            psync = wakeup.psync_read(points)
            wake = wakeup.measure(image, IMAGE_SIZE, cache, psync, quick)
            notes += wake.notes
    finally:
        image.unlink(missing_ok=True)
    f = fit(points)
    ncores = cpuwork.cores()
    cpu, cpu_notes = cpu_fit(points, loads, ncores)
    if busy := cpuwork.background_note(bg, "the path's CPU"):
        cpu, cpu_notes = {}, (busy,)
    f = replace(f, notes=(*notes, *f.notes, *cpu_notes), cpu=cpu)
    simulated = simulate(sim_stack(f), [p for p in points if p.job.ioengine == "nbd"])
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    out_dir.mkdir(parents=True, exist_ok=True)
    toml_path, json_path = (out_dir / n for n in out_names(server))
    served = describe_server(server, cache)
    head = [*header(directory, fstype, when, served), *(f"# note: {n}" for n in f.notes)]
    doc: dict[str, Any] = {"nbd": nbd_table({**f.nbd, **f.cpu})}
    if server == QSD:
        # QEMU's NBD server asks a read's block status before reading it (nbd/server.c
        # nbd_co_send_sparse_read): a qcow2 image's second lookup (crates/vmio-core/src/nbd.rs).
        doc["nbd"]["block_status"] = True
    if wake is not None:
        head.append(f"# {wake.comment()}")
        doc["queue"] = queue_table(wake.wakeup_ns)
    split = threadcpu.summary(points, roles) if roles else None
    if split and (keys := threadcpu.cfs_keys(split)):
        # Not keys of this table: under [cpu] model = "cfs" they replace `request` (the same
        # serialized work, which the main loop would otherwise pay twice).
        cfs = ", ".join(f'{k} = "{v}"' for k, v in keys.items())
        head.append(f'# under [cpu] model = "cfs": [nbd] {cfs}, request = "0ns" (threadcpu)')
    stackfile.write(toml_path, doc, [h.removeprefix("# ") for h in head])
    sims = {s.job.name: s for s in simulated}
    record = {
        "vmio_calibrate_serve_path": {
            "version": __version__,
            "date": when,
            "server": server,
            "served_by": served,
            "dir": str(directory),
            "fstype": fstype,
            "image_size": IMAGE_SIZE,
            "cache": cache,
            "quick": quick,
            "budget_s": budget,
            "elapsed_s": round(time.monotonic() - start, 3),
            "nbd": f.nbd,
            "cpu": f.cpu,
            "background_cores": bg,
            "ram": f.ram,
            "notes": list(f.notes),
            "queue": None if wake is None else {"wakeup": wake.wakeup_ns},
            "wakeup": None if wake is None else wake.record(),
            "threads": split,
        },
        "machine": machine.describe([str(directory)]),
        "points": [
            {
                **_point_record(p, f, sims.get(p.job.name), loads.get(p.job.name)),
                **({"threads": roles[p.job.name].record()} if p.job.name in roles else {}),
            }
            for p in points
        ],
    }
    json_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return ServePath(f, points, simulated, toml_path, json_path, wake, loads, roles)


def _point_record(
    p: Point, f: Fit, sim: Point | None, load: cpuwork.Load | None = None
) -> dict[str, Any]:
    """A point as serve-path.json holds it: vmio.real.calibrate's record, for a path point its
    closed form and vmio sim's figures on `sim_stack`, for a QD16 point its CPU window."""
    rec: dict[str, Any] = {
        **p.record(),
        "closed_form": None,
        "sim": None,
        "cpu": load.record() if load else None,
    }
    if p.job.ioengine == "nbd":
        iops, lat = closed_form(f.nbd, f.ram, p.job, f.cpu)
        rec["closed_form"] = {"iops": iops, "lat_mean_ns": lat}
    if sim is not None:
        rec["sim"] = {"iops": sim.iops, "lat_mean_ns": sim.lat_mean_ns}
    return rec


def check(sp: ServePath) -> dict[str, list[float]]:
    """vmio sim against the measurements: `qd1_lat` the relative errors (sim / real - 1) of
    the QD1 points' mean latency, `saturated_iops` of the QD16 points' IOPS."""
    real = {p.job.name: p for p in sp.points}
    out: dict[str, list[float]] = {"qd1_lat": [], "saturated_iops": []}
    for s in sp.simulated:
        r = real[s.job.name]
        if s.job.iodepth == 1:
            out["qd1_lat"].append(s.lat_mean_ns / r.lat_mean_ns - 1)
        else:
            out["saturated_iops"].append(s.iops / r.iops - 1)
    return out


def report(sp: ServePath) -> str:
    """What `vmio calibrate --serve-path` prints: the [nbd] table, its notes, the check."""
    lines = [sp.toml_path.read_text(encoding="utf-8").rstrip()]
    labels = {"qd1_lat": "QD1 mean latency", "saturated_iops": f"QD{SATURATED_QD} IOPS"}
    for what, errs in check(sp).items():
        worst = max(errs, key=abs)
        lines.append(
            f"vmio sim on the table over the RAM image's model, {labels[what]}: median |error| "
            f"{100 * statistics.median(map(abs, errs)):.1f} %, worst {100 * worst:+.1f} %"
        )
    if sp.loads:
        shares = ", ".join(
            f"{name} {x.cpu_ns / 1e3:.1f} us ({100 * x.busy_share:.0f} % busy)"
            for name, x in sp.loads.items()
        )
        lines.append(f"the path's CPU per request at QD{SATURATED_QD}: {shares}")
    lines.append(f"written: {sp.toml_path}, {sp.json_path}")
    return "\n".join(lines) + "\n"
