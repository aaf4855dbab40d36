//! A blocking FIFO between threads that never spins: the hand-off from a connection's reader
//! to the I/O workers, and from the workers to a connection's writer thread.
//!
//! crossbeam-channel's `recv` tries an empty channel again with an exponential back-off
//! before it blocks (`flavors/list.rs`, "Try receiving a message several times", through
//! `crossbeam_utils::Backoff::snooze`, which calls `sched_yield` past its spin limit), so
//! each of the 32 idle workers paid several `sched_yield` calls per request it waited for
//! (`strace -c -f` of `vmio bench serve`'s 4 KiB random reads: 2.5 `sched_yield` and 2.1
//! `futex` calls per request). On a machine whose cores are busy, a yield hands the core to
//! another process for a time slice. Here a consumer sleeps on a condition variable at once,
//! and a producer signals only when a consumer sleeps (the futex wake is a system call even
//! with no waiter):
//!
//! ```text
//! push(x):  lock; queue.push_back(x); if sleeping > 0: notify_one; unlock
//! pop():    lock; while queue empty: sleeping += 1; wait; sleeping -= 1
//!           return queue.pop_front()
//! ```

use crate::limits::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

pub struct Queue<T> {
    st: Mutex<State<T>>,
    cv: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    sleeping: usize,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            st: Mutex::new(State {
                items: VecDeque::new(),
                sleeping: 0,
            }),
            cv: Condvar::new(),
        }
    }
}

impl<T> Queue<T> {
    /// Queue `x` and wake one sleeping consumer, if any.
    pub fn push(&self, x: T) {
        let mut s = lock(&self.st);
        s.items.push_back(x);
        if s.sleeping > 0 {
            self.cv.notify_one();
        }
    }

    /// The oldest item, sleeping until there is one.
    pub fn pop(&self) -> T {
        let mut s = lock(&self.st);
        loop {
            if let Some(x) = s.items.pop_front() {
                return x;
            }
            s.sleeping += 1;
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
            s.sleeping -= 1;
        }
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        lock(&self.st).items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn items_come_out_in_the_order_they_went_in() {
        let q = Queue::default();
        for i in 0..5 {
            q.push(i);
        }
        assert_eq!(q.len(), 5);
        assert_eq!(
            (0..5).map(|_| q.pop()).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn every_item_pushed_reaches_exactly_one_of_several_sleeping_consumers() {
        let q = Arc::new(Queue::<Option<u64>>::default());
        let consumers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut sum = 0;
                    while let Some(x) = q.pop() {
                        sum += x;
                    }
                    sum
                })
            })
            .collect();
        for x in 1..=1000 {
            q.push(Some(x));
        }
        for _ in 0..4 {
            q.push(None);
        }
        let total: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(total, 1000 * 1001 / 2);
    }
}
