//! Mobibench's SQLite workload (`app=sqlite-delete`, `sqlite-delete-full`, `sqlite-wal`,
//! `sqlite-wal-full`): one thread runs SQL statements on one table, each its own
//! (autocommit) transaction, and SQLite's pager turns them into writes and syncs of the
//! database file and of its rollback journal or write-ahead log.
//!
//! Sources: Mobibench (ESOS-Lab/Mobibench, `shell/mobibench.c`, `thread_main_db`: `PRAGMA
//! page_size = 4096`, `synchronous=1`; table `tblMyList (id INTEGER PRIMARY KEY
//! autoincrement, Value TEXT not null, creation_date long)`; insert of a 100-character
//! string, update of a random id, delete of id i; `-n` transactions, default 10); Jeong et
//! al., "I/O Stack Optimization for Smartphones", USENIX ATC'13; SQLite `src/pager.c`
//! (`writeJournalHdr`: the header fills a sector; `pager_write`/`pagerAddPageToRollbackJournal`:
//! a record of page number, page, checksum per original page, written as the page is first
//! changed; `syncJournal`: with synchronous=FULL a sync, then the header's record count
//! (12 bytes at offset 0), then a sync; `pager_write_pagelist`: the dirty pages sorted by
//! number; `pager_end_transaction`: DELETE mode closes and unlinks the journal;
//! `sqlite3PagerSetFlags`: WAL commits sync only with FULL, checkpoints with NORMAL too),
//! `src/os_unix.c` (`unixSync`: fdatasync, and once after a journal or WAL file is created,
//! an fsync of its directory, `UNIXFILE_DIRSYNC`; `unixSectorSize`: 4096), `src/wal.c`
//! (`sqlite3WalFrames`: a 32-byte header when the log (re)starts, synced (`syncHeader`); a
//! frame is a 24-byte header and a page; `walCheckpoint`: sync the log, copy each page's
//! last frame into the database in page order, sync the database), `src/main.c`
//! (`sqlite3WalDefaultHook`: checkpoint once the log holds `wal_autocheckpoint` = 1000
//! frames).
//!
//! ## The table as pages (vmio's layout of Mobibench's table)
//!
//! ```text
//! db pages: 1 header + schema, 2 tblMyList's root (interior), 3 sqlite_sequence; leaves from 4
//! row:  cell = 1 (length) + 2 (rowid) + record (5-byte header + 100 bytes) + 2 (pointer)
//!       = 110 bytes; (4096 - 8) / 110 -> 37 rows a leaf (SQLite's append balance fills
//!       leaves on ascending rowids)
//! insert: id = next id; the last leaf if it has < 37 rows, else a new leaf (a freed page,
//!         else the next page of the file: the root and page 1's page count change);
//!         AUTOINCREMENT rewrites sqlite_sequence (page 3)
//! update: a uniform live row (Mobibench: rand() % n + 1): its leaf
//! delete: the oldest row (Mobibench deletes ids in order): its leaf; an emptied leaf goes to
//!         the freelist (page 1 and the root change)
//! rollback mode: every transaction also changes page 1 (the file change counter)
//! the run: 1000 inserts, 1000 updates, 1000 deletes, again (vmio's phases; Mobibench runs
//!          one kind per invocation, -n of them)
//! ```
//!
//! ## One transaction's operations
//!
//! ```text
//! DELETE (rollback journal), dirty pages in the order first changed, orig = those <= the
//! database's pages at the start:
//!   read db 16 bytes at 24 (the change counter, checked under each new shared lock)
//!   create -journal; write its 4096-byte header at 0
//!   write each orig page's record (4 + 4096 + 4 bytes) at 4096 + i * 4104
//!   FULL: fdatasync journal
//!   write 12 bytes at 0 (magic and record count); fdatasync journal
//!   after the journal's first sync (FULL: the one before the record count): an fsync of
//!     the directory (the journal is new) — issued as an fsync of the journal, which finds
//!     nothing left to commit as the directory's would
//!   write each dirty page at (page - 1) * 4096, by page number; fdatasync db
//!   close and unlink -journal
//! WAL:
//!   log empty (first transaction, or after a checkpoint): create -wal the first time; write
//!     its 32-byte header at 0; fdatasync wal; the first time also the directory fsync
//!     (issued as an fsync of the wal, as in DELETE mode)
//!   write one frame (24 + 4096 bytes) per dirty page, by page number, at 32 + frame * 4120
//!   FULL: fdatasync wal
//!   frames >= 1000: checkpoint: fdatasync wal; for each page with frames, by number: read
//!     its last frame's page, write it at (page - 1) * 4096; fdatasync db; the log restarts
//! ```
//!
//! Left out: SQLite's own page cache (every page stays cached: the database is small), the
//! `-shm` wal-index (shared memory), file locks, the directory fsync of WAL's checkpoints
//! (none), Mobibench's thread count (1, its default).

use super::super::files::{FileDecl, FileId, FileLayout, FileOp};
use super::{fdatasync, fsync, read, write};
use crate::rng::Rng;
use std::collections::{BTreeMap, VecDeque};

/// SQLite's page size (Mobibench's `PRAGMA page_size = 4096`).
const PAGE: u64 = 4096;
/// Rows of Mobibench's table a leaf holds (module doc).
pub(crate) const ROWS_PER_LEAF: u32 = 37;
/// Transactions of each kind in a row (vmio's phase length).
pub(crate) const PHASE: u32 = 1000;
/// The rollback journal's header: one sector (`unixSectorSize`).
const JOURNAL_HEADER: u64 = 4096;
/// A journal record: page number, page, checksum.
const JOURNAL_RECORD: u64 = 4 + PAGE + 4;
/// The header bytes `syncJournal` rewrites (magic and record count).
const NREC_BYTES: u64 = 12;
const WAL_HEADER: u64 = 32;
const WAL_FRAME: u64 = 24 + PAGE;
/// `wal_autocheckpoint` (SQLITE_DEFAULT_WAL_AUTOCHECKPOINT).
pub(crate) const AUTOCHECKPOINT: u64 = 1000;
/// Pages of the database before the run: header + schema, the table's root, sqlite_sequence.
const INITIAL_PAGES: u64 = 3;
const ROOT: u64 = 2;
const SEQUENCE: u64 = 3;

const DB: FileId = 0;
const JOURNAL: FileId = 1;
const WAL: FileId = 2;

/// An entry's journal mode and synchronous level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// journal_mode=WAL, else DELETE.
    pub wal: bool,
    /// synchronous=FULL, else NORMAL (Mobibench's).
    pub full: bool,
}

/// Mobibench's statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Statement {
    Insert,
    Update,
    Delete,
}

/// Mobibench on SQLite. See the module doc.
#[derive(Clone, Debug)]
pub struct Sqlite {
    cfg: Config,
    rng: Rng,
    /// Pages of the database file, as SQLite counts them (WAL: including pages only in the log).
    pages: u64,
    /// Live rows: id -> its leaf.
    rows: BTreeMap<u64, u64>,
    /// Rows per leaf in use.
    leaf_rows: BTreeMap<u64, u32>,
    last_leaf: Option<u64>,
    free: Vec<u64>,
    next_id: u64,
    /// Transactions handed out.
    txns: u64,
    /// Frames in the log and each page's last frame.
    frames: u64,
    latest: BTreeMap<u64, u64>,
    wal_created: bool,
    pub(crate) counts: [u64; 3],
}

impl Sqlite {
    /// The database `dir/test.db0` (Mobibench's name) with its journal and log.
    pub fn new(cfg: Config, dir: &str, seed: u64) -> (Self, Vec<FileDecl>) {
        let decl = |name: &str, size: u64| FileDecl {
            path: format!("{dir}/{name}"),
            exists: size > 0,
            size_bytes: size,
            layout: FileLayout::Written,
            dir: 0,
        };
        let decls = vec![
            decl("test.db0", INITIAL_PAGES * PAGE),
            decl("test.db0-journal", 0),
            decl("test.db0-wal", 0),
        ];
        let m = Self {
            cfg,
            rng: Rng::derive(seed, "app/sqlite"),
            pages: INITIAL_PAGES,
            rows: BTreeMap::new(),
            leaf_rows: BTreeMap::new(),
            last_leaf: None,
            free: Vec::new(),
            next_id: 1,
            txns: 0,
            frames: 0,
            latest: BTreeMap::new(),
            wal_created: false,
            counts: [0; 3],
        };
        (m, decls)
    }

    /// The statement of transaction `i`: phases of [`PHASE`] inserts, updates, deletes.
    pub(crate) fn statement(i: u64) -> Statement {
        match (i / PHASE as u64) % 3 {
            0 => Statement::Insert,
            1 => Statement::Update,
            _ => Statement::Delete,
        }
    }

    /// Runs `s` on the table; returns the pages it changes, in the order first changed.
    fn change(&mut self, s: Statement) -> Vec<u64> {
        let mut dirty = Vec::new();
        if !self.cfg.wal {
            dirty.push(1);
        }
        let touch = |dirty: &mut Vec<u64>, p: u64| {
            if !dirty.contains(&p) {
                dirty.push(p)
            }
        };
        match s {
            Statement::Insert => {
                let leaf = match self.last_leaf {
                    Some(l) if self.leaf_rows[&l] < ROWS_PER_LEAF => l,
                    _ => {
                        let l = self.free.pop().unwrap_or_else(|| {
                            self.pages += 1;
                            self.pages
                        });
                        touch(&mut dirty, 1);
                        touch(&mut dirty, ROOT);
                        self.last_leaf = Some(l);
                        l
                    }
                };
                touch(&mut dirty, leaf);
                touch(&mut dirty, SEQUENCE);
                self.rows.insert(self.next_id, leaf);
                *self.leaf_rows.entry(leaf).or_insert(0) += 1;
                self.next_id += 1;
            }
            Statement::Update => {
                if !self.rows.is_empty() {
                    let i = self.rng.below(self.rows.len() as u64) as usize;
                    if let Some((_, &leaf)) = self.rows.iter().nth(i) {
                        touch(&mut dirty, leaf);
                    }
                }
            }
            Statement::Delete => {
                if let Some((_, leaf)) = self.rows.pop_first() {
                    touch(&mut dirty, leaf);
                    let n = self.leaf_rows.entry(leaf).or_insert(1);
                    *n -= 1;
                    if *n == 0 {
                        self.leaf_rows.remove(&leaf);
                        touch(&mut dirty, 1);
                        touch(&mut dirty, ROOT);
                        self.free.push(leaf);
                        if self.last_leaf == Some(leaf) {
                            self.last_leaf = None;
                        }
                    }
                }
            }
        }
        dirty
    }

    /// The next transaction's operations (one thread).
    pub fn refill(&mut self, _thread: usize, out: &mut VecDeque<FileOp>) {
        let s = Self::statement(self.txns);
        self.txns += 1;
        self.counts[s as usize] += 1;
        let orig = self.pages;
        let dirty = self.change(s);
        let mut sorted = dirty.clone();
        sorted.sort_unstable();
        if self.cfg.wal {
            self.wal_commit(&sorted, out);
            return;
        }
        out.push_back(read(DB, 24, 16));
        out.push_back(FileOp::Create { file: JOURNAL });
        out.push_back(write(JOURNAL, 0, JOURNAL_HEADER));
        for (i, _) in dirty.iter().filter(|&&p| p <= orig).enumerate() {
            let offset = JOURNAL_HEADER + i as u64 * JOURNAL_RECORD;
            out.push_back(write(JOURNAL, offset, JOURNAL_RECORD));
        }
        // The directory fsync follows the journal's first sync.
        let dirsync = fsync(JOURNAL);
        if self.cfg.full {
            out.extend([fdatasync(JOURNAL), dirsync]);
        }
        out.push_back(write(JOURNAL, 0, NREC_BYTES));
        out.push_back(fdatasync(JOURNAL));
        if !self.cfg.full {
            out.push_back(dirsync);
        }
        for &p in &sorted {
            out.push_back(write(DB, (p - 1) * PAGE, PAGE));
        }
        out.push_back(fdatasync(DB));
        out.push_back(FileOp::Close { file: JOURNAL });
        out.push_back(FileOp::Delete { file: JOURNAL });
    }

    fn wal_commit(&mut self, sorted: &[u64], out: &mut VecDeque<FileOp>) {
        if self.frames == 0 {
            let create = !self.wal_created;
            if create {
                self.wal_created = true;
                out.push_back(FileOp::Create { file: WAL });
            }
            out.push_back(write(WAL, 0, WAL_HEADER));
            out.push_back(fdatasync(WAL));
            if create {
                out.push_back(fsync(WAL));
            }
        }
        for &p in sorted {
            out.push_back(write(WAL, WAL_HEADER + self.frames * WAL_FRAME, WAL_FRAME));
            self.latest.insert(p, self.frames);
            self.frames += 1;
        }
        if self.cfg.full {
            out.push_back(fdatasync(WAL));
        }
        if self.frames >= AUTOCHECKPOINT {
            out.push_back(fdatasync(WAL));
            for (&p, &f) in &self.latest {
                out.push_back(read(WAL, WAL_HEADER + f * WAL_FRAME + 24, PAGE));
                out.push_back(write(DB, (p - 1) * PAGE, PAGE));
            }
            out.push_back(fdatasync(DB));
            self.frames = 0;
            self.latest.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(offset: u64, len: u64, file: FileId) -> FileOp {
        write(file, offset, len)
    }

    /// The operations of each transaction of a fresh database (one thread: the queue
    /// empties at each transaction's end).
    fn transactions(cfg: Config, n: usize) -> Vec<Vec<FileOp>> {
        let (mut m, _) = Sqlite::new(cfg, "/d", 1);
        (0..n)
            .map(|_| {
                let mut q = VecDeque::new();
                m.refill(0, &mut q);
                q.into_iter().collect()
            })
            .collect()
    }

    const DELETE: Config = Config {
        wal: false,
        full: false,
    };

    #[test]
    fn a_delete_mode_insert_journals_the_original_pages_syncs_journal_and_directory_then_writes_and_syncs_the_db(
    ) {
        let t = transactions(DELETE, 2);
        // First insert: a new leaf (page 4, beyond the 3 original pages: not journaled);
        // pages 1, 2 (root), 3 (sqlite_sequence) are.
        let mut want = vec![
            read(DB, 24, 16),
            FileOp::Create { file: JOURNAL },
            w(0, 4096, JOURNAL),
            w(4096, 4104, JOURNAL),
            w(4096 + 4104, 4104, JOURNAL),
            w(4096 + 2 * 4104, 4104, JOURNAL),
            w(0, 12, JOURNAL),
            fdatasync(JOURNAL),
            fsync(JOURNAL),
        ];
        want.extend((0..4).map(|p| w(p * 4096, 4096, DB)));
        want.extend([
            fdatasync(DB),
            FileOp::Close { file: JOURNAL },
            FileOp::Delete { file: JOURNAL },
        ]);
        assert_eq!(t[0], want);
        // Second insert: pages 1, 4, 3 changed, all original now: three records, db
        // written by page number.
        let db: Vec<u64> = t[1]
            .iter()
            .filter_map(|o| match *o {
                FileOp::Write {
                    file: DB, offset, ..
                } => Some(offset / 4096 + 1),
                _ => None,
            })
            .collect();
        assert_eq!(db, [1, 3, 4]);
        let records = t[1]
            .iter()
            .filter(|o| matches!(o, FileOp::Write { len: 4104, .. }))
            .count();
        assert_eq!(records, 3);
    }

    /// (fdatasyncs of the journal, other fsyncs of the journal, fdatasyncs of the db) of a
    /// transaction.
    fn syncs(ops: &[FileOp]) -> (usize, usize, usize) {
        let n = |f: FileId, d: bool| {
            ops.iter()
                .filter(|o| {
                    **o == FileOp::Fsync {
                        file: f,
                        datasync: d,
                    }
                })
                .count()
        };
        (n(JOURNAL, true), n(JOURNAL, false), n(DB, true))
    }

    #[test]
    fn every_delete_mode_transaction_syncs_the_journal_once_with_normal_twice_with_full_plus_the_directory_and_the_db_once(
    ) {
        for (full, journal) in [(false, 1), (true, 2)] {
            let t = transactions(Config { wal: false, full }, 3 * PHASE as usize);
            for ops in &t {
                assert_eq!(syncs(ops), (journal, 1, 1), "full={full}");
                // The directory's fsync right after the journal's first sync.
                let first = ops.iter().position(|o| *o == fdatasync(JOURNAL)).unwrap();
                assert_eq!(ops[first + 1], fsync(JOURNAL));
                assert_eq!(ops[1], FileOp::Create { file: JOURNAL });
                assert_eq!(ops[ops.len() - 1], FileOp::Delete { file: JOURNAL });
            }
        }
    }

    #[test]
    fn the_statements_run_in_phases_of_1000_inserts_updates_and_deletes_a_third_each() {
        let n = 6 * PHASE as u64 + 500;
        let (mut m, _) = Sqlite::new(DELETE, "/d", 2);
        let mut q = VecDeque::new();
        for _ in 0..n {
            m.refill(0, &mut q);
        }
        // Two cycles of the three phases, then half an insert phase.
        assert_eq!(m.counts, [2500, 2000, 2000]);
        // Each delete phase empties the table the insert phase before it filled.
        assert_eq!(m.rows.len(), 500);
        assert_eq!(m.counts.iter().sum::<u64>(), n);
    }

    #[test]
    fn an_insert_fills_a_leaf_of_37_rows_before_taking_a_new_page() {
        let (mut m, _) = Sqlite::new(DELETE, "/d", 1);
        let mut q = VecDeque::new();
        for _ in 0..PHASE {
            m.refill(0, &mut q);
        }
        let leaves = (PHASE as u64).div_ceil(ROWS_PER_LEAF as u64);
        assert_eq!(m.pages, INITIAL_PAGES + leaves);
        // Deleting every row frees every leaf; the next inserts reuse them, the file stays.
        for _ in 0..2 * PHASE {
            m.refill(0, &mut q);
        }
        assert_eq!((m.rows.len(), m.free.len() as u64), (0, leaves));
        for _ in 0..PHASE {
            m.refill(0, &mut q);
        }
        assert_eq!(m.pages, INITIAL_PAGES + leaves);
    }

    #[test]
    fn wal_appends_one_frame_per_changed_page_and_checkpoints_once_1000_frames_are_logged() {
        for full in [false, true] {
            let t = transactions(Config { wal: true, full }, 2000);
            // The first transaction creates the log, writes and syncs its header, and
            // (the log being new) its directory, issued as an fsync of the log.
            assert_eq!(
                t[0][..4],
                [
                    FileOp::Create { file: WAL },
                    w(0, 32, WAL),
                    fdatasync(WAL),
                    fsync(WAL)
                ]
            );
            assert_eq!(
                t.iter()
                    .flatten()
                    .filter(|o| matches!(
                        o,
                        FileOp::Fsync {
                            datasync: false,
                            ..
                        }
                    ))
                    .count(),
                1
            );
            let mut frames = 0u64;
            let mut checkpoints = 0;
            for ops in &t {
                let appended = ops
                    .iter()
                    .filter(
                        |o| matches!(o, FileOp::Write { file: WAL, len, .. } if *len == WAL_FRAME),
                    )
                    .count() as u64;
                // Every frame lands right after the previous one.
                if let Some(FileOp::Write { offset, .. }) = ops.iter().find(
                    |o| matches!(o, FileOp::Write { file: WAL, len, .. } if *len == WAL_FRAME),
                ) {
                    assert_eq!(*offset, 32 + frames * WAL_FRAME);
                }
                frames += appended;
                let db_syncs = ops.iter().filter(|o| **o == fdatasync(DB)).count();
                let wal_syncs = ops.iter().filter(|o| **o == fdatasync(WAL)).count();
                let restart = usize::from(ops.contains(&w(0, 32, WAL)));
                if frames >= AUTOCHECKPOINT {
                    checkpoints += 1;
                    assert_eq!(db_syncs, 1);
                    assert_eq!(wal_syncs, restart + usize::from(full) + 1);
                    frames = 0;
                } else {
                    assert_eq!((db_syncs, wal_syncs), (0, restart + usize::from(full)));
                }
            }
            assert!(checkpoints >= 2, "{checkpoints}");
        }
    }
}
