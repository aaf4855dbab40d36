//! Latency and throughput accounting in fio's terms.
//!
//! Latencies go into a log-linear histogram with fio's layout (stat.h: FIO_IO_U_PLAT_BITS = 6,
//! 64 buckets per power of two, values in ns): every value below 128 ns has its own bucket,
//! above that the relative bucket width is at most 1/64 (≈1.6 %). Percentiles are read the
//! way fio reads them: the first bucket whose cumulative count reaches p·N, reported at the
//! bucket's midpoint. Mean and standard deviation are exact (Welford).
//!
//! Per job and direction, beside the latencies, what fio's `thread_stat` keeps (fio 3.33
//! `stat.c` `show_thread_status_json`, `add_ddir_status_json`; `io_u.c` `io_u_mark_depth`,
//! `io_u_mark_latency`):
//!
//! ```text
//! depth map   iodepth_level "1" "2" "4" "8" "16" "32" ">=64": the I/Os in flight when one
//!             completes (vmio's stand-in for fio's cur_depth at submission; equal in a
//!             closed loop), bucket = the largest key ≤ depth
//! latency map latency_ns/us/ms: the completion latency, in ns below 1 µs, in µs below
//!             1 ms, else in ms; bucket = the first key > value in its unit ("2" holds 0–1,
//!             "1000" holds 750–999, ms "2000" 1000–1999, ">=2000" the rest)
//! percentages over the job's read+write+trim I/Os
//! bins (json+) every non-empty clat bucket: fio's plat_idx_to_val(idx) -> count
//! samples     per-interval bandwidth and IOPS (sim/samples.rs)
//! ```

use crate::sim::samples::{IoLog, LogConfig, Sampler};
use serde_json::{json, Map, Value};
use vmio_core::Ns;

const PLAT_BITS: u32 = 6;
const PLAT_VAL: u64 = 1 << PLAT_BITS;
const PLAT_GROUP_NR: usize = 29;
const PLAT_NR: usize = PLAT_GROUP_NR * PLAT_VAL as usize;

/// fio's default `percentile_list`.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

#[inline]
fn val_to_idx(v: u64) -> usize {
    let msb = if v == 0 { 0 } else { 63 - v.leading_zeros() };
    if msb <= PLAT_BITS {
        return v as usize;
    }
    let error_bits = msb - PLAT_BITS;
    let base = ((error_bits + 1) as usize) << PLAT_BITS;
    let offset = ((PLAT_VAL - 1) & (v >> error_bits)) as usize;
    (base + offset).min(PLAT_NR - 1)
}

fn idx_to_val(idx: usize) -> u64 {
    if idx < (PLAT_VAL << 1) as usize {
        return idx as u64;
    }
    let error_bits = (idx >> PLAT_BITS) as u32 - 1;
    let base = 1u64 << (error_bits + PLAT_BITS);
    let k = (idx as u64) % PLAT_VAL;
    base + ((k as f64 + 0.5) * (1u64 << error_bits) as f64) as u64
}

/// Counts in fio's latency buckets alone (no count, minimum, maximum or sums): the
/// histogram of a figure whose count and sum are kept beside it (sim/breakdown.rs), one
/// increment a value.
#[derive(Clone)]
pub struct Buckets(Box<[u64; PLAT_NR]>);

impl Default for Buckets {
    fn default() -> Self {
        Buckets(Box::new([0; PLAT_NR]))
    }
}

impl Buckets {
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.0[val_to_idx(v)] += 1;
    }

    /// The values recorded.
    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    pub fn merge(&mut self, o: &Buckets) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }

    /// The `k`-th smallest value recorded (1-based), read as fio reads a percentile: its
    /// bucket's value; 0 when fewer than `k` were recorded.
    pub fn nth(&self, k: u64) -> u64 {
        let mut acc = 0;
        for (i, &c) in self.0.iter().enumerate() {
            acc += c;
            if acc >= k {
                return idx_to_val(i);
            }
        }
        0
    }
}

#[derive(Clone)]
pub struct LatencyStats {
    buckets: Box<[u64]>,
    n: u64,
    min: u64,
    max: u64,
    sum: u128,
    sum_sq: u128,
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self {
            buckets: vec![0; PLAT_NR].into_boxed_slice(),
            n: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
            sum_sq: 0,
        }
    }
}

impl LatencyStats {
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.buckets[val_to_idx(v)] += 1;
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v as u128;
        self.sum_sq += v as u128 * v as u128;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Add another job's latencies (group_reporting): counts, sums and buckets add up.
    pub fn merge(&mut self, o: &LatencyStats) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets.iter()) {
            *a += b;
        }
        self.n += o.n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }

    /// fio's json+ `bins`: every non-empty bucket's value and count.
    fn bins(&self) -> Map<String, Value> {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| (idx_to_val(i).to_string(), json!(c)))
            .collect()
    }
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }
    pub fn stddev(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        // Exact integer sums: n·Σv² − (Σv)² ≥ 0.
        let n = self.n as u128;
        let num = n * self.sum_sq - self.sum * self.sum;
        ((num as f64) / (n as f64 * (n - 1) as f64)).sqrt()
    }

    pub fn percentile(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let target = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            acc += c;
            if acc >= target {
                return idx_to_val(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// fio's JSON object for a latency (`clat_ns` etc.), with json+'s `bins` when asked.
    pub fn to_json_plus(&self, with_percentiles: bool) -> Value {
        let mut v = self.to_json(with_percentiles);
        if self.n > 0 {
            v["bins"] = Value::Object(self.bins());
        }
        v
    }

    /// fio's JSON object for a latency (`clat_ns` etc.).
    pub fn to_json(&self, with_percentiles: bool) -> Value {
        let mut m = Map::new();
        m.insert("min".into(), json!(if self.n == 0 { 0 } else { self.min }));
        m.insert("max".into(), json!(self.max));
        m.insert("mean".into(), json!(round6(self.mean())));
        m.insert("stddev".into(), json!(round6(self.stddev())));
        m.insert("N".into(), json!(self.n));
        if with_percentiles && self.n > 0 {
            let mut p = Map::new();
            for q in FIO_PERCENTILES {
                p.insert(format!("{q:.6}"), json!(self.percentile(q)));
            }
            m.insert("percentile".into(), Value::Object(p));
        }
        Value::Object(m)
    }
}

pub fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// fio's `iodepth_level` keys (`io_u_map`).
pub const DEPTH_KEYS: [&str; 7] = ["1", "2", "4", "8", "16", "32", ">=64"];
/// fio's `iodepth_submit`/`iodepth_complete` keys (I/Os per submit/reap call).
pub const BATCH_KEYS: [&str; 7] = ["0", "4", "8", "16", "32", "64", ">=64"];
/// Upper bounds (exclusive) of fio's latency buckets in one unit; ms adds "2000" and ">=2000".
const LAT_BOUNDS: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
/// Number of latency buckets: 10 ns, 10 µs, 12 ms.
const LAT_NR: usize = 32;

/// The depth's bucket: the largest key at or below it, i.e. floor(log2(depth)) (0 for 0 and
/// 1) up to ">=64", from the leading zeros (no chain of compares).
#[inline]
fn depth_index(depth: u32) -> usize {
    ((31 - (depth | 1).leading_zeros()) as usize).min(6)
}

/// A latency's bucket among the 32 (ns, then µs, then ms).
fn lat_index(ns: u64) -> usize {
    let within = |v: u64| LAT_BOUNDS.iter().position(|&b| v < b);
    if ns < 1_000 {
        within(ns).unwrap_or(9)
    } else if ns < 1_000_000 {
        10 + within(ns / 1_000).unwrap_or(9)
    } else {
        let ms = ns / 1_000_000;
        20 + within(ms).unwrap_or(if ms < 2_000 { 10 } else { 11 })
    }
}

/// Per-direction counters of one job (fio's `read`/`write`/`trim`/`sync` objects).
#[derive(Clone, Default)]
pub struct DirStats {
    pub io_bytes: u64,
    pub total_ios: u64,
    pub slat: LatencyStats,
    pub clat: LatencyStats,
    pub lat: LatencyStats,
    /// Per-interval bandwidth and IOPS samples.
    pub samples: Sampler,
    /// I/Os by depth bucket ([`DEPTH_KEYS`]).
    pub depth: [u64; 7],
    /// I/Os by completion latency bucket (ns, µs, ms).
    pub lat_map: [u64; LAT_NR],
    /// The lines of the job's `write_*_log`s, when it asked for any.
    pub log: Option<Box<IoLog>>,
}

/// A job's four directions (read, write, trim, sync) sampled as its options ask, or one
/// line naming a bad log option.
pub fn job_stats(spec: &vmio_core::fio::JobSpec) -> Result<[DirStats; 4], String> {
    let c = LogConfig::of(spec)?;
    Ok(std::array::from_fn(|_| DirStats {
        samples: c.sampler(),
        log: IoLog::new(&c),
        ..DirStats::default()
    }))
}

impl DirStats {
    /// An I/O of `bytes` completed `at_ns` after the job's measured start with `depth` I/Os
    /// in flight (itself included).
    #[inline]
    pub fn record(&mut self, at_ns: Ns, depth: u32, bytes: u64, slat_ns: u64, clat_ns: u64) {
        self.io_bytes += bytes;
        self.total_ios += 1;
        self.slat.record(slat_ns);
        self.clat.record(clat_ns);
        self.lat.record(slat_ns + clat_ns);
        self.samples.record(at_ns, bytes, clat_ns);
        if let Some(log) = &mut self.log {
            log.record(at_ns, bytes, slat_ns, clat_ns);
        }
        self.depth[depth_index(depth)] += 1;
        self.lat_map[lat_index(clat_ns)] += 1;
    }

    /// Add a job of the same group (fio's `sum_thread_stats`).
    pub fn merge(&mut self, o: &DirStats) {
        self.io_bytes += o.io_bytes;
        self.total_ios += o.total_ios;
        self.slat.merge(&o.slat);
        self.clat.merge(&o.clat);
        self.lat.merge(&o.lat);
        self.samples.bw.add_group_member(&o.samples.bw);
        self.samples.iops.add_group_member(&o.samples.iops);
        for (a, b) in self.depth.iter_mut().zip(o.depth) {
            *a += b;
        }
        for (a, b) in self.lat_map.iter_mut().zip(o.lat_map) {
            *a += b;
        }
    }

    pub fn bw_bytes(&self, runtime_ns: u64) -> u64 {
        if runtime_ns == 0 {
            0
        } else {
            (self.io_bytes as u128 * 1_000_000_000 / runtime_ns as u128) as u64
        }
    }

    /// fio's JSON object for one direction; `agg_bytes_s` is the group's aggregate
    /// bandwidth of this direction (fio's `group_run_stats.agg`, for `bw_agg`).
    pub fn to_json(&self, runtime_ns: u64, agg_bytes_s: u64) -> Value {
        let bw_bytes = self.bw_bytes(runtime_ns);
        let iops = if runtime_ns == 0 {
            0.0
        } else {
            self.total_ios as f64 * 1e9 / runtime_ns as f64
        };
        let (bw, io) = (&self.samples.bw, &self.samples.iops);
        // convert_agg_kbytes_percent: the mean sample over the group's KiB/s, at most 100.
        let bw_agg = match bw.samples {
            0 => 0.0,
            _ if agg_bytes_s > 1024 => (bw.mean * 100.0 / (agg_bytes_s as f64 / 1024.0)).min(100.0),
            _ => 100.0,
        };
        json!({
            "io_bytes": self.io_bytes,
            "io_kbytes": self.io_bytes / 1024,
            "bw_bytes": bw_bytes,
            "bw": bw_bytes / 1024,
            "iops": round6(iops),
            "runtime": if self.total_ios > 0 { runtime_ns / 1_000_000 } else { 0 },
            "total_ios": self.total_ios,
            "short_ios": 0,
            "drop_ios": 0,
            "slat_ns": self.slat.to_json(false),
            "clat_ns": self.clat.to_json_plus(true),
            "lat_ns": self.lat.to_json(false),
            "bw_min": bw.min,
            "bw_max": bw.max,
            "bw_agg": round6(bw_agg),
            "bw_mean": round6(bw.mean),
            "bw_dev": round6(bw.stddev()),
            "bw_samples": bw.samples,
            "iops_min": io.min,
            "iops_max": io.max,
            "iops_mean": round6(io.mean),
            "iops_stddev": round6(io.stddev()),
            "iops_samples": io.samples
        })
    }
}

/// A job's `iodepth_level`, `iodepth_submit`, `iodepth_complete`, `latency_ns`,
/// `latency_us` and `latency_ms` over its read, write and trim directions. vmio submits
/// and reaps one I/O per call, so every I/O is in the "4" (1 to 4) batch bucket.
pub fn depth_and_latency_json(dirs: &[DirStats]) -> Map<String, Value> {
    let total: u64 = dirs.iter().map(|d| d.total_ios).sum();
    let pct = |c: u64| {
        round6(if total == 0 {
            0.0
        } else {
            100.0 * c as f64 / total as f64
        })
    };
    let obj = |keys: &[String], counts: &[u64]| -> Value {
        Value::Object(
            keys.iter()
                .zip(counts)
                .map(|(k, &c)| (k.clone(), json!(pct(c))))
                .collect(),
        )
    };
    let strings = |keys: &[&str]| -> Vec<String> { keys.iter().map(|k| k.to_string()).collect() };
    let sum = |f: &dyn Fn(&DirStats) -> &[u64]| -> Vec<u64> {
        let n = f(&dirs[0]).len();
        (0..n).map(|i| dirs.iter().map(|d| f(d)[i]).sum()).collect()
    };
    let depth = sum(&|d| &d.depth);
    let lat = sum(&|d| &d.lat_map);
    let batch = [0, total, 0, 0, 0, 0, 0];
    let lat_keys: Vec<String> = LAT_BOUNDS.iter().map(u64::to_string).collect();
    let ms_keys: Vec<String> = lat_keys
        .iter()
        .cloned()
        .chain(["2000".to_string(), ">=2000".to_string()])
        .collect();
    let mut m = Map::new();
    m.insert("iodepth_level".into(), obj(&strings(&DEPTH_KEYS), &depth));
    m.insert("iodepth_submit".into(), obj(&strings(&BATCH_KEYS), &batch));
    m.insert(
        "iodepth_complete".into(),
        obj(&strings(&BATCH_KEYS), &batch),
    );
    m.insert("latency_ns".into(), obj(&lat_keys, &lat[..10]));
    m.insert("latency_us".into(), obj(&lat_keys, &lat[10..20]));
    m.insert("latency_ms".into(), obj(&ms_keys, &lat[20..]));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_have_exact_buckets_and_large_ones_are_within_two_percent() {
        for v in [0u64, 1, 63, 127] {
            assert_eq!(idx_to_val(val_to_idx(v)), v);
        }
        for v in [1_000u64, 123_456, 8_333_333, 10_000_000_000] {
            let back = idx_to_val(val_to_idx(v)) as f64;
            assert!((back - v as f64).abs() / v as f64 <= 0.02, "{v} -> {back}");
        }
    }

    #[test]
    fn percentiles_of_a_uniform_ramp_are_where_expected() {
        let mut s = LatencyStats::default();
        for v in 1..=10_000u64 {
            s.record(v * 1000);
        }
        let p50 = s.percentile(50.0) as f64;
        let p99 = s.percentile(99.0) as f64;
        assert!((p50 - 5_000_000.0).abs() / 5e6 < 0.02, "{p50}");
        assert!((p99 - 9_900_000.0).abs() / 9.9e6 < 0.02, "{p99}");
        assert!((s.mean() - 5_000_500.0).abs() < 1.0);
        assert_eq!(s.percentile(100.0), 10_000_000);
    }

    #[test]
    fn a_latency_lands_in_fio_s_bucket_of_its_unit() {
        // (value ns, bucket): ns "2" holds 0-1, µs "100" 50-99 µs, ms "2" 1-1.999 ms,
        // ms "2000" 1-1.999 s, ">=2000" the rest.
        for (ns, idx) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (999, 9),
            (1_000, 10),
            (78_366, 15),
            (999_999, 19),
            (1_367_770, 20),
            (1_500_000_000, 30),
            (2_000_000_000, 31),
        ] {
            assert_eq!(lat_index(ns), idx, "{ns}");
        }
        assert_eq!(
            [1, 2, 3, 4, 63, 64, 1000].map(depth_index),
            [0, 1, 1, 2, 5, 6, 6]
        );
        // Every depth's bucket is the largest key at or below it.
        let keys = [1u32, 2, 4, 8, 16, 32, 64];
        for d in (0..=4096).chain([u32::MAX]) {
            let want = keys.iter().rposition(|&k| k <= d.max(1)).unwrap();
            assert_eq!(depth_index(d), want, "{d}");
        }
    }

    #[test]
    fn stddev_matches_the_closed_form() {
        let mut s = LatencyStats::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            s.record(v);
        }
        assert!((s.stddev() - 2.13809).abs() < 1e-4);
    }
}

/// S1's error rate of a bandwidth distribution, in percent.
///
/// The VM with the smallest weight is the reference (TVM). For every other VM i, the ideal
/// ratio is `w_i / w_tvm` and the measured one `bw_i / bw_tvm`; the error rate is the mean of
/// `|measured − ideal| / ideal` over those VMs, × 100. Example: weights 10:7:4:1 measured as
/// 10.3:7.6:4.4:1 give (3 % + 8.6 % + 10 %) / 3 = 7.2 %. `None` when there are fewer than two
/// VMs or the reference VM moved no data.
pub fn s1_error_rate_pct(weights: &[u32], bw: &[f64]) -> Option<f64> {
    if weights.len() < 2 || weights.len() != bw.len() {
        return None;
    }
    let tvm = (0..weights.len()).min_by_key(|&i| (weights[i], i))?;
    if bw[tvm] <= 0.0 {
        return None;
    }
    let others: Vec<usize> = (0..weights.len()).filter(|&i| i != tvm).collect();
    let sum: f64 = others
        .iter()
        .map(|&i| {
            let ideal = weights[i] as f64 / weights[tvm] as f64;
            let measured = bw[i] / bw[tvm];
            (measured - ideal).abs() / ideal
        })
        .sum();
    Some(100.0 * sum / others.len() as f64)
}

/// Jain's fairness index of weight-normalized bandwidth `x_i = bw_i / w_i`:
/// `(Σx)² / (n·Σx²)`, 1 when every VM gets exactly its weight's share, 1/n at worst.
pub fn jain_index(weights: &[u32], bw: &[f64]) -> Option<f64> {
    if weights.is_empty() || weights.len() != bw.len() {
        return None;
    }
    let x: Vec<f64> = weights
        .iter()
        .zip(bw)
        .map(|(&w, &b)| b / w.max(1) as f64)
        .collect();
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    (s2 > 0.0).then(|| s * s / (x.len() as f64 * s2))
}

#[cfg(test)]
mod share_tests {
    use super::*;

    #[test]
    fn the_error_rate_of_the_mcfq_paper_ratio_is_as_computed_by_hand() {
        let e = s1_error_rate_pct(&[10, 7, 4, 1], &[10.3, 7.6, 4.4, 1.0]).unwrap();
        assert!((e - (3.0 + 60.0 / 7.0 + 10.0) / 3.0).abs() < 1e-9, "{e}");
        assert_eq!(s1_error_rate_pct(&[5, 5], &[3.0, 3.0]), Some(0.0));
        assert_eq!(s1_error_rate_pct(&[5, 1], &[3.0, 0.0]), None);
    }

    #[test]
    fn jain_is_one_for_weight_proportional_shares_and_one_over_n_at_worst() {
        assert!((jain_index(&[10, 7, 4, 1], &[10.0, 7.0, 4.0, 1.0]).unwrap() - 1.0).abs() < 1e-12);
        let worst = jain_index(&[1, 1, 1, 1], &[1.0, 0.0, 0.0, 0.0]).unwrap();
        assert!((worst - 0.25).abs() < 1e-12);
    }
}
