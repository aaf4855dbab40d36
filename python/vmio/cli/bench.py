"""`vmio bench`: vmio's own performance: the simulator (`bench sim`: built-in cases and a
whole study's wall time) and the NBD server against qemu-nbd and nbdkit (`bench serve`)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vmio import fioreport as report
from vmio.cli.common import Formatter, Parser, int_in, size_in
from vmio.cli.study import run_study_to_dir
from vmio.real import serve
from vmio.sim import VmioError, native
from vmio.study import experiment, runner

BENCH_EPILOG = """\
'vmio bench sim' measures the simulator (wall-clock numbers: they vary from run to run and
machine to machine; tests never assert them):
  each benchmark case of the native module: simulated I/Os, wall time, simulated I/Os per
  second of wall time, peak resident memory;
  the whole 'vmio study volumes-cache', run in this process with output to a temporary
  directory.

examples:
  vmio bench sim
  vmio bench sim --case pagecache-hit-randread-4k --no-study
  vmio bench sim --quick
"""

BENCH_STARTUP_EPILOG = """\
'vmio bench startup' runs 'python -m vmio sim' of a short job (one SSD, 4 KiB random reads
at QD32, 200,000 requests) several times, each in a fresh process, and splits its wall time:
  interpreter       the process's wall time less what the phases below measured in it;
  imports           importing vmio.cli and the 'sim' command's module;
  native call       vmio._native.simulate: parsing the stack and job, building the simulator,
                    the simulation, fio's JSON text;
  native set-up     the same call with a job of one request: its fixed part;
  rest of 'sim'     argparse, reading the files, json.loads, the report, writing it;
  CPU rows          user + system time of the whole process (200,000 requests, and 1).
Wall-clock numbers: they vary from run to run (the medians and minima are printed); tests
never assert them.

examples:
  vmio bench startup
  vmio bench startup --runs 10
  vmio bench startup --python /path/to/other/venv/bin/python
"""

STARTUP_STACK = """\
[host]
hypervisor = "native"

[[device]]
name = "ssd"
model = "ssd"
profile = "samsung-840pro-256g"

[[volume]]
name = "vol"
layout = "single"
devices = ["ssd"]

[scheduler]
name = "none"

[[vm]]
name = "host"

[[vm.disk]]
name = "vda"
volume = "vol"
interface = "host"
cache = "none"
"""

STARTUP_JOB = """\
[global]
ioengine=libaio
direct=1
rw=randread
bs=4k
iodepth=32
number_ios={ios}

[qd32]
filename=/dev/vda
"""

# Run in a fresh interpreter by `vmio bench startup`: `vmio sim` as `python -m vmio sim` runs
# it (`vmio.cli.main`), with the native call timed by a wrapper; prints the phases as JSON.
STARTUP_PROBE = """\
import contextlib, io, json, sys, time
t0 = time.perf_counter()
from vmio.cli import main
import vmio.cli.sim as sim
t1 = time.perf_counter()
native_s = []
def timed(*args, _run=sim.simulate_text):
    t = time.perf_counter()
    try:
        return _run(*args)
    finally:
        native_s.append(time.perf_counter() - t)
sim.simulate_text = timed
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
t2 = time.perf_counter()
print(json.dumps({"status": status, "imports": t1 - t0, "main": t2 - t1, "native": sum(native_s)}))
"""

BENCH_SERVE_EPILOG = """\
Runs fio's nbd engine (4k randread QD32, 1M sequential read QD4, 4k randwrite QD32) against
vmio serve (cache=none: O_DIRECT through Linux AIO), vmio serve --aio io_uring (vmio-uring:
each connection's thread receives and does its disk I/O through one io_uring), vmio serve
--read-ahead (vmio+ra: the same, with its sequential read-ahead), qemu-nbd --cache=none
--aio=threads (O_DIRECT) and nbdkit file cache=none (buffered pread, then
POSIX_FADV_DONTNEED: the kernel's read-ahead works for it), all on Unix sockets over the
same IMAGE (created with random data when missing), and the ceiling: fio itself on IMAGE
with ioengine=libaio, direct=1 (no server, same workload). IMAGE is evicted from the host
page cache before every run, and the 1M sequential read is one pass over IMAGE (at most
--runtime), not time-based: a second pass would be served from the page cache of a buffered
server. Prints each server's I/O path, IOPS, MB/s, p99 completion latency, the server's CPU
time per I/O, how much of IMAGE the page cache holds after the run, and each vmio row's IOPS
ratio to qemu-nbd, nbdkit and the ceiling. Then four fio jobs read four exports with weights
1000, 700, 400, 100 (10:7:4:1) on IMAGE under cfq, then under mcfq (bw_window = 2 s), and
the bandwidth ratios are printed. IMAGE must be on a file system with O_DIRECT.

examples:
  vmio bench serve /var/tmp/bench.img
  vmio help stack
  vmio bench serve /var/tmp/bench.img --size 2g --runtime 20
  vmio bench serve /var/tmp/bench.img --rounds 4 --runtime 5 --share-runtime 0
  vmio bench serve /var/tmp/bench.img --servers vmio,vmio-uring,ceiling --share-runtime 0
"""


def _bench_cases() -> tuple[str, ...]:
    """The simulator's benchmark cases (the one list: vmio_sim::bench::CASES); none when the
    native module is missing (`vmio --help` still works then)."""
    try:
        return tuple(native().bench_cases())
    except VmioError:
        return ()


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio bench sim` and `vmio bench serve` to the subcommands `sub`."""
    b = sub.add_parser(
        "bench",
        help="measure vmio's own performance",
        description="Benchmarks of vmio itself.",
        epilog=BENCH_EPILOG,
        formatter_class=Formatter,
    )
    bsub = b.add_subparsers(dest="bench", metavar="WHAT", parser_class=Parser)
    bs = bsub.add_parser(
        "sim",
        help="simulator throughput and memory, and the wall time of a study",
        description="Measure the simulator: built-in benchmark cases and a whole study.",
        epilog=BENCH_EPILOG,
        formatter_class=Formatter,
    )
    bs.add_argument(
        "--case",
        action="append",
        metavar="CASE",
        help=f"run only this case (repeatable; cases: {', '.join(_bench_cases())})",
    )
    bs.add_argument(
        "--no-study", action="store_true", help="skip timing 'vmio study volumes-cache'"
    )
    bs.add_argument("--quick", action="store_true", help="time the study with --quick")
    bs.set_defaults(func=cmd_bench_sim)
    bst = bsub.add_parser(
        "startup",
        help="where the wall time of a short 'vmio sim' goes (imports, native call, report)",
        description="Measure the fixed cost of 'vmio sim': fresh processes, phase by phase.",
        epilog=BENCH_STARTUP_EPILOG,
        formatter_class=Formatter,
    )
    bst.add_argument(
        "--runs",
        type=int_in(1, 100),
        default=5,
        metavar="N",
        help="processes per measurement, 1..100 (default 5)",
    )
    bst.add_argument(
        "--python",
        type=Path,
        metavar="PATH",
        help="the Python interpreter whose vmio installation to measure, e.g. another "
        "checkout's virtual environment, for a before/after comparison (default: this one)",
    )
    bst.set_defaults(func=cmd_bench_startup)
    bsv = bsub.add_parser(
        "serve",
        help="vmio serve vs qemu-nbd and nbdkit, and weighted sharing under cfq",
        description="Measure the NBD server with fio against qemu-nbd and nbdkit.",
        epilog=BENCH_SERVE_EPILOG,
        formatter_class=Formatter,
    )
    bsv.add_argument("image", type=Path, metavar="IMAGE")
    bsv.add_argument(
        "--size",
        type=size_in(1 << 20, 1 << 40, "1m..1t"),
        default=1 << 30,
        help="size of a new IMAGE, 1m..1t (default 1g)",
    )
    bsv.add_argument(
        "--runtime",
        type=int_in(1, 3600),
        default=10,
        metavar="S",
        help="seconds per fio run, 1..3600 (default 10)",
    )
    bsv.add_argument(
        "--share-runtime",
        type=int_in(0, 3600),
        default=30,
        metavar="S",
        help="seconds of each weighted-sharing run, 0..3600 (default 30; 0: no sharing runs)",
    )
    bsv.add_argument(
        "--rounds",
        type=int_in(1, 100),
        default=1,
        metavar="N",
        help="rounds of the comparison, 1..100 (default 1); each runs every server once per "
        "workload, the servers' order rotated; figures are median (min..max) over the rounds",
    )
    bsv.add_argument(
        "--read-ahead",
        type=size_in(4096, 64 << 20, "4k..64m"),
        default=None,
        metavar="SIZE",
        help="vmio+ra's --read-ahead, 4k..64m (default: the read_ahead_kb of IMAGE's device, "
        "what Linux reads ahead for nbdkit's buffered reads)",
    )
    bsv.add_argument(
        "--servers",
        type=_servers,
        default=serve.SERVERS,
        metavar="LIST",
        help=f"the servers to run, comma-separated, in this order (default: all: "
        f"{','.join(serve.SERVERS)})",
    )
    bsv.set_defaults(func=cmd_bench_serve)
    b.set_defaults(func=lambda args: _missing_subcommand(b))


def _servers(text: str) -> tuple[str, ...]:
    """`--servers`: known names, each once."""
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in serve.SERVERS]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a comma-separated list of distinct servers among "
            f"{', '.join(serve.SERVERS)}"
        )
    return names


def _missing_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    raise VmioError(
        "missing what to benchmark (vmio bench sim | vmio bench startup | vmio bench serve IMAGE)"
    )


def cmd_bench_serve(args: argparse.Namespace) -> int:
    rows, share = serve.bench_serve(
        args.image,
        args.size,
        args.runtime,
        lambda m: print(f"vmio: bench serve: {m}", file=sys.stderr, flush=True),
        servers=args.servers,
        share_s=args.share_runtime,
        rounds=args.rounds,
        read_ahead=args.read_ahead,
    )
    header = ["workload", "server", "I/O path", "IOPS", "MB/s", "p99 us", "CPU us/IO"]
    header += ["cached MiB", "/vmio", "/qemu-nbd", "/nbdkit", "/ceiling"]
    print(report.text_table(header, rows, align="lllrrrrrrrrr"))
    if share:
        print()
        header = ["scheduler", "export", "weight", "MB/s", "weight ratio", "bandwidth ratio"]
        print(report.text_table(header, share, align="llrrrr"))
    print(
        "\nIOPS, MB/s (1 MB = 1e6 bytes) and p99 completion latency are fio's (nbd engine, "
        "Unix sockets); ceiling: fio itself on IMAGE, ioengine=libaio direct=1, no server. "
        "IMAGE is evicted from the host page cache (fdatasync, POSIX_FADV_DONTNEED) before "
        "every run. CPU us/IO: the server process's user + system time during the fio run over "
        "its I/Os (fio's rate times the run with its ramp second; the 1M row: fio's I/Os). The "
        "1M sequential read is one pass over IMAGE from cold, not time-based: no byte is read "
        "twice. cached MiB: IMAGE's pages in the page cache after the run (mincore, as "
        "fincore). /vmio, /qemu-nbd, /nbdkit, /ceiling: a vmio row's IOPS over theirs within a "
        "round (/vmio: over vmio's default engine, --aio native). With --rounds, median "
        "(min..max) over the rounds. Sharing ratios are to the lightest export (weight 100)."
    )
    return 0


def cmd_bench_sim(args: argparse.Namespace) -> int:
    nat = native()
    cases = args.case or nat.bench_cases()
    header = ["case", "simulated I/Os", "wall s", "I/Os per s", "set-up s", "peak RSS MiB"]
    rows = []
    for case in cases:
        print(f"vmio: bench: {case} ...", file=sys.stderr, flush=True)
        r = nat.bench(case)
        rows.append(
            [
                str(r["case"]),
                f"{int(r['simulated_ios']):,}",
                f"{float(r['wall_s']):.3f}",
                f"{float(r['ios_per_s']):,.0f}",
                f"{float(r.get('setup_s', 0.0)):.3f}",
                f"{int(r['peak_rss_bytes']) / 2**20:.1f}",
            ]
        )
    if not args.no_study:
        exp = experiment.load_experiment("volumes-cache")
        name = f"study {exp.name}{' --quick' if args.quick else ''}"
        print(f"vmio: bench: {name} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="vmio-bench-") as tmp:
            t0 = time.perf_counter()
            res, _ = run_study_to_dir(
                exp,
                seed=None,
                quick=args.quick,
                out=Path(tmp) / "out",
                force=False,
                parallel=runner.default_parallelism(),
            )
            wall = time.perf_counter() - t0
        ios = sum(
            int((job.get(d) or {}).get("total_ios", 0))
            for pr in res.points
            for job in pr.result["jobs"]
            for d in ("read", "write", "trim")
        )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        rows.append(
            [
                f"{name} ({len(res.points)} points)",
                f"{ios:,}",
                f"{wall:.3f}",
                f"{ios / wall:,.0f}" if wall > 0 else "-",
                "-",
                f"{rss / 2**20:.1f}",
            ]
        )
    print(report.text_table(header, rows, align="lrrrrr"))
    print(
        "\nwall s and I/Os per s are wall-clock measurements of the simulation run; set-up s "
        "(building the stack, e.g. aging an SSD) is not in them. Peak RSS is that of this whole "
        "process so far."
    )
    return 0


def _startup_run(python: str, stack: Path, job: Path) -> dict[str, float]:
    """One fresh `python -m vmio sim` of `job` on `stack` under STARTUP_PROBE: its phases in
    seconds, `process` the whole process's wall time and `cpu` its CPU time (user + system)."""
    argv = ["sim", "--stack", str(stack), str(job), "--output-format", "json"]
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(
        [python, "-c", STARTUP_PROBE, *argv], capture_output=True, text=True, check=False
    )
    process = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the runs are one at a time
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if r.returncode != 0:
        raise VmioError(f"bench startup: 'vmio sim' failed: {r.stderr.strip()[-300:]}")
    phases = json.loads(r.stdout.splitlines()[-1])
    if phases.pop("status") != 0:
        raise VmioError(f"bench startup: 'vmio sim' failed: {r.stderr.strip()[-300:]}")
    return {**phases, "process": process, "cpu": cpu}


def cmd_bench_startup(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="vmio-bench-") as tmp:
        stack, job, one = Path(tmp) / "stack.toml", Path(tmp) / "job.fio", Path(tmp) / "one.fio"
        stack.write_text(STARTUP_STACK, encoding="utf-8")
        job.write_text(STARTUP_JOB.format(ios=200_000), encoding="utf-8")
        one.write_text(STARTUP_JOB.format(ios=1), encoding="utf-8")
        print(f"vmio: bench: startup, {args.runs} x 2 processes ...", file=sys.stderr, flush=True)
        python = str(args.python or sys.executable)
        runs, ones = [], []
        for _ in range(args.runs):  # alternated, so that a slow spell hits both
            runs.append(_startup_run(python, stack, job))
            ones.append(_startup_run(python, stack, one))
    phases = {
        "interpreter": [r["process"] - r["imports"] - r["main"] for r in runs],
        "imports": [r["imports"] for r in runs],
        "native call": [r["native"] for r in runs],
        "  of which native set-up": [r["native"] for r in ones],
        "rest of 'sim'": [r["main"] - r["native"] for r in runs],
        "outside the simulation": [
            r["process"] - r["native"] + o["native"] for r, o in zip(runs, ones, strict=True)
        ],
        "whole process": [r["process"] for r in runs],
        "whole process, CPU": [r["cpu"] for r in runs],
        "one-request process, CPU": [o["cpu"] for o in ones],
    }
    header = ["phase", "median ms", "min ms"]
    rows = [
        [name, f"{statistics.median(v) * 1e3:.1f}", f"{min(v) * 1e3:.1f}"]
        for name, v in phases.items()
    ]
    print(report.text_table(header, rows, align="lrr"))
    print(
        "\n'vmio sim' of 200,000 4 KiB random reads on one SSD, each run a fresh process; "
        "'outside the simulation' is the whole process less the native call plus its set-up "
        "(the same call with a one-request job). The CPU rows (user + system time) vary less "
        "than wall time on a shared machine; the one-request process is all start-up."
    )
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "PYTHONDONTWRITEBYTECODE is set: every run compiled vmio's modules from source "
            "(an installed package has them compiled)."
        )
    return 0
