"""`vmio calibrate` (vmio.real.calibrate): the fit held to the flash model's closed forms on
synthetic measurements, round trips on a RAM-backed file and on a loop device (fio, the fit,
stack.toml run by `vmio sim`), the read-only and in-use guards of block devices, the budget's
schedule and the error lines.

Tolerance of the round trips (RAM-backed targets: /dev/shm and a loop device on it):
- the points the fit is anchored on are exact: the rate points (1m at QD32, the only
  bs >= 64k QD >= 8 points of --quick) within 1 % in the model, 5 % in vmio sim;
- vmio sim runs what was fitted: its bandwidth within 5 % of the closed form's, median over
  the battery (both hold the native host's per-request path, 1.5 us);
- measured against the model: median absolute relative error of bandwidth at most 100 %
  (a factor of 2). These targets are synchronous (the copy runs in fio's thread), which the
  model cannot express: its loaded points come out up to 2x the QD1 figure (calibrate's
  module doc) while the measured ones stay flat or fall; and the battery's sub-second points
  run on 2 cores shared with builds (a loop device's 4k QD1 read took 23 us alone and
  228 us within a battery at load 8; 1m reads on /dev/shm at QD32 half their QD1 rate).
  Quick calibrations here gave medians of 31 % and 51 % (tmpfs), 35 % and 65 % (loop)
  depending on the load. A factor of 2 still fails a rate or latency off by an order of
  magnitude (a unit slip), a swapped direction or a stack that does not hold the fit; the
  fit's arithmetic is held exactly by this file's synthetic tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import finish, missing_tool, require_tool, run_vmio
from vmio import cli, stackfile
from vmio.real import calibrate
from vmio.real.calibrate import KIB, MIB, CalibrateError, Job, Point, Side
from vmio.sim import simulate_text

TOLERANCE = 1.0

# A device the fit must recover: the link equals the larger direction's rate (the battery
# cannot see a faster link, module doc), random 4k reads at QD >= 16 are unit-bound, and a
# 5 us set-up a command on one pipe shared by both directions (64k writes at QD >= 8 and
# the large mixes are bound by it).
KNOWN = {
    "capacity": 1 << 30,
    "units": 8,
    "read_latency": 80_000,
    "write_latency": 20_000,
    "read_rate": 3_000_000_000,
    "write_rate": 2_000_000_000,
    "link_rate": 3_000_000_000,
    "duplex": "half",
    "transfer_overhead": 5_000,
    "write_buffer": 0,
    "queue_depth": 256,
    "flush_latency": 50_000,
}


def synthetic(params: dict[str, int], job: Job) -> Point:
    """The point the flash model's closed forms give for `job` (as fio would report it)."""
    if job.fdatasync:
        flush = calibrate.predicted(params, job)[1]
        w = Side(1e9 / flush, 4 * KIB * 1e9 / flush, 1.0, 1.0, 1.0)
        return Point(job, 1 << 30, 1.0, None, w, flush, {})
    x = calibrate.throughput(params, job)
    lat = job.iodepth / x * 1e9
    share = {"read": 1.0, "write": 0.0, "mixed": (job.rwmixread or 0) / 100}[job.direction]

    def side(f: float) -> Side | None:
        return Side(f * x, f * x * job.bs, lat, lat, lat) if f > 0 else None

    return Point(job, 1 << 30, 1.0, side(share), side(1 - share), None, {})


def test_the_closed_forms_give_the_hand_computed_figures_of_the_spec():
    # The native host's path, a delay in every round trip: vdisk's `host` submission.
    assert calibrate.host_path_ns() == 1_500
    h = 1.5e-6
    # randread 4k QD1: 1 / (h + 80 us + 5 us + 4096 B / 3 GB/s) requests per second.
    qd1 = calibrate.throughput(KNOWN, Job("r", "randread", 4 * KIB, 1))
    assert qd1 == pytest.approx(1 / (h + 80e-6 + 5e-6 + 4096 / 3e9))
    # QD32: the 8 units bound it, 8 / 80 us.
    assert calibrate.throughput(KNOWN, Job("r", "randread", 4 * KIB, 32)) == pytest.approx(1e5)
    # 1m writes at QD32: the write pipe, 1 / (5 us + 1 MiB / 2 GB/s).
    w1m = calibrate.throughput(KNOWN, Job("w", "write", MIB, 32))
    assert w1m == pytest.approx(1 / (5e-6 + MIB / 2e9))
    # 70/30 4k at QD8: 8 / (h + 0.7 * 80 + 0.3 * 20 us + the mean transfer), under 8 / a_m.
    mixed = calibrate.throughput(KNOWN, Job("m", "randrw", 4 * KIB, 8, 70))
    t_m = 0.7 * 4096 / 3e9 + 0.3 * 4096 / 2e9
    assert mixed == pytest.approx(8 / (h + 62e-6 + 5e-6 + t_m))
    # 64k writes at QD32: the pipe with its set-up, 1 / (c + L / write_rate).
    w64 = calibrate.throughput(KNOWN, Job("w", "write", 64 * KIB, 32))
    assert w64 == pytest.approx(1 / (5e-6 + 65536 / 2e9))
    # A 50/50 mix of 256k: half duplex, one pipe time a command, 1 / (c + L/2r + L/2w);
    # full duplex, the slower (writes') pipe, 1 / (0.5 (c + L / w)), or the link, here
    # 3 GB/s / L, below it.
    mix = Job("m", "rw", 256 * KIB, 8, 50)
    big = 256 * KIB
    half = calibrate.throughput(KNOWN, mix)
    assert half == pytest.approx(1 / (5e-6 + 0.5 * big / 3e9 + 0.5 * big / 2e9))
    full = {**KNOWN, "duplex": "full"}
    assert calibrate.throughput(full, mix) == pytest.approx(3e9 / big)
    fast_link = {**full, "link_rate": 8_000_000_000}
    assert calibrate.throughput(fast_link, mix) == pytest.approx(1 / (0.5 * (5e-6 + big / 2e9)))


# A RAM-backed file's fit on a loaded machine (a quick calibration of /dev/shm here): unit
# times at the 5 us bound, rare and long stalls (9e-5, 36.7 ms), spreads at their bound.
RAM_FIT = {
    "capacity": 64 * MIB,
    "units": 2,
    "read_latency": 5_069,
    "write_latency": 5_067,
    "read_rate": 3_028_843_115,
    "write_rate": 2_764_272_130,
    "link_rate": 3_343_176_204,
    "duplex": "half",
    "transfer_overhead": 0,
    "turnaround": 0,
    "batch_overhead": 0,
    "command_overhead": 0,
    "write_buffer": 0,
    "queue_depth": 128,
    "stall_probability": 9e-05,
    "stall_time": 36_711_320,
    "stall_spread": 0.0,
    "stall_floor": 0.0,
    "flush_latency": 459,
    "read_spread": 0.5,
    "read_floor": 0.9628,
    "write_spread": 0.5,
    "write_floor": 0.9638,
}


def test_vmio_sim_of_a_fit_at_its_bounds_meets_the_closed_forms_point_by_point():
    # The round trip's sim-vs-model check, deterministic: the stack calibrate writes for
    # RAM_FIT, each point simulated as fit.txt does (calibrate.simulate's runtime), at two
    # seeds. The closed forms hold the native host's path (1.5 us at QD1 4k: -13 %), and the
    # stalls are stratified (a 0.5 s run held a Poisson count of about 11: -23 % to +23 %).
    dev = {"name": "shm", "model": "flash"}
    dev |= {k: f"{v}ns" if k in calibrate.durations() else v for k, v in RAM_FIT.items()}
    dev |= {"write_cache": False, "fua": False}
    doc = {
        "host": {"cores": 2, "hypervisor": "native"},
        "device": [dev],
        "volume": [{"name": "shm", "layout": "single", "devices": ["shm"]}],
        "scheduler": {"name": "none"},
        "vm": [
            {
                "name": "host",
                "disk": [{"name": "shm", "volume": "shm", "interface": "host", "cache": "none"}],
            }
        ],
    }
    stack = stackfile.render(doc, ["RAM_FIT"])
    names = ("randread-4k-qd1", "randwrite-4k-qd1", "randread-4k-qd8", "randrw-4k-qd8")
    names += ("read-1m-qd1", "rw-256k-qd8")
    jobs = [j for j in calibrate.battery(quick=True) if j.name in names]
    assert len(jobs) == len(names)
    for seed in (1, 2):
        for job in jobs:
            ms = calibrate.sim_runtime_ms(RAM_FIT, job)
            p = Point(job, 64 * MIB, ms / 1000, None, None, None, {})
            text = calibrate.job_text(p, ms)
            got = json.loads(simulate_text(stack, "stack.toml", text, "job.fio", seed=seed))
            sim = calibrate.point_of(job, 64 * MIB, ms / 1000, got["jobs"][0])
            bw, lat = calibrate.predicted(RAM_FIT, job)
            assert sim.bw_bytes == pytest.approx(bw, rel=0.02), (seed, job.name)
            assert sim.lat_mean_ns == pytest.approx(lat, rel=0.02), (seed, job.name)


def same(got: dict, want: dict) -> None:
    """Every parameter of `want` in `got`: numbers within 2 (ns, bytes) or a millionth,
    names equal."""
    for key, w in want.items():
        if isinstance(w, str):
            assert got[key] == w, key
        else:
            assert got[key] == pytest.approx(w, rel=1e-6, abs=2), key


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("duplex", ["half", "full"])
def test_the_fit_recovers_known_parameters_from_closed_form_measurements(quick: bool, duplex: str):
    known = {**KNOWN, "duplex": duplex}
    points = [synthetic(known, j) for j in calibrate.battery(quick)]
    got = calibrate.fit(points, known["capacity"], known["queue_depth"])
    assert got.notes == ()
    same(got.params, known)
    # And the fitted model reproduces every point.
    sm = calibrate.summary(got.params, points, None)
    assert sm["bw_model"] < 1e-6 and sm["lat_model"] < 1e-6


def test_the_processor_bound_is_the_lone_commands_round_trip_at_q1_and_one_over_k_at_depth():
    b, k, r0 = 40e-6, 10e-6, 50e-6
    # No processor: the queue or the cap.
    assert calibrate.processor_x(8, 0.0, 0.0, r0, 1e9) == pytest.approx(8 / r0)
    assert calibrate.processor_x(8, 0.0, 0.0, r0, 1e4) == 1e4
    # One command: a batch of one, b + k, then the rest.
    assert calibrate.processor_x(1, b, k, r0, 1e9) == pytest.approx(1 / (b + k + r0))
    xs = [calibrate.processor_x(q, b, k, r0, 1e9) for q in (1, 2, 4, 8, 16, 32, 256)]
    # Throughput grows with depth, and gradually: at q = 2 less than twice q = 1's, as the
    # second command waits for the first's batch.
    assert all(x1 < x2 for x1, x2 in zip(xs, xs[1:], strict=False))
    assert xs[1] < 1.9 * xs[0]
    # At depth batches are long and b is shared: close to 1 / k, never above.
    assert 0.9 / k < xs[-1] <= 1 / k
    # A cap below all that binds.
    assert calibrate.processor_x(32, b, k, r0, 5e4) == pytest.approx(5e4)


def test_the_rates_are_the_line_through_every_saturated_point():
    # Two saturated reads on the line 1 / X = 7 us + L / 1 GB/s, and a third 10 % slower:
    # the least relative squares put the rate between, and for c = 7 us exactly the line's
    # when the outlier is left out.
    line = [(64 * KIB, 8), (1 * MIB, 32)]
    pts = [
        Point(
            Job(f"r{bs}", "read", bs, q),
            1 << 30,
            1.0,
            Side(1 / (7e-6 + bs / 1e9), bs / (7e-6 + bs / 1e9), 1.0, 1.0, 1.0),
            None,
            None,
            {},
        )
        for bs, q in line
    ]
    d = calibrate._Direction.of(pts, "read")
    assert d.rate(7e-6) == pytest.approx(1e9)
    slow = replace(pts[1], read=replace(pts[1].read, iops=pts[1].read.iops / 1.1))
    rate = calibrate._Direction.of([pts[0], slow], "read").rate(7e-6)
    assert 1e9 / 1.1 < rate < 1e9


def test_a_device_with_a_batching_processor_is_fitted_to_every_point():
    known = {
        **KNOWN,
        "units": 64,
        "read_latency": 40_000,
        "transfer_overhead": 2_000,
        "batch_overhead": 40_000,
        "command_overhead": 8_000,
    }
    points = [synthetic(known, j) for j in calibrate.battery()]
    got = calibrate.fit(points, known["capacity"], known["queue_depth"]).params
    assert got["batch_overhead"] > 0 and got["command_overhead"] > 0
    # The parameters are not unique (units matter little behind a processor), the figures
    # are: every point within 1 %, the fdatasync's too.
    sm = calibrate.summary(got, points, None)
    assert sm["bw_model"] < 0.01 and sm["lat_model"] < 0.01
    flush = Job("f", "randwrite", 4 * KIB, 1, fdatasync=True)
    assert calibrate.predicted(got, flush)[1] == pytest.approx(
        calibrate.predicted(known, flush)[1], rel=0.01
    )


def test_the_units_follow_the_loaded_points_in_log_terms():
    # Measurements of 6 units, then 30 % less throughput on the loaded 4k reads: the fit
    # moves to fewer units (a compromise with the writes, which still show 6).
    base = {**KNOWN, "units": 6}
    points = []
    for j in calibrate.battery():
        p = synthetic(base, j)
        if j.iodepth > 1 and j.direction == "read" and j.bs == 4 * KIB and p.read:
            slow = replace(p.read, iops=0.7 * p.read.iops, bw_bytes=0.7 * p.read.bw_bytes)
            p = replace(p, read=slow)
        points.append(p)
    units = calibrate.fit(points, 1 << 30, 256).params["units"]
    assert 1 <= units < 6


def test_without_writes_the_fit_copies_the_reads_figures_and_says_so():
    points = [synthetic(KNOWN, j) for j in calibrate.battery(writes=False)]
    got = calibrate.fit(points, KNOWN["capacity"], 128)
    p = got.params
    assert (p["write_latency"], p["write_rate"]) == (p["read_latency"], p["read_rate"])
    assert "flush_latency" not in p
    assert any("reads only" in n for n in got.notes)
    assert any("flush_latency" in n for n in got.notes)


def test_a_fit_without_a_large_loaded_point_names_what_is_missing():
    points = [synthetic(KNOWN, j) for j in calibrate.battery() if j.bs < 64 * KIB]
    with pytest.raises(CalibrateError, match=r"no read point with bs >= 64k at QD >= 8"):
        calibrate.fit(points, 1 << 30, 128)


def test_the_schedule_shares_the_time_left_among_the_points_left_minus_fios_start_up():
    now = [0.0]
    s = calibrate.Schedule(100.0, clock=lambda: now[0])
    assert s.runtime_ms(10) == round(1000 * (10 - calibrate.FIO_STARTUP_S))
    s.finished(wall_s=10.0, runtime_s=9.0)  # fio took 1 s beyond its run
    now[0] = 10.0
    assert s.runtime_ms(9) == 9000
    now[0] = 99.0  # late: every point still gets the shortest run
    assert s.runtime_ms(5) == round(1000 * calibrate.MIN_RUNTIME_S)


def test_a_points_job_for_vmio_sim_is_direct_and_keeps_the_battery_options():
    job = Job("randrw-4k-qd8", "randrw", 4 * KIB, 8, 70)
    text = calibrate.job_text(Point(job, 64 * MIB, 1.0, None, None, None, {}))
    assert text.splitlines()[0] == "[randrw-4k-qd8]"
    for line in ("rw=randrw", "bs=4096", "iodepth=8", "direct=1", "rwmixread=70"):
        assert line in text.splitlines()
    assert f"size={64 * MIB}" in text and "runtime=500ms" in text


def sysfs_caps(directory: Path) -> dict[str, bool] | None:
    """write_cache and fua of the disk under `directory`, read here from sysfs
    (/sys/dev/block/<major:minor> of its st_dev, a partition's disk's queue); None when its
    filesystem is on no block device."""
    st = os.stat(directory)
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not dev.is_dir():
        return None
    dev = dev.resolve()
    q = (dev.parent if (dev / "partition").is_file() else dev) / "queue"
    return {
        "write_cache": (q / "write_cache").read_text().strip() == "write back",
        "fua": (q / "fua").read_text().strip() == "1",
    }


def fitted_device(target_path: Path) -> tuple[dict, str]:
    """The `[[device]]` of the stack calibrate writes for a file target (a fixed fit), and
    the stack's text."""
    target = calibrate.open_target(target_path, 64 * MIB, True, False)
    text = calibrate.stack_toml(calibrate.Fit(KNOWN, ()), target, 2, "now")
    return tomllib.loads(text)["device"][0], text


def test_the_fitted_device_states_the_write_cache_and_fua_of_the_disk_under_the_target(
    tmp_path: Path,
):
    want = sysfs_caps(tmp_path)
    if want is None:
        pytest.skip(f"{tmp_path} is on no block device")
    dev, text = fitted_device(tmp_path / "cal.tmp")
    # On this machine's virtio disk: a write cache ("write back") and no FUA.
    assert {k: dev[k] for k in ("write_cache", "fua")} == want, text
    # vmio sim runs the stack with them.
    job = "[j]\nrw=randwrite\nbs=4k\nioengine=psync\ndirect=1\nsize=16m\nfdatasync=1\n"
    out = json.loads(simulate_text(text, "stack.toml", job, "j.fio"))
    assert out["jobs"][0]["jobname"] == "j"


def test_a_tmpfs_target_is_fitted_without_a_write_cache_or_fua():
    shm = Path("/dev/shm")
    if not shm.is_dir() or calibrate.mount_of(shm)[1] not in calibrate.TMPFS:
        pytest.skip("no tmpfs at /dev/shm")
    dev, text = fitted_device(shm / f"vmio-test-caps-{os.getpid()}.tmp")
    assert (dev["write_cache"], dev["fua"]) == (False, False), text


# --- real runs -----------------------------------------------------------------------------


def vmio(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """`vmio ARGS` in this process (a spawned one costs seconds on a loaded machine):
    (exit status, stdout, stderr)."""
    try:
        rc = cli.main([str(a) for a in args])
    except SystemExit as e:  # argparse's errors
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def needs_fio() -> None:
    require_tool("fio", "fio")


def needs_root() -> None:
    if os.geteuid() != 0:
        missing_tool("loop devices need root (losetup)")


@pytest.fixture
def shm_file(tmp_path: Path) -> Iterator[Path]:
    # One name per test: a test never meets a file another test left or had recreated.
    path = Path("/dev/shm") / f"vmio-test-calibrate-{os.getpid()}-{tmp_path.name}.tmp"
    yield path
    path.unlink(missing_ok=True)


def loop_device(backing: Path, mib: int, fill: bytes | None = None) -> str:
    """A loop device on `backing` of `mib` MiB (zeros, or `fill` repeated)."""
    with backing.open("wb") as f:
        chunk = (fill * (MIB // len(fill))) if fill else bytes(MIB)
        for _ in range(mib):
            f.write(chunk)
    r = subprocess.run(
        ["losetup", "-f", "--show", str(backing)], capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        missing_tool(f"losetup cannot attach a loop device: {r.stderr.strip()}")
    return r.stdout.strip()


@pytest.fixture
def loop(shm_file: Path) -> Iterator[Callable]:
    made: list[str] = []

    def make(mib: int, fill: bytes | None = None) -> str:
        dev = loop_device(shm_file, mib, fill)
        made.append(dev)
        return dev

    yield make
    for dev in made:
        subprocess.run(["losetup", "-d", dev], check=False)


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


def anchored(points, params, simulated) -> None:
    """The rate points reproduced (module doc: tolerance)."""
    rows = calibrate.errors(params, points, simulated)
    for p, model, sim in rows:
        if p.job.name in ("read-1m-qd32", "write-1m-qd32"):
            assert model[0] == pytest.approx(p.bw_bytes, rel=0.01), p.job.name
            assert sim is not None and sim[0] == pytest.approx(p.bw_bytes, rel=0.05), p.job.name
    sim_vs_model = [s[0] / m[0] - 1 for _, m, s in rows if s is not None and s[0] == s[0]]
    assert calibrate.median_abs(sim_vs_model) <= 0.05, sim_vs_model


def check_round_trip(cal: calibrate.Calibration, out: Path) -> None:
    """The three files, a stack `vmio sim` runs, and the tolerance (module doc)."""
    assert (out / "measurements.json").is_file() and (out / "fit.txt").is_file()
    rec = json.loads((out / "measurements.json").read_text())
    assert [p["name"] for p in rec["points"]] == [p.job.name for p in cal.points]
    assert all(p["fio"]["jobname"] == p["name"] for p in rec["points"])
    stack = tomllib.loads(cal.stack_path.read_text())
    assert stack["device"][0]["model"] == "flash" and stack["host"]["hypervisor"] == "native"
    job = out / "job.fio"
    job.write_text(calibrate.job_text(cal.points[0]))
    r = run_vmio("sim", "--stack", cal.stack_path, job, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"][0]["jobname"] == cal.points[0].job.name
    anchored(cal.points, cal.params, cal.simulated)
    sm = calibrate.summary(cal.params, cal.points, cal.simulated)
    fit_txt = (out / "fit.txt").read_text()
    assert sm["bw_model"] <= TOLERANCE, fit_txt
    assert sm["bw_sim"] <= TOLERANCE, fit_txt


def test_a_quick_calibration_of_a_ram_backed_file_round_trips_through_vmio_sim(
    tmp_path: Path, shm_file: Path
):
    needs_fio()
    err = io.StringIO()
    out = tmp_path / "cal"
    # The budget's arithmetic is checked on a fake clock (Schedule above); a wall-clock bound
    # here would only measure how loaded the machine is.
    # A RAM-backed file is no flash: its unit time sits at the flash bound (5 us), accepted.
    cal = calibrate.run(
        shm_file, out, quick=True, budget_s=18, size="64m", progress=err, accept_bounds=True
    )
    assert not shm_file.exists()  # created, so removed
    assert len(cal.points) == len(calibrate.battery(quick=True))
    lines = [x for x in err.getvalue().splitlines() if "ETA" in x]
    assert len(lines) == len(cal.points), err.getvalue()
    assert cal.params["capacity"] == 64 * MIB
    # tmpfs: nothing volatile below the page cache, so no FLUSH reaches a device.
    device = tomllib.loads(cal.stack_path.read_text())["device"][0]
    assert (device["write_cache"], device["fua"]) == (False, False)
    check_round_trip(cal, out)


def test_a_loop_device_with_write_round_trips_and_names_the_device(tmp_path: Path, loop, capsys):
    needs_fio()
    needs_root()
    dev = loop(64)
    out = tmp_path / "cal"
    rc, stdout, stderr = vmio(
        capsys,
        "calibrate",
        dev,
        "--write",
        "--quick",
        "--budget",
        "18",
        "--accept-bounds",
        "-o",
        out,
    )
    assert rc == 0, stderr
    assert "flash model of" in stdout and "median |error|" in stdout
    stack = tomllib.loads((out / "stack.toml").read_text())
    name = os.path.basename(dev)
    assert stack["device"][0]["name"] == name and stack["device"][0]["capacity"] == 64 * MIB
    assert stack["scheduler"]["name"] in calibrate.SCHEDULERS
    rec = json.loads((out / "measurements.json").read_text())
    assert rec["vmio_calibrate"]["writes"] and rec["machine"]["disk"]["device"] == name
    assert {p["rw"] for p in rec["points"]} >= {"write", "randwrite", "randrw"}
    fit_txt = (out / "fit.txt").read_text()
    bw_model, bw_sim = (
        float(x.split()[-2]) for x in fit_txt.split("median |error|: ")[1].split(";")[0].split(",")
    )
    assert bw_model <= 100 * TOLERANCE and bw_sim <= 100 * TOLERANCE, fit_txt


def test_a_block_device_without_write_is_only_read_and_says_so(tmp_path: Path, loop, capsys):
    needs_fio()
    needs_root()
    dev = loop(32, fill=os.urandom(4096))
    before = sha256(dev)
    out = tmp_path / "cal"
    rc, stdout, stderr = vmio(
        capsys, "calibrate", dev, "--quick", "--budget", "8", "--accept-bounds", "-o", out
    )
    assert rc == 0, stderr
    assert "reads only" in stderr and "reads only" in stdout
    assert sha256(dev) == before
    rec = json.loads((out / "measurements.json").read_text())
    assert {p["rw"] for p in rec["points"]} == {"read", "randread"}
    dev_toml = tomllib.loads((out / "stack.toml").read_text())["device"][0]
    assert dev_toml["write_latency"] == dev_toml["read_latency"]


def test_writing_to_a_block_device_with_a_filesystem_is_refused_without_force(
    tmp_path: Path, loop, capsys
):
    needs_fio()
    needs_root()
    require_tool("mkfs.ext4", "e2fsprogs")
    dev = loop(16)
    subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
    before = sha256(dev)
    rc, _, err = vmio(capsys, "calibrate", dev, "--write", "--quick", "-o", tmp_path / "cal")
    assert rc == 2
    assert err.startswith("vmio: error: refusing to write to") and "TYPE=ext4" in err
    assert "--force" in err and len(err.splitlines()) == 1
    assert sha256(dev) == before and not (tmp_path / "cal").exists()


def test_ctrl_c_removes_the_temporary_target_file(tmp_path: Path, shm_file: Path):
    needs_fio()
    cmd = [sys.executable, "-m", "vmio", "calibrate", str(shm_file), "--quick"]
    proc = subprocess.Popen(
        [*cmd, "--size", "32m", "-o", str(tmp_path / "cal")],
        stderr=subprocess.PIPE,
        text=True,
        # A shell running the tests in the background ignores SIGINT, and its children
        # inherit that (Python then installs no handler): give the child a terminal's default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    t0 = time.monotonic()
    while "written in" not in (line := proc.stderr.readline()):
        assert line and time.monotonic() - t0 < 30, "the write-through did not end within 30 s"
    assert shm_file.exists()
    proc.send_signal(signal.SIGINT)
    _, rest = finish(proc, 30)
    assert proc.returncode == 130 and "interrupted" in rest
    # fio forks its job processes: none may outlive the interrupted battery, or one that had
    # not yet opened the target would create it again (the next test's file with it).
    left = subprocess.run(["pgrep", "-f", str(shm_file)], capture_output=True, text=True)
    assert left.stdout == "", f"fio processes left on {shm_file}: {left.stdout.split()}"
    assert not shm_file.exists() and not (tmp_path / "cal").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "1x"], "--size '1x' is not a size"),
        (["--size", "1m"], "--size 1048576 bytes: accepted: 16m or more"),
        (["--budget", "abc"], "argument --budget: 'abc' is not a number of seconds"),
        (["--budget", "5", "--quick"], "--budget 5: accepted: 17 to 86400 seconds"),
        (["--budget", "30"], "--budget 30: accepted: 65 to 86400 seconds"),
    ],
)
def test_bad_values_are_one_error_line_naming_the_option_and_what_is_accepted(
    tmp_path: Path, shm_file: Path, capsys, args: list[str], message: str
):
    needs_fio()
    rc, _, err = vmio(capsys, "calibrate", shm_file, *args, "-o", tmp_path / "cal")
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert message in err
    assert not shm_file.exists() and not (tmp_path / "cal").exists()


def test_an_existing_target_or_output_directory_or_a_directory_target_is_refused(
    tmp_path: Path, shm_file: Path, capsys
):
    needs_fio()
    out = tmp_path / "cal"
    shm_file.write_bytes(b"keep")
    rc, _, err = vmio(capsys, "calibrate", shm_file, "-o", out)
    assert rc == 2 and "exists and the battery would overwrite it" in err
    assert shm_file.read_bytes() == b"keep"
    rc, _, err = vmio(capsys, "calibrate", tmp_path, "-o", out)
    assert rc == 2 and "neither a regular file nor a block device" in err
    out.mkdir()
    rc, _, err = vmio(capsys, "calibrate", shm_file, "-o", out)
    assert rc == 2 and "output directory" in err and "--force" in err


def test_a_missing_fio_is_one_error_line(tmp_path: Path, capsys, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    rc, _, err = vmio(capsys, "calibrate", tmp_path / "t.tmp", "-o", tmp_path / "cal")
    assert rc == 2
    assert err == "vmio: error: 'fio' is not installed (apt-get install fio)\n"


def with_tail(params: dict, p: Point) -> Point:
    """`p` with the completion-latency percentiles of the model's unit-time distribution at
    QD1 (`model_percentile_ns`), p99.9 included, on the random 4k QD1 points."""
    for side in ("read", "write"):
        if p.job.rw != f"rand{side}" or p.job.iodepth != 1 or p.job.fdatasync:
            continue
        q = {
            f: calibrate.model_percentile_ns(params, p.job, side, x)
            for f, x, _ in calibrate.PERCENTILES
        }
        p = replace(p, **{side: replace(getattr(p, side), **q)})
    return p


TAILED = {**KNOWN, "read_spread": 0.22, "read_floor": 0.55, "write_spread": 0.3, "write_floor": 0.2}


def test_the_fitted_distribution_reproduces_the_battery_percentiles_it_was_fitted_on():
    points = [with_tail(TAILED, synthetic(TAILED, j)) for j in calibrate.battery()]
    got = calibrate.fit(points, TAILED["capacity"], TAILED["queue_depth"])
    assert got.flags == ()
    for side in ("read", "write"):
        assert got.params[f"{side}_spread"] == pytest.approx(TAILED[f"{side}_spread"], abs=0.005)
        assert got.params[f"{side}_floor"] == pytest.approx(TAILED[f"{side}_floor"], abs=0.02)
        tail = calibrate._tail_point(points, side)
        for attr, q, _ in calibrate.PERCENTILES:
            want = getattr(getattr(tail, side), attr)
            model = calibrate.model_percentile_ns(got.params, tail.job, side, q)
            assert model == pytest.approx(want, rel=0.01), (side, attr)


def test_the_models_qd1_percentiles_in_vmio_sim_are_the_closed_form_quantiles():
    # The stack a calibration writes, with a tail on reads: vmio sim's fio percentiles of a
    # QD1 4k random read are the closed form's (fio's histogram bins: within 2 %).
    params = {**TAILED, "units": 64}
    stack = (
        '[host]\ncores = 2\nhypervisor = "native"\n[[device]]\nname = "d"\nmodel = "flash"\n'
        + "".join(
            f'{k} = "{v}ns"\n' if k in calibrate.durations() else f"{k} = {v!r}\n".replace("'", '"')
            for k, v in params.items()
            if k not in ("capacity", "queue_depth")
        )
        + '[[volume]]\nname = "v"\nlayout = "single"\ndevices = ["d"]\n[[vm]]\nname = "h"\n'
        '[[vm.disk]]\nname = "d"\nvolume = "v"\ninterface = "host"\ncache = "none"\n'
    )
    job = (
        "[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=1\nsize=1g\n"
        "runtime=20\ntime_based\n"
    )
    out = json.loads(simulate_text(stack, "s.toml", job, "j.fio"))["jobs"][0]["read"]
    pct = out["clat_ns"]["percentile"]
    j = Job("r", "randread", 4 * KIB, 1)
    for key, q in (("50.000000", 0.5), ("99.000000", 0.99), ("99.900000", 0.999)):
        assert pct[key] == pytest.approx(
            calibrate.model_percentile_ns(params, j, "read", q), rel=0.02
        )


def noisy(points: list[Point], rel: float, seed: int) -> list[Point]:
    """Each point's throughput (and its latency, inversely) off by a log-normal factor of
    spread `rel`, seeded: repeated rounds of a real battery."""
    import random

    rng = random.Random(seed)
    out = []
    for p in points:
        f = math.exp(rng.gauss(0.0, rel))

        def scaled(s: Side | None, f: float = f) -> Side | None:
            if s is None:
                return None
            return replace(
                s, iops=s.iops * f, bw_bytes=s.bw_bytes * f, lat_mean_ns=s.lat_mean_ns / f
            )

        fd = p.fdatasync_ns * f if p.fdatasync_ns else p.fdatasync_ns
        out.append(replace(p, read=scaled(p.read), write=scaled(p.write), fdatasync_ns=fd))
    return out


def test_the_fit_recovers_known_parameters_within_their_reported_uncertainty():
    # 3 % noise on every point: the latencies, rates, the overhead and the flush within three
    # standard errors of the known figures, every standard error finite and below 50 %.
    exact = [synthetic(KNOWN, j) for j in calibrate.battery()]
    for seed in (1, 2):
        got = calibrate.fit(noisy(exact, 0.03, seed), KNOWN["capacity"], KNOWN["queue_depth"])
        for key in ("read_latency", "write_latency", "read_rate", "write_rate", "flush_latency"):
            e = got.estimates[key]
            assert math.isfinite(e.sigma) and e.sigma < 0.5 * e.value, (key, e)
            assert abs(e.value - KNOWN[key]) <= 3 * e.sigma, (seed, key, e, KNOWN[key])
            assert e.points, key
    # The points that identify a parameter are the ones it moves: the read rate by large reads.
    rate = got.estimates["read_rate"].points
    assert all(n.startswith(("read-", "rw-")) for n, _ in rate), rate


def test_a_fit_whose_unit_time_sits_at_its_lower_bound_is_flagged_in_one_line():
    # Writes that take 1 us at QD1 besides their transfer: the fit cannot go below 5 us.
    fast = {**KNOWN, "write_latency": 1_000, "transfer_overhead": 0}
    points = [synthetic(fast, j) for j in calibrate.battery()]
    got = calibrate.fit(points, fast["capacity"], fast["queue_depth"])
    assert got.params["write_latency"] == calibrate.MIN_LATENCY_NS
    assert any(
        f.startswith("write_latency = 5.0 us sits at its lower bound 5.0 us") for f in got.flags
    )
    assert all("\n" not in f for f in got.flags)
    assert got.estimates["write_latency"].bound is not None


def test_the_units_stop_at_the_depth_where_throughput_stops_rising():
    def pts(xs: dict[int, float]) -> list[Point]:
        return [
            Point(
                Job(f"r{q}", "randread", 4 * KIB, q),
                1,
                1.0,
                Side(x, x * 4096, 1, 1, 1),
                None,
                None,
                {},
            )
            for q, x in xs.items()
        ]

    # 8 -> 16 gains 6 %: throughput stopped rising by 16.
    assert calibrate.stop_depth(pts({1: 10, 2: 20, 4: 40, 8: 94, 16: 100, 32: 100})) == 16
    # Still rising at the deepest point: no bound below the model's.
    assert calibrate.stop_depth(pts({1: 10, 8: 70, 32: 200})) == calibrate.MAX_UNITS


# fio's default clat percentile list (fio/HOWTO.rst, `percentile_list`).
FIO_LEVELS = (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)


def with_levels(params: dict, p: Point, ios: int = 100_000) -> Point:
    """`p` with fio's clat percentile list of the model at QD1 (`model_percentile_ns`, the
    mixture with the stalls of `params`) on the random 4k QD1 points, `ios` requests."""
    fio: dict = {}
    for side in ("read", "write"):
        if p.job.rw != f"rand{side}" or p.job.iodepth != 1 or p.job.fdatasync:
            continue
        pct = {
            f"{q:.6f}": calibrate.model_percentile_ns(params, p.job, side, q / 100)
            for q in FIO_LEVELS
        }
        fio[side] = {"total_ios": ios, "clat_ns": {"percentile": pct}}
        kept = {
            "clat_p50_ns": pct["50.000000"],
            "clat_p99_ns": pct["99.000000"],
            "clat_p999_ns": pct["99.900000"],
        }
        p = replace(p, **{side: replace(getattr(p, side), **kept)})
    return replace(p, fio=fio) if fio else p


def test_a_stall_with_probability_p_puts_the_quantiles_above_one_minus_p_at_the_stalls():
    # A constant body B: quantile P is B below 1 - p and B + Q_stall((P - (1 - p)) / p) above.
    stall = {"stall_probability": 0.02, "stall_time": 10e6, "stall_spread": 0.3}
    stall["stall_floor"] = 0.2
    body = 100e3
    for q in (0.5, 0.9, 0.979):
        assert calibrate.mixture_ns(lambda _: body, body, stall, q) == body
    for q in (0.985, 0.99, 0.999):
        want = body + calibrate.quantile_ns(10e6, 0.2, 0.3, (q - 0.98) / 0.02)
        assert calibrate.mixture_ns(lambda _: body, body, stall, q) == pytest.approx(want)
    # Half the stalls lie above the stall's median: quantile 1 - p / 2.
    median = calibrate.quantile_ns(10e6, 0.2, 0.3, 0.5)
    assert calibrate.mixture_ns(lambda _: body, body, stall, 0.99) == pytest.approx(body + median)
    # No stall: the body's own quantile.
    assert calibrate.mixture_ns(lambda q: body * q, body, {}, 0.99) == body * 0.99


STALLED = {
    **TAILED,
    "stall_probability": 0.01,
    "stall_time": 10_000_000,
    "stall_spread": 0.3,
    "stall_floor": 0.2,
}


def with_median(params: dict, p: Point) -> Point:
    """`p` with the model's QD1 clat p50 (its body's median, the stalls being rarer)."""
    if p.job.iodepth != 1 or p.job.fdatasync or p.job.direction == "mixed":
        return p
    side = p.job.direction
    q = calibrate.model_percentile_ns(params, p.job, side, 0.5)
    return replace(p, **{side: replace(getattr(p, side), clat_p50_ns=q)})


def test_the_fitted_stall_and_bodies_reproduce_the_percentile_lists_they_were_fitted_on():
    points = [
        with_levels(STALLED, with_median(STALLED, synthetic(STALLED, j)))
        for j in calibrate.battery()
    ]
    got = calibrate.fit(points, STALLED["capacity"], STALLED["queue_depth"])
    assert got.flags == ()
    p = got.params
    assert p["stall_probability"] == pytest.approx(0.01, rel=0.15)
    assert p["stall_time"] == pytest.approx(10e6, rel=0.15)
    # The unit times keep their means: the stalls' mean p D is not put into them.
    for side in ("read", "write"):
        assert p[f"{side}_latency"] == pytest.approx(STALLED[f"{side}_latency"], rel=0.05)
        tail = calibrate._tail_point(points, side)
        for q, want in calibrate.clat_levels(tail, side):
            model = calibrate.model_percentile_ns(p, tail.job, side, q)
            assert model == pytest.approx(want, rel=0.05), (side, q)
    # The stall's parameters are identified by the tail levels, with a standard error.
    e = got.estimates["stall_probability"]
    assert math.isfinite(e.sigma) and any(" p99" in n for n, _ in e.points)


def test_without_stalls_in_the_lists_no_stall_is_fitted():
    points = [with_levels(TAILED, synthetic(TAILED, j)) for j in calibrate.battery()]
    got = calibrate.fit(points, TAILED["capacity"], TAILED["queue_depth"])
    assert got.params.get("stall_probability", 0.0) == 0.0
    for side in ("read", "write"):
        assert got.params[f"{side}_spread"] == pytest.approx(TAILED[f"{side}_spread"], abs=0.01)


def test_the_device_model_gets_the_disks_hardware_tags_not_the_schedulers_requests():
    from dataclasses import replace as with_

    from vmio.real.machineprofile import Disk

    # A virtio disk under mq-deadline: 128 tags on its one hardware queue, 256 scheduler
    # requests (blk-mq-sched: 2 x min(tags, 128)).
    disk = Disk(
        "/var/tmp", "/", "ext4", "/dev/vda", "vda", 1 << 40, True, "mq-deadline",
        "virtio_blk", 4096, 256, "write back", False, "rw", 128,
    )  # fmt: skip
    assert calibrate.queue_depth(disk) == 128
    # Without blk-mq's sysfs (no mq/ directory) the scheduler's count is all there is.
    assert calibrate.queue_depth(with_(disk, hw_queue_depth=0)) == 256
    assert calibrate.queue_depth(with_(disk, hw_queue_depth=0, nr_requests=0)) == 128
    assert calibrate.queue_depth(None) == 128


# KNOWN with the shapes of flash.rs's "Streams and the cache's drain": each read streams
# at 1.5 GB/s (binding at QD1 from 256k: 1 MiB takes 699 us, not 85 + 350 us), each write at
# 1 GB/s (from 64k), and a FLUSH drains what was written before it at 2 GB/s.
SHAPED = {
    **KNOWN,
    "read_stream_rate": 1_500_000_000,
    "write_stream_rate": 1_000_000_000,
    "flush_rate": 2_000_000_000,
}


def test_a_qd1_command_with_a_stream_takes_the_later_of_its_line_and_its_stream():
    h = calibrate.host_path_ns()
    for bs in (4 * KIB, 64 * KIB, 256 * KIB, MIB):
        line = 80_000 + 5_000 + bs / 3e9 * 1e9
        want = h + max(line, bs / 1.5e9 * 1e9)
        lat = calibrate.predicted(SHAPED, Job("r", "read", bs, 1))[1]
        assert lat == pytest.approx(want), bs
    # Both sides of the crossover: 64k by its line, 1 MiB by its stream.
    assert 85_000 + 65536 / 3e9 * 1e9 > 65536 / 1.5e9 * 1e9
    assert 85_000 + MIB / 3e9 * 1e9 < MIB / 1.5e9 * 1e9


def test_the_fdatasync_after_a_write_of_l_costs_the_flush_latency_plus_l_over_the_flush_rate():
    for bs in (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB):
        job = Job("f", "randwrite", bs, 1, fdatasync=True)
        want = 50_000 + bs / 2e9 * 1e9
        assert calibrate.predicted(SHAPED, job)[1] == pytest.approx(want)
        assert calibrate.predicted(KNOWN, job)[1] == pytest.approx(50_000)
    # The line through the battery's fdatasync points gives both back.
    f0, rate = calibrate.fit_flush([(b, 50_000 + b / 2e9 * 1e9) for b in (4096, 65536, 262144)])
    assert f0 == pytest.approx(50_000) and rate == pytest.approx(2e9)
    # A flush that does not grow with what was written before it has no drain.
    assert calibrate.fit_flush([(4096, 50_000.0), (262144, 49_000.0)]) is None


def test_the_fit_recovers_the_streams_and_the_flush_rate_from_closed_form_measurements():
    points = [synthetic(SHAPED, j) for j in calibrate.battery()]
    got = calibrate.fit(points, SHAPED["capacity"], SHAPED["queue_depth"])
    assert got.notes == ()
    # The flush's line is exact; the streams come from a log grid of STREAM_GRID steps
    # (0.35 % apart here) and move the unit times with them by as little.
    same(got.params, {k: SHAPED[k] for k in ("flush_latency", "flush_rate")})
    for key in ("read_stream_rate", "write_stream_rate", "read_latency", "write_latency"):
        assert got.params[key] == pytest.approx(SHAPED[key], rel=0.01), key
    same(got.params, {k: SHAPED[k] for k in ("units", "read_rate", "write_rate", "duplex")})
    assert got.params["transfer_overhead"] == pytest.approx(5_000, abs=2)
    sm = calibrate.summary(got.params, points, None)
    assert sm["bw_model"] < 0.01 and sm["lat_model"] < 0.01
    # Without them in the device, the fit finds none (the battery of KNOWN above).
    plain = calibrate.fit([synthetic(KNOWN, j) for j in calibrate.battery()], 1 << 30, 256)
    assert not {"read_stream_rate", "write_stream_rate", "flush_rate", "batching"} & set(
        plain.params
    )


# A draining processor of 2 us a pass and 10 us a command besides its transfer t, in front
# of 64 units: R(q) = b + q (k + t) + a + h from QD1 on.
DRAINING = {
    **KNOWN,
    "units": 64,
    "read_latency": 30_000,
    "write_latency": 20_000,
    "transfer_overhead": 0,
    "batch_overhead": 2_000,
    "command_overhead": 10_000,
    "batching": "drain",
}


def test_the_fit_chooses_a_draining_pass_for_a_latency_that_grows_from_the_first_command():
    known = DRAINING
    points = [synthetic(known, j) for j in calibrate.battery()]
    got = calibrate.fit(points, known["capacity"], known["queue_depth"]).params
    assert got["batching"] == "drain"
    sm = calibrate.summary(got, points, None)
    assert sm["bw_model"] < 0.02 and sm["lat_model"] < 0.02
    # The closed form is the hand-computed R(q) = b + q (k + t) + a + h for random 4k reads.
    h = calibrate.host_path_ns()
    for q in (1, 2, 8):
        lat = calibrate.predicted(known, Job("r", "randread", 4 * KIB, q))[1]
        assert lat == pytest.approx(2_000 + q * (10_000 + 4096 / 3e9 * 1e9) + 30_000 + h), q


LEVELS = tuple(q / 100 for q in FIO_LEVELS)


def frozen_point(name: str, x50: float, mean: float, freeze: dict) -> Point:
    """A random 4 KiB read point at QD 8 (`tail_point`) with the clock's freezes `freeze`."""
    return tail_point(Job(name, "randread", 4096, 8), x50, mean, freeze)


def test_a_freeze_puts_the_levels_above_one_minus_r_over_i_at_the_median_plus_its_time():
    import numpy as np

    # R = 200 us, I = 100 ms: a share pi = 0.002 of the commands wait D = 2 ms more.
    t = calibrate._Tail("p", 100e3, 0.0, 0.0, 200e3, np.array([0.9, 0.99, 0.997, 0.999]), None)
    got = calibrate.freeze_ns(t, np.array(100e6), np.array(2e6))
    assert list(got) == [100e3, 100e3, 100e3, 100e3 + 2e6]
    # The body's own quantile below 1 - pi, at P / (1 - pi).
    t = replace(t, s=0.3, f=0.5)
    got = calibrate.freeze_ns(t, np.array(100e6), np.array(2e6))
    assert got[1] == pytest.approx(calibrate._body_q(100e3, 0.3, 0.5, 0.99 / 0.998))


def test_the_fitted_freezes_reproduce_the_tails_they_were_fitted_on():
    # Points of several latencies R (the share R / I in flight when a freeze starts).
    freeze = {"freeze_interval": 120e6, "freeze_time": 1.5e6}
    points = [
        frozen_point(f"p{i}", x50, mean, freeze)
        for i, (x50, mean) in enumerate(
            [(40e3, 50e3), (150e3, 180e3), (400e3, 450e3), (1e6, 1.1e6)]
        )
    ]
    got = calibrate.fit_freeze(points)
    assert got["freeze_interval"] == pytest.approx(120e6, rel=0.05)
    assert got["freeze_time"] == pytest.approx(1.5e6, rel=0.05)
    # Without freezes in the lists, none is fitted.
    assert calibrate.fit_freeze([frozen_point("p", 150e3, 180e3, {})]) == {}


def tail_point(job: Job, x50: float, mean: float, freeze: dict) -> Point:
    """A point of `job` whose clat lists (each direction it has) are a body of spread 0.2 and
    floor 0.5 about x50 with the freezes `freeze` (by the clock, or started by commands; {}:
    none), mean latency `mean`, a million requests each."""
    import numpy as np

    share = calibrate._read_share(job)
    t = calibrate._Tail(
        job.name, x50, 0.2, 0.5, mean, np.array(LEVELS), np.zeros(17), job.iodepth, share
    )
    if freeze.get("freeze_trigger") == "command":
        values = calibrate.command_freeze_ns(
            t,
            freeze["read_freeze_probability"],
            freeze["write_freeze_probability"],
            freeze["freeze_time"],
        )
    elif freeze:
        values = calibrate.freeze_ns(t, freeze["freeze_interval"], freeze["freeze_time"])
    else:
        values = calibrate._body_q(x50, 0.2, 0.5, t.levels)
    pct = {f"{100 * q:f}": float(v) for q, v in zip(LEVELS, values, strict=True)}
    side = Side(1e9 / mean, 4096e9 / mean, mean, x50, pct["99.000000"], pct["99.900000"])
    sides = {d: (side if w > 0 else None) for d, w in (("read", share), ("write", 1 - share))}
    fio = {
        d: {"total_ios": 1_000_000, "clat_ns": {"percentile": pct}} if m else {"total_ios": 0}
        for d, m in sides.items()
    }
    return Point(job, 1 << 30, 3.0, sides["read"], sides["write"], None, fio)


# Random reads from QD 2 to 32, random writes at QD 8 and 32, a 70 % read mix at QD 8: their
# medians and mean latencies (ns).
TAIL_JOBS = [
    (Job("randread-4k-qd2", "randread", 4096, 2), 60e3, 70e3),
    (Job("randread-4k-qd4", "randread", 4096, 4), 80e3, 90e3),
    (Job("randread-4k-qd8", "randread", 4096, 8), 125e3, 140e3),
    (Job("randread-4k-qd16", "randread", 4096, 16), 210e3, 230e3),
    (Job("randread-4k-qd32", "randread", 4096, 32), 370e3, 400e3),
    (Job("randwrite-4k-qd8", "randwrite", 4096, 8), 100e3, 110e3),
    (Job("randwrite-4k-qd32", "randwrite", 4096, 32), 270e3, 290e3),
    (Job("randrw-4k-qd8", "randrw", 4096, 8, 70), 105e3, 115e3),
]


def test_a_command_freeze_puts_a_share_q_p_of_a_points_levels_at_the_median_plus_its_time():
    import numpy as np

    # Reads at QD 8 with p_r = 2.5e-4: a share 8 p_r = 0.002 waits D = 2 ms more (the q
    # commands of a pass wait for any one's blocking), as a clock's R / I = 0.002 would.
    t = calibrate._Tail(
        "p", 100e3, 0.0, 0.0, 200e3, np.array([0.9, 0.99, 0.997, 0.999]), None, 8, 1.0
    )
    got = calibrate.command_freeze_ns(t, np.array(2.5e-4), 0.0, np.array(2e6))
    assert list(got) == [100e3, 100e3, 100e3, 100e3 + 2e6]
    # Writes alone with p_w = 0 never wait; with p_w = 2.5e-4 as the reads.
    w = replace(t, reads=0.0)
    assert list(calibrate.command_freeze_ns(w, 2.5e-4, 0.0, 2e6)) == [100e3] * 4
    assert list(calibrate.command_freeze_ns(w, 0.0, 2.5e-4, 2e6)) == list(got)
    # The body's own quantile below 1 - pi, at P / (1 - pi); a mix of read share 0.5 with
    # p_w = 0 has pi = 8 x 0.5 x 2.5e-4 = 0.001.
    t = replace(t, s=0.3, f=0.5)
    got = calibrate.command_freeze_ns(t, np.array(2.5e-4), 0.0, np.array(2e6))
    assert got[1] == pytest.approx(calibrate._body_q(100e3, 0.3, 0.5, 0.99 / 0.998))
    got = calibrate.command_freeze_ns(replace(t, reads=0.5), np.array(2.5e-4), 0.0, 2e6)
    assert got[1] == pytest.approx(calibrate._body_q(100e3, 0.3, 0.5, 0.99 / 0.999))


def test_the_freeze_fit_tells_commands_stopping_the_processor_from_a_clock_by_depth_and_direction():
    # Made by commands (p_r = 2e-4, p_w = 4e-5, D = 2 ms): the shares grow as q, the writes'
    # five times slower, the mix's writes wait with its reads. The fit finds the trigger and
    # the three.
    truth = {
        "freeze_trigger": "command",
        "read_freeze_probability": 2e-4,
        "write_freeze_probability": 4e-5,
        "freeze_time": 2e6,
    }
    points = [tail_point(j, x50, mean, truth) for j, x50, mean in TAIL_JOBS]
    got = calibrate.fit_freeze(points)
    assert got["freeze_trigger"] == "command"
    for key in ("read_freeze_probability", "write_freeze_probability", "freeze_time"):
        assert got[key] == pytest.approx(truth[key], rel=0.1), key
    # Reads alone block (p_w = 0): no write probability is found.
    reads = {**truth, "write_freeze_probability": 0.0}
    got = calibrate.fit_freeze([tail_point(j, x50, mean, reads) for j, x50, mean in TAIL_JOBS])
    assert got["freeze_trigger"] == "command" and got["write_freeze_probability"] == 0.0
    assert got["read_freeze_probability"] == pytest.approx(2e-4, rel=0.1)
    # Made by a clock (I = 100 ms, D = 1.5 ms: a share R / I of every point, whatever its
    # direction and depth): the clock's, as before.
    clock = {"freeze_interval": 100e6, "freeze_time": 1.5e6}
    got = calibrate.fit_freeze([tail_point(j, x50, mean, clock) for j, x50, mean in TAIL_JOBS])
    assert "freeze_trigger" not in got
    assert got["freeze_interval"] == pytest.approx(100e6, rel=0.05)
    assert got["freeze_time"] == pytest.approx(1.5e6, rel=0.05)
    # Neither: none.
    assert calibrate.fit_freeze([tail_point(j, x, m, {}) for j, x, m in TAIL_JOBS]) == {}


def test_the_fit_of_a_draining_processor_keeps_the_commands_freezes_in_its_closed_forms():
    import numpy as np

    # The draining device above whose reads (writes) block its processor for 2 ms with
    # probability 2e-4 (4e-5): the closed forms' points carry each command's mean p D on the
    # processor, their clat lists the share q (f p_r + (1 - f) p_w) at x50 + D.
    freeze = {
        "freeze_trigger": "command",
        "read_freeze_probability": 2e-4,
        "write_freeze_probability": 4e-5,
        "freeze_time": 2_000_000,
    }
    known = {**DRAINING, **freeze}

    def with_tails(p: Point) -> Point:
        if p.job.iodepth <= 1 or p.job.fdatasync:
            return p
        fio = {}
        for d in ("read", "write"):
            m = getattr(p, d)
            if m is None:
                fio[d] = {"total_ios": 0}
                continue
            t = calibrate._Tail(
                p.job.name, m.lat_mean_ns, 0.2, 0.5, m.lat_mean_ns, np.array(LEVELS), None,
                p.job.iodepth, calibrate._read_share(p.job),
            )  # fmt: skip
            v = calibrate.command_freeze_ns(t, 2e-4, 4e-5, 2e6)
            pct = {f"{100 * q:f}": float(x) for q, x in zip(LEVELS, v, strict=True)}
            fio[d] = {"total_ios": 1_000_000, "clat_ns": {"percentile": pct}}
        return replace(p, fio=fio)

    points = [with_tails(synthetic(known, j)) for j in calibrate.battery()]
    got = calibrate.fit(points, known["capacity"], known["queue_depth"]).params
    assert got["freeze_trigger"] == "command" and "freeze_interval" not in got
    for key, want in freeze.items():
        if key != "freeze_trigger":
            assert got[key] == pytest.approx(want, rel=0.1), key
    assert got["batching"] == "drain"
    sm = calibrate.summary(got, points, None)
    assert sm["bw_model"] < 0.02 and sm["lat_model"] < 0.02


def test_a_virtio_disk_without_indirect_descriptors_under_mq_deadline_gets_its_ring_ordered_by_it(
    tmp_path, monkeypatch
):
    from dataclasses import replace as with_
    from types import SimpleNamespace

    from vmio.real.machineprofile import Disk

    # sysfs: <disk>/queue and <disk>/device/features, bit 28 (INDIRECT_DESC) 0.
    (tmp_path / "queue").mkdir()
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "features").write_text("0" * 64 + "\n", encoding="utf-8")
    monkeypatch.setattr(calibrate, "_queue_dir", lambda device: tmp_path / "queue")
    # A guest kernel before 6.5: its mq-deadline keeps the next request's pointer.
    monkeypatch.setattr(calibrate, "kernel_release", lambda: "6.1.0-13-amd64")
    disk = Disk(
        "/var/tmp", "/", "ext4", "/dev/vda", "vda", 1 << 40, True, "mq-deadline",
        "virtio_blk", 4096, 256, "write back", False, "rw", 128,
    )  # fmt: skip
    ring = calibrate.ring_of(SimpleNamespace(disk=disk))
    assert ring == {"ring_descriptors": 256, "ring_scheduler": "mq-deadline"}
    # Under none, what waits for descriptors waits in arrival order (the model's default).
    none = calibrate.ring_of(SimpleNamespace(disk=with_(disk, scheduler="none")))
    assert none == {"ring_descriptors": 256}
    # The queue's max_segments splits larger commands; with merges allowed (nomerges 0)
    # the commands waiting in mq-deadline merge within it.
    (tmp_path / "queue" / "max_segments").write_text("254\n", encoding="utf-8")
    (tmp_path / "queue" / "nomerges").write_text("0\n", encoding="utf-8")
    assert calibrate.ring_of(SimpleNamespace(disk=disk)) == {
        "ring_descriptors": 256,
        "ring_scheduler": "mq-deadline",
        "max_segments": 254,
        "ring_merges": True,
    }
    # From Linux 6.5 it tracks each direction's dispatch position (this machine: 6.18).
    monkeypatch.setattr(calibrate, "kernel_release", lambda: "6.18.44-fc-v657")
    assert calibrate.ring_of(SimpleNamespace(disk=disk))["ring_dispatch_position"] is True
    assert "ring_dispatch_position" not in calibrate.ring_of(
        SimpleNamespace(disk=with_(disk, scheduler="none"))
    )
    monkeypatch.setattr(calibrate, "kernel_release", lambda: "6.1.0-13-amd64")
    (tmp_path / "queue" / "nomerges").write_text("2\n", encoding="utf-8")
    assert "ring_merges" not in calibrate.ring_of(SimpleNamespace(disk=disk))
    none = calibrate.ring_of(SimpleNamespace(disk=with_(disk, scheduler="none")))
    assert none == {"ring_descriptors": 256, "max_segments": 254}
    # With indirect descriptors a request takes one: no ring.
    (tmp_path / "device" / "features").write_text("0" * 28 + "1" * 36 + "\n", encoding="utf-8")
    assert calibrate.ring_of(SimpleNamespace(disk=disk)) == {}


def test_a_kernel_release_is_compared_by_its_major_and_minor_numbers():
    at_least = calibrate.kernel_at_least
    assert at_least("6.18.44-fc-v657", (6, 5)) and at_least("6.5.0", (6, 5))
    assert at_least("7.0-rc1", (6, 5))
    assert not at_least("6.4.16", (6, 5)) and not at_least("5.15.0-91-generic", (6, 5))
    assert not at_least("linux", (6, 5))


def test_the_fit_recovers_a_writes_own_command_cost_from_closed_form_measurements():
    # A draining processor whose writes cost 3 us a command and reads 10 us (flash.rs,
    # "Each direction's command cost"): the fit gives both back, and every point.
    known = {**DRAINING, "write_command_overhead": 3_000}
    points = [synthetic(known, j) for j in calibrate.battery()]
    got = calibrate.fit(points, known["capacity"], known["queue_depth"]).params
    assert got["batching"] == "drain"
    # In a draining pass a command costs c + k_d besides its bytes: those sums are what the
    # points identify (c alone is shared by both directions, so it may take part of both).
    c = got["transfer_overhead"]
    assert c + got["command_overhead"] == pytest.approx(10_000, rel=0.02)
    assert c + got["write_command_overhead"] == pytest.approx(3_000, rel=0.05)
    sm = calibrate.summary(got, points, None)
    assert sm["bw_model"] < 0.01 and sm["lat_model"] < 0.01
    # The closed form of a write at QD q is R(q) = b + q (k_w + t_w) + a_w + h.
    h = calibrate.host_path_ns()
    for q in (1, 8):
        lat = calibrate.predicted(known, Job("w", "randwrite", 4 * KIB, q))[1]
        assert lat == pytest.approx(2_000 + q * (3_000 + 4096 / 2e9 * 1e9) + 20_000 + h), q
    # A lone write's percentiles pay k_w in front of its unit time.
    w1 = Job("w", "randwrite", 4 * KIB, 1)
    assert calibrate.model_percentile_ns(known, w1, "write", 0.5) == pytest.approx(
        2_000 + 3_000 + 4096 / 2e9 * 1e9 + 20_000
    )
    # One cost for both directions (the key unset): a write's own cost does not lower the
    # error by 1 %, and the fit writes none.
    one = {k: v for k, v in known.items() if k != "write_command_overhead"}
    got = calibrate.fit([synthetic(one, j) for j in calibrate.battery()], 1 << 30, 256).params
    assert "write_command_overhead" not in got
