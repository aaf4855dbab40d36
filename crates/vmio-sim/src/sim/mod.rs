//! The simulator: the whole stack driven in virtual time, one file per layer.
//!
//! A request's path through the files:
//!
//! ```text
//! jobs.rs       job ──try_issue / Arrival──> issue
//!                 │                                         ▲ io_done (stats, next I/O)
//! guest.rs      guest_issue: split at the vdisk's max request; vdisk_submit (queue depth;
//!               the VMM thread serializes submit/complete costs)
//!                 │ SubmitDone                               ▲ GuestDone ← host_finish
//! hostcache.rs  host_start by QEMU cache mode:
//!                 O_DIRECT (none, directsync): straight to the block queue
//!                 buffered (writeback, writethrough, unsafe): page cache hit → copy
//!                   (HostDone); miss → fetch with read-ahead; writes dirty pages →
//!                   background/periodic writeback (WbTimer), dirty throttling
//!                 flush: unsafe ignores it; buffered writes back the file's dirty pages;
//!                   then FLUSH CACHE to every device of the volume
//!                 │ submit_range / flush_volume              ▲ barrier_continue
//! blockq.rs     volume map → per-device requests → scheduler (flushes bypass it) → device
//!               queue depth; DevWake / SchedWake; barrier_done counts a barrier's requests;
//!               the queues of devices sharing hardware feed its one model
//!                 │ submit                                   ▲ advance (completions)
//! device/       HDD, SSD, RAM models
//! ```
//!
//! `mod.rs` wires the layers (`Sim::new`: devices, volumes, disks, jobs) and runs the event
//! loop; `event.rs` is the typed `Event` and its packing into the queue's `u64`;
//! `breakdown.rs` splits every I/O's latency by layer from stamps the layers put on it;
//! `report.rs` the run's summary; `memory.rs` the memory check before anything is built.
//! Requests and barriers in flight live in vmio-core's `Slab` (reused slots, no allocation
//! per request; an index stays valid until its slot is freed).
//!
//! Everything is deterministic: the event queue orders by (time, sequence), randomness comes
//! from the workload generators seeded from the run seed, and no hash-map order reaches
//! the output. Page-cache "files" are the VM disks (QEMU opens one image per disk).

mod blocklayer;
mod blockq;
pub mod breakdown;
#[cfg(test)]
mod breakdown_tests;
mod cpu;
mod event;
#[cfg(test)]
mod fiojob_tests;
mod guest;
#[cfg(test)]
mod guestblk_tests;
mod guestos;
mod hostcache;
mod hostfs;
#[cfg(test)]
mod image_tests;
mod jobs;
mod memory;
mod report;
pub(crate) mod samples;
mod throttle;
#[cfg(test)]
mod vdisk_tests;

pub use cpu::{CpuReport, ThreadLabel};
pub use guest::DiskAcct;
pub use memory::{available_memory_bytes, check_memory, FALLBACK_MEMORY_BYTES};
pub use report::{
    DeviceReport, GuestDiskReport, HostFsDiskReport, ImageDiskReport, JobReport, PdcDiskReport,
    SimReport, ThrottleDiskReport,
};

use crate::device::DeviceError;
use crate::engine::EventQueue;
use crate::vdisk::InterfaceModel;
use blocklayer::ImageLayer;
use blockq::{BlockQueue, VolState};
use event::Event;
use guest::{GuestState, VDiskState};
use guestos::{GuestVm, Guests};
use hostcache::HostCache;
use jobs::JobDriver;
use jobs::Route;
use thiserror::Error;
use vmio_core::cache::{HostDisk, PAGE_BYTES};
use vmio_core::cpu::hypervisor::HvCosts;
use vmio_core::fio::{JobSpec, FIO_MAX_JOBS};
use vmio_core::guest::os::{GuestDisk, GuestOs};
use vmio_core::image::{ImageCaps, ImageFormat};
use vmio_core::params::Values;
use vmio_core::stack::{Stack, StackError};
use vmio_core::units::quote;
use vmio_core::vdisk::DiskSpec;
use vmio_core::volume::VolumeError;
use vmio_core::workload::{TimedIo, WorkloadError};
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
    #[error("{0}")]
    Job(String),
    /// The simulation cannot go on (a model lost work it holds): a bug of vmio, reported
    /// rather than left to run for ever.
    #[error("internal error: {0}; please report it with the stack and job files")]
    Internal(String),
    /// The run passed one of its [`Limits`].
    #[error("{0}")]
    Bound(String),
}

/// Bounds on one simulation: past either, the run ends with [`SimError::Bound`], one line
/// naming the bound and its flag (`vmio sim`/`vmio fio` `--max-events`, `--max-sim-time`;
/// `max_events=`, `max_sim_time=` in `vmio.simulate`).
///
/// ```text
/// each event popped at time t:  t > max_sim_time            → Bound (simulated time)
///                               events handled > max_events → Bound (events)
/// a job's end (start + ramp_time + runtime) > max_sim_time  → Bound naming runtime
/// a rate's next I/O (fio's usec_for_io) > max_sim_time      → Bound naming rate/rate_iops
/// ```
///
/// The defaults bound what a run may cost, not what it may ask: 10^10 events (minutes of
/// wall time at the simulator's millions of events a second, far above any study's runs),
/// and 36,500 days of simulated time, a sixth of what a u64 of nanoseconds holds (584
/// years), so that times below the bound add up without overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_events: u64,
    pub max_sim_time_ns: Ns,
}

pub const DEFAULT_MAX_EVENTS: u64 = 10_000_000_000;
pub const DEFAULT_MAX_SIM_TIME_NS: Ns = 36_500 * 86_400 * vmio_core::SEC;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events: DEFAULT_MAX_EVENTS,
            max_sim_time_ns: DEFAULT_MAX_SIM_TIME_NS,
        }
    }
}

/// A simulated time as a bound's message shows it: seconds to the millisecond, and days
/// past one.
pub(crate) fn shown_time(ns: Ns) -> String {
    let s = format!(
        "{}.{:03} s",
        ns / vmio_core::SEC,
        ns % vmio_core::SEC / 1_000_000
    );
    if ns >= 86_400 * vmio_core::SEC {
        format!("{s} ({:.1} days)", ns as f64 / 86_400e9)
    } else {
        s
    }
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
    /// The job works on files of the disk's guest filesystem (else on its block device).
    pub files: bool,
    /// What the binding decided that fio would not (a `filename` that is no disk of the VM).
    pub note: Option<String>,
}

/// Resolve a job to one of the VM's disks and say whether it works on files of the disk's
/// guest filesystem:
///
/// ```text
/// filename names a disk (/dev/sdb, sdb)       → that disk's block device
/// filename or directory is a path under the mount point of a disk's filesystem
///                                              → that disk (the deepest mount), files
/// neither                                      → the first disk: files if it has a
///                                                filesystem, else its block device
/// otherwise (a path that is neither)           → the first disk, with a note: a file on its
///                                                filesystem when it has one and the name is
///                                                not under /dev/, else its block device
/// ```
///
/// The README promises the last rule ("the first disk is used"); fio's own examples name
/// devices and paths of the machine they were written on (`/dev/sdj`, `/tmp/fio-test`).
pub fn bind_jobs(
    stack: &Stack,
    jobs: &[JobSpec],
    vm: usize,
    job_file: &str,
) -> Result<Vec<JobBinding>, SimError> {
    let v = &stack.vms[vm];
    let mount_of = |path: &str| {
        v.disks
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.filesystem.as_ref().map(|f| (i, f.mount.as_str())))
            .filter(|(_, m)| path == *m || path.starts_with(&format!("{m}/")))
            .max_by_key(|(_, m)| m.len())
            .map(|(i, _)| i)
    };
    jobs.iter()
        .map(|spec| {
            let by_name = spec.filename.as_deref().and_then(|f| {
                let name = f.trim_start_matches("/dev/");
                v.disks.iter().position(|d| d.name == name)
            });
            let by_path = || {
                let dirs = spec.directory.as_deref().unwrap_or("");
                let first_dir = dirs.split(':').next().unwrap_or("");
                match spec.filename.as_deref() {
                    Some(f) if f.starts_with('/') => mount_of(f),
                    Some(f) if !first_dir.is_empty() => mount_of(&format!("{first_dir}/{f}")),
                    Some(_) => None,
                    None if !first_dir.is_empty() => mount_of(first_dir),
                    None => None,
                }
            };
            let first = &v.disks[0];
            let (disk, files, note) = match (by_name, spec.filename.is_some() || spec.directory.is_some()) {
                (Some(d), _) => (d, false, None),
                (None, false) => (0, first.filesystem.is_some(), None),
                (None, true) => match by_path() {
                    Some(d) => (d, true, None),
                    None => {
                        let what = match (&spec.filename, &spec.directory) {
                            (Some(f), _) => format!("filename '{}'", quote(f)),
                            (None, Some(d)) => format!("directory '{}'", quote(d)),
                            (None, None) => unreachable!("one of them is set"),
                        };
                        let device = spec.filename.as_deref().is_some_and(|f| f.starts_with("/dev/"));
                        let on_fs = first.filesystem.as_ref().filter(|_| !device);
                        let where_ = match on_fs {
                            Some(fs) => format!(
                                "it runs on a file of its first disk '{}' (the filesystem mounted at {})",
                                first.name, fs.mount
                            ),
                            None => format!("it runs on its first disk '{}'", first.name),
                        };
                        let note = format!(
                            "job '{}': {what} is not a disk of VM '{}'; {where_}",
                            quote(&spec.name),
                            v.name
                        );
                        (0, on_fs.is_some(), Some(note))
                    }
                },
            };
            // null (fio's FIO_DISKLESSIO), cpuio and nbd (the export is the disk) use no file.
            let files = files && vmio_core::fio::engine::uses_files(&spec.ioengine);
            if files && spec.rw.trims() {
                return Err(SimError::Job(format!(
                    "{job_file}:{}: job '{}': rw={} on a file: fio trims with BLKDISCARD, on a block device only (fio 3.33 on a file: \"Inappropriate ioctl for device\"); accepted: filename={}",
                    spec.line,
                    quote(&spec.name),
                    spec.rw.fio_name(),
                    v.disks.iter().map(|d| format!("/dev/{}", d.name)).collect::<Vec<_>>().join(" or ")
                )));
            }
            Ok(JobBinding {
                spec: spec.clone(),
                vm,
                disk,
                job_file: job_file.to_string(),
                trace: None,
                files,
                note,
            })
        })
        .collect()
}

/// Where a VM disk lies: its volume, its offset there, its size and its VM (every layer
/// indexes its per-disk state like this).
struct DiskPlace {
    volume: usize,
    offset_bytes: u64,
    size_bytes: u64,
    owner: u32,
    /// The guest filesystem on it: its size and mount point.
    fs: Option<(u64, String)>,
}

pub struct Sim {
    q: EventQueue,
    disks: Vec<DiskPlace>,
    /// The workload driver (jobs.rs).
    work: JobDriver,
    /// Guest requests and virtual disks (guest.rs).
    guest: GuestState,
    /// The disks' image format drivers (blocklayer.rs).
    image: ImageLayer,
    /// The host page cache and its writeback (hostcache.rs).
    cache: HostCache,
    /// The host filesystem under the images of filesystem volumes (hostfs.rs).
    hostfs: hostfs::HostFsDriver,
    /// Devices, volumes and barriers (blockq.rs).
    blockq: BlockQueue,
    /// The VMs' guest kernels (guestos.rs).
    guests: Guests,
    /// The host's threads and cores (cpu.rs).
    cpu: cpu::CpuLayer,
    /// The disks' throttle groups (throttle.rs).
    throttle: throttle::SimThrottle,
    /// Each disk's hand-off spread (vmio_core::vdisk::spread; guest.rs charges it).
    spread: Vec<vmio_core::vdisk::spread::Handoffs>,
    /// `[cpu] model` when the stack has `[cpu]` (the report's `vmio.cpu`).
    cpu_model: Option<&'static str>,
    /// Why the run cannot go on ([`SimError::Internal`]), found where it happened.
    fault: Option<String>,
    limits: Limits,
    /// The bound the run passed ([`SimError::Bound`]), found where it happened.
    bound: Option<String>,
    /// Index in `disks` of each VM's first disk.
    disk_base: Vec<usize>,
    seed: u64,
    notes: Vec<String>,
    vm_names: Vec<String>,
    /// Each disk's name (in `disks` order).
    disk_names: Vec<String>,
    vm_weights: Vec<u32>,
}

/// fio's `size=N%` and `offset=N%` (fio's `filesetup.c`, `get_start_offset` and
/// `setup_files`) once the disks' sizes are known:
///
/// ```text
/// whole  = the disk's size (block jobs) or the fixed filesize (file jobs; a filesize range
///          or none is refused: fio takes each file's real size, which a new file lacks)
/// offset = ceil(whole * pct / 100 / min_bs) * min_bs      (offset_increment likewise)
/// size   = min(whole * pct / 100, whole - offset), rounded down to min_bs
/// ```
///
/// `min_bs` is the job's smallest block size (fio's `td_min_bs`).
fn resolve_percentages(stack: &Stack, jobs: &mut [JobBinding]) -> Result<(), SimError> {
    for b in jobs.iter_mut() {
        let s = &mut b.spec;
        if s.size_percent.is_none()
            && s.offset_percent.is_none()
            && s.offset_increment_percent.is_none()
        {
            continue;
        }
        let whole = if b.files {
            match s.filesize {
                Some(r) if r.lo_bytes == r.hi_bytes => r.lo_bytes,
                _ => {
                    return Err(SimError::Job(format!(
                        "{}:{}: job '{}': size or offset in percent of a file needs a fixed filesize; accepted: filesize=SIZE beside it, or sizes in bytes",
                        b.job_file,
                        s.line,
                        quote(&s.name)
                    )))
                }
            }
        } else {
            stack.vms[b.vm].disks[b.disk].size_bytes
        };
        let min_bs =
            s.bs.read
                .iter()
                .chain(&s.bs.write)
                .map(|e| e.0)
                .min()
                .unwrap_or(vmio_core::fio::BlockSizes::DEFAULT_BYTES)
                .max(1);
        let share = |pct: u32| (u128::from(whole) * u128::from(pct) / 100) as u64;
        let aligned = |bytes: u64| bytes.div_ceil(min_bs).saturating_mul(min_bs);
        if let Some(p) = s.offset_percent {
            s.offset_bytes = aligned(share(p));
        }
        if let Some(p) = s.offset_increment_percent {
            s.offset_increment_bytes = aligned(share(p));
        }
        if let Some(p) = s.size_percent {
            let size = share(p).min(whole.saturating_sub(s.offset_bytes));
            s.size_bytes = Some(size - size % min_bs);
        }
    }
    Ok(())
}

/// Refuse a run of more than fio's FIO_MAX_JOBS jobs (all clones of all VMs together).
fn check_job_count(jobs: &[JobBinding]) -> Result<(), SimError> {
    let mut total_jobs = 0u64;
    for b in jobs {
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
    Ok(())
}

/// The VM disks in order (VM by VM), with their virtual disk and host file state, and the
/// index of each VM's first disk.
fn build_disks(stack: &Stack, vols: &[VolState]) -> Result<BuiltDisks, SimError> {
    let mut disks = Vec::new();
    let mut vdisks = Vec::new();
    let mut files = Vec::new();
    let mut drivers = Vec::new();
    let mut serialised = Vec::new();
    let mut disk_base = Vec::new();
    let user_exit_ns = match &stack.cpu {
        Some(c) => HvCosts::from_values(&c.params).user_exit_ns,
        None => HvCosts::from_values(&Values::defaults(vmio_core::cpu::params())).user_exit_ns,
    };
    for (vi, vm) in stack.vms.iter().enumerate() {
        disk_base.push(disks.len());
        let qemu = vmio_core::vdisk::qemu::lookup(vm.qemu_version)
            .unwrap_or_else(vmio_core::vdisk::qemu::default_profile);
        for d in &vm.disks {
            let on_fs = stack.volumes[d.volume].filesystem.is_some();
            let status = d.interface == vmio_core::vdisk::Interface::Nbd
                && stack.nbd.as_ref().is_some_and(|n| n.block_status);
            let caps = ImageCaps::of(qemu, on_fs).with_status_before_read(status);
            let driver = image_driver(d, caps);
            serialised.push(driver.is_some() && caps.serialise_past_eof);
            // The host file: the image (and its backing files) under a driver, else the
            // disk's bytes themselves.
            let file_bytes = driver.as_ref().map_or(d.size_bytes, |x| x.file_bytes());
            drivers.push(driver);
            disks.push(DiskPlace {
                volume: d.volume,
                offset_bytes: d.offset_bytes,
                size_bytes: d.size_bytes,
                owner: vi as u32,
                fs: d.filesystem.as_ref().map(|f| {
                    (
                        f.size_bytes.unwrap_or(d.size_bytes).min(d.size_bytes),
                        f.mount.clone(),
                    )
                }),
            });
            let model = InterfaceModel::for_disk(d, qemu, stack.nbd.as_ref(), user_exit_ns);
            let field = format!(
                "vm[{vi}].disk[{}].guest_queue",
                vdisks.len() - disk_base[vi]
            );
            vdisks.push(
                VDiskState::new(model, d.guest_queue.as_ref(), &field).map_err(SimError::Job)?,
            );
            files.push(HostDisk {
                mode: d.cache,
                size_bytes: file_bytes,
                read_ahead_pages: vols[d.volume].read_ahead_bytes / PAGE_BYTES,
            });
        }
    }
    Ok(BuiltDisks {
        disks,
        vdisks,
        files,
        drivers,
        serialised,
        disk_base,
    })
}

/// What [`build_disks`] makes: each layer's per-disk state, in disk order.
struct BuiltDisks {
    disks: Vec<DiskPlace>,
    vdisks: Vec<VDiskState>,
    files: Vec<HostDisk>,
    drivers: Vec<Option<Box<dyn ImageFormat>>>,
    /// Per disk: its driver's write-zeroes past the end of the file serialise
    /// (`ImageCaps::serialise_past_eof`; blocklayer.rs runs the rule).
    serialised: Vec<bool>,
    disk_base: Vec<usize>,
}

/// The format driver of disk `d` over layers that offer `caps` (None: raw, the identity).
fn image_driver(d: &DiskSpec, caps: ImageCaps) -> Option<Box<dyn ImageFormat>> {
    vmio_core::image::build(&d.image, d.size_bytes, caps)
}

/// Thin devices' initial state: on a volume with a host filesystem, each image file's
/// region that holds nothing at the start (a file in the Hole or Unwritten state beyond its
/// written prefix, [`vmio_core::hostfs::initial_state`]: a new sparse or fallocated file
/// over blocks the filesystem discarded) is unprovisioned on the devices under it, through
/// the volume's layout (any layout: its pieces are where the file's blocks lie); a Written
/// file (`preallocation = "full"`) stays provisioned. The filesystem's own blocks (its
/// metadata, its journal) and disks on volumes without a filesystem (a block device, whose
/// history is not known) stay provisioned. A thick device ignores it.
///
/// ```text
/// for each disk on a filesystem volume, file at volume offset o, file_bytes n:
///     (state, prefix) = initial_state(image, n)
///     state != Written and prefix < n: blockq.unprovision(volume, o + prefix, n - prefix)
/// ```
fn unprovision_images(stack: &Stack, places: &[(usize, u64, u64)], blockq: &mut BlockQueue) {
    let specs = stack.vms.iter().flat_map(|v| v.disks.iter());
    for (&(vol, offset, file_bytes), d) in places.iter().zip(specs) {
        if stack.volumes[vol].filesystem.is_none() {
            continue;
        }
        let (state, prefix) = vmio_core::hostfs::initial_state(&d.image, file_bytes);
        if state != vmio_core::hostfs::extents::BlockState::Written && prefix < file_bytes {
            blockq.unprovision(vol, offset + prefix, file_bytes - prefix);
        }
    }
}

/// A guest kernel for every VM with a job that is not direct block I/O; each job on files
/// gets the guest's handles of its workload's files (laid out now).
fn build_guests(stack: &Stack, work: &mut JobDriver) -> Result<Guests, SimError> {
    let mut vms: Vec<Option<GuestVm>> = stack.vms.iter().map(|_| None).collect();
    for j in 0..work.jobs.len() {
        let vm = work.jobs[j].vm as usize;
        if work.jobs[j].route == Route::Direct {
            continue;
        }
        if vms[vm].is_none() {
            let v = &stack.vms[vm];
            let disks: Vec<GuestDisk> = v
                .disks
                .iter()
                .map(|d| GuestDisk {
                    name: d.name.clone(),
                    size_bytes: d.size_bytes,
                    read_ahead_pages: d.read_ahead_bytes / PAGE_BYTES,
                    fs: d.filesystem.clone(),
                })
                .collect();
            let os = GuestOs::new(&v.page_cache, &disks)
                .map_err(|e| SimError::Job(format!("{}: vm '{}': {e}", stack.file, v.name)))?;
            vms[vm] = Some(GuestVm::new(os, v.page_cache.copy_rate_bps));
        }
        if let Route::Files { .. } = work.jobs[j].route {
            let local = work.bindings[j].0.disk as u32;
            let g = vms[vm].as_mut().expect("made above");
            let handles =
                g.os.open_files(local, work.jobs[j].files())
                    .map_err(|e| SimError::Job(format!("{}: {e}", stack.file)))?;
            work.jobs[j].route = Route::Files { handles };
        }
    }
    Ok(Guests::new(vms))
}

impl Sim {
    /// Build a simulation of `stack` running `jobs` with `seed`.
    pub fn new(mut stack: Stack, mut jobs: Vec<JobBinding>, seed: u64) -> Result<Sim, SimError> {
        check_job_count(&jobs)?;
        check_memory(&stack, available_memory_bytes())?;
        let devs = blockq::build_devices(&stack, seed)?;
        let vols = blockq::build_volumes(&stack, &devs.1)?;
        let vol_bytes: Vec<u64> = vols.iter().map(|v| v.layout.capacity_bytes()).collect();
        stack.resolve_disk_sizes(&vol_bytes)?;
        let BuiltDisks {
            disks,
            vdisks,
            files,
            drivers,
            serialised,
            disk_base,
        } = build_disks(&stack, &vols)?;
        resolve_percentages(&stack, &mut jobs)?;
        let mut notes: Vec<String> = jobs.iter().filter_map(|b| b.note.clone()).collect();
        let cfs = stack
            .cpu
            .as_ref()
            .is_some_and(|c| c.model == vmio_core::cpu::CFS);
        if let (false, Some(n)) = (cfs, &stack.nbd) {
            if n.client_cpu_ns + n.server_cpu_ns + n.server_wake_ns + n.pool_cpu_ns > 0 {
                notes.push(
                    "[nbd] client_cpu, server_cpu, server_wake and pool_cpu put the NBD path on \
                     threads only under [cpu] model = \"cfs\": ignored here"
                        .into(),
                );
            }
        }
        let mut work =
            JobDriver::build(&jobs, &disks, &disk_base, stack.vms.len(), seed, &mut notes)?;
        let guests = build_guests(&stack, &mut work)?;
        let clones: Vec<_> = work
            .jobs
            .iter()
            .zip(&work.bindings)
            .map(|(j, (b, c))| (&j.work, b, *c))
            .collect();
        let disk_volume: Vec<usize> = disks.iter().map(|d| d.volume).collect();
        let vol_first_dev: Vec<usize> = stack.volumes.iter().map(|v| v.devices[0]).collect();
        let cpu = cpu::build(&stack, &clones, &vol_first_dev, &disk_volume)?;
        // The image file of each disk: its region of the volume (a qcow2 chain's host bytes).
        let places: Vec<_> = disks
            .iter()
            .zip(&files)
            .map(|(d, f)| (d.volume, d.offset_bytes, f.size_bytes))
            .collect();
        let hostfs = hostfs::HostFsDriver::new(&stack, &vol_bytes, &places)?;
        drop(clones);
        let mut blockq = BlockQueue::new(devs, vols);
        unprovision_images(&stack, &places, &mut blockq);
        let spread = (stack.vms.iter())
            .flat_map(|vm| vm.disks.iter().map(move |d| (vm, d)))
            .map(|(vm, d)| {
                vmio_core::vdisk::spread::Handoffs::for_disk(seed, &vm.name, d, !cpu.priced)
            })
            .collect();
        Ok(Sim {
            throttle: throttle::SimThrottle::new(&stack)?,
            spread,
            cpu,
            cpu_model: stack.cpu.as_ref().map(|c| c.model),
            fault: None,
            limits: Limits::default(),
            bound: None,
            q: EventQueue::new(),
            disks,
            work,
            guest: GuestState::new(vdisks),
            image: ImageLayer::new(&stack, drivers, &serialised),
            cache: HostCache::new(&stack, files)?,
            hostfs,
            blockq,
            guests,
            disk_base,
            seed,
            notes,
            vm_names: stack.vms.iter().map(|v| v.name.clone()).collect(),
            disk_names: stack
                .vms
                .iter()
                .flat_map(|v| v.disks.iter().map(|d| d.name.clone()))
                .collect(),
            vm_weights: stack.vms.iter().map(|v| v.weight).collect(),
        })
    }

    /// Run to completion and report.
    pub fn run(mut self) -> Result<SimReport, SimError> {
        self.start_phase(0);
        self.cpu_start_ticks();
        while let Some((now, p)) = self.q.pop() {
            if now > self.limits.max_sim_time_ns {
                self.bound = Some(format!(
                    "the simulation passed its bound on simulated time, {} (--max-sim-time; max_sim_time= in vmio.simulate): its next event was due at {}; accepted: a larger bound, or a job that ends sooner (its runtime, size or rate)",
                    shown_time(self.limits.max_sim_time_ns),
                    shown_time(now)
                ));
                break;
            }
            if self.q.handled() > self.limits.max_events {
                self.bound = Some(format!(
                    "the simulation passed its bound of {} events (--max-events; max_events= in vmio.simulate) at {} of simulated time; accepted: a larger bound, or a job that ends sooner (its runtime, size or rate)",
                    self.limits.max_events,
                    shown_time(now)
                ));
                break;
            }
            match Event::unpack(p) {
                Event::JobStart(j) => self.job_start(now, j),
                Event::SubmitDone(r) => self.part_submitted(now, r),
                Event::EngineStart(r) => self.block_start(now, r),
                Event::HostDone(r) => self.after_copy(now, r),
                Event::GuestDone(r) => self.guest_done(now, r),
                Event::DevWake(hw) => self.dev_wake(now, hw),
                Event::SchedWake(dev) => self.sched_wake(now, dev),
                Event::WbTimer => self.wb_timer(now),
                Event::JobEnd(j) => self.job_end(now, j),
                Event::Arrival(j) => self.arrival(now, j),
                Event::GuestCopy(a) => self.guest_copy_done(now, a),
                Event::GuestTimer(vm) => self.guest_timer(now, vm),
                Event::CpuWake => self.cpu_wake(now),
                Event::CpuTick(id) => self.cpu_tick(now, id),
                Event::ImageDone(h) => self.image_done(now, h),
                Event::ThrottleWake(g) => self.throttle_wake(now, g),
                Event::FsWake(slot) => self.fs_wake(now, slot),
            }
            if self.all_done() || self.fault.is_some() || self.bound.is_some() {
                break;
            }
        }
        cpu::HANDLED.with(|h| h.set(self.q.handled()));
        if let Some(fault) = self.fault.take() {
            return Err(SimError::Internal(fault));
        }
        if let Some(bound) = self.bound.take() {
            return Err(SimError::Bound(bound));
        }
        Ok(self.report())
    }

    /// Every phase ran and every job finished.
    fn all_done(&self) -> bool {
        self.work.phase >= self.work.phases && self.work.jobs.iter().all(|j| j.finished)
    }
}

/// Convenience: parse nothing, just run a stack and bound jobs.
pub fn simulate(stack: Stack, jobs: Vec<JobBinding>, seed: u64) -> Result<SimReport, SimError> {
    simulate_watched(stack, jobs, seed, None)
}

/// [`simulate`] with a [`crate::engine::Watch`] looking at it (Ctrl-C, progress): a watch
/// that stops the run gets the report of what ran so far (an unfinished job's runtime ends
/// at the stop).
pub fn simulate_watched(
    stack: Stack,
    jobs: Vec<JobBinding>,
    seed: u64,
    watch: Option<crate::engine::Watch>,
) -> Result<SimReport, SimError> {
    simulate_limited(stack, jobs, seed, watch, Limits::default())
}

/// [`simulate_watched`] within `limits`.
pub fn simulate_limited(
    stack: Stack,
    jobs: Vec<JobBinding>,
    seed: u64,
    watch: Option<crate::engine::Watch>,
    limits: Limits,
) -> Result<SimReport, SimError> {
    let mut sim = Sim::new(stack, jobs, seed)?;
    sim.q.set_watch(watch);
    sim.limits = limits;
    sim.run()
}

#[cfg(test)]
mod cpu_tests;
#[cfg(test)]
mod nbd_cpu_tests;
#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod thin_tests;
