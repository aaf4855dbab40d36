//! vmio-core: the engine-agnostic heart of vmio.
//!
//! Everything here is pure: functions take the current time as an argument and never read a
//! clock, sleep or perform I/O. The simulator (`vmio-sim`) drives these policies in virtual
//! time; the real NBD server drives the same code with the monotonic clock.
//!
//! Layers, top to bottom (docs/architecture.md has the map): [`workload`] (the `Workload`
//! trait: fio jobs, [`fio`] their parser, FileBench, traces) → vdisk → [`cache`] (the
//! `HostCache` policy: QEMU cache modes over the host page cache, eviction) → [`blockq`]
//! (each device's request queue: [`sched`], depth, flushes, wake-ups) → [`volume`] (single,
//! linear, stripe, raid0) → device. [`stack`] is the TOML description of the whole stack;
//! [`params`] is how each scheduler, layout, device model and eviction policy declares its
//! tunables and registers itself.

pub mod blockq;
pub mod cache;
pub mod cpu;
pub mod device;
pub mod fio;
pub mod guest;
pub mod hostfs;
pub mod image;
pub mod nbd;
pub mod params;
pub mod request;
pub mod rng;
pub mod sched;
pub mod slab;
pub mod sorted_chunks;
pub mod stack;
pub mod table;
pub mod throttle;
pub mod units;
pub mod vdisk;
pub mod volume;
pub mod workload;

/// Virtual or monotonic time in nanoseconds.
pub type Ns = u64;

/// Nanoseconds per microsecond, millisecond and second.
pub const US: Ns = 1_000;
pub const MS: Ns = 1_000_000;
pub const SEC: Ns = 1_000_000_000;
