"""N vs N+1 CPU-bound jobs natively on this machine, measured and predicted (issue #12 item 6,
second half; S4's 3 vs 4 jobs on a quad core, here around this machine's `nproc`).

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
```

Predicted. The simulator runs the same K jobs (`predict`): `hypervisor = "native"`,
`cores = nproc`, `[cpu] model = "cfs"`, a job section with `cpu_profile=bzip2`, `cpu_work`
= the measured single-job time (mean wall_s at K = 1, which is its CPU time on an idle core),
`numjobs = K`; its fio JSON's mean `job_runtime` is the predicted wall time.

What to expect: up to nproc jobs each has a core (slowdown ~0 but for shared caches and
memory bandwidth, and the machine's other load); nproc + 1 jobs share nproc cores fairly,
so each runs (nproc + 1) / nproc times longer (+50 % on 2 cores) under CFS's fair share.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from vmio import report
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


def measure(argv: Sequence[str], ks: Sequence[int], reps: int) -> list[Run]:
    """`reps` repetitions, each running every K of `ks` in turn."""
    return [run_concurrent(argv, k, rep) for rep in range(reps) for k in ks]


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
                slowdown_pct=slow,
                slowdown_min_pct=None if per_rep is None else min(per_rep),
                slowdown_max_pct=None if per_rep is None else max(per_rep),
            )
        )
    return out


STACK = """\
# This machine as the simulator sees it for vmio.realcpu: its cores shared by CFS, no VMM.
[host]
cores = {cores}
hypervisor = "native"

[cpu]
model = "cfs"

[[device]]
name = "sda"
model = "ssd"
profile = "samsung-840pro-256g"

[[volume]]
name = "data"
layout = "single"
devices = ["sda"]

[[vm]]
name = "host"

[[vm.disk]]
name = "sda"
volume = "data"
size = "10g"
"""

JOB = """\
; {k} concurrent copies of a bzip2-like job with {work_ms} ms of CPU work each (vmio.realcpu)
[cpu]
cpu_profile=bzip2
cpu_work={work_ms}ms
numjobs={k}
"""


def predict(cores: int, single_s: float, ks: Sequence[int], seed: int = 1) -> dict[int, float]:
    """The simulator's mean job run time (s) for each K (module doc)."""
    out = {}
    stack = STACK.format(cores=cores)
    for k in ks:
        job = JOB.format(k=k, work_ms=round(single_s * 1000))
        result = json.loads(simulate_text(stack, "realcpu-stack.toml", job, "realcpu.fio", seed))
        out[k] = statistics.fmean(j["job_runtime"] for j in result["jobs"]) / 1000
    return out


def predicted_slowdowns(predicted: dict[int, float]) -> dict[int, float]:
    """Slowdown (%) of each K over the next smaller K of `predicted`."""
    ks = sorted(predicted)
    return {k: 100 * (predicted[k] / predicted[p] - 1) for p, k in itertools.pairwise(ks)}


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(summaries: Sequence[Summary], predicted: dict[int, float] | None, cores: int) -> str:
    """Measured vs predicted, one row per K."""
    slow = predicted_slowdowns(predicted) if predicted else {}
    header = [
        "jobs",
        "wall s",
        "min..max s",
        "cpu s",
        "others' cpu s",
        "slowdown vs K-1",
        "spread (reps)",
        "predicted s",
        "predicted slowdown",
    ]
    body = [
        [
            str(s.k),
            f"{s.wall_s:.2f}",
            f"{s.wall_min_s:.2f}..{s.wall_max_s:.2f}",
            f"{s.cpu_s:.2f}",
            f"{s.other_cpu_s:.2f}",
            _f(s.slowdown_pct, "+.2f") + (" %" if s.slowdown_pct is not None else ""),
            "-"
            if s.slowdown_min_pct is None
            else f"{s.slowdown_min_pct:+.2f}..{s.slowdown_max_pct:+.2f} %",
            _f(None if not predicted else predicted.get(s.k), ".2f"),
            _f(slow.get(s.k), "+.2f") + (" %" if s.k in slow else ""),
        ]
        for s in summaries
    ]
    return (
        f"{' '.join(PROGRAM)} jobs on this machine's {cores} cores, measured vs simulated "
        "(hypervisor native, [cpu] model cfs)\n" + report.text_table(header, body)
    )


def figures(runs: Sequence[Run], predicted: dict[int, float] | None, meta: dict) -> dict:
    """What tests/real_cpu_figures.json holds: `meta` (how, measured, input), every job,
    the summary and the prediction."""
    return {
        **meta,
        "runs": [asdict(r) for r in runs],
        "summary": [asdict(s) for s in summary(runs)],
        "predicted_s": None if predicted is None else {str(k): v for k, v in predicted.items()},
    }


def runs_of(recorded: dict) -> list[Run]:
    """The runs of a figures file (`figures`)."""
    return [Run(**{**r, "jobs": tuple(Job(**j) for j in r["jobs"])}) for r in recorded["runs"]]


__all__ = [
    "JOB",
    "PROGRAM",
    "STACK",
    "Job",
    "Run",
    "Summary",
    "figures",
    "job_argv",
    "make_input",
    "measure",
    "predict",
    "predicted_slowdowns",
    "program_missing",
    "run_concurrent",
    "runs_of",
    "summary",
    "table",
]
