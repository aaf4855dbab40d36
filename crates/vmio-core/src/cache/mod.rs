//! Host caching: what the host does with a VM disk's I/O between QEMU and the block devices.
//!
//! - here: the trait lattice — [`HostCache`], whose decisions come back to the engine as
//!   [`Action`]s (the simulator executes them; `vmio serve` asks it for [`RealIo`]),
//!   [`FileCache`] (a guest's), [`Eviction`] (what [`eviction`]'s policies implement) — and
//!   the `[page_cache]` table ([`PageCacheSpec`]), which names a policy of
//!   [`eviction::REGISTRY`];
//! - [`linux`]: the Linux page cache under QEMU's cache modes (the one host cache today);
//! - [`pdc`]: S3's PDC, the guest journal's writes detected and sent around the cache;
//! - [`mode`]: the five QEMU cache modes as QEMU defines them (write cache flag, O_DIRECT,
//!   flush ignored) — what each does with reads, writes and flushes;
//! - [`pagecache`]: the page index with dirty tracking and in-flight fetches;
//! - [`eviction`]: which clean page a full cache gives up ([`eviction::REGISTRY`]: CLOCK,
//!   LRU; `[page_cache] eviction`);
//! - [`readahead`]: Linux's on-demand sequential read-ahead window.
//!
//! These are decisions only; the engine issues the device I/O they ask for.
//!
//! The modules below name only this one and the leaves they build on (`pagecache` names
//! `eviction`'s trait here; `linux` names `pagecache`; `eviction`'s registry names `linux`
//! and `pagecache`; `pdc` wraps any [`HostCache`]): what siblings share lives here.
//!
//! ## The host-cache policy
//!
//! What the host does with a VM disk's requests between the virtual disk and the block devices, as decisions the engine carries out ([`Action`]s).
//!
//! ```text
//! engine                                   policy (HostCache)
//!   request reaches the host      ──────>  on_request(now, req, out)
//!   out: Io / Flush / Copy / Complete / Timer, executed in order, never calling back
//!   the I/O or flush of `token` is done ─>  on_done(now, token, out)
//!   the copy of `req` is done      ──────>  on_copied(now, req, out)   (unless it completes)
//!   the timer fires                ──────>  on_timer(now, out)
//!   a write to send around the cache ──>  bypass(now, req, out)      (PDC's journal writes)
//!   vmio serve opens a disk        ──────>  real_io(disk): open flags, flush, FUA
//! ```
//!
//! The simulator interprets every action. `vmio serve` leaves the data to the kernel's page
//! cache and asks the policy only for [`RealIo`]: which open flags, whether a FLUSH is
//! honoured, whether a FUA write needs an fdatasync. A new cache policy (PDC, [`pdc`]) is one
//! implementation of [`HostCache`] used by both engines.
//!
//! Actions in the words of the design (fetch, write back, complete, wait, flush, drop): a
//! fetch and a writeback are an [`Action::Io`] (read or write of the device range under a
//! disk range), waiting is emitting nothing for a request until a later call, dropping
//! cached pages happens inside the policy (the kernel drops them in `vmio serve`).

pub mod eviction;
pub mod linux;
pub mod mode;
pub mod pagecache;
pub mod pdc;
pub mod readahead;

pub use mode::CacheMode;
pub use pagecache::{PageCache, PageRange, ReadLookup};
pub use readahead::Readahead;

use crate::params::{ParamError, Values};
use crate::request::Op;
use crate::table::{FieldError, Table};
use crate::Ns;
use pagecache::PageCacheStats;
use pdc::{JournalDetector, Pdc, PdcSpec};
use serde::Serialize;
use thiserror::Error;

/// The engine's id of a request at the host (the simulator's slot of the request).
pub type ReqId = u32;

/// A request reaching the host cache layer: `[offset, offset + len)` bytes of a VM disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: ReqId,
    pub disk: u32,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

/// What an action's completion means to the policy; opaque to the engine, which hands it
/// back to [`HostCache::on_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(pub u64);

/// A decision for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read, write or trim `[offset, offset + len)` bytes of `disk` on the devices of its
    /// volume (`sync`: a synchronous request for the scheduler); `on_done(token)` once every
    /// device piece completed.
    Io {
        disk: u32,
        op: Op,
        offset: u64,
        len: u64,
        sync: bool,
        token: Token,
    },
    /// FLUSH CACHE to every device of `disk`'s volume; `on_done(token)` once all completed.
    Flush { disk: u32, token: Token },
    /// Copy `bytes` between the page cache and guest memory for `req` (the host's memory
    /// bus); when done, `complete`: the host is done with `req` (a read); otherwise
    /// `on_copied(req)` decides (a buffered write: throttling, write-through).
    Copy {
        req: ReqId,
        bytes: u64,
        complete: bool,
    },
    /// The host is done with `req`: the VMM completes it to the guest.
    Complete { req: ReqId },
    /// Call `on_timer` at `at`.
    Timer { at: Ns },
}

/// Whether `vmio serve` acts on a guest FLUSH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushRule {
    /// fdatasync every backing file of the disk.
    Honour,
    /// Acknowledge without doing anything (data acknowledged may be lost on a crash).
    Ignore,
}

/// How `vmio serve` does a disk's I/O through the kernel, which then holds the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealIo {
    /// Open the backing files with O_DIRECT (around the host page cache).
    pub o_direct: bool,
    /// Open them with O_DSYNC (every write durable before it completes).
    pub o_dsync: bool,
    pub flush: FlushRule,
    /// A FUA write is followed by an fdatasync of the files it touched (false when every
    /// write already is durable, or when flushes are ignored).
    pub fua_sync: bool,
}

/// Page-cache figures for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCacheStats {
    pub pages: PageCacheStats,
    /// Pages cached at the end of the run, and how many of them are dirty.
    pub cached_pages: u64,
    pub dirty_pages: u64,
    /// Host flush work: FLUSH CACHEs sent to the devices, and pages written by fsyncs
    /// (a guest FLUSH on a buffered disk writes its dirty pages first).
    pub flushes: u64,
    pub fsync_written_pages: u64,
}

/// A VM disk as the host cache sees it (one open image: a page-cache "file").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostDisk {
    pub mode: CacheMode,
    pub size_bytes: u64,
    /// The volume's read-ahead window (`read_ahead_kb`), in pages.
    pub read_ahead_pages: u64,
}

/// A host-cache policy. Calls never reenter: the engine executes the actions a call pushed
/// onto `out` (in order) after it returns.
pub trait HostCache: Send {
    fn on_request(&mut self, now: Ns, req: Request, out: &mut Vec<Action>);
    fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<Action>);
    /// The copy of an [`Action::Copy`] with `complete: false` ended.
    fn on_copied(&mut self, now: Ns, req: ReqId, out: &mut Vec<Action>);
    fn on_timer(&mut self, now: Ns, out: &mut Vec<Action>);
    /// Serve `req` (a read or write) around the page cache, as O_DIRECT does whatever the
    /// disk's mode: cached pages of a written range are dropped (dirty ones too: the write
    /// supersedes them), one Io of the range, then Complete. PDC ([`pdc`]) sends the
    /// journal writes it detects here.
    fn bypass(&mut self, now: Ns, req: Request, out: &mut Vec<Action>);
    /// How `vmio serve` opens and syncs `disk` (an index into the disks the policy was built
    /// with).
    fn real_io(&self, disk: u32) -> RealIo;
    fn stats(&self) -> HostCacheStats;
    /// The journal detector of `disk` when the policy runs one (PDC, [`pdc`]).
    fn pdc(&self, _disk: u32) -> Option<&JournalDetector> {
        None
    }
}

/// A page cache whose files come and go: the guest's, whose files are the guest's block
/// devices and the inodes of its filesystems (`crate::guest`). The same policy as the host's
/// ([`linux::Linux`]): requests on a file with [`HostCache::on_request`], a FLUSH of a
/// buffered file being its fsync (write its dirty pages, wait for its writeback, then an
/// [`Action::Flush`] of the file that the caller carries out and reports with `on_done`).
pub trait FileCache: HostCache {
    /// A new file; returns its index (the `disk` of requests and actions).
    fn add_file(&mut self, file: HostDisk) -> u32;
    /// The file's size changed (read-ahead stops at its end).
    fn set_size(&mut self, file: u32, size_bytes: u64);
    /// Drop pages `[first, first + n)` of `file`, dirty or not (an O_DIRECT write's range).
    fn drop_pages(&mut self, file: u32, first: u64, n: u64);
    /// Drop every page of `file` (unlink, truncate to 0), or only its clean pages
    /// (`clean_only`: posix_fadvise DONTNEED, BLKFLSBUF, fio's `invalidate`).
    fn drop_file(&mut self, file: u32, clean_only: bool);
    /// Pages dirtied without a copy from a request (a journalled metadata block handed to the
    /// block device's cache after its commit): writeback takes them like any dirty page.
    fn dirty(&mut self, now: Ns, file: u32, first: u64, n: u64, out: &mut Vec<Action>);
    /// Pages `[first, first + n)` of `file` are no longer dirty: someone else writes them
    /// (a checkpoint), or the journal took them back.
    fn clean(&mut self, file: u32, first: u64, n: u64);
    /// The request whose fsync ends with the [`Action::Flush`] of `token` (the caller carries
    /// the FLUSH out its own way: a filesystem commits its journal).
    fn flush_request(&self, token: Token) -> ReqId;
}

/// What a slot holds, as an eviction policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// No page (a free slot).
    Free,
    /// A page that cannot be evicted: dirty, or being fetched.
    Busy,
    /// A clean page; `referenced` is its PG_referenced flag.
    Clean { referenced: bool },
}

/// The page cache's slots, seen by [`Eviction::victim`].
pub trait Slots {
    /// Slots allocated so far (live or free); slot numbers are `0..count()`.
    fn count(&self) -> usize;
    fn probe(&self, slot: u32) -> Probe;
    /// Clear the referenced flag of a clean page (CLOCK's second chance).
    fn clear_referenced(&mut self, slot: u32);
}

/// An eviction policy: orders the slots of the page cache.
pub trait Eviction: Default + Send + 'static {
    /// Name in `[page_cache] eviction = "..."`.
    const NAME: &'static str;
    /// One line for the accepted-values lists and help.
    const HELP: &'static str;
    /// Bytes of the policy's own state per slot (for the memory estimate).
    const SLOT_BYTES: u64 = 0;
    fn inserted(&mut self, _slot: u32) {}
    fn touched(&mut self, _slot: u32) {}
    fn removed(&mut self, _slot: u32) {}
    fn victim(&mut self, slots: &mut impl Slots) -> Option<u32>;
}

/// `[page_cache]` and `[vm.page_cache]`: `eviction` and the parameters of
/// [`linux::PARAMS`].
pub type RawPageCache = std::collections::BTreeMap<String, toml::Value>;

/// The page cache a stack describes: each field is the record key of one of
/// [`linux::PARAMS`] (`memory_bytes`, `dirty_expire_ns`, ...), where the meanings and
/// defaults are declared.
#[derive(Clone, Debug, Serialize)]
pub struct PageCacheSpec {
    pub memory_bytes: u64,
    pub dirty_ratio: u32,
    pub dirty_background_ratio: u32,
    pub dirty_expire_ns: Ns,
    pub writeback_interval_ns: Ns,
    /// Memory-copy bandwidth of the host for page-cache hits and buffered writes (bytes/s),
    /// shared by all copies ([`linux::COPY_RATE`]).
    pub copy_rate_bps: u64,
    /// Page eviction policy, a name of [`eviction::REGISTRY`] (shown only when not the
    /// default).
    #[serde(skip_serializing_if = "eviction::is_default")]
    pub eviction: String,
}

/// What a page-cache table's `memory` is measured against: its default, and the memory it
/// must fit in (bytes, and that memory's field: `host.memory`, `vm[0].memory`).
#[derive(Clone, Copy, Debug)]
pub struct CacheMemory<'a> {
    pub default_bytes: u64,
    pub limit_bytes: u64,
    pub limit_field: &'a str,
}

/// A page-cache table: `eviction` names a policy of [`eviction::REGISTRY`], the other keys
/// are read against [`linux::PARAMS`]; `memory` must fit in the memory it is measured
/// against, and `dirty_background_ratio` must not exceed `dirty_ratio`.
impl Table for PageCacheSpec {
    const KEY: &'static str = "page_cache";
    type Raw = RawPageCache;
    type Context<'a> = CacheMemory<'a>;

    fn from_raw(p: &RawPageCache, table: &str, cx: CacheMemory) -> Result<Self, FieldError> {
        let eviction = match p.get("eviction") {
            None => eviction::DEFAULT.to_string(),
            Some(toml::Value::String(e)) if eviction::find(e).is_some() => e.clone(),
            Some(other) => {
                let shown = other
                    .as_str()
                    .map_or_else(|| other.to_string(), String::from);
                return Err(FieldError::new(
                    format!("{table}.eviction"),
                    format!("'{shown}' is not valid; accepted: {}", eviction::accepted()),
                ));
            }
        };
        let mut v = Values::defaults(linux::PARAMS);
        v.read(p, &["eviction"]).map_err(|e| {
            FieldError::param(
                table,
                match e {
                    ParamError::Unknown { key, accepted } => ParamError::Unknown {
                        key,
                        accepted: format!("eviction, {accepted}"),
                    },
                    other => other,
                },
            )
        })?;
        let spec = PageCacheSpec {
            memory_bytes: v.int_or(linux::MEMORY.name, cx.default_bytes),
            // Counts of 0..=100.
            dirty_ratio: v.int(linux::DIRTY_RATIO.name) as u32,
            dirty_background_ratio: v.int(linux::DIRTY_BACKGROUND_RATIO.name) as u32,
            dirty_expire_ns: v.int(linux::DIRTY_EXPIRE.name),
            writeback_interval_ns: v.int(linux::WRITEBACK_INTERVAL.name),
            copy_rate_bps: v.int(linux::COPY_RATE.name),
            eviction,
        };
        if spec.memory_bytes > cx.limit_bytes {
            return Err(FieldError::new(
                format!("{table}.memory"),
                format!(
                    "{} bytes exceeds {} ({} bytes)",
                    spec.memory_bytes, cx.limit_field, cx.limit_bytes
                ),
            ));
        }
        if spec.dirty_background_ratio > spec.dirty_ratio {
            return Err(FieldError::new(
                format!("{table}.dirty_background_ratio"),
                format!(
                    "{}: must not exceed {table}.dirty_ratio ({})",
                    spec.dirty_background_ratio, spec.dirty_ratio
                ),
            ));
        }
        Ok(spec)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("page_cache.eviction: '{name}' is not an eviction policy; accepted: {accepted}")]
    UnknownEviction { name: String, accepted: String },
}

fn eviction_of(spec: &PageCacheSpec) -> Result<&'static eviction::Registered, CacheError> {
    eviction::find(&spec.eviction).ok_or_else(|| CacheError::UnknownEviction {
        name: spec.eviction.clone(),
        accepted: eviction::accepted(),
    })
}

/// [`build_with`] with `[pdc]` at its defaults.
pub fn build(spec: &PageCacheSpec, disks: Vec<HostDisk>) -> Result<Box<dyn HostCache>, CacheError> {
    build_with(spec, &PdcSpec::default(), disks)
}

/// The host cache of a stack's `[page_cache]` and `[pdc]` over `disks` (every VM disk, in
/// stack order): the Linux page cache, under [`pdc::Pdc`] with a detector of `pdc` for each
/// `cache = "pdc"` disk when there is one.
pub fn build_with(
    spec: &PageCacheSpec,
    pdc: &PdcSpec,
    disks: Vec<HostDisk>,
) -> Result<Box<dyn HostCache>, CacheError> {
    let detectors: Vec<Option<JournalDetector>> = disks
        .iter()
        .map(|d| (d.mode == CacheMode::Pdc).then(|| JournalDetector::new(pdc)))
        .collect();
    let linux = (eviction_of(spec)?.linux)(spec, disks);
    Ok(if detectors.iter().any(Option::is_some) {
        Box::new(Pdc::new(linux, detectors))
    } else {
        linux
    })
}

/// The page cache of `spec` as a guest's, with no file yet ([`FileCache`]).
pub fn build_files(spec: &PageCacheSpec) -> Result<Box<dyn FileCache>, CacheError> {
    Ok((eviction_of(spec)?.files)(spec))
}

/// Bytes the page cache of `spec` can grow to (slots, index and eviction state).
pub fn estimated_bytes(spec: &PageCacheSpec) -> Result<u64, CacheError> {
    Ok((eviction_of(spec)?.estimated_bytes)(
        spec.memory_bytes / PAGE_BYTES,
    ))
}

/// Page size of the host page cache.
pub const PAGE_BYTES: u64 = 4096;

/// First page and page count covering `[offset, offset+len)`.
#[inline]
pub fn page_span(offset_bytes: u64, len_bytes: u64) -> (u64, u64) {
    let first = offset_bytes / PAGE_BYTES;
    let end = (offset_bytes + len_bytes).div_ceil(PAGE_BYTES);
    (first, end.saturating_sub(first))
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    fn stack(page_cache: &str) -> Result<Stack, String> {
        let text = format!(
            "[[device]]\nname = \"d\"\nmodel = \"ram\"\n[[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"d\"]\n[page_cache]\n{page_cache}\n[[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"1g\"\n"
        );
        Stack::from_toml(&text, "s.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn the_stack_chooses_the_eviction_policy_by_name_clock_by_default() {
        assert_eq!(stack("").unwrap().page_cache.eviction, "clock");
        assert_eq!(
            stack("eviction = \"lru\"").unwrap().page_cache.eviction,
            "lru"
        );
        assert_eq!(
            stack("eviction = \"arc\"").unwrap_err(),
            "s.toml: page_cache.eviction: 'arc' is not valid; accepted: clock, lru"
        );
    }

    #[test]
    fn the_default_eviction_is_left_out_of_the_effective_stack() {
        let shown = |pc: &str| toml::to_string(&stack(pc).unwrap().page_cache).unwrap();
        assert!(!shown("").contains("eviction"));
        assert!(shown("eviction = \"lru\"").contains("eviction = \"lru\""));
    }

    #[test]
    fn an_unknown_eviction_in_a_hand_made_spec_is_an_error_not_a_fallback() {
        let mut spec = stack("").unwrap().page_cache;
        spec.eviction = "arc".into();
        assert_eq!(
            super::build(&spec, Vec::new()).err().map(|e| e.to_string()),
            Some(
                "page_cache.eviction: 'arc' is not an eviction policy; accepted: clock, lru".into()
            )
        );
        spec.eviction = "lru".into();
        assert!(super::estimated_bytes(&spec).unwrap() > 0);
    }
}
