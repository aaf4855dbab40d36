//! Fuzz targets for vmio-core's text parsers, as a short, bounded, deterministic
//! pass that runs with the ordinary test command:
//!
//! ```text
//! cargo test -p vmio-core --test fuzz_parsers -- --nocapture
//! ```
//!
//! Targets (one `#[test]` each):
//!
//! * **stack** — [`Stack::from_toml`] on the shipped `python/vmio/studies/**/stack.toml`
//!   files, mutated (a value or a whole line replaced by a huge integer of 20 or 5000 digits,
//!   0, -1, a NUL, a 100k-character string, unicode, a value of the wrong type such as
//!   `vm = 5`; lines deleted, duplicated, swapped or inserted; the text truncated at a random
//!   byte), and on arbitrary and TOML-shaped strings. A stack that parses is then given to
//!   [`Stack::resolve_disk_sizes`] with plausible volume sizes.
//! * **fio job** — [`parse_job_file`] on the shipped `python/vmio/studies/**/*.fio` files,
//!   mutated the same way (with `numjobs=`, `bs=`, `size=`, `runtime=`, `rw=`, `bssplit=`, ...
//!   given hostile values), and on arbitrary text. Every job of a file that parses goes
//!   through [`check_ends`], [`TraceFormat::parse`] of its `iolog_format` and
//!   [`Generator::new`] on a disk of a plausible size, and draws a few requests.
//! * **trace** — [`parse_trace`] in every format (fio iolog v2/v3, MSR-Cambridge CSV,
//!   UMass/SPC CSV, blkparse text) and with [`TraceFormat::detect`], on lines taken from the
//!   shipped `python/vmio/studies/mcfq/traces/*` and from samples of each format, mutated
//!   field by field, mixed with arbitrary lines. A trace that parses is replayed
//!   ([`Replay::try_new`], [`Replay::new`]) onto hostile regions, time scales and loop counts.
//!
//! Property of every target: nothing panics, and every error's `to_string()` is one line (no
//! `'\n'`) of at most [`MAX_ERROR_CHARS`] characters. Each test prints one summary line
//! (`fuzz stack: 5000 cases, 600 ok, 4400 clean errors, 0 known-bug long messages {}, 0 other`) and fails listing the
//! first offending inputs if "other" is not 0.
//!
//! The pass is reproducible: a fixed ChaCha seed, no failure persistence, no shrinking (the
//! strategies are drawn by hand from one `TestRunner`). The case counts keep the whole file
//! well under 30 s in a debug build. For a longer pass set `VMIO_FUZZ_CASES` (cases per
//! target) and, to explore other inputs, `VMIO_FUZZ_SEED` (any u64):
//!
//! ```text
//! VMIO_FUZZ_CASES=100000 VMIO_FUZZ_SEED=42 cargo test --release -p vmio-core \
//!     --test fuzz_parsers -- --nocapture
//! ```
//!
//! Inputs that once broke the property (five kinds of over-long message: `bs=`/`bssplit=`
//! reasons, trace format names, subnormal time scales, trace fields) are kept below as
//! ordinary regression tests.

use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use vmio_core::fio::parse_job_file;
use vmio_core::stack::Stack;
use vmio_core::workload::fio_job::check_ends;
use vmio_core::workload::{parse_trace, Generator, Replay, Step, TraceFormat, Workload};

/// Longest acceptable error message, in characters.
const MAX_ERROR_CHARS: usize = 400;

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

/// What one case did.
enum Outcome {
    Ok,
    CleanError,
    /// An error message that is not one line of at most MAX_ERROR_CHARS (the full message).
    LongMessage(String),
    /// A broken property (a panic, or an error message that is not one short line).
    Other(String),
}

/// Check an error message; `CleanError` if it is one line of at most MAX_ERROR_CHARS.
fn error_outcome(message: String) -> Outcome {
    let chars = message.chars().count();
    if message.contains('\n') || chars > MAX_ERROR_CHARS {
        Outcome::LongMessage(message)
    } else {
        Outcome::CleanError
    }
}

/// Combine outcomes of the steps of one case: the first `Other` wins, then any clean error.
fn worst(a: Outcome, b: Outcome) -> Outcome {
    match (a, b) {
        (Outcome::Other(m), _) | (_, Outcome::Other(m)) => Outcome::Other(m),
        (Outcome::LongMessage(m), _) | (_, Outcome::LongMessage(m)) => Outcome::LongMessage(m),
        (Outcome::CleanError, _) | (_, Outcome::CleanError) => Outcome::CleanError,
        _ => Outcome::Ok,
    }
}

/// A later step's error (after the parser accepted the input): checked for its message only,
/// so that "ok" counts inputs the parser accepted.
fn downstream(message: String) -> Outcome {
    match error_outcome(message) {
        Outcome::CleanError => Outcome::Ok,
        o => o,
    }
}

fn shorten(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        text.to_string()
    } else {
        let head: String = text.chars().take(max_chars).collect();
        format!("{head}... ({total} chars in all)")
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Cases per target: `VMIO_FUZZ_CASES` or the default.
fn cases(default: u32) -> u32 {
    env_u64("VMIO_FUZZ_CASES").map_or(default, |n| n.min(u64::from(u32::MAX)) as u32)
}

/// A runner with a fixed ChaCha seed (per target, so targets are independent).
fn runner(target: &str, cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut seed = [7u8; 32];
    if let Some(s) = env_u64("VMIO_FUZZ_SEED") {
        seed[..8].copy_from_slice(&s.to_le_bytes());
    }
    for (i, b) in target.bytes().enumerate() {
        seed[8 + i % 24] ^= b;
    }
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

/// A known, already reported violation of the message property: `Some(tag)` if `message`
/// matches one. Counted as "known" (not "other"); none is known today ([`no_known_bugs`]).
type Known = fn(&str) -> Option<&'static str>;

/// Draw `cases` values of `strategy` and run `target` on each; print the summary line and
/// fail with the first offending inputs if any case broke the property (panics, and error
/// messages that are not one short line unless `known` recognizes them).
fn fuzz<S>(
    name: &str,
    default_cases: u32,
    strategy: S,
    known: Known,
    target: impl Fn(&S::Value) -> Outcome,
) where
    S: Strategy,
    S::Value: Debug,
{
    let n = cases(default_cases);
    let mut runner = runner(name, n);
    let (mut ok, mut clean, mut other) = (0u64, 0u64, 0u64);
    let mut known_seen: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut failures = Vec::new();
    let start = std::time::Instant::now();
    for case in 0..n {
        let value = strategy
            .new_tree(&mut runner)
            .expect("strategies here never reject")
            .current();
        let outcome = catch_unwind(AssertUnwindSafe(|| target(&value))).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(non-string panic payload)".into());
            Outcome::Other(format!("panic: {msg}"))
        });
        let outcome = match outcome {
            Outcome::LongMessage(m) => match known(&m) {
                Some(tag) => {
                    *known_seen.entry(tag).or_default() += 1;
                    continue;
                }
                None => Outcome::Other(format!(
                    "error message is not one line of <= {MAX_ERROR_CHARS} chars ({} chars, {} lines): {}",
                    m.chars().count(),
                    m.lines().count(),
                    shorten(&format!("{m:?}"), 300)
                )),
            },
            o => o,
        };
        match outcome {
            Outcome::LongMessage(_) => unreachable!(),
            Outcome::Ok => ok += 1,
            Outcome::CleanError => clean += 1,
            Outcome::Other(why) => {
                other += 1;
                if failures.len() < 40 {
                    failures.push(format!(
                        "case {case}: {why}\n    input: {}",
                        shorten(&format!("{value:?}"), 300)
                    ));
                }
            }
        }
    }
    let known_total: u64 = known_seen.values().sum();
    let line = format!(
        "fuzz {name}: {n} cases, {ok} ok, {clean} clean errors, {known_total} known-bug long messages {known_seen:?}, {other} other ({:.1} s)",
        start.elapsed().as_secs_f64()
    );
    println!("{line}");
    eprintln!("{line}");
    assert!(
        failures.is_empty(),
        "{line}\nfirst failures:\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Seed files and mutations
// ---------------------------------------------------------------------------------------

fn studies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/vmio/studies")
}

/// Files under `dir` (recursively, sorted) whose name satisfies `keep`.
fn files_under(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().and_then(|n| n.to_str()).is_some_and(keep) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn read_seeds(keep: &dyn Fn(&str) -> bool, what: &str) -> Vec<String> {
    let files = files_under(&studies_dir(), keep);
    assert!(
        !files.is_empty(),
        "no {what} files under {}",
        studies_dir().display()
    );
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// Values that have broken parsers before: sizes out of range, signs, NUL, huge texts,
/// unicode, separators and the suffixes of vmio's units.
fn hostile_atoms() -> Vec<String> {
    let mut v: Vec<String> = [
        "0",
        "-1",
        "-0",
        "+5",
        "5",
        "1",
        "true",
        "false",
        "99999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
        "4294967295",
        "4294967296",
        "2147483648",
        "1e309",
        "1e-9",
        "-1e3",
        "nan",
        "inf",
        "-inf",
        "0.5",
        "0x10",
        "1_000",
        "",
        " ",
        "\0",
        "a\0b",
        "\r",
        "\t",
        "\u{feff}",
        "\u{2028}",
        "ü日本語🦀\u{202e}x",
        "=",
        "==",
        "[",
        "]",
        "[]",
        "{}",
        "\"",
        "'",
        "#",
        ";",
        "\\",
        ",",
        ",,",
        "-",
        "/",
        ":",
        "%",
        "50%",
        "101",
        "4k-",
        "-4k",
        "4k,64k",
        "4k-64k",
        "64k-4k",
        "4k/50:64k/50",
        "4k/:",
        "4k/101",
        "0/100",
        "4k/0",
        "k",
        "1kk",
        ".k",
        "1..2",
        "16e",
        "16384p",
        "1.5g",
        "99999999999999999999k",
        "18446744073709551615g",
        "17179869184g",
        "1000000000000d",
        "99999999999h",
        "0.0000000001ns",
        "  7  ",
        "read",
        "randrw",
        "trim",
        "spc",
        "msr",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("9".repeat(5000));
    v.push("1".repeat(20));
    v.push("x".repeat(100_000));
    v.push("é".repeat(300));
    v
}

/// Unit suffixes for number+suffix values.
const SUFFIXES: &[&str] = &[
    "", "k", "K", "m", "g", "t", "p", "e", "KiB", "kb", "MiB", "gib", "b", "%", "s", "ms", "us",
    "ns", "m", "h", "d", "x", " ",
];

/// Values the parsers accept (so that mutated files still parse, now and then).
const PLAUSIBLE: &[&str] = &[
    "1",
    "4",
    "0",
    "30",
    "50",
    "100",
    "4k",
    "64k",
    "1m",
    "1g",
    "30g",
    "4k-64k",
    "4k,64k",
    "4k/50:64k/50",
    "30s",
    "500ms",
    "2m",
    "read",
    "write",
    "randread",
    "randwrite",
    "rw",
    "randrw",
    "libaio",
    "spc",
    "1000",
];

/// A hostile value: an atom, a number with a unit, a random number, or random text.
fn hostile_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => select(PLAUSIBLE).prop_map(str::to_string),
        6 => select(hostile_atoms()),
        2 => (any::<u64>(), select(SUFFIXES)).prop_map(|(n, s)| format!("{n}{s}")),
        2 => (0u64..100_000, select(SUFFIXES)).prop_map(|(n, s)| format!("{n}{s}")),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<f64>().prop_map(|n| n.to_string()),
        2 => "\\PC{0,24}",
        1 => any::<String>(),
    ]
    .boxed()
}

/// `text` as a TOML basic string (so NULs and huge texts get past the TOML parser).
fn toml_quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A hostile TOML value: raw (often a TOML syntax or type error) or quoted (reaches the
/// stack's own validation).
fn hostile_toml_value() -> BoxedStrategy<String> {
    prop_oneof![
        1 => hostile_value(),
        1 => hostile_value().prop_map(|v| toml_quote(&v)),
        1 => prop::collection::vec(hostile_value().prop_map(|v| toml_quote(&v)), 0..4)
            .prop_map(|v| format!("[{}]", v.join(", "))),
    ]
    .boxed()
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Keep a line's `key =`, replace what follows.
    ReplaceValue(Index, String),
    ReplaceLine(Index, String),
    InsertLine(Index, String),
    DeleteLine(Index),
    DuplicateLine(Index),
    SwapLines(Index, Index),
    /// Cut the text at a byte (possibly inside a UTF-8 sequence; the rest is decoded lossily).
    Truncate(Index),
}

fn mutation(value: BoxedStrategy<String>, line: BoxedStrategy<String>) -> BoxedStrategy<Mutation> {
    prop_oneof![
        6 => (any::<Index>(), value).prop_map(|(i, v)| Mutation::ReplaceValue(i, v)),
        2 => (any::<Index>(), line.clone()).prop_map(|(i, l)| Mutation::ReplaceLine(i, l)),
        3 => (any::<Index>(), line).prop_map(|(i, l)| Mutation::InsertLine(i, l)),
        2 => any::<Index>().prop_map(Mutation::DeleteLine),
        1 => any::<Index>().prop_map(Mutation::DuplicateLine),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
    .boxed()
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_string();
    for m in mutations {
        if let Mutation::Truncate(i) = m {
            let mut bytes = text.into_bytes();
            bytes.truncate(i.index(bytes.len() + 1));
            text = String::from_utf8_lossy(&bytes).into_owned();
            continue;
        }
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let n = lines.len();
        match m {
            Mutation::ReplaceValue(i, v) => {
                // Prefer a `key = value` line: scan from the drawn index.
                let start = i.index(n);
                let at = (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&k| lines[k].contains('='))
                    .unwrap_or(start);
                let line = &lines[at];
                lines[at] = match line.find('=') {
                    Some(eq) => format!("{}{v}", &line[..=eq]),
                    None => v.clone(),
                };
            }
            Mutation::ReplaceLine(i, l) => lines[i.index(n)] = l.clone(),
            Mutation::InsertLine(i, l) => lines.insert(i.index(n + 1), l.clone()),
            Mutation::DeleteLine(i) => {
                lines.remove(i.index(n));
            }
            Mutation::DuplicateLine(i) => {
                let k = i.index(n);
                lines.insert(k, lines[k].clone());
            }
            Mutation::SwapLines(a, b) => lines.swap(a.index(n), b.index(n)),
            Mutation::Truncate(_) => unreachable!(),
        }
        text = lines.join("\n");
    }
    text
}

/// A text case: a seed file with mutations, or generated text.
#[derive(Clone)]
struct TextCase {
    how: String,
    text: String,
}

impl Debug for TextCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {:?}", self.how, self.text)
    }
}

fn mutated_seeds(
    seeds: Vec<String>,
    value: BoxedStrategy<String>,
    line: BoxedStrategy<String>,
) -> BoxedStrategy<TextCase> {
    let names: Vec<usize> = (0..seeds.len()).collect();
    (
        select(names),
        prop_oneof![3 => prop::collection::vec(mutation(value.clone(), line.clone()), 1..2),
                    1 => prop::collection::vec(mutation(value, line), 2..5)],
    )
        .prop_map(move |(i, muts)| TextCase {
            how: format!("seed {i} + {muts:?}"),
            text: apply(&seeds[i], &muts),
        })
        .boxed()
}

fn generated(
    text: impl Strategy<Value = String> + 'static,
    how: &'static str,
) -> BoxedStrategy<TextCase> {
    text.prop_map(move |text| TextCase {
        how: how.to_string(),
        text,
    })
    .boxed()
}

// ---------------------------------------------------------------------------------------
// Stack
// ---------------------------------------------------------------------------------------

const STACK_KEYS: &[&str] = &[
    "name",
    "model",
    "profile",
    "precondition",
    "path",
    "size",
    "interface",
    "queue_depth",
    "layout",
    "devices",
    "stripe_size",
    "chunk",
    "scheduler",
    "quantum",
    "slice_idle",
    "slice_sync",
    "read_expire",
    "write_expire",
    "max_merge",
    "bw_window",
    "dirty_ratio",
    "dirty_background_ratio",
    "dirty_expire",
    "writeback_interval",
    "read_ahead_kb",
    "memory",
    "copy_rate",
    "cores",
    "hypervisor",
    "iothread",
    "vcpus",
    "weight",
    "workload",
    "volume",
    "offset",
    "cache",
    "seed",
    "params",
    "device",
    "disk",
    "vm",
    "host",
    "page_cache",
    "cpu",
    "dom0_vcpus",
    "dom0_pin",
    "vcpupin",
    "emulatorpin",
    "iothreadpin",
    "migration_cost",
    "guest_hz",
];

const STACK_LINES: &[&str] = &[
    "vm = 5",
    "vm = \"vm1\"",
    "device = 5",
    "volume = []",
    "scheduler = 1",
    "page_cache = \"x\"",
    "host = 0",
    "seed = -1",
    "seed = 99999999999999999999",
    "disk = 5",
    "[[vm]]",
    "[[vm.disk]]",
    "[vm]",
    "[vm.disk]",
    "[host]",
    "[[host]]",
    "[page_cache]",
    "[scheduler]",
    "[scheduler.params]",
    "[[scheduler]]",
    "[[device]]",
    "[[volume]]",
    "[[device.params]]",
    "[",
    "[[",
    "name = \"vm1\"",
    "volume = \"vol\"",
    "volume = \"nope\"",
    "devices = [\"ssd\", \"ssd\"]",
    "devices = []",
    "layout = \"raid0\"",
    "layout = \"linear\"",
    "size = 0",
    "offset = \"0\"",
    "weight = 0",
    "cache = \"writeback\"",
    "model = \"hdd\"",
    "[cpu]",
    "[vm.cputune]",
    "model = \"cfs\"",
    "hypervisor = \"native\"",
    "hypervisor = \"xen\"",
    "interface = \"host\"",
    "vcpupin = [\"0-3,^9\"]",
    "dom0_pin = \"^0\"",
];

fn stack_line() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(STACK_LINES).prop_map(str::to_string),
        4 => (select(STACK_KEYS), hostile_toml_value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => hostile_value(),
    ]
    .boxed()
}

fn stack_cases() -> BoxedStrategy<TextCase> {
    let seeds = read_seeds(&|n| n == "stack.toml", "stack.toml");
    let toml_ish = prop::collection::vec(stack_line(), 0..30).prop_map(|l| l.join("\n"));
    prop_oneof![
        8 => mutated_seeds(seeds, hostile_toml_value(), stack_line()),
        2 => generated(toml_ish, "toml-shaped lines"),
        1 => generated(any::<String>(), "arbitrary string"),
    ]
    .boxed()
}

/// Plausible usable sizes of a volume.
fn volume_size() -> BoxedStrategy<u64> {
    prop_oneof![
        select(vec![
            1u64,
            512,
            4096,
            1 << 20,
            1 << 30,
            30 << 30,
            120 << 30,
            256_000_000_000,
            16 << 40,
            u64::MAX / 2,
            u64::MAX,
        ]),
        1u64..(1 << 50),
    ]
    .boxed()
}

fn stack_target(case: &(TextCase, Vec<u64>)) -> Outcome {
    let (case, sizes) = case;
    match Stack::from_toml(&case.text, "stack.toml") {
        Err(e) => error_outcome(e.to_string()),
        Ok(stack) => {
            let n = stack.volumes.len();
            // Every volume gets a size (resolve_disk_sizes indexes by volume): cycle the draws.
            let volume_bytes: Vec<u64> = (0..n).map(|i| sizes[i % sizes.len()]).collect();
            let mut s = stack.clone();
            match s.resolve_disk_sizes(&volume_bytes) {
                Ok(()) => Outcome::Ok,
                Err(e) => downstream(e.to_string()),
            }
        }
    }
}

#[test]
fn stack_parser_never_panics_and_its_errors_are_one_short_line() {
    let strategy = (stack_cases(), prop::collection::vec(volume_size(), 1..4));
    fuzz("stack", 5000, strategy, no_known_bugs, stack_target);
}

// ---------------------------------------------------------------------------------------
// fio job files
// ---------------------------------------------------------------------------------------

const FIO_KEYS: &[&str] = &[
    "cpuload",
    "cpuchunks",
    "cpumode",
    "cpu_profile",
    "cpu_work",
    "cpu_ipc",
    "cpus_allowed",
    "cpus_allowed_policy",
    "blocksize",
    "blocksize_range",
    "bs",
    "bsrange",
    "bssplit",
    "buffered",
    "description",
    "direct",
    "end_fsync",
    "create_fsync",
    "create_on_open",
    "directory",
    "fallocate",
    "fdatasync",
    "file_service_type",
    "nr_files",
    "nrfiles",
    "openfiles",
    "overwrite",
    "sync",
    "unlink",
    "filebench",
    "app",
    "filename",
    "filesize",
    "fsync",
    "io_limit",
    "io_size",
    "iodepth",
    "ioengine",
    "iolog_format",
    "loops",
    "name",
    "new_group",
    "norandommap",
    "number_ios",
    "numjobs",
    "offset",
    "ramp_time",
    "randseed",
    "read_iolog",
    "readwrite",
    "replay_no_stall",
    "replay_time_scale",
    "runtime",
    "rw",
    "rwmixread",
    "rwmixwrite",
    "size",
    "stonewall",
    "time_based",
    "timeout",
    "wait_for_previous",
    "thinktime",
    "rate",
    "unknown_opt",
];

const FIO_LINES: &[&str] = &[
    "[global]",
    "[job]",
    "[job2]",
    "[]",
    "[",
    "]",
    "[ spaced ]",
    "[global",
    "time_based",
    "stonewall",
    "norandommap",
    "numjobs=4096",
    "numjobs=4097",
    "numjobs=0",
    "rw=randrw",
    "rw=randrw:8",
    "rw=write",
    "rw=trim",
    "bs=4k",
    "bs=1",
    "size=1",
    "size=10%",
    "runtime=0",
    "offset=100%",
    "bssplit=4k/10:64k/50:1m/",
    "bssplit=4k/10:64k/50:1m/,8k/100",
    "iolog_format=bogus",
    "read_iolog=traces/msn.spc",
    "filebench=varmail",
    "filebench=nope",
    "app=sqlite-wal",
    "app=nope",
    "nrfiles=4294967295",
    "nrfiles=3",
    "openfiles=1",
    "file_service_type=random:3",
    "file_service_type=sequential",
    "filesize=1k-1g",
    "filename=a:b\\:c:/d",
    "create_on_open=1",
    "unlink=1",
    "end_fsync=1",
    "; comment",
    "# comment",
    "=5",
    "key =",
];

fn fio_line() -> BoxedStrategy<String> {
    prop_oneof![
        3 => select(FIO_LINES).prop_map(str::to_string),
        5 => (select(FIO_KEYS), select(vec!["=", " = ", "= ", "=="]), hostile_value())
            .prop_map(|(k, eq, v)| format!("{k}{eq}{v}")),
        1 => hostile_value().prop_map(|v| format!("[{v}]")),
        1 => hostile_value(),
    ]
    .boxed()
}

fn fio_cases() -> BoxedStrategy<TextCase> {
    let seeds = read_seeds(&|n| n.ends_with(".fio"), ".fio");
    let lines =
        prop::collection::vec(fio_line(), 0..30).prop_map(|l| format!("[job]\n{}", l.join("\n")));
    prop_oneof![
        8 => mutated_seeds(seeds, hostile_value(), fio_line()),
        3 => generated(lines, "job section of random lines"),
        1 => generated(any::<String>(), "arbitrary string"),
        1 => generated(
            prop::collection::vec(any::<u8>(), 0..300)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            "arbitrary bytes, lossy UTF-8",
        ),
    ]
    .boxed()
}

/// Plausible disk sizes.
fn disk_size() -> BoxedStrategy<u64> {
    prop_oneof![
        select(vec![
            1u64,
            4096,
            1 << 20,
            1 << 30,
            30 << 30,
            1 << 40,
            u64::MAX
        ]),
        1u64..(1 << 44),
    ]
    .boxed()
}

fn fio_target(case: &(TextCase, u64, u64)) -> Outcome {
    let (case, disk, seed) = case;
    let file = match parse_job_file(&case.text, "job.fio") {
        Err(e) => return error_outcome(e.to_string()),
        Ok(f) => f,
    };
    let mut out = Outcome::Ok;
    for spec in file.jobs.iter().take(16) {
        if let Err(e) = check_ends(spec) {
            out = worst(out, downstream(e.to_string()));
        }
        if let Some(fmt) = &spec.iolog_format {
            if let Err(e) = TraceFormat::parse(fmt) {
                out = worst(out, downstream(e.to_string()));
            }
        }
        // The last clone too: a numjobs of thousands must not make clone indexes misbehave.
        for clone in [0, spec.numjobs.saturating_sub(1), spec.numjobs.max(1)] {
            match Generator::new(spec, clone, *disk, *seed) {
                Err(e) => out = worst(out, downstream(e.to_string())),
                Ok(mut g) => {
                    let _ = g.region();
                    for _ in 0..32 {
                        if let Step::Done = g.next(0) {
                            break;
                        }
                    }
                    let _ = (g.ios_done(), g.bytes_done());
                }
            }
            // The same job on the files of a filesystem of that size.
            match Generator::on_filesystem(spec, clone, *disk, "/mnt", *seed) {
                Err(e) => out = worst(out, downstream(e.to_string())),
                Ok(mut g) => {
                    let _ = g.files().len();
                    for _ in 0..32 {
                        if let Step::Done = g.next(0) {
                            break;
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn fio_job_parser_never_panics_and_its_errors_are_one_short_line() {
    let strategy = (fio_cases(), disk_size(), any::<u64>());
    fuzz("fio job", 8000, strategy, no_known_bugs, fio_target);
}

// ---------------------------------------------------------------------------------------
// Traces
// ---------------------------------------------------------------------------------------

/// Sample lines of every format (the SPC lines come from the shipped traces too).
const TRACE_SAMPLES: &[&str] = &[
    // MSR-Cambridge
    "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
    "128166372003061629,hm,1,Read,383496192,32768,1213",
    "128166372016382155,hm,1,Write,3677487104,4096,1390",
    // UMass/SPC
    "0,37500176,512,W,0.004710",
    "1,20941264,8192,r,0.551706,extra",
    // blkparse
    "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]",
    "  8,0    3        2     0.000001234   697  D  WS 223490 + 8 [kjournald]",
    "  8,0    0        3     0.100000000     1  Q FWS [fsync]",
    "  8,0    1        4     0.200000000     5  C   R 100 + 8 [0]",
    "  8,0    1        5     1.5e0           5  Q   D 4096 + 4096 [fstrim]",
    "CPU0 (8,0):",
    "Total (8,0):",
    // fio iolog v2 / v3
    "fio version 2 iolog",
    "/dev/sda add",
    "/dev/sda open",
    "/dev/sda read 0 4096",
    "/dev/sda write 8192 4096",
    "/dev/sda wait 100 0",
    "/dev/sda sync 0 0",
    "/dev/sda trim 4096 4096",
    "/dev/sda close",
    "fio version 3 iolog",
    "0 /dev/sda add",
    "12 /dev/sda read 0 4096",
    "13.5 /dev/sda write 4096 8192",
    "14 /dev/sda datasync 0 0",
    "# comment",
    "",
];

#[derive(Clone, Debug)]
enum FieldEdit {
    Replace(Index, String),
    Delete(Index),
    Duplicate(Index),
    Insert(Index, String),
    TruncateChars(Index),
}

fn field_edit() -> BoxedStrategy<FieldEdit> {
    prop_oneof![
        5 => (any::<Index>(), hostile_value()).prop_map(|(i, v)| FieldEdit::Replace(i, v)),
        1 => any::<Index>().prop_map(FieldEdit::Delete),
        1 => any::<Index>().prop_map(FieldEdit::Duplicate),
        1 => (any::<Index>(), hostile_value()).prop_map(|(i, v)| FieldEdit::Insert(i, v)),
        1 => any::<Index>().prop_map(FieldEdit::TruncateChars),
    ]
    .boxed()
}

/// Edit one line field by field (fields split at ',' for CSV lines, else at spaces).
fn edit_line(line: &str, edits: &[FieldEdit]) -> String {
    // CSV lines have no spaces; blkparse and iolog lines are space-separated.
    let sep = if line.trim().contains(' ') { " " } else { "," };
    let mut f: Vec<String> = line.split(sep).map(str::to_string).collect();
    for e in edits {
        let n = f.len().max(1);
        if f.is_empty() {
            f.push(String::new());
        }
        match e {
            FieldEdit::Replace(i, v) => f[i.index(n)] = v.clone(),
            FieldEdit::Delete(i) => {
                f.remove(i.index(n));
            }
            FieldEdit::Duplicate(i) => {
                let k = i.index(n);
                f.insert(k, f[k].clone());
            }
            FieldEdit::Insert(i, v) => f.insert(i.index(n + 1), v.clone()),
            FieldEdit::TruncateChars(i) => {
                let k = i.index(n);
                let chars = f[k].chars().count();
                f[k] = f[k].chars().take(i.index(chars + 1)).collect();
            }
        }
    }
    f.join(sep)
}

fn trace_seed_lines() -> Vec<String> {
    let dir = studies_dir().join("mcfq/traces");
    let mut lines: Vec<String> = TRACE_SAMPLES.iter().map(|s| s.to_string()).collect();
    for p in files_under(&dir, &|_| true) {
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        lines.extend(text.lines().take(100).map(str::to_string));
    }
    assert!(
        lines.len() > TRACE_SAMPLES.len(),
        "no trace files in {}",
        dir.display()
    );
    lines
}

fn trace_line(seeds: Vec<String>) -> BoxedStrategy<String> {
    prop_oneof![
        8 => select(seeds.clone()),
        3 => (select(seeds), prop::collection::vec(field_edit(), 1..3))
            .prop_map(|(l, e)| edit_line(&l, &e)),
        1 => hostile_value(),
        1 => "\\PC{0,60}",
    ]
    .boxed()
}

#[derive(Clone, Debug)]
struct TraceCase {
    /// None: detect the format.
    format: Option<TraceFormat>,
    /// A format name given to TraceFormat::parse.
    format_name: String,
    text: TextCase,
    region_bytes: u64,
    time_scale: f64,
    loops: u32,
}

fn trace_cases() -> BoxedStrategy<TraceCase> {
    let seeds = trace_seed_lines();
    let formats = vec![
        None,
        Some(TraceFormat::Msr),
        Some(TraceFormat::Spc),
        Some(TraceFormat::Blkparse),
        Some(TraceFormat::FioIolog),
    ];
    let header = select(vec![
        "",
        "",
        "fio version 2 iolog\n",
        "fio version 3 iolog\n",
        "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n",
    ]);
    let text = prop_oneof![
        8 => (header, prop::collection::vec(trace_line(seeds), 0..8))
            .prop_map(|(h, l)| TextCase { how: "trace lines".into(), text: format!("{h}{}", l.join("\n")) }),
        1 => generated(any::<String>(), "arbitrary string"),
    ];
    let format_name = prop_oneof![
        3 => select(vec!["msr", "SPC", "umass", "blkparse", "fio-iolog", "iolog", " Msr ", "", "fio"])
            .prop_map(str::to_string),
        1 => hostile_value(),
    ];
    let time_scale = prop_oneof![
        select(vec![
            0.0,
            1.0,
            2.0,
            0.5,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::MAX,
            1e-300
        ]),
        any::<f64>(),
    ];
    let loops = prop_oneof![select(vec![0u32, 1, 2, 1000, u32::MAX]), any::<u32>()];
    let region = prop_oneof![
        select(vec![0u64, 1, 4095, 4096, 30 << 30, u64::MAX]),
        any::<u64>()
    ];
    (
        select(formats),
        format_name,
        text,
        region,
        time_scale,
        loops,
    )
        .prop_map(
            |(format, format_name, text, region_bytes, time_scale, loops)| TraceCase {
                format,
                format_name,
                text,
                region_bytes,
                time_scale,
                loops,
            },
        )
        .boxed()
}

fn trace_target(case: &TraceCase) -> Outcome {
    let mut out = match TraceFormat::parse(&case.format_name) {
        Ok(f) => {
            assert_eq!(
                TraceFormat::parse(f.name()).ok(),
                Some(f),
                "name round trip"
            );
            Outcome::Ok
        }
        Err(e) => downstream(e.to_string()),
    };
    let text = &case.text.text;
    let format = match case.format.or_else(|| TraceFormat::detect(text)) {
        Some(f) => f,
        // Undetected: the caller reports its own error (vmio-sim's load_trace).
        None => return worst(out, Outcome::CleanError),
    };
    let ios = match parse_trace(text, "trace.txt", format) {
        Err(e) => return worst(out, error_outcome(e.to_string())),
        Ok(ios) => ios,
    };
    let budget = 256;
    match Replay::try_new(ios.clone(), case.region_bytes, case.time_scale, case.loops) {
        Err(e) => out = worst(out, downstream(e.to_string())),
        Ok(mut r) => {
            let _ = (r.len(), r.is_empty());
            for _ in 0..budget {
                match r.next() {
                    None => break,
                    Some(io) => assert!(
                        io.len_bytes == 0
                            || io.offset_bytes.saturating_add(io.len_bytes) <= case.region_bytes,
                        "replayed request {io:?} leaves the region of {} bytes",
                        case.region_bytes
                    ),
                }
            }
        }
    }
    let mut r = Replay::new(ios, case.region_bytes, case.time_scale, case.loops);
    for _ in 0..budget {
        if r.next().is_none() {
            break;
        }
    }
    out
}

#[test]
fn trace_parsers_never_panic_and_their_errors_are_one_short_line() {
    fuzz("trace", 10000, trace_cases(), no_known_bugs, trace_target);
}

// ---------------------------------------------------------------------------------------
// Regressions: the long messages this pass found (fixed; each input kept as a test)
// ---------------------------------------------------------------------------------------

fn no_known_bugs(_: &str) -> Option<&'static str> {
    None
}

fn assert_short(message: &str) {
    assert!(
        !message.contains('\n') && message.chars().count() <= MAX_ERROR_CHARS,
        "{} chars: {}",
        message.chars().count(),
        shorten(message, 300)
    );
}

#[test]
fn a_bad_bs_value_gives_a_message_of_at_most_400_chars() {
    let text = format!("[job]\nbs={}", "7".repeat(200));
    let e = parse_job_file(&text, "job.fio").unwrap_err();
    assert_short(&e.to_string());
}

#[test]
fn a_bad_bssplit_value_gives_a_message_of_at_most_400_chars() {
    let text = format!("[job]\nbssplit={}", "4".repeat(200));
    let e = parse_job_file(&text, "job.fio").unwrap_err();
    assert_short(&e.to_string());
}

#[test]
fn an_unknown_trace_format_name_gives_a_message_of_at_most_400_chars() {
    let e = TraceFormat::parse(&"x".repeat(100_000)).unwrap_err();
    assert_short(&e.to_string());
}

#[test]
fn a_tiny_negative_time_scale_gives_a_message_of_at_most_400_chars() {
    let e = Replay::try_new(Vec::new(), 4096, -5.610860574693005e-309, 1).unwrap_err();
    assert_short(&e.to_string());
}

#[test]
fn a_huge_trace_field_gives_a_message_of_at_most_400_chars() {
    let huge = "9".repeat(5000);
    let cases = [
        (TraceFormat::Spc, format!("0,{huge},512,W,0.1")),
        (TraceFormat::Spc, format!("0,1,512,{huge},0.1")),
        (TraceFormat::Spc, format!("0,1,512,W,{huge}x")),
        (TraceFormat::Msr, format!("{huge},hm,1,Read,0,512,1")),
        (TraceFormat::Msr, format!("1,hm,1,{huge},0,512,1")),
        (
            TraceFormat::Blkparse,
            format!("8,0 0 1 0.1 1 Q {huge} 8 + 8 [x]"),
        ),
        (
            TraceFormat::Blkparse,
            format!("8,0 0 1 {huge}x 1 Q W 8 + 8 [x]"),
        ),
        (TraceFormat::FioIolog, huge.clone()),
        (
            TraceFormat::FioIolog,
            format!("fio version 2 iolog\n/dev/sda {huge} 0 4096"),
        ),
        (
            TraceFormat::FioIolog,
            format!("fio version 3 iolog\n{huge}x /dev/sda read 0 4096"),
        ),
    ];
    let mut long = Vec::new();
    for (format, text) in &cases {
        let e = parse_trace(text, "trace.txt", *format)
            .unwrap_err()
            .to_string();
        if e.chars().count() > MAX_ERROR_CHARS {
            long.push(format!(
                "{format:?}: {} chars: {}",
                e.chars().count(),
                shorten(&e, 80)
            ));
        }
    }
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn every_shipped_job_file_parses_unmutated() {
    for text in read_seeds(&|n| n.ends_with(".fio"), ".fio") {
        if let Err(e) = parse_job_file(&text, "job.fio") {
            panic!("{e}");
        }
    }
}
