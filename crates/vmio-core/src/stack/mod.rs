//! The stack file: one TOML description of a KVM host's storage path, assembled from the
//! tables its layers own.
//!
//! ```toml
//! [host]                      # cores, memory, hypervisor, ept (stack: hypervisor-wide rules)
//! [host.cache]                # crate::cpu::cache: profile, [[host.cache.bank]], memory_bandwidth,
//!                             # memory_latency, clock_mhz
//! [[device]]                  # crate::device: name, model (vmio-sim's device::REGISTRY),
//!                             # profile, the model's parameters, path, size; or share,
//!                             # start, capacity (a region of an earlier device's hardware)
//! [[volume]]                  # crate::volume: name, layout (volume::REGISTRY), devices,
//!                             # read_ahead_kb, the layout's parameters
//! [scheduler]                 # crate::sched: name (sched::REGISTRY), its parameters
//! [page_cache]                # crate::cache: eviction (cache::eviction::REGISTRY),
//!                             # cache::linux::PARAMS (memory, dirty_ratio, ...)
//! [cpu]                       # crate::cpu::table: model (cpu::MODELS), cpu::cfs::PARAMS,
//!                             # cpu::hypervisor::PARAMS, dom0_vcpus, dom0_pin (xen)
//! [pdc]                       # crate::cache::pdc: cache::pdc::PARAMS (cache = "pdc" disks)
//! [nbd]                       # crate::nbd: nbd::PARAMS (interface = "nbd" disks)
//! [[vm]]                      # stack: name, vcpus, memory, weight, workload, qemu_version
//!                             # (crate::vdisk::qemu::PROFILES)
//! [vm.cputune]                # crate::cpu::table: vcpupin, emulatorpin, iothreadpin
//! [vm.page_cache]             # crate::cache: the guest's page cache (memory defaults to the
//!                             # VM's less guest::params::GUEST_RESERVE_BYTES)
//! [[vm.disk]]                 # crate::vdisk: name, volume, offset, size, interface, cache,
//!                             # queue_depth, iothread, aio, read_ahead_kb (guest::params' rule),
//!                             # format
//! [vm.disk.queue]             # crate::vdisk::queue: num_queues, queue_size, iothreads, wakeup
//! [vm.disk.image]             # crate::image::spec: image::spec::PARAMS, backing
//! [vm.disk.filesystem]        # crate::guest::params: type, mount, FS_PARAMS
//! [vm.disk.iotune]            # crate::throttle: libvirt's <iotune> keys (throttle::KEYS)
//! ```
//!
//! ## The lattice
//!
//! Each layer's module owns its table ([`crate::table::Table`]): the raw struct serde reads,
//! the spec the engines read, the checks that concern only it, and its help (its
//! declarations, rendered by `vmio help stack`). This module only assembles them and checks
//! what spans them. Data flows one way: stack names the layers, no layer names stack.
//!
//! ```text
//! stack  ──> device, volume, sched, cache, cache::pdc, nbd, cpu, vdisk, guest::params
//!   │            (each: Raw + Spec + impl Table, errors as table::FieldError)
//!   └──> table (Table, FieldError, SizeValue), params (the layers' declared parameters)
//! stack checks: [host]; at least one device, volume, VM and disk per VM; references by
//!   name (volume -> devices, each device in one volume; disk -> volume); names unique in
//!   [[vm]] and in a VM's disks; the [[vm]] table itself (weight, memory, vcpus, [vm.cputune]
//!   and the hypervisor = "native" rules); [pdc]/[nbd] kept only when a disk uses them;
//!   after the engine knows capacities: shared regions (regions), disk sizes and overlaps
//!   (resolve_disk_sizes), one device per backing file (check_backing_files)
//! hypervisor = "native": the [[vm]]s are groups of host processes: interface "host" (the
//!   default; refused under kvm and xen), cache "none" (the default; the group's page cache
//!   is the host kernel's; both checked by vdisk with the hypervisor as context), no vcpus
//!   and no [vm.cputune]
//! ```
//!
//! Parsing is two steps: serde reads the raw tables (unknown keys are errors, except in the
//! tables whose other keys are declared parameters: `[[device]]`, `[[volume]]`,
//! `[scheduler]`, `[page_cache]`, `[cpu]`, `[pdc]`, `[nbd]`, `[vm.disk.filesystem]`), then
//! [`Stack::validate`] calls each table's [`Table::from_raw`] with its field path and what
//! it needs of the tables before it, and adds the file's name to a [`FieldError`].
//!
//! ## Adding a layer's table (e.g. `[vm.disk.image]`)
//!
//! 1. In the layer's module: `RawImage` (serde, `deny_unknown_fields`, or a map read against
//!    the layer's `PARAMS`), `ImageSpec` (`Serialize`: the effective stack shows it), and
//!    `impl Table for ImageSpec` (`KEY = "image"`, its `Context`, `from_raw` returning
//!    `FieldError`s that name `{field}.key` and the accepted values); its `PARAMS`/`KeyDoc`s
//!    are its help (a `Layer` in vmio-sim's help.rs lists them).
//! 2. Register it where its table sits: `pub image: Option<RawImage>` in the enclosing raw
//!    struct (`RawDisk`), `pub image: Option<ImageSpec>` in the enclosing spec, and the one
//!    line `ImageSpec::from_raw(raw, &f(ImageSpec::KEY), cx)?` in the enclosing table's
//!    `from_raw` (or in [`Stack::validate`] for a top-level table).
//! 3. Whatever spans tables (a reference to another table, a rule of the hypervisor) goes
//!    here, in [`Stack::validate`].
//!
//! Shared hardware (`share`): a device may be a region of an earlier device's hardware, as a
//! second file or partition on the same disk is. vmio serve gives each device a backing file
//! of its own (one request queue per backing file); the disk under those files is one. The
//! device's own keys are [`crate::device`]'s; the engine that knows the hardware's capacity
//! resolves the regions ([`Stack::regions`], the simulator with its models' capacities):
//!
//! ```text
//! regions of hardware a (capacity C, from a's model), in stack order:
//!     a itself:  [0, a.size or C)              (its backing file's size when it has one)
//!     sharer s:  start = s.start or the largest end of the earlier regions on a
//!                capacity = s.capacity or C - start
//!                start + capacity <= C, else an error naming the field
//! regions may overlap (a disk and a partition of it); the simulator moves no data
//! vmio serve: s is a backing file of s.size, else of s.capacity ([`DeviceSpec::backing_size_bytes`])
//! ```
//!
//! Every error names the file and the field (`stack.toml: volume[0].layout: ...`) and lists
//! the accepted values.

pub use crate::cache::{PageCacheSpec, RawPageCache};
pub use crate::cpu::cache::{CacheTopology, RawHostCache};
pub use crate::cpu::{CpuSpec, CpuTune, RawCpu, RawCpuTune};
pub use crate::device::{DeviceSpec, RawDevice, Region, ShareSpec, SHARE_KEYS};
pub use crate::sched::{RawScheduler, SchedulerSpec};
pub use crate::table::{FieldError, SizeValue, Table};
pub use crate::vdisk::{DiskSpec, Interface, RawDisk};
pub use crate::volume::{RawVolume, VolumeSpec};

use crate::cache::pdc::PdcSpec;
use crate::cache::{CacheMemory, CacheMode};
use crate::cpu::{self, HostCpus, VmThreads};
use crate::guest;
use crate::nbd::NbdSpec;
use crate::units::quote;
use crate::vdisk::DiskContext;
use crate::volume;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum StackError {
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHost {
    pub cores: Option<u32>,
    pub memory: Option<SizeValue>,
    pub hypervisor: Option<String>,
    /// Whether the processor has EPT (`false`: the hypervisor keeps shadow page tables).
    pub ept: Option<bool>,
    /// `[host.cache]`: the cache topology and memory bus (crate::cpu::cache).
    pub cache: Option<RawHostCache>,
}

/// `[pdc]`: the parameters of [`crate::cache::pdc::PARAMS`].
pub type RawPdc = <PdcSpec as Table>::Raw;
/// `[nbd]`: the parameters of [`crate::nbd::PARAMS`].
pub type RawNbd = <NbdSpec as Table>::Raw;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawVm {
    pub name: String,
    pub vcpus: Option<u32>,
    pub memory: Option<SizeValue>,
    pub weight: Option<u32>,
    pub workload: Option<String>,
    /// A name of [`crate::vdisk::qemu::PROFILES`].
    pub qemu_version: Option<String>,
    /// `[vm.cputune]`: libvirt's pinning of the VM's threads.
    pub cputune: Option<RawCpuTune>,
    /// `[vm.page_cache]`: the guest page cache, keys of [`crate::cache::linux::PARAMS`].
    pub page_cache: Option<RawPageCache>,
    #[serde(default)]
    pub disk: Vec<RawDisk>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawStack {
    pub seed: Option<u64>,
    #[serde(default)]
    pub host: RawHost,
    #[serde(default)]
    pub device: Vec<RawDevice>,
    #[serde(default)]
    pub volume: Vec<RawVolume>,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub page_cache: RawPageCache,
    #[serde(default)]
    pub pdc: RawPdc,
    #[serde(default)]
    pub nbd: RawNbd,
    pub cpu: Option<RawCpu>,
    #[serde(default)]
    pub vm: Vec<RawVm>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Host {
    pub cores: u32,
    pub memory_bytes: u64,
    pub hypervisor: String,
    /// EPT (shown only when false).
    #[serde(skip_serializing_if = "is_true")]
    pub ept: bool,
    /// `[host.cache]`, when the file has it (absent: no cache or bus contention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheTopology>,
}

fn is_true(b: &bool) -> bool {
    *b
}

#[derive(Clone, Debug, Serialize)]
pub struct VmSpec {
    pub name: String,
    pub vcpus: u32,
    pub memory_bytes: u64,
    pub weight: u32,
    pub workload: Option<String>,
    /// The QEMU release running the VM (shown when not the default).
    #[serde(skip_serializing_if = "is_default_qemu")]
    pub qemu_version: &'static str,
    /// `[vm.cputune]` (shown only when something is pinned).
    #[serde(skip_serializing_if = "CpuTune::is_empty")]
    pub cputune: CpuTune,
    /// The guest's page cache (buffered I/O inside the VM).
    pub page_cache: PageCacheSpec,
    pub disks: Vec<DiskSpec>,
}

/// A validated stack.
#[derive(Clone, Debug, Serialize)]
pub struct Stack {
    pub file: String,
    pub seed: Option<u64>,
    pub host: Host,
    pub devices: Vec<DeviceSpec>,
    pub volumes: Vec<VolumeSpec>,
    pub scheduler: SchedulerSpec,
    pub page_cache: PageCacheSpec,
    /// `[pdc]`, the journal detector's parameters, when a disk has `cache = "pdc"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pdc: Option<PdcSpec>,
    /// `[nbd]`, the NBD path's costs, when a disk has `interface = "nbd"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbd: Option<NbdSpec>,
    /// `[cpu]`, when the file has it (absent: every thread has a core of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSpec>,
    pub vms: Vec<VmSpec>,
}

fn is_default_qemu(v: &&'static str) -> bool {
    *v == crate::vdisk::qemu::DEFAULT
}

impl Host {
    /// What `[cpu]`'s checks read of the host.
    fn cpus(&self) -> HostCpus<'_> {
        HostCpus {
            cores: self.cores,
            hypervisor: &self.hypervisor,
        }
    }
}

impl Stack {
    /// The CPU model in effect: `[cpu] model`, or "dedicated" without `[cpu]`.
    pub fn cpu_model(&self) -> &'static str {
        self.cpu.as_ref().map_or(cpu::DEDICATED, |c| c.model)
    }
}

struct Ctx<'a> {
    file: &'a str,
}

/// Longest message of a stack error, in characters (names and values quoted in it are user
/// text; see [`crate::units::quote`]).
const MAX_MESSAGE: usize = 240;

/// `text` on one line (control characters escaped) and at most [`MAX_MESSAGE`] characters.
fn one_line(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.trim().chars().enumerate() {
        if i == MAX_MESSAGE {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> StackError {
        StackError::Field {
            file: self.file.to_string(),
            field: field.into(),
            message: one_line(&message.into()),
        }
    }
    /// A layer's error, with the file.
    fn at(&self, e: FieldError) -> StackError {
        self.err(e.field, e.message)
    }
    fn size(&self, field: &str, v: &SizeValue) -> Result<u64, StackError> {
        v.bytes(field).map_err(|e| self.at(e))
    }
}

impl Stack {
    /// Every VM disk in stack order as [`crate::throttle::plan_groups`] reads it: its field
    /// path (`vm[0].disk[1]`), VM, name and `[vm.disk.iotune]` (both engines plan their
    /// throttle groups from it).
    pub fn disk_iotunes(&self) -> Vec<(String, &str, &str, Option<&crate::throttle::IotuneSpec>)> {
        self.vms
            .iter()
            .enumerate()
            .flat_map(|(vi, vm)| {
                vm.disks.iter().enumerate().map(move |(di, d)| {
                    (
                        format!("vm[{vi}].disk[{di}]"),
                        vm.name.as_str(),
                        d.name.as_str(),
                        d.iotune.as_ref(),
                    )
                })
            })
            .collect()
    }

    /// Parse and validate stack-file text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Stack, StackError> {
        let raw: RawStack = toml::from_str(text).map_err(|e| {
            // The toml crate's Display spans several lines (a source excerpt and a caret);
            // keep its message and turn the span into file:line:column.
            let mut missing_value = false;
            let at = match e.span() {
                Some(span) => {
                    let before = &text.as_bytes()[..span.start.min(text.len())];
                    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
                    let line_start = before
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |p| p + 1);
                    let column = String::from_utf8_lossy(&before[line_start..])
                        .chars()
                        .count()
                        + 1;
                    missing_value = String::from_utf8_lossy(&before[line_start..])
                        .trim_end()
                        .ends_with('=');
                    format!(":{line}:{column}")
                }
                None => String::new(),
            };
            // The toml crate gives some errors (a value missing at the end of the text) an
            // empty message: say what it is, so the line is never only a position.
            let message = match e.message().trim() {
                "" if missing_value => {
                    "a value is missing after '='; accepted: key = value (a string in quotes, a number, true/false, an array or an inline table)".to_string()
                }
                "" => "not valid TOML here (the TOML parser gives no detail); accepted: TOML (https://toml.io), key = value lines under [table] headers".to_string(),
                m => m.replace('\n', "; "),
            };
            StackError::Parse {
                file: format!("{file}{at}"),
                message: one_line(&message),
            }
        })?;
        Self::validate(&raw, file)
    }

    pub fn validate(raw: &RawStack, file: &str) -> Result<Stack, StackError> {
        let c = Ctx { file };
        let host = Host {
            cores: raw.host.cores.unwrap_or(8),
            memory_bytes: match &raw.host.memory {
                Some(v) => c.size("host.memory", v)?,
                None => 32 << 30,
            },
            hypervisor: raw.host.hypervisor.clone().unwrap_or_else(|| "kvm".into()),
            ept: raw.host.ept.unwrap_or(true),
            cache: None,
        };
        if host.cores == 0 {
            return Err(c.err("host.cores", "must be at least 1"));
        }
        let mut host = host;
        if let Some(t) = &raw.host.cache {
            let cx = cpu::cache::HostCores { cores: host.cores };
            host.cache = Some(
                CacheTopology::from_raw(t, &format!("host.{}", CacheTopology::KEY), cx)
                    .map_err(|e| c.at(e))?,
            );
        }
        if !["kvm", "xen", "native"].contains(&host.hypervisor.as_str()) {
            return Err(c.err(
                "host.hypervisor",
                format!(
                    "'{}' is not valid; accepted: kvm, xen, native",
                    host.hypervisor
                ),
            ));
        }
        if raw.device.is_empty() {
            return Err(c.err("device", "at least one [[device]] is required"));
        }
        let mut devices: Vec<DeviceSpec> = Vec::new();
        let mut dev_index = BTreeMap::new();
        for (i, d) in raw.device.iter().enumerate() {
            let device =
                DeviceSpec::from_raw(d, &format!("device[{i}]"), &devices).map_err(|e| c.at(e))?;
            dev_index.insert(d.name.clone(), i);
            devices.push(device);
        }
        if raw.volume.is_empty() {
            return Err(c.err("volume", "at least one [[volume]] is required"));
        }
        let mut volumes = Vec::new();
        let mut vol_index = BTreeMap::new();
        let mut dev_volume: BTreeMap<usize, usize> = BTreeMap::new();
        for (i, v) in raw.volume.iter().enumerate() {
            let f = |k: &str| format!("volume[{i}].{k}");
            // The layout's name first, then the references (the volume's other checks last).
            volume::lookup(&v.layout).map_err(|m| c.err(f("layout"), m))?;
            if vol_index.insert(v.name.clone(), i).is_some() {
                return Err(c.err(f("name"), format!("'{}' is defined twice", v.name)));
            }
            let mut devs = Vec::new();
            for (j, name) in v.devices.iter().enumerate() {
                let idx = *dev_index.get(name).ok_or_else(|| {
                    c.err(
                        format!("volume[{i}].devices[{j}]"),
                        format!(
                            "no device named '{name}'; defined: {}",
                            raw.device
                                .iter()
                                .map(|d| d.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
                if devs.contains(&idx) {
                    return Err(c.err(
                        format!("volume[{i}].devices[{j}]"),
                        format!("device '{name}' is listed twice"),
                    ));
                }
                if let Some(other) = dev_volume.insert(idx, i) {
                    return Err(c.err(
                        format!("volume[{i}].devices[{j}]"),
                        format!(
                            "device '{name}' is already used by volume[{other}] '{}'; accepted: each device in one volume",
                            raw.volume[other].name
                        ),
                    ));
                }
                devs.push(idx);
            }
            volumes
                .push(VolumeSpec::from_raw(v, &format!("volume[{i}]"), devs).map_err(|e| c.at(e))?);
        }
        let scheduler =
            SchedulerSpec::from_raw(&raw.scheduler, SchedulerSpec::KEY, ()).map_err(|e| c.at(e))?;
        let page_cache = PageCacheSpec::from_raw(
            &raw.page_cache,
            PageCacheSpec::KEY,
            CacheMemory {
                default_bytes: host.memory_bytes / 2,
                limit_bytes: host.memory_bytes,
                limit_field: "host.memory",
            },
        )
        .map_err(|e| c.at(e))?;
        let pdc = PdcSpec::from_raw(&raw.pdc, PdcSpec::KEY, ()).map_err(|e| c.at(e))?;
        let nbd = NbdSpec::from_raw(&raw.nbd, NbdSpec::KEY, ()).map_err(|e| c.at(e))?;
        let cpu = match &raw.cpu {
            Some(t) => Some(CpuSpec::from_raw(t, CpuSpec::KEY, host.cpus()).map_err(|e| c.at(e))?),
            None => None,
        };
        let native = host.hypervisor == "native";
        if raw.vm.is_empty() {
            return Err(c.err("vm", "at least one [[vm]] is required"));
        }
        let mut vms: Vec<VmSpec> = Vec::new();
        for (i, v) in raw.vm.iter().enumerate() {
            if vms.iter().any(|o| o.name == v.name) {
                return Err(c.err(
                    format!("vm[{i}].name"),
                    format!("'{}' is defined twice", v.name),
                ));
            }
            let weight = v.weight.unwrap_or(500);
            if !(10..=1000).contains(&weight) {
                return Err(c.err(
                    format!("vm[{i}].weight"),
                    format!("{weight}: must be within 10..=1000 (blkio.weight)"),
                ));
            }
            if v.disk.is_empty() {
                return Err(c.err(
                    format!("vm[{i}].disk"),
                    "each VM needs at least one [[vm.disk]]",
                ));
            }
            if native && v.vcpus.is_some() {
                return Err(c.err(
                    format!("vm[{i}].vcpus"),
                    "has no meaning with host.hypervisor = \"native\" (no VM): each job is a host thread; pin jobs with fio's cpus_allowed",
                ));
            }
            let vcpus = v.vcpus.unwrap_or(1).max(1);
            let qemu = match &v.qemu_version {
                None => crate::vdisk::qemu::default_profile(),
                Some(name) => crate::vdisk::qemu::lookup(name).ok_or_else(|| {
                    c.err(
                        format!("vm[{i}].qemu_version"),
                        format!(
                            "'{}' is not valid; accepted: {}",
                            quote(name),
                            crate::vdisk::qemu::accepted()
                        ),
                    )
                })?,
            };
            let mut disks: Vec<DiskSpec> = Vec::new();
            for (j, d) in v.disk.iter().enumerate() {
                let f = |k: &str| format!("vm[{i}].disk[{j}].{k}");
                if disks.iter().any(|o| o.name == d.name) {
                    return Err(c.err(f("name"), format!("'{}' is defined twice", d.name)));
                }
                let volume = *vol_index.get(&d.volume).ok_or_else(|| {
                    c.err(
                        f("volume"),
                        format!(
                            "no volume named '{}'; defined: {}",
                            d.volume,
                            raw.volume
                                .iter()
                                .map(|v| v.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
                let cx = DiskContext {
                    volume,
                    hypervisor: &host.hypervisor,
                    vcpus,
                    qemu,
                };
                disks.push(
                    DiskSpec::from_raw(d, &format!("vm[{i}].disk[{j}]"), cx)
                        .map_err(|e| c.at(e))?,
                );
            }
            let memory_bytes = match &v.memory {
                Some(m) => c.size(&format!("vm[{i}].memory"), m)?,
                None => 1 << 30,
            };
            let empty = RawPageCache::new();
            let guest_cache = PageCacheSpec::from_raw(
                v.page_cache.as_ref().unwrap_or(&empty),
                &format!("vm[{i}].page_cache"),
                CacheMemory {
                    default_bytes: guest::params::guest_cache_bytes(memory_bytes),
                    limit_bytes: memory_bytes,
                    limit_field: &format!("vm[{i}].memory"),
                },
            )
            .map_err(|e| c.at(e))?;
            let cputune = match &v.cputune {
                Some(_) if native => {
                    return Err(c.err(
                        format!("vm[{i}].cputune"),
                        "has no meaning with host.hypervisor = \"native\" (no VM); pin jobs with fio's cpus_allowed",
                    ));
                }
                Some(t) => CpuTune::from_raw(
                    t,
                    &format!("vm[{i}].cputune"),
                    VmThreads {
                        cores: host.cores,
                        vcpus,
                        iothreads: disks.iter().map(|d| d.queue.iothreads as usize).sum(),
                    },
                )
                .map_err(|e| c.at(e))?,
                None => CpuTune::default(),
            };
            vms.push(VmSpec {
                name: v.name.clone(),
                vcpus,
                cputune,
                memory_bytes,
                weight,
                workload: v.workload.clone(),
                qemu_version: qemu.name,
                page_cache: guest_cache,
                disks,
            });
        }
        let any_disk = |f: &dyn Fn(&DiskSpec) -> bool| vms.iter().flat_map(|v| &v.disks).any(f);
        Ok(Stack {
            file: file.to_string(),
            seed: raw.seed,
            host,
            devices,
            volumes,
            scheduler,
            page_cache,
            pdc: any_disk(&|d| d.cache == CacheMode::Pdc).then_some(pdc),
            nbd: any_disk(&|d| d.interface == Interface::Nbd).then_some(nbd),
            cpu,
            vms,
        })
    }

    /// Each device's region of its hardware when the hardware is shared (the shared device's
    /// and every sharing device's), None for the others. `hardware_bytes[i]` is the capacity
    /// of device `i`'s model (read for the shared devices). The rules are the module
    /// documentation's; an error names the field.
    pub fn regions(&self, hardware_bytes: &[u64]) -> Result<Vec<Option<Region>>, StackError> {
        let c = Ctx { file: &self.file };
        let mut out: Vec<Option<Region>> = vec![None; self.devices.len()];
        for (i, d) in self.devices.iter().enumerate() {
            let Some(s) = &d.share else { continue };
            let hw = s.device;
            let cap = hardware_bytes[hw];
            let owner = quote(&self.devices[hw].name);
            if out[hw].is_none() {
                let own = self.devices[hw].size_bytes.unwrap_or(cap);
                if own > cap {
                    return Err(c.err(
                        format!("device[{hw}].size"),
                        format!(
                            "{own} bytes: '{owner}' is shared, its region of its hardware is [0, size), beyond its capacity ({cap} bytes); accepted: a size up to {cap}"
                        ),
                    ));
                }
                out[hw] = Some(Region {
                    hardware: hw,
                    start_bytes: 0,
                    capacity_bytes: own,
                });
            }
            let start = match s.start_bytes {
                Some(b) => b,
                None => out
                    .iter()
                    .flatten()
                    .filter(|r| r.hardware == hw)
                    .map(|r| r.start_bytes + r.capacity_bytes)
                    .max()
                    .unwrap_or(0),
            };
            let capacity = s
                .capacity_bytes
                .unwrap_or(cap.saturating_sub(start) / 4096 * 4096);
            if start >= cap || capacity == 0 {
                let why = if s.start_bytes.is_some() {
                    String::new()
                } else {
                    " (the default: right after the earlier regions on the hardware)".to_string()
                };
                return Err(c.err(
                    format!("device[{i}].start"),
                    format!(
                        "{start} bytes{why} leaves no room on the hardware of '{owner}' ({cap} bytes); accepted: a start below {cap}, or a size on '{owner}' (its own region [0, size))"
                    ),
                ));
            }
            if !matches!(start.checked_add(capacity), Some(end) if end <= cap) {
                return Err(c.err(
                    format!("device[{i}].capacity"),
                    format!(
                        "start {start} + capacity {capacity} bytes exceeds the capacity of '{owner}' ({cap} bytes); accepted: a capacity up to {}",
                        cap - start
                    ),
                ));
            }
            out[i] = Some(Region {
                hardware: hw,
                start_bytes: start,
                capacity_bytes: capacity,
            });
        }
        Ok(out)
    }

    /// Check that every disk fits in its volume once device capacities are known
    /// (`volume_bytes[i]` = usable size of volume i). A disk of size 0 takes the rest (an
    /// image chain: the largest virtual size whose host bytes fit). A disk's region is its
    /// image chain's host bytes ([`crate::image::ImageSpec::file_bytes`]; raw: its size).
    pub fn resolve_disk_sizes(&mut self, volume_bytes: &[u64]) -> Result<(), StackError> {
        let file = self.file.clone();
        let c = Ctx { file: &file };
        for (i, vm) in self.vms.iter_mut().enumerate() {
            for (j, d) in vm.disks.iter_mut().enumerate() {
                let cap = volume_bytes[d.volume];
                if d.offset_bytes >= cap {
                    return Err(c.err(
                        format!("vm[{i}].disk[{j}].offset"),
                        format!(
                            "{} is beyond the end of the volume ({cap} bytes)",
                            d.offset_bytes
                        ),
                    ));
                }
                if d.size_bytes == 0 {
                    // the rest of the volume; an image chain: the largest virtual size it fits
                    d.size_bytes = d.image.largest_virtual_size(cap - d.offset_bytes);
                }
                if let Err(m) = d.image.check_size(d.size_bytes) {
                    return Err(c.err(format!("vm[{i}].disk[{j}].size"), m));
                }
                let region = d.image.file_bytes(d.size_bytes);
                if !matches!(d.offset_bytes.checked_add(region), Some(end) if end <= cap) {
                    return Err(c.err(
                        format!("vm[{i}].disk[{j}].size"),
                        if region == d.size_bytes {
                            format!(
                                "offset {} + size {} exceeds the volume's {cap} bytes",
                                d.offset_bytes, d.size_bytes
                            )
                        } else {
                            format!(
                                "offset {} + the {region} host bytes of its {} image chain (size {}) exceed the volume's {cap} bytes",
                                d.offset_bytes,
                                d.format.name(),
                                d.size_bytes
                            )
                        },
                    ));
                }
            }
        }
        // Disks of one volume must not overlap: two guests writing the same blocks is never
        // what a stack means (and QEMU would refuse to share an image without share-rw).
        let mut spans: Vec<(usize, u64, u64, usize, usize)> = Vec::new();
        for (i, vm) in self.vms.iter().enumerate() {
            for (j, d) in vm.disks.iter().enumerate() {
                spans.push((
                    d.volume,
                    d.offset_bytes,
                    d.offset_bytes + d.image.file_bytes(d.size_bytes),
                    i,
                    j,
                ));
            }
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            let ((va, sa, ea, ia, ja), (vb, sb, eb, ib, jb)) = (w[0], w[1]);
            if va == vb && sb < ea && sa < eb {
                let (mut a, mut b) = ((ia, ja, sa, ea), (ib, jb, sb, eb));
                if (a.0, a.1) > (b.0, b.1) {
                    std::mem::swap(&mut a, &mut b);
                }
                return Err(c.err(
                    format!("vm[{}].disk[{}]", b.0, b.1),
                    format!(
                        "bytes {}..{} of volume '{}' overlap vm[{}].disk[{}] (bytes {}..{}); accepted: disks of one volume at disjoint offset..offset+size ranges",
                        b.2,
                        b.3,
                        crate::units::quote(&self.volumes[va].name),
                        a.0,
                        a.1,
                        a.2,
                        a.3
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuse two devices backed by the same file: by (st_dev, st_ino) when both paths exist,
    /// else by normalized absolute path (relative paths are taken from `dir`, the stack file's
    /// directory). The error names both devices.
    pub fn check_backing_files(&self, dir: &Path) -> Result<(), StackError> {
        let mut seen: Vec<(usize, BackingKey)> = Vec::new();
        for (i, d) in self.devices.iter().enumerate() {
            let Some(p) = d.path.as_deref() else { continue };
            let key = BackingKey::of(dir, p);
            if let Some((k, _)) = seen.iter().find(|(_, other)| *other == key) {
                let other = &self.devices[*k];
                return Err(Ctx { file: &self.file }.err(
                    format!("device[{i}].path"),
                    format!(
                        "'{}' of device '{}' is the same file as device[{k}] '{}' ('{}'); accepted: one device per backing file",
                        crate::units::quote(p),
                        crate::units::quote(&d.name),
                        crate::units::quote(&other.name),
                        crate::units::quote(other.path.as_deref().unwrap_or(""))
                    ),
                ));
            }
            seen.push((i, key));
        }
        Ok(())
    }
}

/// What makes two backing paths the same file.
#[derive(PartialEq, Eq)]
enum BackingKey {
    #[cfg(unix)]
    Inode(u64, u64),
    Path(PathBuf),
}

impl BackingKey {
    fn of(dir: &Path, path: &str) -> Self {
        let full = if Path::new(path).is_absolute() {
            PathBuf::from(path)
        } else {
            dir.join(path)
        };
        #[cfg(unix)]
        if let Ok(m) = std::fs::metadata(&full) {
            use std::os::unix::fs::MetadataExt;
            return BackingKey::Inode(m.dev(), m.ino());
        }
        let abs = if full.is_absolute() {
            full
        } else {
            std::env::current_dir().unwrap_or_default().join(full)
        };
        // Lexical normalization: drop `.`, resolve `..` (the file does not exist, so there is
        // no symlink to follow).
        let mut out = PathBuf::new();
        for c in abs.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        BackingKey::Path(out)
    }
}

#[cfg(test)]
mod tests;
