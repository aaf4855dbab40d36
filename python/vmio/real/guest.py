"""A real ext4 under a real guest, traced by `vmio serve --trace`: the truth the guest model
(docs/guest.md) is checked against.

The host makes an ext4 image with mkfs.ext4 (e2fsprogs) on a sparse file, serves it with
`vmio serve --trace` (`serve_guest`; cache=writeback here, cache=pdc in vmio.real.pdc), and
a TCG QEMU guest (tests/guest.py: the host's Debian kernel, ext4 and jbd2 built in, a busybox
initramfs) mounts it and runs an fsync-heavy workload; the trace is then read against the
filesystem's own map of itself:

- the journal inode's extents (`debugfs -R 'stat <8>'`), the per-group metadata
  (`dumpe2fs`: superblocks, group descriptors, reserved GDT blocks, bitmaps, inode tables)
  and, after the run, the extents of the root directory and of every file written;
- every write of the workload phase is put in the region that holds it; journal bytes as a
  share of all bytes written; flushes per fsync; and the journal commits.

The workload (WORKLOAD; `guest_script` writes it as the guest's shell script):

```text
mount -t ext4 /dev/vda /mnt                     (defaults: data=ordered, commit=5, barrier)
sync; O_DIRECT read of the disk's last-but-one 4 KiB           <- phase begins
for i in 0 .. appends-1:                                       (200)
    dd if=/tmp/blk of=/mnt/f$((i % files)) bs=4096 count=1 oflag=append conv=notrunc,fsync
        # open(O_WRONLY|O_CREAT|O_APPEND), write 4 KiB at the end, fsync(2), close
O_DIRECT read of the disk's last 4 KiB                         <- phase ends
umount /mnt
```

So 200 fsyncs, each after a 4 KiB append to one of 10 files in turn (the first 10 create
their file). The same in a fio job file (`Workload.fio_job`, for `vmio sim`), checked with
strace against fio 3.33 on the host: open f0, write 4 KiB at 0, fsync f0, open f1, ... f9,
then write f0 at 4 KiB, fsync f0, ... (fio keeps the files open; dd reopens them, which costs
no I/O):

```text
[append-fsync]
directory=/mnt
nrfiles=10
filesize=81920        # 20 x 4 KiB per file
file_service_type=roundrobin:2
rw=write
bs=4096
ioengine=psync
direct=0
fsync=1
create_on_open=1
```

`roundrobin:2` because fio's sync is an I/O of its own that takes a file: with plain
`roundrobin` fio writes f0 and fsyncs f1 (then writes f2, fsyncs f3, ...). fio issues no
fsync after its last write: 200 writes and 199 fsyncs, one fsync fewer than the guest's.

A commit, as JBD2 writes it (`fs/jbd2/commit.c`, `jbd2_journal_commit_transaction`:
descriptor and metadata blocks, then the commit block with REQ_PREFLUSH | REQ_FUA, which the
virtio-blk guest driver, without FUA, turns into FLUSH, WRITE, FLUSH; QEMU passes them on as
NBD requests): the journal writes since the previous commit, ended by FLUSH, a journal WRITE,
FLUSH; its size is the 4 KiB journal blocks it wrote, the commit block included. The guest's
timings mean nothing under TCG and are not reported.

Real versus model (`model`, `compare`, `side_by_side`): the fio job runs in the simulator on
`model_stack` (the same 1 GiB disk with `[vm.disk.filesystem] type = "ext4"`, mounted at
/mnt) and its `vmio.guests[].disks[]` report gives the same `Figures` as the trace: where
the journal is (the model's mke2fs against debugfs's extents) and the blocks written in it,
the journal's share of bytes written, flushes and commits per fsync, commit sizes. Each must
be within TOLERANCE (25 %) of the real figure, the journal at the same blocks.
tests/real_ext4_figures.json records the real figures for a check without QEMU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vmio import stackfile

BLOCK = 4096


@dataclass(frozen=True)
class Workload:
    """The guest's workload: `appends` x (append `block` bytes to file i % `files`, fsync)."""

    files: int = 10
    appends: int = 200
    block: int = BLOCK
    disk_bytes: int = 1 << 30
    mount_options: str = "defaults"

    def fio_job(self) -> str:
        """The same workload as a fio job file (see the module doc)."""
        return (
            "[append-fsync]\ndirectory=/mnt\n"
            f"nrfiles={self.files}\nfilesize={self.appends // self.files * self.block}\n"
            "file_service_type=roundrobin:2\nrw=write\n"
            f"bs={self.block}\nioengine=psync\ndirect=0\nfsync=1\ncreate_on_open=1\n"
        )


WORKLOAD = Workload()


def begin_marker(w: Workload) -> int:
    """Offset of the O_DIRECT read that opens the workload phase in the trace."""
    return w.disk_bytes - 2 * BLOCK


def end_marker(w: Workload) -> int:
    return w.disk_bytes - BLOCK


def guest_script(w: Workload) -> str:
    """The guest's shell script (busybox): mount, markers, the appends, unmount."""

    def marker(offset: int) -> str:
        return (
            f"dd if=/dev/vda of=/dev/null bs={BLOCK} count=1 skip={offset // BLOCK} "
            "iflag=direct status=none"
        )

    return "\n".join(
        [
            "mkdir -p /mnt",
            f"mount -t ext4 -o {w.mount_options} /dev/vda /mnt || echo MOUNT-FAILED",
            f"head -c {w.block} /dev/zero | tr '\\0' x > /tmp/blk",
            "sync",
            marker(begin_marker(w)),
            "i=0",
            f"while [ $i -lt {w.appends} ]; do",
            f"  dd if=/tmp/blk of=/mnt/f$((i % {w.files})) bs={w.block} count=1 "
            "oflag=append conv=notrunc,fsync status=none || echo APPEND-FAILED",
            "  i=$((i+1))",
            "done",
            marker(end_marker(w)),
            "ls -l /mnt | grep -c ' f'",
            "umount /mnt || echo UMOUNT-FAILED",
        ]
    )


# --- the filesystem's map of itself --------------------------------------------------------


def host_tools_missing() -> str | None:
    for tool, package in (("mkfs.ext4", "e2fsprogs"), ("debugfs", "e2fsprogs")):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install {package})"
    if shutil.which("dumpe2fs") is None:
        return "'dumpe2fs' is not installed (apt-get install e2fsprogs)"
    return None


def make_image(path: Path, w: Workload) -> None:
    """A sparse image holding a fresh ext4 (mke2fs defaults; inode tables and journal zeroed
    now, so that no lazy-init thread writes during the run)."""
    with open(path, "wb") as f:
        f.truncate(w.disk_bytes)
    subprocess.run(
        ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )


def _debugfs(image: Path, request: str) -> str:
    r = subprocess.run(
        ["debugfs", "-R", request, str(image)], capture_output=True, text=True, check=True
    )
    return r.stdout


_EXTENT = re.compile(r"\((\d+)(?:-(\d+))?\):(\d+)(?:-(\d+))?")
_TREE_BLOCK = re.compile(r"\(ETB\d+\):(\d+)")


def extents(stat_text: str) -> list[tuple[int, int]]:
    """Physical block ranges [first, last] of the leaf extents in a `debugfs stat` output's
    EXTENTS section (`(logical[-last]):physical[-last]`)."""
    _, _, tail = stat_text.partition("EXTENTS:")
    return sorted((int(m[3]), int(m[4] or m[3])) for m in _EXTENT.finditer(tail))


def tree_blocks(stat_text: str) -> list[tuple[int, int]]:
    """The extent-tree blocks (`(ETBn):N`) of a `debugfs stat` output, as one-block ranges."""
    _, _, tail = stat_text.partition("EXTENTS:")
    return sorted((int(m[1]), int(m[1])) for m in _TREE_BLOCK.finditer(tail))


def journal_extents(image: Path) -> list[tuple[int, int]]:
    """The journal inode's (8) extents: the truth for where journal writes land."""
    return extents(_debugfs(image, "stat <8>"))


_RANGE = r"(\d+)(?:-(\d+))?"
_METADATA = {
    "superblock+gdt": [
        rf"superblock at {_RANGE}",
        rf"Group descriptors at {_RANGE}",
        rf"Reserved GDT blocks at {_RANGE}",
    ],
    "bitmaps": [rf"Block bitmap at {_RANGE}", rf"Inode bitmap at {_RANGE}"],
    "inode table": [rf"Inode table at {_RANGE}"],
}


def metadata_regions(image: Path) -> dict[str, list[tuple[int, int]]]:
    """Per-group static metadata from dumpe2fs, by kind."""
    text = subprocess.run(
        ["dumpe2fs", str(image)], capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, list[tuple[int, int]]] = {}
    for kind, patterns in _METADATA.items():
        ranges = set()
        for p in patterns:
            for m in re.finditer(p, text):
                first = int(m.group(1))
                ranges.add((first, int(m.group(2) or first)))
        out[kind] = sorted(ranges)
    return out


def logged_blocks(image: Path) -> list[list[int]]:
    """The filesystem blocks each journal descriptor block logs, in journal order, from
    `debugfs -R 'logdump -a -O'` (old, checkpointed transactions included: after a clean
    unmount the journal is empty, but its blocks still hold every transaction of a run that
    did not wrap around the journal)."""
    out: list[list[int]] = []
    for line in _debugfs(image, "logdump -a -O").splitlines():
        if line.startswith("Dumping descriptor block"):
            out.append([])
        elif (m := re.match(r"\s+FS block (\d+) logged at journal block", line)) and out:
            out[-1].append(int(m.group(1)))
    return out


def regions(image: Path, w: Workload) -> dict[str, list[tuple[int, int]]]:
    """Every region a write can land in, by name (block ranges), after the run."""
    r = {"journal": journal_extents(image)}
    r.update(metadata_regions(image))
    r["root directory"] = extents(_debugfs(image, "stat <2>"))
    files = [_debugfs(image, f"stat /f{i}") for i in range(w.files)]
    r["file data"] = sorted(e for f in files for e in extents(f))
    r["extent tree blocks"] = sorted(e for f in files for e in tree_blocks(f))
    return r


# --- the trace -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One request of a `vmio serve --trace` iolog (see crates/vmio-serve/src/trace.rs)."""

    t_us: int
    action: str  # read, write, trim, sync (NBD FLUSH), datasync (FUA of the write before)
    offset: int
    length: int


def read_trace(text: str) -> list[Event]:
    lines = text.splitlines()
    if not lines or lines[0] != "fio version 3 iolog":
        raise ValueError("not a fio version 3 iolog (first line 'fio version 3 iolog')")
    out = []
    for n, line in enumerate(lines[1:], start=2):
        f = line.split()
        if len(f) == 3:
            continue  # add, open, close
        if len(f) != 5:
            raise ValueError(f"trace line {n}: {len(f)} fields; expected 3 or 5")
        out.append(Event(int(f[0]), f[2], int(f[3]), int(f[4])))
    return out


def marker_index(events: list[Event], offset: int, start: int = 0) -> int:
    """Index of the first marker read (one block at `offset`) from `start` on."""
    for i in range(start, len(events)):
        e = events[i]
        if e.action == "read" and e.offset == offset and e.length == BLOCK:
            return i
    raise ValueError(f"the trace has no marker read at offset {offset}")


def between(events: list[Event], begin: int, end: int) -> list[Event]:
    """The events between the marker reads at `begin` and `end` (both excluded)."""
    b = marker_index(events, begin)
    return events[b + 1 : marker_index(events, end, b + 1)]


def phase(events: list[Event], w: Workload) -> tuple[list[Event], list[Event]]:
    """The events between the begin and end marker reads (both excluded), and those after
    the end marker."""
    end = marker_index(events, end_marker(w))
    return events[marker_index(events, begin_marker(w)) + 1 : end], events[end + 1 :]


@dataclass
class Analysis:
    workload: dict
    journal_extents: list[tuple[int, int]]
    writes: int = 0
    write_bytes: int = 0
    journal_bytes: int = 0
    journal_share: float = 0.0
    flushes: int = 0
    fua_writes: int = 0
    fsyncs: int = 0
    flushes_per_fsync: float = 0.0
    bytes_by_region: dict[str, int] = field(default_factory=dict)
    writes_by_region: dict[str, int] = field(default_factory=dict)
    journal_offsets_blocks: list[int] = field(default_factory=list)
    # The lowest and highest filesystem block any journal write covered.
    journal_written_extent: tuple[int, int] | None = None
    commits: int = 0
    commit_blocks: list[int] = field(default_factory=list)
    commit_blocks_histogram: dict[int, int] = field(default_factory=dict)
    # What the descriptors log (all transactions since the mount): the regions of the logged
    # blocks of one descriptor -> how many descriptors log that set.
    logged_sets: dict[str, int] = field(default_factory=dict)
    # 4 KiB blocks written after the phase (unmount: the last commit and the checkpoint), by
    # region of their first block.
    unmount_blocks_by_region: dict[str, int] = field(default_factory=dict)
    commits_per_fsync: float = 0.0
    journal_writes_outside_commits: int = 0
    # Writes of the journal's own superblock (its first block: JBD2 moving the log tail);
    # journal bytes, not part of a commit.
    journal_superblock_writes: int = 0
    request_sequence_of_one_fsync: list[str] = field(default_factory=list)


def region_of(block: int, regions: dict[str, list[tuple[int, int]]]) -> str:
    for name, ranges in regions.items():
        if any(a <= block <= b for a, b in ranges):
            return name
    return "other"


def _short(e: Event, regions: dict[str, list[tuple[int, int]]]) -> str:
    if e.action in ("sync", "datasync"):
        return "FLUSH" if e.action == "sync" else "FUA"
    return f"{e.action.upper()} {region_of(e.offset // BLOCK, regions)} {e.length // BLOCK}b"


def is_commit_block(events: list[Event], i: int) -> bool:
    """Whether write `i` (a journal write) is a commit block: JBD2's commit block with
    REQ_PREFLUSH | REQ_FUA, which virtio-blk without FUA sends as FLUSH, WRITE, FLUSH."""
    return (
        0 < i < len(events) - 1
        and events[i - 1].action == "sync"
        and events[i + 1].action == "sync"
    )


def analyse(
    events: list[Event],
    regions: dict[str, list[tuple[int, int]]],
    w: Workload,
    logged: list[list[int]] | None = None,
    after: list[Event] | None = None,
) -> Analysis:
    """The figures of the workload phase `events` (see the module doc for a commit), with
    what the journal's descriptors log and the writes `after` the phase."""
    journal = regions["journal"]
    journal_start = journal[0][0]
    a = Analysis(workload={**asdict(w), "fio_job": w.fio_job()}, journal_extents=journal)
    by_bytes: Counter[str] = Counter()
    by_count: Counter[str] = Counter()
    run: list[int] = []  # journal blocks written since the last commit
    commit_ends: list[int] = []  # index of the flush that ends each commit
    for i, e in enumerate(events):
        if e.action == "sync":
            a.flushes += 1
        elif e.action == "datasync":
            a.fua_writes += 1
        elif e.action == "write":
            a.writes += 1
            a.write_bytes += e.length
            # A request lies in one region here (ext4 does not merge across them).
            where = region_of(e.offset // BLOCK, regions)
            by_bytes[where] += e.length
            by_count[where] += 1
            if where == "journal":
                a.journal_bytes += e.length
                first, last = e.offset // BLOCK, (e.offset + e.length) // BLOCK - 1
                lo, hi = a.journal_written_extent or (first, last)
                a.journal_written_extent = (min(lo, first), max(hi, last))
                if e.offset // BLOCK == journal_start:
                    a.journal_superblock_writes += 1
                    continue
                a.journal_offsets_blocks.append(e.offset // BLOCK - journal_start)
                blocks = e.length // BLOCK
                if is_commit_block(events, i):
                    a.commit_blocks.append(sum(run) + blocks)
                    commit_ends.append(i + 1)
                    run = []
                else:
                    run.append(blocks)
    a.journal_writes_outside_commits = len(run)
    a.fsyncs = w.appends
    a.commits = len(a.commit_blocks)
    a.journal_share = a.journal_bytes / a.write_bytes if a.write_bytes else 0.0
    a.flushes_per_fsync = a.flushes / a.fsyncs
    a.commits_per_fsync = a.commits / a.fsyncs
    a.bytes_by_region = dict(by_bytes.most_common())
    a.writes_by_region = dict(by_count.most_common())
    a.commit_blocks_histogram = dict(sorted(Counter(a.commit_blocks).items()))
    sets = Counter(
        " + ".join(sorted(region_of(b, regions) for b in blocks)) for blocks in logged or []
    )
    a.logged_sets = dict(sets.most_common())
    unmount: Counter[str] = Counter()
    for e in after or []:
        if e.action == "write":
            unmount[region_of(e.offset // BLOCK, regions)] += e.length // BLOCK
    a.unmount_blocks_by_region = dict(unmount.most_common())
    # The requests of one fsync in the steady state: the last commit's, from the flush that
    # ended the commit before it.
    if len(commit_ends) >= 2:
        one = events[commit_ends[-2] + 1 : commit_ends[-1] + 1]
        a.request_sequence_of_one_fsync = [_short(e, regions) for e in one]
    return a


def table(a: Analysis) -> str:
    """The figures as a text table."""
    from vmio import fioreport as report

    mean = sum(a.commit_blocks) / a.commits if a.commits else 0.0
    rows = [
        ["journal extents (4 KiB blocks)", ", ".join(f"{x}-{y}" for x, y in a.journal_extents)],
        ["fsyncs", f"{a.fsyncs}"],
        ["writes", f"{a.writes} ({a.write_bytes // 1024} KiB)"],
        ["journal bytes share", f"{100 * a.journal_share:.1f} %"],
        ["flushes per fsync", f"{a.flushes_per_fsync:.2f}"],
        ["FUA writes", f"{a.fua_writes}"],
        ["commits per fsync", f"{a.commits_per_fsync:.2f}"],
        ["commit size (blocks): mean", f"{mean:.2f}"],
        [
            "commit size histogram",
            ", ".join(f"{k}: {v}" for k, v in a.commit_blocks_histogram.items()),
        ],
    ]
    for name, b in a.bytes_by_region.items():
        rows.append(
            [f"writes to {name}", f"{a.writes_by_region[name]} ({100 * b / a.write_bytes:.1f} %)"]
        )
    offs = a.journal_offsets_blocks
    if offs:
        rows.append(["journal blocks written (from its start)", f"{min(offs)}..{max(offs)}"])
    rows.append(["journal superblock writes", f"{a.journal_superblock_writes}"])
    rows.append(["one fsync's requests", " | ".join(a.request_sequence_of_one_fsync)])
    for logged, n in a.logged_sets.items():
        rows.append([f"descriptors logging ({n})", logged])
    rows.append(
        [
            "unmount: blocks written",
            ", ".join(f"{k}: {v}" for k, v in a.unmount_blocks_by_region.items()),
        ]
    )
    return report.text_table(["real ext4 (guest) figure", "value"], rows, align="ll")


# --- the whole run -------------------------------------------------------------------------


def _stack(w: Workload, path: bool, cache: str, disk: dict[str, Any]) -> str:
    """One SSD of `w.disk_bytes` (with `path`: the served image ext4.img), one VM whose
    disk `vda` is in host cache mode `cache`, with `disk`'s other keys."""
    device = {"name": "disk", "model": "ssd", **({"path": "ext4.img"} if path else {})}
    doc = {
        "device": [{**device, "size": str(w.disk_bytes)}],
        "volume": [{"name": "v", "layout": "single", "devices": ["disk"]}],
        "vm": [{"name": "vm1", "disk": [{"name": "vda", "volume": "v", "cache": cache, **disk}]}],
    }
    return stackfile.render(doc)


def real_stack(w: Workload, cache: str = "writeback") -> str:
    """The stack `vmio serve` serves the image with, its disk in host cache mode `cache`."""
    return _stack(w, True, cache, {})


def model_stack(w: Workload) -> str:
    """The same stack for `vmio sim`, its disk carrying the guest model's ext4 (mke2fs
    defaults, like `make_image`) mounted where the fio job writes. The VM disk's size is
    given: without it the disk is the whole volume, whose size in the simulator is the
    device model's capacity, not the device's `size` (which only sizes a served image)."""
    if w.mount_options != "defaults":
        raise ValueError(f"mount_options: {w.mount_options!r}; the model runs only 'defaults'")
    fs = {"type": "ext4", "mount": "/mnt"}
    return _stack(w, False, "writeback", {"size": str(w.disk_bytes), "filesystem": fs})


@dataclass
class Served:
    """What a guest run under `vmio serve` leaves: the guest's console, the server's
    stderr, and in the work directory the image, the trace and the statistics file."""

    console: str
    server_stderr: str
    image: Path
    trace: Path
    stats: Path


def serve_guest(
    workdir: Path,
    boot: Callable[[str, str, Path], str],
    w: Workload = WORKLOAD,
    cache: str = "writeback",
    script: str | None = None,
) -> Served:
    """Make the image, serve it (host cache mode `cache`) with `--trace` and `--stats-file`,
    boot the guest with `boot(drive, script, workdir)` (tests/guest.py's run_guest) running
    `script` (default `guest_script(w)`), stop the server (which writes its final
    statistics)."""
    from vmio.real import serve

    image = workdir / "ext4.img"
    make_image(image, w)
    (workdir / "stack.toml").write_text(real_stack(w, cache), encoding="utf-8")
    sock, trace, stats = workdir / "nbd.sock", workdir / "trace.iolog", workdir / "stats.json"
    proc = serve.start_vmio(
        workdir / "stack.toml", sock, "--trace", str(trace), "--stats-file", str(stats), cwd=workdir
    )
    try:
        drive = f"nbd+unix:///vm1?socket={sock}"
        console = boot(drive, guest_script(w) if script is None else script, workdir)
    finally:
        serve._stop(proc)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    return Served(console, err, image, trace, stats)


@dataclass
class Run:
    analysis: Analysis
    console: str
    server_stderr: str
    seconds: float


def run(
    workdir: Path,
    boot: Callable[[str, str, Path], str],
    w: Workload = WORKLOAD,
    json_path: Path | None = None,
) -> Run:
    """Serve and boot (`serve_guest`, cache=writeback), analyse the trace; write the
    analysis as JSON to `json_path` if given."""
    t0 = time.monotonic()
    s = serve_guest(workdir, boot, w)
    try:
        events, after = phase(read_trace(s.trace.read_text()), w)
    except ValueError as e:
        raise RuntimeError(
            f"{e}; server:\n{s.server_stderr}\nguest console:\n{s.console[-4000:]}"
        ) from None
    a = analyse(events, regions(s.image, w), w, logged_blocks(s.image), after)
    if json_path is not None:
        json_path.write_text(json.dumps(asdict(a), indent=2) + "\n", encoding="utf-8")
    return Run(a, s.console, s.server_stderr, time.monotonic() - t0)


# --- real versus model ---------------------------------------------------------------------

TOLERANCE = 0.25
"""How far a model figure may be from the real one (within 25 %)."""


@dataclass(frozen=True)
class Figures:
    """The figures both sides report. Blocks are 4 KiB filesystem blocks (absolute); a
    commit's size counts its journal blocks, the commit block included."""

    journal_extent: tuple[int, int]
    journal_written_extent: tuple[int, int]
    fsyncs: int
    journal_share: float
    flushes_per_fsync: float
    commits_per_fsync: float
    mean_commit_blocks: float
    commit_blocks_histogram: dict[int, int]

    @staticmethod
    def of_analysis(a: Analysis) -> Figures:
        """The real side, from the trace's analysis."""
        if len(a.journal_extents) != 1 or a.journal_written_extent is None:
            raise ValueError(
                f"journal extents {a.journal_extents}, written {a.journal_written_extent}: "
                "expected one extent, written"
            )
        return Figures(
            journal_extent=a.journal_extents[0],
            journal_written_extent=a.journal_written_extent,
            fsyncs=a.fsyncs,
            journal_share=a.journal_share,
            flushes_per_fsync=a.flushes_per_fsync,
            commits_per_fsync=a.commits_per_fsync,
            mean_commit_blocks=sum(a.commit_blocks) / a.commits if a.commits else 0.0,
            commit_blocks_histogram=dict(a.commit_blocks_histogram),
        )

    @staticmethod
    def of_json(d: dict) -> Figures:
        """Figures saved with `to_json` (JSON keys are strings, extents lists)."""
        return Figures(
            journal_extent=(d["journal_extent"][0], d["journal_extent"][1]),
            journal_written_extent=(
                d["journal_written_extent"][0],
                d["journal_written_extent"][1],
            ),
            fsyncs=d["fsyncs"],
            journal_share=d["journal_share"],
            flushes_per_fsync=d["flushes_per_fsync"],
            commits_per_fsync=d["commits_per_fsync"],
            mean_commit_blocks=d["mean_commit_blocks"],
            commit_blocks_histogram={int(k): v for k, v in d["commit_blocks_histogram"].items()},
        )

    def to_json(self) -> dict:
        return asdict(self)


def model(w: Workload = WORKLOAD, seed: int = 1) -> Figures:
    """The guest model's side: `w.fio_job()` on `model_stack(w)` through the simulator
    (the same ext4 made and mounted by the model, the same appends and fsyncs); its
    `vmio.guests[0].disks[0]` report as Figures."""
    from vmio import sim

    text = sim.simulate_text(
        model_stack(w), "real-ext4-model.toml", w.fio_job(), "append-fsync.fio", seed=seed
    )
    d = json.loads(text)["vmio"]["guests"][0]["disks"][0]
    j = d["journal"]
    if d["journal_extent"] is None or d["journal_written_extent"] is None:
        raise ValueError(f"the model wrote no journal: {d}")
    per_fsync = 1 / d["fsyncs"] if d["fsyncs"] else 0.0
    return Figures.of_json(
        {
            **{k: d[k] for k in ("journal_extent", "journal_written_extent", "fsyncs")},
            "journal_share": d["journal_share"],
            "flushes_per_fsync": d["flushes"] * per_fsync,
            "commits_per_fsync": j["commits"] * per_fsync,
            "mean_commit_blocks": j["mean_commit_blocks"],
            "commit_blocks_histogram": j["commit_blocks_histogram"],
        }
    )


@dataclass(frozen=True)
class Row:
    """One figure of the side-by-side: the two values as text, the model's difference
    (relative to the real value, a distance for a distribution, 'same' or 'differs' where
    only equality counts) and whether it passes."""

    figure: str
    real: str
    model: str
    difference: str
    ok: bool


def _relative(name: str, real: float, model: float, fmt: str) -> Row:
    rel = (model - real) / real if real else (0.0 if model == real else float("inf"))
    return Row(
        name, format(real, fmt), format(model, fmt), f"{100 * rel:+.1f} %", abs(rel) <= TOLERANCE
    )


def _extent(e: tuple[int, int]) -> str:
    return f"{e[0]}-{e[1]}"


def _histogram(h: dict[int, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(h.items()))


def distribution_distance(a: dict[int, int], b: dict[int, int]) -> float:
    """Total variation distance of two histograms as distributions: the share of one's
    counts that must move to another value to make the other (0 equal, 1 disjoint)."""
    na, nb = sum(a.values()), sum(b.values())
    if not na or not nb:
        return 0.0 if na == nb else 1.0
    return sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in a.keys() | b.keys()) / 2


def compare(real: Figures, model: Figures) -> list[Row]:
    """Real versus model, figure by figure: the journal's place must be the same, its
    written range must start at the same block, the rest within TOLERANCE (the commit-size
    histogram as a total variation distance at most TOLERANCE). The fsync counts are shown,
    not checked: fio issues no fsync after its last write (see the module doc)."""
    rw, mw = real.journal_written_extent, model.journal_written_extent
    used = _relative("journal blocks written", rw[1] - rw[0] + 1, mw[1] - mw[0] + 1, "d")
    tvd = distribution_distance(real.commit_blocks_histogram, model.commit_blocks_histogram)
    return [
        Row(
            "journal (blocks)",
            _extent(real.journal_extent),
            _extent(model.journal_extent),
            "same" if real.journal_extent == model.journal_extent else "differs",
            real.journal_extent == model.journal_extent,
        ),
        Row(
            "journal written from (block)",
            str(rw[0]),
            str(mw[0]),
            "same" if rw[0] == mw[0] else "differs",
            rw[0] == mw[0] and model.journal_extent[0] <= mw[0] <= mw[1] <= model.journal_extent[1],
        ),
        Row(
            "journal written to (block)",
            str(rw[1]),
            str(mw[1]),
            f"{used.difference} blocks",
            used.ok,
        ),
        Row(
            "fsyncs", str(real.fsyncs), str(model.fsyncs), f"{model.fsyncs - real.fsyncs:+d}", True
        ),
        _relative(
            "journal share of bytes written (%)",
            100 * real.journal_share,
            100 * model.journal_share,
            ".2f",
        ),
        _relative("flushes per fsync", real.flushes_per_fsync, model.flushes_per_fsync, ".3f"),
        _relative("commits per fsync", real.commits_per_fsync, model.commits_per_fsync, ".3f"),
        _relative(
            "commit size, mean (blocks)", real.mean_commit_blocks, model.mean_commit_blocks, ".2f"
        ),
        Row(
            "commit size histogram (blocks: commits)",
            _histogram(real.commit_blocks_histogram),
            _histogram(model.commit_blocks_histogram),
            f"distance {tvd:.3f}",
            tvd <= TOLERANCE,
        ),
    ]


def side_by_side(rows: list[Row]) -> str:
    """The comparison as a text table; a figure out of tolerance is marked 'MISS'."""
    from vmio import fioreport as report

    return report.text_table(
        ["figure", "real ext4", "model", "difference", "check"],
        [[r.figure, r.real, r.model, r.difference, "ok" if r.ok else "MISS"] for r in rows],
        align="lllll",
    )
