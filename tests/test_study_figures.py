"""Every built-in study's figure shows every axis: each axis is a facet, the x axis, or has a
legend entry per value (colour, line style, marker, hatch), shown by its label, and a
"reference" entry only where a reference figure is drawn. Drawn from synthetic results
(no simulation), so the check stays fast."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from vmio.study import experiment, plot, tables
from vmio.study import pdc as pdcreport
from vmio.study.evaluation import PointResult, StudyResult

PLOTTED = ("lines", "bars", "timeline")
"""The figure kinds of vmio.study.plot (pdc and iozone draw their own, fixed figures)."""


def _parts() -> list[tuple[str, experiment.Experiment]]:
    out = []
    for name in experiment.builtin_studies():
        for exp in experiment.load_study(name).parts:
            if exp.figure.get("kind", "lines") in PLOTTED:
                out.append((f"{name}/{exp.path.stem}", exp))
    return out


def _fake_value(point: experiment.Point) -> float:
    """A positive value that differs from point to point (deterministic)."""
    digest = hashlib.sha256(point.slug.encode()).digest()
    return 10.0 + int.from_bytes(digest[:2], "big") / 100.0


def _fake_result(point: experiment.Point) -> dict:
    vms = [
        {"name": f"vm{i}", "weight": w, "bytes_per_s": [w * 1e6 * (1 + t % 3) for t in range(8)]}
        for i, w in enumerate((10, 1), start=1)
    ]
    return {"fake": _fake_value(point), "jobs": [], "vmio": {"vms": vms}}


def _render(exp: experiment.Experiment, monkeypatch, tmp_path: Path) -> Figure:
    for module in (plot, pdcreport):
        monkeypatch.setattr(module, "quantity_value", lambda result, q: result["fake"])
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: figures.append(fig))
    points = [PointResult(p, "", _fake_result(p)) for p in exp.points(quick=True)]
    res = StudyResult(exp, 1, True, points, [], [])
    kind = exp.figure.get("kind", "lines")
    draw = {"lines": plot.study_figure, "bars": plot.study_bars, "timeline": plot.study_timeline}
    draw[kind](res, tmp_path / "figure.png")
    (fig,) = figures
    return fig


def _texts(fig: Figure) -> tuple[list[str], set[str]]:
    """The legend entries, and every other text: titles, tick labels, axis labels."""
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    for ax in fig.axes:
        if ax.get_legend() is not None:
            legend += [t.get_text() for t in ax.get_legend().get_texts()]
    other = set()
    for ax in fig.axes:
        other |= {ax.get_title(), ax.get_xlabel(), ax.get_ylabel()}
        other |= {t.get_text() for t in ax.get_xticklabels()}
    other |= {line for title in list(other) for line in title.split("\n")}
    return legend, other


@pytest.mark.parametrize("name,exp", _parts(), ids=[n for n, _ in _parts()])
def test_every_axis_of_a_built_in_study_s_figure_has_a_channel_and_readable_values(
    name, exp, monkeypatch, tmp_path
):
    fig = _render(exp, monkeypatch, tmp_path)
    legend, other = _texts(fig)
    cfg = exp.figure
    kind = cfg.get("kind", "lines")
    axes = exp.axes_for(True)
    names = [a.name for a in axes]
    if kind == "timeline":  # one panel per point, titled with its values
        titles = " ".join(other)
        for a in axes:
            for v in a.values:
                assert v in titles, (a.name, v)
        return
    # lines: rows and columns default to the first and last-but-one axis (3 axes or more)
    default = (
        {"rows": names[0], "columns": names[-2]} if len(names) >= 3 and kind == "lines" else {}
    )
    facets = {cfg.get(k, default.get(k, "")) for k in ("rows", "columns")} - {""}
    series = cfg.get("series", names[0])
    x = cfg.get("x", names[-1])
    assert len(legend) == len(set(legend)), legend  # no entry twice
    for a in axes:
        if a.name == x:
            assert {a.label(v) for v in a.values} <= other, (a.name, other)
        elif a.name in facets:
            values = set(a.values)
            if cfg.get("gain") and exp.report["gain"][0] == a.name:  # the baseline: in y label
                baseline = exp.report["gain"][1]
                values.discard(baseline)
                assert any(f"over {a.label(baseline)}" in t for t in other), other
            assert {a.text(v) for v in values} <= other, (a.name, other)
        else:  # colour, line style, marker or hatch: an entry per value, by its label
            assert {a.text(v) for v in a.values} <= set(legend), (a.name, legend)
    channel_axes = [a for a in axes if a.name not in facets and a.name != x]
    references = [c for c in exp.calibrations if c.reference_mb_s is not None]
    drawn_reference = kind == "lines" and any(c.quantity == "total" for c in references)
    expected = sum(len(a.values) for a in channel_axes) + (1 if drawn_reference else 0)
    if len({series, *(a.name for a in channel_axes)}) == len(channel_axes):
        assert len(legend) == expected, legend
    assert ("reference" in legend) == drawn_reference


def test_the_volumes_cache_figure_tells_direct_from_cached_by_line_style(monkeypatch, tmp_path):
    exp = experiment.load_experiment("volumes-cache")
    fig = _render(exp, monkeypatch, tmp_path)
    legend, _ = _texts(fig)
    assert legend == [
        "LVM linear",
        "LVM stripe (64k)",
        "RAID 0 (md, 512k)",
        "Direct",
        "Cached",
        "reference",
    ]
    styles = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_label().startswith("LVM linear"):
                styles.setdefault(line.get_linestyle(), 0)
                styles[line.get_linestyle()] += 1
    assert sorted(styles) == ["-", "--"]  # Direct solid, Cached dashed


def test_a_study_without_references_has_no_reference_legend_entry_nor_calibration_section(
    monkeypatch, tmp_path
):
    exp = experiment.load_study("images").part("writes")
    assert exp.calibrations == []
    legend, _ = _texts(_render(exp, monkeypatch, tmp_path))
    assert "reference" not in legend
    points = [PointResult(p, "", _fake_result(p)) for p in exp.points(quick=True)]
    res = StudyResult(exp, 1, True, points, [], [])
    monkeypatch.setattr(tables, "quantity_value", lambda result, q: result["fake"])
    text = tables.summary_text(res)
    assert "Calibration" not in text and "figures PASS" not in text
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_table_rows_and_columns_show_labels_not_raw_values(monkeypatch):
    exp = experiment.load_experiment("volumes-cache")
    points = [PointResult(p, "", _fake_result(p)) for p in exp.points(quick=True)]
    res = StudyResult(exp, 1, True, points, [], [])
    monkeypatch.setattr(tables, "quantity_value", lambda result, q: result["fake"])
    text = tables.grid_tables(res)
    assert "guest / workload / layout" in text
    assert "Direct / sequential read / LVM linear" in text
    assert "Cached / random read/write 50:50 / RAID 0 (md, 512k)" in text
    assert "1/read/linear" not in text
