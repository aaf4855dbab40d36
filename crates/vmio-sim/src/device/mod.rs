//! Host block device models: the bottom layer of the simulated stack.
//!
//! A device receives commands from the engine (at most [`Device::queue_depth`] outstanding, as
//! the host's block layer would issue them over NCQ or an NVMe queue), decides internally in
//! which order to serve them, and reports completions when the engine calls
//! [`Device::advance`] at the time returned by [`Device::next_event_ns`].
//!
//! Models, one file each: [`hdd`] (zoned disk with seek curve, rotational position, NCQ/SPTF,
//! segmented read-ahead cache and write-back cache), [`ssd`] (channel/die parallelism with
//! bandwidth caps, a page-mapped FTL with garbage collection in [`ftl`], clean or aged), [`ram`] (fixed latency plus bandwidth) and [`flash`] (a generic flash/NVMe device:
//! parallel units, a data pipe per direction, a shared link and an optional write buffer;
//! the model `vmio calibrate` fits).
//! Built-in profiles give datasheet parameters; every parameter can be overridden from a stack
//! file's `[[device]]` table. Each model file declares its parameters once
//! ([`vmio_core::params::ParamSpec`]s, their defaults being its profile's figures) in an
//! `ENTRY`; [`REGISTRY`] lists the models for the stack parser's errors and `vmio help
//! stack`. All models are deterministic (the SSD's read retries draw from the device's seeded stream).
//! What a device tells the host's block layer about its cache, every model declares with
//! the same two keys: `write_cache` (a volatile write cache, so a FLUSH must reach it; the
//! HDD's own parameter, which also switches its cache model) and `fua` (it honours Force
//! Unit Access), read by [`Device::caps`]; the block queue (sim/blockq.rs) applies Linux's
//! flush policy to them ([`vmio_core::blockq::flush_seq`]). Defaults, per model: `hdd` and
//! `ssd` both (SATA NCQ's WRITE FPDMA QUEUED carries a FUA bit, ACS-3 7.58; Linux's libata
//! uses it since 6.3, as recalled: before, its `fua` module parameter defaulted to 0, so
//! a SATA disk showed `queue/fua` 0), `flash` both (drivers/nvme/host/core.c sets write cache
//! and FUA together from the controller's Volatile Write Cache bit, NVM Express Base 2.0,
//! Identify Controller `VWC`), `ram` a cache without FUA, as the loop driver over a tmpfs
//! file advertises (drivers/block/loop.c, `loop_configure`: `blk_queue_write_cache(q,
//! true, false)` when the file has fsync; a FLUSH is the file's fsync, a no-op on tmpfs that
//! costs the command's latency here); `brd` advertises no cache: `write_cache = false`.
//! A result record lists `fua`, and `write_cache` of the models without a cache of their own,
//! only when set away from the model's default ([`record`]).
//! A model states who it is once, as an [`Identity`] (name, model, profile and values,
//! capacity, queue depth); the trait's getters (`name`, `model`, `capacity_bytes`,
//! `queue_depth`, `params`) are provided methods that read it.
//!
//! Thin provisioning is a layer any model can have ([`thin`]: `[[device]] thin_block` and
//! its keys, [`thin::PARAMS`], read beside the model's own parameters and stripped from them
//! before the model validates its table); a thick device (`thin_block` 0, the default) is
//! the model alone.
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

pub mod flash;
pub mod ftl;
pub mod hdd;
pub mod ram;
pub mod ssd;
pub mod thin;

use std::collections::BTreeMap;

use vmio_core::blockq::Caps;
use vmio_core::params::{format_ms, Entry, Kind, ParamError, ParamSpec, Value, Values};
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
    /// Thin provisioning ([`thin`]): write commands that provisioned blocks, and the blocks
    /// (listed only when not 0: a thick device's record is unchanged).
    #[serde(skip_serializing_if = "is_zero")]
    pub thin_provisions: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub thin_blocks: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DeviceStats {
    /// Count a completed command: its op and its bytes (a trim is not counted).
    #[inline]
    pub fn count(&mut self, op: Op, len_bytes: u64) {
        match op {
            Op::Read => {
                self.read_ops += 1;
                self.read_bytes += len_bytes;
            }
            Op::Write => {
                self.write_ops += 1;
                self.write_bytes += len_bytes;
            }
            Op::Flush => self.flush_ops += 1,
            Op::Trim => {}
        }
    }

    /// These counters with the busy time as of `now` (a busy period still open counts up to
    /// `now`): what [`Device::stats`] returns for a model that keeps a [`Busy`].
    pub(crate) fn as_of(&self, busy: &Busy, now: Ns) -> DeviceStats {
        DeviceStats {
            busy_ns: busy.busy_at(now),
            ..self.clone()
        }
    }
}

/// Who a device is, as the engine and the result records read it: its `[[device]]` name, its
/// model (`hdd`, `ssd`, `ram`, `flash`: its registry entry's name), the profile and values it
/// was built from, its capacity and the commands it takes at once (NCQ 32, an NVMe queue).
/// Every model hands one out ([`Device::identity`]) and the trait's getters read it, so each
/// getter is written once, here.
#[derive(Clone, Copy, Debug)]
pub struct Identity<'a> {
    pub name: &'a str,
    pub model: &'static str,
    pub profile: &'a str,
    pub values: &'a Values,
    pub capacity_bytes: u64,
    pub queue_depth: u64,
}

impl<'a> Identity<'a> {
    /// Device `name` of the model of `entry`, built from `profile` and `values` (the
    /// model's parameters' struct holds them); capacity and queue depth 0 until
    /// [`Identity::limits`] sets them.
    pub fn new(name: &'a str, entry: &ModelEntry, profile: &'a str, values: &'a Values) -> Self {
        Identity {
            name,
            model: entry.name,
            profile,
            values,
            capacity_bytes: 0,
            queue_depth: 0,
        }
    }

    /// The limits the engine keeps to: requests within `capacity_bytes`, at most
    /// `queue_depth` commands outstanding.
    pub fn limits(self, capacity_bytes: u64, queue_depth: u64) -> Self {
        Identity {
            capacity_bytes,
            queue_depth,
            ..self
        }
    }
}

/// A host block device model. The engine submits commands (at most `queue_depth()` outstanding) and
/// calls `advance(now)` when `next_event_ns()` is reached; the device decides internally the order of service (NCQ).
/// A model implements [`Device::identity`] and the engine protocol; the getters are provided.
pub trait Device {
    /// Name, model, profile, values, capacity and queue depth (the getters below read it).
    fn identity(&self) -> Identity<'_>;
    fn name(&self) -> &str {
        self.identity().name
    }
    fn model(&self) -> &'static str {
        self.identity().model
    }
    fn capacity_bytes(&self) -> u64 {
        self.identity().capacity_bytes
    }
    /// Commands the device takes at once (e.g. NCQ 32).
    fn queue_depth(&self) -> usize {
        self.identity().queue_depth as usize
    }
    fn submit(&mut self, now: Ns, cmd: DevCmd); // len_bytes may be 0 for Flush
    fn next_event_ns(&self) -> Option<Ns>; // earliest time something completes / internal state changes
    fn advance(&mut self, now: Ns, done: &mut Vec<u64>); // process up to `now`, push tags of completed commands (in completion order)
    /// The counters as of `now` (a busy period still open at `now` counts up to it).
    fn stats(&self, now: Ns) -> DeviceStats;
    /// Effective parameters (for result records), as (name, value-as-string) in a stable
    /// order: by default the profile and every declared value (`record`).
    fn params(&self) -> Vec<(String, String)> {
        let id = self.identity();
        record(id.profile, id.values)
    }
    /// What the device tells the block layer about its cache: its `write_cache` and `fua`
    /// values (every model declares both; an undeclared one reads as true, the block
    /// layer's behaviour before they existed).
    fn caps(&self) -> Caps {
        let values = self.identity().values;
        let flag = |name: &str| {
            values
                .iter()
                .find(|(spec, _)| spec.name == name)
                .is_none_or(|(_, v)| v != Value::Bool(false))
        };
        Caps {
            write_cache: flag("write_cache"),
            fua: flag("fua"),
        }
    }
    /// Performance hint, no effect on results: a command `op` on `[offset, offset + len)` is
    /// queued and will be submitted later, so the model may start loading the state it will
    /// need into the CPU cache (the SSD prefetches the FTL mapping entries).
    fn prefetch(&self, _op: Op, _offset_bytes: u64, _len_bytes: u64) {}
    /// The engine's initial state: `[offset, offset + len)` holds nothing yet (a thin
    /// device unprovisions the blocks it covers whole, [`thin`]); a thick model ignores it.
    fn unprovision(&mut self, _offset_bytes: u64, _len_bytes: u64) {}
}

/// How a model is built. The parameters' declared defaults are the figures of the model's
/// first profile (each model has one built-in profile today; another would state its
/// differing figures).
pub struct ModelBuild {
    /// Built-in profiles; the first is the default.
    pub profiles: &'static [&'static str],
    pub new: NewDevice,
    /// Memory the model will allocate and its capacity, in bytes, without allocating (the
    /// same checks as `new`).
    pub memory: fn(&Values) -> Result<(u64, u64), ParamError>,
}

/// A model's constructor: the device named `name` from its profile's name, its validated
/// values (the rules relating several parameters are checked here) and the seed of its
/// random state.
pub type NewDevice = fn(&str, &str, &Values, u64) -> Result<Box<dyn Device>, ParamError>;

pub type ModelEntry = Entry<ModelBuild>;

/// Device models accepted in a stack file's `[[device]] model = ...`, in help order.
pub const REGISTRY: &[&ModelEntry] = &[&hdd::ENTRY, &ssd::ENTRY, &ram::ENTRY, &flash::ENTRY];

/// A bad `[[device]]` table. Messages name the device, the parameter or value at fault and
/// what is accepted. (Fields are boxed to keep the error small.)
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device '{device}': unknown model '{model}'; accepted: {accepted}")]
    UnknownModel {
        device: Box<str>,
        model: Box<str>,
        accepted: Box<str>,
    },
    #[error("device '{device}': unknown profile '{profile}' for model '{model}'; accepted: {}", .accepted.join(", "))]
    UnknownProfile {
        device: Box<str>,
        model: &'static str,
        profile: Box<str>,
        accepted: &'static [&'static str],
    },
    #[error(
        "device '{device}': unknown parameter '{param}' for model '{model}'; accepted: {accepted}"
    )]
    UnknownParam {
        device: Box<str>,
        model: &'static str,
        param: Box<str>,
        accepted: Box<str>,
    },
    /// A parameter's value (`rpm = -5: must be ...`).
    #[error("device '{device}': {source}")]
    BadValue {
        device: Box<str>,
        source: Box<ParamError>,
    },
}

/// Keys of a `[[device]]` table that are not model parameters (tolerated if passed through),
/// the thin layer's among them ([`thin::PARAMS`], read by [`thin::read`]).
const TABLE_KEYS: &[&str] = &[
    "name",
    "model",
    "profile",
    thin::BLOCK.name,
    thin::REQUEST.name,
    thin::BLOCK_COST.name,
    thin::ZERO.name,
];

/// The model, profile and parameter values of a `[[device]]` table: the profile's figures
/// with the table's overrides, each checked against its declaration.
pub fn read_params(
    name: &str,
    model: &str,
    profile: Option<&str>,
    params: &BTreeMap<String, toml::Value>,
) -> Result<(&'static ModelEntry, &'static str, Values), DeviceError> {
    let entry =
        REGISTRY
            .iter()
            .find(|e| e.name == model)
            .ok_or_else(|| DeviceError::UnknownModel {
                device: name.into(),
                model: model.into(),
                accepted: vmio_core::params::names(REGISTRY).into(),
            })?;
    let profiles = entry.build.profiles;
    let profile = match profile {
        None => profiles[0],
        Some(p) => {
            profiles
                .iter()
                .find(|&&q| q == p)
                .ok_or_else(|| DeviceError::UnknownProfile {
                    device: name.into(),
                    model: entry.name,
                    profile: p.into(),
                    accepted: profiles,
                })?
        }
    };
    let mut values = Values::defaults(entry.params);
    values
        .read(params, TABLE_KEYS)
        .map_err(|e| param_error(name, entry, e))?;
    Ok((entry, profile, values))
}

/// A parameter error of device `name`, as a [`DeviceError`].
fn param_error(name: &str, entry: &ModelEntry, e: ParamError) -> DeviceError {
    match e {
        ParamError::Unknown { key, accepted } => DeviceError::UnknownParam {
            device: name.into(),
            model: entry.name,
            param: key.into(),
            accepted: format!(
                "{accepted}, {}",
                thin::PARAMS
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into(),
        },
        other => DeviceError::BadValue {
            device: name.into(),
            source: Box::new(other),
        },
    }
}

/// A bad value found by a model's cross-parameter rules.
pub(crate) fn bad(param: &str, value: impl std::fmt::Display, expected: &str) -> ParamError {
    ParamError::Bad {
        key: param.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// Effective parameters as result records list them: the profile, then every declared
/// parameter (durations as `8.5ms`, sizes and rates in bytes), but the block layer's
/// capabilities [`WRITE_CACHE`] and [`fua`] at their default: a model's record reads as it
/// did before they were declared (the HDD's own `write_cache` is always listed).
pub(crate) fn record(profile: &str, values: &Values) -> Vec<(String, String)> {
    let mut out = vec![("profile".to_string(), profile.to_string())];
    out.extend(record_values(values));
    out
}

/// [`record`]'s parameters without the profile.
pub(crate) fn record_values(values: &Values) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (spec, v) in values.iter() {
        if is_capability(spec) && v == spec.default {
            continue;
        }
        let text = match (spec.kind, v) {
            (Kind::Duration { .. }, Value::Int(ns)) => format_ms(ns),
            (_, Value::Int(n)) => n.to_string(),
            (_, Value::Float(f)) => f.to_string(),
            (_, Value::Bool(b)) => b.to_string(),
            (_, Value::Choice(c) | Value::Computed(c)) => c.to_string(),
        };
        out.push((spec.name.to_string(), text));
    }
    out
}

/// The block layer's `write_cache` capability of a model without a cache model of its own
/// (the HDD declares its own `write_cache`, which also switches its cache on or off).
pub(crate) const WRITE_CACHE: ParamSpec = ParamSpec {
    name: "write_cache",
    kind: Kind::Bool,
    default: Value::Bool(true),
    unit: "",
    help: "a volatile write cache (sysfs queue/write_cache \"write back\"): FLUSH and FUA reach the device; false: the block layer completes a FLUSH at once and drops FUA",
};

/// The block layer's `fua` capability, defaulting to `default`.
pub(crate) const fn fua(default: bool) -> ParamSpec {
    ParamSpec {
        name: "fua",
        kind: Kind::Bool,
        default: Value::Bool(default),
        unit: "",
        help: "honours Force Unit Access (sysfs queue/fua); false, with a write cache: the block layer sends a FUA write as the write, then a FLUSH",
    }
}

/// Whether `spec` is one of the shared capability declarations ([`WRITE_CACHE`], [`fua`]).
fn is_capability(spec: &ParamSpec) -> bool {
    *spec == WRITE_CACHE || spec.name == "fua"
}

/// A model's usable capacity, defaulting to its profile's figure.
pub(crate) const fn capacity(bytes: u64) -> ParamSpec {
    ParamSpec {
        name: "capacity",
        kind: Kind::POSITIVE_SIZE,
        default: Value::Int(bytes),
        unit: "bytes",
        help: "usable capacity",
    }
}

/// The SATA link of the HDD and SSD models: 6 Gb/s, 600 MB/s after 8b/10b.
pub(crate) const SATA_LINK_RATE: ParamSpec = ParamSpec {
    name: "link_rate",
    kind: Kind::Rate,
    default: Value::Int(600_000_000),
    unit: "bps",
    help: "SATA link rate (6 Gb/s after 8b/10b)",
};

/// The queue depth of models whose commands the host queues without a device limit of its
/// own (RAM disk, NVMe): 128 requests, BLKDEV_DEFAULT_RQ (include/linux/blkdev.h).
pub(crate) const BLK_MQ_QUEUE_DEPTH: ParamSpec = ParamSpec {
    name: "queue_depth",
    kind: Kind::Count {
        min: 1,
        max: 65_536,
    },
    default: Value::Int(128),
    unit: "",
    help: "commands outstanding (blk-mq default 128)",
};

/// A duration parameter of device models: a bare number is milliseconds.
pub(crate) const DURATION: Kind = Kind::Duration {
    bare: MS,
    positive: false,
};

/// Build a device from a stack-file `[[device]]` entry: `model` (a [`REGISTRY`] name), an optional built-in `profile`, and override parameters (everything else in the table).
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
    let (entry, profile, values) = read_params(name, model, profile, params)?;
    let thin = thin::read(params).map_err(|e| param_error(name, entry, e))?;
    let device =
        (entry.build.new)(name, profile, &values, seed).map_err(|e| param_error(name, entry, e))?;
    Ok(match thin {
        Some(t) => Box::new(thin::Thin::new(device, t)),
        None => device,
    })
}

/// Memory a device's model will allocate, in bytes, and its capacity
/// ([`Device::capacity_bytes`] of the model it would build): the SSD's FTL tables
/// ([`ftl::estimated_bytes`]); 0 bytes for the HDD, RAM and flash models, whose state does not
/// grow with the capacity; a thin device's map on top ([`thin::estimated_bytes`]). Checks the model, profile and parameters like [`build_device_seeded`] (and
/// returns its errors), without allocating anything.
pub fn estimated_bytes(
    name: &str,
    model: &str,
    profile: Option<&str>,
    params: &BTreeMap<String, toml::Value>,
) -> Result<(u64, u64), DeviceError> {
    let (entry, _, values) = read_params(name, model, profile, params)?;
    let thin = thin::read(params).map_err(|e| param_error(name, entry, e))?;
    let (bytes, capacity) =
        (entry.build.memory)(&values).map_err(|e| param_error(name, entry, e))?;
    let map = thin.map_or(0, |t| thin::estimated_bytes(&t, capacity));
    Ok((bytes + map, capacity))
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
    /// Most calls (a device's `advance` runs at each of its internal events) find none due:
    /// that test is inlined, the loop is not.
    #[inline]
    pub(crate) fn drain_due(
        &mut self,
        now: Ns,
        done: &mut Vec<u64>,
        stats: &mut DeviceStats,
        busy: &mut Busy,
    ) {
        if self.heap.peek_key().is_some_and(|(at, _)| at <= now) {
            self.drain_due_loop(now, done, stats, busy);
        }
    }

    #[inline(never)]
    fn drain_due_loop(
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
            stats.count(op, len);
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
    /// Busy time up to `now`, the busy period still open included (a device busy to the
    /// end of a run was busy all along, not idle).
    pub(crate) fn busy_at(&self, now: Ns) -> u64 {
        let open = if self.outstanding > 0 {
            now.saturating_sub(self.since)
        } else {
            0
        };
        self.busy_ns + open
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

    /// A model's typed parameters from a `[[device]]` table's text, with the errors a stack
    /// file would get.
    pub fn typed_params<T>(
        name: &str,
        model: &str,
        src: &str,
        from_values: impl Fn(&str, &Values) -> Result<T, ParamError>,
    ) -> Result<T, DeviceError> {
        let map: BTreeMap<String, toml::Value> = toml::from_str(src).unwrap();
        let (entry, profile, values) = read_params(name, model, None, &map)?;
        from_values(profile, &values).map_err(|e| param_error(name, entry, e))
    }

    /// Submit `n` commands `op` of `len` bytes at `now`, tags 0..n at consecutive offsets
    /// (command i at i × len), all at once.
    pub fn burst(dev: &mut dyn Device, now: Ns, op: Op, len: u64, n: u64) {
        for tag in 0..n {
            dev.submit(
                now,
                DevCmd {
                    tag,
                    op,
                    offset_bytes: tag * len,
                    len_bytes: len,
                    fua: false,
                },
            );
        }
    }

    /// Run the device until it has nothing left to do; returns each tag's completion time.
    pub fn drain(dev: &mut dyn Device) -> BTreeMap<u64, Ns> {
        let mut done_at = BTreeMap::new();
        let mut done = Vec::new();
        while let Some(now) = dev.next_event_ns() {
            done.clear();
            dev.advance(now, &mut done);
            done_at.extend(done.iter().map(|&tag| (tag, now)));
        }
        done_at
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
        for e in REGISTRY {
            let model = e.name;
            let d = build_device("d0", model, None, &BTreeMap::new()).unwrap();
            assert_eq!(d.model(), model);
            assert!(d.capacity_bytes() > 0);
            assert!(d.queue_depth() > 0);
            assert!(!d.params().is_empty());
            for p in e.build.profiles {
                build_device("d0", model, Some(p), &BTreeMap::new()).unwrap();
            }
        }
    }

    #[test]
    fn the_getters_read_each_models_identity_with_the_tables_overrides() {
        for (model, depth_key) in [
            ("hdd", "ncq_depth"),
            ("ssd", "queue_depth"),
            ("ram", "queue_depth"),
            ("flash", "queue_depth"),
        ] {
            let t = table(&format!("capacity = \"16g\"\n{depth_key} = 7"));
            let d = build_device("dev9", model, None, &t).unwrap();
            let id = d.identity();
            assert_eq!((id.name, id.model), ("dev9", model));
            assert_eq!((d.name(), d.model()), ("dev9", model));
            assert_eq!(
                (d.capacity_bytes(), d.queue_depth()),
                (16 << 30, 7),
                "{model}"
            );
            assert_eq!(
                d.params()[0],
                ("profile".to_string(), id.profile.to_string())
            );
        }
    }

    #[test]
    fn estimated_bytes_gives_the_capacity_each_model_builds_with_its_default_and_an_override() {
        for entry in REGISTRY {
            for t in [table(""), table("capacity = \"16g\"")] {
                let built = build_device("d", entry.name, None, &t)
                    .unwrap()
                    .capacity_bytes();
                let (_, capacity) = estimated_bytes("d", entry.name, None, &t).unwrap();
                assert_eq!(capacity, built, "{}", entry.name);
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
            ("rpm = -5", "rpm = -5: must be an integer from 1 to 100000"),
            (
                "rpm = \"fast\"",
                "rpm = \"fast\": must be an integer from 1 to 100000",
            ),
            (
                "ncq_depth = 2000",
                "ncq_depth = 2000: must be an integer from 1 to 1024",
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
    fn records_list_the_profile_then_every_declared_parameter_in_order() {
        for e in REGISTRY {
            let d = build_device("d0", e.name, None, &BTreeMap::new()).unwrap();
            let keys: Vec<String> = d.params().into_iter().map(|(k, _)| k).collect();
            let mut want = vec!["profile".to_string()];
            want.extend(
                e.params
                    .iter()
                    .filter(|p| !is_capability(p))
                    .map(|p| p.name.to_string()),
            );
            assert_eq!(keys, want, "{}", e.name);
        }
        let d = build_device("r", "ram", None, &table("latency = 0.05")).unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["latency"], "0.05ms");
    }

    #[test]
    fn every_model_declares_write_cache_and_fua_and_its_caps_read_them() {
        for e in REGISTRY {
            for key in ["write_cache", "fua"] {
                assert!(e.params.iter().any(|p| p.name == key), "{}: {key}", e.name);
            }
            for (wc, fua) in [(true, true), (true, false), (false, true), (false, false)] {
                let t = table(&format!("write_cache = {wc}\nfua = {fua}"));
                let d = build_device("d0", e.name, None, &t).unwrap();
                assert_eq!(
                    d.caps(),
                    Caps {
                        write_cache: wc,
                        fua
                    },
                    "{}",
                    e.name
                );
            }
        }
    }

    #[test]
    fn the_default_caps_are_each_models_datasheet_or_drivers() {
        let caps = |model: &str| {
            build_device("d0", model, None, &BTreeMap::new())
                .unwrap()
                .caps()
        };
        let both = Caps {
            write_cache: true,
            fua: true,
        };
        assert_eq!(caps("hdd"), both);
        assert_eq!(caps("ssd"), both);
        assert_eq!(caps("flash"), both);
        // The loop driver over a tmpfs file: a write cache without FUA.
        assert_eq!(
            caps("ram"),
            Caps {
                write_cache: true,
                fua: false
            }
        );
    }

    #[test]
    fn a_capability_set_away_from_its_default_is_recorded() {
        let d = build_device("r", "ram", None, &table("write_cache = false")).unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["write_cache"], "false");
        assert!(!p.contains_key("fua"));
        let d = build_device("s", "ssd", None, &table("fua = false")).unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["fua"], "false");
        assert!(!p.contains_key("write_cache"));
        // The HDD's own write_cache is always listed.
        let d = build_device("h", "hdd", None, &BTreeMap::new()).unwrap();
        let p: BTreeMap<String, String> = d.params().into_iter().collect();
        assert_eq!(p["write_cache"], "true");
        assert!(!p.contains_key("fua"));
    }
}
