"""S2's host row for real (issue #12 item 6): the device profile's mapping onto the ssd model
(vmio.real.machineprofile) held to its closed forms on synthetic fio results, the comparison
tables (vmio.real.host), the recorded figures (tests/real_host_iozone_figures.json, written by
scripts/real-host-iozone.py), and a short real run: fio profile, real iozone, vmio sim."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

from conftest import missing_tool, require_tool
from vmio import iozone
from vmio.real import host as realhost
from vmio.real import machineprofile
from vmio.real.machineprofile import KIB, MIB, SEQ_SIZES, SMALL, Figures, Point, ProfileError

# A synthetic disk: reads 100 µs + L / 1 GB/s, writes 80 µs + L / 2 GB/s, flush 500 µs.
READ = machineprofile.Line(100_000, 1e9)
WRITE = machineprofile.Line(80_000, 2e9)
SIZES = (SMALL, *SEQ_SIZES)


def figures(read: machineprofile.Line, write: machineprofile.Line, flush_ns: float) -> Figures:
    return Figures(
        tuple(Point(b, read.ns(b)) for b in SIZES),
        tuple(Point(b, write.ns(b)) for b in SIZES),
        flush_ns,
    )


def test_the_fit_recovers_a_fixed_cost_and_a_bandwidth_from_points_on_a_line():
    line = machineprofile.fit(figures(READ, WRITE, 0).read)
    assert line.fixed_ns == pytest.approx(100_000, rel=1e-9)
    assert line.bytes_per_s == pytest.approx(1e9, rel=1e-9)


def test_the_fit_weighs_each_point_by_its_relative_error():
    # Two points: the line goes through both whatever the weights. A third point 10 % above
    # that line at 16 MiB: the fit spreads the miss over the three relative errors.
    pts = [Point(4 * KIB, 100_000.0), Point(MIB, 1_100_000.0)]
    two = machineprofile.fit(pts)
    assert two.ns(4 * KIB) == pytest.approx(100_000) and two.ns(MIB) == pytest.approx(1_100_000)
    high = Point(16 * MIB, 1.1 * two.ns(16 * MIB))
    three = machineprofile.fit([*pts, high])
    # The normal equations of weights 1/T^2: sum(e_i / T_i) = sum(e_i L_i / T_i) = 0 for the
    # relative errors e_i; none of the three points keeps the full 10 %.
    errs = [(three.ns(p.bytes) / p.ns - 1, p) for p in [*pts, high]]
    assert sum(e * 1e5 / p.ns for e, p in errs) == pytest.approx(0, abs=1e-12)
    assert sum(e * p.bytes / p.ns for e, p in errs) == pytest.approx(0, abs=1e-9)
    assert all(abs(e) < 0.08 for e, _ in errs), errs


def test_latencies_that_do_not_grow_with_the_size_are_refused_naming_the_points():
    flat = [Point(SMALL, 100_000.0), Point(MIB, 90_000.0)]
    with pytest.raises(ProfileError, match=r"do not grow with the request size.*accepted"):
        machineprofile.fit(flat)
    with pytest.raises(ProfileError, match="at least two request sizes"):
        machineprofile.fit([Point(SMALL, 1.0), Point(SMALL, 2.0)])


def test_the_ssd_parameters_are_the_module_docs_closed_forms():
    p = machineprofile.ssd_params(figures(READ, WRITE, 500_000), 1 << 40, 256)
    s = p.params
    link = 2_000_000_000
    assert (s["seq_read_rate"], s["seq_write_rate"]) == (1_000_000_000, link)
    assert s["link_rate"] == s["channel_rate"] == link
    assert s["write_iops"] == s["read_iops"] == 12_500  # 1e9 / 80 µs
    # 100 µs - 80 µs - 4096 B at 2 GB/s (2048 ns)
    assert s["read_latency"] == 17_952
    # 500 µs - 80 µs - 8192 B at 2 GB/s (4096 ns)
    assert s["program_latency"] == 415_904
    # A page takes 4096 + 415904 ns; the link moves a page in 4096 ns: 103 dies, 13 a channel.
    assert s["dies_per_channel"] == math.ceil(math.ceil(420_000 / 4096) / 8) == 13
    assert (s["capacity"], s["queue_depth"], s["page_size"]) == (1 << 40, 256, 8 * KIB)
    # On a line, every point is the model's (the 4 KiB read pays its piece on the channel).
    for name, measured, model in p.residuals(figures(READ, WRITE, 500_000)):
        assert model == pytest.approx(measured, rel=1e-4), name


def test_a_flush_cheaper_than_a_write_costs_the_model_one_write_command():
    p = machineprofile.ssd_params(figures(READ, WRITE, 50_000), 1 << 40, 256)
    assert p.params["program_latency"] == 0
    name, measured, model = p.residuals(figures(READ, WRITE, 50_000))[-1]
    assert (name, measured) == ("flush", 50_000)
    assert model == pytest.approx(80_000 + 4096)


def test_a_page_time_beyond_2048_dies_is_refused():
    # 20 ms of flush: a page in 19.92 ms, the link moves one in 4096 ns: 4864 dies.
    with pytest.raises(ProfileError, match=r"needs 4864 dies.*at most 2048"):
        machineprofile.ssd_params(figures(READ, WRITE, 20_000_000), 1 << 40, 256)


def test_the_stack_is_a_native_host_with_the_profile_as_its_ssd():
    p = machineprofile.ssd_params(figures(READ, WRITE, 500_000), 1 << 40, 64)
    stack = tomllib.loads(realhost.stack_toml(p, DISK, 2))
    assert stack["host"]["hypervisor"] == "native"
    (dev,) = stack["device"]
    assert dev["model"] == "ssd" and dev["read_latency"] == "17952ns"
    assert dev["dies_per_channel"] == 13 and dev["queue_depth"] == 64
    assert stack["scheduler"] == {"name": "mq-deadline", "max_merge": "4096k"}
    (vm,) = stack["vm"]
    assert vm["disk"][0]["interface"] == "host" and vm["disk"][0]["filesystem"]["type"] == "ext4"
    with pytest.raises(ProfileError, match="scheduler 'bfq' of vda; accepted: none, mq-deadline"):
        realhost.stack_toml(p, machineprofile.Disk(**{**DISK.__dict__, "scheduler": "bfq"}), 2)


DISK = machineprofile.Disk(
    "/var/tmp", "/", "ext4", "/dev/vda", "vda", 1 << 40, True, "mq-deadline", "virtio_blk",
    4096, 64, "write back", False, "rw",
)  # fmt: skip


def test_the_profiles_fio_jobs_in_vmio_sim_on_its_native_stack_give_the_closed_forms():
    fig = figures(READ, WRITE, 500_000)
    p = machineprofile.ssd_params(fig, 1 << 40, 64)
    sim = realhost.simulate_profile(realhost.stack_toml(p, DISK, 2), DISK, 0.2)
    # The host's own block layer and ext4 add nothing but the simulator's few microseconds
    # per request (its host submit and completion path) to the device's closed forms.
    for (name, _, model), (_, got, _) in zip(p.residuals(fig), p.residuals(sim), strict=True):
        assert 0 <= got - model < 5_000, (name, got, model)


def test_the_tables_give_mean_spread_prediction_and_error_per_record_and_pass():
    rows = [
        realhost.Row(4 * KIB, "write", (90, 100, 110), (120, 120, 120)),
        realhost.Row(4 * KIB, "read", (50, 50, 50), (30, 40, 50)),
    ]
    assert rows[0].mean == 100 and rows[0].spread == pytest.approx(0.1)
    assert rows[1].predicted_mean == 40 and rows[1].predicted_spread == pytest.approx(0.25)
    assert rows[0].error == pytest.approx(0.2) and rows[1].error == pytest.approx(-0.2)
    assert realhost.table(rows, "error", 100).splitlines() == [
        f"{'KB':>16}{'reclen':>8}{'write':>14}{'read':>14}",
        f"{100:>16}{4:>8}{'+20.0%':>14}{'-20.0%':>14}",
    ]
    assert realhost.table(rows, "spread", 100).splitlines()[1].split() == [
        "100", "4", "10.0%", "0.0%",
    ]  # fmt: skip


def test_compare_pairs_each_pass_of_every_measured_run_with_every_prediction():
    def t(phase: str, ns: int) -> iozone.Timing:
        return iozone.Timing(MIB, 4 * KIB, phase, MIB, ns)

    runs = [[t("write", 10**9), t("read", 10**9)], [t("write", 2 * 10**9), t("read", 10**9)]]
    predicted = [[t("write", 10**9), t("read", 2 * 10**9)]] * 2
    rows = realhost.compare(runs, predicted)
    assert [(r.phase, r.measured, r.predicted) for r in rows] == [
        ("write", (1024, 512), (1024, 1024)),
        ("read", (1024, 1024), (512, 512)),
    ]
    with pytest.raises(ValueError, match="pass reread of 4096 bytes: in 0 of 2 runs"):
        realhost.compare(runs, [[t("reread", 1)]])


def test_the_mean_of_several_profiles_is_taken_point_by_point():
    a, b = figures(READ, WRITE, 100_000), figures(WRITE, READ, 300_000)
    m = machineprofile.mean_figures([a, b])
    assert m.flush_ns == 200_000
    assert [p.ns for p in m.read] == [(READ.ns(s) + WRITE.ns(s)) / 2 for s in SIZES]
    assert [p.bytes for p in m.write] == list(SIZES)


FIXTURE = Path(__file__).with_name("real_host_iozone_figures.json")


def _figures(fio: dict) -> Figures:
    read, write = (tuple(Point(**p) for p in fio[k]) for k in ("read", "write"))
    return Figures(read, write, fio["flush_ns"])


def test_the_recorded_figures_cover_every_pass_and_their_profiles_map_as_recorded():
    rec = json.loads(FIXTURE.read_text(encoding="utf-8"))
    keys = {"how", "measured", "command", "cores", "disk", "repetitions", "rows", "mean_profile"}
    assert set(rec) == keys
    disk = machineprofile.Disk(**rec["disk"])
    reps = rec["repetitions"]
    for r in [*reps, rec["mean_profile"]]:
        fig = _figures(r["fio"])
        assert [p.bytes for p in fig.read] == [p.bytes for p in fig.write] == list(SIZES)
        p = machineprofile.ssd_params(fig, disk.size_bytes, disk.nr_requests)
        assert p.params == r["ssd"] and realhost.stack_toml(p, disk, rec["cores"]) == r["stack"]
    mean = machineprofile.mean_figures([_figures(r["fio"]) for r in reps])
    assert mean == _figures(rec["mean_profile"]["fio"])
    stack = FIXTURE.parent.parent / "experiments" / "real-host" / "stack.toml"
    assert stack.read_text(encoding="utf-8") == rec["mean_profile"]["stack"]
    rows = [
        realhost.Row(r["record_bytes"], r["phase"], tuple(r["measured"]), tuple(r["predicted"]))
        for r in rec["rows"]
    ]
    records = sorted({r.record_bytes for r in rows})
    assert [(r.record_bytes, r.phase) for r in rows] == [
        (b, ph) for b in records for ph in iozone.PHASES
    ]
    assert len(reps) >= 3
    assert all(len(r.measured) == len(r.predicted) == len(reps) for r in rows)
    assert all(min(r.predicted) > 0 and min(r.measured) > 0 for r in rows)


def test_a_short_real_run_profiles_this_disk_and_compares_iozone_with_the_simulator(
    tmp_path: Path,
):
    require_tool("fio", "fio")
    try:
        disk = machineprofile.disk_of(tmp_path)
    except ProfileError as e:  # a temporary directory on tmpfs: fails under CI
        missing_tool(f"a temporary directory on a block device: {e}")
        return
    pairs = [
        realhost.run_pair(tmp_path, disk, 2, "4m", ["4k", "1m"], 0.3, fio_file_bytes=32 * MIB)
        for _ in range(2)
    ]
    rows = realhost.compare([p.measured for p in pairs], [p.predicted for p in pairs])
    sim = realhost.simulate_profile(pairs[0].stack, disk, 0.3)
    print(f"\n{machineprofile.residual_table(pairs[0].profile, pairs[0].figures, sim)}")
    print(realhost.report(rows, 4096))
    assert [(r.record_bytes, r.phase) for r in rows] == [
        (b, ph) for b in (4 * KIB, MIB) for ph in iozone.PHASES
    ]
    assert all(min(r.predicted) > 0 and min(r.measured) > 0 for r in rows)
    assert not list(tmp_path.iterdir())
