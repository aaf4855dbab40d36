"""`vmio fio`: fio's command line in front of the simulator.

`vmio fio --stack STACK.toml [fio's options] [job files]` reads a command line as fio 3.33
reads it and runs the resulting job file like `vmio sim`. Rules followed (fio's `init.c`,
`parse_cmd_line`, and `options.c`, `add_to_lopt`/`fio_options_dup_and_init`):

    options are long options, `--opt=value` or `--opt value`; one dash works too
      (getopt_long_only); a job option of type FIO_OPT_STR_SET (`time_based`, `thread`,
      `group_reporting`, ...: FLAG_OPTIONS) takes a value only after `=`
    an argument that is not an option is a job file; files and options mix in any order
    a job option before any `--name` goes to the defaults of every job (fio's `def_thread`),
      which is a `[global]` section, shown in the JSON's "global options"
    `--name=X` starts job X (`--name=global` starts a `[global]` section); the options that
      follow belong to it, up to the next `--name`
    the command line's jobs come first, then the job files' sections, in the order given
      (fio adds the command line's jobs in parse_cmd_line, then parses each ini file)
    `--section=X` (repeatable) keeps only the job files' sections named X (fio's
      `skip_this_section`, applied to ini files only)
    fio's own options (init.c `l_opts`) are honoured (FIO_OWN), refused with one line naming
      them (REFUSED: nothing vmio can do for them) or accepted without effect (NO_EFFECT)

A job option name fio 3.33 does not have is refused as fio refuses it (`fio: unrecognized
option '--iodepht=32'` and its did-you-mean, from the registry of fio's option names in
vmio-core's `fio::names`); a name fio has is passed on in the job file, where the simulator
notes the options it does not model.

`--version` answers `fio-3.33 (vmio VERSION)`: fio's own first word, so tools that check
`fio --version` for `fio-3` (bench-fio's `checks.check_fio_version`) accept vmio.

The notes (options vmio does not model, what it approximated) go to stderr, also with
`--output FILE`, so that a number vmio did not model is never reported without a word; they
are in the JSON's `vmio` object too. bench-fio treats any byte on fio's stderr as a failure
(`runfio.run_raw_command`), so the shim below passes `--quiet-notes`, which leaves the notes
in the JSON only (fio itself sends its error stream into `--output`: init.c, `case 'o'`,
`f_err = f_out`).

bench-fio calls `fio` from PATH: `--write-shim DIR` writes an executable `DIR/fio` that runs
`vmio fio` with this command line's vmio options (`--stack`, `--seed`, `--vm`, `--force`);
put DIR first on PATH (docs/fio-front.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vmio.cli import common
from vmio.cli import sim as sim_command
from vmio.sim import VmioError, interactive, native, read_text, shown_text
from vmio.version import __version__

FIO_VERSION = "fio-3.33"
"""The fio whose command line and outputs vmio follows."""

FLAG_OPTIONS = frozenset(
    {
        "bs_unaligned",
        "norandommap",
        "time_based",
        "verify_only",
        "exitall",
        "exitall_on_error",
        "stonewall",
        "wait_for_previous",
        "new_group",
        "thread",
        "group_reporting",
        "zero_buffers",
        "refill_buffers",
    }
)
"""fio 3.33's job options of type FIO_OPT_STR_SET (and their aliases): on the command line
they take a value only after `=` (getopt's optional_argument, options.c `add_to_lopt`)."""

OUTPUT_FORMATS = ("normal", "terse", "json", "json+")
"""fio's `--output-format` values (init.c, `parse_output_format`); a comma list combines them."""

EXIT_INTERRUPTED = 128
"""fio's exit status after SIGINT: backend.c `sig_int` sets `exit_value = 128` (and the
report of what ran is still written)."""

ETA_MODES = ("auto", "always", "never")
"""fio's `--eta` values: a progress line on a terminal (auto), always, or never."""

REQUIRED, OPTIONAL, NONE = "required", "optional", "none"

FIO_OWN: dict[str, str] = {
    "output": REQUIRED,
    "output-format": REQUIRED,
    "minimal": NONE,
    "append-terse": OPTIONAL,
    "terse-version": REQUIRED,
    "version": NONE,
    "help": NONE,
    "section": REQUIRED,
    "eta": REQUIRED,
}
"""fio's own options that `vmio fio` honours, with getopt's argument kind (init.c `l_opts`)."""

NO_EFFECT: dict[str, str] = {
    "readonly": NONE,
    "warnings-fatal": NONE,
    "max-jobs": REQUIRED,
    "alloc-size": REQUIRED,
    "eta-interval": REQUIRED,
    "eta-newline": REQUIRED,
}
"""fio's own options accepted without effect: `readonly` guards real files (a simulation
writes none), `max-jobs`/`alloc-size` size fio's process and shared memory, the progress
line has its own pace (`progress.RunProgress`)."""

REFUSED: dict[str, tuple[str, str]] = {
    "latency-log": (REQUIRED, "use write_lat_log in the job"),
    "bandwidth-log": (NONE, "use write_bw_log in the job"),
    "cmdhelp": (OPTIONAL, "see 'vmio help workload'"),
    "enghelp": (OPTIONAL, "see 'vmio help workload'"),
    "showcmd": (NONE, "vmio does not print job files as command lines"),
    "debug": (REQUIRED, "fio's debug logging has no simulated counterpart"),
    "inflate-log": (REQUIRED, "vmio writes no compressed logs"),
    "profile": (REQUIRED, "fio's built-in profiles are not modelled"),
    "server": (OPTIONAL, "vmio runs no fio server"),
    "server-internal": (REQUIRED, "vmio runs no fio server"),
    "daemonize": (REQUIRED, "vmio runs no fio server"),
    "client": (REQUIRED, "vmio runs no fio server"),
    "remote-config": (REQUIRED, "vmio runs no fio server"),
    "cpuclock-test": (NONE, "it tests this machine, not a simulated one"),
    "crctest": (OPTIONAL, "it tests this machine, not a simulated one"),
    "memcpytest": (OPTIONAL, "it tests this machine, not a simulated one"),
    "idle-prof": (REQUIRED, "it profiles this machine's CPUs"),
    "status-interval": (REQUIRED, "vmio reports once, at the end"),
    "trigger-file": (REQUIRED, "triggers act on a live run"),
    "trigger-timeout": (REQUIRED, "triggers act on a live run"),
    "trigger": (REQUIRED, "triggers act on a live run"),
    "trigger-remote": (REQUIRED, "triggers act on a live run"),
    "aux-path": (REQUIRED, "vmio writes no auxiliary state files"),
    "merge-blktrace-only": (NONE, "blktrace merging is not modelled"),
    "parse-only": (NONE, "vmio checks a job file by running it"),
}
"""fio's own options `vmio fio` refuses, with why."""

VMIO_OWN = {
    "stack": REQUIRED,
    "seed": REQUIRED,
    "vm": REQUIRED,
    "force": NONE,
    "quiet-notes": NONE,
    "max-events": REQUIRED,
    "max-sim-time": REQUIRED,
}
"""vmio's options of `vmio fio` (no fio option has these names); `write-shim` is apart.
`quiet-notes` keeps the notes out of stderr (in the JSON only), for the shim."""

STACK_ENV = "VMIO_STACK"
"""Environment variable giving the stack file when `--stack` is absent (the shim sets it)."""

FIO_HELP = f"""\
usage: vmio fio --stack STACK.toml [fio options] [job files]

Runs fio's command line on the simulator: options before any --name are global, --name=X
starts job X, other arguments are job files; fio's --output, --output-format
({", ".join(OUTPUT_FORMATS)}, comma lists), --minimal, --section, --eta, --version are
honoured. vmio's own options: --stack STACK (or ${STACK_ENV}), --seed N,
--vm NAME, --max-events N, --max-sim-time TIME (the run's bounds: an error past 10^10
events or 36500 days of simulated time by default), --force (let --output replace a
file), --quiet-notes (notes in the JSON only, not on stderr), --write-shim DIR (write
DIR/fio running this command line's vmio options and --quiet-notes, for tools that call
fio from PATH, e.g. bench-fio).

examples:
  vmio fio --stack stack.toml --name=rand --rw=randread --bs=4k --iodepth=16 --size=1g
  vmio fio --stack stack.toml --ioengine=libaio --direct=1 job.fio --output-format=json
  vmio fio --stack stack.toml --write-shim ~/.vmio-fio && PATH=~/.vmio-fio:$PATH bench-fio ...
"""


@dataclass
class FioCommand:
    """A `vmio fio` command line, read."""

    globals_: list[tuple[str, str | None]] = field(default_factory=list)
    """Job options before any `--name` (and of `--name=global` sections), in order."""
    jobs: list[tuple[str, list[tuple[str, str | None]]]] = field(default_factory=list)
    """Each `--name` job with its options, in order."""
    files: list[str] = field(default_factory=list)
    own: dict[str, list[str | None]] = field(default_factory=dict)
    """fio's own and vmio's options given, each with its values in order."""
    shim: str | None = None


def _option_kind(name: str) -> str:
    if name in FIO_OWN:
        return FIO_OWN[name]
    if name in NO_EFFECT:
        return NO_EFFECT[name]
    if name in REFUSED:
        return REFUSED[name][0]
    if name in VMIO_OWN:
        return VMIO_OWN[name]
    if name == "write-shim":
        return REQUIRED
    return OPTIONAL if name in FLAG_OPTIONS else REQUIRED


def parse_command_line(argv: Sequence[str]) -> FioCommand:
    """Read fio's command line (module doc); a malformed one is a `VmioError` naming the
    option, as getopt's message does."""
    cmd = FioCommand()
    current: list[tuple[str, str | None]] | None = None  # None: the global defaults
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":  # getopt: everything after is a job file
            cmd.files.extend(argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            cmd.files.append(arg)
            continue
        body = arg[2:] if arg.startswith("--") else arg[1:]
        name, eq, value = body.partition("=")
        if not name:
            raise VmioError(f"unrecognized option {shown_text(arg)}")
        kind = _option_kind(name)
        if eq:
            if kind == NONE:
                raise VmioError(f"option '--{name}' doesn't allow an argument")
            given: str | None = value
        elif kind == REQUIRED:
            if i >= len(argv):
                raise VmioError(f"option '--{name}' requires an argument")
            given = argv[i]
            i += 1
        else:
            given = None
        if "\n" in (given or "") or "\r" in (given or ""):
            raise VmioError(f"option '--{name}': a value cannot contain a line break")
        if name in REFUSED:
            raise VmioError(
                f"fio option '--{name}' is not supported by vmio fio: {REFUSED[name][1]}"
            )
        if name == "write-shim":
            cmd.shim = given
        elif name in FIO_OWN or name in NO_EFFECT or name in VMIO_OWN:
            cmd.own.setdefault(name, []).append(given)
        elif name == "name":
            if given == "global":
                current = None
            else:
                current = []
                cmd.jobs.append((given or "", current))
        else:
            if (why := native().fio_option_check(name)) is not None:
                raise VmioError(f"fio: unrecognized option {shown_text(arg, 80)}: {why}")
            (cmd.globals_ if current is None else current).append((name, given))
    return cmd


_SECTION = re.compile(r"^\s*\[([^\]]*)\]")


def keep_sections(text: str, sections: Sequence[str]) -> str:
    """A job file's text with only `[global]` and the sections named in `sections` (fio's
    `--section`); the dropped sections' lines become blank, so line numbers stay."""
    out = []
    keep = True
    for line in text.splitlines():
        if m := _SECTION.match(line):
            name = m.group(1).strip()
            keep = name == "global" or name in sections
        out.append(line if keep else "")
    return "\n".join(out) + "\n"


def _option_line(name: str, value: str | None) -> str:
    return name if value is None else f"{name}={value}"


@dataclass
class JobText:
    """The job file a command line stands for."""

    text: str
    path: str
    """Name in messages and base of relative paths: the only job file when the command line
    adds nothing to it, else `<first file>+command-line` (or `command-line`)."""


def compose_job(
    cmd: FioCommand, read: Callable[[str], str] = lambda p: read_text(p, "job file")
) -> JobText:
    """The job file of a command line (module doc: command line jobs, then files)."""
    sections = [v for v in cmd.own.get("section", []) if v is not None]
    texts = [read(p) for p in cmd.files]
    if sections:
        texts = [keep_sections(t, sections) for t in texts]
    if not cmd.globals_ and not cmd.jobs and len(texts) == 1:
        return JobText(texts[0], cmd.files[0])
    if not cmd.jobs and not texts:
        raise VmioError("no job defined: give --name=NAME with its options, or a job file")
    lines: list[str] = []
    if cmd.globals_:
        lines.append("[global]")
        lines += [_option_line(n, v) for n, v in cmd.globals_]
    for name, options in cmd.jobs:
        if not name or "]" in name:
            raise VmioError(f"--name {shown_text(name)}: a job name must be non-empty, without ']'")
        lines.append(f"[{name}]")
        lines.append(f"name={name}")
        lines += [_option_line(n, v) for n, v in options]
    text = "\n".join(lines) + "\n" if lines else ""
    for t in texts:
        text += t if t.endswith("\n") else t + "\n"
    path = f"{cmd.files[0]}+command-line" if cmd.files else "command-line"
    return JobText(text, path)


def output_format(cmd: FioCommand) -> str:
    """fio's output format of the command line: `--minimal` is terse (init.c), else the last
    `--output-format` (comma lists checked value by value), else normal."""
    if "minimal" in cmd.own or "append-terse" in cmd.own:
        return "terse"
    given = cmd.own.get("output-format")
    if not given:
        return "normal"
    fmt = given[-1] or ""
    for part in fmt.split(","):
        if part not in OUTPUT_FORMATS:
            raise VmioError(
                f"--output-format {shown_text(part)}: accepted values are "
                f"{', '.join(OUTPUT_FORMATS)} (comma-separated for several)"
            )
    return fmt


def _last(cmd: FioCommand, name: str) -> str | None:
    values = cmd.own.get(name)
    return values[-1] if values else None


def write_shim(directory: Path, cmd: FioCommand) -> Path:
    """Write `directory/fio`, a shell script running `vmio fio` with `cmd`'s vmio options."""
    stack = _last(cmd, "stack") or os.environ.get(STACK_ENV)
    if stack is None:
        raise VmioError(f"--write-shim needs --stack STACK (or ${STACK_ENV})")
    words = [sys.executable, "-m", "vmio", "fio", "--stack", str(Path(stack).resolve())]
    for name in ("seed", "vm", "max-events", "max-sim-time"):
        if (v := _last(cmd, name)) is not None:
            words += [f"--{name}", v]
    if "force" in cmd.own:
        words.append("--force")
    words.append("--quiet-notes")  # bench-fio fails a run on any byte of stderr
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fio"
    path.write_text(
        "#!/bin/sh\n# fio on vmio's simulator (written by 'vmio fio --write-shim')\n"
        f'exec {shlex.join(words)} "$@"\n'
    )
    path.chmod(0o755)
    return path


def cmd_fio(
    argv: Sequence[str],
    run_sim: Callable[[argparse.Namespace], int],
    parse_seed: Callable[[str], int],
) -> int:
    """`vmio fio`: read the command line, then run it through `run_sim` (`vmio sim`'s
    command, given a namespace with `job_text`) with a progress line per `--eta`; Ctrl-C
    gives the report of what ran and fio's exit status 128. `parse_seed` reads `--seed`."""
    cmd = parse_command_line(argv)
    if "help" in cmd.own:
        sys.stdout.write(FIO_HELP)
        return 0
    if "version" in cmd.own:
        print(f"{FIO_VERSION} (vmio {__version__})")
        return 0
    if cmd.shim is not None:
        print(write_shim(Path(cmd.shim), cmd))
        return 0
    if (tv := _last(cmd, "terse-version")) not in (None, "3"):
        raise VmioError(f"--terse-version {shown_text(tv or '')}: vmio writes terse version 3")
    eta = _last(cmd, "eta") or "auto"
    if eta not in ETA_MODES:
        raise VmioError(f"--eta {shown_text(eta)}: accepted values are {', '.join(ETA_MODES)}")
    stack = _last(cmd, "stack") or os.environ.get(STACK_ENV)
    if stack is None:
        raise VmioError(f"vmio fio needs --stack STACK.toml (or ${STACK_ENV} set)")
    fmt = output_format(cmd)
    job = compose_job(cmd)
    seed = _last(cmd, "seed")
    output = _last(cmd, "output")
    max_events = _last(cmd, "max-events")
    if max_events is not None:
        try:
            max_events_n: int | None = int(max_events)
        except ValueError:
            raise VmioError(
                f"--max-events {shown_text(max_events)}: accepted: a count of at least 1"
            ) from None
    else:
        max_events_n = None
    ns = argparse.Namespace(
        max_events=max_events_n,
        max_sim_time=_last(cmd, "max-sim-time"),
        stack=stack,
        job=job.path,
        job_text=job.text,
        seed=parse_seed(seed) if seed is not None else None,
        vm=_last(cmd, "vm"),
        output_format=fmt,
        output=Path(output) if output is not None else None,
        force="force" in cmd.own,
        eta=eta,
    )
    with interactive(eta) as ctx:  # the progress line on this stderr, Ctrl-C
        if "quiet-notes" not in cmd.own:
            status = run_sim(ns)
        else:  # the notes stay in the JSON (module doc): stderr stays quiet
            with contextlib.redirect_stderr(io.StringIO()):
                status = run_sim(ns)
    return EXIT_INTERRUPTED if ctx.interrupted else status


# --- the subcommand ------------------------------------------------------------------------


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio fio` to the subcommands `sub`: every argument goes to `parse_command_line`."""
    f = sub.add_parser(
        "fio",
        help="run fio's command line (options and/or job files) on the simulator",
        description="Run fio's command line on the simulator; 'vmio fio --help' for more.",
        add_help=False,
        prefix_chars="\0",  # every argument goes to parse_command_line, which reads it as fio does
    )
    f.add_argument("argv", nargs=argparse.REMAINDER)
    f.set_defaults(func=_cmd)


def _cmd(args: argparse.Namespace) -> int:
    def seed(text: str) -> int:
        try:
            return common.parse_seed(text)
        except argparse.ArgumentTypeError as err:
            raise VmioError(f"--seed: {err}") from None

    return cmd_fio(args.argv, sim_command.cmd_sim, seed)
