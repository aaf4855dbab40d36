//! The NBD path on the threads that run it (`[cpu] model = "cfs"`, `[nbd] client_cpu`,
//! `server_cpu`, `server_wake`, `pool_cpu`; vmio_core::nbd, "The threads"), against closed
//! forms.

use super::cpu_tests::run;
use serde_json::Value;

/// A KVM host of `cores` cores under CFS without its noise (no ticks, no housekeeping, no
/// migration cost), a RAM device of 1 µs, one VM of one vCPU whose disk is an NBD export
/// (aio = `aio`); `nbd` is more `[nbd]` lines. The path's own costs: hand-offs 100 µs,
/// request 20 µs, copies at 1 TB/s.
fn stack(cores: u32, kernel_complete: &str, aio: &str, nbd: &str) -> String {
    format!(
        "[host]\ncores = {cores}\n\
         [cpu]\nmodel = \"cfs\"\nmigration_cost = 0\nguest_hz = 0\nvmm_hz = 0\n\
         housekeeping_hz = 0\nkernel_complete = \"{kernel_complete}\"\n\
         [[device]]\nname = \"a\"\nmodel = \"ram\"\ncapacity = \"1g\"\n\
         latency = \"1000ns\"\nbandwidth = 100000000000\n[[volume]]\nname = \"v\"\n\
         layout = \"single\"\ndevices = [\"a\"]\n[scheduler]\nname = \"none\"\n\
         [nbd]\nhandoff = \"100us\"\nrequest = \"20us\"\nread_rate = 1000000000000\n\
         write_rate = 1000000000000\n{nbd}\
         [[vm]]\nname = \"vm1\"\nvcpus = 1\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\n\
         interface = \"nbd\"\ncache = \"none\"\naio = \"{aio}\"\n"
    )
}

fn writes(qd: u32) -> String {
    format!(
        "[j]\nrw=randwrite\nbs=4k\ndirect=1\nioengine=libaio\nsize=512m\niodepth={qd}\n\
         runtime=1\ntime_based\n"
    )
}

fn write_iops(j: &Value) -> f64 {
    j["jobs"][0]["write"]["iops"].as_f64().unwrap()
}

fn write_lat_ns(j: &Value) -> f64 {
    j["jobs"][0]["write"]["lat_ns"]["mean"].as_f64().unwrap()
}

/// The threads whose name contains `name`: their CPU time (ns) and work items completed.
fn thread_cpu(j: &Value, name: &str) -> (f64, f64) {
    let threads = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    threads
        .iter()
        .filter(|t| t["name"].as_str().unwrap().contains(name))
        .fold((0.0, 0.0), |(c, n), t| {
            (
                c + t["cpu_ns"].as_f64().unwrap(),
                n + t["completed"].as_f64().unwrap(),
            )
        })
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b
}

/// 4 KiB at 1 TB/s (the write's copy), and on the RAM device (1 µs + 4 KiB at 100 GB/s).
const COPY_NS: f64 = 4.096;
const DEVICE_NS: f64 = 1_000.0 + 40.96;
const THREADS: &str =
    "client_cpu = \"20us\"\nserver_cpu = \"10us\"\nserver_wake = \"5us\"\npool_cpu = \"30us\"\n";

#[test]
fn one_nbd_request_alone_on_one_core_takes_every_threads_cpu_the_device_and_the_hand_offs() {
    // QD1 on one core: nothing overlaps. The client's 20 µs (send + reap), the main loop's
    // request 20 µs + server_cpu 10 µs + two wake-ups of 5 µs (the request's arrival, the
    // worker's completion), the worker's 30 µs, the kernel's completion 10 µs, the device,
    // the copy and the 100 µs of hand-offs.
    let j = run(&stack(1, "10us", "threads", THREADS), &writes(1));
    let want = 20e3 + (20e3 + 10e3 + 2.0 * 5e3) + 30e3 + 10e3 + DEVICE_NS + COPY_NS + 100e3;
    let lat = write_lat_ns(&j);
    assert!((lat - want).abs() < 2.0, "{lat} vs {want}");
    // Per request on each thread (a request is two work items on the client's vCPU, the
    // main loop and the worker, one on the kernel's thread).
    let per = |name: &str, items: f64| {
        let (cpu, n) = thread_cpu(&j, name);
        cpu / (n / items)
    };
    assert!(close(per("vcpu0", 2.0), 20e3, 1e-6));
    assert!(close(per("main-loop", 2.0), 40e3 + COPY_NS, 1e-4));
    assert!(close(per("worker", 2.0), 30e3, 1e-6));
    assert!(close(per("kernel/core0", 1.0), 10e3, 1e-6));
    // One request at a time needs one worker.
    let workers = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert_eq!(workers.iter().filter(|t| t["kind"] == "worker").count(), 1);
}

#[test]
fn at_depth_on_two_cores_the_nbd_path_runs_at_the_busy_cores_over_its_cpu_per_request() {
    // No wake-up cost: 20 (client) + 20 + 10 (main loop) + 30 (worker) + 10 (kernel) =
    // 90 µs of CPU a request, no thread above 30 µs: IOPS = busy cores / 90 µs, up to
    // 2 / 90 µs = 22.2k; CFS leaves a core idle now and then while the other holds two
    // runnable threads (balancing is periodic, kernel/sched/fair.c), so a few % less.
    let nbd = "client_cpu = \"20us\"\nserver_cpu = \"10us\"\npool_cpu = \"30us\"\n";
    let j = run(&stack(2, "10us", "threads", nbd), &writes(16));
    let busy: Vec<f64> = j["vmio"]["cpu"]["core_busy_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap() / 1e9)
        .collect();
    assert!(busy.iter().all(|&b| b > 0.95), "{busy:?}");
    let iops = write_iops(&j);
    let want = busy.iter().sum::<f64>() * 1e9 / 90e3;
    assert!(close(iops, want, 0.005), "{iops} vs {want}");
    assert!(close(iops, 2e9 / 90e3, 0.05), "{iops}");
    // Up to one worker per request in flight.
    let workers = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    let n = workers.iter().filter(|t| t["kind"] == "worker").count();
    assert!((2..=16).contains(&n), "{n} workers");
}

#[test]
fn a_main_loop_that_finds_work_waiting_pays_its_wake_up_once_for_all_of_it() {
    // The main loop alone costs: request 20 µs + server_cpu 50 µs a request, and 20 µs a
    // wake-up. At QD1 every request wakes it twice (its arrival, its completion): 110 µs a
    // request. At QD16 it never sleeps: 70 µs a request, IOPS = 1 / 70 µs.
    let nbd = "server_cpu = \"50us\"\nserver_wake = \"20us\"\n";
    let s = stack(2, "0", "threads", nbd);
    let per_request = |j: &Value| {
        let (cpu, n) = thread_cpu(j, "main-loop");
        cpu / (n / 2.0)
    };
    let qd1 = run(&s, &writes(1));
    assert!(close(per_request(&qd1), 110e3 + COPY_NS, 1e-4));
    let want = 110e3 + DEVICE_NS + COPY_NS + 100e3;
    let lat = write_lat_ns(&qd1);
    assert!((lat - want).abs() < 2.0, "{lat} vs {want}");
    let qd16 = run(&s, &writes(16));
    let (iops, want) = (write_iops(&qd16), 1e9 / 70e3);
    assert!(close(iops, want, 0.01), "{iops} vs {want}");
    assert!(
        close(per_request(&qd16), 70e3, 0.01),
        "{}",
        per_request(&qd16)
    );
}

#[test]
fn without_a_thread_pool_an_nbd_request_skips_the_workers() {
    // aio = "native": the main loop submits itself (linux-aio), pool_cpu does not apply.
    let j = run(&stack(1, "10us", "native", THREADS), &writes(1));
    let want = 20e3 + 40e3 + 10e3 + DEVICE_NS + COPY_NS + 100e3;
    let lat = write_lat_ns(&j);
    assert!((lat - want).abs() < 2.0, "{lat} vs {want}");
    let threads = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert!(threads.iter().all(|t| t["kind"] != "worker"));
}

#[test]
fn the_thread_keys_at_zero_leave_an_nbd_run_under_cfs_as_it_was() {
    // Explicit zeros and no keys give the same report, without workers (the keys only add
    // work items' CPU; a request reaches the pool only with pool_cpu).
    let zeros = "client_cpu = 0\nserver_cpu = 0\nserver_wake = 0\npool_cpu = 0\n";
    let a = run(&stack(2, "10us", "threads", ""), &writes(4));
    let b = run(&stack(2, "10us", "threads", zeros), &writes(4));
    assert_eq!(a["jobs"], b["jobs"]);
    assert_eq!(a["vmio"]["cpu"], b["vmio"]["cpu"]);
    let threads = a["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert!(threads.iter().all(|t| t["kind"] != "worker"));
}

#[test]
fn more_requests_than_64_workers_wait_for_a_worker_of_the_pool() {
    // A 10 ms device at QD128: a worker is held from its pwrite to its return, 15 µs +
    // 10 ms + the kernel's 10 µs + 15 µs; QEMU's pool has 64 of them, so IOPS =
    // 64 / 10.04 ms (without the bound: 128 / 10 ms).
    let s = stack(2, "10us", "threads", "pool_cpu = \"30us\"\n")
        .replace("latency = \"1000ns\"", "latency = \"10ms\"");
    let j = run(&s, &writes(128));
    let hold = 10e6 + 40.96 + 10e3 + 30e3;
    let (iops, want) = (write_iops(&j), 64e9 / hold);
    assert!(close(iops, want, 0.01), "{iops} vs {want}");
    let threads = j["vmio"]["cpu"]["threads"].as_array().unwrap();
    assert_eq!(threads.iter().filter(|t| t["kind"] == "worker").count(), 64);
}

#[test]
fn the_thread_keys_outside_cfs_are_ignored_with_a_note() {
    let s = stack(1, "10us", "threads", THREADS)
        .replace("model = \"cfs\"\n", "model = \"dedicated\"\n");
    let j = run(&s, &writes(1));
    let plain = run(
        &stack(1, "10us", "threads", "").replace("model = \"cfs\"\n", "model = \"dedicated\"\n"),
        &writes(1),
    );
    assert_eq!(j["jobs"], plain["jobs"]);
    let notes = j["vmio"]["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("[nbd] client_cpu")),
        "{notes:?}"
    );
}
