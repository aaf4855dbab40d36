"""`vmio calibrate --serve-path` (vmio.real.servepath): the fit of the [nbd] table held to the
closed forms of crates/vmio-core/src/nbd.rs on synthetic points, a round trip on /dev/shm (fio's nbd
engine into vmio serve, the fit, vmio sim of every point on the fitted table), the error lines,
and `vmio validate`'s raid0 part on an nbd disk.

Tolerance of the round trip (--quick: 10 s, points of about a quarter of a second on 2 cores
shared with the server, fio and whatever else runs):
- vmio sim runs what was fitted: every path point within 2 % of the table's closed form (the
  simulator adds the RAM device's pipelined transfer at depth, well under 1 %);
- vmio sim against the measurement: the median factor between simulated and measured (either
  way, |ln(sim / real)|) of the QD1 latencies and of the QD16 IOPS each at most 2. handoff and
  the depth-1 rates are the QD1 line's (the 4k points weigh most), request and the rates the
  least squares of the QD16 points, so the medians measure the points' scatter about the model:
  one request for both directions, two depths only, and the runs' noise. (Before handoff was
  taken from the 4k points alone, the median over all four let the 128k residuals set it to 0:
  one CI run failed at -72 %, +51 %, -74 %, +49 %.) On this machine the same quick run gave
  request 20 to 54 us and handoff 12 to 128 us from one run to the next, with median errors of 6
  to 22 % (QD1) and 5 to 10 % (QD16), single points up to 64 % off, and one point moved by a
  factor of 2 to 4 between runs (4k reads at QD16: 19k to 78k IOPS). With a bound of 50 %, one
  run of this test in twelve failed at a load of 2.4 (its message was not kept). A factor of 2
  still fails a unit slip (1000), a handoff counted at depth (a factor of 4 and more at QD16) or
  rates in bits (8). The fit's arithmetic is held exactly by the synthetic tests.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import require_tool, run_vmio
from test_calibrate import vmio
from test_validate import STACK as CALIBRATED
from vmio.real import servepath as calserve
from vmio.real import threadcpu, validate
from vmio.real.calibrate import KIB, MIB, CalibrateError, Point, Side
from vmio.sim import VmioError, simulate_text

KNOWN = {
    "handoff": 90_000,
    "request": 25_000,
    "read_rate": 2_000_000_000,
    "write_rate": 1_250_000_000,
}
# The copies of a request alone on the path, faster than at depth (the cache keeps its payload).
QD1 = {"qd1_read_rate": 5_000_000_000, "qd1_write_rate": 3_125_000_000}
RAM = {"latency": 1_000, "bandwidth": 8_000_000_000}
SHM = Path("/dev/shm")


def synthetic(nbd: dict[str, int], ram: dict[str, int], probe: calserve.Probe) -> Point:
    """The point the closed forms give for `probe` (as fio would report it): the RAM image's
    psync latency latency + L / bandwidth, a path point's calserve.closed_form."""
    if probe.engine == "nbd":
        iops, lat = calserve.closed_form(nbd, ram, probe)
    else:
        lat = ram["latency"] + probe.bs * 1e9 / ram["bandwidth"]
        iops = 1e9 / lat
    side = Side(iops, iops * probe.bs, lat, lat, lat)
    read = side if probe.direction == "read" else None
    write = side if probe.direction == "write" else None
    return Point(probe, calserve.IMAGE_SIZE, 1.0, read, write, None, {})


def test_the_battery_is_the_ram_images_points_then_the_paths_at_qd1_and_qd16():
    names = [p.name for p in calserve.battery(quick=True)]
    assert names[:4] == [
        "ram-randread-4k",
        "ram-randread-128k",
        "ram-randwrite-4k",
        "ram-randwrite-128k",
    ]
    assert names[4:6] == ["nbd-randread-4k-qd1", "nbd-randread-4k-qd16"]
    assert len(names) == 12 and len(calserve.battery()) == 18
    assert {p.ioengine for p in calserve.battery()} == {"psync", "nbd"}
    nbd = next(p for p in calserve.battery() if p.engine == "nbd")
    opts = replace(nbd, uri="nbd+unix:///path/disk?socket=/s").options(MIB, 500, 0)
    assert opts[-1] == ("uri", "nbd+unix:///path/disk?socket=/s")
    assert ("ioengine", "nbd") in opts and ("runtime", "500ms") in opts


def test_the_closed_forms_are_the_nbd_modules_figures():
    """nbd.rs: QD1 = device + handoff + request + L / rate; saturated 1 / (request + L / rate)."""
    read4k = calserve.Probe("r", "randread", 4 * KIB, 1)
    iops, lat = calserve.closed_form(KNOWN, RAM, read4k)
    assert lat == pytest.approx(1_000 + 512 + 90_000 + 25_000 + 2_048)
    write128k = calserve.Probe("w", "randwrite", 128 * KIB, 16)
    iops, lat = calserve.closed_form(KNOWN, RAM, write128k)
    assert iops == pytest.approx(1e9 / (25_000 + 104_857.6))
    assert lat == pytest.approx(16 * (25_000 + 104_857.6))


@pytest.mark.parametrize("handoff", [90_000, 2_000_000])
def test_the_simulator_runs_the_closed_forms_whether_the_hand_off_or_the_path_bounds_qd16(
    handoff: int,
):
    """At QD16 a 2 ms hand-off leaves the path idle (16 / QD1 latency < 1 / request): the
    closed loop's bound, not the saturated rate, is what the simulator must give."""
    nbd = {**KNOWN, "handoff": handoff}
    f = calserve.Fit(nbd, RAM, ())
    probe = next(p for p in calserve.battery(quick=True) if p.engine == "nbd" and p.iodepth > 1)
    job = f"[{probe.name}]\n" + "".join(
        f"{k}={v}\n" for k, v in probe.options(calserve.IMAGE_SIZE, 300, 1)
    )
    out = json.loads(simulate_text(calserve.sim_stack(f), "stack.toml", job, "j.fio", 1))
    side = out["jobs"][0][probe.direction]
    iops, lat = calserve.closed_form(nbd, RAM, probe)
    saturated = 1e9 / (nbd["request"] + probe.bs * 1e9 / nbd[f"{probe.direction}_rate"])
    assert (iops < 0.5 * saturated) == (handoff > 1_000_000)
    assert side["iops"] == pytest.approx(iops, rel=0.02)
    assert side["lat_ns"]["mean"] == pytest.approx(lat, rel=0.02)


def _simulated(f: calserve.Fit, probe: calserve.Probe) -> dict:
    job = f"[{probe.name}]\n" + "".join(
        f"{k}={v}\n" for k, v in probe.options(calserve.IMAGE_SIZE, 300, 1)
    )
    out = json.loads(simulate_text(calserve.sim_stack(f), "stack.toml", job, "j.fio", 1))
    return out["jobs"][0][probe.direction]


def test_the_simulator_copies_a_request_alone_in_flight_at_the_depth_1_rate():
    """QD1 points on a table with qd1 rates: the closed form's latency, L x (1 / rate_d - 1 /
    qd1_rate_d) below the same table without them (a 1 MiB read: 314.6 us); at QD16 the
    requests are not alone and the two tables give the same rate."""
    with_qd1, without = calserve.Fit({**KNOWN, **QD1}, RAM, ()), calserve.Fit(KNOWN, RAM, ())
    for probe in (p for p in calserve.battery() if p.engine == "nbd"):
        fast, slow = _simulated(with_qd1, probe), _simulated(without, probe)
        _, lat = calserve.closed_form(with_qd1.nbd, RAM, probe)
        if probe.iodepth > 1:
            # (The first request of the run, and the last, are alone in flight.)
            assert fast["iops"] == pytest.approx(slow["iops"], rel=0.01), probe.name
            continue
        assert fast["lat_ns"]["mean"] == pytest.approx(lat, rel=0.02), probe.name
        d = probe.direction
        saved = probe.bs * 1e9 * (1 / KNOWN[f"{d}_rate"] - 1 / QD1[f"qd1_{d}_rate"])
        gap = slow["lat_ns"]["mean"] - fast["lat_ns"]["mean"]
        assert gap == pytest.approx(saved, rel=0.01), probe.name


@pytest.mark.parametrize("quick", [True, False])
@pytest.mark.parametrize("qd1", [{}, QD1])
def test_the_fit_recovers_known_parameters_from_closed_form_points(quick: bool, qd1: dict):
    """Points of the closed forms (QD1: handoff + request + L / qd1_rate_d over the RAM
    image; QD16: 1 / (request + L / rate_d)) give the table back, the depth-1 rates too; a
    table without them copies at the depth's rates at QD1, which is what comes back."""
    points = [synthetic({**KNOWN, **qd1}, RAM, p) for p in calserve.battery(quick)]
    f = calserve.fit(points)
    same = {"qd1_read_rate": KNOWN["read_rate"], "qd1_write_rate": KNOWN["write_rate"]}
    assert f.nbd == {**KNOWN, **(qd1 or same)} and f.ram == RAM and f.notes == ()


def test_the_hand_off_is_the_qd1_lines_intercept_whatever_the_larger_sizes_copies_cost():
    """With QD1 copies 2.5 times as fast as at depth, the smallest size's residual less its
    copy at the depth's rate (the former fit) was a hand-off 1.6 us short, 4 KiB x (0.3 +
    0.48) / 2 ns; the QD1 line's intercept is the 90 us that made the points."""
    points = [synthetic({**KNOWN, **QD1}, RAM, p) for p in calserve.battery(quick=True)]
    small = next(p for p in points if p.job.name == "nbd-randread-4k-qd1")
    old = small.read.lat_mean_ns - KNOWN["request"] - (RAM["latency"] + 4 * KIB / 8)
    assert KNOWN["handoff"] - (old - 4 * KIB * 0.5) == pytest.approx(4 * KIB * 0.3)
    assert calserve.fit(points).nbd["handoff"] == KNOWN["handoff"]


def test_a_hand_off_below_zero_at_the_smallest_size_is_zero_and_named():
    """4k QD1 latencies 100 us faster than the closed form: handoff 90 - 100 < 0, set to 0."""
    points = []
    for p in calserve.battery(quick=True):
        pt = synthetic(KNOWN, RAM, p)
        if p.engine == "nbd" and p.iodepth == 1 and p.bs == 4 * KIB:
            lat = calserve._side(pt).lat_mean_ns - 100_000
            pt = replace(pt, **{p.direction: Side(1e9 / lat, 1e9 / lat * p.bs, lat, lat, lat)})
        points.append(pt)
    f = calserve.fit(points)
    assert f.nbd == {**KNOWN, "handoff": 0}
    assert f.notes == (
        "handoff: the 4k QD1 latencies are below request + copy + RAM; set to 0",
        "qd1_read_rate, qd1_write_rate: not fitted (the QD1 points give no positive line of "
        "their sizes); the depth's rates serve depth 1",
    )


def test_request_below_zero_is_zero_and_the_rates_go_through_the_origin():
    """Saturated times of 1 and 100 us at 4k and 128k cross 0 below 4k: request 0, said."""
    probes = calserve.battery(quick=True)
    sat = {4 * KIB: 1_000.0, 128 * KIB: 100_000.0}
    points = []
    for p in probes:
        pt = synthetic(KNOWN, RAM, p)
        if p.engine == "nbd" and p.iodepth > 1:
            x = 1e9 / sat[p.bs]
            side = Side(x, x * p.bs, p.iodepth * sat[p.bs], 0, 0)
            pt = replace(pt, read=side if p.direction == "read" else None)
            pt = replace(pt, write=side if p.direction == "write" else None)
        points.append(pt)
    f = calserve.fit(points)
    assert f.nbd["request"] == 0 and any(n.startswith("request:") for n in f.notes)
    # Through 0: slope = sum w L Y / sum w L^2 with w = 1 / Y^2 = sum (L / Y) / sum (L / Y)^2.
    r = [size / t for size, t in sat.items()]
    assert f.nbd["read_rate"] == round(1e9 * sum(x * x for x in r) / sum(r))
    assert f.nbd["write_rate"] == f.nbd["read_rate"]


def test_times_that_do_not_grow_with_the_size_are_one_error_naming_them():
    points = []
    for p in calserve.battery(quick=True):
        pt = synthetic(KNOWN, RAM, p)
        if p.engine == "nbd" and p.iodepth > 1 and p.direction == "write":
            side = Side(40_000.0, 40_000.0 * p.bs, 400_000.0, 0, 0)
            pt = replace(pt, write=side)
        points.append(pt)
    with pytest.raises(
        CalibrateError, match=r"per request \(write\) do not grow with the size \(4k: 25.0"
    ):
        calserve.fit(points)


def test_the_served_and_simulated_stacks_differ_only_in_the_device_and_the_table():
    served = tomllib.loads(calserve.stack({"path": "/dev/shm/x.img", "size": MIB}, None, "none"))
    f = calserve.Fit(KNOWN, RAM, ())
    sim = tomllib.loads(calserve.sim_stack(f))
    assert sim["nbd"] == {
        "handoff": "90000ns",
        "request": "25000ns",
        "read_rate": 2_000_000_000,
        "write_rate": 1_250_000_000,
    }
    assert sim["device"][0] == {
        "name": "ram",
        "model": "ram",
        "capacity": calserve.IMAGE_SIZE,
        "latency": "1000ns",
        "bandwidth": 8_000_000_000,
    }
    for doc in (served, sim):
        doc.pop("device"), doc.pop("nbd", None)
    assert served == sim and served["vm"][0]["disk"][0]["interface"] == "nbd"


def needs_shm() -> None:
    require_tool("fio", "fio")
    if not SHM.is_dir() or calserve.mount_of(SHM)[1] not in calserve.TMPFS:
        pytest.skip("/dev/shm is not a tmpfs")


@pytest.fixture
def shm():
    """A directory of the test's own on /dev/shm's tmpfs, so that another calibration's image
    (a concurrent run, or one left by a killed run) is neither refused nor touched here."""
    d = Path(tempfile.mkdtemp(prefix="vmio-test-", dir=SHM)) if SHM.is_dir() else SHM
    yield d
    if d != SHM:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("server", calserve.SERVERS)
def test_a_quick_serve_path_calibration_round_trips_through_vmio_sim(
    tmp_path: Path, capsys, server: str, shm: Path
):
    needs_shm()
    if server == calserve.QSD:
        require_tool(calserve.QSD, "qemu-system-common")
    out = tmp_path / "cal"
    err = io.StringIO()
    # (The schedule's share of the budget is checked on a clock of the test's own in
    # test_calibrate.py; a loaded machine stretches fio's start-up beyond any wall limit.)
    sp = calserve.measure(shm, out, quick=True, progress=err, server=server)
    assert not (shm / calserve.image_name()).exists(), "the image is removed"
    assert (sp.toml_path.name, sp.json_path.name) == calserve.out_names(server)
    assert sorted(out.iterdir()) == sorted([sp.toml_path, sp.json_path])
    lines = [x for x in err.getvalue().splitlines() if "ETA" in x]
    assert len(lines) == len(calserve.battery(quick=True)), err.getvalue()
    # Positive, finite parameters; the files hold them.
    assert all(v > 0 and math.isfinite(v) for k, v in sp.fit.nbd.items() if k != "handoff")
    assert sp.fit.nbd["handoff"] >= 0
    toml = sp.toml_path.read_text()
    assert toml.startswith("# vmio calibrate --serve-path") and "# machine: " in toml
    # The header and the record name the server.
    named = "qemu-storage-daemon version " if server == calserve.QSD else "vmio serve ("
    assert f"fio's nbd engine into {named}" in toml.splitlines()[0], toml
    expect: dict = calserve.nbd_table({**sp.fit.nbd, **sp.fit.cpu})
    if server == calserve.QSD:
        expect["block_status"] = True  # QEMU's server asks a read's block status first
    assert tomllib.loads(toml)["nbd"] == expect
    rec = json.loads(sp.json_path.read_text())
    # The path's CPU bound: the machine's CPUs, a positive CPU time per request, a rate (or
    # 0: none); every QD16 point's window in the record, its CPU per request positive.
    # On a machine other processes kept busy (cpuwork.BUSY_BACKGROUND) the keys are left out
    # with a note instead.
    assert rec["vmio_calibrate_serve_path"]["cpu"] == sp.fit.cpu
    busy = [n for n in sp.fit.notes if "its keys are left out" in n]
    if busy:
        assert sp.fit.cpu == {} and "cpu" not in tomllib.loads(toml)["nbd"], busy
    else:
        assert sp.fit.cpu["cores"] == len(os.sched_getaffinity(0))
        assert sp.fit.cpu["cpu"] > 0 and sp.fit.cpu["cpu_rate"] >= 0
    for p in rec["points"]:
        w = p["cpu"]
        assert (w is not None) == (p["iodepth"] > 1), p["name"]
        if w is not None and not busy:
            # /proc/stat counts 10 ms ticks: a window of 0.15 s on 2 cores holds 30, and a
            # tick more at either edge is a share of up to 1.07.
            assert w["window_s"] > 0 and w["cpu_ns"] > 0 and 0 < w["busy_share"] <= 1.1, w
    # qemu-storage-daemon's table has the host's thread wake-up (vmio.real.wakeup) beside it.
    queue = tomllib.loads(toml).get("queue")
    if server == calserve.QSD:
        assert sp.wakeup is not None and sp.wakeup.wakeup_ns > 0
        assert queue == {"wakeup": f"{sp.wakeup.wakeup_ns}ns", "wake_spread": "0ns"}, toml
        assert "# [queue] wakeup: qemu-img bench QD1 4k reads" in toml
        assert rec["vmio_calibrate_serve_path"]["queue"] == {"wakeup": sp.wakeup.wakeup_ns}
        assert len(rec["vmio_calibrate_serve_path"]["wakeup"]["rounds"]) == 2
        # Every path point split by thread role (vmio.real.threadcpu): the main loop and the
        # client work on every request, and the main loop sleeps at QD1 about once a request.
        split = {p["name"]: p["threads"] for p in rec["points"] if "threads" in p}
        assert set(split) == {p.job.name for p in sp.points if p.job.ioengine == "nbd"}
        for name, t in split.items():
            assert t["main_cpu_ns"] > 0 and t["client_cpu_ns"] > 0, (name, t)
        qd1 = [t["main_wakes"] for n, t in split.items() if n.endswith("-qd1")]
        assert qd1 and all(w > 0.5 for w in qd1), split
        assert "main" in rec["vmio_calibrate_serve_path"]["threads"]
        keys = threadcpu.cfs_keys(rec["vmio_calibrate_serve_path"]["threads"])
        if keys is not None:  # the header says what a cfs stack takes
            assert '# under [cpu] model = "cfs": [nbd] client_cpu = ' in toml, toml
    else:
        assert queue is None and sp.wakeup is None
        assert not sp.roles and rec["vmio_calibrate_serve_path"]["threads"] is None
    assert rec["vmio_calibrate_serve_path"]["nbd"] == sp.fit.nbd
    assert rec["vmio_calibrate_serve_path"]["server"] == server
    assert rec["vmio_calibrate_serve_path"]["served_by"].startswith(named)
    assert [p["name"] for p in rec["points"]] == [p.name for p in calserve.battery(quick=True)]
    assert all(p["fio"]["jobname"] == p["name"] for p in rec["points"])
    # vmio sim runs what was fitted (module doc: tolerance). The closed form at depth is the
    # closed loop's bound: exact where the hand-off or the path alone limits the rate; where
    # the two bounds are within 25 % of each other (the knee, which a fit on a loaded machine
    # can land on) the path's two visits per request queue behind each other and the rate
    # falls below the bound, never above it.
    cpu = sp.fit.cpu  # what sim_stack gives the simulator
    for s in sp.simulated:
        iops, lat = calserve.closed_form(sp.fit.nbd, sp.fit.ram, s.job, cpu)
        delay = (
            s.job.iodepth
            * calserve.closed_form(sp.fit.nbd, sp.fit.ram, replace(s.job, iodepth=1), cpu)[0]
        )
        path = calserve.closed_form(sp.fit.nbd, sp.fit.ram, replace(s.job, iodepth=1 << 30), cpu)[0]
        if s.job.iodepth > 1 and 0.8 < delay / path < 1.25:
            assert 0.9 * iops <= s.iops <= 1.02 * iops, (s.job.name, s.iops, iops)
            continue
        assert s.iops == pytest.approx(iops, rel=0.02), s.job.name
        assert s.lat_mean_ns == pytest.approx(lat, rel=0.02), s.job.name
    errors = calserve.check(sp)
    assert len(errors["qd1_lat"]) == 4 and len(errors["saturated_iops"]) == 4
    for what, errs in errors.items():
        # |ln(sim / real)|: a factor either way weighs the same (module doc: tolerance).
        factors = [abs(math.log1p(e)) for e in errs]
        assert statistics.median(factors) <= math.log(2), (what, errs, toml)
    # The table as written runs in `vmio sim` from a stack file: the RAM model and the table.
    stack = tmp_path / "stack.toml"
    stack.write_text(calserve.sim_stack(sp.fit))
    job = tmp_path / "j.fio"
    qd16 = next(s for s in sp.simulated if s.job.iodepth > 1)
    job.write_text(
        f"[{qd16.job.name}]\n"
        + "".join(f"{k}={v}\n" for k, v in qd16.job.options(calserve.IMAGE_SIZE, 500, 1))
    )
    r = run_vmio("sim", "--stack", stack, job, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    side = json.loads(r.stdout)["jobs"][0][qd16.job.direction]
    assert side["iops"] == pytest.approx(qd16.iops, rel=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dir", "/nonexistent-vmio"], "--dir /nonexistent-vmio: no such directory; accepted: "),
        (["--dir", "."], "not a tmpfs: the image must be RAM"),
        (["--budget", "3", "--quick"], "--budget 3: accepted: 9 seconds or more for the 12 points"),
        (["--size", "64m"], "--size: not with --serve-path"),
        (["x.tmp"], "TARGET: not with --serve-path"),
        (["--server", "qsd"], "--server qsd: accepted: vmio, qemu-storage-daemon"),
        (["--server", ""], "--server : accepted: vmio, qemu-storage-daemon"),
    ],
)
def test_bad_serve_path_options_are_one_error_line(
    tmp_path: Path, capsys, args, message, shm: Path
):
    require_tool("fio", "fio")
    if args == ["--dir", "."]:
        args = ["--dir", str(tmp_path)]
        if calserve.mount_of(tmp_path)[1] in calserve.TMPFS:
            pytest.skip(f"{tmp_path} is on a tmpfs")
    elif "--dir" not in args:
        args = [*args, "--dir", str(shm)]
    rc, _, err = vmio(capsys, "calibrate", "--serve-path", *args, "-o", tmp_path / "cal")
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert message in err
    assert not (tmp_path / "cal").exists()


def test_dir_without_serve_path_and_a_missing_fio_are_one_error_line(
    tmp_path: Path, capsys, monkeypatch
):
    fio = shutil.which("fio")
    rc, _, err = vmio(capsys, "calibrate", "--dir", "/dev/shm", "-o", tmp_path / "cal")
    assert rc == 2 and err == (
        "vmio: error: --dir /dev/shm: only with --serve-path (the RAM image's tmpfs) or "
        "--host-fs (where the measured files go)\n"
    )
    rc, _, err = vmio(capsys, "calibrate", "--server", "vmio", "-o", tmp_path / "cal")
    assert rc == 2 and err == (
        "vmio: error: --server vmio: only with --serve-path (the NBD server measured)\n"
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    rc, _, err = vmio(capsys, "calibrate", "--serve-path", "-o", tmp_path / "cal")
    assert rc == 2 and err == "vmio: error: 'fio' is not installed (apt-get install fio)\n"
    # fio there, qemu-storage-daemon not: the server's tool is named.
    if fio:
        (empty / "fio").symlink_to(fio)
        args = ["--serve-path", "--server", calserve.QSD, "-o", tmp_path / "cal"]
        rc, _, err = vmio(capsys, "calibrate", *args)
        assert rc == 2 and err == (
            "vmio: error: 'qemu-storage-daemon' is not installed "
            "(apt-get install qemu-system-common)\n"
        )


def test_two_calibrations_at_once_in_one_dir_each_make_and_remove_their_own_image(
    tmp_path: Path, shm: Path
):
    """A `vmio calibrate --serve-path --quick` process and this one in the same --dir: each
    image is named by its process (the other's is there while this one starts, and is not
    refused), and both are gone afterwards. (Two calibrations at once share the cores, so
    their fits are not checked: the fit may refuse times that do not grow with the size.)"""
    needs_shm()
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "vmio", "calibrate", "--serve-path", "--quick"]
    cmd += ["--dir", str(shm), "-o", str(tmp_path / "other")]
    other = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    theirs = shm / calserve.image_name(other.pid)
    try:
        t0 = time.monotonic()
        while not theirs.exists():
            assert other.poll() is None, other.communicate()[1]
            assert time.monotonic() - t0 < 60, "the other calibration made no image in 60 s"
            time.sleep(0.05)
        assert calserve.image_name() != theirs.name
        try:
            calserve.measure(shm, tmp_path / "cal", quick=True, progress=io.StringIO())
        except CalibrateError as e:
            assert "exists" not in str(e) and "--dir" not in str(e), e
        _, err = other.communicate(timeout=300)
        assert other.returncode in (0, 2) and "exists" not in err, err
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert list(shm.iterdir()) == []


def test_an_existing_image_is_refused_without_force(tmp_path: Path, capsys, shm: Path):
    needs_shm()
    image = shm / calserve.image_name()
    image.write_bytes(b"keep")
    try:
        args = ["--serve-path", "--quick", "--dir", str(shm), "-o", tmp_path / "cal"]
        rc, _, err = vmio(capsys, "calibrate", *args)
        assert rc == 2 and "exists; pass --force" in err and image.read_bytes() == b"keep"
    finally:
        image.unlink()


# --- vmio validate's raid0 part --------------------------------------------------------------


def test_the_raid0_stack_is_an_nbd_disk_with_the_table_and_virtio_blk_without(tmp_path: Path):
    cal = tmp_path / "stack.toml"
    cal.write_text(CALIBRATED)
    table = calserve.nbd_table(KNOWN)
    with_nbd = validate.raid0_stack(cal, 64 * MIB, table)
    doc = tomllib.loads(with_nbd)
    assert doc["nbd"] == table and doc["vm"][0]["disk"][0]["interface"] == "nbd"
    without = tomllib.loads(validate.raid0_stack(cal, 64 * MIB))
    assert "nbd" not in without and without["vm"][0]["disk"][0]["interface"] == "virtio-blk"
    # The simulated raid0 pays the path: a 4k read at QD1 takes at least handoff + request.
    job = validate.Workload("random", 100, 4 * KIB, 1).job_text(0.5, 64 * MIB, True)
    lat = {}
    for name, text in (("nbd", with_nbd), ("virtio", validate.raid0_stack(cal, 64 * MIB))):
        out = json.loads(simulate_text(text, "stack.toml", job, "j.fio", 1))
        lat[name] = out["jobs"][0]["read"]["lat_ns"]["mean"]
    assert lat["nbd"] >= KNOWN["handoff"] + KNOWN["request"] > lat["virtio"]


def test_a_recorded_raid0_part_with_its_table_is_simulated_on_an_nbd_disk(tmp_path: Path):
    rec = Path(__file__).with_name("real_validation_figures.json")
    doc = json.loads(rec.read_text())
    doc["parts"]["raid0"].pop("nbd", None)  # as recorded before seed 5: a virtio-blk disk
    before = validate.recorded_comparison(doc, "raid0", tmp_path / "a")
    doc["parts"]["raid0"]["nbd"] = calserve.nbd_table(KNOWN)
    after = validate.recorded_comparison(doc, "raid0", tmp_path / "b")
    lat = {r.key: r.sim.lat_mean_ns for r in before.rows}
    assert all(r.sim.lat_mean_ns > lat[r.key] for r in after.rows)


def test_a_raid0_part_that_cannot_measure_the_path_says_so_in_one_line(tmp_path, monkeypatch):
    require_tool("fio", "fio")
    if calserve.mount_of(tmp_path)[1] in calserve.TMPFS:
        pytest.skip(f"{tmp_path} is on a tmpfs")
    monkeypatch.setattr(calserve, "DEFAULT_DIR", tmp_path)
    plan = validate.Plan(tmp_path / "stack.toml", tmp_path / "t", MIB, [], 1, 1.0, 1)
    with pytest.raises(VmioError) as e:
        validate.run_raid0(plan, [], tmp_path / "out")
    assert str(e.value).startswith(f"raid0 part: the NBD path: --dir {tmp_path} is on ")
    assert str(e.value).endswith("(--raid0 0 skips the part)") and "\n" not in str(e.value)


def test_validate_measures_the_serve_path_before_its_raid0_part(tmp_path: Path):
    needs_shm()
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "stack.toml").write_text(CALIBRATED, encoding="utf-8")
    target = SHM / f"vmio-calserve-test-{os.getpid()}.tmp"
    out = tmp_path / "val"
    args = ["--points", "1", "--repeat", "1", "--runtime", "0.5", "--raid0", "1", "--quick"]
    r = run_vmio("validate", target, "--calibration", cal, *args, "-o", out)
    assert r.returncode == 0, r.stderr
    text = (out / "raid0" / "serve-path.toml").read_text()
    table = tomllib.loads(text)["nbd"]
    stack = tomllib.loads((out / "raid0" / "stack.toml").read_text())
    # The table goes into the stack as it is, with the CPU bound's keys; a machine that other
    # processes kept busy gets none, said in the table's header (cpuwork.background_note).
    assert stack["nbd"] == table
    assert "cpu" in table or "other processes kept" in text.split("[nbd]")[0]
    assert stack["vm"][0]["disk"][0]["interface"] == "nbd"
    real = json.loads(next((out / "raid0" / "real").glob("*.json")).read_text())
    assert any("is the NBD client the stack models" in n for n in real["vmio"]["notes"])
    # Recorded (scripts/real-validation.py) with its table, the raid0 part is simulated again
    # on the same nbd disk: the recorded predictions come back.
    (out / "calibration").mkdir()
    (out / "calibration" / "stack.toml").write_text(CALIBRATED, encoding="utf-8")
    (out / "calibration" / "measurements.json").write_text('{"machine": null}')
    doc = validate.record(out, out / "raid0", 1, 0.5)
    assert doc["parts"]["raid0"]["nbd"] == table and "nbd" not in doc["parts"]["heldout"]
    c = validate.recorded_comparison(doc, "raid0", tmp_path / "again")
    for row in c.rows:
        want = doc["parts"]["raid0"]["sim"]["/".join(v for _, v in row.key)]
        assert row.sim.lat_mean_ns == pytest.approx(want["lat_mean_ns"], rel=1e-9)
