//! The qcow2 metadata cache (block/qcow2-cache.c): a fixed number of entries, each one L2
//! slice (`l2_cache_entry_size` bytes of an L2 table) or one refcount block (a cluster),
//! replaced least recently used first; a dirty entry is written before it is replaced.
//!
//! ```text
//! qcow2_cache_do_get(offset):          get(key)
//!     found -> Hit                         Hit: the entry becomes the most recently used
//!     else victim = min lru_counter        Miss{victim}: the least recently used entry
//!          among unreferenced entries          gives its slot to `key` (the caller writes
//!          qcow2_cache_entry_flush(victim)     the victim first if it was dirty, then reads
//!          read the table (unless _empty)      `key` unless it is new), now most recent
//! qcow2_cache_put: lru_counter = ++c->lru_counter   (use order = LRU order)
//! qcow2_cache_entry_mark_dirty         mark_dirty(key)
//! qcow2_cache_write / _flush           dirty_keys(out): dirty entries in slot order, as
//!                                      QEMU walks c->entries[0..size]; clean(key)
//! ```
//!
//! Entries are keyed by a dense index the driver gives (the L2 slice's number in the guest's
//! order, the refcount block's number): `slot_of` maps a key to its slot, the slots form an
//! intrusive doubly linked LRU list, so every operation is O(1) and allocates nothing after
//! construction (flushes walk the slots). QEMU's entries in use (`ref > 0`) cannot be
//! replaced; here a request's metadata steps run one after the other under the image's
//! lock, so no entry is in use when another is looked up.

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u32,
    dirty: bool,
    prev: u32,
    next: u32,
}

/// What [`MetaCache::get`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Hit,
    /// `key` took a slot; `victim` is the key it replaced and whether it was dirty.
    Miss {
        victim: Option<(u32, bool)>,
    },
}

/// An LRU cache of `capacity` metadata entries keyed `0..keys`.
#[derive(Clone, Debug)]
pub struct MetaCache {
    slot_of: Vec<u32>,
    slots: Vec<Slot>,
    capacity: usize,
    /// Least and most recently used slots.
    head: u32,
    tail: u32,
}

impl MetaCache {
    pub fn new(capacity: usize, keys: usize) -> Self {
        MetaCache {
            slot_of: vec![NONE; keys],
            slots: Vec::with_capacity(capacity.min(keys.max(1))),
            capacity: capacity.max(1),
            head: NONE,
            tail: NONE,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn contains(&self, key: u32) -> bool {
        self.slot_of.get(key as usize).is_some_and(|s| *s != NONE)
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev == NONE {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NONE {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_back(&mut self, s: u32) {
        self.slots[s as usize].prev = self.tail;
        self.slots[s as usize].next = NONE;
        if self.tail == NONE {
            self.head = s;
        } else {
            self.slots[self.tail as usize].next = s;
        }
        self.tail = s;
    }

    fn grow_keys(&mut self, key: u32) {
        if key as usize >= self.slot_of.len() {
            self.slot_of.resize(key as usize + 1, NONE);
        }
    }

    /// Look `key` up; on a miss it takes a free slot or the least recently used one.
    pub fn get(&mut self, key: u32) -> Lookup {
        self.grow_keys(key);
        let s = self.slot_of[key as usize];
        if s != NONE {
            self.unlink(s);
            self.push_back(s);
            return Lookup::Hit;
        }
        if self.slots.len() < self.capacity {
            let s = self.slots.len() as u32;
            self.slots.push(Slot {
                key,
                dirty: false,
                prev: NONE,
                next: NONE,
            });
            self.push_back(s);
            self.slot_of[key as usize] = s;
            return Lookup::Miss { victim: None };
        }
        let s = self.head;
        self.unlink(s);
        let old = self.slots[s as usize];
        self.slot_of[old.key as usize] = NONE;
        self.slots[s as usize].key = key;
        self.slots[s as usize].dirty = false;
        self.push_back(s);
        self.slot_of[key as usize] = s;
        Lookup::Miss {
            victim: Some((old.key, old.dirty)),
        }
    }

    pub fn mark_dirty(&mut self, key: u32) {
        if let Some(&s) = self.slot_of.get(key as usize) {
            if s != NONE {
                self.slots[s as usize].dirty = true;
            }
        }
    }

    pub fn clean(&mut self, key: u32) {
        if let Some(&s) = self.slot_of.get(key as usize) {
            if s != NONE {
                self.slots[s as usize].dirty = false;
            }
        }
    }

    pub fn is_dirty(&self, key: u32) -> bool {
        self.slot_of
            .get(key as usize)
            .is_some_and(|s| *s != NONE && self.slots[*s as usize].dirty)
    }

    /// Append the dirty keys to `out`, in slot order (QEMU's walk of `c->entries`).
    pub fn dirty_keys(&self, out: &mut Vec<u32>) {
        out.extend(self.slots.iter().filter(|s| s.dirty).map(|s| s.key));
    }

    /// Keys from least to most recently used (for tests and reports).
    pub fn lru_order(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.slots.len());
        let mut s = self.head;
        while s != NONE {
            v.push(self.slots[s as usize].key);
            s = self.slots[s as usize].next;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_evicts_the_least_recently_used_slice() {
        let mut c = MetaCache::new(3, 16);
        for k in [1, 2, 3] {
            assert_eq!(c.get(k), Lookup::Miss { victim: None });
        }
        assert_eq!(c.get(1), Lookup::Hit); // 2 is now the least recently used
        c.mark_dirty(2);
        assert_eq!(
            c.get(4),
            Lookup::Miss {
                victim: Some((2, true))
            }
        );
        assert_eq!(c.lru_order(), vec![3, 1, 4]);
        assert_eq!(
            c.get(5),
            Lookup::Miss {
                victim: Some((3, false))
            }
        );
        assert!(!c.contains(2) && !c.contains(3) && c.contains(1));
    }

    #[test]
    fn dirty_keys_come_in_slot_order_and_clean_clears_them() {
        let mut c = MetaCache::new(4, 8);
        for k in [5, 3, 7] {
            c.get(k);
        }
        c.mark_dirty(7);
        c.mark_dirty(5);
        let mut out = Vec::new();
        c.dirty_keys(&mut out);
        assert_eq!(out, vec![5, 7]);
        c.clean(5);
        out.clear();
        c.dirty_keys(&mut out);
        assert_eq!(out, vec![7]);
        assert!(c.is_dirty(7) && !c.is_dirty(5));
    }
}
