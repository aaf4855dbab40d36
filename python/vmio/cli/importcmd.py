"""`vmio import libvirt DOMAIN.xml` and `vmio import qemu -- ARGS`: a stack file from a VM
that exists (vmio.importer)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.cli.common import Formatter, write_new_file
from vmio.sim import VmioError

EPILOG = """\
examples:
  virsh dumpxml vm1 > vm1.xml && vmio import libvirt vm1.xml -o vm1.toml
  vmio import libvirt vm1.xml --probe -o vm1.toml      # the host side from this machine
  vmio import qemu -o vm1.toml -- -m 4G -smp 4 -drive file=vm1.qcow2,if=virtio,cache=none
  vmio sim --stack vm1.toml job.fio

What vmio does not model (graphics, network interfaces, an attribute it has no layer for) is
listed as a note in the stack's header comment, never dropped silently. See docs/import.md.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `vmio import` to the subcommands `sub`."""
    p = sub.add_parser(
        "import",
        help="write a stack file from a libvirt domain XML or a QEMU command line",
        description="Write a vmio stack file from a VM that exists: a libvirt domain "
        "(virsh dumpxml) or a qemu-system-x86_64 command line. Disks (interface, cache, aio, "
        "iothread, format, discard, queues, iotune), vCPUs, pinning, memory and the VM's I/O "
        "weight are mapped; everything else becomes a note in the stack's header.",
        epilog=EPILOG,
        formatter_class=Formatter,
    )
    kinds = p.add_subparsers(dest="source", metavar="SOURCE", parser_class=type(p))

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "-o",
            "--output",
            type=Path,
            metavar="STACK.toml",
            help="the stack file to write (default: standard output); refused if it exists "
            "unless --force",
        )
        q.add_argument("--force", action="store_true", help="overwrite an existing --output")
        q.add_argument(
            "--probe",
            action="store_true",
            help="read the host side from this machine: the block devices under the disks' "
            "sources (/sys/block/*/queue, lsblk, dmsetup), cores and memory",
        )

    lv = kinds.add_parser(
        "libvirt",
        help="a libvirt domain XML (virsh dumpxml)",
        formatter_class=Formatter,
        epilog=EPILOG,
    )
    lv.add_argument("domain", type=Path, metavar="DOMAIN.xml", help="the domain's XML")
    common(lv)
    qm = kinds.add_parser(
        "qemu",
        help="a qemu-system-x86_64 command line, after --",
        formatter_class=Formatter,
        epilog=EPILOG,
    )
    common(qm)
    qm.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="-- ARGS",
        help="QEMU's arguments (the program's name may come first)",
    )
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from vmio.importer import HostSide, stack_text

    if args.source is None:
        raise VmioError("missing what to import from (vmio import libvirt | qemu)")
    if args.source == "libvirt":
        from vmio.importer import libvirt

        domain = libvirt.load(str(args.domain))
    else:
        from vmio.importer import qemu

        argv = list(args.args)
        if argv and argv[0] == "--":
            argv = argv[1:]
        domain = qemu.parse(argv)
    host = HostSide()
    if args.probe:
        from vmio.importer import probe

        host = probe.probe(domain)
    name = str(args.output) if args.output else "imported.toml"
    text = stack_text(domain, host, name)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_new_file(args.output, text, args.force)
        notes = sum(line.startswith("#   - ") for line in text.splitlines())
        print(
            f"vmio: wrote {args.output} ({len(domain.disks)} disk(s), {notes} note(s) in its "
            "header)",
            file=sys.stderr,
        )
    return 0
