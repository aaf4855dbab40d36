"""`vmio compare REAL SIM`: matching, relative errors, summary, CSV, plot and repetitions, on
small fio JSON files and study directories whose numbers are chosen so every figure is
computed by hand in the test."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vmio.cli import main
from vmio.real import compare
from vmio.real.compare import Metrics

MB = 1e6
US = 1e3


def direction(bw_mb: float, iops: float, lat_us: float, p99_us: float) -> dict:
    """One direction of a fio job as fio 3.33 writes it (clat 2 us below lat: slat)."""
    return {
        "bw_bytes": int(bw_mb * MB),
        "iops": iops,
        "total_ios": int(iops) * 10,
        "runtime": 10000,
        "io_bytes": int(bw_mb * MB) * 10,
        "lat_ns": {"mean": lat_us * US, "N": int(iops) * 10},
        "clat_ns": {
            "mean": lat_us * US - 2000.0,
            "percentile": {"50.000000": int(lat_us * US), "99.000000": int(p99_us * US)},
        },
    }


IDLE = {"bw_bytes": 0, "iops": 0.0, "total_ios": 0, "lat_ns": {"mean": 0.0}, "clat_ns": {}}


def job(name: str, rw: str, read: dict | None = None, write: dict | None = None) -> dict:
    return {
        "jobname": name,
        "job options": {"rw": rw, "bs": "4k"},
        "read": read or IDLE,
        "write": write or IDLE,
        "trim": IDLE,
    }


def write_fio_json(path: Path, jobs: list[dict], preamble: str = "") -> Path:
    path.write_text(preamble + json.dumps({"fio version": "fio-3.33", "jobs": jobs}, indent=1))
    return path


@pytest.fixture
def fio_pair(tmp_path: Path) -> tuple[Path, Path]:
    """REAL: a (randread), b (randrw), c (real only); SIM: a, b, d (sim only).

    bandwidth errors: a +10 %, b/read -25 %, b/write 0 %    -> |e| 0, 0.10, 0.25
    mean latency errors: a +50 %, b/read -10 %, b/write +5 % -> |e| 0.05, 0.10, 0.50
    """
    real = write_fio_json(
        tmp_path / "real.json",
        [
            job("a", "randread", read=direction(100, 1000, 100, 300)),
            job("b", "randrw", direction(200, 2000, 200, 400), direction(400, 4000, 1000, 2000)),
            job("c", "read", read=direction(50, 50, 20, 40)),
        ],
        preamble="fio: a note fio printed before its JSON\n",
    )
    sim = write_fio_json(
        tmp_path / "sim.json",
        [
            job("a", "randread", read=direction(110, 1100, 150, 330)),
            job("b", "randrw", direction(150, 1500, 180, 200), direction(400, 4000, 1050, 3000)),
            job("d", "write", write=direction(10, 10, 10, 10)),
        ],
    )
    return real, sim


def test_fio_json_points_are_matched_by_job_and_direction_with_hand_computed_errors(fio_pair):
    real, sim = (compare.load(p) for p in fio_pair)
    c = compare.compare(real, sim)
    keys = [r.key for r in c.rows]
    assert keys == [
        (("job", "a"), ("direction", "read")),
        (("job", "b"), ("direction", "read")),
        (("job", "b"), ("direction", "write")),
    ]
    a, b_read, b_write = c.rows
    assert a.errors["bw"] == pytest.approx(0.10)
    assert a.errors["iops"] == pytest.approx(0.10)
    assert a.errors["lat"] == pytest.approx(0.50)  # lat_ns, not clat_ns (which would be +50.5 %)
    assert a.errors["p99"] == pytest.approx(0.10)
    assert b_read.errors["bw"] == pytest.approx(-0.25)
    assert b_read.errors["p99"] == pytest.approx(-0.5)
    assert b_write.errors["lat"] == pytest.approx(0.05)
    assert a.real == Metrics(100 * MB, 1000.0, 100 * US, 300 * US)


def test_the_summary_gives_median_and_linearly_interpolated_p90_of_absolute_errors(fio_pair):
    c = compare.compare(*(compare.load(p) for p in fio_pair))
    s = c.summary
    # |bw errors| 0, 0.10, 0.25: median 0.10; p90 at rank 0.9 * 2 = 1.8: 0.10 + 0.8 * 0.15
    assert (s.bw_median, s.bw_p90) == (pytest.approx(0.10), pytest.approx(0.22))
    # |latency errors| 0.05, 0.10, 0.50: p90 = 0.10 + 0.8 * 0.40
    assert (s.lat_median, s.lat_p90) == (pytest.approx(0.10), pytest.approx(0.42))
    assert compare.summary_line(c) == (
        "vmio compare: 3 points; bandwidth error median 10.0 %, p90 22.0 %; "
        "mean latency error median 10.0 %, p90 42.0 %"
    )


def test_unmatched_points_are_counted_and_listed_not_fatal(fio_pair, capsys):
    c = compare.compare(*(compare.load(p) for p in fio_pair))
    assert c.unmatched_real == [(("job", "c"), ("direction", "read"))]
    assert c.unmatched_sim == [(("job", "d"), ("direction", "write"))]
    assert main(["compare", *map(str, fio_pair)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 REAL point(s) not in SIM: job=c direction=read" in out
    assert "1 SIM point(s) not in REAL: job=d direction=write" in out
    assert out[-1].startswith("vmio compare: 3 points; bandwidth error median 10.0 %")
    row_a = next(line for line in out if line.startswith("a "))
    assert row_a.split() == (
        "a read 100.0 110.0 +10.0% 1000 1100 +10.0% 100.0 150.0 +50.0% 300.0 330.0 +10.0%".split()
    )


def test_jobs_of_one_name_are_summed_with_latency_weighted_by_io_count(tmp_path):
    path = write_fio_json(
        tmp_path / "clones.json",
        [
            job("w", "write", write=direction(100, 1000, 100, 300)),  # 10000 I/Os
            job("w", "write", write=direction(300, 3000, 200, 500)),  # 30000 I/Os
        ],
    )
    (m,) = compare.load(path).values()
    assert m == Metrics(400 * MB, 4000.0, (100 * 1 + 200 * 3) / 4 * US, 500 * US)


def test_a_zero_real_value_has_no_error_and_is_left_out_of_the_summary():
    real = {(("job", "x"),): Metrics(0.0, 0.0, 100.0, 100.0), (("job", "y"),): Metrics(10, 1, 1, 1)}
    sim = {(("job", "x"),): Metrics(5.0, 5.0, 120.0, 100.0), (("job", "y"),): Metrics(13, 1, 1, 1)}
    c = compare.compare(real, sim)
    assert c.rows[0].errors["bw"] is None
    assert c.summary.bw_median == pytest.approx(0.3)  # y's only
    assert c.summary.lat_median == pytest.approx(0.1)  # (0.2 + 0) / 2


STUDY_HEADER = (
    "study,layout,engine,bs,rw,bs_bytes,direction,bw_bytes,iops,io_bytes,total_ios,"
    "clat_mean_ns,clat_p99_ns,runtime_ms,seed,stack_json,job_options_json,machine_json"
)


def write_study(directory: Path, engine: str, points: dict[tuple[str, str], tuple]) -> Path:
    """A study output directory: results.csv with one read row per (layout, bs); the values
    are (bw MB/s, iops, clat mean us, clat p99 us). engine and machine_json are not axes."""
    directory.mkdir()
    with (directory / "results.csv").open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(STUDY_HEADER.split(","))
        for (layout, bs), (bw, iops, lat, p99) in points.items():
            w.writerow(
                ["s", layout, engine, bs, "read", 4096, "read", int(bw * MB), iops, 0, 0]
                + [lat * US, int(p99 * US), 1000, 1, '{"a": 1}', "{}", f'{{"e": "{engine}"}}']
            )
    return directory


@pytest.fixture
def study_pair(tmp_path: Path) -> tuple[Path, Path]:
    """bandwidth errors +20 %, -10 %, 0 %; latency errors -20 %, +30 %, +10 %."""
    real = write_study(
        tmp_path / "real",
        "real",
        {
            ("linear", "4k"): (100, 100, 50, 80),
            ("linear", "1m"): (500, 5, 2000, 3000),
            ("raid0", "4k"): (200, 200, 40, 60),
            ("raid0", "1m"): (900, 9, 1000, 1500),
        },
    )
    sim = write_study(
        tmp_path / "sim",
        "sim",
        {
            ("linear", "4k"): (120, 120, 40, 80),
            ("linear", "1m"): (450, 4.5, 2600, 3000),
            ("raid0", "4k"): (200, 200, 44, 60),
            ("stripe", "4k"): (1, 1, 1, 1),
        },
    )
    return real, sim


def test_study_points_are_matched_by_axis_columns_and_direction_only(study_pair):
    c = compare.compare(*(compare.load(p) for p in study_pair))
    assert compare.key_names(c) == ["layout", "bs", "direction"]
    assert [r.errors["bw"] for r in c.rows] == [
        pytest.approx(0.2),
        pytest.approx(-0.1),
        pytest.approx(0.0),
    ]
    assert [r.errors["lat"] for r in c.rows] == [
        pytest.approx(-0.2),
        pytest.approx(0.3),
        pytest.approx(0.1),
    ]
    assert c.unmatched_real == [(("layout", "raid0"), ("bs", "1m"), ("direction", "read"))]
    assert c.unmatched_sim == [(("layout", "stripe"), ("bs", "4k"), ("direction", "read"))]
    # |bw| 0, 0.1, 0.2: p90 = 0.1 + 0.8 * 0.1; |lat| 0.1, 0.2, 0.3: p90 = 0.2 + 0.8 * 0.1
    assert compare.summary_line(c) == (
        "vmio compare: 3 points; bandwidth error median 10.0 %, p90 18.0 %; "
        "mean latency error median 20.0 %, p90 28.0 %"
    )


def test_csv_writes_one_row_per_common_point_and_refuses_to_overwrite(study_pair, tmp_path):
    out = tmp_path / "errors.csv"
    assert main(["compare", *map(str, study_pair), "--csv", str(out)]) == 0
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["layout"], r["bs"]) for r in rows] == [
        ("linear", "4k"),
        ("linear", "1m"),
        ("raid0", "4k"),
    ]
    assert float(rows[1]["real_bw_bytes"]) == 500 * MB
    assert float(rows[1]["sim_lat_mean_ns"]) == 2600 * US
    assert float(rows[1]["bw_error"]) == pytest.approx(-0.1)
    before = out.read_bytes()
    assert main(["compare", *map(str, study_pair), "--csv", str(out)]) == 2
    assert out.read_bytes() == before
    assert main(["compare", *map(str, study_pair), "--csv", str(out), "--force"]) == 0


def test_the_plot_is_a_png_drawn_identically_twice(study_pair, tmp_path):
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    for path in (first, second):
        assert main(["compare", *map(str, study_pair), "--plot", str(path)]) == 0
    data = first.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    assert data == second.read_bytes()


def test_no_common_point_is_one_error_line_and_exit_status_2(fio_pair, study_pair, capsys):
    assert main(["compare", str(fio_pair[0]), str(study_pair[1])]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "vmio: error: REAL and SIM have no point in common (REAL: 4 point(s), e.g. job=a "
        "direction=read; SIM: 4 point(s), e.g. layout=linear bs=4k direction=read)\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[global]\nrw=read\n", "is not a fio JSON output: line 1: Expecting value"),
        ('{"fio version": "fio-3.33"}', 'is not a fio JSON output (no "jobs" list of objects)'),
        (
            '{"jobs": [{"jobname": "a", "job options": {"rw": "read"}, "read": {"iops": "x"}}]}',
            "is not a fio JSON output: bad value",
        ),
        (
            '{"jobs": [{"jobname": "a", "job options": {"rw": "read"}, '
            '"read": {"bw_bytes": 1e31}}]}',
            "job a read: bw_bytes 1e+31 is not a number in 0..1e+30",
        ),
    ],
)
def test_a_file_that_is_not_a_fio_json_is_one_error_line_naming_it(
    tmp_path, capsys, content, message, fio_pair
):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["compare", str(bad), str(fio_pair[1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vmio: error: '{bad}' {message}") and err.count("\n") == 1


def test_a_missing_input_and_a_bad_results_csv_are_one_error_line_each(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "nope" in capsys.readouterr().err
    (tmp_path / "results.csv").write_text("layout,rw,direction,bw_bytes,iops\nx,read,read,1,1\n")
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"vmio: error: '{tmp_path / 'results.csv'}' is not a study results.csv: "
        "no column clat_mean_ns, clat_p99_ns\n"
    )
    (tmp_path / "results.csv").write_text(
        "layout,rw,direction,bw_bytes,iops,clat_mean_ns,clat_p99_ns\nx,read,read,1,-1,1,1\n"
    )
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"vmio: error: '{tmp_path / 'results.csv'}' line 2: iops '-1' is not a number in 0..1e+30\n"
    )


def test_repeated_real_runs_give_the_median_and_the_spread(tmp_path, capsys):
    runs = tmp_path / "real"
    runs.mkdir()
    # bandwidth 90, 100, 130 MB/s: median 100, spread 40/100; latency 100, 120, 110 us:
    # median 110, spread 20/110
    for n, (bw, lat) in enumerate([(90, 100), (130, 120), (100, 110)], start=1):
        write_fio_json(runs / f"seq.rep{n}.json", [job("j", "read", direction(bw, bw, lat, lat))])
    sims = tmp_path / "sim"
    sims.mkdir()
    write_fio_json(sims / "seq.json", [job("j", "read", direction(110, 110, 99, 110))])
    c = compare.compare(compare.load(runs), compare.load(sims))
    (row,) = c.rows
    assert row.key == (("file", "seq"), ("job", "j"), ("direction", "read"))
    assert (row.real.bw_bytes, row.real.lat_mean_ns, row.real.runs) == (100 * MB, 110 * US, 3)
    assert row.real.bw_spread == pytest.approx(0.4)
    assert row.real.lat_spread == pytest.approx(20 / 110)
    assert (row.errors["bw"], row.errors["lat"]) == (pytest.approx(0.1), pytest.approx(-0.1))
    assert main(["compare", str(runs), str(sims), "--repeat-spread"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "vmio compare: 1 point; bandwidth error median 10.0 %, p90 10.0 %; "
        "mean latency error median 10.0 %, p90 10.0 %; "
        "real spread median: bandwidth 40.0 %, mean latency 18.2 %"
    )


def test_repeat_spread_without_repeated_runs_is_an_error(fio_pair, capsys):
    assert main(["compare", *map(str, fio_pair), "--repeat-spread"]) == 2
    assert "--repeat-spread: REAL" in capsys.readouterr().err


def images_point(key: str, rw: str, runs: list[tuple[float, float]], sim: tuple[float, float]):
    """A point of scripts/real-images.py's figures: runs and prediction as (MB/s, us)."""

    def fig(bw: float, lat: float) -> dict:
        return {"iops": bw * MB / 4096, "bw_bytes": bw * MB, "lat_mean_ns": lat * US}

    return {"key": key, "job": {"rw": rw}, "runs": [fig(*r) for r in runs], "sim": fig(*sim)}


def test_the_image_checks_figures_give_their_runs_as_real_and_their_prediction_as_sim(
    tmp_path, capsys
):
    figs = tmp_path / "real_images_figures.json"
    doc = {
        "vmio_real_images": {"version": "0"},
        "points": [
            images_point(
                "a/raw/threads/rw/first", "randwrite", [(10, 400), (8, 500), (12, 300)], (11, 440)
            ),
            images_point("a/raw/threads/rr/over", "randread", [(20, 200)], (15, 260)),
        ],
    }
    figs.write_text(json.dumps(doc), encoding="utf-8")
    real, sim = compare.load(figs, "real"), compare.load(figs, "sim")
    first = (("point", "a/raw/threads/rw/first"), ("direction", "write"))
    # runs 10, 8, 12 MB/s: median 10, spread 4/10; latency 400, 500, 300 us: median 400
    assert (real[first].bw_bytes, real[first].lat_mean_ns, real[first].runs) == (
        10 * MB,
        400 * US,
        3,
    )
    assert real[first].bw_spread == pytest.approx(0.4)
    assert (sim[first].bw_bytes, sim[first].runs) == (11 * MB, 1)
    c = compare.compare(real, sim)
    assert [r.errors["bw"] for r in c.rows] == [pytest.approx(0.1), pytest.approx(-0.25)]
    assert all(r.errors["p99"] is None for r in c.rows)  # these figures have no p99
    assert main(["compare", str(figs), str(figs)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("vmio compare: 2 points;")


def test_an_image_checks_point_without_its_figures_is_one_error_line(tmp_path, capsys):
    figs = tmp_path / "f.json"
    bad = {"key": "k", "job": {"rw": "read"}, "runs": [{"iops": 1.0}], "sim": {}}
    figs.write_text(json.dumps({"vmio_real_images": {}, "points": [bad]}), encoding="utf-8")
    assert main(["compare", str(figs), str(figs)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"'{figs}' points[0]" in err and "bw_bytes" in err


def test_a_json_nested_100000_deep_is_one_error_line_not_a_recursion_error(
    tmp_path, capsys, fio_pair
):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["compare", str(deep), str(fio_pair[1])]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vmio: error: '{deep}' is not a fio JSON output: JSON nested deeper than 64 levels\n"
    )
    # Unbalanced and deep: the same line (json's own recursion is caught too).
    deep.write_text('{"jobs": ' + "[" * 100_000 + "}")
    assert main(["compare", str(deep), str(fio_pair[1])]) == 2
    assert "nested deeper than 64 levels" in capsys.readouterr().err


def test_an_integer_of_5000_digits_is_one_error_line_not_a_value_error(tmp_path, capsys, fio_pair):
    # Python converts at most 4300 digits to an int (sys.get_int_max_str_digits).
    big = tmp_path / "big.json"
    big.write_text('{"jobs": [{"read": {"bw_bytes": -' + "9" * 5000 + "}}]}")
    assert main(["compare", str(big), str(fio_pair[1])]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vmio: error: '{big}' is not a fio JSON output: Exceeds the limit")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_nesting_is_measured_outside_strings_and_a_64_deep_document_parses():
    from vmio import boundedjson

    assert not boundedjson.too_deep('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', limit=2)
    assert boundedjson.too_deep("[[[]]]", limit=2)
    assert not boundedjson.too_deep("[[]] [[]] {}", limit=2)
    doc = "[" * 64 + "]" * 64
    assert boundedjson.loads(doc, "x") == json.loads(doc)


@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "link to /dev/null"])
def test_a_device_or_fifo_given_to_compare_is_refused_at_once_without_reading_it(
    tmp_path, capsys, fio_pair, kind
):
    import os

    bad = tmp_path / "bad.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "link to /dev/zero":
        bad.symlink_to("/dev/zero")
    else:
        bad.symlink_to("/dev/null")
    assert main(["compare", str(bad), str(fio_pair[1])]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vmio: error: compare input '{bad}' is not a regular file (a device, FIFO or socket)\n"
    )


def test_a_compare_input_over_16_mib_is_refused_naming_the_limit(tmp_path, capsys, fio_pair):
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate((16 << 20) + 1)
    assert main(["compare", str(big), str(fio_pair[1])]) == 2
    assert capsys.readouterr().err == (
        f"vmio: error: compare input '{big}' is {(16 << 20) + 1} bytes; "
        "the limit is 16777216 (16 MiB)\n"
    )
