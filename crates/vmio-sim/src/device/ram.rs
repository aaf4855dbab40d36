//! A RAM disk (Linux `brd`, tmpfs-backed loop device): a fixed access latency plus a memory
//! copy bandwidth shared by all commands. Nothing is volatile, so flushes cost only the
//! latency.
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
//! ```

use vmio_core::units::transfer_ns;
use vmio_core::{Ns, US};

use super::{fmt_ms, Busy, Completions, DevCmd, Device, DeviceError, DeviceStats, ParamReader};

pub const PROFILES: &[&str] = &["ram"];

/// Parameter names accepted in a `[[device]] model = "ram"` table, in `params()` order.
pub const PARAMS: &[&str] = &["capacity", "latency", "bandwidth", "queue_depth"];

#[derive(Clone, Debug, PartialEq)]
pub struct RamParams {
    pub profile: String,
    pub capacity_bytes: u64,
    pub latency_ns: Ns,
    pub bandwidth_bps: u64,
    pub queue_depth: u64,
}

impl RamParams {
    pub fn profile(name: &str) -> Option<Self> {
        match name {
            "ram" => Some(Self {
                profile: name.to_string(),
                capacity_bytes: 16 << 30,
                latency_ns: US,
                bandwidth_bps: 10_000_000_000,
                queue_depth: 128,
            }),
            _ => None,
        }
    }

    pub fn from_params(profile: &str, r: &ParamReader) -> Result<Self, DeviceError> {
        r.check_known(PARAMS)?;
        let d = Self::profile(profile).expect("profile checked by build_device");
        let p = Self {
            profile: d.profile,
            capacity_bytes: r.size("capacity", d.capacity_bytes)?,
            latency_ns: r.duration("latency", d.latency_ns)?,
            bandwidth_bps: r.rate("bandwidth", d.bandwidth_bps)?,
            queue_depth: r.positive("queue_depth", d.queue_depth)?,
        };
        if p.capacity_bytes == 0 {
            return Err(r.bad("capacity", 0, "must be a positive size"));
        }
        if p.queue_depth > 65_536 {
            return Err(r.bad("queue_depth", p.queue_depth, "must be between 1 and 65536"));
        }
        Ok(p)
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
    fn name(&self) -> &str {
        &self.name
    }
    fn model(&self) -> &'static str {
        "ram"
    }
    fn capacity_bytes(&self) -> u64 {
        self.p.capacity_bytes
    }
    fn queue_depth(&self) -> usize {
        self.p.queue_depth as usize
    }

    fn submit(&mut self, now: Ns, cmd: DevCmd) {
        self.busy.start(now);
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

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.busy.busy_ns,
            ..self.stats.clone()
        }
    }

    fn params(&self) -> Vec<(String, String)> {
        let p = &self.p;
        vec![
            ("profile".into(), p.profile.clone()),
            ("capacity".into(), p.capacity_bytes.to_string()),
            ("latency".into(), fmt_ms(p.latency_ns)),
            ("bandwidth".into(), p.bandwidth_bps.to_string()),
            ("queue_depth".into(), p.queue_depth.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{closed_loop, one};
    use super::*;
    use std::collections::BTreeMap;
    use vmio_core::request::Op;

    fn ram() -> Ram {
        let map = BTreeMap::new();
        let r = ParamReader::new("ram0", "ram", &map);
        Ram::new("ram0", RamParams::from_params("ram", &r).unwrap())
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
        assert_eq!(d.stats().write_bytes, 1000 << 20);
    }

    #[test]
    fn flushes_and_empty_commands_complete_after_the_latency() {
        let mut d = ram();
        assert_eq!(one(&mut d, 0, 1, Op::Flush, 0, 0, false), US);
        assert_eq!(
            one(&mut d, 10 * US, 2, Op::Read, u64::MAX - 5, 0, false),
            11 * US
        );
        assert_eq!(d.stats().flush_ops, 1);
    }
}
