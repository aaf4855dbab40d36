//! Garbage-collection victim policies: which sealed block of a die to clean next.
//!
//! One small trait, [`Victim`], told when a block is sealed (full), when one of its units
//! becomes invalid, and asked for a victim. Every operation is O(1) except `pick`, which is
//! O(1) amortized for greedy and fifo and O(units per block) for cost-benefit (never a scan of
//! the blocks). Block ids are global (`die * blocks_per_die + index`). Time (`now`) is the
//! FTL's write clock (host units written), so the policies need no wall or virtual clock.
//!
//! ```text
//! greedy        (Hu et al., SYSTOR 2009; the classic policy): victim = a block with the
//!               fewest valid units. Per die, one doubly-linked list ("bucket") per valid
//!               count; invalidation moves a block to the next lower bucket in O(1); pick scans
//!               upward from the lowest possibly non-empty bucket (amortized O(1)).
//! fifo          (Desnoyers' "LRU"/FIFO cleaning, SYSTOR 2012): victim = the block sealed
//!               longest ago, whatever its valid count. A queue per die.
//! cost-benefit  (Kawaguchi et al., USENIX 1995, after Rosenblum & Ousterhout's LFS):
//!               victim = argmax age * (1 - u) / (2u), u = valid fraction, age = write-clock
//!               time since the block's valid count last changed. Same buckets as greedy, each
//!               kept in order of last change (a moved block goes to the tail), so the head of
//!               a bucket is its oldest block: only the bucket heads are candidates.
//! ```

use std::collections::VecDeque;

/// Sentinel "no block" in the intrusive lists.
const NIL: u32 = u32::MAX;

/// Victim selection for one FTL (all dies).
pub trait Victim {
    fn name(&self) -> &'static str;
    /// `block` was sealed (or preconditioned) holding `valid` valid units, at write clock `now`.
    fn sealed(&mut self, block: u32, valid: u32, now: u64);
    /// One unit of the sealed `block` became invalid; it had `valid_before` valid units.
    fn invalidated(&mut self, block: u32, valid_before: u32, now: u64);
    /// Remove and return the next victim among the sealed blocks of `die`.
    fn pick(&mut self, die: usize, now: u64) -> Option<u32>;
    /// Performance hint: `block` may soon be `invalidated`; start loading its state into the
    /// CPU cache. No effect on the choices.
    fn prefetch(&self, _block: u32) {}
}

/// Build the policy named `name` (one of [`super::GcPolicy`]'s names).
pub fn build(
    policy: super::GcPolicy,
    dies: usize,
    blocks_per_die: u32,
    units_per_block: u32,
) -> Box<dyn Victim> {
    match policy {
        super::GcPolicy::Greedy => Box::new(Greedy(Buckets::new(
            dies,
            blocks_per_die,
            units_per_block,
            false,
        ))),
        super::GcPolicy::Fifo => Box::new(Fifo {
            bpd: blocks_per_die,
            queues: (0..dies).map(|_| VecDeque::new()).collect(),
        }),
        super::GcPolicy::CostBenefit => Box::new(CostBenefit(Buckets::new(
            dies,
            blocks_per_die,
            units_per_block,
            true,
        ))),
    }
}

/// Per-die lists of sealed blocks indexed by valid count (0..=units per block).
struct Buckets {
    levels: u32,
    bpd: u32,
    /// Per (die, level) list: first and last block.
    ends: Vec<(u32, u32)>,
    /// Per block: previous and next block in its list (one cache line for both).
    links: Vec<(u32, u32)>,
    /// Lowest level of each die that may be non-empty.
    min: Vec<u32>,
    /// Write clock of each block's last change (cost-benefit only; empty otherwise).
    changed: Vec<u64>,
}

impl Buckets {
    fn new(dies: usize, bpd: u32, units: u32, track_age: bool) -> Self {
        let levels = units + 1;
        let blocks = dies * bpd as usize;
        Self {
            levels,
            bpd,
            ends: vec![(NIL, NIL); dies * levels as usize],
            links: vec![(NIL, NIL); blocks],
            min: vec![levels; dies],
            changed: if track_age {
                vec![0; blocks]
            } else {
                Vec::new()
            },
        }
    }

    #[inline]
    fn die(&self, block: u32) -> usize {
        (block / self.bpd) as usize
    }

    #[inline]
    fn list(&self, die: usize, level: u32) -> usize {
        die * self.levels as usize + level as usize
    }

    #[inline]
    fn head(&self, die: usize, level: u32) -> u32 {
        self.ends[self.list(die, level)].0
    }

    #[inline]
    fn push_back(&mut self, die: usize, block: u32, level: u32, now: u64) {
        let l = self.list(die, level);
        let t = self.ends[l].1;
        self.links[block as usize] = (t, NIL);
        if t == NIL {
            self.ends[l].0 = block;
        } else {
            self.links[t as usize].1 = block;
        }
        self.ends[l].1 = block;
        self.min[die] = self.min[die].min(level);
        if !self.changed.is_empty() {
            self.changed[block as usize] = now;
        }
    }

    #[inline]
    fn unlink(&mut self, die: usize, block: u32, level: u32) {
        let l = self.list(die, level);
        let (p, n) = self.links[block as usize];
        if p == NIL {
            self.ends[l].0 = n;
        } else {
            self.links[p as usize].1 = n;
        }
        if n == NIL {
            self.ends[l].1 = p;
        } else {
            self.links[n as usize].0 = p;
        }
    }

    #[inline]
    fn sealed(&mut self, block: u32, valid: u32, now: u64) {
        self.push_back(self.die(block), block, valid, now);
    }

    #[inline]
    fn invalidated(&mut self, block: u32, valid_before: u32, now: u64) {
        let die = self.die(block);
        self.unlink(die, block, valid_before);
        self.push_back(die, block, valid_before - 1, now);
    }

    /// Lowest non-empty level of `die` (updating the hint), if any.
    fn lowest(&mut self, die: usize) -> Option<u32> {
        let mut lv = self.min[die];
        while lv < self.levels && self.head(die, lv) == NIL {
            lv += 1;
        }
        self.min[die] = lv;
        (lv < self.levels).then_some(lv)
    }
}

struct Greedy(Buckets);

impl Victim for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn sealed(&mut self, block: u32, valid: u32, now: u64) {
        self.0.sealed(block, valid, now);
    }
    fn prefetch(&self, block: u32) {
        super::prefetch(&self.0.links[block as usize]);
    }
    fn invalidated(&mut self, block: u32, valid_before: u32, now: u64) {
        self.0.invalidated(block, valid_before, now);
    }
    fn pick(&mut self, die: usize, _now: u64) -> Option<u32> {
        let lv = self.0.lowest(die)?;
        let b = self.0.head(die, lv);
        self.0.unlink(die, b, lv);
        Some(b)
    }
}

struct Fifo {
    bpd: u32,
    queues: Vec<VecDeque<u32>>,
}

impl Victim for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn sealed(&mut self, block: u32, _valid: u32, _now: u64) {
        self.queues[(block / self.bpd) as usize].push_back(block);
    }
    fn invalidated(&mut self, _block: u32, _valid_before: u32, _now: u64) {}
    fn pick(&mut self, die: usize, _now: u64) -> Option<u32> {
        self.queues[die].pop_front()
    }
}

struct CostBenefit(Buckets);

impl Victim for CostBenefit {
    fn name(&self) -> &'static str {
        "cost-benefit"
    }
    fn sealed(&mut self, block: u32, valid: u32, now: u64) {
        self.0.sealed(block, valid, now);
    }
    fn prefetch(&self, block: u32) {
        super::prefetch(&self.0.links[block as usize]);
    }
    fn invalidated(&mut self, block: u32, valid_before: u32, now: u64) {
        self.0.invalidated(block, valid_before, now);
    }
    fn pick(&mut self, die: usize, now: u64) -> Option<u32> {
        let b = &mut self.0;
        let lowest = b.lowest(die)?;
        let units = (b.levels - 1) as f64;
        let mut best: Option<(f64, u32, u32)> = None;
        for lv in lowest..b.levels {
            let h = b.head(die, lv);
            if h == NIL {
                continue;
            }
            if lv == 0 {
                best = Some((f64::INFINITY, h, lv));
                break;
            }
            let u = lv as f64 / units;
            let age = (now.saturating_sub(b.changed[h as usize]) + 1) as f64;
            let score = age * (1.0 - u) / (2.0 * u);
            if best.is_none_or(|(s, _, _)| score > s) {
                best = Some((score, h, lv));
            }
        }
        let (_, h, lv) = best?;
        b.unlink(die, h, lv);
        Some(h)
    }
}
