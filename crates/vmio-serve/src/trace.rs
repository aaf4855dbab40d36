//! The request trace (`--trace FILE`): every request the server serves, as a fio iolog
//! version 3 that fio (`--read_iolog=FILE`) and vmio's own trace reader
//! ([`vmio_core::workload::trace`], format `fio-iolog`) replay.
//!
//! Format (fio's HOWTO, "Trace file format v3"; fio `iolog.c`: `log_io_u` and `log_file`
//! write it, `read_iolog2` reads it with `sscanf("%llu %256s %256s %llu %u")`):
//!
//! ```text
//! fio version 3 iolog
//! T EXPORT add                 first request of an export (T of that request)
//! T EXPORT open
//! T EXPORT read|write|trim OFFSET LENGTH
//! T EXPORT sync 0 0            NBD_CMD_FLUSH
//! T EXPORT datasync 0 0        right after a write/trim carrying NBD_CMD_FLAG_FUA (same T)
//! T EXPORT close               at shutdown, for every export that was opened
//! ```
//!
//! - `T` is the request's arrival, in whole microseconds since the server started: fio's
//!   unit (`log_io_u` prints `utime_since_now(&td->io_log_start_time)`, and `iolog_delay`
//!   waits that many microseconds). Requests of several connections are written in the
//!   order they were submitted; their times may step back by a few microseconds, which fio
//!   (`delay_since_ttime`: no delay) and vmio (stable sort) both accept.
//! - `EXPORT` is the export's name `VM/DISK`, whitespace replaced by `_`. fio opens it as a
//!   path: replay with `--replay_redirect=FILE` (or from a directory holding `VM/DISK`).
//! - `NBD_CMD_WRITE_ZEROES` is written as `write` (fio has no zeroing action).
//! - FUA has no iolog field: a FUA request is followed by `datasync 0 0` (fio: fdatasync of
//!   the file, i.e. the write made durable). An NBD FLUSH is `sync 0 0`, so a reader tells
//!   them apart: `datasync` appears only right after a FUA write. Sync lines carry offset and
//!   length 0 because fio adds a line's length to the job size and indexes its per-direction
//!   block-size table with the action (only read, write and trim have entries).
//!
//! Off the request path: [`Tracer::record`] sends a small record over a bounded channel to
//! a writer thread that formats it into a 1 MiB buffered file. A full channel blocks the
//! connection that submits (backpressure, no lost records). Bounded: the file never grows
//! past `max_bytes`; the line that would cross it is dropped, with it every later one, and
//! one warning line goes to stderr; a write error likewise ends the trace with one warning.
//! [`Tracer::finish`] (called by [`crate::Server::wait`] after the last request completed,
//! also on SIGINT/SIGTERM) writes the `close` lines, flushes and syncs the file.
//!
//! ```text
//! open(cfg):   file exists and not overwrite -> error (nothing the user had is replaced)
//!              create; writer thread; write header
//! record(req): if !stopped: send (arrived, export, command, fua, offset, len)
//! writer:      for each record: lines = add/open if export new; action line; datasync if fua
//!              if written + len(lines) > max_bytes: warn once, stop; else write lines
//! finish:      send End; writer writes close lines (if they fit), flushes, syncs
//! ```

use crate::export::Export;
use crate::proto::transmission::Command;
use crossbeam_channel::{Receiver, Sender};
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use thiserror::Error;

/// The first line of the file.
pub const HEADER: &str = "fio version 3 iolog\n";
/// Default bound on the file's size (`--trace-max-bytes`): 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Accepted `--trace-max-bytes`: 1 KiB ..= 16 TiB.
pub const MAX_BYTES_RANGE: (u64, u64) = (1 << 10, 16 << 40);
/// Records queued for the writer before submitters wait.
const CHANNEL_RECORDS: usize = 1 << 16;
const BUFFER_BYTES: usize = 1 << 20;

/// Where and how much to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    pub path: PathBuf,
    pub max_bytes: u64,
    /// Replace an existing file (otherwise it is refused).
    pub overwrite: bool,
}

impl TraceConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            overwrite: false,
        }
    }

    /// `max_bytes` within [`MAX_BYTES_RANGE`].
    pub fn check(&self) -> Result<(), TraceError> {
        let (lo, hi) = MAX_BYTES_RANGE;
        if !(lo..=hi).contains(&self.max_bytes) {
            return Err(TraceError::MaxBytes(self.max_bytes));
        }
        Ok(())
    }
}

#[derive(Debug, Error)]
pub enum TraceError {
    #[error("--trace {0}: the file exists; give --trace-overwrite to replace it")]
    Exists(String),
    #[error("--trace {path}: {source}")]
    Create { path: String, source: io::Error },
    #[error("--trace-max-bytes {0}: must be in 1k..=16t bytes")]
    MaxBytes(u64),
    #[error("cannot start the trace writer thread: {0}")]
    Thread(io::Error),
}

/// What one served request leaves in the trace.
struct Record {
    arrived: Instant,
    export: Arc<Export>,
    command: Command,
    fua: bool,
    offset_bytes: u64,
    len_bytes: u64,
}

enum Msg {
    Io(Record),
    End,
}

/// The trace of a running server (see the module doc).
pub struct Tracer {
    tx: Sender<Msg>,
    /// The writer stopped (limit reached, write error, finished): records are not sent.
    stopped: Arc<AtomicBool>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Tracer {
    /// Create the file (refusing an existing one unless `overwrite`) and start the writer;
    /// times are counted from `epoch`.
    pub fn open(cfg: &TraceConfig, epoch: Instant) -> Result<Self, TraceError> {
        cfg.check()?;
        let shown = cfg.path.display().to_string();
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true);
        if cfg.overwrite {
            opts.create(true).truncate(true);
        } else {
            opts.create_new(true);
        }
        let file = opts.open(&cfg.path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                TraceError::Exists(shown.clone())
            } else {
                TraceError::Create {
                    path: shown.clone(),
                    source: e,
                }
            }
        })?;
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_RECORDS);
        let stopped = Arc::new(AtomicBool::new(false));
        let mut w = Writer {
            out: BufWriter::with_capacity(BUFFER_BYTES, file),
            path: cfg.path.clone(),
            epoch,
            max_bytes: cfg.max_bytes,
            written_bytes: 0,
            opened: Vec::new(),
            seen: HashSet::new(),
            last_us: 0,
            stopped: stopped.clone(),
            line: String::with_capacity(256),
        };
        let writer = std::thread::Builder::new()
            .name("vmio-trace".into())
            .spawn(move || w.run(rx))
            .map_err(TraceError::Thread)?;
        Ok(Self {
            tx,
            stopped,
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Trace one request (called as it is submitted). `Disc` is not a request.
    pub fn record(
        &self,
        export: &Arc<Export>,
        command: Command,
        fua: bool,
        offset_bytes: u64,
        len_bytes: u64,
        arrived: Instant,
    ) {
        if command == Command::Disc || self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let _ = self.tx.send(Msg::Io(Record {
            arrived,
            export: export.clone(),
            command,
            fua,
            offset_bytes,
            len_bytes,
        }));
    }

    /// Write the close lines, flush and sync; later records are ignored.
    pub fn finish(&self) {
        let Some(h) = crate::limits::lock(&self.writer).take() else {
            return;
        };
        let _ = self.tx.send(Msg::End);
        let _ = h.join();
        self.stopped.store(true, Ordering::Relaxed);
    }
}

struct Writer {
    out: BufWriter<File>,
    path: PathBuf,
    epoch: Instant,
    max_bytes: u64,
    written_bytes: u64,
    /// Names of the exports with an `open` line, in order.
    opened: Vec<String>,
    seen: HashSet<usize>,
    last_us: u64,
    stopped: Arc<AtomicBool>,
    line: String,
}

/// The iolog action of a request.
fn action(command: Command) -> &'static str {
    match command {
        Command::Read => "read",
        Command::Write | Command::WriteZeroes { .. } => "write",
        Command::Trim => "trim",
        Command::Flush | Command::Disc => "sync",
    }
}

/// One request as the trace writes it.
#[derive(Clone, Copy, Debug)]
struct Line {
    t_us: u64,
    command: Command,
    fua: bool,
    offset_bytes: u64,
    len_bytes: u64,
}

/// The lines of one request (appended to `out`): `add`/`open` when `new_export`, the action,
/// and `datasync` after a FUA write or trim. Sync lines carry offset and length 0.
fn format_line(out: &mut String, name: &str, new_export: bool, l: Line) {
    use std::fmt::Write as _;
    let t = l.t_us;
    if new_export {
        let _ = writeln!(out, "{t} {name} add\n{t} {name} open");
    }
    let act = action(l.command);
    let (off, len) = if act == "sync" {
        (0, 0)
    } else {
        (l.offset_bytes, l.len_bytes)
    };
    let _ = writeln!(out, "{t} {name} {act} {off} {len}");
    if l.fua && act != "sync" && act != "read" {
        let _ = writeln!(out, "{t} {name} datasync 0 0");
    }
}

/// An export name as one iolog field.
fn field(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

impl Writer {
    fn run(&mut self, rx: Receiver<Msg>) {
        let mut ok = self.put(HEADER);
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Io(r) if ok => ok = self.io(&r),
                Msg::Io(_) => {}
                Msg::End => break,
            }
        }
        if ok {
            let t = self.last_us;
            let closes: String = self
                .opened
                .iter()
                .map(|n| format!("{t} {n} close\n"))
                .collect();
            self.put(&closes);
        }
        let done = self.out.flush().and_then(|_| self.out.get_ref().sync_all());
        if let Err(e) = done {
            warn(&self.path, &format!("cannot write it ({e})"));
        }
    }

    fn io(&mut self, r: &Record) -> bool {
        let t_us = r.arrived.saturating_duration_since(self.epoch).as_micros() as u64;
        self.last_us = self.last_us.max(t_us);
        let key = Arc::as_ptr(&r.export) as usize;
        let new_export = self.seen.insert(key);
        let name = field(&r.export.name);
        self.line.clear();
        let mut line = std::mem::take(&mut self.line);
        let l = Line {
            t_us,
            command: r.command,
            fua: r.fua,
            offset_bytes: r.offset_bytes,
            len_bytes: r.len_bytes,
        };
        format_line(&mut line, &name, new_export, l);
        let ok = self.put(&line);
        self.line = line;
        if ok && new_export {
            self.opened.push(name);
        }
        ok
    }

    /// Write `text` if it fits under the limit; otherwise (or on an error) warn once and stop.
    fn put(&mut self, text: &str) -> bool {
        let n = text.len() as u64;
        if self.written_bytes + n > self.max_bytes {
            warn(
                &self.path,
                &format!(
                    "reached --trace-max-bytes {}; later requests are not recorded",
                    self.max_bytes
                ),
            );
            self.stopped.store(true, Ordering::Relaxed);
            return false;
        }
        if let Err(e) = self.out.write_all(text.as_bytes()) {
            warn(&self.path, &format!("cannot write it ({e}); tracing stops"));
            self.stopped.store(true, Ordering::Relaxed);
            return false;
        }
        self.written_bytes += n;
        true
    }
}

fn warn(path: &Path, what: &str) {
    eprintln!("vmio-serve: warning: trace {}: {what}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmio_core::request::Op;
    use vmio_core::workload::trace::{parse_trace, TraceFormat};

    fn lines(records: &[(u64, Command, bool, u64, u64)]) -> String {
        let mut s = HEADER.to_string();
        for (i, &(t_us, command, fua, offset_bytes, len_bytes)) in records.iter().enumerate() {
            let l = Line {
                t_us,
                command,
                fua,
                offset_bytes,
                len_bytes,
            };
            format_line(&mut s, "vm1/vda", i == 0, l);
        }
        s
    }

    #[test]
    fn a_fua_write_is_a_write_then_a_datasync_and_a_flush_is_a_sync_with_zero_length() {
        let text = lines(&[
            (5, Command::Write, false, 4096, 8192),
            (9, Command::Flush, false, 0, 0),
            (12, Command::Write, true, 0, 4096),
            (
                20,
                Command::WriteZeroes { no_hole: false },
                false,
                1 << 20,
                65536,
            ),
            (30, Command::Trim, false, 8192, 4096),
            (31, Command::Read, true, 0, 512),
        ]);
        assert_eq!(
            text,
            "fio version 3 iolog\n5 vm1/vda add\n5 vm1/vda open\n5 vm1/vda write 4096 8192\n\
             9 vm1/vda sync 0 0\n12 vm1/vda write 0 4096\n12 vm1/vda datasync 0 0\n\
             20 vm1/vda write 1048576 65536\n30 vm1/vda trim 8192 4096\n31 vm1/vda read 0 512\n"
        );
    }

    #[test]
    fn vmio_reads_the_trace_back_with_microsecond_times_and_both_syncs_as_flushes() {
        let text = lines(&[
            (1500, Command::Write, true, 4096, 4096),
            (2500, Command::Flush, false, 0, 0),
            (4000, Command::Read, false, 0, 4096),
        ]);
        let ios = parse_trace(&text, "t.iolog", TraceFormat::FioIolog).unwrap();
        let got: Vec<(u64, Op, u64, u64)> = ios
            .iter()
            .map(|i| (i.at_ns, i.op, i.offset_bytes, i.len_bytes))
            .collect();
        assert_eq!(
            got,
            [
                (1_500_000, Op::Write, 4096, 4096),
                (1_500_000, Op::Flush, 0, 0),
                (2_500_000, Op::Flush, 0, 0),
                (4_000_000, Op::Read, 0, 4096),
            ]
        );
    }

    #[test]
    fn an_export_name_with_spaces_is_one_field() {
        assert_eq!(field("vm 1/d\tisk"), "vm_1/d_isk");
    }

    #[test]
    fn an_existing_file_is_refused_and_a_tiny_limit_is_out_of_range() {
        let dir = std::env::temp_dir().join(format!("vmio-trace-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.iolog");
        std::fs::write(&p, "precious").unwrap();
        let e = Tracer::open(&TraceConfig::new(&p), Instant::now()).err();
        assert!(matches!(e, Some(TraceError::Exists(_))), "{e:?}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "precious");
        let mut cfg = TraceConfig::new(&p);
        cfg.max_bytes = 100;
        let e = Tracer::open(&cfg, Instant::now()).err();
        assert!(matches!(e, Some(TraceError::MaxBytes(100))), "{e:?}");
        cfg.max_bytes = 1024;
        cfg.overwrite = true;
        let t = Tracer::open(&cfg, Instant::now()).unwrap();
        t.finish();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), HEADER);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
