//! Linux native AIO for the O_DIRECT pieces (`cache = "none"` and `"directsync"`), as
//! QEMU's `aio=native` (block/linux-aio.c: `io_submit` of the queued requests at once,
//! completions reaped by `io_getevents`) and fio's `ioengine=libaio` (engines/libaio.c) do.
//!
//! With the worker pool, each piece cost a hand-off to a sleeping worker, a blocking
//! `pread`/`pwrite` that put it to sleep again until the device answered, and one doorbell
//! of the device per piece (`perf record` of the server under `vmio bench serve`'s 4 KiB
//! random reads at QD32 in a VM: 43 % of its samples in `finish_task_switch`, 12 % in the
//! virtio doorbell `iowrite16`). Here the thread that dispatches from a device's queue
//! submits every piece the scheduler started in one `io_submit` (one plug, so the block
//! layer rings the doorbell once for the batch), and one completion thread reaps up to
//! [`EVENTS`] completions per `io_getevents`:
//!
//! ```text
//! pump(device):  for each io the scheduler starts: one piece, O_DIRECT, aligned?
//!                  yes: iocb(PREAD/PWRITE, fd, buf, len, off; data = the piece) -> batch
//!                  no:  the worker pool, as before
//!                io_submit(batch); what it does not take (EAGAIN, ...) -> the worker pool
//! completions:   loop: n = io_getevents(min 1, max EVENTS, 100 ms)
//!                  each: res < 0: the piece's error; 0 <= res < len: the rest synchronously
//!                        (a read past the end of the file reads zeros)
//!                        queue.complete(now, slot); pump(device); piece done
//! ```
//!
//! Requests the scheduler merged (several pieces in one dispatch), buffered descriptors
//! (other cache modes), unaligned pieces and PDC's bypassed writes keep the worker pool. If
//! `io_setup` fails (no AIO in the kernel, `fs.aio-max-nr` reached), everything does.
//! Sources: io_setup(2), io_submit(2), io_getevents(2); `struct iocb` and `struct io_event`
//! from linux/aio_abi.h.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Completions reaped per `io_getevents`.
pub const EVENTS: usize = 64;
/// How often the completion thread looks whether the server stops.
const POLL: Duration = Duration::from_millis(100);

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;

/// `struct iocb` (linux/aio_abi.h, little-endian field order).
#[repr(C)]
#[derive(Default)]
pub struct Iocb {
    pub data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fd: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

#[cfg(not(target_endian = "little"))]
compile_error!("struct iocb's key/rw_flags order is the little-endian one");

/// `struct io_event`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Event {
    pub data: u64,
    obj: u64,
    pub res: i64,
    res2: i64,
}

impl Iocb {
    /// A read (`write` false) or write of `len` bytes at `buf` and file offset `off`.
    pub fn new(write: bool, fd: i32, buf: *const u8, len: usize, off: u64, data: u64) -> Self {
        Self {
            data,
            opcode: if write {
                IOCB_CMD_PWRITE
            } else {
                IOCB_CMD_PREAD
            },
            fd: fd as u32,
            buf: buf as u64,
            nbytes: len as u64,
            offset: off as i64,
            ..Default::default()
        }
    }
}

impl Iocb {
    /// (write, descriptor, buffer, length, offset): the same I/O for another engine
    /// ([`crate::uring`]).
    pub fn io(&self) -> (bool, i32, *mut u8, u64, u64) {
        (
            self.opcode == IOCB_CMD_PWRITE,
            self.fd as i32,
            self.buf as *mut u8,
            self.nbytes,
            self.offset as u64,
        )
    }
}

/// One AIO context.
pub struct Context {
    ctx: libc::c_ulong,
    /// Submitted and not yet reaped.
    pub in_flight: AtomicUsize,
}

impl Context {
    /// A context for `depth` requests in flight; an error when the kernel refuses.
    pub fn new(depth: usize) -> io::Result<Self> {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the context id to `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut ctx) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            ctx,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Submit `iocbs` (in order); returns how many the kernel took (the first ones). The
    /// iocbs and their buffers must stay valid until their completions are reaped.
    pub fn submit(&self, iocbs: &[*mut Iocb]) -> usize {
        // Counted before the kernel can complete them (aio_loop reads it to stop).
        self.in_flight.fetch_add(iocbs.len(), Ordering::AcqRel);
        let mut done = 0;
        while done < iocbs.len() {
            let rest = &iocbs[done..];
            // SAFETY: each pointer is a live Iocb whose buffer outlives its completion
            // (the caller's contract).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    rest.len() as libc::c_long,
                    rest.as_ptr(),
                )
            };
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if r <= 0 {
                break;
            }
            done += r as usize;
        }
        self.in_flight
            .fetch_sub(iocbs.len() - done, Ordering::AcqRel);
        done
    }

    /// Wait up to [`POLL`] for at least one completion; fills `out` from the start and
    /// returns how many.
    pub fn reap(&self, out: &mut [Event; EVENTS]) -> usize {
        let ts = libc::timespec {
            tv_sec: POLL.as_secs() as libc::time_t,
            tv_nsec: POLL.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `out` has room for EVENTS events; `ts` outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_getevents,
                self.ctx,
                1 as libc::c_long,
                EVENTS as libc::c_long,
                out.as_mut_ptr(),
                &ts,
            )
        };
        if r <= 0 {
            return 0;
        }
        self.in_flight.fetch_sub(r as usize, Ordering::AcqRel);
        r as usize
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is ours; in-flight requests (none at a clean stop) are
        // cancelled or waited for by the kernel.
        unsafe {
            libc::syscall(libc::SYS_io_destroy, self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::io::AsRawFd;

    #[test]
    fn the_kernel_structures_have_their_abi_sizes() {
        assert_eq!(std::mem::size_of::<Iocb>(), 64);
        assert_eq!(std::mem::size_of::<Event>(), 32);
    }

    #[test]
    fn a_submitted_read_completes_with_the_file_bytes_and_its_data_tag() {
        let dir = std::env::temp_dir().join(format!("vmio-aio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"hello, aio")
            .unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let Ok(ctx) = Context::new(4) else {
            return; // no AIO in this kernel: the server uses its workers
        };
        let mut buf = vec![0u8; 10];
        let mut cb = Iocb::new(false, f.as_raw_fd(), buf.as_mut_ptr(), 10, 0, 7);
        assert_eq!(ctx.submit(&[&mut cb as *mut Iocb]), 1);
        let mut ev = [Event::default(); EVENTS];
        let mut n = 0;
        while n == 0 {
            n = ctx.reap(&mut ev);
        }
        assert_eq!((n, ev[0].data, ev[0].res), (1, 7, 10));
        assert_eq!(&buf, b"hello, aio");
        assert_eq!(ctx.in_flight.load(Ordering::Relaxed), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
