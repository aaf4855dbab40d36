//! One whole device: the identity mapping.

use super::{LayoutKind, Piece, VolumeLayout};

pub struct Single {
    capacity: u64,
}

impl Single {
    pub fn new(capacity: u64) -> Self {
        Self { capacity }
    }
}

impl VolumeLayout for Single {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Single
    }
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
