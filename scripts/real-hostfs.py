#!/usr/bin/env python3
"""First write against overwrite of an image file on this machine's host filesystem, for real
and as `vmio sim` predicts it with `[[volume]] filesystem = "ext4"` (crates/vmio-core/src/hostfs).

  PYTHONPATH=python scripts/real-hostfs.py --dir DIR [--rounds 3] [--json FILE]

Per round, on a fresh file of DIR (fio 3.33, ioengine=psync, direct=1, one thread):

  sync4k   2048 sequential 4 KiB writes, each followed by an fdatasync (fio fdatasync=1):
           on a sparse file (truncate; QEMU's preallocation=off), on a file made with
           fallocate (preallocation=falloc), then the same job again on each (overwrite)
  seq4m    25 sequential 4 MiB writes (100 MiB), one fsync at the end (end_fsync=1),
           sparse first write then overwrite (docs/real-host.md's first-write gap)

Each case's figure is fio's mean time per write (write latency + sync latency, or the job's
runtime over its writes for seq4m). The model runs the same jobs on
experiments/real-host/stack.toml (this machine's device profile) with the volume made an
ext4 and the disk a 1 GiB image with the same preallocation. The script prints the means,
the spread (sample standard deviation over the mean) and the model's figures; no figure of
the model is fitted to them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACK = ROOT / "experiments" / "real-host" / "stack.toml"

SYNC4K = "rw=write\nbs=4k\nioengine=psync\ndirect=1\nsize=8m\nfdatasync=1\n"
SEQ4M = "rw=write\nbs=4m\nioengine=psync\ndirect=1\nsize=100m\nend_fsync=1\n"
JOBS = {"sync4k": (SYNC4K, 2048), "seq4m": (SEQ4M, 25)}


def fio(path: Path, body: str) -> dict:
    job = f"[j]\nfilename={path}\nfallocate=none\n{body}"
    out = subprocess.run(
        ["fio", "--output-format=json", "-"],
        input=job,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["jobs"][0]


def per_write_us(j: dict, kind: str, ios: int) -> float:
    if kind == "sync4k":
        return (j["write"]["lat_ns"]["mean"] + j["sync"]["lat_ns"]["mean"]) / 1e3
    return j["job_runtime"] * 1e3 / ios


def fresh(path: Path, size: int, falloc: bool) -> None:
    if path.exists():
        path.unlink()
    with open(path, "wb") as f:
        if falloc:
            os.posix_fallocate(f.fileno(), 0, size)
        else:
            f.truncate(size)
        os.fsync(f.fileno())


def measure(d: Path, rounds: int) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {}
    for _ in range(rounds):
        for kind, (body, ios) in JOBS.items():
            for prealloc in ("off", "falloc") if kind == "sync4k" else ("off",):
                f = d / f"hostfs-{kind}-{prealloc}.img"
                fresh(f, 1 << 30, prealloc == "falloc")
                for phase in ("first", "overwrite"):
                    us = per_write_us(fio(f, body), kind, ios)
                    res.setdefault(f"{kind} {prealloc} {phase}", []).append(us)
                f.unlink()
    return res


def model() -> dict[str, float]:
    base = STACK.read_text()
    base = base.replace('devices = ["vda"]\n', 'devices = ["vda"]\nfilesystem = "ext4"\n', 1)
    base = base.split("[vm.disk.filesystem]")[0]
    base = base.replace('cache = "none"\n', 'cache = "none"\noffset = "128g"\nsize = "1g"\n')
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, (body, ios) in JOBS.items():
            for prealloc in ("off", "falloc", "full"):
                s = Path(tmp) / f"{prealloc}.toml"
                s.write_text(base + f'\n[vm.disk.image]\npreallocation = "{prealloc}"\n')
                jf = Path(tmp) / f"{kind}.fio"
                jf.write_text(f"[j]\nfilename=/dev/vda\n{body}")
                r = subprocess.run(
                    [sys.executable, "-m", "vmio", "sim", str(jf), "--stack", str(s)]
                    + ["--output-format", "json"],
                    capture_output=True,
                    text=True,
                )
                if r.returncode != 0:
                    raise SystemExit(f"vmio sim: {r.stderr.strip()}")
                j = json.loads(r.stdout)["jobs"][0]
                phase = "overwrite" if prealloc == "full" else "first"
                key = f"{kind} {'off' if prealloc == 'full' else prealloc} {phase}"
                if prealloc == "full":
                    out[f"{kind} falloc overwrite"] = per_write_us(j, kind, ios)
                out[key] = per_write_us(j, kind, ios)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="a directory on the filesystem")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--no-model", action="store_true", help="measure only")
    a = p.parse_args()
    res = measure(a.dir, a.rounds)
    pred = {} if a.no_model else model()
    print(f"{'case':28} {'real us/write':>14} {'spread':>7} {'model':>9}")
    for k, v in res.items():
        m = statistics.mean(v)
        sd = statistics.stdev(v) / m if len(v) > 1 else 0.0
        mod = pred.get(k)
        shown = f"{mod:9.1f}" if mod is not None else " " * 9
        print(f"{k:28} {m:14.1f} {sd:7.1%} {shown}  {' '.join(f'{x:.1f}' for x in v)}")
    if a.json:
        a.json.write_text(json.dumps({"real": res, "model": pred}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
