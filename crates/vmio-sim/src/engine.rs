//! The discrete-event core: a priority queue of events in virtual time.
//!
//! Virtual time is integer nanoseconds. Events are ordered by (time, sequence number), the
//! sequence number being the order of scheduling, so two runs with the same inputs process
//! events in exactly the same order. An event is a small integer payload (kind and index
//! packed by the caller) to keep the heap compact.
//!
//! The queue is a [`MinHeap`] keyed by (time, seq) packed in one `u128`. Keys here are
//! unique (the sequence number), so the pop order is exactly the (time, seq) order whatever
//! the heap's internal layout. The device models use the same heap for their pending
//! completions and write-buffer releases.
//!
//! Most events' handlers push the next event of their request. The heap's pop therefore
//! leaves its top in place, marked as taken (`hole`), and the next push into the heap
//! replaces it ([`MinHeap::replace_top`]: one sift instead of a pop's and a push's); a pop
//! or any other look at the heap first removes a taken top that nothing replaced. Either
//! way the heap holds the same entries, so the order is the keys' order as before. Measured
//! with callgrind on `vmio bench sim`'s cases (instructions per simulated I/O): pagecache-hit
//! 2964 -> 2890, cpu-kvm 14550 -> 13811, hdd-raid0 8095 -> 8048. A FIFO lane for the events
//! pushed for the current time (popped before the heap's later events, which keeps the
//! (time, seq) order) was measured with it and left out: few events are pushed for the
//! current time, and its checks cost more than it saved (2905, 13849, 8075).
//!
//! A run can be watched from outside ([`Watch`]): every [`WATCH_EVERY`] events the queue
//! shows the watch the virtual time, and a watch that answers `false` ends the run there,
//! as if no event were left (Ctrl-C: the caller checks its signals in the watch, and the
//! run reports what ran so far; a progress line: the watch draws it). Without a watch the
//! queue behaves exactly as before; the watch only reads, so it changes no result.
//!
//! ```text
//! pop():  if events processed % WATCH_EVERY == 0 and watch(now) == false: stop, return None
//! ```

use vmio_core::Ns;

/// A min-heap of `(key, value)` pairs ordered by `key` (lexicographic on the two words).
/// Entries with equal keys come out in an unspecified order: give them distinct keys (a
/// sequence number) when the order matters.
///
/// A binary implicit heap like `std`'s `BinaryHeap` (pop moves the hole to the bottom, then
/// sifts the last entry up), with the key stored as one `u128` so that each comparison is a
/// single wide compare. A 4-ary heap (Johnson 1975; LaMarca and Ladner 1996) was measured
/// against it with callgrind on `vmio bench sim`'s cases: more instructions on every case
/// tried (pagecache-hit 3026 -> 3075 a simulated I/O, hdd-raid0 8064 -> 8108, cpu-kvm
/// 17125 -> 17229): the simulator's heaps are shallow, and a level saved costs three more
/// compares.
#[derive(Clone, Debug)]
pub struct MinHeap<T> {
    v: Vec<(u128, T)>,
}

impl<T> Default for MinHeap<T> {
    fn default() -> Self {
        Self { v: Vec::new() }
    }
}

#[inline]
fn wide(key: (u64, u64)) -> u128 {
    (key.0 as u128) << 64 | key.1 as u128
}

#[inline]
fn split(k: u128) -> (u64, u64) {
    ((k >> 64) as u64, k as u64)
}

impl<T: Copy> MinHeap<T> {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            v: Vec::with_capacity(n),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.v.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }

    /// The smallest key.
    #[inline]
    pub fn peek_key(&self) -> Option<(u64, u64)> {
        self.v.first().map(|e| split(e.0))
    }

    #[inline]
    pub fn push(&mut self, key: (u64, u64), val: T) {
        let k = wide(key);
        let mut i = self.v.len();
        self.v.push((k, val));
        let v = &mut self.v[..];
        while i > 0 {
            let parent = (i - 1) / 2;
            // SAFETY: parent < i < v.len() (i starts at the last index and only decreases).
            let p = unsafe { *v.get_unchecked(parent) };
            if p.0 <= k {
                break;
            }
            // SAFETY: as above.
            unsafe { *v.get_unchecked_mut(i) = p };
            i = parent;
        }
        // SAFETY: i <= the last index.
        unsafe { *v.get_unchecked_mut(i) = (k, val) };
    }

    /// The smallest entry.
    #[inline]
    pub fn peek(&self) -> Option<((u64, u64), T)> {
        self.v.first().map(|e| (split(e.0), e.1))
    }

    /// Remove and return the smallest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<((u64, u64), T)> {
        let last = self.v.pop()?;
        if self.v.is_empty() {
            return Some((split(last.0), last.1));
        }
        let top = self.v[0];
        self.sift_into_root(last);
        Some((split(top.0), top.1))
    }

    /// Replace the smallest entry by `(key, val)`: a pop and a push in one pass, without
    /// the pop's sift of the last entry (Knuth, TAOCP vol. 3, 5.2.3: the "replace the
    /// root" step of heapsort's sift-down). The heap must not be empty.
    #[inline]
    pub fn replace_top(&mut self, key: (u64, u64), val: T) {
        debug_assert!(!self.v.is_empty());
        self.sift_into_root((wide(key), val));
    }

    /// `e` in place of the root entry, which goes: the root's hole moves down to a leaf
    /// along the smaller children, then `e` sifts up from there (it usually belongs near
    /// the bottom): Wegener's bottom-up heapsort step, as `std`'s BinaryHeap::pop. Indices
    /// are checked by the loop conditions, not again on each access.
    #[inline]
    fn sift_into_root(&mut self, e: (u128, T)) {
        let v = &mut self.v[..];
        let n = v.len();
        let mut i = 0;
        let mut c = 1;
        // SAFETY (every access below): i < c, and c + 1 < n or c < n where it is read, with
        // n = v.len() >= 1; i only takes values c had; parent < i.
        unsafe {
            while c + 1 < n {
                c += (v.get_unchecked(c + 1).0 < v.get_unchecked(c).0) as usize;
                *v.get_unchecked_mut(i) = *v.get_unchecked(c);
                i = c;
                c = 2 * i + 1;
            }
            if c + 1 == n {
                *v.get_unchecked_mut(i) = *v.get_unchecked(c);
                i = c;
            }
            while i > 0 {
                let parent = (i - 1) / 2;
                let p = *v.get_unchecked(parent);
                if p.0 <= e.0 {
                    break;
                }
                *v.get_unchecked_mut(i) = p;
                i = parent;
            }
            *v.get_unchecked_mut(i) = e;
        }
    }
}

/// Looks at a run from outside: given the virtual time, answers whether the run goes on.
pub type Watch = Box<dyn FnMut(Ns) -> bool + Send>;

/// Events between two looks of a [`Watch`]: a few milliseconds of simulation (millions of
/// events a second), so Ctrl-C is seen well within a second and the check costs nothing.
pub const WATCH_EVERY: u64 = 1 << 14;

#[derive(Default)]
pub struct EventQueue {
    heap: MinHeap<u64>,
    /// The heap's top was popped and is still in place, to be replaced by the next push
    /// into the heap or removed before the heap is looked at (module doc).
    hole: bool,
    seq: u64,
    now: Ns,
    processed: u64,
    /// Events pushed with [`EventQueue::push_background`] and not popped yet.
    background: usize,
    watch: Option<Watch>,
    /// The watch stopped the run.
    stopped: bool,
    /// The key and payload of the event popped last.
    last: ((Ns, u64), u64),
    /// Events counted in `processed` without being handled one by one ([`EventQueue::skip`]).
    skipped: u64,
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
    #[inline(always)]
    pub fn push(&mut self, at: Ns, payload: u64) {
        self.seq += 1;
        let at = at.max(self.now);
        if self.hole {
            self.hole = false;
            self.heap.replace_top((at, self.seq), payload);
        } else {
            self.heap.push((at, self.seq), payload);
        }
    }

    /// Remove the heap's taken top if no push replaced it.
    #[inline]
    fn settle(&mut self) {
        if self.hole {
            self.hole = false;
            self.heap.pop();
        }
    }

    /// Schedule a background event: one that only recurs (a periodic tick), which
    /// [`EventQueue::foreground`] does not count. Its handler calls
    /// [`EventQueue::background_popped`].
    #[inline]
    pub fn push_background(&mut self, at: Ns, payload: u64) {
        self.background += 1;
        self.push(at, payload);
    }

    /// A background event was popped.
    #[inline]
    pub fn background_popped(&mut self) {
        self.background -= 1;
    }

    /// Events pending that are not background events: when there are none, nothing but
    /// the ticks themselves could ever happen again.
    #[inline]
    pub fn foreground(&self) -> usize {
        self.len() - self.background
    }

    /// Let `watch` look at the run every [`WATCH_EVERY`] events (None: nobody looks).
    pub fn set_watch(&mut self, watch: Option<Watch>) {
        self.watch = watch;
    }

    /// A watch ended the run before its last event.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The next event, advancing virtual time to it; None when there is none left or a
    /// watch stopped the run.
    #[inline]
    pub fn pop(&mut self) -> Option<(Ns, u64)> {
        if self.processed.is_multiple_of(WATCH_EVERY) {
            if let Some(watch) = self.watch.as_mut() {
                if self.stopped || !watch(self.now) {
                    self.stopped = true;
                    return None;
                }
            }
        }
        self.settle();
        let ((t, seq), p) = self.heap.peek()?;
        self.hole = true;
        debug_assert!(t >= self.now);
        self.last = ((t, seq), p);
        self.now = t;
        self.processed += 1;
        Some((t, p))
    }

    pub fn len(&self) -> usize {
        self.heap.len() - self.hole as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Events handled one by one so far: [`EventQueue::processed`] less those a
    /// [`EventQueue::skip`] counted.
    pub fn handled(&self) -> u64 {
        self.processed - self.skipped
    }

    /// The earliest time of a pending event whose payload `pick` selects.
    pub fn earliest(&self, pick: impl Fn(u64) -> bool) -> Option<Ns> {
        // A taken top is the heap's first entry.
        (self.heap.v.iter().skip(self.hole as usize))
            .filter(|e| pick(e.1))
            .map(|e| split(e.0).0)
            .min()
    }

    /// Fast-forward by `dt`: the event popped last and every pending event whose payload
    /// `pick` selects move `dt` later, keeping their sequence numbers (so their order among
    /// themselves and against every other event stays as it was), and `events` more count
    /// as processed. The caller vouches that the events it skips are exactly what would
    /// have happened (a periodic steady state).
    pub fn skip(&mut self, dt: Ns, events: u64, pick: impl Fn(u64) -> bool) {
        self.settle();
        let mut moved = Vec::new();
        let mut kept = MinHeap::with_capacity(self.heap.len() + 1);
        while let Some((k, p)) = self.heap.pop() {
            if pick(p) {
                moved.push((k, p));
            } else {
                kept.push(k, p);
            }
        }
        moved.push(self.last);
        for ((t, seq), p) in moved {
            kept.push((t + dt, seq), p);
        }
        self.heap = kept;
        self.processed += events;
        self.skipped += events;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_events_are_not_counted_as_foreground() {
        let mut q = EventQueue::new();
        q.push_background(5, 7);
        q.push(10, 1);
        assert_eq!((q.len(), q.foreground()), (2, 1));
        assert_eq!(q.pop(), Some((5, 7)));
        q.background_popped();
        assert_eq!(q.foreground(), 1);
        q.push_background(15, 7);
        assert_eq!(q.pop(), Some((10, 1)));
        assert_eq!(q.foreground(), 0);
    }

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
    fn the_heap_pops_in_key_order() {
        let mut h = MinHeap::default();
        let mut x = 12345u64;
        let mut keys = Vec::new();
        for i in 0..2000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 58, i);
            keys.push(k);
            h.push(k, i);
            if i % 3 == 0 {
                keys.sort();
                let (k, v) = h.pop().unwrap();
                assert_eq!(k, keys.remove(0));
                assert_eq!(v, k.1);
            }
        }
        keys.sort();
        let rest: Vec<_> = std::iter::from_fn(|| h.pop().map(|(k, _)| k)).collect();
        assert_eq!(rest, keys);
        assert!(h.is_empty());
    }

    #[test]
    fn a_heap_of_every_size_up_to_forty_drains_in_key_order_whatever_its_last_node_holds() {
        // Sizes 1..=40 leave the last parent one child or two: each is compared when popped.
        for n in 1..=40u64 {
            let mut h = MinHeap::default();
            let mut keys: Vec<(u64, u64)> = (0..n).map(|i| ((i * 7919) % 13, i)).collect();
            for &k in keys.iter().rev() {
                h.push(k, k.1);
            }
            keys.sort();
            let out: Vec<_> = std::iter::from_fn(|| h.pop().map(|(k, _)| k)).collect();
            assert_eq!(out, keys, "n = {n}");
        }
    }

    #[test]
    fn a_watch_looks_every_watch_every_events_and_stops_the_run_when_it_says_so() {
        let looks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = looks.clone();
        let mut q = EventQueue::new();
        q.set_watch(Some(Box::new(move |now| {
            let mut seen = seen.lock().unwrap();
            seen.push(now);
            seen.len() < 3
        })));
        for t in 0..10 * WATCH_EVERY {
            q.push(t, t);
        }
        let mut popped = 0;
        while q.pop().is_some() {
            popped += 1;
        }
        // Looks after 0, WATCH_EVERY and 2 * WATCH_EVERY events; the third says stop.
        assert_eq!(popped, 2 * WATCH_EVERY);
        assert_eq!(
            *looks.lock().unwrap(),
            vec![0, WATCH_EVERY - 1, 2 * WATCH_EVERY - 1]
        );
        assert!(q.stopped());
        assert_eq!(q.pop(), None, "a stopped run stays stopped");
    }

    #[test]
    fn events_pushed_in_place_of_a_popped_top_come_out_in_time_then_scheduling_order() {
        // A reference: every pending (time, seq, payload), the smallest (time, seq) first.
        let mut q = EventQueue::new();
        let mut pending: Vec<(Ns, u64, u64)> = Vec::new();
        let (mut seq, mut now, mut x): (u64, Ns, u64) = (0, 0, 99);
        let mut last: Option<(Ns, u64, u64)> = None;
        for step in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Half the pushes at the current time (or before it), the rest up to 3 ns later.
            let pushes = (x >> 60) % 3;
            for k in 0..pushes {
                let at = match (x >> (40 + 2 * k)) % 4 {
                    0 => now.saturating_sub(1),
                    1 => now,
                    d => now + d,
                };
                seq += 1;
                q.push(at, step);
                pending.push((at.max(now), seq, step));
            }
            if let (0, Some(l)) = (step % 997, last) {
                // Fast-forward the odd payloads and the event popped last by 5 ns, as a
                // steady state would.
                q.skip(5, 0, |p| p % 2 == 1);
                for e in pending.iter_mut().filter(|e| e.2 % 2 == 1) {
                    e.0 += 5;
                }
                pending.push((l.0 + 5, l.1, l.2));
            }
            assert_eq!(q.len(), pending.len());
            let third = pending.iter().filter(|e| e.2 % 3 == 0).map(|e| e.0).min();
            assert_eq!(q.earliest(|p| p % 3 == 0), third);
            if (x >> 20) % 2 == 0 || pending.len() > 50 {
                let i = (0..pending.len()).min_by_key(|&i| (pending[i].0, pending[i].1));
                let e = i.map(|i| pending.remove(i));
                assert_eq!(q.pop(), e.map(|e| (e.0, e.2)), "step {step}");
                last = e.or(last);
                now = q.now();
            }
        }
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
