"""Golden outputs: the simulator's results, byte for byte, for a set of varied configurations.

They guard behaviour while code moves: `vmio sim` JSON for every volume layout,
QEMU cache mode and host scheduler, on HDDs, clean and aged SSDs and RAM, with trace replay,
FileBench and several VMs; and the `tables.txt` and `calibration.csv` of the built-in
studies run with `--quick`. A difference fails with the first differing line.

A deliberate change of a figure regenerates them explicitly:

    VMIO_UPDATE_GOLDEN=1 pytest tests/test_golden_outputs.py tests/test_study_mcfq.py \
        tests/test_study_pdc.py

and its commit names the figures that changed, before and after.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"
CASES_DIR = GOLDEN / "cases"

# A VM disk's ext4 (the guest layer), for templates with an FSTABLE placeholder.
EXT4 = '[vm.disk.filesystem]\ntype = "ext4"'

# name: (stack template, substitutions, job file or None = the VMs' own workloads, seed)
CASES: dict[str, tuple[str, dict[str, str], str | None, int]] = {
    "ext4-ordered-none-append-fsync": (
        "ext4.toml",
        {"CACHE": "none", "DATA": ""},
        "append-fsync.fio",
        16,
    ),
    "ext4-journal-writeback-append-fsync": (
        "ext4.toml",
        {"CACHE": "writeback", "DATA": 'data = "journal"'},
        "append-fsync.fio",
        17,
    ),
    "ext4-ordered-pdc-append-fsync-4m-journal": (
        "ext4.toml",
        {"CACHE": "pdc", "DATA": 'journal_size = "4m"'},
        "append-fsync.fio",
        20,
    ),
    "ext4-ordered-none-files-randrw-fdatasync": (
        "ext4.toml",
        {"CACHE": "none", "DATA": ""},
        "files-randrw.fio",
        18,
    ),
    "ram-guest-buffered-randrw-fsync": (
        "ram.toml",
        {"CACHE": "none", "SCHED": "mq-deadline", "IFACE": "virtio-blk"},
        "randrw-guest.fio",
        19,
    ),
    "hdd-single-none-mqdeadline-randread": (
        "hdd2.toml",
        {
            "LAYOUT": "single",
            "DEVICES": '["sdb"]',
            "CACHE": "none",
            "SCHED": "mq-deadline",
            "IFACE": "virtio-blk",
        },
        "randread.fio",
        1,
    ),
    "hdd-linear-writeback-none-randrw-fsync": (
        "hdd2.toml",
        {
            "LAYOUT": "linear",
            "DEVICES": '["sdb", "sdc"]',
            "CACHE": "writeback",
            "SCHED": "none",
            "IFACE": "virtio-blk",
        },
        "randrw-buffered.fio",
        2,
    ),
    "hdd-stripe-writethrough-mqdeadline-seqwrite": (
        "hdd2.toml",
        {
            "LAYOUT": "stripe",
            "DEVICES": '["sdb", "sdc"]',
            "CACHE": "writethrough",
            "SCHED": "mq-deadline",
            "IFACE": "virtio-blk",
        },
        "seqwrite.fio",
        3,
    ),
    "hdd-raid0-directsync-cfq-phases-scsi": (
        "hdd2.toml",
        {
            "LAYOUT": "raid0",
            "DEVICES": '["sdb", "sdc"]',
            "CACHE": "directsync",
            "SCHED": "cfq",
            "IFACE": "virtio-scsi",
        },
        "phases.fio",
        4,
    ),
    "hdd-raid0-unsafe-mqdeadline-randrw-ide": (
        "hdd2.toml",
        {
            "LAYOUT": "raid0",
            "DEVICES": '["sdb", "sdc"]',
            "CACHE": "unsafe",
            "SCHED": "mq-deadline",
            "IFACE": "ide",
        },
        "randrw-buffered.fio",
        5,
    ),
    "ssd-clean-none-none-randwrite-4vms": (
        "ssd-vms.toml",
        {
            "PRECOND": "clean",
            "SCHED": "none",
            "CACHE": "none",
            "WORKLOAD": "randwrite4k.fio",
            "FSTABLE": "",
        },
        None,
        6,
    ),
    "ssd-aged-cfq-none-fileserver-4vms": (
        "ssd-vms.toml",
        {
            "PRECOND": "aged",
            "SCHED": "cfq",
            "CACHE": "none",
            "WORKLOAD": "fileserver.fio",
            "FSTABLE": EXT4,
        },
        None,
        7,
    ),
    "ssd-aged-mcfq-none-varmail-4vms": (
        "ssd-vms.toml",
        {
            "PRECOND": "aged",
            "SCHED": "mcfq",
            "CACHE": "none",
            "WORKLOAD": "varmail.fio",
            "FSTABLE": EXT4,
        },
        None,
        8,
    ),
    "ssd-aged-mqdeadline-writeback-msn-replay-4vms": (
        "ssd-vms.toml",
        {
            "PRECOND": "aged",
            "SCHED": "mq-deadline",
            "CACHE": "writeback",
            "WORKLOAD": "msn-nostall.fio",
            "FSTABLE": "",
        },
        None,
        9,
    ),
    "ssd-clean-cfq-directsync-exchange-open-loop-4vms": (
        "ssd-vms.toml",
        {
            "PRECOND": "clean",
            "SCHED": "cfq",
            "CACHE": "directsync",
            "WORKLOAD": "exchange-open.fio",
            "FSTABLE": "",
        },
        None,
        10,
    ),
    "ram-writeback-mqdeadline-seqwrite-throttled": (
        "ram.toml",
        {"CACHE": "writeback", "SCHED": "mq-deadline", "IFACE": "virtio-blk"},
        "seqwrite.fio",
        11,
    ),
    "ram-writeback-none-phases-evicting-ide": (
        "ram.toml",
        {"CACHE": "writeback", "SCHED": "none", "IFACE": "ide"},
        "phases.fio",
        12,
    ),
    "ram-writethrough-mqdeadline-randrw-scsi": (
        "ram.toml",
        {"CACHE": "writethrough", "SCHED": "mq-deadline", "IFACE": "virtio-scsi"},
        "randrw-buffered.fio",
        13,
    ),
    "ram-none-none-randread": (
        "ram.toml",
        {"CACHE": "none", "SCHED": "none", "IFACE": "virtio-blk"},
        "randread.fio",
        14,
    ),
    "ram-unsafe-cfq-buffered-read-after-write": (
        "ram.toml",
        {"CACHE": "unsafe", "SCHED": "cfq", "IFACE": "virtio-blk"},
        "phases.fio",
        15,
    ),
}


def updating() -> bool:
    """Whether this run regenerates the golden files (`VMIO_UPDATE_GOLDEN=1`)."""
    return os.environ.get("VMIO_UPDATE_GOLDEN") == "1"


def stack_text(name: str) -> str:
    """The stack file of case `name`: its template with the case's values."""
    template, subs, _, _ = CASES[name]
    text = (CASES_DIR / template).read_text(encoding="utf-8")
    for key, value in subs.items():
        text = text.replace(key, value)
    return text


def compare(actual: str, golden: Path) -> None:
    """Assert `actual` equals the golden file byte for byte (or rewrite it when updating)."""
    if updating():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual, encoding="utf-8")
        return
    assert golden.is_file(), f"{golden} is missing; VMIO_UPDATE_GOLDEN=1 creates it"
    expected = golden.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    expected.splitlines(keepends=True),
                    actual.splitlines(keepends=True),
                    str(golden),
                    "now",
                    n=1,
                )
            )[:40]
        )
        raise AssertionError(f"output differs from {golden.name}:\n{diff}")


def check_study_dir(out: Path, study: str) -> None:
    """Compare every `tables.txt` and `calibration.csv` under a study's output directory."""
    found = sorted(
        p for p in out.rglob("*") if p.name in ("tables.txt", "calibration.csv") and p.is_file()
    )
    assert found, f"no tables in {out}"
    for p in found:
        compare(p.read_text(encoding="utf-8"), GOLDEN / "study" / study / p.relative_to(out))
