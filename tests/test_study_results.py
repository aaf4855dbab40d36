"""A study's outputs: sweeps that finish and keep their results, the tidy and points
tables, the progress callback, and the checks an experiment file gets before anything
runs (its report, its keys, the size of its grid)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from conftest import JOB as CONFTEST_JOB
from conftest import STACK, run_vmio
from vmio import results
from vmio.sim import VmioError
from vmio.study import experiment, runner

# conftest's job, shorter: 0.2 s of simulated time on 64 MiB
JOB = (
    CONFTEST_JOB.format(rw="randread", bs="4k")
    .replace("runtime=1", "runtime=0.2")
    .replace("size=1g", "size=64m")
)

SWEEP = """\
[experiment]
name = "qd"
stack = "stack.toml"
job = "job.fio"
{extra}
[[axis]]
name = "cache"
target = "stack:vm.0.disk.0.cache"
values = ["none", "writeback"]

[[axis]]
name = "iodepth"
target = "job:iodepth"
values = ["1", "4"]

[[axis]]
name = "numjobs"
target = "job:numjobs"
values = ["1", "2"]
"""


def _sweep_dir(d: Path, extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "stack.toml").write_text(
        STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8"
    )
    (d / "job.fio").write_text(JOB, encoding="utf-8")
    (d / "experiment.toml").write_text(SWEEP.format(extra=extra), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """The cache x iodepth x numjobs sweep, run with the bench-fio layout asked for (which
    cannot hold it: cache is not in bench-fio's file names), then run again without."""
    d = _sweep_dir(tmp_path_factory.mktemp("sweep"))
    first = run_vmio("study", "experiment.toml", "--out", "out", "--bench-fio-layout", cwd=d)
    (d / "first.err").write_text(first.stderr, encoding="utf-8")
    (d / "first.rc").write_text(str(first.returncode), encoding="utf-8")
    (d / "first.csv").write_bytes((d / "out" / "results.csv").read_bytes())
    again = run_vmio("study", "experiment.toml", "--out", "out", cwd=d)
    assert again.returncode == 0, again.stderr
    (d / "again.err").write_text(again.stderr, encoding="utf-8")
    return d


def test_a_cache_by_iodepth_by_numjobs_sweep_finishes_with_results_csv_and_no_bench_fio_layout(
    tmp_path,
):
    d = _sweep_dir(tmp_path)
    r = run_vmio("study", "experiment.toml", "--out", "out", cwd=d)
    assert r.returncode == 0, r.stderr
    with (d / "out" / "results.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8  # 2 x 2 x 2 points, one direction each
    assert not (d / "out" / "bench-fio").exists()
    assert not (d / "out" / runner.PARTIAL_DIR).exists()  # finished


def test_a_bench_fio_layout_that_cannot_hold_the_grid_fails_naming_itself_and_keeps_the_results(
    sweep,
):
    err = (sweep / "first.err").read_text(encoding="utf-8")
    assert (sweep / "first.rc").read_text() == "2"
    (line,) = [x for x in err.splitlines() if x.startswith("vmio: error:")]
    assert "bench-fio/ (bench-fio's layout)" in line
    assert "share bench-fio's file" in line
    assert "results.csv, results.parquet, points.csv, points.parquet and json/ are written" in line
    # The results were written before the layout failed.
    assert (sweep / "first.csv").read_text(encoding="utf-8").count("\n") == 1 + 8


def test_a_sweep_whose_writer_failed_resumes_every_point_and_finishes(sweep):
    assert "resuming: 8 of 8 points done" in (sweep / "again.err").read_text(encoding="utf-8")
    out = sweep / "out"
    assert (out / "results.csv").read_bytes() == (sweep / "first.csv").read_bytes()
    assert not (out / runner.PARTIAL_DIR).exists()


def test_the_tidy_table_s_columns_have_the_same_types_in_csv_and_parquet(sweep):
    out = sweep / "out"
    for name in ("results", "points"):
        from_csv = pacsv.read_csv(out / f"{name}.csv").schema
        from_parquet = pq.read_table(out / f"{name}.parquet").schema
        assert from_csv.names == from_parquet.names
        for a, b in zip(from_csv, from_parquet, strict=True):
            kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string)
            assert [k(a.type) for k in kinds] == [k(b.type) for k in kinds], (name, a, b)
    schema = pq.read_table(out / "results.parquet").schema
    # An axis of integers is an integer column; of other text, a string column.
    assert schema.field("iodepth").type == pa.int64()
    assert schema.field("cache").type == pa.string()


def test_each_point_s_stack_and_job_are_stored_once_in_the_points_table(sweep):
    out = sweep / "out"
    tidy = pq.read_table(out / "results.parquet").to_pylist()
    points = pq.read_table(out / "points.parquet").to_pylist()
    assert "stack_json" not in tidy[0] and "job_options_json" not in tidy[0]
    assert len(points) == 8
    by_point = {p["point"]: p for p in points}
    assert len(by_point) == 8  # one row per point
    for row in tidy:
        p = by_point[row["point"]]
        assert (p["cache"], p["iodepth"], p["numjobs"]) == (
            row["cache"],
            row["iodepth"],
            row["numjobs"],
        )
        assert json.loads(p["job_options_json"])["iodepth"] == str(row["iodepth"])
        assert f'"cache": "{row["cache"]}"' in p["stack_json"]
        assert (out / "json" / f"{row['point']}.json").is_file()


def test_the_tidy_table_has_fio_s_p50_p90_p99_p99_9_and_p99_99_latencies(sweep):
    out = sweep / "out"
    names = [name for name, _ in results.PERCENTILES]
    assert names == ["clat_p50_ns", "clat_p90_ns", "clat_p99_ns", "clat_p999_ns", "clat_p9999_ns"]
    for row in pq.read_table(out / "results.parquet").to_pylist():
        values = [row[n] for n in names]
        assert 0 < values[0] <= values[1] <= values[2] <= values[3] <= values[4]
        if row["numjobs"] == 1:  # one job: exactly fio's percentiles
            doc = json.loads((out / "json" / f"{row['point']}.json").read_text())
            pct = doc["jobs"][0]["read"]["clat_ns"]["percentile"]
            assert values == [
                pct[k] for k in ("50.000000", "90.000000", "99.000000", "99.900000", "99.990000")
            ]


def test_an_axis_column_is_typed_from_how_every_value_is_written():
    assert results.axis_type(["1", "0"]) == pa.int64()
    assert results.axis_type(["0.5", "2.0"]) == pa.float64()
    assert results.axis_type(["32k", "1m"]) == pa.string()
    assert results.axis_type(["01", "2"]) == pa.string()  # "01" would not come back as written
    assert results.axis_type(["nan"]) == pa.string()


def test_the_progress_callback_receives_a_start_every_point_and_an_end(tmp_path, capsys):
    d = _sweep_dir(tmp_path)
    exp = experiment.load_experiment(d / "experiment.toml")
    events: list[runner.StudyEvent] = []
    res = runner.run_study(exp, progress=events.append)
    assert [e.kind for e in events] == ["start", *["point"] * 8, "end"]
    assert [e.done for e in events[1:-1]] == list(range(1, 9))
    assert {e.total for e in events} == {8}
    assert [e.point for e in events[1:-1]] == [pr.point for pr in res.points]
    assert capsys.readouterr().err == ""  # a callback: nothing drawn


def test_progress_none_silences_a_study(tmp_path, capsys):
    d = _sweep_dir(tmp_path)
    exp = experiment.load_experiment(d / "experiment.toml")
    runner.run_study(exp, progress=None)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


# --- checks before anything runs -------------------------------------------------------------


def _bad(tmp_path: Path, text: str) -> str:
    d = _sweep_dir(tmp_path)
    (d / "experiment.toml").write_text(text, encoding="utf-8")
    with pytest.raises(VmioError) as err:
        experiment.load_experiment(d / "experiment.toml")
    msg = str(err.value)
    assert "\n" not in msg
    return msg.replace(str(d / "experiment.toml"), "E")


def test_a_report_column_given_as_a_list_is_refused_when_the_file_is_read(tmp_path):
    msg = _bad(tmp_path, SWEEP.format(extra="") + '[report]\ncolumns = ["numjobs"]\n')
    assert msg == (
        "E: [report].columns: must be the name of one axis (cache, iodepth, numjobs), "
        "not ['numjobs']"
    )


def test_report_rows_and_figure_axes_that_are_not_axis_names_are_refused(tmp_path):
    msg = _bad(tmp_path, SWEEP.format(extra="") + "[report]\nrows = [1]\n")
    assert msg == (
        "E: [report].rows: must be a list of axis names (cache, iodepth, numjobs), not [1]"
    )
    msg = _bad(tmp_path, SWEEP.format(extra="") + '[figure]\nseries = ["cache"]\n')
    assert msg.startswith("E: [figure].series: must be the name of one axis")


def test_a_misspelled_experiment_key_is_refused_with_the_key_it_resembles(tmp_path):
    msg = _bad(tmp_path, SWEEP.format(extra="tolerence = 0.5\n"))
    assert msg == (
        "E: [experiment].'tolerence': unknown key; did you mean 'tolerance'? accepted: "
        + ", ".join(experiment.EXPERIMENT_KEYS)
    )


def test_a_misspelled_axis_key_is_refused_with_the_key_it_resembles(tmp_path):
    text = SWEEP.format(extra="").replace('values = ["1", "4"]', 'valuse = ["1", "4"]')
    msg = _bad(tmp_path, text)
    assert msg.startswith("E: axis[1].'valuse': unknown key; did you mean 'values'? accepted: ")


def test_an_unknown_calibration_key_unlike_any_is_refused_with_the_accepted_keys(tmp_path):
    text = SWEEP.format(extra="") + ('[[calibration]]\ndescription = "d"\nat_least = 1\nzzz = 1\n')
    msg = _bad(tmp_path, text)
    assert msg == "E: calibration[0].'zzz': unknown key; accepted: " + ", ".join(
        experiment.CALIBRATION_KEYS
    )


def _huge_grid(tmp_path: Path, n_axes: int) -> experiment.Experiment:
    axes = "".join(
        f'[[axis]]\nname = "x{i}"\ntarget = "job:rwmixread"\n'
        f"values = {json.dumps([str(v) for v in range(10)])}\n\n"
        for i in range(n_axes)
    )
    d = _sweep_dir(tmp_path)
    (d / "experiment.toml").write_text(SWEEP.format(extra="") + axes, encoding="utf-8")
    return experiment.load_experiment(d / "experiment.toml")


def test_a_grid_over_the_point_limit_is_refused_with_its_count_before_any_point_exists(tmp_path):
    exp = _huge_grid(tmp_path, 9)  # 8 x 10**9 points: counted, never expanded
    assert exp.grid_size() == 8 * 10**9
    with pytest.raises(VmioError) as err:
        runner.run_study(exp, progress=None)
    assert f"the grid has {8 * 10**9:,} points" in str(err.value)
    assert f"over the limit of {experiment.MAX_POINTS:,}" in str(err.value)


def test_max_points_on_the_command_line_bounds_the_grid_before_the_output_exists(tmp_path):
    d = _sweep_dir(tmp_path)
    r = run_vmio("study", "experiment.toml", "--out", "out", "--max-points", "7", cwd=d)
    assert r.returncode == 2
    assert r.stderr == (
        "vmio: error: experiment.toml: the grid has 8 points (2 cache x 2 iodepth x "
        "2 numjobs), over the limit of 7; raise it with [experiment] max_points or "
        "--max-points, or sweep fewer values\n"
    )
    assert not (d / "out").exists()


def test_the_experiment_s_max_points_raises_or_lowers_the_bound(tmp_path):
    d = _sweep_dir(tmp_path, extra="max_points = 4\n")
    exp = experiment.load_experiment(d / "experiment.toml")
    with pytest.raises(VmioError, match="over the limit of 4;"):
        exp.points()
    assert len(exp.points(max_points=8)) == 8


def test_a_nan_or_infinite_runtime_is_a_value_error_naming_the_field():
    for bad in (math.nan, math.inf):
        result = {"jobs": [{"read": {"runtime": bad, "total_ios": 1}}]}
        with pytest.raises(ValueError) as err:
            results.direction_summary(result, "read")
        assert str(err.value) == f"'read.runtime' is {bad!r}, not a finite number"


def test_a_repeat_file_with_an_infinite_runtime_is_one_error_line_naming_the_file(tmp_path, capsys):
    from vmio.cli import main

    runs = tmp_path / "real"
    runs.mkdir()
    doc = {
        "jobs": [
            {
                "jobname": "j",
                "job options": {"rw": "read"},
                "read": {"bw_bytes": 1, "iops": 1.0, "runtime": "INF", "total_ios": 1},
            }
        ]
    }
    for n in (1, 2):
        text = json.dumps(doc).replace('"INF"', "Infinity" if n == 1 else "1")
        (runs / f"seq.rep{n}.json").write_text(text, encoding="utf-8")
    assert main(["compare", str(runs), str(runs)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vmio: error: '{runs / 'seq.rep1.json'}' is not a fio JSON output: bad value "
        "('read.runtime' is inf, not a finite number)\n"
    )


def test_a_figure_that_cannot_be_drawn_is_named_and_every_other_file_is_written(
    tmp_path, monkeypatch
):
    from vmio.study import plot

    d = _sweep_dir(tmp_path / "in")
    exp = experiment.load_experiment(d / "experiment.toml")
    res = runner.run_study(exp, progress=None)

    def broken(res, path):
        raise RuntimeError("no room for the legend")

    monkeypatch.setattr(plot, "study_figure", broken)
    out = runner.prepare_output_dir(tmp_path / "out", force=False, name=exp.name)
    with pytest.raises(VmioError) as err:
        runner.write_outputs(res, out)
    assert str(err.value) == (
        f"study qd: results.csv, results.parquet, points.csv, points.parquet and json/ are "
        f"written in '{out}', but writing figure.png: no room for the legend failed"
    )
    for name in ("results.csv", "results.parquet", "points.csv", "calibration.csv", "tables.txt"):
        assert (out / name).is_file(), name
    assert len(list((out / "json").glob("*.json"))) == 8
    assert not (out / "figure.png").exists()
