//! `cache = "pdc"` in `vmio serve`: writeback, with the writes that the disk's journal
//! detector ([`vmio_core::cache::pdc::JournalDetector`], the rule in its module doc) predicts
//! as the guest's journal sent around the host page cache (S3's PDC).
//!
//! ```text
//! open:    the backing as writeback (page cache), plus a second descriptor with O_DIRECT;
//!          posix_fadvise(direct, NOREUSE); probe RWF_DONTCACHE on the backing
//! FLUSH:   detector.on_flush() (as the request arrives); then fdatasync, as writeback
//! WRITE:   verdict = detector.on_write(ns since the server started, offset, len), in
//!          arrival order (one mutex per export); Cache: the buffered write of writeback;
//!          Bypass, per device piece:
//!            offset and length 4096-aligned: pwrite on the O_DIRECT descriptor (from the
//!              payload buffer, or an aligned bounce copy when the piece's bytes are not
//!              aligned in it); then posix_fadvise(DONTNEED) on the range
//!            else, RWF_DONTCACHE supported: pwritev2(RWF_DONTCACHE) on the buffered one
//!            else: buffered pwrite, sync_file_range(wait, write, wait), posix_fadvise(DONTNEED)
//! FUA:     fdatasync, as writeback
//! TRIM, WRITE_ZEROES, READ: as writeback, not shown to the detector (no journal writes)
//! ```
//!
//! Why this keeps the cache coherent and out of the way (Linux sources):
//! - `mm/filemap.c`, `generic_file_direct_write`: before a direct write the kernel writes
//!   back and invalidates the cached pages of the range (`kiocb_invalidate_pages`), and
//!   after it invalidates them again (`kiocb_invalidate_post_direct_write`, also called by
//!   `iomap_dio_complete` for ext4 and XFS). So data cached before a bypassed write (read, or
//!   written through the buffered descriptor) is never served stale afterwards, and the
//!   bypassed bytes do not enter the cache.
//! - `mm/fadvise.c`, `generic_fadvise`: `POSIX_FADV_DONTNEED` starts writeback of the
//!   range's dirty pages without waiting (`WB_SYNC_NONE`) and then drops the clean, unmapped,
//!   unlocked pages entirely inside it (`mapping_try_invalidate`; partial first and last
//!   pages are kept). After a direct write it only makes sure; after a buffered write the
//!   pages must first be clean, hence the `sync_file_range` of the fallback.
//!   What is dropped is whole folios: DONTNEED keeps a large folio cached before the write
//!   that reaches past the range, and RWF_DONTCACHE drops only the folios the write itself
//!   brought in (both seen on Linux 6.18, ext4), while the direct write's invalidation
//!   (`invalidate_inode_pages2_range`) removes every folio overlapping the range: the reason
//!   aligned bypassed writes go direct, and the unaligned ones (rare: guests write whole
//!   4 KiB blocks) only best-effort around the cache. Coherence does not depend on any of
//!   this: buffered writes and reads share the page cache.
//!   `POSIX_FADV_NOREUSE` ignores the range and marks the open file (`FMODE_NOREUSE`,
//!   Linux >= 6.3) so that its accesses do not count as recency: it is a property of the
//!   descriptor, so it is given once, when the O_DIRECT descriptor is opened.
//! - `include/uapi/linux/fs.h`: `RWF_DONTCACHE` (0x80, Linux >= 6.14), "buffered IO that
//!   drops the cache after reading or writing data"; `include/linux/fs.h`,
//!   `kiocb_set_rw_flags`, refuses it with EOPNOTSUPP when the file system lacks
//!   `FOP_DONTCACHE` (and kernels that do not know the flag refuse it as outside
//!   `RWF_SUPPORTED`, also EOPNOTSUPP); `mm/filemap.c` kicks off writeback of such a write
//!   and drops its folios when that writeback ends (`folio_end_dropbehind`). Whether the
//!   kernel and file system of a backing have it is probed once at start
//!   ([`probe_dontcache`]): the startup line and the statistics say so.
//!
//! A bypassed write is as durable as a writeback one: it reached the device (a direct write
//! completes when the device has it) but not necessarily past the device's volatile cache,
//! which the FLUSH's fdatasync covers.

use crate::aligned::{AlignedBuf, ALIGN_BYTES};
use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use vmio_core::cache::pdc::{DetectorEvent, DetectorStats, JournalDetector, PdcSpec, Verdict};

/// Detection events listed in a statistics snapshot (the most recent ones; `events_total`
/// counts all): the statistics file stays small whatever the clients do.
pub const EVENTS_SHOWN: usize = 256;

/// How a bypassed piece was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BypassPath {
    /// O_DIRECT pwrite, then DONTNEED.
    Direct,
    /// pwritev2 with RWF_DONTCACHE.
    Dontcache,
    /// Buffered pwrite, sync_file_range, DONTNEED.
    Dropped,
}

/// The PDC state of one export: its detector and what the bypass did.
pub struct PdcExport {
    detector: Mutex<JournalDetector>,
    /// Every backing of the export takes RWF_DONTCACHE.
    pub dontcache: bool,
    direct_pieces: AtomicU64,
    dontcache_pieces: AtomicU64,
    dropped_pieces: AtomicU64,
}

/// A predicted journal, bytes of the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Journal {
    pub lo: u64,
    pub hi: u64,
}

/// The PDC part of an export's statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PdcSnapshot {
    /// The journals predicted now, lowest first.
    pub journals: Vec<Journal>,
    /// The last [`EVENTS_SHOWN`] changes of the predictions (times in ns since the start).
    pub events: Vec<DetectorEvent>,
    /// The detector's counters: writes seen, writes and bytes bypassed, detections, drops,
    /// `events_total` (every change of the predictions, listed or not).
    #[serde(flatten)]
    pub detector: DetectorStats,
    /// Bypassed device pieces by how they were written.
    pub direct_pieces: u64,
    pub dontcache_pieces: u64,
    pub dropped_pieces: u64,
    /// RWF_DONTCACHE works on every backing (probed at start).
    pub dontcache_supported: bool,
}

impl PdcExport {
    pub fn new(spec: &PdcSpec, dontcache: bool) -> Self {
        Self {
            detector: Mutex::new(JournalDetector::new(spec)),
            dontcache,
            direct_pieces: AtomicU64::new(0),
            dontcache_pieces: AtomicU64::new(0),
            dropped_pieces: AtomicU64::new(0),
        }
    }

    /// A FLUSH arrived.
    pub fn on_flush(&self) {
        crate::limits::lock(&self.detector).on_flush();
    }

    /// A WRITE of `[offset, offset + len)` of the disk arrived `now_ns` after the start.
    pub fn on_write(&self, now_ns: u64, offset: u64, len: u64) -> Verdict {
        crate::limits::lock(&self.detector).on_write(now_ns, offset, len)
    }

    /// Count a bypassed piece written by `path`.
    pub fn count(&self, path: BypassPath) {
        let c = match path {
            BypassPath::Direct => &self.direct_pieces,
            BypassPath::Dontcache => &self.dontcache_pieces,
            BypassPath::Dropped => &self.dropped_pieces,
        };
        c.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> PdcSnapshot {
        let d = crate::limits::lock(&self.detector);
        let events = d.events();
        PdcSnapshot {
            journals: d
                .ranges()
                .into_iter()
                .map(|(lo, hi)| Journal { lo, hi })
                .collect(),
            events: events[events.len().saturating_sub(EVENTS_SHOWN)..].to_vec(),
            detector: d.stats(),
            direct_pieces: self.direct_pieces.load(Relaxed),
            dontcache_pieces: self.dontcache_pieces.load(Relaxed),
            dropped_pieces: self.dropped_pieces.load(Relaxed),
            dontcache_supported: self.dontcache,
        }
    }
}

/// Which way a bypassed piece at `off` of `len` bytes goes.
pub fn bypass_path(off: u64, len: usize, dontcache: bool) -> BypassPath {
    if off.is_multiple_of(ALIGN_BYTES as u64) && len.is_multiple_of(ALIGN_BYTES) {
        BypassPath::Direct
    } else if dontcache {
        BypassPath::Dontcache
    } else {
        BypassPath::Dropped
    }
}

fn fadvise(f: &File, off: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), off as i64, len as i64, advice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Mark an O_DIRECT descriptor's accesses as not to be reused (see the module doc).
pub fn no_reuse(direct: &File) -> io::Result<()> {
    fadvise(direct, 0, 0, libc::POSIX_FADV_NOREUSE)
}

/// Drop the clean cached pages of `[off, off + len)`.
fn dont_need(f: &File, off: u64, len: u64) -> io::Result<()> {
    fadvise(f, off, len, libc::POSIX_FADV_DONTNEED)
}

/// Bytes copied at a time into the aligned bounce buffer of [`write_direct`].
const BOUNCE_BYTES: usize = 1 << 20;

/// Write `buf` at `off` through the O_DIRECT descriptor `direct` (`off` and the length
/// aligned), from `buf` itself when it is aligned in memory, else through an aligned bounce
/// buffer of at most [`BOUNCE_BYTES`] (a piece of an unaligned request).
pub fn write_direct(direct: &File, off: u64, buf: &[u8]) -> io::Result<()> {
    if (buf.as_ptr() as usize).is_multiple_of(ALIGN_BYTES) {
        direct.write_all_at(buf, off)?;
    } else {
        let mut bounce = AlignedBuf::pooled(buf.len().min(BOUNCE_BYTES))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        for (i, part) in buf.chunks(BOUNCE_BYTES).enumerate() {
            let b = &mut bounce.as_mut_slice()[..part.len()];
            b.copy_from_slice(part);
            direct.write_all_at(b, off + (i * BOUNCE_BYTES) as u64)?;
        }
    }
    dont_need(direct, off, buf.len() as u64)
}

/// `pwritev2(RWF_DONTCACHE)` of all of `buf` at `off`.
pub fn write_dontcache(f: &File, off: u64, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: one iovec over live memory, a valid descriptor.
        let n = unsafe {
            libc::pwritev2(
                f.as_raw_fd(),
                &iov,
                1,
                (off + done as u64) as libc::off_t,
                libc::RWF_DONTCACHE,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(io::ErrorKind::WriteZero.into()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// A buffered write whose pages are then written back and dropped (no RWF_DONTCACHE).
pub fn write_dropped(f: &File, off: u64, buf: &[u8]) -> io::Result<()> {
    f.write_all_at(buf, off)?;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: plain syscall on a valid descriptor.
    let r = unsafe { libc::sync_file_range(f.as_raw_fd(), off as i64, buf.len() as i64, flags) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    dont_need(f, off, buf.len() as u64)
}

/// Whether the kernel and file system of `f` take `RWF_DONTCACHE`: the file's first byte
/// is rewritten with its own value by `pwritev2(RWF_DONTCACHE)` (a zero-length write is
/// accepted before the flags are looked at, so it would prove nothing). The byte is read
/// through `direct`, the file's O_DIRECT descriptor, so that the probe caches nothing (a
/// buffered read would read ahead). EOPNOTSUPP or EINVAL: no. An empty file is not written
/// to (it would grow): no.
pub fn probe_dontcache(f: &File, direct: &File) -> io::Result<bool> {
    let mut b = AlignedBuf::zeroed(ALIGN_BYTES)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
    if direct.read_at(b.as_mut_slice(), 0)? == 0 {
        return Ok(false);
    }
    match write_dontcache(f, 0, &b.as_slice()[..1]) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;

    /// A file of `bytes`: filled with 0x11 through the page cache (`cached`), or sparse with
    /// nothing cached.
    fn file(tag: &str, bytes: usize, cached: bool) -> (PathBuf, File, File) {
        let p = std::env::temp_dir().join(format!("vmio-pdc-{tag}-{}", std::process::id()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        if cached {
            f.write_all_at(&vec![0x11u8; bytes], 0).unwrap();
        } else {
            f.set_len(bytes as u64).unwrap();
        }
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .unwrap();
        (p, f, direct)
    }

    /// Pages of `[off, off + len)` of `f` in the page cache (mincore over a mapping).
    fn resident(f: &File, off: u64, len: usize) -> usize {
        // SAFETY: a shared read-only mapping of a valid file range; unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                off as i64,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut v = vec![0u8; len.div_ceil(4096)];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
            libc::munmap(p, len);
            v.iter().filter(|&&b| b & 1 == 1).count()
        }
    }

    type WriteFn = fn(&File, u64, &[u8]) -> io::Result<()>;

    fn read(f: &File, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        f.read_exact_at(&mut b, off).unwrap();
        b
    }

    #[test]
    fn aligned_pieces_go_direct_and_the_others_dontcache_where_the_kernel_has_it() {
        assert_eq!(bypass_path(8192, 4096, true), BypassPath::Direct);
        assert_eq!(bypass_path(8192, 4096, false), BypassPath::Direct);
        assert_eq!(bypass_path(512, 4096, true), BypassPath::Dontcache);
        assert_eq!(bypass_path(4096, 512, true), BypassPath::Dontcache);
        assert_eq!(bypass_path(512, 4096, false), BypassPath::Dropped);
    }

    #[test]
    fn a_direct_write_from_an_unaligned_buffer_replaces_cached_data_and_leaves_no_page_cached() {
        let (p, f, direct) = file("direct", 4 << 20, true);
        no_reuse(&direct).unwrap();
        assert_eq!(read(&f, 64 << 10, 64 << 10), vec![0x11; 64 << 10]);
        assert_eq!(resident(&f, 64 << 10, 64 << 10), 16, "read: cached");
        // The payload starts one byte into its allocation: not aligned for O_DIRECT; it
        // takes two and a half bounce buffers.
        let n = 2 * BOUNCE_BYTES + (64 << 10);
        let mut src = vec![0u8; n + 1];
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i / 4096) as u8;
        }
        write_direct(&direct, 64 << 10, &src[1..]).unwrap();
        assert_eq!(resident(&f, 64 << 10, 64 << 10), 0, "bypassed: not cached");
        assert!(read(&f, 64 << 10, n) == src[1..], "the bytes land in order");
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn an_unaligned_bypassed_write_lands_and_its_pages_leave_the_cache() {
        let (p, f, direct) = file("unaligned", 1 << 20, false);
        let dontcache = probe_dontcache(&f, &direct).unwrap();
        assert_eq!(read(&f, 0, 1), [0], "the probe keeps the first byte");
        // That read may read ahead past page 0 (its window depends on whether the probe's
        // page was still cached, which RWF_DONTCACHE's asynchronous drop decides): start
        // from nothing cached in the range, as the test means to.
        dont_need(&f, 0, 1 << 20).unwrap();
        let (off, len) = (4096 + 512, 3 * 4096);
        assert_eq!(resident(&f, 4096, 4 * 4096), 0);
        let (write, path): (WriteFn, _) = if dontcache {
            (write_dontcache, "dontcache")
        } else {
            (write_dropped, "dropped")
        };
        write(&f, off, &vec![0x33u8; len]).unwrap();
        // RWF_DONTCACHE drops the folios when their writeback ends: wait for it.
        let t = std::time::Instant::now();
        while resident(&f, 4096, 4 * 4096) > 0 && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(resident(&f, 4096, 4 * 4096), 0, "{path}: pages dropped");
        let back = read(&f, 4096, 4 * 4096);
        assert!(back[..512].iter().all(|&b| b == 0), "{path}");
        assert!(back[512..512 + len].iter().all(|&b| b == 0x33), "{path}");
        assert!(back[512 + len..].iter().all(|&b| b == 0), "{path}");
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn the_fallback_without_dontcache_also_drops_the_pages_it_wrote() {
        let (p, f, _) = file("dropped", 256 << 10, false);
        write_dropped(&f, 4096, &[0x44; 8192]).unwrap();
        assert_eq!(resident(&f, 4096, 8192), 0);
        assert_eq!(read(&f, 4096, 8192), vec![0x44; 8192]);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn an_empty_file_is_never_probed_by_writing() {
        let (p, f, direct) = file("empty", 0, false);
        assert!(!probe_dontcache(&f, &direct).unwrap());
        assert_eq!(f.metadata().unwrap().len(), 0);
        let _ = std::fs::remove_file(p);
    }
}
