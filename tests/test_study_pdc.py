"""Study "pdc" (S3): writeback vs PDC, the journal quantities, the gain and detection report."""

from __future__ import annotations

import csv
import math

import pytest

from conftest import run_vmio
from golden_outputs import check_study_dir
from vmio.sim import VmioError
from vmio.study import experiment, quantities, runner
from vmio.study import pdc as pdcreport

WORKLOADS = (
    "varmail",
    "fileserver",
    "oltp",
    "linkbench",
    "sqlite",
    "sqlite-wal",
    "leveldb-fillsync",
    "leveldb-compact",
)
MODES = ("writeback", "pdc")
MIB = 1 << 20


def guest_result(
    disks=({"read_bytes": 300, "write_bytes": 700, "journal_write_bytes": 200},),
    hit_ratio=0.25,
    written_back_pages=1000,
    iops=(10.0, 30.0),
):
    return {
        "jobs": [{"read": {"iops": iops[0]}, "write": {"iops": iops[1]}}],
        "vmio": {
            "guests": [{"vm": "vm1", "disks": [dict(d) for d in disks]}],
            "page_cache": {
                "hit_ratio": hit_ratio,
                "written_back_pages": written_back_pages,
                "fsync_written_pages": written_back_pages // 2,
                "flushes": 7,
            },
            "virtual_time_ns": 10 * 10**9,
        },
    }


def test_journal_quantities_are_shares_of_the_summed_guest_disks():
    disks = (
        {"read_bytes": 100, "write_bytes": 400, "journal_write_bytes": 100, "flushes": 4,
         "journal_flushes": 3, "fsyncs": 10, "fsyncs_committing": 9},
        {"read_bytes": 0, "write_bytes": 500, "journal_write_bytes": 50, "flushes": 6,
         "journal_flushes": 6, "fsyncs": 10, "fsyncs_committing": 7},
    )  # fmt: skip
    r = guest_result(disks=disks)
    assert quantities.quantity_value(r, "journal_io_pct") == pytest.approx(100 * 150 / 1000)
    assert quantities.quantity_value(r, "journal_write_pct") == pytest.approx(100 * 150 / 900)
    assert quantities.quantity_value(r, "journal_flush_pct") == pytest.approx(90.0)
    assert quantities.quantity_value(r, "fsync_commit_pct") == pytest.approx(80.0)
    assert quantities.quantity_value(r, "host_hit_pct") == pytest.approx(25.0)
    assert quantities.quantity_value(r, "host_writeout_mb") == pytest.approx(4.096)
    assert quantities.quantity_value(r, "host_fsync_mb") == pytest.approx(2.048)
    assert quantities.quantity_value(r, "host_flushes") == 7.0
    assert quantities.quantity_value(r, "ops") == pytest.approx(40.0)


def test_a_share_of_no_fsyncs_is_nan_shown_as_a_dash_and_left_out_of_a_calibration():
    r = guest_result()
    value = quantities.quantity_value(r, "fsync_commit_pct")
    assert math.isnan(value)
    assert quantities.format_quantity(value, "fsync_commit_pct") == "-"
    with pytest.raises(VmioError, match="no vmio.guests"):
        quantities.quantity_value({"jobs": [], "vmio": {}}, "journal_io_pct")


def test_gmean_of_ratios_is_the_ratio_of_gmeans():
    gmean = quantities.REDUCERS["gmean"]
    assert gmean([2.0, 8.0]) == pytest.approx(4.0)
    pdc, wb = [1.32 * 100, 1.03 * 7, 1.17 * 55], [100.0, 7.0, 55.0]
    assert gmean(pdc) / gmean(wb) == pytest.approx((1.32 * 1.03 * 1.17) ** (1 / 3))


def test_detected_grown_and_dropped_events_step_precision_and_recall():
    journal = (128 * MIB, 256 * MIB)
    entry = {
        "vm": "vm1",
        "disk": "vda",
        "journal": list(journal),
        "events": [
            # A first prediction covering half the journal and 64 MiB before it.
            {"at_ns": 2 * 10**9, "kind": "detected", "lo": 64 * MIB, "hi": 192 * MIB},
            # The range grows to the journal's end.
            {"at_ns": 3 * 10**9, "kind": "grown", "lo": 64 * MIB, "hi": 256 * MIB},
            # A second, exact prediction; then the first is dropped.
            {"at_ns": 4 * 10**9, "kind": "detected", "lo": 128 * MIB, "hi": 256 * MIB},
            {"at_ns": 5 * 10**9, "kind": "dropped", "lo": 64 * MIB, "hi": 256 * MIB},
        ],
    }
    steps = pdcreport.accuracy_steps(entry)
    assert [s.at_s for s in steps] == [0.0, 2.0, 3.0, 4.0, 5.0]
    assert steps[0].precision is None and steps[0].recall == 0.0
    assert (steps[1].precision, steps[1].recall) == (0.5, 0.5)
    assert (steps[2].precision, steps[2].recall) == pytest.approx((128 / 192, 1.0))
    # Two overlapping ranges count once (their union).
    assert (steps[3].precision, steps[3].recall) == pytest.approx((128 / 192, 1.0))
    assert pdcreport.union([(5, 9), (0, 3), (3, 4), (8, 12)]) == [(0, 4), (5, 12)]
    # "dropped" removes the range it overlaps (both here): nothing predicted.
    assert steps[4].precision is None and steps[4].recall == 0.0


def test_the_first_pass_is_the_journal_size_over_the_disks_mean_journal_rate():
    r = guest_result(disks=({"disk": "vda", "journal_write_bytes": 512 * MIB},))
    entry = {"vm": "vm1", "disk": "vda", "journal": [0, 128 * MIB], "events": []}
    # 512 MiB of journal writes in 10 s: a 128 MiB journal is written through in 2.5 s.
    assert pdcreport.first_pass_s(r, entry) == pytest.approx(2.5)
    assert pdcreport.first_pass_s(r, {**entry, "journal": None}) is None


def test_the_pdc_study_has_two_scenarios_with_every_workload_and_both_modes():
    st = experiment.load_study("pdc")
    assert [e.path.stem for e in st.parts] == ["single", "shared"]
    for exp in st.parts:
        assert exp.axis("workload").values == WORKLOADS
        assert exp.axis("mode").values == MODES
        assert exp.report["gain"] == ("mode", "writeback")
        assert exp.figure["kind"] == "pdc"
        ids = [c.id for c in exp.calibrations]
        assert ids[:2] == ["gain-mean", "gain-varmail"]
        assert {f"gain-{w}" for w in WORKLOADS} <= set(ids)
    shared = runner.point_inputs(st.part("shared"))
    assert shared[0].stack_text.count("[[vm]]") == 4
    assert shared[1].stack_text.count('cache = "pdc"') == 4


def test_a_gain_over_an_unknown_value_is_refused(tmp_path):
    exp = experiment.BUILTIN_STUDIES / "pdc" / "single.toml"
    text = exp.read_text().replace('over = "writeback"', 'over = "none"')
    for name in ("stack-single.toml", "varmail.fio"):
        (tmp_path / name).write_text((exp.parent / name).read_text())
    (tmp_path / "single.toml").write_text(text)
    with pytest.raises(VmioError, match=r"\[report\]\.gain\.over: 'none' is not a value of axis"):
        experiment.load_experiment(tmp_path / "single.toml")


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_vmio_study_pdc_quick_end_to_end_and_byte_for_byte_again(tmp_path):
    """Both scenarios on the --quick grid (300 ms per point: plumbing, not figures): every
    workload and mode in the tables, the three figures, the same bytes on a second run."""
    out = tmp_path / "out"
    r = run_vmio("study", "pdc", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    assert "=== study pdc, part 2/2: shared" in r.stdout
    for part in ("single", "shared"):
        for name in (*runner.OUTPUT_FILES, "json"):
            assert (out / part / name).exists(), (part, name)
        rows = read_csv(out / part / "results.csv")
        assert {(row["workload"], row["mode"]) for row in rows} == {
            (w, m) for w in WORKLOADS for m in MODES
        }
        text = (out / part / "tables.txt").read_text()
        assert "Gain over mode=writeback" in text
        for w in WORKLOADS:
            assert f"\n{w} " in text, w
        cal = read_csv(out / part / "calibration.csv")
        assert cal[0]["id"] == "gain-mean" and cal[0]["status"] in ("PASS", "MISS")
    again = tmp_path / "again"
    r = run_vmio("study", "pdc", "--quick", "--out", again)
    assert r.returncode == 0, r.stderr
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.suffix in (".txt", ".csv", ".json"):
            assert p.read_bytes() == (again / p.relative_to(out)).read_bytes(), p
    # Byte for byte: every part's tables.txt and calibration.csv (golden_outputs.py;
    # VMIO_UPDATE_GOLDEN=1 regenerates them).
    check_study_dir(out, "pdc")
