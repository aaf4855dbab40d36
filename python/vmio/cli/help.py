"""`vmio help stack`: the stack file's selectable layers (vdisk interfaces, QEMU cache modes,
the guest's filesystem and page cache, page cache and eviction, schedulers, volume layouts,
device models), each with its parameters
(name, accepted values, default, meaning), like `qemu-system-x86_64 -device help` or
`fio --cmdhelp`. The text comes from the registries the stack parser reads (vmio-core's and
vmio-sim's `REGISTRY` lists); `--markdown` prints the README's tables, which a Rust test keeps
equal to it. `vmio help workload`: the workload kinds of a job file (FileBench personalities,
applications, trace formats, synthetic trace profiles), from vmio-core's workload registries."""

from __future__ import annotations

import argparse
import sys

from vmio.cli.common import Formatter, Parser, missing
from vmio.sim import native

EPILOG = """examples:
  vmio help stack                 vdisks, guest filesystem and page cache, layouts, schedulers,
                                  device models and their parameters
  vmio help stack --markdown      the same as the README's Markdown tables
  vmio help workload              FileBench personalities, applications, trace formats,
                                  synthetic profiles"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio help TOPIC` to the subcommands `sub`."""
    h = sub.add_parser(
        "help",
        help="what a stack file accepts: layouts, schedulers, device models",
        description="Reference of the stack file's selectable layers.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    hsub = h.add_subparsers(dest="topic", metavar="TOPIC", parser_class=Parser)
    hs = hsub.add_parser(
        "stack",
        help="volume layouts, schedulers and device models with their parameters",
        description="List every [[vm.disk]] interface and cache mode, [vm.disk.filesystem], "
        "[vm.page_cache], [page_cache] and [pdc] key, [[volume]] layout, [scheduler] name and "
        "[[device]] model with its parameters: accepted values, default and meaning.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    hs.add_argument("--markdown", action="store_true", help="print Markdown tables (the README's)")
    hs.set_defaults(func=cmd_help_stack)
    hw = hsub.add_parser(
        "workload",
        help="FileBench personalities, applications, trace formats and synthetic trace profiles",
        description="List the workload kinds a job file can name (filebench=, app=, iolog_format=, "
        "vmio trace synth PROFILE) with their sources.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    hw.set_defaults(func=cmd_help_workload)
    h.set_defaults(
        func=lambda args: missing(h, "what to show help on (vmio help stack | workload)")
    )


def cmd_help_workload(args: argparse.Namespace) -> int:
    sys.stdout.write(native().workload_help())
    return 0


def cmd_help_stack(args: argparse.Namespace) -> int:
    sys.stdout.write(native().stack_help(args.markdown))
    return 0
