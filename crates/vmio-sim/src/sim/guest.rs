//! The guest side and the virtual disk: a job's request is split at the virtual disk's
//! maximum request size, each part waits for a tag of its queue, the VMM thread of the
//! queue serializes the submit and complete costs of its requests, and QEMU may merge the
//! parts back into one host request.
//!
//! ```text
//! guest_issue: bios = ⌈len / max⌉ parts (1 for a flush), max = the guest queue's largest
//!     request (vmio_core::guest::blk::max_request_bytes: max_sectors_kb and the device's
//!     segments, vdisk::qemu); queue = issuing vCPU mod num_queues (blk-mq's map; the guest
//!     kernel's own requests: vCPU 0); lane (the VMM thread) = queue mod lanes
//!     under a plug (one call of the guest policy, guestos.rs): each bio → Plug::add (merged
//!         into the plug's newest request, or a new request; a full plug is flushed first);
//!         a FLUSH flushes the disk's plug first; the end of the call flushes every plug
//!     else: each bio → queue_insert, then queue_run
//! queue_insert (a hardware queue: a DeviceQueue with the guest's scheduler, depth = the
//!     driver tags): nr_requests allocated → the submitter waits (admit FIFO, unmergeable);
//!     else DeviceQueue::insert (mq-deadline may merge it into a queued request)
//! queue_run: DeviceQueue::dispatch while tags are free; the requests started together are
//!     one notification: QEMU's multireq (vdisk::qemu::multireq: runs cut at a change of
//!     direction, a flush or 32 requests, sorted by offset, contiguous ones merged) makes
//!     host requests, each led by its first part (the leader carries the merged length);
//!     one VReq per guest request → vdisk_start
//! vdisk_start: SubmitDone at max(now + guest_submit, lane_busy) + vmm_submit   (part_submitted)
//!     vmm_submit = the device's work (+ the engine's for a leader: per request, and the
//!     batch's system call for the k-th host request of the notification, vdisk::aio)
//!     (the NBD path copies a write's payload on submission and a read's on completion)
//! part_submitted: the last part of a host request → engine_start: a free engine slot of the
//!     lane (thread pool worker, linux-aio event) → block_start (blocklayer.rs: throttling,
//!     the format driver, then the host cache); else wait for one
//! host_finish (host side done): free the engine slot (its first waiter starts); every part
//!     of the host request: GuestDone at max(now, lane_busy) + vmm_complete (+ the engine's
//!     for the leader), one after the other, + handoff (the NBD path's thread hand-offs)
//! guest_done: DeviceQueue::complete frees the tag; a waiting submitter's request is
//!     admitted; queue_run; every bio of the request → its guest request's parts -= 1; the
//!     last part → jobs.rs io_done or the guest policy's on_done
//! ```
//!
//! The guest queue is the guest's block layer (vmio_core::guest::blk, `[vm.disk.guest_queue]`)
//! on VM disks (virtio-blk, virtio-scsi, ide); an NBD client's disk and a native host's
//! (`interface = "host"`, whose block layer is the host's `[scheduler]` below) get a queue
//! that only bounds the depth (`none`, no merges, no plug).
//!
//! Each virtual disk keeps the statistics the guest kernel keeps of it and fio's `disk_util`
//! prints ([`DiskAcct`]: Linux block/genhd.c `diskstats_show`, block/blk-core.c
//! `update_io_ticks` and `blk_account_io_done`, fio diskutil.c): a part is a request of the
//! guest's block layer (after its merges) from its first bio's issue to its completion.
//!
//! ```text
//! issue (each request): in_flight += 1 (0 → 1: a busy period starts)
//! a bio merged into a request: merges[dir] += 1 (diskstats' rd_merges / wr_merges)
//! dispatch to the virtual disk: request_sizes[len] += 1; each host request QEMU makes of a
//!                      notification: host_request_sizes[len] += 1
//! done (each request): in_flight -= 1 (1 → 0: io_ticks += the busy period)
//!                      read/write: ios += 1, ticks += done - issue; in_queue += done - issue
//! end of the run:      a busy period still open is counted up to the end
//! ```
//!
//! Sources: Linux block/blk-merge.c (a bio above the queue limits is split), block/blk-mq-cpumap.c
//! (`blk_mq_map_queues`: CPU i to hardware queue i mod nr_queues), drivers/block/virtio_blk.c
//! (a tag set of queue_depth per virtqueue); QEMU hw/block/virtio-blk.c (queue size, seg_max,
//! `virtio_blk_submit_multireq`; a queue's requests are handled by the AioContext of its
//! iothread or the main loop); the costs come from [`crate::vdisk`].

use super::breakdown::{Parts, Spent, Stamps};
use super::event::Event;
use super::Sim;
use crate::vdisk::aio::Slots;
use crate::vdisk::{qemu, InterfaceModel, VirtualDisk};
use std::collections::BTreeMap;
use vmio_core::cache::Token;
use vmio_core::guest::blk::{GuestQueue, GuestQueueSpec, HwQueue, Inserted, Plug};
use vmio_core::request::{DevIo, Op};
use vmio_core::slab::Slab;
use vmio_core::stack::Interface;
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

/// One request of the guest's block layer on the virtual disk (one or more merged bios).
pub(super) struct VReq {
    /// The guest request of its first bio.
    gio: usize,
    /// Its driver tag in its hardware queue's [`DeviceQueue`].
    slot: usize,
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
    /// When its share of the NBD path's CPU ends (vmio_core::nbd, the CPU bound; 0 without).
    cpu_done: Ns,
    /// Its times at the layers' boundaries (breakdown.rs).
    pub(super) bd: Stamps,
}

/// What `guest_done` needs of a completed request.
struct Done {
    disk: usize,
    queue: u32,
    slot: usize,
    op: Op,
    offset: u64,
    len: u64,
    bd: Stamps,
}

/// A virtual disk: its interface model, its VMM threads (lanes), the tags, the engine's
/// slots per lane and the guest's statistics of it.
pub(super) struct VDiskState {
    model: InterfaceModel,
    lane_busy: Vec<Ns>,
    queues: Vec<HwQueue>,
    gq: GuestQueue,
    /// The plug over this disk (guestos.rs holds plugs around a guest policy call).
    plug: Plug,
    slots: Vec<Slots>,
    acct: DiskAcct,
}

impl VDiskState {
    /// The disk of `model` with the guest's block layer of `spec` (VM interfaces only; see
    /// the module doc). The error is the table's field and message.
    pub(super) fn new(
        model: InterfaceModel,
        spec: Option<&GuestQueueSpec>,
        field: &str,
    ) -> Result<Self, String> {
        let lanes = model.lanes.max(1) as usize;
        let sets = if model.tags_per_queue {
            model.num_queues.max(1) as usize
        } else {
            1
        };
        let vm_disk = matches!(
            model.interface,
            Interface::VirtioBlk | Interface::VirtioScsi | Interface::Ide
        );
        let passthrough = GuestQueueSpec {
            scheduler: Some("none"),
            nomerges: 2,
            ..Default::default()
        };
        let (spec, max) = if vm_disk {
            (spec.cloned().unwrap_or_default(), model.max_request_bytes())
        } else {
            // No guest: requests split at the interface's largest, never merged here.
            let mut p = passthrough;
            p.max_sectors_kb = model.max_request_bytes().div_ceil(1024);
            (p, model.max_request_bytes())
        };
        let mut gq = spec
            .resolve(field, model.num_queues.max(1), model.queue_depth(), max)
            .map_err(|e| e.to_string())?;
        if !vm_disk {
            gq.max_bytes = max;
        }
        let queues = (0..sets).map(|_| HwQueue::new(&gq)).collect();
        Ok(VDiskState {
            lane_busy: vec![0; lanes],
            queues,
            gq,
            plug: Plug::default(),
            slots: (0..lanes).map(|_| Slots::default()).collect(),
            model,
            acct: DiskAcct::default(),
        })
    }

    fn tag_set(&self, queue: u32) -> usize {
        if self.model.tags_per_queue && self.queues.len() > 1 {
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
    /// Bios merged into an existing request, [read, write] (`rd_merges`, `wr_merges`).
    pub merges: [u64; 2],
    /// Requests the guest's block layer dispatched to the virtual disk, by size in bytes
    /// (reads and writes; filled by [`DiskAcct::at`]).
    pub request_sizes: BTreeMap<u64, u64>,
    /// The host requests the VMM made of them (QEMU's multireq), by size in bytes: what the
    /// VMM's backend (an NBD server behind QEMU) receives (filled by [`DiskAcct::at`]).
    pub host_request_sizes: BTreeMap<u64, u64>,
    requests: SizeCounts,
    host_requests: SizeCounts,
    in_flight: u32,
    busy_since: Ns,
}

/// Counts by size: whole pages up to 4 MiB in a vector indexed by pages, sized once (no
/// search and no growth on the per-request path), other sizes in a map.
#[derive(Clone, Debug, PartialEq, Eq)]
struct SizeCounts {
    pages: Vec<u64>,
    other: BTreeMap<u64, u64>,
}

impl Default for SizeCounts {
    fn default() -> Self {
        SizeCounts {
            pages: vec![0; Self::MAX_PAGES as usize + 1],
            other: BTreeMap::new(),
        }
    }
}

impl SizeCounts {
    const PAGE: u64 = 4096;
    const MAX_PAGES: u64 = 1024;

    /// The index of `len` in `pages`, if it is whole pages up to `MAX_PAGES`.
    #[inline]
    fn page_index(len: u64) -> Option<usize> {
        let p = len / Self::PAGE;
        (len.is_multiple_of(Self::PAGE) && p <= Self::MAX_PAGES).then_some(p as usize)
    }

    #[inline]
    fn add(&mut self, len: u64) {
        match Self::page_index(len) {
            Some(p) => self.pages[p] += 1,
            None => *self.other.entry(len).or_insert(0) += 1,
        }
    }

    fn to_map(&self) -> BTreeMap<u64, u64> {
        let mut m = self.other.clone();
        for (p, &n) in self.pages.iter().enumerate() {
            if n > 0 {
                m.insert(p as u64 * Self::PAGE, n);
            }
        }
        m
    }
}

impl DiskAcct {
    fn merged(&mut self, op: Op) {
        match op {
            Op::Read => self.merges[0] += 1,
            Op::Write => self.merges[1] += 1,
            Op::Flush | Op::Trim => {}
        }
    }

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
        a.request_sizes = self.requests.to_map();
        a.host_request_sizes = self.host_requests.to_map();
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
    /// A plug is held (guestos.rs, around a guest policy's actions).
    plugging: bool,
    /// Disks whose plug holds requests.
    plugged: Vec<usize>,
    /// Buffers: requests a plug let go, requests started by one queue run, the host
    /// requests planned over them and their VReqs.
    flushed: Vec<DevIo>,
    started: Vec<(usize, Rq)>,
    multireq: qemu::Multireq,
    ids: Vec<usize>,
    /// The NBD path's cores: when each is free (vmio_core::nbd, the CPU bound; empty without).
    path_cpu: Vec<Ns>,
}

/// What the virtual disk needs of a started request (its [`DevIo`] stays in the queue's
/// slot until it completes): copied, not cloned.
#[derive(Clone, Copy)]
struct Rq {
    /// The guest request of its first bio.
    tag: u64,
    op: Op,
    offset: u64,
    len: u64,
    /// Its hardware queue.
    owner: u32,
}

impl Rq {
    #[inline]
    fn of(io: &DevIo) -> Self {
        Rq {
            tag: io.tag,
            op: io.op,
            offset: io.offset_bytes,
            len: io.len_bytes,
            owner: io.owner,
        }
    }
}

/// The device's submit work of request `r` (`v`, on disk `d`), and the engine's when `r`
/// leads its host request. `r` is alone when it is the disk's only request in flight (an NBD
/// path's depth-1 copy rate, vmio_core::nbd).
#[inline]
fn vmm_submit(d: &VDiskState, v: &VReq, r: usize) -> Ns {
    let m = &d.model;
    let engine = match m.engine {
        Some(e) if v.lead == r => e.submit_work_ns(v.batch_k),
        _ => 0,
    };
    m.device_submit_ns(v.op, v.len, d.acct.in_flight == 1) + engine
}

/// The device's completion work of request `r`, and the engine's when `r` leads.
#[inline]
fn vmm_complete(d: &VDiskState, v: &VReq, r: usize) -> Ns {
    let m = &d.model;
    let engine = match m.engine {
        Some(e) if v.lead == r => e.complete_ns,
        _ => 0,
    };
    m.device_complete_ns(v.op, v.len, d.acct.in_flight == 1) + engine
}

impl GuestState {
    pub(super) fn new(vdisks: Vec<VDiskState>) -> Self {
        // One pool for the host: every NBD disk shares the one `[nbd]` table's cores.
        let cores = vdisks
            .iter()
            .find_map(|d| d.model.nbd.as_ref().and_then(|n| n.cpu_cores()))
            .unwrap_or(0);
        GuestState {
            path_cpu: vec![0; cores as usize],
            gios: Slab::new(),
            vreqs: Slab::new(),
            vdisks,
            plugging: false,
            plugged: Vec::new(),
            flushed: Vec::new(),
            started: Vec::new(),
            multireq: qemu::Multireq::default(),
            ids: Vec::new(),
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
        let v = self.vreqs.get_ref(r);
        vmm_submit(&self.vdisks[v.disk], v, r)
    }
    pub(super) fn vmm_complete_ns(&self, r: usize) -> Ns {
        let v = self.vreqs.get_ref(r);
        vmm_complete(&self.vdisks[v.disk], v, r)
    }
    pub(super) fn guest_complete_ns(&self, r: usize) -> Ns {
        let (m, v) = self.model_of(r);
        m.guest_complete_for(v.op, v.offset, v.len)
    }

    /// The NBD client's CPU per request of `r`'s disk (`[nbd] client_cpu`; 0 for others).
    pub(super) fn client_cpu_ns(&self, r: usize) -> Ns {
        self.model_of(r)
            .0
            .nbd
            .as_ref()
            .map_or(0, |n| n.client_cpu_ns)
    }
    /// The NBD server's main-loop CPU per request and per wake-up of `r`'s disk (`[nbd]
    /// server_cpu`, `server_wake`); None for other interfaces.
    pub(super) fn server_cpu_ns(&self, r: usize) -> Option<(Ns, Ns)> {
        let n = self.model_of(r).0.nbd.as_ref()?;
        Some((n.server_cpu_ns, n.server_wake_ns))
    }
    /// A pool worker's CPU per request of `r`'s disk (0: no pool).
    pub(super) fn pool_cpu_ns(&self, r: usize) -> Ns {
        self.model_of(r).0.pool_cpu_ns
    }

    /// Request `r` books its CPU on the NBD path's core free first (vmio_core::nbd's bound;
    /// nothing without one).
    fn book_path_cpu(&mut self, now: Ns, r: usize) {
        if self.path_cpu.is_empty() {
            return;
        }
        let v = self.vreqs.get_ref(r);
        let Some(cpu) = self.vdisks[v.disk]
            .model
            .nbd
            .as_ref()
            .map(|n| n.cpu_for(v.len))
        else {
            return;
        };
        let (c, free) = self
            .path_cpu
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, f)| (f, i))
            .expect("a pool of at least one core");
        let done = now.max(free) + cpu;
        self.path_cpu[c] = done;
        self.vreqs.get(r).cpu_done = done;
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
            slot: usize::MAX,
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
            cpu_done: 0,
            bd: Stamps::default(),
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
    /// `origin` issues `[offset, offset + len)` of `disk`: split at the guest queue's largest
    /// request, plugged or queued (module doc).
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
        let max = d.gq.max_bytes;
        let parts = if len == 0 {
            1
        } else {
            len.div_ceil(max) as u32
        };
        let queue = (self.issuer_vcpu(origin) % d.model.num_queues.max(1) as usize) as u32;
        let g = self.guest.gios.insert(GIo {
            origin,
            op,
            len,
            issue_ns: now,
            parts,
        });
        let plug = self.guest.plugging;
        if plug && op == Op::Flush {
            // A flush is not plugged, and nothing merges across it.
            self.unplug_disk(now, disk);
        }
        let mut off = offset;
        let end = offset + len;
        for _ in 0..parts {
            let n = (end - off).min(max);
            let io = DevIo {
                tag: g as u64,
                op,
                offset_bytes: off,
                len_bytes: n,
                fua: false,
                sync: true,
                owner: queue,
                queued_ns: now,
                merged: Vec::new(),
            };
            off += n;
            if parts == 1 && !plug {
                // One request, no plug (a direct-I/O job's usual case): it starts at once
                // when nothing is queued before it, as queue_insert then queue_run would.
                return self.queue_issue(now, disk, io);
            }
            if plug && op != Op::Flush {
                let d = &mut self.guest.vdisks[disk];
                if d.plug.is_empty() {
                    self.guest.plugged.push(disk);
                }
                let mut out = std::mem::take(&mut self.guest.flushed);
                if d.plug.add(&d.gq, io, &mut out) {
                    d.acct.merged(op);
                }
                for io in out.drain(..) {
                    self.queue_insert(now, disk, io);
                }
                self.guest.flushed = out;
            } else {
                self.queue_insert(now, disk, io);
            }
        }
        let set = self.guest.vdisks[disk].tag_set(queue);
        self.queue_run(now, disk, set);
    }

    /// Hold a plug over the guest's submissions (one call of the guest policy).
    pub(super) fn plug_start(&mut self) {
        self.guest.plugging = true;
    }

    /// Flush every plug and release it (blk_finish_plug).
    pub(super) fn plug_finish(&mut self, now: Ns) {
        self.guest.plugging = false;
        while let Some(disk) = self.guest.plugged.pop() {
            self.flush_plug(now, disk);
        }
    }

    /// Flush `disk`'s plug (a FLUSH is coming) and keep plugging.
    fn unplug_disk(&mut self, now: Ns, disk: usize) {
        if let Some(i) = self.guest.plugged.iter().position(|&d| d == disk) {
            self.guest.plugged.swap_remove(i);
            self.flush_plug(now, disk);
        }
    }

    fn flush_plug(&mut self, now: Ns, disk: usize) {
        let mut out = std::mem::take(&mut self.guest.flushed);
        let d = &mut self.guest.vdisks[disk];
        d.plug.flush(&d.gq, &mut out);
        for io in out.drain(..) {
            self.queue_insert(now, disk, io);
        }
        self.guest.flushed = out;
        for set in 0..self.guest.vdisks[disk].queues.len() {
            self.queue_run(now, disk, set);
        }
    }

    /// [`Self::queue_insert`] then [`Self::queue_run`] for one request, which starts without
    /// the queue run's buffers when nothing is queued before it and a tag is free.
    fn queue_issue(&mut self, now: Ns, disk: usize, io: DevIo) {
        let d = &mut self.guest.vdisks[disk];
        let set = d.tag_set(io.owner);
        let rq = Rq::of(&io);
        match d.queues[set].issue(now, io) {
            Inserted::Started(slot) => {
                d.acct.issue(now);
                self.start_alone(now, disk, slot, rq)
            }
            Inserted::Merged => {
                d.acct.merged(rq.op);
                self.queue_run(now, disk, set)
            }
            Inserted::Queued | Inserted::Waiting => {
                d.acct.issue(now);
                self.queue_run(now, disk, set)
            }
        }
    }

    /// Request `io` enters its hardware queue: a request of its own (queued, or its
    /// submitter waits for one) or merged into a queued one.
    fn queue_insert(&mut self, now: Ns, disk: usize, io: DevIo) {
        let d = &mut self.guest.vdisks[disk];
        let set = d.tag_set(io.owner);
        let op = io.op;
        match d.queues[set].insert(now, io) {
            Inserted::Merged => d.acct.merged(op),
            Inserted::Queued | Inserted::Waiting | Inserted::Started(_) => d.acct.issue(now),
        }
    }

    /// Start what hardware queue `set` of `disk` lets go now: one notification of the VMM.
    #[inline]
    fn queue_run(&mut self, now: Ns, disk: usize, set: usize) {
        if self.guest.vdisks[disk].queues[set].queued() > 0 {
            self.queue_dispatch(now, disk, set)
        }
    }

    /// [`Self::queue_run`] with requests queued (kept out of line: the check above is
    /// what every completion pays).
    #[inline(never)]
    fn queue_dispatch(&mut self, now: Ns, disk: usize, set: usize) {
        let mut started = std::mem::take(&mut self.guest.started);
        self.guest.vdisks[disk].queues[set]
            .dispatch(now, |slot, io| started.push((slot, Rq::of(io))));
        if started.is_empty() {
            self.guest.started = started;
            return;
        }
        let d = &mut self.guest.vdisks[disk];
        let lanes = d.lanes();
        if started.len() == 1 {
            // A notification of one request (a direct-I/O job's usual case): its own host
            // request, without multireq's bookkeeping.
            let (slot, rq) = started.pop().expect("one request");
            self.guest.started = started;
            return self.start_alone(now, disk, slot, rq);
        }
        for (_, io) in &started {
            if matches!(io.op, Op::Read | Op::Write) {
                d.acct.requests.add(io.len);
            }
        }
        // QEMU's multireq over the notification: host requests as runs of parts.
        let merge = d.model.merge;
        let mut plan = std::mem::take(&mut self.guest.multireq);
        if merge {
            plan.plan(started.iter().map(|(_, io)| (io.op, io.offset, io.len)));
        } else {
            plan.singles(started.len());
        }
        let mut ids = std::mem::take(&mut self.guest.ids);
        ids.clear();
        ids.resize(started.len(), usize::MAX);
        for (k, group) in plan.groups().enumerate() {
            let mut lead = usize::MAX;
            let mut prev: Option<usize> = None;
            let mut host_len = 0;
            for &i in group {
                let (slot, io) = &started[i];
                let r = self.new_vreq(now, disk, *slot, io, lanes, group.len() as u32, k as u32);
                self.guest.vreqs.get(r).lead = if lead == usize::MAX { r } else { lead };
                match prev {
                    None => lead = r,
                    Some(p) => self.guest.vreqs.get(p).next = Some(r),
                }
                prev = Some(r);
                host_len += io.len;
                ids[i] = r;
            }
            self.guest.vreqs.get(lead).host_len = host_len;
            let op = self.guest.vreqs.get_ref(lead).op;
            self.count_host_request(disk, op, host_len);
        }
        started.clear();
        self.guest.started = started;
        self.guest.multireq = plan;
        // The VMM takes them in the virtqueue's order; nothing completes synchronously:
        // a host request starts from an event, after every part of it is linked.
        for &r in &ids {
            self.vdisk_start(now, r);
        }
        self.guest.ids = ids;
    }

    /// Request `rq`, started alone in `slot` (a notification of one request): its own host
    /// request.
    fn start_alone(&mut self, now: Ns, disk: usize, slot: usize, rq: Rq) {
        let d = &mut self.guest.vdisks[disk];
        if matches!(rq.op, Op::Read | Op::Write) {
            // One request, one host request of the same size.
            if let Some(p) = SizeCounts::page_index(rq.len) {
                d.acct.requests.pages[p] += 1;
                d.acct.host_requests.pages[p] += 1;
            } else {
                d.acct.requests.add(rq.len);
                d.acct.host_requests.add(rq.len);
            }
        }
        let lanes = d.lanes();
        let r = self.new_vreq(now, disk, slot, &rq, lanes, 1, 0);
        self.guest.vreqs.get(r).lead = r;
        self.vdisk_start(now, r)
    }

    /// The VReq of request `io` started in `slot`: the `k`-th host request of its
    /// notification, of `parts` parts (its leader and links set by the caller).
    #[allow(clippy::too_many_arguments)]
    fn new_vreq(
        &mut self,
        now: Ns,
        disk: usize,
        slot: usize,
        io: &Rq,
        lanes: u32,
        parts: u32,
        k: u32,
    ) -> usize {
        self.guest.vreqs.insert(VReq {
            gio: io.tag as usize,
            slot,
            sub: None,
            disk,
            op: io.op,
            offset: io.offset,
            len: io.len,
            queue: io.owner,
            lane: io.owner % lanes,
            lead: usize::MAX,
            next: None,
            host_len: io.len,
            pending: parts,
            batch_k: k,
            cpu_done: 0,
            bd: Stamps::at(now),
        })
    }

    fn count_host_request(&mut self, disk: usize, op: Op, len: u64) {
        if matches!(op, Op::Read | Op::Write) {
            self.guest.vdisks[disk].acct.host_requests.add(len);
        }
    }

    fn vdisk_start(&mut self, now: Ns, r: usize) {
        if self.cpu.priced {
            return self.cpu_guest_submit(now, r);
        }
        // One look-up of the request and its disk for both costs.
        let v = self.guest.vreqs.get_ref(r);
        let (disk, lane, queue) = (v.disk, v.lane as usize, v.queue);
        let d = &self.guest.vdisks[disk];
        let kick = now + d.model.guest_submit_for(v.op, v.offset, v.len);
        let vmm = vmm_submit(d, v, r);
        let busy = d.lane_busy[lane];
        let t = self.spread[disk].submit(queue, kick, busy) + vmm;
        self.guest.vdisks[disk].lane_busy[lane] = t;
        self.guest.book_path_cpu(now, r);
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
        let l = self.guest.vreqs.get(r);
        l.bd.fin = now;
        let (disk, lane) = (l.disk, l.lane as usize);
        if let Some(mut at) = l.next {
            let host = l.bd;
            loop {
                let v = self.guest.vreqs.get(at);
                v.bd.take_host(&host);
                match v.next {
                    Some(x) => at = x,
                    None => break,
                }
            }
        }
        // The waiter starts by an event: host_finish runs inside the host cache's actions,
        // which must not call the policy again.
        if let Some(next) = self.guest.vdisks[disk].slots[lane].release() {
            self.q.push(now, Event::EngineStart(next).pack());
        }
        if self.cpu.priced {
            return self.cpu_host_finish(now, r);
        }
        let mut t = self.spread[disk].complete(now, self.guest.vdisks[disk].lane_busy[lane]);
        let mut at = Some(r);
        let d = &self.guest.vdisks[disk];
        let handoff = d.model.handoff_ns();
        while let Some(x) = at {
            let v = self.guest.vreqs.get_ref(x);
            at = v.next;
            t += vmm_complete(d, v, x);
            let done = self.spread[disk].interrupt(v.queue, t + handoff);
            let done = done.max(v.cpu_done);
            self.q.push(done, Event::GuestDone(x).pack());
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
        // Only the fields used below: moving the whole request out is a copy.
        let v = self.guest.vreqs.get_ref(r);
        let v = Done {
            disk: v.disk,
            queue: v.queue,
            slot: v.slot,
            op: v.op,
            offset: v.offset,
            len: v.len,
            bd: v.bd,
        };
        self.guest.vreqs.free(r);
        let cpu_wait = self.cpu.wait_of(r);
        let d = &mut self.guest.vdisks[v.disk];
        let set = d.tag_set(v.queue);
        // The tag and the request are free; a waiting submitter's request enters.
        let io = d.queues[set].complete(now, v.slot);
        d.acct.done(now, v.op, io.queued_ns);
        self.queue_run(now, v.disk, set);
        for tag in io.tags() {
            let gi = tag as usize;
            let g = self.guest.gios.get(gi);
            g.parts -= 1;
            if g.parts > 0 {
                continue;
            }
            let g = self.guest.gios.remove(gi);
            match g.origin {
                Origin::Job(j) => {
                    let slat = self.guest.vdisks[v.disk]
                        .model
                        .guest_submit_for(v.op, v.offset, v.len);
                    let spent = Spent::Request(&v.bd, cpu_wait);
                    self.io_done(now, j, g.op, g.len, g.issue_ns, slat, spent);
                }
                Origin::Guest { vm, token } => {
                    self.work.count_vm_bytes(now, vm as usize, g.len);
                    let parts: Parts = v.bd.parts(g.issue_ns, now, cpu_wait);
                    self.guest_os_done(now, vm as usize, token, &parts)
                }
            }
        }
    }
}
