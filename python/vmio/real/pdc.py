"""PDC (S3, docs/references.md; docs/pdc.md) checked against a real ext4 in a real guest and on
this host's real storage: `vmio serve` with `cache = "pdc"` (crates/vmio-serve/src/pdc.rs, the
detector's rule in crates/vmio-core/src/cache/pdc.rs) serving the guest of `vmio.real.guest`.

(a) Detection. The TCG guest (tests/guest.py) mounts a fresh 1 GiB ext4 (mke2fs defaults:
a 32 MiB journal, 8192 blocks, in group 4) served with `cache = "pdc"`, `--trace` and
`--stats-file`, and appends + fsyncs (`WORKLOAD`: realguest's workload, long enough for the
journal to wrap around twice: about 6 journal blocks per fsync, 8192 blocks a pass). After
the run:

```text
truth     = the journal inode's extents (debugfs `stat <8>`), bytes of the disk
detected  = the export's predicted journals from the final statistics (pdc.journals)
precision = |detected ∩ truth| / |detected|      recall = |detected ∩ truth| / |truth|
commits before detection = commits (a journal write between two FLUSHes: realguest's
  is_commit_block) whose request arrived before the first `detected` event (the event's
  at_ns counts from the dispatcher's start, the trace's microseconds from the server's,
  both in crates/vmio-serve/src/server.rs `start`, well under a millisecond apart; the
  guest's commits are about 10 ms apart under TCG)
first pass = commits before the log first wrapped (`wraps`: a journal write in the
  journal's lower half after one in its upper half; the journal's own superblock, its first
  block, left out), and for each wrap whether its transaction's two requests (the tail up to
  the journal's end, the head from its first log block) arrived in that order
```

The detector misses the first pass by design (it predicts a journal when the log comes back
to its start), so `commits before detection` is about `first pass`.

What the real ext4 does at a wrap (tests/real_pdc_figures.json, both wraps of the run, and
every earlier run alike): JBD2 rewrites the journal's superblock (its first block, right below
the log's first block) when a checkpoint moves the log tail, several times a pass; and the
transaction that spans the wrap reaches the server as two requests, its head (from the log's
first block) before its tail (up to the journal's end), both before the commit's FLUSH (the
guest kernel 6.1 dispatches a plug's requests last-in first-out; liburing's
https://github.com/axboe/liburing/issues/1000). A detector must take a wrap that continues a
run begun at the superblock and whose pass grows by the tail after the head arrived.

(b) Benefit. The guest's trace is replayed by fio (`ioengine=nbd`, `read_iolog`,
`replay_no_stall=1`: the recorded order as fast as the server answers, `iodepth=1`: one
request at a time, as the fsync-bound guest issued them) against a fresh `vmio serve` of a
fresh sparse 1 GiB file, alternately `cache = "writeback"` and `cache = "pdc"`:

```text
for round in 1..rounds: for cache in (writeback, pdc):
    truncate -s 1G ext4.img; vmio serve (cache) --stats-file; fio replay
    throughput = fio's bytes read + written / its run time; p99 of writes and of FLUSHes
    written    = /proc/<server>/io write_bytes (bytes the server dirtied or wrote direct)
    cached     = ext4.img's resident bytes after the run (serve.cached_bytes: mincore, as fincore)
    bypassed   = the server's pdc.bypassed_bytes
```

fio's nbd engine has no fdatasync: the trace's `datasync` lines (a FUA write made durable)
are replayed as `sync` (an NBD FLUSH), which makes the same write durable (`replay_trace`).
What differs from S3 (QEMU-KVM 2.1 on Linux 4.14, an SSD, cache=writeback as the baseline,
each scenario run 10 times): the backing file is a file on this machine's disk, itself a
virtual disk of a cloud VM (`host_description` says which file system and device); two cores
shared with other work; the guest ran under TCG, so its trace is replayed by fio instead of
a KVM guest running the workload (the guest's think time and its page cache are gone, only
its requests remain, in their order); the host has far more memory than the replay touches,
so no cached data is evicted by journal pages and the cache-hit gain of S3 cannot show:
only the pages held (`cached`) and the sync path (`flush p99`) differ.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from vmio.real import guest as realguest
from vmio.real.guest import BLOCK, Event, Workload

WORKLOAD = Workload(appends=3000)
"""realguest's workload, 3000 fsyncs: the default journal (8192 blocks) wraps after about
1400 commits of about 6 blocks, so the detector has a second pass to bypass."""

EXPORT = "vm1/vda"
MODES = ("writeback", "pdc")


def host_tools_missing() -> str | None:
    """What the check needs on the host besides realguest's and the guest's tools."""
    if shutil.which("fio") is None:
        return "'fio' is not installed (apt-get install fio)"
    return realguest.host_tools_missing()


def host_description(path: Path) -> str:
    """The storage under `path` and the machine: what the replay's figures were measured on."""
    r = subprocess.run(
        ["findmnt", "--noheadings", "--output", "SOURCE,FSTYPE", "--target", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    source, _, fstype = r.stdout.strip().partition(" ")
    dev = Path(source).name
    rot = Path(f"/sys/block/{dev}/queue/rotational")
    kind = {"0": "non-rotational", "1": "rotational"}.get(
        rot.read_text().strip() if rot.is_file() else "", "kind unknown"
    )
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (
        f"a file on {fstype.strip() or '?'} on {source or '?'} ({kind} as the kernel sees it), "
        f"{os.cpu_count()} cores, {mem / 2**30:.0f} GiB, Linux {os.uname().release}"
    )


# --- (a) detection -------------------------------------------------------------------------


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Bytes in both unions of half-open byte ranges [lo, hi) (each list non-overlapping)."""
    return sum(max(0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)


def size(ranges: list[tuple[int, int]]) -> int:
    return sum(hi - lo for lo, hi in ranges)


def journal_bytes(image: Path) -> list[tuple[int, int]]:
    """The journal inode's extents (debugfs) as half-open byte ranges of the disk."""
    return [(a * BLOCK, (b + 1) * BLOCK) for a, b in realguest.journal_extents(image)]


def pdc_stats(stats: Path) -> dict:
    """The PDC part of export EXPORT in a `vmio serve --stats-file` file."""
    for s in json.loads(stats.read_text(encoding="utf-8")):
        if s["export"] == EXPORT:
            if s.get("pdc") is None:
                raise ValueError(f"{stats}: export {EXPORT} has no 'pdc' statistics")
            return s["pdc"]
    raise ValueError(f"{stats}: no export {EXPORT}")


def commit_times_us(events: list[Event], journal: list[tuple[int, int]]) -> list[int]:
    """Arrival (µs since the server started) of every commit block in the trace."""
    return [
        e.t_us
        for i, e in enumerate(events)
        if e.action == "write"
        and any(lo <= e.offset < hi for lo, hi in journal)
        and realguest.is_commit_block(events, i)
    ]


@dataclass(frozen=True)
class Wrap:
    """The log coming back to the journal's start (JBD2's `jbd2_journal_next_log_block`,
    fs/jbd2/journal.c: the head goes from the journal's last block to its first log block)."""

    t_us: int
    # Commits (commit blocks) before the wrapping write, since the trace began.
    commits_before: int
    # The wrapping transaction's tail (its blocks up to the journal's end) arrived after its
    # head (its blocks from the start), both before its commit's FLUSH.
    reversed: bool
    # Writes of the journal's superblock (its first block) since the previous wrap; the last
    # one, right below the log's first block, is the start of a sequential run the wrap
    # continues.
    superblock_writes: int


def wraps(events: list[Event], journal: list[tuple[int, int]]) -> list[Wrap]:
    """Every wrap of the log in the trace (the module doc's rule):

    ```text
    for each journal write w (the superblock, the journal's first block, only counted):
        w in the lower half after a write in the upper half: a wrap (its transaction open)
        w in the upper half while the wrapping transaction is open: its tail, reversed
        else: upper = w in the upper half
    a FLUSH closes the wrapping transaction
    ```"""
    lo, hi = journal[0][0], journal[-1][1]
    middle = (lo + hi) // 2
    out: list[Wrap] = []
    upper = wrapping = False
    commits = superblocks = 0
    for i, e in enumerate(events):
        if e.action == "sync":
            wrapping = False
        if e.action != "write" or not any(a <= e.offset < b for a, b in journal):
            continue
        if e.offset == lo:
            superblocks += 1
            continue
        if e.offset < middle and upper:
            out.append(Wrap(e.t_us, commits, False, superblocks))
            upper, wrapping, superblocks = False, True, 0
        elif e.offset >= middle and wrapping:
            out[-1] = Wrap(out[-1].t_us, out[-1].commits_before, True, out[-1].superblock_writes)
        else:
            upper = e.offset >= middle
        commits += realguest.is_commit_block(events, i)
    return out


@dataclass
class Detection:
    """(a)'s figures; byte ranges half-open."""

    journal: list[tuple[int, int]]
    detected: list[tuple[int, int]]
    precision: float
    recall: float
    # The range the first `detected` event predicted, and its precision and recall.
    first_detected: tuple[int, int] | None
    first_precision: float
    first_recall: float
    commits: int
    commits_before_detection: int | None
    # Commits before the log first wrapped (all of them when it did not).
    first_pass_commits: int
    wraps: list[Wrap]
    flushes: int
    writes: int
    bypassed_writes: int
    bypassed_bytes: int
    journal_bytes_written: int
    detections: int
    drops: int
    events: list[dict]


def detection(trace: list[Event], journal: list[tuple[int, int]], pdc: dict) -> Detection:
    """(a)'s figures from the whole trace, the journal's extents and the PDC statistics."""
    detected = sorted((j["lo"], j["hi"]) for j in pdc["journals"])
    first = next((e for e in pdc["events"] if e["kind"] == "detected"), None)
    first_range = [(first["lo"], first["hi"])] if first else []
    commits = commit_times_us(trace, journal)
    passes = wraps(trace, journal)
    inside = overlap(detected, journal)
    first_inside = overlap(first_range, journal)
    return Detection(
        journal=journal,
        detected=detected,
        precision=inside / size(detected) if detected else 0.0,
        recall=inside / size(journal),
        first_detected=first_range[0] if first_range else None,
        first_precision=first_inside / size(first_range) if first_range else 0.0,
        first_recall=first_inside / size(journal),
        commits=len(commits),
        commits_before_detection=(
            sum(t * 1000 < first["at_ns"] for t in commits) if first else None
        ),
        first_pass_commits=passes[0].commits_before if passes else len(commits),
        wraps=passes,
        flushes=sum(e.action == "sync" for e in trace),
        writes=sum(e.action == "write" for e in trace),
        bypassed_writes=pdc["bypassed_writes"],
        bypassed_bytes=pdc["bypassed_bytes"],
        journal_bytes_written=sum(
            overlap([(e.offset, e.offset + e.length)], journal)
            for e in trace
            if e.action == "write"
        ),
        detections=pdc["detections"],
        drops=pdc["drops"],
        events=pdc["events"],
    )


@dataclass
class Guest:
    detection: Detection
    console: str
    server_stderr: str
    trace: Path
    seconds: float


def run_guest(
    workdir: Path, boot: Callable[[str, str, Path], str], w: Workload = WORKLOAD
) -> Guest:
    """(a): the guest's workload on an ext4 served with cache = "pdc", then its figures."""
    t0 = time.monotonic()
    s = realguest.serve_guest(workdir, boot, w, cache="pdc")
    try:
        trace = realguest.read_trace(s.trace.read_text())
        d = detection(trace, journal_bytes(s.image), pdc_stats(s.stats))
    except (ValueError, OSError) as e:
        raise RuntimeError(
            f"{e}; server:\n{s.server_stderr}\nguest console:\n{s.console[-4000:]}"
        ) from None
    return Guest(d, s.console, s.server_stderr, s.trace, time.monotonic() - t0)


def detection_table(d: Detection) -> str:
    from vmio import fioreport as report

    def mib(r: tuple[int, int] | None) -> str:
        if r is None:
            return "none"
        return f"{r[0] // BLOCK}-{r[1] // BLOCK - 1} ({(r[1] - r[0]) / 2**20:.2f} MiB)"

    rows = [
        ["journal (debugfs, 4 KiB blocks)", ", ".join(mib(r) for r in d.journal)],
        ["detected at the end (blocks)", ", ".join(mib(r) for r in d.detected) or "none"],
        ["precision / recall at the end", f"{d.precision:.4f} / {d.recall:.4f}"],
        ["first detection (blocks)", mib(d.first_detected)],
        ["precision / recall at first", f"{d.first_precision:.4f} / {d.first_recall:.4f}"],
        ["commits (whole trace)", f"{d.commits}"],
        ["commits before detection", f"{d.commits_before_detection}"],
        ["commits in the journal's first pass", f"{d.first_pass_commits}"],
        [
            "wraps (commits before; tail after head; superblock writes)",
            ", ".join(
                f"{w.commits_before}; {'yes' if w.reversed else 'no'}; {w.superblock_writes}"
                for w in d.wraps
            )
            or "none",
        ],
        ["writes / flushes", f"{d.writes} / {d.flushes}"],
        ["bypassed writes", f"{d.bypassed_writes}"],
        [
            "bypassed bytes / journal bytes written",
            f"{d.bypassed_bytes / 2**20:.2f} / {d.journal_bytes_written / 2**20:.2f} MiB",
        ],
        ["detections / drops", f"{d.detections} / {d.drops}"],
    ]
    return report.text_table(["PDC on a real ext4 (guest)", "value"], rows, align="ll")


# --- (b) benefit ---------------------------------------------------------------------------


def replay_trace(text: str) -> str:
    """A `vmio serve --trace` iolog as fio's nbd engine replays it: `datasync` (fdatasync,
    which the engine refuses with EINVAL) becomes `sync` (NBD FLUSH)."""
    lines = text.splitlines()
    out = [" ".join("sync" if f == "datasync" else f for f in x.split()) for x in lines[1:]]
    return "\n".join([lines[0], *out]) + "\n"


@dataclass
class Replay:
    """One replay of the guest's trace (see the module doc)."""

    cache: str
    round: int
    seconds: float
    bytes_per_s: float
    ops_per_s: float
    write_p99_us: float
    flush_p99_us: float
    written_bytes: int
    cached_bytes: int
    bypassed_bytes: int


def fio_replay(sock: Path, iolog: Path, out: Path) -> dict:
    """fio's nbd engine replaying `iolog` on export EXPORT at `sock`; its JSON job."""
    job = (
        "[replay]\nioengine=nbd\n"
        f"uri=nbd+unix:///{EXPORT}?socket={sock}\n"
        f"read_iolog={iolog}\nreplay_no_stall=1\niodepth=1\n"
    )
    path = out.with_suffix(".fio")
    path.write_text(job, encoding="utf-8")
    r = subprocess.run(
        ["fio", "--output-format=json", str(path)], capture_output=True, text=True, check=False
    )
    # The nbd engine prints "fio: connected to NBD server" on stdout before the JSON.
    text = r.stdout[r.stdout.find("{") :] if "{" in r.stdout else ""
    if r.returncode != 0 or not text:
        raise RuntimeError(f"fio failed ({r.returncode}): {r.stderr.strip() or r.stdout}")
    out.write_text(text, encoding="utf-8")
    job_out = json.loads(text)["jobs"][0]
    if job_out["error"]:
        raise RuntimeError(f"fio's replay ended with error {job_out['error']}")
    return job_out


def _p99_us(lat: dict) -> float:
    return lat.get("percentile", {}).get("99.000000", 0) / 1000


def write_bytes(pid: int) -> int:
    """Bytes process `pid` caused to be written to storage (`/proc/PID/io`: buffered writes
    counted when they dirty a page, direct writes when issued)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "write_bytes":
            return int(value)
    raise ValueError(f"/proc/{pid}/io has no write_bytes")


def replay(workdir: Path, iolog: Path, cache: str, round_: int, w: Workload = WORKLOAD) -> Replay:
    """One replay of `iolog` against a fresh server and a fresh sparse image."""
    from vmio.real import serve

    image = workdir / "ext4.img"
    image.unlink(missing_ok=True)
    with open(image, "wb") as f:
        f.truncate(w.disk_bytes)
    (workdir / "stack.toml").write_text(realguest.real_stack(w, cache), encoding="utf-8")
    stats = workdir / f"stats-{cache}-{round_}.json"
    proc = serve.start_vmio(
        workdir / "stack.toml", workdir / "nbd.sock", "--stats-file", str(stats), cwd=workdir
    )
    try:
        before = write_bytes(proc.pid)
        job = fio_replay(workdir / "nbd.sock", iolog, workdir / f"fio-{cache}-{round_}.json")
        written = write_bytes(proc.pid) - before
    finally:
        serve._stop(proc)
    cached = serve.cached_bytes(image)
    seconds = job["job_runtime"] / 1000
    ios = sum(job[d]["total_ios"] for d in ("read", "write", "trim", "sync"))
    moved = job["read"]["io_bytes"] + job["write"]["io_bytes"]
    return Replay(
        cache=cache,
        round=round_,
        seconds=seconds,
        bytes_per_s=moved / seconds if seconds else 0.0,
        ops_per_s=ios / seconds if seconds else 0.0,
        write_p99_us=_p99_us(job["write"]["clat_ns"]),
        flush_p99_us=_p99_us(job["sync"]["lat_ns"]),
        written_bytes=written,
        cached_bytes=cached,
        bypassed_bytes=pdc_stats(stats)["bypassed_bytes"] if cache == "pdc" else 0,
    )


def alternate(workdir: Path, trace: Path, rounds: int, w: Workload = WORKLOAD) -> list[Replay]:
    """`rounds` x (writeback, pdc) replays of the guest's `trace`, alternated."""
    iolog = workdir / "replay.iolog"
    iolog.write_text(replay_trace(trace.read_text()), encoding="utf-8")
    return [replay(workdir, iolog, c, r, w) for r in range(1, rounds + 1) for c in MODES]


def summary(runs: list[Replay]) -> dict[str, dict[str, float]]:
    """Per cache mode, the mean of each figure over its runs."""
    out: dict[str, dict[str, float]] = {}
    for c in MODES:
        mine = [asdict(r) for r in runs if r.cache == c]
        if mine:
            keys = [k for k in mine[0] if k not in ("cache", "round")]
            out[c] = {k: sum(m[k] for m in mine) / len(mine) for k in keys}
    return out


def replay_table(runs: list[Replay]) -> str:
    """Every run, then the mean of each cache mode."""
    from vmio import fioreport as report

    def row(label: str, cache: str, m: dict) -> list[str]:
        mib = [f"{m[k] / 2**20:.2f}" for k in ("written_bytes", "cached_bytes", "bypassed_bytes")]
        return [
            label,
            cache,
            f"{m['seconds']:.2f}",
            f"{m['bytes_per_s'] / 1e6:.2f}",
            f"{m['ops_per_s']:.0f}",
            f"{m['write_p99_us']:.0f}",
            f"{m['flush_p99_us']:.0f}",
            *mib,
        ]

    header = ["run", "cache", "s", "MB/s", "ops/s", "write p99 us", "flush p99 us"]
    header += ["written MiB", "cached MiB", "bypassed MiB"]
    rows = [row(str(r.round), r.cache, asdict(r)) for r in runs]
    rows += [row("mean", c, m) for c, m in summary(runs).items()]
    return report.text_table(header, rows, align="llrrrrrrrr")
