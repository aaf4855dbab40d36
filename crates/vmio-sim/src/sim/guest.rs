//! The guest side and the virtual disk: a job's request is split at the virtual disk's
//! maximum request size, each part waits for a tag of its queue, the VMM thread of the
//! queue serializes the submit and complete costs of its requests, and QEMU may merge the
//! parts back into one host request.
//!
//! ```text
//! guest_issue: parts = ⌈len / max_request⌉ (1 for a flush); queue = issuing vCPU mod
//!     num_queues (blk-mq's map; the guest kernel's own requests: vCPU 0); lane (the VMM
//!     thread) = queue mod lanes; the parts that get a tag at once are one notification:
//!     virtio-blk merges them (vdisk::qemu::merge_runs) into host requests, each led by its
//!     first part (the leader carries the merged length); one VReq per part → vdisk_submit
//! vdisk_submit: the tag set full → waitq; else
//!     SubmitDone at max(now + guest_submit, lane_busy) + vmm_submit   (part_submitted)
//!     vmm_submit = the device's work (+ the engine's for a leader: per request, and the
//!     batch's system call for the k-th host request of the notification, vdisk::aio)
//!     (the NBD path copies a write's payload on submission and a read's on completion)
//! part_submitted: the last part of a host request → engine_start: a free engine slot of the
//!     lane (thread pool worker, linux-aio event) → block_start (blocklayer.rs: throttling,
//!     the format driver, then the host cache); else wait for one
//! host_finish (host side done): free the engine slot (its first waiter starts); every part
//!     of the host request: GuestDone at max(now, lane_busy) + vmm_complete (+ the engine's
//!     for the leader), one after the other, + handoff (the NBD path's thread hand-offs)
//! guest_done: free the tag (start the first waiter); last part → jobs.rs io_done
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
//! Sources: Linux block/blk-merge.c (a bio above the queue limits is split), block/blk-mq-cpumap.c
//! (`blk_mq_map_queues`: CPU i to hardware queue i mod nr_queues), drivers/block/virtio_blk.c
//! (a tag set of queue_depth per virtqueue); QEMU hw/block/virtio-blk.c (queue size, seg_max,
//! `virtio_blk_submit_multireq`; a queue's requests are handled by the AioContext of its
//! iothread or the main loop); the costs come from [`crate::vdisk`].

use super::event::Event;
use super::Sim;
use crate::vdisk::aio::Slots;
use crate::vdisk::{qemu, InterfaceModel, VirtualDisk};
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

/// One part of a guest request on the virtual disk.
pub(super) struct VReq {
    gio: usize,
    /// A format driver's sub-request (blocklayer.rs) with the driver's token; its `gio` is
    /// meaningless.
    sub: Option<Token>,
    pub(super) disk: usize,
    pub(super) op: Op,
    pub(super) offset: u64,
    pub(super) len: u64,
    /// Its queue (the issuing vCPU's) and the VMM thread serving it.
    queue: u32,
    pub(super) lane: u32,
    /// The leader of its host request (itself when it leads).
    lead: usize,
    /// The next part of the same host request.
    next: Option<usize>,
    /// Leader: the host request's length, its parts not yet taken by the VMM, and its
    /// place in the notification's batch.
    pub(super) host_len: u64,
    pending: u32,
    batch_k: u32,
}

/// A tag set: requests in flight and those waiting for a tag.
#[derive(Default)]
struct Tags {
    inflight: u32,
    waitq: VecDeque<usize>,
}

/// A virtual disk: its interface model, its VMM threads (lanes), the tags, the engine's
/// slots per lane and the guest's statistics of it.
pub(super) struct VDiskState {
    model: InterfaceModel,
    lane_busy: Vec<Ns>,
    tags: Vec<Tags>,
    slots: Vec<Slots>,
    acct: DiskAcct,
}

impl VDiskState {
    pub(super) fn new(model: InterfaceModel) -> Self {
        let lanes = model.lanes.max(1) as usize;
        let sets = if model.tags_per_queue {
            model.num_queues.max(1) as usize
        } else {
            1
        };
        VDiskState {
            lane_busy: vec![0; lanes],
            tags: (0..sets).map(|_| Tags::default()).collect(),
            slots: (0..lanes).map(|_| Slots::default()).collect(),
            model,
            acct: DiskAcct::default(),
        }
    }

    fn tag_set(&self, queue: u32) -> usize {
        if self.model.tags_per_queue && self.tags.len() > 1 {
            queue as usize
        } else {
            0
        }
    }

    /// The VMM lanes of the disk's model.
    pub(super) fn lanes(&self) -> u32 {
        self.model.lanes.max(1)
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

    fn model_of(&self, r: usize) -> (&InterfaceModel, &VReq) {
        let v = self.vreqs.get_ref(r);
        (&self.vdisks[v.disk].model, v)
    }

    /// The CPU costs of request `r` on its virtual disk (the CPU layer's work items).
    pub(super) fn guest_submit_ns(&self, r: usize) -> Ns {
        let (m, v) = self.model_of(r);
        m.guest_submit_for(v.op, v.offset, v.len)
    }
    /// The device's work, and the engine's when `r` leads its host request.
    pub(super) fn vmm_submit_ns(&self, r: usize) -> Ns {
        let (m, v) = self.model_of(r);
        let engine = match m.engine {
            Some(e) if v.lead == r => e.submit_work_ns(v.batch_k),
            _ => 0,
        };
        m.device_submit_ns(v.op, v.len) + engine
    }
    pub(super) fn vmm_complete_ns(&self, r: usize) -> Ns {
        let (m, v) = self.model_of(r);
        let engine = match m.engine {
            Some(e) if v.lead == r => e.complete_ns,
            _ => 0,
        };
        m.device_complete_ns(v.op, v.len) + engine
    }
    pub(super) fn guest_complete_ns(&self, r: usize) -> Ns {
        let (m, v) = self.model_of(r);
        m.guest_complete_for(v.op, v.offset, v.len)
    }

    /// The part after `r` in its host request.
    pub(super) fn next_part(&self, r: usize) -> Option<usize> {
        self.vreqs.get_ref(r).next
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
        let h = self.vreqs.insert(VReq {
            gio: usize::MAX,
            sub: Some(token),
            disk,
            op,
            offset,
            len,
            queue: 0,
            lane: 0,
            lead: usize::MAX,
            next: None,
            host_len: len,
            pending: 0,
            batch_k: 0,
        });
        self.vreqs.get(h).lead = h;
        h
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
    /// `origin` issues `[offset, offset + len)` of `disk`: split at the vdisk's max request,
    /// the parts that get a tag at once merged as QEMU would (module doc).
    pub(super) fn guest_issue(
        &mut self,
        now: Ns,
        origin: Origin,
        disk: usize,
        op: Op,
        offset: u64,
        len: u64,
    ) {
        let d = &self.guest.vdisks[disk];
        let max = d.model.max_request_bytes();
        let parts = if len == 0 {
            1
        } else {
            len.div_ceil(max) as u32
        };
        let queue = (self.issuer_vcpu(origin) % d.model.num_queues.max(1) as usize) as u32;
        let lane = queue % d.lanes();
        // The parts that get a tag now are one notification; the others go one by one.
        let t = &d.tags[d.tag_set(queue)];
        let free = d
            .model
            .queue_depth()
            .saturating_sub(t.inflight)
            .saturating_sub(t.waitq.len() as u32)
            .min(parts);
        let mergeable = d.model.merge && matches!(op, Op::Read | Op::Write) && free > 1;
        // Runs of parts per host request; the first `batched` host requests are the
        // notification's batch (their place in it prices the engine's system calls).
        let (many, batched): (Vec<usize>, usize) = if parts == 1 {
            (Vec::new(), free as usize)
        } else {
            let mut runs = if mergeable {
                let lens: Vec<u64> = (0..free as u64).map(|i| (len - i * max).min(max)).collect();
                qemu::merge_runs(&lens)
            } else {
                vec![1; free as usize]
            };
            let batched = runs.len();
            runs.resize(batched + (parts - free) as usize, 1);
            (runs, batched)
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
        let runs: &[usize] = if parts == 1 { &[1] } else { &many };
        for (k, &run) in runs.iter().enumerate() {
            let mut lead = usize::MAX;
            let mut prev: Option<usize> = None;
            let mut host_len = 0;
            for _ in 0..run {
                let n = (end - off).min(max);
                let r = self.guest.vreqs.insert(VReq {
                    gio: g,
                    sub: None,
                    disk,
                    op,
                    offset: off,
                    len: n,
                    queue,
                    lane,
                    lead,
                    next: None,
                    host_len: n,
                    pending: run as u32,
                    batch_k: if k < batched { k as u32 } else { 0 },
                });
                match prev {
                    None => {
                        lead = r;
                        self.guest.vreqs.get(r).lead = r;
                    }
                    Some(p) => self.guest.vreqs.get(p).next = Some(r),
                }
                prev = Some(r);
                off += n;
                host_len += n;
                self.guest.vreqs.get(lead).host_len = host_len;
                // Nothing completes synchronously: the host request starts from an event,
                // after every part of it is linked.
                self.guest.vdisks[disk].acct.issue(now);
                self.vdisk_submit(now, r);
            }
        }
    }

    fn vdisk_submit(&mut self, now: Ns, r: usize) {
        let v = self.guest.vreqs.get_ref(r);
        let (disk, queue, lane) = (v.disk, v.queue, v.lane as usize);
        let d = &mut self.guest.vdisks[disk];
        let set = d.tag_set(queue);
        if d.tags[set].inflight >= d.model.queue_depth() {
            d.tags[set].waitq.push_back(r);
            return;
        }
        d.tags[set].inflight += 1;
        if self.cpu.priced {
            return self.cpu_guest_submit(now, r);
        }
        let t = (now + self.guest.guest_submit_ns(r)).max(self.guest.vdisks[disk].lane_busy[lane])
            + self.guest.vmm_submit_ns(r);
        self.guest.vdisks[disk].lane_busy[lane] = t;
        self.q.push(t, Event::SubmitDone(r).pack());
    }

    /// The VMM took part `r`: the last part of a host request starts it on the engine.
    pub(super) fn part_submitted(&mut self, now: Ns, r: usize) {
        let lead = self.guest.vreqs.get_ref(r).lead;
        let l = self.guest.vreqs.get(lead);
        l.pending -= 1;
        if l.pending > 0 {
            return;
        }
        let (disk, lane) = (l.disk, l.lane as usize);
        let d = &mut self.guest.vdisks[disk];
        let cap = d.model.engine.map_or(u32::MAX, |e| e.max_inflight);
        if d.slots[lane].acquire(lead, cap) {
            self.block_start(now, lead);
        }
    }

    /// The host side is done with host request `r`: its engine slot goes to the first
    /// waiter, and the VMM completes its parts to the guest.
    pub(super) fn host_finish(&mut self, now: Ns, r: usize) {
        if self.guest.vreqs.get_ref(r).sub.is_some() {
            return self.sub_finish(now, r);
        }
        let v = self.guest.vreqs.get_ref(r);
        let (disk, lane) = (v.disk, v.lane as usize);
        // The waiter starts by an event: host_finish runs inside the host cache's actions,
        // which must not call the policy again.
        if let Some(next) = self.guest.vdisks[disk].slots[lane].release() {
            self.q.push(now, Event::EngineStart(next).pack());
        }
        if self.cpu.priced {
            return self.cpu_host_finish(now, r);
        }
        let mut t = now.max(self.guest.vdisks[disk].lane_busy[lane]);
        let mut at = Some(r);
        while let Some(x) = at {
            at = self.guest.vreqs.get_ref(x).next;
            t += self.guest.vmm_complete_ns(x);
            self.q
                .push(t + self.guest.handoff_ns(x), Event::GuestDone(x).pack());
        }
        self.guest.vdisks[disk].lane_busy[lane] = t;
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
        let set = d.tag_set(v.queue);
        d.tags[set].inflight -= 1;
        if let Some(next) = d.tags[set].waitq.pop_front() {
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
                let slat = self.guest.vdisks[v.disk]
                    .model
                    .guest_submit_for(v.op, v.offset, v.len);
                self.io_done(now, j, g.op, g.len, g.issue_ns, slat);
            }
            Origin::Guest { vm, token } => {
                self.work.count_vm_bytes(now, vm as usize, g.len);
                self.guest_os_done(now, vm as usize, token)
            }
        }
    }
}
