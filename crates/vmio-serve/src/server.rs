//! Listeners, connections, bounds and shutdown.
//!
//! # Design
//!
//! One thread accepts on a Unix socket (the default) or on TCP bound to 127.0.0.1. Each
//! admitted connection gets a reader thread that runs the handshake and then reads requests
//! and submits them to the [`Dispatcher`] without waiting for their completion. The thread
//! that finishes a request (an I/O worker) sends its reply itself, with the other replies
//! ready by then (headers and payloads in one `sendmsg`), but never blocks on the socket
//! (`MSG_DONTWAIT`): when the socket is full, the rest goes to the connection's writer
//! thread (started after the handshake), which waits for the client ([`ConnOut`],
//! [`writer`]). So a client that stops reading its replies only stalls its own writer, and a
//! reply that fits in the socket costs no hand-off between threads. Unix-socket connections
//! ask for a 4 MiB send buffer ([`UNIX_SNDBUF_BYTES`]) so that READ replies of up to a few
//! MiB fit.
//!
//! Two threads per connection stay, because every resource they cost is bounded and the
//! blocking `read` path is what keeps vmio ahead of qemu-nbd in `vmio bench serve`:
//! at most `max_connections` connections are admitted (default 256, so at most 2 x 256
//! connection threads with 256 KiB stacks, plus the I/O workers, the accept, refuser, timer,
//! signal and statistics threads), each holds one descriptor (reader, writer and the
//! registry share it; with `--aio io_uring` its ring is a second one), and what a connection may make the server hold is bounded by:
//!
//! - requests in flight: [`MAX_INFLIGHT`] per connection;
//! - payload bytes in flight ([`crate::limits::Budget`]): `max_conn_payload_bytes` per
//!   connection (default 64 MiB) and `max_total_payload_bytes` in all (default 1 GiB).
//!   Budget is taken *before* a READ or WRITE buffer is allocated and given back when its
//!   reply has been sent; a reader without budget stops reading its connection
//!   (backpressure). A WRITE that declares 32 MiB and sends one byte holds its budget, no
//!   more, until the idle timeout. Recycled free buffers are capped
//!   ([`crate::export::POOL_MAX_BYTES`]). So the payload memory of the process stays below
//!   the total budget plus the pool cap, whatever the clients do.
//! - time: the handshake must finish within `handshake_timeout` (default 10 s, as qemu-nbd's
//!   `--handshake-limit`), or the connection is closed; in transmission, a connection that
//!   moves no byte in either direction for `idle_timeout` (default 300 s; 0: never) while
//!   the server waits on the client — for the rest of a request or its payload, or for the
//!   client to take its replies — is closed and its budget given back. A connection with
//!   nothing in flight and no request begun is never closed for idleness: it is a guest whose
//!   disk is idle (QEMU's NBD client does not reconnect by default), and holds no budget. Sockets carry 1 s `SO_RCVTIMEO`/`SO_SNDTIMEO` ticks so that
//!   blocked reads and writes notice these deadlines.
//!
//! With `--aio io_uring` the reader receives through an io_uring of its own
//! ([`crate::uring`]), which also carries the disk's O_DIRECT pieces it dispatches and the
//! replies it sends ([`RingSend`], a `SENDMSG` with `MSG_DONTWAIT`: what the full socket
//! does not take goes to the writer thread, as above): while it waits for its client it
//! completes them, so a request wakes no other server thread and costs one `io_uring_enter`. It never sleeps elsewhere while its ring holds
//! pieces (waiting for budget, or for the last replies, it runs the ring instead), and it
//! closes the ring only once the pieces in it have completed.
//!
//! Who gets a slot when the table is full is [`crate::admission`]'s policy: at most
//! `max_connections_per_peer` connections of one uid (Unix socket) or address (TCP), the
//! last slot kept for a peer holding none, and a connection that finished its handshake and
//! never sent a request is closed (the one unused longest) to admit a newcomer; one that has
//! sent a request is never closed for idleness. The accept thread decides, under the
//! registry's lock, from each connection's peer and [`crate::admission::Phase`].
//!
//! A connection the policy refuses is refused politely without a thread of its own: a
//! single refuser thread polls up to [`REFUSING_MAX`] refused sockets at once (more are
//! closed at once), sends the greeting, answers each option with `NBD_REP_ERR_POLICY` and
//! "too many connections (limit N; --max-connections)" (`NBD_OPT_ABORT` with an ACK,
//! `NBD_OPT_EXPORT_NAME`, which cannot carry an error, by closing) and closes it after
//! [`REFUSE_WITHIN`] at the latest. (NBD protocol, "Option reply types": `NBD_REP_ERR_POLICY`
//! "the server is configured to not allow this option, or the number of connections has
//! reached a limit".)
//!
//! Nothing a client does stops the server: a protocol violation closes only that connection;
//! failing to start a connection's thread or to allocate a request's buffer refuses that
//! connection (closed) or request (`NBD_ENOMEM`) and the server goes on; client misbehaviour
//! is logged through a [`RateLog`] (<= 10 lines/s) with client strings truncated and escaped
//! ([`crate::limits::shown`]). Only an internal failure (the accept thread dying) ends the
//! server with an error: [`Server::wait`] returns it, after the same orderly shutdown.
//!
//! Shutdown (SIGINT/SIGTERM or [`Server::shutdown`]): stop accepting, stop reading requests
//! (`shutdown(SHUT_RD)` on every connection), let the requests in flight complete against
//! the files and reply. Connections still open after `shutdown_grace` (default 10 s; a
//! second signal: at once) are closed with `shutdown(SHUT_RDWR)`, so that writers blocked on
//! clients that do not read fail; their requests still complete. Then every export is
//! flushed (its cache mode decides what a flush does), the socket removed, and the
//! statistics written and returned. SIGUSR1 writes the statistics file and prints the
//! statistics on stderr.
//!
//! Sources: the NBD protocol specification (`doc/proto.md` of NetworkBlockDevice/nbd:
//! "Option reply types", "Terminating the transmission phase"), qemu-nbd(8)
//! (`--handshake-limit`, default 10 s).

use crate::admission::{self, Decision, Peer, Phase, Policy, Refusal, Seat};
use crate::dispatch::{Dispatcher, ReplySink, Request};
use crate::export::{self, AlignedBuf, Export, ExportError};
use crate::handoff::Queue;
use crate::limits::{lock, shown, Budget, RateLog};
use crate::options::{Aio, Config, Listen, OptionError};
use crate::proto::handshake::{self as hs, ClientOption};
use crate::proto::transmission::{self as tx, Command, REQUEST_BYTES};
use crate::proto::{self, ProtoError};
use crate::stats::{self, Snapshot};
use crate::trace::Tracer;
use std::collections::HashMap;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use vmio_core::stack::{Stack, StackError};

/// Requests one connection may have in flight before its reader waits.
pub const MAX_INFLIGHT: usize = 256;
/// Refused connections handled at once by the refuser thread; more are closed at once.
pub const REFUSING_MAX: usize = 64;
/// A refused connection is closed after this long at the latest.
pub const REFUSE_WITHIN: Duration = Duration::from_secs(2);
/// Stack size of connection threads.
const CONN_STACK_BYTES: usize = 256 << 10;
/// Period at which blocked socket reads and writes wake up to check deadlines.
const TICK: Duration = Duration::from_secs(1);

/// Transmission flags of every export.
pub const TRANSMISSION_FLAGS: u16 = proto::FLAG_HAS_FLAGS
    | proto::FLAG_SEND_FLUSH
    | proto::FLAG_SEND_FUA
    | proto::FLAG_SEND_TRIM
    | proto::FLAG_SEND_WRITE_ZEROES
    | proto::FLAG_CAN_MULTI_CONN;

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("{path}: {source}")]
    ReadStack { path: String, source: io::Error },
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("{addr}: cannot listen: {source}")]
    Listen { addr: String, source: io::Error },
    #[error("{0}: is in use by a running server (or is not a socket); choose another --socket")]
    SocketInUse(String),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Option(#[from] OptionError),
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    #[error("the server stopped on an internal error: {0}")]
    Fatal(String),
}

/// What the clients make the server hold now ([`Server::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Connections admitted and not yet closed.
    pub connections: usize,
    /// Connections refused (limit reached or no thread) since the start.
    pub refused: u64,
    /// Connections closed to admit another (finished the handshake, never sent a request)
    /// since the start.
    pub evicted: u64,
    /// Payload bytes held now, and the most ever held.
    pub payload_bytes: u64,
    pub payload_peak_bytes: u64,
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn shutdown(&self, how: std::net::Shutdown) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
        }
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }
    fn raw_fd(&self) -> i32 {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => (&*s).read(b),
            Stream::Tcp(s) => (&*s).read(b),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => (&*s).write(b),
            Stream::Tcp(s) => (&*s).write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => (&*s).write_vectored(b),
            Stream::Tcp(s) => (&*s).write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// One admitted connection: its socket (shared by its reader, its writer and the registry),
/// when it last moved a byte, who it is and how far it got (for [`crate::admission`]).
struct Conn {
    id: u64,
    stream: Stream,
    epoch: Instant,
    last_ms: AtomicU64,
    peer: Peer,
    phase: Phase,
    /// When the handshake finished (ms since the epoch).
    ready_ms: AtomicU64,
}

impl Conn {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.last_ms.load(Ordering::Relaxed)),
        )
    }
}

/// The reader's view of a connection, noting activity; with `ring`, it receives through the
/// thread's io_uring ([`crate::uring`]), completing the disk's pieces while it waits.
struct ConnRead {
    conn: Arc<Conn>,
    ring: bool,
}

impl Read for ConnRead {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = if self.ring {
            crate::uring::recv(self.conn.stream.raw_fd(), b, TICK)?
        } else {
            (&self.conn.stream).read(b)?
        };
        let c = &self.conn;
        if n > 0 {
            c.touch();
        }
        Ok(n)
    }
}

/// The handshake's view of a connection: every read and write must finish by `deadline`.
struct Timed<'a> {
    s: &'a Stream,
    deadline: Instant,
}

impl Timed<'_> {
    fn left(&self) -> io::Result<Duration> {
        let d = self.deadline.saturating_duration_since(Instant::now());
        if d.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "handshake timeout"));
        }
        Ok(d)
    }
    fn map(e: io::Error) -> io::Error {
        if timed_out(&e) {
            io::Error::new(io::ErrorKind::TimedOut, "handshake timeout")
        } else {
            e
        }
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.s.set_read_timeout(Some(self.left()?))?;
        let mut s = self.s;
        s.read(b).map_err(Self::map)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.s.set_write_timeout(Some(self.left()?))?;
        let mut s = self.s;
        s.write(b).map_err(Self::map)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reply ready to be sent.
enum Out {
    Done(Arc<Request>),
    Error { errno: u32, cookie: u64 },
}

/// What a connection's writer thread is handed.
enum Handoff {
    /// Replies of which the first `sent` bytes are on the socket, which was full.
    Rest {
        batch: Vec<Out>,
        sent: usize,
    },
    Stop,
}

/// Replies ready and not yet being written, and whether a thread is writing this
/// connection's replies now (the others only add theirs to `ready`).
#[derive(Default)]
struct Pending {
    ready: Vec<Out>,
    flushing: bool,
}

/// What a connection holds: requests in flight, payload bytes, and how much of those bytes
/// was drawn from the shared pool of the [`Budget`].
#[derive(Default)]
struct Held {
    requests: usize,
    bytes: u64,
    charged: u64,
    /// Threads waiting on `drained` (the reader, for budget or for the last replies).
    waiting: usize,
}

/// The reply side of a connection. The thread that finishes a request (an I/O worker, or the
/// reader for an error) sends its reply itself when no other thread is sending this
/// connection's replies, without blocking (`MSG_DONTWAIT`), together with the replies that
/// became ready meanwhile; when the socket is full, what is left goes to the connection's
/// writer thread, which blocks on the client, so that a client that does not read its
/// replies never blocks a worker (pseudo-code: [`writer`]).
struct ConnOut {
    conn: Arc<Conn>,
    pending: Mutex<Pending>,
    writer: Queue<Handoff>,
    held: Mutex<Held>,
    drained: Condvar,
    sh: Arc<Shared>,
    /// The client is gone, or idle while the server waited on it: replies are dropped.
    broken: AtomicBool,
    /// Itself, for a send through a thread's io_uring ([`RingSend`]), which holds it.
    me: std::sync::Weak<ConnOut>,
}

/// At most this many buffers per `sendmsg`/`writev` (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Send buffer asked for on Unix-socket connections: Linux's ceiling for its TCP send-buffer
/// auto-tuning (`net.ipv4.tcp_wmem`, third value, 4 MiB by default;
/// Documentation/networking/ip-sysctl.rst). Unix sockets are not auto-tuned: they keep
/// `net.core.wmem_default` (208 KiB), and `unix_stream_sendmsg` (net/unix/af_unix.c) blocks
/// once that much is queued, so a 1 MiB READ reply used to fill the socket five times over,
/// each time waiting for the client to read. The kernel caps the value at
/// `net.core.wmem_max` (socket(7), SO_SNDBUF). TCP connections keep their auto-tuning.
const UNIX_SNDBUF_BYTES: libc::c_int = 4 << 20;

impl ConnOut {
    fn aborted(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.sh.shutdown.load(Ordering::Relaxed)
    }

    /// Take a request slot and `bytes` of payload budget, waiting while the connection holds
    /// too much (its own replies must drain) or the shared pool is exhausted. False (nothing
    /// taken) when the connection or the server is going away.
    fn acquire(&self, bytes: u64) -> bool {
        let budget = &self.sh.budget;
        let need = {
            let mut h = lock(&self.held);
            while h.requests >= MAX_INFLIGHT || h.bytes + bytes > budget.conn_max {
                if bytes > 0 && self.aborted() {
                    return false;
                }
                if crate::uring::busy() {
                    // Pieces in this thread's ring: complete them while waiting.
                    drop(h);
                    crate::uring::park();
                    h = lock(&self.held);
                    continue;
                }
                h.waiting += 1;
                h = self
                    .drained
                    .wait_timeout(h, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                h.waiting -= 1;
            }
            h.requests += 1;
            budget.over(h.bytes + bytes).saturating_sub(h.charged)
        };
        let abort = || self.aborted();
        if bytes > 0 && !budget.take_shared(need, &abort) {
            self.release(1, 0);
            return false;
        }
        let mut h = lock(&self.held);
        h.bytes += bytes;
        h.charged += need;
        budget.note_held(bytes, true);
        true
    }

    /// `k` replies sent (or dropped) that held `bytes` of payload.
    fn release(&self, k: usize, bytes: u64) {
        let budget = &self.sh.budget;
        let (give, waiting) = {
            let mut h = lock(&self.held);
            h.requests -= k.min(h.requests);
            let bytes = bytes.min(h.bytes);
            h.bytes -= bytes;
            budget.note_held(bytes, false);
            let keep = budget.over(h.bytes);
            let give = h.charged.saturating_sub(keep);
            h.charged -= give;
            (give, h.waiting > 0)
        };
        budget.give_shared(give);
        // A waiter re-checks its condition under the lock after our update, so one that
        // starts waiting after this point has seen it.
        if waiting {
            self.drained.notify_all();
        }
    }

    /// Wait until every request in flight has been replied to (or dropped).
    fn drain(&self) {
        let mut h = lock(&self.held);
        while h.requests > 0 {
            if crate::uring::busy() {
                drop(h);
                crate::uring::park();
                h = lock(&self.held);
                continue;
            }
            h.waiting += 1;
            h = self.drained.wait(h).unwrap_or_else(|e| e.into_inner());
            h.waiting -= 1;
        }
    }

    fn error(&self, errno: u32, cookie: u64) {
        self.acquire(0);
        self.post(Out::Error { errno, cookie });
    }

    /// Queue reply `o`; send it, and whatever else is ready, unless another thread is sending
    /// (it will send `o` too).
    fn post(&self, o: Out) {
        let batch = {
            let mut p = lock(&self.pending);
            p.ready.push(o);
            if p.flushing {
                return;
            }
            p.flushing = true;
            std::mem::take(&mut p.ready)
        };
        self.send_from(batch);
    }

    /// Send `batch` as the connection's one sender, then the replies that became ready
    /// meanwhile: through this thread's io_uring when it has one ([`RingSend`]), else by
    /// `sendmsg` now.
    fn send_from(&self, mut batch: Vec<Out>) {
        loop {
            if crate::uring::active() && !self.broken.load(Ordering::Relaxed) {
                if let Some(me) = self.me.upgrade() {
                    match RingSend::start(me, batch) {
                        Ok(()) => return,
                        Err(b) => batch = b,
                    }
                }
            }
            if let Some(sent) = self.send_now(&batch) {
                self.writer.push(Handoff::Rest { batch, sent });
                return;
            }
            if !self.next_batch(&mut batch) {
                return;
            }
        }
    }

    /// `batch` is sent: release it and take the replies that became ready meanwhile into it;
    /// false (no longer the sender) when there are none.
    fn next_batch(&self, batch: &mut Vec<Out>) -> bool {
        self.sent(batch);
        let mut p = lock(&self.pending);
        if p.ready.is_empty() {
            p.flushing = false;
            return false;
        }
        std::mem::swap(batch, &mut p.ready);
        true
    }

    /// Send `batch` without blocking: None when all of it is sent (or dropped, the client
    /// being gone), else the bytes sent before the socket was full.
    fn send_now(&self, batch: &[Out]) -> Option<usize> {
        if self.broken.load(Ordering::Relaxed) {
            return None;
        }
        let hs = headers(batch);
        let mut slices = wire(batch, &hs);
        let mut bufs: &mut [IoSlice] = &mut slices;
        let mut sent = 0;
        while !bufs.is_empty() {
            let k = bufs.len().min(IOV_MAX);
            match send_nowait(self.conn.stream.raw_fd(), &bufs[..k]) {
                Ok(n) if n > 0 => {
                    self.conn.touch();
                    sent += n;
                    IoSlice::advance_slices(&mut bufs, n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(sent),
                Ok(_) | Err(_) => {
                    self.fail();
                    return None;
                }
            }
        }
        None
    }

    /// Send `batch` from byte `skip` on, blocking (the writer thread): a client that takes
    /// nothing for the idle timeout is closed.
    fn send_blocking(&self, batch: &[Out], skip: usize) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let (conn, idle) = (&self.conn, self.sh.idle_timeout);
        let hs = headers(batch);
        let mut slices = wire(batch, &hs);
        let mut bufs: &mut [IoSlice] = &mut slices;
        IoSlice::advance_slices(&mut bufs, skip);
        while !bufs.is_empty() {
            let k = bufs.len().min(IOV_MAX);
            let mut s = &conn.stream;
            match s.write_vectored(&bufs[..k]) {
                Ok(n) if n > 0 => {
                    conn.touch();
                    IoSlice::advance_slices(&mut bufs, n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if timed_out(&e) && (idle.is_zero() || conn.idle_for() < idle) => {}
                Err(e) => {
                    if timed_out(&e) {
                        self.sh.log.log(|| {
                            format!(
                                "connection {}: did not read its replies for {:?}; closed",
                                conn.id, idle
                            )
                        });
                    }
                    return self.fail();
                }
                Ok(_) => return self.fail(),
            }
        }
    }

    /// The client is gone or idle: drop the replies from now on (so that the reader
    /// drains), and wake the reader.
    fn fail(&self) {
        self.broken.store(true, Ordering::Relaxed);
        self.conn.stream.shutdown(std::net::Shutdown::Both);
    }

    /// The replies of `batch` are sent (or dropped): free them, give their budget back.
    fn sent(&self, batch: &mut Vec<Out>) {
        let held = batch
            .iter()
            .map(|o| match o {
                Out::Done(r) => r.buf.len() as u64,
                Out::Error { .. } => 0,
            })
            .sum();
        let n = batch.len();
        batch.clear();
        self.release(n, held);
    }
}

impl ReplySink for ConnOut {
    fn complete(&self, req: Arc<Request>) {
        self.post(Out::Done(req));
    }
}

/// A batch of replies sent by a `SENDMSG` of the io_uring of the thread that became the
/// connection's sender (`--aio io_uring`): it goes out with that thread's next
/// `io_uring_enter`, the one that also submits the turn's pieces and waits, instead of a
/// `sendmsg` of its own. Non-blocking as [`ConnOut::send_now`] (`MSG_DONTWAIT`): what the full
/// socket did not take goes to the writer thread; the replies that became ready meanwhile
/// follow when it completes ([`ring_sent`]).
struct RingSend {
    out: Arc<ConnOut>,
    batch: Vec<Out>,
    /// Where the iovecs point (with the payloads of `batch`).
    _headers: Vec<[u8; 16]>,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
}

impl RingSend {
    /// Queue `batch` on this thread's ring; the batch back when it cannot be (more buffers
    /// than one `sendmsg` takes, or no ring).
    fn start(out: Arc<ConnOut>, batch: Vec<Out>) -> Result<(), Vec<Out>> {
        let headers = headers(&batch);
        let iov: Vec<libc::iovec> = wire(&batch, &headers)
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        if iov.len() > IOV_MAX {
            return Err(batch);
        }
        let fd = out.conn.stream.raw_fd();
        // The headers' and payloads' bytes are on the heap: moving their owners into the box
        // keeps the iovecs' addresses.
        let mut s = Box::new(RingSend {
            out,
            batch,
            _headers: headers,
            iov,
            // SAFETY: an all-zero msghdr is a valid empty message.
            msg: unsafe { std::mem::zeroed() },
        });
        s.msg.msg_iov = s.iov.as_mut_ptr();
        s.msg.msg_iovlen = s.iov.len() as _;
        let p = Box::into_raw(s);
        let flags = (libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) as u32;
        // SAFETY: the box lives until ring_sent takes it back; its msghdr points into it.
        let msg = unsafe { std::ptr::addr_of!((*p).msg) };
        if crate::uring::push_sendmsg(fd, msg, flags, p as u64 | SEND_TAG) {
            return Ok(());
        }
        // SAFETY: not queued: the box is ours again.
        let s = unsafe { Box::from_raw(p) };
        Err(s.batch)
    }
}

/// The low bit of a [`RingSend`]'s `user_data` (its box's address is aligned; the pieces'
/// have it clear).
const SEND_TAG: u64 = 1;

/// What a thread's ring completes: a [`RingSend`] (tagged) or a piece of the dispatcher.
fn ring_done(d: &Dispatcher, data: u64, res: i32) {
    if data & SEND_TAG != 0 {
        // SAFETY: the address of the box RingSend::start queued, reaped once.
        ring_sent(
            *unsafe { Box::from_raw((data & !SEND_TAG) as *mut RingSend) },
            res,
        );
    } else {
        d.ring_done(data, res);
    }
}

/// A [`RingSend`] completed with `res` (bytes sent, or -errno). All sent, or the client gone:
/// release the batch and send what became ready; the socket full: the rest to the writer.
fn ring_sent(s: RingSend, res: i32) {
    let total: usize = s.iov.iter().map(|v| v.iov_len).sum();
    let RingSend { out, mut batch, .. } = s;
    if res > 0 {
        out.conn.touch();
    }
    if res >= 0 && res as usize >= total {
        // All of it.
    } else if res > 0 || res == -libc::EAGAIN || res == -libc::EINTR {
        let sent = res.max(0) as usize;
        return out.writer.push(Handoff::Rest { batch, sent });
    } else {
        // Nothing of a non-empty batch, or an error: the client is gone.
        out.fail();
    }
    if out.next_batch(&mut batch) {
        out.send_from(batch);
    }
}

/// The 16-byte simple-reply header of each reply of `batch`.
fn headers(batch: &[Out]) -> Vec<[u8; 16]> {
    batch
        .iter()
        .map(|o| match o {
            Out::Done(r) => tx::simple_reply(r.error(), r.cookie),
            Out::Error { errno, cookie } => tx::simple_reply(*errno, *cookie),
        })
        .collect()
}

/// `batch` on the wire: each reply's header, then a successful READ's data.
fn wire<'a>(batch: &'a [Out], headers: &'a [[u8; 16]]) -> Vec<IoSlice<'a>> {
    let mut v = Vec::with_capacity(2 * batch.len());
    for (o, h) in batch.iter().zip(headers) {
        v.push(IoSlice::new(h));
        if let Out::Done(r) = o {
            let p = r.payload();
            if !p.is_empty() {
                v.push(IoSlice::new(p));
            }
        }
    }
    v
}

/// `sendmsg(fd, bufs, MSG_DONTWAIT | MSG_NOSIGNAL)`: what fits in the socket now.
fn send_nowait(fd: i32, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: IoSlice is ABI-compatible with struct iovec on Unix (std's documentation);
    // the message names no address and no control data, and sendmsg does not write to the
    // buffers.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// The connection's writer thread: it sends what the thread that found the socket full
/// left, then whatever became ready meanwhile, blocking on the client, until nothing is
/// left; then the next thread that finishes a request sends again (see [`ConnOut`]).
///
/// ```text
/// post(reply):   lock; ready += reply; if flushing: return   # the sender takes it along
///                flushing = true; batch = take(ready); unlock
///                loop: sendmsg(batch, MSG_DONTWAIT) -> all sent: release budget
///                                                   -> socket full: hand the rest here; return
///                      lock; if ready empty: flushing = false; return
///                      batch = take(ready)
/// writer:        for each hand-off: send the rest blocking; release; drain ready the same way;
///                flushing = false
/// ```
///
/// nbdkit's server (server/protocol.c, `protocol_recv_request_send_reply`) has the thread
/// that ran a request send its reply under the connection's write lock, blocking; here the
/// send never blocks a worker, and replies that become ready while one is sent go out
/// together in the next `sendmsg`.
fn writer(out: Arc<ConnOut>) {
    loop {
        let (mut batch, mut skip) = match out.writer.pop() {
            Handoff::Stop => return,
            Handoff::Rest { batch, sent } => (batch, sent),
        };
        loop {
            out.send_blocking(&batch, skip);
            if !out.next_batch(&mut batch) {
                break;
            }
            skip = 0;
        }
    }
}

struct Shared {
    exports: Vec<Arc<Export>>,
    dispatcher: Arc<Dispatcher>,
    budget: Budget,
    log: RateLog,
    max_connections: usize,
    policy: Policy,
    handshake_timeout: Duration,
    idle_timeout: Duration,
    shutdown_grace: Duration,
    shutdown: AtomicBool,
    shutdown_at: Mutex<Option<Instant>>,
    forced: AtomicBool,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_conn: AtomicU64,
    refused: AtomicU64,
    evicted: AtomicU64,
    epoch: Instant,
    trace: Option<Tracer>,
}

/// The largest stack file read (as vmio's Python reader, `vmio.sim.MAX_INPUT_BYTES`).
pub const MAX_STACK_BYTES: u64 = 16 << 20;

/// Read a stack file: a regular file (a FIFO is opened without waiting for a writer and
/// refused, as is a device such as /dev/zero) of at most [`MAX_STACK_BYTES`], UTF-8.
fn read_stack(path: &Path) -> Result<String, ServeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |msg: String| ServeError::ReadStack {
        path: path.display().to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, msg),
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| ServeError::ReadStack {
            path: path.display().to_string(),
            source: e,
        })?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if meta.is_dir() {
        return Err(err("is a directory, not a file".into()));
    }
    if !meta.is_file() {
        return Err(err(
            "is not a regular file (a device, FIFO or socket)".into()
        ));
    }
    if meta.len() > MAX_STACK_BYTES {
        return Err(err(format!(
            "is {} bytes; the limit is {MAX_STACK_BYTES} (16 MiB)",
            meta.len()
        )));
    }
    let mut data = Vec::new();
    f.take(MAX_STACK_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| err(e.to_string()))?;
    if data.len() as u64 > MAX_STACK_BYTES {
        return Err(err(format!(
            "is over the limit of {MAX_STACK_BYTES} bytes (16 MiB)"
        )));
    }
    String::from_utf8(data).map_err(|e| {
        err(format!(
            "is not UTF-8 text (byte offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Parse the stack file and open its exports (also used to check a stack without serving).
pub fn load(stack_path: &Path, create: bool) -> Result<(Stack, Vec<Arc<Export>>), ServeError> {
    let text = read_stack(stack_path)?;
    let mut stack = Stack::from_toml(&text, &stack_path.display().to_string())?;
    let dir = stack_path.parent().unwrap_or(Path::new("."));
    let exports = export::open_exports(&mut stack, dir, create)?;
    Ok((stack, exports.into_iter().map(Arc::new).collect()))
}

fn snapshots(exports: &[Arc<Export>]) -> Vec<Snapshot> {
    exports
        .iter()
        .map(|e| Snapshot {
            pdc: e.pdc.as_ref().map(|p| p.snapshot()),
            throttle: e.throttle.map(|_| crate::stats::ThrottleSnapshot {
                delayed: e
                    .stats
                    .throttle_delayed
                    .load(std::sync::atomic::Ordering::Relaxed),
                throttled_ns: e
                    .stats
                    .throttled_ns
                    .load(std::sync::atomic::Ordering::Relaxed),
            }),
            ..e.stats.snapshot(&e.name)
        })
        .collect()
}

fn write_stats(path: &Path, exports: &[Arc<Export>]) {
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_string_pretty(&snapshots(exports)).unwrap_or_default();
    if std::fs::write(&tmp, body + "\n").is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

fn bind(listen: &Listen) -> Result<Listener, ServeError> {
    match listen {
        Listen::Unix(p) => {
            let shown = p.display().to_string();
            if p.exists() {
                // A leftover socket of a dead server is replaced; a live one is not.
                let is_socket = std::fs::symlink_metadata(p)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
                if !is_socket || UnixStream::connect(p).is_ok() {
                    return Err(ServeError::SocketInUse(shown));
                }
                let _ = std::fs::remove_file(p);
            }
            let l = UnixListener::bind(p).map_err(|e| ServeError::Listen {
                addr: shown,
                source: e,
            })?;
            Ok(Listener::Unix(l, p.clone()))
        }
        Listen::Tcp(port) => {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).map_err(|e| {
                ServeError::Listen {
                    addr: format!("127.0.0.1:{port}"),
                    source: e,
                }
            })?;
            Ok(Listener::Tcp(l))
        }
    }
}

/// A running server (see [`start`]); [`Server::wait`] blocks until it has shut down.
pub struct Server {
    shared: Arc<Shared>,
    listener_fd: i32,
    /// Where it listens: a socket path or `127.0.0.1:PORT`.
    pub address: String,
    accept: Option<std::thread::JoinHandle<Accepted>>,
    refuser: Option<std::thread::JoinHandle<()>>,
    socket_path: Option<PathBuf>,
    stats_file: Option<PathBuf>,
    stats_thread: Option<std::thread::JoinHandle<()>>,
    signals: Option<signal_hook::iterator::Handle>,
}

/// What the accept thread leaves: the connection threads, and why it ended early.
struct Accepted {
    threads: Vec<std::thread::JoinHandle<()>>,
    fatal: Option<String>,
}

fn spawn<T: Send + 'static>(
    what: &'static str,
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<std::thread::JoinHandle<T>, ServeError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|source| ServeError::Thread { what, source })
}

/// Open the exports, listen, and serve in background threads.
pub fn start(cfg: &Config) -> Result<Server, ServeError> {
    cfg.check()?;
    if cfg.aio == Aio::IoUring {
        if let Err(e) = crate::uring::probe() {
            return Err(ServeError::Usage(format!(
                "--aio io_uring: this kernel gives no io_uring ({e}); use --aio native"
            )));
        }
    }
    let (stack, exports) = load(&cfg.stack, cfg.create)?;
    // The handlers are installed before the socket listens: a client that sees the socket
    // may signal the server at once, and a signal that arrives before the signal thread runs
    // waits for it (instead of killing the process by the default action).
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let sigs = if cfg.signals {
        let s = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1]);
        Some(s.map_err(|e| ServeError::Usage(format!("cannot install signal handlers: {e}")))?)
    } else {
        None
    };
    let listener = bind(&cfg.listen)?;
    let epoch = Instant::now();
    let trace = match cfg
        .trace
        .as_ref()
        .map(|t| Tracer::open(t, epoch))
        .transpose()
    {
        Ok(t) => t,
        Err(e) => {
            if let Listener::Unix(_, p) = &listener {
                let _ = std::fs::remove_file(p);
            }
            return Err(e.into());
        }
    };
    // --read-ahead: exports opened with O_DIRECT (the others have the kernel's).
    let read_ahead: Vec<Option<(u64, u64)>> = exports
        .iter()
        .map(|e| {
            (cfg.read_ahead_bytes > 0 && e.real_io.o_direct)
                .then_some((cfg.read_ahead_bytes, e.size_bytes))
        })
        .collect();
    let dispatcher = Dispatcher::start(&stack, cfg.queue_depth, cfg.workers, &read_ahead, cfg.aio)
        .map_err(|source| ServeError::Thread {
            what: "I/O worker",
            source,
        })?;
    let shared = Arc::new(Shared {
        exports,
        dispatcher,
        budget: Budget::new(
            cfg.max_conn_payload_bytes,
            cfg.max_total_payload_bytes,
            cfg.max_connections,
        ),
        log: RateLog::new("vmio-serve"),
        max_connections: cfg.max_connections,
        policy: Policy::new(cfg.max_connections, cfg.max_connections_per_peer),
        handshake_timeout: cfg.handshake_timeout,
        idle_timeout: cfg.idle_timeout,
        shutdown_grace: cfg.shutdown_grace,
        shutdown: AtomicBool::new(false),
        shutdown_at: Mutex::new(None),
        forced: AtomicBool::new(false),
        conns: Mutex::new(HashMap::new()),
        next_conn: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        evicted: AtomicU64::new(0),
        epoch,
        trace,
    });
    let (listener_fd, address, socket_path) = match &listener {
        Listener::Unix(l, p) => (l.as_raw_fd(), p.display().to_string(), Some(p.clone())),
        Listener::Tcp(l) => (
            l.as_raw_fd(),
            l.local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "127.0.0.1".into()),
            None,
        ),
    };
    let fail = |e: ServeError, sh: &Arc<Shared>| {
        sh.dispatcher.stop();
        if let Some(t) = &sh.trace {
            t.finish();
        }
        if let Some(p) = &socket_path {
            let _ = std::fs::remove_file(p);
        }
        e
    };
    let (refuse_tx, refuse_rx) = crossbeam_channel::bounded(REFUSING_MAX);
    let refuser = spawn("refuser", "vmio-refuser".into(), move || refuser(refuse_rx))
        .map_err(|e| fail(e, &shared))?;
    let sh = shared.clone();
    let accept = spawn("accept", "vmio-accept".into(), move || {
        accept_loop(listener, sh, refuse_tx)
    })
    .map_err(|e| fail(e, &shared))?;
    let mut server = Server {
        shared,
        listener_fd,
        address,
        accept: Some(accept),
        refuser: Some(refuser),
        socket_path,
        stats_file: cfg.stats_file.clone(),
        stats_thread: None,
        signals: None,
    };
    if let Some(path) = cfg.stats_file.clone() {
        let sh = server.shared.clone();
        let t = spawn("statistics", "vmio-stats".into(), move || {
            while !sh.shutdown.load(Ordering::Relaxed) {
                write_stats(&path, &sh.exports);
                for _ in 0..10 {
                    if sh.shutdown.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        match t {
            Ok(t) => server.stats_thread = Some(t),
            Err(e) => {
                server.shutdown();
                let _ = server.wait();
                return Err(e);
            }
        }
    }
    if let Some(mut sigs) = sigs {
        let handle = sigs.handle();
        let sh = server.shared.clone();
        let fd = server.listener_fd;
        let stats_file = cfg.stats_file.clone();
        let t = spawn("signal", "vmio-signals".into(), move || {
            for s in sigs.forever() {
                if s == SIGUSR1 {
                    if let Some(p) = &stats_file {
                        write_stats(p, &sh.exports);
                    }
                    eprint!("{}", stats::text(&snapshots(&sh.exports)));
                } else if sh.shutdown.load(Ordering::SeqCst) {
                    // A second SIGINT/SIGTERM: no more grace.
                    force_close(&sh);
                } else {
                    begin_shutdown(&sh, fd);
                }
            }
        });
        if let Err(e) = t {
            server.shutdown();
            let _ = server.wait();
            return Err(e);
        }
        server.signals = Some(handle);
    }
    Ok(server)
}

fn begin_shutdown(sh: &Shared, listener_fd: i32) {
    if sh.shutdown.swap(true, Ordering::SeqCst) {
        return;
    }
    *lock(&sh.shutdown_at) = Some(Instant::now());
    // SAFETY: shutting down our own listening socket wakes the blocked accept().
    unsafe {
        libc::shutdown(listener_fd, libc::SHUT_RDWR);
    }
    for c in lock(&sh.conns).values() {
        c.stream.shutdown(std::net::Shutdown::Read);
    }
    sh.budget.wake_all();
}

/// Close every connection's socket in both directions: blocked writers fail, readers see
/// the end; requests in flight still complete against the files.
fn force_close(sh: &Shared) {
    if sh.forced.swap(true, Ordering::SeqCst) {
        return;
    }
    let conns = lock(&sh.conns);
    if !conns.is_empty() {
        eprintln!(
            "vmio-serve: closing {} connection(s) still open after the shutdown grace ({:?})",
            conns.len(),
            sh.shutdown_grace
        );
    }
    for c in conns.values() {
        c.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl Server {
    /// Ask the server to shut down (as SIGTERM does).
    pub fn shutdown(&self) {
        begin_shutdown(&self.shared, self.listener_fd);
    }

    /// What the clients make the server hold now.
    pub fn usage(&self) -> Usage {
        let (payload_bytes, payload_peak_bytes) = self.shared.budget.usage();
        Usage {
            connections: lock(&self.shared.conns).len(),
            refused: self.shared.refused.load(Ordering::Relaxed),
            evicted: self.shared.evicted.load(Ordering::Relaxed),
            payload_bytes,
            payload_peak_bytes,
        }
    }

    /// Serve until shut down; then finish in-flight requests (closing connections still open
    /// after the grace period), flush every export, remove the socket, and return the final
    /// statistics. An internal failure (the accept thread died) is returned as an error, after
    /// the same shutdown.
    pub fn wait(mut self) -> Result<Vec<Snapshot>, ServeError> {
        let accepted = match self.accept.take().map(|h| h.join()) {
            Some(Ok(a)) => a,
            Some(Err(_)) => Accepted {
                threads: Vec::new(),
                fatal: Some("the accept thread panicked".into()),
            },
            None => Accepted {
                threads: Vec::new(),
                fatal: None,
            },
        };
        let sh = self.shared.clone();
        if let Some(e) = &accepted.fatal {
            eprintln!("vmio-serve: error: {e}; shutting down");
        }
        begin_shutdown(&sh, self.listener_fd);
        let since = (*lock(&sh.shutdown_at)).unwrap_or_else(Instant::now);
        // Connections unregister when their thread ends (even by a panic).
        while !lock(&sh.conns).is_empty() || accepted.threads.iter().any(|t| !t.is_finished()) {
            if since.elapsed() >= sh.shutdown_grace {
                force_close(&sh);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for t in accepted.threads {
            let _ = t.join();
        }
        if let Some(h) = self.refuser.take() {
            let _ = h.join();
        }
        sh.dispatcher.stop();
        if let Some(t) = &sh.trace {
            t.finish();
        }
        for e in &sh.exports {
            if let Err(err) = e.flush() {
                eprintln!("vmio-serve: warning: flushing export '{}': {err}", e.name);
            }
        }
        if let Some(p) = &self.socket_path {
            let _ = std::fs::remove_file(p);
        }
        if let Some(h) = self.stats_thread.take() {
            let _ = h.join();
        }
        if let Some(p) = &self.stats_file {
            write_stats(p, &sh.exports);
        }
        if let Some(h) = self.signals.take() {
            h.close();
        }
        sh.log.flush();
        match accepted.fatal {
            Some(e) => Err(ServeError::Fatal(e)),
            None => Ok(snapshots(&sh.exports)),
        }
    }

    /// The startup line: `serving EXPORTS on ADDRESS`, and for each `cache = "pdc"` export
    /// whether its backings take RWF_DONTCACHE (the way unaligned bypassed writes go).
    pub fn banner(&self) -> String {
        let mut s = format!(
            "serving {} on {}",
            self.export_names().join(", "),
            self.address
        );
        for e in &self.shared.exports {
            if let Some(p) = &e.pdc {
                s += &format!(
                    "; {} is pdc, RWF_DONTCACHE {}",
                    e.name,
                    if p.dontcache {
                        "supported"
                    } else {
                        "not supported (unaligned bypassed writes: written back, then fadvise DONTNEED)"
                    }
                );
            }
        }
        let ra: Vec<&str> = self
            .shared
            .exports
            .iter()
            .filter(|e| self.shared.dispatcher.reads_ahead(e.index))
            .map(|e| e.name.as_str())
            .collect();
        if !ra.is_empty() {
            s += &format!("; read-ahead (O_DIRECT windows) on {}", ra.join(", "));
        }
        let engine = self.shared.dispatcher.engine();
        if engine != Aio::Native {
            s += &format!("; aio {}", engine.name());
        }
        s
    }

    pub fn export_names(&self) -> Vec<String> {
        self.shared.exports.iter().map(|e| e.name.clone()).collect()
    }

    /// Test hook: break the listening socket behind the accept thread's back, as an internal
    /// failure would (the server must then shut down and [`Server::wait`] report an error).
    #[doc(hidden)]
    pub fn break_listener_for_tests(&self) {
        // SAFETY: shutdown(2) of our own listening socket; the descriptor stays open.
        unsafe {
            libc::shutdown(self.listener_fd, libc::SHUT_RDWR);
        }
    }
}

/// Errors of accept(2) that concern one connection or a passing shortage: log, go on.
fn accept_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EINTR
                | libc::EAGAIN
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::EPERM
                | libc::ETIMEDOUT
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

/// Unregisters a connection when its thread ends, however it ends.
struct Registered {
    sh: Arc<Shared>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.sh.conns).remove(&self.id);
    }
}

fn accept_loop(
    listener: Listener,
    sh: Arc<Shared>,
    refuse: crossbeam_channel::Sender<(Stream, String)>,
) -> Accepted {
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let fatal = loop {
        let stream = match &listener {
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
        };
        if sh.shutdown.load(Ordering::SeqCst) {
            break None;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) if accept_transient(&e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    sh.log.log(|| format!("accept: {e}; retrying"));
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
            Err(e) => break Some(format!("accept: {e}")),
        };
        threads.retain(|t| !t.is_finished());
        let id = sh.next_conn.fetch_add(1, Ordering::Relaxed);
        let peer = peer_of(&stream);
        // Only this thread adds connections, so the count cannot grow past the check.
        if let Err(why) = make_room(&sh, peer, id) {
            sh.refused.fetch_add(1, Ordering::Relaxed);
            let msg = refusal_text(&sh, why, peer);
            sh.log.log(|| format!("connection {id}: refused: {msg}"));
            // A full refuser drops (closes) the connection at once.
            let _ = refuse.try_send((stream, msg));
            continue;
        }
        let conn = Arc::new(Conn {
            id,
            stream,
            epoch: sh.epoch,
            last_ms: AtomicU64::new(0),
            peer,
            phase: Phase::default(),
            ready_ms: AtomicU64::new(0),
        });
        conn.touch();
        lock(&sh.conns).insert(id, conn.clone());
        // A shutdown that began while this connection was registered must still reach it.
        if sh.shutdown.load(Ordering::SeqCst) {
            conn.stream.shutdown(std::net::Shutdown::Read);
        }
        let sh2 = sh.clone();
        let c2 = conn.clone();
        let t = std::thread::Builder::new()
            .name(format!("vmio-conn-{id}"))
            .stack_size(CONN_STACK_BYTES)
            .spawn(move || {
                let _reg = Registered {
                    sh: sh2.clone(),
                    id,
                };
                if let Err(e) = connection(c2.clone(), &sh2) {
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof
                            | io::ErrorKind::BrokenPipe
                            | io::ErrorKind::ConnectionReset
                    ) {
                        sh2.log.log(|| format!("connection {id}: {e}"));
                    }
                }
                c2.stream.shutdown(std::net::Shutdown::Both);
            });
        match t {
            Ok(t) => threads.push(t),
            Err(e) => {
                lock(&sh.conns).remove(&id);
                sh.refused.fetch_add(1, Ordering::Relaxed);
                sh.log
                    .log(|| format!("connection {id}: cannot start its thread ({e}); closed"));
            }
        }
    };
    if fatal.is_some() {
        let fd = match &listener {
            Listener::Unix(l, _) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
        };
        begin_shutdown(&sh, fd);
    }
    Accepted { threads, fatal }
}

/// Who is at the other end: the uid of a Unix-socket peer (`SO_PEERCRED`, unix(7)), the
/// address of a TCP peer.
fn peer_of(stream: &Stream) -> Peer {
    match stream {
        Stream::Unix(s) => {
            let mut cred = libc::ucred {
                pid: 0,
                uid: 0,
                gid: 0,
            };
            let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
            // SAFETY: cred and len are valid for writes of the sizes given.
            let r = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_PEERCRED,
                    (&mut cred as *mut libc::ucred).cast(),
                    &mut len,
                )
            };
            if r == 0 {
                Peer::Uid(cred.uid)
            } else {
                Peer::Unknown
            }
        }
        Stream::Tcp(s) => s.peer_addr().map_or(Peer::Unknown, |a| Peer::Addr(a.ip())),
    }
}

/// Apply the admission policy for connection `id` from `peer`: Ok once there is a slot
/// (after evicting a never-used connection if the policy says so).
fn make_room(sh: &Shared, peer: Peer, id: u64) -> Result<(), Refusal> {
    // A victim that sends its first request while being chosen is not evicted; choose again
    // (each retry sees one more used connection, so this ends).
    loop {
        let mut conns = lock(&sh.conns);
        let seats: Vec<Seat> = conns
            .values()
            .map(|c| Seat {
                id: c.id,
                peer: c.peer,
                unused_since: (c.phase.get() == admission::UNUSED)
                    .then(|| c.ready_ms.load(Ordering::SeqCst)),
            })
            .collect();
        match sh.policy.admit(peer, &seats) {
            Decision::Admit => return Ok(()),
            Decision::Refuse(why) => return Err(why),
            Decision::Evict(victim) => {
                let Some(v) = conns.get(&victim).cloned() else {
                    continue;
                };
                if !v.phase.evict() {
                    continue;
                }
                conns.remove(&victim);
                drop(conns);
                v.stream.shutdown(std::net::Shutdown::Both);
                sh.evicted.fetch_add(1, Ordering::Relaxed);
                sh.log.log(|| {
                    format!(
                        "connection {victim} ({}): closed to admit connection {id}: it finished \
                         its handshake {:?} ago and never sent a request",
                        v.peer,
                        Duration::from_millis(
                            v.now_ms().saturating_sub(v.ready_ms.load(Ordering::SeqCst))
                        )
                    )
                });
                return Ok(());
            }
        }
    }
}

/// What a refused client is told (and the log line says).
fn refusal_text(sh: &Shared, why: Refusal, peer: Peer) -> String {
    match why {
        Refusal::Full => format!(
            "too many connections (limit {}; --max-connections)",
            sh.max_connections
        ),
        Refusal::PerPeer => format!(
            "too many connections from {peer} (limit {}; --max-connections-per-peer)",
            sh.policy.per_peer
        ),
    }
}

/// A refused connection being told so.
struct Refusing {
    s: Stream,
    /// Why, as NBD_REP_ERR_POLICY's message.
    msg: String,
    deadline: Instant,
    /// Bytes of the current item (client flags, then option headers).
    got: Vec<u8>,
    flags_read: bool,
    /// Option whose data is being skipped, and how much is left.
    skipping: Option<(u32, u32)>,
    out: Vec<u8>,
    close_after_out: bool,
}

impl Refusing {
    /// Consume what the client sent; false: close now.
    fn feed(&mut self, mut b: &[u8], msg: &str) -> bool {
        loop {
            if let Some((opt, left)) = self.skipping {
                let n = (left as usize).min(b.len());
                b = &b[n..];
                let left = left - n as u32;
                if left > 0 {
                    self.skipping = Some((opt, left));
                    return true;
                }
                self.skipping = None;
                if !self.answer(opt, msg) {
                    return false;
                }
                if self.close_after_out {
                    return true;
                }
                continue;
            }
            if b.is_empty() {
                return true;
            }
            let want = if self.flags_read { 16 } else { 4 };
            let n = (want - self.got.len()).min(b.len());
            self.got.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.got.len() < want {
                return true;
            }
            if self.flags_read {
                let mut h = [0u8; 16];
                h.copy_from_slice(&self.got);
                match hs::parse_option_header(&h) {
                    Ok(h) => self.skipping = Some((h.option, h.len)),
                    Err(_) => return false,
                }
            }
            self.flags_read = true;
            self.got.clear();
        }
    }

    /// Answer one option; false: close now.
    fn answer(&mut self, opt: u32, msg: &str) -> bool {
        match opt {
            // It cannot carry an error: the only refusal is closing.
            proto::OPT_EXPORT_NAME => false,
            proto::OPT_ABORT => {
                hs::option_reply(&mut self.out, opt, proto::REP_ACK, &[]);
                self.close_after_out = true;
                true
            }
            _ => {
                hs::option_reply(&mut self.out, opt, proto::REP_ERR_POLICY, msg.as_bytes());
                // A client that sends options without reading the answers is closed.
                self.out.len() <= 64 << 10
            }
        }
    }

    /// Read and write what can be without blocking; false: close now.
    fn progress(&mut self, msg: &str) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        let mut b = [0u8; 4096];
        loop {
            match (&self.s).read(&mut b) {
                Ok(0) => return false,
                Ok(n) => {
                    if !self.feed(&b[..n], msg) {
                        return false;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
            if self.close_after_out {
                break;
            }
        }
        while !self.out.is_empty() {
            match (&self.s).write(&self.out) {
                Ok(0) => return false,
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        !(self.close_after_out && self.out.is_empty())
    }
}

/// Tell refused connections so, [`REFUSING_MAX`] at a time, each for [`REFUSE_WITHIN`] at
/// most, from one thread: greeting, then `NBD_REP_ERR_POLICY` to every option.
fn refuser(rx: crossbeam_channel::Receiver<(Stream, String)>) {
    let mut set: Vec<Refusing> = Vec::new();
    let add = |set: &mut Vec<Refusing>, (s, msg): (Stream, String)| {
        if s.set_nonblocking(true).is_err() {
            return;
        }
        let mut r = Refusing {
            s,
            msg: msg.clone(),
            deadline: Instant::now() + REFUSE_WITHIN,
            got: Vec::new(),
            flags_read: false,
            skipping: None,
            out: hs::greeting().to_vec(),
            close_after_out: false,
        };
        if r.progress(&msg) {
            set.push(r);
        }
    };
    loop {
        if set.is_empty() {
            match rx.recv() {
                Ok(s) => add(&mut set, s),
                Err(_) => return,
            }
        }
        while set.len() < REFUSING_MAX {
            match rx.try_recv() {
                Ok(s) => add(&mut set, s),
                Err(_) => break,
            }
        }
        let mut fds: Vec<libc::pollfd> = set
            .iter()
            .map(|r| libc::pollfd {
                fd: r.s.raw_fd(),
                events: libc::POLLIN | if r.out.is_empty() { 0 } else { libc::POLLOUT },
                revents: 0,
            })
            .collect();
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20);
        }
        let now = Instant::now();
        let mut i = 0;
        set.retain_mut(|r| {
            let ready = fds.get(i).is_some_and(|f| f.revents != 0);
            i += 1;
            if ready {
                let msg = std::mem::take(&mut r.msg);
                let go_on = r.progress(&msg);
                r.msg = msg;
                go_on
            } else {
                now < r.deadline
            }
        });
    }
}

fn proto_err(e: ProtoError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Negotiate; the export chosen, or None when the client ended the session.
fn handshake(s: &mut Timed<'_>, sh: &Shared) -> io::Result<Option<Arc<Export>>> {
    s.write_all(&hs::greeting())?;
    let mut f = [0u8; 4];
    s.read_exact(&mut f)?;
    let flags = hs::parse_client_flags(f).map_err(proto_err)?;
    let mut out = Vec::new();
    loop {
        out.clear();
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let h = hs::parse_option_header(&h).map_err(proto_err)?;
        let mut data = vec![0u8; h.len as usize];
        s.read_exact(&mut data)?;
        let opt = match hs::parse_option(h.option, &data) {
            Ok(o) => o,
            Err(msg) => {
                hs::option_reply(&mut out, h.option, proto::REP_ERR_INVALID, msg.as_bytes());
                s.write_all(&out)?;
                continue;
            }
        };
        if !flags.fixed_newstyle && !matches!(opt, ClientOption::ExportName(_)) {
            return Err(proto_err(ProtoError::NotFixedNewstyle(h.option)));
        }
        match opt {
            ClientOption::ExportName(name) => {
                let Some(i) = export::find(&sh.exports, &name) else {
                    return Err(proto_err(ProtoError::UnknownExport(shown(&name))));
                };
                let e = sh.exports[i].clone();
                hs::export_name_reply(&mut out, e.size_bytes, TRANSMISSION_FLAGS, flags.no_zeroes);
                s.write_all(&out)?;
                return Ok(Some(e));
            }
            ClientOption::Abort => {
                hs::option_reply(&mut out, h.option, proto::REP_ACK, &[]);
                let _ = s.write_all(&out);
                return Ok(None);
            }
            ClientOption::List => {
                for e in &sh.exports {
                    hs::rep_server(&mut out, &e.name);
                }
                hs::option_reply(&mut out, h.option, proto::REP_ACK, &[]);
                s.write_all(&out)?;
            }
            ClientOption::Info(r) | ClientOption::Go(r) => {
                let go = h.option == proto::OPT_GO;
                let Some(i) = export::find(&sh.exports, &r.name) else {
                    let msg = format!("no export '{}'", shown(&r.name));
                    hs::option_reply(&mut out, h.option, proto::REP_ERR_UNKNOWN, msg.as_bytes());
                    s.write_all(&out)?;
                    continue;
                };
                let e = sh.exports[i].clone();
                hs::info_export(&mut out, h.option, e.size_bytes, TRANSMISSION_FLAGS);
                if r.requests.contains(&proto::INFO_NAME) {
                    hs::info_name(&mut out, h.option, &e.name);
                }
                if r.requests.contains(&proto::INFO_BLOCK_SIZE) {
                    hs::info_block_size(&mut out, h.option, 1, 4096, proto::MAX_PAYLOAD_BYTES);
                }
                hs::option_reply(&mut out, h.option, proto::REP_ACK, &[]);
                s.write_all(&out)?;
                if go {
                    return Ok(Some(e));
                }
            }
            ClientOption::Unsupported(o) => {
                hs::option_reply(&mut out, o, proto::REP_ERR_UNSUP, &[]);
                s.write_all(&out)?;
            }
        }
    }
}

fn connection(conn: Arc<Conn>, sh: &Arc<Shared>) -> io::Result<()> {
    let export = {
        let mut t = Timed {
            s: &conn.stream,
            deadline: Instant::now() + sh.handshake_timeout,
        };
        match handshake(&mut t, sh) {
            Ok(Some(e)) => e,
            Ok(None) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "handshake not finished within {:?} (--handshake-timeout); closed",
                        sh.handshake_timeout
                    ),
                ))
            }
            Err(e) => return Err(e),
        }
    };
    conn.stream.set_read_timeout(Some(TICK))?;
    conn.stream.set_write_timeout(Some(TICK))?;
    conn.touch();
    conn.ready_ms.store(conn.now_ms(), Ordering::SeqCst);
    conn.phase.handshaken();
    if let Stream::Unix(u) = &conn.stream {
        set_sndbuf(u.as_raw_fd(), UNIX_SNDBUF_BYTES);
    }
    let out = Arc::new_cyclic(|me| ConnOut {
        conn: conn.clone(),
        pending: Mutex::new(Pending::default()),
        writer: Queue::default(),
        held: Mutex::new(Held::default()),
        drained: Condvar::new(),
        sh: sh.clone(),
        broken: AtomicBool::new(false),
        me: me.clone(),
    });
    let out2 = out.clone();
    let w = std::thread::Builder::new()
        .name(format!("vmio-writer-{}", conn.id))
        .stack_size(CONN_STACK_BYTES)
        .spawn(move || writer(out2))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start its writer thread ({e}); closed"),
            )
        })?;
    // --aio io_uring: this thread's ring receives and does the disk's pieces it dispatches.
    let ring = sh.dispatcher.engine() == Aio::IoUring && {
        let d = sh.dispatcher.clone();
        match crate::uring::install(Arc::new(move |data, res| ring_done(&d, data, res))) {
            Ok(()) => true,
            Err(e) => {
                let id = conn.id;
                sh.log
                    .log(|| format!("connection {id}: no io_uring ({e}); Linux AIO instead"));
                false
            }
        }
    };
    let mut rd = BufReader::with_capacity(
        64 << 10,
        ConnRead {
            conn: conn.clone(),
            ring,
        },
    );
    let r = transmission(&mut rd, &conn, &export, &out, sh);
    out.drain();
    if ring {
        crate::uring::uninstall();
    }
    out.writer.push(Handoff::Stop);
    let _ = w.join();
    conn.stream.shutdown(std::net::Shutdown::Both);
    r
}

/// Ask for `bytes` of send buffer on socket `fd` (the kernel caps it); a failure keeps the
/// default, which is only slower.
fn set_sndbuf(fd: i32, bytes: libc::c_int) {
    // SAFETY: a plain setsockopt with an int option value that outlives the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Fill `buf` from the connection. Ok(false): the client closed the connection before the
/// first byte. Waiting longer than the idle timeout for the rest of a request the client
/// began is an error; waiting for a new request is not.
fn read_full(
    rd: &mut BufReader<ConnRead>,
    buf: &mut [u8],
    mid_request: bool,
    conn: &Conn,
    out: &ConnOut,
) -> io::Result<bool> {
    let idle = out.sh.idle_timeout;
    let mut done = 0;
    while done < buf.len() {
        match rd.read(&mut buf[done..]) {
            Ok(0) if done == 0 && !mid_request => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => {
                // Only a request the client started and did not finish counts: a connection
                // with nothing in flight is a guest whose disk is idle, and stays (as with
                // qemu-nbd); it holds two threads and a descriptor, bounded by
                // --max-connections.
                let waiting_on_client = mid_request || done > 0;
                if !idle.is_zero() && waiting_on_client && conn.idle_for() >= idle {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("idle for {idle:?} (--idle-timeout); closed"),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Read and drop `n` payload bytes of a refused request; false: the client went away.
fn discard(
    rd: &mut BufReader<ConnRead>,
    mut n: u64,
    conn: &Conn,
    out: &ConnOut,
) -> io::Result<bool> {
    let mut b = [0u8; 8192];
    while n > 0 {
        let k = n.min(b.len() as u64) as usize;
        match read_full(rd, &mut b[..k], true, conn, out) {
            Ok(_) => n -= k as u64,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn transmission(
    rd: &mut BufReader<ConnRead>,
    conn: &Arc<Conn>,
    export: &Arc<Export>,
    out: &Arc<ConnOut>,
    sh: &Arc<Shared>,
) -> io::Result<()> {
    let mut h = [0u8; REQUEST_BYTES];
    loop {
        if !read_full(rd, &mut h, false, conn, out)? {
            return Ok(());
        }
        // The first request makes the connection a used one, never evicted; an evicted one
        // executes nothing.
        if !conn.phase.use_it() {
            return Ok(());
        }
        let arrived = Instant::now();
        let h = tx::parse_request(&h).map_err(proto_err)?;
        let checked = match tx::check_request(&h, export.size_bytes) {
            Ok(c) => c,
            Err(errno) => {
                if !discard(rd, h.payload_bytes() as u64, conn, out)? {
                    return Ok(());
                }
                export.stats.errors.fetch_add(1, Ordering::Relaxed);
                out.error(errno, h.cookie);
                continue;
            }
        };
        if checked.command == Command::Disc {
            return Ok(());
        }
        let buf_len = match checked.command {
            Command::Read | Command::Write => h.len as usize,
            _ => 0,
        };
        // Budget first, then the buffer: a payload that never arrives holds only budget.
        if !out.acquire(buf_len as u64) {
            return Ok(());
        }
        let Some(mut buf) = AlignedBuf::pooled(buf_len) else {
            out.release(1, buf_len as u64);
            sh.log.log(|| {
                format!(
                    "connection {}: cannot allocate {buf_len} bytes; request refused (ENOMEM)",
                    conn.id
                )
            });
            if !discard(rd, h.payload_bytes() as u64, conn, out)? {
                return Ok(());
            }
            export.stats.errors.fetch_add(1, Ordering::Relaxed);
            out.error(proto::ENOMEM, h.cookie);
            continue;
        };
        if checked.command == Command::Write {
            match read_full(rd, buf.as_mut_slice(), true, conn, out) {
                Ok(_) => {}
                // The client went away in the middle of a write: nothing to execute.
                Err(e) => {
                    drop(buf);
                    out.release(1, buf_len as u64);
                    return if e.kind() == io::ErrorKind::UnexpectedEof {
                        Ok(())
                    } else {
                        Err(e)
                    };
                }
            }
        }
        if sh.shutdown.load(Ordering::Relaxed) {
            drop(buf);
            out.release(1, buf_len as u64);
            out.error(proto::ESHUTDOWN, h.cookie);
            continue;
        }
        if let Some(t) = &sh.trace {
            let len = h.len as u64;
            t.record(export, checked.command, checked.fua, h.offset, len, arrived);
        }
        let sink: Arc<dyn ReplySink> = out.clone();
        sh.dispatcher.submit(Request::new(
            sink,
            export.clone(),
            h.cookie,
            checked.command,
            checked.fua,
            h.offset,
            h.len as u64,
            buf,
            arrived,
        ));
        if !rd.buffer().is_empty() {
            // More requests already received: their pieces are not held behind them
            // (io_uring; a no-op otherwise).
            crate::uring::submit();
        }
    }
}
