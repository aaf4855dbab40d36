"""Study "vmm-overhead" (S4): 3 vs 4 CPU-bound jobs natively, on KVM and on Xen, floating and
pinned; the jobs' run-time and CPU quantities, the slowdown (the [report] gain of 4 jobs over
3) in the tables and the figure, and S4's calibration rows."""

from __future__ import annotations

import csv
import json
import tomllib

import pytest

from conftest import run_vmio
from golden_outputs import check_study_dir
from vmio.sim import VmioError
from vmio.study import cluster, evaluation, experiment, quantities, runner, tables
from vmio.study import pdc as pdcreport

PLATFORMS = ("native", "native-pinned", "kvm", "kvm-pinned", "xen", "xen-pinned")
PROGRAMS = ("bzip2", "gobmk")
JOBS = ("3", "4")
CALIBRATIONS = (
    "native-slowdown",
    "kvm-slowdown",
    "kvm-below-xen-cores-free",
    "kvm-above-xen-cores-busy",
)


def cpu_result(runtimes_ms=(30_000, 30_400), threads=(), core_busy_ns=(10, 10)):
    return {
        "jobs": [{"jobname": "s4", "job_runtime": ms} for ms in runtimes_ms],
        "vmio": {
            "cpu": {
                "model": "cfs",
                "cores": len(core_busy_ns),
                "threads": [dict(t) for t in threads],
                "core_busy_ns": list(core_busy_ns),
            }
        },
    }


def thread(kind, cpu_ns=0, wait_ns=0, migrations=0):
    return {"name": kind, "kind": kind, "cpu_ns": cpu_ns, "wait_ns": wait_ns,
            "migrations": migrations, "completed": 0}  # fmt: skip


def test_cpu_quantities_read_the_jobs_and_the_cpu_models_threads():
    r = cpu_result(
        runtimes_ms=(30_000, 30_400, 30_200),
        threads=(
            thread("vcpu", cpu_ns=900, wait_ns=100, migrations=3),
            thread("vcpu", cpu_ns=700, wait_ns=300, migrations=1),
            thread("vmm-main", cpu_ns=30),
            thread("kernel", cpu_ns=15, migrations=50),
            thread("dom0", cpu_ns=5),
        ),
        core_busy_ns=(1000, 650),
    )
    assert quantities.quantity_value(r, "job_runtime_s") == pytest.approx(30.2)
    # The VMM's threads (vmm-main, kernel, dom0): 50 ns of 1650 ns busy.
    assert quantities.quantity_value(r, "vmm_cpu_pct") == pytest.approx(100 * 50 / 1650)
    # The job carriers: 400 ns waiting of 2000 ns runnable; their migrations only.
    assert quantities.quantity_value(r, "job_wait_pct") == pytest.approx(20.0)
    assert quantities.quantity_value(r, "job_migrations") == 4.0
    native = cpu_result(threads=(thread("job", cpu_ns=10, migrations=2),), core_busy_ns=(10, 0))
    assert quantities.quantity_value(native, "vmm_cpu_pct") == 0.0
    assert quantities.quantity_value(native, "job_migrations") == 2.0
    assert quantities.format_quantity(30.2, "job_runtime_s") == "30.200"
    assert quantities.format_quantity(3.0303, "vmm_cpu_pct") == "3.03 %"
    assert quantities.quantity_unit("job_runtime_s") == "s"


def test_cpu_quantities_without_the_cpu_model_or_jobs_name_what_is_missing():
    with pytest.raises(VmioError, match=r"no vmio.cpu \(the stack's \[cpu\] model must be"):
        quantities.quantity_value({"jobs": [], "vmio": {}}, "vmm_cpu_pct")
    with pytest.raises(VmioError, match="'job_runtime_s': the result has no jobs"):
        quantities.quantity_value({"jobs": [], "vmio": {}}, "job_runtime_s")
    assert quantities.check_quantity("job_migrations") is None
    assert "job_runtime_s" in quantities.check_quantity("runtime")


def test_the_study_sweeps_six_platforms_two_programs_and_three_vs_four_jobs():
    exp = experiment.load_experiment("vmm-overhead")
    assert [a.name for a in exp.axes] == ["platform", "program", "jobs"]
    assert exp.axis("platform").values == PLATFORMS
    assert exp.axis("program").values == PROGRAMS
    assert exp.axis("jobs").values == JOBS
    assert exp.report["gain"] == ("jobs", "3")
    assert exp.figure["kind"] == "bars" and exp.figure["gain"] is True
    assert [c.id for c in exp.calibrations] == list(CALIBRATIONS)
    assert len(exp.points()) == 24


def _point(inputs, **coords):
    return next(i for i in inputs if all(i.point.get(k) == v for k, v in coords.items()))


def test_each_platform_sets_only_its_own_hypervisors_pinning_keys():
    inputs = runner.point_inputs(experiment.load_experiment("vmm-overhead"))
    native = _point(inputs, platform="native", program="gobmk", jobs="4")
    stack = tomllib.loads(native.stack_text)
    assert stack["host"] == {
        "cores": 4,
        "memory": "8g",
        "hypervisor": "native",
        "ept": False,
        "cache": {"profile": "core2-quad-q9550"},
    }
    assert stack["cpu"] == {"model": "cfs"}
    assert "vcpus" not in stack["vm"][0] and "cputune" not in stack["vm"][0]
    assert "cpu_profile=gobmk" in native.job_text and "numjobs=4" in native.job_text
    assert "description=native" in native.job_text and "cpus_allowed=" not in native.job_text
    pinned = _point(inputs, platform="native-pinned", jobs="3")
    assert "cpus_allowed=0-3" in pinned.job_text
    assert "cpus_allowed_policy=split" in pinned.job_text
    assert "cputune" not in tomllib.loads(pinned.stack_text)["vm"][0]
    kvm = tomllib.loads(_point(inputs, platform="kvm-pinned").stack_text)
    assert kvm["host"]["hypervisor"] == "kvm" and kvm["vm"][0]["vcpus"] == 4
    assert kvm["vm"][0]["cputune"] == {"vcpupin": ["0", "1", "2", "3"], "emulatorpin": "3"}
    assert "dom0_pin" not in kvm["cpu"]
    xen = tomllib.loads(_point(inputs, platform="xen-pinned").stack_text)
    assert xen["cpu"] == {"model": "cfs", "dom0_vcpus": 1, "dom0_pin": "3"}
    assert xen["vm"][0]["cputune"] == {"vcpupin": ["0", "1", "2", "3"]}
    floating = tomllib.loads(_point(inputs, platform="xen").stack_text)
    assert floating["cpu"] == {"model": "cfs", "dom0_vcpus": 1}
    assert "cputune" not in floating["vm"][0]


# Closed-form run times (s) of the fake points: base by program, x (1 + platform overhead)
# x (1 + slowdown of the 4th job).
BASE = {"bzip2": 30.0, "gobmk": 40.0}
OVERHEAD = {"native": 0.0, "kvm": 0.01, "xen": 0.02}
SLOWDOWN = {"native": 0.0128, "kvm": 0.0489, "xen": 0.02}


def fake_runtime_ms(platform: str, program: str, jobs: str) -> int:
    hv = platform.split("-")[0]
    s = BASE[program] * (1 + OVERHEAD[hv]) * (1 + (SLOWDOWN[hv] if jobs == "4" else 0.0))
    return round(s * 1000)


def test_the_slowdown_is_the_gain_of_four_jobs_over_three_and_the_calibration_reads_it():
    exp = experiment.load_experiment("vmm-overhead")
    points = [
        evaluation.PointResult(
            p, "", cpu_result(runtimes_ms=[fake_runtime_ms(*dict(p.coords).values())])
        )
        for p in exp.points()
    ]
    res = evaluation.StudyResult(
        exp, 1, False, points, evaluation.evaluate_calibration(exp, points), []
    )
    gains = pdcreport.gains(res, "job_runtime_s")
    key = (("platform", "kvm"), ("program", "bzip2"), ("jobs", "4"))
    assert gains[key] == pytest.approx(4.89, abs=0.01)
    assert len(gains) == 12  # every point with 4 jobs, none with 3
    rows = {r.calibration.id: r for r in res.calibration}
    assert rows["native-slowdown"].simulated == pytest.approx(1.0128, abs=1e-4)
    assert rows["kvm-slowdown"].simulated == pytest.approx(1.0489, abs=1e-4)
    assert rows["native-slowdown"].status == rows["kvm-slowdown"].status == "PASS"
    # KVM's overhead 1 % vs Xen's 2 % with 3 jobs; with 4: 1.01 * 1.0489 vs 1.02 * 1.02.
    assert rows["kvm-below-xen-cores-free"].simulated == pytest.approx(1.01 / 1.02, abs=1e-4)
    assert rows["kvm-below-xen-cores-free"].status == "PASS"
    busy = 1.01 * 1.0489 / (1.02 * 1.02)
    assert rows["kvm-above-xen-cores-busy"].simulated == pytest.approx(busy, abs=1e-4)
    assert rows["kvm-above-xen-cores-busy"].status == "PASS"
    text = tables.summary_text(res)
    assert "Gain over jobs=3, mean run time of the jobs, s" in text
    assert "\nkvm/bzip2 " in text and "+4.9 %" in text


@pytest.fixture
def fake_simulator(monkeypatch):
    """The simulator replaced by the closed form above (the platform from fio's description)."""

    def fake(stack_text, stack_path, job_text, job_path, seed, vm, limits=None):
        opts = dict(line.split("=", 1) for line in job_text.splitlines() if "=" in line)
        ms = fake_runtime_ms(opts["description"], opts["cpu_profile"], opts["numjobs"])
        result = cpu_result(runtimes_ms=[ms] * int(opts["numjobs"]))
        return json.dumps({"global options": {}, **result})

    monkeypatch.setattr(cluster, "simulate_text", fake)  # what simulates a point (SimTask)


def test_the_figure_draws_the_slowdown_bars_and_without_a_report_gain_says_why(
    fake_simulator, tmp_path
):
    exp = experiment.load_experiment("vmm-overhead")
    res = runner.run_study(exp, quick=True, progress_tty=False)
    out = runner.prepare_output_dir(tmp_path / "out", force=False)
    runner.write_outputs(res, out)
    assert (out / "figure.png").stat().st_size > 10_000
    with open(out / "calibration.csv", encoding="utf-8") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["PASS"] * 4
    exp.report["gain"] = None
    with pytest.raises(VmioError, match=r"\[figure\] gain = true needs a \[report\] gain"):
        runner.write_outputs(res, runner.prepare_output_dir(tmp_path / "again", force=False))


def test_vmio_study_vmm_overhead_quick_end_to_end_and_byte_for_byte_again(tmp_path):
    """The whole grid with 3 s of work per job (--quick): every point in the tables, the
    slowdown table and the figure, the same bytes on a second run, and the goldens."""
    out = tmp_path / "out"
    r = run_vmio("study", "vmm-overhead", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    for name in ("results.csv", "calibration.csv", "figure.png", "tables.txt"):
        assert (out / name).is_file(), name
    with open(out / "results.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {(row["platform"], row["program"], row["jobs"]) for row in rows} == {
        (p, g, j) for p in PLATFORMS for g in PROGRAMS for j in JOBS
    }
    text = (out / "tables.txt").read_text()
    assert "Gain over jobs=3" in text
    for p in PLATFORMS:
        assert f"\n{p}/bzip2 " in text, p
    again = tmp_path / "again"
    r = run_vmio("study", "vmm-overhead", "--quick", "--out", again)
    assert r.returncode == 0, r.stderr
    for name in ("tables.txt", "calibration.csv", "results.csv"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    check_study_dir(out, "vmm-overhead")
