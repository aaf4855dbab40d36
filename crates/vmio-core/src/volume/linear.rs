//! LVM linear (dm-linear): devices concatenated in order.
//!
//! Assumption: each device is one PV used whole; LVM's metadata area (1 MiB `pe_start`) and
//! extent granularity (4 MiB) are ignored — they shift addresses by a constant and do not
//! change performance. Read-ahead: LVM's `readahead = "auto"` gives a linear LV the read-ahead
//! of its PVs, 128 KiB by default (lvm.conf(5), activation/readahead).

use super::{LayoutBuild, LayoutEntry, Piece, VolumeLayout};
use crate::params::{Entry, Values};

pub const ENTRY: LayoutEntry = Entry {
    name: "linear",
    help: "LVM linear (dm-linear): the devices concatenated in order",
    params: &[],
    build: LayoutBuild {
        aliases: &[],
        min_devices: 1,
        max_devices: None,
        new,
    },
};

fn new(device_bytes: &[u64], _: &Values) -> Result<Box<dyn VolumeLayout>, String> {
    Ok(Box::new(Linear::new(device_bytes)))
}

pub struct Linear {
    /// Cumulative start offset of each device.
    starts: Vec<u64>,
    capacity: u64,
}

impl Linear {
    pub fn new(device_bytes: &[u64]) -> Self {
        let mut starts = Vec::with_capacity(device_bytes.len());
        let mut acc = 0;
        for &c in device_bytes {
            starts.push(acc);
            acc += c;
        }
        Self {
            starts,
            capacity: acc,
        }
    }
}

impl VolumeLayout for Linear {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn device_count(&self) -> usize {
        self.starts.len()
    }
    fn map(&self, mut offset_bytes: u64, mut len_bytes: u64, out: &mut Vec<Piece>) {
        let mut dev = self.starts.partition_point(|&s| s <= offset_bytes) - 1;
        while len_bytes > 0 {
            let end = self.starts.get(dev + 1).copied().unwrap_or(self.capacity);
            let n = len_bytes.min(end - offset_bytes);
            out.push(Piece {
                device: dev,
                offset_bytes: offset_bytes - self.starts[dev],
                len_bytes: n,
            });
            offset_bytes += n;
            len_bytes -= n;
            dev += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_across_the_device_boundary_splits_there() {
        let l = Linear::new(&[1 << 20, 1 << 20]);
        let mut v = Vec::new();
        l.map((1 << 20) - 4096, 8192, &mut v);
        assert_eq!(
            v,
            vec![
                Piece {
                    device: 0,
                    offset_bytes: (1 << 20) - 4096,
                    len_bytes: 4096
                },
                Piece {
                    device: 1,
                    offset_bytes: 0,
                    len_bytes: 4096
                },
            ]
        );
    }

    #[test]
    fn small_offsets_stay_on_the_first_device() {
        let l = Linear::new(&[1 << 30, 1 << 30]);
        let mut v = Vec::new();
        l.map(123 << 12, 8 << 20, &mut v);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].device, 0);
    }
}
