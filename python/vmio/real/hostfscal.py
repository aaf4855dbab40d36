"""`vmio calibrate --host-fs`: what the host filesystem holding the images costs on this
machine, measured by fio and solved in closed form for the two CPU-time parameters of a
`[[volume]]` with `filesystem = "ext4" | "xfs"` (crates/vmio-core/src/hostfs/mod.rs,
`ALLOC_COST` and `CONVERT_COST`: the block allocation of a direct write into a hole, and the
unwritten-extent conversion at the write's completion; estimates of 5 and 10 us without it).

Sources. Linux 6.x: fs/ext4/file.c `ext4_dio_write_iter` / `ext4_dio_write_checks` (a direct
write into a hole takes `i_rwsem` exclusively; into unwritten or written blocks shared);
fs/ext4/inode.c `ext4_iomap_alloc` -> `ext4_map_blocks` (below `i_size` the blocks are
allocated as an unwritten extent, `EXT4_GET_BLOCKS_IO_CREATE_EXT`, in a journal handle: the
block allocator, the extent insert, the bitmap, group descriptor and inode dirtied);
fs/ext4/file.c `ext4_dio_write_end_io` -> fs/ext4/extents.c
`ext4_convert_unwritten_extents` (the extent split or marked written in a handle of its own);
fs/iomap/direct-io.c `__iomap_dio_rw` (`wait_for_completion = is_sync_kiocb(iocb) ||
(dio_flags & IOMAP_DIO_FORCE_WAIT)`: a synchronous kiocb, pwrite(2), waits for its I/O in the
submitting task and `iomap_dio_rw` then runs `iomap_dio_complete` -> the filesystem's `end_io`
there, before the system call returns; an asynchronous one, `io_submit`, has its completion
punted to the superblock's `s_dio_done_wq`); fs/xfs/xfs_iomap.c `xfs_iomap_write_direct` and
`xfs_iomap_write_unwritten` (XFS: the same two steps). glibc posix_fallocate(3) on a
filesystem with fallocate(2) (mode 0: the range allocated as unwritten extents,
`ext4_fallocate` / `xfs_alloc_file_space`); ftruncate(2) (a sparse file: holes only).
fio 3.33 fio/HOWTO.rst (`ioengine=psync`: pwrite(2), one request at a time; `direct=1`
O_DIRECT; `rw=randwrite` with fio's random map, which writes every block once before any
block twice (`norandommap` off); `fallocate=none`: fio preallocates nothing; `time_based`,
`runtime`; the JSON `write.lat_ns.mean`, submission to completion).

What runs (`measure`), in a new directory under `--dir` (default /var/tmp), removed
afterwards (also on an error or Ctrl-C):

```text
S = FILE_SIZE (1 GiB; --quick QUICK_FILE_SIZE, 256 MiB: writes of 1.5 s at QD1 stay below its
    65,536 blocks on a disk slower than 23 us a write, so every write of a new file meets a
    new block; a run that wrote more blocks than S has gets a note)
--dir must be on ext4 or xfs (the simulator's host filesystems) with room for 1 + 2 x rounds
    files of S and MARGIN
written: one file of S, posix_fallocate, then written through once (fio 1 MiB
    sequential writes, direct: vmio.real.calibrate.write_through); kept for every round
rounds (ROUNDS 3, --quick 2): each KIND once, in the order KINDS on even rounds and the
    opposite on odd ones (the disk's drift over the run falls on every kind alike):
  holes:     a new file of S by ftruncate (every block a hole)
  unwritten: a new file of S by posix_fallocate (every block unwritten)
  written:   the written file
  fio: ioengine=psync direct=1 rw=randwrite bs=4k iodepth=1 fallocate=none size=S
       time_based runtime=RUNTIME_S (4 s; --quick 1.5 s)
  t(kind, round) = the write's lat_ns.mean
  then, on the written file, the host kernel's CPU per direct I/O request (IO_JOBS, in
  the opposite order on odd rounds): fio ioengine=libaio direct=1 time_based runtime
  IO_RUNTIME_S (2 s; --quick 1 s) of randread and randwrite bs=4k iodepth=16, read and
  write bs=1m iodepth=4, each with its CPU window (vmio.real.cpuwork: /proc/stat's busy time
  taken back from fio's exit, less the background of idle windows of BACKGROUND_S before the
  rounds and after them)
the new files are removed with the directory at the end, not between runs: freeing a 1 GiB
    file of unwritten extents took 2 to 5 s here (ext4 mounted with `discard` sends the freed
    ranges to the disk), work that would fall on the next run
```

The closed form (`solve`). A psync 4 KiB O_DIRECT write at QD1 below `i_size` takes, by the
sources above, with t_io the device's write and the system call's own path:

```text
into a hole:        alloc + t_io + convert   (ext4_iomap_alloc allocates it unwritten, the
                                              sync kiocb converts it in end_io before returning)
into unwritten:             t_io + convert
into written:               t_io
t_kind       = median over the rounds of t(kind, round)        (spread: (max - min) / median)
alloc_cost   = max(0, t_holes - t_unwritten)
convert_cost = max(0, t_unwritten - t_written)
```

The host kernel's CPU per direct I/O request (`solve_io`, vmio.real.cpuwork):

```text
cpu(job, round) = (busy CPU time of its window - background) / (fio's IOPS x the window)
cpu_job         = median over the rounds
io_cpu, io_cpu_rate = cpuwork.fit of (bs, cpu_job) over the four jobs (reads and writes
    share one line); per round the same fit of that round's jobs (the record's
    `io_cpu_rounds`: the spread)
```

This is the host kernel's CPU per direct I/O request to this disk (block layer, driver,
interrupt, the waiting thread's sleep and wake-up) and fio's own per request, which a path's
`[nbd] cpu` adds: a served image's request makes the same I/O to the disk from the server's
thread (vmio.real.images.Calibration adds the two).

A cost that comes out negative (the kinds' difference drowned in the disk's noise) is 0, with
a note. Each round's own differences are kept beside them (the record's `rounds_costs_ns`),
so the spread of the costs shows too.

What this does not separate:
- the journal: the kinds differ in the metadata blocks their writes dirty, which jbd2 writes
  at its next commit (every 5 s; the run makes no fdatasync): that I/O is in the figures only
  as far as it slows the disk beside the writes;
- the disk's own first write from the filesystem's conversion (below: both are costs of a
  write into a new block, and only their sum over the 4 KiB writes is identified);
- the completion's context: psync is a synchronous kiocb, as QEMU's `aio=threads` (pwritev(2)
  from its worker threads); with `aio=native` or `io_uring` the conversion runs in a
  workqueue after the I/O (`s_dio_done_wq`), a hand-off more.

**The disk's thin provisioning.** On a thinly provisioned disk (this machine's cloud volume;
ext4 mounted with `discard`, so freed blocks are trimmed to the backend) a write into a block
the backend does not hold costs more than an overwrite, and more the more blocks it covers
(docs/validation.md; the device layer `thin_*` keys, crates/vmio-sim/src/device/thin.rs).
The holes and the unwritten files both take new blocks, so that cost cancels in alloc_cost
and falls into convert_cost for the 4 KiB writes; a larger write pays it per block:

```text
each round, for bs in THIN_SIZES (the opposite order on odd rounds): a new file of
    THIN_FILE (--quick QUICK_THIN_FILE) by posix_fallocate, one fio psync direct sequential
    pass of bs over it (FIRST), then the same pass again (OVER); the files stay until the
    end (a freed block is trimmed later: taken again at once it would be no new block)
extra(bs)      = median over the rounds of lat(FIRST) - lat(OVER)
extra(bs)      = intercept + (bs / THIN_BLOCK) x block_cost     (least squares; THIN_BLOCK
                 64 KiB, the chunk of lvm2's thin pools, an estimate: the backend's is
                 unknown)
first_share    = the unwritten kind's writes that were the first into their THIN_BLOCK
                 (first_touch_share: fio's random map writes m = min(writes, n) distinct of
                 n = S / 4 KiB blocks; a THIN_BLOCK of k = 16 of them is untouched with
                 probability prod_{i<k} (n - m - i) / (n - i))
[thin] convert_cost = max(0, convert_cost - first_share x block_cost): what the conversion
                 costs once the device charges each new block (the intercept, a cost per
                 write into new blocks, stays in convert_cost with the filesystem's own)
```

The `[thin]` table (written when block_cost > 0): `thin_block`, `thin_block_cost`,
`thin_request = 0ns` and `thin_zero = false` (the per-write part and a partial block's zero
fill are in convert_cost already) for the image file's `[[device]]`, and the `convert_cost`
its `[[volume]]` takes with them.

Outputs (into `-o OUT`, default ./vmio-calibration; an existing file is refused unless
--force): OUT/host-fs.toml, a header comment (the tool, the date, the machine, the directory
and its device, the three latencies with their spreads, the CPU per request) and two tables:
`[volume]` with `filesystem`, `alloc_cost` and `convert_cost` as a stack's `[[volume]]` takes
them (durations "<n>ns"), which vmio.real.images.Calibration merges into its predictions'
volume, and `[io_cpu]` with `cpu = "<n>ns"` and `cpu_rate` (bytes/s, 0: none), which it adds
to the `[nbd]` CPU bound (left out, with a note, when other processes kept more than
cpuwork.BUSY_BACKGROUND cores busy in the idle windows); and OUT/host-fs.json, the settings,
the costs, the machine and every run with fio's JSON job (an I/O run with its CPU window).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from vmio import stackfile
from vmio.real import cpuwork, fiorun, images, machine
from vmio.real.calibrate import DEFAULT_OUT, CalibrateError, write_through
from vmio.real.machineprofile import ProfileError, disk_of, fio_missing, fio_version
from vmio.sim import format_size
from vmio.version import __version__

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
DEFAULT_DIR = images.DEFAULT_DIR
FILE_SIZE, QUICK_FILE_SIZE = GIB, 256 * MIB
# Free space kept beyond the files (the filesystem's own metadata, the journal).
MARGIN = 256 * MIB
BS = 4 * KIB
RUNTIME_S, QUICK_RUNTIME_S = 4.0, 1.5
ROUNDS, QUICK_ROUNDS = 3, 2
HOLES, UNWRITTEN, WRITTEN = "holes", "unwritten", "written"
KINDS: tuple[str, ...] = (HOLES, UNWRITTEN, WRITTEN)
FILESYSTEMS = images.HOST_FILESYSTEMS
TABLE, RECORD = images.HOST_FS_TABLE, "host-fs.json"
# The host kernel's CPU per direct I/O request (module doc): the jobs on the written file.
IO_RUNTIME_S, QUICK_IO_RUNTIME_S = 2.0, 1.0
BACKGROUND_S, QUICK_BACKGROUND_S = 1.0, 0.5
IO_CPU = cpuwork.IO_CPU
# The keys of the table as a stack's [[volume]] takes them (crates/vmio-core/src/hostfs/mod.rs
# ALLOC_COST, CONVERT_COST; hostfs::KEY).
ALLOC, CONVERT = "alloc_cost", images.CONVERT_COST
# The disk's first writes (module doc, "The disk's thin provisioning"): sequential psync writes
# of these sizes into a new posix_fallocate'd file, then over it again.
THIN_BLOCK = 64 * KIB
THIN_SIZES: tuple[int, ...] = (64 * KIB, 256 * KIB, MIB)
THIN_FILE, QUICK_THIN_FILE = 256 * MIB, 64 * MIB
FIRST, OVER = "first", "over"
THIN = images.THIN


# --- checks --------------------------------------------------------------------------------


def space_needed(size: int = FILE_SIZE, rounds: int = ROUNDS) -> int:
    """Bytes the run holds at most: the written file, each round's two new files (the
    unwritten one all of it, the holes one at most all of it), its first-write files
    (THIN_SIZES of the thin file's size) and MARGIN."""
    thin = THIN_FILE if size >= FILE_SIZE else QUICK_THIN_FILE
    return (1 + 2 * rounds) * size + rounds * len(THIN_SIZES) * thin + MARGIN


def check_dir(directory: Path, size: int = FILE_SIZE, rounds: int = ROUNDS) -> str:
    """The filesystem type of `directory`, which must exist, be on ext4 or xfs and have
    `space_needed(size, rounds)` bytes free."""
    accepted = f"accepted: a directory on {' or '.join(FILESYSTEMS)} (default {DEFAULT_DIR})"
    if not directory.is_dir():
        raise CalibrateError(f"--dir {directory}: no such directory; {accepted}")
    fstype = images.mounted_fstype(directory)
    if fstype not in FILESYSTEMS:
        on = f"on {fstype}" if fstype else "on no filesystem /proc/mounts lists"
        raise CalibrateError(
            f"--dir {directory} is {on}, not a host filesystem the simulator models; {accepted}"
        )
    free = shutil.disk_usage(directory).free
    need = space_needed(size, rounds)
    if free < need:
        raise CalibrateError(
            f"--dir {directory}: {format_size(free)} free, the run needs {format_size(need)} "
            f"({1 + 2 * rounds} files of {format_size(size)} and {rounds * len(THIN_SIZES)} "
            f"first-write files at most); {accepted} and that much free space"
        )
    return fstype


def out_paths(out_dir: Path, force: bool) -> tuple[Path, Path]:
    """OUT/host-fs.toml and OUT/host-fs.json; an existing one is refused unless `force`."""
    paths = (out_dir / TABLE, out_dir / RECORD)
    for p in paths:
        if p.exists() and not force:
            raise CalibrateError(f"{p} exists; pass --force to overwrite it")
    return paths


# --- the runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One fio run: the kind of file, the round, the runtime, the write's IOPS and mean
    latency (lat_ns: submission to completion) and median completion latency, fio's JSON
    job, the number of writes."""

    kind: str
    round: int
    runtime_s: float
    iops: float
    lat_mean_ns: float
    clat_p50_ns: float
    fio: Mapping[str, Any]
    ios: int = 0
    """the writes the run made"""

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "fio": dict(self.fio)}


@dataclass(frozen=True)
class IoJob:
    """A job of the host kernel's CPU per request (module doc): fio libaio direct=1."""

    rw: str
    bs: int
    iodepth: int

    @property
    def name(self) -> str:
        size = f"{self.bs // MIB}m" if self.bs >= MIB else f"{self.bs // KIB}k"
        return f"io-{self.rw}-{size}-qd{self.iodepth}"

    @property
    def direction(self) -> str:
        return "write" if "write" in self.rw else "read"


IO_JOBS: tuple[IoJob, ...] = (
    IoJob("randread", BS, 16),
    IoJob("randwrite", BS, 16),
    IoJob("read", MIB, 4),
    IoJob("write", MIB, 4),
)


@dataclass(frozen=True)
class IoRun:
    """One run of an IoJob: the round, fio's figures of its direction, its CPU window
    (vmio.real.cpuwork.Load), fio's JSON job."""

    job: IoJob
    round: int
    runtime_s: float
    iops: float
    lat_mean_ns: float
    load: cpuwork.Load
    fio: Mapping[str, Any]

    def record(self) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "rw": self.job.rw,
            "bs": self.job.bs,
            "iodepth": self.job.iodepth,
            "round": self.round,
            "runtime_s": self.runtime_s,
            "iops": self.iops,
            "lat_mean_ns": self.lat_mean_ns,
            "cpu": self.load.record(),
            "fio": dict(self.fio),
        }


def _fio_cmd(opts: Sequence[tuple[str, str]]) -> list[str]:
    """fio's command line of one job's options, its report as JSON."""
    return ["fio", *(f"--{k}={v}" for k, v in opts), "--output-format=json"]


def round_io_jobs(r: int) -> tuple[IoJob, ...]:
    """Round r's order of the I/O jobs: IO_JOBS on even rounds, the opposite on odd ones."""
    return IO_JOBS if r % 2 == 0 else IO_JOBS[::-1]


def io_fio_args(job: IoJob, path: Path, size: int, runtime_s: float) -> list[str]:
    """fio's command line of an I/O job on the written file (module doc)."""
    opts = [
        ("name", job.name),
        ("filename", str(path)),
        ("ioengine", "libaio"),
        ("direct", "1"),
        ("rw", job.rw),
        ("bs", str(job.bs)),
        ("iodepth", str(job.iodepth)),
        ("size", str(size)),
        ("fallocate", "none"),
        ("runtime", f"{round(runtime_s * 1000)}ms"),
        ("time_based", "1"),
    ]
    return _fio_cmd(opts)


def _io_fio(
    job: IoJob, path: Path, size: int, runtime_s: float, rnd: int, sampler: cpuwork.Sampler
) -> IoRun:
    out = fiorun.fio_json(io_fio_args(job, path, size, runtime_s), job.name, CalibrateError)
    exit_t = sampler.mark()
    j = json.loads(out)["jobs"][0]
    side = j.get(job.direction, {})
    if not side.get("total_ios"):
        raise CalibrateError(f"fio job {job.name}: no request completed (nothing was measured)")
    iops = float(side["iops"])
    load = cpuwork.Load.of(sampler, exit_t, runtime_s, iops, cpuwork.cores())
    return IoRun(job, rnd, runtime_s, iops, float(side["lat_ns"]["mean"]), load, j)


def round_kinds(r: int) -> tuple[str, ...]:
    """Round r's order of the kinds: KINDS on even rounds, the opposite on odd ones."""
    return KINDS if r % 2 == 0 else KINDS[::-1]


def make_file(kind: str, path: Path, size: int) -> None:
    """A new file of `size` at `path` (replacing one left there): holes by ftruncate, unwritten
    extents by posix_fallocate (module doc)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if kind == HOLES:
            os.ftruncate(fd, size)
        else:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def fio_args(kind: str, path: Path, size: int, runtime_s: float) -> list[str]:
    """fio's command line of a run (module doc)."""
    opts = [
        ("name", kind),
        ("filename", str(path)),
        ("ioengine", "psync"),
        ("direct", "1"),
        ("rw", "randwrite"),
        ("bs", str(BS)),
        ("iodepth", "1"),
        ("size", str(size)),
        ("fallocate", "none"),
        ("runtime", f"{round(runtime_s * 1000)}ms"),
        ("time_based", "1"),
    ]
    return _fio_cmd(opts)


def run_of(kind: str, rnd: int, runtime_s: float, job: Mapping[str, Any]) -> Run:
    """The Run of fio's JSON job `job` (CalibrateError when it wrote nothing)."""
    w = job.get("write", {})
    if not w.get("total_ios"):
        raise CalibrateError(f"fio job {kind}: no write completed (nothing was measured)")
    pct = w.get("clat_ns", {}).get("percentile", {})
    return Run(
        kind,
        rnd,
        runtime_s,
        float(w["iops"]),
        float(w["lat_ns"]["mean"]),
        float(pct.get("50.000000", 0)),
        job,
        int(w["total_ios"]),
    )


def _fio(kind: str, path: Path, size: int, runtime_s: float, rnd: int) -> Run:
    out = fiorun.fio_json(fio_args(kind, path, size, runtime_s), kind, CalibrateError)
    return run_of(kind, rnd, runtime_s, json.loads(out)["jobs"][0])


@dataclass(frozen=True)
class ThinRun:
    """One pass of the disk's first-write runs (module doc): the write size, the round, the
    pass (FIRST into the new file, OVER the same again), the mean latency, the writes."""

    bs: int
    round: int
    pass_: str
    lat_mean_ns: float
    ios: int
    fio: Mapping[str, Any]

    def record(self) -> dict[str, Any]:
        return {
            "bs": self.bs,
            "round": self.round,
            "pass": self.pass_,
            "lat_mean_ns": self.lat_mean_ns,
            "ios": self.ios,
            "fio": dict(self.fio),
        }


def thin_sizes(r: int) -> tuple[int, ...]:
    """Round r's order of the first-write sizes: THIN_SIZES, the opposite on odd rounds."""
    return THIN_SIZES if r % 2 == 0 else THIN_SIZES[::-1]


def thin_fio_args(bs: int, path: Path, size: int, name: str) -> list[str]:
    """fio's command line of one pass over a first-write file (module doc): one sequential
    pass of `size`, not time-based (a second pass would be overwrites)."""
    opts = [
        ("name", name),
        ("filename", str(path)),
        ("ioengine", "psync"),
        ("direct", "1"),
        ("rw", "write"),
        ("bs", str(bs)),
        ("iodepth", "1"),
        ("size", str(size)),
        ("fallocate", "none"),
    ]
    return _fio_cmd(opts)


def _thin_fio(bs: int, path: Path, size: int, rnd: int, pass_: str) -> ThinRun:
    name = f"{THIN}-{bs // KIB}k-{pass_}"
    out = fiorun.fio_json(thin_fio_args(bs, path, size, name), name, CalibrateError)
    job = json.loads(out)["jobs"][0]
    w = job.get("write", {})
    if not w.get("total_ios"):
        raise CalibrateError(f"fio job {name}: no write completed (nothing was measured)")
    return ThinRun(bs, rnd, pass_, float(w["lat_ns"]["mean"]), int(w["total_ios"]), job)


def run_rounds(
    work: Path,
    size: int,
    runtime_s: float,
    rounds: int,
    stream: TextIO,
    io_runtime_s: float = IO_RUNTIME_S,
    background_s: float = BACKGROUND_S,
    thin_size: int = 0,
) -> tuple[list[Run], list[IoRun], list[ThinRun]]:
    """The written file, then every round's runs in `work` (module doc): the kinds' writes,
    the I/O jobs' CPU and, with `thin_size`, the first-write passes over new files of that
    size; the new files stay until the caller removes `work` (a file freed on a filesystem
    mounted with `discard` is trimmed later, so its blocks must not be taken again)."""
    written = work / "written.img"
    make_file(UNWRITTEN, written, size)
    stream.write(f"vmio: calibrate --host-fs: writing {written} through ({format_size(size)})\n")
    write_through(written, size, 1)
    n = rounds * (len(KINDS) + len(IO_JOBS) + (2 * len(THIN_SIZES) if thin_size else 0))
    bar = fiorun.PointProgress(n, title="calibrate --host-fs", stream=stream)
    runs: list[Run] = []
    io_runs: list[IoRun] = []
    thin_runs: list[ThinRun] = []
    with cpuwork.Sampler() as sampler:
        sampler.idle_window(background_s)
        for rnd in range(rounds):
            for kind in round_kinds(rnd):
                path = written if kind == WRITTEN else work / f"{kind}-{rnd}.img"
                if kind != WRITTEN:
                    make_file(kind, path, size)
                r = _fio(kind, path, size, runtime_s, rnd)
                runs.append(r)
                bar.advance(f"round {rnd + 1} {kind}: {r.lat_mean_ns / 1e3:.1f} us")
            for job in round_io_jobs(rnd):
                io = _io_fio(job, written, size, io_runtime_s, rnd, sampler)
                io_runs.append(io)
                bar.advance(
                    f"round {rnd + 1} {job.name}: {io.iops:.0f} IOPS, "
                    f"{io.load.cpu_ns / 1e3:.1f} us CPU a request"
                )
            for bs in thin_sizes(rnd) if thin_size else ():
                path = work / f"{THIN}-{bs}-{rnd}.img"
                make_file(UNWRITTEN, path, thin_size)
                for pass_ in (FIRST, OVER):
                    t = _thin_fio(bs, path, thin_size, rnd, pass_)
                    thin_runs.append(t)
                    bar.advance(
                        f"round {rnd + 1} {bs // KIB}k {pass_}: {t.lat_mean_ns / 1e3:.1f} us"
                    )
        sampler.idle_window(background_s)
    bar.close()
    # The background is known only now (both idle windows): the loads again with it.
    bg = sampler.background()
    io_runs = [replace(r, load=replace(r.load, background_s=bg * r.load.window_s)) for r in io_runs]
    return runs, io_runs, thin_runs


# --- the closed form -----------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """The solution (`solve`): per kind the mean latency over the rounds (images.Spread of the
    runs' lat_mean_ns), the two costs in ns, each round's own differences, the notes."""

    latency: dict[str, images.Spread]
    alloc_ns: int
    convert_ns: int
    rounds: list[dict[str, float]]
    notes: tuple[str, ...]

    def table(self, fstype: str) -> dict[str, str]:
        """host-fs.toml's `[volume]` table (durations as a stack file writes them)."""
        return {
            "filesystem": fstype,
            ALLOC: f"{self.alloc_ns}ns",
            CONVERT: f"{self.convert_ns}ns",
        }


def solve(runs: Sequence[Run], size: int | None = None) -> Costs:
    """alloc_cost and convert_cost of the runs (module doc: the closed form); with the files'
    `size`, a note for each run into new blocks that wrote more blocks than the file has
    (fio's random map then began a second pass: overwrites)."""
    by_kind = {k: [r.lat_mean_ns for r in runs if r.kind == k] for k in KINDS}
    if missing := [k for k, xs in by_kind.items() if not xs]:
        raise CalibrateError(f"the closed form needs a run of every kind (none of {missing})")
    lat = {k: images.Spread.of(xs) for k, xs in by_kind.items()}
    t = {k: s.median for k, s in lat.items()}
    notes = []
    alloc = t[HOLES] - t[UNWRITTEN]
    convert = t[UNWRITTEN] - t[WRITTEN]
    for name, cost, a, b in (
        (ALLOC, alloc, HOLES, UNWRITTEN),
        (CONVERT, convert, UNWRITTEN, WRITTEN),
    ):
        if cost < 0:
            notes.append(
                f"{name}: the writes into {a} ({t[a] / 1e3:.1f} us) came out faster than into "
                f"{b} ({t[b] / 1e3:.1f} us): set to 0"
            )
    blocks = (size or 0) // BS
    notes += [
        f"the {r.kind} run of round {r.round + 1} made {r.ios} writes into a file of {blocks} "
        "blocks: its writes past the file's blocks were overwrites (a disk this fast needs "
        "larger files or shorter runs)"
        for r in runs
        if blocks and r.kind != WRITTEN and r.ios > blocks
    ]
    per_round = []
    for rnd in sorted({r.round for r in runs}):
        mine = {r.kind: r.lat_mean_ns for r in runs if r.round == rnd}
        if all(k in mine for k in KINDS):
            per_round.append(
                {
                    "round": rnd,
                    ALLOC: mine[HOLES] - mine[UNWRITTEN],
                    CONVERT: mine[UNWRITTEN] - mine[WRITTEN],
                }
            )
    return Costs(lat, round(max(0.0, alloc)), round(max(0.0, convert)), per_round, tuple(notes))


def first_touch_share(writes: int, size: int, bs: int = BS, block: int = THIN_BLOCK) -> float:
    """The share of `writes` distinct random `bs` writes into a file of `size` (fio's random
    map: no block twice before every block once) that are the first into their `block`
    (module doc): of n = size / bs blocks, m = min(writes, n) written, a block of
    k = block / bs holds none of them with probability prod_{i<k} (n - m - i) / (n - i)."""
    n, k = size // bs, max(1, block // bs)
    m = min(writes, n)
    if m <= 0 or n < k:
        return 0.0
    untouched = 1.0
    for i in range(k):
        untouched *= max(0, n - m - i) / (n - i)
    return (n // k) * (1.0 - untouched) / m


@dataclass(frozen=True)
class Thin:
    """The disk's first-write cost (`solve_thin`): per size the first pass's extra time over
    the overwrite (images.Spread of the rounds' differences), the line's intercept and its
    cost per THIN_BLOCK, the share of the unwritten kind's writes that were first into their
    block, convert_cost without their blocks' cost, the notes."""

    extra: dict[int, images.Spread]
    intercept_ns: int
    block_cost_ns: int
    first_share: float
    convert_ns: int
    notes: tuple[str, ...] = ()

    def table(self) -> dict[str, Any]:
        """host-fs.toml's `[thin]` table: the device's keys, and the volume's convert_cost to
        take with them (module doc)."""
        return {
            "thin_block": f"{THIN_BLOCK // KIB}k",
            "thin_block_cost": f"{self.block_cost_ns}ns",
            "thin_request": "0ns",
            "thin_zero": False,
            CONVERT: f"{self.convert_ns}ns",
        }


def solve_thin(thin_runs: Sequence[ThinRun], costs: Costs, unwritten_ios: int, size: int) -> Thin:
    """The first-write line of `thin_runs` and convert_cost without it (module doc)."""
    extra: dict[int, list[float]] = {}
    for rnd in sorted({t.round for t in thin_runs}):
        for bs in THIN_SIZES:
            mine = {t.pass_: t.lat_mean_ns for t in thin_runs if t.round == rnd and t.bs == bs}
            if FIRST in mine and OVER in mine:
                extra.setdefault(bs, []).append(mine[FIRST] - mine[OVER])
    if len(extra) < 2:
        raise CalibrateError("the first-write line needs two sizes with both passes")
    spreads = {bs: images.Spread.of(xs) for bs, xs in extra.items()}
    intercept, slope, through_0 = cpuwork.ols(
        [(bs / THIN_BLOCK, sp.median) for bs, sp in spreads.items()]
    )
    notes = []
    if slope <= 0:
        notes.append(
            "the first writes' extra time does not grow with their size: no cost per block "
            "(a thick disk, or its noise)"
        )
        slope = 0.0
    elif intercept < 0:
        intercept, slope = 0.0, through_0
    share = first_touch_share(unwritten_ios, size)
    convert = max(0.0, costs.convert_ns - share * slope)
    return Thin(spreads, round(intercept), round(slope), share, round(convert), tuple(notes))


@dataclass(frozen=True)
class IoCpu:
    """The host kernel's CPU per direct I/O request (`solve_io`): the fit over the jobs'
    medians, per job the rounds' cpu_ns (images.Spread), per round its own fit, the
    background (busy cores of the idle windows), the notes."""

    fit: cpuwork.CpuFit
    per_job: dict[str, images.Spread]
    rounds: list[dict[str, Any]]
    background: float
    notes: tuple[str, ...] = ()
    rejected: bool = False
    """Other processes took more than cpuwork.BUSY_BACKGROUND cores: no `[io_cpu]` table."""

    def table(self) -> dict[str, int | str]:
        """host-fs.toml's `[io_cpu]` table."""
        return cpuwork.io_table(self.fit)


def solve_io(io_runs: Sequence[IoRun]) -> IoCpu:
    """io_cpu and io_cpu_rate of the I/O runs (module doc)."""
    what = "the host kernel's CPU per direct I/O request"
    by_job: dict[IoJob, list[float]] = {}
    for r in io_runs:
        by_job.setdefault(r.job, []).append(r.load.cpu_ns)
    if not by_job:
        raise CalibrateError(f"{what}: no I/O run")
    per_job = {j.name: images.Spread.of(xs) for j, xs in by_job.items()}
    try:
        f = cpuwork.fit([(j.bs, per_job[j.name].median) for j in by_job], what)
    except CalibrateError as e:
        # As servepath.cpu_fit: no table rather than a wrong one.
        return IoCpu(cpuwork.CpuFit(0, 0), per_job, [], 0.0, (cpuwork.unfit_note(str(e)),), True)
    per_round = []
    for rnd in sorted({r.round for r in io_runs}):
        mine = [(r.job.bs, r.load.cpu_ns) for r in io_runs if r.round == rnd]
        try:
            g = cpuwork.fit(mine, what)
        except CalibrateError:
            continue
        per_round.append({"round": rnd, "cpu_ns": g.cpu_ns, "cpu_rate": g.cpu_rate})
    windows = [r.load for r in io_runs]
    bg = windows[0].background_s / windows[0].window_s if windows else 0.0
    if busy := cpuwork.background_note(bg, what):
        return IoCpu(f, per_job, per_round, bg, (busy,), rejected=True)
    return IoCpu(f, per_job, per_round, bg, f.notes)


# --- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFs:
    """What `measure` made: the runs, the costs, the filesystem, the two files."""

    runs: list[Run]
    costs: Costs
    fstype: str
    toml_path: Path
    json_path: Path
    io: IoCpu | None = None
    io_runs: list[IoRun] = field(default_factory=list)
    thin: Thin | None = None
    thin_runs: list[ThinRun] = field(default_factory=list)


@dataclass(frozen=True)
class Settings:
    """Where and how the runs ran (the header's and the record's)."""

    directory: Path
    fstype: str
    size: int
    runtime_s: float
    rounds: int
    quick: bool
    io_runtime_s: float = IO_RUNTIME_S
    thin_size: int = 0


def device_of(directory: Path) -> str:
    """The block device under `directory` as the header names it ("vda (virtio disk)")."""
    try:
        d = disk_of(directory)
    except ProfileError:
        return "?"
    return f"{d.device} ({d.model})" if d.model else d.device


def _us(s: images.Spread) -> str:
    return (
        f"{s.median / 1e3:.1f} us ({s.lo / 1e3:.1f}-{s.hi / 1e3:.1f}, spread {100 * s.rel:.0f} %)"
    )


def header(s: Settings, when: str, costs: Costs, io: IoCpu | None = None) -> list[str]:
    """host-fs.toml's comment lines (module doc)."""
    u = os.uname()
    fio = fio_version() if fio_missing() is None else "no fio"
    n = len(costs.rounds)
    lat = ", ".join(f"{k} {_us(costs.latency[k])}" for k in KINDS)
    return [
        f"vmio calibrate --host-fs {__version__}: fio psync direct 4 KiB random writes at QD1 "
        f"into files of {format_size(s.size)} in {s.directory} ({s.fstype}), {s.runtime_s:g} s "
        f"a run, {when}",
        f"machine: {u.nodename}, {os.cpu_count()} cores, kernel {u.release}, {fio}; "
        f"device {device_of(s.directory)}",
        f"mean write latency, median of {n} rounds: {lat}",
        f"{ALLOC} = holes - unwritten, {CONVERT} = unwritten - written "
        "(vmio.real.hostfscal); merge into the [[volume]] of the image files",
        *(f"note: {note}" for note in costs.notes),
        *(_io_lines(s, io) if io else []),
    ]


def _io_lines(s: Settings, io: IoCpu) -> list[str]:
    """The header's lines of the CPU per request (only the note when it was rejected)."""
    if io.rejected:
        return [f"note: {note}" for note in io.notes]
    return _io_measured(s, io)


def _io_measured(s: Settings, io: IoCpu) -> list[str]:
    """The header's lines of a measured CPU per request."""
    jobs = ", ".join(
        f"{name} {x.median / 1e3:.1f} us ({x.lo / 1e3:.1f}-{x.hi / 1e3:.1f})"
        for name, x in io.per_job.items()
    )
    return [
        f"[io_cpu]: the host kernel's and fio's CPU per direct I/O request, fio libaio "
        f"{s.io_runtime_s:g} s a run on the written file, /proc/stat's busy time (background "
        f"{io.background:.2f} cores subtracted), median of {s.rounds} rounds: {jobs}",
        "[io_cpu] cpu + bytes / cpu_rate: add to a served path's [nbd] cpu (vmio.real.images)",
        *(f"note: {note}" for note in io.notes),
    ]


def measure(
    directory: Path = DEFAULT_DIR,
    out_dir: Path = DEFAULT_OUT,
    quick: bool = False,
    progress: TextIO | None = None,
    force: bool = False,
    size: int | None = None,
) -> HostFs:
    """Measure the three kinds of file in a new directory under `directory`, solve the costs
    and write out_dir/host-fs.toml and host-fs.json (module doc)."""
    stream = progress or sys.stderr
    if why := fio_missing():
        raise CalibrateError(why)
    rounds = QUICK_ROUNDS if quick else ROUNDS
    size = size or (QUICK_FILE_SIZE if quick else FILE_SIZE)
    fstype = check_dir(directory, size, rounds)
    out_paths(out_dir, force)
    io_runtime = QUICK_IO_RUNTIME_S if quick else IO_RUNTIME_S
    thin_size = QUICK_THIN_FILE if quick else THIN_FILE
    s = Settings(
        directory,
        fstype,
        size,
        QUICK_RUNTIME_S if quick else RUNTIME_S,
        rounds,
        quick,
        io_runtime,
        thin_size,
    )
    background = QUICK_BACKGROUND_S if quick else BACKGROUND_S
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="vmio-host-fs-", dir=directory))
    try:
        runs, io_runs, thin_runs = run_rounds(
            work, size, s.runtime_s, rounds, stream, io_runtime, background, thin_size
        )
    finally:
        stream.write(
            f"vmio: calibrate --host-fs: removing {work} (freeing the files' extents takes "
            "seconds)\n"
        )
        shutil.rmtree(work, ignore_errors=True)
    return write(runs, s, out_dir, force, time.monotonic() - start, io_runs, thin_runs)


def write(
    runs: Sequence[Run],
    s: Settings,
    out_dir: Path,
    force: bool = False,
    elapsed_s: float = 0.0,
    io_runs: Sequence[IoRun] = (),
    thin_runs: Sequence[ThinRun] = (),
) -> HostFs:
    """Solve the costs of `runs` (and the CPU per request of `io_runs`, when there are) and
    write out_dir/host-fs.toml and host-fs.json (module doc); an existing file is refused
    unless `force`."""
    toml_path, json_path = out_paths(out_dir, force)
    costs = solve(runs, s.size)
    io = solve_io(io_runs) if io_runs else None
    thin = None
    if thin_runs:
        ios = sorted(r.ios for r in runs if r.kind == UNWRITTEN)
        thin = solve_thin(thin_runs, costs, ios[len(ios) // 2] if ios else 0, s.size)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    out_dir.mkdir(parents=True, exist_ok=True)
    head = header(s, when, costs, io) + (_thin_lines(s, thin) if thin else [])
    doc: dict[str, Any] = {"volume": costs.table(s.fstype)}
    if io is not None and not io.rejected:
        doc[IO_CPU] = io.table()
    if thin is not None and thin.block_cost_ns > 0:
        doc[THIN] = thin.table()
    stackfile.write(toml_path, doc, head)
    record = {
        "vmio_calibrate_host_fs": {
            "version": __version__,
            "date": when,
            "dir": str(s.directory),
            "fstype": s.fstype,
            "device": device_of(s.directory),
            "file_size": s.size,
            "bs": BS,
            "runtime_s": s.runtime_s,
            "rounds": s.rounds,
            "quick": s.quick,
            "elapsed_s": round(elapsed_s, 3),
            "latency_ns": {k: asdict(x) for k, x in costs.latency.items()},
            "alloc_cost_ns": costs.alloc_ns,
            "convert_cost_ns": costs.convert_ns,
            "rounds_costs_ns": costs.rounds,
            "table": costs.table(s.fstype),
            "notes": list(costs.notes),
            "io_runtime_s": s.io_runtime_s if io else None,
            IO_CPU: io.table() if io and not io.rejected else None,
            "io_cpu_ns": io.fit.cpu_ns if io else None,
            "io_cpu_rate": io.fit.cpu_rate if io else None,
            "io_cpu_per_job_ns": {k: asdict(x) for k, x in io.per_job.items()} if io else None,
            "io_cpu_rounds": io.rounds if io else None,
            "io_cpu_background_cores": io.background if io else None,
            "io_cpu_notes": list(io.notes) if io else None,
            "thin_size": s.thin_size if thin else None,
            THIN: None
            if thin is None
            else {
                "extra_ns": {str(bs): asdict(x) for bs, x in thin.extra.items()},
                "intercept_ns": thin.intercept_ns,
                "block_cost_ns": thin.block_cost_ns,
                "first_share": thin.first_share,
                "convert_cost_ns": thin.convert_ns,
                "table": thin.table() if thin.block_cost_ns > 0 else None,
                "notes": list(thin.notes),
            },
        },
        "machine": machine.describe([str(s.directory)]),
        "runs": [r.record() for r in runs],
        "io_runs": [r.record() for r in io_runs],
        "thin_runs": [t.record() for t in thin_runs],
    }
    json_path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return HostFs(
        list(runs), costs, s.fstype, toml_path, json_path, io, list(io_runs), thin, list(thin_runs)
    )


def _thin_lines(s: Settings, t: Thin) -> list[str]:
    """The header's lines of the first-write line."""
    each = ", ".join(f"{bs // KIB}k {_us(x)}" for bs, x in t.extra.items())
    return [
        f"[{THIN}]: first writes against the overwrite, fio psync sequential passes over new "
        f"files of {format_size(s.thin_size)}, median of {s.rounds} rounds: {each}; "
        f"{t.intercept_ns / 1e3:.1f} us + {t.block_cost_ns / 1e3:.1f} us a "
        f"{THIN_BLOCK // KIB} KiB block; {CONVERT} less {t.first_share:.2f} of a block's "
        f"cost: {t.convert_ns / 1e3:.1f} us (take it with the [{THIN}] keys)",
        *(f"note: {note}" for note in t.notes),
    ]


def report(h: HostFs) -> str:
    """What `vmio calibrate --host-fs` prints: the latencies, the costs, the files."""
    c = h.costs
    lines = [
        f"host filesystem {h.fstype}: mean 4 KiB psync write latency at QD1 (median of "
        f"{len(c.rounds)} rounds, min-max, spread)"
    ]
    lines += [f"  into {k:9} {_us(c.latency[k])}" for k in KINDS]
    for name, ns in ((ALLOC, c.alloc_ns), (CONVERT, c.convert_ns)):
        each = ", ".join(f"{r[name] / 1e3:.1f}" for r in c.rounds)
        lines.append(f"{name} = {ns / 1e3:.1f} us (rounds: {each} us)")
    lines += [f"note: {n}" for n in c.notes]
    if h.io is not None and h.io.rejected:
        lines += [f"note: {n}" for n in h.io.notes]
    elif h.io is not None:
        lines.append(
            "the host kernel's and fio's CPU per direct I/O request (median of the rounds, "
            "min-max):"
        )
        lines += [
            f"  {name:22} {x.median / 1e3:.1f} us ({x.lo / 1e3:.1f}-{x.hi / 1e3:.1f})"
            for name, x in h.io.per_job.items()
        ]
        each = ", ".join(f"{r['cpu_ns'] / 1e3:.1f} us + 1 / {r['cpu_rate']}" for r in h.io.rounds)
        lines.append(
            f"[io_cpu] cpu = {h.io.fit.cpu_ns / 1e3:.1f} us, cpu_rate = {h.io.fit.cpu_rate} "
            f"bytes/s (rounds: {each}; background {h.io.background:.2f} cores)"
        )
        lines += [f"note: {n}" for n in h.io.notes]
    if h.thin is not None:
        lines += [
            "first writes against the overwrite (median of the rounds, min-max):",
            *(f"  {bs // KIB:5}k  +{_us(x)}" for bs, x in h.thin.extra.items()),
            f"[{THIN}] {h.thin.intercept_ns / 1e3:.1f} us + {h.thin.block_cost_ns / 1e3:.1f} us "
            f"a {THIN_BLOCK // KIB} KiB block; {CONVERT} with it "
            f"{h.thin.convert_ns / 1e3:.1f} us",
            *(f"note: {n}" for n in h.thin.notes),
        ]
    lines.append(f"written: {h.toml_path}, {h.json_path}")
    return "\n".join(lines) + "\n"
