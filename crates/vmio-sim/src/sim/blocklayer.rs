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
//!   Io { op, offset, len, token } → a sub-request h of the disk's host file (a VReq that
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
//! host_finish(h) of a sub-request → ImageDone(h) now (an event: the host cache's actions
//!                                   are being carried out, and the driver may start new
//!                                   requests on the host cache) → driver.on_done(token)
//! ```
//!
//! The driver's capabilities (`ImageCaps`: the VM's `qemu_version` profile and whether the
//! disk's volume has a filesystem) are set where the drivers are built (mod.rs).
//!
//! `r` is the leading part of a host request (QEMU merges a batch's contiguous parts:
//! guest.rs), `host_len` its merged length. Simplifications: the request holds its I/O
//! engine's worker through throttling and the format driver (in QEMU only file-posix's I/O
//! takes one, the format's metadata I/O too); sub-requests pay no VMM or guest costs of
//! their own: QEMU issues them from the coroutine of the guest request, whose costs the
//! device model already counts (the format driver's own CPU work, the metadata lookups, is
//! not priced).

use super::event::Event;
use super::Sim;
use vmio_core::cache::Request;
use vmio_core::image::{ImageAction, ImageFormat, ImageStats};
use vmio_core::request::Op;
use vmio_core::Ns;

/// The format drivers of the disks (indexed like `Sim::disks`; None: raw) and the action
/// buffer they share.
pub(super) struct ImageLayer {
    drivers: Vec<Option<Box<dyn ImageFormat>>>,
    actions: Vec<ImageAction>,
}

impl ImageLayer {
    pub(super) fn new(drivers: Vec<Option<Box<dyn ImageFormat>>>) -> Self {
        ImageLayer {
            drivers,
            actions: Vec::new(),
        }
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
                } => {
                    let h = self.guest.insert_sub(disk, op, offset, len, token);
                    self.host_start(now, h);
                }
                ImageAction::WriteZeroes { offset, len, token } => {
                    let h = self.guest.insert_sub(disk, Op::Write, offset, len, token);
                    self.fs_zero_range(now, disk, offset, len, h);
                }
                ImageAction::Flush { token } => {
                    let h = self.guest.insert_sub(disk, Op::Flush, 0, 0, token);
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
    /// driver at `now`, through the event queue.
    pub(super) fn sub_finish(&mut self, now: Ns, h: usize) {
        self.q.push(now, Event::ImageDone(h).pack());
    }
}
