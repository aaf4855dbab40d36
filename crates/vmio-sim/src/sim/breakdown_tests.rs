//! The per-layer breakdown (breakdown.rs) against closed forms, on whole runs.

use super::breakdown::{LayerFigures, LAYERS};
use crate::output::RunOutput;
use crate::run::{run, RunInput};

/// A VM's virtio disk of 1 GiB on a RAM device of `latency` and 1 TB/s under `cache`, with
/// `extra` appended to the disk (an iotune table) and `host` to `[host]`.
fn vm_stack(latency: &str, cache: &str, host: &str, extra: &str) -> String {
    format!(
        "[host]\nmemory = \"4g\"\n{host}\n[[device]]\nname = \"ram0\"\nmodel = \"ram\"\ncapacity = \"4g\"\n\
         latency = \"{latency}\"\nbandwidth = 1000000000000\n\
         [[volume]]\nname = \"r\"\nlayout = \"single\"\ndevices = [\"ram0\"]\n\
         [scheduler]\nname = \"none\"\n[page_cache]\nmemory = \"1g\"\n\
         [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"r\"\nsize = \"1g\"\n\
         cache = \"{cache}\"\n{extra}"
    )
}

/// An SSD (the default model) under a VM's disk with cache = none.
const SSD_STACK: &str = "[[device]]\nname = \"nv0\"\nmodel = \"ssd\"\ncapacity = \"16g\"\n\
    [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"nv0\"]\n\
    [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"4g\"\ncache = \"none\"\n";

/// A native host (no VM) whose disk is a RAM device of `latency` and 1 TB/s.
fn native_stack(latency: &str) -> String {
    format!(
        "[host]\nhypervisor = \"native\"\n[[device]]\nname = \"a\"\nmodel = \"ram\"\n\
         capacity = \"1g\"\nlatency = \"{latency}\"\nbandwidth = 1000000000000\n\
         [[volume]]\nname = \"data\"\nlayout = \"single\"\ndevices = [\"a\"]\n\
         [scheduler]\nname = \"none\"\n[[vm]]\nname = \"host\"\n\
         [[vm.disk]]\nname = \"sda\"\nvolume = \"data\"\n"
    )
}

fn sim(stack: &str, job: &str) -> RunOutput {
    run(&RunInput::texts(stack, job, 7)).unwrap_or_else(|e| panic!("{e}\n{stack}"))
}

/// The first job's layers by name.
fn layers(o: &RunOutput) -> Vec<LayerFigures> {
    o.report.jobs[0].breakdown.figures()
}

fn layer<'a>(f: &'a [LayerFigures], name: &str) -> &'a LayerFigures {
    f.iter()
        .find(|l| l.layer == name)
        .expect("a layer of LAYERS")
}

/// The first job's mean total latency (fio's lat) over its reads, writes and trims, ns.
fn lat_mean(o: &RunOutput) -> f64 {
    let s = &o.report.jobs[0].stats[..3];
    let n: u64 = s.iter().map(|d| d.lat.count()).sum();
    s.iter()
        .map(|d| d.lat.mean() * d.lat.count() as f64)
        .sum::<f64>()
        / n as f64
}

const QD1_READ: &str = "[j]\nrw=randread\nbs=4k\nioengine=psync\ndirect=1\nsize=512m\n\
    runtime=1\ntime_based\n";

#[test]
fn the_layers_means_add_up_to_the_jobs_mean_latency_on_every_stack() {
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "direct I/O on an SSD",
            SSD_STACK.into(),
            "[j]\nrw=randrw\nbs=4k\nioengine=libaio\niodepth=16\ndirect=1\nsize=2g\nruntime=1\ntime_based\n",
        ),
        (
            "cached through the host page cache",
            vm_stack("20us", "writeback", "", ""),
            "[j]\nrw=randrw\nbs=4k\nioengine=libaio\niodepth=8\ndirect=1\nsize=64m\nruntime=1\ntime_based\n",
        ),
        (
            "through the guest's page cache",
            vm_stack("20us", "none", "", ""),
            "[j]\nrw=randrw\nbs=4k\nioengine=psync\ndirect=0\nsize=64m\nruntime=1\ntime_based\n",
        ),
        (
            "cpu cfs on",
            vm_stack("20us", "none", "cores = 2\n[cpu]\nmodel = \"cfs\"", ""),
            "[j]\nrw=randread\nbs=4k\nioengine=libaio\niodepth=8\ndirect=1\nsize=64m\nnumjobs=3\nruntime=1\ntime_based\n",
        ),
        (
            "throttled",
            vm_stack("20us", "none", "", "[vm.disk.iotune]\ntotal_iops_sec = 2000\n"),
            "[j]\nrw=randwrite\nbs=4k\nioengine=libaio\niodepth=4\ndirect=1\nsize=64m\nruntime=1\ntime_based\n",
        ),
    ];
    for (what, stack, job) in cases {
        let o = sim(&stack, job);
        let f = layers(&o);
        let sum: f64 = f.iter().map(|l| l.mean_ns).sum();
        let lat = lat_mean(&o);
        assert!(
            (sum - lat).abs() <= 1e-6 * lat,
            "{what}: layers {sum} vs lat {lat}: {f:?}"
        );
        let shares: f64 = f.iter().map(|l| l.share).sum();
        assert!((shares - 1.0).abs() < 1e-9, "{what}: {shares}");
        // Nothing falls through to the job's own time on these stacks.
        assert_eq!(layer(&f, "job").mean_ns, 0.0, "{what}: {f:?}");
        assert_eq!(f.len(), LAYERS.len());
    }
}

#[test]
fn a_native_qd1_job_on_a_ram_device_spends_its_time_in_device_service() {
    // A RAM device serves a 4 KiB read in latency + 4096 / bandwidth (ram.rs): 100 µs and
    // 4 ns; at depth 1 nothing queues, and there is no VM.
    let o = sim(&native_stack("100us"), QD1_READ);
    let f = layers(&o);
    let dev = layer(&f, "device");
    let want = 100_000.0 + 4.096;
    assert!((dev.mean_ns / want - 1.0).abs() < 1e-3, "{f:?}");
    assert!(dev.share > 0.95, "{f:?}");
    assert_eq!(layer(&f, "scheduler").mean_ns, 0.0);
    assert_eq!(layer(&f, "vm.disk.guest_queue").mean_ns, 0.0);
    // Every read the same: its percentiles are the mean's bucket.
    assert!((dev.p99_ns as f64 / want - 1.0).abs() < 0.02, "{f:?}");
}

#[test]
fn a_throttled_qd1_job_waits_in_iotune_for_its_token_as_the_bucket_says() {
    // QEMU's leaky bucket at 1000 requests/s: past the burst (the ramp), a depth-1 job gets
    // one request through per ms, so each waits 1 ms less its own unthrottled latency.
    let free = sim(&vm_stack("20us", "none", "", ""), QD1_READ);
    let t1 = lat_mean(&free);
    let job = QD1_READ.replace("runtime=1", "ramp_time=1\nruntime=2");
    let o = sim(
        &vm_stack(
            "20us",
            "none",
            "",
            "[vm.disk.iotune]\ntotal_iops_sec = 1000\n",
        ),
        &job,
    );
    let f = layers(&o);
    let thr = layer(&f, "vm.disk.iotune").mean_ns;
    let want = 1e6 - t1;
    assert!((thr / want - 1.0).abs() < 0.01, "{thr} vs {want}: {f:?}");
    assert!((lat_mean(&o) / 1e6 - 1.0).abs() < 0.01, "{}", lat_mean(&o));
    assert_eq!(layer(&layers(&free), "vm.disk.iotune").mean_ns, 0.0);
}

#[test]
fn a_read_that_hits_the_guests_page_cache_spends_no_time_in_the_device() {
    // 1 MiB read over and over through the guest's page cache: after the first pass (the
    // ramp) every read is a copy in the guest.
    let job = "[j]\nrw=randread\nbs=4k\nioengine=psync\ndirect=0\nsize=1m\nramp_time=100ms\nruntime=1\ntime_based\n";
    let o = sim(&vm_stack("100us", "none", "", ""), job);
    let f = layers(&o);
    assert!(layer(&f, "device").mean_ns < 1.0, "{f:?}");
    assert!(layer(&f, "vm.page_cache").share > 0.999, "{f:?}");
    // The same reads with direct=1: each goes down to the device.
    let o = sim(
        &vm_stack("100us", "none", "", ""),
        &job.replace("direct=0", "direct=1"),
    );
    let f = layers(&o);
    assert!(layer(&f, "device").mean_ns > 100_000.0, "{f:?}");
    assert_eq!(layer(&f, "vm.page_cache").mean_ns, 0.0);
}

#[test]
fn a_read_served_by_the_host_page_cache_spends_no_time_in_the_device() {
    // cache = writeback over 1 MiB: after the first pass every read is a host page-cache hit.
    let job = "[j]\nrw=randread\nbs=4k\nioengine=psync\ndirect=1\nsize=1m\nramp_time=100ms\nruntime=1\ntime_based\n";
    let o = sim(&vm_stack("100us", "writeback", "", ""), job);
    let f = layers(&o);
    assert!(layer(&f, "device").mean_ns < 1.0, "{f:?}");
    assert!(layer(&f, "page_cache").mean_ns > 0.0, "{f:?}");
}
