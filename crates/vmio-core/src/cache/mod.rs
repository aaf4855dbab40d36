//! Host caching: QEMU's cache modes over the Linux page cache.
//!
//! - [`mode`]: the five QEMU cache modes as QEMU defines them (write cache flag, O_DIRECT,
//!   flush ignored) — what each does with reads, writes and flushes;
//! - [`pagecache`]: an LRU page cache with dirty tracking and in-flight fetches;
//! - [`readahead`]: Linux's on-demand sequential read-ahead window.
//!
//! These are decisions only; the engine issues the device I/O they ask for.

pub mod mode;
pub mod pagecache;
pub mod readahead;

pub use mode::CacheMode;
pub use pagecache::{PageCache, PageRange, ReadLookup};
pub use readahead::Readahead;

/// Page size of the host page cache.
pub const PAGE_BYTES: u64 = 4096;

/// First page and page count covering `[offset, offset+len)`.
#[inline]
pub fn page_span(offset_bytes: u64, len_bytes: u64) -> (u64, u64) {
    let first = offset_bytes / PAGE_BYTES;
    let end = (offset_bytes + len_bytes).div_ceil(PAGE_BYTES);
    (first, end.saturating_sub(first))
}
