//! The guest layer: what runs inside the VM between a file-level workload and its virtual disk —
//! the guest's filesystem ([`ext4`]: the on-disk layout mke2fs builds and the allocation state of
//! the mounted filesystem) and, as the lead adds them, its journal and page cache. Everything here
//! is a pure model: no clock, no I/O; the engine turns the blocks it names into disk requests.

pub mod ext4;
