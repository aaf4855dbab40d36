"""`vmio calibrate`: fit the flash device model to this machine's disk (`vmio.real.calibrate`),
or, with `--serve-path`, the NBD path's [nbd] table (`vmio.real.servepath`), or, with
`--host-fs`, the host filesystem's alloc_cost and convert_cost and the host kernel's CPU per
direct I/O request (`vmio.real.hostfscal`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, seconds_in
from vmio.real import hostfscal, servepath
from vmio.real.calibrate import (
    DEFAULT_BUDGET_S,
    DEFAULT_OUT,
    DEFAULT_TARGET,
    MAX_BUDGET_S,
    MIN_SIZE,
    QUICK_BUDGET_S,
    CalibrateError,
    run,
    size_name,
    summary,
)

EPILOG = """\
The battery (fio, libaio, direct=1) runs on TARGET: sequential reads and writes of 4k..1m at
QD 1, 8, 32, random 4k at QD 1..32, a 70/30 random 4k mix, 50/50 sequential mixes of 64k
and 256k at QD 8 and an fdatasync point; the fit maps
them onto the simulator's `flash` device model. DIR receives stack.toml (a native stack of
this machine with the fitted device), measurements.json (every point, fio's JSON) and
fit.txt (measured vs the model's closed form vs vmio sim, with relative errors).

A block device is only read unless --write (which destroys its contents, and is refused on
a mounted device or one holding a filesystem signature unless --force).

examples:
  vmio calibrate                              ./vmio-calibrate.tmp, 1 GiB, 5 minutes
  vmio calibrate /var/tmp/cal.tmp --quick     a one-minute subset
  vmio calibrate /dev/nvme0n1 -o nvme         reads only, on the raw device
  vmio calibrate /dev/shm/x --size 64m --budget 30
  vmio calibrate --serve-path --quick -o nbd  the NBD path's [nbd] table (10 s, /dev/shm)
  vmio calibrate --serve-path --server qemu-storage-daemon
                                              QEMU's NBD server's table: serve-path-qsd.toml
  vmio calibrate --host-fs --quick            the host filesystem's costs of /var/tmp
                                              (ext4 or xfs): vmio-calibration/host-fs.toml
  vmio calibrate --host-fs --dir /srv/images -o cal --force
  vmio sim --stack vmio-calibration/stack.toml job.fio
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio calibrate TARGET` to the subcommands `sub`."""
    c = sub.add_parser(
        "calibrate",
        help="measure this machine's disk with fio and fit the flash device model",
        description="Run a battery of fio jobs on TARGET (a file, created and removed, or a "
        "block device) and fit the simulator's `flash` device model to it.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    c.add_argument(
        "target",
        metavar="TARGET",
        nargs="?",
        type=Path,
        default=DEFAULT_TARGET,
        help=f"a file (default ./{DEFAULT_TARGET}) or a block device /dev/...",
    )
    c.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT,
        help=f"output directory (default ./{DEFAULT_OUT}/; refused if it exists unless --force; "
        "--host-fs: only its host-fs.toml and host-fs.json are refused)",
    )
    c.add_argument("--quick", action="store_true", help="a subset in short runs (60 s budget)")
    c.add_argument(
        "--budget",
        type=seconds_in(0, MAX_BUDGET_S),  # the battery's own minimum: check_budget
        metavar="S",
        help=f"seconds for the whole run (default {DEFAULT_BUDGET_S:.0f}, --quick "
        f"{QUICK_BUDGET_S:.0f})",
    )
    c.add_argument(
        "--size",
        metavar="SIZE",
        help="bytes of the file or of the device's region (default 1g, 256m on tmpfs; "
        f"at least {size_name(MIN_SIZE)})",
    )
    c.add_argument(
        "--write", action="store_true", help="on a block device: run the writes too (destroys it)"
    )
    c.add_argument(
        "--force",
        action="store_true",
        help="replace DIR, overwrite an existing TARGET file, write to a device in use; "
        "--host-fs: overwrite DIR/host-fs.toml and host-fs.json",
    )
    c.add_argument(
        "--accept-bounds",
        action="store_true",
        help="write stack.toml even when a fitted parameter sits at one of its physical "
        "bounds (the fit is refused otherwise; fit.txt names the parameter and bound)",
    )
    c.add_argument(
        "--serve-path",
        action="store_true",
        help="instead: measure the NBD path (fio's nbd engine into vmio serve over a RAM "
        "image) and fit its [nbd] table into DIR/serve-path.toml (--quick 10 s, default 30 s; "
        "vmio.real.servepath)",
    )
    c.add_argument(
        "--server",
        metavar="SERVER",
        help="with --serve-path: the NBD server measured, "
        f"{' or '.join(servepath.SERVERS)} (default {servepath.VMIO}; "
        "qemu-storage-daemon writes DIR/serve-path-qsd.toml, the table of the real image checks)",
    )
    c.add_argument(
        "--host-fs",
        action="store_true",
        help="instead: measure the host filesystem of --dir (ext4 or xfs) with psync 4k "
        "random writes into holes, unwritten extents and written blocks, and solve its "
        "alloc_cost and convert_cost into DIR/host-fs.toml's [volume] table, and the host "
        "kernel's CPU per direct I/O request (libaio 4k QD16, 1m QD4) into its [io_cpu] table "
        "(--quick about 45 s, default 3 to 4 minutes, much of it freeing the files; "
        "vmio.real.hostfscal)",
    )
    c.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="with --serve-path: the tmpfs directory of the RAM image (default /dev/shm); "
        "with --host-fs: where the measured files go, a directory on ext4 or xfs (default "
        f"{hostfscal.DEFAULT_DIR})",
    )
    c.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.host_fs:
        return cmd_host_fs(args)
    if args.serve_path or args.dir is not None or args.server is not None:
        return cmd_serve_path(args)
    cal = run(
        args.target,
        args.out,
        quick=args.quick,
        budget_s=args.budget,
        write=args.write,
        size=args.size,
        force=args.force,
        accept_bounds=args.accept_bounds,
    )
    sm = summary(cal.params, cal.points, cal.simulated)
    p = cal.params
    print(f"flash model of {args.target}: " + ", ".join(f"{k}={v}" for k, v in p.items()))
    for n in cal.notes:
        print(f"note: {n}")
    print(
        f"median |error| of bandwidth: model {100 * sm['bw_model']:.1f} %, vmio sim "
        f"{100 * sm['bw_sim']:.1f} %; written: {cal.stack_path}, "
        f"{cal.out_dir / 'measurements.json'}, {cal.out_dir / 'fit.txt'}"
    )
    return 0


def cmd_serve_path(args: argparse.Namespace) -> int:
    """`vmio calibrate --serve-path [--server S] [--dir DIR] [--quick] [--budget S] [-o OUT]
    [--force]`."""
    if not args.serve_path:
        if args.server is not None:
            raise CalibrateError(
                f"--server {args.server}: only with --serve-path (the NBD server measured)"
            )
        raise CalibrateError(
            f"--dir {args.dir}: only with --serve-path (the RAM image's tmpfs) or --host-fs "
            "(where the measured files go)"
        )
    server = servepath.check_server(servepath.VMIO if args.server is None else args.server)
    others = [
        f
        for f, on in (
            ("TARGET", args.target != DEFAULT_TARGET),
            ("--size", args.size),
            ("--write", args.write),
        )
        if on
    ]
    if others:
        raise CalibrateError(
            f"{', '.join(others)}: not with --serve-path, which measures a RAM image in --dir"
        )
    out = Path(args.out)
    if out.exists() and not args.force:
        raise CalibrateError(f"output directory {out} exists; pass --force to overwrite it")
    sp = servepath.measure(
        args.dir or servepath.DEFAULT_DIR,
        out,
        args.quick,
        args.budget,
        force=args.force,
        server=server,
    )
    sys.stdout.write(servepath.report(sp))
    return 0


def cmd_host_fs(args: argparse.Namespace) -> int:
    """`vmio calibrate --host-fs [--dir DIR] [--quick] [-o OUT] [--force]`."""
    others = [
        f
        for f, on in (
            ("--serve-path", args.serve_path),
            ("--server", args.server is not None),
            ("TARGET", args.target != DEFAULT_TARGET),
            ("--size", args.size),
            ("--write", args.write),
            ("--budget", args.budget is not None),
        )
        if on
    ]
    if others:
        raise CalibrateError(
            f"{', '.join(others)}: not with --host-fs, which measures files it makes in --dir "
            "(its run lengths are fixed: --quick or not)"
        )
    h = hostfscal.measure(
        args.dir or hostfscal.DEFAULT_DIR, Path(args.out), args.quick, force=args.force
    )
    sys.stdout.write(hostfscal.report(h))
    return 0
