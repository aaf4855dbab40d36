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
//! The block layer's tables are their specs' own serializations, so that no key is listed
//! here a second time: `[vm.disk.image]` (image::ImageSpec: the format, its parameters, None
//! for QEMU's computed defaults, the backing chain), `[vm.disk.queue]` (vdisk::QueueSpec, the
//! queues in effect; `queue_table` the table as the file set it, None without it) and
//! `[vm.disk.iotune]` (throttle::IotuneSpec: the limits set, with libvirt's names).
//!
//! `tables` is the same stack as a stack file writes it (`file_doc`): every table with the
//! keys the file set or that are in effect, each value as the file takes it (sizes in bytes,
//! durations as `"<n>ns"`, computed defaults left out), references by name. Rendered
//! (`vmio.stackfile.render`) and parsed again, it gives the same stack:
//!
//! ```text
//! parameter tables    each declared parameter (its ParamSpec) of the table's entry (the
//!                     layout's, the scheduler's, the filesystem's), from the value in effect
//!                     under its record key (name_unit) or, for [vm.disk.image], its name
//! other keys          as the spec holds them (the written profile, path, size, share, start,
//!                     capacity; read_ahead_kb and queue_depth when set; qemu_version)
//! left out            a raw disk's image keys but preallocation and discard; queue_size of a
//!                     disk without virtqueues; vcpus on a native host
//! ```

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde::Serialize;
use serde_json::{json, Map, Value};
use vmio_core::image::spec::{Format, ImageSpec, FORMAT_INDEPENDENT, PARAMS as IMAGE_PARAMS};
use vmio_core::params::{Kind, ParamSpec, Value as ParamValue, Values};
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

/// The values of a parameter table that are set or defaulted, under their record keys: a
/// computed default ("half of [host] memory") is left out, since the reader computes it
/// again.
fn values_set(v: &Values) -> Value {
    let set: Map<String, Value> = v
        .iter()
        .filter(|(_, value)| !matches!(value, ParamValue::Computed(_)))
        .map(|(spec, value)| (spec.record_key(), json!(value)))
        .collect();
    Value::Object(set)
}

/// The cores of a cpuset, ascending.
fn cores(set: vmio_core::cpu::CoreSet) -> Vec<usize> {
    (0..64).filter(|&c| set.contains(c)).collect()
}

/// A spec's serialization (the specs' `Serialize` cannot fail on these plain values).
fn ser<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// One value of `spec` as a stack file writes it: durations as `"<n>ns"`; None when absent or
/// a computed default (a text where the kind wants a number: "half of [host] memory").
fn file_value(spec: &ParamSpec, v: &Value) -> Option<Value> {
    match (spec.kind, v) {
        (_, Value::Null) => None,
        (Kind::Choice(_) | Kind::Bool, _) => Some(v.clone()),
        (_, Value::String(_)) => None,
        (Kind::Duration { .. }, _) => Some(json!(format!("{}ns", v.as_u64()?))),
        _ => Some(v.clone()),
    }
}

/// The parameters `specs` of a table as a stack file writes them, read from `record` (the
/// values in effect) under `key(spec)`: the record key, or the name.
fn file_keys(
    record: &Value,
    specs: &[ParamSpec],
    key: fn(&ParamSpec) -> String,
) -> Map<String, Value> {
    specs
        .iter()
        .filter_map(|s| Some((s.name.to_string(), file_value(s, record.get(key(s))?)?)))
        .collect()
}

fn record_key(s: &ParamSpec) -> String {
    s.record_key()
}

fn name_key(s: &ParamSpec) -> String {
    s.name.to_string()
}

/// `[vm.disk.image]` as a stack file writes it (raw: only the keys raw takes).
fn image_keys(image: &ImageSpec) -> Map<String, Value> {
    let mut m = file_keys(&ser(image), IMAGE_PARAMS, name_key);
    if image.format == Format::Raw {
        m.retain(|k, _| FORMAT_INDEPENDENT.contains(&k.as_str()));
        return m;
    }
    if !image.backing.is_empty() {
        let chain: Vec<Value> = image
            .backing
            .iter()
            .map(|b| match b.format {
                Format::Raw => json!({"format": "raw"}),
                Format::Qcow2 => json!({
                    "format": "qcow2",
                    "populated": b.populated,
                    "cluster_size": b.cluster_size,
                }),
            })
            .collect();
        m.insert("backing".into(), json!(chain));
    }
    m
}

/// A page cache (the host's or a guest's) as a stack file writes it.
fn page_cache_keys(p: &vmio_core::stack::PageCacheSpec) -> Map<String, Value> {
    let mut m = file_keys(&ser(p), vmio_core::cache::linux::PARAMS, record_key);
    m.insert("eviction".into(), json!(p.eviction));
    m
}

/// `[host.cache]` as a stack file writes it: the profile's name when it has one, and every
/// value and bank explicitly (explicit keys replace the profile's, so it reads back the same).
fn host_cache(c: &vmio_core::cpu::cache::CacheTopology) -> Value {
    let mut m = Map::new();
    if let Some(p) = c.profile {
        m.insert("profile".into(), json!(p));
    }
    m.insert("memory_bandwidth".into(), json!(c.memory_bandwidth));
    m.insert(
        "memory_latency".into(),
        json!(format!("{}ns", c.memory_latency_ns)),
    );
    m.insert("clock_mhz".into(), json!(c.clock_mhz));
    // The core's window, where it is not the profile's (a profile's reads back the same).
    let named = c
        .profile
        .and_then(|n| vmio_core::cpu::cache::PROFILES.iter().find(|p| p.name == n));
    let window = named.map_or((0, 0, 0), |p| {
        (p.rob_entries, p.miss_buffers, p.store_buffer)
    });
    if (c.rob_entries, c.miss_buffers, c.store_buffer) != window {
        m.insert("rob_entries".into(), json!(c.rob_entries));
        m.insert("miss_buffers".into(), json!(c.miss_buffers));
        m.insert("store_buffer".into(), json!(c.store_buffer));
    }
    // The inclusion, where it is not the profile's (inclusive without one).
    if c.inclusion != named.map_or(Default::default(), |p| p.inclusion) {
        m.insert("inclusion".into(), json!(c.inclusion.name()));
    }
    let banks: Vec<Value> = c
        .banks
        .iter()
        .map(|b| json!({"level": b.level, "size": b.size_bytes, "cpus": cpuset(b.cpus)}))
        .collect();
    m.insert("bank".into(), json!(banks));
    Value::Object(m)
}

/// A cpuset in libvirt's syntax.
fn cpuset(set: vmio_core::cpu::CoreSet) -> String {
    set.cores()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Insert `v` under `k` when it is Some.
fn put<T: Serialize>(m: &mut Map<String, Value>, k: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(k.into(), ser(&v));
    }
}

/// The stack as a stack file writes it (module doc): what renders back into the same stack.
fn file_doc(stack: &Stack) -> Value {
    let name = |i: usize| stack.devices[i].name.clone();
    let native = stack.host.hypervisor == "native";
    let devices: Vec<Value> = stack
        .devices
        .iter()
        .map(|d| {
            let mut m = Map::new();
            m.insert("name".into(), json!(d.name));
            match &d.share {
                Some(s) => {
                    m.insert("share".into(), json!(name(s.device)));
                    put(&mut m, "start", s.start_bytes);
                    put(&mut m, "capacity", s.capacity_bytes);
                }
                None => {
                    m.insert("model".into(), json!(d.model));
                    put(&mut m, "profile", d.profile.as_ref());
                    m.extend(d.params.iter().map(|(k, v)| (k.clone(), ser(v))));
                }
            }
            put(&mut m, "path", d.path.as_ref());
            put(&mut m, "size", d.size_bytes);
            Value::Object(m)
        })
        .collect();
    let volumes: Vec<Value> = stack
        .volumes
        .iter()
        .map(|v| {
            let mut m = Map::new();
            m.insert("name".into(), json!(v.name));
            m.insert("layout".into(), json!(v.layout.name));
            let devs: Vec<String> = v.devices.iter().map(|&i| name(i)).collect();
            m.insert("devices".into(), json!(devs));
            put(&mut m, "read_ahead_kb", v.read_ahead_kb);
            m.extend(file_keys(
                &values_set(&v.params),
                v.layout.params,
                record_key,
            ));
            if let Some(fs) = &v.filesystem {
                m.insert(vmio_core::hostfs::KEY.into(), json!(fs.entry.name));
                m.extend(file_keys(
                    &values_set(&fs.params),
                    fs.entry.params,
                    record_key,
                ));
            }
            Value::Object(m)
        })
        .collect();
    let mut scheduler = Map::new();
    scheduler.insert("name".into(), json!(stack.scheduler.name()));
    scheduler.extend(file_keys(
        &values_set(&stack.scheduler.params),
        stack.scheduler.entry.params,
        record_key,
    ));
    let mut doc = Map::new();
    put(&mut doc, "seed", stack.seed);
    let mut host = Map::new();
    host.insert("cores".into(), json!(stack.host.cores));
    host.insert("memory".into(), json!(stack.host.memory_bytes));
    host.insert("hypervisor".into(), json!(stack.host.hypervisor));
    if !stack.host.ept {
        host.insert("ept".into(), json!(false));
    }
    if let Some(c) = &stack.host.cache {
        host.insert("cache".into(), host_cache(c));
    }
    doc.insert("host".into(), Value::Object(host));
    doc.insert("device".into(), json!(devices));
    doc.insert("volume".into(), json!(volumes));
    doc.insert("scheduler".into(), Value::Object(scheduler));
    doc.insert(
        "page_cache".into(),
        json!(page_cache_keys(&stack.page_cache)),
    );
    if let Some(p) = &stack.pdc {
        let keys = file_keys(&ser(p), vmio_core::cache::pdc::PARAMS, record_key);
        doc.insert("pdc".into(), json!(keys));
    }
    if let Some(n) = &stack.nbd {
        doc.insert(
            "nbd".into(),
            json!(file_keys(&ser(n), vmio_core::nbd::PARAMS, record_key)),
        );
    }
    if let Some(c) = &stack.cpu {
        let mut m = Map::new();
        m.insert("model".into(), json!(c.model));
        let all: Vec<ParamSpec> = vmio_core::cpu::cfs::PARAMS
            .iter()
            .chain(vmio_core::cpu::hypervisor::PARAMS)
            .copied()
            .collect();
        m.extend(file_keys(&values_set(&c.params), &all, record_key));
        if stack.host.hypervisor == "xen" {
            m.insert("dom0_vcpus".into(), json!(c.dom0_vcpus));
            put(&mut m, "dom0_pin", c.dom0_pin.map(cpuset));
        }
        doc.insert("cpu".into(), Value::Object(m));
    }
    let vms: Vec<Value> = stack
        .vms
        .iter()
        .map(|vm| {
            let mut m = Map::new();
            m.insert("name".into(), json!(vm.name));
            if !native {
                m.insert("vcpus".into(), json!(vm.vcpus));
            }
            m.insert("memory".into(), json!(vm.memory_bytes));
            m.insert("weight".into(), json!(vm.weight));
            put(&mut m, "workload", vm.workload.as_ref());
            m.insert("qemu_version".into(), json!(vm.qemu_version));
            let t = &vm.cputune;
            if !t.is_empty() {
                // An unpinned vCPU or iothread among pinned ones: every host core.
                let all = vmio_core::cpu::CoreSet::all(stack.host.cores as usize);
                let sets = |v: &[Option<vmio_core::cpu::CoreSet>]| -> Vec<String> {
                    v.iter().map(|c| cpuset(c.unwrap_or(all))).collect()
                };
                let mut c = Map::new();
                if !t.vcpupin.is_empty() {
                    c.insert("vcpupin".into(), json!(sets(&t.vcpupin)));
                }
                put(&mut c, "emulatorpin", t.emulatorpin.map(cpuset));
                if !t.iothreadpin.is_empty() {
                    c.insert("iothreadpin".into(), json!(sets(&t.iothreadpin)));
                }
                m.insert("cputune".into(), Value::Object(c));
            }
            m.insert("page_cache".into(), json!(page_cache_keys(&vm.page_cache)));
            let disks: Vec<Value> = vm.disks.iter().map(|d| disk_keys(stack, d)).collect();
            m.insert("disk".into(), json!(disks));
            Value::Object(m)
        })
        .collect();
    doc.insert("vm".into(), json!(vms));
    Value::Object(doc)
}

/// A `[[vm.disk]]` as a stack file writes it.
fn disk_keys(stack: &Stack, d: &vmio_core::stack::DiskSpec) -> Value {
    use vmio_core::guest::params as gp;
    use vmio_core::table::Table as _;
    let mut m = Map::new();
    m.insert("name".into(), json!(d.name));
    m.insert("volume".into(), json!(stack.volumes[d.volume].name));
    m.insert("offset".into(), json!(d.offset_bytes));
    m.insert("size".into(), json!(d.size_bytes));
    m.insert("interface".into(), json!(d.interface.name()));
    m.insert("cache".into(), json!(d.cache.name()));
    put(&mut m, "queue_depth", d.queue_depth);
    m.insert("iothread".into(), json!(d.iothread));
    m.insert("aio".into(), json!(d.aio.name()));
    m.insert("read_ahead_kb".into(), json!(d.read_ahead_bytes / 1024));
    m.insert("format".into(), json!(d.format.name()));
    if let Some(f) = &d.filesystem {
        let mut t = Map::new();
        t.insert(gp::FS_TYPE.name.into(), json!(f.fs_type));
        t.insert(gp::FS_MOUNT_KEY.into(), json!(f.mount));
        put(&mut t, gp::FS_SIZE.name, f.size_bytes);
        t.insert(gp::FS_DATA.name.into(), json!(f.data));
        t.insert(
            gp::FS_COMMIT.name.into(),
            json!(format!("{}ns", f.commit_ns)),
        );
        t.insert(gp::FS_BARRIER.name.into(), json!(f.barrier));
        put(&mut t, gp::FS_JOURNAL_SIZE.name, f.journal_bytes);
        m.insert(gp::FsSpec::KEY.into(), Value::Object(t));
    }
    let image = image_keys(&d.image);
    if !image.is_empty() {
        m.insert("image".into(), Value::Object(image));
    }
    if let Some(q) = &d.queue_table {
        let mut t = ser(q);
        if let Some(o) = t.as_object_mut() {
            if q.queue_size == 0 {
                // No virtqueues (ide, nbd, host): the key has no meaning there.
                o.remove("queue_size");
            }
            o.remove("wakeup_ns");
            o.insert("wakeup".into(), json!(format!("{}ns", q.wakeup_ns)));
            o.remove("wake_spread_ns");
            o.insert(
                "wake_spread".into(),
                json!(format!("{}ns", q.wake_spread_ns)),
            );
        }
        m.insert("queue".into(), t);
    }
    put(&mut m, "iotune", d.iotune.as_ref());
    if let Some(g) = &d.guest_queue {
        let mut t = Map::new();
        put(&mut t, "scheduler", g.scheduler);
        put(&mut t, "nr_requests", g.nr_requests);
        t.insert("max_sectors_kb".into(), json!(g.max_sectors_kb));
        t.insert("nomerges".into(), json!(g.nomerges));
        for (k, v) in &g.sched_params {
            t.insert(k.clone(), serde_json::to_value(v).unwrap_or_default());
        }
        m.insert("guest_queue".into(), Value::Object(t));
    }
    Value::Object(m)
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
                "filesystem": v.filesystem.as_ref().map(|fs| json!({
                    "type": fs.entry.name,
                    "params": values(&fs.params),
                })),
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
                        "aio": d.aio.name(),
                        "format": d.format.name(),
                        "image": ser(&d.image),
                        "queue": ser(&d.queue),
                        "queue_table": ser(&d.queue_table),
                        "iotune": ser(&d.iotune),
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
                "qemu_version": vm.qemu_version,
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
        "tables": file_doc(&stack),
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

    const BLOCK_LAYER: &str = r#"
[[device]]
name = "d"
model = "ssd"

[[volume]]
name = "v"
layout = "single"
devices = ["d"]
filesystem = "ext4"
alloc_cost = "7us"

[[vm]]
name = "a"
vcpus = 2
qemu_version = "5.2"

[[vm.disk]]
name = "vda"
volume = "v"
size = "1g"
cache = "none"
aio = "native"
format = "qcow2"
[vm.disk.image]
cluster_size = "2m"
l2_cache_size = "1m"
lazy_refcounts = true
populated = 0.5
backing = [{ format = "qcow2", populated = 0.25, cluster_size = "64k" }, { format = "raw" }]
[vm.disk.queue]
num_queues = 2
iothreads = 1
[vm.disk.iotune]
total_bytes_sec = 1000000
group_name = "g"
"#;

    #[test]
    fn the_view_carries_the_block_layer_and_its_tables_parse_back_into_the_same_view() {
        let v = view(BLOCK_LAYER, "dir/stack.toml").unwrap();
        let disk = &v["vms"][0]["disks"][0];
        assert_eq!(v["vms"][0]["qemu_version"], "5.2");
        assert_eq!(
            (&disk["format"], &disk["aio"]),
            (&json!("qcow2"), &json!("native"))
        );
        assert_eq!(disk["image"]["cluster_size"], 2 << 20);
        assert_eq!(disk["image"]["l2_cache_entry_size"], Value::Null);
        assert_eq!(disk["image"]["backing"][1]["format"], "raw");
        assert_eq!(disk["queue"]["num_queues"], 2);
        assert_eq!(disk["queue"]["queue_size"], 256);
        assert_eq!(
            disk["iotune"],
            json!({"total_bytes_sec": 1000000, "group_name": "g"})
        );
        assert_eq!(v["volumes"][0]["filesystem"]["type"], "ext4");
        assert_eq!(
            v["volumes"][0]["filesystem"]["params"]["alloc_cost_ns"],
            7000
        );
        // The tables as a stack file: the same stack.
        let text = toml::to_string(&v["tables"]).unwrap();
        assert_eq!(view(&text, "dir/stack.toml").unwrap(), v, "{text}");
        let plain = view(STACK, "dir/stack.toml").unwrap();
        let text = toml::to_string(&plain["tables"]).unwrap();
        assert_eq!(view(&text, "dir/stack.toml").unwrap(), plain, "{text}");
    }

    /// The view's `[host.cache]` of STACK with a 4-core host whose `[host.cache]` is
    /// `cache`, after checking that the whole view reads back the same.
    fn host_cache_read_back(cache: &str) -> Value {
        let text = STACK.replace(
            "[[device]]",
            &format!("[host]\ncores = 4\n\n[host.cache]\n{cache}\n\n[[device]]"),
        );
        let v = view(&text, "dir/stack.toml").unwrap();
        let back = toml::to_string(&v["tables"]).unwrap();
        assert_eq!(view(&back, "dir/stack.toml").unwrap(), v, "{back}");
        v["tables"]["host"]["cache"].clone()
    }

    #[test]
    fn a_host_caches_reorder_buffer_is_written_where_it_is_not_the_profiles_and_reads_back() {
        for (cache, window) in [
            ("profile = \"core2-quad-q9550\"", None),
            (
                "profile = \"core2-quad-q9550\"\nrob_entries = 448\nmiss_buffers = 22",
                Some((448, 22)),
            ),
            (
                "profile = \"core2-quad-q9550\"\nstore_buffer = 104",
                Some((96, 8)),
            ),
            (
                "memory_bandwidth = 1000000000\nmemory_latency = \"90ns\"\nclock_mhz = 2000\n\
                 rob_entries = 224\n[[host.cache.bank]]\nlevel = 3\nsize = \"4MiB\"\ncpus = \"0\"",
                Some((224, 0)),
            ),
        ] {
            let c = host_cache_read_back(cache);
            match window {
                None => assert!(c.get("rob_entries").is_none(), "{c}"),
                Some((rob, mb)) => {
                    assert_eq!(
                        (&c["rob_entries"], &c["miss_buffers"]),
                        (&json!(rob), &json!(mb))
                    )
                }
            }
        }
    }

    #[test]
    fn a_victim_last_level_is_written_and_reads_back_and_an_inclusive_one_is_left_out() {
        for (cache, written) in [
            ("profile = \"core-i5-6600\"", None),
            (
                "profile = \"core-i5-6600\"\ninclusion = \"inclusive\"",
                None,
            ),
            (
                "profile = \"core-i5-6600\"\ninclusion = \"victim\"",
                Some("victim"),
            ),
        ] {
            let c = host_cache_read_back(cache);
            assert_eq!(
                c.get("inclusion"),
                written.map(|w| json!(w)).as_ref(),
                "{c}"
            );
        }
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
