"""fio-style text: number formatting, the normal report, progress lines."""

from __future__ import annotations

import io

import pytest

from vmio.fioreport import fio_text, num2str, text_table
from vmio.progress import Progress, format_duration
from vmio.sim import VmioError, format_size, parse_size


@pytest.mark.parametrize(
    ("num", "kwargs", "text"),
    [
        (1612, {}, "1612"),
        (12345, {}, "12.3k"),
        (211_000_000, {"unit": "B/s"}, "211MB/s"),
        (211_812_352, {"pow2": True, "unit": "B/s"}, "202MiB/s"),
        (32768, {"pow2": True, "unit": "B"}, "32.0KiB"),
        (131072, {"pow2": True, "unit": "B"}, "128KiB"),
        (17_700_000_000, {"unit": "B/s"}, "17.7GB/s"),
        (999, {}, "999"),
    ],
)
def test_num2str_formats_like_fio(num, kwargs, text):
    assert num2str(num, **kwargs) == text


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("4k", 4096),
        ("64KiB", 65536),
        ("1m", 1 << 20),
        ("8M", 8 << 20),
        ("512", 512),
        ("1g", 1 << 30),
        ("2kb", 2048),
    ],
)
def test_sizes_parse_like_fio(text, nbytes):
    assert parse_size(text) == nbytes


def test_a_bad_size_is_an_error_with_examples():
    with pytest.raises(VmioError, match="not a size"):
        parse_size("lots")


def test_sizes_are_parsed_by_the_simulators_parser():
    assert parse_size(" 4 KiB ") == 4096 and parse_size("16383p") == 16383 << 50
    assert parse_size(4096) == 4096
    with pytest.raises(VmioError, match=r"^'16384p' is not a size vmio can hold; accepted: "):
        parse_size("16384p")
    with pytest.raises(VmioError, match=r"^'4k\\udcff' is not a size: not UTF-8 text$"):
        parse_size("4k\udcff")


def test_format_size_is_the_inverse_for_round_sizes():
    assert [format_size(parse_size(s)) for s in ("32k", "1m", "4g", "100")] == [
        "32k",
        "1m",
        "4g",
        "100",
    ]


def _stats(bw: int, bs: int, clat_ns: int) -> dict:
    ios = bw // bs
    return {
        "io_bytes": ios * bs,
        "bw_bytes": bw,
        "iops": bw / bs,
        "runtime": 1000,
        "total_ios": ios,
        "slat_ns": {"min": 900, "max": 3000, "mean": 1200.0, "stddev": 100.0, "N": ios},
        "clat_ns": {
            "min": clat_ns // 2,
            "max": clat_ns * 50,
            "mean": float(clat_ns),
            "stddev": clat_ns / 3,
            "N": ios,
            "percentile": {
                "1.000000": clat_ns // 2,
                "50.000000": clat_ns,
                "99.000000": clat_ns * 3,
                "99.990000": clat_ns * 40,
            },
        },
        "lat_ns": {
            "min": clat_ns,
            "max": clat_ns * 51,
            "mean": clat_ns + 1200.0,
            "stddev": clat_ns / 3,
            "N": ios,
        },
    }


def test_fio_text_has_fios_lines_for_a_mixed_job():
    result = {
        "fio version": "vmio-0.1.0",
        "global options": {"ioengine": "libaio", "iodepth": "1"},
        "jobs": [
            {
                "jobname": "mix",
                "groupid": 0,
                "error": 0,
                "job options": {"rw": "randrw", "bs": "32k"},
                "read": _stats(34_000_000, 32768, 900_000),
                "write": _stats(33_000_000, 32768, 800_000),
                "trim": {"total_ios": 0},
            }
        ],
        "disk_util": [{"name": "sdb", "read_ios": 5, "write_ios": 6, "util": 97.5}],
        "vmio": {"seed": 3, "virtual_time_ns": 1_000_000_000, "events": 10, "devices": []},
    }
    text = fio_text(result)
    assert text.startswith(
        "mix: (g=0): rw=randrw, bs=(R) 32.0KiB-32.0KiB, (W) 32.0KiB-32.0KiB, "
        "(T) 32.0KiB-32.0KiB, ioengine=libaio, iodepth=1\n"
    )
    assert "  read: IOPS=1037, BW=32.4MiB/s (34.0MB/s)(32.4MiB/1000msec)\n" in text
    assert "    clat (usec): min=450, max=45000, avg=900.00, stdev=300.00\n" in text
    assert "    clat percentiles (usec):\n     |  1.00th=[  450], 50.00th=[  900]," in text
    assert "   READ: bw=32.4MiB/s (34.0MB/s), 32.4MiB/s-32.4MiB/s (34.0MB/s-34.0MB/s)" in text
    assert "  WRITE: bw=" in text
    assert "  sdb: ios=5/6, merge=0/0, ticks=0/0, in_queue=0, util=97.50%" in text
    assert "vmio: seed=3" in text
    assert "WAF" not in text and "shares" not in text  # one VM, no SSD

    result["vmio"]["devices"] = [
        {
            "name": "ssd",
            "model": "ssd",
            "stats": {
                "write_bytes": 2 << 30,
                "flash_write_bytes": 15 << 30,
                "gc_count": 7197,
                "gc_ns": 531_400_000_000,
            },
        }
    ]
    result["vmio"]["vms"] = [
        {"name": "vm1", "weight": 1000, "bw_bytes": 52_500_000},
        {"name": "vm2", "weight": 100, "bw_bytes": 9_600_000},
    ]
    result["vmio"]["share"] = {"error_rate_pct": 45.3, "jain_index": 0.9312}
    text = fio_text(result)
    assert (
        "vmio: ssd: flash writes 15360 MiB for host writes 2048 MiB (WAF 7.50), GC 7197 "
        "collections, 531.4 s of die time\n" in text
    )
    assert (
        "vmio: shares: vm1 (weight 1000) 52.5 MB/s, vm2 (weight 100) 9.6 MB/s; error rate "
        "45.3 %, Jain's index 0.931\n" in text
    )


def test_fio_text_reports_the_guest_cache_and_journal_of_each_vm_with_a_guest():
    result = {"jobs": [], "vmio": {"seed": 1, "devices": [], "page_cache": {}}}
    result["vmio"]["guests"] = [
        {
            "vm": "vm1",
            "page_cache": {
                "hit_ratio": 0.75,
                "dirty_bytes": 3 << 20,
                "written_back_bytes": 8 << 20,
            },
            "disks": [
                {
                    "disk": "vdb",
                    "read_bytes": 1 << 20,
                    "write_bytes": 10 << 20,
                    "flushes": 40,
                    "journal_flushes": 30,
                    "fsyncs": 20,
                    "fsyncs_committing": 15,
                    "written_blocks": 1000,
                    "journal_written_blocks": 250,
                    "journal_share": 0.4,
                    "journal": {"commits": 15, "mean_commit_blocks": 6.5, "max_commit_blocks": 9},
                },
                {"disk": "vdc", "read_bytes": 0, "write_bytes": 0},
            ],
        }
    ]
    text = fio_text(result)
    assert (
        "vmio: guest vm1: page cache hit ratio 0.750, dirty 3.0 MiB at the end, "
        "written back 8 MiB\n" in text
    )
    assert (
        "vmio: guest vm1 vdb: read 1.0 MiB, wrote 10.0 MiB, 40 flushes, 20 fsyncs; journal: "
        "40.0 % of bytes written, 15 commits of 6.5 blocks (max 9), 75 % of flushes, 75 % of "
        "fsyncs committing, 25 % of distinct blocks written\n" in text
    )
    assert "vdc" not in text, "a disk the guest never used is not listed"


def test_fio_text_reports_each_pdc_disk_with_its_detected_journal_and_bypassed_writes():
    mib = 2**20
    result = {"jobs": [], "vmio": {"seed": 1, "devices": [], "page_cache": {}}}
    result["vmio"]["pdc"] = [
        {
            "vm": "vm1",
            "disk": "vdb",
            "events": [
                {"at_ns": 121_442_301, "kind": "detected", "lo": 512 * mib, "hi": 516 * mib}
            ],
            "ranges": [[512 * mib, 516 * mib]],
            "writes": 602,
            "bypassed_writes": 51,
            "bypassed_bytes": 3 * mib // 2,
            "precision": 1.0,
            "recall": 0.75,
        },
        {
            "vm": "vm2",
            "disk": "vda",
            "events": [],
            "ranges": [],
            "writes": 10,
            "bypassed_writes": 0,
            "bypassed_bytes": 0,
            "precision": None,
            "recall": None,
        },
    ]
    text = fio_text(result)
    assert (
        "vmio: pdc vm1 vdb: journal [512.0, 516.0) MiB (first at 0.121 s); 51 of 602 writes "
        "(1.5 MiB) around the host cache; precision 1.000, recall 0.750\n" in text
    )
    assert (
        "vmio: pdc vm2 vda: journal not detected; 0 of 10 writes (0.0 MiB) around the host "
        "cache\n" in text
    )


def test_progress_off_a_terminal_prints_a_line_per_ten_percent():
    out = io.StringIO()
    ticks = iter(range(100))
    p = Progress(20, title="t", stream=out, tty=False, clock=lambda: float(next(ticks)))
    for i in range(20):
        p.advance(f"step {i}")
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11
    assert lines[0].startswith("vmio: t: 10% (2/20) step 1, ETA ")
    assert lines[9] == "vmio: t: 100% (20/20) step 19"
    assert lines[10].startswith("vmio: t: 20 of 20 done in ")


def test_progress_on_a_terminal_redraws_one_bar():
    out = io.StringIO()
    ticks = iter([0.0, 10.0, 20.0, 30.0])
    p = Progress(4, stream=out, tty=True, width=8, clock=lambda: next(ticks))
    p.advance("linear/none/read bs=32k")
    assert out.getvalue() == "\r[##......] 1/4 linear/none/read bs=32k ETA 30s\x1b[K"


def test_durations_read_naturally():
    assert [format_duration(s) for s in (7, 65, 3720)] == ["7s", "1m05s", "1h02m"]


def test_text_table_aligns_columns():
    assert text_table(["a", "bb"], [["x", "1"], ["yy", "22"]]) == "a   bb\n--  --\nx    1\nyy  22"


def test_fio_text_reports_the_cpu_layer_per_core_and_per_kind_of_thread():
    result = {"jobs": [], "vmio": {"seed": 1, "devices": [], "page_cache": {}}}
    result["vmio"]["virtual_time_ns"] = 2_000_000_000
    result["vmio"]["cpu"] = {
        "model": "cfs",
        "cores": 2,
        "hypervisor": "kvm",
        "threads": [
            {
                "name": "vm1/vcpu0",
                "kind": "vcpu",
                "vm": 0,
                "cpu_ns": 1_500_000_000,
                "wait_ns": 250_000_000,
                "migrations": 3,
                "completed": 9,
            },
            {
                "name": "vm1/vcpu1",
                "kind": "vcpu",
                "vm": 0,
                "cpu_ns": 500_000_000,
                "wait_ns": 0,
                "migrations": 1,
                "completed": 2,
            },
            {
                "name": "vm1/main-loop",
                "kind": "vmm-main",
                "vm": 0,
                "cpu_ns": 10_000_000,
                "wait_ns": 1_000_000,
                "migrations": 0,
                "completed": 2000,
            },
        ],
        "core_busy_ns": [2_000_000_000, 10_000_000],
    }
    text = fio_text(result)
    assert "vmio: cpu cfs on 2 cores (kvm): cores busy 100 %, 0 %\n" in text
    assert (
        "vmio: cpu 2 vcpu threads: 2000.0 ms on a core, 250.0 ms waiting for one, "
        "4 migrations\n" in text
    )
    assert (
        "vmio: cpu 1 vmm-main thread: 10.0 ms on a core, 1.0 ms waiting for one, 0 migrations\n"
        in text
    )
