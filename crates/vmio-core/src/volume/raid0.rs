//! md RAID 0 (drivers/md/raid0.c semantics).
//!
//! ```text
//! zones: zone 0 stripes over all devices up to the smallest device's size; each following
//!        zone stripes over the devices that still have space, up to the next smallest.
//! in a zone of n devices starting at volume offset Z and device offset D:
//!   chunk = (offset - Z) / chunk_size; device = chunk % n;
//!   dev_off = D + (chunk / n) * chunk_size + (offset - Z) % chunk_size
//! ```
//! Requests split at chunk boundaries. `mdadm` uses a 512 KiB chunk by default (mdadm(8),
//! `--chunk`). Read-ahead: raid0 asks for twice a full stripe (2 × chunk × N, raid0.c's
//! "readahead at least twice a whole stripe"; newer kernels reach the same through
//! io_opt in `disk_update_readahead`).

use super::{
    stripe::map_striped, LayoutBuild, LayoutEntry, Piece, VolumeLayout, DEFAULT_READ_AHEAD_BYTES,
    SPLIT_UNIT,
};
use crate::params::{Entry, ParamSpec, Value, Values};

pub const ENTRY: LayoutEntry = Entry {
    name: "raid0",
    help: "md RAID 0: chunk per device in turn, with md's zones for unequal devices",
    params: &[ParamSpec {
        name: "chunk",
        kind: SPLIT_UNIT,
        default: Value::Int(512 << 10),
        unit: "bytes",
        help: "md chunk (`mdadm --chunk`; md's default 512k)",
    }],
    build: LayoutBuild {
        aliases: &[],
        min_devices: 2,
        max_devices: None,
        new,
    },
};

fn new(device_bytes: &[u64], v: &Values) -> Result<Box<dyn VolumeLayout>, String> {
    Ok(Box::new(Raid0::new(device_bytes, v.int("chunk"))?))
}

struct Zone {
    vol_start: u64,
    vol_end: u64,
    dev_start: u64,
    devices: Vec<usize>,
}

pub struct Raid0 {
    chunk: u64,
    zones: Vec<Zone>,
    n: usize,
}

impl Raid0 {
    pub fn new(device_bytes: &[u64], chunk_bytes: u64) -> Result<Self, String> {
        if chunk_bytes == 0 || !chunk_bytes.is_power_of_two() {
            return Err(format!("chunk {chunk_bytes} must be a power of two"));
        }
        let sizes: Vec<u64> = device_bytes
            .iter()
            .map(|c| c / chunk_bytes * chunk_bytes)
            .collect();
        let mut levels: Vec<u64> = sizes.clone();
        levels.sort_unstable();
        levels.dedup();
        let mut zones = Vec::new();
        let (mut vol, mut dev_start) = (0u64, 0u64);
        for level in levels {
            let devices: Vec<usize> = (0..sizes.len())
                .filter(|&i| sizes[i] >= level && level > dev_start)
                .collect();
            if devices.is_empty() || level == dev_start {
                continue;
            }
            let span = (level - dev_start) * devices.len() as u64;
            zones.push(Zone {
                vol_start: vol,
                vol_end: vol + span,
                dev_start,
                devices,
            });
            vol += span;
            dev_start = level;
        }
        Ok(Self {
            chunk: chunk_bytes,
            zones,
            n: device_bytes.len(),
        })
    }
}

impl VolumeLayout for Raid0 {
    fn capacity_bytes(&self) -> u64 {
        self.zones.last().map_or(0, |z| z.vol_end)
    }
    fn device_count(&self) -> usize {
        self.n
    }
    fn map(&self, mut offset_bytes: u64, mut len_bytes: u64, out: &mut Vec<Piece>) {
        for z in &self.zones {
            if len_bytes == 0 {
                break;
            }
            if offset_bytes >= z.vol_end {
                continue;
            }
            let take = len_bytes.min(z.vol_end - offset_bytes);
            let start = out.len();
            let n = z.devices.len() as u64;
            map_striped(
                n,
                self.chunk,
                0,
                z.dev_start,
                offset_bytes - z.vol_start,
                take,
                out,
            );
            for p in &mut out[start..] {
                p.device = z.devices[p.device];
            }
            offset_bytes += take;
            len_bytes -= take;
        }
    }
    fn default_read_ahead_bytes(&self) -> u64 {
        (2 * self.chunk * self.n as u64).max(DEFAULT_READ_AHEAD_BYTES)
    }
    fn split_unit_bytes(&self) -> Option<u64> {
        Some(self.chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_devices_stripe_by_chunk() {
        let r = Raid0::new(&[1 << 30, 1 << 30], 512 << 10).unwrap();
        let mut v = Vec::new();
        r.map(0, 2 << 20, &mut v);
        let devs: Vec<usize> = v.iter().map(|p| p.device).collect();
        assert_eq!(devs, vec![0, 1, 0, 1]);
        assert_eq!(v[2].offset_bytes, 512 << 10);
        assert_eq!(r.capacity_bytes(), 2 << 30);
    }

    #[test]
    fn unequal_devices_get_a_second_zone_on_the_larger_one() {
        let r = Raid0::new(&[1 << 20, 3 << 20], 512 << 10).unwrap();
        assert_eq!(r.capacity_bytes(), 4 << 20);
        let mut v = Vec::new();
        r.map(2 << 20, 2 << 20, &mut v);
        assert!(v.iter().all(|p| p.device == 1));
        assert_eq!(v[0].offset_bytes, 1 << 20);
        assert_eq!(v.iter().map(|p| p.len_bytes).sum::<u64>(), 2 << 20);
    }
}
