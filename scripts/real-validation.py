#!/usr/bin/env python3
"""Record a `vmio validate` run for tests/test_real_validation.py (docs/validation.md).

    vmio validate /work/val/target.tmp -o run1                  # calibration + held-out
    vmio validate ... --calibration run1/calibration -o run2     # (optionally) the raid0 part
    python3 scripts/real-validation.py run1 [--raid0 run2/raid0] [--seed 1] [--runtime 3] \
        > tests/real_validation_figures.json
    python3 scripts/real-validation.py --resimulate tests/real_validation_figures_offgrid.json

`--resimulate RECORD` keeps a record's real figures and rewrites, in place, what the
simulator predicts for them today (its bandwidths, latencies, summary line and percentiles):
for a deliberate change of the simulator's figures, said in its commit.

The file keeps the calibrated stack, the family's seed, every point's real median and spread
(bandwidth, IOPS, mean and p99 latency), the clat p50/p99/p99.9 of each point (real median,
spread, simulated: record version 2) and what the simulator predicted then; the test
simulates the workloads again and checks the comparison is still the recorded one. Records of
family 2 (the default, off the battery's grid) go to tests/real_validation_figures_offgrid.json
(without --raid0 when the run had none); tests/real_validation_figures.json keeps the seed-5
run of family 1.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from vmio.real import compare, validate

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
p.add_argument(
    "out", type=Path, nargs="?", help="a vmio validate output directory (with calibration/)"
)
p.add_argument("--resimulate", type=Path, help="a record to simulate again (rewritten in place)")
p.add_argument("--raid0", type=Path, help="a vmio validate raid0/ directory, same calibration")
p.add_argument("--seed", type=int, default=1)
p.add_argument("--runtime", type=float, default=3.0)
a = p.parse_args()
if (a.out is None) == (a.resimulate is None):
    p.error("give a vmio validate output directory or --resimulate RECORD (one of the two)")
if a.resimulate is not None:
    doc = json.loads(a.resimulate.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        for part, rec in doc["parts"].items():
            d = Path(tmp) / part
            c = validate.recorded_comparison(doc, part, d)
            rec["sim"] = {
                "/".join(v for _, v in k): validate._metrics_doc(m)
                for k, m in sorted(compare.load(d).items())
            }
            rec["summary"] = compare.summary_line(c)
            for t in rec.get("tails", []):
                sim = validate._percentiles(d / f"{t['point']}.json")
                t["sim"] = sim.get(t["direction"], {}).get(t["label"])
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    a.resimulate.write_text(text, encoding="utf-8")
    sys.exit(0)
doc = validate.record(a.out, a.raid0, a.seed, a.runtime)
json.dump(doc, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
