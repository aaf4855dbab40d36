"""Reading fio JSON results and writing tidy result tables (CSV and Parquet).

A *tidy* table has one row per simulated point and I/O direction (read, write, trim), with
the sweep's axis values as columns, so pandas/polars/R/DuckDB can group and plot it without
reshaping. `engine` says whether the point was simulated ("sim") or run on this machine
("real", `vmio.real.engine`); `machine_json` is then the machine (`vmio.real.machine.describe`),
"{}" for the simulator. Bandwidths are bytes per second (`bw_bytes`); reports convert them
to MB/s (1 MB = 1e6 bytes, the unit of the S0 report).
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
from vmio.sim import parse_size

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

TIDY_SCHEMA_FIXED: tuple[tuple[str, pa.DataType], ...] = (
    ("rw", pa.string()),
    ("bs_bytes", pa.int64()),
    ("direction", pa.string()),
    ("bw_bytes", pa.int64()),
    ("iops", pa.float64()),
    ("io_bytes", pa.int64()),
    ("total_ios", pa.int64()),
    ("clat_mean_ns", pa.float64()),
    ("clat_p99_ns", pa.int64()),
    ("runtime_ms", pa.int64()),
    ("seed", pa.uint64()),
    ("stack_json", pa.string()),
    ("job_options_json", pa.string()),
    ("engine", pa.string()),
    ("machine_json", pa.string()),
)


def directions_of(rw: str) -> tuple[str, ...]:
    """The I/O directions a fio `rw=` value exercises (`randrw` -> read, write)."""
    return _RW_DIRECTIONS.get(rw.split(":")[0], ("read",))


def p99_ns(stats: Mapping[str, Any]) -> int:
    """The 99th percentile of a fio latency object, 0 when it has no percentiles."""
    pct = stats.get("percentile") or {}
    for key, value in pct.items():
        if abs(float(key) - 99.0) < 1e-9:
            return int(value)
    return 0


def direction_summary(result: Mapping[str, Any], direction: str) -> dict[str, Any]:
    """Sum of one direction over all jobs of a result.

    Bandwidth, IOPS, bytes and I/O counts add up; the mean completion latency (`clat_ns`)
    and the mean total latency (`lat_ns`: submission + completion) are weighted by each job's
    I/O count; the p99 is the largest job p99 (exact for a single job, an upper bound
    otherwise); runtime is the longest job's.
    """
    bw = iops = io_bytes = ios = runtime = p99 = 0
    clat_weighted = lat_weighted = 0.0
    for job in result["jobs"]:
        d = job.get(direction) or {}
        bw += int(d.get("bw_bytes", 0))
        iops += float(d.get("iops", 0.0))
        io_bytes += int(d.get("io_bytes", 0))
        n = int(d.get("total_ios", 0))
        ios += n
        runtime = max(runtime, int(d.get("runtime", 0)))
        clat = d.get("clat_ns") or {}
        clat_weighted += float(clat.get("mean", 0.0)) * n
        lat_weighted += float((d.get("lat_ns") or {}).get("mean", 0.0)) * n
        p99 = max(p99, p99_ns(clat))
    return {
        "direction": direction,
        "bw_bytes": bw,
        "iops": iops,
        "io_bytes": io_bytes,
        "total_ios": ios,
        "clat_mean_ns": clat_weighted / ios if ios else 0.0,
        "clat_p99_ns": p99,
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
) -> list[dict[str, Any]]:
    """One tidy row per direction that the job's `rw` exercises, with the point's coordinates."""
    opts = job_options(result)
    rw = opts.get("rw", opts.get("readwrite", "read"))
    bs_text = opts.get("bs", opts.get("blocksize", "4k")).split(",")[0]
    vmio = result.get("vmio", {})
    common = {
        "study": study,
        **coords,
        "rw": rw,
        "bs_bytes": parse_size(bs_text),
    }
    tail = {
        "seed": int(vmio.get("seed", 0)),
        "stack_json": json.dumps(vmio.get("stack", {}), sort_keys=True),
        "job_options_json": json.dumps(opts, sort_keys=True),
        "engine": str(vmio.get("engine", "sim")),
        "machine_json": json.dumps(vmio.get("machine", {}), sort_keys=True),
    }
    return [{**common, **direction_summary(result, d), **tail} for d in directions_of(rw)]


def tidy_schema(axis_names: Sequence[str]) -> pa.Schema:
    """Arrow schema of a tidy table whose point coordinates are `axis_names`."""
    fields = [pa.field("study", pa.string())]
    fields += [pa.field(name, pa.string()) for name in axis_names]
    fields += [pa.field(name, typ) for name, typ in TIDY_SCHEMA_FIXED]
    return pa.schema(fields)


def tidy_table(rows: Iterable[Mapping[str, Any]], axis_names: Sequence[str]) -> pa.Table:
    """The tidy rows as an Arrow table (columns in schema order)."""
    schema = tidy_schema(axis_names)
    rows = list(rows)
    return pa.Table.from_pydict({f.name: [r[f.name] for r in rows] for f in schema}, schema=schema)


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


def write_tidy(directory: Path, table: pa.Table) -> None:
    """Write `results.csv` and `results.parquet` into `directory` (each atomically)."""
    rows = table.to_pylist()
    write_csv(directory / "results.csv", rows, table.column_names)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    atomic_write(directory / "results.parquet", buf.getvalue())
