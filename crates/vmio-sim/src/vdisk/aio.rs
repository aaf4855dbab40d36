//! QEMU's I/O engines (`[[vm.disk]] aio`): what submitting and completing a request costs
//! the VMM thread that serves the disk's queue, and how many requests the engine lets the
//! host work on at once.
//!
//! ```text
//! engine    VMM thread, per host request                 per batch            in flight per VMM thread   wake-ups
//! threads   submit: hand-off to a worker (mutex, queue,  none                 64 workers (a 65th request 2 (the worker;
//!           futex wake): 2 µs; complete: the completion                       waits for a free worker)   the completion)
//!           BH (eventfd read, callback): 1 µs
//! native    submit: iocb set-up and the kernel's aio      io_submit: 1 µs      MAX_EVENTS 1024            1 (the
//!           submission (runs in io_submit on the VMM      (one per batch of                               completion)
//!           thread): 1.5 µs; complete: eventfd read and   up to max_batch)
//!           ring reaping: 1 µs
//! io_uring  submit: an SQE and the kernel's submission:   io_uring_enter: 1 µs no limit (completions      1 (the
//!           1 µs; complete: a CQE from the mapped ring:   (per batch of up to  overflow into the kernel's completion)
//!           0.5 µs                                        MAX_ENTRIES 128)     list)
//! wake-ups: sleeping threads a request wakes, each [vm.disk.queue] wakeup of latency: threads
//!           qemu_sem_post wakes an idle worker, then event_notifier_set wakes the AioContext's
//!           thread in ppoll for thread_pool_completion_bh; native and io_uring only the
//!           completion's eventfd (qemu_laio_completion_cb, luring's completion handler).
//!           A request file-posix sends through the thread pool whatever `aio` is pays the
//!           thread pool's 2: a write-zeroes (raw_co_pwrite_zeroes → raw_thread_pool_submit),
//!           and a flush except on io_uring (raw_co_flush_to_disk → luring_co_submit there);
//!           see wakeups_for
//! batch:    the requests of one guest notification (vmio: the parts of one guest request),
//!           cut every max_batch requests: native linux_aio_max_batch of the QEMU profile
//!           (MAX_EVENTS 1024 before 6.2, DEFAULT_MAX_BATCH 32 since), io_uring MAX_ENTRIES 128
//! a worker (threads) is held from the hand-off until the host side is done (its preadv /
//! pwritev blocks); a native or io_uring slot likewise from submission to completion.
//! ```
//!
//! Sources: QEMU util/thread-pool.c (`thread_pool_submit_aio`: enqueue, `qemu_sem_post`,
//! spawn a worker while `cur_threads < max_threads`, `max_threads = 64`;
//! `thread_pool_completion_bh`), block/linux-aio.c (`laio_do_submit` queues while plugged,
//! `ioq_submit` sends at most `MAX_EVENTS - in_flight` iocbs per `io_submit`,
//! `qemu_laio_completion_bh` reaps the completion ring without a system call after the
//! eventfd read; `DEFAULT_MAX_BATCH` 32 since 6.2), block/io_uring.c (`luring_do_submit`,
//! `ioq_submit` → `io_uring_submit`, `MAX_ENTRIES` 128, `luring_process_completions`),
//! block/file-posix.c (`raw_co_prw` picks the engine).
//!
//! The figures in µs are estimates (no single measured source): the thread pool's are the
//! part of virtio-blk's former per-request VMM costs (6 and 4 µs) that is the hand-off, so
//! `aio = "threads"` (QEMU's default) keeps them; a system call's entry and exit is of the
//! order of 0.1-1 µs and the kernel's block-layer submission of a request about 1 µs. The
//! wake-ups occupy no VMM thread; they delay a request. The simulator counts them only on a
//! format driver's own I/O (sim/blocklayer.rs: a data request's round trip sits inside each
//! interface's measured constants).

use std::collections::VecDeque;
use vmio_core::vdisk::Aio;
use vmio_core::{Ns, US};

/// `max_threads` of util/thread-pool.c.
pub const THREAD_POOL_MAX: u32 = 64;
/// block/linux-aio.c `MAX_EVENTS`: iocbs in flight per AioContext.
pub const LINUX_AIO_MAX_EVENTS: u32 = 1024;
/// block/io_uring.c `MAX_ENTRIES`: the submission ring's size, its largest batch.
pub const IO_URING_MAX_ENTRIES: u32 = 128;

/// One engine's costs and limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Engine {
    pub aio: Aio,
    /// VMM-thread work per host request on submission and completion.
    pub submit_ns: Ns,
    pub complete_ns: Ns,
    /// VMM-thread work per batch (the system call that submits it).
    pub batch_ns: Ns,
    /// Requests per batch (one system call each).
    pub max_batch: u32,
    /// Host requests in flight per VMM thread.
    pub max_inflight: u32,
    /// Sleeping threads a read or write wakes (each `[vm.disk.queue] wakeup`).
    pub wakeups: u32,
}

/// What a format driver asks of file-posix, as [`Engine::wakeups_for`] counts its wake-ups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostOp {
    /// A read or write (`bdrv_co_preadv` / `pwritev` of the file child).
    ReadWrite,
    /// An fdatasync of the image file.
    Flush,
    /// A write-zeroes (fallocate of the image file).
    WriteZeroes,
}

/// The thread pool's wake-ups: a worker, then the completion.
pub const THREAD_POOL_WAKEUPS: u32 = 2;

impl Engine {
    /// The engine `aio`; `linux_aio_max_batch` is the QEMU profile's.
    pub fn new(aio: Aio, linux_aio_max_batch: u32) -> Engine {
        match aio {
            Aio::Threads => Engine {
                aio,
                submit_ns: 2 * US,
                complete_ns: US,
                batch_ns: 0,
                max_batch: u32::MAX,
                max_inflight: THREAD_POOL_MAX,
                wakeups: THREAD_POOL_WAKEUPS,
            },
            Aio::Native => Engine {
                aio,
                submit_ns: 1_500,
                complete_ns: US,
                batch_ns: US,
                max_batch: linux_aio_max_batch.max(1),
                max_inflight: LINUX_AIO_MAX_EVENTS,
                wakeups: 1,
            },
            Aio::IoUring => Engine {
                aio,
                submit_ns: US,
                complete_ns: 500,
                batch_ns: US,
                max_batch: IO_URING_MAX_ENTRIES,
                max_inflight: u32::MAX,
                wakeups: 1,
            },
        }
    }

    /// Sleeping threads a host request of kind `op` wakes (module doc): a read or write its
    /// engine's, a write-zeroes the thread pool's, a flush the thread pool's but on io_uring.
    pub fn wakeups_for(&self, op: HostOp) -> u32 {
        match op {
            HostOp::ReadWrite => self.wakeups,
            HostOp::Flush if self.aio == Aio::IoUring => self.wakeups,
            HostOp::Flush | HostOp::WriteZeroes => THREAD_POOL_WAKEUPS,
        }
    }

    /// System calls to submit a batch of `n` host requests.
    pub fn syscalls(&self, n: u32) -> u32 {
        if self.batch_ns == 0 {
            0
        } else {
            n.div_ceil(self.max_batch)
        }
    }

    /// Whether the `k`-th host request (from 0) of a batch opens a system call.
    pub fn opens_batch(&self, k: u32) -> bool {
        self.batch_ns > 0 && k.is_multiple_of(self.max_batch)
    }

    /// The VMM thread's submission work of the `k`-th host request of a batch.
    pub fn submit_work_ns(&self, k: u32) -> Ns {
        self.submit_ns
            + if self.opens_batch(k) {
                self.batch_ns
            } else {
                0
            }
    }
}

/// The requests one VMM thread's engine has in flight, and those waiting for room (the
/// thread pool's request list when every worker is busy).
#[derive(Clone, Debug, Default)]
pub struct Slots {
    pub busy: u32,
    pub waiting: VecDeque<usize>,
}

impl Slots {
    /// Take a slot for request `r`, or queue it: true when it may start now.
    pub fn acquire(&mut self, r: usize, cap: u32) -> bool {
        if self.busy < cap {
            self.busy += 1;
            true
        } else {
            self.waiting.push_back(r);
            false
        }
    }

    /// Free a slot: the first waiter, which now holds it, if any.
    pub fn release(&mut self) -> Option<usize> {
        match self.waiting.pop_front() {
            Some(r) => Some(r),
            None => {
                self.busy -= 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_pools_65th_concurrent_request_waits_for_a_worker() {
        let e = Engine::new(Aio::Threads, 32);
        let mut s = Slots::default();
        for r in 0..64 {
            assert!(s.acquire(r, e.max_inflight));
        }
        assert!(!s.acquire(64, e.max_inflight));
        assert_eq!(s.waiting.len(), 1);
        // A worker finishes: the waiter takes it, the pool stays full.
        assert_eq!(s.release(), Some(64));
        assert_eq!(s.busy, 64);
        assert_eq!(s.release(), None);
        assert_eq!(s.busy, 63);
    }

    #[test]
    fn native_makes_one_io_submit_per_batch_of_up_to_max_batch_requests() {
        let e = Engine::new(Aio::Native, 32);
        assert_eq!(e.syscalls(1), 1);
        assert_eq!(e.syscalls(32), 1);
        assert_eq!(e.syscalls(33), 2);
        // The work of a batch of n on the VMM thread: n × submit + ⌈n / 32⌉ × io_submit.
        let n = 40;
        let total: Ns = (0..n).map(|k| e.submit_work_ns(k)).sum();
        assert_eq!(total, n as Ns * 1_500 + 2 * US);
        // QEMU before 6.2 sends the whole plugged batch at once.
        assert_eq!(Engine::new(Aio::Native, 1024).syscalls(40), 1);
    }

    #[test]
    fn io_uring_is_cheaper_per_request_than_native_and_threads_makes_no_system_call_on_the_vmm_thread(
    ) {
        let (t, n, u) = (
            Engine::new(Aio::Threads, 32),
            Engine::new(Aio::Native, 32),
            Engine::new(Aio::IoUring, 32),
        );
        assert_eq!(t.syscalls(10), 0);
        assert_eq!(u.syscalls(10), 1);
        assert!(u.submit_ns + u.complete_ns < n.submit_ns + n.complete_ns);
        assert_eq!((t.submit_ns, t.complete_ns), (2 * US, US));
    }

    #[test]
    fn the_thread_pool_wakes_two_threads_per_request_and_the_kernels_engines_one() {
        let [t, n, u] = [Aio::Threads, Aio::Native, Aio::IoUring].map(|a| Engine::new(a, 32));
        let rw = |e: Engine| e.wakeups_for(HostOp::ReadWrite);
        assert_eq!((rw(t), rw(n), rw(u)), (2, 1, 1));
        // file-posix sends a write-zeroes through the thread pool whatever the engine, and a
        // flush too but on io_uring.
        for e in [t, n, u] {
            assert_eq!(e.wakeups_for(HostOp::WriteZeroes), 2);
        }
        let fl = |e: Engine| e.wakeups_for(HostOp::Flush);
        assert_eq!((fl(t), fl(n), fl(u)), (2, 2, 1));
    }
}
