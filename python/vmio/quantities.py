"""Quantities of a study point: their names, values from a result, units, titles, formatting.

A point's *quantity* (calibration, tables, figures) is its bandwidth in MB/s (`total`, `read`,
`write`) or, from the result's `vmio.share` / `vmio.vms` (several VMs), `error_rate_pct`,
`jain`, `ratio:<vm>` (that VM's bandwidth over the lightest-weight VM's) or `bw:<vm>` (that
VM's bandwidth, MB/s). `REDUCERS` turn the values of several points into one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vmio import report, results
from vmio.sim import VmioError

REDUCERS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
}
QUANTITIES = ("total", "read", "write")
"""Bandwidth quantities, MB/s."""
SHARE_QUANTITIES = ("error_rate_pct", "jain")
"""Quantities of the bandwidth shares of several VMs (`vmio.share`); also `ratio:<vm>`."""
VM_QUANTITIES = ("ratio:", "bw:")
"""Per-VM quantities: `ratio:<vm>` (its bandwidth / the lightest-weight VM's) and `bw:<vm>`
(its bandwidth, MB/s)."""


def check_quantity(quantity: str) -> str | None:
    """None when `quantity` is known, else why not."""
    if quantity in QUANTITIES or quantity in SHARE_QUANTITIES:
        return None
    if any(quantity.startswith(p) and quantity[len(p) :] for p in VM_QUANTITIES):
        return None
    return (
        f"'{quantity}' is not one of {', '.join((*QUANTITIES, *SHARE_QUANTITIES))}, "
        "ratio:<vm>, bw:<vm>"
    )


def _vm_of(result: Mapping[str, Any], quantity: str, name: str) -> dict[str, Any]:
    vms = result.get("vmio", {}).get("vms") or []
    vm = next((v for v in vms if v.get("name") == name), None)
    if vm is None:
        names = ", ".join(str(v.get("name")) for v in vms) or "none"
        raise VmioError(f"quantity '{quantity}': no VM '{name}' in the result ({names})")
    return vm


def quantity_value(result: Mapping[str, Any], quantity: str = "total") -> float:
    """A point's quantity: MB/s for total/read/write; `error_rate_pct` and `jain` from
    `vmio.share`; `ratio:<vm>`: bw of that VM / bw of the lightest-weight VM (`vmio.vms`)."""
    if quantity in QUANTITIES:
        return results.quantity_mb_s(result, quantity)
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
    return "%" if quantity == "error_rate_pct" else ""


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
    vm = quantity[len("ratio:") :]
    return (
        f"bw({vm}) / bw(lightest)"
        if short
        else (f"bandwidth of {vm} / bandwidth of the lightest-weight VM")
    )


def format_quantity(value: float, quantity: str) -> str:
    if quantity in QUANTITIES or quantity.startswith("bw:"):
        return report.format_mb_s(value)
    if quantity == "error_rate_pct":
        return f"{value:.1f} %"
    if quantity == "jain":
        return f"{value:.3f}"
    return f"{value:.2f}"
