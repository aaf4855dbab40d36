//! CPU jobs: fio's `cpuio` engine and named CPU-bound programs, as workloads that ask for CPU
//! time instead of I/O ([`Step::Cpu`]). The engine runs each step on the job's thread (a
//! vCPU of its VM, or a host thread under `hypervisor = "native"`) through the CPU layer
//! (`[cpu]`), so a job's elapsed time shows the CPU it had to share.
//!
//! ```text
//! ioengine=cpuio (fio's engines/cpu.c, mode noop):
//!   every cycle of cpuchunks µs: busy cpuload % of it (Step::Cpu), then idle to the
//!   cycle's end (Step::At); until runtime (required: fio's cpuio never ends by itself)
//! cpu_profile=P (vmio's: a program with a fixed amount of work, like a SPEC CPU run):
//!   work = cpu_work | P's default; ipc alone = cpu_ipc | P's (its instruction rate on
//!   this host, which sets its miss rate: the contention model's input); Step::Cpu pieces of at most PIECE until work is done,
//!   then Done; the job's elapsed time is its run time (slowdown = elapsed / work − 1
//!   against an idle core)
//! ```
//!
//! A profile is one file under this module with its own defaults and sources, registered
//! in [`PROFILES`]: its CPU time, its hot set (the cache footprint a migration makes it
//! refill, its sensitivity to migrations, charged at [`REFILL_RATE`]), and its sensitivity
//! to a shared last-level cache and memory bus (a miss-ratio curve and its solo IPC,
//! [`crate::cpu::contention::Sensitivity`]): with `[host.cache]` in the stack, the CPU layer
//! slows it by what its co-runners take of its cache and bus; without it the program runs at
//! its nominal speed whenever it has a core.

pub mod bzip2;
pub mod gobmk;
pub mod triad;

use super::{Step, Workload};
use crate::cpu::contention::Sensitivity;
use crate::{Ns, MS, SEC, US};
use thiserror::Error;

/// Largest piece of a profile's work handed to the engine at once (the engine's cost per
/// piece is one event; the CPU model preempts inside a piece anyway).
pub const PIECE: Ns = 10 * MS;

/// Bytes per second at which a migrated program refills its hot set: a Core 2's front-side
/// bus at 1333 MT/s × 8 bytes (≈ 10.7 GB/s, Intel Q9550 datasheet), the studies' host.
pub const REFILL_RATE: u64 = 10_666_000_000;

/// A CPU-bound program: one file each, one entry in [`PROFILES`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuProfile {
    pub name: &'static str,
    pub help: &'static str,
    /// CPU time of a run on an idle core (`cpu_work` overrides it).
    pub work_ns: Ns,
    /// Cache footprint a migration makes it refill.
    pub hot_set_bytes: u64,
    /// Its misses against the last-level cache it holds, and its solo IPC: how co-runners
    /// sharing that cache and the memory bus slow it (`[host.cache]`,
    /// [`crate::cpu::contention`]).
    pub cache: Sensitivity,
}

impl CpuProfile {
    /// CPU time spent refilling the hot set after a migration.
    pub fn migration_cost_ns(&self) -> Ns {
        (self.hot_set_bytes as u128 * SEC as u128 / REFILL_RATE as u128) as Ns
    }
}

/// The programs `cpu_profile=` names.
pub const PROFILES: &[CpuProfile] = &[bzip2::PROFILE, gobmk::PROFILE, triad::PROFILE];

/// The accepted `cpu_profile` names, for error lines.
pub fn accepted() -> String {
    PROFILES
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn find(name: &str) -> Option<&'static CpuProfile> {
    PROFILES.iter().find(|p| p.name == name)
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CpuJobError {
    #[error("job '{job}' (line {line}): ioengine=cpuio needs cpuload=1..100 (fio refuses a cpuio job without it)")]
    NoLoad { job: String, line: usize },
    #[error("job '{job}' (line {line}): ioengine=cpuio runs until runtime; set runtime= (or use cpu_profile=, which ends when its work is done)")]
    NoRuntime { job: String, line: usize },
    #[error("job '{job}' (line {line}): cpu_profile '{name}' is not known; accepted: {accepted}")]
    UnknownProfile {
        job: String,
        line: usize,
        name: String,
        accepted: String,
    },
}

/// A CPU job: fio's cpuio cycles, or a profile's fixed work.
#[derive(Clone, Debug)]
pub struct CpuJob {
    /// Busy time per cycle and cycle length (cpuio); `None` for a profile.
    cycle: Option<(Ns, Ns)>,
    /// Work left (profile); cycles done (cpuio).
    left_ns: Ns,
    cycles: u64,
    busy: bool,
    migration_cost_ns: Option<Ns>,
    cache: Option<Sensitivity>,
}

impl CpuJob {
    /// fio's cpuio: `load` percent of every `chunk_ns`.
    pub fn cpuio(load: u32, chunk_ns: Ns) -> CpuJob {
        let chunk = chunk_ns.max(US);
        CpuJob {
            cycle: Some((chunk * u64::from(load.clamp(1, 100)) / 100, chunk)),
            left_ns: 0,
            cycles: 0,
            busy: false,
            migration_cost_ns: None,
            cache: None,
        }
    }

    /// A profile's run of `work_ns` (its default when `None`).
    pub fn profile(p: &CpuProfile, work_ns: Option<Ns>) -> CpuJob {
        CpuJob {
            cycle: None,
            left_ns: work_ns.unwrap_or(p.work_ns),
            cycles: 0,
            busy: false,
            migration_cost_ns: Some(p.migration_cost_ns()),
            cache: Some(p.cache),
        }
    }

    /// The same program at `ipc` instructions per cycle alone (`cpu_ipc`: a rate measured
    /// on the host instead of the profile's).
    pub fn with_ipc(mut self, ipc: f64) -> CpuJob {
        if let Some(c) = self.cache.as_mut() {
            c.ipc = ipc;
        }
        self
    }

    /// The refill cost of its thread after a migration (`None`: the scheduler's default).
    pub fn migration_cost_ns(&self) -> Option<Ns> {
        self.migration_cost_ns
    }

    /// Its program's sensitivity to a shared cache (`None`: cpuio, which touches no memory).
    pub fn sensitivity(&self) -> Option<Sensitivity> {
        self.cache
    }
}

impl Workload for CpuJob {
    fn next(&mut self, elapsed_ns: Ns) -> Step {
        if self.busy {
            return Step::Wait;
        }
        match self.cycle {
            None if self.left_ns == 0 => Step::Done,
            None => {
                let ns = self.left_ns.min(PIECE);
                self.left_ns -= ns;
                self.busy = true;
                Step::Cpu { ns, tag: 0 }
            }
            Some((busy, chunk)) => {
                let start = self.cycles * chunk;
                if elapsed_ns < start {
                    return Step::At(start);
                }
                self.cycles += 1;
                self.busy = true;
                Step::Cpu { ns: busy, tag: 0 }
            }
        }
    }
    fn depth(&self) -> u32 {
        1
    }
    fn completed(&mut self, _tag: u32) {
        self.busy = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_hands_out_its_work_in_pieces_one_at_a_time_then_ends() {
        let mut j = CpuJob::profile(&bzip2::PROFILE, Some(25 * MS));
        assert_eq!(j.next(0), Step::Cpu { ns: PIECE, tag: 0 });
        assert_eq!(j.next(0), Step::Wait);
        j.completed(0);
        assert_eq!(j.next(0), Step::Cpu { ns: PIECE, tag: 0 });
        j.completed(0);
        assert_eq!(j.next(0), Step::Cpu { ns: 5 * MS, tag: 0 });
        j.completed(0);
        assert_eq!(j.next(0), Step::Done);
    }

    #[test]
    fn cpuio_is_busy_its_load_of_every_chunk_and_idle_the_rest() {
        let mut j = CpuJob::cpuio(30, 50 * MS);
        assert_eq!(
            j.next(0),
            Step::Cpu {
                ns: 15 * MS,
                tag: 0
            }
        );
        j.completed(0);
        assert_eq!(j.next(15 * MS), Step::At(50 * MS));
        assert_eq!(
            j.next(50 * MS),
            Step::Cpu {
                ns: 15 * MS,
                tag: 0
            }
        );
    }

    #[test]
    fn cpu_ipc_replaces_the_profile_s_rate_and_keeps_its_curve() {
        let j = CpuJob::profile(&triad::PROFILE, None).with_ipc(0.3);
        let s = j.sensitivity().unwrap();
        assert_eq!(s.ipc, 0.3);
        assert_eq!(s.mpki, triad::PROFILE.cache.mpki);
        // The triad moves 32 bytes, half a line, per element at every capacity.
        assert_eq!(s.mpki_at(1.0), 500.0);
        assert_eq!(s.footprint(), (3 * 8 * (1u64 << 24)) as f64);
        assert!(CpuJob::cpuio(50, MS).with_ipc(0.3).sensitivity().is_none());
    }

    #[test]
    fn a_migration_costs_the_hot_set_over_the_refill_rate() {
        let p = CpuProfile {
            name: "x",
            help: "",
            work_ns: SEC,
            hot_set_bytes: REFILL_RATE / 1000,
            cache: gobmk::PROFILE.cache,
        };
        assert_eq!(p.migration_cost_ns(), MS);
        assert!(find("bzip2").is_some() && find("gcc").is_none());
        assert_eq!(accepted(), "bzip2, gobmk, triad");
    }
}
