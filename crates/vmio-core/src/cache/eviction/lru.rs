//! LRU: exact least-recently-used order (the textbook policy CLOCK approximates; Belady,
//! Nelson and Shedler 1969 for its behaviour on loops).
//!
//! ```text
//! a recency list over the slots, most recent at the head:
//! inserted(slot), touched(slot) : move slot to the head
//! removed(slot)                 : unlink it
//! victim: walk from the tail (least recent), at most the list's length:
//!   clean page : unlink and evict it
//!   busy page (dirty, being fetched): move it to the head and go on (the kernel's
//!              reclaim puts back pages it cannot free: shrink_folio_list's keep/activate),
//!              so a cache full of dirty pages costs one pass, not one per eviction
//! ```
//!
//! Unlike CLOCK, every hit moves the page in the list: two links per slot (8 bytes) and a
//! few dependent writes per hit.

use super::{Eviction, Probe, Slots};

const NIL: u32 = u32::MAX;

#[derive(Debug)]
pub struct Lru {
    /// (prev, next) per slot; prev points towards the head (more recent).
    links: Vec<(u32, u32)>,
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for Lru {
    fn default() -> Self {
        Self {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl Lru {
    fn unlink(&mut self, s: u32) {
        let (p, n) = self.links[s as usize];
        if p != NIL {
            self.links[p as usize].1 = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.links[n as usize].0 = p;
        } else {
            self.tail = p;
        }
        self.len -= 1;
    }

    fn push_head(&mut self, s: u32) {
        if self.links.len() <= s as usize {
            self.links.resize(s as usize + 1, (NIL, NIL));
        }
        self.links[s as usize] = (NIL, self.head);
        if self.head != NIL {
            self.links[self.head as usize].0 = s;
        } else {
            self.tail = s;
        }
        self.head = s;
        self.len += 1;
    }
}

impl Eviction for Lru {
    const NAME: &'static str = "lru";
    const HELP: &'static str =
        "exact least-recently-used order (every hit moves the page to the head of a list)";
    const SLOT_BYTES: u64 = 8;

    fn inserted(&mut self, slot: u32) {
        self.push_head(slot);
    }

    fn touched(&mut self, slot: u32) {
        if self.head != slot {
            self.unlink(slot);
            self.push_head(slot);
        }
    }

    fn removed(&mut self, slot: u32) {
        self.unlink(slot);
    }

    fn victim(&mut self, slots: &mut impl Slots) -> Option<u32> {
        for _ in 0..self.len {
            let s = self.tail;
            self.unlink(s);
            match slots.probe(s) {
                Probe::Clean { .. } => return Some(s),
                Probe::Busy => self.push_head(s),
                // Not reached (freed slots leave the list through `removed`); forgotten.
                Probe::Free => {}
            }
        }
        None
    }
}
