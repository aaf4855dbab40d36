//! `[host.cache]`: the host's cache topology and memory system, in libvirt's vocabulary (the
//! `<cache><bank level= size= cpus=/></cache>` element of `virsh capabilities`, which libvirt
//! reads from Linux's `/sys/devices/system/cpu/cpu*/cache/index*/{level,size,
//! shared_cpu_list}`), as the contention model ([`super::contention`]) reads it.
//!
//! ```toml
//! [host.cache]
//! profile = "core2-quad-q9550"      # a named host (PROFILES), or the keys below
//! # memory_bandwidth = "10.6g"      # bytes/s the memory bus carries at most
//! # memory_latency = "80ns"         # a last-level miss served by memory, unloaded
//! # clock_mhz = 2830                # the cores' clock (a program's instruction rate)
//! # rob_entries = 96                # reorder-buffer entries: the window misses overlap in
//! # miss_buffers = 8                # misses a core keeps outstanding at most
//! # store_buffer = 20               # store-buffer entries: a store's miss waits behind them
//! # inclusion = "inclusive"         # or "victim": how the last level holds the levels below
//! # replacement = "lru"             # or "rrip": which line the last level evicts
//! # rrip_bits = 2                   # rrip: bits of each line's re-reference prediction
//! # rrip_long = 0.03125             # rrip: share of new lines inserted at "long", not "distant"
//! # [[host.cache.bank]]             # one per cache instance: libvirt's <bank>
//! # level = 2
//! # size = "6MiB"
//! # cpus = "0-1"                    # the cores sharing it (shared_cpu_list)
//! ```
//!
//! ```text
//! from_raw:  profile (PROFILES) gives banks and the three keys' defaults; explicit keys and
//!            banks replace the profile's; without a profile every key and at least one
//!            bank are required
//!            banks: level 1..=4, size > 0, cpus a cpuset within host.cores; two banks of
//!            one level never share a core
//! last_level(core): the bank of the highest level holding the core (the cache whose misses
//!            go to memory); a core no bank names has none (it shares nothing)
//! ```
//!
//! The named hosts (sources: Intel ARK and the processors' datasheets; latencies are
//! estimates, marked):
//!
//! | profile | banks (last level) | memory | latency | clock | EPT |
//! |---|---|---|---|---|---|
//! | `core2-quad-q9550` | L2 6 MB on cores 0-1, L2 6 MB on cores 2-3 (ARK: "12 MB L2", two dies of two cores) | 1333 MT/s front-side bus × 8 B = 10.67 GB/s (ARK: "Bus Speed 1333 MHz") | 80 ns (estimate: FSB + northbridge + DDR2/DDR3, the range 70-100 ns measured on Core 2 systems) | 2830 MHz | no (ARK: "Intel VT-x with Extended Page Tables (EPT): No") |
//! | `core-i5-6600` | L3 6 MB on cores 0-3 (ARK: "6 MB Intel Smart Cache") | DDR4-2133 × 2 channels × 8 B = 34.1 GB/s (ARK: "Max Memory Bandwidth 34.1 GB/s") | 65 ns (estimate: about 42 cycles + 51 ns measured on Skylake, 7-cpu.com) | 3300 MHz | yes |
//!
//! The cores' window for overlapping misses (the contention model's memory-level
//! parallelism, [`super::contention`]):
//!
//! | profile | `rob_entries` | `miss_buffers` | `store_buffer` |
//! |---|---|---|---|
//! | `core2-quad-q9550` | 96 (Intel 64 and IA-32 Architectures Optimization Reference Manual, Intel Core microarchitecture: a 96-entry reorder buffer) | 8 (ESTIMATE: the L1 data cache's fill buffers of the Core microarchitecture, fewer than Nehalem's 10) | 20 (the same manual, Intel Core microarchitecture: 20 store buffers) |
//! | `core-i5-6600` | 224 (the same manual, Skylake: 224 entries) | 10 (ESTIMATE: the 10 L1D fill buffers Intel gives from Nehalem on; Skylake's own count not checked here) | 56 (the same manual, Skylake: 56 store-buffer entries) |
//!
//! Without a profile all three are 0: every miss waits alone and a store's miss is charged
//! as a load's (the model before memory-level parallelism), unless the keys are given.
//!
//! How the last level holds what the private levels below it hold (`inclusion`, the
//! contention model's "victim last level"):
//!
//! ```text
//! inclusive  every line of a core's private caches is also in the last level; a line the
//!            last level evicts is taken out of them too (back-invalidation), so a
//!            co-runner's insertions evict lines the owner still uses in its L1 and L2
//!            ("inclusion victims", Jaleel, Borch, Bhandaru, Steely and Emer, "Achieving
//!            non-inclusive cache performance with inclusive caches", MICRO 2010). Intel's
//!            client L3 from Nehalem to Skylake (the i5-6600's) is inclusive of the L1 and L2
//!            (Intel 64 and IA-32 Architectures Optimization Reference Manual: "the LLC is
//!            inclusive of all cache levels above it"). The default: the model before this
//!            key, term for term.
//! victim     the last level is filled only by the private level's evictions, and a hit
//!            moves the line back to the core and out of the last level (exclusive, "mostly
//!            exclusive" with shared lines kept): AMD's L3 since family 10h, Zen's included
//!            (AMD: a line "will come into L3 only after it is evicted from L1 and then L2";
//!            "the L3 behaves as an exclusive cache by removing the data from the L3 cache ...
//!            if it is likely the data is only being accessed by a single core", AMD's
//!            answer on the family 15h L3, quoted in canardpc.com's forum thread on
//!            Bulldozer; AMD's Software Optimization Guides for families 17h, 19h and 1Ah:
//!            the L3 is a victim cache filled from L2 evictions; the guides and Intel's
//!            manual are cited from their known text, not re-read for this key). What a
//!            core's private levels hold is its own: no co-runner evicts it, and it adds to
//!            the last level's capacity (Zheng, Davis and Jordan, "Performance evaluation
//!            of exclusive cache hierarchies", ISPASS 2004: an exclusive hierarchy's
//!            capacity is the sum of its levels)
//! ```
//!
//! The named profiles are `inclusive`: the i5-6600's by Intel's manual; the Q9550 describes
//! no private level below its shared L2, so there is nothing for `victim` to add.
//!
//! Which line the last level evicts (`replacement`, the contention model's "replacement"):
//!
//! ```text
//! lru    the least recently used line of the set (the default: the model before this key,
//!        term for term; the profiles' and every table's without the key)
//! rrip   re-reference interval prediction (Jaleel, Theobald, Steely and Emer, "High
//!        performance cache replacement using re-reference interval prediction (RRIP)",
//!        ISCA 2010): each line carries an rrip_bits-bit prediction (RRPV), 0 "near" to
//!        2^bits − 1 "distant"; a hit sets it to 0; a miss evicts a line at distant, aging
//!        every line of the set by one until one is; a new line is inserted at distant, or
//!        at "long" (2^bits − 2) for a share rrip_long of them (bimodal RRIP's ε; rrip_long
//!        = 1 is static RRIP). Jaleel et al.'s choices are 2 bits and ε = 1/32, the keys'
//!        defaults. Neither vendor documents its last level's policy: Intel's Ivy Bridge L3
//!        was found by measurement to keep part of a cyclic working set larger than
//!        itself, "an adaptive policy resembling" DIP and RRIP rather than pseudo-LRU
//!        (H. Wong, "Intel Ivy Bridge cache replacement policy", blog.stuffedcow.net,
//!        January 2013, with random cyclic pointer chases); AMD's is undocumented. So
//!        vmio.real.corun measures rrip_long on the machine it runs on, from a pointer
//!        chase beside a stream
//! ```
//!
//! EPT is the `[host] ept` key's business (the hypervisor's costs); the profiles only name it.
//! Only the last level is modelled: the private levels below it belong to the core and are
//! part of a program's nominal speed.

use super::{CoreSet, MAX_CORES};
use crate::params::{Kind, ParamSpec, Value, Values};
use crate::table::{FieldError, SizeValue, Table};
use crate::{Ns, SEC};
use serde::Serialize;
use std::collections::BTreeMap;

/// `[host.cache]`: `profile`, `bank` and the keys of [`PARAMS`].
pub type RawHostCache = BTreeMap<String, toml::Value>;

pub const MEMORY_BANDWIDTH: ParamSpec = ParamSpec {
    name: "memory_bandwidth",
    kind: Kind::Rate,
    default: Value::Computed("the profile's"),
    unit: "B/s",
    help: "bytes per second the memory bus carries at most (front-side bus or memory channels)",
};
pub const MEMORY_LATENCY: ParamSpec = ParamSpec {
    name: "memory_latency",
    kind: Kind::Duration {
        bare: SEC,
        positive: true,
    },
    default: Value::Computed("the profile's"),
    unit: "ns",
    help: "time a last-level cache miss waits for memory on an idle bus",
};
pub const CLOCK_MHZ: ParamSpec = ParamSpec {
    name: "clock_mhz",
    kind: Kind::Count { min: 1, max: 10000 },
    default: Value::Computed("the profile's"),
    unit: "MHz",
    help: "the cores' clock, which turns a program's instructions per cycle into time",
};

pub const ROB_ENTRIES: ParamSpec = ParamSpec {
    name: "rob_entries",
    kind: Kind::Count { min: 0, max: 4096 },
    default: Value::Computed("the profile's; 0 without one"),
    unit: "",
    help: "the cores' reorder-buffer entries: last-level misses this many instructions apart overlap (0: every miss waits alone)",
};
pub const MISS_BUFFERS: ParamSpec = ParamSpec {
    name: "miss_buffers",
    kind: Kind::Count { min: 0, max: 4096 },
    default: Value::Computed("the profile's; 0 without one"),
    unit: "",
    help: "misses a core keeps outstanding at most (L1 fill buffers, miss address buffers; 0: no limit besides rob_entries)",
};
pub const STORE_BUFFER: ParamSpec = ParamSpec {
    name: "store_buffer",
    kind: Kind::Count { min: 0, max: 4096 },
    default: Value::Computed("the profile's; 0 without one"),
    unit: "",
    help: "the cores' store-buffer entries: a store's miss stalls only once the stores behind it fill the buffer (0: a store's miss is charged as a load's)",
};

/// The values of `inclusion`, as [`Inclusion::name`] spells them.
const INCLUSIONS: &[&str] = &["inclusive", "victim"];
pub const INCLUSION: ParamSpec = ParamSpec {
    name: "inclusion",
    kind: Kind::Choice(INCLUSIONS),
    default: Value::Computed("the profile's; inclusive without one"),
    unit: "",
    help: "how the last level holds the lines of each core's private levels below it: inclusive (a copy of each: a co-runner's eviction takes it from them too) or victim (filled by their evictions only, as AMD's L3: what they hold is the core's own and adds to the last level)",
};

/// The values of `replacement`.
const REPLACEMENTS: &[&str] = &["lru", "rrip"];
pub const REPLACEMENT: ParamSpec = ParamSpec {
    name: "replacement",
    kind: Kind::Choice(REPLACEMENTS),
    default: Value::Choice("lru"),
    unit: "",
    help: "which line the last level evicts: lru (the least recently used) or rrip (re-reference interval prediction, Jaleel et al. 2010: lines never reused are inserted near eviction and go first)",
};
pub const RRIP_BITS: ParamSpec = ParamSpec {
    name: "rrip_bits",
    kind: Kind::Count { min: 1, max: 8 },
    default: Value::Int(2),
    unit: "",
    help: "replacement = \"rrip\": bits of each line's re-reference prediction (a reused line survives 2^bits − 1 agings of its set)",
};
pub const RRIP_LONG: ParamSpec = ParamSpec {
    name: "rrip_long",
    kind: Kind::Fraction { min: 0.0, max: 1.0 },
    default: Value::Float(1.0 / 32.0),
    unit: "",
    help: "replacement = \"rrip\": share of new lines inserted at long (2^bits − 2) rather than distant (bimodal RRIP's epsilon; 1 is static RRIP)",
};

/// The keys of `[host.cache]` besides `profile` and `bank`.
pub const PARAMS: &[ParamSpec] = &[
    MEMORY_BANDWIDTH,
    MEMORY_LATENCY,
    CLOCK_MHZ,
    ROB_ENTRIES,
    MISS_BUFFERS,
    STORE_BUFFER,
    INCLUSION,
    REPLACEMENT,
    RRIP_BITS,
    RRIP_LONG,
];

/// Which line the last level evicts (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "policy")]
pub enum Replacement {
    /// The least recently used line of the set.
    #[default]
    Lru,
    /// Re-reference interval prediction: `bits` per line, a share `long` of new lines
    /// inserted at long rather than distant.
    Rrip { bits: u8, long: f64 },
}

impl Replacement {
    /// Whether it is the default (the stack view leaves it out then).
    pub fn is_lru(&self) -> bool {
        *self == Replacement::Lru
    }
}

/// How the last level holds the lines of the private levels below it (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Inclusion {
    /// A copy of every line they hold; its evictions take the line from them too.
    #[default]
    Inclusive,
    /// Filled by their evictions only; what they hold is the core's own.
    Victim,
}

impl Inclusion {
    /// Its name in `[host.cache] inclusion`.
    pub fn name(self) -> &'static str {
        match self {
            Inclusion::Inclusive => INCLUSIONS[0],
            Inclusion::Victim => INCLUSIONS[1],
        }
    }

    fn of(name: &str) -> Option<Inclusion> {
        [Inclusion::Inclusive, Inclusion::Victim]
            .into_iter()
            .find(|i| i.name() == name)
    }

    /// Whether it is the default (the stack view leaves it out then).
    pub fn is_inclusive(&self) -> bool {
        *self == Inclusion::Inclusive
    }
}

/// One cache instance: libvirt's `<bank>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Bank {
    pub level: u8,
    pub size_bytes: u64,
    /// The cores sharing it.
    pub cpus: CoreSet,
}

/// A named host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostProfile {
    pub name: &'static str,
    pub help: &'static str,
    pub cores: u32,
    pub banks: &'static [Bank],
    pub memory_bandwidth: u64,
    pub memory_latency_ns: Ns,
    pub clock_mhz: u64,
    /// Reorder-buffer entries per core (the window in which misses overlap).
    pub rob_entries: u64,
    /// Misses a core keeps outstanding at most.
    pub miss_buffers: u64,
    /// Store-buffer entries per core (the stores a missing store lets retire behind it).
    pub store_buffer: u64,
    /// How its last level holds the private levels' lines.
    pub inclusion: Inclusion,
    /// Whether the processor has EPT (second-level address translation).
    pub ept: bool,
}

const MB6: u64 = 6 << 20;

/// The named hosts (the table of the module doc).
pub const PROFILES: &[HostProfile] = &[
    HostProfile {
        name: "core2-quad-q9550",
        help: "Intel Core 2 Quad Q9550 (S4's host): two 6 MB L2s, each shared by two cores; 1333 MT/s front-side bus (10.67 GB/s); no EPT",
        cores: 4,
        banks: &[
            Bank {
                level: 2,
                size_bytes: MB6,
                cpus: CoreSet(0b0011),
            },
            Bank {
                level: 2,
                size_bytes: MB6,
                cpus: CoreSet(0b1100),
            },
        ],
        memory_bandwidth: 10_666_000_000,
        memory_latency_ns: 80,
        clock_mhz: 2830,
        rob_entries: 96,
        miss_buffers: 8,
        store_buffer: 20,
        inclusion: Inclusion::Inclusive,
        ept: false,
    },
    HostProfile {
        name: "core-i5-6600",
        help: "Intel Core i5-6600 (Skylake): a 6 MB L3 shared by four cores; DDR4-2133, two channels (34.1 GB/s); EPT",
        cores: 4,
        banks: &[Bank {
            level: 3,
            size_bytes: MB6,
            cpus: CoreSet(0b1111),
        }],
        memory_bandwidth: 34_100_000_000,
        memory_latency_ns: 65,
        clock_mhz: 3300,
        rob_entries: 224,
        miss_buffers: 10,
        store_buffer: 56,
        inclusion: Inclusion::Inclusive,
        ept: true,
    },
];

/// The accepted profile names, for error lines.
pub fn accepted() -> String {
    PROFILES
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `[host.cache]` as validated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheTopology {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<&'static str>,
    pub banks: Vec<Bank>,
    pub memory_bandwidth: u64,
    pub memory_latency_ns: Ns,
    pub clock_mhz: u64,
    /// 0: no overlap of misses (each waits alone).
    pub rob_entries: u64,
    /// 0: no limit besides the window.
    pub miss_buffers: u64,
    /// 0: a store's miss is charged as a load's.
    pub store_buffer: u64,
    /// Inclusive: the model before the key (left out of the serialized table then).
    #[serde(skip_serializing_if = "Inclusion::is_inclusive")]
    pub inclusion: Inclusion,
    /// LRU: the model before the key (left out of the serialized table then).
    #[serde(skip_serializing_if = "Replacement::is_lru")]
    pub replacement: Replacement,
}

impl CacheTopology {
    /// A named host's topology.
    pub fn of(p: &HostProfile) -> CacheTopology {
        CacheTopology {
            profile: Some(p.name),
            banks: p.banks.to_vec(),
            memory_bandwidth: p.memory_bandwidth,
            memory_latency_ns: p.memory_latency_ns,
            clock_mhz: p.clock_mhz,
            rob_entries: p.rob_entries,
            miss_buffers: p.miss_buffers,
            store_buffer: p.store_buffer,
            inclusion: p.inclusion,
            replacement: Replacement::Lru,
        }
    }

    /// Per core of `cores`: the index in [`Self::banks`] of its last-level cache (the
    /// highest level naming it), `None` when no bank names it.
    pub fn last_level(&self, cores: usize) -> Vec<Option<usize>> {
        (0..cores)
            .map(|c| {
                self.banks
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.cpus.contains(c))
                    .max_by_key(|(_, b)| b.level)
                    .map(|(i, _)| i)
            })
            .collect()
    }
}

/// What `[host.cache]`'s checks read of `[host]`.
#[derive(Clone, Copy, Debug)]
pub struct HostCores {
    pub cores: u32,
}

fn bank(v: &toml::Value, field: &str, cores: u32) -> Result<Bank, FieldError> {
    const ACCEPTED: &str =
        "accepted: a table with level (1..=4), size (\"6MiB\") and cpus (a cpuset)";
    let t = v
        .as_table()
        .ok_or_else(|| FieldError::new(field, ACCEPTED))?;
    if let Some(k) = t
        .keys()
        .find(|k| !["level", "size", "cpus"].contains(&k.as_str()))
    {
        return Err(FieldError::new(
            format!("{field}.{k}"),
            format!("unknown key; {ACCEPTED}"),
        ));
    }
    let level = match t.get("level").and_then(|l| l.as_integer()) {
        Some(l @ 1..=4) => l as u8,
        _ => {
            return Err(FieldError::new(
                format!("{field}.level"),
                "accepted: an integer from 1 to 4",
            ))
        }
    };
    let size_bytes = match t.get("size") {
        Some(toml::Value::Integer(n)) if *n > 0 => *n as u64,
        Some(toml::Value::String(s)) => {
            SizeValue::Text(s.clone()).bytes(&format!("{field}.size"))?
        }
        _ => 0,
    };
    if size_bytes == 0 {
        return Err(FieldError::new(
            format!("{field}.size"),
            "accepted: a size above 0, bytes or a string like \"6MiB\"",
        ));
    }
    let cpus = match t.get("cpus") {
        Some(toml::Value::String(s)) => CoreSet::parse(s, cores as usize)
            .map_err(|m| FieldError::new(format!("{field}.cpus"), m))?,
        _ => {
            return Err(FieldError::new(
                format!("{field}.cpus"),
                "accepted: a cpuset string such as \"0-1\" (shared_cpu_list)",
            ))
        }
    };
    Ok(Bank {
        level,
        size_bytes,
        cpus,
    })
}

impl Table for CacheTopology {
    const KEY: &'static str = "cache";
    type Raw = RawHostCache;
    type Context<'a> = HostCores;

    fn from_raw(t: &RawHostCache, field: &str, host: HostCores) -> Result<Self, FieldError> {
        let at = |k: &str| format!("{field}.{k}");
        let profile = match t.get("profile") {
            None => None,
            Some(v) => match v
                .as_str()
                .and_then(|n| PROFILES.iter().find(|p| p.name == n))
            {
                Some(p) => Some(p),
                None => {
                    return Err(FieldError::new(
                        at("profile"),
                        format!("{v}: accepted: {}", accepted()),
                    ))
                }
            },
        };
        if let Some(p) = profile {
            if p.cores > host.cores || host.cores as usize > MAX_CORES {
                return Err(FieldError::new(
                    at("profile"),
                    format!(
                        "'{}' has {} cores, host.cores is {}; accepted: host.cores >= {}",
                        p.name, p.cores, host.cores, p.cores
                    ),
                ));
            }
        }
        let mut values = Values::defaults(PARAMS);
        values
            .read(t, &["profile", "bank"])
            .map_err(|e| FieldError::param(field, e))?;
        let banks = match t.get("bank") {
            Some(toml::Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, b)| bank(b, &format!("{field}.bank[{i}]"), host.cores))
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err(FieldError::new(
                    at("bank"),
                    "accepted: an array of tables ([[host.cache.bank]])",
                ))
            }
            None => profile.map(|p| p.banks.to_vec()).unwrap_or_default(),
        };
        if banks.is_empty() {
            return Err(FieldError::new(
                at("bank"),
                format!(
                    "no cache banks; accepted: [[host.cache.bank]] tables or profile = one of {}",
                    accepted()
                ),
            ));
        }
        for (i, a) in banks.iter().enumerate() {
            if let Some(j) = banks[..i]
                .iter()
                .position(|b| b.level == a.level && b.cpus.0 & a.cpus.0 != 0)
            {
                return Err(FieldError::new(
                    format!("{field}.bank[{i}].cpus"),
                    format!("shares a core with bank[{j}] of the same level; accepted: each core in one bank per level"),
                ));
            }
        }
        let need = |spec: &ParamSpec, from: Option<u64>| -> Result<u64, FieldError> {
            match (values.iter().find(|(s, _)| s.name == spec.name), from) {
                (Some((_, Value::Int(n))), _) => Ok(n),
                (_, Some(n)) => Ok(n),
                _ => Err(FieldError::new(
                    at(spec.name),
                    format!(
                        "required without a profile; {} (profiles: {})",
                        spec.kind.accepted(),
                        accepted()
                    ),
                )),
            }
        };
        let inclusion = match values.iter().find(|(s, _)| s.name == INCLUSION.name) {
            Some((_, Value::Choice(name))) => {
                Inclusion::of(name).expect("one of INCLUSIONS, checked by its kind")
            }
            _ => profile.map_or(Inclusion::Inclusive, |p| p.inclusion),
        };
        let set = |spec: &ParamSpec| t.contains_key(spec.name);
        let replacement = match values.iter().find(|(s, _)| s.name == REPLACEMENT.name) {
            Some((_, Value::Choice("rrip"))) => Replacement::Rrip {
                bits: match values.iter().find(|(s, _)| s.name == RRIP_BITS.name) {
                    Some((_, Value::Int(n))) => n as u8,
                    _ => 2,
                },
                long: match values.iter().find(|(s, _)| s.name == RRIP_LONG.name) {
                    Some((_, Value::Float(f))) => f,
                    _ => 1.0 / 32.0,
                },
            },
            _ => {
                if let Some(spec) = [RRIP_BITS, RRIP_LONG].iter().find(|s| set(s)) {
                    return Err(FieldError::new(
                        at(spec.name),
                        "applies to replacement = \"rrip\" only; accepted: replacement = \"rrip\" beside it, or no key",
                    ));
                }
                Replacement::Lru
            }
        };
        Ok(CacheTopology {
            profile: profile.map(|p| p.name),
            banks,
            memory_bandwidth: need(&MEMORY_BANDWIDTH, profile.map(|p| p.memory_bandwidth))?,
            memory_latency_ns: need(&MEMORY_LATENCY, profile.map(|p| p.memory_latency_ns))?,
            clock_mhz: need(&CLOCK_MHZ, profile.map(|p| p.clock_mhz))?,
            rob_entries: need(&ROB_ENTRIES, Some(profile.map_or(0, |p| p.rob_entries)))?,
            miss_buffers: need(&MISS_BUFFERS, Some(profile.map_or(0, |p| p.miss_buffers)))?,
            store_buffer: need(&STORE_BUFFER, Some(profile.map_or(0, |p| p.store_buffer)))?,
            inclusion,
            replacement,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, cores: u32) -> Result<CacheTopology, FieldError> {
        let raw: RawHostCache = toml::from_str(text).unwrap();
        CacheTopology::from_raw(&raw, "host.cache", HostCores { cores })
    }

    #[test]
    fn the_q9550_profile_gives_two_l2s_each_shared_by_two_cores() {
        let t = read("profile = \"core2-quad-q9550\"", 4).unwrap();
        assert_eq!(t.last_level(4), vec![Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(t.banks[1].size_bytes, 6 << 20);
        assert_eq!(t.memory_bandwidth, 10_666_000_000);
        let i5 = read("profile = \"core-i5-6600\"\nclock_mhz = 3900", 4).unwrap();
        assert_eq!(i5.last_level(4), vec![Some(0); 4]);
        assert_eq!(i5.clock_mhz, 3900);
    }

    #[test]
    fn explicit_banks_describe_a_machine_and_the_highest_level_is_the_last() {
        let t = read(
            "memory_bandwidth = 20000000000\nmemory_latency = \"90ns\"\nclock_mhz = 2000\n\
             [[bank]]\nlevel = 2\nsize = \"512KiB\"\ncpus = \"0\"\n\
             [[bank]]\nlevel = 2\nsize = \"512KiB\"\ncpus = \"1\"\n\
             [[bank]]\nlevel = 3\nsize = \"32MiB\"\ncpus = \"0-1\"\n",
            2,
        )
        .unwrap();
        assert_eq!(t.last_level(2), vec![Some(2), Some(2)]);
        assert_eq!(t.memory_latency_ns, 90);
        // Without a profile misses do not overlap unless the reorder buffer is given.
        assert_eq!((t.rob_entries, t.miss_buffers), (0, 0));
    }

    #[test]
    fn a_profile_gives_its_cores_reorder_buffer_and_miss_buffers_and_explicit_keys_replace_them() {
        let t = read("profile = \"core2-quad-q9550\"", 4).unwrap();
        assert_eq!((t.rob_entries, t.miss_buffers), (96, 8));
        let t = read(
            "profile = \"core-i5-6600\"\nrob_entries = 448\nmiss_buffers = 24",
            4,
        )
        .unwrap();
        assert_eq!((t.rob_entries, t.miss_buffers), (448, 24));
        let e = read("profile = \"core-i5-6600\"\nrob_entries = -1", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.rob_entries");
        assert!(e.message.contains("0"), "{e}");
    }

    #[test]
    fn a_profile_gives_its_cores_store_buffer_and_a_table_without_one_charges_stores_as_loads() {
        // The Intel optimization manual's store buffers: 20 on the Core microarchitecture,
        // 56 on Skylake; explicit keys replace them; no profile, no key: 0.
        assert_eq!(
            read("profile = \"core2-quad-q9550\"", 4)
                .unwrap()
                .store_buffer,
            20
        );
        let t = read("profile = \"core-i5-6600\"\nstore_buffer = 104", 4).unwrap();
        assert_eq!((t.store_buffer, t.rob_entries), (104, 224));
        let bare = read(
            "memory_bandwidth = 1\nmemory_latency = \"90ns\"\nclock_mhz = 2000\n\
             [[bank]]\nlevel = 3\nsize = \"4MiB\"\ncpus = \"0\"\n",
            1,
        )
        .unwrap();
        assert_eq!(bare.store_buffer, 0);
        let e = read("profile = \"core-i5-6600\"\nstore_buffer = \"many\"", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.store_buffer");
    }

    #[test]
    fn a_last_level_is_inclusive_unless_the_table_says_victim() {
        // The profiles' (Intel's inclusive L3; the Q9550 has no level below its L2), and a
        // table without a profile: inclusive, the model before the key.
        for p in ["core2-quad-q9550", "core-i5-6600"] {
            let t = read(&format!("profile = \"{p}\""), 4).unwrap();
            assert_eq!(t.inclusion, Inclusion::Inclusive, "{p}");
        }
        let zen = "memory_bandwidth = 47000000000\nmemory_latency = \"143ns\"\nclock_mhz = 2596\n\
                   [[bank]]\nlevel = 2\nsize = \"1MiB\"\ncpus = \"0\"\n\
                   [[bank]]\nlevel = 3\nsize = \"16MiB\"\ncpus = \"0-1\"\n";
        assert_eq!(read(zen, 2).unwrap().inclusion, Inclusion::Inclusive);
        let t = read(&format!("inclusion = \"victim\"\n{zen}"), 2).unwrap();
        assert_eq!(t.inclusion, Inclusion::Victim);
        let t = read("profile = \"core-i5-6600\"\ninclusion = \"victim\"", 4).unwrap();
        assert_eq!(t.inclusion, Inclusion::Victim);
        let e = read("profile = \"core-i5-6600\"\ninclusion = \"exclusive\"", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.inclusion");
        assert!(e.message.contains("inclusive, victim"), "{e}");
    }

    #[test]
    fn a_last_level_evicts_lru_unless_the_table_says_rrip_with_jaleels_defaults() {
        let t = read("profile = \"core-i5-6600\"", 4).unwrap();
        assert_eq!(t.replacement, Replacement::Lru);
        let t = read("profile = \"core-i5-6600\"\nreplacement = \"rrip\"", 4).unwrap();
        assert_eq!(
            t.replacement,
            Replacement::Rrip {
                bits: 2,
                long: 1.0 / 32.0
            }
        );
        let t = read(
            "profile = \"core-i5-6600\"\nreplacement = \"rrip\"\nrrip_bits = 3\nrrip_long = 0.5",
            4,
        )
        .unwrap();
        assert_eq!(t.replacement, Replacement::Rrip { bits: 3, long: 0.5 });
    }

    #[test]
    fn a_bad_replacement_or_an_rrip_key_without_rrip_gets_one_line_naming_it() {
        let e = read("profile = \"core-i5-6600\"\nreplacement = \"plru\"", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.replacement");
        assert!(e.message.contains("lru, rrip"), "{e}");
        let e = read("profile = \"core-i5-6600\"\nrrip_long = 0.5", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.rrip_long");
        assert!(e.message.contains("replacement = \"rrip\""), "{e}");
        let e = read(
            "profile = \"core-i5-6600\"\nreplacement = \"rrip\"\nrrip_long = 2",
            4,
        )
        .unwrap_err();
        assert_eq!(e.field, "host.cache.rrip_long");
        assert!(!e.to_string().contains('\n'), "{e}");
        let e = read(
            "profile = \"core-i5-6600\"\nreplacement = \"rrip\"\nrrip_bits = 0",
            4,
        )
        .unwrap_err();
        assert_eq!(e.field, "host.cache.rrip_bits");
    }

    #[test]
    fn bad_tables_name_the_field_and_the_accepted_values() {
        let e = read("profile = \"pentium\"", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.profile");
        assert!(e.message.contains("core2-quad-q9550"), "{e}");
        let e = read("profile = \"core2-quad-q9550\"", 2).unwrap_err();
        assert!(e.message.contains("host.cores >= 4"), "{e}");
        let e = read("[[bank]]\nlevel = 2\nsize = \"1MiB\"\ncpus = \"0\"", 2).unwrap_err();
        assert_eq!(e.field, "host.cache.memory_bandwidth");
        let e = read(
            "profile = \"core-i5-6600\"\n[[bank]]\nlevel = 3\nsize = 1\ncpus = \"0-1\"\n[[bank]]\nlevel = 3\nsize = 1\ncpus = \"1-2\"",
            4,
        )
        .unwrap_err();
        assert_eq!(e.field, "host.cache.bank[1].cpus");
        let e = read("profile = \"core-i5-6600\"\n[[bank]]\nlevel = 9", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.bank[0].level");
        let e = read("profile = \"core-i5-6600\"\nways = 4", 4).unwrap_err();
        assert_eq!(e.field, "host.cache.ways");
    }
}
