//! `--aio io_uring`: one io_uring per connection thread, through which that thread receives
//! its client's requests and reads and writes the O_DIRECT pieces it dispatches, as QEMU's
//! `aio=io_uring` (block/io_uring.c: requests queued as SQEs, submitted by
//! `io_uring_enter`, completions reaped from the CQ ring by the same event loop) and fio's
//! `ioengine=io_uring` do; the ring's setup and calls after io_uring_setup(2),
//! io_uring_enter(2) and Jens Axboe's "Efficient IO with io_uring" (2019).
//!
//! With `--aio native` a request crosses three sleeping threads: the client's, the
//! connection's reader (asleep in `recvfrom`), and the AIO completion thread (asleep in
//! `io_getevents`), and the reader and the completion thread meet on the device queue's
//! lock (`strace -f -c` of `vmio bench serve`'s 4 KiB reads at QD32: 0.9 to 1.9 `futex`
//! calls a request; `perf`: 24 % of the server's samples returning from a sleep). Here the
//! connection's thread waits for its socket and for the disk in one place: the receive is
//! an SQE like the pieces, and one `io_uring_enter` submits what the thread queued and
//! waits for the first completion, whichever it is:
//!
//! ```text
//! recv(buf):     queue RECV(socket, buf)
//!                loop: io_uring_enter(submit the queue, wait >= 1 completion, <= tick)
//!                      each completion: RECV: its result is the read's
//!                                       a piece: the dispatcher completes it (device queue,
//!                                         pump: the pieces it starts are queued here); a
//!                                         request done: its reply is queued here as a
//!                                         SENDMSG (MSG_DONTWAIT), unless one is in flight
//!                                         for the connection (it follows that one)
//!                                       a SENDMSG: the socket full -> the rest to the
//!                                         connection's writer thread; else the next replies
//!                      tick passed, no RECV yet: queue ASYNC_CANCEL(RECV), wait for it
//! pump (on this thread): an aligned O_DIRECT piece -> READ/WRITE SQE (data = the piece)
//! after a request: more requests already received -> io_uring_enter(submit) now (no plug:
//!                  a request is never held back behind the ones after it)
//! waiting for budget or the last replies, pieces in the ring: a turn (<= 1 ms), not a sleep
//! end:           turns until every piece in the ring has completed; the ring is closed
//! ```
//!
//! So a request costs one `io_uring_enter` and no other system call when the socket has
//! data and room (`strace -f -c`: 1.09 a request, against `io_submit`, `sendmsg`,
//! `recvfrom` and 2.4 `futex` with `--aio native`). The pieces a thread dispatches may be
//! other connections' (the device queue is shared): they complete on this thread's ring, and
//! their replies are sent through it too (never blocking, see crate::server). Threads without a ring (the timer, the I/O workers,
//! the AIO completion thread) dispatch through Linux AIO as with `--aio native`
//! ([`crate::aio`]). The ring is set up with `IORING_SETUP_SINGLE_ISSUER`,
//! `IORING_SETUP_COOP_TASKRUN` and `IORING_SETUP_DEFER_TASKRUN` (Linux 6.1: completions are
//! run when the one thread that submits waits, with no interrupt of it meanwhile), without
//! them on kernels that refuse them.

use io_uring::{opcode, squeue, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `user_data` of the thread's receive; the pieces' are their boxes' addresses (aligned, so
/// never 1 or 2).
const RECV: u64 = 1;
const CANCEL: u64 = 2;
/// Submission queue entries of a ring (the completion queue has twice as many; the kernel
/// keeps overflowing completions, `IORING_FEAT_NODROP`).
pub const ENTRIES: u32 = 256;
/// The longest turn while waiting for something other than the ring (budget, replies).
pub const PARK: Duration = Duration::from_millis(1);

/// What completes a piece: its `user_data` and result (bytes, or -errno).
pub type Done = Arc<dyn Fn(u64, i32) + Send + Sync>;

struct Ring {
    ring: IoUring,
    /// Pieces queued or in the kernel, not yet reaped.
    pieces: usize,
    done: Done,
}

thread_local! {
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Whether this kernel gives a ring with what [`recv`] needs (a timeout on the wait,
/// `IORING_FEAT_EXT_ARG`, Linux 5.11); the error says why not. The ring is made and closed
/// on a thread of its own: closing a ring queues work to the task that owns it, which
/// interrupts that thread's next blocking call (`EINTR`).
pub fn probe() -> io::Result<()> {
    std::thread::spawn(|| new_ring(4).map(|_| ()))
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the io_uring probe failed")))
}

fn new_ring(entries: u32) -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))?;
    if !ring.params().is_feature_ext_arg() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel's io_uring has no timed wait (IORING_FEAT_EXT_ARG, Linux 5.11)",
        ));
    }
    Ok(ring)
}

/// Give this thread a ring; pieces it dispatches go through it from now on, and `done`
/// completes them.
pub fn install(done: Done) -> io::Result<()> {
    let ring = new_ring(ENTRIES)?;
    RING.with(|r| {
        *r.borrow_mut() = Some(Ring {
            ring,
            pieces: 0,
            done,
        })
    });
    Ok(())
}

/// Complete every piece in this thread's ring, then close it.
pub fn uninstall() {
    while busy() {
        turn(Duration::from_millis(100), &mut Vec::new());
    }
    RING.with(|r| r.borrow_mut().take());
}

/// This thread has a ring.
pub fn active() -> bool {
    RING.with(|r| r.borrow().is_some())
}

/// This thread's ring has pieces queued or in flight.
pub fn busy() -> bool {
    RING.with(|r| r.borrow().as_ref().is_some_and(|r| r.pieces > 0))
}

/// Queue `e` on this thread's ring (submitting what is queued first when the queue is
/// full); false when the thread has no ring.
fn push(e: squeue::Entry, piece: bool) -> bool {
    RING.with(|r| {
        let mut r = r.borrow_mut();
        let Some(r) = r.as_mut() else { return false };
        loop {
            // SAFETY: the entry's buffer outlives its completion (the callers' contract:
            // recv waits for it; a piece's buffer is its request's, freed after it is done).
            if unsafe { r.ring.submission().push(&e) }.is_ok() {
                break;
            }
            let _ = r.ring.submit();
        }
        if piece {
            r.pieces += 1;
        }
        true
    })
}

/// Queue a piece: a read into (`write` false) or a write from `buf`, `len` bytes at `off`
/// of `fd`, completed by the ring's `done(data, result)`; false when the thread has no ring.
pub fn push_rw(write: bool, fd: i32, buf: *mut u8, len: u32, off: u64, data: u64) -> bool {
    let fd = types::Fd(fd);
    let e = if write {
        opcode::Write::new(fd, buf, len).offset(off).build()
    } else {
        opcode::Read::new(fd, buf, len).offset(off).build()
    };
    push(e.user_data(data), true)
}

/// Queue a `sendmsg(fd, msg, flags)`, completed by the ring's `done(data, result)` like a
/// piece; false when the thread has no ring. `msg` and what it points to must live until then.
pub fn push_sendmsg(fd: i32, msg: *const libc::msghdr, flags: u32, data: u64) -> bool {
    let e = opcode::SendMsg::new(types::Fd(fd), msg)
        .flags(flags)
        .build();
    push(e.user_data(data), true)
}

/// Submit what is queued without waiting (nothing without a ring or a queue).
pub fn submit() {
    RING.with(|r| {
        if let Some(r) = r.borrow_mut().as_mut() {
            if !r.ring.submission().is_empty() {
                let _ = r.ring.submit();
            }
        }
    });
}

/// If this thread's ring has pieces in it, run one turn of at most [`PARK`] and return
/// true (the caller checks its condition again); false: the caller may sleep.
pub fn park() -> bool {
    if !busy() {
        return false;
    }
    turn(PARK, &mut Vec::new());
    true
}

/// One turn: submit what is queued, wait up to `timeout` for a completion, then complete
/// the pieces reaped (their pumps queue the next ones) and add the other completions
/// (`user_data`, result) to `others`.
fn turn(timeout: Duration, others: &mut Vec<(u64, i32)>) {
    let mut got: Vec<(u64, i32)> = Vec::new();
    let done = RING.with(|r| {
        let mut r = r.borrow_mut();
        let r = r.as_mut()?;
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        // ETIME (the timeout), EINTR (a signal), EBUSY (completions to reap first): the
        // completions are read below either way.
        let _ = r.ring.submitter().submit_with_args(1, &args);
        for cqe in r.ring.completion() {
            let ud = cqe.user_data();
            if ud != RECV && ud != CANCEL {
                r.pieces -= 1;
            }
            got.push((ud, cqe.result()));
        }
        Some(r.done.clone())
    });
    let Some(done) = done else { return };
    for (ud, res) in got {
        if ud == RECV || ud == CANCEL {
            others.push((ud, res));
        } else {
            done(ud, res);
        }
    }
}

/// Receive into `buf` from socket `fd` through this thread's ring, completing the pieces
/// that finish meanwhile: the bytes received (0: the peer closed), or `WouldBlock` when
/// none came within `tick` (as a blocking read with `SO_RCVTIMEO` = tick). `Unsupported`
/// when the thread has no ring.
pub fn recv(fd: i32, buf: &mut [u8], tick: Duration) -> io::Result<usize> {
    let len = buf.len().min(u32::MAX as usize) as u32;
    let e = opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), len).build();
    if !push(e.user_data(RECV), false) {
        return Err(io::ErrorKind::Unsupported.into());
    }
    let deadline = Instant::now() + tick;
    let mut others = Vec::new();
    let (mut got, mut cancelled, mut cancel_done) = (None, false, false);
    // The receive's buffer is the caller's: return only once its completion is reaped (and
    // that of its cancellation, which must not meet the next receive).
    while got.is_none() || (cancelled && !cancel_done) {
        let left = deadline.saturating_duration_since(Instant::now());
        turn(if cancelled { PARK } else { left }, &mut others);
        for &(ud, res) in &others {
            match ud {
                RECV => got = Some(res),
                _ => cancel_done = true,
            }
        }
        others.clear();
        if got.is_none() && !cancelled && Instant::now() >= deadline {
            push(
                opcode::AsyncCancel::new(RECV).build().user_data(CANCEL),
                false,
            );
            cancelled = true;
        }
    }
    match got.unwrap_or(-libc::ECANCELED) {
        n if n >= 0 => Ok(n as usize),
        e if -e == libc::ECANCELED || -e == libc::EINTR || -e == libc::EAGAIN => {
            Err(io::ErrorKind::WouldBlock.into())
        }
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

    /// A ring on this thread whose pieces' completions are recorded (data, result).
    fn ring() -> Option<Arc<(AtomicU64, AtomicI64)>> {
        probe().ok()?; // no io_uring here: the server refuses --aio io_uring
        let seen = Arc::new((AtomicU64::new(0), AtomicI64::new(0)));
        let s = seen.clone();
        install(Arc::new(move |d, r| {
            s.0.store(d, Ordering::Relaxed);
            s.1.store(r.into(), Ordering::Relaxed);
        }))
        .ok()?;
        Some(seen)
    }

    #[test]
    fn a_receive_returns_the_bytes_the_peer_sent_and_zero_once_it_closed() {
        let Some(_) = ring() else { return };
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"request").unwrap();
        let mut buf = [0u8; 16];
        let n = recv(a.as_raw_fd(), &mut buf, Duration::from_secs(5)).unwrap();
        assert_eq!(&buf[..n], b"request");
        drop(b);
        assert_eq!(
            recv(a.as_raw_fd(), &mut buf, Duration::from_secs(5)).unwrap(),
            0
        );
        uninstall();
        assert!(!active());
    }

    #[test]
    fn a_receive_with_nothing_to_read_is_cancelled_after_its_tick_and_would_block() {
        let Some(_) = ring() else { return };
        let (a, _b) = UnixStream::pair().unwrap();
        let mut buf = [0u8; 16];
        let e = recv(a.as_raw_fd(), &mut buf, Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        uninstall();
    }

    #[test]
    fn a_queued_sendmsg_reaches_the_peer_and_completes_with_its_byte_count() {
        let Some(seen) = ring() else { return };
        let (a, mut b) = UnixStream::pair().unwrap();
        let (h, p) = (*b"head", *b"payload");
        let mut iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            },
        ];
        // SAFETY: an all-zero msghdr is an empty message; it and iov outlive the completion.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        assert!(push_sendmsg(
            a.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT as u32,
            16
        ));
        while busy() {
            assert!(park());
        }
        assert_eq!(seen.0.load(Ordering::Relaxed), 16);
        assert_eq!(seen.1.load(Ordering::Relaxed), 11);
        let mut got = [0u8; 11];
        std::io::Read::read_exact(&mut b, &mut got).unwrap();
        assert_eq!(&got, b"headpayload");
        uninstall();
    }

    #[test]
    fn a_sendmsg_larger_than_the_socket_takes_completes_at_once_with_the_prefix_that_fit() {
        let Some(seen) = ring() else { return };
        let (a, mut b) = UnixStream::pair().unwrap();
        let small: libc::c_int = 64 << 10;
        // SAFETY: setsockopt reads one c_int from the pointer.
        let r = unsafe {
            libc::setsockopt(
                a.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                &small as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        let data: Vec<u8> = (0..4usize << 20).map(|i| (i % 251) as u8).collect();
        let mut iov = [libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        }];
        // SAFETY: an all-zero msghdr is an empty message; it and iov outlive the completion.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 1;
        let flags = (libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) as u32;
        assert!(push_sendmsg(a.as_raw_fd(), &msg, flags, 24));
        // Nobody reads: a blocking send would never complete.
        while busy() {
            assert!(park());
        }
        assert_eq!(seen.0.load(Ordering::Relaxed), 24);
        let n = seen.1.load(Ordering::Relaxed);
        assert!(n > 0 && (n as usize) < data.len(), "{n}");
        // The peer gets exactly the first n bytes, nothing after them.
        let mut got = vec![0u8; n as usize];
        std::io::Read::read_exact(&mut b, &mut got).unwrap();
        assert!(got == data[..n as usize], "not the prefix");
        drop(a);
        let mut tail = Vec::new();
        std::io::Read::read_to_end(&mut b, &mut tail).unwrap();
        assert!(tail.is_empty());
        uninstall();
    }

    #[test]
    fn a_piece_completes_through_done_with_its_data_and_the_file_bytes() {
        let Some(seen) = ring() else { return };
        let dir = std::env::temp_dir().join(format!("vmio-uring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"hello, ring")
            .unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 11];
        assert!(push_rw(false, f.as_raw_fd(), buf.as_mut_ptr(), 11, 0, 8));
        assert!(busy());
        while busy() {
            assert!(park());
        }
        assert_eq!(seen.0.load(Ordering::Relaxed), 8);
        assert_eq!(seen.1.load(Ordering::Relaxed), 11);
        assert_eq!(&buf, b"hello, ring");
        assert!(!park(), "nothing in the ring: the caller sleeps");
        uninstall();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
