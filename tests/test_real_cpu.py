"""S4 on this machine (docs/cpu.md): N vs N+1 CPU-bound jobs natively on this machine, measured
(real bzip2 processes with fixed work) and predicted (the simulator's CFS, `hypervisor =
"native"`). scripts/real-cpu-jobs.py measures K = 1 .. nproc + 1 several times and records
tests/real_cpu_figures.json; these tests check the analysis on known runs, the recorded
file, a short real run, and the prediction against CFS's fair share."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import missing_tool
from vmio.real import cpu as realcpu
from vmio.real.cpu import Job, Run


def run(k: int, rep: int, walls: list[float], cpu: float = 1.0, other: float = 0.0) -> Run:
    return Run(k, rep, tuple(Job(k, rep, i, w, cpu) for i, w in enumerate(walls)), other, 0.5)


def test_the_slowdown_is_the_mean_wall_time_over_the_next_smaller_k_and_its_spread_per_rep():
    runs = [
        run(1, 0, [10.0]),
        run(2, 0, [10.0, 10.4]),
        run(3, 0, [15.0, 15.3, 15.6]),
        run(1, 1, [11.0]),
        run(2, 1, [11.0, 11.0]),
        run(3, 1, [16.5, 16.5, 16.5], other=0.5),
    ]
    s1, s2, s3 = realcpu.summary(runs)
    assert (s1.k, s1.jobs, s1.slowdown_pct, s1.slowdown_min_pct) == (1, 2, None, None)
    assert s1.wall_s == pytest.approx(10.5)
    # K = 2: mean of 10, 10.4, 11, 11 = 10.6 over 10.5; per rep: 10.2 / 10 and 11 / 11.
    assert s2.slowdown_pct == pytest.approx(100 * (10.6 / 10.5 - 1))
    assert (s2.slowdown_min_pct, s2.slowdown_max_pct) == pytest.approx((0.0, 2.0))
    # K = 3: 15.9 over 10.6; per rep 15.3 / 10.2 = +50 %, 16.5 / 11 = +50 %.
    assert s3.slowdown_pct == pytest.approx(100 * (15.9 / 10.6 - 1))
    assert (s3.slowdown_min_pct, s3.slowdown_max_pct) == pytest.approx((50.0, 50.0))
    assert (s3.wall_min_s, s3.wall_max_s, s3.other_cpu_s) == (15.0, 16.5, 0.25)
    # Others' cores: 0.5 s of other CPU over the 16.5 s run, 0 in the other run.
    assert s3.other_cores == pytest.approx(0.5 / 16.5 / 2)
    assert realcpu.predicted_slowdowns({1: 10.0, 2: 10.0, 3: 15.0}) == {2: 0.0, 3: 50.0}
    p = realcpu.Prediction({1: 10.0, 2: 10.0, 3: 15.0}, {1: 10.0, 2: 11.0, 3: 16.5})
    last = realcpu.table([s1, s2, s3], p, 2).splitlines()[-1].split()
    assert last[-6:] == ["15.00", "+50.00", "%", "16.50", "+50.00", "%"], last
    assert realcpu.runs_of(realcpu.figures(runs, p, {})) == runs


def test_the_figures_are_those_of_the_quiet_repetitions_when_there_are_enough():
    quiet = [run(k, rep, [10.0] * k, other=0.5) for rep in (0, 2, 3) for k in (1, 2)]
    # Repetition 1: another process took 3 s of CPU during the 10 s two-job run (0.3 cores).
    noisy = [run(1, 1, [10.0]), run(2, 1, [13.0, 13.0], other=3.0)]
    assert realcpu.other_cores(noisy[1]) == pytest.approx(3.0 / 13.0)
    runs = quiet + noisy
    assert realcpu.quiet_reps(runs) == [0, 2, 3]
    assert {r.rep for r in realcpu.select(runs)} == {0, 2, 3}
    assert realcpu.summary(realcpu.select(runs))[1].slowdown_pct == 0.0
    # Fewer than MIN_QUIET quiet repetitions: every run counts.
    assert realcpu.select(quiet[:4] + noisy) == quiet[:4] + noisy
    figures = realcpu.figures(runs, None, {})
    assert figures["quiet_reps"] == [0, 2, 3]
    assert figures["summary"][1]["slowdown_pct"] == 0.0


def test_the_input_is_the_same_text_for_the_same_seed_and_the_job_repeats_it(tmp_path: Path):
    a = realcpu.make_input(tmp_path / "a", 100_000, seed=7).read_bytes()
    b = realcpu.make_input(tmp_path / "b", 100_000, seed=7).read_bytes()
    c = realcpu.make_input(tmp_path / "c", 100_000, seed=8).read_bytes()
    assert len(a) == 100_000 and a == b and a != c
    assert set(a) <= set(b"abcdefghijklmnopqrstuvwxyz \n")
    assert realcpu.job_argv(tmp_path / "a", 3) == ["bzip2", "-9", "-c", *[str(tmp_path / "a")] * 3]
    with pytest.raises(ValueError, match="repeats: must be at least 1"):
        realcpu.job_argv(tmp_path / "a", 0)


def test_k_real_bzip2_jobs_do_the_same_work_and_one_more_than_the_cores_take_longer(
    tmp_path: Path,
):
    if (why := realcpu.program_missing()) is not None:
        missing_tool(why)
    cores = os.cpu_count() or 1
    data = realcpu.make_input(tmp_path / "input.txt", 1 << 20, seed=1)
    # About 0.75 s of CPU a job: long enough that a scheduler tick or a page-cache miss is
    # a small part of it.
    argv = realcpu.job_argv(data, 6)
    runs = realcpu.measure(argv, [1, cores + 1], reps=1)
    one, more = realcpu.summary(runs)
    assert (one.jobs, more.jobs) == (1, cores + 1)
    # Fixed work: every job's CPU time is about the single job's (+-50 %: shared caches and
    # frequency can move it, not by half).
    for j in runs[1].jobs:
        assert 0.5 * one.cpu_s < j.cpu_s < 1.5 * one.cpu_s, (j, one)
        assert j.wall_s >= 0.95 * j.cpu_s, j
    # cores + 1 jobs on `cores` cores: `cores` cores can give the jobs no more than `cores`
    # CPU-seconds per second, so the last ends no sooner than the jobs' own CPU times summed
    # over the cores (their CPU times, not the single job's: a job sharing the machine can run
    # faster or slower than alone; 5 % for the clocks' granularity).
    together = sum(j.cpu_s for j in runs[1].jobs)
    assert more.wall_max_s > 0.95 * together / cores, (one, more)
    # And it takes longer than a job alone: the extra job shares the cores.
    assert more.wall_max_s > one.wall_s, (one, more)


FIXTURE = Path(__file__).with_name("real_cpu_figures.json")


def test_the_recorded_figures_are_consistent_and_show_the_extra_job_sharing_the_cores():
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert {"how", "measured", "cores", "input", "runs", "summary", "predicted_s"} <= set(recorded)
    cores = recorded["cores"]
    runs = realcpu.runs_of(recorded)
    ks = sorted({r.k for r in runs})
    assert ks[0] == 1 and ks[-2:] == [cores, cores + 1]
    reps = {r.rep for r in runs}
    assert len(reps) >= 3
    assert sorted((r.k, r.rep) for r in runs) == sorted((k, rep) for k in ks for rep in reps)
    assert all(len(r.jobs) == r.k for r in runs)
    assert {"predicted_s", "predicted_with_others_s"} <= set(recorded)
    # The summary is the one the runs of the quiet repetitions (or all) give.
    assert recorded["quiet_reps"] == realcpu.quiet_reps(runs)
    assert recorded["summary"] == [s.__dict__ for s in realcpu.summary(realcpu.select(runs))]
    # The input is the one make_input writes for its size and seed.
    inp = recorded["input"]
    assert inp["repeats"] >= 1 and inp["argv"][:3] == list(realcpu.PROGRAM)
    last = realcpu.summary(realcpu.select(runs))[-1]
    # One job more than cores: at least half of the fair-share slowdown (cores + 1) / cores.
    assert last.slowdown_pct > 0.5 * 100 / cores, last


def test_the_input_recorded_is_reproducible(tmp_path: Path):
    inp = json.loads(FIXTURE.read_text(encoding="utf-8"))["input"]
    data = realcpu.make_input(tmp_path / "i", inp["bytes"], inp["seed"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == inp["sha256"]


def test_the_others_load_is_a_cpuio_section_of_whole_threads_at_the_measured_share():
    text = realcpu.job_text(3, 5.0, other_cores=1.5)
    assert "[bzip2]\ncpu_profile=bzip2\ncpu_work=5000ms\nnumjobs=3\n" in text
    assert "[others]\nioengine=cpuio\ncpuload=75\nnumjobs=2\nruntime=30000ms\n" in text
    assert "[others]" not in realcpu.job_text(3, 5.0, other_cores=0.005)


def test_the_simulator_predicts_cfs_fair_share_for_n_and_n_plus_one_jobs():
    """On 2 cores: 1 and 2 jobs each have a core; 3 jobs share 2 cores, 2/3 of a core each,
    so they take at least 3/2 as long (CFS's fair share), plus the hot-set refill after each
    of CFS's balancing migrations (the bzip2 profile's migration cost) and the host's
    housekeeping: a few percent more, not tens."""
    predicted = realcpu.predict(2, 5.0, [1, 2, 3])
    assert predicted[1] == pytest.approx(5.0, rel=0.01)
    slow = realcpu.predicted_slowdowns(predicted)
    assert slow[2] == pytest.approx(0.0, abs=1.0)
    assert 50.0 <= slow[3] <= 60.0, slow
    # Another process busy 50 % of the time on the single job's machine: the job keeps a core.
    loaded = realcpu.predict(2, 5.0, [1], other_cores={1: 0.5})
    assert loaded[1] == pytest.approx(5.0, rel=0.01)
