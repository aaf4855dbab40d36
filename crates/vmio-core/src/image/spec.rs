//! `[[vm.disk]] format` and `[vm.disk.image]`: the image format of a VM disk and its
//! parameters as QEMU takes them (`-drive format=qcow2,l2-cache-size=...`, `qemu-img create
//! -o cluster_size=...,preallocation=...,lazy_refcounts=on`, `-drive discard=unmap`), and the
//! host bytes an image and its backing chain occupy.
//!
//! ```toml
//! [[vm.disk]]
//! format = "qcow2"               # raw (default) | qcow2
//! [vm.disk.image]
//! cluster_size = "64k"           # qemu-img create -o cluster_size (512..2M, power of two)
//! l2_cache_size = "1m"           # -drive l2-cache-size (default: QEMU's, see below)
//! l2_cache_entry_size = "4k"     # -drive l2-cache-entry-size
//! refcount_cache_size = "256k"   # -drive refcount-cache-size (default 4 clusters)
//! lazy_refcounts = false         # qemu-img create -o lazy_refcounts=on
//! preallocation = "off"          # off | metadata | falloc | full (raw too)
//! populated = 0.5                # fraction of clusters allocated at start (guest order)
//! discard = "ignore"             # ignore | unmap (raw too: -drive discard=)
//! backing = [ { format = "qcow2", populated = 1.0, cluster_size = "64k" }, { format = "raw" } ]
//! ```
//!
//! Defaults, from QEMU's block/qcow2.c `read_cache_sizes` and block/qcow2.h (QEMU 3.1 and
//! later; docs/qcow2-cache.txt):
//!
//! ```text
//! max_l2_cache       = ROUND_UP(ceil(virtual_size / cluster_size) * 8, cluster_size)
//!                      (the L2 tables of the whole image)
//! l2_cache_size      = min(max_l2_cache, DEFAULT_L2_CACHE_MAX_SIZE = 32 MiB on Linux)
//!                      (before QEMU 3.1: 1 MiB; set l2_cache_size = "1m" for QEMU 2.x)
//! l2_cache_entry_size = cluster_size, but min(cluster_size, 4 KiB) when the cache does not
//!                      cover the whole image and the entry size is not given
//! L2 entries         = max(l2_cache_size / entry_size, MIN_L2_CACHE_SIZE = 2)
//! refcount entries   = max(refcount_cache_size / cluster_size, MIN_REFCOUNT_CACHE_SIZE = 4)
//!                      (default 0, so 4 clusters)
//! ```
//!
//! Host bytes (the disk's region of its volume): each file of the chain at its fully
//! allocated size, the top image first, its backing files after it nearest first. A qcow2
//! file's is block/qcow2.c `qcow2_calc_prealloc_size` (what `qemu-img measure` prints as
//! "fully allocated size"; a test holds it to QEMU 7.2's figures), a raw file's its virtual
//! size:
//!
//! ```text
//! header           = cluster_size
//! l2               = ROUND_UP(clusters, cluster_size / 8) * 8
//! l1               = ROUND_UP(l2 / cluster_size, cluster_size / 8) * 8
//! refcount         = (blocks + table) * cluster_size, the fixed point of
//!                    blocks = ceil((clusters + meta + blocks + table) / (cluster_size * 8 / 16))
//!                    table  = ceil(blocks / (cluster_size / 8))
//!                    (qcow2_refcount_metadata_size, 16-bit refcounts)
//! file_bytes       = ROUND_UP(virtual_size, cluster_size) + header + l2 + l1 + refcount
//! ```
//!
//! `size = 0` with qcow2 (the rest of the volume): the largest virtual size, a multiple of
//! 4 KiB, whose chain fits ([`ImageSpec::largest_virtual_size`]).
//!
//! The driver keeps one 4-byte entry per guest cluster and layer ([`MAX_MAP_CLUSTERS`]): a disk
//! of more clusters is refused ([`ImageSpec::check_size`]): 2 TiB at 64 KiB clusters, 16 GiB at
//! 512 B.

use crate::params::{KeyDoc, Kind, ParamSpec, Value, Values};
use crate::table::{FieldError, Table};
use serde::Serialize;
use std::collections::BTreeMap;

/// An image format (`[[vm.disk]] format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Raw,
    Qcow2,
}

impl Format {
    /// Every format with its name and help line.
    pub const REGISTRY: [(Format, &'static str, &'static str); 2] = [
        (
            Format::Raw,
            "raw",
            "the guest's bytes at the same offsets of the host file (block/raw-format.c): no metadata",
        ),
        (
            Format::Qcow2,
            "qcow2",
            "QEMU's copy-on-write format (docs/interop/qcow2.txt): L1/L2 tables with an L2 cache, refcounts, clusters allocated on first write, backing files",
        ),
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::REGISTRY
            .iter()
            .find(|(_, n, _)| *n == s)
            .map(|(f, _, _)| *f)
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Qcow2 => "qcow2",
        }
    }

    pub fn accepted() -> String {
        Self::REGISTRY.map(|(_, n, _)| n).join(", ")
    }

    pub fn is_raw(&self) -> bool {
        *self == Format::Raw
    }
}

/// `preallocation` (qemu-img create -o preallocation=).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Preallocation {
    #[default]
    Off,
    Metadata,
    Falloc,
    Full,
}

impl Preallocation {
    pub const NAMES: [&'static str; 4] = ["off", "metadata", "falloc", "full"];
    fn parse(s: &str) -> Self {
        match s {
            "metadata" => Preallocation::Metadata,
            "falloc" => Preallocation::Falloc,
            "full" => Preallocation::Full,
            _ => Preallocation::Off,
        }
    }
}

/// `discard` (-drive discard=): what a guest discard does to the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Discard {
    /// Completed at once (BDRV_O_UNMAP unset: block/io.c `bdrv_co_pdiscard` returns early).
    #[default]
    Ignore,
    /// Passed to the format: qcow2 frees the clusters and discards them in the file.
    Unmap,
}

/// A file of the backing chain (`backing = [...]`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BackingSpec {
    pub format: Format,
    /// Fraction of its clusters allocated (guest order); raw: 1.
    pub populated: f64,
    /// qcow2: its cluster size; raw: 0.
    pub cluster_size: u64,
}

/// `[vm.disk.image]` with the disk's format: the validated image the driver is built from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ImageSpec {
    pub format: Format,
    pub cluster_size: u64,
    /// None: QEMU's default for the virtual size ([`ImageSpec::l2_cache_bytes`]).
    pub l2_cache_size: Option<u64>,
    /// None: QEMU's default ([`ImageSpec::l2_cache_entry_bytes`]).
    pub l2_cache_entry_size: Option<u64>,
    /// None: QEMU's default, 4 clusters.
    pub refcount_cache_size: Option<u64>,
    pub lazy_refcounts: bool,
    pub preallocation: Preallocation,
    pub populated: f64,
    pub discard: Discard,
    /// The chain below the image, nearest first.
    pub backing: Vec<BackingSpec>,
}

/// QEMU's DEFAULT_CLUSTER_SIZE.
pub const DEFAULT_CLUSTER_SIZE: u64 = 64 << 10;
/// MIN_CLUSTER_BITS, MAX_CLUSTER_BITS (block/qcow2.h).
pub const MIN_CLUSTER_SIZE: u64 = 512;
pub const MAX_CLUSTER_SIZE: u64 = 2 << 20;
/// DEFAULT_L2_CACHE_MAX_SIZE on Linux (block/qcow2.h, QEMU 3.1 and later).
pub const DEFAULT_L2_CACHE_MAX_SIZE: u64 = 32 << 20;
/// MIN_L2_CACHE_SIZE (entries) and MIN_REFCOUNT_CACHE_SIZE (clusters), block/qcow2.h.
pub const MIN_L2_CACHE_ENTRIES: u64 = 2;
pub const MIN_REFCOUNT_CACHE_ENTRIES: u64 = 4;
/// The largest number of guest clusters per layer the driver maps (4 bytes each: 128 MiB).
pub const MAX_MAP_CLUSTERS: u64 = 1 << 25;
/// Bytes of an L1, L2 or refcount table entry (L1E_SIZE, L2E_SIZE_NORMAL,
/// REFTABLE_ENTRY_SIZE) and of a refcount (refcount_order 4, the default).
pub const ENTRY_BYTES: u64 = 8;
pub const REFCOUNT_BITS: u64 = 16;

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Refcounts per refcount block (one cluster of 16-bit refcounts).
pub fn refcounts_per_block(cluster_size: u64) -> u64 {
    cluster_size * 8 / REFCOUNT_BITS
}

/// block/qcow2-refcount.c `qcow2_refcount_metadata_size` (no generous increase): the
/// refcount blocks and refcount table clusters that describe `clusters` clusters and
/// themselves, as (blocks, table).
pub fn refcount_metadata_clusters(clusters: u64, cluster_size: u64) -> (u64, u64) {
    let per_table_cluster = cluster_size / ENTRY_BYTES;
    let per_block = refcounts_per_block(cluster_size);
    let (mut table, mut blocks, mut n) = (0, 0, 0);
    loop {
        let last = n;
        blocks = (clusters + table + blocks).div_ceil(per_block);
        table = blocks.div_ceil(per_table_cluster);
        n = clusters + blocks + table;
        if n == last {
            return (blocks, table);
        }
    }
}

/// block/qcow2.c `qcow2_calc_prealloc_size`: the bytes of a fully allocated qcow2 file of
/// `virtual_size` (`qemu-img measure`'s "fully allocated size").
pub fn qcow2_file_bytes(virtual_size: u64, cluster_size: u64) -> u64 {
    let data = round_up(virtual_size, cluster_size);
    let mut meta = cluster_size; // header
    let nl2e = round_up(data / cluster_size, cluster_size / ENTRY_BYTES);
    meta += nl2e * ENTRY_BYTES;
    let nl1e = round_up(
        nl2e * ENTRY_BYTES / cluster_size,
        cluster_size / ENTRY_BYTES,
    );
    meta += nl1e * ENTRY_BYTES;
    let (blocks, table) = refcount_metadata_clusters((meta + data) / cluster_size, cluster_size);
    meta + (blocks + table) * cluster_size + data
}

/// The L2 tables of the whole image, a multiple of the cluster size (`max_l2_cache` of
/// `read_cache_sizes`).
pub fn max_l2_cache(virtual_size: u64, cluster_size: u64) -> u64 {
    round_up(
        virtual_size.div_ceil(cluster_size) * ENTRY_BYTES,
        cluster_size,
    )
}

impl ImageSpec {
    /// A raw image with the defaults.
    pub fn raw() -> Self {
        ImageSpec {
            format: Format::Raw,
            cluster_size: DEFAULT_CLUSTER_SIZE,
            l2_cache_size: None,
            l2_cache_entry_size: None,
            refcount_cache_size: None,
            lazy_refcounts: false,
            preallocation: Preallocation::Off,
            populated: 0.0,
            discard: Discard::Ignore,
            backing: Vec::new(),
        }
    }

    /// A new qcow2 image with QEMU's defaults.
    pub fn qcow2() -> Self {
        ImageSpec {
            format: Format::Qcow2,
            ..Self::raw()
        }
    }

    /// Nothing to show beside a raw disk's other keys (the effective stack leaves it out).
    pub fn is_plain_raw(&self) -> bool {
        *self == Self::raw()
    }

    /// The L2 cache's bytes for `virtual_size` (`read_cache_sizes`).
    pub fn l2_cache_bytes(&self, virtual_size: u64) -> u64 {
        let max = max_l2_cache(virtual_size, self.cluster_size);
        self.l2_cache_size
            .map_or(max.min(DEFAULT_L2_CACHE_MAX_SIZE), |s| s.min(max))
    }

    /// The L2 cache's entry (slice) size for `virtual_size` (`read_cache_sizes`).
    pub fn l2_cache_entry_bytes(&self, virtual_size: u64) -> u64 {
        match self.l2_cache_entry_size {
            Some(e) => e,
            None if self.l2_cache_bytes(virtual_size)
                < max_l2_cache(virtual_size, self.cluster_size) =>
            {
                self.cluster_size.min(4096)
            }
            None => self.cluster_size,
        }
    }

    /// L2 cache entries (slices), at least MIN_L2_CACHE_SIZE.
    pub fn l2_cache_entries(&self, virtual_size: u64) -> u64 {
        (self.l2_cache_bytes(virtual_size) / self.l2_cache_entry_bytes(virtual_size))
            .max(MIN_L2_CACHE_ENTRIES)
    }

    /// Refcount cache entries (refcount blocks), at least MIN_REFCOUNT_CACHE_SIZE.
    pub fn refcount_cache_entries(&self) -> u64 {
        (self.refcount_cache_size.unwrap_or(0) / self.cluster_size).max(MIN_REFCOUNT_CACHE_ENTRIES)
    }

    /// Host bytes of the image file alone.
    pub fn own_file_bytes(&self, virtual_size: u64) -> u64 {
        match self.format {
            Format::Raw => virtual_size,
            Format::Qcow2 => qcow2_file_bytes(virtual_size, self.cluster_size),
        }
    }

    /// Host bytes of the chain: the image, then each backing file (the disk's region).
    pub fn file_bytes(&self, virtual_size: u64) -> u64 {
        self.own_file_bytes(virtual_size)
            + self
                .backing
                .iter()
                .map(|b| b.file_bytes(virtual_size))
                .sum::<u64>()
    }

    /// The largest virtual size (a multiple of 4 KiB) whose chain fits in `bytes`.
    pub fn largest_virtual_size(&self, bytes: u64) -> u64 {
        let (mut lo, mut hi) = (0u64, bytes / 4096);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.file_bytes(mid * 4096) <= bytes {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo * 4096
    }

    /// The driver's bound on its per-cluster map: the message names the largest size.
    pub fn check_size(&self, virtual_size: u64) -> Result<(), String> {
        let layers = std::iter::once((self.format, self.cluster_size))
            .chain(self.backing.iter().map(|b| (b.format, b.cluster_size)));
        for (format, cs) in layers {
            if format == Format::Qcow2 && virtual_size.div_ceil(cs) > MAX_MAP_CLUSTERS {
                return Err(format!(
                    "a qcow2 image of {virtual_size} bytes has more than {MAX_MAP_CLUSTERS} clusters of {cs} bytes, the most vmio maps; accepted: at most {} bytes at this cluster size, or a larger cluster_size",
                    MAX_MAP_CLUSTERS * cs
                ));
            }
        }
        Ok(())
    }
}

impl BackingSpec {
    pub fn file_bytes(&self, virtual_size: u64) -> u64 {
        match self.format {
            Format::Raw => virtual_size,
            Format::Qcow2 => qcow2_file_bytes(virtual_size, self.cluster_size),
        }
    }
}

pub const CLUSTER_SIZE: ParamSpec = ParamSpec {
    name: "cluster_size",
    kind: Kind::Size {
        min: MIN_CLUSTER_SIZE,
        max: MAX_CLUSTER_SIZE,
        pow2: true,
    },
    default: Value::Int(DEFAULT_CLUSTER_SIZE),
    unit: "bytes",
    help: "qcow2 cluster size (qemu-img create -o cluster_size; DEFAULT_CLUSTER_SIZE in block/qcow2.h)",
};
pub const L2_CACHE_SIZE: ParamSpec = ParamSpec {
    name: "l2_cache_size",
    kind: Kind::POSITIVE_SIZE,
    default: Value::Computed("enough for the whole image, at most 32m (QEMU >= 3.1 on Linux; 1m before 3.1)"),
    unit: "bytes",
    help: "the qcow2 L2 table cache (-drive l2-cache-size): S bytes map S x cluster_size / 8 bytes of disk (docs/qcow2-cache.txt)",
};
pub const L2_CACHE_ENTRY_SIZE: ParamSpec = ParamSpec {
    name: "l2_cache_entry_size",
    kind: Kind::Size {
        min: MIN_CLUSTER_SIZE,
        max: MAX_CLUSTER_SIZE,
        pow2: true,
    },
    default: Value::Computed("4k when the L2 cache does not cover the whole image, else cluster_size"),
    unit: "bytes",
    help: "the L2 cache's slice size (-drive l2-cache-entry-size): a miss reads one slice; at most cluster_size",
};
pub const REFCOUNT_CACHE_SIZE: ParamSpec = ParamSpec {
    name: "refcount_cache_size",
    kind: Kind::POSITIVE_SIZE,
    default: Value::Computed("4 clusters (MIN_REFCOUNT_CACHE_SIZE)"),
    unit: "bytes",
    help: "the qcow2 refcount block cache (-drive refcount-cache-size), whole clusters, at least 4",
};
pub const LAZY_REFCOUNTS: ParamSpec = ParamSpec {
    name: "lazy_refcounts",
    kind: Kind::Bool,
    default: Value::Bool(false),
    unit: "",
    help: "qemu-img create -o lazy_refcounts=on: L2 updates stop waiting for refcount writes, and a flush does not write refcount blocks",
};
pub const PREALLOCATION: ParamSpec = ParamSpec {
    name: "preallocation",
    kind: Kind::Choice(&Preallocation::NAMES),
    default: Value::Choice("off"),
    unit: "",
    help: "qemu-img create -o preallocation: qcow2 metadata maps every cluster at creation (first writes are overwrites); falloc/full also reserve/write the data (raw too: the host filesystem's blocks)",
};
pub const POPULATED: ParamSpec = ParamSpec {
    name: "populated",
    kind: Kind::Fraction { min: 0.0, max: 1.0 },
    default: Value::Float(0.0),
    unit: "",
    help: "fraction of the qcow2 image's clusters allocated when the run starts, in guest order as after a sequential fill (0: a new image)",
};
pub const DISCARD: ParamSpec = ParamSpec {
    name: "discard",
    kind: Kind::Choice(&["ignore", "unmap"]),
    default: Value::Choice("ignore"),
    unit: "",
    help: "-drive discard= (libvirt discard=): unmap frees the clusters of a guest discard and discards them in the file; ignore completes it at once",
};

/// The `[vm.disk.image]` parameters, in the order of [`ImageSpec`]'s fields.
pub const PARAMS: &[ParamSpec] = &[
    CLUSTER_SIZE,
    L2_CACHE_SIZE,
    L2_CACHE_ENTRY_SIZE,
    REFCOUNT_CACHE_SIZE,
    LAZY_REFCOUNTS,
    PREALLOCATION,
    POPULATED,
    DISCARD,
];

/// Keys valid with `format = "raw"` too.
pub const FORMAT_INDEPENDENT: [&str; 2] = [PREALLOCATION.name, DISCARD.name];

/// `backing`, read beside [`PARAMS`].
pub const BACKING_KEY: KeyDoc = KeyDoc {
    name: "backing",
    help: "the backing chain below a qcow2 image, nearest first (qemu-img create -b): a read of a cluster the image lacks goes down the chain; a partial first write copies the rest of the cluster up",
    accepted: "an array of tables { format = \"raw\" | \"qcow2\", populated = 0..1 (qcow2), cluster_size = 512..2m (qcow2) }",
    default: "[] (no backing file)",
};

/// `[[vm.disk]] format` as help shows it.
pub const FORMAT_KEY: KeyDoc = KeyDoc {
    name: "format",
    help: "the image format of the disk's file (-drive format=); its parameters in [vm.disk.image]",
    accepted: "raw, qcow2",
    default: "raw",
};

/// `[vm.disk.image]` at `field`; the context is the disk's format.
impl Table for ImageSpec {
    const KEY: &'static str = "image";
    type Raw = BTreeMap<String, toml::Value>;
    type Context<'a> = Format;

    fn from_raw(t: &Self::Raw, field: &str, format: Format) -> Result<Self, FieldError> {
        let f = |k: &str| format!("{field}.{k}");
        if format == Format::Raw {
            if let Some(k) = t.keys().find(|k| {
                !FORMAT_INDEPENDENT.contains(&k.as_str())
                    && PARAMS.iter().any(|p| p.name == k.as_str())
                    || k.as_str() == BACKING_KEY.name
            }) {
                return Err(FieldError::new(
                    f(k),
                    format!(
                        "only valid with format = \"qcow2\" (a raw image has no clusters, caches or backing file); accepted with raw: {}",
                        FORMAT_INDEPENDENT.join(", ")
                    ),
                ));
            }
        }
        let mut v = Values::defaults(PARAMS);
        v.read(t, &[BACKING_KEY.name]).map_err(|e| {
            FieldError::param(
                field,
                match e {
                    crate::params::ParamError::Unknown { key, accepted } => {
                        crate::params::ParamError::Unknown {
                            key,
                            accepted: format!("{accepted}, {}", BACKING_KEY.name),
                        }
                    }
                    other => other,
                },
            )
        })?;
        let opt = |name: &str| match v.iter().find(|(s, _)| s.name == name) {
            Some((_, Value::Int(n))) => Some(n),
            _ => None,
        };
        let cluster_size = v.int(CLUSTER_SIZE.name);
        let entry = opt(L2_CACHE_ENTRY_SIZE.name);
        if let Some(e) = entry {
            if e > cluster_size {
                return Err(FieldError::new(
                    f(L2_CACHE_ENTRY_SIZE.name),
                    format!("{e} exceeds cluster_size ({cluster_size}); accepted: a power of two from 512 to cluster_size"),
                ));
            }
        }
        let mut backing = Vec::new();
        if let Some(b) = t.get(BACKING_KEY.name) {
            let bf = f(BACKING_KEY.name);
            let toml::Value::Array(items) = b else {
                return Err(FieldError::new(
                    bf,
                    format!("must be an array; accepted: {}", BACKING_KEY.accepted),
                ));
            };
            for (i, item) in items.iter().enumerate() {
                backing.push(read_backing(item, &format!("{bf}[{i}]"))?);
            }
        }
        let preallocation = Preallocation::parse(v.choice(PREALLOCATION.name));
        if !backing.is_empty() && preallocation != Preallocation::Off {
            return Err(FieldError::new(
                f(PREALLOCATION.name),
                "a qcow2 image with a backing file cannot be preallocated (block/qcow2.c qcow2_co_create without extended_l2); accepted: off with backing",
            ));
        }
        Ok(ImageSpec {
            format,
            cluster_size,
            l2_cache_size: opt(L2_CACHE_SIZE.name),
            l2_cache_entry_size: entry,
            refcount_cache_size: opt(REFCOUNT_CACHE_SIZE.name),
            lazy_refcounts: v.flag(LAZY_REFCOUNTS.name),
            preallocation,
            populated: v.float(POPULATED.name),
            discard: if v.choice(DISCARD.name) == "unmap" {
                Discard::Unmap
            } else {
                Discard::Ignore
            },
            backing,
        })
    }
}

/// The keys of a backing file's table.
const BACKING_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "format",
        kind: Kind::Choice(&["raw", "qcow2"]),
        default: Value::Choice("qcow2"),
        unit: "",
        help: "the backing file's format",
    },
    POPULATED,
    CLUSTER_SIZE,
];

fn read_backing(item: &toml::Value, field: &str) -> Result<BackingSpec, FieldError> {
    let toml::Value::Table(t) = item else {
        return Err(FieldError::new(
            field,
            format!("must be a table; accepted: {}", BACKING_KEY.accepted),
        ));
    };
    let map: BTreeMap<String, toml::Value> =
        t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut v = Values::defaults(BACKING_PARAMS);
    v.read(&map, &[]).map_err(|e| FieldError::param(field, e))?;
    let format = Format::parse(v.choice("format")).unwrap_or(Format::Qcow2);
    if format == Format::Raw {
        if let Some(k) = map.keys().find(|k| k.as_str() != "format") {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                "only valid with format = \"qcow2\" (a raw backing file holds every cluster); accepted with raw: format",
            ));
        }
        return Ok(BackingSpec {
            format,
            populated: 1.0,
            cluster_size: 0,
        });
    }
    Ok(BackingSpec {
        format,
        populated: v.float(POPULATED.name),
        cluster_size: v.int(CLUSTER_SIZE.name),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap()
    }

    fn read(text: &str, format: Format) -> Result<ImageSpec, FieldError> {
        ImageSpec::from_raw(&map(text), "vm[0].disk[0].image", format)
    }

    #[test]
    fn a_qcow2_file_occupies_what_qemu_img_measure_calls_fully_allocated() {
        // qemu-img 7.2: qemu-img measure -O qcow2 -o cluster_size=C --size S
        let measured = [
            (1u64 << 30, 512u64, 1_095_127_040u64),
            (1 << 30, 4 << 10, 1_076_379_648),
            (1 << 30, 64 << 10, 1_074_135_040),
            (1 << 30, 2 << 20, 1_084_227_584),
            (100 << 30, 512, 109_512_586_752),
            (100 << 30, 4 << 10, 107_636_977_664),
            (100 << 30, 64 << 10, 107_390_828_544),
            (100 << 30, 2 << 20, 107_384_668_160),
        ];
        for (size, cs, bytes) in measured {
            assert_eq!(qcow2_file_bytes(size, cs), bytes, "{size} at {cs}");
        }
    }

    #[test]
    fn the_region_of_a_chain_is_each_file_one_after_the_other() {
        let mut s = read(
            "backing = [{ format = \"qcow2\", populated = 0.5 }, { format = \"raw\" }]",
            Format::Qcow2,
        )
        .unwrap();
        let g = 1u64 << 30;
        assert_eq!(s.file_bytes(g), 2 * 1_074_135_040 + g);
        s.backing.clear();
        assert_eq!(s.file_bytes(g), 1_074_135_040);
        assert_eq!(ImageSpec::raw().file_bytes(g), g);
        // size = 0: the largest virtual size that fits.
        let v = s.largest_virtual_size(1_074_135_040);
        assert_eq!(v, g);
        assert!(s.file_bytes(v + 4096) > 1_074_135_040);
    }

    #[test]
    fn defaults_are_qemus() {
        let s = read("", Format::Qcow2).unwrap();
        assert_eq!(s, ImageSpec::qcow2());
        // 100 GiB at 64 KiB clusters: 12.5 MiB of L2 tables, all cached, whole-cluster entries.
        let g100 = 100u64 << 30;
        assert_eq!(s.l2_cache_bytes(g100), 12800 << 10);
        assert_eq!(s.l2_cache_entry_bytes(g100), 64 << 10);
        // 1 TiB: capped at 32 MiB, 4 KiB slices.
        assert_eq!(s.l2_cache_bytes(1 << 40), 32 << 20);
        assert_eq!(s.l2_cache_entry_bytes(1 << 40), 4096);
        assert_eq!(s.l2_cache_entries(1 << 40), 8192);
        assert_eq!(s.refcount_cache_entries(), 4);
        let old = read("l2_cache_size = \"1m\"", Format::Qcow2).unwrap();
        assert_eq!(old.l2_cache_entries(g100), 256);
        assert!(read("", Format::Raw).unwrap().is_plain_raw());
    }

    #[test]
    fn bad_values_are_one_line_naming_the_field_and_the_accepted_values() {
        let e = read("cluster_size = \"48k\"", Format::Qcow2).unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.cluster_size");
        assert!(e.message.contains("a power of two 512..=2m"), "{e}");
        let e = read("l2_cache_entry_size = \"128k\"", Format::Qcow2).unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.l2_cache_entry_size");
        assert!(e
            .message
            .contains("accepted: a power of two from 512 to cluster_size"));
        let e = read("discard = \"on\"", Format::Qcow2).unwrap_err();
        assert!(e.message.contains("ignore, unmap"), "{e}");
        let e = read("bogus = 1", Format::Qcow2).unwrap_err();
        assert!(e.message.contains("accepted: cluster_size"), "{e}");
        assert!(e.message.ends_with("backing"), "{e}");
        let e = read("populated = 1.5", Format::Qcow2).unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.populated");
        let e = read("cluster_size = \"64k\"", Format::Raw).unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.cluster_size");
        assert!(
            e.message.contains("only valid with format = \"qcow2\""),
            "{e}"
        );
        assert!(e.message.ends_with("preallocation, discard"), "{e}");
        let raw = read("preallocation = \"full\"\ndiscard = \"unmap\"", Format::Raw).unwrap();
        assert_eq!(raw.preallocation, Preallocation::Full);
        let e = read(
            "backing = [{ format = \"raw\", populated = 0.5 }]",
            Format::Qcow2,
        )
        .unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.backing[0].populated");
        let e = read(
            "preallocation = \"metadata\"\nbacking = [{ format = \"raw\" }]",
            Format::Qcow2,
        )
        .unwrap_err();
        assert_eq!(e.field, "vm[0].disk[0].image.preallocation");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn the_map_bound_names_the_largest_size() {
        let s = read("cluster_size = 512", Format::Qcow2).unwrap();
        assert!(s.check_size(16 << 30).is_ok());
        let e = s.check_size(32 << 30).unwrap_err();
        assert!(e.contains("at most 17179869184 bytes"), "{e}");
        assert!(ImageSpec::qcow2().check_size(1 << 40).is_ok());
    }
}
