//! The workload driver: jobs, their phases, and when each issues its next request.
//!
//! Every job clone is a `vmio_core::workload::Workload` (fio job, FileBench personality, trace
//! replay); the driver knows only that trait, whose contract it keeps:
//!
//! ```text
//! phase p starts → JobStart of every job of group p
//! JobStart: fio's invalidate (a job through the guest: its clean cached pages dropped);
//!           runtime set → JobEnd at start + ramp + runtime; try_issue
//! try_issue: while !stopping && !fsync_waiting && !sync_blocked && !arrival_pending
//!                  && !draining
//!                  && inflight < depth:
//!     match workload.next(now - start):
//!       Io     → issue
//!       Flush  → issue a flush (waits for nothing)
//!       Fsync  → by the job's engine (vmio_core::fio::engine::SyncIssue; a job through
//!                the guest's page cache: Drain):
//!                Blocking (libaio): issue a flush now, sync_blocked until it completes
//!                Queued (io_uring, posixaio, nbd): issue a flush now, go on
//!                Drain: issue a flush if nothing is in flight, else fsync_waiting
//!       File   → app_issue: the file operation to the VM's guest (guestos.rs)
//!       Drain  → draining if anything is in flight
//!       Wait   → stop asking until a completion
//!       At(t)  → Arrival at start + t; arrival_pending
//!       Done   → stopping
//! issue: Direct route (direct=1 on a block device) → the virtual disk (guest.rs);
//!        Block route (direct=0) → app_issue: the guest's page cache over the block device
//! Arrival: arrival_pending = false; try_issue
//! io_done / app_done: stats in the measured window [start + ramp, end] (a file step
//!          also calls workload.completed(tag)); draining ends at inflight = 0; the fsync
//!          waiting for this completion (fsync_waiting and inflight = 0) is issued; try_issue.
//!          While sync_blocked, a completion other than the sync's is held: it keeps its
//!          slot (fio's cur_depth counts an io_u until it is reaped) and its bytes count for
//!          the VM now; held completions are reaped (accounted, with that time) when the
//!          thread next stops issuing: its queue full (backend.c do_io: wait_for_completions
//!          reaps every event there is), or it waits for anything else. fio's thread reaps
//!          nothing while it is in fsync(2), and stamps a completion when it reaps it
//!          (io_u.c ios_completed)
//! a job finishes when stopping and nothing is in flight; the last job of a phase starts
//! the next non-empty phase (fio's stonewall groups)
//! ```
//!
//! Pacing (fio's `rate`, `rate_iops`, `rate_process`, `rate_min`, `thinktime*`, `startdelay`,
//! `iodepth_batch_complete_min`, `iodepth_low`; rules in `vmio_core::fio::pace`), for a job
//! that sets one of them:
//!
//! ```text
//! JobStart before the start delay (from the run's start) → JobStart again at the delay
//! try_issue, each turn: ramp over → the rate's epoch moves to the ramp's end;
//!     a think due (handle_thinktime) → hold Think(spin, sleep);
//!     the step (a held one first) is a read/write the rate holds back (rate_ddir) → keep
//!     it, hold Until(its time); a hold waits for nothing in flight (io_u_quiesce), then
//!     a think's spin runs as a CPU step on the job's thread (cpu.rs), then an Arrival at
//!     now + sleep / at the rate's time
//!   queue full → reap: wait for min(complete_min, in flight) completions and at most
//!     iodepth_low in flight (wait_for_completions)
//! io_done: count completions; reap progress; rate_min checked (the job stops, a note)
//! ```
//!
//! `iodepth_batch_submit` and `iodepth_batch_complete_max` change nothing here: vmio submits
//! and reaps in no time, so a batch goes out (and completions are reaped) at the instant fio
//! would commit it (fio commits a partial batch whenever it waits for completions). fio
//! stamps a completion when it reaps it; vmio when the disk completes it, except across a
//! blocking sync (above), where the two differ by the sync's time.
//!
//! An open-loop replay (depth u32::MAX) thus issues one request per Arrival and nothing on a
//! completion; a closed-loop one (fio, FileBench, `replay_no_stall`) issues on completions.
//! A VM's per-second bytes count its jobs' direct I/O, or, for a VM with a guest kernel, what
//! its virtual disks move (`count_vm_bytes`).
//!
//! Sources: fio(1) `runtime`, `ramp_time`, `stonewall`/`new_group`, `iodepth`, `fsync`,
//! `invalidate`, `read_iolog` with `replay_no_stall`; FileBench personalities and the `app=`
//! applications (one file operation outstanding per thread).

use super::breakdown::{app_parts, JobBreakdown, Parts, Spent};
use super::event::Event;
use super::guest::Origin;
use super::guestos::{App, NO_PARTS};
use super::{DiskPlace, JobBinding, Sim, SimError};
use crate::metrics::DirStats;
use vmio_core::fio::engine::{sync_issue, SyncIssue};
use vmio_core::fio::pace::{depth_rules, start_delay, Gate, Pacer};
use vmio_core::fio::JobSpec;
use vmio_core::guest::os::{AppOp, Invalidate};
use vmio_core::request::Op;
use vmio_core::rng::Rng;
use vmio_core::workload::{FileOp, JobWorkload, Step, Target, Workload};
use vmio_core::Ns;

/// How a job's requests reach its disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Straight to the virtual disk (`direct=1` on a block device: no guest cache).
    Direct,
    /// Through the guest's page cache over the block device (`direct=0`; `sync`: O_SYNC).
    Block { sync: bool },
    /// File operations on the guest filesystem of the disk: the guest's handle of each of
    /// the workload's files (set once the guest opened them).
    Files { handles: Vec<u32> },
    /// fio's null engine: no device I/O; each request completes after fio's own loop cost
    /// (`vmio_core::fio::engine::NULL_IO_NS`), one at a time.
    Null,
}

pub(super) struct JobState {
    pub(super) name: String,
    /// The requests of this clone (vmio-core's workload module).
    pub(super) work: JobWorkload,
    /// `work.depth()`, read once.
    depth: u32,
    pub(super) disk: usize,
    pub(super) vm: u32,
    pub(super) route: Route,
    /// fio's `invalidate`: drop the guest's clean cached pages of the job's target at start.
    invalidate: bool,
    phase: u32,
    runtime_ns: Option<Ns>,
    pub(super) ramp_ns: Ns,
    pub(super) start_ns: Ns,
    pub(super) end_ns: Ns,
    pub(super) finish_ns: Ns,
    stopping: bool,
    pub(super) finished: bool,
    inflight: u32,
    /// An fsync waits for the requests in flight to complete (`SyncIssue::Drain`).
    fsync_waiting: bool,
    /// How the job's engine runs its fsyncs (`Drain` for a job through the page cache).
    sync: SyncIssue,
    /// The job's thread is in a blocking fsync (`SyncIssue::Blocking`): it issues nothing
    /// and reaps nothing until that flush completes.
    sync_blocked: bool,
    /// Completions while `sync_blocked`: op, bytes, issue time, submission latency; reaped
    /// (accounted) when the thread next stops issuing after the sync (`Sim::reap_held`).
    unreaped: Vec<Held>,
    /// The workload named a time (`Step::At`); its Arrival event is queued.
    arrival_pending: bool,
    /// The workload asked for nothing more until nothing is outstanding (`Step::Drain`).
    draining: bool,
    pub(super) stats: [DirStats; 4],
    /// Its reads', writes' and trims' latency by layer (breakdown.rs).
    pub(super) bd: JobBreakdown,
    /// The tag of the job's CPU step in flight (CPU jobs run one step at a time).
    cpu_tag: u32,
    /// fio's rate, thinktime, rate_min, startdelay and iodepth batching (`Pacing`); None:
    /// the job sets none of them.
    pace: Option<Box<Pacing>>,
}

/// A completion held while the job's thread is in a blocking sync: op, bytes, issue time,
/// submission latency and its parts by layer.
type Held = (Option<Op>, u64, Ns, Ns, Option<Parts>);

/// A job's pacing state (module doc: "pacing").
struct Pacing {
    rules: Pacer,
    /// The I/O the rate held back until its time.
    held: Option<Step>,
    /// Waiting for the job's I/Os in flight to complete, then sleeping (fio's io_u_quiesce
    /// before a rate or think sleep).
    hold: Option<Hold>,
    /// The start delay, not yet waited.
    delay_ns: Ns,
    /// The rate's epoch: the start, then the end of the ramp (fio's reset_all_stats).
    epoch_ns: Ns,
    ramp_reset: bool,
    /// I/Os issued and completed (thinktime_blocks counts one of them).
    issued: u64,
    completed: u64,
    /// Bytes and I/Os completed per direction since the epoch (the minimum-rate check).
    done_bytes: [u64; 2],
    done_ios: [u64; 2],
    /// The think's spin is on the job's thread (a CPU step in flight).
    spinning: bool,
    /// fio's wait_for_completions when the queue is full: `(need, got)` completions.
    reap: Option<(u32, u32)>,
    complete_min: u32,
    low: u32,
}

/// What a paced job waits for once nothing is in flight.
#[derive(Clone, Copy)]
enum Hold {
    /// A think: `spin` ns of CPU on the job's thread, then a sleep of `sleep` ns.
    Think { spin: Ns, sleep: Ns },
    /// The rate's time for the held I/O (absolute).
    Until(Ns),
}

impl Pacing {
    /// The pacing of clone `clone` of `spec` with `depth`, or None when it sets nothing.
    fn new(spec: &JobSpec, clone: u32, depth: u32, seed: u64) -> Option<Box<Pacing>> {
        let p = &spec.pace;
        let min_bs = [&spec.bs.read, &spec.bs.write]
            .map(|t| t.iter().map(|&(b, _)| b).min().unwrap_or(4096));
        let label = |what: &str| format!("{what}/{}/{clone}", spec.name);
        let rules = Pacer::new(p, min_bs, Rng::derive(seed, &label("pace")));
        let delay_ns = start_delay(p, &mut Rng::derive(seed, &label("startdelay")));
        let (_, complete_min, _, low) = depth_rules(p, depth);
        let reaps = complete_min > 1 || low < depth;
        (rules.is_active() || delay_ns > 0 || reaps).then(|| {
            Box::new(Pacing {
                rules,
                held: None,
                hold: None,
                delay_ns,
                epoch_ns: 0,
                ramp_reset: false,
                issued: 0,
                completed: 0,
                done_bytes: [0; 2],
                done_ios: [0; 2],
                spinning: false,
                reap: None,
                complete_min: if reaps { complete_min } else { 1 },
                low: if reaps { low } else { depth },
            })
        })
    }

    /// Whether the job waits (a hold, or a reap not yet complete).
    fn waiting(&self) -> bool {
        self.hold.is_some() || self.reap.is_some()
    }

    /// The ramp ended (at `ramp_end`): fio's reset_all_stats restarts the rate's clock.
    fn ramp(&mut self, now: Ns, ramp_end: Ns) {
        if !self.ramp_reset && ramp_end > self.epoch_ns && now >= ramp_end {
            self.ramp_reset = true;
            self.epoch_ns = ramp_end;
            self.rules.restart();
            self.done_bytes = [0; 2];
            self.done_ios = [0; 2];
        }
    }

    /// A think is due (fio's handle_thinktime): hold for it.
    fn think_due(&mut self) -> bool {
        let think = self.rules.think(self.completed, self.issued);
        if let Some((spin, sleep)) = think {
            self.hold = Some(Hold::Think { spin, sleep });
        }
        think.is_some()
    }

    /// The rate holds `step` back (fio's rate_ddir): keep it and hold until its time.
    fn rate_holds(&mut self, now: Ns, step: Step) -> bool {
        let Some((dir, _)) = data_dir(&step) else {
            return false;
        };
        match self.rules.gate(dir, now - self.epoch_ns) {
            Gate::Go => false,
            Gate::Until(t) => {
                self.held = Some(step);
                self.hold = Some(Hold::Until(self.epoch_ns.saturating_add(t)));
                true
            }
        }
    }

    /// `step` is issued now.
    fn issued(&mut self, step: Step) {
        if let Some((dir, bytes)) = data_dir(&step) {
            self.issued += 1;
            self.rules.issued(dir, bytes);
        }
    }
}

/// The direction (0 read, 1 write) and bytes of a data step, for the rate.
fn data_dir(step: &Step) -> Option<(usize, u64)> {
    let op = match *step {
        Step::Io { op, len_bytes, .. } => return dir_of(op).map(|d| (d, len_bytes)),
        Step::File { op, .. } => op,
        _ => return None,
    };
    match op {
        FileOp::Read { len, .. } => Some((0, len)),
        FileOp::Write { len, .. } => Some((1, len)),
        _ => None,
    }
}

fn dir_of(op: Op) -> Option<usize> {
    match op {
        Op::Read => Some(0),
        Op::Write => Some(1),
        _ => None,
    }
}

impl JobDriver {
    /// `bytes` of VM `vm` completed at `now` (its per-second timeline). The timeline is a
    /// dense array over the first [`TIMELINE_MAX_S`] seconds of simulated time: a slow or
    /// long run (`rate=1`, a device latency of days) would otherwise size it by its simulated
    /// duration; bytes after that are left out of it, and the report says so.
    pub(super) fn count_vm_bytes(&mut self, now: Ns, vm: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let sec = now / vmio_core::SEC;
        if sec >= TIMELINE_MAX_S {
            self.timeline_cut = true;
            return;
        }
        let sec = sec as usize;
        let tl = &mut self.timeline[vm];
        if tl.len() <= sec {
            tl.resize(sec + 1, 0);
        }
        tl[sec] += bytes;
    }
}

impl JobState {
    /// The files of the job's workload (none for block I/O).
    pub(super) fn files(&self) -> &[vmio_core::workload::FileDecl] {
        self.work.files()
    }
}

/// The workload driver's state: every job (one per fio clone), its binding, the phase.
pub(super) struct JobDriver {
    pub(super) jobs: Vec<JobState>,
    pub(super) bindings: Vec<(JobBinding, u32)>,
    pub(super) phase: u32,
    pub(super) phases: u32,
    /// Bytes completed per VM per second of virtual time (measured windows only), over the
    /// first [`TIMELINE_MAX_S`] seconds.
    pub(super) timeline: Vec<Vec<u64>>,
    /// Bytes completed after [`TIMELINE_MAX_S`] were left out of the timeline.
    pub(super) timeline_cut: bool,
}

/// The per-second timeline of each VM's bytes (the JSON's `vms[].bytes_per_s`) covers at
/// most this many seconds of simulated time (one day: 675 KiB per VM), so that its memory
/// and output do not grow with a run's simulated duration.
pub const TIMELINE_MAX_S: u64 = 86_400;

/// Per-direction index into `JobState::stats`.
fn dir_index(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Trim => 2,
        Op::Flush => 3,
    }
}

impl JobDriver {
    /// One job per clone of each binding, against disk `disk_base[vm] + disk` of `disks`;
    /// notes on what the model does differently from fio go to `notes`.
    pub(super) fn build(
        jobs: &[JobBinding],
        disks: &[DiskPlace],
        disk_base: &[usize],
        vms: usize,
        seed: u64,
        notes: &mut Vec<String>,
    ) -> Result<JobDriver, SimError> {
        let mut job_states = Vec::new();
        let mut bindings = Vec::new();
        let mut phases = 0;
        for b in jobs {
            let gd = disk_base[b.vm] + b.disk;
            let route = if b.spec.is_cpu() {
                Route::Direct
            } else if b.spec.engine() == vmio_core::fio::engine::EngineModel::Null {
                Route::Null
            } else if b.files {
                Route::Files {
                    handles: Vec::new(),
                }
            } else if b.spec.direct {
                Route::Direct
            } else {
                Route::Block { sync: false }
            };
            let target = match (&disks[gd].fs, b.files) {
                (Some((bytes, mount)), true) => Target::Filesystem {
                    bytes: *bytes,
                    mount,
                },
                _ => Target::Disk {
                    bytes: disks[gd].size_bytes,
                },
            };
            let works =
                vmio_core::workload::workloads(&b.spec, target, b.trace.as_deref(), seed, notes)
                    .map_err(|source| SimError::Workload {
                        file: b.job_file.clone(),
                        source,
                    })?;
            phases = phases.max(b.spec.group_id + 1);
            for (c, work) in works.into_iter().enumerate() {
                let pace = Pacing::new(&b.spec, c as u32, work.depth(), seed);
                job_states.push(JobState {
                    name: b.spec.name.clone(),
                    depth: work.depth(),
                    work,
                    disk: gd,
                    vm: b.vm as u32,
                    route: route.clone(),
                    invalidate: b.spec.invalidate,
                    phase: b.spec.group_id,
                    runtime_ns: b.spec.runtime_ns.filter(|&r| r > 0),
                    ramp_ns: b.spec.ramp_time_ns,
                    start_ns: 0,
                    end_ns: Ns::MAX,
                    finish_ns: 0,
                    stopping: false,
                    finished: false,
                    inflight: 0,
                    fsync_waiting: false,
                    sync: if route == Route::Direct {
                        sync_issue(&b.spec.ioengine)
                    } else {
                        SyncIssue::Drain
                    },
                    sync_blocked: false,
                    unreaped: Vec::new(),
                    arrival_pending: false,
                    draining: false,
                    stats: crate::metrics::job_stats(&b.spec).map_err(SimError::Job)?,
                    bd: JobBreakdown::default(),
                    cpu_tag: 0,
                    pace,
                });
                bindings.push((b.clone(), c as u32));
            }
        }
        if job_states.is_empty() {
            return Err(SimError::Job("the job file defines no job to run".into()));
        }
        Ok(JobDriver {
            jobs: job_states,
            bindings,
            phase: 0,
            phases,
            timeline: vec![Vec::new(); vms],
            timeline_cut: false,
        })
    }
}

impl Sim {
    pub(super) fn start_phase(&mut self, phase: u32) {
        self.work.phase = phase;
        let now = self.q.now();
        for (i, j) in self.work.jobs.iter().enumerate() {
            if j.phase == phase {
                self.q.push(now, Event::JobStart(i).pack());
            }
        }
    }

    pub(super) fn job_start(&mut self, now: Ns, j: usize) {
        // fio's startdelay counts from the run's start (its genesis), not the group's.
        if let Some(p) = self.work.jobs[j].pace.as_mut() {
            let delay = std::mem::take(&mut p.delay_ns);
            if now < delay {
                self.q.push(delay, Event::JobStart(j).pack());
                return;
            }
            p.epoch_ns = now;
        }
        self.invalidate(j);
        let job = &mut self.work.jobs[j];
        job.start_ns = now;
        if let Some(r) = job.runtime_ns {
            job.end_ns = now.saturating_add(job.ramp_ns).saturating_add(r);
            let end = job.end_ns;
            if end > self.limits.max_sim_time_ns {
                self.bound = Some(format!(
                    "job '{}': its runtime (ramp_time + runtime from its start at {}) ends at {}, past the bound on simulated time, {} (--max-sim-time; max_sim_time= in vmio.simulate); accepted: a shorter runtime, or a larger bound",
                    vmio_core::units::quote(&job.name),
                    super::shown_time(now),
                    super::shown_time(end),
                    super::shown_time(self.limits.max_sim_time_ns)
                ));
                return;
            }
            self.q.push(end, Event::JobEnd(j).pack());
        }
        self.try_issue(now, j);
    }

    /// fio's `invalidate=1` (its default) as a buffered job starts: the guest drops the clean
    /// cached pages of the job's block device or files (fio: BLKFLSBUF, posix_fadvise
    /// DONTNEED), so a job does not read what an earlier phase left in the guest's cache.
    /// `invalidate=0` keeps them.
    fn invalidate(&mut self, j: usize) {
        let job = &self.work.jobs[j];
        if !job.invalidate {
            return;
        }
        let vm = job.vm as usize;
        let Some(g) = self.guests.vms[vm].as_mut() else {
            return;
        };
        match &job.route {
            Route::Direct | Route::Null => {}
            Route::Block { .. } => {
                let local = (job.disk - self.disk_base[vm]) as u32;
                g.os.invalidate(Invalidate::Disk(local));
            }
            Route::Files { handles } => g.os.invalidate(Invalidate::Files(handles)),
        }
    }

    /// A paced job's hold (a think, a rate's time) starts once nothing is in flight (fio's
    /// io_u_quiesce, then its sleep); io_done calls this again at the last completion.
    fn pace_sleep(&mut self, now: Ns, j: usize) {
        let job = &mut self.work.jobs[j];
        let Some(p) = job.pace.as_deref_mut() else {
            return;
        };
        if job.inflight > 0 {
            return;
        }
        let Some(hold) = p.hold.take() else {
            return;
        };
        let at = match hold {
            Hold::Think { spin, sleep } if spin > 0 => {
                // fio's usec_spin: CPU time on the job's thread; the sleep follows it.
                p.hold = Some(Hold::Think { spin: 0, sleep });
                p.spinning = true;
                job.inflight += 1;
                self.cpu_job(now, j, spin);
                return;
            }
            Hold::Think { sleep, .. } => now.saturating_add(sleep),
            Hold::Until(t) => {
                if t > self.limits.max_sim_time_ns {
                    self.bound = Some(format!(
                        "job '{}': its rate (rate= or rate_iops=) holds its next I/O until {}, past the bound on simulated time, {} (--max-sim-time; max_sim_time= in vmio.simulate); accepted: a higher rate, a smaller size or runtime, or a larger bound",
                        vmio_core::units::quote(&job.name),
                        super::shown_time(t),
                        super::shown_time(self.limits.max_sim_time_ns)
                    ));
                    return;
                }
                t.max(now)
            }
        };
        job.arrival_pending = true;
        self.q.push(at, Event::Arrival(j).pack());
    }

    /// A paced job's completion of `len` bytes of `op` (None: no data; `measured`: inside the
    /// measured window): thinktime's count, the reap of a full queue, the minimum rate.
    fn pace_done(&mut self, now: Ns, j: usize, op: Option<Op>, len: u64, measured: bool) {
        let job = &mut self.work.jobs[j];
        let Some(p) = job.pace.as_deref_mut() else {
            return;
        };
        let dir = op.and_then(dir_of);
        if dir.is_some() {
            p.completed += 1;
        }
        if let Some((need, got)) = p.reap {
            let got = got + 1;
            p.reap = (got < need || job.inflight > p.low).then_some((need, got));
        }
        let Some(d) = dir.filter(|_| measured) else {
            return;
        };
        p.done_bytes[d] += len;
        p.done_ios[d] += 1;
        let Some(why) = p
            .rules
            .min_rate_missed(now - p.epoch_ns, p.done_bytes, p.done_ios)
        else {
            return;
        };
        let at = (now - job.start_ns) as f64 / vmio_core::SEC as f64;
        self.notes.push(format!(
            "job '{}': {why}; the job stopped at {at:.3} s as fio's does (fio ends it with error EIO, \"check_min_rate\")",
            vmio_core::units::quote(&job.name)
        ));
        self.job_end(now, j);
    }

    /// The time a workload named came: ask it again.
    pub(super) fn arrival(&mut self, now: Ns, j: usize) {
        self.work.jobs[j].arrival_pending = false;
        self.try_issue(now, j);
    }

    pub(super) fn job_end(&mut self, now: Ns, j: usize) {
        self.work.jobs[j].stopping = true;
        self.maybe_finish(now, j);
    }

    fn maybe_finish(&mut self, now: Ns, j: usize) {
        let job = &mut self.work.jobs[j];
        if job.stopping && job.inflight == 0 && !job.finished {
            job.finished = true;
            job.finish_ns = now;
            let phase = job.phase;
            if self
                .work
                .jobs
                .iter()
                .filter(|o| o.phase == phase)
                .all(|o| o.finished)
            {
                let mut next = phase + 1;
                while next < self.work.phases && !self.work.jobs.iter().any(|o| o.phase == next) {
                    next += 1;
                }
                if next < self.work.phases {
                    self.start_phase(next);
                } else {
                    self.work.phase = self.work.phases;
                }
            }
        }
    }

    /// Ask job `j`'s workload for requests while it may issue (the module doc's rules); then,
    /// out of a blocking sync with completions held, reap them.
    fn try_issue(&mut self, now: Ns, j: usize) {
        self.issue_while_free(now, j);
        let job = &self.work.jobs[j];
        if !job.unreaped.is_empty() && !job.sync_blocked {
            self.reap_held(now, j);
        }
    }

    fn issue_while_free(&mut self, now: Ns, j: usize) {
        loop {
            let job = &mut self.work.jobs[j];
            if job.stopping
                || job.fsync_waiting
                || job.sync_blocked
                || job.arrival_pending
                || job.draining
                || job.pace.as_ref().is_some_and(|p| p.waiting())
            {
                break;
            }
            if job.inflight >= job.depth {
                if !job.unreaped.is_empty() {
                    // Held completions: reap them (after the loop) before waiting.
                    break;
                }
                if let Some(p) = job.pace.as_mut() {
                    // fio's wait_for_completions: reap at least min(complete_min, in
                    // flight), then on while more than iodepth_low are in flight.
                    p.reap = Some((p.complete_min.min(job.inflight).max(1), 0));
                }
                break;
            }
            let step = match job.pace.as_deref_mut() {
                None => job.work.next(now - job.start_ns),
                Some(p) => {
                    p.ramp(now, job.start_ns + job.ramp_ns);
                    if p.think_due() {
                        self.pace_sleep(now, j);
                        break;
                    }
                    // A fio job drawing both directions: fio's rate_ddir picks one first.
                    let rated = p.held.is_none() && p.rules.limits_rate();
                    if let (true, JobWorkload::Fio(g)) = (rated, &mut job.work) {
                        if let Some(d) = g.next_dir() {
                            let (dir, gate) = p.rules.choose(d, now - p.epoch_ns);
                            g.force_dir(dir);
                            if let Gate::Until(t) = gate {
                                p.hold = Some(Hold::Until(p.epoch_ns.saturating_add(t)));
                                self.pace_sleep(now, j);
                                break;
                            }
                        }
                    }
                    let step = match p.held.take() {
                        Some(step) => step,
                        None => job.work.next(now - job.start_ns),
                    };
                    if p.rate_holds(now, step) {
                        self.pace_sleep(now, j);
                        break;
                    }
                    p.issued(step);
                    step
                }
            };
            match step {
                Step::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                } => self.issue(now, j, op, offset_bytes, len_bytes),
                Step::Flush => self.issue(now, j, Op::Flush, 0, 0),
                Step::Fsync => match job.sync {
                    SyncIssue::Blocking => {
                        job.sync_blocked = true;
                        self.issue(now, j, Op::Flush, 0, 0);
                    }
                    SyncIssue::Queued => self.issue(now, j, Op::Flush, 0, 0),
                    SyncIssue::Drain if job.inflight == 0 => self.issue(now, j, Op::Flush, 0, 0),
                    SyncIssue::Drain => job.fsync_waiting = true,
                },
                Step::At(t) => {
                    job.arrival_pending = true;
                    let at = job.start_ns + t;
                    self.q.push(at, Event::Arrival(j).pack());
                }
                Step::File { op, tag } => {
                    job.inflight += 1;
                    let handle = match &job.route {
                        Route::Files { handles } => handles[op.file() as usize],
                        _ => unreachable!("only jobs on a filesystem ask for file steps"),
                    };
                    let app = App {
                        job: j,
                        vm: job.vm,
                        op: match op {
                            FileOp::Read { .. } => Some(Op::Read),
                            FileOp::Write { .. } | FileOp::Append { .. } => Some(Op::Write),
                            FileOp::Fsync { .. } => Some(Op::Flush),
                            _ => None,
                        },
                        len: op.bytes(),
                        issue_ns: now,
                        tag: Some(tag),
                        bd: NO_PARTS,
                    };
                    self.app_issue(now, app, AppOp::File { handle, op });
                }
                Step::Drain => {
                    if job.inflight > 0 {
                        job.draining = true;
                        break;
                    }
                }
                Step::Cpu { ns, tag } => {
                    job.inflight += 1;
                    job.cpu_tag = tag;
                    self.cpu_job(now, j, ns);
                }
                // Nothing now: a completion asks again (io_done → try_issue).
                Step::Wait => break,
                Step::Done => {
                    job.stopping = true;
                    self.maybe_finish(now, j);
                    break;
                }
            }
        }
    }

    /// Job `j` issues one request: it is in flight until the guest completes all its parts.
    fn issue(&mut self, now: Ns, j: usize, op: Op, offset: u64, len: u64) {
        let job = &mut self.work.jobs[j];
        let disk = job.disk;
        // fiojob: ioengine=null completes here, the next request after the engine's cost.
        if job.route == Route::Null {
            use vmio_core::fio::engine::NULL_IO_NS;
            let from = job.start_ns + job.ramp_ns;
            if now >= from && now + NULL_IO_NS <= job.end_ns {
                // One I/O at a time: depth 1, done NULL_IO_NS after now.
                let at = now + NULL_IO_NS - from;
                job.stats[dir_index(op)].record(at, 1, len, 0, NULL_IO_NS);
                if op != Op::Flush {
                    // fio's own loop: the job layer.
                    job.bd.record(Some(&[0; 9]), NULL_IO_NS);
                }
            }
            job.arrival_pending = true;
            self.q.push(now + NULL_IO_NS, Event::Arrival(j).pack());
            return;
        }
        job.inflight += 1;
        // A job on a filesystem asks for block steps only for its fsyncs and flushes (the
        // guest's block device fsync); anything else is buffered block I/O.
        let sync = match job.route {
            Route::Direct => {
                return self.guest_issue(now, Origin::Job(j), disk, op, offset, len);
            }
            Route::Block { sync } => sync,
            Route::Files { .. } | Route::Null => false,
        };
        let vm = job.vm;
        let app = App {
            job: j,
            vm,
            op: Some(op),
            len,
            issue_ns: now,
            tag: None,
            bd: NO_PARTS,
        };
        let local = (disk - self.disk_base[vm as usize]) as u32;
        self.app_issue(
            now,
            app,
            AppOp::Block {
                disk: local,
                op,
                offset,
                len,
                sync,
            },
        );
    }

    /// Job `j`'s CPU step is done (cpu.rs): no data, nothing counted.
    pub(super) fn cpu_job_done(&mut self, now: Ns, j: usize) {
        let job = &mut self.work.jobs[j];
        // A think's spin is the driver's, not a step of the workload.
        let spin = job
            .pace
            .as_deref_mut()
            .map(|p| std::mem::take(&mut p.spinning));
        if spin != Some(true) {
            let tag = job.cpu_tag;
            job.work.completed(tag);
        }
        self.io_done(now, j, None, 0, now, 0, Spent::Guest);
    }

    /// The guest completed application operation `app`.
    /// `below`: the parts of the block request that released it (breakdown.rs).
    pub(super) fn app_done(&mut self, now: Ns, app: App, below: Option<&Parts>) {
        let j = app.job;
        if let Some(tag) = app.tag {
            self.work.jobs[j].work.completed(tag);
        }
        let parts = below.map(|b| app_parts(b, app.issue_ns, now));
        let spent = parts.as_ref().map_or(Spent::Guest, Spent::Parts);
        self.io_done(now, j, app.op, app.len, app.issue_ns, 0, spent);
    }

    /// Job `j`'s request (`op` of `len` bytes issued at `issue_ns`; no direction: no data,
    /// not counted) completed, its submission having taken `slat_ns` and its time in each
    /// layer as `spent` says (breakdown.rs): account it, then issue
    /// what waited for it. While the job's thread is in a blocking sync, a completion other
    /// than the sync's is held: it keeps its slot and is reaped (accounted) when the thread
    /// next stops issuing (`try_issue`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn io_done(
        &mut self,
        now: Ns,
        j: usize,
        op: impl Into<Option<Op>>,
        len: u64,
        issue_ns: Ns,
        slat_ns: Ns,
        spent: Spent,
    ) {
        let op = op.into();
        let disk = self.work.jobs[j].disk;
        let job = &mut self.work.jobs[j];
        if job.sync_blocked {
            if op != Some(Op::Flush) {
                let parts = spent.parts(issue_ns, now);
                self.hold(now, j, (op, len, issue_ns, slat_ns, parts));
                return;
            }
            job.sync_blocked = false;
        }
        job.inflight -= 1;
        let mut timeline = 0;
        let measured = now >= job.start_ns + job.ramp_ns && now <= job.end_ns;
        if let Some(op) = op.filter(|_| measured) {
            let clat = now.saturating_sub(issue_ns + slat_ns);
            let at = now - (job.start_ns + job.ramp_ns);
            job.stats[dir_index(op)].record(at, job.inflight + 1, len, slat_ns, clat);
            if op != Op::Flush {
                match spent {
                    // A guest page-cache hit: one layer, recorded here (the hit's path is
                    // short; a call would be a good part of it).
                    Spent::Guest => job.bd.record(None, slat_ns + clat),
                    _ => job.bd.record_spent(spent, issue_ns, now, slat_ns + clat),
                }
            }
            // A guest's VM counts the bytes its virtual disks move (guestos.rs).
            if job.route == Route::Direct {
                timeline = len;
            }
        }
        if job.draining && job.inflight == 0 {
            job.draining = false;
        }
        let fsync = job.fsync_waiting && job.inflight == 0;
        if fsync {
            job.fsync_waiting = false;
        }
        let vm = self.disks[disk].owner as usize;
        self.work.count_vm_bytes(now, vm, timeline);
        if fsync {
            self.issue(now, j, Op::Flush, 0, 0);
        }
        self.pace_done(now, j, op, len, measured);
        self.pace_sleep(now, j);
        self.try_issue(now, j);
        self.maybe_finish(now, j);
    }

    /// A completion while job `j`'s thread is in a blocking sync: it keeps its slot until
    /// the thread reaps it ([`Sim::reap_held`]); the VM counts the bytes its disk moved now.
    #[cold]
    fn hold(&mut self, now: Ns, j: usize, held: Held) {
        let (op, len) = (held.0, held.1);
        let job = &mut self.work.jobs[j];
        let measured = now >= job.start_ns + job.ramp_ns && now <= job.end_ns;
        let moved = if measured && op.is_some() && job.route == Route::Direct {
            len
        } else {
            0
        };
        job.unreaped.push(held);
        let vm = self.disks[job.disk].owner as usize;
        self.work.count_vm_bytes(now, vm, moved);
    }

    /// fio reaps job `j`'s request at `now`: it leaves the queue and its latencies are
    /// recorded (in the measured window). `io_done` writes the same steps out on its hot path
    /// (calling this from there cost 25-35 instructions an I/O on the page-cache-hit bench).
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &mut self,
        now: Ns,
        j: usize,
        op: Option<Op>,
        len: u64,
        issue: Ns,
        slat: Ns,
        parts: Option<&Parts>,
    ) {
        let job = &mut self.work.jobs[j];
        job.inflight -= 1;
        let measured = now >= job.start_ns + job.ramp_ns && now <= job.end_ns;
        if let Some(op) = op.filter(|_| measured) {
            let clat = now.saturating_sub(issue + slat);
            let at = now - (job.start_ns + job.ramp_ns);
            job.stats[dir_index(op)].record(at, job.inflight + 1, len, slat, clat);
            if op != Op::Flush {
                // The time since its completion is the job's (its thread was in the sync).
                job.bd.record(parts, slat + clat);
            }
        }
    }

    /// Job `j`'s thread stops issuing with completions held by a blocking sync: fio's
    /// wait_for_completions reaps them all now (io_u_queued_complete; they completed
    /// earlier, so it does not wait), and the job goes on.
    fn reap_held(&mut self, now: Ns, j: usize) {
        let mut held = std::mem::take(&mut self.work.jobs[j].unreaped);
        for &(op, len, issue, slat, parts) in &held {
            self.complete(now, j, op, len, issue, slat, parts.as_ref());
        }
        let job = &mut self.work.jobs[j];
        let measured = now >= job.start_ns + job.ramp_ns && now <= job.end_ns;
        if job.draining && job.inflight == 0 {
            job.draining = false;
        }
        for &(op, len, _, _, _) in &held {
            self.pace_done(now, j, op, len, measured);
        }
        held.clear();
        self.work.jobs[j].unreaped = held;
        self.pace_sleep(now, j);
        self.try_issue(now, j);
        self.maybe_finish(now, j);
    }
}

#[cfg(test)]
mod tests {
    //! fio's pacing options against closed forms, on a native host with a RAM disk.
    use crate::output::RunOutput;
    use crate::run::{run, RunInput};
    use vmio_core::{MS, SEC};

    /// A native host whose one disk is a RAM device of 1 µs latency and 1 GB/s.
    const RAM_STACK: &str = "[host]\nhypervisor = \"native\"\n[[device]]\nname = \"a\"\n\
        model = \"ram\"\ncapacity = \"1g\"\nlatency = \"1000ns\"\nbandwidth = 1000000000\n\
        [[volume]]\nname = \"data\"\nlayout = \"single\"\ndevices = [\"a\"]\n\
        [scheduler]\nname = \"none\"\n[[vm]]\nname = \"host\"\n\
        [[vm.disk]]\nname = \"sda\"\nvolume = \"data\"\n";

    fn sim(job: &str) -> RunOutput {
        let job = format!("[j]\ndirect=1\nbs=4k\nsize=512m\n{job}");
        run(&RunInput::texts(RAM_STACK, &job, 1)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The job's IOPS in direction `d` (0 read, 1 write) over its runtime.
    fn iops(o: &RunOutput, d: usize) -> f64 {
        let j = &o.report.jobs[0];
        j.stats[d].total_ios as f64 * SEC as f64 / j.runtime_ns as f64
    }

    #[test]
    fn a_job_limited_to_1000_iops_reports_1000_iops_within_one_percent() {
        for engine in ["ioengine=psync", "ioengine=libaio\niodepth=16"] {
            let o = sim(&format!(
                "rw=randread\n{engine}\nrate_iops=1000\nruntime=2\ntime_based\n"
            ));
            let got = iops(&o, 0);
            assert!((got / 1000.0 - 1.0).abs() < 0.01, "{engine}: {got}");
        }
        // Unlimited, the RAM disk does far more.
        let o = sim("rw=randread\nioengine=psync\nruntime=1\ntime_based\n");
        assert!(iops(&o, 0) > 20_000.0, "{}", iops(&o, 0));
    }

    #[test]
    fn a_byte_rate_limits_bandwidth_and_each_direction_has_its_own() {
        for (rw, d, want) in [("randread", 0, 1u64 << 20), ("randwrite", 1, 2 << 20)] {
            let o = sim(&format!(
                "rw={rw}\nioengine=libaio\niodepth=4\nrate=1m,2m\nruntime=4\ntime_based\n"
            ));
            let j = &o.report.jobs[0];
            let bw = j.stats[d].io_bytes as f64 * SEC as f64 / j.runtime_ns as f64;
            assert!(
                (bw / want as f64 - 1.0).abs() < 0.01,
                "{rw}: {bw} vs {want}"
            );
        }
    }

    #[test]
    fn a_mixed_job_meets_each_directions_rate_as_fio_switches_directions() {
        // rwmixread=70 would give 7 reads per 3 writes; the rates ask for 1:1, and fio's
        // rate_ddir gives way to the direction behind its rate.
        let o = sim("rw=randrw\nrwmixread=70\nioengine=libaio\niodepth=4\nrate_iops=1000\nruntime=2\ntime_based\n");
        for d in [0, 1] {
            let got = iops(&o, d);
            assert!((got / 1000.0 - 1.0).abs() < 0.01, "dir {d}: {got}");
        }
    }

    #[test]
    fn a_poisson_rate_keeps_the_mean_and_draws_from_the_run_seed() {
        let job = "rw=randread\nioengine=libaio\niodepth=4\nrate_iops=2000\nrate_process=poisson\nruntime=5\ntime_based\n";
        let a = sim(job);
        // 10,000 exponential gaps: the count's relative sd is 1 %.
        let got = iops(&a, 0);
        assert!((got / 2000.0 - 1.0).abs() < 0.03, "{got}");
        assert_eq!(
            a.report.jobs[0].stats[0].total_ios,
            sim(job).report.jobs[0].stats[0].total_ios
        );
    }

    #[test]
    fn thinktime_at_queue_depth_one_gives_one_io_per_think_plus_service() {
        let base = sim("rw=randread\nioengine=psync\nruntime=1\ntime_based\n");
        let service_s = 1.0 / iops(&base, 0);
        let o = sim("rw=randread\nioengine=psync\nthinktime=1ms\nruntime=2\ntime_based\n");
        let want = 1.0 / (1e-3 + service_s);
        let got = iops(&o, 0);
        assert!((got / want - 1.0).abs() < 0.01, "{got} vs {want}");
        // Every 4 blocks, with part of the think spent spinning: the same total.
        let o = sim(
            "rw=randread\nioengine=psync\nthinktime=1ms\nthinktime_spin=200us\nthinktime_blocks=4\nruntime=2\ntime_based\n",
        );
        let want = 4.0 / (1e-3 + 4.0 * service_s);
        let got = iops(&o, 0);
        assert!((got / want - 1.0).abs() < 0.01, "{got} vs {want}");
    }

    #[test]
    fn thinktime_spin_is_cpu_time_so_two_spinning_jobs_share_one_core() {
        // One core (CFS): 1 ms of spin per I/O caps both clones together at 1,000 I/Os per
        // second; a think that sleeps lets each clone do 1/(1 ms + service).
        let stack = RAM_STACK.replace(
            "hypervisor = \"native\"\n",
            "hypervisor = \"native\"\ncores = 1\n[cpu]\nmodel = \"cfs\"\n",
        );
        let total = |think: &str| {
            let job = format!(
                "[j]\ndirect=1\nbs=4k\nsize=512m\nrw=randread\nioengine=psync\nnumjobs=2\n{think}runtime=2\ntime_based\n"
            );
            let o = run(&RunInput::texts(&stack, &job, 1)).unwrap_or_else(|e| panic!("{e}"));
            o.report
                .jobs
                .iter()
                .map(|j| j.stats[0].total_ios as f64 * SEC as f64 / j.runtime_ns as f64)
                .sum::<f64>()
        };
        let spin = total("thinktime=1ms\nthinktime_spin=1ms\n");
        assert!((950.0..=1000.0).contains(&spin), "{spin}");
        let sleep = total("thinktime=1ms\n");
        assert!(sleep > 1900.0, "{sleep}");
    }

    #[test]
    fn a_missed_rate_min_stops_the_job_after_the_settle_and_one_cycle_with_a_note() {
        let o = sim("rw=randread\nioengine=psync\nrate_min=100g\nruntime=10\ntime_based\n");
        let j = &o.report.jobs[0];
        // fio: 2 s of settling, a first sample, then the check one rate_cycle later.
        assert!(
            (j.runtime_ns as i64 - 3 * SEC as i64).abs() < MS as i64,
            "{}",
            j.runtime_ns
        );
        assert!(
            o.report
                .notes
                .iter()
                .any(|n| n.starts_with("job 'j': rate_min=107374182400B/s not met")),
            "{:?}",
            o.report.notes
        );
        let o = sim("rw=randread\nioengine=psync\nrate_min=1m\nruntime=4\ntime_based\n");
        assert_eq!(o.report.jobs[0].runtime_ns, 4 * SEC);
    }

    #[test]
    fn verify_reads_back_what_the_job_wrote_doubling_the_bytes_moved() {
        let o = sim("rw=randwrite\nioengine=libaio\niodepth=8\nsize=64m\nverify=crc32c\n");
        let st = &o.report.jobs[0].stats;
        assert_eq!(st[1].io_bytes, 64 << 20);
        assert_eq!(st[0].io_bytes, st[1].io_bytes, "reads equal writes");
        assert_eq!(st[0].total_ios, st[1].total_ios);
        let plain = sim("rw=randwrite\nioengine=libaio\niodepth=8\nsize=64m\n");
        assert_eq!(plain.report.jobs[0].stats[0].io_bytes, 0);
    }

    /// Nanoseconds per I/O of `job` (4k reads of 64 MiB) on a RAM disk of `latency` and
    /// `bandwidth` bytes/s.
    fn ns_per_io(latency: &str, bandwidth: u64, job: &str) -> f64 {
        let stack = RAM_STACK
            .replace("latency = \"1000ns\"", &format!("latency = \"{latency}\""))
            .replace(
                "bandwidth = 1000000000",
                &format!("bandwidth = {bandwidth}"),
            );
        let job = format!("[j]\ndirect=1\nbs=4k\nsize=64m\nrw=randread\n{job}");
        let o = run(&RunInput::texts(&stack, &job, 1)).unwrap_or_else(|e| panic!("{e}"));
        let j = &o.report.jobs[0];
        j.runtime_ns as f64 / j.stats[0].total_ios as f64
    }

    #[test]
    fn iodepth_batch_complete_min_waits_for_that_many_completions_before_refilling() {
        // 1 GB/s: a 4k transfer takes 4096 ns, one at a time. Refilled at each completion,
        // 8 outstanding keep the device busy: 4096 ns per I/O. Waiting for all 8, each
        // batch takes 7 transfers plus what one I/O alone takes (t1, queue depth 1).
        let xfer = 4096.0;
        let t1 = ns_per_io("1000ns", 1_000_000_000, "ioengine=psync\n");
        let qd8 = "ioengine=libaio\niodepth=8\n";
        let refill = ns_per_io("1000ns", 1_000_000_000, qd8);
        assert!((refill / xfer - 1.0).abs() < 0.001, "{refill}");
        let batch = ns_per_io(
            "1000ns",
            1_000_000_000,
            &format!("{qd8}iodepth_batch_complete_min=8\n"),
        );
        let want = (7.0 * xfer + t1) / 8.0;
        assert!((batch / want - 1.0).abs() < 0.01, "{batch} vs {want}");
        // Submitting in batches and reaping up to 8 at once change nothing: vmio's
        // submissions and reaps take no time.
        let same = ns_per_io(
            "1000ns",
            1_000_000_000,
            &format!("{qd8}iodepth_batch_submit=8\niodepth_batch_complete_max=8\n"),
        );
        assert_eq!(same, refill);
    }

    #[test]
    fn iodepth_low_lets_the_queue_drain_to_it_before_refilling() {
        // A latency-bound disk (100 µs, transfers of 4 ns): 8 outstanding I/Os complete
        // together, 8 per t1. With iodepth_low=1 the job refills only with one left in
        // flight: 7 new I/Os per t1.
        let t1 = ns_per_io("100us", 1_000_000_000_000, "ioengine=psync\n");
        let qd8 = "ioengine=libaio\niodepth=8\n";
        let full = ns_per_io("100us", 1_000_000_000_000, qd8);
        let low = ns_per_io("100us", 1_000_000_000_000, &format!("{qd8}iodepth_low=1\n"));
        assert!((full / (t1 / 8.0) - 1.0).abs() < 0.01, "{full} vs {t1}/8");
        assert!((low / (t1 / 7.0) - 1.0).abs() < 0.01, "{low} vs {t1}/7");
    }

    #[test]
    fn startdelay_shifts_the_job_and_not_its_runtime() {
        let plain = sim("rw=read\nioengine=psync\nruntime=1\ntime_based\n");
        let late = sim("rw=read\nioengine=psync\nruntime=1\ntime_based\nstartdelay=2\n");
        assert_eq!(
            plain.report.jobs[0].runtime_ns,
            late.report.jobs[0].runtime_ns
        );
        assert_eq!(
            late.report.virtual_time_ns,
            plain.report.virtual_time_ns + 2 * SEC
        );
    }

    /// A native host whose disk is a flash device of 64 units, 100 µs writes and a volatile
    /// write cache whose FLUSH takes 20 µs.
    const FLASH_STACK: &str = "[host]\nhypervisor = \"native\"\n[[device]]\nname = \"a\"\n\
        model = \"flash\"\ncapacity = \"1g\"\nunits = 64\nwrite_latency = \"100us\"\n\
        flush_latency = \"20us\"\nwrite_cache = true\n\
        [[volume]]\nname = \"data\"\nlayout = \"single\"\ndevices = [\"a\"]\n\
        [scheduler]\nname = \"none\"\n[[vm]]\nname = \"host\"\n\
        [[vm.disk]]\nname = \"sda\"\nvolume = \"data\"\n";

    /// 4 KiB random writes at QD16 with an fdatasync after each, for 1 s, with `engine`:
    /// (writes a second, mean write clat, mean write lat, syncs a second, mean sync
    /// latency), in ns.
    fn synced_writes(engine: &str) -> (f64, f64, f64, f64, f64) {
        let job = format!(
            "[j]\ndirect=1\nbs=4k\nsize=512m\nrw=randwrite\nioengine={engine}\n\
             iodepth=16\nfdatasync=1\nruntime=1\ntime_based\n"
        );
        let o = run(&RunInput::texts(FLASH_STACK, &job, 1)).unwrap_or_else(|e| panic!("{e}"));
        let j = &o.report.jobs[0];
        let per_s = |n: u64| n as f64 * SEC as f64 / j.runtime_ns as f64;
        let (w, s) = (&j.stats[1], &j.stats[3]);
        let (n, m) = (per_s(w.total_ios), w.clat.mean());
        (n, m, w.lat.mean(), per_s(s.total_ios), s.lat.mean())
    }

    #[test]
    fn a_libaio_job_runs_its_fdatasync_in_its_thread_with_its_writes_left_in_flight() {
        // fio's libaio engine: the thread is in fdatasync(2) all the time it is not
        // submitting (in no time here), so it does one write per sync latency, while the
        // writes (100 µs) stay in flight across several syncs (20 µs each).
        let (writes, write_clat, _, syncs, sync_lat) = synced_writes("libaio");
        assert!(
            (syncs / writes - 1.0).abs() < 0.001,
            "{syncs} syncs, {writes} writes"
        );
        let want = SEC as f64 / sync_lat;
        assert!(
            (writes / want - 1.0).abs() < 0.01,
            "{writes}/s against 1/{sync_lat} ns"
        );
        // A write completed during a sync is reaped when the queue is next full: its clat
        // holds that wait, so the 16 slots stay busier than the writes' 100 µs alone.
        let slots = writes * write_clat / SEC as f64;
        assert!(
            slots > 8.0 && slots <= 16.0,
            "{slots} writes in flight on average"
        );
        assert!(write_clat > 150_000.0, "{write_clat} ns");
    }

    #[test]
    fn an_io_uring_job_queues_its_fdatasync_as_one_more_request_in_its_depth() {
        // Every slot of the 16 holds a write or a sync; the pairs move at
        // 16 / (write latency + sync latency) (Little's law on the slots).
        let (writes, write_clat, _, syncs, sync_lat) = synced_writes("io_uring");
        assert!(
            (syncs / writes - 1.0).abs() < 0.001,
            "{syncs} syncs, {writes} writes"
        );
        let want = 16.0 * SEC as f64 / (write_clat + sync_lat);
        assert!(
            (writes / want - 1.0).abs() < 0.02,
            "{writes}/s against {want}/s"
        );
        // Nothing waits for the sync: a write's clat is the device's write alone (100 µs
        // and its 4 KiB transfer).
        assert!(write_clat < 110_000.0, "{write_clat} ns");
    }

    #[test]
    fn a_sync_engine_writes_then_syncs_one_at_a_time() {
        // psync: depth 1, so each write completes, then its fdatasync runs alone.
        let (writes, _, write_lat, _, sync_lat) = synced_writes("psync");
        let want = SEC as f64 / (write_lat + sync_lat);
        assert!(
            (writes / want - 1.0).abs() < 0.02,
            "{writes}/s against {want}/s"
        );
    }
}
