//! One simulation from the texts a user writes: a stack file and a fio job file in, a
//! [`RunOutput`] (the [`crate::sim::SimReport`] with the stack and job files) and fio's JSON
//! output out. This is what the CLI and the bindings call.

use crate::engine::Watch;
use crate::output::{fio_json, RunOutput};
use crate::sim::{bind_jobs, simulate_limited, Limits, SimError};
use thiserror::Error;
use vmio_core::fio::{parse_job_file_with, FioError, Host, JobSpec, ReadContext};
use vmio_core::stack::{Stack, StackError};
use vmio_core::workload::{parse_trace, TimedIo, TraceFormat};
use vmio_core::Ns;

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

#[cfg(test)]
impl<'a> RunInput<'a> {
    /// The tests' run: `stack_text` as "stack.toml", `job_text` as "job.fio", `seed`, the
    /// first VM.
    pub(crate) fn texts(stack_text: &'a str, job_text: &'a str, seed: u64) -> Self {
        RunInput {
            stack_text,
            stack_path: "stack.toml",
            job_text,
            job_path: "job.fio",
            seed: Some(seed),
            vm: None,
        }
    }
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
    run_many_watched(
        stack_text,
        stack_path,
        vm_jobs,
        seed,
        None,
        Limits::default(),
    )
}

/// A [`Watch`] made once the job files are read, given the virtual time they plan
/// ([`planned_ns`]; None when a job ends on its bytes).
pub type WatchFor = Box<dyn FnOnce(Option<Ns>) -> Watch + Send>;

/// [`run_many`] with a [`Watch`] looking at the simulation (Ctrl-C, progress), within
/// `limits`.
pub fn run_many_watched(
    stack_text: &str,
    stack_path: &str,
    vm_jobs: &[VmJob],
    seed: Option<u64>,
    watch: Option<WatchFor>,
    limits: Limits,
) -> Result<RunOutput, RunError> {
    let stack = Stack::from_toml(stack_text, stack_path)?;
    let dir = std::path::Path::new(stack_path)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    stack.check_backing_files(dir)?;
    let mut job_files = Vec::new();
    let mut bindings = Vec::new();
    for vj in vm_jobs {
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
        let job_file = parse_job_file_with(vj.job_text, vj.job_path, &read_context(&stack, vm))?;
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
    let watch = watch.map(|make| make(planned_ns(job_files.iter().flat_map(|f| &f.jobs))));
    let report = simulate_limited(stack.clone(), bindings, seed, watch, limits)?;
    if let Some(j) = report.jobs.iter().find(|j| {
        j.stats
            .iter()
            .any(|s| s.log.as_ref().is_some_and(|l| l.overflowed))
    }) {
        return Err(RunError::Sim(SimError::Job(format!(
            "job '{}' (line {}): its write_bw_log/write_iops_log/write_lat_log would hold more than {} lines in one direction (vmio keeps logs in memory until the run ends); accepted: log_avg_msec=M (one line per M ms) or a run with fewer I/Os",
            vmio_core::units::quote(&j.name),
            j.spec.line,
            crate::sim::samples::MAX_LOG_LINES
        ))));
    }
    Ok(RunOutput {
        report,
        stack,
        job_files,
    })
}

/// Largest job file `include` reads: 1 MiB.
const MAX_INCLUDE_BYTES: u64 = 1 << 20;

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn load_include(path: &str) -> Result<String, String> {
    read_bounded(std::path::Path::new(path), MAX_INCLUDE_BYTES)
}

/// What fio's job-file reading takes from outside (`vmio_core::fio::ReadContext`): this
/// process's environment for `${VAR}` (the Python CLI's `os.environ`), included files from
/// disk, and for `$ncpus`, `$mb_memory`, `$pagesize` the SIMULATED guest of VM `vm` (its
/// vCPUs, its memory, the 4 KiB page of x86-64 Linux), not this machine.
fn read_context(stack: &Stack, vm: usize) -> ReadContext<'static> {
    ReadContext {
        env: Some(&environment),
        load: Some(&load_include),
        host: stack.vms.get(vm).map(|v| Host {
            ncpus: v.vcpus,
            pagesize: vmio_core::cache::PAGE_BYTES,
            mb_memory: v.memory_bytes >> 20,
        }),
    }
}

/// Largest trace file `read_iolog` reads: 512 MiB of text (about 10 M records of an
/// MSR-Cambridge or SPC trace; a day of one MSR volume is tens of MB).
pub const MAX_TRACE_BYTES: u64 = 512 << 20;

/// Read a whole text file of at most `limit` bytes. Only regular files: a character device
/// (`/dev/zero`), a FIFO (opened without blocking, so it never waits for a writer) or a
/// directory is refused, as is a file past the limit and text that is not UTF-8.
pub fn read_bounded(path: &std::path::Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "a directory"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(format!("is {kind}; give a regular file"));
    }
    if meta.len() > limit {
        return Err(format!(
            "is {} bytes, more than the {limit} bytes vmio reads",
            meta.len()
        ));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!("grew past the {limit} bytes vmio reads"));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let text = &e.as_bytes()[..at];
        let line = text.iter().filter(|&&b| b == b'\n').count() + 1;
        format!("is not UTF-8 text (byte offset {at}, line {line})")
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
    let text = read_bounded(&path, MAX_TRACE_BYTES).map_err(|e| {
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
    Ok(json_text(&fio_json(&out)))
}

/// Run and render fio's JSON output (pretty-printed, deterministic).
pub fn run_json(input: &RunInput) -> Result<String, RunError> {
    let out = run(input)?;
    Ok(json_text(&fio_json(&out)))
}

/// A JSON value as vmio prints it: pretty, with a final newline.
pub fn json_text(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).expect("JSON values always serialize") + "\n"
}

/// The virtual time a job file should take, for a progress line: its stonewall groups one
/// after the other, each as long as its longest job's `ramp_time + runtime`. None when a
/// job has no runtime (it ends when its bytes are done, which only the run tells).
///
/// ```text
/// planned = Σ over groups g of max over jobs j in g of (ramp_time_j + runtime_j)
/// ```
pub fn planned_ns<'a>(jobs: impl IntoIterator<Item = &'a JobSpec>) -> Option<Ns> {
    let mut groups: std::collections::BTreeMap<u32, Ns> = Default::default();
    for j in jobs {
        let t = j.ramp_time_ns + j.runtime_ns.filter(|&r| r > 0)?;
        let g = groups.entry(j.group_id).or_default();
        *g = (*g).max(t);
    }
    Some(groups.values().sum())
}

#[cfg(test)]
mod tests {
    use super::{planned_ns, read_bounded, run_many_watched, RunError, VmJob};
    use crate::sim::{Limits, SimError};

    const RAM: &str = "[[device]]\nname = \"r\"\nmodel = \"ram\"\ncapacity = \"4t\"\n\
        [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"r\"]\n\
        [[vm]]\nname = \"vm1\"\nmemory = \"1g\"\n\
        [[vm.disk]]\nname = \"vdb\"\nvolume = \"v\"\nsize = \"4t\"\ncache = \"none\"\n";

    /// The error of `job` on a 4 TB RAM disk within `limits`.
    fn bound_error(job: &str, limits: Limits) -> String {
        let jobs = [VmJob {
            vm: None,
            job_text: job,
            job_path: "j.fio",
        }];
        match run_many_watched(RAM, "stack.toml", &jobs, Some(1), None, limits) {
            Err(RunError::Sim(SimError::Bound(m))) => m,
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("the run ended within its bounds"),
        }
    }

    #[test]
    fn a_run_past_its_event_bound_ends_with_one_line_naming_max_events() {
        let job = "[j]\nrw=randread\nbs=4k\ndirect=1\nruntime=3600\ntime_based\n";
        let limits = Limits {
            max_events: 1000,
            ..Limits::default()
        };
        let m = bound_error(job, limits);
        assert!(
            m.starts_with("the simulation passed its bound of 1000 events (--max-events; max_events= in vmio.simulate) at "),
            "{m}"
        );
        assert!(!m.contains('\n'));
    }

    #[test]
    fn a_rate_of_one_byte_a_second_is_refused_at_its_first_io_past_the_time_bound_naming_the_rate()
    {
        // fio's usec_for_io: the n-th 4 KiB write may go at n × 4096 s; with the bound at
        // one hour the second one (at 4096 s) is the first past it.
        let job = "[j]\nrw=write\nbs=4k\ndirect=1\nrate=1\n";
        let limits = Limits {
            max_sim_time_ns: 3600 * vmio_core::SEC,
            ..Limits::default()
        };
        assert_eq!(
            bound_error(job, limits),
            "job 'j': its rate (rate= or rate_iops=) holds its next I/O until 4096.000 s, past the bound on simulated time, 3600.000 s (--max-sim-time; max_sim_time= in vmio.simulate); accepted: a higher rate, a smaller size or runtime, or a larger bound"
        );
    }

    #[test]
    fn a_runtime_past_the_time_bound_is_refused_as_the_job_starts_naming_the_runtime() {
        // 2^32 s is 49,710 days, past the default bound of 36,500 days.
        let job = "[j]\nrw=randread\nbs=4k\nruntime=4294967296\ntime_based\n";
        let m = bound_error(job, Limits::default());
        assert!(
            m.starts_with("job 'j': its runtime (ramp_time + runtime from its start at 0.000 s) ends at 4294967296.000 s (49710.3 days), past the bound on simulated time, 3153600000.000 s (36500.0 days) (--max-sim-time;"),
            "{m}"
        );
    }
    use vmio_core::fio::parse_job_file;
    use vmio_core::SEC;

    #[test]
    fn the_planned_time_adds_up_the_groups_each_as_long_as_its_longest_job() {
        let f = parse_job_file(
            "[global]\nruntime=2\n[a]\n[b]\nruntime=3\nramp_time=1\n[c]\nstonewall\n",
            "j.fio",
        )
        .unwrap();
        assert_eq!(planned_ns(&f.jobs), Some(4 * SEC + 2 * SEC));
        let f = parse_job_file("[a]\nruntime=2\n[b]\nsize=1m\n", "j.fio").unwrap();
        assert_eq!(planned_ns(&f.jobs), None, "b ends when its bytes are done");
    }
    use std::path::Path;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vmio-run-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn dev_zero_is_refused_as_a_character_device_without_reading_it() {
        let e = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e, "is a character device; give a regular file");
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let d = scratch("fifo");
        let p = d.join("pipe");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_bounded(&p, 1 << 20).unwrap_err(),
            "is a FIFO; give a regular file"
        );
        let e = read_bounded(&d, 1 << 20).unwrap_err();
        assert_eq!(e, "is a directory; give a regular file");
    }

    #[test]
    fn a_file_past_the_limit_is_refused_with_its_size() {
        let d = scratch("big");
        let p = d.join("t.csv");
        std::fs::write(&p, vec![b'1'; 4097]).unwrap();
        assert_eq!(
            read_bounded(&p, 4096).unwrap_err(),
            "is 4097 bytes, more than the 4096 bytes vmio reads"
        );
        assert_eq!(read_bounded(&p, 4097).unwrap().len(), 4097);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_located_by_offset_and_line() {
        let d = scratch("utf8");
        let p = d.join("t.csv");
        std::fs::write(&p, b"0,1\n2,3\n4,\xff\n").unwrap();
        assert_eq!(
            read_bounded(&p, 1 << 20).unwrap_err(),
            "is not UTF-8 text (byte offset 10, line 3)"
        );
    }
}
