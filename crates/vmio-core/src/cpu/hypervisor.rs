//! What a hypervisor costs in CPU time: the mechanisms the simulator charges as work on host
//! threads when `[cpu] model = "cfs"` (the `[cpu]` table's mechanism keys, beside CFS's own
//! in [`super::cfs::PARAMS`]).
//!
//! ```text
//! mechanism                     charged as                        on thread        sources
//! VM exit round trip (in KVM)   exit                              the vCPU         LKML 2020: ~2,500 cycles (AMD SVM)
//! exit to the VMM in user space user_exit (port I/O under QEMU)   the vCPU         kvm_cpu_exec, KVM_EXIT_IO
//! guest timer tick              guest_hz × 2 exits per second     each running     the guest's CONFIG_HZ; a LAPIC
//!                               of vCPU run time (timer exit +    vCPU (inflates   timer exit, then an injection
//!                               the injection's EOI exit)         its work)        with its EOI exit
//! VMM main-loop wake-ups        vmm_hz × vmm_wake per second      QEMU main loop   hw/usb/hcd-uhci.c: the UHCI
//!                               per VM (KVM), per domain on a     (KVM), dom0      frame timer runs every 1 ms
//!                               dom0 vCPU (Xen's qemu-dm)         (Xen)            (FRAME_TIMER_FREQ 1000) while
//!                                                                                  the controller runs: libvirt
//!                                                                                  guests get a USB tablet
//! Xen credit accounting         xen_hz × exit per second of a     each running     xen/common/sched_credit.c:
//!                               vCPU's run time (the hypervisor   vCPU (inflates   10 ms tick (CSCHED_MSECS_PER_TICK)
//!                               tick interrupts it)               its work)
//! host housekeeping             housekeeping_hz × housekeeping    one host kernel  kworkers, RCU, vmstat,
//!                               per second, host-wide             thread           timers (estimate)
//! I/O completion in the host    kernel_complete per request       the kernel       blk_mq_complete_request,
//!                                                                 thread of the    aio_complete (softirq on the
//!                                                                 device's core    core the interrupt reached)
//! the interrupt in the guest    the interface's guest_complete    the vCPU         see vmio_sim's vdisk/ (ide.rs counts IDE's)
//! ```
//!
//!
//! A host without EPT (`[host] ept = false`: Intel before Nehalem, e.g. the Core 2 Quad
//! Q9550) has no VPID either (both came with Nehalem), so two more costs inflate a running
//! vCPU's work, for KVM and for Xen's HVM guests alike:
//!
//! ```text
//! shadow paging   shadow_hz × shadow_exit per second   the hypervisor keeps shadow page
//!                 of vCPU run time                      tables: guest page-table writes and
//!                                                       CR3 loads exit to its MMU (Adams and
//!                                                       Agesen, ASPLOS 2006; Bhargava et al.,
//!                                                       ASPLOS 2008)
//! TLB flushes     (exits per second + shadow_hz) ×      without VPID every VM entry and exit
//!                 tlb_refill                            flushes the TLB (Intel SDM vol. 3,
//!                                                       "VPID"): the guest refills it
//! ```
//!
//! A native host (`hypervisor = "native"`) charges only the host's housekeeping and the
//! completions; Xen charges the VMM's work to dom0's vCPUs, KVM to QEMU's threads.
//!
//! The figures marked "estimate" have no single measured source; their help line says so.

use super::contention::Sensitivity;
use crate::params::{Kind, ParamSpec, Value, Values};
use crate::{Ns, SEC, US};

const DURATION: Kind = Kind::Duration {
    bare: SEC,
    positive: false,
};
const HZ: Kind = Kind::Count { min: 0, max: 10000 };

pub const EXIT: ParamSpec = ParamSpec {
    name: "exit",
    kind: DURATION,
    default: Value::Int(1_200),
    unit: "ns",
    help: "a VM exit handled in the kernel and the re-entry (about 2,500 cycles, LKML 2020)",
};
pub const USER_EXIT: ParamSpec = ParamSpec {
    name: "user_exit",
    kind: DURATION,
    default: Value::Int(5 * US),
    unit: "ns",
    help: "an exit handled by the VMM in user space, e.g. port I/O (estimate: ioctl return, dispatch under the BQL, re-entry)",
};
pub const GUEST_HZ: ParamSpec = ParamSpec {
    name: "guest_hz",
    kind: HZ,
    default: Value::Int(250),
    unit: "Hz",
    help: "the guest kernel's timer tick while a vCPU runs (CONFIG_HZ=250); each costs 2 exits",
};
pub const VMM_HZ: ParamSpec = ParamSpec {
    name: "vmm_hz",
    kind: HZ,
    default: Value::Int(1000),
    unit: "Hz",
    help: "wake-ups of each VM's VMM main loop (QEMU's UHCI frame timer, 1 kHz)",
};
pub const VMM_WAKE: ParamSpec = ParamSpec {
    name: "vmm_wake",
    kind: DURATION,
    default: Value::Int(5 * US),
    unit: "ns",
    help:
        "CPU time of one main-loop wake-up (estimate: poll, timer, a frame of an idle controller)",
};
pub const XEN_HZ: ParamSpec = ParamSpec {
    name: "xen_hz",
    kind: HZ,
    default: Value::Int(100),
    unit: "Hz",
    help:
        "Xen's credit-scheduler tick on a running vCPU (10 ms, sched_credit.c); each costs an exit",
};
pub const HOUSEKEEPING_HZ: ParamSpec = ParamSpec {
    name: "housekeeping_hz",
    kind: HZ,
    default: Value::Int(100),
    unit: "Hz",
    help: "host-wide kernel housekeeping wake-ups (kworkers, RCU, vmstat; estimate)",
};
pub const HOUSEKEEPING: ParamSpec = ParamSpec {
    name: "housekeeping",
    kind: DURATION,
    default: Value::Int(20 * US),
    unit: "ns",
    help: "CPU time of one housekeeping wake-up (estimate)",
};
pub const KERNEL_COMPLETE: ParamSpec = ParamSpec {
    name: "kernel_complete",
    kind: DURATION,
    default: Value::Int(2 * US),
    unit: "ns",
    help:
        "the host kernel's completion of one request (interrupt, softirq, aio completion; estimate)",
};

pub const SHADOW_EXIT: ParamSpec = ParamSpec {
    name: "shadow_exit",
    kind: DURATION,
    default: Value::Int(4 * US),
    unit: "ns",
    help: "without EPT ([host] ept = false): an exit to the shadow MMU, a guest page-table write or CR3 load (estimate: about 10^4 cycles on first-generation VT-x, the order Adams and Agesen, ASPLOS 2006, measured)",
};
pub const SHADOW_HZ: ParamSpec = ParamSpec {
    name: "shadow_hz",
    kind: HZ,
    default: Value::Int(250),
    unit: "Hz",
    help: "without EPT: shadow-MMU exits per second of a running vCPU of a CPU-bound guest (estimate: one per guest tick, the kernel's own page-table and address-space work)",
};
pub const TLB_REFILL: ParamSpec = ParamSpec {
    name: "tlb_refill",
    kind: DURATION,
    default: Value::Int(2_500),
    unit: "ns",
    help: "without EPT (and so without VPID): the guest's TLB refill after each exit flushed it (estimate: 256 DTLB entries × a 30-cycle walk at 2.83 GHz)",
};

/// The keys an effective stack shows only when set away from their defaults (they were
/// added after stacks recorded `[cpu]` in full).
pub const QUIET: &[&str] = &[SHADOW_EXIT.name, SHADOW_HZ.name, TLB_REFILL.name];

/// The mechanism keys of `[cpu]`.
pub const PARAMS: &[ParamSpec] = &[
    EXIT,
    USER_EXIT,
    GUEST_HZ,
    VMM_HZ,
    VMM_WAKE,
    XEN_HZ,
    HOUSEKEEPING_HZ,
    HOUSEKEEPING,
    KERNEL_COMPLETE,
    SHADOW_EXIT,
    SHADOW_HZ,
    TLB_REFILL,
];

/// A system footprint of `kib` KiB: misses per kilo-instruction falling from 16 at an
/// eighth of it to 2 at all of it, IPC 0.6 (the low IPC of kernel and event-loop code).
macro_rules! system_footprint {
    ($kib:expr) => {
        Sensitivity {
            mpki: &[
                (($kib << 10) / 8, 16.0),
                (($kib << 10) / 2, 5.0),
                ($kib << 10, 2.0),
            ],
            ipc: 0.6,
            prefetch: &[],
            writes: &[],
            stores_pki: 0.0,
            burst: &[],
        }
    };
}

/// The cache footprints of system work when `[host.cache]` models shared caches. Each is
/// what one activation touches (code and data) in the last level: it takes a share of the
/// cache while it runs, and its lines stay in the banks it ran on while it comes back
/// within the bank's characteristic time (`contention.rs`'s resident footprints), so where
/// it runs (pinned or floating) matters to the programs sharing those banks. The figures are
/// ESTIMATES composed from the layers an activation passes through (no published per-wake-up
/// working set of these paths was found; Mogul and Borg, ASPLOS 1991, and Soares and Stumm,
/// FlexSC, OSDI 2010, measured that such short kernel activations displace a sizeable part
/// of a co-runner's L1 and L2, which is the effect modelled, not its size):
///
/// ```text
/// host kernel, one activation   64 KiB   entry and interrupt code, the timer and softirq paths,
///   (KERNEL_FOOTPRINT)                    blk-mq completion (blk_mq_complete_request, bio_endio,
///                                         aio_complete) and the wake-up (try_to_wake_up,
///                                         schedule): about 48 KiB of text; struct request,
///                                         bio, kiocb, run-queue and task state: about 16 KiB
/// QEMU main loop or iothread   256 KiB   the host kernel's side of its wake-up (64 KiB: ppoll,
///   (VMM_FOOTPRINT)                       hrtimer, eventfd) and QEMU's own: glib's main
///                                         context and AioContext dispatch, timer lists, the
///                                         device models' code and state (the UHCI frame
///                                         timer reads the guest's 4 KiB frame list), 192 KiB
/// Xen dom0 vCPU                288 KiB   Xen's scheduler and event-channel path (32 KiB), dom0's
///   (DOM0_FOOTPRINT)                      own kernel entry (64 KiB), qemu-dm's or the
///                                         backend's user-space loop (192 KiB, as QEMU's)
/// ```
pub const KERNEL_FOOTPRINT: Sensitivity = system_footprint!(64);
/// See [`KERNEL_FOOTPRINT`].
pub const VMM_FOOTPRINT: Sensitivity = system_footprint!(256);
/// See [`KERNEL_FOOTPRINT`].
pub const DOM0_FOOTPRINT: Sensitivity = system_footprint!(288);

/// The mechanism costs of one host, read from `[cpu]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HvCosts {
    pub exit_ns: Ns,
    pub user_exit_ns: Ns,
    pub guest_hz: u64,
    pub vmm_hz: u64,
    pub vmm_wake_ns: Ns,
    pub xen_hz: u64,
    pub housekeeping_hz: u64,
    pub housekeeping_ns: Ns,
    pub kernel_complete_ns: Ns,
    pub shadow_exit_ns: Ns,
    pub shadow_hz: u64,
    pub tlb_refill_ns: Ns,
}

impl HvCosts {
    pub fn from_values(v: &Values) -> HvCosts {
        HvCosts {
            exit_ns: v.int(EXIT.name),
            user_exit_ns: v.int(USER_EXIT.name),
            guest_hz: v.int(GUEST_HZ.name),
            vmm_hz: v.int(VMM_HZ.name),
            vmm_wake_ns: v.int(VMM_WAKE.name),
            xen_hz: v.int(XEN_HZ.name),
            housekeeping_hz: v.int(HOUSEKEEPING_HZ.name),
            housekeeping_ns: v.int(HOUSEKEEPING.name),
            kernel_complete_ns: v.int(KERNEL_COMPLETE.name),
            shadow_exit_ns: v.int(SHADOW_EXIT.name),
            shadow_hz: v.int(SHADOW_HZ.name),
            tlb_refill_ns: v.int(TLB_REFILL.name),
        }
    }

    /// The time a vCPU needs for `ns` of guest work: the guest's ticks (two exits each)
    /// and, on Xen, the credit scheduler's ticks (one exit each) interrupt it while it runs;
    /// without EPT (`ept` false) the shadow MMU's exits, and a TLB refill after every exit.
    /// Rounded up, so that work is never free.
    pub fn vcpu_time(&self, ns: Ns, xen: bool, ept: bool) -> Ns {
        let exits = self.guest_hz * 2 + if xen { self.xen_hz } else { 0 };
        let mut per_sec = exits * self.exit_ns;
        if !ept {
            per_sec += self.shadow_hz * self.shadow_exit_ns
                + (exits + self.shadow_hz) * self.tlb_refill_ns;
        }
        // In 64 bits when the product fits (a 128-bit division is a library call).
        match ns.checked_mul(per_sec) {
            Some(p) => ns + p.div_ceil(SEC),
            None => ns + (ns as u128 * per_sec as u128).div_ceil(SEC as u128) as Ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_vcpu_pays_two_exits_per_guest_tick_and_one_per_xen_tick() {
        let c = HvCosts::from_values(&Values::defaults(PARAMS));
        // 1 s of guest work: 250 ticks × 2 exits × 1.2 µs = 600 µs more.
        assert_eq!(c.vcpu_time(SEC, false, true), SEC + 600 * US);
        // Xen adds 100 credit ticks × 1.2 µs.
        assert_eq!(c.vcpu_time(SEC, true, true), SEC + 720 * US);
        assert_eq!(c.vcpu_time(0, true, true), 0);
    }

    #[test]
    fn without_ept_a_busy_vcpu_adds_the_shadow_mmus_exits_and_a_tlb_refill_per_exit() {
        let c = HvCosts::from_values(&Values::defaults(PARAMS));
        // KVM: 500 tick exits + 250 shadow exits × 4 µs, and 750 TLB refills × 2.5 µs.
        let extra = 600 * US + 250 * 4 * US + 750 * 2_500;
        assert_eq!(c.vcpu_time(SEC, false, false), SEC + extra);
    }
}
