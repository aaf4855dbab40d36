"""`vmio import --probe`: the host side of an imported VM read from this machine.

For each disk's source (Linux's sysfs ABI, Documentation/ABI/stable/sysfs-block and
Documentation/admin-guide/sysfs-rules.rst):

    file   stat(path).st_dev = MAJ:MIN of the filesystem's device; its type from
           /proc/self/mountinfo (ext4, xfs: the volume's filesystem); size: a raw file's
           length, a qcow2 image's virtual size (header bytes 24..32, docs/interop/qcow2.txt)
    block  stat(path).st_rdev = MAJ:MIN
    MAJ:MIN -> /sys/dev/block/MAJ:MIN -> the block device; a partition -> its disk;
           dm-N: `dmsetup table` (linear -> layout linear, striped -> stripe with its chunk)
           and /sys/block/dm-N/slaves; mdN: md/level raid0 -> raid0 with md/chunk_size
    each disk under it: queue/rotational, scheduler, read_ahead_kb, max_sectors_kb,
           nr_requests, logical/physical_block_size, size -> a device profile:
           vdX, xvdX (a virtio or cloud disk: rotational says nothing) -> flash's
               datacenter-nvme defaults, with a note to run `vmio calibrate` on it
           nvmeX -> flash datacenter-nvme; rotational -> hdd hdd-7200-2tb;
           sdX non-rotational -> ssd samsung-840pro-256g; zram, ram, pmem -> ram

The host's cores are os.cpu_count(), its memory /proc/meminfo's MemTotal; the scheduler is
the first device's; `lsblk` names the tree in a note where it is installed. A source that is
not on this machine (another host's path, a network disk) keeps the defaults, with a note.
"""

from __future__ import annotations

import os
import re
import shutil
import stat as statmod
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vmio.importer.build import GIB, HostSide, Storage
from vmio.importer.model import Disk, Domain

Runner = Callable[[list[str]], str | None]


def _run(cmd: list[str]) -> str | None:
    """A command's standard output (None: not installed, failed or slow)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _read(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8", errors="replace").strip()[:4096]
    except OSError:
        return None


def _int(p: Path) -> int | None:
    t = _read(p)
    return int(t) if t is not None and t.isdigit() else None


class Prober:
    """This machine, under `sys` (/sys) and `proc` (/proc); `run` runs lsblk and dmsetup."""

    def __init__(self, sys: str = "/sys", proc: str = "/proc", run: Runner = _run) -> None:
        self.sys = Path(sys)
        self.proc = Path(proc)
        self.run = run

    # --- one block device -------------------------------------------------------------

    def block_of(self, majmin: str) -> str | None:
        p = self.sys / "dev" / "block" / majmin
        try:
            real = p.resolve(strict=True)
        except OSError:
            return None
        if (real / "partition").exists():
            return real.parent.name
        return real.name

    def queue(self, name: str) -> dict[str, str]:
        q = self.sys / "block" / name / "queue"
        out = {}
        for k in (
            "rotational",
            "scheduler",
            "read_ahead_kb",
            "max_sectors_kb",
            "nr_requests",
            "logical_block_size",
            "physical_block_size",
        ):
            v = _read(q / k)
            if v is not None:
                out[k] = v
        return out

    def device(self, name: str, notes: list[str]) -> dict[str, object]:
        """The [[device]] table of block device `name`: its model and profile guessed."""
        q = self.queue(name)
        sectors = _int(self.sys / "block" / name / "size") or 0
        capacity = sectors * 512
        t: dict[str, object] = {"name": re.sub(r"[^A-Za-z0-9_-]", "_", name)}
        rot = q.get("rotational") == "1"
        if re.match(r"^(x?vd[a-z]+)$", name):
            t.update(model="flash", profile="datacenter-nvme")
            notes.append(
                f"{name}: a virtio or cloud disk (its rotational flag says nothing): the "
                "flash model's datacenter-nvme defaults; run `vmio calibrate` on it to fit them"
            )
        elif name.startswith("nvme"):
            t.update(model="flash", profile="datacenter-nvme")
        elif re.match(r"^(zram|ram|pmem)\d+", name):
            t.update(model="ram", profile="ram")
        elif rot:
            t.update(model="hdd", profile="hdd-7200-2tb")
            qd = _int(self.sys / "block" / name / "device" / "queue_depth")
            if qd:
                t["ncq_depth"] = qd
        elif name.startswith("sd"):
            t.update(model="ssd", profile="samsung-840pro-256g")
            qd = _int(self.sys / "block" / name / "device" / "queue_depth")
            if qd:
                t["queue_depth"] = qd
        else:
            t.update(model="flash", profile="datacenter-nvme")
            notes.append(
                f"{name}: no profile fits; the flash model's defaults (vmio calibrate fits them)"
            )
        if capacity >= 1 << 20 and t["model"] in ("flash", "ram", "hdd"):
            t["capacity"] = capacity - capacity % 4096
        elif capacity:
            notes.append(f"{name}: capacity {capacity} bytes; the {t['profile']} profile's kept")
        notes.append(
            f"{name}: "
            + ", ".join(f"{k}={v}" for k, v in q.items())
            + " (rotational, nr_requests and block sizes read, not modelled)"
        )
        return t

    # --- a source ---------------------------------------------------------------------

    def storage(self, top: str, notes: list[str]) -> Storage:
        """The volume of block device `top` (a disk, an LV or md array) and its disks."""
        layout, params, leaves = "single", {}, [top]
        slaves = sorted(p.name for p in (self.sys / "block" / top / "slaves").glob("*"))
        if top.startswith("dm-"):
            table = self.run(["dmsetup", "table", "-j", *self._majmin(top)]) or ""
            kinds = {ln.split()[2] for ln in table.splitlines() if len(ln.split()) > 2}
            if kinds == {"striped"}:
                f = table.split()
                layout, params = "stripe", {"stripe_size": f"{int(f[4]) * 512 // 1024}k"}
            elif kinds <= {"linear"}:
                layout = "linear"
            else:
                notes.append(
                    f"{top}: device-mapper targets {', '.join(sorted(kinds)) or '?'}: "
                    "modelled as linear"
                )
                layout = "linear"
            leaves = [self._disk_of(s) for s in slaves] or [top]
        elif top.startswith("md"):
            level = _read(self.sys / "block" / top / "md" / "level")
            chunk = _int(self.sys / "block" / top / "md" / "chunk_size")
            leaves = [self._disk_of(s) for s in slaves] or [top]
            if level == "raid0" and len(leaves) >= 2:
                layout = "raid0"
                if chunk:
                    params = {"chunk": f"{chunk // 1024}k"}
            else:
                notes.append(f"{top}: md {level}: modelled as its first disk")
                leaves = leaves[:1]
        if layout in ("stripe", "raid0") and len(leaves) < 2:
            layout, params = "single", {}
        if layout == "single":
            leaves = leaves[:1]
        devices = [self.device(n, notes) for n in dict.fromkeys(leaves)]
        q = self.queue(top)
        ra = q.get("read_ahead_kb")
        s = Storage(top, devices, layout, params)
        if ra and ra.isdigit():
            s.read_ahead_kb = int(ra)
        cap = sum(int(str(d.get("capacity", 0))) for d in devices)
        if cap:
            s.capacity = cap
        tree = self.run(["lsblk", "-J", "-o", "NAME,TYPE,SIZE", f"/dev/{top}"])
        if tree:
            names = re.findall(r'"name"\s*:\s*"([^"]+)"[^}]*?"type"\s*:\s*"([^"]+)"', tree)
            if names:
                notes.append("lsblk: " + ", ".join(f"{n} ({t})" for n, t in names[:12]))
        return s

    def _majmin(self, name: str) -> list[str]:
        t = _read(self.sys / "block" / name / "dev") or "0:0"
        major, _, minor = t.partition(":")
        return [major, "-m", minor]

    def _disk_of(self, name: str) -> str:
        """A slave's disk (a partition's parent)."""
        p = self.sys / "class" / "block" / name
        try:
            real = p.resolve(strict=True)
        except OSError:
            return name
        return real.parent.name if (real / "partition").exists() else real.name

    def fstype(self, majmin: str) -> str | None:
        text = _read(self.proc / "self" / "mountinfo") or ""
        for line in text.splitlines():
            f = line.split()
            if len(f) > 6 and f[2] == majmin and "-" in f:
                return f[f.index("-") + 1]
        return None


def image_size(path: str, fmt: str) -> int | None:
    """A raw image's length, or a qcow2 image's virtual size from its header."""
    try:
        with open(path, "rb") as f:
            head = f.read(32)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if fmt == "qcow2":
        if head[:4] != b"QFI\xfb" or len(head) < 32:
            return None
        return int.from_bytes(head[24:32], "big")
    return size


def _cores_memory(proc: Path) -> tuple[int, int | None]:
    cores = os.cpu_count() or 1
    mem = None
    m = re.search(r"MemTotal:\s+(\d+) kB", _read(proc / "meminfo") or "")
    if m:
        mem = int(m.group(1)) * 1024 // GIB * GIB or None
    return min(cores, 64), mem


@dataclass
class ProbedHost(HostSide):
    """The host side with storages placed where this machine has the disks' sources."""

    prober: Prober = field(default_factory=Prober)
    devices: dict[str, str] = field(default_factory=dict)
    """Block device -> the [[device]] that models it (the first volume's)."""
    scheduler_read: bool = False

    def describe(self) -> str:
        devs = [
            f"{d['name']} -> {d['model']} ({d['profile']})"
            for s in self.storages.values()
            for d in s.devices
            if "model" in d
        ]
        return self.profile + (": " + ", ".join(devs) if devs else "")

    def place(self, disk: Disk, domain: Domain) -> Storage:
        p = self.prober
        path = disk.source if disk.source_kind in ("file", "block") else None
        st = None
        if path:
            try:
                st = os.stat(path)
            except OSError:
                st = None
        if st is None:
            self.notes.append(
                f"{disk.where} ({disk.name}): source {disk.source or '(none)'} is not on this "
                "machine: the default device"
            )
            return super().place(disk, domain)
        rdev = st.st_rdev if statmod.S_ISBLK(st.st_mode) else st.st_dev
        majmin = f"{os.major(rdev)}:{os.minor(rdev)}"
        top = p.block_of(majmin)
        if top is None:
            self.notes.append(
                f"{disk.where} ({disk.name}): {path} is on {majmin}, not a block device "
                "(tmpfs, overlay, a network filesystem): the default device"
            )
            return super().place(disk, domain)
        if disk.size is None:
            disk.size = (
                image_size(path, disk.format)
                if statmod.S_ISREG(st.st_mode)
                else (_int(p.sys / "block" / top / "size") or 0) * 512 or None
            )
        key = f"dev:{top}" + (":fs" if statmod.S_ISREG(st.st_mode) else "")
        if key not in self.storages:
            self.storages[key] = self._new_storage(top, majmin, path, statmod.S_ISREG(st.st_mode))
        return self.storages[key]

    def _new_storage(self, top: str, majmin: str, path: str, is_file: bool) -> Storage:
        p = self.prober
        s = p.storage(top, self.notes)
        leaves = [str(d["name"]) for d in s.devices]
        if is_file:
            fs = p.fstype(majmin)
            if fs in ("ext4", "xfs"):
                s.filesystem = fs
            else:
                self.notes.append(
                    f"{path}: on a {fs or 'unknown'} filesystem, which vmio does not model: "
                    "a volume without a host filesystem"
                )
        n = len(self.storages)
        if n:
            s.name = f"{s.name}-{n}"
        # A disk already a device of an earlier volume (a file on its filesystem and the
        # raw device beside it): the same hardware, so a region of it (`share`).
        for k, d in enumerate(s.devices):
            leaf = leaves[k]
            if leaf in self.devices:
                s.devices[k] = {"name": f"{leaf}-{n}", "share": self.devices[leaf], "start": 0}
            else:
                self.devices[leaf] = str(d["name"])
        if not self.scheduler_read:
            self.scheduler_read = True
            sched = p.queue(leaves[0]).get("scheduler", "")
            m = re.search(r"\[([^\]]+)\]", sched)
            name = m.group(1) if m else sched or "none"
            if name in ("none", "mq-deadline"):
                self.scheduler = {"name": name}
                mx = p.queue(leaves[0]).get("max_sectors_kb")
                if name == "mq-deadline" and mx and mx.isdigit():
                    self.scheduler["max_merge"] = f"{mx}k"
            else:
                self.notes.append(
                    f"host scheduler {name} of {leaves[0]}: not modelled; mq-deadline"
                )
                self.scheduler = {"name": "mq-deadline"}
        return s


def probe(domain: Domain, prober: Prober | None = None) -> HostSide:
    """The host side of `domain` on this machine."""
    p = prober or Prober()
    cores, memory = _cores_memory(p.proc)
    return ProbedHost(
        prober=p,
        cores=cores,
        memory=memory,
        profile=f"probed on this machine ({cores} cores"
        + (f", {memory // GIB} GiB" if memory else "")
        + "); device profiles guessed from sysfs",
    )
