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
last level, its size as this machine's programs get it (`effective_llc`):
            curve = `triad chase MIB` on core 0 for MIB = 2 x the level below's size (at
                    least 1 MiB), doubling, up to the last level's sysfs size (CURVE_LOADS
                    loads each)
            cut   = curve's first latency + HALFWAY x (latency - curve's first latency)
            size  = the largest MIB up to which every point of the curve is at most cut
                    (the first point is the level's own plateau: twice the level below);
                    the sysfs size where the whole curve stays below the cut
            the last level's banks get min(sysfs size, size)
inclusion = "victim" on an AMD Zen (`l3_inclusion`: its L3 is filled from the L2s' evictions),
            else no key (the simulator's inclusive last level)
replacement = "rrip" with rrip_bits and rrip_long (`rrip_keys`) once vmio.real.corun has
            measured rrip_long from its chases beside the triad (its module doc); no key
            (LRU) before or without a measurement
window    = rob_entries and miss_buffers (the contention model's memory-level parallelism:
            misses within a reorder buffer's window overlap) and store_buffer (a store's
            miss stalls only once the stores behind it fill the store queue) from
            /proc/cpuinfo's vendor, cpu family and model (`core_window`); no keys (misses
            wait alone, stores' as loads') for a core not in its table
```

Why the last level's size is measured: in a VM (this machine is a 2-vCPU KVM guest on an AMD
EPYC) sysfs shows the physical L3's size, but the L3 is shared with the host's other vCPUs and
tenants, whose lines take most of it: a chase here cost 35 ns a load over 1 MiB, 78 over
2 MiB, 141 over 4 MiB and 161 over 8 MiB against 194 over 64 MiB (docs/cpu.md), so past about
2 MiB a program is served by memory even alone, and the contention model
(crates/vmio-core/src/cpu/contention.rs) must not let a program hold an 8 MiB footprint in a
cache it never gets. The reading of the curve is lmbench's (McVoy and Staelin, "lmbench:
Portable tools for performance analysis", USENIX 1996, `lat_mem_rd`; Saavedra and Smith,
"Measuring cache and TLB performance and their effect on benchmark run times", IEEE TC 1995):
a level's capacity is where the latency of a dependent chase leaves that level's plateau;
halfway to memory's latency is where more than half the loads miss it.

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
CURVE_LOADS = 4_000_000
"""Loads of each chase of the last level's curve (about 0.6 s at memory's latency)."""
HALFWAY = 0.5


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


WINDOWS = (
    # (cpu family, first model, last model, reorder-buffer entries, store-queue entries, name)
    (0x17, 0x00, 0x2F, 192, 44, "Zen / Zen+"),
    (0x17, 0x30, 0xFF, 224, 48, "Zen 2"),
    (0x19, 0x00, 0x0F, 256, 64, "Zen 3"),
    (0x19, 0x20, 0x5F, 256, 64, "Zen 3"),
    (0x19, 0x10, 0x1F, 320, 64, "Zen 4"),
    (0x19, 0x60, 0xAF, 320, 64, "Zen 4"),
    (0x1A, 0x00, 0xFF, 448, 104, "Zen 5"),
)
"""AMD cores' reorder buffers and store queues by cpu family and model (AMD's
microarchitecture disclosures and Software Optimization Guides for Zen, Zen 2, Zen 3, Zen 4
and Zen 5: reorder buffers of 192, 224, 256, 320 and 448 entries, store queues of 44, 48,
64, 64 and 104; the Zen 5 guide is publication 58455, August 2024)."""
AMD_MISS_BUFFERS = 22
"""Outstanding L1 data misses of an AMD Zen core (ESTIMATE: the miss address buffers AMD's
guides give for the first Zen generations, kept for the later ones, whose counts are not
checked here; it bounds only a streaming loop's overlap, not bzip2's)."""


def amd_family_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[int, int] | None:
    """(cpu family, model) of the first processor in `cpuinfo` when it is an AMD one."""
    fields: dict[str, str] = {}
    for line in cpuinfo.read_text().splitlines():
        if not line.strip():
            break
        k, _, v = line.partition(":")
        fields[k.strip()] = v.strip()
    if fields.get("vendor_id") != "AuthenticAMD":
        return None
    try:
        return int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return None


def core_window(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[int, int, int] | None:
    """(rob_entries, miss_buffers, store_buffer) of this machine's cores (module doc), None
    when its processor is not in `WINDOWS`."""
    fm = amd_family_model(cpuinfo)
    if fm is None:
        return None
    for fam, lo, hi, rob, stq, _ in WINDOWS:
        if fm[0] == fam and lo <= fm[1] <= hi:
            return rob, AMD_MISS_BUFFERS, stq
    return None


VICTIM_L3_FAMILIES = (0x17, 0x19, 0x1A)
"""AMD families whose L3 is a victim cache of the cores' L2s (Zen to Zen 5: AMD's Software
Optimization Guides for families 17h, 19h and 1Ah, the L3 filled from L2 evictions; the
contention model's `inclusion = "victim"`, crates/vmio-core/src/cpu/cache.rs)."""


def l3_inclusion(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """`[host.cache] inclusion` of this machine (module doc): "victim" on an AMD Zen, None
    (the simulator's default, inclusive) for processors not known here."""
    fm = amd_family_model(cpuinfo)
    return "victim" if fm is not None and fm[0] in VICTIM_L3_FAMILIES else None


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


def host_cache(
    banks: list[Bank],
    memory: Memory,
    mhz: int,
    llc_bytes: int | None = None,
    window: tuple[int, ...] | None = None,
    inclusion: str | None = None,
) -> dict:
    """The `[host.cache]` table (crates/vmio-core/src/cpu/cache.rs's keys); `llc_bytes`: the
    last level's measured size (`effective_llc`), which its banks take where it is smaller
    than sysfs says; `window`: the cores' (rob_entries, miss_buffers[, store_buffer])
    (`core_window`; a figures file recorded before the store buffer has two); `inclusion`:
    how the last level holds the private levels' lines (`l3_inclusion`; None: the
    simulator's default)."""
    top = max(b.level for b in banks)

    def size(b: Bank) -> int:
        if llc_bytes is not None and b.level == top:
            return min(b.size_bytes, llc_bytes)
        return b.size_bytes

    table = {
        "memory_bandwidth": round(memory.bandwidth_all),
        "memory_latency": f"{round(memory.latency_ns)}ns",
        "clock_mhz": mhz,
    }
    if window is not None:
        keys = ("rob_entries", "miss_buffers", "store_buffer")
        table.update(zip(keys, window, strict=False))
    if inclusion is not None:
        table["inclusion"] = inclusion
    table["bank"] = [{"level": b.level, "size": size_text(size(b)), "cpus": b.cpus} for b in banks]
    return table


def rrip_keys(rrip_long: float, bits: int) -> dict:
    """The `[host.cache]` keys of an RRIP last level (crates/vmio-core/src/cpu/cache.rs):
    `rrip_long` measured (vmio.real.corun.rrip_long_of), `bits` the width taken."""
    return {"replacement": "rrip", "rrip_bits": bits, "rrip_long": round(rrip_long, 4)}


def curve_sizes(banks: list[Bank]) -> list[int]:
    """The chase sizes (MiB) of the last level's curve (module doc)."""
    top = max(b.level for b in banks)
    llc = max(b.size_bytes for b in banks if b.level == top)
    below = [b.size_bytes for b in banks if b.level < top]
    mib = max(1, (2 * max(below, default=0)) >> 20)
    sizes = []
    while mib << 20 <= llc:
        sizes.append(mib)
        mib *= 2
    return sizes


def effective_llc(curve: list[tuple[int, float]], memory_ns: float, sysfs_bytes: int) -> int:
    """The last level's size as programs here get it (module doc), from the chase `curve`
    ((MiB, ns per load), by size) and memory's latency."""
    if not curve:
        return sysfs_bytes
    base = curve[0][1]
    cut = base + HALFWAY * (memory_ns - base)
    held = curve[0][0]
    for mib, ns in curve[1:]:
        if ns > cut:
            return held << 20
        held = mib
    return sysfs_bytes


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


def chase_ns(binary: Path, mib: int, loads: int, cpu: int | None = 0) -> float:
    """CPU ns per load of `triad chase MIB LOADS` on core `cpu`."""
    r = subprocess.run(
        pinned([str(binary), "chase", str(mib), str(loads)], cpu),
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise HostCacheError(f"{binary} chase: {r.stderr.strip()}")
    return parse_output(r.stdout)["ns_per_load"]


def measure_memory(binary: Path, passes: int, cores: int, loads: int = CHASE_LOADS) -> Memory:
    """The bandwidth of one copy and of one per core, and the chase (module doc)."""
    one = triad_rate(run_triads(binary, passes, [0])[0])
    every = sum(triad_rate(o) for o in run_triads(binary, passes, list(range(cores))))
    return Memory(one, every, cores, chase_ns(binary, CHASE_MIB, loads))


def measure(
    binary: Path, passes: int = 20, loads: int = CHASE_LOADS, curve_loads: int = CURVE_LOADS
) -> tuple[dict, dict]:
    """This machine's [host.cache] table and what it came from (banks, memory, clock, the last
    level's chase curve and measured size)."""
    banks = read_banks()
    cores = os.cpu_count() or 1
    memory = measure_memory(binary, passes, cores, loads)
    mhz = clock_mhz()
    curve = [(mib, chase_ns(binary, mib, curve_loads)) for mib in curve_sizes(banks)]
    top = max(b.level for b in banks)
    sysfs = max(b.size_bytes for b in banks if b.level == top)
    llc = effective_llc(curve, memory.latency_ns, sysfs)
    how = {
        "banks": [asdict(b) for b in banks],
        "memory": asdict(memory),
        "clock_mhz": mhz,
        "llc_curve": [[mib, ns] for mib, ns in curve],
        "llc_sysfs_bytes": sysfs,
        "llc_bytes": llc,
        "window": core_window(),
        "inclusion": l3_inclusion(),
    }
    return host_cache(banks, memory, mhz, llc, how["window"], how["inclusion"]), how


__all__ = [
    "BYTES_PER_ELEMENT",
    "CHASE_LOADS",
    "CHASE_MIB",
    "CURVE_LOADS",
    "HALFWAY",
    "ELEMENTS",
    "SOURCE",
    "WINDOWS",
    "AMD_MISS_BUFFERS",
    "VICTIM_L3_FAMILIES",
    "Bank",
    "HostCacheError",
    "Memory",
    "amd_family_model",
    "build",
    "cc_missing",
    "chase_ns",
    "clock_mhz",
    "core_window",
    "curve_sizes",
    "effective_llc",
    "host_cache",
    "l3_inclusion",
    "measure",
    "measure_memory",
    "parse_output",
    "parse_size",
    "pinned",
    "read_banks",
    "rrip_keys",
    "run_triads",
    "size_text",
    "triad_rate",
]
