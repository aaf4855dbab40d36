//! The host page cache: 4 KiB pages of each open image (a "file": one VM disk's backing
//! volume range), kept in LRU order, with dirty tracking and in-flight reads.
//!
//! ```text
//! read(pages)     : cached → hit (move to MRU); being fetched → wait on that fetch;
//!                   absent → reported missing (the engine fetches it: begin_fetch/complete_fetch)
//! write(pages)    : page becomes dirty (inserted if absent), dirty list keeps first-dirtied order
//! take_dirty(...) : oldest dirty pages first (optionally of one file, optionally only those
//!                   dirtied before a time), marked clean, returned as contiguous ranges
//! insert          : when full, evict clean pages from the LRU end; dirty and in-flight pages
//!                   are never evicted (the engine throttles writers at dirty_ratio)
//! ```
//!
//! Assumptions: one LRU list (Linux keeps active/inactive lists; a single LRU is the classic
//! approximation); whole-page writes (sub-page writes would need read-modify-write, which
//! guests with 4 KiB blocks do not issue). Memory: one hash entry and one 40-byte node per
//! cached page.

use crate::Ns;
use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Clean,
    Dirty,
    Pending,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    key: u64,
    prev: u32,
    next: u32,
    dprev: u32,
    dnext: u32,
    dirtied_ns: Ns,
    fetch: u32,
    state: State,
}

/// Pages `[first, first + n)` of `file`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRange {
    pub file: u32,
    pub first: u64,
    pub n: u64,
}

/// Result of a read lookup (reused between calls to avoid allocation).
#[derive(Clone, Debug, Default)]
pub struct ReadLookup {
    pub hit_pages: u64,
    /// Absent pages, coalesced, in order.
    pub missing: Vec<PageRange>,
    /// Fetches (engine ids) this read must wait for, deduplicated.
    pub waits: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    pub hit_pages: u64,
    pub miss_pages: u64,
    pub evicted_pages: u64,
    pub written_back_pages: u64,
}

pub struct PageCache {
    map: FxHashMap<u64, u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    dhead: u32,
    dtail: u32,
    capacity_pages: u64,
    len: u64,
    dirty: u64,
    stats: PageCacheStats,
}

#[inline]
fn key(file: u32, page: u64) -> u64 {
    ((file as u64) << 44) | (page & ((1u64 << 44) - 1))
}

impl PageCache {
    pub fn new(capacity_pages: u64) -> Self {
        Self {
            map: FxHashMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            dhead: NIL,
            dtail: NIL,
            capacity_pages: capacity_pages.max(1),
            len: 0,
            dirty: 0,
            stats: PageCacheStats::default(),
        }
    }

    pub fn capacity_pages(&self) -> u64 {
        self.capacity_pages
    }
    pub fn cached_pages(&self) -> u64 {
        self.len
    }
    pub fn dirty_pages(&self) -> u64 {
        self.dirty
    }
    pub fn stats(&self) -> PageCacheStats {
        self.stats
    }
    pub fn contains(&self, file: u32, page: u64) -> bool {
        self.map
            .get(&key(file, page))
            .is_some_and(|&i| self.nodes[i as usize].state != State::Pending)
    }
    pub fn is_dirty(&self, file: u32, page: u64) -> bool {
        self.map
            .get(&key(file, page))
            .is_some_and(|&i| self.nodes[i as usize].state == State::Dirty)
    }

    // --- intrusive lists -------------------------------------------------------------

    fn lru_unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].prev, self.nodes[i as usize].next);
        if p != NIL {
            self.nodes[p as usize].next = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.nodes[n as usize].prev = p;
        } else {
            self.tail = p;
        }
    }

    fn lru_push_front(&mut self, i: u32) {
        self.nodes[i as usize].prev = NIL;
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
    }

    #[inline]
    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.lru_unlink(i);
            self.lru_push_front(i);
        }
    }

    fn dirty_unlink(&mut self, i: u32) {
        let (p, n) = (self.nodes[i as usize].dprev, self.nodes[i as usize].dnext);
        if p != NIL {
            self.nodes[p as usize].dnext = n;
        } else {
            self.dhead = n;
        }
        if n != NIL {
            self.nodes[n as usize].dprev = p;
        } else {
            self.dtail = p;
        }
    }

    fn dirty_push_back(&mut self, i: u32) {
        self.nodes[i as usize].dnext = NIL;
        self.nodes[i as usize].dprev = self.dtail;
        if self.dtail != NIL {
            self.nodes[self.dtail as usize].dnext = i;
        } else {
            self.dhead = i;
        }
        self.dtail = i;
    }

    fn alloc(&mut self, k: u64, state: State) -> u32 {
        self.make_room();
        let node = Node {
            key: k,
            prev: NIL,
            next: NIL,
            dprev: NIL,
            dnext: NIL,
            dirtied_ns: 0,
            fetch: 0,
            state,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(k, i);
        self.lru_push_front(i);
        self.len += 1;
        i
    }

    fn remove(&mut self, i: u32) {
        let n = self.nodes[i as usize];
        if n.state == State::Dirty {
            self.dirty_unlink(i);
            self.dirty -= 1;
        }
        self.lru_unlink(i);
        self.map.remove(&n.key);
        self.free.push(i);
        self.len -= 1;
    }

    /// Evict clean pages from the LRU end until there is room for one more page.
    fn make_room(&mut self) {
        let mut cur = self.tail;
        while self.len >= self.capacity_pages && cur != NIL {
            let prev = self.nodes[cur as usize].prev;
            if self.nodes[cur as usize].state == State::Clean {
                self.remove(cur);
                self.stats.evicted_pages += 1;
            }
            cur = prev;
        }
    }

    // --- operations ------------------------------------------------------------------

    /// Look up pages for a read; touches hits, reports absent pages and pending fetches.
    pub fn read(&mut self, file: u32, first: u64, n: u64, out: &mut ReadLookup) {
        out.hit_pages = 0;
        out.missing.clear();
        out.waits.clear();
        for p in first..first + n {
            match self.map.get(&key(file, p)).copied() {
                Some(i) => {
                    let node = self.nodes[i as usize];
                    if node.state == State::Pending {
                        if !out.waits.contains(&node.fetch) {
                            out.waits.push(node.fetch);
                        }
                    } else {
                        out.hit_pages += 1;
                    }
                    self.touch(i);
                }
                None => match out.missing.last_mut() {
                    Some(r) if r.first + r.n == p => r.n += 1,
                    _ => out.missing.push(PageRange { file, first: p, n: 1 }),
                },
            }
        }
        self.stats.hit_pages += out.hit_pages;
        self.stats.miss_pages += n - out.hit_pages;
    }

    /// Absent pages of a range (no LRU effect), appended coalesced to `out`.
    pub fn absent(&self, file: u32, first: u64, n: u64, out: &mut Vec<PageRange>) {
        for p in first..first + n {
            if !self.map.contains_key(&key(file, p)) {
                match out.last_mut() {
                    Some(r) if r.file == file && r.first + r.n == p => r.n += 1,
                    _ => out.push(PageRange { file, first: p, n: 1 }),
                }
            }
        }
    }

    /// Mark absent pages of a range as being fetched by `fetch`.
    pub fn begin_fetch(&mut self, file: u32, first: u64, n: u64, fetch: u32) {
        for p in first..first + n {
            let k = key(file, p);
            if !self.map.contains_key(&k) {
                let i = self.alloc(k, State::Pending);
                self.nodes[i as usize].fetch = fetch;
            }
        }
    }

    /// A fetch finished: its pending pages become clean (pages dirtied meanwhile stay dirty).
    pub fn complete_fetch(&mut self, file: u32, first: u64, n: u64, fetch: u32) {
        for p in first..first + n {
            if let Some(&i) = self.map.get(&key(file, p)) {
                let node = &mut self.nodes[i as usize];
                if node.state == State::Pending && node.fetch == fetch {
                    node.state = State::Clean;
                }
            }
        }
    }

    /// Insert clean pages (data just read from the device outside a fetch).
    pub fn fill(&mut self, file: u32, first: u64, n: u64) {
        for p in first..first + n {
            let k = key(file, p);
            match self.map.get(&k).copied() {
                Some(i) => self.touch(i),
                None => {
                    self.alloc(k, State::Clean);
                }
            }
        }
    }

    /// A buffered write: the pages become dirty. Returns how many were newly dirtied.
    pub fn write(&mut self, now: Ns, file: u32, first: u64, n: u64) -> u64 {
        let mut newly = 0;
        for p in first..first + n {
            let k = key(file, p);
            let i = match self.map.get(&k).copied() {
                Some(i) => {
                    self.touch(i);
                    i
                }
                None => self.alloc(k, State::Clean),
            };
            if self.nodes[i as usize].state != State::Dirty {
                self.nodes[i as usize].state = State::Dirty;
                self.nodes[i as usize].dirtied_ns = now;
                self.dirty_push_back(i);
                self.dirty += 1;
                newly += 1;
            }
        }
        newly
    }

    /// Drop pages (after an O_DIRECT write or a discard), dirty or not.
    pub fn invalidate(&mut self, file: u32, first: u64, n: u64) {
        if self.len == 0 {
            return;
        }
        for p in first..first + n {
            if let Some(&i) = self.map.get(&key(file, p)) {
                self.remove(i);
            }
        }
    }

    /// Take up to `max_pages` dirty pages for writeback, oldest first; only of `file` if
    /// given, only those dirtied at or before `dirtied_before` if given. They become clean.
    /// Ranges are appended to `out` sorted by file and page, coalesced. Returns pages taken.
    pub fn take_dirty(
        &mut self,
        file: Option<u32>,
        dirtied_before: Option<Ns>,
        max_pages: u64,
        out: &mut Vec<PageRange>,
    ) -> u64 {
        let mut keys = Vec::new();
        let mut cur = self.dhead;
        while cur != NIL && (keys.len() as u64) < max_pages {
            let node = self.nodes[cur as usize];
            if dirtied_before.is_some_and(|t| node.dirtied_ns > t) {
                break;
            }
            let next = node.dnext;
            if file.is_none_or(|f| (node.key >> 44) as u32 == f) {
                self.dirty_unlink(cur);
                self.dirty -= 1;
                self.nodes[cur as usize].state = State::Clean;
                keys.push(node.key);
            }
            cur = next;
        }
        keys.sort_unstable();
        for &k in &keys {
            let (f, p) = ((k >> 44) as u32, k & ((1u64 << 44) - 1));
            match out.last_mut() {
                Some(r) if r.file == f && r.first + r.n == p => r.n += 1,
                _ => out.push(PageRange { file: f, first: p, n: 1 }),
            }
        }
        self.stats.written_back_pages += keys.len() as u64;
        keys.len() as u64
    }

    /// Fetches a range is waiting for (pages in flight), deduplicated, appended to `out`;
    /// no LRU or statistics effect.
    pub fn pending_fetches(&self, file: u32, first: u64, n: u64, out: &mut Vec<u32>) {
        for p in first..first + n {
            if let Some(&i) = self.map.get(&key(file, p)) {
                let node = &self.nodes[i as usize];
                if node.state == State::Pending && !out.contains(&node.fetch) {
                    out.push(node.fetch);
                }
            }
        }
    }

    /// Make the dirty pages of a range clean (they are being written by the caller, as an
    /// O_DSYNC write does for its own range). Returns how many were dirty.
    pub fn clean_range(&mut self, file: u32, first: u64, n: u64) -> u64 {
        let mut cleaned = 0;
        for p in first..first + n {
            if let Some(&i) = self.map.get(&key(file, p)) {
                if self.nodes[i as usize].state == State::Dirty {
                    self.dirty_unlink(i);
                    self.dirty -= 1;
                    self.nodes[i as usize].state = State::Clean;
                    cleaned += 1;
                }
            }
        }
        self.stats.written_back_pages += cleaned;
        cleaned
    }

    /// When the oldest dirty page was dirtied.
    pub fn oldest_dirty_ns(&self) -> Option<Ns> {
        (self.dhead != NIL).then(|| self.nodes[self.dhead as usize].dirtied_ns)
    }

    /// Dirty pages of one file.
    pub fn dirty_pages_of(&self, file: u32) -> u64 {
        let mut n = 0;
        let mut cur = self.dhead;
        while cur != NIL {
            if (self.nodes[cur as usize].key >> 44) as u32 == file {
                n += 1;
            }
            cur = self.nodes[cur as usize].dnext;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_read_of_the_same_pages_hits() {
        let mut c = PageCache::new(100);
        let mut l = ReadLookup::default();
        c.read(0, 10, 4, &mut l);
        assert_eq!(l.hit_pages, 0);
        assert_eq!(l.missing, vec![PageRange { file: 0, first: 10, n: 4 }]);
        c.fill(0, 10, 4);
        c.read(0, 10, 4, &mut l);
        assert_eq!(l.hit_pages, 4);
        assert!(l.missing.is_empty());
    }

    #[test]
    fn the_least_recently_used_clean_page_is_evicted_first() {
        let mut c = PageCache::new(3);
        c.fill(0, 1, 3);
        let mut l = ReadLookup::default();
        c.read(0, 1, 1, &mut l); // page 1 becomes MRU, page 2 is LRU
        c.fill(0, 9, 1);
        assert!(c.contains(0, 1));
        assert!(!c.contains(0, 2));
        assert!(c.contains(0, 3));
        assert_eq!(c.cached_pages(), 3);
        assert_eq!(c.stats().evicted_pages, 1);
    }

    #[test]
    fn dirty_pages_are_never_evicted() {
        let mut c = PageCache::new(2);
        c.write(0, 0, 0, 2);
        c.fill(0, 5, 1);
        assert!(c.is_dirty(0, 0) && c.is_dirty(0, 1));
        assert_eq!(c.dirty_pages(), 2);
    }

    #[test]
    fn writeback_takes_the_oldest_dirty_pages_as_sorted_ranges() {
        let mut c = PageCache::new(100);
        c.write(10, 0, 20, 2);
        c.write(20, 0, 5, 3);
        c.write(30, 1, 0, 1);
        let mut out = Vec::new();
        assert_eq!(c.take_dirty(None, Some(20), 100, &mut out), 5);
        assert_eq!(
            out,
            vec![PageRange { file: 0, first: 5, n: 3 }, PageRange { file: 0, first: 20, n: 2 }]
        );
        assert_eq!(c.dirty_pages(), 1);
        out.clear();
        assert_eq!(c.take_dirty(Some(0), None, 100, &mut out), 0);
        assert_eq!(c.take_dirty(Some(1), None, 100, &mut out), 1);
        assert_eq!(c.oldest_dirty_ns(), None);
    }

    #[test]
    fn a_read_of_pages_being_fetched_waits_for_that_fetch() {
        let mut c = PageCache::new(100);
        c.begin_fetch(0, 0, 8, 7);
        let mut l = ReadLookup::default();
        c.read(0, 4, 8, &mut l);
        assert_eq!(l.waits, vec![7]);
        assert_eq!(l.missing, vec![PageRange { file: 0, first: 8, n: 4 }]);
        c.complete_fetch(0, 0, 8, 7);
        c.read(0, 0, 8, &mut l);
        assert_eq!(l.hit_pages, 8);
    }

    #[test]
    fn invalidation_drops_clean_and_dirty_pages() {
        let mut c = PageCache::new(100);
        c.fill(0, 0, 4);
        c.write(0, 0, 2, 4);
        c.invalidate(0, 0, 8);
        assert_eq!(c.cached_pages(), 0);
        assert_eq!(c.dirty_pages(), 0);
    }
}
