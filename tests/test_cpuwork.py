"""The CPU time per request of an I/O path (python/vmio/real/cpuwork.py): /proc/stat's busy
fields, the window taken back from fio's exit, the background subtracted, and the least
relative squares line of cpu + bytes / cpu_rate, each against its closed form on synthetic
samples. No tool and no simulator run here (the real runs are in test_calserve.py and
test_hostfscal.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmio.real import cpuwork
from vmio.real.calibrate import CalibrateError

KIB, MIB = 1024, 1024 * 1024


def test_busy_time_is_user_nice_system_irq_softirq_and_steal_of_the_cpu_line(tmp_path: Path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 50 1000 20 3 7 2 40 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
    hz = os.sysconf("SC_CLK_TCK")
    assert cpuwork.busy_s(stat) == pytest.approx((100 + 5 + 50 + 3 + 7 + 2) / hz)
    assert cpuwork.cores() == len(os.sched_getaffinity(0))


class FakeStat:
    """A machine whose busy time grows at `rate(t)` cores: busy(t) its integral, sampled by a
    Sampler on a clock the test sets."""

    def __init__(self, pieces: list[tuple[float, float]]) -> None:
        self.pieces = pieces  # (from t, cores busy) in time order
        self.t = 0.0

    def busy(self) -> float:
        total, edges = 0.0, [*self.pieces, (float("inf"), 0.0)]
        for (t0, rate), (t1, _) in zip(edges, edges[1:], strict=False):
            if self.t <= t0:
                break
            total += rate * (min(self.t, t1) - t0)
        return total


def sampled(fake: FakeStat, until: float, step: float = 0.01) -> cpuwork.Sampler:
    s = cpuwork.Sampler(read=fake.busy, clock=lambda: fake.t)
    n = round(until / step)
    for i in range(n + 1):
        fake.t = i * step
        s.mark()
    return s


def test_a_runs_window_is_taken_back_from_its_exit_and_the_background_is_subtracted():
    # 0-1 s idle (0.1 cores of others), 1-1.5 s fio's start-up (1.0 core), 1.5-3.5 s the
    # steady run (1.6 cores: 0.1 others + 1.5 the path), exit at 3.52 s, then idle again.
    fake = FakeStat([(0.0, 0.1), (1.0, 1.0), (1.5, 1.6), (3.52, 0.1)])
    s = sampled(fake, 5.0)
    s.idle.append(s.between(0.0, 1.0))
    s.idle.append(s.between(4.0, 5.0))
    assert s.background() == pytest.approx(0.1)
    # The window of a 2 s run that exited at 3.52: margins max(0.05, 0.2) = 0.2 s each side.
    seconds, busy = s.run_window(3.52, 2.0)
    assert seconds == pytest.approx(1.6, abs=0.011) and busy == pytest.approx(1.6 * seconds)
    # 20,000 IOPS: cpu = (1.6 - 0.1) cores / 20,000 = 75 us a request, start-up excluded.
    load = cpuwork.Load.of(s, 3.52, 2.0, 20_000.0, 2)
    assert load.cpu_ns == pytest.approx(75_000, rel=1e-6)
    assert load.busy_share == pytest.approx(0.8, rel=1e-6)
    rec = load.record()
    assert rec["background_share"] == pytest.approx(0.05) and rec["cpu_ns"] == load.cpu_ns
    # A window that starts at the launch would count the start-up: more CPU per request.
    whole = s.between(1.0, 3.52)
    assert (whole[1] - 0.1 * whole[0]) / (20_000 * 2.0) * 1e9 > 80_000


def test_a_run_too_short_for_its_margins_has_no_window_and_says_so():
    fake = FakeStat([(0.0, 1.0)])
    s = sampled(fake, 1.0, step=0.2)
    with pytest.raises(CalibrateError, match="has no CPU window"):
        cpuwork.Load.of(s, 0.5, 0.1, 1000.0, 2)


def test_the_cpu_line_is_recovered_from_points_on_it():
    cpu, rate = 30_000.0, 500e6
    pts = [(bs, cpu + bs * 1e9 / rate) for bs in (4 * KIB, 128 * KIB, MIB) for _ in ("r", "w")]
    f = cpuwork.fit(pts, "test")
    assert (f.cpu_ns, f.notes) == (30_000, ())
    assert f.cpu_rate == pytest.approx(rate, rel=1e-6)
    assert f.at(4 * KIB) == pytest.approx(cpu + 4 * KIB * 1e9 / rate, rel=1e-6)


def test_the_least_relative_squares_weigh_each_point_by_its_own_size():
    # Two directions at two sizes whose lines differ: the fit is the closed form of `line`
    # with one group, w = 1 / y^2.
    pts = [(4 * KIB, 20_000.0), (4 * KIB, 30_000.0), (MIB, 2.0e6), (MIB, 2.4e6)]
    w = [1 / y**2 for _, y in pts]
    a = sum(wi * x * y for wi, (x, y) in zip(w, pts, strict=True))
    b = sum(wi * x for wi, (x, _) in zip(w, pts, strict=True))
    c = sum(wi * x * x for wi, (x, _) in zip(w, pts, strict=True))
    cpu = (sum(wi * y for wi, (_, y) in zip(w, pts, strict=True)) - a * b / c) / (
        sum(w) - b * b / c
    )
    slope = (a - cpu * b) / c
    f = cpuwork.fit(pts, "test")
    assert f.cpu_ns == round(cpu) and f.cpu_rate == round(1e9 / slope)


def test_a_cpu_that_does_not_grow_with_the_size_has_no_rate_and_a_note():
    pts = [(4 * KIB, 40_000.0), (MIB, 30_000.0)]
    f = cpuwork.fit(pts, "the test's CPU")
    const = (1 / 40_000 + 1 / 30_000) / (1 / 40_000**2 + 1 / 30_000**2)
    assert (f.cpu_ns, f.cpu_rate) == (round(const), 0)
    assert f.notes and f.notes[0].startswith("the test's CPU: the CPU per request does not grow")
    assert f.at(MIB) == f.cpu_ns
    # A line through below 0 is cpu 0, the slope through the origin, a note.
    g = cpuwork.fit([(4 * KIB, 1_000.0), (MIB, 2.0e6)], "t")
    assert g.cpu_ns == 0 and g.cpu_rate > 0 and "crosses below 0" in g.notes[0]
    with pytest.raises(CalibrateError, match="points of two sizes"):
        cpuwork.fit([(4 * KIB, 1.0), (4 * KIB, 2.0)], "t")


def test_the_tables_write_the_keys_as_a_stack_does():
    f = cpuwork.CpuFit(30_000, 500_000_000)
    assert cpuwork.table(2, f) == {"cores": 2, "cpu": "30000ns", "cpu_rate": 500_000_000}
    assert cpuwork.io_table(f) == {"cpu": "30000ns", "cpu_rate": 500_000_000}
    assert cpuwork.background_note(0.1, "x") is None
    assert "0.50 cores busy" in (cpuwork.background_note(0.5, "x") or "")
