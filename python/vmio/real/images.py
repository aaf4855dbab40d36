"""Image formats for real on this machine: images made with `qemu-img create`, served by
`qemu-storage-daemon` over NBD, measured with fio's nbd engine; and vmio's prediction of every
point (the same fio job on a stack with the image's keys) beside the measurement.

Sources. QEMU 7.2: docs/tools/qemu-img.rst (`create -f raw|qcow2 -o
cluster_size=,preallocation=off|metadata|falloc|full`), docs/tools/qemu-storage-daemon.rst
(`--blockdev`, `--nbd-server addr.type=unix,addr.path=`, `--export type=nbd,...,writable=on`),
qapi/block-core.json (BlockdevOptionsFile `aio` threads|native|io_uring, `cache.direct`;
BlockdevOptionsQcow2 `l2-cache-size`, `l2-cache-entry-size`), docs/qcow2-cache.txt (one L2 entry,
8 bytes, maps one cluster: a cache of C bytes covers C x cluster_size / 8 bytes of disk; the
entry size is a power of two from 512 to the cluster size; at least 2 entries,
block/qcow2.c MIN_L2_CACHE_SIZE), block/file-posix.c (`aio=native` needs O_DIRECT: hence
`cache.direct=on` throughout; `aio=io_uring` needs CONFIG_LINUX_IO_URING and a kernel that
allows io_uring: probed, `probe_aio`). fio 3.33 engines/nbd.c (`ioengine=nbd`,
`uri=nbd+unix:///EXPORT?socket=PATH`) and HOWTO.rst (`offset`, `size`, `time_based`,
`runtime`, `randrepeat`: the same offsets on every run of a job).

What runs (`plan`, `run`), every image in a fresh directory under `--dir` (default /var/tmp),
size S (default 4 GiB), every fio job direct, time-based T seconds (default 3):

```text
part a, first write against overwrite (aio threads, the large L2 cache), per image of IMAGES:
    qemu-img create NEW                             raw off|full; qcow2 64k|2m x off|metadata|full
    serve; randwrite 4k QD16 over [0, S/2)          "first": most writes reach new clusters
           write 1m QD4 from S/2 over [S/2, S)      "first": every write is a first one
    fill: write 1m QD8 over [0, S) through the export (untimed)
    randwrite 4k QD16 over [0, S/2) again; write 1m QD4 over [S/2, S) again   "over"
    stop, delete
parts b and c, on images made and filled once per round (raw off, qcow2 64k off, qcow2 2m off):
  b small against large L2: each qcow2 x L2 small|large, aio threads: randread 4k QD16 over [0, S)
  c qcow2 against raw: raw and qcow2 64k (large L2) x aio of AIOS: randread, randwrite 4k QD16
    over [0, S), read and write 1m QD4 over [0, S)
rounds (default 3): every point once a round; each round runs the parts' units in the order
    opposite to the round before, so that the disk's drift over the run falls on every
    configuration alike
```

The L2 caches (`l2_cache`): coverage(S) = S / cluster x 8 bytes (docs/qcow2-cache.txt). Large
= coverage(S) (QEMU's default l2-cache-size covers the whole image up to 32 MiB of cache: the same
coverage), in entries of min(cluster, coverage(S) / 8 rounded down to a power of two), at
least 512 bytes; small = a quarter of it, at least 2 entries, so a uniform random read finds
its L2 slice cached with probability 1/4 (an LRU over uniform accesses holds a random quarter
of the slices).

Figures (`summarize`): per point the rounds' IOPS (and MB/s, mean latency), median, min-max and
relative spread (max - min) / median; per ratio (first/over, small/large, qcow2/raw, IOPS over
IOPS of the same round) the same. The prediction (`predict`): per point, `vmio sim` of the same
job (without the socket) on `sim_stack`, the calibrated stack of this machine (`vmio calibrate`'s
stack.toml: its device, volume and scheduler; the `[nbd]` table of qemu-storage-daemon's own
path, serve-path-qsd.toml of `vmio calibrate --serve-path --server qemu-storage-daemon`, or
else vmio serve's serve-path.toml with a note: `Calibration`) with the host's volume
as `filesystem = "ext4"` (or the scratch directory's xfs; with the `alloc_cost` and
`convert_cost` of host-fs.toml, `vmio calibrate --host-fs`, when it measured that filesystem,
else a note and the simulator's defaults) and one VM disk `interface = "nbd"`,
`cache = "none"`, `format`, `aio`, `[vm.disk.image]` and `[vm.disk.queue]` (serve-path-qsd.toml's
measured `wakeup`, and `wake_spread = "0ns"`: the simulator's wake-up spread is an estimate of
a VMM's wake-ups, which the measured `[nbd]` costs already contain); the `[nbd]` table's CPU
bound (`cores`, `cpu`, `cpu_rate`, crates/vmio-core/src/nbd.rs) is the served path's
(serve-path-qsd.toml) and the host kernel's per direct I/O request to the disk beneath the
image (host-fs.toml's `[io_cpu]`) added up (`nbd_cpu`), and `block_status = true`: the
server is QEMU's, whose NBD server asks a read's block status before reading it (nbd/server.c
`nbd_co_send_sparse_read`, for a client with structured replies, as libnbd negotiates), a
second L2 lookup of a qcow2 image under its lock (crates/vmio-core/src/image/qcow2.rs):

```text
cpu      = cpu_path + cpu_io                    (each request crosses both)
cpu_rate = 1 / (1 / rate_path + 1 / rate_io)    (the payload's CPU per byte adds; a rate of 0
                                                 is none: the other alone)
cores    = the path's (the machine's online CPUs, len(sched_getaffinity(0)))
```

(one of them alone: it is used, said in the notes; neither: the `[nbd]` table as it was, so a
recorded run whose calibration has neither predicts as before); the prediction's error against the
median (`error`) and the ratio's error against the measured ratio's median. A vmio whose
`vmio sim` refuses the image keys gets them left out (`predict`'s baseline, marked NO_LAYER in
the notes): the same stack and job on the NBD path's constants, what vmio said before the
image layer.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from vmio import stackfile
from vmio.real import cpuwork, fiorun
from vmio.sim import VmioError, format_size, parse_size, parse_toml, read_text, simulate_text
from vmio.version import __version__

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
DEFAULT_DIR = Path("/var/tmp")
DEFAULT_SIZE = 4 * GIB
MIN_SIZE = 16 * MIB
DEFAULT_RUNTIME_S = 3.0
MIN_RUNTIME_S = 0.5
DEFAULT_ROUNDS = 3
AIOS = ("threads", "native", "io_uring")
PARTS = ("a", "b", "c")
# Free space kept beyond the images (the host filesystem's own needs, qcow2 metadata).
MARGIN = 256 * MIB
# docs/qcow2-cache.txt: one L2 entry (8 bytes) maps one cluster; at least 2 cache entries
# (block/qcow2.c MIN_L2_CACHE_SIZE); the entry size a power of two >= 512.
L2_ENTRY_BYTES = 8
BLOCK_STATUS = "block_status"
MIN_ENTRY = 512
SMALL_ENTRIES, LARGE_ENTRIES = 2, 8
# The served stack's names (fio's nbd export; the VM disk of the prediction).
EXPORT = "e0"
VM, DISK = "img", "disk"
TOOLS = ("qemu-img", "qemu-storage-daemon", "fio")
TARGETS = {"ratio": 0.20, "median": 0.15, "p90": 0.30}
SIM_REFUSES = "vmio sim refuses the image stack"
# The [nbd] tables `vmio calibrate --serve-path` writes (vmio.real.servepath.out_names): of
# qemu-storage-daemon (--server qemu-storage-daemon), the server measured here, and of vmio serve.
QSD_TABLE, VMIO_TABLE = "serve-path-qsd.toml", "serve-path.toml"
# The host filesystem's costs `vmio calibrate --host-fs` writes (vmio.real.hostfscal): a
# `[volume]` table of `filesystem`, `alloc_cost`, `convert_cost`.
HOST_FS_TABLE = "host-fs.toml"
# host-fs.toml's first-write table (vmio.real.hostfscal) and the volume key it corrects.
THIN, CONVERT_COST = "thin", "convert_cost"
# The host filesystems the simulator models (crates/vmio-core/src/hostfs/mod.rs, REGISTRY).
HOST_FILESYSTEMS = ("ext4", "xfs")
# The start of the note a host-fs.toml of another filesystem gives (a prediction's note).
HOST_FS_OTHER = f"{HOST_FS_TABLE} measured"
# The [nbd] CPU bound's keys (crates/vmio-core/src/nbd.rs; vmio.real.cpuwork) and host-fs.toml's
# table of the host kernel's CPU per direct I/O request (vmio.real.hostfscal).
CORES, CPU, CPU_RATE, IO_CPU = cpuwork.CORES, cpuwork.CPU, cpuwork.CPU_RATE, cpuwork.IO_CPU
# The start of the note of a CPU bound with one part only (a prediction's note).
CPU_PART = "the [nbd] CPU bound"
# The image disk's queue: no wake-up spread on top of measured [nbd] costs (module doc).
NO_SPREAD = {"wake_spread": "0ns"}


class ImagesError(VmioError):
    """An option, tool or run the image check cannot use; the message is the user's."""


# --- the configurations --------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """One image as `qemu-img create` makes it."""

    fmt: str
    """raw or qcow2"""
    prealloc: str
    """off, metadata, falloc or full"""
    cluster: int | None = None
    """qcow2's cluster_size (None: raw)"""

    @property
    def name(self) -> str:
        if self.fmt == "raw":
            return f"raw-{self.prealloc}"
        return f"qcow2-{self.cluster // KIB}k-{self.prealloc}"

    def create_args(self, path: Path, size: int) -> list[str]:
        opts = [f"preallocation={self.prealloc}"]
        if self.cluster is not None:
            opts.insert(0, f"cluster_size={self.cluster}")
        return [
            "qemu-img",
            "create",
            "-q",
            "-f",
            self.fmt,
            "-o",
            ",".join(opts),
            str(path),
            str(size),
        ]


RAW_OFF = Image("raw", "off")
RAW_FULL = Image("raw", "full")
Q64_OFF = Image("qcow2", "off", 64 * KIB)
Q2M_OFF = Image("qcow2", "off", 2 * MIB)
IMAGES: tuple[Image, ...] = (
    RAW_OFF,
    RAW_FULL,
    Q64_OFF,
    Image("qcow2", "metadata", 64 * KIB),
    Image("qcow2", "full", 64 * KIB),
    Q2M_OFF,
    Image("qcow2", "metadata", 2 * MIB),
    Image("qcow2", "full", 2 * MIB),
)
POPULATED: tuple[Image, ...] = (RAW_OFF, Q64_OFF, Q2M_OFF)


@dataclass(frozen=True)
class L2:
    """A qcow2 L2 cache: `l2-cache-size` and `l2-cache-entry-size` in bytes."""

    size: int
    entry: int

    def coverage(self, cluster: int) -> int:
        """Bytes of disk the cache maps (docs/qcow2-cache.txt)."""
        return self.size * cluster // L2_ENTRY_BYTES


def l2_cache(cluster: int, image_size: int, which: str) -> L2:
    """The `small` or `large` L2 cache of a qcow2 image (module doc)."""
    full = -(-image_size // cluster) * L2_ENTRY_BYTES
    entry = max(MIN_ENTRY, min(cluster, 1 << max(0, (full // LARGE_ENTRIES).bit_length() - 1)))
    if which == "large":
        return L2(-(-full // entry) * entry, entry)
    return L2(max(SMALL_ENTRIES, -(-full // (4 * entry))) * entry, entry)


@dataclass(frozen=True)
class Serve:
    """How qemu-storage-daemon serves an image: its engine and, for qcow2, the L2 cache."""

    aio: str = "threads"
    l2: str | None = "large"
    """small or large (qcow2 only; None for raw)"""
    direct: bool = True
    """`cache.direct=on` (O_DIRECT, as `aio=native` needs); off: through the host's page
    cache (a tmpfs refuses O_DIRECT before Linux 6.6)"""

    def args(self, image: Image, path: Path, size: int, sock: Path) -> list[str]:
        """qemu-storage-daemon's command line (the file node, the format node, the export;
        vmio.real.serve.qsd_command)."""
        from vmio.real import serve as realserve

        fmt = f"driver={image.fmt},file=file0,node-name=fmt0"
        if image.fmt == "qcow2" and self.l2 is not None:
            c = l2_cache(image.cluster or 0, size, self.l2)
            fmt += f",l2-cache-size={c.size},l2-cache-entry-size={c.entry}"
        direct = "on" if self.direct else "off"
        node = f"driver=file,filename={path},aio={self.aio},cache.direct={direct},node-name=file0"
        return realserve.qsd_command(sock, EXPORT, "fmt0", [node, fmt])


@dataclass(frozen=True)
class Job:
    """One fio job on the export: the region [start, end) as fractions of the image."""

    name: str
    rw: str
    bs: int
    iodepth: int
    start: float = 0.0
    end: float = 1.0

    @property
    def direction(self) -> str:
        return "write" if "write" in self.rw else "read"

    def options(self, size: int, runtime_s: float | None) -> list[tuple[str, str]]:
        """fio's options but the engine's: the region, direct, time-based `runtime_s`."""
        lo, hi = _align(size * self.start), _align(size * self.end)
        opts = [
            ("rw", self.rw),
            ("bs", str(self.bs)),
            ("iodepth", str(self.iodepth)),
            ("direct", "1"),
            ("offset", str(lo)),
            ("size", str(hi - lo)),
        ]
        if runtime_s is not None:
            opts += [("runtime", f"{round(runtime_s * 1000)}ms"), ("time_based", "1")]
        return opts

    def text(self, size: int, runtime_s: float, uri: str | None = None) -> str:
        """The job file (with `uri`: for real; without: for `vmio sim`, whose nbd engine drives
        the VM's one disk)."""
        lines = [f"[{self.name}]", "ioengine=nbd"]
        if uri is not None:
            lines.append(f"uri={uri}")
        lines += [f"{k}={v}" for k, v in self.options(size, runtime_s)]
        return "\n".join(lines) + "\n"


def _align(x: float) -> int:
    return int(x) // MIB * MIB


RAND_W = Job("randwrite-4k-qd16", "randwrite", 4 * KIB, 16, 0.0, 0.5)
SEQ_W = Job("write-1m-qd4", "write", MIB, 4, 0.5, 1.0)
FILL = Job("fill", "write", MIB, 8)
RAND_R_ALL = Job("randread-4k-qd16", "randread", 4 * KIB, 16)
RAND_W_ALL = Job("randwrite-4k-qd16", "randwrite", 4 * KIB, 16)
SEQ_R_ALL = Job("read-1m-qd4", "read", MIB, 4)
SEQ_W_ALL = Job("write-1m-qd4", "write", MIB, 4)
C_JOBS = (RAND_R_ALL, RAND_W_ALL, SEQ_R_ALL, SEQ_W_ALL)


@dataclass(frozen=True)
class Point:
    """One measured configuration: part, image, how it is served, the job and the image's
    state (`first`: a new image; `over`: every block written before)."""

    part: str
    image: Image
    serve: Serve
    job: Job
    state: str

    @property
    def key(self) -> str:
        l2 = f"/l2-{self.serve.l2}" if self.image.fmt == "qcow2" else ""
        return f"{self.part}/{self.image.name}/{self.serve.aio}{l2}/{self.job.name}/{self.state}"

    @property
    def populated(self) -> float:
        return 0.0 if self.state == "first" else 1.0


@dataclass(frozen=True)
class Unit:
    """A step of a round: one image (made new, or one of the round's populated images), the
    points measured on it, in order."""

    part: str
    image: Image
    points: tuple[Point, ...]


def plan(
    parts: Sequence[str] = PARTS, aios: Sequence[str] = AIOS, names: Sequence[str] | None = None
) -> list[Unit]:
    """A round's units in the order of an even round (module doc); with `names`, only the
    units on those images (Image.name)."""
    units: list[Unit] = []
    big = Serve("threads", "large")
    if "a" in parts:
        for im in IMAGES:
            s = big if im.fmt == "qcow2" else Serve("threads", None)
            pts = [Point("a", im, s, j, "first") for j in (RAND_W, SEQ_W)]
            pts += [Point("a", im, s, j, "over") for j in (RAND_W, SEQ_W)]
            units.append(Unit("a", im, tuple(pts)))
    if "b" in parts:
        for im in (Q64_OFF, Q2M_OFF):
            pts = [
                Point("b", im, Serve("threads", w), RAND_R_ALL, "over") for w in ("small", "large")
            ]
            units.append(Unit("b", im, tuple(pts)))
    if "c" in parts:
        for im in (RAW_OFF, Q64_OFF):
            for aio in aios:
                s = Serve(aio, "large" if im.fmt == "qcow2" else None)
                units.append(Unit("c", im, tuple(Point("c", im, s, j, "over") for j in C_JOBS)))
    return [u for u in units if names is None or u.image.name in names]


IMAGE_NAMES: tuple[str, ...] = tuple(im.name for im in IMAGES)


def round_order(units: Sequence[Unit], r: int) -> list[Unit]:
    """Round r's units: the plan's order on even rounds, the opposite on odd ones."""
    return list(units) if r % 2 == 0 else list(reversed(units))


# --- checks --------------------------------------------------------------------------------


def tools_missing() -> str | None:
    """A one-line reason when a tool of the run is not installed."""
    for t in TOOLS:
        if shutil.which(t) is None:
            pkg = "fio" if t == "fio" else "qemu-utils / qemu-system-common"
            return f"'{t}' is not installed (apt-get install {pkg})"
    return None


def check_size(text: str | int) -> int:
    """The image size of `--size` (a multiple of 1 MiB, at least MIN_SIZE)."""
    try:
        n = parse_size(text)
    except VmioError as e:
        raise ImagesError(f"--size: {e}") from None
    if n < MIN_SIZE or n % MIB:
        raise ImagesError(
            f"--size {text}: an image is a multiple of 1 MiB of at least {format_size(MIN_SIZE)}"
        )
    return n


def check_runtime(seconds: float) -> float:
    if not (MIN_RUNTIME_S <= seconds <= 3600) or math.isnan(seconds):
        raise ImagesError(f"--runtime {seconds}: seconds from {MIN_RUNTIME_S} to 3600")
    return seconds


def check_rounds(n: int) -> int:
    if not 1 <= n <= 100:
        raise ImagesError(f"--rounds {n}: from 1 to 100")
    return n


def check_choices(values: Sequence[str], allowed: Sequence[str], flag: str) -> list[str]:
    """A comma list of `flag` (every value one of `allowed`, at least one)."""
    out = [v.strip() for v in values if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise ImagesError(f"{flag} {','.join(values)}: accepted values are {', '.join(allowed)}")
    return out


def space_needed(size: int, units: Sequence[Unit]) -> int:
    """Bytes the run holds at once: the round's populated images (parts b, c) or one image
    of part a (made and deleted in turn), qcow2's metadata, MARGIN."""
    pop = {u.image for u in units if u.part != "a"}
    many = len(pop) if pop else 1
    meta = size // (8 * KIB)  # L2 tables of 64 KiB clusters: 8 bytes per 64 KiB
    return many * (size + meta) + MARGIN


def check_dir(base: Path, size: int, units: Sequence[Unit]) -> None:
    """`--dir` exists, is a directory and has room for the run."""
    if not base.is_dir():
        raise ImagesError(f"--dir {base}: not a directory")
    free = shutil.disk_usage(base).free
    need = space_needed(size, units)
    if free < need:
        raise ImagesError(
            f"--dir {base}: {format_size(free)} free, the run needs {format_size(need)} "
            f"(images of {format_size(size)}); use a smaller --size or another --dir"
        )


def mounted_fstype(directory: Path) -> str | None:
    """The type of the filesystem holding `directory` as /proc/mounts names it (None: no
    mount holds it)."""
    from vmio.real.machineprofile import ProfileError, mount_of

    try:
        return mount_of(directory)[1]
    except ProfileError:
        return None


def fstype_of(directory: Path) -> str:
    """The host filesystem the images are files of: xfs, or ext4 for anything else (the
    simulator's host filesystems, HOST_FILESYSTEMS)."""
    fs = mounted_fstype(directory)
    return fs if fs in HOST_FILESYSTEMS else "ext4"


# --- running -------------------------------------------------------------------------------


def _run(args: Sequence[str], what: str) -> subprocess.CompletedProcess[str]:
    r = fiorun.run_group(args)
    if r.returncode != 0:
        msg = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()
        raise ImagesError(f"{what} failed: {msg[0]}")
    return r


def create(image: Image, path: Path, size: int) -> None:
    """`qemu-img create` of `image` at `path`, which must not exist."""
    if path.exists():
        raise ImagesError(f"{path} exists; not overwriting it")
    _run(image.create_args(path, size), f"qemu-img create {image.name}")


class Server:
    """qemu-storage-daemon serving one image on a Unix socket (a context manager)."""

    def __init__(self, image: Image, serve: Serve, path: Path, size: int, sock: Path) -> None:
        self.args = serve.args(image, path, size, sock)
        self.sock = sock
        self.uri = f"nbd+unix:///{EXPORT}?socket={sock}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        from vmio.real import serve as realserve

        try:
            self.proc = realserve.start(self.args, self.sock, "qemu-storage-daemon")
        except VmioError as e:
            self.sock.unlink(missing_ok=True)
            raise ImagesError(" ".join(str(e).split())) from None
        return self

    def __exit__(self, *exc: object) -> None:
        from vmio.real import serve as realserve

        if self.proc is not None:
            realserve._stop(self.proc)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            self.proc = None
        self.sock.unlink(missing_ok=True)


def probe_aio(directory: Path, aios: Sequence[str]) -> dict[str, str]:
    """The engines of `aios` that qemu-storage-daemon cannot open here, with its reason (a
    1 MiB raw image in `directory`, served once per engine)."""
    out: dict[str, str] = {}
    path = directory / "probe.raw"
    create(RAW_OFF, path, MIB)
    try:
        for aio in aios:
            try:
                with Server(RAW_OFF, Serve(aio, None), path, MIB, directory / "probe.sock"):
                    pass
            except ImagesError as e:
                out[aio] = str(e)
    finally:
        path.unlink(missing_ok=True)
    return out


@dataclass(frozen=True)
class Run:
    """fio's figures of one run of a point (the job's direction)."""

    iops: float
    bw_bytes: float
    lat_mean_ns: float


def fio_run(job: Job, size: int, runtime_s: float | None, uri: str, work: Path) -> Run:
    """Run `job` on the export; its figures (a failure: ImagesError with fio's first line,
    vmio.real.fiorun)."""
    jf = work / f"{job.name}.fio"
    text = job.text(size, runtime_s, uri) if runtime_s else _untimed(job, size, uri)
    jf.write_text(text, encoding="utf-8")
    out = fiorun.fio_json(["fio", "--output-format=json", str(jf)], job.name, ImagesError)
    return figures(json.loads(out)["jobs"][0], job.direction)


def _untimed(job: Job, size: int, uri: str) -> str:
    opts = job.options(size, None)
    return "\n".join(
        [f"[{job.name}]", "ioengine=nbd", f"uri={uri}", *(f"{k}={v}" for k, v in opts)]
    )


def figures(fio_job: Mapping[str, Any], direction: str) -> Run:
    """IOPS, bytes/s and mean latency (ns) of one direction of a fio JSON job."""
    side = fio_job[direction]
    return Run(
        float(side["iops"]), float(side["bw_bytes"]), float(side.get("lat_ns", {}).get("mean", 0))
    )


@dataclass
class Measurement:
    """What `run` measured: every point's runs (one per round), and the notes."""

    size: int
    runtime_s: float
    rounds: int
    directory: str
    fstype: str
    runs: dict[str, list[Run]] = field(default_factory=dict)
    points: dict[str, Point] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @classmethod
    def of_record(cls, rec: Mapping[str, Any]) -> Measurement:
        """The measurement a JSON of `record` holds (to predict it again: `--from`); its notes
        but those of an earlier prediction."""
        try:
            head = rec["vmio_real_images"]
            m = cls(head["size"], head["runtime_s"], head["rounds"], head["dir"], head["fstype"])
            m.notes = [
                n
                for n in head["notes"]
                if not n.startswith((SIM_REFUSES, HOST_FS_OTHER, CPU_PART)) and n != NO_LAYER
            ]
            m.elapsed_s = head["elapsed_s"]
            for pt in rec["points"]:
                p = Point(
                    pt["part"],
                    Image(**pt["image"]),
                    Serve(pt["aio"], pt["l2"]),
                    Job(**pt["job"]),
                    pt["state"],
                )
                m.points[p.key] = p
                m.runs[p.key] = [Run(**r) for r in pt["runs"]]
        except (KeyError, TypeError) as e:
            raise ImagesError(f"not a real-images JSON (no {e})") from None
        return m


def _unit(
    u: Unit, path: Path, size: int, runtime_s: float, work: Path, new: bool, done: Callable
) -> None:
    """Measure a unit's points on the image at `path`; `new`: made here, and filled (FILL)
    before its first "over" point."""
    sock = work / "nbd.sock"
    if new:
        create(u.image, path, size)
    try:
        filled = not new
        with Server(u.image, u.points[0].serve, path, size, sock) as srv:
            for p in u.points:
                if p.state == "over" and not filled:
                    fio_run(FILL, size, None, srv.uri, work)
                    filled = True
                done(p, fio_run(p.job, size, runtime_s, srv.uri, work))
    finally:
        if new:
            path.unlink(missing_ok=True)


def _serve_points(
    u: Unit, path: Path, size: int, runtime_s: float, work: Path, done: Callable
) -> None:
    """Parts b and c: each point's own server on the round's populated image."""
    for p in u.points:
        with Server(u.image, p.serve, path, size, work / "nbd.sock") as srv:
            done(p, fio_run(p.job, size, runtime_s, srv.uri, work))


def run(
    directory: Path = DEFAULT_DIR,
    size: int = DEFAULT_SIZE,
    runtime_s: float = DEFAULT_RUNTIME_S,
    rounds: int = DEFAULT_ROUNDS,
    parts: Sequence[str] = PARTS,
    aios: Sequence[str] = AIOS,
    progress: TextIO | None = None,
    names: Sequence[str] | None = None,
) -> Measurement:
    """Measure every point of `plan(parts, aios, names)` in `rounds` rounds (module doc), in a
    new directory under `directory`, removed afterwards."""
    stream = progress or sys.stderr
    if why := tools_missing():
        raise ImagesError(why)
    units = plan(parts, aios, names)
    if not units:
        raise ImagesError("--images: no point of the parts chosen is on those images")
    check_dir(directory, size, units)
    start = time.monotonic()
    m = Measurement(size, runtime_s, rounds, str(directory), fstype_of(directory))
    work = Path(tempfile.mkdtemp(prefix="vmio-real-images-", dir=directory))
    try:
        missing = probe_aio(work, aios)
        for aio, why in missing.items():
            m.notes.append(f"aio={aio} unavailable here: {why}")
        units = [u for u in units if u.points[0].serve.aio not in missing]
        if not units:
            raise ImagesError("no configuration left to measure: " + "; ".join(m.notes))
        total = rounds * sum(len(u.points) for u in units)
        bar = fiorun.PointProgress(total, title="real-images", stream=stream)

        def done(p: Point, r: Run) -> None:
            m.points[p.key] = p
            m.runs.setdefault(p.key, []).append(r)
            what = f"{r.bw_bytes / 1e6:.0f} MB/s" if p.job.bs >= MIB else f"{r.iops:.0f} IOPS"
            bar.advance(f"{p.key}: {what}")

        for rnd in range(rounds):
            order = round_order(units, rnd)
            pop = {u.image for u in order if u.part != "a"}
            paths = {im: work / f"{im.name}.{im.fmt}" for im in pop}
            try:
                for im in sorted(pop, key=lambda i: i.name):
                    create(im, paths[im], size)
                    with Server(
                        im, Serve("threads", "large"), paths[im], size, work / "f.sock"
                    ) as s:
                        fio_run(FILL, size, None, s.uri, work)
                for u in order:
                    if u.part == "a":
                        path = work / f"new-{u.image.name}.{u.image.fmt}"
                        _unit(u, path, size, runtime_s, work, True, done)
                    else:
                        _serve_points(u, paths[u.image], size, runtime_s, work, done)
            finally:
                for p in paths.values():
                    p.unlink(missing_ok=True)
        bar.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m.elapsed_s = time.monotonic() - start
    return m


# --- figures -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """A figure over the rounds: median, min, max, relative spread (max - min) / median."""

    median: float
    lo: float
    hi: float

    @property
    def rel(self) -> float:
        return (self.hi - self.lo) / self.median if self.median else math.nan

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread:
        return cls(statistics.median(xs), min(xs), max(xs))


@dataclass(frozen=True)
class Ratio:
    """num / den of IOPS, round by round."""

    name: str
    num: str
    den: str
    spread: Spread


def ratios(m: Measurement) -> list[Ratio]:
    """first/over (part a), small/large L2 (b), qcow2/raw (c): IOPS over IOPS of one round."""
    pairs: list[tuple[str, str, str]] = []
    for k, p in m.points.items():
        if p.part == "a" and p.state == "first":
            pairs.append(
                (f"first/over {p.image.name} {p.job.name}", k, k[: -len("first")] + "over")
            )
        elif p.part == "b" and p.serve.l2 == "small":
            pairs.append(
                (
                    f"small/large L2 {p.image.name} {p.job.name}",
                    k,
                    k.replace("l2-small", "l2-large"),
                )
            )
        elif p.part == "c" and p.image.fmt == "qcow2":
            raw = f"c/{RAW_OFF.name}/{p.serve.aio}/{p.job.name}/{p.state}"
            pairs.append((f"qcow2/raw {p.serve.aio} {p.job.name}", k, raw))
    out = []
    for name, a, b in pairs:
        if a in m.runs and b in m.runs:
            xs = [x.iops / y.iops for x, y in zip(m.runs[a], m.runs[b], strict=False) if y.iops]
            if xs:
                out.append(Ratio(name, a, b, Spread.of(xs)))
    return out


# --- the prediction ------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """The calibrated stack of this machine: `vmio calibrate`'s stack.toml (device, volume,
    scheduler, host), an `[nbd]` table and the host filesystem's costs, each None when
    absent. The table is qemu-storage-daemon's own (`vmio calibrate --serve-path --server
    qemu-storage-daemon`: serve-path-qsd.toml, the server these checks measure) where the
    directory has it, else vmio serve's (serve-path.toml), said in `note`; `nbd_from` names
    the file it came from. `host_fs` is the `[volume]` table of host-fs.toml (`vmio calibrate
    --host-fs`: `filesystem`, `alloc_cost`, `convert_cost`), merged into the prediction's
    volume when its filesystem is the scratch directory's (`host_fs_keys`). `queue` is the
    `[queue]` table of serve-path-qsd.toml (the host's thread wake-up measured beside QEMU's
    server, vmio.real.wakeup), the image disk's `[vm.disk.queue]`. `io_cpu` is host-fs.toml's
    `[io_cpu]` table (`cpu`, `cpu_rate`: the host kernel's CPU per direct I/O request),
    added to the `[nbd]` CPU bound (`nbd_cpu`). `thin` is host-fs.toml's `[thin]` table (the
    disk's first-write cost: the `thin_*` keys of the device, and the `convert_cost` the
    volume takes with them), applied with the volume's costs (`host_fs_keys`,
    `thin_keys`)."""

    stack: dict[str, Any] | None
    nbd: dict[str, Any] | None
    source: str
    nbd_from: str | None = None
    note: str | None = None
    host_fs: dict[str, Any] | None = None
    queue: dict[str, Any] | None = None
    io_cpu: dict[str, Any] | None = None
    thin: dict[str, Any] | None = None

    @classmethod
    def find(cls, directory: Path | None) -> Calibration:
        """stack.toml, serve-path-qsd.toml or serve-path.toml, and host-fs.toml of
        `directory` (None: ./vmio-calibration)."""
        d = directory or Path("vmio-calibration")
        st = d / "stack.toml"
        stack = parse_toml(read_text(st, "stack file"), st) if st.is_file() else None
        qsd, vmio = d / QSD_TABLE, d / VMIO_TABLE
        nbd, nbd_from, note, queue = None, None, None, None
        for sp in (qsd, vmio):
            if sp.is_file():
                table = parse_toml(read_text(sp, "serve-path file"), sp)
                nbd = table.get("nbd")
                nbd_from = sp.name
                # Only QEMU's server measures the wake-up (vmio serve's file has no [queue]).
                queue = table.get("queue") if sp == qsd else None
                if queue is not None and not isinstance(queue, dict):
                    raise ImagesError(f'{sp}: queue is not a table ([queue] wakeup = "...")')
                break
        if nbd_from == vmio.name:
            note = (
                f"no {qsd.name} in {d}: the [nbd] table is vmio serve's ({vmio.name}), not "
                "qemu-storage-daemon's (vmio calibrate --serve-path --server "
                f"qemu-storage-daemon -o {d} --force measures it)"
            )
        hf = d / HOST_FS_TABLE
        host_fs, io_cpu, thin = None, None, None
        if hf.is_file():
            hf_doc = parse_toml(read_text(hf, "host-fs file"), hf)
            host_fs = hf_doc.get("volume")
            if not isinstance(host_fs, dict):
                raise ImagesError(f"{hf}: no [volume] table (vmio calibrate --host-fs writes one)")
            io_cpu = hf_doc.get(IO_CPU)
            if io_cpu is not None and not isinstance(io_cpu, dict):
                raise ImagesError(f'{hf}: io_cpu is not a table ([io_cpu] cpu = "...")')
            thin = hf_doc.get(THIN)
            if thin is not None and not isinstance(thin, dict):
                raise ImagesError(f'{hf}: thin is not a table ([thin] thin_block = "64k")')
        if directory is not None and stack is None and nbd is None and host_fs is None:
            raise ImagesError(
                f"--calibration {d}: none of stack.toml, {qsd.name}, {vmio.name}, "
                f"{HOST_FS_TABLE} in it"
            )
        return cls(stack, nbd, str(d), nbd_from, note, host_fs, queue, io_cpu, thin)

    @classmethod
    def of_record(cls, rec: Mapping[str, Any]) -> Calibration | None:
        """The calibration a run's JSON recorded (None: it predicted nothing)."""
        head = rec.get("vmio_real_images", {})
        if head.get("calibration") is None:
            return None
        stack, nbd = head.get("calibration_stack"), head.get("calibration_nbd")
        return cls(
            stack,
            nbd,
            f"{head['calibration']} (as recorded)",
            head.get("calibration_nbd_from"),
            head.get("calibration_note"),
            head.get("calibration_host_fs"),
            head.get("calibration_queue"),
            head.get("calibration_io_cpu"),
            head.get("calibration_thin"),
        )

    def host_fs_keys(self, fstype: str) -> tuple[dict[str, Any], str | None]:
        """The keys of host-fs.toml a volume on `fstype` takes (its costs: every key but
        `filesystem`), and a note when there are none to take: a table of another
        filesystem is left out (its costs are not this filesystem's)."""
        if not self.host_fs:
            return {}, None
        measured = self.host_fs.get("filesystem")
        if measured != fstype:
            return {}, (
                f"{HOST_FS_OTHER} {measured}, the images are on {fstype}: its costs "
                "are left out (the volume keeps the simulator's defaults)"
            )
        keys = {k: v for k, v in self.host_fs.items() if k != "filesystem"}
        if self.thin and CONVERT_COST in self.thin:
            # The conversion without the first writes' blocks, which the device charges.
            keys[CONVERT_COST] = self.thin[CONVERT_COST]
        return keys, None

    def thin_keys(self, fstype: str) -> dict[str, Any]:
        """The `thin_*` keys the image file's device takes (host-fs.toml's `[thin]`), when the
        volume takes the same file's costs (`host_fs_keys`: the same filesystem)."""
        if not self.thin or not self.host_fs or self.host_fs.get("filesystem") != fstype:
            return {}
        return {k: v for k, v in self.thin.items() if k.startswith("thin_")}

    def nbd_cpu(self) -> tuple[dict[str, Any], str | None]:
        """The [nbd] table's CPU bound of the prediction (module doc: the path's and the
        host kernel's per direct I/O request added up) and a note when only one part is
        there; ({}, None) when neither is."""
        nbd = self.nbd or {}
        path = CPU in nbd
        io = bool(self.io_cpu) and CPU in (self.io_cpu or {})
        if not path and not io:
            return {}, None
        if path and io:
            assert self.io_cpu is not None
            cpu = parse_duration_ns(nbd[CPU]) + parse_duration_ns(self.io_cpu[CPU])
            rate = add_rates(int(nbd.get(CPU_RATE, 0)), int(self.io_cpu.get(CPU_RATE, 0)))
            return {CORES: int(nbd.get(CORES, 0)), CPU: f"{cpu}ns", CPU_RATE: rate}, None
        if path:
            keys = {k: nbd[k] for k in (CORES, CPU, CPU_RATE) if k in nbd}
            return keys, (
                f"{CPU_PART} is the served path's alone: no [{IO_CPU}] in {HOST_FS_TABLE} (vmio "
                "calibrate --host-fs measures the host kernel's CPU per direct I/O request)"
            )
        assert self.io_cpu is not None
        ncores = int((self.stack or {}).get("host", {}).get("cores", 0)) or cpu_count()
        keys = {CORES: ncores, CPU: self.io_cpu[CPU], CPU_RATE: self.io_cpu.get(CPU_RATE, 0)}
        return keys, (
            f"{CPU_PART} is the host kernel's per direct I/O request alone ({HOST_FS_TABLE}'s "
            f"[{IO_CPU}], {ncores} cores): the [nbd] table has no cpu (vmio calibrate "
            "--serve-path --server qemu-storage-daemon measures it)"
        )

    def describe(self) -> str:
        """One line: where the calibration and its [nbd] table came from."""
        table = f"[nbd] from {self.nbd_from}" if self.nbd_from else "no [nbd] table"
        if self.nbd_from is None and self.nbd is not None:
            table = "[nbd] as recorded"
        if self.host_fs:
            costs = ", ".join(f"{k} {v}" for k, v in self.host_fs.items() if k != "filesystem")
            table += f", host filesystem {self.host_fs.get('filesystem')} ({costs})"
        if self.thin:
            table += ", [thin] " + ", ".join(f"{k} {v}" for k, v in self.thin.items())
        if self.queue:
            table += ", [queue] " + ", ".join(f"{k} {v}" for k, v in self.queue.items())
        cpu, _ = self.nbd_cpu()
        if cpu:
            table += ", [nbd] CPU bound " + ", ".join(f"{k} {v}" for k, v in cpu.items())
        return f"calibration: {self.source}, {table}" + (
            f"; note: {self.note}" if self.note else ""
        )


def cpu_count() -> int:
    """This machine's CPUs for the prediction (the CPUs this process may run on)."""
    return len(os.sched_getaffinity(0))


def parse_duration_ns(v: int | str) -> int:
    """A stack file's duration ("25000ns", "25us", "1ms", a bare integer of ns) in ns."""
    if isinstance(v, int):
        return v
    text = str(v).strip()
    for unit, scale in (("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 10**9)):
        if text.endswith(unit):
            try:
                return round(float(text[: -len(unit)]) * scale)
            except ValueError:
                break
    raise ImagesError(f'cpu = {v!r}: accepted: a duration such as "25000ns" or "25us"')


def add_rates(a: int, b: int) -> int:
    """Two CPU rates (bytes/s) of work one payload meets one after the other: 1 / (1/a +
    1/b); 0 is none (the other alone)."""
    if a <= 0 or b <= 0:
        return max(a, b, 0)
    return round(1 / (1 / a + 1 / b))


UNCALIBRATED_DEVICE = {"name": "disk0", "model": "flash"}


def image_table(p: Point, size: int) -> dict[str, Any]:
    """`[vm.disk.image]` of a point: qcow2's cluster and L2 cache, the preallocation, the share
    of the image written before the job."""
    t: dict[str, Any] = {}
    if p.image.fmt == "qcow2" and p.image.cluster is not None:
        t["cluster_size"] = p.image.cluster
        if p.serve.l2 is not None:
            c = l2_cache(p.image.cluster, size, p.serve.l2)
            t["l2_cache_size"] = c.size
            t["l2_cache_entry_size"] = c.entry
    if p.image.fmt == "qcow2":
        t["preallocation"] = p.image.prealloc
        t["populated"] = p.populated
    else:
        # A raw image has no clusters: a filled one is a file whose blocks are all written,
        # as preallocation=full makes it.
        t["preallocation"] = "full" if p.populated > 0 else p.image.prealloc
    return t


def sim_doc(
    p: Point,
    size: int,
    cal: Calibration,
    fstype: str = "ext4",
    layer: bool = True,
) -> dict[str, Any]:
    """The stack of a point's prediction (module doc), as a dict for stackfile.render; without
    `layer`, the same stack without the image keys (the NBD path's constants only). With
    `layer`, the volume is `filesystem = fstype` with the calibration's host-fs.toml costs
    when they were measured on `fstype` (Calibration.host_fs_keys). The [nbd] table has the
    CPU bound (Calibration.nbd_cpu) where the calibration measured it."""
    base = cal.stack or {}
    host = dict(base.get("host", {"cores": os.cpu_count() or 1}))
    host["hypervisor"] = "kvm"
    devices = [dict(d) for d in base.get("device", [UNCALIBRATED_DEVICE])]
    for d in devices:
        # vmio calibrate's capacity is its target file's: the image and its metadata need more.
        if "capacity" in d and parse_size(d["capacity"]) < 2 * size:
            d["capacity"] = 2 * size
    names = [d["name"] for d in devices]
    vols = base.get("volume") or [{"name": "host", "layout": "single", "devices": names[:1]}]
    volume = (
        {**vols[0], "filesystem": fstype, **cal.host_fs_keys(fstype)[0]} if layer else dict(vols[0])
    )
    if layer and (thin := cal.thin_keys(fstype)):
        # The disk's first writes (host-fs.toml's [thin]) on the device under the volume.
        under = set(volume.get("devices", names[:1]))
        devices = [{**d, **thin} if d["name"] in under else d for d in devices]
    doc: dict[str, Any] = {"host": host, "device": devices, "volume": [volume]}
    doc["scheduler"] = dict(base.get("scheduler", {"name": "none"}))
    cpu, _ = cal.nbd_cpu()
    if cal.nbd is not None or cpu or layer:
        doc["nbd"] = {**(cal.nbd or {}), **cpu}
    if layer:
        # The server measured is QEMU's: a read's block-status query before it (module doc).
        doc["nbd"][BLOCK_STATUS] = True
    disk = {
        "name": DISK,
        "volume": volume["name"],
        "size": size,
        "interface": "nbd",
        "cache": "none",
    }
    if layer:
        disk |= {"format": p.image.fmt, "aio": p.serve.aio, "image": image_table(p, size)}
        # The measured [nbd] costs contain the real path's wake-ups: no spread on top.
        disk["queue"] = {**(cal.queue or {}), **NO_SPREAD}
    doc["vm"] = [{"name": VM, "disk": [disk]}]
    return doc


def sim_stack(
    p: Point,
    size: int,
    cal: Calibration,
    fstype: str = "ext4",
    layer: bool = True,
) -> str:
    """The prediction's stack file (stackfile.render, the one stack writer)."""
    head = [
        f"vmio real-images {__version__}: {p.key}, image {format_size(size)}",
        f"calibration: {cal.source}"
        + ("" if cal.stack else " (none found: the flash model's default profile)")
        + (f", [nbd] from {cal.nbd_from}" if cal.nbd_from else ""),
    ]
    keys, note = cal.host_fs_keys(fstype)
    if layer and (keys or note):
        head.append(f"host filesystem: {HOST_FS_TABLE}'s costs" if keys else f"note: {note}")
    cpu, cpu_note = cal.nbd_cpu()
    if cpu:
        head.append(
            f"note: {cpu_note}"
            if cpu_note
            else f"[nbd] CPU bound: {cal.nbd_from}'s cpu + {HOST_FS_TABLE}'s [{IO_CPU}]"
        )
    return stackfile.render(sim_doc(p, size, cal, fstype, layer), head)


def predict_point(
    p: Point, size: int, runtime_s: float, cal: Calibration, fstype: str, layer: bool = True
) -> Run:
    """`vmio sim` of the point's job on its stack (ImagesError when the simulator refuses)."""
    stack = sim_stack(p, size, cal, fstype, layer)
    try:
        out = simulate_text(stack, "stack.toml", p.job.text(size, runtime_s), f"{p.job.name}.fio")
    except VmioError as e:
        raise ImagesError(
            f"{SIM_REFUSES} of {p.key}: {' '.join(str(e).split())} (it needs [[vm.disk]] "
            "format and aio, [vm.disk.image], [[volume]] filesystem)"
        ) from None
    return figures(json.loads(out)["jobs"][0], p.job.direction)


def predict(
    m: Measurement, cal: Calibration, progress: TextIO | None = None, baseline: bool = True
) -> dict[str, Run]:
    """Every point's prediction. When vmio sim refuses the image keys: a note on `m`, and with
    `baseline` every point predicted without them (what a vmio without the image layer says:
    the NBD path's constants over the device), marked by NO_LAYER in the notes; else {}."""
    stream = progress or sys.stderr
    _, cpu_note = cal.nbd_cpu()
    for note in (cal.host_fs_keys(m.fstype)[1], cpu_note):
        if note is not None and note not in m.notes:
            m.notes.append(note)
    try:
        return _predict_all(m, cal, stream, True)
    except ImagesError as e:
        m.notes.append(str(e))
    if not baseline:
        return {}
    try:
        out = _predict_all(m, cal, stream, False)
    except ImagesError as e:
        m.notes.append(str(e).replace(SIM_REFUSES, "vmio sim refuses even the stack without them"))
        return {}
    m.notes.append(NO_LAYER)
    return out


NO_LAYER = (
    "the sim column is vmio sim without the image keys (format, aio, [vm.disk.image], "
    "filesystem): the same stack and job on the NBD path's constants, no image layer"
)


def _predict_all(m: Measurement, cal: Calibration, stream: TextIO, layer: bool) -> dict[str, Run]:
    out: dict[str, Run] = {}
    bar = fiorun.PointProgress(len(m.points), title="real-images sim", stream=stream)
    for k, p in m.points.items():
        out[k] = predict_point(p, m.size, m.runtime_s, cal, m.fstype, layer)
        bar.advance(f"{k}: {out[k].iops:.0f} IOPS")
    bar.close()
    return out


def error(pred: float, real: float) -> float:
    return pred / real - 1 if real else math.nan


def p90(xs: Sequence[float]) -> float:
    xs = sorted(abs(x) for x in xs if not math.isnan(x))
    if not xs:
        return math.nan
    return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]


# --- the report ----------------------------------------------------------------------------


def record(m: Measurement, pred: Mapping[str, Run], cal: Calibration | None) -> dict[str, Any]:
    """The JSON of a run: settings, notes, every point (its runs, spread, prediction) and
    every ratio."""
    from vmio.real import machine

    pts = []
    for k, p in m.points.items():
        runs = m.runs[k]
        s = Spread.of([r.iops for r in runs])
        pr = pred.get(k)
        pts.append(
            {
                "key": k,
                "part": p.part,
                "image": asdict(p.image),
                "aio": p.serve.aio,
                "l2": p.serve.l2,
                "l2_cache": asdict(l2_cache(p.image.cluster, m.size, p.serve.l2))
                if p.image.cluster and p.serve.l2
                else None,
                "job": asdict(p.job),
                "job_file": p.job.text(m.size, m.runtime_s),
                "state": p.state,
                "runs": [asdict(r) for r in runs],
                "iops": asdict(s),
                "iops_rel_spread": s.rel,
                "sim": asdict(pr) if pr else None,
                "sim_iops_error": error(pr.iops, s.median) if pr else None,
            }
        )
    rat = []
    for r in ratios(m):
        sim = _sim_ratio(r, pred)
        rat.append(
            {
                "name": r.name,
                "num": r.num,
                "den": r.den,
                **asdict(r.spread),
                "rel_spread": r.spread.rel,
                "sim": sim,
                "sim_error": error(sim, r.spread.median) if sim is not None else None,
            }
        )
    return {
        "vmio_real_images": {
            "version": __version__,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "dir": m.directory,
            "fstype": m.fstype,
            "size": m.size,
            "runtime_s": m.runtime_s,
            "rounds": m.rounds,
            "elapsed_s": round(m.elapsed_s, 1),
            "calibration": cal.source if cal else None,
            "calibration_stack": cal.stack if cal else None,
            "calibration_nbd": cal.nbd if cal else None,
            "calibration_nbd_from": cal.nbd_from if cal else None,
            "calibration_note": cal.note if cal else None,
            "calibration_host_fs": cal.host_fs if cal else None,
            "calibration_queue": cal.queue if cal else None,
            "calibration_io_cpu": cal.io_cpu if cal else None,
            "calibration_thin": cal.thin if cal else None,
            "notes": m.notes,
        },
        "machine": machine.describe([m.directory]),
        "points": pts,
        "ratios": rat,
    }


def _sim_ratio(r: Ratio, pred: Mapping[str, Run]) -> float | None:
    a, b = pred.get(r.num), pred.get(r.den)
    return a.iops / b.iops if a and b and b.iops else None


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.0f} %"


def _fig(x: float) -> str:
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.0f}"


def markdown(m: Measurement, pred: Mapping[str, Run], cal: Calibration | None = None) -> str:
    """The tables: every point (IOPS median, min-max, spread, MB/s, sim, error), every ratio
    (median, min-max, spread, sim, error), the errors' summary against TARGETS, and with
    `cal` the calibration the predictions ran on (which [nbd] table)."""
    lines = [
        f"Images of {format_size(m.size)} on {m.directory} ({m.fstype}), {m.rounds} "
        f"round{'s' if m.rounds > 1 else ''} of {m.runtime_s:g} s per point, "
        "qemu-storage-daemon over NBD, fio's nbd engine.",
        "",
        "| point | IOPS median | min-max | spread | MB/s | sim IOPS | error |",
        "|---|---|---|---|---|---|---|",
    ]
    errs = []
    for k in m.points:
        runs = m.runs[k]
        s = Spread.of([r.iops for r in runs])
        mb = statistics.median(r.bw_bytes for r in runs) / 1e6
        pr = pred.get(k)
        e = error(pr.iops, s.median) if pr else None
        if e is not None:
            errs.append(e)
        lines.append(
            f"| {k} | {_fig(s.median)} | {_fig(s.lo)}-{_fig(s.hi)} | {100 * s.rel:.0f} % | "
            f"{mb:.0f} | {_fig(pr.iops) if pr else '-'} | {_pct(e)} |"
        )
    lines += [
        "",
        "| ratio (IOPS) | median | min-max | spread | sim | error |",
        "|---|---|---|---|---|---|",
    ]
    rerrs = []
    for r in ratios(m):
        sim = _sim_ratio(r, pred)
        e = error(sim, r.spread.median) if sim is not None else None
        if e is not None:
            rerrs.append(e)
        lines.append(
            f"| {r.name} | {r.spread.median:.2f} | {r.spread.lo:.2f}-{r.spread.hi:.2f} | "
            f"{100 * r.spread.rel:.0f} % | {f'{sim:.2f}' if sim is not None else '-'} | "
            f"{_pct(e)} |"
        )
    lines.append("")
    if errs:
        within = sum(abs(e) <= TARGETS["ratio"] for e in rerrs)
        who = "vmio sim without the image layer" if NO_LAYER in m.notes else "vmio sim"
        lines.append(
            f"{who}: IOPS error median {100 * statistics.median(map(abs, errs)):.1f} % / "
            f"p90 {100 * p90(errs):.1f} % (targets <= 15 % / <= 30 %); ratios within 20 %: "
            f"{within} of {len(rerrs)}"
        )
    else:
        lines.append("vmio sim: no prediction (see the notes)")
    if cal is not None and pred:
        lines.append(cal.describe())
    lines += [f"note: {n}" for n in m.notes]
    return "\n".join(lines) + "\n"
