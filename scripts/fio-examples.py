#!/usr/bin/env python3
"""Run `vmio sim` on each of fio's example job files and print the outcome table.

fio's examples are those of the installed fio (Debian's `fio-examples` package, fio 3.33, puts
its 86 job files under /usr/share/doc/fio/examples; `--examples DIR` for others; `.fio.gz`
files are read gunzipped). Each
runs unchanged on a small stack (one VM, one NVMe-class SSD, an ext4 filesystem on its
disk: the stack below) except for one edit: `runtime=CAP` in every section (a bound on
SIMULATED time, so that jobs that never end in fio either, `time_based` ones, and very large
ones end; fio's own `runtime` semantics: the job stops at CAP whatever its size). A run is
bounded in wall time too (`--timeout`).

Outcomes:
  ran      exit 0 and fio's JSON on stdout
  refused  non-zero exit with one error line naming the file, line and option or engine
           and what vmio accepts instead (vmio's refusal format)
  failed   anything else: a crash, a traceback, several lines, no JSON, a timeout

Usage: scripts/fio-examples.py [--examples DIR] [--cap 500ms] [--timeout 120] [--json OUT]
The exit status is 0 when at least 95 % of the examples ran or were refused (check (a)).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Where fio-examples puts them (Debian, Ubuntu); the first that exists is used.
EXAMPLE_DIRS = (Path("/usr/share/doc/fio/examples"), Path("/usr/share/doc/fio-examples"))


def default_examples() -> Path:
    return next((d for d in EXAMPLE_DIRS if d.is_dir()), EXAMPLE_DIRS[0])


STACK = """\
# fio examples' stack: one VM on one SSD, with an ext4 filesystem on its disk.
[host]
cores = 4
memory = "8g"

[[device]]
name = "nvme0"
model = "ssd"

[[volume]]
name = "v"
layout = "single"
devices = ["nvme0"]

[[vm]]
name = "vm1"
vcpus = 4
memory = "4g"

[[vm.disk]]
name = "vdb"
volume = "v"
size = "200g"
cache = "none"

[vm.disk.filesystem]
type = "ext4"
mount = "/mnt"
"""


def examples(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.name.endswith(".fio") or p.name.endswith(".fio.gz")
    )


def job_text(path: Path) -> str:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def capped(text: str, name: str, cap: str) -> str:
    """The job file with `runtime=cap` in every section (vmio's own study edit)."""
    from vmio import _native

    return _native.set_job_option(text, name, None, "runtime", cap)


def run_one(path: Path, workdir: Path, stack: Path, cap: str, timeout: float) -> dict:
    name = path.name.removesuffix(".gz")
    row = {"file": name}
    try:
        text = capped(job_text(path), name, cap)
    except Exception as e:  # a job file the editor cannot read: the run would refuse it too
        text = job_text(path)
        row["edit"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    job = workdir / name
    job.write_text(text)
    cmd = [
        sys.executable,
        "-m",
        "vmio",
        "sim",
        "--stack",
        str(stack),
        str(job),
        "--output-format",
        "json",
    ]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)
    except subprocess.TimeoutExpired:
        row.update(outcome="failed", reason=f"no answer within {timeout:g} s (wall)")
        return row
    row["seconds"] = round(time.monotonic() - t0, 1)
    errors = [
        line
        for line in p.stderr.splitlines()
        if line.strip() and not line.startswith("vmio: note:")
    ]
    if p.returncode == 0:
        try:
            out = json.loads(p.stdout)
            row.update(outcome="ran", reason=f"{len(out.get('jobs', []))} job(s)")
        except json.JSONDecodeError:
            row.update(outcome="failed", reason="exit 0 without JSON on stdout")
        return row
    if len(errors) == 1 and "Traceback" not in p.stderr and "accepted" in errors[0]:
        row.update(outcome="refused", reason=errors[0])
    else:
        reason = " | ".join(errors[-3:]) or f"exit {p.returncode} without a message"
        row.update(outcome="failed", reason=f"exit {p.returncode}: {reason}")
    return row


def table(rows: list[dict]) -> str:
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("ran", "refused", "failed")}
    n = len(rows)
    share = 100 * (n - counts["failed"]) / max(n, 1)
    lines = [
        f"fio examples: {n} files; ran {counts['ran']}, refused {counts['refused']}, "
        f"failed {counts['failed']}; ran or refused {share:.1f} %",
        "",
        "| file | outcome | detail |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        detail = r["reason"].replace("|", "\\|")
        lines.append(f"| {r['file']} | {r['outcome']} | {detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=Path, default=default_examples())
    ap.add_argument("--cap", default="500ms", help="runtime= set in every section (simulated)")
    ap.add_argument("--timeout", type=float, default=120.0, help="wall seconds per example")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    ap.add_argument("only", nargs="*", help="run only these example names")
    args = ap.parse_args(argv)
    if not args.examples.is_dir():
        print(
            f"fio-examples: {args.examples} is not a directory; install fio-examples",
            file=sys.stderr,
        )
        return 2
    files = [p for p in examples(args.examples) if not args.only or p.name in args.only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="vmio-fio-examples-") as tmp:
        work = Path(tmp)
        stack = work / "stack.toml"
        stack.write_text(STACK)
        for path in files:
            # Each example in a directory of its own, as a user would run it: the log files
            # one writes (write_lat_log=prio-run.log ...) never meet another's.
            own = work / path.name.removesuffix(".gz").removesuffix(".fio")
            own.mkdir()
            row = run_one(path, own, stack, args.cap, args.timeout)
            print(
                f"{row['file']}: {row['outcome']} ({row.get('seconds', '-')} s)",
                file=sys.stderr,
                flush=True,
            )
            rows.append(row)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    failed = sum(r["outcome"] == "failed" for r in rows)
    return 0 if len(rows) - failed >= 0.95 * len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
