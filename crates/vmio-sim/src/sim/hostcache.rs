//! The host cache driver: what QEMU's cache mode makes of a virtual-disk request on the host,
//! and the host page cache's writeback.
//!
//! ```text
//! host_start(r) by op and cache mode:
//!   flush: unsafe → done; O_DIRECT (none, directsync) → flush_volume;
//!          buffered → fsync_file: write the file's dirty pages, wait for its writeback,
//!          then flush_volume
//!   buffered read  → buffered_read: hits copy; misses (and read-ahead) fetch, then copy
//!   buffered write → dirty the pages, copy, then after_copy:
//!          writethrough → write the pages and FLUSH CACHE before completing
//!          else kick_writeback; dirty + in writeback > dirty limit → throttled until below
//!   O_DIRECT read/write/trim → invalidate cached pages (not reads), submit_range;
//!          write with writethrough semantics (directsync) → flush_volume before completing
//! copies: the host memory bus moves copy_rate bytes/s, copies queue behind each other
//! kick_writeback: while in writeback < WB_MAX_INFLIGHT_PAGES and (expired pages (timer) or
//!          dirty > background limit): write up to WB_CHUNK_PAGES of the oldest dirty pages
//! WbTimer every writeback interval: pages dirty for longer than dirty_expire are expired
//! ```
//!
//! Sources: QEMU block.c `bdrv_parse_cache_mode` (cache modes to O_DIRECT / O_DSYNC /
//! ignored flushes), Linux mm/page-writeback.c (dirty_ratio, dirty_background_ratio,
//! dirty_expire_centisecs, dirty_writeback_centisecs, balance_dirty_pages), fs/fs-writeback.c
//! (MAX_WRITEBACK_PAGES); the page cache and read-ahead are the core crate's
//! [`PageCache`] and [`Readahead`].

use super::blockq::Barrier;
use super::event::Event;
use super::Sim;
use std::collections::VecDeque;
use vmio_core::cache::{
    page_span, CacheMode, PageCache, PageRange, ReadLookup, Readahead, PAGE_BYTES,
};
use vmio_core::request::Op;
use vmio_core::stack::PageCacheSpec;
use vmio_core::units::transfer_ns;
use vmio_core::Ns;

/// Pages of writeback kept in flight at most (block-layer queues bound it in Linux).
const WB_MAX_INFLIGHT_PAGES: u64 = 16 * 1024;
/// Pages per writeback chunk (MAX_WRITEBACK_PAGES, 4 MiB).
const WB_CHUNK_PAGES: u64 = 1024;

/// What to do when all device requests of a barrier completed.
pub(super) enum Cont {
    DirectDone(usize),
    Fetch {
        file: u32,
        first: u64,
        n: u64,
        waiters: Vec<usize>,
    },
    Writeback {
        disk: usize,
        pages: u64,
    },
    FsyncWrites(usize),
    WriteThrough(usize),
    FlushDone(usize),
}

/// A VM disk's image file on the host: its cache mode, read-ahead and writeback.
pub(super) struct FileState {
    mode: CacheMode,
    ra: Readahead,
    wb_inflight: u32,
    fsync_waiters: Vec<usize>,
}

impl FileState {
    pub(super) fn new(mode: CacheMode, read_ahead_pages: u64) -> Self {
        FileState {
            mode,
            ra: Readahead::new(read_ahead_pages),
            wb_inflight: 0,
            fsync_waiters: Vec::new(),
        }
    }
}

/// The host cache driver's state: the page cache, writeback and the files (indexed like
/// `Sim::disks`).
pub(super) struct HostCache {
    pub(super) pc: PageCache,
    files: Vec<FileState>,
    copy_rate: u64,
    copy_busy: Ns,
    dirty_limit: u64,
    dirty_bg: u64,
    dirty_expire: Ns,
    wb_interval: Ns,
    wb_inflight_pages: u64,
    wb_expired_before: Option<Ns>,
    wb_timer_armed: bool,
    throttled: VecDeque<usize>,
    lookup: ReadLookup,
    ranges: Vec<PageRange>,
    waits: Vec<u32>,
}

impl HostCache {
    pub(super) fn new(pcs: &PageCacheSpec, files: Vec<FileState>) -> Self {
        let cap_pages = pcs.memory_bytes / PAGE_BYTES;
        HostCache {
            pc: PageCache::new(cap_pages),
            files,
            copy_rate: pcs.copy_rate_bps,
            copy_busy: 0,
            dirty_limit: cap_pages * pcs.dirty_ratio as u64 / 100,
            dirty_bg: cap_pages * pcs.dirty_background_ratio as u64 / 100,
            dirty_expire: pcs.dirty_expire_ns,
            wb_interval: pcs.writeback_interval_ns,
            wb_inflight_pages: 0,
            wb_expired_before: None,
            wb_timer_armed: false,
            throttled: VecDeque::new(),
            lookup: ReadLookup::default(),
            ranges: Vec::new(),
            waits: Vec::new(),
        }
    }
}

impl Sim {
    pub(super) fn host_start(&mut self, now: Ns, r: usize) {
        let (disk, op) = {
            let v = self.guest.vreqs.get(r);
            (v.disk, v.op)
        };
        let mode = self.cache.files[disk].mode;
        match op {
            Op::Flush => {
                if mode.ignores_flush() {
                    self.host_finish(now, r);
                } else if mode.direct() {
                    self.flush_volume(now, r);
                } else {
                    self.fsync_file(now, r);
                }
            }
            Op::Read if !mode.direct() => self.buffered_read(now, r),
            Op::Write if !mode.direct() => {
                let (off, len) = (self.guest.vreqs.get(r).offset, self.guest.vreqs.get(r).len);
                let (first, n) = page_span(off, len);
                self.cache.pc.write(now, disk as u32, first, n);
                let t = self.copy_done(now, len);
                self.q.push(t, Event::HostDone(r).pack());
            }
            Op::Read | Op::Write | Op::Trim => {
                let (off, len) = (self.guest.vreqs.get(r).offset, self.guest.vreqs.get(r).len);
                if op != Op::Read {
                    let (first, n) = page_span(off, len);
                    self.cache.pc.invalidate(disk as u32, first, n);
                }
                let b = self.blockq.barriers.insert(Barrier {
                    remaining: 0,
                    cont: Cont::DirectDone(r),
                });
                self.submit_range(now, disk, op, off, len, b, true);
            }
        }
    }

    pub(super) fn after_copy(&mut self, now: Ns, r: usize) {
        let (disk, op, off, len) = {
            let v = self.guest.vreqs.get(r);
            (v.disk, v.op, v.offset, v.len)
        };
        if op == Op::Read {
            return self.host_finish(now, r);
        }
        let mode = self.cache.files[disk].mode;
        if mode.write_through() {
            let (first, n) = page_span(off, len);
            self.cache.pc.clean_range(disk as u32, first, n);
            let b = self.blockq.barriers.insert(Barrier {
                remaining: 0,
                cont: Cont::WriteThrough(r),
            });
            self.submit_pages(now, disk, Op::Write, first, n, b, true);
            return;
        }
        self.kick_writeback(now);
        if self.cache.pc.dirty_pages() + self.cache.wb_inflight_pages > self.cache.dirty_limit {
            self.cache.throttled.push_back(r);
        } else {
            self.host_finish(now, r);
        }
    }

    pub(super) fn buffered_read(&mut self, now: Ns, r: usize) {
        let (disk, off, len) = {
            let v = self.guest.vreqs.get(r);
            (v.disk, v.offset, v.len)
        };
        let file = disk as u32;
        let (first, n) = page_span(off, len);
        let disk_pages = self.disks[disk].size_bytes / PAGE_BYTES;
        let mut lookup = std::mem::take(&mut self.cache.lookup);
        self.cache.pc.read(file, first, n, &mut lookup);
        let missing = !lookup.missing.is_empty();
        let plan = self.cache.files[disk].ra.on_read(first, n, missing);
        let mut fetched = false;
        if let Some((s, k)) = plan.sync {
            fetched |= self.fetch(now, disk, s, k.min(disk_pages.saturating_sub(s)));
        }
        for m in &lookup.missing {
            fetched |= self.fetch(now, disk, m.first, m.n);
        }
        if let Some((s, k)) = plan.background {
            if s < disk_pages {
                self.fetch(now, disk, s, k.min(disk_pages - s));
            }
        }
        let wait_any = fetched || !lookup.waits.is_empty();
        self.cache.lookup = lookup;
        if wait_any {
            let mut waits = std::mem::take(&mut self.cache.waits);
            waits.clear();
            self.cache.pc.pending_fetches(file, first, n, &mut waits);
            self.guest.vreqs.get(r).waits = waits.len() as u32;
            for &w in &waits {
                if let Cont::Fetch { waiters, .. } = &mut self.blockq.barriers.get(w as usize).cont
                {
                    waiters.push(r);
                }
            }
            let none = waits.is_empty();
            self.cache.waits = waits;
            if !none {
                return;
            }
        }
        let t = self.copy_done(now, len);
        self.q.push(t, Event::HostDone(r).pack());
    }

    /// Fetch the absent pages of a range into the page cache. Returns whether any fetch was
    /// issued.
    pub(super) fn fetch(&mut self, now: Ns, disk: usize, first: u64, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        let file = disk as u32;
        let mut ranges = std::mem::take(&mut self.cache.ranges);
        ranges.clear();
        self.cache.pc.absent(file, first, n, &mut ranges);
        let any = !ranges.is_empty();
        for rg in &ranges {
            let b = self.blockq.barriers.insert(Barrier {
                remaining: 0,
                cont: Cont::Fetch {
                    file,
                    first: rg.first,
                    n: rg.n,
                    waiters: Vec::new(),
                },
            });
            self.cache.pc.begin_fetch(file, rg.first, rg.n, b as u32);
            self.submit_pages(now, disk, Op::Read, rg.first, rg.n, b, true);
        }
        self.cache.ranges = ranges;
        any
    }

    pub(super) fn fsync_file(&mut self, now: Ns, r: usize) {
        let disk = self.guest.vreqs.get(r).disk;
        let mut ranges = Vec::new();
        self.cache
            .pc
            .take_dirty(Some(disk as u32), None, u64::MAX, &mut ranges);
        let b = self.blockq.barriers.insert(Barrier {
            remaining: 1,
            cont: Cont::FsyncWrites(r),
        });
        for rg in &ranges {
            self.submit_pages(now, disk, Op::Write, rg.first, rg.n, b, true);
        }
        self.barrier_done(now, b);
    }

    /// A copy between the page cache and guest memory: the host's memory bus moves
    /// `copy_rate` bytes/s in all, so concurrent copies queue behind each other.
    pub(super) fn copy_done(&mut self, now: Ns, len: u64) -> Ns {
        let t = now.max(self.cache.copy_busy) + transfer_ns(len, self.cache.copy_rate);
        self.cache.copy_busy = t;
        t
    }

    pub(super) fn kick_writeback(&mut self, now: Ns) {
        if !self.cache.wb_timer_armed && self.cache.pc.dirty_pages() > 0 {
            self.cache.wb_timer_armed = true;
            self.q
                .push(now + self.cache.wb_interval, Event::WbTimer.pack());
        }
        while self.cache.wb_inflight_pages < WB_MAX_INFLIGHT_PAGES {
            let expired = self
                .cache
                .wb_expired_before
                .filter(|&t| self.cache.pc.oldest_dirty_ns().is_some_and(|o| o <= t));
            let background = self.cache.pc.dirty_pages() > self.cache.dirty_bg;
            if expired.is_none() && !background {
                self.cache.wb_expired_before = None;
                break;
            }
            let mut ranges = std::mem::take(&mut self.cache.ranges);
            ranges.clear();
            let taken = self
                .cache
                .pc
                .take_dirty(None, expired, WB_CHUNK_PAGES, &mut ranges);
            if taken == 0 {
                self.cache.ranges = ranges;
                break;
            }
            self.cache.wb_inflight_pages += taken;
            for rg in &ranges {
                let disk = rg.file as usize;
                self.cache.files[disk].wb_inflight += 1;
                let b = self.blockq.barriers.insert(Barrier {
                    remaining: 0,
                    cont: Cont::Writeback { disk, pages: rg.n },
                });
                self.submit_pages(now, disk, Op::Write, rg.first, rg.n, b, false);
            }
            self.cache.ranges = ranges;
        }
    }

    pub(super) fn wb_timer(&mut self, now: Ns) {
        self.cache.wb_timer_armed = false;
        self.cache.wb_expired_before = Some(now.saturating_sub(self.cache.dirty_expire));
        self.kick_writeback(now);
        if self.cache.pc.dirty_pages() > 0 && !self.cache.wb_timer_armed && !self.all_done() {
            self.cache.wb_timer_armed = true;
            self.q
                .push(now + self.cache.wb_interval, Event::WbTimer.pack());
        }
    }

    /// All device requests of barrier `b` completed: continue with `cont`.
    pub(super) fn barrier_continue(&mut self, now: Ns, b: usize, cont: Cont) {
        match cont {
            Cont::DirectDone(r) => {
                let (op, disk) = (self.guest.vreqs.get(r).op, self.guest.vreqs.get(r).disk);
                if op == Op::Write && self.cache.files[disk].mode.write_through() {
                    self.flush_volume(now, r);
                } else {
                    self.host_finish(now, r);
                }
            }
            Cont::Fetch {
                file,
                first,
                n,
                waiters,
            } => {
                self.cache.pc.complete_fetch(file, first, n, b as u32);
                for r in waiters {
                    let v = self.guest.vreqs.get(r);
                    v.waits -= 1;
                    if v.waits == 0 {
                        let len = v.len;
                        let t = self.copy_done(now, len);
                        self.q.push(t, Event::HostDone(r).pack());
                    }
                }
            }
            Cont::Writeback { disk, pages } => {
                self.cache.wb_inflight_pages -= pages;
                let d = &mut self.cache.files[disk];
                d.wb_inflight -= 1;
                if d.wb_inflight == 0 {
                    for r in std::mem::take(&mut d.fsync_waiters) {
                        self.flush_volume(now, r);
                    }
                }
                while !self.cache.throttled.is_empty()
                    && self.cache.pc.dirty_pages() + self.cache.wb_inflight_pages
                        <= self.cache.dirty_limit
                {
                    let r = self.cache.throttled.pop_front().unwrap();
                    self.host_finish(now, r);
                }
                self.kick_writeback(now);
            }
            Cont::FsyncWrites(r) => {
                let disk = self.guest.vreqs.get(r).disk;
                if self.cache.files[disk].wb_inflight > 0 {
                    self.cache.files[disk].fsync_waiters.push(r);
                } else {
                    self.flush_volume(now, r);
                }
            }
            Cont::WriteThrough(r) => self.flush_volume(now, r),
            Cont::FlushDone(r) => self.host_finish(now, r),
        }
    }
}
