//! LVM striped logical volume (dm-stripe).
//!
//! ```text
//! chunk   = offset / stripe_size          # which stripe unit
//! device  = chunk % N
//! dev_off = (chunk / N) * stripe_size + offset % stripe_size
//! ```
//! A request is split at every `stripe_size` boundary (dm-stripe splits bios there). The
//! capacity is N × the smallest device, rounded down to whole stripes. `lvcreate -i N` takes
//! `-I 64k` by default (lvcreate(8)). Read-ahead: LVM's "auto" read-ahead for a striped LV is
//! one full stripe (stripe_size × N) but never below the PVs' 128 KiB (lvm2,
//! lib/metadata/lv_manip.c / dev_manager read-ahead computation).

use super::{LayoutBuild, LayoutEntry, Piece, VolumeLayout, DEFAULT_READ_AHEAD_BYTES, SPLIT_UNIT};
use crate::params::{Entry, ParamSpec, Value, Values};

pub const ENTRY: LayoutEntry = Entry {
    name: "stripe",
    help: "LVM striped (dm-stripe): stripe_size per device in turn",
    params: &[ParamSpec {
        name: "stripe_size",
        kind: SPLIT_UNIT,
        default: Value::Int(64 << 10),
        unit: "bytes",
        help: "LVM stripe size (`lvcreate -I`; LVM's default 64k)",
    }],
    build: LayoutBuild {
        aliases: &["striped"],
        min_devices: 2,
        max_devices: None,
        new,
    },
};

fn new(device_bytes: &[u64], v: &Values) -> Result<Box<dyn VolumeLayout>, String> {
    Ok(Box::new(Stripe::new(device_bytes, v.int("stripe_size"))?))
}

pub struct Stripe {
    n: u64,
    unit: u64,
    capacity: u64,
}

impl Stripe {
    pub fn new(device_bytes: &[u64], stripe_size_bytes: u64) -> Result<Self, String> {
        if stripe_size_bytes == 0 || !stripe_size_bytes.is_power_of_two() {
            return Err(format!(
                "stripe_size {stripe_size_bytes} must be a power of two"
            ));
        }
        let min = *device_bytes.iter().min().unwrap();
        let per_dev = min / stripe_size_bytes * stripe_size_bytes;
        Ok(Self {
            n: device_bytes.len() as u64,
            unit: stripe_size_bytes,
            capacity: per_dev * device_bytes.len() as u64,
        })
    }
}

/// Shared striping arithmetic (also used by md RAID 0 within one zone).
#[inline]
pub(crate) fn map_striped(
    n: u64,
    unit: u64,
    first_device: usize,
    zone_dev_start: u64,
    mut offset_bytes: u64,
    mut len_bytes: u64,
    out: &mut Vec<Piece>,
) {
    while len_bytes > 0 {
        let chunk = offset_bytes / unit;
        let within = offset_bytes % unit;
        let take = len_bytes.min(unit - within);
        out.push(Piece {
            device: first_device + (chunk % n) as usize,
            offset_bytes: zone_dev_start + (chunk / n) * unit + within,
            len_bytes: take,
        });
        offset_bytes += take;
        len_bytes -= take;
    }
}

impl VolumeLayout for Stripe {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn device_count(&self) -> usize {
        self.n as usize
    }
    fn map(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Piece>) {
        map_striped(self.n, self.unit, 0, 0, offset_bytes, len_bytes, out);
    }
    fn default_read_ahead_bytes(&self) -> u64 {
        (self.unit * self.n).max(DEFAULT_READ_AHEAD_BYTES)
    }
    fn split_unit_bytes(&self) -> Option<u64> {
        Some(self.unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_splits_at_each_stripe_boundary_round_robin() {
        let s = Stripe::new(&[1 << 30, 1 << 30], 64 << 10).unwrap();
        let mut v = Vec::new();
        s.map(32 << 10, 128 << 10, &mut v);
        assert_eq!(
            v,
            vec![
                Piece {
                    device: 0,
                    offset_bytes: 32 << 10,
                    len_bytes: 32 << 10
                },
                Piece {
                    device: 1,
                    offset_bytes: 0,
                    len_bytes: 64 << 10
                },
                Piece {
                    device: 0,
                    offset_bytes: 64 << 10,
                    len_bytes: 32 << 10
                },
            ]
        );
    }

    #[test]
    fn capacity_is_whole_stripes_of_the_smallest_device() {
        let s = Stripe::new(&[(1 << 20) + 5, 4 << 20, 2 << 20], 64 << 10).unwrap();
        assert_eq!(s.capacity_bytes(), 3 << 20);
    }

    #[test]
    fn stripe_read_ahead_is_one_full_stripe_at_least_128k() {
        let s = Stripe::new(&[1 << 30, 1 << 30], 64 << 10).unwrap();
        assert_eq!(s.default_read_ahead_bytes(), 128 << 10);
        let s = Stripe::new(&[1 << 30; 4], 256 << 10).unwrap();
        assert_eq!(s.default_read_ahead_bytes(), 1 << 20);
    }
}
