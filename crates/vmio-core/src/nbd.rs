//! `[nbd]`: the costs of the NBD path, the virtual disk of `interface = "nbd"`.
//!
//! A disk with `interface = "nbd"` is an export of `vmio serve` (or any NBD server) reached by
//! an NBD client on the host over a Unix socket: fio's nbd engine (fio engines/nbd.c, libnbd's
//! `nbd_aio_pread`/`nbd_aio_pwrite`), `qemu-io`/`qemu-img` or QEMU's own NBD block driver. There
//! is no guest kernel and no virtqueue: what a request costs is the path between the client's
//! thread and the server's threads. The client sends the request with one `send` and polls
//! for the reply (libnbd lib/aio.c). vmio serve's connection reader parses the request (and
//! reads a WRITE's payload into its buffer), maps it through the layout and submits it to the
//! device's queue and scheduler on the same thread (crates/vmio-serve/src/dispatch.rs). On an
//! O_DIRECT backing (`cache = "none"`, `"directsync"`) the aligned pieces the queue starts go
//! to the kernel in one `io_submit` from that thread, and one completion thread reaps them
//! (`io_getevents`) and sends the reply itself, header and payload in one `sendmsg`
//! (crates/vmio-serve/src/aio.rs, server.rs); other pieces (buffered, unaligned, merged) go
//! to an I/O worker through a queue whose consumers sleep at once
//! (crates/vmio-serve/src/handoff.rs), and the worker sends the reply. The connection's writer
//! thread only takes what a full socket refused (docs/serve.md). Three kinds of cost follow:
//!
//! - **hand-offs** (`handoff`): the client's send wakes the sleeping reader, the kernel's
//!   completion wakes the completion thread (or the hand-off wakes a worker), and the reply
//!   wakes the client's poll; each wakes a sleeping thread, possibly on another core, and on a
//!   VM host that is an IPI, a VM exit and a vCPU scheduled again (Linux kernel/sched/core.c
//!   `try_to_wake_up`, `ttwu_queue_wakelist`). It delays a request but occupies nothing: at
//!   depth the threads are awake and the hand-offs of several requests overlap.
//! - **serialized work per request** (`request`): the system calls on both sides, parsing the
//!   128-byte-or-smaller request and reply headers (the NBD protocol's `struct nbd_request`,
//!   `struct nbd_simple_reply`), the dispatch through the layout and the scheduler. On the
//!   connection's reader (submission) and the thread that sends the reply (completion), one
//!   request after the other.
//! - **copies** (`read_rate`, `write_rate`): a WRITE's payload crosses the socket with the
//!   request (client → kernel → server buffer), a READ's with its reply (server buffer →
//!   kernel → client); each is copied twice by the CPU, on the serialized threads. (Over a
//!   tmpfs image the device's own copy, `shmem_file_read_iter` inside `io_submit`, is the
//!   device's time, not these.)
//!
//! The defaults come from four fio nbd jobs run by hand on the reference machine of
//! docs/validation.md (a 2-vCPU Firecracker VM, kernel 6.18, fio 3.33 with libnbd, vmio serve
//! over a tmpfs image): 4k QD1 reads at 154 µs, 16k QD12 reads at 39k IOPS, 96k QD4 reads at
//! 1.2 GB/s, 128k QD6 writes at 0.99 GB/s. `vmio calibrate --serve-path` measures the table
//! on the machine at hand (python/vmio/real/servepath.py): `request` and the rates from the
//! saturated (QD16) points, where the hand-offs overlap, and `handoff` from the QD1 latencies
//! of the smallest size, where the wake-ups dominate the copies (a larger size's QD1 residual
//! also holds its copies' lower cost at depth 1, with the payload still in the cache: that
//! module's doc). On the reference machine, which is shared, its runs ranged over handoff
//! 12–128 µs, request 13–54 µs and rates 1.3–5 GB/s (docs/validation.md, "The NBD path").
//! Put the table it prints into the stack.
//!
//! ```text
//! submit (request of len bytes, op):
//!     t = max(now, path_busy) + request / 2 + (write ? len / write_rate : 0)
//!     path_busy = t; the volume gets the request at t
//! complete (the host side is done):
//!     t = max(now, path_busy) + request / 2 + (read ? len / read_rate : 0)
//!     path_busy = t; the client has the reply at t + handoff
//! closed forms: QD1 latency = device + handoff + request + len / rate(op)
//!               saturated IOPS of the path = 1 / (request + len / rate(op))
//! ```
//!
//! **The copies at depth 1** (`qd1_read_rate`, `qd1_write_rate`; 0 by default: the depth's
//! rates). The rates above are measured at depth 16, where the copies of 16 requests of
//! 128 KiB (2 MiB a stage: the image's page, the server's buffer, the socket's skbs, the
//! client's buffer; Linux mm/shmem.c `shmem_file_read_iter`, net/unix/af_unix.c
//! `unix_stream_sendmsg` and `unix_stream_read_generic`, each a `copy_to_iter` or
//! `copy_from_iter`) share the cores and spill out of their L2 caches, while one request's
//! payload stays in the cache from one copy to the next: at depth 1 a byte costs less
//! (measured: the 128 KiB QD1 latencies were simulated with a median +36 % too slow with the
//! depth's rates, docs/performance.md). A request that is the only one of its disk in flight
//! (the guest's block layer holds no other: fio at `iodepth=1`) copies at the depth-1 rate
//! when it is set; `vmio calibrate --serve-path` fits it from the QD1 points
//! (python/vmio/real/servepath.py).
//!
//! ```text
//! rate(op, alone) = alone and qd1_rate(op) > 0 ? qd1_rate(op) : rate(op)
//! closed form: QD1 latency = device + handoff + request + len / qd1_rate(op)
//! ```
//!
//! **The path's CPU** (`cores`, `cpu`, `cpu_rate`; off by default). The costs above were
//! measured over a RAM image, where a request costs the path and a memory copy. Over a disk
//! the same request also costs the host kernel's block I/O (the block layer, the driver, the
//! interrupt and its softirq, the waiting thread's sleep and wake-up: Linux block/blk-mq.c,
//! fs/iomap/direct-io.c, kernel/sched/core.c `try_to_wake_up`), and the client, the server and
//! the kernel share the host's cores: on a 2-core host a 4 KiB QD16 write through
//! qemu-storage-daemon to a file on disk was measured at about 80 µs of CPU a request
//! (docs/validation.md, the real image checks), three times the serialized `request`. The
//! bound: every request needs `cpu + len / cpu_rate` of one of `cores` cores, booked in
//! submission order on the core free first; the CPU runs inside the path's latencies (a QD1
//! request waits for the device, the hand-offs and its CPU at once), so a request completes at
//! the later of its path's completion and its CPU's end. `vmio calibrate --serve-path`
//! measures the path's own CPU from /proc/stat, `vmio calibrate --host-fs` the kernel's per
//! direct I/O (python/vmio/real/servepath.py, hostfscal.py). Only the requests of the client
//! book CPU, not a format driver's metadata I/O; under `[cpu] model = "cfs"` the bound is not
//! applied (the CPU layer prices the VMM's and the kernel's work on its own threads).
//!
//! ```text
//! submit (request of len bytes):  c = the core free first (lowest index among equals)
//!     cpu_done = max(now, free[c]) + cpu + len / cpu_rate;  free[c] = cpu_done
//! complete: the client has the reply at max(path's reply, cpu_done)
//! closed forms: QD1 latency = max(device + handoff + request + len / rate(op), cpu(len))
//!               saturated IOPS <= cores / cpu(len)
//! ```
//!
//! **The threads** (`client_cpu`, `server_cpu`, `server_wake`, `pool_cpu`; 0 by default, only
//! under `[cpu] model = "cfs"`, ignored by the dedicated model). Under CFS a request runs on
//! the threads that really run it, each item waiting for a core of its own (the `cores`/`cpu`
//! bound above is not applied there). The nbd disk's VM stands for the two processes: its
//! vCPU running the fio job is the client's thread (fio engines/nbd.c runs libnbd in the job's
//! thread: `nbd_aio_pwrite` sends, `nbd_aio_notify_read` and `nbd_poll` reap; vmio charges a
//! vCPU's tick exits on it, `[cpu] guest_hz`), its VMM main loop (or the disk's iothread) is
//! the server's AioContext thread, and its thread pool is the server's (QEMU keeps one per
//! AioContext). The kernel's completion stays `[cpu] kernel_complete` on the device's core.
//! Sources: QEMU 7.2 util/aio-posix.c `aio_poll` (one `ppoll`/`epoll_wait` return dispatches
//! every ready handler: the socket's, the pool's event notifier), nbd/server.c `nbd_trip`
//! (a coroutine per request: `nbd_co_receive_request`, `blk_co_pwritev`, `nbd_co_send_*`),
//! util/thread-pool.c `thread_pool_submit_aio` and `worker_thread` (idle workers wait on a
//! semaphore; a new one is spawned when none is idle, up to `max_threads` = 64; a finished
//! request is signalled through `ctx->notifier`, an event notifier the AioContext polls),
//! block/file-posix.c `handle_aiocb_rw` (the worker's `pwritev`, which for O_DIRECT blocks
//! until the device completes); libnbd lib/aio.c; Linux kernel/sched/fair.c for the cores.
//!
//! ```text
//! client (the job's vCPU):   client_cpu / 2                          libnbd send, fio submit
//! main loop:                 [server_wake] + server_cpu / 2 + request / 2 + write copy
//! pool worker (aio=threads, pool_cpu > 0; the longest idle, else a new one up to 64, else
//!   the request waits for the first to finish):   pool_cpu / 2         pwritev, direct I/O
//! ... the device ...
//! kernel thread of the device's core:  kernel_complete
//! the same worker:           pool_cpu - pool_cpu / 2                 wakes, returns, notifies
//! main loop:                 [server_wake] + server_cpu - server_cpu / 2 + request / 2
//!                            + read copy                             the reply's send
//! client (the job's vCPU):   client_cpu - client_cpu / 2             recv, fio reap
//! then handoff (a delay, as above); the request is done
//! [server_wake]: paid by an item that finds no other NBD item queued or running on the
//!   main loop (the loop sleeps in ppoll and this item wakes it); items that arrive while it
//!   works are dispatched by the same or the next immediate return, without a sleep
//! every new thread (the workers) floats over all host cores; a worker is held from its
//!   pwritev to its return, as the blocking call holds it
//! closed forms (one core, QD1, ticks off): latency = client_cpu + request + copy +
//!   server_cpu + 2 server_wake + pool_cpu + kernel_complete + device + handoff
//! at depth, no thread the bottleneck: IOPS = busy cores / CPU per request; the main loop
//!   the bottleneck: IOPS = 1 / (request + copy + server_cpu) (it never sleeps), against
//!   2 server_wake more per request at QD1
//! ```
//!
//! **The server's sparse read** (`block_status`; off by default, as vmio serve has it). QEMU's
//! NBD server (qemu-nbd, qemu-storage-daemon) answers a READ of a client that negotiated
//! structured replies (libnbd does by default, so fio's nbd engine) with a sparse read: nbd/
//! server.c `nbd_do_cmd_read` -> `nbd_co_send_sparse_read` asks `blk_co_block_status_above`
//! for the range first, sends a hole chunk for what reads as zeroes and reads the rest with
//! `blk_co_pread`. On a qcow2 image the query is a second L2 lookup under the image lock
//! (block/qcow2.c `qcow2_co_block_status`: `s->lock` around `qcow2_get_host_offset`), apart
//! from the read's own, so with a small L2 cache other requests' lookups can evict the slice
//! between the two (vmio_core::image::qcow2, "The server's block-status query"). A raw image
//! answers from file-posix's block-status cache without a lock and costs only CPU, not
//! modelled.
//!
//! The queue depth is vmio serve's bound on requests in flight per connection (256) and the
//! largest request its largest payload (32 MiB, `MAX_PAYLOAD_BYTES` in
//! crates/vmio-serve/src/proto/mod.rs; the NBD protocol's limit for a server without block
//! size constraints).

use crate::params::{Kind, ParamSpec, Value, Values};
use crate::table::{param_table, FieldError, Table};
use crate::units::transfer_ns;
use crate::{Ns, MS, US};
use serde::Serialize;

const DURATION: Kind = Kind::Duration {
    bare: MS,
    positive: false,
};

pub const HANDOFF: ParamSpec = ParamSpec {
    name: "handoff",
    kind: DURATION,
    default: Value::Int(130 * US),
    unit: "ns",
    help: "latency of a request's thread hand-offs (client -> server threads -> client): delays it, occupies nothing",
};
pub const REQUEST: ParamSpec = ParamSpec {
    name: "request",
    kind: DURATION,
    default: Value::Int(20 * US),
    unit: "ns",
    help: "serialized work per request on the path (system calls, headers, dispatch), half on submission and half on completion",
};
pub const READ_RATE: ParamSpec = ParamSpec {
    name: "read_rate",
    kind: Kind::Rate,
    default: Value::Int(1_700_000_000),
    unit: "bps",
    help: "bytes per second the path copies a READ's payload (the reply), serialized",
};
pub const WRITE_RATE: ParamSpec = ParamSpec {
    name: "write_rate",
    kind: Kind::Rate,
    default: Value::Int(1_200_000_000),
    unit: "bps",
    help: "bytes per second the path copies a WRITE's payload (the request), serialized",
};
pub const QD1_READ_RATE: ParamSpec = ParamSpec {
    name: "qd1_read_rate",
    kind: Kind::Count {
        min: 0,
        max: u64::MAX,
    },
    default: Value::Int(0),
    unit: "bps",
    help: "bytes per second the path copies a READ's payload when the request is the only one of its disk in flight (QD1: the payload stays in the cache from one copy to the next); 0: read_rate",
};
pub const QD1_WRITE_RATE: ParamSpec = ParamSpec {
    name: "qd1_write_rate",
    kind: Kind::Count {
        min: 0,
        max: u64::MAX,
    },
    default: Value::Int(0),
    unit: "bps",
    help: "bytes per second the path copies a WRITE's payload when the request is the only one of its disk in flight; 0: write_rate",
};
pub const CORES: ParamSpec = ParamSpec {
    name: "cores",
    kind: Kind::Count { min: 0, max: 4096 },
    default: Value::Int(0),
    unit: "",
    help: "host cores the path's CPU shares (client, server, the kernel's I/O); 0: no CPU bound",
};
pub const CPU: ParamSpec = ParamSpec {
    name: "cpu",
    kind: DURATION,
    default: Value::Int(0),
    unit: "ns",
    help: "CPU time a request takes of one of `cores` (every thread of the path and the host kernel's I/O); overlaps the path's latencies",
};
pub const CPU_RATE: ParamSpec = ParamSpec {
    name: "cpu_rate",
    kind: Kind::Count {
        min: 0,
        max: u64::MAX,
    },
    default: Value::Int(0),
    unit: "bps",
    help: "payload bytes per second of CPU beside `cpu` (copies in the kernel and the threads); 0: none",
};
pub const BLOCK_STATUS: ParamSpec = ParamSpec {
    name: "block_status",
    kind: Kind::Bool,
    default: Value::Bool(false),
    unit: "",
    help: "the server asks the image's block status before each read (QEMU's NBD server with structured replies: a format lookup under the image lock, then the read); vmio serve: false",
};
pub const CLIENT_CPU: ParamSpec = ParamSpec {
    name: "client_cpu",
    kind: DURATION,
    default: Value::Int(0),
    unit: "ns",
    help: "[cpu] model = \"cfs\": the client's CPU per request (libnbd's send and fio's submit, the reply's recv and fio's reap), half on each side, on the job's thread (the VM's vCPU)",
};
pub const SERVER_CPU: ParamSpec = ParamSpec {
    name: "server_cpu",
    kind: DURATION,
    default: Value::Int(0),
    unit: "ns",
    help: "[cpu] model = \"cfs\": the server's main-loop CPU per request (nbd_trip: the request's recv and parse, the reply's send), half on each side",
};
pub const SERVER_WAKE: ParamSpec = ParamSpec {
    name: "server_wake",
    kind: DURATION,
    default: Value::Int(0),
    unit: "ns",
    help: "[cpu] model = \"cfs\": the server's main-loop CPU per wake-up (aio_poll's ppoll return), paid once by the requests and completions one wake-up finds",
};
pub const POOL_CPU: ParamSpec = ParamSpec {
    name: "pool_cpu",
    kind: DURATION,
    default: Value::Int(0),
    unit: "ns",
    help: "[cpu] model = \"cfs\", aio = \"threads\": a thread-pool worker's CPU per request (the pread/pwrite and its direct I/O), half before the device and half after; 0: no pool",
};
/// The `[nbd]` parameters, in the order of [`NbdSpec`]'s fields.
pub const PARAMS: &[ParamSpec] = &[
    HANDOFF,
    REQUEST,
    READ_RATE,
    WRITE_RATE,
    CORES,
    CPU,
    CPU_RATE,
    BLOCK_STATUS,
    CLIENT_CPU,
    SERVER_CPU,
    SERVER_WAKE,
    POOL_CPU,
    QD1_READ_RATE,
    QD1_WRITE_RATE,
];

/// QEMU's thread pool's largest number of workers (util/thread-pool.c, `max_threads` = 64).
pub const POOL_MAX_THREADS: usize = 64;

/// Requests in flight per connection (vmio serve's bound, docs/serve.md).
pub const QUEUE_DEPTH: u32 = 256;
/// The largest READ or WRITE (vmio serve's `MAX_PAYLOAD_BYTES`).
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;

/// The NBD path's costs (`[nbd]`, [`PARAMS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NbdSpec {
    pub handoff_ns: Ns,
    pub request_ns: Ns,
    pub read_rate_bps: u64,
    pub write_rate_bps: u64,
    /// Cores the path's CPU shares (0: no bound).
    pub cores: u32,
    pub cpu_ns: Ns,
    /// 0: no per-byte CPU.
    pub cpu_rate_bps: u64,
    /// The server's sparse read: a block-status query before each read (module doc).
    pub block_status: bool,
    /// `[cpu] model = "cfs"`: the threads' CPU per request (module doc, "The threads"); left
    /// out of the effective stack at 0, so reports without them stay as they were.
    #[serde(skip_serializing_if = "is_zero")]
    pub client_cpu_ns: Ns,
    #[serde(skip_serializing_if = "is_zero")]
    pub server_cpu_ns: Ns,
    #[serde(skip_serializing_if = "is_zero")]
    pub server_wake_ns: Ns,
    #[serde(skip_serializing_if = "is_zero")]
    pub pool_cpu_ns: Ns,
    /// The copies of a request alone in flight on its disk (module doc, "The copies at
    /// depth 1"); 0: the depth's rate. Left out of the effective stack at 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub qd1_read_rate_bps: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub qd1_write_rate_bps: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

impl NbdSpec {
    /// The spec of resolved `[nbd]` values (read against [`PARAMS`]).
    /// Rates are at least 1 byte/s, so a copy always takes a finite time.
    pub fn from_values(v: &Values) -> Self {
        NbdSpec {
            handoff_ns: v.int(HANDOFF.name),
            request_ns: v.int(REQUEST.name),
            read_rate_bps: v.int(READ_RATE.name).max(1),
            write_rate_bps: v.int(WRITE_RATE.name).max(1),
            cores: v.int(CORES.name) as u32,
            cpu_ns: v.int(CPU.name),
            cpu_rate_bps: v.int(CPU_RATE.name),
            block_status: v.flag(BLOCK_STATUS.name),
            client_cpu_ns: v.int(CLIENT_CPU.name),
            server_cpu_ns: v.int(SERVER_CPU.name),
            server_wake_ns: v.int(SERVER_WAKE.name),
            pool_cpu_ns: v.int(POOL_CPU.name),
            qd1_read_rate_bps: v.int(QD1_READ_RATE.name),
            qd1_write_rate_bps: v.int(QD1_WRITE_RATE.name),
        }
    }

    /// Bytes per second the path copies a payload of a READ (`read` true) or a WRITE: at the
    /// depth-1 rate when the request is `alone` in flight on its disk and that rate is set,
    /// else at the depth's (module doc, "The copies at depth 1").
    pub fn copy_rate_bps(&self, read: bool, alone: bool) -> u64 {
        let (depth, qd1) = if read {
            (self.read_rate_bps, self.qd1_read_rate_bps)
        } else {
            (self.write_rate_bps, self.qd1_write_rate_bps)
        };
        if alone && qd1 > 0 {
            qd1
        } else {
            depth
        }
    }

    /// The CPU bound's cores, if the path has one (`cores` and some CPU per request).
    pub fn cpu_cores(&self) -> Option<u32> {
        (self.cores > 0 && (self.cpu_ns > 0 || self.cpu_rate_bps > 0)).then_some(self.cores)
    }

    /// The CPU a request of `len` bytes takes of one core (module doc).
    pub fn cpu_for(&self, len: u64) -> Ns {
        let bytes = match self.cpu_rate_bps {
            0 => 0,
            r => transfer_ns(len, r),
        };
        self.cpu_ns + bytes
    }
}

/// `[nbd]`: every key read against [`PARAMS`] (the NBD path's parameters; the stack keeps the spec
/// only when a disk uses it, a table without one is checked, then unused).
impl Table for NbdSpec {
    const KEY: &'static str = "nbd";
    type Raw = std::collections::BTreeMap<String, toml::Value>;
    type Context<'a> = ();

    fn from_raw(raw: &Self::Raw, field: &str, _: ()) -> Result<Self, FieldError> {
        Ok(Self::from_values(&param_table(raw, field, PARAMS)?))
    }
}

impl Default for NbdSpec {
    fn default() -> Self {
        Self::from_values(&Values::defaults(PARAMS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_alone_copies_at_the_depth_1_rate_once_it_is_set_and_at_the_depths_otherwise() {
        let mut s = NbdSpec::default();
        for alone in [false, true] {
            assert_eq!(s.copy_rate_bps(true, alone), s.read_rate_bps);
            assert_eq!(s.copy_rate_bps(false, alone), s.write_rate_bps);
        }
        (s.qd1_read_rate_bps, s.qd1_write_rate_bps) = (5_000_000_000, 3_000_000_000);
        assert_eq!(s.copy_rate_bps(true, true), 5_000_000_000);
        assert_eq!(s.copy_rate_bps(false, true), 3_000_000_000);
        assert_eq!(s.copy_rate_bps(true, false), s.read_rate_bps);
        assert_eq!(s.copy_rate_bps(false, false), s.write_rate_bps);
    }

    #[test]
    fn defaults_give_a_qd1_4k_read_of_about_150_us_without_the_device() {
        let s = NbdSpec::default();
        assert_eq!(transfer_ns(4096, s.read_rate_bps), 2410);
        let t = s.handoff_ns + s.request_ns + transfer_ns(4096, s.read_rate_bps);
        assert_eq!(t, 152_410);
    }

    #[test]
    fn the_cpu_bound_is_off_by_default_and_takes_cpu_plus_the_payload_at_its_rate() {
        let mut s = NbdSpec::default();
        assert_eq!(s.cpu_cores(), None);
        s.cores = 2;
        assert_eq!(
            s.cpu_cores(),
            None,
            "cores without CPU per request bound nothing"
        );
        s.cpu_ns = 40 * US;
        assert_eq!(s.cpu_cores(), Some(2));
        assert_eq!(s.cpu_for(1 << 20), 40 * US);
        s.cpu_rate_bps = 1 << 30;
        assert_eq!(s.cpu_for(1 << 20), 40 * US + 976_563);
    }
}
