//! fio's options that decide *when* a job issues and *where* its random I/O goes, parsed into
//! one [`Pace`] per job, and the issuing rules of rate and think time as a clock-free state
//! machine ([`Pacer`]) the simulator's job driver calls with its own time.
//!
//! Sources (fio 3.33): `options.c` (names, types, defaults, ranges of `rate`, `rate_min`,
//! `rate_iops`, `rate_iops_min`, `rate_process`, `rate_cycle`, `thinktime*`, `startdelay`,
//! `iodepth_batch*`, `iodepth_low`, `random_distribution` with `str_random_distribution_cb`,
//! `split_parse_distr` and `zone_split_ddir`, `percentage_random`, `verify*`); `init.c`
//! `fixup_options` (thinktime_spin <= thinktime, iodepth_low and iodepth_batch default to
//! iodepth, iodepth_batch_complete_max >= _min, a start delay range drawn once, non-uniform
//! distributions turn the random map off) and `__setup_rate` (rate wins over rate_iops, which
//! is `rate_iops * min bs` bytes/s); `backend.c` `usec_for_io`, `handle_thinktime`,
//! `__check_min_rate`, `do_io`; `io_u.c` `rate_ddir`.
//!
//! ```text
//! rate (per direction, per job clone; fio's usec_for_io after every issue):
//!   bps       = rate[d] if set else rate_iops[d] * min_bs[d]
//!   linear:   next[d] = issued_bytes[d] / bps  (seconds since the job's epoch)
//!   poisson:  next[d] = last[d] += (1 s / (bps / min_bs[d])) * -ln(U),  U uniform in (0, 1]
//!   before an I/O of direction d: now < next[d] -> wait for the I/Os in flight (fio's
//!             io_u_quiesce, inline submission), then sleep until next[d] (rate_ddir)
//! thinktime (handle_thinktime, after each issue; counter = completed I/Os, or issued ones
//!   with thinktime_blocks_type=issue):
//!   counter >= last + thinktime_blocks -> wait for the I/Os in flight, spin thinktime_spin,
//!             sleep thinktime - thinktime_spin; last = counter
//! rate_min / rate_iops_min (__check_min_rate, after completions, per direction):
//!   ignored in the first 2 s after the start; then every rate_cycle (default 1 s) the bytes
//!   (I/Os) completed since the last check over the time spent must reach the minimum,
//!   else the job stops with an error (fio: td_verror EIO "check_min_rate")
//! startdelay=a[-b]: the job starts a (or a draw in [a, b]) after the run's start (fio
//!   measures it from its genesis, not from its stonewall group's start)
//! ```
//!
//! A fio job on a disk draws its direction first and lets [`Pacer::choose`] switch it (fio's
//! `rate_ddir`); other workloads (traces, FileBench, files) have drawn their step already, so
//! it waits for its direction's time. `thinktime_spin` is CPU time on the job's thread (the
//! simulator's CPU layer). `rate_ign_think` and `thinktime_iotime` are not modelled (they are
//! listed as ignored).

use crate::rng::Rng;
use crate::units::{parse_duration_ns, parse_size};
use crate::{Ns, SEC, US};
use serde::Serialize;

/// fio's `rate_process`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum RateProcess {
    /// Evenly spaced I/Os (fio's default).
    #[default]
    #[serde(rename = "linear")]
    Linear,
    /// Exponential gaps of the same mean.
    #[serde(rename = "poisson")]
    Poisson,
}

/// One zone of `random_distribution=zoned` (`size` in percent of the region) or `zoned_abs`
/// (`size` in bytes): `access_pct` percent of the random I/Os go to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Zone {
    pub access_pct: u32,
    pub size: u64,
}

/// fio's `random_distribution`. `center` is fio's optional `:center` in [0, 1] (None: fio's
/// -1, a random rotation for zipf/pareto, none for normal).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub enum Distribution {
    /// Uniform (fio's default), with the random map unless `norandommap`.
    #[default]
    #[serde(rename = "random")]
    Random,
    #[serde(rename = "zipf")]
    Zipf { theta: f64, center: Option<f64> },
    #[serde(rename = "pareto")]
    Pareto { h: f64, center: Option<f64> },
    /// fio's `normal` (`gauss`): `dev` is the deviation in percent of the region.
    #[serde(rename = "normal")]
    Normal { dev: f64, center: Option<f64> },
    /// Zones per direction [read, write]; sizes in percent (`zoned`) or bytes (`zoned_abs`).
    #[serde(rename = "zoned")]
    Zoned {
        zones: [Vec<Zone>; 2],
        absolute: bool,
    },
}

impl Distribution {
    /// The values `random_distribution=` accepts.
    pub const ACCEPTED: &'static str = "random, zipf[:theta[:center]] (theta != 1, default 1.1), pareto[:h[:center]] (0 < h < 1, default 0.2), normal[:dev%[:center]] (0 <= dev < 100), zoned:access%/size%:... and zoned_abs:access%/size:... (accesses add up to 100; reads,writes lists may differ)";
}

/// The options of this module for one job; `Default` is fio's defaults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pace {
    /// fio's `rate` in bytes/s, [read, write]; 0: no limit.
    pub rate_bps: [u64; 2],
    /// fio's `rate_iops`, [read, write]; 0: no limit (`rate` wins when both are set).
    pub rate_iops: [u64; 2],
    /// fio's `rate_min` (`ratemin`) in bytes/s, [read, write].
    pub rate_min_bps: [u64; 2],
    /// fio's `rate_iops_min`, [read, write].
    pub rate_iops_min: [u64; 2],
    /// fio's `rate_cycle` (`ratecycle`): the window of the minimum-rate check (default 1 s).
    pub rate_cycle_ns: Ns,
    pub rate_process: RateProcess,
    /// fio's `thinktime` (a bare number is microseconds).
    pub thinktime_ns: Ns,
    /// fio's `thinktime_spin`, at most `thinktime` (init.c fixup).
    pub thinktime_spin_ns: Ns,
    /// fio's `thinktime_blocks` (default 1).
    pub thinktime_blocks: u64,
    /// fio's `thinktime_blocks_type=issue` (default `complete`).
    pub thinktime_blocks_issue: bool,
    /// fio's `startdelay=lo[-hi]` (a bare number is seconds).
    pub startdelay_ns: (Ns, Ns),
    /// fio's `iodepth_batch_submit` (`iodepth_batch`); 0: iodepth.
    pub iodepth_batch_submit: u32,
    /// fio's `iodepth_batch_complete_min` (`iodepth_batch_complete`, default 1).
    pub iodepth_batch_complete_min: u32,
    /// fio's `iodepth_batch_complete_max` (default: the min).
    pub iodepth_batch_complete_max: u32,
    /// fio's `iodepth_low`; 0: iodepth.
    pub iodepth_low: u32,
    pub random_distribution: Distribution,
    /// fio's `percentage_random`, [read, write] (default 100).
    pub percentage_random: [u32; 2],
    /// fio's `verify` method (None: `verify=0`/`none`).
    pub verify: Option<String>,
    /// fio's `do_verify` (default 1).
    pub do_verify: bool,
    /// fio's `verify_only`.
    pub verify_only: bool,
    /// fio's `verify_backlog`: verify after this many blocks written (0: at the end).
    pub verify_backlog: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            rate_bps: [0; 2],
            rate_iops: [0; 2],
            rate_min_bps: [0; 2],
            rate_iops_min: [0; 2],
            rate_cycle_ns: SEC,
            rate_process: RateProcess::Linear,
            thinktime_ns: 0,
            thinktime_spin_ns: 0,
            thinktime_blocks: 1,
            thinktime_blocks_issue: false,
            startdelay_ns: (0, 0),
            iodepth_batch_submit: 1,
            iodepth_batch_complete_min: 1,
            iodepth_batch_complete_max: 0,
            iodepth_low: 0,
            random_distribution: Distribution::Random,
            percentage_random: [100; 2],
            verify: None,
            do_verify: true,
            verify_only: false,
            verify_backlog: 0,
        }
    }
}

/// fio's verify methods (`verify=` in `options.c`); `0`/`none` turn it off.
pub const VERIFY_METHODS: &[&str] = &[
    "md5",
    "crc64",
    "crc32",
    "crc32c",
    "crc32c-intel",
    "crc16",
    "crc7",
    "sha1",
    "sha256",
    "sha512",
    "sha3-224",
    "sha3-256",
    "sha3-384",
    "sha3-512",
    "xxhash",
    "meta",
    "pattern",
    "null",
];

/// The option names (canonical, lowercase) this module reads.
pub const OPTIONS: &[&str] = &[
    "rate",
    "rate_min",
    "ratemin",
    "rate_iops",
    "rate_iops_min",
    "rate_process",
    "rate_cycle",
    "ratecycle",
    "thinktime",
    "thinktime_spin",
    "thinktime_blocks",
    "thinktime_blocks_type",
    "startdelay",
    "iodepth_batch",
    "iodepth_batch_submit",
    "iodepth_batch_complete",
    "iodepth_batch_complete_min",
    "iodepth_batch_complete_max",
    "iodepth_low",
    "random_distribution",
    "percentage_random",
    "verify",
    "do_verify",
    "verify_only",
    "verify_backlog",
];

const ACCEPT_RATE: &str = "a rate in bytes/s like 1m or 500k, or a read,write pair (500k,1m; an empty field keeps no limit)";
const ACCEPT_COUNT_PAIR: &str =
    "a non-negative integer, or a read,write pair (100,200; an empty field keeps the default)";
const ACCEPT_USEC: &str = "a duration like 100 (microseconds), 10ms, 1s";
const ACCEPT_DELAY: &str = "a duration like 5 (seconds) or 500ms, or a range lo-hi (1-10)";
const ACCEPT_INT: &str = "a non-negative integer";
const ACCEPT_BOOL: &str = "1, 0, true, false, or the bare option name for 1";

/// Apply `key=value` (`key` lowercase, one of [`OPTIONS`]) to `p`; the error is the accepted
/// values, for the caller's one-line message naming the file, line and option.
pub fn apply(p: &mut Pace, key: &str, value: Option<&str>) -> Result<(), String> {
    let v = value.unwrap_or("").trim();
    let err = |accepted: &str| accepted.to_string();
    match key {
        "rate" => {
            p.rate_bps = pair(v, p.rate_bps, |s| parse_size(s).ok()).ok_or(err(ACCEPT_RATE))?
        }
        "rate_min" | "ratemin" => {
            p.rate_min_bps =
                pair(v, p.rate_min_bps, |s| parse_size(s).ok()).ok_or(err(ACCEPT_RATE))?
        }
        "rate_iops" => p.rate_iops = pair(v, p.rate_iops, int).ok_or(err(ACCEPT_COUNT_PAIR))?,
        "rate_iops_min" => {
            p.rate_iops_min = pair(v, p.rate_iops_min, int).ok_or(err(ACCEPT_COUNT_PAIR))?
        }
        "rate_process" => {
            p.rate_process = match v.to_ascii_lowercase().as_str() {
                "linear" => RateProcess::Linear,
                "poisson" => RateProcess::Poisson,
                _ => return Err(err("linear, poisson")),
            }
        }
        "rate_cycle" | "ratecycle" => {
            p.rate_cycle_ns = parse_duration_ns(v, crate::MS)
                .ok()
                .filter(|&t| t > 0)
                .ok_or(err("a duration > 0 like 1000 (milliseconds) or 2s"))?
        }
        "thinktime" => p.thinktime_ns = parse_duration_ns(v, US).map_err(|_| err(ACCEPT_USEC))?,
        "thinktime_spin" => {
            p.thinktime_spin_ns = parse_duration_ns(v, US).map_err(|_| err(ACCEPT_USEC))?
        }
        "thinktime_blocks" => {
            p.thinktime_blocks = int(v).filter(|&n| n >= 1).ok_or(err("an integer >= 1"))?
        }
        "thinktime_blocks_type" => {
            p.thinktime_blocks_issue = match v.to_ascii_lowercase().as_str() {
                "complete" => false,
                "issue" => true,
                _ => return Err(err("complete, issue")),
            }
        }
        "startdelay" => {
            let (lo, hi) = match v.split_once('-') {
                Some((a, b)) => (a, b),
                None => (v, v),
            };
            let d = |s: &str| parse_duration_ns(s.trim(), SEC).ok();
            p.startdelay_ns = match (d(lo), d(hi)) {
                (Some(a), Some(b)) if a <= b => (a, b),
                _ => return Err(err(ACCEPT_DELAY)),
            }
        }
        "iodepth_batch" | "iodepth_batch_submit" => {
            p.iodepth_batch_submit = u32_of(v).ok_or(err(ACCEPT_INT))?
        }
        "iodepth_batch_complete" | "iodepth_batch_complete_min" => {
            p.iodepth_batch_complete_min = u32_of(v).ok_or(err(ACCEPT_INT))?
        }
        "iodepth_batch_complete_max" => {
            p.iodepth_batch_complete_max = u32_of(v).ok_or(err(ACCEPT_INT))?
        }
        "iodepth_low" => p.iodepth_low = u32_of(v).ok_or(err(ACCEPT_INT))?,
        "random_distribution" => {
            p.random_distribution = parse_distribution(v).ok_or(err(Distribution::ACCEPTED))?
        }
        "percentage_random" => {
            let pct = |s: &str| int(s).filter(|&n| n <= 100);
            let [r, w] = pair(v, [100, 100], pct).ok_or(err(
                "an integer from 0 to 100, or a read,write pair (50,100)",
            ))?;
            p.percentage_random = [r as u32, w as u32];
        }
        "verify" => {
            let m = v.to_ascii_lowercase();
            p.verify = match m.as_str() {
                "0" | "none" => None,
                _ if VERIFY_METHODS.contains(&m.as_str()) => Some(m),
                _ => {
                    return Err(format!("0, none, {}", VERIFY_METHODS.join(", ")));
                }
            }
        }
        "do_verify" => p.do_verify = boolean(value).ok_or(err(ACCEPT_BOOL))?,
        "verify_only" => p.verify_only = boolean(value).ok_or(err(ACCEPT_BOOL))?,
        "verify_backlog" => p.verify_backlog = int(v).ok_or(err(ACCEPT_INT))?,
        _ => return Err(err("an option of fio/pace.rs")),
    }
    Ok(())
}

fn int(s: &str) -> Option<u64> {
    let s = s.trim();
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn u32_of(s: &str) -> Option<u32> {
    int(s).and_then(|n| u32::try_from(n).ok())
}

fn boolean(value: Option<&str>) -> Option<bool> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("1") | Some("true") => Some(true),
        Some("0") | Some("false") => Some(false),
        _ => None,
    }
}

/// fio's per-direction values (`parse.c`, several offsets): `a` sets both directions, `a,b`
/// reads and writes, an empty field keeps `old`'s; a third (trim) field is accepted and
/// dropped.
fn pair(v: &str, old: [u64; 2], one: impl Fn(&str) -> Option<u64>) -> Option<[u64; 2]> {
    let fields: Vec<&str> = v.split(',').map(str::trim).collect();
    if fields.len() > 3 || fields.iter().all(|f| f.is_empty()) {
        return None;
    }
    let get = |i: usize| match fields.get(i) {
        Some(f) if !f.is_empty() => one(f),
        _ => Some(old[i]),
    };
    if fields.len() == 1 {
        let x = one(fields[0])?;
        return Some([x, x]);
    }
    if let Some(t) = fields.get(2).filter(|t| !t.is_empty()) {
        one(t)?;
    }
    Some([get(0)?, get(1)?])
}

/// `random_distribution` as fio's `str_random_distribution_cb` reads it.
fn parse_distribution(v: &str) -> Option<Distribution> {
    let lower = v.to_ascii_lowercase();
    let (kind, rest) = match lower.split_once(':') {
        Some((k, r)) => (k, Some(r)),
        None => (lower.as_str(), None),
    };
    // fio's split_parse_distr: "value[:center]".
    let value_center = |default: f64| -> Option<(f64, Option<f64>)> {
        let Some(rest) = rest else {
            return Some((default, None));
        };
        let (val, center) = match rest.split_once(':') {
            Some((a, c)) => (a, Some(c.trim().parse::<f64>().ok()?)),
            None => (rest, None),
        };
        let val = val.trim().parse::<f64>().ok()?;
        if center.is_some_and(|c| !(0.0..=1.0).contains(&c)) || !val.is_finite() {
            return None;
        }
        Some((val, center))
    };
    match kind.trim() {
        "random" if rest.is_none() => Some(Distribution::Random),
        "zipf" => {
            let (theta, center) = value_center(1.1)?;
            (theta != 1.0 && theta > 0.0).then_some(Distribution::Zipf { theta, center })
        }
        "pareto" => {
            let (h, center) = value_center(0.2)?;
            (h > 0.0 && h < 1.0).then_some(Distribution::Pareto { h, center })
        }
        "normal" | "gauss" => {
            let (dev, center) = value_center(0.0)?;
            (0.0..100.0)
                .contains(&dev)
                .then_some(Distribution::Normal { dev, center })
        }
        "zoned" | "zoned_abs" => {
            let absolute = kind == "zoned_abs";
            let zones = parse_zones(rest?, absolute)?;
            Some(Distribution::Zoned { zones, absolute })
        }
        _ => None,
    }
}

/// `access/size:access/size...`, optionally `reads,writes` (one list: both directions), as
/// fio's `zone_split_ddir` checks them: every access percentage given, adding up to 100;
/// percent sizes adding up to at most 100 (a missing size shares the remainder).
fn parse_zones(text: &str, absolute: bool) -> Option<[Vec<Zone>; 2]> {
    let lists: Vec<&str> = text.split(',').collect();
    if lists.len() > 3 {
        return None;
    }
    let one = |list: &str| -> Option<Vec<Zone>> {
        let mut zones = Vec::new();
        let mut missing = 0;
        for entry in list.split(':').map(str::trim).filter(|e| !e.is_empty()) {
            let (a, s) = entry.split_once('/')?;
            let access = int(a).filter(|&p| p <= 100)? as u32;
            let size = if s.trim().is_empty() && !absolute {
                missing += 1;
                u64::MAX
            } else if absolute {
                parse_size(s.trim()).ok().filter(|&b| b > 0)?
            } else {
                int(s).filter(|&p| p <= 100)?
            };
            zones.push(Zone {
                access_pct: access,
                size,
            });
        }
        let access: u32 = zones.iter().map(|z| z.access_pct).sum();
        let sized: u64 = zones
            .iter()
            .filter(|z| z.size != u64::MAX)
            .map(|z| z.size)
            .sum();
        if zones.is_empty() || access != 100 || (!absolute && sized > 100) {
            return None;
        }
        for z in zones.iter_mut().filter(|z| z.size == u64::MAX) {
            z.size = (100 - sized) / missing;
        }
        Some(zones)
    };
    let read = one(lists[0])?;
    let write = match lists.get(1).filter(|l| !l.trim().is_empty()) {
        Some(l) => one(l)?,
        None if lists.len() == 1 => read.clone(),
        None => read.clone(),
    };
    Some([read, write])
}

/// What the job may do now ([`Pacer::gate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Issue now.
    Go,
    /// Wait for the I/Os in flight, then until this time (since the job's epoch).
    Until(Ns),
}

/// The clock-free issuing rules of one job clone (module doc): the simulator tells it what
/// it issued and completed and when, and asks when it may go on.
#[derive(Clone, Debug)]
pub struct Pacer {
    bps: [u64; 2],
    min_bs: [u64; 2],
    poisson: Option<Rng>,
    /// fio's `last_usec`: the Poisson process's time of the next I/O, per direction.
    last_ns: [Ns; 2],
    issued_bytes: [u64; 2],
    next_ns: [Ns; 2],
    think_ns: Ns,
    spin_ns: Ns,
    think_blocks: u64,
    think_on_issue: bool,
    think_last: u64,
    min_bps: [u64; 2],
    min_iops: [u64; 2],
    cycle_ns: Ns,
    /// Bytes and I/Os completed at the last minimum-rate check and its time, per direction.
    checked: [Option<(u64, u64, Ns)>; 2],
}

impl Pacer {
    /// The rules of `pace` for a job whose smallest block sizes are `min_bs` [read, write];
    /// `rng` feeds the Poisson gaps.
    pub fn new(pace: &Pace, min_bs: [u64; 2], rng: Rng) -> Self {
        let bps = [0, 1].map(|d| {
            if pace.rate_bps[d] > 0 {
                pace.rate_bps[d]
            } else {
                pace.rate_iops[d].saturating_mul(min_bs[d])
            }
        });
        Self {
            bps,
            min_bs: min_bs.map(|b| b.max(1)),
            poisson: (pace.rate_process == RateProcess::Poisson).then_some(rng),
            last_ns: [0; 2],
            issued_bytes: [0; 2],
            next_ns: [0; 2],
            think_ns: pace.thinktime_ns,
            // fio's fixup_options: thinktime_spin <= thinktime.
            spin_ns: pace.thinktime_spin_ns.min(pace.thinktime_ns),
            think_blocks: pace.thinktime_blocks.max(1),
            think_on_issue: pace.thinktime_blocks_issue,
            think_last: 0,
            min_bps: pace.rate_min_bps,
            min_iops: pace.rate_iops_min,
            cycle_ns: pace.rate_cycle_ns.max(1),
            checked: [None; 2],
        }
    }

    /// Whether any rule is set (a job without one skips the pacer).
    pub fn is_active(&self) -> bool {
        self.bps != [0; 2] || self.think_ns > 0 || self.min_bps != [0; 2] || self.min_iops != [0; 2]
    }

    /// The ramp ended: fio's `reset_io_counters` starts the rate over from the new epoch.
    pub fn restart(&mut self) {
        self.issued_bytes = [0; 2];
        self.next_ns = [0; 2];
        self.last_ns = [0; 2];
        self.checked = [None; 2];
    }

    /// Whether a rate limits either direction.
    pub fn limits_rate(&self) -> bool {
        self.bps != [0; 2]
    }

    /// fio's `rate_ddir`: may an I/O of direction `dir` (0 read, 1 write) go at `now` (since
    /// the job's epoch)?
    pub fn gate(&self, dir: usize, now: Ns) -> Gate {
        if self.bps[dir] == 0 || self.next_ns[dir] <= now {
            Gate::Go
        } else {
            Gate::Until(self.next_ns[dir])
        }
    }

    /// fio's `rate_ddir` for a job issuing both directions, whose mix drew `dir`: the
    /// direction to issue and when. `dir` when its time has come; else the other one when its
    /// time has come (or it has no rate); else the one whose time comes first, at that time.
    pub fn choose(&self, dir: usize, now: Ns) -> (usize, Gate) {
        let other = 1 - dir;
        if self.gate(dir, now) == Gate::Go {
            return (dir, Gate::Go);
        }
        if self.gate(other, now) == Gate::Go {
            return (other, Gate::Go);
        }
        if self.next_ns[dir] <= self.next_ns[other] {
            (dir, Gate::Until(self.next_ns[dir]))
        } else {
            (other, Gate::Until(self.next_ns[other]))
        }
    }

    /// An I/O of `bytes` in direction `dir` was issued: fio's `usec_for_io` sets the time of
    /// the next one.
    pub fn issued(&mut self, dir: usize, bytes: u64) {
        let bps = self.bps[dir];
        if bps == 0 {
            return;
        }
        self.issued_bytes[dir] = self.issued_bytes[dir].saturating_add(bytes);
        self.next_ns[dir] = match self.poisson.as_mut() {
            Some(rng) => {
                let iops = (bps / self.min_bs[dir]).max(1);
                // U in (0, 1]: -ln(U) is finite.
                let u = 1.0 - rng.unit();
                let gap = (SEC / iops) as f64 * -u.ln();
                self.last_ns[dir] = self.last_ns[dir].saturating_add(gap as Ns);
                self.last_ns[dir]
            }
            // Past u64 (4 TB at rate=1): the largest time, which the simulator's bound on
            // simulated time refuses naming the rate.
            None => {
                let t = u128::from(self.issued_bytes[dir]) * u128::from(SEC) / u128::from(bps);
                Ns::try_from(t).unwrap_or(Ns::MAX)
            }
        };
    }

    /// fio's `handle_thinktime` after an issue: `completed` and `issued` are the job's I/O
    /// counts so far; when a think is due it returns its spin (CPU time) and the sleep after
    /// it, the caller waiting for the I/Os in flight first.
    pub fn think(&mut self, completed: u64, issued: u64) -> Option<(Ns, Ns)> {
        if self.think_ns == 0 {
            return None;
        }
        let b = if self.think_on_issue {
            issued
        } else {
            completed
        };
        if b < self.think_last + self.think_blocks {
            return None;
        }
        self.think_last = b;
        Some((self.spin_ns, self.think_ns - self.spin_ns))
    }

    /// fio's `__check_min_rate` at `now` since the job's start, with `bytes` and `ios`
    /// completed per direction: the message of a minimum that was not met.
    pub fn min_rate_missed(&mut self, now: Ns, bytes: [u64; 2], ios: [u64; 2]) -> Option<String> {
        for d in 0..2 {
            if (self.min_bps[d] == 0 && self.min_iops[d] == 0) || bytes[d] == 0 || now < 2 * SEC {
                continue;
            }
            match self.checked[d] {
                Some((_, _, t0)) if now - t0 < self.cycle_ns => continue,
                Some((b0, n0, t0)) => {
                    // fio works in whole milliseconds.
                    let spent_ms = (now - t0) / crate::MS;
                    if spent_ms == 0 {
                        continue;
                    }
                    if self.min_bps[d] > 0 {
                        let got = (bytes[d] - b0) * 1000 / spent_ms;
                        if got < self.min_bps[d] {
                            return Some(format!(
                                "rate_min={}B/s not met, got {got}B/s",
                                self.min_bps[d]
                            ));
                        }
                    } else {
                        let got = (ios[d] - n0) * 1000 / spent_ms;
                        if got < self.min_iops[d] {
                            return Some(format!(
                                "rate_iops_min={} not met, got {got} IOPS",
                                self.min_iops[d]
                            ));
                        }
                    }
                }
                None => {}
            }
            self.checked[d] = Some((bytes[d], ios[d], now));
        }
        None
    }
}

/// The start delay of one clone: `startdelay`'s value, or a draw in its range (fio's
/// `rand_between(delay_state, lo, hi)` in `fixup_options`).
pub fn start_delay(pace: &Pace, rng: &mut Rng) -> Ns {
    let (lo, hi) = pace.startdelay_ns;
    if hi > lo {
        lo + rng.below(hi - lo + 1)
    } else {
        lo
    }
}

/// fio's iodepth fixups (`fixup_options`) for a job of `depth` outstanding I/Os:
/// `(batch_submit, complete_min, complete_max, low)`.
pub fn depth_rules(pace: &Pace, depth: u32) -> (u32, u32, u32, u32) {
    let depth = depth.max(1);
    let low = if pace.iodepth_low == 0 || pace.iodepth_low > depth {
        depth
    } else {
        pace.iodepth_low
    };
    let batch = if pace.iodepth_batch_submit == 0 || pace.iodepth_batch_submit > depth {
        depth
    } else {
        pace.iodepth_batch_submit
    };
    let cmin = pace.iodepth_batch_complete_min;
    let cmax = pace.iodepth_batch_complete_max.max(cmin);
    (batch, cmin, cmax, low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(lines: &[(&str, &str)]) -> Pace {
        let mut p = Pace::default();
        for (k, v) in lines {
            apply(&mut p, k, Some(v)).unwrap();
        }
        p
    }

    #[test]
    fn rate_takes_one_value_for_both_directions_or_a_read_write_pair() {
        assert_eq!(parsed(&[("rate", "1m")]).rate_bps, [1 << 20, 1 << 20]);
        assert_eq!(
            parsed(&[("rate", "500k,1m")]).rate_bps,
            [500 << 10, 1 << 20]
        );
        assert_eq!(parsed(&[("rate", ",1m")]).rate_bps, [0, 1 << 20]);
        assert_eq!(parsed(&[("rate_iops", "100,")]).rate_iops, [100, 0]);
        assert_eq!(parsed(&[("rate_iops", "1,2,3")]).rate_iops, [1, 2]);
        let mut p = Pace::default();
        assert_eq!(
            apply(&mut p, "rate", Some("fast")).unwrap_err(),
            ACCEPT_RATE
        );
    }

    #[test]
    fn thinktime_is_microseconds_when_bare_and_startdelay_seconds() {
        let p = parsed(&[
            ("thinktime", "250"),
            ("thinktime_spin", "1ms"),
            ("startdelay", "2-5"),
        ]);
        assert_eq!(p.thinktime_ns, 250 * US);
        assert_eq!(p.thinktime_spin_ns, crate::MS);
        assert_eq!(p.startdelay_ns, (2 * SEC, 5 * SEC));
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            let d = start_delay(&p, &mut rng);
            assert!((2 * SEC..=5 * SEC).contains(&d));
        }
        let mut p = Pace::default();
        assert!(apply(&mut p, "startdelay", Some("5-2")).is_err());
    }

    #[test]
    fn distributions_follow_fios_defaults_and_ranges() {
        let d = |v: &str| parse_distribution(v);
        assert_eq!(
            d("zipf"),
            Some(Distribution::Zipf {
                theta: 1.1,
                center: None
            })
        );
        assert_eq!(
            d("zipf:1.2:0.5"),
            Some(Distribution::Zipf {
                theta: 1.2,
                center: Some(0.5)
            })
        );
        assert_eq!(
            d("zipf:1"),
            None,
            "fio: zipf theta must be different than 1.0"
        );
        assert_eq!(
            d("pareto"),
            Some(Distribution::Pareto {
                h: 0.2,
                center: None
            })
        );
        assert_eq!(d("pareto:1.0"), None);
        assert_eq!(
            d("normal:5"),
            Some(Distribution::Normal {
                dev: 5.0,
                center: None
            })
        );
        assert_eq!(d("gauss:100"), None);
        assert_eq!(d("zipf:1.2:2"), None, "center is in [0, 1]");
        let z = |a, s| Zone {
            access_pct: a,
            size: s,
        };
        assert_eq!(
            d("zoned:50/10:50/90"),
            Some(Distribution::Zoned {
                zones: [vec![z(50, 10), z(50, 90)], vec![z(50, 10), z(50, 90)]],
                absolute: false
            })
        );
        assert_eq!(
            d("zoned_abs:60/1g:40/,90/4k:10/8k"),
            None,
            "an absolute zone needs its size"
        );
        assert_eq!(
            d("zoned_abs:60/1m:40/4m,90/4k:10/8k"),
            Some(Distribution::Zoned {
                zones: [
                    vec![z(60, 1 << 20), z(40, 4 << 20)],
                    vec![z(90, 4096), z(10, 8192)]
                ],
                absolute: true
            })
        );
        assert_eq!(d("zoned:50/10:40/90"), None, "accesses add up to 100");
        assert_eq!(d("zoned:50/60:50/60"), None, "sizes add up to at most 100");
        assert_eq!(d("uniform"), None);
    }

    #[test]
    fn a_rate_whose_next_io_lies_past_what_u64_nanoseconds_hold_saturates_there() {
        // 4 TB issued at 1 B/s: 4e21 ns, past 2^64 - 1 (1.8e19): the largest time, not the
        // time wrapped around (which would let the next I/O go at once).
        let mut pacer = Pacer::new(&parsed(&[("rate", "1")]), [4096, 4096], Rng::new(1));
        pacer.issued(0, 4 << 40);
        assert_eq!(pacer.gate(0, 0), Gate::Until(Ns::MAX));
    }

    #[test]
    fn a_linear_rate_spaces_ios_by_their_bytes_over_the_rate() {
        let p = parsed(&[("rate_iops", "1000")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        assert_eq!(pacer.gate(0, 0), Gate::Go);
        pacer.issued(0, 4096);
        assert_eq!(pacer.gate(0, 0), Gate::Until(crate::MS));
        assert_eq!(pacer.gate(0, crate::MS), Gate::Go);
        assert_eq!(pacer.gate(1, 0), Gate::Go, "writes have no rate");
        for _ in 0..999 {
            pacer.issued(0, 4096);
        }
        assert_eq!(pacer.gate(0, 0), Gate::Until(SEC));
        // rate wins over rate_iops.
        let p = parsed(&[("rate_iops", "1000"), ("rate", "1m")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        pacer.issued(0, 1 << 20);
        assert_eq!(pacer.gate(0, 0), Gate::Until(SEC));
    }

    #[test]
    fn a_direction_ahead_of_its_rate_gives_way_to_the_other_as_fios_rate_ddir() {
        let p = parsed(&[("rate_iops", "1000,500")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        assert_eq!(pacer.choose(0, 0), (0, Gate::Go));
        pacer.issued(0, 4096);
        assert_eq!(
            pacer.choose(0, 0),
            (1, Gate::Go),
            "reads ahead, writes behind"
        );
        pacer.issued(1, 4096);
        // Reads due at 1 ms, writes at 2 ms: sleep until the earlier, in its direction.
        assert_eq!(pacer.choose(1, 0), (0, Gate::Until(crate::MS)));
        assert_eq!(pacer.choose(1, 2 * crate::MS), (1, Gate::Go));
    }

    #[test]
    fn poisson_gaps_are_exponential_with_the_rates_mean() {
        let p = parsed(&[("rate_iops", "1000"), ("rate_process", "poisson")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(7));
        let n = 100_000;
        let mut prev = 0;
        let (mut sum, mut sum2, mut below_mean) = (0.0, 0.0, 0);
        for _ in 0..n {
            pacer.issued(0, 4096);
            let Gate::Until(t) = pacer.gate(0, 0) else {
                continue;
            };
            let gap = (t - prev) as f64 / 1e6; // ms
            prev = t;
            sum += gap;
            sum2 += gap * gap;
            below_mean += usize::from(gap < 1.0);
        }
        let mean = sum / n as f64;
        let sd = (sum2 / n as f64 - mean * mean).sqrt();
        assert!((mean - 1.0).abs() < 0.01, "mean {mean} ms");
        assert!(
            (sd - 1.0).abs() < 0.02,
            "an exponential's sd is its mean: {sd}"
        );
        // P(gap < mean) = 1 - 1/e.
        let frac = below_mean as f64 / n as f64;
        assert!((frac - (1.0 - (-1.0f64).exp())).abs() < 0.01, "{frac}");
    }

    #[test]
    fn thinktime_comes_every_thinktime_blocks_completions() {
        let p = parsed(&[("thinktime", "1ms"), ("thinktime_blocks", "3")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        let due: Vec<bool> = (0..10).map(|c| pacer.think(c, 100).is_some()).collect();
        assert_eq!(
            due,
            [false, false, false, true, false, false, true, false, false, true]
        );
        let p = parsed(&[("thinktime", "1ms"), ("thinktime_blocks_type", "issue")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        assert_eq!(pacer.think(0, 1), Some((0, crate::MS)));
        assert_eq!(pacer.think(5, 1), None, "issue-side counts issues");
        let p = parsed(&[("thinktime", "1ms"), ("thinktime_spin", "5ms")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        assert_eq!(pacer.think(1, 1), Some((crate::MS, 0)), "spin <= thinktime");
    }

    #[test]
    fn a_minimum_rate_is_checked_after_two_seconds_once_per_cycle() {
        let p = parsed(&[("rate_min", "1m")]);
        let mut pacer = Pacer::new(&p, [4096, 4096], Rng::new(1));
        let mib = 1u64 << 20;
        assert_eq!(pacer.min_rate_missed(SEC, [1, 0], [1, 0]), None, "settling");
        assert_eq!(pacer.min_rate_missed(2 * SEC, [2 * mib, 0], [1, 0]), None);
        assert_eq!(
            pacer.min_rate_missed(2 * SEC + SEC / 2, [2 * mib, 0], [1, 0]),
            None,
            "within the cycle"
        );
        assert_eq!(pacer.min_rate_missed(3 * SEC, [3 * mib, 0], [1, 0]), None);
        assert_eq!(
            pacer
                .min_rate_missed(4 * SEC, [3 * mib + mib / 2, 0], [1, 0])
                .as_deref(),
            Some("rate_min=1048576B/s not met, got 524288B/s")
        );
    }

    #[test]
    fn iodepth_rules_default_to_iodepth_as_fio_fixes_them_up() {
        let p = Pace::default();
        assert_eq!(depth_rules(&p, 32), (1, 1, 1, 32));
        let p = parsed(&[
            ("iodepth_batch", "0"),
            ("iodepth_low", "40"),
            ("iodepth_batch_complete_min", "4"),
        ]);
        assert_eq!(depth_rules(&p, 32), (32, 4, 4, 32));
        let p = parsed(&[("iodepth_low", "8"), ("iodepth_batch_complete_max", "16")]);
        assert_eq!(depth_rules(&p, 32), (1, 1, 16, 8));
    }
}
