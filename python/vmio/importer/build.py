"""A `Domain` (vmio.importer.model) and the host side (`HostSide`: defaults, or what
vmio.importer.probe read of this machine) as a stack file.

    [host]      cores, memory: the host side's (default: vmio's 8 cores and 32 GiB, raised
                to hold the pinned cores and the VM's memory); hypervisor kvm or xen
    [[device]], [[volume]]: one volume per storage the disks' sources sit on (the host
                side's `place`); without --probe every image file on one ext4 volume of
                the flash model's datacenter-nvme profile, each block device a device
    [scheduler] the host side's (default: blk-mq's none, an NVMe device's)
    [[vm]]      name, vcpus, memory, weight (<blkiotune><weight>), qemu_version (from a
                versioned machine type), [vm.cputune] vcpupin / emulatorpin / iothreadpin
    [[vm.disk]] per disk: interface, cache, aio, iothread, format, size and offset (disks of
                one volume one after another: the simulator refuses overlapping disks),
                [vm.disk.queue], [vm.disk.image] (discard, backing), [vm.disk.iotune]

The header lists the source, the host side's profile and every note: what the source has
that vmio does not model, and every value assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vmio.importer.model import Disk, Domain, qemu_version_of_machine

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_DISK = 32 * GIB
"""A disk's size when the source does not give it (libvirt's XML has no virtual size)."""

PROFILE_CAPACITY = {
    ("flash", "datacenter-nvme"): 256 * GIB,
    ("hdd", "hdd-7200-2tb"): 2000398934016,
    ("ssd", "samsung-840pro-256g"): 256060514304,
    ("ram", "ram"): 16 * GIB,
}
"""The capacities of the device profiles an import picks (`vmio help stack`)."""

MAX_CORES = 64
"""The most host cores a cpuset names (crate::cpu::CoreSet)."""


@dataclass
class Storage:
    """One [[volume]] and its [[device]]s, where a group of disks' sources sit."""

    name: str
    devices: list[dict[str, Any]]
    """[[device]] tables (name first)."""
    layout: str = "single"
    params: dict[str, Any] = field(default_factory=dict)
    """The layout's parameters (stripe_size, chunk)."""
    filesystem: str | None = None
    read_ahead_kb: int | None = None
    capacity: int = 256 * GIB


@dataclass
class HostSide:
    """The host: cores, memory, scheduler and where each disk's source sits."""

    cores: int | None = None
    memory: int | None = None
    scheduler: dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    profile: str = (
        "not probed: every image file on one ext4 volume of the flash model's "
        "datacenter-nvme profile (vmio calibrate fits it to a real device)"
    )
    notes: list[str] = field(default_factory=list)
    storages: dict[str, Storage] = field(default_factory=dict)

    def describe(self) -> str:
        """The host side's line of the header: how it was had, and the device profiles."""
        return self.profile

    def place(self, disk: Disk, domain: Domain) -> Storage:
        """The storage of `disk`'s source: without a probe, image files (and pool volumes,
        network disks) share one ext4 volume, and each block device is a device of its own."""
        if disk.source_kind == "block" and disk.source:
            key = f"block:{disk.source}"
            if key not in self.storages:
                n = sum(1 for k in self.storages if k.startswith("block:"))
                name = f"block{n}"
                self.storages[key] = Storage(
                    name, [{"name": name, "model": "flash", "profile": "datacenter-nvme"}]
                )
            return self.storages[key]
        if "images" not in self.storages:
            self.storages["images"] = Storage(
                "images",
                [{"name": "disk0", "model": "flash", "profile": "datacenter-nvme"}],
                filesystem="ext4",
            )
        if disk.source_kind in ("network", "volume", "nvme"):
            domain.note(
                f"{disk.where} ({disk.name}): {disk.source_kind} source {disk.source or ''} "
                "modelled as an image file on the host's volume (no network or pool latency)"
            )
        return self.storages["images"]


def _cpuset_max(cpuset: str) -> int:
    """The highest core a libvirt cpuset names (-1 when it names none that parse)."""
    top = -1
    for part in cpuset.split(","):
        part = part.strip().lstrip("^")
        for t in part.split("-"):
            if t.strip().isdigit():
                top = max(top, int(t))
    return top


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _slot(disk_size: int, disk: Disk) -> int:
    """Host bytes a disk's image chain may take: the virtual size per image of the chain,
    with qcow2's metadata (an L2 entry of 8 bytes and a refcount of 2 per 64 KiB cluster,
    docs/interop/qcow2.txt) and room for its headers."""
    images = 1 + len(disk.backing)
    per = disk_size + disk_size // 4096 + 16 * MIB if disk.format == "qcow2" else disk_size
    return _round_up(images * per, MIB)


def stack_doc(domain: Domain, host: HostSide) -> tuple[dict[str, Any], list[str]]:
    """The stack's tables and its header lines."""
    placed: list[tuple[Disk, Storage]] = [(d, host.place(d, domain)) for d in domain.disks]
    notes = list(dict.fromkeys(host.notes + domain.notes))

    # cores: enough for every pinned core
    pins = list(domain.vcpupin.values()) + list(domain.iothreadpin.values())
    if domain.emulatorpin:
        pins.append(domain.emulatorpin)
    top = max((_cpuset_max(p) for p in pins), default=-1)
    cores = min(host.cores or 8, MAX_CORES)
    if host.cores and host.cores > MAX_CORES:
        notes.append(f"this host's {host.cores} cores modelled as {MAX_CORES}, vmio's most")
    pinned = top < MAX_CORES
    if not pinned:
        notes.append(
            f"cputune pins core {top}; vmio models at most {MAX_CORES} host cores, so the "
            "vCPU, emulator and iothread pinning is left out (every thread floats)"
        )
    elif top + 1 > cores:
        if host.cores:
            notes.append(f"cputune pins core {top}, beyond this host's {host.cores} cores")
        cores = top + 1
    memory = host.memory or 32 * GIB
    if domain.memory and domain.memory + GIB > memory:
        memory = _round_up(domain.memory + GIB, GIB)
        notes.append(f"host memory raised to {memory // GIB} GiB to hold the VM's")

    doc: dict[str, Any] = {
        "host": {
            "cores": cores,
            "memory": _size(memory),
            "hypervisor": domain.hypervisor,
        }
    }

    # volumes in first-use order; disk offsets one after another on each volume
    storages: list[Storage] = []
    for _, s in placed:
        if s not in storages:
            storages.append(s)
    disk_tables: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    per_volume: dict[str, int] = {}
    for _, s in placed:
        per_volume[s.name] = per_volume.get(s.name, 0) + 1
    for d, s in placed:
        t = _disk_table(d, s.name)
        size = d.size
        if size is None and (per_volume[s.name] > 1 or d.backing):
            size = min(DEFAULT_DISK, _round_up(s.capacity // (per_volume[s.name] * 2), MIB))
            notes.append(f"{d.where} ({d.name}): size not in the source; {_size(size)} assumed")
        if size is not None:
            size = _round_up(size, 4096)
            t["size"] = _size(size)
            if per_volume[s.name] > 1:
                t["offset"] = _size(used.get(s.name, 0))
            used[s.name] = used.get(s.name, 0) + _slot(size, d)
        disk_tables.append(t)
    for s in storages:
        need = used.get(s.name, 0)
        if need > s.capacity and len(s.devices) == 1:
            s.devices[0]["capacity"] = _size(_round_up(need, GIB))
            notes.append(
                f"device {s.devices[0]['name']}: capacity raised to "
                f"{_size(_round_up(need, GIB))} to hold the disks of volume {s.name}"
            )
    doc["device"] = [dev for s in storages for dev in s.devices]
    doc["volume"] = []
    for s in storages:
        v: dict[str, Any] = {
            "name": s.name,
            "layout": s.layout,
            "devices": [dev["name"] for dev in s.devices],
        }
        v.update(s.params)
        if s.filesystem:
            v["filesystem"] = s.filesystem
        if s.read_ahead_kb is not None:
            v["read_ahead_kb"] = s.read_ahead_kb
        doc["volume"].append(v)
    doc["scheduler"] = dict(host.scheduler)

    vm: dict[str, Any] = {"name": domain.name, "vcpus": domain.vcpus}
    if domain.memory:
        vm["memory"] = _size(domain.memory)
    if domain.weight is not None:
        vm["weight"] = domain.weight
    qemu = qemu_version_of_machine(domain.machine)
    if any((d.iothreads or 0) > 1 for d in domain.disks) and qemu != "8.2":
        # a disk's queues on several iothreads (iothread-vq-mapping) exist from QEMU 9.0
        # (libvirt's formatdomain.rst, "iothreads" of <driver>): vmio's newest profile
        qemu = "8.2"
        notes.append("iothread-vq-mapping needs QEMU >= 9.0: QEMU 8.2's profile")
    if qemu:
        vm["qemu_version"] = qemu
    elif domain.machine:
        notes.append(f"machine type '{domain.machine}' has no version: QEMU 7.2's defaults assumed")
    cputune = _cputune(domain, cores) if pinned else {}
    if cputune:
        vm["cputune"] = cputune
    vm["disk"] = disk_tables
    doc["vm"] = [vm]

    header = [
        f"vmio stack imported by `vmio import {domain.kind}` from {domain.source}",
        f"domain '{domain.name}': {domain.vcpus} vCPU(s), {len(domain.disks)} disk(s) modelled",
        f"host side: {host.describe()}",
    ]
    if notes:
        header.append("not modelled by vmio, or assumed (notes):")
        header += [f"  - {n}" for n in notes]
    else:
        header.append("notes: none (every element read is modelled)")
    return doc, header


def _cputune(domain: Domain, cores: int) -> dict[str, Any]:
    """[vm.cputune]: vcpupin and iothreadpin are lists from index 0 (crate::cpu::table), so a
    vCPU or iothread the source leaves unpinned before a pinned one runs on every core."""
    every = f"0-{cores - 1}"
    t: dict[str, Any] = {}
    if domain.vcpupin:
        last = min(max(domain.vcpupin), domain.vcpus - 1)
        t["vcpupin"] = [domain.vcpupin.get(i, every) for i in range(last + 1)]
    if domain.emulatorpin:
        t["emulatorpin"] = domain.emulatorpin
    threads = [d.iothread for d in domain.disks if d.iothread is not None]
    if domain.iothreadpin and threads:
        pinned = [domain.iothreadpin.get(i) for i in threads]
        last = max((k for k, p in enumerate(pinned) if p), default=-1)
        if last >= 0:
            t["iothreadpin"] = [p or every for p in pinned[: last + 1]]
    return t


def _disk_table(d: Disk, volume: str) -> dict[str, Any]:
    t: dict[str, Any] = {"name": d.name, "volume": volume, "interface": d.interface}
    t["cache"] = d.cache
    if d.aio != "threads":
        t["aio"] = d.aio
    if d.iothread is not None:
        t["iothread"] = True
    if d.format != "raw":
        t["format"] = d.format
    queue: dict[str, Any] = {}
    if d.num_queues is not None:
        queue["num_queues"] = d.num_queues
    if d.queue_size is not None:
        queue["queue_size"] = d.queue_size
    if d.iothreads is not None:
        queue["iothreads"] = d.iothreads
    if queue:
        t["queue"] = queue
    image: dict[str, Any] = {}
    if d.discard:
        image["discard"] = d.discard
    if d.backing:
        image["backing"] = [{"format": f} for f in d.backing]
    if image:
        t["image"] = image
    if d.iotune:
        t["iotune"] = dict(d.iotune)
    return t


def _size(n: int) -> str | int:
    """A byte count as the stack file writes sizes: the largest exact unit, else bytes."""
    for unit, suffix in ((1 << 40, "t"), (GIB, "g"), (MIB, "m"), (1024, "k")):
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return n
