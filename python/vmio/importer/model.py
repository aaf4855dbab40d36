"""What an importer reads of a VM, whichever its source (libvirt's domain XML, a QEMU
command line): the VM's CPUs, memory and pinning, and each disk as QEMU runs it. Both
importers fill a `Domain`; `vmio.importer.build` turns it into a stack file, so that a domain
and the QEMU command line libvirt makes of it give the same stack.

The mapping of QEMU's cache options to a cache mode is QEMU's own table (qemu-options.hx,
-drive cache=, "cache.writeback / cache.direct / cache.no-flush"):

    mode          cache.writeback (guest sees a write cache)  cache.direct  cache.no-flush
    writeback     on                                          off           off
    none          on                                          on            off
    writethrough  off                                         off           off
    directsync    off                                         on            off
    unsafe        on                                          off           on
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IOTUNE_KEYS = tuple(
    f"{kind}_{unit}_sec{suffix}"
    for kind in ("total", "read", "write")
    for unit in ("bytes", "iops")
    for suffix in ("", "_max", "_max_length")
) + ("size_iops_sec",)
"""libvirt's `<iotune>` limits, which are vmio's `[vm.disk.iotune]` keys (crate::throttle)."""

INTERFACES = ("virtio-blk", "virtio-scsi", "ide")


def cache_mode(writeback: bool, direct: bool, no_flush: bool) -> tuple[str, str | None]:
    """The cache mode of QEMU's three cache flags, and a note when vmio has no mode for the
    combination (the nearest mode is returned)."""
    if no_flush:
        if direct:
            return "none", "cache.direct=on with cache.no-flush=on: modelled as cache='none'"
        return "unsafe", None if writeback else "cache.no-flush=on without a write cache"
    if direct:
        return ("none" if writeback else "directsync"), None
    return ("writeback" if writeback else "writethrough"), None


@dataclass
class Disk:
    name: str
    """The guest's name of the disk (libvirt's target dev: vda, sda, hda)."""
    where: str
    """Where the disk is in its source (devices/disk[0], -drive #2), for notes and errors."""
    interface: str
    """One of INTERFACES."""
    cache: str = "writeback"
    aio: str = "threads"
    format: str = "raw"
    source_kind: str = "file"
    """file, block, volume, network or nvme."""
    source: str | None = None
    """The host path (file, block) or a description (pool/volume, protocol://host/name)."""
    iothread: str | None = None
    """The id of the iothread serving the disk (None: the main loop)."""
    iothreads: int | None = None
    """Iothreads serving the disk's queues (libvirt's iothread-vq-mapping)."""
    num_queues: int | None = None
    queue_size: int | None = None
    discard: str | None = None
    """unmap or ignore (None: QEMU's default, ignore)."""
    iotune: dict[str, int | str] = field(default_factory=dict)
    backing: list[str] = field(default_factory=list)
    """Formats of the backing chain below the image, nearest first."""
    size: int | None = None


@dataclass
class Domain:
    name: str
    source: str
    """The file or command line the domain was read from (the stack header names it)."""
    kind: str
    """libvirt or qemu."""
    hypervisor: str = "kvm"
    vcpus: int = 1
    memory: int | None = None
    machine: str | None = None
    weight: int | None = None
    vcpupin: dict[int, str] = field(default_factory=dict)
    emulatorpin: str | None = None
    iothreadpin: dict[str, str] = field(default_factory=dict)
    disks: list[Disk] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


_MACHINE_VERSION = re.compile(r"-(\d+)\.(\d+)(?:\.\d+)?$")


def qemu_version_of_machine(machine: str | None) -> str | None:
    """vmio's QEMU profile (crate::vdisk::qemu::PROFILES) for a versioned machine type
    (`pc-q35-8.2`, `pc-i440fx-2.11`, `virt-7.2`): the machine's compat properties decide the
    virtio-blk defaults the profiles differ in (queue-size 256 and seg-max-adjust from 5.0,
    num-queues = vCPUs from 5.2; hw/core/machine.c's hw_compat_* tables). None: unversioned."""
    if not machine:
        return None
    m = _MACHINE_VERSION.search(machine)
    if not m:
        return None
    v = (int(m.group(1)), int(m.group(2)))
    if v < (5, 0):
        return "2.11"
    if v < (7, 2):
        return "5.2"
    if v < (8, 2):
        return "7.2"
    return "8.2"
