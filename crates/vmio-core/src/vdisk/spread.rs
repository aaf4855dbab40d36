//! The spread of a virtual disk's hand-offs when the CPU layer gives the path constant costs
//! (`[cpu] model = "dedicated"`, or no `[cpu]`): the wake-ups of the sleeping threads a
//! request passes through, each an exponential extra delay drawn from the disk's own stream.
//!
//! **Mechanism.** A request crosses two threads that sleep while it is elsewhere. The guest's
//! kick (virtqueue notify: an MMIO or port write, a KVM exit, `ioeventfd` signals an eventfd)
//! wakes the VMM thread that serves the queue, QEMU's main loop or an iothread, sleeping in
//! `ppoll` (util/aio-posix.c `aio_poll`); the host's completion (linux-aio's or io_uring's
//! eventfd, the thread pool's bottom half) wakes it again; its `virtio_notify_irqfd` makes
//! KVM inject the interrupt (irqfd), which wakes the vCPU if it is halted
//! (virt/kvm/kvm_main.c `kvm_vcpu_kick`). Under `dedicated` nothing competes for a core, so
//! the interface's costs (vmio-sim's vdisk/) are constants and a QD1 stream has p50 = p99 =
//! p99.99; what still varies is each wake-up's exit of the sleeper's core from its idle
//! state: 2 µs for C1, 10 µs for C1E, 133 µs for C6 on Skylake-SP (drivers/idle/intel_idle.c,
//! `skx_cstates`, worst-case exit latencies; target residencies 2, 20 and 600 µs), the state
//! chosen per idle period by the cpuidle governor (drivers/cpuidle/governors/menu.c).
//!
//! Polling absorbs short sleeps, so not every hand-off is a wake-up:
//! - an iothread busy-polls its handlers for up to `poll-max-ns` before it blocks, 32768 ns by
//!   default (QEMU iothread.c `IOTHREAD_POLL_MAX_NS_DEFAULT`, "16-32 microseconds yield IOPS
//!   improvements for both iodepth=1 and iodepth=32"); the main loop does not poll;
//! - a halted vCPU is polled by KVM for up to `halt_poll_ns` before its thread blocks,
//!   200000 ns by default on x86 (arch/x86/include/asm/kvm_host.h `KVM_HALT_POLL_NS_DEFAULT`,
//!   virt/kvm/kvm_main.c `kvm_vcpu_halt`; the per-vCPU window grows toward it while wake-ups
//!   arrive within it, taken here at its maximum);
//! - a thread still busy with earlier work takes the request when it is done (no wake-up).
//!
//! ```text
//! per disk of a VM (virtio-blk, virtio-scsi, ide; none for nbd and host); mean = [vm.disk.queue]
//!   wake_spread where the CPU layer's costs are constants, else 0 (cfs: its scheduling of
//!   the same hand-offs gives their variability; drawing here too would count them twice)
//! poll_vmm  = 32768 ns with iothreads >= 1, 0 on the main loop      poll_vcpu = 200000 ns
//! draw()    = -mean * ln(1 - u), u uniform in [0, 1) from
//!             Rng::derive(run seed, "vdisk/<vm>/<disk>/wake-spread")   (one seed decides all)
//! submit(q, kick, idle_since)   the kick of a request of queue q reaches its VMM thread,
//!                               idle since idle_since (busy until then when later):
//!     active[q] = max(active[q], kick)
//!     kick <= idle_since              -> the thread takes it at idle_since
//!     kick - idle_since <= poll_vmm   -> at kick (its polling saw it)
//!     else                            -> at kick + draw()
//! complete(at, idle_since)      the host's completion reaches the VMM thread: the same rules
//! interrupt(q, at)              the VMM injects the interrupt of a request of queue q at `at`:
//!     at - active[q] <= poll_vcpu     -> the guest has it at `at`
//!     else                            -> at + draw();   active[q] = that time
//! closed forms: one wake-up: mean m, quantile(p) = -m ln(1 - p) (p50 0.693 m, p99 4.61 m);
//!     k wake-ups per request: Erlang(k, m), mean k m, CDF 1 - e^(-x/m) sum_{i<k} (x/m)^i / i!
//!     (k = 2: p50 1.678 m, p99 6.638 m)
//! ```
//!
//! [`DEFAULT_MEAN_NS`] = 2 µs is an estimate: C1's exit latency as the typical extra of a
//! wake-up from the short sleeps of a fast device (under C1E's 20 µs target residency the
//! governor keeps the core in C1), with the exponential's p99 (9.2 µs) at C1E's exit latency.
//! Sleeps of 20-600 µs may reach C1E (up to 10 µs), so for slower devices it is low; deep
//! states (C6) are left out, as at these rates the governor's prediction keeps cores out of
//! them. An estimate, not a measurement: cyclictest's wake-up histograms (rt-tests) on the
//! target machine replace it (`wake_spread`). Stated simplifications: the idle state does not
//! depend on the sleep's length; a vCPU's sleep is judged from this disk's own events on the
//! queue (other disks' and CPU jobs' work on the vCPU are not seen); the I/O engine's own
//! hand-offs (the thread pool's worker) keep their constant costs (vmio-sim's vdisk/aio.rs).

use crate::rng::Rng;
use crate::Ns;

/// Mean extra delay of one completion's VMM wake-up on a dedicated core (estimate, module doc).
pub const DEFAULT_MEAN_NS: Ns = 2_000;

/// An exponential spread of one hand-off per completion, drawn from its own stream.
#[derive(Clone, Debug)]
pub struct WakeSpread {
    mean_ns: Ns,
    rng: Rng,
}

impl WakeSpread {
    /// The spread of disk `disk` of VM `vm` under run seed `seed` (`mean_ns` 0: none).
    pub fn new(seed: u64, vm: &str, disk: &str, mean_ns: Ns) -> Self {
        Self {
            mean_ns,
            rng: Rng::derive(seed, &Self::label(vm, disk)),
        }
    }

    /// The stream's label under the run seed.
    pub fn label(vm: &str, disk: &str) -> String {
        format!("vdisk/{vm}/{disk}/wake-spread")
    }

    #[inline]
    pub fn mean_ns(&self) -> Ns {
        self.mean_ns
    }

    /// The extra delay of the next completion (ns, rounded down).
    pub fn draw(&mut self) -> Ns {
        if self.mean_ns == 0 {
            return 0;
        }
        let u = self.rng.unit();
        (-(self.mean_ns as f64) * (1.0 - u).ln()) as Ns
    }

    /// The closed-form quantile `p` in [0, 1) of the extra delay (ns).
    pub fn quantile(&self, p: f64) -> f64 {
        -(self.mean_ns as f64) * (1.0 - p.clamp(0.0, 1.0 - f64::EPSILON)).ln()
    }
}

/// QEMU's iothread polling window (iothread.c `IOTHREAD_POLL_MAX_NS_DEFAULT`).
pub const IOTHREAD_POLL_NS: Ns = 32_768;
/// KVM's halt polling window on x86 (`KVM_HALT_POLL_NS_DEFAULT`).
pub const HALT_POLL_NS: Ns = 200_000;

/// The hand-offs of one virtual disk's path with their wake-up spread (module doc).
#[derive(Clone, Debug)]
pub struct Handoffs {
    spread: WakeSpread,
    vmm_poll_ns: Ns,
    vcpu_poll_ns: Ns,
    /// Per queue: the last time the guest's vCPU was active on the disk (a kick, an
    /// interrupt handled).
    active: Vec<Ns>,
    /// Per queue: when the guest took the last interrupt. The guest takes a queue's
    /// completions in the order the device posts them (virtio 1.1, 2.6.8: the used ring is
    /// read in order), so a later interrupt is not taken before an earlier one is.
    delivered: Vec<Ns>,
    /// Wake-ups drawn so far.
    draws: u64,
}

impl Handoffs {
    /// Disk `disk` of VM `vm` under run seed `seed`: `mean_ns` (0: none), its VMM thread's
    /// polling window.
    pub fn new(seed: u64, vm: &str, disk: &str, mean_ns: Ns, vmm_poll_ns: Ns) -> Self {
        Self {
            spread: WakeSpread::new(seed, vm, disk, mean_ns),
            vmm_poll_ns,
            vcpu_poll_ns: HALT_POLL_NS,
            active: Vec::new(),
            delivered: Vec::new(),
            draws: 0,
        }
    }

    /// Disk `d` of VM `vm`: its `wake_spread` on a VM interface when the CPU layer gives the
    /// path constant costs (`constant_costs`: not cfs), else none.
    pub fn for_disk(seed: u64, vm: &str, d: &super::DiskSpec, constant_costs: bool) -> Self {
        use super::Interface::{Ide, VirtioBlk, VirtioScsi};
        let vm_disk = matches!(d.interface, VirtioBlk | VirtioScsi | Ide);
        let mean = if constant_costs && vm_disk {
            d.queue.wake_spread_ns
        } else {
            0
        };
        let poll = if d.queue.iothreads > 0 {
            IOTHREAD_POLL_NS
        } else {
            0
        };
        Self::new(seed, vm, &d.name, mean, poll)
    }

    /// No spread.
    pub fn none() -> Self {
        Self::new(0, "", "", 0, 0)
    }

    #[inline]
    pub fn mean_ns(&self) -> Ns {
        self.spread.mean_ns()
    }

    /// Wake-ups drawn so far.
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// The guest's kick of a request of queue `queue` at `kick` reaches its VMM thread, idle
    /// since `idle_since` (busy until then when later): when the thread takes it.
    #[inline]
    pub fn submit(&mut self, queue: u32, kick: Ns, idle_since: Ns) -> Ns {
        if self.spread.mean_ns() == 0 {
            return kick.max(idle_since);
        }
        let a = self.active_mut(queue);
        *a = (*a).max(kick);
        self.vmm(kick, idle_since)
    }

    /// The host's completion at `at` reaches the VMM thread idle since `idle_since`: when the
    /// thread takes it.
    #[inline]
    pub fn complete(&mut self, at: Ns, idle_since: Ns) -> Ns {
        if self.spread.mean_ns() == 0 {
            return at.max(idle_since);
        }
        self.vmm(at, idle_since)
    }

    /// The VMM injects the interrupt of a request of queue `queue` at `at`: when the guest has
    /// it (a vCPU halted longer than KVM's polling is woken).
    #[inline]
    pub fn interrupt(&mut self, queue: u32, at: Ns) -> Ns {
        if self.spread.mean_ns() == 0 {
            return at;
        }
        let last = *self.active_mut(queue);
        let t = if at.saturating_sub(last) > self.vcpu_poll_ns {
            self.draws += 1;
            at + self.spread.draw()
        } else {
            at
        };
        let q = queue as usize;
        if self.delivered.len() <= q {
            self.delivered.resize(q + 1, 0);
        }
        // An interrupt posted while the vCPU is still waking for an earlier one is taken
        // when it wakes, after that one.
        let t = t.max(self.delivered[q]);
        self.delivered[q] = t;
        let a = self.active_mut(queue);
        *a = (*a).max(t);
        t
    }

    fn vmm(&mut self, at: Ns, idle_since: Ns) -> Ns {
        if at <= idle_since {
            return idle_since;
        }
        if at - idle_since <= self.vmm_poll_ns {
            return at;
        }
        self.draws += 1;
        at + self.spread.draw()
    }

    fn active_mut(&mut self, queue: u32) -> &mut Ns {
        let q = queue as usize;
        if self.active.len() <= q {
            self.active.resize(q + 1, 0);
        }
        &mut self.active[q]
    }
}

/// The closed-form quantile `p` in (0, 1) of the sum of `k` independent exponential delays of
/// mean `mean` (Erlang(k, mean); `k` = 0: 0), by bisection on its CDF.
pub fn erlang_quantile(k: u32, mean: f64, p: f64) -> f64 {
    if k == 0 || mean <= 0.0 {
        return 0.0;
    }
    let cdf = |x: f64| {
        let y = x / mean;
        let (mut term, mut sum) = (1.0, 1.0);
        for i in 1..k {
            term *= y / i as f64;
            sum += term;
        }
        1.0 - (-y).exp() * sum
    };
    let (mut lo, mut hi) = (0.0, mean);
    while cdf(hi) < p {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(seed: u64, n: usize) -> Vec<Ns> {
        let mut s = WakeSpread::new(seed, "vm1", "vda", DEFAULT_MEAN_NS);
        (0..n).map(|_| s.draw()).collect()
    }

    #[test]
    fn a_queues_interrupts_reach_the_guest_in_the_order_they_were_posted() {
        // A chain of completions posted 1 µs apart after a long idle: the first wakes the
        // vCPU (a drawn wake-up); the rest, posted while it wakes, are taken when it is awake,
        // never before the first.
        let mut h = Handoffs::new(3, "vm1", "vda", DEFAULT_MEAN_NS, 0);
        let mut last = 0;
        for k in 0..64 {
            let at = 1_000_000_000 + k * 1_000;
            let t = h.interrupt(0, at);
            assert!(
                t >= at && t >= last,
                "interrupt {k}: posted {at}, taken {t} after {last}"
            );
            last = t;
        }
        // Another queue keeps its own order.
        assert!(h.interrupt(1, 5) >= 5);
    }

    #[test]
    fn the_mean_of_many_draws_is_the_exponentials_mean() {
        let d = draws(1, 200_000);
        let mean = d.iter().sum::<Ns>() as f64 / d.len() as f64;
        // the standard error of 200k exponential draws is mean / sqrt(n) = 0.22 %; rounding
        // down to whole ns takes 0.5 ns off the mean
        let want = DEFAULT_MEAN_NS as f64 - 0.5;
        assert!(
            (mean - want).abs() < 0.01 * want,
            "mean {mean} against {want}"
        );
    }

    #[test]
    fn the_quantiles_of_many_draws_are_the_closed_forms() {
        let mut d = draws(2, 200_000);
        d.sort_unstable();
        let s = WakeSpread::new(2, "vm1", "vda", DEFAULT_MEAN_NS);
        for p in [0.5, 0.9, 0.99, 0.999] {
            let got = d[(p * d.len() as f64) as usize] as f64;
            let want = s.quantile(p);
            assert!(
                (got - want).abs() < 0.03 * want,
                "p{p}: {got} against {want}"
            );
        }
        assert!((s.quantile(0.99) - 4.605 * DEFAULT_MEAN_NS as f64).abs() < 1.0);
    }

    #[test]
    fn one_seed_gives_one_sequence_and_disks_have_their_own_streams() {
        assert_eq!(draws(7, 100), draws(7, 100));
        assert_ne!(draws(7, 100), draws(8, 100));
        let mut a = WakeSpread::new(7, "vm1", "vda", DEFAULT_MEAN_NS);
        let mut b = WakeSpread::new(7, "vm1", "vdb", DEFAULT_MEAN_NS);
        let (x, y): (Vec<Ns>, Vec<Ns>) = (0..100).map(|_| (a.draw(), b.draw())).unzip();
        assert_ne!(x, y);
    }

    #[test]
    fn a_zero_mean_adds_nothing() {
        let mut s = WakeSpread::new(1, "vm1", "vda", 0);
        assert!((0..1000).all(|_| s.draw() == 0));
        assert_eq!(s.quantile(0.99), 0.0);
    }
    #[test]
    fn the_erlang_quantiles_are_the_closed_forms() {
        // k = 1: -ln(1 - p); k = 2: the roots of 1 - e^-y (1 + y) = p.
        assert!((erlang_quantile(1, 1.0, 0.99) - 100f64.ln()).abs() < 1e-9);
        assert!((erlang_quantile(2, 1.0, 0.5) - 1.678_347).abs() < 1e-5);
        assert!((erlang_quantile(2, 1.0, 0.99) - 6.638_352).abs() < 1e-5);
        assert_eq!(erlang_quantile(0, 1.0, 0.99), 0.0);
    }

    #[test]
    fn a_busy_or_polling_thread_takes_a_hand_off_without_a_wake_up() {
        let mut h = Handoffs::new(1, "vm1", "vda", DEFAULT_MEAN_NS, IOTHREAD_POLL_NS);
        // Busy until 50 µs: taken then.
        assert_eq!(h.submit(0, 10_000, 50_000), 50_000);
        // Idle for 30 µs: within the iothread's polling.
        assert_eq!(h.complete(80_000, 50_000), 80_000);
        assert_eq!(h.draws(), 0);
        // Idle for 40 µs: woken, later than the event.
        let t = h.complete(120_000, 80_000);
        assert!(t >= 120_000);
        assert_eq!(h.draws(), 1);
        // The main loop does not poll: any sleep is a wake-up.
        let mut m = Handoffs::new(1, "vm1", "vda", DEFAULT_MEAN_NS, 0);
        m.complete(1_001, 1_000);
        assert_eq!(m.draws(), 1);
    }

    #[test]
    fn a_vcpu_is_woken_only_after_a_sleep_longer_than_kvm_halt_polling() {
        let mut h = Handoffs::new(1, "vm1", "vda", DEFAULT_MEAN_NS, 0);
        h.submit(0, 1_000, 0);
        // 150 µs later: KVM polled the halted vCPU.
        assert_eq!(h.interrupt(0, 151_000), 151_000);
        // 300 µs after that: the vCPU thread blocked and is woken.
        h.interrupt(0, 451_000);
        assert_eq!(h.draws(), 2);
        // Another queue's vCPU has its own history.
        assert_eq!(h.interrupt(1, 100_000), 100_000);
    }

    #[test]
    fn no_spread_leaves_every_hand_off_at_its_time() {
        let mut h = Handoffs::none();
        assert_eq!(h.submit(0, 10, 5), 10);
        assert_eq!(h.submit(0, 10, 50), 50);
        assert_eq!(h.complete(1_000_000, 5), 1_000_000);
        assert_eq!(h.interrupt(0, 10_000_000), 10_000_000);
        assert_eq!(h.draws(), 0);
    }
}
