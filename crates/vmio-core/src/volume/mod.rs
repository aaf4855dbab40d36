//! Host volume layouts: how a byte range of a volume maps onto its devices.
//!
//! One file per layout, one trait ([`VolumeLayout`]):
//! - [`single`]: one whole device (a partition or a raw disk);
//! - [`linear`]: LVM linear / dm-linear concatenation;
//! - [`stripe`]: LVM striped (dm-stripe), `stripe_size` per device in turn (`lvcreate -i N -I S`);
//! - [`raid0`]: md RAID 0 (`mdadm --level=0 --chunk=C`), with md's zones for unequal devices.
//!
//! Each file declares its layout's parameters and device count in an `ENTRY`
//! ([`LayoutEntry`]); [`REGISTRY`] lists them, and the stack parser, its errors and
//! `vmio help stack` read the list: a new layout is one file and one line there.
//!
//! A request is split at every boundary the layout has (as dm and md split bios), giving
//! [`Piece`]s in volume order. Each layout also states the host read-ahead Linux gives the
//! volume, which the page cache uses in buffered modes.

pub mod linear;
pub mod raid0;
pub mod single;
pub mod stripe;

use crate::params::{self, Entry, Kind, Values};
use crate::table::{FieldError, Table};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum VolumeError {
    #[error("volume '{volume}': {message}")]
    Invalid { volume: String, message: String },
    #[error("volume '{volume}': range {offset}+{len} is outside its {capacity} bytes")]
    OutOfRange {
        volume: String,
        offset: u64,
        len: u64,
        capacity: u64,
    },
}

/// How a layout is built: the devices it takes and its constructor over the devices'
/// capacities and the volume's parameter values.
pub struct LayoutBuild {
    /// Other names the stack file accepts for it.
    pub aliases: &'static [&'static str],
    pub min_devices: usize,
    pub max_devices: Option<usize>,
    pub new: NewLayout,
}

/// A layout's constructor; an error is the message's tail (`stripe_size ... must be ...`).
pub type NewLayout = fn(&[u64], &Values) -> Result<Box<dyn VolumeLayout>, String>;

pub type LayoutEntry = Entry<LayoutBuild>;

/// Every layout a stack file's `[[volume]] layout` accepts, in the order help lists them.
pub const REGISTRY: &[&LayoutEntry] = &[
    &single::ENTRY,
    &linear::ENTRY,
    &stripe::ENTRY,
    &raid0::ENTRY,
];

/// The layout named `name` (or one of its aliases); else the error tail listing the names.
pub fn lookup(name: &str) -> Result<&'static LayoutEntry, String> {
    REGISTRY
        .iter()
        .find(|e| e.build.aliases.contains(&name))
        .copied()
        .map_or_else(|| params::lookup(REGISTRY, name), Ok)
}

/// Every layout parameter at its default (a volume's values before its table is read).
pub fn defaults() -> Values {
    params::union(REGISTRY)
}

/// What a layout's device count must be, if `n` is not accepted
/// (`needs exactly 1 device, got 2`).
pub fn check_device_count(layout: &LayoutEntry, n: usize) -> Result<(), String> {
    let b = &layout.build;
    if n >= b.min_devices && b.max_devices.is_none_or(|m| n <= m) {
        return Ok(());
    }
    let want = match (b.min_devices, b.max_devices) {
        (lo, Some(hi)) if lo == hi => format!("exactly {lo} device{}", plural(lo)),
        (lo, Some(hi)) => format!("{lo} to {hi} devices"),
        (lo, None) => format!("at least {lo} device{}", plural(lo)),
    };
    Err(format!("layout '{}' needs {want}, got {n}", layout.name))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A layout's device count as help states it (`1 device`, `>= 2 devices`).
pub fn device_count_note(layout: &LayoutEntry) -> String {
    let b = &layout.build;
    match (b.min_devices, b.max_devices) {
        (lo, Some(hi)) if lo == hi => format!("{lo} device{}", plural(lo)),
        (lo, Some(hi)) => format!("{lo} to {hi} devices"),
        (lo, None) => format!(">= {lo} device{}", plural(lo)),
    }
}

/// Part of a volume request that lands on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Index of the device within the volume's device list.
    pub device: usize,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// The kind of a layout's split unit (stripe size, chunk): a power of two of at least 4 KiB.
pub(crate) const SPLIT_UNIT: Kind = Kind::Size {
    min: 4096,
    max: u64::MAX,
    pow2: true,
};

/// Linux's default block-device read-ahead (VM_READAHEAD_PAGES = 128 KiB, mm/readahead.c).
pub const DEFAULT_READ_AHEAD_BYTES: u64 = 128 << 10;

pub trait VolumeLayout: Send + Sync {
    fn capacity_bytes(&self) -> u64;
    fn device_count(&self) -> usize;
    /// Append the pieces of `[offset, offset + len)` to `out`, in volume order. The caller
    /// checks the range (see [`check_range`]).
    fn map(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Piece>);
    /// The read-ahead Linux sets on this volume by default.
    fn default_read_ahead_bytes(&self) -> u64 {
        DEFAULT_READ_AHEAD_BYTES
    }
    /// The unit at which requests are split (stripe size / chunk), if any.
    fn split_unit_bytes(&self) -> Option<u64> {
        None
    }
}

/// Build a layout over devices of the given capacities, with the volume's parameter values
/// (see [`defaults`]).
pub fn build(
    volume: &str,
    layout: &LayoutEntry,
    device_bytes: &[u64],
    params: &Values,
) -> Result<Box<dyn VolumeLayout>, VolumeError> {
    let invalid = |message: String| VolumeError::Invalid {
        volume: volume.to_string(),
        message,
    };
    check_device_count(layout, device_bytes.len()).map_err(invalid)?;
    (layout.build.new)(device_bytes, params).map_err(invalid)
}

/// Check a request against a volume's size.
pub fn check_range(
    volume: &str,
    layout: &dyn VolumeLayout,
    offset_bytes: u64,
    len_bytes: u64,
) -> Result<(), VolumeError> {
    let cap = layout.capacity_bytes();
    if offset_bytes.checked_add(len_bytes).is_none_or(|e| e > cap) {
        return Err(VolumeError::OutOfRange {
            volume: volume.to_string(),
            offset: offset_bytes,
            len: len_bytes,
            capacity: cap,
        });
    }
    Ok(())
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RawVolume {
    pub name: String,
    pub layout: String,
    pub devices: Vec<String>,
    pub read_ahead_kb: Option<u64>,
    /// The host filesystem holding images on the volume ([`crate::hostfs`]); absent or
    /// "none": the volume is a block device.
    pub filesystem: Option<String>,
    /// The layouts' and filesystems' parameters ([`REGISTRY`], [`crate::hostfs::REGISTRY`]);
    /// any other key is refused there.
    #[serde(flatten)]
    pub params: BTreeMap<String, toml::Value>,
}

/// A volume: a registered layout over some devices, with the values of every registered
/// layout's parameters (its own as set, the others' at their defaults, as result records
/// have always listed them).
#[derive(Clone, Debug)]
pub struct VolumeSpec {
    pub name: String,
    pub layout: &'static LayoutEntry,
    /// Indices into the stack's `[[device]]`s.
    pub devices: Vec<usize>,
    pub params: Values,
    pub read_ahead_kb: Option<u64>,
    pub filesystem: Option<crate::hostfs::FsSpec>,
}

impl Serialize for VolumeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("layout", self.layout.name)?;
        m.serialize_entry("devices", &self.devices)?;
        for (spec, v) in self.params.iter() {
            m.serialize_entry(&spec.record_key(), &v)?;
        }
        m.serialize_entry("read_ahead_kb", &self.read_ahead_kb)?;
        if let Some(fs) = &self.filesystem {
            m.serialize_entry(crate::hostfs::KEY, fs.entry.name)?;
            for (spec, v) in fs.params.iter() {
                m.serialize_entry(&spec.record_key(), &v)?;
            }
        }
        m.end()
    }
}

/// `[[volume]]`: `layout` names an entry of [`REGISTRY`], whose device count the devices
/// (resolved by the stack: its indices, the context) must meet; the other keys are the
/// layouts' parameters (one of another layout's is "only valid with layout = ...").
impl Table for VolumeSpec {
    const KEY: &'static str = "volume";
    type Raw = RawVolume;
    type Context<'a> = Vec<usize>;

    fn from_raw(v: &RawVolume, field: &str, devices: Vec<usize>) -> Result<Self, FieldError> {
        let f = |k: &str| format!("{field}.{k}");
        let layout = lookup(&v.layout).map_err(|m| FieldError::new(f("layout"), m))?;
        check_device_count(layout, devices.len()).map_err(|m| FieldError::new(f("devices"), m))?;
        // "none" states the default: a block device (a study sets it on one point).
        let (filesystem, layout_keys) = match v.filesystem.as_deref().filter(|n| *n != "none") {
            Some(name) => crate::hostfs::FsSpec::read(name, &v.params)
                .map(|(fs, rest)| (Some(fs), rest))
                .map_err(|e| match e {
                    crate::hostfs::HostFsError::Param(e) => FieldError::param(field, e),
                    other => FieldError::new(f(crate::hostfs::KEY), other.to_string()),
                })?,
            None => {
                crate::hostfs::FsSpec::refuse(&v.params)
                    .map_err(|e| FieldError::param(field, e))?;
                (None, v.params.clone())
            }
        };
        let mut values = defaults();
        params::read_for(
            &mut values,
            &layout_keys,
            // Read by serde; named so that an unknown key's error lists them.
            &[
                "name",
                "layout",
                "devices",
                "read_ahead_kb",
                crate::hostfs::KEY,
            ],
            layout,
            REGISTRY,
            "layout",
        )
        .map_err(|e| FieldError::param(field, e))?;
        Ok(VolumeSpec {
            name: v.name.clone(),
            layout,
            devices,
            params: values,
            read_ahead_kb: v.read_ahead_kb,
            filesystem,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(l: &dyn VolumeLayout, off: u64, len: u64) -> Vec<Piece> {
        let mut v = Vec::new();
        l.map(off, len, &mut v);
        v
    }

    #[test]
    fn every_layout_conserves_bytes_and_orders_pieces() {
        let caps = [1u64 << 30, 1 << 30];
        for layout in &REGISTRY[1..] {
            let l = build("v", layout, &caps, &defaults()).unwrap();
            for (off, len) in [(0, 4096), (60 << 10, 8 << 20), ((1 << 30) - 4096, 8192)] {
                let p = pieces(l.as_ref(), off, len);
                assert_eq!(
                    p.iter().map(|p| p.len_bytes).sum::<u64>(),
                    len,
                    "{layout:?}"
                );
                assert!(p.iter().all(|p| p.len_bytes > 0));
            }
        }
    }

    #[test]
    fn out_of_range_requests_are_refused_with_the_volume_size() {
        let l = build("data", &linear::ENTRY, &[1 << 20], &defaults()).unwrap();
        let e = check_range("data", l.as_ref(), 1 << 20, 1).unwrap_err();
        assert!(e.to_string().contains("1048576 bytes"));
        assert!(check_range("data", l.as_ref(), u64::MAX, 2).is_err());
        assert!(check_range("data", l.as_ref(), 0, 1 << 20).is_ok());
    }

    #[test]
    fn device_counts_and_names_come_from_the_registry() {
        let e = build("v", &single::ENTRY, &[1 << 20, 1 << 20], &defaults())
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "volume 'v': layout 'single' needs exactly 1 device, got 2"
        );
        let e = build("v", &stripe::ENTRY, &[1 << 20], &defaults())
            .err()
            .unwrap();
        assert!(
            e.to_string().ends_with("needs at least 2 devices, got 1"),
            "{e}"
        );
        assert_eq!(lookup("striped").unwrap().name, "stripe");
        assert_eq!(
            lookup("raid5").err().unwrap(),
            "'raid5' is not valid; accepted: single, linear, stripe, raid0"
        );
    }

    #[test]
    fn striped_layouts_read_ahead_more_than_a_single_disk() {
        let caps = [1u64 << 30, 1 << 30];
        let lin = build("v", &linear::ENTRY, &caps, &defaults()).unwrap();
        let r0 = build("v", &raid0::ENTRY, &caps, &defaults()).unwrap();
        assert_eq!(lin.default_read_ahead_bytes(), 128 << 10);
        assert_eq!(r0.default_read_ahead_bytes(), 2 << 20);
    }
}
