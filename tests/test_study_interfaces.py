"""Study "interfaces" (S2): iozone's quantities, S2's tables, the calibration rows, the goldens."""

from __future__ import annotations

import csv
import math

import pytest

from conftest import run_vmio
from golden_outputs import check_study_dir
from vmio import iozone
from vmio.sim import VmioError
from vmio.study import experiment, quantities, runner
from vmio.study import iozone as iozonereport
from vmio.study.evaluation import PointResult, StudyResult
from vmio.study.experiment import Point

TARGETS = ("host", "virtio-blk", "ide")
RECORDS = ("4K", "4096K", "16384K")
KIB = 1024


def iozone_result(rates: dict[int, list[int]]) -> dict:
    """A result with one iozone job: per record size (KB), the six tests' KB/s in order."""
    passes = [
        {"kbytes": 102400, "reclen_kbytes": rec, "test": t, "kb_per_s": kb}
        for rec, kbs in rates.items()
        for t, kb in zip(iozone.PHASES, kbs, strict=True)
    ]
    return {"jobs": [{"jobname": "iozone", "vmio_iozone": {"passes": passes}}], "vmio": {}}


def test_an_iozone_rate_is_its_passs_kb_per_s_and_a_rows_is_the_gmean_of_the_six_tests():
    r = iozone_result({4: [10, 20, 40, 80, 160, 320], 4096: [500] * 6})
    assert quantities.quantity_value(r, "iozone:4k:write") == 10.0
    assert quantities.quantity_value(r, "iozone:4:random write") == 320.0  # a bare number is KB
    assert quantities.quantity_value(r, "iozone:4m:read") == 500.0
    # gmean(10 * 2^k, k = 0..5) = 10 * 2^2.5
    assert quantities.quantity_value(r, "iozone:4k") == pytest.approx(10 * 2**2.5)
    assert quantities.quantity_value(r, "iozone:4k/4096k") == pytest.approx(10 * 2**2.5 / 500)
    assert quantities.quantity_value(r, "iozone:4k/4096k:reread") == pytest.approx(80 / 500)
    assert quantities.quantity_unit("iozone:4096k:read") == "KB/s"
    assert quantities.quantity_unit("iozone:4k/4096k") == ""
    assert quantities.format_quantity(506168.4, "iozone:4096k:reread") == "506168"


def test_two_iozone_jobs_add_up_as_iozones_children_do():
    one = iozone_result({16384: [100, 200, 300, 400, 500, 600]})
    two = {"jobs": one["jobs"] * 2, "vmio": {}}
    assert quantities.quantity_value(two, "iozone:16m:random read") == 1000.0


def test_bad_iozone_quantities_name_the_accepted_forms_and_a_missing_pass_names_the_records():
    assert quantities.check_quantity("iozone:4096k:random read") is None
    assert "'seq' is not an iozone test" in quantities.check_quantity("iozone:4k:seq")
    assert "is not a size" in quantities.check_quantity("iozone:4q")
    assert "accepted: iozone:R, iozone:R:TEST" in quantities.check_quantity("iozone:4k/8k/16k")
    assert "iozone:<record>[:<test>]" in quantities.check_quantity("iozones")
    r = iozone_result({4: [1] * 6})
    with pytest.raises(VmioError, match=r"'iozone:8k': no iozone pass 'write' with 8k.*: 4k\)"):
        quantities.quantity_value(r, "iozone:8k")
    with pytest.raises(VmioError, match="none: no iozone job"):
        quantities.quantity_value({"jobs": [{}]}, "iozone:4k:read")


def fake_study(rates: dict[str, dict[int, list[int]]]) -> StudyResult:
    exp = experiment.load_experiment("interfaces")
    points = [
        PointResult(Point((("target", t),)), "", iozone_result(rates[t]))
        for t in exp.axis("target").values
        if t in rates
    ]
    return StudyResult(exp, 1, False, points, [], [])


def test_the_share_table_is_each_tests_kb_s_over_the_baselines_and_the_gmean_of_those():
    over = experiment.load_experiment("interfaces").report["iozone"][1]
    other = next(t for t in TARGETS if t != over)
    res = fake_study(
        {
            over: {4: [100] * 6, 4096: [400] * 6},
            other: {4: [50, 50, 100, 100, 25, 200], 4096: [200] * 6},
        }
    )
    rows = iozonereport.share_table(res).splitlines()
    assert rows[0] == (
        f"iozone, % of target={over} (same record size and test; gmean: of the six tests)"
    )
    # gmean(0.5, 0.5, 1, 1, 0.25, 2) = 2^((-1 - 1 + 0 + 0 - 2 + 1) / 6) = 2^(-1/2)
    gm = f"{100 * 2 ** (-1 / 2):.1f} %"
    assert rows[3].split() == ["4K", other, *"50.0 % 50.0 % 100.0 % 100.0 % 25.0 % 200.0 %".split(),
                               *gm.split()]  # fmt: skip
    assert rows[4].split()[:2] == ["4096K", other] and rows[4].split()[-2:] == ["50.0", "%"]


def test_the_interfaces_study_sweeps_the_disk_interface_under_s2s_iozone_command():
    exp = experiment.load_experiment("interfaces")
    assert exp.axis("target").target == "stack:vm.0.disk.0.interface"
    assert exp.axis("target").values == TARGETS
    assert exp.report["iozone"] == ("target", "host")
    assert exp.figure["kind"] == "iozone"
    job = exp.job_path.read_text()
    assert "iozone=-e -I -a -s 100M -r 4k -r 4096k -r 16384k -i 0 -i 1 -i 2" in job
    host, virtio, ide = (inp.stack_text for inp in runner.point_inputs(exp))
    assert 'hypervisor = "native"' in host and 'interface = "host"' in host
    assert 'hypervisor = "kvm"' in virtio and 'interface = "virtio-blk"' in virtio
    assert 'hypervisor = "kvm"' in ide and 'interface = "ide"' in ide
    assert all('cache = "none"' in s and 'memory = "4g"' in s for s in (host, virtio, ide))
    ids = [c.id for c in exp.calibrations]
    summary = [f"{t}-vs-host-{r}" for t in ("virtio", "ide") for r in ("4096k", "16384k")]
    assert ids[:6] == [*summary, "gap-4k-vs-4096k", "gap-4k-vs-16384k"]
    tests = ("write", "rewrite", "read", "reread", "randread", "randwrite")
    assert ids[6:] == [
        f"{tgt}-{rec}-{t}"
        for rec in ("4096k", "16384k")
        for tgt in ("host", "virtio", "emulated")
        for t in tests
    ]


def test_an_iozone_figure_without_an_iozone_report_is_refused(tmp_path):
    src = experiment.BUILTIN_STUDIES / "interfaces"
    for name in ("stack.toml", "iozone.fio"):
        (tmp_path / name).write_text((src / name).read_text())
    text = (src / "experiment.toml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("iozone = {"))
    (tmp_path / "experiment.toml").write_text(text.replace(line, ""))
    with pytest.raises(VmioError, match=r'kind = "iozone" needs a \[report\] iozone'):
        experiment.load_experiment(tmp_path / "experiment.toml")
    (tmp_path / "experiment.toml").write_text(
        text.replace(line, line.split("over")[0] + 'over = "scsi" }')
    )
    with pytest.raises(VmioError, match=r"\[report\]\.iozone\.over: 'scsi' is not a value of axis"):
        experiment.load_experiment(tmp_path / "experiment.toml")


def test_vmio_study_interfaces_end_to_end_in_s2s_layout_and_byte_for_byte_again(tmp_path):
    """The full study (a few seconds): S2's table (record x target rows, iozone's six tests
    as columns), every calibration row evaluated, the figure, the same bytes on a second
    run, and the goldens (golden_outputs.py; VMIO_UPDATE_GOLDEN=1 regenerates them)."""
    out = tmp_path / "out"
    r = run_vmio("study", "interfaces", "--out", out)
    assert r.returncode == 0, r.stderr
    for name in ("results.csv", "results.parquet", "calibration.csv", "tables.txt", "figure.png"):
        assert (out / name).is_file(), name
    assert len(list((out / "json").glob("*.json"))) == len(
        experiment.load_experiment("interfaces").axis("target").values
    )
    text = (out / "tables.txt").read_text()
    lines = text.splitlines()
    head = lines.index("iozone, KB/s (1 KB = 1024 bytes), per record size and test")
    assert lines[head + 1].split() == ["record", "target", "write", "rewrite", "read", "reread",
                                       "random", "read", "random", "write"]  # fmt: skip
    values = experiment.load_experiment("interfaces").axis("target").values
    rows = [line.split() for line in lines[head + 3 : head + 3 + len(RECORDS) * len(values)]]
    assert [(row[0], row[1]) for row in rows] == [(rec, t) for rec in RECORDS for t in values]
    assert all(len(row) == 8 and all(int(x) > 0 for x in row[2:]) for row in rows)
    cal = list(csv.DictReader((out / "calibration.csv").read_text().splitlines()))
    assert cal and all(row["status"] in ("PASS", "MISS") for row in cal)
    assert all(not math.isnan(float(row["simulated"])) for row in cal)
    again = tmp_path / "again"
    r = run_vmio("study", "interfaces", "--out", again)
    assert r.returncode == 0, r.stderr
    for name in ("tables.txt", "calibration.csv", "results.csv"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    check_study_dir(out, "interfaces")
