//! The guest side and the virtual disk: a job's request is split at the virtual disk's
//! maximum request size, each part waits for a slot of the disk's queue, and the VMM thread
//! serializes the submit and complete costs of all the disk's requests.
//!
//! ```text
//! guest_issue: parts = ⌈len / max_request⌉ (1 for a flush); one VReq per part → vdisk_submit
//! vdisk_submit: inflight = queue_depth → waitq; else
//!     SubmitDone at max(now + guest_submit, vmm_busy) + vmm_submit(len)   (host_start)
//!     (vmm_submit and vmm_complete take the op: the NBD path copies a write's payload on
//!     submission and a read's on completion)
//! host_finish (host side done): GuestDone at max(now, vmm_busy) + vmm_complete(len) + handoff
//!     (handoff: the interface's latency that occupies nothing, the NBD path's thread hand-offs)
//! guest_done: free the queue slot (start the first waiter); last part → jobs.rs io_done
//! ```
//!
//! Each virtual disk keeps the statistics the guest kernel keeps of it and fio's `disk_util`
//! prints ([`DiskAcct`]: Linux block/genhd.c `diskstats_show`, block/blk-core.c
//! `update_io_ticks` and `blk_account_io_done`, fio diskutil.c): a part is a request of the
//! guest's block layer from its issue to its completion.
//!
//! ```text
//! issue (each part):   in_flight += 1 (0 → 1: a busy period starts)
//! done (each part):    in_flight -= 1 (1 → 0: io_ticks += the busy period)
//!                      read/write: ios += 1, ticks += done - issue; in_queue += done - issue
//! end of the run:      a busy period still open is counted up to the end
//! ```
//!
//! Sources: Linux block/blk-merge.c (a bio above the queue limits is split), QEMU
//! hw/block/virtio-blk.c (queue size, seg_max; one VMM thread per disk); the costs come from
//! [`crate::vdisk`].

use super::event::Event;
use super::Sim;
use crate::vdisk::{InterfaceModel, VirtualDisk};
use std::collections::VecDeque;
use vmio_core::cache::Token;
use vmio_core::request::Op;
use vmio_core::slab::Slab;
use vmio_core::Ns;

/// Who issued a virtual-disk request: a job directly (direct I/O on a raw disk), or the
/// VM's guest kernel (guestos.rs) with the token its policy wants back.
#[derive(Clone, Copy, Debug)]
pub(super) enum Origin {
    Job(usize),
    Guest { vm: u32, token: Token },
}

/// A request as the guest issued it, until all its parts complete.
pub(super) struct GIo {
    pub(super) origin: Origin,
    pub(super) op: Op,
    pub(super) len: u64,
    pub(super) issue_ns: Ns,
    parts: u32,
}

/// One part of a guest request on the virtual disk, as the host sees it.
pub(super) struct VReq {
    gio: usize,
    /// A format driver's sub-request (blocklayer.rs) with the driver's token; its `gio` is
    /// meaningless.
    sub: Option<Token>,
    pub(super) disk: usize,
    pub(super) op: Op,
    pub(super) offset: u64,
    pub(super) len: u64,
}

/// A virtual disk: its interface model, the VMM thread, the queue slots and the guest's
/// statistics of it.
pub(super) struct VDiskState {
    model: InterfaceModel,
    vmm_busy: Ns,
    inflight: u32,
    waitq: VecDeque<usize>,
    acct: DiskAcct,
}

impl VDiskState {
    pub(super) fn new(model: InterfaceModel) -> Self {
        VDiskState {
            model,
            vmm_busy: 0,
            inflight: 0,
            waitq: VecDeque::new(),
            acct: DiskAcct::default(),
        }
    }
}

/// The guest kernel's statistics of a disk (module doc), in ns; fio prints the times in ms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskAcct {
    pub read_ios: u64,
    pub write_ios: u64,
    pub read_ticks_ns: Ns,
    pub write_ticks_ns: Ns,
    /// Every request's time from issue to completion, added up (Linux's `time_in_queue`).
    pub in_queue_ns: Ns,
    /// Time with at least one request in flight (Linux's `io_ticks`).
    pub io_ticks_ns: Ns,
    in_flight: u32,
    busy_since: Ns,
}

impl DiskAcct {
    fn issue(&mut self, now: Ns) {
        if self.in_flight == 0 {
            self.busy_since = now;
        }
        self.in_flight += 1;
    }

    fn done(&mut self, now: Ns, op: Op, issued: Ns) {
        self.in_flight -= 1;
        if self.in_flight == 0 {
            self.io_ticks_ns += now - self.busy_since;
        }
        let took = now - issued;
        self.in_queue_ns += took;
        match op {
            Op::Read => {
                self.read_ios += 1;
                self.read_ticks_ns += took;
            }
            Op::Write => {
                self.write_ios += 1;
                self.write_ticks_ns += took;
            }
            Op::Flush | Op::Trim => {}
        }
    }

    /// The statistics at `now`, a busy period still open counted up to it.
    pub(super) fn at(&self, now: Ns) -> DiskAcct {
        let mut a = self.clone();
        if a.in_flight > 0 {
            a.io_ticks_ns += now - a.busy_since;
        }
        a
    }
}

/// The guest side's state: requests in flight and the virtual disks (indexed like
/// `Sim::disks`).
pub(super) struct GuestState {
    gios: Slab<GIo>,
    pub(super) vreqs: Slab<VReq>,
    vdisks: Vec<VDiskState>,
}

impl GuestState {
    pub(super) fn new(vdisks: Vec<VDiskState>) -> Self {
        GuestState {
            gios: Slab::new(),
            vreqs: Slab::new(),
            vdisks,
        }
    }

    /// Who issued request `r`, and its disk.
    pub(super) fn origin_of(&self, r: usize) -> (Origin, usize) {
        let v = self.vreqs.get_ref(r);
        (self.gios.get_ref(v.gio).origin, v.disk)
    }

    fn model_of(&self, r: usize) -> (&InterfaceModel, Op, u64) {
        let v = self.vreqs.get_ref(r);
        (&self.vdisks[v.disk].model, v.op, v.len)
    }

    /// The CPU costs of request `r` on its virtual disk (the CPU layer's work items).
    pub(super) fn guest_submit_ns(&self, r: usize) -> Ns {
        self.model_of(r).0.guest_submit_ns()
    }
    pub(super) fn vmm_submit_ns(&self, r: usize) -> Ns {
        let (m, op, len) = self.model_of(r);
        m.vmm_submit_ns(op, len)
    }
    pub(super) fn vmm_complete_ns(&self, r: usize) -> Ns {
        let (m, op, len) = self.model_of(r);
        m.vmm_complete_ns(op, len)
    }
    pub(super) fn guest_complete_ns(&self, r: usize) -> Ns {
        self.model_of(r).0.guest_complete_ns()
    }
    fn handoff_ns(&self, r: usize) -> Ns {
        self.model_of(r).0.handoff_ns()
    }

    /// A format driver's request of `[offset, offset + len)` of `disk`'s host file: a request
    /// the host cache serves like a guest's, whose completion goes back to the driver.
    pub(super) fn insert_sub(
        &mut self,
        disk: usize,
        op: Op,
        offset: u64,
        len: u64,
        token: Token,
    ) -> usize {
        self.vreqs.insert(VReq {
            gio: usize::MAX,
            sub: Some(token),
            disk,
            op,
            offset,
            len,
        })
    }

    /// Free sub-request `h`: its disk and its driver's token.
    pub(super) fn remove_sub(&mut self, h: usize) -> (usize, Token) {
        let v = self.vreqs.remove(h);
        (v.disk, v.sub.expect("a format driver's sub-request"))
    }

    /// Each virtual disk's statistics at `now`, indexed like `Sim::disks`.
    pub(super) fn disk_stats(&self, now: Ns) -> impl Iterator<Item = DiskAcct> + '_ {
        self.vdisks.iter().map(move |d| d.acct.at(now))
    }
}

impl Sim {
    /// `origin` issues `[offset, offset + len)` of `disk`: split at the vdisk's max request.
    pub(super) fn guest_issue(
        &mut self,
        now: Ns,
        origin: Origin,
        disk: usize,
        op: Op,
        offset: u64,
        len: u64,
    ) {
        let max = self.guest.vdisks[disk].model.max_request_bytes();
        let parts = if len == 0 {
            1
        } else {
            len.div_ceil(max) as u32
        };
        let g = self.guest.gios.insert(GIo {
            origin,
            op,
            len,
            issue_ns: now,
            parts,
        });
        let mut off = offset;
        let end = offset + len;
        for _ in 0..parts {
            let n = (end - off).min(max);
            let r = self.guest.vreqs.insert(VReq {
                gio: g,
                sub: None,
                disk,
                op,
                offset: off,
                len: n,
            });
            off += n;
            self.guest.vdisks[disk].acct.issue(now);
            self.vdisk_submit(now, r);
        }
    }

    fn vdisk_submit(&mut self, now: Ns, r: usize) {
        let disk = self.guest.vreqs.get(r).disk;
        let d = &mut self.guest.vdisks[disk];
        if d.inflight >= d.model.queue_depth() {
            d.waitq.push_back(r);
            return;
        }
        d.inflight += 1;
        if self.cpu.priced {
            return self.cpu_guest_submit(now, r);
        }
        let t = (now + d.model.guest_submit_ns()).max(d.vmm_busy) + self.guest.vmm_submit_ns(r);
        self.guest.vdisks[disk].vmm_busy = t;
        self.q.push(t, Event::SubmitDone(r).pack());
    }

    /// The host side is done with a request: the VMM completes it to the guest.
    pub(super) fn host_finish(&mut self, now: Ns, r: usize) {
        if self.guest.vreqs.get_ref(r).sub.is_some() {
            return self.sub_finish(now, r);
        }
        if self.cpu.priced {
            return self.cpu_host_finish(now, r);
        }
        let disk = self.guest.vreqs.get(r).disk;
        let t = now.max(self.guest.vdisks[disk].vmm_busy) + self.guest.vmm_complete_ns(r);
        self.guest.vdisks[disk].vmm_busy = t;
        self.q
            .push(t + self.guest.handoff_ns(r), Event::GuestDone(r).pack());
    }

    /// The guest has request `r`'s completion at `now` (cfs): done now, or after the
    /// interface's hand-offs.
    pub(super) fn guest_complete(&mut self, now: Ns, r: usize) {
        match self.guest.handoff_ns(r) {
            0 => self.guest_done(now, r),
            h => self.q.push(now + h, Event::GuestDone(r).pack()),
        }
    }

    pub(super) fn guest_done(&mut self, now: Ns, r: usize) {
        let v = self.guest.vreqs.remove(r);
        let issued = self.guest.gios.get_ref(v.gio).issue_ns;
        let d = &mut self.guest.vdisks[v.disk];
        d.acct.done(now, v.op, issued);
        d.inflight -= 1;
        if let Some(next) = d.waitq.pop_front() {
            self.vdisk_submit(now, next);
        }
        let g = self.guest.gios.get(v.gio);
        g.parts -= 1;
        if g.parts > 0 {
            return;
        }
        let g = self.guest.gios.remove(v.gio);
        match g.origin {
            Origin::Job(j) => {
                let slat = self.guest.vdisks[v.disk].model.guest_submit_ns();
                self.io_done(now, j, g.op, g.len, g.issue_ns, slat);
            }
            Origin::Guest { vm, token } => {
                self.work.count_vm_bytes(now, vm as usize, g.len);
                self.guest_os_done(now, vm as usize, token)
            }
        }
    }
}
