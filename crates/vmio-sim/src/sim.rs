//! The simulator: the whole stack driven in virtual time.
//!
//! ```text
//! job ──issue──> guest splits at the vdisk's max request ──> vdisk (queue depth; VMM thread
//!   serializes submit/complete costs) ──> host cache layer by QEMU cache mode:
//!     O_DIRECT (none, directsync): volume map → per-device requests → scheduler → device
//!     buffered (writeback, writethrough, unsafe): page cache hit → copy; miss → fetch with
//!       read-ahead; writes dirty pages → background/periodic writeback, dirty throttling
//!     flush: unsafe ignores it; buffered writes back the file's dirty pages; then FLUSH CACHE
//!       to every device of the volume
//!   <── completion: VMM complete cost ──> job (stats, next I/O)
//! ```
//!
//! Everything is deterministic: the event queue orders by (time, sequence), randomness comes
//! from the workload generators seeded from the run seed, and no hash-map order reaches
//! the output. Page-cache "files" are the VM disks (QEMU opens one image per disk).

use crate::device::{build_device_seeded, DevCmd, Device, DeviceError};
use crate::engine::EventQueue;
use crate::metrics::DirStats;
use crate::vdisk::{InterfaceModel, VirtualDisk};
use std::collections::VecDeque;
use thiserror::Error;
use vmio_core::cache::{
    page_span, CacheMode, PageCache, PageRange, ReadLookup, Readahead, PAGE_BYTES,
};
use vmio_core::fio::{JobSpec, FIO_MAX_JOBS};
use vmio_core::request::{DevIo, Op};
use vmio_core::sched::{self, IoScheduler};
use vmio_core::stack::{Stack, StackError};
use vmio_core::units::{quote, transfer_ns};
use vmio_core::volume::{self, Piece, VolumeError, VolumeLayout};
use vmio_core::workload::filebench::FilebenchError;
use vmio_core::workload::{
    FilebenchGen, Generator, Next, Personality, Replay, TimedIo, WorkloadError,
};
use vmio_core::Ns;

#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error("{file}: {source}")]
    Device {
        file: String,
        #[source]
        source: DeviceError,
    },
    #[error("{file}: {source}")]
    Volume {
        file: String,
        #[source]
        source: VolumeError,
    },
    #[error("{file}: {source}")]
    Workload {
        file: String,
        #[source]
        source: WorkloadError,
    },
    #[error("{file}: {source}")]
    Filebench {
        file: String,
        #[source]
        source: FilebenchError,
    },
    #[error("{0}")]
    Job(String),
}

/// Memory assumed available when `/proc/meminfo` cannot be read (not Linux, no procfs).
pub const FALLBACK_MEMORY_BYTES: u64 = 16 << 30;

/// Memory this process can still allocate: the least of `MemAvailable` of `/proc/meminfo`
/// (or [`FALLBACK_MEMORY_BYTES`]), the address space left under `RLIMIT_AS` (`ulimit -v`:
/// the limit less the current `VmSize`), and the room left in the process's cgroup v2
/// (`memory.max` less `memory.current`), so that a run inside a limit is refused with the
/// estimate rather than aborted by a failed allocation.
pub fn available_memory_bytes() -> u64 {
    let meminfo = proc_kib("/proc/meminfo", "MemAvailable:")
        .map(|kib| kib.saturating_mul(1024))
        .unwrap_or(FALLBACK_MEMORY_BYTES);
    meminfo.min(address_space_left()).min(cgroup_memory_left())
}

/// The `KEY: N kB` value of a /proc file such as /proc/meminfo, in KiB.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let v = text.lines().find_map(|l| l.strip_prefix(key))?;
    v.trim().trim_end_matches("kB").trim().parse().ok()
}

/// `RLIMIT_AS` less the current virtual size; `u64::MAX` when unlimited or unknown.
fn address_space_left() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return u64::MAX;
    }
    let vm_size =
        proc_kib("/proc/self/status", "VmSize:").map_or(0, |kib| kib.saturating_mul(1024));
    lim.rlim_cur.saturating_sub(vm_size)
}

/// `memory.max` less `memory.current` of this process's cgroup (v2); `u64::MAX` when there
/// is no limit or no cgroup v2.
fn cgroup_memory_left() -> u64 {
    let Some(rel) = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        })
    else {
        return u64::MAX;
    };
    let dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match (read("memory.max"), read("memory.current")) {
        (Some(max), Some(cur)) => max.saturating_sub(cur),
        _ => u64::MAX,
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

fn binary_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Refuse a stack whose device models (the SSD FTL tables) and host page cache would need
/// more memory than `available` bytes, before anything is allocated; the error names the
/// largest consumer.
pub fn check_memory(stack: &Stack, available: u64) -> Result<(), SimError> {
    let mut total = 0u64;
    let mut largest: Option<(usize, u64, u64)> = None;
    for (i, d) in stack.devices.iter().enumerate() {
        let (bytes, capacity) =
            crate::device::estimated_bytes(&d.name, &d.model, d.profile.as_deref(), &d.params)
                .map_err(|source| SimError::Device {
                    file: stack.file.clone(),
                    source,
                })?;
        total = total.saturating_add(bytes);
        if !matches!(largest, Some((_, b, _)) if b >= bytes) {
            largest = Some((i, bytes, capacity));
        }
    }
    let buffered = stack
        .vms
        .iter()
        .flat_map(|v| &v.disks)
        .any(|d| !d.cache.direct());
    let pc = if buffered {
        PageCache::estimated_bytes(stack.page_cache.memory_bytes / PAGE_BYTES)
    } else {
        0
    };
    if total.saturating_add(pc) <= available {
        return Ok(());
    }
    let (i, bytes, capacity) = largest.unwrap_or((0, 0, 0));
    let msg = if pc > bytes {
        format!(
            "{}: page_cache.memory {} needs ~{} of page-cache slots and index (with all devices: {}); {} of memory available; accepted: a smaller page_cache memory",
            stack.file,
            binary_size(stack.page_cache.memory_bytes),
            gb(pc),
            gb(total.saturating_add(pc)),
            gb(available)
        )
    } else {
        format!(
            "{}: device[{i}] '{}': capacity {} needs ~{} of FTL tables (all devices: {}); {} of memory available; accepted: smaller or fewer SSDs (about 4.5 bytes per 4 KiB of capacity)",
            stack.file,
            quote(&stack.devices[i].name),
            binary_size(capacity),
            gb(bytes),
            gb(total.saturating_add(pc)),
            gb(available)
        )
    };
    Err(SimError::Job(msg))
}

/// A job bound to the VM disk it runs against.
#[derive(Clone, Debug)]
pub struct JobBinding {
    pub spec: JobSpec,
    pub vm: usize,
    pub disk: usize,
    /// The job file it comes from (for error messages).
    pub job_file: String,
    /// The parsed trace of a `read_iolog` job (read by the caller, which does the file I/O).
    pub trace: Option<Vec<TimedIo>>,
}

/// Resolve a job's `filename` to one of the VM's disks (`/dev/sdb`, `sdb`, or none = first).
pub fn bind_jobs(
    stack: &Stack,
    jobs: &[JobSpec],
    vm: usize,
    job_file: &str,
) -> Result<Vec<JobBinding>, SimError> {
    let v = &stack.vms[vm];
    jobs.iter()
        .map(|spec| {
            let disk = match &spec.filename {
                None => 0,
                Some(f) => {
                    let name = f.trim_start_matches("/dev/");
                    v.disks.iter().position(|d| d.name == name).ok_or_else(|| {
                        SimError::Job(format!(
                            "{job_file}:{}: filename: '{f}' is not a disk of VM '{}'; accepted: {}",
                            spec.line,
                            v.name,
                            v.disks
                                .iter()
                                .map(|d| format!("/dev/{}", d.name))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?
                }
            };
            Ok(JobBinding {
                spec: spec.clone(),
                vm,
                disk,
                job_file: job_file.to_string(),
                trace: None,
            })
        })
        .collect()
}

// ---- event kinds --------------------------------------------------------------------------

const K_JOB_START: u64 = 1;
const K_SUBMIT_DONE: u64 = 2;
const K_HOST_DONE: u64 = 3;
const K_GUEST_DONE: u64 = 4;
const K_DEV_WAKE: u64 = 5;
const K_SCHED_WAKE: u64 = 6;
const K_WB_TIMER: u64 = 7;
const K_JOB_END: u64 = 8;
const K_ARRIVAL: u64 = 9;

#[inline]
fn ev(kind: u64, id: usize) -> u64 {
    (kind << 56) | id as u64
}

/// Pages of writeback kept in flight at most (block-layer queues bound it in Linux).
const WB_MAX_INFLIGHT_PAGES: u64 = 16 * 1024;
/// Pages per writeback chunk (MAX_WRITEBACK_PAGES, 4 MiB).
const WB_CHUNK_PAGES: u64 = 1024;

/// A slab of reusable slots (indices stay valid until freed).
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
    #[inline]
    fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }
    #[inline]
    fn remove(&mut self, i: usize) -> T {
        let v = self.items[i].take().expect("slab slot in use");
        self.free.push(i);
        v
    }
    #[inline]
    fn get(&mut self, i: usize) -> &mut T {
        self.items[i].as_mut().expect("slab slot in use")
    }
}

// ---- runtime state ------------------------------------------------------------------------

struct DevState {
    model: Box<dyn Device>,
    sched: Box<dyn IoScheduler>,
    flushq: VecDeque<DevIo>,
    inflight: usize,
    qd: usize,
    cmds: Slab<DevIo>,
    wake_at: Option<Ns>,
    sched_wake_at: Option<Ns>,
}

struct VolState {
    name: String,
    layout: Box<dyn VolumeLayout>,
    devices: Vec<usize>,
    read_ahead_bytes: u64,
}

struct DiskState {
    volume: usize,
    offset_bytes: u64,
    size_bytes: u64,
    mode: CacheMode,
    owner: u32,
    vdisk: InterfaceModel,
    vmm_busy: Ns,
    inflight: u32,
    waitq: VecDeque<usize>,
    ra: Readahead,
    wb_inflight: u32,
    fsync_waiters: Vec<usize>,
}

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

struct JobState {
    name: String,
    src: Source,
    /// Start of the job's region on its disk (trace and FileBench offsets are relative).
    base_bytes: u64,
    disk: usize,
    iodepth: u32,
    phase: u32,
    runtime_ns: Option<Ns>,
    ramp_ns: Ns,
    start_ns: Ns,
    end_ns: Ns,
    finish_ns: Ns,
    started: bool,
    stopping: bool,
    finished: bool,
    inflight: u32,
    fsync_waiting: bool,
    stats: [DirStats; 4],
}

struct GIo {
    job: usize,
    op: Op,
    len: u64,
    issue_ns: Ns,
    parts: u32,
}

struct VReq {
    gio: usize,
    disk: usize,
    op: Op,
    offset: u64,
    len: u64,
    waits: u32,
}

enum Cont {
    DirectDone(usize),
    Fetch {
        file: u32,
        first: u64,
        n: u64,
        waiters: Vec<usize>,
    },
    Writeback {
        disk: usize,
        pages: u64,
    },
    FsyncWrites(usize),
    WriteThrough(usize),
    FlushDone(usize),
}

struct Barrier {
    remaining: u32,
    cont: Cont,
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

/// Summary of one simulated job for the output layer.
pub struct JobReport {
    pub name: String,
    pub spec: JobSpec,
    pub clone: u32,
    pub vm: String,
    pub disk: String,
    pub runtime_ns: Ns,
    /// read, write, trim, sync
    pub stats: [DirStats; 4],
}

pub struct DeviceReport {
    pub name: String,
    pub model: &'static str,
    pub stats: crate::device::DeviceStats,
    pub params: Vec<(String, String)>,
}

pub struct SimReport {
    pub seed: u64,
    pub jobs: Vec<JobReport>,
    pub devices: Vec<DeviceReport>,
    pub virtual_time_ns: Ns,
    pub events: u64,
    pub page_cache: vmio_core::cache::pagecache::PageCacheStats,
    /// Pages in the host page cache at the end of the run, and how many were dirty.
    pub cached_pages: u64,
    pub dirty_pages: u64,
    pub volumes: Vec<(String, u64, u64)>,
    pub notes: Vec<String>,
    /// Per VM: name, weight, bytes completed in each second of virtual time.
    pub vm_timeline: Vec<(String, u32, Vec<u64>)>,
}

pub struct Sim {
    q: EventQueue,
    devs: Vec<DevState>,
    vols: Vec<VolState>,
    disks: Vec<DiskState>,
    jobs: Vec<JobState>,
    bindings: Vec<(JobBinding, u32)>,
    gios: Slab<GIo>,
    vreqs: Slab<VReq>,
    barriers: Slab<Barrier>,
    pc: PageCache,
    copy_rate: u64,
    copy_busy: Ns,
    dirty_limit: u64,
    dirty_bg: u64,
    dirty_expire: Ns,
    wb_interval: Ns,
    wb_inflight_pages: u64,
    wb_expired_before: Option<Ns>,
    wb_timer_armed: bool,
    throttled: VecDeque<usize>,
    phase: u32,
    phases: u32,
    seed: u64,
    lookup: ReadLookup,
    pieces: Vec<Piece>,
    ranges: Vec<PageRange>,
    done: Vec<u64>,
    waits: Vec<u32>,
    notes: Vec<String>,
    vm_names: Vec<String>,
    vm_weights: Vec<u32>,
    /// Bytes completed per VM per second of virtual time (measured windows only).
    timeline: Vec<Vec<u64>>,
}

impl Sim {
    /// Build a simulation of `stack` running `jobs` with `seed`.
    pub fn new(mut stack: Stack, jobs: Vec<JobBinding>, seed: u64) -> Result<Sim, SimError> {
        let file = stack.file.clone();
        let mut total_jobs = 0u64;
        for b in &jobs {
            total_jobs += u64::from(b.spec.numjobs.max(1));
            if total_jobs > u64::from(FIO_MAX_JOBS) {
                return Err(SimError::Job(format!(
                    "{}:{}: job '{}' (vm[{}]): numjobs={} brings the run (all VMs together) to {total_jobs} jobs, above fio's limit of {FIO_MAX_JOBS} jobs (FIO_MAX_JOBS); accepted: at most {FIO_MAX_JOBS} jobs in one run",
                    b.job_file,
                    b.spec.line,
                    quote(&b.spec.name),
                    b.vm,
                    b.spec.numjobs
                )));
            }
        }
        check_memory(&stack, available_memory_bytes())?;
        let weights: Vec<u32> = stack.vms.iter().map(|v| v.weight).collect();
        let mut devs = Vec::new();
        for d in &stack.devices {
            let dev_seed =
                vmio_core::rng::Rng::derive(seed, &format!("device/{}", d.name)).next_u64();
            let model =
                build_device_seeded(&d.name, &d.model, d.profile.as_deref(), &d.params, dev_seed)
                    .map_err(|source| SimError::Device {
                    file: file.clone(),
                    source,
                })?;
            let qd = model.queue_depth().max(1);
            devs.push(DevState {
                model,
                sched: sched::build(&stack.scheduler, &weights),
                flushq: VecDeque::new(),
                inflight: 0,
                qd,
                cmds: Slab::new(),
                wake_at: None,
                sched_wake_at: None,
            });
        }
        let mut vols = Vec::new();
        for v in &stack.volumes {
            let caps: Vec<u64> = v
                .devices
                .iter()
                .map(|&i| devs[i].model.capacity_bytes())
                .collect();
            let layout = volume::build(&v.name, v.layout, &caps, &v.params).map_err(|source| {
                SimError::Volume {
                    file: file.clone(),
                    source,
                }
            })?;
            let ra = v
                .read_ahead_kb
                .map(|kb| kb * 1024)
                .unwrap_or_else(|| layout.default_read_ahead_bytes());
            vols.push(VolState {
                name: v.name.clone(),
                layout,
                devices: v.devices.clone(),
                read_ahead_bytes: ra,
            });
        }
        let vol_bytes: Vec<u64> = vols.iter().map(|v| v.layout.capacity_bytes()).collect();
        stack.resolve_disk_sizes(&vol_bytes)?;

        let mut disks = Vec::new();
        let mut disk_base = Vec::new();
        for (vi, vm) in stack.vms.iter().enumerate() {
            disk_base.push(disks.len());
            for d in &vm.disks {
                disks.push(DiskState {
                    volume: d.volume,
                    offset_bytes: d.offset_bytes,
                    size_bytes: d.size_bytes,
                    mode: d.cache,
                    owner: vi as u32,
                    vdisk: InterfaceModel::new(d.interface, d.queue_depth),
                    vmm_busy: 0,
                    inflight: 0,
                    waitq: VecDeque::new(),
                    ra: Readahead::new(vols[d.volume].read_ahead_bytes / PAGE_BYTES),
                    wb_inflight: 0,
                    fsync_waiters: Vec::new(),
                });
            }
        }

        let mut notes = Vec::new();
        let mut job_states = Vec::new();
        let mut bindings = Vec::new();
        let mut phases = 0;
        for b in &jobs {
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
                    started: false,
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
        let pcs = &stack.page_cache;
        let cap_pages = pcs.memory_bytes / PAGE_BYTES;
        let vm_names: Vec<String> = stack.vms.iter().map(|v| v.name.clone()).collect();
        let vm_weights = stack.vms.iter().map(|v| v.weight).collect();
        Ok(Sim {
            q: EventQueue::new(),
            devs,
            vols,
            disks,
            jobs: job_states,
            bindings,
            gios: Slab::new(),
            vreqs: Slab::new(),
            barriers: Slab::new(),
            pc: PageCache::new(cap_pages),
            copy_rate: pcs.copy_rate_bps,
            copy_busy: 0,
            dirty_limit: cap_pages * pcs.dirty_ratio as u64 / 100,
            dirty_bg: cap_pages * pcs.dirty_background_ratio as u64 / 100,
            dirty_expire: pcs.dirty_expire_ns,
            wb_interval: pcs.writeback_interval_ns,
            wb_inflight_pages: 0,
            wb_expired_before: None,
            wb_timer_armed: false,
            throttled: VecDeque::new(),
            phase: 0,
            phases,
            seed,
            lookup: ReadLookup::default(),
            pieces: Vec::new(),
            ranges: Vec::new(),
            done: Vec::new(),
            waits: Vec::new(),
            notes,
            timeline: vec![Vec::new(); vm_names.len()],
            vm_names,
            vm_weights,
        })
    }

    /// Run to completion and report.
    pub fn run(mut self) -> SimReport {
        self.start_phase(0);
        while let Some((now, p)) = self.q.pop() {
            let id = (p & ((1 << 56) - 1)) as usize;
            match p >> 56 {
                K_JOB_START => self.job_start(now, id),
                K_SUBMIT_DONE => self.host_start(now, id),
                K_HOST_DONE => self.after_copy(now, id),
                K_GUEST_DONE => self.guest_done(now, id),
                K_DEV_WAKE => self.dev_wake(now, id),
                K_SCHED_WAKE => {
                    if self.devs[id].sched_wake_at == Some(now) {
                        self.devs[id].sched_wake_at = None;
                    }
                    self.pump(now, id)
                }
                K_WB_TIMER => self.wb_timer(now),
                K_JOB_END => self.job_end(now, id),
                K_ARRIVAL => self.arrival(now, id),
                _ => unreachable!("unknown event kind"),
            }
            if self.phase >= self.phases && self.jobs.iter().all(|j| j.finished) {
                break;
            }
        }
        self.report()
    }

    fn report(self) -> SimReport {
        let now = self.q.now();
        let jobs = self
            .jobs
            .into_iter()
            .zip(self.bindings)
            .map(|(j, (b, clone))| {
                let measured_from = j.start_ns + j.ramp_ns;
                let end = j.end_ns.min(j.finish_ns.max(measured_from));
                JobReport {
                    name: j.name,
                    vm: self.vm_names[b.vm].clone(),
                    disk: b.spec.filename.clone().unwrap_or_default(),
                    spec: b.spec,
                    clone,
                    runtime_ns: end.saturating_sub(measured_from),
                    stats: j.stats,
                }
            })
            .collect();
        let devices = self
            .devs
            .iter()
            .map(|d| DeviceReport {
                name: d.model.name().to_string(),
                model: d.model.model(),
                stats: d.model.stats(),
                params: d.model.params(),
            })
            .collect();
        SimReport {
            seed: self.seed,
            jobs,
            devices,
            virtual_time_ns: now,
            events: self.q.processed(),
            page_cache: self.pc.stats(),
            cached_pages: self.pc.cached_pages(),
            dirty_pages: self.pc.dirty_pages(),
            volumes: self
                .vols
                .iter()
                .map(|v| {
                    (
                        v.name.clone(),
                        v.layout.capacity_bytes(),
                        v.read_ahead_bytes,
                    )
                })
                .collect(),
            notes: self.notes,
            vm_timeline: self
                .vm_names
                .iter()
                .cloned()
                .zip(self.vm_weights.iter().copied())
                .zip(self.timeline)
                .map(|((n, w), t)| (n, w, t))
                .collect(),
        }
    }

    // ---- jobs -----------------------------------------------------------------------------

    fn start_phase(&mut self, phase: u32) {
        self.phase = phase;
        let now = self.q.now();
        for (i, j) in self.jobs.iter().enumerate() {
            if j.phase == phase {
                self.q.push(now, ev(K_JOB_START, i));
            }
        }
    }

    fn job_start(&mut self, now: Ns, j: usize) {
        let job = &mut self.jobs[j];
        job.started = true;
        job.start_ns = now;
        if let Some(r) = job.runtime_ns {
            job.end_ns = now + job.ramp_ns + r;
            let end = job.end_ns;
            self.q.push(end, ev(K_JOB_END, j));
        }
        if let Source::Replay {
            pending,
            no_stall: false,
            ..
        } = &self.jobs[j].src
        {
            match pending {
                Some(io) => self.q.push(now + io.at_ns, ev(K_ARRIVAL, j)),
                None => {
                    self.jobs[j].stopping = true;
                    self.maybe_finish(now, j);
                }
            }
            return;
        }
        self.try_issue(now, j);
    }

    /// The next request of a trace is due: issue it whatever is outstanding (open loop).
    fn arrival(&mut self, now: Ns, j: usize) {
        if self.jobs[j].stopping {
            return;
        }
        let base = self.jobs[j].base_bytes;
        let start = self.jobs[j].start_ns;
        let Source::Replay {
            replay, pending, ..
        } = &mut self.jobs[j].src
        else {
            return;
        };
        let Some(io) = pending.take() else { return };
        *pending = replay.next();
        let next_at = pending.map(|p| start + p.at_ns);
        self.issue(now, j, io.op, base + io.offset_bytes, io.len_bytes);
        match next_at {
            Some(t) => self.q.push(t, ev(K_ARRIVAL, j)),
            None => {
                self.jobs[j].stopping = true;
                self.maybe_finish(now, j);
            }
        }
    }

    fn job_end(&mut self, now: Ns, j: usize) {
        self.jobs[j].stopping = true;
        self.maybe_finish(now, j);
    }

    fn maybe_finish(&mut self, now: Ns, j: usize) {
        let job = &mut self.jobs[j];
        if job.stopping && job.inflight == 0 && !job.finished {
            job.finished = true;
            job.finish_ns = now;
            let phase = job.phase;
            if self
                .jobs
                .iter()
                .filter(|o| o.phase == phase)
                .all(|o| o.finished)
            {
                let mut next = phase + 1;
                while next < self.phases && !self.jobs.iter().any(|o| o.phase == next) {
                    next += 1;
                }
                if next < self.phases {
                    self.start_phase(next);
                } else {
                    self.phase = self.phases;
                }
            }
        }
    }

    fn try_issue(&mut self, now: Ns, j: usize) {
        loop {
            let job = &mut self.jobs[j];
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
                    let job = &mut self.jobs[j];
                    if job.inflight == 0 {
                        self.issue(now, j, Op::Flush, 0, 0);
                    } else {
                        job.fsync_waiting = true;
                    }
                }
                Next::Done => {
                    self.jobs[j].stopping = true;
                    self.maybe_finish(now, j);
                    break;
                }
            }
        }
    }

    fn issue(&mut self, now: Ns, j: usize, op: Op, offset: u64, len: u64) {
        let disk = self.jobs[j].disk;
        self.jobs[j].inflight += 1;
        let max = self.disks[disk].vdisk.max_request_bytes();
        let parts = if len == 0 {
            1
        } else {
            len.div_ceil(max) as u32
        };
        let g = self.gios.insert(GIo {
            job: j,
            op,
            len,
            issue_ns: now,
            parts,
        });
        let mut off = offset;
        let end = offset + len;
        for _ in 0..parts {
            let n = (end - off).min(max);
            let r = self.vreqs.insert(VReq {
                gio: g,
                disk,
                op,
                offset: off,
                len: n,
                waits: 0,
            });
            off += n;
            self.vdisk_submit(now, r);
        }
    }

    // ---- virtual disk ---------------------------------------------------------------------

    fn vdisk_submit(&mut self, now: Ns, r: usize) {
        let disk = self.vreqs.get(r).disk;
        let len = self.vreqs.get(r).len;
        let d = &mut self.disks[disk];
        if d.inflight >= d.vdisk.queue_depth() {
            d.waitq.push_back(r);
            return;
        }
        d.inflight += 1;
        let t = (now + d.vdisk.guest_submit_ns()).max(d.vmm_busy) + d.vdisk.vmm_submit_ns(len);
        d.vmm_busy = t;
        self.q.push(t, ev(K_SUBMIT_DONE, r));
    }

    /// The host side is done with a request: the VMM completes it to the guest.
    fn host_finish(&mut self, now: Ns, r: usize) {
        let (disk, len) = {
            let v = self.vreqs.get(r);
            (v.disk, v.len)
        };
        let d = &mut self.disks[disk];
        let t = now.max(d.vmm_busy) + d.vdisk.vmm_complete_ns(len);
        d.vmm_busy = t;
        self.q.push(t, ev(K_GUEST_DONE, r));
    }

    fn guest_done(&mut self, now: Ns, r: usize) {
        let v = self.vreqs.remove(r);
        let d = &mut self.disks[v.disk];
        d.inflight -= 1;
        if let Some(next) = d.waitq.pop_front() {
            self.vdisk_submit(now, next);
        }
        let g = self.gios.get(v.gio);
        g.parts -= 1;
        if g.parts > 0 {
            return;
        }
        let g = self.gios.remove(v.gio);
        let j = g.job;
        let slat = self.disks[v.disk].vdisk.guest_submit_ns();
        let job = &mut self.jobs[j];
        job.inflight -= 1;
        if now >= job.start_ns + job.ramp_ns && now <= job.end_ns {
            let clat = now.saturating_sub(g.issue_ns + slat);
            job.stats[dir_index(g.op)].record(g.len, slat, clat);
            if g.len > 0 {
                let vm = self.disks[v.disk].owner as usize;
                let sec = (now / vmio_core::SEC) as usize;
                let tl = &mut self.timeline[vm];
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

    // ---- host cache layer -----------------------------------------------------------------

    fn host_start(&mut self, now: Ns, r: usize) {
        let (disk, op) = {
            let v = self.vreqs.get(r);
            (v.disk, v.op)
        };
        let mode = self.disks[disk].mode;
        match op {
            Op::Flush => {
                if mode.ignores_flush() {
                    self.host_finish(now, r);
                } else if mode.direct() {
                    self.flush_volume(now, r);
                } else {
                    self.fsync_file(now, r);
                }
            }
            Op::Read if !mode.direct() => self.buffered_read(now, r),
            Op::Write if !mode.direct() => {
                let (off, len) = (self.vreqs.get(r).offset, self.vreqs.get(r).len);
                let (first, n) = page_span(off, len);
                self.pc.write(now, disk as u32, first, n);
                let t = self.copy_done(now, len);
                self.q.push(t, ev(K_HOST_DONE, r));
            }
            Op::Read | Op::Write | Op::Trim => {
                let (off, len) = (self.vreqs.get(r).offset, self.vreqs.get(r).len);
                if op != Op::Read {
                    let (first, n) = page_span(off, len);
                    self.pc.invalidate(disk as u32, first, n);
                }
                let b = self.barriers.insert(Barrier {
                    remaining: 0,
                    cont: Cont::DirectDone(r),
                });
                self.submit_range(now, disk, op, off, len, b, true);
            }
        }
    }

    /// Map `[off, off+len)` of a disk through its volume and queue one device request per
    /// piece, all completing barrier `b`.
    #[allow(clippy::too_many_arguments)]
    fn submit_range(
        &mut self,
        now: Ns,
        disk: usize,
        op: Op,
        off: u64,
        len: u64,
        b: usize,
        sync: bool,
    ) {
        let d = &self.disks[disk];
        let owner = d.owner;
        let vol = &self.vols[d.volume];
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.clear();
        vol.layout.map(d.offset_bytes + off, len, &mut pieces);
        self.barriers.get(b).remaining += pieces.len() as u32;
        for p in &pieces {
            let dev = self.vols[self.disks[disk].volume].devices[p.device];
            let io = DevIo {
                tag: b as u64,
                op,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                fua: false,
                sync,
                owner,
                queued_ns: now,
                merged: Vec::new(),
            };
            let d = &mut self.devs[dev];
            d.model.prefetch(op, p.offset_bytes, p.len_bytes);
            d.sched.insert(now, io);
        }
        let vol = self.disks[disk].volume;
        // Pump each touched device once (pieces of one request are few; no allocation).
        for (i, p) in pieces.iter().enumerate() {
            if pieces[..i].iter().all(|q| q.device != p.device) {
                let dev = self.vols[vol].devices[p.device];
                self.pump(now, dev);
            }
        }
        self.pieces = pieces;
    }

    /// [`Self::submit_range`] for whole pages `[first, first + n)` of a disk.
    #[allow(clippy::too_many_arguments)]
    fn submit_pages(
        &mut self,
        now: Ns,
        disk: usize,
        op: Op,
        first: u64,
        n: u64,
        b: usize,
        sync: bool,
    ) {
        self.submit_range(now, disk, op, first * PAGE_BYTES, n * PAGE_BYTES, b, sync);
    }

    fn after_copy(&mut self, now: Ns, r: usize) {
        let (disk, op, off, len) = {
            let v = self.vreqs.get(r);
            (v.disk, v.op, v.offset, v.len)
        };
        if op == Op::Read {
            return self.host_finish(now, r);
        }
        let mode = self.disks[disk].mode;
        if mode.write_through() {
            let (first, n) = page_span(off, len);
            self.pc.clean_range(disk as u32, first, n);
            let b = self.barriers.insert(Barrier {
                remaining: 0,
                cont: Cont::WriteThrough(r),
            });
            self.submit_pages(now, disk, Op::Write, first, n, b, true);
            return;
        }
        self.kick_writeback(now);
        if self.pc.dirty_pages() + self.wb_inflight_pages > self.dirty_limit {
            self.throttled.push_back(r);
        } else {
            self.host_finish(now, r);
        }
    }

    fn buffered_read(&mut self, now: Ns, r: usize) {
        let (disk, off, len) = {
            let v = self.vreqs.get(r);
            (v.disk, v.offset, v.len)
        };
        let file = disk as u32;
        let (first, n) = page_span(off, len);
        let disk_pages = self.disks[disk].size_bytes / PAGE_BYTES;
        let mut lookup = std::mem::take(&mut self.lookup);
        self.pc.read(file, first, n, &mut lookup);
        let missing = !lookup.missing.is_empty();
        let plan = self.disks[disk].ra.on_read(first, n, missing);
        let mut fetched = false;
        if let Some((s, k)) = plan.sync {
            fetched |= self.fetch(now, disk, s, k.min(disk_pages.saturating_sub(s)));
        }
        for m in &lookup.missing {
            fetched |= self.fetch(now, disk, m.first, m.n);
        }
        if let Some((s, k)) = plan.background {
            if s < disk_pages {
                self.fetch(now, disk, s, k.min(disk_pages - s));
            }
        }
        let wait_any = fetched || !lookup.waits.is_empty();
        self.lookup = lookup;
        if wait_any {
            let mut waits = std::mem::take(&mut self.waits);
            waits.clear();
            self.pc.pending_fetches(file, first, n, &mut waits);
            self.vreqs.get(r).waits = waits.len() as u32;
            for &w in &waits {
                if let Cont::Fetch { waiters, .. } = &mut self.barriers.get(w as usize).cont {
                    waiters.push(r);
                }
            }
            let none = waits.is_empty();
            self.waits = waits;
            if !none {
                return;
            }
        }
        let t = self.copy_done(now, len);
        self.q.push(t, ev(K_HOST_DONE, r));
    }

    /// Fetch the absent pages of a range into the page cache. Returns whether any fetch was
    /// issued.
    fn fetch(&mut self, now: Ns, disk: usize, first: u64, n: u64) -> bool {
        if n == 0 {
            return false;
        }
        let file = disk as u32;
        let mut ranges = std::mem::take(&mut self.ranges);
        ranges.clear();
        self.pc.absent(file, first, n, &mut ranges);
        let any = !ranges.is_empty();
        for rg in &ranges {
            let b = self.barriers.insert(Barrier {
                remaining: 0,
                cont: Cont::Fetch {
                    file,
                    first: rg.first,
                    n: rg.n,
                    waiters: Vec::new(),
                },
            });
            self.pc.begin_fetch(file, rg.first, rg.n, b as u32);
            self.submit_pages(now, disk, Op::Read, rg.first, rg.n, b, true);
        }
        self.ranges = ranges;
        any
    }

    fn fsync_file(&mut self, now: Ns, r: usize) {
        let disk = self.vreqs.get(r).disk;
        let mut ranges = Vec::new();
        self.pc
            .take_dirty(Some(disk as u32), None, u64::MAX, &mut ranges);
        let b = self.barriers.insert(Barrier {
            remaining: 1,
            cont: Cont::FsyncWrites(r),
        });
        for rg in &ranges {
            self.submit_pages(now, disk, Op::Write, rg.first, rg.n, b, true);
        }
        self.barrier_done(now, b);
    }

    /// FLUSH CACHE to every device of the disk's volume, then finish the request.
    fn flush_volume(&mut self, now: Ns, r: usize) {
        let disk = self.vreqs.get(r).disk;
        let vol = self.disks[disk].volume;
        let devices = self.vols[vol].devices.clone();
        let b = self.barriers.insert(Barrier {
            remaining: devices.len() as u32,
            cont: Cont::FlushDone(r),
        });
        for dev in devices {
            self.devs[dev].flushq.push_back(DevIo {
                tag: b as u64,
                op: Op::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                fua: false,
                sync: true,
                owner: self.disks[disk].owner,
                queued_ns: now,
                merged: Vec::new(),
            });
            self.pump(now, dev);
        }
    }

    /// A copy between the page cache and guest memory: the host's memory bus moves
    /// `copy_rate` bytes/s in all, so concurrent copies queue behind each other.
    fn copy_done(&mut self, now: Ns, len: u64) -> Ns {
        let t = now.max(self.copy_busy) + transfer_ns(len, self.copy_rate);
        self.copy_busy = t;
        t
    }

    // ---- writeback ------------------------------------------------------------------------

    fn kick_writeback(&mut self, now: Ns) {
        if !self.wb_timer_armed && self.pc.dirty_pages() > 0 {
            self.wb_timer_armed = true;
            self.q.push(now + self.wb_interval, ev(K_WB_TIMER, 0));
        }
        while self.wb_inflight_pages < WB_MAX_INFLIGHT_PAGES {
            let expired = self
                .wb_expired_before
                .filter(|&t| self.pc.oldest_dirty_ns().is_some_and(|o| o <= t));
            let background = self.pc.dirty_pages() > self.dirty_bg;
            if expired.is_none() && !background {
                self.wb_expired_before = None;
                break;
            }
            let mut ranges = std::mem::take(&mut self.ranges);
            ranges.clear();
            let taken = self
                .pc
                .take_dirty(None, expired, WB_CHUNK_PAGES, &mut ranges);
            if taken == 0 {
                self.ranges = ranges;
                break;
            }
            self.wb_inflight_pages += taken;
            for rg in &ranges {
                let disk = rg.file as usize;
                self.disks[disk].wb_inflight += 1;
                let b = self.barriers.insert(Barrier {
                    remaining: 0,
                    cont: Cont::Writeback { disk, pages: rg.n },
                });
                self.submit_pages(now, disk, Op::Write, rg.first, rg.n, b, false);
            }
            self.ranges = ranges;
        }
    }

    fn wb_timer(&mut self, now: Ns) {
        self.wb_timer_armed = false;
        self.wb_expired_before = Some(now.saturating_sub(self.dirty_expire));
        self.kick_writeback(now);
        if self.pc.dirty_pages() > 0 && !self.wb_timer_armed && !self.all_done() {
            self.wb_timer_armed = true;
            self.q.push(now + self.wb_interval, ev(K_WB_TIMER, 0));
        }
    }

    fn all_done(&self) -> bool {
        self.phase >= self.phases && self.jobs.iter().all(|j| j.finished)
    }

    // ---- devices --------------------------------------------------------------------------

    fn pump(&mut self, now: Ns, dev: usize) {
        let d = &mut self.devs[dev];
        while d.inflight < d.qd {
            let io = match d.flushq.pop_front() {
                Some(f) => f,
                None => match d.sched.dispatch(now) {
                    Some(io) => io,
                    None => break,
                },
            };
            let cmd = DevCmd {
                tag: 0,
                op: io.op,
                offset_bytes: io.offset_bytes,
                len_bytes: io.len_bytes,
                fua: io.fua,
            };
            let slot = d.cmds.insert(io);
            d.model.submit(
                now,
                DevCmd {
                    tag: slot as u64,
                    ..cmd
                },
            );
            d.inflight += 1;
        }
        if let Some(t) = d.model.next_event_ns() {
            if d.wake_at.is_none_or(|w| t < w || w < now) {
                d.wake_at = Some(t);
                self.q.push(t, ev(K_DEV_WAKE, dev));
            }
        }
        if let Some(t) = d.sched.next_wakeup_ns().filter(|&t| t > now) {
            if d.sched_wake_at.is_none_or(|w| t < w || w < now) {
                d.sched_wake_at = Some(t);
                self.q.push(t, ev(K_SCHED_WAKE, dev));
            }
        }
    }

    fn dev_wake(&mut self, now: Ns, dev: usize) {
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        {
            let d = &mut self.devs[dev];
            if d.wake_at == Some(now) {
                d.wake_at = None;
            }
            d.model.advance(now, &mut done);
        }
        for &slot in &done {
            let io = {
                let d = &mut self.devs[dev];
                d.inflight -= 1;
                let io = d.cmds.remove(slot as usize);
                d.sched.completed(now, &io);
                io
            };
            for tag in io.tags() {
                self.barrier_done(now, tag as usize);
            }
        }
        self.done = done;
        self.pump(now, dev);
    }

    fn barrier_done(&mut self, now: Ns, b: usize) {
        let bar = self.barriers.get(b);
        bar.remaining -= 1;
        if bar.remaining > 0 {
            return;
        }
        let cont = self.barriers.remove(b).cont;
        match cont {
            Cont::DirectDone(r) => {
                let (op, disk) = (self.vreqs.get(r).op, self.vreqs.get(r).disk);
                if op == Op::Write && self.disks[disk].mode.write_through() {
                    self.flush_volume(now, r);
                } else {
                    self.host_finish(now, r);
                }
            }
            Cont::Fetch {
                file,
                first,
                n,
                waiters,
            } => {
                self.pc.complete_fetch(file, first, n, b as u32);
                for r in waiters {
                    let v = self.vreqs.get(r);
                    v.waits -= 1;
                    if v.waits == 0 {
                        let len = v.len;
                        let t = self.copy_done(now, len);
                        self.q.push(t, ev(K_HOST_DONE, r));
                    }
                }
            }
            Cont::Writeback { disk, pages } => {
                self.wb_inflight_pages -= pages;
                let d = &mut self.disks[disk];
                d.wb_inflight -= 1;
                if d.wb_inflight == 0 {
                    for r in std::mem::take(&mut d.fsync_waiters) {
                        self.flush_volume(now, r);
                    }
                }
                while !self.throttled.is_empty()
                    && self.pc.dirty_pages() + self.wb_inflight_pages <= self.dirty_limit
                {
                    let r = self.throttled.pop_front().unwrap();
                    self.host_finish(now, r);
                }
                self.kick_writeback(now);
            }
            Cont::FsyncWrites(r) => {
                let disk = self.vreqs.get(r).disk;
                if self.disks[disk].wb_inflight > 0 {
                    self.disks[disk].fsync_waiters.push(r);
                } else {
                    self.flush_volume(now, r);
                }
            }
            Cont::WriteThrough(r) => self.flush_volume(now, r),
            Cont::FlushDone(r) => self.host_finish(now, r),
        }
    }
}

/// Convenience: parse nothing, just run a stack and bound jobs.
pub fn simulate(stack: Stack, jobs: Vec<JobBinding>, seed: u64) -> Result<SimReport, SimError> {
    Ok(Sim::new(stack, jobs, seed)?.run())
}

#[cfg(test)]
mod tests;
