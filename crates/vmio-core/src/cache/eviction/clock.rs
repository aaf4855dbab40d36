//! CLOCK (second chance; Corbató 1968, as in Tanenbaum's "Modern Operating Systems" §3.4.5):
//! an approximation of LRU with one referenced bit per page and no list to maintain on hits.
//!
//! ```text
//! victim: the hand sweeps the slots in order, wrapping around, at most 2 × slots + 1 steps:
//!   free slot or busy page (dirty, being fetched) : pass over it (its bit is kept)
//!   clean page, referenced                        : clear its bit, pass over it
//!   clean page, not referenced                    : evict it; the hand stays past it
//! ```
//!
//! It approximates Linux's active/inactive lists, which also promote a page on a second
//! reference (mark_page_accessed sets PG_referenced) rather than keeping an exact LRU. Hits
//! cost nothing here: the page cache sets the referenced flag in the page's index entry.

use super::{Eviction, Probe, Slots};

#[derive(Debug, Default)]
pub struct Clock {
    hand: usize,
}

impl Eviction for Clock {
    const NAME: &'static str = "clock";
    const HELP: &'static str = "CLOCK (second chance): one referenced bit per page, a hand sweeping the pages (the default; close to Linux's active/inactive lists)";

    fn victim(&mut self, slots: &mut impl Slots) -> Option<u32> {
        let n = slots.count();
        for _ in 0..2 * n + 1 {
            let i = self.hand as u32;
            self.hand = (self.hand + 1) % n.max(1);
            match slots.probe(i) {
                Probe::Clean { referenced: true } => slots.clear_referenced(i),
                Probe::Clean { referenced: false } => return Some(i),
                Probe::Free | Probe::Busy => {}
            }
        }
        None
    }
}
