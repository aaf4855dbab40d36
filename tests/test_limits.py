"""Every simulation has bounds (`--max-events`, `--max-sim-time`; `max_events=`,
`max_sim_time=` in `vmio.simulate`): past one, one error line naming it and its flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

import vmio
from vmio.sim import VmioError

STACK = """\
[[device]]
name = "r"
model = "ram"
capacity = "4t"

[[volume]]
name = "v"
layout = "single"
devices = ["r"]

[[vm]]
name = "vm1"
memory = "1g"

[[vm.disk]]
name = "vdb"
volume = "v"
size = "4t"
cache = "none"
"""
LONG = "[j]\nrw=randread\nbs=4k\ndirect=1\nruntime=3600\ntime_based\n"


def vmio_cmd(tmp_path, *args):
    (tmp_path / "stack.toml").write_text(STACK)
    return subprocess.run(
        [sys.executable, "-m", "vmio", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_vmio_fio_at_one_byte_a_second_over_4_tb_ends_with_one_line_naming_the_rate_and_bound(
    tmp_path,
):
    # fio's usec_for_io: the second 4 KiB write may go at 4096 s, past a bound of 1 h.
    r = vmio_cmd(
        tmp_path, "fio", "--stack", "stack.toml", "--name=j", "--rw=write", "--bs=4k",
        "--rate=1", "--max-sim-time=1h",
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "vmio: error: job 'j': its rate (rate= or rate_iops=) holds its next I/O until "
        "4096.000 s, past the bound on simulated time, 3600.000 s (--max-sim-time; "
        "max_sim_time= in vmio.simulate); accepted: a higher rate, a smaller size or runtime, "
        "or a larger bound"
    ]


def test_vmio_sim_past_max_events_ends_with_one_line_naming_the_flag(tmp_path):
    (tmp_path / "j.fio").write_text(LONG)
    r = vmio_cmd(tmp_path, "sim", "--stack", "stack.toml", "j.fio", "--max-events", "5000")
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith(
        "vmio: error: the simulation passed its bound of 5000 events (--max-events; "
    )
    assert "Traceback" not in r.stderr


def test_the_python_api_takes_the_same_bounds_as_keywords():
    with pytest.raises(VmioError, match=r"^the simulation passed its bound of 5000 events"):
        vmio.simulate(STACK, LONG, max_events=5000)
    with pytest.raises(VmioError, match=r"bound on simulated time, 2\.000 s \(--max-sim-time"):
        vmio.simulate(STACK, LONG, max_sim_time="2s")
    # A bare number is seconds, as fio's runtime.
    with pytest.raises(VmioError, match=r"bound on simulated time, 2\.000 s"):
        vmio.simulate(STACK, LONG, max_sim_time=2)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_events": 0}, "--max-events (max_events=): 0; accepted: a count of at least 1"),
        ({"max_events": True}, "--max-events (max_events=): True; accepted"),
        ({"max_events": 2**64}, "--max-events (max_events=): more than 2^64-1 events"),
        ({"max_sim_time": "abc"}, "--max-sim-time (max_sim_time=): 'abc' is not a positive"),
        ({"max_sim_time": "0"}, "--max-sim-time (max_sim_time=): '0' is not a positive"),
        ({"max_sim_time": [1]}, "--max-sim-time (max_sim_time=): [1]; accepted"),
    ],
)
def test_a_bound_that_is_not_one_is_one_line_saying_what_is_accepted(kw, message):
    with pytest.raises(VmioError) as err:
        vmio.simulate(STACK, LONG, **kw)
    assert str(err.value).startswith(message), str(err.value)


def test_a_run_within_its_bounds_is_the_same_with_them_given_or_left_to_their_defaults():
    short = LONG.replace("runtime=3600", "runtime=1")
    plain = vmio.simulate(STACK, short).fio
    bounded = vmio.simulate(STACK, short, max_events=10**10, max_sim_time="36500d").fio
    assert plain == bounded


def test_a_study_takes_the_same_bounds_and_a_point_past_one_is_its_error(tmp_path):
    exp = vmio.load_experiment("volumes-cache")
    with pytest.raises(VmioError, match=r"^the simulation passed its bound of 1000 events"):
        vmio.run_study(exp, quick=True, progress=None, max_events=1000)
    with pytest.raises(VmioError, match=r"^--max-sim-time \(max_sim_time=\): 'x' is not"):
        vmio.run_study(exp, quick=True, progress=None, max_sim_time="x")
    r = subprocess.run(
        [sys.executable, "-m", "vmio", "study", "volumes-cache", "--quick", "--out",
         str(tmp_path / "out"), "--max-events", "1000"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].startswith(
        "vmio: error: the simulation passed its bound of 1000 events (--max-events; "
    )
    assert "Traceback" not in r.stderr


def test_a_point_sent_to_a_dask_worker_carries_its_bounds():
    # vmio.study.cluster.SimTask is what a worker receives: the bounds travel with it, for a
    # point of one job and for a point whose VMs run their own workloads.
    from vmio.sim import Limits
    from vmio.study.cluster import SimTask

    bounded = Limits(max_events=5000)
    one = SimTask(STACK, "stack.toml", LONG, "j.fio", None, 1, None, bounded)
    with pytest.raises(VmioError, match=r"^the simulation passed its bound of 5000 events"):
        one.run()
    many = SimTask(STACK, "stack.toml", None, "", (("vm1", LONG, "j.fio"),), 1, None, bounded)
    with pytest.raises(VmioError, match=r"^the simulation passed its bound of 5000 events"):
        many.run()
