//! A slab of reusable slots: the simulator's in-flight requests and barriers live in slabs so
//! that the hot path reuses memory instead of allocating per request, and an index (carried in
//! an event or a device tag) stays valid until its slot is freed.

/// A slab of reusable slots (indices stay valid until freed).
pub(super) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
    #[inline]
    pub(super) fn insert(&mut self, v: T) -> usize {
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
    #[inline]
    pub(super) fn remove(&mut self, i: usize) -> T {
        let v = self.items[i].take().expect("slab slot in use");
        self.free.push(i);
        v
    }
    #[inline]
    pub(super) fn get(&mut self, i: usize) -> &mut T {
        self.items[i].as_mut().expect("slab slot in use")
    }
}
