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
//! The file's size, the inode lock and `fallocate(FALLOC_FL_ZERO_RANGE)` were written from
//! Linux 6.17's sources, read for this module (and checked against 6.2's where they differ):
//!
//! - `fs/ext4/file.c`, `ext4_dio_write_iter` / `ext4_dio_write_checks`: a direct write takes
//!   `i_rwsem` shared, and exclusively when it is extending (`ext4_extending_io`: its end
//!   beyond `i_size`), not an overwrite (`ext4_overwrite_io`: some block is a hole; since
//!   Linux 6.x unwritten blocks count as overwritten, 6.2 still took the lock exclusively for
//!   them), or unaligned to a block over unwritten blocks. Held exclusively with an extending
//!   or unaligned write, the write runs synchronously (`IOMAP_DIO_FORCE_WAIT`) under the lock;
//!   only an unaligned write into holes or unwritten blocks first drains the file's direct
//!   I/O (`inode_dio_wait`). An extending write adds the inode to the orphan list in a handle
//!   of its own before the I/O (`ext4_orphan_add`: the superblock's `s_last_orphan` and the
//!   inode, `orphan_file` being off in mke2fs.conf 1.47.0, as [`crate::guest::ext4`] has it),
//!   and its completion (`ext4_dio_write_end_io` → `ext4_handle_inode_extension`) sets
//!   `i_disksize` and removes it, dirtying the inode: `ext4_do_update_inode` makes the running
//!   transaction the datasync one when the on-disk size changed. Otherwise the lock is
//!   dropped once the I/O is submitted (`iomap_dio_rw` returns `-EIOCBQUEUED`): what it
//!   covers is the mapping and the allocation (`ext4_iomap_alloc`). That is for an
//!   asynchronous kiocb only: `__iomap_dio_rw` sets `wait_for_completion =
//!   is_sync_kiocb(iocb) || IOMAP_DIO_FORCE_WAIT` and a synchronous caller sleeps until the
//!   I/O and its `end_io` (the unwritten conversion) are done, before ext4 unlocks, shared or
//!   exclusive. QEMU's `aio=threads` makes every request a worker's `preadv`/`pwritev`
//!   (block/file-posix.c `handle_aiocb_rw` on util/thread-pool.c): synchronous kiocbs, so
//!   there a hole-filling write holds `i_rwsem` exclusively through its I/O, and waits for
//!   the shared holders in flight, while `aio=native` and `io_uring` submit asynchronous
//!   ones (`HostFile::sync_dio`).
//! - `fs/ext4/inode.c`, `ext4_iomap_alloc`: blocks at or past `i_size` are allocated as
//!   written extents (`EXT4_GET_BLOCKS_CREATE`: nothing to convert at completion), below it as
//!   unwritten ones (`EXT4_GET_BLOCKS_IO_CREATE_EXT`).
//! - `fs/xfs/xfs_file.c`, `xfs_file_dio_write_aligned` / `xfs_file_write_checks` /
//!   `xfs_file_write_zero_eof`: an aligned direct write holds `XFS_IOLOCK_SHARED` even when it
//!   extends the file; only a write starting past `i_size` takes it exclusively, waits for the
//!   file's direct I/O (`inode_dio_wait`: completions move EOF) and zeroes the gap from the old
//!   EOF, then demotes to shared. `xfs_dio_write_end_io` sets the size at completion, in the
//!   unwritten conversion's transaction (`xfs_iomap_write_unwritten(.., update_isize)`).
//!   `xfs_file_dio_write_unaligned`: an unaligned write that extends, allocates or meets
//!   unwritten blocks takes the lock exclusively, drains the direct I/O and runs synchronously.
//!   A write into holes allocates under `XFS_ILOCK_EXCL` (`xfs_iomap_write_direct`), which the
//!   other submissions' mapping lookups wait on.
//! - `fs/ext4/extents.c`, `ext4_fallocate` / `ext4_zero_range` / `ext4_alloc_file_blocks`:
//!   `inode_lock`, `inode_dio_wait`, the page cache of the range dropped, then one
//!   `ext4_map_blocks` call per mapping of the range (at most `EXT_UNWRITTEN_MAX_LEN` blocks),
//!   each in its own handle with `EXT4_GET_BLOCKS_CREATE_UNWRIT_EXT |
//!   EXT4_GET_BLOCKS_CONVERT_UNWRITTEN` (holes allocated unwritten, written extents marked
//!   unwritten), the size raised to the range's end, the inode dirtied and
//!   `ext4_update_inode_fsync_trans(.., 1)` each time.
//! - `fs/xfs/xfs_file.c`, `__xfs_file_fallocate` / `xfs_falloc_zero_range`: `XFS_IOLOCK_EXCL |
//!   XFS_MMAPLOCK_EXCL`, `inode_dio_wait`, `xfs_free_file_space` (the written extents freed),
//!   `xfs_alloc_file_space` (the range allocated unwritten), `xfs_falloc_setsize`.
//! - `fs/iomap/direct-io.c`, `iomap_dio_rw`: `inode_dio_begin` at submission, `inode_dio_end`
//!   after the completion's `end_io` (conversion, size); a read of a hole or unwritten extent
//!   zeroes the user's buffer (`iomap_dio_hole_iter`, `iov_iter_zero`), a buffered one zeroes
//!   the page-cache folio; QEMU's file-posix zero-fills a read short at EOF. ext4 and XFS
//!   direct reads hold `i_rwsem` / `XFS_IOLOCK` shared (`ext4_dio_read_iter`,
//!   `xfs_file_dio_read`). rwsems are fair: a waiting writer blocks new readers
//!   (`kernel/locking/rwsem.c`, the handoff to the first waiter).
//!
//! # Rules (pseudo-code)
//!
//! ```text
//! file of disk d: blocks of 4 KiB; start state by [vm.disk.image] preallocation
//!   (initial_state): full, metadata → written; falloc → unwritten; off (qemu-img's
//!   default, so also a disk without the table) → hole; then populated's head written
//! file: i_size (initial_file_len), own (the top image's bytes: only they can grow), direct
//!   (cache.direct: O_DIRECT), dio (direct I/Os in flight, i_dio_count), the inode lock:
//!   holder (one exclusive request) and a FIFO queue of (request, exclusive)
//! lock(r, excl): queue r; grant: while nobody holds it, pop the front: shared → start it
//!   (its hold ends at once: submission costs no time here); exclusive → it holds the lock;
//!   if it drains and dio > 0, it starts when dio reaches 0; else it starts now
//! Io(write, range, token), buffered file (the page cache's writeback): no lock, no dio;
//!   every block written → the same Io (the cache's token: no cost, as a block device);
//!   else the allocation below; i_size = max(i_size, end) at once (the copy set it)
//! Io(write, range, token), direct file: lock(mode) where, with extend = range in own and
//!   end > i_size, holes / unwritten / written = the range's blocks, unaligned = offset or
//!   len not a multiple of 4 KiB:
//!   ext4: exclusive = extend | holes | (unaligned & unwritten);
//!         sync (held to completion) = exclusive & (extend | unaligned) | sync_dio
//!         (a shared sync hold keeps exclusive waiters out until it is done);
//!         drain = sync & unaligned & (holes | unwritten)
//!   XFS aligned: exclusive = gap (offset > i_size, in own) | holes; drain = gap; sync: no
//!   (sync_dio's shared IOLOCK uncounted: every exclusive IOLOCK taker drains anyway)
//!   XFS unaligned: exclusive = sync = drain = (end >= i_size, in own) | not all written
//!   started: every block written → data Io; else holes → allocated (ext4 with the first
//!         block at or past i_size: written, nothing to convert; else unwritten), per group
//!         touched its bitmap + descriptor block (ext4) or its AGF + 2 free-space leaves
//!         (XFS), the inode, the extent leaf; ext4 extend: the superblock (orphan add) and
//!         the inode; wait alloc_cost; then the data Io (dio += 1; an exclusive, not sync
//!         holder releases the lock); at its completion: extend → i_size = end, the inode
//!         dirtied; unwritten → written (conversion: the inode, the extent leaf), wait
//!         convert_cost; then done: dio -= 1, a sync holder releases the lock, the cache's
//!         token is done. Each dirtying sets the file's datasync tid to the running one.
//! Io(read, range, token): direct file, in own: lock(shared; ext4 with sync_dio: held until
//!   done), dio += 1 until done (a backing
//!   file's reads: neither, another inode); the written runs
//!   of the range as Ios, and the rest (holes, unwritten, past EOF) zeroed: a wait of
//!   bytes / MEMSET_BYTES_PER_SEC beside them; done when all are
//! Io(trim): the same Io (discard passes through; punching holes is left out)
//! zero_range(range, token)  (fallocate(FALLOC_FL_ZERO_RANGE), QEMU's write-zeroes):
//!   lock(exclusive, drain); then ext4: one call per run of one state in the range (runs
//!   capped at 32767 blocks): holes → unwritten (allocation's metadata), written →
//!   unwritten (the inode, the extent leaf), the inode dirtied always;
//!   XFS: written runs freed, then the runs of holes allocated unwritten (a call each,
//!   allocation's metadata), nothing dirtied when the range was all unwritten;
//!   in own and end > i_size → i_size = end, the inode dirtied;
//!   wait calls x alloc_cost; release; the token is done
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
//!   conversion after it, the zeroing of a read's holes), not work on a simulated core. The
//!   journal handles of the orphan list and of the size update cost no time of their own.
//! - One lock per file stands for `i_rwsem` (XFS: the IOLOCK, and the ILOCK its allocations
//!   take); submission takes no time, so a shared hold ends at once (unless its submitter
//!   waits, `sync_dio`) and only exclusive holders (allocations, synchronous writes, zero
//!   ranges) keep others waiting. Extent
//!   conversions at completion (`i_data_sem`, the ILOCK) do not wait for it.
//! - Buffered I/O (the host page cache's fetches and writeback) takes no lock: the kernel
//!   serializes buffered writers on `i_rwsem` only for their copy into the page cache (the
//!   host cache's Copy, not modelled here), and writeback raises the size as it allocates.
//!   PDC's journal writes, O_DIRECT on a buffered disk, are treated as buffered.
//! - A zero range's partial edge blocks count as whole blocks (QEMU zeroes whole clusters),
//!   and the page cache of the range is not dropped. XFS's zeroing of a gap past EOF writes
//!   nothing: the gap is holes here.
//! - Hole punching (discard with `discard=unmap`) and `fsync` (not datasync) are left out:
//!   QEMU calls fdatasync.

pub mod extents;

use crate::guest::ext4::{Layout, MkfsOptions};
use crate::guest::jbd2::Geometry;
use crate::image::ImageSpec;
use crate::params::{self, Entry, Kind, ParamError, ParamSpec, Value, Values};
use crate::request::Op;
use crate::slab::Slab;
use crate::units::transfer_ns;
use crate::{Ns, MS, SEC, US};
use extents::{BlockState, ExtentMap};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use thiserror::Error;

pub use crate::cache::Token;

/// Filesystem block size (both filesystems' mkfs default).
pub const BLOCK_BYTES: u64 = 4096;
/// A token of this policy (the host cache's never set this bit: its kinds are below 2^6).
pub const FS_TOKEN: u64 = 1 << 63;
/// The bit an engine sets on the tokens it hands to [`HostFs::on_zero_range`], so that it can
/// tell their [`FsAction::Done`] from the host cache's (whose kinds, shifted by 56, stay below
/// it) and from this policy's own ([`FS_TOKEN`]).
pub const ZERO_RANGE_TOKEN: u64 = 1 << 62;
/// ext4's longest unwritten extent (`EXT_UNWRITTEN_MAX_LEN`): one `ext4_map_blocks` call of
/// `ext4_alloc_file_blocks` maps at most this many blocks.
const EXT4_UNWRITTEN_MAX_BLOCKS: u64 = 32767;
/// XFS's longest extent (`XFS_MAX_BMBT_EXTLEN`, 2^21 - 1 blocks): one allocation call's most.
const XFS_MAX_EXTENT_BLOCKS: u64 = (1 << 21) - 1;
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
/// metadata                   raw: allocated and read as written (as falloc, written);
///                            qcow2: holes: QEMU maps every cluster and truncates the file
///                            to its full size (block/qcow2.c `preallocate_co`), so the data
///                            clusters are holes of the host file and a first write
///                            allocates them. The tables, written between the data
///                            clusters, count as holes too (a simplification: their reads
///                            cost the zero fill, not a device read)
/// falloc                     unwritten extents (posix_fallocate): a first write converts
/// full                       zeros written: allocated and written
/// populated p                the first p x file_bytes written, whatever the above
/// ```
pub fn initial_state(image: &ImageSpec, file_bytes: u64) -> (BlockState, u64) {
    use crate::image::Preallocation as P;
    let state = match (image.preallocation, image.format) {
        (P::Metadata, crate::image::Format::Qcow2) => BlockState::Hole,
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
    /// The file's size (`i_size`) when the run starts ([`crate::image::initial_file_len`]).
    pub len_bytes: u64,
    /// The region's first bytes that are the top image file, the one that grows
    /// ([`ImageSpec::own_file_bytes`]); backing files follow it and are never written.
    pub own_bytes: u64,
    /// Opened with O_DIRECT (`cache.direct`): its Ios are direct I/O, which take the inode
    /// lock; else they are the host page cache's fetches and writeback.
    pub direct: bool,
    /// Its direct I/O is submitted by synchronous system calls (QEMU's `aio=threads`: a
    /// worker's `preadv`/`pwritev`), so each request keeps the inode lock, shared or
    /// exclusive, until its I/O has completed (`iomap_dio_rw` waits for a sync kiocb before
    /// the filesystem unlocks); else (`aio=native`, `io_uring`) it is dropped at submission.
    pub sync_dio: bool,
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
    /// Direct writes that moved the file's size (extending writes).
    pub extending_writes: u64,
    /// Requests that waited for the inode lock (or for the file's direct I/O to drain), and
    /// their waits summed.
    pub lock_waits: u64,
    pub lock_wait_ns: u64,
    /// fallocate(FALLOC_FL_ZERO_RANGE) calls.
    pub zero_ranges: u64,
    /// Bytes read from holes, unwritten blocks or past EOF: zeroed by the kernel, no I/O.
    pub zeroed_read_bytes: u64,
}

type Tid = u64;

struct File {
    fs: usize,
    volume_offset: u64,
    map: ExtentMap,
    /// The transaction the next fdatasync must see committed (0: none).
    datasync_tid: Tid,
    stats: HostFsStats,
    /// `i_size`, the top image's bytes, O_DIRECT.
    size: u64,
    own: u64,
    direct: bool,
    sync_dio: bool,
    /// Direct I/Os submitted and not completed (`i_dio_count`).
    dio: u32,
    /// Shared holders of the inode lock that keep it until they are done (`sync_dio`).
    shared: u32,
    /// The inode lock: its exclusive holder (a slot of `pending`), whether that holder waits
    /// for `dio` to reach 0, and the requests waiting, in order, with the mode they want.
    holder: Option<usize>,
    draining: bool,
    queue: VecDeque<(usize, bool)>,
}

/// How a request takes the inode lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mode {
    exclusive: bool,
    /// Wait for the file's direct I/O to drain once the lock is held (`inode_dio_wait`).
    drain: bool,
    /// Hold the lock until the request is done (a synchronous write, a zero range, an ext4
    /// direct I/O of a `sync_dio` file); else an exclusive holder releases it once its I/O is
    /// submitted and a shared one at once.
    sync: bool,
    /// A direct I/O (counted in `dio` while in flight).
    direct: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// A direct write waiting for the inode lock.
    Queued,
    /// A write: allocated; its data Io next.
    Allocated,
    /// A write: its data Io is out; the conversion after it.
    DataOut,
    /// A write: converted; done after the conversion's time.
    Converted,
}

#[derive(Clone, Copy, Debug)]
enum Pending {
    Write {
        token: Token,
        disk: u32,
        offset: u64,
        len: u64,
        sync: bool,
        stage: Stage,
        mode: Mode,
        /// Its blocks are unwritten until its completion converts them.
        convert: bool,
        /// When it asked for the inode lock.
        since: Ns,
    },
    /// A read: its Ios and its zeroing still out (`remaining`; 0 while it waits for the lock).
    Read {
        token: Token,
        disk: u32,
        offset: u64,
        len: u64,
        sync: bool,
        remaining: u32,
        mode: Mode,
        since: Ns,
    },
    /// A zero range: waiting for the lock (or the drain), then its allocation's time.
    Zero {
        token: Token,
        disk: u32,
        offset: u64,
        len: u64,
        since: Ns,
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
                    size: f.len_bytes,
                    own: f.own_bytes.min(f.size_bytes),
                    direct: f.direct,
                    sync_dio: f.direct && f.sync_dio,
                    dio: 0,
                    shared: 0,
                    holder: None,
                    draining: false,
                    queue: VecDeque::new(),
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

    /// The size (`i_size`) of `disk`'s file.
    pub fn size(&self, disk: u32) -> Option<u64> {
        self.files.get(disk as usize)?.as_ref().map(|f| f.size)
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
        let direct = f.direct;
        match op {
            Op::Write if direct => {
                let mode = self.write_mode(disk, offset, len);
                let slot = self.pending.insert(Pending::Write {
                    token,
                    disk,
                    offset,
                    len,
                    sync,
                    stage: Stage::Queued,
                    mode,
                    convert: false,
                    since: now,
                });
                self.lock(now, disk, slot, mode.exclusive, out);
            }
            Op::Write => {
                // The page cache's writeback: the copy has set the size already.
                if offset < f.own && offset + len > f.size {
                    f.size = offset + len;
                }
                if f.map.all(b, n, BlockState::Written) {
                    return out.push(self.passthrough(disk, op, offset, len, sync, token));
                }
                let slot = self.pending.insert(Pending::Write {
                    token,
                    disk,
                    offset,
                    len,
                    sync,
                    stage: Stage::Queued,
                    mode: Mode::default(),
                    convert: false,
                    since: now,
                });
                self.start_write(now, slot, out);
            }
            Op::Read => {
                if !direct && f.map.all(b, n, BlockState::Written) {
                    return out.push(self.passthrough(disk, op, offset, len, sync, token));
                }
                // A backing file past the top image is an inode of its own, only ever read.
                let direct = direct && offset < f.own;
                let (sync_dio, fsi) = (f.sync_dio, f.fs);
                let ext4 = self.fss[fsi].kind == FsKind::Ext4;
                let mode = Mode {
                    direct,
                    // ext4_dio_read_iter holds i_rwsem shared until iomap_dio_rw returns.
                    sync: direct && sync_dio && ext4,
                    ..Mode::default()
                };
                let slot = self.pending.insert(Pending::Read {
                    token,
                    disk,
                    offset,
                    len,
                    sync,
                    remaining: 0,
                    mode,
                    since: now,
                });
                if direct {
                    self.lock(now, disk, slot, false, out);
                } else {
                    self.start_read(now, slot, out);
                }
            }
            Op::Trim | Op::Flush => out.push(self.passthrough(disk, op, offset, len, sync, token)),
        }
    }

    /// `fallocate(FALLOC_FL_ZERO_RANGE)` of `[offset, offset + len)` of `disk`'s file (QEMU's
    /// write-zeroes, block/file-posix.c `handle_aiocb_write_zeroes`); `Done { token }` when it
    /// returns. The engine marks `token` with [`ZERO_RANGE_TOKEN`].
    pub fn on_zero_range(
        &mut self,
        now: Ns,
        disk: u32,
        offset: u64,
        len: u64,
        token: Token,
        out: &mut Vec<FsAction>,
    ) {
        self.file(disk).stats.zero_ranges += 1;
        let slot = self.pending.insert(Pending::Zero {
            token,
            disk,
            offset,
            len,
            since: now,
        });
        self.lock(now, disk, slot, true, out);
    }

    /// The cache's Io unchanged (a block device's behaviour).
    fn passthrough(
        &self,
        disk: u32,
        op: Op,
        offset: u64,
        len: u64,
        sync: bool,
        token: Token,
    ) -> FsAction {
        let vo = self.files[disk as usize]
            .as_ref()
            .map_or(0, |f| f.volume_offset);
        FsAction::Io {
            disk,
            op,
            volume_offset: vo + offset,
            len,
            sync,
            fua: false,
            token,
        }
    }

    /// How a direct write of `[offset, offset + len)` takes the inode lock (the rules of the
    /// module doc: `ext4_dio_write_checks`, `xfs_file_dio_write_aligned` /
    /// `xfs_file_dio_write_unaligned`), from the file as it is when the write arrives.
    fn write_mode(&self, disk: u32, offset: u64, len: u64) -> Mode {
        let f = self.files[disk as usize].as_ref().expect("a file");
        let (b, n) = blocks_of(offset, len);
        let end = offset + len;
        let in_own = offset < f.own;
        let extend = in_own && end > f.size;
        let unaligned = !(offset | len).is_multiple_of(BLOCK_BYTES);
        let written = f.map.all(b, n, BlockState::Written);
        let holes = !written && f.map.count(b, n, BlockState::Hole) > 0;
        let unwritten = !written && f.map.count(b, n, BlockState::Unwritten) > 0;
        let (exclusive, sync, drain) = match self.fss[f.fs].kind {
            FsKind::Ext4 => {
                let overwrite = !extend && !holes;
                let exclusive = extend || !overwrite || (unaligned && unwritten);
                let forced = exclusive && (extend || unaligned);
                let drain = forced && unaligned && (holes || unwritten);
                (exclusive, forced || f.sync_dio, drain)
            }
            // XFS: a synchronous submitter's shared IOLOCK is not counted: every request that
            // takes the IOLOCK exclusively drains the direct I/O first (which waits for those
            // holds as well), and the aligned writes' exclusive hold stands for the ILOCK of
            // their allocation, which shared IOLOCK holders do not keep waiting.
            FsKind::Xfs if unaligned => {
                let x = (in_own && end >= f.size) || !written;
                (x, x, x)
            }
            FsKind::Xfs => {
                let gap = in_own && offset > f.size;
                (gap || holes, false, gap)
            }
        };
        Mode {
            exclusive,
            drain,
            sync,
            direct: true,
        }
    }

    /// Queue `slot` for `disk`'s inode lock and grant what can be.
    fn lock(&mut self, now: Ns, disk: u32, slot: usize, exclusive: bool, out: &mut Vec<FsAction>) {
        self.file(disk).queue.push_back((slot, exclusive));
        self.grant(now, disk, out);
    }

    /// Hand `disk`'s inode lock to its waiters in order while nobody holds it exclusively:
    /// the shared ones start (their hold ends at once, or at their end when `sync`), an
    /// exclusive one, once no shared hold is left, holds it (and starts unless it must wait
    /// for the file's direct I/O to drain first).
    fn grant(&mut self, now: Ns, disk: u32, out: &mut Vec<FsAction>) {
        loop {
            let f = self.file(disk);
            if f.holder.is_some() {
                return;
            }
            match f.queue.front() {
                None => return,
                Some(&(_, true)) if f.shared > 0 => return,
                _ => {}
            }
            let Some((slot, exclusive)) = f.queue.pop_front() else {
                return;
            };
            if !exclusive && self.mode(slot).sync {
                self.file(disk).shared += 1;
            }
            if exclusive {
                self.file(disk).holder = Some(slot);
                let drain = self.mode(slot).drain;
                let f = self.file(disk);
                if drain && f.dio > 0 {
                    f.draining = true;
                    return;
                }
            }
            self.start(now, slot, out);
        }
    }

    /// The lock mode of a request's slot.
    fn mode(&self, slot: usize) -> Mode {
        match *self.pending.get_ref(slot) {
            Pending::Write { mode, .. } | Pending::Read { mode, .. } => mode,
            Pending::Zero { .. } => Mode {
                exclusive: true,
                drain: true,
                sync: true,
                direct: false,
            },
            _ => Mode::default(),
        }
    }

    /// `slot` holds `disk`'s lock no more (the caller grants it on).
    fn release(&mut self, disk: u32, slot: usize) {
        let f = self.file(disk);
        if f.holder == Some(slot) {
            f.holder = None;
            f.draining = false;
        }
    }

    /// `slot`, done, lets its lock go: the exclusive hold, or the shared hold it kept.
    fn release_done(&mut self, disk: u32, slot: usize, mode: Mode) {
        self.release(disk, slot);
        if mode.direct && mode.sync && !mode.exclusive {
            let f = self.file(disk);
            f.shared = f.shared.saturating_sub(1);
        }
    }

    /// A direct I/O of `disk`'s file ended (`inode_dio_end`): a holder waiting for the drain
    /// starts when it was the last.
    fn dio_end(&mut self, now: Ns, disk: u32, out: &mut Vec<FsAction>) {
        let f = self.file(disk);
        f.dio = f.dio.saturating_sub(1);
        if f.dio == 0 && f.draining {
            f.draining = false;
            if let Some(h) = f.holder {
                self.start(now, h, out);
            }
        }
    }

    /// A request has the lock (or needs none): count its wait, then start it.
    fn start(&mut self, now: Ns, slot: usize, out: &mut Vec<FsAction>) {
        let (disk, since) = match *self.pending.get_ref(slot) {
            Pending::Write { disk, since, .. }
            | Pending::Read { disk, since, .. }
            | Pending::Zero { disk, since, .. } => (disk, since),
            _ => return,
        };
        if now > since {
            let st = f_stats(&mut self.files, disk);
            st.lock_waits += 1;
            st.lock_wait_ns += now - since;
        }
        match self.pending.get_ref(slot) {
            Pending::Write { .. } => self.start_write(now, slot, out),
            Pending::Read { .. } => self.start_read(now, slot, out),
            _ => self.start_zero(now, slot, out),
        }
    }

    /// A write starts: allocate its holes (then its data Io), or its data Io now.
    fn start_write(&mut self, now: Ns, slot: usize, out: &mut Vec<FsAction>) {
        let Pending::Write {
            disk,
            offset,
            len,
            mode,
            ..
        } = *self.pending.get_ref(slot)
        else {
            return;
        };
        let (b, n) = blocks_of(offset, len);
        let f = self.file(disk);
        let fs = f.fs;
        let ext4 = self.fss[fs].kind == FsKind::Ext4;
        let f = self.file(disk);
        let extend = mode.direct && offset < f.own && offset + len > f.size;
        // ext4_dio_write_checks, under the lock: an exclusive holder runs synchronously only
        // if the write still extends (or is unaligned), or if its submitter waits anyway.
        let mut mode = mode;
        if ext4 && mode.direct {
            let unaligned = !(offset | len).is_multiple_of(BLOCK_BYTES);
            mode.sync = f.sync_dio || (mode.exclusive && (extend || unaligned));
        }
        let mut convert = false;
        let mut holes = 0;
        if !f.map.all(b, n, BlockState::Written) {
            // ext4_iomap_alloc: blocks from i_size on are allocated written.
            let written = mode.direct && ext4 && offset < f.own && b * BLOCK_BYTES >= f.size;
            let target = if written {
                BlockState::Written
            } else {
                BlockState::Unwritten
            };
            convert = !written;
            holes = f.map.set(b, n, target)[0];
        }
        if extend && ext4 {
            self.dirty_orphan(disk);
        }
        if holes > 0 {
            self.file(disk).stats.blocks_allocated += holes;
            self.dirty_alloc(disk, b, n);
        }
        if let Pending::Write {
            stage,
            convert: c,
            mode: m,
            ..
        } = self.pending.get(slot)
        {
            *c = convert;
            *m = mode;
            *stage = if holes > 0 {
                Stage::Allocated
            } else {
                Stage::DataOut
            };
        }
        if holes > 0 {
            out.push(FsAction::Wake {
                at: now + self.fss[fs].alloc_ns,
                token: fs_token(slot),
            });
        } else {
            self.submit_write(disk, slot, out);
        }
        self.arm_timer(now, fs, out);
    }

    /// A write's data Io; an exclusive holder that is not synchronous lets the lock go.
    fn submit_write(&mut self, disk: u32, slot: usize, out: &mut Vec<FsAction>) {
        let Pending::Write {
            offset,
            len,
            sync,
            mode,
            ..
        } = *self.pending.get_ref(slot)
        else {
            return;
        };
        let f = self.file(disk);
        out.push(FsAction::Io {
            disk,
            op: Op::Write,
            volume_offset: f.volume_offset + offset,
            len,
            sync,
            fua: false,
            token: fs_token(slot),
        });
        if mode.direct {
            f.dio += 1;
        }
        if !mode.sync {
            self.release(disk, slot);
        }
    }

    /// A read starts: its written runs as Ios and the zeroing of the rest beside them.
    fn start_read(&mut self, now: Ns, slot: usize, out: &mut Vec<FsAction>) {
        let Pending::Read {
            disk,
            offset,
            len,
            sync,
            mode,
            ..
        } = *self.pending.get_ref(slot)
        else {
            return;
        };
        let (b, n) = blocks_of(offset, len);
        let end = offset + len;
        let f = self.file(disk);
        let vo = f.volume_offset;
        let (mut pieces, mut read) = (0u32, 0u64);
        f.map.runs(b, n, BlockState::Written, |s, k| {
            let lo = (s * BLOCK_BYTES).max(offset);
            let hi = ((s + k) * BLOCK_BYTES).min(end);
            if hi > lo {
                out.push(FsAction::Io {
                    disk,
                    op: Op::Read,
                    volume_offset: vo + lo,
                    len: hi - lo,
                    sync,
                    fua: false,
                    token: fs_token(slot),
                });
                pieces += 1;
                read += hi - lo;
            }
        });
        let zeroed = len - read;
        if zeroed > 0 || pieces == 0 {
            f.stats.zeroed_read_bytes += zeroed;
            out.push(FsAction::Wake {
                // The kernel zeroes the reader's buffer for holes and unwritten blocks
                // (`iov_iter_zero` of a direct read, a zeroed folio of a buffered one).
                at: now + transfer_ns(zeroed, crate::units::MEMSET_BYTES_PER_SEC),
                token: fs_token(slot),
            });
            pieces += 1;
        }
        if mode.direct {
            f.dio += 1;
        }
        if let Pending::Read { remaining, .. } = self.pending.get(slot) {
            *remaining = pieces;
        }
    }

    /// A zero range holds the lock with no direct I/O in flight: change the range's blocks to
    /// unwritten, raise the size, and wait for the calls' time.
    fn start_zero(&mut self, now: Ns, slot: usize, out: &mut Vec<FsAction>) {
        let Pending::Zero {
            disk, offset, len, ..
        } = *self.pending.get_ref(slot)
        else {
            return;
        };
        let (b, n) = blocks_of(offset, len);
        let f = self.file(disk);
        let fs = f.fs;
        let kind = self.fss[fs].kind;
        let f = self.file(disk);
        let runs_of = |m: &ExtentMap, state: BlockState| {
            let mut v = Vec::new();
            m.runs(b, n, state, |s, k| v.push((s, k)));
            v
        };
        let holes = runs_of(&f.map, BlockState::Hole);
        let written = runs_of(&f.map, BlockState::Written);
        let calls_of = |runs: &[(u64, u64)], max: u64| -> u64 {
            runs.iter().map(|&(_, k)| k.div_ceil(max)).sum()
        };
        let mut calls;
        let mut allocated = Vec::new();
        match kind {
            FsKind::Ext4 => {
                // ext4_alloc_file_blocks: one ext4_map_blocks per mapping, whatever its state.
                let unwritten = runs_of(&f.map, BlockState::Unwritten);
                calls = calls_of(&holes, EXT4_UNWRITTEN_MAX_BLOCKS)
                    + calls_of(&written, EXT4_UNWRITTEN_MAX_BLOCKS)
                    + calls_of(&unwritten, EXT4_UNWRITTEN_MAX_BLOCKS);
                allocated.extend_from_slice(&holes);
            }
            FsKind::Xfs => {
                // xfs_free_file_space, then xfs_alloc_file_space over the holes left.
                calls = calls_of(&written, XFS_MAX_EXTENT_BLOCKS);
                for &(s, k) in &written {
                    f.map.set(s, k, BlockState::Hole);
                }
                allocated = runs_of(&f.map, BlockState::Hole);
                calls += calls_of(&allocated, XFS_MAX_EXTENT_BLOCKS);
            }
        }
        let before = f.map.set(b, n, BlockState::Unwritten);
        let end = offset + len;
        let grows = offset < f.own && end > f.size;
        if grows {
            f.size = end;
        }
        let changed = before[1] < n.min(f.map.blocks().saturating_sub(b)) || grows;
        f.stats.blocks_allocated += holes.iter().map(|r| r.1).sum::<u64>();
        for &(s, k) in &allocated {
            self.dirty_alloc(disk, s, k);
        }
        if kind == FsKind::Ext4 {
            for &(s, _) in &written {
                self.dirty_convert(disk, s);
            }
            self.dirty_inode(disk);
        } else if changed {
            self.dirty_inode(disk);
        }
        calls = calls.max(u64::from(kind == FsKind::Ext4));
        out.push(FsAction::Wake {
            at: now + calls * self.fss[fs].alloc_ns,
            token: fs_token(slot),
        });
        self.arm_timer(now, fs, out);
    }

    /// A request is done: hand its token back, let the lock go if it held it, end its
    /// direct I/O, and grant the lock on.
    fn finish(&mut self, now: Ns, slot: usize, out: &mut Vec<FsAction>) {
        let mode = self.mode(slot);
        let (token, disk) = match self.pending.remove(slot) {
            Pending::Write { token, disk, .. }
            | Pending::Read { token, disk, .. }
            | Pending::Zero { token, disk, .. } => (token, disk),
            _ => return,
        };
        out.push(FsAction::Done { token });
        self.release_done(disk, slot, mode);
        if mode.direct {
            self.dio_end(now, disk, out);
        }
        self.grant(now, disk, out);
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
        match *self.pending.get_ref(slot) {
            Pending::Write {
                disk,
                offset,
                len,
                stage,
                mode,
                convert,
                ..
            } => match stage {
                // A queued write has no token out.
                Stage::Queued => {}
                Stage::Allocated => {
                    if let Pending::Write { stage, .. } = self.pending.get(slot) {
                        *stage = Stage::DataOut;
                    }
                    self.submit_write(disk, slot, out);
                    self.grant(now, disk, out);
                }
                Stage::DataOut => {
                    let (b, n) = blocks_of(offset, len);
                    let f = self.file(disk);
                    let fs = f.fs;
                    let end = offset + len;
                    // ext4_handle_inode_extension / xfs_dio_write_end_io: the new size.
                    let extend = mode.direct && offset < f.own && end > f.size;
                    if extend {
                        f.size = end;
                        f.stats.extending_writes += 1;
                        if self.fss[fs].kind == FsKind::Ext4 {
                            self.dirty_orphan(disk);
                        } else {
                            self.dirty_inode(disk);
                        }
                    }
                    if !convert {
                        if extend {
                            self.arm_timer(now, fs, out);
                        }
                        return self.finish(now, slot, out);
                    }
                    if let Pending::Write { stage, .. } = self.pending.get(slot) {
                        *stage = Stage::Converted;
                    }
                    let f = self.file(disk);
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
                    if converted || extend {
                        self.arm_timer(now, fs, out);
                    }
                }
                Stage::Converted => self.finish(now, slot, out),
            },
            Pending::Read { remaining, .. } => {
                if remaining <= 1 {
                    self.finish(now, slot, out);
                } else if let Pending::Read { remaining, .. } = self.pending.get(slot) {
                    *remaining -= 1;
                }
            }
            Pending::Zero { .. } => self.finish(now, slot, out),
            Pending::FsyncFlush { token } => {
                self.pending.remove(slot);
                out.push(FsAction::Done { token });
            }
            // An fsync waits on its commit (commit_done), never on a token of its own.
            Pending::Fsync { .. } => {}
            Pending::CommitLog { fs, remaining } => {
                if remaining > 1 {
                    *self.pending.get(slot) = Pending::CommitLog {
                        fs,
                        remaining: remaining - 1,
                    };
                    return;
                }
                *self.pending.get(slot) = Pending::CommitFlush { fs };
                out.push(FsAction::Flush {
                    disk: self.fss[fs].disk,
                    token: fs_token(slot),
                });
            }
            Pending::CommitFlush { fs } => {
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
                self.pending.remove(slot);
                self.commit_done(now, fs, out);
            }
            Pending::Timer { fs, tid } => {
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

    /// The inode of `disk`'s file dirtied in the running transaction, which becomes the one
    /// its fdatasync waits for (size and extent changes; `ext4_update_inode_fsync_trans(..,
    /// 1)`, XFS's `ili_fsync_fields`).
    fn dirty_inode(&mut self, disk: u32) {
        let f = self.files[disk as usize].as_mut().expect("a file");
        let s = &mut self.fss[f.fs];
        f.datasync_tid = s.running;
        s.files.insert(disk);
        s.dirty.insert(meta(3, disk, 0));
    }

    /// ext4's orphan list add and delete of an extending write (`ext4_orphan_add` /
    /// `ext4_orphan_del`): the superblock's `s_last_orphan` and the inode.
    fn dirty_orphan(&mut self, disk: u32) {
        self.dirty_inode(disk);
        let f = self.files[disk as usize].as_ref().expect("a file");
        self.fss[f.fs].dirty.insert(meta(8, 0, 0));
    }

    /// Metadata an extent change at block `b` of `disk`'s file dirties: its inode, and the
    /// extent leaf holding `b` when the extents no longer fit in the inode.
    fn dirty_convert(&mut self, disk: u32, b: u64) {
        self.dirty_inode(disk);
        let f = self.files[disk as usize].as_mut().expect("a file");
        let s = &mut self.fss[f.fs];
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
/// B+tree leaves, 8 ext4 superblock), the file, and an index.
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
