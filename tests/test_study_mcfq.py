"""Study "mcfq" (S1): every VM runs its own workload; quantities beyond MB/s."""

from __future__ import annotations

import csv

import pytest

from conftest import run_vmio
from vmio import study
from vmio.sim import VmioError

S1_ENTRIES = (
    "cfq-aged-fileserver",
    "cfq-aged-varmail",
    "cfq-clean-fileserver",
    "cfq-clean-varmail",
    "mcfq-ratio-vm1",
    "mcfq-ratio-vm2",
    "mcfq-ratio-vm3",
    "mcfq-beats-cfq-aged-fileserver",
    "mcfq-beats-cfq-aged-varmail",
)


def fake_result(bws=(400.0, 280.0, 160.0, 40.0), error=12.5, jain=0.97):
    vms = [
        {"name": f"vm{i + 1}", "weight": w, "bw_bytes": bw, "bytes_per_s": []}
        for i, (w, bw) in enumerate(zip((1000, 700, 400, 100), bws, strict=True))
    ]
    return {
        "jobs": [],
        "vmio": {"vms": vms, "share": {"error_rate_pct": error, "jain_index": jain}},
    }


def test_share_quantities_come_from_vmio_share():
    r = fake_result()
    assert study.quantity_value(r, "error_rate_pct") == 12.5
    assert study.quantity_value(r, "jain") == 0.97


def test_ratio_is_relative_to_the_lightest_weight_vm():
    r = fake_result(bws=(400.0, 280.0, 160.0, 40.0))
    assert study.quantity_value(r, "ratio:vm1") == pytest.approx(10.0)
    assert study.quantity_value(r, "ratio:vm3") == pytest.approx(4.0)
    assert study.quantity_value(r, "ratio:vm4") == pytest.approx(1.0)
    with pytest.raises(VmioError, match="no VM 'vm9'"):
        study.quantity_value(r, "ratio:vm9")


def test_unknown_quantities_are_refused():
    assert study.check_quantity("ratio:vm2") is None
    assert study.check_quantity("total") is None
    assert "error_rate_pct" in study.check_quantity("errors")


def test_a_star_in_a_stack_path_sets_every_element():
    stack = {"vm": [{"name": "a"}, {"name": "b"}]}
    study.set_stack_value(stack, "vm.*.workload", "x.fio", "test")
    assert [v["workload"] for v in stack["vm"]] == ["x.fio", "x.fio"]
    with pytest.raises(VmioError, match="not an array"):
        study.set_stack_value(stack, "host.*.x", 1, "test")


def test_the_mcfq_experiment_runs_the_vms_own_workloads():
    exp = study.load_experiment("mcfq")
    assert exp.job_path is None
    inputs = study.point_inputs(exp, quick=True)
    assert len(inputs) <= 8
    first = inputs[0]
    assert first.job_text is None
    assert ("runtime", "10") in first.job_settings
    assert 'workload = "fileserver.fio"' in first.stack_text
    mcfq = next(i for i in inputs if i.point.get("scheduler") == "mcfq")
    assert "bw_window = 10" in mcfq.stack_text
    assert "bw_window" not in first.stack_text


def test_bounds_and_value_calibrations_on_fake_points():
    exp = study.load_experiment("mcfq")
    points = [
        study.PointResult(p, "", fake_result(error=22.0 if p.get("scheduler") == "cfq" else 5.5))
        for p in exp.points()
    ]
    rows = {r.calibration.id: r for r in study.evaluate_calibration(exp, points)}
    assert rows["cfq-aged-fileserver"].status == "PASS"
    assert rows["cfq-clean-varmail"].status == "MISS"  # 22 > 15 + 5
    assert rows["mcfq-ratio-vm1"].simulated == pytest.approx(10.0)
    assert rows["mcfq-ratio-vm1"].status == "PASS"  # within 15 % of 10.3
    assert rows["mcfq-beats-cfq-aged-varmail"].simulated == pytest.approx(0.25)
    assert rows["mcfq-beats-cfq-aged-varmail"].status == "PASS"


def test_vmio_study_mcfq_quick_end_to_end(tmp_path):
    out = tmp_path / "out"
    r = run_vmio("study", "mcfq", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "error rate of the bandwidth shares" in r.stdout
    for name in ("results.csv", "calibration.csv", "figure.png", "tables.txt"):
        assert (out / name).is_file(), name
    with open(out / "calibration.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [row["id"] for row in rows] == list(S1_ENTRIES)
    for row in rows:
        assert row["status"] in ("PASS", "MISS"), row
        assert row["simulated"] != ""
    with open(out / "results.csv", encoding="utf-8") as f:
        results = list(csv.DictReader(f))
    assert {row["scheduler"] for row in results} == {"cfq", "mcfq"}
    assert {row["precondition"] for row in results} == {"clean", "aged"}
