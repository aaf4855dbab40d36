//! The format driver in the whole stack (blocklayer.rs): what a qcow2 disk's requests become
//! on the device, against the closed forms of vmio-core's image tests.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};
use vmio_core::Ns;

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

/// [`stack`] with the image file on an ext4 volume and the VM on QEMU `version`.
fn stack_on_ext4(version: &str, image: &str) -> String {
    stack("qcow2", image)
        .replace(
            "devices = [\"nvme\"]\n",
            "devices = [\"nvme\"]\nfilesystem = \"ext4\"\n",
        )
        .replace(
            "name = \"vm1\"\n",
            &format!("name = \"vm1\"\nqemu_version = \"{version}\"\n"),
        )
}

#[test]
fn a_first_write_to_a_2m_cluster_is_much_cheaper_on_qemu_7_2_than_on_2_11() {
    // 4 KiB random first writes to 2 MiB clusters: QEMU 2.11 writes each whole cluster (the
    // guest's 4 KiB and 2 MiB - 4 KiB of zero buffers); 7.2 zeroes it with one write-zeroes
    // of the image file (handle_alloc_space) and writes the 4 KiB alone.
    let job = "[w]\nfilename=/dev/vda\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\niodepth=4\nnumber_ios=400\n";
    let image = "cluster_size = \"2m\"\npopulated = 0.0";
    let old = sim(&stack_on_ext4("2.11", image), job);
    let new = sim(&stack_on_ext4("7.2", image), job);
    let (o, n) = (&old.report.images[0].stats, &new.report.images[0].stats);
    assert_eq!(o.allocations, n.allocations);
    assert!(n.allocations > 300, "{n:?}");
    let cs = 2u64 << 20;
    assert_eq!(
        (o.zeroed_bytes, o.cow_bytes),
        (0, o.allocations * (cs - 4096))
    );
    assert_eq!((n.zeroed_bytes, n.cow_bytes), (n.allocations * cs, 0));
    // The device sees the 2 MiB writes only on 2.11.
    let written = |r: &RunOutput| r.report.devices[0].stats.write_bytes;
    assert!(written(&old) > n.allocations * cs, "{}", written(&old));
    assert!(
        written(&new) < written(&old) / 20,
        "{} vs {}",
        written(&new),
        written(&old)
    );
    let iops = |r: &RunOutput| {
        r.report.jobs[0].stats[1].total_ios as f64 / r.report.jobs[0].runtime_ns as f64
    };
    assert!(
        iops(&new) > 5.0 * iops(&old),
        "{} vs {}",
        iops(&new),
        iops(&old)
    );
}

#[test]
fn a_read_of_a_new_qcow2_image_costs_the_zero_fill_of_its_buffer() {
    // 1 MiB sequential reads of a new image: no device I/O, each read's buffer zeroed at
    // 10 GB/s (104.9 us a read; a little less if the virtual disk splits it in two parts
    // zeroed side by side) besides the VMM's own cost.
    let job = "[r]\nfilename=/dev/vda\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\niodepth=1\nnumber_ios=200\n";
    let o = sim(&stack("qcow2", "populated = 0.0"), job);
    let i = &o.report.images[0].stats;
    assert_eq!(i.zero_fill_bytes, 200 << 20);
    assert_eq!(o.report.devices[0].stats.read_ops, 0);
    let per_read = o.report.jobs[0].runtime_ns as f64 / 200.0;
    assert!(per_read > 100_000.0, "{per_read}");
}

/// One VM with a 1 GiB disk of `format` (`image`: its `[vm.disk.image]` lines) over the NBD
/// path on a RAM device (1 µs a command, 10 GB/s: a 4 KiB read takes 1 µs + 409.6 ns), with
/// `aio` and `[vm.disk.queue] wakeup`. The NBD interface has no engine costs of its own
/// (vdisk/mod.rs), so two runs differing in `aio` differ only by the wake-ups.
fn ram_nbd_stack(format: &str, image: &str, aio: &str, wakeup: &str) -> String {
    format!(
        "[[device]]\nname = \"ram\"\nmodel = \"ram\"\ncapacity = \"4g\"\n\
         [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"ram\"]\n\
         [scheduler]\nname = \"none\"\n\
         [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\nsize = \"1g\"\n\
         interface = \"nbd\"\ncache = \"none\"\naio = \"{aio}\"\nformat = \"{format}\"\n\
         [vm.disk.image]\n{image}\n[vm.disk.queue]\nwakeup = \"{wakeup}\"\n"
    )
}

/// 1 GiB at 64 KiB clusters: 16384 L2 entries in 32 slices of 4 KiB; a 4 KiB cache holds one.
const ONE_SLICE: &str = "populated = 1.0\nl2_cache_size = \"4k\"\nl2_cache_entry_size = \"4k\"";
const QD1_READS: &str =
    "[r]\nrw=randread\nbs=4k\nioengine=libaio\ndirect=1\niodepth=1\nnumber_ios=2000\n";

fn runtime(o: &RunOutput) -> Ns {
    o.report.jobs[0].runtime_ns
}

/// The device's time for one 4 KiB read on the RAM device of [`ram_nbd_stack`].
fn ram_read_4k() -> Ns {
    vmio_core::US + vmio_core::units::transfer_ns(4096, 10_000_000_000)
}

#[test]
fn a_cold_random_read_of_a_qcow2_disk_pays_a_device_read_and_its_engines_wakeups_per_l2_miss() {
    // QD1: each miss adds the slice's read on the device and, with the thread pool, two
    // wake-ups (a worker, then the completion) before the driver goes on.
    let raw = sim(&ram_nbd_stack("raw", "", "threads", "50us"), QD1_READS);
    let q = sim(
        &ram_nbd_stack("qcow2", ONE_SLICE, "threads", "50us"),
        QD1_READS,
    );
    let misses = q.report.images[0].stats.l2_misses;
    assert!(misses > 1800, "{misses}");
    assert_eq!(
        runtime(&q) - runtime(&raw),
        misses * (ram_read_4k() + 2 * 50_000)
    );
}

#[test]
fn threads_and_native_differ_by_exactly_one_wakeup_per_l2_miss() {
    let t = sim(
        &ram_nbd_stack("qcow2", ONE_SLICE, "threads", "40us"),
        QD1_READS,
    );
    let n = sim(
        &ram_nbd_stack("qcow2", ONE_SLICE, "native", "40us"),
        QD1_READS,
    );
    let u = sim(
        &ram_nbd_stack("qcow2", ONE_SLICE, "io_uring", "40us"),
        QD1_READS,
    );
    let misses = t.report.images[0].stats.l2_misses;
    assert_eq!(misses, n.report.images[0].stats.l2_misses);
    assert_eq!(runtime(&t) - runtime(&n), misses * 40_000);
    assert_eq!(runtime(&n), runtime(&u));
}

#[test]
fn a_wakeup_of_zero_gives_a_miss_the_device_read_alone_and_a_raw_disk_ignores_wakeup() {
    let raw = sim(&ram_nbd_stack("raw", "", "threads", "0ns"), QD1_READS);
    let q = sim(
        &ram_nbd_stack("qcow2", ONE_SLICE, "threads", "0ns"),
        QD1_READS,
    );
    let misses = q.report.images[0].stats.l2_misses;
    assert_eq!(runtime(&q) - runtime(&raw), misses * ram_read_4k());
    // A raw disk has no driver and no sub-requests: the wake-up changes nothing.
    let slow = sim(&ram_nbd_stack("raw", "", "threads", "1ms"), QD1_READS);
    assert_eq!(runtime(&slow), runtime(&raw));
}

#[test]
fn first_writes_on_qemu_7_2_wait_for_the_write_zeroes_past_the_end_of_the_file_only_at_depth() {
    // 4 KiB random first writes to 64 KiB clusters of a new image on ext4: each allocation
    // appends a cluster and zeroes it with a write-zeroes past the end of the file, which
    // file-posix makes serialising (blocklayer.rs). At QD1 nothing else is in flight, so
    // nothing waits; at QD16 requests do; QEMU 2.11 has no write-zeroes and no waits.
    let job = |qd: u32| {
        format!(
            "[w]\nfilename=/dev/vda\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\n\
             iodepth={qd}\nnumber_ios=400\n"
        )
    };
    let image = "populated = 0.0";
    let waits = |o: &RunOutput| {
        let s = &o.report.images[0].stats;
        (s.allocations, s.serialised_waits, s.serialised_wait_ns)
    };
    let (alloc, w, ns) = waits(&sim(&stack_on_ext4("7.2", image), &job(1)));
    assert!(alloc > 390, "{alloc}");
    assert_eq!((w, ns), (0, 0));
    let (alloc, w, ns) = waits(&sim(&stack_on_ext4("7.2", image), &job(16)));
    assert!(alloc > 390, "{alloc}");
    assert!(w > alloc / 2 && ns > 0, "{w} waits, {ns} ns");
    let (_, w, _) = waits(&sim(&stack_on_ext4("2.11", image), &job(16)));
    assert_eq!(w, 0);
}
