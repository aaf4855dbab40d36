"""`vmio validate`: calibrate, then predict held-out fio workloads and run them for real
(`vmio.real.validate`)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from vmio.cli.common import Formatter, int_in, parse_seed, seconds_in, size_in
from vmio.real import calibrate
from vmio.real.validate import (
    MAX_POINTS,
    Plan,
    calibrated_size,
    compare_dir,
    heldout,
    run,
    run_raid0,
)
from vmio.sim import VmioError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio validate` to the subcommands `sub`."""
    v = sub.add_parser(
        "validate",
        help="calibrate on a file here, then predict held-out fio workloads and run them for real",
        description="Calibrate a flash device model on TARGET (or take --calibration), draw "
        "held-out fio workloads from a seeded family (read/write mix, block size, queue depth, "
        "random or sequential; never a calibration point), simulate each on the calibrated "
        "stack and run it for real --repeat times, and compare: bandwidth and mean latency, "
        "errors, the real run-to-run spread, a figure. See docs/validation.md.",
        epilog="examples:\n  vmio validate --quick\n"
        "  vmio validate /srv/scratch/vmio.tmp --points 30 --repeat 5 -o val/\n"
        "  vmio validate --calibration vmio-calibration/ --seed 7",
        formatter_class=Formatter,
    )
    v.add_argument(
        "target",
        nargs="?",
        type=Path,
        default=Path("vmio-validate.tmp"),
        metavar="TARGET",
        help="a file on the filesystem under test (created and removed unless it exists; "
        "default ./vmio-validate.tmp)",
    )
    v.add_argument(
        "--calibration",
        type=Path,
        metavar="DIR",
        help="a finished 'vmio calibrate' directory of TARGET's filesystem (default: calibrate "
        "first, into OUT/calibration)",
    )
    v.add_argument(
        "--seed", type=parse_seed, default=1, metavar="N", help="family seed (default 1)"
    )
    v.add_argument(
        "--points",
        type=int_in(1, MAX_POINTS),
        default=None,
        metavar="N",
        help=f"held-out workloads, 1..{MAX_POINTS} (default 24; --quick 8)",
    )
    v.add_argument(
        "--repeat",
        type=int_in(1, 20),
        default=None,
        metavar="K",
        help="real runs per workload, 1..20 (default 3; --quick 2)",
    )
    v.add_argument(
        "--runtime",
        type=seconds_in(0.5, 600),
        default=None,
        metavar="S",
        help="seconds per run, 0.5..600 (default 3; --quick 1)",
    )
    v.add_argument(
        "--size",
        type=size_in(16 << 20, 1 << 40, "16m..1t"),
        default=None,
        metavar="SIZE",
        help="size of TARGET, 16m..1t (default: the calibration's)",
    )
    v.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help="output directory (default ./vmio-validation; an existing one is refused unless "
        "--force)",
    )
    v.add_argument(
        "--raid0",
        type=int_in(0, MAX_POINTS),
        default=None,
        metavar="N",
        help="also run the first N held-out workloads on a raid0 of two files of TARGET's disk "
        "through vmio serve, real and simulated (default 8; --quick 3; 0: skip)",
    )
    v.add_argument(
        "--force",
        action="store_true",
        help="replace an existing output directory (and a serve-path image left in /dev/shm)",
    )
    v.add_argument(
        "--accept-bounds",
        action="store_true",
        help="keep a calibration whose fit has a parameter at a physical bound (vmio "
        "calibrate --accept-bounds)",
    )
    v.add_argument("--quick", action="store_true", help="a short run (about a minute)")
    v.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    out = args.output or Path("vmio-validation")
    if out.exists():
        if not args.force:
            raise VmioError(f"output directory '{out}' exists; pass --force to replace it")
        shutil.rmtree(out)
    if args.target.exists() and not args.target.is_file():
        raise VmioError(
            f"TARGET '{args.target}': not a regular file; accepted: a file (block devices: "
            "vmio calibrate DEVICE --write, then a study with --engine real)"
        )
    out.mkdir(parents=True)
    if args.calibration is None:
        cal = calibrate.run(
            args.target,
            out / "calibration",
            quick=args.quick,
            size=args.size,
            accept_bounds=args.accept_bounds,
        )
        stack = Path(cal.stack_path)
    else:
        stack = args.calibration / "stack.toml"
        if not stack.is_file():
            raise VmioError(f"--calibration {args.calibration}: no stack.toml in it")
    size = args.size or calibrated_size(stack)
    plan = Plan(
        stack=stack,
        target=args.target,
        size=size,
        workloads=heldout(args.seed, args.points or (8 if args.quick else 24)),
        repeat=args.repeat or (2 if args.quick else 3),
        runtime_s=args.runtime or (1.0 if args.quick else 3.0),
        seed=args.seed,
    )
    run(plan, out)
    text = compare_dir(out, f"vmio validate: {plan.target}")
    sys.stdout.write(text)
    files = "compare.txt, compare.csv, compare.png, real/, sim/"
    n_raid = args.raid0 if args.raid0 is not None else (3 if args.quick else 8)
    if n_raid:
        run_raid0(plan, plan.workloads[:n_raid], out / "raid0", args.quick, args.force)
        text = compare_dir(out / "raid0", "vmio validate: raid0 over two files, vmio serve")
        sys.stdout.write("\nraid0 over two files of this disk, through vmio serve:\n" + text)
        files += ", raid0/"
    print(f"\nResults in {out}/: {files}", flush=True)
    return 0
