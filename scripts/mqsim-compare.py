#!/usr/bin/env python3
"""vmio and MQSim side by side: one SSD configuration, 4 KiB random reads at QD32.

Usage::

    python3 scripts/mqsim-compare.py MQSIM_BINARY [--vmio-simrun PATH] [--time-ms N]
                                     [--workdir DIR] [--seed N]

MQSim (Tavakkol et al., "MQSim: A Framework for Enabling Realistic Studies of Modern
Multi-Queue SSD Devices", FAST 2018; source github.com/CMU-SAFARI/MQSim, built with its
Makefile) is run on an `ssdconfig.xml` and a `workload.xml` this script writes; vmio is run
on the equivalent stack file and fio job, either through `vmio sim` (the Python CLI) or the
`simrun` example binary (`cargo build --release -p vmio-sim --example simrun`). The script
prints one table: simulator, IOPS, mean latency, p99.

**The configuration and how each parameter maps** (MQSim's field -> vmio's `ssd` key):

- Geometry: `Flash_Channel_Count` = 4 -> `channels` = 4; `Chip_No_Per_Channel` = 4 with
  `Die_No_Per_Chip` = 1 and `Plane_No_Per_Die` = 1 -> `dies_per_channel` = 4 (vmio has no
  planes, so MQSim's multi-plane reads are ruled out by one plane per die).
  `Page_Capacity` = 8192 (MQSim's default) -> `page_size` = 8192: a 4 KiB read senses one
  page and moves its 4 KiB over the channel in both simulators (MQSim moves the requested
  sectors; vmio the 4 KiB piece). `Page_No_Per_Block` = 256 -> `pages_per_block` = 256;
  `Block_No_Per_Plane` = 512: 16 dies x 512 x 256 x 8 KiB = 16 GiB raw;
  `Overprovisioning_Ratio` = 0.07 -> `over_provisioning` = 0.07 and `capacity` = 16 GiB / 1.07
  rounded down to 4 KiB.
- Flash timings: `Flash_Technology` = SLC with MQSim's default latencies
  (src/exec/Flash_Parameter_Set.cpp): `Page_Read_Latency_LSB` = 75,000 ns -> `read_latency`
  = 75 us; `Page_Program_Latency_LSB` = 750,000 ns -> `program_latency` = 750 us;
  `Block_Erase_Latency` = 3,800,000 ns -> `erase_latency` = 3.8 ms (unused by reads).
- Channel: `Channel_Transfer_Rate` = 333 (MT/s) x `Flash_Channel_Width` = 1 (byte),
  `Flash_Comm_Protocol` = NVDDR2 (MQSim's defaults) -> `channel_rate` = 333,000,000 B/s.
  MQSim also charges the ONFI command/address cycles and tWB/tCCS-type delays (a few tens of
  ns per command, src/ssd/NVM_PHY_ONFI_NVDDR2.cpp); vmio charges only the data transfer.
- Host interface: `HostInterface_Type` = NVME, `PCIe_Lane_Bandwidth` = 1.0 (GB/s) x
  `PCIe_Lane_Count` = 4 -> `link_rate` = 4,000,000,000 B/s, and `seq_read_rate` = the same
  (no controller cap beyond the link). MQSim also moves the 64 B submission and 16 B
  completion entries over PCIe (~20 ns each at 4 GB/s); vmio does not. `IO_Queue_Depth` =
  1024 (MQSim's default NVMe queue) -> `queue_depth` = 1024: not binding at QD32.
- Controller: MQSim has no command-rate limit -> `read_iops` = 1,000,000,000 (vmio's
  maximum: not binding). `Ideal_Mapping_Table` = true: every mapping entry is in DRAM, no
  translation-page reads from flash (vmio's FTL has none); `Device_Level_Data_Caching_Mode` =
  TURNED_OFF: no read hits in MQSim's DRAM data cache (vmio's write buffer holds no read
  data here). `Transaction_Scheduling_Policy` = OUT_OF_ORDER (MQSim's default).
- Mapped pages: MQSim `Enabled_Preconditioning` = true with `Initial_Occupancy_Percentage` =
  100 and `Working_Set_Percentage` = 100: MQSim writes the flow's whole address range before
  the run (its preconditioning maps the pages, no simulated time); vmio `precondition` =
  "aged" (every logical page mapped, the GC steady state of random writes). Both then read
  only mapped pages, spread uniformly over the dies (MQSim's CWDP static allocation, vmio's
  FTL placement). Reads do not trigger GC in either.
- Workload: MQSim's synthetic flow with `Synthetic_Generator_Type` = QUEUE_DEPTH,
  `Average_No_of_Reqs_in_Queue` = 32, `Read_Percentage` = 100, `Address_Distribution` =
  RANDOM_UNIFORM, `Request_Size_Distribution` = FIXED, `Average_Request_Size` = 8 sectors
  (4 KiB), aligned to `Address_Alignment_Unit` = 8 sectors, `Stop_Time` = the run's length
  -> fio `rw=randread bs=4k iodepth=32 direct=1 ioengine=libaio`, `time_based` for the same
  simulated time, on a native host (`[host] hypervisor = "native"`, no VM, scheduler
  `none`: MQSim's host has no software costs either).

- SSD models with more keys (page types, read retries): `--device-key 'cell_type = "slc"'`
  and `--device-key 'read_retry = 0'` keep them at MQSim's setting (SLC, no retries).

**Figures.** MQSim's result XML (`workload_scenario_1.xml`, element `Host.IO_Flow`) gives
`Request_Count`, `IOPS`, `Device_Response_Time` (mean, us: from the device fetching the
command to its completion entry) and `End_to_End_Request_Delay` (mean, us: from the request's
creation in the host to its completion; at QD32 with a 1024-entry queue the two agree). Its
`IOPS` comes out as `inf` (MQSim divides by its clock after resetting it), so the IOPS is
`Request_Count` / `Stop_Time`. It reports no percentiles. The p99 is derived from
its response-time log: with `Enable_ResponseTime_Logging` = true and
`ResponseTime_Logging_Period_Length` = 1 (ns), MQSim writes a line after every completion that
comes later than the previous line (src/host/IO_Flow_Base.cpp, `NVMe_consume_io_request`):
time, the mean device response time and the mean end-to-end delay of the requests completed
since the last line, in whole microseconds. Requests completing in the same nanosecond share
one line (their mean); every other line is one request. The p99 is the nearest-rank
percentile (rank ceil(0.99 n)) of the end-to-end column, each line weighted once; the mean
printed is the XML's end-to-end mean. vmio's figures are fio's: `read.iops`,
`read.lat_ns.mean` and `read.clat_ns.percentile["99.000000"]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

CHANNELS = 4
DIES_PER_CHANNEL = 4
PAGE_BYTES = 8192
PAGES_PER_BLOCK = 256
BLOCKS_PER_PLANE = 512
OVER_PROVISIONING = 0.07
READ_NS = 75_000
PROGRAM_NS = 750_000
ERASE_NS = 3_800_000
CHANNEL_MTPS = 333
CHANNEL_WIDTH_BYTES = 1
PCIE_LANE_GBPS = 1.0
PCIE_LANES = 4
NVME_QUEUE = 1024
QD = 32
REQUEST_SECTORS = 8


def raw_bytes() -> int:
    """Raw flash of the configuration: dies x blocks x pages x page size."""
    return CHANNELS * DIES_PER_CHANNEL * BLOCKS_PER_PLANE * PAGES_PER_BLOCK * PAGE_BYTES


def user_bytes() -> int:
    """Logical capacity: raw / (1 + over-provisioning), rounded down to 4 KiB."""
    return int(raw_bytes() / (1.0 + OVER_PROVISIONING)) // 4096 * 4096


def ssdconfig_xml(seed: int = 321) -> str:
    """MQSim's device and host configuration (MQSim's defaults where not named in the doc)."""
    host = {
        "PCIe_Lane_Bandwidth": f"{PCIE_LANE_GBPS:.5f}",
        "PCIe_Lane_Count": PCIE_LANES,
        "SATA_Processing_Delay": 400000,
        "Enable_ResponseTime_Logging": "true",
        "ResponseTime_Logging_Period_Length": 1,
    }
    device = {
        "Seed": seed,
        "Enabled_Preconditioning": "true",
        "Memory_Type": "FLASH",
        "HostInterface_Type": "NVME",
        "IO_Queue_Depth": NVME_QUEUE,
        "Queue_Fetch_Size": 512,
        "Caching_Mechanism": "ADVANCED",
        "Data_Cache_Sharing_Mode": "SHARED",
        "Data_Cache_Capacity": 268435456,
        "Data_Cache_DRAM_Row_Size": 8192,
        "Data_Cache_DRAM_Data_Rate": 100,
        "Data_Cache_DRAM_Data_Busrt_Size": 1,
        "Data_Cache_DRAM_tRCD": 13,
        "Data_Cache_DRAM_tCL": 13,
        "Data_Cache_DRAM_tRP": 13,
        "Address_Mapping": "PAGE_LEVEL",
        "Ideal_Mapping_Table": "true",
        "CMT_Capacity": 2097152,
        "CMT_Sharing_Mode": "SHARED",
        "Plane_Allocation_Scheme": "CWDP",
        "Transaction_Scheduling_Policy": "OUT_OF_ORDER",
        "Overprovisioning_Ratio": f"{OVER_PROVISIONING:.2f}",
        "GC_Exec_Threshold": "0.05000",
        "GC_Block_Selection_Policy": "RGA",
        "Use_Copyback_for_GC": "false",
        "Preemptible_GC_Enabled": "true",
        "GC_Hard_Threshold": "0.005000",
        "Dynamic_Wearleveling_Enabled": "true",
        "Static_Wearleveling_Enabled": "true",
        "Static_Wearleveling_Threshold": 100,
        "Preferred_suspend_erase_time_for_read": 700000,
        "Preferred_suspend_erase_time_for_write": 700000,
        "Preferred_suspend_write_time_for_read": 100000,
        "Flash_Channel_Count": CHANNELS,
        "Flash_Channel_Width": CHANNEL_WIDTH_BYTES,
        "Channel_Transfer_Rate": CHANNEL_MTPS,
        "Chip_No_Per_Channel": DIES_PER_CHANNEL,
        "Flash_Comm_Protocol": "NVDDR2",
    }
    flash = {
        "Flash_Technology": "SLC",
        "CMD_Suspension_Support": "ERASE",
        "Page_Read_Latency_LSB": READ_NS,
        "Page_Read_Latency_CSB": READ_NS,
        "Page_Read_Latency_MSB": READ_NS,
        "Page_Program_Latency_LSB": PROGRAM_NS,
        "Page_Program_Latency_CSB": PROGRAM_NS,
        "Page_Program_Latency_MSB": PROGRAM_NS,
        "Block_Erase_Latency": ERASE_NS,
        "Block_PE_Cycles_Limit": 10000,
        "Suspend_Erase_Time": 700000,
        "Suspend_Program_Time": 100000,
        "Die_No_Per_Chip": 1,
        "Plane_No_Per_Die": 1,
        "Block_No_Per_Plane": BLOCKS_PER_PLANE,
        "Page_No_Per_Block": PAGES_PER_BLOCK,
        "Page_Capacity": PAGE_BYTES,
        "Page_Metadat_Capacity": 1872,
    }

    def tags(d: dict, indent: str) -> str:
        return "".join(f"{indent}<{k}>{v}</{k}>\n" for k, v in d.items())

    return (
        '<?xml version="1.0" encoding="us-ascii"?>\n<Execution_Parameter_Set>\n'
        "\t<Host_Parameter_Set>\n" + tags(host, "\t\t") + "\t</Host_Parameter_Set>\n"
        "\t<Device_Parameter_Set>\n"
        + tags(device, "\t\t")
        + "\t\t<Flash_Parameter_Set>\n"
        + tags(flash, "\t\t\t")
        + "\t\t</Flash_Parameter_Set>\n\t</Device_Parameter_Set>\n</Execution_Parameter_Set>\n"
    )


def workload_xml(stop_time_ns: int, seed: int = 798) -> str:
    """MQSim's synthetic flow: 4 KiB random reads, queue depth 32, every die of the device."""
    flow = {
        "Priority_Class": "HIGH",
        "Device_Level_Data_Caching_Mode": "TURNED_OFF",
        "Channel_IDs": ",".join(str(c) for c in range(CHANNELS)),
        "Chip_IDs": ",".join(str(c) for c in range(DIES_PER_CHANNEL)),
        "Die_IDs": "0",
        "Plane_IDs": "0",
        "Initial_Occupancy_Percentage": 100,
        "Working_Set_Percentage": 100,
        "Synthetic_Generator_Type": "QUEUE_DEPTH",
        "Read_Percentage": 100,
        "Address_Distribution": "RANDOM_UNIFORM",
        "Percentage_of_Hot_Region": 0,
        "Generated_Aligned_Addresses": "true",
        "Address_Alignment_Unit": REQUEST_SECTORS,
        "Request_Size_Distribution": "FIXED",
        "Average_Request_Size": REQUEST_SECTORS,
        "Variance_Request_Size": 0,
        "Seed": seed,
        "Average_No_of_Reqs_in_Queue": QD,
        "Intensity": 32768,
        "Stop_Time": stop_time_ns,
        "Total_Requests_To_Generate": 0,
    }
    body = "".join(f"\t\t\t<{k}>{v}</{k}>\n" for k, v in flow.items())
    return (
        '<?xml version="1.0" encoding="us-ascii"?>\n<MQSim_IO_Scenarios>\n\t<IO_Scenario>\n'
        "\t\t<IO_Flow_Parameter_Set_Synthetic>\n"
        + body
        + "\t\t</IO_Flow_Parameter_Set_Synthetic>\n"
        "\t</IO_Scenario>\n</MQSim_IO_Scenarios>\n"
    )


def vmio_stack(extra: list[str] | None = None) -> str:
    """The equivalent vmio stack: one `ssd` on a native host, no scheduler; `extra` lines
    (`key = value`) go into the device's table (keys of newer SSD models)."""
    more = "".join(f"{line}\n" for line in extra or [])
    return f"""# vmio side of scripts/mqsim-compare.py (its docstring maps each key to MQSim).
[host]
hypervisor = "native"

[[device]]
name = "ssd"
model = "ssd"
capacity = {user_bytes()}
channels = {CHANNELS}
dies_per_channel = {DIES_PER_CHANNEL}
page_size = {PAGE_BYTES}
pages_per_block = {PAGES_PER_BLOCK}
over_provisioning = {OVER_PROVISIONING}
read_latency = "{READ_NS}ns"
program_latency = "{PROGRAM_NS}ns"
erase_latency = "{ERASE_NS}ns"
channel_rate = {CHANNEL_MTPS * CHANNEL_WIDTH_BYTES * 1_000_000}
read_iops = 1000000000
write_iops = 1000000000
link_rate = {int(PCIE_LANE_GBPS * PCIE_LANES * 1e9)}
seq_read_rate = {int(PCIE_LANE_GBPS * PCIE_LANES * 1e9)}
seq_write_rate = {int(PCIE_LANE_GBPS * PCIE_LANES * 1e9)}
queue_depth = {NVME_QUEUE}
precondition = "aged"
{more}
[[volume]]
name = "vol"
layout = "single"
devices = ["ssd"]

[scheduler]
name = "none"

[[vm]]
name = "host"

[[vm.disk]]
name = "vda"
volume = "vol"
interface = "host"
cache = "none"
"""


def fio_job(time_ms: int) -> str:
    """The equivalent fio job: 4 KiB random reads at QD32, direct, for the same time."""
    return f"""[global]
ioengine=libaio
direct=1
rw=randread
bs=4k
iodepth={QD}
time_based=1
runtime={time_ms}ms
randrepeat=0

[qd32]
filename=/dev/vda
"""


class Figures(NamedTuple):
    simulator: str
    iops: float
    mean_us: float
    p99_us: float
    note: str = ""


def nearest_rank(values: list[float], pct: float) -> float:
    """The nearest-rank percentile: the value at rank ceil(pct/100 x n) of the sorted values."""
    if not values:
        raise ValueError("no latencies to take a percentile of")
    s = sorted(values)
    k = max(1, math.ceil(pct / 100.0 * len(s)))
    return s[k - 1]


def parse_mqsim_result(xml_text: str, stop_time_ns: int | None = None) -> dict[str, float]:
    """IOPS and mean latencies (us) of the first host I/O flow of MQSim's result XML.

    MQSim writes each figure as a child element of `Host.IO_Flow`. Its `IOPS` divides by the
    simulator's clock when the results are collected, which this MQSim has already reset
    (it writes `inf`); the IOPS is then `Request_Count` / `Stop_Time` (requests generated
    over the flow's time: at most the 32 in flight at the end more than those completed).
    """
    root = ET.fromstring(xml_text)
    flow = root.find("./Host/Host.IO_Flow")
    if flow is None:
        raise ValueError("MQSim result: no Host/Host.IO_Flow element")
    f = {el.tag: (el.text or "").strip() for el in flow}
    iops = float(f["IOPS"])
    requests = float(f["Request_Count"])
    if not math.isfinite(iops):
        if not stop_time_ns:
            raise ValueError("MQSim result: IOPS is not finite and no Stop_Time was given")
        iops = requests / (stop_time_ns / 1e9)
    return {
        "iops": iops,
        "requests": requests,
        "device_response_us": float(f["Device_Response_Time"]),
        "end_to_end_us": float(f["End_to_End_Request_Delay"]),
        "max_end_to_end_us": float(f["Max_End_to_End_Request_Delay"]),
    }


def parse_mqsim_log(text: str) -> list[float]:
    """End-to-end delays (us) of MQSim's response-time log: one per line (see the doc)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            out.append(float(parts[2]))
    return out


def mqsim_figures(result_xml: str, log_text: str, stop_time_ns: int | None = None) -> Figures:
    r = parse_mqsim_result(result_xml, stop_time_ns)
    lat = parse_mqsim_log(log_text)
    return Figures(
        "MQSim",
        r["iops"],
        r["end_to_end_us"],
        nearest_rank(lat, 99.0),
        f"{len(lat)} log lines for {int(r['requests'])} requests",
    )


def vmio_figures(fio_json: dict) -> Figures:
    job = fio_json["jobs"][0]["read"]
    pct = job["clat_ns"]["percentile"]
    return Figures("vmio", job["iops"], job["lat_ns"]["mean"] / 1e3, pct["99.000000"] / 1e3)


def run_mqsim(binary: Path, workdir: Path, time_ms: int, seed: int) -> Figures:
    d = workdir / "mqsim"
    d.mkdir(parents=True, exist_ok=True)
    (d / "ssdconfig.xml").write_text(ssdconfig_xml(seed))
    (d / "workload.xml").write_text(workload_xml(time_ms * 1_000_000))
    for stale in d.glob("workload*.log"):
        stale.unlink()
    subprocess.run(
        [str(binary), "-i", "ssdconfig.xml", "-w", "workload.xml"],
        cwd=d,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    result = (d / "workload_scenario_1.xml").read_text()
    logs = sorted(d.glob("workload.IO_Flow.No_*.log"))
    if not logs:
        raise FileNotFoundError(f"{d}: MQSim wrote no response-time log")
    return mqsim_figures(result, logs[0].read_text(), time_ms * 1_000_000)


def run_vmio(
    simrun: str | None, workdir: Path, time_ms: int, seed: int, extra: list[str] | None = None
) -> Figures:
    d = workdir / "vmio"
    d.mkdir(parents=True, exist_ok=True)
    stack, job = d / "stack.toml", d / "qd32.fio"
    stack.write_text(vmio_stack(extra))
    job.write_text(fio_job(time_ms))
    if simrun:
        cmd = [simrun, str(stack), str(job), str(seed)]
    else:
        vmio = shutil.which("vmio")
        base = [vmio] if vmio else [sys.executable, "-m", "vmio"]
        cmd = base + [
            "sim",
            "--stack",
            str(stack),
            str(job),
            "--seed",
            str(seed),
            "--output-format",
            "json",
        ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return vmio_figures(json.loads(out))


def table(rows: list[Figures]) -> str:
    lines = [f"{'simulator':<10} {'IOPS':>10} {'mean (us)':>10} {'p99 (us)':>10}  note"]
    for r in rows:
        lines.append(
            f"{r.simulator:<10} {r.iops:>10,.0f} {r.mean_us:>10.1f} {r.p99_us:>10.1f}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mqsim", type=Path, help="path of the MQSim binary")
    ap.add_argument("--vmio-simrun", help="vmio-sim's simrun example binary (else `vmio sim`)")
    ap.add_argument("--time-ms", type=int, default=1000, help="simulated time of both runs")
    ap.add_argument("--workdir", type=Path, default=Path("mqsim-compare.out"))
    ap.add_argument("--seed", type=int, default=1, help="vmio's run seed")
    ap.add_argument("--skip-mqsim", action="store_true", help="run vmio only")
    ap.add_argument(
        "--device-key",
        action="append",
        default=[],
        metavar="'KEY = VALUE'",
        help="an extra line of vmio's [[device]] table (e.g. 'cell_type = \"slc\"')",
    )
    a = ap.parse_args(argv)
    rows = []
    if not a.skip_mqsim:
        rows.append(run_mqsim(a.mqsim.resolve(), a.workdir, a.time_ms, 321))
    rows.append(run_vmio(a.vmio_simrun, a.workdir, a.time_ms, a.seed, a.device_key))
    print(table(rows))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
