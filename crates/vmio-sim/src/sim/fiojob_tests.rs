//! fio job files as fio reads them, through a whole run: a `filename` that is no disk of the
//! VM, percentages of the disk, `$ncpus` of the simulated guest.

use crate::run::{run, RunInput};

/// One VM of 3 vCPUs with a 1 GiB disk `vda` on a RAM device; `fs` adds a filesystem on it.
fn stack(fs: bool) -> String {
    let fs = if fs {
        "[vm.disk.filesystem]\ntype = \"ext4\"\nmount = \"/mnt\"\n"
    } else {
        ""
    };
    format!(
        "[[device]]\nname = \"ram\"\nmodel = \"ram\"\n\
         [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"ram\"]\n\
         [[vm]]\nname = \"vm1\"\nvcpus = 3\nmemory = \"2g\"\n\
         [[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"1g\"\ncache = \"none\"\n{fs}"
    )
}

fn run_job(fs: bool, job: &str) -> crate::output::RunOutput {
    let s = stack(fs);
    run(&RunInput::texts(&s, job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_filename_that_is_no_disk_runs_on_the_first_disk_with_a_note() {
    let o = run_job(
        false,
        "[j]\nrw=read\nsize=1m\ndirect=1\nfilename=/dev/sdj\n",
    );
    assert_eq!(o.report.jobs[0].stats[0].total_ios, 256);
    assert!(
        o.report.notes.iter().any(|n| n
            == "job 'j': filename '/dev/sdj' is not a disk of VM 'vm1'; it runs on its first disk 'vda'"),
        "{:?}",
        o.report.notes
    );
}

#[test]
fn a_path_off_every_mount_is_a_file_on_the_first_disks_filesystem() {
    let o = run_job(true, "[j]\nrw=write\nsize=1m\nfilename=/tmp/fio-test\n");
    assert!(o.report.notes.iter().any(|n| n.ends_with(
        "filename '/tmp/fio-test' is not a disk of VM 'vm1'; it runs on a file of its first disk 'vda' (the filesystem mounted at /mnt)"
    )), "{:?}", o.report.notes);
    assert_eq!(o.report.jobs[0].stats[1].total_ios, 256);
}

#[test]
fn percent_size_and_offset_are_shares_of_the_disk_aligned_to_the_block_size() {
    // 1 GiB disk: offset 10 % = 107374182.4 -> up to 64 KiB: 107413504; size 50 % = 536870912.
    let o = run_job(
        false,
        "[j]\nrw=read\nbs=64k\nsize=50%\noffset=10%\ndirect=1\n",
    );
    let spec = &o.report.jobs[0].spec;
    assert_eq!(spec.offset_bytes, 107_413_504);
    assert_eq!(spec.size_bytes, Some(536_870_912));
    assert_eq!(o.report.jobs[0].stats[0].io_bytes, 536_870_912);
    // size capped at what follows the offset: 90 % + 50 % > 100 %.
    let o = run_job(
        false,
        "[j]\nrw=read\nbs=64k\nsize=50%\noffset=90%\ndirect=1\n",
    );
    let spec = &o.report.jobs[0].spec;
    assert_eq!(spec.size_bytes, Some((1 << 30) - spec.offset_bytes));
}

#[test]
fn ncpus_is_the_vcpus_of_the_simulated_guest() {
    let o = run_job(false, "[j]\nrw=read\nsize=64k\nnumjobs=$ncpus\ndirect=1\n");
    assert_eq!(o.report.jobs.len(), 3);
    let o = run_job(
        false,
        "[j]\nrw=read\nsize=64k\nnumjobs=$mb_memory/1024\ndirect=1\n",
    );
    assert_eq!(o.report.jobs.len(), 2);
}

#[test]
fn the_null_engine_moves_nothing_on_the_device_and_takes_its_loop_cost_per_io() {
    use vmio_core::fio::engine::NULL_IO_NS;
    let o = run_job(false, "[j]\nioengine=null\nrw=randwrite\nbs=4k\nsize=1m\n");
    let j = &o.report.jobs[0];
    assert_eq!(j.stats[1].total_ios, 256);
    assert_eq!(j.runtime_ns, 256 * NULL_IO_NS);
    let dev = &o.report.devices[0].stats;
    assert_eq!(dev.read_bytes + dev.write_bytes, 0);
    // time_based: runtime / cost I/Os, however deep the queue.
    let o = run_job(
        false,
        "[j]\nioengine=null\nrw=read\niodepth=32\nruntime=1ms\ntime_based\n",
    );
    assert_eq!(o.report.jobs[0].stats[0].total_ios, 1_000_000 / NULL_IO_NS);
}

#[test]
fn an_engine_vmio_does_not_model_is_refused_in_one_line_naming_it() {
    let s = stack(false);
    let job = "[j]\nioengine=net\nhostname=localhost\n";
    let e = run(&RunInput::texts(&s, job, 1))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.starts_with("job.fio:2: ioengine=net: vmio does not model this engine: network I/O"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);
}

#[test]
fn trims_reach_the_device_and_are_reported_under_trim() {
    let o = run_job(false, "[j]\nrw=trim\nbs=64k\nsize=1m\ndirect=1\n");
    let j = &o.report.jobs[0];
    assert_eq!((j.stats[2].total_ios, j.stats[2].io_bytes), (16, 1 << 20));
    assert_eq!(o.report.devices[0].stats.write_bytes, 0);
    // trimwrite: every block trimmed, then written; size counts the writes (fio 3.33 with
    // ioengine=null, bs=64k, size=2m: 32 trims and 32 writes).
    let o = run_job(false, "[j]\nrw=trimwrite\nbs=64k\nsize=2m\ndirect=1\n");
    let j = &o.report.jobs[0];
    assert_eq!((j.stats[2].total_ios, j.stats[1].total_ios), (32, 32));
    assert_eq!(o.report.devices[0].stats.write_bytes, 2 << 20);
}

#[test]
fn a_trim_on_a_file_is_refused_as_fio_trims_block_devices_only() {
    let s = stack(true);
    let e = run(&RunInput::texts(&s, "[j]\nrw=randtrim\nsize=1m\n", 1))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.starts_with("job.fio:1: job 'j': rw=randtrim on a file: fio trims with BLKDISCARD"),
        "{e}"
    );
}

#[test]
fn offset_increment_moves_each_clone_on_in_bytes_or_percent() {
    let o = run_job(
        false,
        "[j]\nrw=read\nbs=64k\nsize=1m\nnumjobs=3\noffset=1m\noffset_increment=10%\ndirect=1\n",
    );
    // 10 % of 1 GiB = 107374182.4 bytes, aligned up to 64 KiB: 107413504.
    let starts: Vec<u64> = o
        .report
        .jobs
        .iter()
        .map(|j| j.spec.offset_increment_bytes)
        .collect();
    assert_eq!(starts, vec![107_413_504; 3]);
    let total: u64 = o.report.jobs.iter().map(|j| j.stats[0].io_bytes).sum();
    assert_eq!(total, 3 << 20);
}

/// Bytes the SSD's garbage collection programmed (flash writes beyond the host's) when a
/// full 256 MiB SSD takes 384 MiB of 4 KiB random writes over its first half, after
/// (`trim`) or without a trim of its second half.
fn gc_bytes(trim: bool) -> u64 {
    let stack = "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\ncapacity = \"256m\"\nchannels = 1\ndies_per_channel = 1\nover_provisioning = 0.1\n\
         [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"ssd\"]\n\
         [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"256m\"\ncache = \"none\"\n";
    let trim = if trim {
        "[trim]\nstonewall\nrw=trim\nbs=1m\noffset=50%\nsize=50%\n"
    } else {
        ""
    };
    let job = format!(
        "[global]\ndirect=1\nioengine=libaio\n[fill]\nrw=write\nbs=1m\n{trim}\
         [churn]\nstonewall\nrw=randwrite\nbs=4k\nsize=50%\nio_size=384m\niodepth=16\n"
    );
    let o = run(&RunInput::texts(stack, &job, 1)).unwrap_or_else(|e| panic!("{e}"));
    let d = &o.report.devices[0].stats;
    d.flash_write_bytes - d.write_bytes
}

#[test]
fn a_trimmed_half_of_an_ssd_leaves_its_gc_fewer_valid_pages_to_move() {
    let (with, without) = (gc_bytes(true), gc_bytes(false));
    // Without the trim, the spare is the 10 % over-provisioning: greedy GC's write
    // amplification there is several (GC bytes >= the 384 MiB written).
    assert!(without >= 384 << 20, "the churn must drive GC: {without}");
    // With it, the trimmed half is free space to the FTL too (60 % spare): a victim's pages
    // have mostly been overwritten by the time it is collected.
    assert!(with * 10 < without, "with trim {with}, without {without}");
}
