//! `vmio-serve`: serve the VM disks of a stack file over NBD until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vmio_serve::server::{MAX_CONNECTIONS_RANGE, QUEUE_DEPTH_RANGE, WORKERS_RANGE};
use vmio_serve::{stats, Config, Listen, TraceConfig};

const USAGE: &str = "usage: vmio-serve --stack STACK.toml [--socket PATH | --tcp PORT] [--create]
                  [--stats-file PATH] [--queue-depth N] [--workers N]
                  [--max-connections N] [--max-conn-payload SIZE] [--max-total-payload SIZE]
                  [--handshake-timeout S] [--idle-timeout S] [--shutdown-grace S]
                  [--trace FILE [--trace-max-bytes SIZE] [--trace-overwrite]]

Serves every [[vm.disk]] of the stack as an NBD export named VM/DISK (VM alone: its first
disk) on a Unix socket (default ./vmio.sock) or on TCP at 127.0.0.1:PORT.
  --create          set every backing file to its device's size, extending or TRUNCATING it
                    (missing files are always created, sparse)
  --stats-file P    write per-export statistics (JSON) every second, on SIGUSR1 and at exit
  --queue-depth N   requests each device's scheduler may have outstanding (1..=1024, default 32)
  --workers N       I/O threads (1..=1024, default 32)
  --trace FILE      record every served request (arrival in microseconds since the start,
                    export, read/write/trim/sync, offset, length; a FUA write is followed by
                    'datasync 0 0') as a fio iolog v3 that fio --read_iolog and vmio sim
                    replay; an existing FILE is refused unless --trace-overwrite
  --trace-max-bytes SIZE  the trace stops growing at SIZE, with one warning (1k..=16t,
                    default 1g)
Bounds on what clients can make the server hold (SIZE: bytes, or with k, m, g, t):
  --max-connections N       connections at once; more get NBD_REP_ERR_POLICY (1..=4096,
                            default 256)
  --max-conn-payload SIZE   payload bytes in flight per connection; past it the server stops
                            reading that connection until replies drain (32m..=1t, default 64m)
  --max-total-payload SIZE  payload bytes in flight in all (>= --max-conn-payload, default 1g)
  --handshake-timeout S     seconds to finish the handshake (default 10)
  --idle-timeout S          close a connection that moves no byte for S seconds while the
                            server waits on it mid-request or to take its replies (an idle
                            guest with nothing in flight is kept; 0: never; default 300)
  --shutdown-grace S        on SIGINT/SIGTERM, seconds to wait for connections before closing
                            them (a second signal: at once; default 10)
Each disk's cache mode decides its open flags (O_DIRECT, O_DSYNC) and what FLUSH and FUA do;
cache = \"pdc\" is writeback whose writes detected as the guest's journal (a circular log with
flushes; [pdc] table) go around the page cache (O_DIRECT, or RWF_DONTCACHE when unaligned);
the kernel's page cache holds the data and does read-ahead, writeback and eviction, so
[page_cache] settings (memory, dirty ratios, eviction = clock|lru) apply to vmio sim only.
Backing files are locked as QEMU locks images: a file another vmio serve or QEMU has open for
writing is refused. Exit status: 0 after a shutdown by signal, 2 on bad arguments or stack,
1 on an internal error.";

fn size(flag: &str, v: &str) -> Result<u64, String> {
    let t = v.trim().to_ascii_lowercase();
    let t = t.trim_end_matches("ib").trim_end_matches('b');
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        Some('t') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{flag} '{v}': must be a size (bytes, or with k, m, g, t)"))
}

fn seconds(flag: &str, v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{flag} '{v}': must be a number of seconds >= 0"))
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut stack = None;
    let mut listen = None;
    let mut cfg = Config::new("", Listen::Unix(PathBuf::from("vmio.sock")));
    let mut trace: Option<TraceConfig> = None;
    let (mut trace_max, mut trace_overwrite) = (None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let num = |name: &str, v: String, (lo, hi): (usize, usize)| {
            v.parse::<usize>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| format!("{name} '{v}': must be an integer in {lo}..={hi}"))
        };
        match a.as_str() {
            "--stack" => stack = Some(PathBuf::from(val("--stack")?)),
            "--socket" | "--tcp" if listen.is_some() => {
                return Err("give only one of --socket and --tcp".into())
            }
            "--socket" => listen = Some(Listen::Unix(PathBuf::from(val("--socket")?))),
            "--tcp" => {
                let v = val("--tcp")?;
                let port = v
                    .parse::<u16>()
                    .map_err(|_| format!("--tcp '{v}': must be a port number 0..=65535"))?;
                listen = Some(Listen::Tcp(port));
            }
            "--create" => cfg.create = true,
            "--stats-file" => cfg.stats_file = Some(PathBuf::from(val("--stats-file")?)),
            f @ "--queue-depth" => cfg.queue_depth = num(f, val(f)?, QUEUE_DEPTH_RANGE)?,
            f @ "--workers" => cfg.workers = num(f, val(f)?, WORKERS_RANGE)?,
            f @ "--max-connections" => {
                cfg.max_connections = num(f, val(f)?, MAX_CONNECTIONS_RANGE)?
            }
            f @ "--max-conn-payload" => cfg.max_conn_payload_bytes = size(f, &val(f)?)?,
            f @ "--max-total-payload" => cfg.max_total_payload_bytes = size(f, &val(f)?)?,
            f @ "--handshake-timeout" => cfg.handshake_timeout = seconds(f, &val(f)?)?,
            f @ "--idle-timeout" => cfg.idle_timeout = seconds(f, &val(f)?)?,
            f @ "--shutdown-grace" => cfg.shutdown_grace = seconds(f, &val(f)?)?,
            "--trace" => trace = Some(TraceConfig::new(val("--trace")?)),
            f @ "--trace-max-bytes" => trace_max = Some(size(f, &val(f)?)?),
            "--trace-overwrite" => trace_overwrite = true,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    cfg.stack = stack.ok_or("--stack STACK.toml is required")?;
    match (&mut trace, trace_max, trace_overwrite) {
        (Some(t), max, overwrite) => {
            t.max_bytes = max.unwrap_or(t.max_bytes);
            t.overwrite = overwrite;
        }
        (None, Some(_), _) | (None, _, true) => {
            return Err("--trace-max-bytes and --trace-overwrite need --trace FILE".into())
        }
        (None, None, false) => {}
    }
    cfg.trace = trace;
    if let Some(l) = listen {
        cfg.listen = l;
    }
    cfg.check().map_err(|e| e.to_string())?;
    Ok(cfg)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let cfg = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vmio-serve: error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = match vmio_serve::start(&cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vmio-serve: error: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!("vmio-serve: {}", server.banner());
    match server.wait() {
        Ok(snaps) => {
            eprint!("vmio-serve: shut down\n{}", stats::text(&snaps));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vmio-serve: error: {e}");
            ExitCode::from(1)
        }
    }
}
