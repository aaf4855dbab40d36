"""This machine's `[host.cache]`, measured: its caches from Linux's sysfs and its memory from
the project's triad loop (`triad.c` beside this file, compiled with the system `cc`).

```text
banks     = /sys/devices/system/cpu/cpu*/cache/index*/{level,type,size,shared_cpu_list}:
            one bank per distinct (level, shared_cpu_list) of a Data or Unified cache
            (libvirt's `virsh capabilities` <cache><bank> reads the same files; Instruction
            caches are left out, since [host.cache] allows one bank per core and level and
            the contention model reads only the last level); size "32K" / "32768K" / "1M"
            are KiB / MiB (the kernel's cacheinfo prints K, and M on some architectures)
clock_mhz = /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq / 1000 where cpufreq
            exists, else /proc/cpuinfo's first "cpu MHz" (a guest's TSC rate under KVM)
bandwidth = the triad loop on every core at once (one process pinned per core, STREAM's
            all-threads figure; McCalpin 1995): sum over copies of 32 B x elements x passes
            / the copy's own CPU time in its passes (`triad.c`). One copy alone is recorded
            too: a single core draws less than the bus carries (its outstanding misses
            limit it), and the contention model's bus is the whole machine's
latency   = `triad chase`: dependent loads over one random cycle of CHASE_MIB MiB (4 x a
            32 MiB last-level cache), CPU ns per load
```

Under a hypervisor (this machine is a KVM guest) the chase's figure also holds the guest's
nested page walk whenever the host backs the guest's huge pages with small ones: the figure
is what a miss costs here, not the DRAM's datasheet latency.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
SOURCE = Path(__file__).with_name("triad.c")
CFLAGS = ("-O2",)
ELEMENTS = 1 << 24
"""Elements of each triad array (`N` in triad.c; `ELEMENTS` in workload/cpu/triad.rs)."""
BYTES_PER_ELEMENT = 32
CHASE_MIB = 128


class HostCacheError(Exception):
    """A sysfs tree, a compiler or a triad run that gives no figure (one line, naming it)."""


@dataclass(frozen=True)
class Bank:
    """One cache instance, as [host.cache]'s [[bank]] takes it."""

    level: int
    size_bytes: int
    cpus: str
    """shared_cpu_list, as Linux prints it ("0-1", "0,2")."""
    type: str


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size ("32K", "1M", "512")."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if m is None:
        raise HostCacheError(f"cache size {text!r}: accepted: digits with K, M or G")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def read_banks(root: Path = SYS_CPU) -> list[Bank]:
    """The caches under `root` (module doc), by level then first core."""
    banks: dict[tuple[int, str], Bank] = {}
    for index in sorted(root.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text())
            cpus = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError) as e:
            raise HostCacheError(f"{index}: {e}") from e
        banks.setdefault((level, cpus), Bank(level, size, cpus, kind))
    if not banks:
        raise HostCacheError(f"{root}: no cpu*/cache/index* with level, type, size")

    def first_core(b: Bank) -> int:
        return int(re.split(r"[-,]", b.cpus)[0])

    return sorted(banks.values(), key=lambda b: (b.level, first_core(b)))


def clock_mhz(root: Path = SYS_CPU, cpuinfo: Path = Path("/proc/cpuinfo")) -> int:
    """The cores' clock (module doc)."""
    freq = root / "cpu0/cpufreq/cpuinfo_max_freq"
    if freq.exists():
        return round(int(freq.read_text()) / 1000)
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("cpu MHz"):
            return round(float(line.split(":", 1)[1]))
    raise HostCacheError(f"{freq} and {cpuinfo}: no clock")


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


@dataclass(frozen=True)
class Memory:
    """The triad's figures: bytes/s of one copy alone and of one copy per core at once, and
    the chase's ns per load."""

    bandwidth_one: float
    bandwidth_all: float
    copies: int
    latency_ns: float


def host_cache(banks: list[Bank], memory: Memory, mhz: int) -> dict:
    """The `[host.cache]` table (crates/vmio-core/src/cpu/cache.rs's keys)."""
    return {
        "memory_bandwidth": round(memory.bandwidth_all),
        "memory_latency": f"{round(memory.latency_ns)}ns",
        "clock_mhz": mhz,
        "bank": [
            {"level": b.level, "size": size_text(b.size_bytes), "cpus": b.cpus} for b in banks
        ],
    }


def cc_missing() -> str | None:
    """Why the triad cannot be built here, or None."""
    if shutil.which("cc") is None:
        return "'cc' is not installed (apt-get install gcc): the triad loop is C built at run time"
    return None


def build(workdir: Path) -> Path:
    """Compile triad.c into `workdir`; the binary's path."""
    if (why := cc_missing()) is not None:
        raise HostCacheError(why)
    out = workdir / "triad"
    r = subprocess.run(
        ["cc", *CFLAGS, "-o", str(out), str(SOURCE)], capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        raise HostCacheError(f"cc {SOURCE}: {r.stderr.strip().splitlines()[-1:]}")
    return out


def pinned(argv: list[str], cpu: int | None) -> list[str]:
    """`argv` on core `cpu` (taskset) when one is given and taskset exists."""
    if cpu is None or shutil.which("taskset") is None:
        return argv
    return ["taskset", "-c", str(cpu), *argv]


def parse_output(text: str) -> dict[str, float]:
    """triad.c's `key=value` line."""
    fields = dict(kv.split("=", 1) for kv in text.split()[1:] if "=" in kv)
    try:
        return {k: float(v) for k, v in fields.items()}
    except ValueError as e:
        raise HostCacheError(f"triad printed {text.strip()!r}") from e


def triad_rate(out: dict[str, float]) -> float:
    """Bytes per CPU second of a triad run's passes."""
    return out["bytes_per_element"] * out["elements"] * out["passes"] / out["seconds"]


def run_triads(binary: Path, passes: int, cpus: list[int | None]) -> list[dict[str, float]]:
    """One triad copy per entry of `cpus`, at once; each one's figures."""
    procs = [
        subprocess.Popen(
            pinned([str(binary), "triad", str(passes)], c), stdout=subprocess.PIPE, text=True
        )
        for c in cpus
    ]
    outs = []
    for p in procs:
        text, _ = p.communicate()
        if p.returncode != 0:
            raise HostCacheError(f"{binary} triad {passes}: exit status {p.returncode}")
        outs.append(parse_output(text))
    return outs


CHASE_LOADS = 20_000_000


def measure_memory(binary: Path, passes: int, cores: int, loads: int = CHASE_LOADS) -> Memory:
    """The bandwidth of one copy and of one per core, and the chase (module doc)."""
    one = triad_rate(run_triads(binary, passes, [0])[0])
    every = sum(triad_rate(o) for o in run_triads(binary, passes, list(range(cores))))
    r = subprocess.run(
        pinned([str(binary), "chase", str(CHASE_MIB), str(loads)], 0),
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise HostCacheError(f"{binary} chase: {r.stderr.strip()}")
    return Memory(one, every, cores, parse_output(r.stdout)["ns_per_load"])


def measure(binary: Path, passes: int = 20, loads: int = CHASE_LOADS) -> tuple[dict, dict]:
    """This machine's [host.cache] table and what it came from (banks, memory, clock)."""
    banks = read_banks()
    cores = os.cpu_count() or 1
    memory = measure_memory(binary, passes, cores, loads)
    mhz = clock_mhz()
    how = {"banks": [asdict(b) for b in banks], "memory": asdict(memory), "clock_mhz": mhz}
    return host_cache(banks, memory, mhz), how


__all__ = [
    "BYTES_PER_ELEMENT",
    "CHASE_LOADS",
    "CHASE_MIB",
    "ELEMENTS",
    "SOURCE",
    "Bank",
    "HostCacheError",
    "Memory",
    "build",
    "cc_missing",
    "clock_mhz",
    "host_cache",
    "measure",
    "measure_memory",
    "parse_output",
    "parse_size",
    "pinned",
    "read_banks",
    "run_triads",
    "size_text",
    "triad_rate",
]
