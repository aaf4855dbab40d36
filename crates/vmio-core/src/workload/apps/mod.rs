//! Application workloads at file level: what a database or a key-value
//! store asks of its files, one generator per application in its own file with its own
//! defaults and sources, like libCacheSim's trace generators or fio's engines:
//!
//! - [`linkbench`]: LinkBench's social-graph request mix (Armstrong et al., SIGMOD 2013) on
//!   an InnoDB-like store: 16 KiB pages through a buffer pool, redo log writes with an fsync
//!   per commit, a page cleaner writing through the doublewrite buffer;
//! - [`sqlite`]: Mobibench's SQLite transactions (Jeong et al., USENIX ATC'13) in
//!   journal_mode=DELETE (rollback journal) or WAL, synchronous NORMAL or FULL;
//! - [`leveldb`]: LevelDB's db_bench `fillsync` (a log append and fdatasync per put) and
//!   `fillrandom` with its background compactions (`leveldb-compact`).
//!
//! A job names one with `app=NAME` (the accepted names are [`APPS`]); like `filebench=`, it
//! needs a filesystem and a runtime, and each numjobs clone runs the application in its own
//! directory `<directory | mount>/<job name>.<clone>`.
//!
//! Every application is a set of threads (its tags); each thread issues one [`FileOp`] at a
//! time, waiting for it ([`Step::File`]). [`AppFlows`] runs them the way
//! [`FilebenchFlows`](super::FilebenchFlows) runs FileBench's threads:
//!
//! ```text
//! next():     for each thread from the turn on, not waiting for an operation:
//!               if its queue is empty: model.refill(thread, queue)   (the next transaction's
//!                                      operations, or nothing while the thread is blocked)
//!               if the queue has an operation: issue it with tag = thread; turn = thread + 1
//!             none issued: Wait if an operation is outstanding, else Done (a deadlock)
//! completed(tag): the thread is ready; if its queue is empty, model.finished(thread)
//!             (the transaction or background job it was running is over)
//! ```
//!
//! The model's state changes when it hands out a transaction (a thread's queue), not when the
//! operations complete: what a transaction does depends only on what was handed out before.
//! The registry ([`APPS`]) is a list of [`KindEntry`] like FileBench's personalities, so
//! names, aliases, help and the accepted list of error lines come from one place.

pub mod leveldb;
pub mod linkbench;
pub mod sqlite;

use super::files::{FileDecl, FileId, FileOp, IoFlags};
use super::kinds::{self, KindEntry};
use super::{Step, Workload};
use crate::Ns;
use std::collections::VecDeque;
use thiserror::Error;

/// An application vmio models; its name, help and parameters are its entry of [`APPS`] (same
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum App {
    Linkbench,
    SqliteDelete,
    SqliteDeleteFull,
    SqliteWal,
    SqliteWalFull,
    LeveldbFillsync,
    LeveldbCompact,
}

/// What an application entry builds.
#[derive(Clone, Copy, Debug)]
pub enum Build {
    Linkbench,
    Sqlite(sqlite::Config),
    Leveldb(leveldb::Config),
}

/// The applications vmio models, in [`App`]'s order.
pub const APPS: &[KindEntry<App, Build>] = &[
    KindEntry {
        kind: App::Linkbench,
        name: "linkbench",
        aliases: &[],
        quiet_aliases: &[],
        help: "LinkBench request mix (FBWorkload.properties: getlinklist 50.7 %, getnode 12.9 %, addlink 9.0 %, ...) by 100 requesters on an InnoDB-like store: 16 KiB pages, a 128 MiB buffer pool, redo log write + fsync per commit, doublewrite page flushes",
        params: Build::Linkbench,
    },
    KindEntry {
        kind: App::SqliteDelete,
        name: "sqlite-delete",
        aliases: &["sqlite"],
        quiet_aliases: &[],
        help: "Mobibench SQLite inserts, updates, deletes of 100-byte rows, one transaction each, journal_mode=DELETE, synchronous=NORMAL: journal created, written, fsynced (and its directory), db pages written and fsynced, journal unlinked",
        params: Build::Sqlite(sqlite::Config {
            wal: false,
            full: false,
        }),
    },
    KindEntry {
        kind: App::SqliteDeleteFull,
        name: "sqlite-delete-full",
        aliases: &[],
        quiet_aliases: &[],
        help: "as sqlite-delete with synchronous=FULL (SQLite's default): the journal is fsynced before and after its header's record count",
        params: Build::Sqlite(sqlite::Config {
            wal: false,
            full: true,
        }),
    },
    KindEntry {
        kind: App::SqliteWal,
        name: "sqlite-wal",
        aliases: &[],
        quiet_aliases: &[],
        help: "Mobibench SQLite transactions in journal_mode=WAL, synchronous=NORMAL: frames appended to -wal without fsync, a checkpoint (wal fsync, db writes, db fsync) every 1000 frames",
        params: Build::Sqlite(sqlite::Config {
            wal: true,
            full: false,
        }),
    },
    KindEntry {
        kind: App::SqliteWalFull,
        name: "sqlite-wal-full",
        aliases: &[],
        quiet_aliases: &[],
        help: "as sqlite-wal with synchronous=FULL: the -wal file is fsynced at every commit",
        params: Build::Sqlite(sqlite::Config {
            wal: true,
            full: true,
        }),
    },
    KindEntry {
        kind: App::LeveldbFillsync,
        name: "leveldb-fillsync",
        aliases: &[],
        quiet_aliases: &[],
        help: "LevelDB db_bench fillsync: random 16-byte keys, 100-byte values, each put a log append + fdatasync; 4 MiB memtables flushed to level-0 tables, background compactions",
        params: Build::Leveldb(leveldb::Config { sync: true }),
    },
    KindEntry {
        kind: App::LeveldbCompact,
        name: "leveldb-compact",
        aliases: &[],
        quiet_aliases: &[],
        help: "LevelDB db_bench fillrandom (puts without sync, one log write each) driving memtable flushes and leveled compactions: tables read sequentially, 2 MiB outputs written and fsynced, MANIFEST append + fsync, inputs deleted",
        params: Build::Leveldb(leveldb::Config { sync: false }),
    },
];

/// An application that cannot run.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AppError {
    #[error("'{0}' is not an application vmio models; accepted: {accepted}", accepted = kinds::accepted(APPS))]
    UnknownApp(String),
    #[error(
        "app {app}: its files need {needed_bytes} bytes on a filesystem of {fs_bytes} bytes; accepted: a filesystem of at least {needed_bytes} bytes"
    )]
    TooLarge {
        app: &'static str,
        fs_bytes: u64,
        needed_bytes: u64,
    },
}

impl App {
    /// A name or alias of [`APPS`] (case-insensitive).
    pub fn parse(name: &str) -> Result<Self, AppError> {
        kinds::find(APPS, name)
            .map(|e| e.kind)
            .ok_or_else(|| AppError::UnknownApp(name.to_string()))
    }

    fn entry(self) -> &'static KindEntry<Self, Build> {
        &APPS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The accepted names, as an error line lists them.
    pub fn accepted() -> String {
        kinds::accepted(APPS)
    }
}

/// One application's state: what each thread does next.
#[derive(Clone, Debug)]
enum Model {
    Linkbench(linkbench::Linkbench),
    Sqlite(sqlite::Sqlite),
    Leveldb(leveldb::Leveldb),
}

impl Model {
    fn refill(&mut self, thread: usize, out: &mut VecDeque<FileOp>) {
        match self {
            Model::Linkbench(m) => m.refill(thread, out),
            Model::Sqlite(m) => m.refill(thread, out),
            Model::Leveldb(m) => m.refill(thread, out),
        }
    }

    fn finished(&mut self, thread: usize) {
        if let Model::Leveldb(m) = self {
            m.finished(thread)
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Thread {
    queue: VecDeque<FileOp>,
    issued: bool,
}

/// An application as a file-level [`Workload`]. See the module doc.
#[derive(Clone, Debug)]
pub struct AppFlows {
    app: App,
    decls: Vec<FileDecl>,
    threads: Vec<Thread>,
    /// Boxed: the models are large, [`super::JobWorkload`] keeps its variants small.
    model: Box<Model>,
    turn: usize,
}

/// A buffered `pread` of `len` bytes at `offset`.
pub(crate) fn read(file: FileId, offset: u64, len: u64) -> FileOp {
    FileOp::Read {
        file,
        offset,
        len,
        flags: IoFlags::default(),
    }
}

/// A buffered `pwrite` of `len` bytes at `offset`.
pub(crate) fn write(file: FileId, offset: u64, len: u64) -> FileOp {
    FileOp::Write {
        file,
        offset,
        len,
        flags: IoFlags::default(),
    }
}

/// A buffered `write` of `len` bytes at the end of the file.
pub(crate) fn append(file: FileId, len: u64) -> FileOp {
    FileOp::Append {
        file,
        len,
        flags: IoFlags::default(),
    }
}

/// `fdatasync`.
pub(crate) fn fdatasync(file: FileId) -> FileOp {
    FileOp::Fsync {
        file,
        datasync: true,
    }
}

/// `fsync` (also what vmio issues for an application's fsync of a directory: see the
/// applications' docs).
pub(crate) fn fsync(file: FileId) -> FileOp {
    FileOp::Fsync {
        file,
        datasync: false,
    }
}

/// Checks that files of `needed_bytes` fit on a filesystem of `fs_bytes`.
pub(crate) fn check_fits(app: App, needed_bytes: u64, fs_bytes: u64) -> Result<(), AppError> {
    if needed_bytes > fs_bytes {
        return Err(AppError::TooLarge {
            app: app.name(),
            fs_bytes,
            needed_bytes,
        });
    }
    Ok(())
}

impl AppFlows {
    /// The application's files under `dir`, drawn from `seed`, on a filesystem of `fs_bytes`.
    pub fn new(app: App, dir: &str, fs_bytes: u64, seed: u64) -> Result<Self, AppError> {
        let dir = dir.trim_end_matches('/');
        let (model, decls, threads) = match app.entry().params {
            Build::Linkbench => {
                let (m, d) = linkbench::Linkbench::new(dir, seed);
                check_fits(app, linkbench::Linkbench::bytes(&d), fs_bytes)?;
                (Model::Linkbench(m), d, linkbench::THREADS)
            }
            Build::Sqlite(c) => {
                let (m, d) = sqlite::Sqlite::new(c, dir, seed);
                (Model::Sqlite(m), d, 1)
            }
            Build::Leveldb(c) => {
                let (m, d) = leveldb::Leveldb::new(c, dir, seed);
                check_fits(app, leveldb::NEEDED_BYTES, fs_bytes)?;
                (Model::Leveldb(m), d, leveldb::THREADS)
            }
        };
        Ok(Self {
            app,
            decls,
            threads: vec![Thread::default(); threads],
            model: Box::new(model),
            turn: 0,
        })
    }

    pub fn app(&self) -> App {
        self.app
    }
}

impl Workload for AppFlows {
    fn next(&mut self, _elapsed_ns: Ns) -> Step {
        let n = self.threads.len();
        for k in 0..n {
            let t = (self.turn + k) % n;
            let th = &mut self.threads[t];
            if th.issued {
                continue;
            }
            if th.queue.is_empty() {
                self.model.refill(t, &mut th.queue);
            }
            if let Some(op) = th.queue.pop_front() {
                th.issued = true;
                self.turn = (t + 1) % n;
                return Step::File { op, tag: t as u32 };
            }
        }
        if self.threads.iter().any(|t| t.issued) {
            Step::Wait
        } else {
            Step::Done
        }
    }

    fn depth(&self) -> u32 {
        self.threads.len() as u32
    }

    fn files(&self) -> &[FileDecl] {
        &self.decls
    }

    fn completed(&mut self, tag: u32) {
        let t = tag as usize;
        let Some(th) = self.threads.get_mut(t) else {
            return;
        };
        if !th.issued {
            return;
        }
        th.issued = false;
        if th.queue.is_empty() {
            self.model.finished(t);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Runs `app` for `ops` operations, completing each at once (every thread's operation
    /// completes before the next step): returns (tag, op) in issue order.
    pub(crate) fn run(w: &mut AppFlows, ops: usize) -> Vec<(u32, FileOp)> {
        let mut out = Vec::with_capacity(ops);
        while out.len() < ops {
            match w.next(0) {
                Step::File { op, tag } => {
                    out.push((tag, op));
                    w.completed(tag);
                }
                s => panic!("{:?}: {s:?}", w.app()),
            }
        }
        out
    }

    pub(crate) fn flows(app: App, seed: u64) -> AppFlows {
        AppFlows::new(app, "/mnt/a", 64 << 30, seed).unwrap()
    }

    #[test]
    fn every_entry_of_the_registry_is_its_variant_and_parses_by_name() {
        for (i, e) in APPS.iter().enumerate() {
            assert_eq!(e.kind as usize, i, "{}", e.name);
            assert_eq!(App::parse(e.name), Ok(e.kind));
        }
        assert_eq!(App::parse(" SQLite "), Ok(App::SqliteDelete));
        assert_eq!(
            App::parse("mysql").unwrap_err().to_string(),
            "'mysql' is not an application vmio models; accepted: linkbench, sqlite-delete (sqlite), sqlite-delete-full, sqlite-wal, sqlite-wal-full, leveldb-fillsync, leveldb-compact"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_steps_and_another_seed_other_ones_for_every_app() {
        for e in APPS {
            let a = run(&mut flows(e.kind, 5), 3000);
            let b = run(&mut flows(e.kind, 5), 3000);
            assert!(a == b, "{}", e.name);
        }
        // LinkBench draws its requests; Mobibench's updates draw rows.
        for app in [App::Linkbench, App::SqliteDelete] {
            let a = run(&mut flows(app, 5), 40_000);
            let c = run(&mut flows(app, 6), 40_000);
            assert!(a != c, "{app:?}");
        }
    }

    #[test]
    fn an_app_whose_files_do_not_fit_is_refused_naming_the_sizes() {
        let e = AppFlows::new(App::Linkbench, "/mnt", 1 << 30, 1).unwrap_err();
        assert!(
            e.to_string().starts_with("app linkbench: its files need ")
                && e.to_string()
                    .contains("on a filesystem of 1073741824 bytes"),
            "{e}"
        );
    }
}
