"""Throttling checked for real: the same fio job (the nbd engine) against `vmio serve` with a
`[vm.disk.iotune]` limit and against `qemu-storage-daemon` serving the same raw image through
its throttle filter with the same limit, and `vmio sim` of the job on the stack beside them.

QEMU's side (QEMU 7.2, qemu-storage-daemon(1), block/throttle.c, qapi/block-core.json
ThrottleLimits):

    qemu-storage-daemon --object throttle-group,id=tg,x-iops-total=A,x-iops-total-max=M,
                                 x-iops-total-max-length=L
        --blockdev driver=file,node-name=f,filename=IMAGE
        --blockdev driver=throttle,node-name=t,throttle-group=tg,file=f
        --nbd-server addr.type=unix,addr.path=SOCK --export type=nbd,id=e,node-name=t,...

vmio's side: the stack's disk carries `[vm.disk.iotune]` with libvirt's names
(total_iops_sec = A, total_iops_sec_max = M, total_iops_sec_max_length = L), served by
`vmio serve`, predicted by `vmio sim` with `interface = "nbd"`.

The image is written with random bytes: QEMU's NBD server answers a read of a hole with a
structured "hole" reply without reading (nbd/server.c `nbd_co_send_sparse_read`), which
passes no throttle; every byte of the image must be data for the limit to apply.

```text
steady case: fio ramp_time = 1 s (the bucket's slack, avg / 10 + 1 requests at once, falls
             in it), then RUNTIME s; achieved = fio's iops or bw_bytes; error = achieved /
             limit - 1
burst case:  no ramp; fio's iops log averaged over WINDOW_MS; the burst ends at the first
             window below (max + avg) / 2; closed form (docs/throttle.txt, util/throttle.c):
             T = (max x max_length - max / 10) / (max - avg)
```
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vmio.real import serve as realserve

IMAGE_BYTES = 256 << 20
WINDOW_MS = 250


@dataclass(frozen=True)
class Case:
    name: str
    rw: str
    bs: str
    iodepth: int
    # libvirt <iotune> key -> value (vmio's [vm.disk.iotune]).
    iotune: dict[str, int]
    burst: bool = False

    def qemu_limits(self) -> str:
        """The same limits as qemu-storage-daemon's throttle-group properties."""
        names = {
            "total_iops_sec": "x-iops-total",
            "total_bytes_sec": "x-bps-total",
            "total_iops_sec_max": "x-iops-total-max",
            "total_iops_sec_max_length": "x-iops-total-max-length",
            "total_bytes_sec_max": "x-bps-total-max",
            "total_bytes_sec_max_length": "x-bps-total-max-length",
        }
        return ",".join(f"{names[k]}={v}" for k, v in self.iotune.items())

    @property
    def limit(self) -> float:
        """The steady limit in the unit fio reports (IOPS, or bytes/s)."""
        return float(self.iotune.get("total_iops_sec") or self.iotune["total_bytes_sec"])

    @property
    def unit(self) -> str:
        return "IOPS" if "total_iops_sec" in self.iotune else "B/s"

    def burst_closed_form_s(self) -> float:
        a = self.iotune["total_iops_sec"]
        m = self.iotune["total_iops_sec_max"]
        length = self.iotune["total_iops_sec_max_length"]
        return (m * length - m / 10) / (m - a)


# Limits well below what either server does on this shared 2-core machine (a debug build of
# vmio serve did ~1300 4k reads per second at QD8 while other builds ran), so the limit, not
# the server, sets the rate.
CASES = (
    Case("4k randread QD8, 200 IOPS", "randread", "4k", 8, {"total_iops_sec": 200}),
    Case("64k write QD4, 8 MiB/s", "write", "64k", 4, {"total_bytes_sec": 8 << 20}),
    Case(
        "4k randread QD8, 100 IOPS, burst 400 for 2 s",
        "randread",
        "4k",
        8,
        {"total_iops_sec": 100, "total_iops_sec_max": 400, "total_iops_sec_max_length": 2},
        burst=True,
    ),
)


@dataclass
class Run:
    case: str
    server: str
    # Steady: achieved IOPS or bytes/s. Burst: the burst's measured length (s).
    achieved: float
    burst_s: float | None = None
    windows: list[tuple[float, float]] = field(default_factory=list)


def tools_missing() -> str | None:
    for tool, pkg in (("fio", "fio"), ("qemu-storage-daemon", "qemu-system-common")):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install {pkg})"
    return None


def make_image(path: Path, size: int = IMAGE_BYTES) -> None:
    """A raw image of random bytes (no holes)."""
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)


def stack_text(image: Path, case: Case, interface: str | None = None) -> str:
    """One VM disk over the whole image with the case's iotune (cache = writeback: the
    image may sit on tmpfs, where O_DIRECT fails; the limit is far below the page cache)."""
    lines = [
        "[[device]]",
        'name = "img"',
        'model = "ssd"',
        f'path = "{image}"',
        "[[volume]]",
        'name = "data"',
        'layout = "single"',
        'devices = ["img"]',
        "[[vm]]",
        'name = "vm1"',
        "[[vm.disk]]",
        'name = "disk0"',
        'volume = "data"',
        f"size = {image.stat().st_size // 4096 * 4096}",
        'cache = "writeback"',
    ]
    if interface:
        lines.append(f'interface = "{interface}"')
    lines.append("[vm.disk.iotune]")
    lines += [f"{k} = {v}" for k, v in case.iotune.items()]
    return "\n".join(lines) + "\n"


def job_text(case: Case, runtime_s: float, uri: str | None, iops_log: Path | None) -> str:
    """The fio job (vmio.real.serve.nbd_global; a burst is measured from the start)."""
    lines = realserve.nbd_global(
        case.rw, case.bs, case.iodepth, IMAGE_BYTES, runtime_s, not case.burst
    )
    if iops_log is not None:
        lines += [f"write_iops_log={iops_log}", f"log_avg_msec={WINDOW_MS}"]
    lines.append("[job]")
    if uri:
        lines.append(f"uri={uri}")
    return "\n".join(lines) + "\n"


def start_server(server: str, tmp: Path, image: Path, case: Case) -> tuple[subprocess.Popen, str]:
    """Start `vmio` or `qemu` on a fresh socket in tmp (vmio.real.serve.start); returns
    (process, fio's uri)."""
    sock = tmp / f"{server}.sock"
    if server == "vmio":
        stack = tmp / "stack.toml"
        stack.write_text(stack_text(image, case))
        return realserve.start_vmio(stack, sock), f"nbd+unix:///vm1/disk0?socket={sock}"
    cmd = realserve.qsd_command(
        sock,
        "disk",
        "t",
        [
            f"driver=file,node-name=f,filename={image}",
            "driver=throttle,node-name=t,throttle-group=tg,file=f",
        ],
        [f"throttle-group,id=tg,{case.qemu_limits()}"],
    )
    return realserve.start(cmd, sock, server), f"nbd+unix:///disk?socket={sock}"


def _fio(text: str, cwd: Path) -> dict:
    path = cwd / "job.fio"
    path.write_text(text)
    out = subprocess.run(
        ["fio", "--output-format=json", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout[out.stdout.index("{") :])


def _achieved(fio_json: dict, case: Case) -> float:
    job = fio_json["jobs"][0]
    d = job["write" if "write" in case.rw else "read"]
    return float(d["iops"]) if case.unit == "IOPS" else float(d["bw_bytes"])


def burst_length_s(windows: list[tuple[float, float]], case: Case) -> float | None:
    """Where the rate first falls below (max + avg) / 2, in seconds: `windows` are fio's
    iops log entries (end of the window in ms, IOPS in it); in the window straddling the end
    of the burst the rate changed at the fraction its IOPS gives."""
    m, a = case.iotune["total_iops_sec_max"], case.iotune["total_iops_sec"]
    prev = 0.0
    for t, v in windows:
        if v < (m + a) / 2:
            frac = max(0.0, min(1.0, (v - a) / (m - a)))
            return (prev + frac * (t - prev)) / 1000
        prev = t
    return None


def _windows(text: str) -> list[tuple[float, float]]:
    """(time ms, IOPS) per window of fio's iops log text (time, value, ddir, bs, prio)."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2:
            out.append((float(parts[0]), float(parts[1])))
    return out


def measure(server: str, tmp: Path, image: Path, case: Case, runtime_s: float) -> Run:
    proc, uri = start_server(server, tmp, image, case)
    try:
        log = tmp / f"{server}-log" if case.burst else None
        j = _fio(job_text(case, runtime_s, uri, log), tmp)
    finally:
        realserve._stop(proc)
    if not case.burst:
        return Run(case.name, server, _achieved(j, case))
    windows = _windows((tmp / f"{server}-log_iops.1.log").read_text())
    return Run(
        case.name, server, _achieved(j, case), burst_length_s(windows, case), windows=windows
    )


def simulate(tmp: Path, image: Path, case: Case, runtime_s: float) -> Run:
    """`vmio sim` of the same job on the stack with interface = "nbd"."""
    from vmio.sim import simulate_text

    stack = stack_text(image, case, interface="nbd")
    log = "simlog" if case.burst else None
    j = json.loads(
        simulate_text(stack, "stack.toml", job_text(case, runtime_s, None, None), "job.fio", 1)
    )
    run = Run(case.name, "vmio sim", _achieved(j, case))
    if case.burst:
        # The simulator's per-window IOPS: rerun with fio's iops log in the job.
        k = json.loads(
            simulate_text(
                stack,
                "stack.toml",
                job_text(case, runtime_s, None, tmp / log),
                "job.fio",
                1,
            )
        )
        windows = _sim_windows(k)
        run.windows = windows
        run.burst_s = burst_length_s(windows, case)
    return run


def _sim_windows(fio_json: dict) -> list[tuple[float, float]]:
    """The simulator's iops log (vmio.logs: name, fio's log text) as (time ms, IOPS)."""
    for log in fio_json.get("vmio", {}).get("logs", []):
        if "_iops." in log["name"]:
            return _windows(log["text"])
    return []


def check(
    workdir: Path,
    rounds: int = 3,
    runtime_s: float = 3,
    burst_runtime_s: float = 5,
    cases: tuple[Case, ...] = CASES,
    log=print,
) -> list[Run]:
    """Every case on both servers, `rounds` times alternating, and the simulator once."""
    image = workdir / "image.raw"
    if not image.exists():
        make_image(image)
    runs: list[Run] = []
    for case in cases:
        t = burst_runtime_s if case.burst else runtime_s
        for r in range(rounds):
            for server in ("vmio", "qemu") if r % 2 == 0 else ("qemu", "vmio"):
                run = measure(server, workdir, image, case, t)
                log(f"{case.name} round {r + 1} {server}: {_show(run, case)}")
                runs.append(run)
        run = simulate(workdir, image, case, t)
        log(f"{case.name} vmio sim: {_show(run, case)}")
        runs.append(run)
    return runs


def _show(run: Run, case: Case) -> str:
    s = f"{run.achieved:,.0f} {case.unit}"
    if run.burst_s is not None:
        s += f", burst {run.burst_s:.2f} s"
    return s


def summary(runs: list[Run], cases: tuple[Case, ...] = CASES) -> list[dict]:
    """Per case and server: mean, spread (max - min) and the mean's error against the limit
    (steady) or the closed-form burst length (burst)."""
    out = []
    for case in cases:
        for server in ("vmio", "qemu", "vmio sim"):
            xs = [r for r in runs if r.case == case.name and r.server == server]
            if not xs:
                continue
            if case.burst:
                vals = [r.burst_s for r in xs if r.burst_s is not None]
                target = case.burst_closed_form_s()
            else:
                vals = [r.achieved for r in xs]
                target = case.limit
            if not vals:
                out.append({"case": case.name, "server": server, "mean": None})
                continue
            mean = statistics.fmean(vals)
            out.append(
                {
                    "case": case.name,
                    "server": server,
                    "target": target,
                    "mean": mean,
                    "spread": max(vals) - min(vals),
                    "error": mean / target - 1,
                    "values": vals,
                }
            )
    return out


def table(rows: list[dict]) -> str:
    lines = ["case | server | target | mean | spread | error"]
    for r in rows:
        if r["mean"] is None:
            lines.append(f"{r['case']} | {r['server']} | - | - | - | -")
            continue
        lines.append(
            f"{r['case']} | {r['server']} | {r['target']:,.2f} | {r['mean']:,.2f} | "
            f"{r['spread']:,.2f} | {100 * r['error']:+.1f} %"
        )
    return "\n".join(lines)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory(prefix="vmio-throttle-") as d:
        runs = check(Path(d), rounds=rounds)
    rows = summary(runs)
    print(table(rows))
    if out := os.environ.get("VMIO_REAL_THROTTLE_JSON"):
        Path(out).write_text(
            json.dumps({"runs": [asdict(r) for r in runs], "summary": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
