//! The `flash` device model's closed forms (vmio_sim::device::flash::ClosedForm) and the
//! device models' declared parameters, for `vmio calibrate`: its fit evaluates the model
//! here instead of keeping a copy of the formulas.
//!
//! ```text
//! flash_predict(params, job) -> (requests/s, bytes/s, mean latency ns)
//!                               an fdatasync job: (NaN, NaN, the FLUSH's latency in ns
//!                               after one write of bs: flush_after_ns)
//! flash_bounds(params, job)  -> (a in s, X without the units)   X = min(units / a, that)
//! flash_processor_x(q, b_s, k_s, r0_s, cap) -> X                the processor's approximation
//! host_path_ns()             -> a native host's per-request path in ns (vdisk's `host`
//!                               interface: guest_submit + vmm_submit + vmm_complete, the
//!                               costs the dedicated CPU model charges): a job's path_ns
//! device_params(model)       -> [{name, kind, unit, default, choices}]   the model's specs
//! params: {stack-file name: a number in the spec's unit (ns, bytes/s, bytes) | a text as
//!          the stack file writes it}; a missing name takes the model's default
//! job:    {rw: fio's rw (read, randread, write, randwrite, rw, readwrite, randrw),
//!          bs: bytes, iodepth (default 1), rwmixread (default 50, fio's), fdatasync: bool,
//!          path_ns: the delay each request spends outside the device (default 0)}
//! ```

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};
use vmio_core::fio::RwMode;
use vmio_core::params::{Kind, Value};
use vmio_sim::device::flash::{processor_x, ClosedForm, ClosedLoop, Figure, Load};

use crate::err;

/// A job of `flash_predict`: a closed loop, or fio's fdatasync point (a FLUSH alone).
enum Job {
    Loop(ClosedLoop),
    /// A FLUSH after one write of this many bytes (the job's bs).
    Flush(u64),
}

/// The closed forms of `params` (module doc), errors prefixed `flash:`.
fn closed_form(params: &Bound<'_, PyDict>) -> PyResult<ClosedForm> {
    // (key, number or text) owned here; the figures borrow them.
    let mut given: Vec<(String, Result<f64, String>)> = Vec::with_capacity(params.len());
    for (k, v) in params.iter() {
        let key: String = k.extract()?;
        let value = if v.is_instance_of::<PyString>() {
            Err(v.extract::<String>()?)
        } else {
            match v.extract::<f64>() {
                Ok(x) if !v.is_instance_of::<PyBool>() => Ok(x),
                _ => {
                    return Err(err(format!(
                        "flash: {key} = {v}: must be a number or a text"
                    )))
                }
            }
        };
        given.push((key, value));
    }
    let figures = given.iter().map(|(k, v)| {
        let figure = match v {
            Ok(x) => Figure::Number(*x),
            Err(s) => Figure::Text(s),
        };
        (k.as_str(), figure)
    });
    ClosedForm::from_figures(figures).map_err(|e| err(format!("flash: {e}")))
}

/// The job of `job` (module doc).
fn job(job: &Bound<'_, PyDict>) -> PyResult<Job> {
    const KEYS: &[&str] = &["rw", "bs", "iodepth", "rwmixread", "fdatasync", "path_ns"];
    for k in job.keys() {
        let k: String = k.extract()?;
        if !KEYS.contains(&k.as_str()) {
            return Err(err(format!(
                "job: unknown key '{k}'; accepted: {}",
                KEYS.join(", ")
            )));
        }
    }
    let get = |name: &str| job.get_item(name).ok().flatten().filter(|v| !v.is_none());
    if let Some(f) = get("fdatasync") {
        if f.is_truthy()? {
            let bs = match get("bs") {
                Some(v) => v
                    .extract::<u64>()
                    .map_err(|_| err(format!("job: bs = {v}: must be a whole number")))?,
                None => 0,
            };
            return Ok(Job::Flush(bs));
        }
    }
    let rw: String = match get("rw") {
        Some(v) => v.extract()?,
        None => return Err(err("job: rw is missing")),
    };
    let mode = RwMode::parse(&rw)
        .filter(|m| !m.trims())
        .ok_or_else(|| {
            err(format!(
                "job: rw '{rw}' is not valid; accepted: read, randread, write, randwrite, rw, readwrite, randrw"
            ))
        })?;
    let int = |name: &str, default: u64| -> PyResult<u64> {
        get(name).map_or(Ok(default), |v| {
            v.extract::<u64>()
                .map_err(|_| err(format!("job: {name} = {v}: must be a whole number")))
        })
    };
    let (bs, iodepth) = (int("bs", 4096)?, int("iodepth", 1)?);
    if bs == 0 || iodepth == 0 {
        return Err(err(format!(
            "job: bs = {bs}, iodepth = {iodepth}: both must be at least 1"
        )));
    }
    let load = match (mode.reads(), mode.writes()) {
        (true, true) => {
            let read_percent = int("rwmixread", 50)?;
            if read_percent > 100 {
                return Err(err(format!(
                    "job: rwmixread = {read_percent}: must be a percentage from 0 to 100"
                )));
            }
            Load::Mixed {
                read_percent: read_percent as u32,
            }
        }
        (true, false) => Load::Read,
        _ => Load::Write,
    };
    let path_ns = match get("path_ns") {
        Some(v) => match v.extract::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 && !v.is_instance_of::<PyBool>() => x,
            _ => {
                return Err(err(format!(
                    "job: path_ns = {v}: must be a number of ns at least 0"
                )))
            }
        },
        None => 0.0,
    };
    Ok(Job::Loop(ClosedLoop {
        load,
        bs,
        iodepth,
        path_ns,
    }))
}

/// `(requests per second, bytes per second, mean latency in ns)` of `job` on the flash model
/// of `params` by its closed forms; an fdatasync job: `(NaN, NaN, the FLUSH's latency)`.
#[pyfunction]
fn flash_predict(params: &Bound<'_, PyDict>, job: &Bound<'_, PyDict>) -> PyResult<(f64, f64, f64)> {
    let form = closed_form(params)?;
    Ok(match self::job(job)? {
        Job::Loop(j) => {
            let (x, latency) = form.closed_loop(&j);
            (x, x * j.bs as f64, latency)
        }
        Job::Flush(bs) => (f64::NAN, f64::NAN, form.flush_after_ns(bs)),
    })
}

/// `(a, X')` of `job`: its unit time in seconds and its requests per second bounded by all
/// but the units, X = min(units / a, X') (`ClosedForm::bounds`).
#[pyfunction]
fn flash_bounds(params: &Bound<'_, PyDict>, job: &Bound<'_, PyDict>) -> PyResult<(f64, f64)> {
    let form = closed_form(params)?;
    match self::job(job)? {
        Job::Loop(j) => Ok(form.bounds(&j)),
        Job::Flush(_) => Err(err("job: an fdatasync job has no throughput bounds")),
    }
}

/// Requests per second of a closed loop of `q` commands through the flash model's command
/// processor (a batch of k costs `b_s + k k_s` seconds), then `r0_s` seconds each, at most
/// `cap`: the mean-value approximation (`vmio_sim::device::flash::processor_x`).
#[pyfunction]
fn flash_processor_x(q: u64, b_s: f64, k_s: f64, r0_s: f64, cap: f64) -> f64 {
    processor_x(q, b_s, k_s, r0_s, cap)
}

/// A native host's per-request path in ns: what the simulator adds to each request of
/// `interface = "host"` outside the device (vmio_sim::vdisk, `Interface::Host`: the system
/// call's submission; the dedicated CPU model charges no completion), a closed loop's
/// `path_ns`.
#[pyfunction]
fn host_path_ns() -> f64 {
    use vmio_core::request::Op;
    use vmio_sim::vdisk::{InterfaceModel, VirtualDisk};
    let m = InterfaceModel::new(vmio_core::stack::Interface::Host, None, None);
    (m.guest_submit_ns() + m.vmm_submit_ns(Op::Read, 4096) + m.vmm_complete_ns(Op::Read, 4096))
        as f64
}

/// The declared parameters of device model `model`, in order: `name`, `kind` (size, rate,
/// duration, count, fraction, choice, bool), `unit` of the resolved value (ns, bps, bytes or
/// empty), `default` (a number in that unit, a choice's name, a bool) and `choices` (a
/// choice's names, else None).
#[pyfunction]
fn device_params<'py>(py: Python<'py>, model: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let entry = vmio_core::params::lookup(vmio_sim::device::REGISTRY, model)
        .map_err(|e| err(format!("device model {e}")))?;
    entry
        .params
        .iter()
        .map(|p| {
            let d = PyDict::new_bound(py);
            d.set_item("name", p.name)?;
            let (kind, choices) = match p.kind {
                Kind::Size { .. } => ("size", None),
                Kind::Rate => ("rate", None),
                Kind::Duration { .. } => ("duration", None),
                Kind::Count { .. } => ("count", None),
                Kind::Fraction { .. } => ("fraction", None),
                Kind::Choice(names) => ("choice", Some(names.to_vec())),
                Kind::Bool => ("bool", None),
            };
            d.set_item("kind", kind)?;
            d.set_item("unit", p.unit)?;
            match p.default {
                Value::Int(n) => d.set_item("default", n)?,
                Value::Float(f) => d.set_item("default", f)?,
                Value::Bool(b) => d.set_item("default", b)?,
                Value::Choice(c) | Value::Computed(c) => d.set_item("default", c)?,
            }
            d.set_item("choices", choices)?;
            Ok(d)
        })
        .collect()
}

/// Add this file's functions to `vmio._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flash_predict, m)?)?;
    m.add_function(wrap_pyfunction!(flash_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(flash_processor_x, m)?)?;
    m.add_function(wrap_pyfunction!(host_path_ns, m)?)?;
    m.add_function(wrap_pyfunction!(device_params, m)?)?;
    Ok(())
}
