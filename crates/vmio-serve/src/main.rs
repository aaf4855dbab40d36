//! `vmio-serve`: serve the VM disks of a stack file over NBD until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use vmio_serve::{stats, Config, Listen};

const USAGE: &str = "usage: vmio-serve --stack STACK.toml [--socket PATH | --tcp PORT] [--create]
                  [--stats-file PATH] [--queue-depth N] [--workers N]

Serves every [[vm.disk]] of the stack as an NBD export named VM/DISK (VM alone: its first
disk) on a Unix socket (default ./vmio.sock) or on TCP at 127.0.0.1:PORT.
  --create          set every backing file to its device's size, extending or TRUNCATING it
                    (missing files are always created, sparse)
  --stats-file P    write per-export statistics (JSON) every second, on SIGUSR1 and at exit
  --queue-depth N   requests each device's scheduler may have outstanding (default 32)
  --workers N       I/O threads (default 32)";

fn parse(args: &[String]) -> Result<Config, String> {
    let mut stack = None;
    let mut listen = None;
    let mut cfg = Config::new("", Listen::Unix(PathBuf::from("vmio.sock")));
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let num = |name: &str, v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("{name} '{v}': must be an integer >= 1"))
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
            "--queue-depth" => cfg.queue_depth = num("--queue-depth", val("--queue-depth")?)?,
            "--workers" => cfg.workers = num("--workers", val("--workers")?)?,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    cfg.stack = stack.ok_or("--stack STACK.toml is required")?;
    if let Some(l) = listen {
        cfg.listen = l;
    }
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
    eprintln!(
        "vmio-serve: serving {} on {}",
        server.export_names().join(", "),
        server.address
    );
    let snaps = server.wait();
    eprint!("vmio-serve: shut down\n{}", stats::text(&snaps));
    ExitCode::SUCCESS
}
