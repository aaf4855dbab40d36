//! LevelDB's db_bench fills (`app=leveldb-fillsync`, `app=leveldb-compact`): a writer thread
//! puts random keys into a fresh database, each put one record appended to the write-ahead
//! log (and with `sync`, an fdatasync of it); a background thread flushes each full memtable
//! to a level-0 table and runs LevelDB's leveled compactions.
//!
//! - `leveldb-fillsync` is db_bench's `fillsync` (`write_options_.sync = true`): every put
//!   waits for its log fdatasync. db_bench runs N/1000 of them (1000 by default, too few to
//!   fill a memtable); vmio keeps putting until the job's runtime, so memtable flushes and
//!   compactions come too.
//! - `leveldb-compact` is db_bench's `fillrandom` (no sync: each put one `write` of the log)
//!   until the runtime: the load that makes LevelDB's background thread flush and compact
//!   all the time. (db_bench's `compact` benchmark, `CompactRange` over the whole key range
//!   after a fill, is one pass of the same level-by-level merges; vmio models the steady
//!   compactions of a fill, not that one call.)
//!
//! Sources (google/leveldb 78a352f): `benchmarks/db_bench.cc` (`FLAGS_num` 1000000 keys drawn
//! uniformly, `%016d` 16-byte keys, `FLAGS_value_size` 100, `FLAGS_compression_ratio` 0.5,
//! `fillsync` `num_ /= 1000`, `DoWrite`: one `Write` per put), `include/leveldb/options.h`
//! (`write_buffer_size` 4 MiB, `max_file_size` 2 MiB, `block_size` 4 KiB,
//! `block_restart_interval` 16), `db/log_writer.cc` (`AddRecord`, `EmitPhysicalRecord`: 32 KiB
//! blocks, 7-byte headers, records split at block ends, a trailer under 7 bytes zero-filled,
//! each physical record flushed: one `write`), `util/env_posix.cc` (`PosixWritableFile`: a
//! 64 KiB buffer, `Sync` = flush + `fdatasync`, preceded for a MANIFEST by an fsync of its
//! directory, `SyncDirIfManifest`; tables read through mmap, `kDefaultMmapLimit` 1000),
//! `db/db_impl.cc` (`MakeRoomForWrite`: switch the memtable and log when the memtable is over
//! `write_buffer_size`, wait while the previous one is being flushed or level 0 has 12 files
//! (`kL0_StopWritesTrigger`); `CompactMemTable`, `WriteLevel0Table`; `DoCompactionWork`,
//! `FinishCompactionOutputFile`: Sync, Close; `InstallCompactionResults`; `RemoveObsoleteFiles`),
//! `db/builder.cc` (`BuildTable`: every memtable entry, Sync, Close), `table/table_builder.cc`
//! (a data block flushed, one `write`, when its estimate reaches `block_size`),
//! `db/version_set.cc` (`MaxBytesForLevel`: 10 MiB × 10^(L-1); `Finalize`: level 0 scores
//! files / 4 (`kL0_CompactionTrigger`), others bytes / max; `PickCompaction`: the first file
//! after the level's compact pointer, all overlapping level-0 files, the overlapping files
//! of the next level; `IsTrivialMove`; `PickLevelForMemTableOutput`: up to level 2
//! (`kMaxMemCompactLevel`) while nothing overlaps and the grandparents overlap at most
//! 10 × `max_file_size`; `LogAndApply`: a MANIFEST record, Sync), `db/memtable.cc`,
//! `db/skiplist.h` (`RandomHeight`: branching 4, at most 12 levels).
//!
//! ## Sizes (vmio's arithmetic on those sources)
//!
//! ```text
//! log record of a put: 12 (batch header) + 1 (type) + 1 + 16 (key) + 1 + 100 (value) = 131
//!   bytes, plus a 7-byte header per fragment: 138 bytes in one write unless split
//! memtable charge of a put: 1 + 24 (internal key) + 1 + 100 = 126 bytes of entry plus a
//!   skiplist node of 8 + 8 h bytes (h = RandomHeight): 144.7 bytes on average, so a 4 MiB
//!   memtable holds ~28,990 puts (arena block waste left out)
//! table entry: 3 varints + 14 unshared key bytes (an internal key shares its 10 leading
//!   zero digits with the previous one) + 50 bytes of value (compression ratio 0.5) = 67
//!   bytes; uncompressed 117, so a 4 KiB block closes after 35 entries (with 3 restarts):
//!   one write of 35 * 67 + 16 (restarts) + 5 (trailer) = 2366 bytes; the index block and
//!   footer end the table in one write of 24 per block + 48 bytes
//! compaction output: cut at 2 MiB: ceil(2 MiB / 2366) = 887 blocks = 31,045 entries
//! MANIFEST record: 20 bytes + 58 per added table + 5 per deleted one (a log record)
//! ```
//!
//! ## Rules
//!
//! ```text
//! open: create MANIFEST, append its first record, sync it (directory fsync + fdatasync);
//!       create the log
//! writer, each put: if the memtable is full (charge >= 4 MiB):
//!     wait while the previous memtable is not flushed or level 0 has 12 tables;
//!     else create a new log, the full memtable becomes the one to flush
//!   append the record to the log (its fragments); sync: fdatasync the log; charge += 126 + 8 + 8 h
//! background thread, when idle:
//!   a memtable to flush: a table of all its entries at level
//!     PickLevelForMemTableOutput: create, write its blocks and index, fdatasync, close;
//!     MANIFEST record + sync; delete the old log; the writer may go on
//!   else the level with the highest score >= 1 (level 0: tables / 4; level L: bytes / 10^L MiB):
//!     inputs: level 0: all its tables; level L: the first table after the compact pointer;
//!     plus the next level's tables overlapping them
//!     trivial move (one input, nothing overlapping, grandparents <= 20 MiB): MANIFEST only
//!     else merge: outputs of 31,045 entries; for each: read the inputs sequentially (4 KiB
//!     page faults of the mmap) up to its share, then create, write, fdatasync, close it;
//!     MANIFEST record + sync; delete the inputs
//! keys as a continuum: a table covers [lo, hi) of the key space with its entries spread
//!   evenly (keys are uniform); a level-0 table covers all of it; a merge keeps, on each
//!   piece of the key space, the fraction 1 - prod(1 - d_i) of the keys, d_i = the inputs'
//!   key densities there (older versions of a key are dropped); outputs cut where their
//!   entries reach the limit
//! ```
//!
//! Left out: the 1 ms write slowdown at 8 level-0 tables, compaction input expansion and the
//! grandparent cut of outputs, the table cache's reads of index blocks (in the guest cache
//! right after the write), CURRENT and LOCK files, MANIFEST rollover, the LOG info file.
//! Files are slots (`<dir>/leveldb/000001`...) reused once deleted: a log or table takes the
//! lowest free one.

use super::super::files::{FileDecl, FileId, FileLayout, FileOp};
use super::{append, fdatasync, fsync, read};
use crate::rng::Rng;
use std::collections::{BTreeSet, VecDeque};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;
/// The writer and the background thread.
pub(crate) const THREADS: usize = 2;
const WRITER: usize = 0;
/// `FLAGS_num`: keys are drawn from 0..KEYS.
pub(crate) const KEYS: u64 = 1_000_000;
/// A put's log record payload (module doc).
pub(crate) const PUT_RECORD: u64 = 131;
const LOG_BLOCK: u64 = 32 * KIB;
const LOG_HEADER: u64 = 7;
/// A put's memtable entry, without its skiplist node.
const MEM_ENTRY: u64 = 126;
/// `write_buffer_size`.
pub(crate) const WRITE_BUFFER: u64 = 4 * MIB;
const MAX_HEIGHT: u64 = 12;
const TABLE_ENTRY: u64 = 67;
pub(crate) const BLOCK_ENTRIES: u64 = 35;
const BLOCK_OVERHEAD: u64 = 16 + 5;
pub(crate) const BLOCK_BYTES: u64 = BLOCK_ENTRIES * TABLE_ENTRY + BLOCK_OVERHEAD;
const INDEX_PER_BLOCK: u64 = 24;
const FOOTER: u64 = 48;
/// `max_file_size`.
const MAX_FILE: u64 = 2 * MIB;
pub(crate) const OUTPUT_ENTRIES: u64 = MAX_FILE.div_ceil(BLOCK_BYTES) * BLOCK_ENTRIES;
const L0_TRIGGER: usize = 4;
const L0_STOP: usize = 12;
const LEVELS: usize = 7;
const MAX_MEM_COMPACT_LEVEL: usize = 2;
const GRANDPARENT_LIMIT: u64 = 10 * MAX_FILE;
/// Page-fault granularity of the mmap'd tables' reads.
const READ: u64 = 4 * KIB;
/// Slots for logs and tables.
const SLOTS: u32 = 512;
const MANIFEST: FileId = 0;
/// What the fill needs on the filesystem: the whole key space's table bytes, four times over
/// (overlapping levels, compaction outputs before their inputs go).
pub(crate) const NEEDED_BYTES: u64 = 4 * KEYS * TABLE_ENTRY;

/// An entry's sync flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// db_bench's `fillsync` (every put fdatasyncs the log), else `fillrandom`.
    pub sync: bool,
}

/// A `log::Writer`: where the next record starts in its 32 KiB block.
#[derive(Clone, Copy, Debug, Default)]
struct LogWriter {
    block_offset: u64,
}

impl LogWriter {
    /// The `write`s of a record of `len` bytes: one per fragment, each with its header (and
    /// the zero trailer of a block left with under 7 bytes, buffered before it).
    fn add_record(&mut self, mut len: u64, out: &mut VecDeque<FileOp>, file: FileId) {
        let mut pad = 0;
        loop {
            let left = LOG_BLOCK - self.block_offset;
            if left < LOG_HEADER {
                pad = left;
                self.block_offset = 0;
            }
            let avail = LOG_BLOCK - self.block_offset - LOG_HEADER;
            let frag = len.min(avail);
            out.push_back(append(file, pad + LOG_HEADER + frag));
            pad = 0;
            self.block_offset += LOG_HEADER + frag;
            len -= frag;
            if len == 0 {
                return;
            }
        }
    }
}

/// A table: its slot, the key range [lo, hi) it covers (fractions of the key space), its
/// entries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Table {
    slot: FileId,
    lo: f64,
    hi: f64,
    pub(crate) entries: u64,
}

impl Table {
    /// The fraction of the keys of its range it holds.
    fn density(&self) -> f64 {
        let width = (self.hi - self.lo) * KEYS as f64;
        if width <= 0.0 {
            return 1.0;
        }
        (self.entries as f64 / width).min(1.0)
    }

    fn bytes(&self) -> u64 {
        table_bytes(self.entries)
    }

    fn overlaps(&self, lo: f64, hi: f64) -> bool {
        self.lo < hi && lo < self.hi
    }
}

/// The file bytes of a table of `entries`.
pub(crate) fn table_bytes(entries: u64) -> u64 {
    let blocks = entries.div_ceil(BLOCK_ENTRIES);
    entries * TABLE_ENTRY + blocks * (BLOCK_OVERHEAD + INDEX_PER_BLOCK) + FOOTER
}

/// The writes of a new table of `entries` in `slot`: create, one write per data block, the
/// index and footer, fdatasync, close.
fn write_table(slot: FileId, entries: u64, out: &mut VecDeque<FileOp>) {
    out.push_back(FileOp::Create { file: slot });
    let mut left = entries;
    while left > 0 {
        let n = left.min(BLOCK_ENTRIES);
        out.push_back(append(slot, n * TABLE_ENTRY + BLOCK_OVERHEAD));
        left -= n;
    }
    let blocks = entries.div_ceil(BLOCK_ENTRIES);
    out.push_back(append(slot, blocks * INDEX_PER_BLOCK + FOOTER));
    out.push_back(fdatasync(slot));
    out.push_back(FileOp::Close { file: slot });
}

/// The merged outputs (lo, hi, entries) of `inputs` (module doc): outputs of at most
/// [`OUTPUT_ENTRIES`].
pub(crate) fn merge(inputs: &[Table]) -> Vec<(f64, f64, u64)> {
    let mut bounds: Vec<f64> = inputs.iter().flat_map(|t| [t.lo, t.hi]).collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let mut outputs = Vec::new();
    let (mut start, mut acc) = (bounds.first().copied().unwrap_or(0.0), 0.0);
    let limit = OUTPUT_ENTRIES as f64;
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        let keep: f64 = inputs
            .iter()
            .filter(|t| t.overlaps(a, b))
            .map(|t| 1.0 - t.density())
            .product();
        let rate = (1.0 - keep) * KEYS as f64; // entries per unit of key space
        let mut at = a;
        while rate > 0.0 && acc + rate * (b - at) >= limit {
            let cut = at + (limit - acc) / rate;
            outputs.push((start, cut, OUTPUT_ENTRIES));
            start = cut;
            at = cut;
            acc = 0.0;
        }
        acc += rate * (b - at);
    }
    let last = acc.round() as u64;
    if last > 0 {
        let end = bounds.last().copied().unwrap_or(1.0);
        outputs.push((start, end, last));
    }
    outputs
}

/// A background job: what it changes once done.
#[derive(Clone, Debug, Default)]
struct Edit {
    /// (level, table) added.
    add: Vec<(usize, Table)>,
    /// (level, slot) removed from the version.
    remove: Vec<(usize, FileId)>,
    /// The slots to free (deleted files).
    free: Vec<FileId>,
    /// A memtable flush: the writer may switch again.
    flush: bool,
}

/// LevelDB's writer and background thread. See the module doc.
#[derive(Clone, Debug)]
pub struct Leveldb {
    cfg: Config,
    rng: Rng,
    opened: bool,
    free: BTreeSet<FileId>,
    log: FileId,
    log_writer: LogWriter,
    manifest: LogWriter,
    mem_entries: u64,
    mem_charge: u64,
    /// The memtable being flushed: its entries and its log.
    imm: Option<(u64, FileId)>,
    /// Whether the background thread has a job handed out, and its edit.
    job: Option<Edit>,
    levels: Vec<Vec<Table>>,
    compact_pointer: [f64; LEVELS],
    pub(crate) puts: u64,
    pub(crate) flushes: u64,
    pub(crate) compactions: u64,
    pub(crate) moves: u64,
}

impl Leveldb {
    pub fn new(cfg: Config, dir: &str, seed: u64) -> (Self, Vec<FileDecl>) {
        let decl = |name: String| FileDecl {
            path: format!("{dir}/leveldb/{name}"),
            exists: false,
            size_bytes: 0,
            layout: FileLayout::Written,
            dir: 0,
        };
        let decls = std::iter::once(decl("MANIFEST-000001".into()))
            .chain((1..=SLOTS).map(|k| decl(format!("{k:06}"))))
            .collect();
        let m = Self {
            cfg,
            rng: Rng::derive(seed, "app/leveldb"),
            opened: false,
            free: (1..=SLOTS).collect(),
            log: 0,
            log_writer: LogWriter::default(),
            manifest: LogWriter::default(),
            mem_entries: 0,
            mem_charge: 0,
            imm: None,
            job: None,
            levels: vec![Vec::new(); LEVELS],
            compact_pointer: [0.0; LEVELS],
            puts: 0,
            flushes: 0,
            compactions: 0,
            moves: 0,
        };
        (m, decls)
    }

    /// The lowest free slot (None: every slot holds a file; the thread waits).
    fn take_slot(&mut self) -> Option<FileId> {
        self.free.pop_first()
    }

    /// A MANIFEST record and its sync (directory fsync, then fdatasync).
    fn log_and_apply(&mut self, added: usize, deleted: usize, out: &mut VecDeque<FileOp>) {
        let len = 20 + 58 * added as u64 + 5 * deleted as u64;
        self.manifest.add_record(len, out, MANIFEST);
        out.extend([fsync(MANIFEST), fdatasync(MANIFEST)]);
    }

    fn writer(&mut self, out: &mut VecDeque<FileOp>) {
        if !self.opened {
            self.opened = true;
            out.push_back(FileOp::Create { file: MANIFEST });
            self.log_and_apply(0, 0, out);
            let Some(log) = self.take_slot() else { return };
            self.log = log;
            out.push_back(FileOp::Create { file: log });
        }
        if self.mem_charge >= WRITE_BUFFER {
            if self.imm.is_some() || self.levels[0].len() >= L0_STOP {
                return;
            }
            let Some(log) = self.take_slot() else { return };
            self.imm = Some((self.mem_entries, self.log));
            self.log = log;
            self.log_writer = LogWriter::default();
            self.mem_entries = 0;
            self.mem_charge = 0;
            out.push_back(FileOp::Create { file: log });
        }
        self.log_writer.add_record(PUT_RECORD, out, self.log);
        if self.cfg.sync {
            out.push_back(fdatasync(self.log));
        }
        let mut height = 1;
        while height < MAX_HEIGHT && self.rng.below(4) == 0 {
            height += 1;
        }
        self.mem_entries += 1;
        self.mem_charge += MEM_ENTRY + 8 + 8 * height;
        self.puts += 1;
    }

    fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(Table::bytes).sum()
    }

    fn overlapping(&self, level: usize, lo: f64, hi: f64) -> Vec<Table> {
        self.levels[level]
            .iter()
            .filter(|t| t.overlaps(lo, hi))
            .copied()
            .collect()
    }

    fn grandparent_bytes(&self, level: usize, lo: f64, hi: f64) -> u64 {
        if level >= LEVELS {
            return 0;
        }
        self.overlapping(level, lo, hi)
            .iter()
            .map(Table::bytes)
            .sum()
    }

    /// `PickLevelForMemTableOutput` for a table covering the whole key space.
    fn flush_level(&self) -> usize {
        let mut level = 0;
        if !self.levels[0].is_empty() {
            return 0;
        }
        while level < MAX_MEM_COMPACT_LEVEL {
            if !self.levels[level + 1].is_empty() {
                break;
            }
            if self.grandparent_bytes(level + 2, 0.0, 1.0) > GRANDPARENT_LIMIT {
                break;
            }
            level += 1;
        }
        level
    }

    /// The level to compact (highest score >= 1), if any.
    fn pick_level(&self) -> Option<usize> {
        let mut best = (0.0, 0);
        for level in 0..LEVELS - 1 {
            let score = if level == 0 {
                self.levels[0].len() as f64 / L0_TRIGGER as f64
            } else {
                self.level_bytes(level) as f64 / (10.0 * MIB as f64 * 10f64.powi(level as i32 - 1))
            };
            if score > best.0 {
                best = (score, level);
            }
        }
        (best.0 >= 1.0).then_some(best.1)
    }

    fn background(&mut self, out: &mut VecDeque<FileOp>) {
        if self.job.is_some() {
            return;
        }
        if let Some((entries, old_log)) = self.imm {
            let Some(slot) = self.take_slot() else { return };
            write_table(slot, entries, out);
            self.log_and_apply(1, 0, out);
            out.push_back(FileOp::Delete { file: old_log });
            let table = Table {
                slot,
                lo: 0.0,
                hi: 1.0,
                entries,
            };
            self.flushes += 1;
            self.job = Some(Edit {
                add: vec![(self.flush_level(), table)],
                free: vec![old_log],
                flush: true,
                ..Edit::default()
            });
            return;
        }
        let Some(level) = self.pick_level() else {
            return;
        };
        let first = if level == 0 {
            self.levels[0].clone()
        } else {
            let p = self.compact_pointer[level];
            let t = self.levels[level]
                .iter()
                .find(|t| t.hi > p)
                .or(self.levels[level].first())
                .copied();
            t.into_iter().collect()
        };
        let lo = first.iter().map(|t| t.lo).fold(f64::INFINITY, f64::min);
        let hi = first.iter().map(|t| t.hi).fold(f64::NEG_INFINITY, f64::max);
        let next = self.overlapping(level + 1, lo, hi);
        let remove: Vec<(usize, FileId)> = first
            .iter()
            .map(|t| (level, t.slot))
            .chain(next.iter().map(|t| (level + 1, t.slot)))
            .collect();
        if first.len() == 1
            && next.is_empty()
            && self.grandparent_bytes(level + 2, lo, hi) <= GRANDPARENT_LIMIT
        {
            self.compact_pointer[level] = hi;
            self.moves += 1;
            self.log_and_apply(1, 1, out);
            self.job = Some(Edit {
                add: vec![(level + 1, first[0])],
                remove,
                ..Edit::default()
            });
            return;
        }
        let inputs: Vec<Table> = first.iter().chain(&next).copied().collect();
        let outputs = merge(&inputs);
        if self.free.len() < outputs.len() {
            return;
        }
        self.compact_pointer[level] = hi;
        self.compactions += 1;
        // Reads of the inputs in order, each output after its share of them.
        let reads: Vec<(FileId, u64)> = inputs
            .iter()
            .flat_map(|t| {
                let n = t.bytes().div_ceil(READ);
                (0..n).map(move |i| (t.slot, i * READ))
            })
            .collect();
        let total: u64 = outputs.iter().map(|o| o.2).sum();
        let (mut done, mut issued) = (0u64, 0usize);
        let mut add = Vec::new();
        for &(lo, hi, entries) in &outputs {
            done += entries;
            let upto = (reads.len() as u64 * done).div_ceil(total.max(1)) as usize;
            for &(file, offset) in &reads[issued..upto.min(reads.len())] {
                out.push_back(read(file, offset, READ));
            }
            issued = upto.max(issued);
            let Some(slot) = self.take_slot() else { break };
            write_table(slot, entries, out);
            add.push((
                level + 1,
                Table {
                    slot,
                    lo,
                    hi,
                    entries,
                },
            ));
        }
        self.log_and_apply(add.len(), inputs.len(), out);
        for t in &inputs {
            out.push_back(FileOp::Delete { file: t.slot });
        }
        self.job = Some(Edit {
            add,
            remove,
            free: inputs.iter().map(|t| t.slot).collect(),
            flush: false,
        });
    }

    /// The writer's next put (nothing while it must wait) or the background thread's next
    /// job (nothing while there is none).
    pub fn refill(&mut self, thread: usize, out: &mut VecDeque<FileOp>) {
        if thread == WRITER {
            self.writer(out)
        } else {
            self.background(out)
        }
    }

    /// The background thread's job is done: its edit applies.
    pub fn finished(&mut self, thread: usize) {
        if thread == WRITER {
            return;
        }
        let Some(edit) = self.job.take() else { return };
        for (level, slot) in edit.remove {
            self.levels[level].retain(|t| t.slot != slot);
        }
        for (level, t) in edit.add {
            self.levels[level].push(t);
            if level > 0 {
                self.levels[level].sort_by(|a, b| a.lo.total_cmp(&b.lo));
            }
        }
        self.free.extend(edit.free);
        if edit.flush {
            self.imm = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{flows, run};
    use super::super::{App, Model};
    use super::*;

    fn model(sync: bool) -> Leveldb {
        Leveldb::new(Config { sync }, "/d", 1).0
    }

    fn ops(m: &mut Leveldb, thread: usize) -> Vec<FileOp> {
        let mut q = VecDeque::new();
        m.refill(thread, &mut q);
        q.into()
    }

    #[test]
    fn a_log_record_is_split_at_the_end_of_its_32_kib_block_and_a_short_trailer_is_padded() {
        let mut q = VecDeque::new();
        let mut w = LogWriter {
            block_offset: LOG_BLOCK - 50,
        };
        w.add_record(131, &mut q, 1);
        // 43 bytes fit after a header; the other 88 start the next block with their own.
        assert_eq!(Vec::from(q.clone()), [append(1, 50), append(1, 7 + 88)]);
        assert_eq!(w.block_offset, 95);
        q.clear();
        let mut w = LogWriter {
            block_offset: LOG_BLOCK - 5,
        };
        w.add_record(131, &mut q, 1);
        assert_eq!(Vec::from(q), [append(1, 5 + 7 + 131)]);
    }

    #[test]
    fn fillsync_appends_each_put_to_the_log_and_fdatasyncs_it_once() {
        let mut m = model(true);
        let first = ops(&mut m, WRITER);
        // Opening: MANIFEST created, its record appended and synced (directory, data);
        // the log created; then the first put.
        assert_eq!(
            first,
            [
                FileOp::Create { file: MANIFEST },
                append(MANIFEST, 7 + 20),
                fsync(MANIFEST),
                fdatasync(MANIFEST),
                FileOp::Create { file: 1 },
                append(1, 7 + PUT_RECORD),
                fdatasync(1),
            ]
        );
        let mut offset = 7 + PUT_RECORD;
        for _ in 0..1000 {
            let o = ops(&mut m, WRITER);
            let appended: u64 = o.iter().map(|o| o.bytes()).sum();
            let fsyncs = o.iter().filter(|o| **o == fdatasync(1)).count();
            assert_eq!((o.len() - 1, fsyncs), (o.len() - 1, 1));
            assert_eq!(o.last(), Some(&fdatasync(1)));
            // 138 bytes a put, plus a header and padding where a block ends.
            let block_end = offset / LOG_BLOCK != (offset + 7 + PUT_RECORD) / LOG_BLOCK;
            assert!(appended == 7 + PUT_RECORD || block_end, "{o:?}");
            offset += appended;
        }
        let m = model(false);
        let mut m2 = m.clone();
        let o = ops(&mut m2, WRITER);
        assert!(!o.iter().any(|o| matches!(o, FileOp::Fsync { file: 1, .. })));
    }

    #[test]
    fn the_memtable_switches_once_its_charge_reaches_4_mib_about_28990_puts() {
        let mut m = model(true);
        let mut puts = 0u64;
        loop {
            let o = ops(&mut m, WRITER);
            if m.imm.is_some() {
                // The switch: a new log created before the put goes to it.
                assert!(o.contains(&FileOp::Create { file: 2 }), "{o:?}");
                break;
            }
            puts += 1;
            assert!(m.mem_charge < WRITE_BUFFER + MEM_ENTRY + 8 + 8 * MAX_HEIGHT);
        }
        assert_eq!(m.imm, Some((puts, 1)));
        // Mean charge 126 + 8 + 8 E[h], E[h] = 4/3 (geometric, p = 1/4).
        let want = WRITE_BUFFER as f64 / (126.0 + 8.0 + 8.0 * 4.0 / 3.0);
        assert!((puts as f64 / want - 1.0).abs() < 0.01, "{puts} vs {want}");
        // The writer waits while that memtable is not flushed and the new one fills.
        while !ops(&mut m, WRITER).is_empty() {}
        assert_eq!(ops(&mut m, WRITER), []);
    }

    #[test]
    fn a_memtable_flush_writes_one_table_syncs_it_logs_it_in_the_manifest_and_deletes_the_old_log()
    {
        let mut m = model(false);
        while m.imm.is_none() {
            ops(&mut m, WRITER);
        }
        let entries = m.imm.unwrap().0;
        let o = ops(&mut m, 1);
        let blocks = entries.div_ceil(BLOCK_ENTRIES) as usize;
        let slot = 3;
        assert_eq!(o[0], FileOp::Create { file: slot });
        let written: u64 = o[1..blocks + 2].iter().map(|o| o.bytes()).sum();
        assert_eq!(written, table_bytes(entries));
        assert_eq!(
            o[blocks + 2..],
            [
                fdatasync(slot),
                FileOp::Close { file: slot },
                append(MANIFEST, 7 + 20 + 58),
                fsync(MANIFEST),
                fdatasync(MANIFEST),
                FileOp::Delete { file: 1 },
            ]
        );
        // The first flush of an empty database goes to level 2; the writer may switch
        // again once the flush is done.
        m.finished(1);
        assert_eq!(m.imm, None);
        assert_eq!(m.levels[2].len(), 1);
    }

    #[test]
    fn merging_keeps_each_key_once_and_cuts_outputs_of_31045_entries() {
        // Two level-0 tables over the whole key space: the union of their keys.
        let t = |slot, entries| Table {
            slot,
            lo: 0.0,
            hi: 1.0,
            entries,
        };
        let (a, b) = (300_000, 200_000);
        let out = merge(&[t(1, a), t(2, b)]);
        let want = KEYS as f64 * (1.0 - (1.0 - 0.3) * (1.0 - 0.2));
        let total: u64 = out.iter().map(|o| o.2).sum();
        assert!((total as f64 - want).abs() <= 1.0, "{total} vs {want}");
        assert!(out[..out.len() - 1].iter().all(|o| o.2 == OUTPUT_ENTRIES));
        assert!(
            out.windows(2).all(|w| w[0].1 == w[1].0),
            "contiguous ranges"
        );
        assert_eq!((out[0].0, out[out.len() - 1].1), (0.0, 1.0));
        assert_eq!(OUTPUT_ENTRIES, 31_045);
    }

    #[test]
    fn level_0_compacts_at_4_tables_reading_its_inputs_writing_synced_outputs_then_deleting_the_inputs(
    ) {
        let mut f = flows(App::LeveldbCompact, 3);
        let steps = run(&mut f, 2_000_000);
        let Model::Leveldb(m) = &*f.model else {
            unreachable!()
        };
        assert!(m.compactions > 0 && m.flushes >= 4, "{m:?}");
        assert!(m.levels[0].len() < L0_STOP);
        eprintln!(
            "{} puts, {} flushes, {} compactions, {} moves; tables per level {:?}",
            m.puts,
            m.flushes,
            m.compactions,
            m.moves,
            m.levels.iter().map(Vec::len).collect::<Vec<_>>()
        );
        // Levels 1 and up: sorted, disjoint key ranges, each key at most once.
        for level in &m.levels[1..] {
            assert!(
                level.windows(2).all(|w| w[0].hi <= w[1].lo + 1e-12),
                "{level:?}"
            );
            assert!(level.iter().map(|t| t.entries).sum::<u64>() <= KEYS);
        }
        // Every table written is fdatasynced and closed before its MANIFEST record; every
        // compaction input deleted after it.
        let bg: Vec<FileOp> = steps
            .iter()
            .filter(|(t, _)| *t == 1)
            .map(|(_, o)| *o)
            .collect();
        let first_read = bg
            .iter()
            .position(|o| matches!(o, FileOp::Read { .. }))
            .expect("a compaction");
        let manifest = first_read
            + bg[first_read..]
                .iter()
                .position(|o| matches!(o, FileOp::Append { file: MANIFEST, .. }))
                .unwrap();
        let job = &bg[first_read..];
        let created: Vec<FileId> = bg[first_read..manifest]
            .iter()
            .filter_map(|o| match o {
                FileOp::Create { file } => Some(*file),
                _ => None,
            })
            .collect();
        for c in &created {
            assert!(bg[first_read..manifest].contains(&fdatasync(*c)));
        }
        let read: BTreeSet<FileId> = bg[first_read..manifest]
            .iter()
            .filter_map(|o| match o {
                FileOp::Read { file, .. } => Some(*file),
                _ => None,
            })
            .collect();
        let deleted: BTreeSet<FileId> = job[manifest - first_read..]
            .iter()
            .take_while(|o| !matches!(o, FileOp::Create { .. }))
            .filter_map(|o| match o {
                FileOp::Delete { file } => Some(*file),
                _ => None,
            })
            .collect();
        assert_eq!(read, deleted);
        assert!(read.len() >= L0_TRIGGER, "{read:?}");
    }
}
