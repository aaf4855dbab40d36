//! Latency and throughput accounting in fio's terms.
//!
//! Latencies go into a log-linear histogram with fio's layout (stat.h: FIO_IO_U_PLAT_BITS = 6,
//! 64 buckets per power of two, values in ns): every value below 128 ns has its own bucket,
//! above that the relative bucket width is at most 1/64 (≈1.6 %). Percentiles are read the
//! way fio reads them: the first bucket whose cumulative count reaches p·N, reported at the
//! bucket's midpoint. Mean and standard deviation are exact (Welford).

use serde_json::{json, Map, Value};

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

/// Per-direction counters of one job (fio's `read`/`write`/`trim`/`sync` objects).
#[derive(Clone, Default)]
pub struct DirStats {
    pub io_bytes: u64,
    pub total_ios: u64,
    pub slat: LatencyStats,
    pub clat: LatencyStats,
    pub lat: LatencyStats,
}

impl DirStats {
    #[inline]
    pub fn record(&mut self, bytes: u64, slat_ns: u64, clat_ns: u64) {
        self.io_bytes += bytes;
        self.total_ios += 1;
        self.slat.record(slat_ns);
        self.clat.record(clat_ns);
        self.lat.record(slat_ns + clat_ns);
    }

    pub fn bw_bytes(&self, runtime_ns: u64) -> u64 {
        if runtime_ns == 0 {
            0
        } else {
            (self.io_bytes as u128 * 1_000_000_000 / runtime_ns as u128) as u64
        }
    }

    /// fio's JSON object for one direction.
    pub fn to_json(&self, runtime_ns: u64) -> Value {
        let bw_bytes = self.bw_bytes(runtime_ns);
        let iops = if runtime_ns == 0 {
            0.0
        } else {
            self.total_ios as f64 * 1e9 / runtime_ns as f64
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
            "clat_ns": self.clat.to_json(true),
            "lat_ns": self.lat.to_json(false),
            "bw_min": bw_bytes / 1024,
            "bw_max": bw_bytes / 1024,
            "bw_agg": if self.total_ios > 0 { 100.0 } else { 0.0 },
            "bw_mean": (bw_bytes / 1024) as f64,
            "bw_dev": 0.0,
            "bw_samples": 0,
            "iops_min": iops as u64,
            "iops_max": iops as u64,
            "iops_mean": round6(iops),
            "iops_stddev": 0.0,
            "iops_samples": 0
        })
    }
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
