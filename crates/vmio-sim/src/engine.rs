//! The discrete-event core: a priority queue of events in virtual time.
//!
//! Virtual time is integer nanoseconds. Events are ordered by (time, sequence number), the
//! sequence number being the order of scheduling, so two runs with the same inputs process
//! events in exactly the same order. An event is a small integer payload (kind and index
//! packed by the caller) to keep the heap compact.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use vmio_core::Ns;

#[derive(Default)]
pub struct EventQueue {
    heap: BinaryHeap<Reverse<(Ns, u64, u64)>>,
    seq: u64,
    now: Ns,
    processed: u64,
}

impl EventQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Current virtual time (time of the last event popped).
    #[inline]
    pub fn now(&self) -> Ns {
        self.now
    }

    /// Schedule `payload` at `at` (never earlier than now).
    #[inline]
    pub fn push(&mut self, at: Ns, payload: u64) {
        let at = at.max(self.now);
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, payload)));
    }

    /// The next event, advancing virtual time to it.
    #[inline]
    pub fn pop(&mut self) -> Option<(Ns, u64)> {
        let Reverse((t, _, p)) = self.heap.pop()?;
        self.now = t;
        self.processed += 1;
        Some((t, p))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_in_time_then_scheduling_order() {
        let mut q = EventQueue::new();
        q.push(30, 1);
        q.push(10, 2);
        q.push(10, 3);
        q.push(20, 4);
        let order: Vec<u64> = std::iter::from_fn(|| q.pop().map(|(_, p)| p)).collect();
        assert_eq!(order, vec![2, 3, 4, 1]);
        assert_eq!(q.now(), 30);
    }

    #[test]
    fn an_event_in_the_past_is_clamped_to_now() {
        let mut q = EventQueue::new();
        q.push(100, 1);
        q.pop();
        q.push(50, 2);
        assert_eq!(q.pop(), Some((100, 2)));
    }
}
