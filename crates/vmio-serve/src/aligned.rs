//! Payload buffers for O_DIRECT: aligned to [`ALIGN_BYTES`] (4096, the largest logical block
//! size of the devices vmio serves; O_DIRECT needs buffers, offsets and lengths aligned to it,
//! open(2) "O_DIRECT"), recycled through a pool of size classes so that the request path
//! neither allocates nor zeroes. Used by the exports ([`crate::export`]), PDC's bypass
//! ([`crate::pdc`]) and the connections' request buffers.
//!
//! ```text
//! zeroed(len):  alloc_zeroed(round_up(len, 4096), align 4096)
//! pooled(len):  class = log2(max(len, 4096) rounded up to a power of two) - 12
//!               class < 14 (up to 32 MiB): a free buffer of the class, else a new one
//!               else: zeroed(len)
//! drop:         a pooled buffer goes back to its class while the class holds fewer than
//!               its keep count and the pool fewer than POOL_MAX_BYTES; else it is freed
//! ```

use std::sync::Mutex;

/// Alignment of payload buffers and of the pieces that may use O_DIRECT.
pub const ALIGN_BYTES: usize = 4096;

/// A payload buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    /// Bytes allocated (a multiple of [`ALIGN_BYTES`]).
    cap: usize,
    /// Return the allocation to [`POOL`] when dropped.
    pooled: bool,
}

// The buffer is plain memory owned by this value.
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

/// Size classes of recycled payload buffers: 4 KiB, 8 KiB, ... 32 MiB.
const POOL_CLASSES: usize = 14;
/// Free buffers (addresses) per size class, so that the hot path neither allocates nor
/// zeroes: a recycled buffer is always overwritten in full (by the payload of a WRITE, or by
/// the pieces of a READ) before any byte of it is sent.
static POOL: [Mutex<Vec<usize>>; POOL_CLASSES] = [const { Mutex::new(Vec::new()) }; POOL_CLASSES];
/// Bytes of free buffers kept in [`POOL`] (all classes), at most [`POOL_MAX_BYTES`]: the
/// memory the server keeps beyond its payload budget.
static POOL_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
pub const POOL_MAX_BYTES: usize = 64 << 20;

fn pool_lock(class: usize) -> std::sync::MutexGuard<'static, Vec<usize>> {
    POOL[class].lock().unwrap_or_else(|e| e.into_inner())
}

fn pool_keep(class: usize) -> usize {
    // At most 1 MiB of 4 KiB buffers... and 2 of the largest, and POOL_MAX_BYTES in all:
    // enough for the buffers of a few connections at queue depth 32.
    if class <= 4 {
        256
    } else {
        (64usize << 20 >> (class + 12)).max(2)
    }
}

impl AlignedBuf {
    /// A zeroed buffer; None when the memory cannot be allocated.
    pub fn zeroed(len: usize) -> Option<Self> {
        let cap = len.checked_next_multiple_of(ALIGN_BYTES)?;
        Self::alloc(len, cap, false)
    }

    /// A buffer of `len` bytes from the pool of recycled buffers; its content is
    /// unspecified (zeros or an earlier payload) until the caller writes it. None when the
    /// memory cannot be allocated (the request is refused, the server goes on).
    pub fn pooled(len: usize) -> Option<Self> {
        let cap = len.max(ALIGN_BYTES).checked_next_power_of_two()?;
        let class = (cap.trailing_zeros() - ALIGN_BYTES.trailing_zeros()) as usize;
        if class >= POOL_CLASSES {
            return Self::zeroed(len);
        }
        if let Some(addr) = pool_lock(class).pop() {
            POOL_BYTES.fetch_sub(cap, std::sync::atomic::Ordering::Relaxed);
            return Some(Self {
                ptr: addr as *mut u8,
                len,
                cap,
                pooled: true,
            });
        }
        Self::alloc(len, cap, true)
    }

    fn alloc(len: usize, cap: usize, pooled: bool) -> Option<Self> {
        if cap == 0 {
            return Some(Self {
                ptr: ALIGN_BYTES as *mut u8,
                len: 0,
                cap: 0,
                pooled: false,
            });
        }
        let layout = Self::layout(cap)?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        Some(Self {
            ptr,
            len,
            cap,
            pooled,
        })
    }

    fn layout(cap: usize) -> Option<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(cap, ALIGN_BYTES).ok()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling and aligned with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    /// A mutable view of `[at, at + len)` through a shared reference.
    ///
    /// # Safety
    /// Callers must not create overlapping views that are used at the same time, nor use
    /// `as_slice` while a view is written. The engine gives each piece of a request its own
    /// disjoint range and reads the whole buffer only after every piece completed.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn range_mut(&self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(at), len)
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        use std::sync::atomic::Ordering::Relaxed;
        if self.pooled {
            let class = (self.cap.trailing_zeros() - ALIGN_BYTES.trailing_zeros()) as usize;
            let mut free = pool_lock(class);
            if free.len() < pool_keep(class)
                && POOL_BYTES.fetch_add(self.cap, Relaxed) + self.cap <= POOL_MAX_BYTES
            {
                free.push(self.ptr as usize);
                return;
            }
            if free.len() < pool_keep(class) {
                POOL_BYTES.fetch_sub(self.cap, Relaxed);
            }
        }
        if let Some(layout) = Self::layout(self.cap) {
            // SAFETY: allocated in `alloc` with the same layout.
            unsafe { std::alloc::dealloc(self.ptr, layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_page_aligned_and_zeroed() {
        let b = AlignedBuf::zeroed(8192 + 5).unwrap();
        assert_eq!(b.as_slice().as_ptr() as usize % ALIGN_BYTES, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        assert!(AlignedBuf::zeroed(0).unwrap().is_empty());
        assert!(AlignedBuf::zeroed(usize::MAX - 10).is_none());
    }

    #[test]
    fn pooled_buffers_are_aligned_recycled_and_sized_as_asked() {
        let a = AlignedBuf::pooled(5000).unwrap();
        assert_eq!(a.len(), 5000);
        assert_eq!(a.as_slice().as_ptr() as usize % ALIGN_BYTES, 0);
        let addr = a.as_slice().as_ptr() as usize;
        drop(a);
        let b = AlignedBuf::pooled(8192).unwrap();
        assert_eq!(
            b.as_slice().as_ptr() as usize,
            addr,
            "the 8 KiB class is reused"
        );
        assert_eq!(AlignedBuf::pooled(0).unwrap().len(), 0);
        assert_eq!(AlignedBuf::pooled(33 << 20).unwrap().len(), 33 << 20);
    }
}
