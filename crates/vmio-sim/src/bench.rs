//! Simulator benchmarks: simulated I/O completions per wall-clock second on one core.
//!
//! Cases (issue #2):
//! - `hdd-raid0-randread-qd32`: 4 KiB random reads at QD32, cache=none, RAID 0 of two HDDs;
//! - `pagecache-hit-randread-4k`: 4 KiB random reads all served by the host page cache
//!   (cache=writeback, a 256 MiB region read once to warm the cache, then measured).
//!
//! Wall time is measured here, never asserted in tests.

use crate::run::{run, RunError, RunInput};
use std::time::Instant;

pub struct BenchResult {
    pub case: &'static str,
    pub simulated_ios: u64,
    pub wall_s: f64,
}

pub const CASES: [&str; 2] = ["hdd-raid0-randread-qd32", "pagecache-hit-randread-4k"];

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
    })
}
