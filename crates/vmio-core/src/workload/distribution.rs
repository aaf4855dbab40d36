//! fio's non-uniform random offsets (`random_distribution`): which block of a region a random
//! I/O goes to, for zipf, pareto, normal, zoned and zoned_abs.
//!
//! Sources (fio 3.33): `lib/zipf.c` (`zipf_init`, `zipf_next`, `pareto_init`, `pareto_next`,
//! `ZIPF_MAX_GEN`), `lib/gauss.c` (`gauss_init`, `gauss_next`), `io_u.c`
//! (`get_next_rand_offset`, `__get_next_rand_offset_zoned`, `__get_next_rand_offset_zoned_abs`),
//! `init.c` (`td_zone_gen_index`: a 100-entry table from a draw in 1..=100 to its zone),
//! `filesetup.c` (`__init_rand_distribution`: `n` = the region's blocks of the smallest block
//! size). zipf_next is the generator of Gray et al., "Quickly generating billion-record
//! synthetic databases" (SIGMOD 1994).
//!
//! ```text
//! zipf(θ):   zetan = Σ_{i=1..min(n, 10^7)} i^-θ;  zeta2 = 1 + 0.5^θ
//!            α = 1/(1-θ);  η = (1 - (2/n)^(1-θ)) / (1 - zeta2/zetan);  u uniform in [0, 1)
//!            rank = 0 if u·zetan < 1, 1 if u·zetan < 1 + 0.5^θ, else ⌊n·(ηu - η + 1)^α⌋
//! pareto(h): rank = ⌊(n-1) · u^(ln h / ln(1-h))⌋
//! normal(d): rank = ⌈(Σ of 12 uniform draws in 0..=n) / 12⌉ + a deviation uniform in
//!            [-s/2, s/2) with s = ⌈n·d/100⌉ (at most n/2), halved while it leaves 0..n
//! rank → block: (scatter(rank) + rand_off) mod n; rand_off = n·center when a center is
//!            given (normal: n·(center - 0.5)), else a draw (zipf, pareto) or 0 (normal)
//! zoned:     v uniform in 1..=100 → its zone [lo%, hi%) of the region's blocks:
//!            block = lo%·n + uniform(0 .. n·(hi% - lo%))
//! zoned_abs: the same with zones in bytes: [lo/align, hi/align)
//! ```
//!
//! fio scatters ranks with a multiplicative hash taken modulo `n`, which may give two ranks
//! the same block; vmio scatters them with a keyed permutation of `0..n`
//! (`workload::perm`), so every rank keeps its own block and the popularity of the hottest
//! blocks is exactly the generator's. fio turns the random map off for these distributions
//! (`fixup_options`), and so does vmio.

use super::perm::Permutation;
use crate::fio::pace::{Distribution, Zone};
use crate::rng::Rng;
use thiserror::Error;

/// fio's cap on the terms of zipf's normalising sum (`ZIPF_MAX_GEN` in `lib/zipf.c`).
const ZIPF_MAX_GEN: u64 = 10_000_000;
/// fio's number of uniform draws averaged by the normal distribution (`GAUSS_ITERS`).
const GAUSS_ITERS: u64 = 12;

/// A distribution that cannot be laid over a job's region.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DistributionError {
    #[error(
        "job '{job}' (line {line}): random_distribution=zoned_abs zones end at {end_bytes} bytes, beyond the job's region of {region_bytes} bytes (fio: \"zoned_abs sizes exceed file size\"); accepted: zone sizes adding up to at most the region"
    )]
    ZonesBeyondRegion {
        job: String,
        line: usize,
        end_bytes: u64,
        region_bytes: u64,
    },
}

#[derive(Clone, Debug)]
enum Kind {
    Zipf {
        theta: f64,
        zetan: f64,
        alpha: f64,
        eta: f64,
    },
    Pareto {
        pow: f64,
    },
    Normal {
        stddev: u64,
    },
    /// Per direction, 100 `(first block, blocks)` entries: the zone of a draw `v` at `v - 1`.
    Zoned(Box<[Vec<(u64, u64)>; 2]>),
}

/// The block draws of one region (fio keeps them per file).
#[derive(Clone, Debug)]
pub struct OffsetDraw {
    kind: Kind,
    /// Blocks of the region.
    n: u64,
    scatter: Permutation,
    rand_off: u64,
}

impl OffsetDraw {
    /// The draws of `dist` over a region of `bytes` in blocks of `align`; None for the
    /// uniform distribution (the region's own random map or uniform draws). `rng` keys the
    /// scatter and draws the rotation; `Err(end)` when zoned_abs zones end beyond the region
    /// at `end` bytes.
    pub fn new(
        dist: &Distribution,
        bytes: u64,
        align: u64,
        rng: &mut Rng,
    ) -> Result<Option<Self>, u64> {
        let align = align.max(1);
        let n = bytes.div_ceil(align).max(1);
        let rotation = |center: Option<f64>, rng: &mut Rng| match center {
            Some(c) => ((n as f64 * c) as u64) % n,
            None => rng.below(n),
        };
        let scatter = Permutation::new(n, rng);
        let (kind, rand_off) = match dist {
            Distribution::Random => return Ok(None),
            &Distribution::Zipf { theta, center } => {
                let zetan: f64 = (1..=n.min(ZIPF_MAX_GEN))
                    .map(|i| (i as f64).powf(-theta))
                    .sum();
                let zeta2 = 1.0 + 0.5f64.powf(theta);
                let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
                let kind = Kind::Zipf {
                    theta,
                    zetan,
                    alpha: 1.0 / (1.0 - theta),
                    eta,
                };
                (kind, rotation(center, rng))
            }
            &Distribution::Pareto { h, center } => {
                let pow = h.ln() / (1.0 - h).ln();
                (Kind::Pareto { pow }, rotation(center, rng))
            }
            &Distribution::Normal { dev, center } => {
                let stddev = ((n as f64 * dev / 100.0).ceil() as u64).min(n / 2);
                let off = center.map_or(0, |c| {
                    ((n as f64 * (c - 0.5)) as i64).rem_euclid(n as i64) as u64
                });
                (Kind::Normal { stddev }, off)
            }
            Distribution::Zoned { zones, absolute } => {
                let last = (bytes / align).max(1);
                let table = |zs: &[Zone]| -> Result<Vec<(u64, u64)>, u64> {
                    let mut out = Vec::with_capacity(100);
                    let mut lo = 0u64;
                    for z in zs {
                        let hi = lo + z.size;
                        let (first, count) = if *absolute {
                            if hi > bytes {
                                return Err(hi);
                            }
                            (lo / align, hi / align - lo / align)
                        } else {
                            (lo * last / 100, last * (hi - lo) / 100)
                        };
                        for _ in 0..z.access_pct {
                            out.push((first, count));
                        }
                        lo = hi;
                    }
                    Ok(out)
                };
                let both = [table(&zones[0])?, table(&zones[1])?];
                (Kind::Zoned(Box::new(both)), 0)
            }
        };
        Ok(Some(Self {
            kind,
            n,
            scatter,
            rand_off,
        }))
    }

    /// The next block (0..n) of an I/O in direction `dir` (0 read, 1 write).
    pub fn block(&self, dir: usize, rng: &mut Rng) -> u64 {
        let n = self.n;
        let rank = match &self.kind {
            Kind::Zoned(table) => {
                let (first, count) = table[dir][rng.below(100) as usize];
                return first + (count as f64 * rng.unit()) as u64;
            }
            &Kind::Zipf {
                theta,
                zetan,
                alpha,
                eta,
            } => {
                let u = rng.unit();
                let z = u * zetan;
                if z < 1.0 {
                    0
                } else if z < 1.0 + 0.5f64.powf(theta) {
                    1
                } else {
                    ((n as f64 * (eta * u - eta + 1.0).powf(alpha)) as u64).min(n - 1)
                }
            }
            &Kind::Pareto { pow } => (((n - 1) as f64 * rng.unit().powf(pow)) as u64).min(n - 1),
            &Kind::Normal { stddev } => {
                let sum: u64 = (0..GAUSS_ITERS).map(|_| rng.below(n + 1)).sum();
                let mut v = sum.div_ceil(GAUSS_ITERS) as i64;
                if stddev > 0 {
                    let mut dev = (stddev as f64 * rng.unit()) as i64 - (stddev / 2) as i64;
                    while v + dev < 0 || v + dev >= n as i64 {
                        dev /= 2;
                    }
                    v += dev;
                }
                (v as u64).min(n - 1)
            }
        };
        (self.scatter.at(rank) + self.rand_off) % n
    }
}

/// The error of zones ending beyond a job's region.
pub(super) fn zones_beyond(
    job: &str,
    line: usize,
    end_bytes: u64,
    region_bytes: u64,
) -> DistributionError {
    DistributionError::ZonesBeyondRegion {
        job: crate::units::quote(job),
        line,
        end_bytes,
        region_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::pace::{apply, Pace};

    fn dist(text: &str) -> Distribution {
        let mut p = Pace::default();
        apply(&mut p, "random_distribution", Some(text)).unwrap();
        p.random_distribution
    }

    /// Draw `count` blocks of a region of `n` blocks; the hit count of each block.
    fn hits(text: &str, n: u64, dir: usize, count: usize) -> Vec<u64> {
        let mut rng = Rng::new(3);
        let d = OffsetDraw::new(&dist(text), n * 4096, 4096, &mut rng)
            .unwrap()
            .unwrap();
        let mut h = vec![0u64; n as usize];
        for _ in 0..count {
            h[d.block(dir, &mut rng) as usize] += 1;
        }
        h
    }

    /// The share of the draws in the hottest `frac` of the blocks.
    fn top_share(mut h: Vec<u64>, frac: f64) -> f64 {
        let total: u64 = h.iter().sum();
        h.sort_unstable_by(|a, b| b.cmp(a));
        let k = (h.len() as f64 * frac) as usize;
        h[..k].iter().sum::<u64>() as f64 / total as f64
    }

    #[test]
    fn zipf_1_2_puts_the_closed_form_share_on_its_hottest_blocks() {
        // Gray et al.'s generator gives rank r (1-based, r >= 3) the probability mass of
        // [r-1, r) under n·(ηu - η + 1)^α, i.e. u in [((r-1)/n)^(1/α), (r/n)^(1/α)) mapped
        // back; rank 1 gets 1/zetan and rank 2 0.5^θ/zetan. The share of the top k ranks:
        // P(u < u_k) with u_k solving n·(η u - η + 1)^α = k.
        let (n, theta) = (100_000u64, 1.2f64);
        let zetan: f64 = (1..=n).map(|i| (i as f64).powf(-theta)).sum();
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        let alpha = 1.0 / (1.0 - theta);
        let share = |k: f64| ((k / n as f64).powf(1.0 / alpha) - 1.0 + eta) / eta;
        let h = hits("zipf:1.2", n, 0, 2_000_000);
        for frac in [0.01, 0.1] {
            let want = share(frac * n as f64);
            let got = top_share(h.clone(), frac);
            assert!((got - want).abs() < 0.01, "top {frac}: {got} vs {want}");
        }
        // The generator approximates the exact zipf law sum_{i<=k} i^-θ / zetan closely.
        let exact = (1..=1000u64).map(|i| (i as f64).powf(-theta)).sum::<f64>() / zetan;
        assert!(
            (share(1000.0) - exact).abs() < 0.02,
            "{} vs {exact}",
            share(1000.0)
        );
    }

    #[test]
    fn pareto_and_normal_concentrate_as_their_closed_forms_say() {
        // pareto(h): rank = (n-1)·u^p, so P(rank < k) = (k/(n-1))^(1/p).
        let (n, h) = (10_000u64, 0.2f64);
        let p = h.ln() / (1.0 - h).ln();
        let got = top_share(hits("pareto:0.2", n, 0, 1_000_000), 0.2);
        let want = (0.2f64 * n as f64 / (n - 1) as f64).powf(1.0 / p);
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
        // normal: the mean of 12 uniforms on 0..=n has sd n/sqrt(144) = n/12, so the
        // middle ±n/12 (17 % of the blocks, hottest) holds 68.3 % of the draws.
        let got = top_share(hits("normal", 12_000, 0, 1_000_000), 2.0 / 12.0);
        assert!((got - 0.6827).abs() < 0.01, "{got}");
    }

    #[test]
    fn zoned_50_10_50_90_puts_half_the_ios_in_the_first_tenth() {
        let h = hits("zoned:50/10:50/90", 1000, 0, 200_000);
        let first: u64 = h[..100].iter().sum();
        assert!((first as f64 / 200_000.0 - 0.5).abs() < 0.005, "{first}");
        // Uniform within each zone: first-tenth blocks ~1000 hits, the rest ~111.
        assert!(h[..100].iter().all(|&c| (850..1150).contains(&c)));
        // Per direction: writes follow their own list.
        let h = hits("zoned:50/10:50/90,100/20", 1000, 1, 100_000);
        assert_eq!(h[200..].iter().sum::<u64>(), 0);
    }

    #[test]
    fn zoned_abs_zones_are_bytes_and_must_fit_the_region() {
        let mut rng = Rng::new(1);
        let d = dist("zoned_abs:80/4k:20/1m");
        let draw = OffsetDraw::new(&d, 4 << 20, 4096, &mut rng)
            .unwrap()
            .unwrap();
        let mut first = 0;
        for _ in 0..10_000 {
            let b = draw.block(0, &mut rng);
            assert!(b < 257, "{b}");
            first += u64::from(b == 0);
        }
        assert!((7_800..8_200).contains(&first), "{first}");
        assert_eq!(
            OffsetDraw::new(&d, 512 << 10, 4096, &mut rng).unwrap_err(),
            (1 << 20) + 4096
        );
    }
}
