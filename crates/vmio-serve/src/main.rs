//! `vmio-serve`: serve the VM disks of a stack file over NBD until SIGINT/SIGTERM.
//!
//! The command line is [`vmio_serve::options`]'s table (the one `vmio serve` uses too); bad
//! arguments are one line on stderr and exit status 2.

use std::process::ExitCode;
use vmio_serve::options::{self, Parsed};
use vmio_serve::stats;

const EXIT_STATUS: &str =
    "\nExit status: 0 after a shutdown by signal, 2 on bad arguments or stack, 1 on an internal \
     error.\n";

fn main() -> ExitCode {
    let cfg = match options::parse_args("vmio-serve", std::env::args_os().skip(1)) {
        Ok(Parsed::Serve(c)) => c,
        Ok(Parsed::Help(text)) => {
            print!("{text}{EXIT_STATUS}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("vmio-serve: error: {e} (vmio-serve --help lists the options)");
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
