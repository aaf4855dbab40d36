//! The guest's block layer in whole runs (guest.rs with vmio_core::guest::blk): plugs,
//! merges, the scheduler chosen per disk, and the request sizes reported.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};

/// A RAM disk under a one-vCPU VM with disks `vda` and `vdb`, each with its own extra lines.
fn stack(vda: &str, vdb: &str) -> String {
    format!(
        "[[device]]\nname = \"ram0\"\nmodel = \"ram\"\ncapacity = \"4g\"\n\
         [[volume]]\nname = \"r\"\nlayout = \"single\"\ndevices = [\"ram0\"]\n\
         [[vm]]\nname = \"vm1\"\nvcpus = 1\n\
         [[vm.disk]]\nname = \"vda\"\nvolume = \"r\"\nsize = \"1g\"\ncache = \"none\"\n{vda}\
         [[vm.disk]]\nname = \"vdb\"\nvolume = \"r\"\noffset = \"1g\"\nsize = \"1g\"\ncache = \"none\"\n{vdb}"
    )
}

fn sim(stack: &str, job: &str) -> RunOutput {
    run(&RunInput::texts(stack, job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn buffered_writeback_reaches_the_virtual_disk_in_requests_of_max_sectors_kb() {
    // 32 MiB written through the guest's page cache of /dev/vda, then fsynced: writeback
    // sends the dirty pages in runs; the guest's block layer cuts them at max_sectors_kb
    // (64 KiB here, below the device's 1016 KiB): 512 requests of 64 KiB exactly.
    let q = "[vm.disk.guest_queue]\nmax_sectors_kb = 64\n";
    let job = "[w]\nfilename=/dev/vda\nrw=write\nbs=4k\ndirect=0\nsize=32m\nend_fsync=1\n";
    let o = sim(&stack(q, ""), job);
    let d = &o.report.guest_disks[0].stats;
    let sizes: Vec<(u64, u64)> = d.request_sizes.iter().map(|(&b, &n)| (b, n)).collect();
    assert_eq!(sizes, vec![(64 << 10, 512)]);
    assert_eq!(d.write_ios, 512);
    // QEMU merges the contiguous requests of a notification (at most 32): the host sees
    // fewer, larger requests; the bytes are the same.
    let host: u64 = d.host_request_sizes.iter().map(|(&b, &n)| b * n).sum();
    assert_eq!(host, 32 << 20);
    assert!(d.host_request_sizes.values().sum::<u64>() < 512);
}

#[test]
fn each_guest_disk_gets_the_scheduler_its_table_names() {
    // Sequential 4 KiB direct writes at QD32 on a disk of one tag: the requests wait in the
    // guest's queue. mq-deadline merges them there (write_merges > 0, fewer requests than
    // writes); none never merges outside a plug (each write is a request).
    let one_tag = "queue_depth = 1\n";
    let vda =
        format!("{one_tag}[vm.disk.guest_queue]\nscheduler = \"mq-deadline\"\nnr_requests = 64\n");
    let vdb = format!("{one_tag}[vm.disk.guest_queue]\nscheduler = \"none\"\n");
    let job = "[a]\nfilename=/dev/vda\nrw=write\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=8m\n\
               [b]\nfilename=/dev/vdb\nrw=write\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=8m\n";
    let o = sim(&stack(&vda, &vdb), job);
    let (a, b) = (
        &o.report.guest_disks[0].stats,
        &o.report.guest_disks[1].stats,
    );
    assert!(a.merges[1] > 0 && a.write_ios < 2048, "{a:?}");
    assert_eq!(a.write_ios + a.merges[1], 2048);
    assert_eq!((b.merges[1], b.write_ios), (0, 2048));
    assert_eq!(
        b.request_sizes
            .iter()
            .map(|(&s, &n)| (s, n))
            .collect::<Vec<_>>(),
        vec![(4096, 2048)]
    );
}

#[test]
fn a_one_queue_virtio_disk_defaults_to_mq_deadline_and_a_multiqueue_one_to_none() {
    // Linux 6.1's elevator_get_default. The same QD32 sequential writer on one tag: the
    // one-queue disk (1 vCPU) merges in mq-deadline; with num_queues = 2 the default is none.
    let job =
        "[a]\nfilename=/dev/vda\nrw=write\nbs=4k\nioengine=libaio\ndirect=1\niodepth=32\nsize=4m\n";
    let one = sim(&stack("queue_depth = 1\n", ""), job);
    assert!(one.report.guest_disks[0].stats.merges[1] > 0);
    let two = stack("queue_depth = 1\n[vm.disk.queue]\nnum_queues = 2\n", "")
        .replace("vcpus = 1", "vcpus = 2");
    let two = sim(&two, job);
    assert_eq!(two.report.guest_disks[0].stats.merges[1], 0);
}

#[test]
fn the_json_reports_the_guest_disks_merges_and_request_sizes() {
    let job = "[w]\nfilename=/dev/vda\nrw=write\nbs=4k\ndirect=0\nsize=4m\nend_fsync=1\n";
    let text = run_json(&RunInput::texts(&stack("", ""), job, 1)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let d = &v["vmio"]["guests"][0]["disks"][0];
    assert_eq!(d["disk"], "vda");
    assert!(
        d["merges"]["write"].is_u64() && d["merges"]["read"].is_u64(),
        "{d}"
    );
    let sizes = d["request_sizes"].as_array().unwrap();
    let bytes: u64 = sizes
        .iter()
        .map(|p| p[0].as_u64().unwrap() * p[1].as_u64().unwrap())
        .sum();
    assert_eq!(bytes, 4 << 20);
    assert!(d["host_request_sizes"].as_array().is_some());
}

#[test]
fn an_unknown_guest_scheduler_is_an_error_naming_the_field_and_the_accepted_ones() {
    let s = stack("[vm.disk.guest_queue]\nscheduler = \"bfq\"\n", "");
    let e = run(&RunInput::texts(&s, "[a]\nrw=read\nsize=1m\n", 1))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("guest_queue.scheduler") && e.contains("none, mq-deadline"),
        "{e}"
    );
}
