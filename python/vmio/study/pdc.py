"""The S3 (PDC) report of a study: the gain table, PDC's detection accuracy over time, and the
three figures of `[figure] kind = "pdc"` (study "pdc", docs/calibration-s3.md).

Gain (`[report] gain = { axis, over }`), in % of the first `[report]` quantity:

    gain(point) = 100 * (value(point) / value(same point with axis = over) - 1)
    gmean row   = 100 * (gmean over the rows of value / baseline - 1)

Detection, from the simulator's `vmio.pdc` (one entry per disk with `cache = "pdc"`: its
`events` {at_ns, kind: detected | grown | dropped, lo, hi} and the true `journal` [lo, hi),
disk bytes, half-open like the detector's ranges, crates/vmio-core/src/cache/pdc.rs):

    ranges(t)    = the predicted journals after every event at or before t:
                   detected adds [lo, hi); grown replaces the range it overlaps by [lo, hi);
                   dropped removes the range it overlaps
    precision(t) = |U(t) ∩ journal| / |U(t)|, U(t) the union of ranges(t) (undefined while
                   nothing is predicted)
    recall(t)    = |U(t) ∩ journal| / |journal|
    first pass   = |journal| / (journal write bytes of the guest disk / virtual run time):
                   when the journal has been written through once at the disk's mean journal
                   rate (an estimate: the simulator reports no per-write times); PDC misses
                   the first pass by design (S3), so first detection / first pass >= ~1

Figures: figure.png (S3 Fig. 4: the gain per workload, one bar per non-baseline mode),
with the reference band of each workload's calibration entry in grey,
figure-detection.png (Fig. 3: precision and recall as step functions of virtual time, one
panel per point with PDC disks, the estimated end of the first pass dashed when it falls
within the run) and
figure-journal.png (Fig. 2: under the baseline mode, the journal's share of all I/O, of the
flushes and of the fsyncs; host cache hit ratio, write-out and flushes per mode).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vmio import fioreport as report
from vmio.study.quantities import quantity_title, quantity_value

if TYPE_CHECKING:
    from vmio.study.evaluation import PointResult, StudyResult

FIGURE_FILES = ("figure-detection.png", "figure-journal.png")
"""The figures `kind = "pdc"` writes besides figure.png."""

Range = tuple[int, int]


def _overlaps(a: Range, b: Range) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def apply_event(ranges: list[Range], kind: str, lo: int, hi: int) -> list[Range]:
    """The predicted ranges after one detector event (module doc)."""
    new = (lo, hi)
    if kind == "detected":
        return sorted([*ranges, new])
    kept = [r for r in ranges if not _overlaps(r, new)]
    return sorted([*kept, new]) if kind == "grown" else kept


def union(ranges: Sequence[Range]) -> list[Range]:
    """The ranges merged where they overlap or touch (predictions of several journals of
    one disk may overlap while one of them is being dropped)."""
    out: list[Range] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _overlap_bytes(ranges: Sequence[Range], journal: Range) -> int:
    return sum(max(0, min(hi, journal[1]) - max(lo, journal[0])) for lo, hi in ranges)


@dataclass(frozen=True)
class Step:
    """Detection accuracy from `at_s` (virtual seconds) on; precision None: nothing predicted."""

    at_s: float
    precision: float | None
    recall: float


def accuracy_steps(entry: Mapping[str, Any]) -> list[Step]:
    """Precision and recall of one PDC disk's prediction after each of its events, from t = 0
    (nothing predicted). Empty without a true journal (no filesystem on the disk)."""
    journal = entry.get("journal")
    if not journal:
        return []
    jr = (int(journal[0]), int(journal[1]))
    steps = [Step(0.0, None, 0.0)]
    ranges: list[Range] = []
    for ev in entry.get("events", []):
        ranges = apply_event(ranges, ev["kind"], int(ev["lo"]), int(ev["hi"]))
        merged = union(ranges)
        size = sum(hi - lo for lo, hi in merged)
        inside = _overlap_bytes(merged, jr)
        steps.append(
            Step(
                ev["at_ns"] / 1e9,
                inside / size if size else None,
                inside / (jr[1] - jr[0]),
            )
        )
    return steps


def _guest_disk(result: Mapping[str, Any], vm: str, disk: str) -> Mapping[str, Any] | None:
    for g in result.get("vmio", {}).get("guests") or []:
        if g.get("vm") == vm:
            for d in g.get("disks", []):
                if d.get("disk") == disk:
                    return d
    return None


def first_pass_s(result: Mapping[str, Any], entry: Mapping[str, Any]) -> float | None:
    """The estimated end of the first journal pass, virtual seconds (module doc)."""
    journal = entry.get("journal")
    guest = _guest_disk(result, entry.get("vm", ""), entry.get("disk", ""))
    run_s = result.get("vmio", {}).get("virtual_time_ns", 0) / 1e9
    if not journal or guest is None or not guest.get("journal_write_bytes") or not run_s:
        return None
    return (journal[1] - journal[0]) / (guest["journal_write_bytes"] / run_s)


def pdc_entries(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(result.get("vmio", {}).get("pdc") or [])


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "-" if x is None or x != x else f"{x:{spec}}{unit}"


def detection_table(points: Sequence[PointResult]) -> str | None:
    """One row per PDC disk of every point: journal, first detection, passes, final accuracy,
    bypassed bytes. None when no point has a PDC disk."""
    header = [
        "point",
        "vm/disk",
        "journal MiB",
        "1st pass s",
        "detected at s",
        "in passes",
        "detections",
        "drops",
        "precision",
        "recall",
        "bypassed MB",
    ]
    body = []
    for pr in points:
        for e in pdc_entries(pr.result):
            steps = accuracy_steps(e)
            first = next((s.at_s for s in steps[1:] if s.recall > 0), None)
            fp = first_pass_s(pr.result, e)
            journal = e.get("journal")
            last = steps[-1] if steps else None
            body.append(
                [
                    pr.point.label,
                    f"{e.get('vm')}/{e.get('disk')}",
                    _fmt(None if not journal else (journal[1] - journal[0]) / 2**20, ".0f"),
                    _fmt(fp, ".2f"),
                    _fmt(first, ".2f") if first is not None else "never",
                    _fmt(None if first is None or not fp else first / fp, ".2f"),
                    str(e.get("detections", 0)),
                    str(e.get("drops", 0)),
                    _fmt(None if last is None else last.precision, ".3f"),
                    _fmt(None if last is None else last.recall, ".3f"),
                    _fmt(e.get("bypassed_bytes", 0) / 1e6, ",.1f"),
                ]
            )
    if not body:
        return None
    return (
        "PDC detection: predicted journal vs the true one at the end of the run; first pass "
        "estimated at the disk's mean journal write rate\n"
        + report.text_table(header, body, align="llrrrrrrrrr")
    )


def _baseline(res: StudyResult, pr: PointResult) -> PointResult | None:
    axis, over = res.experiment.report["gain"]
    coords = tuple((n, over if n == axis else v) for n, v in pr.point.coords)
    return next((p for p in res.points if p.point.coords == coords), None)


def gains(res: StudyResult, quantity: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Gain (%) of every point whose gain axis is not the baseline, keyed by its coords."""
    axis, over = res.experiment.report["gain"]
    out = {}
    for pr in res.points:
        if pr.point.get(axis) == over:
            continue
        base = _baseline(res, pr)
        if base is None:
            continue
        b = quantity_value(base.result, quantity)
        out[pr.point.coords] = 100.0 * (quantity_value(pr.result, quantity) / b - 1) if b else 0.0
    return out


def gain_table(res: StudyResult) -> str:
    """The gain of each non-baseline value of the gain axis over the baseline, per point of
    the other axes, and their gmean."""
    exp = res.experiment
    axis, over = exp.report["gain"]
    quantity = exp.report["quantity"][0]
    g = gains(res, quantity)
    values = [v for v in exp.axis(axis).values if v != over]
    rows: dict[str, dict[str, float]] = {}
    for coords, pct in g.items():
        d = dict(coords)
        key = "/".join(v for n, v in coords if n != axis)
        rows.setdefault(key, {})[d[axis]] = pct
    header = ["/".join(n for n, _ in next(iter(g), ()) if n != axis) or "point", *values]
    body = [[k, *(_fmt(r.get(v), "+.1f", " %") for v in values)] for k, r in rows.items()]
    gm = []
    for v in values:
        ratios = [1 + r[v] / 100 for r in rows.values() if v in r]
        ok = ratios and min(ratios) > 0
        gm.append(
            _fmt(100 * (math.exp(sum(map(math.log, ratios)) / len(ratios)) - 1), "+.1f", " %")
            if ok
            else "-"
        )
    body.append(["gmean", *gm])
    return f"Gain over {axis}={over}, {quantity_title(quantity)}\n" + report.text_table(
        header, body, align="l" + "r" * len(values)
    )


def pdc_text(res: StudyResult) -> str:
    """The gain table, and the detection table when some point has PDC disks."""
    parts = [gain_table(res)]
    if (det := detection_table(res.points)) is not None:
        parts.append(det)
    return "\n\n".join(parts)


# --- figures ---------------------------------------------------------------------------


def _value_of(res: StudyResult, coords: dict[str, str], quantity: str) -> float:
    names = [a.name for a in res.experiment.axes]
    key = tuple((n, coords[n]) for n in names)
    pr = next((p for p in res.points if p.point.coords == key), None)
    return float("nan") if pr is None else quantity_value(pr.result, quantity)


def draw_gain_bounds(ax, exp, x_name: str, x_values: Sequence[str], quantity: str) -> None:
    """The reference band of every `ratio_to` calibration of `quantity` that names one value
    of the x axis: a grey bar from at_least to at_most, as gains in %."""
    drawn = False
    for c in exp.calibrations:
        xs = c.where.get(x_name, ())
        if c.ratio_to is None or c.quantity != quantity or len(xs) != 1 or xs[0] not in x_values:
            continue
        lo = 100 * (c.at_least - 1) if c.at_least is not None else None
        hi = 100 * (c.at_most - 1) if c.at_most is not None else None
        if lo is None or hi is None:
            continue
        i = list(x_values).index(xs[0])
        ax.vlines(
            i,
            lo,
            hi,
            colors="grey",
            linewidth=6,
            alpha=0.35,
            label=None if drawn else "reference band",
        )
        drawn = True


def write_figures(res: StudyResult, figure: Path, out_dir: Path) -> None:
    """figure.png (to `figure`, Fig. 4) and FIGURE_FILES into `out_dir` (Fig. 3, Fig. 2)."""
    from vmio import results  # matplotlib is slow to import
    from vmio.study import bars

    plt = bars.plt
    exp = res.experiment
    axis, over = exp.report["gain"]
    x_axis = exp.axes_for(res.quick)[[a.name for a in exp.axes].index(exp.figure["x"])]
    quantity = exp.report["quantity"][0]
    g = gains(res, quantity)
    others = [v for v in exp.axis(axis).values if v != over]
    groups = [x_axis.label(v) for v in x_axis.values]
    fixed = {a.name: a.values[0] for a in exp.axes_for(res.quick)}

    # Fig. 4: gains.
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 2), 4.0), constrained_layout=True)
    series = {}
    for v in others:
        ys = []
        for xv in x_axis.values:
            coords = tuple((n, {x_axis.name: xv, axis: v}.get(n, fixed[n])) for n in fixed)
            ys.append(g.get(coords, float("nan")))
        series[exp.axis(axis).label(v)] = ys
    bars.grouped_bars(ax, groups, series, f"gain over {exp.axis(axis).label(over)}, %")
    ax.axhline(0, color="black", linewidth=0.8)
    draw_gain_bounds(ax, exp, x_axis.name, x_axis.values, quantity)
    ax.set_title(f"{exp.title}\n{quantity_title(quantity, short=True)}", fontsize=9)
    ax.legend(fontsize=8)
    fig.savefig(figure, dpi=110)
    plt.close(fig)

    # Fig. 3: detection accuracy over virtual time.
    panels = [(pr, e) for pr in res.points for e in pdc_entries(pr.result)]
    ncols = min(4, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / ncols))
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(3.6 * ncols, 2.8 * nrows), squeeze=False, constrained_layout=True
    )
    for i, (pr, e) in enumerate(panels):
        ax = grid[i // ncols][i % ncols]
        steps = accuracy_steps(e)
        end = pr.result.get("vmio", {}).get("virtual_time_ns", 0) / 1e9
        ts = [s.at_s for s in steps] + [end]
        ax.step(
            ts,
            [s.recall for s in steps] + [steps[-1].recall if steps else 0],
            where="post",
            label="recall",
        )
        prec = [float("nan") if s.precision is None else s.precision for s in steps]
        ax.step(ts, prec + [prec[-1] if prec else float("nan")], where="post", label="precision")
        if (fp := first_pass_s(pr.result, e)) is not None and fp <= end:
            ax.axvline(fp, color="grey", linestyle="--", linewidth=0.8, label="1st pass (est.)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("virtual time, s", fontsize=8)
        ax.set_title(f"{pr.point.label} {e.get('vm')}/{e.get('disk')}", fontsize=8)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7)
    for j in range(len(panels), nrows * ncols):
        grid[j // ncols][j % ncols].axis("off")
    if not panels:
        grid[0][0].text(0.5, 0.5, "no point with cache=pdc disks", ha="center", va="center")
    fig.suptitle("PDC detection: predicted journal vs the true journal", fontsize=9)
    _save(fig, out_dir / FIGURE_FILES[0], results)

    # Fig. 2: journal traffic under the baseline; host cache per mode.
    base_q = ("journal_io_pct", "journal_flush_pct", "fsync_commit_pct")
    host_q = ("host_hit_pct", "host_writeout_mb", "host_flushes")
    fig, grid = plt.subplots(
        1, 1 + len(host_q), figsize=(4.4 * (1 + len(host_q)), 4.0), constrained_layout=True
    )
    series = {
        quantity_title(q, short=True): [
            _value_of(res, {**fixed, x_axis.name: xv, axis: over}, q) for xv in x_axis.values
        ]
        for q in base_q
    }
    bars.grouped_bars(grid[0], groups, series, "%")
    grid[0].set_title(f"journal traffic, {exp.axis(axis).label(over)}", fontsize=9)
    grid[0].legend(fontsize=7)
    for k, q in enumerate(host_q):
        ax = grid[1 + k]
        series = {
            exp.axis(axis).label(v): [
                _value_of(res, {**fixed, x_axis.name: xv, axis: v}, q) for xv in x_axis.values
            ]
            for v in exp.axis(axis).values
        }
        bars.grouped_bars(ax, groups, series, quantity_title(q, short=True))
        ax.set_title(quantity_title(q, short=True), fontsize=9)
        ax.legend(fontsize=7)
    _save(fig, out_dir / FIGURE_FILES[1], results)


def _save(fig, path: Path, results) -> None:
    from vmio.study import bars

    tmp = results.temp_path(path)
    try:
        fig.savefig(tmp, dpi=110)
        bars.plt.close(fig)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


__all__ = [
    "FIGURE_FILES",
    "Step",
    "accuracy_steps",
    "apply_event",
    "union",
    "detection_table",
    "draw_gain_bounds",
    "first_pass_s",
    "gain_table",
    "gains",
    "pdc_text",
    "write_figures",
]
