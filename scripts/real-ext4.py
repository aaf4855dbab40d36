#!/usr/bin/env python3
"""Run the real ext4 check of issue #10 (item 6) and print its figures, then the guest
model's on the same workload side by side (each within 25 %, the journal at the same blocks);
see python/vmio/real/guest.py for the workload and the analysis, tests/guest.py for the guest.

  PYTHONPATH=python scripts/real-ext4.py --json real-ext4.json [--workdir DIR]

The JSON holds every figure (journal extents, journal share, flushes per fsync, commit sizes,
writes by region, what each commit logs, the unmount's writes) and the workload with its fio
job file. Exit status 2 when a tool is missing, 1 when a model figure misses.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import guest  # noqa: E402
from vmio.real import guest as realguest  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, metavar="PATH", help="write the analysis here")
    p.add_argument(
        "--workdir", type=Path, metavar="DIR", help="keep the image and trace here (default: temp)"
    )
    args = p.parse_args()
    for why in (guest.missing(), realguest.host_tools_missing()):
        if why is not None:
            print(f"real-ext4: {why}", file=sys.stderr)
            return 2
    if args.json is not None and args.json.exists():
        print(f"real-ext4: {args.json} exists; remove it first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="real-ext4-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        r = realguest.run(workdir, guest.run_guest, json_path=args.json)
    print(realguest.table(r.analysis))
    print(f"({r.seconds:.0f} s; guest under TCG: no timings)\n")
    rows = realguest.compare(realguest.Figures.of_analysis(r.analysis), realguest.model())
    print(realguest.side_by_side(rows))
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
