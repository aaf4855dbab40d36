"""`vmio compare REAL SIM`: the simulator's predictions against measured runs, point by point.

Sources: fio's JSON output (fio 3.33 stat.c: `show_thread_status_json` writes one object per
job under `jobs` with `jobname` and `job options`; `add_ddir_status_json` one object per
direction `read`/`write`/`trim` with `bw_bytes`, `iops`, `total_ios`, `clat_ns` and `lat_ns`
(`lat` = submission + completion, fio's HOWTO "lat"), percentiles keyed `"%f"`, e.g.
`"99.000000"`); `vmio sim --output-format json` writes the same shape, and a study's tidy
`results.csv` (vmio.results) one row per point and direction. The JSON is read by
vmio.results (`job_options`, `directions_of`, `direction_summary`).

Inputs (REAL and SIM alike), each one of:

```
DIR with results.csv    a study/experiment output: one point per row,
                        key = (axis columns, direction); the axis columns are the columns
                        before `rw` except study, engine, machine_json and every fixed tidy
                        column (seed, stack_json, job_options_json, the metrics)
FILE.json               fio's or vmio sim's JSON: key = (job, direction); jobs of one name
                        (numjobs without group_reporting) are summed into one point
DIR of *.json           key = (file, job, direction), file = the file's stem without a
                        `.repN` suffix: NAME.rep1.json, NAME.rep2.json... are repetitions of
                        one run, reduced to one point (below)
FILE.json of the image  scripts/real-images.py's figures (top-level `vmio_real_images`):
checks                  key = (point, direction), point = its `key` (part/image/aio/job/
                        state); as REAL its `runs` are the repetitions, as SIM its `sim`
                        figures (so `vmio compare F.json F.json` shows the recorded
                        prediction, and a re-predicted file as SIM this build's); these
                        figures have no p99 (shown "-")
```

A point's directions are those its job's `rw` exercises (`randrw`: read and write), so a
direction that did no I/O on one side still counts (its error is then -100 %).

Metrics per point (fio JSON | results.csv):

```
bandwidth     bw_bytes (bytes/s, all jobs of the point summed)
IOPS          iops
mean latency  lat_ns.mean weighted by I/O count | clat_mean_ns (results.csv has no lat)
p99 latency   clat_ns percentile 99 (largest job's) | clat_p99_ns
```

Repetitions: each metric of a repeated point is the median over its runs; the spread of
bandwidth and of mean latency is (max - min) / median (0 when the median is 0).

Matching and errors:

```
common    = keys in both REAL and SIM, in REAL's order (unmatched keys are listed, counted)
error(m)  = sim.m / real.m - 1                 (undefined, shown "-", when real.m = 0)
summary   = over the common points with a defined error, of |error|:
            median, p90 (linear interpolation between order statistics:
            q(p) = v[floor(h)] + (h - floor(h)) (v[floor(h)+1] - v[floor(h)]), h = p (n - 1))
```

Excluded: a REAL point whose JSON says `vmio.timing = "functional-only"` (vmio.real.engine's
guest mode under TCG: software emulation, its timings mean nothing) is left out of the rows,
the errors and the summary, and listed on one line before the summary with the reason; in a
study directory a row's JSON is `json/<slug>.json`, slug = its axis values joined by `-` (a
`/` in a value as `_`, vmio.study.experiment `Point.slug`), read for rows of engine `real`.

Summary line (the output's last line; `real spread` only when REAL has repetitions):

```
vmio compare: N points; bandwidth error median X %, p90 Y %; mean latency error median X %,
p90 Y %[; real spread median: bandwidth X %, mean latency Y %]
```

(one line; X, Y with one decimal, `n/a` when no point has a defined error).
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio import boundedjson, results
from vmio.fioreport import text_table
from vmio.sim import VmioError, read_text

INPUT = "compare input"
"""How errors name a file `vmio compare` reads; every one is read by `vmio.sim.read_text` (a
regular file of at most 16 MiB: a device or FIFO is refused, never read or waited on) and its
JSON parsed by `vmio.boundedjson` (nesting at most 64 deep)."""

Key = tuple[tuple[str, str], ...]
"""A point's identity: (column, value) pairs, e.g. (("job", "rr"), ("direction", "read"))."""


@dataclass(frozen=True)
class Metrics:
    """One point's figures; for repeated runs the medians, with the runs' spread."""

    bw_bytes: float
    iops: float
    lat_mean_ns: float
    clat_p99_ns: float
    runs: int = 1
    bw_spread: float | None = None
    """(max - min) / median of the runs' bandwidths; None for a single run."""
    lat_spread: float | None = None
    """(max - min) / median of the runs' mean latencies; None for a single run."""
    excluded: str | None = None
    """Why the point's timing is not compared (`timing_excluded`); None when it is."""


@dataclass(frozen=True)
class Metric:
    """A compared metric: its Metrics field, its names and the unit it is shown in."""

    short: str
    field: str
    title: str
    scale: float
    unit: str
    digits: int

    def value(self, m: Metrics) -> float:
        return float(getattr(m, self.field))

    def shown(self, m: Metrics) -> str:
        return f"{self.value(m) / self.scale:.{self.digits}f}"


METRICS = (
    Metric("bw", "bw_bytes", "bandwidth", 1e6, "MB/s", 1),
    Metric("iops", "iops", "IOPS", 1.0, "", 0),
    Metric("lat", "lat_mean_ns", "mean latency", 1e3, "us", 1),
    Metric("p99", "clat_p99_ns", "p99 latency", 1e3, "us", 1),
)
BW, _, LAT, _ = METRICS


@dataclass(frozen=True)
class Row:
    """A common point: both sides' metrics and the relative error of each metric."""

    key: Key
    real: Metrics
    sim: Metrics
    errors: dict[str, float | None]
    """Metric.short -> sim/real - 1, None when the real value is 0."""


@dataclass(frozen=True)
class Summary:
    points: int
    bw_median: float | None
    bw_p90: float | None
    lat_median: float | None
    lat_p90: float | None
    bw_spread_median: float | None
    """Median of the real points' bandwidth spreads; None without repetitions."""
    lat_spread_median: float | None


@dataclass(frozen=True)
class Comparison:
    rows: list[Row]
    unmatched_real: list[Key]
    unmatched_sim: list[Key]
    summary: Summary
    excluded: list[tuple[Key, str]] = field(default_factory=list)
    """REAL points left out of the rows, with the reason (`Metrics.excluded`)."""

    @property
    def repeated(self) -> bool:
        """Whether some real point is the median of several runs."""
        return any(r.real.runs > 1 for r in self.rows)


# --- loading --------------------------------------------------------------------------------

REP_RE = re.compile(r"^(?P<name>.+)\.rep(?P<n>[0-9]+)$")
RESULTS_CSV = "results.csv"
NOT_AXES_EXTRA = ("study", "engine", "machine_json")
"""Columns before `rw` in results.csv that are not axes (besides the fixed tidy columns)."""
CSV_METRICS = ("bw_bytes", "iops", "clat_mean_ns", "clat_p99_ns")
"""The results.csv columns of Metrics' fields, in their order."""
CSV_NEEDED = ("rw", "direction", *CSV_METRICS)
JSON_METRICS = ("bw_bytes", "iops", "lat_mean_ns", "clat_p99_ns")
"""The direction_summary keys of Metrics' fields, in their order."""


def load(path: Path, side: str = "real") -> dict[Key, Metrics]:
    """The points of a study directory, a fio JSON file, a directory of fio JSON files or an
    image checks' figures file; `side` ("real" or "sim") picks the figures of the last (module
    doc)."""
    if path.is_dir():
        if (path / RESULTS_CSV).is_file():
            return load_results_csv(path / RESULTS_CSV)
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise VmioError(f"'{path}' holds neither a {RESULTS_CSV} nor any *.json file")
        return _load_json_dir(files)
    if not path.exists():
        raise VmioError(f"'{path}': no such file or directory")
    if path.name == RESULTS_CSV:
        return load_results_csv(path)
    text = read_text(path, INPUT)
    if (doc := _images_figures(path, text)) is not None:
        return _images_points(path, doc, side)
    return _json_points(path, text)


IMAGES_TAG = "vmio_real_images"
"""The top-level key of scripts/real-images.py's figures (vmio.real.images)."""
IMAGES_FIELDS = ("bw_bytes", "iops", "lat_mean_ns")


def _images_figures(path: Path, text: str) -> dict[str, Any] | None:
    """The image checks' figures document `text` (of `path`), or None when it is something
    else."""
    head = text[:4096]
    if not head.lstrip().startswith("{") or f'"{IMAGES_TAG}"' not in head:
        return None
    doc = boundedjson.loads(text, f"'{path}'")
    return doc if isinstance(doc, dict) and IMAGES_TAG in doc else None


def _images_points(path: Path, doc: Mapping[str, Any], side: str) -> dict[Key, Metrics]:
    points: dict[Key, Metrics] = {}
    items = doc.get("points")
    if not isinstance(items, list):
        raise VmioError(f"'{path}': {IMAGES_TAG} figures without a \"points\" list")
    for i, p in enumerate(items):
        where = f"'{path}' points[{i}]"
        try:
            dirs = results.directions_of(str(p["job"]["rw"]))
            key: Key = (
                ("point", str(p["key"])),
                ("direction", dirs[0] if len(dirs) == 1 else "total"),
            )
            figures = p["runs"] if side == "real" else [p["sim"]]
            runs = [
                Metrics(
                    *(_in_range(f"{where} {f}", float(r[f]), f"{r[f]!r}") for f in IMAGES_FIELDS),
                    0.0,
                )
                for r in figures
            ]
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise VmioError(
                f"{where}: not an image check's point ({err!r} missing or bad)"
            ) from None
        if not runs:
            raise VmioError(f"{where}: no runs")
        if key in points:
            raise VmioError(f"{where}: point {key_text(key)} appears twice")
        points[key] = median_of(runs)
    return points


def _load_json_dir(files: Sequence[Path]) -> dict[Key, Metrics]:
    runs: dict[Key, list[Metrics]] = {}
    for path in files:
        match = REP_RE.match(path.stem)
        name = match.group("name") if match else path.stem
        for key, m in _json_points(path).items():
            runs.setdefault((("file", name), *key), []).append(m)
    return {key: median_of(ms) for key, ms in runs.items()}


def median_of(runs: Sequence[Metrics]) -> Metrics:
    """One point from repeated runs: each metric's median, and the spreads."""
    if len(runs) == 1:
        return runs[0]

    def med(metric: Metric) -> float:
        return statistics.median(metric.value(m) for m in runs)

    def spread(metric: Metric) -> float:
        values = [metric.value(m) for m in runs]
        mid = statistics.median(values)
        return (max(values) - min(values)) / mid if mid else 0.0

    return Metrics(
        *(med(metric) for metric in METRICS),
        runs=len(runs),
        bw_spread=spread(BW),
        lat_spread=spread(LAT),
        excluded=next((m.excluded for m in runs if m.excluded), None),
    )


FUNCTIONAL_ONLY = "functional-only"
"""`vmio.timing` of a real point whose timings mean nothing (a guest under TCG)."""


def timing_excluded(result: Mapping[str, Any]) -> str | None:
    """Why a fio JSON's timings are not compared (module doc), or None."""
    v = result.get("vmio")
    if isinstance(v, dict) and v.get("timing") == FUNCTIONAL_ONLY:
        return f"timing {FUNCTIONAL_ONLY} (a guest under {v.get('accel', '?')})"
    return None


def _json_points(path: Path, text: str | None = None) -> dict[Key, Metrics]:
    result = read_fio_json(path, text)
    why = timing_excluded(result)
    names: dict[str, list[int]] = {}
    for i, job in enumerate(result["jobs"]):
        names.setdefault(str(job.get("jobname", f"job{i}")), []).append(i)
    points: dict[Key, Metrics] = {}
    try:
        for name, indices in names.items():
            group = {"jobs": [result["jobs"][i] for i in indices]}
            rws = [results.job_options(result, i).get("rw", "read") for i in indices]
            for d in results.DIRECTIONS:
                if any(d in results.directions_of(rw) for rw in rws):
                    s = results.direction_summary(group, d)
                    where = f"'{path}' job {name} {d}:"
                    points[(("job", name), ("direction", d))] = Metrics(
                        *(
                            _in_range(f"{where} {f}", float(s[f]), f"{float(s[f]):g}")
                            for f in JSON_METRICS
                        ),
                        excluded=why,
                    )
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise VmioError(f"'{path}' is not a fio JSON output: bad value ({err})") from None
    return points


def read_fio_json(path: Path, text: str | None = None) -> dict[str, Any]:
    """A fio JSON output (fio's or vmio sim's), skipping lines fio may print before it;
    `text`: the file's text when already read."""
    if text is None:
        text = read_text(path, INPUT)
    start = 0 if text.startswith("{") else text.find("\n{") + 1
    result = boundedjson.loads(text, f"'{path}' is not a fio JSON output", start=start)
    jobs = result.get("jobs") if isinstance(result, dict) else None
    if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
        raise VmioError(f"'{path}' is not a fio JSON output (no \"jobs\" list of objects)")
    return result


def load_results_csv(path: Path) -> dict[Key, Metrics]:
    """The points of a study's tidy results.csv, read by column names."""
    not_axes = {*NOT_AXES_EXTRA, *(name for name, _ in results.TIDY_SCHEMA_FIXED)}
    try:
        with io.StringIO(read_text(path, INPUT), newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in CSV_NEEDED if c not in header]
            if missing:
                raise VmioError(
                    f"'{path}' is not a study results.csv: no column {', '.join(missing)}"
                )
            axes = [c for c in header[: header.index("rw")] if c not in not_axes]
            engines = {} if "engine" in header else _point_engines(path.parent / "points.csv")
            points: dict[Key, Metrics] = {}
            excluded: dict[str, str | None] = {}
            for row in reader:
                line = reader.line_num
                key = (*((a, row[a] or "") for a in axes), ("direction", row["direction"] or ""))
                if key in points:
                    raise VmioError(f"'{path}' line {line}: point {key_text(key)} appears twice")
                why = None
                if (row.get("engine") or engines.get(row.get("point") or "")) == "real":
                    slug = "-".join((row[a] or "").replace("/", "_") for a in axes)
                    if slug not in excluded:
                        excluded[slug] = _point_json_excluded(path.parent / "json" / f"{slug}.json")
                    why = excluded[slug]
                points[key] = Metrics(
                    *(_number(path, line, c, row[c]) for c in CSV_METRICS), excluded=why
                )
    except csv.Error as err:
        raise VmioError(f"'{path}' is not a study results.csv: {err}") from None
    return points


def _point_engines(path: Path) -> dict[str, str]:
    """Each point's engine from a study's points.csv beside its results.csv (the tidy table
    keeps a point's engine there, once); empty when there is none."""
    if not path.is_file():
        return {}
    try:
        with io.StringIO(read_text(path, INPUT), newline="") as f:
            return {row.get("point") or "": row.get("engine") or "" for row in csv.DictReader(f)}
    except csv.Error as err:
        raise VmioError(f"'{path}' is not a study points.csv: {err}") from None


def _point_json_excluded(path: Path) -> str | None:
    """`timing_excluded` of a study point's JSON; None when it is absent."""
    return timing_excluded(read_fio_json(path)) if path.is_file() else None


MAX_VALUE = 1e30
"""Figures must lie in 0..MAX_VALUE (far above any bandwidth, IOPS or latency in ns)."""


def _number(path: Path, line: int, column: str, text: str | None) -> float:
    try:
        value = float(text or "")
    except ValueError:
        value = math.nan
    return _in_range(f"'{path}' line {line}: {column}", value, repr(text))


def _in_range(where: str, value: float, shown: str) -> float:
    """`value`, or an error naming `where` unless it is a number in 0..MAX_VALUE."""
    if not 0 <= value <= MAX_VALUE:  # also refuses NaN
        raise VmioError(f"{where} {shown} is not a number in 0..{MAX_VALUE:g}")
    return value


# --- comparing --------------------------------------------------------------------------------


def relative_error(sim: float, real: float) -> float | None:
    """sim / real - 1; None when real is 0."""
    return sim / real - 1.0 if real else None


def quantile(values: Iterable[float], p: float) -> float | None:
    """The p-quantile (0..1) by linear interpolation between order statistics; None if empty."""
    v = sorted(values)
    if not v:
        return None
    h = p * (len(v) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (h - lo) * (v[hi] - v[lo])


def compare(real: Mapping[Key, Metrics], sim: Mapping[Key, Metrics]) -> Comparison:
    """Match the points of REAL and SIM by key; errors and summary of the common ones, but
    for REAL's excluded points (listed in `Comparison.excluded`)."""
    excluded = [(key, m.excluded) for key, m in real.items() if m.excluded is not None]
    if not any(key in sim for key in real):
        raise VmioError(
            f"REAL and SIM have no point in common (REAL: {len(real)} point(s), e.g. "
            f"{_first(real)}; SIM: {len(sim)} point(s), e.g. {_first(sim)})"
        )
    real = {key: m for key, m in real.items() if m.excluded is None}
    rows = [
        Row(
            key,
            m,
            sim[key],
            {
                metric.short: relative_error(metric.value(sim[key]), metric.value(m))
                for metric in METRICS
            },
        )
        for key, m in real.items()
        if key in sim
    ]

    def abs_errors(metric: Metric) -> list[float]:
        return [abs(e) for r in rows if (e := r.errors[metric.short]) is not None]

    def spreads(field: str) -> list[float]:
        return [s for r in rows if (s := getattr(r.real, field)) is not None]

    summary = Summary(
        points=len(rows),
        bw_median=quantile(abs_errors(BW), 0.5),
        bw_p90=quantile(abs_errors(BW), 0.9),
        lat_median=quantile(abs_errors(LAT), 0.5),
        lat_p90=quantile(abs_errors(LAT), 0.9),
        bw_spread_median=quantile(spreads("bw_spread"), 0.5),
        lat_spread_median=quantile(spreads("lat_spread"), 0.5),
    )
    gone = {key for key, _ in excluded}
    return Comparison(
        rows,
        [k for k in real if k not in sim],
        [k for k in sim if k not in real and k not in gone],
        summary,
        excluded,
    )


def _first(points: Mapping[Key, Metrics]) -> str:
    return key_text(next(iter(points))) if points else "none"


def key_text(key: Key) -> str:
    return " ".join(f"{name}={value}" for name, value in key)


def excluded_line(c: Comparison) -> str | None:
    """One line naming the excluded REAL points and why (None when there are none)."""
    if not c.excluded:
        return None
    by_why: dict[str, list[Key]] = {}
    for key, why in c.excluded:
        by_why.setdefault(why, []).append(key)
    groups = [
        f"{why}: {'; '.join(key_text(k) for k in keys[:10])}{'; ...' if len(keys) > 10 else ''}"
        for why, keys in by_why.items()
    ]
    return f"{len(c.excluded)} REAL point(s) left out of the errors and summary, " + " | ".join(
        groups
    )


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def summary_line(c: Comparison) -> str:
    """The one-line summary (see the module doc)."""
    s = c.summary
    line = (
        f"vmio compare: {s.points} point{'s' if s.points != 1 else ''}; "
        f"bandwidth error median {_percent(s.bw_median)}, p90 {_percent(s.bw_p90)}; "
        f"mean latency error median {_percent(s.lat_median)}, p90 {_percent(s.lat_p90)}"
    )
    if c.repeated:
        line += (
            f"; real spread median: bandwidth {_percent(s.bw_spread_median)}, "
            f"mean latency {_percent(s.lat_spread_median)}"
        )
    return line


# --- output -----------------------------------------------------------------------------------


def key_names(c: Comparison) -> list[str]:
    """The key columns of the rows, in first-seen order."""
    names: dict[str, None] = {}
    for r in c.rows:
        names.update((n, None) for n, _ in r.key)
    return list(names)


def _cell(x: float | None, spec: str = ".1f") -> str:
    """A fraction as a table cell in percent, `-` when undefined."""
    return "-" if x is None else f"{100 * x:{spec}}%"


def table(c: Comparison) -> str:
    """The comparison as a text table: key columns, then per metric real, sim and error."""
    names = key_names(c)
    header = [*names]
    for m in METRICS:
        unit = f" {m.unit}" if m.unit else ""
        header += [f"{m.short} real{unit}", f"{m.short} sim{unit}", f"{m.short} err"]
    if c.repeated:
        header += ["runs", "bw spread", "lat spread"]
    rows = []
    for r in c.rows:
        values = dict(r.key)
        cells = [values.get(n, "") for n in names]
        for m in METRICS:
            cells += [m.shown(r.real), m.shown(r.sim), _cell(r.errors[m.short], "+.1f")]
        if c.repeated:
            cells += [str(r.real.runs), _cell(r.real.bw_spread), _cell(r.real.lat_spread)]
        rows.append(cells)
    return text_table(header, rows, "l" * len(names) + "r" * (len(header) - len(names)))


def csv_text(c: Comparison) -> str:
    """The rows as CSV: key columns, `real_<metric>`, `sim_<metric>`, `<short>_error`
    (fraction, empty when undefined); with repetitions `real_runs`, `real_bw_spread`,
    `real_lat_spread`. Metrics in their JSON units (bytes/s, IO/s, ns)."""
    names = key_names(c)
    columns = [*names]
    for m in METRICS:
        columns += [f"real_{m.field}", f"sim_{m.field}", f"{m.short}_error"]
    if c.repeated:
        columns += ["real_runs", "real_bw_spread", "real_lat_spread"]
    f = io.StringIO(newline="")
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(columns)
    for r in c.rows:
        values = dict(r.key)
        cells: list[Any] = [values.get(n, "") for n in names]
        for m in METRICS:
            error = r.errors[m.short]
            cells += [m.value(r.real), m.value(r.sim), "" if error is None else error]
        if c.repeated:
            cells += [r.real.runs, _or_empty(r.real.bw_spread), _or_empty(r.real.lat_spread)]
        writer.writerow(cells)
    return f.getvalue()


def _or_empty(x: float | None) -> float | str:
    return "" if x is None else x


BAND = 0.15
"""The plot's band around y = x (±15 %)."""


def plot_png(c: Comparison, title: str) -> bytes:
    """Predicted (sim) vs measured (real) on log axes, one marker per metric (each in its
    unit), the y = x line and the ±15 % band. PNG bytes, identical for identical input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.0), layout="constrained")
    seen: list[float] = []
    for metric, marker in zip(METRICS, "os^D", strict=True):
        pairs = [
            (metric.value(r.real) / metric.scale, metric.value(r.sim) / metric.scale)
            for r in c.rows
            if metric.value(r.real) > 0 and metric.value(r.sim) > 0
        ]
        if pairs:
            xs, ys = zip(*pairs, strict=True)
            unit = f" ({metric.unit})" if metric.unit else ""
            ax.scatter(xs, ys, marker=marker, s=28, alpha=0.8, label=f"{metric.title}{unit}")
            seen += [*xs, *ys]
    lo, hi = (min(seen) / 2, max(seen) * 2) if seen else (0.1, 10.0)
    line = [lo, hi]
    ax.fill_between(
        line,
        [x * (1 - BAND) for x in line],
        [x * (1 + BAND) for x in line],
        color="grey",
        alpha=0.2,
        label=f"±{BAND:.0%}",
    )
    ax.plot(line, line, color="black", lw=1, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (REAL), each metric in its unit")
    ax.set_ylabel("predicted (SIM), each metric in its unit")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()
