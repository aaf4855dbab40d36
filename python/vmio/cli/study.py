"""`vmio study`: run a built-in or custom study into an output directory (resumable), on the
simulator or, with `--engine real`, on this machine."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from vmio.cli import sim as sim_command
from vmio.cli.common import Formatter, int_in, parse_seed, seconds_in, size_in
from vmio.real import engine as realengine
from vmio.real import machine
from vmio.real import qemu as qemuguest
from vmio.sim import Limits, VmioError
from vmio.study import cluster, experiment, runner, tables

DEFAULT_RESULTS = Path("vmio-results")

STUDY_EPILOG = """\
A study sweeps the axes of an experiment file (experiment.toml: a stack file, a fio job and
the values to sweep), simulates every point, and prints one table of bandwidths (MB/s,
1 MB = 1e6 bytes) per table axis value plus a calibration table that compares the simulated
values with the reference figures (PASS within the experiment's tolerance).

Written to the output directory:
  results.csv, results.parquet  tidy table, one row per point and I/O direction
  points.csv, points.parquet    one row per point: its stack and job (keyed by 'point'),
                                its mean time per layer (breakdown_<layer>_mean_ns)
  calibration.csv               the calibration table
  figure.png                    bandwidth vs block size per layout, reference figures marked
  tables.txt                    what was printed on stdout
  json/<point>.json             fio JSON output of every point
  skipped.csv                   --engine real: the points not run, and why
  bench-fio/                    with --bench-fio-layout (or [experiment]
                                bench_fio_layout = true): every point's JSON in
                                bench-fio's layout, for fio-plot

--engine real runs every point on this machine with fio instead of simulating it, one at a
time (vmio/real/engine.py): a native stack's job on the devices' files, a VM stack's through
'vmio serve' and fio's nbd engine. Devices without a path (all of a VM stack's) are files
DIR/<device>.img of --real-size (kept for the next run). --real-mode guest runs a VM stack's
job in a QEMU guest instead, whose disk is the 'vmio serve' export (under TCG, when KVM does
not boot here, its timings are functional-only: vmio compare leaves them out). A point this
machine cannot run (an HDD on a flash disk, a job on files...) is skipped with its reason.

--dask tcp://HOST:PORT runs the points as tasks on a Dask cluster (dask scheduler, dask
worker; every worker with this vmio version), --dask local:N on N worker processes here
(pip install 'vmio[dask]'): the same output files, byte for byte, and the same resume; the
client reads the study's files and writes the results, the workers need none (docs/cluster.md).

A study of several parts (a study.toml listing experiment files) runs each part in turn
and writes each into its own subdirectory, <out>/<part>/.

Without --out, results go to vmio-results/<study>/, or to the first free
vmio-results/<study>-2/, -3/... when it already holds results. With --out, a non-empty
directory is refused unless --force (which replaces only the files listed above).
Each point is saved as soon as it is done: a study killed or interrupted resumes when run
again with the same --out (or none), reusing the points whose inputs are unchanged.

built-in studies:
  volumes-cache  S0: layout (LVM linear, LVM stripe, md RAID 0) x QEMU cache (none,
                 writeback) x workload (read, randread, randrw 50:50) x block size
                 (32k..8m) on two 7200 rpm SATA disks
  mcfq           S1: four VMs with weights 10:7:4:1 on one Samsung 840 Pro, clean or
                 aged; parts gc (VM1 sequential vs VM2 random writes), bw-window
                 (MCFQ's BW = 5, 10, 20 s: ratio timelines), error-rates (CFQ vs MCFQ on
                 fileserver, varmail, MSN, Exchange, Financial)

examples:
  vmio study volumes-cache
  vmio study volumes-cache --seed 7 --out results/vc --force
  vmio study volumes-cache --quick
  vmio study volumes-cache --jobs-from my-copy-of-studies/volumes-cache
  vmio study mcfq --part error-rates --quick
  vmio study volumes-cache --dask local:4
  vmio study volumes-cache --dask tcp://10.0.0.5:8786 --dask-timeout 30
  vmio study path/to/experiment.toml
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio study` to the subcommands `sub`."""
    st = sub.add_parser(
        "study",
        help="run a built-in or custom study (a sweep with tables, figure, calibration)",
        description="Run study STUDY: a built-in study's name, a study directory or an "
        "experiment.toml path.",
        epilog=STUDY_EPILOG,
        formatter_class=Formatter,
    )
    st.add_argument(
        "study",
        metavar="STUDY",
        nargs="?",
        help="built-in study name (volumes-cache), directory or experiment file",
    )
    st.add_argument(
        "--seed",
        type=parse_seed,
        metavar="N",
        help="seed of every point (default: the experiment file's seed)",
    )
    st.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (default: vmio-results/<study>/, see below)",
    )
    st.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out directory, replacing earlier results",
    )
    st.add_argument(
        "--quick",
        action="store_true",
        help="short runs on fewer points (the experiment's [quick] section)",
    )
    st.add_argument(
        "--jobs-from",
        type=Path,
        metavar="DIR",
        help="take experiment.toml, its stack and fio job from DIR (e.g. an "
        "edited copy of studies/volumes-cache) instead of the built-in study",
    )
    st.add_argument(
        "--parallel",
        type=int_in(1, 1024),
        metavar="N",
        help="points simulated at once, 1..1024 (default: number of CPUs)",
    )
    st.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run the points as Dask tasks: on the scheduler at ADDRESS (tcp://HOST:PORT), "
        "or on local[:N], a cluster of N worker processes here (default N: the CPUs); "
        f"needs {cluster.INSTALL} (see docs/cluster.md)",
    )
    st.add_argument(
        "--dask-timeout",
        type=seconds_in(0.1, 3600.0),
        default=cluster.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="--dask: seconds to wait for the scheduler, then for a first worker, 0.1..3600 "
        f"(default: {cluster.DEFAULT_TIMEOUT:g})",
    )
    st.add_argument(
        "--part",
        action="append",
        metavar="PART",
        help="run only this part of a study of several parts (repeatable; see --list)",
    )
    st.add_argument(
        "--bench-fio-layout",
        action="store_true",
        help="also write every point's JSON in bench-fio's layout under bench-fio/ (for "
        "fio-plot; needs axes that bench-fio's file names tell apart)",
    )
    st.add_argument(
        "--max-points",
        type=int_in(1, 1 << 40),
        metavar="N",
        help="refuse a grid of more than N points before anything runs (default: the "
        f"experiment's max_points, else {experiment.MAX_POINTS:,})",
    )
    sim_command.add_limit_arguments(st)
    st.add_argument("--list", action="store_true", help="list the built-in studies and exit")
    st.add_argument(
        "--engine",
        choices=("sim", "real"),
        default="sim",
        help="sim: simulate each point; real: run it on this machine with fio (default: sim)",
    )
    st.add_argument(
        "--real-dir",
        type=Path,
        metavar="DIR",
        help="--engine real: where the devices' image files go (default: ./vmio-real)",
    )
    st.add_argument(
        "--real-size",
        type=size_in(1 << 20, 1 << 50, "1m..1p"),
        metavar="SIZE",
        help="--engine real: each device's image file (default: 1g)",
    )
    st.add_argument(
        "--substitute",
        action="store_true",
        help="--engine real: run points whose devices this machine lacks on files anyway",
    )
    st.add_argument(
        "--real-mode",
        choices=("auto", "host", "serve", "guest"),
        help="--engine real: host runs the job on the host, serve through vmio serve and "
        "fio's nbd engine, guest in a QEMU guest whose disk is the vmio serve export "
        "(default: auto, host for a native stack, serve for a VM stack)",
    )
    st.add_argument(
        "--real-accel",
        choices=qemuguest.ACCELS,
        help="--real-mode guest: the guest's accelerator; auto is kvm when a probe boot "
        f"under KVM ends within {qemuguest.PROBE_TIMEOUT:g} s, else tcg, whose timings are "
        "functional-only (default: auto)",
    )
    st.set_defaults(func=cmd_study)


def cmd_study(args: argparse.Namespace) -> int:
    if args.list:
        for name in experiment.builtin_studies():
            st = experiment.load_study(name)
            ref = st.parts[0].reference
            print(f"{name:16} {st.title} [{ref}]")
            if st.multipart:
                for exp in st.parts:
                    print(f"  --part {exp.path.stem:12} {exp.title}")
        return 0
    if args.study is None and args.jobs_from is None:
        raise VmioError(
            "missing STUDY (built-in: "
            f"{', '.join(experiment.builtin_studies())}); see 'vmio study --help'"
        )
    _check_dask(args)
    engine = _real_engine(args)
    st = experiment.load_study(args.jobs_from if args.jobs_from is not None else args.study)
    parts = [st.part(p) for p in args.part] if args.part else st.parts
    for exp in parts:  # every part's grid is bounded before any point runs
        exp.check_grid(args.quick, args.max_points)
    if args.dask is None:
        return _run_parts(args, st, parts, engine, None)
    # One cluster for every part; connected lazily (a run whose points are all stored
    # needs none).
    with cluster.Lazy(args.dask, args.dask_timeout) as dask:
        return _run_parts(args, st, parts, engine, dask)


def _check_dask(args: argparse.Namespace) -> None:
    if args.dask is None:
        if args.dask_timeout != cluster.DEFAULT_TIMEOUT:
            raise VmioError("--dask-timeout needs --dask")
        return
    if args.engine == "real":
        raise VmioError("--dask runs simulated points only; --engine real measures this machine")
    if args.parallel is not None:
        raise VmioError(
            "--parallel and --dask: the Dask workers run the points (--dask local:N for N "
            "worker processes here)"
        )
    cluster.parse_spec(args.dask)  # a bad address is refused before anything runs


def _run_parts(args, st, parts, engine, dask) -> int:
    base = args.out
    if st.multipart:
        if base is None:
            base = runner.next_free_dir(DEFAULT_RESULTS / st.name, st.name)
        runner.prepare_output_dir(base, force=args.force, name=st.name)
    parallel = args.parallel or runner.default_parallelism()
    # Several parts share one pool of threads, every part's points submitted at once.
    shared = len(parts) > 1 and parallel > 1 and engine is None and dask is None
    pool = runner.PointPool(parallel) if shared else None
    try:
        return _run_parts_in(args, st, parts, engine, dask, base, parallel, pool)
    finally:
        if pool is not None:
            pool.close()


def _run_parts_in(args, st, parts, engine, dask, base, parallel, pool) -> int:
    limits = sim_command.limits_of(args)
    if pool is not None:
        for exp in parts:
            stored = base / exp.path.stem
            runner.presubmit(
                exp,
                pool,
                seed=args.seed,
                quick=args.quick,
                store=None if args.force else stored,
                max_points=args.max_points,
                max_events=limits.max_events,
                max_sim_time=limits.max_sim_time,
            )
    for i, exp in enumerate(parts):
        if st.multipart:
            print(
                f"{'' if i == 0 else chr(10)}=== study {st.name}, part {i + 1}/{len(parts)}: "
                f"{exp.path.stem} ({exp.title}) ===",
                flush=True,
            )
        res, out = run_study_to_dir(
            exp,
            seed=args.seed,
            quick=args.quick,
            out=base / exp.path.stem if st.multipart else args.out,
            force=args.force,
            parallel=parallel,
            finish=not st.multipart,
            engine=engine,
            bench_fio_layout=args.bench_fio_layout,
            max_points=args.max_points,
            dask=dask,
            limits=limits,
            pool=pool,
        )
        for note in res.notes:
            print(note, file=sys.stderr)
        sys.stdout.write(tables.summary_text(res))
        files = [f for f in (*runner.OUTPUT_FILES, runner.SKIPPED_FILE) if (out / f).is_file()]
        print(f"\nResults in {out}/: {', '.join(files)}, json/", flush=True)
    if st.multipart:  # every part is written: the study is finished
        for exp in parts:
            runner.finish_output_dir(base / exp.path.stem)
        runner.finish_output_dir(base)
    return 0


def _real_engine(args: argparse.Namespace):  # -> realengine.Options | None
    """--engine real's options (its note on --parallel printed), None for the simulator."""
    if args.engine != "real":
        if args.real_dir is not None or args.real_size is not None or args.substitute:
            raise VmioError("--real-dir, --real-size and --substitute need --engine real")
        if args.real_mode is not None or args.real_accel is not None:
            raise VmioError("--real-mode and --real-accel need --engine real")
        return None
    if args.real_accel is not None and args.real_mode != "guest":
        raise VmioError("--real-accel needs --real-mode guest")
    opts = realengine.Options(
        args.real_dir or Path("vmio-real"),
        args.real_size or realengine.DEFAULT_SIZE,
        args.substitute,
        args.real_mode or "auto",
        args.real_accel or "auto",
    )
    if args.parallel not in (None, 1):
        print(
            f"vmio: note: --engine real runs one point at a time (not --parallel {args.parallel})",
            file=sys.stderr,
        )
    realengine.Engine(opts)  # fio is there
    opts.real_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"vmio: real engine on {machine.short(machine.describe([opts.real_dir.resolve()]))}",
        file=sys.stderr,
    )
    return opts


def run_study_to_dir(
    exp,
    *,
    seed: int | None,
    quick: bool,
    out: Path | None,
    force: bool,
    parallel: int,
    progress: TextIO | None = None,
    finish: bool = True,
    on_point: Callable | None = None,
    engine=None,
    bench_fio_layout: bool = False,
    max_points: int | None = None,
    dask=None,
    limits: Limits | None = None,
    pool: runner.PointPool | None = None,
):
    """Run a study and write its outputs; returns (StudyResult, output directory).

    Each finished point is saved in `out` as soon as it is done; an unfinished run of the
    same experiment in `out` (killed, interrupted) is resumed: its points are reused when
    their inputs are the same (see `runner.point_key`). The summary files are written once
    every point is done; then, with `finish`, the directory is marked finished (a later
    run refuses it unless `force`).
    """
    if out is None:
        out = runner.next_free_dir(DEFAULT_RESULTS / exp.name, exp.name)
    try:
        out = runner.prepare_output_dir(out, force=force, name=exp.name)
        res = runner.run_study(
            exp,
            seed=seed,
            quick=quick,
            parallel=parallel,
            progress=runner.STDERR if progress is None else progress,
            store=out,
            on_point=on_point,
            engine=engine,
            max_points=max_points,
            dask=dask,
            max_events=None if limits is None else limits.max_events,
            max_sim_time=None if limits is None else limits.max_sim_time,
            pool=pool,
        )
        runner.write_outputs(res, out, bench_fio_layout=bench_fio_layout)
        if finish:
            runner.finish_output_dir(out)
    except OSError as err:
        raise VmioError(f"cannot write results to '{out}': {err.strerror or err}") from None
    return res, out
