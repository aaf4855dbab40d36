"""Request shapes of a real guest's block layer, checked against the guest model: the sizes of
the requests a real ext4 under a real guest sends to its virtual disk, and the share of bios
its block layer merged, for FileBench-like workloads and a buffered 4 KiB writer.

The host makes an ext4 image (vmio.real.guest `make_image`: 1 GiB, mke2fs defaults) and serves
it with `vmio serve --trace` (`serve_guest`); one TCG QEMU guest (vmio.real.qemu: Debian's
kernel, busybox, the host's fio 3.33 and its libraries in the initramfs, virtio-blk,
512 MiB) mounts it and runs each workload in turn as a fio job (`WORKLOADS`):

```text
print /sys/block/vda/queue/{scheduler,nr_requests,max_sectors_kb,...}, hardware queues
mount -t ext4 /dev/vda /mnt
for each workload k:
    [fio --create_only=1 LAYOUT]         files the job reads, laid out before the phase
    sync; echo 3 > /proc/sys/vm/drop_caches        (reads come from the disk)
    O_DIRECT read of 4 KiB at disk - (2k + 2) x 4 KiB     <- phase k begins (trace)
    print /sys/block/vda/stat                              (guest's diskstats before)
    fio JOB                                                 (end_fsync: its writes on disk)
    print /sys/block/vda/stat                              (after)
    O_DIRECT read of 4 KiB at disk - (2k + 1) x 4 KiB     <- phase k ends
umount /mnt
```

The workloads (FileBench personalities as crates/vmio-core/src/workload/filebench.rs has
them, from filebench's workloads/fileserver.f and varmail.f, scaled down to what a TCG guest
runs in about a minute; psync, buffered):

```text
fileserver  writer: creates 128 files of 16-240 KiB (uniform, mean 128 KiB as fileserver's
            gamma mean), each written whole in 16 KiB calls, end_fsync; reader (at the same
            time): reads 128 such files whole in 16 KiB calls (laid out before the phase)
            FileBench: createfile, writewholefile, ..., readwholefile of 1 MiB calls on
            10000 files; no fsync (the flusher writes back: here end_fsync writes back)
varmail     appender: creates 64 files, two 8 KiB appends each (FileBench's appendfilerand
            mean), fsync after every append; reader (at the same time): reads 64 files of
            4-28 KiB (mean 16 KiB, varmail's) whole in 4 KiB calls
seqwrite    one 32 MiB file written in 4 KiB calls, end_fsync (a buffered sequential writer)
```

fio's file pick puts an fsync on the next file it picks (vmio.real.guest's module doc): the
model runs the same job files through vmio's fio front, which follows fio's pick, so both
sides do the same operations.

What is compared, per workload (`compare`):

- the guest's block layer (diskstats deltas between the phase's two prints: read and write
  requests, merges, sectors) against the model's `request_sizes` and `merges` of
  `vmio.guests[0].disks[0]`: the mean request size within TOLERANCE (25 %), and the merged
  share, merges / (requests + merges) (a merged bio is one that did not become a request),
  shown, not checked (the model's bios are whole runs of pages, coarser than Linux's);
- the requests the server received (the trace between the phase's markers: QEMU's virtio-blk
  multireq has merged adjacent requests of one notification, block/block-backend.c and
  hw/block/virtio-blk.c `virtio_blk_submit_multireq`) against the model's
  `host_request_sizes`: the mean request size within TOLERANCE (25 %) and the distributions
  side by side (total variation distance shown).

TCG's timings are never used. A model without these fields (before the guest block layer)
gives `ModelMissing`, which the check reports instead of a comparison.
"""

from __future__ import annotations

import json
import math
import re
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vmio import stackfile
from vmio.real import guest as realguest
from vmio.real import qemu

BLOCK = realguest.BLOCK
TOLERANCE = realguest.TOLERANCE
DISK = realguest.WORKLOAD  # the 1 GiB ext4 image of the append check, mke2fs defaults
GUEST_MEMORY = f"{qemu.FIO_MEMORY_MIB}m"
QUEUE_FILES = (
    "scheduler",
    "nr_requests",
    "max_sectors_kb",
    "max_hw_sectors_kb",
    "max_segments",
    "max_segment_size",
    "read_ahead_kb",
    "nomerges",
    "logical_block_size",
)
"""The guest disk's /sys/block/vda/queue/ settings the guest prints (the real defaults)."""

GLOBAL = "[global]\ndirectory=/mnt\nioengine=psync\ndirect=0\n"


@dataclass(frozen=True)
class Shape:
    """One workload: its fio job file and, if it reads, the layout job run before it."""

    name: str
    job: str
    layout: str | None = None

    def job_file(self) -> str:
        return GLOBAL + self.job

    def layout_file(self) -> str | None:
        return None if self.layout is None else GLOBAL + "create_only=1\n" + self.layout


_FS_READ = (
    "\n[fileserver-read]\nrw=read\nbs=16k\nnrfiles=128\nfilesize=16k-240k\n"
    "file_service_type=sequential\n"
)
_VM_READ = (
    "\n[varmail-read]\nrw=read\nbs=4k\nnrfiles=64\nfilesize=4k-28k\nfile_service_type=sequential\n"
)
WORKLOADS = (
    Shape(
        "fileserver",
        "\n[fileserver-write]\nrw=write\nbs=16k\nnrfiles=128\nfilesize=16k-240k\n"
        "file_service_type=sequential\ncreate_on_open=1\nend_fsync=1\n" + _FS_READ,
        _FS_READ,
    ),
    Shape(
        "varmail",
        "\n[varmail-append]\nrw=write\nbs=8k\nnrfiles=64\nfilesize=16k\nfsync=1\n"
        "file_service_type=sequential\ncreate_on_open=1\n" + _VM_READ,
        _VM_READ,
    ),
    Shape("seqwrite", "\n[seqwrite]\nrw=write\nbs=4k\nsize=32m\nend_fsync=1\n"),
)


def markers(k: int) -> tuple[int, int]:
    """Offsets of phase k's begin and end marker reads (the disk's last blocks)."""
    return DISK.disk_bytes - (2 * k + 2) * BLOCK, DISK.disk_bytes - (2 * k + 1) * BLOCK


def guest_script(shapes: tuple[Shape, ...] = WORKLOADS) -> str:
    """The guest's shell script (module doc); the job files are /jobs/NAME.fio and
    /jobs/NAME-layout.fio (`job_files`)."""

    def marker(offset: int) -> str:
        return (
            f"dd if=/dev/vda of=/dev/null bs={BLOCK} count=1 skip={offset // BLOCK} "
            "iflag=direct status=none"
        )

    lines = [f'echo "VMIO-QUEUE {f} $(cat /sys/block/vda/queue/{f})"' for f in QUEUE_FILES]
    lines += [
        'echo "VMIO-QUEUE nr_hw_queues $(ls /sys/block/vda/mq | wc -l)"',
        "mkdir -p /mnt",
        "mount -t ext4 /dev/vda /mnt || echo MOUNT-FAILED",
    ]
    for k, s in enumerate(shapes):
        begin, end = markers(k)
        if s.layout is not None:
            lines.append(
                f"fio /jobs/{s.name}-layout.fio > /tmp/layout.log 2>&1 "
                f"|| {{ echo LAYOUT-FAILED {s.name}; tail -n 5 /tmp/layout.log; }}"
            )
        lines += [
            "sync",
            "echo 3 > /proc/sys/vm/drop_caches",
            marker(begin),
            f'echo "VMIO-STAT-BEGIN {s.name} $(cat /sys/block/vda/stat)"',
            f"fio /jobs/{s.name}.fio > /tmp/fio.log 2>&1 "
            f"|| {{ echo FIO-FAILED {s.name}; tail -n 5 /tmp/fio.log; }}",
            f'echo "VMIO-STAT-END {s.name} $(cat /sys/block/vda/stat)"',
            marker(end),
        ]
    lines += ["sync", "umount /mnt || echo UMOUNT-FAILED"]
    return "\n".join(lines)


def job_files(shapes: tuple[Shape, ...] = WORKLOADS) -> list[tuple[str, bytes]]:
    """(path in the guest, content) of every job file the script runs."""
    out = [(f"/jobs/{s.name}.fio", s.job_file().encode()) for s in shapes]
    out += [(f"/jobs/{s.name}-layout.fio", lf.encode()) for s in shapes if (lf := s.layout_file())]
    return out


def boot_with_fio(drive: str, script: str, workdir: Path, timeout: float = 900.0) -> str:
    """Boot a TCG guest (vmio.real.qemu) with `drive` as its virtio disk, the host's fio and
    the job files in its initramfs, running `script`; its console."""
    files = [*qemu.fio_files(), *job_files()]
    initrd = qemu.build_initramfs(
        script, workdir / "initramfs.cpio", qemu.MODULES, "/dev/vda", files
    )
    disk = qemu.INTERFACES["virtio-blk"].qemu_args(drive)
    cmd = qemu.qemu_command(initrd, "tcg", qemu.FIO_MEMORY_MIB, disk)
    return qemu.boot(cmd, timeout, timeout)


# --- the real side ---------------------------------------------------------------------------


@dataclass
class DiskStats:
    """A /sys/block/<dev>/stat delta (Documentation/block/stat.rst): requests completed,
    bios merged into another request, and 512-byte sectors, per direction."""

    reads: int = 0
    read_merges: int = 0
    read_sectors: int = 0
    writes: int = 0
    write_merges: int = 0
    write_sectors: int = 0

    @staticmethod
    def of_line(text: str) -> DiskStats:
        f = [int(x) for x in text.split()]
        if len(f) < 11:
            raise ValueError(f"/sys/block/vda/stat: {len(f)} fields; expected at least 11")
        return DiskStats(f[0], f[1], f[2], f[4], f[5], f[6])

    def minus(self, before: DiskStats) -> DiskStats:
        a, b = asdict(self), asdict(before)
        return DiskStats(**{k: a[k] - b[k] for k in a})

    @property
    def requests(self) -> int:
        return self.reads + self.writes

    @property
    def merges(self) -> int:
        return self.read_merges + self.write_merges

    @property
    def mean_bytes(self) -> float:
        n = self.requests
        return 512 * (self.read_sectors + self.write_sectors) / n if n else 0.0


def merged_share(requests: int, merges: int) -> float:
    """Share of the bios that merged into another request: merges / (requests + merges)."""
    return merges / (requests + merges) if requests + merges else 0.0


def histogram_mean(h: dict[int, int]) -> float:
    n = sum(h.values())
    return sum(b * c for b, c in h.items()) / n if n else 0.0


@dataclass
class PhaseFigures:
    """One workload's real figures: the server's requests by size (reads, writes) and
    flushes, and the guest block layer's diskstats delta."""

    name: str
    host_read_sizes: dict[int, int] = field(default_factory=dict)
    host_write_sizes: dict[int, int] = field(default_factory=dict)
    host_flushes: int = 0
    guest: DiskStats = field(default_factory=DiskStats)

    @property
    def host_sizes(self) -> dict[int, int]:
        c = Counter(self.host_read_sizes)
        c.update(self.host_write_sizes)
        return dict(sorted(c.items()))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "host_read_sizes": sorted(self.host_read_sizes.items()),
            "host_write_sizes": sorted(self.host_write_sizes.items()),
            "host_flushes": self.host_flushes,
            "guest": asdict(self.guest),
        }

    @staticmethod
    def of_json(d: dict) -> PhaseFigures:
        return PhaseFigures(
            d["name"],
            {int(b): n for b, n in d["host_read_sizes"]},
            {int(b): n for b, n in d["host_write_sizes"]},
            d["host_flushes"],
            DiskStats(**d["guest"]),
        )


def phase_figures(name: str, events: list[realguest.Event], stats: DiskStats) -> PhaseFigures:
    p = PhaseFigures(name, guest=stats)
    reads, writes = Counter(), Counter()
    for e in events:
        if e.action == "read":
            reads[e.length] += 1
        elif e.action == "write":
            writes[e.length] += 1
        elif e.action == "sync":
            p.host_flushes += 1
    p.host_read_sizes, p.host_write_sizes = (
        dict(sorted(reads.items())),
        dict(sorted(writes.items())),
    )
    return p


_STAT = re.compile(r"VMIO-STAT-(BEGIN|END) (\S+) (.*)$")
_QUEUE = re.compile(r"VMIO-QUEUE (\S+) (.*)$")


def console_stats(lines: list[str]) -> dict[str, DiskStats]:
    """Each workload's diskstats delta from the script's VMIO-STAT lines."""
    seen: dict[tuple[str, str], DiskStats] = {}
    for x in lines:
        if m := _STAT.search(x.strip()):
            seen[(m.group(1), m.group(2))] = DiskStats.of_line(m.group(3))
    out = {}
    for (kind, name), s in seen.items():
        if kind == "END" and ("BEGIN", name) in seen:
            out[name] = s.minus(seen[("BEGIN", name)])
    return out


def console_queue(lines: list[str]) -> dict[str, str]:
    """The guest disk's queue settings the script printed (VMIO-QUEUE lines)."""
    return {m.group(1): m.group(2).strip() for x in lines if (m := _QUEUE.search(x.strip()))}


@dataclass
class Real:
    queue: dict[str, str]
    phases: list[PhaseFigures]
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"queue": self.queue, "phases": [p.to_json() for p in self.phases]}

    @staticmethod
    def of_json(d: dict) -> Real:
        return Real(d["queue"], [PhaseFigures.of_json(p) for p in d["phases"]])


def analyse(
    trace_text: str, console_lines: list[str], shapes: tuple[Shape, ...] = WORKLOADS
) -> Real:
    """The real figures of every workload from the server's trace and the guest's console."""
    events = realguest.read_trace(trace_text)
    stats = console_stats(console_lines)
    phases = []
    for k, s in enumerate(shapes):
        if s.name not in stats:
            raise ValueError(f"the guest printed no diskstats for workload {s.name}")
        phases.append(phase_figures(s.name, realguest.between(events, *markers(k)), stats[s.name]))
    return Real(console_queue(console_lines), phases)


def run_real(
    workdir: Path, boot: Callable[[str, str, Path], str] = boot_with_fio
) -> tuple[Real, str]:
    """Serve the image, boot the guest running every workload, analyse; (figures, console)."""
    t0 = time.monotonic()
    s = realguest.serve_guest(workdir, boot, DISK, script=guest_script())
    lines = qemu.between_markers(s.console)
    failed = [x for x in lines if "FAILED" in x]
    if failed:
        raise RuntimeError(f"the guest's workload failed: {failed}\n{s.console[-4000:]}")
    try:
        real = analyse(s.trace.read_text(), lines)
    except ValueError as e:
        raise RuntimeError(
            f"{e}; server:\n{s.server_stderr}\nguest console:\n{s.console[-4000:]}"
        ) from None
    real.seconds = time.monotonic() - t0
    return real, s.console


# --- the model side --------------------------------------------------------------------------


class ModelMissing(Exception):
    """The simulator's guest disk report has no request shapes (an older vmio)."""


MODEL_FIELDS = ("merges", "request_sizes", "host_request_sizes")


@dataclass
class ModelFigures:
    name: str
    request_sizes: dict[int, int]
    host_request_sizes: dict[int, int]
    merges: int

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "request_sizes": sorted(self.request_sizes.items()),
            "host_request_sizes": sorted(self.host_request_sizes.items()),
            "merges": self.merges,
        }


def model_stack() -> str:
    """The served disk as the simulator sees it: vmio.real.guest's model stack (the same
    1 GiB ext4, mke2fs defaults, at /mnt) with the guest's memory and one vCPU (so one
    virtqueue and, by Linux 6.1's default, mq-deadline, as the real guest prints)."""
    doc = tomllib.loads(realguest.model_stack(DISK))
    doc["vm"][0].update(memory=GUEST_MEMORY, vcpus=1)  # qemu.qemu_command: -m 512, -smp 1
    return stackfile.render(doc)


def model(shape: Shape, seed: int = 1) -> ModelFigures:
    """`shape`'s job on `model_stack` through the simulator; its guest disk's request shapes
    (`ModelMissing` if the report has none)."""
    from vmio import sim

    text = sim.simulate_text(
        model_stack(), "real-shapes-model.toml", shape.job_file(), f"{shape.name}.fio", seed=seed
    )
    d = json.loads(text)["vmio"]["guests"][0]["disks"][0]
    missing = [k for k in MODEL_FIELDS if k not in d]
    if missing:
        raise ModelMissing(
            f"vmio.guests[0].disks[0] has no {', '.join(missing)}: this vmio's guest model "
            "has no block layer"
        )
    return ModelFigures(
        shape.name,
        {int(b): int(n) for b, n in d["request_sizes"]},
        {int(b): int(n) for b, n in d["host_request_sizes"]},
        int(d["merges"]["read"]) + int(d["merges"]["write"]),
    )


# --- real versus model -----------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    name: str
    guest_mean_real: float
    guest_mean_model: float
    host_mean_real: float
    host_mean_model: float
    merged_real: float
    merged_model: float
    distance: float
    """Total variation distance of the server's and the model's host request sizes."""
    host_range: tuple[float, float] | None = None
    """The real rounds' lowest and highest server mean (None: one round, the mean)."""
    guest_range: tuple[float, float] | None = None

    @staticmethod
    def error(real: float, model: float) -> float:
        return (model - real) / real if real else math.inf

    @staticmethod
    def within(model: float, real: float, spread: tuple[float, float] | None) -> bool:
        """The model within TOLERANCE of the real rounds' range (of the one real value)."""
        lo, hi = spread or (real, real)
        return lo * (1 - TOLERANCE) <= model <= hi * (1 + TOLERANCE)

    @property
    def host_error(self) -> float:
        return self.error(self.host_mean_real, self.host_mean_model)

    @property
    def guest_error(self) -> float:
        return self.error(self.guest_mean_real, self.guest_mean_model)

    @property
    def ok(self) -> bool:
        """The server's mean request size within TOLERANCE (of the real rounds' range)."""
        return self.within(self.host_mean_model, self.host_mean_real, self.host_range)

    @property
    def guest_ok(self) -> bool:
        """The guest block layer's mean request size within TOLERANCE (of the rounds')."""
        return self.within(self.guest_mean_model, self.guest_mean_real, self.guest_range)

    @property
    def check(self) -> str:
        missed = [w for w, ok in (("host", self.ok), ("guest", self.guest_ok)) if not ok]
        return "MISS " + ", ".join(missed) if missed else "ok"


def compare(real: PhaseFigures | list[PhaseFigures], model: ModelFigures) -> Comparison:
    """One workload, real against model. Several real rounds (the same workload run again):
    the means are the rounds' mean, a model mean passes within TOLERANCE of the rounds'
    range (the real run-to-run spread: how many requests one virtio notification carries
    depends on the guest's timing); the merged share and the distribution are the first
    round's."""
    rounds = real if isinstance(real, list) else [real]
    first = rounds[0]
    host = [histogram_mean(r.host_sizes) for r in rounds]
    guest = [r.guest.mean_bytes for r in rounds]
    several = len(rounds) > 1
    return Comparison(
        first.name,
        sum(guest) / len(guest),
        histogram_mean(model.request_sizes),
        sum(host) / len(host),
        histogram_mean(model.host_request_sizes),
        merged_share(first.guest.requests, first.guest.merges),
        merged_share(sum(model.request_sizes.values()), model.merges),
        realguest.distribution_distance(first.host_sizes, model.host_request_sizes),
        (min(host), max(host)) if several else None,
        (min(guest), max(guest)) if several else None,
    )


def table(rows: list[Comparison]) -> str:
    """Per workload: mean request size at the server (real, with the rounds' range when there
    are several; model; error against the real mean; the check), at the guest's block
    layer, and the merged share."""
    from vmio import fioreport as report

    def kib(x: float, spread: tuple[float, float] | None = None) -> str:
        shown = f"{x / 1024:.1f}"
        return (
            shown if spread is None else f"{shown} ({spread[0] / 1024:.1f}-{spread[1] / 1024:.1f})"
        )

    return report.text_table(
        [
            "workload",
            "host mean KiB real",
            "model",
            "error",
            "guest mean KiB real",
            "model",
            "error",
            "merged real",
            "model",
            "TVD",
            "check",
        ],
        [
            [
                r.name,
                kib(r.host_mean_real, r.host_range),
                kib(r.host_mean_model),
                f"{100 * r.host_error:+.1f} %",
                kib(r.guest_mean_real, r.guest_range),
                kib(r.guest_mean_model),
                f"{100 * r.guest_error:+.1f} %",
                f"{100 * r.merged_real:.1f} %",
                f"{100 * r.merged_model:.1f} %",
                f"{r.distance:.2f}",
                r.check,
            ]
            for r in rows
        ],
        align="lrrrrrrrrrl",
    )


def size_bucket(b: int) -> int:
    """The power-of-two bucket (bytes) a request size falls in: 4 KiB for 4 KiB, 8 KiB for
    5-8 KiB, ..."""
    return 1 << max(12, (b - 1).bit_length())


def side_by_side_histogram(
    real: dict[int, int], model: dict[int, int] | None, width: int = 30
) -> str:
    """Two request-size distributions as text bars, share of requests per power-of-two size
    bucket (`size_bucket`), real on the left, model on the right."""

    def shares(h: dict[int, int]) -> dict[int, float]:
        c: Counter[int] = Counter()
        for b, n in h.items():
            c[size_bucket(b)] += n
        total = sum(c.values())
        return {k: v / total for k, v in c.items()} if total else {}

    r, m = shares(real), shares(model or {})
    out = [f"{'size <=':>9}  {'real':<{width + 7}}  {'model' if model is not None else ''}"]
    for k in sorted(r.keys() | m.keys()):
        left = f"{'#' * round(width * r.get(k, 0)):<{width}} {100 * r.get(k, 0):5.1f}%"
        right = (
            f"{'#' * round(width * m.get(k, 0)):<{width}} {100 * m.get(k, 0):5.1f}%"
            if model is not None
            else ""
        )
        label = f"{k // 1024}K" if k < 1 << 20 else f"{k >> 20}M"
        out.append(f"{label:>9}  {left}  {right}".rstrip())
    return "\n".join(out)
