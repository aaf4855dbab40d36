"""`vmio serve`: a stack's VM disks served over NBD until SIGINT/SIGTERM (the Rust server,
through `vmio.real.serve`). Its options are not declared here: they are rows of the one table
the `vmio-serve` binary's parser is built from too (vmio_serve::options::OPTIONS, through
`vmio._native.serve_options()`), and so are the help's description and closing text."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from vmio.cli.common import Formatter, int_in, seconds_in, size_in
from vmio.real import serve
from vmio.sim import VmioError, native


def serve_options() -> list[dict]:
    """`vmio serve`'s options, one dict per row of the Rust table; none when the native
    module is missing (`vmio --help` still works then)."""
    try:
        return list(native().serve_options())
    except (VmioError, AttributeError):
        return []


def serve_text() -> tuple[str, str]:
    """The description and epilog of `vmio serve --help` (vmio_serve::options)."""
    try:
        about, epilog = native().serve_text("vmio serve")
    except (VmioError, AttributeError):
        return "Serve every VM disk of a stack file over NBD.", ""
    return about, epilog


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """One argparse argument per row of the serve table: its flag, help, range (the same
    bounds as the binary's) and no default (the server's are the table's; an option not given
    is not passed)."""
    types: dict[str, Callable[[dict], Callable[[str], object]]] = {
        "path": lambda o: Path,
        "port": lambda o: int_in(o["lo"], o["hi"]),
        "count": lambda o: int_in(o["lo"], o["hi"]),
        "size": lambda o: size_in(o["lo"], o["hi"], o["range"]),
        "seconds": lambda o: seconds_in(o["lo"], o["hi"]),
        "choice": lambda o: str,
    }
    exclusive: dict[frozenset[str], argparse._MutuallyExclusiveGroup] = {}
    options = serve_options()
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
            extra: dict[str, object] = {"required": True} if o["required"] else {}
            if o.get("choices"):
                extra["choices"] = o["choices"]
            where.add_argument(o["flag"], type=kind, metavar=o["metavar"], **extra, **common)
    if not options:  # no native module: cmd_serve says how to build it
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio serve` to the subcommands `sub`."""
    about, epilog = serve_text()
    sv = sub.add_parser(
        "serve",
        help="serve a stack's VM disks over NBD (the real engine)",
        description=about,
        epilog=epilog,
        formatter_class=Formatter,
    )
    add_serve_options(sv)
    sv.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    given = {o["dest"]: getattr(args, o["dest"], None) for o in serve_options()}
    stack = given.pop("stack", None)
    snaps = serve.serve(
        stack, **{k: v for k, v in given.items() if v is not None and v is not False}
    )
    print("vmio: shut down", file=sys.stderr)
    print(serve.stats_table(snaps), file=sys.stderr)
    return 0
