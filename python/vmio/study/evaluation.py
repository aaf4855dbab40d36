"""A study's results and their evaluation against the reference figures of its experiment.

Each `[[calibration]]` entry selects points (`where`, minus `exclude`), reduces their quantity
(`REDUCERS`) and compares it:

    value = reduce(quantity of the selected points; NaN values, where the quantity does not
                   apply, such as a share of no fsync() calls, are left out)
    with ratio_to:   value /= reduce(quantity of the ratio_to points); PASS when the ratio
                     is within [at_least, at_most]
    with reference:  error = (value - reference) / reference; PASS when |error| <= tolerance
    else:            PASS when value is within [at_least, at_most]
    no point selected: N/A
    a selected point skipped (the real engine could not run it): skipped
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmio import results
from vmio.study.experiment import Calibration, Experiment, Point
from vmio.study.quantities import QUANTITIES, REDUCERS, format_quantity, quantity_value


@dataclass
class PointResult:
    point: Point
    json_text: str
    result: dict[str, Any]


@dataclass
class CalibrationRow:
    calibration: Calibration
    simulated: float | None
    n_points: int
    rel_error_pct: float | None
    status: str

    @property
    def is_ratio(self) -> bool:
        return self.calibration.ratio_to is not None

    @property
    def kind(self) -> str:
        """`ratio`, `mb_s` (a MB/s reference), `value` (another reference) or `bounds`."""
        c = self.calibration
        if self.is_ratio:
            return "ratio"
        if c.reference_mb_s is None:
            return "bounds"
        return "mb_s" if c.quantity in QUANTITIES else "value"

    def reference_text(self) -> str:
        c = self.calibration
        if c.reference_mb_s is not None:
            return format_quantity(c.reference_mb_s, c.quantity)
        x = "x" if self.is_ratio else ""
        bounds = []
        if c.at_least is not None:
            bounds.append(f">= {c.at_least:g}{x}")
        if c.at_most is not None:
            bounds.append(f"<= {c.at_most:g}{x}")
        return " and ".join(bounds)

    def simulated_text(self) -> str:
        if self.simulated is None:
            return "-"
        if self.is_ratio:
            return (
                f"{self.simulated:.1f}x"
                if self.calibration.quantity in QUANTITIES
                else f"{self.simulated:.2f}x"
            )
        return format_quantity(self.simulated, self.calibration.quantity)


@dataclass
class StudyResult:
    experiment: Experiment
    seed: int
    quick: bool
    points: list[PointResult]
    calibration: list[CalibrationRow]
    notes: list[str]
    skipped: list[tuple[Point, str]] = field(default_factory=list)
    """Points not run (the real engine's `Skipped`), each with its reason, in grid order."""

    def value_mb_s(self, point: Point, quantity: str = "total") -> float:
        """The bandwidth of a point in MB/s (read + write for `total`)."""
        for pr in self.points:
            if pr.point == point:
                return quantity_value(pr.result, quantity)
        raise KeyError(point)

    def _axes(self) -> dict[str, tuple[str, ...]]:
        return {a.name: a.values for a in self.experiment.axes_for(self.quick)}

    def tidy_table(self):  # -> pyarrow.Table
        """One row per point and direction (`vmio.results.tidy_rows`), axes typed."""
        rows = []
        for pr in self.points:
            rows += results.tidy_rows(
                pr.result, dict(pr.point.coords), self.experiment.name, pr.point.slug
            )
        return results.tidy_table(rows, self._axes())

    def points_table(self):  # -> pyarrow.Table
        """One row per point: its stack, job options, seed and engine, keyed by `point`."""
        rows = [
            results.point_row(pr.result, dict(pr.point.coords), self.experiment.name, pr.point.slug)
            for pr in self.points
        ]
        return results.points_table(rows, self._axes())


def _reduce(
    points: Sequence[PointResult],
    where: Mapping[str, tuple[str, ...]],
    exclude: Mapping[str, tuple[str, ...]],
    reduce: str,
    quantity: str,
) -> tuple[float | None, int]:
    chosen = [
        quantity_value(p.result, quantity)
        for p in points
        if p.point.matches(where) and not (exclude and _matches_any(p.point, exclude))
    ]
    chosen = [v for v in chosen if v == v]  # NaN: the quantity does not apply to that point
    if not chosen:
        return None, 0
    return REDUCERS[reduce](chosen), len(chosen)


def _matches_any(point: Point, selection: Mapping[str, tuple[str, ...]]) -> bool:
    values = dict(point.coords)
    return any(values.get(k) in vs for k, vs in selection.items())


def evaluate_calibration(
    exp: Experiment, points: Sequence[PointResult], skipped: Sequence[Point] = ()
) -> list[CalibrationRow]:
    """Compare the simulated points with every `[[calibration]]` entry; an entry one of
    whose points is in `skipped` is `skipped`."""
    rows = []
    for c in exp.calibrations:
        if any(
            (p.matches(c.where) or (c.ratio_to is not None and p.matches(c.ratio_to)))
            and not (c.exclude and _matches_any(p, c.exclude))
            for p in skipped
        ):
            rows.append(CalibrationRow(c, None, 0, None, "skipped"))
            continue
        value, n = _reduce(points, c.where, c.exclude, c.reduce, c.quantity)
        if c.ratio_to is not None:
            base, n_base = _reduce(points, c.ratio_to, c.exclude, c.reduce, c.quantity)
            n += n_base
            value = value / base if value is not None and base else None
            ok = value is not None
            ok = ok and (c.at_least is None or value >= c.at_least)
            ok = ok and (c.at_most is None or value <= c.at_most)
            status = "N/A" if value is None else ("PASS" if ok else "MISS")
            rows.append(CalibrationRow(c, value, n, None, status))
            continue
        if value is None:
            rows.append(CalibrationRow(c, None, 0, None, "N/A"))
            continue
        if c.reference_mb_s is None:  # bounds on the value itself
            ok = (c.at_least is None or value >= c.at_least) and (
                c.at_most is None or value <= c.at_most
            )
            rows.append(CalibrationRow(c, value, n, None, "PASS" if ok else "MISS"))
            continue
        tol = exp.tolerance if c.tolerance is None else c.tolerance
        err = (value - c.reference_mb_s) / c.reference_mb_s * 100.0
        status = "PASS" if abs(err) <= tol * 100.0 + 1e-9 else "MISS"
        rows.append(CalibrationRow(c, value, n, err, status))
    return rows


def calibration_records(res: StudyResult) -> list[dict[str, Any]]:
    """Rows of calibration.csv."""
    out = []
    for row in res.calibration:
        c = row.calibration
        out.append(
            {
                "id": c.id,
                "description": c.description,
                "kind": row.kind,
                "reference_mb_s": ""
                if c.reference_mb_s is None or c.quantity not in QUANTITIES
                else c.reference_mb_s,
                "at_least": "" if c.at_least is None else c.at_least,
                "at_most": "" if c.at_most is None else c.at_most,
                "simulated": "" if row.simulated is None else round(row.simulated, 6),
                "rel_error_pct": "" if row.rel_error_pct is None else round(row.rel_error_pct, 3),
                "tolerance_pct": round(
                    (res.experiment.tolerance if c.tolerance is None else c.tolerance) * 100, 6
                ),
                "status": row.status,
                "n_points": row.n_points,
                "where": json.dumps({k: list(v) for k, v in c.where.items()}),
                "exclude": json.dumps({k: list(v) for k, v in c.exclude.items()}),
                "ratio_to": ""
                if c.ratio_to is None
                else json.dumps({k: list(v) for k, v in c.ratio_to.items()}),
                "reduce": c.reduce,
                "quantity": c.quantity,
                "reference": "" if c.reference_mb_s is None else c.reference_mb_s,
            }
        )
    return out


CALIBRATION_COLUMNS = (
    "id",
    "description",
    "kind",
    "reference_mb_s",
    "at_least",
    "at_most",
    "simulated",
    "rel_error_pct",
    "tolerance_pct",
    "status",
    "n_points",
    "where",
    "exclude",
    "ratio_to",
    "reduce",
    "quantity",
    "reference",
)
