//! vmio-sim: the discrete-event simulator of the virtualized storage path.
//!
//! - [`engine`]: the event queue (u64 ns virtual time, (time, seq) order);
//! - [`device`]: host device models (HDD, SSD, RAM) behind one trait;
//! - [`vdisk`]: virtual disk interfaces (virtio-blk, virtio-scsi, IDE);
//! - [`sim`]: the stack wired together, driving the core crate's pure policies;
//! - [`metrics`] and [`output`]: fio-format results.
//! - [`run`]: text in (stack file, fio job file), fio JSON out.
//! - [`bench`]: simulator throughput benchmarks.
//! - [`help`]: `vmio help stack`, rendered from the layers' registries.

pub mod bench;
pub mod device;
pub mod engine;
pub mod help;
pub mod metrics;
pub mod output;
pub mod run;
pub mod sim;
pub mod vdisk;
