"""The S2 (iozone) report of a study: iozone's KB/s per record size, target and test, each
target's share of a baseline's, and `[figure] kind = "iozone"` (study "interfaces",
docs/calibration-s2.md).

`[report] iozone = { axis, over }` replaces the grid tables by S2's layout. From each point's
iozone passes (`vmio.study.quantities.iozone_kb_s`, the simulator's `vmio_iozone`):

    KB/s table   one row per (record size, point), record sizes in the order iozone ran
                 them, points in grid order; one column per iozone test (write, rewrite,
                 read, reread, random read, random write): the pass's KB/s (1 KB = 1024 B)
    % table      one row per (record size, point whose `axis` is not `over`):
                 100 * KB/s / KB/s of the same point with axis = over, per test, and
                 gmean = 100 * iozone:R(point) / iozone:R(baseline) (the geometric mean of
                 the six tests' ratios)

figure.png (`[figure] kind = "iozone"`): one column of panels per record size; top row,
groups of bars per test, one bar per point, KB/s; bottom row, the same bars in % of the
baseline (the baseline's own bars, all 100 %, left out). A reference cell (a `[[calibration]]`
with a `reference` of quantity `iozone:R:TEST` whose `where` names one point) is a black star
on its bar; in the bottom row the star is the reference's share of the baseline's reference
for the same record and test, when the calibration has both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vmio import fioreport as report
from vmio import iozone
from vmio.study.quantities import (
    IOZONE_PREFIX,
    iozone_kb_s,
    iozone_passes,
    parse_iozone,
    quantity_value,
)

if TYPE_CHECKING:
    from vmio.study.evaluation import PointResult, StudyResult

Coords = tuple[tuple[str, str], ...]


def record_label(record: int) -> str:
    """A record size as S2's and iozone's tables write it: KB with a `K` (`4096K`)."""
    return f"{record >> 10}K"


def records_of(points: Sequence[PointResult]) -> list[int]:
    """The record sizes (bytes) of every point's iozone passes, in the order they ran."""
    seen: dict[int, None] = {}
    for pr in points:
        for p in iozone_passes(pr.result):
            seen.setdefault(int(p["reclen_kbytes"]) << 10, None)
    return list(seen)


def baseline(res: StudyResult, pr: PointResult) -> PointResult | None:
    """The point with the same coordinates as `pr` but the report's `axis` = `over`."""
    axis, over = res.experiment.report["iozone"]
    coords = tuple((n, over if n == axis else v) for n, v in pr.point.coords)
    return next((p for p in res.points if p.point.coords == coords), None)


def _row_head(pr: PointResult) -> str:
    return "/".join(v for _, v in pr.point.coords)


def kb_s_table(res: StudyResult) -> str:
    """S2's table: KB/s per record size and point, one column per iozone test."""
    names = "/".join(a.name for a in res.experiment.axes)
    header = ["record", names, *iozone.PHASES]
    body = [
        [
            record_label(rec),
            _row_head(pr),
            *(f"{iozone_kb_s(pr.result, rec, t):.0f}" for t in iozone.PHASES),
        ]
        for rec in records_of(res.points)
        for pr in res.points
    ]
    return "iozone, KB/s (1 KB = 1024 bytes), per record size and test\n" + report.text_table(
        header, body, align="ll" + "r" * len(iozone.PHASES)
    )


def share_table(res: StudyResult) -> str:
    """Every point's KB/s in % of its baseline's, per test and as the geometric mean."""
    axis, over = res.experiment.report["iozone"]
    names = "/".join(a.name for a in res.experiment.axes)
    header = ["record", names, *iozone.PHASES, "gmean"]
    body = []
    for rec in records_of(res.points):
        for pr in res.points:
            base = baseline(res, pr)
            if pr.point.get(axis) == over or base is None:
                continue
            cells = [
                _percent(iozone_kb_s(pr.result, rec, t), iozone_kb_s(base.result, rec, t))
                for t in iozone.PHASES
            ]
            q = f"{IOZONE_PREFIX}{rec >> 10}k"
            cells.append(_percent(quantity_value(pr.result, q), quantity_value(base.result, q)))
            body.append([record_label(rec), _row_head(pr), *cells])
    return (
        f"iozone, % of {axis}={over} (same record size and test; gmean: of the six tests)\n"
        + report.text_table(header, body, align="ll" + "r" * (len(iozone.PHASES) + 1))
    )


def _percent(value: float, base: float) -> str:
    return f"{100 * value / base:.1f} %" if base else "-"


def iozone_text(res: StudyResult) -> str:
    """The two tables of `[report] iozone`."""
    return kb_s_table(res) + "\n\n" + share_table(res)


# --- figure ------------------------------------------------------------------------------


def references(res: StudyResult) -> dict[tuple[int, str, Coords], float]:
    """The reference KB/s of every calibration cell (module doc), keyed by (record, test,
    the coordinates of the one point its `where` selects)."""
    out = {}
    for c in res.experiment.calibrations:
        if c.reference_mb_s is None or not c.quantity.startswith(IOZONE_PREFIX):
            continue
        q = parse_iozone(c.quantity)
        chosen = [pr for pr in res.points if pr.point.matches(c.where)]
        if q.is_ratio or q.test is None or len(chosen) != 1:
            continue
        out[(q.records[0], q.test, chosen[0].point.coords)] = c.reference_mb_s
    return out


def write_figure(res: StudyResult, path: Path) -> None:
    """figure.png (module doc)."""
    from vmio.study import bars  # matplotlib is slow to import

    plt = bars.plt
    exp = res.experiment
    axis, over = exp.report["iozone"]
    recs = records_of(res.points)
    refs = references(res)
    tests = list(iozone.PHASES)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = [cycle[i % len(cycle)] for i in range(len(res.points))]
    pairs = [
        (i, pr, base)
        for i, pr in enumerate(res.points)
        if pr.point.get(axis) != over and (base := baseline(res, pr)) is not None
    ]
    fig, grid = plt.subplots(
        2, len(recs), figsize=(5.4 * len(recs), 7.6), squeeze=False, constrained_layout=True
    )
    for ci, rec in enumerate(recs):
        kb = {pr.point.coords: [iozone_kb_s(pr.result, rec, t) for t in tests] for pr in res.points}
        ref = {
            pr.point.coords: [refs.get((rec, t, pr.point.coords)) for t in tests]
            for pr in res.points
        }
        top, bottom = grid[0][ci], grid[1][ci]
        bars.grouped_bars(
            top, tests, {_label(res, pr): kb[pr.point.coords] for pr in res.points}, "KB/s", colors
        )
        _stars(top, [ref[pr.point.coords] for pr in res.points])
        top.set_title(f"record {record_label(rec)}", fontsize=10)
        bars.grouped_bars(
            bottom,
            tests,
            {
                _label(res, pr): _shares(kb[pr.point.coords], kb[base.point.coords])
                for _, pr, base in pairs
            },
            f"% of {exp.axis(axis).label(over)}",
            [colors[i] for i, _, _ in pairs],
        )
        _stars(bottom, [_shares(ref[pr.point.coords], ref[b.point.coords]) for _, pr, b in pairs])
        bottom.axhline(100, color="black", linewidth=0.8)
    handles, labels = grid[0][0].get_legend_handles_labels()
    star = plt.Line2D([], [], color="black", marker="*", ms=10, ls="none", label="S2 (reference)")
    fig.legend(
        [*handles, star],
        [*labels, star.get_label()],
        loc="outside lower center",
        ncols=len(labels) + 1,
        fontsize=9,
    )
    title = f"vmio study {exp.name}: {exp.title}" if exp.title else f"vmio study {exp.name}"
    fig.suptitle(f"{title}  (seed {res.seed}{', quick' if res.quick else ''})", fontsize=11)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def _shares(values: Sequence[float | None], base: Sequence[float | None]) -> list[float | None]:
    """100 * value / base per group; None where either is missing or the base is 0."""
    return [None if v is None or not b else 100 * v / b for v, b in zip(values, base, strict=True)]


def _label(res: StudyResult, pr: PointResult) -> str:
    return " / ".join(res.experiment.axis(n).label(v) for n, v in pr.point.coords)


def _stars(ax, values: Sequence[Sequence[float | None]]) -> None:
    """A black star at each value (one list per bar series, one value per group) on the
    bar `bars.grouped_bars` draws there; None: no star."""
    n = max(1, len(values))
    width = 0.8 / n
    for i, ys in enumerate(values):
        for j, y in enumerate(ys):
            if y is not None:
                x = j + (i - (n - 1) / 2) * width
                ax.plot([x], [y], marker="*", ms=10, color="black", ls="none", zorder=5)


__all__ = [
    "baseline",
    "iozone_text",
    "kb_s_table",
    "record_label",
    "records_of",
    "references",
    "share_table",
    "write_figure",
]
