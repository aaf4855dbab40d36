//! What a run hands to the output layer: per job, per device, per volume and per VM, built
//! once at the end of [`Sim::run`](super::Sim::run) from the layers' state.
//!
//! ```text
//! job runtime = min(end, max(finish, start + ramp)) - (start + ramp)   (measured window)
//! bandwidth/IOPS samples: the last interval counts when full (samples.rs)
//! devices, page cache, volumes: their own counters at the end of the run
//! a device sharing hardware: its queue's completed commands and busy time; the shared
//!      device: the hardware model's counters (all its devices' commands)
//! images: per disk with a format driver, its figures (l2 hits, metadata bytes, ...)
//! pdc: per cache = "pdc" disk, its detector's report against the guest's journal (blocks
//!      [first, last] of journal_extent → bytes [first × 4096, (last + 1) × 4096))
//! ```

use super::Sim;
use crate::device::DeviceStats;
use crate::metrics::DirStats;
use vmio_core::cache::pdc::DetectorReport;
use vmio_core::fio::JobSpec;
use vmio_core::guest::ext4::BLOCK_BYTES;
use vmio_core::workload::JobWorkload;
use vmio_core::Ns;

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
    /// An `iozone=` job's timed passes (iozone's table); empty for any other job.
    pub iozone: Vec<vmio_core::workload::iozone::Timing>,
    /// Its reads', writes' and trims' latency by layer (breakdown.rs).
    pub breakdown: super::breakdown::JobBreakdown,
}

/// One stack device. A device whose hardware others share reports its model's figures, the
/// whole hardware's (as Linux's disk line of /proc/diskstats counts its partitions' I/O); a
/// sharing device reports what its own queue sent (commands and bytes completed, busy while
/// one of its commands was in the model; the hardware's own figures, cache and flash, are 0)
/// and its region as its parameters (share, start, capacity).
pub struct DeviceReport {
    pub name: String,
    pub model: &'static str,
    pub stats: DeviceStats,
    pub params: Vec<(String, String)>,
}

/// A VM's disk as its guest kernel counts it (fio's `disk_util` in the guest).
pub struct GuestDiskReport {
    pub vm: String,
    pub disk: String,
    pub stats: super::DiskAcct,
}

pub struct SimReport {
    pub seed: u64,
    pub jobs: Vec<JobReport>,
    pub devices: Vec<DeviceReport>,
    /// Every VM's disks, in stack order.
    pub guest_disks: Vec<GuestDiskReport>,
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
    /// Per VM with a guest kernel (buffered or file-level jobs): its name and figures.
    pub guests: Vec<(String, vmio_core::guest::os::GuestStats)>,
    /// The host's flush work: FLUSH CACHEs it sent, pages its fsyncs wrote.
    pub flushes: u64,
    pub fsync_written_pages: u64,
    /// Per `cache = "pdc"` disk (stack order): its journal detector's figures.
    pub pdc: Vec<PdcDiskReport>,
    /// The CPU layer, when the stack has `[cpu]`.
    pub cpu: Option<super::CpuReport>,
    /// Per disk with a format driver (qcow2; stack order): its driver's figures.
    pub images: Vec<ImageDiskReport>,
    /// Per disk with `[vm.disk.iotune]` (stack order): its throttling.
    pub throttle: Vec<ThrottleDiskReport>,
    /// Per disk on a `[[volume]]` with a filesystem (stack order): its image file's figures.
    pub host_fs: Vec<HostFsDiskReport>,
}

/// A disk's format driver figures (blocklayer.rs).
pub struct ImageDiskReport {
    pub vm: String,
    pub disk: String,
    pub stats: vmio_core::image::ImageStats,
}

/// A throttled disk's figures (throttle.rs).
pub struct ThrottleDiskReport {
    pub vm: String,
    pub disk: String,
    pub stats: vmio_core::throttle::ThrottleStats,
}

/// A disk's image file on a host filesystem.
pub struct HostFsDiskReport {
    pub vm: String,
    pub disk: String,
    pub stats: vmio_core::hostfs::HostFsStats,
}

/// A PDC disk's journal detection.
pub struct PdcDiskReport {
    pub vm: String,
    pub disk: String,
    pub detector: DetectorReport,
}

impl Sim {
    pub(super) fn report(self) -> SimReport {
        let now = self.q.now();
        let jobs = self
            .work
            .jobs
            .into_iter()
            .zip(self.work.bindings)
            .map(|(j, (b, clone))| {
                let measured_from = j.start_ns + j.ramp_ns;
                // A run stopped from outside (engine::Watch) leaves jobs unfinished: up to now.
                let finish = if j.finished { j.finish_ns } else { now };
                let end = j.end_ns.min(finish.max(measured_from));
                let runtime_ns = end.saturating_sub(measured_from);
                let mut stats = j.stats;
                for s in &mut stats {
                    s.samples.finish(runtime_ns);
                    if let Some(log) = &mut s.log {
                        log.finish(&s.samples);
                    }
                }
                JobReport {
                    name: j.name,
                    vm: self.vm_names[b.vm].clone(),
                    disk: b.spec.filename.clone().unwrap_or_default(),
                    spec: b.spec,
                    clone,
                    runtime_ns,
                    stats,
                    breakdown: j.bd,
                    iozone: match &j.work {
                        JobWorkload::Iozone(w) => w.timings().to_vec(),
                        _ => Vec::new(),
                    },
                }
            })
            .collect();
        let devices = self
            .blockq
            .devs
            .iter()
            .map(|d| {
                let hw = &self.blockq.hws[d.hw];
                if !d.shares() {
                    return DeviceReport {
                        name: d.name.clone(),
                        model: hw.model.model(),
                        stats: hw.model.stats(now),
                        params: hw.model.params(),
                    };
                }
                DeviceReport {
                    name: d.name.clone(),
                    model: hw.model.model(),
                    stats: DeviceStats {
                        busy_ns: d.sent_busy.busy_at(now),
                        ..d.sent.clone()
                    },
                    params: vec![
                        ("share".to_string(), hw.model.name().to_string()),
                        ("start".to_string(), d.start_bytes.to_string()),
                        ("capacity".to_string(), d.capacity_bytes.to_string()),
                    ],
                }
            })
            .collect();
        let guest_stats = self.guests.stats();
        let pdc = (0..self.disks.len())
            .filter_map(|i| {
                let detector = self.cache.pdc(i)?;
                let vm = self.disks[i].owner as usize;
                // The guest's filesystem starts at the disk's first byte: its blocks are
                // disk offsets over BLOCK_BYTES.
                let journal = guest_stats[vm]
                    .as_ref()
                    .and_then(|g| g.disks.get(i - self.disk_base[vm])?.journal_extent)
                    .map(|[first, last]| (first * BLOCK_BYTES, (last + 1) * BLOCK_BYTES));
                Some(PdcDiskReport {
                    vm: self.vm_names[vm].clone(),
                    disk: self.disk_names[i].clone(),
                    detector: detector.report(journal),
                })
            })
            .collect();
        let guests = self
            .vm_names
            .iter()
            .zip(guest_stats)
            .filter_map(|(n, g)| g.map(|g| (n.clone(), g)))
            .collect();
        let guest_disks = self
            .guest
            .disk_stats(now)
            .enumerate()
            .map(|(i, stats)| GuestDiskReport {
                vm: self.vm_names[self.disks[i].owner as usize].clone(),
                disk: self.disk_names[i].clone(),
                stats,
            })
            .collect();
        let images = (0..self.disks.len())
            .filter_map(|i| {
                Some(ImageDiskReport {
                    stats: self.image.stats(i)?,
                    vm: self.vm_names[self.disks[i].owner as usize].clone(),
                    disk: self.disk_names[i].clone(),
                })
            })
            .collect();
        let throttle = (0..self.disks.len())
            .filter_map(|i| {
                Some(ThrottleDiskReport {
                    stats: self.throttle.stats(i)?,
                    vm: self.vm_names[self.disks[i].owner as usize].clone(),
                    disk: self.disk_names[i].clone(),
                })
            })
            .collect();
        let host_fs = (0..self.disks.len())
            .filter_map(|i| {
                Some(HostFsDiskReport {
                    stats: self.hostfs.stats(i)?,
                    vm: self.vm_names[self.disks[i].owner as usize].clone(),
                    disk: self.disk_names[i].clone(),
                })
            })
            .collect();
        let host = self.cache.stats();
        let cpu = self.cpu_model.map(|m| self.cpu.report(now, m));
        SimReport {
            throttle,
            cpu,
            images,
            host_fs,
            guest_disks,
            guests,
            seed: self.seed,
            jobs,
            devices,
            virtual_time_ns: now,
            events: self.q.processed(),
            page_cache: host.pages,
            cached_pages: host.cached_pages,
            dirty_pages: host.dirty_pages,
            flushes: host.flushes,
            fsync_written_pages: host.fsync_written_pages,
            pdc,
            volumes: self
                .blockq
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
            notes: {
                let mut notes = self.notes;
                if self.work.timeline_cut {
                    notes.push(format!(
                        "each VM's per-second bytes (vms[].bytes_per_s) cover the first {} s of simulated time; bytes after that are left out of them (not of the jobs' figures)",
                        super::jobs::TIMELINE_MAX_S
                    ));
                }
                notes
            },
            vm_timeline: self
                .vm_names
                .iter()
                .cloned()
                .zip(self.vm_weights.iter().copied())
                .zip(self.work.timeline)
                .map(|((n, w), t)| (n, w, t))
                .collect(),
        }
    }
}
