//! Per-interval bandwidth and IOPS samples of a job, in simulated time, as fio takes them.
//!
//! Sources: fio 3.33 `stat.c` `__add_samples` (one sample per direction and interval, only
//! when the direction moved data in it; KiB/s for bandwidth, I/Os per second for IOPS),
//! `add_stat_sample` (Welford's running mean and sum of squares), `calc_lat` (stddev =
//! √(S / (n − 1))), `sum_stat` with `pure_sum` (group_reporting adds the members' min, max,
//! mean, S and sample counts), `convert_agg_kbytes_percent` (`bw_agg`); `HOWTO.rst`
//! `bw_avg_time`/`iops_avg_time` (default 500 ms).
//!
//! ```text
//! interval k = [k·avg, (k+1)·avg) of the job's measured window (from start + ramp)
//! a completion at t ≥ end of the open interval closes it first:
//!     bytes > 0 → bw sample  = bytes · 1000 / avg_ms / 1024   (integer, KiB/s)
//!                 iops sample = ios · 1000 / avg_ms            (integer)
//!     empty intervals give no sample; the next open interval is the one holding t
//! the end of the run closes the open interval only when it is full (fio drops the
//!     partial last one: its timer never fires for it)
//! ```

use vmio_core::Ns;

/// fio's default `bw_avg_time` and `iops_avg_time`.
pub const AVG_NS: Ns = 500 * vmio_core::MS;

/// fio's `struct io_stat` for samples: count, min, max, running mean and sum of squared
/// deviations (Welford).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleStats {
    pub samples: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    s: f64,
}

impl SampleStats {
    pub fn add(&mut self, v: u64) {
        if self.samples == 0 {
            self.min = v;
            self.max = v;
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.samples += 1;
        let delta = v as f64 - self.mean;
        self.mean += delta / self.samples as f64;
        self.s += delta * (v as f64 - self.mean);
    }

    /// group_reporting's merge (`sum_stat` with `pure_sum`): every field adds up, so the
    /// group's mean is the sum of its members' mean rates.
    pub fn add_group_member(&mut self, o: &SampleStats) {
        if o.samples == 0 {
            return;
        }
        if self.samples == 0 {
            *self = o.clone();
            return;
        }
        self.min += o.min;
        self.max += o.max;
        self.samples += o.samples;
        self.mean += o.mean;
        self.s += o.s;
    }

    /// Sample standard deviation, 0 below two samples (`calc_lat`).
    pub fn stddev(&self) -> f64 {
        if self.samples < 2 {
            0.0
        } else {
            (self.s / (self.samples - 1) as f64).sqrt()
        }
    }
}

/// One direction's open interval and its samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampler {
    avg_ns: Ns,
    /// End of the open interval, ns from the measured start.
    end_ns: Ns,
    bytes: u64,
    ios: u64,
    pub bw: SampleStats,
    pub iops: SampleStats,
    /// Every closed interval with data: (end ns from the measured start, KiB/s, IOPS),
    /// what fio's `write_bw_log`/`write_iops_log` print at `log_avg_msec`.
    pub intervals: Vec<(Ns, u64, u64)>,
}

impl Default for Sampler {
    fn default() -> Self {
        Self::new(AVG_NS)
    }
}

impl Sampler {
    pub fn new(avg_ns: Ns) -> Self {
        Self {
            avg_ns: avg_ns.max(vmio_core::MS),
            end_ns: avg_ns.max(vmio_core::MS),
            bytes: 0,
            ios: 0,
            bw: SampleStats::default(),
            iops: SampleStats::default(),
            intervals: Vec::new(),
        }
    }

    /// A completion of `bytes` at `at_ns` from the measured start.
    pub fn record(&mut self, at_ns: Ns, bytes: u64) {
        if at_ns >= self.end_ns {
            self.close();
            self.end_ns = (at_ns / self.avg_ns + 1) * self.avg_ns;
        }
        self.bytes += bytes;
        self.ios += 1;
    }

    /// The run's measured window ended at `runtime_ns`: the open interval counts if full.
    pub fn finish(&mut self, runtime_ns: Ns) {
        if runtime_ns >= self.end_ns {
            self.close();
            self.end_ns = Ns::MAX;
        }
    }

    fn close(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let ms = self.avg_ns / vmio_core::MS;
        let kib_s = self.bytes * 1000 / ms / 1024;
        let iops = self.ios * 1000 / ms;
        self.bw.add(kib_s);
        self.iops.add(iops);
        self.intervals.push((self.end_ns, kib_s, iops));
        self.bytes = 0;
        self.ios = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmio_core::MS;

    #[test]
    fn a_steady_4k_stream_gives_one_sample_per_full_half_second_at_its_rate() {
        // 1,000 I/Os of 4 KiB per second for 1.2 s: two full intervals, the partial third
        // is dropped as fio drops it.
        let mut s = Sampler::default();
        for i in 0..1200u64 {
            s.record(i * MS, 4096);
        }
        s.finish(1200 * MS);
        assert_eq!(s.bw.samples, 2);
        assert_eq!((s.bw.min, s.bw.max), (4000, 4000));
        assert_eq!((s.iops.min, s.iops.max), (1000, 1000));
        assert_eq!(s.bw.stddev(), 0.0);
    }

    #[test]
    fn sample_stddev_is_the_n_minus_one_closed_form_and_groups_add_their_means() {
        let mut a = SampleStats::default();
        for v in [2u64, 4, 4, 4, 5, 5, 7, 9] {
            a.add(v);
        }
        assert!((a.mean - 5.0).abs() < 1e-12);
        assert!((a.stddev() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        let mut g = a.clone();
        g.add_group_member(&a);
        assert_eq!((g.samples, g.min, g.max), (16, 4, 18));
        assert!((g.mean - 10.0).abs() < 1e-12);
    }

    #[test]
    fn an_idle_interval_gives_no_sample() {
        let mut s = Sampler::default();
        s.record(10 * MS, 4096);
        s.record(1600 * MS, 4096);
        s.finish(2000 * MS);
        assert_eq!(s.bw.samples, 2);
        assert_eq!(
            s.intervals.iter().map(|i| i.0 / MS).collect::<Vec<_>>(),
            [500, 2000]
        );
    }
}
