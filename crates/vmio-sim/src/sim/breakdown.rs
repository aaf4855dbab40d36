//! Where the time goes: every I/O's latency split into the time it spent in each layer of
//! the stack, and per job each layer's mean, percentiles and share of the mean.
//!
//! The layers, by the stack table that configures them (`vmio help stack`):
//!
//! ```text
//! vm.page_cache        the guest's page cache and filesystem (copies, read-ahead waits,
//!                      dirty throttling, journal commits: an operation's time not spent
//!                      in the block request that released it)
//! vm.disk.guest_queue  the guest's block layer: from the bio's issue to its request's
//!                      dispatch to the virtual disk (tags, nr_requests, the scheduler, plug)
//! vm.disk.queue        the virtual disk and the VMM: the guest's kick, the VMM thread's
//!                      submit and complete work and its queue, the I/O engine's slot (thread
//!                      pool), hand-offs, wake-ups, the interrupt
//! vm.disk.iotune       QEMU's throttling: from the host request's start to its release
//! page_cache           the host side other than the device queue and service: the host
//!                      page cache (copies, fetches' and writebacks' own waits), the format
//!                      driver and the host filesystem
//! scheduler            the host I/O scheduler: the device request's wait in its queue
//! device               the device's service of the request
//! cpu                  ([cpu] model = "cfs") the request's CPU work waiting for a core
//! job                  fio's own time: the null engine's loop, a completion reaped late
//!                      while the job's thread is in a blocking fsync
//! ```
//!
//! **Stamps.** A virtual-disk request (guest.rs `VReq`) carries a few times ([`Stamps`]),
//! written as it crosses a boundary:
//!
//! ```text
//! disp   dispatched by the guest queue (the VReq is made)
//! host   the host side starts it (block_start: after the VMM's submit and the engine slot)
//! thr    throttling released it (block_resume)
//! fin    the host side is done (host_finish)
//! dev    (queued, dispatched, done) of the device request whose completion completed it
//! cpu    the wait of its CPU work items for a core (cfs: Σ done − submitted − own time)
//! ```
//!
//! **Parts of one request** issued at `issue`, done at `now` (every part ≥ 0, the sum is
//! `now − issue` exactly):
//!
//! ```text
//! guest_queue = disp − issue
//! iotune      = thr − host
//! scheduler   = max(dispatched, thr) − max(queued, thr)       (0 without a device ctx,
//! device      = min(done, fin) − max(dispatched, thr)          or when done < thr)
//! page_cache  = (fin − thr) − scheduler − device
//! cpu         = min(cpu wait, what is left)
//! queue (VMM) = (now − issue) − every part above
//! ```
//!
//! **Attribution across merges and splits.**
//! - A guest request split into parts completes with its last part: its parts are that
//!   part's (the wait for the slowest child). Bios merged into one request each take the
//!   request's stamps with their own issue time.
//! - The host side: a request completed (or copied) by the completion of a barrier of
//!   device requests takes that barrier's last device request (the slowest piece); a host
//!   writeback serving several waiting writers gives each the same device times. A request
//!   the host completes with no device completion (a page-cache hit, a flush done without the
//!   device) has no scheduler or device time. A format driver's request takes the device
//!   times of the sub-request whose completion let the driver complete it.
//! - Device times are clipped to the request's own host interval [thr, fin]: what the device
//!   did for it before it arrived (a writeback started earlier) is not its time.
//! - The guest: an application operation completed by the completion of a guest block
//!   request (directly, or after a copy) takes that request's parts; the part of them that
//!   lies before the operation was issued (a read-ahead it found in flight) is cut from the
//!   earliest layers first (guest queue, VMM, throttling, host cache, host queue, device,
//!   CPU); `vm.page_cache` is the rest of the operation's time.
//! - Not followed (their time counts in `page_cache`): device time under a host filesystem
//!   whose policy resumes after its own timer or CPU work, and a device request's post-flush
//!   on a device without FUA (the flush's time only).
//!
//! **Per job.** Over the job's reads, writes and trims in the measured window (fio's sync
//! latencies are apart, as in fio's JSON): per layer the sum of its parts and a histogram in
//! fio's layout ([`crate::metrics::LatencyStats`], allocated at the layer's first non-zero
//! part; zeros are counted apart). mean = sum / N, so the layers' means add up to the
//! job's mean total latency (fio's `lat_ns`: submission + completion), and share = mean /
//! that mean. Percentiles are each layer's own (they do not add up).

use crate::metrics::LatencyStats;
use vmio_core::Ns;

/// The layers, in the order of [`Parts`].
pub const LAYERS: [&str; 9] = [
    "vm.page_cache",
    "vm.disk.guest_queue",
    "vm.disk.queue",
    "vm.disk.iotune",
    "page_cache",
    "scheduler",
    "device",
    "cpu",
    "job",
];

pub(super) const GUEST_CACHE: usize = 0;
const GUEST_QUEUE: usize = 1;
const VMM: usize = 2;
const IOTUNE: usize = 3;
const HOST_CACHE: usize = 4;
const SCHEDULER: usize = 5;
const DEVICE: usize = 6;
const CPU: usize = 7;
pub(super) const JOB: usize = 8;

/// One I/O's time in each layer of [`LAYERS`], ns.
pub(super) type Parts = [Ns; 9];

/// A device request's times: when it entered the scheduler, was dispatched, completed.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DevTimes {
    pub(super) queued: Ns,
    pub(super) dispatched: Ns,
    pub(super) done: Ns,
}

/// The times a virtual-disk request carries (module doc).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Stamps {
    pub(super) disp: Ns,
    pub(super) host: Ns,
    pub(super) thr: Ns,
    pub(super) fin: Ns,
    pub(super) dev: Option<DevTimes>,
    pub(super) cpu_wait: Ns,
    /// The CPU item in flight: when it would be done without waiting (cfs).
    pub(super) cpu_due: Ns,
}

impl Stamps {
    /// Stamps dispatched at `now`.
    #[inline]
    pub(super) fn at(now: Ns) -> Self {
        Stamps {
            disp: now,
            host: now,
            thr: now,
            fin: now,
            ..Stamps::default()
        }
    }

    /// The host side's stamps of the leader (copied to each part of its host request).
    #[inline]
    pub(super) fn take_host(&mut self, l: &Stamps) {
        self.host = l.host;
        self.thr = l.thr;
        self.fin = l.fin;
        self.dev = l.dev;
    }

    /// The parts of a request issued at `issue` and done at `now` (module doc).
    pub(super) fn parts(&self, issue: Ns, now: Ns) -> Parts {
        let mut p = [0; 9];
        let mut left = now.saturating_sub(issue);
        let mut take = |k: usize, v: Ns| {
            let v = v.min(left);
            left -= v;
            p[k] = v;
        };
        take(GUEST_QUEUE, self.disp.saturating_sub(issue));
        let fin = self.fin.max(self.thr);
        take(IOTUNE, self.thr.saturating_sub(self.host));
        let (sched, dev) = match self.dev {
            Some(d) if d.done >= self.thr => {
                let disp = d.dispatched.max(self.thr);
                (
                    disp.saturating_sub(d.queued.max(self.thr)),
                    d.done.min(fin).saturating_sub(disp),
                )
            }
            _ => (0, 0),
        };
        take(SCHEDULER, sched);
        take(DEVICE, dev);
        take(HOST_CACHE, (fin - self.thr).saturating_sub(sched + dev));
        take(CPU, self.cpu_wait);
        take(VMM, Ns::MAX);
        p
    }
}

/// An application operation issued at `issue`, done at `now`, released by a block request
/// of parts `below`: those parts cut to the operation's time from the earliest layers, the
/// rest in the guest's page cache (module doc).
pub(super) fn app_parts(below: &Parts, issue: Ns, now: Ns) -> Parts {
    let total = now.saturating_sub(issue);
    let sum: Ns = below.iter().sum();
    let mut p = *below;
    let mut cut = sum.saturating_sub(total);
    for k in [GUEST_QUEUE, VMM, IOTUNE, HOST_CACHE, SCHEDULER, DEVICE, CPU] {
        let c = cut.min(p[k]);
        p[k] -= c;
        cut -= c;
    }
    p[GUEST_CACHE] = total - p.iter().sum::<Ns>();
    p
}

/// A job's breakdown: per layer the sum of its parts, its zeros and its histogram.
#[derive(Clone, Default)]
pub struct JobBreakdown {
    n: u64,
    sum: [u128; 9],
    zeros: [u64; 9],
    hist: [Option<Box<LatencyStats>>; 9],
}

/// One layer's figures in a job.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerFigures {
    pub layer: &'static str,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// mean / the job's mean latency (0 without I/O).
    pub share: f64,
}

impl JobBreakdown {
    /// An I/O of total latency `lat` with `parts` (their sum ≤ lat; the rest is the job's
    /// own time, the `job` layer).
    #[inline]
    pub(super) fn record(&mut self, parts: &Parts, lat: Ns) {
        self.n += 1;
        let mut rest = lat;
        for (k, &v) in parts.iter().enumerate().take(JOB) {
            let v = v.min(rest);
            rest -= v;
            self.add(k, v);
        }
        self.add(JOB, rest);
    }

    #[inline]
    fn add(&mut self, k: usize, v: Ns) {
        if v == 0 {
            self.zeros[k] += 1;
            return;
        }
        self.sum[k] += u128::from(v);
        self.hist[k].get_or_insert_with(Box::default).record(v);
    }

    /// Add another clone's (group_reporting).
    pub fn merge(&mut self, o: &JobBreakdown) {
        self.n += o.n;
        for k in 0..LAYERS.len() {
            self.sum[k] += o.sum[k];
            self.zeros[k] += o.zeros[k];
            if let Some(h) = &o.hist[k] {
                self.hist[k].get_or_insert_with(Box::default).merge(h);
            }
        }
    }

    /// The I/Os counted.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Per layer (in [`LAYERS`] order): mean, p50, p99, p99.9 and share.
    pub fn figures(&self) -> Vec<LayerFigures> {
        let n = self.n.max(1) as f64;
        let total: u128 = self.sum.iter().sum();
        (0..LAYERS.len())
            .map(|k| {
                // The k-th smallest of n values, zeros first, then the histogram's.
                let pct = |p: f64| -> u64 {
                    if self.n == 0 {
                        return 0;
                    }
                    let target = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
                    match &self.hist[k] {
                        Some(h) if target > self.zeros[k] => {
                            let q =
                                ((target - self.zeros[k]) as f64 - 0.5) / h.count() as f64 * 100.0;
                            h.percentile(q.min(100.0))
                        }
                        _ => 0,
                    }
                };
                LayerFigures {
                    layer: LAYERS[k],
                    mean_ns: self.sum[k] as f64 / n,
                    p50_ns: pct(50.0),
                    p99_ns: pct(99.0),
                    p999_ns: pct(99.9),
                    share: if total == 0 {
                        0.0
                    } else {
                        self.sum[k] as f64 / total as f64
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_parts_add_up_to_its_latency_whatever_its_stamps() {
        let s = Stamps {
            disp: 110,
            host: 150,
            thr: 170,
            fin: 400,
            dev: Some(DevTimes {
                queued: 160,
                dispatched: 200,
                done: 380,
            }),
            cpu_wait: 5,
            cpu_due: 0,
        };
        let p = s.parts(100, 450);
        assert_eq!(p.iter().sum::<Ns>(), 350);
        assert_eq!(p[GUEST_QUEUE], 10);
        assert_eq!(p[IOTUNE], 20);
        // The device request queued before the host request's release counts from it.
        assert_eq!(p[SCHEDULER], 30);
        assert_eq!(p[DEVICE], 180);
        assert_eq!(p[HOST_CACHE], 20);
        assert_eq!(p[CPU], 5);
        assert_eq!(p[VMM], 350 - 10 - 20 - 30 - 180 - 20 - 5);
    }

    #[test]
    fn an_operation_that_found_its_read_ahead_in_flight_keeps_only_its_own_time() {
        let mut below = [0; 9];
        below[GUEST_QUEUE] = 5;
        below[VMM] = 20;
        below[DEVICE] = 100;
        // Issued 60 ns before its completion: 65 ns of the request lie before it.
        let p = app_parts(&below, 1000, 1060);
        assert_eq!(p.iter().sum::<Ns>(), 60);
        assert_eq!((p[GUEST_QUEUE], p[VMM], p[DEVICE]), (0, 0, 60));
        assert_eq!(p[GUEST_CACHE], 0);
        // Issued long before: the rest is the guest's.
        let p = app_parts(&below, 0, 1000);
        assert_eq!(p[GUEST_CACHE], 1000 - 125);
    }

    #[test]
    fn a_layers_percentiles_count_its_zero_parts() {
        let mut b = JobBreakdown::default();
        let mut p = [0; 9];
        for i in 0..100 {
            p[DEVICE] = if i < 90 { 0 } else { 1000 };
            b.record(&p, p[DEVICE]);
        }
        let f = &b.figures()[DEVICE];
        assert_eq!((f.p50_ns, f.p99_ns), (0, 1000));
        assert!((f.mean_ns - 100.0).abs() < 1e-9);
        assert!((f.share - 1.0).abs() < 1e-12);
    }
}
