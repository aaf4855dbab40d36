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
}

impl ImageLayer {
    /// The layer of `stack`'s disks (VM by VM, as `drivers`).
    pub(super) fn new(stack: &Stack, drivers: Vec<Option<Box<dyn ImageFormat>>>) -> Self {
        let engines = stack
            .vms
            .iter()
            .flat_map(|vm| &vm.disks)
            .map(|d| (Engine::new(d.aio, 1), d.queue.wakeup_ns))
            .collect();
        ImageLayer {
            drivers,
            actions: Vec::new(),
            engines,
            wakeup_ns: Vec::new(),
        }
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
        self.drivers
            .get(disk)
            .and_then(|d| d.as_ref())
            .map(|d| d.stats())
    }
}

impl Sim {
    /// The device model has taken request `r`: QEMU's block layer starts it.
    #[inline]
    pub(super) fn block_start(&mut self, now: Ns, r: usize) {
        self.throttle_or_start(now, r)
    }

    /// Request `r` goes on to the format driver (after throttling, when the disk has it).
    #[inline]
    pub(super) fn block_resume(&mut self, now: Ns, r: usize) {
        let v = self.guest.vreqs.get_ref(r);
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
        self.image_act(now, disk);
    }

    /// Sub-request `h` of a format driver completed at the host (an ImageDone event).
    pub(super) fn image_done(&mut self, now: Ns, h: usize) {
        let (disk, token) = self.guest.remove_sub(h);
        if let Some(driver) = self.image.drivers[disk].as_mut() {
            driver.on_done(now, token, &mut self.image.actions);
            self.image_act(now, disk);
        }
    }

    /// Carry out the driver's actions in order, then empty the buffer. Never reentered: a
    /// driver runs only from block_resume and image_done, which events call, and no action
    /// calls a driver synchronously (sub-request completions come back as events).
    fn image_act(&mut self, now: Ns, disk: usize) {
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
                    self.host_start(now, h);
                }
                ImageAction::WriteZeroes { offset, len, token } => {
                    let h = self.guest.insert_sub(disk, Op::Write, offset, len, token);
                    self.image.price(h, disk, Some(HostOp::WriteZeroes));
                    self.fs_zero_range(now, disk, offset, len, h);
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
                ImageAction::Complete { req } => self.host_finish(now, req as usize),
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
