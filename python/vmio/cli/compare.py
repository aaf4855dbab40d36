"""`vmio compare REAL SIM`: simulated results against measured ones, point by point
(`vmio.real.compare`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, write_new_file
from vmio.real.compare import (
    compare,
    csv_text,
    excluded_line,
    key_text,
    load,
    plot_png,
    summary_line,
    table,
)
from vmio.sim import VmioError

EPILOG = """\
REAL and SIM are each a study/experiment output directory (results.csv), one fio JSON file
(fio's --output-format=json or vmio sim's), a directory of fio JSON files, or the figures
file of scripts/real-images.py (its real runs as REAL, its predictions as SIM); in a directory,
NAME.rep1.json, NAME.rep2.json... are repetitions of one run (their median is compared and
their spread shown). Points match by axis values + direction (studies), job name + direction
(a file) or file name + job name + direction (a directory). The last line is the summary:
  vmio compare: N points; bandwidth error median X %, p90 Y %; mean latency error median X %,
  p90 Y %[; real spread median: bandwidth X %, mean latency Y %]
Errors are sim/real - 1; the summary is over their absolute values.

examples:
  vmio compare real-results/ vmio-results/volumes-cache/
  vmio compare fio-out.json sim.json --csv errors.csv --plot errors.png
  vmio compare tests/real_images_figures.json tests/real_images_figures.json
  vmio compare runs/ sims/ --repeat-spread"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio compare REAL SIM` to the subcommands `sub`."""
    p = sub.add_parser(
        "compare",
        help="compare simulated results with measured ones (errors per point, summary)",
        description="Match the points of measured (REAL) and simulated (SIM) results and "
        "report bandwidth, IOPS, mean and p99 latency of each with the relative error.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    p.add_argument("real", type=Path, metavar="REAL", help="measured results")
    p.add_argument("sim", type=Path, metavar="SIM", help="simulated results")
    p.add_argument("--csv", type=Path, metavar="FILE", help="also write the rows as CSV")
    p.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="also draw predicted vs measured (PNG)"
    )
    p.add_argument("--force", action="store_true", help="overwrite existing --csv/--plot files")
    p.add_argument(
        "--repeat-spread",
        action="store_true",
        help="require REAL to hold repeated runs (NAME.rep1.json...); their spread is "
        "reported whenever it does",
    )
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise VmioError(f"--plot: '{args.plot}' must be a .png file")
    for option, path in (("--csv", args.csv), ("--plot", args.plot)):
        if path is not None and path.exists() and not args.force:
            raise VmioError(f"{option}: output file '{path}' exists; pass --force to overwrite it")
    c = compare(load(args.real, "real"), load(args.sim, "sim"))
    if args.repeat_spread and not c.repeated:
        raise VmioError(
            f"--repeat-spread: REAL '{args.real}' holds no repeated runs "
            "(a directory with NAME.rep1.json, NAME.rep2.json...)"
        )
    out = [table(c)]
    for side, keys, other in (("REAL", c.unmatched_real, "SIM"), ("SIM", c.unmatched_sim, "REAL")):
        if keys:
            shown = "; ".join(key_text(k) for k in keys[:5]) + ("; ..." if len(keys) > 5 else "")
            out.append(f"{len(keys)} {side} point(s) not in {other}: {shown}")
    if (line := excluded_line(c)) is not None:
        out.append(line)
    out.append(summary_line(c))
    if args.csv is not None:
        write_new_file(args.csv, csv_text(c), args.force)
    if args.plot is not None:
        points, *parts = summary_line(c).removeprefix("vmio compare: ").split("; ")
        title = "\n".join([f"vmio compare {args.real.name} {args.sim.name}: {points}", *parts])
        write_new_file(args.plot, plot_png(c, title), args.force)
    sys.stdout.write("\n".join(out) + "\n")
    return 0
