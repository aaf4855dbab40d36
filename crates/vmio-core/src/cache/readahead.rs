//! Linux's on-demand read-ahead (mm/readahead.c); one [`Readahead`] per open file.
//!
//! ```text
//! on a read of pages [p, p+n):
//!   if p+n covers the async marker (start + size - async_size) of the current window:
//!       start += size; size = next_size(size); async_size = size   -> async read-ahead
//!   elif a page is missing:
//!       if p == 0 or p == prev_end (sequential):
//!           start = p; size = max(n, init_size(n)); async_size = size - n -> sync read-ahead
//!       else: read just [p, p+n) (a "standalone small random read")
//!   prev_end = p + n
//! init_size(n) = 4×pow2(n) if ≤ max/32, 2×pow2(n) if ≤ max/4, else max
//! next_size(s) = 4s if s < max/16, 2s if s ≤ max/2, else max
//! ```
//! `max` is the volume's read_ahead_kb. Windows never shrink below the request.

#[derive(Clone, Copy, Debug, Default)]
struct RaState {
    start: u64,
    size: u64,
    async_size: u64,
    prev_end: u64,
}

/// What to fetch besides the request's own missing pages: `(first, n)` page ranges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaPlan {
    /// Window the read itself must wait for (it contains the request).
    pub sync: Option<(u64, u64)>,
    /// Window fetched in the background.
    pub background: Option<(u64, u64)>,
}

pub struct Readahead {
    max_pages: u64,
    st: RaState,
}

/// Linux's `get_init_ra_size` (mm/readahead.c): the first window of a stream whose read is
/// `n` pages, at most `max` pages (also vmio serve's `--read-ahead`).
pub fn init_size(n: u64, max: u64) -> u64 {
    let s = n.next_power_of_two();
    if s <= max / 32 {
        s * 4
    } else if s <= max / 4 {
        s * 2
    } else {
        max
    }
}

/// Linux's `get_next_ra_size` (mm/readahead.c): the window after one of `cur` pages.
pub fn next_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        cur * 4
    } else if cur <= max / 2 {
        cur * 2
    } else {
        max
    }
}

impl Readahead {
    pub fn new(max_pages: u64) -> Self {
        Self {
            max_pages,
            st: RaState::default(),
        }
    }

    pub fn max_pages(&self) -> u64 {
        self.max_pages
    }

    /// Decide read-ahead for a read of `[first, first+n)`; `missing` says whether any page of
    /// the request is absent from the cache.
    pub fn on_read(&mut self, first: u64, n: u64, missing: bool) -> RaPlan {
        let max = self.max_pages;
        let st = &mut self.st;
        let mut plan = RaPlan::default();
        if max == 0 {
            st.prev_end = first + n;
            return plan;
        }
        let marker = (st.start + st.size).saturating_sub(st.async_size);
        if st.size > 0 && st.async_size > 0 && first <= marker && marker < first + n {
            st.start += st.size;
            st.size = next_size(st.size, max).max(n);
            st.async_size = st.size;
            plan.background = Some((st.start, st.size));
        } else if missing {
            let sequential = first == 0 || first == st.prev_end;
            if sequential {
                let size = init_size(n, max).max(n);
                *st = RaState {
                    start: first,
                    size,
                    async_size: size - n,
                    prev_end: st.prev_end,
                };
                plan.sync = Some((first, size));
            }
        }
        st.prev_end = first + n;
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_stream_ramps_the_window_up_to_the_maximum() {
        let mut ra = Readahead::new(32); // 128 KiB
        let p = ra.on_read(0, 1, true);
        assert_eq!(p.sync, Some((0, 4)));
        let mut sizes = Vec::new();
        let mut page = 1;
        while page < 200 {
            let p = ra.on_read(page, 1, false);
            if let Some((_, n)) = p.background {
                sizes.push(n);
            }
            page += 1;
        }
        assert_eq!(sizes[0], 8); // next_size(4) with max 32: 4 ≥ 32/16, so doubled
        assert!(sizes.iter().all(|&s| s <= 32));
        assert_eq!(*sizes.last().unwrap(), 32);
    }

    #[test]
    fn a_random_read_fetches_only_itself() {
        let mut ra = Readahead::new(32);
        ra.on_read(0, 1, true);
        let p = ra.on_read(5000, 2, true);
        assert_eq!(p, RaPlan::default());
    }

    #[test]
    fn a_request_larger_than_the_window_is_read_whole() {
        let mut ra = Readahead::new(32);
        let p = ra.on_read(0, 256, true);
        assert_eq!(p.sync, Some((0, 256)));
    }
}
