"""Issue #11, point 5: PDC against a real ext4 and real storage. A TCG QEMU guest appends and
fsyncs (vmio.real.pdc.WORKLOAD: 3000 fsyncs, the journal wraps twice) on an ext4 served by
`vmio serve` with cache = "pdc"; the predicted journal is held to debugfs's journal extents;
then the guest's trace is replayed once with cache = writeback and once with pdc (fio's nbd
engine) and the host page cache each leaves is compared. The figures are printed and, with
VMIO_REAL_PDC_JSON=PATH, saved; scripts/real-pdc.py measures more rounds and records
tests/real_pdc_figures.json. Fast tests check the analysis on known traces."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import guest
from conftest import missing_tool
from vmio.real import guest as realguest
from vmio.real import pdc as realpdc
from vmio.real.guest import BLOCK


def test_pdc_predicts_a_real_ext4_journal_and_keeps_its_writes_out_of_the_host_page_cache(
    tmp_path: Path,
):
    for why in (guest.missing(), realpdc.host_tools_missing()):
        if why is not None:
            missing_tool(why)
    (tmp_path / "guest").mkdir()
    (tmp_path / "replay").mkdir()
    g = realpdc.run_guest(tmp_path / "guest", guest.run_guest)
    d, w = g.detection, realpdc.WORKLOAD
    runs = realpdc.alternate(tmp_path / "replay", g.trace, rounds=1)
    print(f"\n{realpdc.detection_table(d)}\n({g.seconds:.0f} s)\n{realpdc.replay_table(runs)}")
    if out := os.environ.get("VMIO_REAL_PDC_JSON"):
        figures = {"detection": asdict(d), "replays": [asdict(r) for r in runs]}
        Path(out).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    lines = guest.between_markers(g.console)
    assert lines[-1] == str(w.files) and not any("FAILED" in x for x in lines), g.console
    # One journal of contiguous blocks; every fsync of an append commits; the log wrapped.
    assert len(d.journal) == 1 and d.commits >= w.appends
    assert 0 < d.first_pass_commits < d.commits
    # The detector predicts the journal when the log comes back to its start: the first pass
    # is missed, then the prediction covers the journal and little else.
    assert d.commits_before_detection is not None, d.events
    assert d.first_pass_commits <= d.commits_before_detection < d.commits
    assert d.precision >= 0.9 and d.recall >= 0.9, (d.detected, d.journal)
    assert 0 < d.bypassed_bytes <= d.journal_bytes_written
    # Replayed on this host: pdc wrote around the page cache what writeback left in it.
    wb, pdc = runs
    assert (wb.cache, pdc.cache) == ("writeback", "pdc")
    assert pdc.bypassed_bytes > 0 and wb.bypassed_bytes == 0
    assert pdc.cached_bytes < wb.cached_bytes


def test_precision_and_recall_count_the_bytes_a_detected_range_shares_with_the_journal():
    journal = [(1000, 2000)]
    # 100 bytes before the journal, 900 inside: 900 of 1000 predicted, 900 of 1000 real.
    assert realpdc.overlap([(100, 1900)], journal) == 900
    assert realpdc.overlap([(0, 500), (1500, 2500)], journal) == 500
    assert realpdc.size([(0, 500), (1500, 2500)]) == 1500
    d = realpdc.detection([], journal, _pdc([(900, 1900)], []))
    assert (d.precision, d.recall) == (0.9, 0.9)
    assert d.first_detected is None and d.commits_before_detection is None


def _pdc(journals: list[tuple[int, int]], events: list[dict]) -> dict:
    return {
        "journals": [{"lo": lo, "hi": hi} for lo, hi in journals],
        "events": events,
        "bypassed_writes": 0,
        "bypassed_bytes": 0,
        "detections": len(events),
        "drops": 0,
    }


def test_commits_before_detection_are_the_commit_blocks_that_arrived_before_the_first_event():
    # A 10-block journal at blocks 100-109, its superblock first: 3 passes of 3 commits of
    # 3 blocks (2 log blocks, FLUSH, commit block, FLUSH) from block 101, with a data write
    # before each; the superblock rewritten after the first pass.
    j0, lines, t = 100 * BLOCK, ["fio version 3 iolog"], 0
    for p in range(3):
        for c in range(3):
            b = j0 + (1 + 3 * c) * BLOCK
            t += 10
            lines += [
                f"{t} vm1/vda write {5 * BLOCK} {BLOCK}",
                f"{t + 1} vm1/vda write {b} {2 * BLOCK}",
                f"{t + 2} vm1/vda sync 0 0",
                f"{t + 3} vm1/vda write {b + 2 * BLOCK} {BLOCK}",
                f"{t + 4} vm1/vda sync 0 0",
            ]
        if p == 0:
            lines.append(f"{t + 5} vm1/vda write {j0} {BLOCK}")
    events = realguest.read_trace("\n".join(lines) + "\n")
    journal = [(j0, j0 + 10 * BLOCK)]
    # Detected at the 4th commit's first log write (t = 41 µs): 3 commits before it.
    first = {"at_ns": 41_000, "kind": "detected", "lo": j0 + BLOCK, "hi": j0 + 10 * BLOCK}
    d = realpdc.detection(events, journal, _pdc([(first["lo"], first["hi"])], [first]))
    assert d.commits == 9 and d.first_pass_commits == 3
    assert d.wraps == [realpdc.Wrap(41, 3, False, 1), realpdc.Wrap(71, 6, False, 0)]
    assert d.commits_before_detection == 3
    assert d.flushes == 18 and d.writes == 28
    assert d.journal_bytes_written == 28 * BLOCK
    assert (d.precision, d.recall) == (1.0, 0.9) and d.first_recall == 0.9


def test_a_wrap_whose_transaction_sends_its_head_before_its_tail_is_marked_reversed():
    # An 8-block journal: a commit of blocks 1-4 and commit block 5, the superblock, then a
    # transaction over the wrap: its head (block 1) arrives before its tail (blocks 6-7),
    # both before its FLUSH, then its commit block 2.
    lines = ["fio version 3 iolog"]
    for t, (action, block, blocks) in enumerate(
        [
            ("write", 1, 4),
            ("sync", 0, 0),
            ("write", 5, 1),
            ("sync", 0, 0),
            ("write", 0, 1),
            ("write", 1, 1),
            ("write", 6, 2),
            ("sync", 0, 0),
            ("write", 2, 1),
            ("sync", 0, 0),
        ],
        start=1,
    ):
        lines.append(f"{t} vm1/vda {action} {block * BLOCK} {blocks * BLOCK}")
    events = realguest.read_trace("\n".join(lines) + "\n")
    assert realpdc.wraps(events, [(0, 8 * BLOCK)]) == [realpdc.Wrap(6, 1, True, 1)]


def test_the_replayed_trace_turns_a_fua_s_datasync_into_a_flush_fio_s_nbd_engine_sends():
    text = "fio version 3 iolog\n0 vm1/vda add\n5 vm1/vda write 0 4096\n5 vm1/vda datasync 0 0\n"
    assert realpdc.replay_trace(text) == text.replace("datasync", "sync")


FIXTURE = Path(__file__).with_name("real_pdc_figures.json")


def test_the_recorded_real_pdc_figures_are_of_this_workload_and_hold_what_pdc_guarantees():
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert recorded["workload"] == asdict(realpdc.WORKLOAD)
    d = recorded["detection"]
    assert d["precision"] >= 0.9 and d["recall"] >= 0.9
    assert d["first_pass_commits"] <= d["commits_before_detection"] < d["commits"]
    runs = recorded["replays"]
    assert [r["cache"] for r in runs] == list(realpdc.MODES) * (len(runs) // 2)
    assert len(runs) >= 6
    for wb, pdc in zip(runs[::2], runs[1::2], strict=True):
        assert pdc["cached_bytes"] < wb["cached_bytes"] and pdc["bypassed_bytes"] > 0
