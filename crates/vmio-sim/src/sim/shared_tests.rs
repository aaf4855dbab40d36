//! Devices sharing hardware (`[[device]] share`): one model fed by several queues.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};
use vmio_core::units::transfer_ns;

/// Copy bandwidth of the RAM devices (bytes/s) and their fixed latency (ns).
const RAM_BPS: u64 = 1_000_000_000;
const RAM_LATENCY_NS: u64 = 1_000;

/// A native host with the devices `devices` (TOML tables), one volume `volume` (its
/// `layout` and `devices` lines) and one disk `disk` (more `[[vm.disk]]` keys).
fn native_stack(devices: &str, volume: &str, disk: &str) -> String {
    format!(
        "[host]\nhypervisor = \"native\"\n{devices}\n[[volume]]\nname = \"data\"\n{volume}\n\
         [scheduler]\nname = \"none\"\n[[vm]]\nname = \"host\"\n\
         [[vm.disk]]\nname = \"sda\"\nvolume = \"data\"\n{disk}\n"
    )
}

/// Reading through a raid0 volume over a RAM device `a` and `b`, whose table is `b` after
/// `name = "b"` (a region of `a` when it has `share`).
fn raid0_stack(b: &str) -> String {
    native_stack(
        &format!(
            "[[device]]\nname = \"a\"\nmodel = \"ram\"\ncapacity = \"1g\"\nsize = \"512m\"\n\
             latency = \"{RAM_LATENCY_NS}ns\"\nbandwidth = {RAM_BPS}\n[[device]]\nname = \"b\"\n{b}"
        ),
        "layout = \"raid0\"\ndevices = [\"a\", \"b\"]",
        "",
    )
}

const SHARED_B: &str = "share = \"a\"";
fn independent_b() -> String {
    format!(
        "model = \"ram\"\ncapacity = \"512m\"\nlatency = \"{RAM_LATENCY_NS}ns\"\nbandwidth = {RAM_BPS}"
    )
}

fn sim(stack: &str, job: &str) -> RunOutput {
    run(&RunInput::texts(stack, job, 1)).unwrap_or_else(|e| panic!("{e}"))
}

/// 512 MiB read in 1 MiB requests, 16 outstanding: every request is a 512 KiB chunk on each
/// device of the raid0, and the devices' copy engines never wait for work.
const SEQ_READ: &str = "[r]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\niodepth=16\nsize=512m\n";
const READ_BYTES: u64 = 512 << 20;

fn read_bw(o: &RunOutput) -> f64 {
    let j = &o.report.jobs[0];
    assert_eq!(j.stats[0].io_bytes, READ_BYTES);
    READ_BYTES as f64 * 1e9 / j.runtime_ns as f64
}

#[test]
fn two_regions_of_one_ram_device_under_raid0_reach_its_bandwidth_where_two_devices_reach_twice() {
    // Closed forms: the copy engines are busy from the first command to the last, then one
    // latency: runtime = bytes / (engines × bandwidth) + latency, within the host's cost of
    // submitting the first request (a few µs of a run of 0.27 s or more: 2e-5).
    let one = READ_BYTES as f64 * 1e9 / (transfer_ns(READ_BYTES, RAM_BPS) + RAM_LATENCY_NS) as f64;
    let two =
        READ_BYTES as f64 * 1e9 / (transfer_ns(READ_BYTES / 2, RAM_BPS) + RAM_LATENCY_NS) as f64;
    let shared = read_bw(&sim(&raid0_stack(SHARED_B), SEQ_READ));
    let independent = read_bw(&sim(&raid0_stack(&independent_b()), SEQ_READ));
    assert!((shared / one - 1.0).abs() < 2e-5, "{shared} vs {one}");
    assert!(
        (independent / two - 1.0).abs() < 2e-5,
        "{independent} vs {two}"
    );
}

#[test]
fn the_shared_device_reports_its_hardware_and_the_sharing_device_what_its_queue_sent() {
    let o = sim(&raid0_stack(SHARED_B), SEQ_READ);
    let d = &o.report.devices;
    assert_eq!(d.len(), 2);
    assert_eq!((d[0].name.as_str(), d[0].model), ("a", "ram"));
    assert_eq!((d[1].name.as_str(), d[1].model), ("b", "ram"));
    // The hardware moved both halves; b sent one, in 512 KiB chunks.
    assert_eq!(d[0].stats.read_bytes, READ_BYTES);
    assert_eq!(d[1].stats.read_bytes, READ_BYTES / 2);
    assert_eq!(d[1].stats.read_ops, READ_BYTES / 2 / (512 << 10));
    assert_eq!(d[0].params[0], ("profile".to_string(), "ram".to_string()));
    let region: Vec<(&str, &str)> = d[1]
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (start, capacity) = ((512u64 << 20).to_string(), (512u64 << 20).to_string());
    assert_eq!(
        region,
        [
            ("share", "a"),
            ("start", start.as_str()),
            ("capacity", capacity.as_str())
        ]
    );
    // b was busy while one of its chunks was in the model: most of the run, not more.
    let vt = o.report.virtual_time_ns;
    assert!(d[1].stats.busy_ns <= d[0].stats.busy_ns && d[0].stats.busy_ns <= vt);
    assert!(
        d[1].stats.busy_ns * 10 > vt * 9,
        "{} of {vt}",
        d[1].stats.busy_ns
    );
}

/// Reading 1 GiB at `offset` of a single volume over `volume_device`: an HDD `a`, and
/// maybe a region of it (`b`: more `[[device]]` tables).
fn hdd_stack(b: &str, volume_device: &str, offset: &str) -> String {
    native_stack(
        &format!("[[device]]\nname = \"a\"\nmodel = \"hdd\"\n{b}"),
        &format!("layout = \"single\"\ndevices = [\"{volume_device}\"]"),
        &format!("offset = \"{offset}\"\nsize = \"1g\""),
    )
}

#[test]
fn a_sharing_devices_commands_reach_the_model_shifted_by_its_start() {
    // An HDD's media rate falls from its outer to its inner tracks: reading 1 GiB from the
    // start of region b (at 1500 GiB of a 2 TB disk) is reading the disk at 1500 GiB.
    let job = "[r]\nrw=read\nbs=1m\nioengine=libaio\ndirect=1\niodepth=4\nsize=1g\n";
    let region = "[[device]]\nname = \"b\"\nshare = \"a\"\nstart = \"1500g\"\ncapacity = \"100g\"";
    let via_region = sim(&hdd_stack(region, "b", "0"), job);
    let at_offset = sim(&hdd_stack("", "a", "1500g"), job);
    let at_start = sim(&hdd_stack("", "a", "0"), job);
    // The job's runtime and its read figures as fio's JSON gives them.
    let stats = |o: &RunOutput| {
        let j = &o.report.jobs[0];
        (
            j.runtime_ns,
            j.stats[0].to_json(j.runtime_ns, 0).to_string(),
        )
    };
    assert_eq!(stats(&via_region), stats(&at_offset));
    assert!(
        stats(&at_start).0 * 10 < stats(&at_offset).0 * 9,
        "the outer tracks are faster: {} vs {}",
        stats(&at_start).0,
        stats(&at_offset).0
    );
    // The model saw b's reads (a's queue sent nothing).
    assert_eq!(via_region.report.devices[0].stats.read_bytes, 1 << 30);
    assert_eq!(via_region.report.devices[1].stats.read_bytes, 1 << 30);
}

#[test]
fn a_run_with_shared_hardware_is_deterministic() {
    let job = "[j]\nrw=randrw\nbs=16k\nioengine=libaio\ndirect=1\niodepth=8\nsize=256m\nruntime=1\ntime_based\n";
    let s = raid0_stack(SHARED_B);
    let json = |seed| run_json(&RunInput::texts(&s, job, seed)).unwrap();
    assert_eq!(json(3), json(3));
    assert_ne!(json(3), json(4));
}

#[test]
fn a_region_beyond_its_hardwares_capacity_is_refused_naming_the_field() {
    let s = raid0_stack("share = \"a\"\ncapacity = \"768m\"");
    let e = run(&RunInput::texts(&s, SEQ_READ, 1))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "stack.toml: device[1].capacity: start 536870912 + capacity 805306368 bytes exceeds the capacity of 'a' (1073741824 bytes); accepted: a capacity up to 536870912"
    );
}

#[test]
fn shared_hardware_counts_its_models_memory_once() {
    let ssd = "[[device]]\nname = \"a\"\nmodel = \"ssd\"\ncapacity = \"1t\"\nsize = \"512g\"";
    let stack = |b: &str| {
        let text = native_stack(
            &format!("{ssd}\n[[device]]\nname = \"b\"\n{b}"),
            "layout = \"raid0\"\ndevices = [\"a\", \"b\"]",
            "",
        );
        vmio_core::stack::Stack::from_toml(&text, "stack.toml").unwrap()
    };
    let shared = stack("share = \"a\"");
    let (one, _) =
        crate::device::estimated_bytes("a", "ssd", None, &shared.devices[0].params).unwrap();
    assert!(one > 0);
    assert!(super::check_memory(&shared, one).is_ok());
    let independent = stack("model = \"ssd\"\ncapacity = \"1t\"");
    assert!(super::check_memory(&independent, one).is_err());
    assert!(super::check_memory(&independent, 2 * one).is_ok());
}
