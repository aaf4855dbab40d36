"""bzip2 -9 and a memory-bound loop, alone and together on this machine's cores: each one's
slowdown measured and predicted by the simulator's shared-cache and memory-bus contention
(`[host.cache]` measured here by `vmio.real.hostcache`; crates/vmio-core/src/cpu/
contention.rs).

The programs (fixed work each):

```text
bzip2  = `bzip2 -9 -c input x repeats` (vmio.real.cpu's job: pseudo-random words, 8 MiB)
triad  = triad.c's `triad PASSES`: a[i] = b[i] + s * c[i] over 3 x 128 MiB, far beyond the
         last-level cache: every element moves 32 bytes between memory and the core
         (`vmio.real.hostcache`). Why C and not numpy: numpy's `a[:] = b + s * c` makes a
         temporary array and two passes per triad (s * c, then + b), so its traffic per
         element depends on numpy's evaluation order; the C loop moves exactly what its
         construction says, and prints the CPU time of its passes, so its demand on the bus
         (bytes per second alone) is measured, not assumed
```

Measured, in rounds (at least 5; the order within a round reversed every other round, so
that a drift of the machine's load touches both modes alike):

```text
alone     the program pinned on its core (taskset: bzip2 on core 0, triad on core 1)
together  the same, while the other program runs on the other core from CO_START_S before
          it starts until it ends (the co-runner's work is CO_WORK times larger, and it is
          restarted should it end first), so the measured program runs its whole work
          beside it
cpu_s     = ru_utime + ru_stime of the measured process (wait4's rusage): unlike its wall
            time, not stretched while other processes hold its core
slowdown  = cpu_s together / cpu_s alone, per round; median and min..max over the rounds
wall_s    = the same for wall time (reported, not the target)
load1     = the 1-minute load average (os.getloadavg) as each sample starts, and `uptime`
others    = cores' worth of CPU other processes took during the sample (/proc/stat busy
            time less the measured program's and the co-runner's)
quiet     = the rounds in whose samples other processes took less than QUIET_OTHER cores
            (cpuwork's BUSY_BACKGROUND); the figures are taken from the `rounds` rounds
            whose busiest sample had the least of it, then the lowest load (all rounds are
            kept in the figures file). Not the load average: the rounds' own two programs
            keep it at 1-2 on a 2-core machine however quiet the rest is
```

Predicted: the simulator on this machine (`hypervisor = "native"`, `[cpu] model = "cfs"`,
the measured `[host.cache]`, with the cores' reorder-buffer window and store queue where
`hostcache.core_window` knows the processor: misses overlap in the window, and a store's
miss stalls only once the stores behind it fill the queue), each program's job
pinned like the real one (`cpus_allowed`), alone and with the other running throughout:

```text
[bzip2] cpu_profile=bzip2, cpu_work = its median CPU time alone (its profile's curve, IPC)
[triad] cpu_profile=triad, cpu_work = its median CPU time alone,
        cpu_ipc = elements per CPU second of its passes alone / clock_mhz (triad.rs: one
        element is its unit of work; 32 bytes of it a line's half a miss)
predicted slowdown = job_runtime together / job_runtime alone
target             = within the measured rounds' min..max, or its excess over x1 within 25 %
                     of the measured median's excess (`within_target`)
at the duty        = 1 + (predicted - 1) x the co-runner's duty (its CPU time over the
                     measured program's wall time): on a machine whose other processes take
                     the co-runner's core part of the time, the overlap the rounds really had
                     (`at_duty`, linear in the overlap: a reading aid, not the simulator's)
```

Which L3 the rounds ran on (`decide`). The guest's sysfs names one L3 shared by both cores,
but the cores are vCPUs, host threads that the host places on its physical cores: on
different CCDs they have an L3 each, and the host may move them during a run (29 Nov 2026
on this machine: an 8 MiB chase lost nothing beside the triad at 14:09 and 16:44, and went
from 13 to 137-151 ns a load at 18:03). So the run measures its own topology, as it
measures the caches' sizes, with a pointer chase on bzip2's core beside the triad on the
other:

```text
window     = chase sizes S (MiB, powers of two) with L2 < S <= L3 / 2 (`window_mib`): the
             chase does not fit core 0's private level and fits the last level alone with
             room for the host's other tenants
mechanism  = sharing the L3, the triad (46 GB/s alone, 32 bytes an element, of which its L2
             evicts the 24 it read as lines into a victim L3) inserts 34 GB/s and sweeps
             16 MiB in 0.5 ms, far less than the chase's time between two loads of one line
             (S / 8 B loads x 10-15 ns: 2.6 ms at 2 MiB);
             under the insertion-rate occupancy (Che, Tung and Wang 2002, the contention
             model's) the chase keeps almost none of the L3 and its loads go to memory
             (150 ns); with an L3 of its own the chase loses nothing
probe      = per size: the chase alone, beside the triad (one co-runner on the other core
             from CO_START_S on, PROBE_LOADS loads each), alone again (`probe`); before each
             round and after the last, so round k lies between probe k and probe k + 1
loss(S)    = median(beside) - max(alone)          (alone: the check's runs alone of S and the
                                                  run's curve of the last level at S)
spread(S)  = max(alone) - min(alone)
shows loss = loss(S) > spread(S)                  (beyond what the chase alone varies by)
shared     = more than half the window's sizes show a loss; none measured: undecided
round k    = shared or private when probes k and k + 1 agree, changed when they do not
             (the placement moved at an unknown time within it), unknown when one is
             undecided
older runs = a figures file with only the sweep after the rounds (`chase_sweep`, its alone
             runs with the last level's curve and `chase_beside` at the same size): every
             round as the sweep says; without a sweep: sysfs's topology ("sysfs")
private    = `private_last_level`: the shared last-level bank split into one bank per core,
             each of its size (each program holds its L3 alone); one memory bus still (the
             memory controllers serve every CCD)
predicted  = per round: the shared case (sysfs's table), the private case, or their mean
             (changed); "sysfs" and "unknown" rounds the shared one; the slowdown is the
             median over the rounds, as the measured one is
```

The last level's replacement, measured from the same chases (`replacement`). Beside the
triad a shared L3 here kept about three quarters of a 2-4 MiB reused chase's L3 lines and
none of an 8 MiB one's (18:03, 29 Nov 2026): not LRU, which keeps none of them, but
re-reference interval prediction (RRIP, Jaleel et al., ISCA 2010; `[host.cache] replacement
= "rrip"`, crates/vmio-core/src/cpu/contention.rs's module doc). AMD documents neither the
policy nor its parameters, so the run measures the one the chase tells, the share of new
lines inserted at "long" rather than "distant" (`rrip_long`, bimodal RRIP's epsilon), as it
measures the memory latency, with the RRPV width at Jaleel et al.'s 2 bits (RRIP_BITS):

```text
per size S of the window in a check that found the L3 shared (a probe or the sweep), with
the chase's runs alone t_a (median) and beside the triad t_b (median; the sweep's LONG
run where there is one), memory latency L:
  lost    = clamp((t_b - t_a) / (L - t_a), 0, 1)     loads that went to memory instead
  kept    = clamp(1 - lost x S / S3, 0, 1)          of the chase's S3 lines in the L3
            (S3 = S less core 0's private level under a victim L3, else S)
  Lambda  = the triad's lines per ns (its bytes/s alone / 64, hostcache's bandwidth_one)
            + the chase's misses (lost / t_b)
  T_r     = S / 64 x t_b                            the chase's time between two loads of a line
  x       = the agings of a line's set within T_r: a Poisson count (the stream's
            insertions into the set are), mean eps x Lambda x 64 x T_r / (size - kept x S3 x 64),
            the contention model's T_P per set; a line survives while x < 2^bits - 1:
            kept = P[Poisson(x) <= 2^bits - 2], solved for x (bisection)
  eps(S)  = x (size - kept S3 64) / (Lambda 64 T_r), where 0 < kept < 1 (a size kept whole
            or lost whole bounds eps only)
rrip_long = median of eps(S) over the sizes and checks, at most 1 (static RRIP: the most a
            2-bit L3 loses); none measured: no key (LRU)
```

The formula is the L3's steady state, and a chase started beside the running triad is not
in it at first: its lines enter the L3 as new lines (at distant, mostly) and are protected
only once one of them is hit there, so a chase of few passes averages over the time its set
takes to settle, and reads a larger epsilon (less protection) than the L3 has. On 29 Nov
2026, 18:41 UTC (two tries, the machine busy with builds, load 7: noisy), a 4 MiB chase
beside the triad cost 72.7 and 23.9 ns a load over 2 M loads and 38.9 and 14.5 over 32 M,
an 8 MiB one 119 and 105 against 103 and 48 (alone 11-24 and 14-44). Hence the sweep's
LONG run, preferred where a record has it; the probes' short chases only decide the
placement.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from vmio import fioreport as report
from vmio import stackfile
from vmio.real import cpu as realcpu
from vmio.real import cpuwork, hostcache
from vmio.sim import parse_size, simulate_text

PROGRAMS = ("bzip2", "triad")
CORE = {"bzip2": 0, "triad": 1}
"""The core each program is pinned on (taskset -c)."""
CO_START_S = 0.5
"""The co-runner's head start (the triad's first touch of its 384 MiB takes about 0.3 s)."""
CO_WORK = 3
QUIET_OTHER = cpuwork.BUSY_BACKGROUND
"""Most cores' worth of CPU other processes may take in a quiet round's samples."""
MIN_ROUNDS = 5


def other_program(name: str) -> str:
    return PROGRAMS[1 - PROGRAMS.index(name)]


@dataclass(frozen=True)
class Sample:
    """One run of the measured program `program`, `mode` alone or together, in `round`."""

    round: int
    program: str
    mode: str
    cpu_s: float
    wall_s: float
    passes_cpu_s: float | None
    """triad: the CPU time of its passes (triad.c's own figure); None for bzip2."""
    co_cpu_s: float
    """CPU time the co-runner took while it ran (0 alone)."""
    other_cores: float
    load1: float
    uptime: str


def uptime() -> str:
    """`uptime`'s line (time, up, load averages)."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _spawn(argv: Sequence[str], out: Path) -> int:
    with open(out, "wb") as f:
        return os.posix_spawnp(
            argv[0],
            list(argv),
            dict(os.environ),
            file_actions=[(os.POSIX_SPAWN_DUP2, f.fileno(), 1)],
        )


def run_sample(
    argv: dict[str, list[str]],
    program: str,
    mode: str,
    rnd: int,
    workdir: Path,
) -> Sample:
    """`program` alone or with the other's co-runner argv (`argv[other + "/co"]`)."""
    load, up = os.getloadavg()[0], uptime()
    busy0 = realcpu._busy_s()
    co_cpu = 0.0
    co_pid = None
    co_argv = argv[other_program(program) + "/co"]
    sink = workdir / "co.out"
    if mode == "together":
        co_pid = _spawn(co_argv, sink)
        time.sleep(CO_START_S)
    out = workdir / f"{program}.out"
    start = time.perf_counter()
    pid = _spawn(argv[program], out if program == "triad" else Path(os.devnull))
    while True:
        got, status, usage = os.wait4(-1, 0)
        if got == pid:
            wall = time.perf_counter() - start
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                raise OSError(f"{' '.join(argv[program][:4])} ...: status {status:#x}")
            cpu = usage.ru_utime + usage.ru_stime
            break
        if got == co_pid:
            co_cpu += usage.ru_utime + usage.ru_stime
            co_pid = _spawn(co_argv, sink)
    if co_pid is not None:
        os.kill(co_pid, signal.SIGKILL)
        _, _, usage = os.wait4(co_pid, 0)
        co_cpu += usage.ru_utime + usage.ru_stime
    span = time.perf_counter() - start + (CO_START_S if mode == "together" else 0.0)
    other = max(0.0, realcpu._busy_s() - busy0 - cpu - co_cpu) / span
    passes = None
    if program == "triad":
        passes = hostcache.parse_output(out.read_text())["seconds"]
    return Sample(rnd, program, mode, cpu, wall, passes, co_cpu, other, load, up)


def chase_modes(
    binary: Path,
    mib: int,
    loads: int,
    modes: Sequence[tuple[str, list[str] | None]],
    workdir: Path,
) -> dict:
    """CPU ns per load of `triad chase MIB` on bzip2's core, once per (label, co-runner argv
    or None) of `modes`, in order, each co-runner on the other core from CO_START_S before
    the chase to its end."""
    argv = hostcache.pinned([str(binary), "chase", str(mib), str(loads)], CORE["bzip2"])
    out: dict = {"mib": mib, "uptime": uptime()}
    for label, co_argv in modes:
        co = _spawn(co_argv, workdir / "co.out") if co_argv is not None else None
        if co is not None:
            time.sleep(CO_START_S)
        r = subprocess.run(argv, capture_output=True, text=True, check=True)
        if co is not None:
            os.kill(co, signal.SIGKILL)
            os.waitpid(co, 0)
        out[label] = hostcache.parse_output(r.stdout)["ns_per_load"]
    return out


def chase_beside(binary: Path, co_argv: list[str], mib: int, loads: int, workdir: Path) -> dict:
    """CPU ns per load of `triad chase MIB` on bzip2's core, alone and while `co_argv` (the
    triad co-runner) runs on the other core: whether the loop takes a working set of `mib`
    MiB out of the shared last level (which the contention model's occupancy says it does).
    """
    modes = [("alone", None), ("together", co_argv), ("alone again", None)]
    return chase_modes(binary, mib, loads, modes, workdir)


LONG = 8
"""How many times longer `chase_sweep`'s second run beside the triad is (LONG_MODE)."""
LONG_MODE = "beside the triad, long"
"""The sweep's chase beside the triad over LONG times the loads: nearer the L3's steady state
(module doc, "The last level's replacement": a reused set's lines are kept only once they
have been reused in the L3, which a chase started beside the stream reaches over many
passes)."""
SWEEP_MIB = (1, 2, 4, 8, 16)
"""The chase sizes of `chase_sweep` (MiB): from within a private L2 to a 16 MiB last level."""
REUSE_MIB = 8
"""The reused co-runner of `chase_sweep`: a chase over as much as bzip2's footprint
(crates/vmio-core/src/workload/cpu/bzip2.rs: 8 MiB), whose lines come back."""


def chase_sweep(
    binary: Path, triad_argv: list[str], sizes: Sequence[int], loads: int, workdir: Path
) -> list[dict]:
    """Per size: the chase alone, beside the triad (a stream: its lines never come back),
    beside a REUSE_MIB chase (a co-runner that reuses its lines), on the other core, and
    beside the triad again over LONG times the loads (LONG_MODE).

    What it tells (docs/cpu.md, "a victim L3"): under LRU in a shared last level both
    co-runners take the chase's lines once its set no longer fits beside theirs; neither
    does when the host runs the two vCPUs on cores of different L3s (which the guest's sysfs
    cannot show); a last level that keeps reused lines against a stream (bypass or distant
    insertion of lines that never came back: Gaur, Chaudhuri and Subramoney, ISCA 2011)
    would let the triad take almost nothing where the reused chase still takes its share."""
    reuse = hostcache.pinned([str(binary), "chase", str(REUSE_MIB), str(4 * 10**9)], CORE["triad"])
    modes = [
        ("alone", None),
        ("beside the triad", triad_argv),
        ("beside a chase", reuse),
        ("alone again", None),
    ]
    rows = []
    for mib in sizes:
        row = chase_modes(binary, mib, loads, modes, workdir)
        long = chase_modes(binary, mib, LONG * loads, [(LONG_MODE, triad_argv)], workdir)
        rows.append({**row, LONG_MODE: long[LONG_MODE]})
    return rows


PROBE_LOADS = 2 * 10**6
"""Loads of each chase of a round's probe (`probe`): two passes over an 8 MiB set, 25 ms
alone in an L3, 0.3 s at memory's 150 ns beside the triad."""


def window_mib(cache: dict) -> list[int]:
    """The chase sizes (MiB, powers of two) that tell whether the last level is shared (module
    doc, "Which L3 the rounds ran on"): larger than core 0's private level below the last
    (the chase does not fit it) and at most half the last level as `[host.cache]` has it
    (the chase fits it alone, with room for the other tenants' lines)."""
    llc, below = levels(cache)
    mib, out = 1, []
    while mib << 20 <= llc // 2:
        if mib << 20 > below:
            out.append(mib)
        mib *= 2
    return out


def levels(cache: dict) -> tuple[int, int]:
    """Bytes of `[host.cache]`'s last level (its largest bank) and of core 0's largest
    private level below it (0 without one)."""
    banks = cache["bank"]
    top = max(b["level"] for b in banks)
    llc = max(parse_size(b["size"]) for b in banks if b["level"] == top)
    below = max(
        (
            parse_size(b["size"])
            for b in banks
            if b["level"] < top and 0 in cpu_list(str(b["cpus"]))
        ),
        default=0,
    )
    return llc, below


def cpu_list(text: str) -> list[int]:
    """The cores of a cpuset ("0-1", "0,2", "3")."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def private_last_level(cache: dict) -> dict:
    """`cache` with each shared last-level bank split into one bank per core, each of its
    size: every program holds the last level alone (module doc, "Which L3 the rounds ran
    on"); the levels below and the memory keys unchanged."""
    top = max(b["level"] for b in cache["bank"])
    banks = []
    for b in cache["bank"]:
        cores = cpu_list(str(b["cpus"]))
        if b["level"] == top and len(cores) > 1:
            banks.extend({**b, "cpus": str(c)} for c in cores)
        else:
            banks.append(b)
    return {**cache, "bank": banks}


def shows_loss(alone: Sequence[float], beside: Sequence[float]) -> bool:
    """Whether a chase beside the triad lost its cache: the median of its runs beside the
    triad exceeds the largest of its runs alone by more than the runs alone differ among
    themselves (their spread, max - min)."""
    if not alone or not beside:
        return False
    return statistics.median(beside) - max(alone) > max(alone) - min(alone)


def placement(
    rows: Sequence[dict], window: Sequence[int], extra_alone=None, extra_beside=None
) -> dict:
    """Whether the triad took the L3 from a chase (module doc): per size of `window` present
    in `rows` (a sweep's or a probe's: "alone", "alone again", "beside the triad"), its
    runs alone (with `extra_alone[mib]`: the run's other chases alone at that size) and
    beside the triad (with `extra_beside[mib]`); shared iff more than half the sizes show
    a loss (`shows_loss`). None: no size of the window was measured."""
    extra_alone = extra_alone or {}
    extra_beside = extra_beside or {}
    sizes = []
    for row in rows:
        mib = row["mib"]
        if mib not in window:
            continue
        alone = [row[k] for k in ("alone", "alone again") if k in row]
        alone += list(extra_alone.get(mib, []))
        beside = [row["beside the triad"], *extra_beside.get(mib, [])]
        spread = max(alone) - min(alone)
        sizes.append(
            {
                "mib": mib,
                "alone": alone,
                "beside the triad": beside,
                "loss": statistics.median(beside) - max(alone),
                "spread": spread,
                "shows loss": shows_loss(alone, beside),
                **({LONG_MODE: [row[LONG_MODE]]} if LONG_MODE in row else {}),
            }
        )
    if not sizes:
        return {"shared": None, "sizes": sizes}
    hits = sum(s["shows loss"] for s in sizes)
    return {"shared": 2 * hits > len(sizes), "sizes": sizes}


def sweep_placement(meta: dict) -> dict | None:
    """The decision from a run's `chase_sweep` (after its rounds), the other alone chases of
    the run at the same sizes (the last level's curve, `chase_beside`) counted in the
    spread; None for a run without a sweep."""
    sweep = meta.get("chase_sweep")
    if not sweep:
        return None
    beside: dict[int, list[float]] = {}
    if (c := meta.get("chase_beside")) is not None:
        beside.setdefault(c["mib"], []).append(c["together"])
    return placement(sweep, window_mib(meta["host_cache"]), curve_alone(meta), beside)


def probe(binary: Path, triad_argv: list[str], sizes: Sequence[int], loads: int, workdir: Path):
    """A round's probe of the L3 (module doc): each size's chase on bzip2's core alone, then
    (one triad co-runner on the other core from CO_START_S on) beside the triad, then alone
    again; rows as `chase_sweep`'s."""
    argv = {
        mib: hostcache.pinned([str(binary), "chase", str(mib), str(loads)], CORE["bzip2"])
        for mib in sizes
    }

    def chase(mib: int) -> float:
        r = subprocess.run(argv[mib], capture_output=True, text=True, check=True)
        return hostcache.parse_output(r.stdout)["ns_per_load"]

    rows = [{"mib": mib, "uptime": uptime(), "alone": chase(mib)} for mib in sizes]
    co = _spawn(triad_argv, workdir / "co.out")
    try:
        time.sleep(CO_START_S)
        for row in rows:
            row["beside the triad"] = chase(row["mib"])
    finally:
        os.kill(co, signal.SIGKILL)
        os.waitpid(co, 0)
    for row in rows:
        row["alone again"] = chase(row["mib"])
    return rows


def curve_alone(meta: dict) -> dict[int, list[float]]:
    """The run's chases alone besides a check's own, per size: the last level's curve
    (`hostcache.measure`, core 0, before the rounds) and `chase_beside`'s two."""
    alone: dict[int, list[float]] = {}
    for mib, ns in (meta.get("host") or {}).get("llc_curve") or []:
        alone.setdefault(mib, []).append(ns)
    if (c := meta.get("chase_beside")) is not None:
        alone.setdefault(c["mib"], []).extend([c["alone"], c["alone again"]])
    return alone


def round_placements(
    probes: Sequence[list[dict]], window: Sequence[int], extra_alone=None
) -> list[str]:
    """Per round: "shared" or "private" when the probes before and after it (`probes[k]`,
    `probes[k + 1]`) agree, "changed" when they do not, "unknown" without a decision
    (`extra_alone`: the run's other chases alone, as `placement` takes them)."""
    said = [placement(p, window, extra_alone)["shared"] for p in probes]
    out = []
    for before, after in zip(said, said[1:], strict=False):
        if before is None or after is None:
            out.append("unknown")
        elif before == after:
            out.append("shared" if before else "private")
        else:
            out.append("changed")
    return out


def round_order(rnd: int) -> list[tuple[str, str]]:
    order = [(p, m) for m in ("alone", "together") for p in PROGRAMS]
    return order if rnd % 2 == 0 else order[::-1]


def round_load(samples: Sequence[Sample], rnd: int) -> float:
    return max(s.load1 for s in samples if s.round == rnd)


def round_other(samples: Sequence[Sample], rnd: int) -> float:
    """Cores' worth of CPU other processes took in the round's busiest sample."""
    return max(s.other_cores for s in samples if s.round == rnd)


def measure(
    argv: dict[str, list[str]],
    rounds: int,
    budget_s: float,
    workdir: Path,
    log=print,
    probe_round=None,
    probes: list | None = None,
) -> list[Sample]:
    """At least `rounds` rounds; more, within `budget_s`, until `rounds` of them were quiet.
    With `probe_round` (a callable): its rows appended to `probes` before each round and
    after the last (round k between probes[k] and probes[k + 1])."""
    samples: list[Sample] = []
    t0 = time.monotonic()
    rnd = 0
    while rnd < rounds or (
        len(quiet_rounds(samples)) < rounds and time.monotonic() - t0 < budget_s
    ):
        if probe_round is not None and probes is not None:
            probes.append(probe_round())
        for program, mode in round_order(rnd):
            samples.append(run_sample(argv, program, mode, rnd, workdir))
        log(
            f"round {rnd}: other processes {round_other(samples, rnd):.2f} cores, load "
            f"{round_load(samples, rnd):.2f}; {samples[-1].uptime}"
        )
        rnd += 1
    if probe_round is not None and probes is not None:
        probes.append(probe_round())
    return samples


def quiet_rounds(samples: Sequence[Sample]) -> list[int]:
    rounds = sorted({s.round for s in samples})
    return [r for r in rounds if round_other(samples, r) < QUIET_OTHER]


def select(samples: Sequence[Sample], rounds: int) -> list[int]:
    """The `rounds` complete rounds the other processes disturbed least (module doc), in
    order."""
    done = sorted(
        r for r in {s.round for s in samples} if len([s for s in samples if s.round == r]) == 4
    )

    def key(r: int) -> tuple[float, float, int]:
        return (round_other(samples, r), round_load(samples, r), r)

    return sorted(sorted(done, key=key)[:rounds])


def _one(samples: Sequence[Sample], rnd: int, program: str, mode: str) -> Sample:
    return next(s for s in samples if (s.round, s.program, s.mode) == (rnd, program, mode))


@dataclass(frozen=True)
class Summary:
    """One program's figures over the chosen rounds."""

    program: str
    rounds: list[int]
    cpu_alone_s: float
    cpu_together_s: float
    slowdown: float
    """Median over rounds of cpu together / cpu alone."""
    slowdown_min: float
    slowdown_max: float
    wall_slowdown: float
    wall_slowdown_min: float
    wall_slowdown_max: float
    load_min: float
    load_max: float
    co_duty: float
    """Median over rounds of the co-runner's CPU time over the measured program's wall time
    (with the head start): 1 when it ran throughout, less when other processes took its
    core."""
    passes_slowdown: float | None = None
    """triad: the same ratio of its passes' own CPU time (triad.c), without the first touch
    of its arrays (system time that varies with the kernel's work, not the bus); None for
    bzip2."""
    passes_slowdown_min: float | None = None
    passes_slowdown_max: float | None = None


def summary(samples: Sequence[Sample], rounds: Sequence[int]) -> dict[str, Summary]:
    out = {}
    for p in PROGRAMS:
        alone = [_one(samples, r, p, "alone") for r in rounds]
        both = [_one(samples, r, p, "together") for r in rounds]
        cpu = [t.cpu_s / a.cpu_s for a, t in zip(alone, both, strict=True)]
        wall = [t.wall_s / a.wall_s for a, t in zip(alone, both, strict=True)]
        loads = [s.load1 for s in alone + both]
        duty = [t.co_cpu_s / (t.wall_s + CO_START_S) for t in both]
        passes = None
        if p == "triad":
            passes = [t.passes_cpu_s / a.passes_cpu_s for a, t in zip(alone, both, strict=True)]
        out[p] = Summary(
            p,
            list(rounds),
            statistics.median(s.cpu_s for s in alone),
            statistics.median(s.cpu_s for s in both),
            statistics.median(cpu),
            min(cpu),
            max(cpu),
            statistics.median(wall),
            min(wall),
            max(wall),
            min(loads),
            max(loads),
            statistics.median(duty),
            None if passes is None else statistics.median(passes),
            None if passes is None else min(passes),
            None if passes is None else max(passes),
        )
    return out


def triad_ipc(samples: Sequence[Sample], rounds: Sequence[int], passes: int, mhz: int) -> float:
    """Elements per cycle of the triad's passes alone (median over the rounds)."""
    rate = statistics.median(
        hostcache.ELEMENTS * passes / _one(samples, r, "triad", "alone").passes_cpu_s
        for r in rounds
    )
    return rate / (mhz * 1e6)


def stack_text(cores: int, cache: dict) -> str:
    """This machine for the simulator: its cores under CFS, no VMM, its measured caches."""
    doc = {
        "host": {"cores": cores, "hypervisor": "native", "cache": cache},
        "cpu": {"model": "cfs"},
        "device": [{"name": "sda", "model": "ssd", "profile": "samsung-840pro-256g"}],
        "volume": [{"name": "data", "layout": "single", "devices": ["sda"]}],
        "vm": [{"name": "host", "disk": [{"name": "sda", "volume": "data", "size": "10g"}]}],
    }
    return stackfile.render(
        doc, ["This machine for vmio.real.corun: its cores under CFS and its measured caches."]
    )


def job_section(program: str, work_s: float, ipc: float) -> str:
    text = f"[{program}]\ncpu_profile={program}\ncpu_work={max(1, round(work_s * 1000))}ms\n"
    if program == "triad":
        text += f"cpu_ipc={ipc:.6g}\n"
    return text + f"cpus_allowed={CORE[program]}\n"


def predict(cores: int, cache: dict, work_s: dict[str, float], ipc: float) -> dict[str, dict]:
    """Per program: the simulator's run time alone and together (s) and their ratio."""
    stack = stack_text(cores, cache)
    out = {}
    for p in PROGRAMS:
        q = other_program(p)
        times = {}
        for mode in ("alone", "together"):
            job = job_section(p, work_s[p], ipc)
            if mode == "together":
                job += job_section(q, CO_WORK * (work_s[p] + work_s[q]), ipc)
            res = json.loads(simulate_text(stack, "corun-stack.toml", job, "corun.fio", 1))
            times[mode] = next(j["job_runtime"] for j in res["jobs"] if j["jobname"] == p) / 1000
        out[p] = {**times, "slowdown": times["together"] / times["alone"]}
    return out


RRIP_BITS = 2
"""Bits of the L3's re-reference prediction taken for `replacement` (Jaleel et al.'s 2; AMD
documents none). The 18:03 sweep cannot be met with 3: the 2 MiB chase lost more lines than
3-bit RRIP loses even inserting every new line at long."""


def poisson_cdf(k: int, mean: float) -> float:
    """P[N <= k] for N ~ Poisson(mean)."""
    term = total = math.exp(-mean)
    for i in range(1, k + 1):
        term *= mean / i
        total += term
    return total


def aging_count(kept: float, bits: int) -> float:
    """The mean agings x of a set within a line's reuse under which a share `kept` of the
    lines survive: P[Poisson(x) <= 2^bits - 2] = kept (module doc), by bisection."""
    lo, hi = 0.0, 1.0e4
    for _ in range(200):
        mid = (lo + hi) / 2
        if poisson_cdf((1 << bits) - 2, mid) > kept:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def latency_ns(text) -> float:
    """Nanoseconds of a `[host.cache]` memory_latency ("151ns", or an integer of ns)."""
    return float(str(text).removesuffix("ns"))


def rrip_long_of(
    sizes: Sequence[dict], cache: dict, stream_bytes_per_s: float, bits: int = RRIP_BITS
) -> dict:
    """The share of new lines inserted at long (module doc, "The last level's replacement"),
    from a check's sizes (`placement`'s: mib, alone, beside the triad), with the run's
    `[host.cache]` and the triad's bytes per second alone: per size its lost and kept
    shares and epsilon (None where it is only bounded), and their median."""
    size, l2 = levels(cache)
    below = l2 if cache.get("inclusion") == "victim" else 0
    memory = latency_ns(cache["memory_latency"])
    rows = []
    for z in sizes:
        t_a = statistics.median(z["alone"])
        t_b = statistics.median(z.get(LONG_MODE) or z["beside the triad"])
        lines = (z["mib"] << 20) // 64
        in_l3 = max(1, lines - below // 64)
        lost = min(1.0, max(0.0, (t_b - t_a) / max(1e-9, memory - t_a)))
        kept = min(1.0, max(0.0, 1 - lost * lines / in_l3))
        lam = stream_bytes_per_s / 64 / 1e9 + lost / t_b
        reuse_ns = lines * t_b
        eps = None
        if 0 < kept < 1:
            x = aging_count(kept, bits)
            eps = x * (size - kept * in_l3 * 64) / (lam * 64 * reuse_ns)
        rows.append(
            {
                "mib": z["mib"],
                "chase": "long" if z.get(LONG_MODE) else "short",
                "lost": lost,
                "kept": kept,
                "rrip_long": eps,
            }
        )
    usable = [r["rrip_long"] for r in rows if r["rrip_long"] is not None]
    return {
        "bits": bits,
        "sizes": rows,
        "rrip_long": min(1.0, statistics.median(usable)) if usable else None,
    }


def replacement(meta: dict, decision: dict) -> dict | None:
    """The L3's replacement measured from the checks `decision` found shared (its probes, or
    the sweep), with the triad's bandwidth alone from `meta["host"]`; None without a shared
    check or a bandwidth."""
    checks = decision.get("probes") or ([decision["sweep"]] if "sweep" in decision else [])
    sizes = [z for c in checks if c["shared"] for z in c["sizes"]]
    stream = ((meta.get("host") or {}).get("memory") or {}).get("bandwidth_one")
    if not sizes or not stream:
        return None
    out = rrip_long_of(sizes, meta["host_cache"], stream)
    return out if out["rrip_long"] is not None else None


def with_replacement(cache: dict, measured: dict | None) -> dict:
    """`cache` with the measured replacement's keys (`replacement`), unless it has its own
    `replacement` key or none was measured."""
    if measured is None or "replacement" in cache:
        return cache
    return {
        **cache,
        **hostcache.rrip_keys(measured["rrip_long"], measured["bits"]),
    }


def decide(meta: dict, rounds: Sequence[int]) -> dict:
    """Which L3 each of `rounds` ran on (module doc, "Which L3 the rounds ran on"): from the
    probes around each round (`probes`, a run since they were recorded), else from the
    sweep after the rounds (`chase_sweep`: every round alike), else sysfs's topology
    ("sysfs": a run recorded before either)."""
    cache = meta["host_cache"]
    window = window_mib(cache)
    probes = meta.get("probes")
    if probes:
        curve = curve_alone({"host": meta.get("host")})
        said = round_placements(probes, window, curve)
        out = {
            "source": "probes",
            "window_mib": window,
            "rounds": {str(r): said[r] if r < len(said) else "unknown" for r in rounds},
            "probes": [placement(p, window, curve) for p in probes],
        }
        return {**out, "replacement": replacement(meta, out)}
    sweep = sweep_placement(meta)
    if sweep is not None:
        case = {True: "shared", False: "private", None: "unknown"}[sweep["shared"]]
        out = {
            "source": "sweep",
            "window_mib": window,
            "rounds": {str(r): case for r in rounds},
            "sweep": sweep,
        }
        return {**out, "replacement": replacement(meta, out)}
    return {"source": "sysfs", "window_mib": window, "rounds": {str(r): "sysfs" for r in rounds}}


def predict_decided(
    cores: int, cache: dict, work_s: dict[str, float], ipc: float, decision: dict
) -> dict[str, dict]:
    """Per program: the prediction with sysfs's shared last level ("shared") and, where a
    round ran on private ones, with `private_last_level` ("private"); each round's
    predicted slowdown by its placement ("changed": the two cases' mean, the probes saying
    only that the placement moved within the round; "sysfs" and "unknown": shared, as
    sysfs says), and "slowdown" their median over the rounds. The shared case's last level
    evicts by the replacement the run's chases measured (`decision["replacement"]`,
    `with_replacement`), LRU without one."""
    shared = with_replacement(cache, decision.get("replacement"))
    cases = {"shared": predict(cores, shared, work_s, ipc)}
    kinds = set(decision["rounds"].values())
    if kinds & {"private", "changed"}:
        cases["private"] = predict(cores, private_last_level(cache), work_s, ipc)
    out = {}
    for p in PROGRAMS:

        def at(kind: str, p: str = p) -> float:
            if kind == "private":
                return cases["private"][p]["slowdown"]
            if kind == "changed":
                return (cases["shared"][p]["slowdown"] + cases["private"][p]["slowdown"]) / 2
            return cases["shared"][p]["slowdown"]

        per_round = {r: at(kind) for r, kind in decision["rounds"].items()}
        out[p] = {
            "slowdown": statistics.median(per_round.values()),
            "rounds": per_round,
            **{kind: case[p] for kind, case in cases.items()},
        }
    return out


def predict_recorded(figures: dict, cache: dict | None = None) -> dict[str, dict]:
    """The prediction for a figures file's chosen rounds, with its recorded [host.cache]
    (or `cache` instead) and the placement its chases decide (`decide`)."""
    samples = samples_of(figures)
    rounds = figures["rounds_used"]
    sums = summary(samples, rounds)
    cache = figures["host_cache"] if cache is None else cache
    ipc = triad_ipc(samples, rounds, figures["work"]["triad"]["passes"], cache["clock_mhz"])
    work = {p: sums[p].cpu_alone_s for p in PROGRAMS}
    decision = decide({**figures, "host_cache": cache}, rounds)
    return predict_decided(figures["cores"], cache, work, ipc, decision)


def within_target(s: Summary, predicted: float) -> bool:
    """The target: the predicted slowdown within the measured rounds' min..max, or its
    excess over x1 within 25 % of the measured median's (25 % of the ratio itself would pass
    any prediction below x1.25)."""
    excess = s.slowdown - 1
    return s.slowdown_min <= predicted <= s.slowdown_max or abs(
        (predicted - 1) - excess
    ) <= 0.25 * abs(excess)


def at_duty(predicted: float, duty: float) -> float:
    """The predicted slowdown scaled to a co-runner that ran `duty` of the time (the
    simulator's runs it throughout): 1 + (predicted - 1) x duty, linear in the overlap; a
    reading aid on a shared machine, not a prediction of the simulator."""
    return 1 + (predicted - 1) * min(1.0, max(0.0, duty))


def table(sums: dict[str, Summary], predicted: dict[str, dict] | None) -> str:
    header = [
        "program",
        "cpu alone s",
        "together s",
        "slowdown (median)",
        "min..max",
        "wall slowdown",
        "min..max",
        "load",
        "co-runner's duty",
        "predicted",
        "within target",
        "at the duty",
        "within target",
        "shared L3",
        "private L3s",
    ]
    body = []
    for p, s in sums.items():
        pred = None if predicted is None else predicted[p]["slowdown"]
        cases = [
            "-" if predicted is None or kind not in predicted[p]
            else f"x{predicted[p][kind]['slowdown']:.3f}"
            for kind in ("shared", "private")
        ]  # fmt: skip
        body.append(
            [
                p,
                f"{s.cpu_alone_s:.2f}",
                f"{s.cpu_together_s:.2f}",
                f"x{s.slowdown:.3f}",
                f"x{s.slowdown_min:.3f}..x{s.slowdown_max:.3f}",
                f"x{s.wall_slowdown:.3f}",
                f"x{s.wall_slowdown_min:.3f}..x{s.wall_slowdown_max:.3f}",
                f"{s.load_min:.2f}..{s.load_max:.2f}",
                f"{s.co_duty:.2f}",
                "-" if pred is None else f"x{pred:.3f}",
                "-" if pred is None else ("yes" if within_target(s, pred) else "no"),
                "-" if pred is None else f"x{at_duty(pred, s.co_duty):.3f}",
                "-"
                if pred is None
                else ("yes" if within_target(s, at_duty(pred, s.co_duty)) else "no"),
                *cases,
            ]
        )
    text = (
        "bzip2 -9 (core 0) and the triad loop (core 1), alone and together, CPU time "
        "(rusage); measured vs simulated ([host.cache] measured here)\n"
        + report.text_table(header, body)
    )
    t = sums.get("triad")
    if t is not None and t.passes_slowdown is not None:
        text += (
            "\ntriad counting its passes only (triad.c's own CPU time, not its arrays' first "
            f"touch): x{t.passes_slowdown:.3f} "
            f"(x{t.passes_slowdown_min:.3f}..x{t.passes_slowdown_max:.3f})"
        )
    return text


def placement_text(decision: dict) -> str:
    """The L3's placement as decided (`decide`) and its evidence, in lines."""
    rounds = decision["rounds"]
    kinds = sorted(set(rounds.values()))
    counts = ", ".join(f"{k} {sum(v == k for v in rounds.values())}" for k in kinds)
    lines = [
        f"L3 of the rounds (from the {decision['source']}; chases of "
        f"{', '.join(map(str, decision['window_mib']))} MiB: larger than the L2, at most half "
        f"the L3): {counts} of {len(rounds)} rounds"
    ]
    checks = decision.get("probes") or ([decision["sweep"]] if "sweep" in decision else [])
    for k, check in enumerate(checks):
        name = "sweep after the rounds" if decision["source"] == "sweep" else f"probe {k}"
        parts = []
        for z in check["sizes"]:
            alone = "/".join(f"{x:.1f}" for x in z["alone"])
            beside = "/".join(f"{x:.1f}" for x in z["beside the triad"])
            mark = "loss" if z["shows loss"] else "none"
            parts.append(f"{z['mib']} MiB {alone} alone, {beside} beside ({mark})")
        said = {True: "shared", False: "private", None: "-"}[check["shared"]]
        lines.append(f"  {name}: {said}: " + "; ".join(parts))
    if (r := decision.get("replacement")) is not None:
        kept = ", ".join(
            f"{z['mib']} MiB kept {z['kept']:.2f} ({z['chase']} chase)"
            + ("" if z["rrip_long"] is None else f", rrip_long {z['rrip_long']:.3f}")
            for z in r["sizes"]
        )
        lines.append(
            f"  shared L3's replacement: rrip, {r['bits']} bits, rrip_long "
            f"{r['rrip_long']:.3f} measured ({kept})"
        )
    return "\n".join(lines)


def round_table(samples: Sequence[Sample], predicted: dict[str, dict], decision: dict) -> str:
    """Per chosen round: its L3, each program's measured slowdown and its prediction."""
    header = ["round", "L3"]
    for p in PROGRAMS:
        header += [f"{p} measured", "predicted"]
    body = []
    for r in predicted[PROGRAMS[0]]["rounds"]:
        row = [r, decision["rounds"][r]]
        for p in PROGRAMS:
            measured = _one(samples, int(r), p, "together").cpu_s
            measured /= _one(samples, int(r), p, "alone").cpu_s
            row += [f"x{measured:.3f}", f"x{predicted[p]['rounds'][r]:.3f}"]
        body.append(row)
    return report.text_table(header, body)


def by_placement(
    samples: Sequence[Sample], predicted: dict[str, dict], decision: dict
) -> list[dict]:
    """Per placement the rounds had (shared, private, changed, sysfs, unknown) and program:
    the measured slowdown over those rounds (`summary`), the prediction of those rounds and
    whether it meets the target (`within_target`)."""
    out = []
    for kind in ("private", "shared", "changed", "sysfs", "unknown"):
        rounds = [int(r) for r, k in decision["rounds"].items() if k == kind]
        if not rounds:
            continue
        sums = summary(samples, sorted(rounds))
        for p in PROGRAMS:
            pred = statistics.median(predicted[p]["rounds"][str(r)] for r in rounds)
            s = sums[p]
            out.append(
                {
                    "L3": kind,
                    "rounds": sorted(rounds),
                    "program": p,
                    "measured": s.slowdown,
                    "min": s.slowdown_min,
                    "max": s.slowdown_max,
                    "predicted": pred,
                    "within target": within_target(s, pred),
                }
            )
    return out


def placement_table(rows: Sequence[dict]) -> str:
    """`by_placement` as text."""
    header = ["L3", "rounds", "program", "measured (median)", "min..max", "predicted", "within"]
    body = [
        [
            r["L3"],
            ",".join(map(str, r["rounds"])),
            r["program"],
            f"x{r['measured']:.3f}",
            f"x{r['min']:.3f}..x{r['max']:.3f}",
            f"x{r['predicted']:.3f}",
            "yes" if r["within target"] else "no",
        ]
        for r in rows
    ]
    return report.text_table(header, body)


def figures(meta: dict, samples: Sequence[Sample], rounds: Sequence[int], predicted) -> dict:
    sums = summary(samples, rounds)
    measured = (meta.get("l3") or {}).get("replacement")
    if meta.get("host_cache") is not None:
        meta = {**meta, "host_cache": with_replacement(meta["host_cache"], measured)}
    return {
        **meta,
        "samples": [asdict(s) for s in samples],
        "rounds_used": list(rounds),
        "summary": {p: asdict(s) for p, s in sums.items()},
        "predicted": predicted,
    }


def samples_of(recorded: dict) -> list[Sample]:
    return [Sample(**s) for s in recorded["samples"]]


__all__ = [
    "CO_START_S",
    "CO_WORK",
    "CORE",
    "LONG",
    "LONG_MODE",
    "MIN_ROUNDS",
    "PROBE_LOADS",
    "PROGRAMS",
    "QUIET_OTHER",
    "RRIP_BITS",
    "REUSE_MIB",
    "SWEEP_MIB",
    "aging_count",
    "at_duty",
    "by_placement",
    "chase_beside",
    "chase_modes",
    "chase_sweep",
    "cpu_list",
    "curve_alone",
    "decide",
    "figures",
    "job_section",
    "latency_ns",
    "measure",
    "other_program",
    "placement",
    "placement_table",
    "placement_text",
    "poisson_cdf",
    "predict",
    "predict_decided",
    "predict_recorded",
    "private_last_level",
    "probe",
    "quiet_rounds",
    "replacement",
    "rrip_long_of",
    "round_order",
    "round_placements",
    "round_table",
    "run_sample",
    "Sample",
    "samples_of",
    "select",
    "shows_loss",
    "stack_text",
    "Summary",
    "summary",
    "sweep_placement",
    "table",
    "triad_ipc",
    "uptime",
    "window_mib",
    "with_replacement",
    "within_target",
]
