"""`vmio validate`: the held-out family, and a whole run on a RAM-backed file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import require_tool, run_vmio
from vmio.real import calibrate, validate
from vmio.real.validate import BLOCK_SIZES, PATTERNS, QUEUE_DEPTHS, READ_SHARES, Workload, heldout


def test_the_held_out_family_is_the_same_list_for_the_same_seed_and_another_for_another():
    assert heldout(1, 30) == heldout(1, 30)
    assert heldout(1, 30) != heldout(2, 30)
    assert heldout(1, 10) == heldout(1, 30)[:10]


def test_no_held_out_workload_is_a_calibration_point_and_none_repeats():
    ws = heldout(3, 200)
    assert len(set(ws)) == 200
    assert not any(w.in_battery() for w in ws)
    for w in ws:
        assert w.pattern in PATTERNS and w.read_pct in READ_SHARES
        assert w.bs in BLOCK_SIZES and w.iodepth in QUEUE_DEPTHS


def test_the_battery_points_are_recognised_as_not_held_out():
    k = 1024
    assert Workload("sequential", 100, 64 * k, 8).in_battery()
    assert Workload("sequential", 0, 1024 * k, 32).in_battery()
    assert Workload("random", 100, 4 * k, 16).in_battery()
    assert Workload("random", 70, 4 * k, 8).in_battery()
    assert not Workload("random", 70, 4 * k, 4).in_battery()
    assert not Workload("sequential", 100, 64 * k, 4).in_battery()
    assert not Workload("random", 100, 8 * k, 16).in_battery()
    assert Workload("sequential", 50, 256 * k, 8).in_battery()
    assert not Workload("sequential", 50, 128 * k, 8).in_battery()
    assert not Workload("sequential", 70, 64 * k, 8).in_battery()
    assert not Workload("random", 50, 64 * k, 8).in_battery()


def test_every_job_of_the_calibration_battery_is_in_the_battery_here():
    for job in calibrate.battery():
        if job.fdatasync:
            continue
        share = {"read": 100, "write": 0}.get(job.direction, job.rwmixread)
        pattern = "random" if job.rw.startswith("rand") else "sequential"
        assert Workload(pattern, share, job.bs, job.iodepth).in_battery(), job.name


def test_a_workload_names_its_fio_options():
    w = Workload("random", 70, 16 * 1024, 8)
    assert w.name == "randrw70-16k-qd8"
    text = w.job_text(2.0, 1 << 30, direct=True)
    assert text.splitlines() == [
        "[randrw70-16k-qd8]",
        "rw=randrw",
        "rwmixread=70",
        "bs=16384",
        "iodepth=8",
        "ioengine=libaio",
        "direct=1",
        "size=1073741824",
        "runtime=2s",
        "time_based=1",
    ]
    assert Workload("sequential", 0, 4096, 1).rw == "write"
    assert Workload("sequential", 50, 4096, 1).rw == "rw"


def test_too_many_points_is_an_error_naming_the_limit():
    with pytest.raises(validate.VmioError, match="at most 400"):
        heldout(1, 401)


# A flash device for a RAM-backed file: the figures need not fit tmpfs for the workflow's test.
STACK = """\
[host]
cores = 2
hypervisor = "native"

[[device]]
name = "shm"
model = "flash"
capacity = 67108864
units = 2
read_latency = "20us"
write_latency = "20us"

[[volume]]
name = "shm"
layout = "single"
devices = ["shm"]

[scheduler]
name = "none"

[[vm]]
name = "host"

[[vm.disk]]
name = "shm"
volume = "shm"
interface = "host"
cache = "none"
"""


def test_a_validation_run_simulates_and_runs_every_held_out_workload_and_compares_them(
    tmp_path: Path,
):
    require_tool("fio", "fio")
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "stack.toml").write_text(STACK, encoding="utf-8")
    target = shm / f"vmio-validate-test-{tmp_path.name}.tmp"
    out = tmp_path / "val"
    r = run_vmio(
        "validate",
        target,
        "--calibration",
        cal,
        "--points",
        "3",
        "--repeat",
        "2",
        "--runtime",
        "0.5",
        "--quick",
        "-o",
        out,
    )
    assert r.returncode == 0, r.stderr
    assert not target.exists(), "the target file it created is removed"
    names = [w.name for w in heldout(1, 3)]
    assert sorted(p.stem for p in (out / "sim").glob("*.json")) == sorted(names)
    assert len(list((out / "real").glob("*.rep*.json"))) == 6
    directs = {
        json.loads(p.read_text())["jobs"][0]["job options"]["direct"]
        for p in (out / "real").glob("*.json")
    }
    assert len(directs) == 1, "every run opens the file the same way"
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert {row["file"] for row in rows} == set(names)
    assert all(row["real_runs"] == "2" for row in rows)
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    last = r.stdout.strip().splitlines()
    assert any(line.startswith("vmio compare: ") for line in last)
    assert any(line.startswith("vmio validate: targets") for line in last)
    again = run_vmio("validate", target, "--calibration", cal, "-o", out)
    assert again.returncode == 2 and "exists" in again.stderr


def test_a_bad_validate_value_is_one_error_line(tmp_path: Path):
    r = run_vmio("validate", "--points", "0", "-o", tmp_path / "x")
    assert r.returncode == 2
    assert "--points" in r.stderr and "1..400" in r.stderr
    r = run_vmio("validate", tmp_path, "-o", tmp_path / "y")
    assert r.returncode == 2 and "not a regular file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_real_runs_go_in_rounds_so_a_workloads_repetitions_are_apart():
    a, b, c = validate.heldout(3, 3)
    order = validate.rounds(2, [a, b, c])
    assert order == [(1, a), (1, b), (1, c), (2, a), (2, b), (2, c)]


def test_every_held_out_workload_is_off_the_batterys_grid_between_and_beyond_its_points():
    ws = heldout(5, 300)
    sizes = {j.bs for j in calibrate.battery()}
    depths = {j.iodepth for j in calibrate.battery()}
    for w in ws:
        assert not w.in_battery() and not w.on_grid(), w.name
        # At least one dimension the battery never ran: a size, a depth, a mix or a sync.
        assert w.bs not in sizes or w.iodepth not in depths or w.read_pct not in (0, 100) or w.sync
        assert w.sync == 0 or w.read_pct == 0, "fdatasync only on write-only workloads"
    # Between and beyond: sizes between the battery's and above 1m, depths between and
    # above 32, mixes, writes with an fdatasync every N.
    assert {12 * 1024, 24 * 1024, 192 * 1024, 2048 * 1024} <= {w.bs for w in ws}
    assert {3, 6, 48, 64} <= {w.iodepth for w in ws}
    assert {90, 70, 30} <= {w.read_pct for w in ws}
    assert {1, 4, 16} <= {w.sync for w in ws}


def test_a_synced_workload_names_its_fdatasync_and_passes_it_to_fio():
    w = Workload("random", 0, 12 * 1024, 3, sync=4)
    assert w.name == "randwrite-12k-qd3-sync4"
    assert ("fdatasync", "4") in w.options(1.0, 1 << 30, True)
    assert not w.in_battery()


def test_family_1_is_still_drawn_for_the_records_made_with_it():
    old = heldout(1, 5, family=1)
    assert [w.sync for w in old] == [0] * 5
    assert all(w.bs in validate.BLOCK_SIZES_V1 and not w.in_battery_v1() for w in old)


def fio_json(read: dict | None, write: dict | None = None) -> str:
    """A fio JSON output of one job with `read`/`write` {total_ios, p50, p99, p999} in us."""

    def side(d: dict | None) -> dict:
        if d is None:
            return {"total_ios": 0, "bw_bytes": 0, "iops": 0, "lat_ns": {"mean": 0}, "clat_ns": {}}
        pct = {
            "50.000000": d["p50"] * 1e3,
            "99.000000": d["p99"] * 1e3,
            "99.900000": d["p999"] * 1e3,
        }
        return {
            "total_ios": d["n"],
            "bw_bytes": 1e6,
            "iops": 100.0,
            "lat_ns": {"mean": d["p50"] * 1e3},
            "clat_ns": {"mean": d["p50"] * 1e3, "percentile": pct},
        }

    job = {
        "jobname": "w",
        "job options": {"rw": "randrw"},
        "read": side(read),
        "write": side(write),
    }
    return json.dumps({"jobs": [job]})


def test_the_percentiles_are_compared_to_the_real_median_with_its_spread(tmp_path: Path):
    (tmp_path / "real").mkdir()
    (tmp_path / "sim").mkdir()
    # Two real runs: p99 of 200 and 300 us (median 250, spread 40 %); the sim 275 (+10 %).
    # The second run has too few requests for a p99.9: the median is the first's alone.
    reps = [
        {"n": 20_000, "p50": 100, "p99": 200, "p999": 400},
        {"n": 5_000, "p50": 100, "p99": 300, "p999": 900},
    ]
    for k, r in enumerate(reps, 1):
        (tmp_path / "real" / f"w.rep{k}.json").write_text(fio_json(r))
    (tmp_path / "sim" / "w.json").write_text(
        fio_json({"n": 50_000, "p50": 90, "p99": 275, "p999": 500})
    )
    rows = {t.label: t for t in validate.tails(tmp_path)}
    assert rows["p99"].real == 250_000 and rows["p99"].spread == pytest.approx(0.4)
    assert rows["p99"].error == pytest.approx(0.1)
    assert rows["p50"].error == pytest.approx(-0.1)
    assert rows["p99.9"].real == 400_000 and rows["p99.9"].spread is None
    sm = validate.tail_summary(list(rows.values()))
    assert sm["p99"]["median"] == pytest.approx(0.1)
    text = validate.tail_text(list(rows.values()))
    assert text.splitlines()[-1].startswith("vmio validate: percentiles: p50 error median 10.0 %")
