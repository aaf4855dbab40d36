//! `vmio serve`'s options, declared once: [`OPTIONS`] is the one table of the server's
//! settings (flag, value kind with its accepted range, default, help, and the rules between
//! options), and [`Config`] is what they configure.
//!
//! Everything that takes the options derives from the table:
//!
//! - the `vmio-serve` binary's parser ([`command`], [`parse_args`]): a `clap` builder over the
//!   table, whose values are read by the table's own parser ([`ServeOption::parse`]);
//! - `vmio serve` (Python): its argparse arguments come from the same rows, exported by
//!   `vmio._native.serve_options()`, and `vmio._native.serve` takes the values by name
//!   ([`configure`]);
//! - [`Config::new`] (every option at its default) and [`Config::check`] (every value within
//!   its range), for servers configured in code (the tests).
//!
//! ```text
//! command line --clap(table)--> (name, text)  --ServeOption::parse--> (name, Value) --+
//! vmio._native.serve(**kw)  --> (name, object) --serveopts.rs---------> (name, Value) --+
//!   configure: unknown name -> error; value outside its range -> error (names the flag and
//!              the range); rules (required, one of two, needs another) -> error;
//!              every option in table order: its value, or its default -> Config (setter);
//!              Config::check (ranges again, and what spans options)
//! ```
//!
//! Sizes are read by vmio's one size parser ([`vmio_core::units::parse_size`]: `64m`, `1g`,
//! `4KiB`), durations as decimal seconds. Errors are one line naming the flag and what it
//! accepts. Sources: clap's builder API (docs.rs/clap, `Command`, `Arg`, `ArgAction`);
//! qemu-nbd(8) for the handshake limit this server's `--handshake-timeout` follows.

use crate::proto::MAX_PAYLOAD_BYTES;
use crate::trace::{TraceConfig, MAX_BYTES_RANGE};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;
use vmio_core::params::format_size;
use vmio_core::units::{parse_size, quote};

/// What an option takes, with its accepted range (inclusive).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    /// A switch without a value.
    Flag,
    /// A file or socket path.
    Path,
    /// A TCP port, 0..=65535.
    Port,
    /// A whole number.
    Count { lo: u64, hi: u64 },
    /// Bytes, in vmio's size syntax (`64m`, `1g`).
    Size { lo: u64, hi: u64 },
    /// A decimal number of seconds.
    Seconds { lo: f64, hi: f64 },
    /// One of these words.
    Choice { values: &'static [&'static str] },
}

impl Kind {
    /// The kind's name in `vmio._native.serve_options()`.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Flag => "flag",
            Kind::Path => "path",
            Kind::Port => "port",
            Kind::Count { .. } => "count",
            Kind::Size { .. } => "size",
            Kind::Seconds { .. } => "seconds",
            Kind::Choice { .. } => "choice",
        }
    }

    /// The accepted range as the help shows it (`1..1024`, `32m..1t`, `0..86400`); none for
    /// flags and paths.
    pub fn range_text(&self) -> Option<String> {
        match *self {
            Kind::Flag | Kind::Path => None,
            Kind::Port => Some(format!("0..{}", u16::MAX)),
            Kind::Count { lo, hi } => Some(format!("{lo}..{hi}")),
            Kind::Size { lo, hi } => Some(format!("{}..{}", format_size(lo), format_size(hi))),
            Kind::Seconds { lo, hi } => Some(format!("{lo}..{hi}")),
            Kind::Choice { values } => Some(values.join(", ")),
        }
    }
}

/// A value of an option: [`Kind::Port`], [`Kind::Count`] and [`Kind::Size`] are numbers.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Flag(bool),
    Path(PathBuf),
    Number(u64),
    Seconds(f64),
    /// A [`Kind::Choice`]'s word.
    Text(String),
}

/// How an option relates to the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Free,
    /// Must be given.
    Required,
    /// Must not be given with the named option.
    Excludes(&'static str),
    /// Given only with the named option.
    Needs(&'static str),
}

/// One option of `vmio serve` (a row of [`OPTIONS`]).
pub struct ServeOption {
    /// The long flag without its dashes (`queue-depth`); Python's keyword is it with `_`.
    pub name: &'static str,
    /// What the help calls the value (`N`, `SIZE`, `S`); empty for a switch.
    pub metavar: &'static str,
    pub kind: Kind,
    /// The default as a user writes it (`64m`), read like a given value; `None`: unset.
    pub default: Option<&'static str>,
    /// What the option does; [`ServeOption::help_text`] adds the range and the default.
    pub help: &'static str,
    pub rule: Rule,
    /// Where a value goes in a [`Config`] (called with values of the option's kind only)...
    set: fn(&mut Config, &Value),
    /// ...and where it is read back (`None`: not set).
    get: fn(&Config) -> Option<Value>,
}

/// Every option of `vmio serve` and `vmio-serve`, in the order of the help and in which
/// values are applied (`--trace` before `--trace-max-bytes`, `--socket` before `--tcp`).
pub const OPTIONS: &[ServeOption] = &[
    ServeOption {
        name: "stack",
        metavar: "STACK.toml",
        kind: Kind::Path,
        default: None,
        help: "the stack file: every [[vm.disk]] is served as an NBD export VM/DISK",
        rule: Rule::Required,
        set: |c, v| c.stack = v.path(),
        get: |c| Some(Value::Path(c.stack.clone())),
    },
    ServeOption {
        name: "socket",
        metavar: "PATH",
        kind: Kind::Path,
        default: Some("vmio.sock"),
        help: "Unix socket to listen on",
        rule: Rule::Excludes("tcp"),
        set: |c, v| c.listen = Listen::Unix(v.path()),
        get: |c| match &c.listen {
            Listen::Unix(p) => Some(Value::Path(p.clone())),
            Listen::Tcp(_) => None,
        },
    },
    ServeOption {
        name: "tcp",
        metavar: "PORT",
        kind: Kind::Port,
        default: None,
        help: "listen on TCP at 127.0.0.1:PORT instead; 0: any free port",
        rule: Rule::Excludes("socket"),
        set: |c, v| c.listen = Listen::Tcp(v.number() as u16),
        get: |c| match c.listen {
            Listen::Tcp(p) => Some(Value::Number(p.into())),
            Listen::Unix(_) => None,
        },
    },
    ServeOption {
        name: "create",
        metavar: "",
        kind: Kind::Flag,
        default: None,
        help: "set every backing file to its device's size, extending or TRUNCATING it \
               (missing files are always created, sparse)",
        rule: Rule::Free,
        set: |c, v| c.create = v.flag(),
        get: |c| Some(Value::Flag(c.create)),
    },
    ServeOption {
        name: "stats-file",
        metavar: "PATH",
        kind: Kind::Path,
        default: None,
        help: "write per-export statistics (JSON) every second, on SIGUSR1 and at exit",
        rule: Rule::Free,
        set: |c, v| c.stats_file = Some(v.path()),
        get: |c| c.stats_file.clone().map(Value::Path),
    },
    ServeOption {
        name: "queue-depth",
        metavar: "N",
        kind: Kind::Count { lo: 1, hi: 1024 },
        default: Some("32"),
        help: "requests each device's scheduler may have outstanding",
        rule: Rule::Free,
        set: |c, v| c.queue_depth = v.number() as usize,
        get: |c| Some(Value::Number(c.queue_depth as u64)),
    },
    ServeOption {
        name: "workers",
        metavar: "N",
        kind: Kind::Count { lo: 1, hi: 1024 },
        default: Some("32"),
        help: "I/O threads",
        rule: Rule::Free,
        set: |c, v| c.workers = v.number() as usize,
        get: |c| Some(Value::Number(c.workers as u64)),
    },
    ServeOption {
        name: "aio",
        metavar: "ENGINE",
        kind: Kind::Choice { values: Aio::NAMES },
        default: Some("native"),
        help: "how O_DIRECT pieces reach the disk, as QEMU's aio=: threads (the I/O \
               threads' pread/pwrite), native (Linux AIO: the connection's reader submits, \
               one completion thread reaps), io_uring (each connection's thread receives, \
               submits and reaps through one io_uring of its own)",
        rule: Rule::Free,
        set: |c, v| c.aio = Aio::from_name(&v.text()),
        get: |c| Some(Value::Text(c.aio.name().into())),
    },
    ServeOption {
        name: "read-ahead",
        metavar: "SIZE",
        kind: Kind::Size {
            lo: 0,
            hi: crate::readahead::MAX_BYTES,
        },
        default: Some("0"),
        help: "read ahead of sequential READs on O_DIRECT exports (cache none, directsync), \
               windows growing to SIZE as Linux's read-ahead (rounded up to 4 KiB), read with \
               O_DIRECT into the server's memory, no host page cache; 0: off",
        rule: Rule::Free,
        set: |c, v| c.read_ahead_bytes = v.number(),
        get: |c| Some(Value::Number(c.read_ahead_bytes)),
    },
    ServeOption {
        name: "max-connections",
        metavar: "N",
        kind: Kind::Count { lo: 1, hi: 4096 },
        default: Some("256"),
        help: "connections at once; more get NBD_REP_ERR_POLICY",
        rule: Rule::Free,
        set: |c, v| c.max_connections = v.number() as usize,
        get: |c| Some(Value::Number(c.max_connections as u64)),
    },
    ServeOption {
        name: "max-connections-per-peer",
        metavar: "N",
        kind: Kind::Count { lo: 0, hi: 4096 },
        default: Some("0"),
        help: "connections one peer (a uid on a Unix socket, an address on TCP) may hold; \
               0: --max-connections less the slot kept for a new peer",
        rule: Rule::Free,
        set: |c, v| c.max_connections_per_peer = v.number() as usize,
        get: |c| Some(Value::Number(c.max_connections_per_peer as u64)),
    },
    ServeOption {
        name: "max-conn-payload",
        metavar: "SIZE",
        // At least one largest request, at most 1 TiB.
        kind: Kind::Size {
            lo: MAX_PAYLOAD_BYTES as u64,
            hi: 1 << 40,
        },
        default: Some("64m"),
        help: "payload bytes in flight per connection; past it the server stops reading that \
               connection until its replies drain",
        rule: Rule::Free,
        set: |c, v| c.max_conn_payload_bytes = v.number(),
        get: |c| Some(Value::Number(c.max_conn_payload_bytes)),
    },
    ServeOption {
        name: "max-total-payload",
        metavar: "SIZE",
        kind: Kind::Size {
            lo: MAX_PAYLOAD_BYTES as u64,
            hi: 1 << 40,
        },
        default: Some("1g"),
        help: "payload bytes in flight in all connections, at least --max-conn-payload",
        rule: Rule::Free,
        set: |c, v| c.max_total_payload_bytes = v.number(),
        get: |c| Some(Value::Number(c.max_total_payload_bytes)),
    },
    ServeOption {
        name: "handshake-timeout",
        metavar: "S",
        kind: Kind::Seconds {
            lo: 0.001,
            hi: 3600.0,
        },
        default: Some("10"),
        help: "seconds a client has to finish the handshake",
        rule: Rule::Free,
        set: |c, v| c.handshake_timeout = v.duration(),
        get: |c| Some(Value::Seconds(c.handshake_timeout.as_secs_f64())),
    },
    ServeOption {
        name: "idle-timeout",
        metavar: "S",
        kind: Kind::Seconds {
            lo: 0.0,
            hi: 86400.0,
        },
        default: Some("300"),
        help: "close a connection that moves no byte for S seconds while the server waits on \
               it mid-request or to take its replies; an idle guest with nothing in flight is \
               kept; 0: never",
        rule: Rule::Free,
        set: |c, v| c.idle_timeout = v.duration(),
        get: |c| Some(Value::Seconds(c.idle_timeout.as_secs_f64())),
    },
    ServeOption {
        name: "shutdown-grace",
        metavar: "S",
        kind: Kind::Seconds {
            lo: 0.0,
            hi: 3600.0,
        },
        default: Some("10"),
        help: "on SIGINT/SIGTERM, seconds to wait for connections before closing them; a \
               second signal: at once",
        rule: Rule::Free,
        set: |c, v| c.shutdown_grace = v.duration(),
        get: |c| Some(Value::Seconds(c.shutdown_grace.as_secs_f64())),
    },
    ServeOption {
        name: "trace",
        metavar: "FILE",
        kind: Kind::Path,
        default: None,
        help: "record every served request as a fio iolog v3 (microseconds since the start, \
               export, read/write/trim/sync, offset, length; a FUA write is followed by \
               'datasync 0 0') that fio --read_iolog and vmio sim (read_iolog=) replay; an \
               existing FILE is refused unless --trace-overwrite",
        rule: Rule::Free,
        set: |c, v| c.trace = Some(TraceConfig::new(v.path())),
        get: |c| c.trace.as_ref().map(|t| Value::Path(t.path.clone())),
    },
    ServeOption {
        name: "trace-max-bytes",
        metavar: "SIZE",
        kind: Kind::Size {
            lo: MAX_BYTES_RANGE.0,
            hi: MAX_BYTES_RANGE.1,
        },
        default: Some("1g"),
        help: "the trace stops growing at SIZE, with one warning",
        rule: Rule::Needs("trace"),
        set: |c, v| {
            if let Some(t) = &mut c.trace {
                t.max_bytes = v.number();
            }
        },
        get: |c| c.trace.as_ref().map(|t| Value::Number(t.max_bytes)),
    },
    ServeOption {
        name: "trace-overwrite",
        metavar: "",
        kind: Kind::Flag,
        default: None,
        help: "let --trace replace an existing file",
        rule: Rule::Needs("trace"),
        set: |c, v| {
            if let Some(t) = &mut c.trace {
                t.overwrite = v.flag();
            }
        },
        get: |c| c.trace.as_ref().map(|t| Value::Flag(t.overwrite)),
    },
];

/// The command's one-line description.
pub const ABOUT: &str = "Serve every VM disk of a stack file over NBD until SIGINT/SIGTERM.";

/// What the help says after the options; `cmd` is the command's name in the examples
/// (`vmio serve`, `vmio-serve`).
pub fn epilog(cmd: &str) -> String {
    format!(
        "\
Every [[vm.disk]] of the stack is an NBD export named VM/DISK ('vm1/disk0'; 'vm1' alone is
the VM's first disk; the empty name the first export), on a Unix socket (--socket) or on TCP
(--tcp). Each [[device]] of a served volume needs path = \"FILE or /dev/BLOCKDEV\" and, for a
file that may not exist yet, size = \"1g\" (missing files are created sparse). Requests are
mapped by the volume's layout, ordered by the stack's [scheduler] (cfq/mcfq use the VMs'
weights) and executed with the disk's QEMU cache mode:
  none          O_DIRECT; FLUSH = fdatasync
  writeback     host page cache; FLUSH = fdatasync
  writethrough  O_DSYNC
  directsync    O_DIRECT + O_DSYNC
  unsafe        page cache, FLUSH and FUA ignored: UNSAFE, a host crash loses acknowledged data
  pdc           writeback, but writes detected as the guest's journal (a circular log with
                flushes; [pdc] table) go around the page cache: O_DIRECT, or RWF_DONTCACHE
                when unaligned (the startup line says whether the kernel has it)
The kernel's page cache holds the data and does read-ahead, writeback and eviction, so
[page_cache] settings (memory, dirty ratios, eviction) apply to vmio sim only.
SIGINT/SIGTERM: finish the requests in flight, flush, remove the socket, print statistics;
connections still open after --shutdown-grace are closed (a second signal: at once).
SIGUSR1: write the statistics file and print the statistics.
Bounds: at most --max-connections clients, at most --max-connections-per-peer of one uid or
address, the last slot kept for a new peer; when full, the connection that finished its
handshake longest ago without sending a request is closed to admit the newcomer (one that has
sent a request is never closed for idleness), else the newcomer is refused with
NBD_REP_ERR_POLICY; at most
--max-conn-payload / --max-total-payload bytes of payload in flight (past them a connection is
not read until its replies drain), --handshake-timeout and --idle-timeout. Backing files are
locked as QEMU locks images: a file another vmio serve or QEMU has open for writing is refused.
SIZE: bytes, or with k, m, g, t (64m, 1g).

examples:
  {cmd} --stack stack.toml --socket /tmp/vmio.sock
  nbdinfo --list 'nbd+unix:///?socket=/tmp/vmio.sock'
  qemu-img info 'nbd+unix:///vm1/disk0?socket=/tmp/vmio.sock'
  fio --ioengine=nbd --uri='nbd+unix:///vm1?socket=/tmp/vmio.sock' --rw=randread --name=j
"
    )
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum OptionError {
    #[error("{flag} '{text}': must be an integer in {lo}..={hi}")]
    Count {
        flag: String,
        text: String,
        lo: u64,
        hi: u64,
    },
    #[error("{flag} '{text}': must be a port number 0..=65535")]
    Port { flag: String, text: String },
    #[error("{flag} '{text}': must be a size in {range} (bytes, or with k, m, g, t)")]
    Size {
        flag: String,
        text: String,
        range: String,
    },
    #[error("{flag} '{text}': must be a number of seconds in {lo}..={hi}")]
    Seconds {
        flag: String,
        text: String,
        lo: f64,
        hi: f64,
    },
    #[error("{flag}: expected {expected}, not {got}")]
    Type {
        flag: String,
        expected: &'static str,
        got: String,
    },
    #[error("{flag} '{text}': must be one of {values}")]
    Choice {
        flag: String,
        text: String,
        values: String,
    },
    #[error("{flag} needs a value")]
    NoValue { flag: String },
    #[error("{flag} {metavar} is required")]
    Required { flag: String, metavar: &'static str },
    #[error("give only one of {0} and {1}")]
    Excludes(String, String),
    #[error("{flags} need {flag} {metavar}")]
    Needs {
        flags: String,
        flag: String,
        metavar: &'static str,
    },
    #[error("unknown argument '{0}'")]
    Unknown(String),
    #[error("--max-conn-payload {conn} exceeds --max-total-payload {total}")]
    ConnOverTotal { conn: u64, total: u64 },
    /// Anything else the command-line parser refused (its own first line).
    #[error("{0}")]
    Other(String),
}

impl Value {
    fn number(&self) -> u64 {
        match self {
            Value::Number(n) => *n,
            _ => 0,
        }
    }

    fn flag(&self) -> bool {
        matches!(self, Value::Flag(true))
    }

    fn path(&self) -> PathBuf {
        match self {
            Value::Path(p) => p.clone(),
            _ => PathBuf::new(),
        }
    }

    /// Seconds as a duration (the value was checked: finite, >= 0, at most a day).
    fn duration(&self) -> Duration {
        match self {
            Value::Seconds(s) => Duration::try_from_secs_f64(*s).unwrap_or_default(),
            _ => Duration::ZERO,
        }
    }

    /// How an error quotes the value.
    fn text(&self) -> String {
        match self {
            Value::Flag(b) => b.to_string(),
            Value::Path(p) => p.display().to_string(),
            Value::Number(n) => n.to_string(),
            Value::Seconds(s) => s.to_string(),
            Value::Text(t) => t.clone(),
        }
    }
}

impl ServeOption {
    /// `--queue-depth`.
    pub fn flag(&self) -> String {
        format!("--{}", self.name)
    }

    /// The keyword of `vmio._native.serve` and the argparse destination (`queue_depth`).
    pub fn dest(&self) -> String {
        self.name.replace('-', "_")
    }

    /// The help line: what it does, then its range and default (`(1..1024, default 32)`).
    pub fn help_text(&self) -> String {
        match (self.kind.range_text(), self.default) {
            (Some(r), Some(d)) => format!("{} ({r}, default {d})", self.help),
            (Some(r), None) => format!("{} ({r})", self.help),
            (None, Some(d)) => format!("{} (default {d})", self.help),
            (None, None) => self.help.to_string(),
        }
    }

    /// Read a value as a user writes it (a switch takes no text: `true` or `false`).
    pub fn parse(&self, text: &str) -> Result<Value, OptionError> {
        let flag = self.flag();
        let shown = || quote(text);
        let value = match self.kind {
            Kind::Flag => match text {
                "true" => Value::Flag(true),
                "false" => Value::Flag(false),
                _ => {
                    return Err(OptionError::Type {
                        flag,
                        expected: "true or false",
                        got: format!("'{}'", shown()),
                    })
                }
            },
            Kind::Path if text.is_empty() => return Err(OptionError::NoValue { flag }),
            Kind::Path => Value::Path(PathBuf::from(text)),
            Kind::Port => match text.parse::<u16>() {
                Ok(p) => Value::Number(p.into()),
                Err(_) => {
                    return Err(OptionError::Port {
                        flag,
                        text: shown(),
                    })
                }
            },
            Kind::Count { lo, hi } => match text.parse::<u64>() {
                Ok(n) => Value::Number(n),
                Err(_) => {
                    let text = shown();
                    return Err(OptionError::Count { flag, text, lo, hi });
                }
            },
            Kind::Size { .. } => match parse_size(text) {
                Ok(n) => Value::Number(n),
                Err(_) => return Err(self.out_of_range(shown())),
            },
            Kind::Seconds { .. } => match text.trim().parse::<f64>() {
                Ok(s) => Value::Seconds(s),
                Err(_) => return Err(self.out_of_range(shown())),
            },
            Kind::Choice { .. } => Value::Text(text.to_string()),
        };
        self.check_as(&value, shown())?;
        Ok(value)
    }

    /// A value of the option's kind within its range.
    pub fn check(&self, value: &Value) -> Result<(), OptionError> {
        self.check_as(value, value.text())
    }

    fn check_as(&self, value: &Value, text: String) -> Result<(), OptionError> {
        let fits = match (self.kind, value) {
            (Kind::Flag, Value::Flag(_)) | (Kind::Path, Value::Path(_)) => true,
            (Kind::Port, Value::Number(n)) => *n <= u16::MAX.into(),
            (Kind::Count { lo, hi }, Value::Number(n))
            | (Kind::Size { lo, hi }, Value::Number(n)) => (lo..=hi).contains(n),
            // Also refuses NaN.
            (Kind::Seconds { lo, hi }, Value::Seconds(s)) => (lo..=hi).contains(s),
            (Kind::Choice { values }, Value::Text(t)) => values.contains(&t.as_str()),
            (kind, v) => {
                return Err(OptionError::Type {
                    flag: self.flag(),
                    expected: kind.name(),
                    got: format!("{v:?}"),
                })
            }
        };
        if fits {
            Ok(())
        } else {
            Err(self.out_of_range(text))
        }
    }

    fn out_of_range(&self, text: String) -> OptionError {
        let flag = self.flag();
        match self.kind {
            Kind::Count { lo, hi } => OptionError::Count { flag, text, lo, hi },
            Kind::Size { .. } => OptionError::Size {
                flag,
                text,
                range: self.kind.range_text().unwrap_or_default(),
            },
            Kind::Seconds { lo, hi } => OptionError::Seconds { flag, text, lo, hi },
            Kind::Choice { values } => OptionError::Choice {
                flag,
                text,
                values: values.join(", "),
            },
            Kind::Port | Kind::Flag | Kind::Path => OptionError::Port { flag, text },
        }
    }

    /// The default as a value (`None`: unset). Every default is read by [`ServeOption::parse`]
    /// (a test holds them to it).
    pub fn default_value(&self) -> Option<Value> {
        self.default.and_then(|d| self.parse(d).ok())
    }

    /// This option's value in `cfg` (`None`: not set).
    pub fn get(&self, cfg: &Config) -> Option<Value> {
        (self.get)(cfg)
    }
}

/// The row of option `name` (`queue-depth`, `--queue-depth`, or Python's `queue_depth`).
pub fn find(name: &str) -> Option<&'static ServeOption> {
    index(name).map(|i| &OPTIONS[i])
}

fn index(name: &str) -> Option<usize> {
    let name = name.trim_start_matches("--");
    OPTIONS
        .iter()
        .position(|o| o.name == name || o.dest() == name)
}

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Listen {
    Unix(PathBuf),
    /// TCP port on 127.0.0.1 (0: any free port).
    Tcp(u16),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub stack: PathBuf,
    pub listen: Listen,
    /// Create or resize backing files to their configured sizes (may truncate).
    pub create: bool,
    pub stats_file: Option<PathBuf>,
    /// Requests each device's scheduler may have outstanding at once.
    pub queue_depth: usize,
    pub workers: usize,
    /// Install SIGINT/SIGTERM/SIGUSR1 handlers (the binary and `vmio serve` do).
    pub signals: bool,
    /// Connections served at once (handshaking or transmitting); more are refused.
    pub max_connections: usize,
    /// Connections one peer may hold; 0: `max_connections` less the reserved slot
    /// ([`crate::admission`]).
    pub max_connections_per_peer: usize,
    /// Payload bytes (READ buffers awaiting their reply, WRITE payloads) one connection may
    /// hold.
    pub max_conn_payload_bytes: u64,
    /// Payload bytes all connections together may hold.
    pub max_total_payload_bytes: u64,
    pub handshake_timeout: Duration,
    /// Zero: never.
    pub idle_timeout: Duration,
    /// How long a shutdown waits for connections before closing them.
    pub shutdown_grace: Duration,
    /// Record every served request as a fio iolog v3 ([`crate::trace`]).
    pub trace: Option<TraceConfig>,
    /// Largest read-ahead window of O_DIRECT exports; 0: none ([`crate::readahead`]).
    pub read_ahead_bytes: u64,
    /// How O_DIRECT pieces reach the disk.
    pub aio: Aio,
}

/// The I/O engine of the O_DIRECT pieces (`--aio`), named as QEMU's `aio=` of a drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aio {
    /// Every piece to the I/O worker threads (blocking pread/pwrite).
    Threads,
    /// Linux AIO ([`crate::aio`]).
    Native,
    /// One io_uring per connection thread ([`crate::uring`]).
    IoUring,
}

impl Aio {
    pub const NAMES: &'static [&'static str] = &["threads", "native", "io_uring"];

    pub fn name(self) -> &'static str {
        match self {
            Aio::Threads => "threads",
            Aio::Native => "native",
            Aio::IoUring => "io_uring",
        }
    }

    /// The engine named `name` (one of [`Aio::NAMES`]; anything else: native).
    pub fn from_name(name: &str) -> Self {
        match name {
            "threads" => Aio::Threads,
            "io_uring" => Aio::IoUring,
            _ => Aio::Native,
        }
    }
}

impl Config {
    /// Every option at its [`OPTIONS`] default; serve `stack` on `listen`.
    pub fn new(stack: impl Into<PathBuf>, listen: Listen) -> Self {
        Self {
            stack: stack.into(),
            listen,
            ..Self::with(&[])
        }
    }

    /// Options at the given values, the others at their defaults, in table order.
    fn with(given: &[Option<Value>]) -> Self {
        let mut cfg = Self {
            stack: PathBuf::new(),
            listen: Listen::Tcp(0),
            create: false,
            stats_file: None,
            queue_depth: 0,
            workers: 0,
            signals: true,
            max_connections: 0,
            max_connections_per_peer: 0,
            max_conn_payload_bytes: 0,
            max_total_payload_bytes: 0,
            handshake_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            shutdown_grace: Duration::ZERO,
            trace: None,
            read_ahead_bytes: 0,
            aio: Aio::Native,
        };
        for (i, opt) in OPTIONS.iter().enumerate() {
            let value = given.get(i).cloned().flatten();
            if let Some(v) = value.or_else(|| opt.default_value()) {
                (opt.set)(&mut cfg, &v);
            }
        }
        cfg
    }

    /// Every value within its option's range, and what spans options; the error names the
    /// command-line flag.
    pub fn check(&self) -> Result<(), OptionError> {
        for opt in OPTIONS {
            if let Some(v) = opt.get(self) {
                opt.check(&v)?;
            }
        }
        if self.max_conn_payload_bytes > self.max_total_payload_bytes {
            return Err(OptionError::ConnOverTotal {
                conn: self.max_conn_payload_bytes,
                total: self.max_total_payload_bytes,
            });
        }
        Ok(())
    }
}

/// The configuration that options given by name make (the command line's and
/// `vmio._native.serve`'s): each value checked against its row, the rules between options
/// applied, the others at their defaults. A switch given as `false` counts as not given.
pub fn configure<'a>(
    given: impl IntoIterator<Item = (&'a str, Value)>,
) -> Result<Config, OptionError> {
    let mut values: Vec<Option<Value>> = vec![None; OPTIONS.len()];
    for (name, value) in given {
        let Some(i) = index(name) else {
            return Err(OptionError::Unknown(quote(name)));
        };
        OPTIONS[i].check(&value)?;
        values[i] = Some(value).filter(|v| *v != Value::Flag(false));
    }
    let is_given = |name: &str| index(name).is_some_and(|i| values[i].is_some());
    for (opt, value) in OPTIONS.iter().zip(&values) {
        match opt.rule {
            Rule::Required if value.is_none() => {
                return Err(OptionError::Required {
                    flag: opt.flag(),
                    metavar: opt.metavar,
                })
            }
            Rule::Excludes(other) if value.is_some() && is_given(other) => {
                return Err(OptionError::Excludes(opt.flag(), format!("--{other}")));
            }
            Rule::Needs(other) if value.is_some() && !is_given(other) => {
                let needing: Vec<String> = OPTIONS
                    .iter()
                    .filter(|o| o.rule == Rule::Needs(other))
                    .map(|o| o.flag())
                    .collect();
                return Err(OptionError::Needs {
                    flags: needing.join(" and "),
                    flag: format!("--{other}"),
                    metavar: find(other).map_or("", |o| o.metavar),
                });
            }
            _ => {}
        }
    }
    let cfg = Config::with(&values);
    cfg.check()?;
    Ok(cfg)
}

/// The `clap` command of the table: every row an argument with its flag, value name and help
/// line; values are read by [`ServeOption::parse`]. Rules between options are [`configure`]'s
/// (one place for the binary and Python), except `--stack`'s being required, which the usage
/// line shows.
pub fn command(name: &'static str) -> Command {
    let mut cmd = Command::new(name)
        .about(ABOUT)
        .after_help(epilog(name))
        .args_override_self(true);
    for opt in OPTIONS {
        let help = wrap(&opt.help_text(), HELP_COLUMNS);
        let mut arg = Arg::new(opt.name).long(opt.name).help(help);
        arg = match opt.kind {
            Kind::Flag => arg.action(ArgAction::SetTrue),
            _ => arg
                .action(ArgAction::Set)
                .value_name(opt.metavar)
                .allow_hyphen_values(true)
                .value_parser(move |text: &str| opt.parse(text)),
        };
        if opt.rule == Rule::Required {
            arg = arg.required(true);
        }
        cmd = cmd.arg(arg);
    }
    cmd
}

/// Width of the help lines in the binary's `--help` (clap wraps them only with its
/// terminal-size feature): 100 columns in all, as `vmio --help`.
const HELP_COLUMNS: usize = 100 - 34;

/// `text` cut into lines of at most `width` characters at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split(' ') {
        let n = word.chars().count();
        if line > 0 && line + 1 + n > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += n;
    }
    out
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Serve(Config),
    /// `--help`: the text to print.
    Help(String),
}

/// Parse the binary's command line (`args` without the program's name).
pub fn parse_args(
    name: &'static str,
    args: impl IntoIterator<Item = OsString>,
) -> Result<Parsed, OptionError> {
    let argv = std::iter::once(OsString::from(name)).chain(args);
    match command(name).try_get_matches_from(argv) {
        Ok(m) => configure_matches(&m).map(Parsed::Serve),
        Err(e) if e.kind() == ErrorKind::DisplayHelp => Ok(Parsed::Help(e.render().to_string())),
        Err(e) => Err(one_line(&e)),
    }
}

fn configure_matches(m: &ArgMatches) -> Result<Config, OptionError> {
    let given = OPTIONS.iter().filter_map(|opt| {
        let value = match opt.kind {
            Kind::Flag => Some(Value::Flag(m.get_flag(opt.name))),
            _ => m.get_one::<Value>(opt.name).cloned(),
        };
        value.map(|v| (opt.name, v))
    });
    configure(given)
}

/// clap's error as one line of ours.
fn one_line(e: &clap::Error) -> OptionError {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) => v.first().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    // `--workers <N>` -> `--workers`
    let arg = context(ContextKind::InvalidArg);
    let flag = arg
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    match e.kind() {
        ErrorKind::ValueValidation => {
            let ours = std::error::Error::source(e).and_then(|s| s.downcast_ref::<OptionError>());
            if let Some(ours) = ours {
                return ours.clone();
            }
        }
        ErrorKind::UnknownArgument => return OptionError::Unknown(quote(&arg)),
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).is_empty() => {
            return OptionError::NoValue { flag }
        }
        ErrorKind::MissingRequiredArgument => {
            if let Some(opt) = find(&flag) {
                return OptionError::Required {
                    flag: opt.flag(),
                    metavar: opt.metavar,
                };
            }
        }
        _ => {}
    }
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or_default();
    OptionError::Other(first.trim_start_matches("error: ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn parse_err(a: &[&str]) -> String {
        match parse_args("vmio-serve", args(a)) {
            Err(e) => e.to_string(),
            Ok(p) => panic!("{a:?} parsed: {p:?}"),
        }
    }

    #[test]
    fn every_default_is_read_by_its_own_parser_within_its_range() {
        for opt in OPTIONS {
            if let Some(d) = opt.default {
                let v = opt.parse(d).unwrap_or_else(|e| panic!("{}: {e}", opt.name));
                assert_eq!(opt.default_value(), Some(v));
            }
        }
    }

    #[test]
    fn a_new_config_holds_every_default_of_the_table() {
        let cfg = Config::new("s.toml", Listen::Tcp(0));
        for opt in OPTIONS {
            if opt.rule == Rule::Free && opt.kind != Kind::Flag {
                assert_eq!(opt.get(&cfg), opt.default_value(), "{}", opt.name);
            }
        }
        assert!(cfg.check().is_ok());
        // A trace's own default bound is the table's.
        let t = find("trace-max-bytes").and_then(|o| o.default_value());
        assert_eq!(t, Some(Value::Number(crate::trace::DEFAULT_MAX_BYTES)));
    }

    #[test]
    fn the_binary_parser_has_every_option_of_the_table_with_its_help() {
        let cmd = command("vmio-serve");
        cmd.clone().debug_assert();
        for opt in OPTIONS {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(opt.name))
                .unwrap_or_else(|| panic!("--{} is missing", opt.name));
            let help = arg.get_help().map(|h| h.to_string().replace('\n', " "));
            assert_eq!(help, Some(opt.help_text()));
        }
        let longs = cmd.get_arguments().filter_map(|a| a.get_long()).count();
        assert_eq!(longs, OPTIONS.len(), "the table's options, no other");
    }

    #[test]
    fn every_default_given_on_the_command_line_makes_the_default_config() {
        let mut line = vec!["--stack".to_string(), "s.toml".to_string()];
        for opt in OPTIONS {
            if let (Some(d), false) = (opt.default, opt.rule == Rule::Needs("trace")) {
                line.extend([opt.flag(), d.to_string()]);
            }
        }
        let refs: Vec<&str> = line.iter().map(String::as_str).collect();
        let Ok(Parsed::Serve(cfg)) = parse_args("vmio-serve", args(&refs)) else {
            panic!("{line:?}")
        };
        let plain = Config::new("s.toml", Listen::Unix("vmio.sock".into()));
        for opt in OPTIONS {
            assert_eq!(opt.get(&cfg), opt.get(&plain), "{}", opt.name);
        }
    }

    #[test]
    fn out_of_range_values_are_one_line_naming_the_flag_and_the_range() {
        for (flag, value, want) in [
            (
                "--workers",
                "0",
                "--workers '0': must be an integer in 1..=1024",
            ),
            (
                "--queue-depth",
                "-1",
                "--queue-depth '-1': must be an integer in 1..=1024",
            ),
            ("--max-connections", "4097", "in 1..=4096"),
            (
                "--max-conn-payload",
                "1m",
                "--max-conn-payload '1m': must be a size in 32m..1t",
            ),
            ("--trace-max-bytes", "1", "must be a size in 1k..16t"),
            (
                "--idle-timeout",
                "1e400",
                "must be a number of seconds in 0..=86400",
            ),
            ("--handshake-timeout", "nan", "in 0.001..=3600"),
            (
                "--tcp",
                "65536",
                "--tcp '65536': must be a port number 0..=65535",
            ),
            (
                "--aio",
                "uring",
                "--aio 'uring': must be one of threads, native, io_uring",
            ),
        ] {
            let e = parse_err(&["--stack", "s.toml", flag, value]);
            assert!(e.contains(want) && !e.contains('\n'), "{flag}: {e}");
        }
        let long = "9".repeat(5000);
        let e = parse_err(&["--stack", "s.toml", "--workers", &long]);
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn the_rules_between_options_are_one_line_each() {
        assert_eq!(parse_err(&[]), "--stack STACK.toml is required");
        assert_eq!(
            parse_err(&["--stack", "s", "--socket", "a", "--tcp", "1"]),
            "give only one of --socket and --tcp"
        );
        assert_eq!(
            parse_err(&["--stack", "s", "--trace-overwrite"]),
            "--trace-max-bytes and --trace-overwrite need --trace FILE"
        );
        assert_eq!(
            parse_err(&["--stack", "s", "--bogus"]),
            "unknown argument '--bogus'"
        );
        assert_eq!(
            parse_err(&["--stack", "s", "extra"]),
            "unknown argument 'extra'"
        );
        assert_eq!(
            parse_err(&["--stack", "s", "--workers"]),
            "--workers needs a value"
        );
        assert_eq!(
            parse_err(&["--stack", "s", "--max-conn-payload", "2g"]),
            "--max-conn-payload 2147483648 exceeds --max-total-payload 1073741824"
        );
    }

    #[test]
    fn given_values_reach_the_config_and_the_last_of_a_repeated_flag_wins() {
        let line = [
            "--stack",
            "s.toml",
            "--tcp",
            "7000",
            "--workers",
            "3",
            "--workers",
            "4",
            "--max-total-payload",
            "2g",
            "--idle-timeout",
            "0.5",
            "--trace",
            "t.iolog",
            "--trace-max-bytes",
            "4k",
            "--create",
        ];
        let Ok(Parsed::Serve(cfg)) = parse_args("vmio-serve", args(&line)) else {
            panic!()
        };
        assert!(matches!(cfg.listen, Listen::Tcp(7000)));
        assert_eq!((cfg.workers, cfg.create), (4, true));
        assert_eq!(cfg.max_total_payload_bytes, 2 << 30);
        assert_eq!(cfg.idle_timeout, Duration::from_millis(500));
        let t = cfg.trace.unwrap();
        assert_eq!((t.max_bytes, t.overwrite), (4096, false));
    }

    #[test]
    fn help_lists_every_option_with_its_help_line() {
        let Ok(Parsed::Help(text)) = parse_args("vmio-serve", args(&["--help"])) else {
            panic!()
        };
        for opt in OPTIONS {
            assert!(text.contains(&opt.flag()), "{}", opt.name);
        }
        assert!(text.contains("vmio-serve --stack stack.toml --socket /tmp/vmio.sock"));
    }

    #[test]
    fn values_by_name_are_checked_against_their_rows() {
        let cfg = configure([
            ("stack", Value::Path("s.toml".into())),
            ("queue_depth", Value::Number(8)),
            ("create", Value::Flag(false)),
        ])
        .unwrap();
        assert_eq!(cfg.queue_depth, 8);
        let e = configure([
            ("stack", Value::Path("s".into())),
            ("workers", Value::Seconds(1.0)),
        ]);
        assert!(e
            .unwrap_err()
            .to_string()
            .starts_with("--workers: expected count"));
        let e = configure([
            ("stack", Value::Path("s".into())),
            ("color", Value::Flag(true)),
        ]);
        assert_eq!(e.unwrap_err().to_string(), "unknown argument 'color'");
    }

    #[test]
    fn the_aio_engine_is_native_unless_given_and_each_name_reaches_the_config() {
        let config = |a: &[&str]| match parse_args("vmio-serve", args(a)) {
            Ok(Parsed::Serve(cfg)) => cfg,
            other => panic!("{a:?}: {other:?}"),
        };
        assert_eq!(config(&["--stack", "s.toml"]).aio, Aio::Native);
        for name in Aio::NAMES {
            let cfg = config(&["--stack", "s.toml", "--aio", name]);
            assert_eq!(cfg.aio.name(), *name);
            assert_eq!(Aio::from_name(name), cfg.aio);
        }
    }
}
