"""A device profile of this machine's disk (S2's host row, docs/real-host.md): short fio runs
on a file of the directory under test, mapped by a fixed computation onto the parameters of
the simulator's `ssd` model (crates/vmio-sim/src/device/ssd.rs), written as a `[[device]]`
of a stack file. This is the small, one-model version; `vmio calibrate` (vmio.real.calibrate) is
the general one.

Sources: fio 3.33 (fio/HOWTO.rst: `ioengine=psync`, `direct`, `fdatasync`, `time_based`;
the JSON output's `lat_ns` and `sync.lat_ns`); Linux block/blk-sysfs.c for
/sys/block/<dev>/queue/{rotational,scheduler,max_sectors_kb,nr_requests,write_cache}
(a partition's queue is its disk's: /sys/dev/block/<major:minor> of the directory's st_dev,
its parent when it has a `partition` file);
fs/ext4/sysfs.c `journal_task` (`<none>` when the filesystem has no journal);
fs/ext4/fsync.c `ext4_sync_file` (an fdatasync of an overwrite that needs no metadata sends
only the device FLUSH, `blkdev_issue_flush`, when the filesystem has barriers).

What is measured (`measure`; every job one thread, depth 1, O_DIRECT, pread/pwrite as
iozone's `-I` passes issue them, on one file of `FILE_BYTES` fio lays out first):

```text
4 KiB random read, 4 KiB random write                 mean latency (fio lat_ns.mean)
sequential read, sequential write at 128k, 1m, 4m, 16m mean latency of one request
4 KiB random overwrite + fdatasync after each          mean fdatasync latency (sync.lat_ns)
```

The mapping (`ssd_params`), per direction d (read, write), from the five QD1 points
(L_i bytes, T_i mean ns):

```text
fit T(L) = a_d + L / B_d minimising sum(((a_d + L_i / B_d) - T_i) / T_i)^2
    (least squares of the relative error: every point counts alike, 4 KiB as 16 MiB)
ssd model at depth 1, idle, data written (ssd.rs `accept`, `read`, `write`, `flush`):
    write L:  1/write_iops + L / min(link_rate, seq_write_rate)
    read L:   1/read_iops + read_latency + piece / channel_rate + L / min(link, seq_read_rate)
    flush:    1/write_iops + page_size / channel_rate + program_latency  (after a small write:
              the open page is programmed)
so:
    seq_read_rate = B_read, seq_write_rate = B_write, link_rate = max of the two
    write_iops    = 1e9 / a_write      (the write path's only fixed cost is the command)
    read_iops     = write_iops         (one controller: a command costs the same either way)
    read_latency  = a_read - 1e9 / read_iops - 4096 / channel_rate      (at least 0)
    program_latency = flush - 1e9 / write_iops - page_size / channel_rate (at least 0)
flash made transparent (never the bottleneck at the fitted rates; the defaults kept otherwise):
    channel_rate = link_rate (8 channels carry 8 links' worth)
    page time     = max(read_latency, page_size / channel_rate + program_latency)
    dies_per_channel = ceil(ceil(page time / (page_size / link_rate)) / 8), at least 1: the
        dies, one page at a time each, read and program link_rate's worth (at most 256 per
        channel, the model's limit; `ssd_params` refuses a profile beyond it)
    write_buffer = 32 MiB (default), queue_depth = the device's hardware tags (else nr_requests)
    capacity = the block device's size
```

A flush can cost less than a write on a cloud disk (the host acknowledges it from its own
cache); the ssd model's flush costs at least one write command, so `program_latency` is then
0 and the model's flush is slower than the measured one: `Profile.residuals` lists every
point the model misses and by how much.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB = 1024
MIB = 1024 * KIB
# The sequential points of the profile (bytes per request).
SEQ_SIZES: tuple[int, ...] = (128 * KIB, MIB, 4 * MIB, 16 * MIB)
SMALL = 4 * KIB
FILE_BYTES = 256 * MIB
FILE_NAME = "vmio-profile.tmp"

# The flash the mapping keeps fixed (module doc): the model's default 8 channels and 8 KiB
# pages; the model's largest number of dies per channel (ssd.rs ENTRY).
CHANNELS = 8
PAGE_BYTES = 8 * KIB
MAX_DIES_PER_CHANNEL = 256


class ProfileError(Exception):
    """A measurement the mapping cannot turn into a device, or fio failing."""


@dataclass(frozen=True)
class Disk:
    """The block device under a directory, as the kernel describes it."""

    directory: str
    mount: str
    fstype: str
    source: str
    device: str
    size_bytes: int
    rotational: bool
    scheduler: str
    model: str
    max_sectors_kb: int
    nr_requests: int
    write_cache: str
    journal: bool | None  # ext4: has a JBD2 journal (None: not ext4 or not known)
    mount_options: str
    # The device's own command slots: the tags of its hardware queues, summed
    # (/sys/block/<disk>/mq/*/nr_tags; 0 when not blk-mq). With an I/O scheduler, nr_requests
    # counts the scheduler's requests (block/blk-mq-sched.c: 2 x min(tags, 128) by default),
    # not the device's slots.
    hw_queue_depth: int = 0

    @property
    def device_slots(self) -> int:
        """The device's command slots: its hardware queues' tags, else (no blk-mq sysfs)
        nr_requests; 0 when neither is known."""
        return self.hw_queue_depth or self.nr_requests


def mount_of(directory: Path) -> tuple[str, str, str, str]:
    """(mount point, fstype, source, options) of the mount holding `directory` (/proc/mounts:
    the longest mount point that is a prefix; the last such line wins, as the kernel
    stacks mounts)."""
    path = directory.resolve()
    best: tuple[str, str, str, str] | None = None
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        source, mnt, fstype, options = line.split()[:4]
        if path.is_relative_to(mnt) and (best is None or len(mnt) >= len(best[0])):
            best = (mnt, fstype, source, options)
    if best is None:
        raise ProfileError(f"directory {directory}: no mount in /proc/mounts holds it")
    return best


def _sys(path: Path, default: str = "") -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return default


def _block_dirs(directory: Path) -> tuple[Path, Path]:
    """(the block device holding `directory`, the whole disk it is on) as /sys directories:
    the directory's st_dev under /sys/dev/block; a partition's disk is its parent."""
    st = os.stat(directory)
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not dev.is_dir():
        raise ProfileError(
            f"directory {directory}: its filesystem is on no block device (device "
            f"{os.major(st.st_dev)}:{os.minor(st.st_dev)} is not under /sys/dev/block); "
            "accepted: a directory on a filesystem of a disk or a partition"
        )
    dev = dev.resolve()
    return dev, dev.parent if (dev / "partition").is_file() else dev


def disk_model(disk: Path) -> str:
    """The model of the disk at /sys directory `disk`, else its driver's name, else "?"."""
    model = _sys(disk / "device" / "model")
    if not model:
        driver = disk / "device" / "driver"
        model = os.path.basename(os.path.realpath(driver)) if driver.exists() else "?"
    return model


def disk_of(directory: Path) -> Disk:
    """The filesystem and block device under `directory` (/proc/mounts, /sys/dev/block)."""
    part, disk = _block_dirs(directory)
    return _describe(str(directory), mount_of(directory), part, disk)


def disk_of_device(node: Path) -> Disk:
    """A block device node itself (`/dev/loop0`): its /sys/dev/block entry by st_rdev; mount
    and fstype are the /proc/mounts line whose source is the node (empty when not mounted)."""
    st = os.stat(node)
    dev = Path(f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    if not dev.is_dir():
        raise ProfileError(f"{node} is not a block device the kernel lists under /sys/dev/block")
    dev = dev.resolve()
    real = os.path.realpath(node)
    mount = ("", "", str(node), "")
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        source, mnt, fstype, options = line.split()[:4]
        if source.startswith("/") and os.path.realpath(source) == real:
            mount = (mnt, fstype, source, options)
    return _describe(str(node), mount, dev, dev.parent if (dev / "partition").is_file() else dev)


def _describe(where: str, mount: tuple[str, str, str, str], part: Path, disk: Path) -> Disk:
    """The Disk of /sys block directories `part` (the device) and `disk` (its whole disk)."""
    mnt, fstype, source, options = mount
    q = disk / "queue"
    sched = _sys(q / "scheduler")
    active = sched[sched.find("[") + 1 : sched.find("]")] if "[" in sched else sched
    model = disk_model(disk)
    journal = None
    if fstype == "ext4":
        task = _sys(Path("/sys/fs/ext4") / part.name / "journal_task", "?")
        journal = None if task == "?" else task != "<none>"
    return Disk(
        directory=where,
        mount=mnt,
        fstype=fstype,
        source=source,
        device=part.name,
        size_bytes=int(_sys(part / "size", "0")) * 512,
        rotational=_sys(q / "rotational") == "1",
        scheduler=active,
        model=model,
        max_sectors_kb=int(_sys(q / "max_sectors_kb", "0")),
        nr_requests=int(_sys(q / "nr_requests", "0")),
        write_cache=_sys(q / "write_cache"),
        journal=journal,
        mount_options=options,
        hw_queue_depth=sum(int(_sys(h / "nr_tags", "0")) for h in sorted(disk.glob("mq/*"))),
    )


@dataclass(frozen=True)
class Point:
    """One QD1 measurement: requests of `bytes`, mean latency `ns`."""

    bytes: int
    ns: float


@dataclass(frozen=True)
class Figures:
    """What `measure` measured: per direction the 4 KiB random point then the sequential
    ones (SEQ_SIZES), and the mean fdatasync latency."""

    read: tuple[Point, ...]
    write: tuple[Point, ...]
    flush_ns: float


@dataclass(frozen=True)
class FioJob:
    name: str
    rw: str
    bs: int
    fdatasync: bool = False

    def options(self, file_bytes: int, runtime_s: float) -> list[tuple[str, str]]:
        """fio's options of the job but its file: one thread, depth 1, O_DIRECT."""
        opts = [
            ("size", str(file_bytes)),
            ("rw", self.rw),
            ("bs", str(self.bs)),
            ("direct", "1"),
            ("ioengine", "psync"),
            ("iodepth", "1"),
            ("runtime", f"{runtime_s}s"),
            ("time_based", "1"),
        ]
        return opts + ([("fdatasync", "1")] if self.fdatasync else [])

    def args(self, path: Path, file_bytes: int, runtime_s: float) -> list[str]:
        """The fio command line on file `path`."""
        opts = [("name", self.name), ("filename", str(path)), *self.options(file_bytes, runtime_s)]
        return ["fio", *(f"--{k}={v}" for k, v in opts), "--output-format=json"]

    def job_file(self, directory: str, file_bytes: int, runtime_s: float) -> str:
        """The job as a fio job file on a file of `directory` (for vmio sim)."""
        opts = [("directory", directory), *self.options(file_bytes, runtime_s)]
        return f"[{self.name}]\n" + "".join(f"{k}={v}\n" for k, v in opts)


JOBS: tuple[FioJob, ...] = (
    FioJob("randread-4k", "randread", SMALL),
    *(FioJob(f"read-{b // KIB}k", "read", b) for b in SEQ_SIZES),
    FioJob("randwrite-4k", "randwrite", SMALL),
    *(FioJob(f"write-{b // KIB}k", "write", b) for b in SEQ_SIZES),
    FioJob("flush", "randwrite", SMALL, fdatasync=True),
)


def fio_missing() -> str | None:
    if shutil.which("fio") is None:
        return "'fio' is not installed (apt-get install fio)"
    return None


def fio_version() -> str:
    r = subprocess.run(["fio", "--version"], capture_output=True, text=True, check=False)
    return r.stdout.strip()


def _run(job: FioJob, path: Path, file_bytes: int, runtime_s: float) -> dict:
    r = subprocess.run(
        job.args(path, file_bytes, runtime_s), capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        raise ProfileError(f"fio job {job.name} failed: {r.stderr.strip() or r.stdout.strip()}")
    return json.loads(r.stdout[r.stdout.find("{") :])["jobs"][0]


def point_of(job: FioJob, result: dict) -> Point:
    """The mean latency of `job`'s requests (or of its fdatasyncs) in fio's JSON job."""
    side = result["sync"] if job.fdatasync else result["write" if "write" in job.rw else "read"]
    lat = side["lat_ns"]
    if not lat.get("mean"):
        raise ProfileError(f"fio job {job.name}: no latency in its output (nothing ran)")
    return Point(job.bs, float(lat["mean"]))


def figures_of(points: dict[str, Point]) -> Figures:
    """The figures from each job's point (by job name)."""
    pick = [points[j.name] for j in JOBS]
    n = 1 + len(SEQ_SIZES)
    return Figures(tuple(pick[:n]), tuple(pick[n : 2 * n]), pick[-1].ns)


def measure(directory: Path, runtime_s: float = 2.0, file_bytes: int = FILE_BYTES) -> Figures:
    """Run the profile's fio jobs on directory/FILE_NAME (removed afterwards)."""
    path = directory / FILE_NAME
    try:
        points = {j.name: point_of(j, _run(j, path, file_bytes, runtime_s)) for j in JOBS}
    finally:
        path.unlink(missing_ok=True)
    return figures_of(points)


def mean_figures(runs: Sequence[Figures]) -> Figures:
    """The point-wise mean of several measurements of the same points."""

    def mean(points: Sequence[Point]) -> Point:
        return Point(points[0].bytes, statistics.fmean(p.ns for p in points))

    return Figures(
        tuple(mean(ps) for ps in zip(*(f.read for f in runs), strict=True)),
        tuple(mean(ps) for ps in zip(*(f.write for f in runs), strict=True)),
        statistics.fmean(f.flush_ns for f in runs),
    )


@dataclass(frozen=True)
class Line:
    """T(L) = fixed_ns + L / bytes_per_s * 1e9."""

    fixed_ns: float
    bytes_per_s: float

    def ns(self, nbytes: int) -> float:
        return self.fixed_ns + nbytes * 1e9 / self.bytes_per_s


def fit(points: Sequence[Point]) -> Line:
    """The line through `points` of least relative squared error (module doc)."""
    if len({p.bytes for p in points}) < 2 or any(p.ns <= 0 for p in points):
        raise ProfileError(
            "the fit needs points of at least two request sizes with positive latencies"
        )
    w = [1.0 / (p.ns * p.ns) for p in points]
    s0 = sum(w)
    s1 = sum(wi * p.bytes for wi, p in zip(w, points, strict=True))
    s2 = sum(wi * p.bytes * p.bytes for wi, p in zip(w, points, strict=True))
    t0 = sum(wi * p.ns for wi, p in zip(w, points, strict=True))
    t1 = sum(wi * p.bytes * p.ns for wi, p in zip(w, points, strict=True))
    det = s0 * s2 - s1 * s1
    a = (t0 * s2 - s1 * t1) / det
    slope = (s0 * t1 - s1 * t0) / det
    if slope <= 0 or a < 0:
        raise ProfileError(
            f"latencies {[(p.bytes, round(p.ns)) for p in points]} do not grow with the "
            "request size like a fixed cost plus a transfer (fit: "
            f"{a:.0f} ns + {slope:.3g} ns/byte); accepted: a positive cost and bandwidth"
        )
    return Line(a, 1e9 / slope)


def transfer_ns(nbytes: int, rate_bps: int) -> float:
    return nbytes * 1e9 / rate_bps


@dataclass(frozen=True)
class Profile:
    """The ssd parameters of a measurement, the fits they came from, and what the model then
    predicts for each measured point (QD1 closed forms of the module doc)."""

    params: dict[str, int]
    read: Line
    write: Line

    def predicted(self) -> dict[str, float]:
        p = self.params
        cmd_w = 1e9 / p["write_iops"]
        cmd_r = 1e9 / p["read_iops"]
        ch = p["channel_rate"]
        return {
            "read_fixed": cmd_r + p["read_latency"] + transfer_ns(SMALL, ch),
            "write_fixed": cmd_w,
            "flush": cmd_w + transfer_ns(PAGE_BYTES, ch) + p["program_latency"],
        }

    def residuals(self, figures: Figures) -> list[tuple[str, float, float]]:
        """(point, measured ns, model ns) for every measured point."""
        pr = self.predicted()
        r_rate = min(self.params["link_rate"], self.params["seq_read_rate"])
        w_rate = min(self.params["link_rate"], self.params["seq_write_rate"])
        out = [
            (f"read {p.bytes // KIB}k", p.ns, pr["read_fixed"] + transfer_ns(p.bytes, r_rate))
            for p in figures.read
        ]
        out += [
            (f"write {p.bytes // KIB}k", p.ns, pr["write_fixed"] + transfer_ns(p.bytes, w_rate))
            for p in figures.write
        ]
        return [*out, ("flush", figures.flush_ns, pr["flush"])]


def ssd_params(figures: Figures, disk_bytes: int, queue_depth: int) -> Profile:
    """The ssd model's parameters of `figures` (module doc), for a disk of `disk_bytes`."""
    read, write = fit(figures.read), fit(figures.write)
    link = round(max(read.bytes_per_s, write.bytes_per_s))
    cmd_ns = write.fixed_ns
    read_latency = max(0, round(read.fixed_ns - cmd_ns - transfer_ns(SMALL, link)))
    program = max(0, round(figures.flush_ns - cmd_ns - transfer_ns(PAGE_BYTES, link)))
    # Each die reads or programs one page at a time: enough dies keep the link busy.
    page_ns = max(read_latency, transfer_ns(PAGE_BYTES, link) + program)
    dies = math.ceil(page_ns / transfer_ns(PAGE_BYTES, link))
    per_channel = max(1, math.ceil(dies / CHANNELS))
    if per_channel > MAX_DIES_PER_CHANNEL:
        raise ProfileError(
            f"a page time of {page_ns:.0f} ns at {link} bytes/s needs {dies} dies to keep the "
            f"link busy; the ssd model has at most {CHANNELS * MAX_DIES_PER_CHANNEL} "
            f"({CHANNELS} channels of {MAX_DIES_PER_CHANNEL})"
        )
    iops = round(1e9 / cmd_ns)
    params: dict[str, int] = {
        "capacity": disk_bytes,
        "channels": CHANNELS,
        "dies_per_channel": per_channel,
        "page_size": PAGE_BYTES,
        "read_latency": read_latency,
        "program_latency": program,
        "channel_rate": link,
        "read_iops": iops,
        "write_iops": iops,
        "seq_read_rate": round(read.bytes_per_s),
        "seq_write_rate": round(write.bytes_per_s),
        "link_rate": link,
        "queue_depth": queue_depth,
    }
    return Profile(params, read, write)


def residual_table(profile: Profile, measured: Figures, simulated: Figures | None = None) -> str:
    """The measured points against the model's QD1 closed forms (and what vmio sim made of
    the same fio jobs), in µs, with the model's relative error."""
    rows = profile.residuals(measured)
    sim = [m for _, m, _ in profile.residuals(simulated)] if simulated else [None] * len(rows)
    out = [f"{'point':<12}{'measured us':>12}{'model us':>10}{'error':>8}{'vmio sim us':>12}"]
    for (name, m, p), s in zip(rows, sim, strict=True):
        cells = f"{name:<12}{m / 1e3:>12.1f}{p / 1e3:>10.1f}{100 * (p / m - 1):>+7.1f}%"
        out.append(cells + (f"{s / 1e3:>12.1f}" if s is not None else ""))
    return "\n".join(out) + "\n"


# The parameters in ns (the stack file's bare durations are milliseconds).
DURATIONS = ("read_latency", "program_latency")


def device_table(profile: Profile, name: str) -> dict[str, Any]:
    """The profile as a `[[device]]` table of the ssd model (`vmio.stackfile.render`)."""
    return {
        "name": name,
        "model": "ssd",
        **{k: f"{v}ns" if k in DURATIONS else v for k, v in profile.params.items()},
        # The fit is of the drive's measured behaviour, firmware included: one read and one
        # program latency (no fast and slow page types), no look-ahead beyond what the
        # measured sequential points already hold, and no wear-dependent read retries.
        **FITTED_FIRMWARE,
    }


# The ssd model's firmware keys a fitted profile turns off (its closed forms have none).
FITTED_FIRMWARE: dict[str, Any] = {"cell_type": "slc", "read_ahead": 0, "read_retry": 0.0}
