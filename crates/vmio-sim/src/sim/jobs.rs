//! The workload driver: jobs, their phases, and when each issues its next request.
//!
//! ```text
//! phase p starts → JobStart of every job of group p
//! JobStart: runtime set → JobEnd at start + ramp + runtime
//!           open-loop trace → Arrival at its first timestamp; else try_issue
//! try_issue (closed loop): while !stopping && !fsync_waiting && inflight < iodepth:
//!     fio: next I/O | fsync (waits for inflight = 0) | done
//!     FileBench: next I/O of a thread; a thread's fsync is issued at once
//!     trace with replay_no_stall: the next record, timestamps ignored
//! Arrival (open loop): issue the record whatever is outstanding; schedule the next
//! io_done: stats in the measured window [start + ramp, end]; pending fsync; try_issue
//! a job finishes when stopping and nothing is in flight; the last job of a phase starts
//! the next non-empty phase (fio's stonewall groups)
//! ```
//!
//! Sources: fio(1) `runtime`, `ramp_time`, `stonewall`/`new_group`, `iodepth`, `fsync`,
//! `read_iolog` with `replay_no_stall`; FileBench personalities (one outstanding request per
//! thread).

use super::event::Event;
use super::guest::GIo;
use super::{DiskPlace, JobBinding, Sim, SimError};
use crate::metrics::DirStats;
use vmio_core::request::Op;
use vmio_core::units::quote;
use vmio_core::workload::{
    FilebenchGen, Generator, Next, Personality, Replay, TimedIo, WorkloadError,
};
use vmio_core::Ns;

/// Where a job's requests come from.
enum Source {
    /// A fio job: closed loop, `iodepth` outstanding.
    Fio(Generator),
    /// A FileBench personality: closed loop, one outstanding request per FileBench thread.
    Filebench(FilebenchGen),
    /// A trace: open loop, each request issued at its (scaled) time; `pending` is the next.
    Replay {
        replay: Replay,
        /// fio's `replay_no_stall`: closed loop at the job's iodepth, timestamps ignored.
        no_stall: bool,
        pending: Option<TimedIo>,
    },
}

pub(super) struct JobState {
    pub(super) name: String,
    src: Source,
    /// Start of the job's region on its disk (trace and FileBench offsets are relative).
    base_bytes: u64,
    disk: usize,
    iodepth: u32,
    phase: u32,
    runtime_ns: Option<Ns>,
    pub(super) ramp_ns: Ns,
    pub(super) start_ns: Ns,
    pub(super) end_ns: Ns,
    pub(super) finish_ns: Ns,
    stopping: bool,
    pub(super) finished: bool,
    inflight: u32,
    fsync_waiting: bool,
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
            let d = &disks[gd];
            if !b.spec.direct {
                let n = format!(
                    "job '{}': direct=0 (the guest page cache) is not modelled yet; its I/O reaches the virtual disk as with direct=1",
                    b.spec.name
                );
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            let sync_engine = matches!(
                b.spec.ioengine.as_str(),
                "psync" | "sync" | "pvsync" | "pvsync2" | "vsync"
            );
            let mut iodepth = if sync_engine {
                1
            } else {
                b.spec.iodepth.max(1)
            };
            if sync_engine && b.spec.iodepth > 1 {
                notes.push(format!(
                    "job '{}': ioengine={} is synchronous; iodepth={} behaves as 1 (as in fio)",
                    b.spec.name, b.spec.ioengine, b.spec.iodepth
                ));
            }
            let base = b.spec.offset_bytes.min(d.size_bytes);
            let region = b
                .spec
                .size_bytes
                .unwrap_or(d.size_bytes - base)
                .min(d.size_bytes - base);
            vmio_core::workload::fio_job::check_ends(&b.spec).map_err(|source| {
                SimError::Workload {
                    file: b.job_file.clone(),
                    source,
                }
            })?;
            if region == 0 && (b.spec.filebench.is_some() || b.trace.is_some()) {
                return Err(SimError::Workload {
                    file: b.job_file.clone(),
                    source: WorkloadError::EmptyRegion {
                        job: quote(&b.spec.name),
                        line: b.spec.line,
                        offset_bytes: b.spec.offset_bytes,
                        size_bytes: region,
                        disk_bytes: d.size_bytes,
                    },
                });
            }
            if b.spec.filebench.is_some() && b.spec.runtime_ns.is_none() {
                return Err(SimError::Job(format!(
                    "{}:{}: job '{}': a filebench workload runs until stopped; give it a runtime",
                    b.job_file, b.spec.line, b.spec.name
                )));
            }
            let sources: Vec<Source> = if let Some(name) = &b.spec.filebench {
                let p = Personality::parse(name).map_err(|source| SimError::Filebench {
                    file: b.job_file.clone(),
                    source,
                })?;
                let mut v = Vec::new();
                for c in 0..b.spec.numjobs.max(1) {
                    let g = FilebenchGen::new(
                        p,
                        region,
                        vmio_core::rng::Rng::derive(
                            seed,
                            &format!("filebench/{}/{c}", b.spec.name),
                        )
                        .next_u64(),
                    )
                    .map_err(|source| SimError::Filebench {
                        file: b.job_file.clone(),
                        source,
                    })?;
                    iodepth = g.threads();
                    v.push(Source::Filebench(g));
                }
                v
            } else if let Some(ios) = &b.trace {
                let scale = b.spec.replay_time_scale as f64 / 100.0;
                (0..b.spec.numjobs.max(1))
                    .map(|_| {
                        let mut replay =
                            Replay::new(ios.clone(), region, scale, b.spec.loops.max(1));
                        let pending = replay.next();
                        Source::Replay {
                            replay,
                            no_stall: b.spec.replay_no_stall,
                            pending,
                        }
                    })
                    .collect()
            } else {
                Generator::clones(&b.spec, d.size_bytes, seed)
                    .map_err(|source| SimError::Workload {
                        file: b.job_file.clone(),
                        source,
                    })?
                    .into_iter()
                    .map(Source::Fio)
                    .collect()
            };
            for (c, src) in sources.into_iter().enumerate() {
                phases = phases.max(b.spec.group_id + 1);
                let base_bytes = if matches!(src, Source::Fio(_)) {
                    0
                } else {
                    base
                };
                job_states.push(JobState {
                    name: b.spec.name.clone(),
                    src,
                    base_bytes,
                    disk: gd,
                    iodepth,
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
        if let Source::Replay {
            pending,
            no_stall: false,
            ..
        } = &self.work.jobs[j].src
        {
            match pending {
                Some(io) => self.q.push(now + io.at_ns, Event::Arrival(j).pack()),
                None => {
                    self.work.jobs[j].stopping = true;
                    self.maybe_finish(now, j);
                }
            }
            return;
        }
        self.try_issue(now, j);
    }

    /// The next request of a trace is due: issue it whatever is outstanding (open loop).
    pub(super) fn arrival(&mut self, now: Ns, j: usize) {
        if self.work.jobs[j].stopping {
            return;
        }
        let base = self.work.jobs[j].base_bytes;
        let start = self.work.jobs[j].start_ns;
        let Source::Replay {
            replay, pending, ..
        } = &mut self.work.jobs[j].src
        else {
            return;
        };
        let Some(io) = pending.take() else { return };
        *pending = replay.next();
        let next_at = pending.map(|p| start + p.at_ns);
        self.issue(now, j, io.op, base + io.offset_bytes, io.len_bytes);
        match next_at {
            Some(t) => self.q.push(t, Event::Arrival(j).pack()),
            None => {
                self.work.jobs[j].stopping = true;
                self.maybe_finish(now, j);
            }
        }
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

    fn try_issue(&mut self, now: Ns, j: usize) {
        loop {
            let job = &mut self.work.jobs[j];
            if job.stopping || job.fsync_waiting || job.inflight >= job.iodepth {
                break;
            }
            let base = job.base_bytes;
            let next = match &mut job.src {
                Source::Fio(g) => g.next(),
                Source::Filebench(g) => {
                    let io = g.next();
                    if io.op == Op::Flush {
                        // A FileBench thread's fsync does not wait for the other threads.
                        self.issue(now, j, Op::Flush, 0, 0);
                        continue;
                    }
                    Next::Io {
                        op: io.op,
                        offset_bytes: base + io.offset_bytes,
                        len_bytes: io.len_bytes,
                    }
                }
                Source::Replay {
                    no_stall: false, ..
                } => break,
                Source::Replay {
                    replay, pending, ..
                } => match pending.take() {
                    Some(io) => {
                        *pending = replay.next();
                        Next::Io {
                            op: io.op,
                            offset_bytes: base + io.offset_bytes,
                            len_bytes: io.len_bytes,
                        }
                    }
                    None => Next::Done,
                },
            };
            match next {
                Next::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                } => self.issue(now, j, op, offset_bytes, len_bytes),
                Next::Fsync => {
                    let job = &mut self.work.jobs[j];
                    if job.inflight == 0 {
                        self.issue(now, j, Op::Flush, 0, 0);
                    } else {
                        job.fsync_waiting = true;
                    }
                }
                Next::Done => {
                    self.work.jobs[j].stopping = true;
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
