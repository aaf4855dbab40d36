//! MCFQ: CFQ plus one MoTS controller per device (S1, docs/references.md) — weight-proportional
//! *bandwidth* for VMs sharing a device whose cost per byte differs between VMs (an aged
//! SSD where one VM's random writes trigger garbage collection).
//!
//! ```text
//! every call (insert, dispatch, completed) with time now:
//!   if now >= next_sample:                               (the paper's 1 s iostat sample)
//!       changed = mots.on_sample(now, bytes);  bytes = 0
//!       for (owner, s) in changed: cfq.set_slice_scale(owner, s)
//!       next_sample += 1 s   (or now + 1 s after an idle gap)
//! completed(rq): bytes[rq.owner] += rq.len (reads and writes)
//! next_wakeup = min(cfq's wakeup, next_sample while requests wait and none is in flight
//!               — in flight, a completion will come and sample)
//! ```
//!
//! The paper ran MoTS as a kernel thread beside CFQ; here it is driven by the times the
//! engine passes in, so the simulator and the real server share it. The first sample is
//! one second after the first call. Scales apply from each VM's next slice; see
//! [`super::cfq`] for how a scale acts on the slice and on the service tree, and
//! [`super::mots`] for the update rule and its bounds.

use super::cfq::{self, Cfq, CfqParams};
use super::mots::Mots;
use super::{IoScheduler, SchedulerEntry};
use crate::params::{Entry, Kind, ParamSpec, Value, Values};
use crate::request::{DevIo, Op};
use crate::{Ns, SEC};

/// The paper's bandwidth window (BW = 10 s worked best).
pub const BW_WINDOW_S_DEFAULT: u32 = 10;

pub const ENTRY: SchedulerEntry = Entry {
    name: "mcfq",
    help: "CFQ plus the MoTS controller: slices rescaled each second towards weight-proportional bandwidth",
    params: &[
        cfq::SLICE_SYNC,
        cfq::SLICE_IDLE,
        cfq::QUANTUM,
        ParamSpec {
            name: "bw_window",
            kind: Kind::Count {
                min: 1,
                max: u32::MAX as u64,
            },
            default: Value::Int(BW_WINDOW_S_DEFAULT as u64),
            unit: "s",
            help: "MoTS bandwidth window, in seconds (the paper's BW)",
        },
    ],
    build,
};

fn build(v: &Values, weights: &[u32]) -> Box<dyn IoScheduler> {
    // bw_window's kind bounds it to u32.
    let window = v.int("bw_window") as u32;
    Box::new(Mcfq::new(CfqParams::from_values(v, weights), window))
}
const SAMPLE_NS: Ns = SEC;

pub struct Mcfq {
    cfq: Cfq,
    mots: Mots,
    bytes: Vec<u64>,
    next_sample: Option<Ns>,
    last_now: Ns,
}

impl Mcfq {
    /// CFQ with `params` (its weights are MoTS's weights) and a bandwidth window of
    /// `bw_window_s` seconds (use [`BW_WINDOW_S_DEFAULT`]).
    pub fn new(params: CfqParams, bw_window_s: u32) -> Self {
        let mots = Mots::new(params.weights.clone(), bw_window_s);
        let bytes = vec![0; params.weights.len()];
        Self {
            cfq: Cfq::new(params),
            mots,
            bytes,
            next_sample: None,
            last_now: 0,
        }
    }

    pub fn slice_scale(&self, owner: u32) -> f64 {
        self.cfq.slice_scale(owner)
    }

    pub fn cfq(&self) -> &Cfq {
        &self.cfq
    }

    /// Every call passes its time here; a sample is due once a second (the rest out of line:
    /// the scheduler is called several times per request).
    #[inline]
    fn tick(&mut self, now: Ns) {
        self.last_now = self.last_now.max(now);
        let next = *self.next_sample.get_or_insert(now + SAMPLE_NS);
        if now >= next {
            self.sample(now, next);
        }
    }

    #[inline(never)]
    fn sample(&mut self, now: Ns, next: Ns) {
        for (owner, s) in self.mots.on_sample(now, &self.bytes) {
            self.cfq.set_slice_scale(owner, s);
        }
        self.bytes.iter_mut().for_each(|b| *b = 0);
        let grid = next + SAMPLE_NS;
        self.next_sample = Some(if now < grid { grid } else { now + SAMPLE_NS });
    }
}

impl IoScheduler for Mcfq {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    fn insert(&mut self, now: Ns, io: DevIo) {
        self.tick(now);
        self.cfq.insert(now, io);
    }

    fn dispatch(&mut self, now: Ns) -> Option<DevIo> {
        self.tick(now);
        self.cfq.dispatch(now)
    }

    fn completed(&mut self, now: Ns, io: &DevIo) {
        if matches!(io.op, Op::Read | Op::Write) {
            let o = io.owner as usize;
            if self.bytes.len() <= o {
                self.bytes.resize(o + 1, 0);
            }
            self.bytes[o] += io.len_bytes;
        }
        self.tick(now);
        self.cfq.completed(now, io);
    }

    fn next_wakeup_ns(&self) -> Option<Ns> {
        // With requests in flight neither CFQ (its first test) nor the sample (below)
        // wants a timer: a completion will come.
        if self.cfq.inflight() > 0 {
            return None;
        }
        let sample = self
            .next_sample
            .filter(|&t| self.cfq.queued() > 0 && self.cfq.inflight() == 0 && t > self.last_now);
        match (self.cfq.next_wakeup_ns(), sample) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn queued(&self) -> usize {
        self.cfq.queued()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::cfq::bench::*;
    use crate::MS;

    const WEIGHTS: [u32; 4] = [1000, 700, 400, 100];
    const WANT: [f64; 4] = [10.0, 7.0, 4.0, 1.0];

    fn bench(cost: &dyn Fn(u32, Ns) -> u64) -> Bench<'_> {
        Bench {
            vms: 4,
            depth: 8,
            qd: 4,
            len_bytes: 64 << 10,
            think_ns: 0,
            cost_ps_per_byte: cost,
        }
    }

    fn worst_error(r: &[f64]) -> f64 {
        r.iter()
            .zip(WANT)
            .map(|(g, w)| (g / w - 1.0).abs())
            .fold(0.0, f64::max)
    }

    /// VM0's requests cost 8× per byte (large random writes on an aged SSD).
    fn aged(owner: u32, _: Ns) -> u64 {
        if owner == 0 {
            16_000
        } else {
            2_000
        }
    }

    /// Bandwidth ratios to VM3 over [from, to) of a run from time 0.
    fn run(s: &mut dyn IoScheduler, cost: &dyn Fn(u32, Ns) -> u64, from: Ns, to: Ns) -> Vec<f64> {
        let out = bench(cost).run(s, from, to, |_, _| {});
        assert!(out.bytes.iter().all(|&b| b > 0), "{:?}", out.bytes);
        ratios(&out.bytes)
    }

    #[test]
    fn mots_reaches_the_weight_ratios_on_an_aged_ssd_where_cfq_misses_them() {
        let mut cfq = Cfq::new(CfqParams::with_weights(WEIGHTS.to_vec()));
        let rc = run(&mut cfq, &aged, 60 * SEC, 120 * SEC);
        let mut m = Mcfq::new(
            CfqParams::with_weights(WEIGHTS.to_vec()),
            BW_WINDOW_S_DEFAULT,
        );
        let early = run(&mut m, &aged, 60 * SEC, 120 * SEC);
        // The same run continued (runs are deterministic): it stays there.
        let mut m2 = Mcfq::new(
            CfqParams::with_weights(WEIGHTS.to_vec()),
            BW_WINDOW_S_DEFAULT,
        );
        let late = run(&mut m2, &aged, 120 * SEC, 180 * SEC);
        eprintln!("aged SSD, VM0 8x cost per byte: CFQ {rc:.2?}");
        eprintln!("  MCFQ 60-120 s {early:.2?}, 120-180 s {late:.2?}");
        eprintln!(
            "  MCFQ scales {:.2?}",
            (0..4).map(|o| m2.slice_scale(o)).collect::<Vec<_>>()
        );
        assert!(worst_error(&rc) > 0.5, "CFQ {rc:?}");
        assert!(worst_error(&early) < 0.10, "MCFQ {early:?}");
        assert!(worst_error(&late) < 0.10, "MCFQ {late:?}");
        for o in 0..4 {
            let s = m2.slice_scale(o);
            assert!((0.1..=20.0).contains(&s), "VM{o} scale {s}");
        }
        assert_eq!(m2.slice_scale(3), 1.0);
    }

    #[test]
    fn mots_follows_the_device_when_garbage_collection_starts_mid_run() {
        // Clean SSD for 60 s, then VM1's writes get 6× dearer (GC).
        let gc = |owner: u32, now: Ns| {
            if owner == 1 && now >= 60 * SEC {
                12_000
            } else {
                2_000
            }
        };
        let mut cfq = Cfq::new(CfqParams::with_weights(WEIGHTS.to_vec()));
        let rc = run(&mut cfq, &gc, 120 * SEC, 160 * SEC);
        let mut m = Mcfq::new(
            CfqParams::with_weights(WEIGHTS.to_vec()),
            BW_WINDOW_S_DEFAULT,
        );
        let before = run(&mut m, &gc, 20 * SEC, 60 * SEC);
        let mut m = Mcfq::new(
            CfqParams::with_weights(WEIGHTS.to_vec()),
            BW_WINDOW_S_DEFAULT,
        );
        let after = run(&mut m, &gc, 120 * SEC, 160 * SEC);
        eprintln!(
            "GC from 60 s (VM1 6x): CFQ {rc:.2?}; MCFQ before {before:.2?} after {after:.2?}"
        );
        assert!(worst_error(&rc) > 0.5, "CFQ {rc:?}");
        assert!(worst_error(&before) < 0.10, "MCFQ {before:?}");
        assert!(worst_error(&after) < 0.10, "MCFQ {after:?}");
    }

    #[test]
    fn mcfq_wakes_up_to_sample_while_requests_wait_and_nothing_is_in_flight() {
        let mut p = CfqParams::with_weights(vec![1000, 100]);
        // An idle window and a slice longer than the sample period.
        p.slice_idle_ns = 5 * SEC;
        p.slice_sync_ns = 10 * SEC;
        p.target_latency_ns = 30 * SEC;
        let mut m = Mcfq::new(p, 10);
        let mut io = crate::sched::io(1, Op::Read, 0, 4096);
        m.insert(5 * MS, io.clone());
        io.tag = 2;
        io.owner = 1;
        m.insert(5 * MS, io);
        let d = m.dispatch(5 * MS).unwrap();
        assert_eq!(d.owner, 0);
        // VM0's request is in flight: its completion will come, no timer needed.
        assert_eq!(m.next_wakeup_ns(), None);
        m.completed(6 * MS, &d);
        // VM0 idles with VM1 waiting: wake for the first sample, before the idle end.
        assert_eq!(m.next_wakeup_ns(), Some(5 * MS + SEC));
        assert!(m.dispatch(5 * MS + SEC).is_none());
        assert_eq!(m.next_wakeup_ns(), Some(5 * MS + 2 * SEC));
        assert_eq!(m.name(), "mcfq");
    }

    #[test]
    fn same_inputs_give_the_same_dispatch_order() {
        let go = || {
            let mut m = Mcfq::new(CfqParams::with_weights(WEIGHTS.to_vec()), 10);
            bench(&aged).run(&mut m, 0, 15 * SEC, |_, _| {}).order
        };
        let a = go();
        assert!(a.len() > 10_000);
        assert_eq!(a, go());
    }
}
