"""Experiment and study files: the grid of axes, the calibration figures, and their checks.

An experiment file (TOML, see `studies/volumes-cache/experiment.toml` for the annotated
format) names a stack file, a fio job file and a list of axes. Without a job file (no `job`,
or `job = ""`) every point runs the stack's own per-VM `workload` files at once. Each axis has
a *target* (`stack:<key.path>`, `job:<fio option>`, `job[<vm>]:<fio option>`; how each edits
its file: `vmio.study.runner`). The quantities a report, a figure or a calibration names are those
of `vmio.study.quantities`.

A *study* is one experiment file (`experiment.toml`) or several parts: a `study.toml` in the
study directory lists them (`[study] name, title, parts = ["a.toml", ...]`); each part is an
experiment with its own grid, tables, figure and calibration, written to its own
subdirectory.

The grid is the product of the axes in file order, the last axis varying fastest. Its size
is counted from the axes' lengths (nothing is expanded to count it) and a grid of more than
`max_points` points (`[experiment] max_points`, `vmio study --max-points`, default
`MAX_POINTS`) is refused before any point runs; the points are then generated one at a
time (`Experiment.iter_points`).

Every check names the file and the field: `<file>: <where>: <what is wrong>`. A key a
section does not know is refused with the keys it accepts (and the closest one, when a
key looks mistyped), as stack files do.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio.sim import VmioError, check_path, parse_toml, read_text, short_repr, shown_text
from vmio.study.quantities import REDUCERS, check_quantity

BUILTIN_STUDIES = Path(__file__).resolve().parent.parent / "studies"
"""Where the built-in studies live (shipped inside the package; `studies/` in a checkout)."""


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

    def text(self, value: str) -> str:
        """A value as figures and tables show it: its label, else `name=value`
        (`iodepth=4`), so that a value is never shown without what it is."""
        label = self.label(value)
        return label if label != value or not self.name else f"{self.name}={value}"


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
    bench_fio_layout: bool = False
    """Also write every point's JSON in bench-fio's layout (`vmio.study.benchfio`)."""
    max_points: int | None = None
    """The largest grid this experiment runs (None: `MAX_POINTS`)."""

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

    def grid_size(self, quick: bool = False) -> int:
        """The number of points of the grid: the product of the axes' lengths."""
        return math.prod(len(a.values) for a in self.axes_for(quick))

    def check_grid(self, quick: bool = False, max_points: int | None = None) -> int:
        """The grid's size, refused (`VmioError`) over `max_points` (default: the
        experiment's `max_points`, else `MAX_POINTS`)."""
        limit = max_points or self.max_points or MAX_POINTS
        n = self.grid_size(quick)
        if n > limit:
            sizes = " x ".join(f"{len(a.values)} {a.name}" for a in self.axes_for(quick))
            raise VmioError(
                f"{self.path}: the grid has {n:,} points ({sizes}), over the limit of "
                f"{limit:,}; raise it with [experiment] max_points or --max-points, or "
                "sweep fewer values"
            )
        return n

    def iter_points(self, quick: bool = False) -> Iterator[Point]:
        """The points of the grid, one at a time, in grid order (unbounded: see `points`)."""
        axes = self.axes_for(quick)
        names = [a.name for a in axes]
        for combo in itertools.product(*(a.values for a in axes)):
            yield Point(tuple(zip(names, combo, strict=True)))

    def points(self, quick: bool = False, max_points: int | None = None) -> list[Point]:
        """The points of the grid, in grid order, once `check_grid` accepts its size."""
        self.check_grid(quick, max_points)
        return list(self.iter_points(quick))


MAX_POINTS = 10_000
"""The default bound on a study's grid (points), checked before anything runs."""

EXPERIMENT_KEYS = (
    "name",
    "title",
    "reference",
    "stack",
    "job",
    "vm",
    "measure",
    "seed",
    "tolerance",
    "bench_fio_layout",
    "max_points",
)
AXIS_KEYS = ("name", "target", "values", "labels", "also")
QUICK_KEYS = ("set", "values")
REPORT_KEYS = ("tables", "rows", "columns", "quantity", "gain", "iozone")
FIGURE_KEYS = ("kind", "quantity", "rows", "columns", "series", "x", "gain", "window_s")
CALIBRATION_KEYS = (
    "id",
    "description",
    "where",
    "exclude",
    "reduce",
    "quantity",
    "reference",
    "reference_mb_s",
    "ratio_to",
    "at_least",
    "at_most",
    "tolerance",
)


def job_vm(kind: str) -> str | None:
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

    def known_keys(self, data: Mapping[str, Any], accepted: Sequence[str], where: str) -> None:
        """Refuse a key of `data` not in `accepted`: the accepted keys listed, and the
        closest one when the key looks like a misspelling of it."""
        for key in data:
            if key in accepted:
                continue
            close = difflib.get_close_matches(str(key), accepted, n=1, cutoff=0.75)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise self.fail(
                f"{where}.{shown_text(str(key), 40)}",
                f"unknown key; {hint}accepted: {', '.join(accepted)}",
            )

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

    def axis_name(
        self, data: Mapping[str, Any], key: str, where: str, names: Sequence[str], default: Any
    ) -> Any:
        """An axis named by `key` ("" or absent: `default`)."""
        value = data.get(key, "")
        if value == "":
            return default
        if not isinstance(value, str) or value not in names:
            raise self.fail(
                f"{where}.{key}",
                f"must be the name of one axis ({', '.join(names)}), not {short_repr(value)}",
            )
        return value

    def axis_names(
        self, data: Mapping[str, Any], key: str, where: str, names: Sequence[str], default: Any
    ) -> list[str]:
        """A list of axis names (one name alone: a list of it; absent: `default`)."""
        if key not in data:
            return list(default)
        value = data[key]
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(
            isinstance(v, str) and v in names for v in values
        ):
            raise self.fail(
                f"{where}.{key}",
                f"must be a list of axis names ({', '.join(names)}), not {short_repr(value)}",
            )
        return values

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
        if not (kind in ("stack", "job") or job_vm(kind)) or not tpath:
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


FIGURE_KINDS = ("lines", "bars", "timeline", "pdc", "iozone")
"""`[figure] kind`: lines (the S0 grid), bars, timeline (bandwidth over time), pdc (the S3
figures: gains, detection over time, journal traffic; `vmio.study.pdc`), iozone (S2: KB/s
per record size, test and target, and in % of a baseline; `vmio.study.iozone`)."""

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
    ck.known_keys(exp, EXPERIMENT_KEYS, "[experiment]")
    base = path.parent

    axes: list[Axis] = []
    raw_axes = ck.tables(data, "axis", "[[axis]]")
    if not raw_axes:
        raise ck.fail("[[axis]]", "an experiment needs at least one [[axis]]")
    for i, raw in enumerate(raw_axes):
        where = f"axis[{i}]"
        ck.known_keys(raw, AXIS_KEYS, where)
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
    ck.known_keys(quick, QUICK_KEYS, "[quick]")
    quick_set_raw = ck.table(quick, "set", "[quick]")
    quick_set = ck.targets(quick_set_raw, "[quick].set")
    quick_values = {}
    for name, vals in ck.table(quick, "values", "[quick]").items():
        if name not in [a.name for a in axes]:
            raise ck.fail("[quick].values", f"unknown axis '{name}'")
        quick_values[name] = ck.strings(vals, f"[quick].values.{name}")

    names = [a.name for a in axes]
    rep = ck.table(data, "report", "[report]")
    ck.known_keys(rep, REPORT_KEYS, "[report]")

    def axis_over(key: str) -> tuple[str, str] | None:
        """`[report] key = { axis, over }`: an axis and one of its values, or None."""
        if key not in rep:
            return None
        raw = ck.table(rep, key, "[report]")
        name = ck.string(raw, "axis", f"[report].{key}")
        if name not in names:
            raise ck.fail(
                f"[report].{key}.axis", f"unknown axis '{name}'; axes: {', '.join(names)}"
            )
        over = str(raw.get("over", ""))
        known = next(a for a in axes if a.name == name).values
        if over not in known:
            raise ck.fail(
                f"[report].{key}.over",
                f"'{over}' is not a value of axis '{name}' ({', '.join(known)})",
            )
        return (name, over)

    gain = axis_over("gain")
    iozone_cfg = axis_over("iozone")
    rep = {
        "tables": ck.axis_name(rep, "tables", "[report]", names, default=None),
        "rows": ck.axis_names(rep, "rows", "[report]", names, default=names[:-1]),
        "columns": ck.axis_name(rep, "columns", "[report]", names, default=names[-1]),
        "quantity": ck.strings(rep.get("quantity", "total"), "[report].quantity"),
        "gain": gain,
        "iozone": iozone_cfg,
    }
    for q in rep["quantity"]:
        if (why := check_quantity(q)) is not None:
            raise ck.fail("[report].quantity", why)
    fig = ck.table(data, "figure", "[figure]")
    ck.known_keys(fig, FIGURE_KEYS, "[figure]")
    fig_quantity = ck.string(fig, "quantity", "[figure]", default="total")
    if fig.get("kind", "lines") not in FIGURE_KINDS:
        raise ck.fail(
            "[figure].kind", f"'{fig.get('kind')}' is not one of {', '.join(FIGURE_KINDS)}"
        )
    if fig.get("kind") == "bars" and not all(fig.get(k) for k in ("columns", "series", "x")):
        raise ck.fail("[figure]", "kind = \"bars\" needs 'columns', 'series' and 'x'")
    if fig.get("kind") == "pdc" and not (all(fig.get(k) for k in ("series", "x")) and gain):
        raise ck.fail("[figure]", "kind = \"pdc\" needs 'series', 'x' and a [report] gain")
    if fig.get("kind") == "iozone" and not iozone_cfg:
        raise ck.fail("[figure]", 'kind = "iozone" needs a [report] iozone = { axis, over }')
    if (why := check_quantity(fig_quantity)) is not None:
        raise ck.fail("[figure].quantity", why)
    for key in ("rows", "columns", "series", "x"):
        ck.axis_name(fig, key, "[figure]", names, default=None)
    if "gain" in fig and not isinstance(fig["gain"], bool):
        raise ck.fail("[figure].gain", f"must be true or false, not {short_repr(fig['gain'])}")
    ck.integer(fig, "window_s", "[figure]", 1, 86400, default=5)

    calibrations = []
    for i, raw in enumerate(ck.tables(data, "calibration", "[[calibration]]")):
        where = f"calibration[{i}]"
        ck.known_keys(raw, CALIBRATION_KEYS, where)
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
    bench_fio_layout = exp.get("bench_fio_layout", False)
    if not isinstance(bench_fio_layout, bool):
        raise ck.fail(
            "[experiment].bench_fio_layout",
            f"must be true or false, not {short_repr(bench_fio_layout)}",
        )
    max_points = (
        ck.integer(exp, "max_points", "[experiment]", 1, (1 << 40) - 1, default=MAX_POINTS)
        if "max_points" in exp
        else None
    )
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
        bench_fio_layout=bench_fio_layout,
        max_points=max_points,
    )
