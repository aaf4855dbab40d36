//! Contention between co-running programs for a shared last-level cache and the memory bus:
//! how much slower each running program goes, given which programs run on which cores of a
//! host described by `[host.cache]` ([`super::cache`]).
//!
//! A program declares its sensitivity ([`Sensitivity`], in its `cpu_profile` file): its
//! misses per kilo-instruction (MPKI) as a function of the last-level capacity it holds (a
//! miss-ratio curve, constant beyond its footprint, the last point), and its instructions
//! per cycle (IPC) when it runs alone. Its time per instruction is then
//!
//! ```text
//! T(c, W) = T_solo + (mpki(c) · (L + W) − mpki(c_solo) · (L + W_solo)) / 1000
//!   (each miss a full stall; the overlap of misses divides both terms, below)
//!   T_solo = 1 / (ipc · clock)                     (alone: the speed its work is given at)
//!   c_solo = min(footprint, bank size)            (alone: the whole bank, up to its footprint)
//!   L      = [host.cache] memory_latency           (a miss served by memory, unloaded)
//!   W      = the memory bus's queueing wait per miss (below)
//! slowdown = T(c, W) / T_solo  (1 = nominal; the CPU layer stretches its remaining work)
//! ```
//!
//! The share `c` each program holds of a bank (occupancy) follows the insertion-rate model:
//! in steady state a program's share of an LRU cache is proportional to the rate at which it
//! inserts lines, i.e. its miss rate in misses per second (Che's characteristic-time
//! approximation of LRU, Che, Tung and Wang, IEEE JSAC 2002; used for co-scheduled threads by
//! Chandra, Guo, Kim and Solihin, "Predicting inter-thread cache contention on a chip
//! multi-processor architecture", HPCA 2005, whose stack-distance models it simplifies), a
//! fixed point because the miss rate depends on the share:
//!
//! ```text
//! per bank with running programs P:
//!   Σ footprint(P) <= size:  c_i = footprint_i        (everything fits: no one slows down)
//!   else, from c_i = size · footprint_i / Σ footprint, ITERATIONS times:
//!     r_i  = mpki_i(c_i) / 1000 / T_i                 (misses per ns)
//!     c'_i = size · r_i / Σ r   (water-filled: none above its footprint, the rest
//!            shared among the others in the same proportion)
//!     c_i  = (c_i + c'_i) / 2                          (damped: converges monotonically)
//! the bus, host-wide (one memory bus; no NUMA):
//!   ρ = Σ_i mpki_i(c_i) / 1000 / T_i · LINE / memory_bandwidth     (at most RHO_MAX)
//!   W = (LINE / memory_bandwidth) · ρ / (1 − ρ)        (M/M/1 queueing wait of one line)
//! ```
//!
//! Both are solved together: each iteration finds W for the current shares by bisection
//! (W = g(W), g = wait ∘ ρ ∘ T, falls as W grows, so the root in [0, g(0)] is unique; plain
//! iteration of W = g(W) can flip between two values), then updates the shares; a program
//! alone on its bank with an idle bus has slowdown exactly 1.
//!
//! **Resident system footprints.** The VMM's threads (QEMU's main loop and iothreads, Xen's
//! dom0) and the host kernel's threads run in short activations (a timer wake-up, one
//! request's completion) between which their code and data stay in the last-level cache as
//! long as nothing evicts them: in Che's approximation a line stays cached while it is
//! reused within the bank's characteristic time T_C (the time a line lives in the cache
//! untouched, the same for every line of an LRU cache). So a system thread that ran on a
//! core of bank `b` within the last T_C(b) holds its footprint there even while it sleeps,
//! and the programs of that bank share what is left; that is how the VMM's work on a busy
//! bank evicts what the guests had cached, and why its placement matters (pinned to a core
//! whose bank runs no guest it takes nothing from them; floating, it takes its footprint in
//! every bank it visits). The CPU layer ([`super::cfs`]) says which footprints are resident
//! where (`resident[b]`: a bit per program index); a program running on a core of the bank
//! is counted as running, not as resident:
//!
//! ```text
//! size_b  = bank size − Σ footprint(p) over p resident in b and not running on b
//!           (at least one line); the water-filling above shares size_b
//! T_C(b)  = Σ c_i / (Σ r_i · LINE)   over the contended programs of b   (Little's law:
//!           bytes held / bytes inserted per ns); ∞ when everything fits (nothing evicted)
//! ```
//!
//! The system threads' own re-insertions (when a footprint was evicted between two of its
//! activations) are left out of the bus's load: a few hundred KiB per activation at most,
//! against the programs' tens to hundreds of MB/s.
//!
//! **Memory-level parallelism.** An out-of-order core does not stall a full latency on
//! each miss: a miss blocks retirement only once it reaches the head of the reorder buffer,
//! and every independent miss issued within the ROB's window of instructions behind it is
//! served under the same stall (Karkhanis and Smith, "A first-order superscalar processor
//! model", ISCA 2004: long data-cache misses that overlap cost together about what one
//! isolated miss costs; Eyerman, Eeckhout, Karkhanis and Smith, "A mechanistic
//! performance model for superscalar out-of-order processors", ACM TOCS 2009, whose
//! long-latency term divides the misses by their overlap). The overlap is memory-level
//! parallelism as Chou, Fahs and Abraham define it ("Microarchitecture optimizations for
//! exploiting memory-level parallelism", ISCA 2004: the average number of long-latency
//! misses outstanding while at least one is), bounded by the misses the core can keep
//! outstanding at all (its L1 fill buffers or miss address buffers, the MSHRs of Kroft,
//! ISCA 1981). With a program's misses spread evenly over its instructions (the
//! first-order model's assumption), a stall's window of `rob` instructions holds the first
//! miss and `mpki · rob / 1000` more:
//!
//! ```text
//! mlp(m)  = 1                                         rob_entries = 0 (the default without
//!                                                      a profile: every miss waits alone)
//!         = min(1 + m · rob_entries / 1000, miss_buffers)   (miss_buffers 0: no bound)
//! T(c, W) = T_solo + (mpki(c) · (L + W) / mlp(mpki(c))
//!                     − mpki(c_solo) · (L + W_solo) / mlp(mpki(c_solo))) / 1000
//! ```
//!
//! So the more often a program misses, the more of its misses overlap: a program that
//! loses its cache share pays less than the full latency for each extra miss. The misses
//! are taken as independent (no pointer chasing: a chase's next address comes from the
//! miss itself, so its MLP is 1 whatever the window; the curves of `cpu_profile` name no
//! such dependence). The programs' IPC, measured with their own misses, already holds
//! their solo misses' cost; only the difference is charged.
//!
//! **Hardware prefetching.** The cores' stream prefetchers (Intel's L2 streamer since the
//! Core microarchitecture, AMD's L2 stream prefetcher: Intel 64 and IA-32 Architectures
//! Optimization Reference Manual, "Hardware Prefetching for Second-Level Cache"; AMD
//! Software Optimization Guide for the Zen family, "Hardware Prefetching") watch the misses
//! of each 4 KiB page and, once a few arrive in ascending or descending order, fetch the
//! next lines ahead of the program. Its coverage is the share of the misses it fetches
//! before they are asked for (Srinivasan, Davidson and Tyson, "A prefetch taxonomy", IEEE
//! Trans. Computers 53(2), 2004, with its accuracy). Srinath, Mutlu, Kim and Patt
//! ("Feedback directed prefetching", HPCA 2007) measure a stream prefetcher's accuracy and
//! lateness (a prefetch still in flight when the demand arrives) and show that its fetches
//! take memory bandwidth like demand misses: a prefetcher does not make a line cheaper to
//! move, it moves it earlier. A program declares its coverage as a curve over the capacity it holds,
//! like its misses (`Sensitivity::prefetch`, with its source in its `cpu_profile` file:
//! which of the misses a smaller share adds are sequential depends on the program); holding
//! `c`, with `m = mpki(c)` and `f = f(c)`:
//!
//! ```text
//! demand   = (1 − f) · m                  misses the prefetcher does not cover
//! S(c, W)  = demand · (L + W) / mlp(demand)   each waits the latency and the bus's queue,
//!                                          overlapping with the other demand misses only
//!          + f · m · W / mlp(m)            a covered line was fetched about one unloaded
//!                                          latency ahead: it arrives W late when the bus
//!                                          queues (a late prefetch), overlapping with the
//!                                          window's misses
//! T(c, W)  = T_solo + (S(c, W) − S(c_solo, W_solo)) / 1000
//! ρ        = Σ_i mpki_i(c_i) / 1000 / T_i · LINE / memory_bandwidth   (all lines: covered
//!            ones take the bus too, so a prefetcher hides latency, not bandwidth)
//! ```
//!
//! With no coverage (`f = 0`) this is the model above, term for term. A covered miss costs nothing on an
//! idle bus and its queueing wait on a busy one, so a program whose misses are all covered
//! (a unit-stride stream, `f = 1`) is slowed by the bus alone. The coverage is measured by
//! running the program under a cache simulator with and without a stream prefetcher
//! (Valgrind's callgrind, `--simulate-hwpref`: a per-4-KiB-page sequential-stream detector
//! that fetches ahead into the last level, timing left out, so the best case a stream
//! prefetcher reaches): f(c) = 1 − misses with it / misses without, at last level c. Useless prefetches (accuracy
//! below 1) would add traffic and pollution; they are left out.
//!
//! **Bursts.** The window above takes a program's misses as evenly spread over its
//! instructions. They are not: a program misses in phases (bzip2's block sort misses on
//! nearly every pass of its partition loops, its Huffman coding hardly at all), and within a
//! phase a window of `rob` instructions holds as many more misses as the phase is denser
//! than the average. Karkhanis and Smith (ISCA 2004) take the overlap from the program's
//! trace: each miss opens a window of `rob` instructions, and the misses issued within it
//! (up to the miss buffers) are served under the same stall. A program declares how much
//! denser than its average its misses come, as a curve over the capacity it holds
//! (`Sensitivity::burst`, the factor that makes the window's formula give the overlap its
//! trace gives, measured by a trace-driven simulation of its misses: an upper bound, since
//! the trace leaves out the dependences and mispredicted branches that keep a miss from
//! issuing within the window), and every `mlp` above takes its misses at that density:
//!
//! ```text
//! mlp(m) = min(1 + burst(c) · m · rob_entries / 1000, miss_buffers)
//! ```
//!
//! Without a curve `burst = 1`: the evenly spread window, term for term.
//!
//! **The store buffer.** A store does not wait for its line: it retires into the core's
//! store buffer (Intel's store buffer, AMD's store queue), which writes the stores into the
//! L1 in program order (x86's total store order) as their lines arrive. A store that misses
//! the last level holds the head of the buffer for the memory latency while younger stores
//! retire behind it, and the core stalls only once the buffer is full and the next store
//! cannot retire; the read-for-ownership of each store is sent when its address is known
//! (store prefetching), so the misses of the stores in the buffer overlap (Chou, Spracklen
//! and Abraham, "Store memory-level parallelism optimizations for commercial
//! applications", MICRO 2005: store misses cost an out-of-order core only through a full
//! store queue, and store prefetching lets them overlap). The buffer is then a second
//! window, counted in stores: a program issuing `stores_pki` stores per kilo-instruction
//! runs `sb · 1000 / stores_pki` instructions past a missing store before it stalls. A program declares the share of its last-level misses
//! that are stores (`Sensitivity::writes`, a curve over the capacity it holds, measured by
//! the same cache simulation as its coverage) and its stores per kilo-instruction; with
//! `sb = [host.cache] store_buffer`, `ws = writes(c)`:
//!
//! ```text
//! loads    = (1 − ws) · demand               load misses: the reorder buffer's window
//! stores   = ws · demand                     store misses (their reads for ownership)
//! window_s = sb · 1000 / stores_pki          instructions retired behind a missing store
//! fill     = window_s · T_solo               the time they take at the program's pace
//! mlp_s    = min(1 + stores · window_s / 1000, miss_buffers)
//! S(c, W)  = loads · (L + W) / mlp(loads)
//!          + stores · max(0, L + W − fill) / mlp_s   a group of overlapping store misses
//!                                            stalls the core for what the buffer's fill
//!                                            leaves of the latency
//!          + f · m · W / mlp(m)
//! ```
//!
//! With `store_buffer = 0`, or a program that declares no writes or no stores, `ws = 0`
//! and `S` is the one above term for term. The fill is taken at the program's nominal pace:
//! load stalls while the buffer fills lengthen it, so a store's stall is if anything
//! overstated.
//!
//! **A victim last level** (`[host.cache] inclusion = "victim"`, [`super::cache`]'s module
//! doc for the sources). Everything above takes the last level as inclusive: a program's
//! share `c` of it is all it holds, the copies of its L1 and L2 lines included, and a
//! co-runner's insertions evict those lines from the L1 and L2 too (Jaleel et al.'s
//! inclusion victims, MICRO 2010). AMD's L3 is a victim cache of the L2s: a line from memory
//! goes to the core's L1 and L2 only, enters the L3 when the L2 evicts it, and leaves the L3
//! for the L2 again when it hits there. What a core's private levels hold is then its own
//! (no co-runner's insertion reaches them), and it adds to the L3: a program holds its
//! private levels and its share of the L3 (an exclusive hierarchy with LRU at both levels
//! keeps the same lines as one LRU cache of their summed size, so its miss curve, measured
//! against one level, reads the sum). The share is the same insertion-rate fixed point:
//! in steady state a program's lines leave the L3 by hits (back to its L2) and by
//! evictions, and its evictions equal its L3 misses (what its L2 evictions put in, less
//! what its hits take out), so with evictions spread over the lines each program's share is
//! in proportion to its misses, as above. With `P` the core's private bytes (the largest of
//! its levels below the last, each inclusive of the ones above it, as Zen's L2 is of its
//! L1; split evenly among the cores of a shared one):
//!
//! ```text
//! inclusive  P = 0: the model above, term for term
//! victim     held_i  = P_i + c_i                  (mpki, coverage, writes, bursts at held_i)
//!            held alone = min(footprint, bank size + P)
//!            cap_i   = max(0, footprint_i − P_i)  (the water-filling's cap on c_i; the bank
//!                                                  is contended when Σ cap_i > size)
//!            r_i     = mpki_i(held_i) / 1000 / T_i        (the share's and the bus's rates)
//! ```
//!
//! So a program whose footprint fits its private levels takes no L3 and loses nothing to a
//! co-runner however fast it streams (only the bus's queueing is left), and one that
//! overflows them loses only the part in the L3.
//!
//! **The last level's replacement** (`[host.cache] replacement`, [`super::cache`]'s module
//! doc). Everything above takes the last level as LRU: each program's share follows its
//! insertion rate, so a stream (a program whose lines never come back, the triad) takes
//! lines from a reused working set in proportion to how fast it inserts, and a set whose
//! lines come back later than the stream sweeps the cache (Che's T_C) is lost. Re-reference
//! interval prediction (Jaleel, Theobald, Steely and Emer, ISCA 2010; the dynamic insertion
//! it generalises: Qureshi, Jaleel, Patt, Steely and Emer, "Adaptive insertion policies for
//! high performance caching", ISCA 2007) protects lines that were reused against lines that
//! were not:
//!
//! ```text
//! per line: RRPV in 0 ..= 2^bits − 1 ("near" .. "distant")
//! hit:      RRPV = 0
//! miss:     while no line of the set has RRPV = 2^bits − 1: every line's RRPV += 1  (aging)
//!           evict that line; insert the new one at 2^bits − 2 ("long") with probability
//!           ε = rrip_long, else at 2^bits − 1 ("distant")
//! ```
//!
//! A stream's lines are never hit, so they sit at long or distant and are evicted before any
//! line that was reused. In a set holding `h` reused lines of `W`, the other `W − h` ways hold
//! lines inserted and not (yet) reused; each insertion evicts one of those at distant, an
//! insertion at long removes one from the distant pool, and the set ages when the pool is
//! empty: once every `(W − h) / ε` insertions into the set. A reused line (RRPV 0) is evicted
//! after `2^bits − 1` agings without a hit, so its lifetime, summed over the bank's sets
//! (`W` cancels: `sets · (W − h) · LINE` is the bank's bytes not held by reused lines), is
//!
//! ```text
//! T_P = (2^bits − 1) / ε · (size − Σ_i c_i) / (LINE · Λ)
//!   Λ   = Σ_i r_i, the bank's insertions (its programs' misses) per ns
//!   c_i = the bytes program i reuses within T_P (its reused footprint), at most its cap
//! ```
//!
//! where LRU's characteristic time is `size / (LINE · Λ)`: RRIP keeps a reused line
//! `(2^bits − 1) / ε` times as long against the lines that are not reused (96 times with
//! Jaleel et al.'s 2 bits and ε = 1/32; 3 times for static RRIP, ε = 1). What a program reuses
//! within a window follows from its miss curve (Xiang, Ding, Luo and Bao, "All-window
//! profiling and composable models of cache sharing", PPoPP 2011: the footprint's growth in
//! a window is the miss rate at the capacity it has reached): of its misses at a capacity
//! `c`, those beyond its curve's last point (`mpki_∞`, lines it never touches again) are
//! inserted and evicted as a stream's, the rest are lines it comes back to, so
//!
//! ```text
//! I(x)    = ∫_0^x 1000 / (LINE · (mpki(c) − mpki_∞)) dc   instructions to reuse x bytes
//!           (mpki constant below the curve's first point: linear there; a flat curve,
//!           a stream, reuses nothing: I = ∞)
//! fp(T)   = I⁻¹(T / T_i)                                   bytes reused in a window of T ns
//! c_i(T)  = clamp(fp_i(T) − P_i, 0, cap_i)                 (P_i: a victim last level's
//!                                                           private bytes, as above)
//! T_P     = the root of T = (2^bits − 1) / ε · (size − Σ_i c_i(T)) / (LINE · Λ)
//!           (the right side falls as T grows: one root, found by bisection)
//! ```
//!
//! so a stream beside a reused set takes only the lines the set does not come back to
//! within T_P, however fast it inserts. A program alone on its bank keeps what its curve was
//! measured with (min(footprint, size), as under LRU): its curve already holds what the
//! policy does to its own lines. `replacement = "lru"` (the default) is the model above,
//! term for term.
//!
//! Cost: the result depends only on which program runs on which core, so it is kept per
//! such assignment ([`Contention::slowdowns`] memoises it); a run of identical programs
//! solves a handful of assignments once each.

use super::cache::{CacheTopology, Inclusion, Replacement};
use std::collections::HashMap;

/// Bytes of a cache line (x86).
pub const LINE: f64 = 64.0;
/// Bisection steps of the bus wait's fixed point per iteration (2^-48 of its bracket).
const BISECTIONS: usize = 48;

/// Damped iterations of the fixed point (the damping halves the error each step).
pub const ITERATIONS: usize = 40;
/// The bus's utilisation at most (a saturated bus: the queue is then 19 line times).
pub const RHO_MAX: f64 = 0.95;
/// Slowdown 1.0 in the CPU layer's fixed point (2^16).
pub const ONE_Q16: u32 = 1 << 16;

/// How a program's speed depends on the cache it holds (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sensitivity {
    /// (capacity in bytes, misses per kilo-instruction), capacities ascending; constant
    /// beyond the last point (its footprint) and below the first.
    pub mpki: &'static [(u64, f64)],
    /// Instructions per cycle alone with its footprint cached.
    pub ipc: f64,
    /// (capacity in bytes, share of its last-level misses that the cores' stream prefetcher
    /// fetches ahead of use, 0 to 1: its coverage), capacities ascending, constant beyond
    /// the ends; empty: none. Covered misses still take the bus and wait its queue, but not
    /// the memory latency (see the module doc).
    pub prefetch: &'static [(u64, f64)],
    /// (capacity in bytes, share of its last-level misses that are stores, 0 to 1: the
    /// read-for-ownership of a store that misses), interpolated as [`Self::mpki`]; empty:
    /// every miss is a load's (see the module doc's store buffer).
    pub writes: &'static [(u64, f64)],
    /// Stores per kilo-instruction: how fast its stores fill the store buffer behind a
    /// missing one (0: its store misses, if any, are charged as loads').
    pub stores_pki: f64,
    /// (capacity in bytes, how many times denser its misses are where they occur than on
    /// average, at least 1), interpolated as [`Self::mpki`]; empty: 1, misses evenly
    /// spread over its instructions (see the module doc's bursts).
    pub burst: &'static [(u64, f64)],
}

impl Sensitivity {
    /// Bytes of last-level cache beyond which it misses no less (the curve's last point).
    pub fn footprint(&self) -> f64 {
        self.mpki.last().map_or(0.0, |p| p.0 as f64)
    }

    /// MPKI holding `bytes` of cache: linear in log2(capacity) between the curve's points.
    pub fn mpki_at(&self, bytes: f64) -> f64 {
        curve_at(self.mpki, bytes)
    }

    /// The prefetcher's coverage holding `bytes` of cache (0 to 1), interpolated as
    /// [`Self::mpki_at`].
    pub fn coverage_at(&self, bytes: f64) -> f64 {
        curve_at(self.prefetch, bytes).clamp(0.0, 1.0)
    }

    /// How many times denser than on average its misses come holding `bytes` of cache (1
    /// without a curve).
    pub fn burst_at(&self, bytes: f64) -> f64 {
        if self.burst.is_empty() {
            return 1.0;
        }
        curve_at(self.burst, bytes).max(1.0)
    }

    /// The share of its misses that are stores holding `bytes` of cache (0 to 1),
    /// interpolated as [`Self::mpki_at`].
    pub fn write_share_at(&self, bytes: f64) -> f64 {
        curve_at(self.writes, bytes).clamp(0.0, 1.0)
    }
}

/// A curve of (capacity, value) points at `bytes`: linear in log2(capacity) between its
/// points, constant beyond its ends, 0 when empty.
fn curve_at(pts: &[(u64, f64)], bytes: f64) -> f64 {
    let Some(first) = pts.first() else { return 0.0 };
    if bytes <= first.0 as f64 {
        return first.1;
    }
    for w in pts.windows(2) {
        let (a, b) = (w[0], w[1]);
        if bytes <= b.0 as f64 {
            let t = (bytes / a.0 as f64).log2() / (b.0 as f64 / a.0 as f64).log2();
            return a.1 + (b.1 - a.1) * t;
        }
    }
    pts[pts.len() - 1].1
}

/// The contention model of one host: its banks and bus, and the programs the CPU layer
/// registered (by index).
#[derive(Clone, Debug)]
pub struct Contention {
    /// Per core: its last-level bank.
    bank_of: Vec<Option<usize>>,
    bank_size: Vec<f64>,
    /// Per core: the bytes of its private levels below the last that a victim last level
    /// adds to what its program holds (0 under an inclusive one: the model before).
    below: Vec<f64>,
    /// Bytes per ns.
    bandwidth: f64,
    latency_ns: f64,
    /// Cycles per ns.
    ghz: f64,
    /// Reorder-buffer entries (0: no overlap) and outstanding misses at most (0: no bound).
    rob: f64,
    miss_buffers: f64,
    /// Store-buffer entries (0: a store's miss is charged as a load's).
    store_buffer: f64,
    /// Which line the last level evicts.
    replacement: Replacement,
    programs: Vec<Sensitivity>,
    /// Per (running, resident) assignment: the slowdowns (2^16 = ×1) and each bank's T_C.
    memo: HashMap<Vec<u8>, (Vec<u32>, Vec<f64>)>,
}

/// The solution of one assignment: per core its program's slowdown (×1 = nominal), per bank
/// its characteristic time T_C in ns (`f64::INFINITY` when nothing is evicted).
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    pub slow: Vec<f64>,
    pub tc_ns: Vec<f64>,
}

/// No program on a core (idle, or a thread without a curve).
pub const NONE: u8 = u8::MAX;

impl Contention {
    pub fn new(t: &CacheTopology, cores: usize) -> Contention {
        let bank_of = t.last_level(cores);
        let below = (0..cores)
            .map(|c| match (t.inclusion, bank_of[c]) {
                (Inclusion::Victim, Some(last)) => private_below(t, c, t.banks[last].level),
                _ => 0.0,
            })
            .collect();
        Contention {
            bank_of,
            bank_size: t.banks.iter().map(|b| b.size_bytes as f64).collect(),
            below,
            bandwidth: t.memory_bandwidth as f64 / 1e9,
            latency_ns: t.memory_latency_ns as f64,
            ghz: t.clock_mhz as f64 / 1e3,
            rob: t.rob_entries as f64,
            miss_buffers: t.miss_buffers as f64,
            store_buffer: t.store_buffer as f64,
            replacement: t.replacement,
            programs: Vec::new(),
            memo: HashMap::new(),
        }
    }

    /// Per core: the index of its last-level bank (`None`: it shares no cache).
    pub fn bank_of(&self, core: usize) -> Option<usize> {
        self.bank_of.get(core).copied().flatten()
    }

    /// The number of banks.
    pub fn banks(&self) -> usize {
        self.bank_size.len()
    }

    /// Register a program; its index is what [`Self::slowdowns`] reads (at most 254; a
    /// resident footprint can only name the first 64).
    pub fn program(&mut self, s: Sensitivity) -> u8 {
        if let Some(i) = self.programs.iter().position(|p| *p == s) {
            return i as u8;
        }
        self.programs.push(s);
        (self.programs.len() - 1).min(NONE as usize - 1) as u8
    }

    /// The programs' solo time per instruction (ns).
    fn t_solo(&self, p: &Sensitivity) -> f64 {
        1.0 / (p.ipc.max(1e-6) * self.ghz)
    }

    /// Misses outstanding together at `mpki` misses per kilo-instruction (the module doc's
    /// mlp(m)): 1 without a reorder-buffer size.
    pub fn mlp(&self, mpki: f64) -> f64 {
        self.mlp_in(mpki, self.rob)
    }

    /// Misses outstanding together at `mpki` in a window of `window` instructions, up to the
    /// miss buffers: 1 for an empty window.
    fn mlp_in(&self, mpki: f64, window: f64) -> f64 {
        if window <= 0.0 {
            return 1.0;
        }
        let w = 1.0 + mpki.max(0.0) * window / 1000.0;
        if self.miss_buffers > 0.0 {
            w.min(self.miss_buffers.max(1.0))
        } else {
            w
        }
    }

    /// Stall ns per kilo-instruction of `p` holding `bytes` of its bank, with a bus wait of
    /// `w` ns per line (the module doc's S(c, W)): the misses its prefetcher does not cover
    /// wait the latency and the queue, overlapping among themselves; the covered ones wait
    /// the queue only (late prefetches), overlapping with all the window's misses.
    pub fn stall(&self, p: &Sensitivity, bytes: f64, w: f64) -> f64 {
        let (mpki, f) = (p.mpki_at(bytes), p.coverage_at(bytes));
        let demand = (1.0 - f) * mpki;
        let ws = if self.store_buffer > 0.0 && p.stores_pki > 0.0 {
            p.write_share_at(bytes)
        } else {
            0.0
        };
        let (loads, stores) = ((1.0 - ws) * demand, ws * demand);
        // Misses overlap at their density where they occur.
        let dense = p.burst_at(bytes);
        let mut s = 0.0;
        if loads > 0.0 {
            s += loads * (self.latency_ns + w) / self.mlp(loads * dense);
        }
        if stores > 0.0 {
            // The store buffer's window: instructions retired behind a missing store until
            // the buffer is full, and the time they take at the program's own pace.
            let window = self.store_buffer / p.stores_pki * 1000.0;
            let fill = window * self.t_solo(p);
            let left = (self.latency_ns + w - fill).max(0.0);
            s += stores * left / self.mlp_in(stores * dense, window);
        }
        if f > 0.0 && mpki > 0.0 {
            s += f * mpki * w / self.mlp(mpki * dense);
        }
        s
    }

    /// The queueing wait per miss at utilisation `rho`.
    fn wait(&self, rho: f64) -> f64 {
        let rho = rho.clamp(0.0, RHO_MAX);
        LINE / self.bandwidth * rho / (1.0 - rho)
    }

    /// A program's solo state on bank `b` (None: no shared cache) with `below` bytes of its
    /// own beneath it (a victim last level's private levels): what it holds, and W.
    fn solo(&self, p: &Sensitivity, b: Option<usize>, below: f64) -> (f64, f64) {
        let c = b.map_or(p.footprint(), |b| {
            p.footprint().min(self.bank_size[b] + below)
        });
        let rho = p.mpki_at(c) / 1000.0 / self.t_solo(p) * LINE / self.bandwidth;
        (c, self.wait(rho))
    }

    /// Slowdowns (×1 = nominal) of the programs `running[core]` (a program index or
    /// [`NONE`]), per core; 1 where no program runs.
    pub fn solve(&self, running: &[u8]) -> Vec<f64> {
        self.solve_with(running, &[]).slow
    }

    /// Bank `b`'s size less the footprints resident there (`resident[b]`, a bit per program
    /// index) that do not run on one of its cores (see the module doc).
    fn free_size(&self, b: usize, running: &[u8], resident: &[u64]) -> f64 {
        let mut mask = resident.get(b).copied().unwrap_or(0);
        if mask == 0 {
            return self.bank_size[b];
        }
        for (c, &p) in running.iter().enumerate() {
            if (p as usize) < 64 && self.bank_of(c) == Some(b) {
                mask &= !(1u64 << p);
            }
        }
        let held: f64 = (0..self.programs.len().min(64))
            .filter(|&p| mask >> p & 1 == 1)
            .map(|p| self.programs[p].footprint())
            .sum();
        (self.bank_size[b] - held).max(LINE)
    }

    /// [`Self::solve`] with the system footprints `resident` in each bank (a bit per program
    /// index, per bank), and each bank's characteristic time.
    pub fn solve_with(&self, running: &[u8], resident: &[u64]) -> Solution {
        let n = running.len().min(self.bank_of.len());
        let prog = |c: usize| self.programs.get(running[c] as usize);
        let active: Vec<usize> = (0..n).filter(|&c| prog(c).is_some()).collect();
        let mut out = vec![1.0; running.len()];
        let mut tc_ns = vec![f64::INFINITY; self.bank_size.len()];
        if active.is_empty() {
            return Solution { slow: out, tc_ns };
        }
        let size: Vec<f64> = (0..self.bank_size.len())
            .map(|b| self.free_size(b, running, resident))
            .collect();
        let p: Vec<&Sensitivity> = active.iter().map(|&c| prog(c).expect("active")).collect();
        let bank: Vec<Option<usize>> = active.iter().map(|&c| self.bank_of[c]).collect();
        // What each holds below the last level (a victim last level's private levels), and
        // what it can use of the last level: its footprint less that.
        let below: Vec<f64> = active.iter().map(|&c| self.below[c]).collect();
        let want: Vec<f64> = (0..active.len())
            .map(|i| (p[i].footprint() - below[i]).max(0.0))
            .collect();
        let solo: Vec<(f64, f64)> = (0..active.len())
            .map(|i| self.solo(p[i], bank[i], below[i]))
            .collect();
        let t0: Vec<f64> = p.iter().map(|p| self.t_solo(p)).collect();
        // Initial shares: footprints, scaled down where a bank is oversubscribed.
        let mut share: Vec<f64> = want.clone();
        let mut contended = vec![false; active.len()];
        for (b, &size_b) in size.iter().enumerate() {
            let members: Vec<usize> = (0..active.len()).filter(|&i| bank[i] == Some(b)).collect();
            let sum: f64 = members.iter().map(|&i| want[i]).sum();
            if sum > size_b {
                for &i in &members {
                    share[i] = size_b * want[i] / sum;
                    contended[i] = true;
                }
            }
        }
        let mut w = solo.iter().map(|s| s.1).fold(0.0, f64::max);
        let mut t: Vec<f64> = t0.clone();
        // What each reuses within a window (RRIP's shares, module doc).
        // Per bank under RRIP: the protected lifetime T_P, its T_C (module doc).
        let mut protected = vec![f64::NAN; size.len()];
        let fills: Vec<Option<Reuse>> = (0..active.len())
            .map(|i| match self.replacement {
                Replacement::Rrip { .. } if contended[i] => Some(Reuse::of(p[i])),
                _ => None,
            })
            .collect();
        for _ in 0..ITERATIONS {
            // T_i(W) with the current shares, and the bus wait their misses cause.
            let times = |w: f64, t: &mut [f64]| {
                for i in 0..active.len() {
                    let stall = self.stall(p[i], below[i] + share[i], w)
                        - self.stall(p[i], solo[i].0, solo[i].1);
                    t[i] = (t0[i] + stall / 1000.0).max(t0[i] * 1e-3);
                }
                let rho: f64 = (0..active.len())
                    .map(|i| {
                        p[i].mpki_at(below[i] + share[i]) / 1000.0 / t[i] * LINE / self.bandwidth
                    })
                    .sum();
                self.wait(rho)
            };
            // g(W) = wait(ρ(T(W))) falls as W grows, so W = g(W) has one root, between 0 and
            // g(0): bisection (iterating W = g(W) flips between two values for a program whose
            // time is mostly misses).
            // A W that is already the root (a program alone: its solo W) stays exact.
            if times(w, &mut t) != w {
                let (mut lo, mut hi) = (0.0, times(0.0, &mut t));
                for _ in 0..BISECTIONS {
                    let mid = (lo + hi) / 2.0;
                    if times(mid, &mut t) > mid {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                w = hi;
                times(w, &mut t);
            }
            for (b, &size_b) in size.iter().enumerate() {
                let members: Vec<usize> = (0..active.len())
                    .filter(|&i| bank[i] == Some(b) && contended[i])
                    .collect();
                if members.is_empty() {
                    continue;
                }
                let rate: Vec<f64> = members
                    .iter()
                    .map(|&i| p[i].mpki_at(below[i] + share[i]) / 1000.0 / t[i])
                    .collect();
                let caps: Vec<f64> = members.iter().map(|&i| want[i]).collect();
                let target = match self.replacement {
                    Replacement::Rrip { bits, long } if members.len() > 1 => {
                        let sets: Vec<RripMember> = members
                            .iter()
                            .map(|&i| RripMember {
                                fill: fills[i].as_ref().expect("contended"),
                                ns_per_instruction: t[i],
                                below: below[i],
                                cap: want[i],
                            })
                            .collect();
                        let (shares, window) =
                            rrip_shares(size_b, rate.iter().sum(), bits, long, &sets);
                        protected[b] = window;
                        shares
                    }
                    _ => water_fill(size_b, &rate, &caps),
                };
                for (k, &i) in members.iter().enumerate() {
                    share[i] = (share[i] + target[k]) / 2.0;
                }
            }
        }
        for (k, &c) in active.iter().enumerate() {
            out[c] = (t[k] / t0[k]).max(1.0);
        }
        for (b, tc) in tc_ns.iter_mut().enumerate() {
            let (mut held, mut rate) = (0.0, 0.0);
            for i in (0..active.len()).filter(|&i| bank[i] == Some(b) && contended[i]) {
                held += share[i];
                rate += p[i].mpki_at(below[i] + share[i]) / 1000.0 / t[i] * LINE;
            }
            if !protected[b].is_nan() {
                // Under RRIP a reused line lives T_P (a system footprint reused within it
                // stays).
                *tc = protected[b];
            } else if rate > 0.0 {
                *tc = held / rate;
            }
        }
        Solution { slow: out, tc_ns }
    }

    /// [`Self::solve`] in the CPU layer's fixed point (2^16 = ×1), memoised per assignment.
    pub fn slowdowns(&mut self, running: &[u8]) -> &[u32] {
        &self.slowdowns_with(running, &[]).0
    }

    /// [`Self::solve_with`] in the CPU layer's fixed point, memoised per assignment: the
    /// slowdowns and each bank's T_C (ns).
    pub fn slowdowns_with(&mut self, running: &[u8], resident: &[u64]) -> &(Vec<u32>, Vec<f64>) {
        let mut key = Vec::with_capacity(running.len() + 8 * resident.len());
        key.extend_from_slice(running);
        if resident.iter().any(|&m| m != 0) {
            for m in resident {
                key.extend_from_slice(&m.to_le_bytes());
            }
        }
        if !self.memo.contains_key(&key) {
            let sol = self.solve_with(running, resident);
            let q: Vec<u32> = sol
                .slow
                .iter()
                .map(|s| {
                    (s * ONE_Q16 as f64)
                        .round()
                        .clamp(ONE_Q16 as f64, u32::MAX as f64) as u32
                })
                .collect();
            self.memo.insert(key.clone(), (q, sol.tc_ns));
        }
        &self.memo[&key]
    }
}

/// Bytes core `core`'s private levels below `last` hold (a victim last level adds them to
/// what its program holds): the largest bank below `last` naming the core, divided among
/// the cores it names (a shared L2 below a victim L3 is an estimate: split evenly); 0 when
/// none is described.
fn private_below(t: &CacheTopology, core: usize, last: u8) -> f64 {
    t.banks
        .iter()
        .filter(|b| b.level < last && b.cpus.contains(core))
        .map(|b| b.size_bytes as f64 / b.cpus.cores().count().max(1) as f64)
        .fold(0.0, f64::max)
}

/// Steps of a reused footprint's table ([`Reuse`]) between its curve's first and last points.
const REUSE_STEPS: usize = 256;

/// How many instructions a program takes to reuse a given number of bytes (the module doc's
/// I(x)), tabled: `bytes[k]` is reused in `instructions[k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reuse {
    bytes: Vec<f64>,
    instructions: Vec<f64>,
}

impl Reuse {
    /// The table of `p`'s curve: linear below its first point (mpki constant), then by the
    /// midpoint rule over REUSE_STEPS log-spaced steps to its footprint (where the integrand's
    /// pole lies: I grows without bound there, so the footprint is approached, not reached).
    pub fn of(p: &Sensitivity) -> Reuse {
        let inf = p.mpki.last().map_or(0.0, |q| q.1);
        let reuse = |c: f64| (p.mpki_at(c) - inf) * LINE / 1000.0; // bytes per instruction
        let (mut bytes, mut instructions) = (vec![0.0], vec![0.0]);
        let (first, last) = match (p.mpki.first(), p.mpki.last()) {
            (Some(a), Some(b)) if reuse(a.0 as f64) > 0.0 => (a.0 as f64, b.0 as f64),
            _ => {
                return Reuse {
                    bytes,
                    instructions,
                }
            }
        };
        bytes.push(first);
        instructions.push(first / reuse(first));
        if last > first {
            let step = (last / first).ln() / REUSE_STEPS as f64;
            for k in 0..REUSE_STEPS {
                let (a, b) = (
                    first * (step * k as f64).exp(),
                    first * (step * (k + 1) as f64).exp(),
                );
                let rate = reuse((a * b).sqrt());
                if rate <= 0.0 {
                    break;
                }
                bytes.push(b);
                instructions.push(instructions[instructions.len() - 1] + (b - a) / rate);
            }
        }
        Reuse {
            bytes,
            instructions,
        }
    }

    /// Bytes reused within `instructions` (the module doc's fp), linear between the table's
    /// points, its last point beyond them.
    pub fn held(&self, instructions: f64) -> f64 {
        let k = self.instructions.partition_point(|&i| i < instructions);
        if k == 0 {
            return 0.0;
        }
        if k >= self.bytes.len() {
            return self.bytes[self.bytes.len() - 1];
        }
        let (i0, i1) = (self.instructions[k - 1], self.instructions[k]);
        let (b0, b1) = (self.bytes[k - 1], self.bytes[k]);
        b0 + (b1 - b0) * (instructions - i0) / (i1 - i0)
    }
}

/// One program of a bank under RRIP: what it reuses, its pace, the private bytes below the
/// last level that count toward its footprint, and its cap on the bank.
#[derive(Clone, Copy, Debug)]
pub struct RripMember<'a> {
    pub fill: &'a Reuse,
    pub ns_per_instruction: f64,
    pub below: f64,
    pub cap: f64,
}

/// Each member's share of a bank of `size` bytes under RRIP (`bits`, `long` = ε) with `lambda`
/// insertions per ns into it, and the protected lifetime T_P in ns (the module doc: c_i(T_P),
/// T_P the root of T = (2^bits − 1) / ε · (size − Σ c_i(T)) / (LINE · Λ)).
pub fn rrip_shares(
    size: f64,
    lambda: f64,
    bits: u8,
    long: f64,
    members: &[RripMember],
) -> (Vec<f64>, f64) {
    let at = |window: f64| -> Vec<f64> {
        members
            .iter()
            .map(|m| {
                let reused = m.fill.held(window / m.ns_per_instruction.max(1e-12));
                (reused - m.below).clamp(0.0, m.cap)
            })
            .collect()
    };
    let protect = ((1u64 << bits) - 1) as f64 / long.max(1e-12);
    let g = |window: f64| -> f64 {
        let held: f64 = at(window).iter().sum();
        protect * (size - held).max(0.0) / (LINE * lambda.max(1e-300))
    };
    // g falls as the window grows: the root lies in [0, g(0)].
    let (mut lo, mut hi) = (0.0, g(0.0));
    for _ in 0..BISECTIONS * 2 {
        let mid = (lo + hi) / 2.0;
        if g(mid) > mid {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (at(lo), lo)
}

/// `total` shared in proportion to `rate`, none above its cap, the excess re-shared among
/// the uncapped in the same proportion.
fn water_fill(total: f64, rate: &[f64], cap: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; rate.len()];
    let mut open: Vec<usize> = (0..rate.len()).collect();
    let mut left = total;
    while !open.is_empty() {
        let sum: f64 = open.iter().map(|&i| rate[i].max(1e-12)).sum();
        let over: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| left * rate[i].max(1e-12) / sum > cap[i])
            .collect();
        if over.is_empty() {
            for &i in &open {
                out[i] = left * rate[i].max(1e-12) / sum;
            }
            break;
        }
        for &i in &over {
            out[i] = cap[i];
            left -= cap[i];
        }
        open.retain(|i| !over.contains(i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::cache::{CacheTopology, PROFILES};
    use super::*;

    const MB: u64 = 1 << 20;
    /// A program whose misses fall from 4 to 1 MPKI between 1 and 4 MiB (two log2 steps).
    const STEEP: Sensitivity = Sensitivity {
        mpki: &[(MB, 4.0), (4 * MB, 1.0)],
        ipc: 1.0,
        prefetch: &[],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    };
    const SMALL: Sensitivity = Sensitivity {
        mpki: &[(MB / 4, 1.0), (MB, 0.2)],
        ipc: 1.0,
        prefetch: &[],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    };

    fn q9550() -> CacheTopology {
        CacheTopology::of(&PROFILES[0])
    }

    #[test]
    fn the_curve_is_linear_in_log_capacity_and_flat_beyond_the_footprint() {
        assert_eq!(STEEP.mpki_at(MB as f64), 4.0);
        assert!((STEEP.mpki_at(2.0 * MB as f64) - 2.5).abs() < 1e-12);
        assert_eq!(STEEP.mpki_at(64.0 * MB as f64), 1.0);
        assert_eq!(STEEP.mpki_at(1.0), 4.0);
        assert_eq!(STEEP.footprint(), (4 * MB) as f64);
    }

    #[test]
    fn the_coverage_curve_is_interpolated_as_the_miss_curve_and_kept_between_0_and_1() {
        let p = Sensitivity {
            prefetch: &[(MB, 0.1), (4 * MB, 0.3), (8 * MB, 1.5)],
            ..STEEP
        };
        assert_eq!(p.coverage_at(1.0), 0.1);
        assert!((p.coverage_at(2.0 * MB as f64) - 0.2).abs() < 1e-12);
        assert_eq!(p.coverage_at(64.0 * MB as f64), 1.0);
        assert_eq!(STEEP.coverage_at(2.0 * MB as f64), 0.0);
    }

    #[test]
    fn programs_whose_footprints_fit_their_bank_do_not_slow_each_other() {
        let mut m = Contention::new(&q9550(), 4);
        let s = m.program(SMALL);
        let st = m.program(STEEP);
        // 4 MiB + 1 MiB in a 6 MiB L2 (cores 0 and 1).
        let out = m.solve(&[st, s, NONE, NONE]);
        // Only the bus is shared, and it is nearly idle: below a part in a thousand.
        assert!(out[0] < 1.001 && out[1] < 1.001, "{out:?}");
        assert_eq!(out[2], 1.0);
    }

    #[test]
    fn two_programs_that_do_not_fit_share_the_bank_equally_and_slow_as_the_curve_says() {
        let t = q9550();
        let mut m = Contention::new(&t, 4);
        let st = m.program(STEEP);
        let out = m.solve(&[st, st, NONE, NONE]);
        // Symmetric: 3 MiB each. mpki(3 MiB) = 4 − 3·log2(3)/2; alone it held its 4 MiB
        // footprint (1 MPKI). T_solo = 1 / (1.0 · 2.83 GHz); the bus's wait is negligible
        // (checked below), so slowdown = 1 + (mpki(3) / mlp(mpki(3)) − 1 / mlp(1)) · L /
        // 1000 / T_solo, mlp(m) = 1 + m · 96 / 1000 (the Q9550's 96-entry reorder buffer).
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let t_solo = 1.0 / 2.83;
        let mlp = |m: f64| 1.0 + m * 96.0 / 1000.0;
        let want = 1.0 + (m3 / mlp(m3) - 1.0 / mlp(1.0)) * 80.0 / 1000.0 / t_solo;
        assert!((out[0] - want).abs() < 0.005 * want, "{} vs {want}", out[0]);
        assert_eq!(out[0], out[1]);
        // On separate banks (cores 0 and 2) each holds its footprint: only the bus remains.
        let apart = m.solve(&[st, NONE, st, NONE]);
        assert!(apart[0] < 1.002 && apart[0] == apart[2], "{apart:?}");
    }

    #[test]
    fn a_program_with_more_misses_takes_the_larger_share() {
        let mut m = Contention::new(&q9550(), 4);
        let (a, b) = (
            m.program(STEEP),
            m.program(Sensitivity { ipc: 0.5, ..STEEP }),
        );
        // b runs at half the instruction rate, so inserts half as often: a holds more.
        let out = m.solve(&[a, b, NONE, NONE]);
        assert!(out[0] < out[1], "{out:?}");
    }

    #[test]
    fn a_busy_bus_adds_its_queueing_wait() {
        // 1 GB/s: 2 MPKI at 2.83 G instructions/s is 362 MB/s per program.
        let t = CacheTopology {
            memory_bandwidth: 1_000_000_000,
            ..q9550()
        };
        let mut m = Contention::new(&t, 4);
        let hog = m.program(Sensitivity {
            mpki: &[(MB, 2.0)],
            ipc: 1.0,
            prefetch: &[],
            writes: &[],
            stores_pki: 0.0,
            burst: &[],
        });
        let one = m.solve(&[hog, NONE, NONE, NONE])[0];
        let two = m.solve(&[hog, NONE, hog, NONE]);
        assert_eq!(one, 1.0);
        assert!(two[0] > 1.01 && two[0] == two[2], "{two:?}");
        assert_eq!(m.slowdowns(&[hog, NONE, NONE, NONE])[0], ONE_Q16);
    }

    /// A system footprint of 3 MiB (its curve only matters while it runs).
    const SYS3: Sensitivity = Sensitivity {
        mpki: &[(MB, 8.0), (3 * MB, 2.0)],
        ipc: 0.6,
        prefetch: &[],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    };

    #[test]
    fn a_footprint_resident_in_a_bank_that_runs_no_program_slows_no_one() {
        let mut m = Contention::new(&q9550(), 4);
        let st = m.program(STEEP);
        let sys = m.program(SYS3);
        let running = [st, st, NONE, NONE];
        let without = m.solve_with(&running, &[]);
        let with = m.solve_with(&running, &[0, 1 << sys]);
        assert_eq!(with, without);
        // Bank 1 runs nothing: nothing is evicted there.
        assert_eq!(with.tc_ns[1], f64::INFINITY);
    }

    #[test]
    fn a_resident_footprint_leaves_its_banks_programs_the_rest_and_they_slow_as_the_curve_says() {
        let mut m = Contention::new(&q9550(), 4);
        let st = m.program(STEEP);
        let sys = m.program(SYS3);
        // STEEP alone on bank 0 holds its 4 MiB footprint; with 3 MiB of system code and
        // data resident it holds the other 3 MiB: slowdown 1 + (mpki(3) / mlp(mpki(3)) −
        // 1 / mlp(1)) · L / 1000 / T_solo, the bus's wait (under a part in a thousand) aside.
        let running = [st, NONE, NONE, NONE];
        let out = m.solve_with(&running, &[1 << sys, 0]);
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let mlp = |m: f64| 1.0 + m * 96.0 / 1000.0;
        let want = 1.0 + (m3 / mlp(m3) - 1.0 / mlp(1.0)) * 80.0 / 1000.0 * 2.83;
        assert!(
            (out.slow[0] - want).abs() < 0.002 * want,
            "{out:?} vs {want}"
        );
        // Alone, it inserts at its miss rate and holds 3 MiB: T_C = 3 MiB / (r · LINE).
        let t = out.slow[0] / 2.83;
        let tc = 3.0 * MB as f64 / (m3 / 1000.0 / t * LINE);
        assert!(
            (out.tc_ns[0] - tc).abs() < 1e-6 * tc,
            "{} vs {tc}",
            out.tc_ns[0]
        );
        // A footprint that runs on the bank counts as running, not as resident twice.
        let both = m.solve_with(&[st, sys, NONE, NONE], &[1 << sys, 0]);
        assert_eq!(both, m.solve_with(&[st, sys, NONE, NONE], &[]));
        // Memoised with its resident set: a different set is a different assignment.
        assert_eq!(m.slowdowns_with(&running, &[]).0[0], ONE_Q16);
        let q = m.slowdowns_with(&running, &[1 << sys, 0]).0[0];
        assert!(q > ONE_Q16 + ONE_Q16 / 10, "{q}");
    }

    #[test]
    fn misses_overlap_in_the_reorder_buffer_up_to_the_cores_miss_buffers() {
        // mlp(m) = min(1 + m · rob / 1000, miss_buffers): the Q9550's 96 entries and 8
        // buffers; without a reorder-buffer size every miss waits alone.
        let m = Contention::new(&q9550(), 4);
        assert_eq!(m.mlp(0.0), 1.0);
        assert!((m.mlp(2.5) - 1.24).abs() < 1e-12);
        assert_eq!(m.mlp(500.0), 8.0);
        let open = CacheTopology {
            miss_buffers: 0,
            ..q9550()
        };
        assert!((Contention::new(&open, 4).mlp(500.0) - 49.0).abs() < 1e-9);
        let alone = CacheTopology {
            rob_entries: 0,
            ..q9550()
        };
        assert_eq!(Contention::new(&alone, 4).mlp(500.0), 1.0);
    }

    #[test]
    fn a_larger_reorder_buffer_makes_each_lost_line_cost_less() {
        // The same two STEEP programs sharing one 6 MiB L2 (3 MiB each, as above), with
        // misses charged whole (rob 0) and overlapping in windows of 96 and 448 entries:
        // slowdown − 1 = (m3 / mlp(m3) − 1 / mlp(1)) · L / 1000 / T_solo for each.
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let mut last = f64::INFINITY;
        for rob in [0u64, 96, 448] {
            let t = CacheTopology {
                rob_entries: rob,
                miss_buffers: 0,
                ..q9550()
            };
            let mut m = Contention::new(&t, 4);
            let st = m.program(STEEP);
            let out = m.solve(&[st, st, NONE, NONE])[0];
            let mlp = |m: f64| 1.0 + m * rob as f64 / 1000.0;
            let want = 1.0 + (m3 / mlp(m3) - 1.0 / mlp(1.0)) * 80.0 / 1000.0 * 2.83;
            assert!(
                (out - want).abs() < 0.005 * want,
                "rob {rob}: {out} vs {want}"
            );
            assert!(out < last, "rob {rob}: {out} !< {last}");
            last = out;
        }
    }

    #[test]
    fn a_prefetcher_hides_the_latency_of_the_misses_it_covers_and_only_those() {
        // Two STEEP programs share one 6 MiB L2 (3 MiB each, as above); a share f of their
        // misses is covered. On the nearly idle bus a covered miss costs nothing, so
        // slowdown − 1 = (S(m3) − S(1)) / 1000 / T_solo with S(m) = (1 − f) · m · L /
        // mlp((1 − f) · m): the demand misses overlap among themselves only.
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let mlp = |m: f64| 1.0 + m * 96.0 / 1000.0;
        let mut last = f64::INFINITY;
        for f in [0.0, 0.25, 0.5, 0.75] {
            let mut m = Contention::new(&q9550(), 4);
            let cover: &'static [(u64, f64)] = Box::leak(Box::new([(MB, f)]));
            let st = m.program(Sensitivity {
                prefetch: cover,
                ..STEEP
            });
            let out = m.solve(&[st, st, NONE, NONE])[0];
            let s = |m: f64| (1.0 - f) * m * 80.0 / mlp((1.0 - f) * m);
            let want = 1.0 + (s(m3) - s(1.0)) / 1000.0 * 2.83;
            assert!((out - want).abs() < 0.005 * want, "f {f}: {out} vs {want}");
            assert!(out < last, "f {f}: {out} !< {last}");
            last = out;
        }
        // Everything covered: only the bus's queueing wait is left (the covered lines arrive
        // late by it), about a thousandth on the Q9550's bus at these rates.
        let mut m = Contention::new(&q9550(), 4);
        let all = m.program(Sensitivity {
            prefetch: &[(MB, 1.0)],
            ..STEEP
        });
        let out = m.solve(&[all, all, NONE, NONE])[0];
        assert!(out > 1.0 && out < 1.002 && out < last, "{out}");
    }

    #[test]
    fn prefetched_lines_still_take_the_bus_so_a_busy_bus_slows_them_as_before() {
        // Two programs streaming 2 MPKI each over a 1 GB/s bus (a flat curve: the cache
        // share does not matter, only the bus's wait W). Covered or not, every line crosses
        // the bus: the same utilisation, the same W, and the same slowdown, 1 + m · (W −
        // W_solo) / mlp(m) / 1000 / T_solo either way (a covered line arrives W late).
        let t = CacheTopology {
            memory_bandwidth: 1_000_000_000,
            ..q9550()
        };
        let hog = |prefetch: &'static [(u64, f64)]| Sensitivity {
            mpki: &[(MB, 2.0)],
            ipc: 1.0,
            prefetch,
            writes: &[],
            stores_pki: 0.0,
            burst: &[],
        };
        let mut m = Contention::new(&t, 4);
        let (plain, streamed) = (m.program(hog(&[])), m.program(hog(&[(MB, 1.0)])));
        let a = m.solve(&[plain, NONE, plain, NONE]);
        let b = m.solve(&[streamed, NONE, streamed, NONE]);
        assert!(a[0] > 1.01, "{a:?}");
        assert!((a[0] - b[0]).abs() < 1e-9, "{a:?} vs {b:?}");
        // Alone, either runs at its nominal speed.
        assert_eq!(m.solve(&[streamed, NONE, NONE, NONE])[0], 1.0);
    }

    /// STEEP with every miss a store's, at `stores_pki` stores per kilo-instruction.
    fn storing(stores_pki: f64) -> Sensitivity {
        Sensitivity {
            writes: &[(MB, 1.0)],
            stores_pki,
            ..STEEP
        }
    }

    #[test]
    fn a_store_miss_stalls_only_for_what_the_store_buffers_fill_leaves_of_the_latency() {
        // Two STEEP programs share one 6 MiB L2 (3 MiB each, as above), every miss a store's.
        // The Q9550's 20-entry store buffer at 200 stores per kilo-instruction holds the
        // stores of 100 instructions, 100 · T_solo = 35.3 ns at 2.83 G instructions/s, so a
        // group of store misses stalls 80 − 35.3 ns; the groups overlap in that window:
        // slowdown − 1 = (S(m3) − S(1)) / 1000 / T_solo, S(m) = m · (L − fill) / mlp_s(m),
        // mlp_s(m) = 1 + m · 100 / 1000 (below the 8 miss buffers); the bus's wait aside.
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let t_solo = 1.0 / 2.83;
        let fill = 100.0 * t_solo;
        let s = |m: f64| m * (80.0 - fill) / (1.0 + m * 100.0 / 1000.0);
        let want = 1.0 + (s(m3) - s(1.0)) / 1000.0 / t_solo;
        let mut m = Contention::new(&q9550(), 4);
        let st = m.program(storing(200.0));
        let out = m.solve(&[st, st, NONE, NONE])[0];
        assert!((out - want).abs() < 0.002 * want, "{out} vs {want}");
        // Charged as loads' (the model without a store buffer) they cost more.
        let loads = m.program(STEEP);
        assert!(m.solve(&[loads, loads, NONE, NONE])[0] > out + 0.03);
    }

    #[test]
    fn a_store_buffer_that_outlasts_the_latency_hides_store_misses_but_not_the_bus() {
        // At 10 stores per kilo-instruction the 20 entries hold 2000 instructions (707 ns),
        // far beyond the 80 ns latency: the lost share costs nothing but the bus's wait,
        // which on the Q9550's nearly idle bus is below a part in a thousand.
        let mut m = Contention::new(&q9550(), 4);
        let st = m.program(storing(10.0));
        let out = m.solve(&[st, st, NONE, NONE])[0];
        assert!((1.0..1.001).contains(&out), "{out}");
    }

    #[test]
    fn without_a_store_buffer_or_declared_stores_a_stores_miss_costs_a_loads() {
        // store_buffer = 0 (no profile's value), or a program that declares no stores per
        // kilo-instruction: the same slowdowns as a program that declares no writes at all.
        let none = CacheTopology {
            store_buffer: 0,
            ..q9550()
        };
        for (t, prog) in [(none, storing(100.0)), (q9550(), storing(0.0))] {
            let mut m = Contention::new(&t, 4);
            let (a, b) = (m.program(prog), m.program(STEEP));
            assert_eq!(
                m.solve(&[a, a, NONE, NONE]),
                m.solve(&[b, b, NONE, NONE]),
                "{t:?}"
            );
        }
    }

    #[test]
    fn misses_that_come_in_bursts_overlap_at_their_density_in_the_window() {
        // The same two STEEP programs (3 MiB each of one 6 MiB L2), whose misses come three
        // times denser than their average where they occur: mlp(m) = 1 + 3 · m · 96 / 1000,
        // and slowdown − 1 = (m3 / mlp(m3) − 1 / mlp(1)) · L / 1000 / T_solo as before.
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let mlp = |m: f64| 1.0 + 3.0 * m * 96.0 / 1000.0;
        let want = 1.0 + (m3 / mlp(m3) - 1.0 / mlp(1.0)) * 80.0 / 1000.0 * 2.83;
        let mut m = Contention::new(&q9550(), 4);
        let bursty = m.program(Sensitivity {
            burst: &[(MB, 3.0)],
            ..STEEP
        });
        let out = m.solve(&[bursty, bursty, NONE, NONE])[0];
        assert!((out - want).abs() < 0.005 * want, "{out} vs {want}");
        // Evenly spread (no curve, or a factor of 1) is the window as before.
        let (plain, one) = (
            m.program(STEEP),
            m.program(Sensitivity {
                burst: &[(MB, 1.0)],
                ..STEEP
            }),
        );
        let even = m.solve(&[plain, plain, NONE, NONE])[0];
        assert!(out < even, "{out} !< {even}");
        assert_eq!(m.solve(&[one, one, NONE, NONE])[0], even);
    }

    /// Two cores, each with a private 1 MiB L2, sharing a 4 MiB L3 (a Zen-like hierarchy),
    /// misses waiting alone (no reorder buffer) and a bus so fast that its wait is below a
    /// part in a million: the slowdowns are the curves' alone.
    fn zen_like(inclusion: Inclusion, l2: u64) -> CacheTopology {
        use super::super::cache::Bank;
        use super::super::CoreSet;
        let mut banks = vec![Bank {
            level: 3,
            size_bytes: 4 * MB,
            cpus: CoreSet(0b11),
        }];
        for c in 0..2 {
            if l2 > 0 {
                banks.push(Bank {
                    level: 2,
                    size_bytes: l2,
                    cpus: CoreSet(1 << c),
                });
            }
        }
        CacheTopology {
            profile: None,
            banks,
            memory_bandwidth: 1 << 60,
            memory_latency_ns: 80,
            clock_mhz: 2830,
            rob_entries: 0,
            miss_buffers: 0,
            store_buffer: 0,
            inclusion,
            replacement: Replacement::Lru,
        }
    }

    /// A stream: 500 misses per kilo-instruction at any capacity (the triad's), 384 MiB.
    const STREAM: Sensitivity = Sensitivity {
        mpki: &[(384 * MB, 500.0)],
        ipc: 0.25,
        prefetch: &[],
        writes: &[],
        stores_pki: 0.0,
        burst: &[],
    };

    #[test]
    fn a_victim_l3_whose_co_runner_evicts_lines_the_owner_still_holds_in_its_l2_costs_nothing_for_them(
    ) {
        // SMALL's footprint (1 MiB) fits its private L2. Beside the stream, a victim L3 leaves
        // it all of it: the same slowdown as with an L3 that holds everything (the bus alone,
        // below a part in a million here).
        let run = |t: &CacheTopology| {
            let mut m = Contention::new(t, 2);
            let (s, st) = (m.program(SMALL), m.program(STREAM));
            m.solve(&[s, st])[0]
        };
        let victim = run(&zen_like(Inclusion::Victim, MB));
        let roomy = run(&CacheTopology {
            banks: vec![super::super::cache::Bank {
                level: 3,
                size_bytes: 1 << 40,
                cpus: super::super::CoreSet(0b11),
            }],
            ..zen_like(Inclusion::Victim, MB)
        });
        assert!((1.0..1.000_001).contains(&victim), "{victim}");
        assert!((victim - roomy).abs() < 1e-9, "{victim} vs {roomy}");
        // An inclusive L3 takes the lines from its L2 too: the stream's insertions leave
        // SMALL a few KiB (below its curve's first point, 1 MPKI) where alone it held its
        // 1 MiB (0.2 MPKI): slowdown 1 + (1.0 − 0.2) · L / 1000 / T_solo.
        let inclusive = run(&zen_like(Inclusion::Inclusive, MB));
        let want = 1.0 + (1.0 - 0.2) * 80.0 / 1000.0 * 2.83;
        assert!((inclusive - want).abs() < 1e-4, "{inclusive} vs {want}");
    }

    #[test]
    fn a_victim_l3_adds_each_cores_private_l2_to_what_its_program_holds() {
        // Two STEEP programs (4 MiB footprints) share the 4 MiB L3. Inclusive: 2 MiB each,
        // against the 4 MiB each held alone. Victim: each keeps its 1 MiB L2 and can use 3 MiB
        // of the L3, so the L3 is split 2 and 2 and each holds 3 MiB; alone each held its
        // whole footprint (4 MiB ≤ 4 + 1). slowdown = 1 + (mpki(held) − mpki(4 MiB)) · L /
        // 1000 / T_solo, mpki(x) = 4 − 3 · log2(x / 1 MiB) / 2.
        let mpki = |mib: f64| 4.0 - 3.0 * mib.log2() / 2.0;
        for (inclusion, held) in [(Inclusion::Inclusive, 2.0), (Inclusion::Victim, 3.0)] {
            let mut m = Contention::new(&zen_like(inclusion, MB), 2);
            let st = m.program(STEEP);
            let out = m.solve(&[st, st]);
            let want = 1.0 + (mpki(held) - 1.0) * 80.0 / 1000.0 * 2.83;
            assert!(
                (out[0] - want).abs() < 1e-4,
                "{inclusion:?}: {out:?} vs {want}"
            );
            assert_eq!(out[0], out[1]);
        }
    }

    #[test]
    fn an_inclusive_last_level_reads_no_private_level_and_is_the_model_before_term_for_term() {
        let with = zen_like(Inclusion::Inclusive, MB);
        let without = zen_like(Inclusion::Inclusive, 0);
        let mut a = Contention::new(&with, 2);
        let mut b = Contention::new(&without, 2);
        for (x, y) in [(STEEP, STEEP), (SMALL, STREAM), (STEEP, STREAM)] {
            let (ax, ay) = (a.program(x), a.program(y));
            let (bx, by) = (b.program(x), b.program(y));
            assert_eq!(a.solve(&[ax, ay]), b.solve(&[bx, by]));
        }
        // A victim L3 with no level described below it has nothing to add either.
        let mut v = Contention::new(&zen_like(Inclusion::Victim, 0), 2);
        let (vx, vy) = (v.program(STEEP), v.program(STREAM));
        let (bx, by) = (b.program(STEEP), b.program(STREAM));
        assert_eq!(v.solve(&[vx, vy]), b.solve(&[bx, by]));
    }

    /// One shared L3 of `mib` MiB on two cores, nothing below it, misses waiting alone and a
    /// bus so fast that its wait is below a part in a million; `replacement` as given.
    fn one_l3(mib: u64, replacement: Replacement) -> CacheTopology {
        CacheTopology {
            banks: vec![super::super::cache::Bank {
                level: 3,
                size_bytes: mib * MB,
                cpus: super::super::CoreSet(0b11),
            }],
            replacement,
            ..zen_like(Inclusion::Inclusive, 0)
        }
    }

    const JALEEL: Replacement = Replacement::Rrip {
        bits: 2,
        long: 1.0 / 32.0,
    };

    #[test]
    fn a_stream_beside_a_reused_set_that_fits_takes_only_the_lines_the_set_never_reuses_under_rrip()
    {
        // SMALL (1 MiB, reused) beside the stream in a 24 MiB L3. Under LRU the shares follow
        // the insertion rates: the stream inserts 0.354 lines/ns against SMALL's 0.0028, so
        // SMALL keeps at most 24 MiB · 0.0028 / 0.357 = 195 KiB, below its curve's first
        // point, and pays 1 + (1.0 − 0.2) · L / 1000 / T_solo. Under RRIP (2 bits, ε = 1/32) a
        // reused line lives 96 · (24 − 1 MiB) / (LINE · Λ) = 102 ms against the stream, longer
        // than SMALL takes to come back to all of its 1 MiB (67 ms, its reuse table's end): it
        // keeps its footprint and runs as alone (the bus aside, below a part in a million).
        let run = |r: Replacement| {
            let mut m = Contention::new(&one_l3(24, r), 2);
            let (s, st) = (m.program(SMALL), m.program(STREAM));
            m.solve(&[s, st])
        };
        let lru = run(Replacement::Lru);
        let want = 1.0 + (1.0 - 0.2) * 80.0 / 1000.0 * 2.83;
        assert!((lru[0] - want).abs() < 1e-4, "{lru:?} vs {want}");
        let fill = Reuse::of(&SMALL);
        let t_p = 96.0 * (23 * MB) as f64 / (LINE * 500.0 / 1000.0 * 0.25 * 2.83);
        assert!(
            fill.instructions[fill.instructions.len() - 1] / 2.83 < t_p,
            "SMALL takes {} ns to reuse its footprint, T_P {t_p}",
            fill.instructions[fill.instructions.len() - 1] / 2.83
        );
        let rrip = run(JALEEL);
        assert!((1.0..1.000_001).contains(&rrip[0]), "{rrip:?}");
        // The stream's own speed does not depend on what it holds (a flat curve).
        assert_eq!(rrip[1], lru[1]);
    }

    #[test]
    fn a_reused_set_keeps_what_it_reuses_within_rrips_protected_lifetime() {
        // A program R whose misses fall from 2.0 to 0.1 MPKI between 3 and 4 MiB, beside a
        // stream of Λ lines/ns in an 8 MiB bank: below its first point R reuses a = LINE ·
        // (2.0 − 0.1) / 1000 / T_R bytes per ns, so c = a · T_P and T_P = k · (size − c) /
        // (LINE · Λ), k = (2^bits − 1) / ε: c = a · k · size / (LINE · Λ + a · k), while it
        // stays below 3 MiB; the stream reuses nothing and keeps none.
        const R: Sensitivity = Sensitivity {
            mpki: &[(3 * MB, 2.0), (4 * MB, 0.1)],
            ..STEEP
        };
        let (fr, fs) = (Reuse::of(&R), Reuse::of(&STREAM));
        let (t_r, t_s, size) = (1.0 / 2.83, 4.0 / 2.83, (8 * MB) as f64);
        let lambda = 500.0 / 1000.0 / t_s + 2.0 / 1000.0 / t_r;
        let a = LINE * 1.9 / 1000.0 / t_r;
        let mut last = 0.0;
        for (bits, long) in [(2u8, 1.0), (2, 0.5), (3, 1.0), (2, 1.0 / 8.0)] {
            let k = ((1u64 << bits) - 1) as f64 / long;
            let member = |fill, ns| RripMember {
                fill,
                ns_per_instruction: ns,
                below: 0.0,
                cap: 4.0 * MB as f64,
            };
            let (out, t_p) = rrip_shares(
                size,
                lambda,
                bits,
                long,
                &[member(&fr, t_r), member(&fs, t_s)],
            );
            let want = a * k * size / (LINE * lambda + a * k);
            // The lifetime is the share's: c = a · T_P.
            assert!((t_p * a - want).abs() < 1e-9 * want, "{t_p}");
            assert!(want < 3.0 * MB as f64, "{want}");
            assert!(
                (out[0] - want).abs() < 1e-9 * want,
                "bits {bits}, ε {long}: {out:?} vs {want}"
            );
            assert_eq!(out[1], 0.0);
            // More bits or fewer insertions at long: a longer lifetime, a larger share.
            assert!(out[0] > last, "{out:?}");
            last = out[0];
        }
    }

    #[test]
    fn lru_is_the_old_model_term_for_term() {
        // The default replacement is LRU, and its shares are the insertion-rate water-filling:
        // two STEEP programs on the Q9550's 6 MiB L2 hold 3 MiB each, slowdown 1 + (m3 −
        // 1) · L / 1000 · 2.83 (every miss alone), whatever else the table says.
        let t = CacheTopology {
            rob_entries: 0,
            ..q9550()
        };
        assert_eq!(t.replacement, Replacement::Lru);
        let m3 = 4.0 - 3.0 * 3f64.log2() / 2.0;
        let want = 1.0 + (m3 - 1.0) * 80.0 / 1000.0 * 2.83;
        let mut m = Contention::new(&t, 4);
        let st = m.program(STEEP);
        let out = m.solve(&[st, st, NONE, NONE]);
        assert!((out[0] - want).abs() < 0.005 * want, "{out:?} vs {want}");
        // The same pairs on a shared L3 under the default and an explicit LRU are the same
        // numbers, bit for bit; a program alone on its bank holds what its curve was
        // measured with under either policy.
        for (x, y) in [(STEEP, STEEP), (SMALL, STREAM), (STEEP, STREAM)] {
            let mut a = Contention::new(&zen_like(Inclusion::Victim, MB), 2);
            let mut b = Contention::new(&one_l3(4, Replacement::Lru), 2);
            let mut c = Contention::new(&one_l3(4, Replacement::Lru), 2);
            let (ax, ay) = (a.program(x), a.program(y));
            let (bx, by) = (b.program(x), b.program(y));
            let (cx, cy) = (c.program(x), c.program(y));
            assert_eq!(b.solve(&[bx, by]), c.solve(&[cx, cy]));
            assert!(a.solve(&[ax, ay])[0] >= 1.0);
            let mut r = Contention::new(&one_l3(2, JALEEL), 2);
            let mut l = Contention::new(&one_l3(2, Replacement::Lru), 2);
            let (rx, lx) = (r.program(x), l.program(x));
            assert_eq!(r.solve(&[rx, NONE]), l.solve(&[lx, NONE]));
        }
    }

    #[test]
    fn a_reused_footprints_table_is_linear_below_its_first_point_and_ends_at_its_footprint() {
        // Below its first point SMALL reuses (1.0 − 0.2) · 64 / 1000 bytes an instruction; a
        // stream (a flat curve) reuses nothing; beyond the table, the whole footprint.
        let f = Reuse::of(&SMALL);
        let per = 0.8 * LINE / 1000.0;
        assert!((f.held(1000.0) - 1000.0 * per).abs() < 1e-9);
        assert_eq!(f.held(f64::MAX), MB as f64);
        assert_eq!(Reuse::of(&STREAM).held(1e12), 0.0);
    }

    #[test]
    fn water_filling_caps_a_share_at_its_footprint_and_gives_the_rest_to_the_others() {
        let out = water_fill(6.0, &[1.0, 1.0, 1.0], &[1.0, 10.0, 10.0]);
        assert_eq!(out, vec![1.0, 2.5, 2.5]);
    }
}
