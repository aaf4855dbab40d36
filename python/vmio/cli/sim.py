"""`vmio sim`: one fio job (or every VM's own workload) simulated on a stack, reported as fio
reports it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vmio import fioreport as report
from vmio.cli.common import EXIT_INTERRUPTED, Formatter, interactive, parse_seed, write_new_file
from vmio.sim import Limits, VmioError, read_text, simulate_text, simulate_workloads_text

SIM_EPILOG = """\
The job runs inside the VM (the stack's first VM unless --vm), on the virtual disk its
filename= names (the VM's first disk when it names none). Output follows fio: 'normal' is
fio's human-readable report, 'json' is fio's JSON output format with a top-level "vmio"
object (seed, effective stack, ignored options, per-device statistics). fio options the
simulator does not model are listed once on stderr (also with --output) and otherwise
ignored; a name fio 3.33 does not have is refused, as fio refuses it, with fio's suggestion.

The same files and seed always give byte-identical output.

examples:
  vmio sim --stack studies/volumes-cache/stack.toml job.fio
  vmio sim --stack stack.toml job.fio --vm vm2 --seed 42
  vmio sim --stack stack.toml job.fio --output-format json --output run.json
  vmio sim --stack stack.toml job.fio --output-format=json | jq '.jobs[0].read.bw_bytes'
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio sim` to the subcommands `sub`."""
    s = sub.add_parser(
        "sim",
        help="simulate one fio job on a stack",
        description="Simulate fio job file JOB inside a VM of stack file STACK and print fio's "
        "report.",
        epilog=SIM_EPILOG,
        formatter_class=Formatter,
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
        type=parse_seed,
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
    add_limit_arguments(s)
    s.set_defaults(func=interactive(cmd_sim, EXIT_INTERRUPTED))


def add_limit_arguments(p: argparse.ArgumentParser) -> None:
    """The bounds of a simulation (`vmio.sim.Limits`), as `--max-events` and
    `--max-sim-time`."""
    p.add_argument(
        "--max-events",
        type=int,
        metavar="N",
        help="end the run with an error past N simulated events (default: 10000000000)",
    )
    p.add_argument(
        "--max-sim-time",
        metavar="TIME",
        help="end the run with an error past TIME of simulated time: seconds or a duration "
        "such as 90s, 2h, 100d (default: 36500d)",
    )


def limits_of(args: argparse.Namespace) -> Limits:
    """The bounds the command line gives (None: the simulator's defaults)."""
    return Limits(getattr(args, "max_events", None), getattr(args, "max_sim_time", None))


def cmd_sim(args: argparse.Namespace) -> int:
    formats = report.output_formats(args.output_format)
    if args.output is not None and args.output.exists() and not args.force:
        raise VmioError(f"output file '{args.output}' exists; pass --force to overwrite it")
    stack_text = read_text(args.stack, "stack file")
    if args.job is None:
        if args.vm is not None:
            raise VmioError("--vm needs a JOB file (without one, each VM runs its own workload)")
        text = simulate_workloads_text(stack_text, args.stack, args.seed, limits_of(args))
    else:
        job_text = getattr(args, "job_text", None) or read_text(args.job, "fio job file")
        text = simulate_text(
            stack_text, args.stack, job_text, args.job, args.seed, args.vm, limits_of(args)
        )
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
