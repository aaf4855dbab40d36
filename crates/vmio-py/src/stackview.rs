//! `vmio._native.load_stack`: a stack file as Rust reads it (parsed, defaulted, validated),
//! for Python's `vmio.stackfile`, so that no Python module re-reads the TOML and repeats a
//! default.
//!
//! The checks are the simulator's, in its order (vmio-sim `run::run_many_watched`, then
//! `sim::Sim::new`), with its one-line errors (`stack.toml: vm[0].disk[0].interface: ...`):
//!
//! ```text
//! stack   = Stack::from_toml(text, path)                   parse, defaults, cross references
//! stack.check_backing_files(dir of path)                   one device per backing file
//! each device without share: model, profile and parameters (device::read_params), its
//!         capacity (device::estimated_bytes: the model's checks, nothing allocated)
//! regions = stack.regions(capacities)                      shared hardware
//! each volume: volume::build over its devices' capacities  its capacity, default read-ahead
//! stack.resolve_disk_sizes(volume capacities)              size 0: the rest of the volume
//! ```
//!
//! The view is plain data (dicts, lists, numbers, strings, None); references between tables
//! are names (a volume's devices, a disk's volume, a sharing device's hardware). Sizes are in
//! bytes; `read_ahead_kb` as the stack file writes it. A parameter table lists every value in
//! effect under its record key (`stripe_size_bytes`, `read_expire_ns`), as result records do.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::{json, Map, Value};
use vmio_core::params::Values;
use vmio_core::stack::Stack;
use vmio_core::volume;
use vmio_sim::device::{estimated_bytes, read_params};
use vmio_sim::sim::SimError;

/// Parse, default and validate stack-file `text` (`path` names it in errors and is the
/// directory relative backing paths are taken from); the stack as a dict (module doc).
#[pyfunction]
pub fn load_stack(py: Python<'_>, text: &str, path: &str) -> PyResult<PyObject> {
    let v = py.allow_threads(|| view(text, path)).map_err(crate::err)?;
    Ok(to_py(py, &v))
}

/// Add this module's functions to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_stack, m)?)
}

/// Every value of a parameter table under its record key.
fn values(v: &Values) -> Map<String, Value> {
    v.iter()
        .map(|(spec, value)| (spec.record_key(), json!(value)))
        .collect()
}

/// The cores of a cpuset, ascending.
fn cores(set: vmio_core::cpu::CoreSet) -> Vec<usize> {
    (0..64).filter(|&c| set.contains(c)).collect()
}

/// The stack of `text` as the simulator reads it (module doc), as JSON-like data.
pub fn view(text: &str, path: &str) -> Result<Value, SimError> {
    let mut stack = Stack::from_toml(text, path)?;
    let dir = std::path::Path::new(path)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    stack.check_backing_files(dir)?;
    let file = stack.file.clone();
    let dev_err = |source| SimError::Device {
        file: file.clone(),
        source,
    };
    // Each device's hardware (itself, or the device it shares): its profile, values, capacity.
    let mut models = Vec::new();
    let mut hardware_bytes = Vec::new();
    for d in &stack.devices {
        let hw = &stack.devices[d.share.as_ref().map_or(models.len(), |s| s.device)];
        let (_, profile, vals) =
            read_params(&hw.name, &hw.model, hw.profile.as_deref(), &hw.params).map_err(dev_err)?;
        // estimated_bytes runs the checks of the model's constructor without allocating and
        // gives the capacity the model would have.
        let cap = match &d.share {
            Some(_) => 0,
            None => {
                estimated_bytes(&d.name, &d.model, d.profile.as_deref(), &d.params)
                    .map_err(dev_err)?
                    .1
            }
        };
        hardware_bytes.push(cap);
        models.push((profile, vals));
    }
    let regions = stack.regions(&hardware_bytes)?;
    let dev_bytes: Vec<u64> = regions
        .iter()
        .zip(&hardware_bytes)
        .map(|(r, &cap)| r.map_or(cap, |r| r.capacity_bytes))
        .collect();
    let mut vols = Vec::new();
    for v in &stack.volumes {
        let caps: Vec<u64> = v.devices.iter().map(|&i| dev_bytes[i]).collect();
        let layout = volume::build(&v.name, v.layout, &caps, &v.params).map_err(|source| {
            SimError::Volume {
                file: file.clone(),
                source,
            }
        })?;
        vols.push((layout.capacity_bytes(), layout.default_read_ahead_bytes()));
    }
    stack.resolve_disk_sizes(&vols.iter().map(|v| v.0).collect::<Vec<_>>())?;
    let name = |i: usize| stack.devices[i].name.clone();
    let devices: Vec<Value> = stack
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            json!({
                "name": d.name,
                "model": d.model,
                "profile": models[i].0,
                "settings": values(&models[i].1),
                "params": d.params,
                "path": d.path,
                "size_bytes": d.size_bytes,
                "backing_size_bytes": d.backing_size_bytes(),
                "share": d.share.as_ref().map(|s| json!({
                    "device": name(s.device),
                    "start_bytes": s.start_bytes,
                    "capacity_bytes": s.capacity_bytes,
                })),
                "start_bytes": regions[i].map_or(0, |r| r.start_bytes),
                "capacity_bytes": dev_bytes[i],
            })
        })
        .collect();
    let volumes: Vec<Value> = stack
        .volumes
        .iter()
        .zip(&vols)
        .map(|(v, &(capacity, default_ra))| {
            json!({
                "name": v.name,
                "layout": v.layout.name,
                "devices": v.devices.iter().map(|&i| name(i)).collect::<Vec<_>>(),
                "params": values(&v.params),
                "read_ahead_kb": v.read_ahead_kb.unwrap_or(default_ra / 1024),
                "capacity_bytes": capacity,
            })
        })
        .collect();
    let page_cache = |p: &vmio_core::stack::PageCacheSpec| {
        let mut m = serde_json::to_value(p).unwrap_or_default();
        m["eviction"] = json!(p.eviction);
        m
    };
    let vms: Vec<Value> = stack
        .vms
        .iter()
        .map(|vm| {
            let disks: Vec<Value> = vm
                .disks
                .iter()
                .map(|d| {
                    json!({
                        "name": d.name,
                        "volume": stack.volumes[d.volume].name,
                        "offset_bytes": d.offset_bytes,
                        "size_bytes": d.size_bytes,
                        "interface": d.interface.name(),
                        "cache": d.cache.name(),
                        "queue_depth": d.queue_depth,
                        "iothread": d.iothread,
                        "read_ahead_kb": d.read_ahead_bytes / 1024,
                        "filesystem": d.filesystem.as_ref().map(|f| json!({
                            "type": f.fs_type,
                            "mount": f.mount,
                            "size_bytes": f.size_bytes,
                            "data": f.data,
                            "commit_ns": f.commit_ns,
                            "barrier": f.barrier,
                            "journal_bytes": f.journal_bytes,
                        })),
                    })
                })
                .collect();
            let t = &vm.cputune;
            json!({
                "name": vm.name,
                "vcpus": vm.vcpus,
                "memory_bytes": vm.memory_bytes,
                "weight": vm.weight,
                "workload": vm.workload,
                "cputune": {
                    "vcpupin": t.vcpupin.iter().map(|c| c.map(cores)).collect::<Vec<_>>(),
                    "emulatorpin": t.emulatorpin.map(cores),
                    "iothreadpin": t.iothreadpin.iter().map(|c| c.map(cores)).collect::<Vec<_>>(),
                },
                "page_cache": page_cache(&vm.page_cache),
                "disks": disks,
            })
        })
        .collect();
    Ok(json!({
        "file": stack.file,
        "seed": stack.seed,
        "host": stack.host,
        "devices": devices,
        "volumes": volumes,
        "scheduler": {"name": stack.scheduler.name(), "params": values(&stack.scheduler.params)},
        "page_cache": page_cache(&stack.page_cache),
        "pdc": stack.pdc,
        "nbd": stack.nbd,
        "cpu": stack.cpu.as_ref().map(|c| json!({
            "model": c.model,
            "params": values(&c.params),
            "dom0_vcpus": c.dom0_vcpus,
            "dom0_pin": c.dom0_pin.map(cores),
        })),
        "cpu_model": stack.cpu_model(),
        "vms": vms,
    }))
}

/// JSON-like data as Python objects (objects: dicts, arrays: lists).
fn to_py(py: Python<'_>, v: &Value) -> PyObject {
    match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py(py),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_py(py),
            (None, Some(i)) => i.into_py(py),
            _ => n.as_f64().unwrap_or(f64::NAN).into_py(py),
        },
        Value::String(s) => s.into_py(py),
        Value::Array(a) => PyList::new_bound(py, a.iter().map(|x| to_py(py, x))).into_py(py),
        Value::Object(m) => {
            let d = PyDict::new_bound(py);
            for (k, x) in m {
                // Setting a str key in a fresh dict cannot fail.
                let _ = d.set_item(k, to_py(py, x));
            }
            d.into_py(py)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STACK: &str = r#"
[[device]]
name = "d"
model = "ssd"

[[volume]]
name = "v"
layout = "single"
devices = ["d"]

[[vm]]
name = "a"

[[vm.disk]]
name = "vda"
volume = "v"
size = "1g"

[[vm.disk]]
name = "vdb"
volume = "v"
offset = "1g"
[vm.disk.filesystem]
type = "ext4"
"#;

    #[test]
    fn the_view_shows_the_defaults_rust_applies() {
        let v = view(STACK, "dir/stack.toml").unwrap();
        let disks = &v["vms"][0]["disks"];
        assert_eq!(disks[0]["interface"], "virtio-blk");
        assert_eq!(disks[0]["cache"], "writeback");
        assert_eq!(disks[0]["volume"], "v");
        assert_eq!(disks[1]["filesystem"]["mount"], "/mnt/vdb");
        assert_eq!(v["host"]["hypervisor"], "kvm");
        assert_eq!(v["vms"][0]["weight"], 500);
        assert_eq!(v["volumes"][0]["devices"][0], "d");
        // The second disk takes the rest of the volume, as the simulator resolves it.
        let cap = v["volumes"][0]["capacity_bytes"].as_u64().unwrap();
        assert_eq!(disks[1]["size_bytes"].as_u64().unwrap(), cap - (1 << 30));
        assert!(v["devices"][0]["settings"].get("capacity_bytes").is_some());
    }

    #[test]
    fn a_bad_stack_gives_the_simulators_one_line_error() {
        let bad = STACK.replace("name = \"vda\"", "name = \"vda\"\ninterface = \"usb\"");
        let e = view(&bad, "s.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("s.toml: vm[0].disk[0].interface: 'usb' is not valid; accepted: "),
            "{e}"
        );
        let bad = STACK.replace("model = \"ssd\"", "model = \"ssd\"\nrpm = 5");
        let e = view(&bad, "s.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("s.toml: device 'd': unknown parameter 'rpm'"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
