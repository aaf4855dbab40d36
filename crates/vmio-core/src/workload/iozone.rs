//! iozone's automatic write/read/random tests as a file-level workload:
//! `iozone -e -I -a -s SIZE -r R [-r R2 ...] -i 0 -i 1 -i 2` on one file of the guest
//! filesystem, with iozone's own sequence of system calls, shuffle and throughput rule.
//!
//! Sources: iozone.c 3.4xx (github Thomas134/iozone, src/current/iozone.c):
//! `auto_test` runs each requested test for each record size, then `unlink`s the file;
//! `write_perf_test` (write, rewrite), `read_perf_test` (read, reread), `random_perf_test`
//! (random read, random write); `print_header` and `CONTROL_STRING3` for the `-a` table.
//!
//! ```text
//! per record size r (numrecs = size / r, bytes = numrecs * r), tests in the order 0, 1, 2:
//!   write_perf_test, pass j = 0 (write), 1 (rewrite):
//!     j = 0: creat (truncates: blocks allocated anew), close
//!     open (O_RDWR | O_DIRECT under -I); fsync                        untimed
//!     write record 0, 1, ..., numrecs - 1                             timed
//!     -e: fsync                                                       timed
//!     fsync; close                                                    untimed
//!   read_perf_test, pass j = 0 (read), 1 (reread):
//!     open; fsync; read record 0, lseek 0 (primes caches and TLB)     untimed
//!     read record 0, ..., numrecs - 1; -e: fsync                      timed
//!     fsync; close                                                    untimed
//!   random_perf_test: the record order is drawn once, before both passes:
//!     srand48(0); recnum[i] = i; for i in 0..numrecs: swap(recnum[i], recnum[lrand48() % numrecs])
//!     pass j = 0 (random read), 1 (random write): open;
//!     read/write record recnum[0], ..., recnum[numrecs - 1]; -e: fsync  timed
//!     fsync; close                                                    untimed
//!   unlink
//! rate of a pass = (bytes / timed seconds) >> 10                        KB/s (KiB/s)
//! ```
//!
//! iozone's shuffle is the swap-with-any-index loop above (not the textbook Fisher-Yates,
//! which swaps with an index at or below `i`); it is a permutation all the same, so every
//! record is visited once per pass. `lrand48` is drand48's 48-bit LCG (POSIX):
//! `x' = (0x5DEECE66D x + 0xB) mod 2^48`, output `x' >> 17`, `srand48(s)` sets
//! `x = (s << 16) | 0x330E` ([`Lrand48`]).
//!
//! The workload is one thread at depth 1 (iozone's single process): the engine asks for the
//! next step after the previous one completed, so the `elapsed_ns` of [`Workload::next`] at
//! the first timed step and at the first untimed step after the timed ones bound the timed
//! region; [`IozoneFlows::timings`] holds each pass's bytes and nanoseconds, from which
//! [`Timing::kb_per_s`] and [`table`] give iozone's report. iozone subtracts its clock
//! resolution (`time_res`) from each time; a simulated clock has none.

use super::files::{FileDecl, FileId, FileLayout, FileOp, IoFlags};
use super::{Step, Workload};
use crate::Ns;
use std::collections::VecDeque;
use thiserror::Error;

/// The flags of an iozone command line vmio models.
pub const ACCEPTED: &str =
    "-e, -I, -a, -s SIZE, -r SIZE (repeatable), -i 0|1|2 (repeatable); SIZE in KB or with a k, m, g suffix";

/// An iozone command line vmio cannot run.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum IozoneError {
    #[error("iozone flag '{0}' is not one vmio models; accepted: {ACCEPTED}")]
    UnknownFlag(String),
    #[error("iozone flag {0} needs a value; accepted: {ACCEPTED}")]
    MissingValue(&'static str),
    #[error("iozone {flag} '{value}' is not a size; accepted: a whole number of KB, or with a k, m or g suffix (4k, 100m, 1g), > 0")]
    BadSize { flag: &'static str, value: String },
    #[error("iozone -i '{0}' is not a test vmio models; accepted: 0 (write/rewrite), 1 (read/reread), 2 (random read/write)")]
    BadTest(String),
    #[error("iozone needs {0}; accepted: -s SIZE, at least one -r SIZE and at least one -i")]
    Missing(&'static str),
    #[error("iozone -i 1 and -i 2 read the file -i 0 writes; accepted: -i 0 with -i 1 or -i 2")]
    NeedsWriteTest,
    #[error("iozone -r {record_kb}k is larger than the file (-s {size_kb}k); accepted: a record size <= the file size")]
    RecordLargerThanFile { record_kb: u64, size_kb: u64 },
    #[error("iozone -I -r {record_kb}k: O_DIRECT needs records aligned on 4 KiB; accepted: a record size that is a multiple of 4k under -I")]
    UnalignedDirect { record_kb: u64 },
}

/// One of iozone's tests (`-i N`), in the order `auto_test` runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Test {
    /// `-i 0`: write, rewrite.
    Write,
    /// `-i 1`: read, reread.
    Read,
    /// `-i 2`: random read, random write.
    Random,
}

/// One timed pass: a column of iozone's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Write,
    Rewrite,
    Read,
    Reread,
    RandomRead,
    RandomWrite,
}

impl Phase {
    /// The phases in the table's column order.
    pub const ALL: [Phase; 6] = [
        Phase::Write,
        Phase::Rewrite,
        Phase::Read,
        Phase::Reread,
        Phase::RandomRead,
        Phase::RandomWrite,
    ];

    /// The two passes of a test.
    fn of(test: Test) -> [Phase; 2] {
        match test {
            Test::Write => [Phase::Write, Phase::Rewrite],
            Test::Read => [Phase::Read, Phase::Reread],
            Test::Random => [Phase::RandomRead, Phase::RandomWrite],
        }
    }

    /// The phase of a column name ([`Self::name`]).
    pub fn parse(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The column's name (iozone's two header lines joined).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Write => "write",
            Phase::Rewrite => "rewrite",
            Phase::Read => "read",
            Phase::Reread => "reread",
            Phase::RandomRead => "random read",
            Phase::RandomWrite => "random write",
        }
    }

    fn writes(self) -> bool {
        matches!(self, Phase::Write | Phase::Rewrite | Phase::RandomWrite)
    }
}

/// A parsed iozone command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `-e`: the fsync is inside the timed region.
    pub include_flush: bool,
    /// `-I`: O_DIRECT.
    pub direct: bool,
    /// `-s`: the file size in bytes (a whole number of KB).
    pub size_bytes: u64,
    /// `-r`: the record sizes in bytes, in command-line order.
    pub records: Vec<u64>,
    /// `-i`: the tests, in the order iozone runs them (0, 1, 2), each once.
    pub tests: Vec<Test>,
}

/// iozone's size argument of `flag`: a number of KB, or with a k, m or g suffix; bytes.
pub fn size_arg(flag: &'static str, value: &str) -> Result<u64, IozoneError> {
    let bad = || IozoneError::BadSize {
        flag,
        value: crate::units::quote(value),
    };
    let v = value.trim().to_ascii_lowercase();
    let (digits, unit) = match v.char_indices().last() {
        Some((i, 'k')) => (&v[..i], 1u64 << 10),
        Some((i, 'm')) => (&v[..i], 1 << 20),
        Some((i, 'g')) => (&v[..i], 1 << 30),
        _ => (v.as_str(), 1 << 10),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&b| b > 0)
        .ok_or_else(bad)
}

impl Options {
    /// Parses iozone's flags (`-e -I -a -s 100m -r 4k -r 4m -i 0 -i 1 -i 2`); a value may
    /// follow its flag or be glued to it (`-s100m`, iozone's getopt). `-a` (the automatic
    /// mode) is accepted and changes nothing: the record sizes run are the `-r` ones.
    pub fn parse(line: &str) -> Result<Self, IozoneError> {
        let mut words = line.split_whitespace();
        let (mut include_flush, mut direct) = (false, false);
        let mut size_bytes = None;
        let mut records = Vec::new();
        let mut tests = Vec::new();
        while let Some(w) = words.next() {
            let flag = match w {
                "-e" => {
                    include_flush = true;
                    continue;
                }
                "-I" => {
                    direct = true;
                    continue;
                }
                "-a" => continue,
                _ if w.starts_with("-s") => "-s",
                _ if w.starts_with("-r") => "-r",
                _ if w.starts_with("-i") => "-i",
                _ => return Err(IozoneError::UnknownFlag(crate::units::quote(w))),
            };
            let value = match &w[2..] {
                "" => words.next().ok_or(IozoneError::MissingValue(flag))?,
                glued => glued,
            };
            match flag {
                "-s" => size_bytes = Some(size_arg(flag, value)?),
                "-r" => records.push(size_arg(flag, value)?),
                _ => tests.push(match value {
                    "0" => Test::Write,
                    "1" => Test::Read,
                    "2" => Test::Random,
                    _ => return Err(IozoneError::BadTest(crate::units::quote(value))),
                }),
            }
        }
        let size_bytes = size_bytes.ok_or(IozoneError::Missing("a file size (-s)"))?;
        if records.is_empty() {
            return Err(IozoneError::Missing("a record size (-r)"));
        }
        if tests.is_empty() {
            return Err(IozoneError::Missing("a test (-i)"));
        }
        tests.sort();
        tests.dedup();
        if tests[0] != Test::Write {
            return Err(IozoneError::NeedsWriteTest);
        }
        for &r in &records {
            if r > size_bytes {
                return Err(IozoneError::RecordLargerThanFile {
                    record_kb: r >> 10,
                    size_kb: size_bytes >> 10,
                });
            }
            if direct && r % 4096 != 0 {
                return Err(IozoneError::UnalignedDirect { record_kb: r >> 10 });
            }
        }
        Ok(Self {
            include_flush,
            direct,
            size_bytes,
            records,
            tests,
        })
    }
}

/// drand48's 48-bit linear congruential generator as `lrand48` draws from it (POSIX).
#[derive(Clone, Copy, Debug)]
pub struct Lrand48 {
    x: u64,
}

impl Lrand48 {
    const A: u64 = 0x5_DEEC_E66D;
    const C: u64 = 0xB;
    const MASK: u64 = (1 << 48) - 1;

    /// `srand48(seed)`: the high 32 bits of the state are the seed's low 32 bits.
    pub fn srand48(seed: u32) -> Self {
        Self {
            x: (u64::from(seed) << 16) | 0x330E,
        }
    }

    /// `lrand48()`: the next state's high 31 bits.
    pub fn next_u31(&mut self) -> u64 {
        self.x = (Self::A.wrapping_mul(self.x).wrapping_add(Self::C)) & Self::MASK;
        self.x >> 17
    }
}

/// `random_perf_test`'s record order for `numrecs` records: `srand48(0)`, then each index
/// `i` swapped with index `lrand48() % numrecs`.
pub fn shuffle(numrecs: u64) -> Vec<u64> {
    let mut rng = Lrand48::srand48(0);
    let mut order: Vec<u64> = (0..numrecs).collect();
    for i in 0..order.len() {
        let j = rng.next_u31() % numrecs;
        order.swap(i, j as usize);
    }
    order
}

/// One step of the sequence: the operation, the pass it belongs to and whether it is inside
/// the pass's timed region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub op: FileOp,
    pub phase: Phase,
    pub timed: bool,
}

/// The file iozone works on (its default name).
const FILE: FileId = 0;

/// The operations of one pass of `phase` with records of `record` bytes (see the module
/// doc); `order` is the random passes' record order.
pub fn pass(opts: &Options, record: u64, phase: Phase, order: &[u64]) -> Vec<Item> {
    let numrecs = opts.size_bytes / record;
    let flags = IoFlags {
        direct: opts.direct,
        sync: false,
    };
    let io = |index: u64| {
        let (offset, len) = (index * record, record);
        if phase.writes() {
            FileOp::Write {
                file: FILE,
                offset,
                len,
                flags,
            }
        } else {
            FileOp::Read {
                file: FILE,
                offset,
                len,
                flags,
            }
        }
    };
    let fsync = FileOp::Fsync {
        file: FILE,
        datasync: false,
    };
    let untimed = |op| Item {
        op,
        phase,
        timed: false,
    };
    let timed = |op| Item {
        op,
        phase,
        timed: true,
    };
    let mut out = Vec::with_capacity(numrecs as usize + 8);
    if phase == Phase::Write {
        out.push(untimed(FileOp::Create { file: FILE }));
        out.push(untimed(FileOp::Close { file: FILE }));
    }
    out.push(untimed(FileOp::Open { file: FILE }));
    match phase {
        Phase::Write | Phase::Rewrite => out.push(untimed(fsync)),
        Phase::Read | Phase::Reread => {
            out.push(untimed(fsync));
            out.push(untimed(io(0)));
        }
        Phase::RandomRead | Phase::RandomWrite => {}
    }
    match phase {
        Phase::RandomRead | Phase::RandomWrite => out.extend(order.iter().map(|&i| timed(io(i)))),
        _ => out.extend((0..numrecs).map(|i| timed(io(i)))),
    }
    if opts.include_flush {
        out.push(timed(fsync));
    }
    out.push(untimed(fsync));
    out.push(untimed(FileOp::Close { file: FILE }));
    out
}

/// A pass's bytes and timed nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The file size (`-s`): the table's KB column.
    pub file_bytes: u64,
    pub record_bytes: u64,
    pub phase: Phase,
    pub bytes: u64,
    pub ns: Ns,
}

impl Timing {
    /// iozone's rate: `(bytes / seconds) >> 10`, KB/s.
    pub fn kb_per_s(self) -> u64 {
        let secs = self.ns.max(1) as f64 / 1e9;
        ((self.bytes as f64 / secs) as u64) >> 10
    }
}

/// iozone's table (`print_header`'s two lines in `CONTROL_STRING3`, then one row per record
/// size: `%16lld` KB, `%8lld` reclen, `%8lld` write, rewrite, read, `%9lld` reread, `%8lld`
/// random read, random write); a row stops at the first phase not run, as iozone's does.
pub fn table(timings: &[Timing]) -> String {
    const WIDTHS: [usize; 15] = [16, 8, 8, 8, 8, 10, 8, 8, 8, 9, 9, 9, 9, 8, 9];
    const TOP: [&str; 15] = [
        "", "", "", "", "", "", "random", "random", "bkwd", "record", "stride", "", "", "", "",
    ];
    const TITLES: [&str; 15] = [
        "KB", "reclen", "write", "rewrite", "read", "reread", "read", "write", "read", "rewrite",
        "read", "fwrite", "frewrite", "fread", "freread",
    ];
    // CONTROL_STRING3 is "%16s%8s%8s%8s%8s%10s%8s%8s%8s %8s %8s%9s%9s%8s%9s": the two
    // single spaces belong to the 10th and 11th columns, written as width 9 above.
    let header = |words: &[&str; 15]| -> String {
        let mut s: String = words
            .iter()
            .zip(WIDTHS)
            .map(|(w, n)| format!("{w:>n$}"))
            .collect();
        s.push('\n');
        s
    };
    let mut out = header(&TOP) + &header(&TITLES);
    let mut rows: Vec<(u64, u64)> = Vec::new();
    for t in timings {
        if !rows.contains(&(t.file_bytes, t.record_bytes)) {
            rows.push((t.file_bytes, t.record_bytes));
        }
    }
    for (size, r) in rows {
        out += &format!("{:>16}{:>8}", size >> 10, r >> 10);
        for (k, phase) in Phase::ALL.iter().enumerate() {
            let Some(t) = timings
                .iter()
                .find(|t| (t.file_bytes, t.record_bytes) == (size, r) && t.phase == *phase)
            else {
                break;
            };
            let width = if k == 3 { 9 } else { 8 };
            out += &format!("{:>width$}", t.kb_per_s());
        }
        out.push('\n');
    }
    out
}

/// iozone as a [`Workload`]: one thread running [`pass`] after [`pass`] for every record
/// size and test, timing each pass from the engine's `elapsed_ns`.
#[derive(Clone, Debug)]
pub struct IozoneFlows {
    opts: Options,
    decls: Vec<FileDecl>,
    /// The (record index, phase) passes still to build, in order.
    passes: VecDeque<(usize, Phase)>,
    queue: VecDeque<Item>,
    /// The random passes' order for the current record size.
    order: Vec<u64>,
    order_record: Option<usize>,
    /// The record size of the pass queued last (every pass ends untimed: the timed region
    /// of the queued pass ends before the next one is queued).
    record: u64,
    issued: bool,
    /// The current pass's timed region: its start, and whether it has ended.
    start: Option<Ns>,
    timings: Vec<Timing>,
}

impl IozoneFlows {
    /// iozone with `opts` on the file `<dir>/iozone.tmp`.
    pub fn new(opts: Options, dir: &str) -> Self {
        let passes = (0..opts.records.len())
            .flat_map(|r| {
                opts.tests
                    .iter()
                    .flat_map(move |&t| Phase::of(t).map(|p| (r, p)))
            })
            .collect();
        let decls = vec![FileDecl {
            path: format!("{}/iozone.tmp", dir.trim_end_matches('/')),
            exists: false,
            size_bytes: 0,
            layout: FileLayout::default(),
            dir: 0,
        }];
        Self {
            opts,
            decls,
            passes,
            queue: VecDeque::new(),
            order: Vec::new(),
            order_record: None,
            record: 0,
            issued: false,
            start: None,
            timings: Vec::new(),
        }
    }

    /// The passes timed so far, in the order they ran.
    pub fn timings(&self) -> &[Timing] {
        &self.timings
    }

    /// Queues the next pass (and the unlink closing a record size), if any is left.
    fn refill(&mut self) {
        let Some((r, phase)) = self.passes.pop_front() else {
            return;
        };
        let record = self.opts.records[r];
        self.record = record;
        if matches!(phase, Phase::RandomRead) && self.order_record != Some(r) {
            self.order = shuffle(self.opts.size_bytes / record);
            self.order_record = Some(r);
        }
        self.queue
            .extend(pass(&self.opts, record, phase, &self.order));
        if self.passes.front().is_none_or(|&(next, _)| next != r) {
            self.queue.push_back(Item {
                op: FileOp::Delete { file: FILE },
                phase,
                timed: false,
            });
        }
    }
}

impl Workload for IozoneFlows {
    fn next(&mut self, elapsed_ns: Ns) -> Step {
        if self.issued {
            return Step::Wait;
        }
        if self.queue.is_empty() {
            self.refill();
        }
        let Some(item) = self.queue.pop_front() else {
            return Step::Done;
        };
        match (item.timed, self.start) {
            (true, None) => self.start = Some(elapsed_ns),
            (false, Some(start)) => {
                let record_bytes = self.record;
                let bytes = self.opts.size_bytes / record_bytes * record_bytes;
                self.timings.push(Timing {
                    file_bytes: self.opts.size_bytes,
                    record_bytes,
                    phase: item.phase,
                    bytes,
                    ns: elapsed_ns.saturating_sub(start),
                });
                self.start = None;
            }
            _ => {}
        }
        self.issued = true;
        Step::File {
            op: item.op,
            tag: 0,
        }
    }

    fn files(&self) -> &[FileDecl] {
        &self.decls
    }

    fn completed(&mut self, _tag: u32) {
        self.issued = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::{parse_job_file, FioError};
    use crate::workload::{workloads, Target, WorkloadError};

    const KIB: u64 = 1024;

    fn opts(line: &str) -> Options {
        Options::parse(line).unwrap()
    }

    /// Runs `w` to its end; each operation takes `cost(op)` ns, completed before the next
    /// step (iozone's single thread). Returns the operations in order.
    fn run(w: &mut IozoneFlows, cost: impl Fn(FileOp) -> Ns) -> Vec<FileOp> {
        let (mut now, mut out) = (0, Vec::new());
        loop {
            match w.next(now) {
                Step::File { op, tag } => {
                    out.push(op);
                    now += cost(op);
                    w.completed(tag);
                }
                Step::Done => return out,
                s => panic!("{s:?}"),
            }
        }
    }

    #[test]
    fn lrand48_after_srand48_0_draws_glibcs_sequence() {
        // glibc 2.x: srand48(0); lrand48() eight times.
        let mut rng = Lrand48::srand48(0);
        let drawn: Vec<u64> = (0..8).map(|_| rng.next_u31()).collect();
        assert_eq!(
            drawn,
            [
                366850414, 1610402240, 206956554, 1869309841, 1239749840, 1687491058, 1486475625,
                791919534
            ]
        );
    }

    #[test]
    fn the_shuffle_is_iozones_under_glibc_and_visits_every_record_once() {
        // random_perf_test's loop compiled against glibc's srand48/lrand48.
        assert_eq!(shuffle(2), [1, 0]);
        assert_eq!(shuffle(4), [1, 3, 0, 2]);
        assert_eq!(shuffle(10), [9, 3, 0, 4, 5, 6, 8, 1, 7, 2]);
        assert_eq!(
            shuffle(25),
            [
                6, 15, 4, 16, 1, 8, 12, 7, 0, 5, 10, 19, 11, 17, 3, 22, 2, 20, 9, 14, 21, 23, 18,
                24, 13
            ]
        );
        let mut big = shuffle(25_600);
        assert_ne!(big[..10], (0..10).collect::<Vec<_>>()[..]);
        big.sort_unstable();
        assert_eq!(big, (0..25_600).collect::<Vec<_>>());
    }

    #[test]
    fn a_16_kib_file_with_4k_and_8k_records_runs_iozones_exact_sequence() {
        let mut w = IozoneFlows::new(
            opts("-e -I -a -s 16k -r 4k -r 8k -i 0 -i 1 -i 2"),
            "/mnt/j.0/",
        );
        assert_eq!(w.files()[0].path, "/mnt/j.0/iozone.tmp");
        assert!(!w.files()[0].exists);
        let ops = run(&mut w, |_| 1);
        let f = IoFlags {
            direct: true,
            sync: false,
        };
        let wr = |r: u64, i: u64| FileOp::Write {
            file: 0,
            offset: i * r * KIB,
            len: r * KIB,
            flags: f,
        };
        let rd = |r: u64, i: u64| FileOp::Read {
            file: 0,
            offset: i * r * KIB,
            len: r * KIB,
            flags: f,
        };
        let (create, open, close, delete) = (
            FileOp::Create { file: 0 },
            FileOp::Open { file: 0 },
            FileOp::Close { file: 0 },
            FileOp::Delete { file: 0 },
        );
        let fsync = FileOp::Fsync {
            file: 0,
            datasync: false,
        };
        let mut want = Vec::new();
        for (r, order) in [(4, vec![1, 3, 0, 2]), (8, vec![1, 0])] {
            let n = 16 / r;
            // write: creat, close, open, fsync, writes, timed fsync (-e), fsync, close
            want.extend([create, close, open, fsync]);
            want.extend((0..n).map(|i| wr(r, i)));
            want.extend([fsync, fsync, close]);
            // rewrite
            want.extend([open, fsync]);
            want.extend((0..n).map(|i| wr(r, i)));
            want.extend([fsync, fsync, close]);
            // read, reread: a priming read of record 0 first
            for _ in 0..2 {
                want.extend([open, fsync, rd(r, 0)]);
                want.extend((0..n).map(|i| rd(r, i)));
                want.extend([fsync, fsync, close]);
            }
            // random read, random write: one order for both
            want.push(open);
            want.extend(order.iter().map(|&i| rd(r, i)));
            want.extend([fsync, fsync, close, open]);
            want.extend(order.iter().map(|&i| wr(r, i)));
            want.extend([fsync, fsync, close, delete]);
        }
        assert_eq!(ops, want);
        let phases: Vec<(u64, Phase)> = w
            .timings()
            .iter()
            .map(|t| (t.record_bytes / KIB, t.phase))
            .collect();
        let want: Vec<(u64, Phase)> = [4, 8]
            .into_iter()
            .flat_map(|r| Phase::ALL.map(|p| (r, p)))
            .collect();
        assert_eq!(phases, want);
    }

    #[test]
    fn i_sets_direct_on_every_read_and_write_and_its_absence_on_none() {
        for (line, direct) in [
            ("-I -s 64k -r 4k -i 0 -i 1 -i 2", true),
            ("-s 64k -r 4k -i 0 -i 1 -i 2", false),
        ] {
            let ops = run(&mut IozoneFlows::new(opts(line), "/mnt"), |_| 1);
            let flags: Vec<IoFlags> = ops
                .iter()
                .filter_map(|op| match *op {
                    FileOp::Read { flags, .. } | FileOp::Write { flags, .. } => Some(flags),
                    _ => None,
                })
                .collect();
            // 16 records, six passes, two priming reads
            assert_eq!(flags.len(), 16 * 6 + 2);
            assert!(
                flags.iter().all(|f| f.direct == direct && !f.sync),
                "{line}"
            );
        }
    }

    #[test]
    fn e_puts_the_fsync_inside_each_phase_and_the_rate_is_bytes_over_that_time() {
        // A record costs 1 ms, an fsync 10 ms, anything else 100 ms (never timed).
        let cost = |op: FileOp| match op {
            FileOp::Read { .. } | FileOp::Write { .. } => 1_000_000,
            FileOp::Fsync { .. } => 10_000_000,
            _ => 100_000_000,
        };
        for (line, ns) in [
            ("-e -s 1m -r 64k -i 0 -i 1 -i 2", 26_000_000),
            ("-s 1m -r 64k -i 0 -i 1 -i 2", 16_000_000),
        ] {
            let mut w = IozoneFlows::new(opts(line), "/mnt");
            run(&mut w, cost);
            assert_eq!(w.timings().len(), 6);
            for t in w.timings() {
                assert_eq!((t.bytes, t.ns), (1 << 20, ns), "{line} {t:?}");
                // 1 MiB in 26 ms: 40329846 B/s >> 10 = 39384 KB/s; in 16 ms: 64000 KB/s
                let kb = ((1u64 << 20) as f64 / (ns as f64 / 1e9)) as u64 >> 10;
                assert_eq!(t.kb_per_s(), kb);
            }
        }
    }

    #[test]
    fn bad_iozone_flags_are_refused_naming_the_flag_and_the_accepted_values() {
        let e = |line: &str| Options::parse(line).unwrap_err().to_string();
        assert_eq!(
            e("-s 1m -r 4k -i 0 -x"),
            format!("iozone flag '-x' is not one vmio models; accepted: {ACCEPTED}")
        );
        assert_eq!(e("-s 1m -r 4k -i 9"), "iozone -i '9' is not a test vmio models; accepted: 0 (write/rewrite), 1 (read/reread), 2 (random read/write)");
        assert_eq!(e("-s 1q -r 4k -i 0"), "iozone -s '1q' is not a size; accepted: a whole number of KB, or with a k, m or g suffix (4k, 100m, 1g), > 0");
        assert_eq!(
            e("-s 1m -i 0 -r"),
            format!("iozone flag -r needs a value; accepted: {ACCEPTED}")
        );
        assert_eq!(e("-s 1m -i 0"), "iozone needs a record size (-r); accepted: -s SIZE, at least one -r SIZE and at least one -i");
        assert_eq!(
            e("-s 1m -r 4k -i 2"),
            "iozone -i 1 and -i 2 read the file -i 0 writes; accepted: -i 0 with -i 1 or -i 2"
        );
        assert_eq!(e("-s 4k -r 8k -i 0"), "iozone -r 8k is larger than the file (-s 4k); accepted: a record size <= the file size");
        assert_eq!(e("-I -s 1m -r 2k -i 0"), "iozone -I -r 2k: O_DIRECT needs records aligned on 4 KiB; accepted: a record size that is a multiple of 4k under -I");
        // iozone's getopt also takes a value glued to its flag; sizes without a unit are KB
        let o = opts("-s100 -r4 -i0 -i 2 -i 1 -i 0");
        assert_eq!(
            (o.size_bytes, o.records.clone()),
            (100 * KIB, vec![4 * KIB])
        );
        assert_eq!(o.tests, [Test::Write, Test::Read, Test::Random]);
    }

    #[test]
    fn the_iozone_job_option_is_checked_at_parse_time_and_needs_a_filesystem() {
        let e = parse_job_file("[j]\niozone=-s 1m -r 4k -i 7\n", "t.fio").unwrap_err();
        assert!(matches!(e, FioError::Iozone { line: 2, .. }), "{e:?}");
        assert_eq!(e.to_string(), "t.fio:2: iozone: '-s 1m -r 4k -i 7': iozone -i '7' is not a test vmio models; accepted: 0 (write/rewrite), 1 (read/reread), 2 (random read/write)");
        let job = parse_job_file(
            "[j]\niozone=-e -I -a -s 1m -r 4k -r 64k -i 0 -i 1 -i 2\nnumjobs=2\n",
            "t.fio",
        )
        .unwrap()
        .jobs
        .remove(0);
        let fs = Target::Filesystem {
            bytes: 1 << 30,
            mount: "/mnt/data",
        };
        let w = workloads(&job, fs, None, 1, &mut Vec::new()).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[1].files()[0].path, "/mnt/data/j.1/iozone.tmp");
        let disk = workloads(
            &job,
            Target::Disk { bytes: 1 << 30 },
            None,
            1,
            &mut Vec::new(),
        );
        assert!(matches!(
            disk,
            Err(WorkloadError::NeedsFilesystem {
                option: "iozone",
                ..
            })
        ));
        let small = Target::Filesystem {
            bytes: 512 * KIB,
            mount: "/mnt/data",
        };
        let too_big = workloads(&job, small, None, 1, &mut Vec::new()).unwrap_err();
        assert!(matches!(
            too_big,
            WorkloadError::FileLargerThanFilesystem {
                file_bytes: 1048576,
                ..
            }
        ));
    }

    #[test]
    fn the_table_has_iozones_header_and_one_row_per_record_size() {
        let t = |record_bytes, phase, ns| Timing {
            file_bytes: 100 << 20,
            record_bytes,
            phase,
            bytes: 100 << 20,
            ns,
        };
        // 100 MiB in 1 s: 102400 KB/s; in 0.5 s: 204800; in 2 s: 51200.
        let mut timings = Vec::new();
        for (r, ns) in [(4 * KIB, 1_000_000_000), (16 << 20, 500_000_000)] {
            timings.extend(Phase::ALL.map(|p| t(r, p, ns)));
        }
        timings.pop();
        timings.push(t(16 << 20, Phase::RandomWrite, 2_000_000_000));
        let want = concat!(
            "                                                            random  random    bkwd   record   stride                                   \n",
            "              KB  reclen   write rewrite    read    reread    read   write    read  rewrite     read   fwrite frewrite   fread  freread\n",
            "          102400       4  102400  102400  102400   102400  102400  102400\n",
            "          102400   16384  204800  204800  204800   204800  204800   51200\n",
        );
        assert_eq!(table(&timings), want);
    }
}
