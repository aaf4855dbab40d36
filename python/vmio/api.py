"""The Python API's simulation: `simulate(stack, job)` takes each input as a path or as the
file's text and returns a typed `SimResult`.

A `SimResult` holds the main figures per job and direction (`JobResult`, `DirectionResult`:
the same sums and percentiles as a study's tidy table, `vmio.results.direction_summary`),
where each job's time went by layer (`SimResult.breakdown`, `JobBreakdown`, `LayerTime`)
and fio's JSON output as a dict (`SimResult.fio`). It is also a read-only mapping over that
dict, so `result["jobs"][0]["read"]["bw_bytes"]` reads fio's JSON as the dict that
`simulate` returned before did.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmio.results import direction_summary
from vmio.sim import (
    Limits,
    VmioError,
    read_text,
    short_repr,
    simulate_text,
    simulate_workloads_text,
)


@dataclass(frozen=True)
class DirectionResult:
    """One I/O direction of a job: fio's figures (bytes/s, ns, ms), as
    `vmio.results.direction_summary` sums them."""

    bw_bytes: int
    iops: float
    io_bytes: int
    total_ios: int
    runtime_ms: int
    clat_mean_ns: float
    lat_mean_ns: float
    clat_p50_ns: int
    clat_p90_ns: int
    clat_p99_ns: int
    clat_p999_ns: int
    clat_p9999_ns: int

    @classmethod
    def of(cls, job: Mapping[str, Any], direction: str) -> DirectionResult:
        summary = direction_summary({"jobs": [job]}, direction)
        return cls(**{f: summary[f] for f in cls.__dataclass_fields__})


@dataclass(frozen=True)
class JobResult:
    """One job of fio's JSON (one entry per clone, as fio without group_reporting)."""

    name: str
    vm: str | None
    read: DirectionResult
    write: DirectionResult
    trim: DirectionResult


@dataclass(frozen=True)
class LayerTime:
    """One layer's share of a job's latency (`vmio.breakdown`, the simulator's
    sim/breakdown.rs): the mean over the job's reads, writes and trims (the layers' means add
    up to the job's mean `lat`), fio-style percentiles of the layer's own time, in ns, and
    the mean's share of the job's mean latency."""

    layer: str
    mean_ns: float
    p50_ns: int
    p99_ns: int
    p999_ns: int
    share: float


@dataclass(frozen=True)
class JobBreakdown:
    """Where one job's time went: a `LayerTime` per layer of the stack, named as `vmio help
    stack` names their tables (`vm.page_cache`, `vm.disk.guest_queue`, `vm.disk.queue`,
    `vm.disk.iotune`, `page_cache`, `scheduler`, `device`, `cpu`, and `job`: fio's own)."""

    job: str
    layers: tuple[LayerTime, ...]

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> JobBreakdown:
        return cls(
            str(entry.get("job", "")),
            tuple(
                LayerTime(
                    str(x["layer"]),
                    float(x["mean_ns"]),
                    int(x["p50_ns"]),
                    int(x["p99_ns"]),
                    int(x["p99.9_ns"]),
                    float(x["share"]),
                )
                for x in entry.get("layers", [])
            ),
        )

    def layer(self, name: str) -> LayerTime:
        """The layer called `name`."""
        for x in self.layers:
            if x.layer == name:
                return x
        raise KeyError(f"no layer '{name}'; layers: {', '.join(x.layer for x in self.layers)}")

    @property
    def mean_ns(self) -> float:
        """The job's mean latency: the layers' means added up."""
        return sum(x.mean_ns for x in self.layers)


@dataclass(frozen=True, eq=False)
class SimResult(Mapping[str, Any]):
    """What `simulate` returns: every job's figures, and fio's JSON output (`fio`, a dict;
    the result reads as that dict too: `result["jobs"]`)."""

    fio: dict[str, Any]
    jobs: tuple[JobResult, ...]
    seed: int | None

    @classmethod
    def of(cls, fio: dict[str, Any]) -> SimResult:
        jobs = tuple(
            JobResult(
                str(job.get("jobname", "")),
                job.get("vmio_vm"),
                *(DirectionResult.of(job, d) for d in ("read", "write", "trim")),
            )
            for job in fio.get("jobs", [])
        )
        return cls(fio, jobs, (fio.get("vmio") or {}).get("seed"))

    @property
    def breakdowns(self) -> tuple[JobBreakdown, ...]:
        """Where each job's time went, in the order of `jobs` (empty for a result without
        `vmio.breakdown`, such as a real run's)."""
        entries = (self.fio.get("vmio") or {}).get("breakdown") or []
        return tuple(JobBreakdown.of(e) for e in entries)

    def breakdown(self, name: str | None = None) -> JobBreakdown:
        """Where the first job called `name` (the first job without a name) spent its time."""
        found = self.breakdowns
        for b in found:
            if name is None or b.job == name:
                return b
        raise KeyError(
            f"no breakdown of job '{name}'; jobs: {', '.join(b.job for b in found) or 'none'}"
        )

    def job(self, name: str) -> JobResult:
        """The first job called `name`."""
        for j in self.jobs:
            if j.name == name:
                return j
        raise KeyError(f"no job '{name}'; jobs: {', '.join(j.name for j in self.jobs)}")

    def __getitem__(self, key: str) -> Any:
        return self.fio[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fio)

    def __len__(self) -> int:
        return len(self.fio)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SimResult):
            return self.fio == other.fio
        return isinstance(other, Mapping) and self.fio == dict(other)

    __hash__ = None  # type: ignore[assignment]


def _input(value: str | Path, what: str) -> tuple[str, str]:
    """`(text, name)` of an input given as a path (a `Path`, or a `str` without a newline)
    or as its text (a `str` with a newline), named `<what text>` in errors."""
    if isinstance(value, str) and "\n" in value:
        return value, f"<{what} text>"
    if not isinstance(value, str | os.PathLike):
        raise VmioError(f"{what}: a path or the file's text, not {short_repr(value)}")
    return read_text(value, what), str(value)


def simulate(
    stack: str | Path,
    job: str | Path | None = None,
    *,
    seed: int | None = None,
    vm: str | None = None,
    max_events: int | None = None,
    max_sim_time: str | int | float | None = None,
) -> SimResult:
    """Simulate fio job `job` inside a VM of stack `stack` (without `job`: every VM's own
    `workload`); returns a `SimResult`. Each input is a path (a `Path`, or a `str` without
    a newline) or the file's text (a `str` with a newline; a stack's `workload` paths are
    then relative to the current directory). `max_events` and `max_sim_time` bound the
    run as `vmio sim`'s `--max-events` and `--max-sim-time` do (None: their defaults,
    10^10 events and 36,500 days; past either, a `VmioError` naming the bound).

    >>> r = simulate("studies/volumes-cache/stack.toml", "job.fio", seed=7)  # doctest: +SKIP
    >>> r.jobs[0].read.bw_bytes, r.fio["jobs"][0]["read"]["bw_bytes"]  # doctest: +SKIP
    """
    limits = Limits(max_events, max_sim_time)
    stack_text, stack_name = _input(stack, "stack file")
    if job is None:
        if vm is not None:
            raise VmioError("vm= needs a job; without one every VM runs its own workload")
        # A stack given as text: Path("<stack file text>").parent is the current directory.
        text = simulate_workloads_text(stack_text, stack_name, seed, limits)
    else:
        job_text, job_name = _input(job, "fio job file")
        text = simulate_text(stack_text, stack_name, job_text, job_name, seed, vm, limits)
    return SimResult.of(json.loads(text))
