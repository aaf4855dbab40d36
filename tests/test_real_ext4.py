"""Issue #10, item 6: a TCG QEMU guest mounts an ext4 made on the host with mkfs.ext4,
served by `vmio serve --trace`, and appends + fsyncs (vmio.real.guest.WORKLOAD); the trace is
read against the filesystem's map (debugfs, dumpe2fs), and the guest model runs the same
workload as a fio job in the simulator: each figure within realguest.TOLERANCE (25 %) of the
real one, the journal at the same blocks. The figures are printed and, with
VMIO_REAL_EXT4_JSON=PATH, the analysis saved as JSON. A fast test holds the model to the real
figures recorded in real_ext4_figures.json (no QEMU needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import guest
from conftest import missing_tool
from vmio.real import guest as realguest


def test_a_guest_ext4_appending_with_fsync_writes_its_journal_inside_the_journal_extents(
    tmp_path: Path,
):
    for why in (guest.missing(), realguest.host_tools_missing()):
        if why is not None:
            missing_tool(why)
    out = os.environ.get("VMIO_REAL_EXT4_JSON")
    r = realguest.run(tmp_path, guest.run_guest, json_path=Path(out) if out else None)
    lines = guest.between_markers(r.console)
    w, a = realguest.WORKLOAD, r.analysis
    rows = realguest.compare(realguest.Figures.of_analysis(a), realguest.model(w))
    side = realguest.side_by_side(rows)
    print(f"\n{realguest.table(a)}\n({r.seconds:.0f} s)\n{side}")
    # The guest did the whole workload: every file exists, nothing failed.
    assert lines[-1] == str(w.files) and not any("FAILED" in x for x in lines), r.console
    # mke2fs puts one journal of contiguous blocks on a 1 GiB filesystem.
    assert len(a.journal_extents) == 1
    # Every fsync of an append commits (its inode's size changed): one commit each, and a
    # commit's flushes (PREFLUSH and FUA of the commit block) are the only ones: ext4_sync_file
    # adds none when the commit sends them (jbd2_trans_will_send_data_barrier).
    assert a.commits == w.appends, a.commit_blocks
    assert a.flushes == 2 * a.commits and a.fua_writes == 0
    # The log is written in order: every journal block after the one before, no wrap.
    offs = a.journal_offsets_blocks
    assert offs == sorted(offs) and len(set(offs)) == len(offs)
    # A commit is at least a descriptor, one logged block and the commit block.
    assert min(a.commit_blocks) >= 3, a.commit_blocks
    # Journal writes land in the journal's extents and nowhere else; the data land in the
    # files' extents; no journal write is outside a commit.
    assert a.journal_writes_outside_commits == 0
    assert a.bytes_by_region.get("file data", 0) >= w.appends * w.block
    assert "other" not in a.bytes_by_region, a.bytes_by_region
    assert 0 < a.journal_share < 1
    # The model: the same journal, every figure within 25 % of the real one.
    assert all(row.ok for row in rows), side


FIXTURE = Path(__file__).with_name("real_ext4_figures.json")


def test_the_guest_model_appending_with_fsync_is_within_25_percent_of_the_recorded_real_ext4():
    recorded = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert recorded["workload"] == realguest.WORKLOAD.fio_job()
    real = realguest.Figures.of_json(recorded["figures"])
    rows = realguest.compare(real, realguest.model())
    side = realguest.side_by_side(rows)
    print(f"\n{side}")
    assert [r.figure for r in rows if not r.ok] == [], side
    # mke2fs's place for a 1 GiB filesystem's journal: 8192 blocks from group 4's start.
    assert real.journal_extent == (131072, 139263)


def test_the_comparison_marks_a_figure_off_by_more_than_25_percent_and_a_moved_journal():
    real = realguest.Figures((100, 199), (100, 150), 10, 0.8, 2.0, 1.0, 6.0, {5: 2, 6: 8})
    same = realguest.compare(real, real)
    assert all(r.ok for r in same) and realguest.distribution_distance({5: 2}, {5: 4}) == 0
    off = realguest.Figures((100, 199), (100, 120), 10, 0.8, 2.6, 1.0, 6.0, {6: 5, 7: 5})
    missed = {r.figure: r.difference for r in realguest.compare(real, off) if not r.ok}
    # 21 blocks written instead of 51 (-58.8 %), 2.6 flushes per fsync instead of 2 (+30 %),
    # commit sizes 0.2/0.8 of 5/6 against 0.5/0.5 of 6/7: (0.2 + 0.3 + 0.5) / 2 = 0.5.
    assert missed == {
        "journal written to (block)": "-58.8 % blocks",
        "flushes per fsync": "+30.0 %",
        "commit size histogram (blocks: commits)": "distance 0.500",
    }
    moved = realguest.Figures((200, 299), (200, 250), 10, 0.8, 2.0, 1.0, 6.0, {5: 2, 6: 8})
    assert [r.figure for r in realguest.compare(real, moved) if not r.ok] == [
        "journal (blocks)",
        "journal written from (block)",
    ]


def test_the_analysis_counts_commits_flushes_and_the_journal_share_of_a_known_trace():
    w = realguest.Workload(files=1, appends=2)
    # The journal at blocks 1000-1099 (its superblock first, the log from 1001), data at 50.
    j, d = 1001 * realguest.BLOCK, 50 * realguest.BLOCK
    regions = {"journal": [(1000, 1099)], "file data": [(50, 51)], "inode table": [(7, 7)]}
    lines = ["fio version 3 iolog", "0 vm1/vda add", "0 vm1/vda open"]
    for k in range(2):  # one append + fsync: data, 5 journal blocks, FLUSH, commit, FLUSH
        lines += [
            f"{k} vm1/vda write {d + k * 4096} 4096",
            f"{k} vm1/vda write {j + k * 6 * 4096} {5 * 4096}",
            f"{k} vm1/vda sync 0 0",
            f"{k} vm1/vda write {j + (k * 6 + 5) * 4096} 4096",
            f"{k} vm1/vda sync 0 0",
        ]
    lines += [f"2 vm1/vda write {1000 * 4096} 4096"]  # the journal's superblock
    lines += ["3 vm1/vda write 28672 8192", "3 vm1/vda datasync 0 0"]  # the unmount
    events = realguest.read_trace("\n".join(lines) + "\n")
    a = realguest.analyse(events[:-2], regions, w, [[7, 50]], events[-2:])
    assert a.commit_blocks == [6, 6] and a.commits_per_fsync == 1.0
    assert a.flushes == 4 and a.flushes_per_fsync == 2.0
    assert a.journal_share == 13 / 15
    assert a.writes_by_region == {"journal": 5, "file data": 2}
    assert a.journal_offsets_blocks == [1, 6, 7, 12]
    assert a.logged_sets == {"file data + inode table": 1}
    assert a.unmount_blocks_by_region == {"inode table": 2}
    assert a.fua_writes == 0 and a.journal_writes_outside_commits == 0
    assert a.journal_superblock_writes == 1
