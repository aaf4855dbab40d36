//! vmio-serve: vmio's real engine, an NBD server exporting the VM disks of a stack file.
//!
//! Each `[[vm.disk]]` of the stack becomes an NBD export (`VM/DISK`) over its volume's
//! backing files or block devices. The policies are vmio-core's, the same the simulator
//! drives: the volume layout maps every request onto the devices
//! ([`vmio_core::volume`]), the disk's QEMU cache mode decides open flags and what FLUSH and
//! FUA do ([`vmio_core::cache::CacheMode`]), and the stack's host scheduler (none,
//! mq-deadline, cfq, mcfq with the VMs' weights, [`vmio_core::sched`]) orders the requests
//! of every export and connection on each device, driven here by the monotonic clock.
//!
//! Modules: [`proto`] (the NBD wire format, after the NBD protocol specification
//! `doc/proto.md` of NetworkBlockDevice/nbd), [`export`] (backing files, cache modes, I/O),
//! [`aligned`] (O_DIRECT payload buffers and their pool), [`aio`] (Linux AIO for them), [`uring`] (`--aio io_uring`: a ring per connection thread),
//! [`dispatch`] (scheduler driver and I/O workers), [`handoff`] (the queue between threads), [`server`] (listeners, connections,
//! bounds, shutdown), [`admission`] (who gets a slot when the server is full: per-peer
//! limit, reserved slot, eviction of never-used connections), [`options`] (the one table of the server's options and the
//! [`Config`] they make), [`limits`] (payload budget, rate-limited logging), [`readahead`] (`--read-ahead`: sequential
//! read-ahead of O_DIRECT exports), [`pdc`]
//! (`cache = "pdc"`: the journal detector and the bypass of the host page cache), [`stats`]
//! (per-export counters), [`trace`] (`--trace`: every served request as a fio iolog v3). `vmio-serve` is the command-line binary; `vmio serve` (Python) runs
//! the same [`server::start`] in process.

pub mod admission;
pub mod aio;
pub mod aligned;
pub mod dispatch;
pub mod export;
pub mod handoff;
pub mod limits;
pub mod options;
pub mod pdc;
pub mod proto;
pub mod readahead;
pub mod server;
pub mod stats;
pub mod trace;
pub mod uring;

pub use options::{Config, Listen};
pub use server::{start, ServeError, Server, Usage};
pub use trace::TraceConfig;
