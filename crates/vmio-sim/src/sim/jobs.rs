//! The workload driver: jobs, their phases, and when each issues its next request.
//!
//! Every job clone is a `vmio_core::workload::Workload` (fio job, FileBench personality, trace
//! replay); the driver knows only that trait, whose contract it keeps:
//!
//! ```text
//! phase p starts → JobStart of every job of group p
//! JobStart: runtime set → JobEnd at start + ramp + runtime; try_issue
//! try_issue: while !stopping && !fsync_waiting && !arrival_pending && inflight < depth:
//!     match workload.next(now - start):
//!       Io     → issue
//!       Flush  → issue a flush (waits for nothing)
//!       Fsync  → issue a flush if nothing is in flight, else fsync_waiting
//!       At(t)  → Arrival at start + t; arrival_pending
//!       Done   → stopping
//! Arrival: arrival_pending = false; try_issue
//! io_done: stats in the measured window [start + ramp, end]; the fsync waiting for this
//!          completion (fsync_waiting and inflight = 0) is issued; try_issue
//! a job finishes when stopping and nothing is in flight; the last job of a phase starts
//! the next non-empty phase (fio's stonewall groups)
//! ```
//!
//! An open-loop replay (depth u32::MAX) thus issues one request per Arrival and nothing on a
//! completion; a closed-loop one (fio, FileBench, `replay_no_stall`) issues on completions.
//!
//! Sources: fio(1) `runtime`, `ramp_time`, `stonewall`/`new_group`, `iodepth`, `fsync`,
//! `read_iolog` with `replay_no_stall`; FileBench personalities (one outstanding request per
//! thread).

use super::event::Event;
use super::guest::GIo;
use super::{DiskPlace, JobBinding, Sim, SimError};
use crate::metrics::DirStats;
use vmio_core::request::Op;
use vmio_core::workload::{JobWorkload, Step, Workload};
use vmio_core::Ns;

pub(super) struct JobState {
    pub(super) name: String,
    /// The requests of this clone (vmio-core's workload module).
    work: JobWorkload,
    /// `work.depth()`, read once.
    depth: u32,
    disk: usize,
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
    pub(super) stats: [DirStats; 4],
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
            if !b.spec.direct {
                let n = format!(
                    "job '{}': direct=0 (the guest page cache) is not modelled yet; its I/O reaches the virtual disk as with direct=1",
                    b.spec.name
                );
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            let works = vmio_core::workload::workloads(
                &b.spec,
                disks[gd].size_bytes,
                b.trace.as_deref(),
                seed,
                notes,
            )
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
                    stats: Default::default(),
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
        let job = &mut self.work.jobs[j];
        job.start_ns = now;
        if let Some(r) = job.runtime_ns {
            job.end_ns = now + job.ramp_ns + r;
            let end = job.end_ns;
            self.q.push(end, Event::JobEnd(j).pack());
        }
        self.try_issue(now, j);
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
            if job.stopping || job.fsync_waiting || job.arrival_pending || job.inflight >= job.depth
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
                Step::Wait => break,
                Step::File { .. } | Step::Done => {
                    job.stopping = true;
                    self.maybe_finish(now, j);
                    break;
                }
            }
        }
    }

    /// Job `j` issues one request: it is in flight until the guest completes all its parts.
    fn issue(&mut self, now: Ns, j: usize, op: Op, offset: u64, len: u64) {
        let disk = self.work.jobs[j].disk;
        self.work.jobs[j].inflight += 1;
        self.guest_issue(now, j, disk, op, offset, len);
    }

    /// The guest completed request `g` (all its parts) on `disk`, whose submission took
    /// `slat_ns`: account it to its job, then issue what waited for it.
    pub(super) fn io_done(&mut self, now: Ns, g: GIo, disk: usize, slat_ns: Ns) {
        let j = g.job;
        let job = &mut self.work.jobs[j];
        job.inflight -= 1;
        if now >= job.start_ns + job.ramp_ns && now <= job.end_ns {
            let clat = now.saturating_sub(g.issue_ns + slat_ns);
            job.stats[dir_index(g.op)].record(g.len, slat_ns, clat);
            if g.len > 0 {
                let vm = self.disks[disk].owner as usize;
                let sec = (now / vmio_core::SEC) as usize;
                let tl = &mut self.work.timeline[vm];
                if tl.len() <= sec {
                    tl.resize(sec + 1, 0);
                }
                tl[sec] += g.len;
            }
        }
        if job.fsync_waiting && job.inflight == 0 {
            job.fsync_waiting = false;
            self.issue(now, j, Op::Flush, 0, 0);
        }
        self.try_issue(now, j);
        self.maybe_finish(now, j);
    }
}
