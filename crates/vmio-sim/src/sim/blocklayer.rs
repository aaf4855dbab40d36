//! QEMU's block layer in the simulator: what happens to a virtual-disk request between the
//! device model taking it (SubmitDone) and the host file (the host cache, hostcache.rs):
//! the disk's image format driver ([`vmio_core::image`]), whose decisions this file carries
//! out in virtual time, in the order the driver emitted them.
//!
//! ```text
//! part_submitted/EngineStart(r) (guest.rs: the request's parts taken by the VMM, merged,
//!                        and a worker of its I/O engine) → block_start(r): throttling (throttle.rs, the disk's iotune and
//!                        its group) → block_resume(r), at once or after a ThrottleWake
//! block_resume(r)        raw disk (no driver): host_start(r), as before this layer existed
//!                        else driver.on_request(r)
//! actions:
//!   Io { op, offset, len, token, data }
//!                                 → a sub-request h of the disk's host file (a VReq that
//!                                   carries token): host_start(h)
//!   WriteZeroes { offset, len, token }
//!                                 → a sub-request h: fs_zero_range(h) (hostfs.rs: the host
//!                                   filesystem's fallocate(FALLOC_FL_ZERO_RANGE) of the
//!                                   image file; the driver emits it only for a disk on a
//!                                   filesystem volume, ImageCaps), then sub_finish(h)
//!   Flush { token }               → a sub-request h, op Flush: host_start(h) (fdatasync of
//!                                   the image file, then FLUSH CACHE)
//!   Delay { ns, token }           → a sub-request h with no I/O: ImageDone(h) at now + ns
//!                                   (the driver's zero fill of a read's buffer)
//!   Complete { req }              → host_finish(req): the VMM completes it to the guest
//! host_finish(h) of a sub-request → sub_finish(h): ImageDone(h) at now + w(h) × wakeup (an
//!   (Io, Flush; WriteZeroes: by     event: the host cache's actions are being carried out,
//!   fs_zero_range's sub_finish)     and the driver may start new requests on the host
//!                                   cache) → driver.on_done(token)
//! w(h) = the disk's engine's wake-ups for h (vdisk/aio.rs Engine::wakeups_for): Io 2 with
//!        aio = threads, 1 with native and io_uring; WriteZeroes 2; Flush 2, 1 on io_uring;
//!        0 for an Io with `data` (the guest request's own data I/O)
//! wakeup = the disk's [vm.disk.queue] wakeup
//! ```
//!
//! **Wake-ups.** QEMU's qcow2 driver loads a missing L2 slice while it holds the image's lock
//! (block/qcow2.c `qcow2_co_preadv_part` takes `s->lock` around `qcow2_get_host_offset`;
//! block/qcow2-cache.c `qcow2_cache_do_get` → `bdrv_pread` of the file child). That read
//! goes through file-posix like a data request: with `aio = threads`, util/thread-pool.c
//! `thread_pool_submit_aio` queues it and `qemu_sem_post` wakes an idle worker; the worker's
//! `preadv` returns and `event_notifier_set` wakes the AioContext's thread in `ppoll`, whose
//! `thread_pool_completion_bh` re-enters the coroutine. With native and io_uring only the
//! completion's eventfd wake-up remains (block/linux-aio.c `qemu_laio_completion_cb`,
//! block/io_uring.c). Each wake-up is a sleeping thread made to run (`[vm.disk.queue]
//! wakeup`): a latency that occupies no simulated core and no worker, paid by each
//! sub-request between the host finishing it and the driver going on. Only the driver's own
//! I/O pays it here (its metadata, copy-on-write, write-zeroes and flushes): a data
//! request's round trip through the same wake-ups sits inside each interface's own
//! per-request constants (virtio's measured VMM costs, vdisk/mod.rs; the NBD path's measured
//! `[nbd] handoff`, vmio_core::nbd), which counting them again would double; so the data
//! I/O of the guest's bytes (an Io with `data`, which a raw disk issues as the request
//! itself) pays none. A Delay (the driver's own zero fill) does no I/O and pays none.
//! Simplification: a guest flush's own fdatasync is the driver's Flush and pays its
//! wake-ups (µs against an fdatasync's ms), and the data I/O of a request split over several
//! L2 slices pays none for its further pieces (they run side by side with the first).
//!
//! **A write-zeroes past the end of the file serialises** (QEMU >= 4.2:
//! `ImageCaps::serialise_past_eof`, a qcow2 disk on a filesystem volume, the only one whose
//! driver emits WriteZeroes). block/file-posix.c `raw_do_pwrite_zeroes`: when `offset + bytes`
//! passes `bs->total_sectors` (commit 292d06b925b2, an XFS workaround "enabled for all
//! filesystems and AIO modes") the request's tracked range is extended to the largest
//! offset and made serialising (block/io.c `bdrv_make_request_serialising`): it waits for
//! every request in flight that overlaps it, and every later request that overlaps it
//! (reads and writes alike: `bdrv_wait_serialising_requests` in `bdrv_aligned_preadv` and
//! `bdrv_co_write_req_prepare`) waits for it. qcow2 appends new clusters at the end of its
//! file, so with `preallocation = off` every allocation's write-zeroes is past the end: the
//! allocations run one at a time, and the data I/O past the oldest one in flight waits.
//!
//! ```text
//! gate of a disk (its host file's sub-requests; tracked from issue to ImageDone):
//!   eof = image::initial_file_len, then max(eof, end) at each write's ImageDone
//!         (bdrv_co_write_req_finish updates total_sectors)
//!   a sub-request t = [start, end): serialising when it is a WriteZeroes with end > eof,
//!         its range then [start, +inf)
//!   conflict(a, b) = (a or b serialising) and their ranges overlap
//!   issue t: waits when it conflicts with one in flight or with one waiting before it
//!            (FIFO: QEMU tracks a waiting request too), else it starts
//!   ImageDone of t: t leaves; the waiting ones that no longer conflict start, in order
//! ```
//!
//! Simplifications: whether a write-zeroes is past the end is decided when the driver issues
//! it (QEMU decides after the request has waited for the serialising ones before it); a
//! flush is not a tracked range (as in QEMU) and waits for nothing; a raw disk has no driver
//! and no gate.
//!
//! The driver's capabilities (`ImageCaps`: the VM's `qemu_version` profile and whether the
//! disk's volume has a filesystem) are set where the drivers are built (mod.rs).
//!
//! `r` is the leading part of a host request (QEMU merges a batch's contiguous parts:
//! guest.rs), `host_len` its merged length. Simplifications: the request holds its I/O
//! engine's worker through throttling and the format driver (in QEMU only file-posix's I/O
//! takes one, the format's metadata I/O too); sub-requests pay no VMM or guest costs of
//! their own, only their wake-ups (below): QEMU issues them from the coroutine of the guest
//! request, whose costs the device model already counts (the format driver's own CPU work,
//! the metadata lookups, is not priced; nor is the engine's submit and complete work on the
//! VMM thread for a sub-request, a few µs against the wake-ups').

use super::event::Event;
use super::Sim;
use crate::vdisk::aio::{Engine, HostOp};
use std::collections::VecDeque;
use vmio_core::cache::Request;
use vmio_core::image::{ImageAction, ImageFormat, ImageStats};
use vmio_core::request::Op;
use vmio_core::stack::Stack;
use vmio_core::Ns;

/// The format drivers of the disks (indexed like `Sim::disks`; None: raw), the action
/// buffer they share, and what their sub-requests' wake-ups cost.
pub(super) struct ImageLayer {
    drivers: Vec<Option<Box<dyn ImageFormat>>>,
    actions: Vec<ImageAction>,
    /// Per disk: its I/O engine (for its wake-up counts) and `[vm.disk.queue] wakeup`.
    engines: Vec<(Engine, Ns)>,
    /// Per sub-request (by its index in the request slab): the wake-ups' latency it pays
    /// when the host is done with it.
    wakeup_ns: Vec<Ns>,
    /// Per disk: file-posix's serialising of a write-zeroes past the end of the file
    /// (module doc); None where it cannot happen.
    gates: Vec<Option<Gate>>,
}

/// A sub-request the gate tracks: `[start, end)` of the disk's host file (`end` its own,
/// also for a serialising one, whose range reaches the largest offset).
#[derive(Clone, Copy, Debug)]
struct Tracked {
    h: usize,
    /// When it was issued.
    at: Ns,
    start: u64,
    end: u64,
    write: bool,
    serialising: bool,
}

impl Tracked {
    fn conflicts(&self, o: &Tracked) -> bool {
        let end = |t: &Tracked| if t.serialising { u64::MAX } else { t.end };
        (self.serialising || o.serialising) && self.start < end(o) && o.start < end(self)
    }
}

/// What a waiting sub-request does when it starts.
#[derive(Clone, Copy, Debug)]
enum Held {
    Io,
    Zero,
}

/// One disk's serialising requests (module doc).
#[derive(Debug)]
struct Gate {
    /// The host file's size as QEMU's block layer knows it (`bs->total_sectors`).
    eof: u64,
    inflight: Vec<Tracked>,
    waiting: VecDeque<(Tracked, Held)>,
    /// Sub-requests that waited, and their total wait.
    waits: u64,
    wait_ns: u64,
}

impl Gate {
    /// Whether `t` may start now; if so it is in flight, else it waits.
    fn admit(&mut self, t: Tracked, held: Held) -> bool {
        let blocked = self.inflight.iter().any(|o| o.conflicts(&t))
            || self.waiting.iter().any(|(o, _)| o.conflicts(&t));
        if blocked {
            self.waiting.push_back((t, held));
        } else {
            self.inflight.push(t);
        }
        !blocked
    }

    /// Sub-request `h` is done (if the gate tracks it): it leaves, and the waiting ones
    /// that conflict with nothing before them start (pushed onto `ready`).
    fn release(&mut self, now: Ns, h: usize, ready: &mut Vec<(Tracked, Held)>) {
        let Some(i) = self.inflight.iter().position(|t| t.h == h) else {
            return;
        };
        let t = self.inflight.swap_remove(i);
        if t.write {
            self.eof = self.eof.max(t.end);
        }
        let mut k = 0;
        while k < self.waiting.len() {
            let (t, held) = self.waiting[k];
            let blocked = self.inflight.iter().any(|o| o.conflicts(&t))
                || self.waiting.iter().take(k).any(|(o, _)| o.conflicts(&t));
            if blocked {
                k += 1;
            } else {
                self.waiting.remove(k);
                self.inflight.push(t);
                self.waits += 1;
                self.wait_ns += now - t.at;
                ready.push((t, held));
            }
        }
    }
}

impl ImageLayer {
    /// The layer of `stack`'s disks (VM by VM, as `drivers`); `serialised`: per disk, its
    /// driver's write-zeroes past the end of the file serialise (module doc).
    pub(super) fn new(
        stack: &Stack,
        drivers: Vec<Option<Box<dyn ImageFormat>>>,
        serialised: &[bool],
    ) -> Self {
        let engines = stack
            .vms
            .iter()
            .flat_map(|vm| &vm.disks)
            .map(|d| (Engine::new(d.aio, 1), d.queue.wakeup_ns))
            .collect();
        // A gate where the driver's write-zeroes past the end of the file serialise.
        let gates = stack
            .vms
            .iter()
            .flat_map(|vm| &vm.disks)
            .zip(serialised)
            .map(|(d, &on)| {
                on.then(|| Gate {
                    eof: vmio_core::image::initial_file_len(&d.image, d.size_bytes),
                    inflight: Vec::new(),
                    waiting: VecDeque::new(),
                    waits: 0,
                    wait_ns: 0,
                })
            })
            .collect();
        ImageLayer {
            drivers,
            actions: Vec::new(),
            engines,
            wakeup_ns: Vec::new(),
            gates,
        }
    }

    /// Whether sub-request `h` of `disk` may start now (always, without a gate); else it
    /// waits in the gate (module doc). `zero`: a WriteZeroes.
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &mut self,
        now: Ns,
        disk: usize,
        h: usize,
        op: Op,
        offset: u64,
        len: u64,
        zero: bool,
    ) -> bool {
        let Some(g) = self.gates[disk].as_mut() else {
            return true;
        };
        let t = Tracked {
            h,
            at: now,
            start: offset,
            end: offset + len,
            write: op == Op::Write,
            serialising: zero && offset + len > g.eof,
        };
        g.admit(t, if zero { Held::Zero } else { Held::Io })
    }

    /// Sub-request `h` of `disk`, of kind `op`, pays its engine's wake-ups for it (None:
    /// none, the guest's own data I/O).
    fn price(&mut self, h: usize, disk: usize, op: Option<HostOp>) {
        let (engine, wakeup) = self.engines[disk];
        if self.wakeup_ns.len() <= h {
            self.wakeup_ns.resize(h + 1, 0);
        }
        self.wakeup_ns[h] = op.map_or(0, |op| Ns::from(engine.wakeups_for(op)) * wakeup);
    }

    /// The driver figures of `disk`, if it has a driver.
    pub(super) fn stats(&self, disk: usize) -> Option<ImageStats> {
        let mut s = self.drivers.get(disk).and_then(|d| d.as_ref())?.stats();
        if let Some(g) = &self.gates[disk] {
            s.serialised_waits = g.waits;
            s.serialised_wait_ns = g.wait_ns;
        }
        Some(s)
    }
}

impl Sim {
    /// The device model has taken request `r`: QEMU's block layer starts it.
    #[inline]
    pub(super) fn block_start(&mut self, now: Ns, r: usize) {
        self.guest.vreqs.get(r).bd.host = now;
        self.throttle_or_start(now, r)
    }

    /// Request `r` goes on to the format driver (after throttling, when the disk has it).
    #[inline]
    pub(super) fn block_resume(&mut self, now: Ns, r: usize) {
        let v = self.guest.vreqs.get(r);
        v.bd.thr = now;
        let disk = v.disk;
        let Some(driver) = self.image.drivers[disk].as_mut() else {
            return self.host_start(now, r);
        };
        let req = Request {
            id: r as u32,
            disk: disk as u32,
            op: v.op,
            offset: v.offset,
            len: v.host_len,
        };
        driver.on_request(now, req, &mut self.image.actions);
        self.image_act(now, disk, None);
    }

    /// Sub-request `h` of a format driver completed at the host (an ImageDone event).
    pub(super) fn image_done(&mut self, now: Ns, h: usize) {
        let b = self.guest.vreqs.get_ref(h).bd;
        let dev = Some((b.sched, b.dev)).filter(|&(q, d)| q + d > 0);
        let (disk, token) = self.guest.remove_sub(h);
        if let Some(g) = self.image.gates[disk].as_mut() {
            let mut ready = Vec::new();
            g.release(now, h, &mut ready);
            for (t, held) in ready {
                match held {
                    Held::Io => self.host_start(now, t.h),
                    Held::Zero => self.fs_zero_range(now, disk, t.start, t.end - t.start, t.h),
                }
            }
        }
        if let Some(driver) = self.image.drivers[disk].as_mut() {
            driver.on_done(now, token, &mut self.image.actions);
            self.image_act(now, disk, dev);
        }
    }

    /// Carry out the driver's actions in order, then empty the buffer. Never reentered: a
    /// driver runs only from block_resume and image_done, which events call, and no action
    /// calls a driver synchronously (sub-request completions come back as events).
    /// Carry out the driver's actions; `dev`: the scheduler's and device's time of the
    /// sub-request whose completion the driver answered (breakdown.rs), for a request it
    /// completes.
    fn image_act(&mut self, now: Ns, disk: usize, dev: Option<(Ns, Ns)>) {
        let mut i = 0;
        while let Some(&a) = self.image.actions.get(i) {
            i += 1;
            match a {
                ImageAction::Io {
                    op,
                    offset,
                    len,
                    token,
                    data,
                } => {
                    let h = self.guest.insert_sub(disk, op, offset, len, token);
                    // The guest's own data: its round trip is the interface's (module doc).
                    let kind = (!data).then_some(HostOp::ReadWrite);
                    self.image.price(h, disk, kind);
                    if self.image.admit(now, disk, h, op, offset, len, false) {
                        self.host_start(now, h);
                    }
                }
                ImageAction::WriteZeroes { offset, len, token } => {
                    let h = self.guest.insert_sub(disk, Op::Write, offset, len, token);
                    self.image.price(h, disk, Some(HostOp::WriteZeroes));
                    if self.image.admit(now, disk, h, Op::Write, offset, len, true) {
                        self.fs_zero_range(now, disk, offset, len, h);
                    }
                }
                ImageAction::Flush { token } => {
                    let h = self.guest.insert_sub(disk, Op::Flush, 0, 0, token);
                    self.image.price(h, disk, Some(HostOp::Flush));
                    self.host_start(now, h);
                }
                ImageAction::Delay { ns, token } => {
                    let h = self.guest.insert_sub(disk, Op::Read, 0, 0, token);
                    self.q.push(now + ns, Event::ImageDone(h).pack());
                }
                ImageAction::Complete { req } => {
                    if let Some((sched, dev)) = dev {
                        let b = &mut self.guest.vreqs.get(req as usize).bd;
                        (b.sched, b.dev) = (sched, dev);
                    }
                    self.host_finish(now, req as usize)
                }
            }
        }
        self.image.actions.clear();
    }

    /// The host is done with sub-request `h` (`token` is its driver's): hand it back to the
    /// driver through the event queue, after its engine's wake-ups (module doc).
    pub(super) fn sub_finish(&mut self, now: Ns, h: usize) {
        let w = self.image.wakeup_ns.get(h).copied().unwrap_or(0);
        self.q.push(now + w, Event::ImageDone(h).pack());
    }
}

#[cfg(test)]
mod gate_tests {
    use super::{Gate, Held, Tracked};
    use std::collections::VecDeque;

    fn gate(eof: u64) -> Gate {
        Gate {
            eof,
            inflight: Vec::new(),
            waiting: VecDeque::new(),
            waits: 0,
            wait_ns: 0,
        }
    }

    fn t(h: usize, start: u64, len: u64, write: bool, serialising: bool) -> Tracked {
        Tracked {
            h,
            at: 0,
            start,
            end: start + len,
            write,
            serialising,
        }
    }

    fn released(g: &mut Gate, h: usize) -> Vec<usize> {
        let mut ready = Vec::new();
        g.release(10, h, &mut ready);
        ready.iter().map(|(t, _)| t.h).collect()
    }

    #[test]
    fn requests_that_are_not_serialising_never_wait_for_each_other() {
        let mut g = gate(1 << 20);
        assert!(g.admit(t(1, 0, 4096, true, false), Held::Io));
        assert!(g.admit(t(2, 0, 4096, true, false), Held::Io));
        assert!(g.admit(t(3, 0, 4096, false, false), Held::Io));
        assert_eq!(g.inflight.len(), 3);
    }

    #[test]
    fn a_write_zeroes_past_the_end_waits_for_the_requests_in_flight_past_its_start_only() {
        let mut g = gate(1 << 20);
        assert!(g.admit(t(1, 4096, 4096, true, false), Held::Io)); // before its start
        assert!(g.admit(t(2, 2 << 20, 4096, true, false), Held::Io)); // past its start
        assert!(!g.admit(t(3, 1 << 20, 65536, true, true), Held::Zero));
        assert_eq!(released(&mut g, 1), Vec::<usize>::new());
        assert_eq!(released(&mut g, 2), vec![3]);
        // It waited from its issue (0) to the release (10).
        assert_eq!((g.waits, g.wait_ns), (1, 10));
    }

    #[test]
    fn while_it_runs_every_later_request_past_its_start_waits_and_those_before_do_not() {
        let mut g = gate(1 << 20);
        assert!(g.admit(t(1, 1 << 20, 65536, true, true), Held::Zero));
        assert!(g.admit(t(2, 0, 4096, false, false), Held::Io));
        assert!(!g.admit(t(3, 5 << 20, 4096, false, false), Held::Io)); // far past: waits
        assert!(!g.admit(t(4, (1 << 20) + 65536, 65536, true, true), Held::Zero));
        // In arrival order: the read waited for the first alone and starts when it is done;
        // the next allocation's write-zeroes waits for that read too (it is past its start).
        assert_eq!(released(&mut g, 1), vec![3]);
        assert_eq!(released(&mut g, 3), vec![4]);
    }

    #[test]
    fn a_waiting_request_keeps_its_place_behind_an_earlier_waiting_one_it_conflicts_with() {
        let mut g = gate(0);
        assert!(g.admit(t(1, 0, 4096, true, false), Held::Io));
        assert!(!g.admit(t(2, 0, 65536, true, true), Held::Zero)); // waits for 1
        assert!(!g.admit(t(3, 8192, 4096, true, false), Held::Io)); // behind 2, not 1
        assert_eq!(released(&mut g, 1), vec![2]);
        assert_eq!(released(&mut g, 2), vec![3]);
    }

    #[test]
    fn a_completed_write_moves_the_end_of_the_file_as_bs_total_sectors_does() {
        let mut g = gate(65536);
        assert!(g.admit(t(1, 65536, 65536, true, false), Held::Io));
        assert!(g.admit(t(2, 1 << 30, 512, false, false), Held::Io));
        assert!(released(&mut g, 1).is_empty() && released(&mut g, 2).is_empty());
        assert_eq!(g.eof, 131072); // a read leaves it
    }
}
