"""This machine, as a real run's results record it: CPU, cores, memory, kernel, fio, and the
disk under each directory the run used.

Sources: Linux's /proc/cpuinfo (`model name`, x86; `Hardware`/`cpu model` elsewhere),
/proc/meminfo (`MemTotal`, kB), uname(2) (`release`), `fio --version`; the disk comes from
`vmio.real.machineprofile.disk_of`, or `disk_of_device` for a block device node (/proc/mounts,
/sys/dev/block/<major:minor>/queue: rotational, scheduler, nr_requests, write_cache;
block/blk-sysfs.c).

    describe(paths) = {cpu, cores, memory_bytes, kernel, fio, disks: [disk_of(p) for p in
                       sorted(paths)]}            keys always in this order, disks by path
    short(d)        = "AMD EPYC, 2 cores, 23.5 GiB, Linux 6.1.0, fio-3.33; vda (virtio_blk,
                       ext4, 50.0 GiB, non-rotational, none)"

A directory on no block device (tmpfs) is described by its filesystem alone (`device` "").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vmio.real import machineprofile

CPU_KEYS = ("model name", "Hardware", "cpu model", "Processor")
"""/proc/cpuinfo's name of the CPU, by architecture (x86 first)."""


def cpu_model(text: str) -> str:
    """The CPU's name in /proc/cpuinfo's text: the first of CPU_KEYS found, "?" without."""
    for key in CPU_KEYS:
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return "?"


def memory_bytes(text: str) -> int:
    """MemTotal of /proc/meminfo's text, in bytes (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def disk(path: Path) -> dict[str, Any]:
    """The filesystem and disk under `path` (a directory, or a file's directory), or the
    block device `path` is."""
    directory = path if path.is_dir() else path.parent
    try:
        if path.is_block_device():
            d = machineprofile.disk_of_device(path)
        else:
            d = machineprofile.disk_of(directory)
    except machineprofile.ProfileError:
        mnt, fstype, source, _ = machineprofile.mount_of(directory)
        return {"path": str(path), "mount": mnt, "fstype": fstype, "source": source, "device": ""}
    return {
        "path": str(path),
        "mount": d.mount,
        "fstype": d.fstype,
        "source": d.source,
        "device": d.device,
        "model": d.model,
        "size_bytes": d.size_bytes,
        "rotational": d.rotational,
        "scheduler": d.scheduler,
        "nr_requests": d.nr_requests,
        "write_cache": d.write_cache,
    }


def describe(paths: Iterable[str | Path] = ()) -> dict[str, Any]:
    """This machine and the disks under `paths` (module doc), in a deterministic order."""
    fio = machineprofile.fio_version() if machineprofile.fio_missing() is None else ""
    return {
        "cpu": cpu_model(_read("/proc/cpuinfo")),
        "cores": len(os.sched_getaffinity(0)),
        "memory_bytes": memory_bytes(_read("/proc/meminfo")),
        "kernel": os.uname().release,
        "fio": fio,
        "disks": [disk(Path(p)) for p in sorted({str(p) for p in paths})],
    }


def short(d: dict[str, Any]) -> str:
    """A description of `describe`'s output on one line."""
    head = (
        f"{d['cpu']}, {d['cores']} cores, {d['memory_bytes'] / 2**30:.1f} GiB, "
        f"Linux {d['kernel']}, {d['fio'] or 'no fio'}"
    )
    disks = []
    for k in d["disks"]:
        if not k["device"]:
            disks.append(f"{k['path']} ({k['fstype']}, no block device)")
            continue
        kind = "rotational" if k["rotational"] else "non-rotational"
        disks.append(
            f"{k['device']} ({k['model']}, {k['fstype']}, {k['size_bytes'] / 2**30:.1f} GiB, "
            f"{kind}, {k['scheduler'] or '?'})"
        )
    return head + ("; " + ", ".join(disks) if disks else "")
