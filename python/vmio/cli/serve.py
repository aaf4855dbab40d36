"""`vmio serve`: a stack's VM disks served over NBD until SIGINT/SIGTERM (the Rust server,
through `vmio.real.serve`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, int_in, seconds_in, size_in
from vmio.real import serve
from vmio.sim import VmioError

SERVE_EPILOG = """\
Every [[vm.disk]] of the stack is an NBD export named VM/DISK ('vm1/disk0'; 'vm1' alone is
the VM's first disk; the empty name the first export). Each [[device]] of a served volume
needs path = "FILE or /dev/BLOCKDEV" and, for a file that may not exist yet, size = "1g"
(missing files are created sparse). Requests are mapped by the volume's layout, ordered by
the stack's [scheduler] (cfq/mcfq use the VMs' weights) and executed with the disk's QEMU
cache mode:
  none          O_DIRECT; FLUSH = fdatasync
  writeback     host page cache; FLUSH = fdatasync
  writethrough  O_DSYNC
  directsync    O_DIRECT + O_DSYNC
  unsafe        page cache, FLUSH and FUA ignored: UNSAFE, a host crash loses acknowledged data
  pdc           writeback, but writes detected as the guest's journal (a circular log with
                flushes; [pdc] table) go around the page cache: O_DIRECT, or RWF_DONTCACHE
                when unaligned (the startup line says whether the kernel has it)
SIGINT/SIGTERM: finish the requests in flight, flush, remove the socket, print statistics;
connections still open after --shutdown-grace are closed (a second signal: at once).
SIGUSR1: write the statistics file and print the statistics.
Bounds: at most --max-connections clients (more are refused with NBD_REP_ERR_POLICY), at most
--max-conn-payload / --max-total-payload bytes of payload in flight (past them a connection is
not read until its replies drain), --handshake-timeout and --idle-timeout. Backing files are
locked as QEMU locks images: a file another vmio serve or QEMU has open for writing is refused.

examples:
  vmio serve --stack stack.toml --socket /tmp/vmio.sock
  nbdinfo --list 'nbd+unix:///?socket=/tmp/vmio.sock'
  qemu-img info 'nbd+unix:///vm1/disk0?socket=/tmp/vmio.sock'
  fio --ioengine=nbd --uri='nbd+unix:///vm1?socket=/tmp/vmio.sock' --rw=randread --name=j
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio serve` to the subcommands `sub`."""
    sv = sub.add_parser(
        "serve",
        help="serve a stack's VM disks over NBD (the real engine)",
        description="Serve every VM disk of a stack file over NBD until SIGINT/SIGTERM.",
        epilog=SERVE_EPILOG,
        formatter_class=Formatter,
    )
    sv.add_argument("--stack", required=True, type=Path, metavar="STACK.toml")
    where = sv.add_mutually_exclusive_group()
    where.add_argument(
        "--socket", type=Path, metavar="PATH", help="Unix socket (default: ./vmio.sock)"
    )
    where.add_argument("--tcp", type=int, metavar="PORT", help="TCP port on 127.0.0.1 instead")
    sv.add_argument(
        "--create",
        action="store_true",
        help="set every backing file to its device's size (extends or TRUNCATES)",
    )
    sv.add_argument(
        "--stats-file", type=Path, metavar="PATH", help="write statistics (JSON) every second"
    )
    sv.add_argument(
        "--queue-depth",
        type=int_in(1, 1024),
        default=32,
        metavar="N",
        help="requests each backing file's scheduler may have outstanding (1..1024, default 32)",
    )
    sv.add_argument(
        "--workers", type=int_in(1, 1024), default=32, metavar="N", help="I/O threads (1..1024)"
    )
    sv.add_argument(
        "--max-connections",
        type=int_in(1, 4096),
        default=256,
        metavar="N",
        help="connections at once; more are refused with NBD_REP_ERR_POLICY (default 256)",
    )
    sv.add_argument(
        "--max-conn-payload",
        type=size_in(32 << 20, 1 << 40, "32m..1t"),
        default=64 << 20,
        metavar="SIZE",
        help="payload bytes in flight per connection; past it that connection is not read "
        "until its replies drain (default 64m)",
    )
    sv.add_argument(
        "--max-total-payload",
        type=size_in(32 << 20, 1 << 40, "32m..1t"),
        default=1 << 30,
        metavar="SIZE",
        help="payload bytes in flight in all connections (default 1g)",
    )
    sv.add_argument(
        "--handshake-timeout",
        type=seconds_in(0.001, 3600),
        default=10.0,
        metavar="S",
        help="seconds a client has to finish the handshake (default 10)",
    )
    sv.add_argument(
        "--idle-timeout",
        type=seconds_in(0, 86400),
        default=300.0,
        metavar="S",
        help="close a connection that moves no byte for S seconds while the server waits on "
        "it mid-request or to take its replies; an idle guest with nothing in flight is kept "
        "(0: never; default 300)",
    )
    sv.add_argument(
        "--shutdown-grace",
        type=seconds_in(0, 3600),
        default=10.0,
        metavar="S",
        help="on SIGINT/SIGTERM, seconds to wait for connections before closing them (default 10)",
    )
    sv.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="record every served request as a fio iolog v3 (microseconds since the start, "
        "export, read/write/trim/sync, offset, length; a FUA write is followed by 'datasync "
        "0 0') that fio --read_iolog and vmio sim (read_iolog=) replay; an existing FILE is "
        "refused unless --trace-overwrite",
    )
    sv.add_argument(
        "--trace-max-bytes",
        type=size_in(1 << 10, 16 << 40, "1k..16t"),
        default=1 << 30,
        metavar="SIZE",
        help="the trace stops growing at SIZE, with one warning (default 1g)",
    )
    sv.add_argument(
        "--trace-overwrite", action="store_true", help="let --trace replace an existing file"
    )
    sv.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if args.tcp is not None and not 0 <= args.tcp <= 65535:
        raise VmioError(f"--tcp {args.tcp}: must be a port number 0..65535")
    if args.trace is None and (args.trace_overwrite or args.trace_max_bytes != 1 << 30):
        raise VmioError("--trace-max-bytes and --trace-overwrite need --trace FILE")
    snaps = serve.serve(
        args.stack,
        socket_path=args.socket,
        tcp=args.tcp,
        create=args.create,
        stats_file=args.stats_file,
        queue_depth=args.queue_depth,
        workers=args.workers,
        max_connections=args.max_connections,
        max_conn_payload=args.max_conn_payload,
        max_total_payload=args.max_total_payload,
        handshake_timeout=args.handshake_timeout,
        idle_timeout=args.idle_timeout,
        shutdown_grace=args.shutdown_grace,
        trace=args.trace,
        trace_max_bytes=args.trace_max_bytes,
        trace_overwrite=args.trace_overwrite,
    )
    print("vmio: shut down", file=sys.stderr)
    print(serve.stats_table(snaps), file=sys.stderr)
    return 0
