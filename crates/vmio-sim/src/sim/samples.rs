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
//!
//! Logs (`write_bw_log`, `write_iops_log`, `write_lat_log`; fio 3.33 `init.c`
//! `setup_log`s, `stat.c` `add_log_sample`/`__add_stat_to_log`/`add_bw_sample`, `io_u.c`
//! `account_io_completion`, `iolog.c` `flush_samples`; file names and lines checked against
//! the installed fio):
//!
//! ```text
//! file  <prefix>_bw.<N>.log, _iops, and for lat: _lat, _clat, _slat; prefix = the option's
//!       value, else the job's name; N = the job's number (1-based, clones included)
//! line  "time_ms, value, ddir, bs, 0" (the last column: priority, 0)
//! log_avg_msec = 0: one line per I/O: bw = bytes · 10⁶ / clat_ns, iops = 1, lat/clat/slat
//!       in ns, bs = the I/O's size; bw_stat and iops_stat (the JSON's bw_* and iops_*)
//!       take these per-I/O values instead of interval samples, as fio's do
//! log_avg_msec = m > 0: bw and iops intervals become m ms (min(m, bw_avg_time) when
//!       bw_avg_time is set), one line per interval with data (time = its end, bs 0); lat
//!       lines: per m-ms window with I/Os, the mean latency rounded (time = the window's end)
//! ```

use vmio_core::fio::JobSpec;
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
    /// what fio's `write_bw_log`/`write_iops_log` print at `log_avg_msec`; kept only for
    /// such a log ([`Sampler::logged`]), as it grows with the run.
    pub intervals: Vec<(Ns, u64, u64)>,
    keep_intervals: bool,
    /// More intervals than [`MAX_LOG_LINES`] had data: the later ones were not kept.
    intervals_overflowed: bool,
    /// A per-I/O bandwidth/IOPS log (`log_avg_msec=0`): samples are per I/O.
    per_io: bool,
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
            keep_intervals: false,
            intervals_overflowed: false,
            per_io: false,
        }
    }

    /// The same sampler keeping its intervals for a bandwidth or IOPS log.
    pub fn logged(mut self) -> Self {
        self.keep_intervals = true;
        self
    }

    /// A completion of `bytes` at `at_ns` from the measured start, `clat_ns` after its
    /// submission.
    pub fn record(&mut self, at_ns: Ns, bytes: u64, clat_ns: Ns) {
        if self.per_io {
            self.bw.add(per_io_bw(bytes, clat_ns));
            self.iops.add(1);
            return;
        }
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
        if self.keep_intervals {
            if self.intervals.len() < MAX_LOG_LINES {
                self.intervals.push((self.end_ns, kib_s, iops));
            } else {
                self.intervals_overflowed = true;
            }
        }
        self.bytes = 0;
        self.ios = 0;
    }
}

/// fio's per-I/O bandwidth (`add_bw_sample`): bytes · 10⁶ / clat ns, 0 for no time.
fn per_io_bw(bytes: u64, clat_ns: Ns) -> u64 {
    (u128::from(bytes) * 1_000_000)
        .checked_div(u128::from(clat_ns))
        .map_or(0, |r| r as u64)
}

/// A job's log options, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// Prefixes of the bandwidth, IOPS and latency logs asked for.
    pub bw: Option<String>,
    pub iops: Option<String>,
    pub lat: Option<String>,
    /// `log_avg_msec`.
    pub avg_ms: u64,
    /// The bandwidth/IOPS interval (`bw_avg_time`, 500 ms by default).
    pub interval_ms: u64,
}

impl LogConfig {
    /// The log options of `spec` (its section over its `[global]`), or one line naming a
    /// value that is not a number of milliseconds.
    pub fn of(spec: &JobSpec) -> Result<Self, String> {
        let w = &spec.written;
        let find = |name: &str| {
            let last = |o: &[(String, Option<String>)]| {
                o.iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            last(&w.own).or_else(|| last(&w.global))
        };
        let ms = |name: &str| -> Result<Option<u64>, String> {
            match find(name) {
                None => Ok(None),
                Some(v) => {
                    let text = v.unwrap_or_default();
                    text.trim().parse().map(Some).map_err(|_| {
                        format!(
                            "job '{}': {name}: '{text}' is not valid; accepted: a whole number of milliseconds",
                            spec.name
                        )
                    })
                }
            }
        };
        let prefix = |name: &str| find(name).map(|v| v.unwrap_or_else(|| spec.name.clone()));
        let avg_ms = ms("log_avg_msec")?.unwrap_or(0);
        let bw_avg = ms("bw_avg_time")?;
        let bw = prefix("write_bw_log");
        let interval_ms = match (bw.is_some() && avg_ms > 0, bw_avg) {
            (true, Some(b)) => avg_ms.min(b),
            (true, None) => avg_ms,
            (false, b) => b.unwrap_or(AVG_NS / vmio_core::MS),
        };
        Ok(Self {
            bw,
            iops: prefix("write_iops_log"),
            lat: prefix("write_lat_log"),
            avg_ms,
            interval_ms: interval_ms.max(1),
        })
    }

    /// The job's sampler: its interval, per I/O when a bandwidth or IOPS log is per I/O.
    pub fn sampler(&self) -> Sampler {
        let mut s = Sampler::new(self.interval_ms * vmio_core::MS);
        let logged = self.bw.is_some() || self.iops.is_some();
        s.per_io = self.avg_ms == 0 && logged;
        if logged {
            s = s.logged();
        }
        s
    }
}

/// The kinds of log line a direction keeps: bw, iops, lat, clat, slat.
pub const LOG_KINDS: [&str; 5] = ["bw", "iops", "lat", "clat", "slat"];

/// Most lines one direction of a job keeps for one kind of log (24 MiB of them). fio writes
/// its logs as it goes; vmio holds them until the run ends, so a per-I/O log (`log_avg_msec=0`)
/// of a long run would grow with its I/O count: past this many lines the log stops growing
/// ([`IoLog::overflowed`]) and the run is refused after it, naming the job and the option.
pub const MAX_LOG_LINES: usize = 1_000_000;

/// One direction's log lines, (time ms, value, bs) per kind of [`LOG_KINDS`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoLog {
    pub lines: [Vec<(u64, u64, u64)>; 5],
    /// A kind of log reached [`MAX_LOG_LINES`]: later lines were dropped.
    pub overflowed: bool,
    per_io: bool,
    lat: bool,
    avg_ms: u64,
    /// The open latency window: its end (ms), and sums of lat, clat, slat, and the count.
    window_end_ms: u64,
    sums: [u128; 3],
    n: u64,
}

impl IoLog {
    /// The log of a job asking for one (None: no log asked for).
    pub fn new(c: &LogConfig) -> Option<Box<Self>> {
        (c.bw.is_some() || c.iops.is_some() || c.lat.is_some()).then(|| {
            Box::new(Self {
                per_io: c.avg_ms == 0,
                lat: c.lat.is_some(),
                avg_ms: c.avg_ms,
                window_end_ms: c.avg_ms,
                ..Self::default()
            })
        })
    }

    /// An I/O completed (times in ns, `at_ns` from the measured start).
    pub fn record(&mut self, at_ns: Ns, bytes: u64, slat_ns: Ns, clat_ns: Ns) {
        let t = at_ns / vmio_core::MS;
        let lats = [slat_ns + clat_ns, clat_ns, slat_ns];
        if self.per_io {
            self.push(0, (t, per_io_bw(bytes, clat_ns), bytes));
            self.push(1, (t, 1, bytes));
            if self.lat {
                for (k, v) in lats.into_iter().enumerate() {
                    self.push(2 + k, (t, v, bytes));
                }
            }
            return;
        }
        if !self.lat {
            return;
        }
        if t >= self.window_end_ms {
            self.close_window();
            self.window_end_ms = (t / self.avg_ms + 1) * self.avg_ms;
        }
        for (s, v) in self.sums.iter_mut().zip(lats) {
            *s += u128::from(v);
        }
        self.n += 1;
    }

    /// The run's measured window ended: the open latency window is logged if it has I/Os;
    /// averaged bandwidth and IOPS lines are the sampler's intervals.
    pub fn finish(&mut self, sampler: &Sampler) {
        if self.per_io {
            return;
        }
        self.close_window();
        self.overflowed |= sampler.intervals_overflowed;
        for &(end, kib_s, iops) in &sampler.intervals {
            self.push(0, (end / vmio_core::MS, kib_s, 0));
            self.push(1, (end / vmio_core::MS, iops, 0));
        }
    }

    /// Add a line of kind `k`, unless that log is full ([`MAX_LOG_LINES`]).
    fn push(&mut self, k: usize, line: (u64, u64, u64)) {
        if self.lines[k].len() >= MAX_LOG_LINES {
            self.overflowed = true;
            return;
        }
        self.lines[k].push(line);
    }

    fn close_window(&mut self) {
        if self.n == 0 {
            return;
        }
        let n = u128::from(self.n);
        for k in 0..3 {
            // fio: the window's mean + 0.5, truncated.
            let mean = ((self.sums[k] * 2 + n) / (2 * n)) as u64;
            self.push(2 + k, (self.window_end_ms, mean, 0));
        }
        self.sums = [0; 3];
        self.n = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmio_core::MS;

    #[test]
    fn a_per_io_log_stops_at_its_line_limit_and_says_it_overflowed() {
        let c = LogConfig {
            bw: Some("j".into()),
            ..LogConfig::default()
        };
        let mut log = IoLog::new(&c).unwrap();
        for i in 0..MAX_LOG_LINES as u64 {
            log.record(i * MS, 4096, 0, 1000);
        }
        assert!(!log.overflowed);
        log.record(u64::MAX / 2, 4096, 0, 1000);
        assert!(log.overflowed);
        assert_eq!(log.lines[0].len(), MAX_LOG_LINES);
        assert_eq!(log.lines[1].len(), MAX_LOG_LINES);
    }

    #[test]
    fn a_steady_4k_stream_gives_one_sample_per_full_half_second_at_its_rate() {
        // 1,000 I/Os of 4 KiB per second for 1.2 s: two full intervals, the partial third
        // is dropped as fio drops it.
        let mut s = Sampler::default();
        for i in 0..1200u64 {
            s.record(i * MS, 4096, MS);
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
        let mut s = Sampler::default().logged();
        s.record(10 * MS, 4096, MS);
        s.record(1600 * MS, 4096, MS);
        s.finish(2000 * MS);
        assert_eq!(s.bw.samples, 2);
        assert_eq!(
            s.intervals.iter().map(|i| i.0 / MS).collect::<Vec<_>>(),
            [500, 2000]
        );
    }
}
