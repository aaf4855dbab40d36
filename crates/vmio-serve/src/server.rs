//! Listeners, connections and shutdown.
//!
//! One thread accepts on a Unix socket (the default) or on TCP bound to 127.0.0.1. Each
//! connection gets a reader thread that runs the handshake and then reads requests and
//! submits them to the [`Dispatcher`] without waiting for their completion (up to
//! [`MAX_INFLIGHT`] in flight per connection), and a writer thread that sends the replies of
//! finished requests, batching the ready ones (headers and payloads) into one `writev`. A
//! protocol violation closes only that connection; a client that stops reading its replies
//! only stalls itself.
//!
//! SIGINT/SIGTERM: stop accepting, stop reading requests (`shutdown(SHUT_RD)` on every
//! connection), let the requests in flight complete and reply, flush every export (its cache
//! mode decides what a flush does), remove the socket, write and return the statistics.
//! SIGUSR1 writes the statistics file and prints the statistics on stderr.

use crate::dispatch::{Dispatcher, ReplySink, Request};
use crate::export::{self, AlignedBuf, Export, ExportError};
use crate::proto::handshake::{self as hs, ClientOption};
use crate::proto::transmission::{self as tx, Command, REQUEST_BYTES};
use crate::proto::{self, ProtoError};
use crate::stats::{self, Snapshot};
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
}

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Listen {
    Unix(PathBuf),
    /// TCP port on 127.0.0.1 (0: any free port).
    Tcp(u16),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub stack: PathBuf,
    pub listen: Listen,
    /// Create or resize backing files to their configured sizes (may truncate).
    pub create: bool,
    pub stats_file: Option<PathBuf>,
    /// Requests each device's scheduler may have outstanding at once.
    pub queue_depth: usize,
    pub workers: usize,
    /// Install SIGINT/SIGTERM/SIGUSR1 handlers (the binary and `vmio serve` do).
    pub signals: bool,
}

impl Config {
    pub fn new(stack: impl Into<PathBuf>, listen: Listen) -> Self {
        Self {
            stack: stack.into(),
            listen,
            create: false,
            stats_file: None,
            queue_depth: 32,
            workers: 32,
            signals: true,
        }
    }
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    fn shutdown(&self, how: std::net::Shutdown) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(how),
            Stream::Tcp(s) => s.shutdown(how),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(b),
            Stream::Tcp(s) => s.write_vectored(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A reply for the connection's writer thread.
enum Out {
    Done(Arc<Request>),
    Error { errno: u32, cookie: u64 },
    Stop,
}

/// The reply side of a connection: I/O workers hand finished requests to the connection's
/// writer thread, so that a client that does not read its replies never blocks a worker.
struct ConnOut {
    tx: crossbeam_channel::Sender<Out>,
    inflight: Mutex<usize>,
    drained: Condvar,
}

impl ConnOut {
    fn acquire(&self) {
        let mut n = self.inflight.lock().unwrap();
        while *n >= MAX_INFLIGHT {
            n = self.drained.wait(n).unwrap();
        }
        *n += 1;
    }
    fn release(&self, k: usize) {
        *self.inflight.lock().unwrap() -= k;
        self.drained.notify_all();
    }
    fn drain(&self) {
        let mut n = self.inflight.lock().unwrap();
        while *n > 0 {
            n = self.drained.wait(n).unwrap();
        }
    }
    fn error(&self, errno: u32, cookie: u64) {
        self.acquire();
        let _ = self.tx.send(Out::Error { errno, cookie });
    }
}

impl ReplySink for ConnOut {
    fn complete(&self, req: Arc<Request>) {
        let _ = self.tx.send(Out::Done(req));
    }
}

/// Write replies as they come, batching whatever is ready into one `writev`.
fn writer(mut s: Stream, rx: crossbeam_channel::Receiver<Out>, out: Arc<ConnOut>) {
    const BATCH: usize = 64;
    let mut broken = false;
    let mut batch: Vec<Out> = Vec::with_capacity(BATCH);
    let mut headers: Vec<[u8; 16]> = Vec::with_capacity(BATCH);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(o) => batch.push(o),
                Err(_) => break,
            }
        }
        let stop = batch.iter().any(|o| matches!(o, Out::Stop));
        headers.clear();
        for o in &batch {
            match o {
                Out::Done(r) => headers.push(tx::simple_reply(r.error(), r.cookie)),
                Out::Error { errno, cookie } => headers.push(tx::simple_reply(*errno, *cookie)),
                Out::Stop => {}
            }
        }
        if !broken {
            let mut slices = Vec::with_capacity(2 * BATCH);
            let mut h = headers.iter();
            for o in &batch {
                match o {
                    Out::Done(r) => {
                        slices.push(IoSlice::new(h.next().expect("one header per reply")));
                        if !r.payload().is_empty() {
                            slices.push(IoSlice::new(r.payload()));
                        }
                    }
                    Out::Error { .. } => {
                        slices.push(IoSlice::new(h.next().expect("one header per reply")))
                    }
                    Out::Stop => {}
                }
            }
            let mut bufs: &mut [IoSlice] = &mut slices;
            while !bufs.is_empty() {
                match s.write_vectored(bufs) {
                    Ok(n) if n > 0 => IoSlice::advance_slices(&mut bufs, n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    _ => {
                        // The client is gone: keep consuming replies so the reader drains.
                        broken = true;
                        s.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                }
            }
        }
        let n = batch.iter().filter(|o| !matches!(o, Out::Stop)).count();
        batch.clear();
        out.release(n);
        if stop {
            break;
        }
    }
}

struct Shared {
    exports: Vec<Arc<Export>>,
    dispatcher: Arc<Dispatcher>,
    shutdown: AtomicBool,
    conns: Mutex<Vec<(u64, Stream)>>,
    next_conn: AtomicU64,
}

/// Parse the stack file and open its exports (also used to check a stack without serving).
pub fn load(stack_path: &Path, create: bool) -> Result<(Stack, Vec<Arc<Export>>), ServeError> {
    let text = std::fs::read_to_string(stack_path).map_err(|e| ServeError::ReadStack {
        path: stack_path.display().to_string(),
        source: e,
    })?;
    let mut stack = Stack::from_toml(&text, &stack_path.display().to_string())?;
    let dir = stack_path.parent().unwrap_or(Path::new("."));
    let exports = export::open_exports(&mut stack, dir, create)?;
    Ok((stack, exports.into_iter().map(Arc::new).collect()))
}

fn snapshots(exports: &[Arc<Export>]) -> Vec<Snapshot> {
    exports.iter().map(|e| e.stats.snapshot(&e.name)).collect()
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
    accept: Option<std::thread::JoinHandle<Vec<std::thread::JoinHandle<()>>>>,
    socket_path: Option<PathBuf>,
    stats_file: Option<PathBuf>,
    stats_thread: Option<std::thread::JoinHandle<()>>,
    signals: Option<signal_hook::iterator::Handle>,
}

/// Open the exports, listen, and serve in background threads.
pub fn start(cfg: &Config) -> Result<Server, ServeError> {
    let (stack, exports) = load(&cfg.stack, cfg.create)?;
    let listener = bind(&cfg.listen)?;
    let dispatcher = Dispatcher::start(&stack, cfg.queue_depth, cfg.workers);
    let shared = Arc::new(Shared {
        exports,
        dispatcher,
        shutdown: AtomicBool::new(false),
        conns: Mutex::new(Vec::new()),
        next_conn: AtomicU64::new(0),
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
    let sh = shared.clone();
    let accept = std::thread::Builder::new()
        .name("vmio-accept".into())
        .spawn(move || accept_loop(listener, sh))
        .expect("spawn accept thread");
    let mut server = Server {
        shared,
        listener_fd,
        address,
        accept: Some(accept),
        socket_path,
        stats_file: cfg.stats_file.clone(),
        stats_thread: None,
        signals: None,
    };
    if let Some(path) = cfg.stats_file.clone() {
        let sh = server.shared.clone();
        server.stats_thread = Some(std::thread::spawn(move || {
            while !sh.shutdown.load(Ordering::Relaxed) {
                write_stats(&path, &sh.exports);
                for _ in 0..10 {
                    if sh.shutdown.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }));
    }
    if cfg.signals {
        use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
        let mut sigs = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1])
            .map_err(|e| ServeError::Usage(format!("cannot install signal handlers: {e}")))?;
        server.signals = Some(sigs.handle());
        let sh = server.shared.clone();
        let fd = server.listener_fd;
        let stats_file = cfg.stats_file.clone();
        std::thread::spawn(move || {
            for s in sigs.forever() {
                if s == SIGUSR1 {
                    if let Some(p) = &stats_file {
                        write_stats(p, &sh.exports);
                    }
                    eprint!("{}", stats::text(&snapshots(&sh.exports)));
                } else {
                    begin_shutdown(&sh, fd);
                    break;
                }
            }
        });
    }
    Ok(server)
}

fn begin_shutdown(sh: &Shared, listener_fd: i32) {
    if sh.shutdown.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: shutting down our own listening socket wakes the blocked accept().
    unsafe {
        libc::shutdown(listener_fd, libc::SHUT_RDWR);
    }
    for (_, s) in sh.conns.lock().unwrap().iter() {
        s.shutdown(std::net::Shutdown::Read);
    }
}

impl Server {
    /// Ask the server to shut down (as SIGTERM does).
    pub fn shutdown(&self) {
        begin_shutdown(&self.shared, self.listener_fd);
    }

    /// Serve until shut down; then finish in-flight requests, flush every export, remove
    /// the socket, and return the final statistics.
    pub fn wait(mut self) -> Vec<Snapshot> {
        let conns = self
            .accept
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        for c in conns {
            let _ = c.join();
        }
        self.shared.dispatcher.stop();
        for e in &self.shared.exports {
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
            write_stats(p, &self.shared.exports);
        }
        if let Some(h) = self.signals.take() {
            h.close();
        }
        snapshots(&self.shared.exports)
    }

    pub fn export_names(&self) -> Vec<String> {
        self.shared.exports.iter().map(|e| e.name.clone()).collect()
    }
}

fn accept_loop(listener: Listener, sh: Arc<Shared>) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    loop {
        let stream = match &listener {
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
        };
        if sh.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("vmio-serve: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let id = sh.next_conn.fetch_add(1, Ordering::Relaxed);
        if let Ok(c) = stream.try_clone() {
            sh.conns.lock().unwrap().push((id, c));
        }
        // A shutdown that began while this connection was registered must still reach it.
        if sh.shutdown.load(Ordering::SeqCst) {
            stream.shutdown(std::net::Shutdown::Read);
        }
        let sh2 = sh.clone();
        threads.retain(|t| !t.is_finished());
        threads.push(
            std::thread::Builder::new()
                .name(format!("vmio-conn-{id}"))
                .spawn(move || {
                    if let Err(e) = connection(stream, &sh2) {
                        if e.kind() != io::ErrorKind::UnexpectedEof {
                            eprintln!("vmio-serve: connection {id}: {e}");
                        }
                    }
                    sh2.conns.lock().unwrap().retain(|(i, _)| *i != id);
                })
                .expect("spawn connection thread"),
        );
    }
    threads
}

fn proto_err(e: ProtoError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Negotiate; the export chosen, or None when the client ended the session.
fn handshake(s: &mut Stream, sh: &Shared) -> io::Result<Option<Arc<Export>>> {
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
                    return Err(proto_err(ProtoError::UnknownExport(name)));
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
                    let msg = format!("no export '{}'", r.name);
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

fn connection(mut s: Stream, sh: &Arc<Shared>) -> io::Result<()> {
    let Some(export) = handshake(&mut s, sh)? else {
        return Ok(());
    };
    let (txc, rx) = crossbeam_channel::unbounded();
    let out = Arc::new(ConnOut {
        tx: txc,
        inflight: Mutex::new(0),
        drained: Condvar::new(),
    });
    let ws = s.try_clone()?;
    let out2 = out.clone();
    let w = std::thread::Builder::new()
        .name("vmio-writer".into())
        .spawn(move || writer(ws, rx, out2))?;
    let mut rd = BufReader::with_capacity(64 << 10, s);
    let r = transmission(&mut rd, &export, &out, sh);
    out.drain();
    let _ = out.tx.send(Out::Stop);
    let _ = w.join();
    rd.get_ref().shutdown(std::net::Shutdown::Both);
    r
}

fn transmission(
    rd: &mut BufReader<Stream>,
    export: &Arc<Export>,
    out: &Arc<ConnOut>,
    sh: &Arc<Shared>,
) -> io::Result<()> {
    let mut h = [0u8; REQUEST_BYTES];
    loop {
        match rd.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let arrived = Instant::now();
        let h = tx::parse_request(&h).map_err(proto_err)?;
        let checked = match tx::check_request(&h, export.size_bytes) {
            Ok(c) => c,
            Err(errno) => {
                let n = h.payload_bytes() as u64;
                if io::copy(&mut rd.by_ref().take(n), &mut io::sink())? < n {
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
        let mut buf = AlignedBuf::pooled(buf_len);
        if checked.command == Command::Write {
            match rd.read_exact(buf.as_mut_slice()) {
                Ok(()) => {}
                // The client went away in the middle of a write: nothing to execute.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        if sh.shutdown.load(Ordering::Relaxed) {
            out.error(proto::ESHUTDOWN, h.cookie);
            continue;
        }
        out.acquire();
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
    }
}
