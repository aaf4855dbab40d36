"""iozone (issue #12 items 3 and 6): the record order and table of vmio.iozone (the same
known lists and text as crates/vmio-core/src/workload/iozone.rs's tests), and the real
engine vmio.real.iozone on a small file in a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vmio import iozone
from vmio.fioreport import _job_lines
from vmio.real import iozone as realiozone

KIB = 1024

# glibc: srand48(0); lrand48() eight times.
GLIBC_LRAND48 = [
    366850414, 1610402240, 206956554, 1869309841, 1239749840, 1687491058, 1486475625, 791919534,
]  # fmt: skip


def test_lrand48_after_srand48_0_draws_glibcs_sequence():
    assert iozone.lrand48(0, 8) == GLIBC_LRAND48


def test_the_shuffle_is_iozones_under_glibc_and_the_rust_ones_and_visits_every_record_once():
    # random_perf_test's loop compiled against glibc (the Rust test holds the same lists).
    assert iozone.shuffle(2) == [1, 0]
    assert iozone.shuffle(4) == [1, 3, 0, 2]
    assert iozone.shuffle(10) == [9, 3, 0, 4, 5, 6, 8, 1, 7, 2]
    assert iozone.shuffle(25) == [
        6, 15, 4, 16, 1, 8, 12, 7, 0, 5, 10, 19, 11, 17, 3, 22, 2, 20, 9, 14, 21, 23, 18, 24, 13,
    ]  # fmt: skip
    assert sorted(iozone.shuffle(25_600)) == list(range(25_600))


def test_the_table_has_iozones_header_and_one_row_per_record_size():
    def t(rec: int, phase: str, ns: int) -> iozone.Timing:
        return iozone.Timing(100 << 20, rec, phase, 100 << 20, ns)

    timings = [t(4 * KIB, p, 1_000_000_000) for p in iozone.PHASES]
    timings += [t(16 << 20, p, 500_000_000) for p in iozone.PHASES[:5]]
    timings.append(t(16 << 20, "random write", 2_000_000_000))
    want = (
        " " * 60 + "random  random    bkwd   record   stride" + " " * 35 + "\n"
        "              KB  reclen   write rewrite    read    reread    read   write    read"
        "  rewrite     read   fwrite frewrite   fread  freread\n"
        "          102400       4  102400  102400  102400   102400  102400  102400\n"
        "          102400   16384  204800  204800  204800   204800  204800   51200\n"
    )
    assert iozone.table(timings) == want


def test_the_simulators_report_prints_an_iozone_jobs_table():
    table = iozone.table([iozone.Timing(1 << 20, 4096, "write", 1 << 20, 10**9)])
    result = {"jobs": [{"jobname": "z", "vmio_iozone": {"table": table}}], "vmio": {"seed": 1}}
    lines = _job_lines(result, 0)
    assert lines[-4:] == ["  iozone (KB/s):", *table.rstrip("\n").split("\n")]


def test_sizes_take_iozones_units_and_bad_ones_name_the_accepted_values():
    assert realiozone.parse_size("100m") == 100 << 20
    assert realiozone.parse_size("4k") == 4 * KIB
    assert realiozone.parse_size("64") == 64 * KIB
    with pytest.raises(ValueError, match="accepted: a whole number of KB"):
        realiozone.parse_size("4q")


def test_the_real_engine_visits_every_record_once_per_pass_in_iozones_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    seen: list[tuple[str, int]] = []
    pread, pwrite = os.preadv, os.pwritev

    def preadv(fd, bufs, offset):  # noqa: ANN001, ANN202
        seen.append(("r", offset))
        return pread(fd, bufs, offset)

    def pwritev(fd, bufs, offset):  # noqa: ANN001, ANN202
        seen.append(("w", offset))
        return pwrite(fd, bufs, offset)

    monkeypatch.setattr(realiozone.os, "preadv", preadv)
    monkeypatch.setattr(realiozone.os, "pwritev", pwritev)
    realiozone.run(tmp_path, 40 * KIB, [4 * KIB], direct=False, include_flush=True)
    seq = [i * 4 * KIB for i in range(10)]
    rnd = [i * 4 * KIB for i in iozone.shuffle(10)]
    want = (
        [("w", o) for o in seq] * 2
        + ([("r", 0)] + [("r", o) for o in seq]) * 2
        + [("r", o) for o in rnd]
        + [("w", o) for o in rnd]
    )
    assert seen == want
    assert not (tmp_path / realiozone.FILE_NAME).exists()


def test_the_real_engine_reports_six_positive_rates_per_record_size(tmp_path: Path):
    try:
        timings = realiozone.run(tmp_path, 4 << 20, [4 * KIB, 1 << 20])
    except OSError as e:  # a filesystem without O_DIRECT (tmpfs)
        pytest.skip(f"O_DIRECT on {tmp_path}: {e}")
    assert [(t.record_bytes, t.phase) for t in timings] == [
        (r, p) for r in (4 * KIB, 1 << 20) for p in iozone.PHASES
    ]
    assert all(t.bytes == 4 << 20 and t.kb_per_s() > 0 for t in timings)
    rows = iozone.table(timings).splitlines()[2:]
    assert [len(r.split()) for r in rows] == [8, 8]
