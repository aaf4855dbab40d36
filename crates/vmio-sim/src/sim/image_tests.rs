//! The format driver in the whole stack (blocklayer.rs): what a qcow2 disk's requests become
//! on the device, against the closed forms of vmio-core's image tests.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};

/// One VM with a 4 GiB disk of `format` on a 16 GiB flash device, cache=none, and `image`
/// lines for its `[vm.disk.image]`.
fn stack(format: &str, image: &str) -> String {
    format!(
        "[[device]]\nname = \"nvme\"\nmodel = \"flash\"\ncapacity = \"16g\"\n\
         [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"nvme\"]\n\
         [scheduler]\nname = \"none\"\n\
         [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\nsize = \"4g\"\n\
         cache = \"none\"\nformat = \"{format}\"\n[vm.disk.image]\n{image}\n"
    )
}

fn sim(stack_text: &str, job: &str) -> RunOutput {
    run(&RunInput::texts(stack_text, job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

const RANDREAD: &str =
    "[r]\nfilename=/dev/vda\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=8\nnumber_ios=4000\n";

#[test]
fn a_raw_disk_has_no_format_driver_and_reports_none() {
    let o = sim(&stack("raw", ""), RANDREAD);
    assert!(o.report.images.is_empty());
    let d = &o.report.devices[0].stats;
    assert_eq!(d.read_ops, 4000, "one device read per guest read");
}

#[test]
fn every_cold_random_read_of_a_populated_qcow2_image_costs_one_slice_read_more() {
    // 4 GiB at 64 KiB clusters: 65536 L2 entries in 128 slices of 4 KiB; a 4 KiB L2 cache
    // holds one slice, so almost every read misses: device reads = guest reads + misses.
    let o = sim(
        &stack(
            "qcow2",
            "populated = 1.0\nl2_cache_size = \"4k\"\nl2_cache_entry_size = \"4k\"",
        ),
        RANDREAD,
    );
    let i = &o.report.images[0].stats;
    let d = &o.report.devices[0].stats;
    assert_eq!(i.l2_hits + i.l2_misses, 4000);
    assert!(i.l2_misses > 3900, "{i:?}");
    assert_eq!(i.metadata_read_bytes, i.l2_misses * 4096);
    assert_eq!(d.read_ops, 4000 + i.l2_misses);
    assert_eq!(i.allocations + i.metadata_written_bytes, 0);
}

#[test]
fn an_l2_cache_that_covers_the_image_misses_once_per_slice_and_matches_raw_after() {
    // 1 MiB of L2 cache covers 1 MiB x 64 KiB / 8 = 8 GiB: the whole 4 GiB image.
    let q = sim(
        &stack("qcow2", "populated = 1.0\nl2_cache_size = \"1m\""),
        RANDREAD,
    );
    let i = &q.report.images[0].stats;
    assert!(
        i.l2_misses <= 128,
        "at most one miss per 4 KiB slice: {i:?}"
    );
    let small = sim(
        &stack(
            "qcow2",
            "populated = 1.0\nl2_cache_size = \"4k\"\nl2_cache_entry_size = \"4k\"",
        ),
        RANDREAD,
    );
    let iops = |o: &RunOutput| {
        let j = &o.report.jobs[0];
        j.stats[0].total_ios as f64 / j.runtime_ns as f64
    };
    assert!(
        iops(&q) > 2.0 * iops(&small),
        "misses serialise under the image lock: {} vs {}",
        iops(&q),
        iops(&small)
    );
}

#[test]
fn first_writes_to_a_new_qcow2_image_allocate_and_overwrites_do_not() {
    let job = "[w]\nfilename=/dev/vda\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\niodepth=4\nnumber_ios=2000\n";
    let new = sim(&stack("qcow2", "populated = 0.0"), job);
    let i = &new.report.images[0].stats;
    assert!(i.allocations > 1900, "{i:?}");
    // Each 4 KiB first write to a 64 KiB cluster copies (here: zero-fills) the other 60 KiB.
    assert_eq!(
        i.cow_bytes,
        i.allocations * (64 << 10) - 4096 * i.allocations
    );
    let old = sim(&stack("qcow2", "populated = 1.0"), job);
    let o = &old.report.images[0].stats;
    assert_eq!(o.allocations + o.cow_bytes, 0);
    let bw = |o: &RunOutput| {
        o.report.jobs[0].stats[1].total_ios as f64 / o.report.jobs[0].runtime_ns as f64
    };
    assert!(bw(&old) > bw(&new), "{} vs {}", bw(&old), bw(&new));
}

#[test]
fn a_qcow2_run_is_byte_identical_for_one_seed() {
    let s = stack("qcow2", "populated = 0.5\nl2_cache_size = \"64k\"");
    let job = "[m]\nfilename=/dev/vda\nrw=randrw\nbs=4k\nioengine=libaio\ndirect=1\niodepth=8\nnumber_ios=3000\nfsync=16\n";
    let a = run_json(&RunInput::texts(&s, job, 3)).unwrap();
    let b = run_json(&RunInput::texts(&s, job, 3)).unwrap();
    assert_eq!(a, b);
    assert!(a.contains("\"images\""));
}
