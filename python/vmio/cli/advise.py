"""`vmio advise`: rank configurations of a stack for a workload (`vmio.advise`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from vmio.cli.common import Formatter, int_in, parse_seed, size_in

EPILOG = """\
The knobs (--vary; without it and --values, every knob marked *; a knob that does not
apply to the stack is named with the reason, one line):
{knobs}

The space is the product of the varied knobs' values. It is simulated whole when it holds at
most --budget configurations; else --budget of them are sampled (Optuna's TPE when Optuna is
installed, pip install 'vmio[advise]'; else a seeded random sample). The same seed gives the
same advise.json. Every configuration is simulated with the same seed; the stack as given is
simulated too and marked "(as given)".

Figures: IOPS and MB/s (read + write + trim), mean latency (fio's lat), the worst
direction's clat p99 and p99.9, of the --measure job (default: every job). Each comes with
the calibration's measured error when the stack was made by vmio calibrate (fit.txt beside
it) or validated (vmio validate's directory); otherwise "uncalibrated".

--verify N runs the N best for real with fio on --target FILE (the real engine of vmio study
--engine real: a native stack on FILE, a VM stack through vmio serve on FILE); FILE is
created (and removed after) when absent; a job that writes overwrites an existing one.

--out DIR writes advise.json, results.csv, stack.toml, job.fio and command.txt
(docs/advise.md; vmio report DIR renders them).

examples:
  vmio advise --stack studies/volumes-cache/stack.toml --workload job.fio --measure s0
  vmio advise --stack stack.toml --workload randread.fio --goal p99 --vary cache,aio,iothread
  vmio advise --stack stack.toml --workload job.fio --values cache=none,writeback --out adv
  vmio advise --stack cal/stack.toml --workload job.fio --vary queue_depth --verify 2 \\
      --target /var/tmp/advise.img
"""


def _knob_lines() -> str:
    import textwrap

    from vmio.advise.space import KNOBS

    lines = []
    for k in KNOBS.values():
        mark = "*" if k.default else " "
        lines.append(f"  {mark} {k.name:<16}{', '.join(k.values)}")
        lines += textwrap.wrap(k.help, 92, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio advise` to the subcommands `sub`."""
    from vmio.advise import advisor, search

    p = sub.add_parser(
        "advise",
        help="rank configurations of a stack for a workload (simulated; verified on request)",
        description="Explore configurations of STACK (cache mode, layout, interface, ...) "
        "for the fio job WORKLOAD with the simulator and rank them by --goal.",
        epilog=EPILOG.format(knobs=_knob_lines()),
        formatter_class=Formatter,
    )
    p.add_argument("--stack", type=Path, required=True, metavar="STACK.toml", help="stack file")
    p.add_argument("--workload", type=Path, required=True, metavar="JOB.fio", help="fio job file")
    p.add_argument(
        "--goal",
        choices=("iops", "bw", "p99", "p99.9", "lat"),
        default="iops",
        help="what to optimise: iops, bw (higher is better), p99, p99.9, lat (mean latency; "
        "lower is better) (default: iops)",
    )
    p.add_argument(
        "--vary",
        metavar="KNOB,...",
        help="the knobs to vary, comma-separated (default: the knobs of --values, else the "
        "knobs marked * below)",
    )
    p.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="KNOB=V,...",
        help="the values of one knob (repeatable; the knob is varied)",
    )
    p.add_argument(
        "--budget",
        type=int_in(1, advisor.MAX_BUDGET),
        default=advisor.DEFAULT_BUDGET,
        metavar="N",
        help=f"configurations simulated at most, 1..{advisor.MAX_BUDGET:,} "
        f"(default: {advisor.DEFAULT_BUDGET})",
    )
    p.add_argument(
        "--search",
        choices=search.MODES,
        default="auto",
        help="exhaustive (refused over --budget), tpe, random, or auto: exhaustive within "
        "--budget, else tpe when Optuna is installed, else random (default: auto)",
    )
    p.add_argument("--seed", type=parse_seed, default=1, metavar="N", help="seed (default: 1)")
    p.add_argument("--vm", metavar="NAME", help="the VM that runs the job (default: the first)")
    p.add_argument(
        "--measure", metavar="JOB", help="the job section whose figures count (default: all)"
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="write the results into DIR")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out DIR")
    p.add_argument(
        "--top", type=int_in(1, 1000), default=10, metavar="N", help="rows shown (default: 10)"
    )
    p.add_argument(
        "--verify",
        type=int_in(1, advisor.MAX_VERIFY),
        default=0,
        metavar="N",
        help=f"run the N best for real on --target (1..{advisor.MAX_VERIFY})",
    )
    p.add_argument("--target", type=Path, metavar="FILE", help="--verify: the file fio runs on")
    p.add_argument(
        "--target-size",
        type=size_in(1 << 20, 1 << 40, "1m..1t"),
        default=1 << 30,
        metavar="SIZE",
        help="--verify: the size of --target when it is created (default: 1g)",
    )
    p.add_argument(
        "--substitute",
        action="store_true",
        help="--verify: run configurations whose devices this machine lacks on FILE anyway",
    )
    p.add_argument(
        "--parallel",
        type=int_in(1, 1024),
        metavar="N",
        help="simulations at once, 1..1024 (default: number of CPUs)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress or notes on stderr")
    p.set_defaults(func=cmd_advise)


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces the run (command.txt)."""
    words = ["vmio", "advise", "--stack", str(args.stack), "--workload", str(args.workload)]
    words += ["--goal", args.goal, "--budget", str(args.budget), "--seed", str(args.seed)]
    words += ["--search", args.search]
    if args.vary is not None:
        words += ["--vary", args.vary]
    for v in args.values:
        words += ["--values", v]
    for opt in ("vm", "measure"):
        if getattr(args, opt) is not None:
            words += [f"--{opt}", getattr(args, opt)]
    if args.verify:
        words += ["--verify", str(args.verify), "--target", str(args.target)]
        words += ["--target-size", str(args.target_size)]
        if args.substitute:
            words.append("--substitute")
    words += ["--out", str(args.out)]
    return shlex.join(words)


def cmd_advise(args: argparse.Namespace) -> int:
    from vmio.advise import advisor, output
    from vmio.study.runner import default_parallelism

    vary = None
    if args.vary is not None:
        vary = tuple(k.strip() for k in args.vary.split(",") if k.strip())
    req = advisor.Request(
        stack=args.stack,
        workload=args.workload,
        goal=args.goal,
        vary=vary,
        values=tuple(args.values),
        budget=args.budget,
        seed=args.seed,
        search=args.search,
        vm=args.vm,
        measure=args.measure,
        verify=args.verify,
        target=args.target,
        target_size=args.target_size,
        substitute=args.substitute,
        parallel=args.parallel or default_parallelism(),
    )
    if args.out is not None:
        output.check_dir(args.out, args.force)
    log = (lambda line: None) if args.quiet else None
    advice = advisor.advise(req, log=log, quiet=args.quiet)
    sys.stdout.write(output.table_text(advice, args.top))
    if args.out is not None:
        output.write_dir(advice, args.out, command_line(args), args.force)
        print(f"\nResults in {args.out}/: {', '.join(output.OUTPUT_FILES)}", flush=True)
    return 0
