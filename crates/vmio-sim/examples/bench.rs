//! `cargo run --release -p vmio-sim --example bench [CASE] [SECONDS]`: one simulator benchmark
//! case without Python (the same as `vmio bench sim --case CASE`).
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let cases: Vec<&str> = match a.get(1) {
        Some(c) => vec![c.as_str()],
        None => vmio_sim::bench::CASES.to_vec(),
    };
    let seconds = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    for case in cases {
        match vmio_sim::bench::bench(case, seconds) {
            Ok(r) => println!(
                "{:<30} {:>12} I/Os {:>8.3} s {:>12.0} I/Os/s (set-up {:.3} s)",
                r.case,
                r.simulated_ios,
                r.wall_s,
                r.simulated_ios as f64 / r.wall_s,
                r.setup_s
            ),
            Err(e) => {
                eprintln!("bench: error: {e}");
                std::process::exit(2);
            }
        }
    }
}
