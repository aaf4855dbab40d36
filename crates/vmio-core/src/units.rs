//! Sizes and durations written the way fio and QEMU users write them.
//!
//! The one size parser of vmio: stack and job files, and Python's `vmio.parse_size` (the
//! command line, studies, reports) through `vmio._native.parse_size`.
//!
//! Sizes of stack files and the command line are binary: `4k`, `4K`, `4KB`, `4KiB` are all
//! 4096 bytes; suffixes k, m, g, t, p (optionally followed by `b`, `ib`, `iB`, `B`); a bare
//! number is bytes. Job files read sizes as fio does ([`parse_size_kb_base`]: under fio's
//! default `kb_base=1024`, `4KiB` is 4000 bytes).
//! Durations follow fio's `runtime`: a bare number is in `default_unit`; suffixes `ns`, `us`,
//! `ms`, `s`, `m`, `h`, `d`.

use crate::Ns;
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UnitError {
    #[error("'{0}' is not a size; expected a number with an optional suffix k, m, g, t or p (fio style: 4k, 64KiB, 1g)")]
    BadSize(String),
    #[error("'{0}' is not a duration; expected a number with an optional suffix ns, us, ms, s, m, h or d (fio style: 500ms, 30s, 2m)")]
    BadDuration(String),
    #[error("'{text}' is not a {what} vmio can hold; accepted: at most 2^64-1 (16 EiB as a size, about 584 years as a duration)")]
    Overflow { text: String, what: &'static str },
}

/// Longest user text quoted in an error message, in characters (before escaping).
pub const MAX_QUOTED: usize = 80;

/// User text as quoted in error messages: at most [`MAX_QUOTED`] characters, then `...`;
/// control characters (NUL, newlines, tabs, escape sequences) and other non-printables are
/// written as Rust escapes (`\0`, `\n`, `\u{1b}`) so that an error stays on one line.
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == MAX_QUOTED {
            out.push_str("...");
            break;
        }
        if c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{feff}'
            )
        {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

fn split_number(text: &str) -> (&str, &str) {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    (&t[..end], t[end..].trim())
}

/// Parse a size in bytes (`4k`, `64KiB`, `1g`, `512`).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    parse_size_with(text, |pow, _| 1u64 << (10 * pow))
}

/// Parse a size as a fio job file means it under fio's `kb_base` (fio's `parse.c`,
/// `__get_mult_bytes`): with `kb_base=1024` (fio's default) `k`/`kb`/`K`/`KB` are 1024 and the
/// IEC spellings `KiB`, `MiB`... are read "inverted" as powers of 1000; with `kb_base=1000`
/// the SI spellings are powers of 1000 and the IEC ones powers of 1024. So under the default
/// `4KiB` is 4000 bytes and `4k` 4096, exactly as fio 3.33 reads a job file.
///
/// ```text
/// suffix ki/mi/gi/ti/pi + b -> (2024 - kb_base)^pow   (the other base)
/// suffix k/m/g/t/p [+ b]    -> kb_base^pow
/// ```
pub fn parse_size_kb_base(text: &str, kb_base: u64) -> Result<u64, UnitError> {
    parse_size_with(text, |pow, iec| {
        let base = if iec { 2024 - kb_base } else { kb_base };
        base.pow(pow)
    })
}

/// The one size reader: `mult(pow, iec)` gives the multiplier of the `pow`-th prefix (k = 1),
/// `iec` when it is spelled `KiB`-style.
fn parse_size_with(text: &str, mult: impl Fn(u32, bool) -> u64) -> Result<u64, UnitError> {
    let bad = || UnitError::BadSize(quote(text));
    let overflow = || UnitError::Overflow {
        text: quote(text),
        what: "size",
    };
    let (num, suffix) = split_number(text);
    if num.is_empty() {
        return Err(bad());
    }
    let lower = suffix.to_ascii_lowercase();
    let (prefix, iec) = match lower.strip_suffix("ib") {
        Some(p) if p.len() == 1 => (p, true),
        _ => (lower.strip_suffix('b').unwrap_or(&lower), false),
    };
    let pow = match prefix {
        "" if !iec => 0,
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        _ => return Err(bad()),
    };
    let mult = mult(pow, iec);
    if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| bad())?;
        let bytes = v * mult as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(overflow());
        }
        return Ok(bytes.round() as u64);
    }
    // Digits only here, so the one way to fail is a number past u64.
    let v: u64 = num.parse().map_err(|_| overflow())?;
    v.checked_mul(mult).ok_or_else(overflow)
}

/// Parse a duration in nanoseconds; a bare number is in `default_unit_ns` (fio: seconds for
/// `runtime`/`ramp_time`).
pub fn parse_duration_ns(text: &str, default_unit_ns: Ns) -> Result<Ns, UnitError> {
    let bad = || UnitError::BadDuration(quote(text));
    let (num, suffix) = split_number(text);
    if num.is_empty() {
        return Err(bad());
    }
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" => default_unit_ns,
        "ns" => 1,
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = v * mult as f64;
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(UnitError::Overflow {
            text: quote(text),
            what: "duration",
        });
    }
    Ok(ns.round() as u64)
}

/// How fast one core fills a buffer with zeroes: a memset on a DDR4 server, ~10 GB/s (an
/// estimate; the simulator's RAM device copies at the same rate, crates/vmio-sim/src/device/
/// ram.rs). The kernel's zeroing of a read's holes ([`crate::hostfs`]) and QEMU's of an
/// unallocated qcow2 cluster ([`crate::image::qcow2`]) both run at it.
pub const MEMSET_BYTES_PER_SEC: u64 = 10_000_000_000;

/// Time to move `bytes` at `bytes_per_sec`, in nanoseconds (rounded up, at least 0).
#[inline]
pub fn transfer_ns(bytes: u64, bytes_per_sec: u64) -> Ns {
    if bytes_per_sec == 0 {
        return 0;
    }
    ((bytes as u128 * 1_000_000_000u128).div_ceil(bytes_per_sec as u128)) as Ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_fio_binary_base() {
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("8m").unwrap(), 8 << 20);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
    }

    #[test]
    fn malformed_sizes_are_rejected_with_the_text() {
        let e = parse_size("12q").unwrap_err();
        assert!(e.to_string().contains("'12q'"));
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(matches!(
            parse_size("99999999999p"),
            Err(UnitError::Overflow { .. })
        ));
    }

    #[test]
    fn durations_default_to_the_given_unit() {
        assert_eq!(
            parse_duration_ns("30", 1_000_000_000).unwrap(),
            30_000_000_000
        );
        assert_eq!(
            parse_duration_ns("500ms", 1_000_000_000).unwrap(),
            500_000_000
        );
        assert_eq!(
            parse_duration_ns("2m", 1_000_000_000).unwrap(),
            120_000_000_000
        );
        assert!(parse_duration_ns("3 weeks", 1).is_err());
    }

    #[test]
    fn sizes_and_durations_past_u64_are_clear_overflow_errors() {
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(UnitError::Overflow { .. })
        ));
        assert!(matches!(
            parse_size("16384p"),
            Err(UnitError::Overflow { .. })
        ));
        assert_eq!(parse_size("16383p").unwrap(), 16383 << 50);
        assert!(matches!(parse_size("1e999k"), Err(UnitError::BadSize(_))));
        let huge = parse_size(&format!("{}.5k", "9".repeat(400))).unwrap_err();
        assert!(matches!(huge, UnitError::Overflow { what: "size", .. }));
        assert!(
            huge.to_string().contains("is not a size vmio can hold"),
            "{huge}"
        );
        let e = parse_duration_ns(&"9".repeat(400), 1_000_000_000).unwrap_err();
        assert!(matches!(
            e,
            UnitError::Overflow {
                what: "duration",
                ..
            }
        ));
        let shown = e.to_string();
        assert!(shown.len() < 300 && !shown.contains('\n'), "{shown}");
    }

    #[test]
    fn quoted_text_is_short_and_one_line() {
        assert_eq!(quote("4k"), "4k");
        assert_eq!(quote("a\0b\nc\u{1b}é"), "a\\0b\\nc\\u{1b}é");
        let q = quote(&"x".repeat(1000));
        assert_eq!(q.len(), MAX_QUOTED + 3);
        assert!(q.ends_with("..."));
    }

    #[test]
    fn transfer_time_rounds_up() {
        assert_eq!(transfer_ns(1_000_000, 1_000_000_000), 1_000_000);
        assert_eq!(transfer_ns(1, 3), 333_333_334);
    }
}
