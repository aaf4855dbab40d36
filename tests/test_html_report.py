"""`vmio report DIR`: the HTML file of a study, validate, compare and advise directory, read
in a real headless browser (Playwright driving Debian's Chromium): the page loads with no
console error, every figure renders, every table cell equals its CSV's, the per-layer
breakdown is drawn, and text from the files can never become markup."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import missing_tool, run_vmio
from vmio.htmlreport import contents, report_html

CHROMIUM = os.environ.get("VMIO_CHROMIUM", "/usr/bin/chromium")

BREAKDOWN = [
    {
        "job": "layout",
        "layers": [
            {
                "layer": name,
                "mean_ns": mean,
                "p50_ns": mean,
                "p99_ns": 2 * mean,
                "p99.9_ns": 3 * mean,
                "share": share,
            }
            for name, mean, share in (
                ("guest queue", 1000, 0.1),
                ("host queue wait", 4000, 0.4),
                ("device service", 5000, 0.5),
            )
        ],
    }
]


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    """A --quick volumes-cache study, two of its point JSONs given a synthetic breakdown and
    the simulator's own breakdown taken out of the others (kept beside the study, in
    `real-breakdown.json`, for the test that draws it)."""
    base = tmp_path_factory.mktemp("report")
    out = base / "study"
    r = run_vmio("study", "volumes-cache", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    for i, p in enumerate(sorted((out / "json").glob("*.json"))):
        doc = json.loads(p.read_text(encoding="utf-8"))
        if i == 2:
            (base / "real-breakdown.json").write_text(json.dumps(doc), encoding="utf-8")
        if i < 2:
            doc["vmio"]["breakdown"] = BREAKDOWN
        else:
            del doc["vmio"]["breakdown"]
        p.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def browser():
    """Chromium under Playwright; missing, the test fails in CI and is skipped elsewhere."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_tool("the Python package playwright is not installed (pip install '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing_tool(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, html_path: Path):
    """The page at `html_path`, loaded, with the console messages and errors it raised."""
    page = browser.new_page()
    problems: list[str] = []
    page.on(
        "console",
        lambda m: (
            problems.append(f"{m.type}: {m.text}")
            if m.type
            in (
                "error",
                "warning",
            )
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on(
        "request",
        lambda r: (
            problems.append(f"request: {r.url}")
            if not r.url.startswith(("file:", "data:"))
            else None
        ),
    )
    page.goto(html_path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def write_report(d: Path, out: Path) -> Path:
    r = run_vmio("report", d, "-o", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"vmio report: wrote {out}")
    return out


DOM_TABLES = """() => Array.from(document.querySelectorAll('table.data')).map(t => ({
    source: t.dataset.source,
    columns: Array.from(t.tHead.rows[0].cells).map(c => c.textContent),
    rows: Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent)),
}))"""

DOM_FIGURES = """() => Array.from(document.querySelectorAll('img.figure, svg.breakdown')).map(e => {
    const r = e.getBoundingClientRect();
    return {tag: e.tagName, width: r.width, height: r.height,
            natural: e.tagName === 'IMG' ? e.naturalWidth : r.width,
            complete: e.tagName === 'IMG' ? e.complete : true};
})"""


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


def check_page(browser, d: Path, html: Path, figures: int) -> list[dict]:
    """Loads with no console error or request, `figures` figures all drawn, every CSV table
    cell as in its file; returns the DOM's tables."""
    page, problems = open_page(browser, html)
    try:
        figs = page.evaluate(DOM_FIGURES)
        tables = page.evaluate(DOM_TABLES)
    finally:
        page.close()
    assert problems == []
    assert len(figs) == figures
    for f in figs:
        assert f["complete"] and f["width"] > 0 and f["height"] > 0 and f["natural"] > 0, f
    for t in tables:
        if t["source"].endswith(".csv"):
            header, *rows = csv_rows(d / t["source"])
            assert t["columns"] == header, t["source"]
            assert t["rows"] == rows, t["source"]
    return tables


def test_a_study_report_loads_cleanly_with_every_figure_drawn_and_every_csv_cell_as_written(
    browser, study_dir, tmp_path
):
    html = write_report(study_dir, tmp_path / "study.html")
    tables = check_page(browser, study_dir, html, figures=1 + 2)  # figure.png, 2 breakdowns
    shown = {t["source"] for t in tables}
    assert {"results.csv", "points.csv", "calibration.csv"} <= shown
    text = html.read_text(encoding="utf-8")
    assert "vmio study volumes-cache --quick --out" in text
    assert "[[vm.disk]]" in text and "[experiment]" in text  # stack and experiment files
    assert "[global]" in text  # job.fio


def test_a_point_s_breakdown_is_a_table_of_its_json_values_and_a_bar_per_job(
    browser, study_dir, tmp_path
):
    html = write_report(study_dir, tmp_path / "bd.html")
    page, problems = open_page(browser, html)
    try:
        got = page.evaluate(
            """() => Array.from(document.querySelectorAll('table.breakdown')).map(t => ({
                rows: Array.from(t.tBodies[0].rows).map(
                    r => Array.from(r.cells).map(c => c.textContent)),
                rects: t.closest('details').querySelectorAll('svg.breakdown rect').length,
                widths: Array.from(t.closest('details').querySelectorAll('svg.breakdown rect'))
                    .map(r => Number(r.getAttribute('width'))),
            }))"""
        )
    finally:
        page.close()
    assert problems == []
    assert len(got) == 2
    layers = BREAKDOWN[0]["layers"]
    want = [
        ["layout", x["layer"], *(json.dumps(x[k]) for k in ("mean_ns", "p50_ns", "p99_ns"))]
        + [json.dumps(x["p99.9_ns"]), json.dumps(x["share"])]
        for x in layers
    ]
    for g in got:
        assert g["rows"] == want
        assert g["rects"] == 2 * len(layers)  # the bar's segments, then the legend's swatches
        bar = g["widths"][: len(layers)]
        total = sum(bar)
        for w, x in zip(bar, layers, strict=True):  # widths in proportion to the means
            assert w / total == pytest.approx(x["mean_ns"] / 10000, abs=1e-3)


def test_the_simulators_own_breakdown_of_a_point_is_drawn_with_its_values(
    browser, study_dir, tmp_path
):
    d = tmp_path / "study"
    shutil.copytree(study_dir, d)
    doc = json.loads((study_dir.parent / "real-breakdown.json").read_text(encoding="utf-8"))
    bds = doc["vmio"]["breakdown"]
    assert bds and all(sum(x["mean_ns"] for x in b["layers"]) > 0 for b in bds)
    third = sorted((d / "json").glob("*.json"))[2]
    third.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    html = write_report(d, tmp_path / "real-bd.html")
    check_page(browser, d, html, figures=1 + 3)  # figure.png, 2 synthetic, the real one
    page, problems = open_page(browser, html)
    try:
        rows = page.evaluate(
            """() => Array.from(document.querySelectorAll('table.breakdown')).map(
                t => Array.from(t.tBodies[0].rows).map(
                    r => [r.cells[0].textContent, r.cells[1].textContent]))"""
        )
    finally:
        page.close()
    assert problems == []
    assert [[b["job"], x["layer"]] for b in bds for x in b["layers"]] in rows


def test_a_click_on_a_column_header_sorts_its_rows_by_number_up_then_down(
    browser, study_dir, tmp_path
):
    html = write_report(study_dir, tmp_path / "sort.html")
    page, problems = open_page(browser, html)
    column = """() => {
        const t = document.querySelector('table[data-source="results.csv"]');
        const i = Array.from(t.tHead.rows[0].cells).findIndex(c => c.textContent === 'iops');
        return Array.from(t.tBodies[0].rows).map(r => r.cells[i].textContent);
    }"""
    try:
        before = page.evaluate(column)
        header = page.locator('table[data-source="results.csv"] th', has_text="iops").first
        header.click()
        up = page.evaluate(column)
        header.click()
        down = page.evaluate(column)
    finally:
        page.close()
    assert problems == []
    assert sorted(up) == sorted(before) and up != before
    assert [float(v) for v in up] == sorted(float(v) for v in before)
    assert [float(v) for v in down] == sorted((float(v) for v in before), reverse=True)


def _validate_dir(study_dir: Path, d: Path) -> Path:
    """A validate-shaped directory: real/NAME.rep1.json, sim/NAME.json (two study points),
    compare.csv/.png from vmio compare, calibration/stack.toml."""
    (d / "real").mkdir(parents=True)
    (d / "sim").mkdir()
    (d / "calibration").mkdir()
    for p in sorted((study_dir / "json").glob("*.json"))[:3]:
        shutil.copy(p, d / "real" / f"{p.stem}.rep1.json")
        shutil.copy(p, d / "sim" / p.name)
    stack = Path(contents.__file__).parents[1] / "studies" / "volumes-cache" / "stack.toml"
    shutil.copy(stack, d / "calibration" / "stack.toml")
    r = run_vmio(
        "compare", d / "real", d / "sim", "--csv", d / "compare.csv", "--plot", d / "compare.png"
    )
    assert r.returncode == 0, r.stderr
    (d / "compare.txt").write_text(r.stdout, encoding="utf-8")
    return d


def test_a_validate_report_shows_the_comparison_its_figure_and_the_jobs_that_ran(
    browser, study_dir, tmp_path
):
    d = _validate_dir(study_dir, tmp_path / "val")
    html = write_report(d, tmp_path / "val.html")
    tables = check_page(browser, d, html, figures=1 + 2)  # compare.png, 2 breakdowns
    assert [t["source"] for t in tables] == ["compare.csv"]
    text = html.read_text(encoding="utf-8")
    assert "vmio validate" in text and "--points 3 --repeat 1" in text
    assert text.count("fio job (from its options)") == 3
    assert "vmio compare: " in text  # compare.txt


def test_a_compare_report_and_an_advise_report_show_their_tables_and_figures(
    browser, study_dir, tmp_path
):
    val = _validate_dir(study_dir, tmp_path / "val")
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    for name in ("compare.csv", "compare.png"):
        shutil.copy(val / name, cmp_dir / name)
    check_page(browser, cmp_dir, write_report(cmp_dir, tmp_path / "cmp.html"), figures=1)

    adv = tmp_path / "adv"
    adv.mkdir()
    configurations = [  # vmio advise's advise.json: nested objects, lists, nulls
        {"index": 3, "rank": 1, "values": {"cache": "writeback"}, "figures": {"iops": 1234.5}},
        {"index": 1, "rank": None, "values": {"cache": "none"}, "figures": None, "invalid": "x"},
    ]
    doc = {
        "vmio_advise": "1",
        "goal": {"name": "iops", "higher_is_better": True},
        "space": {"size": 2, "knobs": [{"name": "cache", "values": ["none", "writeback"]}]},
        "ranking": [3],
        "configurations": configurations,
    }
    (adv / "advise.json").write_text(json.dumps(doc), encoding="utf-8")
    (adv / "results.csv").write_text(
        "rank,index,cache,iops,invalid\n1,3,writeback,1234.5,\n,1,none,,x\n", encoding="utf-8"
    )
    (adv / "command.txt").write_text("vmio advise --stack s.toml --workload j.fio\n")
    shutil.copy(val / "calibration" / "stack.toml", adv / "stack.toml")
    (adv / "job.fio").write_text("[j]\nrw=randread\n", encoding="utf-8")
    shutil.copy(val / "compare.png", adv / "ranking.png")
    (adv / "space.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40">'
        '<rect width="60" height="40" fill="#4e79a7"/></svg>',
        encoding="utf-8",
    )
    html = write_report(adv, tmp_path / "adv.html")
    tables = check_page(browser, adv, html, figures=2)
    assert [t["source"] for t in tables] == [
        "results.csv",
        "advise.json#space.knobs",
        "advise.json#configurations",
    ]
    ranked = tables[2]
    assert ranked["columns"] == [
        "index",
        "rank",
        "values.cache",
        "figures.iops",
        "figures",
        "invalid",
    ]
    assert ranked["rows"] == [
        ["3", "1", "writeback", "1234.5", "", ""],
        ["1", "", "none", "", "", "x"],
    ]
    text = html.read_text(encoding="utf-8")
    assert "<code>vmio advise --stack s.toml --workload j.fio</code>" in text
    assert "as command.txt records it" in text
    assert "goal.higher_is_better" in text


PAYLOAD = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def _hostile_dir(d: Path) -> Path:
    """A study-shaped directory whose every file, name and cell tries to inject markup."""
    d.mkdir()
    rows = [["study", "point", "seed", PAYLOAD], ["s", PAYLOAD, "1", '"><b>x</b>']]
    for name in ("results.csv", "points.csv", f"{PAYLOAD[:20]}.csv"):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        (d / name.replace("/", "_")).write_text(buf.getvalue(), encoding="utf-8")
    (d / "stack.toml").write_text(f"# </pre>{PAYLOAD}\n", encoding="utf-8")
    (d / "tables.txt").write_text(f"</pre></body>{PAYLOAD}", encoding="utf-8")
    (d / "fake.png").write_text(f"<html>{PAYLOAD}</html>", encoding="utf-8")
    (d / "json").mkdir()
    bd = [{"job": PAYLOAD, "layers": [{"layer": PAYLOAD, "mean_ns": 5, "share": 1}]}]
    doc = {"fio version": PAYLOAD, "vmio": {"seed": PAYLOAD, "breakdown": bd}}
    (d / "json" / "p.json").write_text(json.dumps(doc), encoding="utf-8")
    return d


def test_text_from_the_files_is_shown_as_text_and_never_runs(browser, tmp_path):
    d = _hostile_dir(tmp_path / "evil")
    html = write_report(d, tmp_path / "evil.html")
    text = html.read_text(encoding="utf-8")
    assert "<script>window" not in text and "<img src=x" not in text
    page, problems = open_page(browser, html)
    try:
        assert page.evaluate("() => window.pwned") is None
        assert page.evaluate("() => document.scripts.length") == 1  # the page's own
        assert page.evaluate("() => document.querySelectorAll('img').length") == 0
        assert page.evaluate("() => document.querySelectorAll('b').length") == 0
        body = page.evaluate("() => document.body.textContent")
    finally:
        page.close()
    assert problems == []
    assert body.count(PAYLOAD) >= 8  # cells, file text, breakdown, environment
    assert "fake.png: not shown: neither a PNG nor an SVG image" in body


def test_a_directory_of_no_known_kind_is_refused_with_one_line_naming_what_was_looked_for(
    tmp_path,
):
    r = run_vmio("report", tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1
    for marker in ("advise.json", "compare.csv with real/ and sim/", "results.csv with points.csv"):
        assert marker in r.stderr
    assert not (tmp_path / "report.html").exists()


def test_an_existing_report_is_replaced_only_with_force(tmp_path):
    d = _hostile_dir(tmp_path / "d")
    out = d / "report.html"
    out.write_text("mine", encoding="utf-8")
    r = run_vmio("report", d)
    assert r.returncode == 2 and "pass --force" in r.stderr
    assert out.read_text(encoding="utf-8") == "mine"
    assert run_vmio("report", d, "--force").returncode == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_inputs_beyond_the_bounds_become_notes_and_links_are_not_followed(tmp_path, monkeypatch):
    d = _hostile_dir(tmp_path / "d")
    buf = "a,b\n" + "".join(f"{i},{i * i}\n" for i in range(30))
    (d / "big.csv").write_text(buf, encoding="utf-8")
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-embed", encoding="utf-8")
    (d / "leak.txt").symlink_to(secret)
    monkeypatch.setattr(contents, "MAX_ROWS", 10)
    rep = contents.collect(d)
    big = next(t for t in rep.tables if t.source == "big.csv")
    assert len(big.rows) == 10 and big.total_rows == 30
    assert big.note == "10 of 30 rows shown (the report's bound)"
    text = report_html(d)
    assert "do-not-embed" not in text
    assert "leak.txt: a symbolic link, not followed" in text
