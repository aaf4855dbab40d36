//! Workload generation: what a guest application asks of its disk next, as a pure function of
//! the workload description, a seed and the time since the job started (no clock, no I/O).
//! Every kind of job is one [`Workload`]; the engine knows only the trait and decides *when*
//! (it keeps [`Workload::depth`] requests outstanding, waits for the times a workload names,
//! stops at runtime, measures after ramp_time); the workload decides *what*.
//!
//! - [`fio_job`]: a fio job ([`crate::fio::JobSpec`]) following fio's offset, block size and
//!   read/write-mix semantics; one [`Generator`] per numjobs clone, on a disk or on the
//!   files of a filesystem ([`fio_files`]: fio's file names, layout, file service);
//! - [`filebench`]: FileBench's personalities (fileserver, varmail, webserver, oltp) as
//!   file-level workloads: their filesets and each thread's flow of file operations;
//! - [`cpu`]: CPU jobs (fio's `cpuio`, and CPU-bound programs like SPEC's bzip2 and gobmk with
//!   fixed work), asking for CPU time ([`Step::Cpu`]) instead of I/O;
//! - [`iozone`]: iozone's write, read and random tests (`-i 0 -i 1 -i 2`) on one file, with
//!   each pass's timed region for iozone's table;
//! - [`apps`]: applications at file level (LinkBench on an InnoDB-like engine, Mobibench's
//!   SQLite, LevelDB's db_bench fills): their files and each thread's transactions;
//! - [`trace`]: block traces (SNIA MSR-Cambridge, UMass/SPC, blkparse text, fio iolog v2/v3)
//!   and their [`Replay`] (time scaling, address folding, loops);
//! - [`synth`]: synthetic traces shaped like S1's MSN, Exchange and Financial traces; a
//!   profile is a workload too (`Paced<SynthGen>`, open loop), though no job option selects
//!   one yet;
//! - [`stream`]: [`Paced`], a stream of [`TimedIo`] (a trace, a synthetic trace, FileBench's
//!   requests) placed on the job's region and paced open loop (each request at its time) or
//!   closed loop (a fixed number outstanding);
//! - [`kinds`]: the shape of the kinds' registries above (personalities, applications, trace
//!   formats, synthetic profiles: name, aliases, one help line, parameters); [`help_text`]
//!   lists them all;
//! - `region` (internal): the offsets of one region of a fio job (a disk span or a file):
//!   sequential positions, the random map, a distribution's draws;
//! - `perm` (internal): the O(1)-memory random permutation behind fio's random map.
//!
//! [`workloads`] turns a job bound to a [`Target`] (a disk, or a filesystem on one) into its
//! workloads, one [`JobWorkload`] per numjobs clone:
//!
//! ```text
//! workloads(spec, target, trace, seed):
//!   refuse time_based without runtime (fio_job::check_ends)
//!   depth  = 1 with a synchronous ioengine (psync, sync, pvsync, pvsync2, vsync; a note if
//!            iodepth > 1 asked for more), else max(iodepth, 1)
//!   bytes  = the disk's or the filesystem's size
//!   region = [min(offset, bytes), + min(size | rest, rest))
//!   filebench=P: needs a filesystem and a runtime; clone c: FilebenchFlows(P,
//!                dir <mount>/<name>.<c>, fs bytes, derive(seed, "filebench/<name>/<c>")),
//!                depth = P's threads
//!   app=A:       the same rules (filesystem, runtime, directory <top>/<name>.<c>, seed
//!                derive(seed, "app/<name>/<c>")): AppFlows(A, dir, fs bytes, seed); depth =
//!                A's threads. filebench and app together: an error
//!   ioengine=cpuio | cpu_profile=P: one cpu::CpuJob per clone (no region, no device I/O):
//!                cpuio needs cpuload and a runtime; a profile ends when its work is done
//!   iozone=FLAGS: needs a filesystem, no runtime (it ends); clone c: IozoneFlows(
//!                iozone::Options::parse(FLAGS), dir <top>/<name>.<c>), depth 1; with
//!                filebench or app: an error; -s larger than the filesystem: an error
//!   read_iolog:  needs a non-empty region; every clone: Paced(Replay(trace, region,
//!                replay_time_scale / 100, max(loops, 1)), replay_no_stall ? closed loop at
//!                depth : open loop)
//!   Disk:        fio Generator clones on the disk (their own region rules: size | filesize |
//!                rest); the engine reads spec.direct and spec.sync for the guest page cache
//!   Filesystem:  fio Generator clones on files (fio_files: names under directory | mount,
//!                sizes, layout, file service); Step::File ops, tag 0, depth as above
//! ```
//!
//! The engine's side of the contract ([`Step`]): it asks [`Workload::next`] while fewer than
//! `depth` requests are outstanding and no fsync, drain or time is pending; an [`Step::Io`],
//! [`Step::Flush`] or [`Step::File`] is issued at once (a file step counts against `depth`
//! until [`Workload::completed`]); [`Step::Fsync`] is issued once nothing is outstanding;
//! after [`Step::Drain`] it asks nothing until nothing is outstanding, then asks again; after
//! [`Step::Wait`] it asks nothing until one of its steps completes; after
//! [`Step::At`]`(t)` it asks nothing until `t` (an event), then asks again; after
//! [`Step::Done`] it asks nothing.
//!
//! A fio job on files never waits for its own `fsync=N`/`fdatasync=N` (a [`FileOp::Fsync`]
//! step is issued at once like its reads and writes: fio queues a sync io_u with the others,
//! `td_io_queue` does not quiesce and libaio submits it as an aio fsync; a synchronous
//! ioengine has depth 1 anyway). It asks for a [`Step::Drain`] where fio reaps everything in
//! flight (`do_io` before `end_fsync`; each end fsync is synchronous; files are unlinked and
//! closed after the job's I/O is done).

pub mod apps;
pub mod cpu;
pub mod distribution;
pub mod filebench;
pub mod files;
pub mod fio_files;
pub mod fio_job;
pub mod iozone;
pub mod kinds;
mod perm;
mod region;
pub mod stream;
pub mod synth;
pub mod trace;

pub use apps::{App, AppError, AppFlows};
pub use filebench::{FilebenchError, FilebenchFlows, Personality};
pub use files::{FileDecl, FileId, FileLayout, FileOp, IoFlags};
pub use fio_job::Generator;
pub use iozone::{IozoneError, IozoneFlows};
pub use kinds::KindEntry;
pub use stream::{IoStream, Paced, Pacing};
pub use synth::{SynthGen, SynthProfile};
pub use trace::{parse_trace, Replay, TimedIo, TraceError, TraceFormat};

use crate::fio::JobSpec;
use crate::request::Op;
use crate::units::quote;
use crate::Ns;
use thiserror::Error;

/// What a workload asks for next. Offsets are absolute on the job's disk (each workload
/// places its requests in its own region: fio's offset/size rules differ from a trace's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A read, write or trim of `len_bytes` at `offset_bytes` of the job's disk, issued now.
    Io {
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// An fsync of the job's disk (fio's `fsync=N`, `fdatasync=N`, `end_fsync` on a disk): a
    /// flush issued once every earlier request of the job completed; nothing else is issued
    /// meanwhile.
    Fsync,
    /// A flush issued now, whatever is outstanding (a trace's
    /// flush record): it waits for no other request of the job.
    Flush,
    /// Nothing before `t` ns after the job started: the engine asks again at `t`. An open-loop
    /// stream answers this before each of its requests, even when `t` has already come, so
    /// that every request has its own arrival.
    At(Ns),
    /// The job has issued everything it will issue.
    Done,
    /// Nothing now: every thread of the workload waits for one of its outstanding steps
    /// (or for another thread, which waits for one). The engine asks again after the next
    /// completion ([`Workload::completed`]).
    Wait,
    /// A file operation on the guest filesystem (see [`files`]), issued now by the
    /// workload's thread `tag`; the engine calls [`Workload::completed`]`(tag)` when it is
    /// done. Counts against [`Workload::depth`] like an [`Step::Io`].
    File { op: FileOp, tag: u32 },
    /// `ns` of CPU time (on an idle core) by the workload's thread `tag`: the engine runs it
    /// on the job's thread and calls [`Workload::completed`]`(tag)` when it is done. Counts
    /// against [`Workload::depth`] like an [`Step::Io`]; no device I/O ([`cpu`]).
    Cpu { ns: Ns, tag: u32 },
    /// Issue nothing more until every outstanding request of the job has completed, then ask
    /// again (at once when nothing is outstanding). A fio job on files asks for it where fio
    /// reaps everything in flight: before its `end_fsync` fsyncs, after each of them, and
    /// before it closes and unlinks its files.
    Drain,
}

impl Step {
    /// A region-relative request of a stream placed on the disk at `base_bytes`: a flush
    /// becomes [`Step::Flush`], anything else [`Step::Io`] at `base_bytes + offset`.
    pub fn placed(io: TimedIo, base_bytes: u64) -> Step {
        if io.op == Op::Flush {
            Step::Flush
        } else {
            Step::Io {
                op: io.op,
                offset_bytes: base_bytes + io.offset_bytes,
                len_bytes: io.len_bytes,
            }
        }
    }
}

/// One job clone's requests as the engine sees them. See the module doc for the contract.
pub trait Workload: Send {
    /// The next step, `elapsed_ns` after the job started.
    fn next(&mut self, elapsed_ns: Ns) -> Step;

    /// Most requests outstanding at once; `u32::MAX` for an open-loop workload, whose
    /// requests wait for nothing but their time. Constant over the job's life.
    fn depth(&self) -> u32 {
        1
    }

    /// The files the workload uses ([`files`]); none for a block-level workload.
    fn files(&self) -> &[FileDecl] {
        &[]
    }

    /// The [`Step::File`] of thread `tag` completed (called before the engine asks again).
    fn completed(&mut self, _tag: u32) {}
}

/// Every kind of workload a job file builds. An enum rather than a `Box<dyn Workload>`: the
/// engine asks for every request, and a `match` lets the fio generator inline into the
/// engine's loop (callgrind on `vmio bench sim`'s cases: a boxed trait object ran 0.8 to
/// 1.4 % more instructions than the simulator's former per-kind branches, this enum 0.1 to
/// 0.6 %). A new kind of workload is one more variant and one more arm in [`workloads`].
#[derive(Clone, Debug)]
pub enum JobWorkload {
    Fio(Generator),
    Trace(Paced<Replay>),
    Filebench(FilebenchFlows),
    App(AppFlows),
    Iozone(IozoneFlows),
    Cpu(cpu::CpuJob),
}

impl Workload for JobWorkload {
    #[inline]
    fn next(&mut self, elapsed_ns: Ns) -> Step {
        match self {
            JobWorkload::Fio(w) => w.next(elapsed_ns),
            JobWorkload::Trace(w) => w.next(elapsed_ns),
            JobWorkload::Filebench(w) => w.next(elapsed_ns),
            JobWorkload::App(w) => w.next(elapsed_ns),
            JobWorkload::Iozone(w) => w.next(elapsed_ns),
            JobWorkload::Cpu(w) => w.next(elapsed_ns),
        }
    }

    fn depth(&self) -> u32 {
        match self {
            JobWorkload::Fio(w) => w.depth(),
            JobWorkload::Trace(w) => w.depth(),
            JobWorkload::Filebench(w) => w.depth(),
            JobWorkload::App(w) => w.depth(),
            JobWorkload::Iozone(w) => w.depth(),
            JobWorkload::Cpu(w) => w.depth(),
        }
    }

    fn files(&self) -> &[FileDecl] {
        match self {
            JobWorkload::Fio(w) => w.files(),
            JobWorkload::Trace(w) => w.files(),
            JobWorkload::Filebench(w) => w.files(),
            JobWorkload::App(w) => w.files(),
            JobWorkload::Iozone(w) => w.files(),
            JobWorkload::Cpu(w) => w.files(),
        }
    }

    fn completed(&mut self, tag: u32) {
        match self {
            JobWorkload::Fio(w) => w.completed(tag),
            JobWorkload::Trace(w) => w.completed(tag),
            JobWorkload::Filebench(w) => w.completed(tag),
            JobWorkload::App(w) => w.completed(tag),
            JobWorkload::Iozone(w) => w.completed(tag),
            JobWorkload::Cpu(w) => w.completed(tag),
        }
    }
}

/// What a job runs against: a guest disk (block level) or a filesystem on one (files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A disk of `bytes`.
    Disk { bytes: u64 },
    /// A filesystem of `bytes` mounted at `mount` (`/mnt/data`).
    Filesystem { bytes: u64, mount: &'a str },
}

impl Target<'_> {
    /// The size of the disk or of the filesystem.
    pub fn bytes(self) -> u64 {
        match self {
            Target::Disk { bytes } | Target::Filesystem { bytes, .. } => bytes,
        }
    }
}

/// The workloads of `spec` on `target`, one per numjobs clone in clone order; `trace` is the
/// parsed trace of a `read_iolog` job. Notes on what differs from fio go to `notes`. See the
/// module doc for the rules.
pub fn workloads(
    spec: &JobSpec,
    target: Target<'_>,
    trace: Option<&[TimedIo]>,
    seed: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<JobWorkload>, WorkloadError> {
    let disk_bytes = target.bytes();
    notes.extend(fio_job::iodepth_note(spec));
    notes.extend(fio_job::pace_notes(
        spec,
        matches!(target, Target::Filesystem { .. }),
    ));
    let depth = fio_job::iodepth(spec);
    let base = spec.offset_bytes.min(disk_bytes);
    let region = spec
        .size_bytes
        .unwrap_or(disk_bytes - base)
        .min(disk_bytes - base);
    fio_job::check_ends(spec)?;
    if region == 0
        && (spec.filebench.is_some()
            || spec.app.is_some()
            || spec.iozone.is_some()
            || trace.is_some())
    {
        return Err(WorkloadError::EmptyRegion {
            job: quote(&spec.name),
            line: spec.line,
            offset_bytes: spec.offset_bytes,
            size_bytes: region,
            disk_bytes,
        });
    }
    let clones = spec.numjobs.max(1);
    if spec.is_cpu() {
        return cpu_clones(spec, clones);
    }
    if let Some(flags) = &spec.iozone {
        return iozone_clones(spec, target, flags, clones);
    }
    let named = match (&spec.filebench, &spec.app) {
        (Some(_), Some(_)) => {
            return Err(WorkloadError::AppAndFilebench {
                job: quote(&spec.name),
                line: spec.line,
            })
        }
        (Some(name), None) => Some(("filebench", "a FileBench personality", name)),
        (None, Some(name)) => Some(("app", "an application workload", name)),
        (None, None) => None,
    };
    if let Some((option, what, name)) = named {
        if spec.runtime_ns.is_none() {
            return Err(WorkloadError::NeedsRuntime {
                job: quote(&spec.name),
                line: spec.line,
                option,
                name: name.clone(),
                what,
            });
        }
        #[derive(Clone, Copy)]
        enum Named {
            Filebench(Personality),
            App(App),
        }
        let kind = match option {
            "filebench" => Named::Filebench(Personality::parse(name)?),
            _ => Named::App(App::parse(name)?),
        };
        let Target::Filesystem { bytes, mount } = target else {
            return Err(WorkloadError::NeedsFilesystem {
                job: quote(&spec.name),
                line: spec.line,
                option,
                name: name.clone(),
            });
        };
        let top = spec.directory.as_deref().unwrap_or(mount);
        return (0..clones)
            .map(|c| {
                let label = format!("{option}/{}/{c}", spec.name);
                let clone_seed = crate::rng::Rng::derive(seed, &label).next_u64();
                let dir = format!("{top}/{}.{c}", spec.name);
                Ok(match kind {
                    Named::Filebench(p) => {
                        JobWorkload::Filebench(FilebenchFlows::new(p, &dir, bytes, clone_seed)?)
                    }
                    Named::App(a) => JobWorkload::App(AppFlows::new(a, &dir, bytes, clone_seed)?),
                })
            })
            .collect();
    }
    if let Some(ios) = trace {
        let scale = spec.replay_time_scale as f64 / 100.0;
        let pacing = if spec.replay_no_stall {
            Pacing::Closed { depth }
        } else {
            Pacing::Open
        };
        return Ok((0..clones)
            .map(|_| {
                let replay = Replay::new(ios.to_vec(), region, scale, spec.loops.max(1));
                JobWorkload::Trace(Paced::new(replay, base, pacing))
            })
            .collect());
    }
    let clones = match target {
        Target::Disk { bytes } => Generator::clones(spec, bytes, seed)?,
        Target::Filesystem { bytes, mount } => (0..clones)
            .map(|c| Generator::on_filesystem(spec, c, bytes, mount, seed))
            .collect::<Result<_, _>>()?,
    };
    Ok(clones.into_iter().map(JobWorkload::Fio).collect())
}

/// `ioengine=cpuio` or `cpu_profile=P`: one [`cpu::CpuJob`] per clone (no region, no
/// device I/O).
fn cpu_clones(spec: &JobSpec, clones: u32) -> Result<Vec<JobWorkload>, WorkloadError> {
    let (job, line) = (quote(&spec.name), spec.line);
    let one = match &spec.cpu_profile {
        Some(name) => {
            let p = cpu::find(name).ok_or_else(|| cpu::CpuJobError::UnknownProfile {
                job: job.clone(),
                line,
                name: name.clone(),
                accepted: cpu::accepted(),
            })?;
            let job = cpu::CpuJob::profile(p, spec.cpu_work_ns);
            match spec.cpu_ipc {
                Some(ipc) => job.with_ipc(ipc),
                None => job,
            }
        }
        None => {
            let load = spec.cpuload.ok_or(cpu::CpuJobError::NoLoad {
                job: job.clone(),
                line,
            })?;
            if spec.runtime_ns.is_none() {
                return Err(cpu::CpuJobError::NoRuntime { job, line }.into());
            }
            cpu::CpuJob::cpuio(load, spec.cpuchunks_ns)
        }
    };
    Ok((0..clones).map(|_| JobWorkload::Cpu(one.clone())).collect())
}

/// `iozone=FLAGS`: one [`IozoneFlows`] per clone on `<directory | mount>/<name>.<c>/iozone.tmp`;
/// it ends by itself (no runtime needed) and works on files only.
fn iozone_clones(
    spec: &JobSpec,
    target: Target<'_>,
    flags: &str,
    clones: u32,
) -> Result<Vec<JobWorkload>, WorkloadError> {
    let job = || quote(&spec.name);
    if spec.filebench.is_some() || spec.app.is_some() {
        return Err(WorkloadError::IozoneAndOther {
            job: job(),
            line: spec.line,
        });
    }
    let opts = iozone::Options::parse(flags).map_err(|error| WorkloadError::Iozone {
        job: job(),
        line: spec.line,
        flags: flags.to_string(),
        error: Box::new(error),
    })?;
    let Target::Filesystem { bytes, mount } = target else {
        return Err(WorkloadError::NeedsFilesystem {
            job: job(),
            line: spec.line,
            option: "iozone",
            name: flags.to_string(),
        });
    };
    let top = spec.directory.as_deref().unwrap_or(mount);
    (0..clones)
        .map(|c| {
            let w = IozoneFlows::new(opts.clone(), &format!("{top}/{}.{c}", spec.name));
            if opts.size_bytes > bytes {
                return Err(WorkloadError::FileLargerThanFilesystem {
                    job: job(),
                    line: spec.line,
                    path: w.files()[0].path.clone(),
                    file_bytes: opts.size_bytes,
                    fs_bytes: bytes,
                });
            }
            Ok(JobWorkload::Iozone(w))
        })
        .collect()
}

/// A workload that cannot run against the given disk.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WorkloadError {
    #[error(
        "job '{job}' (line {line}): region offset={offset_bytes} size={size_bytes} is empty on a disk of {disk_bytes} bytes; accepted: offset below the disk size and size > 0"
    )]
    EmptyRegion {
        job: String,
        line: usize,
        offset_bytes: u64,
        size_bytes: u64,
        disk_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): region offset={offset_bytes} size={size_bytes} ends beyond the disk of {disk_bytes} bytes; accepted: offset + size <= disk size"
    )]
    RegionBeyondDisk {
        job: String,
        line: usize,
        offset_bytes: u64,
        size_bytes: u64,
        disk_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): {direction} block sizes {sizes:?} have no usable entry; accepted: (bytes > 0, weight > 0) pairs"
    )]
    BadBlockSizes {
        job: String,
        line: usize,
        direction: &'static str,
        sizes: Vec<(u64, u32)>,
    },
    #[error(
        "job '{job}' (line {line}): bs={bs_bytes} is larger than the job's region of {region_bytes} bytes (fio: \"blocksize too large for data set\"); accepted: every block size (the largest of bs, bsrange, bssplit) <= size, and size <= the disk size minus offset"
    )]
    BlockLargerThanRegion {
        job: String,
        line: usize,
        bs_bytes: u64,
        region_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): time_based without a runtime would never end (fio: \"time_based requires a runtime/timeout setting\"); accepted: runtime > 0 with time_based, or no time_based"
    )]
    NeverEnds { job: String, line: usize },
    #[error(
        "job '{job}' (line {line}): would issue {ios} I/Os with no runtime to stop it, more than vmio's {limit}; accepted: a runtime, or a larger bs, smaller size/io_size or number_ios"
    )]
    TooManyIos {
        job: String,
        line: usize,
        ios: u64,
        limit: u64,
    },
    #[error(
        "job '{job}' (line {line}): clone {clone_index} does not exist; accepted: 0 to {last} (numjobs={numjobs})",
        last = .numjobs.saturating_sub(1)
    )]
    NoSuchClone {
        job: String,
        line: usize,
        clone_index: u32,
        numjobs: u32,
    },
    #[error(
        "job '{job}' (line {line}): {option}={name} works on files, and its disk has no guest filesystem; accepted: a disk with a [vm.disk.filesystem] table (type = \"ext4\"), or a directory/filename under its mount point"
    )]
    NeedsFilesystem {
        job: String,
        line: usize,
        /// `filebench` or `app`.
        option: &'static str,
        name: String,
    },
    #[error(
        "job '{job}' (line {line}): {option}={name} runs until stopped ({what} never ends); accepted: a runtime > 0 with {option}"
    )]
    NeedsRuntime {
        job: String,
        line: usize,
        option: &'static str,
        name: String,
        what: &'static str,
    },
    #[error(
        "job '{job}' (line {line}): no file to run on (nrfiles=0, or an empty filename list); accepted: nrfiles >= 1 or filename=name[:name...]"
    )]
    NoFiles { job: String, line: usize },
    #[error(
        "job '{job}' (line {line}): nrfiles={files} is more files than vmio's {limit} per job clone; accepted: nrfiles <= {limit}"
    )]
    TooManyFiles {
        job: String,
        line: usize,
        files: u32,
        limit: u32,
    },
    #[error(
        "job '{job}' (line {line}): files on a filesystem need a size (fio: \"you need to specify size=\"); accepted: size= or filesize="
    )]
    NeedsSize { job: String, line: usize },
    #[error(
        "job '{job}' (line {line}): offset={offset_bytes} is not inside file '{path}' of {file_bytes} bytes (fio: \"you need to specify valid offset=\"); accepted: offset < filesize"
    )]
    OffsetBeyondFile {
        job: String,
        line: usize,
        path: String,
        offset_bytes: u64,
        file_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): file '{path}' of {file_bytes} bytes is larger than the filesystem of {fs_bytes} bytes; accepted: offset + the file's size (filesize, or size / nrfiles) <= the filesystem size"
    )]
    FileLargerThanFilesystem {
        job: String,
        line: usize,
        path: String,
        file_bytes: u64,
        fs_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): filebench and app both name the job's workload; accepted: one of filebench=, app="
    )]
    AppAndFilebench { job: String, line: usize },
    #[error(
        "job '{job}' (line {line}): iozone and filebench or app both name the job's workload; accepted: one of iozone=, filebench=, app="
    )]
    IozoneAndOther { job: String, line: usize },
    #[error("job '{job}' (line {line}): iozone={flags}: {error}")]
    Iozone {
        job: String,
        line: usize,
        flags: String,
        /// Boxed: a large variant would grow every `WorkloadError`.
        error: Box<IozoneError>,
    },
    #[error(transparent)]
    Filebench(#[from] FilebenchError),
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Cpu(#[from] cpu::CpuJobError),
    /// fiopace: a random_distribution that does not fit the job's region.
    #[error(transparent)]
    Distribution(#[from] distribution::DistributionError),
}

/// The workload kinds with their help, plain text (for `vmio help workload`).
pub fn help_text() -> String {
    let mut out = String::new();
    kinds::section(
        &mut out,
        "FileBench personalities (job option filebench=NAME):",
        filebench::PERSONALITIES,
    );
    out.push('\n');
    kinds::section(&mut out, "Applications (job option app=NAME):", apps::APPS);
    out.push('\n');
    kinds::section(
        &mut out,
        "Trace formats (job options read_iolog=PATH, iolog_format=NAME; detected from the first lines when absent):",
        trace::FORMATS,
    );
    out.push('\n');
    kinds::section(
        &mut out,
        "Synthetic trace profiles (vmio trace synth PROFILE):",
        synth::PROFILES,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::fio_job::tests::job as spec;
    use super::trace::tests::io;
    use super::*;
    use crate::MS;

    const KIB: u64 = 1024;
    const GIB: u64 = 1 << 30;
    const DISK: Target = Target::Disk { bytes: 4 * GIB };

    fn build(text: &str, trace: Option<&[TimedIo]>) -> (Vec<JobWorkload>, Vec<String>) {
        let mut notes = Vec::new();
        let w = workloads(&spec(text), DISK, trace, 7, &mut notes).unwrap();
        (w, notes)
    }

    fn write(offset_bytes: u64) -> Step {
        Step::Io {
            op: Op::Write,
            offset_bytes,
            len_bytes: 4 * KIB,
        }
    }

    #[test]
    fn a_fio_job_with_fsync_4_asks_for_an_fsync_after_every_4_writes_at_absolute_offsets() {
        let (mut w, notes) = build(
            "rw=write\nbs=4k\noffset=1m\nsize=32k\nfsync=4\nioengine=libaio\niodepth=8\n",
            None,
        );
        assert_eq!((w.len(), w[0].depth()), (1, 8));
        assert!(notes.is_empty(), "{notes:?}");
        let steps: Vec<Step> = (0..11).map(|_| w[0].next(0)).collect();
        let mut want: Vec<Step> = (0..8).map(|i| write((1 << 20) + i * 4 * KIB)).collect();
        want.insert(4, Step::Fsync);
        want.extend([Step::Fsync, Step::Done]);
        assert_eq!(steps, want);
    }

    #[test]
    fn on_a_disk_fdatasync_asks_for_an_fsync_too_and_fsync_wins_when_both_are_due() {
        let kinds = |text: &str| {
            let (mut w, _) = build(&format!("rw=write\nbs=4k\nsize=24k\n{text}"), None);
            std::iter::from_fn(|| match w[0].next(0) {
                Step::Io { .. } => Some('W'),
                Step::Fsync => Some('F'),
                Step::Done => None,
                s => panic!("a fio job on a disk never asks for {s:?}"),
            })
            .collect::<String>()
        };
        assert_eq!(kinds("fdatasync=2\n"), "WWFWWFWWF");
        assert_eq!(kinds("fsync=3\nfdatasync=2\n"), "WWFWFWFWWF");
    }

    #[test]
    fn a_filesystem_target_gives_each_clone_its_files_and_file_steps_at_iodepth() {
        let target = Target::Filesystem {
            bytes: 4 * GIB,
            mount: "/mnt/data",
        };
        let spec = spec("rw=randread\nsize=1m\nnumjobs=2\nioengine=libaio\niodepth=8\n");
        let mut w = workloads(&spec, target, None, 7, &mut Vec::new()).unwrap();
        assert_eq!(w.len(), 2);
        for (c, w) in w.iter_mut().enumerate() {
            assert_eq!(w.depth(), 8);
            let files = w.files().to_vec();
            assert_eq!(files.len(), 1);
            assert_eq!(files[0].path, format!("/mnt/data/j.{c}.0"));
            assert_eq!(
                (files[0].exists, files[0].size_bytes, files[0].layout),
                (true, 1 << 20, FileLayout::Written)
            );
            assert_eq!(
                w.next(0),
                Step::File {
                    op: FileOp::Open { file: 0 },
                    tag: 0
                }
            );
            assert!(matches!(
                w.next(0),
                Step::File {
                    op: FileOp::Read {
                        file: 0,
                        len: 4096,
                        ..
                    },
                    tag: 0
                }
            ));
        }
        let (w, _) = build("rw=randread\nsize=1m\n", None);
        assert!(w[0].files().is_empty(), "a disk job has no files");
    }

    #[test]
    fn a_synchronous_ioengine_runs_every_clone_at_depth_1_with_one_note_per_job() {
        let (w, notes) = build("rw=randread\nioengine=psync\niodepth=16\nnumjobs=3\n", None);
        assert_eq!(w.iter().map(|w| w.depth()).collect::<Vec<_>>(), [1, 1, 1]);
        assert_eq!(
            notes,
            ["job 'j': ioengine=psync is synchronous; iodepth=16 behaves as 1 (as in fio)"]
        );
        let (w, notes) = build("rw=randread\nioengine=libaio\niodepth=32\n", None);
        assert_eq!((w[0].depth(), notes.len()), (32, 0));
        let (w, notes) = build("rw=randread\nioengine=sync\niodepth=1\n", None);
        assert_eq!((w[0].depth(), notes.len()), (1, 0));
    }

    #[test]
    fn a_filebench_job_gives_each_clone_its_own_fileset_and_one_operation_per_thread() {
        let fs = Target::Filesystem {
            bytes: 4 * GIB,
            mount: "/mnt",
        };
        let job = spec("filebench=varmail\nruntime=1\nnumjobs=2\n");
        let mut w = workloads(&job, fs, None, 7, &mut Vec::new()).unwrap();
        assert_eq!(w.iter().map(|w| w.depth()).collect::<Vec<_>>(), [16, 16]);
        assert!(w[0].files()[0].path.starts_with("/mnt/j.0/bigfileset/"));
        assert!(w[1].files()[0].path.starts_with("/mnt/j.1/bigfileset/"));
        let e = workloads(&job, DISK, None, 7, &mut Vec::new())
            .err()
            .unwrap();
        assert!(e.to_string().contains("has no guest filesystem"), "{e}");
        let tags: Vec<u32> = (0..16)
            .map(|_| match w[0].next(0) {
                Step::File { tag, .. } => tag,
                s => panic!("{s:?}"),
            })
            .collect();
        assert_eq!(tags, (0..16).collect::<Vec<_>>());
        assert_eq!(w[0].next(0), Step::Wait);
    }

    #[test]
    fn an_app_job_gives_each_clone_its_own_directory_and_needs_a_filesystem_and_a_runtime() {
        let fs = Target::Filesystem {
            bytes: 4 * GIB,
            mount: "/mnt",
        };
        let job = spec("app=leveldb-fillsync\nruntime=1\nnumjobs=2\n");
        let mut w = workloads(&job, fs, None, 7, &mut Vec::new()).unwrap();
        assert_eq!(w.iter().map(|w| w.depth()).collect::<Vec<_>>(), [2, 2]);
        assert_eq!(w[0].files()[0].path, "/mnt/j.0/leveldb/MANIFEST-000001");
        assert_eq!(w[1].files()[0].path, "/mnt/j.1/leveldb/MANIFEST-000001");
        assert_eq!(
            w[0].next(0),
            Step::File {
                op: FileOp::Create { file: 0 },
                tag: 0
            }
        );
        let err = |text: &str, target| {
            workloads(&spec(text), target, None, 7, &mut Vec::new())
                .err()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            err("app=sqlite\nruntime=1\n", DISK),
            "job 'j' (line 1): app=sqlite works on files, and its disk has no guest filesystem; accepted: a disk with a [vm.disk.filesystem] table (type = \"ext4\"), or a directory/filename under its mount point"
        );
        assert_eq!(
            err("app=sqlite\n", fs),
            "job 'j' (line 1): app=sqlite runs until stopped (an application workload never ends); accepted: a runtime > 0 with app"
        );
        assert!(err("app=sqlite\nfilebench=varmail\nruntime=1\n", fs)
            .ends_with("accepted: one of filebench=, app="));
        let mut unknown = spec("app=sqlite\nruntime=1\n");
        unknown.app = Some("mysql".into());
        let e = workloads(&unknown, fs, None, 7, &mut Vec::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.ends_with("sqlite-wal-full, leveldb-fillsync, leveldb-compact"),
            "{e}"
        );
    }

    #[test]
    fn an_open_loop_replay_announces_each_request_at_its_scaled_time_then_issues_it() {
        let trace = [
            io(0, Op::Read, 0, 4 * KIB),
            io(0, Op::Write, 8 * KIB, 4 * KIB),
            io(5 * MS, Op::Flush, 0, 0),
        ];
        let (mut w, _) = build(
            "read_iolog=t.log\noffset=1g\nreplay_time_scale=200\n",
            Some(&trace),
        );
        assert_eq!(w[0].depth(), u32::MAX);
        let steps: Vec<Step> = [0, 0, 0, 0, 10 * MS, 10 * MS, 10 * MS]
            .iter()
            .map(|&t| w[0].next(t))
            .collect();
        let at = |op, offset_bytes| Step::Io {
            op,
            offset_bytes: GIB + offset_bytes,
            len_bytes: 4 * KIB,
        };
        assert_eq!(
            steps,
            [
                Step::At(0),
                at(Op::Read, 0),
                Step::At(0),
                at(Op::Write, 8 * KIB),
                Step::At(10 * MS),
                Step::Flush,
                Step::Done
            ]
        );
    }

    #[test]
    fn replay_no_stall_ignores_the_times_and_keeps_iodepth_outstanding() {
        let trace = [
            io(0, Op::Read, 0, 4 * KIB),
            io(9 * MS, Op::Read, 0, 4 * KIB),
        ];
        let (mut w, _) = build(
            "read_iolog=t.log\nreplay_no_stall=1\nioengine=libaio\niodepth=4\nloops=2\n",
            Some(&trace),
        );
        assert_eq!(w[0].depth(), 4);
        let steps: Vec<Step> = (0..5).map(|_| w[0].next(0)).collect();
        let read = Step::Io {
            op: Op::Read,
            offset_bytes: 0,
            len_bytes: 4 * KIB,
        };
        assert_eq!(steps, [read, read, read, read, Step::Done]);
    }

    #[test]
    fn jobs_that_cannot_run_are_refused_naming_the_job_and_what_is_accepted() {
        let err = |text: &str, trace: Option<&[TimedIo]>| {
            workloads(&spec(text), DISK, trace, 7, &mut Vec::new())
                .expect_err(text)
                .to_string()
        };
        assert_eq!(
            err("filebench=varmail\n", None),
            "job 'j' (line 1): filebench=varmail runs until stopped (a FileBench personality never ends); accepted: a runtime > 0 with filebench"
        );
        let mut unknown = spec("filebench=varmail\nruntime=1\n");
        unknown.filebench = Some("webproxy".into());
        let e = workloads(&unknown, DISK, None, 7, &mut Vec::new())
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .ends_with("accepted: fileserver, varmail, webserver, oltp"),
            "{e}"
        );
        assert!(err("read_iolog=t.log\noffset=5g\n", Some(&[]))
            .contains("region offset=5368709120 size=0 is empty on a disk of 4294967296 bytes"));
        assert!(err("rw=read\ntime_based\n", None).contains("time_based without a runtime"));
    }

    #[test]
    fn the_help_lists_every_entry_of_every_kind_with_its_aliases_and_help() {
        let h = help_text();
        for (name, help) in [
            ("fileserver", "fileserver.f"),
            ("varmail", "varmail.f"),
            ("sqlite-delete (sqlite)", "Mobibench"),
            ("leveldb-compact", "db_bench fillrandom"),
            ("spc (umass)", "UMass Trace Repository"),
            ("fio-iolog (iolog)", "iolog v2"),
            ("financial", "S1"),
        ] {
            let line = h.lines().find(|l| l.trim_start().starts_with(name));
            assert!(line.is_some_and(|l| l.contains(help)), "{name}: {h}");
        }
        assert!(!h.contains("snia-msr"), "a quiet alias is not shown: {h}");
    }
}
