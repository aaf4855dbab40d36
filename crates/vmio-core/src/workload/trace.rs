//! Block trace replay: parsers for the trace formats people already have, and a [`Replay`]
//! that folds a parsed trace onto a VM disk region with a time scale and a loop count (paced
//! open loop, or closed loop with fio's `replay_no_stall`, by [`super::Paced`]). Pure: the text comes in as a `&str`, nothing reads a file or a clock.
//!
//! Formats (one request per line; blank lines and lines starting with `#` are skipped; a bad
//! line is an error `path:line: <what>; expected <format>`, never a panic):
//!
//! - **SNIA MSR-Cambridge CSV** `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`:
//!   Timestamp in Windows filetime ticks (100 ns), Type `Read`/`Write` (any case), Offset and
//!   Size in bytes. A header line starting with `Timestamp` is skipped. All disks of the file
//!   are kept (they land on the one VM disk).
//! - **UMass/SPC CSV** `ASU,LBA,Size,Opcode,Timestamp[,...]`: LBA in 512-byte sectors, Size in
//!   bytes, Opcode `r`/`R`/`w`/`W`, Timestamp in seconds (decimal). The ASU is ignored: all
//!   ASUs share the VM disk's address space.
//! - **blkparse default text** `maj,min cpu seq seconds pid action RWBS [sector + count]
//!   [process]`: the `Q` (queued) events are kept, i.e. what the guest submitted before any
//!   merging (vmio's scheduler does its own merging); a trace without any `Q` event (captured
//!   with `-a issue`) falls back to its `D` (issued) events. Sector and count are 512-byte
//!   units. RWBS: a leading `F` is a preflush -> `Flush`; then `D` (discard) -> `Trim`, `W` ->
//!   `Write`, `R` -> `Read`; other events (`N`, no data) are dropped. Other actions (G, I, M,
//!   C, P, U, m, ...) are skipped; the per-CPU summary blkparse prints at the end (`CPU0
//!   (8,0):`, `Total (8,0):`) ends the event list.
//! - **fio iolog v2** (`fio version 2 iolog`, then `filename add|open|close` and `filename
//!   read|write|sync|datasync|trim|wait offset length`): no timestamps, so every request is at
//!   0 (closed loop), except that `wait` advances the clock by `offset` microseconds (fio's
//!   meaning), so a log with waits is replayed open loop.
//! - **fio iolog v3** (`fio version 3 iolog`, lines prefixed by a timestamp in microseconds
//!   since the start: `us filename action [offset length]`). Microseconds are fio's unit: its
//!   `iolog.c` writes `utime_since_now(&td->io_log_start_time)` (`log_io_u`, `log_file`) and
//!   `read_iolog2` hands the difference of two timestamps to `iolog_delay`, which waits that
//!   many microseconds (checked with fio 3.33: `--write_iolog` with `thinktime=2000` writes
//!   timestamps about 2060 apart).
//!
//! In both iologs the file name is ignored (every file lands on the VM disk); `sync` and
//! `datasync` become `Flush`, `trim` becomes `Trim`.
//!
//! ```text
//! Replay::new(ios, region, scale, loops):
//!   stable-sort ios by at_ns; subtract the first at_ns (the trace starts at 0)
//!   period = span + span / (n - 1)          (the next loop starts one mean gap after the end)
//! next:  io = ios[i] of loop k (k < loops), t = at_ns + k * period
//!        at_ns  = round(t * scale)           (scale 2.0 = twice as slow)
//!        offset = (offset % region) rounded down to 4 KiB
//!        len    = min(len, region - offset)  (never crosses the region end)
//! ```

use super::kinds::{self, KindEntry};
use crate::request::Op;
use crate::units::quote;
use crate::Ns;
use thiserror::Error;

/// One request of a trace or personality: when it is issued (relative to the start; 0 for
/// closed-loop sources) and what it asks for. `Flush` has offset and length 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedIo {
    pub at_ns: Ns,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// A trace format; its name, help and parser are its entry of `FORMATS` (same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Msr,
    Spc,
    Blkparse,
    FioIolog,
}

const MSR_FORMAT: &str = "'Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime' (SNIA MSR-Cambridge: Timestamp in 100 ns ticks, Type Read|Write, Offset and Size in bytes)";
const SPC_FORMAT: &str = "'ASU,LBA,Size,Opcode,Timestamp' (UMass/SPC: LBA in 512-byte sectors, Size in bytes, Opcode r|R|w|W, Timestamp in seconds)";
const BLKPARSE_FORMAT: &str =
    "blkparse default output 'maj,min cpu seq seconds pid action RWBS sector + count [process]'";
const IOLOG_HEADER: &str = "a first line 'fio version 2 iolog' or 'fio version 3 iolog'";
const IOLOG2_FORMAT: &str = "fio iolog v2 'filename add|open|close' or 'filename read|write|sync|datasync|trim|wait offset length'";
const IOLOG3_FORMAT: &str = "fio iolog v3 'microseconds filename add|open|close' or 'microseconds filename read|write|sync|datasync|trim offset length'";

/// A trace that cannot be read or replayed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TraceError {
    #[error("{path}:{line}: {what}; expected {expected}")]
    BadLine {
        path: String,
        line: usize,
        what: String,
        expected: &'static str,
    },
    #[error("'{0}' is not a trace format; accepted: {accepted}", accepted = kinds::accepted(FORMATS))]
    UnknownFormat(String),
    #[error("replay {what} is {value}; accepted: {accepted}")]
    BadReplay {
        what: &'static str,
        value: String,
        accepted: &'static str,
    },
}

/// A trace parser: the whole text and the path its errors name.
pub(super) type Parser = fn(&str, &str) -> Result<Vec<TimedIo>, TraceError>;

/// The trace formats vmio reads, in [`TraceFormat`]'s order.
pub(super) const FORMATS: &[KindEntry<TraceFormat, Parser>] = &[
    KindEntry {
        kind: TraceFormat::Msr,
        name: "msr",
        aliases: &[],
        quiet_aliases: &["msr-cambridge", "snia-msr"],
        help: "MSR-Cambridge CSV Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime (SNIA IOTTA repository)",
        params: parse_msr,
    },
    KindEntry {
        kind: TraceFormat::Spc,
        name: "spc",
        aliases: &["umass"],
        quiet_aliases: &["umass-spc"],
        help: "SPC CSV ASU,LBA,Size,Opcode,Timestamp (UMass Trace Repository: Financial, WebSearch)",
        params: parse_spc,
    },
    KindEntry {
        kind: TraceFormat::Blkparse,
        name: "blkparse",
        aliases: &[],
        quiet_aliases: &["blktrace"],
        help: "blkparse(1) default text output of a blktrace capture (Q events, else D)",
        params: parse_blkparse,
    },
    KindEntry {
        kind: TraceFormat::FioIolog,
        name: "fio-iolog",
        aliases: &["iolog"],
        quiet_aliases: &["fio", "fio_iolog", "fioiolog"],
        help: "fio's iolog v2 or v3 (write_iolog; v3 with microsecond timestamps)",
        params: parse_iolog,
    },
];

impl TraceFormat {
    /// The format named `name` (case-insensitive): a name or alias of `FORMATS`.
    pub fn parse(name: &str) -> Result<Self, TraceError> {
        kinds::find(FORMATS, name)
            .map(|e| e.kind)
            .ok_or_else(|| TraceError::UnknownFormat(quote(name)))
    }

    fn entry(self) -> &'static KindEntry<Self, Parser> {
        &FORMATS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// Guess the format from the first lines of a trace (the first non-empty, non-comment
    /// line decides; an MSR header line is recognized).
    pub fn detect(first_lines: &str) -> Option<Self> {
        let line = first_lines
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))?;
        if line.starts_with("fio version 2 iolog") || line.starts_with("fio version 3 iolog") {
            return Some(Self::FioIolog);
        }
        if line.to_ascii_lowercase().starts_with("timestamp,hostname") {
            return Some(Self::Msr);
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() == 7 && fields[0].parse::<u64>().is_ok() {
            let ty = fields[3].to_ascii_lowercase();
            if ty == "read" || ty == "write" {
                return Some(Self::Msr);
            }
        }
        if fields.len() >= 5
            && fields[0].parse::<u64>().is_ok()
            && fields[1].parse::<u64>().is_ok()
            && matches!(fields[3], "r" | "R" | "w" | "W")
        {
            return Some(Self::Spc);
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.len() >= 7 && is_dev(tokens[0]) && parse_decimal_ns(tokens[3], 1).is_some() {
            return Some(Self::Blkparse);
        }
        None
    }
}

fn is_dev(s: &str) -> bool {
    match s.split_once(',') {
        Some((a, b)) => a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok(),
        None => false,
    }
}

/// A non-negative decimal number (`12`, `0.551706`, `1.5e3`) times `unit_ns`, in ns. Exact
/// for plain decimals (digits beyond 1 ns are truncated); `None` if malformed or too large.
fn parse_decimal_ns(s: &str, unit_ns: u64) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if s.contains(['e', 'E']) {
        let v: f64 = s.parse().ok()?;
        let ns = v * unit_ns as f64;
        return (ns.is_finite() && ns >= 0.0 && ns < u64::MAX as f64).then(|| ns.round() as u64);
    }
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut ns = whole.checked_mul(unit_ns)?;
    // Fractional digits: unit_ns / 10^k per digit, while that is at least 1 ns.
    let mut place = unit_ns;
    for b in frac.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        ns = ns.checked_add(u64::from(b - b'0') * place)?;
    }
    Some(ns)
}

struct LineErr<'a> {
    path: &'a str,
    expected: &'static str,
}

impl LineErr<'_> {
    fn at(&self, line: usize, what: impl Into<String>) -> TraceError {
        TraceError::BadLine {
            path: self.path.to_string(),
            line,
            what: what.into(),
            expected: self.expected,
        }
    }
}

fn field_u64(e: &LineErr, line: usize, name: &str, text: &str) -> Result<u64, TraceError> {
    text.trim().parse::<u64>().map_err(|_| {
        e.at(
            line,
            format!(
                "{name} '{}' is not a non-negative integer",
                quote(text.trim())
            ),
        )
    })
}

fn data_len(e: &LineErr, line: usize, name: &str, text: &str) -> Result<u64, TraceError> {
    let v = field_u64(e, line, name, text)?;
    if v == 0 {
        return Err(e.at(line, format!("{name} is 0 for a read or write")));
    }
    Ok(v)
}

/// Parse a whole trace. `path` is only used in error messages.
pub fn parse_trace(
    text: &str,
    path: &str,
    format: TraceFormat,
) -> Result<Vec<TimedIo>, TraceError> {
    (format.entry().params)(text, path)
}

/// Numbered lines that carry content (1-based line numbers).
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn parse_msr(text: &str, path: &str) -> Result<Vec<TimedIo>, TraceError> {
    let e = LineErr {
        path,
        expected: MSR_FORMAT,
    };
    let mut out = Vec::new();
    let mut first = true;
    for (n, line) in content_lines(text) {
        if std::mem::take(&mut first) && line.to_ascii_lowercase().starts_with("timestamp") {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 7 {
            return Err(e.at(n, format!("{} comma-separated fields", f.len())));
        }
        let ticks = field_u64(&e, n, "Timestamp", f[0])?;
        let at_ns = ticks
            .checked_mul(100)
            .ok_or_else(|| e.at(n, format!("Timestamp {ticks} is too large")))?;
        let op = match f[3].trim().to_ascii_lowercase().as_str() {
            "read" => Op::Read,
            "write" => Op::Write,
            other => return Err(e.at(n, format!("Type '{}' is not Read or Write", quote(other)))),
        };
        let offset_bytes = field_u64(&e, n, "Offset", f[4])?;
        let len_bytes = data_len(&e, n, "Size", f[5])?;
        out.push(TimedIo {
            at_ns,
            op,
            offset_bytes,
            len_bytes,
        });
    }
    Ok(out)
}

fn parse_spc(text: &str, path: &str) -> Result<Vec<TimedIo>, TraceError> {
    let e = LineErr {
        path,
        expected: SPC_FORMAT,
    };
    let mut out = Vec::new();
    for (n, line) in content_lines(text) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 5 {
            return Err(e.at(n, format!("{} comma-separated fields", f.len())));
        }
        field_u64(&e, n, "ASU", f[0])?;
        let lba = field_u64(&e, n, "LBA", f[1])?;
        let offset_bytes = lba
            .checked_mul(512)
            .ok_or_else(|| e.at(n, format!("LBA {lba} is too large")))?;
        let len_bytes = data_len(&e, n, "Size", f[2])?;
        let op = match f[3].trim() {
            "r" | "R" => Op::Read,
            "w" | "W" => Op::Write,
            other => return Err(e.at(n, format!("Opcode '{}' is not r, R, w or W", quote(other)))),
        };
        let at_ns = parse_decimal_ns(f[4], crate::SEC).ok_or_else(|| {
            e.at(
                n,
                format!(
                    "Timestamp '{}' is not a non-negative number of seconds",
                    quote(f[4].trim())
                ),
            )
        })?;
        out.push(TimedIo {
            at_ns,
            op,
            offset_bytes,
            len_bytes,
        });
    }
    Ok(out)
}

fn parse_blkparse(text: &str, path: &str) -> Result<Vec<TimedIo>, TraceError> {
    let e = LineErr {
        path,
        expected: BLKPARSE_FORMAT,
    };
    let mut queued = Vec::new();
    let mut issued = Vec::new();
    for (n, line) in content_lines(text) {
        let t: Vec<&str> = line.split_whitespace().collect();
        // The summary blkparse prints after the events.
        if t[0] == "Total"
            || (t[0].starts_with("CPU") && t.get(1).is_some_and(|s| s.starts_with('(')))
        {
            break;
        }
        if t.len() < 6 {
            return Err(e.at(n, format!("{} fields", t.len())));
        }
        if !is_dev(t[0]) {
            return Err(e.at(n, format!("device '{}' is not maj,min", quote(t[0]))));
        }
        let action = t[5];
        let list = match action {
            "Q" => &mut queued,
            "D" => &mut issued,
            _ => continue,
        };
        let at_ns = parse_decimal_ns(t[3], crate::SEC).ok_or_else(|| {
            e.at(
                n,
                format!(
                    "time '{}' is not a non-negative number of seconds",
                    quote(t[3])
                ),
            )
        })?;
        let rwbs = *t
            .get(6)
            .ok_or_else(|| e.at(n, format!("no RWBS field after action {}", quote(action))))?;
        if rwbs.is_empty() || !rwbs.bytes().all(|b| b"FWRDNSAMEBT".contains(&b)) {
            return Err(e.at(
                n,
                format!(
                    "RWBS '{}' has letters outside F, W, R, D, N, S, A, M, E, B, T",
                    quote(rwbs)
                ),
            ));
        }
        // Sector and count, when present: `sector + count`.
        let range = match t.get(7) {
            Some(s) if !s.starts_with('[') && !s.starts_with('(') => {
                let sector = field_u64(&e, n, "sector", s)?;
                if t.get(8) != Some(&"+") {
                    return Err(e.at(n, "sector not followed by '+ count'"));
                }
                let count = field_u64(&e, n, "count", t.get(9).copied().unwrap_or(""))?;
                let (off, len) = sector
                    .checked_mul(512)
                    .zip(count.checked_mul(512))
                    .ok_or_else(|| e.at(n, "sector or count is too large"))?;
                Some((off, len))
            }
            _ => None,
        };
        let mut flags = rwbs.bytes();
        let preflush = rwbs.starts_with('F');
        if preflush {
            flags.next();
        }
        let data_op = match flags.next() {
            Some(b'D') => Some(Op::Trim),
            Some(b'W') => Some(Op::Write),
            Some(b'R') => Some(Op::Read),
            _ => None,
        };
        if preflush {
            list.push(TimedIo {
                at_ns,
                op: Op::Flush,
                offset_bytes: 0,
                len_bytes: 0,
            });
        }
        if let (Some(op), Some((offset_bytes, len_bytes))) = (data_op, range) {
            if len_bytes > 0 {
                list.push(TimedIo {
                    at_ns,
                    op,
                    offset_bytes,
                    len_bytes,
                });
            }
        }
    }
    Ok(if queued.is_empty() { issued } else { queued })
}

fn parse_iolog(text: &str, path: &str) -> Result<Vec<TimedIo>, TraceError> {
    let mut lines = content_lines(text);
    let header_err = |line: usize, what: String| TraceError::BadLine {
        path: path.to_string(),
        line,
        what,
        expected: IOLOG_HEADER,
    };
    let (hn, header) = lines
        .next()
        .ok_or_else(|| header_err(1, "the log is empty".into()))?;
    let v3 = match header {
        "fio version 2 iolog" => false,
        "fio version 3 iolog" => true,
        other => return Err(header_err(hn, format!("header '{}'", quote(other)))),
    };
    let e = LineErr {
        path,
        expected: if v3 { IOLOG3_FORMAT } else { IOLOG2_FORMAT },
    };
    let mut out = Vec::new();
    let mut clock_ns: Ns = 0;
    for (n, line) in lines {
        let mut t: Vec<&str> = line.split_whitespace().collect();
        if v3 {
            let ts = t.first().copied().unwrap_or("");
            clock_ns = parse_decimal_ns(ts, crate::US).ok_or_else(|| {
                e.at(
                    n,
                    format!(
                        "timestamp '{}' is not a non-negative number of microseconds",
                        quote(ts)
                    ),
                )
            })?;
            t.remove(0);
        }
        match t.len() {
            2 => match t[1] {
                "add" | "open" | "close" => continue,
                other => return Err(e.at(n, format!("file action '{}'", quote(other)))),
            },
            4 => {}
            k => {
                let after = if v3 { " after the timestamp" } else { "" };
                return Err(e.at(n, format!("{k} fields{after}")));
            }
        }
        let offset = field_u64(&e, n, "offset", t[2])?;
        let len = field_u64(&e, n, "length", t[3])?;
        let op = match t[1] {
            "read" => Op::Read,
            "write" => Op::Write,
            "trim" => Op::Trim,
            "sync" | "datasync" => Op::Flush,
            "wait" if !v3 => {
                clock_ns = offset
                    .checked_mul(crate::US)
                    .and_then(|w| clock_ns.checked_add(w))
                    .ok_or_else(|| e.at(n, format!("wait {offset} us is too large")))?;
                continue;
            }
            other => return Err(e.at(n, format!("action '{}'", quote(other)))),
        };
        let (offset_bytes, len_bytes) = if op == Op::Flush {
            (0, 0)
        } else {
            if len == 0 {
                return Err(e.at(n, "length is 0 for a read, write or trim"));
            }
            (offset, len)
        };
        out.push(TimedIo {
            at_ns: clock_ns,
            op,
            offset_bytes,
            len_bytes,
        });
    }
    Ok(out)
}

/// A parsed trace replayed onto a VM disk region of `region_bytes`. See the module doc.
#[derive(Clone, Debug)]
pub struct Replay {
    ios: Vec<TimedIo>,
    region_bytes: u64,
    time_scale: f64,
    loops: u32,
    period_ns: Ns,
    next_index: usize,
    loop_index: u32,
}

impl Replay {
    /// Like [`Replay::try_new`], for values already checked: a `region_bytes` of 0 is taken
    /// as 1 and a `time_scale` that is negative or NaN as 0 (everything at time 0, i.e. as
    /// fast as the engine can issue).
    pub fn new(ios: Vec<TimedIo>, region_bytes: u64, time_scale: f64, loops: u32) -> Self {
        let time_scale = if time_scale >= 0.0 { time_scale } else { 0.0 };
        Self::build(ios, region_bytes.max(1), time_scale, loops)
    }

    /// A replay of `ios` (`loops` times) onto `[0, region_bytes)` with times multiplied by
    /// `time_scale` (0 = all at once; 2.0 = twice as slow).
    pub fn try_new(
        ios: Vec<TimedIo>,
        region_bytes: u64,
        time_scale: f64,
        loops: u32,
    ) -> Result<Self, TraceError> {
        if region_bytes == 0 {
            return Err(TraceError::BadReplay {
                what: "region_bytes",
                value: "0".into(),
                accepted: "a region of at least 1 byte",
            });
        }
        if !(time_scale.is_finite() && time_scale >= 0.0) {
            return Err(TraceError::BadReplay {
                what: "time_scale",
                value: format!("{time_scale:e}"),
                accepted: "a finite number >= 0 (1.0 = as recorded, 2.0 = twice as slow)",
            });
        }
        Ok(Self::build(ios, region_bytes, time_scale, loops))
    }

    fn build(mut ios: Vec<TimedIo>, region_bytes: u64, time_scale: f64, loops: u32) -> Self {
        ios.sort_by_key(|io| io.at_ns);
        let start = ios.first().map_or(0, |io| io.at_ns);
        for io in &mut ios {
            io.at_ns -= start;
        }
        let span = ios.last().map_or(0, |io| io.at_ns);
        let period_ns = if ios.len() > 1 {
            span.saturating_add(span / (ios.len() as u64 - 1))
        } else {
            0
        };
        Self {
            ios,
            region_bytes,
            time_scale,
            loops,
            period_ns,
            next_index: 0,
            loop_index: 0,
        }
    }

    /// Requests in one pass of the trace.
    pub fn len(&self) -> usize {
        self.ios.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ios.is_empty()
    }

    /// The next request, folded into the region, or `None` after the last loop.
    // Not an Iterator on purpose: same call shape as the other workload sources.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<TimedIo> {
        if self.loop_index >= self.loops || self.ios.is_empty() {
            return None;
        }
        let io = self.ios[self.next_index];
        let t = io
            .at_ns
            .saturating_add(self.period_ns.saturating_mul(u64::from(self.loop_index)));
        self.next_index += 1;
        if self.next_index == self.ios.len() {
            self.next_index = 0;
            self.loop_index += 1;
        }
        let at_ns = if self.time_scale == 1.0 {
            t
        } else {
            // `as` saturates: times beyond u64 ns stay at u64::MAX.
            (t as f64 * self.time_scale).round() as u64
        };
        Some(fold(TimedIo { at_ns, ..io }, self.region_bytes))
    }
}

impl super::IoStream for Replay {
    fn next_io(&mut self) -> Option<TimedIo> {
        self.next()
    }
}

/// Fold a request into `[0, region_bytes)`: offset modulo the region, rounded down to 4 KiB,
/// length clipped at the region end. Flushes are left as they are.
pub fn fold(io: TimedIo, region_bytes: u64) -> TimedIo {
    if io.op == Op::Flush {
        return io;
    }
    let offset_bytes = (io.offset_bytes % region_bytes) & !4095;
    TimedIo {
        offset_bytes,
        len_bytes: io.len_bytes.min(region_bytes - offset_bytes),
        ..io
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rng::Rng;

    pub(crate) fn io(at_ns: Ns, op: Op, offset_bytes: u64, len_bytes: u64) -> TimedIo {
        TimedIo {
            at_ns,
            op,
            offset_bytes,
            len_bytes,
        }
    }

    #[test]
    fn msr_csv_is_read_with_filetime_ticks_and_byte_offsets() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    128166372003061629,hm,1,Read,3154152448,4096,6152\n\
                    128166372016382155,hm,1,write,5,512,2000\n";
        let ios = parse_trace(text, "hm_1.csv", TraceFormat::Msr).unwrap();
        assert_eq!(
            ios,
            vec![
                io(12816637200306162900, Op::Read, 3154152448, 4096),
                io(12816637201638215500, Op::Write, 5, 512),
            ]
        );
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::Msr));
        assert_eq!(TraceFormat::detect(&text[61..]), Some(TraceFormat::Msr));
    }

    #[test]
    fn spc_csv_is_read_with_sectors_and_seconds() {
        let text = "0,20941264,8192,W,0.551706\n1,3,512,r,1.000000001,extra\n";
        let ios = parse_trace(text, "Financial1.spc", TraceFormat::Spc).unwrap();
        assert_eq!(
            ios,
            vec![
                io(551_706_000, Op::Write, 20941264 * 512, 8192),
                io(1_000_000_001, Op::Read, 1536, 512),
            ]
        );
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::Spc));
    }

    #[test]
    fn blkparse_keeps_queue_events_and_maps_rwbs() {
        let text = "  8,0    3        1     0.000000000   697  Q   R 223490 + 8 [kjournald]\n\
                    8,0    3        2     0.000001000   697  G   R 223490 + 8 [kjournald]\n\
                    8,0    3        3     0.000002000   697  D   R 223490 + 8 [kjournald]\n\
                    8,0    1        4     0.250000000   700  Q  WS 1000 + 16 [jbd2]\n\
                    8,0    1        5     0.300000000   700  Q FWS [jbd2]\n\
                    8,0    1        6     0.400000000   700  m   N cfq700 insert_request\n\
                    8,0    1        7     0.500000000   700  Q   D 64 + 2048 [fstrim]\n\
                    CPU0 (8,0):\n Reads Queued: 1, 4KiB\n";
        let ios = parse_trace(text, "sda.txt", TraceFormat::Blkparse).unwrap();
        assert_eq!(
            ios,
            vec![
                io(0, Op::Read, 223490 * 512, 4096),
                io(250_000_000, Op::Write, 512_000, 8192),
                io(300_000_000, Op::Flush, 0, 0),
                io(500_000_000, Op::Trim, 32768, 1 << 20),
            ]
        );
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::Blkparse));
    }

    #[test]
    fn blkparse_without_queue_events_falls_back_to_issue_events() {
        let text = "8,16 0 1 1.5 10 D W 8 + 8 [kworker]\n8,16 0 2 1.6 10 C W 8 + 8 [0]\n";
        let ios = parse_trace(text, "sdb.txt", TraceFormat::Blkparse).unwrap();
        assert_eq!(ios, vec![io(1_500_000_000, Op::Write, 4096, 4096)]);
    }

    #[test]
    fn fio_iolog_v2_is_closed_loop_except_for_waits() {
        let text = "fio version 2 iolog\n/dev/vdb add\n/dev/vdb open\n\
                    /dev/vdb write 0 4096\n/dev/vdb read 8192 16384\n/dev/vdb sync 0 0\n\
                    /dev/vdb wait 1500 0\n/dev/vdb trim 4096 4096\n/dev/vdb close\n";
        let ios = parse_trace(text, "job.log", TraceFormat::FioIolog).unwrap();
        assert_eq!(
            ios,
            vec![
                io(0, Op::Write, 0, 4096),
                io(0, Op::Read, 8192, 16384),
                io(0, Op::Flush, 0, 0),
                io(1_500_000, Op::Trim, 4096, 4096),
            ]
        );
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::FioIolog));
    }

    #[test]
    fn fio_iolog_v3_timestamps_are_microseconds_as_fio_writes_them() {
        let text = "fio version 3 iolog\n0 /dev/vdb add\n1 /dev/vdb open\n\
                    2 /dev/vdb write 4096 4096\n2060 /dev/vdb read 0 512\n2061 /dev/vdb close\n";
        let ios = parse_trace(text, "job.log", TraceFormat::FioIolog).unwrap();
        assert_eq!(
            ios,
            vec![
                io(2_000, Op::Write, 4096, 4096),
                io(2_060_000, Op::Read, 0, 512)
            ]
        );
    }

    #[test]
    fn malformed_lines_are_reported_with_file_and_line() {
        let cases = [
            (
                TraceFormat::Msr,
                "1,h,0,Read,0,4096,1\n2,h,0,Erase,0,4096,1\n",
                "t.csv:2: Type 'erase'",
            ),
            (
                TraceFormat::Msr,
                "1,h,0,Read,0,4096\n",
                "t.csv:1: 6 comma-separated fields",
            ),
            (
                TraceFormat::Spc,
                "0,1,512,w,0.1\n\n0,x,512,w,0.2\n",
                "t.csv:3: LBA 'x'",
            ),
            (
                TraceFormat::Spc,
                "0,1,512,w,-1\n",
                "t.csv:1: Timestamp '-1'",
            ),
            (
                TraceFormat::Blkparse,
                "8,0 0 1 0.1 5 Q R 8 - 8 [x]\n",
                "t.csv:1: sector not followed",
            ),
            (
                TraceFormat::Blkparse,
                "sda 0 1 0.1 5 Q R 8 + 8 [x]\n",
                "t.csv:1: device 'sda'",
            ),
            (
                TraceFormat::FioIolog,
                "fio version 9 iolog\n",
                "t.csv:1: header",
            ),
            (
                TraceFormat::FioIolog,
                "fio version 2 iolog\nf write 0\n",
                "t.csv:2: 3 fields",
            ),
            (
                TraceFormat::FioIolog,
                "fio version 3 iolog\nx f write 0 1\n",
                "t.csv:2: timestamp 'x'",
            ),
        ];
        for (format, text, want) in cases {
            let err = parse_trace(text, "t.csv", format).unwrap_err().to_string();
            assert!(
                err.starts_with(want),
                "{format:?}: got '{err}', want '{want}...'"
            );
            assert!(err.contains("; expected "), "{err}");
        }
        assert!(matches!(
            TraceFormat::parse("csv"),
            Err(TraceError::UnknownFormat(_))
        ));
        assert_eq!(TraceFormat::parse("UMass").unwrap(), TraceFormat::Spc);
        // Every iolog_format the fio job parser accepts names a format (`fio` did not).
        for v in ["msr", "spc", "blkparse", "fio"] {
            assert!(TraceFormat::parse(v).is_ok(), "iolog_format={v}");
        }
        assert_eq!(TraceFormat::parse("fio").unwrap(), TraceFormat::FioIolog);
    }

    #[test]
    fn every_format_is_the_entry_at_its_index_and_an_unknown_name_lists_the_registry() {
        for (i, e) in FORMATS.iter().enumerate() {
            assert_eq!(e.kind as usize, i);
            assert_eq!(TraceFormat::parse(e.name).unwrap(), e.kind);
            for a in e.aliases.iter().chain(e.quiet_aliases) {
                assert_eq!(TraceFormat::parse(a).unwrap(), e.kind, "{a}");
            }
        }
        assert_eq!(
            TraceFormat::parse("csv").unwrap_err().to_string(),
            "'csv' is not a trace format; accepted: msr, spc (umass), blkparse, fio-iolog (iolog)"
        );
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = Rng::derive(1, "garbage");
        let alphabet = b"0123456789,.+ -eERWDFQSrwx[]\n\t8,fio version 2 3 iolog read write wait";
        let formats = [
            TraceFormat::Msr,
            TraceFormat::Spc,
            TraceFormat::Blkparse,
            TraceFormat::FioIolog,
        ];
        for round in 0..3000 {
            let len = rng.below(200) as usize;
            let mut text: String = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char)
                .collect();
            if round % 3 == 0 {
                text.insert_str(0, "fio version 3 iolog\n");
            }
            if round % 7 == 0 {
                text.push_str("\u{00e9}\u{1F600},\0");
            }
            let _ = TraceFormat::detect(&text);
            for f in formats {
                if let Ok(ios) = parse_trace(&text, "g", f) {
                    let mut r = Replay::new(ios, 1 + rng.below(1 << 20), rng.unit() * 3.0, 2);
                    while r.next().is_some() {}
                }
            }
        }
    }

    #[test]
    fn folding_keeps_every_request_inside_the_region() {
        let region = 10 * 4096 + 100;
        let ios: Vec<TimedIo> = (0..1000u64)
            .map(|i| io(i, Op::Write, i * 7919 * 513, 1 + (i * 977) % (1 << 20)))
            .collect();
        let mut r = Replay::new(ios, region, 1.0, 1);
        let mut n = 0;
        while let Some(x) = r.next() {
            assert_eq!(x.offset_bytes % 4096, 0);
            assert!(
                x.len_bytes > 0 && x.offset_bytes + x.len_bytes <= region,
                "{x:?}"
            );
            n += 1;
        }
        assert_eq!(n, 1000);
        let f = fold(io(0, Op::Read, region + 5000, 8192), region);
        assert_eq!((f.offset_bytes, f.len_bytes), (4096, 8192));
        let f = fold(io(0, Op::Read, region - 1, 8192), region);
        assert_eq!((f.offset_bytes, f.len_bytes), (40960, 100));
    }

    #[test]
    fn time_scale_and_loops_stretch_and_repeat_the_trace() {
        // First timestamp normalised to 0; three requests 10 ms apart -> period 30 ms.
        let ios = vec![
            io(1_010_000_000, Op::Read, 0, 4096),
            io(1_000_000_000, Op::Write, 4096, 4096),
            io(1_020_000_000, Op::Read, 8192, 4096),
        ];
        let mut r = Replay::try_new(ios.clone(), 1 << 20, 2.0, 2).unwrap();
        assert_eq!(r.len(), 3);
        let got: Vec<(Ns, Op)> = std::iter::from_fn(|| r.next())
            .map(|x| (x.at_ns, x.op))
            .collect();
        let ms = crate::MS;
        assert_eq!(
            got,
            vec![
                (0, Op::Write),
                (20 * ms, Op::Read),
                (40 * ms, Op::Read),
                (60 * ms, Op::Write),
                (80 * ms, Op::Read),
                (100 * ms, Op::Read),
            ]
        );
        let mut once = Replay::new(ios.clone(), 1 << 20, 1.0, 0);
        assert_eq!(once.next(), None);
        let mut fast = Replay::new(ios.clone(), 1 << 20, 0.0, 1);
        assert!(std::iter::from_fn(|| fast.next()).all(|x| x.at_ns == 0));
        assert!(Replay::try_new(ios.clone(), 1 << 20, f64::NAN, 1).is_err());
        assert!(Replay::try_new(ios, 0, 1.0, 1).is_err());
    }

    #[test]
    fn decimal_times_are_exact() {
        assert_eq!(parse_decimal_ns("0.551706", crate::SEC), Some(551_706_000));
        assert_eq!(parse_decimal_ns("12", crate::MS), Some(12_000_000));
        assert_eq!(parse_decimal_ns(".5", crate::SEC), Some(500_000_000));
        assert_eq!(
            parse_decimal_ns("1.0000000019", crate::SEC),
            Some(1_000_000_001)
        );
        assert_eq!(parse_decimal_ns("1e3", crate::MS), Some(1_000_000_000));
        assert_eq!(parse_decimal_ns(".", crate::SEC), None);
        assert_eq!(parse_decimal_ns("-1", crate::SEC), None);
        assert_eq!(parse_decimal_ns("99999999999999999999", 1), None);
    }
}
