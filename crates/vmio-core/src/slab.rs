//! A slab of reusable slots: `insert` returns an index that stays valid until `remove`;
//! freed indices are reused last-freed first, so a steady state allocates nothing. The
//! simulator keeps its in-flight requests and barriers in slabs (an index travels in an event
//! or a device tag), the host-cache policy its fetches and fsyncs.

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

    #[inline]
    pub fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }

    /// Take the value out of slot `i` (which must be in use) and free the slot.
    #[inline]
    pub fn remove(&mut self, i: usize) -> T {
        let v = self.items[i].take().expect("slab slot in use");
        self.free.push(i);
        v
    }

    /// The value in slot `i`, which must be in use.
    #[inline]
    pub fn get(&mut self, i: usize) -> &mut T {
        self.items[i].as_mut().expect("slab slot in use")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_slot_is_reused_by_the_next_insert() {
        let mut s = Slab::new();
        let a = s.insert('a');
        let b = s.insert('b');
        assert_eq!(s.remove(a), 'a');
        assert_eq!(s.insert('c'), a);
        *s.get(b) = 'd';
        assert_eq!(s.remove(b), 'd');
    }
}
