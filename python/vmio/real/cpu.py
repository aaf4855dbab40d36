"""N vs N+1 CPU-bound jobs natively on this machine, measured and predicted (S4's 3 vs 4 jobs
on a quad core, here around this machine's `nproc`).

Measured. K copies of one real CPU-bound program with FIXED work run at once, for K = 1 ..
nproc + 1, `reps` times (the K values in turn within a repetition, so that a change of the
machine's load touches every K alike):

```text
input   = `make_input(size, seed)`: text of pseudo-random words (a 4096-word vocabulary of
          2-10 letters drawn by Python's random.Random(seed)), a stand-in for SPEC CPU2006
          401.bzip2's text inputs; the same bytes for the same size and seed
job     = `bzip2 -9 -c input input ...` (the input `repeats` times, output to /dev/null):
          one process, a fixed amount of work, no I/O but reading a file the page cache holds
run(K)  = start K jobs at once (fork + exec, stdout /dev/null); os.wait4 each as it ends
          wall_s  = its end - the common start (time.perf_counter)
          cpu_s   = ru_utime + ru_stime of the job (wait4's rusage)
          load_before = the 1-minute load average at the start
          other_cpu_s = busy CPU time of the whole machine over the run (/proc/stat: all
                    but idle and iowait) - the jobs' cpu_s: what other processes took
slowdown(K)       = mean wall_s(K) / mean wall_s(K - 1) - 1 (S4's "4 jobs relative to 3")
per-rep slowdown  = the same within one repetition; its min..max over the repetitions is
                    the run-to-run spread
quiet repetition  = one in which every run's other processes took less than QUIET_CORES
                    cores (other_cpu_s / the run's length); the machine is shared, so the
                    script repeats until `reps` repetitions were quiet (or a time budget
                    ends) and the figures are those of the quiet ones (`select`; all of them
                    when fewer than MIN_QUIET were quiet)
```

Predicted. The simulator runs the same K jobs (`predict`): `hypervisor = "native"`,
`cores = nproc`, `[cpu] model = "cfs"`, a job section `[bzip2]` with `cpu_profile=bzip2`,
`cpu_work` = the measured single-job time (its CPU time, mean cpu_s at K = 1: on an idle
machine its wall time, and unlike the wall time not stretched by other processes),
`numjobs = K`; the mean `job_runtime` of its jobs in the fio JSON is the predicted wall time.
This machine's cores are shared with other work (`other_cpu_s`), so a second prediction adds
that load as it was measured:

```text
other_cores(K) = mean over K's runs of other_cpu_s / the run's length (its last job's wall)
[others]: ioengine=cpuio, numjobs = n = ceil(other_cores), cpuload = 100 * other_cores / n
          (fio's cpuio: busy cpuload % of every 50 ms), runtime long enough to outlast the jobs
```

What to expect: up to nproc jobs each has a core (slowdown ~0 but for shared caches and
memory bandwidth, and the machine's other load); nproc + 1 jobs share nproc cores fairly,
so each runs (nproc + 1) / nproc times longer (+50 % on 2 cores) under CFS's fair share.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from vmio import fioreport as report
from vmio import stackfile
from vmio.sim import simulate_text

PROGRAM = ("bzip2", "-9", "-c")
"""The job's command, before its input files (bzip2 1.0.x: -9 = 900k blocks)."""
VOCABULARY = 4096


def program_missing() -> str | None:
    """Why the measurement cannot run here, or None."""
    if shutil.which(PROGRAM[0]) is None:
        return f"'{PROGRAM[0]}' is not installed (apt-get install {PROGRAM[0]})"
    return None


def make_input(path: Path, size: int, seed: int) -> Path:
    """Write `size` bytes of pseudo-random words (module doc) to `path`."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(VOCABULARY)]
    out = bytearray()
    while len(out) < size:
        out += (" ".join(rng.choices(words, k=1000)) + "\n").encode()
    path.write_bytes(bytes(out[:size]))
    return path


def job_argv(input_path: Path, repeats: int) -> list[str]:
    """One job: the program over `repeats` copies of the input."""
    if repeats < 1:
        raise ValueError(f"repeats: must be at least 1, not {repeats}")
    return [*PROGRAM, *[str(input_path)] * repeats]


@dataclass(frozen=True)
class Job:
    """One job of one run: K jobs at once, repetition `rep`, job `index` (start order)."""

    k: int
    rep: int
    index: int
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Run:
    k: int
    rep: int
    jobs: tuple[Job, ...]
    other_cpu_s: float
    """Busy CPU time of the machine over the run not spent by the jobs (other processes)."""
    load_before: float
    """The 1-minute load average as the run starts (os.getloadavg)."""


def _busy_s() -> float:
    """The machine's busy CPU time so far, s (/proc/stat `cpu`: all fields but idle and
    iowait, in USER_HZ ticks)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def run_concurrent(argv: Sequence[str], k: int, rep: int = 0) -> Run:
    """Start `k` copies of `argv` at once; each one's wall and CPU time (module doc)."""
    load = os.getloadavg()[0]
    busy0 = _busy_s()
    start = time.perf_counter()
    pids = []
    with open(os.devnull, "wb") as null:
        for _ in range(k):
            pids.append(
                os.posix_spawnp(
                    argv[0],
                    list(argv),
                    dict(os.environ),
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, null.fileno(), 1),
                    ],
                )
            )
    ended: dict[int, tuple[float, float]] = {}
    while len(ended) < k:
        pid, status, usage = os.wait4(-1, 0)
        now = time.perf_counter()
        if pid not in pids:
            continue
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            raise OSError(f"{' '.join(argv[:3])} ...: job {pid} ended with status {status:#x}")
        ended[pid] = (now - start, usage.ru_utime + usage.ru_stime)
    jobs = tuple(Job(k, rep, i, *ended[pid]) for i, pid in enumerate(pids))
    other = _busy_s() - busy0 - sum(j.cpu_s for j in jobs)
    return Run(k, rep, jobs, max(0.0, other), load)


QUIET_CORES = 0.1
"""Most other-process load (cores) a run of a quiet repetition may have seen."""
MIN_QUIET = 3
"""Fewest quiet repetitions the figures are taken from (else from every repetition)."""


def measure(argv: Sequence[str], ks: Sequence[int], reps: int) -> list[Run]:
    """`reps` repetitions, each running every K of `ks` in turn."""
    return [run_concurrent(argv, k, rep) for rep in range(reps) for k in ks]


def other_cores(run: Run) -> float:
    """Cores' worth of CPU other processes took during the run."""
    return run.other_cpu_s / max(j.wall_s for j in run.jobs)


def quiet_reps(runs: Sequence[Run]) -> list[int]:
    """The repetitions whose every run saw less than QUIET_CORES of other load."""
    reps = sorted({r.rep for r in runs})
    return [rep for rep in reps if all(other_cores(r) < QUIET_CORES for r in runs if r.rep == rep)]


def measure_quiet(argv: Sequence[str], ks: Sequence[int], reps: int, budget_s: float) -> list[Run]:
    """Repetitions until `reps` of them were quiet or `budget_s` seconds have passed (at
    least one repetition)."""
    runs: list[Run] = []
    start = time.monotonic()
    rep = 0
    while not runs or (len(quiet_reps(runs)) < reps and time.monotonic() - start < budget_s):
        runs += [run_concurrent(argv, k, rep) for k in ks]
        rep += 1
    return runs


def select(runs: Sequence[Run]) -> list[Run]:
    """The runs of the quiet repetitions, or every run when fewer than MIN_QUIET were quiet."""
    quiet = quiet_reps(runs)
    return [r for r in runs if r.rep in quiet] if len(quiet) >= MIN_QUIET else list(runs)


def _mean_wall(runs: Sequence[Run], k: int, rep: int | None = None) -> float:
    walls = [j.wall_s for r in runs if r.k == k and rep in (None, r.rep) for j in r.jobs]
    return statistics.fmean(walls)


@dataclass(frozen=True)
class Summary:
    """The figures of one K: mean wall and CPU time of its jobs over every repetition, the
    slowdown over K - 1 (None for the smallest K) and its spread over the repetitions."""

    k: int
    jobs: int
    wall_s: float
    wall_min_s: float
    wall_max_s: float
    cpu_s: float
    other_cpu_s: float
    other_cores: float
    """Cores' worth of CPU other processes took during K's runs (module doc)."""
    slowdown_pct: float | None
    slowdown_min_pct: float | None
    slowdown_max_pct: float | None


def summary(runs: Sequence[Run]) -> list[Summary]:
    """Per K, in increasing order (module doc)."""
    ks = sorted({r.k for r in runs})
    reps = sorted({r.rep for r in runs})
    out = []
    for i, k in enumerate(ks):
        jobs = [j for r in runs if r.k == k for j in r.jobs]
        walls = [j.wall_s for j in jobs]
        slow = per_rep = None
        if i > 0:
            slow = 100 * (_mean_wall(runs, k) / _mean_wall(runs, ks[i - 1]) - 1)
            per_rep = [
                100 * (_mean_wall(runs, k, rep) / _mean_wall(runs, ks[i - 1], rep) - 1)
                for rep in reps
            ]
        out.append(
            Summary(
                k=k,
                jobs=len(jobs),
                wall_s=statistics.fmean(walls),
                wall_min_s=min(walls),
                wall_max_s=max(walls),
                cpu_s=statistics.fmean(j.cpu_s for j in jobs),
                other_cpu_s=statistics.fmean(r.other_cpu_s for r in runs if r.k == k),
                other_cores=statistics.fmean(other_cores(r) for r in runs if r.k == k),
                slowdown_pct=slow,
                slowdown_min_pct=None if per_rep is None else min(per_rep),
                slowdown_max_pct=None if per_rep is None else max(per_rep),
            )
        )
    return out


def stack_text(cores: int) -> str:
    """This machine as the simulator sees it: its `cores` cores shared by CFS, no VMM."""
    doc = {
        "host": {"cores": cores, "hypervisor": "native"},
        "cpu": {"model": "cfs"},
        "device": [{"name": "sda", "model": "ssd", "profile": "samsung-840pro-256g"}],
        "volume": [{"name": "data", "layout": "single", "devices": ["sda"]}],
        "vm": [{"name": "host", "disk": [{"name": "sda", "volume": "data", "size": "10g"}]}],
    }
    comment = "This machine as the simulator sees it for vmio.real.cpu: its cores shared by CFS, "
    return stackfile.render(doc, [comment + "no VMM."])


JOB = """\
; {k} concurrent copies of a bzip2-like job with {work_ms} ms of CPU work each (vmio.real.cpu)
[bzip2]
cpu_profile=bzip2
cpu_work={work_ms}ms
numjobs={k}
"""

OTHERS = """
; the machine's other processes: {cores:.3f} cores' worth of CPU, as measured
[others]
ioengine=cpuio
cpuload={load}
numjobs={n}
runtime={runtime_ms}ms
"""


def job_text(k: int, work_s: float, other_cores: float = 0.0) -> str:
    """The simulator's job file for K jobs of `work_s` each, with the others' load when it
    is at least 1 % of a core (module doc)."""
    text = JOB.format(k=k, work_ms=round(work_s * 1000))
    if other_cores >= 0.01:
        n = math.ceil(other_cores)
        text += OTHERS.format(
            cores=other_cores,
            load=max(1, min(100, round(100 * other_cores / n))),
            n=n,
            runtime_ms=round(work_s * 1000) * (k + n + 1),
        )
    return text


def predict(
    cores: int,
    work_s: float,
    ks: Sequence[int],
    other_cores: dict[int, float] | None = None,
    seed: int = 1,
) -> dict[int, float]:
    """The simulator's mean run time (s) of the K bzip2 jobs, for each K (module doc); with
    `other_cores`, the others' load measured with K."""
    out = {}
    stack = stack_text(cores)
    for k in ks:
        job = job_text(k, work_s, (other_cores or {}).get(k, 0.0))
        result = json.loads(simulate_text(stack, "realcpu-stack.toml", job, "realcpu.fio", seed))
        runtimes = [j["job_runtime"] for j in result["jobs"] if j["jobname"] == "bzip2"]
        out[k] = statistics.fmean(runtimes) / 1000
    return out


def predicted_slowdowns(predicted: dict[int, float]) -> dict[int, float]:
    """Slowdown (%) of each K over the next smaller K of `predicted`."""
    ks = sorted(predicted)
    return {k: 100 * (predicted[k] / predicted[p] - 1) for p, k in itertools.pairwise(ks)}


@dataclass(frozen=True)
class Prediction:
    """The simulator's mean job run time (s) per K: on an idle machine, and with the other
    processes' load measured with each K."""

    idle: dict[int, float]
    with_others: dict[int, float]


def predict_runs(cores: int, summaries: Sequence[Summary]) -> Prediction:
    """Both predictions for the measured K values; the work is the single job's CPU time
    (the first summary is K = 1)."""
    if summaries[0].k != 1:
        raise ValueError(f"the smallest K measured is {summaries[0].k}; the work needs K = 1")
    ks = [s.k for s in summaries]
    work = summaries[0].cpu_s
    others = {s.k: s.other_cores for s in summaries}
    return Prediction(predict(cores, work, ks), predict(cores, work, ks, others))


def _f(x: float | None, spec: str, unit: str = "") -> str:
    return "-" if x is None else format(x, spec) + unit


def table(summaries: Sequence[Summary], predicted: Prediction | None, cores: int) -> str:
    """Measured vs predicted, one row per K."""
    idle = predicted.idle if predicted else {}
    loaded = predicted.with_others if predicted else {}
    slow, slow_loaded = predicted_slowdowns(idle), predicted_slowdowns(loaded)
    header = [
        "jobs",
        "wall s",
        "min..max s",
        "cpu s",
        "others' cores",
        "slowdown vs K-1",
        "spread (reps)",
        "predicted s",
        "slowdown",
        "with others: s",
        "slowdown",
    ]
    body = [
        [
            str(s.k),
            f"{s.wall_s:.2f}",
            f"{s.wall_min_s:.2f}..{s.wall_max_s:.2f}",
            f"{s.cpu_s:.2f}",
            f"{s.other_cores:.2f}",
            _f(s.slowdown_pct, "+.2f", " %"),
            "-"
            if s.slowdown_min_pct is None
            else f"{s.slowdown_min_pct:+.2f}..{s.slowdown_max_pct:+.2f} %",
            _f(idle.get(s.k), ".2f"),
            _f(slow.get(s.k), "+.2f", " %"),
            _f(loaded.get(s.k), ".2f"),
            _f(slow_loaded.get(s.k), "+.2f", " %"),
        ]
        for s in summaries
    ]
    return (
        f"{' '.join(PROGRAM)} jobs on this machine's {cores} cores, measured vs simulated "
        "(hypervisor native, [cpu] model cfs; slowdowns over K-1 jobs)\n"
        + report.text_table(header, body)
    )


def figures(runs: Sequence[Run], predicted: Prediction | None, meta: dict) -> dict:
    """What tests/real_cpu_figures.json holds: `meta` (how, measured, cores, input), every
    job, the summary and both predictions."""

    def keyed(d: dict[int, float]) -> dict[str, float]:
        return {str(k): v for k, v in d.items()}

    return {
        **meta,
        "runs": [asdict(r) for r in runs],
        "quiet_reps": quiet_reps(runs),
        "summary": [asdict(s) for s in summary(select(runs))],
        "predicted_s": None if predicted is None else keyed(predicted.idle),
        "predicted_with_others_s": None if predicted is None else keyed(predicted.with_others),
    }


def runs_of(recorded: dict) -> list[Run]:
    """The runs of a figures file (`figures`)."""
    return [Run(**{**r, "jobs": tuple(Job(**j) for j in r["jobs"])}) for r in recorded["runs"]]


__all__ = [
    "JOB",
    "MIN_QUIET",
    "OTHERS",
    "QUIET_CORES",
    "PROGRAM",
    "Job",
    "Prediction",
    "Run",
    "stack_text",
    "Summary",
    "figures",
    "job_argv",
    "job_text",
    "make_input",
    "measure",
    "measure_quiet",
    "other_cores",
    "quiet_reps",
    "select",
    "predict",
    "predict_runs",
    "predicted_slowdowns",
    "program_missing",
    "run_concurrent",
    "runs_of",
    "summary",
    "table",
]
