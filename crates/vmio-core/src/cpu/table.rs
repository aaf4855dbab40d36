//! The CPU layer's tables: `[cpu]` (the model, CFS's and the hypervisor mechanisms'
//! parameters, Xen's dom0), `[vm.cputune]` (libvirt's pinning of a VM's threads) and the
//! `[host] cores` bound of [`MAX_CORES`].
//!
//! ```text
//! [cpu]: model names MODELS (default dedicated); the other keys against cfs::PARAMS and
//!        hypervisor::PARAMS; dom0_vcpus (1..=host.cores, default 1) and dom0_pin (a cpuset)
//!        only with host.hypervisor = "xen"; host.cores at most MAX_CORES
//! [vm.cputune]: vcpupin (at most one cpuset per vCPU), emulatorpin, iothreadpin (at most one
//!        per disk with iothread = true); cpusets in libvirt's syntax within host.cores
//! ```

use super::{params, CoreSet, DEDICATED, MAX_CORES, MODELS};
use crate::params::Values;
use crate::table::{FieldError, Table};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[cpu]`: `model`, `dom0_vcpus`, `dom0_pin` and the parameters of [`super::cfs::PARAMS`] and
/// [`super::hypervisor::PARAMS`].
pub type RawCpu = BTreeMap<String, toml::Value>;

/// `[vm.cputune]`: libvirt's `<cputune>` pinning, cpusets in libvirt's syntax.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCpuTune {
    /// A cpuset per vCPU, by vCPU index (`<vcpupin vcpu='i' cpuset='…'/>`).
    pub vcpupin: Option<Vec<String>>,
    /// QEMU's main loop (`<emulatorpin cpuset='…'/>`).
    pub emulatorpin: Option<String>,
    /// A cpuset per iothread, in the order of the disks with `iothread = true`.
    pub iothreadpin: Option<Vec<String>>,
}

/// `[cpu]` as validated: the model, its and the hypervisor mechanisms' parameters, and
/// Xen's dom0.
#[derive(Clone, Debug)]
pub struct CpuSpec {
    /// One of [`MODELS`].
    pub model: &'static str,
    /// Every key of [`super::cfs::PARAMS`] and [`super::hypervisor::PARAMS`].
    pub params: Values,
    /// Xen's dom0 vCPUs (`dom0_max_vcpus`); 0 unless the hypervisor is xen.
    pub dom0_vcpus: u32,
    /// Xen's `dom0_vcpus_pin`: where dom0's vCPUs run (None: anywhere).
    pub dom0_pin: Option<CoreSet>,
}

impl Serialize for CpuSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("model", self.model)?;
        for (spec, v) in self.params.iter() {
            if super::hypervisor::QUIET.contains(&spec.name) && v == spec.default {
                continue;
            }
            m.serialize_entry(&spec.record_key(), &v)?;
        }
        if self.dom0_vcpus > 0 {
            m.serialize_entry("dom0_vcpus", &self.dom0_vcpus)?;
            m.serialize_entry("dom0_pin", &self.dom0_pin.map(|c| c.0))?;
        }
        m.end()
    }
}

/// `[vm.cputune]` as validated (cpusets as [`CoreSet`]s; None: not pinned).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuTune {
    pub vcpupin: Vec<Option<CoreSet>>,
    pub emulatorpin: Option<CoreSet>,
    pub iothreadpin: Vec<Option<CoreSet>>,
}

impl CpuTune {
    /// Nothing pinned (the effective stack leaves `[vm.cputune]` out).
    pub fn is_empty(&self) -> bool {
        *self == CpuTune::default()
    }
}

/// What `[cpu]`'s checks read of `[host]`.
#[derive(Clone, Copy, Debug)]
pub struct HostCpus<'a> {
    pub cores: u32,
    pub hypervisor: &'a str,
}

/// What `[vm.cputune]`'s checks read: the host's cores, the VM's vCPUs and iothreads.
#[derive(Clone, Copy, Debug)]
pub struct VmThreads {
    pub cores: u32,
    pub vcpus: u32,
    pub iothreads: usize,
}

/// `[cpu]`: the model, CFS's and the mechanisms' keys, and Xen's dom0.
impl Table for CpuSpec {
    const KEY: &'static str = "cpu";
    type Raw = RawCpu;
    type Context<'a> = HostCpus<'a>;

    fn from_raw(t: &RawCpu, field: &str, host: HostCpus) -> Result<Self, FieldError> {
        let at = |key: &str| format!("{field}.{key}");
        let model = match t.get("model") {
            None => DEDICATED,
            Some(v) => match v.as_str().and_then(|m| MODELS.iter().find(|n| **n == m)) {
                Some(n) => n,
                None => {
                    let shown = v.as_str().map_or_else(|| v.to_string(), String::from);
                    return Err(FieldError::new(
                        at("model"),
                        format!("'{shown}' is not valid; accepted: {}", MODELS.join(", ")),
                    ));
                }
            },
        };
        let xen = host.hypervisor == "xen";
        let mut dom0_vcpus = u32::from(xen);
        if let Some(v) = t.get("dom0_vcpus") {
            match v.as_integer() {
                Some(n) if xen && (1..=i64::from(host.cores)).contains(&n) => dom0_vcpus = n as u32,
                _ if !xen => {
                    return Err(FieldError::new(
                        at("dom0_vcpus"),
                        "only valid with host.hypervisor = \"xen\"",
                    ))
                }
                _ => {
                    return Err(FieldError::new(
                        at("dom0_vcpus"),
                        format!(
                            "{v}: accepted: an integer from 1 to host.cores ({})",
                            host.cores
                        ),
                    ))
                }
            }
        }
        let dom0_pin = match t.get("dom0_pin") {
            None => None,
            Some(_) if !xen => {
                return Err(FieldError::new(
                    at("dom0_pin"),
                    "only valid with host.hypervisor = \"xen\"",
                ))
            }
            Some(toml::Value::String(s)) => Some(
                CoreSet::parse(s, host.cores as usize)
                    .map_err(|m| FieldError::new(at("dom0_pin"), m))?,
            ),
            Some(other) => {
                return Err(FieldError::new(
                    at("dom0_pin"),
                    format!("{other}: accepted: a libvirt cpuset string such as \"0\" or \"0-1\""),
                ))
            }
        };
        let mut values = Values::defaults(params());
        values
            .read(t, &["model", "dom0_vcpus", "dom0_pin"])
            .map_err(|e| FieldError::param(field, e))?;
        if host.cores as usize > MAX_CORES {
            return Err(FieldError::new(
                "host.cores",
                format!("{}: [cpu] models at most {} cores", host.cores, MAX_CORES),
            ));
        }
        Ok(CpuSpec {
            model,
            params: values,
            dom0_vcpus,
            dom0_pin,
        })
    }
}

/// `[vm.cputune]` of a VM with `vcpus` vCPUs and `iothreads` iothreads.
impl Table for CpuTune {
    const KEY: &'static str = "cputune";
    type Raw = RawCpuTune;
    type Context<'a> = VmThreads;

    fn from_raw(t: &RawCpuTune, field: &str, vm: VmThreads) -> Result<Self, FieldError> {
        let (cores, vcpus, iothreads) = (vm.cores as usize, vm.vcpus, vm.iothreads);
        let set = |field: String, s: &str| {
            CoreSet::parse(s, cores).map_err(|m| FieldError::new(field, m))
        };
        let list = |name: &str, v: &Option<Vec<String>>, max: usize, what: &str| {
            let v = v.as_deref().unwrap_or(&[]);
            if v.len() > max {
                return Err(FieldError::new(
                    format!("{field}.{name}"),
                    format!(
                        "{} cpusets for {max} {what}; accepted: at most one per {what}",
                        v.len()
                    ),
                ));
            }
            v.iter()
                .enumerate()
                .map(|(k, s)| set(format!("{field}.{name}[{k}]"), s).map(Some))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(CpuTune {
            vcpupin: list("vcpupin", &t.vcpupin, vcpus as usize, "vCPU")?,
            emulatorpin: match &t.emulatorpin {
                Some(s) => Some(set(format!("{field}.emulatorpin"), s)?),
                None => None,
            },
            iothreadpin: list(
                "iothreadpin",
                &t.iothreadpin,
                iothreads,
                "iothread (disk with iothread = true)",
            )?,
        })
    }
}
