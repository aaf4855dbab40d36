"""A qemu-system-x86_64 command line as a `Domain` (vmio.importer.model).

The options read are QEMU's (qemu-options.hx; docs/system/invocation.rst), the values
QEMU's own option syntax (`key=value,...`, `,,` an escaped comma, the first key implied:
util/qemu-option.c) or, for -blockdev, JSON:

    -name NAME | guest=NAME           the VM's name
    -m SIZE | size=SIZE               memory (a bare number: MiB)
    -smp N | cpus=N,sockets=,cores=,threads=   vCPUs
    -machine / -M TYPE,accel=         qemu_version from a versioned type; -accel,
                                      -enable-kvm: kvm (TCG: modelled as kvm, noted)
    -object iothread,id=X             iothreads; -object throttle-group,id=G,limits.*= or x-*=
    -drive file=,format=,if=,index=,cache=,cache.direct=,cache.no-flush=,aio=,discard=,
           media=,id=, throttling: bps, iops, *_rd, *_wr, *_max, *_max_length, iops_size,
           group, throttling.*        a disk (if=virtio|scsi|ide) or a node for -device
    -blockdev driver=file|host_device|raw|qcow2|throttle|...,node-name=,filename=,file=,
           cache.direct=,cache.no-flush=,aio=,discard=,backing=,throttle-group=
    -device virtio-blk-pci|virtio-blk|scsi-hd|scsi-block|ide-hd|nvme,drive=,iothread=,
           num-queues=,queue-size=,write-cache=    the disk on its node chain
    -device virtio-scsi-pci,id=,num_queues=       the SCSI disks' queues
    -hda..-hdd FILE, a bare FILE      IDE disks

The cache mode is QEMU's table of cache.writeback (the device's write-cache), cache.direct
and cache.no-flush (vmio.importer.model.cache_mode). Disks are named as libvirt names them
(vda.. for virtio-blk, sda.. for SCSI, hda.. for IDE, in command-line order), so that a
domain and its command line give the same stack. Every other option is a note.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from vmio.importer.model import Disk, Domain, cache_mode
from vmio.sim import VmioError

FLAGS = frozenset(
    """enable-kvm nographic no-reboot no-shutdown daemonize snapshot S s no-user-config
    nodefaults no-hpet no-acpi full-screen no-fd-bootchk no-quit preconfig only-migratable
    version help usb win2k-hack no-frame alt-grab ctrl-grab enable-fips old-param
    semihosting singlestep one-insn-per-tb""".split()
)
"""QEMU options that take no value (qemu-options.hx: the ones without an argument)."""

THROTTLE = {
    "bps-total": "total_bytes_sec",
    "bps-read": "read_bytes_sec",
    "bps-write": "write_bytes_sec",
    "iops-total": "total_iops_sec",
    "iops-read": "read_iops_sec",
    "iops-write": "write_iops_sec",
}
"""QEMU's throttle limits (include/qemu/throttle-options.h) as libvirt's <iotune> keys."""

LEGACY_THROTTLE = {
    "bps": "bps-total",
    "bps_rd": "bps-read",
    "bps_wr": "bps-write",
    "iops": "iops-total",
    "iops_rd": "iops-read",
    "iops_wr": "iops-write",
}
"""-drive's legacy throttling names (blockdev.c, qemu_legacy_drive_opts's "bps", ...)."""

DISK_DEVICES = {
    "virtio-blk-pci": "virtio-blk",
    "virtio-blk": "virtio-blk",
    "virtio-blk-device": "virtio-blk",
    "virtio-blk-ccw": "virtio-blk",
    "scsi-hd": "virtio-scsi",
    "scsi-disk": "virtio-scsi",
    "scsi-block": "virtio-scsi",
    "ide-hd": "ide",
    "ide-drive": "ide",
    "nvme": "virtio-blk",
}
CDROM_DEVICES = ("ide-cd", "scsi-cd", "usb-storage", "floppy", "usb-bot", "usb-uas")
SCSI_HBAS = ("virtio-scsi-pci", "virtio-scsi", "virtio-scsi-device", "virtio-scsi-ccw")
OTHER_HBAS = ("lsi53c895a", "lsi", "megasas", "megasas-gen2", "mptsas1068", "pvscsi", "am53c974")
CACHE_MODES = {
    "none": (True, True, False),
    "writeback": (True, False, False),
    "writethrough": (False, False, False),
    "directsync": (False, True, False),
    "unsafe": (True, False, True),
}
BOOL = {"on": True, "off": False, "yes": True, "no": False, "true": True, "false": False}
SIZE = re.compile(r"^(\d+)([kmgtpe]?)b?$", re.IGNORECASE)
MAX_ARGS = 10_000


def _refuse(where: str, message: str) -> VmioError:
    return VmioError(f"qemu command line: {where}: {message}")


def split_opts(text: str, implied: str | None, where: str) -> dict[str, str]:
    """QEMU's `key=value,...` (util/qemu-option.c): `,,` is a comma in a value; a first
    item without `=` is the value of `implied` (or, without one, a flag set to on)."""
    items: list[str] = []
    cur = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c == ",":
            if text[i + 1 : i + 2] == ",":
                cur += ","
                i += 2
                continue
            items.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    items.append(cur)
    out: dict[str, str] = {}
    for k, item in enumerate(items):
        if not item:
            continue
        if "=" in item:
            key, value = item.split("=", 1)
        elif k == 0 and implied:
            key, value = implied, item
        else:
            key, value = item, "on"
        out[key] = value
    return out


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
            out[key] = v
        else:
            out[key] = v if not isinstance(v, bool) else ("on" if v else "off")
    return out


def _size(value: str, where: str, default_unit: str = "") -> int:
    m = SIZE.match(value.strip())
    if not m:
        raise _refuse(where, f"'{value[:40]}' is not a size; accepted: a number with k, M, G, T")
    unit = (m.group(2) or default_unit).lower()
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50, "e": 60}[unit]


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    try:
        v = int(str(value), 10)
    except ValueError:
        v = None
    if v is None or not lo <= v <= hi:
        raise _refuse(where, f"'{str(value)[:40]}' is not valid; accepted: an integer {lo}..={hi}")
    return v


def _bool(value: Any, where: str) -> bool:
    v = BOOL.get(str(value).lower())
    if v is None:
        raise _refuse(where, f"'{str(value)[:20]}' is not valid; accepted: on, off")
    return v


@dataclass
class _Node:
    """A -drive or a node of -blockdev: what a disk on it takes."""

    where: str
    opts: dict[str, Any]
    driver: str = ""
    used: set[str] = field(default_factory=set)

    def get(self, key: str) -> Any:
        if key in self.opts:
            self.used.add(key)
            return self.opts[key]
        return None


class _Parser:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.d = Domain(name="vm", source="", kind="qemu")
        self.nodes: dict[str, _Node] = {}
        self.drives: list[_Node] = []
        self.groups: dict[str, dict[str, str]] = {}
        self.iothreads: list[str] = []
        self.hbas: dict[str, dict[str, str]] = {}
        self.devices: list[tuple[str, dict[str, str]]] = []
        self.others: Counter[str] = Counter()
        self.accel = ""

    def run(self) -> Domain:
        argv = self.argv
        if len(argv) > MAX_ARGS:
            raise _refuse("arguments", f"{len(argv)} arguments; the limit is {MAX_ARGS}")
        shown = shlex.join(argv)
        self.d.source = "`" + (shown if len(shown) <= 200 else shown[:199] + "…") + "`"
        i = 0
        # a command line as a log or libvirt's tests show it: NAME=value environment
        # assignments, then the program
        while i < len(argv) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[i]):
            i += 1
        if i < len(argv) and not argv[i].startswith("-") and "qemu" in argv[i].rsplit("/", 1)[-1]:
            i += 1
        hd = 0
        while i < len(argv):
            a = argv[i]
            if not a.startswith("-") or a == "-":
                self._drive({"file": a, "if": "ide", "index": str(hd)}, f"image '{a}'")
                hd += 1
                i += 1
                continue
            opt = a.lstrip("-")
            if opt in FLAGS:
                if opt == "enable-kvm":
                    self.accel = "kvm"
                elif opt == "snapshot":
                    self.d.note("-snapshot: writes go to a temporary overlay; not modelled")
                else:
                    self.others[f"-{opt}"] += 1
                i += 1
                continue
            if i + 1 >= len(argv):
                raise _refuse(a, "has no value; accepted: QEMU's options with their values")
            value = argv[i + 1]
            i += 2
            self._option(opt, value, a)
        return self._finish()

    def _option(self, opt: str, value: str, shown: str) -> None:
        d = self.d
        if opt == "name":
            o = split_opts(value, "guest", shown)
            d.name = o.pop("guest", "vm") or "vm"
            self._rest(shown, o)
        elif opt == "m":
            o = split_opts(value, "size", shown)
            d.memory = _size(o.get("size", "128"), shown, "m")
            extra = sorted(set(o) - {"size"})
            if extra:
                d.note(f"-m {','.join(extra)}: memory hotplug not modelled")
        elif opt == "smp":
            o = split_opts(value, "cpus", shown)
            if "cpus" in o:
                d.vcpus = _int(o["cpus"], shown, 1, 4096)
            else:
                n = 1
                for k in ("sockets", "dies", "clusters", "cores", "threads"):
                    if k in o:
                        n *= _int(o[k], f"{shown} {k}", 1, 4096)
                d.vcpus = min(n, 4096)
        elif opt in ("machine", "M"):
            o = split_opts(value, "type", shown)
            d.machine = o.pop("type", None)
            if "accel" in o:
                self.accel = o.pop("accel").split(":")[0]
            self._rest(shown, o)
        elif opt == "accel":
            self.accel = split_opts(value, "accel", shown).get("accel", "")
        elif opt == "object":
            o = self._opts(value, "qom-type", shown)
            kind = o.get("qom-type")
            if kind == "iothread":
                self.iothreads.append(str(o.get("id", "")))
                self._rest(f"-object iothread,id={o.get('id', '')}", o, {"qom-type", "id"})
            elif kind == "throttle-group":
                self.groups[str(o.get("id", ""))] = {k: str(v) for k, v in o.items()}
            else:
                self.others[f"-object {kind}"] += 1
        elif opt == "drive":
            self._drive(split_opts(value, None, shown), f"-drive #{len(self.drives)}")
        elif opt == "blockdev":
            o = self._opts(value, None, shown)
            self._blockdev(o, f"-blockdev {o.get('node-name', '')}".strip())
        elif opt == "device":
            o = self._opts(value, "driver", shown)
            vq = o.get("iothread-vq-mapping")
            dev = {k: str(v) for k, v in o.items() if not isinstance(v, (dict, list))}
            if isinstance(vq, list):
                # iothread-vq-mapping (QEMU 9.0): the disk's queues on these iothreads
                dev["iothread-vq-mapping"] = ",".join(
                    str(m.get("iothread", "")) for m in vq if isinstance(m, dict)
                )
            self.devices.append((str(o.get("driver", "")), dev))
        elif opt in ("hda", "hdb", "hdc", "hdd"):
            self._drive({"file": value, "if": "ide", "index": str("abcd".index(opt[2]))}, shown)
        else:
            self.others[f"-{opt}"] += 1

    def _rest(
        self, where: str, o: dict[str, Any], read: frozenset[str] | set[str] = frozenset()
    ) -> None:
        """A note of the keys of an option that are not read."""
        rest = [f"{k}={v}" for k, v in o.items() if k not in read and not isinstance(v, dict)]
        if rest:
            self.d.note(f"{where}: {', '.join(rest)[:200]}: not modelled")

    def _opts(self, value: str, implied: str | None, where: str) -> dict[str, Any]:
        """An option's value: JSON (QEMU's JSON syntax of -object, -blockdev, -device) or
        `key=value,...`."""
        if value.startswith("{"):
            return self._json(value, where)
        return dict(split_opts(value, implied, where))

    def _json(self, value: str, where: str) -> dict[str, Any]:
        try:
            o = json.loads(value)
        except (ValueError, RecursionError):
            raise _refuse(
                where, "is not valid JSON; accepted: QEMU's key=value,... or a JSON object"
            ) from None
        if not isinstance(o, dict):
            raise _refuse(where, "JSON that is not an object; accepted: a JSON object")
        return _flatten(o)

    def _blockdev(self, o: dict[str, Any], where: str) -> str:
        name = str(o.get("node-name") or f"#blockdev{len(self.nodes)}")
        node = _Node(where, o, str(o.get("driver", "")))
        self.nodes[name] = node
        for child in ("file", "backing"):
            v = o.get(child)
            if isinstance(v, dict):
                sub = {k[len(child) + 1 :]: x for k, x in o.items() if k.startswith(child + ".")}
                o[child] = self._blockdev(sub, f"{where} {child}")
        return name

    def _drive(self, o: dict[str, str], where: str) -> None:
        node = _Node(where, dict(o), "drive")
        self.drives.append(node)
        if "id" in o:
            self.nodes[o["id"]] = node

    # --- the disks ---------------------------------------------------------------------

    def _finish(self) -> Domain:
        d = self.d
        if self.accel in ("kvm", ""):
            d.hypervisor = "kvm"
            if not self.accel:
                d.note("no -accel kvm / -enable-kvm (TCG): modelled as kvm")
        elif self.accel == "xen":
            d.hypervisor = "xen"
        else:
            d.note(f"accel={self.accel}: modelled as kvm")
        attached: set[int] = set()
        counters = {"virtio-blk": 0, "virtio-scsi": 0, "ide": 0}
        for drv in self.drives:
            iface = drv.opts.get("if", "ide")
            if iface == "none":
                continue
            attached.add(id(drv))
            media = drv.get("media")
            if media == "cdrom":
                d.note(f"{drv.where}: media=cdrom (not a disk): not modelled")
                continue
            if iface not in ("virtio", "scsi", "ide"):
                d.note(
                    f"{drv.where}: if={iface} is not modelled (accepted: virtio, scsi, ide, none)"
                )
                continue
            drv.get("if")
            interface = {"virtio": "virtio-blk", "scsi": "virtio-scsi", "ide": "ide"}[iface]
            if iface == "scsi":
                d.note(f"{drv.where}: if=scsi (QEMU's lsi53c895a) modelled as virtio-scsi")
            name = self._name(interface, counters, drv.get("index"))
            d.disks.append(self._disk(name, interface, drv, {}, drv.where))
        for driver, o in self.devices:
            where = f"-device {driver}" + (f",id={o['id']}" if "id" in o else "")
            if driver in SCSI_HBAS:
                self.hbas[o.get("id", "")] = o
                continue
            if driver in OTHER_HBAS:
                self.hbas[o.get("id", "")] = o
                d.note(f"{where}: SCSI controller {driver} modelled as virtio-scsi")
                continue
            if driver in CDROM_DEVICES:
                self._mark(o.get("drive"), attached)
                d.note(f"{where}: {driver} (a CD-ROM, floppy or USB disk): not modelled")
                continue
            if driver not in DISK_DEVICES:
                self.others[f"-device {driver}"] += 1
                continue
            ref = o.get("drive")
            if ref is None or ref not in self.nodes:
                raise _refuse(
                    where,
                    f"drive='{ref}' names no -drive id or -blockdev node-name"
                    if ref
                    else "has no drive=; accepted: drive=ID of a -drive or -blockdev",
                )
            node = self.nodes[ref]
            self._mark(ref, attached)
            interface = DISK_DEVICES[driver]
            if driver == "nvme":
                d.note(f"{where}: QEMU's emulated NVMe controller modelled as virtio-blk")
            if driver == "scsi-block":
                d.note(f"{where}: scsi-block (passthrough) modelled as a virtio-scsi disk")
            name = self._name(interface, counters, None)
            d.disks.append(self._disk(name, interface, node, o, where))
        for n in self.drives + list(self.nodes.values()):
            if n.driver == "drive" and id(n) not in attached:
                d.note(f"{n.where}: if=none drive used by no disk device: not modelled")
        if not d.disks:
            raise _refuse(
                "disks",
                "no disk vmio can model; accepted: -drive if=virtio|scsi|ide, -hda, or "
                "-device virtio-blk-pci|scsi-hd|ide-hd|nvme,drive=ID with a -drive or -blockdev",
            )
        if self.others:
            d.note(
                "not storage I/O, not modelled: "
                + ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(self.others.items()))
            )
        if len(self.iothreads) > len({x.iothread for x in d.disks if x.iothread}):
            d.note(
                f"{len(self.iothreads)} -object iothread: the ones serving no disk are not modelled"
            )
        return d

    def _mark(self, ref: str | None, attached: set[int]) -> None:
        if ref and ref in self.nodes:
            attached.add(id(self.nodes[ref]))

    @staticmethod
    def _name(interface: str, counters: dict[str, int], index: str | None) -> str:
        prefix = {"virtio-blk": "vd", "virtio-scsi": "sd", "ide": "hd"}[interface]
        n = counters[interface]
        if index is not None and index.isdigit():
            n = int(index)
        counters[interface] = max(counters[interface], n + 1)
        return prefix + (chr(ord("a") + n) if n < 26 else f"a{n}")

    def _chain(self, node: _Node) -> list[_Node]:
        """The node and the nodes below it through file= (protocol) children."""
        chain = [node]
        while node.driver != "drive" and len(chain) < 16:
            f = node.get("file")
            if isinstance(f, str) and f in self.nodes:
                node = self.nodes[f]
                chain.append(node)
            else:
                break
        return chain

    def _disk(
        self, name: str, interface: str, node: _Node, dev: dict[str, str], where: str
    ) -> Disk:
        d = self.d
        disk = Disk(name=name, where=where, interface=interface)
        chain = self._chain(node)
        top = next((n for n in chain if n.driver in ("drive", "raw", "qcow2")), chain[0])
        writeback, direct, no_flush = True, False, False
        fmt = None
        for n in chain:
            if n.driver == "drive":
                mode = n.get("cache")
                if mode is not None:
                    if mode not in CACHE_MODES:
                        raise _refuse(
                            n.where,
                            f"cache={mode[:20]} is not valid; accepted: {', '.join(CACHE_MODES)}",
                        )
                    writeback, direct, no_flush = CACHE_MODES[mode]
                f = n.get("file")
                disk.source = str(f) if f is not None else None
                fmt = n.get("format")
                if disk.source and disk.source.startswith("/dev/"):
                    disk.source_kind = "block"
            elif n.driver in ("qcow2", "raw"):
                fmt = fmt or n.driver
                b = n.get("backing")
                if n.driver == "qcow2" and isinstance(b, str) and b in self.nodes:
                    disk.backing = self._backing(self.nodes[b])
            elif n.driver == "throttle":
                g = n.get("throttle-group")
                if g in self.groups:
                    disk.iotune.update(self._group(str(g)))
            elif n.driver in ("file", "host_device", "host_cdrom"):
                disk.source = str(n.get("filename") or "")
                disk.source_kind = "block" if n.driver == "host_device" else "file"
            elif n.driver in ("nbd", "rbd", "iscsi", "gluster", "http", "https", "ssh", "nfs"):
                disk.source_kind = "network"
                disk.source = f"{n.driver}://"
                n.used.update(n.opts)
            elif n.driver == "nvme":
                disk.source_kind = "nvme"
                disk.source = "nvme namespace " + str(n.get("namespace") or "1")
            else:
                d.note(f"{n.where}: driver={n.driver} not modelled")
            for key, val in (
                ("cache.direct", "direct"),
                ("cache.no-flush", "no_flush"),
                ("cache.writeback", "writeback"),
            ):
                v = n.get(key)
                if v is not None:
                    b = _bool(v, f"{n.where} {key}")
                    if val == "direct":
                        direct = b
                    elif val == "no_flush":
                        no_flush = b
                    else:
                        writeback = b
            aio = n.get("aio")
            if aio is not None:
                # a JSON -blockdev's aio may be any JSON value: QEMU's BlockdevAioOptions is
                # an enum of strings (qapi/block-core.json), so a number or an object is refused
                if not isinstance(aio, str) or aio not in ("threads", "native", "io_uring"):
                    raise _refuse(
                        n.where,
                        f"aio={str(aio)[:20]} is not valid; accepted: threads, native, io_uring",
                    )
                disk.aio = str(aio)
            disc = n.get("discard")
            if disc is not None and n is top:
                # the guest's discards are the top node's (the format node, or a -drive);
                # a protocol node's discard= passes the format layer's own discards down
                disk.discard = "unmap" if disc in ("unmap", "on") else "ignore"
            self._drive_throttle(n, disk)
            for k in (
                "node-name",
                "driver",
                "id",
                "if",
                "index",
                "read-only",
                "readonly",
                "auto-read-only",
            ):
                n.get(k)
            rest = sorted(set(n.opts) - n.used - {"file", "backing"})
            rest = [k for k in rest if not isinstance(n.opts[k], dict)]
            if rest:
                d.note(
                    f"{n.where}: {', '.join(f'{k}={n.opts[k]}' for k in rest)[:200]}: not modelled"
                )
        if fmt in ("raw", "qcow2", None):
            disk.format = fmt or "raw"
        else:
            d.note(f"{where} ({name}): format={fmt} not modelled; modelled as raw")
        wc = dev.get("write-cache")
        if wc is not None and wc != "auto":
            writeback = _bool(wc, f"{where} write-cache")
        mode, why = cache_mode(writeback, direct, no_flush)
        disk.cache = mode
        if why:
            d.note(f"{where} ({name}): {why}")
        if disk.aio == "native" and mode not in ("none", "directsync"):
            raise _refuse(
                where,
                f"aio=native with cache={mode}: QEMU refuses aio=native without cache.direct; "
                "accepted: aio=native with cache.direct=on",
            )
        used = {
            "driver",
            "drive",
            "id",
            "write-cache",
            "bus",
            "addr",
            "bootindex",
            "serial",
            "unit",
            "scsi-id",
            "device_id",
        }
        vq = dev.get("iothread-vq-mapping")
        if vq is not None and interface == "virtio-blk":
            used.add("iothread-vq-mapping")
            threads = [x for x in vq.split(",") if x]
            if threads:
                disk.iothreads = len(threads)
                disk.iothread = threads[0]
                d.note(
                    f"{where} ({name}): iothread-vq-mapping over {len(threads)} iothreads: "
                    "queues spread round robin (vmio's rule), needs QEMU 8.2"
                )
        t = dev.get("iothread")
        if t is not None:
            used.add("iothread")
            if interface == "virtio-blk":
                disk.iothread = t
                if t not in self.iothreads:
                    d.note(f"{where}: iothread={t} names no -object iothread")
        for key, attr, lo in (("num-queues", "num_queues", 1), ("queue-size", "queue_size", 4)):
            v = dev.get(key)
            if v is not None:
                used.add(key)
                n = _int(v, f"{where} {key}", lo, 1024)
                if key == "queue-size" and n & (n - 1):
                    raise _refuse(
                        where, f"queue-size={n} is not valid; accepted: a power of 2 in 4..=1024"
                    )
                setattr(disk, attr, n)
        if interface == "virtio-scsi":
            hba = self.hbas.get(dev.get("bus", "").split(".")[0])
            if hba is None and self.hbas:
                hba = next(iter(self.hbas.values()))
            if hba is not None and hba.get("driver") in SCSI_HBAS:
                q = hba.get("num_queues") or hba.get("num-queues")
                if q is not None:
                    disk.num_queues = _int(q, "-device virtio-scsi-pci num_queues", 1, 1024)
                if "iothread" in hba:
                    d.note(
                        f"-device {hba.get('driver')} iothread={hba['iothread']}: the "
                        f"controller's iothread is not modelled ({name} is served by the main "
                        "loop)"
                    )
        rest = sorted(set(dev) - used)
        if rest:
            d.note(f"{where}: {', '.join(f'{k}={dev[k]}' for k in rest)[:200]}: not modelled")
        return disk

    def _backing(self, node: _Node) -> list[str]:
        out: list[str] = []
        while node is not None and len(out) < 16:
            if node.driver not in ("raw", "qcow2"):
                break
            out.append(node.driver)
            node.used.update(node.opts)
            b = node.opts.get("backing")
            node = self.nodes.get(b) if isinstance(b, str) else None  # type: ignore[assignment]
            if out[-1] == "raw":
                break
        return out

    def _group(self, gid: str) -> dict[str, int | str]:
        g = self.groups[gid]
        out: dict[str, int | str] = {}
        for k, v in g.items():
            key = k.removeprefix("limits.").removeprefix("x-")
            lib = _throttle_key(key)
            if lib:
                n = _int(v, f"-object throttle-group,id={gid} {k}", 0, 10**15)
                if n:
                    out[lib] = n
            elif k not in ("qom-type", "id"):
                self.d.note(f"-object throttle-group,id={gid}: {k}={v} not modelled")
        if out:
            out["group_name"] = gid
        return out

    def _drive_throttle(self, n: _Node, disk: Disk) -> None:
        if n.driver != "drive":
            return
        for k in list(n.opts):
            key = k.removeprefix("throttling.")
            for old, new in LEGACY_THROTTLE.items():
                if key == old or key.startswith(old + "_max"):
                    key = new + key[len(old) :].replace("_", "-")
                    break
            if key in ("iops_size",):
                key = "iops-size"
            lib = _throttle_key(key)
            if lib:
                v = _int(n.get(k), f"{n.where} {k}", 0, 10**15)
                if v:
                    disk.iotune[lib] = v
            elif k in ("group", "throttling.group"):
                disk.iotune["group_name"] = str(n.get(k))
        if set(disk.iotune) <= {"group_name", "size_iops_sec"}:
            disk.iotune.clear()


def _throttle_key(key: str) -> str | None:
    """libvirt's <iotune> key of QEMU's throttle option `key` (bps-total-max-length ->
    total_bytes_sec_max_length; iops-size -> size_iops_sec)."""
    if key == "iops-size":
        return "size_iops_sec"
    for q, lib in THROTTLE.items():
        if key == q:
            return lib
        if key == q + "-max":
            return lib + "_max"
        if key == q + "-max-length":
            return lib + "_max_length"
    return None


def parse(argv: list[str]) -> Domain:
    """The domain of QEMU command line `argv` (the program's name may come first)."""
    return _Parser(list(argv)).run()
