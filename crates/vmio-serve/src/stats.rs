//! Live per-export counters: operations, bytes, errors and latency percentiles (time from a
//! request's arrival to its reply, monotonic clock).
//!
//! Latencies go into a log-linear histogram (8 sub-buckets per power of two, so a percentile
//! is known within 12.5 %), updated with relaxed atomics from every worker without locks.
//! The server writes [`Snapshot`]s as JSON to the `--stats-file` every second and on SIGUSR1,
//! and prints them on shutdown. A `cache = "pdc"` export's snapshot also has `pdc`
//! ([`PdcSnapshot`]): the journals predicted now, the detection events with their times,
//! writes seen, writes and bytes bypassed, bypassed pieces by path, and whether the kernel
//! takes RWF_DONTCACHE there.

use crate::pdc::PdcSnapshot;
use crate::readahead::Counters;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB: u32 = 8;
const BUCKETS: usize = 64 * SUB as usize;

pub struct Histogram {
    counts: Box<[AtomicU64]>,
    total: AtomicU64,
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - 3)) & (SUB as u64 - 1);
    ((e - 2) * SUB) as usize + sub as usize
}

/// The smallest value of a bucket (inverse of [`bucket`]).
fn bucket_low(i: usize) -> u64 {
    if i < SUB as usize {
        return i as u64;
    }
    let e = i as u32 / SUB + 2;
    let sub = i as u64 % SUB as u64;
    (1u64 << e) | (sub << (e - 3))
}

impl Histogram {
    pub fn record(&self, ns: u64) {
        self.counts[bucket(ns)].fetch_add(1, Relaxed);
        self.total.fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// The `q`-quantile (0..=1), as the middle of its bucket; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let total = self.total.load(Relaxed);
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Relaxed);
            if seen >= rank {
                let lo = bucket_low(i);
                let hi = if i + 1 < BUCKETS {
                    bucket_low(i + 1)
                } else {
                    u64::MAX
                };
                return lo + (hi - lo) / 2;
            }
        }
        0
    }

    pub fn mean_ns(&self) -> u64 {
        let n = self.total.load(Relaxed);
        self.sum_ns.load(Relaxed).checked_div(n).unwrap_or(0)
    }
}

#[derive(Default)]
pub struct ExportStats {
    pub read_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_ops: AtomicU64,
    pub write_bytes: AtomicU64,
    pub flush_ops: AtomicU64,
    pub trim_ops: AtomicU64,
    pub zero_ops: AtomicU64,
    pub errors: AtomicU64,
    pub read_lat: Histogram,
    pub write_lat: Histogram,
    /// Requests that waited in the export's throttle group, and their waits (ns).
    pub throttle_delayed: AtomicU64,
    pub throttled_ns: AtomicU64,
    /// The read-ahead's counters, on an export that reads ahead ([`crate::readahead`]).
    pub read_ahead: std::sync::Mutex<Option<Counters>>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Snapshot {
    pub export: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub flush_ops: u64,
    pub trim_ops: u64,
    pub write_zeroes_ops: u64,
    pub errors: u64,
    pub read_lat_mean_ns: u64,
    pub read_lat_p50_ns: u64,
    pub read_lat_p99_ns: u64,
    pub read_lat_p999_ns: u64,
    pub write_lat_mean_ns: u64,
    pub write_lat_p50_ns: u64,
    pub write_lat_p99_ns: u64,
    pub write_lat_p999_ns: u64,
    /// A `cache = "pdc"` export's detection state and bypass counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pdc: Option<PdcSnapshot>,
    /// An export with `[vm.disk.iotune]`: requests delayed and the time they spent throttled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleSnapshot>,
    /// An export with `--read-ahead`: READs served from its windows, READs read from the
    /// device, chunks read ahead, windows dropped for overlapping writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_ahead: Option<Counters>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct ThrottleSnapshot {
    pub delayed: u64,
    pub throttled_ns: u64,
}

impl ExportStats {
    /// The export's read-ahead counters are now `c`.
    pub fn note_read_ahead(&self, c: &Counters) {
        *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner()) = Some(*c);
    }

    pub fn snapshot(&self, export: &str) -> Snapshot {
        let l = |a: &AtomicU64| a.load(Relaxed);
        Snapshot {
            export: export.to_string(),
            read_ops: l(&self.read_ops),
            read_bytes: l(&self.read_bytes),
            write_ops: l(&self.write_ops),
            write_bytes: l(&self.write_bytes),
            flush_ops: l(&self.flush_ops),
            trim_ops: l(&self.trim_ops),
            write_zeroes_ops: l(&self.zero_ops),
            errors: l(&self.errors),
            read_lat_mean_ns: self.read_lat.mean_ns(),
            read_lat_p50_ns: self.read_lat.quantile_ns(0.5),
            read_lat_p99_ns: self.read_lat.quantile_ns(0.99),
            read_lat_p999_ns: self.read_lat.quantile_ns(0.999),
            write_lat_mean_ns: self.write_lat.mean_ns(),
            write_lat_p50_ns: self.write_lat.quantile_ns(0.5),
            write_lat_p99_ns: self.write_lat.quantile_ns(0.99),
            write_lat_p999_ns: self.write_lat.quantile_ns(0.999),
            pdc: None,
            throttle: None,
            read_ahead: *self.read_ahead.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// One line per export, for the shutdown report.
pub fn text(snaps: &[Snapshot]) -> String {
    let mut s = String::from(
        "export            read_ops   read_MB  write_ops  write_MB  flushes  errors  rd_p99_us  wr_p99_us\n",
    );
    for x in snaps {
        s += &format!(
            "{:<16} {:>9} {:>9.1} {:>10} {:>9.1} {:>8} {:>7} {:>10.1} {:>10.1}\n",
            x.export,
            x.read_ops,
            x.read_bytes as f64 / 1e6,
            x.write_ops,
            x.write_bytes as f64 / 1e6,
            x.flush_ops,
            x.errors,
            x.read_lat_p99_ns as f64 / 1e3,
            x.write_lat_p99_ns as f64 / 1e3,
        );
    }
    for (x, p) in snaps.iter().filter_map(|x| Some((x, x.pdc.as_ref()?))) {
        let journals: Vec<String> = p
            .journals
            .iter()
            .map(|j| format!("[{}, {})", j.lo, j.hi))
            .collect();
        s += &format!(
            "{} pdc: journals {}; {} of {} writes bypassed ({:.1} MB); RWF_DONTCACHE {}\n",
            x.export,
            if journals.is_empty() {
                "none".to_string()
            } else {
                journals.join(" ")
            },
            p.detector.bypassed_writes,
            p.detector.writes,
            p.detector.bypassed_bytes as f64 / 1e6,
            if p.dontcache_supported {
                "supported"
            } else {
                "not supported"
            },
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_invert() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            100,
            1000,
            123_456,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            assert!(bucket_low(b) <= v);
            last = b;
        }
    }

    #[test]
    fn percentiles_are_within_an_eighth_of_the_truth() {
        let h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p99 = h.quantile_ns(0.99) as f64;
        assert!((p99 / 990_000.0 - 1.0).abs() < 0.125, "{p99}");
        assert_eq!(h.mean_ns(), 500_500);
        assert_eq!(Histogram::default().quantile_ns(0.5), 0);
    }
}
