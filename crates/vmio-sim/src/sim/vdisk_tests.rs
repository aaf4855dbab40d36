//! The virtual disk's queues, engines and merging in whole runs (guest.rs with vdisk/).

use crate::output::RunOutput;
use crate::run::{run, RunInput};

/// A RAM disk under a VM of `vcpus` vCPUs on QEMU `qemu`, its disk with `disk` extra lines.
fn stack(vcpus: u32, qemu: &str, disk: &str) -> String {
    format!(
        "[host]\ncores = 8\n\
         [[device]]\nname = \"ram0\"\nmodel = \"ram\"\ncapacity = \"4g\"\n\
         [[volume]]\nname = \"r\"\nlayout = \"single\"\ndevices = [\"ram0\"]\n\
         [[vm]]\nname = \"vm1\"\nvcpus = {vcpus}\nqemu_version = \"{qemu}\"\n\
         [[vm.disk]]\nname = \"vda\"\nvolume = \"r\"\nsize = \"3g\"\ncache = \"none\"\n{disk}"
    )
}

fn sim(stack: &str, job: &str) -> RunOutput {
    run(&RunInput::texts(stack, job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

fn read_iops(o: &RunOutput) -> f64 {
    o.report
        .jobs
        .iter()
        .map(|j| j.stats[0].total_ios as f64 / (j.runtime_ns as f64 / 1e9))
        .sum()
}

const TWO_READERS: &str = "[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=16\n\
    numjobs=2\nsize=1g\nruntime=200ms\ntime_based\n";

#[test]
fn two_queues_on_two_iothreads_serve_twice_the_rate_of_one_when_the_vmm_thread_is_the_bottleneck() {
    // Each request costs the VMM thread 6 + 4 µs (virtio-blk, aio=threads): 100k IOPS per
    // thread; the RAM disk (1 µs) and the guest (2 µs of latency) are far from it. The two
    // jobs run on vCPUs 0 and 1, so on queues 0 and 1.
    let queue =
        |iothreads: u32| format!("[vm.disk.queue]\nnum_queues = 2\niothreads = {iothreads}\n");
    let one = read_iops(&sim(&stack(2, "8.2", &queue(1)), TWO_READERS));
    let two = read_iops(&sim(&stack(2, "8.2", &queue(2)), TWO_READERS));
    assert!((one / 100_000.0 - 1.0).abs() < 0.02, "one thread: {one}");
    assert!((two / one - 2.0).abs() < 0.04, "{two} vs {one}");
}

#[test]
fn multireq_merges_the_parts_of_a_large_request_back_into_one_host_request() {
    // A 4 MiB direct write is split by the guest into 4 parts of 1016 KiB and one of 32 KiB
    // (seg_max 254); QEMU merges them (1024 iovecs = IOV_MAX): the RAM disk sees one write
    // per guest write, while the guest counts five.
    let job = "[w]\nrw=write\nbs=4m\nioengine=libaio\ndirect=1\niodepth=1\nsize=64m\n";
    let o = sim(&stack(1, "7.2", ""), job);
    let dev = &o.report.devices[0].stats;
    let guest = &o.report.guest_disks[0].stats;
    assert_eq!(guest.write_ios, 16 * 5);
    assert_eq!(dev.write_ops, 16);
    assert_eq!(dev.write_bytes, 64 << 20);
    // virtio-scsi does not merge (scsi-disk submits each request).
    let o = sim(&stack(1, "7.2", "interface = \"virtio-scsi\"\n"), job);
    assert_eq!(o.report.devices[0].stats.write_ops, 16 * 5);
    // QEMU 2.11: 504 KiB parts (seg_max 126): 9 per 4 MiB; 1024 iovecs = 8 parts of 126
    // pages and the ninth (16 pages) make 1024 iovecs: all nine merge.
    let o = sim(&stack(1, "2.11", ""), job);
    assert_eq!(o.report.guest_disks[0].stats.write_ios, 16 * 9);
    assert_eq!(o.report.devices[0].stats.write_ops, 16);
}

#[test]
fn native_aio_needs_o_direct_in_the_stack_file() {
    let s =
        stack(1, "7.2", "aio = \"native\"\n").replace("cache = \"none\"", "cache = \"writeback\"");
    let e = run(&RunInput::texts(&s, TWO_READERS, 1))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("aio"), "{e}");
}

/// The read clat of a QD1 4 KiB random-read job as fio reports it: (mean, p50, p99), ns.
fn qd1_clat(stack: &str, seed: u64) -> (f64, f64, f64) {
    let job = "[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=1\nsize=1g\n\
        runtime=500ms\ntime_based\n";
    let j = crate::run::run_json(&RunInput::texts(stack, job, seed)).unwrap();
    let j: serde_json::Value = serde_json::from_str(&j).unwrap();
    let c = &j["jobs"][0]["read"]["clat_ns"];
    let p = |q: &str| c["percentile"][q].as_f64().unwrap();
    (c["mean"].as_f64().unwrap(), p("50.000000"), p("99.000000"))
}

/// The virtio-blk RAM disk of [`stack`] with `aio = "native"` and `queue` as its
/// `[vm.disk.queue]` body; `cpu` the `[cpu]` table's body (None: no table, dedicated).
fn spread_stack(cpu: Option<&str>, disk: &str, queue: &str) -> String {
    let cpu = cpu.map_or(String::new(), |c| format!("[cpu]\n{c}\n"));
    let s = stack(
        1,
        "7.2",
        &format!("aio = \"native\"\n{disk}[vm.disk.queue]\n{queue}\n"),
    );
    format!("{cpu}{s}")
}

#[test]
fn with_dedicated_cores_qd1_reads_on_a_ram_disk_pay_two_exponential_wake_ups_of_the_vmm_thread() {
    // The main loop sleeps between the guest's kick and the host's completion and between
    // a completion and the next kick: two wake-ups per request, each exponential of mean
    // 2 µs; the vCPU's sleeps (about 10 µs) are within KVM's halt polling. So the latency
    // is the constant path plus an Erlang(2, 2 µs) delay: mean + 4 µs, p50 + 1.678 m,
    // p99 + 6.638 m (fio's buckets are 256 ns wide here).
    use vmio_core::vdisk::spread::{erlang_quantile, DEFAULT_MEAN_NS};
    let m = DEFAULT_MEAN_NS as f64;
    let (off_mean, off50, off99) = qd1_clat(&spread_stack(None, "", "wake_spread = 0"), 1);
    assert_eq!(off50, off99, "without the spread the path is constant");
    let (mean, p50, p99) = qd1_clat(&spread_stack(None, "", ""), 1);
    // Each draw is rounded down to whole ns: m - 0.5 per wake-up.
    let want = 2.0 * (m - 0.5);
    assert!(
        ((mean - off_mean) - want).abs() < 0.02 * want,
        "mean {off_mean} -> {mean}"
    );
    for (got, p) in [(p50, 0.5), (p99, 0.99)] {
        let want = off50 + erlang_quantile(2, m, p);
        assert!((got - want).abs() < 400.0, "p{p}: {got} against {want}");
    }
    let spread = erlang_quantile(2, m, 0.99) - erlang_quantile(2, m, 0.5);
    assert!(((p99 - p50) - spread).abs() < 0.06 * spread, "{p50} {p99}");
}

#[test]
fn an_iothreads_polling_absorbs_the_short_sleeps_of_a_ram_disk_at_qd1() {
    // The iothread polls for 32.8 µs before it sleeps: the 2 µs between a completion and
    // the next kick and the few µs of the RAM disk never let it sleep.
    let on = qd1_clat(&spread_stack(None, "iothread = true\n", ""), 1);
    let off = qd1_clat(
        &spread_stack(None, "iothread = true\n", "wake_spread = 0"),
        1,
    );
    assert_eq!(on, off);
    assert_eq!(on.1, on.2);
}

#[test]
fn the_spread_is_not_charged_under_cfs_whose_scheduling_gives_the_variability() {
    // The same figures with and without wake_spread (the reports differ only in the stack
    // they echo).
    let cfs = Some("model = \"cfs\"");
    let jobs = |queue: &str| {
        let s = spread_stack(cfs, "", queue);
        let j = crate::run::run_json(&RunInput::texts(&s, TWO_READERS, 3)).unwrap();
        let j: serde_json::Value = serde_json::from_str(&j).unwrap();
        j["jobs"].clone()
    };
    assert_eq!(jobs(""), jobs("wake_spread = \"0us\""));
}

#[test]
fn one_seed_gives_the_same_bytes_and_another_seed_other_draws() {
    let s = spread_stack(None, "", "wake_spread = \"5us\"");
    let a = crate::run::run_json(&RunInput::texts(&s, TWO_READERS, 7)).unwrap();
    let b = crate::run::run_json(&RunInput::texts(&s, TWO_READERS, 7)).unwrap();
    assert_eq!(a, b);
    assert_ne!(qd1_clat(&s, 7), qd1_clat(&s, 8));
}
