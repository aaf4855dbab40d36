//! Thin provisioning: a layer any device model can have (`[[device]] thin_block = "64k"`),
//! wrapping the model as an nbdkit filter wraps a plugin: it owns its keys ([`PARAMS`]) and
//! passes through what it does not change. A thin device holds a map of its data blocks;
//! the first write into a block it does not hold (never written, or discarded since) waits
//! for the block to be provisioned, as Linux's dm-thin target allocates a data block for an
//! unmapped virtual block, and as a cloud disk's backend does after the guest's filesystem
//! discarded a range.
//!
//! ```text
//! state:  provisioned: one bit per thin_block-sized block of the device (1: held)
//!         pending:     block -> the time its provisioning ends (a write is provisioning it)
//! build:  every block provisioned; the engine then calls unprovision(offset, len) for
//!         ranges that hold nothing yet (sim/mod.rs: the unwritten part of each image file
//!         of a volume with a host filesystem), clearing the blocks it covers whole
//! submit(now, cmd):
//!   Write: blocks b0..=b1 it touches; new = those neither provisioned nor pending;
//!          wait = the latest pending end among the others (dm-thin's bio prison: a bio on
//!          a block being provisioned waits in its cell)
//!          k = |new| > 0: release = max(now + thin_request + k * thin_block_cost, wait);
//!                         mark new provisioned and pending until release;
//!                         thin_zero: widen the command to the boundaries of b0 / b1 when
//!                         they are new (the zero fill of the uncovered part), same tag
//!          k = 0:         release = wait
//!          release > now: hold the command until release, then submit it to the inner
//!                         model; else submit at once
//!   Read:  waits for pending blocks like a write, else passes through unchanged: an
//!          unprovisioned block's read reaches the inner model (see below)
//!   Trim:  blocks it covers whole -> unprovisioned; passed down unchanged
//!   Flush: passed through
//! advance(now): release held commands in time order (the inner model advanced to each
//!          release first), then the inner model's completions up to now
//! ```
//!
//! dm-thin (Linux drivers/md/dm-thin.c): `thin_bio_map` defers a bio whose virtual block is
//! unmapped to the pool's worker (`process_deferred_bios` -> `process_bio` /
//! `process_cell`), which finds no mapping (`dm_thin_find_block` -> -ENODATA) and calls
//! `provision_block`: `alloc_data_block` takes a free block of the pool's space map, then
//! `schedule_zero` either issues the bio at once when it overwrites the whole block
//! (`io_overwrites_block`) or when the pool does not zero new blocks, or zeroes the whole
//! block first (`ll_zero`, through dm-kcopyd) and issues the bio when the zeroing completed
//! (`process_prepared_mapping` inserts the mapping, `remap_and_issue`). Other bios to the
//! block wait in the bio prison's cell meanwhile. A read of an unmapped block is answered
//! with zeroes (`zero_fill_bio`) and no data device I/O. A discard (`process_discard_bio`)
//! unmaps the virtual blocks it covers whole and, with `discard_passdown`, passes the
//! discard to the data device. The target sets `max_io_len` to the block size, so a bio
//! never spans two blocks. Documentation/admin-guide/device-mapper/thin-provisioning.rst:
//! the pool's `data_block_size` (a multiple of 64 KiB from 64 KiB to 1 GiB; lvm2's thin
//! pools default to 64 KiB, `lvmthin(7)` `--chunksize`), `skip_block_zeroing` ("skip the
//! zeroing of newly-provisioned blocks").
//!
//! Modelled as: the provisioning (the worker's allocation and metadata update) is a delay
//! of `thin_request` per write command that provisions at least one block and
//! `thin_block_cost` per block it provisions, before the command reaches the inner model;
//! the delays of several commands overlap (each command's own; the pool's single worker
//! thread, which serialises dm-thin's mapping work, is not modelled, nor is the backend of
//! a cloud disk known to serialise). With `thin_zero` the zeroing is one command: the
//! write widened to the new blocks' boundaries (dm-thin writes the block's zeroes, then the
//! bio: one more command, the bio's bytes twice). Not modelled: the metadata commit a FLUSH
//! or FUA bio triggers on a pool with new mappings (`commit` before `process_deferred_bios`
//! completes the flush), the pool running out of space, and reads of unmapped blocks
//! answered without device I/O: they reach the inner model and take its time (the host
//! filesystem's own model already reads holes and unwritten extents without any I/O, so
//! such reads are rare under images).
//!
//! Defaults: this machine's cloud disk (docs/validation.md, "A new machine, the same thin
//! provisioning": fio libaio O_DIRECT sequential writes at QD1 into a new file on ext4
//! mounted with `discard`, then the overwrite, clat p50 differences 76 / 55 µs at 64 KiB,
//! 100 / 91 at 256 KiB, 194 / 181 at 1 MiB, about 6 to 22 µs at 4 KiB, where a sequential
//! 4 KiB stream pays once per block). A dm-thin-like backend with 64 KiB blocks fits them:
//! about 50 µs per provisioning command plus 8.5 µs per block (64 KiB: 58.5; 256 KiB: 84;
//! 1 MiB: 186; 4 KiB: 58.5 / 16 = 3.7 µs a write on average). This is an estimate of a
//! backend the provider does not describe, not a datasheet; `thin_block` defaults to 0, a
//! thick device, which builds no wrapper at all (every existing result unchanged).

use std::collections::BTreeMap;

use vmio_core::blockq::Caps;
use vmio_core::params::{Kind, ParamError, ParamSpec, Value, Values};
use vmio_core::{request::Op, Ns, US};

use super::{bad, record_values, Busy, DevCmd, Device, DeviceStats, Identity, DURATION};
use crate::engine::MinHeap;

/// `thin_block`: the provisioning granularity; 0 is a thick device.
pub const BLOCK: ParamSpec = ParamSpec {
    name: "thin_block",
    kind: Kind::Size {
        min: 0,
        max: 1 << 30,
        pow2: false,
    },
    default: Value::Int(0),
    unit: "bytes",
    help: "thin provisioning (any model): the data block a first write provisions (dm-thin's data_block_size, 64k in lvm2's thin pools); 0: a thick device, every block held",
};

/// `thin_request`: the cost of a write command that provisions blocks.
pub const REQUEST: ParamSpec = ParamSpec {
    name: "thin_request",
    kind: DURATION,
    default: Value::Int(50 * US),
    unit: "ns",
    help: "with thin_block: delay of a write command that provisions at least one block (this machine's cloud disk, measured)",
};

/// `thin_block_cost`: the cost of each block provisioned.
pub const BLOCK_COST: ParamSpec = ParamSpec {
    name: "thin_block_cost",
    kind: DURATION,
    default: Value::Int(8_500),
    unit: "ns",
    help:
        "with thin_block: delay per block a write provisions (this machine's cloud disk, measured)",
};

/// `thin_zero`: a partial first write also writes the rest of its new blocks.
pub const ZERO: ParamSpec = ParamSpec {
    name: "thin_zero",
    kind: Kind::Bool,
    default: Value::Bool(true),
    unit: "",
    help: "with thin_block: a write covering a new block partially writes the rest of it with zeroes (dm-thin without skip_block_zeroing)",
};

/// The thin layer's keys, valid in every `[[device]]` table whatever its model.
pub const PARAMS: &[ParamSpec] = &[BLOCK, REQUEST, BLOCK_COST, ZERO];

/// Whether `key` is one of the thin layer's (the models' own parameters exclude them).
pub fn is_key(key: &str) -> bool {
    PARAMS.iter().any(|p| p.name == key)
}

/// The thin layer's values of a `[[device]]` table (its other keys are the model's), or
/// None for a thick device (`thin_block` 0 or absent).
pub fn read(params: &BTreeMap<String, toml::Value>) -> Result<Option<Values>, ParamError> {
    let own: BTreeMap<String, toml::Value> = params
        .iter()
        .filter(|(k, _)| is_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut values = Values::defaults(PARAMS);
    values.read(&own, &[])?;
    let block = values.int(BLOCK.name);
    if block == 0 {
        return Ok(None);
    }
    if !block.is_multiple_of(4096) {
        return Err(bad(
            BLOCK.name,
            block,
            "must be 0 (a thick device) or a multiple of 4k up to 1g",
        ));
    }
    Ok(Some(values))
}

/// Memory the provisioning map of a device of `capacity_bytes` takes.
pub fn estimated_bytes(values: &Values, capacity_bytes: u64) -> u64 {
    capacity_bytes.div_ceil(values.int(BLOCK.name)).div_ceil(64) * 8
}

/// A thin device: the inner model behind a provisioning map.
pub struct Thin {
    inner: Box<dyn Device>,
    values: Values,
    block: u64,
    request_ns: Ns,
    block_ns: Ns,
    zero: bool,
    /// One bit per block, set when the block is held.
    provisioned: Vec<u64>,
    blocks: u64,
    /// Blocks a held write is provisioning, and when it ends.
    pending: BTreeMap<u64, Ns>,
    /// Commands waiting for their provisioning: key (release, sequence).
    held: MinHeap<DevCmd>,
    seq: u64,
    busy: Busy,
    /// Write commands that provisioned blocks, and the blocks.
    provisions: u64,
    blocks_provisioned: u64,
}

impl Thin {
    /// `inner` behind a map of `values`' blocks (read by [`read`]), every block held.
    pub fn new(inner: Box<dyn Device>, values: Values) -> Self {
        let block = values.int(BLOCK.name);
        let blocks = inner.capacity_bytes().div_ceil(block);
        let mut provisioned = vec![u64::MAX; blocks.div_ceil(64) as usize];
        if !blocks.is_multiple_of(64) {
            if let Some(last) = provisioned.last_mut() {
                *last = (1u64 << (blocks % 64)) - 1;
            }
        }
        Thin {
            request_ns: values.int(REQUEST.name),
            block_ns: values.int(BLOCK_COST.name),
            zero: values.flag(ZERO.name),
            inner,
            values,
            block,
            provisioned,
            blocks,
            pending: BTreeMap::new(),
            held: MinHeap::default(),
            seq: 0,
            busy: Busy::default(),
            provisions: 0,
            blocks_provisioned: 0,
        }
    }

    fn is_provisioned(&self, b: u64) -> bool {
        self.provisioned[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    fn set(&mut self, b: u64, held: bool) {
        let w = &mut self.provisioned[(b / 64) as usize];
        if held {
            *w |= 1 << (b % 64);
        } else {
            *w &= !(1 << (b % 64));
        }
    }

    /// Whether the block of `offset_bytes` is held.
    #[cfg(test)]
    fn holds(&self, offset_bytes: u64) -> bool {
        self.is_provisioned(offset_bytes / self.block)
    }

    /// The blocks `[offset, offset + len)` touches, within the device (None: none).
    fn touched(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let b0 = offset / self.block;
        if len == 0 || b0 >= self.blocks {
            return None;
        }
        let b1 = ((offset + len - 1) / self.block).min(self.blocks - 1);
        Some((b0, b1))
    }

    /// The latest end of a provisioning in progress among blocks `b0..=b1` (0: none).
    fn pending_end(&self, b0: u64, b1: u64) -> Ns {
        if self.pending.is_empty() {
            return 0;
        }
        self.pending
            .range(b0..=b1)
            .map(|(_, &t)| t)
            .max()
            .unwrap_or(0)
    }

    /// A write's provisioning: the blocks it provisions are marked, and the command is
    /// widened with thin_zero; returns when it may reach the inner model.
    fn provision(&mut self, now: Ns, cmd: &mut DevCmd) -> Ns {
        let Some((b0, b1)) = self.touched(cmd.offset_bytes, cmd.len_bytes) else {
            return now;
        };
        let wait = self.pending_end(b0, b1);
        let is_new = |t: &Self, b: u64| !t.is_provisioned(b) && !t.pending.contains_key(&b);
        let new = (b0..=b1).filter(|&b| is_new(self, b)).count() as u64;
        if new == 0 {
            return wait.max(now);
        }
        let release = (now + self.request_ns + new * self.block_ns).max(wait);
        let (first_new, last_new) = (is_new(self, b0), is_new(self, b1));
        for b in b0..=b1 {
            if is_new(self, b) {
                self.set(b, true);
                self.pending.insert(b, release);
            }
        }
        self.provisions += 1;
        self.blocks_provisioned += new;
        if self.zero {
            let end = cmd.offset_bytes + cmd.len_bytes;
            let start = if first_new {
                b0 * self.block
            } else {
                cmd.offset_bytes
            };
            let widened_end = if last_new {
                ((b1 + 1) * self.block).min(self.inner.capacity_bytes())
            } else {
                end
            };
            cmd.offset_bytes = start;
            cmd.len_bytes = widened_end.max(end) - start;
        }
        release
    }

    /// Unprovision the blocks `[offset, offset + len)` covers whole.
    fn discard(&mut self, offset: u64, len: u64) {
        let first = offset.div_ceil(self.block);
        let end = ((offset + len) / self.block).min(self.blocks);
        for b in first..end {
            self.set(b, false);
        }
    }

    /// Hand the inner model's completions up to `t` to `done`, closing their busy periods.
    fn inner_advance(&mut self, t: Ns, done: &mut Vec<u64>) {
        let before = done.len();
        self.inner.advance(t, done);
        for _ in before..done.len() {
            self.busy.end(t);
        }
    }
}

impl Device for Thin {
    fn identity(&self) -> Identity<'_> {
        self.inner.identity()
    }

    fn submit(&mut self, now: Ns, mut cmd: DevCmd) {
        self.busy.start(now);
        let release = match cmd.op {
            Op::Write => self.provision(now, &mut cmd),
            Op::Read => match self.touched(cmd.offset_bytes, cmd.len_bytes) {
                Some((b0, b1)) => self.pending_end(b0, b1).max(now),
                None => now,
            },
            Op::Trim => {
                self.discard(cmd.offset_bytes, cmd.len_bytes);
                now
            }
            Op::Flush => now,
        };
        if release > now {
            self.seq += 1;
            self.held.push((release, self.seq), cmd);
        } else {
            self.inner.submit(now, cmd);
        }
    }

    fn next_event_ns(&self) -> Option<Ns> {
        let held = self.held.peek_key().map(|k| k.0);
        match (held, self.inner.next_event_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance(&mut self, now: Ns, done: &mut Vec<u64>) {
        while let Some((t, _)) = self.held.peek_key() {
            if t > now {
                break;
            }
            let (_, cmd) = self.held.pop().expect("peeked");
            self.inner_advance(t, done);
            if let Some((b0, b1)) = self.touched(cmd.offset_bytes, cmd.len_bytes) {
                let ended: Vec<u64> = (self.pending.range(b0..=b1))
                    .filter(|(_, &end)| end <= t)
                    .map(|(&b, _)| b)
                    .collect();
                for b in ended {
                    self.pending.remove(&b);
                }
            }
            self.inner.submit(t, cmd);
        }
        self.inner_advance(now, done);
    }

    fn stats(&self, now: Ns) -> DeviceStats {
        DeviceStats {
            busy_ns: self.busy.busy_at(now),
            thin_provisions: self.provisions,
            thin_blocks: self.blocks_provisioned,
            ..self.inner.stats(now)
        }
    }

    /// The inner model's, then the thin layer's values.
    fn params(&self) -> Vec<(String, String)> {
        let mut out = self.inner.params();
        out.extend(record_values(&self.values));
        out
    }

    fn caps(&self) -> Caps {
        self.inner.caps()
    }

    fn prefetch(&self, op: Op, offset_bytes: u64, len_bytes: u64) {
        self.inner.prefetch(op, offset_bytes, len_bytes);
    }

    fn unprovision(&mut self, offset_bytes: u64, len_bytes: u64) {
        self.discard(offset_bytes, len_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::one;
    use super::super::{build_device, estimated_bytes as device_bytes};
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1 << 20;

    fn table(src: &str) -> BTreeMap<String, toml::Value> {
        toml::from_str(src).unwrap()
    }

    /// A `model` device with these keys (the thin ones among them).
    fn device(model: &str, keys: &str) -> Box<dyn Device> {
        build_device("d", model, None, &table(keys)).unwrap_or_else(|e| panic!("{e}"))
    }

    const THIN: &str = "capacity = \"1g\"\nthin_block = \"64k\"\nthin_request = \"50us\"\nthin_block_cost = \"8.5us\"\n";

    /// The time of one command alone on a fresh thick device of the same model (the inner
    /// model's own time).
    fn thick_time(model: &str, op: Op, off: u64, len: u64) -> Ns {
        let mut d = device(model, "capacity = \"1g\"");
        one(&mut *d, 0, 1, op, off, len, false)
    }

    #[test]
    fn a_first_write_over_sixteen_new_blocks_takes_the_inner_time_plus_the_request_and_sixteen_block_costs(
    ) {
        for model in ["ram", "flash"] {
            let mut d = device(model, THIN);
            d.unprovision(0, 64 * MIB);
            let inner = thick_time(model, Op::Write, 0, MIB);
            let first = one(&mut *d, 0, 1, Op::Write, 0, MIB, false);
            assert_eq!(first, 50 * US + 16 * 8_500 + inner, "{model}");
            let s = d.stats(first);
            assert_eq!((s.thin_provisions, s.thin_blocks), (1, 16), "{model}");
            assert_eq!(
                s.write_bytes, MIB,
                "{model}: a whole-block write is not widened"
            );
        }
    }

    #[test]
    fn the_overwrite_of_provisioned_blocks_takes_the_inner_time_alone() {
        for model in ["ram", "flash"] {
            let mut d = device(model, THIN);
            d.unprovision(0, 64 * MIB);
            let first = one(&mut *d, 0, 1, Op::Write, 0, MIB, false);
            // Far enough apart that the inner model is idle again.
            let t0 = first + 10_000 * US;
            let again = one(&mut *d, t0, 2, Op::Write, 0, MIB, false) - t0;
            let mut thick = device(model, "capacity = \"1g\"");
            one(&mut *thick, 0, 1, Op::Write, 0, MIB, false);
            let thick_again = one(&mut *thick, t0, 2, Op::Write, 0, MIB, false) - t0;
            assert_eq!(again, thick_again, "{model}");
            assert_eq!(d.stats(t0).thin_provisions, 1, "{model}");
        }
    }

    #[test]
    fn a_device_whose_blocks_are_all_held_runs_as_the_thick_one() {
        let mut d = device("flash", THIN);
        let t = one(&mut *d, 0, 1, Op::Write, 0, MIB, false);
        assert_eq!(t, thick_time("flash", Op::Write, 0, MIB));
        assert_eq!(d.stats(t).thin_provisions, 0);
    }

    #[test]
    fn a_small_first_write_into_a_new_block_writes_the_whole_block_with_thin_zero() {
        let mut d = device("ram", THIN);
        d.unprovision(0, MIB);
        let t = one(&mut *d, 0, 1, Op::Write, 68 * KIB, 4 * KIB, false);
        let inner = thick_time("ram", Op::Write, 64 * KIB, 64 * KIB);
        assert_eq!(t, 50 * US + 8_500 + inner);
        let s = d.stats(t);
        assert_eq!((s.write_ops, s.write_bytes), (1, 64 * KIB));
        // The next 4 KiB of the block: held already, the write's own bytes only.
        let t2 = one(&mut *d, t, 2, Op::Write, 72 * KIB, 4 * KIB, false);
        assert_eq!(t2 - t, thick_time("ram", Op::Write, 0, 4 * KIB));
        assert_eq!(d.stats(t2).write_bytes, 68 * KIB);
        // Without zeroing the write stays as it is.
        let mut d = device("ram", &format!("{THIN}thin_zero = false"));
        d.unprovision(0, MIB);
        let t = one(&mut *d, 0, 1, Op::Write, 68 * KIB, 4 * KIB, false);
        assert_eq!(
            t,
            50 * US + 8_500 + thick_time("ram", Op::Write, 0, 4 * KIB)
        );
        assert_eq!(d.stats(t).write_bytes, 4 * KIB);
    }

    #[test]
    fn a_write_straddling_a_held_and_a_new_block_is_widened_only_on_the_new_side() {
        let mut d = device("ram", THIN);
        d.unprovision(64 * KIB, 64 * KIB);
        // [60k, 72k): block 0 held, block 1 new -> [60k, 128k).
        let t = one(&mut *d, 0, 1, Op::Write, 60 * KIB, 12 * KIB, false);
        assert_eq!(d.stats(t).write_bytes, 68 * KIB);
        assert_eq!(d.stats(t).thin_blocks, 1);
    }

    #[test]
    fn a_trim_of_whole_blocks_makes_the_next_write_pay_again_and_a_partial_trim_does_not() {
        let t = table(THIN);
        let values = read(&t).unwrap().expect("thin");
        let mut d = Thin::new(device("flash", "capacity = \"1g\""), values);
        let w = thick_time("flash", Op::Write, 0, 64 * KIB);
        let mut t = 0;
        // A trim of [32k, 160k) covers block 1 whole, blocks 0 and 2 in part.
        t = one(&mut d, t, 1, Op::Trim, 32 * KIB, 128 * KIB, false) + 1000 * US;
        assert!(d.holds(0) && !d.holds(64 * KIB) && d.holds(128 * KIB));
        for (block, pays) in [(0, false), (1, true), (2, false)] {
            let t1 = one(&mut d, t, 2, Op::Write, block * 64 * KIB, 64 * KIB, false);
            let extra = if pays { 50 * US + 8_500 } else { 0 };
            assert_eq!(t1 - t, w + extra, "block {block}");
            t = t1 + 1000 * US;
        }
    }

    #[test]
    fn a_write_to_a_block_being_provisioned_waits_for_it_without_paying_again() {
        let mut d = device("ram", THIN);
        d.unprovision(0, MIB);
        for tag in [1, 2] {
            d.submit(
                0,
                DevCmd {
                    tag,
                    op: Op::Write,
                    offset_bytes: (tag - 1) * 4 * KIB,
                    len_bytes: 4 * KIB,
                    fua: false,
                },
            );
        }
        let done = super::super::testkit::drain(&mut *d);
        let release = 50 * US + 8_500;
        assert!(done[&1] > release && done[&2] > release, "{done:?}");
        assert_eq!(d.stats(done[&2]).thin_blocks, 1);
        // Waiting for the same release, the second's 4 KiB follows the first's 64 KiB.
        assert_eq!(d.stats(done[&2]).write_bytes, 68 * KIB);
    }

    #[test]
    fn first_writes_into_different_new_blocks_provision_side_by_side() {
        // Four 64 KiB first writes at once: each held 58.5 us, all released together, then
        // served as the thick device serves the same burst.
        use super::super::testkit::{burst, drain};
        let mut d = device("ram", THIN);
        d.unprovision(0, MIB);
        burst(&mut *d, 0, Op::Write, 64 * KIB, 4);
        let thin = drain(&mut *d);
        let mut thick = device("ram", "capacity = \"1g\"");
        burst(&mut *thick, 0, Op::Write, 64 * KIB, 4);
        let thick = drain(&mut *thick);
        for tag in 0..4 {
            assert_eq!(thin[&tag], thick[&tag] + 50 * US + 8_500, "{tag}");
        }
        assert_eq!(d.stats(thin[&3]).thin_provisions, 4);
    }

    #[test]
    fn the_thin_keys_are_accepted_by_every_model_and_recorded_after_its_own() {
        for e in super::super::REGISTRY {
            let d = device(e.name, "thin_block = \"64k\"\nthin_zero = false");
            let p = d.params();
            let keys: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
            let n = keys.len();
            assert_eq!(
                keys[n - 4..],
                ["thin_block", "thin_request", "thin_block_cost", "thin_zero"],
                "{}",
                e.name
            );
            assert_eq!(p[n - 4].1, "65536");
            assert_eq!(p[n - 1].1, "false");
            let thick = device(e.name, "");
            assert_eq!(thick.params(), p[..n - 4].to_vec(), "{}", e.name);
        }
    }

    #[test]
    fn a_thin_block_that_is_no_multiple_of_4k_is_refused_in_one_line() {
        let e = build_device("sda", "ram", None, &table("thin_block = 6000"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            "device 'sda': thin_block = 6000: must be 0 (a thick device) or a multiple of 4k up to 1g"
        );
        let e = build_device("sda", "ram", None, &table("thin_zero = 1"))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, "device 'sda': thin_zero = 1: must be true or false");
        let e = build_device("sda", "ram", None, &table("thin_blok = 1"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'thin_blok'") && e.contains("thin_block"), "{e}");
    }

    #[test]
    fn the_memory_estimate_counts_the_map_of_a_thin_device_only() {
        let thick = device_bytes("d", "ram", None, &table("capacity = \"1g\"")).unwrap();
        let thin = device_bytes("d", "ram", None, &table(THIN)).unwrap();
        // 16384 blocks of 64 KiB: 2 KiB of bits.
        assert_eq!(thin.0 - thick.0, 2048);
        assert_eq!(thin.1, thick.1);
    }
}
