"""Quantities of a study point: their names, values from a result, units, titles, formatting.

A point's *quantity* (calibration, tables, figures) is its bandwidth in MB/s (`total`, `read`,
`write`) or, from the result's `vmio.share` / `vmio.vms` (several VMs), `error_rate_pct`,
`jain`, `ratio:<vm>` (that VM's bandwidth over the lightest-weight VM's) or `bw:<vm>` (that
VM's bandwidth, MB/s). `ops` is the I/O operations per second of every job (read + write
IOPS, fio's `iops`). From the guests' filesystems (`vmio.guests[].disks[]`, every disk
summed) and the host page cache (`vmio.page_cache`) come the journal and host-cache
quantities of `GUEST_QUANTITIES` (S3, study "pdc"):

    journal_io_pct    = 100 * journal_write_bytes / (read_bytes + write_bytes)
    journal_write_pct = 100 * journal_write_bytes / write_bytes
    journal_flush_pct = 100 * journal_flushes / flushes
    fsync_commit_pct  = 100 * fsyncs_committing / fsyncs  (NaN without fsync() calls: O_SYNC
                        writers such as FileBench's oltp commit without one)
    host_hit_pct      = 100 * vmio.page_cache.hit_ratio
    host_writeout_mb  = vmio.page_cache.written_back_pages * 4096 / 1e6
    host_fsync_mb     = vmio.page_cache.fsync_written_pages * 4096 / 1e6 (the write-out that
                        guest flushes forced)
    host_flushes      = vmio.page_cache.flushes (guest flushes the host cache served)

From the jobs and the CPU model (`vmio.cpu`, stacks with `[cpu] model = "cfs"`) come the
`CPU_QUANTITIES` (S4, study "vmm-overhead"); a job carrier is a thread of kind `vcpu` or `job`
(a native job), the VMM's threads are the others (kinds `vmm-main`, `io-thread`, `worker`,
`kernel` and `dom0`):

    job_runtime_s  = mean over jobs[] of job_runtime / 1000 (fixed-work jobs: their elapsed
                     time, so the ratio of two points is a slowdown)
    vmm_cpu_pct    = 100 * sum(cpu_ns of the VMM's threads) / sum(core_busy_ns)
    job_wait_pct   = 100 * sum(wait_ns) / sum(cpu_ns + wait_ns), over the job carriers
    job_migrations = sum(migrations) over the job carriers

From an iozone job's passes (`jobs[].vmio_iozone.passes`: record size, test, KB/s; iozone's
KB is 1024 bytes, `crates/vmio-core/src/workload/iozone.rs`) come the `iozone:` quantities
(S2, study "interfaces"); a record is written as iozone's `-r` (`4k`, `4096k`, `16m`; a bare
number is KB) and a test as a column of iozone's table (`write`, `rewrite`, `read`,
`reread`, `random read`, `random write`):

    iozone:R:TEST     the KB/s of pass TEST with records of R (summed over the point's
                      iozone jobs, as iozone -t sums its children)
    iozone:R          the geometric mean of the six tests' KB/s at R (so the ratio of two
                      points' values is the geometric mean of their per-test ratios)
    iozone:R1/R2      iozone:R1 / iozone:R2 of the same point (with :TEST, that test's): the
                      share of its R2 rate a target keeps at R1

`REDUCERS` turn the values of several points into one (`gmean`: the geometric mean, so that a
ratio of two gmeans is the gmean of the per-point ratios).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vmio import fioreport as report
from vmio import iozone, results
from vmio.sim import VmioError

REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
    "gmean": lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if min(xs) > 0 else 0.0,
}
QUANTITIES = ("total", "read", "write")
"""Bandwidth quantities, MB/s."""
OPS_QUANTITY = "ops"
"""I/O operations per second, every job's read + write IOPS."""
GUEST_QUANTITIES = (
    "journal_io_pct",
    "journal_write_pct",
    "journal_flush_pct",
    "fsync_commit_pct",
    "host_hit_pct",
    "host_writeout_mb",
    "host_fsync_mb",
    "host_flushes",
)
"""Journal traffic of the guests' filesystems and the host page cache's work (module doc)."""
PAGE = 4096
CPU_QUANTITIES = ("job_runtime_s", "vmm_cpu_pct", "job_wait_pct", "job_migrations")
"""The jobs' run time and the CPU model's counters (module doc)."""
JOB_CARRIERS = ("vcpu", "job")
"""`vmio.cpu` thread kinds that run the jobs; the other kinds are the VMM's."""
SHARE_QUANTITIES = ("error_rate_pct", "jain")
"""Quantities of the bandwidth shares of several VMs (`vmio.share`); also `ratio:<vm>`."""
VM_QUANTITIES = ("ratio:", "bw:")
"""Per-VM quantities: `ratio:<vm>` (its bandwidth / the lightest-weight VM's) and `bw:<vm>`
(its bandwidth, MB/s)."""


IOZONE_PREFIX = "iozone:"
"""iozone's rates, KB/s, and their ratios (module doc)."""


@dataclass(frozen=True)
class IozoneQuantity:
    """A parsed `iozone:` quantity: one record size (a rate) or two (a ratio), one test or
    all six (their geometric mean)."""

    records: tuple[int, ...]
    """Record sizes in bytes: (R,) or (R1, R2)."""
    test: str | None

    @property
    def is_ratio(self) -> bool:
        return len(self.records) == 2


def parse_iozone(quantity: str) -> IozoneQuantity:
    """The parts of an `iozone:` quantity; VmioError naming the accepted forms otherwise."""
    body = quantity[len(IOZONE_PREFIX) :]
    records_text, _, test = body.partition(":")
    accepted = (
        f"accepted: iozone:R, iozone:R:TEST, iozone:R1/R2 or iozone:R1/R2:TEST, R a record "
        f"size (4k, 4096k, 16m), TEST one of {', '.join(iozone.PHASES)}"
    )
    if test and test not in iozone.PHASES:
        raise VmioError(f"quantity '{quantity}': '{test}' is not an iozone test; {accepted}")
    parts = records_text.split("/")
    if len(parts) > 2 or quantity.endswith(":"):
        raise VmioError(f"quantity '{quantity}': {accepted}")
    try:
        records = tuple(iozone.size("-r", p) for p in parts)
    except ValueError as e:
        raise VmioError(f"quantity '{quantity}': {e}") from None
    return IozoneQuantity(records, test or None)


def check_quantity(quantity: str) -> str | None:
    """None when `quantity` is known, else why not."""
    if quantity in (*QUANTITIES, *SHARE_QUANTITIES, OPS_QUANTITY, *GUEST_QUANTITIES):
        return None
    if quantity in CPU_QUANTITIES:
        return None
    if any(quantity.startswith(p) and quantity[len(p) :] for p in VM_QUANTITIES):
        return None
    if quantity.startswith(IOZONE_PREFIX):
        try:
            parse_iozone(quantity)
        except VmioError as e:
            return str(e)
        return None
    return (
        f"'{quantity}' is not one of "
        f"{', '.join((*QUANTITIES, *SHARE_QUANTITIES, OPS_QUANTITY, *GUEST_QUANTITIES))}, "
        f"{', '.join(CPU_QUANTITIES)}, "
        "ratio:<vm>, bw:<vm>, iozone:<record>[:<test>]"
    )


def iozone_passes(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every iozone pass of the result's jobs (`vmio_iozone.passes`), in job order."""
    return [
        p for j in result.get("jobs") or [] for p in (j.get("vmio_iozone") or {}).get("passes", [])
    ]


def iozone_kb_s(result: Mapping[str, Any], record: int, test: str) -> float:
    """KB/s of pass `test` with records of `record` bytes, summed over the iozone jobs."""
    rates = [
        float(p["kb_per_s"])
        for p in iozone_passes(result)
        if p["reclen_kbytes"] == record >> 10 and p["test"] == test
    ]
    if not rates:
        have = sorted({p["reclen_kbytes"] for p in iozone_passes(result)})
        raise VmioError(
            f"no iozone pass '{test}' with {record >> 10}k records in the result "
            f"(records: {', '.join(f'{k}k' for k in have) or 'none: no iozone job'})"
        )
    return sum(rates)


def _iozone_value(result: Mapping[str, Any], q: IozoneQuantity) -> float:
    def rate(record: int) -> float:
        if q.test is not None:
            return iozone_kb_s(result, record, q.test)
        return REDUCERS["gmean"]([iozone_kb_s(result, record, t) for t in iozone.PHASES])

    if not q.is_ratio:
        return rate(q.records[0])
    below = rate(q.records[1])
    return rate(q.records[0]) / below if below else float("nan")


def _vm_of(result: Mapping[str, Any], quantity: str, name: str) -> dict[str, Any]:
    vms = result.get("vmio", {}).get("vms") or []
    vm = next((v for v in vms if v.get("name") == name), None)
    if vm is None:
        names = ", ".join(str(v.get("name")) for v in vms) or "none"
        raise VmioError(f"quantity '{quantity}': no VM '{name}' in the result ({names})")
    return vm


def _guest_sum(result: Mapping[str, Any], quantity: str, key: str) -> float:
    disks = [d for g in result.get("vmio", {}).get("guests") or [] for d in g.get("disks", [])]
    if not disks:
        raise VmioError(f"quantity '{quantity}': the result has no vmio.guests[].disks[]")
    return float(sum(d.get(key) or 0 for d in disks))


def _percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else float("nan")


def _guest_quantity(result: Mapping[str, Any], quantity: str) -> float:
    def g(key: str) -> float:
        return _guest_sum(result, quantity, key)

    if quantity == "journal_io_pct":
        return _percent(g("journal_write_bytes"), g("read_bytes") + g("write_bytes"))
    if quantity == "journal_write_pct":
        return _percent(g("journal_write_bytes"), g("write_bytes"))
    if quantity == "journal_flush_pct":
        return _percent(g("journal_flushes"), g("flushes"))
    if quantity == "fsync_commit_pct":
        return _percent(g("fsyncs_committing"), g("fsyncs"))
    cache = result.get("vmio", {}).get("page_cache")
    if not cache:
        raise VmioError(f"quantity '{quantity}': the result has no vmio.page_cache")
    key = {
        "host_hit_pct": "hit_ratio",
        "host_writeout_mb": "written_back_pages",
        "host_fsync_mb": "fsync_written_pages",
        "host_flushes": "flushes",
    }[quantity]
    if cache.get(key) is None:
        raise VmioError(f"quantity '{quantity}': the result has no vmio.page_cache.{key}")
    if quantity == "host_hit_pct":
        return 100.0 * float(cache[key])
    return float(cache[key]) if quantity == "host_flushes" else cache[key] * PAGE / 1e6


def _cpu_quantity(result: Mapping[str, Any], quantity: str) -> float:
    if quantity == "job_runtime_s":
        jobs = result.get("jobs") or []
        if not jobs:
            raise VmioError(f"quantity '{quantity}': the result has no jobs")
        return sum(j["job_runtime"] for j in jobs) / len(jobs) / 1000.0
    cpu = result.get("vmio", {}).get("cpu")
    if not cpu:
        raise VmioError(
            f"quantity '{quantity}': the result has no vmio.cpu (the stack's [cpu] model "
            'must be "cfs")'
        )
    threads = cpu.get("threads") or []
    carriers = [t for t in threads if t.get("kind") in JOB_CARRIERS]
    if quantity == "vmm_cpu_pct":
        vmm = sum(t["cpu_ns"] for t in threads if t.get("kind") not in JOB_CARRIERS)
        return _percent(vmm, sum(cpu.get("core_busy_ns") or []))
    if quantity == "job_wait_pct":
        wait = sum(t["wait_ns"] for t in carriers)
        return _percent(wait, wait + sum(t["cpu_ns"] for t in carriers))
    return float(sum(t["migrations"] for t in carriers))


def quantity_value(result: Mapping[str, Any], quantity: str = "total") -> float:
    """A point's quantity: MB/s for total/read/write; `error_rate_pct` and `jain` from
    `vmio.share`; `ratio:<vm>`: bw of that VM / bw of the lightest-weight VM (`vmio.vms`);
    `ops` and the `GUEST_QUANTITIES` as the module doc says."""
    if quantity in QUANTITIES:
        return results.quantity_mb_s(result, quantity)
    if quantity == OPS_QUANTITY:
        jobs = result.get("jobs") or []
        return float(sum(j[d]["iops"] for j in jobs for d in ("read", "write")))
    if quantity in GUEST_QUANTITIES:
        return _guest_quantity(result, quantity)
    if quantity in CPU_QUANTITIES:
        return _cpu_quantity(result, quantity)
    if quantity.startswith(IOZONE_PREFIX):
        q = parse_iozone(quantity)
        try:
            return _iozone_value(result, q)
        except VmioError as e:
            raise VmioError(f"quantity '{quantity}': {e}") from None
    vmio = result.get("vmio", {})
    if quantity in SHARE_QUANTITIES:
        share = vmio.get("share") or {}
        key = "jain_index" if quantity == "jain" else quantity
        if share.get(key) is None:
            raise VmioError(f"quantity '{quantity}': the result has no vmio.share.{key}")
        return float(share[key])
    if quantity.startswith("bw:"):
        return _vm_of(result, quantity, quantity[len("bw:") :])["bw_bytes"] / 1e6
    if quantity.startswith("ratio:"):
        vm = _vm_of(result, quantity, quantity[len("ratio:") :])
        lightest = min(vmio["vms"], key=lambda v: v["weight"])
        if not lightest["bw_bytes"]:
            return float("inf")
        return vm["bw_bytes"] / lightest["bw_bytes"]
    raise VmioError(f"quantity {check_quantity(quantity)}")


def quantity_unit(quantity: str) -> str:
    """How a quantity reads in tables: `MB/s`, `%`, `` (an index or a ratio)."""
    if quantity in QUANTITIES or quantity.startswith("bw:"):
        return "MB/s"
    if quantity in ("host_writeout_mb", "host_fsync_mb"):
        return "MB"
    if quantity == OPS_QUANTITY:
        return "ops/s"
    if quantity == "job_runtime_s":
        return "s"
    if quantity.startswith(IOZONE_PREFIX):
        return "" if parse_iozone(quantity).is_ratio else "KB/s"
    return "%" if quantity == "error_rate_pct" or quantity.endswith("_pct") else ""


def quantity_title(quantity: str, short: bool = False) -> str:
    """What a quantity is, for a table title (or, `short`, an axis label)."""
    unit = "" if short else " (1 MB = 1e6 bytes)"
    if quantity == "total":
        return "bandwidth, MB/s" + ("" if short else " (read + write; 1 MB = 1e6 bytes)")
    if quantity in QUANTITIES:
        return f"{quantity} bandwidth, MB/s{unit}"
    if quantity == "error_rate_pct":
        return (
            "error rate, %"
            if short
            else ("error rate of the bandwidth shares, % (vmio.share.error_rate_pct)")
        )
    if quantity == "jain":
        return "Jain's index" if short else "Jain's fairness index of the bandwidth shares"
    if quantity.startswith("bw:"):
        return f"bandwidth of {quantity[len('bw:') :]}, MB/s{unit}"
    if quantity in CPU_TITLES:
        short_title, long_title = CPU_TITLES[quantity]
        return short_title if short else long_title
    if quantity in GUEST_TITLES:
        short_title, long_title = GUEST_TITLES[quantity]
        return short_title if short else long_title
    if quantity.startswith(IOZONE_PREFIX):
        return _iozone_title(parse_iozone(quantity), short)
    vm = quantity[len("ratio:") :]
    return (
        f"bw({vm}) / bw(lightest)"
        if short
        else (f"bandwidth of {vm} / bandwidth of the lightest-weight VM")
    )


def _iozone_title(q: IozoneQuantity, short: bool) -> str:
    test = q.test or ("gmean of 6 tests" if short else "geometric mean of the six tests")
    at = " / ".join(f"{r >> 10}K" for r in q.records)
    if q.is_ratio:
        return f"iozone {test}, {at}" + ("" if short else " records (a ratio of KB/s)")
    return f"iozone {test}, {at}, KB/s" + ("" if short else " (1 KB = 1024 bytes)")


GUEST_TITLES = {
    OPS_QUANTITY: ("I/O ops/s", "I/O operations per second (read + write IOPS of every job)"),
    "journal_io_pct": (
        "journal, % of I/O",
        "journal writes, % of all guest disk I/O bytes (read + write)",
    ),
    "journal_write_pct": ("journal, % of writes", "journal writes, % of guest disk write bytes"),
    "journal_flush_pct": ("journal flushes, %", "flushes sent by journal commits, % of flushes"),
    "fsync_commit_pct": (
        "committing fsyncs, %",
        "fsync() calls that forced or waited for a journal commit, % (- : no fsync() calls)",
    ),
    "host_hit_pct": ("host cache hits, %", "host page cache hit ratio, % (vmio.page_cache)"),
    "host_writeout_mb": (
        "host write-out, MB",
        "host page cache write-out (flush work), MB (written_back_pages, 1 MB = 1e6 bytes)",
    ),
    "host_fsync_mb": (
        "host write-out on flush, MB",
        "host write-out forced by guest flushes, MB (fsync_written_pages, 1 MB = 1e6 bytes)",
    ),
    "host_flushes": ("host flushes", "guest flushes served by the host page cache"),
}
"""(axis label, table title) of `ops` and the `GUEST_QUANTITIES`."""


CPU_TITLES = {
    "job_runtime_s": (
        "mean job run time, s",
        "mean run time of the jobs, s (fio's job_runtime; fixed work: a gain is a slowdown)",
    ),
    "vmm_cpu_pct": (
        "VMM CPU, % of busy",
        "CPU time of the VMM's threads (QEMU, iothreads, host kernel, dom0), % of busy core time",
    ),
    "job_wait_pct": (
        "job wait, %",
        "time the jobs' threads (vCPUs, native jobs) waited for a core, % of runnable time",
    ),
    "job_migrations": (
        "job migrations",
        "migrations of the jobs' threads (vCPUs, native jobs) between cores",
    ),
}
"""(axis label, table title) of the `CPU_QUANTITIES`."""


def format_quantity(value: float, quantity: str) -> str:
    if value != value:  # NaN: the quantity does not apply (a share of nothing)
        return "-"
    if quantity in QUANTITIES or quantity.startswith("bw:"):
        return report.format_mb_s(value)
    if quantity == OPS_QUANTITY:
        return f"{value:,.0f}"
    if quantity.startswith(IOZONE_PREFIX) and not parse_iozone(quantity).is_ratio:
        return f"{value:.0f}"  # iozone's own table: whole KB/s, no separators
    if quantity in ("host_writeout_mb", "host_fsync_mb"):
        return f"{value:,.1f}"
    if quantity in ("host_flushes", "job_migrations"):
        return f"{value:,.0f}"
    if quantity == "job_runtime_s":
        return f"{value:.3f}"
    if quantity in ("vmm_cpu_pct", "job_wait_pct"):
        return f"{value:.2f} %"
    if quantity == "error_rate_pct" or quantity.endswith("_pct"):
        return f"{value:.1f} %"
    if quantity == "jain":
        return f"{value:.3f}"
    return f"{value:.2f}"
