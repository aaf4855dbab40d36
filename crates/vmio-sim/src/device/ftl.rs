//! A page-mapped flash translation layer with per-die garbage collection, used by the
//! [`super::ssd`] model. It decides where data lives and how much flash work each host page
//! costs; the SSD model turns that work into die time.
//!
//! **What is modelled.** Flash is `dies` × `blocks_per_die` blocks of `pages_per_block` pages;
//! a page holds `units_per_page` mapping units of 4 KiB (8 KiB pages: 2 units). The FTL maps
//! each logical 4 KiB unit to a physical unit slot (page-level mapping at 4 KiB granularity,
//! as DRAM-mapped SSDs of this generation do). Each die has one active block written page by
//! page (log-structured); the SSD picks the die round-robin. An overwrite or a TRIM invalidates
//! the old slot. When a die opens a new active block and has fewer than `gc_threshold` free
//! blocks left, it collects: the victim policy ([`victim`]) chooses a sealed block, its valid
//! units are copied into the die's active block (copyback: a page read and a page program per
//! copied page, no channel transfer), the victim is erased and freed. Planes are not modelled
//! separately (a die is the unit of parallelism); wear levelling, read disturb and bad blocks
//! are not modelled.
//!
//! **Memory** (bytes per logical 4 KiB unit, checked by a test): L2P `u32` slot number + 1
//! (0 = no entry) = 4 B; the reverse map P2L (logical unit of each physical slot) is
//! bit-packed with ⌈log2(logical units)⌉ bits (26 bits for 256 GB), i.e. 3.25 B per slot ×
//! (1 + OP) ≈ 3.5 B per logical unit; per-block valid count, state, P2L chunk and list links
//! add ~0.05 B. A validity bitmap (1 bit per slot, 0.13 B per logical unit) lets GC scan a
//! victim without probing the L2P at random (slot `s` is valid iff `slot_of(unit_at(s)) == s`,
//! which the tests check). Total ≈ 7.7 B per logical unit for the 840 Pro profile (≤ 8 B) once
//! every unit has been written. An aged device starts with far less (0.18 B, about 11 MiB for
//! 256 GB: the validity bitmap and per-block tables; see *Preconditioning*): its L2P starts
//! as a hash table of the units written or moved since (open addressing, Knuth's algorithm L,
//! 8 B per entry at a load of 3/8 to 3/4) and becomes the dense array when the table would
//! outgrow it, and its P2L is given to blocks chunk by chunk (`units_per_block` entries) as
//! they are opened, in the order they are opened, so that the memory written is the chunks in
//! use (the tables are allocated zeroed: the kernel backs a page when it is first written).
//!
//! **Speed** (no effect on results): random host writes are bound by cache and TLB misses in
//! these tables, not by instructions. The L2P, P2L and validity bitmap ask the kernel for
//! transparent huge pages (`madvise`, Linux); [`Ftl::prefetch`] and
//! [`Ftl::prefetch_old_copy`] let the SSD start loading a unit's mapping entry when the host
//! queues the request and its old copy's state when the unit enters the open page (on an aged
//! FTL also the layout index entry of the unit); GC scans a victim's validity bitmap a word at
//! a time, collects its units prefetching their L2P entries, then copies them (an entry of
//! the hash table is a load the copy waits for, unlike a store into the dense array).
//!
//! **Algorithm** (per host page; O(1) amortized, GC cost proportional to the units it copies):
//!
//! ```text
//! write_page(die, units):
//!     page = alloc_page(die)                      # may run GC on die (below)
//!     for (i, u) in units: invalidate(slot_of(u)) # valid[block]--, victim.invalidated()
//!         slot = page*units_per_page + i; L2P[u] = slot+1; P2L[slot] = u
//! slot_of(u):                                     # where u lives (None: unmapped)
//!     if L2P[u] == TRIMMED: return None            # (aged only; a clean FTL's trim stores 0)
//!     if L2P[u] != 0: return L2P[u] - 1
//!     if aged: return layout_slot(u)               # never written, moved or trimmed since
//!     return None
//! unit_at(s):                                     # the unit valid slot s holds
//!     if aged and intact[block(s)] and s is a layout slot: return layout_unit(s)
//!     return P2L[s]
//! alloc_page(die):
//!     if active[die] is full:
//!         if free[die] < 2: gc(die) once; if still full and free[die] < 2: try the next die
//!         seal it (victim.sealed); active[die] = free[die].pop()
//!         while free[die] < gc_threshold and progress: gc(die)
//!     return next page of active[die]     # the last free block is kept for GC copies
//! gc(die):
//!     b = victim.pick(die); for each valid slot s of b: append unit_at(s) to the active block
//!     erase b (intact[b] = false); free[die].push(b); count read, programmed pages, 1 erase
//! ```
//!
//! If a die cannot make room (all of its sealed data valid, possible only with an adversarial
//! pattern) the page goes to the next die that can.
//!
//! **Preconditioning** `aged` (steady state of uniform random overwrites, without simulating
//! them): in the fluid limit of uniform random writes a block's valid fraction decays as
//! `exp(-h/U)` with `h` the host writes since it was written (each logical unit is overwritten
//! at rate 1/U); with FIFO, and with greedy for large blocks where all blocks follow the same
//! decay (Desnoyers, "Analytic modeling of SSD write performance", SYSTOR 2012; Xiang &
//! Kurkoski, arXiv:1110.4245, 2011), the sealed blocks of a die are evenly spaced in age and
//! the block of relative age `x ∈ [0, 1)` holds `S·exp(-α(1-v)·x)` valid units, where
//! `α = (sealed blocks × S) / U` and `v` (the victim's valid fraction) solves
//! `v = exp(-α(1-v))`.
//! [`Ftl::precondition_aged`] builds exactly that occupancy per die (every logical unit mapped
//! once, `gc_threshold` free blocks per die), spreads each block's valid units evenly over its
//! slots and assigns logical units to valid slots through a seeded
//! pseudo-random permutation (an invertible integer mixer with cycle walking), so logically
//! sequential data is scattered as after random writes. Each die also gets its own *phase*
//! in the GC cycle: its active block is part-written, holding the `v·S` units the last GC
//! copied into it plus a uniformly random fraction `φ` of the `(1-v)·S` host units it takes
//! before the next GC (φ seeded per die). After long random writes the dies' cycles are
//! independent (each GC frees a different amount), so a die's position in its cycle is
//! uniform; giving every die the same phase would make all of them collect at once, every
//! `(1-v)·S·dies` host units, and turn GC into device-wide stalls in lockstep with the
//! round-robin page allocation.
//!
//! The layout is not written into the L2P and P2L (one random store per logical unit: 9 G
//! instructions, 0.8-4 s and 470 MB for 256 GB); it is kept implicit. (MQSim, Tavakkol et
//! al., FAST 2018, likewise derives its preconditioned state from a steady-state distribution
//! of valid pages per block instead of simulating the writes, but writes it into its mapping
//! tables: `Address_Mapping_Unit_Page_Level::Allocate_address_for_preconditioning`. The state
//! stands for the one the SNIA SSS Performance Test Specification reaches by preconditioning
//! writes before any measured round.) Stored: per block its layout count
//! `v` and the units before it (`before[b]`, a prefix sum), an index from unit numbers to
//! blocks, whether the block is still `intact` (in its layout incarnation), the validity bits
//! (one bit pattern per count `v`, copied word by word); O(blocks + physical units / 64),
//! 40 M instructions and about 11 MiB for 256 GB. Both directions are computed when asked:
//!
//! ```text
//! layout_slot(u):  j = perm⁻¹(u)                       # the mixer's rounds undone in reverse
//!                  b = the block with before[b] <= j < before[b+1]; k = j - before[b]
//!                  i = k if b is a die's active block else ⌈(k+1)·S/v⌉ - 1   # spread's k-th
//!                  return b·S + i
//! layout_unit(s):  b, i = s / S, s % S                 # a valid slot of an intact block
//!                  k = i if b is a die's active block (i < v) else ⌊(i+1)·v/S⌋ - 1
//!                  return perm(before[b] + k)
//! ```
//!
//! A unit written or moved by GC gets an L2P entry and its layout slot is invalidated (an
//! erased block is no longer intact), so the layout answers only for units still where it put
//! them; the tests check the implicit layout against the tables the streaming pass filled,
//! and a sparse against a dense L2P under random writes and trims.
//!
//! **Closed form.** The steady-state write amplification is then
//! `A = 1/(1-v) = α / (α + W0(-α e^-α))`, α = physical/logical units in circulation (Desnoyers'
//! FIFO/LRU result; Xiang & Kurkoski's expression for greedy, 2.36 at OP 0.3 against 2.35
//! simulated). The simpler `(1+ρ)/(2ρ)` (Agarwal & Marrow, 2010) underestimates it (2.17 at
//! OP 0.3). The tests check a simulated greedy run from a clean device against `A` (within
//! 2 % at OP 0.07 and 0.28) and the first writes after `aged` preconditioning (within 4 %).

pub mod victim;

use vmio_core::rng::Rng;

/// Mapping unit (bytes): the host's 4 KiB sector size and the FTL's granularity.
pub const UNIT_BYTES: u64 = 4096;

/// Garbage-collection victim policies accepted by `gc_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    Greedy,
    Fifo,
    CostBenefit,
}

impl GcPolicy {
    pub const NAMES: &'static [&'static str] = &["greedy", "fifo", "cost-benefit"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "greedy" => Some(Self::Greedy),
            "fifo" => Some(Self::Fifo),
            "cost-benefit" => Some(Self::CostBenefit),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Greedy => "greedy",
            Self::Fifo => "fifo",
            Self::CostBenefit => "cost-benefit",
        }
    }
}

/// Initial state of the flash, accepted by `precondition`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Fresh or secure-erased: nothing mapped, every block free.
    Clean,
    /// Full of valid data written randomly, in GC steady state.
    Aged,
}

impl Precondition {
    pub const NAMES: &'static [&'static str] = &["clean", "aged"];

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "clean" => Some(Self::Clean),
            "aged" => Some(Self::Aged),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Clean => "clean",
            Self::Aged => "aged",
        }
    }
}

/// Shape of the flash and of the logical space.
#[derive(Clone, Debug, PartialEq)]
pub struct FtlGeometry {
    pub dies: usize,
    pub blocks_per_die: u32,
    pub pages_per_block: u32,
    pub units_per_page: u32,
    pub logical_units: u64,
    pub gc_threshold: u32,
    pub policy: GcPolicy,
}

impl FtlGeometry {
    pub fn units_per_block(&self) -> u32 {
        self.pages_per_block * self.units_per_page
    }
    pub fn blocks(&self) -> u64 {
        self.dies as u64 * self.blocks_per_die as u64
    }
    pub fn physical_units(&self) -> u64 {
        self.blocks() * self.units_per_block() as u64
    }

    /// Why this geometry cannot work, if it cannot: (parameter at fault, expectation).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.physical_units() >= u32::MAX as u64 {
            return Err((
                "capacity",
                format!(
                    "gives {} physical 4 KiB slots; at most {} are supported",
                    self.physical_units(),
                    u32::MAX - 1
                ),
            ));
        }
        if self.gc_threshold < 2 || self.gc_threshold >= self.blocks_per_die / 2 {
            return Err((
                "gc_threshold",
                format!(
                    "must be between 2 and {} free blocks per die (half of the {} blocks per die)",
                    (self.blocks_per_die / 2).saturating_sub(1),
                    self.blocks_per_die
                ),
            ));
        }
        // Every die must be able to hold its share of the data plus the GC reserve, the
        // active block and one block of slack.
        let per_die = self.logical_units.div_ceil(self.dies as u64);
        let need = per_die + (self.gc_threshold as u64 + 2) * self.units_per_block() as u64;
        let have = self.blocks_per_die as u64 * self.units_per_block() as u64;
        if have < need {
            return Err((
                "over_provisioning",
                format!(
                    "leaves {} spare blocks per die; gc_threshold ({}) needs at least {}",
                    (have.saturating_sub(per_die)) / self.units_per_block() as u64,
                    self.gc_threshold,
                    self.gc_threshold + 2
                ),
            ));
        }
        Ok(())
    }
}

/// FTL counters. Units are 4 KiB; `flash_write_units` counts host and GC units programmed.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct FtlStats {
    pub host_write_units: u64,
    pub host_write_bytes: u64,
    pub flash_write_units: u64,
    pub flash_write_pages: u64,
    pub gc_copied_units: u64,
    pub gc_count: u64,
    pub erase_count: u64,
    /// Die time spent in GC (filled in by the SSD model, which owns the timing).
    pub gc_ns: u64,
    /// `flash_write_units / host_write_units` (0 before any host write).
    pub write_amplification: f64,
}

/// Flash work caused by one call, for the timing model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcWork {
    pub read_pages: u64,
    pub program_pages: u64,
    pub erases: u64,
}

impl GcWork {
    pub fn is_empty(&self) -> bool {
        self.erases == 0 && self.program_pages == 0 && self.read_pages == 0
    }
}

/// Fixed-width unsigned integers packed into `u64` words (one spare word at the end, so that
/// every value can be read and written in two words, without a branch). A value at bit
/// offset `o` of word `w` is the 128-bit window `w + 1 : w` shifted right by `o`; its part
/// in word `w + 1` is the value shifted right by `64 − o` (nothing when `o = 0`), done as
/// `(x >> 1) >> (63 − o)` so that no shift reaches 64 (a `u128` shift by a variable
/// amount is several instructions with a test of the amount).
#[derive(Clone, Debug)]
struct Packed {
    bits: u32,
    mask: u64,
    words: Vec<u64>,
}

impl Packed {
    fn zeroed(len: u64, bits: u32) -> Self {
        debug_assert!((1..=64).contains(&bits));
        let words = (len * bits as u64).div_ceil(64) as usize + 1;
        Self {
            bits,
            mask: if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            },
            words: huge_zeroed(words),
        }
    }

    #[inline]
    fn get(&self, i: u64) -> u64 {
        let bit = i * self.bits as u64;
        let (w, o) = ((bit / 64) as usize, (bit % 64) as u32);
        let pair = &self.words[w..w + 2];
        // (pair[1] << 1) << (63 − o) is pair[1] << (64 − o), and 0 when o = 0.
        ((pair[0] >> o) | ((pair[1] << 1) << (63 - o))) & self.mask
    }

    #[inline]
    fn set(&mut self, i: u64, v: u64) {
        let bit = i * self.bits as u64;
        let (w, o) = ((bit / 64) as usize, (bit % 64) as u32);
        let pair = &mut self.words[w..w + 2];
        let v = v & self.mask;
        pair[0] = (pair[0] & !(self.mask << o)) | v << o;
        // The bits past word w: x >> (64 − o), and nothing when o = 0.
        let spill = |x: u64| (x >> 1) >> (63 - o);
        pair[1] = (pair[1] & !spill(self.mask)) | spill(v);
    }

    fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

const FREE: u8 = 0;
/// `Ftl::p2l_chunk` of a block not opened yet.
const NO_CHUNK: u32 = u32::MAX;
/// L2P entry of a trimmed unit of an aged FTL (slot + 1 is at most `u32::MAX - 1`).
const TRIMMED: u32 = u32::MAX;
const ACTIVE: u8 = 1;
const SEALED: u8 = 2;

/// The page-mapped FTL (see the module doc).
pub struct Ftl {
    g: FtlGeometry,
    units_per_block: u32,
    /// Logical unit -> slot + 1, 0 = not written since preconditioning (see [`Self::slot_of`]).
    l2p: L2p,
    /// Logical unit of each slot written since preconditioning, by P2L chunk (see `p2l_chunk`).
    p2l: Packed,
    /// Per block: its chunk of `units_per_block` entries in `p2l` (`NO_CHUNK` until the block is
    /// first opened; a clean FTL gives block `b` chunk `b`), so that an aged device touches the
    /// memory of the blocks it writes only.
    p2l_chunk: Vec<u32>,
    chunks_used: u32,
    /// GC's buffer of a victim's units (kept from one collection to the next).
    gc_units: Vec<u32>,
    /// The preconditioned layout, read implicitly (`None` on a clean FTL).
    aged: Option<Box<AgedLayout>>,
    /// One bit per physical slot: valid (a GC scan reads it instead of probing the L2P).
    live: Vec<u64>,
    valid: Vec<u32>,
    state: Vec<u8>,
    /// Per die: active block and its next page.
    active: Vec<(u32, u32)>,
    free: Vec<Vec<u32>>,
    victim: Box<dyn victim::Victim>,
    /// When blocks start on a bitmap word and pages never straddle one (units per block a
    /// multiple of 64, units per page a power of two up to 64): a mask with the bit of each page's
    /// first slot in a word, for GC's word-at-a-time scan.
    word_page_mask: Option<u64>,
    clock: u64,
    stats: FtlStats,
}

/// Bytes of the tables [`Ftl::new`] allocates for `g` (an upper estimate; the tables are
/// zeroed lazily by the kernel, and preconditioning or a full write pass touches them all):
/// the 4-byte L2P per logical unit, the bit-packed P2L and the valid bitmap per physical unit,
/// the per-block counters and states, the free lists, and the victim policy's per-block links
/// and per-(die, valid count) list heads. Saturates instead of overflowing, so an absurd
/// geometry estimates as `u64::MAX` and is refused.
pub fn estimated_bytes(g: &FtlGeometry) -> u64 {
    let logical = g.logical_units;
    let physical = g.physical_units();
    let blocks = g.blocks();
    let dies = g.dies as u64;
    let bits = u64::from((64 - (logical.max(2) - 1).leading_zeros()).max(1));
    let levels = u64::from(g.units_per_block()) + 1;
    let parts = [
        logical.saturating_mul(4),                                          // l2p
        (physical.saturating_mul(bits).div_ceil(64) + 1).saturating_mul(8), // p2l
        physical.div_ceil(64).saturating_mul(8),                            // live bitmap
        blocks.saturating_mul(4 + 1 + 4), // valid, state, free lists
        dies.saturating_mul(8 + 24),      // active, free list heads
        blocks.saturating_mul(8 + 8),     // victim links, ages
        dies.saturating_mul(levels).saturating_mul(8), // victim list heads
    ];
    parts.iter().fold(0u64, |a, &b| a.saturating_add(b))
}

impl Ftl {
    /// Bytes held by the FTL's tables now (capacities of its vectors), to check
    /// [`estimated_bytes`] against.
    #[cfg(test)]
    fn allocated_bytes(&self) -> u64 {
        use std::mem::size_of_val;
        let v = |bytes: usize| bytes as u64;
        v(self.l2p.heap_bytes())
            + v(self.p2l.words.capacity() * 8)
            + v(self.p2l_chunk.capacity() * 4)
            + self.aged.as_deref().map_or(0, |a| v(a.heap_bytes()))
            + v(self.live.capacity() * 8)
            + v(size_of_val(&self.valid[..]))
            + v(self.state.capacity())
            + v(self.active.capacity() * 8)
            + self
                .free
                .iter()
                .map(|f| 24 + f.capacity() as u64 * 4)
                .sum::<u64>()
    }

    /// Bytes of the tables written so far (a clean FTL's lazily zeroed tables count in full):
    /// what the process has resident, give or take the pages around each table's end.
    #[cfg(test)]
    fn touched_bytes(&self) -> u64 {
        let chunk_bytes = u64::from(self.units_per_block) * u64::from(self.p2l.bits) / 8;
        let block_tables =
            self.valid.capacity() * 4 + self.state.capacity() + self.p2l_chunk.capacity() * 4;
        self.l2p.heap_bytes() as u64
            + u64::from(self.chunks_used) * chunk_bytes
            + self.live.capacity() as u64 * 8
            + block_tables as u64
            + self.aged.as_deref().map_or(0, |a| a.heap_bytes() as u64)
    }

    /// A clean FTL. The geometry must pass [`FtlGeometry::check`] (the SSD validates it).
    pub fn new(g: FtlGeometry) -> Self {
        let n = g.logical_units;
        Self::with_l2p(g, L2p::Dense(huge_zeroed(n as usize)), true)
    }

    /// An FTL with mapping table `l2p`, every block's P2L chunk assigned up front (`chunks`)
    /// or when the block is first opened.
    fn with_l2p(g: FtlGeometry, l2p: L2p, chunks: bool) -> Self {
        debug_assert!(g.check().is_ok(), "{:?}", g.check());
        let upb = g.units_per_block();
        let blocks = g.blocks() as usize;
        let bits = (64 - (g.logical_units.max(2) - 1).leading_zeros()).max(1);
        let mut f = Self {
            units_per_block: upb,
            l2p,
            p2l: Packed::zeroed(g.physical_units(), bits),
            p2l_chunk: if chunks {
                (0..blocks as u32).collect()
            } else {
                vec![NO_CHUNK; blocks]
            },
            chunks_used: if chunks { blocks as u32 } else { 0 },
            gc_units: Vec::with_capacity(upb as usize),
            aged: None,
            live: huge_zeroed(g.physical_units().div_ceil(64) as usize),
            valid: vec![0; blocks],
            state: vec![FREE; blocks],
            active: vec![(0, 0); g.dies],
            free: vec![Vec::new(); g.dies],
            victim: victim::build(g.policy, g.dies, g.blocks_per_die, upb),
            word_page_mask: (upb.is_multiple_of(64)
                && g.units_per_page <= 64
                && g.units_per_page.is_power_of_two())
            .then(|| {
                (0..64)
                    .step_by(g.units_per_page as usize)
                    .fold(0u64, |m, i| m | 1 << i)
            }),
            clock: 0,
            stats: FtlStats::default(),
            g,
        };
        for die in 0..f.g.dies {
            f.reset_die_free(die, 0);
        }
        f
    }

    /// Die `die`: blocks `first..` are free, block `first` becomes the active one.
    fn reset_die_free(&mut self, die: usize, first: u32) {
        let bpd = self.g.blocks_per_die;
        let base = die as u32 * bpd;
        self.free[die] = (first + 1..bpd).rev().map(|i| base + i).collect();
        self.active[die] = (base + first, 0);
        self.state[(base + first) as usize] = ACTIVE;
        self.assign_chunk(base + first);
    }

    /// Give block `b` its P2L chunk if it has none yet (the next unused one).
    #[inline]
    fn assign_chunk(&mut self, b: u32) {
        if self.p2l_chunk[b as usize] == NO_CHUNK {
            self.p2l_chunk[b as usize] = self.chunks_used;
            self.chunks_used += 1;
        }
    }

    /// Where the P2L entry of slot `s` is.
    #[inline]
    fn p2l_index(&self, s: u32) -> u64 {
        let (b, i) = (s / self.units_per_block, s % self.units_per_block);
        let c = self.p2l_chunk[b as usize];
        debug_assert!(c != NO_CHUNK, "block {b} written without a P2L chunk");
        c as u64 * self.units_per_block as u64 + i as u64
    }

    /// The slot logical unit `u` (< logical units) lives in, if mapped: its L2P entry, or, if it
    /// has none, its preconditioned slot. A unit leaves its preconditioned slot only by being
    /// written, moved by GC or trimmed, and each of these gives it an entry (a trimmed unit of
    /// an aged FTL gets `TRIMMED`), so a unit without one is still where the layout put it.
    #[inline]
    fn slot_of(&self, u: u64) -> Option<u32> {
        match self.l2p.get(u) {
            0 => self.aged.as_deref().map(|a| a.slot_of(u)),
            TRIMMED => None,
            e => Some(e - 1),
        }
    }

    /// The logical unit valid slot `s` holds: derived from the preconditioned layout while its
    /// block is in that incarnation, else its P2L entry (GC reads a victim's units the same
    /// way, with [`Self::victim_unit`]).
    #[cfg(test)]
    fn unit_at(&self, s: u32) -> u64 {
        if let Some(a) = self.aged.as_deref() {
            if let Some(u) = a.unit_at(s / self.units_per_block, s % self.units_per_block) {
                return u;
            }
        }
        self.p2l.get(self.p2l_index(s))
    }

    /// Pages of `die`'s active block still free for host data: the host pages until the die
    /// opens a new block (and collects again, once it is short of free blocks).
    pub fn host_pages_left(&self, die: usize) -> u32 {
        self.g.pages_per_block - self.active[die].1
    }

    /// Page number, within its block, of the page `die` allocated last (after
    /// [`Ftl::write_page`]: the host page, GC copies go before it).
    pub fn last_page_in_block(&self, die: usize) -> u32 {
        self.active[die].1.saturating_sub(1)
    }

    pub fn geometry(&self) -> &FtlGeometry {
        &self.g
    }

    pub fn policy_name(&self) -> &'static str {
        self.victim.name()
    }

    pub fn stats(&self) -> FtlStats {
        let mut s = self.stats;
        s.write_amplification = if s.host_write_units == 0 {
            0.0
        } else {
            s.flash_write_units as f64 / s.host_write_units as f64
        };
        s
    }

    /// Heap bytes of the mapping and block state per logical unit.
    pub fn bytes_per_logical_unit(&self) -> f64 {
        let heap = self.l2p.heap_bytes()
            + self.p2l.heap_bytes()
            + self.p2l_chunk.capacity() * 4
            + self.aged.as_deref().map_or(0, AgedLayout::heap_bytes)
            + self.live.capacity() * 8
            + self.valid.capacity() * 4
            + self.state.capacity()
            + self.free.iter().map(|f| f.capacity() * 4).sum::<usize>()
            + self.active.capacity() * 8
            + self.g.blocks() as usize * 16; // victim policy: list links, change time
        heap as f64 / self.g.logical_units as f64
    }

    /// Free blocks of `die`.
    pub fn free_blocks(&self, die: usize) -> usize {
        self.free[die].len()
    }

    /// Where logical unit `lpn` lives: (die, global physical page), if mapped.
    #[inline]
    pub fn locate(&self, lpn: u64) -> Option<(usize, u64)> {
        if lpn >= self.g.logical_units {
            return None;
        }
        let s = self.slot_of(lpn)?;
        let page = s as u64 / self.g.units_per_page as u64;
        let die = page / (self.g.pages_per_block as u64 * self.g.blocks_per_die as u64);
        Some((die as usize, page))
    }

    /// Hint: logical unit `lpn` is about to be written (or read); start loading its mapping
    /// entry into the cache. No effect on the state.
    #[inline]
    pub fn prefetch(&self, lpn: u64) {
        if lpn < self.g.logical_units {
            self.l2p.prefetch(lpn);
            if let Some(a) = self.aged.as_deref() {
                a.prefetch(lpn);
            }
        }
    }

    /// Hint: logical unit `lpn` is about to be overwritten; start loading the state that
    /// invalidating its current copy touches (validity word, block counters, victim links).
    /// Reads the mapping entry (best prefetched first, see [`Self::prefetch`]). No effect on
    /// the state.
    #[inline]
    pub fn prefetch_old_copy(&self, lpn: u64) {
        if lpn < self.g.logical_units {
            if let Some(slot) = self.slot_of(lpn) {
                let b = self.block_of_slot(slot) as usize;
                prefetch(&self.live[(slot / 64) as usize]);
                prefetch(&self.valid[b]);
                prefetch(&self.state[b]);
                self.victim.prefetch(b as u32);
            }
        }
    }

    /// Invalidate logical unit `lpn` (TRIM). Out-of-range units are ignored.
    pub fn trim(&mut self, lpn: u64) {
        if lpn < self.g.logical_units {
            if let Some(s) = self.slot_of(lpn) {
                self.invalidate_slot(s);
                let e = if self.aged.is_some() { TRIMMED } else { 0 };
                self.l2p.set(lpn, e);
            }
        }
    }

    #[inline]
    fn block_of_slot(&self, slot: u32) -> u32 {
        slot / self.units_per_block
    }

    #[inline]
    fn set_live(&mut self, slot: u32) {
        self.live[(slot / 64) as usize] |= 1 << (slot % 64);
    }

    /// Mark slots `first..first + n` valid.
    #[inline]
    fn set_live_range(&mut self, first: u32, n: u32) {
        let (mut s, end) = (first, first + n);
        while s < end {
            let o = s % 64;
            let k = (64 - o).min(end - s);
            let mask = if k == 64 {
                u64::MAX
            } else {
                ((1u64 << k) - 1) << o
            };
            self.live[(s / 64) as usize] |= mask;
            s += k;
        }
    }

    #[inline]
    fn is_live(&self, slot: u32) -> bool {
        self.live[(slot / 64) as usize] >> (slot % 64) & 1 != 0
    }

    #[inline]
    fn invalidate_slot(&mut self, slot: u32) {
        self.live[(slot / 64) as usize] &= !(1 << (slot % 64));
        let b = self.block_of_slot(slot);
        let v = self.valid[b as usize];
        self.valid[b as usize] = v - 1;
        if self.state[b as usize] == SEALED {
            self.victim.invalidated(b, v, self.clock);
        }
    }

    /// Program one page holding `lpns` (at most `units_per_page`; out-of-range units are
    /// dropped) on `die`, or on the next die that has room. Returns the die used and the GC
    /// work the allocation caused on it (already counted in the statistics).
    pub fn write_page(&mut self, die: usize, lpns: &[u64]) -> (usize, GcWork) {
        debug_assert!(lpns.len() <= self.g.units_per_page as usize);
        let n = self.g.logical_units;
        let mut work = GcWork::default();
        let mut used = die;
        let mut page = None;
        for k in 0..self.g.dies {
            let d = (die + k) % self.g.dies;
            work = GcWork::default();
            if let Some(p) = self.alloc_page(d, true, &mut work) {
                page = Some(p);
                used = d;
                break;
            }
        }
        self.clock += lpns.len() as u64;
        let Some(page) = page else {
            // Unreachable with a checked geometry: some die always has reclaimable space.
            // The page is dropped; the old copies of its units stay mapped.
            return (used, work);
        };
        self.stats.flash_write_pages += 1;
        let base = page * self.g.units_per_page;
        for (i, &u) in lpns.iter().enumerate() {
            if u >= n {
                continue;
            }
            let slot = base + i as u32;
            // The old copy stays valid until the new one is placed (GC may still move it);
            // the same unit twice in one page: the later copy wins.
            if let Some(old) = self.slot_of(u) {
                self.invalidate_slot(old);
            }
            self.l2p.set(u, slot + 1);
            self.p2l.set(self.p2l_index(slot), u);
            self.set_live(slot);
            let b = self.block_of_slot(slot) as usize;
            self.valid[b] += 1;
            self.stats.host_write_units += 1;
            self.stats.flash_write_units += 1;
        }
        self.stats.host_write_bytes = self.stats.host_write_units * UNIT_BYTES;
        (used, work)
    }

    /// Next free page (global page number) of `die`, opening a new active block when needed.
    /// Host allocations (`host`) run GC after opening a block and never take a die's last
    /// free block, which stays reserved for GC copies so that a die can always collect.
    /// `None` if the die has no room.
    fn alloc_page(&mut self, die: usize, host: bool, work: &mut GcWork) -> Option<u32> {
        let ppb = self.g.pages_per_block;
        let mut collected = false;
        loop {
            let (blk, next) = self.active[die];
            if next < ppb {
                self.active[die] = (blk, next + 1);
                return Some(blk * ppb + next);
            }
            if host && self.free[die].len() < 2 {
                if collected {
                    return None;
                }
                self.collect(die, work);
                collected = true;
                continue;
            }
            self.open_block(die)?;
            if host && !collected {
                self.collect(die, work);
                collected = true;
            }
        }
    }

    /// Seal the (full) active block of `die` and open its next free block; `None` if the die
    /// has no free block.
    #[inline]
    fn open_block(&mut self, die: usize) -> Option<()> {
        let blk = self.active[die].0;
        let nb = self.free[die].pop()?;
        self.state[blk as usize] = SEALED;
        self.victim
            .sealed(blk, self.valid[blk as usize], self.clock);
        self.state[nb as usize] = ACTIVE;
        self.active[die] = (nb, 0);
        self.assign_chunk(nb);
        Some(())
    }

    /// GC on `die` until it has `gc_threshold` free blocks or no victim frees anything.
    fn collect(&mut self, die: usize, work: &mut GcWork) {
        let mut rounds = 0;
        while self.free[die].len() < self.g.gc_threshold as usize
            && rounds < self.g.blocks_per_die
            && self.gc_once(die, work)
        {
            rounds += 1;
        }
    }

    /// Clean one victim of `die`; false if there is none worth cleaning or no room to copy.
    fn gc_once(&mut self, die: usize, work: &mut GcWork) -> bool {
        if self.free[die].is_empty() {
            return false;
        }
        let Some(b) = self.victim.pick(die, self.clock) else {
            return false;
        };
        let upb = self.units_per_block;
        if self.valid[b as usize] >= upb {
            // Nothing to gain; put it back (it stays a candidate for later).
            self.victim.sealed(b, self.valid[b as usize], self.clock);
            return false;
        }
        let upp = self.g.units_per_page;
        let first = b * upb;
        // Where the victim's units are read: its preconditioned layout (while intact) or its
        // P2L chunk.
        let layout = self.aged.as_deref().and_then(|a| a.block(b));
        let chunk = self.p2l_chunk[b as usize] as u64 * upb as u64;
        // The victim leaves the candidates. Its valid units, in slot order, move to the
        // active block (one page per `upp` units, the last page possibly partial; a full
        // active block is sealed and the next free one opened). `read_pages` counts the victim's pages holding at least one valid unit.
        self.valid[b as usize] = 0;
        self.state[b as usize] = FREE;
        let (blk, next) = self.active[die];
        let mut cur = CopyCursor {
            blk,
            dst: blk * upb + next * upp,
            end: (blk + 1) * upb,
            start: blk * upb + next * upp,
            p2l: self.p2l_index(blk * upb),
            copied: 0,
        };
        // First the victim's units, in slot order, with their L2P entries prefetched (each is
        // a cache miss at a random place whose value the copy needs: loaded together rather
        // than one at a time), then the copies.
        let mut units = std::mem::take(&mut self.gc_units);
        units.clear();
        let read_pages = if let Some(page_mask) = self.word_page_mask {
            // Block aligned on bitmap words and pages never straddling a word: one word
            // (64 slots) at a time, clearing the victim's validity bits as it goes.
            let mut read_pages = 0;
            for w in (first / 64) as usize..((first + upb) / 64) as usize {
                let mut bits = std::mem::take(&mut self.live[w]);
                let mut any = bits;
                let mut shift = 1;
                while shift < upp {
                    any |= any >> shift;
                    shift <<= 1;
                }
                read_pages += (any & page_mask).count_ones() as u64;
                let base = w as u32 * 64 - first;
                while bits != 0 {
                    let i = bits.trailing_zeros();
                    let u = self.victim_unit(layout, chunk, base + i);
                    self.l2p.prefetch(u);
                    units.push(u as u32);
                    bits &= bits - 1;
                }
            }
            read_pages
        } else {
            let mut read_pages = 0;
            for page in 0..self.g.pages_per_block {
                let mut any = false;
                for i in 0..upp {
                    let s = first + page * upp + i;
                    if self.is_live(s) {
                        self.live[(s / 64) as usize] &= !(1 << (s % 64));
                        let u = self.victim_unit(layout, chunk, page * upp + i);
                        self.l2p.prefetch(u);
                        units.push(u as u32);
                        any = true;
                    }
                }
                read_pages += any as u64;
            }
            read_pages
        };
        for &u in &units {
            self.gc_copy(die, &mut cur, u);
        }
        self.gc_units = units;
        self.gc_close_run(die, &cur);
        if let Some(a) = self.aged.as_deref_mut() {
            a.intact[b as usize] = false;
        }
        let copied = cur.copied;
        let programs = copied.div_ceil(upp as u64);
        self.free[die].push(b);
        work.read_pages += read_pages;
        work.program_pages += programs;
        work.erases += 1;
        self.stats.gc_count += 1;
        self.stats.erase_count += 1;
        self.stats.gc_copied_units += copied;
        self.stats.flash_write_units += copied;
        self.stats.flash_write_pages += programs;
        true
    }

    /// GC: the unit of valid slot `i` of the victim, whose layout is `layout` and P2L chunk
    /// starts at `chunk` (as `unit_at` in the tests).
    #[inline(always)]
    fn victim_unit(&self, layout: Option<LayoutBlock>, chunk: u64, i: u32) -> u64 {
        if let (Some(l), Some(a)) = (layout, self.aged.as_deref()) {
            if let Some(u) = a.unit_in(l, i) {
                return u;
            }
        }
        self.p2l.get(chunk + i as u64)
    }

    /// GC: copy logical unit `u` to the next slot of `die`'s active block (see `gc_once`).
    #[inline(always)]
    fn gc_copy(&mut self, die: usize, cur: &mut CopyCursor, u: u32) {
        if cur.dst == cur.end {
            self.gc_next_block(die, cur);
        }
        self.l2p.set(u as u64, cur.dst + 1);
        let i = cur.dst - cur.blk * self.units_per_block;
        self.p2l.set(cur.p2l + i as u64, u as u64);
        cur.dst += 1;
        cur.copied += 1;
    }

    /// GC: the active block is full; seal it and continue in the next free block.
    #[cold]
    #[inline(never)]
    fn gc_next_block(&mut self, die: usize, cur: &mut CopyCursor) {
        self.gc_close_run(die, cur);
        self.open_block(die)
            .expect("a free block is reserved for GC copies");
        let blk = self.active[die].0;
        cur.blk = blk;
        cur.dst = blk * self.units_per_block;
        cur.start = cur.dst;
        cur.end = cur.dst + self.units_per_block;
        cur.p2l = self.p2l_index(cur.dst);
    }

    /// GC: account the slots `cur.start..cur.dst` copied into block `cur.blk` (validity bits,
    /// valid count, the active block's next page).
    #[inline]
    fn gc_close_run(&mut self, die: usize, cur: &CopyCursor) {
        let n = cur.dst - cur.start;
        self.set_live_range(cur.start, n);
        self.valid[cur.blk as usize] += n;
        let used = cur.dst - cur.blk * self.units_per_block;
        self.active[die] = (cur.blk, used.div_ceil(self.g.units_per_page));
    }

    /// Map every logical unit once, in the GC steady state of uniform random overwrites (see
    /// the module doc). Replaces any previous content. Deterministic for a given `seed`.
    pub fn precondition_aged(&mut self, seed: u64) {
        let g = self.g.clone();
        let upb = self.units_per_block;
        let upp = g.units_per_page;
        let bpd = g.blocks_per_die;
        let data_blocks = bpd - g.gc_threshold - 1;
        let n = g.logical_units;
        *self = Self::with_l2p(g.clone(), L2p::Sparse(SparseMap::new(n)), false);
        // Per die: the active block's valid units (its phase in the GC cycle) and the valid
        // units per sealed block (oldest first).
        let mut phase_rng = Rng::derive(seed, "ssd/ftl/phase");
        let mut active_units: Vec<u32> = Vec::with_capacity(g.dies);
        let mut counts: Vec<Vec<u32>> = Vec::with_capacity(g.dies);
        for die in 0..g.dies {
            let share = g.logical_units / g.dies as u64
                + u64::from((die as u64) < g.logical_units % g.dies as u64);
            let alpha = data_blocks as f64 * upb as f64 / share.max(1) as f64;
            let v = steady_state_victim_fraction(alpha);
            let phase = phase_rng.unit();
            let a = ((upb as f64 * (v + phase * (1.0 - v))).floor() as u64)
                .min(upb as u64)
                .min(share) as u32;
            active_units.push(a);
            counts.push(steady_state_counts(data_blocks, upb, share - a as u64));
        }
        // Random assignment of logical units to valid slots: the j-th valid slot (blocks in
        // order, slots in order within a block) holds unit perm(j), perm a seeded
        // pseudo-random bijection of 0..U. Nothing per unit is stored: the L2P starts empty
        // and both directions are computed when asked (`AgedLayout`); built here are the
        // per-block valid counts and validity bits and the units before each block.
        let blocks = g.blocks() as usize;
        let mut before = Vec::with_capacity(blocks + 1);
        let mut j = 0u64;
        let mut patterns: Vec<Option<Vec<u64>>> = vec![None; upb as usize + 1];
        for (die, c) in counts.iter().enumerate() {
            for k in 0..bpd {
                let b = die as u32 * bpd + k;
                before.push(j as u32);
                let v = match k.cmp(&data_blocks) {
                    std::cmp::Ordering::Less => c[k as usize],
                    std::cmp::Ordering::Equal => active_units[die],
                    std::cmp::Ordering::Greater => 0,
                };
                if k == data_blocks {
                    // The active block: its first `v` slots (written in order, nothing
                    // overwritten yet).
                    self.set_live_range(b * upb, v);
                } else if upb.is_multiple_of(64) {
                    // A sealed block: `v` units spread over its slots; the same bit pattern
                    // for every block of `v` units, copied word by word.
                    let pattern = patterns[v as usize].get_or_insert_with(|| {
                        let mut w = vec![0u64; (upb / 64) as usize];
                        for i in spread(v, upb) {
                            w[(i / 64) as usize] |= 1 << (i % 64);
                        }
                        w
                    });
                    let first = (b * upb / 64) as usize;
                    self.live[first..first + pattern.len()].copy_from_slice(pattern);
                } else {
                    for i in spread(v, upb) {
                        self.set_live(b * upb + i);
                    }
                }
                self.valid[b as usize] = v;
                j += v as u64;
            }
        }
        before.push(j as u32);
        debug_assert_eq!(j, g.logical_units);
        let index_shift = upb.ilog2();
        let mut index = Vec::with_capacity((j >> index_shift) as usize + 1);
        for (b, w) in before.windows(2).enumerate() {
            while ((index.len() as u64) << index_shift) < w[1] as u64 {
                index.push(b as u32);
            }
        }
        self.aged = Some(Box::new(AgedLayout {
            perm: Bijection::new(g.logical_units, seed),
            intact: before.windows(2).map(|w| w[1] > w[0]).collect(),
            before,
            index,
            index_shift,
            upb,
            upb_shift: upb.is_power_of_two().then(|| upb.ilog2()),
            bpd,
            active_index: data_blocks,
        }));
        // Oldest blocks are sealed first with the oldest change times (age in host writes
        // over one GC cycle ≈ data_blocks × S × (1 - v) spread evenly).
        let cycle = data_blocks as u64 * upb as u64;
        self.clock = cycle;
        for (die, c) in counts.iter().enumerate() {
            let base = die as u32 * bpd;
            for (k, &v) in c.iter().enumerate() {
                let b = base + k as u32;
                self.state[b as usize] = SEALED;
                let t = cycle * k as u64 / data_blocks as u64;
                self.victim.sealed(b, v, t);
            }
            self.reset_die_free(die, data_blocks);
            let (blk, _) = self.active[die];
            self.active[die] = (blk, active_units[die].div_ceil(upp));
        }
    }
}

/// A zeroed vector of `n` integers whose memory the kernel is asked to back with transparent
/// huge pages (Linux `madvise(MADV_HUGEPAGE)`; a hint, ignored where unsupported or disabled):
/// the mapping tables are hundreds of MiB accessed at random, where 4 KiB pages cost a TLB
/// miss per access. The memory is not touched here (it stays unallocated until written, as
/// with `vec![0; n]`).
fn huge_zeroed<T: Copy + Default>(n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn madvise(
                addr: *mut std::ffi::c_void,
                len: usize,
                advice: std::ffi::c_int,
            ) -> std::ffi::c_int;
        }
        const MADV_HUGEPAGE: std::ffi::c_int = 14;
        const HUGE: usize = 2 << 20;
        let start = v.as_mut_ptr() as usize;
        let end = start + n * std::mem::size_of::<T>();
        let (a, b) = ((start + HUGE - 1) & !(HUGE - 1), end & !(HUGE - 1));
        if b > a {
            // SAFETY: the range lies inside this vector's allocation; MADV_HUGEPAGE only
            // changes how the kernel backs it, never its contents (its result is ignored).
            unsafe {
                madvise(a as *mut std::ffi::c_void, b - a, MADV_HUGEPAGE);
            }
        }
    }
    v
}

/// Start loading the cache line holding `*r` (a hint; no-op where unsupported).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` only hints the cache, never faults and has no architectural
    // effect; SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            r as *const T as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Where GC copies go: slots `start..dst` of block `blk` written so far in this run, `end` the
/// block's end; `copied` units in the whole collection.
struct CopyCursor {
    blk: u32,
    dst: u32,
    end: u32,
    start: u32,
    /// P2L index of the block's first slot.
    p2l: u64,
    copied: u64,
}

/// The logical-to-physical table: slot + 1 per logical unit, 0 = no entry, `TRIMMED`. Dense (one `u32`
/// per unit) on a clean FTL; on an aged one it starts as a hash table holding the units
/// written or moved since preconditioning, and becomes dense once the table would outgrow
/// the dense array (same answers either way).
enum L2p {
    Dense(Vec<u32>),
    Sparse(SparseMap),
}

impl L2p {
    #[inline]
    fn get(&self, u: u64) -> u32 {
        match self {
            Self::Dense(v) => v[u as usize],
            Self::Sparse(m) => m.get(u as u32),
        }
    }

    #[inline]
    fn set(&mut self, u: u64, e: u32) {
        match self {
            Self::Dense(v) => v[u as usize] = e,
            Self::Sparse(m) => {
                if m.set(u as u32, e) {
                    self.densify();
                }
            }
        }
    }

    /// Replace the hash table by the dense array (it is full: inserting another key would
    /// make it larger than the array).
    #[cold]
    #[inline(never)]
    fn densify(&mut self) {
        if let Self::Sparse(m) = self {
            let mut v: Vec<u32> = huge_zeroed(m.n as usize);
            for &(k, e) in &m.entries {
                if k != 0 {
                    v[k as usize - 1] = e;
                }
            }
            *self = Self::Dense(v);
        }
    }

    #[inline]
    fn prefetch(&self, u: u64) {
        match self {
            Self::Dense(v) => prefetch(&v[u as usize]),
            Self::Sparse(m) => prefetch(&m.entries[m.home(u as u32)]),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Dense(v) => v.capacity() * 4,
            Self::Sparse(m) => m.entries.capacity() * 8,
        }
    }
}

/// Open addressing with linear probing (Knuth, TAOCP vol. 3, 6.4, algorithm L) and
/// Fibonacci hashing (multiplicative, ibid.), keys `u32` logical units (stored plus one, so
/// that a zeroed table is empty and is allocated lazily), values `u32`; keys are never
/// removed (a trimmed unit keeps its key with value 0). Load at most 3/4, the capacity a
/// power of two.
struct SparseMap {
    /// Logical units of the device (the size of the dense array it turns into).
    n: u64,
    /// (key + 1, value); (0, 0) is an empty place.
    entries: Vec<(u32, u32)>,
    len: usize,
    shift: u32,
}

impl SparseMap {
    fn new(n: u64) -> Self {
        Self::with_capacity(n, 1 << 16)
    }

    fn with_capacity(n: u64, cap: usize) -> Self {
        debug_assert!(cap.is_power_of_two() && n < u32::MAX as u64);
        Self {
            n,
            entries: huge_zeroed(cap),
            len: 0,
            shift: 64 - cap.trailing_zeros(),
        }
    }

    #[inline]
    fn home(&self, k: u32) -> usize {
        ((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn get(&self, k: u32) -> u32 {
        let mask = self.entries.len() - 1;
        let mut i = self.home(k);
        loop {
            let (key, e) = self.entries[i];
            if key == k + 1 {
                return e;
            }
            if key == 0 {
                return 0;
            }
            i = (i + 1) & mask;
        }
    }

    /// Set `k`'s value to `e` (an absent key with `e` = 0 is left absent). True if the table
    /// is full and should become the dense array (nothing was inserted then).
    #[inline]
    fn set(&mut self, k: u32, e: u32) -> bool {
        let mask = self.entries.len() - 1;
        let mut i = self.home(k);
        loop {
            let key = self.entries[i].0;
            if key == k + 1 {
                self.entries[i].1 = e;
                return false;
            }
            if key == 0 {
                break;
            }
            i = (i + 1) & mask;
        }
        if e == 0 {
            return false;
        }
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            // Doubling would make the table larger than the dense array: become it.
            if self.entries.len() as u64 * 2 * 8 > self.n * 4 {
                return true;
            }
            self.grow();
            return self.set(k, e);
        }
        self.entries[i] = (k + 1, e);
        self.len += 1;
        false
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let mut bigger = Self::with_capacity(self.n, self.entries.len() * 2);
        let mask = bigger.entries.len() - 1;
        for &(k, e) in &self.entries {
            if k != 0 {
                let mut i = bigger.home(k - 1);
                while bigger.entries[i].0 != 0 {
                    i = (i + 1) & mask;
                }
                bigger.entries[i] = (k, e);
            }
        }
        bigger.len = self.len;
        *self = bigger;
    }
}

/// The preconditioned layout of an aged FTL (see the module doc), kept implicit: the j-th
/// valid slot (blocks in order, slots in order within a block) holds logical unit `perm(j)`.
/// A sealed block of `v` preconditioned units holds them in the slots [`spread`] gives, the
/// die's active block in its first `v` slots.
struct AgedLayout {
    perm: Bijection,
    /// Per block, units of the layout in the blocks before it (one more entry at the end:
    /// the total).
    before: Vec<u32>,
    /// Per block: still in its preconditioned incarnation (holds layout units, not erased
    /// since).
    intact: Vec<bool>,
    /// `index[q]`: the block holding the layout's unit number `q << index_shift` (a block
    /// holds up to `upb` of them, so the block of any `j` is a step or two after
    /// `index[j >> index_shift]`).
    index: Vec<u32>,
    index_shift: u32,
    upb: u32,
    /// log2(upb) when it is a power of two (a shift then replaces the divisions).
    upb_shift: Option<u32>,
    bpd: u32,
    /// Index within its die of each die's preconditioned active block.
    active_index: u32,
}

/// What the GC needs of one victim block's layout: its first unit number, its unit count,
/// and whether its units are spread (a sealed block) or first (the active block).
#[derive(Clone, Copy)]
struct LayoutBlock {
    first: u32,
    v: u32,
    spread: bool,
}

impl AgedLayout {
    /// Slot the layout gives unit `u`: j = perm⁻¹(u), its block the last with
    /// `before[b] <= j`, then its `k`-th layout slot in the block, k = j - before[b].
    #[inline]
    fn slot_of(&self, u: u64) -> u32 {
        let j = self.perm.inverse(u) as u32;
        let mut b = self.index[(j >> self.index_shift) as usize] as usize;
        while self.before[b + 1] <= j {
            b += 1;
        }
        let k = j - self.before[b];
        let i = if self.is_active(b as u32) {
            k
        } else {
            let v = (self.before[b + 1] - self.before[b]) as u64;
            // The k-th slot of `spread(v, upb)`.
            (((k as u64 + 1) * self.upb as u64).div_ceil(v) - 1) as u32
        };
        b as u32 * self.upb + i
    }

    /// Unit the layout puts in slot `i` of block `b`, if the block is still in its layout
    /// incarnation and the slot one of the layout's. Asked only for valid slots, so a
    /// sealed block's slot is one of `spread`'s: slots `0..=i` hold ⌊(i+1)·v/upb⌋ of its units.
    #[cfg(test)]
    fn unit_at(&self, b: u32, i: u32) -> Option<u64> {
        self.block(b).and_then(|l| self.unit_in(l, i))
    }

    /// Hint: the layout slot of `u` will be asked for; start loading the index entry it
    /// reads first.
    #[inline]
    fn prefetch(&self, u: u64) {
        let j = self.perm.inverse(u) as u32;
        prefetch(&self.index[(j >> self.index_shift) as usize]);
    }

    /// Whether block `b` is its die's preconditioned active block.
    #[inline]
    fn is_active(&self, b: u32) -> bool {
        let i = if self.bpd.is_power_of_two() {
            b & (self.bpd - 1)
        } else {
            b % self.bpd
        };
        i == self.active_index
    }

    /// Block `b`'s layout, if it is still in its preconditioned incarnation.
    #[inline]
    fn block(&self, b: u32) -> Option<LayoutBlock> {
        if !self.intact[b as usize] {
            return None;
        }
        let first = self.before[b as usize];
        Some(LayoutBlock {
            first,
            v: self.before[b as usize + 1] - first,
            spread: !self.is_active(b),
        })
    }

    /// Unit of slot `i` (a valid one) of block `l`, if the layout put it there.
    #[inline]
    fn unit_in(&self, l: LayoutBlock, i: u32) -> Option<u64> {
        let k = if !l.spread {
            if i >= l.v {
                return None; // written after preconditioning
            }
            i
        } else {
            let x = (i as u64 + 1) * l.v as u64;
            let q = match self.upb_shift {
                Some(sh) => x >> sh,
                None => x / self.upb as u64,
            };
            (q - 1) as u32
        };
        Some(self.perm.get((l.first + k) as u64))
    }

    fn heap_bytes(&self) -> usize {
        self.before.capacity() * 4 + self.intact.capacity() + self.index.capacity() * 4
    }
}

/// A seeded pseudo-random permutation of `0..n` in O(1) memory: an invertible mixer on
/// `bits`-bit integers (add a key, multiply by an odd key, xor-shift right; four rounds), with
/// cycle walking until the value falls below `n` (fewer than two steps on average).
struct Bijection {
    n: u64,
    mask: u64,
    shift: u32,
    keys: [(u64, u64); 4],
    /// The multipliers' inverses modulo 2^64, for [`Self::unmix`].
    inv: [u64; 4],
}

impl Bijection {
    fn new(n: u64, seed: u64) -> Self {
        let bits = (64 - n.max(2).saturating_sub(1).leading_zeros()).max(2);
        let mut rng = Rng::derive(seed, "ssd/ftl/precondition");
        let mut keys = [(0, 0); 4];
        for k in keys.iter_mut() {
            *k = (rng.next_u64(), rng.next_u64() | 1);
        }
        Self {
            n,
            mask: if bits == 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
            shift: bits.div_ceil(2),
            inv: keys.map(|(_, mul)| inverse_mod_2_64(mul)),
            keys,
        }
    }

    #[inline]
    fn mix(&self, mut x: u64) -> u64 {
        for &(add, mul) in &self.keys {
            x = x.wrapping_add(add) & self.mask;
            x = x.wrapping_mul(mul) & self.mask;
            x ^= x >> self.shift;
        }
        x
    }

    #[inline]
    fn get(&self, j: u64) -> u64 {
        let mut x = self.mix(j);
        while x >= self.n {
            x = self.mix(x);
        }
        x
    }

    /// The inverse of [`Self::mix`]: the rounds undone in reverse order (the xor-shift by at
    /// least half the width is its own inverse; the multiplier's inverse modulo 2^bits).
    #[inline]
    fn unmix(&self, mut x: u64) -> u64 {
        for (&(add, _), &inv) in self.keys.iter().zip(&self.inv).rev() {
            x ^= x >> self.shift;
            x = x.wrapping_mul(inv) & self.mask;
            x = x.wrapping_sub(add) & self.mask;
        }
        x
    }

    /// `j` with `get(j) == u`: cycle walking backwards (the values between `j` and `u` on
    /// the cycle are all `>= n`).
    #[inline]
    fn inverse(&self, u: u64) -> u64 {
        let mut x = self.unmix(u);
        while x >= self.n {
            x = self.unmix(x);
        }
        x
    }
}

/// The inverse of odd `a` modulo 2^64 (Newton's iteration `x ← x(2 - ax)`, which doubles the
/// correct low bits each step: 5 steps from the 3 bits `x = a` gives).
fn inverse_mod_2_64(a: u64) -> u64 {
    (0..5).fold(a, |x, _| {
        x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)))
    })
}

/// Offsets of `v` valid units spread evenly over `upb` slots.
///
/// Slot `i` holds a unit when `⌊(i+1)·v/upb⌋ > ⌊i·v/upb⌋` (for `v ≤ upb` each step adds at
/// most one); the `k`-th such slot is the least `i` with `(i+1)·v ≥ (k+1)·upb`, i.e.
/// `⌈(k+1)·upb/v⌉ - 1`: one division per valid unit rather than two per slot.
fn spread(v: u32, upb: u32) -> impl Iterator<Item = u32> {
    debug_assert!(v <= upb);
    let (v64, upb64) = (v as u64, upb as u64);
    (0..v64).map(move |k| (((k + 1) * upb64).div_ceil(v64) - 1) as u32)
}

/// Victim valid fraction `v` of the fluid model: the root in (0, 1) of `v = exp(-α(1-v))`
/// (α > 1), i.e. `-W0(-α e^-α)/α`.
pub fn steady_state_victim_fraction(alpha: f64) -> f64 {
    if alpha <= 1.0 {
        return 1.0;
    }
    let g = |v: f64| (-alpha * (1.0 - v)).exp() - v;
    // g > 0 at 0, g < 0 at its minimum 1 - ln(α)/α.
    let (mut lo, mut hi) = (0.0f64, 1.0 - alpha.ln() / alpha);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if g(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Closed-form steady-state write amplification of FIFO cleaning (and of greedy for large
/// blocks) under uniform random writes: `1/(1-v) = α/(α + W0(-α e^-α))`, α = physical/logical.
pub fn steady_state_write_amplification(alpha: f64) -> f64 {
    1.0 / (1.0 - steady_state_victim_fraction(alpha))
}

/// Valid units of `blocks` blocks of `upb` units holding `units` in total, oldest first,
/// following the fluid steady state `upb·exp(-α(1-v)·x)`, x = relative age.
fn steady_state_counts(blocks: u32, upb: u32, units: u64) -> Vec<u32> {
    let alpha = blocks as f64 * upb as f64 / units.max(1) as f64;
    let v = steady_state_victim_fraction(alpha);
    let rate = alpha * (1.0 - v);
    let mut c: Vec<u32> = (0..blocks)
        .map(|k| {
            let x = 1.0 - (k as f64 + 0.5) / blocks as f64; // oldest first
            ((upb as f64 * (-rate * x).exp()).round() as u32).min(upb)
        })
        .collect();
    // Make the total exact, adjusting the youngest (fullest) or oldest blocks.
    let mut total: u64 = c.iter().map(|&x| x as u64).sum();
    let mut k = c.len();
    while total < units {
        k = if k == 0 { c.len() - 1 } else { k - 1 };
        if c[k] < upb {
            c[k] += 1;
            total += 1;
        }
    }
    let mut k = 0;
    while total > units {
        if c[k] > 0 {
            c[k] -= 1;
            total -= 1;
        }
        k = (k + 1) % c.len();
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_picks_the_slots_where_the_even_share_steps_up() {
        // The definition: slot i holds a unit when ⌊(i+1)·v/upb⌋ > ⌊i·v/upb⌋.
        for upb in [1u32, 2, 3, 7, 64, 255, 256, 1000] {
            for v in 0..=upb {
                let by_definition: Vec<u32> = (0..upb)
                    .filter(|&i| {
                        ((i as u64 + 1) * v as u64) / upb as u64
                            > (i as u64 * v as u64) / upb as u64
                    })
                    .collect();
                assert_eq!(
                    spread(v, upb).collect::<Vec<_>>(),
                    by_definition,
                    "v={v} upb={upb}"
                );
            }
        }
    }

    fn geo(gib: u64, dies: usize, op: f64, policy: GcPolicy) -> FtlGeometry {
        let logical_units = (gib << 30) / UNIT_BYTES;
        let (ppb, upp) = (256u32, 2u32);
        let raw = ((gib << 30) as f64 * (1.0 + op)) as u64;
        let block_bytes = ppb as u64 * upp as u64 * UNIT_BYTES;
        let blocks_per_die = raw.div_ceil(dies as u64 * block_bytes) as u32;
        FtlGeometry {
            dies,
            blocks_per_die,
            pages_per_block: ppb,
            units_per_page: upp,
            logical_units,
            gc_threshold: 2,
            policy,
        }
    }

    #[test]
    fn the_memory_estimate_covers_a_small_devices_real_tables_and_scales_with_capacity() {
        for policy in [GcPolicy::Greedy, GcPolicy::Fifo, GcPolicy::CostBenefit] {
            let g = geo(1, 4, 0.07, policy);
            let mut f = Ftl::new(g.clone());
            sequential_fill(&mut f);
            let (real, est) = (f.allocated_bytes(), estimated_bytes(&g));
            // The estimate adds the victim policy's tables, which allocated_bytes leaves out.
            assert!(
                est >= real && est < real + real / 4,
                "{policy:?}: {est} vs {real}"
            );
            // An aged device allocates less until its L2P becomes dense, and no more after.
            let mut f = Ftl::new(g.clone());
            f.precondition_aged(3);
            assert!(f.allocated_bytes() < real, "{policy:?}");
            let mut rng = Rng::new(1);
            random_writes(&mut f, &mut rng, g.logical_units);
            assert!(matches!(f.l2p, L2p::Dense(_)));
            assert!(est >= f.allocated_bytes(), "{policy:?}");
        }
        // 14 TiB: the L2P alone is 4 bytes per 4 KiB (about 15 GB).
        let g = geo(14 << 10, 32, 0.07, GcPolicy::Greedy);
        let est = estimated_bytes(&g);
        assert!(est > 15_000_000_000 && est < 40_000_000_000, "{est}");
        // Absurd shapes saturate instead of overflowing.
        let mut g = geo(1, 4, 0.07, GcPolicy::Greedy);
        g.logical_units = u64::MAX;
        assert_eq!(estimated_bytes(&g), u64::MAX);
    }

    /// The 840 Pro geometry: 256,060,514,304 bytes, 32 dies, 2 MiB blocks, 256 GiB raw.
    fn geo_840_pro() -> FtlGeometry {
        FtlGeometry {
            dies: 32,
            blocks_per_die: 4096,
            pages_per_block: 256,
            units_per_page: 2,
            logical_units: 256_060_514_304 / UNIT_BYTES,
            gc_threshold: 4,
            policy: GcPolicy::Greedy,
        }
    }

    /// α over the blocks that circulate: all but the GC reserve, the active block half full.
    fn effective_alpha(g: &FtlGeometry) -> f64 {
        let per_die = g.logical_units as f64 / g.dies as f64;
        (g.blocks_per_die as f64 - g.gc_threshold as f64 - 0.5) * g.units_per_block() as f64
            / per_die
    }

    /// Mapping, reverse map, validity bits and valid counts agree.
    fn check_invariants(f: &Ftl) {
        let upb = f.units_per_block;
        let mut per_block = vec![0u32; f.valid.len()];
        for s in 0..f.g.physical_units() as u32 {
            if f.is_live(s) {
                let u = f.unit_at(s);
                assert_eq!(f.slot_of(u), Some(s), "slot {s}");
                per_block[(s / upb) as usize] += 1;
            }
        }
        assert_eq!(per_block, f.valid);
        let mapped = (0..f.g.logical_units)
            .filter(|&u| f.slot_of(u).is_some())
            .count() as u64;
        assert_eq!(mapped, f.valid.iter().map(|&v| v as u64).sum::<u64>());
    }

    fn random_writes(f: &mut Ftl, rng: &mut Rng, pages: u64) {
        let n = f.geometry().logical_units;
        let dies = f.geometry().dies;
        let mut die = 0;
        for _ in 0..pages {
            let units = [rng.below(n), rng.below(n)];
            f.write_page(die, &units);
            die = (die + 1) % dies;
        }
    }

    fn sequential_fill(f: &mut Ftl) {
        let n = f.geometry().logical_units;
        let dies = f.geometry().dies;
        for p in 0..n / 2 {
            f.write_page(p as usize % dies, &[2 * p, 2 * p + 1]);
        }
    }

    /// WA of `pages` more random pages written after the current state.
    fn measured_wa(f: &mut Ftl, rng: &mut Rng, pages: u64) -> f64 {
        let before = f.stats();
        random_writes(f, rng, pages);
        let after = f.stats();
        (after.flash_write_units - before.flash_write_units) as f64
            / (after.host_write_units - before.host_write_units) as f64
    }

    #[test]
    fn the_closed_form_matches_published_values() {
        // Xiang & Kurkoski (2011): OP 0.3 -> WA 2.36 (simulation 2.35).
        let wa = steady_state_write_amplification(1.3);
        assert!((wa - 2.36).abs() < 0.02, "{wa}");
        assert!(steady_state_write_amplification(1.07) > 7.0);
    }

    #[test]
    fn greedy_steady_state_write_amplification_under_uniform_random_writes_matches_the_closed_form()
    {
        for op in [0.07, 0.28] {
            let g = geo(1, 1, op, GcPolicy::Greedy);
            let alpha = effective_alpha(&g);
            let want = steady_state_write_amplification(alpha);
            let mut f = Ftl::new(g.clone());
            let mut rng = Rng::new(7);
            sequential_fill(&mut f);
            let n = g.logical_units / 2; // pages per logical capacity
            random_writes(&mut f, &mut rng, 3 * n);
            let wa = measured_wa(&mut f, &mut rng, 2 * n);
            eprintln!(
                "greedy OP {op}: alpha_eff {alpha:.4}, WA measured {wa:.3}, closed form {want:.3}"
            );
            assert!((wa / want - 1.0).abs() < 0.10, "op {op}: {wa} vs {want}");
        }
    }

    #[test]
    fn every_policy_reaches_a_steady_state_and_fifo_matches_the_closed_form() {
        let mut was = Vec::new();
        for policy in [GcPolicy::Greedy, GcPolicy::Fifo, GcPolicy::CostBenefit] {
            let g = geo(1, 2, 0.15, policy);
            let want = steady_state_write_amplification(effective_alpha(&g));
            let mut f = Ftl::new(g.clone());
            assert_eq!(f.policy_name(), policy.name());
            let mut rng = Rng::new(3);
            sequential_fill(&mut f);
            let n = g.logical_units / 2;
            random_writes(&mut f, &mut rng, 2 * n);
            let wa = measured_wa(&mut f, &mut rng, n);
            check_invariants(&f);
            eprintln!("{}: WA {wa:.3} (closed form {want:.3})", policy.name());
            if policy == GcPolicy::Fifo {
                assert!((wa / want - 1.0).abs() < 0.10, "fifo {wa} vs {want}");
            }
            assert!(wa > 1.0 && wa < 2.0 * want, "{}: {wa}", policy.name());
            was.push(wa);
        }
        // Greedy never does worse than FIFO under uniform random writes.
        assert!(was[0] <= was[1] * 1.02, "{was:?}");
    }

    #[test]
    fn an_aged_device_is_already_in_the_steady_state() {
        let g = geo(1, 2, 0.07, GcPolicy::Greedy);
        let want = steady_state_write_amplification(effective_alpha(&g));
        let mut f = Ftl::new(g.clone());
        f.precondition_aged(11);
        // Every logical unit mapped exactly once, to a slot that maps back.
        let mut seen = vec![false; g.logical_units as usize];
        for u in 0..g.logical_units {
            let s = f.slot_of(u).unwrap_or_else(|| panic!("unit {u} unmapped"));
            assert_eq!(f.unit_at(s), u);
            assert!(!std::mem::replace(&mut seen[u as usize], true));
        }
        let valid: u64 = f.valid.iter().map(|&v| v as u64).sum();
        assert_eq!(valid, g.logical_units);
        assert_eq!(f.free_blocks(0), g.gc_threshold as usize);
        check_invariants(&f);
        let mut rng = Rng::new(5);
        let wa = measured_wa(&mut f, &mut rng, g.logical_units / 4);
        eprintln!("aged: first writes WA {wa:.3}, closed form {want:.3}");
        assert!((wa / want - 1.0).abs() < 0.12, "{wa} vs {want}");
    }

    #[test]
    fn the_mapping_takes_at_most_8_bytes_per_logical_page() {
        let g = geo(1, 4, 0.07, GcPolicy::Greedy);
        let f = Ftl::new(g);
        let b = f.bytes_per_logical_unit();
        eprintln!("1 GiB: {b:.3} bytes per logical 4 KiB unit");
        assert!(b <= 8.0, "{b}");
        let g = geo_840_pro();
        g.check().unwrap();
        let f = Ftl::new(g);
        let b = f.bytes_per_logical_unit();
        eprintln!("840 Pro: {b:.3} bytes per logical 4 KiB unit");
        assert!(b <= 8.0, "{b}");
    }

    #[test]
    fn trim_and_overwrite_invalidate_the_old_copy() {
        let g = geo(1, 2, 0.07, GcPolicy::Greedy);
        let mut f = Ftl::new(g);
        f.write_page(0, &[10, 11]);
        let (d0, p0) = f.locate(10).unwrap();
        assert_eq!(f.valid.iter().sum::<u32>(), 2);
        f.write_page(1, &[10, 12]);
        let (d1, p1) = f.locate(10).unwrap();
        assert_ne!((d0, p0), (d1, p1));
        assert_eq!(f.valid.iter().sum::<u32>(), 3);
        f.trim(11);
        f.trim(11);
        f.trim(u64::MAX);
        assert!(f.locate(11).is_none());
        assert_eq!(f.valid.iter().sum::<u32>(), 2);
        // Duplicates in one page and out-of-range units.
        f.write_page(0, &[12, 12]);
        f.write_page(0, &[u64::MAX, 3]);
        assert_eq!(f.valid.iter().sum::<u32>(), 3);
        assert_eq!(f.stats().host_write_units, 7);
        check_invariants(&f);
    }

    #[test]
    fn the_precondition_permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 1000, 65_537] {
            let p = Bijection::new(n, 42);
            let mut seen = vec![false; n as usize];
            for j in 0..n {
                assert!(!std::mem::replace(&mut seen[p.get(j) as usize], true));
                assert_eq!(p.inverse(p.get(j)), j);
            }
        }
        for a in [1u64, 3, 0x9E37_79B9_7F4A_7C15, u64::MAX] {
            assert_eq!(a.wrapping_mul(inverse_mod_2_64(a)), 1);
        }
    }

    /// The tables the preconditioning pass filled before the layout was kept implicit: the
    /// j-th valid slot, blocks in order and slots in order within a block (a sealed block's
    /// `spread`, the active block's first slots), holds unit `perm(j)`.
    fn streamed_layout(f: &Ftl, seed: u64) -> (Vec<u32>, Vec<(u32, u64)>) {
        let (upb, bpd) = (f.units_per_block, f.g.blocks_per_die);
        let active = bpd - f.g.gc_threshold - 1;
        let perm = Bijection::new(f.g.logical_units, seed);
        let mut l2p = vec![0u32; f.g.logical_units as usize];
        let mut p2l = Vec::new();
        let mut j = 0;
        for b in 0..f.g.blocks() as u32 {
            let v = f.valid[b as usize];
            let slots: Vec<u32> = if b % bpd == active {
                (0..v).collect()
            } else {
                spread(v, upb).collect()
            };
            for i in slots {
                let (s, u) = (b * upb + i, perm.get(j));
                l2p[u as usize] = s + 1;
                p2l.push((s, u));
                j += 1;
            }
        }
        (l2p, p2l)
    }

    #[test]
    fn an_aged_layout_answers_as_the_tables_of_the_streaming_pass() {
        // Blocks of 512 units (aligned on bitmap words), of 518 and of 515 (not aligned).
        for (dies, upp, extra) in [(2, 2, 0), (2, 2, 3), (3, 1, 3)] {
            let mut g = geo(1, dies, 0.07, GcPolicy::Greedy);
            g.units_per_page = upp;
            g.pages_per_block = 256 * 2 / upp + extra;
            let mut f = Ftl::new(g.clone());
            f.precondition_aged(11);
            let (l2p, p2l) = streamed_layout(&f, 11);
            for (u, &e) in l2p.iter().enumerate() {
                assert_eq!(f.slot_of(u as u64), Some(e - 1), "unit {u}");
            }
            let live = (0..g.physical_units() as u32).filter(|&s| f.is_live(s));
            assert!(live.eq(p2l.iter().map(|&(s, _)| s)));
            for &(s, u) in &p2l {
                assert_eq!(f.unit_at(s), u, "slot {s}");
            }
        }
    }

    #[test]
    fn an_aged_device_written_at_random_evolves_the_same_with_a_sparse_or_a_dense_l2p() {
        let g = geo(1, 2, 0.07, GcPolicy::Greedy);
        let mut sparse = Ftl::new(g.clone());
        sparse.precondition_aged(5);
        let mut dense = Ftl::new(g.clone());
        dense.precondition_aged(5);
        dense.l2p.densify();
        assert!(matches!(sparse.l2p, L2p::Sparse(_)));
        let n = g.logical_units;
        let (mut r1, mut r2) = (Rng::new(9), Rng::new(9));
        for round in 0..4 {
            random_writes(&mut sparse, &mut r1, n / 8);
            random_writes(&mut dense, &mut r2, n / 8);
            for u in (round..n).step_by(97) {
                sparse.trim(u);
                dense.trim(u);
            }
            assert_eq!(sparse.stats(), dense.stats());
            assert!((0..n).all(|u| sparse.slot_of(u) == dense.slot_of(u)));
            check_invariants(&sparse);
        }
        // n / 2 units written: the table outgrew the dense array on the way.
        assert!(matches!(sparse.l2p, L2p::Dense(_)));
    }

    #[test]
    fn an_aged_840_pro_is_ready_with_a_fifth_of_a_byte_of_tables_per_logical_page() {
        let g = geo_840_pro();
        let mut f = Ftl::new(g.clone());
        f.precondition_aged(1);
        // Written so far: the validity bitmap (1 bit per slot, 0.134 byte per logical unit
        // at 7 % over-provisioning), per-block tables, the P2L chunks of the open blocks.
        let b = f.touched_bytes() as f64 / g.logical_units as f64;
        eprintln!("aged 840 Pro: {b:.3} bytes per logical 4 KiB unit written at set-up");
        assert!(b < 0.2, "{b}");
    }

    #[test]
    fn packed_integers_read_and_write_the_words_a_128_bit_window_does() {
        // The reference: the two words as one u128, shifted by the bit offset.
        fn get128(p: &Packed, i: u64) -> u64 {
            let bit = i * p.bits as u64;
            let (w, o) = ((bit / 64) as usize, (bit % 64) as u32);
            let window = p.words[w] as u128 | (p.words[w + 1] as u128) << 64;
            (window >> o) as u64 & p.mask
        }
        fn set128(p: &mut Packed, i: u64, v: u64) {
            let bit = i * p.bits as u64;
            let (w, o) = ((bit / 64) as usize, (bit % 64) as u32);
            let window = p.words[w] as u128 | (p.words[w + 1] as u128) << 64;
            let m = (p.mask as u128) << o;
            let window = (window & !m) | ((v & p.mask) as u128) << o;
            p.words[w] = window as u64;
            p.words[w + 1] = (window >> 64) as u64;
        }
        let mut rng = Rng::new(7);
        for bits in [1, 7, 26, 31, 32, 33, 63, 64] {
            let mut a = Packed::zeroed(300, bits);
            let mut b = a.clone();
            for _ in 0..20_000 {
                let i = rng.below(300);
                let v = rng.next_u64();
                a.set(i, v);
                set128(&mut b, i, v);
                assert_eq!(a.words, b.words, "bits {bits} set {i}");
                let j = rng.below(300);
                assert_eq!(a.get(j), get128(&b, j), "bits {bits} get {j}");
            }
        }
    }

    #[test]
    fn packed_integers_round_trip_across_word_boundaries() {
        let mut p = Packed::zeroed(1000, 26);
        for i in 0..1000u64 {
            p.set(i, (i * 2_654_435_761) & ((1 << 26) - 1));
        }
        for i in 0..1000u64 {
            assert_eq!(p.get(i), (i * 2_654_435_761) & ((1 << 26) - 1));
        }
    }

    #[test]
    fn a_die_full_of_valid_data_sends_writes_elsewhere() {
        // Everything offered to die 0, which holds half the flash: it fills with valid data
        // that GC cannot compact, and the rest spills to die 1.
        let g = geo(1, 2, 0.07, GcPolicy::Fifo);
        let mut f = Ftl::new(g.clone());
        let n = g.logical_units;
        for p in 0..n / 2 {
            f.write_page(0, &[2 * p, 2 * p + 1]);
        }
        assert!((0..n).all(|u| f.locate(u).is_some()));
        assert!(f.locate(n - 1).unwrap().0 == 1);
        // Die 0 can collect again once overwrites leave invalid units in it.
        let mut rng = Rng::new(1);
        for _ in 0..n / 16 {
            f.write_page(0, &[rng.below(n), rng.below(n)]);
        }
        assert!(f.stats().gc_count > 0);
        check_invariants(&f);
        let valid: u64 = f.valid.iter().map(|&v| v as u64).sum();
        assert_eq!(valid, n);
    }
}
