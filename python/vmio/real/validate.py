"""`vmio validate`: does the simulator predict the disk it was calibrated on, on work the fit
never saw? (docs/validation.md)

```text
vmio calibrate TARGET              -> DIR/calibration/stack.toml (a `flash` device fitted to the
                                      battery of vmio.real.calibrate), unless --calibration
                                      names one
workloads = heldout(seed, n)       (the family below; a draw equal to a battery point is drawn
                                      again, so no held-out workload was fitted on)
for each workload w:
    vmio sim  stack.toml  w         -> DIR/sim/<w>.json          (same seed: deterministic)
    fio       TARGET      w  x K    -> DIR/real/<w>.rep<k>.json  (K rounds of all w, one at a time)
vmio compare DIR/real DIR/sim       -> DIR/compare.txt, compare.csv, compare.png, the summary:
    per point and direction: bandwidth and mean latency, error = sim / median(real) - 1,
    and the real spread = (max - min) / median over the K repetitions; then the clat
    p50, p99 and p99.9 the same way (`tails`), and the verdict against the targets
raid0 part (--raid0 N, the first N workloads):
    vmio calibrate --serve-path     -> DIR/raid0/serve-path.{toml,json}: the NBD path's [nbd]
                                       table over a RAM image in /dev/shm (vmio.real.servepath; 10 s
                                       with --quick, else 30 s)
    the same steps on raid0_stack   -> DIR/raid0/{sim,real,compare.*}: a raid0 of two files
                                       of TARGET's disk, served by vmio serve to fio's nbd
                                       engine, simulated as interface = "nbd" with that table
```

**The family** (`heldout`, Python's `random.Random(seed)`, so a seed gives the same list on
every machine; family 2, `FAMILY`):

| dimension | values, each equally likely |
|---|---|
| pattern | sequential, random |
| read share | 100, 0, 90, 70, 50, 30 % (`rw=read`, `write`, `rw`; random: `rand...`) |
| block size | 4k, 8k, 12k, 16k, 24k, 48k, 64k, 96k, 192k, 256k, 384k, 768k, 1m, 2m |
| queue depth | 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64 |
| fdatasync every N writes | 0 (none), 1, 4, 16 (write-only workloads; fio's `fdatasync=N`) |

A draw is taken again when it is a battery point (`in_battery`: one of vmio.real.calibrate's
jobs) or on the battery's grid (`on_grid`: reads or writes only, no fdatasync, at one of the
battery's sizes and one of its depths), so every held-out workload has a size, a depth, a
mix or a sync the fit never saw. Family 1 (records of version 1: 16 sizes 4k..1m, depths
1..32, no fdatasync, the battery of those runs) is kept so that its records replay.

Every job: `ioengine=libaio`, `direct=1` (0 where the file refuses O_DIRECT: tmpfs before
Linux 6.6, as vmio.real.calibrate probes it), one job,
`time_based` for `--runtime` seconds over the calibrated file. The simulator runs the same
options on the calibrated stack's disk (no `filename`: the first disk).

Percentiles (`tails`): per point and direction, fio's clat p50, p99 and p99.9 (p99.9 only
from a run of at least 10,000 requests), the median over the K real runs and their spread
(max - min) / median, against the simulator's; error = sim / median(real) - 1; summary:
median and p90 of |error| per percentile, and the median real spread.

Targets (docs/validation.md): median absolute error of bandwidth and of mean latency at most 15 %,
90th percentile at most 30 %; of the p99 latency, median at most 25 %, p90 at most 50 %.
The real spread is reported beside them: on a shared machine a
point's repetitions can differ by more than the model's error. docs/validation.md has the
method, this machine's figures and what the model cannot predict.
"""

from __future__ import annotations

import random
import shutil
import statistics
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from vmio import boundedjson, stackfile
from vmio.progress import Progress
from vmio.real import calibrate, compare
from vmio.real.calibrate import direct_ok, fio_json, write_through
from vmio.real.machineprofile import fio_missing
from vmio.sim import VmioError, read_text, simulate_text

KIB = 1024
PATTERNS = ("sequential", "random")
READ_SHARES = (100, 0, 90, 70, 50, 30)
# Family 2 (the default): sizes and depths between and beyond the battery's, fdatasync every
# N writes on the write-only workloads (0: none).
BLOCK_SIZES = tuple(k * KIB for k in (4, 8, 12, 16, 24, 48, 64, 96, 192, 256, 384, 768, 1024, 2048))
QUEUE_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SYNC_EVERY = (0, 1, 4, 16)
FAMILY = 2
# Family 1 (the runs recorded before family 2; tests/real_validation_figures.json of version
# 1 replays them).
BLOCK_SIZES_V1 = tuple(
    k * KIB for k in (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
)
QUEUE_DEPTHS_V1 = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)

# What the calibration battery ran (vmio.real.calibrate's docstring): never drawn as held out.
BATTERY_SEQ_SIZES = tuple(k * KIB for k in (4, 16, 64, 256, 1024))
BATTERY_SEQ_DEPTHS = (1, 8, 32)
BATTERY_RAND_DEPTHS = (1, 2, 4, 8, 16, 32)
BATTERY_MIX_DEPTHS = (1, 8)
BATTERY_DUPLEX = (50, (64 * KIB, 256 * KIB), 8)  # sequential rw: read share, sizes, depth

MAX_POINTS = 400
"""The most held-out workloads one draw gives (`--points`)."""

TARGETS = {"median": 0.15, "p90": 0.30}
"""The bounds (docs/validation.md) on absolute relative errors of bandwidth and of mean latency."""
P99_TARGETS = {"median": 0.25, "p90": 0.50}
"""The bounds on absolute relative errors of the p99 completion latency."""
TAIL_PERCENTILES = (("p50", "50.000000"), ("p99", "99.000000"), ("p99.9", "99.900000"))
"""The completion-latency percentiles compared (fio's JSON keys)."""
P999_MIN_IOS = 10_000
"""A run's p99.9 counts when it completed at least this many requests (10 beyond it)."""


@dataclass(frozen=True)
class Workload:
    """One held-out fio workload."""

    pattern: str  # sequential | random
    read_pct: int  # 100: reads only, 0: writes only
    bs: int
    iodepth: int
    sync: int = 0  # an fdatasync every `sync` writes (fio's fdatasync); 0: none

    @property
    def rw(self) -> str:
        prefix = "rand" if self.pattern == "random" else ""
        if self.read_pct == 100:
            return f"{prefix}read"
        if self.read_pct == 0:
            return f"{prefix}write"
        return "randrw" if prefix else "rw"

    @property
    def name(self) -> str:
        mix = "" if self.read_pct in (0, 100) else str(self.read_pct)
        sync = f"-sync{self.sync}" if self.sync else ""
        return f"{self.rw}{mix}-{self.bs // KIB}k-qd{self.iodepth}{sync}"

    def in_battery(self) -> bool:
        """Whether the calibration battery ran this workload (then it is not held out): one
        of vmio.real.calibrate's battery jobs (the fdatasync points are psync, QD1)."""
        if self.sync:
            return False
        share = lambda j: {"read": 100, "write": 0}.get(j.direction, j.rwmixread)  # noqa: E731
        return any(
            j.rw == self.rw
            and (j.bs, j.iodepth) == (self.bs, self.iodepth)
            and share(j) == self.read_pct
            for j in calibrate.battery()
            if not j.fdatasync
        )

    def on_grid(self) -> bool:
        """Whether every dimension of the workload is one the battery used: a battery size
        and depth, reads or writes only, no fdatasync (family 2 draws none of these)."""
        sizes = {j.bs for j in calibrate.battery() if not j.fdatasync}
        depths = {j.iodepth for j in calibrate.battery() if not j.fdatasync}
        pure = self.read_pct in (0, 100) and not self.sync
        return pure and self.bs in sizes and self.iodepth in depths

    def in_battery_v1(self) -> bool:
        """Whether the battery of family 1's runs ran this workload."""
        if self.pattern == "sequential" and self.read_pct in (0, 100):
            return self.bs in BATTERY_SEQ_SIZES and self.iodepth in BATTERY_SEQ_DEPTHS
        if self.pattern == "sequential":
            share, sizes, depth = BATTERY_DUPLEX
            return (self.read_pct, self.iodepth) == (share, depth) and self.bs in sizes
        if self.pattern == "random" and self.bs == 4 * KIB:
            if self.read_pct in (0, 100):
                return self.iodepth in BATTERY_RAND_DEPTHS
            return self.read_pct == 70 and self.iodepth in BATTERY_MIX_DEPTHS
        return False

    def options(self, runtime_s: float, size: int, direct: bool) -> list[tuple[str, str]]:
        """fio's options of the workload (no file: the caller adds `filename`)."""
        opts = [
            ("rw", self.rw),
            ("bs", str(self.bs)),
            ("iodepth", str(self.iodepth)),
            ("ioengine", "libaio"),
            ("direct", "1" if direct else "0"),
            ("size", str(size)),
            ("runtime", f"{runtime_s:g}s"),
            ("time_based", "1"),
        ]
        if self.read_pct not in (0, 100):
            opts.insert(1, ("rwmixread", str(self.read_pct)))
        if self.sync:
            opts.append(("fdatasync", str(self.sync)))
        return opts

    def job_text(self, runtime_s: float, size: int, direct: bool) -> str:
        """The workload as a fio job file for `vmio sim` (the stack's first disk)."""
        body = "".join(f"{k}={v}\n" for k, v in self.options(runtime_s, size, direct))
        return f"[{self.name}]\n{body}"


def heldout(seed: int, n: int, family: int = FAMILY) -> list[Workload]:
    """`n` distinct held-out workloads of the family (module doc), drawn with `seed`."""
    if n > MAX_POINTS:
        raise VmioError(
            f"--points {n}: at most {MAX_POINTS} held-out workloads; accepted: 1..{MAX_POINTS}"
        )
    rng = random.Random(seed)
    out: list[Workload] = []
    seen: set[Workload] = set()
    while len(out) < n:
        if family == 1:
            w = Workload(
                rng.choice(PATTERNS),
                rng.choice(READ_SHARES),
                rng.choice(BLOCK_SIZES_V1),
                rng.choice(QUEUE_DEPTHS_V1),
            )
            if w.in_battery_v1() or w in seen:
                continue
            seen.add(w)
            out.append(w)
            continue
        w = Workload(
            rng.choice(PATTERNS),
            rng.choice(READ_SHARES),
            rng.choice(BLOCK_SIZES),
            rng.choice(QUEUE_DEPTHS),
        )
        sync = rng.choice(SYNC_EVERY)
        if w.read_pct == 0:
            w = Workload(w.pattern, w.read_pct, w.bs, w.iodepth, sync)
        if w.in_battery() or w.on_grid() or w in seen:
            continue
        seen.add(w)
        out.append(w)
    return out


def fio_args(w: Workload, target: Path, runtime_s: float, size: int, direct: bool) -> list[str]:
    opts = [("name", w.name), ("filename", str(target)), *w.options(runtime_s, size, direct)]
    return ["fio", *(f"--{k}={v}" for k, v in opts), "--output-format=json"]


@dataclass(frozen=True)
class Plan:
    stack: Path
    target: Path
    size: int
    workloads: list[Workload]
    repeat: int
    runtime_s: float
    seed: int


def rounds(repeat: int, workloads: Sequence[Workload]) -> list[tuple[int, Workload]]:
    """The real runs in the order they are made: `repeat` rounds, each running every
    workload once, so that the repetitions of one workload are minutes apart and its median
    spans the disk's drift over the whole run rather than one moment of it."""
    return [(k, w) for k in range(1, repeat + 1) for w in workloads]


def run(plan: Plan, out: Path, progress: TextIO | None = None) -> None:
    """Simulate and run every held-out workload of `plan` into `out`/sim and `out`/real."""
    if (why := fio_missing()) is not None:
        raise VmioError(why)
    stack_text = read_text(plan.stack, "stack file")
    (out / "sim").mkdir(parents=True, exist_ok=True)
    (out / "real").mkdir(parents=True, exist_ok=True)
    created = not plan.target.exists()
    if created:
        plan.target.touch()
    direct = direct_ok(plan.target)
    bar = Progress(
        len(plan.workloads) * (plan.repeat + 1), title="validate", stream=progress or sys.stderr
    )
    try:
        write_through(plan.target, plan.size, int(direct))
        for w in plan.workloads:
            job = w.job_text(plan.runtime_s, plan.size, direct)
            text = simulate_text(stack_text, str(plan.stack), job, f"{w.name}.fio", plan.seed)
            (out / "sim" / f"{w.name}.json").write_text(text, encoding="utf-8")
            bar.advance(f"sim {w.name}")
        for k, w in rounds(plan.repeat, plan.workloads):
            real = fio_json(fio_args(w, plan.target, plan.runtime_s, plan.size, direct), w.name)
            (out / "real" / f"{w.name}.rep{k}.json").write_text(real, encoding="utf-8")
            bar.advance(f"fio {w.name} rep {k}")
    finally:
        bar.close()
        if created:
            plan.target.unlink(missing_ok=True)


RAID0_VM = "vm1"


def raid0_stack(calibrated: Path, size: int, nbd: Mapping[str, Any] | None = None) -> str:
    """A KVM stack whose VM disk is a raid0 volume over two files of one calibrated disk:
    device `a` (the calibrated flash model, hardware of 2 x `size`, its own region the first
    `size` bytes) and device `b` (`share = "a"`: the next `size` bytes of the same hardware),
    the calibrated scheduler, cache=none. The real engine serves it over two image files
    (`vmio serve`, serve mode of vmio.real.engine) to fio's nbd engine, so the disk is
    `interface = "nbd"` with `nbd`, the [nbd] table of `vmio calibrate --serve-path`
    (vmio.real.servepath); without one (runs recorded before the serve path was measured) it is
    virtio-blk. The simulator runs the same file, the two regions queueing separately into
    one device model. The calibrated file's [[device]] and [scheduler] tables are copied as
    written (their keys and units, not the effective values), so they are read as TOML."""
    cal = tomllib.loads(read_text(calibrated, "stack file"))
    dev = {k: v for k, v in cal["device"][0].items() if k not in ("name", "path", "size")}
    dev["capacity"] = 2 * size
    stack = {
        "host": {"cores": cal["host"]["cores"]},
        "device": [
            {"name": "a", **dev, "size": size},
            {"name": "b", "share": "a", "capacity": size},
        ],
        "volume": [{"name": "r0", "layout": "raid0", "devices": ["a", "b"]}],
        "scheduler": cal["scheduler"],
        **({"nbd": dict(nbd)} if nbd is not None else {}),
        "vm": [
            {
                "name": RAID0_VM,
                "disk": [
                    {
                        "name": "vda",
                        "volume": "r0",
                        "interface": "virtio-blk" if nbd is None else "nbd",
                        "cache": "none",
                    }
                ],
            }
        ],
    }
    return stackfile.render(stack)


def run_raid0(
    plan: Plan, workloads: Sequence[Workload], out: Path, quick: bool = False, force: bool = False
) -> None:
    """The raid0 part: the serve path measured first (vmio.real.servepath over a RAM image in
    /dev/shm, its --quick budget with `quick`, into `out`/serve-path.toml and .json; `force`
    overwrites a stale image there), then each workload simulated on `raid0_stack` with that
    [nbd] table and run for real through `vmio serve` (fio's nbd engine on the VM's export)
    `plan.repeat` times."""
    from vmio.real import engine as realengine
    from vmio.real import servepath as calserve

    try:
        path = calserve.measure(calserve.DEFAULT_DIR, out, quick=quick, force=force)
    except VmioError as e:
        raise VmioError(f"raid0 part: the NBD path: {e} (--raid0 0 skips the part)") from None
    stack_path = out / "stack.toml"
    stack_text = raid0_stack(
        plan.stack, plan.size, calserve.nbd_table({**path.fit.nbd, **path.fit.cpu})
    )
    (out / "sim").mkdir(parents=True, exist_ok=True)
    (out / "real").mkdir(parents=True, exist_ok=True)
    stack_path.write_text(stack_text, encoding="utf-8")
    engine = realengine.Engine(
        # The device is the calibration of TARGET's own disk and the image files go on that
        # disk: whatever class the real engine finds there (a tmpfs is "memory"), the files
        # are what the fitted model stands for.
        realengine.Options(
            real_dir=plan.target.parent / f".{plan.target.name}.raid0",
            size=plan.size,
            substitute=True,
        )
    )
    bar = Progress(len(workloads) * (plan.repeat + 1), title="validate raid0", stream=sys.stderr)
    try:
        jobs = {}
        for w in workloads:
            jobs[w.name] = job = w.job_text(plan.runtime_s, plan.size, True)
            text = simulate_text(stack_text, str(stack_path), job, f"{w.name}.fio", plan.seed)
            (out / "sim" / f"{w.name}.json").write_text(text, encoding="utf-8")
            bar.advance(f"sim {w.name}")
        for k, w in rounds(plan.repeat, workloads):
            try:
                real = engine.run(
                    stack_text, str(stack_path), [(None, jobs[w.name], f"{w.name}.fio")], plan.seed
                )
            except realengine.Skipped as why:
                raise VmioError(f"raid0 {w.name}: the real engine skipped it: {why}") from None
            (out / "real" / f"{w.name}.rep{k}.json").write_text(real, encoding="utf-8")
            bar.advance(f"serve {w.name} rep {k}")
    finally:
        bar.close()
        shutil.rmtree(engine.opts.real_dir, ignore_errors=True)


@dataclass(frozen=True)
class Tail:
    """One point's completion-latency percentile: the real median over its runs (None: no
    run had enough requests), the real spread (max - min) / median, the simulator's."""

    point: str
    direction: str
    label: str
    real: float | None
    spread: float | None
    sim: float | None

    @property
    def error(self) -> float | None:
        if not self.real or self.sim is None:
            return None
        return self.sim / self.real - 1


def _percentiles(path: Path) -> dict[str, dict[str, float]]:
    """{direction: {label: ns}} of a fio (or vmio sim) JSON file's first job; p99.9 only
    from at least P999_MIN_IOS requests."""
    job = compare.read_fio_json(path)["jobs"][0]
    out: dict[str, dict[str, float]] = {}
    for d in ("read", "write"):
        side = job.get(d, {})
        n = int(side.get("total_ios", 0))
        pct = side.get("clat_ns", {}).get("percentile", {})
        if n <= 0 or not pct:
            continue
        out[d] = {
            label: float(pct[key])
            for label, key in TAIL_PERCENTILES
            if key in pct and (label != "p99.9" or n >= P999_MIN_IOS)
        }
    return out


def tails(out: Path) -> list[Tail]:
    """Each held-out point's p50, p99 and p99.9 (module doc): `out`/real's repetitions (their
    median and spread) against `out`/sim's run."""
    runs: dict[str, list[dict[str, dict[str, float]]]] = {}
    for path in sorted((out / "real").glob("*.json")):
        name = path.stem.rsplit(".rep", 1)[0]
        runs.setdefault(name, []).append(_percentiles(path))
    rows = []
    for name, reps in runs.items():
        sim_path = out / "sim" / f"{name}.json"
        sim = _percentiles(sim_path) if sim_path.is_file() else {}
        for d in ("read", "write"):
            for label, _ in TAIL_PERCENTILES:
                vals = [r[d][label] for r in reps if label in r.get(d, {})]
                if not vals and label not in sim.get(d, {}):
                    continue
                med = statistics.median(vals) if vals else None
                spread = (max(vals) - min(vals)) / med if med and len(vals) > 1 else None
                rows.append(Tail(name, d, label, med, spread, sim.get(d, {}).get(label)))
    return rows


def tail_summary(rows: Sequence[Tail]) -> dict[str, dict[str, float | None]]:
    """Per percentile label: the median and p90 of |error|, the median real spread."""
    out = {}
    for label, _ in TAIL_PERCENTILES:
        errs = [abs(r.error) for r in rows if r.label == label and r.error is not None]
        spreads = [r.spread for r in rows if r.label == label and r.spread is not None]
        out[label] = {
            "median": compare.quantile(errs, 0.5),
            "p90": compare.quantile(errs, 0.9),
            "spread": compare.quantile(spreads, 0.5),
            "n": len(errs),
        }
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def tail_text(rows: Sequence[Tail]) -> str:
    """The percentile table (us) and its summary line."""
    lines = [
        f"{'point':<28}{'dir':<6}{'pct':>6}{'real us':>10}{'spread':>8}{'sim us':>10}{'error':>9}"
    ]
    for r in rows:
        real = f"{r.real / 1e3:>10.1f}" if r.real else f"{'-':>10}"
        spread = f"{100 * r.spread:>7.0f}%" if r.spread is not None else f"{'-':>8}"
        sim = f"{r.sim / 1e3:>10.1f}" if r.sim is not None else f"{'-':>10}"
        err = f"{100 * r.error:>+8.1f}%" if r.error is not None else f"{'-':>9}"
        lines.append(f"{r.point:<28}{r.direction:<6}{r.label:>6}{real}{spread}{sim}{err}")
    sm = tail_summary(rows)
    parts = [
        f"{label} error median {_pct(v['median'])}, p90 {_pct(v['p90'])} ({v['n']} points)"
        for label, v in sm.items()
    ]
    spreads = ", ".join(f"{label} {_pct(v['spread'])}" for label, v in sm.items())
    lines.append(f"vmio validate: percentiles: {'; '.join(parts)}; real spread median: {spreads}")
    return "\n".join(lines) + "\n"


def compare_dir(out: Path, title: str) -> str:
    """Compare `out`/real with `out`/sim; write compare.txt/.csv/.png; the text (bandwidth
    and mean latency, then the percentiles, then the verdict)."""
    c = compare.compare(compare.load(out / "real"), compare.load(out / "sim"))
    rows = tails(out)
    text = (
        compare.table(c)
        + "\n"
        + compare.summary_line(c)
        + "\n\n"
        + tail_text(rows)
        + verdict(c, rows)
        + "\n"
    )
    (out / "compare.txt").write_text(text, encoding="utf-8")
    (out / "compare.csv").write_text(compare.csv_text(c), encoding="utf-8")
    (out / "compare.png").write_bytes(compare.plot_png(c, title))
    return text


RECORD_VERSION = 2
"""2: family 2's workloads and the percentiles (`tails`); 1: family 1, no percentiles."""


def _metrics_doc(m: compare.Metrics) -> dict[str, float | int | None]:
    return {
        "bw_bytes": m.bw_bytes,
        "iops": m.iops,
        "lat_mean_ns": m.lat_mean_ns,
        "clat_p99_ns": m.clat_p99_ns,
        "runs": m.runs,
        "bw_spread": m.bw_spread,
        "lat_spread": m.lat_spread,
    }


def _key_doc(key: compare.Key) -> str:
    return "/".join(v for _, v in key)


def record(out: Path, raid0_out: Path | None, seed: int, runtime_s: float) -> dict:
    """What a validation run measured, to check later runs of the simulator against it without
    the disk (tests/real_validation_figures.json; scripts/real-validation.py writes it): the
    calibrated stack, the family's seed, each point's real median and spread and the
    simulator's figures of the time."""
    stack = out / "calibration" / "stack.toml"
    measured = boundedjson.read_json(
        out / "calibration" / "measurements.json", "calibration measurements"
    )
    parts = {"heldout": out}
    if raid0_out is not None:
        parts["raid0"] = raid0_out
    doc: dict = {
        "version": RECORD_VERSION,
        "seed": seed,
        "runtime_s": runtime_s,
        "size": calibrated_size(stack),
        "stack": read_text(stack, "stack file"),
        "machine": measured.get("machine"),
        "parts": {},
    }
    for part, d in parts.items():
        real, sim = compare.load(d / "real"), compare.load(d / "sim")
        serve_path = d / "serve-path.toml"
        c = compare.compare(real, sim)
        names = sorted({dict(k)["file"] for k in real})
        directs = {
            compare.read_fio_json(p)["jobs"][0]["job options"].get("direct", "1")
            for p in (d / "real").glob("*.json")
        }
        doc["parts"][part] = {
            "workloads": names,
            "direct": directs == {"1"},
            "real": {_key_doc(k): _metrics_doc(m) for k, m in sorted(real.items())},
            "sim": {_key_doc(k): _metrics_doc(m) for k, m in sorted(sim.items())},
            "summary": compare.summary_line(c),
            "tails": [
                {
                    "point": t.point,
                    "direction": t.direction,
                    "label": t.label,
                    "real": t.real,
                    "spread": t.spread,
                    "sim": t.sim,
                }
                for t in tails(d)
            ],
        }
        if serve_path.is_file():  # the raid0 part's [nbd] table (vmio calibrate --serve-path)
            doc["parts"][part]["nbd"] = tomllib.loads(read_text(serve_path, "serve path"))["nbd"]
    return doc


def recorded_comparison(doc: dict, part: str, sim_dir: Path) -> compare.Comparison:
    """Simulate a recorded part's workloads again into `sim_dir` (as `run` and `run_raid0`
    do) and compare them with the recorded real figures."""
    rec = doc["parts"][part]
    wanted = set(rec["workloads"])
    # A shorter draw is a prefix of a longer one: the longest holds every recorded workload.
    family = 1 if doc.get("version", 1) == 1 else FAMILY
    workloads = [w for w in heldout(doc["seed"], MAX_POINTS, family) if w.name in wanted]
    if len(workloads) < len(wanted):
        raise VmioError(f"recorded {part} workloads are not of the family (seed {doc['seed']})")
    stack_text = doc["stack"]
    if part == "raid0":
        tmp = sim_dir / "calibrated.toml"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(stack_text, encoding="utf-8")
        stack_text = raid0_stack(tmp, doc["size"], rec.get("nbd"))
    sim_dir.mkdir(parents=True, exist_ok=True)
    for w in workloads:
        job = w.job_text(doc["runtime_s"], doc["size"], rec["direct"] or part == "raid0")
        text = simulate_text(stack_text, "stack.toml", job, f"{w.name}.fio", doc["seed"])
        (sim_dir / f"{w.name}.json").write_text(text, encoding="utf-8")
    real = {}
    for key_text, m in rec["real"].items():
        name, job, direction = key_text.split("/")
        key = (("file", name), ("job", job), ("direction", direction))
        real[key] = compare.Metrics(**m)
    return compare.compare(real, compare.load(sim_dir))


def verdict(c: compare.Comparison, rows: Sequence[Tail] = ()) -> str:
    """The targets (docs/validation.md) against the comparison's summary and, with `rows`,
    the p99's, one line."""
    s = c.summary
    parts = []
    for what, median, p90 in (
        ("bandwidth", s.bw_median, s.bw_p90),
        ("mean latency", s.lat_median, s.lat_p90),
    ):
        ok = (
            median is not None
            and p90 is not None
            and median <= TARGETS["median"]
            and p90 <= TARGETS["p90"]
        )
        parts.append(f"{what} {'PASS' if ok else 'MISS'}")
    t = f"median <= {TARGETS['median']:.0%}, p90 <= {TARGETS['p90']:.0%}"
    if rows:
        p99 = tail_summary(rows)["p99"]
        ok = (
            p99["median"] is not None
            and p99["p90"] is not None
            and p99["median"] <= P99_TARGETS["median"]
            and p99["p90"] <= P99_TARGETS["p90"]
        )
        parts.append(
            f"p99 {'PASS' if ok else 'MISS'} (median <= {P99_TARGETS['median']:.0%}, "
            f"p90 <= {P99_TARGETS['p90']:.0%})"
        )
    return f"vmio validate: targets ({t}): {'; '.join(parts)}"


def calibrated_size(stack: Path) -> int:
    """The file size a calibration measured on: its device's capacity."""
    return stackfile.load(stack).devices[0].capacity_bytes
