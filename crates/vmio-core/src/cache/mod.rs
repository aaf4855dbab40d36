//! Host caching: what the host does with a VM disk's I/O between QEMU and the block devices.
//!
//! - [`policy`]: the [`HostCache`] trait, whose decisions come back to the engine as
//!   [`Action`]s (the simulator executes them; `vmio serve` asks it for [`RealIo`]);
//! - [`linux`]: the Linux page cache under QEMU's cache modes (the one host cache today);
//! - [`pdc`]: S3's PDC, the guest journal's writes detected and sent around the cache;
//! - [`mode`]: the five QEMU cache modes as QEMU defines them (write cache flag, O_DIRECT,
//!   flush ignored) — what each does with reads, writes and flushes;
//! - [`pagecache`]: the page index with dirty tracking and in-flight fetches;
//! - [`eviction`]: which clean page a full cache gives up ([`eviction::REGISTRY`]: CLOCK,
//!   LRU; `[page_cache] eviction`);
//! - [`readahead`]: Linux's on-demand sequential read-ahead window.
//!
//! These are decisions only; the engine issues the device I/O they ask for.

pub mod eviction;
pub mod linux;
pub mod mode;
pub mod pagecache;
pub mod pdc;
pub mod policy;
pub mod readahead;

pub use mode::CacheMode;
pub use pagecache::{PageCache, PageRange, ReadLookup};
pub use policy::{
    Action, FileCache, FlushRule, HostCache, HostCacheStats, HostDisk, RealIo, ReqId, Request,
    Token,
};
pub use readahead::Readahead;

use crate::stack::PageCacheSpec;
use pdc::{JournalDetector, Pdc, PdcSpec};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("page_cache.eviction: '{name}' is not an eviction policy; accepted: {accepted}")]
    UnknownEviction { name: String, accepted: String },
}

fn eviction_of(spec: &PageCacheSpec) -> Result<&'static eviction::Registered, CacheError> {
    eviction::find(&spec.eviction).ok_or_else(|| CacheError::UnknownEviction {
        name: spec.eviction.clone(),
        accepted: eviction::accepted(),
    })
}

/// [`build_with`] with `[pdc]` at its defaults.
pub fn build(spec: &PageCacheSpec, disks: Vec<HostDisk>) -> Result<Box<dyn HostCache>, CacheError> {
    build_with(spec, &PdcSpec::default(), disks)
}

/// The host cache of a stack's `[page_cache]` and `[pdc]` over `disks` (every VM disk, in
/// stack order): the Linux page cache, under [`pdc::Pdc`] with a detector of `pdc` for each
/// `cache = "pdc"` disk when there is one.
pub fn build_with(
    spec: &PageCacheSpec,
    pdc: &PdcSpec,
    disks: Vec<HostDisk>,
) -> Result<Box<dyn HostCache>, CacheError> {
    let detectors: Vec<Option<JournalDetector>> = disks
        .iter()
        .map(|d| (d.mode == CacheMode::Pdc).then(|| JournalDetector::new(pdc)))
        .collect();
    let linux = (eviction_of(spec)?.linux)(spec, disks);
    Ok(if detectors.iter().any(Option::is_some) {
        Box::new(Pdc::new(linux, detectors))
    } else {
        linux
    })
}

/// The page cache of `spec` as a guest's, with no file yet ([`FileCache`]).
pub fn build_files(spec: &PageCacheSpec) -> Result<Box<dyn FileCache>, CacheError> {
    Ok((eviction_of(spec)?.files)(spec))
}

/// Bytes the page cache of `spec` can grow to (slots, index and eviction state).
pub fn estimated_bytes(spec: &PageCacheSpec) -> Result<u64, CacheError> {
    Ok((eviction_of(spec)?.estimated_bytes)(
        spec.memory_bytes / PAGE_BYTES,
    ))
}

/// Page size of the host page cache.
pub const PAGE_BYTES: u64 = 4096;

/// First page and page count covering `[offset, offset+len)`.
#[inline]
pub fn page_span(offset_bytes: u64, len_bytes: u64) -> (u64, u64) {
    let first = offset_bytes / PAGE_BYTES;
    let end = (offset_bytes + len_bytes).div_ceil(PAGE_BYTES);
    (first, end.saturating_sub(first))
}

#[cfg(test)]
mod tests {
    use crate::stack::Stack;

    fn stack(page_cache: &str) -> Result<Stack, String> {
        let text = format!(
            "[[device]]\nname = \"d\"\nmodel = \"ram\"\n[[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"d\"]\n[page_cache]\n{page_cache}\n[[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\nsize = \"1g\"\n"
        );
        Stack::from_toml(&text, "s.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn the_stack_chooses_the_eviction_policy_by_name_clock_by_default() {
        assert_eq!(stack("").unwrap().page_cache.eviction, "clock");
        assert_eq!(
            stack("eviction = \"lru\"").unwrap().page_cache.eviction,
            "lru"
        );
        assert_eq!(
            stack("eviction = \"arc\"").unwrap_err(),
            "s.toml: page_cache.eviction: 'arc' is not valid; accepted: clock, lru"
        );
    }

    #[test]
    fn the_default_eviction_is_left_out_of_the_effective_stack() {
        let shown = |pc: &str| toml::to_string(&stack(pc).unwrap().page_cache).unwrap();
        assert!(!shown("").contains("eviction"));
        assert!(shown("eviction = \"lru\"").contains("eviction = \"lru\""));
    }

    #[test]
    fn an_unknown_eviction_in_a_hand_made_spec_is_an_error_not_a_fallback() {
        let mut spec = stack("").unwrap().page_cache;
        spec.eviction = "arc".into();
        assert_eq!(
            super::build(&spec, Vec::new()).err().map(|e| e.to_string()),
            Some(
                "page_cache.eviction: 'arc' is not an eviction policy; accepted: clock, lru".into()
            )
        );
        spec.eviction = "lru".into();
        assert!(super::estimated_bytes(&spec).unwrap() > 0);
    }
}
