//! The guest kernel's storage path, one per VM: its page cache over its block devices and the
//! files of its ext4 filesystems, the filesystems' block allocation and their JBD2 journals.
//! A pure policy like the host cache ([`crate::cache::HostCache`]): the engine hands it the
//! application's operations and the completions of what it asked for; it answers with
//! [`Action`]s on the VM's virtual disks.
//!
//! ```text
//! engine                                   GuestOs
//!   application op (block or file) ──────> on_app(now, app, op, out)
//!   out: Io / Flush (on a virtual disk of the VM), Copy (guest memory), Complete (the op is
//!        done), Timer — executed in order, never calling back
//!   an Io or Flush of `token` done ──────> on_done(now, token, out)
//!   the Copy of `app` done ──────────────> on_copied(now, app, out)
//!   a Timer came ────────────────────────> on_timer(now, out)
//! ```
//!
//! Inside, three parts, each from its own module:
//!
//! - the **page cache** is the Linux page cache policy of the host ([`crate::cache::linux`]
//!   as a [`FileCache`]) with the guest's `[vm.page_cache]`: its files are the VM's block
//!   devices (buffered I/O on `/dev/vdX`, and the metadata blocks the journal hands back) and
//!   the inodes of its filesystems. Read-ahead, dirty limits and throttling
//!   (balance_dirty_pages), expiry and periodic writeback are that policy's;
//! - the **filesystem** ([`super::ext4`]) maps a file's pages to disk blocks and allocates
//!   blocks when the page cache writes pages back (delayed allocation);
//! - the **journal** ([`super::jbd2`]) collects the metadata blocks every operation dirties
//!   into the running transaction and plans its commit.
//!
//! How the parts meet (Linux 6.x: fs/ext4/inode.c ext4_writepages, fs/ext4/fsync.c
//! ext4_sync_file, fs/jbd2/commit.c, fs/jbd2/checkpoint.c, block/blk-flush.c):
//!
//! ```text
//! write(f, off, len), buffered : i_size grows → inode block dirty (i_sync_tid = running;
//!                                i_datasync_tid too when the new last byte's block is
//!                                allocated: i_disksize moves at once, ext4_da_write_end);
//!                                page cache write (copy; throttled over dirty_ratio)
//! page cache writes pages of f : allocate the unmapped blocks (bitmaps, descriptors, inode,
//!                                extent blocks dirty; i_sync_tid = i_datasync_tid = running;
//!                                data=ordered: f joins the running transaction's inodes);
//!                                one virtual-disk write per physical extent
//! page cache reads pages of f  : one read per mapped extent; holes read nothing
//! fsync(f) / fdatasync(f)      : page cache fsync of f (write its dirty pages, wait for its
//!                                writeback), then tid = i_sync_tid (fsync) | i_datasync_tid
//!                                (fdatasync): not yet committed → commit it (or wait for
//!                                the commit in progress) and wait; else a FLUSH (barrier)
//! O_SYNC / sync=1 write        : the write, then fsync (generic_write_sync)
//! O_DIRECT read/write          : the cached pages of the range dropped; blocks allocated at
//!                                once for a write; one virtual-disk request per extent
//! create / unlink / fallocate  : inode, bitmaps, directory block dirty; unlink drops f's pages
//! commit (timer at t_start + commit=, size, fsync, journal space):
//!   journal space low → checkpoint: write every dirty block-device page (the metadata
//!     at home), FLUSH, journal superblock (tail) write
//!   data=ordered: page cache fsync of each inode of the transaction (no FLUSH)
//!   descriptor + logged blocks (one write per contiguous journal range)
//!   barrier: FLUSH; commit block write; FLUSH   (virtio-blk has no FUA: blk-flush emulates
//!     REQ_FUA with a post-flush, so QEMU sees FLUSH, WRITE, FLUSH)
//!   committed: the logged metadata blocks become dirty pages of the block device (written
//!     home by normal writeback or a checkpoint); fsyncs waiting for the tid complete
//! block device I/O (no filesystem): the page cache over /dev/vdX; a FLUSH is its fsync
//! ```
//!
//! Simplifications, each a deliberate choice: layout before the run (fio's layout phase,
//! FileBench's prealloc) is untimed and leaves files on disk, uncached and clean, as after
//! `sync; echo 3 > drop_caches`; unwritten extents are not tracked (a fallocated file's
//! reads go to the disk); directories and inodes are always cached (dentry and inode
//! caches), so open, close and stat do no I/O; with data=journal the data pages go home at
//! writeback and into the journal at the next commit (jbd2 writes the journal first and the
//! home location at checkpoint: the same bytes, in the other order); the guest's CPU time
//! is not modelled. The guest's block layer (plug, merges, I/O scheduler) is
//! [`super::blk`], which the engine runs on the [`Action`]s of one call as one plug.

use super::ext4::{Ext4, Ext4Error, Layout, Mapped, MkfsOptions, BLOCK_BYTES};
use super::jbd2::{CheckpointStep, DataMode, Jbd2Error, Journal, JournalParams, JournalStats, Tid};
use super::params::FsSpec;
use crate::cache::{
    page_span, Action, CacheMode, FileCache, HostCacheStats, HostDisk, PageCacheSpec, ReqId,
    Request, Token, PAGE_BYTES,
};
use crate::request::Op;
use crate::slab::Slab;

use crate::workload::{FileDecl, FileLayout, FileOp};
use crate::Ns;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GuestError {
    #[error("{disk}: filesystem: {source}")]
    Fs {
        disk: String,
        #[source]
        source: Ext4Error,
    },
    #[error("{disk}: journal: {source}")]
    Journal {
        disk: String,
        #[source]
        source: Jbd2Error,
    },
    #[error("{0}")]
    Cache(String),
}

/// A VM disk as the guest sees it.
#[derive(Clone, Debug)]
pub struct GuestDisk {
    pub name: String,
    pub size_bytes: u64,
    /// The guest's read-ahead window on it (`read_ahead_kb`), in pages.
    pub read_ahead_pages: u64,
    pub fs: Option<FsSpec>,
}

/// An application operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppOp {
    /// Buffered I/O on the block device of VM disk `disk` (fio's `direct=0` on `/dev/vdb`);
    /// `Op::Flush` is its fsync; `sync`: O_SYNC (each write followed by an fsync).
    Block {
        disk: u32,
        op: Op,
        offset: u64,
        len: u64,
        sync: bool,
    },
    /// A file operation on a file opened with [`GuestOs::open_files`].
    File { handle: u32, op: FileOp },
}

/// What fio's `invalidate` drops.
#[derive(Clone, Copy, Debug)]
pub enum Invalidate<'a> {
    /// A VM disk's block device.
    Disk(u32),
    /// The files of these handles.
    Files(&'a [u32]),
}

/// What the guest did, for the report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GuestStats {
    pub cache: GuestCacheStats,
    /// Per VM disk (in order).
    pub disks: Vec<GuestDiskStats>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GuestCacheStats {
    pub hit_pages: u64,
    pub miss_pages: u64,
    pub hit_ratio: f64,
    pub cached_bytes: u64,
    pub dirty_bytes: u64,
    pub written_back_bytes: u64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GuestDiskStats {
    pub disk: String,
    /// Requests the guest sent to the virtual disk (before the virtual disk splits them).
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub journal_write_bytes: u64,
    /// `journal_write_bytes / write_bytes`.
    pub journal_share: f64,
    pub flushes: u64,
    /// Flushes sent by journal commits (before and after a commit block) and checkpoints.
    pub journal_flushes: u64,
    pub fsyncs: u64,
    /// fsyncs that forced or waited for a commit.
    pub fsyncs_committing: u64,
    /// Distinct 4 KiB blocks written, and how many of them lie in the journal.
    pub written_blocks: u64,
    pub journal_written_blocks: u64,
    /// The journal's blocks `[first, last]` on the disk, as mke2fs placed it (None without
    /// a filesystem).
    pub journal_extent: Option<[u64; 2]>,
    /// The lowest and highest block written inside the journal (None: none written).
    pub journal_written_extent: Option<[u64; 2]>,
    pub journal: Option<JournalReport>,
}

/// A journal's figures for the report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct JournalReport {
    pub commits: u64,
    /// Commits started because the transaction reached its size limit (not the timer or
    /// an fsync).
    pub size_commits: u64,
    pub mean_commit_blocks: f64,
    pub max_commit_blocks: u64,
    /// Commit sizes in journal blocks (descriptor, revoke, logged and commit blocks) and how
    /// many commits had each.
    pub commit_blocks_histogram: BTreeMap<u64, u64>,
    pub logged_blocks: u64,
    pub descriptor_blocks: u64,
    pub revoke_blocks: u64,
    pub superblock_writes: u64,
    pub journal_blocks_written: u64,
    pub checkpoints: u64,
    pub checkpoint_blocks: u64,
    /// Mean time from a transaction's first buffer to its commit.
    pub mean_running_ms: f64,
}

impl JournalReport {
    fn of(s: &JournalStats) -> Self {
        let mut hist = BTreeMap::new();
        for &b in &s.commit_blocks {
            *hist.entry(b).or_insert(0) += 1;
        }
        JournalReport {
            commits: s.commits,
            size_commits: s.size_commits,
            mean_commit_blocks: s.mean_commit_blocks(),
            max_commit_blocks: s.max_commit_blocks(),
            commit_blocks_histogram: hist,
            logged_blocks: s.logged_blocks,
            descriptor_blocks: s.descriptor_blocks,
            revoke_blocks: s.revoke_blocks,
            superblock_writes: s.superblock_writes,
            journal_blocks_written: s.journal_blocks_written(),
            checkpoints: s.checkpoints,
            checkpoint_blocks: s.checkpoint_blocks,
            mean_running_ms: s.mean_running_ns() / 1e6,
        }
    }
}

/// A page-cache file: a block device, an inode, or an inode since deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CacheFile {
    Bdev { disk: u32 },
    Inode { disk: u32, ino: u32 },
    Gone,
}

/// A file opened by a workload.
#[derive(Clone, Debug)]
struct Handle {
    disk: u32,
    dir: u32,
    /// Inode and page-cache file, while the file exists.
    ino: Option<(u32, u32)>,
}

/// Who asked the page cache for a request, and what follows its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// An application read or write (or a block device fsync).
    App(ReqId),
    /// An application fsync of a file (`datasync`: fdatasync).
    Fsync { app: ReqId, datasync: bool },
    /// An O_SYNC write's fsync.
    SyncAfter(ReqId),
    /// A commit's data=ordered writeback of one inode.
    Ordered { disk: u32 },
}

/// An application operation in flight.
#[derive(Clone, Copy, Debug, Default)]
struct AppState {
    /// The page-cache copy under way completes the page-cache request (a read hit).
    copy_completes: bool,
    /// The page-cache request whose copy is under way.
    lreq: ReqId,
    /// An O_SYNC write: fsync after the write.
    sync_file: Option<u32>,
}

/// What a group of virtual-disk requests finishing means.
#[derive(Clone, Copy, Debug)]
enum Then {
    /// Hand the page cache its token back.
    Cache(Token),
    /// Writeback of block-device pages `[first, first + n)` of `disk` (metadata going home),
    /// then the page cache's token.
    Home {
        disk: u32,
        first: u64,
        n: u64,
        token: Token,
    },
    /// An operation of `disk`'s journal sequence.
    Journal { disk: u32 },
    /// A data write of inode `ino` (writeback), then the page cache's token.
    InodeWrite { disk: u32, ino: u32, token: Token },
    /// An O_DIRECT application operation.
    Direct(ReqId),
    /// An fsync's FLUSH (no commit was needed): then the page cache's token.
    FsyncFlush(Token),
}

struct Join {
    remaining: u32,
    then: Then,
}

/// Bit of a token that marks it as the guest's own ([`Join`] index below it); the page
/// cache's tokens never set it.
const OWN: u64 = 1 << 63;

/// One operation of a journal sequence ([`Seq`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SeqOp {
    /// Write blocks `[start, start + n)` of the filesystem.
    Write(u64, u64),
    /// FLUSH the virtual disk.
    Flush,
    /// data=ordered: write and wait for the dirty pages of this page-cache file.
    Ordered(u32),
    /// data=ordered: wait for the writeback in flight of this inode.
    WaitInode(u32),
}

/// What a journal sequence's end means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SeqEnd {
    /// The commit of `tid` is durable.
    Committed(Tid),
    /// The superblock after commit `tid` is written: its fsyncs may go on.
    CommitTail(Tid),
    /// A checkpoint's writes home are done.
    HomeWritten,
    /// A checkpoint's tail move is done.
    CheckpointTail,
}

/// A journal sequence: phases of operations, each phase issued once the previous one
/// completed (jbd2 waits between the log, the commit record and the superblock).
struct Seq {
    phases: std::collections::VecDeque<Vec<SeqOp>>,
    /// Before a phase starts: the commit record of this tid goes out with it.
    record_phase: Option<(usize, Tid)>,
    started: usize,
    left: u32,
    end: SeqEnd,
}

impl Seq {
    fn new(
        phases: std::collections::VecDeque<Vec<SeqOp>>,
        record_phase: Option<(usize, Tid)>,
        end: SeqEnd,
    ) -> Self {
        Seq {
            phases,
            record_phase,
            started: 0,
            left: 0,
            end,
        }
    }
}

/// A journal superblock write that moves the log tail: FLUSH first when asked, the write,
/// then a FLUSH for its FUA (virtio-blk has none).
fn tail_phases(t: &super::jbd2::TailUpdate) -> std::collections::VecDeque<Vec<SeqOp>> {
    let mut phases = std::collections::VecDeque::new();
    if t.flush_first {
        phases.push_back(vec![SeqOp::Flush]);
    }
    phases.push_back(vec![SeqOp::Write(t.block, 1)]);
    if t.fua {
        phases.push_back(vec![SeqOp::Flush]);
    }
    phases
}

/// An fsync waiting for a commit.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    tid: Tid,
    token: Token,
    /// An empty FLUSH after the commit (it sent none for this fsync).
    flush: bool,
}

struct Fs {
    ext4: Ext4,
    journal: Journal,
    mode: DataMode,
    root: u32,
    /// Directory inodes by path.
    dirs: BTreeMap<String, u32>,
    /// The commit or checkpoint in progress.
    seq: Option<Seq>,
    /// Home blocks a checkpoint is writing.
    ckpt_blocks: Vec<u64>,
    /// The checkpoint must commit the running transaction before it can go on.
    ckpt_commit: bool,
    waiters: Vec<Waiter>,
    /// Data writes in flight per inode, and the inodes a commit waits on.
    inode_writes: BTreeMap<u32, u32>,
    waited_inodes: Vec<u32>,
    /// When the commit timer is due (one pending at a time).
    timer_at: Option<Ns>,
    journal_first: u64,
    journal_end: u64,
}

struct GDisk {
    name: String,
    bdev: u32,
    fs: Option<Fs>,
    stats: GuestDiskStats,
    /// Written 4 KiB blocks (a bit per block).
    written: Vec<u64>,
}

/// The guest kernel of one VM. See the module doc.
pub struct GuestOs {
    cache: Box<dyn FileCache>,
    files: Vec<CacheFile>,
    disks: Vec<GDisk>,
    handles: Vec<Handle>,
    by_path: BTreeMap<(u32, String), u32>,
    owners: Slab<Owner>,
    apps: Vec<AppState>,
    joins: Slab<Join>,
    buf: Vec<Action>,
    meta: Vec<u64>,
    mapped: Vec<Mapped>,
    cache_timer: Option<Ns>,
    read_ahead: Vec<u64>,
}

/// The filesystem of `disk` (callers only ask for disks with one).
fn fs_of(disks: &mut [GDisk], disk: u32) -> &mut Fs {
    disks[disk as usize].fs.as_mut().expect("a filesystem disk")
}

fn own(join: usize) -> Token {
    Token(OWN | join as u64)
}

impl GuestOs {
    /// The guest of a VM with page cache `spec` over `disks` (mkfs of each filesystem).
    pub fn new(spec: &PageCacheSpec, disks: &[GuestDisk]) -> Result<Self, GuestError> {
        let mut cache =
            crate::cache::build_files(spec).map_err(|e| GuestError::Cache(e.to_string()))?;
        let mut files = Vec::new();
        let mut gdisks = Vec::new();
        for (i, d) in disks.iter().enumerate() {
            let bdev = cache.add_file(HostDisk {
                mode: CacheMode::Writeback,
                size_bytes: d.size_bytes,
                read_ahead_pages: d.read_ahead_pages,
            });
            files.push(CacheFile::Bdev { disk: i as u32 });
            let fs = match &d.fs {
                None => None,
                Some(f) => Some(Self::mkfs(d, f)?),
            };
            gdisks.push(GDisk {
                name: d.name.clone(),
                bdev,
                fs,
                stats: GuestDiskStats {
                    disk: d.name.clone(),
                    ..Default::default()
                },
                written: Vec::new(),
            });
        }
        Ok(GuestOs {
            cache,
            files,
            disks: gdisks,
            handles: Vec::new(),
            by_path: BTreeMap::new(),
            owners: Slab::new(),
            apps: Vec::new(),
            joins: Slab::new(),
            buf: Vec::new(),
            meta: Vec::new(),
            mapped: Vec::new(),
            cache_timer: None,
            read_ahead: disks.iter().map(|d| d.read_ahead_pages).collect(),
        })
    }

    fn mkfs(d: &GuestDisk, f: &FsSpec) -> Result<Fs, GuestError> {
        let err = |source| GuestError::Fs {
            disk: d.name.clone(),
            source,
        };
        let mut opts = MkfsOptions::new(f.size_bytes.unwrap_or(d.size_bytes).min(d.size_bytes));
        opts.journal_blocks = f.journal_bytes.map(|b| b.div_ceil(BLOCK_BYTES));
        let layout = Layout::mkfs(&opts).map_err(err)?;
        let jerr = |source| GuestError::Journal {
            disk: d.name.clone(),
            source,
        };
        let mode = DataMode::parse(f.data).map_err(jerr)?;
        let mut p = JournalParams::ext4_default(layout.journal_start, layout.journal_blocks);
        p.commit_interval_ns = f.commit_ns;
        p.barrier = f.barrier;
        p.mode = mode;
        let journal = Journal::new(p).map_err(jerr)?;
        let (journal_first, journal_end) = (
            layout.journal_start,
            layout.journal_start + layout.journal_blocks,
        );
        let mut dirs = BTreeMap::new();
        dirs.insert(f.mount.clone(), 2);
        Ok(Fs {
            ext4: Ext4::new(layout),
            journal,
            mode,
            root: 2,
            dirs,
            seq: None,
            ckpt_blocks: Vec::new(),
            ckpt_commit: false,
            waiters: Vec::new(),
            inode_writes: BTreeMap::new(),
            waited_inodes: Vec::new(),
            timer_at: None,
            journal_first,
            journal_end,
        })
    }

    /// Open a workload's files on the filesystem of `disk`; returns a handle per file (files
    /// of equal paths share one). Files that exist before the run are laid out now (untimed:
    /// on disk, clean, uncached).
    pub fn open_files(&mut self, disk: u32, decls: &[FileDecl]) -> Result<Vec<u32>, GuestError> {
        let mut out = Vec::with_capacity(decls.len());
        for d in decls {
            let key = (disk, d.path.clone());
            if let Some(&h) = self.by_path.get(&key) {
                out.push(h);
                continue;
            }
            let dir = self.dir_of(disk, &d.path)?;
            let h = self.handles.len() as u32;
            self.handles.push(Handle {
                disk,
                dir,
                ino: None,
            });
            self.by_path.insert(key, h);
            if d.exists {
                self.lay_out(h, d)?;
            }
            out.push(h);
        }
        Ok(out)
    }

    fn fs_err(&self, disk: u32, source: Ext4Error) -> GuestError {
        GuestError::Fs {
            disk: self.disks[disk as usize].name.clone(),
            source,
        }
    }

    /// The directory inode of `path`'s parent, made (with its parents) if new.
    fn dir_of(&mut self, disk: u32, path: &str) -> Result<u32, GuestError> {
        let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
        let name = self.disks[disk as usize].name.clone();
        let fs = fs_of(&mut self.disks, disk);
        if let Some(&d) = fs.dirs.get(parent) {
            return Ok(d);
        }
        // Walk down from the deepest known ancestor.
        let mut known = parent;
        let mut ino = fs.root;
        while !known.is_empty() {
            if let Some(&d) = fs.dirs.get(known) {
                ino = d;
                break;
            }
            known = known.rsplit_once('/').map_or("", |(p, _)| p);
        }
        let rest: Vec<&str> = parent[known.len()..]
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let mut cur = known.to_string();
        for part in rest {
            cur = format!("{cur}/{part}");
            self.meta.clear();
            ino = fs
                .ext4
                .mkdir(ino, &mut self.meta)
                .map_err(|source| GuestError::Fs {
                    disk: name.clone(),
                    source,
                })?;
            fs.dirs.insert(cur.clone(), ino);
        }
        Ok(ino)
    }

    /// Create the inode of handle `h` (no journal: layout) and give it its size.
    fn lay_out(&mut self, h: u32, d: &FileDecl) -> Result<(), GuestError> {
        let Handle { disk, dir, .. } = self.handles[h as usize];
        let fs = fs_of(&mut self.disks, disk);
        self.meta.clear();
        let made = fs.ext4.create(dir, &mut self.meta).and_then(|ino| {
            let blocks = d.size_bytes.div_ceil(BLOCK_BYTES);
            if d.layout != FileLayout::Sparse && blocks > 0 {
                fs.ext4.allocate(ino, 0, blocks, &mut self.meta)?;
            }
            fs.ext4.set_size(ino, d.size_bytes, &mut self.meta);
            Ok(ino)
        });
        let ino = made.map_err(|e| self.fs_err(disk, e))?;
        let file = self.add_file(disk, ino, d.size_bytes);
        self.handles[h as usize].ino = Some((ino, file));
        Ok(())
    }

    fn add_file(&mut self, disk: u32, ino: u32, size: u64) -> u32 {
        let f = self.cache.add_file(HostDisk {
            mode: CacheMode::Writeback,
            size_bytes: size,
            read_ahead_pages: self.read_ahead[disk as usize],
        });
        debug_assert_eq!(f as usize, self.files.len());
        self.files.push(CacheFile::Inode { disk, ino });
        f
    }

    fn app_mut(&mut self, app: ReqId) -> &mut AppState {
        let i = app as usize;
        if self.apps.len() <= i {
            self.apps.resize(i + 1, AppState::default());
        }
        &mut self.apps[i]
    }

    /// A cleared buffer for the page cache's actions: the guest's own, or a new one while an
    /// outer call is using it.
    fn take_buf(&mut self) -> Vec<Action> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf
    }

    /// Carry out the page cache's actions in `buf`, then keep the buffer for the next call.
    fn run_buf(&mut self, now: Ns, mut buf: Vec<Action>, out: &mut Vec<Action>) {
        self.run(now, &mut buf, out);
        self.buf = buf;
    }

    /// A page-cache request on `file` for `owner`.
    #[allow(clippy::too_many_arguments)]
    fn cache_request(
        &mut self,
        now: Ns,
        owner: Owner,
        file: u32,
        op: Op,
        offset: u64,
        len: u64,
        out: &mut Vec<Action>,
    ) {
        let id = self.owners.insert(owner) as ReqId;
        if let Owner::App(app) = owner {
            self.app_mut(app).lreq = id;
        }
        let mut buf = self.take_buf();
        self.cache.on_request(
            now,
            Request {
                id,
                disk: file,
                op,
                offset,
                len,
            },
            &mut buf,
        );
        self.run_buf(now, buf, out);
    }

    /// An application operation.
    pub fn on_app(&mut self, now: Ns, app: ReqId, op: AppOp, out: &mut Vec<Action>) {
        *self.app_mut(app) = AppState::default();
        match op {
            AppOp::Block {
                disk,
                op,
                offset,
                len,
                sync,
            } => {
                let bdev = self.disks[disk as usize].bdev;
                if op == Op::Flush {
                    self.disks[disk as usize].stats.fsyncs += 1;
                }
                if sync && op == Op::Write {
                    self.app_mut(app).sync_file = Some(bdev);
                }
                self.cache_request(now, Owner::App(app), bdev, op, offset, len, out);
            }
            AppOp::File { handle, op } => self.file_op(now, app, handle, op, out),
        }
    }

    /// The metadata blocks in `self.meta` join the running transaction for inode `ino`
    /// (`datasync`: a change fdatasync must persist); a block the journal takes back from
    /// the block device's dirty pages is cleaned there (jbd2's do_get_write_access).
    fn touch_meta(&mut self, now: Ns, disk: u32, ino: u32, datasync: bool) {
        let bdev = self.disks[disk as usize].bdev;
        let fs = fs_of(&mut self.disks, disk);
        for &b in &self.meta {
            if fs.journal.dirty_metadata(now, b) {
                self.cache.clean(bdev, b, 1);
            }
        }
        if !self.meta.is_empty() {
            fs.journal.note_inode(ino, datasync);
        }
        self.meta.clear();
    }

    fn file_op(&mut self, now: Ns, app: ReqId, h: u32, op: FileOp, out: &mut Vec<Action>) {
        let Handle { disk, dir, ino } = self.handles[h as usize].clone();
        let done = |out: &mut Vec<Action>| out.push(Action::Complete { req: app });
        match op {
            FileOp::Create { .. } => {
                if ino.is_some() {
                    return done(out);
                }
                let fs = fs_of(&mut self.disks, disk);
                self.meta.clear();
                match fs.ext4.create(dir, &mut self.meta) {
                    Ok(i) => {
                        self.touch_meta(now, disk, i, true);
                        let f = self.add_file(disk, i, 0);
                        self.handles[h as usize].ino = Some((i, f));
                        self.arm_commit(now, disk, out);
                    }
                    // ENOSPC/ENOSPC on inodes: the operation fails, the run goes on.
                    Err(_) => self.meta.clear(),
                }
                done(out)
            }
            FileOp::Open { .. } | FileOp::Close { .. } | FileOp::Stat { .. } => done(out),
            FileOp::Delete { .. } => {
                if let Some((i, f)) = ino {
                    self.cache.drop_file(f, false);
                    self.files[f as usize] = CacheFile::Gone;
                    self.handles[h as usize].ino = None;
                    let fs = fs_of(&mut self.disks, disk);
                    self.meta.clear();
                    let _ = fs.ext4.unlink(i, &mut self.meta);
                    self.touch_meta(now, disk, i, true);
                    self.arm_commit(now, disk, out);
                }
                done(out)
            }
            FileOp::Fallocate { offset, len, .. } => {
                if let Some((i, f)) = ino {
                    let fs = fs_of(&mut self.disks, disk);
                    self.meta.clear();
                    let (first, n) = page_span(offset, len);
                    let _ = fs.ext4.allocate(i, first, n, &mut self.meta);
                    let size = fs.ext4.size(i).max(offset + len);
                    fs.ext4.set_size(i, size, &mut self.meta);
                    self.cache.set_size(f, size);
                    self.touch_meta(now, disk, i, true);
                    self.arm_commit(now, disk, out);
                }
                done(out)
            }
            FileOp::Fsync { datasync, .. } => {
                self.disks[disk as usize].stats.fsyncs += 1;
                match ino {
                    Some((_, f)) => self.cache_request(
                        now,
                        Owner::Fsync { app, datasync },
                        f,
                        Op::Flush,
                        0,
                        0,
                        out,
                    ),
                    None => done(out),
                }
            }
            FileOp::Read {
                offset, len, flags, ..
            } => {
                let Some((i, f)) = ino else { return done(out) };
                let size = self.disks[disk as usize]
                    .fs
                    .as_ref()
                    .map_or(0, |fs| fs.ext4.size(i));
                let len = len.min(size.saturating_sub(offset));
                if len == 0 {
                    return done(out);
                }
                if flags.direct {
                    self.direct(now, app, disk, i, f, Op::Read, offset, len, out);
                } else {
                    self.cache_request(now, Owner::App(app), f, Op::Read, offset, len, out);
                }
            }
            FileOp::Write { .. } | FileOp::Append { .. } => {
                let Some((i, f)) = ino else { return done(out) };
                let fs = fs_of(&mut self.disks, disk);
                let size = fs.ext4.size(i);
                let (offset, len, flags) = match op {
                    FileOp::Write {
                        offset, len, flags, ..
                    } => (offset, len, flags),
                    FileOp::Append { len, flags, .. } => (size, len, flags),
                    _ => unreachable!("matched above"),
                };
                self.meta.clear();
                let end = offset + len;
                // ext4_da_write_end: when the block of the new last byte is already
                // allocated, i_disksize moves now, and ext4_do_update_inode counts that
                // for fdatasync (need_datasync); over a delayed block it moves when
                // writeback allocates (a datasync change then).
                let mut datasync = false;
                if end > size {
                    datasync = fs.ext4.is_mapped(i, (end - 1) / BLOCK_BYTES);
                    fs.ext4.set_size(i, end, &mut self.meta);
                    self.cache.set_size(f, end);
                } else {
                    fs.ext4.touch(i, &mut self.meta);
                }
                self.touch_meta(now, disk, i, datasync);
                if flags.direct {
                    self.direct(now, app, disk, i, f, Op::Write, offset, len, out);
                } else {
                    if flags.sync {
                        self.app_mut(app).sync_file = Some(f);
                    }
                    self.cache_request(now, Owner::App(app), f, Op::Write, offset, len, out);
                }
                self.arm_commit(now, disk, out);
            }
        }
    }

    /// O_DIRECT file I/O: cached pages dropped, blocks allocated (a write), one virtual-disk
    /// request per extent.
    #[allow(clippy::too_many_arguments)]
    fn direct(
        &mut self,
        now: Ns,
        app: ReqId,
        disk: u32,
        ino: u32,
        file: u32,
        op: Op,
        offset: u64,
        len: u64,
        out: &mut Vec<Action>,
    ) {
        let (first, n) = page_span(offset, len);
        if op == Op::Write {
            self.cache.drop_pages(file, first, n);
            self.meta.clear();
            let fs = fs_of(&mut self.disks, disk);
            let _ = fs.ext4.allocate(ino, first, n, &mut self.meta);
            self.touch_meta(now, disk, ino, true);
        }
        let j = self.joins.insert(Join {
            remaining: 0,
            then: Then::Direct(app),
        });
        let issued = self.extents_io(disk, ino, op, first, n, j, out);
        if issued == 0 {
            self.joins.remove(j);
            out.push(Action::Complete { req: app });
        }
    }

    /// Virtual-disk requests for pages `[first, first + n)` of inode `ino` (holes skipped),
    /// joined under `j`; returns how many.
    #[allow(clippy::too_many_arguments)]
    fn extents_io(
        &mut self,
        disk: u32,
        ino: u32,
        op: Op,
        first: u64,
        n: u64,
        j: usize,
        out: &mut Vec<Action>,
    ) -> u32 {
        let mut mapped = std::mem::take(&mut self.mapped);
        mapped.clear();
        if let Some(fs) = self.disks[disk as usize].fs.as_ref() {
            fs.ext4.map(ino, first, n, &mut mapped);
        }
        let mut count = 0;
        for m in &mapped {
            if let Some(p) = m.pblk {
                count += 1;
                self.disk_io(disk, op, p, m.len, j, out);
            }
        }
        self.mapped = mapped;
        self.joins.get(j).remaining += count;
        count
    }

    /// One virtual-disk request of blocks `[block, block + n)` for join `j` (not counted).
    fn disk_io(&mut self, disk: u32, op: Op, block: u64, n: u64, j: usize, out: &mut Vec<Action>) {
        let d = &mut self.disks[disk as usize];
        let bytes = n * BLOCK_BYTES;
        if op == Op::Write {
            d.stats.write_requests += 1;
            d.stats.write_bytes += bytes;
            let in_journal =
                d.fs.as_ref()
                    .is_some_and(|fs| block >= fs.journal_first && block < fs.journal_end);
            if in_journal {
                d.stats.journal_write_bytes += bytes;
                let last = block + n - 1;
                d.stats.journal_written_extent = Some(match d.stats.journal_written_extent {
                    Some([lo, hi]) => [lo.min(block), hi.max(last)],
                    None => [block, last],
                });
            }
            for b in block..block + n {
                let (w, bit) = ((b / 64) as usize, b % 64);
                if d.written.len() <= w {
                    d.written.resize(w + 1, 0);
                }
                if d.written[w] & (1 << bit) == 0 {
                    d.written[w] |= 1 << bit;
                    d.stats.written_blocks += 1;
                    if in_journal {
                        d.stats.journal_written_blocks += 1;
                    }
                }
            }
        } else {
            d.stats.read_requests += 1;
            d.stats.read_bytes += bytes;
        }
        out.push(Action::Io {
            disk,
            op,
            offset: block * BLOCK_BYTES,
            len: bytes,
            sync: true,
            token: own(j),
        });
    }

    fn flush_disk(&mut self, disk: u32, journal: bool, j: usize, out: &mut Vec<Action>) {
        let s = &mut self.disks[disk as usize].stats;
        s.flushes += 1;
        if journal {
            s.journal_flushes += 1;
        }
        self.joins.get(j).remaining += 1;
        out.push(Action::Flush {
            disk,
            token: own(j),
        });
    }

    /// Carry out the page cache's actions in `buf` (and those they lead to).
    fn run(&mut self, now: Ns, buf: &mut Vec<Action>, out: &mut Vec<Action>) {
        let mut i = 0;
        while i < buf.len() {
            let a = buf[i];
            i += 1;
            match a {
                Action::Io {
                    disk: file,
                    op,
                    offset,
                    len,
                    token,
                    ..
                } => self.cache_io(now, file, op, offset, len, token, buf, out),
                Action::Flush { disk: file, token } => self.cache_flush(now, file, token, buf, out),
                Action::Copy {
                    req,
                    bytes,
                    complete,
                } => match self.owners.get(req as usize) {
                    Owner::App(app) => {
                        let app = *app;
                        let a = self.app_mut(app);
                        a.copy_completes = complete;
                        a.lreq = req;
                        out.push(Action::Copy {
                            req: app,
                            bytes,
                            complete: false,
                        });
                    }
                    _ => unreachable!("only applications copy"),
                },
                Action::Complete { req } => self.cache_complete(now, req, buf, out),
                Action::Timer { at } => {
                    if self.cache_timer.is_none_or(|t| at < t) {
                        self.cache_timer = Some(at);
                        out.push(Action::Timer { at });
                    }
                }
            }
        }
        buf.clear();
    }

    /// The page cache reads or writes pages of a file.
    #[allow(clippy::too_many_arguments)]
    fn cache_io(
        &mut self,
        now: Ns,
        file: u32,
        op: Op,
        offset: u64,
        len: u64,
        token: Token,
        buf: &mut Vec<Action>,
        out: &mut Vec<Action>,
    ) {
        let (first, n) = page_span(offset, len);
        match self.files[file as usize] {
            CacheFile::Bdev { disk } => {
                let then = if op == Op::Write && self.disks[disk as usize].fs.is_some() {
                    Then::Home {
                        disk,
                        first,
                        n,
                        token,
                    }
                } else {
                    Then::Cache(token)
                };
                let j = self.joins.insert(Join { remaining: 1, then });
                self.disk_io(disk, op, first, n, j, out);
            }
            CacheFile::Inode { disk, ino } => {
                let then = if op == Op::Write {
                    self.writeback(now, disk, ino, first, n);
                    Then::InodeWrite { disk, ino, token }
                } else {
                    Then::Cache(token)
                };
                let j = self.joins.insert(Join { remaining: 0, then });
                if self.extents_io(disk, ino, op, first, n, j, out) == 0 {
                    self.joins.remove(j);
                    self.cache.on_done(now, token, buf);
                } else if op == Op::Write {
                    let fs = fs_of(&mut self.disks, disk);
                    *fs.inode_writes.entry(ino).or_insert(0) += 1;
                }
            }
            CacheFile::Gone => self.cache.on_done(now, token, buf),
        }
    }

    /// Pages of inode `ino` go to disk: allocate their blocks (delayed allocation); data
    /// journalling logs them.
    fn writeback(&mut self, now: Ns, disk: u32, ino: u32, first: u64, n: u64) {
        let fs = fs_of(&mut self.disks, disk);
        self.meta.clear();
        let _ = fs.ext4.allocate(ino, first, n, &mut self.meta);
        let allocated = !self.meta.is_empty();
        match fs.mode {
            // Blocks allocated by writeback itself: the commit waits for their writes
            // (ext4_jbd2_inode_add_wait).
            DataMode::Ordered if allocated => fs.journal.add_ordered_wait_inode(now, ino),
            DataMode::Journal => {
                let mut mapped = std::mem::take(&mut self.mapped);
                mapped.clear();
                fs.ext4.map(ino, first, n, &mut mapped);
                for m in &mapped {
                    if let Some(p) = m.pblk {
                        for b in p..p + m.len {
                            // data=journal is the mode here, so this cannot fail.
                            let _ = fs.journal.dirty_data(now, b);
                        }
                    }
                }
                self.mapped = mapped;
            }
            _ => {}
        }
        self.touch_meta(now, disk, ino, true);
    }

    /// The page cache's FLUSH of a file: for a block device, a FLUSH of the virtual disk; for
    /// an inode, the end of an fsync's (or ordered writeback's) data phase.
    fn cache_flush(
        &mut self,
        now: Ns,
        file: u32,
        token: Token,
        buf: &mut Vec<Action>,
        out: &mut Vec<Action>,
    ) {
        match self.files[file as usize] {
            CacheFile::Bdev { disk } => {
                let j = self.joins.insert(Join {
                    remaining: 0,
                    then: Then::Cache(token),
                });
                self.flush_disk(disk, false, j, out);
            }
            CacheFile::Gone => self.cache.on_done(now, token, buf),
            CacheFile::Inode { disk, ino } => {
                let req = self.cache.flush_request(token);
                match *self.owners.get(req as usize) {
                    Owner::Fsync { datasync, .. } => {
                        self.fsync_commit(now, disk, ino, datasync, token, buf, out)
                    }
                    Owner::SyncAfter(_) => {
                        self.fsync_commit(now, disk, ino, false, token, buf, out)
                    }
                    // data=ordered writeback needs no FLUSH of its own.
                    _ => self.cache.on_done(now, token, buf),
                }
            }
        }
    }

    /// ext4_sync_file after the data (ext4_fsync_journal): wait for the commit of the
    /// inode's last transaction (starting it if it is the running one), else an empty FLUSH
    /// with barriers.
    #[allow(clippy::too_many_arguments)]
    fn fsync_commit(
        &mut self,
        now: Ns,
        disk: u32,
        ino: u32,
        datasync: bool,
        token: Token,
        buf: &mut Vec<Action>,
        out: &mut Vec<Action>,
    ) {
        let fs = fs_of(&mut self.disks, disk);
        let plan = fs.journal.fsync_plan(ino, datasync);
        match plan.wait_tid {
            Some(tid) => {
                fs.waiters.push(Waiter {
                    tid,
                    token,
                    flush: plan.flush,
                });
                self.disks[disk as usize].stats.fsyncs_committing += 1;
                self.start_commit(now, disk, out);
            }
            None if plan.flush => {
                let j = self.joins.insert(Join {
                    remaining: 0,
                    then: Then::FsyncFlush(token),
                });
                self.flush_disk(disk, false, j, out);
            }
            None => self.cache.on_done(now, token, buf),
        }
    }

    /// A page-cache request completed.
    fn cache_complete(
        &mut self,
        now: Ns,
        req: ReqId,
        buf: &mut Vec<Action>,
        out: &mut Vec<Action>,
    ) {
        let owner = self.owners.remove(req as usize);
        match owner {
            Owner::App(app) | Owner::Fsync { app, .. } => {
                if let Some(f) = self.apps[app as usize].sync_file.take() {
                    let id = self.owners.insert(Owner::SyncAfter(app)) as ReqId;
                    self.cache.on_request(
                        now,
                        Request {
                            id,
                            disk: f,
                            op: Op::Flush,
                            offset: 0,
                            len: 0,
                        },
                        buf,
                    );
                } else {
                    out.push(Action::Complete { req: app });
                }
            }
            Owner::SyncAfter(app) => out.push(Action::Complete { req: app }),
            Owner::Ordered { disk } => self.seq_op_done(now, disk, out),
        }
    }

    /// A virtual-disk request (or a page-cache token) finished.
    pub fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<Action>) {
        let mut buf = self.take_buf();
        if token.0 & OWN == 0 {
            self.cache.on_done(now, token, &mut buf);
        } else {
            let j = (token.0 & !OWN) as usize;
            let join = self.joins.get(j);
            join.remaining -= 1;
            if join.remaining == 0 {
                let then = self.joins.remove(j).then;
                match then {
                    Then::Cache(t) | Then::FsyncFlush(t) => self.cache.on_done(now, t, &mut buf),
                    Then::Home {
                        disk,
                        first,
                        n,
                        token,
                    } => {
                        if let Some(fs) = self.disks[disk as usize].fs.as_mut() {
                            for b in first..first + n {
                                fs.journal.home_written(b);
                            }
                        }
                        self.cache.on_done(now, token, &mut buf);
                    }
                    Then::Journal { disk } => self.seq_op_done(now, disk, out),
                    Then::InodeWrite { disk, ino, token } => {
                        self.inode_write_done(now, disk, ino, out);
                        self.cache.on_done(now, token, &mut buf);
                    }
                    Then::Direct(app) => out.push(Action::Complete { req: app }),
                }
            }
        }
        self.run_buf(now, buf, out);
    }

    /// The copy of application operation `app` ended.
    pub fn on_copied(&mut self, now: Ns, app: ReqId, out: &mut Vec<Action>) {
        let AppState {
            copy_completes,
            lreq,
            ..
        } = self.apps[app as usize];
        let mut buf = self.take_buf();
        if copy_completes {
            buf.push(Action::Complete { req: lreq });
        } else {
            self.cache.on_copied(now, lreq, &mut buf);
        }
        self.run_buf(now, buf, out);
    }

    /// A timer came: the page cache's periodic writeback, the journals' commit timers.
    pub fn on_timer(&mut self, now: Ns, out: &mut Vec<Action>) {
        if self.cache_timer.is_some_and(|t| t <= now) {
            self.cache_timer = None;
            let mut buf = self.take_buf();
            self.cache.on_timer(now, &mut buf);
            self.run_buf(now, buf, out);
        }
        for disk in 0..self.disks.len() as u32 {
            let Some(fs) = self.disks[disk as usize].fs.as_mut() else {
                continue;
            };
            if fs.timer_at.is_some_and(|t| t <= now) {
                fs.timer_at = None;
                // Commits if the transaction is due, else re-arms for its deadline.
                self.arm_commit(now, disk, out);
            }
        }
    }

    /// Keep a timer at the running transaction's commit deadline; commit at once if the
    /// transaction must (age, size).
    fn arm_commit(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        if fs.seq.is_some() {
            // The sequence's end looks again (after_journal).
            return;
        }
        if fs.journal.must_commit(now) {
            self.start_commit(now, disk, out);
            return;
        }
        if let Some(at) = fs.journal.commit_deadline() {
            if fs.timer_at.is_none_or(|t| at < t) {
                fs.timer_at = Some(at);
                out.push(Action::Timer { at: at.max(now) });
            }
        }
    }

    /// Start the running transaction's commit unless a commit or checkpoint is in progress
    /// (its end looks again); a checkpoint first when the log is short of space.
    fn start_commit(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        if fs.seq.is_some() {
            return;
        }
        if fs.journal.needs_checkpoint() && !fs.ckpt_commit {
            return self.checkpoint(now, disk, out);
        }
        fs.ckpt_commit = false;
        let plan = match fs.journal.start_commit(now) {
            Ok(Some(plan)) => plan,
            Ok(None) => return,
            // No log space even after checkpointing: nothing can commit (not reached with
            // the journal sizes mke2fs makes; the fsyncs waiting stay waiting).
            Err(_) => return,
        };
        let mut first: Vec<SeqOp> = Vec::new();
        if plan.superblock_first {
            first.push(SeqOp::Write(fs.journal_first, 1));
        }
        first.extend(plan.log.iter().map(|&(b, n)| SeqOp::Write(b, n)));
        for &ino in &plan.ordered_inodes {
            if let Some(f) = self.inode_file(ino) {
                first.push(SeqOp::Ordered(f));
            }
        }
        let fs = fs_of(&mut self.disks, disk);
        for &ino in &plan.ordered_wait_inodes {
            if fs.inode_writes.get(&ino).is_some_and(|&n| n > 0) {
                first.push(SeqOp::WaitInode(ino));
            }
        }
        let mut phases = std::collections::VecDeque::new();
        let record_phase;
        if plan.commit_with_log {
            first.push(SeqOp::Write(plan.commit_block, 1));
            record_phase = Some((0, plan.tid));
            phases.push_back(first);
            if plan.flush_after_commit {
                phases.push_back(vec![SeqOp::Flush]);
            }
        } else {
            phases.push_back(first);
            if plan.flush_before_commit {
                phases.push_back(vec![SeqOp::Flush]);
            }
            record_phase = Some((phases.len(), plan.tid));
            phases.push_back(vec![SeqOp::Write(plan.commit_block, 1)]);
            // virtio-blk has no FUA: blk-flush emulates it with a FLUSH after the write.
            if plan.fua_commit {
                phases.push_back(vec![SeqOp::Flush]);
            }
        }
        self.run_seq(
            now,
            disk,
            Seq::new(phases, record_phase, SeqEnd::Committed(plan.tid)),
            out,
        );
    }

    /// The page-cache file of inode `ino`, if it is open.
    fn inode_file(&self, ino: u32) -> Option<u32> {
        self.handles
            .iter()
            .filter_map(|h| h.ino)
            .find(|&(i, _)| i == ino)
            .map(|(_, f)| f)
    }

    /// A checkpoint pass (jbd2_log_do_checkpoint): write the oldest transaction's blocks
    /// home; when none is left, move the tail.
    fn checkpoint(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        let mut blocks = std::mem::take(&mut fs.ckpt_blocks);
        blocks.clear();
        match fs.journal.checkpoint_plan(&mut blocks) {
            CheckpointStep::Idle => {
                fs.ckpt_blocks = blocks;
                match fs.journal.tail_update() {
                    Some(t) => {
                        let phases = tail_phases(&t);
                        self.run_seq(
                            now,
                            disk,
                            Seq::new(phases, None, SeqEnd::CheckpointTail),
                            out,
                        );
                    }
                    // Nothing to free by checkpointing: commit (start_commit says whether
                    // the log has room).
                    None => {
                        fs.ckpt_commit = true;
                        self.start_commit(now, disk, out);
                    }
                }
            }
            step => {
                if let CheckpointStep::CommitFirst { .. } = step {
                    fs.ckpt_commit = true;
                }
                let bdev = self.disks[disk as usize].bdev;
                let mut writes = Vec::new();
                for &b in &blocks {
                    self.cache.clean(bdev, b, 1);
                    match writes.last_mut() {
                        Some(SeqOp::Write(s, n)) if *s + *n == b => *n += 1,
                        _ => writes.push(SeqOp::Write(b, 1)),
                    }
                }
                let fs = fs_of(&mut self.disks, disk);
                fs.ckpt_blocks = blocks;
                self.run_seq(
                    now,
                    disk,
                    Seq::new(
                        std::collections::VecDeque::from([writes]),
                        None,
                        SeqEnd::HomeWritten,
                    ),
                    out,
                );
            }
        }
    }

    /// Install `seq` as `disk`'s journal sequence and start its first phase.
    fn run_seq(&mut self, now: Ns, disk: u32, seq: Seq, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        fs.seq = Some(seq);
        self.next_phase(now, disk, out);
    }

    /// Issue the next phase of `disk`'s sequence, or end it.
    fn next_phase(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        loop {
            let fs = fs_of(&mut self.disks, disk);
            let seq = fs.seq.as_mut().expect("a journal sequence");
            let Some(ops) = seq.phases.pop_front() else {
                let end = fs.seq.take().expect("a journal sequence").end;
                return self.seq_end(now, disk, end, out);
            };
            if let Some((phase, tid)) = seq.record_phase {
                if phase == seq.started {
                    fs.journal.commit_record_sent(tid);
                }
            }
            seq.started += 1;
            seq.left = ops.len() as u32;
            if ops.is_empty() {
                continue;
            }
            for op in ops {
                match op {
                    SeqOp::Write(b, n) => {
                        let j = self.joins.insert(Join {
                            remaining: 1,
                            then: Then::Journal { disk },
                        });
                        self.disk_io(disk, Op::Write, b, n, j, out);
                    }
                    SeqOp::Flush => {
                        let j = self.joins.insert(Join {
                            remaining: 0,
                            then: Then::Journal { disk },
                        });
                        self.flush_disk(disk, true, j, out);
                    }
                    SeqOp::Ordered(f) => {
                        self.cache_request(now, Owner::Ordered { disk }, f, Op::Flush, 0, 0, out)
                    }
                    SeqOp::WaitInode(ino) => {
                        let fs = fs_of(&mut self.disks, disk);
                        fs.waited_inodes.push(ino);
                    }
                }
            }
            return;
        }
    }

    /// One operation of `disk`'s sequence completed.
    fn seq_op_done(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        let seq = fs.seq.as_mut().expect("a journal sequence");
        seq.left -= 1;
        if seq.left == 0 {
            self.next_phase(now, disk, out);
        }
    }

    /// A writeback write of inode `ino` completed: a commit waiting for it may go on.
    fn inode_write_done(&mut self, now: Ns, disk: u32, ino: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        let n = fs.inode_writes.get_mut(&ino).expect("a write in flight");
        *n -= 1;
        if *n == 0 {
            fs.inode_writes.remove(&ino);
            if let Some(i) = fs.waited_inodes.iter().position(|&w| w == ino) {
                fs.waited_inodes.swap_remove(i);
                self.seq_op_done(now, disk, out);
            }
        }
    }

    /// A journal sequence of `disk` ended.
    fn seq_end(&mut self, now: Ns, disk: u32, end: SeqEnd, out: &mut Vec<Action>) {
        let bdev = self.disks[disk as usize].bdev;
        let fs = fs_of(&mut self.disks, disk);
        match end {
            SeqEnd::Committed(tid) => {
                let done = fs.journal.commit_written(tid);
                let mut buf = self.take_buf();
                let mut tail = None;
                if let Some(done) = done {
                    for &b in &done.metadata {
                        self.cache.dirty(now, bdev, b, 1, &mut buf);
                    }
                    tail = done.tail;
                }
                self.run_buf(now, buf, out);
                if let Some(t) = tail {
                    let phases = tail_phases(&t);
                    return self.run_seq(
                        now,
                        disk,
                        Seq::new(phases, None, SeqEnd::CommitTail(tid)),
                        out,
                    );
                }
                self.wake(now, disk, out);
            }
            SeqEnd::CommitTail(_) => self.wake(now, disk, out),
            SeqEnd::HomeWritten => {
                let blocks = std::mem::take(&mut fs.ckpt_blocks);
                for &b in &blocks {
                    fs.journal.home_written(b);
                }
                fs.ckpt_blocks = blocks;
                if fs.ckpt_commit {
                    self.start_commit(now, disk, out);
                } else {
                    self.checkpoint(now, disk, out);
                }
            }
            SeqEnd::CheckpointTail => self.after_journal(now, disk, out),
        }
    }

    /// Fsyncs whose transaction is committed go on (an empty FLUSH first for those that
    /// need one); then what waits for the journal.
    fn wake(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        let done = fs.journal.committed_tid();
        let mut ready = Vec::new();
        fs.waiters.retain(|w| {
            // tids compare modulo 2^32, as jbd2's tid_geq.
            if (done.wrapping_sub(w.tid) as i32) >= 0 {
                ready.push(*w);
                false
            } else {
                true
            }
        });
        let mut buf = self.take_buf();
        for w in ready {
            if w.flush {
                let j = self.joins.insert(Join {
                    remaining: 0,
                    then: Then::FsyncFlush(w.token),
                });
                self.flush_disk(disk, false, j, out);
            } else {
                self.cache.on_done(now, w.token, &mut buf);
            }
        }
        self.run_buf(now, buf, out);
        self.after_journal(now, disk, out);
    }

    /// No journal sequence runs on `disk`: commit again if fsyncs wait or the transaction
    /// must, else keep the commit timer.
    fn after_journal(&mut self, now: Ns, disk: u32, out: &mut Vec<Action>) {
        let fs = fs_of(&mut self.disks, disk);
        if fs.seq.is_some() {
            return;
        }
        if !fs.waiters.is_empty() || fs.journal.must_commit(now) {
            self.start_commit(now, disk, out);
        } else {
            self.arm_commit(now, disk, out);
        }
    }

    /// fio's `invalidate` before a job: drop the clean cached pages of a block device (BLKFLSBUF)
    /// or of a workload's files (posix_fadvise DONTNEED); dirty pages stay.
    pub fn invalidate(&mut self, target: Invalidate<'_>) {
        match target {
            Invalidate::Disk(d) => {
                let f = self.disks[d as usize].bdev;
                self.cache.drop_file(f, true);
            }
            Invalidate::Files(handles) => {
                for &h in handles {
                    if let Some((_, f)) = self.handles[h as usize].ino {
                        self.cache.drop_file(f, true);
                    }
                }
            }
        }
    }

    /// Figures for the report.
    pub fn stats(&self) -> GuestStats {
        let HostCacheStats {
            pages,
            cached_pages,
            dirty_pages,
            ..
        } = self.cache.stats();
        let looked = pages.hit_pages + pages.miss_pages;
        GuestStats {
            cache: GuestCacheStats {
                hit_pages: pages.hit_pages,
                miss_pages: pages.miss_pages,
                hit_ratio: if looked == 0 {
                    0.0
                } else {
                    pages.hit_pages as f64 / looked as f64
                },
                cached_bytes: cached_pages * PAGE_BYTES,
                dirty_bytes: dirty_pages * PAGE_BYTES,
                written_back_bytes: pages.written_back_pages * PAGE_BYTES,
            },
            disks: self
                .disks
                .iter()
                .map(|d| {
                    let mut s = d.stats.clone();
                    s.journal_share = if s.write_bytes == 0 {
                        0.0
                    } else {
                        s.journal_write_bytes as f64 / s.write_bytes as f64
                    };
                    s.journal =
                        d.fs.as_ref()
                            .map(|fs| JournalReport::of(fs.journal.stats()));
                    s.journal_extent =
                        d.fs.as_ref()
                            .map(|fs| [fs.journal_first, fs.journal_end - 1]);
                    s
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::IoFlags;
    use crate::SEC;
    use std::collections::VecDeque;

    const MIB: u64 = 1 << 20;

    /// What reached the virtual disk: (op, first block, blocks) — flushes as (Flush, 0, 0).
    type Seen = Vec<(Op, u64, u64)>;

    /// A guest with `memory` of page cache over one 1 GiB disk with ext4 (mkfs defaults: a
    /// 32 MiB journal at block 131072) and a 32-page read-ahead window.
    fn guest(memory: u64) -> GuestOs {
        let spec = crate::cache::linux::tests::linux_defaults(memory);
        let fs = FsSpec {
            fs_type: "ext4",
            mount: "/mnt".into(),
            size_bytes: None,
            data: "ordered",
            commit_ns: 5 * SEC,
            barrier: true,
            journal_bytes: None,
        };
        let disk = GuestDisk {
            name: "vdb".into(),
            size_bytes: 1 << 30,
            read_ahead_pages: 32,
            fs: Some(fs),
        };
        GuestOs::new(&spec, &[disk]).unwrap()
    }

    /// A tiny engine: runs `op` as application operation `app` at time `now`, completing
    /// every disk request in order and every copy at once, until nothing is pending; returns
    /// what reached the disk and whether the operation completed.
    fn run(g: &mut GuestOs, now: Ns, app: ReqId, op: AppOp, seen: &mut Seen) -> bool {
        let mut out = Vec::new();
        g.on_app(now, app, op, &mut out);
        let mut done = false;
        let mut pending: VecDeque<Action> = out.drain(..).collect();
        while let Some(a) = pending.pop_front() {
            match a {
                Action::Io {
                    op,
                    offset,
                    len,
                    token,
                    ..
                } => {
                    seen.push((op, offset / BLOCK_BYTES, len / BLOCK_BYTES));
                    g.on_done(now, token, &mut out);
                }
                Action::Flush { token, .. } => {
                    seen.push((Op::Flush, 0, 0));
                    g.on_done(now, token, &mut out);
                }
                Action::Copy { req, .. } => g.on_copied(now, req, &mut out),
                Action::Complete { req } => done |= req == app,
                Action::Timer { .. } => {}
            }
            pending.extend(out.drain(..));
        }
        done
    }

    fn file(g: &mut GuestOs, path: &str, size_bytes: u64) -> u32 {
        let decl = FileDecl {
            path: path.into(),
            exists: size_bytes > 0,
            size_bytes,
            layout: FileLayout::Written,
            dir: 0,
        };
        g.open_files(0, &[decl]).unwrap()[0]
    }

    fn in_journal(block: u64) -> bool {
        (131_072..131_072 + 8192).contains(&block)
    }

    #[test]
    fn an_appending_write_and_fsync_send_data_then_the_log_then_flush_commit_flush() {
        let mut g = guest(64 * MIB);
        let h = file(&mut g, "/mnt/f", 0);
        let mut seen = Seen::new();
        let op = |op| AppOp::File { handle: h, op };
        assert!(run(&mut g, 0, 1, op(FileOp::Create { file: 0 }), &mut seen));
        let w = FileOp::Append {
            file: 0,
            len: 4096,
            flags: IoFlags::default(),
        };
        assert!(run(&mut g, 0, 2, op(w), &mut seen));
        assert!(
            seen.is_empty(),
            "buffered: nothing reaches the disk yet: {seen:?}"
        );
        let f = FileOp::Fsync {
            file: 0,
            datasync: false,
        };
        assert!(run(&mut g, 0, 3, op(f), &mut seen));
        // Data (outside the journal), then the first commit: the journal superblock and the
        // log (descriptor + metadata blocks), FLUSH, the commit block, FLUSH (FUA emulated).
        let (data, rest) = seen.split_first().unwrap();
        assert_eq!((data.0, data.2), (Op::Write, 1));
        assert!(!in_journal(data.1), "{seen:?}");
        let n = rest.len();
        assert_eq!(rest[n - 3..][0], (Op::Flush, 0, 0), "{seen:?}");
        assert_eq!(rest[n - 1], (Op::Flush, 0, 0), "{seen:?}");
        let (kind, commit, len) = rest[n - 2];
        assert!(
            kind == Op::Write && len == 1 && in_journal(commit),
            "{seen:?}"
        );
        let log: Vec<_> = rest[..n - 3].to_vec();
        assert_eq!(
            log[0],
            (Op::Write, 131_072, 1),
            "superblock first: {seen:?}"
        );
        let (_, start, blocks) = log[1];
        assert_eq!(
            start, 131_073,
            "the log starts after the superblock: {seen:?}"
        );
        assert_eq!(start + blocks, commit, "commit block right after the log");
        // A second append + fsync: no superblock this time.
        seen.clear();
        assert!(run(&mut g, SEC, 4, op(w), &mut seen));
        assert!(run(&mut g, SEC, 5, op(f), &mut seen));
        let kinds: Vec<Op> = seen.iter().map(|s| s.0).collect();
        assert_eq!(
            kinds,
            [Op::Write, Op::Write, Op::Flush, Op::Write, Op::Flush],
            "{seen:?}"
        );
        let stats = g.stats();
        assert_eq!(stats.disks[0].fsyncs, 2);
        assert_eq!(stats.disks[0].fsyncs_committing, 2);
        // The journal is mke2fs's 8192 blocks at 131072; written from its superblock to the
        // second commit block.
        assert_eq!(stats.disks[0].journal_extent, Some([131_072, 139_263]));
        assert_eq!(
            stats.disks[0].journal_written_extent,
            Some([131_072, seen[3].1])
        );
        assert_eq!(stats.disks[0].journal.as_ref().unwrap().commits, 2);
    }

    #[test]
    fn an_fdatasync_after_an_overwrite_without_allocation_is_data_and_one_flush() {
        let mut g = guest(64 * MIB);
        let h = file(&mut g, "/mnt/f", 64 * 1024);
        let mut seen = Seen::new();
        let op = |op| AppOp::File { handle: h, op };
        let w = FileOp::Write {
            file: 0,
            offset: 8192,
            len: 4096,
            flags: IoFlags::default(),
        };
        assert!(run(&mut g, 0, 1, op(w), &mut seen));
        let f = FileOp::Fsync {
            file: 0,
            datasync: true,
        };
        assert!(run(&mut g, 0, 2, op(f), &mut seen));
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((seen[0].0, seen[0].2), (Op::Write, 1));
        assert_eq!(seen[1], (Op::Flush, 0, 0));
    }

    #[test]
    fn an_fdatasync_after_an_append_into_an_allocated_block_commits_the_size_but_not_into_a_new_block(
    ) {
        let mut g = guest(64 * MIB);
        // 1000 bytes: its block is allocated (the file was written).
        let h = file(&mut g, "/mnt/f", 1000);
        let mut seen = Seen::new();
        let op = |op| AppOp::File { handle: h, op };
        let append = |len| FileOp::Append {
            file: 0,
            len,
            flags: IoFlags::default(),
        };
        let fdatasync = FileOp::Fsync {
            file: 0,
            datasync: true,
        };
        // Into the allocated block: i_disksize moves at write time, fdatasync commits it.
        assert!(run(&mut g, 0, 1, op(append(100)), &mut seen));
        assert!(run(&mut g, 0, 2, op(fdatasync), &mut seen));
        assert_eq!(g.stats().disks[0].fsyncs_committing, 1, "{seen:?}");
        // Into a new (delayed) block: the allocation at writeback commits as well.
        assert!(run(&mut g, 0, 3, op(append(4096)), &mut seen));
        assert!(run(&mut g, 0, 4, op(fdatasync), &mut seen));
        assert_eq!(g.stats().disks[0].fsyncs_committing, 2, "{seen:?}");
        // An overwrite inside the file: no size change, data and a FLUSH only.
        let w = FileOp::Write {
            file: 0,
            offset: 0,
            len: 512,
            flags: IoFlags::default(),
        };
        assert!(run(&mut g, 0, 5, op(w), &mut seen));
        assert!(run(&mut g, 0, 6, op(fdatasync), &mut seen));
        assert_eq!(g.stats().disks[0].fsyncs_committing, 2, "{seen:?}");
        assert_eq!(g.stats().disks[0].fsyncs, 3);
    }

    #[test]
    fn an_fsync_after_an_overwrite_commits_the_inodes_times_and_an_fdatasync_does_not() {
        let mut g = guest(64 * MIB);
        let h = file(&mut g, "/mnt/f", 64 * 1024);
        let mut seen = Seen::new();
        let op = |op| AppOp::File { handle: h, op };
        let w = FileOp::Write {
            file: 0,
            offset: 8192,
            len: 4096,
            flags: IoFlags::default(),
        };
        let sync = |datasync| FileOp::Fsync { file: 0, datasync };
        assert!(run(&mut g, 0, 1, op(w), &mut seen));
        assert!(run(&mut g, 0, 2, op(sync(true)), &mut seen));
        assert_eq!(g.stats().disks[0].fsyncs_committing, 0, "{seen:?}");
        // file_update_time: the write dirtied the inode (mtime), in the running
        // transaction: fsync commits it (i_sync_tid), fdatasync did not need to.
        assert!(run(&mut g, 0, 3, op(w), &mut seen));
        assert!(run(&mut g, 0, 4, op(sync(false)), &mut seen));
        assert_eq!(g.stats().disks[0].fsyncs_committing, 1, "{seen:?}");
    }

    #[test]
    fn o_direct_reads_bypass_the_guest_cache_and_buffered_rereads_hit_it() {
        let mut g = guest(64 * MIB);
        let h = file(&mut g, "/mnt/f", MIB);
        let read = |direct| AppOp::File {
            handle: h,
            op: FileOp::Read {
                file: 0,
                offset: 0,
                len: 4096,
                flags: IoFlags {
                    direct,
                    sync: false,
                },
            },
        };
        for app in 1..=2 {
            let mut seen = Seen::new();
            assert!(run(&mut g, 0, app, read(true), &mut seen));
            assert_eq!(seen.len(), 1, "every O_DIRECT read goes to the disk");
            assert_eq!((seen[0].0, seen[0].2), (Op::Read, 1));
        }
        let mut seen = Seen::new();
        assert!(run(&mut g, 0, 3, read(false), &mut seen));
        assert_eq!(
            seen.len(),
            1,
            "a buffered miss reads (with read-ahead): {seen:?}"
        );
        let mut again = Seen::new();
        assert!(run(&mut g, 0, 4, read(false), &mut again));
        assert!(
            again.is_empty(),
            "the reread hits the guest cache: {again:?}"
        );
        assert_eq!(g.stats().cache.hit_pages, 1);
    }

    #[test]
    fn sequential_buffered_reads_grow_the_read_ahead_window_4_8_16_then_32_pages() {
        let mut g = guest(64 * MIB);
        let h = file(&mut g, "/mnt/f", 4 * MIB);
        let mut seen = Seen::new();
        for p in 0..61 {
            let r = FileOp::Read {
                file: 0,
                offset: p * 4096,
                len: 4096,
                flags: IoFlags::default(),
            };
            assert!(run(
                &mut g,
                0,
                p as ReqId,
                AppOp::File { handle: h, op: r },
                &mut seen
            ));
        }
        let lens: Vec<u64> = seen.iter().map(|s| s.2).collect();
        // mm/readahead.c: 4 pages (4 × the 1-page request), then each async window
        // doubles up to read_ahead_kb (32 pages); the read of page 60 reaches the marker of
        // [60, 92) and starts [92, 124).
        assert_eq!(lens, [4, 8, 16, 32, 32, 32], "{seen:?}");
        let starts: Vec<u64> = seen.iter().map(|s| s.1 - seen[0].1).collect();
        assert_eq!(starts, [0, 4, 12, 28, 60, 92], "one contiguous extent");
    }

    #[test]
    fn buffered_writes_beyond_the_dirty_limit_wait_for_writeback() {
        // A 4 MiB guest cache: 1024 pages, dirty_ratio 20 % = 204 pages.
        let mut g = guest(4 * MIB);
        let h = file(&mut g, "/mnt/f", 4096);
        let mut out = Vec::new();
        let mut completed = 0;
        for app in 0..300u32 {
            let w = FileOp::Write {
                file: 0,
                offset: u64::from(app) * 4096,
                len: 4096,
                flags: IoFlags::default(),
            };
            g.on_app(0, app, AppOp::File { handle: h, op: w }, &mut out);
            // Copies complete at once; disk writes never do here.
            while let Some(i) = out.iter().position(|a| matches!(a, Action::Copy { .. })) {
                let Action::Copy { req, .. } = out.remove(i) else {
                    unreachable!()
                };
                g.on_copied(0, req, &mut out);
            }
            completed += out
                .iter()
                .filter(|a| matches!(a, Action::Complete { .. }))
                .count();
            out.retain(|a| !matches!(a, Action::Complete { .. }));
        }
        assert_eq!(completed, 204, "writers stop at dirty_ratio");
        assert!(out
            .iter()
            .any(|a| matches!(a, Action::Io { op: Op::Write, .. })));
    }
}
