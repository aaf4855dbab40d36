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
    pub job_file: JobFile,
}

pub fn run(input: &RunInput) -> Result<RunOutput, RunError> {
    let stack = Stack::from_toml(input.stack_text, input.stack_path)?;
    let job_file = parse_job_file(input.job_text, input.job_path)?;
    let vm = match input.vm {
        None => 0,
        Some(name) => stack
            .vms
            .iter()
            .position(|v| v.name == name)
            .ok_or_else(|| RunError::NoSuchVm {
                file: input.stack_path.to_string(),
                vm: name.to_string(),
                defined: stack
                    .vms
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?,
    };
    let seed = input.seed.or(stack.seed).unwrap_or(1);
    let jobs = bind_jobs(&stack, &job_file.jobs, vm, input.job_path)?;
    let report = simulate(stack.clone(), jobs, seed)?;
    Ok(RunOutput {
        report,
        stack,
        job_file,
    })
}

/// Run and render fio's JSON output (pretty-printed, deterministic).
pub fn run_json(input: &RunInput) -> Result<String, RunError> {
    let out = run(input)?;
    let v = fio_json(&out);
    Ok(serde_json::to_string_pretty(&v).expect("JSON values always serialize") + "\n")
}
