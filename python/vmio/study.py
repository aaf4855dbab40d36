"""Studies: sweep a stack and a fio job over a grid of axes, simulate every point, report.

An experiment file (TOML, see `studies/volumes-cache/experiment.toml` for the annotated
format) names a stack file, a fio job file and a list of axes. Without a job file (no `job`,
or `job = ""`) every point runs the stack's own per-VM `workload` files at once (see
`vmio.sim.simulate_workloads_text`). Each axis has a *target*:

- `stack:<path>` edits the stack: the file is parsed with tomllib, the key at `<path>` is set
  (tables by key, arrays of tables by index: `vm.0.disk.0.cache`, `*` for every element:
  `vm.*.workload`) and the dict is written back with tomli_w;
- `job:<option>` edits the fio job: the option is set in every section that has it, or added
  to `[global]` when none does (`job:<section>.<option>`: in that section only); other
  lines, comments and line numbers stay as they are. Without a job file, it edits every
  VM's workload file the same way, and `job[<vm>]:<option>` edits that VM's only.

A point's *quantity* (calibration, tables) is its bandwidth in MB/s (`total`, `read`,
`write`) or, from the result's `vmio.share` / `vmio.vms` (several VMs), `error_rate_pct`,
`jain`, `ratio:<vm>` (that VM's bandwidth over the lightest-weight VM's) or `bw:<vm>` (that
VM's bandwidth, MB/s).

A *study* is one experiment file (`experiment.toml`) or several parts: a `study.toml` in the
study directory lists them (`[study] name, title, parts = ["a.toml", ...]`); each part is an
experiment with its own grid, tables, figure and calibration, written to its own
subdirectory.

The grid is the product of the axes in file order, the last axis varying fastest. Every point
is simulated with the same seed (the simulator derives its sub-seeds from it), which gives the
layouts and cache modes common random numbers and makes the whole study deterministic: the
same experiment and seed give byte-identical tables and files.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import tomli_w

from vmio import report, results
from vmio.progress import Progress
from vmio.sim import (
    VmioError,
    check_path,
    native,
    parse_size,
    parse_toml,
    read_text,
    short_repr,
    simulate_text,
    stack_workloads,
)

BUILTIN_STUDIES = Path(__file__).resolve().parent / "studies"
"""Where the built-in studies live (shipped inside the package; `studies/` in a checkout)."""

REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
}
QUANTITIES = ("total", "read", "write")
"""Bandwidth quantities, MB/s."""
SHARE_QUANTITIES = ("error_rate_pct", "jain")
"""Quantities of the bandwidth shares of several VMs (`vmio.share`); also `ratio:<vm>`."""
VM_QUANTITIES = ("ratio:", "bw:")
"""Per-VM quantities: `ratio:<vm>` (its bandwidth / the lightest-weight VM's) and `bw:<vm>`
(its bandwidth, MB/s)."""


def check_quantity(quantity: str) -> str | None:
    """None when `quantity` is known, else why not."""
    if quantity in QUANTITIES or quantity in SHARE_QUANTITIES:
        return None
    if any(quantity.startswith(p) and quantity[len(p) :] for p in VM_QUANTITIES):
        return None
    return (
        f"'{quantity}' is not one of {', '.join((*QUANTITIES, *SHARE_QUANTITIES))}, "
        "ratio:<vm>, bw:<vm>"
    )


def _vm_of(result: Mapping[str, Any], quantity: str, name: str) -> dict[str, Any]:
    vms = result.get("vmio", {}).get("vms") or []
    vm = next((v for v in vms if v.get("name") == name), None)
    if vm is None:
        names = ", ".join(str(v.get("name")) for v in vms) or "none"
        raise VmioError(f"quantity '{quantity}': no VM '{name}' in the result ({names})")
    return vm


def quantity_value(result: Mapping[str, Any], quantity: str = "total") -> float:
    """A point's quantity: MB/s for total/read/write; `error_rate_pct` and `jain` from
    `vmio.share`; `ratio:<vm>`: bw of that VM / bw of the lightest-weight VM (`vmio.vms`)."""
    if quantity in QUANTITIES:
        return results.quantity_mb_s(result, quantity)
    vmio = result.get("vmio", {})
    if quantity in SHARE_QUANTITIES:
        share = vmio.get("share") or {}
        key = "jain_index" if quantity == "jain" else quantity
        if share.get(key) is None:
            raise VmioError(f"quantity '{quantity}': the result has no vmio.share.{key}")
        return float(share[key])
    if quantity.startswith("bw:"):
        return _vm_of(result, quantity, quantity[len("bw:") :])["bw_bytes"] / 1e6
    if quantity.startswith("ratio:"):
        vm = _vm_of(result, quantity, quantity[len("ratio:") :])
        lightest = min(vmio["vms"], key=lambda v: v["weight"])
        if not lightest["bw_bytes"]:
            return float("inf")
        return vm["bw_bytes"] / lightest["bw_bytes"]
    raise VmioError(f"quantity {check_quantity(quantity)}")


def quantity_unit(quantity: str) -> str:
    """How a quantity reads in tables: `MB/s`, `%`, `` (an index or a ratio)."""
    if quantity in QUANTITIES or quantity.startswith("bw:"):
        return "MB/s"
    return "%" if quantity == "error_rate_pct" else ""


def quantity_title(quantity: str, short: bool = False) -> str:
    """What a quantity is, for a table title (or, `short`, an axis label)."""
    unit = "" if short else " (1 MB = 1e6 bytes)"
    if quantity == "total":
        return "bandwidth, MB/s" + ("" if short else " (read + write; 1 MB = 1e6 bytes)")
    if quantity in QUANTITIES:
        return f"{quantity} bandwidth, MB/s{unit}"
    if quantity == "error_rate_pct":
        return (
            "error rate, %"
            if short
            else ("error rate of the bandwidth shares, % (vmio.share.error_rate_pct)")
        )
    if quantity == "jain":
        return "Jain's index" if short else "Jain's fairness index of the bandwidth shares"
    if quantity.startswith("bw:"):
        return f"bandwidth of {quantity[len('bw:') :]}, MB/s{unit}"
    vm = quantity[len("ratio:") :]
    return (
        f"bw({vm}) / bw(lightest)"
        if short
        else (f"bandwidth of {vm} / bandwidth of the lightest-weight VM")
    )


def format_quantity(value: float, quantity: str) -> str:
    if quantity in QUANTITIES or quantity.startswith("bw:"):
        return report.format_mb_s(value)
    if quantity == "error_rate_pct":
        return f"{value:.1f} %"
    if quantity == "jain":
        return f"{value:.3f}"
    return f"{value:.2f}"


# Files a study writes into its output directory (and may replace with --force).
OUTPUT_FILES = (
    "results.csv",
    "results.parquet",
    "calibration.csv",
    "figure.png",
    "tables.txt",
)


# --- the experiment file -----------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """One swept parameter."""

    name: str
    target: str
    values: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    also: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Further settings (target -> value) that come with a value of this axis."""
    typed: Mapping[str, Any] = field(default_factory=dict)
    """The values as written in the file (`10`, not `"10"`), for stack targets."""

    @property
    def kind(self) -> str:
        return self.target.split(":", 1)[0]

    @property
    def path(self) -> str:
        return self.target.split(":", 1)[1]

    def label(self, value: str) -> str:
        return self.labels.get(value, value)


@dataclass(frozen=True)
class Calibration:
    """One reference figure and the simulated points it is compared with."""

    id: str
    description: str
    where: Mapping[str, tuple[str, ...]]
    exclude: Mapping[str, tuple[str, ...]]
    reduce: str
    quantity: str
    reference_mb_s: float | None = None
    """The reference value (MB/s for bandwidth quantities; in the quantity's unit else)."""
    ratio_to: Mapping[str, tuple[str, ...]] | None = None
    at_least: float | None = None
    at_most: float | None = None
    tolerance: float | None = None
    """This entry's relative band around `reference` (default: the experiment's)."""


@dataclass(frozen=True)
class Point:
    """One point of the grid: a value for every axis, in axis order."""

    coords: tuple[tuple[str, str], ...]

    def get(self, axis: str) -> str:
        return dict(self.coords)[axis]

    @property
    def label(self) -> str:
        """`stripe/none/randread bs=128k`: the values, the last axis as `name=value`."""
        *head, (last_name, last_value) = self.coords
        return "/".join(v for _, v in head) + f" {last_name}={last_value}"

    @property
    def slug(self) -> str:
        """A file name for the point: `stripe-none-randread-128k`."""
        return "-".join(v.replace("/", "_") for _, v in self.coords)

    def matches(self, selection: Mapping[str, tuple[str, ...]]) -> bool:
        values = dict(self.coords)
        return all(values.get(k) in vs for k, vs in selection.items())


@dataclass
class Experiment:
    """A parsed experiment file."""

    path: Path
    name: str
    title: str
    reference: str
    stack_path: Path
    job_path: Path | None
    """None: every point runs the stack's own per-VM `workload` files."""
    vm: str | None
    measure: str | None
    seed: int
    tolerance: float
    axes: list[Axis]
    quick_set: dict[str, str]
    quick_values: dict[str, tuple[str, ...]]
    report: dict[str, Any]
    figure: dict[str, Any]
    calibrations: list[Calibration]

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)

    def axes_for(self, quick: bool) -> list[Axis]:
        """The axes, with the `[quick]` value lists when `quick`."""
        if not quick:
            return list(self.axes)
        return [
            Axis(
                a.name,
                a.target,
                self.quick_values.get(a.name, a.values),
                a.labels,
                a.also,
                a.typed,
            )
            for a in self.axes
        ]

    def points(self, quick: bool = False) -> list[Point]:
        axes = self.axes_for(quick)
        return [
            Point(tuple(zip([a.name for a in axes], combo, strict=True)))
            for combo in itertools.product(*(a.values for a in axes))
        ]


def _job_vm(kind: str) -> str | None:
    """The VM of a `job[<vm>]` target kind, else None."""
    if kind.startswith("job[") and kind.endswith("]") and len(kind) > 5:
        return kind[4:-1]
    return None


class _Checker:
    """Validation helpers whose messages name the experiment file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> VmioError:
        return VmioError(f"{self.path}: {where}: {message}")

    def table(self, data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(where, f"'{key}' must be a table")
        return value

    def string(self, data: Mapping[str, Any], key: str, where: str, default: Any = ...) -> str:
        if key not in data:
            if default is ...:
                raise self.fail(where, f"missing key '{key}'")
            return default
        value = data[key]
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"'{key}' must be a non-empty string, not {short_repr(value)}")
        return value

    def number(self, data: Mapping[str, Any], key: str, where: str, default: Any = ...) -> Any:
        if key not in data:
            if default is ...:
                raise self.fail(where, f"missing key '{key}'")
            return default
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"'{key}' must be a number, not {short_repr(value)}")
        try:
            finite = math.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite:
            raise self.fail(where, f"'{key}' must be a finite number, not {short_repr(value)}")
        return value

    def integer(
        self, data: Mapping[str, Any], key: str, where: str, lo: int, hi: int, default: int
    ) -> int:
        """An integer in lo..=hi (`hi` written as a power of two when it is one less)."""
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            shown = f"2**{(hi + 1).bit_length() - 1}-1" if hi > 2**32 else str(hi)
            raise self.fail(
                where, f"'{key}' must be an integer in {lo}..{shown}, not {short_repr(value)}"
            )
        return value

    def tables(self, data: Mapping[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        """`[[key]]` tables (an array of tables), [] when absent."""
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(where, f"'{key}' must be [[{key}]] tables, not {short_repr(value)}")
        return value

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return (str(value),)
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value)
        ):
            return tuple(str(v) for v in value)
        raise self.fail(
            where, f"must be a value or a non-empty list of values, not {short_repr(value)}"
        )

    def target(self, target: str, where: str) -> str:
        """Check an axis or setting target; returns its kind (`stack`, `job`, `job[<vm>]`)."""
        kind, _, tpath = target.partition(":")
        if not (kind in ("stack", "job") or _job_vm(kind)) or not tpath:
            raise self.fail(
                where,
                f"target '{target}' must be 'stack:<key.path>', 'job:<fio option>' or "
                "'job[<vm>]:<fio option>'",
            )
        return kind

    def targets(self, settings: Mapping[str, Any], where: str) -> dict[str, Any]:
        """`target = value` settings; job option values become strings."""
        out = {}
        for target, value in settings.items():
            kind = self.target(target, where)
            out[target] = value if kind == "stack" else str(value)
        return out

    def selection(self, value: Any, where: str, axes: Sequence[Axis]) -> dict[str, tuple[str, ...]]:
        if not isinstance(value, dict):
            raise self.fail(where, "must be a table of axis = value(s)")
        names = [a.name for a in axes]
        out = {}
        for k, v in value.items():
            if k not in names:
                raise self.fail(where, f"unknown axis '{k}'; axes: {', '.join(names)}")
            vals = self.strings(v, f"{where}.{k}")
            known = next(a for a in axes if a.name == k).values
            for one in vals:
                if one not in known:
                    raise self.fail(
                        f"{where}.{k}", f"'{one}' is not a value of axis '{k}' ({', '.join(known)})"
                    )
            out[k] = vals
        return out


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    return parse_toml(read_text(path, what), path)


STUDY_FILES = ("study.toml", "experiment.toml")
"""What makes a directory a study: a list of parts, or a single experiment."""


def find_experiment(name_or_path: str | Path) -> Path:
    """The study file (study.toml or experiment.toml) for a built-in study name, a study
    directory or a file path."""
    p = check_path(name_or_path, "study")
    if p.is_file():
        return p
    base = p if p.is_dir() else BUILTIN_STUDIES / str(name_or_path)
    for name in STUDY_FILES:
        if (base / name).is_file():
            return base / name
    if p.is_dir():
        raise VmioError(f"directory '{p}' has no {' or '.join(STUDY_FILES)}")
    raise VmioError(
        f"unknown study '{name_or_path}'; built-in studies: {', '.join(builtin_studies()) or '-'}"
        " (or give a directory, a study.toml or an experiment.toml path)"
    )


def builtin_studies() -> list[str]:
    """Names of the studies shipped with vmio."""
    if not BUILTIN_STUDIES.is_dir():
        return []
    return sorted(
        p.name for p in BUILTIN_STUDIES.iterdir() if any((p / n).is_file() for n in STUDY_FILES)
    )


@dataclass
class Study:
    """A study: one experiment, or several parts listed by a study.toml."""

    name: str
    title: str
    path: Path
    parts: list[Experiment]

    @property
    def multipart(self) -> bool:
        return self.path.name == "study.toml"

    def part(self, name: str) -> Experiment:
        for e in self.parts:
            if e.name == name or e.path.stem == name:
                return e
        names = ", ".join(e.path.stem for e in self.parts)
        raise VmioError(f"study '{self.name}' has no part '{name}'; parts: {names}")


def load_study(name_or_path: str | Path) -> Study:
    """Parse a study: a study.toml and its parts, or a single experiment file."""
    path = find_experiment(name_or_path)
    if path.name != "study.toml":
        exp = load_experiment(path)
        return Study(exp.name, exp.title, path, [exp])
    data = _read_toml(path, "study file")
    ck = _Checker(path)
    for key in data:
        if key != "study":
            raise ck.fail(key, "unknown key; accepted: study")
    st = ck.table(data, "study", "[study]")
    for key in st:
        if key not in ("name", "title", "parts"):
            raise ck.fail(f"[study].{key}", "unknown key; accepted: name, title, parts")
    parts = ck.strings(st.get("parts"), "[study].parts")
    exps = []
    for part in parts:
        ppath = check_path(path.parent / part, f"{path}: [study].parts")
        if not ppath.is_file():
            raise ck.fail("[study].parts", f"no experiment file '{part}' next to the study file")
        exps.append(load_experiment(ppath))
    names = [e.name for e in exps]
    if len(set(names)) != len(names):
        raise ck.fail("[study].parts", f"two parts have the same [experiment] name: {names}")
    return Study(
        ck.string(st, "name", "[study]"), ck.string(st, "title", "[study]", default=""), path, exps
    )


def load_experiment(name_or_path: str | Path) -> Experiment:
    """Parse and check an experiment file (or the built-in single-experiment study of that
    name; a multi-part study's parts come from `load_study`)."""
    path = find_experiment(name_or_path)
    if path.name == "study.toml":
        st = load_study(path)
        raise VmioError(
            f"'{name_or_path}' is a study of {len(st.parts)} parts "
            f"({', '.join(e.path.stem for e in st.parts)}); load it with load_study"
        )
    data = _read_toml(path, "experiment file")
    ck = _Checker(path)
    known_top = {"experiment", "axis", "quick", "report", "figure", "calibration"}
    for key in data:
        if key not in known_top:
            raise ck.fail(key, f"unknown key; accepted: {', '.join(sorted(known_top))}")
    exp = ck.table(data, "experiment", "[experiment]")
    base = path.parent

    axes: list[Axis] = []
    raw_axes = ck.tables(data, "axis", "[[axis]]")
    if not raw_axes:
        raise ck.fail("[[axis]]", "an experiment needs at least one [[axis]]")
    for i, raw in enumerate(raw_axes):
        where = f"axis[{i}]"
        name = ck.string(raw, "name", where)
        where = f"axis[{i}] '{name}'"
        target = ck.string(raw, "target", where)
        ck.target(target, where)
        values = ck.strings(raw.get("values"), f"{where}.values")
        labels = raw.get("labels", {})
        if not isinstance(labels, dict):
            raise ck.fail(where, "'labels' must be a table of value = label")
        if name in [a.name for a in axes]:
            raise ck.fail(where, f"axis '{name}' is defined twice")
        also = {}
        for value, settings in ck.table(raw, "also", where).items():
            if value not in values:
                raise ck.fail(f"{where}.also", f"'{value}' is not one of the axis's values")
            if not isinstance(settings, dict):
                raise ck.fail(f"{where}.also.{value}", "must be a table of target = value")
            also[value] = ck.targets(settings, f"{where}.also.{value}")
        labels = {str(k): str(v) for k, v in labels.items()}
        raw_values = raw["values"] if isinstance(raw["values"], list) else [raw["values"]]
        typed = {str(v): v for v in raw_values}
        axes.append(Axis(name, target, values, labels, also, typed))

    quick = ck.table(data, "quick", "[quick]")
    quick_set_raw = ck.table(quick, "set", "[quick]")
    quick_set = ck.targets(quick_set_raw, "[quick].set")
    quick_values = {}
    for name, vals in ck.table(quick, "values", "[quick]").items():
        if name not in [a.name for a in axes]:
            raise ck.fail("[quick].values", f"unknown axis '{name}'")
        quick_values[name] = ck.strings(vals, f"[quick].values.{name}")

    names = [a.name for a in axes]
    rep = ck.table(data, "report", "[report]")
    rep = {
        "tables": rep.get("tables"),
        "rows": rep.get("rows", names[:-1]),
        "columns": rep.get("columns", names[-1]),
        "quantity": ck.strings(rep.get("quantity", "total"), "[report].quantity"),
    }
    for q in rep["quantity"]:
        if (why := check_quantity(q)) is not None:
            raise ck.fail("[report].quantity", why)
    fig = ck.table(data, "figure", "[figure]")
    fig_quantity = ck.string(fig, "quantity", "[figure]", default="total")
    if fig.get("kind", "lines") not in ("lines", "bars", "timeline"):
        raise ck.fail("[figure].kind", f"'{fig.get('kind')}' is not one of lines, bars, timeline")
    if fig.get("kind") == "bars" and not all(fig.get(k) for k in ("columns", "series", "x")):
        raise ck.fail("[figure]", "kind = \"bars\" needs 'columns', 'series' and 'x'")
    if (why := check_quantity(fig_quantity)) is not None:
        raise ck.fail("[figure].quantity", why)
    for section, cfg in (("[report]", rep), ("[figure]", fig)):
        for key, value in cfg.items():
            if key in ("quantity", "kind", "window_s"):
                continue
            for n in value if isinstance(value, list) else [value]:
                if n and n not in names:
                    raise ck.fail(
                        f"{section}.{key}", f"unknown axis '{n}'; axes: {', '.join(names)}"
                    )

    calibrations = []
    for i, raw in enumerate(ck.tables(data, "calibration", "[[calibration]]")):
        where = f"calibration[{i}]"
        cid = ck.string(raw, "id", where, default=f"#{i + 1}")
        where = f"calibration '{cid}'"
        reduce = ck.string(raw, "reduce", where, default="mean")
        if reduce not in REDUCERS:
            raise ck.fail(f"{where}.reduce", f"'{reduce}' is not one of {', '.join(REDUCERS)}")
        quantity = ck.string(raw, "quantity", where, default="total")
        if (why := check_quantity(quantity)) is not None:
            raise ck.fail(f"{where}.quantity", why)
        ref = ck.number(raw, "reference_mb_s", where, default=None)
        ref_any = ck.number(raw, "reference", where, default=None)
        if ref is not None and ref_any is not None:
            raise ck.fail(where, "give 'reference' or 'reference_mb_s', not both")
        ref = ref if ref is not None else ref_any
        ratio_to = raw.get("ratio_to")
        at_least = ck.number(raw, "at_least", where, default=None)
        at_most = ck.number(raw, "at_most", where, default=None)
        if ref is not None and ratio_to is not None:
            raise ck.fail(
                where, "give at most one of 'reference' ('reference_mb_s') and 'ratio_to'"
            )
        if ref is None and at_least is None and at_most is None:
            raise ck.fail(
                where,
                "give 'reference' ('reference_mb_s'), or 'at_least' and/or 'at_most' "
                "(bounds on the value, or on its ratio to a 'ratio_to' selection)",
            )
        if ref is not None and (at_least is not None or at_most is not None):
            raise ck.fail(
                where, "'at_least'/'at_most' go with 'ratio_to' or alone, not with a reference"
            )
        cal_tol = ck.number(raw, "tolerance", where, default=None)
        calibrations.append(
            Calibration(
                id=cid,
                description=ck.string(raw, "description", where),
                where=ck.selection(raw.get("where", {}), f"{where}.where", axes),
                exclude=ck.selection(raw.get("exclude", {}), f"{where}.exclude", axes),
                reduce=reduce,
                quantity=quantity,
                reference_mb_s=None if ref is None else float(ref),
                ratio_to=None
                if ratio_to is None
                else ck.selection(ratio_to, f"{where}.ratio_to", axes),
                at_least=at_least,
                at_most=at_most,
                tolerance=None if cal_tol is None else float(cal_tol),
            )
        )

    vm = exp.get("vm")
    if exp.get("job") not in (None, "") and not isinstance(exp.get("job"), str):
        raise ck.fail(
            "[experiment]", f"'job' must be a fio job file path, not {short_repr(exp['job'])}"
        )
    if vm is not None and not isinstance(vm, str):
        raise ck.fail("[experiment]", f"'vm' must be a VM name, not {short_repr(vm)}")
    measure = ck.string(exp, "measure", "[experiment]", default=None)
    tolerance = float(ck.number(exp, "tolerance", "[experiment]", default=0.15))
    if tolerance < 0:
        raise ck.fail("[experiment]", f"'tolerance' must be >= 0, not {tolerance}")
    if not exp.get("job") and (measure is not None or vm is not None):
        raise ck.fail(
            "[experiment]",
            "'measure' and 'vm' need a 'job'; without one every VM runs its own workload",
        )
    return Experiment(
        path=path,
        name=ck.string(exp, "name", "[experiment]"),
        title=ck.string(exp, "title", "[experiment]", default=""),
        reference=ck.string(exp, "reference", "[experiment]", default=""),
        stack_path=base / ck.string(exp, "stack", "[experiment]"),
        job_path=base / exp["job"] if exp.get("job") else None,
        vm=str(vm) if vm is not None else None,
        measure=measure,
        seed=ck.integer(exp, "seed", "[experiment]", 0, 2**64 - 1, default=1),
        tolerance=tolerance,
        axes=axes,
        quick_set=quick_set,
        quick_values=quick_values,
        report=rep,
        figure=fig,
        calibrations=calibrations,
    )


# --- editing the stack and the job -------------------------------------------------------


def _is_index(key: str) -> bool:
    """An array index in a stack target: ASCII digits, short enough to be an int."""
    return key.isascii() and key.isdigit() and len(key) <= 9


def set_stack_value(stack: dict[str, Any], path: str, value: Any, source: str) -> None:
    """Set `path` (`volume.0.layout`) in a parsed stack; the parent must exist.

    A `*` in place of an index sets the key in every element of that array (`vm.*.workload`).
    """
    keys = path.split(".")
    if "*" in keys:
        star = keys.index("*")
        head, tail = ".".join(keys[:star]), ".".join(keys[star + 1 :])
        arr: Any = stack
        for key in keys[:star]:
            if isinstance(arr, dict) and key in arr:
                arr = arr[key]
            elif isinstance(arr, list) and _is_index(key) and int(key) < len(arr):
                arr = arr[int(key)]
            else:
                arr = None
                break
        if not isinstance(arr, list) or not tail:
            raise VmioError(f"{source}: stack target '{path}': '{head}' is not an array of tables")
        for i in range(len(arr)):
            set_stack_value(stack, f"{head}.{i}.{tail}", value, source)
        return
    node: Any = stack
    for depth, key in enumerate(keys[:-1]):
        here = ".".join(keys[: depth + 1])
        if isinstance(node, list):
            if not _is_index(key) or int(key) >= len(node):
                raise VmioError(
                    f"{source}: stack target '{path}': '{here}' is not an index of a "
                    f"{len(node)}-element array"
                )
            node = node[int(key)]
        elif isinstance(node, dict):
            if key not in node:
                raise VmioError(f"{source}: stack target '{path}': the stack has no '{here}'")
            node = node[key]
        else:
            raise VmioError(f"{source}: stack target '{path}': '{here}' is a value, not a table")
    last = keys[-1]
    if isinstance(node, list):
        if not _is_index(last) or int(last) >= len(node):
            raise VmioError(f"{source}: stack target '{path}': no element '{last}'")
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise VmioError(f"{source}: stack target '{path}': parent is a value, not a table")


def set_job_option(text: str, option: str, value: str) -> str:
    """Set fio option `option=value` in a job file.

    `option` alone sets it in every section that has it; when no section has it, it is added
    as the first line of `[global]` (created at the top if there is none). `section.option`
    sets it in that section only (added after its header when missing). Comments, other
    options and, unless a line is added, line numbers are kept.
    """
    section = None
    if "." in option:
        section, option = option.split(".", 1)
    lines = text.splitlines()
    found = False
    global_at = None
    section_at = None
    current = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1].strip()
            if current == "global" and global_at is None:
                global_at = i
            if current == section and section_at is None:
                section_at = i
            continue
        if not stripped or stripped[0] in ";#":
            continue
        if section is not None and current != section:
            continue
        key = stripped.split("=", 1)[0].strip()
        if key == option:
            indent = line[: len(line) - len(line.lstrip())]
            lines[i] = f"{indent}{option}={value}"
            found = True
    if not found:
        if section is not None:
            if section_at is None:
                raise VmioError(f"job target '{section}.{option}': the job file has no [{section}]")
            lines.insert(section_at + 1, f"{option}={value}")
        elif global_at is None:
            lines[0:0] = ["[global]", f"{option}={value}", ""]
        else:
            lines.insert(global_at + 1, f"{option}={value}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PointInput:
    """The files one point is simulated from."""

    point: Point
    stack_text: str
    stack_path: str
    job_text: str | None
    """None: the stack's per-VM workloads, edited by `job_settings`."""
    job_path: str | None
    stack_settings: tuple[tuple[str, Any], ...]
    job_settings: tuple[tuple[str | None, str, str], ...] = ()
    """(VM or None for every VM, option, value) edits of the per-VM workload files."""


def point_inputs(exp: Experiment, quick: bool = False) -> list[PointInput]:
    """The edited stack and job text of every point of the grid, in grid order."""
    stack_source = read_text(exp.stack_path, "stack file")
    base_stack = parse_toml(stack_source, exp.stack_path)
    base_job = None if exp.job_path is None else read_text(exp.job_path, "fio job file")
    fixed = dict(exp.quick_set) if quick else {}
    axes = {a.name: a for a in exp.axes}
    out = []
    for point in exp.points(quick):
        settings = {}
        for name, value in point.coords:
            axis = axes[name]
            settings[axis.target] = axis.typed.get(value, value) if axis.kind == "stack" else value
            settings.update(axes[name].also.get(value, {}))
        settings.update(fixed)  # --quick's settings win
        stack = copy.deepcopy(base_stack)
        job = base_job
        stack_settings = []
        job_settings = []
        for target, value in settings.items():
            kind, _, tpath = target.partition(":")
            if kind == "stack":
                set_stack_value(stack, tpath, value, str(exp.path))
                stack_settings.append((tpath, value))
            elif job is not None:
                if _job_vm(kind):
                    raise VmioError(
                        f"{exp.path}: target '{target}': 'job[<vm>]:' needs an experiment "
                        "without 'job' (each VM running its own workload); use 'job:'"
                    )
                job = set_job_option(job, tpath, str(value))
            else:
                job_settings.append((_job_vm(kind), tpath, str(value)))
        edited = ", ".join(f"{k}={v}" for k, v in stack_settings)
        out.append(
            PointInput(
                point=point,
                stack_text=tomli_w.dumps(stack),
                stack_path=f"{exp.stack_path} (as set by the study: {edited})"
                if edited
                else str(exp.stack_path),
                job_text=job,
                job_path=None if exp.job_path is None else str(exp.job_path),
                stack_settings=tuple(stack_settings),
                job_settings=tuple(job_settings),
            )
        )
    return out


# --- running -----------------------------------------------------------------------------


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

    def value_mb_s(self, point: Point, quantity: str = "total") -> float:
        """The bandwidth of a point in MB/s (read + write for `total`)."""
        for pr in self.points:
            if pr.point == point:
                return quantity_value(pr.result, quantity)
        raise KeyError(point)

    def tidy_table(self):  # -> pyarrow.Table
        rows = []
        for pr in self.points:
            rows += results.tidy_rows(pr.result, dict(pr.point.coords), self.experiment.name)
        return results.tidy_table(rows, [a.name for a in self.experiment.axes])


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
    if not chosen:
        return None, 0
    return REDUCERS[reduce](chosen), len(chosen)


def _matches_any(point: Point, selection: Mapping[str, tuple[str, ...]]) -> bool:
    values = dict(point.coords)
    return any(values.get(k) in vs for k, vs in selection.items())


def evaluate_calibration(exp: Experiment, points: Sequence[PointResult]) -> list[CalibrationRow]:
    """Compare the simulated points with every `[[calibration]]` entry."""
    rows = []
    for c in exp.calibrations:
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


PARTIAL_DIR = ".vmio-partial"
"""In an output directory, the state of a run not finished yet: `study` (the experiment's
name) and one `<point>.key` per finished point (the hash of its effective inputs, see
`point_key`); removed when every output file is written."""


def _workload_jobs(exp: Experiment, inp: PointInput) -> list[tuple[str, str, str]]:
    """The `(vm, job_text, job_path)` a point without a job file runs: the stack's per-VM
    workloads, edited by the point's job settings."""
    # Workload files are found next to the stack file, not its display name.
    jobs = stack_workloads(inp.stack_text, exp.stack_path)
    if not jobs:
        raise VmioError(
            f"{exp.path}: [experiment] has no 'job' and no [[vm]] of the stack has a workload"
        )
    names = {vm for vm, _, _ in jobs}
    for target_vm, _, _ in inp.job_settings:
        if target_vm is not None and target_vm not in names:
            raise VmioError(
                f"{exp.path}: target 'job[{target_vm}]:': no VM '{target_vm}' with a "
                f"workload in the stack (VMs: {', '.join(sorted(map(str, names)))})"
            )
    for i, (vm, text, path) in enumerate(jobs):
        for target_vm, option, value in inp.job_settings:
            if target_vm is None or target_vm == vm:
                text = set_job_option(text, option, value)
        jobs[i] = (vm, text, path)
    return jobs


def point_key(
    exp: Experiment, inp: PointInput, seed: int, jobs: Sequence[tuple[str, str, str]] | None
) -> str:
    """A hash of everything a point's result depends on: the effective stack and job (or
    per-VM workload) texts, the seed, the VM, the measured job, the axis values and vmio's
    version. A stored point is reused only when its key is the same."""
    import hashlib

    from vmio import __version__

    doc = {
        "vmio": __version__,
        "coords": [list(c) for c in inp.point.coords],
        "stack": inp.stack_text,
        "stack_path": inp.stack_path,
        "job": inp.job_text,
        "job_path": inp.job_path,
        "workloads": [list(j) for j in jobs] if jobs is not None else None,
        "seed": seed,
        "vm": exp.vm,
        "measure": exp.measure,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()


def _measured(exp: Experiment, result: dict[str, Any]) -> dict[str, Any]:
    if exp.measure is None:
        return result
    # Only the measured job counts (others, like fio's file layout, prepare it); the point's
    # JSON file keeps every job.
    measured = [j for j in result["jobs"] if j.get("jobname") == exp.measure]
    if not measured:
        raise VmioError(
            f"{exp.path}: [experiment] measure: the job file has no job '{exp.measure}'"
        )
    return {**result, "jobs": measured}


def _json_text(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _stored(store: Path, slug: str, key: str) -> str | None:
    """A finished point's JSON text from `store`, when its key is `key`."""
    try:
        if (store / PARTIAL_DIR / f"{slug}.key").read_text(encoding="utf-8") != key:
            return None
        return (store / "json" / f"{slug}.json").read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return None


def _store(store: Path, slug: str, key: str, text: str) -> None:
    """Save a finished point: its JSON, then its key (each written to a temporary name and
    renamed; a key never names a JSON file it was not written with)."""
    keyfile = store / PARTIAL_DIR / f"{slug}.key"
    keyfile.unlink(missing_ok=True)
    results.atomic_write(store / "json" / f"{slug}.json", text)
    results.atomic_write(keyfile, key)


def run_study(
    exp: Experiment,
    *,
    seed: int | None = None,
    quick: bool = False,
    parallel: int = 1,
    progress: TextIO | None = None,
    progress_tty: bool | None = None,
    store: Path | None = None,
    on_point: Callable[[Point], None] | None = None,
) -> StudyResult:
    """Simulate every point of the experiment's grid; results come back in grid order.

    `parallel` points run at once in threads (the native simulator releases the GIL); the
    order of completion never reaches the results. Progress goes to `progress` (stderr by
    default). With `store` (an output directory prepared by `prepare_output_dir`), each
    finished point is saved there at once (`json/<point>.json` and its key), and points
    saved by an earlier, interrupted run with the same key are reused instead of simulated.
    `on_point` is called (in grid order) after each point is done.
    """
    seed = exp.seed if seed is None else seed
    inputs = point_inputs(exp, quick)
    jobs = [None if inp.job_text is not None else _workload_jobs(exp, inp) for inp in inputs]
    keys = [point_key(exp, inp, seed, j) for inp, j in zip(inputs, jobs, strict=True)]
    reused: dict[int, str] = {}
    if store is not None:
        for i, (inp, key) in enumerate(zip(inputs, keys, strict=True)):
            if (text := _stored(store, inp.point.slug, key)) is not None:
                reused[i] = text
    stream = progress if progress is not None else sys.stderr
    if reused:
        print(
            f"vmio: study {exp.name}: resuming: {len(reused)} of {len(inputs)} points done",
            file=stream,
            flush=True,
        )
    bar = Progress(
        len(inputs) - len(reused), title=f"study {exp.name}", stream=progress, tty=progress_tty
    )

    def one(i: int) -> PointResult:
        inp = inputs[i]
        if i in reused:
            text = reused[i]
        elif inp.job_text is None:
            text = native().simulate_many(inp.stack_text, inp.stack_path, jobs[i], seed)
        else:
            text = simulate_text(
                inp.stack_text, inp.stack_path, inp.job_text, inp.job_path or "", seed, exp.vm
            )
        result = _measured(exp, json.loads(text))
        if store is not None and i not in reused:
            text = _json_text(text)
            _store(store, inp.point.slug, keys[i], text)
        return PointResult(inp.point, text, result)

    def finished(i: int) -> None:
        if i not in reused:
            bar.advance(inputs[i].point.label)
        if on_point is not None:
            on_point(inputs[i].point)

    done: list[PointResult] = []
    if parallel <= 1:
        for i in range(len(inputs)):
            done.append(one(i))
            finished(i)
    else:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(one, i) for i in range(len(inputs))]
            try:
                for i, fut in enumerate(futures):
                    done.append(fut.result())
                    finished(i)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    bar.close()

    notes: list[str] = []
    for pr in done:
        for line in report.result_notes(pr.result, str(exp.job_path or exp.stack_path)):
            if line not in notes:
                notes.append(line)
    return StudyResult(
        experiment=exp,
        seed=seed,
        quick=quick,
        points=done,
        calibration=evaluate_calibration(exp, done),
        notes=notes,
    )


# --- reporting ---------------------------------------------------------------------------


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
        header = ["/".join(a.name for a in rows_axes), *col_axis.values]
        body = []
        for combo in itertools.product(*(a.values for a in rows_axes)):
            cells = ["/".join(combo)]
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
    header = ["figure", ref_head, "simulated", "error %", "status", "description"]
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
        f"experiment {exp.path.name}, stack {exp.stack_path.name}, "
        + (f"job {exp.job_path.name}" if exp.job_path else "every VM's own workload"),
    ]
    return "\n".join(lines) + "\n\n" + grid_tables(res) + "\n\n" + calibration_table(res) + "\n"


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


def unfinished_run(out: Path, name: str) -> bool:
    """Whether `out` holds an unfinished run (killed, interrupted) of study/experiment `name`."""
    try:
        return (out / PARTIAL_DIR / "study").read_text(encoding="utf-8") == name
    except (OSError, UnicodeError):
        return False


def _remove_temp_files(out: Path) -> None:
    for d in (out, out / "json", out / PARTIAL_DIR):
        if d.is_dir():
            for p in d.glob(f"{results.TMP_PREFIX}*"):
                p.unlink(missing_ok=True)


def prepare_output_dir(out: Path, force: bool, name: str | None = None) -> Path:
    """Create `out`, refusing a non-empty directory unless `force`.

    With `force`, only the files a study writes (and its `json/` directory) are replaced;
    anything else in the directory is left alone. With `name`, the directory is marked as
    an unfinished run of that study until `finish_output_dir`, and an unfinished run of the
    same study is accepted without `force`: its finished points are reused (`run_study`
    with `store`).
    """
    if out.exists() and not out.is_dir():
        raise VmioError(f"output directory '{out}' exists and is not a directory")
    resume = name is not None and not force and unfinished_run(out, name)
    if out.is_dir() and any(out.iterdir()) and not resume:
        if not force:
            raise VmioError(
                f"output directory '{out}' is not empty; pass --force to replace the "
                "results in it, or --out DIR to write elsewhere"
            )
        for fname in OUTPUT_FILES:
            (out / fname).unlink(missing_ok=True)
        for dname in ("json", PARTIAL_DIR):
            if (out / dname).is_dir():
                shutil.rmtree(out / dname)
    out.mkdir(parents=True, exist_ok=True)
    _remove_temp_files(out)
    if name is not None:
        (out / "json").mkdir(exist_ok=True)
        (out / PARTIAL_DIR).mkdir(exist_ok=True)
        results.atomic_write(out / PARTIAL_DIR / "study", name)
    return out


def finish_output_dir(out: Path) -> None:
    """Mark `out` finished: its unfinished-run state goes."""
    shutil.rmtree(out / PARTIAL_DIR, ignore_errors=True)


def next_free_dir(base: Path, name: str | None = None) -> Path:
    """`base` if it is absent or empty (or an unfinished run of study `name`), else the first
    such `base-2`, `base-3`…"""
    candidate = base
    n = 1
    while candidate.exists() and (not candidate.is_dir() or any(candidate.iterdir())):
        if name is not None and unfinished_run(candidate, name):
            break
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def write_outputs(res: StudyResult, out: Path) -> None:
    """Write results.csv/.parquet, calibration.csv, tables.txt, figure.png and json/, each
    file atomically (a temporary name in the same directory, renamed)."""
    from vmio import plot  # matplotlib is slow to import; only needed here

    jdir = out / "json"
    jdir.mkdir(exist_ok=True)
    slugs = set()
    for pr in res.points:
        text = _json_text(pr.json_text)
        path = jdir / f"{pr.point.slug}.json"
        slugs.add(path.name)
        try:
            same = path.read_text(encoding="utf-8") == text
        except (OSError, UnicodeError):
            same = False
        if not same:
            results.atomic_write(path, text)
    for path in jdir.glob("*.json"):  # points of an earlier grid of a resumed run
        if path.name not in slugs:
            path.unlink()
    results.write_tidy(out, res.tidy_table())
    results.write_csv(out / "calibration.csv", calibration_records(res), CALIBRATION_COLUMNS)
    results.atomic_write(out / "tables.txt", summary_text(res))
    kind = res.experiment.figure.get("kind")
    tmp = results.temp_path(out / "figure.png")
    try:
        if kind == "bars":
            plot.study_bars(res, tmp)
        elif kind == "timeline":
            plot.study_timeline(res, tmp)
        else:
            plot.study_figure(res, tmp)
        os.replace(tmp, out / "figure.png")
    finally:
        tmp.unlink(missing_ok=True)


def default_parallelism() -> int:
    """Points simulated at once by default: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def bs_bytes(value: str) -> int:
    """Bytes of a block-size axis value (for the log2 axis of the figure)."""
    return parse_size(value)
