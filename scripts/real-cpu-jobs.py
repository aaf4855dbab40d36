#!/usr/bin/env python3
"""Run N-1, N and N+1 concurrent CPU-bound jobs (bzip2 with fixed work) natively on this
machine's N cores, measure each job's wall time, predict the same with the simulator
(hypervisor native, [cpu] model cfs) and print measured vs predicted slowdowns with the
run-to-run spread (vmio.real.cpu has the method; docs/cpu.md).

  PYTHONPATH=python scripts/real-cpu-jobs.py [--reps 5] [--seconds 6] [--json PATH]
  PYTHONPATH=python scripts/real-cpu-jobs.py --from tests/real_cpu_figures.json [--json PATH]
      (no measurement: the recorded runs, predicted again by this build's simulator)

With --corun: bzip2 -9 and the project's memory-bound triad loop (C, built with the system
cc), each alone and beside the other on this machine's cores, in rounds; the host's
[host.cache] measured here (caches from /sys, memory bandwidth and latency from the loop);
around each round a pointer chase beside the loop tells whether the two cores really share
the L3 (a VM's sysfs cannot); measured vs predicted slowdowns, each round predicted with the
L3 it ran on (vmio.real.corun has the method; vmio.real.hostcache the host profile):

  PYTHONPATH=python scripts/real-cpu-jobs.py --corun [--rounds 5] [--seconds 4] [--json PATH]
  PYTHONPATH=python scripts/real-cpu-jobs.py --from tests/real_cpu_figures_corun.json

Exit status 2 when bzip2 (or, with --corun, cc) is missing or an argument is wrong.
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

from vmio.real import corun, hostcache
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


def json_exists(path: Path | None) -> bool:
    """--json names a file that exists (said in one line; nothing is overwritten)."""
    if path is not None and path.exists():
        print(f"real-cpu-jobs: {path} exists; remove it first", file=sys.stderr)
        return True
    return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="quiet repetitions wanted (default 5)")
    p.add_argument("--budget", type=float, default=900, help="most seconds of measuring")
    p.add_argument("--seconds", type=float, default=6.0, help="one job's time alone (about)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    p.add_argument("--from", dest="recorded", type=Path, metavar="PATH",
                   help="re-predict a figures file instead of measuring")  # fmt: skip
    p.add_argument("--corun", action="store_true", help="bzip2 beside the memory-bound loop")
    p.add_argument("--rounds", type=int, default=corun.MIN_ROUNDS, help="--corun's rounds")
    a = p.parse_args()
    if a.corun or (a.recorded is not None and "samples" in json.loads(a.recorded.read_text())):
        return corun_main(a)
    if a.reps < 1 or a.seconds <= 0:
        print("real-cpu-jobs: --reps must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    if json_exists(a.json):
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


def calibrate(binary: Path, data: Path, seconds: float) -> tuple[int, int]:
    """bzip2's repeats and the triad's passes that take about `seconds` of CPU each."""
    bz = realcpu.run_concurrent(hostcache.pinned(realcpu.job_argv(data, 1), 0), 1).jobs[0].cpu_s
    r = subprocess.run(
        hostcache.pinned([str(binary), "triad", "10"], 1),
        capture_output=True,
        text=True,
        check=True,
    )
    per_pass = hostcache.parse_output(r.stdout)["seconds"] / 10
    return max(1, round(seconds / bz)), max(1, round(seconds / per_pass))


def corun_argv(binary: Path, data: Path, repeats: int, passes: int) -> dict[str, list[str]]:
    """The measured programs and their co-runners (CO_WORK times the pair's work)."""
    pin = hostcache.pinned
    core = corun.CORE
    co = corun.CO_WORK * 2
    return {
        "bzip2": pin(realcpu.job_argv(data, repeats), core["bzip2"]),
        "triad": pin([str(binary), "triad", str(passes)], core["triad"]),
        "bzip2/co": pin(realcpu.job_argv(data, repeats * co), core["bzip2"]),
        "triad/co": pin([str(binary), "triad", str(passes * co)], core["triad"]),
    }


def corun_main(a: argparse.Namespace) -> int:
    if a.rounds < 1 or a.seconds <= 0:
        print("real-cpu-jobs: --rounds must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    if json_exists(a.json):
        return 2
    if a.recorded is not None:
        fig = json.loads(a.recorded.read_text(encoding="utf-8"))
        samples = corun.samples_of(fig)
        rounds = fig["rounds_used"]
        keys = (
            "how",
            "measured",
            "cores",
            "chase_beside",
            "chase_sweep",
            "probes",
            "host_cache",
            "host",
            "work",
        )
        meta = {k: fig.get(k) for k in keys}
    else:
        why = realcpu.program_missing() or hostcache.cc_missing()
        if why is not None:
            print(f"real-cpu-jobs: {why}", file=sys.stderr)
            return 2
        cores = os.cpu_count() or 1
        if cores < 2:
            print("real-cpu-jobs: --corun needs 2 cores (one per program)", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="real-corun-") as tmp:
            work = Path(tmp)
            binary = hostcache.build(work)
            data = realcpu.make_input(work / "input.txt", INPUT_BYTES, SEED)
            quick = a.seconds < 1
            cache, host = hostcache.measure(
                binary,
                5 if quick else 20,
                10**6 if quick else hostcache.CHASE_LOADS,
                2 * 10**5 if quick else hostcache.CURVE_LOADS,
            )
            host["uptime"] = corun.uptime()
            repeats, passes = calibrate(binary, data, a.seconds)
            argv = corun_argv(binary, data, repeats, passes)
            print(f"[host.cache] measured: {json.dumps(cache)}")
            curve = ", ".join(f"{mib} MiB {ns:.0f} ns" for mib, ns in host["llc_curve"])
            print(
                f"last level: {host['llc_bytes'] >> 20} MiB of sysfs's "
                f"{host['llc_sysfs_bytes'] >> 20} MiB (chase: {curve}; memory "
                f"{host['memory']['latency_ns']:.0f} ns)"
            )
            print(
                f"bzip2 input {INPUT_BYTES} bytes x {repeats}, triad {passes} passes; "
                f"{a.rounds} rounds (more, within {a.budget:g} s, until {a.rounds} had other "
                f"processes below {corun.QUIET_OTHER} cores)"
            )
            window = corun.window_mib(cache)
            probe_loads = 10**5 if quick else corun.PROBE_LOADS
            probes: list = []

            def probe_round() -> list[dict]:
                return corun.probe(binary, argv["triad/co"], window, probe_loads, work)

            load = os.getloadavg()[0]
            t0 = time.monotonic()
            samples = corun.measure(argv, a.rounds, a.budget, work, print, probe_round, probes)
            took = time.monotonic() - t0
            chase = corun.chase_beside(
                binary, argv["triad/co"], 8, 2 * 10**6 if quick else 2 * 10**7, work
            )
            sweep = corun.chase_sweep(
                binary,
                argv["triad/co"],
                (2,) if quick else corun.SWEEP_MIB,
                10**6 if quick else 4 * 10**6,
                work,
            )
        rounds = corun.select(samples, a.rounds)
        meta = {
            "how": (
                f"PYTHONPATH=python scripts/real-cpu-jobs.py --corun --rounds {a.rounds} "
                f"--seconds {a.seconds:g} --budget {a.budget:g} --json "
                "tests/real_cpu_figures_corun.json: vmio.real.corun (its module doc: the "
                "programs, the rounds, how each figure is measured and predicted) and "
                "vmio.real.hostcache ([host.cache] from /sys and the triad loop)"
            ),
            "measured": "; ".join(
                [
                    time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    version(["bzip2", "--help"]),
                    version(["cc", "--version"]),
                    cpu_model(),
                    f"{cores} cores",
                    f"Linux {os.uname().release}",
                    f"load average before {load:.2f}",
                    f"{took:.0f} s",
                ]
            ),
            "cores": cores,
            "chase_beside": chase,
            "chase_sweep": sweep,
            "probes": probes,
            "host_cache": cache,
            "host": host,
            "work": {
                "bzip2": {"bytes": INPUT_BYTES, "seed": SEED, "repeats": repeats},
                "triad": {"passes": passes, "elements": hostcache.ELEMENTS},
            },
        }
    cache = meta["host_cache"]
    sums = corun.summary(samples, rounds)
    ipc = corun.triad_ipc(samples, rounds, meta["work"]["triad"]["passes"], cache["clock_mhz"])
    decision = corun.decide(meta, rounds)
    meta["l3"] = decision
    try:
        work_s = {p: sums[p].cpu_alone_s for p in corun.PROGRAMS}
        predicted = corun.predict_decided(meta["cores"], cache, work_s, ipc, decision)
    except VmioError as e:
        print(f"real-cpu-jobs: no prediction: {e}", file=sys.stderr)
        predicted = None
    print(f"rounds used: {rounds} (of {len({s.round for s in samples})}); triad ipc {ipc:.4f}")
    for r in rounds:
        print(f"  round {r}: {corun._one(samples, r, 'bzip2', 'alone').uptime}")
    print(corun.placement_text(decision))
    print(corun.table(sums, predicted))
    if predicted is not None:
        print(corun.round_table(samples, predicted, decision))
        meta["by_placement"] = corun.by_placement(samples, predicted, decision)
        print("the rounds by the L3 they ran on:")
        print(corun.placement_table(meta["by_placement"]))
    if (c := meta.get("chase_beside")) is not None:
        print(
            f"a {c['mib']} MiB pointer chase on core 0: {c['alone']:.1f} ns a load alone, "
            f"{c['together']:.1f} beside the triad, {c['alone again']:.1f} alone again"
        )
    for c in meta.get("chase_sweep") or []:
        again = f", {c['alone again']:.1f} alone again" if "alone again" in c else ""
        print(
            f"a {c['mib']} MiB chase on core 0: {c['alone']:.1f} ns alone, "
            f"{c['beside the triad']:.1f} beside the triad, {c['beside a chase']:.1f} beside "
            f"a {corun.REUSE_MIB} MiB chase on core 1{again}"
        )
    print(meta["measured"])
    if a.json is not None:
        text = json.dumps(corun.figures(meta, samples, rounds, predicted), indent=2) + "\n"
        a.json.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
