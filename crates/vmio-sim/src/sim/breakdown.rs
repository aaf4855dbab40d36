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
//! dev    the scheduler's and the device's time of the device request whose completion
//!        completed it: from (queued, dispatched, done), clipped to thr when stamped
//! cpu    the wait of its CPU work items for a core (cfs: Σ done − submitted − own time;
//!        kept by cpu.rs beside the request, by its slab index)
//! ```
//!
//! **Parts of one request** issued at `issue`, done at `now` (every part ≥ 0, the sum is
//! `now − issue` exactly):
//!
//! ```text
//! guest_queue = disp − issue
//! iotune      = thr − host
//! scheduler   = max(dispatched, thr) − max(queued, thr)       (0 without a device
//! device      = done − max(dispatched, thr)                    completion, or done < thr)
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
//!
//! Sources: the split follows blktrace's `btt` (blktrace's btt/README: a request's life cut
//! at its trace events into Q2G, G2I, I2D and D2C, whose averages add up to Q2C), carried
//! from the device's queue up through the virtual disk and the guest; the total is fio's
//! `lat` (fio's HOWTO "slat, clat, lat"; stat.c `add_lat_sample`), its percentiles read
//! from fio's histogram layout (metrics.rs, stat.h FIO_IO_U_PLAT_BITS).

use crate::metrics::Buckets;
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

/// The times a virtual-disk request carries (module doc); the device's as durations,
/// clipped when they are stamped.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Stamps {
    pub(super) disp: Ns,
    pub(super) host: Ns,
    pub(super) thr: Ns,
    pub(super) fin: Ns,
    /// The scheduler's and the device's time of the device request that completed it.
    pub(super) sched: Ns,
    pub(super) dev: Ns,
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

    /// The device request `d` completed it: its scheduler and device times from the
    /// request's release on (module doc; `d.done` is at most now, the host's finish).
    #[inline]
    pub(super) fn device(&mut self, d: DevTimes) {
        if d.done < self.thr {
            self.sched = 0;
            self.dev = 0;
            return;
        }
        let disp = d.dispatched.max(self.thr);
        self.sched = disp.saturating_sub(d.queued.max(self.thr));
        self.dev = d.done.saturating_sub(disp);
    }

    /// The host side's stamps of the leader (copied to each part of its host request).
    #[inline]
    pub(super) fn take_host(&mut self, l: &Stamps) {
        self.host = l.host;
        self.thr = l.thr;
        self.fin = l.fin;
        self.sched = l.sched;
        self.dev = l.dev;
    }

    /// The parts of a request issued at `issue` and done at `now`, whose CPU items waited
    /// `cpu_wait` for a core (module doc).
    #[inline]
    pub(super) fn parts(&self, issue: Ns, now: Ns, cpu_wait: Ns) -> Parts {
        // issue <= disp <= host <= thr <= fin <= now by construction; JobBreakdown::record
        // clips parts that would pass the total.
        debug_assert!(issue <= self.disp && self.disp <= self.host && self.host <= self.thr);
        debug_assert!(self.thr <= self.fin && self.fin <= now, "{self:?} {now}");
        let host_side = self.fin.saturating_sub(self.host);
        let vmm_phases = now.saturating_sub(self.disp).saturating_sub(host_side);
        let cpu = cpu_wait.min(vmm_phases);
        let mut p = [0; 9];
        p[GUEST_QUEUE] = self.disp.saturating_sub(issue);
        p[VMM] = vmm_phases - cpu;
        p[IOTUNE] = self.thr.saturating_sub(self.host);
        p[HOST_CACHE] = self
            .fin
            .saturating_sub(self.thr)
            .saturating_sub(self.sched + self.dev);
        p[SCHEDULER] = self.sched;
        p[DEVICE] = self.dev;
        p[CPU] = cpu;
        p
    }
}

/// Where an I/O's time went, as its completion hands it to the job (jobs.rs io_done).
#[derive(Clone, Copy)]
pub(super) enum Spent<'a> {
    /// All of it in the guest's page cache (an operation no block request released).
    Guest,
    /// These parts (an operation a block request released; a held completion's).
    Parts(&'a Parts),
    /// A virtual-disk request of the job's own, by its stamps and its CPU wait.
    Request(&'a Stamps, Ns),
}

impl Spent<'_> {
    /// The parts of an I/O issued at `issue` and done at `now`; None: all in the guest.
    pub(super) fn parts(self, issue: Ns, now: Ns) -> Option<Parts> {
        match self {
            Spent::Guest => None,
            Spent::Parts(p) => Some(*p),
            Spent::Request(s, cpu) => Some(s.parts(issue, now, cpu)),
        }
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

/// A job's breakdown: the I/Os counted, per layer the sum of its parts and the histogram
/// of its non-zero parts (made at the first; its zeros are the rest of the count).
#[derive(Clone, Default)]
pub struct JobBreakdown {
    n: u64,
    /// u64: 2^64 ns is 584 years of latency summed, far past any simulated run's.
    sum: [u64; 9],
    hist: [Option<Buckets>; 9],
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
    /// An I/O of total latency `lat` with `parts` (clipped to add up to at most `lat`; the
    /// rest is the job's own time, the `job` layer); None: all of it in the guest's page
    /// cache (an operation no block request released).
    /// An I/O issued at `issue`, done at `now` (its latency, `lat`, from `issue`), that
    /// spent its time as `spent` says.
    #[inline(always)]
    pub(super) fn record_spent(&mut self, spent: Spent, issue: Ns, now: Ns, lat: Ns) {
        match spent {
            Spent::Guest => self.record(None, lat),
            Spent::Parts(p) => self.record(Some(p), lat),
            Spent::Request(s, cpu) => self.record_request(s, issue, now, cpu, lat),
        }
    }

    /// [`Stamps::parts`] recorded as they are made (no array of parts on the way).
    #[inline(always)]
    fn record_request(&mut self, s: &Stamps, issue: Ns, now: Ns, cpu_wait: Ns, lat: Ns) {
        self.n += 1;
        let host_side = s.fin.saturating_sub(s.host);
        let vmm_phases = now.saturating_sub(s.disp).saturating_sub(host_side);
        let cpu = cpu_wait.min(vmm_phases);
        let (gq, thr) = (s.disp.saturating_sub(issue), s.thr.saturating_sub(s.host));
        let hc = s.fin.saturating_sub(s.thr).saturating_sub(s.sched + s.dev);
        let vmm = vmm_phases - cpu;
        // Straight-line: most layers are 0 for most requests.
        let used = gq + vmm + thr + hc + s.sched + s.dev + cpu;
        if gq != 0 {
            self.add(GUEST_QUEUE, gq);
        }
        if vmm != 0 {
            self.add(VMM, vmm);
        }
        if thr != 0 {
            self.add(IOTUNE, thr);
        }
        if hc != 0 {
            self.add(HOST_CACHE, hc);
        }
        if s.sched != 0 {
            self.add(SCHEDULER, s.sched);
        }
        if s.dev != 0 {
            self.add(DEVICE, s.dev);
        }
        if cpu != 0 {
            self.add(CPU, cpu);
        }
        if lat > used {
            self.add(JOB, lat - used);
        }
    }

    #[inline(always)]
    pub(super) fn record(&mut self, parts: Option<&Parts>, lat: Ns) {
        self.n += 1;
        let Some(parts) = parts else {
            if lat != 0 {
                self.add(GUEST_CACHE, lat);
            }
            return;
        };
        let mut used: Ns = 0;
        for (k, &v) in parts.iter().enumerate().take(JOB) {
            if v != 0 {
                used += v;
                self.add(k, v);
            }
        }
        // The parts are made to add up to at most the latency (Stamps::parts, app_parts).
        debug_assert!(used <= lat, "{parts:?} {lat}");
        if lat > used {
            self.add(JOB, lat - used);
        }
    }

    #[inline(always)]
    fn add(&mut self, k: usize, v: Ns) {
        self.sum[k] += v;
        match &mut self.hist[k] {
            Some(h) => h.record(v),
            None => self.first(k, v),
        }
    }

    #[cold]
    fn first(&mut self, k: usize, v: Ns) {
        let mut h = Buckets::default();
        h.record(v);
        self.hist[k] = Some(h);
    }

    /// Add another clone's (group_reporting).
    pub fn merge(&mut self, o: &JobBreakdown) {
        self.n += o.n;
        for k in 0..LAYERS.len() {
            self.sum[k] += o.sum[k];
            if let Some(h) = &o.hist[k] {
                self.hist[k].get_or_insert_with(Buckets::default).merge(h);
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
        let total: u64 = self.sum.iter().sum();
        (0..LAYERS.len())
            .map(|k| {
                // fio's rank of a percentile among n values, zeros first, then the
                // histogram's (metrics.rs).
                let nonzero = self.hist[k].as_ref();
                let zeros = self.n - nonzero.map_or(0, Buckets::count);
                let pct = |p: f64| -> u64 {
                    let target = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
                    match nonzero {
                        Some(h) if target > zeros => h.nth(target - zeros),
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
        let mut s = Stamps {
            disp: 110,
            host: 150,
            thr: 170,
            fin: 400,
            ..Stamps::default()
        };
        s.device(DevTimes {
            queued: 160,
            dispatched: 200,
            done: 380,
        });
        let p = s.parts(100, 450, 5);
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
            // Below 128 ns every value has a bucket of its own (fio's layout).
            p[DEVICE] = if i < 90 { 0 } else { 100 };
            b.record(Some(&p), p[DEVICE]);
        }
        let f = &b.figures()[DEVICE];
        assert_eq!((f.p50_ns, f.p99_ns), (0, 100));
        assert!((f.mean_ns - 10.0).abs() < 1e-9);
        assert!((f.share - 1.0).abs() < 1e-12);
    }
}
