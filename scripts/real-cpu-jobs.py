#!/usr/bin/env python3
"""Run N-1, N and N+1 concurrent CPU-bound jobs (bzip2 with fixed work) natively on this
machine's N cores, measure each job's wall time, predict the same with the simulator
(hypervisor native, [cpu] model cfs) and print measured vs predicted slowdowns with the
run-to-run spread (issue #12 item 6; vmio.real.cpu has the method).

  PYTHONPATH=python scripts/real-cpu-jobs.py [--reps 5] [--seconds 6] [--json PATH]
  PYTHONPATH=python scripts/real-cpu-jobs.py --from tests/real_cpu_figures.json [--json PATH]
      (no measurement: the recorded runs, predicted again by this build's simulator)

Exit status 2 when bzip2 is missing or an argument is wrong.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vmio.real import cpu as realcpu
from vmio.sim import VmioError

INPUT_BYTES = 8 << 20
SEED = 1


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def version(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return ((r.stderr or r.stdout).strip().splitlines() or ["?"])[0]


def predict(cores: int, sums: list[realcpu.Summary]) -> realcpu.Prediction | None:
    try:
        return realcpu.predict_runs(cores, sums)
    except VmioError as e:
        print(f"real-cpu-jobs: no prediction: {e}", file=sys.stderr)
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="quiet repetitions wanted (default 5)")
    p.add_argument("--budget", type=float, default=900, help="most seconds of measuring")
    p.add_argument("--seconds", type=float, default=6.0, help="one job's time alone (about)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    p.add_argument("--from", dest="recorded", type=Path, metavar="PATH",
                   help="re-predict a figures file instead of measuring")  # fmt: skip
    a = p.parse_args()
    if a.reps < 1 or a.seconds <= 0:
        print("real-cpu-jobs: --reps must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    if a.json is not None and a.json.exists():
        print(f"real-cpu-jobs: {a.json} exists; remove it first", file=sys.stderr)
        return 2
    if a.recorded is not None:
        meta = json.loads(a.recorded.read_text(encoding="utf-8"))
        runs = realcpu.runs_of(meta)
        meta = {k: meta[k] for k in ("how", "measured", "cores", "input")}
    else:
        if (why := realcpu.program_missing()) is not None:
            print(f"real-cpu-jobs: {why}", file=sys.stderr)
            return 2
        cores = os.cpu_count() or 1
        ks = list(range(max(1, cores - 1), cores + 2))
        if ks[0] != 1:
            ks.insert(0, 1)
        with tempfile.TemporaryDirectory(prefix="real-cpu-") as tmp:
            data = realcpu.make_input(Path(tmp) / "input.txt", INPUT_BYTES, SEED)
            sha = hashlib.sha256(data.read_bytes()).hexdigest()
            once = realcpu.run_concurrent(realcpu.job_argv(data, 1), 1).jobs[0].wall_s
            repeats = max(1, round(a.seconds / once))
            argv = realcpu.job_argv(data, repeats)
            print(
                f"input {INPUT_BYTES} bytes x {repeats}; K = {ks}, until {a.reps} quiet "
                f"repetitions (at most {a.budget:g} s)"
            )
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            runs = realcpu.measure_quiet(argv, ks, a.reps, a.budget)
            took = time.monotonic() - t0
        meta = {
            "how": (
                f"PYTHONPATH=python scripts/real-cpu-jobs.py --reps {a.reps} --budget "
                f"{a.budget:g} --seconds {a.seconds:g} --json tests/real_cpu_figures.json: "
                "vmio.real.cpu (its module doc: the jobs, the figures, how each is measured "
                "and predicted)"
            ),
            "measured": "; ".join(
                [
                    time.strftime("%Y-%m-%d", time.gmtime()),
                    version(["bzip2", "--help"]),
                    cpu_model(),
                    f"{cores} cores",
                    f"Linux {os.uname().release}",
                    f"load average before {load:.2f}",
                    f"{took:.0f} s",
                ]
            ),
            "cores": cores,
            "input": {
                "bytes": INPUT_BYTES,
                "seed": SEED,
                "sha256": sha,
                "repeats": repeats,
                "argv": [*realcpu.PROGRAM, "INPUT", f"(x{repeats})"],
            },  # fmt: skip
        }
    cores = meta["cores"]
    chosen = realcpu.select(runs)
    reps = len({r.rep for r in runs})
    print(
        f"{len(realcpu.quiet_reps(runs))} of {reps} repetitions quiet (others below "
        f"{realcpu.QUIET_CORES} cores); the figures are from "
        + ("those" if len(chosen) < len(runs) else "all of them")
    )
    sums = realcpu.summary(chosen)
    predicted = predict(cores, sums)
    print(realcpu.table(sums, predicted, cores))
    print(meta["measured"])
    if a.json is not None:
        text = json.dumps(realcpu.figures(runs, predicted, meta), indent=2) + "\n"
        a.json.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
