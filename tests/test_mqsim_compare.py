"""scripts/mqsim-compare.py without MQSim: its XML writers, its TOML and fio job, and the
parsers on a stored MQSim result (tests/data/mqsim/, from a run of the script's configuration)."""

from __future__ import annotations

import importlib.util
import math
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests/data/mqsim"
# The stored run: the script's configuration for 20 ms of simulated time (MQSim at
# github.com/CMU-SAFARI/MQSim, built with -O2).
STOP_NS = 20_000_000


def load():
    spec = importlib.util.spec_from_file_location(
        "mqsim_compare", ROOT / "scripts/mqsim-compare.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fields(xml_text: str) -> dict[str, str]:
    return {el.tag: (el.text or "").strip() for el in ET.fromstring(xml_text).iter()}


def test_the_device_configuration_is_four_channels_of_four_single_plane_slc_dies():
    m = load()
    f = fields(m.ssdconfig_xml())
    assert f["Flash_Channel_Count"] == "4" and f["Chip_No_Per_Channel"] == "4"
    assert f["Die_No_Per_Chip"] == "1" and f["Plane_No_Per_Die"] == "1"
    assert f["Flash_Technology"] == "SLC"
    assert f["Page_Read_Latency_LSB"] == "75000" and f["Page_Program_Latency_LSB"] == "750000"
    assert f["Ideal_Mapping_Table"] == "true" and f["Enabled_Preconditioning"] == "true"
    assert f["Enable_ResponseTime_Logging"] == "true"
    assert f["ResponseTime_Logging_Period_Length"] == "1"


def test_the_workload_is_one_flow_of_4k_random_reads_at_queue_depth_32():
    m = load()
    root = ET.fromstring(m.workload_xml(1_000_000))
    flows = list(root.iter("IO_Flow_Parameter_Set_Synthetic"))
    assert len(flows) == 1
    f = {el.tag: el.text for el in flows[0]}
    assert f["Synthetic_Generator_Type"] == "QUEUE_DEPTH"
    assert f["Average_No_of_Reqs_in_Queue"] == "32"
    assert f["Read_Percentage"] == "100" and f["Address_Distribution"] == "RANDOM_UNIFORM"
    assert int(f["Average_Request_Size"]) * 512 == 4096
    assert f["Device_Level_Data_Caching_Mode"] == "TURNED_OFF"
    assert f["Stop_Time"] == "1000000"


def test_the_vmio_stack_has_the_same_geometry_timings_and_rates():
    m = load()
    s = tomllib.loads(m.vmio_stack())
    d = s["device"][0]
    assert (d["channels"], d["dies_per_channel"], d["page_size"]) == (4, 4, 8192)
    assert d["read_latency"] == "75000ns" and d["program_latency"] == "750000ns"
    assert d["channel_rate"] == 333_000_000 and d["link_rate"] == 4_000_000_000
    assert d["precondition"] == "aged"
    # raw flash 16 dies x 512 blocks x 256 pages x 8 KiB, less 7 % over-provisioning
    assert d["capacity"] == int((16 << 30) / 1.07) // 4096 * 4096
    assert s["host"]["hypervisor"] == "native"
    job = m.fio_job(500)
    assert "rw=randread" in job and "iodepth=32" in job and "bs=4k" in job
    assert "direct=1" in job and "runtime=500ms" in job


def test_the_nearest_rank_percentile_is_the_value_at_rank_ceil_p_n():
    m = load()
    vals = list(range(1, 201))  # 1..200
    assert m.nearest_rank(vals, 99.0) == 198  # ceil(1.98 x 100) = 198
    assert m.nearest_rank(vals, 50.0) == 100
    assert m.nearest_rank([7.0], 99.0) == 7.0
    with pytest.raises(ValueError):
        m.nearest_rank([], 99.0)


def test_the_stored_mqsim_result_parses_to_its_iops_mean_and_log_percentile():
    m = load()
    xml_text = (DATA / "workload_scenario_1.xml").read_text()
    log_text = (DATA / "workload.IO_Flow.No_0.log").read_text()
    r = m.parse_mqsim_result(xml_text, STOP_NS)
    lat = m.parse_mqsim_log(log_text)
    f = m.mqsim_figures(xml_text, log_text, STOP_NS)
    # this MQSim writes IOPS = inf (its clock is reset before the results): requests / time
    assert f.iops == r["iops"] == r["requests"] / 0.020
    assert f.mean_us == 278.0
    assert f.mean_us == r["end_to_end_us"]
    s = sorted(lat)
    assert f.p99_us == s[math.ceil(0.99 * len(s)) - 1]
    # one log line per completion (requests finishing in the same ns share a line)
    assert 0.9 * r["requests"] <= len(lat) <= r["requests"]
    # the log's mean agrees with the XML's mean (whole microseconds in the log)
    assert abs(sum(lat) / len(lat) - r["end_to_end_us"]) <= 0.05 * r["end_to_end_us"] + 1


def test_vmio_figures_come_from_fio_json_read_iops_lat_mean_and_clat_p99():
    m = load()
    j = {
        "jobs": [
            {
                "read": {
                    "iops": 1000.0,
                    "lat_ns": {"mean": 250_000.0},
                    "clat_ns": {"percentile": {"99.000000": 500_000}},
                }
            }
        ]
    }
    f = m.vmio_figures(j)
    assert (f.iops, f.mean_us, f.p99_us) == (1000.0, 250.0, 500.0)
