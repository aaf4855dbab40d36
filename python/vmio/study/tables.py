"""The text a study prints and writes to tables.txt: grid tables, calibration, summary.

Table rows and columns show each axis value by its label (`Direct / sequential read / LVM
linear`; a label may itself hold a `/`), the row header names the axes; a study without
`[[calibration]]` entries has no calibration section."""

from __future__ import annotations

import itertools

from vmio import fioreport as report
from vmio.study import iozone as iozonereport
from vmio.study import pdc as pdcreport
from vmio.study.evaluation import StudyResult
from vmio.study.quantities import format_quantity, quantity_title, quantity_unit, quantity_value


def grid_tables(res: StudyResult) -> str:
    """The result tables: MB/s per point, one table per value of `[report].tables`."""
    exp = res.experiment
    axes = {a.name: a for a in exp.axes_for(res.quick)}
    rows_axes = [axes[n] for n in exp.report["rows"]]
    col_axis = axes[exp.report["columns"]]
    table_axis = axes[exp.report["tables"]] if exp.report["tables"] else None
    by_coords = {pr.point.coords: pr for pr in res.points}
    order = [a.name for a in exp.axes]
    chunks = []
    for quantity in exp.report.get("quantity", ("total",)):
        chunks += _grid_tables(res, quantity, rows_axes, col_axis, table_axis, by_coords, order)
    return "\n\n".join(chunks)


def _grid_tables(res, quantity, rows_axes, col_axis, table_axis, by_coords, order) -> list[str]:
    what = quantity_title(quantity)
    chunks: list[str] = []
    for tvalue in table_axis.values if table_axis else [None]:
        header = [
            " / ".join(a.name for a in rows_axes),
            *(col_axis.label(v) for v in col_axis.values),
        ]
        body = []
        for combo in itertools.product(*(a.values for a in rows_axes)):
            cells = [" / ".join(a.label(v) for a, v in zip(rows_axes, combo, strict=True))]
            for cvalue in col_axis.values:
                coords = dict(zip([a.name for a in rows_axes], combo, strict=True))
                coords[col_axis.name] = cvalue
                if table_axis:
                    coords[table_axis.name] = tvalue
                key = tuple((n, coords[n]) for n in order if n in coords)
                pr = by_coords.get(key)
                cells.append(
                    format_quantity(quantity_value(pr.result, quantity), quantity) if pr else "-"
                )
            body.append(cells)
        title = ""
        if table_axis:
            label = table_axis.label(tvalue)
            title = label if label != tvalue else f"{table_axis.name}={tvalue}"
        chunks.append(f"{title}{' - ' if title else ''}{what}\n" + report.text_table(header, body))
    return chunks


def calibration_table(res: StudyResult) -> str:
    """The calibration figures next to the simulated values, with PASS/MISS."""
    tol = res.experiment.tolerance * 100
    units = {quantity_unit(c.quantity) for c in res.experiment.calibrations} or {"MB/s"}
    ref_head = "reference MB/s" if units == {"MB/s"} else "reference"
    real = any((pr.result.get("vmio") or {}).get("engine") == "real" for pr in res.points)
    header = ["figure", ref_head, "measured" if real else "simulated", "error %", "status"]
    header.append("description")
    body = []
    for row in res.calibration:
        body.append(
            [
                row.calibration.id,
                row.reference_text(),
                row.simulated_text(),
                "-" if row.rel_error_pct is None else f"{row.rel_error_pct:+.1f}",
                row.status,
                row.calibration.description,
            ]
        )
    passed = sum(r.status == "PASS" for r in res.calibration)
    return (
        f"Calibration against {res.experiment.reference or 'the reference'} "
        f"(PASS within +-{tol:g} %)\n"
        + report.text_table(header, body, align="lrrrll")
        + f"\n{passed} of {len(res.calibration)} figures PASS"
    )


def summary_text(res: StudyResult) -> str:
    """Everything `vmio study` prints on stdout."""
    exp = res.experiment
    head = f"vmio study {exp.name}: {exp.title}" if exp.title else f"vmio study {exp.name}"
    lines = [
        head,
        f"seed={res.seed}, {len(res.points)} points{' (--quick)' if res.quick else ''}, "
        + (f"{len(res.skipped)} skipped, " if res.skipped else "")
        + f"experiment {exp.path.name}, stack {exp.stack_path.name}, "
        + (f"job {exp.job_path.name}" if exp.job_path else "every VM's own workload"),
    ]
    extra = ""
    if exp.report.get("gain"):
        extra = pdcreport.pdc_text(res) + "\n\n"
    # [report] iozone: S2's layout in place of the grid tables
    grid = iozonereport.iozone_text(res) if exp.report.get("iozone") else grid_tables(res)
    skipped = "".join(f"skipped {p.label}: {why}\n" for p, why in res.skipped)
    # A study without reference figures has no calibration section.
    calibration = calibration_table(res) + "\n" if exp.calibrations else ""
    body = (grid + "\n\n" + extra + calibration).rstrip("\n") + "\n"
    return "\n".join(lines) + "\n\n" + (skipped + "\n" if skipped else "") + body
