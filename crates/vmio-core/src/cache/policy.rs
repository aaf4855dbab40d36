//! The host-cache policy: what the host does with a VM disk's requests between the virtual
//! disk and the block devices, as decisions the engine carries out ([`Action`]s).
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
//! honoured, whether a FUA write needs an fdatasync. A new cache policy (PDC, issue #11) is
//! one implementation of [`HostCache`] used by both engines.
//!
//! Actions in the words of the design (fetch, write back, complete, wait, flush, drop): a
//! fetch and a writeback are an [`Action::Io`] (read or write of the device range under a
//! disk range), waiting is emitting nothing for a request until a later call, dropping
//! cached pages happens inside the policy (the kernel drops them in `vmio serve`).

use crate::cache::pagecache::PageCacheStats;
use crate::cache::pdc::JournalDetector;
use crate::cache::CacheMode;
use crate::request::Op;
use crate::Ns;

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
    /// supersedes them), one Io of the range, then Complete. PDC ([`super::pdc`]) sends the
    /// journal writes it detects here.
    fn bypass(&mut self, now: Ns, req: Request, out: &mut Vec<Action>);
    /// How `vmio serve` opens and syncs `disk` (an index into the disks the policy was built
    /// with).
    fn real_io(&self, disk: u32) -> RealIo;
    fn stats(&self) -> HostCacheStats;
    /// The journal detector of `disk` when the policy runs one (PDC, [`super::pdc`]).
    fn pdc(&self, _disk: u32) -> Option<&JournalDetector> {
        None
    }
}

/// A page cache whose files come and go: the guest's, whose files are the guest's block
/// devices and the inodes of its filesystems (`crate::guest`). The same policy as the host's
/// ([`super::linux::Linux`]): requests on a file with [`HostCache::on_request`], a FLUSH of a
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
