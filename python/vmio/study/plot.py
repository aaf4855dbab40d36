"""Figures of a study (matplotlib, Agg backend: no display needed).

`study_figure` draws the S0-style grid: one row of panels per value of the experiment's
`[figure].rows` axis (cache mode), one panel per value of `[figure].columns` (workload), one
line per value of `series` (layout), bandwidth in MB/s against block size on a log2 axis.
Each calibration figure with a MB/s reference is drawn in the panel it belongs to: a star at
its block size when it names one, otherwise a translucent band over the block sizes it covers;
the legend has a "reference" entry only when some reference was drawn.

Every axis has a visual channel of its own: rows and columns of panels, the x axis, colour
(`series`); an axis beyond those gets the line style, a second one the marker, a third the
line width (`CHANNELS`). The legend has one entry per value of each of these axes (colour
for the series; the line style, marker or width in grey for the others), and each value is
shown by its label (`Direct`, `Cached`), or as `name=value` (`iodepth=4`) for an axis
without labels; panel titles name their values the same way. `study_bars` draws the
series by colour and a further axis by hatching (the mean over any axis beyond, named in the
title).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

from vmio.sim import VmioError, parse_size  # noqa: E402
from vmio.study import pdc as pdcreport  # noqa: E402
from vmio.study.experiment import Axis  # noqa: E402
from vmio.study.quantities import (  # noqa: E402
    REDUCERS,
    quantity_title,
    quantity_unit,
    quantity_value,
)

if TYPE_CHECKING:
    from vmio.study.evaluation import StudyResult


def _x_of(value: str) -> float:
    try:
        return float(parse_size(value))
    except Exception:  # noqa: BLE001 - a non-size axis is plotted by position
        return float("nan")


CHANNELS = ("linestyle", "marker", "linewidth")
"""The channels of the axes beyond rows, columns, series and x, in order."""

_LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
_HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++")


_REF_BAND = {"ls": "-", "lw": 5.0, "alpha": 0.3, "solid_capstyle": "butt"}
"""A reference over several x values: a wide translucent band (no line style a channel uses)."""


def value_text(axis: Axis, value: str) -> str:
    """A value as figures show it (`Axis.text`)."""
    return axis.text(value)


def _channel_style(channel: str, i: int) -> dict:
    if channel == "linestyle":
        return {"ls": _LINESTYLES[i % len(_LINESTYLES)]}
    if channel == "marker":
        return {"marker": _MARKERS[i % len(_MARKERS)]}
    return {"lw": 1.0 + 1.2 * i}


def study_figure(res: StudyResult, path: Path) -> None:
    """Write the study's figure to `path` (PNG)."""
    exp = res.experiment
    axes = {a.name: a for a in exp.axes_for(res.quick)}
    names = [a.name for a in exp.axes]
    cfg = exp.figure
    quantity = cfg.get("quantity", "total")
    # rows/columns default to the first and the last-but-one axis when there are three or
    # more axes; with fewer (or when set to ""), one row / one column of panels.
    one = Axis("", "", ("",))

    def panel_axis(key: str, default: str) -> Axis:
        name = cfg.get(key, default if len(names) >= 3 else "")
        if name and (not isinstance(name, str) or name not in axes):
            raise VmioError(f"[figure] {key}: must be the name of an axis ({', '.join(axes)})")
        return axes[name] if name else one

    row_axis = panel_axis("rows", names[0])
    col_axis = panel_axis("columns", names[-2])
    series = cfg.get("series", names[0])
    if not isinstance(series, str) or series not in axes:
        raise VmioError(f"[figure] series: must be the name of an axis ({', '.join(axes)})")
    series_axis = axes[series]
    x_axis = axes[cfg.get("x", names[-1])]
    others = [a for a in axes.values() if a not in (row_axis, col_axis, series_axis, x_axis)]

    xs = [_x_of(v) for v in x_axis.values]
    positional = any(x != x for x in xs)  # NaN: not sizes
    if positional:
        xs = [float(i) for i in range(len(x_axis.values))]
    by_coords = {pr.point.coords: pr for pr in res.points}

    def value(coords: dict[str, str]) -> float | None:
        pr = by_coords.get(tuple((n, coords[n]) for n in names))
        return None if pr is None else quantity_value(pr.result, quantity)

    nrows, ncols = len(row_axis.values), len(col_axis.values)
    fig, grid = plt.subplots(
        nrows,
        ncols,
        figsize=(max(5.0 * ncols, 9.0), 3.8 * nrows + (1.0 if nrows == 1 else 0.0)),
        squeeze=False,
        constrained_layout=True,
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    channels = list(zip(others, CHANNELS, strict=False))
    unstyled = others[len(CHANNELS) :]  # beyond the channels: named in each line's label
    drew_reference = False
    for (ri, rv), (ci, cv) in itertools.product(
        enumerate(row_axis.values), enumerate(col_axis.values)
    ):
        ax = grid[ri][ci]
        seen: list[float] = []
        for si, sv in enumerate(series_axis.values):
            if sv != {row_axis.name: rv, col_axis.name: cv}.get(series_axis.name, sv):
                continue  # the series is also the panel's row or column: only its own value
            for combo in itertools.product(*(a.values for a in others)):
                coords = {row_axis.name: rv, col_axis.name: cv, series_axis.name: sv}
                coords.update(zip([a.name for a in others], combo, strict=True))
                ys = [value({**coords, x_axis.name: xv}) for xv in x_axis.values]
                pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
                if not pts:
                    continue
                seen += [y for _, y in pts]
                # distinct markers and shrinking sizes keep equal series visible
                style = {
                    "marker": _MARKERS[si % len(_MARKERS)],
                    "ms": max(7.0 - 1.5 * si, 3.0),
                    "lw": max(2.2 - 0.5 * si, 1.0),
                }
                for axis, channel in channels:
                    style.update(_channel_style(channel, axis.values.index(coords[axis.name])))
                extra = [value_text(a, coords[a.name]) for a in unstyled]
                ax.plot(
                    *zip(*pts, strict=True),
                    color=colors[si % len(colors)],
                    label=" ".join([value_text(series_axis, sv), *extra]),
                    zorder=3 + si,
                    **style,
                )
        if quantity == "total":
            drawn = _draw_references(
                ax, res, row_axis.name, rv, col_axis.name, cv, series_axis, x_axis, xs, colors
            )
            seen += drawn
            drew_reference = drew_reference or bool(drawn)
        if not positional:
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(xs, [x_axis.label(v) for v in x_axis.values], fontsize=8)
        positive = [y for y in seen if y > 0]
        if positive and max(positive) / min(positive) > 30:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, which="major", alpha=0.3)
        title = "\n".join(value_text(a, v) for a, v in ((col_axis, cv), (row_axis, rv)) if a.name)
        if title:
            ax.set_title(title, fontsize=10)
        if ci == 0:
            ax.set_ylabel(quantity_title(quantity, short=True))
        if ri == nrows - 1:
            ax.set_xlabel(f"{x_axis.name} (log2)" if not positional else x_axis.name)
    handles = _legend_handles(series_axis, channels, unstyled, colors, grid[0][0])
    if drew_reference:
        handles.append(
            plt.Line2D(
                [], [], color="black", marker="*", ms=9, mec="black", label="reference", **_REF_BAND
            )
        )
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=min(len(handles), 6),
        fontsize=9,
    )
    title = f"vmio study {exp.name}: {exp.title}" if exp.title else f"vmio study {exp.name}"
    fig.suptitle(f"{title}  (seed {res.seed}{', quick' if res.quick else ''})", fontsize=11)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def _legend_handles(series_axis, channels, unstyled, colors, first_ax) -> list:
    """One entry per series value (its colour) and per value of each further axis (its
    line style, marker or width, in grey); with axes beyond the channels, the lines of the
    first panel as they are labelled."""
    if unstyled:
        return list(first_ax.get_legend_handles_labels()[0])
    marker_taken = any(channel == "marker" for _, channel in channels)
    handles = [
        plt.Line2D(
            [],
            [],
            color=colors[si % len(colors)],
            marker=None if marker_taken else _MARKERS[si % len(_MARKERS)],
            lw=2.0,
            label=value_text(series_axis, sv),
        )
        for si, sv in enumerate(series_axis.values)
    ]
    for axis, channel in channels:
        for i, v in enumerate(axis.values):
            style = {"ls": "-", "lw": 1.5, "marker": None, **_channel_style(channel, i)}
            handles.append(plt.Line2D([], [], color="dimgray", label=value_text(axis, v), **style))
    return handles


def _draw_references(
    ax, res, row_name, rv, col_name, cv, series_axis, x_axis, xs, colors
) -> list[float]:
    """Draw the panel's reference figures; returns their values (for the y scale)."""
    drawn: list[float] = []
    for c in res.experiment.calibrations:
        if c.reference_mb_s is None or c.quantity != "total":
            continue
        if c.where.get(row_name) != (rv,) or c.where.get(col_name) != (cv,):
            continue
        series = c.where.get(series_axis.name)
        color = (
            colors[series_axis.values.index(series[0]) % len(colors)]
            if series and len(series) == 1 and series[0] in series_axis.values
            else "black"
        )
        chosen = [
            x
            for x, xv in zip(xs, x_axis.values, strict=True)
            if xv in c.where.get(x_axis.name, x_axis.values)
            and xv not in c.exclude.get(x_axis.name, ())
        ]
        if not chosen:
            continue
        y = c.reference_mb_s
        drawn.append(y)
        if len(chosen) == 1:
            ax.plot(
                [chosen[0]],
                [y],
                marker="*",
                ms=13,
                color=color,
                mec="black",
                mew=0.6,
                ls="none",
                zorder=10,
            )
        else:
            ax.plot([min(chosen), max(chosen)], [y, y], color=color, zorder=2, **_REF_BAND)
            ax.plot(
                [max(chosen)],
                [y],
                marker="*",
                ms=11,
                color=color,
                mec="black",
                mew=0.6,
                ls="none",
                zorder=10,
            )
        ax.annotate(
            c.id,
            (chosen[-1], y),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
            color="dimgray",
        )
    return drawn


def study_bars(res: StudyResult, path: Path) -> None:
    """`[figure] kind = "bars"`: one panel per value of `columns` (one row of panels per value of
    `rows`, when given), groups of bars along `x`, one bar per value of `series` (coloured)
    and of the first further axis (hatched); the bar is the mean of `quantity` over the
    points of any axis beyond. With `gain = true`, the bar is
    the `[report] gain` of the point in % (`vmio.study.pdc.gains`: its quantity over the same
    point with the gain axis at its baseline, minus 1), the gmean over further axes; the gain
    axis's baseline value gets no panel, and the reference band of each `ratio_to`
    calibration that names one value of `x` is drawn in grey."""
    exp = res.experiment
    axes = {a.name: a for a in exp.axes_for(res.quick)}
    cfg = exp.figure
    quantity = cfg.get("quantity", "total")
    gains = _bar_gains(res, quantity) if cfg.get("gain") else None
    row_axis = axes[cfg["rows"]] if cfg.get("rows") else None
    col_axis = axes[cfg["columns"]]
    series_axis = axes[cfg["series"]]
    x_axis = axes[cfg["x"]]
    rvalues = _panel_values(res, row_axis, gains) if row_axis else (None,)
    cvalues = _panel_values(res, col_axis, gains)
    nrows, ncols = len(rvalues), len(cvalues)
    # Wide enough for the x labels and the title (one panel of gains has them all).
    panel_w = max(5.0, 1.3 * len(x_axis.values) + 2.0) if gains is not None else 5.0
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(panel_w * ncols, 3.8 * nrows), squeeze=False, constrained_layout=True
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # A further axis is hatched (one bar per series and hatch value); beyond it, averaged.
    further = [a for a in axes.values() if a not in (row_axis, col_axis, series_axis, x_axis)]
    hatch_axis = further[0] if further else None
    averaged = further[1:]
    bars = [
        (si, sv, hi, hv)
        for si, sv in enumerate(series_axis.values)
        for hi, hv in enumerate(hatch_axis.values if hatch_axis else (None,))
    ]
    width = 0.8 / len(bars)
    unit = quantity_unit(quantity)
    for (ri, rv), (ci, cv) in itertools.product(enumerate(rvalues), enumerate(cvalues)):
        ax = grid[ri][ci]
        for k, (si, sv, hi, hv) in enumerate(bars):
            ys = []
            for xv in x_axis.values:
                sel = {col_axis.name: cv, series_axis.name: sv, x_axis.name: xv}
                if row_axis:
                    sel[row_axis.name] = rv
                if hatch_axis is not None:
                    sel[hatch_axis.name] = hv
                chosen = [
                    pr for pr in res.points if all(pr.point.get(k) == v for k, v in sel.items())
                ]
                if gains is None:
                    vals = [quantity_value(pr.result, quantity) for pr in chosen]
                    ys.append(sum(vals) / len(vals) if vals else 0.0)
                else:
                    ratios = [
                        1 + gains[p.point.coords] / 100 for p in chosen if p.point.coords in gains
                    ]
                    ys.append(100 * (REDUCERS["gmean"](ratios) - 1) if ratios else 0.0)
            xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(ys))]
            ax.bar(
                xs,
                ys,
                width,
                color=colors[si % len(colors)],
                **(
                    {}
                    if hatch_axis is None
                    else {"hatch": _HATCHES[hi % len(_HATCHES)], "edgecolor": "black", "lw": 0.5}
                ),
            )
        ax.set_xticks(range(len(x_axis.values)), [x_axis.label(v) for v in x_axis.values])
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_title(
            value_text(col_axis, cv) + (f"\n{value_text(row_axis, rv)}" if row_axis else ""),
            fontsize=10,
        )
        if gains is not None:
            ax.axhline(0, color="black", linewidth=0.8)
            ax.tick_params(axis="x", labelsize=8, labelrotation=20)
            pdcreport.draw_gain_bounds(ax, exp, x_axis.name, x_axis.values, quantity)
        if ci == 0:
            if gains is None:
                ax.set_ylabel(f"{quantity}{f', {unit}' if unit else ''}")
            else:
                gaxis, over = exp.report["gain"]
                ax.set_ylabel(
                    f"{quantity_title(quantity, short=True).split(',')[0]}\n"
                    f"over {axes[gaxis].label(over)}, % change"
                )
    handles = [
        Patch(color=colors[si % len(colors)], label=value_text(series_axis, sv))
        for si, sv in enumerate(series_axis.values)
    ]
    if hatch_axis is not None:
        handles += [
            Patch(
                facecolor="white",
                edgecolor="black",
                hatch=_HATCHES[hi % len(_HATCHES)],
                label=value_text(hatch_axis, hv),
            )
            for hi, hv in enumerate(hatch_axis.values)
        ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize=9)
    title = f"vmio study {exp.name}: {exp.title}" if exp.title else f"vmio study {exp.name}"
    if averaged:
        title += f"; mean over {', '.join(a.name for a in averaged)}"
    fig.suptitle(f"{title}  (seed {res.seed}{', quick' if res.quick else ''})", fontsize=11)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def _bar_gains(res: StudyResult, quantity: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`[figure] gain = true`: every point's gain (%) over its `[report] gain` baseline."""
    if not res.experiment.report.get("gain"):
        raise VmioError(
            f"{res.experiment.path}: [figure] gain = true needs a [report] gain = {{ axis, over }}"
        )
    return pdcreport.gains(res, quantity)


def _panel_values(res: StudyResult, axis: Axis, gains: dict | None) -> tuple[str, ...]:
    """A panel axis's values; with gains, without the gain axis's baseline (it has none)."""
    if gains is None or res.experiment.report["gain"][0] != axis.name:
        return axis.values
    return tuple(v for v in axis.values if v != res.experiment.report["gain"][1])


def study_timeline(res: StudyResult, path: Path) -> None:
    """`[figure] kind = "timeline"`: one panel per point (a row of panels per value of `rows`,
    a column per value of `columns`; further axes: one panel each, in grid order), one line
    per VM but the lightest-weight one: its bandwidth over the lightest VM's, second by
    second, both summed over a sliding `window_s` seconds (default 5) so that a second in
    which the lightest VM moves little does not spike; dotted lines at the weight ratios."""
    exp = res.experiment
    cfg = exp.figure
    window = int(cfg.get("window_s", 5))
    axes = {a.name: a for a in exp.axes_for(res.quick)}
    row_axis = axes[cfg["rows"]] if cfg.get("rows") else None
    col_axis = axes[cfg["columns"]] if cfg.get("columns") else None
    rvalues = row_axis.values if row_axis else (None,)
    cvalues = col_axis.values if col_axis else (None,)
    panels: dict[tuple[str | None, str | None], list] = {}
    for pr in res.points:
        key = (
            pr.point.get(row_axis.name) if row_axis else None,
            pr.point.get(col_axis.name) if col_axis else None,
        )
        panels.setdefault(key, []).append(pr)
    nrows = len(rvalues) * max(len(v) for v in panels.values())
    ncols = len(cvalues)
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(5.0 * ncols, 3.2 * nrows), squeeze=False, constrained_layout=True
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    depth = nrows // len(rvalues)
    for (ri, rv), (ci, cv) in itertools.product(enumerate(rvalues), enumerate(cvalues)):
        for k, pr in enumerate(panels.get((rv, cv), [])):
            ax = grid[ri * depth + k][ci]
            vms = pr.result.get("vmio", {}).get("vms") or []
            if len(vms) < 2:
                continue
            tvm = min(vms, key=lambda v: v["weight"])
            base = _windowed(tvm["bytes_per_s"], window)
            top = 0.0
            for i, vm in enumerate(v for v in vms if v is not tvm):
                mine = _windowed(vm["bytes_per_s"], window)
                ts = [t + 1 for t in range(min(len(base), len(mine))) if base[t] > 0]
                ys = [mine[t - 1] / base[t - 1] for t in ts]
                ideal = vm["weight"] / tvm["weight"]
                color = colors[i % len(colors)]
                ax.plot(ts, ys, color=color, lw=1.4, label=f"{vm['name']} (ideal {ideal:g})")
                ax.axhline(ideal, color=color, ls=":", lw=1.0)
                top = max([top, ideal, *ys])
            ax.set_ylim(0, top * 1.15 if top > 0 else 1)
            ax.grid(True, alpha=0.3)
            ax.set_title(pr.point.label.replace("/", " / "), fontsize=9)
            ax.set_xlabel("time, s")
            if ci == 0:
                ax.set_ylabel(f"bw / bw({tvm['name']})")
            if ri == 0 and ci == 0 and k == 0:
                ax.legend(fontsize=8, loc="lower right")
    title = f"vmio study {exp.name}: {exp.title}" if exp.title else f"vmio study {exp.name}"
    fig.suptitle(
        f"{title}  (seed {res.seed}{', quick' if res.quick else ''}; {window} s sliding sums)",
        fontsize=11,
    )
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def _windowed(per_s: list[float], window: int) -> list[float]:
    """Sums over the last `window` seconds (fewer at the start)."""
    out, acc = [], 0.0
    for t, b in enumerate(per_s):
        acc += b
        if t >= window:
            acc -= per_s[t - window]
        out.append(acc)
    return out
