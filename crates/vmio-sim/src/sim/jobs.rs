//! The workload driver: jobs, their phases, and when each issues its next request.
//!
//! Every job clone is a `vmio_core::workload::Workload` (fio job, FileBench personality, trace
//! replay); the driver knows only that trait, whose contract it keeps:
//!
//! ```text
//! phase p starts → JobStart of every job of group p
//! JobStart: fio's invalidate (a job through the guest: its clean cached pages dropped);
//!           runtime set → JobEnd at start + ramp + runtime; try_issue
//! try_issue: while !stopping && !fsync_waiting && !arrival_pending && !draining
//!                  && inflight < depth:
//!     match workload.next(now - start):
//!       Io     → issue
//!       Flush  → issue a flush (waits for nothing)
//!       Fsync  → issue a flush if nothing is in flight, else fsync_waiting
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
//!          waiting for this completion (fsync_waiting and inflight = 0) is issued; try_issue
//! a job finishes when stopping and nothing is in flight; the last job of a phase starts
//! the next non-empty phase (fio's stonewall groups)
//! ```
//!
//! An open-loop replay (depth u32::MAX) thus issues one request per Arrival and nothing on a
//! completion; a closed-loop one (fio, FileBench, `replay_no_stall`) issues on completions.
//! A VM's per-second bytes count its jobs' direct I/O, or, for a VM with a guest kernel, what
//! its virtual disks move (`count_vm_bytes`).
//!
//! Sources: fio(1) `runtime`, `ramp_time`, `stonewall`/`new_group`, `iodepth`, `fsync`,
//! `invalidate`, `read_iolog` with `replay_no_stall`; FileBench personalities and the `app=`
//! applications (one file operation outstanding per thread).

use super::event::Event;
use super::guest::Origin;
use super::guestos::App;
use super::{DiskPlace, JobBinding, Sim, SimError};
use crate::metrics::DirStats;
use vmio_core::guest::os::{AppOp, Invalidate};
use vmio_core::request::Op;
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
    /// An fsync waits for the requests in flight to complete.
    fsync_waiting: bool,
    /// The workload named a time (`Step::At`); its Arrival event is queued.
    arrival_pending: bool,
    /// The workload asked for nothing more until nothing is outstanding (`Step::Drain`).
    draining: bool,
    pub(super) stats: [DirStats; 4],
    /// The tag of the job's CPU step in flight (CPU jobs run one step at a time).
    cpu_tag: u32,
}

impl JobDriver {
    /// `bytes` of VM `vm` completed at `now` (its per-second timeline).
    pub(super) fn count_vm_bytes(&mut self, now: Ns, vm: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let sec = (now / vmio_core::SEC) as usize;
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
    /// Bytes completed per VM per second of virtual time (measured windows only).
    pub(super) timeline: Vec<Vec<u64>>,
}

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
                    arrival_pending: false,
                    draining: false,
                    stats: crate::metrics::job_stats(&b.spec).map_err(SimError::Job)?,
                    cpu_tag: 0,
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
        self.invalidate(j);
        let job = &mut self.work.jobs[j];
        job.start_ns = now;
        if let Some(r) = job.runtime_ns {
            job.end_ns = now + job.ramp_ns + r;
            let end = job.end_ns;
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
            Route::Direct => {}
            Route::Block { .. } => {
                let local = (job.disk - self.disk_base[vm]) as u32;
                g.os.invalidate(Invalidate::Disk(local));
            }
            Route::Files { handles } => g.os.invalidate(Invalidate::Files(handles)),
        }
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

    /// Ask job `j`'s workload for requests while it may issue (the module doc's rules).
    fn try_issue(&mut self, now: Ns, j: usize) {
        loop {
            let job = &mut self.work.jobs[j];
            if job.stopping
                || job.fsync_waiting
                || job.arrival_pending
                || job.draining
                || job.inflight >= job.depth
            {
                break;
            }
            match job.work.next(now - job.start_ns) {
                Step::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                } => self.issue(now, j, op, offset_bytes, len_bytes),
                Step::Flush => self.issue(now, j, Op::Flush, 0, 0),
                Step::Fsync => {
                    if job.inflight == 0 {
                        self.issue(now, j, Op::Flush, 0, 0);
                    } else {
                        job.fsync_waiting = true;
                    }
                }
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
        job.inflight += 1;
        // A job on a filesystem asks for block steps only for its fsyncs and flushes (the
        // guest's block device fsync); anything else is buffered block I/O.
        let sync = match job.route {
            Route::Direct => {
                return self.guest_issue(now, Origin::Job(j), disk, op, offset, len);
            }
            Route::Block { sync } => sync,
            Route::Files { .. } => false,
        };
        let vm = job.vm;
        let app = App {
            job: j,
            vm,
            op: Some(op),
            len,
            issue_ns: now,
            tag: None,
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
        let tag = self.work.jobs[j].cpu_tag;
        self.work.jobs[j].work.completed(tag);
        self.io_done(now, j, None, 0, now, 0);
    }

    /// The guest completed application operation `app`.
    pub(super) fn app_done(&mut self, now: Ns, app: App) {
        let j = app.job;
        if let Some(tag) = app.tag {
            self.work.jobs[j].work.completed(tag);
        }
        self.io_done(now, j, app.op, app.len, app.issue_ns, 0);
    }

    /// Job `j`'s request (`op` of `len` bytes issued at `issue_ns`; no direction: no data,
    /// not counted) completed, its submission having taken `slat_ns`: account it, then issue
    /// what waited for it.
    pub(super) fn io_done(
        &mut self,
        now: Ns,
        j: usize,
        op: impl Into<Option<Op>>,
        len: u64,
        issue_ns: Ns,
        slat_ns: Ns,
    ) {
        let disk = self.work.jobs[j].disk;
        let job = &mut self.work.jobs[j];
        job.inflight -= 1;
        let op = op.into();
        let mut timeline = 0;
        if let Some(op) = op.filter(|_| now >= job.start_ns + job.ramp_ns && now <= job.end_ns) {
            let clat = now.saturating_sub(issue_ns + slat_ns);
            let at = now - (job.start_ns + job.ramp_ns);
            job.stats[dir_index(op)].record(at, job.inflight + 1, len, slat_ns, clat);
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
        self.try_issue(now, j);
        self.maybe_finish(now, j);
    }
}
