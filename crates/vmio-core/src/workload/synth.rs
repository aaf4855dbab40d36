//! Synthetic block traces shaped like the MSN, Exchange and Financial traces of S1 (docs/references.md)
//! (the real traces cannot be downloaded here). Open loop: each request carries its issue
//! time (as a workload: [`super::Paced`] with [`super::Pacing::Open`]). [`write_spc_csv`] writes a stream in UMass/SPC CSV so it can go through the real
//! trace replay path.
//!
//! What is matched to the table (S1, docs/references.md): the write/read ratio and the mean request size
//! (KB read as KiB). Everything else is a stated assumption, not a measurement of the traces:
//!
//! | profile | W/R | mean size | mean rate | hot region | seq. prob. |
//! |---|---|---|---|---|---|
//! | MSN | 66.7 | 22.5 KiB | 300 IOPS | 10 % of space, 60 % of random accesses | 0.30 |
//! | Exchange | 1.5 | 12.5 KiB | 500 IOPS | 20 % of space, 80 % | 0.20 |
//! | Financial | 0.24 | 2.38 KiB | 122 IOPS (Financial1: 5.33 M requests in 12.1 h) | 5 %, 90 % | 0.05 |
//!
//! - **Write/read ratio by request count**: each request is a write with probability
//!   R / (1 + R). Reads and writes draw sizes from the same distribution, so the ratio holds
//!   for bytes too (in expectation).
//! - **Sizes**: 512 B * 2^k, k = 0..=8 (512 B .. 128 KiB), with weights proportional to
//!   theta^k; theta is solved (bisection) so the mean is exactly the table's.
//! - **Arrivals**: a two-state MMPP. ON and OFF states last exponential times with means
//!   `on_fraction * cycle` and `(1 - on_fraction) * cycle` (cycle 1 s, on_fraction 0.25);
//!   the ON rate is `burst_ratio` (8) times the OFF rate; both are set so the long-run mean
//!   rate is the profile's. Inter-arrivals are exponential at the current state's rate.
//! - **Locality**: with the sequential probability the request continues where the previous
//!   request of the same direction ended (if it fits); otherwise it lands uniformly in the hot
//!   region (a 4 KiB-aligned range placed from the seed) with the hot probability, else
//!   uniformly in the whole region. Offsets are 4 KiB aligned and requests never cross the
//!   region end.
//!
//! ```text
//! next: t += exp(rate[state]) , switching state (and drawing a new sojourn) whenever the
//!       draw passes the end of the current sojourn (memoryless, so this is exact)
//!       op  = unit < R/(1+R) ? Write : Read
//!       len = sizes[k] with P(k) ~ theta^k
//!       off = seq ? last_end[op] : hot ? hot_start + U*hot_len : U*region   (aligned, fits)
//! ```

use super::kinds::{self, KindEntry};
use super::trace::TimedIo;
use crate::request::Op;
use crate::rng::Rng;
use crate::{Ns, SEC};
use std::fmt::Write as _;
use thiserror::Error;

const ALIGN: u64 = 4096;
const SIZE_STEPS: usize = 9;

/// A trace the synthetic generator imitates; its name, help and parameters are its entry of
/// [`PROFILES`] (same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthProfile {
    Msn,
    Exchange,
    Financial,
}

/// Bad synthetic-trace parameters.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SynthError {
    #[error("'{0}' is not a synthetic trace profile; accepted: {accepted}", accepted = kinds::accepted(PROFILES))]
    UnknownProfile(String),
    #[error("--requests {0} is out of range; accepted: 1 to 100000000 (MAX_SYNTH_REQUESTS, about 3 GB of CSV)")]
    TooManyRequests(u64),
    #[error("synthetic trace parameter {name} = {value}; accepted: {accepted}")]
    BadParam {
        name: &'static str,
        value: f64,
        accepted: &'static str,
    },
}

/// The knobs of the generator (see the module doc); [`SynthProfile::params`] gives the
/// profiles' values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynthParams {
    /// Writes per read, by request count.
    pub write_read_ratio: f64,
    pub mean_size_bytes: f64,
    pub mean_iops: f64,
    /// ON rate / OFF rate.
    pub burst_ratio: f64,
    /// Share of time in the ON state.
    pub on_fraction: f64,
    /// Mean ON + OFF duration.
    pub cycle_ns: Ns,
    /// Share of the region that is hot.
    pub hot_space: f64,
    /// Share of random accesses that go to the hot region.
    pub hot_access: f64,
    /// Probability that a request continues the previous one of its direction.
    pub seq_probability: f64,
}

/// What the profiles share unless they say otherwise (assumptions, see the module doc).
const BASE: SynthParams = SynthParams {
    write_read_ratio: 1.0,
    mean_size_bytes: 4096.0,
    mean_iops: 100.0,
    burst_ratio: 8.0,
    on_fraction: 0.25,
    cycle_ns: SEC,
    hot_space: 0.2,
    hot_access: 0.8,
    seq_probability: 0.2,
};

/// The profiles, in [`SynthProfile`]'s order.
pub const PROFILES: &[KindEntry<SynthProfile, SynthParams>] = &[
    KindEntry {
        kind: SynthProfile::Msn,
        name: "msn",
        aliases: &[],
        quiet_aliases: &["msnfs"],
        help: "MSN file server: 66.7 writes per read, 22.5 KiB mean, 300 IOPS (S1, docs/references.md)",
        params: SynthParams {
            write_read_ratio: 66.7,
            mean_size_bytes: 22.5 * 1024.0,
            mean_iops: 300.0,
            hot_space: 0.10,
            hot_access: 0.60,
            seq_probability: 0.30,
            ..BASE
        },
    },
    KindEntry {
        kind: SynthProfile::Exchange,
        name: "exchange",
        aliases: &[],
        quiet_aliases: &[],
        help: "Exchange mail server: 1.5 writes per read, 12.5 KiB mean, 500 IOPS (S1, docs/references.md)",
        params: SynthParams {
            write_read_ratio: 1.5,
            mean_size_bytes: 12.5 * 1024.0,
            mean_iops: 500.0,
            ..BASE
        },
    },
    KindEntry {
        kind: SynthProfile::Financial,
        name: "financial",
        aliases: &[],
        quiet_aliases: &["financial1", "fin"],
        help: "Financial1 OLTP: 0.24 writes per read, 2.38 KiB mean, 122 IOPS (S1, docs/references.md)",
        params: SynthParams {
            write_read_ratio: 0.24,
            mean_size_bytes: 2.38 * 1024.0,
            mean_iops: 122.0,
            hot_space: 0.05,
            hot_access: 0.90,
            seq_probability: 0.05,
            ..BASE
        },
    },
];

impl SynthProfile {
    /// A name or alias of [`PROFILES`] (case-insensitive).
    pub fn parse(name: &str) -> Result<Self, SynthError> {
        kinds::find(PROFILES, name)
            .map(|e| e.kind)
            .ok_or_else(|| SynthError::UnknownProfile(name.to_string()))
    }

    fn entry(self) -> &'static KindEntry<Self, SynthParams> {
        &PROFILES[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.entry().name
    }

    pub fn params(self) -> SynthParams {
        self.entry().params
    }
}

fn size_of(k: usize) -> u64 {
    512 << k
}

fn ladder_mean(theta: f64) -> f64 {
    let (mut w, mut num, mut den) = (1.0, 0.0, 0.0);
    for k in 0..SIZE_STEPS {
        num += w * size_of(k) as f64;
        den += w;
        w *= theta;
    }
    num / den
}

/// Cumulative probabilities of the size ladder whose mean is `mean`.
fn size_cdf(mean: f64) -> [f64; SIZE_STEPS] {
    let (mut lo, mut hi) = (-30.0f64, 30.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if ladder_mean(mid.exp()) < mean {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let theta = lo.exp();
    let mut cdf = [0.0; SIZE_STEPS];
    let (mut w, mut total) = (1.0, 0.0);
    for c in cdf.iter_mut() {
        total += w;
        *c = total;
        w *= theta;
    }
    for c in cdf.iter_mut() {
        *c /= total;
    }
    cdf
}

/// The synthetic request stream. See the module doc.
#[derive(Clone, Debug)]
pub struct SynthGen {
    params: SynthParams,
    region_bytes: u64,
    p_write: f64,
    cdf: [f64; SIZE_STEPS],
    /// Rates in requests per ns, [OFF, ON].
    rate: [f64; 2],
    /// Mean sojourn in ns, [OFF, ON].
    sojourn: [f64; 2],
    on: bool,
    /// Time left in the current state, ns.
    left: f64,
    now: f64,
    hot_start: u64,
    hot_len: u64,
    last_end: [u64; 2],
    rng: Rng,
}

fn check(
    name: &'static str,
    value: f64,
    ok: bool,
    accepted: &'static str,
) -> Result<(), SynthError> {
    if ok {
        Ok(())
    } else {
        Err(SynthError::BadParam {
            name,
            value,
            accepted,
        })
    }
}

impl SynthGen {
    /// A stream with `params` over a disk region of `region_bytes` (at least 1 MiB).
    pub fn new(params: SynthParams, region_bytes: u64, seed: u64) -> Result<Self, SynthError> {
        let p = params;
        check(
            "write_read_ratio",
            p.write_read_ratio,
            p.write_read_ratio.is_finite() && p.write_read_ratio >= 0.0,
            "a finite number >= 0",
        )?;
        check(
            "mean_size_bytes",
            p.mean_size_bytes,
            p.mean_size_bytes > 512.0 && p.mean_size_bytes < 131072.0,
            "between 512 and 131072 bytes, exclusive",
        )?;
        check(
            "mean_iops",
            p.mean_iops,
            p.mean_iops.is_finite() && p.mean_iops > 0.0,
            "a finite number > 0",
        )?;
        check(
            "burst_ratio",
            p.burst_ratio,
            p.burst_ratio.is_finite() && p.burst_ratio >= 1.0,
            "a finite number >= 1",
        )?;
        check(
            "on_fraction",
            p.on_fraction,
            p.on_fraction > 0.0 && p.on_fraction < 1.0,
            "strictly between 0 and 1",
        )?;
        check("cycle_ns", p.cycle_ns as f64, p.cycle_ns > 0, "> 0")?;
        check(
            "hot_space",
            p.hot_space,
            p.hot_space > 0.0 && p.hot_space <= 1.0,
            "in (0, 1]",
        )?;
        check(
            "hot_access",
            p.hot_access,
            (0.0..=1.0).contains(&p.hot_access),
            "in [0, 1]",
        )?;
        check(
            "seq_probability",
            p.seq_probability,
            (0.0..=1.0).contains(&p.seq_probability),
            "in [0, 1]",
        )?;
        check(
            "region_bytes",
            region_bytes as f64,
            region_bytes >= 1 << 20,
            "at least 1 MiB",
        )?;

        let mut rng = Rng::derive(seed, "synth");
        let f = p.on_fraction;
        let off_rate = p.mean_iops / (f * p.burst_ratio + 1.0 - f) / SEC as f64;
        let cycle = p.cycle_ns as f64;
        let hot_len = (((region_bytes as f64 * p.hot_space) as u64) / ALIGN * ALIGN)
            .clamp(size_of(SIZE_STEPS - 1), region_bytes / ALIGN * ALIGN);
        let hot_start = rng.below((region_bytes - hot_len) / ALIGN + 1) * ALIGN;
        let on = rng.unit() < f;
        let sojourn = [(1.0 - f) * cycle, f * cycle];
        let left = -(1.0 - rng.unit()).ln() * sojourn[usize::from(on)];
        Ok(Self {
            params: p,
            region_bytes,
            p_write: p.write_read_ratio / (1.0 + p.write_read_ratio),
            cdf: size_cdf(p.mean_size_bytes),
            rate: [off_rate, off_rate * p.burst_ratio],
            sojourn,
            on,
            left,
            now: 0.0,
            hot_start,
            hot_len,
            last_end: [0, 0],
            rng,
        })
    }

    /// The stream of a profile.
    pub fn profile(
        profile: SynthProfile,
        region_bytes: u64,
        seed: u64,
    ) -> Result<Self, SynthError> {
        Self::new(profile.params(), region_bytes, seed)
    }

    pub fn params(&self) -> &SynthParams {
        &self.params
    }

    fn exp(&mut self, mean: f64) -> f64 {
        -(1.0 - self.rng.unit()).ln() * mean
    }

    /// A uniform 4 KiB-aligned offset in `[start, start + span)` where `len` fits.
    fn uniform(&mut self, start: u64, span: u64, len: u64) -> u64 {
        let room = span.saturating_sub(len) / ALIGN;
        start + self.rng.below(room + 1) * ALIGN
    }

    /// The next request.
    // Not an Iterator: the stream never ends, and the name matches the other sources.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> TimedIo {
        loop {
            let gap = self.exp(1.0 / self.rate[usize::from(self.on)]);
            if gap <= self.left {
                self.left -= gap;
                self.now += gap;
                break;
            }
            self.now += self.left;
            self.on = !self.on;
            self.left = self.exp(self.sojourn[usize::from(self.on)]);
        }
        let op = if self.rng.unit() < self.p_write {
            Op::Write
        } else {
            Op::Read
        };
        let u = self.rng.unit();
        let k = self
            .cdf
            .iter()
            .position(|&c| u < c)
            .unwrap_or(SIZE_STEPS - 1);
        let len = size_of(k);
        let dir = usize::from(op == Op::Write);
        let seq = self.last_end[dir];
        let offset = if self.rng.unit() < self.params.seq_probability
            && seq.is_multiple_of(ALIGN)
            && seq + len <= self.region_bytes
        {
            seq
        } else if self.rng.unit() < self.params.hot_access {
            self.uniform(self.hot_start, self.hot_len, len)
        } else {
            self.uniform(0, self.region_bytes, len)
        };
        self.last_end[dir] = offset + len;
        TimedIo {
            at_ns: self.now.round() as Ns,
            op,
            offset_bytes: offset,
            len_bytes: len,
        }
    }

    /// The next `n` requests.
    pub fn take(&mut self, n: usize) -> Vec<TimedIo> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// Never ends: a runtime stops a job replaying it.
impl super::IoStream for SynthGen {
    fn next_io(&mut self) -> Option<TimedIo> {
        Some(self.next())
    }
}

/// Most requests [`synth_spc_csv`] generates in one trace (`vmio trace synth --requests`):
/// 100 M requests are about 3 GB of CSV text, built in memory.
pub const MAX_SYNTH_REQUESTS: u64 = 100_000_000;

/// A synthetic trace of `requests` requests (1 to [`MAX_SYNTH_REQUESTS`]) as UMass/SPC CSV.
pub fn synth_spc_csv(
    profile: &str,
    region_bytes: u64,
    requests: u64,
    seed: u64,
) -> Result<String, SynthError> {
    if requests == 0 || requests > MAX_SYNTH_REQUESTS {
        return Err(SynthError::TooManyRequests(requests));
    }
    let p = SynthProfile::parse(profile)?;
    let mut g = SynthGen::profile(p, region_bytes, seed)?;
    let mut out = String::with_capacity(requests as usize * 32);
    write_spc_csv(&g.take(requests as usize), &mut out);
    Ok(out)
}

/// Append `ios` to `out` as UMass/SPC CSV (`ASU,LBA,Size,Opcode,Timestamp`): ASU 0, LBA =
/// offset / 512 (rounded down), Size in bytes, Opcode `R`/`W`, Timestamp in seconds with
/// microsecond precision (6 decimals, as the UMass traces). Flushes and trims have no SPC
/// opcode and are left out.
pub fn write_spc_csv(ios: &[TimedIo], out: &mut String) {
    for io in ios {
        let opcode = match io.op {
            Op::Read => 'R',
            Op::Write => 'W',
            Op::Flush | Op::Trim => continue,
        };
        let us = (io.at_ns + 500) / 1000;
        let _ = writeln!(
            out,
            "0,{},{},{},{}.{:06}",
            io.offset_bytes / 512,
            io.len_bytes,
            opcode,
            us / 1_000_000,
            us % 1_000_000
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::trace::{parse_trace, TraceFormat};

    const REGION: u64 = 30 << 30;

    #[test]
    fn synthetic_ratios_means_and_rates_match_the_table_within_ten_percent() {
        for profile in [
            SynthProfile::Msn,
            SynthProfile::Exchange,
            SynthProfile::Financial,
        ] {
            let p = profile.params();
            let mut g = SynthGen::profile(profile, REGION, 5).unwrap();
            let ios = g.take(200_000);
            let (mut r, mut w, mut rb, mut wb) = (0u64, 0u64, 0u64, 0u64);
            for io in &ios {
                assert!(io.offset_bytes % ALIGN == 0 && io.offset_bytes + io.len_bytes <= REGION);
                if io.op == Op::Write {
                    w += 1;
                    wb += io.len_bytes;
                } else {
                    r += 1;
                    rb += io.len_bytes;
                }
            }
            let wr = w as f64 / r as f64;
            let wr_bytes = wb as f64 / rb as f64;
            let mean = (rb + wb) as f64 / ios.len() as f64;
            let iops = ios.len() as f64 / (ios.last().unwrap().at_ns as f64 / SEC as f64);
            eprintln!(
                "{}: W/R requests {wr:.3} (bytes {wr_bytes:.3}), mean {:.3} KiB, {iops:.1} IOPS",
                profile.name(),
                mean / 1024.0
            );
            let within = |v: f64, want: f64| (v - want).abs() <= 0.1 * want;
            assert!(
                within(wr, p.write_read_ratio),
                "{} W/R {wr}",
                profile.name()
            );
            assert!(
                within(mean, p.mean_size_bytes),
                "{} mean {mean}",
                profile.name()
            );
            assert!(within(iops, p.mean_iops), "{} rate {iops}", profile.name());
        }
    }

    #[test]
    fn arrivals_are_bursty() {
        // Index of dispersion of counts in 100 ms windows: 1 for Poisson, well above for MMPP.
        let mut g = SynthGen::profile(SynthProfile::Exchange, REGION, 9).unwrap();
        let ios = g.take(100_000);
        let window = 100 * crate::MS;
        let mut counts = vec![0f64; (ios.last().unwrap().at_ns / window) as usize + 1];
        for io in &ios {
            counts[(io.at_ns / window) as usize] += 1.0;
        }
        let n = counts.len() as f64;
        let mean = counts.iter().sum::<f64>() / n;
        let var = counts.iter().map(|c| (c - mean) * (c - mean)).sum::<f64>() / n;
        assert!(var / mean > 5.0, "dispersion {}", var / mean);
    }

    #[test]
    fn the_same_seed_gives_the_same_synthetic_stream() {
        let a = SynthGen::profile(SynthProfile::Financial, REGION, 3)
            .unwrap()
            .take(10_000);
        let b = SynthGen::profile(SynthProfile::Financial, REGION, 3)
            .unwrap()
            .take(10_000);
        let c = SynthGen::profile(SynthProfile::Financial, REGION, 4)
            .unwrap()
            .take(10_000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
    }

    #[test]
    fn a_synthetic_trace_round_trips_through_spc_csv() {
        let ios = SynthGen::profile(SynthProfile::Exchange, 1 << 30, 8)
            .unwrap()
            .take(5_000);
        let mut text = String::new();
        write_spc_csv(&ios, &mut text);
        assert_eq!(TraceFormat::detect(&text), Some(TraceFormat::Spc));
        let back = parse_trace(&text, "synth.spc", TraceFormat::Spc).unwrap();
        assert_eq!(back.len(), ios.len());
        for (a, b) in ios.iter().zip(&back) {
            assert_eq!(
                (a.op, a.offset_bytes, a.len_bytes),
                (b.op, b.offset_bytes, b.len_bytes)
            );
            assert!(a.at_ns.abs_diff(b.at_ns) <= 500, "{a:?} {b:?}");
        }
    }

    #[test]
    fn every_profile_is_the_entry_at_its_index_and_an_unknown_name_lists_the_registry() {
        for (i, e) in PROFILES.iter().enumerate() {
            assert_eq!(e.kind as usize, i);
            assert_eq!(SynthProfile::parse(e.name).unwrap(), e.kind);
            for a in e.quiet_aliases {
                assert_eq!(SynthProfile::parse(a).unwrap(), e.kind, "{a}");
            }
        }
        assert_eq!(
            SynthProfile::parse("tpcc").unwrap_err().to_string(),
            "'tpcc' is not a synthetic trace profile; accepted: msn, exchange, financial"
        );
    }

    #[test]
    fn bad_parameters_and_names_are_rejected() {
        assert_eq!(SynthProfile::parse("MSN").unwrap(), SynthProfile::Msn);
        assert!(SynthProfile::parse("tpcc")
            .unwrap_err()
            .to_string()
            .contains("msn, exchange, financial"));
        let mut p = SynthProfile::Msn.params();
        p.on_fraction = 1.0;
        let e = SynthGen::new(p, REGION, 1).unwrap_err().to_string();
        assert!(e.contains("on_fraction"), "{e}");
        assert!(SynthGen::profile(SynthProfile::Msn, 4096, 1).is_err());
    }

    #[test]
    fn the_size_ladder_hits_the_requested_mean_exactly() {
        for mean in [2.38 * 1024.0, 12.5 * 1024.0, 22.5 * 1024.0] {
            let cdf = size_cdf(mean);
            let mut prev = 0.0;
            let mut m = 0.0;
            for (k, c) in cdf.iter().enumerate() {
                m += (c - prev) * size_of(k) as f64;
                prev = *c;
            }
            assert!((m - mean).abs() < 1e-6 * mean, "{m} vs {mean}");
        }
    }
}

#[cfg(test)]
mod request_bound_tests {
    use super::*;

    #[test]
    fn a_request_count_past_the_documented_maximum_is_an_error_not_an_allocation() {
        let e = synth_spc_csv("msn", 1 << 30, MAX_SYNTH_REQUESTS + 1, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--requests 100000001 is out of range; accepted: 1 to 100000000 (MAX_SYNTH_REQUESTS, about 3 GB of CSV)"
        );
        assert!(synth_spc_csv("msn", 1 << 30, u64::MAX, 1).is_err());
        assert!(synth_spc_csv("msn", 1 << 30, 0, 1).is_err());
        assert_eq!(
            synth_spc_csv("msn", 1 << 30, 3, 1).unwrap().lines().count(),
            3
        );
    }
}
