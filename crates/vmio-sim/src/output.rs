//! fio's JSON output format (`--output-format=json`, fio 3.x) for a simulated run, so that
//! fio-plot and existing scripts read it, plus a top-level `vmio` object with the seed, the
//! effective stack, ignored options, device counters and engine figures.
//!
//! Fields follow fio 3.33's `stat.c` `show_thread_status_json` and `add_ddir_status_json`
//! (checked key by key and type by type against the installed fio by
//! tests/test_fio_output.py): per entry `jobname`, `groupid`, `error`, `eta`, `elapsed`,
//! `job options` (as written), `read`/`write`/`trim` (bytes, bandwidth, IOPS, slat/clat/lat
//! with clat percentiles and json+'s `bins`, bw/iops samples: metrics.rs, sim/samples.rs),
//! `sync`, `job_runtime`, CPU figures (0: no process accounting), `iodepth_level`,
//! `iodepth_submit`, `iodepth_complete`, `latency_ns/us/ms`, `latency_depth/target/
//! percentile/window`; top level `fio version`, `timestamp` (0: results must be
//! byte-identical for identical inputs), `time`, `global options`, `jobs`, `disk_util` (each
//! disk of a VM that ran a job, as its guest kernel counts it; then, on a native host, the
//! host's devices, with no tick counts).
//!
//! ```text
//! entries: a job starts one unless it has group_reporting and follows a job of its VM and
//!          groupid (stat.c __show_run_stats); an entry sums its jobs (sum_thread_stats):
//!          first job's name, last job's options, longest runtime, sum of job runtimes
//! bw_agg:  the entry's mean bandwidth sample over its group's aggregate (all the VM's jobs
//!          of the groupid: their bytes over the longest runtime), at most 100 %
//! vmio.logs: the write_*_log files of the jobs that ask (name, text)
//! ```

use crate::sim::samples::{LogConfig, LOG_KINDS};
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

/// fio's order of a section's options (`parse.c` `sort_options`/`opt_cmp`: higher `prio`
/// first, as options.c gives it: `kb_base`, `unit_base`, `lockfile`, `cpus_allowed_policy`
/// 1, `filename` and `filename_format` -1, the rest 0), then as written; options without a
/// value are not printed (`json_create_value_string` of NULL).
fn options_json(written: &[(String, Option<String>)]) -> Map<String, Value> {
    let prio = |name: &str| match name {
        "kb_base" | "unit_base" | "lockfile" | "cpus_allowed_policy" => 0,
        "filename" | "filename_format" => 2,
        _ => 1,
    };
    let mut sorted: Vec<&(String, Option<String>)> = written.iter().collect();
    sorted.sort_by_key(|(name, _)| prio(name));
    sorted
        .into_iter()
        .filter_map(|(name, value)| Some((name.clone(), json!(value.as_ref()?))))
        .collect()
}

/// fio's `group_reporting` as the job sees it (its section, else a [global] above it): a
/// bare key or any value but 0.
fn group_reporting(j: &JobReport) -> bool {
    let w = &j.spec.written;
    let set = |opts: &[(String, Option<String>)]| {
        opts.iter()
            .rev()
            .find(|(n, _)| n == "group_reporting")
            .map(|(_, v)| v.as_deref() != Some("0"))
    };
    set(&w.own).or_else(|| set(&w.global)).unwrap_or(false)
}

/// fio's `jobs` entries (`stat.c` `__show_run_stats`): a job starts a new entry unless it
/// has `group_reporting` and the previous job is of its group (same VM, same groupid);
/// then it is summed into that entry (`sum_thread_stats`).
fn report_entries(jobs: &[JobReport]) -> Vec<Vec<&JobReport>> {
    let mut entries: Vec<Vec<&JobReport>> = Vec::new();
    for j in jobs {
        match entries.last_mut() {
            Some(e)
                if group_reporting(j)
                    && e[0].vm == j.vm
                    && e[0].spec.group_id == j.spec.group_id =>
            {
                e.push(j)
            }
            _ => entries.push(vec![j]),
        }
    }
    entries
}

/// fio's `group_run_stats.agg` per direction of a job's group (its VM's jobs of the same
/// groupid): the group's bytes over its longest runtime, bytes/s.
fn group_agg(jobs: &[JobReport], of: &JobReport) -> [u64; 3] {
    let group: Vec<&JobReport> = jobs
        .iter()
        .filter(|j| j.vm == of.vm && j.spec.group_id == of.spec.group_id)
        .collect();
    let runtime = group.iter().map(|j| j.runtime_ns).max().unwrap_or(0);
    std::array::from_fn(|d| {
        let bytes: u128 = group.iter().map(|j| j.stats[d].io_bytes as u128).sum();
        (bytes * 1_000_000_000)
            .checked_div(runtime as u128)
            .map_or(0, |b| b as u64)
    })
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

/// One entry of `jobs`: a job, or the jobs of a group_reporting group summed (the first's
/// name and groupid, the last's options, the longest runtime, the sum of job runtimes).
fn job_json(entry: &[&JobReport], all: &[JobReport]) -> Value {
    let (first, last) = (entry[0], entry[entry.len() - 1]);
    let rt = entry.iter().map(|j| j.runtime_ns).max().unwrap_or(0);
    let mut stats = first.stats.clone();
    for j in &entry[1..] {
        for (s, o) in stats.iter_mut().zip(&j.stats) {
            s.merge(o);
        }
    }
    let agg = group_agg(all, first);
    let sync = &stats[3];
    let mut v = json!({
        "jobname": first.name,
        "groupid": first.spec.group_id,
        "error": 0,
        "eta": 0,
        "elapsed": first.runtime_ns / 1_000_000_000,
    });
    let options = options_json(&last.spec.written.own);
    if !options.is_empty() {
        v["job options"] = Value::Object(options);
    }
    for (d, name) in ["read", "write", "trim"].into_iter().enumerate() {
        v[name] = stats[d].to_json(rt, agg[d]);
    }
    v["sync"] = json!({
        "total_ios": sync.total_ios,
        "lat_ns": sync.lat.to_json(true),
    });
    v["job_runtime"] = json!(entry.iter().map(|j| j.runtime_ns / 1_000_000).sum::<u64>());
    // The model has no process accounting: CPU shares, context switches and faults are 0.
    v["usr_cpu"] = json!(0.0);
    v["sys_cpu"] = json!(0.0);
    v["ctx"] = json!(0);
    v["majf"] = json!(0);
    v["minf"] = json!(0);
    for (k, x) in crate::metrics::depth_and_latency_json(&stats[..3]) {
        v[k] = x;
    }
    // fio's latency_target (latency_target, latency_window, latency_percentile) is not
    // modelled: its defaults, with the job's iodepth as latency_depth.
    v["latency_depth"] = json!(last.spec.iodepth);
    v["latency_target"] = json!(0);
    v["latency_percentile"] = json!(100.0);
    v["latency_window"] = json!(0);
    v["vmio_clone"] = json!(first.clone);
    v["vmio_vm"] = json!(first.vm);
    if entry.len() > 1 {
        v["vmio_group_jobs"] = json!(entry.len());
    }
    if !first.iozone.is_empty() {
        v["vmio_iozone"] = iozone_json(&first.iozone);
    }
    v
}

/// The log files of the jobs that asked for them (`vmio.logs`: name and text, which the
/// front end writes; see sim/samples.rs): job N (1-based, every clone) writes
/// `<prefix>_<kind>.<N>.log`, its directions' lines merged in time order.
fn logs_json(jobs: &[JobReport]) -> Vec<Value> {
    let mut files = Vec::new();
    for (n, j) in jobs.iter().enumerate() {
        let Ok(c) = LogConfig::of(&j.spec) else {
            continue;
        };
        let asked = [&c.bw, &c.iops, &c.lat, &c.lat, &c.lat];
        for (k, kind) in LOG_KINDS.iter().enumerate() {
            let Some(prefix) = asked[k] else { continue };
            let mut lines: Vec<(u64, usize, u64, u64)> = j.stats[..3]
                .iter()
                .enumerate()
                .filter_map(|(d, s)| Some((d, s.log.as_ref()?)))
                .flat_map(|(d, log)| log.lines[k].iter().map(move |&(t, v, bs)| (t, d, v, bs)))
                .collect();
            lines.sort_by_key(|&(t, d, ..)| (t, d));
            let text: String = lines
                .iter()
                .map(|(t, d, v, bs)| format!("{t}, {v}, {d}, {bs}, 0\n"))
                .collect();
            files.push(json!({"name": format!("{prefix}_{kind}.{}.log", n + 1), "text": text}));
        }
    }
    files
}

/// The whole fio JSON document for a run.
pub fn fio_json(out: &RunOutput) -> Value {
    let r = &out.report;
    let jobs: Vec<Value> = report_entries(&r.jobs)
        .iter()
        .map(|e| job_json(e, &r.jobs))
        .collect();
    let global: Vec<(String, Option<String>)> = out
        .job_files
        .iter()
        .flat_map(|f| f.global_options.iter().cloned())
        .collect();
    let disk_util = disk_util(r, &out.stack);
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
        "global options": options_json(&global),
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
            "guests": r.guests.iter().map(|(n, g)| json!({"vm": n, "page_cache": g.cache, "disks": guest_disks_json(r, n, &g.disks)})).collect::<Vec<_>>(),
            "vms": vms_json,
            "share": {
                "error_rate_pct": crate::metrics::s1_error_rate_pct(&weights, &bws).map(crate::metrics::round6),
                "jain_index": if bws.len() > 1 { crate::metrics::jain_index(&weights, &bws).map(crate::metrics::round6) } else { None },
            },
            "virtual_time_ns": r.virtual_time_ns,
            "events": r.events,
        }
    });
    v["vmio"]["breakdown"] = breakdown_json(&r.jobs);
    let logs = logs_json(&r.jobs);
    if !logs.is_empty() {
        v["vmio"]["logs"] = Value::Array(logs);
    }
    if let Some(c) = &r.cpu {
        v["vmio"]["cpu"] = cpu_json(c, &out.stack.host.hypervisor);
    }
    if !r.images.is_empty() {
        v["vmio"]["images"] = r
            .images
            .iter()
            .map(|i| {
                let mut e = json!({"vm": i.vm, "disk": i.disk});
                if let (Value::Object(m), Ok(Value::Object(s))) =
                    (&mut e, serde_json::to_value(i.stats))
                {
                    m.extend(s);
                }
                e
            })
            .collect();
    }
    // Only when a disk has [vm.disk.iotune]: per throttled disk, its time throttled.
    if !r.throttle.is_empty() {
        v["vmio"]["throttle"] = r
            .throttle
            .iter()
            .map(|t| json!({"vm": t.vm, "disk": t.disk, "requests": t.stats.requests, "delayed": t.stats.delayed, "throttled_ns": t.stats.throttled_ns}))
            .collect();
    }
    if !r.host_fs.is_empty() {
        v["vmio"]["host_fs"] = Value::Array(
            r.host_fs
                .iter()
                .map(|d| json!({"vm": d.vm, "disk": d.disk, "stats": d.stats}))
                .collect(),
        );
    }
    v
}

/// `vmio.breakdown`: per `jobs` entry (clones summed as fio's group_reporting sums them),
/// each layer's share of its reads', writes' and trims' latency (sim/breakdown.rs): mean,
/// p50, p99, p99.9 (ns) and share of the mean.
fn breakdown_json(jobs: &[JobReport]) -> Value {
    report_entries(jobs)
        .iter()
        .map(|e| {
            let mut b = e[0].breakdown.clone();
            for j in &e[1..] {
                b.merge(&j.breakdown);
            }
            let layers: Vec<Value> = b
                .figures()
                .iter()
                .map(|f| {
                    json!({
                        "layer": f.layer,
                        "mean_ns": crate::metrics::round6(f.mean_ns),
                        "p50_ns": f.p50_ns,
                        "p99_ns": f.p99_ns,
                        "p99.9_ns": f.p999_ns,
                        "share": crate::metrics::round6(f.share),
                    })
                })
                .collect();
            json!({"job": e[0].name, "layers": layers})
        })
        .collect()
}

/// A guest's `disks`: the guest policy's figures of each disk, with its block layer's
/// (`sim/guest.rs` [`crate::sim::DiskAcct`]): `merges` {read, write} (diskstats'
/// rd_merges, wr_merges), `request_sizes` (the requests the guest's block layer dispatched
/// to the virtual disk) and `host_request_sizes` (the host requests the VMM made of them:
/// what its backend receives), each a list of [bytes, count] sorted by bytes.
fn guest_disks_json(
    r: &SimReport,
    vm: &str,
    disks: &[vmio_core::guest::os::GuestDiskStats],
) -> Vec<Value> {
    let sizes = |m: &std::collections::BTreeMap<u64, u64>| -> Vec<[u64; 2]> {
        m.iter().map(|(&b, &n)| [b, n]).collect()
    };
    disks
        .iter()
        .map(|d| {
            let mut v = json!(d);
            if let Some(g) = r
                .guest_disks
                .iter()
                .find(|g| g.vm == vm && g.disk == d.disk)
            {
                let s = &g.stats;
                v["merges"] = json!({"read": s.merges[0], "write": s.merges[1]});
                v["request_sizes"] = json!(sizes(&s.request_sizes));
                v["host_request_sizes"] = json!(sizes(&s.host_request_sizes));
            }
            v
        })
        .collect()
}

/// `vmio.cpu` (a stack with `[cpu]`): the host's threads and cores.
/// fio's `disk_util` as fio in each VM that ran a job would print it (its `show_disk_util`,
/// from the guest kernel's diskstats: `sim/guest.rs` [`crate::sim::DiskAcct`]), times in ms;
/// merges are the bios the guest's block layer merged (0 on a native host's devices). On a native host (no guest),
/// the host devices follow, as fio on the host sees them below its volume.
fn disk_util(r: &SimReport, stack: &Stack) -> Vec<Value> {
    let total_ns = r.virtual_time_ns.max(1);
    // One fio entry: ios, ticks and in_queue per [read, write]; busy time in ns.
    let entry = |name: &str,
                 ios: [u64; 2],
                 merges: [u64; 2],
                 ticks_ns: [u64; 2],
                 in_queue_ns: u64,
                 busy_ns: u64| {
        let ms = |ns: u64| ns / 1_000_000;
        json!({
            "name": name,
            "read_ios": ios[0],
            "write_ios": ios[1],
            "read_merges": merges[0],
            "write_merges": merges[1],
            "read_ticks": ms(ticks_ns[0]),
            "write_ticks": ms(ticks_ns[1]),
            "in_queue": ms(in_queue_ns),
            "util": crate::metrics::round6(100.0 * busy_ns as f64 / total_ns as f64),
        })
    };
    let ran: Vec<&str> = r.jobs.iter().map(|j| j.vm.as_str()).collect();
    let mut out: Vec<Value> = r
        .guest_disks
        .iter()
        .filter(|d| ran.contains(&d.vm.as_str()))
        .map(|d| {
            let s = &d.stats;
            let mut e = entry(
                &d.disk,
                [s.read_ios, s.write_ios],
                s.merges,
                [s.read_ticks_ns, s.write_ticks_ns],
                s.in_queue_ns,
                s.io_ticks_ns,
            );
            e["vm"] = json!(d.vm);
            e
        })
        .collect();
    if stack.host.hypervisor == "native" {
        out.extend(r.devices.iter().map(|d| {
            let s = &d.stats;
            entry(
                &d.name,
                [s.read_ops, s.write_ops],
                [0, 0],
                [0, 0],
                0,
                s.busy_ns,
            )
        }));
    }
    out
}

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

#[cfg(test)]
mod tests {
    use super::fio_json;
    use crate::bench::two_hdd_stack;
    use crate::run::{run, RunInput};
    use serde_json::{json, Value};

    fn doc(job: &str) -> Value {
        let s = two_hdd_stack("raid0", "none");
        fio_json(&run(&RunInput::texts(&s, job, 3)).unwrap_or_else(|e| panic!("{e}")))
    }

    const JOB: &str = "[global]\nioengine=libaio\ndirect=1\nfilename=sdb\nsize=1g\n\
                       time_based\nruntime=2s\n[r]\nrw=randread\nblocksize=4k\niodepth=4\n";

    #[test]
    fn options_are_printed_as_written_in_fio_s_order_without_bare_flags() {
        let d = doc(JOB);
        assert_eq!(
            d["global options"],
            json!({"ioengine": "libaio", "direct": "1", "size": "1g", "runtime": "2s", "filename": "sdb"})
        );
        assert_eq!(
            d["jobs"][0]["job options"],
            json!({"rw": "randread", "bs": "4k", "iodepth": "4"})
        );
    }

    #[test]
    fn a_two_second_job_has_four_half_second_samples_whose_mean_is_its_bandwidth() {
        let d = doc(JOB);
        let r = &d["jobs"][0]["read"];
        assert_eq!(r["bw_samples"], 4);
        assert_eq!(r["iops_samples"], 4);
        let mean = r["bw_mean"].as_f64().unwrap();
        let bw = r["bw"].as_f64().unwrap();
        // Four full intervals cover the whole 2 s: the mean of the samples is the job's
        // bandwidth, to the KiB/s rounding of each sample.
        assert!((mean - bw).abs() <= 1.0, "{mean} vs {bw}");
        let (min, max) = (r["bw_min"].as_u64().unwrap(), r["bw_max"].as_u64().unwrap());
        assert!(min as f64 <= mean && mean <= max as f64);
        assert!(r["bw_dev"].as_f64().unwrap() > 0.0, "a disk's samples vary");
        let levels = &d["jobs"][0]["iodepth_level"];
        assert_eq!(levels["4"], json!(100.0), "{levels}");
        let lat: f64 = ["latency_ns", "latency_us", "latency_ms"]
            .iter()
            .flat_map(|k| d["jobs"][0][k].as_object().unwrap().values())
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!((lat - 100.0).abs() < 1e-3, "{lat}");
    }

    #[test]
    fn group_reporting_sums_numjobs_clones_into_one_entry_as_fio_does() {
        let alone = doc(JOB);
        let grouped = doc(&format!("{JOB}numjobs=3\ngroup_reporting\n"));
        let split = doc(&format!("{JOB}numjobs=3\n"));
        assert_eq!(alone["jobs"].as_array().unwrap().len(), 1);
        assert_eq!(split["jobs"].as_array().unwrap().len(), 3);
        let g = &grouped["jobs"].as_array().unwrap()[..];
        assert_eq!(g.len(), 1);
        let sum = |key: &str| -> u64 {
            split["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["read"][key].as_u64().unwrap())
                .sum()
        };
        assert_eq!(g[0]["read"]["io_bytes"].as_u64(), Some(sum("io_bytes")));
        assert_eq!(g[0]["read"]["total_ios"].as_u64(), Some(sum("total_ios")));
        assert_eq!(
            g[0]["read"]["clat_ns"]["N"].as_u64(),
            Some(sum("total_ios"))
        );
        // pure_sum: sample counts and min/max add up across the members.
        assert_eq!(g[0]["read"]["bw_samples"].as_u64(), Some(sum("bw_samples")));
        assert_eq!(g[0]["read"]["bw_min"].as_u64(), Some(sum("bw_min")));
        assert_eq!(g[0]["job_runtime"], 3 * 2000);
        assert_eq!(g[0]["jobname"], "r");
    }

    fn logs(d: &Value) -> Vec<(String, Vec<String>)> {
        d["vmio"]["logs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let lines = l["text"].as_str().unwrap().lines().map(String::from);
                (l["name"].as_str().unwrap().to_string(), lines.collect())
            })
            .collect()
    }

    #[test]
    fn per_io_logs_have_a_line_per_io_and_make_the_samples_per_io_as_fio_s_do() {
        let d = doc(&format!("{JOB}write_lat_log=p\nwrite_iops_log\n"));
        let ios = d["jobs"][0]["read"]["total_ios"].as_u64().unwrap() as usize;
        let l = logs(&d);
        let names: Vec<&str> = l.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "r_iops.1.log",
                "p_lat.1.log",
                "p_clat.1.log",
                "p_slat.1.log"
            ]
        );
        for (name, lines) in &l {
            assert_eq!(lines.len(), ios, "{name}");
        }
        assert!(
            l[0].1.iter().all(|x| x.ends_with(", 1, 0, 4096, 0")),
            "{:?}",
            &l[0].1[..3]
        );
        // clat + slat = lat, line by line.
        let col =
            |i: usize, k: usize| -> u64 { l[i].1[k].split(", ").nth(1).unwrap().parse().unwrap() };
        assert_eq!(col(1, 7), col(2, 7) + col(3, 7));
        assert_eq!(
            d["jobs"][0]["read"]["iops_samples"].as_u64(),
            Some(ios as u64)
        );
    }

    #[test]
    fn averaged_logs_have_a_line_per_log_avg_msec_window() {
        let d = doc(&format!(
            "{JOB}write_bw_log=b\nwrite_lat_log=b\nlog_avg_msec=250\n"
        ));
        let r = &d["jobs"][0]["read"];
        assert_eq!(r["bw_samples"], 8, "bw_avg_time follows log_avg_msec");
        let l = logs(&d);
        let times: Vec<&str> = l[0]
            .1
            .iter()
            .map(|x| x.split(", ").next().unwrap())
            .collect();
        assert_eq!(
            times,
            ["250", "500", "750", "1000", "1250", "1500", "1750", "2000"]
        );
        let mean: f64 = l[0]
            .1
            .iter()
            .map(|x| x.split(", ").nth(1).unwrap().parse::<f64>().unwrap())
            .sum::<f64>()
            / 8.0;
        assert!((mean - r["bw_mean"].as_f64().unwrap()).abs() < 1e-9);
        assert_eq!(l[1].0, "b_lat.1.log");
        assert_eq!(l[1].1.len(), 8);
    }

    #[test]
    fn a_log_avg_msec_that_is_no_number_is_refused_naming_it() {
        let s = two_hdd_stack("raid0", "none");
        let job = format!("{JOB}write_bw_log\nlog_avg_msec=fast\n");
        let e = run(&RunInput::texts(&s, &job, 3))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("job 'r': log_avg_msec: 'fast' is not valid; accepted: a whole number of milliseconds"),
            "{e}"
        );
    }

    #[test]
    fn clat_bins_count_every_completion_at_fio_s_bucket_values() {
        let d = doc(JOB);
        let c = &d["jobs"][0]["read"]["clat_ns"];
        let bins = c["bins"].as_object().unwrap();
        let n: u64 = bins.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(Some(n), c["N"].as_u64());
        let min = c["min"].as_u64().unwrap() as f64;
        let lowest = bins
            .keys()
            .map(|k| k.parse::<f64>().unwrap())
            .fold(f64::MAX, f64::min);
        assert!((lowest - min).abs() / min < 0.02, "{lowest} vs {min}");
    }
}
