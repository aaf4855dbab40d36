//! Host CPU scheduling: which host thread (a vCPU, the VMM's main loop, an I/O thread, a
//! kernel thread, dom0) runs on which host core, and when. A pure policy like the block
//! schedulers of [`crate::sched`]: no clock, no I/O; the simulator drives it like a device
//! (`vmio_sim::device::Device`), with the same protocol.
//!
//! ```text
//! CpuScheduler                      one host: `cores` cores, the threads added to it
//!   add_thread(ThreadSpec{kind, weight, affinity}) -> ThreadId
//!   submit(now, thread, cpu_ns, token)   append a work item to the thread's FIFO; a thread
//!                                        is runnable while its FIFO is not empty (waking it
//!                                        if it slept)
//!   next_event_ns()                      earliest time a work item ends or a core reschedules
//!   advance(now, &mut done)              run every core up to `now`; push the tokens of work
//!                                        items completed by `now`, in completion order
//!   stats(now)                           per thread CPU, wait, migrations; per core busy
//!   └── Cfs  (cfs.rs)                    Linux CFS as of 5.15: vruntime, slices, wake-up
//!                                        placement and preemption, per-core run queues,
//!                                        balancing, affinity, migration cost
//!
//! engine loop (as for devices):
//!   t = min(cpu.next_event_ns(), next engine event)
//!   cpu.advance(t, &mut done)          // completions at or before t
//!   cpu.submit(t, thread, ns, token)   // only at a time already advanced to
//! ```
//!
//! Weights are CFS's: [`nice_to_weight`] reads `sched_prio_to_weight` (kernel/sched/core.c;
//! nice 0 = 1024 = `NICE_0_LOAD`, each nice step ≈ ×1.25). Affinity is a [`CoreSet`]: libvirt's
//! `<vcpupin cpuset=…>`, `<emulatorpin>` and `<iothreadpin>` will map onto it.
//!
//! With `[host.cache]` ([`cache`]), the running programs' speeds follow from what shares a
//! last-level cache and the memory bus ([`contention`]): a scheduler that models it
//! ([`cfs::Cfs`]) stretches the remaining work of each running program by its slowdown,
//! recomputed whenever the set of programs running on the host's cores changes; the
//! system threads' footprints ([`CpuScheduler::set_system`]) stay in the caches they ran
//! on between their runs, and CFS balances across the last-level caches as Linux's LLC
//! sched domains do. Without it every thread runs at its nominal speed in one flat domain.
//!
//! Memory is bounded by the caller: one record per added thread, one per submitted work item
//! still pending (completed items are dropped as their tokens are pushed), fixed per-core
//! state; no log grows with time.

pub mod cache;
pub mod cfs;
pub mod contention;
pub mod dedicated;
pub mod hypervisor;
pub mod table;

pub use table::{CpuSpec, CpuTune, HostCpus, RawCpu, RawCpuTune, VmThreads};

use crate::Ns;
use thiserror::Error;

/// `[cpu] model = "dedicated"`: every thread has a core of its own ([`dedicated`]).
pub const DEDICATED: &str = "dedicated";
/// `[cpu] model = "cfs"`: the host's cores shared by CFS ([`cfs`]).
pub const CFS: &str = "cfs";
/// The `[cpu] model`s.
pub const MODELS: &[&str] = &[DEDICATED, CFS];

/// The `[cpu]` table's parameters: CFS's ([`cfs::PARAMS`]), then the hypervisor
/// mechanisms' ([`hypervisor::PARAMS`]).
pub fn params() -> impl Iterator<Item = &'static crate::params::ParamSpec> {
    cfs::PARAMS.iter().chain(hypervisor::PARAMS)
}

/// What the caller uses to recognise a completed work item.
pub type Token = u64;

/// Most host cores a [`CoreSet`] can name.
pub const MAX_CORES: usize = 64;

/// `NICE_0_LOAD`: the weight of a nice-0 thread (kernel/sched/sched.h, without the extra
/// `SCHED_FIXEDPOINT_SHIFT` resolution of 64-bit kernels).
pub const NICE_0_WEIGHT: u32 = 1024;

/// `sched_prio_to_weight` (kernel/sched/core.c), nice -20 first: 1024 / 1.25^nice, rounded.
const PRIO_TO_WEIGHT: [u32; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904,
    3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87,
    70, 56, 45, 36, 29, 23, 18, 15,
];

/// The CFS weight of a nice value (-20..=19).
pub fn nice_to_weight(nice: i32) -> Result<u32, CpuError> {
    if !(-20..=19).contains(&nice) {
        return Err(CpuError::BadNice(nice));
    }
    Ok(PRIO_TO_WEIGHT[(nice + 20) as usize])
}

/// A thread's identity, in the order threads were added (0, 1, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(pub u32);

/// What a host thread is (a label for stats and for the future `[cpu]` pinning tables; the
/// scheduler treats all kinds alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThreadKind {
    /// A guest's virtual CPU (KVM vCPU thread).
    Vcpu,
    /// The VMM's main loop (QEMU's main thread, emulated devices without an iothread).
    VmmMain,
    /// A QEMU iothread (virtio-blk `iothread=`).
    IoThread,
    /// A worker of QEMU's thread pool (util/thread-pool.c `worker_thread`, `aio=threads`).
    Worker,
    /// A host kernel thread (kworker, ksoftirqd, interrupt handling).
    Kernel,
    /// Xen's dom0 (its backend drivers).
    Dom0,
    /// A host process's thread (a job run natively, `hypervisor = "native"`).
    Job,
}

/// A set of host cores (bit `i` = core `i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub struct CoreSet(pub u64);

impl CoreSet {
    /// Cores `0..cores`.
    pub fn all(cores: usize) -> CoreSet {
        CoreSet(if cores >= MAX_CORES {
            u64::MAX
        } else {
            (1u64 << cores) - 1
        })
    }
    /// Exactly these cores (each below [`MAX_CORES`]; others are the caller's error and are
    /// ignored here, [`CpuScheduler::add_thread`] checks the set against the host).
    pub fn of(cores: &[usize]) -> CoreSet {
        CoreSet(
            cores
                .iter()
                .filter(|&&c| c < MAX_CORES)
                .fold(0, |m, &c| m | 1 << c),
        )
    }
    pub fn contains(self, core: usize) -> bool {
        core < MAX_CORES && self.0 >> core & 1 == 1
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// A cpuset in libvirt's syntax (`"0-3,^2,5"`: ranges and single cores, `^n` excludes)
    /// on a host of `cores` cores; the error says what is wrong and what is accepted.
    pub fn parse(text: &str, cores: usize) -> Result<CoreSet, String> {
        let top = cores.min(MAX_CORES).saturating_sub(1);
        let cap = if cores > MAX_CORES {
            format!(" (vmio models at most {MAX_CORES} cores)")
        } else {
            String::new()
        };
        let accepted =
            format!("accepted: cores 0..{top}{cap} as a libvirt cpuset such as \"0-3,^2,5\"");
        let core = |t: &str| -> Result<usize, String> {
            match t.trim().parse::<usize>() {
                Ok(c) if c < cores.min(MAX_CORES) => Ok(c),
                Ok(c) => Err(format!("core {c} is not on this host; {accepted}")),
                Err(_) => Err(format!("'{}' is not a core number; {accepted}", t.trim())),
            }
        };
        let (mut set, mut minus) = (0u64, 0u64);
        for part in text.split(',') {
            let part = part.trim();
            if let Some(ex) = part.strip_prefix('^') {
                minus |= 1 << core(ex)?;
            } else if let Some((a, b)) = part.split_once('-') {
                let (a, b) = (core(a)?, core(b)?);
                if a > b {
                    return Err(format!("range '{part}' runs backwards; {accepted}"));
                }
                set |= (a..=b).fold(0, |m, c| m | 1 << c);
            } else {
                set |= 1 << core(part)?;
            }
        }
        let s = CoreSet(set & !minus);
        if s.is_empty() {
            return Err(format!("'{text}' names no core; {accepted}"));
        }
        Ok(s)
    }

    /// The cores of the set, lowest first.
    pub fn cores(self) -> impl Iterator<Item = usize> {
        (0..MAX_CORES).filter(move |&c| self.contains(c))
    }
}

/// A thread as added to the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSpec {
    pub kind: ThreadKind,
    /// CFS load weight ([`nice_to_weight`]; 1024 for nice 0), > 0.
    pub weight: u32,
    /// Cores the thread may run on (`sched_setaffinity`, libvirt's pinning); not empty.
    pub affinity: CoreSet,
    /// CPU time it spends refilling caches after moving core (its working set); `None`: the
    /// scheduler's default.
    pub migration_cost_ns: Option<Ns>,
}

impl ThreadSpec {
    /// The rules every scheduler applies when a thread is added on a host of `cores` cores:
    /// a weight above 0, and an affinity naming at least one core and no core off the host.
    pub fn check(&self, cores: usize) -> Result<(), CpuError> {
        if self.weight == 0 {
            return Err(CpuError::ZeroWeight);
        }
        let set = self.affinity.0 & CoreSet::all(cores).0;
        if set != self.affinity.0 || set == 0 {
            return Err(CpuError::BadAffinity {
                set: self.affinity.0,
                cores,
            });
        }
        Ok(())
    }
}

/// Counters of one thread.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ThreadStats {
    pub kind: Option<ThreadKind>,
    /// Time on a core (work and cache refill after migrations).
    pub cpu_ns: Ns,
    /// Time runnable but not running (waiting in a run queue).
    pub wait_ns: Ns,
    /// Runs that started on another core than the previous run.
    pub migrations: u64,
    /// Work items completed.
    pub completed: u64,
    /// Cores the thread has run on.
    pub ran_on: CoreSet,
}

impl ThreadStats {
    /// The counters of a new thread of `kind`.
    pub fn of(kind: ThreadKind) -> ThreadStats {
        ThreadStats {
            kind: Some(kind),
            ..ThreadStats::default()
        }
    }
}

/// Counters of a host, as of a time.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CpuStats {
    /// By [`ThreadId`].
    pub threads: Vec<ThreadStats>,
    /// Per core, time with a thread running on it.
    pub core_busy_ns: Vec<Ns>,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CpuError {
    #[error("cpu: cores must be from 1 to {MAX_CORES}, got {0}")]
    BadCores(usize),
    #[error("cpu: nice must be from -20 to 19, got {0}")]
    BadNice(i32),
    #[error("cpu: thread weight must be > 0")]
    ZeroWeight,
    #[error("cpu: thread affinity must name at least one of cores 0..{cores}, got {set:#x}")]
    BadAffinity { set: u64, cores: usize },
    #[error("cpu: no thread {0} (threads added: {1})")]
    UnknownThread(u32, usize),
}

/// A host CPU scheduler (see the module doc for the protocol).
pub trait CpuScheduler {
    fn name(&self) -> &'static str;
    fn cores(&self) -> usize;
    fn add_thread(&mut self, spec: ThreadSpec) -> Result<ThreadId, CpuError>;
    /// Queue `cpu_ns` of work on `thread`; its token comes back from [`Self::advance`] once
    /// the thread has run that long. `now` must be a time already advanced to.
    fn submit(
        &mut self,
        now: Ns,
        thread: ThreadId,
        cpu_ns: Ns,
        token: Token,
    ) -> Result<(), CpuError>;
    /// The earliest time a work item completes or a core reschedules; `None` when idle.
    fn next_event_ns(&self) -> Option<Ns>;
    /// Run up to `now`; push the tokens of the work items completed by then, in order.
    fn advance(&mut self, now: Ns, done: &mut Vec<Token>);
    /// The counters as of `now` (a run or wait still open at `now` counts up to it).
    fn stats(&self, now: Ns) -> CpuStats;
    /// A copy of the whole state when no thread has work (between the periodic sources'
    /// runs), for [`Self::skip_periods`]; None otherwise, or when the scheduler cannot
    /// fast-forward.
    fn quiescent(&self) -> Option<Box<dyn std::any::Any>> {
        None
    }
    /// `a`, `b` and the current state are [`Self::quiescent`] copies one period apart: when
    /// they prove a periodic steady state (every growing field grew the same in both
    /// periods, everything else equal, and every comparison the scheduler makes in a period
    /// between quantities that grew alike), jump `k` periods ahead, as if they had run, and
    /// answer true; else change nothing and answer false.
    fn skip_periods(&mut self, _a: &dyn std::any::Any, _b: &dyn std::any::Any, _k: u64) -> bool {
        false
    }
    /// Share the host's last-level caches and memory bus among the programs that run
    /// ([`contention`]); a scheduler that gives every thread a core of its own ignores it.
    fn set_contention(&mut self, _model: contention::Contention) {}
    /// `thread` runs a program of this sensitivity (after [`Self::set_contention`]).
    fn set_program(&mut self, _thread: ThreadId, _program: contention::Sensitivity) {}
    /// `thread` is system work (the VMM's, dom0's, the host kernel's) running a program of
    /// this sensitivity whose footprint stays in the caches of the cores it ran on between
    /// its runs ([`contention`]'s resident footprints).
    fn set_system(&mut self, thread: ThreadId, program: contention::Sensitivity) {
        self.set_program(thread, program);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_0_weighs_1024_and_each_nice_step_is_a_factor_of_about_1_25() {
        assert_eq!(nice_to_weight(0), Ok(NICE_0_WEIGHT));
        for n in -20..19 {
            let r = nice_to_weight(n).unwrap() as f64 / nice_to_weight(n + 1).unwrap() as f64;
            assert!((r - 1.25).abs() < 0.06, "nice {n}: ratio {r}");
        }
        assert_eq!(nice_to_weight(20), Err(CpuError::BadNice(20)));
        assert_eq!(
            CpuError::BadNice(-21).to_string(),
            "cpu: nice must be from -20 to 19, got -21"
        );
    }

    #[test]
    fn a_core_set_holds_exactly_the_cores_named() {
        let s = CoreSet::of(&[0, 3]);
        assert!(s.contains(0) && s.contains(3) && !s.contains(1) && !s.contains(64));
        assert_eq!(CoreSet::all(3), CoreSet::of(&[0, 1, 2]));
        assert_eq!(CoreSet::all(64).0, u64::MAX);
    }

    #[test]
    fn a_libvirt_cpuset_reads_ranges_singles_and_exclusions() {
        assert_eq!(
            CoreSet::parse("0-3,^2,5", 8),
            Ok(CoreSet::of(&[0, 1, 3, 5]))
        );
        assert_eq!(CoreSet::parse(" 1 ", 2), Ok(CoreSet::of(&[1])));
        assert_eq!(
            CoreSet::parse("4", 4).unwrap_err(),
            "core 4 is not on this host; accepted: cores 0..3 as a libvirt cpuset such as \"0-3,^2,5\""
        );
        assert_eq!(
            CoreSet::parse("70", 526).unwrap_err(),
            "core 70 is not on this host; accepted: cores 0..63 (vmio models at most 64 cores) as a libvirt cpuset such as \"0-3,^2,5\""
        );
        assert!(CoreSet::parse("2-1", 4)
            .unwrap_err()
            .starts_with("range '2-1' runs backwards"));
        assert!(CoreSet::parse("1,^1", 4)
            .unwrap_err()
            .starts_with("'1,^1' names no core"));
        assert!(CoreSet::parse("x", 4)
            .unwrap_err()
            .starts_with("'x' is not a core number"));
        assert_eq!(CoreSet::of(&[0, 3]).cores().collect::<Vec<_>>(), vec![0, 3]);
    }
}
