"""The `vmio` command line: `vmio sim`, `vmio study`, `vmio serve`, `vmio bench`.

Every bad input (a stack or job file the simulator rejects, a missing file, a bad option
value) ends as one `vmio: error: <message>` line on stderr and exit status 2, like argparse's
own errors; never as a traceback. Files the user names as inputs are only read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from vmio import __version__, calibrate, compare, qemuguest, stackhelp, validate
from vmio.sim import (
    VmioError,
    check_path,
    native,
    parse_size,
    read_text,
    shown_text,
    simulate_text,
    simulate_workloads_text,
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""Exit status of a command Ctrl-C stopped (the shell's 128 + SIGINT)."""
DEFAULT_RESULTS = Path("vmio-results")


def _bench_cases() -> tuple[str, ...]:
    """The simulator's benchmark cases (the one list: vmio_sim::bench::CASES); none when the
    native module is missing (`vmio --help` still works then)."""
    try:
        return tuple(native().bench_cases())
    except VmioError:
        return ()


class _Parser(argparse.ArgumentParser):
    """argparse with vmio's error line: one line `vmio: error: …` (no usage block; `--help`
    has it), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, error_line(f"{message} (see '{self.prog} --help')") + "\n")


MAX_ERROR = 300
"""The longest error message (characters after `vmio: error: `)."""


def error_line(message: str) -> str:
    """`vmio: error: <message>`: one line, non-printable characters escaped, at most
    `MAX_ERROR` characters of message."""
    shown = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message
    )
    if len(shown) > MAX_ERROR:
        shown = shown[: MAX_ERROR - 1] + "…"
    return f"vmio: error: {shown}"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


def _seed(text: str) -> int:
    """argparse type: a seed, 0..2**64-1 (decimal, or 0x/0o/0b)."""
    try:
        value = int(text, 0) if len(text) <= 30 else -1
    except ValueError:
        value = -1
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"{shown_text(text)} is not an integer in 0..2**64-1")
    return value


MAIN_EPILOG = """\
examples:
  vmio sim --stack studies/volumes-cache/stack.toml job.fio
  vmio sim --stack stack.toml job.fio --seed 7 --output-format json --output run.json
  vmio study volumes-cache
  vmio study volumes-cache --quick --out /tmp/vc
  vmio serve --stack stack.toml --socket /tmp/vmio.sock
  vmio bench sim
  vmio bench serve /var/tmp/bench.img
  vmio help stack

Every command takes --help. Bad input ends with 'vmio: error: ...' and exit status 2.
"""

SIM_EPILOG = """\
The job runs inside the VM (the stack's first VM unless --vm), on the virtual disk its
filename= names (the VM's first disk when it names none). Output follows fio: 'normal' is
fio's human-readable report, 'json' is fio's JSON output format with a top-level "vmio"
object (seed, effective stack, ignored options, per-device statistics). fio options the
simulator does not model are listed once on stderr and otherwise ignored.

The same files and seed always give byte-identical output.

examples:
  vmio sim --stack studies/volumes-cache/stack.toml job.fio
  vmio sim --stack stack.toml job.fio --vm vm2 --seed 42
  vmio sim --stack stack.toml job.fio --output-format json --output run.json
  vmio sim --stack stack.toml job.fio --output-format=json | jq '.jobs[0].read.bw_bytes'
"""

STUDY_EPILOG = """\
A study sweeps the axes of an experiment file (experiment.toml: a stack file, a fio job and
the values to sweep), simulates every point, and prints one table of bandwidths (MB/s,
1 MB = 1e6 bytes) per table axis value plus a calibration table that compares the simulated
values with the reference figures (PASS within the experiment's tolerance).

Written to the output directory:
  results.csv, results.parquet  tidy table, one row per point and I/O direction
  calibration.csv               the calibration table
  figure.png                    bandwidth vs block size per layout, reference figures marked
  tables.txt                    what was printed on stdout
  json/<point>.json             fio JSON output of every point
  skipped.csv                   --engine real: the points not run, and why

--engine real runs every point on this machine with fio instead of simulating it, one at a
time (vmio/realengine.py): a native stack's job on the devices' files, a VM stack's through
'vmio serve' and fio's nbd engine. Devices without a path (all of a VM stack's) are files
DIR/<device>.img of --real-size (kept for the next run). --real-mode guest runs a VM stack's
job in a QEMU guest instead, whose disk is the 'vmio serve' export (under TCG, when KVM does
not boot here, its timings are functional-only: vmio compare leaves them out). A point this
machine cannot run (an HDD on a flash disk, a job on files...) is skipped with its reason.

A study of several parts (a study.toml listing experiment files) runs each part in turn
and writes each into its own subdirectory, <out>/<part>/.

Without --out, results go to vmio-results/<study>/, or to the first free
vmio-results/<study>-2/, -3/... when it already holds results. With --out, a non-empty
directory is refused unless --force (which replaces only the files listed above).
Each point is saved as soon as it is done: a study killed or interrupted resumes when run
again with the same --out (or none), reusing the points whose inputs are unchanged.

built-in studies:
  volumes-cache  S0: layout (LVM linear, LVM stripe, md RAID 0) x QEMU cache (none,
                 writeback) x workload (read, randread, randrw 50:50) x block size
                 (32k..8m) on two 7200 rpm SATA disks
  mcfq           S1: four VMs with weights 10:7:4:1 on one Samsung 840 Pro, clean or
                 aged; parts gc (VM1 sequential vs VM2 random writes), bw-window
                 (MCFQ's BW = 5, 10, 20 s: ratio timelines), error-rates (CFQ vs MCFQ on
                 fileserver, varmail, MSN, Exchange, Financial)

examples:
  vmio study volumes-cache
  vmio study volumes-cache --seed 7 --out results/vc --force
  vmio study volumes-cache --quick
  vmio study volumes-cache --jobs-from my-copy-of-studies/volumes-cache
  vmio study mcfq --part error-rates --quick
  vmio study path/to/experiment.toml
"""

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


BENCH_SERVE_EPILOG = """\
Runs fio's nbd engine (4k randread QD32, 1M sequential read QD4, 4k randwrite QD32) against
vmio serve (cache=none), qemu-nbd --cache=none --aio=threads and nbdkit file cache=none, all
on Unix sockets over the same IMAGE (created with random data when missing), and prints IOPS,
MB/s, p99 completion latency and vmio's IOPS ratio to each. Then four fio jobs read four
exports with weights 1000, 700, 400, 100 (10:7:4:1) on IMAGE under cfq, then under mcfq
(bw_window = 2 s), and the bandwidth ratios are printed. IMAGE must be on a file system
with O_DIRECT.

examples:
  vmio bench serve /var/tmp/bench.img
  vmio help stack
  vmio bench serve /var/tmp/bench.img --size 2g --runtime 20
"""


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """argparse type: an integer in lo..=hi (vmio serve's bounds)."""

    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 30 else lo - 1
        except ValueError:
            value = lo - 1
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{shown_text(text)} is not an integer in {lo}..{hi}")
        return value

    return parse


def _size_in(lo: int, hi: int, shown: str) -> Callable[[str], int]:
    """argparse type: a size (k, m, g, t) in lo..=hi bytes (vmio serve's budgets)."""

    def parse(text: str) -> int:
        try:
            value = parse_size(text) if len(text) <= 30 else lo - 1
        except VmioError:
            value = lo - 1
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{shown_text(text)} is not a size in {shown}")
        return value

    return parse


def _seconds_in(lo: float, hi: float) -> Callable[[str], float]:
    """argparse type: a number of seconds in lo..=hi."""

    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 30 else lo - 1
        except ValueError:
            value = lo - 1
        if not lo <= value <= hi:  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"{shown_text(text)} is not a number of seconds in {lo:g}..{hi:g}"
            )
        return value

    return parse


def _serve_options() -> list[dict]:
    """`vmio serve`'s options, the one table the `vmio-serve` binary's parser is built from too
    (vmio_serve::options::OPTIONS, through `vmio._native.serve_options()`); none when the native
    module is missing (`vmio --help` still works then)."""
    try:
        return list(native().serve_options())
    except (VmioError, AttributeError):
        return []


def _serve_text() -> tuple[str, str]:
    """The description and epilog of `vmio serve --help` (vmio_serve::options)."""
    try:
        about, epilog = native().serve_text("vmio serve")
    except (VmioError, AttributeError):
        return "Serve every VM disk of a stack file over NBD.", ""
    return about, epilog


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    """One argparse argument per row of the serve table: its flag, help, range (the same
    bounds as the binary's) and no default (the server's are the table's; an option not given
    is not passed)."""
    types: dict[str, Callable[[dict], Callable[[str], object]]] = {
        "path": lambda o: Path,
        "port": lambda o: _int_in(o["lo"], o["hi"]),
        "count": lambda o: _int_in(o["lo"], o["hi"]),
        "size": lambda o: _size_in(o["lo"], o["hi"], o["range"]),
        "seconds": lambda o: _seconds_in(o["lo"], o["hi"]),
    }
    exclusive: dict[frozenset[str], argparse._MutuallyExclusiveGroup] = {}
    options = _serve_options()
    for o in options:
        where: argparse._ActionsContainer = parser
        if o["excludes"]:
            pair = frozenset((o["flag"], o["excludes"]))
            if pair not in exclusive:
                exclusive[pair] = parser.add_mutually_exclusive_group()
            where = exclusive[pair]
        common = {"dest": o["dest"], "default": None, "help": o["help"].replace("%", "%%")}
        if o["kind"] == "flag":
            where.add_argument(o["flag"], action="store_true", **common)
        else:
            kind = types[o["kind"]](o)
            extra = {"required": True} if o["required"] else {}
            where.add_argument(o["flag"], type=kind, metavar=o["metavar"], **extra, **common)
    if not options:  # no native module: cmd_serve says how to build it
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vmio",
        description="vmio: a laboratory for the storage I/O of VMs on KVM hosts. Simulates the "
        "virtualized I/O path (fio job -> virtual disk -> QEMU cache mode -> host scheduler "
        "-> volume -> disks) from a stack file, deterministically.",
        epilog=MAIN_EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument("--version", action="version", version=f"vmio {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser(
        "sim",
        help="simulate one fio job on a stack",
        description="Simulate fio job file JOB inside a VM of stack file STACK and print fio's "
        "report.",
        epilog=SIM_EPILOG,
        formatter_class=_Formatter,
    )
    s.add_argument(
        "job",
        metavar="JOB",
        nargs="?",
        help="fio job file (fio's INI format); without it, every VM of the stack that has a "
        "`workload` runs its own job file, all at once",
    )
    s.add_argument(
        "--stack",
        required=True,
        metavar="STACK",
        help="stack file (TOML): host devices, volume, scheduler, page cache, VMs",
    )
    s.add_argument(
        "--seed",
        type=_seed,
        metavar="N",
        help="seed of every random draw (default: the stack file's seed, else 1)",
    )
    s.add_argument("--vm", metavar="NAME", help="VM that runs the job (default: the first)")
    s.add_argument(
        "--output-format",
        default="normal",
        metavar="FORMAT[,FORMAT]",
        help="fio's report formats: normal (human), json, json+ (json with clat bins; vmio's "
        "json has them too), terse (fio's version 3), or a comma list as fio accepts "
        "(default: normal)",
    )
    s.add_argument(
        "--output",
        metavar="FILE",
        type=Path,
        help="write the report to FILE instead of stdout (never overwrites "
        "an existing file unless --force)",
    )
    s.add_argument("--force", action="store_true", help="let --output replace an existing file")
    s.set_defaults(func=interactive(cmd_sim, EXIT_INTERRUPTED))

    # --- vmio fio (fio's command line; vmio.fiocli reads it) ---
    f = sub.add_parser(
        "fio",
        help="run fio's command line (options and/or job files) on the simulator",
        description="Run fio's command line on the simulator; 'vmio fio --help' for more.",
        add_help=False,
        prefix_chars="\0",  # every argument goes to vmio.fiocli, which reads it as fio does
    )
    f.add_argument("argv", nargs=argparse.REMAINDER)
    f.set_defaults(func=cmd_fio)

    st = sub.add_parser(
        "study",
        help="run a built-in or custom study (a sweep with tables, figure, calibration)",
        description="Run study STUDY: a built-in study's name, a study directory or an "
        "experiment.toml path.",
        epilog=STUDY_EPILOG,
        formatter_class=_Formatter,
    )
    st.add_argument(
        "study",
        metavar="STUDY",
        nargs="?",
        help="built-in study name (volumes-cache), directory or experiment file",
    )
    st.add_argument(
        "--seed",
        type=_seed,
        metavar="N",
        help="seed of every point (default: the experiment file's seed)",
    )
    st.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (default: vmio-results/<study>/, see below)",
    )
    st.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out directory, replacing earlier results",
    )
    st.add_argument(
        "--quick",
        action="store_true",
        help="short runs on fewer points (the experiment's [quick] section)",
    )
    st.add_argument(
        "--jobs-from",
        type=Path,
        metavar="DIR",
        help="take experiment.toml, its stack and fio job from DIR (e.g. an "
        "edited copy of studies/volumes-cache) instead of the built-in study",
    )
    st.add_argument(
        "--parallel",
        type=_int_in(1, 1024),
        metavar="N",
        help="points simulated at once, 1..1024 (default: number of CPUs)",
    )
    st.add_argument(
        "--part",
        action="append",
        metavar="PART",
        help="run only this part of a study of several parts (repeatable; see --list)",
    )
    st.add_argument("--list", action="store_true", help="list the built-in studies and exit")
    st.add_argument(
        "--engine",
        choices=("sim", "real"),
        default="sim",
        help="sim: simulate each point; real: run it on this machine with fio (default: sim)",
    )
    st.add_argument(
        "--real-dir",
        type=Path,
        metavar="DIR",
        help="--engine real: where the devices' image files go (default: ./vmio-real)",
    )
    st.add_argument(
        "--real-size",
        type=_size_in(1 << 20, 1 << 50, "1m..1p"),
        metavar="SIZE",
        help="--engine real: each device's image file (default: 1g)",
    )
    st.add_argument(
        "--substitute",
        action="store_true",
        help="--engine real: run points whose devices this machine lacks on files anyway",
    )
    st.add_argument(
        "--real-mode",
        choices=("auto", "host", "serve", "guest"),
        help="--engine real: host runs the job on the host, serve through vmio serve and "
        "fio's nbd engine, guest in a QEMU guest whose disk is the vmio serve export "
        "(default: auto, host for a native stack, serve for a VM stack)",
    )
    st.add_argument(
        "--real-accel",
        choices=qemuguest.ACCELS,
        help="--real-mode guest: the guest's accelerator; auto is kvm when a probe boot "
        f"under KVM ends within {qemuguest.PROBE_TIMEOUT:g} s, else tcg, whose timings are "
        "functional-only (default: auto)",
    )
    st.set_defaults(func=cmd_study)

    t = sub.add_parser(
        "trace",
        help="block traces: synthetic traces shaped like S1's MSN, Exchange, Financial",
        description="Block-trace tools.",
        formatter_class=_Formatter,
    )
    tsub = t.add_subparsers(dest="trace", metavar="WHAT", parser_class=_Parser)
    ts = tsub.add_parser(
        "synth",
        help="write a synthetic trace in UMass/SPC CSV",
        description="Write a synthetic block trace shaped like one of S1's traces (write/read "
        "ratio and mean request size from docs/references.md; burstiness and locality "
        "as documented in vmio-core's workload/synth.rs) as UMass/SPC CSV "
        "(ASU,LBA,Size,Opcode,Timestamp), ready for fio-style replay with "
        "read_iolog=FILE and iolog_format=spc.",
        epilog="examples:\n  vmio trace synth msn --requests 20000 --region 30g -o msn.spc\n"
        "  vmio trace synth financial --seed 7 | head",
        formatter_class=_Formatter,
    )
    ts.add_argument(
        "profile",
        metavar="PROFILE",
        choices=("msn", "exchange", "financial"),
        help="msn, exchange or financial",
    )
    ts.add_argument(
        "--requests",
        type=_int_in(1, 10_000_000),
        default=10000,
        metavar="N",
        help="number of requests, 1..10000000 (default: 10000)",
    )
    ts.add_argument(
        "--region",
        type=_size_in(4096, 1 << 50, "4k..1p"),
        default=30 << 30,
        metavar="SIZE",
        help="size of the addressed region, fio-style, 4k..1p (default: 30g)",
    )
    ts.add_argument("--seed", type=_seed, default=1, metavar="N", help="seed (default: 1)")
    ts.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write to FILE instead of stdout (never overwrites an existing file unless --force)",
    )
    ts.add_argument("--force", action="store_true", help="let --output replace an existing file")
    ts.set_defaults(func=cmd_trace_synth)
    t.set_defaults(func=lambda args: _missing(t, "what to do with traces (vmio trace synth)"))

    about, epilog = _serve_text()
    sv = sub.add_parser(
        "serve",
        help="serve a stack's VM disks over NBD (the real engine)",
        description=about,
        epilog=epilog,
        formatter_class=_Formatter,
    )
    _add_serve_options(sv)
    sv.set_defaults(func=cmd_serve)

    b = sub.add_parser(
        "bench",
        help="measure vmio's own performance",
        description="Benchmarks of vmio itself.",
        epilog=BENCH_EPILOG,
        formatter_class=_Formatter,
    )
    bsub = b.add_subparsers(dest="bench", metavar="WHAT", parser_class=_Parser)
    bs = bsub.add_parser(
        "sim",
        help="simulator throughput and memory, and the wall time of a study",
        description="Measure the simulator: built-in benchmark cases and a whole study.",
        epilog=BENCH_EPILOG,
        formatter_class=_Formatter,
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
    bsv = bsub.add_parser(
        "serve",
        help="vmio serve vs qemu-nbd and nbdkit, and weighted sharing under cfq",
        description="Measure the NBD server with fio against qemu-nbd and nbdkit.",
        epilog=BENCH_SERVE_EPILOG,
        formatter_class=_Formatter,
    )
    bsv.add_argument("image", type=Path, metavar="IMAGE")
    bsv.add_argument(
        "--size",
        type=_size_in(1 << 20, 1 << 40, "1m..1t"),
        default=1 << 30,
        help="size of a new IMAGE, 1m..1t (default 1g)",
    )
    bsv.add_argument(
        "--runtime",
        type=_int_in(1, 3600),
        default=10,
        metavar="S",
        help="seconds per fio run, 1..3600 (default 10)",
    )
    bsv.add_argument(
        "--share-runtime",
        type=_int_in(1, 3600),
        default=30,
        metavar="S",
        help="seconds of each weighted-sharing run, 1..3600 (default 30)",
    )
    bsv.set_defaults(func=cmd_bench_serve)
    b.set_defaults(func=lambda args: _missing_subcommand(b))
    stackhelp.add_parser(sub, _Parser, _Formatter, _missing)
    calibrate.add_parser(sub, _Parser, _Formatter)
    compare.add_parser(sub, _Parser, _Formatter)
    validate.add_parser(sub, _Parser, _Formatter)
    return p


def _missing(parser: argparse.ArgumentParser, what: str) -> int:
    parser.print_help(sys.stderr)
    raise VmioError(f"missing {what}")


def _missing_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    raise VmioError("missing what to benchmark (vmio bench sim | vmio bench serve IMAGE)")


# --- vmio sim ----------------------------------------------------------------------------


def cmd_sim(args: argparse.Namespace) -> int:
    from vmio import report

    formats = report.output_formats(args.output_format)
    if args.output is not None and args.output.exists() and not args.force:
        raise VmioError(f"output file '{args.output}' exists; pass --force to overwrite it")
    stack_text = read_text(args.stack, "stack file")
    if args.job is None:
        if args.vm is not None:
            raise VmioError("--vm needs a JOB file (without one, each VM runs its own workload)")
        text = simulate_workloads_text(stack_text, args.stack, args.seed)
    else:
        job_text = getattr(args, "job_text", None) or read_text(args.job, "fio job file")
        text = simulate_text(stack_text, args.stack, job_text, args.job, args.seed, args.vm)
    result = json.loads(text)
    for note in report.result_notes(result, args.job or args.stack):
        print(note, file=sys.stderr)
    logs = result.get("vmio", {}).pop("logs", None)
    if logs:
        # fio writes its logs (write_bw_log, ...) in the current directory; the report
        # goes without their lines.
        for log in logs:
            write_new_file(Path(log["name"]), log["text"], args.force)
        text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    out = report.fio_report(result, text, formats)
    if args.output is None:
        sys.stdout.write(out)
        return 0
    write_new_file(args.output, out, args.force)
    return 0


def interactive(
    command: Callable[[argparse.Namespace], int], interrupted: int
) -> Callable[[argparse.Namespace], int]:
    """`command` run by a person (vmio.sim.interactive): a progress line per `args.eta`
    (fio's --eta; default auto) and, when Ctrl-C stops the simulation, the report of what ran
    so far and exit status `interrupted`."""

    def run(args: argparse.Namespace) -> int:
        from vmio import sim

        with sim.interactive(getattr(args, "eta", "auto")) as ctx:
            status = command(args)
        return interrupted if ctx.interrupted else status

    return run


def cmd_fio(args: argparse.Namespace) -> int:
    from vmio import fiocli

    def seed(text: str) -> int:
        try:
            return _seed(text)
        except argparse.ArgumentTypeError as err:
            raise VmioError(f"--seed: {err}") from None

    return fiocli.cmd_fio(args.argv, cmd_sim, seed)


def write_new_file(path: Path, data: str | bytes, force: bool) -> None:
    """Write `data` (text as UTF-8) to `path`, refusing to replace an existing file unless
    `force`."""
    try:
        with path.open("wb" if force else "xb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
    except FileExistsError:
        raise VmioError(f"output file '{path}' exists; pass --force to overwrite it") from None
    except OSError as err:
        raise VmioError(f"cannot write output file '{path}': {err.strerror}") from None


# --- vmio trace synth --------------------------------------------------------------------


def cmd_trace_synth(args: argparse.Namespace) -> int:
    text = native().synth_trace(args.profile, args.region, args.requests, args.seed)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_new_file(args.output, text, args.force)
    return 0


# --- vmio study --------------------------------------------------------------------------


def cmd_study(args: argparse.Namespace) -> int:
    from vmio import study
    from vmio.runner import SKIPPED_FILE

    if args.list:
        for name in study.builtin_studies():
            st = study.load_study(name)
            ref = st.parts[0].reference
            print(f"{name:16} {st.title} [{ref}]")
            if st.multipart:
                for exp in st.parts:
                    print(f"  --part {exp.path.stem:12} {exp.title}")
        return 0
    if args.study is None and args.jobs_from is None:
        raise VmioError(
            "missing STUDY (built-in: "
            f"{', '.join(study.builtin_studies())}); see 'vmio study --help'"
        )
    engine = _real_engine(args)
    st = study.load_study(args.jobs_from if args.jobs_from is not None else args.study)
    parts = [st.part(p) for p in args.part] if args.part else st.parts
    base = args.out
    if st.multipart:
        if base is None:
            base = study.next_free_dir(DEFAULT_RESULTS / st.name, st.name)
        study.prepare_output_dir(base, force=args.force, name=st.name)
    for i, exp in enumerate(parts):
        if st.multipart:
            print(
                f"{'' if i == 0 else chr(10)}=== study {st.name}, part {i + 1}/{len(parts)}: "
                f"{exp.path.stem} ({exp.title}) ===",
                flush=True,
            )
        res, out = run_study_to_dir(
            exp,
            seed=args.seed,
            quick=args.quick,
            out=base / exp.path.stem if st.multipart else args.out,
            force=args.force,
            parallel=args.parallel or study.default_parallelism(),
            finish=not st.multipart,
            engine=engine,
        )
        for note in res.notes:
            print(note, file=sys.stderr)
        sys.stdout.write(study.summary_text(res))
        files = [f for f in (*study.OUTPUT_FILES, SKIPPED_FILE) if (out / f).is_file()]
        print(f"\nResults in {out}/: {', '.join(files)}, json/", flush=True)
    if st.multipart:  # every part is written: the study is finished
        for exp in parts:
            study.finish_output_dir(base / exp.path.stem)
        study.finish_output_dir(base)
    return 0


def _real_engine(args: argparse.Namespace):  # -> realengine.Options | None
    """--engine real's options (its note on --parallel printed), None for the simulator."""
    from vmio import machine, realengine

    if args.engine != "real":
        if args.real_dir is not None or args.real_size is not None or args.substitute:
            raise VmioError("--real-dir, --real-size and --substitute need --engine real")
        if args.real_mode is not None or args.real_accel is not None:
            raise VmioError("--real-mode and --real-accel need --engine real")
        return None
    if args.real_accel is not None and args.real_mode != "guest":
        raise VmioError("--real-accel needs --real-mode guest")
    opts = realengine.Options(
        args.real_dir or Path("vmio-real"),
        args.real_size or realengine.DEFAULT_SIZE,
        args.substitute,
        args.real_mode or "auto",
        args.real_accel or "auto",
    )
    if args.parallel not in (None, 1):
        print(
            f"vmio: note: --engine real runs one point at a time (not --parallel {args.parallel})",
            file=sys.stderr,
        )
    realengine.Engine(opts)  # fio is there
    opts.real_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"vmio: real engine on {machine.short(machine.describe([opts.real_dir.resolve()]))}",
        file=sys.stderr,
    )
    return opts


def run_study_to_dir(
    exp,
    *,
    seed: int | None,
    quick: bool,
    out: Path | None,
    force: bool,
    parallel: int,
    progress: TextIO | None = None,
    finish: bool = True,
    on_point: Callable | None = None,
    engine=None,
):
    """Run a study and write its outputs; returns (StudyResult, output directory).

    Each finished point is saved in `out` as soon as it is done; an unfinished run of the
    same experiment in `out` (killed, interrupted) is resumed: its points are reused when
    their inputs are the same (see `study.point_key`). The summary files are written once
    every point is done; then, with `finish`, the directory is marked finished (a later
    run refuses it unless `force`).
    """
    from vmio import study

    if out is None:
        out = study.next_free_dir(DEFAULT_RESULTS / exp.name, exp.name)
    try:
        out = study.prepare_output_dir(out, force=force, name=exp.name)
        res = study.run_study(
            exp,
            seed=seed,
            quick=quick,
            parallel=parallel,
            progress=progress,
            store=out,
            on_point=on_point,
            engine=engine,
        )
        study.write_outputs(res, out)
        if finish:
            study.finish_output_dir(out)
    except OSError as err:
        raise VmioError(f"cannot write results to '{out}': {err.strerror or err}") from None
    return res, out


# --- vmio serve --------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from vmio import serve

    given = {o["dest"]: getattr(args, o["dest"], None) for o in _serve_options()}
    stack = given.pop("stack", None)
    snaps = serve.serve(
        stack, **{k: v for k, v in given.items() if v is not None and v is not False}
    )
    print("vmio: shut down", file=sys.stderr)
    print(serve.stats_table(snaps), file=sys.stderr)
    return 0


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from vmio import report, serve

    rows, share = serve.bench_serve(
        args.image,
        args.size,
        args.runtime,
        lambda m: print(f"vmio: bench serve: {m}", file=sys.stderr, flush=True),
        share_s=args.share_runtime,
    )
    header = ["workload", "server", "IOPS", "MB/s", "p99 us", "vmio/qemu-nbd", "vmio/nbdkit"]
    print(report.text_table(header, rows, align="llrrrrr"))
    print()
    header = ["scheduler", "export", "weight", "MB/s", "weight ratio", "bandwidth ratio"]
    print(report.text_table(header, share, align="llrrrr"))
    print(
        "\nIOPS, MB/s (1 MB = 1e6 bytes) and p99 completion latency are fio's (nbd engine, "
        "Unix sockets); ratios are of IOPS. Ratios are to the lightest export (weight 100)."
    )
    return 0


# --- vmio bench sim ----------------------------------------------------------------------


def cmd_bench_sim(args: argparse.Namespace) -> int:
    from vmio import report, study

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
        exp = study.load_experiment("volumes-cache")
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
                parallel=study.default_parallelism(),
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


# --- entry point -------------------------------------------------------------------------


STRICT_ENV = "VMIO_STRICT_ERRORS"
"""Set to 1 (the fuzzer does), input errors that are not a `VmioError` keep their traceback
instead of becoming an error line: they show where a check is missing."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        for option, value in vars(args).items():
            if isinstance(value, Path):  # every path option, before anything touches it
                check_path(value, f"--{option.replace('_', '-')}")
        return args.func(args)
    except BrokenPipeError:  # e.g. `vmio sim ... | head`: quiet, as the Python docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (VmioError, ValueError, OverflowError, OSError, UnicodeError) as err:
        # VmioError is bad input; the others can only come from input that slipped past a
        # check (a value out of the native module's range, a file that went away...): each
        # is a bug to fix where the input is read, which the fuzzer finds (STRICT_ENV).
        if not isinstance(err, VmioError) and os.environ.get(STRICT_ENV) == "1":
            raise
        message = str(err)
        if not isinstance(err, VmioError):
            message = f"{message or type(err).__name__}"
            if isinstance(err, OSError) and err.filename is not None:
                message = f"'{err.filename}': {err.strerror or message}"
        print(error_line(message), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        again = " (run the same command again to resume)" if args.command == "study" else ""
        print(f"vmio: interrupted{again}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
