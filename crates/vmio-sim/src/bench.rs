//! Simulator benchmarks: simulated I/O completions per wall-clock second on one core.
//!
//! Cases:
//! - `hdd-raid0-randread-qd32`: 4 KiB random reads at QD32, cache=none, RAID 0 of two HDDs;
//! - `ssd-aged-mcfq-randwrite-4k`: four VMs (weights 1000/700/400/100) writing 4 KiB blocks
//!   randomly at QD32 each to an aged 256 GB SSD (the FTL doing GC) under MCFQ (S1); aging
//!   the SSD (milliseconds: its layout is kept implicit, see `device::ftl`) is timed apart as
//!   the set-up, not in the run's wall time;
//! - `pagecache-hit-randread-4k`: 4 KiB random reads all served by the host page cache
//!   (cache=writeback, a 256 MiB region read once to warm the cache, then measured);
//! - `guest-cache-hit-randread-4k`: 4 KiB buffered random reads (`direct=0`) all
//!   served by the guest's page cache (cache=none: the host caches nothing): a 256 MiB region
//!   read once with `direct=0`, then measured with fio's `invalidate=0`, which keeps the pages
//!   the warm-up left (fio's default `invalidate=1` would drop them as the job starts);
//! - `filebench-varmail-ext4-ssd`: FileBench varmail (16 threads, fsync-heavy
//!   mail-server flows) on the ext4 filesystem of a 30 GiB disk, one 1 GiB VM, cache=none,
//!   on a clean 256 GB SSD; simulated I/Os are varmail's file operations (its flowops).
//! - `pdc-varmail-ext4-ssd`: the same with `cache = "pdc"` and a 16 MiB journal,
//!   so the detector finds the journal early in the run and bypasses its writes from then on
//!   (PDC's cost over the writeback path, next to the case before).
//! - `cpu-kvm-virtio-randread-4k`: the CPU layer active on the I/O path: a
//!   4-core KVM host (`[cpu] model = "cfs"`), one VM of 2 vCPUs with a virtio-blk disk,
//!   cache=none, on a clean 256 GB SSD; 4 KiB random reads at QD32 on one vCPU while a
//!   gobmk-like CPU job runs on the other; every request's submit, VMM, host-completion and
//!   interrupt work is scheduled by CFS (five CPU work items per I/O).
//! - `qcow2-l2miss-randread-4k`: QEMU's block layer at work: a populated 40 GiB qcow2 image
//!   (64 KiB clusters) on the flash model's NVMe profile, cache=none, with a 1 MiB L2 cache
//!   of 4 KiB slices (it covers 8 GiB: about 4 of 5 lookups miss and read a slice under the
//!   image lock), 4 KiB random reads at QD32.
//!
//! Wall time is measured here, never asserted in tests.

use crate::output::RunOutput;
use crate::run::{run, RunError, RunInput};
use crate::sim::{bind_jobs, JobReport, Sim};
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

pub const CASES: [&str; 8] = [
    "hdd-raid0-randread-qd32",
    "pagecache-hit-randread-4k",
    "ssd-aged-mcfq-randwrite-4k",
    "guest-cache-hit-randread-4k",
    "filebench-varmail-ext4-ssd",
    "pdc-varmail-ext4-ssd",
    "cpu-kvm-virtio-randread-4k",
    "qcow2-l2miss-randread-4k",
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

/// One VM of 1 GiB with a 30 GiB disk holding an ext4 filesystem mounted at /mnt/vdb, on a
/// clean `samsung-840pro-256g`, cache=none.
pub(crate) fn ext4_ssd_stack() -> String {
    ext4_ssd_stack_with("none", "")
}

/// [`ext4_ssd_stack`] with host cache mode `cache` and extra `[vm.disk.filesystem]` lines.
fn ext4_ssd_stack_with(cache: &str, filesystem: &str) -> String {
    format!(
        "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\nprofile = \"samsung-840pro-256g\"\n\
         [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"ssd\"]\n\
         [[vm]]\nname = \"vm1\"\nmemory = \"1g\"\n\
         [[vm.disk]]\nname = \"vdb\"\nvolume = \"vol\"\nsize = \"30g\"\ncache = \"{cache}\"\n\
         [vm.disk.filesystem]\ntype = \"ext4\"\nmount = \"/mnt/vdb\"\n{filesystem}"
    )
}

/// The stack and job file of a case that runs as a plain `vmio sim` run (every case but the
/// aged-SSD one, whose set-up is timed apart), for `ms` milliseconds of simulated time (HDD
/// I/Os are slow in virtual time, so that case simulates 30× longer to reach a measurable
/// number of I/Os; varmail 1.5×, for a stable figure from its 16 threads' flows; guest cache
/// hits are fast in virtual time, about 5 M a second at QD1, so that case simulates ¼).
fn run_inputs(case: &str, ms: u64) -> Option<(&'static str, String, String)> {
    Some(match case {
        "hdd-raid0-randread-qd32" => (
            CASES[0],
            two_hdd_stack("raid0", "none"),
            format!("[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=100g\ntime_based\nruntime={}ms\n", ms * 30),
        ),
        "pagecache-hit-randread-4k" => (
            CASES[1],
            two_hdd_stack("raid0", "writeback"),
            format!("[warm]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\niodepth=4\nsize=256m\n[r]\nstonewall\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=256m\ntime_based\nruntime={ms}ms\n"),
        ),
        "guest-cache-hit-randread-4k" => (
            CASES[3],
            two_hdd_stack("raid0", "none"),
            format!("[warm]\nrw=read\nbs=1m\nioengine=psync\ndirect=0\nsize=256m\n[r]\nstonewall\ninvalidate=0\nrw=randread\nbs=4k\nioengine=psync\ndirect=0\nsize=256m\ntime_based\nruntime={}ms\n", ms / 4),
        ),
        "filebench-varmail-ext4-ssd" => (
            CASES[4],
            ext4_ssd_stack(),
            format!("[varmail]\nfilebench=varmail\ntime_based\nruntime={}ms\n", ms * 3 / 2),
        ),
        "pdc-varmail-ext4-ssd" => (
            CASES[5],
            ext4_ssd_stack_with("pdc", "journal_size = \"16m\"\n"),
            format!("[varmail]\nfilebench=varmail\ntime_based\nruntime={}ms\n", ms * 3 / 2),
        ),
        "cpu-kvm-virtio-randread-4k" => (
            CASES[6],
            format!(
                "[host]\ncores = 4\n[cpu]\nmodel = \"cfs\"\n{}",
                ext4_ssd_stack().replace("memory = \"1g\"", "memory = \"1g\"\nvcpus = 2")
            ),
            format!("[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nfilename=/dev/vdb\ntime_based\nruntime={ms}ms\n[c]\ncpu_profile=gobmk\ncpu_work={ms}ms\n"),
        ),
        "qcow2-l2miss-randread-4k" => (
            CASES[7],
            "[[device]]\nname = \"nvme\"\nmodel = \"flash\"\n\
             [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"nvme\"]\n\
             [scheduler]\nname = \"none\"\n\
             [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\nsize = \"40g\"\n\
             cache = \"none\"\nformat = \"qcow2\"\n\
             [vm.disk.image]\nl2_cache_size = \"1m\"\nl2_cache_entry_size = \"4k\"\npopulated = 1.0\n"
                .to_string(),
            format!("[r]\nfilename=/dev/vda\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\ntime_based\nruntime={}ms\n", ms * 4),
        ),
        _ => return None,
    })
}

/// Run one benchmark case for `seconds` of simulated time (see [`run_inputs`]; the aged-SSD
/// case 3×).
pub fn bench(case: &str, seconds: u64) -> Result<BenchResult, RunError> {
    let (case, stack_text, job) = match run_inputs(case, seconds * 1000) {
        Some(inputs) => inputs,
        None if case == CASES[2] => {
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
            let report = sim.run()?;
            let wall_s = t1.elapsed().as_secs_f64();
            return Ok(BenchResult {
                case: CASES[2],
                simulated_ios: total_ios(&report.jobs),
                wall_s,
                setup_s,
            });
        }
        None => {
            return Err(RunError::Sim(crate::sim::SimError::Job(format!(
                "unknown benchmark case '{case}'; accepted: {}",
                CASES.join(", ")
            ))))
        }
    };
    let t0 = Instant::now();
    let out = run_texts(&stack_text, &job)?;
    let wall_s = t0.elapsed().as_secs_f64();
    Ok(BenchResult {
        case,
        simulated_ios: total_ios(&out.report.jobs),
        wall_s,
        setup_s: 0.0,
    })
}

/// `vmio sim` on a case's stack and job texts, seed 1.
fn run_texts(stack_text: &str, job_text: &str) -> Result<RunOutput, RunError> {
    run(&RunInput {
        stack_text,
        stack_path: "<bench>",
        job_text,
        job_path: "<bench>",
        seed: Some(1),
        vm: None,
    })
}

/// I/Os completed by all jobs, every direction (a file operation or fsync counts one).
fn total_ios(jobs: &[JobReport]) -> u64 {
    jobs.iter()
        .map(|j| j.stats.iter().map(|s| s.total_ios).sum::<u64>())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_case(case: &str, ms: u64) -> RunOutput {
        let (_, stack_text, job) = run_inputs(case, ms).expect("a run case");
        run_texts(&stack_text, &job).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_guest_cache_case_reads_its_region_once_and_serves_every_measured_read_from_memory() {
        let o = run_case("guest-cache-hit-randread-4k", 400);
        let g = &o.report.guests[0].1;
        let measured = o.report.jobs[1].stats[0].total_ios;
        assert!(measured > 10_000, "{measured}");
        assert_eq!(total_ios(&o.report.jobs), 256 + measured);
        assert_eq!(
            g.disks[0].read_bytes,
            256 << 20,
            "only the warm-up reads the disk"
        );
        assert_eq!(
            g.cache.miss_pages,
            (256 << 20) / 4096,
            "the warm-up's pages"
        );
        // Every measured read is a hit, and so is the one (QD1) completing past the window.
        assert!(
            (measured..=measured + 1).contains(&g.cache.hit_pages),
            "{} hits for {measured} reads",
            g.cache.hit_pages
        );
    }

    #[test]
    fn the_varmail_case_runs_its_flows_with_fsyncs_through_the_ext4_journal() {
        let o = run_case("filebench-varmail-ext4-ssd", 1000);
        let d = &o.report.guests[0].1.disks[0];
        assert!(total_ios(&o.report.jobs) > 1000);
        assert!(
            d.fsyncs > 0 && d.journal.as_ref().is_some_and(|j| j.commits > 0),
            "{d:?}"
        );
    }

    #[test]
    fn the_pdc_case_finds_the_varmail_journal_and_bypasses_its_writes() {
        let o = run_case("pdc-varmail-ext4-ssd", 1000);
        let p = &o.report.pdc;
        assert_eq!(p.len(), 1);
        let r = &p[0].detector;
        assert!(total_ios(&o.report.jobs) > 1000);
        assert_eq!((r.precision, r.recall), (Some(1.0), Some(1.0)), "{r:?}");
        assert!(r.stats.bypassed_bytes > 0, "{r:?}");
    }

    #[test]
    fn the_qcow2_case_misses_its_l2_cache_on_most_reads() {
        let o = run_case("qcow2-l2miss-randread-4k", 50);
        let i = &o.report.images[0].stats;
        let reads = total_ios(&o.report.jobs);
        assert!(reads > 1000, "{reads}");
        // 1 MiB of L2 cache covers 8 GiB of the 40 GiB image: 1 - 8/40 of cold lookups miss.
        let miss = i.l2_misses as f64 / (i.l2_hits + i.l2_misses) as f64;
        assert!((0.75..0.85).contains(&miss), "miss ratio {miss}: {i:?}");
    }

    #[test]
    fn an_unknown_case_is_refused_naming_the_accepted_ones() {
        let e = bench("nope", 1).err().expect("an error").to_string();
        assert!(e.contains("'nope'") && e.contains(&CASES.join(", ")), "{e}");
    }
}
