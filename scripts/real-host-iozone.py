#!/usr/bin/env python3
"""S2's host row for real on this machine (issue #12 item 6): REPEAT times, measure a device profile
of the disk under DIR with fio, map it onto the simulator's ssd model, predict iozone's passes
(`-e -I`) with vmio sim on the profile's stack and run them for real; print measured against
predicted KB/s (mean and spread over the repetitions) with the relative error, and the mean
profile against its fio points; see python/vmio/real/host.py.

  PYTHONPATH=python scripts/real-host-iozone.py --dir /var/tmp
      [--size 100m] [-r 4k -r 4m -r 16m] [--repeat 5] [--fio-runtime 2]
      [--stack-out FILE] [--json tests/real_host_iozone_figures.json]

Exit status 2 when fio is missing or a measurement cannot be mapped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from vmio.real import host as realhost
from vmio.real import iozone as realiozone
from vmio.real import machineprofile

RECORDS = ("4k", "4m", "16m")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="directory of the test files")
    p.add_argument("--size", "-s", default="100m", help="iozone file size (default 100m)")
    p.add_argument("-r", dest="records", action="append", help="record size (default 4k 4m 16m)")
    p.add_argument("--repeat", type=int, default=5, help="real iozone runs (default 5)")
    p.add_argument("--fio-runtime", type=float, default=2.0, help="seconds per fio job")
    p.add_argument("--stack-out", type=Path, metavar="FILE", help="write the stack file here")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    a = p.parse_args()
    records = a.records or list(RECORDS)
    if a.repeat < 1:
        print(f"real-host-iozone: --repeat {a.repeat}: must be at least 1", file=sys.stderr)
        return 2
    if a.fio_runtime <= 0:
        print(f"real-host-iozone: --fio-runtime {a.fio_runtime}: must be > 0", file=sys.stderr)
        return 2
    if why := machineprofile.fio_missing():
        print(f"real-host-iozone: {why}", file=sys.stderr)
        return 2
    for out in (a.json, a.stack_out):
        if out is not None and out.exists():
            print(f"real-host-iozone: {out} exists; remove it first", file=sys.stderr)
            return 2
    try:
        size = realiozone.parse_size(a.size)
        for r in records:
            realiozone.parse_size(r, "-r")
        disk = machineprofile.disk_of(a.dir)
        cores = os.cpu_count() or 1
        t0 = time.monotonic()
        pairs = []
        for i in range(a.repeat):
            pairs.append(realhost.run_pair(a.dir, disk, cores, a.size, records, a.fio_runtime))
            print(f"repetition {i + 1}: profile and iozone, {time.monotonic() - t0:.0f} s")
        figures = machineprofile.mean_figures([p.figures for p in pairs])
        profile = machineprofile.ssd_params(figures, disk.size_bytes, disk.nr_requests)
        stack = realhost.stack_toml(profile, disk, cores)
        simulated = realhost.simulate_profile(stack, disk, a.fio_runtime)
    except (ValueError, OSError, machineprofile.ProfileError) as e:
        print(f"real-host-iozone: {e}", file=sys.stderr)
        return 2
    cmd = realhost.command(a.size, records)
    print(f"\n{disk.device} ({disk.model}) under {a.dir}, the mean of the {a.repeat} profiles:")
    print(machineprofile.residual_table(profile, figures, simulated))
    print(f"iozone {cmd}, {a.repeat} runs:\n")
    rows = realhost.compare([p.measured for p in pairs], [p.predicted for p in pairs])
    print(realhost.report(rows, size // 1024), end="")
    if a.stack_out is not None:
        a.stack_out.write_text(stack, encoding="utf-8")
    if a.json is not None:
        figures_json = {
            "how": (
                f"PYTHONPATH=python scripts/real-host-iozone.py --dir {a.dir} --size {a.size} "
                + " ".join(f"-r {r}" for r in records)
                + f" --repeat {a.repeat} --fio-runtime {a.fio_runtime}: vmio.real.machineprofile "
                "(the profile and its mapping), vmio.real.host (the comparison)"
            ),
            "measured": "; ".join(
                [
                    time.strftime("%Y-%m-%d", time.gmtime()),
                    machineprofile.fio_version(),
                    f"{cores} cores, Linux {os.uname().release}",
                ]
            ),
            "command": cmd,
            "cores": cores,
            "disk": asdict(disk),
            "repetitions": [
                {"fio": asdict(p.figures), "ssd": p.profile.params, "stack": p.stack} for p in pairs
            ],
            "rows": [asdict(r) for r in rows],
            "mean_profile": {
                "fio": asdict(figures),
                "fit": {"read": asdict(profile.read), "write": asdict(profile.write)},
                "ssd": profile.params,
                "residuals": [list(r) for r in profile.residuals(figures)],
                "simulated": asdict(simulated),
                "stack": stack,
            },
        }
        a.json.write_text(json.dumps(figures_json, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
