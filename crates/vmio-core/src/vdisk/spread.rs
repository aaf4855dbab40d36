//! The spread of a virtual disk's completion hand-off when every host thread has a core of its
//! own (`[cpu] model = "dedicated"`, or no `[cpu]`): the wake-up of the VMM thread that sleeps
//! while the host I/O is in flight.
//!
//! **Mechanism.** Under `dedicated` nothing competes for a core, so the interface's costs
//! (crates/vmio-sim/src/vdisk/) are constants and a QD1 stream has p50 = p99 = p99.99. What
//! still varies on such a host is the wake-up of a sleeping thread: QEMU's main loop or
//! iothread waits in `ppoll` for the completion's eventfd (util/aio-posix.c; the main loop
//! does not busy-poll, an iothread polls only for `poll-max-ns`, 32 µs by default), and its
//! idle core must leave its idle state before the thread runs. The exit latency is the idle
//! state's: 2 µs for C1 and 10 µs for C1E on Skylake-SP, 133 µs for C6 (drivers/idle/
//! intel_idle.c, `skx_cstates`), chosen per idle period by the cpuidle governor's prediction
//! (drivers/cpuidle/governors/menu.c). The guest's side, the vCPU halted in its idle loop, is
//! absorbed by KVM's halt polling for idle periods up to `halt_poll_ns` (200 µs by default on
//! x86, KVM_HALT_POLL_NS_DEFAULT; virt/kvm/kvm_main.c `kvm_vcpu_halt`), so the spread is
//! charged once per completion, on the VMM's wake-up.
//!
//! **Distribution.** An exponential extra delay of mean `mean_ns` added to the hand-off
//! (occupying no thread, like [`crate::vdisk::queue`]'s `wakeup`):
//!
//! ```text
//! draw:      extra = -mean · ln(1 - u),  u uniform in [0, 1) from the disk's own stream
//!            Rng::derive(run seed, "vdisk/<vm>/<disk>/wake-spread")   (one seed decides all)
//! closed forms: mean = mean_ns;  quantile(p) = -mean · ln(1 - p)
//!            (p50 = 0.693 mean, p99 = 4.61 mean, p99.99 = 9.21 mean)
//! ```
//!
//! [`DEFAULT_MEAN_NS`] = 2 µs is an estimate: the C1 exit latency above as the typical extra
//! of a wake-up into a shallow idle state, with the exponential's p99 (9.2 µs) at C1E's exit
//! latency; deep states (C6) are left out, as QEMU's iothread polling and a loaded host keep
//! the core out of them at these request rates. An estimate, not a measurement: cyclictest's
//! wake-up histograms of an idle host (rt-tests) measured on the target machine replace it.
//! The spread is a pure function of the run seed and the disk; the constant costs keep their
//! figures as the mean's offset.

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

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(seed: u64, n: usize) -> Vec<Ns> {
        let mut s = WakeSpread::new(seed, "vm1", "vda", DEFAULT_MEAN_NS);
        (0..n).map(|_| s.draw()).collect()
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
}
