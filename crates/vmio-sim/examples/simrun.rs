//! `cargo run --release -p vmio-sim --example simrun STACK JOB [SEED]`: one run, fio JSON out.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: simrun STACK.toml JOB.fio [SEED]");
        std::process::exit(2);
    }
    let stack = std::fs::read_to_string(&a[1]).expect("read stack");
    let job = std::fs::read_to_string(&a[2]).expect("read job");
    let input = vmio_sim::run::RunInput {
        stack_text: &stack,
        stack_path: &a[1],
        job_text: &job,
        job_path: &a[2],
        seed: a.get(3).and_then(|s| s.parse().ok()),
        vm: None,
    };
    match vmio_sim::run::run_json(&input) {
        Ok(s) => print!("{s}"),
        Err(e) => {
            eprintln!("simrun: error: {e}");
            std::process::exit(2);
        }
    }
}
