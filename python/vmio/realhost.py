"""S2's host row for real (issue #12 item 6): iozone's write/read/random passes run on a file
of this machine (vmio.realiozone, `-e -I`: O_DIRECT, the fsync timed) several times, next
to what the simulator predicts for the same iozone command on a stack of this machine whose
device is the measured profile (vmio.machineprofile).

```text
disk     = machineprofile.disk_of(directory)            filesystem, block device, queue
figures  = machineprofile.measure(directory)            fio, QD1 (its module doc)
profile  = machineprofile.ssd_params(figures, ...)     the ssd model's parameters
stack    = stack_toml(profile, disk)                    the host itself: no VMM
measured = realiozone.run(directory, size, records)     `repetitions` times
predicted = vmio sim: stack, job `iozone=<the same command>` (one run: deterministic)
per (record, pass): mean and spread (sample standard deviation / mean) of the measured
    KB/s, the predicted KB/s, relative error = predicted / mean - 1
```

The simulated filesystem is the simulator's ext4 (e2fsprogs 1.47's defaults for the disk's
size, data=ordered) on the whole device, mounted at /mnt/<device>; docs/real-host.md says
where it differs from the real one (disk_of reports its journal and options).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vmio import iozone, realiozone
from vmio.machineprofile import (
    FILE_BYTES,
    JOBS,
    Disk,
    Figures,
    Profile,
    ProfileError,
    device_toml,
    figures_of,
    point_of,
)
from vmio.sim import simulate_text

# The schedulers of the simulator's [scheduler] a real disk can report.
SCHEDULERS = ("none", "mq-deadline")


def command(size: str, records: Sequence[str]) -> str:
    """The iozone command line of the comparison (S2's flags)."""
    return " ".join(["-e -I -a -s", size, *(f"-r {r}" for r in records), "-i 0 -i 1 -i 2"])


def mount_point(disk: Disk) -> str:
    """Where the simulated filesystem is mounted: /mnt/<disk> (the real one's mount point can
    be /, which a simulated filesystem cannot have)."""
    return f"/mnt/{disk.device}"


def job_text(cmd: str, disk: Disk) -> str:
    """The fio job file of iozone `cmd` on the simulated filesystem."""
    return f"[iozone]\niozone={cmd}\ndirectory={mount_point(disk)}\n"


def stack_toml(profile: Profile, disk: Disk) -> str:
    """A stack file of this machine: the profile's device, the kernel's scheduler, and one
    group of host processes on the whole disk with the simulator's ext4."""
    if disk.scheduler not in SCHEDULERS:
        raise ProfileError(
            f"scheduler '{disk.scheduler}' of {disk.device}; accepted: {', '.join(SCHEDULERS)}"
        )
    return (
        f"# {disk.device}: {disk.model}, {disk.size_bytes} bytes, "
        f"{'rotational' if disk.rotational else 'non-rotational'} as the kernel sees it; "
        f"{disk.fstype} on {disk.mount} ({disk.mount_options})\n"
        "[host]\n"
        f"cores = {os.cpu_count() or 1}\n"
        'hypervisor = "native"\n\n' + device_toml(profile, disk.device) + "\n[[volume]]\n"
        f'name = "{disk.device}"\n'
        'layout = "single"\n'
        f'devices = ["{disk.device}"]\n\n'
        "[scheduler]\n"
        f'name = "{disk.scheduler}"\n'
        + (f'max_merge = "{disk.max_sectors_kb}k"\n' if disk.scheduler == "mq-deadline" else "")
        + "\n[[vm]]\n"
        'name = "host"\n\n'
        "[[vm.disk]]\n"
        f'name = "{disk.device}"\n'
        f'volume = "{disk.device}"\n'
        'interface = "host"\n'
        'cache = "none"\n\n'
        "[vm.disk.filesystem]\n"
        'type = "ext4"\n'
        f'mount = "{mount_point(disk)}"\n'
    )


def simulate_profile(stack: str, disk: Disk, runtime_s: float) -> Figures:
    """The profile's fio jobs run by the simulator on `stack` (the simulated filesystem's
    mount point): what the stack's whole path makes of the device's closed forms."""
    points = {}
    for job in JOBS:
        text = job.job_file(mount_point(disk), FILE_BYTES, runtime_s)
        result = json.loads(simulate_text(stack, "host.toml", text, f"{job.name}.fio"))
        points[job.name] = point_of(job, result["jobs"][0])
    return figures_of(points)


def predict(stack: str, disk: Disk, cmd: str) -> list[iozone.Timing]:
    """The simulator's passes of iozone `cmd` on `stack`."""
    result = json.loads(simulate_text(stack, "host.toml", job_text(cmd, disk), "iozone.fio"))
    return [
        iozone.Timing(
            p["kbytes"] * 1024, p["reclen_kbytes"] * 1024, p["test"], p["io_bytes"], p["time_ns"]
        )
        for p in result["jobs"][0]["vmio_iozone"]["passes"]
    ]


def measure(
    directory: Path, size_bytes: int, records: Sequence[int], repetitions: int
) -> list[list[iozone.Timing]]:
    """`repetitions` real runs of the iozone sequence (`-e -I`)."""
    return [realiozone.run(directory, size_bytes, records) for _ in range(repetitions)]


@dataclass(frozen=True)
class Row:
    """One cell of the comparison: a pass of a record size."""

    record_bytes: int
    phase: str
    measured: tuple[int, ...]  # KB/s, one per repetition
    predicted: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured)

    @property
    def spread(self) -> float:
        """Sample standard deviation over the mean (0 with one repetition)."""
        if len(self.measured) < 2:
            return 0.0
        return statistics.stdev(self.measured) / self.mean

    @property
    def error(self) -> float:
        return self.predicted / self.mean - 1


def compare(
    runs: Sequence[Sequence[iozone.Timing]], predicted: Sequence[iozone.Timing]
) -> list[Row]:
    """The rows of every pass the simulator predicted, in its order."""
    rows = []
    for p in predicted:
        got = tuple(
            t.kb_per_s()
            for run in runs
            for t in run
            if (t.record_bytes, t.phase) == (p.record_bytes, p.phase)
        )
        if len(got) != len(runs):
            raise ValueError(f"pass {p.phase} of {p.record_bytes} bytes: measured {len(got)} times")
        rows.append(Row(p.record_bytes, p.phase, got, p.kb_per_s()))
    return rows


def table(rows: Sequence[Row], cell: str, file_kb: int) -> str:
    """An iozone-style table of one figure per cell: `cell` is mean, spread, predicted or
    error (KB/s, or percent for spread and error)."""
    phases = [p for p in iozone.PHASES if any(r.phase == p for r in rows)]
    head = f"{'KB':>16}{'reclen':>8}" + "".join(f"{p:>14}" for p in phases)
    out = [head]
    for rec in dict.fromkeys(r.record_bytes for r in rows):
        by = {r.phase: r for r in rows if r.record_bytes == rec}
        cells = []
        for p in phases:
            r = by[p]
            v = {
                "mean": f"{r.mean:.0f}",
                "spread": f"{100 * r.spread:.1f}%",
                "predicted": f"{r.predicted}",
                "error": f"{100 * r.error:+.1f}%",
            }[cell]
            cells.append(f"{v:>14}")
        out.append(f"{file_kb:>16}{rec // 1024:>8}" + "".join(cells))
    return "\n".join(out) + "\n"


TABLES = (
    ("measured, mean of the repetitions (KB/s)", "mean"),
    ("measured, spread (sample standard deviation / mean)", "spread"),
    ("predicted by vmio sim (KB/s)", "predicted"),
    ("relative error (predicted / measured mean - 1)", "error"),
)


def report(rows: Sequence[Row], file_kb: int) -> str:
    return "\n".join(f"{title}:\n{table(rows, cell, file_kb)}" for title, cell in TABLES)
