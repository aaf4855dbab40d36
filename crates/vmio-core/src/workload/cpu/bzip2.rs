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
//! - Stream prefetch coverage (MEASURED by simulation, of bzip2 1.0.8 `-9` on the first
//!   2 MiB of `vmio.real.cpu.make_input(seed 1)`, the co-run check's pseudo-random words;
//!   SPEC's 401.bzip2 runs the same compressor, bzip2 1.0.3, on other inputs, so for S4 it
//!   is an estimate): Valgrind 3.19's callgrind, `--cache-sim=yes` with a 48 KiB 12-way L1D
//!   and a 16-way last level of 512 KiB to 8 MiB, `--simulate-hwpref=no` and `yes` (a
//!   sequential-stream detector per 4 KiB page, timing left out: the best case of a stream
//!   prefetcher); 666.7 M instructions; last-level misses (reads and writes) per
//!   kilo-instruction without / with the prefetcher, and the coverage 1 − with / without:
//!
//!   ```text
//!   last level   512 KiB   1 MiB   2 MiB   4 MiB   8 MiB
//!   without        7.375   4.150   2.526   0.767   0.160
//!   with           6.784   3.720   2.224   0.559   0.097
//!   coverage       0.080   0.103   0.120   0.271   0.396
//!   ```
//!
//!   The misses that a smaller share adds are mostly not sequential: they are the block
//!   sort's reads of `block` and `quadrant` at the suffixes' positions (blocksort.c,
//!   `mainGtU`, `mainQSort3`) and its scattered writes into `ptr` by bucket, where the
//!   passes a stream prefetcher follows (the input copy, the counting pass, `ptr` read in
//!   order by `generateMTFValues`, the passes over the MTF output in `sendMTFValues`) are a
//!   fixed number of misses per block: the coverage is smallest where the misses are many.
//!   The miss curve above is not the simulated one (a 2 MiB input; the simulated misses
//!   include cold ones and writes, 35-61 % of them between 512 KiB and 4 MiB).
//! - Stores (MEASURED by the same simulation): the share of its last-level misses that are
//!   writes (without the prefetcher): 35 % at
//!   512 KiB, 50 % at 1 MiB, 58 % at 2 MiB, 61 % at 4 MiB, 97 % at 8 MiB (the scattered
//!   `ptr[--ftab[j]] = i` of the radix pass, `quadrant`, the MTF output); and its stores
//!   per kilo-instruction, 122.2 over the first 200 M instructions of the trace below (and
//!   271.4 loads).
//! - Bursts (MEASURED by a trace of the same run: Valgrind 3.19's lackey,
//!   `--trace-mem=yes`, its first 200 M instructions (the first 900 kB block read, sorted
//!   and coded, and the second begun), through a simulated 48 KiB 12-way L1D and a 16-way
//!   LRU last level of 512 KiB to 4 MiB, `scripts/miss-overlap.c`): each last-level load miss opens a window of 448
//!   instructions (this machine's Zen 5 reorder buffer) and the load misses issued within it,
//!   up to 22, overlap (Karkhanis and Smith's first-order count); the burst factor is
//!   (overlap − 1) / (mpki · 448 / 1000), how much denser than their average the load
//!   misses come where they occur:
//!
//!   ```text
//!   last level            512 KiB   1 MiB   2 MiB   4 MiB
//!   load misses / ki        4.450   2.437   1.280   0.252
//!   overlap (448, 22)        8.47    5.60    4.48    2.31
//!   evenly spread            2.99    2.09    1.57    1.11
//!   burst factor             3.75    4.21    6.07   11.6
//!   ```
//!
//!   The trace leaves out the dependences and mispredicted branches that keep a miss from
//!   issuing within the window, so this is an upper bound of the overlap; with a 96-entry
//!   window (the Q9550's) the trace gives larger factors still (misses come in runs shorter
//!   than 448 instructions), so the curve understates a Core 2's overlap.
//!
//!   Beyond 4 MiB the trace cannot say (the same run, 29 Nov 2026, last levels of 8 and
//!   16 MiB): its 200 M instructions touch less than 8 MiB, and both levels miss only on
//!   first touches, 0.007 load and 0.515 store misses per kilo-instruction (1,400 loads in
//!   the run; they overlap 4.69 at a time, the first touches of its arrays coming in
//!   order), the same at 8 and 16 MiB. Those are compulsory misses of the run's start, not
//!   the steady state's density, so the curve stays flat beyond its 4 MiB point.

use super::CpuProfile;
use crate::cpu::contention::Sensitivity;
use crate::SEC;

const KIB: u64 = 1 << 10;
/// Stores per kilo-instruction (MEASURED, see the module doc).
const STORES_PKI: f64 = 122.2;
const MIB: u64 = 1 << 20;

pub const PROFILE: CpuProfile = CpuProfile {
    name: "bzip2",
    help: "SPEC CPU2006 401.bzip2: 60 s of CPU by default, 4 MiB hot set (memory intensive)",
    work_ns: 60 * SEC,
    hot_set_bytes: 4 << 20,
    cache: Sensitivity {
        mpki: &[(MIB, 2.4), (2 * MIB, 1.4), (4 * MIB, 0.7), (8 * MIB, 0.35)],
        ipc: 1.3,
        prefetch: &[
            (512 * KIB, 0.080),
            (MIB, 0.103),
            (2 * MIB, 0.120),
            (4 * MIB, 0.271),
            (8 * MIB, 0.396),
        ],
        writes: &[
            (512 * KIB, 0.35),
            (MIB, 0.50),
            (2 * MIB, 0.58),
            (4 * MIB, 0.61),
            (8 * MIB, 0.97),
        ],
        stores_pki: STORES_PKI,
        burst: &[
            (512 * KIB, 3.75),
            (MIB, 4.21),
            (2 * MIB, 6.07),
            (4 * MIB, 11.6),
        ],
    },
};
