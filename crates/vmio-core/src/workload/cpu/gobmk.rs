//! `cpu_profile=gobmk`: SPEC CPU2006 445.gobmk (GNU Go analysing positions), as S4 ran it.
//!
//! - CPU time: SPEC's reference time is 10,490 s; a Core 2 at 2.83 GHz scores about 15–17
//!   on it, so one run takes about 650 s. The default here is a tenth of a run, rounded:
//!   60 s.
//! - Hot set: branchy search over small board structures and pattern tables; its last-level
//!   cache footprint is well under 1 MiB (Jaleel 2007), so 512 KiB must come back after a
//!   move: it is the less memory-intensive, less migration-sensitive of S4's programs.

use super::CpuProfile;
use crate::SEC;

pub const PROFILE: CpuProfile = CpuProfile {
    name: "gobmk",
    help: "SPEC CPU2006 445.gobmk: 60 s of CPU by default, 512 KiB hot set (compute bound)",
    work_ns: 60 * SEC,
    hot_set_bytes: 512 << 10,
};
