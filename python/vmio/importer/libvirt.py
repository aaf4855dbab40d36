"""libvirt's domain XML (what `virsh dumpxml` prints) as a `Domain` (vmio.importer.model).

The elements read are libvirt's (docs/formatdomain.rst, "Hard drives, floppy disks,
CDROMs", "CPU Tuning", "Block I/O Tuning", "Memory Allocation", "IOThreads Allocation"):

    <domain type='kvm|qemu|xen'>           hypervisor (qemu, TCG: modelled as kvm, noted)
    <name>, <memory>, <currentMemory>      the VM's name and memory (units: libvirt's)
    <vcpu current= cpuset=>N</vcpu>        vcpus = current or N; cpuset: the default pinning
    <cputune> vcpupin, emulatorpin, iothreadpin       [vm.cputune]
    <blkiotune> <weight>                   [[vm]] weight; <device> throttles on the disks
                                           whose source is that device, as [vm.disk.iotune]
    <os><type machine=>                    qemu_version from a versioned machine type
    <devices><disk device='disk|lun'>      one [[vm.disk]] each (cdrom, floppy: noted)
      type= file|block|volume|network|nvme; <source file|dev|pool/volume|protocol/name>
      <driver type= cache= io= iothread= discard= queues= queue_size=>
      <driver><iothreads>                  iothread-vq-mapping: [vm.disk.queue] iothreads
      <target bus='virtio|scsi|sata|ide|nvme'>  virtio-blk, virtio-scsi, ide (sata: AHCI has
                                           no model: the emulated IDE disk, noted; nvme:
                                           virtio-blk, noted)
      <iotune>                             [vm.disk.iotune], key for key (crate::throttle)
      <backingStore>                       [vm.disk.image] backing
    <controller type='scsi' model= > <driver queues= iothread=>   the SCSI disks' queues

Everything else is a note of the stack's header: the reader marks each element and attribute
it reads, and a walk over the whole tree afterwards lists every one it did not (storage and
CPU elements one per note with their line, the rest in one note), so nothing is dropped
silently. A value vmio cannot take (a queue size QEMU refuses, io='native' without
cache.direct, an unparsable number) refuses the file with one line naming the element.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from vmio.importer.model import IOTUNE_KEYS, Disk, Domain
from vmio.importer.safexml import XmlDocument, parse_file, parse_text
from vmio.sim import VmioError

UNITS = {
    "b": 1,
    "bytes": 1,
    "kb": 10**3,
    "k": 1 << 10,
    "kib": 1 << 10,
    "mb": 10**6,
    "m": 1 << 20,
    "mib": 1 << 20,
    "gb": 10**9,
    "g": 1 << 30,
    "gib": 1 << 30,
    "tb": 10**12,
    "t": 1 << 40,
    "tib": 1 << 40,
    "pb": 10**15,
    "p": 1 << 50,
    "pib": 1 << 50,
    "eb": 10**18,
    "e": 1 << 60,
    "eib": 1 << 60,
}
"""libvirt's scaled-integer units (docs/formatdomain.rst, "Memory Allocation"); no unit: KiB."""

BUS = {
    "virtio": "virtio-blk",
    "scsi": "virtio-scsi",
    "ide": "ide",
    "sata": "ide",
    "nvme": "virtio-blk",
}
DEV_PREFIX_BUS = (("vd", "virtio"), ("sd", "scsi"), ("hd", "ide"), ("xvd", "xen"))
"""libvirt's bus for a target without bus=, from the device name (virDomainDiskDefParse)."""

CACHE = ("none", "writeback", "writethrough", "directsync", "unsafe")
AIO = {"threads": "threads", "native": "native", "io_uring": "io_uring"}

STORAGE = (
    "devices/disk",
    "devices/controller",
    "cputune",
    "blkiotune",
    "iothreads",
    "iothreadids",
    "vcpu",
    "vcpus",
    "memory",
    "currentMemory",
    "maxMemory",
    "memtune",
    "memoryBacking",
    "numatune",
)
"""Paths whose unread elements are each a note of their own (with the line); the others
(graphics, network interfaces, features...) are listed together in one note."""

MAX_NUMBER = 10**15
"""The largest iotune value vmio accepts (crate::throttle)."""


class _Reader:
    """The document, with what has been read of it."""

    def __init__(self, doc: XmlDocument) -> None:
        self.doc = doc
        self.used: set[int] = set()
        self.used_attrs: set[tuple[int, str]] = set()
        self.paths: dict[int, str] = {}
        self._index(doc.root, "")

    def _index(self, el: ET.Element, path: str) -> None:
        self.paths[id(el)] = path or el.tag
        counts = Counter(c.tag for c in el)
        seen: Counter[str] = Counter()
        for c in el:
            tag = c.tag
            name = f"{tag}[{seen[tag]}]" if counts[tag] > 1 else tag
            seen[tag] += 1
            self._index(c, f"{path}/{name}" if path else name)

    def path(self, el: ET.Element) -> str:
        return self.paths.get(id(el), el.tag)

    def refuse(self, el: ET.Element, message: str) -> VmioError:
        return VmioError(f"{self.doc.path}:{self.doc.line_of(el)}: {self.path(el)}: {message}")

    def use(self, el: ET.Element | None) -> ET.Element | None:
        if el is not None:
            self.used.add(id(el))
        return el

    def use_all(self, el: ET.Element) -> None:
        """Mark `el` and everything in it read (a note already says it is left out)."""
        for e in el.iter():
            self.used.add(id(e))
            self.used_attrs.update((id(e), k) for k in e.attrib)

    def attr(self, el: ET.Element, name: str) -> str | None:
        v = el.get(name)
        if v is not None:
            self.used_attrs.add((id(el), name))
        return v

    def child(self, el: ET.Element, tag: str) -> ET.Element | None:
        return self.use(el.find(tag))

    def children(self, el: ET.Element, tag: str) -> list[ET.Element]:
        return [c for c in el.findall(tag) if self.use(c) is not None]

    def integer(self, el: ET.Element, text: str | None, what: str, lo: int, hi: int) -> int:
        t = (text or "").strip()
        try:
            v = int(t, 10)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise self.refuse(
                el, f"{what} '{t[:40]}' is not valid; accepted: an integer {lo}..={hi}"
            )
        return v

    def scaled(self, el: ET.Element, what: str) -> int:
        """A libvirt scaled integer: the element's text in the unit of its unit= (KiB)."""
        unit = (self.attr(el, "unit") or "KiB").lower()
        if unit not in UNITS:
            raise self.refuse(el, f"unit '{unit[:20]}' is not valid; accepted: {', '.join(UNITS)}")
        return self.integer(el, el.text, what, 0, (1 << 62) // UNITS[unit]) * UNITS[unit]

    def unread(self) -> tuple[list[str], list[str]]:
        """Notes for what was not read: one each for storage and CPU elements and for every
        attribute of a read element; the rest in one list."""
        own: list[str] = []
        rest: Counter[str] = Counter()
        line = self.doc.line_of

        def walk(el: ET.Element) -> None:
            p = self.path(el)
            if id(el) not in self.used:
                if any(p == s or p.startswith(s + "/") or p.startswith(s + "[") for s in STORAGE):
                    attrs = " ".join(f"{k}='{v}'" for k, v in el.attrib.items())
                    text = (el.text or "").strip()
                    shown = f"<{el.tag}{' ' + attrs if attrs else ''}>" + (
                        f"{text[:40]}" if text and not len(el) else ""
                    )
                    own.append(f"{p} (line {line(el)}): {shown[:120]}")
                else:
                    rest[_generic(p)] += 1
                return
            for k, v in el.attrib.items():
                if (id(el), k) not in self.used_attrs:
                    own.append(f"{p}@{k}='{v[:60]}' (line {line(el)})")
            for c in el:
                walk(c)

        walk(self.doc.root)
        others = [f"{p} x{n}" if n > 1 else p for p, n in sorted(rest.items())]
        return own, others


def _generic(path: str) -> str:
    """A path without its indices (devices/interface[1] -> devices/interface)."""
    return "/".join(part.split("[", 1)[0] for part in path.split("/"))


def load(path: str) -> Domain:
    """The domain of libvirt XML file `path`."""
    return read(parse_file(path))


def loads(text: str, path: str = "domain.xml") -> Domain:
    return read(parse_text(text, path))


def read(doc: XmlDocument) -> Domain:
    r = _Reader(doc)
    root = doc.root
    r.use(root)
    if root.tag != "domain":
        raise r.refuse(
            root, f"the root element is <{root.tag[:40]}>; accepted: <domain> (virsh dumpxml)"
        )
    kind = r.attr(root, "type") or ""
    if kind not in ("kvm", "qemu", "xen"):
        raise r.refuse(
            root,
            f"type='{kind[:20]}' is not modelled; accepted: kvm, qemu (TCG, modelled as kvm), xen",
        )
    name_el = r.child(root, "name")
    name = (name_el.text or "").strip() if name_el is not None else ""
    d = Domain(name=name or "vm", source=doc.path, kind="libvirt")
    d.hypervisor = "xen" if kind == "xen" else "kvm"
    if kind == "qemu":
        d.note("domain@type='qemu' (TCG, no KVM): modelled as kvm")

    _memory(r, root, d)
    _vcpus(r, root, d)
    iothread_ids = _iothreads(r, root, d)
    _cputune(r, root, d)
    os_el = r.child(root, "os")
    if os_el is not None:
        t = r.child(os_el, "type")
        if t is not None:
            d.machine = r.attr(t, "machine")
            arch = r.attr(t, "arch")
            if arch not in (None, "x86_64", "i686"):
                d.note(f"os/type@arch='{arch}': modelled as an x86-64 KVM host's costs")
    devices = r.child(root, "devices")
    controllers = _scsi_controllers(r, devices) if devices is not None else {}
    if devices is not None:
        for el in devices.findall("disk"):
            disk = _disk(r, el, d, controllers, iothread_ids)
            if disk is not None:
                d.disks.append(disk)
    _blkiotune(r, root, d)
    if not d.disks:
        where = devices if devices is not None else root
        raise r.refuse(
            where,
            "no disk vmio can model; accepted: <disk device='disk'> (or 'lun') with "
            "<target bus='virtio|scsi|sata|ide|nvme'> and a file, block, volume, network or "
            "nvme source",
        )
    own, others = r.unread()
    for n in own:
        d.note(n)
    if others:
        d.note("not storage I/O, not modelled: " + ", ".join(others))
    return d


def _memory(r: _Reader, root: ET.Element, d: Domain) -> None:
    mem = r.child(root, "memory")
    cur = r.child(root, "currentMemory")
    if mem is not None:
        d.memory = r.scaled(mem, "memory")
    if cur is not None:
        c = r.scaled(cur, "currentMemory")
        if d.memory is None or c < d.memory:
            if d.memory is not None:
                d.note(f"currentMemory {c} bytes below memory {d.memory}: the current is modelled")
            d.memory = c
    if d.memory is not None:
        d.memory = -(-d.memory // 4096) * 4096


def _vcpus(r: _Reader, root: ET.Element, d: Domain) -> None:
    v = r.child(root, "vcpu")
    if v is None:
        return
    n = r.integer(v, v.text, "vcpu", 1, 4096)
    cur = r.attr(v, "current")
    if cur is not None:
        n = min(n, r.integer(v, cur, "vcpu@current", 1, 4096))
    d.vcpus = n
    placement = r.attr(v, "placement")
    if placement == "auto":
        d.note("vcpu@placement='auto' (numad): not modelled, vCPUs unpinned")
    cpuset = r.attr(v, "cpuset")
    if cpuset:
        d.vcpupin = {i: cpuset for i in range(n)}
        d.emulatorpin = cpuset


def _iothreads(r: _Reader, root: ET.Element, d: Domain) -> set[str]:
    ids: set[str] = set()
    el = r.child(root, "iothreads")
    if el is not None:
        n = r.integer(el, el.text, "iothreads", 0, 1 << 16)
        ids = {str(i) for i in range(1, n + 1)}
    idel = r.child(root, "iothreadids")
    if idel is not None:
        for t in r.children(idel, "iothread"):
            i = r.attr(t, "id")
            if i is not None:
                ids.add(i)
    return ids


def _cputune(r: _Reader, root: ET.Element, d: Domain) -> None:
    ct = r.child(root, "cputune")
    if ct is None:
        return
    for p in r.children(ct, "vcpupin"):
        v = r.attr(p, "vcpu")
        s = r.attr(p, "cpuset")
        if v is None or s is None:
            raise r.refuse(p, "needs vcpu= and cpuset=")
        i = r.integer(p, v, "vcpupin@vcpu", 0, 4095)
        if i < d.vcpus:
            d.vcpupin[i] = s
        else:
            d.note(f"{r.path(p)}: vCPU {i} is not online ({d.vcpus} vCPUs)")
    e = r.child(ct, "emulatorpin")
    if e is not None:
        s = r.attr(e, "cpuset")
        if s:
            d.emulatorpin = s
    for p in r.children(ct, "iothreadpin"):
        t = r.attr(p, "iothread")
        s = r.attr(p, "cpuset")
        if t is None or s is None:
            raise r.refuse(p, "needs iothread= and cpuset=")
        d.iothreadpin[t] = s


def _blkiotune(r: _Reader, root: ET.Element, d: Domain) -> None:
    b = r.child(root, "blkiotune")
    if b is None:
        return
    w = r.child(b, "weight")
    if w is not None:
        d.weight = r.integer(w, w.text, "blkiotune/weight", 10, 1000)
    for dev in r.children(b, "device"):
        pe = r.child(dev, "path")
        path = (pe.text or "").strip() if pe is not None else ""
        limits: dict[str, int] = {}
        for key in ("read_bytes_sec", "write_bytes_sec", "read_iops_sec", "write_iops_sec"):
            k = r.child(dev, key)
            if k is not None:
                limits[key] = r.integer(k, k.text, f"blkiotune/device/{key}", 0, MAX_NUMBER)
        dw = r.child(dev, "weight")
        if dw is not None:
            d.note(f"{r.path(dw)}: a per-device weight ({path}): vmio weighs whole VMs")
        if not limits:
            continue
        disks = [x for x in d.disks if x.source == path]
        for x in disks:
            if x.iotune:
                d.note(
                    f"{r.path(dev)}: {x.name} has its own <iotune>; the cgroup limits on "
                    f"{path} are not modelled"
                )
                continue
            x.iotune = {k: v for k, v in limits.items() if v}
            d.note(
                f"{r.path(dev)}: the cgroup limits on {path} modelled as QEMU throttling of "
                f"{x.name} (the same rates, before the host cache instead of after it)"
            )
        if not disks:
            d.note(f"{r.path(dev)}: no disk has source {path}; its cgroup limits are not modelled")


def _scsi_controllers(r: _Reader, devices: ET.Element) -> dict[str, ET.Element]:
    return {
        c.get("index", "0"): c for c in devices.findall("controller") if c.get("type") == "scsi"
    }


def _disk(
    r: _Reader,
    el: ET.Element,
    d: Domain,
    controllers: dict[str, ET.Element],
    iothread_ids: set[str],
) -> Disk | None:
    where = r.path(el)
    device = el.get("device", "disk")
    if device not in ("disk", "lun"):
        d.note(f"{where}: device='{device}' (not a disk): not modelled")
        r.use_all(el)
        return None
    r.use(el)
    r.attr(el, "device")
    kind = r.attr(el, "type") or "file"
    target = r.child(el, "target")
    dev = (r.attr(target, "dev") if target is not None else None) or f"disk{len(d.disks)}"
    bus = r.attr(target, "bus") if target is not None else None
    if bus is None:
        bus = next((b for p, b in DEV_PREFIX_BUS if dev.startswith(p)), "ide")
    if bus not in BUS:
        d.note(
            f"{where} ({dev}): target bus='{bus}' is not modelled (accepted: virtio, scsi, "
            "sata, ide, nvme); the disk is left out"
        )
        r.use_all(el)
        return None
    disk = Disk(name=dev, where=where, interface=BUS[bus], source_kind=kind)
    if bus == "sata":
        d.note(f"{where} ({dev}): bus='sata' (AHCI) modelled as the emulated IDE disk")
    if bus == "nvme":
        d.note(
            f"{where} ({dev}): bus='nvme' (QEMU's emulated NVMe controller) modelled as virtio-blk"
        )
    if device == "lun":
        d.note(f"{where} ({dev}): device='lun' (SCSI passthrough) modelled as a virtio-scsi disk")
    if kind not in ("file", "block", "volume", "network", "nvme"):
        d.note(f"{where} ({dev}): type='{kind}' is not modelled; the disk is left out")
        r.use_all(el)
        return None
    _source(r, el, disk)
    drv = r.child(el, "driver")
    if drv is not None:
        _driver(r, drv, disk, d, iothread_ids)
    if disk.interface == "virtio-scsi":
        _controller(r, el, disk, d, controllers)
    io = r.child(el, "iotune")
    if io is not None:
        _iotune(r, io, disk)
    bs = r.child(el, "backingStore")
    if disk.format == "qcow2":
        while bs is not None and len(bs):
            fmt_el = r.child(bs, "format")
            fmt = r.attr(fmt_el, "type") if fmt_el is not None else "raw"
            r.attr(bs, "type")
            r.attr(bs, "index")
            if fmt not in ("raw", "qcow2"):
                d.note(
                    f"{r.path(bs)}: backing format '{fmt}' is not modelled; the chain ends above it"
                )
                break
            src = r.child(bs, "source")
            if src is not None:
                for a in ("file", "dev", "name", "protocol"):
                    r.attr(src, a)
            disk.backing.append(fmt or "raw")
            bs = r.child(bs, "backingStore")
            if fmt == "raw":
                break
    elif bs is not None and len(bs):
        d.note(f"{r.path(bs)}: a backing store below a {disk.format} image is not modelled")
        r.use_all(bs)
    return disk


def _source(r: _Reader, el: ET.Element, disk: Disk) -> None:
    src = r.child(el, "source")
    if src is None:
        return
    k = disk.source_kind
    if k == "file":
        disk.source = r.attr(src, "file")
    elif k == "block":
        disk.source = r.attr(src, "dev")
    elif k == "volume":
        pool, vol = r.attr(src, "pool"), r.attr(src, "volume")
        disk.source = f"{pool}/{vol}"
    elif k == "network":
        proto, name = r.attr(src, "protocol"), r.attr(src, "name")
        disk.source = f"{proto}://{name or ''}"
    elif k == "nvme":
        disk.source = f"nvme namespace {r.attr(src, 'namespace') or '1'}"
        r.attr(src, "type")


def _driver(r: _Reader, drv: ET.Element, disk: Disk, d: Domain, iothread_ids: set[str]) -> None:
    name = r.attr(drv, "name")
    if name not in (None, "qemu"):
        d.note(f"{r.path(drv)}@name='{name}': modelled as QEMU's block layer")
    fmt = r.attr(drv, "type") or "raw"
    if fmt in ("raw", "qcow2"):
        disk.format = fmt
    else:
        d.note(f"{r.path(drv)}@type='{fmt}' ({disk.name}): format not modelled; modelled as raw")
    cache = r.attr(drv, "cache")
    if cache not in (None, "default"):
        if cache not in CACHE:
            raise r.refuse(
                drv, f"cache='{cache[:20]}' is not valid; accepted: default, {', '.join(CACHE)}"
            )
        disk.cache = cache
    io = r.attr(drv, "io")
    if io not in (None, "default"):
        if io not in AIO:
            raise r.refuse(
                drv, f"io='{io[:20]}' is not valid; accepted: default, threads, native, io_uring"
            )
        if io == "native" and disk.cache not in ("none", "directsync"):
            raise r.refuse(
                drv,
                f"io='native' with cache='{disk.cache}': QEMU refuses aio=native without "
                "cache.direct; accepted: io='native' with cache='none' or 'directsync'",
            )
        disk.aio = AIO[io]
    t = r.attr(drv, "iothread")
    if t is not None:
        if disk.interface != "virtio-blk":
            d.note(f"{r.path(drv)}@iothread on a {disk.interface} disk: not modelled")
        else:
            disk.iothread = t
            if iothread_ids and t not in iothread_ids:
                d.note(f"{r.path(drv)}@iothread='{t}' names no declared iothread")
    discard = r.attr(drv, "discard")
    if discard is not None:
        if discard not in ("unmap", "ignore"):
            raise r.refuse(drv, f"discard='{discard[:20]}' is not valid; accepted: unmap, ignore")
        disk.discard = discard
    q = r.attr(drv, "queues")
    if q is not None:
        n = r.integer(drv, q, "queues", 1, 1024)
        if disk.interface == "ide":
            d.note(f"{r.path(drv)}@queues on an IDE disk: one queue modelled")
        else:
            disk.num_queues = n
    qs = r.attr(drv, "queue_size")
    if qs is not None:
        n = r.integer(drv, qs, "queue_size", 4, 1024)
        if n & (n - 1):
            raise r.refuse(
                drv, f"queue_size='{n}' is not valid; accepted: a power of 2 in 4..=1024"
            )
        if disk.interface == "ide":
            d.note(f"{r.path(drv)}@queue_size on an IDE disk: not modelled")
        else:
            disk.queue_size = n
    its = r.child(drv, "iothreads")
    if its is not None:
        threads = r.children(its, "iothread")
        for t_el in threads:
            r.attr(t_el, "id")
            for q_el in r.children(t_el, "queue"):
                r.attr(q_el, "id")
        if threads and disk.interface == "virtio-blk":
            disk.iothreads = len(threads)
            disk.iothread = disk.iothread or threads[0].get("id")
            d.note(
                f"{r.path(its)} ({disk.name}): iothread-vq-mapping over {len(threads)} "
                "iothreads: queues spread round robin (vmio's rule), needs QEMU 8.2"
            )


def _controller(
    r: _Reader, el: ET.Element, disk: Disk, d: Domain, controllers: dict[str, ET.Element]
) -> None:
    addr = el.find("address")
    index = addr.get("controller", "0") if addr is not None and addr.get("type") == "drive" else "0"
    c = controllers.get(index)
    if c is None:
        d.note(
            f"{disk.where} ({disk.name}): no <controller type='scsi' index='{index}'>: "
            "virtio-scsi assumed"
        )
        return
    r.use(c)
    r.attr(c, "type")
    r.attr(c, "index")
    model = r.attr(c, "model")
    if model != "virtio-scsi":
        d.note(f"{r.path(c)}: SCSI controller model '{model or 'default'}' modelled as virtio-scsi")
        return
    drv = r.child(c, "driver")
    if drv is None:
        return
    q = r.attr(drv, "queues")
    if q is not None:
        disk.num_queues = r.integer(drv, q, "queues", 1, 1024)
    t = r.attr(drv, "iothread")
    if t is not None:
        d.note(
            f"{r.path(drv)}@iothread='{t}': the virtio-scsi controller's iothread is not "
            f"modelled ({disk.name} is served by the main loop)"
        )


def _iotune(r: _Reader, io: ET.Element, disk: Disk) -> None:
    for c in io:
        if c.tag in IOTUNE_KEYS:
            r.use(c)
            v = r.integer(c, c.text, c.tag, 0, MAX_NUMBER)
            if v:
                disk.iotune[c.tag] = v
        elif c.tag == "group_name":
            r.use(c)
            g = (c.text or "").strip()
            if g:
                disk.iotune["group_name"] = g
    if disk.iotune and set(disk.iotune) <= {"group_name", "size_iops_sec"}:
        disk.iotune = {}
