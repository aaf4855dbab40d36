"""JSON read from user files with a bound on nesting: `read_json` and `loads`.

A file is read by vmio's one bounded reader (`vmio.sim.read_text`: a regular file, at most
16 MiB, UTF-8), then parsed only if its arrays and objects nest at most `MAX_JSON_DEPTH`
deep. Python's `json` parses nesting by recursion, so `'[' * 100000 + ']' * 100000` ends in a
RecursionError; the depth is therefore measured first, without recursion and in linear passes
of the regular-expression engine:

    brackets = text with its strings removed, then everything but [ ] { } removed
    repeat up to MAX_JSON_DEPTH times:
        remove every innermost pair "[]" and "{}"    (one pass removes one level)
        stop when nothing is left (depth fits) or nothing was removed (unbalanced: json
        reports the syntax error)
    something left after MAX_JSON_DEPTH passes -> too deep: one error line naming the file

A RecursionError of `json` (an unbalanced document that is also deep) is reported the same
way. fio's JSON output nests 6 levels deep (job -> read -> clat_ns -> percentile), a study's
point JSON about 8; the bound leaves ample room.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vmio.sim import VmioError, read_text

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects vmio parses in a JSON input."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when arrays and objects in `text` nest deeper than `limit` (strings ignored)."""
    b = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not b:
            return False
        b, n = _INNERMOST.subn("", b)
        if n == 0:
            return False  # unbalanced: json.loads reports where
    return bool(b)


def _deep_error(where: str, limit: int) -> VmioError:
    return VmioError(f"{where}: JSON nested deeper than {limit} levels")


def loads(text: str, where: str, *, start: int | None = None, limit: int = MAX_JSON_DEPTH) -> Any:
    """Parse `text` as one JSON document (as `json.loads`), or with `start` the JSON value
    beginning there, ignoring what follows it (fio may print text after its JSON); errors are
    one `VmioError` line beginning with `where` (the file)."""
    if too_deep(text if start is None else text[start:], limit):
        raise _deep_error(where, limit)
    try:
        if start is None:
            return json.loads(text)
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError as err:
        raise VmioError(f"{where}: line {err.lineno}: {err.msg}") from None
    except RecursionError:
        raise _deep_error(where, limit) from None
    except ValueError as err:
        # An integer of more digits than Python converts (sys.get_int_max_str_digits, 4300 by
        # default: CVE-2020-10735's bound).
        raise VmioError(f"{where}: {str(err).split(';')[0]}") from None


def read_json(path: str | Path, what: str) -> Any:
    """The JSON document in the user file `path` (`what` names it in errors), read by the
    bounded reader and parsed with the depth bound."""
    return loads(read_text(path, what), f"{what} '{path}'")
