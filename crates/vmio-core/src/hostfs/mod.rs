//! The host filesystem holding the images: a `[[volume]]` with `filesystem = "ext4" | "xfs"`
//! holds one image file per VM disk on it, and the filesystem's allocation and `fdatasync`
//! sit between the host cache's actions ([`crate::cache::Action`]) and the volume's devices.
//! A pure policy like the host cache's: time is an argument, decisions come back as
//! [`FsAction`]s, memory is bounded by the files' sizes in MiB ([`extents`]).
//!
//! # Sources (Linux 6.x, xfsprogs 6.x, e2fsprogs 1.47)
//!
//! Written from knowledge of these sources, not re-read for this module (the ext4 and jbd2
//! functions are the ones the guest's modules cite, [`crate::guest::ext4`],
//! [`crate::guest::jbd2`]); the XFS sizes and mkfs.xfs defaults are recalled, and marked so.
//!
//! - `fs/ext4/inode.c`, `ext4_map_blocks` / `ext4_iomap_alloc`: a direct write into a hole
//!   allocates its blocks as an unwritten extent when `dioread_nolock` is on (the default for
//!   4 KiB blocks since Linux 5.6), and delayed allocation does the same at writeback
//!   (`mpage_map_and_submit_extent`); the allocation runs in a journal handle and dirties the
//!   block bitmap and group descriptor of each group it takes blocks from
//!   (`ext4_mb_mark_diskspace_used`), the inode and the extent leaf that changed;
//!   `ext4_update_inode_fsync_trans(.., datasync = 1)` makes the running transaction the one
//!   the next fdatasync must commit.
//! - `fs/ext4/extents.c`, `ext4_convert_unwritten_extents`: at the completion of a write into
//!   unwritten blocks (`ext4_dio_write_end_io`, `ext4_end_io_rsv_work`) the extent is split
//!   or marked written in a handle of its own: inode and extent leaf dirtied, datasync tid
//!   updated. A read of unwritten blocks, like one of a hole, returns zeros without I/O
//!   (`ext4_iomap_begin` maps them as `IOMAP_UNWRITTEN` / `IOMAP_HOLE`).
//! - `fs/ext4/fsync.c`, `ext4_sync_file`: write and wait the dirty pages
//!   (`file_write_and_wait_range`: the host cache policy has done it when its Flush comes),
//!   then `ext4_fsync_journal`: wait for `i_datasync_tid` with `jbd2_complete_transaction`
//!   (start its commit if it is the running transaction, `jbd2_log_start_commit`; nothing if
//!   it is committed already), and `blkdev_issue_flush` only if that commit will not send a
//!   barrier itself (`jbd2_trans_will_send_data_barrier`: it was committed before, or its
//!   commit record is already out).
//! - `fs/jbd2/commit.c`, `jbd2_journal_commit_transaction`: descriptor blocks and the logged
//!   metadata blocks written contiguously from the log head under one plug, waited for, then
//!   the commit block `REQ_SYNC | REQ_PREFLUSH | REQ_FUA` (`journal_submit_commit_record`,
//!   with barriers and no async commit); the descriptor fill rule and tag sizes of
//!   [`crate::guest::jbd2::Geometry`] (253 tags per descriptor with `metadata_csum`).
//!   kjournald2 also commits every `commit=` interval (5 s, `JBD2_DEFAULT_MAX_COMMIT_AGE`).
//! - e2fsprogs `lib/ext2fs/mkjournal.c`: the journal mke2fs makes (size by
//!   `ext2fs_default_journal_size`, placed mid-filesystem by `get_midpoint_journal_block`),
//!   through [`crate::guest::ext4::Layout::mkfs`].
//! - `fs/xfs/xfs_file.c`, `xfs_file_fsync`: write and wait the data; if the inode is pinned
//!   in the log with changes other than timestamps (`ili_fsync_fields`, fdatasync), force
//!   the log up to its sequence (`xfs_log_force_seq`, `XFS_LOG_SYNC`); if no log force went
//!   out (`log_flushed` false, one device for log and data) `blkdev_issue_flush`.
//!   `fs/xfs/xfs_log.c`, `xlog_write_iclog`: the iclog is one write, `REQ_PREFLUSH | REQ_FUA`
//!   for a synchronous force. `fs/xfs/xfs_iomap.c`, `xfs_iomap_write_direct` /
//!   `xfs_iomap_write_unwritten`: direct writes into holes allocate unwritten extents and
//!   convert them at completion, as ext4 does; the allocation logs the AGF and the free-space
//!   B+trees' leaves (by block number and by size) of its allocation group, the inode and
//!   its extent list (in the inode up to 21 extents with 512-byte v5 inodes, else a bmbt
//!   leaf). Sizes (recalled) from `fs/xfs/libxfs/xfs_log_format.h`: `xlog_op_header` 12 bytes,
//!   `xfs_inode_log_format` 56, `xfs_log_dinode` 176, `xfs_buf_log_format` 24 plus its
//!   bitmap, buffers logged in `XFS_BLF_CHUNK` (128-byte) pieces, a 512-byte record header.
//! - xfsprogs `mkfs/xfs_mkfs.c` (recalled): 4 allocation groups below 4 TiB on a single disk
//!   (`calc_default_ag_geometry`), the internal log in AG `agcount / 2` after its header
//!   blocks, sized fs/2048 within [64 MiB, 2 GiB] (`calculate_log_size`).
//!
//! # Rules (pseudo-code)
//!
//! ```text
//! file of disk d: blocks of 4 KiB; start state by [vm.disk.image] preallocation
//!   (initial_state): full, metadata → written; falloc → unwritten; off (qemu-img's
//!   default, so also a disk without the table) → hole; then populated's head written
//! Io(write, range, token):
//!   every block written → the same Io (the cache's token: no cost, as a block device)
//!   else: holes → unwritten now (allocation: per group touched its bitmap + descriptor
//!         block (ext4) or its AGF + 2 free-space leaves (XFS), the inode, the extent
//!         leaf), wait alloc_cost; then the data Io; at its completion unwritten → written
//!         (conversion: the inode, the extent leaf), wait convert_cost; then the cache's
//!         token is done. Each dirtying sets the file's datasync tid to the running one.
//! Io(read, range, token): the written runs of the range as Ios (none: done at once)
//! Io(trim): the same Io (discard passes through; punching holes is left out)
//! Flush(d, token)  (ext4_sync_file / xfs_file_fsync after the data):
//!   file's datasync tid committed → FLUSH, then done
//!   else: the tid is running → commit it (after the commit in progress, if any);
//!         when it is committed → done, plus a FLUSH first if its commit record had
//!         already gone out when the Flush came
//! commit(T) (one at a time per filesystem):
//!   ext4: write descriptors + metadata blocks (ceil(n / 253) + n) from the log head, wait;
//!         FLUSH (PREFLUSH), then the commit block FUA at the head; head += n + desc + 1
//!   XFS:  FLUSH (PREFLUSH), then one iclog write FUA of
//!         roundup(512 + items' logged bytes, 4096) at the log head
//! timer: the running transaction commits commit_interval after its first dirtying
//! ```
//!
//! # Simplifications
//!
//! - Placement: an image file's blocks are its disk's region of the volume (file offset =
//!   region offset): allocation decides whether metadata work happens, not where data goes.
//!   The journal sits where mkfs puts it and may overlap a region: only its I/O is modelled.
//! - The extent leaf a change dirties is taken as if the file's extents were spread evenly
//!   over it (leaf = extents * block / file blocks / 340 entries); index blocks above the
//!   leaves and leaf splits are not counted.
//! - Checkpoints (the metadata written home after a commit, when the log fills or the
//!   block device's writeback comes) are left out: the log is a ring that never fills.
//! - CPU costs are delays of the request (the allocation before the data I/O, the
//!   conversion after it), not work on a simulated core.
//! - Hole punching (discard with `discard=unmap`), file growth and `fsync` (not datasync)
//!   are left out: QEMU's raw driver writes inside the file's size and calls fdatasync.

pub mod extents;

use crate::guest::ext4::{Layout, MkfsOptions};
use crate::guest::jbd2::Geometry;
use crate::image::ImageSpec;
use crate::params::{self, Entry, Kind, ParamError, ParamSpec, Value, Values};
use crate::request::Op;
use crate::slab::Slab;
use crate::{Ns, MS, SEC, US};
use extents::{BlockState, ExtentMap};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

pub use crate::cache::Token;

/// Filesystem block size (both filesystems' mkfs default).
pub const BLOCK_BYTES: u64 = 4096;
/// A token of this policy (the host cache's never set this bit: its kinds are below 2^7).
pub const FS_TOKEN: u64 = 1 << 63;
/// Extents per ext4 extent leaf block: (4096 - 12-byte header) / 12-byte entries.
const EXT4_LEAF_EXTENTS: u64 = (BLOCK_BYTES - 12) / 12;
/// Extents in an ext4 inode (`i_block`: a header and 4 entries).
const EXT4_INODE_EXTENTS: u64 = 4;
/// ext4 block group: one bitmap block's bits.
const EXT4_GROUP_BLOCKS: u64 = BLOCK_BYTES * 8;
/// 64-byte group descriptors per block (64bit feature).
const EXT4_DESCS_PER_BLOCK: u64 = BLOCK_BYTES / 64;
/// XFS extents in a 512-byte v5 inode's data fork ((512 - 176) / 16).
const XFS_INODE_EXTENTS: u64 = 21;
/// XFS bmbt leaf records ((4096 - 72-byte long-form v5 header) / 16).
const XFS_BMBT_LEAF_EXTENTS: u64 = (BLOCK_BYTES - 72) / 16;
/// XFS log sizes (`xfs_log_format.h`): a record header block, an op header, an inode item
/// (its format + the v3 log dinode), a buffer item's format, one logged chunk.
const XFS_RECORD_HEADER: u64 = 512;
const XFS_OP_HEADER: u64 = 12;
const XFS_INODE_ITEM: u64 = 56 + 176;
const XFS_BUF_FORMAT: u64 = 24 + 8;
const XFS_CHUNK: u64 = 128;
/// XFS: the log sector the iclog write is rounded to (4 KiB sector devices; `-l sunit`).
const XFS_LOG_ROUND: u64 = 4096;
/// xfsprogs' log size bounds and ratio (`calculate_log_size`).
const XFS_MIN_LOG_BYTES: u64 = 64 << 20;
const XFS_MAX_LOG_BYTES: u64 = 2 << 30;
const XFS_LOG_RATIO: u64 = 2048;
/// Blocks at the start of an AG before the log (`libxfs_prealloc_blocks`; estimated).
const XFS_AG_HEADER_BLOCKS: u64 = 8;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum HostFsError {
    #[error("'{0}' is not valid; accepted: {1}")]
    Unknown(String, String),
    #[error(transparent)]
    Param(#[from] ParamError),
    #[error("filesystem ext4 on volume '{volume}': {message}")]
    Mkfs { volume: String, message: String },
}

/// The kind of a host filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsKind {
    Ext4,
    Xfs,
}

pub type FsEntry = Entry<FsKind>;

pub const ALLOC_COST: ParamSpec = ParamSpec {
    name: "alloc_cost",
    kind: Kind::Duration {
        bare: MS,
        positive: false,
    },
    default: Value::Int(5 * US),
    unit: "ns",
    help: "CPU time of allocating a write's blocks (the block allocator, the extent insert, a journal handle); estimated",
};
pub const CONVERT_COST: ParamSpec = ParamSpec {
    name: "convert_cost",
    kind: Kind::Duration {
        bare: MS,
        positive: false,
    },
    default: Value::Int(10 * US),
    unit: "ns",
    help: "time of converting a write's unwritten extent at its completion (a workqueue hand-off and a journal handle); alloc_cost + convert_cost = the ~15 us a first 4 KiB write costs over an overwrite on this project's host (docs/real-host.md)",
};
pub const JOURNAL_SIZE: ParamSpec = ParamSpec {
    name: "journal_size",
    kind: Kind::Size {
        min: 1024 * BLOCK_BYTES,
        max: 10_240_000 * BLOCK_BYTES,
        pow2: false,
    },
    default: Value::Computed("mke2fs's default for the volume's size"),
    unit: "bytes",
    help: "the journal mkfs.ext4 -J size= makes (default: ext2fs_default_journal_size, 1 GiB from 128 GiB)",
};
pub const EXT4_COMMIT: ParamSpec = ParamSpec {
    name: "commit",
    kind: Kind::Duration {
        bare: SEC,
        positive: true,
    },
    default: Value::Int(5 * SEC),
    unit: "ns",
    help: "ext4's commit= mount option: the running transaction commits this long after it began (JBD2_DEFAULT_MAX_COMMIT_AGE)",
};
pub const LOG_SIZE: ParamSpec = ParamSpec {
    name: "log_size",
    kind: Kind::Size {
        min: 2 << 20,
        max: XFS_MAX_LOG_BYTES,
        pow2: false,
    },
    default: Value::Computed("xfsprogs' default for the volume's size"),
    unit: "bytes",
    help: "the internal log mkfs.xfs -l size= makes (default: 1/2048 of the filesystem within 64 MiB..2 GiB)",
};
pub const XFS_SYNC: ParamSpec = ParamSpec {
    name: "log_sync",
    kind: Kind::Duration {
        bare: SEC,
        positive: true,
    },
    default: Value::Int(30 * SEC),
    unit: "ns",
    help: "XFS's background log force interval (fs.xfs.xfssyncd_centisecs, 30 s)",
};

pub static EXT4: FsEntry = Entry {
    name: "ext4",
    help: "ext4 (mke2fs defaults, data=ordered, barriers): allocation, unwritten extents, jbd2 commits on fdatasync",
    params: &[ALLOC_COST, CONVERT_COST, JOURNAL_SIZE, EXT4_COMMIT],
    build: FsKind::Ext4,
};
pub static XFS: FsEntry = Entry {
    name: "xfs",
    help: "XFS (mkfs.xfs defaults, internal log): allocation, unwritten extents, log forces on fdatasync",
    params: &[ALLOC_COST, CONVERT_COST, LOG_SIZE, XFS_SYNC],
    build: FsKind::Xfs,
};

/// The filesystems `[[volume]] filesystem` accepts.
pub const REGISTRY: &[&FsEntry] = &[&EXT4, &XFS];

/// The key that names the filesystem in `[[volume]]`.
pub const KEY: &str = "filesystem";

/// A volume's filesystem as the stack file states it.
#[derive(Clone, Debug)]
pub struct FsSpec {
    pub entry: &'static FsEntry,
    pub params: Values,
}

impl FsSpec {
    /// Read `filesystem = name` and the keys of `table` that some filesystem declares;
    /// returns the spec and leaves the other keys to the caller (the volume's layout).
    pub fn read(
        name: &str,
        table: &BTreeMap<String, toml::Value>,
    ) -> Result<(FsSpec, BTreeMap<String, toml::Value>), HostFsError> {
        let entry = params::lookup(REGISTRY, name).map_err(|_| {
            HostFsError::Unknown(name.into(), format!("{}, none", params::names(REGISTRY)))
        })?;
        let (mine, rest) = split(table);
        let mut values = Values::defaults(entry.params);
        params::read_for(&mut values, &mine, &[], entry, REGISTRY, KEY)?;
        Ok((
            FsSpec {
                entry,
                params: values,
            },
            rest,
        ))
    }

    /// Refuse the filesystems' keys on a volume without one.
    pub fn refuse(table: &BTreeMap<String, toml::Value>) -> Result<(), ParamError> {
        match split(table).0.keys().next() {
            None => Ok(()),
            Some(key) => Err(ParamError::OnlyFor {
                key: key.clone(),
                valid_with: format!(
                    "{KEY} = {}",
                    REGISTRY
                        .iter()
                        .filter(|e| e.params.iter().any(|p| p.name == key))
                        .map(|e| format!("\"{}\"", e.name))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            }),
        }
    }
}

/// The keys of `table` some filesystem declares, and the others.
fn split(
    table: &BTreeMap<String, toml::Value>,
) -> (BTreeMap<String, toml::Value>, BTreeMap<String, toml::Value>) {
    table
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| {
            REGISTRY
                .iter()
                .any(|e| e.params.iter().any(|p| p.name == k))
        })
}

/// What the image file holds when the run starts, from `[vm.disk.image]` (qemu-img create
/// `-o preallocation=`, block/file-posix.c `raw_co_create`, block/qcow2.c
/// `qcow2_co_create`): the state of its blocks, and the bytes at its start already written
/// (`populated`, the share of the image a sequential fill wrote before the run, of a file
/// of `file_bytes`).
///
/// ```text
/// off                        a sparse file (ftruncate): holes, a first write allocates
/// metadata                   allocated and read as written (raw: QEMU's raw driver
///                            falloc; qcow2: its tables are written between the data
///                            clusters, which stay holes in QEMU; this layer does not tell
///                            the two apart, so the whole file counts as written and a
///                            first write's host allocation under metadata is not priced)
/// falloc                     unwritten extents (posix_fallocate): a first write converts
/// full                       zeros written: allocated and written
/// populated p                the first p x file_bytes written, whatever the above
/// ```
pub fn initial_state(image: &ImageSpec, file_bytes: u64) -> (BlockState, u64) {
    use crate::image::Preallocation as P;
    let state = match (image.preallocation, image.format) {
        (P::Full | P::Metadata, _) => BlockState::Written,
        (P::Falloc, _) => BlockState::Unwritten,
        (P::Off, _) => BlockState::Hole,
    };
    let prefix = (file_bytes as f64 * image.populated.clamp(0.0, 1.0)) as u64;
    (state, prefix - prefix % BLOCK_BYTES)
}

/// A volume with a filesystem, as the policy is built over it.
#[derive(Clone, Debug)]
pub struct FsVolume {
    pub name: String,
    pub spec: FsSpec,
    pub capacity_bytes: u64,
}

/// A VM disk's image file on a filesystem volume.
#[derive(Clone, Copy, Debug)]
pub struct HostFile {
    /// Index into the policy's volumes.
    pub fs: usize,
    /// Where the file's blocks are on the volume (the disk's region) and its size.
    pub volume_offset: u64,
    pub size_bytes: u64,
    pub initial: BlockState,
    /// Bytes at the file's start written before the run (`populated`).
    pub written_prefix: u64,
}

/// A decision for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsAction {
    /// I/O at `[volume_offset, + len)` of the volume of `disk` (data of its file, or the
    /// journal); `on_done(token)` when every piece completed (a token without
    /// [`FS_TOKEN`] is the host cache's, handed to it unchanged).
    Io {
        disk: u32,
        op: Op,
        volume_offset: u64,
        len: u64,
        sync: bool,
        fua: bool,
        token: Token,
    },
    /// FLUSH CACHE to every device of `disk`'s volume; `on_done(token)`.
    Flush { disk: u32, token: Token },
    /// Call `on_done(token)` at `at` (CPU time; a read that needs no I/O).
    Wake { at: Ns, token: Token },
    /// The host cache's `token` is done: its Io or Flush completed.
    Done { token: Token },
}

/// A disk's host-filesystem figures for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostFsStats {
    /// Blocks of 4 KiB allocated by first writes into holes.
    pub blocks_allocated: u64,
    /// Writes whose completion converted unwritten extents (one conversion each).
    pub extents_converted: u64,
    /// Journal commits (log forces) that carried this file's metadata, and their bytes
    /// (a commit shared by several files counts for each).
    pub journal_commits: u64,
    pub journal_bytes: u64,
    /// Flushes that needed no commit (only the device FLUSH).
    pub flush_only: u64,
}

type Tid = u64;

struct File {
    fs: usize,
    volume_offset: u64,
    map: ExtentMap,
    /// The transaction the next fdatasync must see committed (0: none).
    datasync_tid: Tid,
    stats: HostFsStats,
}

#[derive(Clone, Copy, Debug)]
enum Stage {
    /// A write: allocated; its data Io next.
    Allocated,
    /// A write: its data Io is out; the conversion after it.
    DataOut,
    /// A write: converted; done after the conversion's time.
    Converted,
}

enum Pending {
    Write {
        token: Token,
        disk: u32,
        offset: u64,
        len: u64,
        sync: bool,
        stage: Stage,
    },
    /// A read's Ios still out (0: a read of holes, woken at once).
    Read {
        token: Token,
        remaining: u32,
    },
    /// An fdatasync waiting for its transaction (then a FLUSH if `flush`).
    Fsync {
        token: Token,
        disk: u32,
        tid: Tid,
        flush: bool,
    },
    /// An fdatasync's final FLUSH.
    FsyncFlush {
        token: Token,
    },
    /// A commit's steps: log written, PREFLUSH done, commit record written.
    CommitLog {
        fs: usize,
        remaining: u32,
    },
    CommitFlush {
        fs: usize,
    },
    CommitRecord {
        fs: usize,
    },
    /// The commit timer of a transaction.
    Timer {
        fs: usize,
        tid: Tid,
    },
}

struct Fs {
    kind: FsKind,
    /// A disk on the volume: whose name the journal's I/O goes under.
    disk: u32,
    alloc_ns: Ns,
    convert_ns: Ns,
    interval_ns: Ns,
    /// The log: its first block after the superblock (volume bytes) and its blocks.
    log_offset: u64,
    log_blocks: u64,
    head: u64,
    tags_per_descriptor: u64,
    running: Tid,
    /// Metadata blocks the running transaction holds, and its files.
    dirty: BTreeSet<u64>,
    files: BTreeSet<u32>,
    /// The transaction being committed: its id, whether its record is out, its files and
    /// its bytes.
    committing: Option<(Tid, bool, Vec<u32>, u64)>,
    committed: Tid,
    /// Someone waits for the running transaction: commit it when the current one is done.
    wanted: bool,
    waiters: Vec<usize>,
    /// The transaction whose commit timer is armed.
    timer_tid: Tid,
}

/// The host filesystem policy over every filesystem volume and the image files on them.
pub struct HostFs {
    fss: Vec<Fs>,
    /// Per VM disk (engine order): its file, or None (a disk on a block-device volume:
    /// the engine never calls the policy for it).
    files: Vec<Option<File>>,
    pending: Slab<Pending>,
}

fn fs_token(slot: usize) -> Token {
    Token(FS_TOKEN | slot as u64)
}

/// Whether `token` is this policy's (else the host cache's).
pub fn is_fs_token(token: Token) -> bool {
    token.0 & FS_TOKEN != 0
}

impl HostFs {
    /// The policy over `volumes` (with their filesystems) and the VM disks' `files` (None
    /// for a disk on a block-device volume).
    pub fn new(volumes: &[FsVolume], files: &[Option<HostFile>]) -> Result<Self, HostFsError> {
        let mut fss = Vec::with_capacity(volumes.len());
        for (i, v) in volumes.iter().enumerate() {
            let p = &v.spec.params;
            let disk = files
                .iter()
                .position(|f| f.is_some_and(|f| f.fs == i))
                .unwrap_or(0) as u32;
            let (log_offset, log_blocks, interval_ns, tags) = match v.spec.entry.build {
                FsKind::Ext4 => {
                    let mut opts = MkfsOptions::new(v.capacity_bytes);
                    opts.journal_blocks =
                        Some(p.int_or(JOURNAL_SIZE.name, 0) / BLOCK_BYTES).filter(|&b| b > 0);
                    let layout = Layout::mkfs(&opts).map_err(|e| HostFsError::Mkfs {
                        volume: v.name.clone(),
                        message: e.to_string(),
                    })?;
                    // Journal block 0 is its superblock; the log is the rest.
                    let first = layout.journal_block(1).unwrap_or(layout.journal_start + 1);
                    let geo = Geometry::of(layout.journal_blocks, true);
                    (
                        first * BLOCK_BYTES,
                        layout.journal_blocks.saturating_sub(1).max(1),
                        p.int(EXT4_COMMIT.name),
                        geo.tags_per_descriptor,
                    )
                }
                FsKind::Xfs => {
                    let (start, blocks) = xfs_log(v.capacity_bytes, p.int_or(LOG_SIZE.name, 0));
                    (start * BLOCK_BYTES, blocks, p.int(XFS_SYNC.name), 0)
                }
            };
            fss.push(Fs {
                kind: v.spec.entry.build,
                disk,
                alloc_ns: p.int(ALLOC_COST.name),
                convert_ns: p.int(CONVERT_COST.name),
                interval_ns,
                log_offset,
                log_blocks,
                head: 0,
                tags_per_descriptor: tags,
                running: 1,
                dirty: BTreeSet::new(),
                files: BTreeSet::new(),
                committing: None,
                committed: 0,
                wanted: false,
                waiters: Vec::new(),
                timer_tid: 0,
            });
        }
        let files = files
            .iter()
            .map(|f| {
                f.map(|f| File {
                    fs: f.fs,
                    volume_offset: f.volume_offset,
                    map: {
                        let mut m = ExtentMap::new(f.size_bytes.div_ceil(BLOCK_BYTES), f.initial);
                        let prefix = f.written_prefix.min(f.size_bytes) / BLOCK_BYTES;
                        if prefix > 0 && f.initial != BlockState::Written {
                            m.set(0, prefix, BlockState::Written);
                        }
                        m
                    },
                    datasync_tid: 0,
                    stats: HostFsStats::default(),
                })
            })
            .collect();
        Ok(HostFs {
            fss,
            files,
            pending: Slab::new(),
        })
    }

    /// Whether VM disk `disk` is a file on a filesystem (else a block device's region).
    pub fn has_file(&self, disk: u32) -> bool {
        self.files.get(disk as usize).is_some_and(|f| f.is_some())
    }

    /// The figures of `disk`'s file, if it is one.
    pub fn stats(&self, disk: u32) -> Option<HostFsStats> {
        self.files.get(disk as usize)?.as_ref().map(|f| f.stats)
    }

    /// The allocation map of `disk`'s file.
    pub fn map(&self, disk: u32) -> Option<&ExtentMap> {
        self.files.get(disk as usize)?.as_ref().map(|f| &f.map)
    }

    fn file(&mut self, disk: u32) -> &mut File {
        self.files[disk as usize]
            .as_mut()
            .expect("the engine calls the policy only for disks on a filesystem")
    }

    /// An Io action of the host cache for `disk`'s file: `[offset, offset + len)` of the file.
    #[allow(clippy::too_many_arguments)]
    pub fn on_io(
        &mut self,
        now: Ns,
        disk: u32,
        op: Op,
        offset: u64,
        len: u64,
        sync: bool,
        token: Token,
        out: &mut Vec<FsAction>,
    ) {
        let f = self.file(disk);
        let (b, n) = blocks_of(offset, len);
        let vo = f.volume_offset;
        let io = |op, token| FsAction::Io {
            disk,
            op,
            volume_offset: vo + offset,
            len,
            sync,
            fua: false,
            token,
        };
        match op {
            Op::Write => {
                if f.map.all(b, n, BlockState::Written) {
                    return out.push(io(op, token));
                }
                let fs = f.fs;
                let before = f.map.set(b, n, BlockState::Unwritten);
                let slot = self.pending.insert(Pending::Write {
                    token,
                    disk,
                    offset,
                    len,
                    sync,
                    stage: Stage::DataOut,
                });
                if before[0] > 0 {
                    self.file(disk).stats.blocks_allocated += before[0];
                    self.dirty_alloc(disk, b, n);
                    let at = now + self.fss[fs].alloc_ns;
                    if let Pending::Write { stage, .. } = self.pending.get(slot) {
                        *stage = Stage::Allocated;
                    }
                    out.push(FsAction::Wake {
                        at,
                        token: fs_token(slot),
                    });
                    self.arm_timer(now, fs, out);
                } else {
                    out.push(io(op, fs_token(slot)));
                }
            }
            Op::Read => {
                if f.map.all(b, n, BlockState::Written) {
                    return out.push(io(op, token));
                }
                let mut runs: Vec<(u64, u64)> = Vec::new();
                f.map
                    .runs(b, n, BlockState::Written, |s, k| runs.push((s, k)));
                let slot = self.pending.insert(Pending::Read {
                    token,
                    remaining: runs.len() as u32,
                });
                if runs.is_empty() {
                    return out.push(FsAction::Wake {
                        at: now,
                        token: fs_token(slot),
                    });
                }
                // The runs, clipped to the request's bytes.
                let end = offset + len;
                for (s, k) in runs {
                    let lo = (s * BLOCK_BYTES).max(offset);
                    let hi = ((s + k) * BLOCK_BYTES).min(end);
                    out.push(FsAction::Io {
                        disk,
                        op,
                        volume_offset: vo + lo,
                        len: hi - lo,
                        sync,
                        fua: false,
                        token: fs_token(slot),
                    });
                }
            }
            Op::Trim | Op::Flush => out.push(io(op, token)),
        }
    }

    /// A Flush action of the host cache for `disk`'s file: the tail of its fdatasync.
    pub fn on_flush(&mut self, now: Ns, disk: u32, token: Token, out: &mut Vec<FsAction>) {
        let f = self.file(disk);
        let (fs, tid) = (f.fs, f.datasync_tid);
        let s = &mut self.fss[fs];
        if tid <= s.committed {
            f_stats(&mut self.files, disk).flush_only += 1;
            return out.push(FsAction::Flush { disk, token });
        }
        // jbd2_trans_will_send_data_barrier: false once the record of `tid` is out.
        let flush = matches!(s.committing, Some((t, true, ..)) if t == tid);
        let slot = self.pending.insert(Pending::Fsync {
            token,
            disk,
            tid,
            flush,
        });
        let s = &mut self.fss[fs];
        s.waiters.push(slot);
        if tid == s.running {
            s.wanted = true;
            if s.committing.is_none() {
                self.start_commit(now, fs, out);
            }
        }
    }

    /// The Io, Flush or Wake of one of this policy's tokens completed.
    pub fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<FsAction>) {
        let slot = (token.0 & !FS_TOKEN) as usize;
        match self.pending.get(slot) {
            Pending::Write {
                token,
                disk,
                offset,
                len,
                sync,
                stage,
            } => {
                let (token, disk, offset, len, sync) = (*token, *disk, *offset, *len, *sync);
                match *stage {
                    Stage::Allocated => {
                        *stage = Stage::DataOut;
                        let vo = self.file(disk).volume_offset;
                        out.push(FsAction::Io {
                            disk,
                            op: Op::Write,
                            volume_offset: vo + offset,
                            len,
                            sync,
                            fua: false,
                            token: fs_token(slot),
                        });
                    }
                    Stage::DataOut => {
                        *stage = Stage::Converted;
                        let (b, n) = blocks_of(offset, len);
                        let f = self.file(disk);
                        let fs = f.fs;
                        let before = f.map.set(b, n, BlockState::Written);
                        let converted = before[1] > 0;
                        if converted {
                            f.stats.extents_converted += 1;
                            self.dirty_convert(disk, b);
                        }
                        out.push(FsAction::Wake {
                            at: now + self.fss[fs].convert_ns,
                            token: fs_token(slot),
                        });
                        if converted {
                            self.arm_timer(now, fs, out);
                        }
                    }
                    Stage::Converted => {
                        self.pending.remove(slot);
                        out.push(FsAction::Done { token });
                    }
                }
            }
            Pending::Read { token, remaining } => {
                let token = *token;
                *remaining = remaining.saturating_sub(1);
                if *remaining == 0 {
                    self.pending.remove(slot);
                    out.push(FsAction::Done { token });
                }
            }
            Pending::FsyncFlush { token } => {
                let token = *token;
                self.pending.remove(slot);
                out.push(FsAction::Done { token });
            }
            // An fsync waits on its commit (commit_done), never on a token of its own.
            Pending::Fsync { .. } => {}
            Pending::CommitLog { fs, remaining } => {
                let fs = *fs;
                *remaining -= 1;
                if *remaining > 0 {
                    return;
                }
                *self.pending.get(slot) = Pending::CommitFlush { fs };
                out.push(FsAction::Flush {
                    disk: self.fss[fs].disk,
                    token: fs_token(slot),
                });
            }
            Pending::CommitFlush { fs } => {
                let fs = *fs;
                *self.pending.get(slot) = Pending::CommitRecord { fs };
                let s = &mut self.fss[fs];
                if let Some(c) = s.committing.as_mut() {
                    c.1 = true;
                }
                let (offset, len) = match s.kind {
                    // The commit block at the head.
                    FsKind::Ext4 => (s.log_offset + s.head * BLOCK_BYTES, BLOCK_BYTES),
                    // The whole iclog.
                    FsKind::Xfs => {
                        let bytes = s.committing.as_ref().map_or(BLOCK_BYTES, |c| c.3);
                        (s.log_offset + s.head * BLOCK_BYTES, bytes)
                    }
                };
                s.head = (s.head + len / BLOCK_BYTES) % s.log_blocks;
                out.push(FsAction::Io {
                    disk: s.disk,
                    op: Op::Write,
                    volume_offset: offset,
                    len,
                    sync: true,
                    fua: true,
                    token: fs_token(slot),
                });
            }
            Pending::CommitRecord { fs } => {
                let fs = *fs;
                self.pending.remove(slot);
                self.commit_done(now, fs, out);
            }
            Pending::Timer { fs, tid } => {
                let (fs, tid) = (*fs, *tid);
                self.pending.remove(slot);
                let s = &mut self.fss[fs];
                if s.running == tid && !s.dirty.is_empty() {
                    s.wanted = true;
                    if s.committing.is_none() {
                        self.start_commit(now, fs, out);
                    }
                }
            }
        }
    }

    /// Arm the commit timer of the running transaction once it holds a block.
    fn arm_timer(&mut self, now: Ns, fs: usize, out: &mut Vec<FsAction>) {
        let s = &mut self.fss[fs];
        if s.timer_tid == s.running || s.dirty.is_empty() {
            return;
        }
        s.timer_tid = s.running;
        let (tid, at) = (s.running, now + s.interval_ns);
        let slot = self.pending.insert(Pending::Timer { fs, tid });
        out.push(FsAction::Wake {
            at,
            token: fs_token(slot),
        });
    }

    /// Metadata an allocation of `[b, b + n)` of `disk`'s file dirties.
    fn dirty_alloc(&mut self, disk: u32, b: u64, n: u64) {
        let f = self.files[disk as usize].as_ref().expect("a file");
        let first = f.volume_offset / BLOCK_BYTES + b;
        let last = first + n - 1;
        let s = &mut self.fss[f.fs];
        match s.kind {
            FsKind::Ext4 => {
                for g in first / EXT4_GROUP_BLOCKS..=last / EXT4_GROUP_BLOCKS {
                    s.dirty.insert(meta(1, 0, g));
                    s.dirty.insert(meta(2, 0, g / EXT4_DESCS_PER_BLOCK));
                }
            }
            FsKind::Xfs => {
                let ag_blocks = xfs_ag_blocks(s.log_offset, s.log_blocks);
                for ag in first / ag_blocks..=last / ag_blocks {
                    for kind in [5, 6, 7] {
                        s.dirty.insert(meta(kind, 0, ag));
                    }
                }
            }
        }
        self.dirty_convert(disk, b);
    }

    /// Metadata an extent change at block `b` of `disk`'s file dirties: its inode, and the
    /// extent leaf holding `b` when the extents no longer fit in the inode.
    fn dirty_convert(&mut self, disk: u32, b: u64) {
        let f = self.files[disk as usize].as_mut().expect("a file");
        let s = &mut self.fss[f.fs];
        f.datasync_tid = s.running;
        s.files.insert(disk);
        s.dirty.insert(meta(3, disk, 0));
        let (in_inode, per_leaf) = match s.kind {
            FsKind::Ext4 => (EXT4_INODE_EXTENTS, EXT4_LEAF_EXTENTS),
            FsKind::Xfs => (XFS_INODE_EXTENTS, XFS_BMBT_LEAF_EXTENTS),
        };
        let e = f.map.extents();
        if e > in_inode {
            let rank = (e as u128 * b as u128 / f.map.blocks().max(1) as u128) as u64;
            s.dirty.insert(meta(4, disk, rank / per_leaf));
        }
    }

    /// Commit the running transaction of `fs`.
    fn start_commit(&mut self, now: Ns, fs: usize, out: &mut Vec<FsAction>) {
        let _ = now;
        let s = &mut self.fss[fs];
        let tid = s.running;
        let dirty = std::mem::take(&mut s.dirty);
        let files: Vec<u32> = std::mem::take(&mut s.files).into_iter().collect();
        s.running += 1;
        s.wanted = false;
        let n = dirty.len() as u64;
        match s.kind {
            FsKind::Ext4 => {
                let log = n.div_ceil(s.tags_per_descriptor) + n;
                let bytes = (log + 1) * BLOCK_BYTES;
                s.committing = Some((tid, false, files, bytes));
                // The log, contiguous from the head; split where the ring ends.
                let first = log.min(s.log_blocks - s.head);
                let pieces = [(s.head, first), (0, log - first)];
                let remaining = pieces.iter().filter(|p| p.1 > 0).count() as u32;
                let slot = self.pending.insert(Pending::CommitLog { fs, remaining });
                let s = &mut self.fss[fs];
                for (at, k) in pieces.into_iter().filter(|p| p.1 > 0) {
                    out.push(FsAction::Io {
                        disk: s.disk,
                        op: Op::Write,
                        volume_offset: s.log_offset + at * BLOCK_BYTES,
                        len: k * BLOCK_BYTES,
                        sync: true,
                        fua: false,
                        token: fs_token(slot),
                    });
                }
                s.head = (s.head + log) % s.log_blocks;
            }
            FsKind::Xfs => {
                let inodes = dirty.iter().filter(|&&m| m >> 56 == 3).count() as u64;
                let bufs = n - inodes;
                let logged = XFS_RECORD_HEADER
                    + 2 * XFS_OP_HEADER
                    + inodes * (XFS_OP_HEADER + XFS_INODE_ITEM)
                    + bufs * (XFS_OP_HEADER + XFS_BUF_FORMAT + XFS_CHUNK);
                let bytes = logged.div_ceil(XFS_LOG_ROUND) * XFS_LOG_ROUND;
                s.committing = Some((tid, false, files, bytes));
                let slot = self.pending.insert(Pending::CommitFlush { fs });
                out.push(FsAction::Flush {
                    disk: self.fss[fs].disk,
                    token: fs_token(slot),
                });
            }
        }
    }

    fn commit_done(&mut self, now: Ns, fs: usize, out: &mut Vec<FsAction>) {
        let s = &mut self.fss[fs];
        let Some((tid, _, files, bytes)) = s.committing.take() else {
            return;
        };
        s.committed = tid;
        let waiters: Vec<usize> = std::mem::take(&mut s.waiters);
        let wanted = s.wanted;
        for d in files {
            let st = f_stats(&mut self.files, d);
            st.journal_commits += 1;
            st.journal_bytes += bytes;
        }
        for w in waiters {
            let Pending::Fsync {
                token,
                disk,
                tid: t,
                flush,
            } = *self.pending.get(w)
            else {
                continue;
            };
            if t > tid {
                self.fss[fs].waiters.push(w);
                continue;
            }
            if flush {
                *self.pending.get(w) = Pending::FsyncFlush { token };
                out.push(FsAction::Flush {
                    disk,
                    token: fs_token(w),
                });
            } else {
                self.pending.remove(w);
                out.push(FsAction::Done { token });
            }
        }
        if wanted && !self.fss[fs].dirty.is_empty() {
            self.start_commit(now, fs, out);
        }
    }
}

fn f_stats(files: &mut [Option<File>], disk: u32) -> &mut HostFsStats {
    &mut files[disk as usize].as_mut().expect("a file").stats
}

/// A metadata block's identity in a transaction: its kind (1 ext4 block bitmap, 2 ext4
/// group descriptor block, 3 inode, 4 extent leaf, 5 XFS AGF, 6 and 7 XFS free-space
/// B+tree leaves), the file, and an index.
fn meta(kind: u64, file: u32, index: u64) -> u64 {
    kind << 56 | (file as u64) << 36 | (index & ((1 << 36) - 1))
}

/// The blocks `[b, b + n)` holding bytes `[offset, offset + len)` (at least one).
fn blocks_of(offset: u64, len: u64) -> (u64, u64) {
    let b = offset / BLOCK_BYTES;
    let end = (offset + len.max(1)).div_ceil(BLOCK_BYTES);
    (b, end - b)
}

/// XFS's internal log on a volume of `bytes` (`requested` bytes, 0: mkfs's default): its
/// first block and its blocks. 4 AGs; the log after the header blocks of AG 2.
fn xfs_log(bytes: u64, requested: u64) -> (u64, u64) {
    let blocks = bytes / BLOCK_BYTES;
    let ag = blocks.div_ceil(4).max(1);
    let log_bytes = if requested > 0 {
        requested
    } else {
        (bytes / XFS_LOG_RATIO).clamp(XFS_MIN_LOG_BYTES, XFS_MAX_LOG_BYTES)
    };
    let log = (log_bytes / BLOCK_BYTES).min(ag / 2).max(1);
    (2 * ag + XFS_AG_HEADER_BLOCKS, log)
}

/// The AG size of the XFS whose log starts at `log_offset` (the inverse of [`xfs_log`]).
fn xfs_ag_blocks(log_offset: u64, _log_blocks: u64) -> u64 {
    ((log_offset / BLOCK_BYTES).saturating_sub(XFS_AG_HEADER_BLOCKS) / 2).max(1)
}

#[cfg(test)]
mod tests;
