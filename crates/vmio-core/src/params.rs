//! Declared parameters: each scheduler, volume layout and device model states its tunables
//! once, as a list of [`ParamSpec`]s in its own file, and registers itself as an [`Entry`] in
//! its layer's list (`sched::REGISTRY`, `volume::REGISTRY`, `vmio_sim::device::REGISTRY`).
//! The stack parser reads the TOML tables against those lists, error messages take their
//! accepted values from them, and `vmio help stack` (like `qemu-system-x86_64 -device help`
//! or `fio --cmdhelp`) and the README's tables are rendered from them ([`render_text`],
//! [`render_markdown`]).
//!
//! ```text
//! ParamSpec { name, kind, default, unit, help }
//!   kind: Size{min, max, pow2} | Rate | Duration{bare, positive} | Count{min, max}
//!         | Fraction{min, max} | Choice(names) | Bool
//! Entry { name, help, params, build }   one scheduler / layout / model; a layer's REGISTRY
//!                                    is a list of them
//! Values::defaults(specs)            every declared parameter at its default
//! values.read(table, skip)           each key of the table: declared -> parsed and checked
//!                                    against its kind (one error naming key, value and the
//!                                    accepted form), else Unknown (listing the declared keys)
//! read_for(values, table, entry, registry)   the same, but a key another entry declares is
//!                                    "only valid with <selector> = <those entries>"
//! values.int / float / flag / choice (name)   typed reads for the entry's build function
//! ```
//!
//! Text forms follow fio and QEMU: sizes `64k`, `2t` (base 1024) or integers (bytes); rates
//! like sizes with an optional `/s`; durations `8ms`, `50us` or a bare number in the kind's
//! unit (milliseconds for device models, seconds in the stack's own tables); fractions `0.07`
//! or `"7%"`.

use crate::units::{parse_duration_ns, parse_size, quote};
use crate::{Ns, MS, SEC, US};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What values a parameter accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// Bytes: an integer or `"64k"`; within `min..=max`; a power of two if `pow2`.
    Size {
        min: u64,
        max: u64,
        pow2: bool,
    },
    /// Bytes per second, positive: a number or `"220m"` / `"220m/s"`.
    Rate,
    /// Nanoseconds: `"8.5ms"`, `"50us"` or a bare number in units of `bare` ns; not 0 if
    /// `positive`.
    Duration {
        bare: Ns,
        positive: bool,
    },
    /// An integer within `min..=max`.
    Count {
        min: u64,
        max: u64,
    },
    /// A number within `min..=max`, or a percentage string (`"7%"`).
    Fraction {
        min: f64,
        max: f64,
    },
    /// One of these names.
    Choice(&'static [&'static str]),
    Bool,
}

impl Kind {
    /// Any size.
    pub const SIZE: Kind = Kind::Size {
        min: 0,
        max: u64::MAX,
        pow2: false,
    };
    /// Any positive size.
    pub const POSITIVE_SIZE: Kind = Kind::Size {
        min: 1,
        max: u64::MAX,
        pow2: false,
    };
    /// A positive integer.
    pub const POSITIVE: Kind = Kind::Count {
        min: 1,
        max: u64::MAX,
    };

    /// The accepted form, as error messages and help state it ("must be ...").
    pub fn expected(&self) -> String {
        match *self {
            Kind::Size { min, max, pow2 } => {
                let s = "must be a size in bytes (an integer, or a string like \"256m\", \"2t\")";
                if (min, max, pow2) == (0, u64::MAX, false) {
                    s.into()
                } else {
                    format!("{s}: {}", self.accepted())
                }
            }
            Kind::Rate => "must be a positive rate in bytes/s (a number, or a string like \"220m\" or \"220m/s\")".into(),
            Kind::Duration { bare, positive } => format!(
                "must be a {}duration (a number of {}, or a string like \"8.5ms\", \"50us\")",
                if positive { "positive " } else { "" },
                if bare == SEC { "seconds" } else { "milliseconds" }
            ),
            Kind::Count { min: 1, max: u64::MAX } => "must be a positive integer".into(),
            Kind::Count { min, max: u64::MAX } => format!("must be an integer >= {min}"),
            Kind::Count { min, max } => format!("must be an integer from {min} to {max}"),
            Kind::Fraction { min, max } => format!(
                "must be a fraction between {min} and {max} (e.g. 0.07) or a percentage (e.g. \"7%\")"
            ),
            Kind::Choice(names) => format!("must be one of {}", names.join(", ")),
            Kind::Bool => "must be true or false".into(),
        }
    }

    /// The accepted values in a few words (the help tables' "accepted" column).
    pub fn accepted(&self) -> String {
        match *self {
            Kind::Size { min, max, pow2 } => {
                let mut s = String::from(if pow2 { "a power of two" } else { "size" });
                match (min, max) {
                    (0, u64::MAX) => {}
                    (1, u64::MAX) => s.push_str(" > 0"),
                    (m, u64::MAX) => {
                        let _ = write!(s, " >= {}", format_size(m));
                    }
                    (m, x) => {
                        let _ = write!(s, " {}..={}", format_size(m), format_size(x));
                    }
                }
                s
            }
            Kind::Rate => "rate > 0 (bytes/s)".into(),
            Kind::Duration { bare, positive } => format!(
                "duration{} (bare number: {})",
                if positive { " > 0" } else { "" },
                if bare == SEC { "s" } else { "ms" }
            ),
            Kind::Count { min, max: u64::MAX } => format!(">= {min}"),
            Kind::Count { min, max } => format!("{min}..={max}"),
            Kind::Fraction { min, max } => format!("{min}..={max} or \"N%\""),
            Kind::Choice(names) => names.join(", "),
            Kind::Bool => "bool".into(),
        }
    }
}

/// A resolved parameter value: sizes, rates, durations (ns) and counts are `Int`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Bool(bool),
    /// One of a [`Kind::Choice`]'s names.
    Choice(&'static str),
    /// A default the reader computes from other tables, shown as this text in help
    /// (`[page_cache] memory`: "half of [host] memory"); parsing never yields it, so it means
    /// "not set", and [`Values::int_or`] gives the computed value.
    Computed(&'static str),
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Value::Int(n) => s.serialize_u64(n),
            Value::Float(f) => s.serialize_f64(f),
            Value::Bool(b) => s.serialize_bool(b),
            Value::Choice(c) | Value::Computed(c) => s.serialize_str(c),
        }
    }
}

/// One declared parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamSpec {
    /// The key in the TOML table.
    pub name: &'static str,
    pub kind: Kind,
    pub default: Value,
    /// Unit of the resolved value (`bytes`, `ns`, `bps` for bytes/s, `s`; empty for plain
    /// numbers), also the suffix of the key in result records (`read_expire_ns`).
    pub unit: &'static str,
    /// One line: what it is, and where its default comes from.
    pub help: &'static str,
}

impl ParamSpec {
    /// The key of the resolved value in result records: the name and its unit
    /// (`read_expire_ns`, `max_merge_bytes`, `bw_window_s`; `quantum`).
    pub fn record_key(&self) -> String {
        if self.unit.is_empty() {
            self.name.to_string()
        } else {
            format!("{}_{}", self.name, self.unit)
        }
    }

    /// `value` as the help tables write it (`64k`, `500ms`, `8`, `true`).
    pub fn show(&self, value: Value) -> String {
        match (self.kind, value) {
            (Kind::Size { .. }, Value::Int(b)) => format_size(b),
            (Kind::Duration { .. }, Value::Int(ns)) => format_duration(ns),
            (_, Value::Int(n)) => n.to_string(),
            (_, Value::Float(f)) => f.to_string(),
            (_, Value::Bool(b)) => b.to_string(),
            (_, Value::Choice(c) | Value::Computed(c)) => c.to_string(),
        }
    }

    /// Parse one TOML value against the kind.
    pub fn parse(&self, raw: &toml::Value) -> Result<Value, ParamError> {
        let bad = || ParamError::Bad {
            key: self.name.to_string(),
            value: shown(raw),
            expected: self.kind.expected(),
        };
        let v = match (self.kind, raw) {
            (Kind::Size { min, max, pow2 }, _) => {
                let b = match raw {
                    toml::Value::Integer(i) if *i >= 0 => *i as u64,
                    toml::Value::Float(f) if f.is_finite() && *f >= 0.0 && *f < 1.8e19 => {
                        f.round() as u64
                    }
                    toml::Value::String(s) => parse_size(s).map_err(|_| bad())?,
                    _ => return Err(bad()),
                };
                if b < min || b > max || (pow2 && !b.is_power_of_two()) {
                    return Err(ParamError::Bad {
                        key: self.name.to_string(),
                        value: b.to_string(),
                        expected: self.kind.expected(),
                    });
                }
                Value::Int(b)
            }
            (Kind::Rate, _) => {
                let r = match raw {
                    toml::Value::Integer(i) if *i > 0 => *i as u64,
                    toml::Value::Float(f) if f.is_finite() && *f >= 1.0 && *f < 1e18 => {
                        f.round() as u64
                    }
                    toml::Value::String(s) => {
                        let t = s.trim();
                        parse_size(t.strip_suffix("/s").unwrap_or(t)).map_err(|_| bad())?
                    }
                    _ => return Err(bad()),
                };
                if r == 0 {
                    return Err(bad());
                }
                Value::Int(r)
            }
            (Kind::Duration { bare, positive }, _) => Some(Value::Int(match raw {
                toml::Value::Integer(i) if *i >= 0 => {
                    (*i as u64).checked_mul(bare).ok_or_else(bad)?
                }
                toml::Value::Float(f) if f.is_finite() && *f >= 0.0 => {
                    let ns = f * bare as f64;
                    if ns >= u64::MAX as f64 {
                        return Err(bad());
                    }
                    ns.round() as Ns
                }
                toml::Value::String(s) => parse_duration_ns(s, bare).map_err(|_| bad())?,
                _ => return Err(bad()),
            }))
            .filter(|v| !positive || *v != Value::Int(0))
            .ok_or_else(bad)?,
            (Kind::Count { min, max }, toml::Value::Integer(i))
                if *i >= 0 && (min..=max).contains(&(*i as u64)) =>
            {
                Value::Int(*i as u64)
            }
            (Kind::Fraction { min, max }, _) => {
                let f = match raw {
                    toml::Value::Float(f) => *f,
                    toml::Value::Integer(i) => *i as f64,
                    toml::Value::String(s) => s
                        .trim()
                        .strip_suffix('%')
                        .and_then(|t| t.trim().parse::<f64>().ok())
                        .map(|p| p / 100.0)
                        .ok_or_else(bad)?,
                    _ => return Err(bad()),
                };
                if !(f.is_finite() && (min..=max).contains(&f)) {
                    return Err(bad());
                }
                Value::Float(f)
            }
            (Kind::Choice(names), toml::Value::String(s)) => {
                Value::Choice(names.iter().find(|n| **n == s).ok_or_else(bad)?)
            }
            (Kind::Bool, toml::Value::Boolean(b)) => Value::Bool(*b),
            _ => return Err(bad()),
        };
        Ok(v)
    }
}

/// A bad key or value in a table of declared parameters. Each layer prefixes it with where
/// the table is (`stack.toml: scheduler.quantum: ...`, `device 'sda': ...`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("unknown key '{}'; accepted: {accepted}", quote(.key))]
    Unknown { key: String, accepted: String },
    #[error("{key}: only valid with {valid_with}")]
    OnlyFor { key: String, valid_with: String },
    #[error("{key} = {value}: {expected}")]
    Bad {
        key: String,
        value: String,
        expected: String,
    },
}

impl ParamError {
    /// The key at fault.
    pub fn key(&self) -> &str {
        match self {
            ParamError::Unknown { key, .. }
            | ParamError::OnlyFor { key, .. }
            | ParamError::Bad { key, .. } => key,
        }
    }
}

/// A TOML value as error messages quote it (strings as TOML writes them, control
/// characters escaped, long text cut).
fn shown(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{}\"", quote(s)),
        other => quote(&other.to_string()),
    }
}

/// The resolved values of a list of declared parameters, in declaration order.
#[derive(Clone, Debug, PartialEq)]
pub struct Values {
    items: Vec<(&'static ParamSpec, Value)>,
}

impl Values {
    /// Every parameter of `specs` at its default (a name declared twice is kept once: the
    /// first declaration).
    pub fn defaults(specs: impl IntoIterator<Item = &'static ParamSpec>) -> Values {
        let mut items: Vec<(&'static ParamSpec, Value)> = Vec::new();
        for s in specs {
            if !items.iter().any(|(o, _)| o.name == s.name) {
                items.push((s, s.default));
            }
        }
        Values { items }
    }

    /// Set the parameters of `table` (keys in `skip` belong to the enclosing table and are
    /// left alone). Keys are taken in sorted order, so the first error is deterministic.
    pub fn read(
        &mut self,
        table: &BTreeMap<String, toml::Value>,
        skip: &[&str],
    ) -> Result<(), ParamError> {
        for (key, raw) in table {
            if skip.contains(&key.as_str()) {
                continue;
            }
            let Some(slot) = self.items.iter_mut().find(|(s, _)| s.name == key) else {
                return Err(ParamError::Unknown {
                    key: key.clone(),
                    accepted: self.names().join(", "),
                });
            };
            slot.1 = slot.0.parse(raw)?;
        }
        Ok(())
    }

    /// Declared names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.items.iter().map(|(s, _)| s.name).collect()
    }

    /// (spec, value) pairs in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static ParamSpec, Value)> + '_ {
        self.items.iter().copied()
    }

    fn get(&self, name: &str) -> Value {
        self.items
            .iter()
            .find(|(s, _)| s.name == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("parameter '{name}' is not declared"))
    }

    /// A size, rate, duration (ns) or count whose declared default is
    /// [`Value::Computed`]: the value the table set, else `computed`.
    pub fn int_or(&self, name: &str, computed: u64) -> u64 {
        match self.get(name) {
            Value::Int(n) => n,
            Value::Computed(_) => computed,
            other => panic!("parameter '{name}' is {other:?}, not an integer"),
        }
    }

    /// A size, rate, duration (ns) or count.
    pub fn int(&self, name: &str) -> u64 {
        match self.get(name) {
            Value::Int(n) => n,
            other => panic!("parameter '{name}' is {other:?}, not an integer"),
        }
    }
    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            Value::Float(f) => f,
            other => panic!("parameter '{name}' is {other:?}, not a number"),
        }
    }
    pub fn flag(&self, name: &str) -> bool {
        match self.get(name) {
            Value::Bool(b) => b,
            other => panic!("parameter '{name}' is {other:?}, not a bool"),
        }
    }
    pub fn choice(&self, name: &str) -> &'static str {
        match self.get(name) {
            Value::Choice(c) => c,
            other => panic!("parameter '{name}' is {other:?}, not a choice"),
        }
    }
}

/// One registered scheduler, volume layout or device model: its name in the stack file, a
/// one-line description, its parameters, and what the layer needs to build it (`build`).
pub struct Entry<B: 'static> {
    pub name: &'static str,
    pub help: &'static str,
    pub params: &'static [ParamSpec],
    pub build: B,
}

impl<B> std::fmt::Debug for Entry<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The entry of `registry` named `name`, or the error line's tail listing the accepted names
/// (`'bfq' is not valid; accepted: none, mq-deadline, cfq, mcfq`).
pub fn lookup<B>(registry: &[&'static Entry<B>], name: &str) -> Result<&'static Entry<B>, String> {
    registry
        .iter()
        .find(|e| e.name == name)
        .copied()
        .ok_or_else(|| {
            format!(
                "'{}' is not valid; accepted: {}",
                quote(name),
                names(registry)
            )
        })
}

/// The registry's names, comma-separated.
pub fn names<B>(registry: &[&'static Entry<B>]) -> String {
    registry
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every parameter declared by some entry, once, in registry order.
pub fn union<B>(registry: &[&'static Entry<B>]) -> Values {
    Values::defaults(registry.iter().flat_map(|e| e.params.iter()))
}

/// Check that the keys of `table` (but `skip`) are parameters of `entry`: a key another entry
/// of the registry declares is refused naming those entries (`only valid with name = "cfq" or
/// "mcfq"`, with `selector` = `name`), any other key as unknown. Then read the table into
/// `values`.
pub fn read_for<B>(
    values: &mut Values,
    table: &BTreeMap<String, toml::Value>,
    skip: &[&str],
    entry: &Entry<B>,
    registry: &[&'static Entry<B>],
    selector: &str,
) -> Result<(), ParamError> {
    for key in table.keys() {
        if skip.contains(&key.as_str()) || entry.params.iter().any(|p| p.name == key) {
            continue;
        }
        let owners: Vec<String> = registry
            .iter()
            .filter(|e| e.params.iter().any(|p| p.name == key))
            .map(|e| format!("\"{}\"", e.name))
            .collect();
        if owners.is_empty() {
            let mut accepted: Vec<&str> = skip.to_vec();
            accepted.extend(union(registry).names());
            return Err(ParamError::Unknown {
                key: key.clone(),
                accepted: accepted.join(", "),
            });
        }
        let list = match owners.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => unreachable!("owners is not empty"),
        };
        return Err(ParamError::OnlyFor {
            key: key.clone(),
            valid_with: format!("{selector} = {list}"),
        });
    }
    values.read(table, skip)
}

/// `65536` -> `64k`, `1310720` -> `1280k`: the largest unit that divides the size, if it
/// leaves at most four digits; else bytes (`2000398934016`).
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(50, "p"), (40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            if bytes >> shift < 10_000 {
                return format!("{}{suffix}", bytes >> shift);
            }
            break;
        }
    }
    bytes.to_string()
}

/// `8500000` ns -> `"8.5ms"`, exact (what [`parse_duration_ns`] reads back).
pub fn format_ms(ns: Ns) -> String {
    let (whole, frac) = (ns / MS, ns % MS);
    if frac == 0 {
        format!("{whole}ms")
    } else {
        let f = format!("{frac:06}");
        format!("{whole}.{}ms", f.trim_end_matches('0'))
    }
}

/// A duration in its largest exact unit: `5s`, `500ms`, `8.5ms`, `50us`, `7ns`.
pub fn format_duration(ns: Ns) -> String {
    if ns >= SEC && ns.is_multiple_of(SEC) {
        format!("{}s", ns / SEC)
    } else if ns >= MS {
        format_ms(ns)
    } else if ns >= US && ns.is_multiple_of(US) {
        format!("{}us", ns / US)
    } else {
        format!("{ns}ns")
    }
}

/// One layer of the stack file for the help renderers.
pub struct Layer<'a> {
    /// The table and the key that selects an entry: `[scheduler]`, `name`; an empty
    /// selector: a table of parameters only (`[pdc]`), with no entries.
    pub table: &'static str,
    pub selector: &'static str,
    /// What the selector's default is (`mq-deadline`, or `required`); without a selector,
    /// what the table applies to.
    pub default: &'static str,
    pub entries: Vec<Described<'a>>,
    /// Keys the stack parser reads itself, valid whatever the selector names (`[[vm.disk]]
    /// read_ahead_kb`, `[vm.disk.filesystem] mount`): listed first.
    pub keys: &'a [KeyDoc],
    /// Parameters of the table itself, valid whatever the selector names (`[page_cache]`'s).
    pub params: &'a [ParamSpec],
}

/// A key of a table that is not a declared [`ParamSpec`] (a path, a value with a rule of its
/// own), described for help as its parser reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDoc {
    pub name: &'static str,
    pub help: &'static str,
    /// The accepted values, as the parser's error message states them.
    pub accepted: &'static str,
    pub default: &'static str,
}

/// An entry as the help shows it: name, description, parameters, and extra facts (a layout's
/// device count, a model's profiles).
pub struct Described<'a> {
    pub name: &'static str,
    pub help: &'static str,
    pub note: String,
    pub params: &'a [ParamSpec],
}

impl<'a> Described<'a> {
    pub fn new<B>(entry: &'a Entry<B>, note: String) -> Self {
        Described {
            name: entry.name,
            help: entry.help,
            note,
            params: entry.params,
        }
    }
}

/// A row of a layer's parameter table: key, the entries it is valid with (none: any), help,
/// accepted values, default.
struct Row<'a> {
    name: &'static str,
    owners: Vec<&'static str>,
    help: &'static str,
    accepted: String,
    default: String,
    spec: Option<&'a ParamSpec>,
}

/// Rows of a layer's parameter table: the table's own keys and parameters (no entry named:
/// valid with any), then the entries'; a parameter declared identically by several entries (a
/// `ParamSpec` shared by cfq and mcfq) makes one row naming them all.
fn param_rows<'a>(layer: &'a Layer) -> Vec<Row<'a>> {
    let spec_row = |p: &'a ParamSpec| Row {
        name: p.name,
        owners: Vec::new(),
        help: p.help,
        accepted: p.kind.accepted(),
        default: p.show(p.default),
        spec: Some(p),
    };
    let mut rows: Vec<Row> = layer
        .keys
        .iter()
        .map(|k| Row {
            name: k.name,
            owners: Vec::new(),
            help: k.help,
            accepted: k.accepted.to_string(),
            default: k.default.to_string(),
            spec: None,
        })
        .chain(layer.params.iter().map(spec_row))
        .collect();
    for e in &layer.entries {
        for p in e.params {
            match rows.iter_mut().find(|r| r.spec == Some(p)) {
                Some(row) => row.owners.push(e.name),
                None => rows.push(Row {
                    owners: vec![e.name],
                    ..spec_row(p)
                }),
            }
        }
    }
    rows
}

/// Plain-text help of the layers (`vmio help stack`).
pub fn render_text(layers: &[Layer]) -> String {
    let mut out = String::new();
    for layer in layers {
        if layer.selector.is_empty() {
            let _ = writeln!(out, "{}   ({})", layer.table, layer.default);
        } else {
            let _ = writeln!(
                out,
                "{} {} = {}   (default: {})",
                layer.table,
                layer.selector,
                layer
                    .entries
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(" | "),
                layer.default
            );
        }
        for e in &layer.entries {
            let _ = writeln!(out, "  {:<13} {}{}", e.name, e.help, paren(&e.note));
        }
        let rows = param_rows(layer);
        if !rows.is_empty() {
            let _ = writeln!(out, "  parameters:");
        }
        for r in rows {
            let _ = writeln!(
                out,
                "    {:<18} {}{} [{}; default {}]",
                r.name,
                if r.owners.is_empty() {
                    String::new()
                } else {
                    format!("{}: ", r.owners.join(", "))
                },
                r.help,
                r.accepted,
                r.default
            );
        }
        out.push('\n');
    }
    out
}

fn paren(note: &str) -> String {
    if note.is_empty() {
        String::new()
    } else {
        format!(" ({note})")
    }
}

/// Markdown tables of the layers (the README's, kept equal by a test).
pub fn render_markdown(layers: &[Layer]) -> String {
    let mut out = String::new();
    for layer in layers {
        if layer.selector.is_empty() {
            let _ = writeln!(out, "`{}` ({}):", layer.table, layer.default);
        } else {
            let _ = writeln!(
                out,
                "`{}` `{}` (default: {}):\n",
                layer.table, layer.selector, layer.default
            );
            let _ = writeln!(out, "| {} | meaning |\n|---|---|", layer.selector);
        }
        for e in &layer.entries {
            let _ = writeln!(out, "| `{}` | {}{} |", e.name, e.help, paren(&e.note));
        }
        let rows = param_rows(layer);
        if !rows.is_empty() {
            let _ = writeln!(
                out,
                "\n| key | valid with | meaning | accepted | default |\n|---|---|---|---|---|"
            );
        }
        for r in rows {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | `{}` |",
                r.name,
                if r.owners.is_empty() {
                    "any".to_string()
                } else {
                    r.owners
                        .iter()
                        .map(|o| format!("`{o}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                r.help,
                r.accepted.replace('|', "\\|"),
                r.default
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUANTUM: ParamSpec = ParamSpec {
        name: "quantum",
        kind: Kind::Count { min: 1, max: 64 },
        default: Value::Int(8),
        unit: "",
        help: "requests in flight",
    };
    const IDLE: ParamSpec = ParamSpec {
        name: "idle",
        kind: Kind::Duration {
            bare: SEC,
            positive: false,
        },
        default: Value::Int(8 * MS),
        unit: "ns",
        help: "idle wait",
    };
    const MODE: ParamSpec = ParamSpec {
        name: "mode",
        kind: Kind::Choice(&["fast", "slow"]),
        default: Value::Choice("fast"),
        unit: "",
        help: "mode",
    };
    static A: Entry<()> = Entry {
        name: "a",
        help: "first",
        params: &[QUANTUM, IDLE],
        build: (),
    };
    static B: Entry<()> = Entry {
        name: "b",
        help: "second",
        params: &[QUANTUM, MODE],
        build: (),
    };
    const REGISTRY: &[&Entry<()>] = &[&A, &B];

    fn table(src: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(src).unwrap()
    }

    #[test]
    fn values_take_their_defaults_and_the_table_overrides_them() {
        let mut v = Values::defaults(A.params);
        assert_eq!((v.int("quantum"), v.int("idle")), (8, 8 * MS));
        v.read(&table("quantum = 4\nidle = \"2ms\""), &[]).unwrap();
        assert_eq!((v.int("quantum"), v.int("idle")), (4, 2 * MS));
        v.read(&table("idle = 1"), &[]).unwrap();
        assert_eq!(v.int("idle"), SEC);
    }

    #[test]
    fn a_bad_value_names_the_key_the_value_and_the_accepted_form() {
        let mut v = Values::defaults(B.params);
        let e = v.read(&table("quantum = 65"), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "quantum = 65: must be an integer from 1 to 64"
        );
        let e = v.read(&table("mode = \"medium\""), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mode = \"medium\": must be one of fast, slow"
        );
        let e = v.read(&table("quantom = 1"), &["name"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown key 'quantom'; accepted: quantum, mode"
        );
    }

    #[test]
    fn a_key_of_another_entry_names_the_entries_that_accept_it() {
        let mut v = union(REGISTRY);
        assert_eq!(v.names(), ["quantum", "idle", "mode"]);
        let e = read_for(
            &mut v,
            &table("mode = \"slow\""),
            &["name"],
            &A,
            REGISTRY,
            "name",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "mode: only valid with name = \"b\"");
        let e = read_for(&mut v, &table("x = 1"), &["name"], &A, REGISTRY, "name").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown key 'x'; accepted: name, quantum, idle, mode"
        );
        read_for(
            &mut v,
            &table("name = \"b\"\nmode = \"slow\""),
            &["name"],
            &B,
            REGISTRY,
            "name",
        )
        .unwrap();
        assert_eq!(v.choice("mode"), "slow");
        assert_eq!(
            lookup(REGISTRY, "c").err().unwrap(),
            "'c' is not valid; accepted: a, b"
        );
    }

    #[test]
    fn sizes_rates_and_fractions_accept_their_text_forms_and_check_ranges() {
        let size = ParamSpec {
            kind: Kind::Size {
                min: 4096,
                max: u64::MAX,
                pow2: true,
            },
            ..QUANTUM
        };
        let p = |s: &ParamSpec, src: &str| s.parse(&table(&format!("x = {src}"))["x"]);
        assert_eq!(p(&size, "\"64k\""), Ok(Value::Int(64 << 10)));
        assert_eq!(
            p(&size, "\"48k\"").unwrap_err().to_string(),
            "quantum = 49152: must be a size in bytes (an integer, or a string like \"256m\", \"2t\"): a power of two >= 4k"
        );
        let rate = ParamSpec {
            kind: Kind::Rate,
            ..QUANTUM
        };
        assert_eq!(p(&rate, "\"220m/s\""), Ok(Value::Int(220 << 20)));
        assert!(p(&rate, "0").is_err());
        let frac = ParamSpec {
            kind: Kind::Fraction {
                min: 0.001,
                max: 10.0,
            },
            ..QUANTUM
        };
        assert_eq!(p(&frac, "\"7%\""), Ok(Value::Float(0.07)));
        assert!(p(&frac, "11").is_err());
    }

    #[test]
    fn shared_parameters_make_one_help_row_naming_every_entry() {
        let layer = Layer {
            table: "[t]",
            selector: "name",
            default: "a",
            entries: REGISTRY
                .iter()
                .map(|e| Described::new(e, String::new()))
                .collect(),
            keys: &[],
            params: &[],
        };
        let md = render_markdown(&[layer]);
        assert!(
            md.contains("| `quantum` | `a`, `b` | requests in flight | 1..=64 | `8` |"),
            "{md}"
        );
        assert!(md.contains("| `idle` | `a` | idle wait | duration (bare number: s) | `8ms` |"));
    }

    /// A table `[t]` selecting entry `a`, with its own keys and parameters.
    fn layer_of_a<'a>(keys: &'a [KeyDoc], params: &'a [ParamSpec]) -> Layer<'a> {
        Layer {
            table: "[t]",
            selector: "name",
            default: "a",
            entries: vec![Described::new(&A, String::new())],
            keys,
            params,
        }
    }

    #[test]
    fn a_tables_own_parameters_come_first_valid_with_any_entry_and_a_computed_default_shows_its_text(
    ) {
        static OWN: &[ParamSpec] = &[ParamSpec {
            name: "memory",
            kind: Kind::SIZE,
            default: Value::Computed("half of [host] memory"),
            unit: "bytes",
            help: "cache size",
        }];
        let layer = || layer_of_a(&[], OWN);
        let md = render_markdown(&[layer()]);
        assert!(
            md.contains(
                "| `memory` | any | cache size | size | `half of [host] memory` |\n| `quantum` | `a` |"
            ),
            "{md}"
        );
        let text = render_text(&[layer()]);
        assert!(
            text.contains(
                "    memory             cache size [size; default half of [host] memory]\n    quantum            a: "
            ),
            "{text}"
        );
        let mut v = Values::defaults(OWN);
        assert_eq!(v.int_or("memory", 7), 7);
        v.read(&table("memory = \"1k\""), &[]).unwrap();
        assert_eq!(v.int_or("memory", 7), 1024);
    }

    #[test]
    fn a_tables_undeclared_keys_come_before_its_parameters_with_the_parsers_accepted_text() {
        static KEYS: &[KeyDoc] = &[KeyDoc {
            name: "mount",
            help: "where it is mounted",
            accepted: "an absolute path | none",
            default: "/mnt/<disk>",
        }];
        let layer = || layer_of_a(KEYS, &[]);
        let md = render_markdown(&[layer()]);
        assert!(
            md.contains(
                "| `mount` | any | where it is mounted | an absolute path \\| none | `/mnt/<disk>` |\n| `quantum` | `a` |"
            ),
            "{md}"
        );
        let text = render_text(&[layer()]);
        assert!(
            text.contains(
                "    mount              where it is mounted [an absolute path | none; default /mnt/<disk>]\n    quantum"
            ),
            "{text}"
        );
    }

    #[test]
    fn formats_are_exact_and_read_back() {
        assert_eq!(format_size(1280 << 10), "1280k");
        assert_eq!(format_size(4097), "4097");
        assert_eq!(format_size(2_000_398_934_016), "2000398934016");
        assert_eq!(format_duration(5 * SEC), "5s");
        assert_eq!(format_duration(8_500_000), "8.5ms");
        assert_eq!(format_duration(50 * US), "50us");
        assert_eq!(format_ms(1), "0.000001ms");
        for ns in [1, 50_000, 8_333_333, 16 * MS, 5 * SEC] {
            assert_eq!(parse_duration_ns(&format_duration(ns), MS).unwrap(), ns);
            assert_eq!(parse_duration_ns(&format_ms(ns), MS).unwrap(), ns);
        }
    }
}
