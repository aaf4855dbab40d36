//! `cpu_profile=triad`: the project's memory-bound loop (`python/vmio/real/triad.c`), a
//! STREAM-like triad `a[i] = b[i] + s * c[i]` over three arrays of 2^24 doubles (128 MiB
//! each, 384 MiB in all: each array four times a 32 MiB last-level cache, McCalpin's STREAM
//! rule that the arrays exceed the caches by a factor of four), a fixed number of passes.
//! Everything here follows from that construction, except its speed alone, which is the
//! machine's (the `cpu_ipc` job key gives it as measured):
//!
//! ```text
//! unit of work   = one element of the triad (its "instruction": the contention model needs
//!                  only misses per unit and units per second, so the unit cancels)
//! misses/unit    = 32 bytes / 64-byte line = 0.5: reads of b[i] and c[i], the write of
//!                  a[i] and the read of a[i]'s line that a write-allocate cache makes first
//!                  (McCalpin, STREAM FAQ: "write allocate" traffic); no line is reused, so
//!                  the curve is flat: 500 misses per kilo-unit at any capacity
//! footprint      = 3 x 128 MiB (nothing of it is reused from one pass to the next)
//! ipc            = units per cycle alone: ESTIMATE 0.25 (one core streaming about 20 GB/s
//!                  at 2.45 GHz: 0.625 G elements/s); cpu_ipc = elements per second alone
//!                  (its own timing) / the clock is the measured figure
//! hot set        = 0: a moved triad has nothing to refill
//! prefetch       = 1 at every capacity: three ascending unit-stride streams (b and c read,
//!                  a written), which a stream prefetcher follows (the few misses per 4 KiB
//!                  page that train it left out); its lines still cross the bus, so beside
//!                  another program its slowdown is the bus's queueing alone, whatever the
//!                  coverage (its curve is flat: the contention model's S(c, W) differs
//!                  from its solo value by m · (W − W_solo) / mlp(m) either way)
//! ```
//!
//! A flat curve means its share of a shared cache never changes its own speed: only the
//! memory bus's queueing slows it; what it does to others is its insertion rate (half a
//! line per element), which takes their share of the cache.

use super::CpuProfile;
use crate::cpu::contention::Sensitivity;
use crate::SEC;

/// Elements of each array (`N` in triad.c).
pub const ELEMENTS: u64 = 1 << 24;
/// Bytes the loop reads and writes, over all three arrays.
pub const FOOTPRINT: u64 = 3 * 8 * ELEMENTS;
/// Bytes moved per element, write-allocate included.
pub const BYTES_PER_ELEMENT: u64 = 32;

pub const PROFILE: CpuProfile = CpuProfile {
    name: "triad",
    help: "the project's STREAM-like triad over 3 x 128 MiB: 10 s of CPU by default, no hot set (memory-bound)",
    work_ns: 10 * SEC,
    hot_set_bytes: 0,
    cache: Sensitivity {
        mpki: &[(FOOTPRINT, 1000.0 * BYTES_PER_ELEMENT as f64 / 64.0)],
        ipc: 0.25,
        prefetch: &[(FOOTPRINT, 1.0)],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    },
};
