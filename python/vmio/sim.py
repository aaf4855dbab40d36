"""Python face of the simulator: run one stack + fio job from file contents, get fio's JSON
text back (`vmio.api.simulate`, the public `vmio.simulate`, types it).

The work is done by the Rust extension `vmio._native` (crates/vmio-py); this module only reads
the user's files (never writes them), turns a missing native module into a clear error and
parses sizes with the simulator's own parser. Every bad input raises `VmioError` with a
user-facing message.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    import vmio._native as _native
except ImportError as _err:  # not built yet: `pip install .` or `maturin develop`
    _native = None
    _NATIVE_IMPORT_ERROR: ImportError | None = _err

    class VmioError(Exception):
        """Bad input to vmio; the message is complete and meant for the user."""

else:
    _NATIVE_IMPORT_ERROR = None
    VmioError = _native.VmioError


def native() -> ModuleType:
    """The compiled extension, or a `VmioError` that says how to build it."""
    if _native is None:
        err = _NATIVE_IMPORT_ERROR
        missing = isinstance(err, ModuleNotFoundError) and err.name == "vmio._native"
        raise VmioError(
            "the native module vmio._native is "
            + ("not built" if missing else f"broken ({err})")
            + "; install the package with `pip install .` (or `maturin develop` in a checkout)"
        )
    return _native


MAX_INPUT_BYTES = 16 << 20
"""The largest file vmio reads as input text (stack, job, experiment, study files): 16 MiB."""


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}"


def bounded_text(text: str, limit: int = 80) -> str:
    """User text as a note or an error line echoes it, unquoted: at most `limit` characters
    then `…`, non-printables escaped (so it stays one line)."""
    shown = "".join(
        c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
        for c in text[:limit]
    )
    return f"{shown}…" if len(text) > limit else shown


def shown_text(text: str, limit: int = 40) -> str:
    """User text as an error line quotes it: `bounded_text` in quotes, and its length when
    cut."""
    if len(text) > limit:
        return f"'{bounded_text(text, limit)}' ({len(text)} characters)"
    return f"'{bounded_text(text, limit)}'"


MAX_PATH_CHARS = 4096
"""Longest path vmio accepts (Linux's PATH_MAX); one component at most NAME_MAX = 255 bytes."""


def check_path(path: str | Path, what: str) -> Path:
    """A user-given path, refused with a `VmioError` when the OS could not take it: a NUL,
    more than `MAX_PATH_CHARS` characters or a component over 255 bytes (ENAMETOOLONG)."""
    name = str(path)
    shown = shown_text(name, 60)
    if "\0" in name:
        raise VmioError(f"{what} path {shown} contains a NUL character")
    if len(name) > MAX_PATH_CHARS:
        raise VmioError(f"{what} path {shown} is longer than {MAX_PATH_CHARS} characters")
    if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in name.split("/")):
        raise VmioError(f"{what} path {shown} has a name longer than 255 bytes")
    return Path(path)


def read_bytes(
    path: str | Path, what: str, limit: int = MAX_INPUT_BYTES, *, follow_links: bool = True
) -> bytes:
    """The bytes of a user file: a regular file (a directory, a FIFO — never waited on —, a
    device like /dev/zero are refused), at most `limit` bytes, and with `follow_links` False
    not through a symbolic link; every problem is a `VmioError` naming the file."""
    name = str(check_path(path, what))
    mib = " (16 MiB)" if limit == MAX_INPUT_BYTES else ""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not hang; checked below.
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise VmioError(f"{what} '{path}' does not exist") from None
    except IsADirectoryError:
        raise VmioError(f"{what} '{path}' is a directory, not a file") from None
    except OSError as err:
        if not follow_links and os.path.islink(name):
            raise VmioError(f"{what} '{path}' is a symbolic link, not followed") from None
        raise VmioError(f"cannot read {what} '{path}': {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise VmioError(f"{what} '{path}' is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise VmioError(f"{what} '{path}' is not a regular file (a device, FIFO or socket)")
        if st.st_size > limit:
            raise VmioError(f"{what} '{path}' is {st.st_size} bytes; the limit is {limit}{mib}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise VmioError(f"cannot read {what} '{path}': {err.strerror or err}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise VmioError(f"{what} '{path}' is over the limit of {limit} bytes{mib}")
    return data


def read_text(path: str | Path, what: str) -> str:
    """Read a user file as UTF-8 text; every problem is a `VmioError` naming the file.

    Refused: a NUL in the path; anything but a regular file (a directory, a FIFO — never
    waited on —, a device like /dev/zero); a file over `MAX_INPUT_BYTES`; bytes that are not
    UTF-8 (the message gives the byte offset and line) and NUL characters in the text.
    """
    data = read_bytes(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        good = data[: err.start].decode("utf-8")
        raise VmioError(
            f"{what} '{path}' is not UTF-8 text: byte 0x{data[err.start]:02x} at offset "
            f"{err.start} ({_where(good, len(good))}): {err.reason}"
        ) from None
    if (nul := text.find("\0")) >= 0:
        raise VmioError(f"{what} '{path}' contains a NUL character at {_where(text, nul)}")
    return text


@dataclass(frozen=True)
class Limits:
    """Bounds of one simulation (the simulator's `Limits`): past either, the run ends with
    one `VmioError` line naming the bound and its flag. `max_events`: events the simulator
    handles (default 10^10); `max_sim_time`: simulated time, a duration such as `"100d"`
    or a number of seconds (default 36,500 days). None: the default."""

    max_events: int | None = None
    max_sim_time: str | int | float | None = None

    def native_args(self) -> tuple[int | None, str | None]:
        n, t = self.max_events, self.max_sim_time
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise VmioError(
                f"--max-events (max_events=): {short_repr(n)}; accepted: a count of at least 1"
            )
        if n is not None and n >= 2**64:
            raise VmioError(
                "--max-events (max_events=): more than 2^64-1 events; accepted: a count "
                "of at least 1, at most 18446744073709551615"
            )
        if t is not None and (isinstance(t, bool) or not isinstance(t, (str, int, float))):
            raise VmioError(
                f"--max-sim-time (max_sim_time=): {short_repr(t)}; accepted: a number of "
                "seconds or a duration such as 90s, 2h, 100d"
            )
        return n, None if t is None else str(t)


def simulate_text(
    stack_text: str,
    stack_path: str,
    job_text: str,
    job_path: str,
    seed: int | None = None,
    vm: str | None = None,
    limits: Limits = Limits(),
) -> str:
    """Run one simulation from file contents; returns fio's JSON output as text.

    `stack_path` and `job_path` are only used to name the files in error messages and in
    the result's `vmio.job_file`. `seed=None` takes the stack file's `seed`, else 1.
    """
    max_events, max_sim_time = limits.native_args()
    return _watched(
        lambda progress: native().simulate(
            stack_text,
            stack_path,
            job_text,
            job_path,
            seed,
            vm,
            progress,
            max_events=max_events,
            max_sim_time=max_sim_time,
        )
    )


@dataclass
class Interactive:
    """A command run by a person: a progress line (fio's `--eta` mode) and Ctrl-C giving
    the report of what ran so far (`interrupted` tells it happened)."""

    eta: str = "auto"
    stream: Any = None
    interrupted: bool = False


_INTERACTIVE: ContextVar[Interactive | None] = ContextVar("vmio_interactive", default=None)


@contextmanager
def interactive(eta: str = "auto") -> Iterator[Interactive]:
    """Within it, a simulation shows a progress line on this stderr (as it is on entry) and
    Ctrl-C makes it return fio's JSON of what ran so far, marked in `vmio.interrupted`,
    instead of raising KeyboardInterrupt (what a study, which must not keep a partial
    point, gets outside it)."""
    ctx = Interactive(eta, sys.stderr)
    token = _INTERACTIVE.set(ctx)
    try:
        yield ctx
    finally:
        _INTERACTIVE.reset(token)


def _watched(run: Callable[[Callable[[int, int | None], None] | None], str]) -> str:
    """`run(progress)` under the current `interactive` context, if any."""
    ctx = _INTERACTIVE.get()
    if ctx is None:
        return run(None)
    from vmio.progress import RunProgress

    line = RunProgress(ctx.eta, stream=ctx.stream)
    try:
        return run(line)
    except native().Interrupted as err:
        ctx.interrupted = True
        return str(err.args[0])
    finally:
        line.close()


_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def parse_toml(text: str, path: str | Path) -> dict[str, Any]:
    """Parse TOML text; a syntax error is a `VmioError` `path:line:column: message`."""
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        msg = str(err)
        if m := _TOML_AT.search(msg):
            line, col = m.group(1), m.group(2)
            msg = msg[: m.start()]
        else:  # "(at end of document)"
            msg = msg.replace(" (at end of document)", " at the end of the file")
            line = str(text.count("\n") + 1)
            col = str(len(text) - text.rfind("\n"))
        raise VmioError(f"{path}:{line}:{col}: invalid TOML: {msg}") from None
    except ValueError:  # an integer of more digits than Python converts
        m = re.search(rf"\d{{{sys.get_int_max_str_digits() or 4300},}}", text)
        where = _where(text, m.start()).replace("line ", "").replace(", column ", ":") if m else ""
        raise VmioError(
            f"{path}:{where}: invalid TOML: an integer of more than "
            f"{sys.get_int_max_str_digits()} digits"
        ) from None
    except RecursionError:
        raise VmioError(f"{path}: invalid TOML: arrays or tables nested too deeply") from None


def stack_workloads(stack_text: str, stack_path: str | Path) -> list[tuple[str, str, str]]:
    """The `(vm, job_text, job_path)` of every `[[vm]]` with a `workload` (a fio job file,
    relative to the stack file's directory), from the stack as the simulator reads it
    (`vmio._native.load_stack`, whose typed view is `vmio.stackfile`): a bad stack is its
    one-line error."""
    stack = native().load_stack(stack_text, str(stack_path))
    out = []
    for i, vm in enumerate(stack["vms"]):
        if vm["workload"] is None:
            continue
        path = Path(stack_path).parent / vm["workload"]
        out.append((vm["name"], read_text(path, f"vm[{i}].workload job file"), str(path)))
    return out


def short_repr(value: Any, limit: int = 40) -> str:
    """A value as an error message shows it: its repr, cut to `limit` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def simulate_workloads_text(
    stack_text: str, stack_path: str | Path, seed: int | None = None, limits: Limits = Limits()
) -> str:
    """Run every VM's own `workload` of a stack file at once; fio's JSON output as text."""
    max_events, max_sim_time = limits.native_args()
    jobs = stack_workloads(stack_text, stack_path)
    if not jobs:
        raise VmioError(
            f"{stack_path}: no job file given and no [[vm]] has a workload; pass JOB.fio or "
            'set `workload = "job.fio"` in a [[vm]]'
        )
    return _watched(
        lambda progress: native().simulate_many(
            stack_text,
            str(stack_path),
            jobs,
            seed,
            progress,
            max_events=max_events,
            max_sim_time=max_sim_time,
        )
    )


def parse_size(text: str | int) -> int:
    """Bytes of a fio-style size: `4k`, `64KiB`, `1m`, `512` (fio's default kb_base=1024).

    The simulator's own parser (`vmio_core::units::parse_size`), so that a size means the
    same in a stack or job file, on the command line and in a study; a bad size is one
    `VmioError` line quoting the text and saying what is accepted."""
    if isinstance(text, int):
        return text
    try:
        return native().parse_size(str(text))
    except UnicodeEncodeError:  # surrogate-escaped bytes (a command line): Rust takes UTF-8
        raise VmioError(f"{shown_text(str(text))} is not a size: not UTF-8 text") from None


def format_size(nbytes: int) -> str:
    """The shortest fio-style spelling of a byte count: 32768 -> `32k`, 1048576 -> `1m`."""
    for power, suffix in ((4, "t"), (3, "g"), (2, "m"), (1, "k")):
        if nbytes >= 1024**power and nbytes % 1024**power == 0:
            return f"{nbytes // 1024**power}{suffix}"
    return str(nbytes)
