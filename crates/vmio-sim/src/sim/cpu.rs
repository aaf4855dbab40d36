//! The CPU layer: the host's threads on the host's cores (`[cpu]`, vmio-core's `cpu`
//! module), and the work the other layers put on them.
//!
//! ```text
//! threads (built once):
//!   per VM (kvm, xen): its vCPUs (affinity vcpupin[i]; migration cost: the largest of its
//!     CPU jobs' profiles); kvm: QEMU's main loop (emulatorpin) and each disk's iothreads
//!     ([vm.disk.queue] iothreads; iothread = true is one) in disk order (iothreadpin);
//!     a disk's lane l (vdisk: queue q on lane q mod lanes) is its l-th iothread, or the
//!     main loop without one; xen: none (dom0 does the VMM's work: lane l of disk d on
//!     dom0 vCPU (d + l) mod dom0_vcpus)
//!   xen: dom0's vCPUs (dom0_pin)
//!   native: one thread per job clone (fio's cpus_allowed)
//!   cfs, on demand: a VM's thread-pool workers (util/thread-pool.c), for its NBD disks
//!     with aio = "threads" and [nbd] pool_cpu, floating over every core
//!   cfs only: a kernel thread per core, pinned there, at nice -20 (the completion softirq
//!     preempts whatever runs), and one floating housekeeping kernel thread
//!   a job clone runs on: native its own thread, its affinity fio's cpus_allowed (with
//!     cpus_allowed_policy=split, clone c alone on the set's (c mod |set|)-th CPU); in a VM
//!     one vCPU: the VM's k-th clone on vCPU (k mod vcpus), or, with cpus_allowed, on the
//!     set's (k mod |set|)-th vCPU (split: (c mod |set|)-th) — the guest's own scheduler
//!     would move a shared job among the set, vmio keeps each clone on one vCPU
//!
//! work:
//!   Step::Cpu of a job         → its thread (a vCPU: vcpu_time, the ticks' exits added)
//!   model = "dedicated": only that; the virtual disk keeps its fixed costs (guest.rs)
//!   model = "cfs", a virtual-disk request (guest.rs):
//!     guest_submit on the issuer's vCPU → vmm_submit on the VMM thread of the request's lane
//!     (iothread | main loop | dom0 vCPU; none natively) → part_submitted (the host request
//!     starts with its last part) … host side … host_finish → kernel_complete on the kernel
//!     thread of the core the volume's first device interrupts (device mod cores), once per
//!     host request → vmm_complete of each of its parts on the VMM thread → guest_complete
//!     on the issuer's vCPU (the interrupt: a busy core delays it) → guest_done
//!   an NBD disk (vmio_core::nbd, "The threads"): guest_submit + client_cpu / 2 on the
//!     job's vCPU (the client's thread) → vmm_submit + server_cpu / 2 [+ server_wake when
//!     no other NBD item is queued or running there] on the main loop → with aio=threads
//!     and pool_cpu: pool_cpu / 2 on a worker of the VM's pool (the longest idle, else a new
//!     one, floating, up to 64, else the request waits) → part_submitted … host_finish →
//!     kernel_complete → pool_cpu - pool_cpu / 2 on the same worker, which is then free →
//!     vmm_complete + the other half of server_cpu [+ server_wake] on the main loop →
//!     guest_complete + client_cpu - client_cpu / 2 on the vCPU → the hand-off delay
//!   periodic (cfs): every VM's main loop (kvm) or dom0 vCPU (xen) gets vmm_wake every
//!     1/vmm_hz; the housekeeping thread gets housekeeping every 1/housekeeping_hz; a tick
//!     that finds no other event pending ends its source (only ticks would ever follow)
//! events: CpuWake at the scheduler's next event (as DevWake for devices); a submission
//!   first advances the scheduler to now (the protocol's rule), completions due by then
//!   are handled by an immediate CpuWake; the advance is left out when the scheduler was
//!   advanced to now and nothing changed since, and a CpuWake's closing look at the next
//!   event when nothing changed since its last submission's (`Sched`: both would find
//!   what was found, so the pushes are the same)
//! ```
//!
//! Fast-forward. The periodic sources are not the host's scheduler tick, which Linux stops
//! on an idle core (NO_HZ_IDLE: kernel/time/tick-sched.c, `tick_nohz_idle_enter` and
//! `tick_nohz_idle_stop_tick` stop it when the next timer is more than a tick away): they
//! are timers of their own (QEMU's UHCI frame timer, the kernel's deferred work) and do
//! run on an idle host, each wake-up costing CPU time the report counts. So an idle
//! period keeps its ticks, but they are not stepped one by one when nothing else can
//! happen: with every source starting at 0, all of them tick at each multiple of their
//! common period P (the least common multiple of their intervals), and the state of the
//! scheduler between two such multiples repeats once it reaches a steady state. So the
//! cost of a run follows its work, not its simulated time (a write of 1000 days under
//! cfs ran at 0.3 s of wall time per simulated hour):
//!
//! ```text
//! at the first tick of a multiple t of P, every thread idle (no work, none waking):
//!   remember S(t) = the scheduler's whole state and the events processed so far
//!   with S(t - 2P), S(t - P), S(t) remembered and the first other event at T:
//!     k = (min(T, max_sim_time) - t) / P - 1   (the last period before T is stepped)
//!     if k >= 2 and the scheduler proves S(t) - S(t-P) = S(t-P) - S(t-2P) is a steady
//!     state (Cfs::period_growth: every clock, counter and vruntime grew alike in both
//!     periods, all else equal; every thread that ran stayed on its core, whose
//!     min_vruntime grew with its vruntime, past latency / 2; a cached footprint not
//!     renewed has left its bank):
//!       the scheduler's growing fields += k × their growth in one period
//!       every pending tick (and the one popped now) moves k × P later, keeping its
//!       sequence number; the events processed += k × those of one period
//! ```
//!
//! Every comparison the scheduler makes in a period is then between quantities that grew
//! alike (times by P, the vruntimes of the threads on one core and its min_vruntime by the
//! same amount, enqueue sequences by the same count), so each later period makes the same
//! decisions and the report is byte for byte the one of the run stepped tick by tick
//! (tested). A state that never settles is stepped as before.
//!
//! The issuer of a request the guest kernel sends on its own (writeback, journal commits)
//! is vCPU 0 (natively: the kernel thread of core 0).

use super::event::Event;
use super::guest::Origin;
use super::{JobBinding, Sim, SimError};
use vmio_core::cpu::cfs::{Cfs, CfsParams};
use vmio_core::cpu::contention::Contention;
use vmio_core::cpu::dedicated::Dedicated;
use vmio_core::cpu::hypervisor::{HvCosts, DOM0_FOOTPRINT, KERNEL_FOOTPRINT, VMM_FOOTPRINT};
use vmio_core::cpu::{
    nice_to_weight, CoreSet, CpuScheduler, CpuStats, ThreadId, ThreadKind, ThreadSpec, Token,
    NICE_0_WEIGHT,
};
use vmio_core::params::Values;
use vmio_core::stack::Stack;
use vmio_core::workload::JobWorkload;
use vmio_core::{Ns, SEC};

/// What a completed work item continues (packed into the scheduler's token).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    /// A job's CPU step.
    Job(usize),
    /// The guest's submission of virtual-disk request `r`.
    GuestSubmit(usize),
    /// The VMM took request `r`.
    VmmSubmit(usize),
    /// The host kernel completed request `r`.
    KernelDone(usize),
    /// The VMM completed request `r` to the guest.
    VmmComplete(usize),
    /// The guest handled the interrupt of request `r`.
    GuestComplete(usize),
    /// Periodic work with no continuation.
    Periodic,
    /// A pool worker submitted NBD request `r` to the host (pread/pwrite entered).
    PoolSubmit(usize),
    /// A pool worker returned from NBD request `r`'s I/O and signalled the main loop.
    PoolComplete(usize),
}

const ID_BITS: u32 = 56;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

impl Work {
    /// The virtual-disk request whose work it is, if any.
    #[inline]
    fn request(self) -> Option<usize> {
        match self {
            Work::GuestSubmit(r)
            | Work::VmmSubmit(r)
            | Work::KernelDone(r)
            | Work::VmmComplete(r)
            | Work::GuestComplete(r)
            | Work::PoolSubmit(r)
            | Work::PoolComplete(r) => Some(r),
            Work::Job(_) | Work::Periodic => None,
        }
    }

    fn pack(self) -> u64 {
        let (k, id) = match self {
            Work::Job(i) => (0, i),
            Work::GuestSubmit(i) => (1, i),
            Work::VmmSubmit(i) => (2, i),
            Work::KernelDone(i) => (3, i),
            Work::VmmComplete(i) => (4, i),
            Work::GuestComplete(i) => (5, i),
            Work::Periodic => (6, 0),
            Work::PoolSubmit(i) => (7, i),
            Work::PoolComplete(i) => (8, i),
        };
        (k << ID_BITS) | id as u64
    }
    fn unpack(t: u64) -> Work {
        let id = (t & ID_MASK) as usize;
        match t >> ID_BITS {
            0 => Work::Job(id),
            1 => Work::GuestSubmit(id),
            2 => Work::VmmSubmit(id),
            3 => Work::KernelDone(id),
            4 => Work::VmmComplete(id),
            5 => Work::GuestComplete(id),
            7 => Work::PoolSubmit(id),
            8 => Work::PoolComplete(id),
            _ => Work::Periodic,
        }
    }
}

/// The periodic sources (Event::CpuTick ids): VM `v` is `v`, housekeeping is `HOUSEKEEPING`.
pub(super) const HOUSEKEEPING: usize = usize::MAX >> 8;

/// A thread's label in the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThreadLabel {
    pub name: String,
    pub kind: ThreadKind,
    /// Its VM's index (vCPUs, main loop, iothreads, native job threads).
    pub vm: Option<usize>,
}

/// The host's scheduler, dispatched statically: the CPU layer calls `advance`, `submit` and
/// `next_event_ns` about 25 times per priced I/O, and CFS's quick answers (nothing due,
/// the cached earliest event) inline into their callers.
///
/// It also knows two facts that spare calls without changing any answer:
///
/// ```text
/// settled = Some(t): advanced to t (every event due by t handled), nothing changed since:
///           a submission at t skips its advance (it would find nothing due)
/// armed:    nothing changed since the last cpu_arm of this handler: the handler's closing
///           cpu_arm is skipped (the same next event, against the wake-up it armed or kept:
///           no push)
/// any change (submit, advance, add_thread, skip_periods, set_*) clears both
/// ```
struct Sched {
    kind: SchedKind,
    settled: Option<Ns>,
    armed: bool,
}

enum SchedKind {
    Cfs(Box<Cfs>),
    Dedicated(Dedicated),
}

impl Sched {
    fn get(&self) -> &dyn CpuScheduler {
        match &self.kind {
            SchedKind::Cfs(s) => &**s,
            SchedKind::Dedicated(s) => s,
        }
    }

    /// For any call that may change the scheduler outside the hot path.
    fn get_mut(&mut self) -> &mut dyn CpuScheduler {
        self.settled = None;
        self.armed = false;
        match &mut self.kind {
            SchedKind::Cfs(s) => &mut **s,
            SchedKind::Dedicated(s) => s,
        }
    }

    #[inline]
    fn advance(&mut self, now: Ns, done: &mut Vec<Token>) {
        self.armed = false;
        match &mut self.kind {
            SchedKind::Cfs(s) => s.advance(now, done),
            SchedKind::Dedicated(s) => s.advance(now, done),
        }
    }

    #[inline]
    fn submit(&mut self, now: Ns, t: ThreadId, ns: Ns, token: Token) {
        self.settled = None;
        self.armed = false;
        match &mut self.kind {
            SchedKind::Cfs(s) => s.submit(now, t, ns, token),
            SchedKind::Dedicated(s) => s.submit(now, t, ns, token),
        }
        .expect("threads are built by cpu::build")
    }

    #[inline]
    fn next_event_ns(&self) -> Option<Ns> {
        match &self.kind {
            SchedKind::Cfs(s) => s.next_event_ns(),
            SchedKind::Dedicated(s) => s.next_event_ns(),
        }
    }
}

pub(super) struct CpuLayer {
    sched: Sched,
    /// Per virtual-disk request (by its slab index): its CPU items' wait for a core so far,
    /// and when the item in flight would be done without waiting (breakdown.rs).
    waits: Vec<(Ns, Ns)>,
    /// `[cpu] model = "cfs"`: I/O and periodic work are priced on the CPU.
    pub(super) priced: bool,
    pub(super) costs: HvCosts,
    xen: bool,
    /// The host has EPT (`[host] ept`); without it vCPUs pay the shadow MMU and TLB refills.
    ept: bool,
    native: bool,
    labels: Vec<ThreadLabel>,
    /// Per VM: its vCPU threads.
    vcpus: Vec<Vec<ThreadId>>,
    /// Per VM: the thread of its VMM main loop (kvm: QEMU's; xen: a dom0 vCPU).
    main: Vec<Option<ThreadId>>,
    /// Per disk (Sim::disks order), per lane: the thread doing its VMM work.
    disk_vmm: Vec<Vec<Option<ThreadId>>>,
    /// Per core: its kernel thread (cfs).
    kernel: Vec<ThreadId>,
    housekeeping: Option<ThreadId>,
    /// Per job clone: the thread it runs on.
    pub(super) job_thread: Vec<ThreadId>,
    /// Per job clone: its vCPU's index in its VM (0 natively), for blk-mq's queue map.
    pub(super) job_vcpu: Vec<usize>,
    /// Per disk: the core its completions are handled on.
    disk_core: Vec<usize>,
    /// Per thread (by index): the NBD server's work items queued or running on it; an item
    /// that finds none wakes the main loop and pays `[nbd] server_wake` (vmio_core::nbd).
    server_items: Vec<u32>,
    /// Per VM: its thread pool's workers (spawned on demand, up to 64), the idle ones, and
    /// the NBD requests waiting for one.
    pool: Vec<Pool>,
    /// The worker an NBD request holds from its submission to its completion.
    worker_of: std::collections::HashMap<usize, ThreadId>,
    wake_at: Option<Ns>,
    /// The periodic sources' common period (every source ticks at each multiple of it;
    /// 0: no fast-forward), and the scheduler's quiescent states at the last consecutive
    /// multiples (time, state, events processed).
    period: Ns,
    anchors: std::collections::VecDeque<(Ns, Box<dyn std::any::Any>, u64)>,
    done: Vec<u64>,
    /// Completions found due while submitting, handled by an immediate CpuWake.
    deferred: Vec<u64>,
}

/// A VM's QEMU thread pool (util/thread-pool.c), for its NBD disks' requests.
#[derive(Default)]
pub(super) struct Pool {
    workers: Vec<ThreadId>,
    /// Idle workers, the longest idle first: they wait on one semaphore (`pool->sem`,
    /// util/qemu-thread-posix.c), whose post wakes one waiter, taken as the oldest (futex
    /// and glibc condition-variable waiters wake roughly in arrival order).
    idle: std::collections::VecDeque<ThreadId>,
    /// Requests submitted while every one of the 64 workers was busy, in order.
    waiting: std::collections::VecDeque<usize>,
}

fn thread(kind: ThreadKind, affinity: CoreSet, cost: Option<Ns>) -> ThreadSpec {
    ThreadSpec {
        kind,
        weight: NICE_0_WEIGHT,
        affinity,
        migration_cost_ns: cost,
    }
}

/// The CPU of `stack` for the job clones `work` (each with its binding), whose disks lie on
/// volumes `disk_volume` (per disk, `Sim::disks` order), volumes whose first devices are
/// `vol_first_dev`.
pub(super) fn build(
    stack: &Stack,
    work: &[(&JobWorkload, &JobBinding, u32)],
    vol_first_dev: &[usize],
    disk_volume: &[usize],
) -> Result<CpuLayer, SimError> {
    let cores = stack.host.cores as usize;
    let all = CoreSet::all(cores);
    let defaults;
    let (model, values) = match &stack.cpu {
        Some(c) => (c.model, &c.params),
        None => {
            defaults = Values::defaults(vmio_core::cpu::params());
            (vmio_core::cpu::DEDICATED, &defaults)
        }
    };
    let priced = model == vmio_core::cpu::CFS;
    let err = |e: vmio_core::cpu::CpuError| SimError::Job(format!("{}: {e}", stack.file));
    let kind = if priced {
        SchedKind::Cfs(Box::new(Cfs::new(
            CfsParams::from_values(values, cores).map_err(err)?,
        )))
    } else {
        SchedKind::Dedicated(Dedicated::new(cores))
    };
    let sched = Sched {
        kind,
        settled: None,
        armed: false,
    };
    let native = stack.host.hypervisor == "native";
    let xen = stack.host.hypervisor == "xen";
    let mut l = CpuLayer {
        waits: Vec::new(),
        sched,
        priced,
        costs: HvCosts::from_values(values),
        xen,
        ept: stack.host.ept,
        native,
        labels: Vec::new(),
        vcpus: Vec::new(),
        main: Vec::new(),
        disk_vmm: vec![Vec::new(); disk_volume.len()],
        kernel: Vec::new(),
        housekeeping: None,
        job_thread: Vec::new(),
        job_vcpu: Vec::new(),
        disk_core: disk_volume
            .iter()
            .map(|&v| vol_first_dev[v] % cores)
            .collect(),
        server_items: Vec::new(),
        pool: (0..stack.vms.len()).map(|_| Pool::default()).collect(),
        worker_of: std::collections::HashMap::new(),
        wake_at: None,
        period: 0,
        anchors: std::collections::VecDeque::new(),
        done: Vec::new(),
        deferred: Vec::new(),
    };
    // Where each clone runs (natively: its own thread's affinity; in a VM: a vCPU index),
    // and the migration cost its thread inherits.
    let mut next_vcpu = vec![0usize; stack.vms.len()];
    let mut placement = Vec::with_capacity(work.len());
    for (w, b, clone) in work {
        let vm = &stack.vms[b.vm];
        let width = if native { cores } else { vm.vcpus as usize };
        let allowed = match &b.spec.cpus_allowed {
            Some(s) => Some(CoreSet::parse(s, width).map_err(|m| {
                SimError::Job(format!(
                    "{}:{}: cpus_allowed: {m} ({})",
                    b.job_file,
                    b.spec.line,
                    if native {
                        "host cores: hypervisor = \"native\""
                    } else {
                        "the VM's vCPUs"
                    }
                ))
            })?),
            None => None,
        };
        let (cost, program) = match w {
            JobWorkload::Cpu(c) => (c.migration_cost_ns(), c.sensitivity()),
            _ => (None, None),
        };
        // The n-th CPU of a set, cyclically.
        let nth = |set: CoreSet, n: usize| {
            let cpus: Vec<usize> = set.cores().collect();
            cpus[n % cpus.len()]
        };
        let split = |set: CoreSet| {
            if b.spec.cpus_allowed_split {
                CoreSet::of(&[nth(set, *clone as usize)])
            } else {
                set
            }
        };
        let allowed = allowed.map(split);
        let vcpu = if native {
            0
        } else {
            let k = next_vcpu[b.vm];
            next_vcpu[b.vm] += 1;
            match allowed {
                Some(a) => nth(a, k),
                None => k % vm.vcpus as usize,
            }
        };
        placement.push((b.vm, allowed, vcpu, cost, program));
    }
    // Shared caches and the memory bus: only where threads share cores' caches (cfs).
    let contention = match (&stack.host.cache, priced) {
        (Some(t), true) => {
            l.sched.get_mut().set_contention(Contention::new(t, cores));
            true
        }
        _ => false,
    };
    let mut dom0 = Vec::new();
    if xen {
        let c = stack.cpu.as_ref().map_or(1, |c| c.dom0_vcpus.max(1));
        let pin = stack.cpu.as_ref().and_then(|c| c.dom0_pin).unwrap_or(all);
        for i in 0..c {
            dom0.push(l.add(
                thread(ThreadKind::Dom0, pin, None),
                format!("dom0/vcpu{i}"),
                None,
            )?);
        }
    }
    let mut disk = 0;
    for (v, vm) in stack.vms.iter().enumerate() {
        let mut threads = Vec::new();
        if !native {
            for i in 0..vm.vcpus as usize {
                let cost = placement
                    .iter()
                    .filter(|p| p.0 == v && p.2 == i)
                    .filter_map(|p| p.3)
                    .max();
                let pin = vm.cputune.vcpupin.get(i).copied().flatten().unwrap_or(all);
                let t = l.add(
                    thread(ThreadKind::Vcpu, pin, cost),
                    format!("{}/vcpu{i}", vm.name),
                    Some(v),
                )?;
                // The vCPU runs its first CPU program (the guest keeps a clone on one vCPU).
                let program = placement
                    .iter()
                    .filter(|p| p.0 == v && p.2 == i)
                    .find_map(|p| p.4);
                if let (true, Some(p)) = (contention, program) {
                    l.sched.get_mut().set_program(t, p);
                }
                threads.push(t);
            }
        }
        l.vcpus.push(threads);
        let main = if native {
            None
        } else if xen {
            Some(dom0[v % dom0.len()])
        } else {
            let pin = vm.cputune.emulatorpin.unwrap_or(all);
            Some(l.add(
                thread(ThreadKind::VmmMain, pin, None),
                format!("{}/main-loop", vm.name),
                Some(v),
            )?)
        };
        l.main.push(main);
        let mut iothreads = 0;
        for d in &vm.disks {
            let lanes = d.queue.iothreads.max(1) as usize;
            let mut threads = Vec::with_capacity(lanes);
            for lane in 0..lanes {
                threads.push(if native {
                    None
                } else if xen {
                    Some(dom0[(disk + lane) % dom0.len()])
                } else if d.queue.iothreads > 0 {
                    let pin = vm
                        .cputune
                        .iothreadpin
                        .get(iothreads)
                        .copied()
                        .flatten()
                        .unwrap_or(all);
                    iothreads += 1;
                    Some(l.add(
                        thread(ThreadKind::IoThread, pin, None),
                        format!("{}/iothread{iothreads}", vm.name),
                        Some(v),
                    )?)
                } else {
                    main
                });
            }
            l.disk_vmm[disk] = threads;
            disk += 1;
        }
    }
    for (k, (vm, allowed, vcpu, cost, program)) in placement.into_iter().enumerate() {
        let t = if native {
            let t = l.add(
                thread(ThreadKind::Job, allowed.unwrap_or(all), cost),
                format!("{}/job{k}", stack.vms[vm].name),
                Some(vm),
            )?;
            if let (true, Some(p)) = (contention, program) {
                l.sched.get_mut().set_program(t, p);
            }
            t
        } else {
            l.vcpus[vm][vcpu]
        };
        l.job_thread.push(t);
        l.job_vcpu.push(vcpu);
    }
    if priced {
        let nice_m20 = nice_to_weight(-20).map_err(err)?;
        for c in 0..cores {
            let t = l.add(
                ThreadSpec {
                    kind: ThreadKind::Kernel,
                    weight: nice_m20,
                    affinity: CoreSet::of(&[c]),
                    migration_cost_ns: Some(0),
                },
                format!("kernel/core{c}"),
                None,
            )?;
            l.kernel.push(t);
        }
        l.housekeeping = Some(l.add(
            thread(ThreadKind::Kernel, all, None),
            "kernel/housekeeping".into(),
            None,
        )?);
    }
    Ok(l)
}

/// The half of `ns` a request's submission takes (`first`), or the rest, its completion's.
fn half(ns: Ns, first: bool) -> Ns {
    if first {
        ns / 2
    } else {
        ns - ns / 2
    }
}

impl CpuLayer {
    /// Request `r`'s CPU items' wait for a core (0 unless priced).
    #[inline]
    pub(super) fn wait_of(&self, r: usize) -> Ns {
        if self.priced {
            self.waits.get(r).map_or(0, |w| w.0)
        } else {
            0
        }
    }

    fn add(
        &mut self,
        spec: ThreadSpec,
        name: String,
        vm: Option<usize>,
    ) -> Result<ThreadId, SimError> {
        let kind = spec.kind;
        let t = self
            .sched
            .get_mut()
            .add_thread(spec)
            .map_err(|e| SimError::Job(format!("cpu: thread {name}: {e}")))?;
        // The hypervisor's and the kernel's threads take their share of a shared cache
        // while they run, and keep their footprint in the banks they ran on between runs
        // (a no-op without [host.cache]).
        let footprint = match kind {
            ThreadKind::VmmMain | ThreadKind::IoThread | ThreadKind::Worker => Some(VMM_FOOTPRINT),
            ThreadKind::Dom0 => Some(DOM0_FOOTPRINT),
            ThreadKind::Kernel => Some(KERNEL_FOOTPRINT),
            ThreadKind::Vcpu | ThreadKind::Job => None,
        };
        if let Some(f) = footprint {
            self.sched.get_mut().set_system(t, f);
        }
        self.labels.push(ThreadLabel { name, kind, vm });
        Ok(t)
    }

    /// The time a thread needs for `ns` of its own work (a vCPU's includes its ticks' exits).
    fn time_on(&self, t: ThreadId, ns: Ns) -> Ns {
        if self.priced && self.labels[t.0 as usize].kind == ThreadKind::Vcpu {
            self.costs.vcpu_time(ns, self.xen, self.ept)
        } else {
            ns
        }
    }

    /// The report's `vmio.cpu`.
    pub(super) fn report(&self, now: Ns, stack_model: &'static str) -> CpuReport {
        CpuReport {
            model: stack_model,
            cores: self.sched.get().cores(),
            threads: self.labels.clone(),
            stats: self.sched.get().stats(now),
        }
    }
}

/// The CPU layer's figures at the end of a run.
pub struct CpuReport {
    pub model: &'static str,
    pub cores: usize,
    pub threads: Vec<ThreadLabel>,
    pub stats: CpuStats,
}

impl Sim {
    /// Put `ns` of work on thread `t`, continuing with `w` when done.
    fn cpu_submit(&mut self, now: Ns, t: ThreadId, ns: Ns, w: Work) {
        let c = &mut self.cpu;
        if c.sched.settled != Some(now) {
            let before = c.deferred.len();
            c.sched.advance(now, &mut c.deferred);
            if c.deferred.len() > before && before == 0 {
                self.q.push(now, Event::CpuWake.pack());
            }
        }
        let c = &mut self.cpu;
        let ns = c.time_on(t, ns);
        if let Some(r) = w.request() {
            // Done at now + ns unless it waits for a core (breakdown.rs).
            let waits = &mut c.waits;
            if waits.len() <= r {
                waits.resize(r + 1, (0, 0));
            }
            if matches!(w, Work::GuestSubmit(_)) {
                // Its first item: a new request in the slab's slot.
                waits[r].0 = 0;
            }
            waits[r].1 = now + ns;
        }
        c.sched.submit(now, t, ns, w.pack());
        self.cpu_arm(now);
    }

    fn cpu_arm(&mut self, now: Ns) {
        let c = &mut self.cpu;
        c.sched.armed = true;
        if let Some(t) = c.sched.next_event_ns() {
            if c.wake_at.is_none_or(|w| t < w || w < now) {
                c.wake_at = Some(t);
                self.q.push(t, Event::CpuWake.pack());
            }
        }
    }

    pub(super) fn cpu_wake(&mut self, now: Ns) {
        // `done` is read in place: the continuations below never reach a CpuWake's handler
        // (only the event loop calls it), and a submission's own completions go to
        // `deferred`.
        let c = &mut self.cpu;
        c.done.clear();
        if !c.deferred.is_empty() {
            c.done.append(&mut c.deferred);
        }
        if c.wake_at == Some(now) {
            c.wake_at = None;
        }
        c.sched.advance(now, &mut c.done);
        c.sched.settled = Some(now);
        let mut i = 0;
        while let Some(&tok) = self.cpu.done.get(i) {
            i += 1;
            self.cpu_done(now, Work::unpack(tok));
        }
        if !self.cpu.sched.armed {
            self.cpu_arm(now);
        }
    }

    fn cpu_done(&mut self, now: Ns, w: Work) {
        let mut waited = 0;
        if let Some(r) = w.request() {
            let (wait, due) = &mut self.cpu.waits[r];
            waited = now.saturating_sub(*due);
            *wait += waited;
        }
        match w {
            Work::Job(j) => self.cpu_job_done(now, j),
            Work::GuestSubmit(r) => match self.vmm_thread(r) {
                Some(t) => {
                    let ns = self.guest.vmm_submit_ns(r) + self.server_ns(t, r, true);
                    self.cpu_submit(now, t, ns, Work::VmmSubmit(r))
                }
                None => self.part_submitted(now, r),
            },
            Work::VmmSubmit(r) => {
                self.server_item_done(r);
                match self.guest.pool_cpu_ns(r) {
                    0 => self.part_submitted(now, r),
                    _ => self.pool_submit(now, r),
                }
            }
            Work::PoolSubmit(r) => self.part_submitted(now, r),
            Work::KernelDone(r) => {
                let mut at = Some(r);
                while let Some(x) = at {
                    at = self.guest.next_part(x);
                    if x != r {
                        // The host request's completion on the kernel thread is each part's.
                        self.cpu.waits[x].0 += waited;
                    }
                    match self.cpu.worker_of.get(&x) {
                        Some(&w) => {
                            let ns = half(self.guest.pool_cpu_ns(x), false);
                            self.cpu_submit(now, w, ns, Work::PoolComplete(x))
                        }
                        None => self.vmm_complete(now, x),
                    }
                }
            }
            Work::PoolComplete(r) => {
                self.pool_release(now, r);
                self.vmm_complete(now, r)
            }
            Work::VmmComplete(r) => {
                self.server_item_done(r);
                self.vreq_guest_complete(now, r)
            }
            Work::GuestComplete(r) => self.guest_complete(now, r),
            Work::Periodic => {}
        }
    }

    /// Part `x`'s completion by the VMM (the NBD server's reply), or straight to the guest
    /// without a VMM thread.
    fn vmm_complete(&mut self, now: Ns, x: usize) {
        match self.vmm_thread(x) {
            Some(t) => {
                let ns = self.guest.vmm_complete_ns(x) + self.server_ns(t, x, false);
                self.cpu_submit(now, t, ns, Work::VmmComplete(x))
            }
            None => self.vreq_guest_complete(now, x),
        }
    }

    /// The NBD server's main-loop CPU for request `r` on thread `t` beside `request`'s half
    /// (vmio_core::nbd, "The threads"): half of `server_cpu`, and `server_wake` when no other
    /// server work is queued or running on `t` (this item wakes the loop). Counts the item.
    fn server_ns(&mut self, t: ThreadId, r: usize, submit: bool) -> Ns {
        let Some((cpu, wake)) = self.guest.server_cpu_ns(r) else {
            return 0;
        };
        let i = t.0 as usize;
        if self.cpu.server_items.len() <= i {
            self.cpu.server_items.resize(i + 1, 0);
        }
        let n = &mut self.cpu.server_items[i];
        *n += 1;
        half(cpu, submit) + if *n == 1 { wake } else { 0 }
    }

    /// The NBD server's item of request `r` on its VMM thread is done.
    fn server_item_done(&mut self, r: usize) {
        if self.guest.server_cpu_ns(r).is_none() {
            return;
        }
        if let Some(t) = self.vmm_thread(r) {
            self.cpu.server_items[t.0 as usize] -= 1;
        }
    }

    /// NBD request `r` goes to its VM's thread pool (util/thread-pool.c
    /// `thread_pool_submit_aio`): an idle worker takes it, else a new one up to 64, else it
    /// waits for the first worker to finish.
    fn pool_submit(&mut self, now: Ns, r: usize) {
        let vm = self.disk_vm(r);
        let p = &mut self.cpu.pool[vm];
        let w = match p.idle.pop_front() {
            Some(w) => w,
            None if p.workers.len() < vmio_core::nbd::POOL_MAX_THREADS => {
                let n = p.workers.len();
                let all = CoreSet::all(self.cpu.sched.get().cores());
                let w = self
                    .cpu
                    .add(
                        thread(ThreadKind::Worker, all, None),
                        format!("{}/worker{n}", self.vm_names[vm]),
                        Some(vm),
                    )
                    .expect("a floating thread fits any host");
                self.cpu.pool[vm].workers.push(w);
                w
            }
            None => return p.waiting.push_back(r),
        };
        self.pool_start(now, w, r);
    }

    fn pool_start(&mut self, now: Ns, w: ThreadId, r: usize) {
        self.cpu.worker_of.insert(r, w);
        let ns = half(self.guest.pool_cpu_ns(r), true);
        self.cpu_submit(now, w, ns, Work::PoolSubmit(r));
    }

    /// Request `r`'s worker is free: it takes the first waiting request, or goes idle.
    fn pool_release(&mut self, now: Ns, r: usize) {
        let w = self
            .cpu
            .worker_of
            .remove(&r)
            .expect("a pool request holds a worker");
        let vm = self.disk_vm(r);
        match self.cpu.pool[vm].waiting.pop_front() {
            Some(next) => self.pool_start(now, w, next),
            None => self.cpu.pool[vm].idle.push_back(w),
        }
    }

    /// The VM of request `r`'s disk.
    fn disk_vm(&self, r: usize) -> usize {
        let disk = self.guest.vreqs.get_ref(r).disk;
        self.disk_base.partition_point(|&b| b <= disk) - 1
    }

    fn vmm_thread(&self, r: usize) -> Option<ThreadId> {
        let v = self.guest.vreqs.get_ref(r);
        self.cpu.disk_vmm[v.disk]
            .get(v.lane as usize)
            .copied()
            .flatten()
    }

    /// The vCPU (index in its VM) that issues a request of `origin`: a job's, or vCPU 0 for
    /// the guest kernel's own.
    pub(super) fn issuer_vcpu(&self, origin: Origin) -> usize {
        match origin {
            Origin::Job(j) => self.cpu.job_vcpu.get(j).copied().unwrap_or(0),
            Origin::Guest { .. } => 0,
        }
    }

    /// The thread that issued request `r` (a job's, or the guest kernel's vCPU 0).
    fn issuer(&self, r: usize) -> ThreadId {
        let (origin, disk) = self.guest.origin_of(r);
        match origin {
            Origin::Job(j) => self.cpu.job_thread[j],
            Origin::Guest { vm, .. } => match self.cpu.vcpus[vm as usize].first() {
                Some(&t) => t,
                None => self.cpu.kernel[self.cpu.disk_core[disk]],
            },
        }
    }

    /// `r`'s guest-side submission (cfs): on the issuer's thread (an NBD client's send).
    pub(super) fn cpu_guest_submit(&mut self, now: Ns, r: usize) {
        let t = self.issuer(r);
        let ns = self.guest.guest_submit_ns(r) + half(self.guest.client_cpu_ns(r), true);
        self.cpu_submit(now, t, ns, Work::GuestSubmit(r));
    }

    /// The host side finished `r` (cfs): the kernel's completion on its device's core.
    pub(super) fn cpu_host_finish(&mut self, now: Ns, r: usize) {
        let disk = self.guest.vreqs.get_ref(r).disk;
        let t = self.cpu.kernel[self.cpu.disk_core[disk]];
        let ns = self.cpu.costs.kernel_complete_ns;
        self.cpu_submit(now, t, ns, Work::KernelDone(r));
    }

    fn vreq_guest_complete(&mut self, now: Ns, r: usize) {
        let t = self.issuer(r);
        let ns = self.guest.guest_complete_ns(r) + half(self.guest.client_cpu_ns(r), false);
        self.cpu_submit(now, t, ns, Work::GuestComplete(r));
    }

    /// Job `j` asks for `ns` of CPU.
    pub(super) fn cpu_job(&mut self, now: Ns, j: usize, ns: Ns) {
        let t = self.cpu.job_thread[j];
        self.cpu_submit(now, t, ns, Work::Job(j));
    }

    /// Start the periodic sources (cfs): every VM's main loop, the housekeeping thread.
    pub(super) fn cpu_start_ticks(&mut self) {
        if !self.cpu.priced {
            return;
        }
        let mut periods = Vec::new();
        if !self.cpu.native && self.cpu.costs.vmm_hz > 0 {
            for v in 0..self.cpu.main.len() {
                self.q.push_background(0, Event::CpuTick(v).pack());
            }
            periods.push(tick_period(self.cpu.costs.vmm_hz));
        }
        if self.cpu.costs.housekeeping_hz > 0 {
            self.q
                .push_background(0, Event::CpuTick(HOUSEKEEPING).pack());
            periods.push(tick_period(self.cpu.costs.housekeeping_hz));
        }
        self.cpu.period = common_period(&periods).unwrap_or(0);
    }

    /// A periodic source's tick: its work, and the next tick, unless nothing but ticks is
    /// left to happen (then the run would never end).
    pub(super) fn cpu_tick(&mut self, now: Ns, id: usize) {
        if self.cpu_fast_forward(now) {
            return;
        }
        self.q.background_popped();
        if self.q.foreground() == 0 {
            return;
        }
        let c = &self.cpu;
        let (t, ns, hz) = if id == HOUSEKEEPING {
            (
                c.housekeeping,
                c.costs.housekeeping_ns,
                c.costs.housekeeping_hz,
            )
        } else {
            (c.main[id], c.costs.vmm_wake_ns, c.costs.vmm_hz)
        };
        if let Some(t) = t {
            self.cpu_submit(now, t, ns, Work::Periodic);
        }
        self.q
            .push_background(now + tick_period(hz), Event::CpuTick(id).pack());
    }

    /// At the first tick of a multiple of the sources' common period with no thread
    /// working: remember the scheduler's state; when the last three such states prove a
    /// periodic steady state and nothing but ticks happens for `k + 1` more periods, jump
    /// `k` periods ahead (module doc, "Fast-forward"). True when it jumped (the tick popped
    /// now moved with the others).
    fn cpu_fast_forward(&mut self, now: Ns) -> bool {
        let p = self.cpu.period;
        if p == 0 || !now.is_multiple_of(p) || self.cpu.anchors.back().is_some_and(|a| a.0 == now) {
            return false;
        }
        let Some(state) = self.cpu.sched.get().quiescent() else {
            self.cpu.anchors.clear();
            return false;
        };
        if self.cpu.anchors.back().is_some_and(|a| a.0 + p != now) {
            self.cpu.anchors.clear();
        }
        let processed = self.q.processed();
        self.cpu.anchors.push_back((now, state, processed));
        if self.cpu.anchors.len() > 3 {
            self.cpu.anchors.pop_front();
        }
        if self.cpu.anchors.len() < 3 || !FAST_FORWARD.with(|f| f.get()) {
            return false;
        }
        let Some(next) = self.q.earliest(|e| !is_tick(e)) else {
            return false;
        };
        // Never past the bound on simulated time: the run stops at its first event past it,
        // as stepped.
        let until = next.min(self.limits.max_sim_time_ns);
        let k = (until.saturating_sub(now) / p).saturating_sub(1);
        let (a, b) = (&self.cpu.anchors[0], &self.cpu.anchors[1]);
        let per = processed - b.2;
        if k < 2 || b.2 - a.2 != per {
            return false;
        }
        let (Some(dt), Some(events)) = (k.checked_mul(p), k.checked_mul(per)) else {
            return false;
        };
        if now.checked_add(dt).is_none() {
            return false;
        }
        let (a, b) = (&*a.1, &*b.1);
        if !self.cpu.sched.get_mut().skip_periods(a, b, k) {
            return false;
        }
        // The tick popped now counts again when it comes out k periods later.
        self.q.skip(dt, events - 1, is_tick);
        self.cpu.anchors.clear();
        true
    }
}

/// The interval of a periodic source of `hz` ticks a second.
fn tick_period(hz: u64) -> Ns {
    (SEC / hz).max(1)
}

/// The least common multiple of `periods` when at most a simulated minute (a longer one
/// would hardly ever repeat within a run); None for none.
fn common_period(periods: &[Ns]) -> Option<Ns> {
    let gcd = |mut a: Ns, mut b: Ns| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut l: Ns = *periods.first()?;
    for &x in &periods[1..] {
        l = (l / gcd(l, x)).checked_mul(x)?;
    }
    (l <= 60 * SEC).then_some(l)
}

fn is_tick(payload: u64) -> bool {
    matches!(Event::unpack(payload), Event::CpuTick(_))
}

thread_local! {
    /// Tests turn the fast-forward off to compare with the run tick by tick.
    pub(super) static FAST_FORWARD: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    /// The events the last run on this thread handled one by one (tests count them).
    pub(super) static HANDLED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
