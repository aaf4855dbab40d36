//! Host block device models: the bottom layer of the simulated stack.
//!
//! A device receives commands from the engine (at most [`Device::queue_depth`] outstanding, as
//! the host's block layer would issue them over NCQ or an NVMe queue), decides internally in
//! which order to serve them, and reports completions when the engine calls
//! [`Device::advance`] at the time returned by [`Device::next_event_ns`].
//!
//! Models, one file each: [`hdd`] (zoned disk with seek curve, rotational position, NCQ/SPTF,
//! segmented read-ahead cache and write-back cache), [`ssd`] (channel/die parallelism with
//! bandwidth caps, a page-mapped FTL with garbage collection in [`ftl`], clean or aged) and [`ram`] (fixed latency plus bandwidth).
//! Built-in profiles give datasheet parameters; every parameter can be overridden from a stack
//! file's `[[device]]` table. All models are deterministic and use no randomness.
//!
//! Engine protocol (what every model assumes):
//!
//! ```text
//! loop {
//!     t = min(device.next_event_ns(), next engine event)
//!     device.advance(t, &mut done)      // completions at or before t, in completion order
//!     device.submit(t, cmd)             // any time >= the last advance
//! }
//! ```
//!
//! A model accepts more than `queue_depth()` commands (they wait inside the device) but the
//! engine should not rely on it: real hosts never exceed the NCQ depth. Commands beyond the
//! capacity complete (each model documents how); the engine validates ranges.

pub mod ftl;
pub mod hdd;
pub mod ram;
pub mod ssd;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use vmio_core::units::{parse_duration_ns, parse_size};
use vmio_core::{request::Op, Ns, MS};

/// One command as the device sees it. `len_bytes` may be 0 (flush, or an empty request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevCmd {
    pub tag: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub fua: bool,
}

/// Counters a device keeps; `busy_ns` is the time with at least one command outstanding (what
/// iostat reports as utilisation).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DeviceStats {
    pub read_ops: u64,
    pub write_ops: u64,
    pub flush_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub busy_ns: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Bytes programmed to flash, host and GC (SSD with FTL; 0 for other models).
    pub flash_write_bytes: u64,
    /// Garbage-collection victims cleaned, and die time spent on GC.
    pub gc_count: u64,
    pub gc_ns: u64,
}

/// A host block device model. The engine submits commands (at most `queue_depth()` outstanding) and
/// calls `advance(now)` when `next_event_ns()` is reached; the device decides internally the order of service (NCQ).
pub trait Device {
    fn name(&self) -> &str;
    fn model(&self) -> &'static str; // "hdd" | "ssd" | "ram"
    fn capacity_bytes(&self) -> u64;
    fn queue_depth(&self) -> usize; // e.g. NCQ 32
    fn submit(&mut self, now: Ns, cmd: DevCmd); // len_bytes may be 0 for Flush
    fn next_event_ns(&self) -> Option<Ns>; // earliest time something completes / internal state changes
    fn advance(&mut self, now: Ns, done: &mut Vec<u64>); // process up to `now`, push tags of completed commands (in completion order)
    fn stats(&self) -> DeviceStats;
    /// Effective parameters (for result records), as (name, value-as-string) in a stable order.
    fn params(&self) -> Vec<(String, String)>;
    /// Performance hint, no effect on results: a command `op` on `[offset, offset + len)` is
    /// queued and will be submitted later, so the model may start loading the state it will
    /// need into the CPU cache (the SSD prefetches the FTL mapping entries).
    fn prefetch(&self, _op: Op, _offset_bytes: u64, _len_bytes: u64) {}
}

/// Device models accepted in a stack file's `[[device]] model = ...`.
pub const MODELS: &[&str] = &["hdd", "ssd", "ram"];

/// A bad `[[device]]` table. Messages name the device, the parameter or value at fault and
/// what is accepted. (Fields are boxed strings to keep the error small.)
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device '{device}': unknown model '{model}'; accepted: {}", .accepted.join(", "))]
    UnknownModel {
        device: Box<str>,
        model: Box<str>,
        accepted: &'static [&'static str],
    },
    #[error("device '{device}': unknown profile '{profile}' for model '{model}'; accepted: {}", .accepted.join(", "))]
    UnknownProfile {
        device: Box<str>,
        model: &'static str,
        profile: Box<str>,
        accepted: &'static [&'static str],
    },
    #[error("device '{device}': unknown parameter '{param}' for model '{model}'; accepted: {}", .accepted.join(", "))]
    UnknownParam {
        device: Box<str>,
        model: &'static str,
        param: Box<str>,
        accepted: &'static [&'static str],
    },
    #[error("device '{device}': {param} = {value}: {expected}")]
    BadValue {
        device: Box<str>,
        param: &'static str,
        value: Box<str>,
        expected: Box<str>,
    },
}

/// Build a device from a stack-file `[[device]]` entry: `model` ("hdd"|"ssd"|"ram"), an optional built-in `profile`, and override parameters (everything else in the table).
/// Random state (an aged SSD's layout) comes from a fixed seed; see [`build_device_seeded`].
pub fn build_device(
    name: &str,
    model: &str,
    profile: Option<&str>,
    params: &BTreeMap<String, toml::Value>,
) -> Result<Box<dyn Device>, DeviceError> {
    build_device_seeded(name, model, profile, params, 0x840_0256)
}

/// [`build_device`] with the seed of the device's random state (derive it from the run seed).
pub fn build_device_seeded(
    name: &str,
    model: &str,
    profile: Option<&str>,
    params: &BTreeMap<String, toml::Value>,
    seed: u64,
) -> Result<Box<dyn Device>, DeviceError> {
    let Some(&model) = MODELS.iter().find(|&&m| m == model) else {
        return Err(DeviceError::UnknownModel {
            device: name.into(),
            model: model.into(),
            accepted: MODELS,
        });
    };
    let profiles = profile_names(model);
    let profile = profile.unwrap_or(profiles[0]);
    if !profiles.contains(&profile) {
        return Err(DeviceError::UnknownProfile {
            device: name.into(),
            model,
            profile: profile.into(),
            accepted: profiles,
        });
    }
    let reader = ParamReader::new(name, model, params);
    Ok(match model {
        "hdd" => Box::new(hdd::Hdd::new(
            name,
            hdd::HddParams::from_params(profile, &reader)?,
        )),
        "ssd" => Box::new(ssd::Ssd::new_seeded(
            name,
            ssd::SsdParams::from_params(profile, &reader)?,
            seed,
        )),
        _ => Box::new(ram::Ram::new(
            name,
            ram::RamParams::from_params(profile, &reader)?,
        )),
    })
}

/// Memory a device's model will allocate, in bytes, and its capacity: the SSD's FTL tables
/// ([`ftl::estimated_bytes`]); 0 for the HDD and RAM models, whose state does not grow with
/// the capacity. Checks the model, profile and parameters like [`build_device_seeded`] (and
/// returns its errors), without allocating anything.
pub fn estimated_bytes(
    name: &str,
    model: &str,
    profile: Option<&str>,
    params: &BTreeMap<String, toml::Value>,
) -> Result<(u64, u64), DeviceError> {
    if model != "ssd" {
        return Ok((0, 0));
    }
    let profiles = profile_names("ssd");
    let profile = profile.unwrap_or(profiles[0]);
    if !profiles.contains(&profile) {
        return Err(DeviceError::UnknownProfile {
            device: name.into(),
            model: "ssd",
            profile: profile.into(),
            accepted: profiles,
        });
    }
    let p = ssd::SsdParams::from_params(profile, &ParamReader::new(name, "ssd", params))?;
    Ok((ftl::estimated_bytes(&p.ftl_geometry()), p.capacity_bytes))
}

/// Built-in profiles of a model; the first is the default. Empty for an unknown model.
pub fn profile_names(model: &str) -> &'static [&'static str] {
    match model {
        "hdd" => hdd::PROFILES,
        "ssd" => ssd::PROFILES,
        "ram" => ram::PROFILES,
        _ => &[],
    }
}

/// Typed access to the override parameters of one `[[device]]` table, with errors that name
/// the device, the parameter, the value and what is accepted.
pub struct ParamReader<'a> {
    device: &'a str,
    model: &'static str,
    map: &'a BTreeMap<String, toml::Value>,
}

/// Keys of a `[[device]]` table that are not model parameters (tolerated if passed through).
const TABLE_KEYS: &[&str] = &["name", "model", "profile"];

impl<'a> ParamReader<'a> {
    pub fn new(
        device: &'a str,
        model: &'static str,
        map: &'a BTreeMap<String, toml::Value>,
    ) -> Self {
        Self { device, model, map }
    }

    /// Reject any key that is not in `accepted` (checked in key order, so deterministic).
    pub fn check_known(&self, accepted: &'static [&'static str]) -> Result<(), DeviceError> {
        for key in self.map.keys() {
            if !accepted.contains(&key.as_str()) && !TABLE_KEYS.contains(&key.as_str()) {
                return Err(DeviceError::UnknownParam {
                    device: self.device.into(),
                    model: self.model,
                    param: key.as_str().into(),
                    accepted,
                });
            }
        }
        Ok(())
    }

    pub fn bad(
        &self,
        param: &'static str,
        value: impl std::fmt::Display,
        expected: &str,
    ) -> DeviceError {
        DeviceError::BadValue {
            device: self.device.into(),
            param,
            value: value.to_string().into(),
            expected: expected.into(),
        }
    }

    /// A size in bytes: `"2t"`, `"256m"` (fio units, base 1024) or a non-negative integer.
    pub fn size(&self, param: &'static str, default: u64) -> Result<u64, DeviceError> {
        const EXP: &str = "must be a size in bytes (an integer, or a string like \"256m\", \"2t\")";
        match self.map.get(param) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if *i >= 0 => Ok(*i as u64),
            Some(toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 && *f < 1.8e19 => {
                Ok(f.round() as u64)
            }
            Some(toml::Value::String(s)) => parse_size(s).map_err(|_| self.bad(param, v(s), EXP)),
            Some(other) => Err(self.bad(param, other, EXP)),
        }
    }

    /// A rate in bytes per second: `"220m"` (parsed as a size, base 1024, optional `/s`) or a
    /// positive number (bytes/s).
    pub fn rate(&self, param: &'static str, default: u64) -> Result<u64, DeviceError> {
        const EXP: &str = "must be a positive rate in bytes/s (a number, or a string like \"220m\" or \"220m/s\")";
        let r = match self.map.get(param) {
            None => return Ok(default),
            Some(toml::Value::Integer(i)) if *i > 0 => *i as u64,
            Some(toml::Value::Float(f)) if f.is_finite() && *f >= 1.0 && *f < 1e18 => {
                f.round() as u64
            }
            Some(toml::Value::String(s)) => {
                let t = s.trim();
                let t = t.strip_suffix("/s").unwrap_or(t);
                parse_size(t).map_err(|_| self.bad(param, v(s), EXP))?
            }
            Some(other) => return Err(self.bad(param, other, EXP)),
        };
        if r == 0 {
            return Err(self.bad(param, self.map[param].clone(), EXP));
        }
        Ok(r)
    }

    /// A duration in ns: `"8.5ms"`, `"50us"` or a non-negative number of milliseconds.
    pub fn duration(&self, param: &'static str, default: Ns) -> Result<Ns, DeviceError> {
        const EXP: &str =
            "must be a duration (a number of milliseconds, or a string like \"8.5ms\", \"50us\")";
        match self.map.get(param) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if *i >= 0 => (*i as u64)
                .checked_mul(MS)
                .ok_or_else(|| self.bad(param, i, EXP)),
            Some(toml::Value::Float(f)) if f.is_finite() && *f >= 0.0 && *f < 1e9 => {
                Ok((f * MS as f64).round() as Ns)
            }
            Some(toml::Value::String(s)) => {
                parse_duration_ns(s, MS).map_err(|_| self.bad(param, v(s), EXP))
            }
            Some(other) => Err(self.bad(param, other, EXP)),
        }
    }

    /// A positive integer.
    pub fn positive(&self, param: &'static str, default: u64) -> Result<u64, DeviceError> {
        match self.map.get(param) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if *i > 0 => Ok(*i as u64),
            Some(other) => Err(self.bad(param, other, "must be a positive integer")),
        }
    }

    pub fn boolean(&self, param: &'static str, default: bool) -> Result<bool, DeviceError> {
        match self.map.get(param) {
            None => Ok(default),
            Some(toml::Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(self.bad(param, other, "must be true or false")),
        }
    }
}

/// Quote a string value for an error message the way TOML writes it.
fn v(s: &str) -> String {
    format!("{s:?}")
}

/// `8500000` ns -> `"8.5ms"`; a form [`ParamReader::duration`] reads back exactly.
pub fn fmt_ms(ns: Ns) -> String {
    let mut s = String::new();
    let whole = ns / MS;
    let frac = ns % MS;
    if frac == 0 {
        let _ = write!(s, "{whole}ms");
    } else {
        let f = format!("{frac:06}");
        let _ = write!(s, "{whole}.{}ms", f.trim_end_matches('0'));
    }
    s
}

/// Time-ordered completions for models that can compute a command's completion time when it
/// is submitted (FIFO resources, no reordering): a min-heap ([`crate::engine::MinHeap`])
/// keyed by (time, submission order), carrying the tag and the op and length for the
/// statistics.
#[derive(Debug, Default)]
pub(crate) struct Completions {
    /// Key (completion time, submission sequence); value (tag, op, bytes).
    heap: crate::engine::MinHeap<(u64, Op, u64)>,
    seq: u64,
}

impl Completions {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            heap: crate::engine::MinHeap::with_capacity(n),
            seq: 0,
        }
    }
    #[inline]
    pub(crate) fn push(&mut self, at: Ns, cmd: &DevCmd) {
        self.seq += 1;
        self.heap
            .push((at, self.seq), (cmd.tag, cmd.op, cmd.len_bytes));
    }
    #[inline]
    pub(crate) fn next(&self) -> Option<Ns> {
        self.heap.peek_key().map(|k| k.0)
    }
    /// Pop every completion at or before `now` into `done`, updating `stats` and `busy`.
    pub(crate) fn drain_due(
        &mut self,
        now: Ns,
        done: &mut Vec<u64>,
        stats: &mut DeviceStats,
        busy: &mut Busy,
    ) {
        while let Some((at, _)) = self.heap.peek_key() {
            if at > now {
                break;
            }
            let ((t, _), (tag, op, len)) = self.heap.pop().unwrap();
            match op {
                Op::Read => {
                    stats.read_ops += 1;
                    stats.read_bytes += len;
                }
                Op::Write => {
                    stats.write_ops += 1;
                    stats.write_bytes += len;
                }
                Op::Flush => stats.flush_ops += 1,
                Op::Trim => {}
            }
            busy.end(t);
            done.push(tag);
        }
    }
}

/// Utilisation bookkeeping shared by the models: `busy_ns` accumulates while commands are
/// outstanding.
#[derive(Debug, Default, Clone)]
pub(crate) struct Busy {
    outstanding: u64,
    since: Ns,
    pub(crate) busy_ns: u64,
}

impl Busy {
    pub(crate) fn start(&mut self, now: Ns) {
        if self.outstanding == 0 {
            self.since = now;
        }
        self.outstanding += 1;
    }
    pub(crate) fn end(&mut self, at: Ns) {
        if self.outstanding == 0 {
            return;
        }
        self.outstanding -= 1;
        if self.outstanding == 0 {
            self.busy_ns += at.saturating_sub(self.since);
        }
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! A closed-loop driver for device unit tests: keeps `qd` commands outstanding and
    //! records each one's service time.
    use super::*;

    pub struct Run {
        pub elapsed_ns: Ns,
        /// Service time of each command, indexed by its number (= tag).
        pub latencies_ns: Vec<Ns>,
        pub completed: usize,
    }

    impl Run {
        pub fn iops(&self) -> f64 {
            self.completed as f64 / (self.elapsed_ns as f64 / 1e9)
        }
        pub fn mean_latency_ns(&self) -> f64 {
            self.latencies_ns.iter().sum::<u64>() as f64 / self.latencies_ns.len() as f64
        }
    }

    /// Run `n` commands from `gen(i)` at queue depth `qd` starting at `start`, with no think
    /// time; returns when all have completed.
    pub fn closed_loop(
        dev: &mut dyn Device,
        start: Ns,
        qd: usize,
        n: usize,
        mut gen: impl FnMut(usize) -> (Op, u64, u64),
    ) -> Run {
        let mut now = start;
        let mut issued = 0usize;
        let mut submitted_at: BTreeMap<u64, Ns> = BTreeMap::new();
        let mut latencies = vec![0; n];
        let mut completed = 0usize;
        let mut done = Vec::new();
        let mut submit = |dev: &mut dyn Device, now: Ns, i: usize, at: &mut BTreeMap<u64, Ns>| {
            let (op, off, len) = gen(i);
            dev.submit(
                now,
                DevCmd {
                    tag: i as u64,
                    op,
                    offset_bytes: off,
                    len_bytes: len,
                    fua: false,
                },
            );
            at.insert(i as u64, now);
        };
        while issued < qd.min(n) {
            submit(dev, now, issued, &mut submitted_at);
            issued += 1;
        }
        while completed < n {
            let t = dev
                .next_event_ns()
                .expect("device has outstanding commands but no next event");
            assert!(t >= now, "device event in the past: {t} < {now}");
            now = t;
            done.clear();
            dev.advance(now, &mut done);
            for tag in done.iter() {
                let s = submitted_at.remove(tag).expect("unknown or repeated tag");
                latencies[*tag as usize] = now - s;
                completed += 1;
                if issued < n {
                    submit(dev, now, issued, &mut submitted_at);
                    issued += 1;
                }
            }
        }
        Run {
            elapsed_ns: now - start,
            latencies_ns: latencies,
            completed: n,
        }
    }

    /// Submit one command at `now` and run the device until it completes; returns the
    /// completion time.
    pub fn one(
        dev: &mut dyn Device,
        now: Ns,
        tag: u64,
        op: Op,
        off: u64,
        len: u64,
        fua: bool,
    ) -> Ns {
        dev.submit(
            now,
            DevCmd {
                tag,
                op,
                offset_bytes: off,
                len_bytes: len,
                fua,
            },
        );
        let mut done = Vec::new();
        loop {
            let t = dev.next_event_ns().expect("command never completes");
            done.clear();
            dev.advance(t, &mut done);
            if done.contains(&tag) {
                return t;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(src: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(src).unwrap()
    }

    #[test]
    fn every_model_builds_from_its_default_profile() {
        for model in MODELS {
            let d = build_device("d0", model, None, &BTreeMap::new()).unwrap();
            assert_eq!(d.model(), *model);
            assert!(d.capacity_bytes() > 0);
            assert!(d.queue_depth() > 0);
            assert!(!d.params().is_empty());
            for p in profile_names(model) {
                build_device("d0", model, Some(p), &BTreeMap::new()).unwrap();
            }
        }
    }

    #[test]
    fn an_unknown_model_is_named_with_the_accepted_models() {
        let e = build_device("sda", "tape", None, &BTreeMap::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'sda'") && e.contains("'tape'") && e.contains("hdd, ssd, ram"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_profile_is_named_with_the_accepted_profiles() {
        let e = build_device("sda", "hdd", Some("hdd-9000"), &BTreeMap::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'sda'") && e.contains("'hdd-9000'") && e.contains("hdd-7200-2tb"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_parameter_is_named_with_the_accepted_parameters() {
        let e = build_device("sda", "hdd", None, &table("rmp = 7200"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'sda'") && e.contains("'rmp'") && e.contains("rpm"),
            "{e}"
        );
        let e = build_device("nv0", "ssd", None, &table("rpm = 7200"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("'nv0'") && e.contains("'rpm'") && e.contains("channels"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_parameter_the_value_and_the_expectation() {
        let cases = [
            ("rpm = -5", "rpm = -5: must be a positive integer"),
            (
                "rpm = \"fast\"",
                "rpm = \"fast\": must be a positive integer",
            ),
            ("capacity = \"2x\"", "capacity = \"2x\": must be a size"),
            (
                "avg_seek = \"slow\"",
                "avg_seek = \"slow\": must be a duration",
            ),
            ("outer_rate = 0", "outer_rate = 0: must be a positive rate"),
            ("write_cache = 1", "write_cache = 1: must be true or false"),
            ("inner_rate = \"300m\"", "inner_rate = 314572800: must be"),
            (
                "avg_seek = 20",
                "avg_seek = 20ms: must lie between track_to_track (0.8ms)",
            ),
        ];
        for (src, want) in cases {
            let e = build_device("sda", "hdd", None, &table(src))
                .err()
                .unwrap_or_else(|| panic!("{src} accepted"))
                .to_string();
            assert!(e.starts_with("device 'sda': "), "{e}");
            assert!(e.contains(want), "{src}: got {e}");
        }
    }

    #[test]
    fn overrides_show_in_the_effective_parameters() {
        let d = build_device(
            "sda",
            "hdd",
            Some("hdd-7200-2tb"),
            &table("rpm = 5400\ncapacity = \"1t\"\navg_seek = \"9ms\"\nouter_rate = \"150m/s\""),
        )
        .unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["rpm"], "5400");
        assert_eq!(p["capacity"], (1u64 << 40).to_string());
        assert_eq!(p["avg_seek"], "9ms");
        assert_eq!(p["outer_rate"], (150u64 << 20).to_string());
        assert_eq!(p["profile"], "hdd-7200-2tb");
    }

    #[test]
    fn durations_format_back_to_what_they_parse_from() {
        assert_eq!(fmt_ms(8_500_000), "8.5ms");
        assert_eq!(fmt_ms(50_000), "0.05ms");
        assert_eq!(fmt_ms(16 * MS), "16ms");
        assert_eq!(fmt_ms(1), "0.000001ms");
        for ns in [1, 50_000, 8_333_333, 16 * MS] {
            assert_eq!(parse_duration_ns(&fmt_ms(ns), MS).unwrap(), ns);
        }
    }
}
