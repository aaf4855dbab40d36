//! One simulation from the texts a user writes: a stack file and a fio job file in, a
//! [`SimReport`] (and fio's JSON output) out. This is what the CLI and the bindings call.

use crate::output::fio_json;
use crate::sim::{bind_jobs, simulate, SimError, SimReport};
use thiserror::Error;
use vmio_core::fio::{parse_job_file, FioError, JobFile};
use vmio_core::stack::{Stack, StackError};
use vmio_core::workload::{parse_trace, TimedIo, TraceFormat};

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    Fio(#[from] FioError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{0}")]
    Trace(String),
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
    let dir = std::path::Path::new(stack_path)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    stack.check_backing_files(dir)?;
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
        let mut bound = bind_jobs(&stack, &job_file.jobs, vm, vj.job_path)?;
        for b in &mut bound {
            if let Some(trace) = &b.spec.read_iolog {
                b.trace = Some(load_trace(
                    vj.job_path,
                    b.spec.line,
                    trace,
                    b.spec.iolog_format.as_deref(),
                )?);
            }
        }
        bindings.extend(bound);
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

/// Read and parse a job's `read_iolog` trace; a relative path is taken from the job file's
/// directory (as fio does from its working directory, which is usually the job's).
fn load_trace(
    job_path: &str,
    line: usize,
    trace: &str,
    format: Option<&str>,
) -> Result<Vec<TimedIo>, RunError> {
    let path = std::path::Path::new(job_path)
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(trace);
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        RunError::Trace(format!(
            "{job_path}:{line}: read_iolog: cannot read '{shown}': {e}"
        ))
    })?;
    let fmt = match format {
        Some(f) => TraceFormat::parse(f)
            .map_err(|e| RunError::Trace(format!("{job_path}:{line}: iolog_format: {e}")))?,
        None => TraceFormat::detect(&text).ok_or_else(|| {
            RunError::Trace(format!(
                "{job_path}:{line}: read_iolog: cannot tell the format of '{shown}'; set iolog_format = msr, spc, blkparse or fio"
            ))
        })?,
    };
    parse_trace(&text, &shown, fmt).map_err(|e| RunError::Trace(e.to_string()))
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
