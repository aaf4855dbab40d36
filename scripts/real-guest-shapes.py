#!/usr/bin/env python3
"""Run the real request-shape check of the guest model (docs/guest.md, "Request shapes
checked for real"): a TCG guest runs FileBench-like fio jobs and a buffered 4 KiB writer on
ext4 served by `vmio serve --trace`; per workload, the server's request sizes and the guest
block layer's merges, then the model's on the same jobs side by side; see
python/vmio/real/shapes.py for the workloads and what is compared.

  PYTHONPATH=python scripts/real-guest-shapes.py [--json tests/real_guest_shapes_figures.json]
      [--rounds N] [--workdir DIR] [--from JSON]

--rounds runs the real guest N times (the real run-to-run spread: a model mean passes within
25 % of the rounds' range). --from reads the real figures of an earlier run (no QEMU) and
runs only the model. The JSON
holds the guest's queue settings, each workload's job file, the server's request sizes and
the diskstats deltas (and the model's figures when the model has them). Exit status 2 when a
tool is missing, 1 when a model mean misses by more than 25 %, 3 when the model reports no
request shapes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from vmio.real import guest as realguest  # noqa: E402
from vmio.real import (
    qemu,  # noqa: E402
    shapes,  # noqa: E402
)


def _taken(seconds: list[float]) -> dict:
    """When and on what the real figures were taken."""
    found = qemu.kernel()
    version = subprocess.run(
        ["qemu-system-x86_64", "--version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": found[0].name if found else None,
        "qemu": version[0] if version else None,
        "accel": "tcg",
        "guest_memory": shapes.GUEST_MEMORY,
        "seconds": [round(x) for x in seconds],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    p.add_argument("--workdir", type=Path, metavar="DIR", help="keep the image and trace here")
    p.add_argument("--from", dest="source", type=Path, metavar="JSON", help="real figures")
    p.add_argument("--rounds", type=int, default=1, metavar="N", help="real runs (default 1)")
    args = p.parse_args()
    taken = None
    if args.source is not None:
        source = json.loads(args.source.read_text(encoding="utf-8"))
        reals = [shapes.Real.of_json(x) for x in source["real"]]
        taken = source.get("taken")
    else:
        for why in (qemu.missing(fio=True), realguest.host_tools_missing()):
            if why is not None:
                print(f"real-guest-shapes: {why}", file=sys.stderr)
                return 2
        reals = []
        for k in range(max(1, args.rounds)):
            with tempfile.TemporaryDirectory(prefix="real-shapes-") as tmp:
                workdir = (args.workdir / f"round{k}") if args.workdir else Path(tmp)
                workdir.mkdir(parents=True, exist_ok=True)
                real, _ = shapes.run_real(workdir)
            print(f"round {k}: {real.seconds:.0f} s (guest under TCG: no timings)")
            reals.append(real)
    print("guest queue: " + ", ".join(f"{k}={v}" for k, v in reals[0].queue.items()))
    models: dict[str, shapes.ModelFigures] = {}
    missing = None
    for s in shapes.WORKLOADS:
        try:
            models[s.name] = shapes.model(s)
        except shapes.ModelMissing as e:
            missing = str(e)
            break
    rows = []
    for i, ph in enumerate(reals[0].phases):
        m = models.get(ph.name)
        if m is not None:
            rows.append(shapes.compare([r.phases[i] for r in reals], m))
        for k, r in enumerate(reals):
            g, q = r.phases[i].guest, r.phases[i]
            print(
                f"\n{ph.name} (round {k}): server {sum(q.host_read_sizes.values())} reads, "
                f"{sum(q.host_write_sizes.values())} writes, {q.host_flushes} flushes; guest "
                f"{g.reads} reads ({g.read_merges} merged), {g.writes} writes "
                f"({g.write_merges} merged), mean {g.mean_bytes / 1024:.1f} KiB"
            )
        print(shapes.side_by_side_histogram(ph.host_sizes, m.host_request_sizes if m else None))
    if rows:
        print("\n" + shapes.table(rows))
    if missing is not None:
        print(f"\nmodel: {missing}", file=sys.stderr)
    if args.json is not None:
        doc = {
            "taken": taken or _taken([r.seconds for r in reals]),
            "workloads": {s.name: s.job_file() for s in shapes.WORKLOADS},
            "real": [r.to_json() for r in reals],
            "model": {k: m.to_json() for k, m in models.items()},
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if missing is not None:
        return 3
    return 0 if all(r.ok and r.guest_ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
