"""S2's host row for real (docs/real-host.md): iozone's write/read/random passes run on a file
of this machine (vmio.real.iozone, `-e -I`: O_DIRECT, the fsync timed) several times, next
to what the simulator predicts for the same iozone command on a stack of this machine whose
device is the measured profile (vmio.real.machineprofile).

```text
disk = machineprofile.disk_of(directory)                  filesystem, block device, queue
repeat `repetitions` times (`run_pair`; the machine's load drifts within minutes, so each
  prediction is made from a profile measured right before the run it is set against):
    figures   = machineprofile.measure(directory)         fio, QD1 (its module doc)
    profile   = machineprofile.ssd_params(figures, ...)  the ssd model's parameters
    stack     = stack_toml(profile, disk, cores)          the host itself: no VMM
    predicted = vmio sim on stack, job `iozone=<command>` (deterministic: one run)
    measured  = realiozone.run(directory, size, records)
per (record, pass) (`compare`): the mean and the spread (sample standard deviation / mean)
    of the measured KB/s and of the predicted KB/s; relative error = predicted mean /
    measured mean - 1
the machine's stack: the profile of the point-wise mean of the repetitions' figures
```

The simulated filesystem is the simulator's ext4 (e2fsprogs 1.47's defaults for the disk's
size, data=ordered) on the whole device, mounted at /mnt/<device>; docs/real-host.md says
where it differs from the real one (disk_of reports its journal and options).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vmio import iozone, stackfile
from vmio.real import iozone as realiozone
from vmio.real.machineprofile import (
    FILE_BYTES,
    JOBS,
    Disk,
    Figures,
    Profile,
    ProfileError,
    device_table,
    figures_of,
    point_of,
    ssd_params,
)
from vmio.real.machineprofile import measure as measure_profile
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


def stack_toml(profile: Profile, disk: Disk, cores: int) -> str:
    """A stack file of this machine (`cores` cores): the profile's device, the kernel's
    scheduler, and one group of host processes on the whole disk with the simulator's ext4."""
    if disk.scheduler not in SCHEDULERS:
        raise ProfileError(
            f"scheduler '{disk.scheduler}' of {disk.device}; accepted: {', '.join(SCHEDULERS)}"
        )
    merge = {"max_merge": f"{disk.max_sectors_kb}k"} if disk.scheduler == "mq-deadline" else {}
    kind = "rotational" if disk.rotational else "non-rotational"
    d = disk.device
    doc = {
        "host": {"cores": cores, "hypervisor": "native"},
        "device": [device_table(profile, d)],
        "volume": [{"name": d, "layout": "single", "devices": [d]}],
        "scheduler": {"name": disk.scheduler, **merge},
        "vm": [
            {
                "name": "host",
                "disk": [
                    {
                        "name": d,
                        "volume": d,
                        "interface": "host",
                        "cache": "none",
                        "filesystem": {"type": "ext4", "mount": mount_point(disk)},
                    }
                ],
            }
        ],
    }
    comment = (
        f"{d}: {disk.model}, {disk.size_bytes} bytes, {kind} as the kernel sees it; "
        f"{disk.fstype} on {disk.mount} ({disk.mount_options})"
    )
    return stackfile.render(doc, [comment])


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


@dataclass(frozen=True)
class Pair:
    """One repetition: the profile measured right before the real iozone run (the machine's
    load changes within minutes), and the simulator's prediction on that profile's stack."""

    figures: Figures
    profile: Profile
    stack: str
    predicted: list[iozone.Timing]
    measured: list[iozone.Timing]


def run_pair(
    directory: Path,
    disk: Disk,
    cores: int,
    size: str,
    records: Sequence[str],
    fio_runtime_s: float,
    fio_file_bytes: int = FILE_BYTES,
) -> Pair:
    """Profile, prediction, then the real iozone sequence (`-e -I`) on directory."""
    figures = measure_profile(directory, fio_runtime_s, fio_file_bytes)
    profile = ssd_params(figures, disk.size_bytes, disk.device_slots)
    stack = stack_toml(profile, disk, cores)
    predicted = predict(stack, disk, command(size, records))
    measured = realiozone.run(
        directory, realiozone.parse_size(size), [realiozone.parse_size(r, "-r") for r in records]
    )
    return Pair(figures, profile, stack, predicted, measured)


@dataclass(frozen=True)
class Row:
    """One cell of the comparison: a pass of a record size, KB/s one per repetition."""

    record_bytes: int
    phase: str
    measured: tuple[int, ...]
    predicted: tuple[int, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.measured)

    @property
    def spread(self) -> float:
        return _spread(self.measured)

    @property
    def predicted_mean(self) -> float:
        return statistics.fmean(self.predicted)

    @property
    def predicted_spread(self) -> float:
        return _spread(self.predicted)

    @property
    def error(self) -> float:
        return self.predicted_mean / self.mean - 1


def _spread(values: Sequence[int]) -> float:
    """Sample standard deviation over the mean (0 with one value)."""
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0


def _rates(runs: Sequence[Sequence[iozone.Timing]], record: int, phase: str) -> tuple[int, ...]:
    got = tuple(
        t.kb_per_s() for run in runs for t in run if (t.record_bytes, t.phase) == (record, phase)
    )
    if len(got) != len(runs):
        raise ValueError(f"pass {phase} of {record} bytes: in {len(got)} of {len(runs)} runs")
    return got


def compare(
    measured: Sequence[Sequence[iozone.Timing]], predicted: Sequence[Sequence[iozone.Timing]]
) -> list[Row]:
    """A row per pass of the first prediction, in its order."""
    return [
        Row(t.record_bytes, t.phase, _rates(measured, t.record_bytes, t.phase),
            _rates(predicted, t.record_bytes, t.phase))
        for t in predicted[0]
    ]  # fmt: skip


def table(rows: Sequence[Row], cell: str, file_kb: int) -> str:
    """An iozone-style table of one figure per cell: `cell` is mean, spread, predicted,
    predicted_spread or error (KB/s, or percent for spreads and errors)."""
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
                "predicted": f"{r.predicted_mean:.0f}",
                "predicted_spread": f"{100 * r.predicted_spread:.1f}%",
                "error": f"{100 * r.error:+.1f}%",
            }[cell]
            cells.append(f"{v:>14}")
        out.append(f"{file_kb:>16}{rec // 1024:>8}" + "".join(cells))
    return "\n".join(out) + "\n"


TABLES = (
    ("measured, mean of the repetitions (KB/s)", "mean"),
    ("measured, spread (sample standard deviation / mean)", "spread"),
    ("predicted by vmio sim, mean over the repetitions' profiles (KB/s)", "predicted"),
    ("predicted, spread over the repetitions' profiles", "predicted_spread"),
    ("relative error (predicted mean / measured mean - 1)", "error"),
)


def report(rows: Sequence[Row], file_kb: int) -> str:
    return "\n".join(f"{title}:\n{table(rows, cell, file_kb)}" for title, cell in TABLES)
