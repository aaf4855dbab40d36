//! The host page cache: 4 KiB pages of each open image (a "file": one VM disk's backing
//! volume range), with dirty tracking and in-flight reads; which clean page goes when the
//! cache is full is the [`Eviction`] policy's choice (CLOCK by default, see [`super::eviction`]).
//!
//! ```text
//! read(pages)     : cached → hit (set its referenced bit); being fetched → wait on that fetch;
//!                   absent → reported missing (the engine fetches it: begin_fetch/complete_fetch)
//! write(pages)    : page becomes dirty (inserted if absent), dirty list keeps first-dirtied order
//! take_dirty(...) : oldest dirty pages first (optionally of one file, optionally only those
//!                   dirtied before a time), marked clean, returned as contiguous ranges
//! insert          : when full, the eviction policy picks a clean page (E::victim) and the new
//!                   page takes its slot; dirty and in-flight pages are never evicted (the
//!                   engine throttles writers at dirty_ratio)
//! hit, fill, write: set the page's referenced flag (PG_referenced, as mark_page_accessed
//!                   does) and tell the policy (E::touched); new pages: E::inserted;
//!                   invalidated pages: E::removed
//! ```
//!
//! Assumptions: whole-page writes (sub-page writes would need read-modify-write, which guests with
//! 4 KiB blocks do not issue). Index: like the kernel's per-inode xarray, a two-level radix tree per file (leaves of 1024
//! page entries, allocated on first use), so a lookup is one dependent load into a leaf; each
//! entry packs the page's state, referenced bit and slot. Like the xarray's marks (the kernel
//! tags dirty pages, `PAGECACHE_TAG_DIRTY`, and writeback walks them with
//! `find_get_pages_range_tag`, `filemap_get_folios_tag` in recent kernels), each leaf has a
//! bitmap of its present and of its dirty entries, and each file a bitmap of its leaves
//! holding dirty pages:
//!
//! ```text
//! drop_file(f)        : for each leaf, for each set bit of present (page order): remove
//! take_dirty(Some(f)) : for each set bit of f's dirty leaves, for each set bit of the leaf's
//!                       dirty map (page order): take, until max_pages
//! ```
//!
//! Memory: 4 bytes of index per page of a touched 4 MiB region (and 264 bytes of bitmaps and
//! counts per leaf), one 32-byte slot per cached page and the eviction policy's state
//! (`E::SLOT_BYTES`: none for CLOCK, 8 bytes for LRU); leaves emptied by drop_file are kept
//! for reuse, at most 256 of them.

use super::{Eviction, Probe, Slots};
use crate::Ns;

const NIL: u32 = u32::MAX;
const LEAF_BITS: u32 = 10;
const LEAF: usize = 1 << LEAF_BITS;
/// Entry layout: bits 0..28 slot, bit 28 referenced, bits 29..31 state (0 = absent).
const SLOT_MASK: u32 = (1 << 28) - 1;
const REF_BIT: u32 = 1 << 28;
const STATE_SHIFT: u32 = 29;
const CLEAN: u32 = 1;
const DIRTY: u32 = 2;
const PENDING: u32 = 3;

#[inline]
fn state_of(e: u32) -> u32 {
    e >> STATE_SHIFT
}

#[inline]
fn entry(state: u32, slot: u32) -> u32 {
    (state << STATE_SHIFT) | slot
}

/// Per-slot data of a cached page.
#[derive(Clone, Copy, Debug)]
struct Node {
    file: u32,
    page: u64,
    dirtied_ns: Ns,
    dprev: u32,
    dnext: u32,
    fetch: u32,
    live: bool,
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

/// Words of a leaf's page bitmaps.
const WORDS: usize = LEAF / 64;
/// Emptied leaves kept for reuse (a file created after one was deleted takes a leaf from
/// here rather than a fresh zeroed allocation): at most this many, about 1 MiB.
const SPARE_LEAVES: usize = 256;

/// A leaf of the radix index: LEAF entries, and bitmaps of the present (cached or in-flight)
/// and the dirty entries, so a walk over a file's pages (drop_file, a per-file take_dirty)
/// visits only those, in page order, as find_next_bit over the kernel's xarray marks does.
struct Leaf {
    e: [u32; LEAF],
    present: [u64; WORDS],
    dirty: [u64; WORDS],
    n_present: u32,
    n_dirty: u32,
}

impl Leaf {
    fn zeroed() -> Box<Leaf> {
        Box::new(Leaf {
            e: [0; LEAF],
            present: [0; WORDS],
            dirty: [0; WORDS],
            n_present: 0,
            n_dirty: 0,
        })
    }
}

/// Indexes (within a leaf) of the set bits of `bits`, in increasing order.
fn set_bits(bits: &[u64; WORDS]) -> impl Iterator<Item = usize> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        let mut m = word;
        std::iter::from_fn(move || {
            (m != 0).then(|| {
                let b = m.trailing_zeros() as usize;
                m &= m - 1;
                w * 64 + b
            })
        })
    })
}

/// A file's radix index: leaves of LEAF entries, indexed by page >> LEAF_BITS.
#[derive(Default)]
struct FileIndex {
    leaves: Vec<Option<Box<Leaf>>>,
    /// Dirty pages of the file (so a per-file writeback need not walk the dirty list).
    dirty: u64,
    /// Pages present (cached or in flight) in the file.
    present: u64,
    /// Bit per leaf: the leaf holds dirty pages.
    dirty_leaves: Vec<u64>,
}

/// The index entry of a page (0 when absent).
#[inline]
fn index_get(files: &[FileIndex], file: u32, page: u64) -> u32 {
    let leaf = (page >> LEAF_BITS) as usize;
    match files.get(file as usize).and_then(|f| f.leaves.get(leaf)) {
        Some(Some(l)) => l.e[(page as usize) & (LEAF - 1)],
        _ => 0,
    }
}

/// Set a page's entry, its leaf allocated on first use (from `spare` if any), keeping the
/// leaf's bitmaps and counts and the file's counts in step with the entry's state.
#[inline]
fn index_set(
    files: &mut Vec<FileIndex>,
    spare: &mut Vec<Box<Leaf>>,
    file: u32,
    page: u64,
    new: u32,
) {
    let f = file as usize;
    if files.len() <= f {
        files.resize_with(f + 1, FileIndex::default);
    }
    let ix = &mut files[f];
    let li = (page >> LEAF_BITS) as usize;
    if ix.leaves.len() <= li {
        ix.leaves.resize_with(li + 1, || None);
    }
    let l = ix.leaves[li].get_or_insert_with(|| spare.pop().unwrap_or_else(Leaf::zeroed));
    let k = (page as usize) & (LEAF - 1);
    let old = std::mem::replace(&mut l.e[k], new);
    let (so, sn) = (state_of(old), state_of(new));
    if so == sn {
        return;
    }
    let (w, bit) = (k / 64, 1u64 << (k % 64));
    if so == 0 {
        l.present[w] |= bit;
        l.n_present += 1;
        ix.present += 1;
    } else if sn == 0 {
        l.present[w] &= !bit;
        l.n_present -= 1;
        ix.present -= 1;
    }
    if so == DIRTY || sn == DIRTY {
        if sn == DIRTY {
            l.dirty[w] |= bit;
            l.n_dirty += 1;
        } else {
            l.dirty[w] &= !bit;
            l.n_dirty -= 1;
        }
        let (lw, lbit) = (li / 64, 1u64 << (li % 64));
        if ix.dirty_leaves.len() <= lw {
            ix.dirty_leaves.resize(lw + 1, 0);
        }
        if l.n_dirty > 0 {
            ix.dirty_leaves[lw] |= lbit;
        } else {
            ix.dirty_leaves[lw] &= !lbit;
        }
    }
}

/// Clear a present page's referenced bit.
#[inline]
fn clear_ref(files: &mut [FileIndex], file: u32, page: u64) {
    let leaf = files[file as usize].leaves[(page >> LEAF_BITS) as usize]
        .as_mut()
        .expect("a live slot's page has a leaf");
    leaf.e[(page as usize) & (LEAF - 1)] &= !REF_BIT;
}

/// The slots as the eviction policy sees them (the index and the nodes, not the policy).
struct SlotView<'a> {
    files: &'a mut [FileIndex],
    nodes: &'a [Node],
}

impl Slots for SlotView<'_> {
    fn count(&self) -> usize {
        self.nodes.len()
    }

    fn probe(&self, slot: u32) -> Probe {
        match self.nodes.get(slot as usize) {
            Some(n) if n.live => {
                let e = index_get(self.files, n.file, n.page);
                if state_of(e) == CLEAN {
                    Probe::Clean {
                        referenced: e & REF_BIT != 0,
                    }
                } else {
                    Probe::Busy
                }
            }
            _ => Probe::Free,
        }
    }

    fn clear_referenced(&mut self, slot: u32) {
        let n = self.nodes[slot as usize];
        clear_ref(self.files, n.file, n.page);
    }
}

pub struct PageCache<E: Eviction> {
    files: Vec<FileIndex>,
    spare: Vec<Box<Leaf>>,
    /// Pages of a drop_file or take_dirty call (kept between calls to avoid allocation).
    scratch: Vec<(u32, u64)>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    eviction: E,
    dhead: u32,
    dtail: u32,
    capacity_pages: u64,
    len: u64,
    dirty: u64,
    stats: PageCacheStats,
}

impl<E: Eviction> PageCache<E> {
    /// Bytes a cache of `capacity_pages` can grow to: a slot per cached page (with the
    /// eviction policy's state) plus 4 bytes of index per page (the index covers touched
    /// 4 MiB regions, about the cached pages).
    pub fn estimated_bytes(capacity_pages: u64) -> u64 {
        let slots = capacity_pages.clamp(1, SLOT_MASK as u64);
        slots * (std::mem::size_of::<Node>() as u64 + 4 + E::SLOT_BYTES)
    }

    /// A cache of at most `capacity_pages` pages (at most 2^28 pages, 1 TiB).
    pub fn new(capacity_pages: u64) -> Self {
        Self {
            files: Vec::new(),
            spare: Vec::new(),
            scratch: Vec::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            eviction: E::default(),
            dhead: NIL,
            dtail: NIL,
            capacity_pages: capacity_pages.clamp(1, SLOT_MASK as u64),
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
        matches!(state_of(self.get(file, page)), CLEAN | DIRTY)
    }
    pub fn is_dirty(&self, file: u32, page: u64) -> bool {
        state_of(self.get(file, page)) == DIRTY
    }

    // --- index -----------------------------------------------------------------------

    #[inline]
    fn get(&self, file: u32, page: u64) -> u32 {
        index_get(&self.files, file, page)
    }

    #[inline]
    fn set(&mut self, file: u32, page: u64, e: u32) {
        index_set(&mut self.files, &mut self.spare, file, page, e);
    }

    #[inline]
    fn set_state(&mut self, file: u32, page: u64, state: u32) {
        let e = self.get(file, page);
        self.set(
            file,
            page,
            (e & !(0b111 << STATE_SHIFT)) | (state << STATE_SHIFT),
        );
    }

    // --- dirty list ------------------------------------------------------------------

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

    // --- slots -----------------------------------------------------------------------

    /// Insert an absent page in `state`; returns its slot.
    fn alloc(&mut self, file: u32, page: u64, state: u32) -> u32 {
        self.alloc_entry(file, page, entry(state, 0))
    }

    /// Insert an absent page with index entry `e` (its state and referenced bit; the slot
    /// bits are the new slot's); returns its slot.
    fn alloc_entry(&mut self, file: u32, page: u64, e: u32) -> u32 {
        let node = Node {
            file,
            page,
            dirtied_ns: 0,
            dprev: NIL,
            dnext: NIL,
            fetch: 0,
            live: true,
        };
        let reused = if self.len >= self.capacity_pages {
            self.evict_one()
        } else {
            None
        };
        let i = match reused.or_else(|| self.free.pop()) {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.set(file, page, (e & !SLOT_MASK) | i);
        self.len += 1;
        self.eviction.inserted(i);
        i
    }

    fn remove(&mut self, file: u32, page: u64) {
        let e = self.get(file, page);
        if state_of(e) == 0 {
            return;
        }
        let i = e & SLOT_MASK;
        if state_of(e) == DIRTY {
            self.dirty_unlink(i);
            self.dirty -= 1;
            self.files[file as usize].dirty -= 1;
        }
        self.nodes[i as usize].live = false;
        self.set(file, page, 0);
        self.free.push(i);
        self.len -= 1;
        self.eviction.removed(i);
    }

    /// Evict the clean page the eviction policy picks; returns its slot (None when every
    /// page is dirty or in flight: the cache overflows until writeback).
    fn evict_one(&mut self) -> Option<u32> {
        let mut view = SlotView {
            files: &mut self.files,
            nodes: &self.nodes,
        };
        let i = self.eviction.victim(&mut view)?;
        let node = self.nodes[i as usize];
        self.set(node.file, node.page, 0);
        self.nodes[i as usize].live = false;
        self.len -= 1;
        self.stats.evicted_pages += 1;
        Some(i)
    }

    // --- operations ------------------------------------------------------------------

    /// Look up pages for a read; references hits, reports absent pages and pending fetches.
    pub fn read(&mut self, file: u32, first: u64, n: u64, out: &mut ReadLookup) {
        out.hit_pages = 0;
        out.missing.clear();
        out.waits.clear();
        for p in first..first + n {
            let e = self.get(file, p);
            match state_of(e) {
                0 => match out.missing.last_mut() {
                    Some(r) if r.first + r.n == p => r.n += 1,
                    _ => out.missing.push(PageRange {
                        file,
                        first: p,
                        n: 1,
                    }),
                },
                PENDING => {
                    let f = self.nodes[(e & SLOT_MASK) as usize].fetch;
                    if !out.waits.contains(&f) {
                        out.waits.push(f);
                    }
                }
                _ => {
                    out.hit_pages += 1;
                    if e & REF_BIT == 0 {
                        self.set(file, p, e | REF_BIT);
                    }
                    self.eviction.touched(e & SLOT_MASK);
                }
            }
        }
        self.stats.hit_pages += out.hit_pages;
        self.stats.miss_pages += n - out.hit_pages;
    }

    /// Absent pages of a range (no effect on the cache), appended coalesced to `out`.
    pub fn absent(&self, file: u32, first: u64, n: u64, out: &mut Vec<PageRange>) {
        for p in first..first + n {
            if state_of(self.get(file, p)) == 0 {
                match out.last_mut() {
                    Some(r) if r.file == file && r.first + r.n == p => r.n += 1,
                    _ => out.push(PageRange {
                        file,
                        first: p,
                        n: 1,
                    }),
                }
            }
        }
    }

    /// Mark absent pages of a range as being fetched by `fetch`.
    pub fn begin_fetch(&mut self, file: u32, first: u64, n: u64, fetch: u32) {
        for p in first..first + n {
            if state_of(self.get(file, p)) == 0 {
                let i = self.alloc(file, p, PENDING);
                self.nodes[i as usize].fetch = fetch;
            }
        }
    }

    /// A fetch finished: its pending pages become clean (pages dirtied meanwhile stay dirty).
    pub fn complete_fetch(&mut self, file: u32, first: u64, n: u64, fetch: u32) {
        for p in first..first + n {
            let e = self.get(file, p);
            if state_of(e) == PENDING && self.nodes[(e & SLOT_MASK) as usize].fetch == fetch {
                self.set_state(file, p, CLEAN);
            }
        }
    }

    /// Insert clean pages (data just read from the device outside a fetch).
    pub fn fill(&mut self, file: u32, first: u64, n: u64) {
        for p in first..first + n {
            let e = self.get(file, p);
            if state_of(e) == 0 {
                self.alloc(file, p, CLEAN);
            } else {
                self.set(file, p, e | REF_BIT);
                self.eviction.touched(e & SLOT_MASK);
            }
        }
    }

    /// A buffered write: the pages become dirty. Returns how many were newly dirtied.
    pub fn write(&mut self, now: Ns, file: u32, first: u64, n: u64) -> u64 {
        let mut newly = 0;
        for p in first..first + n {
            let e = self.get(file, p);
            let i = if state_of(e) == 0 {
                // Inserted dirty and referenced at once: the entry, bitmaps and counts the
                // insertion as clean then the change to dirty left, with one index update.
                self.alloc_entry(file, p, entry(DIRTY, 0) | REF_BIT)
            } else {
                self.eviction.touched(e & SLOT_MASK);
                if state_of(e) != DIRTY {
                    self.set(file, p, entry(DIRTY, e & SLOT_MASK) | REF_BIT);
                }
                e & SLOT_MASK
            };
            if state_of(e) != DIRTY {
                self.nodes[i as usize].dirtied_ns = now;
                self.dirty_push_back(i);
                self.dirty += 1;
                self.files[file as usize].dirty += 1;
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
            self.remove(file, p);
        }
    }

    /// Drop every cached page of `file`, or only its clean ones (`clean_only`: what
    /// posix_fadvise(POSIX_FADV_DONTNEED) and BLKFLSBUF leave alone are the dirty pages;
    /// truncate drops them too). Pages being fetched stay. Returns how many went.
    pub fn drop_file(&mut self, file: u32, clean_only: bool) -> u64 {
        let Some(ix) = self.files.get(file as usize) else {
            return 0;
        };
        let mut pages = std::mem::take(&mut self.scratch);
        pages.clear();
        for (li, leaf) in ix.leaves.iter().enumerate() {
            let Some(leaf) = leaf else { continue };
            for k in set_bits(&leaf.present) {
                let st = state_of(leaf.e[k]);
                if st == CLEAN || (st == DIRTY && !clean_only) {
                    pages.push((file, ((li as u64) << LEAF_BITS) + k as u64));
                }
            }
        }
        for &(_, p) in &pages {
            self.remove(file, p);
        }
        let dropped = pages.len() as u64;
        self.scratch = pages;
        let ix = &mut self.files[file as usize];
        if ix.present == 0 {
            // Its index goes too (a deleted file's leaves would otherwise stay allocated);
            // the emptied leaves (all zero again) are kept for the next files, up to a bound.
            for leaf in std::mem::take(&mut ix.leaves).into_iter().flatten() {
                if self.spare.len() < SPARE_LEAVES {
                    self.spare.push(leaf);
                }
            }
            ix.dirty_leaves = Vec::new();
        }
        dropped
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
        // (slot, page) pairs of one file's walk, then (file, page) pairs.
        let mut pages = std::mem::take(&mut self.scratch);
        pages.clear();
        match file {
            // One file: walk its own index (its dirty count bounds the walk), not the cache's
            // dirty list.
            Some(f) => {
                // Its dirty leaves and their dirty pages, in page order.
                if let Some(ix) = self.files.get(f as usize) {
                    'leaves: for (lw, &word) in ix.dirty_leaves.iter().enumerate() {
                        let mut m = word;
                        while m != 0 {
                            let li = lw * 64 + m.trailing_zeros() as usize;
                            m &= m - 1;
                            let leaf = ix.leaves[li].as_ref().expect("a dirty leaf exists");
                            for k in set_bits(&leaf.dirty) {
                                if pages.len() as u64 >= max_pages {
                                    break 'leaves;
                                }
                                let i = leaf.e[k] & SLOT_MASK;
                                if dirtied_before
                                    .is_some_and(|t| self.nodes[i as usize].dirtied_ns > t)
                                {
                                    continue;
                                }
                                pages.push((i, ((li as u64) << LEAF_BITS) + k as u64));
                            }
                        }
                    }
                }
                for &(i, p) in &pages {
                    self.dirty_unlink(i);
                    self.dirty -= 1;
                    self.files[f as usize].dirty -= 1;
                    self.set_state(f, p, CLEAN);
                }
                // Visited in page order: sorted already.
                for pair in pages.iter_mut() {
                    pair.0 = f;
                }
            }
            None => {
                let mut cur = self.dhead;
                while cur != NIL && (pages.len() as u64) < max_pages {
                    let node = self.nodes[cur as usize];
                    if dirtied_before.is_some_and(|t| node.dirtied_ns > t) {
                        break;
                    }
                    self.dirty_unlink(cur);
                    self.dirty -= 1;
                    self.files[node.file as usize].dirty -= 1;
                    self.set_state(node.file, node.page, CLEAN);
                    pages.push((node.file, node.page));
                    cur = node.dnext;
                }
            }
        }
        pages.sort_unstable();
        let taken = self.ranges_of(&pages, out);
        self.scratch = pages;
        taken
    }

    /// Append sorted (file, page) pairs to `out` as coalesced ranges; count them as written
    /// back. Returns how many.
    fn ranges_of(&mut self, pages: &[(u32, u64)], out: &mut Vec<PageRange>) -> u64 {
        for &(f, p) in pages {
            match out.last_mut() {
                Some(r) if r.file == f && r.first + r.n == p => r.n += 1,
                _ => out.push(PageRange {
                    file: f,
                    first: p,
                    n: 1,
                }),
            }
        }
        self.stats.written_back_pages += pages.len() as u64;
        pages.len() as u64
    }

    /// Fetches a range is waiting for (pages in flight), deduplicated, appended to `out`;
    /// no effect on the cache.
    pub fn pending_fetches(&self, file: u32, first: u64, n: u64, out: &mut Vec<u32>) {
        for p in first..first + n {
            let e = self.get(file, p);
            if state_of(e) == PENDING {
                let f = self.nodes[(e & SLOT_MASK) as usize].fetch;
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
    }

    /// Make the dirty pages of a range clean (they are being written by the caller, as an
    /// O_DSYNC write does for its own range). Returns how many were dirty.
    pub fn clean_range(&mut self, file: u32, first: u64, n: u64) -> u64 {
        let mut cleaned = 0;
        for p in first..first + n {
            let e = self.get(file, p);
            if state_of(e) == DIRTY {
                self.dirty_unlink(e & SLOT_MASK);
                self.dirty -= 1;
                self.files[file as usize].dirty -= 1;
                self.set_state(file, p, CLEAN);
                cleaned += 1;
            }
        }
        self.stats.written_back_pages += cleaned;
        cleaned
    }

    /// When the oldest dirty page was dirtied.
    pub fn oldest_dirty_ns(&self) -> Option<Ns> {
        (self.dhead != NIL).then(|| self.nodes[self.dhead as usize].dirtied_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::eviction::Clock;

    #[test]
    fn a_second_read_of_the_same_pages_hits() {
        let mut c = PageCache::<Clock>::new(100);
        let mut l = ReadLookup::default();
        c.read(0, 10, 4, &mut l);
        assert_eq!(l.hit_pages, 0);
        assert_eq!(
            l.missing,
            vec![PageRange {
                file: 0,
                first: 10,
                n: 4
            }]
        );
        c.fill(0, 10, 4);
        c.read(0, 10, 4, &mut l);
        assert_eq!(l.hit_pages, 4);
        assert!(l.missing.is_empty());
    }

    #[test]
    fn a_referenced_page_gets_a_second_chance_over_an_unreferenced_one() {
        let mut c = PageCache::<Clock>::new(3);
        c.fill(0, 1, 3);
        let mut l = ReadLookup::default();
        c.read(0, 1, 1, &mut l); // page 1 is referenced, page 2 is not
        c.fill(0, 9, 1);
        assert!(c.contains(0, 1));
        assert!(!c.contains(0, 2));
        assert!(c.contains(0, 3));
        assert_eq!(c.cached_pages(), 3);
        assert_eq!(c.stats().evicted_pages, 1);
    }

    #[test]
    fn a_working_set_that_fits_stays_cached_under_a_streaming_scan() {
        // Pages re-read between scan pages are referenced and survive; scan pages go.
        let mut c = PageCache::<Clock>::new(64);
        let mut l = ReadLookup::default();
        c.fill(0, 0, 16);
        for p in 1000..1400 {
            c.read(0, 0, 16, &mut l);
            c.fill(0, p, 1);
        }
        c.read(0, 0, 16, &mut l);
        assert_eq!(l.hit_pages, 16);
    }

    #[test]
    fn dirty_pages_are_never_evicted() {
        let mut c = PageCache::<Clock>::new(2);
        c.write(0, 0, 0, 2);
        c.fill(0, 5, 1);
        assert!(c.is_dirty(0, 0) && c.is_dirty(0, 1));
        assert_eq!(c.dirty_pages(), 2);
    }

    #[test]
    fn writeback_takes_the_oldest_dirty_pages_as_sorted_ranges() {
        let mut c = PageCache::<Clock>::new(100);
        c.write(10, 0, 20, 2);
        c.write(20, 0, 5, 3);
        c.write(30, 1, 0, 1);
        let mut out = Vec::new();
        assert_eq!(c.take_dirty(None, Some(20), 100, &mut out), 5);
        assert_eq!(
            out,
            vec![
                PageRange {
                    file: 0,
                    first: 5,
                    n: 3
                },
                PageRange {
                    file: 0,
                    first: 20,
                    n: 2
                }
            ]
        );
        assert_eq!(c.dirty_pages(), 1);
        out.clear();
        assert_eq!(c.take_dirty(Some(0), None, 100, &mut out), 0);
        assert_eq!(c.take_dirty(Some(1), None, 100, &mut out), 1);
        assert_eq!(c.oldest_dirty_ns(), None);
    }

    #[test]
    fn a_read_of_pages_being_fetched_waits_for_that_fetch() {
        let mut c = PageCache::<Clock>::new(100);
        c.begin_fetch(0, 0, 8, 7);
        let mut l = ReadLookup::default();
        c.read(0, 4, 8, &mut l);
        assert_eq!(l.waits, vec![7]);
        assert_eq!(
            l.missing,
            vec![PageRange {
                file: 0,
                first: 8,
                n: 4
            }]
        );
        c.complete_fetch(0, 0, 8, 7);
        c.read(0, 0, 8, &mut l);
        assert_eq!(l.hit_pages, 8);
    }

    #[test]
    fn invalidation_drops_clean_and_dirty_pages() {
        let mut c = PageCache::<Clock>::new(100);
        c.fill(0, 0, 4);
        c.write(0, 0, 2, 4);
        c.invalidate(0, 0, 8);
        assert_eq!(c.cached_pages(), 0);
        assert_eq!(c.dirty_pages(), 0);
    }

    #[test]
    fn a_file_writeback_takes_its_dirty_pages_across_leaves_in_page_order() {
        // Dirty pages in three leaves (0, 2, 70: past the first 64-leaf bitmap word), one
        // of them dirtied too late for the cut-off; another file's dirty page stays.
        let mut c = PageCache::<Clock>::new(1000);
        let far = 70 * LEAF as u64;
        c.write(10, 0, far + 3, 2);
        c.write(10, 0, 2 * LEAF as u64 - 1, 2);
        c.write(30, 0, 7, 1);
        c.write(10, 0, 5, 1);
        c.write(10, 1, 5, 1);
        let mut out = Vec::new();
        assert_eq!(c.take_dirty(Some(0), Some(20), 3, &mut out), 3);
        let r = |first, n| PageRange { file: 0, first, n };
        assert_eq!(out, vec![r(5, 1), r(2 * LEAF as u64 - 1, 2)]);
        out.clear();
        assert_eq!(c.take_dirty(Some(0), None, 100, &mut out), 3);
        assert_eq!(out, vec![r(7, 1), r(far + 3, 2)]);
        assert_eq!(c.dirty_pages(), 1);
        assert!(c.is_dirty(1, 5));
    }

    #[test]
    fn dropping_a_file_removes_its_pages_in_every_leaf_and_a_new_file_reuses_its_leaves() {
        let mut c = PageCache::<Clock>::new(1000);
        let far = 70 * LEAF as u64;
        c.fill(0, 0, 3);
        c.write(0, 0, far, 2);
        c.begin_fetch(0, 10, 1, 9);
        // Clean only: the dirty and in-flight pages stay, and so does the index.
        assert_eq!(c.drop_file(0, true), 3);
        assert_eq!(c.cached_pages(), 3);
        assert!(c.is_dirty(0, far + 1));
        c.complete_fetch(0, 10, 1, 9);
        assert_eq!(c.drop_file(0, false), 3);
        assert_eq!(c.cached_pages(), 0);
        assert_eq!(c.dirty_pages(), 0);
        assert!(c.files[0].leaves.is_empty());
        assert_eq!(c.spare.len(), 2);
        c.write(0, 1, 4, 1);
        assert_eq!(c.spare.len(), 1);
        assert!(c.is_dirty(1, 4) && !c.contains(1, 5));
        let mut out = Vec::new();
        assert_eq!(c.take_dirty(Some(1), None, 100, &mut out), 1);
    }
}
