"""Running a study: every point's inputs, the edits of its stack and job files, the store of
finished points (resume) and the output directory.

A point's settings come from its axis values (and their `also`), then `[quick].set` under
`--quick`. Each setting's *target* edits one input:

- `stack:<path>` edits the stack: the file is parsed with tomllib, the key at `<path>` is set
  (tables by key, arrays of tables by index: `vm.0.disk.0.cache`, `*` for every element:
  `vm.*.workload`) and the dict is written back by `vmio.stackfile.render`;
- `job:<option>` edits the fio job through the Rust fio parser (`vmio._native.set_job_option`):
  the option, under any of its fio spellings, is set wherever it is set, and added to the
  leading `[global]` when some job would not see it; `job:<section>.<option>` sets it in that
  section only. Comments and other lines stay as they are. Without a job file, it edits
  every VM's workload file the same way, and `job[<vm>]:<option>` edits that VM's only.

Every point is simulated with the same seed (the simulator derives its sub-seeds from it),
which gives the layouts and cache modes common random numbers and makes the whole study
deterministic: the same experiment and seed give byte-identical tables and files.

    for each point, in grid order (`parallel` at once, or as Dask tasks: `vmio.study.cluster`):
        key = sha256(effective stack and job texts, seed, vm, measure, coords, version)
        if store/json/<point>.json exists and store/.vmio-partial/<point>.key == key: reuse
        else: simulate, then save the JSON and its key
    evaluate the calibration; write json/, results.csv/.parquet and points.csv/.parquet
    first, then calibration.csv, tables.txt, the bench-fio layout (when asked) and
    figure.png; a writer that fails is named in the one error raised once every other
    writer ran; remove .vmio-partial (`finish_output_dir`) only when all succeeded

A study of several parts runs its parts in turn, each part's tables and files in order; with
`parallel` > 1 their points share one `PointPool`: every part's points are submitted before
the first part is collected (`presubmit`), so the threads stay busy across the parts'
boundaries instead of waiting for the slowest point of each part, and a part's result is the
one it would have alone (a point's result depends only on its inputs and seed).

Progress: `run_study(progress=...)` takes a stream (a bar on it, `vmio.progress.Progress`),
a callable that receives every `StudyEvent` (nothing is drawn), or None (silent); the
default is stderr.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from vmio import fioreport as report
from vmio import results, stackfile
from vmio.progress import Progress
from vmio.real import engine as realengine
from vmio.sim import (
    Limits,
    VmioError,
    native,
    parse_toml,
    read_text,
    stack_workloads,
)
from vmio.study import benchfio, cluster
from vmio.study import iozone as iozonereport
from vmio.study import pdc as pdcreport
from vmio.study.evaluation import (
    CALIBRATION_COLUMNS,
    PointResult,
    StudyResult,
    calibration_records,
    evaluate_calibration,
)
from vmio.study.experiment import Experiment, Point, job_vm
from vmio.study.tables import summary_text

# Files a study writes into its output directory (and may replace with --force).
OUTPUT_FILES = (
    "results.csv",
    "results.parquet",
    "points.csv",
    "points.parquet",
    "calibration.csv",
    "figure.png",
    "tables.txt",
    *pdcreport.FIGURE_FILES,
)
SKIPPED_FILE = "skipped.csv"
"""With --engine real, the points not run and why (written only when some were skipped)."""


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


def set_job_option(text: str, target: str, value: str, path: str = "job file") -> str:
    """Set fio option `target=value` in a job file's text; `target` is `option` or
    `section.option` (a `job:` target's path). The Rust fio parser does the edit (see the
    module doc), so an option is found under every spelling fio accepts; `path` names the
    file in errors."""
    section, _, option = target.rpartition(".")
    return native().set_job_option(text, path, section or None, option, value)


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


def point_inputs(
    exp: Experiment, quick: bool = False, max_points: int | None = None
) -> list[PointInput]:
    """The edited stack and job text of every point of the grid, in grid order (a grid over
    `max_points` is refused first: `Experiment.check_grid`)."""
    exp.check_grid(quick, max_points)
    stack_source = read_text(exp.stack_path, "stack file")
    base_stack = parse_toml(stack_source, exp.stack_path)
    base_job = None if exp.job_path is None else read_text(exp.job_path, "fio job file")
    fixed = dict(exp.quick_set) if quick else {}
    axes = {a.name: a for a in exp.axes}
    out = []
    for point in exp.iter_points(quick):
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
                if job_vm(kind):
                    raise VmioError(
                        f"{exp.path}: target '{target}': 'job[<vm>]:' needs an experiment "
                        "without 'job' (each VM running its own workload); use 'job:'"
                    )
                job = set_job_option(job, tpath, str(value), str(exp.job_path))
            else:
                job_settings.append((job_vm(kind), tpath, str(value)))
        edited = ", ".join(f"{k}={v}" for k, v in stack_settings)
        out.append(
            PointInput(
                point=point,
                stack_text=stackfile.render(stack),
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
                text = set_job_option(text, option, value, path)
        jobs[i] = (vm, text, path)
    return jobs


def point_key(
    exp: Experiment,
    inp: PointInput,
    seed: int,
    jobs: Sequence[tuple[str, str, str]] | None,
    engine: realengine.Options | None = None,
) -> str:
    """A hash of everything a point's result depends on: the effective stack and job (or
    per-VM workload) texts, the seed, the VM, the measured job, the axis values, the engine
    (and the real engine's options) and vmio's version. A stored point is reused only when
    its key is the same."""
    import hashlib

    from vmio.version import __version__

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
        "engine": "sim" if engine is None else {"real": engine.key()},
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


@dataclass(frozen=True)
class StudyEvent:
    """One step of a study's run, as a progress callback receives it.

    `kind`: `start` (before the first point; `total` points to run, `reused` of them saved
    by an earlier run), `point` (a point finished: `done` of `total`, its `point`),
    `skipped` (the real engine could not run `point`; `message` says why) and `end`."""

    kind: Literal["start", "point", "skipped", "end"]
    done: int
    total: int
    reused: int = 0
    point: Point | None = None
    message: str = ""


STDERR: Any = object()
"""`run_study`'s default `progress`: a bar on stderr."""


class _Reporter:
    """Sends a run's events to a callback, or draws them as a `Progress` bar on a stream,
    or drops them (None)."""

    def __init__(self, progress: Any, title: str, tty: bool | None) -> None:
        self.callback = progress if callable(progress) and not hasattr(progress, "write") else None
        self.stream: TextIO | None = None
        if self.callback is None and progress is not None:
            self.stream = sys.stderr if progress is STDERR else progress
        self.title, self.tty = title, tty
        self.bar: Progress | None = None
        self.done = self.total = self.reused = 0

    def emit(self, event: StudyEvent) -> None:
        if self.callback is not None:
            self.callback(event)

    def start(self, total: int, reused: int) -> None:
        self.total, self.reused = total, reused
        if self.stream is not None:
            if reused:
                print(
                    f"vmio: {self.title}: resuming: {reused} of {total} points done",
                    file=self.stream,
                    flush=True,
                )
            self.bar = Progress(total - reused, title=self.title, stream=self.stream, tty=self.tty)
        self.emit(StudyEvent("start", 0, total, reused))

    def point(self, point: Point, reused: bool) -> None:
        self.done += 1
        if self.bar is not None and not reused:
            self.bar.advance(point.label)
        self.emit(StudyEvent("point", self.done, self.total, self.reused, point))

    def note(self, text: str) -> None:
        if self.stream is not None:
            print(f"vmio: note: {text}", file=self.stream, flush=True)

    def skipped(self, point: Point, why: str) -> None:
        if self.stream is not None:
            print(f"vmio: skipped {point.label}: {why}", file=self.stream, flush=True)
        self.emit(StudyEvent("skipped", self.done, self.total, self.reused, point, why))

    def end(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.emit(StudyEvent("end", self.done, self.total, self.reused))


class PointPool:
    """Threads that simulate points ahead of the run that collects them (`presubmit`, then
    `run_study(pool=...)`): `workers` points at once, in the order submitted. A point is
    found again by its key (`point_key`) and taken once; one not submitted ahead is
    submitted when its run asks for it. `close` cancels what was not started."""

    def __init__(self, workers: int) -> None:
        self._threads = ThreadPoolExecutor(max_workers=max(1, workers))
        self._ahead: dict[str, Future[str]] = {}

    def ahead(self, key: str, run: Callable[[], str]) -> None:
        """Start `run` (a point's simulation, its JSON text) for a later `take(key)`."""
        if key not in self._ahead:
            self._ahead[key] = self._threads.submit(run)

    def take(self, key: str, run: Callable[[], str]) -> Future[str]:
        """The point `key`'s simulation: the one submitted ahead, else `run` submitted now."""
        fut = self._ahead.pop(key, None)
        return fut if fut is not None else self._threads.submit(run)

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)


def presubmit(
    exp: Experiment,
    pool: PointPool,
    *,
    seed: int | None = None,
    quick: bool = False,
    store: Path | None = None,
    max_points: int | None = None,
    max_events: int | None = None,
    max_sim_time: str | int | float | None = None,
) -> None:
    """Submit the simulation of every point of `exp` that `store` does not hold yet to
    `pool`, for a later `run_study(exp, ..., pool=pool)` with the same arguments."""
    plan = _Plan.of(exp, seed, quick, max_points, max_events, max_sim_time, None)
    for inp, jobs, key in zip(plan.inputs, plan.jobs, plan.keys, strict=True):
        if store is not None and _stored(store, inp.point.slug, key) is not None:
            continue
        pool.ahead(key, _sim_task(exp, inp, jobs, plan.seed, plan.limits).run)


@dataclass(frozen=True)
class _Plan:
    """What a run of `exp` simulates: the bounds (checked), the seed, and per point in grid
    order its inputs, its workload jobs (None with a job file) and its key."""

    limits: Limits
    seed: int
    inputs: list[PointInput]
    jobs: list[list[tuple[str, str, str]] | None]
    keys: list[str]

    @staticmethod
    def of(
        exp: Experiment,
        seed: int | None,
        quick: bool,
        max_points: int | None,
        max_events: int | None,
        max_sim_time: str | int | float | None,
        engine: realengine.Options | None,
    ) -> _Plan:
        limits = Limits(max_events, max_sim_time)
        limits.native_args()  # a bad bound is refused before anything runs
        seed = exp.seed if seed is None else seed
        inputs = point_inputs(exp, quick, max_points)
        jobs = [None if i.job_text is not None else _workload_jobs(exp, i) for i in inputs]
        keys = [point_key(exp, i, seed, j, engine) for i, j in zip(inputs, jobs, strict=True)]
        return _Plan(limits, seed, inputs, jobs, keys)


def _sim_task(
    exp: Experiment,
    inp: PointInput,
    jobs: Sequence[tuple[str, str, str]] | None,
    seed: int,
    limits: Limits,
) -> cluster.SimTask:
    """The simulation of one point as a task (run here, in a pool, or on a Dask worker)."""
    return cluster.SimTask(
        inp.stack_text,
        inp.stack_path,
        inp.job_text,
        inp.job_path or "",
        None if jobs is None else tuple(jobs),
        seed,
        exp.vm,
        limits,
    )


def run_study(
    exp: Experiment,
    *,
    seed: int | None = None,
    quick: bool = False,
    parallel: int = 1,
    progress: TextIO | Callable[[StudyEvent], None] | None = STDERR,
    progress_tty: bool | None = None,
    store: Path | None = None,
    on_point: Callable[[Point], None] | None = None,
    engine: realengine.Options | None = None,
    max_points: int | None = None,
    dask: Any = None,
    dask_timeout: float = cluster.DEFAULT_TIMEOUT,
    max_events: int | None = None,
    max_sim_time: str | int | float | None = None,
    pool: PointPool | None = None,
) -> StudyResult:
    """Simulate every point of the experiment's grid; results come back in grid order.

    `parallel` points run at once in threads (the native simulator releases the GIL); the
    order of completion never reaches the results. Progress: a bar on `progress` when it is
    a stream (stderr by default), every `StudyEvent` passed to it when it is a callable,
    nothing when None. With `store` (an output directory prepared by `prepare_output_dir`), each
    finished point is saved there at once (`json/<point>.json` and its key), and points
    saved by an earlier, interrupted run with the same key are reused instead of simulated.
    `on_point` is called (in grid order) after each point is done.

    With `engine`, points run for real (`vmio.real.engine`), one at a time; a point the real
    engine cannot run is skipped: its reason is printed once and kept in the result's
    `skipped`, and the point is left out of the tables.

    A grid of more than `max_points` points (default: the experiment's, else
    `experiment.MAX_POINTS`) is refused before anything runs.

    With `dask` (a scheduler address `tcp://host:port`, `local` or `local:N` for a cluster
    of N worker processes on this machine, or a `distributed.Client`), the points not
    stored yet run as Dask tasks (`vmio.study.cluster`; `parallel` does not apply): each is
    stored as it completes, progress and `on_point` follow grid order as above, and the
    results are those of a local run. `dask_timeout`: seconds to wait for the scheduler and
    for a first worker.

    `max_events` and `max_sim_time` bound each point's simulation as in `vmio.simulate` (the
    bound a point passes is its error); they travel with a Dask task.

    With `pool` (simulated points only, not with `engine` or `dask`), the points run on the
    pool's threads, those `presubmit` started ahead taken as they are (`parallel` does not
    apply): the threads of a study of several parts are shared by all its parts.
    """
    plan = _Plan.of(exp, seed, quick, max_points, max_events, max_sim_time, engine)
    limits, seed, inputs, jobs, keys = plan.limits, plan.seed, plan.inputs, plan.jobs, plan.keys
    if engine is not None and dask is not None:
        raise VmioError("--dask runs simulated points only (the real engine measures this machine)")
    real = None if engine is None else realengine.Engine(engine)
    if real is not None:
        parallel = 1
    skipped: dict[int, str] = {}
    reused: dict[int, str] = {}
    if store is not None:
        for i, (inp, key) in enumerate(zip(inputs, keys, strict=True)):
            if (text := _stored(store, inp.point.slug, key)) is not None:
                reused[i] = text
    reporter = _Reporter(progress, f"study {exp.name}", progress_tty)
    reporter.start(len(inputs), len(reused))

    def task(i: int) -> cluster.SimTask:
        return _sim_task(exp, inputs[i], jobs[i], seed, limits)

    def one(i: int) -> PointResult | None:
        inp = inputs[i]
        if i in reused:
            text = reused[i]
        elif real is not None:
            work = jobs[i] or [(exp.vm, inp.job_text or "", inp.job_path or "")]
            try:
                text = real.run(inp.stack_text, inp.stack_path, work, seed)
            except realengine.Skipped as why:
                skipped[i] = str(why)
                reporter.skipped(inp.point, str(why))
                return None
        else:
            text = task(i).run()
        return landed(i, text)

    def landed(i: int, text: str) -> PointResult:
        """A point's JSON `text` is here: its result, stored when it is new."""
        inp = inputs[i]
        result = _measured(exp, json.loads(text))
        if store is not None and i not in reused:
            text = _json_text(text)
            _store(store, inp.point.slug, keys[i], text)
        return PointResult(inp.point, text, result)

    def finished(i: int) -> None:
        reporter.point(inputs[i].point, i in reused)
        if on_point is not None:
            on_point(inputs[i].point)

    done: list[PointResult | None] = []
    if dask is not None:
        ready: dict[int, PointResult] = {}
        todo = {i: task(i) for i in range(len(inputs)) if i not in reused}
        labels = {i: inputs[i].point.label for i in todo}

        def drain() -> None:  # every point up to the first not done, in grid order
            while len(done) < len(inputs) and (len(done) in reused or len(done) in ready):
                i = len(done)
                done.append(ready.pop(i) if i in ready else one(i))
                finished(i)

        here = (
            []
            if cluster.shares_this_machine(dask)
            else sorted(i for i, t in todo.items() if cluster.reads_this_machine(t))
        )
        if here:
            reporter.note(
                f"{len(here)} of {len(todo)} points read files or environment variables of "
                "this machine when simulated (include, read_iolog, ${VAR}): they run here, "
                "not on the Dask workers"
            )
        drain()
        for i in here:
            ready[i] = landed(i, todo.pop(i).run())
            drain()
        if todo:  # a resumed run with every point stored needs no cluster
            with cluster.connect(dask, dask_timeout) as client:
                for i, text in cluster.run(client, todo, labels):
                    ready[i] = landed(i, text)
                    drain()
    elif pool is not None and real is None:
        futures = [
            None if i in reused else pool.take(keys[i], task(i).run) for i in range(len(inputs))
        ]
        for i, fut in enumerate(futures):
            done.append(one(i) if fut is None else landed(i, fut.result()))
            finished(i)
    elif parallel <= 1:
        for i in range(len(inputs)):
            done.append(one(i))
            finished(i)
    else:
        with ThreadPoolExecutor(max_workers=parallel) as threads:
            futures = [threads.submit(one, i) for i in range(len(inputs))]
            try:
                for i, fut in enumerate(futures):
                    done.append(fut.result())
                    finished(i)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    reporter.end()

    ran = [pr for pr in done if pr is not None]
    notes: list[str] = []
    for pr in ran:
        for line in report.result_notes(pr.result, str(exp.job_path or exp.stack_path)):
            if line not in notes:
                notes.append(line)
    return StudyResult(
        experiment=exp,
        seed=seed,
        quick=quick,
        points=ran,
        calibration=evaluate_calibration(exp, ran, [inputs[i].point for i in skipped]),
        notes=notes,
        skipped=[(inputs[i].point, why) for i, why in sorted(skipped.items())],
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
        for fname in (*OUTPUT_FILES, SKIPPED_FILE):
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


def write_outputs(res: StudyResult, out: Path, *, bench_fio_layout: bool = False) -> None:
    """Write json/, results.csv/.parquet, points.csv/.parquet, calibration.csv, tables.txt,
    figure.png (and, for `[figure] kind = "pdc"`, `pdcreport.FIGURE_FILES`) and, when
    `bench_fio_layout` or the experiment's `[experiment] bench_fio_layout = true`, bench-fio's
    layout (`vmio.study.benchfio`); each file atomically (a temporary name in the same
    directory, renamed).

    The results (json/, the tidy and points tables) are written first; each later writer
    runs even when one before it failed, and a failure is one `VmioError` naming the
    writers that failed, raised once the others have run: the results are never lost to a
    table, a figure or a layout that could not be written."""
    _write_json(res, out)
    results.write_tidy(out, res.tidy_table())
    results.write_points(out, res.points_table())
    writers: list[tuple[str, Callable[[], None]]] = [
        (
            "calibration.csv",
            lambda: results.write_csv(
                out / "calibration.csv", calibration_records(res), CALIBRATION_COLUMNS
            ),
        ),
        ("tables.txt", lambda: results.atomic_write(out / "tables.txt", summary_text(res))),
        (SKIPPED_FILE, lambda: _write_skipped(res, out)),
    ]
    if bench_fio_layout or res.experiment.bench_fio_layout:
        writers.append(
            (f"{benchfio.DIRECTORY}/ (bench-fio's layout)", lambda: benchfio.write_layout(res, out))
        )
    writers.append(("figure.png", lambda: _write_figure(res, out)))
    failed = []
    for name, write in writers:
        try:
            write()
        except Exception as err:  # noqa: BLE001 - any writer's failure is named, the rest run
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            failed.append(f"{name}: {why or type(err).__name__}")
    if failed:
        raise VmioError(
            f"study {res.experiment.name}: results.csv, results.parquet, points.csv, "
            f"points.parquet and json/ are written in '{out}', but writing "
            + "; ".join(failed)
            + " failed"
        )


def _write_json(res: StudyResult, out: Path) -> None:
    """json/<point>.json of every point; the JSON of points no longer in the grid goes."""
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


def _write_skipped(res: StudyResult, out: Path) -> None:
    if res.skipped:
        rows = [{"point": p.label, "reason": why} for p, why in res.skipped]
        results.write_csv(out / SKIPPED_FILE, rows, ("point", "reason"))
    else:
        (out / SKIPPED_FILE).unlink(missing_ok=True)


def _write_figure(res: StudyResult, out: Path) -> None:
    from vmio.study import plot  # matplotlib is slow to import; only needed here

    if not res.points:  # every point skipped (--engine real): nothing to draw
        for fname in ("figure.png", *pdcreport.FIGURE_FILES):
            (out / fname).unlink(missing_ok=True)
        return
    kind = res.experiment.figure.get("kind")
    tmp = results.temp_path(out / "figure.png")
    try:
        if kind == "pdc":
            pdcreport.write_figures(res, tmp, out)
        elif kind == "iozone":
            iozonereport.write_figure(res, tmp)
        elif kind == "bars":
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
