//! `[cpu] model = "dedicated"`: every thread has a core of its own, so the CPU is never
//! a bottleneck (the model before the CPU layer, and what `[cpu]` absent means).
//!
//! ```text
//! submit(now, t, ns):  end = max(now, t.free_at) + ns;  t.free_at = end   (a thread's items
//!                      run one after another, in submission order)
//! advance(now):        every item with end <= now, by (end, submission order)
//! ```
//!
//! `host.cores` limits nothing: it only bounds the affinities accepted, as for any scheduler
//! ([`ThreadSpec::check`]).

use super::{CpuError, CpuScheduler, CpuStats, ThreadId, ThreadSpec, ThreadStats, Token};
use crate::Ns;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Clone, Debug, Default)]
pub struct Dedicated {
    cores: usize,
    free_at: Vec<Ns>,
    stats: Vec<ThreadStats>,
    /// (end, submission sequence, thread, token), earliest first.
    pending: BinaryHeap<Reverse<(Ns, u64, u32, Token)>>,
    seq: u64,
}

impl Dedicated {
    /// A host whose `cores` is reported but never limits anything.
    pub fn new(cores: usize) -> Dedicated {
        Dedicated {
            cores,
            ..Dedicated::default()
        }
    }
}

impl CpuScheduler for Dedicated {
    fn name(&self) -> &'static str {
        "dedicated"
    }
    fn cores(&self) -> usize {
        self.cores
    }
    fn add_thread(&mut self, spec: ThreadSpec) -> Result<ThreadId, CpuError> {
        spec.check(self.cores)?;
        self.free_at.push(0);
        self.stats.push(ThreadStats::of(spec.kind));
        Ok(ThreadId(self.free_at.len() as u32 - 1))
    }
    fn submit(
        &mut self,
        now: Ns,
        thread: ThreadId,
        cpu_ns: Ns,
        token: Token,
    ) -> Result<(), CpuError> {
        let t = thread.0 as usize;
        let Some(free) = self.free_at.get_mut(t) else {
            return Err(CpuError::UnknownThread(thread.0, self.free_at.len()));
        };
        let start = now.max(*free);
        *free = start + cpu_ns;
        let s = &mut self.stats[t];
        s.cpu_ns += cpu_ns;
        s.wait_ns += start - now;
        self.seq += 1;
        self.pending
            .push(Reverse((start + cpu_ns, self.seq, thread.0, token)));
        Ok(())
    }
    fn next_event_ns(&self) -> Option<Ns> {
        self.pending.peek().map(|Reverse((end, ..))| *end)
    }
    fn advance(&mut self, now: Ns, done: &mut Vec<Token>) {
        while let Some(&Reverse((end, _, t, token))) = self.pending.peek() {
            if end > now {
                break;
            }
            self.pending.pop();
            self.stats[t as usize].completed += 1;
            done.push(token);
        }
    }
    fn stats(&self, _now: Ns) -> CpuStats {
        CpuStats {
            threads: self.stats.clone(),
            core_busy_ns: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CoreSet, ThreadKind, NICE_0_WEIGHT};
    use super::*;
    use crate::US;

    fn thread(s: &mut Dedicated) -> ThreadId {
        s.add_thread(ThreadSpec {
            kind: ThreadKind::Job,
            weight: NICE_0_WEIGHT,
            affinity: CoreSet::of(&[0]),
            migration_cost_ns: None,
        })
        .unwrap()
    }

    #[test]
    fn threads_never_wait_for_each_other_but_a_threads_items_run_in_turn() {
        let mut s = Dedicated::new(1);
        let (a, b) = (thread(&mut s), thread(&mut s));
        s.submit(0, a, 10 * US, 1).unwrap();
        s.submit(0, b, 10 * US, 2).unwrap();
        s.submit(0, a, 5 * US, 3).unwrap();
        let mut done = Vec::new();
        s.advance(10 * US, &mut done);
        assert_eq!(done, vec![1, 2]);
        assert_eq!(s.next_event_ns(), Some(15 * US));
        s.advance(15 * US, &mut done);
        assert_eq!(done, vec![1, 2, 3]);
        let st = s.stats(15 * US);
        assert_eq!(st.threads[0].cpu_ns, 15 * US);
        assert_eq!(st.threads[0].wait_ns, 10 * US);
        assert_eq!(st.threads[1].wait_ns, 0);
        assert_eq!(
            s.submit(0, ThreadId(9), 1, 0),
            Err(CpuError::UnknownThread(9, 2))
        );
    }
}
