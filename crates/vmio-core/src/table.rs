//! A stack-file table as its layer owns it: the contract between [`crate::stack`] and the
//! layers, as an nbdkit filter owns its keys (nbdkit-filter(3): `.config` reads the filter's
//! own `key=value`s, the server only assembles the filters).
//!
//! Each layer's module declares its part of the stack file: a raw struct serde reads (or a
//! map read against the layer's [`crate::params::ParamSpec`]s), a spec (the validated,
//! defaulted form the engines read), and the checks that concern only it, as one
//! [`Table`] implementation; its help is its declarations ([`crate::params::ParamSpec`],
//! [`crate::params::KeyDoc`], its registry), which `vmio help stack` renders. A table's
//! error is a [`FieldError`]: the field's path from the file's root and one line listing the
//! accepted values; the stack adds the file's name.
//!
//! ```text
//! layer module:  Raw (serde) --Table::from_raw(raw, field, context)--> Spec | FieldError
//! stack:         reads the raw file, calls each table's from_raw once (its registration),
//!                resolves the references between tables, adds the file to errors
//! ```
//!
//! Data flows one way: the stack names the layers, a layer never names the stack.

use crate::params::{ParamError, ParamSpec, Values};
use crate::units::parse_size;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// A bad field of a stack table: its path from the file's root (`vm[0].disk[1].cache`,
/// `scheduler.quantum`) and one message naming the accepted values.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A bad key or value of the table at `table` (`scheduler`, `volume[0]`), as
    /// [`crate::params::Values::read`] reports it.
    pub fn param(table: &str, e: ParamError) -> Self {
        let field = format!("{table}.{}", e.key());
        let message = match e {
            ParamError::Unknown { accepted, .. } => format!("unknown key; accepted: {accepted}"),
            ParamError::OnlyFor { valid_with, .. } => format!("only valid with {valid_with}"),
            ParamError::Bad {
                value, expected, ..
            } => format!("{value}: {expected}"),
        };
        FieldError::new(field, message)
    }
}

/// A table whose every key is one of `params` (`[pdc]`, `[nbd]`): the parameters at their
/// defaults, then each key of `raw` read against its spec; a bad one is an error of `table`.
pub fn param_table(
    raw: &BTreeMap<String, toml::Value>,
    table: &str,
    params: &'static [ParamSpec],
) -> Result<Values, FieldError> {
    let mut v = Values::defaults(params);
    v.read(raw, &[]).map_err(|e| FieldError::param(table, e))?;
    Ok(v)
}

/// A size written as a string ("64k") or an integer (bytes).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum SizeValue {
    Int(u64),
    Text(String),
}

impl SizeValue {
    /// The size in bytes; a text that is no size is an error of `field`.
    pub fn bytes(&self, field: &str) -> Result<u64, FieldError> {
        match self {
            SizeValue::Int(n) => Ok(*n),
            SizeValue::Text(t) => parse_size(t).map_err(|e| FieldError::new(field, e.to_string())),
        }
    }
}

/// A layer's table of the stack file.
pub trait Table: Sized {
    /// The table's key in its enclosing table (`page_cache` of `[page_cache]` and
    /// `[vm.page_cache]`, `filesystem` of `[vm.disk.filesystem]`).
    const KEY: &'static str;
    /// What serde reads (a struct with `deny_unknown_fields`, or the map of keys read against
    /// the layer's parameters).
    type Raw;
    /// What the table's checks need from the tables read before it (the host's memory, the
    /// VM's, the disk's name): plain values, never the stack.
    type Context<'a>;
    /// The validated, defaulted table; `field` is its path in the file (`page_cache`,
    /// `vm[0].page_cache`), for errors.
    fn from_raw(raw: &Self::Raw, field: &str, cx: Self::Context<'_>) -> Result<Self, FieldError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheMemory, PageCacheSpec};
    use crate::sched::SchedulerSpec;

    fn map(text: &str) -> std::collections::BTreeMap<String, toml::Value> {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_layer_reads_its_table_alone_and_names_the_field_it_was_given() {
        let s = SchedulerSpec::from_raw(&map("name = \"none\""), SchedulerSpec::KEY, ()).unwrap();
        assert_eq!(s.name(), "none");
        let e = SchedulerSpec::from_raw(&map("name = \"cfq\"\nbogus = 1"), "x.scheduler", ())
            .unwrap_err();
        assert_eq!(e.field, "x.scheduler.bogus");
        assert!(e.message.starts_with("unknown key; accepted: "), "{e}");
    }

    #[test]
    fn a_table_checks_what_its_context_gives_it() {
        let cx = CacheMemory {
            default_bytes: 1 << 20,
            limit_bytes: 2 << 20,
            limit_field: "vm[0].memory",
        };
        let spec = PageCacheSpec::from_raw(&map(""), "vm[0].page_cache", cx).unwrap();
        assert_eq!(spec.memory_bytes, 1 << 20);
        let e =
            PageCacheSpec::from_raw(&map("memory = \"4m\""), "vm[0].page_cache", cx).unwrap_err();
        assert_eq!(
            e.to_string(),
            "vm[0].page_cache.memory: 4194304 bytes exceeds vm[0].memory (2097152 bytes)"
        );
    }

    #[test]
    fn a_size_is_an_integer_of_bytes_or_a_text_and_a_bad_text_names_the_field() {
        assert_eq!(SizeValue::Int(4096).bytes("f"), Ok(4096));
        assert_eq!(SizeValue::Text("64k".into()).bytes("f"), Ok(64 << 10));
        assert_eq!(
            SizeValue::Text("lots".into())
                .bytes("a.size")
                .unwrap_err()
                .field,
            "a.size"
        );
    }
}
