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
//! stream  = {start, next, bytes, syncs}: a run of writes each starting where the previous
//!           ended (next); filed under the group of `next`; a group keeps its `streams`
//!           most recently extended streams (the paper's "most recent address", several per
//!           group so that data writes in the journal's group do not break the log's run)
//! journal = {lo, hi, cursor, misses}: a predicted journal [lo, hi) and where its next
//!           write is expected
//!
//! on_flush():            after_flush = true
//! on_write(now, o, len): a = after_flush; after_flush = false
//!   1. o in a journal J's [lo, hi):
//!        at the head   (|o − J.cursor| ≤ window)                        → J.cursor = o + len
//!        or wrapped    (J.cursor ≥ hi − window and o < lo + window)     → J.cursor = o + len
//!          (o + len > hi: hi = o + len, the range grows)                  misses = 0; Bypass
//!        else a stray write: J.misses += 1; J.cursor = o + len (a journal restarted
//!          elsewhere in its range continues from there); misses = max_misses: J is
//!          dropped (a reformat moved the journal, the range now holds data)       → Cache
//!   2. a stream S of group(o) has S.next = o: S extends (bytes += len, syncs += a,
//!        next = o + len, refiled under group(next): a journal spanning two groups stays one
//!        stream)                                                                 → Cache
//!   3. a wrap: a stream S with S.bytes ≥ min_pass, S.syncs ≥ min_syncs, S.start ≥ o,
//!        S.start − o < group and S.next − o ≤ max_journal: the log came back to its start;
//!        predict the journal [o, S.next), cursor o + len, S forgotten (the oldest journal
//!        gives way when `journals` are predicted)                                → Bypass
//!   4. else a new stream {o, o + len, len, a} in group(o + len) (the least recently
//!        extended one of that group gives way)                                    → Cache
//! ```
//!
//! Why these choices: `syncs` counts stream extensions that were the first write after a
//! FLUSH — a JBD2 commit block is written right after the commit's preflush and continues
//! the log ([`crate::guest::jbd2`]), so a journal pass carries one per commit; a sequential
//! rewrite without syncs (a file copied twice) is never taken for a journal. A wrap must land
//! at most one group below where the pass began: JBD2 wraps to the journal's first block,
//! and the first pass began there or later. Several guests on one host file (several
//! filesystems in one address space) are several journals. A bypassed write is always
//! consistent (its range is dropped from the cache), so a wrong prediction costs only cache
//! hits, never data.
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

use super::policy::{Action, HostCache, HostCacheStats, RealIo, ReqId, Request, Token};
use crate::params::{Kind, ParamSpec, Value};
use crate::Ns;
use serde::Serialize;

const MIB: u64 = 1 << 20;

pub const GROUP: ParamSpec = ParamSpec {
    name: "group",
    kind: Kind::SIZE,
    default: Value::Int(128 * MIB),
    unit: "bytes",
    help: "address-space group the detector tracks streams in (S3: ext4's 128 MiB block group)",
};
pub const STREAMS: ParamSpec = ParamSpec {
    name: "streams",
    kind: Kind::Count { min: 1, max: 64 },
    default: Value::Int(4),
    unit: "",
    help: "sequential streams remembered per group (the most recently extended ones)",
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
    help: "consecutive writes into a predicted journal away from its head that drop the prediction",
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
}

impl Default for PdcSpec {
    fn default() -> Self {
        todo!("from PARAMS' defaults")
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
}

/// The journal detector of one host file (see the module doc for the rule).
pub struct JournalDetector {
    spec: PdcSpec,
}

impl JournalDetector {
    pub fn new(spec: &PdcSpec) -> Self {
        Self { spec: spec.clone() }
    }

    /// A FLUSH reached the disk.
    pub fn on_flush(&mut self) {
        todo!()
    }

    /// A write of `[offset, offset + len)` reached the disk at `now`.
    pub fn on_write(&mut self, now: Ns, offset: u64, len: u64) -> Verdict {
        let _ = (now, offset, len, &self.spec);
        todo!()
    }

    /// The journals predicted now, `[lo, hi)` in bytes, lowest first.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        todo!()
    }

    /// Every change of the predicted ranges so far, in time order.
    pub fn events(&self) -> &[DetectorEvent] {
        todo!()
    }

    pub fn stats(&self) -> DetectorStats {
        todo!()
    }
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
    fn on_request(&mut self, now: Ns, req: Request, out: &mut Vec<Action>) {
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
}
