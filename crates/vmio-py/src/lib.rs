//! Python bindings of vmio (module `vmio._native`). The only crate that uses PyO3: it converts
//! arguments, releases the GIL around the simulation and the NBD server, and turns every Rust error into one
//! `VmioError` whose message is already user-facing. Docs, typing and the CLI live in Python.

// pyo3 0.22's #[pyfunction] expansion trips this lint on every PyResult return.
#![allow(clippy::useless_conversion)]

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vmio_sim::engine::Watch;
use vmio_sim::output::fio_json;
use vmio_sim::run::{json_text, run_many_watched, RunError, VmJob};
use vmio_sim::sim::Limits;

mod flash;
mod serve;
mod stackview;

create_exception!(
    _native,
    VmioError,
    PyException,
    "Bad input or a failed run; the message says what and where."
);

create_exception!(
    _native,
    Interrupted,
    PyKeyboardInterrupt,
    "Ctrl-C stopped a simulation; args[0] is fio's JSON of what ran so far, marked in its \
     `vmio.interrupted` object (simulated time reached)."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    VmioError::new_err(e.to_string())
}

/// Wall time between two looks at a running simulation: Python's signal handlers run (so
/// Ctrl-C is seen within it) and the progress callback is called.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// What the looks of one run saw: the exception that stopped it, the virtual time reached.
#[derive(Default)]
struct Looked {
    error: Option<PyErr>,
    now_ns: u64,
}

/// The run's [`Watch`]: every [`LOOK_EVERY`] of wall time, with the GIL, Python's signal
/// handlers (`check_signals`: Ctrl-C raises KeyboardInterrupt there), then
/// `progress(now_ns, planned_ns or None)`; an exception from either stops the run and is
/// kept in `looked`.
fn watch(progress: Option<PyObject>, planned: Option<u64>, looked: Arc<Mutex<Looked>>) -> Watch {
    let mut last = Instant::now();
    Box::new(move |now| {
        if last.elapsed() < LOOK_EVERY {
            return true;
        }
        last = Instant::now();
        let result = Python::with_gil(|py| {
            py.check_signals()?;
            if let Some(f) = &progress {
                f.call1(py, (now, planned))?;
            }
            Ok::<(), PyErr>(())
        });
        let mut l = looked.lock().unwrap_or_else(|e| e.into_inner());
        l.now_ns = now;
        match result {
            Ok(()) => true,
            Err(e) => {
                l.error = Some(e);
                false
            }
        }
    })
}

/// One run of `vm_jobs`, watched (Ctrl-C, `progress`); fio's JSON text. A run Ctrl-C
/// stopped raises [`Interrupted`] with the JSON of what ran so far.
fn run_watched(
    py: Python<'_>,
    stack_text: &str,
    stack_path: &str,
    vm_jobs: &[VmJob],
    seed: Option<u64>,
    progress: Option<PyObject>,
    limits: Limits,
) -> PyResult<String> {
    let looked = Arc::new(Mutex::new(Looked::default()));
    let seen = looked.clone();
    let make = Box::new(move |planned| watch(progress, planned, seen));
    let out = py
        .allow_threads(|| {
            run_many_watched(stack_text, stack_path, vm_jobs, seed, Some(make), limits)
        })
        .map_err(|e: RunError| err(e))?;
    let mut v = fio_json(&out);
    let looked = std::mem::take(&mut *looked.lock().unwrap_or_else(|e| e.into_inner()));
    match looked.error {
        None => Ok(json_text(&v)),
        Some(e) if e.is_instance_of::<PyKeyboardInterrupt>(py) => {
            v["vmio"]["interrupted"] = serde_json::json!({ "virtual_time_ns": looked.now_ns });
            Err(Interrupted::new_err(json_text(&v)))
        }
        Some(e) => Err(e),
    }
}

/// The bounds of a run (`vmio_sim::sim::Limits`): `max_events` (at least 1) and
/// `max_sim_time` (a duration such as "100d"; bare: seconds, as fio's runtime), each
/// defaulting to the simulator's.
fn limits(max_events: Option<u64>, max_sim_time: Option<&str>) -> PyResult<Limits> {
    let mut l = Limits::default();
    if let Some(n) = max_events {
        if n == 0 {
            return Err(err(
                "--max-events (max_events=): 0 events; accepted: a count of at least 1",
            ));
        }
        l.max_events = n;
    }
    if let Some(t) = max_sim_time {
        l.max_sim_time_ns = vmio_core::units::parse_duration_ns(t, vmio_core::SEC)
            .ok()
            .filter(|&ns| ns > 0)
            .ok_or_else(|| {
                err(format!(
                    "--max-sim-time (max_sim_time=): '{}' is not a positive duration; accepted: a number of seconds or a duration such as 90s, 2h, 100d, below 584 years",
                    vmio_core::units::quote(t)
                ))
            })?;
    }
    Ok(l)
}

/// Run one simulation; returns fio's JSON output as text. `progress(now_ns, planned_ns)`
/// is called about every 100 ms of wall time (planned_ns None when the job has no
/// runtime); Ctrl-C raises `Interrupted` carrying the JSON of what ran so far.
/// `max_events` and `max_sim_time` bound the run ([`limits`]).
#[pyfunction]
#[pyo3(signature = (stack_text, stack_path, job_text, job_path, seed=None, vm=None, progress=None, max_events=None, max_sim_time=None))]
#[allow(clippy::too_many_arguments)]
fn simulate(
    py: Python<'_>,
    stack_text: &str,
    stack_path: &str,
    job_text: &str,
    job_path: &str,
    seed: Option<u64>,
    vm: Option<&str>,
    progress: Option<PyObject>,
    max_events: Option<u64>,
    max_sim_time: Option<&str>,
) -> PyResult<String> {
    let vm_jobs = [VmJob {
        vm,
        job_text,
        job_path,
    }];
    let limits = limits(max_events, max_sim_time)?;
    run_watched(py, stack_text, stack_path, &vm_jobs, seed, progress, limits)
}

/// Run several VMs at once, each with its own fio job file: `jobs` is a list of
/// `(vm_name_or_None, job_text, job_path)`. Returns fio's JSON output as text; `progress`,
/// Ctrl-C and the bounds as [`simulate`].
#[pyfunction]
#[pyo3(signature = (stack_text, stack_path, jobs, seed=None, progress=None, max_events=None, max_sim_time=None))]
#[allow(clippy::too_many_arguments)]
fn simulate_many(
    py: Python<'_>,
    stack_text: &str,
    stack_path: &str,
    jobs: Vec<(Option<String>, String, String)>,
    seed: Option<u64>,
    progress: Option<PyObject>,
    max_events: Option<u64>,
    max_sim_time: Option<&str>,
) -> PyResult<String> {
    let limits = limits(max_events, max_sim_time)?;
    let vm_jobs: Vec<VmJob> = jobs
        .iter()
        .map(|(vm, text, path)| VmJob {
            vm: vm.as_deref(),
            job_text: text,
            job_path: path,
        })
        .collect();
    run_watched(py, stack_text, stack_path, &vm_jobs, seed, progress, limits)
}

/// Run one simulator benchmark case; returns a dict of its figures.
#[pyfunction]
#[pyo3(name = "bench", signature = (case, seconds=20))]
fn run_bench<'py>(py: Python<'py>, case: &str, seconds: u64) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .allow_threads(|| vmio_sim::bench::bench(case, seconds))
        .map_err(err)?;
    let d = PyDict::new_bound(py);
    d.set_item("case", r.case)?;
    d.set_item("simulated_ios", r.simulated_ios)?;
    d.set_item("wall_s", r.wall_s)?;
    d.set_item("setup_s", r.setup_s)?;
    d.set_item("ios_per_s", r.simulated_ios as f64 / r.wall_s.max(1e-9))?;
    d.set_item("peak_rss_bytes", peak_rss_bytes())?;
    Ok(d)
}

/// Benchmark case names.
#[pyfunction]
fn bench_cases() -> Vec<&'static str> {
    vmio_sim::bench::CASES.to_vec()
}

/// Peak resident set size of this process (VmHWM), in bytes; 0 where unknown.
#[pyfunction]
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Built-in device profiles per model.
#[pyfunction]
fn profiles() -> Vec<(&'static str, Vec<&'static str>)> {
    vmio_sim::device::REGISTRY
        .iter()
        .map(|m| (m.name, m.build.profiles.to_vec()))
        .collect()
}

/// Whether fio 3.33 (or vmio) knows job option `name` as written (vmio-core `fio::names`):
/// None when it does (an engine's own option included), else why not, with fio's
/// did-you-mean and the accepted names, for `vmio fio`'s command line.
#[pyfunction]
fn fio_option_check(name: &str) -> Option<String> {
    use vmio_core::fio::names;
    names::check(name)
        .err()
        .map(|why| format!("{why}; accepted: {}", names::ACCEPTED))
}

/// `vmio help stack`: the layouts, schedulers and device models with their parameters, as
/// text or (`markdown`) as the README's tables.
#[pyfunction]
fn stack_help(markdown: bool) -> String {
    vmio_sim::help::stack(markdown)
}

/// `vmio help workload`: the workload kinds (FileBench personalities, applications, trace
/// formats, synthetic trace profiles) with their help, from vmio-core's workload registries.
#[pyfunction]
fn workload_help() -> String {
    vmio_core::workload::help_text()
}

/// A synthetic trace (profile msn, exchange or financial) of `requests` requests over a
/// region of `region_bytes`, as UMass/SPC CSV text.
#[pyfunction]
fn synth_trace(
    py: Python<'_>,
    profile: &str,
    region_bytes: u64,
    requests: u64,
    seed: u64,
) -> PyResult<String> {
    py.allow_threads(|| {
        vmio_core::workload::synth::synth_spc_csv(profile, region_bytes, requests, seed)
    })
    .map_err(err)
}

/// Bytes of a fio-style size (`4k`, `64KiB`, `1g`, `512`; fio's kb_base=1024): the parser the
/// simulator reads stack and job files with, for Python's `vmio.parse_size`.
#[pyfunction]
fn parse_size(text: &str) -> PyResult<u64> {
    vmio_core::units::parse_size(text).map_err(err)
}

/// `lrand48()` `count` times after `srand48(seed)`: vmio-core's iozone generator, for
/// `vmio.iozone` (the real engine's record order is the simulator's).
#[pyfunction]
fn iozone_lrand48(seed: u32, count: usize) -> Vec<u64> {
    let mut r = vmio_core::workload::iozone::Lrand48::srand48(seed);
    (0..count).map(|_| r.next_u31()).collect()
}

/// iozone's random passes' record order for `numrecs` records (`random_perf_test`).
#[pyfunction]
fn iozone_shuffle(numrecs: u64) -> Vec<u64> {
    vmio_core::workload::iozone::shuffle(numrecs)
}

/// Bytes of iozone's size argument `text` of `flag` (`-s` or `-r`): KB, or a k, m, g suffix.
#[pyfunction]
fn iozone_size(flag: &str, text: &str) -> PyResult<u64> {
    let flag = match flag {
        "-s" => "-s",
        "-r" => "-r",
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "iozone size flag '{flag}'; accepted: -s, -r"
            )))
        }
    };
    vmio_core::workload::iozone::size_arg(flag, text)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// The columns of iozone's table, in order (`write`, `rewrite`, ..., `random write`).
#[pyfunction]
fn iozone_phases() -> Vec<&'static str> {
    vmio_core::workload::iozone::Phase::ALL
        .map(|p| p.name())
        .to_vec()
}

/// iozone's rate of `bytes` in `ns`: `(bytes / seconds) >> 10`, KB/s.
#[pyfunction]
fn iozone_rate(bytes: u64, ns: u64) -> u64 {
    vmio_core::workload::iozone::Timing {
        file_bytes: 0,
        record_bytes: 0,
        phase: vmio_core::workload::iozone::Phase::Write,
        bytes,
        ns,
    }
    .kb_per_s()
}

/// iozone's `-a` table of timings `(file_bytes, record_bytes, phase, bytes, ns)`, phase a
/// name of [`iozone_phases`]: the simulator's formatter, for the real engine.
#[pyfunction]
fn iozone_table(timings: Vec<(u64, u64, String, u64, u64)>) -> PyResult<String> {
    use vmio_core::workload::iozone::{table, Phase, Timing};
    let timings = timings
        .into_iter()
        .map(|(file_bytes, record_bytes, phase, bytes, ns)| {
            let phase = Phase::parse(&phase).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "iozone phase '{phase}'; accepted: {}",
                    iozone_phases().join(", ")
                ))
            })?;
            Ok(Timing {
                file_bytes,
                record_bytes,
                phase,
                bytes,
                ns,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(table(&timings))
}

/// Set option `option=value` in a fio job file's text (in `section` only, when given) as a
/// study's `job:` target does, matching the option under every spelling fio accepts; see
/// `vmio_core::fio::set_option`. `path` names the file in errors.
#[pyfunction]
#[pyo3(signature = (text, path, section, option, value))]
fn set_job_option(
    text: &str,
    path: &str,
    section: Option<&str>,
    option: &str,
    value: &str,
) -> PyResult<String> {
    vmio_core::fio::set_option(text, path, section, option, value).map_err(err)
}

#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VmioError", m.py().get_type_bound::<VmioError>())?;
    m.add("Interrupted", m.py().get_type_bound::<Interrupted>())?;
    // The layers of `vmio.breakdown`, in its order (vmio_sim::sim::breakdown).
    m.add(
        "BREAKDOWN_LAYERS",
        vmio_sim::sim::breakdown::LAYERS.to_vec(),
    )?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_many, m)?)?;
    m.add_function(wrap_pyfunction!(run_bench, m)?)?;
    m.add_function(wrap_pyfunction!(bench_cases, m)?)?;
    m.add_function(wrap_pyfunction!(peak_rss_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(profiles, m)?)?;
    m.add_function(wrap_pyfunction!(stack_help, m)?)?;
    m.add_function(wrap_pyfunction!(workload_help, m)?)?;
    m.add_function(wrap_pyfunction!(synth_trace, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(fio_option_check, m)?)?;
    m.add_function(wrap_pyfunction!(set_job_option, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_lrand48, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_shuffle, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_size, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_phases, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_rate, m)?)?;
    m.add_function(wrap_pyfunction!(iozone_table, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    flash::register(m)?;
    serve::register(m)?;
    stackview::register(m)?;
    Ok(())
}
