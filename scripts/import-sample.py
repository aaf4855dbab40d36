#!/usr/bin/env python3
"""Run `vmio import libvirt` over every domain XML of a directory the user gives (libvirt's
own tests/qemuxmlconfdata, virt-manager's tests/data, a host's /etc/libvirt/qemu), and
`vmio import qemu` over every `*.args` file (a QEMU command line as libvirt's tests keep it:
environment assignments, the program, options, lines joined by backslash-newline), and count
the outcomes: imported (a stack the simulator accepts), refused with one error line (exit 2),
or crashed (any other exit, a traceback, or more than one line on stderr).

    python3 scripts/import-sample.py DIR [--limit N] [--show refused|crashed|imported]

Files without a <domain element are skipped (pools, networks, capabilities). Each import runs
in this process through the command's own function (vmio.cli.main), so a crash is any
exception that escapes it; nothing is written (the stack goes to a discarded stdout).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import sys
import traceback
from collections import Counter
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--show", choices=("imported", "refused", "crashed"), action="append")
    args = ap.parse_args()
    from vmio.cli import main as vmio

    files = sorted(p for p in args.dir.rglob("*.xml") if p.is_file())
    files = [p for p in files if "<domain" in p.read_text(errors="replace")]
    files += sorted(p for p in args.dir.rglob("*.args") if p.is_file())
    if args.limit:
        files = files[: args.limit]
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for p in files:
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                if p.suffix == ".args":
                    line = p.read_text(errors="replace").replace("\\\n", " ")
                    rc = vmio(["import", "qemu", "--", *shlex.split(line)])
                else:
                    rc = vmio(["import", "libvirt", str(p)])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 - counted as a crash, with its traceback
            rc = -1
            err.write(traceback.format_exc())
        lines = err.getvalue().splitlines()
        if rc == 0:
            kind = "imported"
        elif rc == 2 and len(lines) == 1 and lines[0].startswith("vmio: error: "):
            kind = "refused"
            msg = lines[0].split(": ", 3)[-1]
            reasons[msg.split(";")[0][:70]] += 1
        else:
            kind = "crashed"
        counts[kind] += 1
        if args.show and kind in args.show:
            print(f"{kind}: {p}: {lines[-1] if lines else ''}")
    total = sum(counts.values())
    ok = counts["imported"] + counts["refused"]
    print(
        f"{total} domain XMLs and command lines: {counts['imported']} imported, "
        f"{counts['refused']} refused with one line, {counts['crashed']} crashed "
        f"({100 * ok / max(total, 1):.1f} % imported or cleanly refused)"
    )
    for r, n in reasons.most_common():
        print(f"  refused x{n}: {r}")
    return 0 if counts["crashed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
