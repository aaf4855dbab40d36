//! PDC, Pollution-Defensive Caching (S3; Lee, Bahn, Jeong et al., "Reducing journaling harm
//! on virtualized I/O systems", SYSTOR 2016): the host detects, without changing the guest,
//! the writes of the guest filesystem's journal and keeps them out of the host page cache.
//! Journal blocks are written once and never reread (unless the guest crashes), come in long
//! sequential runs that evict useful cached data, and come with syncs that defeat the host's
//! write buffering.
//!
//! Two parts, both used by both engines:
//! - [`JournalDetector`]: one per VM disk (one host file) with `cache = "pdc"`; it sees the
//!   disk's writes and FLUSHes in arrival order and answers, per write, [`Verdict::Bypass`]
//!   (a predicted journal write) or [`Verdict::Cache`];
//! - [`Pdc`]: the simulator's [`HostCache`], a filter over the Linux page cache
//!   ([`super::linux`]) that overrides only the writes the detector bypasses and passes
//!   everything else through (nbdkit's filters are the model). `vmio serve` uses the detector
//!   directly and does the bypass with O_DIRECT and `posix_fadvise` hints.
//!
//! ## The detector's rule
//!
//! S3: ext4 divides the disk into 128 MiB block groups and puts the journal in one of them;
//! PDC remembers, per 128 MiB group, the most recently accessed address, and predicts as the
//! journal the group accessed sequentially over and over (a circular log). The first pass
//! over the journal is missed; afterwards the detected range matches the real journal.
//! vmio keeps that rule and states what the paper leaves open:
//!
//! ```text
//! parameters ([pdc] table, PARAMS): group 128 MiB, streams 4 per group, min_pass 1 MiB,
//!   min_syncs 2, window 1 MiB, max_misses 4, max_journal 1 GiB, journals 4 per disk
//!
//! stream  = {start, next, bytes, syncs, wraps}: a run of writes each starting where the
//!           previous ended (next); filed under the group of `next`; a group keeps its
//!           `streams` most recently extended streams (the paper's "most recent address",
//!           several per group so that data writes in the journal's group do not break the
//!           log's run, and passes are the last to give way); `wraps`: the `next` of a
//!           pass this stream may have wrapped from
//! pass    = a stream with bytes ≥ min_pass and syncs ≥ min_syncs; it may wrap to o when
//!           o − window ≤ S.start < o + group and S.next − o ≤ max_journal
//! journal = {lo, hi, cursor, restart, misses, uncommitted}: a predicted journal [lo, hi),
//!           where its next write is expected (or, after a stray, may be), and what
//!           reached it since its last commit
//! commit  = a write that is the first after a FLUSH
//!
//! on_flush():            after_flush = true
//! on_write(now, o, len): a = after_flush; after_flush = false
//!   1. o in a journal J's [lo, hi):
//!        J.cursor = o + len; J.restart = the cursor before unless at the head
//!        (a write away from the head — a wrap, a stray — may be a lone one: the journal
//!        superblock's, right below the log; the head may still be where it was)
//!        at the head   (|o − cursor| ≤ window, or |o − restart| ≤ window, before)
//!        or wrapped    (cursor ≥ hi − window and o < lo + window, before):
//!          o + len > hi: hi = o + len (Grown);
//!          a: misses = uncommitted = 0, else uncommitted += len;
//!          uncommitted ≤ hi − lo                                                → Bypass
//!          else J is dropped (a whole journal's bytes without a commit: data written
//!          sequentially over a moved journal's old range)                        → Cache
//!        else a stray write (a journal restarted elsewhere in its range continues from
//!          there): J.misses += 1; misses = max_misses: J is dropped (a reformat moved the
//!          journal, the range now holds data)                                     → Cache
//!   2. a stream W of group(o) has W.next = o: W extends (bytes += len, syncs += a,
//!        next = o + len, refiled under group(next): a journal spanning two groups stays one
//!        stream); if a, and W.wraps = n, and a pass S still has S.next = n and may wrap to
//!        W.start (S was not extended since W's previous write: the log did come back):
//!        predict the journal [W.start, max(n, o + len)), cursor o + len; S and W forgotten
//!        (predictions the range overlaps, then the oldest when `journals` are predicted,
//!        give way)                                                                → Bypass
//!        else, W not a pass: W.wraps = the `next` of the most recently extended pass that
//!        may wrap to W.start, if any (a run begun long ago — a journal superblock write
//!        right below the log — may be where the log comes back)                   → Cache
//!   3. else a new stream {o, o + len, len, a, wraps: as in 2} in group(o + len) (the least
//!        recently extended stream of that group that is not a pass gives way, else the
//!        least recently extended pass)                                            → Cache
//! ```
//!
//! Why these choices: `syncs` counts stream extensions that were the first write after a
//! FLUSH — a JBD2 commit block is written right after the commit's preflush and continues
//! the log ([`crate::guest::jbd2`]), so a journal pass carries one per commit; a sequential
//! rewrite without syncs (a file copied twice) is never taken for a journal. A wrap must land
//! at most one group below where the pass began: JBD2 wraps to the journal's first block
//! (`jbd2_journal_next_log_block`, fs/jbd2/journal.c), and the first pass began there or
//! later — or a little before: a fresh journal's first commit writes the journal superblock
//! first (`JBD2_FLUSHED` in `jbd2_journal_commit_transaction`, fs/jbd2/commit.c:
//! `jbd2_journal_update_sb_log_tail`), the block right below the log, so its first pass
//! starts one block below where it wraps (hence `window` of slack). A wrap is confirmed by
//! the first commit that continues it, not by its first write: the journal sits in the
//! middle of ext4's flex group with data and metadata below it, and any write there would
//! otherwise look like the log coming back; a data write below the pass is followed by the
//! pass going on (S.next moves: the wrap is void), the real wrap by a commit block
//! continuing it. So the first transaction of the second pass is missed too, and the
//! detection happens at its commit block. A run below the pass that no commit continues
//! (data; the journal superblock written by a tail update in mid-pass) is never confirmed;
//! one the log comes back to is: the superblock written by the checkpoint that makes room
//! for the wrap (`__jbd2_log_wait_for_space`, then the tail update) right before the log
//! restarts above it — the prediction then starts at the superblock. A
//! predicted journal lives on while commits reach its head: JBD2 commits at least every
//! quarter journal (`jbd2_journal_get_max_txn_bufs`: `j_total_len / 4`), so a journal's
//! worth of head bytes without one, or `max_misses` strays between two commits, is data.
//! Several guests on one host file (several filesystems in one address space) are several
//! journals. A bypassed write is always consistent (its range is dropped from the cache), so
//! a wrong prediction costs only cache hits, never data. The first pass is seen from the
//! first write the detector gets: a journal first seen in its middle (a remount) is
//! detected at its first wrap, since that pass began above the journal's start.
//!
//! ## The bypass
//!
//! ```text
//! simulator (Pdc): a Bypass write → the inner cache's bypass(): cached pages of the range
//!   are dropped (dirty ones too: the write supersedes them), Io write around the cache
//!   (sync), Complete when done; everything else, FLUSH included, as cache=writeback
//! vmio serve: O_DIRECT pwrite from an aligned buffer + posix_fadvise(NOREUSE), then
//!   posix_fadvise(DONTNEED) on the range; RWF_DONTCACHE where the kernel has it;
//!   FLUSH and FUA as writeback
//! ```

use super::{Action, HostCache, HostCacheStats, RealIo, ReqId, Request, Token};
use crate::params::{Kind, ParamSpec, Value, Values};
use crate::request::Op;
use crate::table::{param_table, FieldError, Table};
use crate::Ns;
use rustc_hash::FxHashMap;
use serde::Serialize;

const MIB: u64 = 1 << 20;

pub const GROUP: ParamSpec = ParamSpec {
    name: "group",
    kind: Kind::POSITIVE_SIZE,
    default: Value::Int(128 * MIB),
    unit: "bytes",
    help: "address-space group the detector tracks streams in (S3: ext4's 128 MiB block group)",
};
pub const STREAMS: ParamSpec = ParamSpec {
    name: "streams",
    kind: Kind::Count { min: 1, max: 64 },
    default: Value::Int(4),
    unit: "",
    help: "sequential streams remembered per group (the most recently extended; journal-like ones go last)",
};
pub const MIN_PASS: ParamSpec = ParamSpec {
    name: "min_pass",
    kind: Kind::SIZE,
    default: Value::Int(MIB),
    unit: "bytes",
    help: "sequential bytes a stream must have before a wrap to its start predicts a journal",
};
pub const MIN_SYNCS: ParamSpec = ParamSpec {
    name: "min_syncs",
    kind: Kind::Count { min: 0, max: 1 << 20 },
    default: Value::Int(2),
    unit: "",
    help: "times a stream must continue right after a FLUSH (JBD2 commit blocks) before it can be a journal",
};
pub const WINDOW: ParamSpec = ParamSpec {
    name: "window",
    kind: Kind::SIZE,
    default: Value::Int(MIB),
    unit: "bytes",
    help: "distance from a journal's expected head within which a write is a journal write",
};
pub const MAX_MISSES: ParamSpec = ParamSpec {
    name: "max_misses",
    kind: Kind::Count {
        min: 1,
        max: 1 << 20,
    },
    default: Value::Int(4),
    unit: "",
    help: "writes into a predicted journal away from its head, between two of its commits, that drop the prediction",
};
pub const MAX_JOURNAL: ParamSpec = ParamSpec {
    name: "max_journal",
    kind: Kind::SIZE,
    default: Value::Int(1024 * MIB),
    unit: "bytes",
    help: "largest journal predicted (mke2fs's largest default journal: 1 GiB)",
};
pub const JOURNALS: ParamSpec = ParamSpec {
    name: "journals",
    kind: Kind::Count { min: 1, max: 64 },
    default: Value::Int(4),
    unit: "",
    help: "journals predicted at once per host file (several guests or filesystems on one file)",
};
pub const EVENTS: ParamSpec = ParamSpec {
    name: "events",
    kind: Kind::Count { min: 1, max: 1 << 20 },
    default: Value::Int(4096),
    unit: "",
    help: "changes of the predicted ranges kept per host file for the timeline (the oldest give way; all are counted)",
};
/// The `[pdc]` parameters, in the order of [`PdcSpec`]'s fields.
pub const PARAMS: &[ParamSpec] = &[
    GROUP,
    STREAMS,
    MIN_PASS,
    MIN_SYNCS,
    WINDOW,
    MAX_MISSES,
    MAX_JOURNAL,
    JOURNALS,
    EVENTS,
];

/// The detector's parameters (`[pdc]`, [`PARAMS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PdcSpec {
    pub group_bytes: u64,
    pub streams: u32,
    pub min_pass_bytes: u64,
    pub min_syncs: u32,
    pub window_bytes: u64,
    pub max_misses: u32,
    pub max_journal_bytes: u64,
    pub journals: u32,
    pub events: u32,
}

impl PdcSpec {
    /// The spec of resolved `[pdc]` values (read against [`PARAMS`]).
    pub fn from_values(v: &Values) -> Self {
        let count = |name| u32::try_from(v.int(name)).unwrap_or(u32::MAX);
        PdcSpec {
            group_bytes: v.int(GROUP.name),
            streams: count(STREAMS.name),
            min_pass_bytes: v.int(MIN_PASS.name),
            min_syncs: count(MIN_SYNCS.name),
            window_bytes: v.int(WINDOW.name),
            max_misses: count(MAX_MISSES.name),
            max_journal_bytes: v.int(MAX_JOURNAL.name),
            journals: count(JOURNALS.name),
            events: count(EVENTS.name),
        }
    }
}

/// `[pdc]`: every key read against [`PARAMS`] (the journal detector's parameters; the stack keeps the spec
/// only when a disk uses it, a table without one is checked, then unused).
impl Table for PdcSpec {
    const KEY: &'static str = "pdc";
    type Raw = std::collections::BTreeMap<String, toml::Value>;
    type Context<'a> = ();

    fn from_raw(raw: &Self::Raw, field: &str, _: ()) -> Result<Self, FieldError> {
        Ok(Self::from_values(&param_table(raw, field, PARAMS)?))
    }
}

impl Default for PdcSpec {
    fn default() -> Self {
        Self::from_values(&Values::defaults(PARAMS))
    }
}

/// What the host does with one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A predicted journal write: around the host page cache.
    Bypass,
    /// Anything else: through the host page cache (cache=writeback).
    Cache,
}

/// A change of the predicted journal ranges, for the report's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DetectorEvent {
    pub at_ns: Ns,
    pub kind: EventKind,
    /// The range after the event (before it, for a drop), bytes of the disk.
    pub lo: u64,
    pub hi: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Detected,
    Grown,
    Dropped,
}

/// Counters of one detector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DetectorStats {
    pub writes: u64,
    pub bypassed_writes: u64,
    pub bypassed_bytes: u64,
    pub detections: u64,
    pub drops: u64,
    /// Changes of the predicted ranges, including those no longer kept ([`EVENTS`]).
    pub events_total: u64,
}

/// A run of writes, each starting where the previous one ended.
#[derive(Clone, Copy, Debug)]
struct Stream {
    start: u64,
    next: u64,
    bytes: u64,
    syncs: u32,
    /// The `next` of the pass this stream may be the wrap of (it began below that pass's
    /// start), as of its last write: a commit continuing this stream confirms the wrap
    /// while that pass still ends there.
    wraps: Option<u64>,
    /// The write (detector's write count) that last extended it.
    used: u64,
}

/// A predicted journal `[lo, hi)`.
#[derive(Clone, Copy, Debug)]
struct Journal {
    lo: u64,
    hi: u64,
    cursor: u64,
    /// Where the head was before a write away from it (a wrap or a stray): the head
    /// still, if that write was a lone one.
    restart: Option<u64>,
    /// Stray writes since the last commit at the head.
    misses: u32,
    /// Bytes written at the head since the last commit at the head.
    uncommitted: u64,
}

/// Whether `s` is long and synced enough to be a pass over a journal.
fn is_pass(spec: &PdcSpec, s: &Stream) -> bool {
    s.bytes >= spec.min_pass_bytes && s.syncs >= spec.min_syncs
}

/// The journal detector of one host file (see the module doc for the rule).
pub struct JournalDetector {
    spec: PdcSpec,
    /// Per group (offset / group), its most recently extended streams (at most `streams`).
    groups: FxHashMap<u64, Vec<Stream>>,
    /// Predicted journals, oldest prediction first.
    journals: Vec<Journal>,
    after_flush: bool,
    events: Vec<DetectorEvent>,
    stats: DetectorStats,
}

impl JournalDetector {
    pub fn new(spec: &PdcSpec) -> Self {
        Self {
            spec: spec.clone(),
            groups: FxHashMap::default(),
            journals: Vec::new(),
            after_flush: false,
            events: Vec::new(),
            stats: DetectorStats::default(),
        }
    }

    /// A FLUSH reached the disk.
    pub fn on_flush(&mut self) {
        self.after_flush = true;
    }

    /// A write of `[offset, offset + len)` reached the disk at `now`.
    pub fn on_write(&mut self, now: Ns, offset: u64, len: u64) -> Verdict {
        let synced = std::mem::take(&mut self.after_flush);
        self.stats.writes += 1;
        let end = offset + len;
        if let Some(i) = self
            .journals
            .iter()
            .position(|j| (j.lo..j.hi).contains(&offset))
        {
            return self.journal_write(now, i, offset, end, synced);
        }
        let group = self.group(offset);
        let extended = self
            .groups
            .get(&group)
            .and_then(|g| g.iter().position(|s| s.next == offset));
        if let Some(i) = extended {
            let mut s = self.take(group, i);
            s.bytes += len;
            s.syncs += u32::from(synced);
            s.next = end;
            let pass = s
                .wraps
                .filter(|_| synced)
                .and_then(|n| self.pass_ending_at(n, s.start));
            if let Some((g, i)) = pass {
                let hi = self.take(g, i).next.max(end);
                self.predict(now, s.start, hi, end);
                return self.bypassed(len);
            }
            if !is_pass(&self.spec, &s) {
                s.wraps = self.wrapped_pass(s.start);
            }
            self.file(s);
            return Verdict::Cache;
        }
        let wraps = self.wrapped_pass(offset);
        self.file(Stream {
            start: offset,
            next: end,
            bytes: len,
            syncs: u32::from(synced),
            wraps,
            used: 0,
        });
        Verdict::Cache
    }

    /// Rule 1: a write inside the predicted journal `i`.
    fn journal_write(&mut self, now: Ns, i: usize, offset: u64, end: u64, synced: bool) -> Verdict {
        let window = self.spec.window_bytes;
        let j = &mut self.journals[i];
        let near = |at: u64| offset.abs_diff(at) <= window;
        let head = near(j.cursor) || j.restart.is_some_and(near);
        let wrapped = j.cursor >= j.hi.saturating_sub(window) && offset < j.lo + window;
        (j.cursor, j.restart) = (end, (!head).then_some(j.cursor));
        if head || wrapped {
            if synced {
                (j.misses, j.uncommitted) = (0, 0);
            } else {
                j.uncommitted += end - offset;
            }
            let grown = end > j.hi;
            j.hi = j.hi.max(end);
            let (lo, hi, committed) = (j.lo, j.hi, j.uncommitted <= j.hi - j.lo);
            if grown {
                self.event(now, EventKind::Grown, lo, hi);
            }
            if committed {
                return self.bypassed(end - offset);
            }
        } else {
            j.misses += 1;
            if j.misses < self.spec.max_misses {
                return Verdict::Cache;
            }
        }
        self.drop_journal(now, i);
        Verdict::Cache
    }

    /// Whether `s` may be a pass of a log that came back to its start at `offset`.
    fn could_wrap(&self, s: &Stream, offset: u64) -> bool {
        let spec = &self.spec;
        is_pass(spec, s)
            && s.start + spec.window_bytes >= offset
            && s.start < offset + spec.group_bytes
            && s.next - offset <= spec.max_journal_bytes
    }

    /// Rules 2 and 3: the `next` of the most recently extended pass a run from `offset`
    /// may be the wrap of.
    fn wrapped_pass(&self, offset: u64) -> Option<u64> {
        // Such a stream ends within max_journal above `offset`: its group is one of these
        // (looked up one by one, or among the groups remembered when those are fewer).
        let (first, last) = (
            self.group(offset),
            self.group(offset.saturating_add(self.spec.max_journal_bytes)),
        );
        let best = |streams: &Vec<Stream>| {
            streams
                .iter()
                .filter(|s| self.could_wrap(s, offset))
                .max_by_key(|s| s.used)
                .map(|s| (s.used, s.next))
        };
        let found = if last - first < self.groups.len() as u64 {
            (first..=last)
                .filter_map(|g| best(self.groups.get(&g)?))
                .max()
        } else {
            self.groups
                .iter()
                .filter(|(g, _)| (first..=last).contains(*g))
                .filter_map(|(_, v)| best(v))
                .max()
        };
        found.map(|(_, next)| next)
    }

    /// Rule 2: where the pass a wrap at `start` came back from is remembered (its group and
    /// index), if it still ends at `next` (not extended since) and still may wrap there.
    fn pass_ending_at(&self, next: u64, start: u64) -> Option<(u64, usize)> {
        let g = self.group(next);
        let i = self
            .groups
            .get(&g)?
            .iter()
            .position(|s| s.next == next && self.could_wrap(s, start))?;
        Some((g, i))
    }

    /// Stream `i` of group `g`, taken out (an emptied group is forgotten).
    fn take(&mut self, g: u64, i: usize) -> Stream {
        let streams = self.groups.get_mut(&g).expect("a remembered group");
        let s = streams.swap_remove(i);
        if streams.is_empty() {
            self.groups.remove(&g);
        }
        s
    }

    /// Rule 2: predict the journal `[lo, hi)` whose next write is expected at `cursor`;
    /// predictions it overlaps, then the oldest beyond `journals`, give way.
    fn predict(&mut self, now: Ns, lo: u64, hi: u64, cursor: u64) {
        while let Some(i) = self.journals.iter().position(|j| j.lo < hi && lo < j.hi) {
            self.drop_journal(now, i);
        }
        if self.journals.len() >= self.spec.journals as usize {
            self.drop_journal(now, 0);
        }
        self.journals.push(Journal {
            lo,
            hi,
            cursor,
            restart: None,
            misses: 0,
            uncommitted: cursor - lo,
        });
        self.stats.detections += 1;
        self.event(now, EventKind::Detected, lo, hi);
    }

    fn drop_journal(&mut self, now: Ns, i: usize) {
        let j = self.journals.remove(i);
        self.stats.drops += 1;
        self.event(now, EventKind::Dropped, j.lo, j.hi);
    }

    fn bypassed(&mut self, len: u64) -> Verdict {
        self.stats.bypassed_writes += 1;
        self.stats.bypassed_bytes += len;
        Verdict::Bypass
    }

    fn event(&mut self, at_ns: Ns, kind: EventKind, lo: u64, hi: u64) {
        self.stats.events_total += 1;
        if self.events.len() >= self.spec.events as usize {
            self.events.remove(0);
        }
        self.events.push(DetectorEvent {
            at_ns,
            kind,
            lo,
            hi,
        });
    }

    fn group(&self, offset: u64) -> u64 {
        offset / self.spec.group_bytes
    }

    /// File `s` under the group of its `next`, as the most recently extended stream there
    /// (the least recently extended one gives way when the group is full).
    fn file(&mut self, mut s: Stream) {
        s.used = self.stats.writes;
        let cap = self.spec.streams as usize;
        let g = self.group(s.next);
        let streams = self.groups.entry(g).or_default();
        if streams.len() >= cap {
            let spec = &self.spec;
            if let Some(i) =
                (0..streams.len()).min_by_key(|&i| (is_pass(spec, &streams[i]), streams[i].used))
            {
                streams.swap_remove(i);
            }
        }
        streams.push(s);
    }

    /// The journals predicted now, `[lo, hi)` in bytes, lowest first.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> = self.journals.iter().map(|j| (j.lo, j.hi)).collect();
        r.sort_unstable();
        r
    }

    /// The last changes of the predicted ranges (at most `[pdc] events`), in time order.
    pub fn events(&self) -> &[DetectorEvent] {
        &self.events
    }

    pub fn stats(&self) -> DetectorStats {
        self.stats
    }

    /// The detector's figures, with its accuracy against the true journal `[lo, hi)` of
    /// the disk when known (the guest's filesystem).
    pub fn report(&self, journal: Option<(u64, u64)>) -> DetectorReport {
        let ranges = self.ranges();
        let (precision, recall) = match journal {
            Some(j) => accuracy(&ranges, j),
            None => (None, None),
        };
        DetectorReport {
            events: self.events.clone(),
            ranges,
            stats: self.stats,
            journal,
            precision,
            recall,
        }
    }

    /// Streams remembered now (bounded by `streams` per group written).
    #[cfg(test)]
    fn remembered_streams(&self) -> usize {
        self.groups.values().map(Vec::len).sum()
    }
}

/// A PDC disk's figures for a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetectorReport {
    pub events: Vec<DetectorEvent>,
    /// The journals predicted at the end, `[lo, hi)` bytes.
    pub ranges: Vec<(u64, u64)>,
    #[serde(flatten)]
    pub stats: DetectorStats,
    /// The true journal `[lo, hi)` (bytes of the disk), when known.
    pub journal: Option<(u64, u64)>,
    /// Bytes of `ranges` inside the journal over bytes of `ranges` (None: nothing
    /// predicted, or no true journal known).
    pub precision: Option<f64>,
    /// Bytes of the journal inside `ranges` over the journal's bytes (None: no true journal
    /// known).
    pub recall: Option<f64>,
}

/// Precision and recall of the disjoint `predicted` ranges against the journal `truth`,
/// in bytes: overlap / predicted (None when nothing is predicted), overlap / journal.
pub fn accuracy(predicted: &[(u64, u64)], truth: (u64, u64)) -> (Option<f64>, Option<f64>) {
    let (lo, hi) = truth;
    let overlap: u64 = predicted
        .iter()
        .map(|&(a, b)| b.min(hi).saturating_sub(a.max(lo)))
        .sum();
    let predicted_bytes: u64 = predicted.iter().map(|&(a, b)| b - a).sum();
    let ratio = |n: u64, d: u64| (d > 0).then(|| n as f64 / d as f64);
    (ratio(overlap, predicted_bytes), ratio(overlap, hi - lo))
}

/// The simulator's PDC host cache: `inner` (the Linux page cache) with the writes of
/// `cache = "pdc"` disks that their detector bypasses sent through [`HostCache::bypass`].
pub struct Pdc {
    inner: Box<dyn HostCache>,
    /// Per disk (stack order): its detector, for `cache = "pdc"` disks.
    detectors: Vec<Option<JournalDetector>>,
}

impl Pdc {
    pub fn new(inner: Box<dyn HostCache>, detectors: Vec<Option<JournalDetector>>) -> Self {
        Self { inner, detectors }
    }

    /// The detector of `disk`, if it is a PDC disk.
    pub fn detector(&self, disk: u32) -> Option<&JournalDetector> {
        self.detectors.get(disk as usize)?.as_ref()
    }
}

impl HostCache for Pdc {
    /// A write of a PDC disk goes where its detector says; a FLUSH of one is seen by its
    /// detector first; everything else is the inner cache's.
    fn on_request(&mut self, now: Ns, req: Request, out: &mut Vec<Action>) {
        if let Some(Some(d)) = self.detectors.get_mut(req.disk as usize) {
            match req.op {
                Op::Write if d.on_write(now, req.offset, req.len) == Verdict::Bypass => {
                    return self.inner.bypass(now, req, out);
                }
                Op::Flush => d.on_flush(),
                _ => {}
            }
        }
        self.inner.on_request(now, req, out)
    }
    fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<Action>) {
        self.inner.on_done(now, token, out)
    }
    fn on_copied(&mut self, now: Ns, req: ReqId, out: &mut Vec<Action>) {
        self.inner.on_copied(now, req, out)
    }
    fn on_timer(&mut self, now: Ns, out: &mut Vec<Action>) {
        self.inner.on_timer(now, out)
    }
    fn bypass(&mut self, now: Ns, req: Request, out: &mut Vec<Action>) {
        self.inner.bypass(now, req, out)
    }
    fn real_io(&self, disk: u32) -> RealIo {
        self.inner.real_io(disk)
    }
    fn stats(&self) -> HostCacheStats {
        self.inner.stats()
    }
    fn pdc(&self, disk: u32) -> Option<&JournalDetector> {
        self.detector(disk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    const BLK: u64 = 4096;
    const GIB: u64 = 1 << 30;

    /// One write the disk sees, right after a FLUSH when `flushed`.
    #[derive(Clone, Copy, Debug)]
    struct W {
        offset: u64,
        len: u64,
        flushed: bool,
    }

    fn w(offset: u64, len: u64) -> W {
        W {
            offset,
            len,
            flushed: false,
        }
    }

    /// A JBD2-like circular log over `[lo, hi)` from `head`: per commit, its descriptor and
    /// logged blocks (one write per contiguous range: two where the log wraps), a FLUSH,
    /// the commit block.
    struct Log {
        lo: u64,
        hi: u64,
        head: u64,
    }

    impl Log {
        fn new(lo: u64, hi: u64) -> Self {
            Log { lo, hi, head: lo }
        }

        fn blocks(&mut self, n: u64, mut flushed: bool, out: &mut Vec<W>) {
            let mut left = n * BLK;
            while left > 0 {
                let len = left.min(self.hi - self.head);
                out.push(W {
                    offset: self.head,
                    len,
                    flushed,
                });
                flushed = false;
                (self.head, left) = (self.head + len, left - len);
                if self.head == self.hi {
                    self.head = self.lo;
                }
            }
        }

        fn commit(&mut self, log_blocks: u64, out: &mut Vec<W>) {
            self.blocks(log_blocks, false, out);
            self.blocks(1, true, out);
        }
    }

    /// `d`'s verdicts on `ws`, the i-th write at `t0 + i` ns.
    fn feed(d: &mut JournalDetector, t0: Ns, ws: &[W]) -> Vec<Verdict> {
        ws.iter()
            .enumerate()
            .map(|(i, w)| {
                if w.flushed {
                    d.on_flush();
                }
                d.on_write(t0 + i as Ns, w.offset, w.len)
            })
            .collect()
    }

    /// The write the rule detects a log at: the first commit block after the log came back
    /// to `lo` (the first write there that is not the log's very first write).
    fn detection_index(ws: &[W], lo: u64) -> usize {
        let wrap = 1 + ws[1..].iter().position(|w| w.offset == lo).unwrap();
        wrap + 1 + ws[wrap + 1..].iter().position(|w| w.flushed).unwrap()
    }

    /// `passes` passes of `log` in commits of `log_blocks` + 1 blocks: detected exactly at
    /// [`detection_index`] with exactly the log's range; every write before it cached,
    /// every write from it on bypassed, one event.
    fn assert_detected_after_the_first_pass(mut log: Log, log_blocks: u64, passes: u64) {
        let (lo, hi) = (log.lo, log.hi);
        let mut ws = Vec::new();
        let commits = passes * (hi - lo) / ((log_blocks + 1) * BLK);
        for _ in 0..commits {
            log.commit(log_blocks, &mut ws);
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        let at = detection_index(&ws, lo);
        assert!(v[..at].iter().all(|&v| v == Verdict::Cache));
        assert!(v[at..].iter().all(|&v| v == Verdict::Bypass));
        assert_eq!(d.ranges(), vec![(lo, hi)]);
        let detected = DetectorEvent {
            at_ns: at as Ns,
            kind: EventKind::Detected,
            lo,
            hi,
        };
        assert_eq!(d.events(), &[detected]);
        let s = d.stats();
        assert_eq!(s.bypassed_writes, (ws.len() - at) as u64);
        assert_eq!(
            s.bypassed_bytes,
            ws[at..].iter().map(|w| w.len).sum::<u64>()
        );
        assert_eq!((s.writes, s.detections, s.drops), (ws.len() as u64, 1, 0));
    }

    #[test]
    fn accuracy_is_the_byte_overlap_over_the_prediction_and_over_the_journal() {
        let j = (100, 200);
        assert_eq!(accuracy(&[(100, 200)], j), (Some(1.0), Some(1.0)));
        // 50 of the 100 predicted bytes are journal; 50 of its 100 bytes are found.
        assert_eq!(accuracy(&[(150, 250)], j), (Some(0.5), Some(0.5)));
        // 25 + 25 of 50 + 200 predicted.
        assert_eq!(accuracy(&[(0, 125), (175, 300)], j), (Some(0.2), Some(0.5)));
        assert_eq!(accuracy(&[], j), (None, Some(0.0)));
    }

    #[test]
    fn the_default_spec_is_the_declared_parameters_defaults() {
        let s = PdcSpec::default();
        assert_eq!(
            (s.group_bytes, s.streams, s.min_pass_bytes, s.min_syncs),
            (128 * MIB, 4, MIB, 2)
        );
        assert_eq!(
            (
                s.window_bytes,
                s.max_misses,
                s.max_journal_bytes,
                s.journals
            ),
            (MIB, 4, GIB, 4)
        );
    }

    #[test]
    fn a_circular_log_is_detected_at_the_first_commit_of_its_second_pass_with_exactly_its_range() {
        // 32 MiB of commits of 8 blocks: 1024 commits, 2048 writes a pass; the second
        // pass's first write (the descriptor and logged blocks at lo) starts the wrap and
        // its commit block, write 2049, confirms it.
        let lo = 8 * GIB + BLK;
        let log = Log::new(lo, lo + 32 * MIB);
        let mut ws = Vec::new();
        let mut probe = Log::new(lo, lo + 32 * MIB);
        for _ in 0..1025 {
            probe.commit(7, &mut ws);
        }
        assert_eq!(detection_index(&ws, lo), 2049);
        assert_detected_after_the_first_pass(log, 7, 4);
    }

    #[test]
    fn a_log_first_seen_in_its_middle_is_detected_at_its_first_wrap_and_keeps_its_range() {
        // Commits of 6 blocks do not divide the journal: log writes split at its end, and
        // every later wrap is a head write near hi followed by one at lo.
        let lo = 8 * GIB + BLK;
        let log = Log {
            lo,
            hi: lo + 32 * MIB,
            head: lo + 10 * MIB,
        };
        assert_detected_after_the_first_pass(log, 5, 5);
    }

    #[test]
    fn a_wrap_whose_head_arrives_before_its_tail_is_detected_at_the_next_commit() {
        // The real guest (Linux 6.1 under TCG, tests/real_pdc_figures.json) sends the
        // transaction that spans the log's end head first: the piece at lo, then the tail
        // up to hi. The pass then grows after the wrap began, which voids that wrap; the
        // wrapped run's next write refreshes it, and the next commit block confirms it.
        let (lo, hi) = (8 * GIB + BLK, 8 * GIB + BLK + 4 * MIB);
        let mut log = Log::new(lo, hi);
        let mut ws = Vec::new();
        for _ in 0..3 * 1024 / 7 {
            log.commit(6, &mut ws);
        }
        // 1024 blocks in commits of 7: commit 147 spans the end, its pieces [..hi) and
        // [lo..); swap them.
        let head = 1 + ws[1..].iter().position(|w| w.offset == lo).unwrap();
        assert_eq!(ws[head - 1].offset + ws[head - 1].len, hi);
        ws.swap(head - 1, head);
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        assert_eq!(d.ranges(), vec![(lo, hi)]);
        let (s, events) = (d.stats(), d.events());
        assert_eq!((s.detections, s.drops, events.len()), (1, 0, 1));
        // The swapped transaction's commit block is missed; the next commit's log write
        // refreshes the wrap, its commit block confirms it.
        let commit = |from: usize| from + ws[from..].iter().position(|w| w.flushed).unwrap();
        let at = commit(commit(head) + 1);
        assert_eq!(events[0].at_ns, at as Ns);
        assert!(v[..at].iter().all(|&v| v == Verdict::Cache));
        assert!(v[at..].iter().all(|&v| v == Verdict::Bypass));
    }

    #[test]
    fn a_journal_spanning_two_128_mib_groups_is_one_log() {
        assert_detected_after_the_first_pass(Log::new(112 * MIB, 144 * MIB), 7, 3);
    }

    #[test]
    fn the_journal_superblock_below_the_log_neither_delays_detection_nor_costs_log_writes() {
        // JBD2: a fresh journal's first commit writes the superblock (block 0) first, then
        // the log from block 1; every 50 commits, and when the log wraps, a tail update:
        // FLUSH, superblock. The wrap's tail update begins the wrapped run, so the
        // prediction starts at the superblock; later superblock writes are lone ones.
        let sb = 8 * GIB;
        let (lo, hi) = (sb + BLK, sb + BLK + 4 * MIB);
        let mut log = Log::new(lo, hi);
        let tail_update = W {
            offset: sb,
            len: BLK,
            flushed: true,
        };
        let mut ws = vec![tail_update];
        for k in 1..=3 * 128 {
            log.commit(7, &mut ws);
            if k % 50 == 0 || k % 128 == 0 {
                ws.push(tail_update);
            }
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        // Pass 1: 1 + 128 × 2 + 2 tail updates; then the wrap's tail update, the log
        // write at lo and its commit block.
        let at = 1 + 128 * 2 + 2 + 2;
        assert_eq!((ws[at - 1].offset, ws[at].offset), (lo, lo + 7 * BLK));
        assert!(v[..at].iter().all(|&v| v == Verdict::Cache));
        // A superblock write is journal (bypassed) when the head is within a window of it
        // or of the end (a wrap), else a stray (cached); the log goes on where it was.
        let mut head = ws[at].offset + ws[at].len;
        for (w, &v) in ws[at + 1..].iter().zip(&v[at + 1..]) {
            let bypass = w.offset != sb || head - sb <= MIB || head >= hi - MIB;
            assert_eq!(v == Verdict::Bypass, bypass, "{w:?}");
            if w.offset != sb {
                head = w.offset + w.len;
            }
        }
        assert_eq!(d.ranges(), vec![(sb, hi)]);
        assert_eq!((d.stats().detections, d.stats().drops), (1, 0));
    }

    #[test]
    fn a_fresh_journal_whose_first_pass_began_at_its_superblock_is_detected_at_its_first_wrap() {
        // The superblock, then the log from the block above it; no tail update at the wrap:
        // the pass began one block below where the log comes back (within the window).
        let sb = 8 * GIB;
        let (lo, hi) = (sb + BLK, sb + BLK + 4 * MIB);
        let mut log = Log::new(lo, hi);
        let mut ws = vec![W {
            offset: sb,
            len: BLK,
            flushed: true,
        }];
        for _ in 0..2 * 128 {
            log.commit(7, &mut ws);
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        let at = 1 + 128 * 2 + 1;
        assert!(v[..at].iter().all(|&v| v == Verdict::Cache));
        assert!(v[at..].iter().all(|&v| v == Verdict::Bypass));
        assert_eq!(d.ranges(), vec![(lo, hi)]);
    }

    #[test]
    fn random_writes_with_flushes_and_sequential_rewrites_are_never_a_journal() {
        let mut rng = Rng::new(7);
        let random: Vec<W> = (0..200_000u64)
            .map(|i| W {
                offset: rng.below(16 * GIB / BLK) * BLK,
                len: BLK,
                flushed: i % 8 == 0,
            })
            .collect();
        // A 64 MiB file written four times in 256 KiB writes: without a FLUSH, then with
        // one after each copy (sync; the next copy's first write follows it).
        let file = 3 * GIB;
        let copy = |flushed_copies: bool| -> Vec<W> {
            (0..4 * 256u64)
                .map(|i| W {
                    offset: file + (i % 256) * 256 * 1024,
                    len: 256 * 1024,
                    flushed: flushed_copies && i % 256 == 0,
                })
                .collect()
        };
        for ws in [random, copy(false), copy(true)] {
            let mut d = JournalDetector::new(&PdcSpec::default());
            assert!(feed(&mut d, 0, &ws).iter().all(|&v| v == Verdict::Cache));
            assert_eq!(d.stats().detections, 0);
            assert!(d.events().is_empty());
        }
    }

    #[test]
    fn data_writes_in_the_journals_group_do_not_break_its_detection() {
        // Journal [64 MiB, 96 MiB) in group 0. Before each commit, data=ordered style: a
        // random 4 KiB write below the journal, two blocks of a file below it (a new run
        // below the log's pass, continued at once: a wrap that the pass going on voids
        // since no commit continues it; the next two blocks 4 KiB further) and one block
        // of a file above it.
        let (lo, hi) = (64 * MIB, 96 * MIB);
        let mut log = Log::new(lo, hi);
        let mut rng = Rng::new(11);
        let mut ws = Vec::new();
        let mut journal = Vec::new();
        for k in 0..3 * 1024u64 {
            ws.push(w(rng.below(16 * MIB / BLK) * BLK, BLK));
            ws.push(w(16 * MIB + 3 * k * BLK, BLK));
            ws.push(w(16 * MIB + (3 * k + 1) * BLK, BLK));
            ws.push(w(100 * MIB + k * BLK, BLK));
            let from = ws.len();
            log.commit(7, &mut ws);
            journal.extend(from..ws.len());
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        let log_ws: Vec<W> = journal.iter().map(|&i| ws[i]).collect();
        let at = journal[detection_index(&log_ws, lo)];
        for (i, &v) in v.iter().enumerate() {
            let bypass = i >= at && journal.binary_search(&i).is_ok();
            assert_eq!(v == Verdict::Bypass, bypass, "write {i}: {:?}", ws[i]);
        }
        assert_eq!(d.ranges(), vec![(lo, hi)]);
        assert_eq!((d.stats().detections, d.stats().drops), (1, 0));
    }

    #[test]
    fn a_moved_journal_is_dropped_after_max_misses_strays_and_the_new_one_detected_after_its_first_pass(
    ) {
        let spec = PdcSpec::default();
        let (lo1, hi1) = (8 * GIB + BLK, 8 * GIB + BLK + 32 * MIB);
        let mut old = Log::new(lo1, hi1);
        let mut ws = Vec::new();
        for _ in 0..2 * 1024 {
            old.commit(7, &mut ws);
        }
        let mut d = JournalDetector::new(&spec);
        feed(&mut d, 0, &ws);
        assert_eq!(d.ranges(), vec![(lo1, hi1)]);
        // The reformat: the new journal elsewhere; data lands in the old range, 2 MiB
        // apart (each away from the old head), one write after each of the new log's
        // first commits.
        let (lo2, hi2) = (2 * GIB + BLK, 2 * GIB + BLK + 16 * MIB);
        let mut new = Log::new(lo2, hi2);
        let t0 = ws.len() as Ns;
        let mut ws = Vec::new();
        let mut strays = Vec::new();
        for k in 0..2 * 512u64 {
            new.commit(7, &mut ws);
            if k < spec.max_misses as u64 {
                strays.push(ws.len());
                ws.push(w(lo1 + 8 * MIB + k * 2 * MIB, BLK));
            }
        }
        let v = feed(&mut d, t0, &ws);
        assert!(strays.iter().all(|&i| v[i] == Verdict::Cache));
        let dropped = DetectorEvent {
            at_ns: t0 + *strays.last().unwrap() as Ns,
            kind: EventKind::Dropped,
            lo: lo1,
            hi: hi1,
        };
        assert_eq!(d.events()[1], dropped);
        let log_ws: Vec<W> = ws
            .iter()
            .copied()
            .filter(|w| (lo2..hi2).contains(&w.offset))
            .collect();
        let journal_at = detection_index(&log_ws, lo2);
        // Strays come after the first 4 of the new log's 2 × 512 commits: before its wrap.
        let at = journal_at + spec.max_misses as usize;
        assert_eq!(d.events()[2].at_ns, t0 + at as Ns);
        assert_eq!(d.events().len(), 3);
        assert_eq!(d.ranges(), vec![(lo2, hi2)]);
        assert!(v[at..].iter().all(|&v| v == Verdict::Bypass));
    }

    #[test]
    fn the_timeline_keeps_the_last_events_of_its_bound_and_counts_them_all() {
        let spec = PdcSpec {
            events: 2,
            ..PdcSpec::default()
        };
        let mut d = JournalDetector::new(&spec);
        // Three journals one after the other in three places: detected, and each new one
        // predicted after the old one stopped (no drop: the old ones just stay, 3 <= journals).
        let mut t = 0;
        for base in [GIB, 3 * GIB, 5 * GIB] {
            let mut log = Log::new(base + BLK, base + BLK + 8 * MIB);
            let mut ws = Vec::new();
            for _ in 0..2 * 512 {
                log.commit(7, &mut ws);
            }
            feed(&mut d, t, &ws);
            t += ws.len() as Ns;
        }
        assert_eq!(d.stats().detections, 3);
        assert_eq!(d.stats().events_total, 3);
        assert_eq!(d.events().len(), 2);
        assert!(d.events().iter().all(|e| e.kind == EventKind::Detected));
        assert_eq!(d.events()[1].lo, 5 * GIB + BLK);
        assert_eq!(d.events()[0].lo, 3 * GIB + BLK);
    }

    #[test]
    fn data_written_over_a_predicted_journal_without_commits_drops_it_after_one_journals_worth() {
        let (lo, hi) = (8 * GIB + BLK, 8 * GIB + BLK + 32 * MIB);
        let mut log = Log::new(lo, hi);
        let mut ws = Vec::new();
        for _ in 0..2 * 1024 {
            log.commit(7, &mut ws);
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        feed(&mut d, 0, &ws);
        assert_eq!(d.ranges(), vec![(lo, hi)]);
        // Two passes ended at hi. A file written sequentially from lo on, 1 MiB at a time,
        // never synced: the 33rd MiB exceeds the journal's 32 MiB without a commit.
        let data: Vec<W> = (0..40u64).map(|i| w(lo + (i % 32) * MIB, MIB)).collect();
        let v = feed(&mut d, ws.len() as Ns, &data);
        assert!(v[..32].iter().all(|&v| v == Verdict::Bypass));
        assert_eq!(v[32], Verdict::Cache);
        assert!(d.ranges().is_empty());
    }

    #[test]
    fn two_journals_in_one_address_space_are_both_detected() {
        // Two guests' filesystems in one host file, their commits alternating.
        let (a, b) = (GIB + BLK, 9 * GIB + BLK);
        let (mut la, mut lb) = (Log::new(a, a + 32 * MIB), Log::new(b, b + 16 * MIB));
        let mut ws = Vec::new();
        let (mut ia, mut ib) = (Vec::new(), Vec::new());
        for _ in 0..2 * 1024 + 1 {
            let from = ws.len();
            la.commit(7, &mut ws);
            ia.extend(from..ws.len());
            let from = ws.len();
            lb.commit(7, &mut ws);
            ib.extend(from..ws.len());
        }
        let mut d = JournalDetector::new(&PdcSpec::default());
        let v = feed(&mut d, 0, &ws);
        for ix in [&ia, &ib] {
            let log_ws: Vec<W> = ix.iter().map(|&i| ws[i]).collect();
            let at = detection_index(&log_ws, log_ws[0].offset);
            assert!(ix[..at].iter().all(|&i| v[i] == Verdict::Cache));
            assert!(ix[at..].iter().all(|&i| v[i] == Verdict::Bypass));
        }
        assert_eq!(d.ranges(), vec![(a, a + 32 * MIB), (b, b + 16 * MIB)]);
        assert_eq!((d.stats().detections, d.stats().drops), (2, 0));
    }

    #[test]
    fn a_million_random_writes_leave_at_most_streams_per_group_remembered() {
        // 16 GiB: 128 groups of 128 MiB, 4 streams each: every group fills to its bound.
        let mut d = JournalDetector::new(&PdcSpec::default());
        let mut rng = Rng::new(5);
        for i in 0..1_000_000u64 {
            if i % 16 == 0 {
                d.on_flush();
            }
            d.on_write(i, rng.below(16 * GIB / BLK) * BLK, BLK);
        }
        assert_eq!(d.remembered_streams(), 128 * 4);
        assert_eq!(d.stats().detections, 0);
    }
}

#[cfg(test)]
mod consistency {
    use super::*;
    use crate::cache::eviction::Clock;
    use crate::cache::linux::{tests::linux_defaults, Linux};
    use crate::cache::{CacheMode, HostDisk};
    use std::collections::VecDeque;

    const BLK: u64 = 4096;
    /// A 4 MiB journal at 64 MiB + 4 KiB: 128 commits of 8 blocks a pass.
    const LO: u64 = 64 * MIB + BLK;
    const HI: u64 = LO + 4 * MIB;

    /// PDC over a 64 MiB Linux page cache (no background writeback below 1638 dirty pages),
    /// one 1 GiB `cache = "pdc"` disk, and every action carried out at once: the device
    /// I/O and flushes it asked for, in order.
    struct Host {
        c: Pdc,
        now: Ns,
        next_id: ReqId,
        io: Vec<Action>,
    }

    impl Host {
        fn new() -> Self {
            let disk = HostDisk {
                mode: CacheMode::Pdc,
                size_bytes: 1 << 30,
                read_ahead_pages: 0,
            };
            let linux = Linux::<Clock>::new(&linux_defaults(64 * MIB), vec![disk]);
            let c = Pdc::new(
                Box::new(linux),
                vec![Some(JournalDetector::new(&PdcSpec::default()))],
            );
            Host {
                c,
                now: 0,
                next_id: 0,
                io: Vec::new(),
            }
        }

        /// Serve one request to its completion; the device I/O it caused.
        fn run(&mut self, op: Op, offset: u64, len: u64) -> Vec<Action> {
            self.now += 1;
            let (now, id) = (self.now, self.next_id);
            self.next_id += 1;
            let req = Request {
                id,
                disk: 0,
                op,
                offset,
                len,
            };
            let mut out = Vec::new();
            self.c.on_request(now, req, &mut out);
            let mut todo: VecDeque<Action> = out.drain(..).collect();
            let mut io = Vec::new();
            while let Some(a) = todo.pop_front() {
                match a {
                    Action::Io { token, .. } | Action::Flush { token, .. } => {
                        io.push(a);
                        self.c.on_done(now, token, &mut out);
                    }
                    Action::Copy {
                        req,
                        complete: false,
                        ..
                    } => self.c.on_copied(now, req, &mut out),
                    Action::Copy { .. } | Action::Complete { .. } | Action::Timer { .. } => {}
                }
                todo.extend(out.drain(..));
            }
            self.io.extend(io.iter().copied());
            io
        }

        /// A JBD2-like commit at `head`: descriptor and 6 logged blocks, FLUSH, commit block.
        fn commit(&mut self, head: &mut u64) {
            self.run(Op::Write, *head, 7 * BLK);
            self.run(Op::Flush, 0, 0);
            self.run(Op::Write, *head + 7 * BLK, BLK);
            *head = if *head + 8 * BLK == HI {
                LO
            } else {
                *head + 8 * BLK
            };
        }

        /// One pass of the log and the first commit of the next: the journal is detected.
        fn detect(&mut self) -> u64 {
            let mut head = LO;
            for _ in 0..129 {
                self.commit(&mut head);
            }
            assert_eq!(self.c.detector(0).unwrap().ranges(), vec![(LO, HI)]);
            head
        }
    }

    fn reads_device(io: &[Action], page: u64) -> bool {
        io.iter().any(|a| {
            matches!(*a, Action::Io { op: Op::Read, offset, len, .. }
                if (offset..offset + len).contains(&page))
        })
    }

    fn writes(io: &[Action], page: u64) -> usize {
        io.iter()
            .filter(|a| {
                matches!(**a, Action::Io { op: Op::Write, offset, len, .. }
                    if (offset..offset + len).contains(&page))
            })
            .count()
    }

    #[test]
    fn a_page_cached_before_a_bypassed_write_is_read_from_the_device_afterwards() {
        let mut h = Host::new();
        let mut head = h.detect();
        // Written by the first pass (fsynced: clean and cached) and read again: a hit.
        let p = LO + MIB;
        assert!(!reads_device(&h.run(Op::Read, p, BLK), p));
        // The log comes by again, around the cache; the next read goes to the device.
        while head <= p {
            h.commit(&mut head);
        }
        assert!(reads_device(&h.run(Op::Read, p, BLK), p));
    }

    #[test]
    fn dirty_pages_of_a_bypassed_range_are_never_written_back() {
        let mut h = Host::new();
        let head = h.detect();
        // A write 2 MiB ahead of the log's head is a stray: cached, dirty; the log is
        // expected to go on from there (a journal restarted in its range).
        let p = head + 2 * MIB;
        h.run(Op::Write, p, BLK);
        assert_eq!(h.c.stats().dirty_pages, 1);
        // A 1 MiB transaction around it is a head write, around the cache; the fsync of the
        // next FLUSH has nothing left to write.
        let (before, bypassed) = (h.io.len(), h.c.detector(0).unwrap().stats().bypassed_writes);
        h.run(Op::Write, p - MIB / 2, MIB);
        assert_eq!(
            h.c.detector(0).unwrap().stats().bypassed_writes,
            bypassed + 1
        );
        assert_eq!(h.c.stats().dirty_pages, 0);
        let fsync_pages = h.c.stats().fsync_written_pages;
        let flushed = h.run(Op::Flush, 0, 0);
        assert!(matches!(flushed[..], [Action::Flush { .. }]));
        assert_eq!(h.c.stats().fsync_written_pages, fsync_pages);
        assert_eq!(writes(&h.io[before..], p), 1, "only the bypassed write");
    }
}
