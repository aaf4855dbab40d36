//! The CPU layer in whole runs: CPU jobs sharing cores, pinning, I/O priced on the CPU.

use crate::run::{run_json, RunInput};
use serde_json::Value;

/// A host of `cores` cores under `hypervisor`, one VM (or group) of `vcpus` vCPUs on an SSD;
/// `cpu` is the `[cpu]` table's body (None: no table) and `extra` more VM keys.
fn stack(cores: u32, hypervisor: &str, vcpus: u32, cpu: Option<&str>, disk: &str) -> String {
    let vcpus = if hypervisor == "native" {
        String::new()
    } else {
        format!("vcpus = {vcpus}\n")
    };
    let cpu = cpu.map_or(String::new(), |c| format!("[cpu]\n{c}\n"));
    format!(
        "[host]\ncores = {cores}\nhypervisor = \"{hypervisor}\"\n{cpu}\
         [[device]]\nname = \"ssd0\"\nmodel = \"ssd\"\n\
         [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"ssd0\"]\n\
         [[vm]]\nname = \"vm1\"\n{vcpus}memory = \"4g\"\n\
         [[vm.disk]]\nname = \"vdb\"\nvolume = \"v\"\nsize = \"8g\"\n{disk}\n"
    )
}

pub(super) fn run(stack: &str, job: &str) -> Value {
    let j = run_json(&RunInput::texts(stack, job, 1)).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&j).unwrap()
}

/// Mean job_runtime (ms) of the jobs.
fn mean_runtime_ms(j: &Value) -> f64 {
    let jobs = j["jobs"].as_array().unwrap();
    jobs.iter()
        .map(|x| x["job_runtime"].as_f64().unwrap())
        .sum::<f64>()
        / jobs.len() as f64
}

fn cpu_jobs(n: u32, profile: &str, work: &str) -> String {
    format!("[j]\ncpu_profile={profile}\ncpu_work={work}\nnumjobs={n}\n")
}

const CFS: Option<&str> = Some("model = \"cfs\"");
const RANDREAD: &str = "[r]\nrw=randread\nbs=4k\ndirect=1\nioengine=libaio\niodepth=1\nruntime=1\ntime_based\nfilename=/dev/vdb\n";

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b
}

#[test]
fn five_cpu_jobs_on_four_cores_each_get_four_fifths_of_a_core() {
    // 1 s of work each, natively: every job needs 5/4 s (a fair share), up to the
    // housekeeping thread and the migrations the rotation needs.
    let s = stack(4, "native", 0, CFS, "");
    let j = run(&s, &cpu_jobs(5, "gobmk", "1s"));
    let ms = mean_runtime_ms(&j);
    assert!(close(ms, 1250.0, 0.02), "{ms} ms");
    let runtimes: Vec<f64> = j["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["job_runtime"].as_f64().unwrap())
        .collect();
    let spread = runtimes.iter().cloned().fold(0.0, f64::max)
        - runtimes.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread < 60.0, "fair shares end together: {runtimes:?}");
    // Three jobs on four cores run at full speed.
    let j = run(&s, &cpu_jobs(3, "gobmk", "1s"));
    assert!(
        close(mean_runtime_ms(&j), 1000.0, 0.005),
        "{}",
        mean_runtime_ms(&j)
    );
}

#[test]
fn jobs_pinned_to_one_core_share_it_and_leave_the_others_idle() {
    let s = stack(4, "native", 0, CFS, "");
    let job = "[j]\ncpu_profile=gobmk\ncpu_work=1s\nnumjobs=2\ncpus_allowed=2\n";
    let j = run(&s, job);
    assert!(
        close(mean_runtime_ms(&j), 2000.0, 0.01),
        "{}",
        mean_runtime_ms(&j)
    );
    let busy = j["vmio"]["cpu"]["core_busy_ns"].as_array().unwrap();
    assert!(busy[2].as_u64().unwrap() >= 2_000_000_000, "{busy:?}");
    let threads = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert!(threads
        .iter()
        .filter(|t| t["kind"] == "job")
        .all(|t| t["migrations"] == 0));
}

#[test]
fn two_vcpus_pinned_to_one_host_core_halve_each_others_speed() {
    let mut s = stack(4, "kvm", 2, CFS, "");
    s.push_str("[vm.cputune]\nvcpupin = [\"1\", \"1\"]\n");
    let j = run(&s, &cpu_jobs(2, "gobmk", "1s"));
    let ms = mean_runtime_ms(&j);
    assert!(close(ms, 2000.0, 0.02), "{ms} ms");
    // Unpinned, they run side by side.
    let j = run(&stack(4, "kvm", 2, CFS, ""), &cpu_jobs(2, "gobmk", "1s"));
    assert!(
        close(mean_runtime_ms(&j), 1000.0, 0.01),
        "{}",
        mean_runtime_ms(&j)
    );
}

#[test]
fn a_busy_vcpu_pays_its_guest_ticks_and_xen_adds_its_credit_ticks() {
    // One job on an otherwise idle 4-core host: its only overhead is the exits of the ticks
    // (250 Hz × 2 × 1.2 µs = 0.06 %; Xen adds 100 Hz × 1.2 µs = 0.012 %).
    let kvm = mean_runtime_ms(&run(
        &stack(4, "kvm", 1, CFS, ""),
        &cpu_jobs(1, "gobmk", "10s"),
    ));
    let xen = mean_runtime_ms(&run(
        &stack(4, "xen", 1, CFS, ""),
        &cpu_jobs(1, "gobmk", "10s"),
    ));
    let native = mean_runtime_ms(&run(
        &stack(4, "native", 0, CFS, ""),
        &cpu_jobs(1, "gobmk", "10s"),
    ));
    assert!(close(native, 10_000.0, 1e-4), "{native}");
    assert!(close(kvm, 10_006.0, 2e-4), "{kvm}");
    assert!(close(xen, 10_007.2, 2e-4), "{xen}");
}

#[test]
fn ide_serialises_commands_where_virtio_blk_queues_them() {
    let job = |qd: u32| RANDREAD.replace("iodepth=1", &format!("iodepth={qd}"));
    for cpu in [None, CFS] {
        let iops = |iface: &str, qd: u32| {
            let s = stack(
                4,
                "kvm",
                1,
                cpu,
                &format!("interface = \"{iface}\"\ncache = \"none\"\n"),
            );
            run(&s, &job(qd))["jobs"][0]["read"]["iops"]
                .as_f64()
                .unwrap()
        };
        let (ide1, ide8) = (iops("ide", 1), iops("ide", 8));
        let (blk1, blk8) = (iops("virtio-blk", 1), iops("virtio-blk", 8));
        assert!(close(ide8, ide1, 0.02), "{cpu:?}: ide {ide1} → {ide8}");
        assert!(blk8 > 3.0 * blk1, "{cpu:?}: virtio-blk {blk1} → {blk8}");
        assert!(blk1 > ide1, "{cpu:?}: {blk1} vs {ide1}");
    }
}

#[test]
fn priced_io_costs_the_dedicated_latency_plus_the_completion_work() {
    // One request at a time on an idle host: the CFS run differs from the dedicated one by
    // the work the dedicated model does not charge: the host kernel's completion (2 µs) and
    // the guest's interrupt (virtio-blk 2 µs), plus the submit and complete work the ticks
    // stretch on the vCPU (negligible here), within the scheduling noise of a few µs. The
    // dedicated path without its wake-up spread (vdisk::spread): its constant costs.
    let disk = "cache = \"none\"\n[vm.disk.queue]\nwake_spread = 0\n";
    let lat = |cpu| {
        let j = run(&stack(4, "kvm", 1, cpu, disk), RANDREAD);
        j["jobs"][0]["read"]["lat_ns"]["mean"].as_f64().unwrap()
    };
    let (dedicated, cfs) = (lat(None), lat(CFS));
    let extra = cfs - dedicated;
    assert!(
        (3_500.0..8_000.0).contains(&extra),
        "{dedicated} → {cfs}: +{extra} ns"
    );
}

#[test]
fn a_busy_core_delays_the_completion_of_io_unless_the_waking_thread_preempts() {
    // One core: a native reader alone, then beside two CPU-bound jobs. With CFS's defaults
    // the reader's thread, which mostly sleeps, is placed behind min_vruntime when it wakes
    // and preempts the running job at once: its latency hardly moves. Without wake-up
    // preemption (a huge wakeup_granularity) its completions wait for the running job's
    // slice to end: milliseconds.
    let hog = format!("{RANDREAD}[h]\ncpu_profile=gobmk\ncpu_work=2s\nnumjobs=2\n");
    let lat = |j: &Value| j["jobs"][0]["read"]["lat_ns"]["mean"].as_f64().unwrap();
    let alone = lat(&run(&stack(1, "native", 0, CFS, ""), RANDREAD));
    let preempting = lat(&run(&stack(1, "native", 0, CFS, ""), &hog));
    let no_preempt = "model = \"cfs\"\nwakeup_granularity = \"1s\"";
    let waiting = lat(&run(&stack(1, "native", 0, Some(no_preempt), ""), &hog));
    assert!(preempting < alone * 1.05, "{preempting} vs {alone}");
    assert!(waiting > alone + 1_000_000.0, "{waiting} vs {alone}");
}

#[test]
fn the_cpu_layer_is_deterministic_and_reported_only_with_a_cpu_table() {
    let s = stack(2, "kvm", 2, CFS, "");
    let job = format!("{}{RANDREAD}", cpu_jobs(3, "bzip2", "200ms"));
    assert_eq!(run(&s, &job), run(&s, &job));
    assert!(run(&stack(2, "kvm", 2, None, ""), RANDREAD)["vmio"]
        .get("cpu")
        .is_none());
}

#[test]
fn io_takes_cpu_from_the_vcpu_it_shares_with_a_cpu_job() {
    // One vCPU runs both a reader and a 1 s CPU job: the vCPU's share of each request (the
    // guest's submit, 2 µs, and interrupt, 2 µs, stretched by the tick exits) is vCPU time
    // on top of the job's.
    let s = stack(4, "kvm", 1, CFS, "cache = \"none\"\n");
    let vcpu_ns = |j: &Value| {
        let t = &j["vmio"]["cpu"]["threads"][0];
        assert_eq!(t["kind"], "vcpu");
        t["cpu_ns"].as_f64().unwrap()
    };
    let alone = vcpu_ns(&run(&s, &cpu_jobs(1, "gobmk", "1s")));
    let both = run(&s, &format!("{}{RANDREAD}", cpu_jobs(1, "gobmk", "1s")));
    let ios = both["jobs"][1]["read"]["total_ios"].as_f64().unwrap();
    assert!(ios > 20.0, "{ios}");
    let extra = vcpu_ns(&both) - alone;
    assert!(
        extra >= 4_000.0 * ios && extra <= 4_100.0 * (ios + 2.0),
        "{extra} ns more vCPU time for {ios} I/Os"
    );
}

#[test]
fn cpus_allowed_policy_split_gives_each_clone_a_cpu_of_its_own() {
    // Natively on 4 cores: four clones split over 2-3 (fio_cpus_split): two per core, half
    // speed, never moving; shared, they would spread over both and rotate alike.
    let s = stack(4, "native", 0, CFS, "");
    let job = "[j]\ncpu_profile=gobmk\ncpu_work=1s\nnumjobs=4\ncpus_allowed=2-3\ncpus_allowed_policy=split\n";
    let j = run(&s, job);
    assert!(
        close(mean_runtime_ms(&j), 2000.0, 0.01),
        "{}",
        mean_runtime_ms(&j)
    );
    let threads = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert!(
        threads
            .iter()
            .filter(|t| t["kind"] == "job")
            .all(|t| t["migrations"] == 0),
        "{threads:?}"
    );
    let busy = j["vmio"]["cpu"]["core_busy_ns"].as_array().unwrap();
    assert!(
        busy[0].as_u64().unwrap() < 100_000_000 && busy[2].as_u64().unwrap() >= 2_000_000_000,
        "{busy:?}"
    );
    // In a VM, two clones allowed on vCPUs 0-1 run one on each.
    let j = run(
        &stack(4, "kvm", 2, CFS, ""),
        "[j]\ncpu_profile=gobmk\ncpu_work=1s\nnumjobs=2\ncpus_allowed=0-1\n",
    );
    assert!(
        close(mean_runtime_ms(&j), 1000.0, 0.01),
        "{}",
        mean_runtime_ms(&j)
    );
    let bad = run_json(&RunInput::texts(
        &s,
        "[j]\ncpu_profile=gobmk\ncpus_allowed=9\n",
        1,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        bad.starts_with("job.fio:1: cpus_allowed: core 9 is not on this host"),
        "{bad}"
    );
}

/// The model's slowdown of `profile` run twice on one L2 of the Q9550 (cores 0 and 1), and
/// on the two L2s (cores 0 and 2).
fn q9550_pair(profile: &str) -> (f64, f64) {
    use vmio_core::cpu::cache::{CacheTopology, PROFILES};
    use vmio_core::cpu::contention::{Contention, NONE, ONE_Q16};
    let p = vmio_core::workload::cpu::find(profile).unwrap().cache;
    let mut m = Contention::new(&CacheTopology::of(&PROFILES[0]), 4);
    let i = m.program(p);
    let q = |s: u32| s as f64 / ONE_Q16 as f64;
    (
        q(m.slowdowns(&[i, i, NONE, NONE])[0]),
        q(m.slowdowns(&[i, NONE, i, NONE])[0]),
    )
}

#[test]
fn two_bzip2_jobs_on_one_l2_of_a_q9550_slow_as_the_model_says_and_pinned_apart_do_not() {
    let q9550 = stack(4, "native", 0, CFS, "").replacen(
        "[cpu]",
        "[host.cache]\nprofile = \"core2-quad-q9550\"\n[cpu]",
        1,
    );
    let (shared, apart) = q9550_pair("bzip2");
    assert!(shared > 1.05 && apart < 1.001, "{shared} {apart}");
    let job = |cpus: &str| {
        format!("[j]\ncpu_profile=bzip2\ncpu_work=2s\nnumjobs=2\ncpus_allowed={cpus}\ncpus_allowed_policy=split\n")
    };
    // Cores 0 and 1 share an L2: the work takes the model's slowdown (the housekeeping
    // thread's 0.2 % of a core comes on top).
    let ms = mean_runtime_ms(&run(&q9550, &job("0-1")));
    assert!(
        close(ms, 2000.0 * shared, 0.003),
        "{ms} vs {}",
        2000.0 * shared
    );
    // Pinned to separate L2s (cores 0 and 2): only the bus is shared.
    let ms = mean_runtime_ms(&run(&q9550, &job("0,2")));
    assert!(
        close(ms, 2000.0 * apart, 0.003),
        "{ms} vs {}",
        2000.0 * apart
    );
    // Without [host.cache] the same jobs run at their nominal speed, as before the model.
    let plain = stack(4, "native", 0, CFS, "");
    let ms = mean_runtime_ms(&run(&plain, &job("0-1")));
    assert!(close(ms, 2000.0, 0.003), "{ms}");
}

#[test]
fn a_cache_topology_changes_nothing_for_dedicated_cores_or_cpuio() {
    let base = stack(4, "kvm", 2, None, "");
    let with = base.replacen(
        "[[device]]",
        "[host.cache]\nprofile = \"core-i5-6600\"\n[[device]]",
        1,
    );
    let job = cpu_jobs(2, "bzip2", "1s");
    let (a, b) = (run(&base, &job), run(&with, &job));
    assert_eq!(a["jobs"], b["jobs"]);
    // cpuio touches no memory: no curve, no slowdown, under cfs too.
    let cfs = stack(4, "native", 0, CFS, "");
    let cfs_with = cfs.replacen(
        "[cpu]",
        "[host.cache]\nprofile = \"core-i5-6600\"\n[cpu]",
        1,
    );
    let job = "[j]\nioengine=cpuio\ncpuload=100\nruntime=1\nnumjobs=2\n";
    assert_eq!(run(&cfs, job)["jobs"], run(&cfs_with, job)["jobs"]);
}

#[test]
fn a_host_without_ept_adds_the_shadow_mmus_exits_and_tlb_refills_to_a_busy_vcpu() {
    // One job alone: 10 s of work takes vcpu_time(10 s): the tick exits (6 ms), and without
    // EPT 250 shadow exits × 4 µs and 750 TLB refills × 2.5 µs a second more (28.75 ms).
    let with = mean_runtime_ms(&run(
        &stack(4, "kvm", 1, CFS, ""),
        &cpu_jobs(1, "gobmk", "10s"),
    ));
    let without = mean_runtime_ms(&run(
        &stack(4, "kvm", 1, CFS, "").replacen("hypervisor", "ept = false\nhypervisor", 1),
        &cpu_jobs(1, "gobmk", "10s"),
    ));
    // (fio's job_runtime is in whole ms.)
    assert!((with - 10_006.0).abs() <= 1.0, "{with}");
    assert!(
        (without - (10_000.0 + 6.0 + 28.75)).abs() <= 1.0,
        "{without}"
    );
}

#[test]
fn the_vmms_footprint_takes_from_the_jobs_of_the_l2_it_is_pinned_beside_and_nothing_elsewhere() {
    use vmio_core::cpu::cache::{CacheTopology, PROFILES};
    use vmio_core::cpu::contention::{Contention, NONE};
    use vmio_core::cpu::hypervisor::VMM_FOOTPRINT;
    // Two bzip2 jobs on vCPUs pinned to cores 0 and 1 (one L2 of the Q9550); QEMU's main
    // loop pinned to core 2 (the other L2, no job) or to cores 0-1 (the jobs' L2).
    let stack = |pin: &str| {
        stack(4, "kvm", 2, CFS, "").replacen(
            "[cpu]",
            "[host.cache]\nprofile = \"core2-quad-q9550\"\n[cpu]",
            1,
        ) + &format!("[vm.cputune]\nvcpupin = [\"0\", \"1\"]\nemulatorpin = \"{pin}\"\n")
    };
    let job = cpu_jobs(2, "bzip2", "2s");
    let apart = mean_runtime_ms(&run(&stack("2"), &job));
    let beside = mean_runtime_ms(&run(&stack("0-1"), &job));
    let mut m = Contention::new(&CacheTopology::of(&PROFILES[0]), 4);
    let b = m.program(vmio_core::workload::cpu::find("bzip2").unwrap().cache);
    let v = m.program(VMM_FOOTPRINT);
    let shared = m.solve_with(&[b, b, NONE, NONE], &[]).slow[0];
    let resident = m.solve_with(&[b, b, NONE, NONE], &[1 << v, 0]).slow[0];
    // Apart: the pair's own slowdown (the guest ticks' 0.06 % and housekeeping aside).
    assert!(
        close(apart, 2000.0 * shared, 0.003),
        "{apart} vs {}",
        2000.0 * shared
    );
    // Beside: its 256 KiB stay in the jobs' L2 (it comes back every 1 ms, within T_C), so
    // each job holds (6 MiB − 256 KiB) / 2, and its 5 µs per ms take 0.5 % of one of the
    // two cores.
    let want = apart * resident / shared * (1.0 + 0.005 / 2.0);
    assert!(resident > shared * 1.005, "{resident} {shared}");
    assert!(
        close(beside, want, 0.003),
        "{beside} vs {want} (apart {apart})"
    );
}

/// A cfs host whose RAM disk answers after `latency`, under a job of 16 writes at once.
fn far_io(latency: &str) -> (String, &'static str) {
    let s = format!(
        "[host]\ncores = 2\n[cpu]\nmodel = \"cfs\"\n\
         [[device]]\nname = \"r\"\nmodel = \"ram\"\ncapacity = \"1g\"\nlatency = \"{latency}\"\n\
         [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"r\"]\n\
         [[vm]]\nname = \"vm1\"\nvcpus = 2\nmemory = \"1g\"\n\
         [vm.cputune]\nvcpupin = [\"0\", \"1\"]\nemulatorpin = \"1\"\n\
         [[vm.disk]]\nname = \"vdb\"\nvolume = \"v\"\nsize = \"512m\"\ncache = \"none\"\n"
    );
    let job = "[w]\nrw=randwrite\nbs=4k\ndirect=1\nioengine=libaio\niodepth=16\nsize=64k\nfilename=/dev/vdb\n";
    (s, job)
}

/// The run's JSON and the events it handled one by one, with or without the fast-forward.
fn run_counted(stack: &str, job: &str, fast_forward: bool) -> (String, u64) {
    super::cpu::FAST_FORWARD.with(|f| f.set(fast_forward));
    let j = run_json(&RunInput::texts(stack, job, 1)).unwrap_or_else(|e| panic!("{e}"));
    super::cpu::FAST_FORWARD.with(|f| f.set(true));
    (j, super::cpu::HANDLED.with(|h| h.get()))
}

#[test]
fn a_cfs_run_waiting_on_far_future_io_skips_its_idle_ticks_and_reports_the_same_bytes() {
    // 16 writes of 20 s each on a 2-core host: the main loop (1 kHz) and housekeeping
    // (100 Hz) tick 22,000 times (each a tick and a completion) while nothing else
    // happens. Fast-forwarded, the report is byte for byte the tick-by-tick
    // one (the same events counted, the same CPU time on each thread and core).
    let (s, job) = far_io("20s");
    let (slow, slow_handled) = run_counted(&s, job, false);
    let (fast, fast_handled) = run_counted(&s, job, true);
    assert_eq!(fast, slow);
    let v: Value = serde_json::from_str(&fast).unwrap();
    let events = v["vmio"]["events"].as_u64().unwrap();
    assert_eq!(events, slow_handled);
    assert!(slow_handled > 20 * 1100 * 2, "{slow_handled}");
    // Handled one by one: the periods before the steady state is proven (the main loop's
    // min_vruntime must pass latency / 2 = 6 ms at 5 µs a millisecond, 1.2 s, and
    // housekeeping's vruntime be drawn up to it: about 3 s) and the last period before the
    // writes complete.
    assert!(fast_handled < 8000, "{fast_handled} of {events}");
}

#[test]
fn the_ticks_a_cfs_run_handles_while_idle_do_not_grow_with_the_idle_time() {
    let handled = |latency: &str| {
        let (s, job) = far_io(latency);
        run_counted(&s, job, true).1
    };
    let (short, long) = (handled("20s"), handled("1000d"));
    assert!(
        long <= short + 100,
        "20 s: {short} events, 1000 days: {long}"
    );
}

#[test]
fn every_cfs_run_with_idle_gaps_reports_the_same_bytes_fast_forwarded_or_tick_by_tick() {
    // Hosts that idle between requests (a rate of 20 I/Os a second: 50 ms gaps; of 1: 1 s
    // gaps) under every hypervisor, with and without a shared cache model, NBD's
    // thread pool, and a second VM: the fast-forward may only skip what would repeat.
    let q9550 = |s: String| {
        s.replacen(
            "[cpu]",
            "[host.cache]\nprofile = \"core2-quad-q9550\"\n[cpu]",
            1,
        )
    };
    let rated = "[r]\nrw=randrw\nbs=4k\ndirect=1\nioengine=libaio\niodepth=2\nrate_iops=20\nruntime=3\ntime_based\nfilename=/dev/vdb\n";
    let (far, far_job) = far_io("20s");
    let mut cases = vec![
        (far.clone(), far_job.to_string()),
        (
            q9550(far.replace("cores = 2", "cores = 4")),
            far_job.to_string(),
        ),
    ];
    for hv in ["kvm", "xen", "native"] {
        let s = stack(4, hv, 2, CFS, "cache = \"none\"\n");
        cases.push((s.clone(), rated.to_string()));
        cases.push((q9550(s), rated.to_string()));
    }
    let nbd = stack(
        2,
        "kvm",
        2,
        CFS,
        "interface = \"nbd\"\ncache = \"none\"\naio = \"threads\"\n",
    ) + "[nbd]\npool_cpu = \"30us\"\n";
    cases.push((nbd, rated.to_string()));
    // One I/O a second for 20 s: idle gaps long enough to skip, entered and left 20 times.
    let sparse = rated
        .replace("rate_iops=20", "rate_iops=1")
        .replace("runtime=3", "runtime=20");
    for hv in ["kvm", "xen", "native"] {
        cases.push((stack(4, hv, 2, CFS, "cache = \"none\"\n"), sparse.clone()));
    }
    let mut skipped = 0;
    for (s, job) in &cases {
        let (slow, slow_handled) = run_counted(s, job, false);
        let (fast, fast_handled) = run_counted(s, job, true);
        assert_eq!(fast, slow, "{s}\n{job}");
        skipped += slow_handled - fast_handled;
    }
    assert!(skipped > 0, "some run fast-forwarded");
}

#[test]
fn a_cfs_run_stopped_by_its_time_bound_while_idle_stops_at_the_same_event_fast_forwarded() {
    let (s, job) = far_io("1000d");
    let stopped = |fast_forward: bool| {
        super::cpu::FAST_FORWARD.with(|f| f.set(fast_forward));
        let jobs = [crate::run::VmJob {
            vm: None,
            job_text: job,
            job_path: "job.fio",
        }];
        let limits = super::Limits {
            max_sim_time_ns: 20 * vmio_core::SEC + 1,
            ..super::Limits::default()
        };
        let r = crate::run::run_many_watched(&s, "stack.toml", &jobs, Some(1), None, limits);
        super::cpu::FAST_FORWARD.with(|f| f.set(true));
        match r {
            Err(e) => e.to_string(),
            Ok(_) => panic!("the run ended within its bound"),
        }
    };
    let m = stopped(true);
    assert_eq!(m, stopped(false));
    // The ticks at 20 s are within the bound; the end of the first one's work (a main-loop
    // wake-up of 5 µs) is the first event past it.
    assert!(m.contains("its next event was due at 20.000 s"), "{m}");
}
