//! `cargo run --release -p vmio-sim --example simrun STACK JOB [SEED]`: one run, fio JSON out.
//! With JOB `-`, every VM of the stack runs its own `workload` file at once.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: simrun STACK.toml JOB.fio|- [SEED]");
        std::process::exit(2);
    }
    let stack = std::fs::read_to_string(&a[1]).expect("read stack");
    let seed = a.get(3).and_then(|s| s.parse().ok());
    let dir = std::path::Path::new(&a[1])
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let parsed = vmio_core::stack::Stack::from_toml(&stack, &a[1]).expect("stack");
    let mut files = Vec::new();
    if a[2] == "-" {
        for vm in &parsed.vms {
            if let Some(w) = &vm.workload {
                let p = dir.join(w).display().to_string();
                let t = std::fs::read_to_string(&p).expect("read workload");
                files.push((Some(vm.name.clone()), p, t));
            }
        }
    } else {
        let t = std::fs::read_to_string(&a[2]).expect("read job");
        files.push((None, a[2].clone(), t));
    }
    let jobs: Vec<vmio_sim::run::VmJob> = files
        .iter()
        .map(|(vm, p, t)| vmio_sim::run::VmJob {
            vm: vm.as_deref(),
            job_text: t,
            job_path: p,
        })
        .collect();
    match vmio_sim::run::run_many_json(&stack, &a[1], &jobs, seed) {
        Ok(s) => print!("{s}"),
        Err(e) => {
            eprintln!("simrun: error: {e}");
            std::process::exit(2);
        }
    }
}
