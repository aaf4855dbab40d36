//! JBD2, the journal of the guest's ext4, as a pure bookkeeping policy: time is an argument,
//! and instead of doing I/O it says what to write where. The orchestration (guest/os.rs)
//! issues the writes a [`CommitPlan`], a [`CommitDone`], a checkpoint or a [`TailUpdate`]
//! describes, waits for them, and reports back.
//!
//! # Sources (Linux 6.x, read for this module)
//!
//! - `fs/jbd2/commit.c`, `jbd2_journal_commit_transaction`: the commit sequence (ordered data
//!   submitted first, revoke records, descriptor + logged blocks under one plug, wait, commit
//!   record), the descriptor fill rule (`space_left < tag_bytes + 16 + csum_size` closes a
//!   descriptor; the first tag carries the 16-byte UUID), the commit-time tail update (only
//!   when it frees at least `j_max_transaction_buffers`), and phase 6 (each committed buffer
//!   leaves its older checkpoint transaction and joins this one's checkpoint list; it becomes
//!   a dirty buffer unless the running transaction holds it again).
//!   `journal_submit_commit_record`: `REQ_SYNC|REQ_PREFLUSH|REQ_FUA` when `JBD2_BARRIER` and
//!   no async commit, else `REQ_SYNC`; with async commit the record is sent with the log and
//!   `blkdev_issue_flush` follows it.
//! - `fs/jbd2/transaction.c`: `jbd2_get_transaction` (`t_start`, `t_expires = start +
//!   j_commit_interval`, `t_outstanding_credits = j_transaction_overhead_buffers`),
//!   `add_transaction_credits` (a handle that would take the running transaction above
//!   `j_max_transaction_buffers` starts its commit; `jbd2_log_space_left <
//!   j_max_transaction_buffers` waits for log space), `jbd2_journal_dirty_metadata` /
//!   `do_get_write_access` (a buffer of the committing transaction is filed again in the
//!   running one, jbd2's frozen copy; a dirty checkpointed buffer loses its dirty bit to the
//!   journal), `stop_this_handle` (unused credits return: a transaction's credits are its
//!   overhead plus the buffers it really dirtied), `jbd2_journal_forget`.
//! - `fs/jbd2/checkpoint.c`: `__jbd2_log_wait_for_space` (checkpoint while
//!   `jbd2_log_space_left < j_max_transaction_buffers`), `jbd2_log_do_checkpoint` (writes the
//!   oldest checkpoint transaction's dirty buffers in batches of `JBD2_NR_BATCH` = 64; a buffer
//!   still owned by a running or committing transaction forces that commit first),
//!   `jbd2_cleanup_journal_tail` (`blkdev_issue_flush` when `JBD2_BARRIER`, then the tail).
//! - `fs/jbd2/journal.c`: `jbd2_journal_next_log_block` (head advances, wraps from `j_last`
//!   to `j_first`), `jbd2_journal_get_log_tail` (tail = log start of the oldest checkpoint
//!   transaction, else of the committing one, else the head), `__jbd2_update_log_tail`
//!   (superblock written `REQ_SYNC|REQ_FUA`, then `j_free += freed`), `jbd2_write_superblock`
//!   (drops `REQ_FUA|REQ_PREFLUSH` without `JBD2_BARRIER`), `journal_reset` (`j_first = 1`,
//!   `j_free = j_last - j_first`, `JBD2_FLUSHED` when the on-disk log is empty: the first
//!   commit writes the superblock first, `REQ_SYNC`), `jbd2_journal_get_max_txn_bufs`
//!   (`j_total_len / 4`), `jbd2_descriptor_blocks_per_trans`,
//!   `journal_revoke_records_per_block`, `jbd2_trans_will_send_data_barrier`.
//! - `include/linux/jbd2.h`: `JBD2_DEFAULT_MAX_COMMIT_AGE` (5 s), `JBD2_MIN_JOURNAL_BLOCKS`
//!   (1024), `journal_header_t` (12 bytes), `journal_block_tag3_t` (16 bytes, CSUM_V3),
//!   `journal_block_tag_t` (12 bytes with INCOMPAT_64BIT), `jbd2_journal_block_tail` (4),
//!   `jbd2_journal_revoke_header_t` (16; 8-byte records with 64BIT), `jbd2_log_space_left`
//!   (`j_free - 32`, less the committing transaction's outstanding credits).
//! - `fs/ext4/super.c`: `data=ordered|writeback|journal`, `commit=` (seconds, 0 = default),
//!   `barrier`/`nobarrier` (`JBD2_BARRIER`), "can't mount with journal_async_commit in
//!   data=ordered mode"; `metadata_csum` gives CSUM_V3 and `64bit` the 64-bit tags.
//! - `fs/ext4/fsync.c`, `ext4_fsync_journal`: wait for `i_datasync_tid` (fdatasync) or
//!   `i_sync_tid` (fsync) with `jbd2_complete_transaction`, and issue an empty flush when
//!   barriers are on and that commit will not send one.
//! - `fs/ext4/inode.c`, `ext4_map_blocks`: data=ordered puts an inode on the transaction's
//!   list only when it allocated blocks, `ext4_jbd2_inode_add_wait` from writeback
//!   (`EXT4_GET_BLOCKS_IO_SUBMIT`: the commit only waits) and `ext4_jbd2_inode_add_write`
//!   elsewhere (the commit writes the data: `journal_submit_data_buffers`).
//! - e2fsprogs `lib/ext2fs/mkjournal.c`, `ext2fs_create_journal_superblock2`: `s_first = 1`
//!   (the log starts right after the journal superblock).
//!
//! # Rules (pseudo-code)
//!
//! ```text
//! geometry (4 KiB blocks):
//!   tag = 16 if csum_v3 else 12                       # 64bit journal
//!   tail = 4 if csum_v3 else 0
//!   tags_per_descriptor = (4096 - 12 - 16 - tail - 16) / tag        # 253 or 337
//!   revokes_per_block   = (4096 - 16 - tail) / 8                    # 509 or 510
//!   max_txn_bufs = blocks / 4
//!   overhead     = 1 + ceil(max_txn_bufs / tags_per_descriptor)     # commit + descriptors
//! log: journal block 0 is the superblock; the log is blocks [1, blocks), a ring;
//!   free = blocks - 1 at mount; a commit takes revoke + descriptor + logged + 1 blocks
//!   from the head; moving the tail gives them back.
//! running transaction: starts at its first buffer (t_start = now);
//!   credits = overhead + distinct buffers + ceil(revokes / revokes_per_block)
//!   must commit when now >= t_start + commit interval or credits >= max_txn_bufs
//! a handle may start only if free - 32 >= max_txn_bufs, else checkpoint (needs_checkpoint)
//! commit(T): T's ordered inodes' data written or waited for (data=ordered only);
//!   log = [revoke blocks][descriptor, up to tags_per_descriptor blocks]... contiguous
//!   from the head, split at the ring's end; wait for data and log;
//!   commit block: PREFLUSH|FUA with barrier (async commit: plain, with the log, then FLUSH)
//! commit done: each block of T leaves its older checkpoint transaction and joins T's;
//!   it becomes dirty for its home location unless the running transaction holds it again;
//!   tail moves now only if that frees >= max_txn_bufs (no flush of its own: the commit
//!   block's PREFLUSH covered it); superblock FUA
//! checkpoint: write the dirty blocks of the oldest checkpoint transaction; then
//!   FLUSH (barrier) and superblock FUA; the tail moves to the oldest transaction with blocks
//!   not yet home
//! fsync(ino): tid = i_datasync_tid or i_sync_tid; if tid not committed, commit it (waiting
//!   for a commit in progress first) and wait; flush after if barrier and that commit will
//!   not send one (it was committed before, or its commit record is already out)
//! ```
//!
//! # How the orchestration drives it
//!
//! ```text
//! metadata op:  if needs_checkpoint(): checkpoint first; then dirty_metadata(now, b) for
//!               each block (true: clean that block's dirty home copy), note_inode(ino, ..),
//!               add_ordered_inode / add_ordered_wait_inode (data=ordered), revoke(now, b)
//! timer/size:   if must_commit(now) and committing() is None: start_commit(now) -> plan;
//!               write ordered data, superblock (if superblock_first), plan.log; wait;
//!               commit_record_sent(tid); commit block with the plan's flags; wait;
//!               commit_written(tid) -> done: done.metadata / done.data become dirty home
//!               blocks; done.tail (if any) is a superblock write ending the commit
//! writeback:    a home block written -> home_written(b)
//! checkpoint:   checkpoint_plan(&mut out) -> write `out` home (home_written each), commit
//!               or wait as the step says; then tail_update() -> FLUSH (flush_first) +
//!               superblock write (fua)
//! fsync(ino):   write and wait the file's data; fsync_plan(ino, datasync): commit the
//!               running transaction if commit_running, wait for wait_tid, then FLUSH if flush
//! ```
//!
//! # Left out
//!
//! - Handle credit reservations: ext4 reserves worst-case credits per handle and returns the
//!   unused ones at `jbd2_journal_stop`; this model counts what the transaction keeps
//!   (overhead, buffers, revoke blocks), which is what decides a commit between handles.
//! - Fast commits (`fast_commit`), external journal devices, `journal_checksum` without
//!   `metadata_csum`, 32-bit journals, blocks other than 4 KiB, `min_batch_time` /
//!   `max_batch_time` (fsync batching), the shrinker of checkpointed buffers, aborts, and
//!   escaping of blocks that start with the journal magic (no extra I/O).
//! - The superblock write waits synchronously in jbd2 before `j_free` grows; here the space
//!   counts as free as soon as [`Journal::tail_update`] (or [`CommitDone::tail`]) returns:
//!   the orchestration keeps waiting handles until that write completes.

use crate::units::quote;
use crate::Ns;
use crate::SEC;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use thiserror::Error;

/// A transaction id (`tid_t`); compared modulo 2^32 as jbd2's `tid_gt` does.
pub type Tid = u32;

/// Filesystem and journal block size.
pub const BLOCK_BYTES: u64 = 4096;
/// `JBD2_DEFAULT_MAX_COMMIT_AGE`: ext4's default `commit=` interval.
pub const DEFAULT_COMMIT_INTERVAL_NS: Ns = 5 * SEC;
/// `JBD2_MIN_JOURNAL_BLOCKS`: the smallest journal jbd2 accepts.
pub const MIN_JOURNAL_BLOCKS: u64 = 1024;
/// `JBD2_NR_BATCH`: buffers `jbd2_log_do_checkpoint` writes under one plug.
pub const CHECKPOINT_BATCH: usize = 64;

/// Emptied block sets the journal keeps for its next transactions (`Journal::spare_sets`).
const SPARE_SETS: usize = 4;
/// `sizeof(journal_header_t)`: magic, block type, sequence.
const HEADER_BYTES: u64 = 12;
/// The journal UUID after a descriptor's first tag.
const UUID_BYTES: u64 = 16;
/// `sizeof(struct jbd2_journal_block_tail)`: a descriptor's or revoke block's checksum.
const BLOCK_TAIL_BYTES: u64 = 4;
/// `sizeof(journal_block_tag3_t)` (CSUM_V3).
const TAG3_BYTES: u64 = 16;
/// `sizeof(journal_block_tag_t)` with INCOMPAT_64BIT and no checksum feature.
const TAG_64BIT_BYTES: u64 = 12;
/// `sizeof(jbd2_journal_revoke_header_t)`: header and byte count.
const REVOKE_HEADER_BYTES: u64 = 16;
/// One revoke record with INCOMPAT_64BIT.
const REVOKE_RECORD_BYTES: u64 = 8;
/// `jbd2_log_space_left` keeps 32 blocks back "for rounding errors".
const LOG_SLACK_BLOCKS: u64 = 32;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Jbd2Error {
    #[error("data: '{name}' is not a data mode; accepted: {accepted}")]
    UnknownDataMode { name: String, accepted: String },
    #[error("journal blocks: {blocks} is below jbd2's minimum; accepted: at least {MIN_JOURNAL_BLOCKS} (JBD2_MIN_JOURNAL_BLOCKS)")]
    TooSmall { blocks: u64 },
    #[error("commit: the commit interval is 0; accepted: a positive interval (ext4's commit=0 means the 5 s default)")]
    ZeroCommitInterval,
    #[error("journal_async_commit: refused with data=ordered (fs/ext4/super.c); accepted with data=writeback or data=journal")]
    AsyncCommitOrdered,
    #[error(
        "dirty_data: data blocks are logged only with data=journal; this journal is data={mode}"
    )]
    DataNotJournalled { mode: &'static str },
    #[error("start_commit: transaction {tid} needs {needed} log blocks and {free} are free; checkpoint first (needs_checkpoint)")]
    LogFull { tid: Tid, needed: u64, free: u64 },
}

/// ext4's `data=` mount option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataMode {
    /// Metadata journaled; a transaction's new data blocks reach disk before its commit.
    Ordered,
    /// Metadata journaled; data written whenever writeback gets to it.
    Writeback,
    /// Data journaled like metadata.
    Journal,
}

impl DataMode {
    /// Every mode with its mount-option name: the one table `name`, `parse` and `accepted` read.
    pub const REGISTRY: [(DataMode, &'static str); 3] = [
        (DataMode::Ordered, "ordered"),
        (DataMode::Writeback, "writeback"),
        (DataMode::Journal, "journal"),
    ];

    /// The accepted names, for error lines: `ordered, writeback, journal`.
    pub fn accepted() -> String {
        Self::REGISTRY.map(|(_, n)| n).join(", ")
    }

    pub fn parse(s: &str) -> Result<Self, Jbd2Error> {
        Self::REGISTRY
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(m, _)| *m)
            .ok_or_else(|| Jbd2Error::UnknownDataMode {
                name: quote(s),
                accepted: Self::accepted(),
            })
    }

    pub fn name(self) -> &'static str {
        Self::REGISTRY
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("", |(_, n)| n)
    }
}

/// The journal as mke2fs laid it out and ext4 mounted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalParams {
    /// Filesystem block of the journal's first block (its superblock).
    pub start_block: u64,
    /// Journal length in blocks (`s_maxlen`), superblock included.
    pub blocks: u64,
    /// `commit=`: the age at which the running transaction commits.
    pub commit_interval_ns: Ns,
    /// `barrier` (default) or `nobarrier`.
    pub barrier: bool,
    pub mode: DataMode,
    /// `metadata_csum`: CSUM_V3, 16-byte tags and a checksum tail per descriptor.
    pub csum_v3: bool,
    /// `journal_async_commit`: the commit record goes with the log, a flush follows.
    pub async_commit: bool,
}

impl JournalParams {
    /// ext4's defaults (mke2fs 1.47, Linux 6.x): 5 s commits, barriers, data=ordered,
    /// metadata_csum, no async commit.
    pub fn ext4_default(start_block: u64, blocks: u64) -> Self {
        Self {
            start_block,
            blocks,
            commit_interval_ns: DEFAULT_COMMIT_INTERVAL_NS,
            barrier: true,
            mode: DataMode::Ordered,
            csum_v3: true,
            async_commit: false,
        }
    }
}

/// Sizes jbd2 derives from the journal's length and features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// `journal_tag_bytes`.
    pub tag_bytes: u64,
    /// Tags one descriptor block holds (the commit.c fill rule).
    pub tags_per_descriptor: u64,
    /// `journal_revoke_records_per_block`.
    pub revokes_per_block: u64,
    /// `j_max_transaction_buffers` (`jbd2_journal_get_max_txn_bufs`).
    pub max_txn_bufs: u64,
    /// `j_transaction_overhead_buffers`: the commit block and the descriptors of a full
    /// transaction, charged to every transaction from its start.
    pub overhead: u64,
}

impl Geometry {
    pub fn of(blocks: u64, csum_v3: bool) -> Self {
        let (tag_bytes, tail) = if csum_v3 {
            (TAG3_BYTES, BLOCK_TAIL_BYTES)
        } else {
            (TAG_64BIT_BYTES, 0)
        };
        let tags_per_descriptor =
            (BLOCK_BYTES - HEADER_BYTES - UUID_BYTES - tail - UUID_BYTES) / tag_bytes;
        let max_txn_bufs = blocks / 4;
        Self {
            tag_bytes,
            tags_per_descriptor,
            revokes_per_block: (BLOCK_BYTES - REVOKE_HEADER_BYTES - tail) / REVOKE_RECORD_BYTES,
            max_txn_bufs,
            overhead: 1 + max_txn_bufs.div_ceil(tags_per_descriptor),
        }
    }

    /// Descriptor blocks for `logged` blocks.
    pub fn descriptor_blocks(&self, logged: u64) -> u64 {
        logged.div_ceil(self.tags_per_descriptor)
    }

    /// Revoke blocks for `revokes` records.
    pub fn revoke_blocks(&self, revokes: u64) -> u64 {
        revokes.div_ceil(self.revokes_per_block)
    }
}

/// What a commit writes, in the order jbd2 writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPlan {
    pub tid: Tid,
    /// data=ordered: write these inodes' dirty data (in flight with the log writes), and wait
    /// for it before the commit block (`JI_WRITE_DATA|JI_WAIT_DATA`).
    pub ordered_inodes: Vec<u32>,
    /// data=ordered: only wait for these inodes' data writes already in flight before the
    /// commit block (`JI_WAIT_DATA`: blocks allocated by writeback itself).
    pub ordered_wait_inodes: Vec<u32>,
    /// The journal superblock (block `start_block`) first, `REQ_SYNC`: the first commit
    /// after mount (jbd2's `JBD2_FLUSHED`).
    pub superblock_first: bool,
    /// Filesystem block ranges (start, count) of the revoke blocks, then descriptor and
    /// logged blocks, `REQ_SYNC` under one plug: contiguous from the log head, split in two
    /// where the ring wraps, in log order (the piece up to the journal's end first), as
    /// jbd2 submits them. The order the disk sees is the plug's ([`super::blk`]: a 6.1 guest
    /// without an elevator sends the piece at the journal's start first).
    pub log: Vec<(u64, u64)>,
    /// The commit record's filesystem block, written once the log (and ordered data) is
    /// durable; with async commit, together with the log.
    pub commit_block: u64,
    /// `REQ_PREFLUSH` on the commit block (barrier, no async commit).
    pub flush_before_commit: bool,
    /// `REQ_FUA` on the commit block (barrier, no async commit).
    pub fua_commit: bool,
    /// Async commit: the commit block is sent with the log, without waiting for it.
    pub commit_with_log: bool,
    /// Async commit with barrier: an empty flush after the commit block completes.
    pub flush_after_commit: bool,
    pub logged_blocks: u64,
    pub descriptor_blocks: u64,
    pub revoke_blocks: u64,
}

impl CommitPlan {
    /// Journal blocks this commit writes: revoke, descriptor, logged and commit blocks.
    pub fn journal_blocks(&self) -> u64 {
        self.revoke_blocks + self.descriptor_blocks + self.logged_blocks + 1
    }
}

/// A commit made durable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitDone {
    /// Metadata blocks now dirty for their home location (the guest's block-device cache),
    /// in the order the transaction dirtied them; each reports [`Journal::home_written`].
    pub metadata: Vec<u64>,
    /// data=journal: data blocks now dirty for their home location (the file's pages).
    pub data: Vec<u64>,
    /// The commit-time tail move, when it frees at least `max_txn_bufs` blocks: jbd2 ends
    /// the commit (wakes fsync waiters) only after this superblock write.
    pub tail: Option<TailUpdate>,
}

/// A journal superblock write that moves the log tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailUpdate {
    /// Filesystem block of the journal superblock (`start_block`).
    pub block: u64,
    /// Oldest transaction still in the log (`s_sequence`).
    pub tid: Tid,
    /// Its first journal block (`s_start`, relative to the journal).
    pub tail: u64,
    /// Log blocks the move gives back.
    pub freed: u64,
    /// An empty flush first (checkpoint path, barrier): the checkpointed blocks are durable.
    pub flush_first: bool,
    /// `REQ_FUA` on the superblock write (barrier).
    pub fua: bool,
}

/// The next step of a checkpoint ([`Journal::checkpoint_plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointStep {
    /// No checkpoint transaction has blocks left to write: call [`Journal::tail_update`], or
    /// wait for the committing transaction if that gives nothing.
    Idle,
    /// Write the listed blocks home (batches of [`CHECKPOINT_BATCH`] under a plug), report
    /// each with [`Journal::home_written`], then call [`Journal::tail_update`].
    Write { tid: Tid },
    /// Some blocks of the oldest transaction are held by transaction `commit` (running or
    /// committing): write the listed ones, commit (or wait for) `commit`, then plan again.
    CommitFirst { tid: Tid, commit: Tid },
}

/// What fsync or fdatasync of an inode needs from the journal (`ext4_fsync_journal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsyncPlan {
    /// The transaction to wait for, if not yet committed.
    pub wait_tid: Option<Tid>,
    /// `wait_tid` is the running transaction: start its commit (after the one in progress).
    pub commit_running: bool,
    /// An empty flush after the wait (barrier, and that commit sends none).
    pub flush: bool,
}

/// Counters for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub commits: u64,
    /// Journal blocks per commit (revoke, descriptor, logged and commit blocks), in order.
    pub commit_blocks: Vec<u64>,
    pub logged_blocks: u64,
    pub descriptor_blocks: u64,
    pub revoke_blocks: u64,
    /// Superblock writes (first commit and tail updates).
    pub superblock_writes: u64,
    pub tail_updates: u64,
    /// Checkpoint passes and the blocks they asked to write home.
    pub checkpoints: u64,
    pub checkpoint_blocks: u64,
    /// Commits started because the running transaction reached `max_txn_bufs` credits.
    pub size_commits: u64,
    /// Sum over commits of the running time, first buffer to commit start (jbd2's
    /// `rs_running`).
    pub running_ns: u64,
}

impl JournalStats {
    /// All journal writes in blocks: every commit's blocks and the superblock writes.
    pub fn journal_blocks_written(&self) -> u64 {
        self.commit_blocks.iter().sum::<u64>() + self.superblock_writes
    }

    pub fn max_commit_blocks(&self) -> u64 {
        self.commit_blocks.iter().copied().max().unwrap_or(0)
    }

    pub fn mean_commit_blocks(&self) -> f64 {
        self.per_commit(self.commit_blocks.iter().sum::<u64>())
    }

    /// Mean running time of a transaction (`/proc/fs/jbd2/*/info`, "ms running transaction").
    pub fn mean_running_ns(&self) -> f64 {
        self.per_commit(self.running_ns)
    }

    fn per_commit(&self, total: u64) -> f64 {
        if self.commits == 0 {
            return 0.0;
        }
        total as f64 / self.commits as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Metadata,
    Data,
}

/// The running transaction (`j_running_transaction`).
#[derive(Debug, Default)]
struct Running {
    tid: Tid,
    start: Option<Ns>,
    /// Buffers in the order they joined (`t_buffers`).
    order: Vec<(u64, Kind)>,
    members: FxHashSet<u64>,
    /// Ordered inodes in the order they joined, and whether the commit writes their data.
    ordered: Vec<(u32, bool)>,
    ordered_index: FxHashMap<u32, usize>,
    /// Revoke records (`jbd2_journal_revoke`), each also a forgotten buffer.
    revokes: Vec<u64>,
    revoke_set: FxHashSet<u64>,
}

impl Running {
    fn new(tid: Tid) -> Self {
        Self {
            tid,
            ..Self::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.order.is_empty() && self.revokes.is_empty() && self.ordered.is_empty()
    }
}

/// The committing transaction (`j_committing_transaction`).
#[derive(Debug)]
struct Committing {
    tid: Tid,
    log_start: u64,
    blocks: Vec<(u64, Kind)>,
    members: FxHashSet<u64>,
    revokes: Vec<u64>,
    record_sent: bool,
    /// The tail the commit may move to: (tid, log start).
    tail_target: (Tid, u64),
}

/// A committed transaction whose blocks are not all home (`j_checkpoint_transactions`).
#[derive(Debug)]
struct CheckpointTxn {
    tid: Tid,
    log_start: u64,
    pending: FxHashSet<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct InodeTids {
    sync: Tid,
    datasync: Tid,
}

/// `tid_gt`: `a` is after `b`, modulo 2^32.
fn tid_gt(a: Tid, b: Tid) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The journal of one ext4 filesystem.
#[derive(Debug)]
pub struct Journal {
    p: JournalParams,
    geo: Geometry,
    /// Next log block to write, in [1, blocks).
    head: u64,
    /// First log block still needed (`j_tail`).
    tail: u64,
    tail_tid: Tid,
    free: u64,
    /// `JBD2_FLUSHED`: the on-disk superblock says the log is empty.
    flushed: bool,
    running: Running,
    committing: Option<Committing>,
    checkpoint: VecDeque<CheckpointTxn>,
    /// Checkpoint transactions with no block left to write home still on the list. Only the
    /// list's front is read (the tail, the checkpoint's next transaction) and the rest is
    /// searched by tid, so an emptied transaction behind a pending one may stay until it
    /// reaches the front, or until such entries are half the list (release_checkpointed).
    emptied: usize,
    /// Tests: drop every emptied entry at each release, as the list did before it kept them
    /// behind the front (the reference the lazy release is checked against).
    #[cfg(test)]
    eager_release: bool,
    /// Block → the checkpoint transaction that holds it (`b_cp_transaction`).
    owner: FxHashMap<u64, Tid>,
    inodes: FxHashMap<u32, InodeTids>,
    /// Emptied containers of finished transactions, kept with their room for the next ones
    /// (a transaction's sets would otherwise grow by rehashing from empty each time): block
    /// sets, and the committed transaction's buffer and revoke lists. Only looked up or
    /// sorted before use, so their room changes no result.
    spare_sets: Vec<FxHashSet<u64>>,
    spare_order: Vec<(u64, Kind)>,
    spare_revokes: Vec<u64>,
    committed: Tid,
    stats: JournalStats,
}

impl Journal {
    pub fn new(p: JournalParams) -> Result<Self, Jbd2Error> {
        if p.blocks < MIN_JOURNAL_BLOCKS {
            return Err(Jbd2Error::TooSmall { blocks: p.blocks });
        }
        if p.commit_interval_ns == 0 {
            return Err(Jbd2Error::ZeroCommitInterval);
        }
        if p.async_commit && p.mode == DataMode::Ordered {
            return Err(Jbd2Error::AsyncCommitOrdered);
        }
        Ok(Self {
            p,
            geo: Geometry::of(p.blocks, p.csum_v3),
            head: 1,
            tail: 1,
            tail_tid: 1,
            free: p.blocks - 1,
            flushed: true,
            running: Running::new(1),
            committing: None,
            checkpoint: VecDeque::new(),
            emptied: 0,
            #[cfg(test)]
            eager_release: false,
            owner: FxHashMap::default(),
            inodes: FxHashMap::default(),
            spare_sets: Vec::new(),
            spare_order: Vec::new(),
            spare_revokes: Vec::new(),
            committed: 0,
            stats: JournalStats::default(),
        })
    }

    pub fn params(&self) -> &JournalParams {
        &self.p
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn begin(&mut self, now: Ns) {
        self.running.start.get_or_insert(now);
    }

    /// Whether the running transaction holds `block`: logged again, or revoked.
    fn journaled_by_running(&self, block: u64) -> bool {
        self.running.members.contains(&block)
            || (!self.running.revoke_set.is_empty() && self.running.revoke_set.contains(&block))
    }

    /// Whether `block` is held by the running or the committing transaction (`b_transaction`).
    fn journaled(&self, block: u64) -> bool {
        self.journaled_by_running(block)
            || self
                .committing
                .as_ref()
                .is_some_and(|c| c.members.contains(&block))
    }

    fn join(&mut self, now: Ns, block: u64, kind: Kind) -> bool {
        self.begin(now);
        // (Most transactions revoke nothing: the set's look-up is skipped then.)
        if !self.running.revoke_set.is_empty() && self.running.revoke_set.remove(&block) {
            // jbd2_journal_cancel_revoke: the block is journaled again in this transaction.
            self.running.revokes.retain(|&b| b != block);
        }
        if !self.running.members.insert(block) {
            return false;
        }
        self.running.order.push((block, kind));
        // do_get_write_access: a checkpointed buffer waiting for its home write gives its
        // dirty bit to the journal; the caller drops that pending write. (A block of the
        // committing transaction gave it when it joined that one.)
        self.owner.contains_key(&block)
            && !self
                .committing
                .as_ref()
                .is_some_and(|c| c.members.contains(&block))
    }

    /// A metadata buffer joins the running transaction (`jbd2_journal_dirty_metadata`),
    /// once per transaction; a block of the committing transaction joins too (jbd2's frozen
    /// copy). The running transaction starts at its first buffer. Returns true when the
    /// block was dirty for its home location after an earlier commit: the caller cleans
    /// that copy unless its write is already in flight (the journal now carries it).
    pub fn dirty_metadata(&mut self, now: Ns, block: u64) -> bool {
        self.join(now, block, Kind::Metadata)
    }

    /// data=journal: a data block is logged like metadata (same return as
    /// [`Journal::dirty_metadata`]).
    pub fn dirty_data(&mut self, now: Ns, block: u64) -> Result<bool, Jbd2Error> {
        if self.p.mode != DataMode::Journal {
            return Err(Jbd2Error::DataNotJournalled {
                mode: self.p.mode.name(),
            });
        }
        Ok(self.join(now, block, Kind::Data))
    }

    /// data=ordered: the inode's newly allocated blocks must reach disk before the running
    /// transaction commits, and the commit writes them (`ext4_jbd2_inode_add_write`, from
    /// `ext4_map_blocks` outside writeback). Nothing in the other modes: ext4 adds inodes
    /// only when `ext4_should_order_data`.
    pub fn add_ordered_inode(&mut self, now: Ns, ino: u32) {
        self.add_ordered(now, ino, true);
    }

    /// data=ordered: as [`Journal::add_ordered_inode`], but the commit only waits for the
    /// inode's data writes (`ext4_jbd2_inode_add_wait`: blocks allocated by writeback,
    /// `EXT4_GET_BLOCKS_IO_SUBMIT`, the delayed-allocation path).
    pub fn add_ordered_wait_inode(&mut self, now: Ns, ino: u32) {
        self.add_ordered(now, ino, false);
    }

    fn add_ordered(&mut self, now: Ns, ino: u32, write: bool) {
        if self.p.mode != DataMode::Ordered {
            return;
        }
        self.begin(now);
        let r = &mut self.running;
        match r.ordered_index.get(&ino) {
            Some(&i) => r.ordered[i].1 |= write,
            None => {
                r.ordered_index.insert(ino, r.ordered.len());
                r.ordered.push((ino, write));
            }
        }
    }

    /// A freed metadata block (`ext4_forget`: `jbd2_journal_revoke` + `jbd2_journal_forget`):
    /// a revoke record in the running transaction; the block leaves the running
    /// transaction, and its older checkpoint entry is dropped when this one commits. The
    /// caller drops the block's dirty copy (it is never written home).
    pub fn revoke(&mut self, now: Ns, block: u64) {
        self.begin(now);
        if self.running.members.remove(&block) {
            self.running.order.retain(|&(b, _)| b != block);
        }
        if self.running.revoke_set.insert(block) {
            self.running.revokes.push(block);
        }
    }

    /// ext4_update_inode_fsync_trans: the inode changed in the running transaction (`datasync`:
    /// a change fdatasync must persist, such as size or allocation). Returns that tid.
    pub fn note_inode(&mut self, ino: u32, datasync: bool) -> Tid {
        let tid = self.running.tid;
        let t = self.inodes.entry(ino).or_default();
        t.sync = tid;
        if datasync {
            t.datasync = tid;
        }
        tid
    }

    /// The last transaction that changed the inode (`i_sync_tid`, or `i_datasync_tid` for
    /// `datasync`); None if it never changed since mount.
    pub fn inode_tid(&self, ino: u32, datasync: bool) -> Option<Tid> {
        let t = self.inodes.get(&ino)?;
        let tid = if datasync { t.datasync } else { t.sync };
        (tid != 0).then_some(tid)
    }

    /// `jbd2_trans_will_send_data_barrier`: the commit of `tid` is still to send its flush.
    pub fn will_send_data_barrier(&self, tid: Tid) -> bool {
        if !self.p.barrier || !tid_gt(tid, self.committed) {
            return false;
        }
        match &self.committing {
            Some(c) if c.tid == tid => !c.record_sent,
            _ => true,
        }
    }

    /// `ext4_fsync_journal` for inode `ino` (after its data were written and waited for).
    pub fn fsync_plan(&self, ino: u32, datasync: bool) -> FsyncPlan {
        let tid = self.inode_tid(ino, datasync).unwrap_or(0);
        let wait_tid = tid_gt(tid, self.committed).then_some(tid);
        FsyncPlan {
            wait_tid,
            commit_running: wait_tid == Some(self.running.tid),
            flush: self.p.barrier && !self.will_send_data_barrier(tid),
        }
    }

    pub fn running_tid(&self) -> Tid {
        self.running.tid
    }

    pub fn running_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Buffers in the running transaction.
    pub fn running_blocks(&self) -> u64 {
        self.running.order.len() as u64
    }

    /// `t_outstanding_credits` of the running transaction between handles.
    pub fn running_credits(&self) -> u64 {
        self.geo.overhead
            + self.running.order.len() as u64
            + self.geo.revoke_blocks(self.running.revokes.len() as u64)
    }

    pub fn committing(&self) -> Option<Tid> {
        self.committing.as_ref().map(|c| c.tid)
    }

    /// The last fully committed transaction (`j_commit_sequence`); 0 before the first.
    pub fn committed_tid(&self) -> Tid {
        self.committed
    }

    /// When the running transaction reaches the commit interval (`t_expires`).
    pub fn commit_deadline(&self) -> Option<Ns> {
        if self.running.is_empty() {
            return None;
        }
        self.running
            .start
            .map(|s| s.saturating_add(self.p.commit_interval_ns))
    }

    fn full(&self) -> bool {
        self.running_credits() >= self.geo.max_txn_bufs
    }

    /// The running transaction must commit: its age reached the commit interval, or its
    /// credits reached `max_txn_bufs` (a further handle would not fit).
    pub fn must_commit(&self, now: Ns) -> bool {
        self.commit_deadline().is_some_and(|d| now >= d)
            || (!self.running.is_empty() && self.full())
    }

    /// Free log blocks (`j_free`).
    pub fn free_blocks(&self) -> u64 {
        self.free
    }

    /// `jbd2_log_space_left` (the committing transaction's log is already taken from `free`).
    pub fn space_left(&self) -> u64 {
        self.free.saturating_sub(LOG_SLACK_BLOCKS)
    }

    /// A new handle must wait for a checkpoint: `jbd2_log_space_left < max_txn_bufs`
    /// (`add_transaction_credits`, `__jbd2_log_wait_for_space`).
    pub fn needs_checkpoint(&self) -> bool {
        self.space_left() < self.geo.max_txn_bufs
    }

    /// Take `n` blocks from the head: filesystem ranges, split where the ring wraps.
    fn take(&mut self, n: u64, out: &mut Vec<(u64, u64)>) {
        let mut left = n;
        while left > 0 {
            let run = left.min(self.p.blocks - self.head);
            out.push((self.p.start_block + self.head, run));
            self.head += run;
            if self.head == self.p.blocks {
                self.head = 1;
            }
            left -= run;
        }
        self.free -= n;
    }

    /// `jbd2_journal_get_log_tail`.
    fn tail_target(&self) -> (Tid, u64) {
        if let Some(t) = self.checkpoint.front() {
            return (t.tid, t.log_start);
        }
        if let Some(c) = &self.committing {
            return (c.tid, c.log_start);
        }
        (self.running.tid, self.head)
    }

    /// Drop checkpoint transactions with every block home (`__jbd2_journal_remove_checkpoint`)
    /// from the front of the list, where they are seen; the whole list is compacted only
    /// once its emptied entries are half of it, so each emptied transaction costs O(1)
    /// amortized instead of a walk over the list (which holds every committed transaction
    /// with a block writeback has not yet written home).
    ///
    /// ```text
    /// while front is empty: pop it
    /// if 2 * emptied > len: drop every empty entry (order kept)
    /// ```
    fn release_checkpointed(&mut self) {
        if self.emptied == 0 {
            return;
        }
        while self
            .checkpoint
            .front()
            .is_some_and(|t| t.pending.is_empty())
        {
            let t = self.checkpoint.pop_front().expect("a front entry");
            self.emptied -= 1;
            if self.spare_sets.len() < SPARE_SETS {
                self.spare_sets.push(t.pending);
            }
        }
        #[cfg(test)]
        let compact = self.eager_release || 2 * self.emptied > self.checkpoint.len();
        #[cfg(not(test))]
        let compact = 2 * self.emptied > self.checkpoint.len();
        if compact {
            let spare = &mut self.spare_sets;
            self.checkpoint.retain_mut(|t| {
                if !t.pending.is_empty() {
                    return true;
                }
                if spare.len() < SPARE_SETS {
                    spare.push(std::mem::take(&mut t.pending));
                }
                false
            });
            self.emptied = 0;
        }
    }

    /// An empty block set, with the room of a finished transaction's if one is spare.
    fn spare_set(&mut self) -> FxHashSet<u64> {
        self.spare_sets.pop().unwrap_or_default()
    }

    /// Log blocks from the tail to `block`.
    fn distance(&self, block: u64) -> u64 {
        if block >= self.tail {
            block - self.tail
        } else {
            block + (self.p.blocks - 1) - self.tail
        }
    }

    fn move_tail(&mut self, (tid, block): (Tid, u64), flush_first: bool) -> TailUpdate {
        let freed = self.distance(block);
        self.free += freed;
        self.tail = block;
        self.tail_tid = tid;
        self.stats.tail_updates += 1;
        self.stats.superblock_writes += 1;
        TailUpdate {
            block: self.p.start_block,
            tid,
            tail: block,
            freed,
            flush_first,
            fua: self.p.barrier,
        }
    }

    /// Running → committing (`jbd2_journal_commit_transaction` up to the log writes): None
    /// if the running transaction is empty or a commit is in progress; an error if the log
    /// has no room (the caller skipped [`Journal::needs_checkpoint`]).
    pub fn start_commit(&mut self, now: Ns) -> Result<Option<CommitPlan>, Jbd2Error> {
        if self.running.is_empty() || self.committing.is_some() {
            return Ok(None);
        }
        let logged = self.running.order.len() as u64;
        let descriptor_blocks = self.geo.descriptor_blocks(logged);
        let revoke_blocks = self.geo.revoke_blocks(self.running.revokes.len() as u64);
        let needed = revoke_blocks + descriptor_blocks + logged + 1;
        if needed > self.free {
            return Err(Jbd2Error::LogFull {
                tid: self.running.tid,
                needed,
                free: self.free,
            });
        }
        if self.full() {
            self.stats.size_commits += 1;
        }
        let mut next = Running::new(self.running.tid.wrapping_add(1));
        next.members = self.spare_set();
        next.order = std::mem::take(&mut self.spare_order);
        next.revokes = std::mem::take(&mut self.spare_revokes);
        let mut r = std::mem::replace(&mut self.running, next);
        self.release_checkpointed();
        let superblock_first = std::mem::take(&mut self.flushed);
        let log_start = self.head;
        let mut log = Vec::with_capacity(2);
        self.take(needed - 1, &mut log);
        let mut commit = Vec::with_capacity(1);
        self.take(1, &mut commit);
        let commit_block = commit.first().map_or(self.p.start_block, |&(b, _)| b);
        let barrier_record = self.p.barrier && !self.p.async_commit;
        let plan = CommitPlan {
            tid: r.tid,
            ordered_inodes: r.ordered.iter().filter(|o| o.1).map(|o| o.0).collect(),
            ordered_wait_inodes: r.ordered.iter().filter(|o| !o.1).map(|o| o.0).collect(),
            superblock_first,
            log,
            commit_block,
            flush_before_commit: barrier_record,
            fua_commit: barrier_record,
            commit_with_log: self.p.async_commit,
            flush_after_commit: self.p.async_commit && self.p.barrier,
            logged_blocks: logged,
            descriptor_blocks,
            revoke_blocks,
        };
        // The new running transaction takes the old one's inode lists and revoke set, emptied.
        r.ordered.clear();
        r.ordered_index.clear();
        r.revoke_set.clear();
        self.running.ordered = std::mem::take(&mut r.ordered);
        self.running.ordered_index = std::mem::take(&mut r.ordered_index);
        self.running.revoke_set = std::mem::take(&mut r.revoke_set);
        // jbd2_journal_get_log_tail, as the commit computes it before its record.
        let tail_target = self
            .checkpoint
            .front()
            .map_or((r.tid, log_start), |t| (t.tid, t.log_start));
        self.committing = Some(Committing {
            tid: r.tid,
            log_start,
            blocks: r.order,
            members: r.members,
            revokes: r.revokes,
            record_sent: false,
            tail_target,
        });
        let s = &mut self.stats;
        s.commits += 1;
        s.commit_blocks.push(needed);
        s.logged_blocks += logged;
        s.descriptor_blocks += descriptor_blocks;
        s.revoke_blocks += revoke_blocks;
        s.superblock_writes += u64::from(superblock_first);
        s.running_ns += r.start.map_or(0, |t| now.saturating_sub(t));
        Ok(Some(plan))
    }

    /// The commit record of `tid` was submitted (`T_COMMIT_JFLUSH`): a later fsync of that
    /// transaction needs its own flush.
    pub fn commit_record_sent(&mut self, tid: Tid) {
        if let Some(c) = self.committing.as_mut().filter(|c| c.tid == tid) {
            c.record_sent = true;
        }
    }

    /// The commit block of `tid` is durable: the transaction goes to the checkpoint list and
    /// its blocks become dirty for their home locations (phase 6 of the commit). None if
    /// `tid` is not committing.
    pub fn commit_written(&mut self, tid: Tid) -> Option<CommitDone> {
        if self.committing.as_ref().is_none_or(|c| c.tid != tid) {
            return None;
        }
        let mut c = self.committing.take()?;
        let mut done = CommitDone::default();
        let mut pending = self.spare_set();
        for &(b, kind) in &c.blocks {
            self.drop_checkpoint_entry(b);
            self.owner.insert(b, tid);
            pending.insert(b);
            // Held again by the running transaction (or forgotten there): not dirty yet.
            if !self.journaled_by_running(b) {
                match kind {
                    Kind::Metadata => done.metadata.push(b),
                    Kind::Data => done.data.push(b),
                }
            }
        }
        for &b in &c.revokes {
            self.drop_checkpoint_entry(b);
        }
        self.emptied += usize::from(pending.is_empty());
        self.checkpoint.push_back(CheckpointTxn {
            tid,
            log_start: c.log_start,
            pending,
        });
        self.committed = tid;
        let target = c.tail_target;
        // Its containers go spare for the transactions to come.
        c.members.clear();
        if self.spare_sets.len() < SPARE_SETS {
            self.spare_sets.push(std::mem::take(&mut c.members));
        }
        c.blocks.clear();
        self.spare_order = std::mem::take(&mut c.blocks);
        c.revokes.clear();
        self.spare_revokes = std::mem::take(&mut c.revokes);
        if tid_gt(target.0, self.tail_tid) && self.distance(target.1) >= self.geo.max_txn_bufs {
            done.tail = Some(self.move_tail(target, false));
        }
        self.release_checkpointed();
        Some(done)
    }

    /// The block leaves the checkpoint transaction that held it (the list is in tid order).
    fn drop_checkpoint_entry(&mut self, block: u64) {
        let Some(old) = self.owner.remove(&block) else {
            return;
        };
        let Some(first) = self.checkpoint.front().map(|t| t.tid) else {
            return;
        };
        let key = old.wrapping_sub(first);
        if let Ok(i) = self
            .checkpoint
            .binary_search_by(|t| t.tid.wrapping_sub(first).cmp(&key))
        {
            let pending = &mut self.checkpoint[i].pending;
            if pending.remove(&block) && pending.is_empty() {
                self.emptied += 1;
            }
        }
    }

    /// A block written after a commit reached its home location (writeback or checkpoint).
    pub fn home_written(&mut self, block: u64) {
        self.drop_checkpoint_entry(block);
    }

    /// The oldest checkpoint transaction's blocks still to write home (sorted), and what
    /// else the checkpoint needs (`jbd2_log_do_checkpoint`). Call once per pass and wait
    /// for the writes before planning again.
    pub fn checkpoint_plan(&mut self, out: &mut Vec<u64>) -> CheckpointStep {
        out.clear();
        self.release_checkpointed();
        let Some(t) = self.checkpoint.front() else {
            return CheckpointStep::Idle;
        };
        let tid = t.tid;
        let mut held = false;
        for &b in &t.pending {
            if self.journaled(b) {
                held = true;
            } else {
                out.push(b);
            }
        }
        out.sort_unstable();
        self.stats.checkpoints += 1;
        self.stats.checkpoint_blocks += out.len() as u64;
        if !held {
            return CheckpointStep::Write { tid };
        }
        let commit = match &self.committing {
            Some(c) if t.pending.iter().any(|b| c.members.contains(b)) => c.tid,
            _ => self.running.tid,
        };
        CheckpointStep::CommitFirst { tid, commit }
    }

    /// `jbd2_cleanup_journal_tail`: when transactions at the tail have every block home, the
    /// superblock write that moves the tail past them (flush first with barriers).
    pub fn tail_update(&mut self) -> Option<TailUpdate> {
        self.release_checkpointed();
        let target = self.tail_target();
        if !tid_gt(target.0, self.tail_tid) {
            return None;
        }
        Some(self.move_tail(target, self.p.barrier))
    }

    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const START: u64 = 10_000;

    fn params(blocks: u64, mode: DataMode) -> JournalParams {
        JournalParams {
            mode,
            ..JournalParams::ext4_default(START, blocks)
        }
    }

    fn journal(blocks: u64, mode: DataMode) -> Journal {
        Journal::new(params(blocks, mode)).expect("valid journal")
    }

    /// Dirty `n` metadata blocks from `first` on and commit them; returns the plan.
    fn commit_blocks(j: &mut Journal, now: Ns, first: u64, n: u64) -> CommitPlan {
        for b in first..first + n {
            j.dirty_metadata(now, b);
        }
        j.start_commit(now)
            .expect("log has room")
            .expect("transaction not empty")
    }

    /// Commit `n` blocks and make the commit durable.
    fn commit_durable(j: &mut Journal, now: Ns, first: u64, n: u64) -> CommitDone {
        let plan = commit_blocks(j, now, first, n);
        j.commit_written(plan.tid).expect("committing")
    }

    /// commit.c's descriptor loop replayed: tags until `space_left < tag + 16 + csum`.
    fn tags_by_commit_loop(tag: u64, csum: u64) -> u64 {
        let mut space = BLOCK_BYTES - HEADER_BYTES;
        let mut tags = 0;
        loop {
            space -= tag;
            if tags == 0 {
                space -= UUID_BYTES;
            }
            tags += 1;
            if space < tag + UUID_BYTES + csum {
                return tags;
            }
        }
    }

    #[test]
    fn a_descriptor_holds_as_many_tags_as_the_commit_loop_fits() {
        let v3 = Geometry::of(32768, true);
        let plain = Geometry::of(32768, false);
        assert_eq!(v3.tag_bytes, 16);
        assert_eq!(plain.tag_bytes, 12);
        assert_eq!(v3.tags_per_descriptor, tags_by_commit_loop(16, 4));
        assert_eq!(plain.tags_per_descriptor, tags_by_commit_loop(12, 0));
        assert_eq!(
            (v3.tags_per_descriptor, plain.tags_per_descriptor),
            (253, 337)
        );
        assert_eq!((v3.revokes_per_block, plain.revokes_per_block), (509, 510));
    }

    #[test]
    fn n_logged_blocks_need_ceil_n_over_253_descriptors() {
        let g = Geometry::of(32768, true);
        for (n, d) in [
            (0, 0),
            (1, 1),
            (253, 1),
            (254, 2),
            (506, 2),
            (507, 3),
            (1000, 4),
        ] {
            assert_eq!(g.descriptor_blocks(n), d, "{n} blocks");
        }
        let mut j = journal(32768, DataMode::Ordered);
        let plan = commit_blocks(&mut j, 0, 500, 254);
        assert_eq!(plan.descriptor_blocks, 2);
        assert_eq!(plan.log, vec![(START + 1, 256)]);
        assert_eq!(plan.journal_blocks(), 257);
    }

    #[test]
    fn a_three_block_transaction_is_a_descriptor_and_three_blocks_at_the_head_then_the_commit_block(
    ) {
        let mut j = journal(1024, DataMode::Ordered);
        j.add_ordered_inode(0, 12);
        j.add_ordered_wait_inode(0, 13);
        j.add_ordered_wait_inode(0, 12);
        let plan = commit_blocks(&mut j, 0, 500, 3);
        assert_eq!(plan.tid, 1);
        assert_eq!(plan.ordered_inodes, vec![12]);
        assert_eq!(plan.ordered_wait_inodes, vec![13]);
        assert!(plan.superblock_first, "first commit after mount");
        assert_eq!(plan.log, vec![(START + 1, 4)]);
        assert_eq!(plan.commit_block, START + 5);
        assert!(plan.flush_before_commit && plan.fua_commit);
        assert!(!plan.commit_with_log && !plan.flush_after_commit);
        assert_eq!((plan.logged_blocks, plan.descriptor_blocks), (3, 1));
        assert_eq!(j.committing(), Some(1));
        let done = j.commit_written(1).expect("committing");
        assert_eq!(done.metadata, vec![500, 501, 502]);
        assert_eq!(j.committed_tid(), 1);
        let next = commit_blocks(&mut j, 1, 600, 3);
        assert!(!next.superblock_first);
        assert_eq!(next.log, vec![(START + 6, 4)]);
        assert_eq!(j.stats().commit_blocks, vec![5, 5]);
        assert_eq!(j.stats().journal_blocks_written(), 11);
    }

    #[test]
    fn the_log_range_splits_in_two_where_the_ring_wraps() {
        let mut j = journal(1024, DataMode::Ordered);
        for i in 0..5 {
            commit_durable(&mut j, 0, 1000 * (i + 1), 200);
        }
        // Five commits of 1 + 200 + 1 blocks: the head is at 1 + 1010.
        assert_eq!(j.free_blocks(), 1023 - 1010);
        for i in 0..5 {
            for b in 1000 * (i + 1)..1000 * (i + 1) + 200 {
                j.home_written(b);
            }
        }
        let t = j.tail_update().expect("every block home");
        assert_eq!((t.tid, t.tail, t.freed), (6, 1011, 1010));
        let plan = commit_blocks(&mut j, 0, 9000, 15);
        assert_eq!(plan.log, vec![(START + 1011, 13), (START + 1, 3)]);
        assert_eq!(plan.commit_block, START + 4);
    }

    #[test]
    fn a_transaction_is_at_most_a_quarter_of_the_journal() {
        let mut j = journal(32768, DataMode::Ordered);
        let g = *j.geometry();
        assert_eq!(g.max_txn_bufs, 32768 / 4);
        assert_eq!(g.overhead, 1 + 8192_u64.div_ceil(253));
        let fits = g.max_txn_bufs - g.overhead - 1;
        for b in 0..fits {
            j.dirty_metadata(0, b);
        }
        assert!(!j.must_commit(0));
        j.dirty_metadata(0, fits);
        assert_eq!(j.running_credits(), g.max_txn_bufs);
        assert!(j.must_commit(0));
        j.start_commit(0).expect("room").expect("not empty");
        assert_eq!(j.stats().size_commits, 1);
    }

    #[test]
    fn the_running_transaction_must_commit_at_exactly_the_commit_interval() {
        let mut j = journal(1024, DataMode::Ordered);
        assert_eq!(j.commit_deadline(), None);
        assert!(!j.must_commit(u64::MAX));
        j.dirty_metadata(100, 7);
        j.dirty_metadata(3 * SEC, 8);
        assert_eq!(j.commit_deadline(), Some(100 + 5 * SEC));
        assert!(!j.must_commit(100 + 5 * SEC - 1));
        assert!(j.must_commit(100 + 5 * SEC));
        j.start_commit(100 + 5 * SEC)
            .expect("room")
            .expect("not empty");
        assert_eq!(j.stats().mean_running_ns(), (5 * SEC) as f64);
    }

    #[test]
    fn a_checkpoint_is_needed_when_free_space_runs_low_and_the_tail_moves_once_the_oldest_is_home()
    {
        let mut j = journal(1024, DataMode::Ordered);
        // max_txn_bufs 256: a handle needs free - 32 >= 256.
        for i in 0..3 {
            commit_durable(&mut j, 0, 1000 * (i + 1), 200);
        }
        assert_eq!(j.free_blocks(), 1023 - 3 * 202);
        assert!(!j.needs_checkpoint());
        commit_durable(&mut j, 0, 4000, 200);
        assert_eq!(j.free_blocks(), 1023 - 4 * 202);
        assert!(j.needs_checkpoint());
        let mut out = Vec::new();
        assert_eq!(
            j.checkpoint_plan(&mut out),
            CheckpointStep::Write { tid: 1 }
        );
        assert_eq!(out, (1000..1200).collect::<Vec<_>>());
        for &b in &out[..199] {
            j.home_written(b);
        }
        assert_eq!(j.tail_update(), None, "one block of the oldest is not home");
        j.home_written(out[199]);
        let t = j.tail_update().expect("oldest fully home");
        assert_eq!(
            t,
            TailUpdate {
                block: START,
                tid: 2,
                tail: 203,
                freed: 202,
                flush_first: true,
                fua: true
            }
        );
        assert_eq!(j.free_blocks(), 1023 - 3 * 202);
        assert!(!j.needs_checkpoint());
    }

    #[test]
    fn a_commit_moves_the_tail_itself_only_when_that_frees_a_full_transaction() {
        let mut j = journal(1024, DataMode::Ordered);
        commit_durable(&mut j, 0, 1000, 200);
        commit_durable(&mut j, 0, 2000, 200);
        (1000..1200).for_each(|b| j.home_written(b));
        let done = commit_durable(&mut j, 0, 3000, 10);
        assert_eq!(done.tail, None, "202 freed < 256");
        (2000..2200).for_each(|b| j.home_written(b));
        let done = commit_durable(&mut j, 0, 4000, 10);
        let t = done.tail.expect("404 freed >= 256");
        assert_eq!(
            (t.tid, t.freed, t.flush_first, t.fua),
            (3, 404, false, true)
        );
    }

    #[test]
    fn a_block_of_the_committing_transaction_joins_the_running_one_and_stays_clean_until_it_commits(
    ) {
        let mut j = journal(1024, DataMode::Ordered);
        let first = commit_blocks(&mut j, 0, 50, 2);
        assert!(
            !j.dirty_metadata(1, 50),
            "frozen copy, not yet a dirty home block"
        );
        let done = j.commit_written(first.tid).expect("committing");
        assert_eq!(done.metadata, vec![51]);
        let mut out = Vec::new();
        assert_eq!(
            j.checkpoint_plan(&mut out),
            CheckpointStep::CommitFirst { tid: 1, commit: 2 }
        );
        assert_eq!(out, vec![51]);
        let second = j.start_commit(2).expect("room").expect("block 50");
        assert_eq!(second.logged_blocks, 1);
        let done = j.commit_written(second.tid).expect("committing");
        assert_eq!(done.metadata, vec![50]);
        j.home_written(51);
        assert_eq!(
            j.checkpoint_plan(&mut out),
            CheckpointStep::Write { tid: 2 }
        );
        assert_eq!(out, vec![50]);
    }

    #[test]
    fn a_home_block_dirtied_again_gives_its_pending_write_to_the_journal() {
        let mut j = journal(1024, DataMode::Ordered);
        commit_durable(&mut j, 0, 70, 1);
        assert!(j.dirty_metadata(1, 70));
        assert!(!j.dirty_metadata(1, 71));
        assert!(
            !j.dirty_metadata(1, 70),
            "already in the running transaction"
        );
        j.start_commit(1).expect("room").expect("not empty");
        assert!(
            !j.dirty_metadata(2, 70),
            "its dirty copy went to the committing transaction"
        );
        j.home_written(70);
        let done = j.commit_written(2).expect("committing");
        assert_eq!(
            done.metadata,
            vec![71],
            "70 is held by the running transaction"
        );
        assert!(j.dirty_metadata(3, 71), "dirty for home since commit 2");
    }

    #[test]
    fn a_revoke_is_a_revoke_block_in_the_log_and_drops_the_block_from_the_transaction() {
        let mut j = journal(1024, DataMode::Ordered);
        commit_durable(&mut j, 0, 80, 2);
        j.dirty_metadata(1, 90);
        j.dirty_metadata(1, 91);
        j.revoke(1, 80);
        j.revoke(1, 91);
        j.dirty_metadata(1, 92);
        j.revoke(1, 92);
        j.dirty_metadata(1, 92); // jbd2_journal_cancel_revoke
        let plan = j.start_commit(1).expect("room").expect("not empty");
        assert_eq!((plan.revoke_blocks, plan.logged_blocks), (1, 2));
        assert_eq!(plan.log, vec![(START + 5, 4)]);
        let done = j.commit_written(plan.tid).expect("committing");
        assert_eq!(done.metadata, vec![90, 92]);
        j.home_written(81);
        let mut out = Vec::new();
        assert_eq!(
            j.checkpoint_plan(&mut out),
            CheckpointStep::Write { tid: 2 }
        );
        assert_eq!(
            out,
            vec![90, 92],
            "block 80 left transaction 1 with the revoke"
        );
    }

    #[test]
    fn data_journal_logs_data_blocks_and_writeback_has_no_ordered_inodes() {
        let mut j = journal(1024, DataMode::Journal);
        j.add_ordered_inode(0, 12);
        for b in [300, 301, 302] {
            assert_eq!(j.dirty_data(0, b), Ok(false));
        }
        j.dirty_metadata(0, 40);
        let plan = j.start_commit(0).expect("room").expect("not empty");
        assert!(plan.ordered_inodes.is_empty());
        assert_eq!((plan.logged_blocks, plan.descriptor_blocks), (4, 1));
        let done = j.commit_written(plan.tid).expect("committing");
        assert_eq!((done.data, done.metadata), (vec![300, 301, 302], vec![40]));

        let mut w = journal(1024, DataMode::Writeback);
        w.add_ordered_inode(0, 12);
        w.add_ordered_wait_inode(0, 13);
        w.dirty_metadata(0, 40);
        let plan = w.start_commit(0).expect("room").expect("not empty");
        assert!(plan.ordered_inodes.is_empty() && plan.ordered_wait_inodes.is_empty());
        assert_eq!(
            w.dirty_data(0, 300).map_err(|e| e.to_string()),
            Err("dirty_data: data blocks are logged only with data=journal; this journal is data=writeback".into())
        );
    }

    #[test]
    fn nobarrier_commits_and_tail_updates_carry_no_flush_or_fua() {
        let mut j = Journal::new(JournalParams {
            barrier: false,
            ..params(1024, DataMode::Ordered)
        })
        .expect("valid");
        j.note_inode(12, true);
        let plan = commit_blocks(&mut j, 0, 10, 3);
        assert!(!plan.flush_before_commit && !plan.fua_commit && !plan.flush_after_commit);
        assert!(!j.fsync_plan(12, true).flush);
        j.commit_written(plan.tid);
        (10..13).for_each(|b| j.home_written(b));
        let t = j.tail_update().expect("all home");
        assert!(!t.flush_first && !t.fua);
        assert!(!j.fsync_plan(12, true).flush);
    }

    #[test]
    fn async_commit_sends_the_commit_block_with_the_log_then_a_flush() {
        let mut j = Journal::new(JournalParams {
            async_commit: true,
            ..params(1024, DataMode::Writeback)
        })
        .expect("valid");
        let plan = commit_blocks(&mut j, 0, 10, 3);
        assert!(plan.commit_with_log && plan.flush_after_commit);
        assert!(!plan.flush_before_commit && !plan.fua_commit);
        assert_eq!(
            Journal::new(JournalParams {
                async_commit: true,
                ..params(1024, DataMode::Ordered)
            })
            .map_err(|e| e.to_string())
            .err(),
            Some("journal_async_commit: refused with data=ordered (fs/ext4/super.c); accepted with data=writeback or data=journal".into())
        );
    }

    #[test]
    fn fsync_waits_for_the_inodes_transaction_and_flushes_only_when_its_commit_sends_none() {
        let mut j = journal(1024, DataMode::Ordered);
        let never = j.fsync_plan(5, true);
        assert_eq!(
            never,
            FsyncPlan {
                wait_tid: None,
                commit_running: false,
                flush: true
            },
            "overwrite without metadata change: data + one flush"
        );
        j.dirty_metadata(0, 20);
        assert_eq!(j.note_inode(5, false), 1);
        assert_eq!(j.fsync_plan(5, true).wait_tid, None, "no datasync change");
        let p = j.fsync_plan(5, false);
        assert_eq!(
            (p.wait_tid, p.commit_running, p.flush),
            (Some(1), true, false)
        );
        let plan = j.start_commit(0).expect("room").expect("not empty");
        let p = j.fsync_plan(5, false);
        assert_eq!(
            (p.wait_tid, p.commit_running, p.flush),
            (Some(1), false, false)
        );
        j.commit_record_sent(plan.tid);
        assert!(j.fsync_plan(5, false).flush, "record already out");
        j.commit_written(plan.tid);
        let p = j.fsync_plan(5, false);
        assert_eq!((p.wait_tid, p.flush), (None, true));
    }

    #[test]
    fn a_commit_that_does_not_fit_the_log_is_refused_with_the_sizes() {
        let mut j = journal(1024, DataMode::Ordered);
        for i in 0..4 {
            commit_durable(&mut j, 0, 1000 * (i + 1), 250);
        }
        for b in 0..250 {
            j.dirty_metadata(0, 9000 + b);
        }
        assert_eq!(
            j.start_commit(0).map_err(|e| e.to_string()).err(),
            Some("start_commit: transaction 5 needs 252 log blocks and 15 are free; checkpoint first (needs_checkpoint)".into())
        );
        assert_eq!(j.running_blocks(), 250, "nothing changed");
    }

    #[test]
    fn bad_parameters_get_one_line_naming_the_field_and_the_accepted_values() {
        assert_eq!(DataMode::parse("journal"), Ok(DataMode::Journal));
        for m in DataMode::REGISTRY.map(|(m, _)| m) {
            assert_eq!(DataMode::parse(m.name()), Ok(m));
        }
        assert_eq!(
            DataMode::parse("ordred").map_err(|e| e.to_string()),
            Err("data: 'ordred' is not a data mode; accepted: ordered, writeback, journal".into())
        );
        assert_eq!(
            Journal::new(params(1023, DataMode::Ordered)).map_err(|e| e.to_string()).err(),
            Some("journal blocks: 1023 is below jbd2's minimum; accepted: at least 1024 (JBD2_MIN_JOURNAL_BLOCKS)".into())
        );
        assert_eq!(
            Journal::new(JournalParams {
                commit_interval_ns: 0,
                ..params(1024, DataMode::Ordered)
            })
            .err(),
            Some(Jbd2Error::ZeroCommitInterval)
        );
    }

    /// One step of a random workload, driven by the protocol of the module doc.
    #[derive(Clone, Debug)]
    enum Op {
        Dirty(u64),
        Revoke(u64),
        Commit,
        CommitDone,
        Home(u64),
        Checkpoint,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => (0..2000_u64).prop_map(Op::Dirty),
            1 => (0..2000_u64).prop_map(Op::Revoke),
            2 => Just(Op::Commit),
            2 => Just(Op::CommitDone),
            3 => (0..2000_u64).prop_map(Op::Home),
            1 => Just(Op::Checkpoint),
        ]
    }

    /// Finish the commit in progress, then commit the running transaction.
    fn commit_now(j: &mut Journal) {
        if let Some(tid) = j.committing() {
            j.commit_written(tid);
        }
        j.start_commit(0)
            .expect("the protocol keeps room for a commit");
    }

    /// Checkpoint until a handle may start (`__jbd2_log_wait_for_space`).
    fn make_room(j: &mut Journal) {
        let mut out = Vec::new();
        for _ in 0..64 {
            if !j.needs_checkpoint() {
                return;
            }
            match j.checkpoint_plan(&mut out) {
                CheckpointStep::Idle => {
                    if j.tail_update().is_none() {
                        let tid = j.committing().expect("space is held by a commit");
                        j.commit_written(tid);
                    }
                }
                CheckpointStep::Write { .. } => {
                    out.iter().for_each(|&b| j.home_written(b));
                    j.tail_update();
                }
                CheckpointStep::CommitFirst { .. } => {
                    out.iter().for_each(|&b| j.home_written(b));
                    commit_now(j);
                }
            }
        }
        panic!("no room after 64 checkpoint steps");
    }

    /// The log from the tail to the head holds every live transaction and nothing else.
    fn check_log(j: &Journal) {
        let ring = j.p.blocks - 1;
        let used = j.distance(j.head);
        assert_eq!(j.free, ring - used, "free + used = the ring");
        let starts = j
            .checkpoint
            .iter()
            .filter(|t| !t.pending.is_empty())
            .map(|t| t.log_start)
            .chain(j.committing.as_ref().map(|c| c.log_start));
        for start in starts {
            assert!(
                j.distance(start) < used,
                "a live transaction at {start} lies between tail {} and head {}",
                j.tail,
                j.head
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn a_commit_never_overwrites_the_log_of_a_transaction_still_to_checkpoint(
            ops in proptest::collection::vec(op(), 2000..4000)
        ) {
            let mut j = journal(1024, DataMode::Ordered);
            for op in ops {
                match op {
                    Op::Dirty(b) | Op::Revoke(b) => {
                        make_room(&mut j);
                        if j.running_credits() + 1 >= j.geometry().max_txn_bufs {
                            commit_now(&mut j);
                            make_room(&mut j);
                        }
                        if let Op::Revoke(_) = op {
                            j.revoke(0, b);
                        } else {
                            j.dirty_metadata(0, b);
                        }
                    }
                    Op::Commit => {
                        if j.committing().is_none() {
                            j.start_commit(0).expect("the protocol keeps room for a commit");
                        }
                    }
                    Op::CommitDone => {
                        if let Some(tid) = j.committing() {
                            j.commit_written(tid);
                        }
                    }
                    Op::Home(b) => j.home_written(b),
                    Op::Checkpoint => make_room(&mut j),
                }
                check_log(&j);
            }
        }

        #[test]
        fn emptied_checkpoint_transactions_left_behind_the_front_change_no_answer_of_the_journal(
            ops in proptest::collection::vec(op(), 2000..4000)
        ) {
            // The same operations on a journal that drops every emptied transaction at each
            // release (the list before) and on one that leaves them behind the front: every
            // answer is the same, and so are the live transactions in order.
            let mut lazy = journal(1024, DataMode::Ordered);
            let mut eager = journal(1024, DataMode::Ordered);
            eager.eager_release = true;
            let (mut out_l, mut out_e) = (Vec::new(), Vec::new());
            for op in ops {
                let mut answers = Vec::new();
                for (j, out) in [(&mut lazy, &mut out_l), (&mut eager, &mut out_e)] {
                    let a = match op {
                        Op::Dirty(b) => {
                            if j.running_credits() + 1 >= j.geometry().max_txn_bufs
                                || j.needs_checkpoint()
                            {
                                format!("full {:?}", j.committing())
                            } else {
                                format!("{}", j.dirty_metadata(0, b))
                            }
                        }
                        Op::Revoke(b) => {
                            if j.running_credits() + 1 >= j.geometry().max_txn_bufs
                                || j.needs_checkpoint()
                            {
                                format!("full {:?}", j.committing())
                            } else {
                                j.revoke(0, b);
                                String::new()
                            }
                        }
                        Op::Commit => match j.committing() {
                            None => format!("{:?}", j.start_commit(0)),
                            Some(t) => format!("committing {t}"),
                        },
                        Op::CommitDone => {
                            format!("{:?}", j.committing().map(|t| j.commit_written(t)))
                        }
                        Op::Home(b) => {
                            j.home_written(b);
                            String::new()
                        }
                        Op::Checkpoint => {
                            let step = j.checkpoint_plan(out);
                            out.iter().for_each(|&b| j.home_written(b));
                            format!("{step:?} {out:?} {:?}", j.tail_update())
                        }
                    };
                    let live: Vec<(Tid, u64, usize)> = j
                        .checkpoint
                        .iter()
                        .filter(|t| !t.pending.is_empty())
                        .map(|t| (t.tid, t.log_start, t.pending.len()))
                        .collect();
                    answers.push((a, live, j.space_left(), j.stats().clone()));
                }
                prop_assert_eq!(&answers[0], &answers[1]);
            }
        }
    }
}
