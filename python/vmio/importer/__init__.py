"""`vmio import`: a stack file from the description of a VM that exists, a libvirt domain
(vmio.importer.libvirt) or a QEMU command line (vmio.importer.qemu), with the host side
guessed from this machine on request (vmio.importer.probe).

    domain = libvirt.load("vm.xml")          # or qemu.parse(argv)
    host = probe.probe(domain) or HostSide() # --probe: this machine's devices and queues
    text = stack_text(domain, host)          # a stack file the simulator accepts, or a
                                             # VmioError of one line

Each importer fills a `model.Domain`; `build.stack_doc` is the one place a domain becomes a
stack, so a libvirt domain and the QEMU command line of the same VM give the same tables.
"""

from __future__ import annotations

import re

from vmio.importer.build import HostSide, stack_doc
from vmio.importer.model import Domain
from vmio.sim import VmioError

__all__ = ["Domain", "HostSide", "stack_text"]


def stack_text(domain: Domain, host: HostSide, name: str = "imported.toml") -> str:
    """The stack file of `domain` on `host`, checked by the simulator's own parser; a stack it
    refuses is a `VmioError` naming the source."""
    from vmio import stackfile

    doc, header = stack_doc(domain, host)
    text = stackfile.render(doc, header)
    try:
        stackfile.loads(text, name)
    except VmioError as err:
        # The simulator names the stack's field (vm[0].disk[1].iotune...): name the source's
        # disk beside it.
        message = str(err).removeprefix(f"{name}: ")
        m = re.match(r"vm\[0\]\.disk\[(\d+)\]", message)
        if m and int(m.group(1)) < len(domain.disks):
            disk = domain.disks[int(m.group(1))]
            message = f"{disk.where} ({disk.name}): {message}"
        raise VmioError(
            f"{domain.source}: the stack imported from it is refused by the simulator: {message}"
        ) from None
    return text
