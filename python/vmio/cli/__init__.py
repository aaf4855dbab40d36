"""The `vmio` command line: `vmio sim`, `vmio fio`, `vmio study`, `vmio serve`, `vmio bench`,
`vmio trace`, `vmio help`, `vmio calibrate`, `vmio compare`, `vmio validate`, `vmio report`;
`vmio trace`, `vmio help`, `vmio calibrate`, `vmio compare`, `vmio validate`, `vmio advise`;
one module per command (its options and its `cmd_*` function), `vmio.cli.common` what they
share.

Every bad input (a stack or job file the simulator rejects, a missing file, a bad option
value) ends as one `vmio: error: <message>` line on stderr and exit status 2, like argparse's
own errors; never as a traceback. Files the user names as inputs are only read.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from vmio.cli.common import EXIT_USAGE, Formatter, Parser, error_line
from vmio.sim import VmioError, check_path

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


class _Version(argparse.Action):
    """argparse's `version` action, with the version looked up only when asked for
    (`importlib.metadata` is slow to import)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from vmio.version import __version__

        sys.stdout.write(f"vmio {__version__}\n")
        parser.exit()


COMMANDS = (
    "sim",
    "fio",
    "study",
    "trace",
    "serve",
    "bench",
    "help",
    "calibrate",
    "compare",
    "validate",
    "report",
    "import",
    "advise",
)
"""The subcommands, in `vmio --help`'s order; `vmio.cli.<name>` defines each (`add_parser`,
`cmd_<name>`), or `vmio.cli.<MODULES[name]>` where the name is a Python keyword."""

MODULES = {"import": "importcmd"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `vmio` parser; with `only`, the subcommand `only` alone, so that the modules of the
    others (and what they import: numpy, pyarrow, ...) are not loaded to run it."""
    p = Parser(
        prog="vmio",
        description="vmio: a laboratory for the storage I/O of VMs on KVM hosts. Simulates the "
        "virtualized I/O path (fio job -> virtual disk -> QEMU cache mode -> host scheduler "
        "-> volume -> disks) from a stack file, deterministically.",
        epilog=MAIN_EPILOG,
        formatter_class=Formatter,
    )
    p.add_argument(
        "--version", action=_Version, nargs=0, help="show program's version number and exit"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"vmio.cli.{MODULES.get(name, name)}").add_parser(sub)
    return p


STRICT_ENV = "VMIO_STRICT_ERRORS"
"""Set to 1 (the fuzzer does), input errors that are not a `VmioError` keep their traceback
instead of becoming an error line: they show where a check is missing."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A command line that starts with a command needs that command's parser only; any other
    # (no command, --help, --version, a misspelt command) gets them all, for the full help
    # and argparse's list of choices.
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
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
