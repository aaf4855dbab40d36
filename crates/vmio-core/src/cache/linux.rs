//! The Linux host page cache under QEMU's cache modes: the [`HostCache`] of a KVM host whose
//! QEMU opens each disk image as a file (`block/file-posix.c`).
//!
//! Sources: QEMU `-drive cache=` ([`super::mode`]); Linux mm/filemap.c (buffered read and
//! write), mm/readahead.c ([`super::readahead`]), mm/page-writeback.c (balance_dirty_pages:
//! dirty_ratio, dirty_background_ratio), fs/fs-writeback.c (wb_workfn: dirty_expire_centisecs,
//! dirty_writeback_centisecs; MAX_WRITEBACK_PAGES), fs/sync.c (fdatasync).
//!
//! ```text
//! on_request(r):
//!   FLUSH  : unsafe → Complete; O_DIRECT mode → Flush; buffered → fsync(r)
//!   READ   (buffered): lookup; read-ahead plans a window; fetch the absent pages of the sync
//!            window, of the request and of the background window (Io read per absent range);
//!            if r's pages are in flight: wait for those fetches, else Copy(r)
//!   WRITE  (buffered): pages dirty (inserted if absent); Copy(r)
//!   O_DIRECT READ/WRITE, any TRIM: drop cached pages of a written range; Io(r's range)
//! on_copied(r) (a buffered write):
//!   writethrough (O_DSYNC): the pages become clean; Io write of them, then Flush
//!   write cache: kick writeback; throttled while dirty + under writeback > dirty_limit
//!                       (balance_dirty_pages), else Complete
//! fsync(r): write the disk's dirty pages (Io), wait for its writeback in flight, Flush
//! kick writeback: arm the periodic timer if pages are dirty; while under
//!   WB_MAX_INFLIGHT_PAGES: take up to WB_CHUNK_PAGES dirty pages, oldest first (only those
//!   dirtied before the expiry cut-off unless dirty > dirty_background); Io write (async)
//! writeback done: wake fsyncs waiting on the disk's writeback, release throttled writers
//!   in order while under dirty_limit, kick writeback
//! on_timer: expiry cut-off = now − dirty_expire; kick writeback; re-arm while dirty
//! real_io: O_DIRECT for none/directsync, O_DSYNC for writethrough/directsync, FLUSH
//!   ignored by unsafe, FUA needs fdatasync unless O_DSYNC or unsafe
//! ```
//!
//! Requests are the engine's; the policy keeps what it needs of each (indexed by [`ReqId`])
//! and its pending fetches and fsyncs in slabs; other continuations are packed in the
//! [`Token`] itself, so the O_DIRECT path allocates nothing.
//!
//! Tunables: the `[page_cache]` table's keys are declared once, in [`PARAMS`] (name, accepted
//! values, default, source); the stack parser reads the table against them and
//! `vmio help stack` lists them. Defaults are Linux's (Documentation/admin-guide/sysctl/vm.rst):
//! vm.dirty_ratio 20, vm.dirty_background_ratio 10, vm.dirty_expire_centisecs 3000 (30 s),
//! vm.dirty_writeback_centisecs 500 (5 s); the cache may use half the host memory and copies
//! run at 21.33 GB/s (see [`COPY_RATE`]).

use super::pagecache::{PageCache, PageRange, ReadLookup};
use super::{
    page_span, Action, CacheMode, Eviction, FileCache, FlushRule, HostCache, HostCacheStats,
    HostDisk, PageCacheSpec, Readahead, RealIo, ReqId, Request, Token, PAGE_BYTES,
};
use crate::params::{Kind, ParamSpec, Value};
use crate::request::Op;
use crate::slab::Slab;
use crate::{Ns, SEC};
use std::collections::VecDeque;

/// `[page_cache] memory`: the cache's size. Its default is computed by the stack parser from
/// `[host] memory` (a text default: see [`crate::params::Values::int_or`]).
pub const MEMORY: ParamSpec = ParamSpec {
    name: "memory",
    kind: Kind::SIZE,
    default: Value::Computed("half of [host] memory"),
    unit: "bytes",
    help: "host memory the page cache may use (at most [host] memory)",
};
/// A percentage of the cache, as Linux's `vm.dirty_*ratio` sysctls accept it.
const RATIO: Kind = Kind::Count { min: 0, max: 100 };
pub const DIRTY_RATIO: ParamSpec = ParamSpec {
    name: "dirty_ratio",
    kind: RATIO,
    default: Value::Int(20),
    unit: "",
    help: "% of the cache dirty at which writers are throttled (vm.dirty_ratio, Linux: 20)",
};
pub const DIRTY_BACKGROUND_RATIO: ParamSpec = ParamSpec {
    name: "dirty_background_ratio",
    kind: RATIO,
    default: Value::Int(10),
    unit: "",
    help: "% of the cache dirty at which writeback starts regardless of age, at most dirty_ratio (vm.dirty_background_ratio, Linux: 10)",
};
pub const DIRTY_EXPIRE: ParamSpec = ParamSpec {
    name: "dirty_expire",
    kind: Kind::Duration {
        bare: SEC,
        positive: false,
    },
    default: Value::Int(30 * SEC),
    unit: "ns",
    help: "age at which dirty data is written back (vm.dirty_expire_centisecs, Linux: 3000 = 30s)",
};
pub const WRITEBACK_INTERVAL: ParamSpec = ParamSpec {
    name: "writeback_interval",
    kind: Kind::Duration {
        bare: SEC,
        positive: true,
    },
    default: Value::Int(5 * SEC),
    unit: "ns",
    help: "period of the flusher (vm.dirty_writeback_centisecs, Linux: 500 = 5s)",
};
/// Memory-copy bandwidth of the host for page-cache hits and buffered writes, shared by all
/// copies: dual-channel DDR4-2666 peaks at 42.7 GB/s (2 × 8 B × 2666 MT/s, JEDEC JESD79-4)
/// and a copy reads and writes every byte, so 21.33 GB/s.
pub const COPY_RATE: ParamSpec = ParamSpec {
    name: "copy_rate",
    kind: Kind::Rate,
    default: Value::Int(21_330_000_000),
    unit: "bps",
    help: "host memory-copy bandwidth shared by page-cache hits and buffered writes (21.33 GB/s: half of dual-channel DDR4-2666's peak, a copy reads and writes)",
};
/// The `[page_cache]` parameters, in the order result records list them (`memory_bytes`,
/// `dirty_ratio`, ...: each [`PageCacheSpec`] field is a parameter's record key).
pub const PARAMS: &[ParamSpec] = &[
    MEMORY,
    DIRTY_RATIO,
    DIRTY_BACKGROUND_RATIO,
    DIRTY_EXPIRE,
    WRITEBACK_INTERVAL,
    COPY_RATE,
];

/// Pages of writeback kept in flight at most (block-layer queues bound it in Linux).
const WB_MAX_INFLIGHT_PAGES: u64 = 16 * 1024;
/// Pages per writeback chunk (MAX_WRITEBACK_PAGES, 4 MiB).
const WB_CHUNK_PAGES: u64 = 1024;

/// What completes when a token comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cont {
    /// The O_DIRECT I/O (or trim) of a request.
    Direct(ReqId),
    /// A fetch (index into `pending`).
    Fetch(u32),
    /// A writeback chunk of `pages` pages of `disk`.
    Writeback { disk: u32, pages: u32 },
    /// One of an fsync's writes (index into `pending`).
    Fsync(u32),
    /// The O_DSYNC write of a writethrough request.
    WriteThrough(ReqId),
    /// The FLUSH CACHE of a request.
    Flushed(ReqId),
}

const KIND_SHIFT: u32 = 56;

impl Cont {
    fn token(self) -> Token {
        let (kind, payload) = match self {
            Cont::Direct(r) => (1, u64::from(r)),
            Cont::Fetch(i) => (2, u64::from(i)),
            Cont::Writeback { disk, pages } => (3, u64::from(disk) | u64::from(pages) << 32),
            Cont::Fsync(i) => (4, u64::from(i)),
            Cont::WriteThrough(r) => (5, u64::from(r)),
            Cont::Flushed(r) => (6, u64::from(r)),
        };
        Token(kind << KIND_SHIFT | payload)
    }

    fn of(t: Token) -> Self {
        let low = t.0 as u32;
        match t.0 >> KIND_SHIFT {
            1 => Cont::Direct(low),
            2 => Cont::Fetch(low),
            3 => Cont::Writeback {
                disk: low,
                pages: (t.0 >> 32) as u32 & ((1 << (KIND_SHIFT - 32)) - 1),
            },
            4 => Cont::Fsync(low),
            5 => Cont::WriteThrough(low),
            _ => Cont::Flushed(low),
        }
    }
}

/// Pages `[first, first + n)` of `file` being read into the cache, and the reads waiting.
struct Fetch {
    file: u32,
    first: u64,
    n: u64,
    waiters: Vec<ReqId>,
}

/// An fsync whose writes of dirty pages are in flight.
struct Fsync {
    req: ReqId,
    remaining: u32,
}

#[derive(Clone, Copy, Debug)]
struct ReqInfo {
    disk: u32,
    op: Op,
    offset: u64,
    len: u64,
    /// Fetches a buffered read waits for.
    waits: u32,
}

struct Disk {
    mode: CacheMode,
    size_bytes: u64,
    ra: Readahead,
    /// Writeback chunks of this disk in flight.
    wb_inflight: u32,
    /// Fsyncs whose own writes are done, waiting for that writeback.
    fsync_waiters: Vec<ReqId>,
}

/// The Linux page cache under QEMU's cache modes, pages evicted by `E`.
pub struct Linux<E: Eviction> {
    pc: PageCache<E>,
    disks: Vec<Disk>,
    reqs: Vec<ReqInfo>,
    fetches: Slab<Fetch>,
    fsyncs: Slab<Fsync>,
    dirty_limit: u64,
    dirty_bg: u64,
    dirty_expire: Ns,
    wb_interval: Ns,
    wb_inflight_pages: u64,
    wb_expired_before: Option<Ns>,
    wb_timer_armed: bool,
    throttled: VecDeque<ReqId>,
    lookup: ReadLookup,
    ranges: Vec<PageRange>,
    waits: Vec<u32>,
    flushes: u64,
    fsync_written_pages: u64,
}

/// An Io action for whole pages `[first, first + n)` of `disk`.
fn pages_io(disk: u32, op: Op, first: u64, n: u64, sync: bool, cont: Cont) -> Action {
    Action::Io {
        disk,
        op,
        offset: first * PAGE_BYTES,
        len: n * PAGE_BYTES,
        sync,
        token: cont.token(),
    }
}

impl<E: Eviction> Linux<E> {
    pub fn new(spec: &PageCacheSpec, disks: Vec<HostDisk>) -> Self {
        let cap_pages = spec.memory_bytes / PAGE_BYTES;
        Self {
            pc: PageCache::new(cap_pages),
            disks: disks
                .into_iter()
                .map(|d| Disk {
                    mode: d.mode,
                    size_bytes: d.size_bytes,
                    ra: Readahead::new(d.read_ahead_pages),
                    wb_inflight: 0,
                    fsync_waiters: Vec::new(),
                })
                .collect(),
            reqs: Vec::new(),
            fetches: Slab::new(),
            fsyncs: Slab::new(),
            dirty_limit: cap_pages * spec.dirty_ratio as u64 / 100,
            dirty_bg: cap_pages * spec.dirty_background_ratio as u64 / 100,
            dirty_expire: spec.dirty_expire_ns,
            wb_interval: spec.writeback_interval_ns,
            wb_inflight_pages: 0,
            wb_expired_before: None,
            wb_timer_armed: false,
            throttled: VecDeque::new(),
            lookup: ReadLookup::default(),
            ranges: Vec::new(),
            waits: Vec::new(),
            flushes: 0,
            fsync_written_pages: 0,
        }
    }

    /// [`Self::new`], boxed (the registry's constructor).
    pub fn boxed(spec: &PageCacheSpec, disks: Vec<HostDisk>) -> Box<dyn HostCache> {
        Box::new(Self::new(spec, disks))
    }

    /// A guest's page cache with no file yet, boxed (the registry's constructor).
    pub fn boxed_files(spec: &PageCacheSpec) -> Box<dyn FileCache> {
        Box::new(Self::new(spec, Vec::new()))
    }

    fn flush(&mut self, r: ReqId, out: &mut Vec<Action>) {
        self.flushes += 1;
        out.push(Action::Flush {
            disk: self.reqs[r as usize].disk,
            token: Cont::Flushed(r).token(),
        });
    }

    fn buffered_read(&mut self, r: ReqId, out: &mut Vec<Action>) {
        let ReqInfo {
            disk, offset, len, ..
        } = self.reqs[r as usize];
        let (first, n) = page_span(offset, len);
        let disk_pages = self.disks[disk as usize].size_bytes / PAGE_BYTES;
        self.pc.read(disk, first, n, &mut self.lookup);
        let missing = !self.lookup.missing.is_empty();
        let plan = self.disks[disk as usize].ra.on_read(first, n, missing);
        let mut fetched = false;
        if let Some((s, k)) = plan.sync {
            fetched |= self.fetch(disk, s, k.min(disk_pages.saturating_sub(s)), out);
        }
        if missing {
            // Taken out only on a miss: a hit moves nothing.
            let lookup = std::mem::take(&mut self.lookup);
            for m in &lookup.missing {
                fetched |= self.fetch(disk, m.first, m.n, out);
            }
            self.lookup = lookup;
        }
        if let Some((s, k)) = plan.background {
            if s < disk_pages {
                self.fetch(disk, s, k.min(disk_pages - s), out);
            }
        }
        let wait_any = fetched || !self.lookup.waits.is_empty();
        if wait_any {
            self.waits.clear();
            self.pc.pending_fetches(disk, first, n, &mut self.waits);
            self.reqs[r as usize].waits = self.waits.len() as u32;
            for &w in &self.waits {
                self.fetches.get(w as usize).waiters.push(r);
            }
            if !self.waits.is_empty() {
                return;
            }
        }
        out.push(Action::Copy {
            req: r,
            bytes: len,
            complete: true,
        });
    }

    /// Fetch the absent pages of a range into the page cache. Returns whether any fetch was
    /// issued.
    fn fetch(&mut self, disk: u32, first: u64, n: u64, out: &mut Vec<Action>) -> bool {
        if n == 0 {
            return false;
        }
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        self.pc.absent(disk, first, n, &mut ranges);
        let any = !ranges.is_empty();
        for rg in &ranges {
            let id = self.fetches.insert(Fetch {
                file: disk,
                first: rg.first,
                n: rg.n,
                waiters: Vec::new(),
            }) as u32;
            self.pc.begin_fetch(disk, rg.first, rg.n, id);
            out.push(pages_io(
                disk,
                Op::Read,
                rg.first,
                rg.n,
                true,
                Cont::Fetch(id),
            ));
        }
        self.ranges = ranges;
        any
    }

    /// fdatasync of a buffered disk: write its dirty pages, then wait for its writeback.
    fn fsync(&mut self, r: ReqId, out: &mut Vec<Action>) {
        let disk = self.reqs[r as usize].disk;
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        self.pc.take_dirty(Some(disk), None, u64::MAX, &mut ranges);
        if ranges.is_empty() {
            self.fsync_written(r, out);
        } else {
            let id = self.fsyncs.insert(Fsync {
                req: r,
                remaining: ranges.len() as u32,
            }) as u32;
            for rg in &ranges {
                self.fsync_written_pages += rg.n;
                out.push(pages_io(
                    disk,
                    Op::Write,
                    rg.first,
                    rg.n,
                    true,
                    Cont::Fsync(id),
                ));
            }
        }
        self.ranges = ranges;
    }

    /// An fsync's own writes are done: flush once the disk's writeback in flight is.
    fn fsync_written(&mut self, r: ReqId, out: &mut Vec<Action>) {
        let disk = self.reqs[r as usize].disk as usize;
        if self.disks[disk].wb_inflight > 0 {
            self.disks[disk].fsync_waiters.push(r);
        } else {
            self.flush(r, out);
        }
    }

    fn kick_writeback(&mut self, now: Ns, out: &mut Vec<Action>) {
        if !self.wb_timer_armed && self.pc.dirty_pages() > 0 {
            self.wb_timer_armed = true;
            out.push(Action::Timer {
                at: now + self.wb_interval,
            });
        }
        while self.wb_inflight_pages < WB_MAX_INFLIGHT_PAGES {
            let expired = self
                .wb_expired_before
                .filter(|&t| self.pc.oldest_dirty_ns().is_some_and(|o| o <= t));
            let background = self.pc.dirty_pages() > self.dirty_bg;
            if expired.is_none() && !background {
                self.wb_expired_before = None;
                break;
            }
            let mut ranges = std::mem::take(&mut self.ranges);
            ranges.clear();
            let taken = self
                .pc
                .take_dirty(None, expired, WB_CHUNK_PAGES, &mut ranges);
            if taken == 0 {
                self.ranges = ranges;
                break;
            }
            self.wb_inflight_pages += taken;
            for rg in &ranges {
                self.disks[rg.file as usize].wb_inflight += 1;
                let cont = Cont::Writeback {
                    disk: rg.file,
                    pages: rg.n as u32,
                };
                out.push(pages_io(rg.file, Op::Write, rg.first, rg.n, false, cont));
            }
            self.ranges = ranges;
        }
    }

    /// Keep what the policy needs of `req` under its id.
    fn record(&mut self, req: Request) {
        let r = req.id;
        if self.reqs.len() <= r as usize {
            self.reqs.resize(
                r as usize + 1,
                ReqInfo {
                    disk: 0,
                    op: Op::Read,
                    offset: 0,
                    len: 0,
                    waits: 0,
                },
            );
        }
        self.reqs[r as usize] = ReqInfo {
            disk: req.disk,
            op: req.op,
            offset: req.offset,
            len: req.len,
            waits: 0,
        };
    }

    /// The O_DIRECT path: drop the cached pages of a written or trimmed range; Io the range.
    fn direct(&mut self, req: Request, out: &mut Vec<Action>) {
        if req.op != Op::Read {
            let (first, n) = page_span(req.offset, req.len);
            self.pc.invalidate(req.disk, first, n);
        }
        out.push(Action::Io {
            disk: req.disk,
            op: req.op,
            offset: req.offset,
            len: req.len,
            sync: true,
            token: Cont::Direct(req.id).token(),
        });
    }

    fn over_dirty_limit(&self) -> bool {
        self.pc.dirty_pages() + self.wb_inflight_pages > self.dirty_limit
    }
}

impl<E: Eviction> HostCache for Linux<E> {
    fn on_request(&mut self, now: Ns, req: Request, out: &mut Vec<Action>) {
        let r = req.id;
        self.record(req);
        let mode = self.disks[req.disk as usize].mode;
        match req.op {
            Op::Flush => {
                if mode.ignores_flush() {
                    out.push(Action::Complete { req: r });
                } else if mode.direct() {
                    self.flush(r, out);
                } else {
                    self.fsync(r, out);
                }
            }
            Op::Read if !mode.direct() => self.buffered_read(r, out),
            Op::Write if !mode.direct() => {
                let (first, n) = page_span(req.offset, req.len);
                self.pc.write(now, req.disk, first, n);
                out.push(Action::Copy {
                    req: r,
                    bytes: req.len,
                    complete: false,
                });
            }
            Op::Read | Op::Write | Op::Trim => self.direct(req, out),
        }
    }

    fn bypass(&mut self, _now: Ns, req: Request, out: &mut Vec<Action>) {
        self.record(req);
        self.direct(req, out);
    }

    fn on_copied(&mut self, now: Ns, r: ReqId, out: &mut Vec<Action>) {
        let ReqInfo {
            disk, offset, len, ..
        } = self.reqs[r as usize];
        if self.disks[disk as usize].mode.write_through() {
            let (first, n) = page_span(offset, len);
            self.pc.clean_range(disk, first, n);
            out.push(pages_io(
                disk,
                Op::Write,
                first,
                n,
                true,
                Cont::WriteThrough(r),
            ));
            return;
        }
        self.kick_writeback(now, out);
        if self.over_dirty_limit() {
            self.throttled.push_back(r);
        } else {
            out.push(Action::Complete { req: r });
        }
    }

    fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<Action>) {
        match Cont::of(token) {
            Cont::Direct(r) => {
                let ReqInfo { disk, op, .. } = self.reqs[r as usize];
                if op == Op::Write && self.disks[disk as usize].mode.write_through() {
                    self.flush(r, out);
                } else {
                    out.push(Action::Complete { req: r });
                }
            }
            Cont::Fetch(id) => {
                let Fetch {
                    file,
                    first,
                    n,
                    waiters,
                } = self.fetches.remove(id as usize);
                self.pc.complete_fetch(file, first, n, id);
                for r in waiters {
                    let v = &mut self.reqs[r as usize];
                    v.waits -= 1;
                    if v.waits == 0 {
                        out.push(Action::Copy {
                            req: r,
                            bytes: v.len,
                            complete: true,
                        });
                    }
                }
            }
            Cont::Writeback { disk, pages } => {
                self.wb_inflight_pages -= u64::from(pages);
                let d = &mut self.disks[disk as usize];
                d.wb_inflight -= 1;
                if d.wb_inflight == 0 {
                    for r in std::mem::take(&mut d.fsync_waiters) {
                        self.flush(r, out);
                    }
                }
                while !self.throttled.is_empty() && !self.over_dirty_limit() {
                    let r = self.throttled.pop_front().unwrap();
                    out.push(Action::Complete { req: r });
                }
                self.kick_writeback(now, out);
            }
            Cont::Fsync(id) => {
                let f = self.fsyncs.get(id as usize);
                f.remaining -= 1;
                if f.remaining == 0 {
                    let r = self.fsyncs.remove(id as usize).req;
                    self.fsync_written(r, out);
                }
            }
            Cont::WriteThrough(r) => self.flush(r, out),
            Cont::Flushed(r) => out.push(Action::Complete { req: r }),
        }
    }

    fn on_timer(&mut self, now: Ns, out: &mut Vec<Action>) {
        self.wb_timer_armed = false;
        self.wb_expired_before = Some(now.saturating_sub(self.dirty_expire));
        self.kick_writeback(now, out);
        if self.pc.dirty_pages() > 0 && !self.wb_timer_armed {
            self.wb_timer_armed = true;
            out.push(Action::Timer {
                at: now + self.wb_interval,
            });
        }
    }

    fn real_io(&self, disk: u32) -> RealIo {
        let mode = self.disks[disk as usize].mode;
        RealIo {
            o_direct: mode.direct(),
            o_dsync: mode.write_through(),
            flush: if mode.ignores_flush() {
                FlushRule::Ignore
            } else {
                FlushRule::Honour
            },
            fua_sync: !mode.ignores_flush() && !mode.write_through(),
        }
    }

    fn stats(&self) -> HostCacheStats {
        HostCacheStats {
            pages: self.pc.stats(),
            cached_pages: self.pc.cached_pages(),
            dirty_pages: self.pc.dirty_pages(),
            flushes: self.flushes,
            fsync_written_pages: self.fsync_written_pages,
        }
    }
}

impl<E: Eviction> FileCache for Linux<E> {
    fn add_file(&mut self, d: HostDisk) -> u32 {
        self.disks.push(Disk {
            mode: d.mode,
            size_bytes: d.size_bytes,
            ra: Readahead::new(d.read_ahead_pages),
            wb_inflight: 0,
            fsync_waiters: Vec::new(),
        });
        (self.disks.len() - 1) as u32
    }

    fn set_size(&mut self, file: u32, size_bytes: u64) {
        self.disks[file as usize].size_bytes = size_bytes;
    }

    fn drop_pages(&mut self, file: u32, first: u64, n: u64) {
        self.pc.invalidate(file, first, n);
    }

    fn drop_file(&mut self, file: u32, clean_only: bool) {
        self.pc.drop_file(file, clean_only);
    }

    fn dirty(&mut self, now: Ns, file: u32, first: u64, n: u64, out: &mut Vec<Action>) {
        self.pc.write(now, file, first, n);
        self.kick_writeback(now, out);
    }

    fn clean(&mut self, file: u32, first: u64, n: u64) {
        self.pc.clean_range(file, first, n);
    }

    fn flush_request(&self, token: Token) -> ReqId {
        match Cont::of(token) {
            Cont::Flushed(r) => r,
            other => panic!("token {token:?} is {other:?}, not a Flush action's"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::eviction::Clock;
    use crate::SEC;

    const MIB: u64 = 1 << 20;

    /// A page cache of `memory_bytes` with Linux's dirty defaults (20 %, 10 %, 30 s, 5 s),
    /// CLOCK, and copies of 1 byte/s (tests that time nothing).
    pub(crate) fn linux_defaults(memory_bytes: u64) -> PageCacheSpec {
        PageCacheSpec {
            memory_bytes,
            dirty_ratio: 20,
            dirty_background_ratio: 10,
            dirty_expire_ns: 30 * SEC,
            writeback_interval_ns: 5 * SEC,
            copy_rate_bps: 1,
            eviction: "clock".into(),
        }
    }

    /// A 4 MiB cache (1024 pages; dirty limit 20 % = 204 pages, background 10 % = 102) over
    /// one 1 GiB disk with a 32-page read-ahead window.
    fn cache(mode: CacheMode) -> Linux<Clock> {
        let spec = linux_defaults(4 * MIB);
        let disk = HostDisk {
            mode,
            size_bytes: 1 << 30,
            read_ahead_pages: 32,
        };
        Linux::new(&spec, vec![disk])
    }

    fn req(id: ReqId, op: Op, offset: u64, len: u64) -> Request {
        Request {
            id,
            disk: 0,
            op,
            offset,
            len,
        }
    }

    fn token_of(a: &Action) -> Token {
        match *a {
            Action::Io { token, .. } | Action::Flush { token, .. } => token,
            _ => panic!("{a:?} has no token"),
        }
    }

    #[test]
    fn tokens_carry_their_continuation_back() {
        for c in [
            Cont::Direct(7),
            Cont::Fetch(u32::MAX),
            Cont::Writeback {
                disk: 3,
                pages: 1024,
            },
            Cont::Fsync(0),
            Cont::WriteThrough(9),
            Cont::Flushed(u32::MAX),
        ] {
            assert_eq!(Cont::of(c.token()), c);
        }
    }

    #[test]
    fn an_o_direct_read_is_one_device_read_then_complete() {
        let mut c = cache(CacheMode::None);
        let mut out = Vec::new();
        c.on_request(0, req(4, Op::Read, 8192, 4096), &mut out);
        assert!(matches!(
            out[..],
            [Action::Io {
                disk: 0,
                op: Op::Read,
                offset: 8192,
                len: 4096,
                sync: true,
                ..
            }]
        ));
        let t = token_of(&out[0]);
        out.clear();
        c.on_done(1, t, &mut out);
        assert_eq!(out, vec![Action::Complete { req: 4 }]);
    }

    #[test]
    fn a_directsync_write_is_flushed_before_it_completes() {
        let mut c = cache(CacheMode::Directsync);
        let mut out = Vec::new();
        c.on_request(0, req(1, Op::Write, 0, 4096), &mut out);
        let t = token_of(&out[0]);
        out.clear();
        c.on_done(1, t, &mut out);
        assert!(matches!(out[..], [Action::Flush { disk: 0, .. }]));
        let t = token_of(&out[0]);
        out.clear();
        c.on_done(2, t, &mut out);
        assert_eq!(out, vec![Action::Complete { req: 1 }]);
    }

    #[test]
    fn a_first_read_fetches_the_initial_read_ahead_window_and_waits_for_it() {
        // init_size(1 page) with a 32-page maximum: 4 pages (mm/readahead.c).
        let mut c = cache(CacheMode::Writeback);
        let mut out = Vec::new();
        c.on_request(0, req(0, Op::Read, 0, 4096), &mut out);
        assert!(matches!(
            out[..],
            [Action::Io {
                op: Op::Read,
                offset: 0,
                len: 16384,
                ..
            }]
        ));
        let t = token_of(&out[0]);
        out.clear();
        c.on_done(5, t, &mut out);
        assert_eq!(
            out,
            vec![Action::Copy {
                req: 0,
                bytes: 4096,
                complete: true
            }]
        );
        // Page 2 was read ahead: a hit, copied at once.
        out.clear();
        c.on_request(7, req(1, Op::Read, 8192, 4096), &mut out);
        assert_eq!(
            out,
            vec![Action::Copy {
                req: 1,
                bytes: 4096,
                complete: true
            }]
        );
    }

    #[test]
    fn buffered_writes_past_the_background_ratio_are_written_back_in_chunks() {
        // 150 pages dirty > 102 (10 % of 1024): everything dirty is written back, as one range.
        let mut c = cache(CacheMode::Writeback);
        let mut out = Vec::new();
        c.on_request(0, req(0, Op::Write, 0, 150 * 4096), &mut out);
        assert_eq!(
            out,
            vec![Action::Copy {
                req: 0,
                bytes: 150 * 4096,
                complete: false
            }]
        );
        out.clear();
        c.on_copied(1, 0, &mut out);
        assert!(matches!(
            out[..],
            [
                Action::Timer { at },
                Action::Io { op: Op::Write, offset: 0, len, sync: false, .. },
                Action::Complete { req: 0 },
            ] if at == 1 + 5 * SEC && len == 150 * 4096
        ));
    }

    #[test]
    fn a_writer_past_the_dirty_limit_waits_for_writeback() {
        // 300 pages dirty > 204 (20 % of 1024): the write is held until its writeback is done.
        let mut c = cache(CacheMode::Writeback);
        let mut out = Vec::new();
        c.on_request(0, req(0, Op::Write, 0, 300 * 4096), &mut out);
        out.clear();
        c.on_copied(1, 0, &mut out);
        assert!(!out.contains(&Action::Complete { req: 0 }));
        let wb = out.iter().find(|a| matches!(a, Action::Io { .. })).unwrap();
        let t = token_of(wb);
        out.clear();
        c.on_done(2, t, &mut out);
        assert_eq!(out, vec![Action::Complete { req: 0 }]);
    }

    #[test]
    fn an_fsync_writes_the_dirty_pages_then_flushes() {
        let mut c = cache(CacheMode::Writeback);
        let mut out = Vec::new();
        c.on_request(0, req(0, Op::Write, 0, 2 * 4096), &mut out);
        c.on_request(0, req(1, Op::Write, 10 * 4096, 4096), &mut out);
        out.clear();
        c.on_request(1, req(2, Op::Flush, 0, 0), &mut out);
        assert_eq!(out.len(), 2, "two dirty ranges: {out:?}");
        let (a, b) = (token_of(&out[0]), token_of(&out[1]));
        out.clear();
        c.on_done(2, a, &mut out);
        assert!(out.is_empty());
        c.on_done(3, b, &mut out);
        assert!(matches!(out[..], [Action::Flush { disk: 0, .. }]));
        let s = c.stats();
        assert_eq!((s.dirty_pages, s.fsync_written_pages, s.flushes), (0, 3, 1));
    }

    #[test]
    fn unsafe_acknowledges_a_flush_at_once() {
        let mut c = cache(CacheMode::Unsafe);
        let mut out = Vec::new();
        c.on_request(0, req(0, Op::Write, 0, 4096), &mut out);
        out.clear();
        c.on_request(0, req(1, Op::Flush, 0, 0), &mut out);
        assert_eq!(out, vec![Action::Complete { req: 1 }]);
    }

    #[test]
    fn real_io_follows_qemus_mode_table() {
        use CacheMode::*;
        use FlushRule::*;
        for (mode, o_direct, o_dsync, flush, fua_sync) in [
            (None, true, false, Honour, true),
            (Writeback, false, false, Honour, true),
            (Writethrough, false, true, Honour, false),
            (Directsync, true, true, Honour, false),
            (Unsafe, false, false, Ignore, false),
        ] {
            let want = RealIo {
                o_direct,
                o_dsync,
                flush,
                fua_sync,
            };
            assert_eq!(cache(mode).real_io(0), want, "{mode:?}");
        }
    }
}
