"""What every command of `vmio` shares: its argument parser class (one error line, exit
status 2), the help formatter, the argparse value types (seed, integer, size, seconds in a
range), the missing-subcommand help, Ctrl-C handling and writing new output files.

Every bad input (a stack or job file the simulator rejects, a missing file, a bad option
value) ends as one `vmio: error: <message>` line on stderr and exit status 2, like argparse's
own errors; never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from vmio.sim import VmioError, parse_size, shown_text

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""Exit status of a command Ctrl-C stopped (the shell's 128 + SIGINT)."""


class Parser(argparse.ArgumentParser):
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


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)


def parse_seed(text: str) -> int:
    """argparse type: a seed, 0..2**64-1 (decimal, or 0x/0o/0b)."""
    try:
        value = int(text, 0) if len(text) <= 30 else -1
    except ValueError:
        value = -1
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"{shown_text(text)} is not an integer in 0..2**64-1")
    return value


def int_in(lo: int, hi: int) -> Callable[[str], int]:
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


def size_in(lo: int, hi: int, shown: str) -> Callable[[str], int]:
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


def seconds_in(lo: float, hi: float) -> Callable[[str], float]:
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


def missing(parser: argparse.ArgumentParser, what: str) -> int:
    parser.print_help(sys.stderr)
    raise VmioError(f"missing {what}")


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
