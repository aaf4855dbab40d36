//! The queue driver: every device (backing file) has one vmio-core request queue
//! ([`vmio_core::blockq::DeviceQueue`] over [`vmio_core::sched::build`]'s scheduler: the
//! same policy objects, depth and wake-up rules the simulator drives) shared by every export
//! and connection that reaches it, and a pool of worker threads doing the blocking
//! pread/pwrite/fallocate.
//!
//! ```text
//! submit(request):  pieces = export.map(offset, len)            # volume policy
//!                   for each piece: queue[device].insert(now, DevIo{owner = VM}); pump(device)
//! pump(device):     queue.dispatch(now): each started io (its slot, its pieces):
//!                     one aligned O_DIRECT READ/WRITE piece:
//!                       --aio io_uring, on a thread with a ring: an SQE of that ring (uring)
//!                       else (native, io_uring): into one io_submit batch (aio)
//!                     else (and --aio threads): to the workers
//!                   if queue.wakeup_to_arm(now) = t: timer = min(timer, t)   # CFQ idling, slices
//! worker:           do the I/O of every tag of io; queue.complete(now, slot); pump(device)
//!                   last piece of a request: FUA sync, stats, reply
//! aio thread:       each completion: queue.complete(now, slot); pump(device); as a worker
//! ring (io_uring):  the connection's thread, each piece reaped: as the aio thread
//! timer thread:     at timer: every device: queue.woke(now); pump(device);
//!                   timer = min(timer, queue's still armed wake-up)
//! ```
//!
//! Pieces on O_DIRECT descriptors go through Linux AIO ([`crate::aio`]: why, and its
//! pseudo-code) or the connection thread's io_uring ([`crate::uring`]); the workers keep the
//! rest. `now` is the monotonic clock in nanoseconds
//! since the server started. FLUSH does not
//! enter the device queues: a worker runs it at once, syncing every backing of the export
//! ([`Export::flush`]). The queues would order it the same way (a flush bypasses the
//! scheduler and is not ordered against queued writes: an NBD FLUSH covers the writes
//! already replied to, which are on the files), but a per-device flush would take a queue
//! slot on each device and need a per-backing sync under the cache mode's rules, which the
//! export keeps in one place. Requests merged by a scheduler (mq-deadline) keep their own
//! buffers: a merged `DevIo` is executed tag by tag.
//!
//! An export with `[vm.disk.iotune]` passes its throttle group first
//! ([`vmio_core::throttle::ThrottleGroup`], QEMU's BlockBackend throttling before the format
//! driver and the host file), the same policy the simulator drives:
//!
//! ```text
//! submit(request): throttled export: group.submit(now, member, op, len, request)
//!                    now -> begin(request); queued -> the timer thread wakes the group at
//!                    the time it armed (arm_timer), which starts what it admits, in order
//! begin(request):  the PDC detector, then the device queues as above
//! ```
//!
//! Reads and writes (WRITE_ZEROES as a write) are throttled; FLUSH, TRIM and DISC pass, as in
//! QEMU's BlockBackend. A waiting request holds no thread: it sits in its member's FIFO, and
//! the FIFO is bounded by the connection's requests in flight (its payload budget and
//! depth, crates/vmio-serve/src/limits.rs). Its wait counts in the export's `throttle` stats.
//!
//! A `cache = "pdc"` export's detector ([`crate::pdc`]) sees its WRITEs and FLUSHes in
//! `submit`, in arrival order, before the scheduler: `now` is the same clock. A WRITE it
//! bypasses carries the verdict to the workers, which write its pieces around the cache.

use crate::aio::{self, Iocb};
use crate::export::{nbd_errno, AlignedBuf, Export};
use crate::handoff::Queue;
use crate::limits::lock;
use crate::options::Aio;
use crate::proto::transmission::Command;
use crate::readahead::{self, Read};
use crate::uring;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use vmio_core::blockq::DeviceQueue;
use vmio_core::cache::pdc::Verdict;
use vmio_core::request::{DevIo, Op};
use vmio_core::stack::Stack;
use vmio_core::throttle::{Submit, ThrottleGroup};
use vmio_core::volume::Piece;

/// Where a finished request goes for its reply (a connection's writer).
pub trait ReplySink: Send + Sync {
    fn complete(&self, req: Arc<Request>);
}

/// One NBD request in flight.
pub struct Request {
    pub sink: Arc<dyn ReplySink>,
    pub export: Arc<Export>,
    pub cookie: u64,
    pub command: Command,
    pub fua: bool,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// READ target or WRITE payload.
    pub buf: AlignedBuf,
    pub arrived: Instant,
    remaining: AtomicUsize,
    error: AtomicU32,
    /// Bit i: the request touched backing i of its export (FUA syncs only those).
    touched: std::sync::atomic::AtomicU64,
    /// A WRITE the export's PDC detector predicts as the guest's journal: its pieces go
    /// around the host page cache ([`Export::write_piece_bypass`]).
    bypass: bool,
    /// A chunk of the export's read-ahead ([`crate::readahead`]), not a client's READ: its
    /// id. Its sink is a [`FillSink`]; it counts in no statistics of the client's.
    fill: Option<u64>,
    /// A write, trim or write-zeroes on an export that reads ahead: its state, told when it
    /// completes.
    ra: Option<Arc<Mutex<RaState>>>,
}

/// An export's read-ahead: waiting READs, and filled chunks, are requests.
type RaState = readahead::State<Arc<Request>, Arc<Request>>;

/// Above any count of chunks a READ can wait on: a hit's `remaining` starts here, so that
/// chunks filled by other threads before the READ knows how many it waits on cannot
/// finish it early ([`Dispatcher::begin`]).
const WAIT_GUARD: usize = 1 << 40;

impl Request {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sink: Arc<dyn ReplySink>,
        export: Arc<Export>,
        cookie: u64,
        command: Command,
        fua: bool,
        offset_bytes: u64,
        len_bytes: u64,
        buf: AlignedBuf,
        arrived: Instant,
    ) -> Self {
        Self {
            sink,
            export,
            cookie,
            command,
            fua,
            offset_bytes,
            len_bytes,
            buf,
            arrived,
            remaining: AtomicUsize::new(0),
            error: AtomicU32::new(0),
            touched: Default::default(),
            bypass: false,
            fill: None,
            ra: None,
        }
    }

    /// The NBD error value of the reply (0: success).
    pub fn error(&self) -> u32 {
        self.error.load(Ordering::Relaxed)
    }

    /// The reply's payload: the data of a successful READ.
    pub fn payload(&self) -> &[u8] {
        if self.command == Command::Read && self.error() == 0 {
            self.buf.as_slice()
        } else {
            &[]
        }
    }
}

struct PieceJob {
    req: Arc<Request>,
    /// Index of the backing within the request's export.
    backing: usize,
    dev_offset_bytes: u64,
    len_bytes: u64,
    /// Where the piece's bytes are in the request's buffer.
    buf_offset: usize,
}

/// A piece in the kernel's hands ([`crate::aio`]); `iocb.data` is this box's address.
struct AioPiece {
    iocb: Iocb,
    device: usize,
    slot: usize,
    job: PieceJob,
}

enum Work {
    Device {
        device: usize,
        /// The request's slot in the device's queue.
        slot: usize,
        jobs: Vec<PieceJob>,
    },
    Flush(Arc<Request>),
    Stop,
}

/// A device's request queue and the pieces its tags stand for.
struct DevQueue {
    queue: DeviceQueue,
    jobs: HashMap<u64, PieceJob>,
    next_tag: u64,
}

pub struct Dispatcher {
    devices: Vec<Mutex<DevQueue>>,
    /// The exports' throttle groups ([`crate::export::throttle_groups`]).
    throttle: Vec<Mutex<ThrottleGroup<Request>>>,
    /// Each export's read-ahead state (by [`Export::index`]), for those that read ahead.
    ra: Vec<Option<Arc<Mutex<RaState>>>>,
    /// Linux AIO for the O_DIRECT pieces ([`crate::aio`]); None: the workers do all (or
    /// the connections' io_uring, on their threads).
    aio: Option<aio::Context>,
    /// `--aio`: with io_uring, a thread that has a ring ([`crate::uring`]) queues its
    /// pieces there.
    engine: Aio,
    /// Work for the I/O workers ([`crate::handoff`]: consumers sleep at once, no spinning).
    work: Queue<Work>,
    epoch: Instant,
    /// Earliest wake-up a device queue asked for.
    timer: Mutex<Option<u64>>,
    timer_cv: Condvar,
    stopping: AtomicBool,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Dispatcher {
    /// One scheduler per device of the stack, with the VMs' weights; `workers` I/O threads;
    /// `read_ahead[i]`: export i reads ahead, windows up to `.0` bytes over its `.1` bytes
    /// ([`crate::readahead`]). An error when a thread cannot be started (the threads already
    /// started are stopped).
    pub fn start(
        stack: &Stack,
        depth: usize,
        workers: usize,
        read_ahead: &[Option<(u64, u64)>],
        engine: Aio,
    ) -> io::Result<Arc<Self>> {
        let weights: Vec<u32> = stack.vms.iter().map(|v| v.weight).collect();
        let d = Arc::new(Self {
            devices: stack
                .devices
                .iter()
                .map(|_| {
                    Mutex::new(DevQueue {
                        queue: DeviceQueue::new(
                            vmio_core::sched::build(&stack.scheduler, &weights),
                            depth,
                        ),
                        jobs: HashMap::new(),
                        next_tag: 1,
                    })
                })
                .collect(),
            throttle: crate::export::throttle_groups(stack)
                .map(|p| {
                    p.groups
                        .iter()
                        .map(|(spec, n)| Mutex::new(ThrottleGroup::new(spec, *n)))
                        .collect()
                })
                .unwrap_or_default(),
            ra: read_ahead
                .iter()
                .map(|r| r.map(|(max, bytes)| Arc::new(Mutex::new(RaState::new(max, bytes)))))
                .collect(),
            work: Queue::default(),
            aio: match engine {
                Aio::Threads => None,
                Aio::Native | Aio::IoUring => {
                    aio::Context::new(depth.max(1) * stack.devices.len().max(1)).ok()
                }
            },
            engine,
            epoch: Instant::now(),
            timer: Mutex::new(None),
            timer_cv: Condvar::new(),
            stopping: AtomicBool::new(false),
            workers: Mutex::new(Vec::new()),
        });
        let spawned = (|| {
            for i in 0..workers.max(1) {
                let d2 = d.clone();
                let h = std::thread::Builder::new()
                    .name(format!("vmio-io-{i}"))
                    .spawn(move || d2.worker())?;
                lock(&d.workers).push(h);
            }
            if d.aio.is_some() {
                let d2 = d.clone();
                let h = std::thread::Builder::new()
                    .name("vmio-aio".into())
                    .spawn(move || d2.aio_loop())?;
                lock(&d.workers).push(h);
            }
            let d2 = d.clone();
            let h = std::thread::Builder::new()
                .name("vmio-timer".into())
                .spawn(move || d2.timer_loop())?;
            lock(&d.workers).push(h);
            Ok(())
        })();
        match spawned {
            Ok(()) => Ok(d),
            Err(e) => {
                d.stop();
                Err(e)
            }
        }
    }

    /// The engine of the O_DIRECT pieces (`--aio`).
    pub fn engine(&self) -> Aio {
        self.engine
    }

    /// Export `index` reads ahead ([`crate::readahead`]).
    pub fn reads_ahead(&self, index: usize) -> bool {
        self.ra.get(index).is_some_and(|r| r.is_some())
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Take a request: through its export's throttle group when it has one, then
    /// [`Dispatcher::begin`].
    pub fn submit(&self, req: Request) {
        let op = match req.command {
            Command::Read => Op::Read,
            Command::Write | Command::WriteZeroes { .. } => Op::Write,
            _ => Op::Flush,
        };
        let Some((g, m)) = req.export.throttle.filter(|_| op != Op::Flush) else {
            return self.begin(req);
        };
        let Some(group) = self.throttle.get(g) else {
            return self.begin(req);
        };
        let len = req.len_bytes;
        let decided = lock(group).submit(self.now_ns(), m, op, len, req);
        match decided {
            Submit::Now(req) => self.begin(req),
            Submit::Queued(Some(at)) => self.arm_timer(at),
            Submit::Queued(None) => {}
        }
    }

    /// The throttle groups' timers due at `now`: start what they admit, in order; arm the
    /// timers they set again.
    fn throttle_wake(&self, now: u64) {
        let mut admitted = Vec::new();
        for g in &self.throttle {
            let armed = lock(g).wake(now, &mut admitted);
            for at in armed.into_iter().flatten() {
                self.arm_timer(at);
            }
            for (_, req) in admitted.drain(..) {
                let st = &req.export.stats;
                st.throttle_delayed.fetch_add(1, Ordering::Relaxed);
                st.throttled_ns
                    .fetch_add(req.arrived.elapsed().as_nanos() as u64, Ordering::Relaxed);
                self.begin(req);
            }
        }
    }

    /// Queue a request: FLUSH goes to a worker at once, DISC is not submitted, everything
    /// else is mapped onto its devices' queues.
    fn begin(&self, mut req: Request) {
        if let Some(p) = &req.export.pdc {
            match req.command {
                Command::Flush => p.on_flush(),
                Command::Write => {
                    let v = p.on_write(self.now_ns(), req.offset_bytes, req.len_bytes);
                    req.bypass = v == Verdict::Bypass;
                }
                _ => {}
            }
        }
        let ra = match req.fill {
            None => self.ra.get(req.export.index).and_then(|r| r.clone()),
            Some(_) => None,
        };
        if let (Some(st), true) = (&ra, writes(req.command)) {
            let mut g = lock(st);
            g.write_begin(req.offset_bytes, req.len_bytes);
            req.export.stats.note_read_ahead(&g.stats);
            drop(g);
            req.ra = ra.clone();
        }
        let req = Arc::new(req);
        if req.command == Command::Flush {
            req.remaining.store(1, Ordering::Relaxed);
            self.work.push(Work::Flush(req));
            return;
        }
        if let (Some(st), Command::Read) = (&ra, req.command) {
            if self.read_ahead(st, &req) {
                return;
            }
        }
        let mut pieces: Vec<Piece> = Vec::new();
        req.export.map(req.offset_bytes, req.len_bytes, &mut pieces);
        if pieces.is_empty() {
            finish(&req);
            return;
        }
        req.remaining.store(pieces.len(), Ordering::Relaxed);
        let op = match req.command {
            Command::Read => Op::Read,
            Command::Trim => Op::Trim,
            _ => Op::Write,
        };
        let mut buf_offset = 0usize;
        for p in pieces {
            let device = req.export.backings[p.device].device;
            let job = PieceJob {
                req: req.clone(),
                backing: p.device,
                dev_offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                buf_offset,
            };
            buf_offset += p.len_bytes as usize;
            let now = self.now_ns();
            let mut q = lock(&self.devices[device]);
            let tag = q.next_tag;
            q.next_tag += 1;
            q.jobs.insert(tag, job);
            q.queue.insert(
                now,
                DevIo {
                    tag,
                    op,
                    offset_bytes: p.offset_bytes,
                    len_bytes: p.len_bytes,
                    fua: req.fua,
                    sync: true,
                    owner: req.export.vm as u32,
                    queued_ns: now,
                    merged: Vec::new(),
                },
            );
            self.pump(device, &mut q);
        }
    }

    /// A READ on an export that reads ahead ([`crate::readahead`]): true when the windows
    /// serve it (it is finished, or waits on chunks in flight), false when it must be read
    /// from the device. Either way, the chunks the policy asks for are started.
    fn read_ahead(&self, st: &Arc<Mutex<RaState>>, req: &Arc<Request>) -> bool {
        let mut issue = Vec::new();
        // Before the READ can be a waiter: see WAIT_GUARD.
        req.remaining.store(WAIT_GUARD, Ordering::Relaxed);
        let got = {
            let mut g = lock(st);
            let got = g.read(req.offset_bytes, req.len_bytes, req, &mut issue);
            req.export.stats.note_read_ahead(&g.stats);
            got
        };
        for (id, off, len) in issue {
            self.fill(st, &req.export, id, off, len);
        }
        let Read::Hit { ready, waits } = got else {
            return false;
        };
        for (chunk_off, data) in &ready {
            copy_chunk(req, *chunk_off, data);
        }
        let left = WAIT_GUARD - waits;
        if req.remaining.fetch_sub(left, Ordering::AcqRel) == left {
            finish(req);
        }
        true
    }

    /// Start chunk `id` of `export`'s read-ahead: `[off, off + len)`, read as any READ
    /// through the device queues; its [`FillSink`] hands it to the state when it is read.
    fn fill(&self, st: &Arc<Mutex<RaState>>, export: &Arc<Export>, id: u64, off: u64, len: u64) {
        let Some(buf) = AlignedBuf::pooled(len as usize) else {
            let (chunk_off, waiters) = lock(st).filled(id, Err(crate::proto::ENOMEM));
            for w in waiters {
                serve_waiter(&w, chunk_off, &Err(crate::proto::ENOMEM));
            }
            return;
        };
        let sink: Arc<dyn ReplySink> = Arc::new(FillSink(Arc::downgrade(st)));
        let mut r = Request::new(
            sink,
            export.clone(),
            0,
            Command::Read,
            false,
            off,
            len,
            buf,
            Instant::now(),
        );
        r.fill = Some(id);
        self.begin(r);
    }

    fn pump(&self, device: usize, q: &mut DevQueue) {
        let now = self.now_ns();
        let pieces = &mut q.jobs;
        let mut batch: Vec<*mut AioPiece> = Vec::new();
        // This thread's own io_uring (--aio io_uring, a connection's thread), if it has one.
        let ring = self.engine == Aio::IoUring && uring::active();
        q.queue.dispatch(now, |slot, io| {
            let mut jobs: Vec<PieceJob> = io.tags().filter_map(|t| pieces.remove(&t)).collect();
            if (ring || self.aio.is_some()) && jobs.len() == 1 {
                if let Some(iocb) = aio_iocb(&jobs[0]) {
                    let job = jobs.pop().expect("one job");
                    let p = Box::into_raw(Box::new(AioPiece {
                        iocb,
                        device,
                        slot,
                        job,
                    }));
                    // SAFETY: p is the live box just made.
                    unsafe { (*p).iocb.data = p as u64 };
                    if ring {
                        // SAFETY: as above; the box lives until ring_done takes it back.
                        let (write, fd, buf, len, off) = unsafe { (*p).iocb.io() };
                        uring::push_rw(write, fd, buf, len as u32, off, p as u64);
                    } else {
                        batch.push(p);
                    }
                    return;
                }
            }
            self.work.push(Work::Device { device, slot, jobs });
        });
        if !batch.is_empty() {
            self.submit_aio(batch);
        }
        if let Some(t) = q.queue.wakeup_to_arm(now) {
            self.arm_timer(t);
        }
    }

    /// Submit AIO pieces in one `io_submit`; those the kernel does not take go to the
    /// workers.
    fn submit_aio(&self, batch: Vec<*mut AioPiece>) {
        let Some(ctx) = &self.aio else { return };
        // SAFETY: the boxes are live until their completion is reaped (aio_loop) or they are
        // taken back below.
        let cbs: Vec<*mut Iocb> = batch
            .iter()
            .map(|&p| unsafe { std::ptr::addr_of_mut!((*p).iocb) })
            .collect();
        let taken = ctx.submit(&cbs);
        for &p in &batch[taken..] {
            // SAFETY: the kernel did not take this one: it is ours again.
            let p = unsafe { Box::from_raw(p) };
            let (device, slot, jobs) = (p.device, p.slot, vec![p.job]);
            self.work.push(Work::Device { device, slot, jobs });
        }
    }

    /// Make the timer thread wake at `t` at the latest.
    fn arm_timer(&self, t: u64) {
        let mut w = lock(&self.timer);
        if w.is_none_or(|old| t < old) {
            *w = Some(t);
            self.timer_cv.notify_one();
        }
    }

    fn timer_loop(&self) {
        let mut w = lock(&self.timer);
        while !self.stopping.load(Ordering::Relaxed) {
            let now = self.now_ns();
            match *w {
                Some(t) if t <= now => {
                    *w = None;
                    drop(w);
                    self.throttle_wake(now);
                    for (i, dev) in self.devices.iter().enumerate() {
                        let mut q = lock(dev);
                        q.queue.woke(now);
                        self.pump(i, &mut q);
                        // A wake-up armed earlier for later than now still needs the timer.
                        if let Some(t) = q.queue.armed_wakeup() {
                            self.arm_timer(t);
                        }
                    }
                    w = lock(&self.timer);
                }
                Some(t) => {
                    w = self
                        .timer_cv
                        .wait_timeout(w, Duration::from_nanos(t - now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => w = self.timer_cv.wait(w).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// Reap AIO completions until the dispatcher stops and nothing is in flight.
    fn aio_loop(&self) {
        let Some(ctx) = &self.aio else { return };
        let mut ev = [aio::Event::default(); aio::EVENTS];
        loop {
            let n = ctx.reap(&mut ev);
            if n == 0 {
                let idle = ctx.in_flight.load(Ordering::Acquire) == 0;
                if self.stopping.load(Ordering::Relaxed) && idle {
                    return;
                }
                continue;
            }
            for e in &ev[..n] {
                // SAFETY: data is the address of the box submitted in pump, reaped once.
                self.piece_completed(*unsafe { Box::from_raw(e.data as *mut AioPiece) }, e.res);
            }
        }
    }

    /// A piece this thread's io_uring ([`crate::uring`]) reaped: `data` and its result.
    pub fn ring_done(&self, data: u64, res: i32) {
        // SAFETY: data is the address of the box queued in pump, reaped once.
        self.piece_completed(*unsafe { Box::from_raw(data as *mut AioPiece) }, res.into());
    }

    /// An AIO or io_uring piece completed with `res`: free its slot, dispatch what the
    /// queue starts next, and finish the piece.
    fn piece_completed(&self, p: AioPiece, res: i64) {
        if let Err(err) = aio_done(&p.job, res) {
            p.job.req.error.store(nbd_errno(&err), Ordering::Relaxed);
        }
        {
            let mut q = lock(&self.devices[p.device]);
            q.queue.complete(self.now_ns(), p.slot);
            self.pump(p.device, &mut q);
        }
        piece_done(&p.job.req);
    }

    fn worker(&self) {
        loop {
            match self.work.pop() {
                Work::Stop => break,
                Work::Flush(req) => {
                    if let Err(e) = req.export.flush() {
                        req.error.store(nbd_errno(&e), Ordering::Relaxed);
                    }
                    piece_done(&req);
                }
                Work::Device { device, slot, jobs } => {
                    for j in &jobs {
                        if let Err(e) = execute(j) {
                            j.req.error.store(nbd_errno(&e), Ordering::Relaxed);
                        }
                    }
                    {
                        let mut q = lock(&self.devices[device]);
                        q.queue.complete(self.now_ns(), slot);
                        self.pump(device, &mut q);
                    }
                    for j in jobs {
                        piece_done(&j.req);
                    }
                }
            }
        }
    }

    /// Stop the workers and the timer once every queued request has been served.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        let hs = std::mem::take(&mut *lock(&self.workers));
        for _ in 0..hs.len() {
            self.work.push(Work::Stop);
        }
        {
            let _w = lock(&self.timer);
            self.timer_cv.notify_all();
        }
        for h in hs {
            let _ = h.join();
        }
    }
}

fn execute(j: &PieceJob) -> io::Result<()> {
    let r = &j.req;
    let (b, off, len) = (j.backing, j.dev_offset_bytes, j.len_bytes);
    if j.backing < 64 {
        r.touched.fetch_or(1 << j.backing, Ordering::Relaxed);
    }
    match r.command {
        Command::Read => {
            // SAFETY: each piece owns a disjoint range of the buffer, and the buffer is
            // read (for the reply) only after the last piece completed.
            let dst = unsafe { r.buf.range_mut(j.buf_offset, len as usize) };
            r.export.read_piece(b, off, dst)
        }
        Command::Write => {
            let src = &r.buf.as_slice()[j.buf_offset..j.buf_offset + len as usize];
            if r.bypass {
                r.export.write_piece_bypass(b, off, src)
            } else {
                r.export.write_piece(b, off, src)
            }
        }
        Command::Trim => r.export.trim_piece(b, off, len),
        Command::WriteZeroes { no_hole } => r.export.zero_piece(b, off, len, no_hole),
        Command::Flush | Command::Disc => Ok(()),
    }
}

/// The AIO request of a piece: a READ or a WRITE (neither bypassed nor FUA) whose backing is
/// O_DIRECT and that is aligned; None: the workers do it ([`execute`]).
fn aio_iocb(j: &PieceJob) -> Option<Iocb> {
    let r = &j.req;
    let len = j.len_bytes as usize;
    let (write, ptr) = match r.command {
        // SAFETY: the piece owns this range of the buffer until it completes (as in
        // execute); only its address is taken here.
        Command::Read => (
            false,
            unsafe { r.buf.range_mut(j.buf_offset, len) }.as_ptr(),
        ),
        // A FUA write syncs when it completes (finish): a worker, not the completion thread,
        // waits for that.
        Command::Write if !r.bypass && !r.fua => (true, r.buf.as_slice()[j.buf_offset..].as_ptr()),
        _ => return None,
    };
    let fd = r
        .export
        .direct_fd(j.backing, j.dev_offset_bytes, len, ptr)?;
    if j.backing < 64 {
        r.touched.fetch_or(1 << j.backing, Ordering::Relaxed);
    }
    Some(Iocb::new(write, fd, ptr, len, j.dev_offset_bytes, 0))
}

/// A piece's AIO completed with `res` (bytes, or -errno): a short transfer (a read at the
/// end of the file) finishes synchronously, as [`execute`] would.
fn aio_done(j: &PieceJob, res: i64) -> io::Result<()> {
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res as i32));
    }
    let (done, len) = (res as usize, j.len_bytes as usize);
    if done >= len {
        return Ok(());
    }
    let (r, off) = (&j.req, j.dev_offset_bytes + done as u64);
    match r.command {
        Command::Read => {
            // SAFETY: as in execute: the piece's own range, read for the reply only after
            // the last piece completed.
            let dst = unsafe { r.buf.range_mut(j.buf_offset + done, len - done) };
            r.export.read_piece(j.backing, off, dst)
        }
        _ => {
            let src = &r.buf.as_slice()[j.buf_offset + done..j.buf_offset + len];
            r.export.write_piece(j.backing, off, src)
        }
    }
}

/// WRITE, TRIM, WRITE_ZEROES: the commands that change the export's bytes.
fn writes(c: Command) -> bool {
    matches!(
        c,
        Command::Write | Command::Trim | Command::WriteZeroes { .. }
    )
}

fn piece_done(req: &Arc<Request>) {
    if req.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
        finish(req);
    }
}

/// Where a read-ahead chunk goes when it is read: its export's state (weak: the state holds
/// the filled chunks, which hold their sink).
struct FillSink(Weak<Mutex<RaState>>);

impl ReplySink for FillSink {
    fn complete(&self, req: Arc<Request>) {
        let Some(st) = self.0.upgrade() else { return };
        let data = match req.error() {
            0 => Ok(req.clone()),
            e => Err(e),
        };
        let id = req.fill.unwrap_or(u64::MAX);
        let (chunk_off, waiters) = lock(&st).filled(id, data.clone());
        for w in waiters {
            serve_waiter(&w, chunk_off, &data);
        }
    }
}

/// Copy the part of a filled chunk (at `chunk_off`; or its error) that READ `w` asked for.
fn copy_chunk(w: &Request, chunk_off: u64, data: &Result<Arc<Request>, u32>) {
    let c = match data {
        Ok(c) => c,
        Err(e) => {
            w.error.store(*e, Ordering::Relaxed);
            return;
        }
    };
    let from = w.offset_bytes.max(chunk_off);
    let to = (w.offset_bytes + w.len_bytes).min(chunk_off + c.len_bytes);
    if from >= to {
        return;
    }
    let n = (to - from) as usize;
    let src = &c.buf.as_slice()[(from - chunk_off) as usize..][..n];
    // SAFETY: each chunk fills a disjoint range of the READ's buffer, which is read (for the
    // reply) only after its last part was copied (as the pieces in execute).
    let dst = unsafe { w.buf.range_mut((from - w.offset_bytes) as usize, n) };
    dst.copy_from_slice(src);
}

/// A chunk READ `w` waited on was read: copy its part; the last one finishes the READ.
fn serve_waiter(w: &Arc<Request>, chunk_off: u64, data: &Result<Arc<Request>, u32>) {
    copy_chunk(w, chunk_off, data);
    piece_done(w);
}

/// The last piece completed: FUA sync, statistics, reply.
fn finish(req: &Arc<Request>) {
    if req.fill.is_some() {
        // A read-ahead chunk: to its state, no statistics, no reply.
        req.sink.complete(req.clone());
        return;
    }
    if let Some(st) = &req.ra {
        let mut g = lock(st);
        g.write_end(req.offset_bytes, req.len_bytes);
        req.export.stats.note_read_ahead(&g.stats);
    }
    let e = &req.export;
    if req.fua && writes(req.command) && req.error.load(Ordering::Relaxed) == 0 {
        let mask = req.touched.load(Ordering::Relaxed);
        let n = e.backings.len();
        let devs = (0..n).filter(|&i| i >= 64 || mask & (1 << i) != 0);
        if let Err(err) = e.sync_for_fua(devs) {
            req.error.store(nbd_errno(&err), Ordering::Relaxed);
        }
    }
    let error = req.error.load(Ordering::Relaxed);
    let lat = req.arrived.elapsed().as_nanos() as u64;
    let s = &e.stats;
    let r = Ordering::Relaxed;
    // A failed request counts as an error only: its bytes were not read or written.
    if error != 0 {
        s.errors.fetch_add(1, r);
        req.sink.complete(req.clone());
        return;
    }
    match req.command {
        Command::Read => {
            s.read_ops.fetch_add(1, r);
            s.read_bytes.fetch_add(req.len_bytes, r);
            s.read_lat.record(lat);
        }
        Command::Write => {
            s.write_ops.fetch_add(1, r);
            s.write_bytes.fetch_add(req.len_bytes, r);
            s.write_lat.record(lat);
        }
        Command::Flush => drop(s.flush_ops.fetch_add(1, r)),
        Command::Trim => drop(s.trim_ops.fetch_add(1, r)),
        Command::WriteZeroes { .. } => drop(s.zero_ops.fetch_add(1, r)),
        Command::Disc => {}
    }
    req.sink.complete(req.clone());
}
