//! mq-deadline (block/mq-deadline.c), without I/O priorities.
//!
//! ```text
//! insert(rq): back-merge into a queued rq of the same direction ending at rq.start, or
//!             front-merge into one starting at rq.end (merged size ≤ max_merge);
//!             else add to sort list (by sector) and FIFO (deadline = now + expire[dir])
//! dispatch():
//!   if batch < fifo_batch and next_rq[cur_dir] exists: take it
//!   else pick a direction: reads, unless writes exist and were starved writes_starved times
//!      (or there are no reads); if that direction's FIFO head expired, or it has no next_rq,
//!      start from the FIFO head; else from next_rq; batch = 0
//!   next_rq[dir] = the request after the one taken, in sector order
//! ```
//! Defaults: read_expire 500 ms, write_expire 5 s, fifo_batch 16, writes_starved 2 (the
//! kernel's). `max_merge` is the device's max_sectors_kb (1280 KiB by default).
//!
//! `next_rq[dir]` above is Linux's up to 6.4: the request after the one taken, in sector
//! order, when it was taken (`deadline_move_request`: `next_rq[data_dir] =
//! deadline_latter_request(rq)`), so a request queued later never continues a batch. Since
//! Linux 6.5 (Bart Van Assche, "block: mq-deadline: Track the dispatch position", 2023, as
//! read in a stored copy of the patch and of a recent block/mq-deadline.c) the scheduler
//! keeps each direction's `latest_pos`, the start sector of its last dispatched request
//! (`dd_start_request`), and its next request is the first queued at or above it
//! (`deadline_next_request` -> `deadline_from_pos`), looked up at each dispatch: a
//! sequential stream's request queued during a batch continues it. [`MqDeadline::
//! tracking_position`] gives that order (a guest's ring in front of a virtio disk uses it);
//! the `[scheduler]` table keeps the earlier one.
//!
//! ```text
//! tracking position:  next(dir) = the first queued request of dir with start >= latest_pos[dir]
//!                     take(rq): latest_pos[dir(rq)] = start(rq)
//! ```

use super::{IoScheduler, SchedulerEntry};
use crate::params::{Entry, Kind, ParamSpec, Value, Values};
use crate::request::{DevIo, Op};
use crate::slab::Slab;
use crate::sorted_chunks::{Pos, SortedChunks};
use crate::{Ns, MS, SEC};
use std::collections::VecDeque;

pub const ENTRY: SchedulerEntry = Entry {
    name: "mq-deadline",
    help: "sector-sorted batches, per-direction FIFO deadlines, reads preferred, adjacent requests merged",
    params: &[
        ParamSpec {
            name: "read_expire",
            kind: Kind::Duration {
                bare: SEC,
                positive: false,
            },
            default: Value::Int(500 * MS),
            unit: "ns",
            help: "deadline of a read (Linux: 500ms)",
        },
        ParamSpec {
            name: "write_expire",
            kind: Kind::Duration {
                bare: SEC,
                positive: false,
            },
            default: Value::Int(5 * SEC),
            unit: "ns",
            help: "deadline of a write (Linux: 5s)",
        },
        ParamSpec {
            name: "max_merge",
            kind: Kind::SIZE,
            default: Value::Int(1280 << 10),
            unit: "bytes",
            help: "largest merged request (the device's max_sectors_kb)",
        },
    ],
    build,
};

fn build(v: &Values, _: &[u32]) -> Box<dyn IoScheduler> {
    Box::new(MqDeadline::new(
        v.int("read_expire"),
        v.int("write_expire"),
        v.int("max_merge"),
    ))
}

const FIFO_BATCH: u32 = 16;
const WRITES_STARVED: u32 = 2;

#[derive(Debug, Default)]
struct Dir {
    /// The sort list: queued requests in (offset, seq) order, as (offset, seq, slot in
    /// `MqDeadline::ios`). Chunked sorted keys, not a B-tree of requests: a queue usually
    /// holds a few requests (one chunk, one binary search), where a B-tree searched its
    /// nodes and moved 80-byte requests between them; a deep one moves at most a chunk of
    /// 24-byte keys. The keys are unique (seq only grows), so the order is the tree's.
    sorted: SortedChunks<(u64, u64, u32)>,
    /// (deadline, offset, seq); entries whose key left `sorted` are skipped lazily.
    fifo: VecDeque<(Ns, u64, u64)>,
}

impl Dir {
    /// The place in `sorted` of the key (off, seq), if it is queued.
    #[inline(always)]
    fn find(&self, off: u64, seq: u64) -> Option<Pos> {
        let p = self.sorted.first_not(|e| (e.0, e.1) < (off, seq))?;
        let e = self.sorted.get(p);
        ((e.0, e.1) == (off, seq)).then_some(p)
    }

    /// The first queued request starting at or above `off`: a B-tree's
    /// `range((off, 0)..).next()`, as seq starts at 1.
    #[inline]
    fn first_from(&self, off: u64) -> Option<Pos> {
        self.sorted.first_not(|e| e.0 < off)
    }

    #[inline]
    fn insert_sorted(&mut self, off: u64, seq: u64, slot: usize) {
        self.sorted.insert((off, seq, slot as u32));
    }

    /// The oldest live FIFO entry: (deadline, its place in `sorted`).
    fn front_live(&mut self) -> Option<(Ns, Pos)> {
        while let Some(&(d, off, seq)) = self.fifo.front() {
            if let Some(i) = self.find(off, seq) {
                return Some((d, i));
            }
            self.fifo.pop_front();
        }
        None
    }
}

#[derive(Debug)]
pub struct MqDeadline {
    /// The only queued request, with its insertion time, kept out of the lists while it is
    /// alone: a dispatch takes it as the lists would (see `dispatch`), and anything else
    /// that comes first puts it in them. Only a shortcut: the same dispatch order.
    solo: Option<(DevIo, Ns)>,
    dirs: [Dir; 2],
    /// The queued requests, the sort lists' slots.
    ios: Slab<DevIo>,
    expire: [Ns; 2],
    max_merge: u64,
    seq: u64,
    next_rq: [Option<(u64, u64)>; 2],
    cur_dir: usize,
    batch: u32,
    starved: u32,
    count: usize,
    /// Linux 6.5 on: each direction's next request is the first at or above the start of
    /// its last dispatched one (`latest_pos`), not a pointer kept from its dispatch.
    by_position: bool,
    latest_pos: [u64; 2],
}

fn dir_of(op: Op) -> usize {
    usize::from(op != Op::Read)
}

impl MqDeadline {
    pub fn new(read_expire_ns: Ns, write_expire_ns: Ns, max_merge_bytes: u64) -> Self {
        Self {
            solo: None,
            dirs: [Dir::default(), Dir::default()],
            ios: Slab::new(),
            expire: [read_expire_ns, write_expire_ns],
            max_merge: max_merge_bytes,
            seq: 0,
            next_rq: [None, None],
            cur_dir: 0,
            batch: 0,
            starved: 0,
            count: 0,
            by_position: false,
            latest_pos: [0, 0],
        }
    }

    /// The scheduler with Linux 6.5's dispatch position (module doc): a direction's next
    /// request is the first queued at or above its last dispatched request's start.
    pub fn tracking_position(mut self) -> Self {
        self.by_position = true;
        self
    }

    /// Put the solo request into the lists (as its insertion would have).
    fn settle(&mut self) {
        if let Some((io, t)) = self.solo.take() {
            self.count -= 1;
            self.enqueue(t, io);
        }
    }

    fn enqueue(&mut self, now: Ns, io: DevIo) {
        let dir = dir_of(io.op);
        self.seq += 1;
        let (off, seq) = (io.offset_bytes, self.seq);
        let slot = self.ios.insert(io);
        let d = &mut self.dirs[dir];
        d.fifo.push_back((now + self.expire[dir], off, seq));
        d.insert_sorted(off, seq, slot);
        self.count += 1;
    }

    fn try_merge(&mut self, io: &mut Option<DevIo>) -> bool {
        self.settle();
        let new = io.as_ref().unwrap();
        let d = &mut self.dirs[dir_of(new.op)];
        // Back merge: a queued request ends where the new one starts (the last key below
        // (start, 0)).
        let at = d.first_from(new.offset_bytes);
        if let Some(below) = d.sorted.before(at) {
            let slot = d.sorted.get(below).2 as usize;
            let q = self.ios.get_ref(slot);
            if q.end_bytes() == new.offset_bytes
                && q.op == new.op
                && q.fua == new.fua
                && q.len_bytes + new.len_bytes <= self.max_merge
            {
                let new = io.take().unwrap();
                let q = self.ios.get(slot);
                q.len_bytes += new.len_bytes;
                q.sync |= new.sync;
                q.merged.push(new.tag);
                q.merged.extend(new.merged);
                return true;
            }
        }
        // Front merge: a queued request starts where the new one ends.
        let end = new.end_bytes();
        if let Some(at) = d.first_from(end) {
            let (off, seq, slot) = d.sorted.get(at);
            let q = self.ios.get_ref(slot as usize);
            if off == end
                && q.op == new.op
                && q.fua == new.fua
                && q.len_bytes + new.len_bytes <= self.max_merge
            {
                let mut new = io.take().unwrap();
                d.sorted.remove(at);
                let old = self.ios.remove(slot as usize);
                new.len_bytes += old.len_bytes;
                new.sync |= old.sync;
                new.merged.push(old.tag);
                new.merged.extend(old.merged);
                // Keep the older deadline: re-key the FIFO entry of the old request.
                for e in d.fifo.iter_mut() {
                    if e.1 == off && e.2 == seq {
                        e.1 = new.offset_bytes;
                    }
                }
                new.queued_ns = new.queued_ns.min(old.queued_ns);
                let off = new.offset_bytes;
                let slot = self.ios.insert(new);
                d.insert_sorted(off, seq, slot);
                return true;
            }
        }
        false
    }

    /// Take the request at place `p` of `dir`'s sort list.
    fn take(&mut self, dir: usize, p: Pos) -> DevIo {
        let d = &mut self.dirs[dir];
        let ((off, _, slot), next) = d.sorted.remove(p);
        let io = self.ios.remove(slot as usize);
        self.count -= 1;
        self.batch += 1;
        self.cur_dir = dir;
        if self.by_position {
            self.latest_pos[dir] = off;
        } else {
            // The key after the one taken.
            self.next_rq[dir] = next.map(|p| {
                let e = d.sorted.get(p);
                (e.0, e.1)
            });
        }
        io
    }

    /// The place of `next_rq[dir]` if it is still queued (it may have been merged away);
    /// tracking the position, of the first queued request at or above `latest_pos[dir]`.
    fn live_next(&self, dir: usize) -> Option<Pos> {
        let d = &self.dirs[dir];
        if self.by_position {
            return d.first_from(self.latest_pos[dir]);
        }
        self.next_rq[dir].and_then(|(off, seq)| d.find(off, seq))
    }
}

impl IoScheduler for MqDeadline {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn insert(&mut self, now: Ns, io: DevIo) {
        let mut slot = Some(io);
        if self.count > 0 && MqDeadline::try_merge(self, &mut slot) {
            return;
        }
        let io = slot.unwrap();
        self.insert_unmerged(now, io);
    }

    #[inline]
    fn try_merge(&mut self, io: DevIo) -> Result<(), DevIo> {
        let mut slot = Some(io);
        if self.count > 0 && MqDeadline::try_merge(self, &mut slot) {
            return Ok(());
        }
        Err(slot.unwrap())
    }

    #[inline]
    fn insert_unmerged(&mut self, now: Ns, io: DevIo) {
        // The solo shortcut takes a lone request as a new batch, which a request at or above
        // the dispatch position is not (it continues the batch): none when tracking it.
        if self.count == 0 && !self.by_position {
            self.solo = Some((io, now));
            self.count = 1;
            return;
        }
        self.settle();
        self.enqueue(now, io);
    }

    #[inline]
    fn pass_alone(&mut self, now: Ns, io: DevIo) -> Option<DevIo> {
        // insert_unmerged into empty lists (the solo slot), then dispatch's solo path.
        debug_assert!(self.count == 0 && self.solo.is_none());
        if self.by_position {
            // As inserted into empty lists and dispatched (`dispatch` below).
            self.enqueue(now, io);
            return self.dispatch(now);
        }
        let dir = dir_of(io.op);
        if dir == 1 {
            self.starved = 0;
        }
        self.batch = 1;
        self.cur_dir = dir;
        self.next_rq[dir] = None;
        Some(io)
    }

    #[inline]
    fn dispatch(&mut self, now: Ns) -> Option<DevIo> {
        // The usual answer of an idle scheduler, before the queued path's frame is set up.
        if self.count == 0 {
            return None;
        }
        self.dispatch_queued(now)
    }

    #[inline]
    fn queued(&self) -> usize {
        self.count
    }
}

impl MqDeadline {
    /// `dispatch` with requests queued.
    #[inline(never)]
    fn dispatch_queued(&mut self, now: Ns) -> Option<DevIo> {
        if let Some((io, _)) = self.solo.take() {
            // Alone in the lists it would be taken as a new batch (no next request in
            // either direction): the direction is its own, writes reset the starvation
            // count (no reads wait), and the batch has taken one.
            let dir = dir_of(io.op);
            if dir == 1 {
                self.starved = 0;
            }
            self.count = 0;
            self.batch = 1;
            self.cur_dir = dir;
            self.next_rq[dir] = None;
            return Some(io);
        }
        if self.batch < FIFO_BATCH {
            if let Some(i) = self.live_next(self.cur_dir) {
                return Some(self.take(self.cur_dir, i));
            }
        }
        let has_reads = !self.dirs[0].sorted.is_empty();
        let has_writes = !self.dirs[1].sorted.is_empty();
        let dir = if has_reads && (!has_writes || self.starved < WRITES_STARVED) {
            if has_writes {
                self.starved += 1;
            }
            0
        } else {
            self.starved = 0;
            1
        };
        let fifo_head = self.dirs[dir].front_live();
        let expired = fifo_head.is_some_and(|(d, _)| d <= now);
        let i = match (expired, self.live_next(dir)) {
            (false, Some(i)) => i,
            _ => fifo_head.expect("a non-empty direction has a FIFO head").1,
        };
        self.batch = 0;
        Some(self.take(dir, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::io;
    use std::collections::BTreeMap;

    fn sched() -> MqDeadline {
        MqDeadline::new(500_000_000, 5_000_000_000, 1280 << 10)
    }

    #[test]
    fn the_sort_list_answers_every_look_up_as_a_btree_keyed_by_offset_and_sequence_does() {
        // Random insertions (dense offsets with many equal ones, and sparse ones), removals
        // by index (the tree's `remove`, then `range(key..)` for next_rq), the look-ups
        // `find` (contains_key), `first_from` (range((off, 0)..).next()) and the back
        // merge's last key below (off, 0) (range(..(off, 0)).next_back()).
        let mut rng = crate::rng::Rng::new(29);
        for round in 0..200u64 {
            let span = 1 + rng.below(if round % 2 == 0 { 8 } else { 1 << 20 });
            let mut d = Dir::default();
            let mut tree: BTreeMap<(u64, u64), u32> = BTreeMap::new();
            let mut seq = 0;
            for _ in 0..400 {
                if tree.is_empty() || rng.below(5) < 3 {
                    seq += 1;
                    let off = rng.below(span) * 4096;
                    let slot = rng.below(1000) as usize;
                    d.insert_sorted(off, seq, slot);
                    tree.insert((off, seq), slot as u32);
                } else {
                    let n = rng.below(tree.len() as u64) as usize;
                    let (&key, &slot) = tree.iter().nth(n).unwrap();
                    let p = d.find(key.0, key.1).expect("a queued key is found");
                    let (got, next) = d.sorted.remove(p);
                    assert_eq!(got, (key.0, key.1, slot));
                    tree.remove(&key);
                    let want = tree.range(key..).next().map(|(&k, &v)| (k.0, k.1, v));
                    assert_eq!(next.map(|p| d.sorted.get(p)), want);
                }
                let off = rng.below(span + 1) * 4096;
                let at = d.first_from(off);
                let want = tree.range((off, 0)..).next().map(|(&k, &v)| (k.0, k.1, v));
                assert_eq!(at.map(|p| d.sorted.get(p)), want);
                let below = tree
                    .range(..(off, 0))
                    .next_back()
                    .map(|(&k, &v)| (k.0, k.1, v));
                assert_eq!(d.sorted.before(at).map(|p| d.sorted.get(p)), below);
                let probe = (off, rng.below(seq + 2));
                assert_eq!(
                    d.find(probe.0, probe.1).is_some(),
                    tree.contains_key(&probe)
                );
                let all = tree.iter().map(|(&k, &v)| (k.0, k.1, v));
                assert!(d.sorted.iter().eq(all));
            }
        }
    }

    #[test]
    fn adjacent_requests_are_merged_back_and_front() {
        let mut s = sched();
        s.insert(0, io(1, Op::Read, 8192, 4096));
        s.insert(0, io(2, Op::Read, 12288, 4096)); // back merge
        s.insert(0, io(3, Op::Read, 4096, 4096)); // front merge
        assert_eq!(s.queued(), 1);
        let d = s.dispatch(0).unwrap();
        assert_eq!((d.offset_bytes, d.len_bytes), (4096, 12288));
        let mut tags: Vec<u64> = d.tags().collect();
        tags.sort();
        assert_eq!(tags, vec![1, 2, 3]);
    }

    #[test]
    fn merges_stop_at_the_maximum_request_size() {
        let mut s = MqDeadline::new(1, 1, 8192);
        s.insert(0, io(1, Op::Write, 0, 4096));
        s.insert(0, io(2, Op::Write, 4096, 4096));
        s.insert(0, io(3, Op::Write, 8192, 4096));
        assert_eq!(s.queued(), 2);
    }

    #[test]
    fn reads_and_writes_never_merge() {
        let mut s = sched();
        s.insert(0, io(1, Op::Read, 0, 4096));
        s.insert(0, io(2, Op::Write, 4096, 4096));
        assert_eq!(s.queued(), 2);
    }

    #[test]
    fn a_batch_continues_in_ascending_sector_order() {
        let mut s = sched();
        for (t, off) in [(1, 40), (2, 10), (3, 30), (4, 20)] {
            s.insert(0, io(t, Op::Read, off << 20, 4096));
        }
        let order: Vec<u64> = (0..4)
            .map(|_| s.dispatch(0).unwrap().offset_bytes >> 20)
            .collect();
        // First from the FIFO head (oldest), then ascending from there, then wrap to the FIFO.
        assert_eq!(order, vec![40, 10, 20, 30]);
    }

    #[test]
    fn writes_are_not_starved_by_a_stream_of_reads() {
        let mut s = sched();
        s.insert(0, io(100, Op::Write, 0, 4096));
        let mut got_write = false;
        for i in 0..6u64 {
            s.insert(0, io(i, Op::Read, (i + 10) << 30, 4096));
            if s.dispatch(0).unwrap().op == Op::Write {
                got_write = true;
                break;
            }
        }
        assert!(got_write);
    }

    #[test]
    fn a_read_queued_during_a_batch_above_the_dispatch_position_continues_it_from_linux_6_5() {
        // A write at 0 waits; reads at 10, 20 and 30 MiB come one per dispatch. Before 6.5
        // the batch's next request is fixed when its last was taken (none above 10, then
        // none above 20): each read starts a new batch, and the second time writes have been
        // passed over twice, so the write goes before 30. Tracking the position, 20 and 30
        // are at or above the last dispatched read: one batch of three reads, then the write.
        let order = |s: MqDeadline| {
            let mut s = s;
            s.insert(0, io(100, Op::Write, 0, 4096));
            s.insert(0, io(1, Op::Read, 10 << 20, 4096));
            let mut got = vec![s.dispatch(0).unwrap().tag];
            for (tag, off) in [(2, 20u64), (3, 30)] {
                s.insert(0, io(tag, Op::Read, off << 20, 4096));
                got.push(s.dispatch(0).unwrap().tag);
            }
            got.extend(std::iter::from_fn(|| s.dispatch(0).map(|d| d.tag)));
            got
        };
        assert_eq!(order(sched()), vec![1, 2, 100, 3]);
        assert_eq!(order(sched().tracking_position()), vec![1, 2, 3, 100]);
    }

    #[test]
    fn an_expired_request_goes_before_sector_order() {
        let mut s = sched();
        s.insert(0, io(1, Op::Read, 100 << 20, 4096));
        s.insert(0, io(2, Op::Read, 5 << 20, 4096));
        assert_eq!(s.dispatch(0).unwrap().tag, 1);
        s.insert(1, io(3, Op::Read, 200 << 20, 4096));
        // tag 2 (behind the head) expired by now: it goes first.
        assert_eq!(s.dispatch(600_000_000).unwrap().tag, 2);
    }
}
