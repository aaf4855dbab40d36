//! vmio-sim: the discrete-event simulator of the virtualized storage path.
//!
//! - [`engine`]: the event queue (u64 ns virtual time, (time, seq) order);
//! - [`device`]: host device models (HDD, SSD, RAM) behind one trait;
//! - [`vdisk`]: virtual disk interfaces (virtio-blk, virtio-scsi, IDE);
//! - [`sim`]: the stack wired together, driving the core crate's pure policies, one file per
//!   layer: `sim/jobs.rs` (workload driver) → `sim/guest.rs` (guest split, virtual disk) →
//!   `sim/hostcache.rs` (QEMU cache modes, host page cache, writeback) → `sim/blockq.rs`
//!   (volumes, schedulers, device queues) → [`device`]; `sim/event.rs` is the typed event;
//! - [`metrics`]: latency and throughput accounting in fio's terms;
//! - [`run`]: text in (stack file, fio job file), a [`output::RunOutput`] out;
//! - [`output`]: a [`output::RunOutput`] rendered as fio's JSON (`run` uses `output`, never
//!   the reverse);
//! - [`bench`](mod@bench): simulator throughput benchmarks.

pub mod bench;
pub mod device;
pub mod engine;
pub mod metrics;
pub mod output;
pub mod run;
pub mod sim;
pub mod vdisk;
