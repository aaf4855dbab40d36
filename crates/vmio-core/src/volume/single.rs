//! One whole device: the identity mapping.

use super::{LayoutBuild, LayoutEntry, Piece, VolumeLayout};
use crate::params::{Entry, Values};

pub const ENTRY: LayoutEntry = Entry {
    name: "single",
    help: "one whole device (a partition or a raw disk)",
    params: &[],
    build: LayoutBuild {
        aliases: &[],
        min_devices: 1,
        max_devices: Some(1),
        new,
    },
};

fn new(device_bytes: &[u64], _: &Values) -> Result<Box<dyn VolumeLayout>, String> {
    Ok(Box::new(Single::new(device_bytes[0])))
}

pub struct Single {
    capacity: u64,
}

impl Single {
    pub fn new(capacity: u64) -> Self {
        Self { capacity }
    }
}

impl VolumeLayout for Single {
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn device_count(&self) -> usize {
        1
    }
    fn map(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Piece>) {
        out.push(Piece {
            device: 0,
            offset_bytes,
            len_bytes,
        });
    }
}
