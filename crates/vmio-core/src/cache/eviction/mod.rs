//! Page eviction: which clean page of a full host page cache gives its slot to a new page.
//!
//! The page cache ([`super::pagecache`]) owns the pages, their state and the referenced flag
//! (PG_referenced: set on every hit, as mark_page_accessed does); an eviction policy only
//! orders the slots. One file per policy, one line in [`REGISTRY`]:
//! - [`clock`]: CLOCK (second chance), the default;
//! - [`lru`]: exact least-recently-used.
//!
//! The traits, from the engine down:
//!
//! ```text
//! HostCache (cache/mod.rs)         decisions of a host cache -> Actions for the engine
//!   └─ Linux<E> (linux.rs)          the Linux page cache under QEMU's cache modes
//!        └─ PageCache<E>            pages, dirty list, fetches; calls E on every change:
//!             └─ E: Eviction        inserted / touched / removed / victim(&mut Slots)
//!                  ├─ Clock         hand over the slots, uses Slots' referenced flag
//!                  └─ Lru           recency list over the slots
//! ```
//!
//! ```text
//! inserted(slot)  : a page entered the cache in `slot` (fetched, filled or written)
//! touched(slot)   : a cached page was read or written again
//! removed(slot)   : a page left the cache other than as a victim (invalidated)
//! victim(slots)   : the slot to reclaim, or None when no page is Clean (every page dirty
//!                   or being fetched: the cache overflows until writeback); the policy
//!                   forgets the slot it returns
//! ```
//!
//! A policy is statically dispatched (the page cache is generic over it): `touched` runs on
//! every page of every hit and costs nothing for CLOCK.
//!
//! Adding a policy (LRU was added this way): one file `eviction/NAME.rs` with a type that is
//! `Default` and implements [`Eviction`] (`NAME`, `HELP`, `SLOT_BYTES` if it keeps per-slot
//! state, the hooks it needs and `victim`), then `pub mod NAME;` and `register::<Type>()` in
//! [`REGISTRY`] here. `[page_cache] eviction = "NAME"` then selects it in `vmio sim` (the
//! stack's accepted values come from [`REGISTRY`]); `vmio serve` leaves eviction to the
//! kernel.

pub mod clock;
pub mod lru;

/// The traits, declared with the cache's lattice ([`super`]).
pub use super::{Eviction, Probe, Slots};
pub use clock::Clock;
pub use lru::Lru;

use super::pagecache::PageCache;
use super::{FileCache, HostCache, HostDisk, PageCacheSpec};

/// A registered eviction policy: its name, help, and the host caches built on it.
pub struct Registered {
    pub name: &'static str,
    pub help: &'static str,
    /// Bytes of page-cache slots and index for a cache of `capacity_pages`.
    pub estimated_bytes: fn(u64) -> u64,
    /// The Linux page cache under QEMU's cache modes with this eviction policy.
    pub linux: fn(&PageCacheSpec, Vec<HostDisk>) -> Box<dyn HostCache>,
    /// The same Linux page cache as a guest's, whose files come and go.
    pub files: fn(&PageCacheSpec) -> Box<dyn FileCache>,
}

const fn register<E: Eviction>() -> Registered {
    Registered {
        name: E::NAME,
        help: E::HELP,
        estimated_bytes: PageCache::<E>::estimated_bytes,
        linux: super::linux::Linux::<E>::boxed,
        files: super::linux::Linux::<E>::boxed_files,
    }
}

/// Every eviction policy; the first is the default.
pub const REGISTRY: &[Registered] = &[register::<Clock>(), register::<Lru>()];

/// The default policy's name.
pub const DEFAULT: &str = REGISTRY[0].name;

/// Whether `name` is the default policy's (serde's skip_serializing_if).
pub fn is_default(name: &str) -> bool {
    name == DEFAULT
}

/// A policy by name.
pub fn find(name: &str) -> Option<&'static Registered> {
    REGISTRY.iter().find(|e| e.name == name)
}

/// The accepted names, for error lines: `clock, lru`.
pub fn accepted() -> String {
    REGISTRY
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ReadLookup;

    #[test]
    fn every_policy_is_found_by_its_name_and_clock_is_the_default() {
        for e in REGISTRY {
            assert_eq!(find(e.name).map(|f| f.name), Some(e.name));
        }
        assert_eq!(DEFAULT, "clock");
        assert_eq!(accepted(), "clock, lru");
        assert!(find("arc").is_none());
    }

    /// Fill `c` (pages 0..c), read them back last to first, then insert `k` new pages:
    /// which of the first `c` pages are still cached.
    fn survivors<E: Eviction>(c: u64, k: u64) -> Vec<u64> {
        let mut pc = PageCache::<E>::new(c);
        let mut l = ReadLookup::default();
        pc.fill(0, 0, c);
        for p in (0..c).rev() {
            pc.read(0, p, 1, &mut l);
        }
        pc.fill(0, 1000, k);
        (0..c).filter(|&p| pc.contains(0, p)).collect()
    }

    #[test]
    fn lru_evicts_the_least_recently_read_pages_where_clock_evicts_in_slot_order() {
        // Every page is referenced: CLOCK's hand clears all bits and then evicts from slot 0
        // (pages 0..k); LRU evicts the pages read longest ago (c-1 down to c-k).
        for (c, k) in [(8, 3), (64, 1), (64, 32)] {
            assert_eq!(survivors::<Clock>(c, k), (k..c).collect::<Vec<_>>());
            assert_eq!(survivors::<Lru>(c, k), (0..c - k).collect::<Vec<_>>());
        }
    }

    /// Read pages 0..n in a loop `rounds` times, filling misses; hits.
    fn loop_hits<E: Eviction>(c: u64, n: u64, rounds: u64) -> u64 {
        let mut pc = PageCache::<E>::new(c);
        let mut l = ReadLookup::default();
        let mut hits = 0;
        for _ in 0..rounds {
            for p in 0..n {
                pc.read(0, p, 1, &mut l);
                hits += l.hit_pages;
                if l.hit_pages == 0 {
                    pc.fill(0, p, 1);
                }
            }
        }
        hits
    }

    #[test]
    fn a_loop_one_page_larger_than_the_cache_misses_every_read_under_both() {
        // Belady's loop: the page needed next is always the one just evicted.
        assert_eq!(loop_hits::<Clock>(16, 17, 10), 0);
        assert_eq!(loop_hits::<Lru>(16, 17, 10), 0);
        // A loop that fits hits on every round after the first.
        assert_eq!(loop_hits::<Clock>(16, 16, 10), 16 * 9);
        assert_eq!(loop_hits::<Lru>(16, 16, 10), 16 * 9);
    }

    #[test]
    fn lru_passes_over_dirty_pages_and_evicts_the_oldest_clean_one() {
        let mut pc = PageCache::<Lru>::new(3);
        pc.write(0, 0, 0, 1);
        pc.fill(0, 1, 2);
        pc.fill(0, 9, 1);
        assert!(pc.is_dirty(0, 0));
        assert!(!pc.contains(0, 1));
        assert!(pc.contains(0, 2) && pc.contains(0, 9));
    }
}
