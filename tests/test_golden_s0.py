"""Golden run of the S0 study: a short deterministic sweep checked against S0's figures.

What the model reproduces is held within S0's +-15 % band; what it misses (see
docs/calibration-s0.md, which explains each miss) is held to the documented direction, so a
model change that moves a figure shows up here.
"""

from __future__ import annotations

import pytest

from vmio.study import experiment, runner


@pytest.fixture(scope="module")
def s0():
    exp = experiment.load_experiment("volumes-cache")
    return runner.run_study(exp, quick=True, parallel=2, progress_tty=False)


def mb_s(res, layout: str, cache: str, workload: str, bs: str, guest: str = "1") -> float:
    """A point's MB/s; `guest` "1" is fio's direct=1 in the guest (S0's Direct), "0" Cached."""
    coords = (("layout", layout), ("cache", cache), ("guest", guest))
    point = experiment.Point((*coords, ("workload", workload), ("bs", bs)))
    return res.value_mb_s(point)


def test_figures_the_model_reproduces_stay_within_fifteen_percent(s0):
    rows = {r.calibration.id: r for r in s0.calibration}
    for fid in ("A-linear-read", "A-raid0-read-32k", "B-randread-gain"):
        assert rows[fid].status == "PASS", (fid, rows[fid].simulated)
    assert abs(rows["A-linear-read"].simulated - 211) / 211 < 0.15


def test_case_a_linear_is_flat_and_striped_layouts_rise_with_block_size(s0):
    linear = [mb_s(s0, "linear", "none", "read", bs) for bs in ("32k", "1m", "8m")]
    assert max(linear) - min(linear) < 0.05 * max(linear)
    for layout in ("stripe", "raid0"):
        small = mb_s(s0, layout, "none", "read", "32k")
        large = mb_s(s0, layout, "none", "read", "8m")
        assert large > 1.5 * small
        assert large > 1.8 * linear[-1], "two disks stream in parallel"


def test_random_io_is_far_below_sequential_without_host_cache(s0):
    for layout in ("linear", "stripe", "raid0"):
        seq = mb_s(s0, layout, "none", "read", "32k")
        assert mb_s(s0, layout, "none", "randread", "32k") < 0.3 * seq


def test_the_host_cache_serves_reads_from_memory_and_helps_random_writes_less(s0):
    for layout in ("linear", "stripe", "raid0"):
        gain_read = mb_s(s0, layout, "writeback", "randread", "32k") / mb_s(
            s0, layout, "none", "randread", "32k"
        )
        gain_rw = mb_s(s0, layout, "writeback", "randrw", "32k") / mb_s(
            s0, layout, "none", "randrw", "32k"
        )
        assert gain_read > 10
        # Dirty pages must go back to the disks as random writes. (In this 2 s run the dirty
        # limit is barely reached; the 20 s study shows 58x against 330x at 32k.)
        assert gain_rw < 0.75 * gain_read
    # Same memory, same copies: every layout reads equally fast from the cache, so linear,
    # the slowest layout without cache, gains the most.
    b = [mb_s(s0, lay, "writeback", "read", "8m") for lay in ("linear", "stripe", "raid0")]
    assert max(b) - min(b) < 0.01 * max(b)
    assert 15_000 < b[0] < 25_000


def test_cached_reads_in_the_guest_use_its_read_ahead_and_its_cache(s0):
    # Cached (direct=0): the guest's read-ahead turns 32 KiB sequential reads into 128 KiB
    # requests that span both disks of a striped layout; random writes land in the guest
    # cache first (docs/calibration-s0.md, "Direct and Cached in the guest").
    for layout in ("stripe", "raid0"):
        direct = mb_s(s0, layout, "none", "read", "32k")
        cached = mb_s(s0, layout, "none", "read", "32k", guest="0")
        assert cached > 1.5 * direct, (layout, direct, cached)
    linear = mb_s(s0, "linear", "none", "read", "32k")
    assert abs(mb_s(s0, "linear", "none", "read", "32k", guest="0") - linear) < 0.05 * linear
    for layout in ("linear", "stripe", "raid0"):
        assert mb_s(s0, layout, "none", "randrw", "8m", guest="0") > mb_s(
            s0, layout, "none", "randrw", "8m"
        )


def test_documented_misses_keep_their_direction(s0):
    rows = {r.calibration.id: r for r in s0.calibration}
    # docs/calibration-s0.md: stripe at 32k and the striped maxima come out high; random I/O
    # at iodepth=1 comes out low; Case B's best block size slightly high.
    assert rows["A-stripe-read-32k"].simulated > 151
    assert rows["A-stripe-read-max"].simulated > 368.5
    assert rows["A-randread-32k"].simulated < 68
    assert rows["A-randrw-32k"].simulated < 35
