//! A slab: values in reusable numbered slots, for the handles engines give to devices and
//! events (an index stays valid until its value is removed).
//!
//! ```text
//! insert(v): slot = the last freed slot, else a new one at the end; store v there
//! remove(i): take the value out, free slot i
//! ```
//!
//! The reuse order (last freed first, as a stack) is part of the engines' behaviour: slot
//! numbers are the tags devices see, so it stays fixed.

/// Values in reusable slots (see the module documentation).
#[derive(Debug)]
pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Store `v` and return its slot.
    #[inline]
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                // A freed slot holds None: replace it without running the old value's drop
                // glue (there is nothing to drop).
                let old = self.items[i].replace(v);
                debug_assert!(old.is_none(), "free slab slot {i} in use");
                std::mem::forget(old);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }

    /// Take the value out of slot `i` and free the slot. Panics when the slot is free (an
    /// engine bug: a handle used twice).
    #[inline]
    pub fn remove(&mut self, i: usize) -> T {
        let v = self.items[i].take().expect("slab slot in use");
        self.free.push(i);
        v
    }

    /// Free slot `i` without moving its value out (a caller that read what it needs by
    /// reference: moving a large value out is a copy). Panics when the slot is free.
    #[inline]
    pub fn free(&mut self, i: usize) {
        let slot = &mut self.items[i];
        assert!(slot.is_some(), "slab slot in use");
        // Dropped in place (nothing to do for plain data).
        *slot = None;
        self.free.push(i);
    }

    /// The value in slot `i`. Panics when the slot is free.
    #[inline]
    /// The value at `i`, read only.
    pub fn get_ref(&self, i: usize) -> &T {
        self.items[i].as_ref().expect("slab slot in use")
    }

    pub fn get(&mut self, i: usize) -> &mut T {
        self.items[i].as_mut().expect("slab slot in use")
    }

    /// Values stored.
    #[inline]
    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_last_freed_first_and_counted() {
        let mut s = Slab::new();
        let (a, b, c) = (s.insert('a'), s.insert('b'), s.insert('c'));
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(s.remove(0), 'a');
        assert_eq!(s.remove(2), 'c');
        assert_eq!(s.len(), 1);
        assert_eq!(s.insert('d'), 2);
        assert_eq!(s.insert('e'), 0);
        assert_eq!(s.insert('f'), 3);
        assert_eq!(*s.get(1), 'b');
        assert_eq!(s.len(), 4);
    }
}
