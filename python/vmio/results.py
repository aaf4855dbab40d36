"""Reading fio JSON results and writing tidy result tables (CSV and Parquet).

A *tidy* table (`results.csv`, `results.parquet`) has one row per simulated point and I/O
direction (read, write, trim), with the sweep's axis values as columns, so
pandas/polars/R/DuckDB can group and plot it without reshaping. Its `point` column (the
point's file name, `json/<point>.json`) keys the *points* table (`points.csv`,
`points.parquet`): one row per point with what is the same for all its directions, stored
once: the effective stack (`stack_json`), the job's options (`job_options_json`), the seed,
`engine` ("sim", or "real" for a point run on this machine, `vmio.real.engine`) and
`machine_json` (the machine, `vmio.real.machine.describe`; "{}" for the simulator), and
where the point's time went: the mean ns per layer of the simulator's breakdown
(`breakdown_<layer>_mean_ns`, `breakdown_means`; empty for a real run).

Columns have one type in both files: an axis column is an integer when every value of the
axis is written as one (`1`, `0`), a float when every value is a float as Python writes it,
else a string, so a CSV reader infers what the Parquet schema says. Bandwidths are bytes
per second (`bw_bytes`); reports convert them to MB/s (1 MB = 1e6 bytes, the unit of the
S0 report). Completion latency percentiles (`clat_p50_ns` .. `clat_p9999_ns`: fio's 50,
90, 99, 99.9 and 99.99th) are each the largest job's (exact for one job, an upper bound
otherwise); 0 when fio's JSON has no such percentile.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vmio.fiojson import DIRECTIONS, job_options  # noqa: F401 (re-exported)
from vmio.sim import native, parse_size

# Which directions a fio `rw=` value exercises (fio's documented rw values).
_RW_DIRECTIONS: dict[str, tuple[str, ...]] = {
    "read": ("read",),
    "randread": ("read",),
    "write": ("write",),
    "randwrite": ("write",),
    "rw": ("read", "write"),
    "readwrite": ("read", "write"),
    "randrw": ("read", "write"),
    "trim": ("trim",),
    "randtrim": ("trim",),
    "trimwrite": ("trim", "write"),
    "randtrimwrite": ("trim", "write"),
}

MB = 1e6
"""One MB, the unit of the study tables (S0 reports MB/s)."""

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("clat_p50_ns", 50.0),
    ("clat_p90_ns", 90.0),
    ("clat_p99_ns", 99.0),
    ("clat_p999_ns", 99.9),
    ("clat_p9999_ns", 99.99),
)
"""The tidy table's latency percentile columns and the fio percentile each one reads."""

TIDY_SCHEMA_FIXED: tuple[tuple[str, pa.DataType], ...] = (
    ("point", pa.string()),
    ("rw", pa.string()),
    ("bs_bytes", pa.int64()),
    ("direction", pa.string()),
    ("bw_bytes", pa.int64()),
    ("iops", pa.float64()),
    ("io_bytes", pa.int64()),
    ("total_ios", pa.int64()),
    ("clat_mean_ns", pa.float64()),
    *((name, pa.int64()) for name, _ in PERCENTILES),
    ("runtime_ms", pa.int64()),
)
"""The tidy table's columns after `study` and the axes."""


def breakdown_layers() -> tuple[str, ...]:
    """The layers of the simulator's `vmio.breakdown`, in its order (the native module's
    `BREAKDOWN_LAYERS`, from the simulator's sim/breakdown.rs)."""
    return tuple(native().BREAKDOWN_LAYERS)


def breakdown_column(layer: str) -> str:
    """The points table's column of a layer's mean time: `breakdown_<layer>_mean_ns`, the
    layer's dots as underscores (`vm.disk.queue` → `breakdown_vm_disk_queue_mean_ns`)."""
    return f"breakdown_{layer.replace('.', '_')}_mean_ns"


POINTS_SCHEMA_FIXED: tuple[tuple[str, pa.DataType], ...] = (
    ("seed", pa.uint64()),
    ("engine", pa.string()),
    ("stack_json", pa.string()),
    ("job_options_json", pa.string()),
    ("machine_json", pa.string()),
)
"""The points table's columns after `study`, `point` and the axes, before the breakdown's
(`breakdown_column` of each of `breakdown_layers`, float64)."""


def directions_of(rw: str) -> tuple[str, ...]:
    """The I/O directions a fio `rw=` value exercises (`randrw` -> read, write)."""
    return _RW_DIRECTIONS.get(rw.split(":")[0], ("read",))


def percentile_ns(stats: Mapping[str, Any], which: float) -> int:
    """Percentile `which` (99.9) of a fio latency object, 0 when it does not have it."""
    pct = stats.get("percentile") or {}
    for key, value in pct.items():
        if abs(float(key) - which) < 1e-9:
            return _finite_int(value, f"percentile {key}")
    return 0


def p99_ns(stats: Mapping[str, Any]) -> int:
    """The 99th percentile of a fio latency object, 0 when it has no percentiles."""
    return percentile_ns(stats, 99.0)


def _finite_int(value: Any, field: str) -> int:
    """`int(value)`, a `ValueError` naming `field` when it is not a finite number (JSON's
    NaN and Infinity, which Python's json reads)."""
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"'{field}' is {value!r}, not a finite number")
    return int(number) if isinstance(value, float) else int(value)


def direction_summary(result: Mapping[str, Any], direction: str) -> dict[str, Any]:
    """Sum of one direction over all jobs of a result.

    Bandwidth, IOPS, bytes and I/O counts add up; the mean completion latency (`clat_ns`)
    and the mean total latency (`lat_ns`: submission + completion) are weighted by each job's
    I/O count; each percentile (`PERCENTILES`) is the largest job's (exact for a single job,
    an upper bound otherwise); runtime is the longest job's. A count, size or runtime that
    is not a finite number (NaN, Infinity) is a `ValueError` naming the field.
    """
    bw = iops = io_bytes = ios = runtime = 0
    pcts = dict.fromkeys((name for name, _ in PERCENTILES), 0)
    clat_weighted = lat_weighted = 0.0
    for job in result["jobs"]:
        d = job.get(direction) or {}
        bw += _finite_int(d.get("bw_bytes", 0), f"{direction}.bw_bytes")
        iops += float(d.get("iops", 0.0))
        io_bytes += _finite_int(d.get("io_bytes", 0), f"{direction}.io_bytes")
        n = _finite_int(d.get("total_ios", 0), f"{direction}.total_ios")
        ios += n
        runtime = max(runtime, _finite_int(d.get("runtime", 0), f"{direction}.runtime"))
        clat = d.get("clat_ns") or {}
        clat_weighted += float(clat.get("mean", 0.0)) * n
        lat_weighted += float((d.get("lat_ns") or {}).get("mean", 0.0)) * n
        for name, which in PERCENTILES:
            pcts[name] = max(pcts[name], percentile_ns(clat, which))
    return {
        "direction": direction,
        "bw_bytes": bw,
        "iops": iops,
        "io_bytes": io_bytes,
        "total_ios": ios,
        "clat_mean_ns": clat_weighted / ios if ios else 0.0,
        **pcts,
        "lat_mean_ns": lat_weighted / ios if ios else 0.0,
        "runtime_ms": runtime,
    }


def total_bw_bytes(result: Mapping[str, Any]) -> int:
    """Read + write + trim bandwidth of all jobs, bytes/s."""
    return sum(direction_summary(result, d)["bw_bytes"] for d in DIRECTIONS)


def quantity_mb_s(result: Mapping[str, Any], quantity: str = "total") -> float:
    """Bandwidth of a result in MB/s: read + write + trim for `total`, else one direction."""
    if quantity == "total":
        return total_bw_bytes(result) / MB
    return direction_summary(result, quantity)["bw_bytes"] / MB


def tidy_rows(
    result: Mapping[str, Any],
    coords: Mapping[str, str],
    study: str,
    point: str = "",
) -> list[dict[str, Any]]:
    """One tidy row per direction that the job's `rw` exercises, with the point's
    coordinates (as strings; `tidy_table` types them) and its key `point`."""
    opts = job_options(result)
    rw = opts.get("rw", opts.get("readwrite", "read"))
    bs_text = opts.get("bs", opts.get("blocksize", "4k")).split(",")[0]
    common = {
        "study": study,
        **coords,
        "point": point,
        "rw": rw,
        "bs_bytes": parse_size(bs_text),
    }
    return [{**common, **direction_summary(result, d)} for d in directions_of(rw)]


def breakdown_means(result: Mapping[str, Any]) -> dict[str, float | None]:
    """A point's mean time per layer (`breakdown_column` names), over all its jobs' reads,
    writes and trims: each job's layer means weighted by its I/Os, so the columns add up to
    the point's mean latency; None for a result without `vmio.breakdown` (a real run)."""
    layers = breakdown_layers()
    entries = (result.get("vmio") or {}).get("breakdown")
    if not entries:
        return {breakdown_column(layer): None for layer in layers}
    jobs = result.get("jobs") or []
    sums = dict.fromkeys(layers, 0.0)
    count = 0
    for i, entry in enumerate(entries):
        job = jobs[i] if i < len(jobs) else {}
        n = sum(int((job.get(d) or {}).get("total_ios", 0)) for d in ("read", "write", "trim"))
        count += n
        for layer in entry.get("layers") or []:
            if layer.get("layer") in sums:
                sums[layer["layer"]] += float(layer.get("mean_ns", 0.0)) * n
    return {
        breakdown_column(layer): round(sums[layer] / count, 3) if count else 0.0 for layer in layers
    }


def point_row(
    result: Mapping[str, Any], coords: Mapping[str, str], study: str, point: str
) -> dict[str, Any]:
    """The points table's row of one point: its stack, job options, seed and engine, and
    where its time went (`breakdown_means`)."""
    vmio = result.get("vmio", {})
    return {
        "study": study,
        "point": point,
        **coords,
        "seed": int(vmio.get("seed", 0)),
        "engine": str(vmio.get("engine", "sim")),
        "stack_json": json.dumps(vmio.get("stack", {}), sort_keys=True),
        "job_options_json": json.dumps(job_options(result), sort_keys=True),
        "machine_json": json.dumps(vmio.get("machine", {}), sort_keys=True),
        **breakdown_means(result),
    }


def axis_type(values: Iterable[str]) -> pa.DataType:
    """The column type of an axis: int64 when every value is an integer as written
    (`str(int(v)) == v`), float64 when every value is a float as Python writes it, else
    string; a CSV reader infers the same type from the values."""
    values = list(values)

    def canonical(convert: Any, v: str) -> bool:
        try:
            return str(convert(v)) == v
        except (ValueError, OverflowError):
            return False

    if values and all(canonical(int, v) and -(2**63) <= int(v) < 2**63 for v in values):
        return pa.int64()
    if values and all(
        canonical(float, v) and float(v) == float(v) and abs(float(v)) != float("inf")
        for v in values
    ):
        return pa.float64()
    return pa.string()


def _axis_fields(axes: Mapping[str, Sequence[str]] | Sequence[str]) -> list[pa.Field]:
    if isinstance(axes, Mapping):
        return [pa.field(name, axis_type(values)) for name, values in axes.items()]
    return [pa.field(name, pa.string()) for name in axes]


def tidy_schema(axes: Mapping[str, Sequence[str]] | Sequence[str]) -> pa.Schema:
    """Arrow schema of a tidy table whose point coordinates are `axes`: names to their
    values (typed by `axis_type`), or names alone (strings)."""
    fields = [pa.field("study", pa.string()), *_axis_fields(axes)]
    fields += [pa.field(name, typ) for name, typ in TIDY_SCHEMA_FIXED]
    return pa.schema(fields)


def points_schema(axes: Mapping[str, Sequence[str]] | Sequence[str]) -> pa.Schema:
    """Arrow schema of the points table (see `tidy_schema` for `axes`)."""
    fields = [pa.field("study", pa.string()), pa.field("point", pa.string())]
    fields += _axis_fields(axes)
    fields += [pa.field(name, typ) for name, typ in POINTS_SCHEMA_FIXED]
    fields += [pa.field(breakdown_column(layer), pa.float64()) for layer in breakdown_layers()]
    return pa.schema(fields)


def _table(rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    rows = list(rows)
    columns = {}
    for f in schema:
        values = [r[f.name] for r in rows]
        if pa.types.is_integer(f.type) and values and isinstance(values[0], str):
            values = [int(v) for v in values]
        elif pa.types.is_floating(f.type) and values and isinstance(values[0], str):
            values = [float(v) for v in values]
        columns[f.name] = values
    return pa.Table.from_pydict(columns, schema=schema)


def tidy_table(
    rows: Iterable[Mapping[str, Any]], axes: Mapping[str, Sequence[str]] | Sequence[str]
) -> pa.Table:
    """The tidy rows as an Arrow table (columns in schema order, axes typed)."""
    return _table(rows, tidy_schema(axes))


def points_table(
    rows: Iterable[Mapping[str, Any]], axes: Mapping[str, Sequence[str]] | Sequence[str]
) -> pa.Table:
    """The points rows (`point_row`) as an Arrow table."""
    return _table(rows, points_schema(axes))


TMP_PREFIX = ".tmp-"
"""Temporary files of `atomic_path` start with this (a killed run may leave some behind)."""


def temp_path(path: Path) -> Path:
    """A temporary name for `path` in the same directory, with the same suffix (matplotlib
    picks the format from it)."""
    return path.with_name(f"{TMP_PREFIX}{os.getpid()}-{path.name}")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` atomically: a temporary file in the same directory, renamed
    over `path` (a reader, or a run killed midway, sees the old file or the new one)."""
    tmp = temp_path(path)
    try:
        with tmp.open("wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Write rows as CSV with a header, `\\n` line ends, floats in Python's shortest repr
    (atomically)."""
    f = io.StringIO(newline="")
    writer = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row[c] for c in columns})
    atomic_write(path, f.getvalue())


def write_table(directory: Path, name: str, table: pa.Table) -> None:
    """Write `<name>.csv` and `<name>.parquet` into `directory` (each atomically)."""
    rows = table.to_pylist()
    write_csv(directory / f"{name}.csv", rows, table.column_names)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    atomic_write(directory / f"{name}.parquet", buf.getvalue())


def write_tidy(directory: Path, table: pa.Table) -> None:
    """Write `results.csv` and `results.parquet` into `directory` (each atomically)."""
    write_table(directory, "results", table)


def write_points(directory: Path, table: pa.Table) -> None:
    """Write `points.csv` and `points.parquet` into `directory` (each atomically)."""
    write_table(directory, "points", table)
