//! A RAM disk (Linux `brd`, tmpfs-backed loop device): a fixed access latency plus a memory
//! copy bandwidth shared by all commands. Nothing is volatile, so flushes cost only the
//! latency; so do trims, which copy nothing (a tmpfs-backed loop device turns a discard into
//! a hole punched in its file, freeing pages: `drivers/block/loop.c`, `lo_fallocate` with
//! `FALLOC_FL_PUNCH_HOLE`).
//!
//! What it advertises to the block layer (`write_cache`, `fua`; the device module): a cache
//! without FUA, as the loop driver does (drivers/block/loop.c, `loop_configure`), so a FLUSH
//! reaches it and costs the latency, and a FUA write is the write then a FLUSH; `brd` has no
//! cache (`write_cache = false`: FLUSH completed by the block layer, FUA dropped).
//!
//! **Sources.** Profile `ram`: 1 µs per command (block-layer and copy set-up on a host core)
//! and 10 GB/s copy bandwidth (one core's memcpy rate on a DDR4 server), queue depth 128
//! (a blk-mq default). These are round figures for a fast device that is never the
//! bottleneck; override them to model a specific host.
//!
//! **Algorithm.**
//!
//! ```text
//! start = max(now, copy engine free); copy engine busy len/bandwidth; done = end + latency
//! trim: done = now + latency (the copy engine is not used)
//! ```

use vmio_core::request::Op;
use vmio_core::units::transfer_ns;
use vmio_core::{Ns, US};

use vmio_core::params::{Entry, Kind, ParamError, ParamSpec, Value, Values};

use super::{
    capacity, fua, Busy, Completions, DevCmd, Device, DeviceStats, Identity, ModelBuild,
    ModelEntry, BLK_MQ_QUEUE_DEPTH, DURATION, WRITE_CACHE,
};

pub const ENTRY: ModelEntry = Entry {
    name: "ram",
    help: "RAM disk (brd, tmpfs loop): fixed latency plus a shared copy bandwidth",
    // Defaults: profile `ram` (see the module doc).
    params: &[
        capacity(16 << 30),
        ParamSpec {
            name: "latency",
            kind: DURATION,
            default: Value::Int(US),
            unit: "ns",
            help: "fixed time per command",
        },
        ParamSpec {
            name: "bandwidth",
            kind: Kind::Rate,
            default: Value::Int(10_000_000_000),
            unit: "bps",
            help: "copy bandwidth shared by all commands",
        },
        BLK_MQ_QUEUE_DEPTH,
        WRITE_CACHE,
        fua(false),
    ],
    build: ModelBuild {
        profiles: &["ram"],
        new,
        memory,
    },
};

fn new(name: &str, profile: &str, v: &Values, _seed: u64) -> Result<Box<dyn Device>, ParamError> {
    Ok(Box::new(Ram::new(name, RamParams::from_values(profile, v))))
}

/// The model's state does not grow with the capacity: no memory, and the capacity.
fn memory(v: &Values) -> Result<(u64, u64), ParamError> {
    Ok((0, RamParams::from_values("", v).capacity_bytes))
}

#[derive(Clone, Debug, PartialEq)]
pub struct RamParams {
    pub profile: String,
    /// The values it was read from, in declaration order (the result record lists them).
    pub values: Values,
    pub capacity_bytes: u64,
    pub latency_ns: Ns,
    pub bandwidth_bps: u64,
    pub queue_depth: u64,
}

impl RamParams {
    /// The parameters of profile `profile` from their declared values.
    pub fn from_values(profile: &str, v: &Values) -> Self {
        Self {
            profile: profile.to_string(),
            values: v.clone(),
            capacity_bytes: v.int("capacity"),
            latency_ns: v.int("latency"),
            bandwidth_bps: v.int("bandwidth"),
            queue_depth: v.int("queue_depth"),
        }
    }
}

pub struct Ram {
    name: String,
    p: RamParams,
    copy_free: Ns,
    done: Completions,
    stats: DeviceStats,
    busy: Busy,
}

impl Ram {
    pub fn new(name: &str, p: RamParams) -> Self {
        Self {
            name: name.to_string(),
            copy_free: 0,
            done: Completions::with_capacity(p.queue_depth as usize * 2),
            stats: DeviceStats::default(),
            busy: Busy::default(),
            p,
        }
    }
}

impl Device for Ram {
    fn identity(&self) -> Identity<'_> {
        let p = &self.p;
        Identity::new(&self.name, &ENTRY, &p.profile, &p.values)
            .limits(p.capacity_bytes, p.queue_depth)
    }

    fn submit(&mut self, now: Ns, cmd: DevCmd) {
        self.busy.start(now);
        if cmd.op == Op::Trim {
            self.done.push(now + self.p.latency_ns, &cmd);
            return;
        }
        let start = now.max(self.copy_free);
        let end = start + transfer_ns(cmd.len_bytes, self.p.bandwidth_bps);
        self.copy_free = end;
        self.done.push(end + self.p.latency_ns, &cmd);
    }

    fn next_event_ns(&self) -> Option<Ns> {
        self.done.next()
    }

    fn advance(&mut self, now: Ns, done: &mut Vec<u64>) {
        self.done
            .drain_due(now, done, &mut self.stats, &mut self.busy);
    }

    fn stats(&self, now: Ns) -> DeviceStats {
        self.stats.as_of(&self.busy, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{closed_loop, one, typed_params};
    use super::*;
    use vmio_core::request::Op;

    fn ram() -> Ram {
        let p = typed_params("ram0", "ram", "", |profile, v| {
            Ok(RamParams::from_values(profile, v))
        });
        Ram::new("ram0", p.unwrap())
    }

    #[test]
    fn a_small_read_takes_the_latency_plus_the_copy() {
        let mut d = ram();
        let t = one(&mut d, 0, 1, Op::Read, 0, 4096, false);
        assert_eq!(t, US + transfer_ns(4096, 10_000_000_000));
    }

    #[test]
    fn large_transfers_run_at_the_bandwidth() {
        let mut d = ram();
        let run = closed_loop(&mut d, 0, 8, 1000, |i| {
            (Op::Write, i as u64 * (1 << 20), 1 << 20)
        });
        let bps = 1000.0 * (1u64 << 20) as f64 / (run.elapsed_ns as f64 / 1e9);
        assert!((bps / 1e10 - 1.0).abs() < 0.01, "{bps}");
        assert_eq!(d.stats(Ns::MAX).write_bytes, 1000 << 20);
    }

    #[test]
    fn flushes_and_empty_commands_complete_after_the_latency() {
        let mut d = ram();
        assert_eq!(one(&mut d, 0, 1, Op::Flush, 0, 0, false), US);
        assert_eq!(
            one(&mut d, 10 * US, 2, Op::Read, u64::MAX - 5, 0, false),
            11 * US
        );
        assert_eq!(d.stats(Ns::MAX).flush_ops, 1);
    }

    #[test]
    fn a_trim_copies_nothing_and_takes_the_latency_alone() {
        let mut d = ram();
        assert_eq!(one(&mut d, 0, 1, Op::Trim, 0, 1 << 30, false), US);
        // A read behind it finds the copy engine free.
        let t = one(&mut d, 0, 2, Op::Read, 0, 4096, false);
        assert_eq!(t, US + transfer_ns(4096, 10_000_000_000));
    }

    #[test]
    fn a_device_still_busy_at_the_end_counts_as_busy_up_to_then() {
        let mut d = ram();
        d.submit(
            5 * US,
            DevCmd {
                tag: 1,
                op: Op::Write,
                offset_bytes: 0,
                len_bytes: 1 << 30,
                fua: false,
            },
        );
        assert_eq!(d.stats(5 * US).busy_ns, 0);
        assert_eq!(d.stats(25 * US).busy_ns, 20 * US);
        let end = d.next_event_ns().unwrap();
        let mut done = Vec::new();
        d.advance(end, &mut done);
        assert_eq!(done, [1]);
        assert_eq!(d.stats(end + 40 * US).busy_ns, end - 5 * US);
    }
}
