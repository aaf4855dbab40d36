"""`vmio trace synth`: a synthetic block trace shaped like one of S1's, in UMass/SPC CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, Parser, int_in, missing, parse_seed, size_in, write_new_file
from vmio.sim import native


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio trace synth` to the subcommands `sub`."""
    t = sub.add_parser(
        "trace",
        help="block traces: synthetic traces shaped like S1's MSN, Exchange, Financial",
        description="Block-trace tools.",
        formatter_class=Formatter,
    )
    tsub = t.add_subparsers(dest="trace", metavar="WHAT", parser_class=Parser)
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
        formatter_class=Formatter,
    )
    ts.add_argument(
        "profile",
        metavar="PROFILE",
        choices=("msn", "exchange", "financial"),
        help="msn, exchange or financial",
    )
    ts.add_argument(
        "--requests",
        type=int_in(1, 10_000_000),
        default=10000,
        metavar="N",
        help="number of requests, 1..10000000 (default: 10000)",
    )
    ts.add_argument(
        "--region",
        type=size_in(4096, 1 << 50, "4k..1p"),
        default=30 << 30,
        metavar="SIZE",
        help="size of the addressed region, fio-style, 4k..1p (default: 30g)",
    )
    ts.add_argument("--seed", type=parse_seed, default=1, metavar="N", help="seed (default: 1)")
    ts.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write to FILE instead of stdout (never overwrites an existing file unless --force)",
    )
    ts.add_argument("--force", action="store_true", help="let --output replace an existing file")
    ts.set_defaults(func=cmd_trace_synth)
    t.set_defaults(func=lambda args: missing(t, "what to do with traces (vmio trace synth)"))


def cmd_trace_synth(args: argparse.Namespace) -> int:
    text = native().synth_trace(args.profile, args.region, args.requests, args.seed)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_new_file(args.output, text, args.force)
    return 0
