//! Thin provisioning in the whole stack (device/thin.rs, `unprovision_images` in mod.rs): an
//! image file's unwritten region on a thin device pays its first writes, a preallocated
//! file's does not, and a thick device (`thin_block = 0`) is the model alone.

use crate::output::RunOutput;
use crate::run::{run, run_json, RunInput};
use vmio_core::{Ns, US};

/// A flash device (`device` lines added to its table) under a `single` volume with
/// `filesystem` lines, one VM disk of 256 MiB at 64 MiB of the volume, cache=none, and its
/// image's `preallocation`.
fn stack(device: &str, filesystem: &str, preallocation: &str) -> String {
    format!(
        "[[device]]\nname = \"nvme\"\nmodel = \"flash\"\ncapacity = \"16g\"\n{device}\
         [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"nvme\"]\n{filesystem}\
         [scheduler]\nname = \"none\"\n\
         [[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\noffset = \"64m\"\n\
         size = \"256m\"\ncache = \"none\"\n[vm.disk.image]\npreallocation = \"{preallocation}\"\n"
    )
}

const EXT4: &str = "filesystem = \"ext4\"\n";
const THIN: &str = "thin_block = \"64k\"\nthin_request = \"50us\"\nthin_block_cost = \"8.5us\"\n";

/// 64 sequential O_DIRECT writes of 1 MiB at QD1, then their overwrite.
const FIRST_THEN_OVER: &str =
    "[first]\nrw=write\nbs=1m\nioengine=libaio\niodepth=1\ndirect=1\nsize=64m\n\
     [over]\nstonewall\nrw=write\nbs=1m\nioengine=libaio\niodepth=1\ndirect=1\nsize=64m\n";
const WRITES: u64 = 64;

fn sim(stack_text: &str) -> RunOutput {
    run(&RunInput::texts(stack_text, FIRST_THEN_OVER, 1)).unwrap_or_else(|e| panic!("{e}"))
}

fn runtimes(o: &RunOutput) -> (Ns, Ns) {
    (o.report.jobs[0].runtime_ns, o.report.jobs[1].runtime_ns)
}

#[test]
fn thin_block_zero_gives_the_byte_identical_run_of_a_device_without_the_key() {
    for (fs, prealloc) in [("", "off"), (EXT4, "off"), (EXT4, "full")] {
        let json = |device: &str| {
            let text = run_json(&RunInput::texts(
                &stack(device, fs, prealloc),
                FIRST_THEN_OVER,
                3,
            ))
            .unwrap_or_else(|e| panic!("{e}"));
            // The stack file's echo lists the keys as written; the rest is the run.
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let params = &mut v["vmio"]["stack"]["devices"][0]["params"];
            params
                .as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("thin_"));
            (text, crate::run::json_text(&v))
        };
        let (plain, plain_run) = json("");
        let (_, zero_run) = json("thin_block = 0\nthin_request = \"1ms\"\n");
        assert!(plain_run == zero_run, "{fs} {prealloc}: the runs differ");
        // Nothing of the thin layer reaches a thick device's record.
        assert!(!plain.contains("thin_"), "{fs} {prealloc}");
    }
}

#[test]
fn a_new_raw_image_on_ext4_over_a_thin_device_pays_its_first_writes_and_not_their_overwrite() {
    let thick = sim(&stack("", EXT4, "off"));
    let thin = sim(&stack(THIN, EXT4, "off"));
    let s = &thin.report.devices[0].stats;
    // Every first write provisions its 16 blocks once; the overwrite provisions nothing.
    assert_eq!((s.thin_provisions, s.thin_blocks), (WRITES, 16 * WRITES));
    // Whole blocks: no zero fill, the same bytes as the thick device's.
    assert_eq!(s.write_bytes, thick.report.devices[0].stats.write_bytes);
    let (first, over) = runtimes(&thin);
    let (thick_first, thick_over) = runtimes(&thick);
    // At QD1 each 1 MiB write waits for its provisioning alone: 50 us + 16 x 8.5 us.
    assert_eq!(first - thick_first, WRITES * (50 * US + 16 * 8_500));
    assert_eq!(over, thick_over);
}

#[test]
fn a_fully_preallocated_image_over_a_thin_device_runs_as_on_the_thick_device() {
    let thick = sim(&stack("", EXT4, "full"));
    let thin = sim(&stack(THIN, EXT4, "full"));
    assert_eq!(runtimes(&thin), runtimes(&thick));
    assert_eq!(thin.report.devices[0].stats.thin_provisions, 0);
    // A volume without a filesystem is a block device of unknown history: all held.
    let plain = sim(&stack(THIN, "", "off"));
    assert_eq!(plain.report.devices[0].stats.thin_provisions, 0);
    assert_eq!(runtimes(&plain), runtimes(&sim(&stack("", "", "off"))));
}
