"""matplotlib for the study figures (the Agg backend: no display needed) and the grouped bars
that several figures draw (`vmio.study.plot`, `vmio.study.pdc`, `vmio.study.iozone`)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["grouped_bars", "plt"]


def grouped_bars(
    ax,
    groups: Sequence[str],
    series: dict[str, list[float]],
    ylabel: str,
    colors: Sequence[str] | None = None,
) -> None:
    """Groups of bars on `ax`: one group per `groups` entry, one bar per series (label ->
    one value per group, NaN drawn as 0), each 0.8 / len(series) wide; `colors`, one per
    series (default: matplotlib's cycle)."""
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, ys) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(groups))]
        color = None if colors is None else colors[i]
        ax.bar(xs, [0.0 if y != y else y for y in ys], width, label=name, color=color)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
