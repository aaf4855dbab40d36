//! `cpu_profile=gobmk`: SPEC CPU2006 445.gobmk (GNU Go analysing positions), as S4 ran it.
//!
//! - CPU time: SPEC's reference time is 10,490 s; a Core 2 at 2.83 GHz scores about 15–17
//!   on it, so one run takes about 650 s. The default here is a tenth of a run, rounded:
//!   60 s.
//! - Hot set: branchy search over small board structures and pattern tables; its last-level
//!   cache footprint is well under 1 MiB (Jaleel 2007), so 512 KiB must come back after a
//!   move: it is the less memory-intensive, less migration-sensitive of S4's programs.
//! - Shared-cache sensitivity (ESTIMATE): misses per kilo-instruction 0.8 at 256 KiB, 0.4 at
//!   512 KiB, 0.25 at 1 MiB, 0.2 at its 2 MiB footprint (Jaleel 2007: an LLC footprint well
//!   under a few MB; Zhuravlev et al., ASPLOS 2010: a "turtle", barely hurt by co-runners
//!   on a shared L2); IPC alone 1.0 on a Core 2 (branch mispredictions of its search;
//!   estimate).
//! - Stream prefetch coverage: none counted (ESTIMATE, not simulated: its misses are
//!   lookups in pattern tables and board hashes, not unit-stride streams).

use super::CpuProfile;
use crate::cpu::contention::Sensitivity;
use crate::SEC;

const KIB: u64 = 1 << 10;

pub const PROFILE: CpuProfile = CpuProfile {
    name: "gobmk",
    help: "SPEC CPU2006 445.gobmk: 60 s of CPU by default, 512 KiB hot set (compute bound)",
    work_ns: 60 * SEC,
    hot_set_bytes: 512 << 10,
    cache: Sensitivity {
        mpki: &[
            (256 * KIB, 0.8),
            (512 * KIB, 0.4),
            (1024 * KIB, 0.25),
            (2048 * KIB, 0.2),
        ],
        ipc: 1.0,
        prefetch: &[],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    },
};
