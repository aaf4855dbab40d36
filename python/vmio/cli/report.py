"""`vmio report DIR`: one self-contained HTML file of an output directory
(`vmio.htmlreport`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, write_new_file

EPILOG = """\
DIR is the output directory of vmio study (results.csv, points.csv), vmio validate
(compare.csv, real/, sim/), vmio compare (compare.csv, from --csv) or vmio advise
(advise.json). The page holds every table (sortable: click a column), every figure, the
per-layer latency breakdown of each point where its JSON has one, the stack, job and
experiment files, text reports, the command to reproduce and the environment. It loads
nothing from the network.

examples:
  vmio study volumes-cache --quick --out /tmp/vc && vmio report /tmp/vc
  vmio report /tmp/vc -o vc.html --force"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio report DIR` to the subcommands `sub`."""
    p = sub.add_parser(
        "report",
        help="write one self-contained HTML report of a study, compare, validate or advise "
        "output directory",
        description="Write one HTML file (no network, inline figures) with the tables, "
        "figures, latency breakdown, inputs, command and environment of an output directory.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    p.add_argument("directory", type=Path, metavar="DIR", help="the output directory")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE.html",
        help="the HTML file to write (default DIR/report.html)",
    )
    p.add_argument("--force", action="store_true", help="overwrite the HTML file if it exists")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from vmio.htmlreport import DEFAULT_NAME, detect_kind, report_html
    from vmio.sim import VmioError

    out = args.output if args.output is not None else args.directory / DEFAULT_NAME
    if out.suffix.lower() not in (".html", ".htm"):
        raise VmioError(f"--output: '{out}' must be an .html file")
    detect_kind(args.directory)
    if out.exists() and not args.force:
        raise VmioError(f"output file '{out}' exists; pass --force to overwrite it")
    text = report_html(args.directory)
    write_new_file(out, text, args.force)
    sys.stdout.write(f"vmio report: wrote {out} ({len(text.encode('utf-8'))} bytes)\n")
    return 0
