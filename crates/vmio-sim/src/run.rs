//! One simulation from the texts a user writes: a stack file and a fio job file in, a
//! [`SimReport`] (and fio's JSON output) out. This is what the CLI and the bindings call.

use crate::output::fio_json;
use crate::sim::{bind_jobs, simulate, SimError, SimReport};
use thiserror::Error;
use vmio_core::fio::{parse_job_file, FioError, JobFile};
use vmio_core::stack::{Stack, StackError};

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    Fio(#[from] FioError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{file}: no VM named '{vm}'; defined: {defined}")]
    NoSuchVm {
        file: String,
        vm: String,
        defined: String,
    },
}

/// Inputs of one run.
pub struct RunInput<'a> {
    pub stack_text: &'a str,
    pub stack_path: &'a str,
    pub job_text: &'a str,
    pub job_path: &'a str,
    /// `--seed`; otherwise the stack file's `seed`; otherwise 1.
    pub seed: Option<u64>,
    /// VM whose guest runs the job file (default: the first VM).
    pub vm: Option<&'a str>,
}

pub struct RunOutput {
    pub report: SimReport,
    pub stack: Stack,
    /// The job files run, one per VM that runs one, in run order.
    pub job_files: Vec<JobFile>,
}

/// One VM's workload: a fio job file run inside `vm` (None: the first VM).
pub struct VmJob<'a> {
    pub vm: Option<&'a str>,
    pub job_text: &'a str,
    pub job_path: &'a str,
}

pub fn run(input: &RunInput) -> Result<RunOutput, RunError> {
    run_many(
        input.stack_text,
        input.stack_path,
        &[VmJob {
            vm: input.vm,
            job_text: input.job_text,
            job_path: input.job_path,
        }],
        input.seed,
    )
}

/// Several VMs at once, each running its own job file (the stack's `[[vm]] workload`s).
/// All job files start together; fio groups (`stonewall`) of every file share one sequence.
pub fn run_many(
    stack_text: &str,
    stack_path: &str,
    vm_jobs: &[VmJob],
    seed: Option<u64>,
) -> Result<RunOutput, RunError> {
    let stack = Stack::from_toml(stack_text, stack_path)?;
    let mut job_files = Vec::new();
    let mut bindings = Vec::new();
    for vj in vm_jobs {
        let job_file = parse_job_file(vj.job_text, vj.job_path)?;
        let vm = match vj.vm {
            None => 0,
            Some(name) => stack
                .vms
                .iter()
                .position(|v| v.name == name)
                .ok_or_else(|| RunError::NoSuchVm {
                    file: stack_path.to_string(),
                    vm: name.to_string(),
                    defined: stack
                        .vms
                        .iter()
                        .map(|v| v.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?,
        };
        bindings.extend(bind_jobs(&stack, &job_file.jobs, vm, vj.job_path)?);
        job_files.push(job_file);
    }
    let seed = seed.or(stack.seed).unwrap_or(1);
    let report = simulate(stack.clone(), bindings, seed)?;
    Ok(RunOutput {
        report,
        stack,
        job_files,
    })
}

/// [`run_many`] rendered as fio's JSON output (pretty-printed, deterministic).
pub fn run_many_json(
    stack_text: &str,
    stack_path: &str,
    vm_jobs: &[VmJob],
    seed: Option<u64>,
) -> Result<String, RunError> {
    let out = run_many(stack_text, stack_path, vm_jobs, seed)?;
    Ok(serde_json::to_string_pretty(&fio_json(&out)).expect("JSON values always serialize") + "\n")
}

/// Run and render fio's JSON output (pretty-printed, deterministic).
pub fn run_json(input: &RunInput) -> Result<String, RunError> {
    let out = run(input)?;
    let v = fio_json(&out);
    Ok(serde_json::to_string_pretty(&v).expect("JSON values always serialize") + "\n")
}
