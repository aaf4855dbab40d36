//! Simulator benchmarks: simulated I/O completions per wall-clock second on one core.
//!
//! Cases (issue #2):
//! - `hdd-raid0-randread-qd32`: 4 KiB random reads at QD32, cache=none, RAID 0 of two HDDs;
//! - `ssd-aged-mcfq-randwrite-4k`: four VMs (weights 1000/700/400/100) writing 4 KiB blocks
//!   randomly at QD32 each to an aged 256 GB SSD (the FTL doing GC) under MCFQ (S1); aging
//!   the SSD (a few seconds) is timed apart as the set-up, not in the run's wall time;
//! - `pagecache-hit-randread-4k`: 4 KiB random reads all served by the host page cache
//!   (cache=writeback, a 256 MiB region read once to warm the cache, then measured).
//!
//! Wall time is measured here, never asserted in tests.

use crate::run::{run, RunError, RunInput};
use crate::sim::{bind_jobs, Sim};
use std::time::Instant;
use vmio_core::fio::parse_job_file;
use vmio_core::stack::Stack;

pub struct BenchResult {
    pub case: &'static str,
    pub simulated_ios: u64,
    /// Wall time of the simulation run.
    pub wall_s: f64,
    /// Wall time of building it before the run (aging an SSD), not in `wall_s`.
    pub setup_s: f64,
}

pub const CASES: [&str; 3] = [
    "hdd-raid0-randread-qd32",
    "pagecache-hit-randread-4k",
    "ssd-aged-mcfq-randwrite-4k",
];

/// Four VMs with weights 1000/700/400/100 on one SSD, each on its own 30 GiB partition
/// (S1's setup), under scheduler `sched`; the SSD is `clean` or `aged`.
pub(crate) fn four_vm_ssd_stack(sched: &str, precondition: &str) -> String {
    let mut s = format!(
        "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\nprofile = \"samsung-840pro-256g\"\nprecondition = \"{precondition}\"\n\
         [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"ssd\"]\n\
         [scheduler]\nname = \"{sched}\"\n"
    );
    for (i, w) in [1000, 700, 400, 100].iter().enumerate() {
        s += &format!(
            "[[vm]]\nname = \"vm{}\"\nweight = {w}\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\noffset = \"{}g\"\nsize = \"30g\"\ncache = \"none\"\n",
            i + 1,
            i * 30
        );
    }
    s
}

/// Two `hdd-7200-2tb` disks as one volume of `layout`, one VM with a 100 GiB virtio-scsi disk
/// in QEMU cache mode `cache` (also the stack of the whole-stack tests).
pub(crate) fn two_hdd_stack(layout: &str, cache: &str) -> String {
    format!(
        r#"
[host]
memory = "32g"
[[device]]
name = "sda"
model = "hdd"
profile = "hdd-7200-2tb"
[[device]]
name = "sdb"
model = "hdd"
profile = "hdd-7200-2tb"
[[volume]]
name = "vol"
layout = "{layout}"
devices = ["sda", "sdb"]
[scheduler]
name = "mq-deadline"
[page_cache]
memory = "16g"
[[vm]]
name = "vm1"
[[vm.disk]]
name = "sdb"
volume = "vol"
size = "100g"
interface = "virtio-scsi"
cache = "{cache}"
"#
    )
}

/// Run one benchmark case for `seconds` of simulated time (HDD I/Os are slow in virtual
/// time, so that case simulates 30× longer to reach a measurable number of I/Os).
pub fn bench(case: &str, seconds: u64) -> Result<BenchResult, RunError> {
    let (case, stack_text, job) = match case {
        "hdd-raid0-randread-qd32" => (
            CASES[0],
            two_hdd_stack("raid0", "none"),
            format!("[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=100g\ntime_based\nruntime={}\n", seconds * 30),
        ),
        "pagecache-hit-randread-4k" => (
            CASES[1],
            two_hdd_stack("raid0", "writeback"),
            format!("[warm]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\niodepth=4\nsize=256m\n[r]\nstonewall\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=256m\ntime_based\nruntime={seconds}\n"),
        ),
        "ssd-aged-mcfq-randwrite-4k" => {
            let stack_text = four_vm_ssd_stack("mcfq", "aged");
            let job = format!("[w]\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\ntime_based\nruntime={}\n", seconds * 3);
            let stack = Stack::from_toml(&stack_text, "<bench>")?;
            let job_file = parse_job_file(&job, "<bench>")?;
            let mut jobs = Vec::new();
            for vm in 0..stack.vms.len() {
                jobs.extend(bind_jobs(&stack, &job_file.jobs, vm, "<bench>")?);
            }
            // Building the simulation ages the SSD; that set-up is timed apart from the run.
            let t0 = Instant::now();
            let sim = Sim::new(stack, jobs, 1)?;
            let setup_s = t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let report = sim.run();
            let wall_s = t1.elapsed().as_secs_f64();
            let simulated_ios = report
                .jobs
                .iter()
                .map(|j| j.stats.iter().map(|s| s.total_ios).sum::<u64>())
                .sum();
            return Ok(BenchResult {
                case: CASES[2],
                simulated_ios,
                wall_s,
                setup_s,
            });
        }
        other => {
            return Err(RunError::Sim(crate::sim::SimError::Job(format!(
                "unknown benchmark case '{other}'; accepted: {}",
                CASES.join(", ")
            ))))
        }
    };
    let t0 = Instant::now();
    let out = run(&RunInput {
        stack_text: &stack_text,
        stack_path: "<bench>",
        job_text: &job,
        job_path: "<bench>",
        seed: Some(1),
        vm: None,
    })?;
    let wall_s = t0.elapsed().as_secs_f64();
    let simulated_ios = out
        .report
        .jobs
        .iter()
        .map(|j| j.stats.iter().map(|s| s.total_ios).sum::<u64>())
        .sum();
    Ok(BenchResult {
        case,
        simulated_ios,
        wall_s,
        setup_s: 0.0,
    })
}
