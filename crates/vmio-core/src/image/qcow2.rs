//! The qcow2 format driver (docs/interop/qcow2.txt; QEMU block/qcow2.c, qcow2-cluster.c,
//! qcow2-refcount.c, qcow2-cache.c, read from QEMU's sources (current master and 2.x
//! versions of qcow2-cache.c) through the project's code search): a guest request becomes
//! the metadata and data I/O QEMU does on the image file.
//!
//! The file's layout, cluster allocation, refcounts and the metadata caches' write-back
//! rules are [`super::qcow2meta`]'s; this module is the request flow over them.
//!
//! ## The image lock (block/qcow2.c `s->lock`)
//!
//! QEMU runs every metadata lookup and update of an image under one coroutine mutex, held
//! across the metadata I/O (a cache miss reads the slice with the lock held); data I/O runs
//! unlocked, several requests' at once. So here: one request at a time holds the lock (FIFO),
//! its metadata steps run one after the other, then it releases the lock and issues its data
//! I/O; an allocating write takes the lock again to link its clusters (qcow2_handle_l2meta).
//!
//! ```text
//! read (qcow2_co_preadv_part):
//!   lock; per L2 slice of the range: L2 lookup (miss: evict LRU, write it if dirty, read the
//!   slice: entry_size bytes); unlock
//!   allocated clusters: one read per contiguous host run within a slice
//!   unallocated: down the backing chain (each qcow2 backing file's own L2 lookup, then its
//!   data; a raw one at the same offset); no layer has it, or a zero cluster: no I/O, the
//!   guest's buffer filled with zeroes (qcow2_co_preadv_part: qemu_iovec_memset), a Delay of
//!   zero bytes / MEMSET_BYTES_PER_SEC beside the reads
//! write (qcow2_co_pwritev_part, qcow2_alloc_host_offset):
//!   lock; handle_dependencies: a cluster being allocated by another write -> wait for it
//!   per slice: L2 table missing -> l2_allocate: new cluster (refcount +1), flush the
//!     refcount cache (writes + fdatasync), the new table's slices dirty, flush the L2 cache,
//!     write the L1 entry's sector + fdatasync (qcow2_write_l1_entry: bdrv_pwrite_sync)
//!     L2 lookup
//!   allocated cluster: data written in place (handle_copied)
//!   unallocated (handle_alloc): new host cluster at the end of the file (refcount block
//!     lookup, refcount +1: the block dirty)
//!   unlock
//!   a run of new clusters (one QCowL2Meta: contiguous in the file, one L2 slice) has COW
//!     areas: the untouched head of the request's first cluster, the tail of its last
//!   handle_alloc_space (QEMU >= 4.1, ImageCaps::write_zeroes): every COW area of the run
//!     reads as zeroes (is_zero_cow: a zero cluster, or unallocated down the whole chain)
//!     -> WriteZeroes of the whole run (bdrv_co_pwrite_zeroes, NO_FALLBACK), wait; the run's
//!     COW is skipped (skip_cow) and only the guest's bytes are written: zeroed_bytes += run
//!   perform_cow (the others): the COW areas read from the backing chain (zeroes without
//!     data there) and written with the guest data as one write of whole clusters
//!     (merge_cow): cow_bytes += the areas (cluster_size x clusters - length)
//!   lock; qcow2_alloc_cluster_link_l2: qcow2_cache_set_dependency(L2 -> refcounts) (lazy
//!     refcounts: qcow2_mark_dirty instead, the header's dirty bit written once + fdatasync);
//!     the L2 slice's entries set (dirty); unlock
//! flush (qcow2_co_flush_to_os, qcow2_write_caches, then bdrv_co_flush of the file):
//!   lock; write every dirty L2 slice, then (unless lazy refcounts) every dirty refcount
//!   block; unlock; fdatasync (Flush)
//! discard, discard = unmap (qcow2_co_pdiscard, qcow2_cluster_discard, whole clusters only):
//!   lock; per cluster: L2 lookup, entry cleared (set to read as zeroes when there is a
//!   backing file) and dirty; refcount -1 (set_dependency(refcounts -> L2): the L2 slice is
//!   written before the refcount block), the host range trimmed (qcow2_process_discards);
//!   unlock
//! writing back a dirty entry (qcow2_cache_entry_flush): if its cache depends on the other,
//!   flush the other first (its dirty entries written, then fdatasync); then write the entry
//! ```
//!
//! ## The server's block-status query (`ImageCaps::status_before_read`)
//!
//! Behind QEMU's NBD server (`[nbd] block_status`, crate::nbd) a read is two lock phases:
//! nbd/server.c `nbd_co_send_sparse_read` asks `blk_co_block_status_above` first, whose
//! `qcow2_co_block_status` does an L2 lookup under `s->lock` (a miss loads the slice), and
//! reads with `blk_co_pread` afterwards, whose `qcow2_co_preadv_part` looks up again. Other
//! requests' lookups run between the two, so with fewer slices cached than requests in
//! flight the read's lookup can miss the slice its query just loaded.
//!
//! ```text
//! read, status first: lock; per L2 slice of the range: L2 lookup; unlock
//!   every cluster reads as zeroes (a zero cluster, or unallocated without a backing file)
//!     -> complete (the server's hole chunk: no read, no zero fill)
//!   else: queue for the lock again (FIFO, behind the requests already waiting) -> read
//! ```
//!
//! Simplifications: the query covers the whole request at once (the server loops over runs
//! of one status, querying and reading each in turn), a mixed range is read whole (its
//! zeroes filled as without the query), and the query does not go down the backing chain.
//!
//! Not modelled: compressed clusters, internal snapshots (QCOW_OFLAG_COPIED is always set),
//! extended L2 entries (subclusters), encryption, external data files, `cache-clean-interval`
//! (the cache is never trimmed), the image lock handle_alloc_space's zero check takes
//! (bdrv_co_is_zero_fast -> qcow2_co_block_status: its lookups hit the slice just used),
//! the thread-pool hand-off of the write-zeroes a block device refuses (here
//! it is not tried), L2 table allocation by a discard of a range without one, the growth of
//! the refcount table, and the backing files' own locks (their lookups run in the reading
//! request's unlocked phase). Metadata writes smaller than a sector (the L1 entry, the
//! header's dirty bit) are written as one 512-byte sector.
//!
//! handle_alloc_space: block/qcow2.c `qcow2_co_pwritev_task` -> `handle_alloc_space` ->
//! `is_zero_cow`, then `merge_cow` (which skips an `m->skip_cow` run) and
//! qcow2-cluster.c `perform_cow` (returns at once for `skip_cow`); introduced by commit
//! c8bb23cbdbe3 ("qcow2: skip writing zero buffers to empty COW areas", QEMU 4.1). Whether
//! it applies is [`ImageCaps::write_zeroes`] (the QEMU release and the host file).
//! file-posix makes such a write-zeroes past the end of the file serialising (QEMU >= 4.2:
//! the engine runs that rule, vmio-sim's blocklayer.rs, and reports its waits as
//! `serialised_waits` and `serialised_wait_ns`).

use super::qcow2meta::{File, Step, Which, SECTOR, UNALLOC, ZERO};
use super::spec::{BackingSpec, Discard, Format, ImageSpec, Preallocation};
use super::{ImageAction, ImageCaps, ImageFormat, ImageStats};
use crate::cache::{Request, Token};
use crate::request::Op;
use crate::units::transfer_ns;
use crate::Ns;
use std::collections::VecDeque;

/// A copy-on-write area of a write's new cluster: its guest range and its run of `segs`.
#[derive(Clone, Copy, Debug)]
struct CowArea {
    guest: u64,
    len: u64,
    /// The cluster's map entry before the write (UNALLOC or ZERO).
    entry: u32,
    /// The run of new clusters (indices into the write's segs, [first, end)).
    run: (usize, usize),
    /// Where its data is copied from: None when it reads as zeroes.
    src: Option<(u64, u64)>,
}

/// A backing file.
#[derive(Clone, Debug)]
enum Layer {
    Raw { base: u64 },
    Qcow2(Box<File>),
}

/// A piece of a request's data I/O.
#[derive(Clone, Copy, Debug)]
struct Seg {
    /// 0: the image; k: backing file k - 1; ZERO_SEG: no I/O.
    layer: u32,
    /// Old cluster (in place) or new (whole clusters); for merging like with like.
    new: bool,
    host: u64,
    len: u64,
    /// The top image's L2 slice of the piece (QEMU issues one I/O per run within a slice).
    slice: u64,
}

const ZERO_SEG: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Job {
    req: Request,
    plan: Vec<Step>,
    pos: usize,
    pending: u32,
    /// Guest clusters this job allocates [first, end), until its link phase is done.
    alloc: Option<(u64, u64)>,
    /// A read whose block-status query (its own lock phase) is still to come.
    status: bool,
}

/// The qcow2 driver of one disk.
pub struct Qcow2 {
    top: File,
    backing: Vec<Layer>,
    virtual_size: u64,
    file_bytes: u64,
    discard: Discard,
    jobs: Vec<Job>,
    free_jobs: Vec<usize>,
    lock: Option<usize>,
    lock_queue: VecDeque<(usize, bool)>,
    inflight: Vec<(u64, u64, usize)>,
    dep_waiters: Vec<usize>,
    segs: Vec<Seg>,
    trims: Vec<(u64, u64)>,
    stats: ImageStats,
    caps: ImageCaps,
}

impl Qcow2 {
    /// The driver of a qcow2 `spec` of `virtual_size` bytes (files laid out one after the
    /// other from region offset 0, the image first).
    /// The top file's end: the offset at which its next cluster would be appended.
    pub fn file_end(&self) -> u64 {
        self.top.end * self.top.cs
    }

    pub fn new(spec: &ImageSpec, virtual_size: u64) -> Self {
        let cs = spec.cluster_size;
        let clusters = virtual_size.div_ceil(cs);
        let populated = if spec.preallocation != Preallocation::Off {
            clusters
        } else {
            (spec.populated * clusters as f64).round() as u64
        };
        let top = File::new(0, virtual_size, spec, populated);
        let mut base = spec.own_file_bytes(virtual_size);
        let mut backing = Vec::new();
        for b in &spec.backing {
            backing.push(match b.format {
                Format::Raw => Layer::Raw { base },
                Format::Qcow2 => {
                    let bspec = backing_spec(b);
                    let n = virtual_size.div_ceil(b.cluster_size);
                    let p = (b.populated * n as f64).round() as u64;
                    Layer::Qcow2(Box::new(File::new(base, virtual_size, &bspec, p)))
                }
            });
            base += b.file_bytes(virtual_size);
        }
        Qcow2 {
            top,
            backing,
            virtual_size,
            file_bytes: spec.file_bytes(virtual_size),
            discard: spec.discard,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            lock: None,
            lock_queue: VecDeque::new(),
            inflight: Vec::new(),
            dep_waiters: Vec::new(),
            segs: Vec::new(),
            trims: Vec::new(),
            stats: ImageStats::default(),
            caps: ImageCaps::default(),
        }
    }

    /// The driver over layers that offer `caps` (default: none, QEMU 2.x's behaviour).
    pub fn with_caps(mut self, caps: ImageCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Host clusters the image file uses (its end).
    pub fn image_clusters(&self) -> u64 {
        self.top.end
    }

    fn in_flight(&self, c: u64) -> bool {
        self.inflight.iter().any(|&(a, b, _)| c >= a && c < b)
    }

    fn acquire(&mut self, slot: usize, link: bool, out: &mut Vec<ImageAction>) {
        if self.lock.is_none() {
            self.grant(slot, link, out);
        } else {
            self.lock_queue.push_back((slot, link));
        }
    }

    fn unlock(&mut self, out: &mut Vec<ImageAction>) {
        self.lock = None;
        if let Some((s, link)) = self.lock_queue.pop_front() {
            self.grant(s, link, out);
        }
    }

    fn grant(&mut self, slot: usize, link: bool, out: &mut Vec<ImageAction>) {
        self.lock = Some(slot);
        let req = self.jobs[slot].req;
        let mut plan = std::mem::take(&mut self.jobs[slot].plan);
        if link {
            self.plan_link(slot, &mut plan);
        } else {
            match req.op {
                Op::Read if self.jobs[slot].status => {
                    self.jobs[slot].status = false;
                    if self.plan_status(req, &mut plan) {
                        // All of it reads as zeroes: the server sends a hole, no read.
                        plan.push(Step::Done);
                    } else {
                        plan.push(Step::Again);
                    }
                }
                Op::Read => self.plan_read(req, &mut plan),
                Op::Write => {
                    let (first, last) = self.span(req);
                    if self
                        .inflight
                        .iter()
                        .any(|&(a, b, _)| first < b && a <= last)
                    {
                        // handle_dependencies: wait for the allocation, then start again.
                        self.jobs[slot].plan = plan;
                        self.dep_waiters.push(slot);
                        self.unlock(out);
                        return;
                    }
                    self.plan_write(slot, req, &mut plan);
                }
                Op::Flush => self.plan_flush(&mut plan),
                Op::Trim => self.plan_discard(req, &mut plan),
            }
        }
        self.jobs[slot].plan = plan;
        self.run(slot, out);
    }

    /// First and last guest cluster of a request.
    fn span(&self, req: Request) -> (u64, u64) {
        let cs = self.top.cs;
        (req.offset / cs, (req.offset + req.len - 1) / cs)
    }

    fn run(&mut self, slot: usize, out: &mut Vec<ImageAction>) {
        loop {
            let job = &mut self.jobs[slot];
            if job.pos == job.plan.len() {
                if job.pending == 0 {
                    self.finish(slot, out);
                }
                return;
            }
            let step = job.plan[job.pos];
            job.pos += 1;
            match step {
                Step::Io { op, offset, len } | Step::Data { op, offset, len } => {
                    job.pending += 1;
                    out.push(ImageAction::Io {
                        op,
                        offset,
                        len,
                        token: Token(slot as u64),
                        data: matches!(step, Step::Data { .. }),
                    });
                }
                Step::WriteZeroes { offset, len } => {
                    job.pending += 1;
                    out.push(ImageAction::WriteZeroes {
                        offset,
                        len,
                        token: Token(slot as u64),
                    });
                }
                Step::Flush => {
                    job.pending += 1;
                    out.push(ImageAction::Flush {
                        token: Token(slot as u64),
                    });
                }
                Step::Delay { ns } => {
                    job.pending += 1;
                    out.push(ImageAction::Delay {
                        ns,
                        token: Token(slot as u64),
                    });
                }
                Step::Wait => {
                    if job.pending > 0 {
                        job.pos -= 1;
                        return;
                    }
                }
                Step::Unlock => self.unlock(out),
                Step::Relock => {
                    self.acquire(slot, true, out);
                    return;
                }
                Step::Again => {
                    self.acquire(slot, false, out);
                    return;
                }
                Step::Done => {
                    job.plan.truncate(job.pos);
                }
            }
        }
    }

    fn finish(&mut self, slot: usize, out: &mut Vec<ImageAction>) {
        let job = &mut self.jobs[slot];
        out.push(ImageAction::Complete { req: job.req.id });
        job.plan.clear();
        job.pos = 0;
        if job.alloc.take().is_some() {
            self.inflight.retain(|&(_, _, s)| s != slot);
            for i in 0..self.dep_waiters.len() {
                let w = self.dep_waiters[i];
                self.lock_queue.push_back((w, false));
            }
            self.dep_waiters.clear();
            if self.lock.is_none() {
                if let Some((s, link)) = self.lock_queue.pop_front() {
                    self.grant(s, link, out);
                }
            }
        }
        self.free_jobs.push(slot);
    }

    /// Resolve `[guest, guest + len)` of cluster `c` down the backing chain into `segs`
    /// (lookups planned as steps), counting backing reads.
    fn backing_seg(&mut self, guest: u64, len: u64, slice: u64, plan: &mut Vec<Step>) -> Seg {
        for (k, layer) in self.backing.iter_mut().enumerate() {
            match layer {
                Layer::Raw { base } => {
                    self.stats.backing_read_bytes += len;
                    return Seg {
                        layer: k as u32 + 1,
                        new: false,
                        host: *base + guest,
                        len,
                        slice,
                    };
                }
                Layer::Qcow2(f) => {
                    let bc = guest / f.cs;
                    if !f.l2_lookup(bc, plan, &mut self.stats) || !f.has(bc) {
                        continue;
                    }
                    self.stats.backing_read_bytes += len;
                    return Seg {
                        layer: k as u32 + 1,
                        new: false,
                        host: f.host(f.map[bc as usize] - 1) + guest % f.cs,
                        len,
                        slice,
                    };
                }
            }
        }
        Seg {
            layer: ZERO_SEG,
            new: false,
            host: 0,
            len,
            slice,
        }
    }

    /// Issue `segs` as I/O of `op`, merging contiguous pieces of one kind within a slice.
    fn issue(segs: &[Seg], op: Op, plan: &mut Vec<Step>) -> bool {
        let mut any = false;
        let mut cur: Option<Seg> = None;
        for s in segs.iter().filter(|s| s.layer != ZERO_SEG) {
            match cur.as_mut() {
                Some(c)
                    if c.layer == s.layer
                        && c.new == s.new
                        && c.slice == s.slice
                        && c.host + c.len == s.host =>
                {
                    c.len += s.len;
                }
                _ => {
                    if let Some(c) = cur {
                        plan.push(Step::Data {
                            op,
                            offset: c.host,
                            len: c.len,
                        });
                        any = true;
                    }
                    cur = Some(*s);
                }
            }
        }
        if let Some(c) = cur {
            plan.push(Step::Data {
                op,
                offset: c.host,
                len: c.len,
            });
            any = true;
        }
        any
    }

    /// The server's block-status query of a read (qcow2_co_block_status): under the lock, one
    /// L2 lookup per slice of the range (a miss loads the slice), then unlock. True when the
    /// whole range reads as zeroes with no backing file to ask (the server's hole chunk).
    /// The L2 lookup of cluster `c` in a run over a request's clusters in order: one lookup
    /// per slice (`at`: the slice looked up last and whether its table exists); whether
    /// `c`'s table exists.
    fn lookup_in_run(&mut self, c: u64, at: &mut (u64, bool), plan: &mut Vec<Step>) -> bool {
        let s = c / self.top.eps;
        if s != at.0 {
            *at = (s, self.top.l2_lookup(c, plan, &mut self.stats));
        }
        at.1
    }

    fn plan_status(&mut self, req: Request, plan: &mut Vec<Step>) -> bool {
        let (first, last) = self.span(req);
        let mut at = (u64::MAX, false);
        let mut zero = true;
        for c in first..=last {
            let v = if self.lookup_in_run(c, &mut at, plan) {
                self.top.map[c as usize]
            } else {
                UNALLOC
            };
            zero &= v == ZERO || (v == UNALLOC && self.backing.is_empty());
        }
        plan.push(Step::Unlock);
        zero
    }

    fn plan_read(&mut self, req: Request, plan: &mut Vec<Step>) {
        let (first, last) = self.span(req);
        let cs = self.top.cs;
        let end = req.offset + req.len;
        let mut segs = std::mem::take(&mut self.segs);
        segs.clear();
        let mut at = (u64::MAX, false);
        for c in first..=last {
            let exists = self.lookup_in_run(c, &mut at, plan);
            let s = at.0;
            let a = req.offset.max(c * cs);
            let len = end.min((c + 1) * cs) - a;
            let v = if exists && !self.in_flight(c) {
                self.top.map[c as usize]
            } else {
                UNALLOC
            };
            segs.push(match v {
                ZERO => Seg {
                    layer: ZERO_SEG,
                    new: false,
                    host: 0,
                    len,
                    slice: s,
                },
                UNALLOC => Seg {
                    // resolved below, after the lock is released
                    layer: ZERO_SEG - 1,
                    new: false,
                    host: a,
                    len,
                    slice: s,
                },
                h => Seg {
                    layer: 0,
                    new: false,
                    host: self.top.host(h - 1) + (a - c * cs),
                    len,
                    slice: s,
                },
            });
        }
        plan.push(Step::Unlock);
        for seg in segs.iter_mut() {
            if seg.layer == ZERO_SEG - 1 {
                *seg = self.backing_seg(seg.host, seg.len, seg.slice, plan);
            }
        }
        // qcow2_co_preadv_part: the pieces no layer holds are zeroes in the guest's buffer.
        let zeroes: u64 = segs
            .iter()
            .filter(|s| s.layer == ZERO_SEG)
            .map(|s| s.len)
            .sum();
        if zeroes > 0 {
            self.stats.zero_fill_bytes += zeroes;
            plan.push(Step::Delay {
                // QEMU fills the guest's buffer (`qemu_iovec_memset`).
                ns: transfer_ns(zeroes, crate::units::MEMSET_BYTES_PER_SEC),
            });
        }
        if Self::issue(&segs, Op::Read, plan) || zeroes > 0 {
            plan.push(Step::Wait);
        }
        self.segs = segs;
    }

    fn plan_write(&mut self, slot: usize, req: Request, plan: &mut Vec<Step>) {
        let (first, last) = self.span(req);
        let cs = self.top.cs;
        let end = req.offset + req.len;
        let mut segs = std::mem::take(&mut self.segs);
        segs.clear();
        let mut slice = u64::MAX;
        let mut alloc: Option<(u64, u64)> = None;
        // The untouched head of the first cluster and tail of the last, when they are new.
        let mut areas: [Option<CowArea>; 2] = [None, None];
        for c in first..=last {
            let s = c / self.top.eps;
            if s != slice {
                slice = s;
                let t = c / self.top.ept;
                if self.top.l2_host[t as usize] == 0 {
                    self.top.l2_allocate(t, plan, &mut self.stats);
                }
                self.top.l2_lookup(c, plan, &mut self.stats);
            }
            let a = req.offset.max(c * cs);
            let b = end.min((c + 1) * cs);
            let v = self.top.map[c as usize];
            if v != UNALLOC && v != ZERO {
                segs.push(Seg {
                    layer: 0,
                    new: false,
                    host: self.top.host(v - 1) + (a - c * cs),
                    len: b - a,
                    slice: s,
                });
                continue;
            }
            let h = self.top.alloc_cluster(plan, &mut self.stats);
            self.top.map[c as usize] = h + 1;
            self.stats.allocations += 1;
            alloc = Some(alloc.map_or((c, c + 1), |(f, _)| (f, c + 1)));
            segs.push(Seg {
                layer: 0,
                new: true,
                host: self.top.host(h),
                len: cs,
                slice: s,
            });
            let (head, tail) = (a - c * cs, (c + 1) * cs - b);
            let i = segs.len() - 1;
            if head > 0 {
                areas[0] = Some(CowArea {
                    guest: c * cs,
                    len: head,
                    entry: v,
                    run: (i, i + 1),
                    src: None,
                });
            }
            if tail > 0 {
                areas[1] = Some(CowArea {
                    guest: b,
                    len: tail,
                    entry: v,
                    run: (i, i + 1),
                    src: None,
                });
            }
        }
        plan.push(Step::Unlock);
        // Each area's run of new clusters (a QCowL2Meta) and where its data comes from:
        // is_zero_cow's question, perform_cow's reads.
        for area in areas.iter_mut().flatten() {
            area.run = Self::new_run(&segs, area.run.0, cs);
            if area.entry == UNALLOC && !self.backing.is_empty() {
                let s = self.backing_seg(area.guest, area.len, 0, plan);
                if s.layer != ZERO_SEG {
                    area.src = Some((s.host, s.len));
                }
            }
        }
        // handle_alloc_space: a run whose every area reads as zeroes is zeroed whole and
        // skips its copy-on-write; the guest's bytes alone are written into it.
        let mut zeroed: [Option<(usize, usize)>; 2] = [None, None];
        if self.caps.write_zeroes {
            for k in 0..2 {
                let Some(area) = areas[k] else { continue };
                let zero = areas
                    .iter()
                    .flatten()
                    .filter(|o| o.run == area.run)
                    .all(|o| o.src.is_none());
                if zero {
                    zeroed[k] = Some(area.run);
                }
            }
            let mut issued = false;
            for (k, run) in zeroed.iter().enumerate() {
                let Some((i, j)) = *run else { continue };
                if k == 1 && zeroed[0] == Some((i, j)) {
                    continue; // one run, both areas: one request
                }
                let len = (j - i) as u64 * cs;
                plan.push(Step::WriteZeroes {
                    offset: segs[i].host,
                    len,
                });
                self.stats.zeroed_bytes += len;
                issued = true;
            }
            if issued {
                plan.push(Step::Wait);
            }
        }
        // perform_cow for the other areas: read what the backing chain holds, and count the
        // bytes copied or written as zeroes with the guest data.
        let mut reads = std::mem::take(&mut self.trims);
        reads.clear();
        for (k, area) in areas.iter().enumerate() {
            let Some(area) = area else { continue };
            if zeroed[k].is_some() {
                let (i, j) = area.run;
                if k == 0 {
                    segs[i].host += area.len;
                    segs[i].len -= area.len;
                } else {
                    segs[j - 1].len -= area.len;
                }
                continue;
            }
            self.stats.cow_bytes += area.len;
            if let Some(src) = area.src {
                reads.push(src);
            }
        }
        for &(offset, len) in &reads {
            plan.push(Step::Io {
                op: Op::Read,
                offset,
                len,
            });
        }
        if !reads.is_empty() {
            plan.push(Step::Wait);
        }
        self.trims = reads;
        if Self::issue(&segs, Op::Write, plan) {
            plan.push(Step::Wait);
        }
        if let Some((f, e)) = alloc {
            self.jobs[slot].alloc = Some((f, e));
            self.inflight.push((f, e, slot));
            plan.push(Step::Relock);
        }
        self.segs = segs;
    }

    /// The run of new clusters around `segs[i]` that QEMU allocates as one QCowL2Meta:
    /// neighbours that are new, in the same L2 slice and contiguous in the file.
    fn new_run(segs: &[Seg], i: usize, cs: u64) -> (usize, usize) {
        let same = |a: &Seg, b: &Seg| a.new && b.new && a.slice == b.slice && a.host + cs == b.host;
        let mut lo = i;
        while lo > 0 && same(&segs[lo - 1], &segs[lo]) {
            lo -= 1;
        }
        let mut hi = i + 1;
        while hi < segs.len() && same(&segs[hi - 1], &segs[hi]) {
            hi += 1;
        }
        (lo, hi)
    }

    fn plan_link(&mut self, slot: usize, plan: &mut Vec<Step>) {
        let Some((f, e)) = self.jobs[slot].alloc else {
            plan.push(Step::Unlock);
            return;
        };
        if self.top.lazy {
            if !self.top.marked_dirty {
                // qcow2_mark_dirty: the header's incompatible_features, bdrv_pwrite_sync
                self.top.marked_dirty = true;
                plan.push(Step::Io {
                    op: Op::Write,
                    offset: self.top.base,
                    len: SECTOR,
                });
                plan.push(Step::Wait);
                plan.push(Step::Flush);
                plan.push(Step::Wait);
                self.stats.metadata_written_bytes += SECTOR;
            }
        } else {
            self.top.set_dependency(Which::L2, plan, &mut self.stats);
        }
        let mut slice = u64::MAX;
        for c in f..e {
            let s = c / self.top.eps;
            if s != slice {
                slice = s;
                self.top.l2_lookup(c, plan, &mut self.stats);
                self.top.l2.mark_dirty(s as u32);
            }
        }
        plan.push(Step::Unlock);
    }

    fn plan_flush(&mut self, plan: &mut Vec<Step>) {
        self.top.cache_write(Which::L2, plan, &mut self.stats);
        if !(self.top.lazy && self.top.marked_dirty) {
            self.top.cache_write(Which::Refcount, plan, &mut self.stats);
        }
        plan.push(Step::Unlock);
        plan.push(Step::Flush);
        plan.push(Step::Wait);
    }

    fn plan_discard(&mut self, req: Request, plan: &mut Vec<Step>) {
        let cs = self.top.cs;
        let (c0, c1) = (req.offset.div_ceil(cs), (req.offset + req.len) / cs);
        let new = if self.backing.is_empty() {
            UNALLOC
        } else {
            ZERO
        };
        let mut trims = std::mem::take(&mut self.trims);
        trims.clear();
        let mut slice = u64::MAX;
        let mut exists = false;
        let mut dependency = false;
        for c in c0..c1 {
            let s = c / self.top.eps;
            if s != slice {
                slice = s;
                exists = self.top.l2_lookup(c, plan, &mut self.stats);
            }
            if !exists || self.in_flight(c) {
                continue;
            }
            let v = self.top.map[c as usize];
            if v == new {
                continue;
            }
            self.top.l2.mark_dirty(s as u32);
            self.top.map[c as usize] = new;
            if v == UNALLOC || v == ZERO {
                continue;
            }
            let h = v - 1;
            if !dependency {
                self.top
                    .set_dependency(Which::Refcount, plan, &mut self.stats);
                dependency = true;
            }
            let rb = (h as u64 / self.top.rpb) as u32;
            self.top
                .get(Which::Refcount, rb, true, plan, &mut self.stats);
            self.top.rc.mark_dirty(rb);
            self.top.free.insert(h);
            self.stats.discarded_clusters += 1;
            let host = self.top.host(h);
            match trims.last_mut() {
                Some((o, l)) if *o + *l == host => *l += cs,
                _ => trims.push((host, cs)),
            }
        }
        for &(offset, len) in &trims {
            plan.push(Step::Io {
                op: Op::Trim,
                offset,
                len,
            });
            plan.push(Step::Wait);
        }
        plan.push(Step::Unlock);
        self.trims = trims;
    }
}

/// A backing file's spec: its cluster size, QEMU's default caches.
fn backing_spec(b: &BackingSpec) -> ImageSpec {
    ImageSpec {
        cluster_size: b.cluster_size,
        ..ImageSpec::qcow2()
    }
}

impl ImageFormat for Qcow2 {
    fn on_request(&mut self, _now: Ns, req: Request, out: &mut Vec<ImageAction>) {
        let mut req = req;
        if req.op != Op::Flush {
            if req.offset >= self.virtual_size || req.len == 0 {
                out.push(ImageAction::Complete { req: req.id });
                return;
            }
            req.len = req.len.min(self.virtual_size - req.offset);
        }
        if req.op == Op::Trim && self.discard == Discard::Ignore {
            out.push(ImageAction::Complete { req: req.id });
            return;
        }
        let slot = match self.free_jobs.pop() {
            Some(s) => s,
            None => {
                self.jobs.push(Job {
                    req,
                    plan: Vec::new(),
                    pos: 0,
                    pending: 0,
                    alloc: None,
                    status: false,
                });
                self.jobs.len() - 1
            }
        };
        let job = &mut self.jobs[slot];
        job.req = req;
        job.plan.clear();
        job.pos = 0;
        job.pending = 0;
        job.alloc = None;
        job.status = req.op == Op::Read && self.caps.status_before_read;
        self.acquire(slot, false, out);
    }

    fn on_done(&mut self, _now: Ns, token: Token, out: &mut Vec<ImageAction>) {
        let slot = token.0 as usize;
        let Some(job) = self.jobs.get_mut(slot) else {
            return;
        };
        job.pending = job.pending.saturating_sub(1);
        if job.pending == 0 {
            self.run(slot, out);
        }
    }

    fn stats(&self) -> ImageStats {
        self.stats
    }

    fn file_bytes(&self) -> u64 {
        self.file_bytes
    }
}
