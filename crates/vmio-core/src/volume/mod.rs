//! Host volume layouts: how a byte range of a volume maps onto its devices.
//!
//! One file per layout, one trait ([`VolumeLayout`]):
//! - [`single`]: one whole device (a partition or a raw disk);
//! - [`linear`]: LVM linear / dm-linear concatenation;
//! - [`stripe`]: LVM striped (dm-stripe), `stripe_size` per device in turn (`lvcreate -i N -I S`);
//! - [`raid0`]: md RAID 0 (`mdadm --level=0 --chunk=C`), with md's zones for unequal devices.
//!
//! A request is split at every boundary the layout has (as dm and md split bios), giving
//! [`Piece`]s in volume order. Each layout also states the host read-ahead Linux gives the
//! volume, which the page cache uses in buffered modes.

pub mod linear;
pub mod raid0;
pub mod single;
pub mod stripe;

use serde::Serialize;
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    Single,
    Linear,
    Stripe,
    Raid0,
}

impl LayoutKind {
    pub const ACCEPTED: &'static str = "single, linear, stripe, raid0";
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "single" => Some(Self::Single),
            "linear" => Some(Self::Linear),
            "stripe" | "striped" => Some(Self::Stripe),
            "raid0" => Some(Self::Raid0),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Linear => "linear",
            Self::Stripe => "stripe",
            Self::Raid0 => "raid0",
        }
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

/// Linux's default block-device read-ahead (VM_READAHEAD_PAGES = 128 KiB, mm/readahead.c).
pub const DEFAULT_READ_AHEAD_BYTES: u64 = 128 << 10;

pub trait VolumeLayout: Send + Sync {
    fn kind(&self) -> LayoutKind;
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

/// Build a layout over devices of the given capacities.
pub fn build(
    volume: &str,
    kind: LayoutKind,
    device_bytes: &[u64],
    stripe_size_bytes: u64,
    chunk_bytes: u64,
) -> Result<Box<dyn VolumeLayout>, VolumeError> {
    let invalid = |m: String| VolumeError::Invalid {
        volume: volume.to_string(),
        message: m,
    };
    if device_bytes.is_empty() {
        return Err(invalid("needs at least one device".into()));
    }
    Ok(match kind {
        LayoutKind::Single => {
            if device_bytes.len() != 1 {
                return Err(invalid("layout 'single' takes exactly one device".into()));
            }
            Box::new(single::Single::new(device_bytes[0]))
        }
        LayoutKind::Linear => Box::new(linear::Linear::new(device_bytes)),
        LayoutKind::Stripe => {
            Box::new(stripe::Stripe::new(device_bytes, stripe_size_bytes).map_err(invalid)?)
        }
        LayoutKind::Raid0 => {
            Box::new(raid0::Raid0::new(device_bytes, chunk_bytes).map_err(invalid)?)
        }
    })
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
        for kind in [LayoutKind::Linear, LayoutKind::Stripe, LayoutKind::Raid0] {
            let l = build("v", kind, &caps, 64 << 10, 512 << 10).unwrap();
            for (off, len) in [(0, 4096), (60 << 10, 8 << 20), ((1 << 30) - 4096, 8192)] {
                let p = pieces(l.as_ref(), off, len);
                assert_eq!(p.iter().map(|p| p.len_bytes).sum::<u64>(), len, "{kind:?}");
                assert!(p.iter().all(|p| p.len_bytes > 0));
            }
        }
    }

    #[test]
    fn out_of_range_requests_are_refused_with_the_volume_size() {
        let l = build("data", LayoutKind::Linear, &[1 << 20], 0, 0).unwrap();
        let e = check_range("data", l.as_ref(), 1 << 20, 1).unwrap_err();
        assert!(e.to_string().contains("1048576 bytes"));
        assert!(check_range("data", l.as_ref(), u64::MAX, 2).is_err());
        assert!(check_range("data", l.as_ref(), 0, 1 << 20).is_ok());
    }

    #[test]
    fn striped_layouts_read_ahead_more_than_a_single_disk() {
        let caps = [1u64 << 30, 1 << 30];
        let lin = build("v", LayoutKind::Linear, &caps, 64 << 10, 512 << 10).unwrap();
        let r0 = build("v", LayoutKind::Raid0, &caps, 64 << 10, 512 << 10).unwrap();
        assert_eq!(lin.default_read_ahead_bytes(), 128 << 10);
        assert_eq!(r0.default_read_ahead_bytes(), 2 << 20);
    }
}
