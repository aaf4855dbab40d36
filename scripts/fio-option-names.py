#!/usr/bin/env python3
"""Write crates/vmio-core/src/fio/fio_names.rs: the option names of fio 3.33.

Reads, from a git clone of fio (https://github.com/axboe/fio) at tag fio-3.33, the `.name`
and `.alias` string fields of every entry of

- the `struct fio_option fio_options[FIO_MAX_OPTS]` table of options.c (every branch of its
  `#ifdef`s: a name fio knows on one platform is a name, not a typo, on any), with the entries
  whose `.type` is `FIO_OPT_DEPRECATED` (fio refuses them) kept apart, and
- the option table of every engine (engines/*.c: each `struct ioengine_ops` with
  `.options = TABLE`), the options fio reads when the job's `ioengine` is that engine.

Only names are taken, no code. Usage: scripts/fio-option-names.py /path/to/fio-clone
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TAG = "fio-3.33"
OUT = Path(__file__).resolve().parent.parent / "crates/vmio-core/src/fio/fio_names.rs"
SKIP_ENGINE_FILES = {"engines/skeleton_external.c"}
"""An example for writing an external engine, not an engine of fio."""


def show(repo: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, "show", f"{TAG}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def table(text: str, opening: str) -> list[tuple[str, str | None, str | None]]:
    """(name, alias, type) of each entry of the table opened by `opening`, to `.name = NULL`."""
    start = text.index(opening)
    end = text.index(".name", start)
    entries = []
    body = text[start:]
    # Each entry is a `{ ... }` at the table's first nesting level; fields are found by regex
    # inside it (posval entries use `.ival`, never `.name`).
    depth, begin = 0, None
    for i, c in enumerate(body):
        if c == "{":
            depth += 1
            if depth == 2:
                begin = i
        elif c == "}":
            if depth == 2 and begin is not None:
                entry = body[begin : i + 1]
                name = re.search(r"\.name\s*=\s*(NULL|\"([^\"]*)\")", entry)
                if name is None:
                    raise SystemExit(f"entry without .name at {start + begin}")
                if name.group(1) == "NULL":
                    return entries
                alias = re.search(r"\.alias\s*=\s*\"([^\"]*)\"", entry)
                kind = re.search(r"\.type\s*=\s*(\w+)", entry)
                entries.append(
                    (name.group(2), alias and alias.group(1), kind and kind.group(1))
                )
            depth -= 1
    del end
    raise SystemExit("table without its NULL entry")


def rust_list(names: list[str]) -> str:
    return "".join(f'    "{n}",\n' for n in names)


def main() -> None:
    repo = sys.argv[1]
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", f"{TAG}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    main_table = table(show(repo, "options.c"), "struct fio_option fio_options[FIO_MAX_OPTS]")
    names: list[str] = []
    aliases: list[tuple[str, str]] = []
    deprecated: list[str] = []
    for name, alias, kind in main_table:
        if kind == "FIO_OPT_DEPRECATED":
            deprecated.append(name)
            continue
        if name not in names:
            names.append(name)
        if alias and (alias, name) not in aliases:
            aliases.append((alias, name))
    engines: list[tuple[str, str]] = []
    files = subprocess.run(
        ["git", "-C", repo, "ls-tree", "--name-only", TAG, "engines/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    sources = {f: show(repo, f) for f in files if f.endswith(".c") and f not in SKIP_ENGINE_FILES}
    # Option tables by file and name: a file's own table, else one another file exports
    # (glusterfs.c's gfapi_options serves two files, librpma_fio.c's two more).
    tables: dict[tuple[str, str], list[tuple[str, str | None, str | None]]] = {}
    for file, text in sources.items():
        for m in re.finditer(r"struct fio_option (\w+)\[\] = \{", text):
            tables[(file, m.group(1))] = table(text[m.start() :], m.group(0))
    for file, text in sorted(sources.items()):
        # Each `struct ioengine_ops` with `.options = TABLE`: its engine name reads TABLE.
        for m in re.finditer(r"struct ioengine_ops \w+ = \{(.*?)\n\};", text, re.S):
            ops = m.group(1)
            name = re.search(r"\.name\s*=\s*\"([^\"]+)\"", ops)
            opts = re.search(r"\.options\s*=\s*(\w+)", ops)
            if not (name and opts):
                continue
            own = tables.get((file, opts.group(1)))
            found = own or [t for (f, n), t in tables.items() if n == opts.group(1)]
            entries = own if own else found[0] if len(found) == 1 else None
            if entries is None:
                raise SystemExit(f"{file}: option table {opts.group(1)} not found once")
            for option, alias, _ in entries:
                for n in [option] + ([alias] if alias else []):
                    if (name.group(1), n) not in engines:
                        engines.append((name.group(1), n))
    out = f"""//! The option names of fio 3.33, generated: do not edit.
//!
//! Source: fio (https://github.com/axboe/fio), tag fio-3.33 (commit {commit}):
//! the `.name` and `.alias` fields of every entry of `fio_options[]` in options.c (all
//! `#ifdef` branches; [`FIO_DEPRECATED`]: the entries of type `FIO_OPT_DEPRECATED`, which fio
//! refuses), and of the option table (`.options`) of every engine under engines/ (names
//! and aliases, by the engine's `ioengine_ops` name). Names only.
//! Extracted by `scripts/fio-option-names.py <fio clone>`, which writes this file.

/// Every option name of fio's main table (options.c `fio_options[]`), in table order.
pub const FIO_OPTIONS: &[&str] = &[
{rust_list(names)}];

/// `(alias, name)`: each `.alias` of options.c's table and the option it names.
pub const FIO_ALIASES: &[(&str, &str)] = &[
{"".join(f'    ("{a}", "{n}"),{chr(10)}' for a, n in aliases)}];

/// Options of type `FIO_OPT_DEPRECATED`: fio 3.33 prints "Option <name> is deprecated" and
/// fails the job.
pub const FIO_DEPRECATED: &[&str] = &[
{rust_list(deprecated)}];

/// `(ioengine, option)`: the options (names and aliases) of each engine's own table, which
/// fio reads only when the job runs that engine.
pub const FIO_ENGINE_OPTIONS: &[(&str, &str)] = &[
{"".join(f'    ("{e}", "{n}"),{chr(10)}' for e, n in engines)}];
"""
    OUT.write_text(out)
    print(f"{OUT}: {len(names)} names, {len(aliases)} aliases, {len(deprecated)} deprecated, "
          f"{len(engines)} engine options")


if __name__ == "__main__":
    main()
