//! The block layer's per-device request queue: the one dispatch policy every engine drives.
//!
//! Named after the layer it models, Linux's block request queue (blk-mq's per-device queue:
//! the elevator, the flush machinery and the driver tags that bound the queue depth), not
//! after a data structure. A [`DeviceQueue`] owns a host I/O scheduler ([`crate::sched`]),
//! the device's queue depth, the queue of flushes that bypass the scheduler, the set of
//! requests in flight (one slot each, the driver tag a device sees) and the bookkeeping of
//! the scheduler's wake-ups. It is pure: time is an argument, it never reads a clock, sleeps
//! or performs I/O. The simulator, `vmio serve` and the scheduler tests all drive it; the
//! engine only maps requests onto devices, gives each started request to its device and
//! arms the timers this queue asks for.
//!
//! Sources: Linux `block/blk-mq.c` (`blk_mq_submit_bio`, `blk_mq_dispatch_rq_list`: a
//! request needs a driver tag, of which a queue has `queue_depth`, before it reaches the
//! driver; a completion frees the tag and reruns the queue), `block/blk-mq-sched.c`
//! (`__blk_mq_do_dispatch_sched`: the elevator is asked for requests while the device has
//! room), `block/blk-flush.c` (`blk_insert_flush`: a flush is not inserted into the
//! elevator but onto the flush queue, which is dispatched ahead of it; the flush request
//! still takes a driver tag), `block/blk-mq-tag.c` (tags are reused), and
//! Documentation/block/writeback_cache_control.rst (what a flush and FUA promise).
//!
//! **What a queue does with FLUSH and FUA by its device's capabilities** ([`Caps`],
//! [`flush_seq`]). Linux `block/blk-flush.c` (`blk_flush_policy`, `blk_insert_flush`, the
//! sequence `REQ_FSEQ_PREFLUSH`, `REQ_FSEQ_DATA`, `REQ_FSEQ_POSTFLUSH` that
//! `blk_flush_complete_seq` steps through) and `block/blk-core.c` (`submit_bio_noacct`:
//! "filter flush bio's early"): a queue whose device has no volatile write cache
//! (`QUEUE_FLAG_WC` clear, sysfs `queue/write_cache` = "write through") clears `REQ_PREFLUSH`
//! and `REQ_FUA` and completes an empty flush at once, without a device command; a queue with a
//! write cache but no FUA (`QUEUE_FLAG_FUA` clear, sysfs `queue/fua` = 0) clears `REQ_FUA`
//! and adds the post-flush step: the data goes out as a plain write, a FLUSH follows its
//! completion, and the request completes when that flush has. Requests of a flush sequence
//! bypass the elevator (`RQF_FLUSH_SEQ`: blk-mq's `blk_mq_insert_request` puts them on the
//! hardware queue's dispatch list). A device that has both gets FLUSH and FUA as they are.
//! The drivers set the flags: `blk_queue_write_cache(q, wc, fua)` (Linux 6.11 on:
//! `BLK_FEAT_WRITE_CACHE`, `BLK_FEAT_FUA`), e.g. drivers/nvme/host/core.c sets both from the
//! controller's Volatile Write Cache bit, drivers/block/virtio_blk.c the cache by
//! `VIRTIO_BLK_F_FLUSH` and never FUA, drivers/block/loop.c a cache without FUA, brd none.
//! vmio's requests carry no PREFLUSH flag: a preflush is a FLUSH request of its own, sent
//! (and waited for) before the write, so only FLUSH and FUA are decided here.
//!
//! ```text
//! flush_seq(caps, op, fua):                         # blk_flush_policy + blk_insert_flush
//!     FLUSH, no write cache                 → Done: complete at once, no device command
//!     FLUSH                                 → Issue (to the device)
//!     FUA write, no write cache             → Issue without FUA     (REQ_FUA cleared)
//!     FUA write, write cache, no FUA        → DataThenFlush: the write without FUA, then a
//!                                             FLUSH; complete after it (REQ_FSEQ_POSTFLUSH)
//!     anything else (FUA on a FUA device)   → Issue as it is
//! insert(now, io):    if io is a flush: flushes.push_back(io)          # blk-flush: bypass
//!                     else:             sched.insert(now, io)          # may merge
//! insert_bypass(now, io): flushes.push_back(io)     # a flush sequence's data (RQF_FLUSH_SEQ)
//! start_if_idle(now, io): nothing queued and in_flight < depth → insert(io), one dispatch step
//!                         (the same as insert then dispatch; nothing else can start)
//! dispatch(now, start):
//!     while in_flight < depth:
//!         io = flushes.pop_front() or sched.dispatch(now) or stop     # flushes first
//!         slot = in_flight.insert(io)           # last freed slot first (a driver tag)
//!         start(slot, io)                       # the engine gives it to its device
//! complete(now, slot): io = in_flight.remove(slot); sched.completed(now, io)
//!                      return io                # the engine completes io.tags()
//! wakeup_to_arm(now):  t = sched.next_wakeup_ns(), only if t > now     # CFQ idling, slices
//!                      if no wake-up armed, or t before the armed one, or the armed one
//!                      is past: armed = t, return t   # the engine arms a timer at t
//!                      else nothing                   # a timer at armed is pending
//! woke(now):           the armed wake-up is due (armed <= now): forget it; then dispatch
//! ```
//!
//! Ordering: the queue promises exactly this, no more.
//! - Flushes leave in arrival order, each before any scheduler request dispatched at the
//!   same time or later; they wait for a free slot like any request (queue depth).
//! - A flush is not ordered against requests queued in the scheduler or in flight: a write
//!   inserted before a flush may reach the device after it. As in Linux since 2.6.37 (no
//!   more barriers), the submitter waits for the completion of the writes a flush must
//!   cover before inserting the flush (the simulator's FLUSH CACHE after its writes'
//!   barrier; an NBD client's FLUSH covers only replied writes).
//! - FUA is carried on the request (`DevIo::fua`); the queue itself does not act on it. The
//!   engine asks [`flush_seq`] what the device's capabilities make of a FLUSH or a FUA
//!   write and does it: nothing for a flush a write-through device needs not, the write
//!   through [`DeviceQueue::insert_bypass`] then a FLUSH for a device without FUA (the
//!   simulator's block queue); `vmio serve` syncs the backings after the last piece.
//! - Otherwise the order is the scheduler's; the same inputs at the same times give the
//!   same dispatch order and the same slots.

use crate::request::{DevIo, Op};
use crate::sched::IoScheduler;
use crate::slab::Slab;
use crate::Ns;
use std::collections::VecDeque;

/// What a device tells the block layer about its cache (Linux's `QUEUE_FLAG_WC` and
/// `QUEUE_FLAG_FUA`, read in sysfs as `queue/write_cache` and `queue/fua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// A volatile write cache: a FLUSH must reach the device ("write back").
    pub write_cache: bool,
    /// The device makes a write with Force Unit Access durable by itself.
    pub fua: bool,
}

impl Default for Caps {
    /// A write cache and FUA: FLUSH and FUA reach the device as they are.
    fn default() -> Self {
        Caps {
            write_cache: true,
            fua: true,
        }
    }
}

/// What the block layer does with one request on a device of given [`Caps`] (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushSeq {
    /// Complete it at once: no device command (an empty flush on a write-through device).
    Done,
    /// Give it to the device, with Force Unit Access or without (`fua`).
    Issue { fua: bool },
    /// The write without FUA, ahead of the scheduler, then a FLUSH; the request completes
    /// when the flush has (blk-flush's post-flush).
    DataThenFlush,
}

/// The block layer's policy for a request `op` (with Force Unit Access if `fua`) on a device
/// of capabilities `caps`: Linux's `blk_flush_policy` and `blk_insert_flush` (module doc).
/// FUA on anything but a write is left as it is (Linux refuses it; no layer of vmio sets it).
pub fn flush_seq(caps: Caps, op: Op, fua: bool) -> FlushSeq {
    match op {
        Op::Flush if !caps.write_cache => FlushSeq::Done,
        Op::Flush => FlushSeq::Issue { fua: false },
        Op::Write if fua && !caps.write_cache => FlushSeq::Issue { fua: false },
        Op::Write if fua && !caps.fua => FlushSeq::DataThenFlush,
        _ => FlushSeq::Issue { fua },
    }
}

/// One device's request queue (see the module documentation). `S` is the scheduler type,
/// a trait object for the engines.
pub struct DeviceQueue<S: IoScheduler + ?Sized = dyn IoScheduler> {
    sched: Box<S>,
    depth: usize,
    flushes: VecDeque<DevIo>,
    in_flight: Slab<DevIo>,
    /// The scheduler wake-up a timer is armed for, if any.
    armed: Option<Ns>,
}

impl<S: IoScheduler + ?Sized> DeviceQueue<S> {
    /// A queue feeding a device that takes `depth` requests at once (0 is taken as 1: a
    /// device takes at least one request).
    pub fn new(sched: Box<S>, depth: usize) -> Self {
        Self {
            sched,
            depth: depth.max(1),
            flushes: VecDeque::new(),
            in_flight: Slab::new(),
            armed: None,
        }
    }

    /// Queue a request: a flush goes onto the flush queue, anything else to the scheduler
    /// (which may merge it into a queued one).
    pub fn insert(&mut self, now: Ns, io: DevIo) {
        if io.op == Op::Flush {
            self.flushes.push_back(io);
        } else {
            self.sched.insert(now, io);
        }
    }

    /// Merge a request into one queued in the scheduler, if the scheduler merges it; else
    /// hand it back (flushes never merge). The guest's block layer tries this before it
    /// allocates a request.
    pub fn try_merge(&mut self, io: DevIo) -> Result<(), DevIo> {
        if io.op == Op::Flush {
            return Err(io);
        }
        self.sched.try_merge(io)
    }

    /// Queue a request as [`Self::insert`] does, but never merged into a queued one (after
    /// [`Self::try_merge`]).
    pub fn insert_unmerged(&mut self, now: Ns, io: DevIo) {
        if io.op == Op::Flush {
            self.flushes.push_back(io);
        } else {
            self.sched.insert_unmerged(now, io);
        }
    }

    /// Start `io` at once if nothing is queued before it (no flush waiting, the scheduler
    /// empty, so nothing it could merge with) and the device has room: [`Self::insert`] then
    /// one step of [`Self::dispatch`], which could start nothing else. `Ok(Some(slot))` when
    /// it started, `Ok(None)` when the scheduler holds it (an idling one), `Err(io)`
    /// untouched when others are queued or the device is full.
    #[inline]
    pub fn start_if_idle(&mut self, now: Ns, io: DevIo) -> Result<Option<usize>, DevIo> {
        if self.in_flight.len() >= self.depth
            || !self.flushes.is_empty()
            || self.sched.queued() != 0
        {
            return Err(io);
        }
        let io = if io.op == Op::Flush {
            io
        } else {
            match self.sched.pass_alone(now, io) {
                Some(io) => io,
                None => return Ok(None),
            }
        };
        Ok(Some(self.in_flight.insert(io)))
    }

    /// Queue a request of a flush sequence (the data step of [`FlushSeq::DataThenFlush`]) on
    /// the flush queue: ahead of the scheduler and never merged, as blk-mq dispatches
    /// `RQF_FLUSH_SEQ` requests from the hardware queue's dispatch list.
    pub fn insert_bypass(&mut self, io: DevIo) {
        self.flushes.push_back(io);
    }

    /// Start requests while the device has room: queued flushes first, then what the
    /// scheduler hands out. `start(slot, io)` gives each to the device; `slot` names it
    /// until [`Self::complete`].
    #[inline]
    pub fn dispatch(&mut self, now: Ns, mut start: impl FnMut(usize, &DevIo)) {
        while self.in_flight.len() < self.depth {
            let io = match self.flushes.pop_front() {
                Some(f) => f,
                None => match self.sched.dispatch(now) {
                    Some(io) => io,
                    None => break,
                },
            };
            let slot = self.in_flight.insert(io);
            start(slot, self.in_flight.get(slot));
        }
    }

    /// The device completed the request in `slot`: the scheduler is told, and the request
    /// (whose [`DevIo::tags`] the engine completes) returned.
    #[inline]
    pub fn complete(&mut self, now: Ns, slot: usize) -> DevIo {
        let io = self.in_flight.remove(slot);
        self.sched.completed(now, &io);
        io
    }

    /// The time to arm a timer at for the scheduler's next wake-up, when one is wanted
    /// after `now` and no timer already armed comes first.
    #[inline]
    pub fn wakeup_to_arm(&mut self, now: Ns) -> Option<Ns> {
        let t = self.sched.next_wakeup_ns().filter(|&t| t > now)?;
        if self.armed.is_none_or(|w| t < w || w < now) {
            self.armed = Some(t);
            return Some(t);
        }
        None
    }

    /// A timer fired at `now`: a wake-up armed for `now` or before is no longer armed.
    /// Call [`Self::dispatch`] next.
    #[inline]
    pub fn woke(&mut self, now: Ns) {
        if self.armed.is_some_and(|w| w <= now) {
            self.armed = None;
        }
    }

    /// The scheduler wake-up a timer is armed for, if any.
    pub fn armed_wakeup(&self) -> Option<Ns> {
        self.armed
    }

    /// Requests queued (flushes and the scheduler's), not yet started.
    #[inline]
    pub fn queued(&self) -> usize {
        self.flushes.len() + self.sched.queued()
    }

    /// The scheduler (for inspection).
    pub fn sched(&self) -> &S {
        &self.sched
    }

    /// Requests on the device.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::mq_deadline::MqDeadline;
    use crate::sched::none::Fifo;
    use crate::MS;

    fn io(tag: u64, op: Op, off: u64) -> DevIo {
        crate::sched::io(tag, op, off, 4096)
    }

    /// Dispatch what the queue lets go now: (slot, tag) of each started request.
    fn go<S: IoScheduler + ?Sized>(q: &mut DeviceQueue<S>, now: Ns) -> Vec<(usize, u64)> {
        let mut v = Vec::new();
        q.dispatch(now, |slot, io| v.push((slot, io.tag)));
        v
    }

    fn fifo(depth: usize) -> DeviceQueue {
        DeviceQueue::new(Box::new(Fifo::default()), depth)
    }

    #[test]
    fn the_queue_depth_bounds_the_requests_in_flight_and_each_completion_frees_one() {
        let mut q = fifo(2);
        for t in 1..=5 {
            q.insert(0, io(t, Op::Read, t * 8192));
        }
        assert_eq!(go(&mut q, 0), [(0, 1), (1, 2)]);
        assert_eq!(go(&mut q, 0), []);
        assert_eq!(q.in_flight(), 2);
        assert_eq!(q.complete(1, 0).tag, 1);
        assert_eq!(go(&mut q, 1), [(0, 3)]);
        assert_eq!(q.in_flight(), 2);
    }

    #[test]
    fn a_depth_of_zero_is_taken_as_one() {
        let mut q = fifo(0);
        q.insert(0, io(1, Op::Read, 0));
        q.insert(0, io(2, Op::Read, 8192));
        assert_eq!(go(&mut q, 0), [(0, 1)]);
    }

    #[test]
    fn a_flush_bypasses_the_scheduler_but_waits_for_queue_depth() {
        let mut q = fifo(1);
        q.insert(0, io(1, Op::Write, 0));
        assert_eq!(go(&mut q, 0), [(0, 1)]);
        q.insert(0, io(2, Op::Write, 8192));
        q.insert(0, io(3, Op::Flush, 0));
        q.insert(0, io(4, Op::Flush, 0));
        // The device is full: the flushes wait, then go out in order before write 2,
        // which the scheduler had first.
        assert_eq!(go(&mut q, 0), []);
        assert_eq!(q.sched().queued(), 1);
        let mut order = Vec::new();
        for now in 1..=3 {
            q.complete(now, 0);
            order.extend(go(&mut q, now).into_iter().map(|(_, t)| t));
        }
        assert_eq!(order, [3, 4, 2]);
    }

    #[test]
    fn the_flush_policy_follows_the_devices_write_cache_and_fua() {
        let caps = |write_cache, fua| Caps { write_cache, fua };
        use FlushSeq::*;
        let cases = [
            // (write cache, FUA): FLUSH, FUA write, plain write
            ((true, true), Issue { fua: false }, Issue { fua: true }),
            ((true, false), Issue { fua: false }, DataThenFlush),
            ((false, true), Done, Issue { fua: false }),
            ((false, false), Done, Issue { fua: false }),
        ];
        for ((wc, fua), flush, fua_write) in cases {
            let c = caps(wc, fua);
            assert_eq!(flush_seq(c, Op::Flush, false), flush, "{c:?}");
            assert_eq!(flush_seq(c, Op::Write, true), fua_write, "{c:?}");
            assert_eq!(
                flush_seq(c, Op::Write, false),
                Issue { fua: false },
                "{c:?}"
            );
            assert_eq!(flush_seq(c, Op::Read, false), Issue { fua: false }, "{c:?}");
        }
        assert_eq!(Caps::default(), caps(true, true));
    }

    #[test]
    fn a_flush_sequences_write_bypasses_the_scheduler_and_is_never_merged() {
        let mut q: DeviceQueue = DeviceQueue::new(Box::new(MqDeadline::new(MS, MS, 1 << 20)), 1);
        q.insert(0, io(1, Op::Write, 0));
        q.insert_bypass(io(2, Op::Write, 8192));
        q.insert(0, io(3, Op::Write, 4096));
        // The bypassing write goes first, alone (though adjacent to write 3); the
        // scheduler's two are merged after it.
        let first = go(&mut q, 0);
        assert_eq!(first, [(0, 2)]);
        assert_eq!(q.complete(1, 0).tags().collect::<Vec<_>>(), [2]);
        let second = go(&mut q, 1);
        assert_eq!(second.len(), 1);
        assert_eq!(q.complete(2, second[0].0).len_bytes, 2 * 4096);
    }

    #[test]
    fn a_merged_request_completes_every_tag_it_carries() {
        let mut q: DeviceQueue = DeviceQueue::new(Box::new(MqDeadline::new(MS, MS, 1 << 20)), 1);
        q.insert(0, io(1, Op::Write, 0));
        q.insert(0, io(2, Op::Write, 4096));
        q.insert(0, io(3, Op::Write, 8192));
        let started = go(&mut q, 0);
        assert_eq!(started.len(), 1);
        let done = q.complete(1, started[0].0);
        assert_eq!(done.len_bytes, 3 * 4096);
        let mut tags: Vec<u64> = done.tags().collect();
        tags.sort();
        assert_eq!(tags, [1, 2, 3]);
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn the_last_freed_slot_is_reused_first() {
        let mut q = fifo(3);
        for t in 1..=5 {
            q.insert(0, io(t, Op::Read, t * 8192));
        }
        assert_eq!(go(&mut q, 0), [(0, 1), (1, 2), (2, 3)]);
        q.complete(1, 0);
        q.complete(1, 2);
        assert_eq!(go(&mut q, 1), [(2, 4), (0, 5)]);
    }

    /// A scheduler that only asks for a wake-up (set by the test).
    #[derive(Default)]
    struct Waker {
        at: Option<Ns>,
    }

    impl IoScheduler for Waker {
        fn name(&self) -> &'static str {
            "waker"
        }
        fn insert(&mut self, _: Ns, _: DevIo) {}
        fn dispatch(&mut self, _: Ns) -> Option<DevIo> {
            None
        }
        fn next_wakeup_ns(&self) -> Option<Ns> {
            self.at
        }
        fn queued(&self) -> usize {
            0
        }
    }

    #[test]
    fn a_wake_up_is_armed_once_and_again_only_when_earlier_or_after_it_fired() {
        let mut q = DeviceQueue::new(Box::new(Waker::default()), 1);
        let arm = |q: &mut DeviceQueue<Waker>, at: Option<Ns>, now: Ns| {
            q.sched.at = at;
            q.wakeup_to_arm(now)
        };
        assert_eq!(arm(&mut q, None, 0), None);
        assert_eq!(arm(&mut q, Some(10), 0), Some(10));
        assert_eq!(arm(&mut q, Some(10), 0), None); // already armed
        assert_eq!(arm(&mut q, Some(12), 1), None); // the armed timer comes first
        assert_eq!(arm(&mut q, Some(5), 1), Some(5)); // earlier: a second timer
        assert_eq!(q.armed_wakeup(), Some(5));
        assert_eq!(arm(&mut q, Some(5), 5), None); // not after now: nothing to arm
        q.woke(5);
        assert_eq!(q.armed_wakeup(), None);
        assert_eq!(arm(&mut q, Some(10), 5), Some(10)); // the timer at 10 may be stale
        q.woke(9); // not due yet
        assert_eq!(q.armed_wakeup(), Some(10));
        q.woke(11); // a late timer (serve) still clears it
        assert_eq!(q.armed_wakeup(), None);
    }

    #[test]
    fn a_wake_up_armed_in_the_past_is_replaced() {
        let mut q = DeviceQueue::new(Box::new(Waker { at: Some(10) }), 1);
        assert_eq!(q.wakeup_to_arm(0), Some(10));
        q.sched.at = Some(30);
        // The timer at 10 was never reported as fired: it is past at 20.
        assert_eq!(q.wakeup_to_arm(20), Some(30));
    }

    #[test]
    fn the_same_inputs_give_the_same_dispatch_order_and_slots() {
        let run = || {
            let mut q: DeviceQueue =
                DeviceQueue::new(Box::new(MqDeadline::new(MS, 5 * MS, 64 << 10)), 4);
            let (mut log, mut on_device) = (Vec::new(), VecDeque::new());
            for step in 0..200u64 {
                let now = step * 100_000;
                let op = if step % 3 == 0 { Op::Write } else { Op::Read };
                q.insert(now, io(step, op, (step * 7919 % 64) * 4096));
                if step % 10 == 0 {
                    q.insert(now, io(1000 + step, Op::Flush, 0));
                }
                q.dispatch(now, |slot, io| {
                    log.push((now, slot, io.tag));
                    on_device.push_back(slot);
                });
                if step % 2 == 1 {
                    let slot = on_device.pop_front().unwrap();
                    q.complete(now, slot);
                }
            }
            log
        };
        let a = run();
        assert!(a.len() > 50, "{}", a.len());
        assert_eq!(a, run());
    }
}
