//! `vmio serve` in Python: the server's option table ([`vmio_serve::options::OPTIONS`]) for
//! the argparse command, and the server itself, configured by option name.
//!
//! ```text
//! serve_options()       -> [{flag, dest, kind, metavar, default, default_text, lo, hi,
//!                            range, choices, help, required, excludes, needs}], in the
//!                            table's order
//! serve_text(cmd)       -> (about, epilog) of the help, examples naming `cmd`
//! serve(stack, **opts)  -> opts by dest (queue_depth=8): None = not given; str values are
//!                          read as on the command line ("64m"), numbers and paths as they
//!                          are -> options::configure -> the server, until SIGINT/SIGTERM
//! ```

use crate::err;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::path::PathBuf;
use vmio_serve::options::{self, Kind, Rule, ServeOption, Value, OPTIONS};

/// Register this module's functions in `vmio._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(serve_options, m)?)?;
    m.add_function(wrap_pyfunction!(serve_text, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    Ok(())
}

fn to_py(py: Python<'_>, v: &Value) -> PyObject {
    match v {
        Value::Flag(b) => b.into_py(py),
        Value::Path(p) => p.display().to_string().into_py(py),
        Value::Number(n) => n.into_py(py),
        Value::Seconds(s) => s.into_py(py),
        Value::Text(t) => t.into_py(py),
    }
}

/// `vmio serve`'s options, one dict each, in the order of the help.
#[pyfunction]
fn serve_options(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    OPTIONS
        .iter()
        .map(|o| {
            let d = PyDict::new_bound(py);
            d.set_item("flag", o.flag())?;
            d.set_item("dest", o.dest())?;
            d.set_item("kind", o.kind.name())?;
            d.set_item("metavar", o.metavar)?;
            let default = o.default_value().map(|v| to_py(py, &v));
            d.set_item("default", default)?;
            d.set_item("default_text", o.default)?;
            let (lo, hi): (PyObject, PyObject) = match o.kind {
                Kind::Flag | Kind::Path | Kind::Choice { .. } => (py.None(), py.None()),
                Kind::Port => (0u64.into_py(py), u64::from(u16::MAX).into_py(py)),
                Kind::Count { lo, hi } | Kind::Size { lo, hi } => (lo.into_py(py), hi.into_py(py)),
                Kind::Seconds { lo, hi } => (lo.into_py(py), hi.into_py(py)),
            };
            d.set_item("lo", lo)?;
            d.set_item("hi", hi)?;
            d.set_item("range", o.kind.range_text())?;
            let choices = match o.kind {
                Kind::Choice { values } => Some(values.to_vec()),
                _ => None,
            };
            d.set_item("choices", choices)?;
            d.set_item("help", o.help_text())?;
            d.set_item("required", o.rule == Rule::Required)?;
            let other = |name: &str| format!("--{name}");
            d.set_item(
                "excludes",
                matches!(o.rule, Rule::Excludes(_)).then(|| rule_flag(o, other)),
            )?;
            d.set_item(
                "needs",
                matches!(o.rule, Rule::Needs(_)).then(|| rule_flag(o, other)),
            )?;
            Ok(d)
        })
        .collect()
}

fn rule_flag(o: &ServeOption, flag: impl Fn(&str) -> String) -> String {
    match o.rule {
        Rule::Excludes(n) | Rule::Needs(n) => flag(n),
        Rule::Free | Rule::Required => String::new(),
    }
}

/// The help's description and epilog, the examples naming `cmd`.
#[pyfunction]
fn serve_text(cmd: &str) -> (&'static str, String) {
    (options::ABOUT, options::epilog(cmd))
}

/// A Python value of option `opt`: text is read as on the command line, the rest by kind.
fn value(opt: &ServeOption, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    if v.is_instance_of::<PyString>() {
        return opt.parse(&v.extract::<String>()?).map_err(err);
    }
    let as_text = || -> PyResult<Value> { opt.parse(&v.str()?.to_cow()?).map_err(err) };
    match opt.kind {
        Kind::Flag => v.extract::<bool>().map(Value::Flag).or_else(|_| as_text()),
        Kind::Path => v
            .extract::<PathBuf>()
            .map(Value::Path)
            .or_else(|_| as_text()),
        Kind::Port | Kind::Count { .. } | Kind::Size { .. } => {
            v.extract::<u64>().map(Value::Number).or_else(|_| as_text())
        }
        Kind::Seconds { .. } => v
            .extract::<f64>()
            .map(Value::Seconds)
            .or_else(|_| as_text()),
        Kind::Choice { .. } => as_text(),
    }
}

/// Serve the stack's VM disks over NBD until SIGINT/SIGTERM (the GIL is released meanwhile).
/// `options` by name (`queue_depth=8`, `tcp=7000`, `max_conn_payload="64m"`; None: not given),
/// checked against `serve_options()`; the others at their defaults. Prints `vmio: serving
/// EXPORTS on ADDRESS` on stderr once listening; returns the final per-export statistics as
/// JSON text. Bad options, and an internal failure of the server, raise VmioError.
#[pyfunction]
#[pyo3(signature = (stack_path, **options))]
fn serve(
    py: Python<'_>,
    stack_path: PathBuf,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let mut given = vec![("stack".to_string(), Value::Path(stack_path))];
    for (k, v) in options.into_iter().flat_map(|d| d.iter()) {
        let name: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        let Some(opt) = options::find(&name) else {
            return Err(err(options::OptionError::Unknown(name)));
        };
        given.push((name, value(opt, &v)?));
    }
    let cfg =
        options::configure(given.iter().map(|(n, v)| (n.as_str(), v.clone()))).map_err(err)?;
    py.allow_threads(|| {
        let server = vmio_serve::start(&cfg)?;
        eprintln!("vmio: {}", server.banner());
        let snaps = server.wait()?;
        Ok::<_, vmio_serve::ServeError>(serde_json::to_string(&snaps).unwrap_or_default())
    })
    .map_err(err)
}
