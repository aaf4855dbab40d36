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
