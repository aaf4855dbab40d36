//! `cpu_profile=bzip2`: SPEC CPU2006 401.bzip2 (compression and decompression of six inputs
//! in memory), as S4 ran it.
//!
//! - CPU time: SPEC's reference machine (a 296 MHz UltraSPARC II) takes 9,650 s
//!   (SPECratio 1); a Core 2 at 2.83 GHz scores about 15–17 on it (published CPU2006 results
//!   of Q9550-class machines), so one run takes about 600 s. The default here is a tenth of
//!   a run (60 s), enough for a slowdown of a few per cent to show in many scheduler periods.
//! - Hot set: bzip2's block sort works on a 900 KB block with 4-byte suffix arrays and the
//!   frequency tables (about 4–8 MiB touched per block, Julian Seward's bzip2 manual: "-9
//!   uses 7600k for compression"); 4 MiB of it must come back into the cache after a move.
//!   It is the more memory-intensive of S4's two programs (Jaleel, "Memory characterization
//!   of workloads using instrumentation-driven simulation", 2007: bzip2's LLC footprint is
//!   several MB, gobmk's well under one).
//! - Shared-cache sensitivity (ESTIMATE, shape from the sources, values not measured here):
//!   misses per kilo-instruction against the last-level capacity it holds, 2.4 at 1 MiB,
//!   1.4 at 2 MiB, 0.7 at 4 MiB, 0.35 at its 8 MiB footprint (bzip2 -9's 7.6 MB of
//!   compression state, Seward's manual; Jaleel 2007 places bzip2's LLC working set in the
//!   several-MB range, its misses falling steadily from 1 to 8 MB rather than at one knee;
//!   Zhuravlev, Blagodurov and Fedorova, ASPLOS 2010, class it between the cache-hungry
//!   "devils" such as mcf and milc and the insensitive "turtles" such as gobmk); IPC alone
//!   1.3 on a Core 2 (an integer code with few branch mispredictions; estimate).

use super::CpuProfile;
use crate::cpu::contention::Sensitivity;
use crate::SEC;

const MIB: u64 = 1 << 20;

pub const PROFILE: CpuProfile = CpuProfile {
    name: "bzip2",
    help: "SPEC CPU2006 401.bzip2: 60 s of CPU by default, 4 MiB hot set (memory intensive)",
    work_ns: 60 * SEC,
    hot_set_bytes: 4 << 20,
    cache: Sensitivity {
        mpki: &[(MIB, 2.4), (2 * MIB, 1.4), (4 * MIB, 0.7), (8 * MIB, 0.35)],
        ipc: 1.3,
    },
};
