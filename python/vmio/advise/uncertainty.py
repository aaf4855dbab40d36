"""How far a predicted figure may be off: the measured error of the calibration the stack
came from, or "uncalibrated" (no error bar is made up).

Where a stack was calibrated, `vmio calibrate` wrote it with a `# vmio calibrate ...` header
and, beside it, `fit.txt` (vmio.real.calibrate.fit_text: every battery point measured and
vmio sim's run of it, with the error sim / measured - 1; then the random 4 KiB QD1 points'
clat p50, p99, p99.9 the same way); `vmio validate` puts the calibration in
`DIR/calibration/` and its held-out runs in `DIR/real/` and `DIR/sim/` (vmio.real.validate:
fio on workloads the fit never saw, and vmio sim of each). The error of each figure is the
median and the 90th percentile of |error| (vmio.real.compare.quantile: linear interpolation
between order statistics) over:

    validation record (held out; preferred)  DIR/real vs DIR/sim as `vmio validate` compares
        them (vmio.real.compare.compare): bandwidth, IOPS, mean latency, clat p99 per point
        and direction; clat p99.9 from validate.tails (runs of at least 10,000 requests)
    fit.txt (in sample)                      the battery's "sim err" columns: bandwidth (also
        IOPS: each point's size is fixed, so its IOPS error is its bandwidth error) and mean
        latency; clat p99 and p99.9 from the QD1 percentile lines
    the header alone                         "calibrated, no error record beside it": none
    none of these                            "uncalibrated": none

The error is that of the device model on the calibrated stack; a configuration that
changes layers above the device (a cache mode, an interface) is a prediction the
calibration did not measure, which `scope` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vmio.sim import VmioError

FIGURE_OF = {"bw": "bw_bytes", "iops": "iops", "lat": "lat_mean_ns", "p99": "p99_ns"}
"""vmio.real.compare's metric (Metric.short) -> advise's figure."""

SCOPE = (
    "measured on the calibrated stack's device; knob values that change the layers above "
    "it were not measured"
)


def _summary(errors: Sequence[float]) -> dict[str, Any] | None:
    from vmio.real.compare import quantile

    xs = [abs(e) for e in errors]
    if not xs:
        return None
    return {"median": quantile(xs, 0.5), "p90": quantile(xs, 0.9), "n": len(xs)}


def _validation_dir(stack: Path) -> Path | None:
    for d in (stack.parent, stack.parent.parent):
        if (d / "real").is_dir() and (d / "sim").is_dir() and (d / "compare.csv").is_file():
            return d
    return None


def from_validation(d: Path) -> dict[str, Any]:
    """The held-out errors of a `vmio validate` directory (module doc)."""
    from vmio.real import compare, validate

    c = compare.compare(compare.load(d / "real", "real"), compare.load(d / "sim", "sim"))
    figs: dict[str, Any] = {}
    for short, fig in FIGURE_OF.items():
        figs[fig] = _summary([e for r in c.rows if (e := r.errors[short]) is not None])
    tails = [t.error for t in validate.tails(d) if t.label == "p99.9" and t.error is not None]
    figs["p999_ns"] = _summary(tails)
    return figs


def _pct(token: str) -> float:
    return float(token.rstrip("%")) / 100


def from_fit(path: Path) -> dict[str, Any]:
    """The in-sample errors of vmio calibrate's fit.txt (module doc)."""
    text = path.read_text(encoding="utf-8")
    bw: list[float] = []
    lat: list[float] = []
    tails: dict[str, list[float]] = {"p99": [], "p99.9": []}
    section = None
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            section = None
            continue
        if tokens[0] == "point":
            section = "points"
            continue
        if tokens[:3] == ["QD1", "clat", "pct"]:
            section = "tails"
            continue
        if line.startswith("median |error|"):
            section = None
            continue
        errs = [_pct(t) for t in tokens if t.endswith("%") and t[:-1].lstrip("+-")[:1].isdigit()]
        if section == "points" and len(tokens) > 1:
            if tokens[1] == "-":  # the fdatasync points: latency only
                if len(errs) == 2:
                    lat.append(errs[1])
            elif len(errs) == 4:
                bw.append(errs[1])
                lat.append(errs[3])
        elif section == "tails" and len(tokens) > 1 and tokens[1] in tails and len(errs) == 2:
            tails[tokens[1]].append(errs[1])
    return {
        "iops": _summary(bw),
        "bw_bytes": _summary(bw),
        "lat_mean_ns": _summary(lat),
        "p99_ns": _summary(tails["p99"]),
        "p999_ns": _summary(tails["p99.9"]),
    }


CALIBRATE_HEADER = "# vmio calibrate"


def of_stack(stack: Path, stack_text: str) -> dict[str, Any]:
    """The uncertainty record of the stack at `stack` (module doc): `source` (validation,
    fit, header, uncalibrated), `file`, `figures` {figure: {median, p90, n} | None}, `note`."""
    header = any(line.startswith(CALIBRATE_HEADER) for line in stack_text.splitlines()[:3])
    try:
        if (d := _validation_dir(stack)) is not None:
            return {
                "source": "validation",
                "file": str(d),
                "figures": from_validation(d),
                "note": f"held-out error of vmio validate in {d}; {SCOPE}",
            }
        if (stack.parent / "fit.txt").is_file():
            fit = stack.parent / "fit.txt"
            return {
                "source": "fit",
                "file": str(fit),
                "figures": from_fit(fit),
                "note": f"in-sample error of the calibration's fit ({fit}); {SCOPE}",
            }
    except (OSError, UnicodeError, VmioError, ValueError) as err:
        return {
            "source": "unreadable",
            "file": None,
            "figures": {},
            "note": f"the calibration record beside the stack could not be read: {err}",
        }
    if header:
        return {
            "source": "header",
            "file": None,
            "figures": {},
            "note": "calibrated (vmio calibrate header), but no fit.txt or validation record "
            "beside it: error unknown",
        }
    return {"source": "uncalibrated", "file": None, "figures": {}, "note": "uncalibrated"}


def shown(record: dict[str, Any], figure: str) -> str:
    """`±11% (p90 25%)`, or the reason there is none (`uncalibrated`)."""
    s = record["figures"].get(figure)
    if s is None:
        return "uncalibrated" if record["source"] == "uncalibrated" else "no error record"
    return f"±{100 * s['median']:.0f}% (p90 {100 * s['p90']:.0f}%)"
