//! fio's JSON output format (`--output-format=json`, fio 3.x) for a simulated run, so that
//! fio-plot and existing scripts read it, plus a top-level `vmio` object with the seed, the
//! effective stack, ignored options, device counters and engine figures.
//!
//! Fields follow fio's `show_thread_status_json`: per job `jobname`, `groupid`, `error`,
//! `job options`, `read`/`write`/`trim` (io_bytes, io_kbytes, bw_bytes, bw, iops, runtime,
//! total_ios, slat_ns/clat_ns/lat_ns with percentiles on clat), `sync`, `job_runtime`.
//! `timestamp` is 0: results must be byte-identical for identical inputs.

use crate::sim::{JobReport, PdcDiskReport, SimReport};
use serde_json::{json, Map, Value};
use vmio_core::fio::JobFile;
use vmio_core::stack::Stack;
use vmio_core::workload::iozone::{self, Timing};

/// A finished run as this module renders it: what [`crate::run::run`] and
/// [`crate::run::run_many`] return.
pub struct RunOutput {
    pub report: SimReport,
    pub stack: Stack,
    /// The job files run, one per VM that runs one, in run order.
    pub job_files: Vec<JobFile>,
}

/// A PDC disk's entry of `vmio.pdc`: the detector's report with its VM and disk, ratios
/// rounded like the others.
fn pdc_json(p: &PdcDiskReport) -> Value {
    let d = &p.detector;
    json!({
        "vm": p.vm,
        "disk": p.disk,
        "events": d.events,
        "ranges": d.ranges,
        "writes": d.stats.writes,
        "bypassed_writes": d.stats.bypassed_writes,
        "bypassed_bytes": d.stats.bypassed_bytes,
        "detections": d.stats.detections,
        "drops": d.stats.drops,
        "journal": d.journal,
        "precision": d.precision.map(crate::metrics::round6),
        "recall": d.recall.map(crate::metrics::round6),
    })
}

fn job_options(j: &JobReport) -> Value {
    let s = &j.spec;
    let mut m = Map::new();
    m.insert("name".into(), json!(s.name));
    m.insert("rw".into(), json!(s.rw.fio_name()));
    if s.rw.reads() {
        if let [(b, _)] = s.bs.read.as_slice() {
            m.insert("bs".into(), json!(b.to_string()));
        }
    } else if let [(b, _)] = s.bs.write.as_slice() {
        m.insert("bs".into(), json!(b.to_string()));
    }
    if matches!(s.rw.fio_name(), "rw" | "randrw") {
        m.insert("rwmixread".into(), json!(s.rwmixread.to_string()));
    }
    m.insert("iodepth".into(), json!(s.iodepth.to_string()));
    m.insert("numjobs".into(), json!(s.numjobs.to_string()));
    m.insert("ioengine".into(), json!(s.ioengine));
    m.insert("direct".into(), json!(if s.direct { "1" } else { "0" }));
    if let Some(v) = s.size_bytes {
        m.insert("size".into(), json!(v.to_string()));
    }
    if s.offset_bytes > 0 {
        m.insert("offset".into(), json!(s.offset_bytes.to_string()));
    }
    if let Some(r) = s.runtime_ns {
        m.insert("runtime".into(), json!(format!("{}ms", r / 1_000_000)));
    }
    if s.time_based {
        m.insert("time_based".into(), json!(""));
    }
    if s.ramp_time_ns > 0 {
        m.insert(
            "ramp_time".into(),
            json!(format!("{}ms", s.ramp_time_ns / 1_000_000)),
        );
    }
    if s.fsync > 0 {
        m.insert("fsync".into(), json!(s.fsync.to_string()));
    }
    if let Some(f) = &s.filename {
        m.insert("filename".into(), json!(f));
    }
    Value::Object(m)
}

/// An `iozone=` job's passes (`vmio_iozone`): each pass's record size, bytes, timed
/// nanoseconds and KB/s, and iozone's `-a` table as iozone prints it.
fn iozone_json(timings: &[Timing]) -> Value {
    let passes: Vec<Value> = timings
        .iter()
        .map(|t| {
            json!({
                "kbytes": t.file_bytes >> 10,
                "reclen_kbytes": t.record_bytes >> 10,
                "test": t.phase.name(),
                "io_bytes": t.bytes,
                "time_ns": t.ns,
                "kb_per_s": t.kb_per_s(),
            })
        })
        .collect();
    json!({ "passes": passes, "table": iozone::table(timings) })
}

fn job_json(j: &JobReport) -> Value {
    let rt = j.runtime_ns;
    let sync = &j.stats[3];
    let mut v = json!({
        "jobname": j.name,
        "groupid": j.spec.group_id,
        "error": 0,
        "eta": 0,
        "elapsed": rt / 1_000_000_000,
        "job options": job_options(j),
        "read": j.stats[0].to_json(rt),
        "write": j.stats[1].to_json(rt),
        "trim": j.stats[2].to_json(rt),
        "sync": {
            "total_ios": sync.total_ios,
            "lat_ns": sync.lat.to_json(true),
        },
        "job_runtime": rt / 1_000_000,
        "usr_cpu": 0.0,
        "sys_cpu": 0.0,
        "ctx": 0,
        "majf": 0,
        "minf": 0,
        "vmio_clone": j.clone,
        "vmio_vm": j.vm,
    });
    if !j.iozone.is_empty() {
        v["vmio_iozone"] = iozone_json(&j.iozone);
    }
    v
}

/// The whole fio JSON document for a run.
pub fn fio_json(out: &RunOutput) -> Value {
    let r = &out.report;
    let jobs: Vec<Value> = r.jobs.iter().map(job_json).collect();
    let total_ns = r.virtual_time_ns.max(1);
    let disk_util: Vec<Value> = r
        .devices
        .iter()
        .map(|d| {
            let s = &d.stats;
            json!({
                "name": d.name,
                "read_ios": s.read_ops,
                "write_ios": s.write_ops,
                "read_merges": 0,
                "write_merges": 0,
                "read_ticks": 0,
                "write_ticks": 0,
                "in_queue": 0,
                "util": crate::metrics::round6(100.0 * s.busy_ns as f64 / total_ns as f64),
            })
        })
        .collect();
    let devices: Vec<Value> = r
        .devices
        .iter()
        .map(|d| {
            let params: Map<String, Value> = d
                .params
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            json!({"name": d.name, "model": d.model, "stats": d.stats, "params": params})
        })
        .collect();
    let pc = r.page_cache;
    // Per-VM shares: bandwidth over each VM's measured jobs, S1's error rate, Jain's index.
    let mut vm_bw = Vec::new();
    for (name, weight, timeline) in &r.vm_timeline {
        let jobs: Vec<&JobReport> = r.jobs.iter().filter(|j| &j.vm == name).collect();
        if jobs.is_empty() {
            continue;
        }
        // A VM with a guest kernel (buffered or file-level jobs): the bytes its virtual disks
        // moved, as the host sees them (S1 sampled each VM's bandwidth at the host, with
        // iostat; the guest's cache hits never reach it). Otherwise its jobs' bytes.
        let guest = r.guests.iter().find(|(n, _)| n == name);
        let bytes: u64 = match guest {
            Some((_, g)) => g.disks.iter().map(|d| d.read_bytes + d.write_bytes).sum(),
            None => jobs
                .iter()
                .map(|j| j.stats.iter().map(|s| s.io_bytes).sum::<u64>())
                .sum(),
        };
        let runtime = jobs.iter().map(|j| j.runtime_ns).max().unwrap_or(0);
        let bw = if runtime == 0 {
            0.0
        } else {
            bytes as f64 * 1e9 / runtime as f64
        };
        vm_bw.push((name.clone(), *weight, bw, timeline.clone()));
    }
    let weights: Vec<u32> = vm_bw.iter().map(|v| v.1).collect();
    let bws: Vec<f64> = vm_bw.iter().map(|v| v.2).collect();
    let vms_json: Vec<Value> = vm_bw
        .iter()
        .map(|(n, w, bw, t)| json!({"name": n, "weight": w, "bw_bytes": bw.round() as u64, "bytes_per_s": t}))
        .collect();
    let mut v = json!({
        "fio version": format!("vmio-{}", env!("CARGO_PKG_VERSION")),
        "timestamp": 0,
        "timestamp_ms": 0,
        "time": "virtual",
        "global options": {},
        "jobs": jobs,
        "disk_util": disk_util,
        "vmio": {
            "seed": r.seed,
            "stack_file": out.stack.file,
            "job_file": out.job_files.first().map(|f| f.path.as_str()),
            "job_files": out.job_files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            "stack": out.stack,
            "ignored_options": out
                .job_files
                .iter()
                .flat_map(|f| f.ignored.iter().map(move |i| json!({"name": i.name, "line": i.line, "file": f.path})))
                .collect::<Vec<_>>(),
            "notes": r.notes,
            "devices": devices,
            "volumes": r.volumes.iter().map(|(n, cap, ra)| json!({"name": n, "capacity_bytes": cap, "read_ahead_bytes": ra})).collect::<Vec<_>>(),
            "page_cache": {
                "hit_pages": pc.hit_pages,
                "miss_pages": pc.miss_pages,
                "evicted_pages": pc.evicted_pages,
                "written_back_pages": pc.written_back_pages,
                "cached_pages_at_end": r.cached_pages,
                "dirty_pages_at_end": r.dirty_pages,
                "hit_ratio": crate::metrics::round6(if pc.hit_pages + pc.miss_pages == 0 { 0.0 } else { pc.hit_pages as f64 / (pc.hit_pages + pc.miss_pages) as f64 }),
                "flushes": r.flushes,
                "fsync_written_pages": r.fsync_written_pages,
            },
            "pdc": r.pdc.iter().map(pdc_json).collect::<Vec<_>>(),
            "guests": r.guests.iter().map(|(n, g)| json!({"vm": n, "page_cache": g.cache, "disks": g.disks})).collect::<Vec<_>>(),
            "vms": vms_json,
            "share": {
                "error_rate_pct": crate::metrics::s1_error_rate_pct(&weights, &bws).map(crate::metrics::round6),
                "jain_index": if bws.len() > 1 { crate::metrics::jain_index(&weights, &bws).map(crate::metrics::round6) } else { None },
            },
            "virtual_time_ns": r.virtual_time_ns,
            "events": r.events,
        }
    });
    if let Some(c) = &r.cpu {
        v["vmio"]["cpu"] = cpu_json(c, &out.stack.host.hypervisor);
    }
    v
}

/// `vmio.cpu` (a stack with `[cpu]`): the host's threads and cores.
fn cpu_json(c: &crate::sim::CpuReport, hypervisor: &str) -> Value {
    let threads: Vec<Value> = c
        .threads
        .iter()
        .zip(&c.stats.threads)
        .map(|(l, s)| {
            json!({
                "name": l.name,
                "kind": l.kind,
                "vm": l.vm,
                "cpu_ns": s.cpu_ns,
                "wait_ns": s.wait_ns,
                "migrations": s.migrations,
                "completed": s.completed,
            })
        })
        .collect();
    json!({
        "model": c.model,
        "cores": c.cores,
        "hypervisor": hypervisor,
        "threads": threads,
        "core_busy_ns": c.stats.core_busy_ns,
    })
}
