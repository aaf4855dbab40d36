//! blk-mq `none`: requests go to the device in arrival order, unmerged.

use super::{IoScheduler, SchedulerEntry};
use crate::params::{Entry, Values};
use crate::request::DevIo;
use crate::Ns;
use std::collections::VecDeque;

pub const ENTRY: SchedulerEntry = Entry {
    name: "none",
    help: "blk-mq none: first in, first out, no merging",
    params: &[],
    build,
};

fn build(_: &Values, _: &[u32]) -> Box<dyn IoScheduler> {
    Box::new(Fifo::default())
}

#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<DevIo>,
}

impl IoScheduler for Fifo {
    fn name(&self) -> &'static str {
        ENTRY.name
    }
    fn insert(&mut self, _now: Ns, io: DevIo) {
        self.q.push_back(io);
    }
    fn dispatch(&mut self, _now: Ns) -> Option<DevIo> {
        self.q.pop_front()
    }
    #[inline]
    fn pass_alone(&mut self, _now: Ns, io: DevIo) -> Option<DevIo> {
        // Queued and dispatched at once: the queue stays empty.
        debug_assert!(self.q.is_empty());
        Some(io)
    }
    fn queued(&self) -> usize {
        self.q.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Op;
    use crate::sched::io;

    #[test]
    fn requests_leave_in_arrival_order() {
        let mut s = Fifo::default();
        s.insert(0, io(1, Op::Read, 900, 4096));
        s.insert(0, io(2, Op::Read, 0, 4096));
        assert_eq!(s.dispatch(0).unwrap().tag, 1);
        assert_eq!(s.dispatch(0).unwrap().tag, 2);
        assert!(s.dispatch(0).is_none());
    }
}
