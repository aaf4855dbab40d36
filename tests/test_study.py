"""`vmio study volumes-cache`: the end-to-end run (real simulator) and its Python parts."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_vmio
from vmio.results import directions_of
from vmio.study import experiment

S0_FIGURES = {
    "A-linear-read",
    "A-stripe-read-32k",
    "A-stripe-read-max",
    "A-raid0-read-32k",
    "A-raid0-read-large",
    "A-randread-32k",
    "A-randrw-32k",
    "B-linear-read-max",
    "B-randread-gain",
}


@pytest.fixture(scope="module")
def quick_study(tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("study") / "vc"
    r = run_vmio("study", "volumes-cache", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    return out, r


def test_the_quick_study_writes_every_output_file(quick_study):
    out, _ = quick_study
    for name in ("results.csv", "results.parquet", "calibration.csv", "figure.png", "tables.txt"):
        assert (out / name).is_file(), name
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_tidy_table_has_one_row_per_point_and_direction(quick_study):
    out, _ = quick_study
    exp = experiment.load_experiment("volumes-cache")
    points = exp.points(quick=True)
    expected = sum(len(directions_of(p.get("workload"))) for p in points)
    assert expected == 3 * 2 * 2 * len(exp.quick_values["bs"]) * (1 + 1 + 2)
    with (out / "results.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    table = pq.read_table(out / "results.parquet")
    assert len(rows) == table.num_rows == expected
    for column in (
        "study",
        "layout",
        "cache",
        "workload",
        "rw",
        "bs_bytes",
        "direction",
        "bw_bytes",
        "iops",
        "clat_mean_ns",
        "clat_p99_ns",
        "runtime_ms",
        "point",
    ):
        assert column in table.column_names
    assert all(int(r["bw_bytes"]) > 0 for r in rows)
    with (out / "points.csv").open(encoding="utf-8") as f:
        points_rows = {r["point"]: r for r in csv.DictReader(f)}
    assert len(points_rows) == len(points)
    for r in rows:  # each row's point records its effective stack and job, once
        p = points_rows[r["point"]]
        assert r["layout"] in p["stack_json"]
        assert json.loads(p["job_options_json"])["rw"] == r["workload"]
    assert len(list((out / "json").glob("*.json"))) == len(points)


def test_the_calibration_table_has_every_s0_figure(quick_study):
    out, r = quick_study
    with (out / "calibration.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {row["id"] for row in rows} == S0_FIGURES
    assert all(row["status"] in ("PASS", "MISS") for row in rows)
    assert all(row["simulated"] != "" for row in rows)
    for figure in S0_FIGURES:
        assert figure in r.stdout


def test_the_study_prints_one_table_per_cache_mode_with_block_size_columns(quick_study):
    _, r = quick_study
    assert "Case A: cache=none" in r.stdout and "Case B: cache=writeback" in r.stdout
    assert "Direct / sequential read / LVM linear" in r.stdout
    assert "Cached / random read/write 50:50 / RAID 0 (md, 512k)" in r.stdout
    assert "figures PASS" in r.stdout
    # not a terminal: progress is one line per 10 %, on stderr only
    assert "100% (" in r.stderr and "\r" not in r.stderr


def test_the_study_refuses_a_non_empty_output_directory_without_force(quick_study):
    out, _ = quick_study
    before = (out / "results.csv").read_bytes()
    r = run_vmio("study", "volumes-cache", "--quick", "--out", out)
    assert r.returncode == 2
    assert "not empty" in r.stderr and "--force" in r.stderr
    assert (out / "results.csv").read_bytes() == before


def test_an_unknown_study_is_an_error_listing_the_built_in_ones():
    r = run_vmio("study", "no-such-study")
    assert r.returncode == 2
    assert "unknown study 'no-such-study'" in r.stderr and "volumes-cache" in r.stderr
