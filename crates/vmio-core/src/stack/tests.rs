use super::*;
use crate::cache::pdc::{self, PdcSpec};
use crate::cpu::CoreSet;
use crate::nbd::{self, NbdSpec};
use crate::SEC;

const GOOD: &str = r#"
[host]
cores = 8
memory = "32g"
[[device]]
name = "sda"
model = "hdd"
profile = "hdd-7200-2tb"
[[device]]
name = "sdb"
model = "hdd"
rpm = 5400
[[volume]]
name = "data"
layout = "stripe"
devices = ["sda", "sdb"]
stripe_size = "128k"
[scheduler]
name = "none"
[page_cache]
memory = "16g"
dirty_expire = "10s"
[[vm]]
name = "vm1"
[[vm.disk]]
name = "sdb"
volume = "data"
size = "100g"
interface = "virtio-scsi"
cache = "none"
"#;

fn err(text: &str) -> String {
    Stack::from_toml(text, "s.toml").unwrap_err().to_string()
}

#[test]
fn a_complete_stack_parses_with_defaults_filled_in() {
    let s = Stack::from_toml(GOOD, "s.toml").unwrap();
    assert_eq!(s.volumes[0].layout.name, "stripe");
    assert_eq!(s.volumes[0].params.int("stripe_size"), 128 << 10);
    assert_eq!(s.volumes[0].devices, vec![0, 1]);
    assert_eq!(s.page_cache.memory_bytes, 16 << 30);
    assert_eq!(s.page_cache.dirty_expire_ns, 10 * SEC);
    assert_eq!(s.page_cache.dirty_ratio, 20);
    assert_eq!(s.vms[0].disks[0].cache, CacheMode::None);
    assert_eq!(s.vms[0].disks[0].interface, Interface::VirtioScsi);
    assert_eq!(s.devices[1].params["rpm"].as_integer(), Some(5400));
    assert_eq!(s.scheduler.name(), "none");
}

#[test]
fn an_unknown_layout_names_the_field_and_the_accepted_values() {
    let e = err(&GOOD.replace("layout = \"stripe\"", "layout = \"raid5\""));
    assert!(e.starts_with("s.toml: volume[0].layout:"), "{e}");
    assert!(e.contains("single, linear, stripe, raid0"), "{e}");
}

#[test]
fn a_missing_device_reference_lists_the_defined_devices() {
    let e = err(&GOOD.replace(
        "devices = [\"sda\", \"sdb\"]",
        "devices = [\"sda\", \"sdc\"]",
    ));
    assert!(e.contains("volume[0].devices[1]"), "{e}");
    assert!(
        e.contains("no device named 'sdc'; defined: sda, sdb"),
        "{e}"
    );
}

#[test]
fn a_bad_cache_mode_lists_the_five_qemu_modes() {
    let e = err(&GOOD.replace("cache = \"none\"", "cache = \"fast\""));
    assert!(e.contains("vm[0].disk[0].cache"), "{e}");
    assert!(
        e.contains("none, writeback, writethrough, directsync, unsafe"),
        "{e}"
    );
}

#[test]
fn unknown_keys_and_syntax_errors_name_the_file_and_line() {
    let e = err(&GOOD.replace("[scheduler]", "[scheduler]\nquantum = 3"));
    assert!(e.starts_with("s.toml:"), "{e}");
    assert!(e.contains("quantum"), "{e}");
    let e = err("[host\ncores = 1");
    assert!(e.starts_with("s.toml:1:") && !e.contains('\n'), "{e}");
}

#[test]
fn stripe_options_on_other_layouts_are_refused() {
    let e = err(&GOOD.replace("layout = \"stripe\"", "layout = \"linear\""));
    assert!(
        e.contains("volume[0].stripe_size: only valid with layout = \"stripe\""),
        "{e}"
    );
}

#[test]
fn a_single_layout_with_two_devices_is_refused() {
    let e = err(&GOOD
        .replace("layout = \"stripe\"", "layout = \"single\"")
        .replace("stripe_size = \"128k\"", ""));
    assert!(e.contains("needs exactly 1 device, got 2"), "{e}");
}

#[test]
fn weights_outside_blkio_range_are_refused() {
    let e = err(&GOOD.replace("name = \"vm1\"", "name = \"vm1\"\nweight = 5"));
    assert!(
        e.contains("vm[0].weight: 5: must be within 10..=1000"),
        "{e}"
    );
}

#[test]
fn disks_must_fit_their_volume() {
    let mut s = Stack::from_toml(GOOD, "s.toml").unwrap();
    let e = s.resolve_disk_sizes(&[50 << 30]).unwrap_err().to_string();
    assert!(e.contains("vm[0].disk[0].size"), "{e}");
    let mut s = Stack::from_toml(&GOOD.replace("size = \"100g\"", ""), "s.toml").unwrap();
    s.resolve_disk_sizes(&[50 << 30]).unwrap();
    assert_eq!(s.vms[0].disks[0].size_bytes, 50 << 30);
}

#[test]
fn cfq_options_are_read_and_refused_on_other_schedulers() {
    let s = Stack::from_toml(
        &GOOD.replace(
            "[scheduler]\nname = \"none\"",
            "[scheduler]\nname = \"mcfq\"\nslice_idle = \"4ms\"\nquantum = 4\nbw_window = 5",
        ),
        "s.toml",
    )
    .unwrap();
    assert_eq!(s.scheduler.name(), "mcfq");
    let v = &s.scheduler.params;
    assert_eq!(v.int("slice_idle"), 4 * crate::MS);
    assert_eq!(v.int("slice_sync"), 100 * crate::MS);
    assert_eq!((v.int("quantum"), v.int("bw_window")), (4, 5));
    let e = err(&GOOD.replace(
        "[scheduler]\nname = \"none\"",
        "[scheduler]\nname = \"cfq\"\nbw_window = 5",
    ));
    assert!(
        e.contains("scheduler.bw_window: only valid with name = \"mcfq\""),
        "{e}"
    );
    let e = err(&GOOD.replace("[scheduler]\nname = \"none\"", "[scheduler]\nquantum = 4"));
    assert!(
        e.contains("scheduler.quantum: only valid with name = \"cfq\" or \"mcfq\""),
        "{e}"
    );
    let e = err(&GOOD.replace("name = \"none\"", "name = \"bfq\""));
    assert!(e.contains("none, mq-deadline, cfq, mcfq"), "{e}");
}

#[test]
fn device_path_and_size_for_the_real_engine_are_read_and_checked() {
    let text = GOOD.replace(
        "rpm = 5400",
        "rpm = 5400\npath = \"disks/b.img\"\nsize = \"64m\"",
    );
    let s = Stack::from_toml(&text, "s.toml").unwrap();
    assert_eq!(s.devices[1].path.as_deref(), Some("disks/b.img"));
    assert_eq!(s.devices[1].size_bytes, Some(64 << 20));
    assert!(!s.devices[1].params.contains_key("path"));
    assert_eq!(s.devices[0].path, None);
    let e = err(&GOOD.replace("rpm = 5400", "size = 1000"));
    assert!(
        e.contains("device[1].size: 1000 bytes: must be a positive multiple of 4k"),
        "{e}"
    );
    let e = err(&GOOD.replace("rpm = 5400", "path = \"\""));
    assert!(e.contains("device[1].path"), "{e}");
}

#[test]
fn toml_syntax_errors_are_one_line_with_file_line_and_column() {
    let e = err("[host]\ncores = 1\n[scheduler\nname = \"none\"\n");
    assert!(e.starts_with("s.toml:3:"), "{e}");
    assert!(!e.contains('\n') && e.len() <= 300, "{e}");
    let e = err(&GOOD.replace("[scheduler]", "[scheduler]\nquantum = 3"));
    assert!(e.starts_with("s.toml:") && !e.contains('\n'), "{e}");
}

/// GOOD with a second VM whose disk lies at `offset` on the same volume.
fn two_disks(offset: &str) -> Stack {
    let text = format!(
        "{GOOD}[[vm]]\nname = \"vm2\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"data\"\noffset = \"{offset}\"\nsize = \"100g\"\ncache = \"none\"\n"
    );
    Stack::from_toml(&text, "s.toml").unwrap()
}

#[test]
fn overlapping_vm_disks_on_one_volume_are_refused_naming_both_disks_and_ranges() {
    let mut s = two_disks("50g");
    let e = s.resolve_disk_sizes(&[1 << 40]).unwrap_err().to_string();
    assert_eq!(
        e,
        "s.toml: vm[1].disk[0]: bytes 53687091200..161061273600 of volume 'data' overlap vm[0].disk[0] (bytes 0..107374182400); accepted: disks of one volume at disjoint offset..offset+size ranges"
    );
    assert!(two_disks("100g").resolve_disk_sizes(&[1 << 40]).is_ok());
}

#[test]
fn a_qcow2_disk_occupies_its_image_chains_host_bytes_on_the_volume() {
    // 100 GiB of qcow2 at 64 KiB clusters is 107390828544 host bytes (qemu-img measure):
    // a second disk at offset 100g overlaps it, one at the region's end does not.
    let qcow2 = |offset: &str| {
        let text = GOOD.replace(
            "cache = \"none\"\n",
            "cache = \"none\"\nformat = \"qcow2\"\n",
        );
        let text = format!(
            "{text}[[vm]]\nname = \"vm2\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"data\"\noffset = {offset}\nsize = \"100g\"\ncache = \"none\"\n"
        );
        Stack::from_toml(&text, "s.toml").unwrap()
    };
    let e = qcow2("\"100g\"")
        .resolve_disk_sizes(&[1 << 40])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("overlap vm[0].disk[0] (bytes 0..107390828544)"),
        "{e}"
    );
    assert!(qcow2("107390894080").resolve_disk_sizes(&[1 << 40]).is_ok());
    // size = 0: the largest virtual size whose chain fits the rest of the volume.
    let text = GOOD.replace("size = \"100g\"\n", "").replace(
        "cache = \"none\"\n",
        "cache = \"none\"\nformat = \"qcow2\"\n",
    );
    let mut s = Stack::from_toml(&text, "s.toml").unwrap();
    s.resolve_disk_sizes(&[107_390_828_544]).unwrap();
    assert_eq!(s.vms[0].disks[0].size_bytes, 100 << 30);
    // A raw disk's region stays its size, and a stack without images shows no image keys.
    let raw = Stack::from_toml(GOOD, "s.toml").unwrap();
    let shown = toml::to_string(&raw.vms[0].disks[0]).unwrap();
    assert!(
        !shown.contains("image") && !shown.contains("format"),
        "{shown}"
    );
    // A bad image key is one line naming the field.
    let bad = GOOD.replace(
        "cache = \"none\"\n",
        "cache = \"none\"\n[vm.disk.image]\ncluster_size = \"64k\"\n",
    );
    assert_eq!(
        err(&bad),
        "s.toml: vm[0].disk[0].image.cluster_size: only valid with format = \"qcow2\" (a raw image has no clusters, caches or backing file); accepted with raw: preallocation, discard"
    );
    let bad = GOOD.replace(
        "cache = \"none\"\n",
        "cache = \"none\"\nformat = \"vmdk\"\n",
    );
    assert_eq!(
        err(&bad),
        "s.toml: vm[0].disk[0].format: 'vmdk' is not valid; accepted: raw, qcow2"
    );
}

#[test]
fn a_device_used_by_two_volumes_is_refused() {
    let text = GOOD.replace(
        "[scheduler]",
        "[[volume]]\nname = \"more\"\nlayout = \"single\"\ndevices = [\"sdb\"]\n[scheduler]",
    );
    let e = err(&text);
    assert!(
        e.starts_with(
            "s.toml: volume[1].devices[0]: device 'sdb' is already used by volume[0] 'data'"
        ),
        "{e}"
    );
}

#[test]
fn two_devices_backed_by_the_same_file_are_refused_naming_both() {
    let with_paths = |a: &str, b: &str| {
        let text = GOOD
            .replace("name = \"sda\"", &format!("name = \"sda\"\npath = \"{a}\""))
            .replace(
                "name = \"sdb\"\nmodel",
                &format!("name = \"sdb\"\npath = \"{b}\"\nmodel"),
            );
        Stack::from_toml(&text, "s.toml").unwrap()
    };
    let dir = std::env::temp_dir().join(format!("vmio-backing-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("img"), b"").unwrap();
    // The same existing file by two spellings (inode), and a missing one (normalized path).
    for (a, b) in [
        ("img", "sub/../img"),
        ("missing.img", "./sub/../missing.img"),
    ] {
        let e = with_paths(a, b)
            .check_backing_files(&dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml: device[1].path: ")
                && e.contains("of device 'sdb' is the same file as device[0] 'sda'"),
            "{e}"
        );
    }
    assert!(with_paths("img", "other.img")
        .check_backing_files(&dir)
        .is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn scheduler_keys_are_checked_against_the_registered_schedulers() {
    let with = |body: &str| GOOD.replace("[scheduler]\nname = \"none\"", body);
    let e = err(&with("[scheduler]\nname = \"cfq\"\nslice_sync = 0"));
    assert_eq!(
        e,
        "s.toml: scheduler.slice_sync: 0: must be a positive duration (a number of seconds, or a string like \"8.5ms\", \"50us\")"
    );
    let e = err(&with("[scheduler]\nread_expyre = \"1s\""));
    assert!(
        e.starts_with("s.toml: scheduler.read_expyre: unknown key; accepted: name, read_expire, write_expire, max_merge, slice_sync, slice_idle, quantum, bw_window"),
        "{e}"
    );
    let e = err(&with("[scheduler]\nname = 3"));
    assert!(
        e.contains("scheduler.name: 3 is not a scheduler name"),
        "{e}"
    );
    let s = Stack::from_toml(&with("[scheduler]\nmax_merge = \"512k\""), "s.toml").unwrap();
    assert_eq!(s.scheduler.name(), crate::sched::DEFAULT);
    assert_eq!(s.scheduler.params.int("max_merge"), 512 << 10);
}

#[test]
fn page_cache_keys_are_read_against_the_declared_parameters_with_linux_defaults() {
    let with = |body: &str| {
        GOOD.replace(
            "[page_cache]\nmemory = \"16g\"\ndirty_expire = \"10s\"",
            &format!("[page_cache]\n{body}"),
        )
    };
    let pc = Stack::from_toml(&with(""), "s.toml").unwrap().page_cache;
    assert_eq!(
        (pc.memory_bytes, pc.dirty_ratio, pc.dirty_background_ratio),
        (16 << 30, 20, 10)
    );
    assert_eq!(
        (
            pc.dirty_expire_ns,
            pc.writeback_interval_ns,
            pc.copy_rate_bps
        ),
        (30 * SEC, 5 * SEC, 21_330_000_000)
    );
    let text = "memory = \"2g\"\ndirty_ratio = 40\ndirty_background_ratio = 40\nwriteback_interval = 0.5\ncopy_rate = \"10g/s\"";
    let pc = Stack::from_toml(&with(text), "s.toml").unwrap().page_cache;
    assert_eq!(
        (pc.memory_bytes, pc.dirty_ratio, pc.dirty_background_ratio),
        (2 << 30, 40, 40)
    );
    assert_eq!(
        (pc.writeback_interval_ns, pc.copy_rate_bps),
        (SEC / 2, 10 << 30)
    );
    for (body, message) in [
        (
            "dirty_ratio = 150",
            "page_cache.dirty_ratio: 150: must be an integer from 0 to 100",
        ),
        (
            "dirty_ratio = 5",
            "page_cache.dirty_background_ratio: 10: must not exceed page_cache.dirty_ratio (5)",
        ),
        (
            "memory = \"33g\"",
            "page_cache.memory: 35433480192 bytes exceeds host.memory (34359738368 bytes)",
        ),
        (
            "writeback_interval = 0",
            "page_cache.writeback_interval: 0: must be a positive duration (a number of seconds, or a string like \"8.5ms\", \"50us\")",
        ),
        (
            "copy_rate = 0",
            "page_cache.copy_rate: 0: must be a positive rate in bytes/s (a number, or a string like \"220m\" or \"220m/s\")",
        ),
        (
            "dirty_expiry = \"1s\"",
            "page_cache.dirty_expiry: unknown key; accepted: eviction, memory, dirty_ratio, dirty_background_ratio, dirty_expire, writeback_interval, copy_rate",
        ),
        (
            "eviction = 2",
            "page_cache.eviction: '2' is not valid; accepted: clock, lru",
        ),
    ] {
        assert_eq!(err(&with(body)), format!("s.toml: {message}"), "{body}");
    }
}

#[test]
fn the_pdc_table_is_read_against_the_detectors_parameters_and_shown_with_a_pdc_disk() {
    let with = |pdc: &str, cache: &str| {
        GOOD.replace("[[vm]]", &format!("[pdc]\n{pdc}\n[[vm]]"))
            .replace("cache = \"none\"", &format!("cache = \"{cache}\""))
    };
    let s = Stack::from_toml(&with("", "pdc"), "s.toml").unwrap();
    assert_eq!(s.pdc, Some(PdcSpec::default()));
    let s = Stack::from_toml(&with("group = \"64m\"\nstreams = 8", "pdc"), "s.toml").unwrap();
    let spec = s.pdc.unwrap();
    assert_eq!((spec.group_bytes, spec.streams), (64 << 20, 8));
    let record = toml::to_string(&spec).unwrap();
    let keys: Vec<&str> = record
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    let declared: Vec<String> = pdc::PARAMS.iter().map(|p| p.record_key()).collect();
    assert_eq!(keys, declared);
    // Without a PDC disk the table is checked, then left out of the effective stack.
    let s = Stack::from_toml(&with("streams = 2", "writeback"), "s.toml").unwrap();
    assert_eq!(s.pdc, None);
    assert!(!toml::to_string(&s).unwrap().contains("pdc"));
    for (body, message) in [
        (
            "streams = 0",
            "pdc.streams: 0: must be an integer from 1 to 64",
        ),
        (
            "group = 0",
            "pdc.group: 0: must be a size in bytes (an integer, or a string like \"256m\", \"2t\"): size > 0",
        ),
        (
            "journal = 2",
            "pdc.journal: unknown key; accepted: group, streams, min_pass, min_syncs, window, max_misses, max_journal, journals, events",
        ),
    ] {
        assert_eq!(err(&with(body, "writeback")), format!("s.toml: {message}"), "{body}");
    }
}

#[test]
fn the_page_cache_record_keys_are_the_declared_parameters_record_keys() {
    let s = Stack::from_toml(GOOD, "s.toml").unwrap();
    let record = toml::to_string(&s.page_cache).unwrap();
    let keys: Vec<&str> = record
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    let declared: Vec<String> = crate::cache::linux::PARAMS
        .iter()
        .map(|p| p.record_key())
        .collect();
    assert_eq!(keys, declared);
}

#[test]
fn the_scheduler_record_lists_every_registered_parameter_with_its_unit() {
    let s = Stack::from_toml(GOOD, "s.toml").unwrap();
    let record = toml::to_string(&s.scheduler).unwrap();
    assert_eq!(
        record.lines().collect::<Vec<_>>(),
        [
            "name = \"none\"",
            "read_expire_ns = 500000000",
            "write_expire_ns = 5000000000",
            "max_merge_bytes = 1310720",
            "slice_sync_ns = 100000000",
            "slice_idle_ns = 8000000",
            "quantum = 8",
            "bw_window_s = 10",
        ]
    );
}

#[test]
fn volume_keys_are_checked_against_the_registered_layouts() {
    let e = err(&GOOD.replace("stripe_size = \"128k\"", "stripe_size = \"48k\""));
    assert!(
        e.starts_with("s.toml: volume[0].stripe_size: 49152: must be a size in bytes")
            && e.ends_with(": a power of two >= 4k"),
        "{e}"
    );
    let e = err(&GOOD.replace("stripe_size = \"128k\"", "stripe = \"128k\""));
    assert_eq!(
        e,
        "s.toml: volume[0].stripe: unknown key; accepted: name, layout, devices, read_ahead_kb, filesystem, stripe_size, chunk"
    );
    let e = err(&GOOD.replace("stripe_size = \"128k\"", "chunk = \"1m\""));
    assert!(
        e.contains("volume[0].chunk: only valid with layout = \"raid0\""),
        "{e}"
    );
    let s = Stack::from_toml(
        &GOOD.replace("layout = \"stripe\"", "layout = \"striped\""),
        "s.toml",
    )
    .unwrap();
    assert_eq!(s.volumes[0].layout.name, "stripe");
}

/// GOOD with `host` lines replacing `[host]`'s, `extra` appended after it, and `vm` lines
/// appended to the VM (before its disk).
fn cpu_stack(host: &str, extra: &str, vm: &str) -> String {
    GOOD.replace(
        "cores = 8\nmemory = \"32g\"\n",
        &format!("cores = 4\nmemory = \"32g\"\n{host}\n{extra}\n"),
    )
    .replace("name = \"vm1\"\n", &format!("name = \"vm1\"\n{vm}\n"))
}

#[test]
fn a_cpu_table_reads_the_model_the_mechanisms_and_libvirt_pinning() {
    let text = cpu_stack(
        "hypervisor = \"xen\"",
        "[cpu]\nmodel = \"cfs\"\nexit = \"2us\"\ndom0_vcpus = 2\ndom0_pin = \"0-1\"",
        "vcpus = 2\n[vm.cputune]\nvcpupin = [\"2\", \"3\"]\nemulatorpin = \"0,^0,1\"",
    );
    let s = Stack::from_toml(&text, "s.toml").unwrap();
    let c = s.cpu.as_ref().unwrap();
    assert_eq!((c.model, c.dom0_vcpus), ("cfs", 2));
    assert_eq!(c.dom0_pin, Some(CoreSet::of(&[0, 1])));
    assert_eq!(c.params.int("exit"), 2_000);
    let t = &s.vms[0].cputune;
    assert_eq!(
        t.vcpupin,
        vec![Some(CoreSet::of(&[2])), Some(CoreSet::of(&[3]))]
    );
    assert_eq!(t.emulatorpin, Some(CoreSet::of(&[1])));
    // Without [cpu]: the dedicated model, and nothing of it in the effective stack.
    let s = Stack::from_toml(GOOD, "s.toml").unwrap();
    assert_eq!(s.cpu_model(), "dedicated");
    assert!(s.cpu.is_none());
}

#[test]
fn bad_cpu_tables_name_the_field_and_what_is_accepted() {
    let e = err(&cpu_stack("", "[cpu]\nmodel = \"eevdf\"", ""));
    assert_eq!(
        e,
        "s.toml: cpu.model: 'eevdf' is not valid; accepted: dedicated, cfs"
    );
    let e = err(&cpu_stack("", "[cpu]\ndom0_pin = \"0\"", ""));
    assert_eq!(
        e,
        "s.toml: cpu.dom0_pin: only valid with host.hypervisor = \"xen\""
    );
    let e = err(&cpu_stack("", "[cpu]\nquantum = 3", ""));
    assert!(
        e.starts_with("s.toml: cpu.quantum: unknown key; accepted: sched_latency"),
        "{e}"
    );
    let e = err(&cpu_stack(
        "",
        "",
        "vcpus = 1\n[vm.cputune]\nvcpupin = [\"0\", \"1\"]",
    ));
    assert_eq!(
        e,
        "s.toml: vm[0].cputune.vcpupin: 2 cpusets for 1 vCPU; accepted: at most one per vCPU"
    );
    let e = err(&cpu_stack("", "", "[vm.cputune]\nemulatorpin = \"7\""));
    assert!(
        e.starts_with("s.toml: vm[0].cputune.emulatorpin: core 7 is not on this host"),
        "{e}"
    );
}

#[test]
fn a_native_host_runs_groups_of_processes_on_its_own_block_layer() {
    let native = GOOD
        .replace("cores = 8\n", "cores = 8\nhypervisor = \"native\"\n")
        .replace("interface = \"virtio-scsi\"\n", "");
    let s = Stack::from_toml(&native, "s.toml").unwrap();
    assert_eq!(s.vms[0].disks[0].interface, Interface::Host);
    let e = err(&native.replace("cache = \"none\"", "cache = \"writeback\""));
    assert!(
        e.starts_with("s.toml: vm[0].disk[0].cache: 'writeback' needs a VMM"),
        "{e}"
    );
    let e = err(&native.replace("name = \"vm1\"\n", "name = \"vm1\"\nvcpus = 2\n"));
    assert!(
        e.starts_with("s.toml: vm[0].vcpus: has no meaning with host.hypervisor = \"native\""),
        "{e}"
    );
    let e = err(&GOOD.replace("interface = \"virtio-scsi\"", "interface = \"host\""));
    assert!(e.starts_with("s.toml: vm[0].disk[0].interface: 'host' is only valid with host.hypervisor = \"native\""), "{e}");
}

/// GOOD with `sdb` replaced by a device whose table is `sdb` (a region of `sda` when it has
/// `share`).
fn shared(sdb: &str) -> String {
    GOOD.replace(
        "name = \"sdb\"\nmodel = \"hdd\"\nrpm = 5400",
        &format!("name = \"sdb\"\n{sdb}"),
    )
}

#[test]
fn a_sharing_device_reads_its_region_and_takes_its_hardwares_model() {
    let s = Stack::from_toml(
        &shared("share = \"sda\"\nstart = \"128g\"\ncapacity = \"64g\"\npath = \"b.img\""),
        "s.toml",
    )
    .unwrap();
    let d = &s.devices[1];
    assert_eq!(
        d.share,
        Some(ShareSpec {
            device: 0,
            start_bytes: Some(128 << 30),
            capacity_bytes: Some(64 << 30),
        })
    );
    assert_eq!((d.model.as_str(), d.profile.as_deref()), ("hdd", None));
    assert!(d.params.is_empty());
    assert_eq!(s.devices[0].share, None);
    // vmio serve: the backing file is of the region's size unless size says otherwise.
    assert_eq!(d.backing_size_bytes(), Some(64 << 30));
    let s = Stack::from_toml(
        &shared("share = \"sda\"\ncapacity = \"64g\"\nsize = \"1g\""),
        "s.toml",
    )
    .unwrap();
    assert_eq!(s.devices[1].backing_size_bytes(), Some(1 << 30));
    assert_eq!(s.devices[0].backing_size_bytes(), None);
}

#[test]
fn a_sharing_device_with_a_model_profile_or_parameter_is_refused_naming_the_key() {
    for (key, what) in [
        (
            "model = \"ssd\"",
            "'model' with 'share': a shared device has its hardware's model",
        ),
        (
            "profile = \"x\"",
            "'profile' with 'share': a shared device has its hardware's profile",
        ),
        (
            "rpm = 5400",
            "'rpm' with 'share': a shared device has its hardware's parameters",
        ),
    ] {
        let e = err(&shared(&format!("share = \"sda\"\n{key}")));
        assert_eq!(
            e,
            format!("s.toml: device[1] 'sdb': {what}; accepted: name, share, start, capacity, path, size")
        );
    }
}

#[test]
fn share_must_name_an_earlier_device_that_does_not_share() {
    let e = err(&shared("share = \"sdz\""));
    assert_eq!(
        e,
        "s.toml: device[1].share: no earlier device named 'sdz'; accepted: an earlier device with a model: sda"
    );
    // Itself or a later device is not earlier.
    let e = err(&shared("share = \"sdb\""));
    assert!(
        e.contains("device[1].share: no earlier device named 'sdb'"),
        "{e}"
    );
    let chain = shared("share = \"sda\"").replace(
        "[[volume]]",
        "[[device]]\nname = \"sdc\"\nshare = \"sdb\"\n[[volume]]",
    );
    assert_eq!(
        err(&chain),
        "s.toml: device[2].share: 'sdb' shares 'sda' itself; accepted: an earlier device with a model (no chains): sda"
    );
}

#[test]
fn start_and_capacity_are_sizes_in_multiples_of_4k_and_start_needs_share() {
    let e = err(&shared("share = \"sda\"\nstart = 1000"));
    assert_eq!(
        e,
        "s.toml: device[1].start: 1000 bytes: accepted: a multiple of 4k"
    );
    let e = err(&shared("share = \"sda\"\ncapacity = 0"));
    assert_eq!(
        e,
        "s.toml: device[1].capacity: 0 bytes: accepted: a positive multiple of 4k"
    );
    let e = err(&shared("share = \"sda\"\ncapacity = true"));
    assert!(
        e.starts_with("s.toml: device[1].capacity: true: must be a size in bytes"),
        "{e}"
    );
    let e = err(&shared("share = \"sda\"\nstart = \"12q\""));
    assert!(e.starts_with("s.toml: device[1].start: "), "{e}");
    let e = err(&shared("model = \"hdd\"\nstart = \"4k\""));
    assert_eq!(
        e,
        "s.toml: device[1].start: only valid with share = an earlier device"
    );
    let e = err(&shared("rpm = 5400"));
    assert_eq!(
        e,
        "s.toml: device[1].model: missing; accepted: a model (vmio help stack), or share = an earlier device"
    );
}

/// GOOD's sda of `size` (if any) shared by sdb and a third device sdc.
fn three_regions(size: &str, sdb: &str, sdc: &str) -> Stack {
    let text = shared(&format!("share = \"sda\"\n{sdb}"))
        .replace(
            "profile = \"hdd-7200-2tb\"",
            &format!("profile = \"hdd-7200-2tb\"\n{size}"),
        )
        .replace(
            "[[volume]]",
            &format!("[[device]]\nname = \"sdc\"\nshare = \"sda\"\n{sdc}\n[[volume]]"),
        );
    Stack::from_toml(&text, "s.toml").unwrap()
}

fn region(hardware: usize, start_bytes: u64, capacity_bytes: u64) -> Option<Region> {
    Some(Region {
        hardware,
        start_bytes,
        capacity_bytes,
    })
}

#[test]
fn regions_follow_one_another_from_the_shared_devices_own_size() {
    const G: u64 = 1 << 30;
    let s = three_regions("size = \"128g\"", "capacity = \"64g\"", "");
    assert_eq!(
        s.regions(&[1024 * G, 0, 0]).unwrap(),
        [
            region(0, 0, 128 * G),
            region(0, 128 * G, 64 * G),
            region(0, 192 * G, 832 * G)
        ]
    );
    // Without a size the shared device is its whole hardware; explicit regions may lie in
    // it (a disk and its partitions).
    let s = three_regions(
        "",
        "start = \"128g\"\ncapacity = \"64g\"",
        "start = \"192g\"",
    );
    assert_eq!(
        s.regions(&[1024 * G, 0, 0]).unwrap(),
        [
            region(0, 0, 1024 * G),
            region(0, 128 * G, 64 * G),
            region(0, 192 * G, 832 * G)
        ]
    );
    // A stack without share has no regions.
    let s = Stack::from_toml(GOOD, "s.toml").unwrap();
    assert_eq!(s.regions(&[G, G]).unwrap(), [None, None]);
}

#[test]
fn regions_beyond_the_hardware_are_refused_naming_the_field() {
    const G: u64 = 1 << 30;
    let e = |s: Stack| s.regions(&[256 * G, 0, 0]).unwrap_err().to_string();
    assert_eq!(
        e(three_regions("", "capacity = \"64g\"", "")),
        "s.toml: device[1].start: 274877906944 bytes (the default: right after the earlier regions on the hardware) leaves no room on the hardware of 'sda' (274877906944 bytes); accepted: a start below 274877906944, or a size on 'sda' (its own region [0, size))"
    );
    assert_eq!(
        e(three_regions("size = \"128g\"", "capacity = \"200g\"", "")),
        "s.toml: device[1].capacity: start 137438953472 + capacity 214748364800 bytes exceeds the capacity of 'sda' (274877906944 bytes); accepted: a capacity up to 137438953472"
    );
    assert_eq!(
        e(three_regions("size = \"300g\"", "", "")),
        "s.toml: device[0].size: 322122547200 bytes: 'sda' is shared, its region of its hardware is [0, size), beyond its capacity (274877906944 bytes); accepted: a size up to 274877906944"
    );
    assert!(e(three_regions("size = \"128g\"", "start = \"256g\"", ""))
        .starts_with("s.toml: device[1].start: 274877906944 bytes leaves no room"));
}

#[test]
fn the_nbd_table_gives_the_costs_of_nbd_disks_and_is_refused_on_a_native_host() {
    let with = |nbd: &str, interface: &str| {
        GOOD.replace("[[vm]]", &format!("[nbd]\n{nbd}\n[[vm]]"))
            .replace("\"virtio-scsi\"", &format!("\"{interface}\""))
    };
    let s = Stack::from_toml(&with("", "nbd"), "s.toml").unwrap();
    assert_eq!(s.vms[0].disks[0].interface, Interface::Nbd);
    assert_eq!(s.nbd, Some(NbdSpec::default()));
    let s = Stack::from_toml(
        &with("handoff = \"90us\"\nread_rate = \"800m\"", "nbd"),
        "s.toml",
    )
    .unwrap();
    let spec = s.nbd.unwrap();
    assert_eq!((spec.handoff_ns, spec.read_rate_bps), (90_000, 800 << 20));
    let record = toml::to_string(&spec).unwrap();
    let keys: Vec<&str> = record
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    let declared: Vec<String> = nbd::PARAMS.iter().map(|p| p.record_key()).collect();
    // The threads' keys are recorded only when set (reports without them stay as they were).
    assert_eq!(keys, declared[..8]);
    let threads =
        "client_cpu = \"15us\"\nserver_cpu = \"10us\"\nserver_wake = \"15us\"\npool_cpu = \"30us\"";
    let s = Stack::from_toml(&with(threads, "nbd"), "s.toml").unwrap();
    let spec = s.nbd.unwrap();
    assert_eq!(
        (
            spec.client_cpu_ns,
            spec.server_cpu_ns,
            spec.server_wake_ns,
            spec.pool_cpu_ns
        ),
        (15_000, 10_000, 15_000, 30_000)
    );
    let record = toml::to_string(&spec).unwrap();
    let keys: Vec<&str> = record
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    assert_eq!(keys, declared[..12]);
    let rates = format!("{threads}\nqd1_read_rate = 5000000000\nqd1_write_rate = 3000000000");
    let spec = Stack::from_toml(&with(&rates, "nbd"), "s.toml")
        .unwrap()
        .nbd
        .unwrap();
    assert_eq!(
        (spec.qd1_read_rate_bps, spec.qd1_write_rate_bps),
        (5_000_000_000, 3_000_000_000)
    );
    let record = toml::to_string(&spec).unwrap();
    let keys: Vec<&str> = record
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    assert_eq!(keys, declared);
    let e = err(&with("pool_cpu = \"fast\"", "nbd"));
    assert!(
        e.starts_with("s.toml: nbd.pool_cpu:") && !e.contains('\n'),
        "{e}"
    );
    // Without an NBD disk the table is checked, then left out of the effective stack.
    let s = Stack::from_toml(&with("request = \"5us\"", "virtio-blk"), "s.toml").unwrap();
    assert_eq!(s.nbd, None);
    let e = err(&with("copy = 1", "nbd"));
    assert!(e.starts_with("s.toml: nbd.copy: unknown key"), "{e}");
    assert!(e.contains("handoff, request, read_rate, write_rate"), "{e}");
    let native = with("", "nbd").replace("cores = 8", "cores = 8\nhypervisor = \"native\"");
    let e = err(&native);
    assert!(
        e.contains("interface: 'nbd' needs a VM") && e.contains("accepted: host"),
        "{e}"
    );
}

#[test]
fn a_volume_filesystem_is_read_with_its_keys_and_its_keys_are_refused_without_it() {
    let fs = GOOD.replace(
        "stripe_size = \"128k\"",
        "stripe_size = \"128k\"\nfilesystem = \"ext4\"\njournal_size = \"64m\"",
    );
    let s = Stack::from_toml(&fs, "s.toml").unwrap();
    let spec = s.volumes[0].filesystem.as_ref().unwrap();
    assert_eq!(spec.entry.name, "ext4");
    assert_eq!(spec.params.int_or("journal_size", 0), 64 << 20);
    assert!(Stack::from_toml(GOOD, "s.toml").unwrap().volumes[0]
        .filesystem
        .is_none());
    // "none" states the default: a block device.
    let none = GOOD.replace(
        "stripe_size = \"128k\"",
        "stripe_size = \"128k\"\nfilesystem = \"none\"",
    );
    assert!(Stack::from_toml(&none, "s.toml").unwrap().volumes[0]
        .filesystem
        .is_none());
    assert_eq!(
        err(&GOOD.replace(
            "stripe_size = \"128k\"",
            "stripe_size = \"128k\"\nfilesystem = \"zfs\""
        )),
        "s.toml: volume[0].filesystem: 'zfs' is not valid; accepted: ext4, xfs, none"
    );
    assert_eq!(
        err(&GOOD.replace(
            "stripe_size = \"128k\"",
            "stripe_size = \"128k\"\nlog_size = \"64m\""
        )),
        "s.toml: volume[0].log_size: only valid with filesystem = \"xfs\""
    );
    assert_eq!(
        err(&fs.replace("journal_size = \"64m\"", "log_size = \"64m\"")),
        "s.toml: volume[0].log_size: only valid with filesystem = \"xfs\""
    );
}

#[test]
fn a_value_missing_at_the_end_of_the_text_is_an_error_with_a_message() {
    let e = Stack::from_toml("[[device]]\nname = ", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml:2:8: a value is missing after '='"),
        "{e}"
    );
}
