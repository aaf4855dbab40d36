//! `--read-ahead SIZE`: a sequential read-ahead for O_DIRECT exports (`cache = "none"`,
//! `"directsync"`), off by default.
//!
//! Why: with O_DIRECT the device sees exactly what the client asks, so a client reading
//! sequentially at queue depth 4 keeps 4 requests at the device; a server reading through the
//! page cache (nbdkit's file plugin, whose `cache=none` is a buffered `pread` followed by
//! `posix_fadvise(POSIX_FADV_DONTNEED)`: plugins/file/file.c) gets Linux's read-ahead for
//! free, which keeps up to the device's `read_ahead_kb` more in flight (mm/readahead.c).
//! This module gives O_DIRECT exports the same mechanism without the host page cache: the
//! windows are O_DIRECT reads (Linux AIO, through the device's scheduler queue like any
//! request) into buffers of the server, and READs inside a window are copied from it.
//! `cache = "none"` keeps its meaning: no page of the host's cache is used.
//!
//! Off by default because QEMU's `cache=none` has none (the guest's kernel reads ahead on its
//! own disk, and the device must see the guest's stream for the simulator's `[nbd]` and
//! device models to describe vmio serve); nbdkit too has it as an opt-in filter
//! (filters/readahead/readahead.c).
//!
//! The policy follows Linux's on-demand read-ahead (mm/readahead.c, `page_cache_sync_ra`,
//! `get_init_ra_size`, `get_next_ra_size`), one stream per export (nbdkit's filter has one
//! buffer per server):
//!
//! ```text
//! read(off, len):
//!   covered by the windows: a hit: copy from the ready windows, wait for those in flight;
//!     drop the windows wholly before off; next = off + len
//!     if off + len > mark (the start of the newest window, Linux's PG_readahead page):
//!       size = next_size(size, max); issue [ra_end, ra_end + size); mark = its start
//!   else, a miss (read from the device as any request):
//!     sequential (off == next, off == 0, or off inside the windows):
//!       size = off == next && size > 0 ? next_size(size, max) : init_size(len, max)
//!       drop the windows; issue [align_down(off + len), + size); mark = its start
//!     else: drop the windows; size = 0 (a random read reads nothing ahead)
//!     next = off + len
//! init_size(len, max): n = roundup_pow2(len); n <= max/32 ? 4n : n <= max/4 ? 2n : max
//! next_size(cur, max): cur < max/16 ? 4cur : cur <= max/2 ? 2cur : max
//! write, trim, write zeroes (begin): drop the windows if one overlaps; note the range in
//!   flight until it completes; a window overlapping a write in flight is not issued
//! ```
//!
//! A window is issued in chunks of at most [`CHUNK_BYTES`] (Linux's `BIO_MAX_VECS`, 256
//! pages of 4 KiB: the most one bio of the kernel's read-ahead carries), each an O_DIRECT read
//! of its own, aligned to 4 KiB and within the export. A dropped window whose chunks are still
//! read serves the READs already waiting on it (they were in flight together with the write,
//! so either content is valid for them, NBD proto.md "Ordering of messages and writes"); no
//! later READ sees it. Memory: the windows ahead of the reader, at most 2 x SIZE per export
//! (the one being read and the next), plus the dropped chunks still in flight.

use std::collections::VecDeque;
use vmio_core::cache::readahead as ra;

/// The most bytes one chunk of a window reads (module doc).
pub const CHUNK_BYTES: u64 = 1 << 20;
/// O_DIRECT alignment of the windows.
const ALIGN: u64 = 4096;
/// `--read-ahead`'s upper bound.
pub const MAX_BYTES: u64 = 64 << 20;

/// Linux's `get_init_ra_size` (mm/readahead.c, in pages: [`vmio_core::cache::readahead`]), in
/// bytes: the first window after a READ of `len` bytes, at most `max` (a multiple of 4 KiB).
pub fn init_size(len: u64, max: u64) -> u64 {
    ra::init_size(len.max(1).div_ceil(ALIGN), max / ALIGN) * ALIGN
}

/// Linux's `get_next_ra_size`, in bytes: the window after one of `cur` bytes.
pub fn next_size(cur: u64, max: u64) -> u64 {
    ra::next_size(cur / ALIGN, max / ALIGN) * ALIGN
}

/// A chunk of a window: `[off, off + len)` of the export, read by the fill request `id`.
struct Chunk<W, D> {
    id: u64,
    off: u64,
    len: u64,
    /// The filled chunk (Ok) or its read's NBD error.
    data: Option<Result<D, u32>>,
    /// READs waiting for it.
    waiters: Vec<W>,
}

/// What a READ gets.
pub enum Read<D> {
    /// Not (wholly) in the windows: read it from the device.
    Miss,
    /// In the windows: copy from `ready` (each chunk's start and data, or its error); the
    /// READ was added to the waiters of `waits` chunks still in flight.
    Hit {
        ready: Vec<(u64, Result<D, u32>)>,
        waits: usize,
    },
}

/// One export's read-ahead state (module doc); `W` is a waiting READ, `D` a filled chunk.
pub struct State<W, D> {
    max: u64,
    /// The export's size, rounded down to [`ALIGN`]: no window reaches past it.
    end: u64,
    next: u64,
    size: u64,
    mark: u64,
    chunks: VecDeque<Chunk<W, D>>,
    /// Dropped chunks still read, for their waiters.
    detached: Vec<Chunk<W, D>>,
    writes: Vec<(u64, u64)>,
    next_id: u64,
    pub stats: Counters,
}

/// The read-ahead's counters (the export's statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// READs served from the windows, and their bytes.
    pub hits: u64,
    pub hit_bytes: u64,
    /// READs read from the device.
    pub misses: u64,
    /// Chunks issued, and their bytes.
    pub chunks: u64,
    pub chunk_bytes: u64,
    /// Times the windows were dropped for a write that overlapped them.
    pub invalidations: u64,
}

impl<W: Clone, D: Clone> State<W, D> {
    /// Windows of at most `max` bytes (a multiple of 4096, at least 4096) over an export of
    /// `export_bytes`.
    pub fn new(max: u64, export_bytes: u64) -> Self {
        Self {
            max: max.max(1).div_ceil(ALIGN) * ALIGN,
            end: export_bytes / ALIGN * ALIGN,
            next: u64::MAX,
            size: 0,
            mark: 0,
            chunks: VecDeque::new(),
            detached: Vec::new(),
            writes: Vec::new(),
            next_id: 0,
            stats: Counters::default(),
        }
    }

    fn ra_end(&self) -> Option<u64> {
        self.chunks.back().map(|c| c.off + c.len)
    }

    /// Bytes of the windows kept for later READs (the bound of the module doc).
    pub fn held_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }

    fn covered(&self, off: u64, end: u64) -> bool {
        match (self.chunks.front(), self.ra_end()) {
            (Some(f), Some(e)) => f.off <= off && end <= e,
            _ => false,
        }
    }

    /// Drop every window; chunks with waiters stay until they are filled.
    fn drop_windows(&mut self) {
        for c in self.chunks.drain(..) {
            if c.data.is_none() && !c.waiters.is_empty() {
                self.detached.push(c);
            }
        }
    }

    /// Issue the window `[from, from + size)` (clipped to the export, not over a write in
    /// flight): the chunks' (id, offset, length) to read, added to `out`.
    fn issue(&mut self, from: u64, out: &mut Vec<(u64, u64, u64)>) {
        let end = (from + self.size).min(self.end);
        self.mark = from;
        let mut at = from;
        while at < end {
            let len = (end - at).min(CHUNK_BYTES);
            if self.writes.iter().any(|&(o, l)| o < at + len && at < o + l) {
                break;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.chunks.push_back(Chunk {
                id,
                off: at,
                len,
                data: None,
                waiters: Vec::new(),
            });
            self.stats.chunks += 1;
            self.stats.chunk_bytes += len;
            out.push((id, at, len));
            at += len;
        }
    }

    /// A READ of `[off, off + len)` by `w`; the chunks to read now are added to `issue`.
    pub fn read(&mut self, off: u64, len: u64, w: &W, issue: &mut Vec<(u64, u64, u64)>) -> Read<D> {
        let end = off + len;
        if len > 0 && self.covered(off, end) {
            while self.chunks.front().is_some_and(|c| c.off + c.len <= off) {
                let c = self.chunks.pop_front().expect("front");
                if c.data.is_none() && !c.waiters.is_empty() {
                    self.detached.push(c);
                }
            }
            let mut ready = Vec::new();
            let mut waits = 0;
            for c in self.chunks.iter_mut() {
                if c.off >= end {
                    break;
                }
                match &c.data {
                    Some(d) => ready.push((c.off, d.clone())),
                    None => {
                        c.waiters.push(w.clone());
                        waits += 1;
                    }
                }
            }
            self.stats.hits += 1;
            self.stats.hit_bytes += len;
            self.next = end;
            if end > self.mark {
                if let Some(from) = self.ra_end() {
                    self.size = next_size(self.size, self.max);
                    self.issue(from, issue);
                }
            }
            return Read::Hit { ready, waits };
        }
        self.stats.misses += 1;
        let inside = self
            .chunks
            .front()
            .zip(self.ra_end())
            .is_some_and(|(f, e)| f.off <= off && off <= e);
        let sequential = off == self.next || off == 0 || inside;
        self.drop_windows();
        if sequential && len > 0 {
            let size = if off == self.next && self.size > 0 {
                next_size(self.size, self.max)
            } else {
                init_size(len, self.max)
            };
            self.size = size.div_ceil(ALIGN) * ALIGN;
            self.issue(end / ALIGN * ALIGN, issue);
        } else {
            self.size = 0;
        }
        self.next = end;
        Read::Miss
    }

    /// Chunk `id` was read (its data, or its NBD error): the READs waiting on it, with the
    /// chunk's start.
    pub fn filled(&mut self, id: u64, data: Result<D, u32>) -> (u64, Vec<W>) {
        if let Some(c) = self.chunks.iter_mut().find(|c| c.id == id) {
            c.data = Some(data);
            return (c.off, std::mem::take(&mut c.waiters));
        }
        match self.detached.iter().position(|c| c.id == id) {
            Some(i) => {
                let c = self.detached.swap_remove(i);
                (c.off, c.waiters)
            }
            None => (0, Vec::new()),
        }
    }

    /// A write, trim or write-zeroes of `[off, off + len)` begins (module doc).
    pub fn write_begin(&mut self, off: u64, len: u64) {
        let hit = self
            .chunks
            .iter()
            .any(|c| c.off < off + len && off < c.off + c.len);
        if hit {
            self.stats.invalidations += 1;
            self.drop_windows();
            self.size = 0;
        }
        self.writes.push((off, len));
    }

    /// That write completed.
    pub fn write_end(&mut self, off: u64, len: u64) {
        if let Some(i) = self.writes.iter().position(|&w| w == (off, len)) {
            self.writes.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type S = State<u32, u64>;
    const M: u64 = 1 << 20;

    /// Fill every chunk issued with its offset as data.
    fn fill_all(s: &mut S, issued: &mut Vec<(u64, u64, u64)>) -> Vec<u32> {
        let mut woken = Vec::new();
        for (id, off, _) in issued.drain(..) {
            woken.extend(s.filled(id, Ok(off)).1);
        }
        woken
    }

    #[test]
    fn linux_window_sizes_ramp_from_the_request_to_the_maximum() {
        // 64 KiB reads, 1 MiB maximum: 128 KiB, then x2 up to the maximum.
        assert_eq!(init_size(64 << 10, M), 128 << 10);
        assert_eq!(init_size(4 << 10, M), 16 << 10);
        assert_eq!(init_size(1 << 20, 8 * M), 2 * M);
        assert_eq!(next_size(128 << 10, M), 256 << 10);
        assert_eq!(next_size(32 << 10, M), 128 << 10);
        assert_eq!(next_size(M, M), M);
    }

    #[test]
    fn a_sequential_qd1_stream_from_zero_is_served_from_the_windows_after_the_first_miss() {
        let mut s = S::new(M, 64 * M);
        let mut issued = Vec::new();
        let b = 64u64 << 10;
        let mut sizes = Vec::new();
        for i in 0..200u64 {
            let before = s.stats.chunk_bytes;
            let r = s.read(i * b, b, &(i as u32), &mut issued);
            if s.stats.chunk_bytes > before {
                sizes.push(s.stats.chunk_bytes - before);
            }
            match (i, r) {
                (0, Read::Miss) => {}
                (0, Read::Hit { .. }) => panic!("the first read cannot hit"),
                (_, Read::Miss) => panic!("read {i} missed"),
                (_, Read::Hit { ready, waits }) => {
                    // QD1: every chunk was read before the next READ came.
                    assert_eq!((waits, ready.iter().all(|(_, d)| d.is_ok())), (0, true));
                    assert!(!ready.is_empty());
                }
            }
            assert!(fill_all(&mut s, &mut issued).is_empty());
            assert!(s.held_bytes() <= 2 * M, "{}", s.held_bytes());
        }
        assert_eq!((s.stats.misses, s.stats.hits), (1, 199));
        // Windows: 128K, 256K, 512K, then 1M each time the reader enters the newest one.
        assert_eq!(&sizes[..5], &[128 << 10, 256 << 10, 512 << 10, M, M]);
        // Everything read ahead ends past the last READ by at most two windows.
        assert!(s.stats.chunk_bytes <= 200 * b + 2 * M);
    }

    #[test]
    fn a_stream_elsewhere_misses_twice_then_hits() {
        let mut s = S::new(M, 64 * M);
        let mut issued = Vec::new();
        let b = 4096u64;
        let hits: Vec<bool> = (0..10u64)
            .map(|i| {
                let r = s.read(7 * M + i * b, b, &0, &mut issued);
                fill_all(&mut s, &mut issued);
                matches!(r, Read::Hit { .. })
            })
            .collect();
        assert_eq!(
            hits,
            [false, false, true, true, true, true, true, true, true, true]
        );
    }

    #[test]
    fn random_reads_read_nothing_ahead() {
        let mut s = S::new(M, 1 << 30);
        let mut issued = Vec::new();
        for i in 1..100u64 {
            let off = (i * 7919 * 4096) % (1 << 30);
            assert!(matches!(s.read(off, 4096, &0, &mut issued), Read::Miss));
        }
        assert_eq!((s.stats.chunks, s.held_bytes()), (0, 0));
    }

    #[test]
    fn reads_in_flight_wait_for_their_chunk_and_are_woken_once() {
        let mut s = S::new(8 * M, 64 * M);
        let mut issued = Vec::new();
        assert!(matches!(s.read(0, M, &0, &mut issued), Read::Miss));
        // Window [1M, 3M) in two chunks, in flight; three READs at QD3 wait on them.
        assert_eq!(
            issued.iter().map(|c| (c.1, c.2)).collect::<Vec<_>>(),
            [(M, M), (2 * M, M)]
        );
        let first = std::mem::take(&mut issued);
        for i in 1..3u32 {
            match s.read(u64::from(i) * M, M, &i, &mut issued) {
                Read::Hit { ready, waits } => assert_eq!((ready.len(), waits), (0, 1)),
                Read::Miss => panic!("read {i} missed"),
            }
        }
        // The reader entered the newest window: the next one (4 MiB) was issued.
        assert_eq!(issued.iter().map(|c| c.2).sum::<u64>(), 4 * M);
        let (off, w) = s.filled(first[0].0, Ok(M));
        assert_eq!((off, w), (M, vec![1]));
        let (off, w) = s.filled(first[1].0, Err(5));
        assert_eq!((off, w), (2 * M, vec![2]));
        // A read spanning the failed chunk and one in flight gets the error and waits.
        match s.read(2 * M + 4096, M, &9, &mut issued) {
            Read::Hit { ready, waits } => assert_eq!((ready, waits), (vec![(2 * M, Err(5))], 1)),
            Read::Miss => panic!("missed"),
        }
    }

    #[test]
    fn a_write_over_a_window_drops_it_and_no_window_is_issued_over_a_write_in_flight() {
        let mut s = S::new(M, 64 * M);
        let mut issued = Vec::new();
        s.read(0, 64 << 10, &0, &mut issued);
        fill_all(&mut s, &mut issued);
        // A write outside the window leaves it.
        s.write_begin(10 * M, 4096);
        s.write_end(10 * M, 4096);
        assert!(matches!(
            s.read(64 << 10, 4096, &1, &mut issued),
            Read::Hit { .. }
        ));
        fill_all(&mut s, &mut issued);
        // A write into it drops it: the next READ there misses.
        s.write_begin(80 << 10, 4096);
        assert_eq!((s.held_bytes(), s.stats.invalidations), (0, 1));
        assert!(matches!(
            s.read(68 << 10, 4096, &2, &mut issued),
            Read::Miss
        ));
        // The window that miss asks for, [72K, 88K), covers the write still in flight: not
        // issued.
        assert!(issued.is_empty());
        s.write_end(80 << 10, 4096);
        // A chunk in flight when its window is dropped still wakes its waiters.
        s.read(0, 4096, &3, &mut issued);
        let id = issued[0].0;
        assert!(matches!(
            s.read(4096, 4096, &4, &mut issued),
            Read::Hit { waits: 1, .. }
        ));
        s.write_begin(8192, 4096);
        assert_eq!(s.filled(id, Ok(4096)).1, vec![4]);
        assert_eq!(s.filled(id, Ok(4096)).1, Vec::<u32>::new());
    }

    #[test]
    fn windows_stop_at_the_export_end() {
        let mut s = S::new(M, 3 * M + 100);
        let mut issued = Vec::new();
        for i in 0..3u64 {
            s.read(i * M, M, &0, &mut issued);
        }
        let end = issued.iter().map(|c| c.1 + c.2).max().unwrap();
        assert_eq!(end, 3 * M);
    }
}
