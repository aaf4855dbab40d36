//! Whole-stack behaviour of the simulator: cache-mode semantics, layouts, determinism.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};

use crate::bench::two_hdd_stack as stack;

fn sim(layout: &str, cache: &str, job: &str, seed: u64) -> RunOutput {
    let s = stack(layout, cache);
    run(&RunInput::texts(&s, job, seed)).unwrap_or_else(|e| panic!("{e}"))
}

fn json(layout: &str, cache: &str, job: &str, seed: u64) -> String {
    let s = stack(layout, cache);
    run_json(&RunInput::texts(&s, job, seed)).unwrap()
}

const RANDRW: &str = "[j]\nrw=randrw\nbs=16k\nioengine=libaio\ndirect=1\niodepth=8\nsize=2g\nruntime=2\ntime_based\n";

#[test]
fn the_same_seed_gives_byte_identical_json_and_another_seed_does_not() {
    let a = json("raid0", "writeback", RANDRW, 7);
    let b = json("raid0", "writeback", RANDRW, 7);
    let c = json("raid0", "writeback", RANDRW, 8);
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn cache_none_never_touches_the_page_cache() {
    let o = sim("linear", "none", RANDRW, 1);
    let pc = o.report.page_cache;
    assert_eq!(pc.hit_pages + pc.miss_pages + pc.written_back_pages, 0);
    assert_eq!(o.report.cached_pages, 0);
    assert!(o.report.jobs[0].stats[0].total_ios > 0);
}

#[test]
fn writeback_serves_a_reread_from_host_memory() {
    let job = "[first]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\nsize=512m\n\
               [again]\nstonewall\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\nsize=512m\n";
    let o = sim("linear", "writeback", job, 1);
    let first = o.report.jobs[0].stats[0].bw_bytes(o.report.jobs[0].runtime_ns);
    let again = o.report.jobs[1].stats[0].bw_bytes(o.report.jobs[1].runtime_ns);
    assert!(
        first < 250_000_000,
        "first pass comes from the disk: {first}"
    );
    assert!(
        again > 10 * first,
        "second pass from the page cache: {again} vs {first}"
    );
    assert!(o.report.page_cache.hit_pages >= 512 * 256);
    // The same under cache=none is disk-bound both times.
    let o = sim("linear", "none", job, 1);
    let again = o.report.jobs[1].stats[0].bw_bytes(o.report.jobs[1].runtime_ns);
    assert!(again < 250_000_000, "{again}");
}

/// Bytes the guest read from its disk.
fn guest_read_bytes(o: &RunOutput) -> u64 {
    o.report.guests[0].1.disks[0].read_bytes
}

#[test]
fn fios_invalidate_drops_the_guests_clean_pages_at_job_start_unless_it_is_0() {
    const WARM: &str = "[warm]\nrw=read\nbs=1m\ndirect=0\nsize=64m\n";
    let job = |invalidate: u32| {
        format!("{WARM}[again]\nstonewall\nrw=read\nbs=4k\ndirect=0\nsize=64m\ninvalidate={invalidate}\n")
    };
    let first = guest_read_bytes(&sim("linear", "none", WARM, 1));
    assert!(first >= 64 << 20, "the warm-up reads its 64 MiB: {first}");
    // invalidate=0: the second pass (16384 reads of 4 KiB) is all guest cache hits.
    let kept = sim("linear", "none", &job(0), 1);
    assert_eq!(kept.report.jobs[1].stats[0].total_ios, 16384);
    assert_eq!(guest_read_bytes(&kept), first);
    // invalidate=1 (fio's default): it reads the region from the disk again, its read-ahead
    // running at most two 128 KiB windows (the current one and the async one) past its end.
    let again = guest_read_bytes(&sim("linear", "none", &job(1), 1)) - first;
    assert!(
        (first..=first + (256 << 10)).contains(&again),
        "{again} after {first}"
    );
}

fn flushes(o: &RunOutput) -> u64 {
    o.report.devices.iter().map(|d| d.stats.flush_ops).sum()
}

const FSYNC_WRITES: &str =
    "[w]\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\nsize=1g\nnumber_ios=200\nfsync=1\n";

#[test]
fn unsafe_acknowledges_guest_flushes_without_flushing() {
    let o = sim("linear", "unsafe", FSYNC_WRITES, 1);
    assert_eq!(o.report.jobs[0].stats[3].total_ios, 200, "fio's sync count");
    assert_eq!(flushes(&o), 0);
    let o = sim("linear", "writeback", FSYNC_WRITES, 1);
    assert!(flushes(&o) >= 200, "writeback passes guest flushes down");
}

#[test]
fn writeback_fsync_writes_the_dirty_pages_before_completing() {
    let o = sim("linear", "writeback", FSYNC_WRITES, 1);
    let dev_writes: u64 = o.report.devices.iter().map(|d| d.stats.write_bytes).sum();
    assert!(dev_writes >= 200 * 4096, "{dev_writes}");
    assert_eq!(o.report.dirty_pages, 0);
    let unsafe_run = sim("linear", "unsafe", FSYNC_WRITES, 1);
    assert!(
        unsafe_run.report.dirty_pages > 0,
        "unsafe leaves them dirty"
    );
}

#[test]
fn writethrough_and_directsync_make_every_write_durable_before_it_completes() {
    let job = "[w]\nrw=randwrite\nbs=4k\nioengine=libaio\ndirect=1\nsize=1g\nnumber_ios=100\n";
    for mode in ["writethrough", "directsync"] {
        let o = sim("linear", mode, job, 1);
        assert!(flushes(&o) >= 100, "{mode}: one flush per write");
        let dev_writes: u64 = o.report.devices.iter().map(|d| d.stats.write_bytes).sum();
        assert!(dev_writes >= 100 * 4096, "{mode}");
        assert_eq!(o.report.dirty_pages, 0, "{mode}");
    }
    let o = sim("linear", "writethrough", job, 1);
    assert!(
        o.report.cached_pages > 0,
        "writethrough keeps written pages cached"
    );
    let o = sim("linear", "directsync", job, 1);
    assert_eq!(
        o.report.cached_pages, 0,
        "directsync bypasses the page cache"
    );
}

#[test]
fn a_striped_volume_spreads_a_sequential_read_over_both_disks() {
    let job = "[r]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\nsize=256m\n";
    for layout in ["stripe", "raid0"] {
        let o = sim(layout, "none", job, 1);
        let a = o.report.devices[0].stats.read_bytes;
        let b = o.report.devices[1].stats.read_bytes;
        assert_eq!(a + b, 256 << 20, "{layout}");
        assert_eq!(a, b, "{layout}");
    }
    let o = sim("linear", "none", job, 1);
    assert_eq!(
        o.report.devices[1].stats.read_bytes, 0,
        "linear: the start lies on the first disk"
    );
}

/// The error of running `job_text` (from `job_path`) on the linear two-disk stack.
fn run_err(job_text: &str, job_path: &str) -> String {
    let s = stack("linear", "none");
    run(&RunInput {
        stack_text: &s,
        stack_path: "stack.toml",
        job_text,
        job_path,
        seed: Some(1),
        vm: None,
    })
    .err()
    .expect("the run should fail")
    .to_string()
}

#[test]
fn mixed_and_write_workloads_at_queue_depth_one_run_to_completion() {
    // Regression: these once spun forever inside the HDD model (a stream wait that never
    // advanced virtual time).
    for rw in ["write", "rw", "randrw"] {
        for layout in ["raid0", "stripe"] {
            let job = format!(
                "[j]\nrw={rw}\nbs=32k\nioengine=libaio\ndirect=1\nsize=1g\nruntime=1\ntime_based\n"
            );
            let o = sim(layout, "none", &job, 1);
            assert!(o.report.jobs[0].stats[1].total_ios > 0, "{rw} {layout}");
        }
    }
}

/// The two-disk RAID 0 stack with a second VM (`vm2`, its disk after vm1's) and weights.
fn two_vm_stack(w1: u32, w2: u32) -> String {
    stack("raid0", "none").replace(
        "[[vm]]\nname = \"vm1\"",
        &format!("[[vm]]\nname = \"vm2\"\nweight = {w2}\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\noffset = \"100g\"\nsize = \"100g\"\ncache = \"none\"\n\n[[vm]]\nname = \"vm1\"\nweight = {w1}"),
    )
}

/// The same job file in vm1 and vm2.
fn in_both_vms(job: &str) -> [crate::run::VmJob<'_>; 2] {
    [
        crate::run::VmJob {
            vm: Some("vm1"),
            job_text: job,
            job_path: "a.fio",
        },
        crate::run::VmJob {
            vm: Some("vm2"),
            job_text: job,
            job_path: "b.fio",
        },
    ]
}

#[test]
fn two_vms_run_their_own_job_files_at_the_same_time() {
    let s = two_vm_stack(500, 500);
    let job = "[r]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\nsize=1g\nruntime=2\ntime_based\n";
    let out = crate::run::run_many(&s, "stack.toml", &in_both_vms(job), Some(1)).unwrap();
    let r = &out.report;
    assert_eq!(r.jobs.len(), 2);
    assert_eq!(
        (r.jobs[0].vm.as_str(), r.jobs[1].vm.as_str()),
        ("vm1", "vm2")
    );
    let alone = sim("raid0", "none", job, 1).report.jobs[0].stats[0].bw_bytes(2_000_000_000);
    let shared: Vec<u64> = r
        .jobs
        .iter()
        .map(|j| j.stats[0].bw_bytes(j.runtime_ns))
        .collect();
    // Two sequential streams on the same two disks interfere: each gets less than alone.
    assert!(
        shared.iter().all(|&b| b > 0 && b < alone),
        "{shared:?} vs {alone}"
    );
}

#[test]
fn more_jobs_than_fios_limit_in_one_run_all_vms_together_is_refused() {
    let s = two_vm_stack(500, 500);
    let job =
        "[r]\nrw=read\nioengine=libaio\ndirect=1\nsize=1g\nnumjobs=2048\n[s]\nrw=read\nsize=1g\n";
    let e = crate::run::run_many(&s, "stack.toml", &in_both_vms(job), Some(1))
        .err()
        .expect("4098 jobs are too many")
        .to_string();
    assert_eq!(
        e,
        "b.fio:1: job 'r' (vm[0]): numjobs=2048 brings the run (all VMs together) to 4097 jobs, above fio's limit of 4096 jobs (FIO_MAX_JOBS); accepted: at most 4096 jobs in one run"
    );
}

#[test]
fn time_based_without_runtime_and_degenerate_regions_are_errors_naming_the_job() {
    let e = run_err("[j]\nrw=read\ntime_based\n", "job.fio");
    assert!(
        e.starts_with("job.fio: job 'j' (line 1): time_based without a runtime would never end"),
        "{e}"
    );
    let e = run_err("[j]\nrw=read\nbs=1m\nsize=4k\n", "job.fio");
    assert!(
        e.contains("bs=1048576 is larger than the job's region of 4096 bytes"),
        "{e}"
    );
    let e = run_err(
        "[j]\nfilebench=varmail\nruntime=1\noffset=300g\n",
        "job.fio",
    );
    assert!(e.contains("is empty on a disk of"), "{e}");
}

#[test]
fn a_job_larger_than_its_disk_is_an_error_naming_the_job_file() {
    let e = run_err("[j]\nrw=read\nsize=200g\n", "job.fio");
    assert!(e.starts_with("job.fio: job 'j' (line 1)"), "{e}");
    assert!(e.contains("ends beyond the disk"), "{e}");
}

#[test]
fn the_json_reports_each_vms_bandwidth_timeline_and_the_share_metrics() {
    let s = two_vm_stack(1000, 100);
    let job = "[r]\nrw=randread\nbs=64k\nioengine=libaio\ndirect=1\niodepth=4\nsize=1g\nruntime=3\ntime_based\n";
    let text = crate::run::run_many_json(&s, "stack.toml", &in_both_vms(job), Some(1)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let vms = v["vmio"]["vms"].as_array().unwrap();
    assert_eq!(vms.len(), 2);
    for vm in vms {
        let per_s = vm["bytes_per_s"].as_array().unwrap();
        assert!(per_s.len() >= 3, "{vm}");
        let sum: u64 = per_s.iter().map(|b| b.as_u64().unwrap()).sum();
        assert!(sum > 0);
    }
    // mq-deadline ignores weights: both VMs get about the same, far from 10:1.
    let err = v["vmio"]["share"]["error_rate_pct"].as_f64().unwrap();
    assert!(err > 50.0, "{err}");
    let jain = v["vmio"]["share"]["jain_index"].as_f64().unwrap();
    assert!(jain > 0.5 && jain < 0.8, "{jain}");
}

#[test]
fn a_trace_is_replayed_open_loop_at_its_own_timestamps_or_closed_loop_with_replay_no_stall() {
    let dir = std::env::temp_dir().join(format!("vmio-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // SPC: ASU,LBA,Size,Opcode,Timestamp — 100 reads of 8 KiB, one every 10 ms.
    let mut trace = String::new();
    for i in 0..100u64 {
        trace += &format!("0,{},8192,r,{:.6}\n", i * 1000, i as f64 * 0.010);
    }
    std::fs::write(dir.join("t.spc"), trace).unwrap();
    let job_path = dir.join("job.fio");
    let job = "[t]\nread_iolog=t.spc\niolog_format=spc\nreplay_time_scale=200\n";
    let s = stack("linear", "none");
    let input = RunInput {
        stack_text: &s,
        stack_path: "stack.toml",
        job_text: job,
        job_path: job_path.to_str().unwrap(),
        seed: Some(1),
        vm: None,
    };
    let o = run(&input).unwrap_or_else(|e| panic!("{e}"));
    let j = &o.report.jobs[0];
    assert_eq!(j.stats[0].total_ios, 100);
    // Timestamps doubled: the last request is issued at 1.98 s, so the job lasts about 2 s
    // (an HDD serves one 8 KiB read in ~10 ms, so it keeps up with the trace).
    assert!(
        j.runtime_ns > 1_980_000_000 && j.runtime_ns < 2_100_000_000,
        "{}",
        j.runtime_ns
    );
    // replay_no_stall: the same trace, in order, as fast as iodepth=1 allows — 100 reads of
    // ~10 ms each on the HDD take about 1 s, not the trace's 1.98 s.
    let no_stall = format!("{job}replay_no_stall=1\n");
    let o = run(&RunInput {
        job_text: &no_stall,
        ..input
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let j = &o.report.jobs[0];
    assert_eq!(j.stats[0].total_ios, 100);
    assert!(j.runtime_ns < 1_500_000_000, "{}", j.runtime_ns);
    let e = run_err("[t]\nread_iolog=missing.csv\n", job_path.to_str().unwrap());
    assert!(
        e.contains("job.fio:1: read_iolog: cannot read") && e.contains("missing.csv"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_filebench_personality_runs_on_the_guest_filesystem_with_its_fsyncs_and_commits() {
    // varmail on two HDDs (linear, cache=writeback) whose VM disk carries ext4: its reads
    // and appends go through the guest, its fsyncs commit the journal, and the guest's
    // FLUSHes reach the devices through the host's writeback cache.
    let s = format!(
        "{}[vm.disk.filesystem]\ntype = \"ext4\"\n",
        stack("linear", "writeback")
    );
    let job = "[vm]\nfilebench=varmail\nruntime=2\n";
    let o = run(&RunInput::texts(&s, job, 1)).unwrap_or_else(|e| panic!("{e}"));
    let j = &o.report.jobs[0];
    assert!(
        j.stats[0].total_ios > 0 && j.stats[1].total_ios > 0,
        "reads and writes"
    );
    assert!(j.stats[3].total_ios > 0, "varmail fsyncs");
    let g = &o.report.guests[0].1.disks[0];
    let journal = g.journal.as_ref().expect("an ext4 disk has a journal");
    assert!(journal.commits > 0 && g.journal_write_bytes > 0, "{g:?}");
    assert!(g.fsyncs_committing > 0 && g.fsyncs_committing <= g.fsyncs);
    assert!(
        flushes(&o) > 0,
        "writeback passes the guest's flushes down as cache flushes"
    );
}

#[test]
fn iozone_runs_its_six_passes_on_an_ext4_vm_disk_and_reports_each_passs_rate() {
    // iozone -e -I on a 1 MiB file with 4k and 64k records on the 30 GiB ext4 SSD stack:
    // every pass of both record sizes completes, moves the file's bytes and has a rate.
    let s = crate::bench::ext4_ssd_stack();
    let job = "[z]\niozone=-e -I -a -s 1m -r 4k -r 64k -i 0 -i 1 -i 2\n";
    let o = run(&RunInput::texts(&s, job, 1)).unwrap_or_else(|e| panic!("{e}"));
    let j = &o.report.jobs[0];
    let passes: Vec<(u64, vmio_core::workload::iozone::Phase)> =
        j.iozone.iter().map(|t| (t.record_bytes, t.phase)).collect();
    let want: Vec<_> = [4096, 65536]
        .into_iter()
        .flat_map(|r| vmio_core::workload::iozone::Phase::ALL.map(|p| (r, p)))
        .collect();
    assert_eq!(passes, want);
    for t in &j.iozone {
        assert!(t.bytes == 1 << 20 && t.ns > 0 && t.kb_per_s() > 0, "{t:?}");
    }
    // Per record size: 1 MiB written three times, read three times plus two priming reads
    // of one record; 16 fsyncs (write, rewrite, read, reread: 3 each; random: 2 each).
    assert_eq!(j.stats[1].io_bytes, 6 << 20);
    assert_eq!(j.stats[0].io_bytes, (6 << 20) + 2 * (4096 + 65536));
    assert_eq!(j.stats[3].total_ios, 32);
    eprintln!("{}", vmio_core::workload::iozone::table(&j.iozone));
}

#[test]
fn every_application_runs_on_an_ext4_vm_disk_with_reads_or_writes_and_fsyncs_that_commit_the_journal(
) {
    // Each app for 1 s on a 30 GiB ext4 disk (one SSD, cache=none): its operations reach
    // the guest, its fsyncs force journal commits. leveldb-compact syncs only at its
    // memtable flushes (every ~29,000 puts, cached appends that take little virtual time):
    // 100 ms is enough for several.
    let s = crate::bench::ext4_ssd_stack();
    for (app, runtime) in [
        ("linkbench", "1"),
        ("sqlite-delete", "1"),
        ("sqlite-wal-full", "1"),
        ("leveldb-fillsync", "1"),
        ("leveldb-compact", "100ms"),
    ] {
        let job = format!("[a]\napp={app}\nruntime={runtime}\n");
        let o = run(&RunInput::texts(&s, &job, 1)).unwrap_or_else(|e| panic!("{app}: {e}"));
        let j = &o.report.jobs[0];
        assert!(j.stats[1].total_ios > 0, "{app}: writes");
        assert!(j.stats[3].total_ios > 0, "{app}: fsyncs");
        let g = &o.report.guests[0].1.disks[0];
        let journal = g.journal.as_ref().expect("an ext4 disk has a journal");
        assert!(
            journal.commits > 0 && g.fsyncs_committing > 0,
            "{app}: {g:?}"
        );
        eprintln!(
            "{app}: {} reads, {} writes, {} fsyncs, {} commits",
            j.stats[0].total_ios, j.stats[1].total_ios, j.stats[3].total_ios, journal.commits
        );
    }
    let e = run_err("[a]\napp=sqlite\nruntime=1\n", "job.fio");
    assert!(
        e.starts_with("job.fio: job 'a' (line 1): app=sqlite works on files, and its disk has no guest filesystem"),
        "{e}"
    );
}

use crate::bench::four_vm_ssd_stack;

fn share_run(sched: &str, precondition: &str, job: &str) -> serde_json::Value {
    let s = four_vm_ssd_stack(sched, precondition);
    let vms = ["vm1", "vm2", "vm3", "vm4"];
    let jobs: Vec<crate::run::VmJob> = vms
        .iter()
        .map(|v| crate::run::VmJob {
            vm: Some(v),
            job_text: job,
            job_path: "job.fio",
        })
        .collect();
    serde_json::from_str(&crate::run::run_many_json(&s, "stack.toml", &jobs, Some(1)).unwrap())
        .unwrap()
}

#[test]
fn cfq_gives_the_heavier_vms_more_bandwidth_than_mq_deadline_does() {
    let job =
        "[w]\nrw=randwrite\nbs=64k\nioengine=libaio\ndirect=1\niodepth=8\nruntime=3\ntime_based\n";
    let bw = |v: &serde_json::Value| -> Vec<f64> {
        v["vmio"]["vms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["bw_bytes"].as_f64().unwrap())
            .collect()
    };
    let dl = share_run("mq-deadline", "clean", job);
    let cfq = share_run("cfq", "clean", job);
    let (d, c) = (bw(&dl), bw(&cfq));
    assert!(c[0] / c[3] > 3.0, "cfq: {c:?}");
    assert!(d[0] / d[3] < 1.5, "mq-deadline ignores weights: {d:?}");
    assert!(
        cfq["vmio"]["share"]["error_rate_pct"].as_f64().unwrap()
            < dl["vmio"]["share"]["error_rate_pct"].as_f64().unwrap()
    );
}

/// Four VMs with weights 10 : 7 : 4 : 1 on one aged SSD (16 GB, the 840 Pro's flash
/// parameters), each on its own 3 GB partition, 64 KiB random writes at QD4.
fn four_vms_on_an_aged_ssd(scheduler: &str) -> serde_json::Value {
    let mut s = format!(
        "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\nprofile = \"samsung-840pro-256g\"\n\
         capacity = \"16g\"\nprecondition = \"aged\"\n\n[[volume]]\nname = \"vol\"\n\
         layout = \"single\"\ndevices = [\"ssd\"]\n\n[scheduler]\nname = \"{scheduler}\"\n"
    );
    for (i, w) in [1000, 700, 400, 100].iter().enumerate() {
        s += &format!(
            "\n[[vm]]\nname = \"vm{}\"\nweight = {w}\n[[vm.disk]]\nname = \"vda\"\n\
             volume = \"vol\"\noffset = \"{}g\"\nsize = \"3g\"\ncache = \"none\"\n",
            i + 1,
            3 * i
        );
    }
    let job = "[w]\nrw=randwrite\nbs=64k\nioengine=libaio\ndirect=1\niodepth=4\nsize=3g\n\
               runtime=30\ntime_based\n";
    let jobs: Vec<crate::run::VmJob> = ["vm1", "vm2", "vm3", "vm4"]
        .iter()
        .map(|vm| crate::run::VmJob {
            vm: Some(vm),
            job_text: job,
            job_path: "w.fio",
        })
        .collect();
    let text = crate::run::run_many_json(&s, "stack.toml", &jobs, Some(1))
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn mcfq_brings_four_vms_on_an_aged_ssd_to_their_weights_where_cfq_misses_them() {
    let cfq = four_vms_on_an_aged_ssd("cfq");
    let mcfq = four_vms_on_an_aged_ssd("mcfq");
    let err = |v: &serde_json::Value| v["vmio"]["share"]["error_rate_pct"].as_f64().unwrap();
    let ratios = |v: &serde_json::Value| -> Vec<f64> {
        let vms = v["vmio"]["vms"].as_array().unwrap();
        let bw: Vec<f64> = vms
            .iter()
            .map(|m| m["bw_bytes"].as_f64().unwrap())
            .collect();
        bw.iter().map(|b| b / bw[3]).collect()
    };
    eprintln!(
        "aged SSD, 4 VMs: CFQ {:.1} % {:.2?}, MCFQ {:.1} % {:.2?}",
        err(&cfq),
        ratios(&cfq),
        err(&mcfq),
        ratios(&mcfq)
    );
    // The device is GC-bound: write amplification far above 1.
    let dev = &mcfq["vmio"]["devices"][0]["stats"];
    let waf = dev["flash_write_bytes"].as_f64().unwrap() / dev["write_bytes"].as_f64().unwrap();
    assert!(waf > 3.0, "WAF {waf}");
    // MoTS converges: every ratio within 20 % of its weight ratio, error far below CFQ's.
    for (got, want) in ratios(&mcfq).iter().zip([10.0, 7.0, 4.0, 1.0]) {
        assert!((got / want - 1.0).abs() < 0.20, "{:?}", ratios(&mcfq));
    }
    assert!(
        err(&mcfq) < 0.5 * err(&cfq),
        "{} vs {}",
        err(&mcfq),
        err(&cfq)
    );
}

#[test]
fn a_stack_whose_ftl_tables_exceed_the_available_memory_is_refused_in_one_line() {
    let text = "[[device]]\nname = \"ssd0\"\nmodel = \"ssd\"\ncapacity = \"14t\"\n\
                [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"ssd0\"]\n\
                [[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"vol\"\ncache = \"none\"\n";
    let stack = vmio_core::stack::Stack::from_toml(text, "stack.toml").unwrap();
    let e = super::check_memory(&stack, 9_100_000_000)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("stack.toml: device[0] 'ssd0': capacity 14 TiB needs ~"),
        "{e}"
    );
    assert!(e.contains("of FTL tables (all devices: "), "{e}");
    assert!(e.contains("; 9.1 GB of memory available"), "{e}");
    assert!(e.len() <= 300 && !e.contains('\n'), "{e}");
    // Nothing is allocated to find out, and enough memory lets it through.
    assert!(super::check_memory(&stack, u64::MAX).is_ok());
}

/// An SSD volume whose VM disk, in cache mode `cache`, carries ext4 with a 4 MiB journal
/// (1024 blocks: its superblock and a 1023-block log).
fn ext4_stack(cache: &str) -> String {
    format!(
        "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\nprofile = \"samsung-840pro-256g\"\ncapacity = \"16g\"\n\
         [[volume]]\nname = \"vol\"\nlayout = \"single\"\ndevices = [\"ssd\"]\n\
         [[vm]]\nname = \"vm1\"\nmemory = \"1g\"\n[[vm.disk]]\nname = \"vdb\"\nvolume = \"vol\"\nsize = \"1g\"\ncache = \"{cache}\"\n\
         [vm.disk.filesystem]\ntype = \"ext4\"\nmount = \"/mnt\"\njournal_size = \"4m\"\n"
    )
}

/// 1000 appends of 4 KiB, each followed by an fsync (a commit), over 10 files: about six
/// passes over the 4 MiB journal.
const APPEND_FSYNC: &str = "[append]\ndirectory=/mnt\nnrfiles=10\nfilesize=409600\nfile_service_type=roundrobin:2\nrw=write\nbs=4096\nioengine=psync\ndirect=0\nfsync=1\ncreate_on_open=1\n";

fn ext4_run(cache: &str) -> serde_json::Value {
    let s = ext4_stack(cache);
    let j = run_json(&RunInput::texts(&s, APPEND_FSYNC, 4)).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&j).unwrap()
}

#[test]
fn pdc_detects_the_guest_journal_after_its_first_pass_and_bypasses_its_writes() {
    let j = ext4_run("pdc");
    let pdc = j["vmio"]["pdc"].as_array().unwrap();
    assert_eq!(pdc.len(), 1, "{pdc:?}");
    let p = &pdc[0];
    assert_eq!(
        (p["vm"].as_str(), p["disk"].as_str()),
        (Some("vm1"), Some("vdb"))
    );
    // The true journal: the guest's 1024 blocks, found exactly. The log is blocks 1..1024;
    // block 0, the journal superblock, is found too: the fresh log first runs out of space
    // at its end, so the commit that wraps it first checkpoints, and the tail update writes
    // the superblock (after a FLUSH) right before the log goes on at block 1. That write
    // starts the wrapped run, which the commit block then confirms.
    let guest = &j["vmio"]["guests"][0]["disks"][0];
    let [first, last] = [0, 1].map(|i| guest["journal_extent"][i].as_u64().unwrap());
    assert_eq!(last + 1 - first, 1024);
    let journal = [first * 4096, (last + 1) * 4096];
    assert_eq!(p["journal"], serde_json::json!(journal));
    assert_eq!(p["ranges"], serde_json::json!([journal]));
    assert_eq!(p["precision"].as_f64(), Some(1.0));
    assert_eq!(p["recall"].as_f64(), Some(1.0));
    assert_eq!(
        (p["detections"].as_u64(), p["drops"].as_u64()),
        (Some(1), Some(0))
    );
    let events = p["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["kind"], "detected");
    // Every journal write goes around the cache but those of the first pass (its 1023 log
    // blocks and the superblock), the log write of the second pass's first transaction (at
    // most 8 blocks: max_commit_blocks) and the journal superblock's writes (the tail
    // updates: strays, cached).
    let journal_bytes = guest["journal_write_bytes"].as_u64().unwrap();
    let report = &guest["journal"];
    let sb_bytes = report["superblock_writes"].as_u64().unwrap() * 4096;
    let first_txn = report["max_commit_blocks"].as_u64().unwrap() * 4096;
    let bypassed = p["bypassed_bytes"].as_u64().unwrap();
    assert!(journal_bytes > 5 * 1024 * 4096, "{journal_bytes}");
    let cached = journal_bytes - bypassed;
    assert!(
        cached >= 1023 * 4096 && cached <= 1024 * 4096 + first_txn + sb_bytes,
        "bypassed {bypassed} of {journal_bytes}"
    );
    assert!(j["vmio"]["page_cache"]["flushes"].as_u64().unwrap() > 0);
}

#[test]
fn the_same_run_in_writeback_reports_no_pdc_disk_and_the_same_flush_count() {
    let (wb, pdc) = (ext4_run("writeback"), ext4_run("pdc"));
    assert_eq!(wb["vmio"]["pdc"], serde_json::json!([]));
    // Every guest FLUSH is one host fsync in both modes.
    assert_eq!(
        wb["vmio"]["page_cache"]["flushes"],
        pdc["vmio"]["page_cache"]["flushes"]
    );
    assert_eq!(
        wb["vmio"]["guests"][0]["disks"][0]["flushes"],
        wb["vmio"]["page_cache"]["flushes"]
    );
}

#[test]
fn disk_util_counts_the_guests_requests_their_times_and_the_busy_share_as_diskstats_does() {
    // One job at QD1 on a VM's disk: every request of the guest is one of the disk's; the
    // ticks add up the requests' times (fio's lat less nothing: issue to completion); busy
    // the whole time the job ran, and idle at no point in between.
    let job =
        "[j]\nrw=randread\nbs=4k\nioengine=psync\ndirect=1\nsize=64m\nruntime=1\ntime_based\n";
    let o = sim("linear", "none", job, 1);
    let j = &o.report.jobs[0];
    let d = o
        .report
        .guest_disks
        .iter()
        .find(|d| d.vm == j.vm)
        .expect("the job's VM's disk is reported");
    let s = &d.stats;
    // The disk also counts the request in flight when the job's runtime ended, which fio's
    // job statistics leave out (as diskstats does in a guest).
    let n = j.stats[0].total_ios;
    assert!(
        s.read_ios == n || s.read_ios == n + 1,
        "{} vs {n}",
        s.read_ios
    );
    assert_eq!(s.write_ios, 0);
    let lat_sum = j.stats[0].lat.mean() * s.read_ios as f64;
    let ticks = s.read_ticks_ns as f64;
    assert!((ticks / lat_sum - 1.0).abs() < 0.02, "{ticks} vs {lat_sum}");
    assert_eq!(s.in_queue_ns, s.read_ticks_ns);
    // QD1 back to back: busy as long as the requests took, which is the run.
    assert!(s.io_ticks_ns <= o.report.virtual_time_ns);
    assert!((s.io_ticks_ns as f64 / ticks - 1.0).abs() < 0.02);
    // fio's disk_util entry carries it, in ms.
    let v: serde_json::Value =
        serde_json::from_str(&crate::output::fio_json(&o).to_string()).unwrap();
    let e = &v["disk_util"][0];
    assert_eq!(e["name"], d.disk.as_str());
    assert_eq!(e["read_ios"], s.read_ios);
    assert_eq!(e["read_ticks"], s.read_ticks_ns / 1_000_000);
}

/// A VM whose disk is an NBD export (`interface = "nbd"`) of a RAM device of 1 µs and
/// 100 GB/s: the NBD path's costs of `[nbd]` dominate.
fn nbd_run(job: &str) -> RunOutput {
    nbd_run_with("", job)
}

/// [`nbd_run`] with more `[nbd]` lines (`extra`, each ending in a newline).
fn nbd_run_with(extra: &str, job: &str) -> RunOutput {
    let stack = "[host]\ncores = 2\n[[device]]\nname = \"a\"\nmodel = \"ram\"\ncapacity = \"1g\"\n\
        latency = \"1000ns\"\nbandwidth = 100000000000\n[[volume]]\nname = \"v\"\n\
        layout = \"single\"\ndevices = [\"a\"]\n[scheduler]\nname = \"none\"\n\
        [nbd]\nhandoff = \"100us\"\nrequest = \"20us\"\nread_rate = 1000000000\n\
        write_rate = 500000000\n{extra}[[vm]]\nname = \"vm1\"\n[[vm.disk]]\nname = \"vda\"\n\
        volume = \"v\"\ninterface = \"nbd\"\ncache = \"none\"\n";
    let stack = stack.replace("{extra}", extra);
    let job = format!("[j]\ndirect=1\nioengine=libaio\nsize=512m\nruntime=1\ntime_based\n{job}");
    run(&RunInput::texts(&stack, &job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn an_nbd_disk_at_qd1_pays_the_hand_offs_the_request_and_the_copy_of_its_direction() {
    use vmio_core::SEC;
    // 64 KiB: a read copies 65.536 µs at 1 GB/s, a write 131.072 µs at 0.5 GB/s; the RAM
    // device adds 1 µs and 0.655 µs of transfer.
    for (rw, d, copy_ns) in [("randread", 0, 65_536.0), ("randwrite", 1, 131_072.0)] {
        let o = nbd_run(&format!("rw={rw}\nbs=64k\niodepth=1\n"));
        let s = &o.report.jobs[0].stats[d];
        let mean = s.lat.mean();
        let want = 100_000.0 + 20_000.0 + copy_ns + 1_000.0 + 655.36;
        assert!((mean / want - 1.0).abs() < 0.005, "{rw}: {mean} vs {want}");
        let iops = s.total_ios as f64 * SEC as f64 / o.report.jobs[0].runtime_ns as f64;
        assert!((iops * want / 1e9 - 1.0).abs() < 0.01, "{rw}: {iops}");
    }
}

#[test]
fn at_depth_an_nbd_disk_is_limited_by_its_serialized_path_not_by_the_hand_offs() {
    use vmio_core::SEC;
    // QD 32 overlaps the 100 µs hand-offs: IOPS = 1 / (request + copy) = 1 / 85.536 µs.
    let o = nbd_run("rw=randread\nbs=64k\niodepth=32\n");
    let s = &o.report.jobs[0].stats[0];
    let iops = s.total_ios as f64 * SEC as f64 / o.report.jobs[0].runtime_ns as f64;
    let want = 1e9 / 85_536.0;
    assert!((iops / want - 1.0).abs() < 0.01, "{iops} vs {want}");
}

/// The job's IOPS and mean latency (ns) in direction `d`.
fn iops_and_mean(o: &RunOutput, d: usize) -> (f64, f64) {
    let s = &o.report.jobs[0].stats[d];
    let secs = o.report.jobs[0].runtime_ns as f64 / vmio_core::SEC as f64;
    (s.total_ios as f64 / secs, s.lat.mean())
}

#[test]
fn at_depth_the_nbd_paths_cpu_bounds_iops_at_its_cores_over_the_cpu_of_a_request() {
    // The serialized path alone gives 1 / 85.536 µs = 11.7k IOPS; two cores of 300 µs a
    // request give 2 / 300 µs = 6,667.
    let (iops, _) = iops_and_mean(
        &nbd_run_with(
            "cores = 2\ncpu = \"300us\"\n",
            "rw=randread\nbs=64k\niodepth=32\n",
        ),
        0,
    );
    let want = 2.0 * 1e9 / 300_000.0;
    assert!((iops / want - 1.0).abs() < 0.01, "{iops} vs {want}");
    // The per-byte part: one core of 10 µs + 64 KiB at 0.5 GB/s = 141.072 µs a request.
    let (iops, _) = iops_and_mean(
        &nbd_run_with(
            "cores = 1\ncpu = \"10us\"\ncpu_rate = 500000000\n",
            "rw=randread\nbs=64k\niodepth=32\n",
        ),
        0,
    );
    let want = 1e9 / 141_072.0;
    assert!((iops / want - 1.0).abs() < 0.01, "{iops} vs {want}");
    // Without cores the CPU bounds nothing: the serialized path's 11.7k again.
    let (iops, _) = iops_and_mean(
        &nbd_run_with("cpu = \"300us\"\n", "rw=randread\nbs=64k\niodepth=32\n"),
        0,
    );
    assert!((iops * 85_536.0 / 1e9 - 1.0).abs() < 0.01, "{iops}");
}

#[test]
fn at_qd1_the_nbd_paths_cpu_overlaps_the_path_and_shows_only_when_it_is_longer() {
    // QD1 64 KiB read: the path takes 187.191 µs (the test above). 100 µs of CPU hides in
    // it; 400 µs is the request's latency.
    let path = 100_000.0 + 20_000.0 + 65_536.0 + 1_000.0 + 655.36;
    let job = "rw=randread\nbs=64k\niodepth=1\n";
    let (_, hidden) = iops_and_mean(&nbd_run_with("cores = 1\ncpu = \"100us\"\n", job), 0);
    assert!((hidden / path - 1.0).abs() < 0.005, "{hidden} vs {path}");
    let (_, shown) = iops_and_mean(&nbd_run_with("cores = 1\ncpu = \"400us\"\n", job), 0);
    assert!((shown / 400_000.0 - 1.0).abs() < 0.005, "{shown}");
}

#[test]
fn a_run_longer_than_a_day_keeps_a_timeline_of_one_day_and_says_so() {
    // rate=1 (byte/s): each 4 KiB write waits 4096 s, 32 of them last 36 h of simulated time.
    let job = "[j]\nrw=write\nbs=4k\nrate=1\nsize=128k\n";
    let s = stack("linear", "none");
    let text = run_json(&RunInput::texts(&s, job, 1)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["vmio"]["virtual_time_ns"].as_u64().unwrap() > 100_000 * vmio_core::SEC);
    assert_eq!(v["jobs"][0]["write"]["io_bytes"].as_u64(), Some(128 * 1024));
    let per_s = v["vmio"]["vms"][0]["bytes_per_s"].as_array().unwrap();
    assert!(per_s.len() as u64 <= crate::sim::jobs::TIMELINE_MAX_S);
    let counted: u64 = per_s.iter().map(|b| b.as_u64().unwrap()).sum();
    assert!(counted < 128 * 1024 && counted > 0, "{counted}");
    let notes = v["vmio"]["notes"].as_array().unwrap();
    assert!(notes
        .iter()
        .any(|n| n.as_str().unwrap().contains("cover the first 86400 s")));
}
