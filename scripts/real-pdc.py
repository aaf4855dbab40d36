#!/usr/bin/env python3
"""Run the real PDC check of issue #11 (point 5) and print its figures: (a) how well
`vmio serve`'s `cache = "pdc"` detects the journal of a real ext4 in a TCG guest (precision
and recall of the predicted range against debugfs's journal extents, commits before
detection), (b) what it changes on this host's storage when the guest's trace is replayed
by fio, alternately with cache = writeback and pdc; see python/vmio/real/pdc.py.

  PYTHONPATH=python scripts/real-pdc.py --json tests/real_pdc_figures.json [--rounds 3]
      [--workdir DIR]

Exit status 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import guest  # noqa: E402
from vmio.real import pdc as realpdc  # noqa: E402


def version(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return (r.stdout or r.stderr).strip().splitlines()[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    p.add_argument("--rounds", type=int, default=3, help="(writeback, pdc) replay pairs")
    p.add_argument(
        "--workdir", type=Path, metavar="DIR", help="keep the image and traces here (default: temp)"
    )
    args = p.parse_args()
    if args.rounds < 1:
        print(f"real-pdc: --rounds {args.rounds}: must be at least 1", file=sys.stderr)
        return 2
    for why in (guest.missing(), realpdc.host_tools_missing()):
        if why is not None:
            print(f"real-pdc: {why}", file=sys.stderr)
            return 2
    if args.json is not None and args.json.exists():
        print(f"real-pdc: {args.json} exists; remove it first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="real-pdc-") as tmp:
        workdir = args.workdir or Path(tmp)
        (workdir / "guest").mkdir(parents=True, exist_ok=True)
        (workdir / "replay").mkdir(exist_ok=True)
        g = realpdc.run_guest(workdir / "guest", guest.run_guest)
        print(realpdc.detection_table(g.detection))
        print(f"({g.seconds:.0f} s; guest under TCG: no timings)\n")
        t0 = time.monotonic()
        runs = realpdc.alternate(workdir / "replay", g.trace, args.rounds)
        print(realpdc.replay_table(runs))
        host = realpdc.host_description(workdir)
        print(f"({time.monotonic() - t0:.0f} s) on {host}")
    if args.json is not None:
        found = guest.kernel()
        figures = {
            "how": (
                "PYTHONPATH=python scripts/real-pdc.py --json tests/real_pdc_figures.json "
                f"--rounds {args.rounds}: vmio.real.pdc (its module doc: the workload, the "
                "figures, how each is measured)"
            ),
            "measured": "; ".join(
                [
                    time.strftime("%Y-%m-%d", time.gmtime()),
                    version(["qemu-system-x86_64", "--version"]),
                    version(["fio", "--version"]),
                    version(["mke2fs", "-V"]),
                    f"guest kernel {found[0].name if found else '?'}",
                    host,
                ]
            ),
            "workload": asdict(realpdc.WORKLOAD),
            "detection": asdict(g.detection),
            "replays": [asdict(r) for r in runs],
            "replay_means": realpdc.summary(runs),
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
