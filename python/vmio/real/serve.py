"""`vmio serve`: the real engine, an NBD server exporting a stack file's VM disks.

The server is the Rust crate `vmio-serve` running inside this process (`vmio._native.serve`,
which releases the GIL while serving). Exports are named `VM/DISK` (`VM` alone is the VM's
first disk). See README.md ("vmio serve") and docs/serve.md.

`bench_serve` compares it (`cache = "none"`, and with `--read-ahead`) with qemu-nbd
(`--cache=none --aio=threads`) and nbdkit's file plugin (`cache=none`) on one image, with fio's
nbd engine over Unix sockets, and measures weighted sharing under cfq. Each workload's
"ceiling" row is fio itself on the same image file, with no server: `ioengine=libaio`,
`direct=1` (fio 3.33 engines/libaio.c: io_submit and io_getevents from one thread, O_DIRECT),
the same block size, depth and pattern; a server's ratio to it is what the NBD path costs.
The servers do not take the same path to the disk: vmio and qemu-nbd open the image with
O_DIRECT, nbdkit 1.32's `cache=none` is a buffered `pread` followed by
`posix_fadvise(POSIX_FADV_DONTNEED)` of the range read (plugins/file/file.c, `file_pread`),
so Linux's read-ahead (mm/readahead.c, up to the device's `read_ahead_kb`) works for it, and
pages still cached from earlier runs or from the image's creation would serve it from memory.
So the image is evicted from the page cache before every run (`evict`, as `vmtouch -e`:
fdatasync, then POSIX_FADV_DONTNEED on the whole file), and the table names each server's
path. Evicting before a run is not enough for a time-based run that reads the image more
than once: a buffered server's second pass over it comes from memory (a 1M sequential read
at QD4 over a 1 GiB image in 4 s: nbdkit left 650 to 890 MiB of it cached, by `fincore`,
and its MB/s was the page cache's). So the sequential read is one pass over the image from
cold (`Case.once`, `case_global`: fio's `io_size` = the image, not time-based, every byte
read once), and each run reports how much of the image the page cache holds after it
(`cached_bytes`, mincore(2) as `fincore`): the random rows stay time-based because random
4 KiB reads start no read-ahead (Linux mm/readahead.c `page_cache_sync_ra`: a read that is
not sequential reads only what it asks for, which nbdkit's DONTNEED then drops), which the
column shows (0 MiB after them). `vmio-uring` is vmio with `--aio io_uring` (each
connection's thread receives, submits and reaps through one io_uring of its own,
crates/vmio-serve/src/uring.rs), `vmio` its default `--aio native` (Linux AIO, a completion
thread). `vmio+ra` is vmio with its own read-ahead of O_DIRECT
windows (crates/vmio-serve/src/readahead.rs), of the size Linux uses for the image's device
(`device_read_ahead`): the mechanism nbdkit gets from the kernel, without the page cache.
Rounds rotate the servers' order; the server's CPU time per I/O (/proc/PID/stat, read before
and after each fio run; it keeps the time of exited threads, such as a connection's) varies
less with the machine's load than IOPS do.

The NBD servers the real checks start (this module's `start`, `start_vmio`, `qsd_command`;
used by vmio.real.throttle, vmio.real.images and vmio.real.servepath): a server is started on
a fresh Unix socket with its stderr piped, is ready when the socket accepts a connection (an
early exit raises VmioError with its stderr), and is stopped with SIGTERM (SIGKILL after 30 s).
qemu-storage-daemon's command line (QEMU 7.2 docs/tools/qemu-storage-daemon.rst): `--object`s,
the `--blockdev` nodes bottom first, `--nbd-server addr.type=unix,addr.path=SOCK`, and one
`--export type=nbd,id=E,node-name=TOP,name=E,writable=on`.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmio import stackfile
from vmio.sim import VmioError, native, read_text


def serve(stack: str | Path, **options: object) -> list[dict]:
    """Serve until SIGINT/SIGTERM; returns the final per-export statistics.

    `options` are `vmio serve`'s, by name (`socket="/tmp/vmio.sock"`, `tcp=7000`,
    `queue_depth=8`, `max_conn_payload="64m"`, `idle_timeout=0`, `trace="t.iolog"`; None: not
    given): the one table `native().serve_options()` lists with their ranges, defaults and help
    (vmio_serve::options, which the `vmio-serve` binary's parser is built from too). Bounds (see
    README.md, "vmio serve"): connections at once, payload bytes in flight per connection and in
    total, handshake and idle timeouts (seconds; idle 0: never), and the grace a shutdown gives
    connections before closing them. `trace`: record every served request as a fio iolog v3
    (time in microseconds since the start, export, read/write/trim/sync, offset, length; a FUA
    write is followed by `datasync 0 0`), at most `trace_max_bytes`; an existing file is refused
    unless `trace_overwrite`. An unknown option, a value outside its range, a backing file locked
    by another process, an existing trace file and an internal failure of the server raise
    VmioError."""
    nat = native()
    if not hasattr(nat, "serve_options"):
        raise VmioError("this build of vmio has no NBD server; reinstall vmio (pip install .)")
    read_text(stack, "stack file")  # the bounded reader's checks and errors, before Rust's
    # The server's own handlers (SIGINT, SIGTERM, SIGUSR1) replace Python's while it runs.
    old = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        text = nat.serve(str(stack), **options)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return json.loads(text)


def stats_table(snaps: list[dict]) -> str:
    """The per-export statistics as a text table, then a line per `cache = "pdc"` export."""
    from vmio import fioreport as report

    header = ["export", "read ops", "read MB", "write ops", "write MB", "flushes", "errors"]
    header += ["read p99 us", "write p99 us"]
    rows = [
        [
            s["export"],
            f"{s['read_ops']:,}",
            f"{s['read_bytes'] / 1e6:.1f}",
            f"{s['write_ops']:,}",
            f"{s['write_bytes'] / 1e6:.1f}",
            f"{s['flush_ops']:,}",
            f"{s['errors']:,}",
            f"{s['read_lat_p99_ns'] / 1e3:.1f}",
            f"{s['write_lat_p99_ns'] / 1e3:.1f}",
        ]
        for s in snaps
    ]
    return report.text_table(header, rows, align="lrrrrrrrr") + "".join(
        _pdc_line(s["export"], s["pdc"]) for s in snaps if "pdc" in s
    )


def _pdc_line(export: str, p: dict) -> str:
    """What a `cache = "pdc"` export's detector predicted and bypassed (vmio_serve::pdc)."""
    journals = " ".join(f"[{j['lo']}, {j['hi']})" for j in p["journals"]) or "none"
    dontcache = "supported" if p["dontcache_supported"] else "not supported"
    return (
        f"\n{export} pdc: journals {journals}; {p['bypassed_writes']:,} of {p['writes']:,} writes"
        f" bypassed ({p['bypassed_bytes'] / 1e6:.1f} MB); RWF_DONTCACHE {dontcache}"
    )


# --- benchmark ---------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    rw: str
    bs: str
    iodepth: int
    once: bool = False
    """One pass over the image from cold (`case_global`), not a time-based run."""


CASES = (
    Case("4k randread QD32", "randread", "4k", 32),
    Case("1M seqread QD4", "read", "1m", 4, once=True),
    Case("4k randwrite QD32", "randwrite", "4k", 32),
)
WEIGHTS = (1000, 700, 400, 100)


def _wait_socket(path: Path, proc: subprocess.Popen, what: str, timeout_s: float = 30) -> None:
    """Return once `path` accepts a connection; VmioError when `proc` exits first (with its
    stderr) or after `timeout_s`."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise VmioError(f"{what} exited with status {proc.returncode}: {err.strip()}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
            return
        except OSError:
            if time.monotonic() - t0 > timeout_s:
                raise VmioError(f"{what} did not listen on {path}") from None
            time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 30 s; waits for the exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(cmd: Sequence[str], sock: Path, what: str, **popen: Any) -> subprocess.Popen:
    """Run server `cmd` listening on Unix socket `sock` (removed first) and return it once the
    socket accepts connections; stdin and stdout closed, stderr piped (module doc). A server
    that exits or never listens is stopped and raises VmioError."""
    sock.unlink(missing_ok=True)
    opts: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    proc = subprocess.Popen(list(cmd), stderr=subprocess.PIPE, **(opts | popen))
    try:
        _wait_socket(sock, proc, what)
    except BaseException:
        _stop(proc)
        if proc.stderr is not None:
            proc.stderr.close()
        raise
    return proc


def start_vmio(stack: Path, sock: Path, *extra: str, cwd: Path | None = None) -> subprocess.Popen:
    """`vmio serve --stack STACK --socket SOCK EXTRA` of this Python and this vmio (its
    package directory first on PYTHONPATH, whatever `cwd`), once it listens."""
    cmd = [sys.executable, "-m", "vmio", "serve", "--stack", str(stack), "--socket", str(sock)]
    here = str(Path(__file__).resolve().parents[2])  # python/, above the package
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    return start([*cmd, *extra], sock, "vmio serve", cwd=cwd, env=env)


def qsd_command(
    sock: Path, export: str, node: str, blockdevs: Sequence[str], objects: Sequence[str] = ()
) -> list[str]:
    """qemu-storage-daemon exporting node `node` (writable) as NBD export `export` on Unix
    socket `sock`: its `objects` (`--object`), then its `blockdevs` (`--blockdev`, bottom
    first; module doc)."""
    cmd = ["qemu-storage-daemon"]
    for o in objects:
        cmd += ["--object", o]
    for b in blockdevs:
        cmd += ["--blockdev", b]
    return cmd + [
        "--nbd-server",
        f"addr.type=unix,addr.path={sock}",
        "--export",
        f"type=nbd,id={export},node-name={node},name={export},writable=on",
    ]


def nbd_global(
    rw: str, bs: str | int, iodepth: int, size: int, runtime_s: float, ramp: bool
) -> list[str]:
    """The `[global]` section of a fio job on an NBD export (fio 3.33 engines/nbd.c): `rw`,
    `bs`, `iodepth` over `size` bytes, time-based for `runtime_s` seconds, fresh random
    offsets each run without a random map; with `ramp`, a first second not counted."""
    lines = ["[global]", "ioengine=nbd", f"rw={rw}", f"bs={bs}", f"iodepth={iodepth}"]
    lines += [f"size={size}", "time_based", f"runtime={runtime_s}", "randrepeat=0"]
    return lines + ["norandommap"] + (["ramp_time=1"] if ramp else [])


def case_global(case: Case, size: int, runtime_s: float) -> list[str]:
    """The `[global]` section of the nbd job of `case` over `size` bytes (module doc): a
    time-based run with a ramp second (`nbd_global`), or for a `once` case one pass from the
    start to `size` (`io_size` = `size`, no `time_based`, no ramp; `runtime` only caps it),
    so that no byte is read twice and a buffered server's page cache serves none of it."""
    if not case.once:
        return nbd_global(case.rw, case.bs, case.iodepth, size, runtime_s, True)
    lines = ["[global]", "ioengine=nbd", f"rw={case.rw}", f"bs={case.bs}"]
    return (
        lines
        + [f"iodepth={case.iodepth}", f"size={size}", f"io_size={size}"]
        + [f"runtime={runtime_s}"]
    )


def ceiling_global(case: Case, size: int, runtime_s: float) -> list[str]:
    """The `[global]` section of the ceiling run of `case` (module doc): the nbd job's lines
    (`case_global`) with `ioengine=libaio` and `direct=1` in place of `ioengine=nbd`."""
    lines = case_global(case, size, runtime_s)
    return [*(x for x in lines if x != "ioengine=nbd"), "ioengine=libaio", "direct=1"]


def _fio(
    jobs: list[tuple[str, str]],
    case: Case,
    runtime_s: int,
    size_bytes: int,
    image: Path | None = None,
) -> list[dict]:
    """Run fio's nbd engine, one job per (name, uri), at once; returns fio's job results.
    With `image`, one job of the ceiling (`ceiling_global`) on that file instead."""
    if image is not None:
        lines = [*ceiling_global(case, size_bytes, runtime_s), "[ceiling]", f"filename={image}"]
    else:
        lines = case_global(case, size_bytes, runtime_s)
    for name, uri in jobs:
        lines += [f"[{name}]", f"uri={uri}"]
    with tempfile.NamedTemporaryFile("w", suffix=".fio", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        out = subprocess.run(
            ["fio", "--output-format=json", path], capture_output=True, text=True, check=False
        )
    finally:
        os.unlink(path)
    if out.returncode != 0:
        raise VmioError(f"fio failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout[out.stdout.index("{") :])["jobs"]


def _figures(job: dict, rw: str) -> dict:
    """fio's IOPS, MB/s and p99 latency of `job`, and its bytes and I/Os (after the ramp)."""
    d = job["write" if "write" in rw else "read"]
    pct = d.get("clat_ns", {}).get("percentile", {})
    return {
        "iops": float(d["iops"]),
        "mb_s": float(d["bw_bytes"]) / 1e6,
        "p99_us": float(pct.get("99.000000", 0)) / 1e3,
        "io_bytes": int(d["io_bytes"]),
        "ios": int(d["total_ios"]),
    }


def _stack(image: Path, disks: int, scheduler: str, weights: tuple[int, ...]) -> str:
    size = image.stat().st_size // disks // 4096 * 4096
    doc = {
        "device": [{"name": "img", "model": "ssd", "path": str(image)}],
        "volume": [{"name": "data", "layout": "single", "devices": ["img"]}],
        "scheduler": {"name": scheduler, **({"bw_window": 2} if scheduler == "mcfq" else {})},
        "vm": [
            {
                "name": f"vm{i + 1}",
                "weight": weights[i],
                "disk": [
                    {
                        "name": "disk0",
                        "volume": "data",
                        "offset": i * size,
                        "size": size,
                        "cache": "none",
                    }
                ],
            }
            for i in range(disks)
        ],
    }
    return stackfile.render(doc)


def _vmio_server(
    tmp: Path, stack_text: str, tag: str, *extra: str
) -> tuple[subprocess.Popen, Path]:
    stack = tmp / f"{tag}.toml"
    stack.write_text(stack_text)
    sock = tmp / f"{tag}.sock"
    return start_vmio(stack, sock, *extra), sock


def evict(path: Path) -> None:
    """Drop `path`'s pages from the host page cache, as `vmtouch -e` does: write back what is
    dirty (fdatasync), then `posix_fadvise(POSIX_FADV_DONTNEED)` on the whole file (Linux
    mm/fadvise.c drops the clean, unmapped pages of the range; no privilege needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_bytes(path: Path) -> int:
    """Bytes of `path` in the host page cache now, as `fincore` and `vmtouch` count them:
    mincore(2) over a shared read-only mapping of the whole file, one byte a page (bit 0:
    resident); a page is counted whole."""
    import ctypes

    size = path.stat().st_size
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = os.sysconf("SC_PAGE_SIZE")
    vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vec) * page


def device_read_ahead(path: Path) -> int:
    """The bytes Linux reads ahead on buffered reads of `path`: the `read_ahead_kb` of the
    backing device of its file system (/sys/class/bdi/MAJ:MIN, the `bdi->ra_pages` that
    mm/readahead.c sizes its windows with); 128 KiB (VM_READAHEAD_PAGES) when unknown."""
    st = os.stat(path)
    bdi = Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb")
    try:
        return int(bdi.read_text()) * 1024
    except (OSError, ValueError):
        return 128 * 1024


def _cpu_s(pid: int) -> float:
    """A process's CPU seconds so far: user + system of all its threads, the exited ones too
    (/proc/PID/stat, fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The I/O path of each server of the comparison (printed in its table).
PATHS = {
    "vmio": "O_DIRECT, Linux AIO",
    "vmio-uring": "O_DIRECT, io_uring a connection",
    "vmio+ra": "O_DIRECT, AIO, read-ahead {ra}",
    "qemu-nbd": "O_DIRECT, threads",
    "nbdkit": "buffered pread + DONTNEED",
    "ceiling": "O_DIRECT, fio libaio",
}
SERVERS = ("vmio", "vmio-uring", "vmio+ra", "qemu-nbd", "nbdkit", "ceiling")
# vmio's rows: the options each adds to `vmio serve` (vmio+ra's size is filled in).
VMIO_EXTRA = {
    "vmio": (),
    "vmio-uring": ("--aio", "io_uring"),
    "vmio+ra": ("--read-ahead", "{ra}"),
}


def _start_server(
    server: str, image: Path, tmp: Path, ra_bytes: int
) -> tuple[subprocess.Popen, str]:
    """Start one server of the comparison on IMAGE; returns it and its NBD URI."""
    sock = tmp / f"{server}.sock"
    if server in VMIO_EXTRA:
        extra = tuple(x.format(ra=ra_bytes) for x in VMIO_EXTRA[server])
        proc, sock = _vmio_server(tmp, _stack(image, 1, "none", WEIGHTS), server, *extra)
        return proc, f"nbd+unix:///vm1/disk0?socket={sock}"
    if server == "qemu-nbd":
        cmd = ["qemu-nbd", "--format=raw", "--cache=none", "--aio=threads"]
        cmd += ["--persistent", "--shared=16", f"--socket={sock}", str(image)]
    else:
        cmd = ["nbdkit", "--foreground", "--unix", str(sock), "file", str(image)]
        cmd += ["cache=none"]
    return start(cmd, sock, server), f"nbd+unix:///?socket={sock}"


def _spread(xs: list[float], fmt: str) -> str:
    """`median (min..max)`, or the one value."""
    med = statistics.median(xs)
    if len(xs) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(xs), fmt)}..{format(max(xs), fmt)})"


def bench_serve(
    image: Path,
    size_bytes: int,
    runtime_s: int,
    log: Callable[[str], None],
    servers: tuple[str, ...] = SERVERS,
    share_s: int = 30,
    rounds: int = 1,
    read_ahead: int | None = None,
) -> tuple[list[list[str]], list[list[str]]]:
    """Run the comparison (`rounds` rounds; in each, every workload runs every server once,
    the servers' order rotated from round to round, IMAGE evicted from the page cache before
    each run) and the weighted-sharing measurement (skipped when `share_s` is 0); returns two
    tables' rows (the first: workload, server, I/O path, IOPS, MB/s, p99 us, CPU us/IO,
    MiB of IMAGE in the page cache after the run (`cached_bytes`), then the IOPS ratios
    within a round of each vmio row to vmio (its default engine, for the other vmio rows),
    qemu-nbd, nbdkit and the ceiling, median (min..max) over the rounds). `read_ahead`:
    vmio+ra's --read-ahead (default: IMAGE's device read-ahead, [`device_read_ahead`])."""
    for tool in ("fio", *[s for s in servers if s in ("qemu-nbd", "nbdkit")]):
        if shutil.which(tool) is None:
            raise VmioError(f"'{tool}' is not installed (apt-get install fio qemu-utils nbdkit)")
    if not image.exists():
        log(f"creating {image} ({size_bytes / 2**20:.0f} MiB of data)")
        chunk = os.urandom(1 << 20)
        with open(image, "wb") as f:
            for _ in range(size_bytes // len(chunk)):
                f.write(chunk)
            os.fsync(f.fileno())
    size = image.stat().st_size // 4096 * 4096
    ra = device_read_ahead(image) if read_ahead is None else read_ahead
    # (server, case) -> one dict of figures per round
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="vmio-bench-serve-") as tmpdir:
        tmp = Path(tmpdir)
        for rnd in range(rounds):
            k = rnd % len(servers)
            for server in servers[k:] + servers[:k]:
                proc, uri = (
                    (None, "") if server == "ceiling" else _start_server(server, image, tmp, ra)
                )
                try:
                    for case in CASES:
                        what = f"round {rnd + 1}/{rounds}: {server}: {case.name}"
                        log(f"{what} ({runtime_s} s, {image} evicted first)")
                        evict(image)
                        if proc is None:
                            job = _fio([], case, runtime_s, size, image=image)[0]
                            fig = _figures(job, case.rw)
                        else:
                            before = _cpu_s(proc.pid)
                            job = _fio([("j", uri)], case, runtime_s, size)[0]
                            after = _cpu_s(proc.pid)
                            fig = _figures(job, case.rw)
                            # fio's figures leave out the first second (ramp_time=1), the
                            # server's CPU does not: I/Os over the whole run at fio's rate.
                            # A `once` run has no ramp: its own I/Os.
                            ios = fig["ios"] if case.once else fig["iops"] * (runtime_s + 1)
                            fig["cpu_us"] = (after - before) * 1e6 / max(ios, 1.0)
                        # What of IMAGE the page cache holds after the run: a buffered
                        # server's (nbdkit's) reads served from memory would show here.
                        fig["cached_mib"] = cached_bytes(image) / 2**20
                        log(f"{what}: {fig['cached_mib']:.0f} MiB of {image} cached after")
                        results.setdefault((server, case.name), []).append(fig)
                finally:
                    if proc is not None:
                        _stop(proc)
        rows = []
        for case in CASES:
            for server in servers:
                rs = results[(server, case.name)]
                ratios = []
                for o in ("vmio", "qemu-nbd", "nbdkit", "ceiling"):
                    if not server.startswith("vmio") or o not in servers or o == server:
                        ratios.append("-")
                        continue
                    os_ = results[(o, case.name)]
                    xs = [a["iops"] / b["iops"] for a, b in zip(rs, os_, strict=True) if b["iops"]]
                    ratios.append(_spread(xs, ".2f") if xs else "-")
                cpu = [r["cpu_us"] for r in rs if "cpu_us" in r]
                rows.append(
                    [
                        case.name,
                        server,
                        PATHS.get(server, "").format(ra=f"{ra // 1024} KiB"),
                        _spread([r["iops"] for r in rs], ",.0f"),
                        _spread([r["mb_s"] for r in rs], ".1f"),
                        _spread([r["p99_us"] for r in rs], ".0f"),
                        _spread(cpu, ".1f") if cpu else "-",
                        _spread([r["cached_mib"] for r in rs], ".0f"),
                        *ratios,
                    ]
                )
        share = []
        for sched in ("cfq", "mcfq") if share_s > 0 else ():
            log(f"vmio {sched} weighted sharing: 4 exports, weights {WEIGHTS} ({share_s} s)")
            proc, sock = _vmio_server(tmp, _stack(image, 4, sched, WEIGHTS), sched)
            try:
                jobs = [(f"vm{i + 1}", f"nbd+unix:///vm{i + 1}?socket={sock}") for i in range(4)]
                case = Case("4k randread QD32", "randread", "4k", 32)
                res = _fio(jobs, case, share_s, size // 4)
            finally:
                _stop(proc)
            bws = [float(j["read"]["bw_bytes"]) for j in res]
            for i, (w, bw) in enumerate(zip(WEIGHTS, bws, strict=True)):
                share.append(
                    [
                        sched,
                        f"vm{i + 1}",
                        str(w),
                        f"{bw / 1e6:.2f}",
                        f"{w / WEIGHTS[-1]:.1f}",
                        f"{bw / bws[-1]:.2f}" if bws[-1] > 0 else "-",
                    ]
                )
    return rows, share
