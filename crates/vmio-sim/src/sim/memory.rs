//! Memory the run may use: refuse a stack whose device models and page cache would not fit,
//! before anything is allocated.
//!
//! ```text
//! available = min(MemAvailable of /proc/meminfo (or FALLBACK), RLIMIT_AS - VmSize,
//!                 cgroup v2 memory.max - memory.current)
//! need      = Σ device estimated_bytes (SSD FTL tables; a sharing device has none of its own)
//!             + page-cache slots (if any disk is buffered)
//! need > available → SimError::Job naming the largest consumer
//! ```

use super::SimError;
use vmio_core::stack::Stack;
use vmio_core::units::quote;

/// Memory assumed available when `/proc/meminfo` cannot be read (not Linux, no procfs).
pub const FALLBACK_MEMORY_BYTES: u64 = 16 << 30;

/// Memory this process can still allocate: the least of `MemAvailable` of `/proc/meminfo`
/// (or [`FALLBACK_MEMORY_BYTES`]), the address space left under `RLIMIT_AS` (`ulimit -v`:
/// the limit less the current `VmSize`), and the room left in the process's cgroup v2
/// (`memory.max` less `memory.current`), so that a run inside a limit is refused with the
/// estimate rather than aborted by a failed allocation.
pub fn available_memory_bytes() -> u64 {
    let meminfo = proc_kib("/proc/meminfo", "MemAvailable:")
        .map(|kib| kib.saturating_mul(1024))
        .unwrap_or(FALLBACK_MEMORY_BYTES);
    meminfo.min(address_space_left()).min(cgroup_memory_left())
}

/// The `KEY: N kB` value of a /proc file such as /proc/meminfo, in KiB.
fn proc_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let v = text.lines().find_map(|l| l.strip_prefix(key))?;
    v.trim().trim_end_matches("kB").trim().parse().ok()
}

/// `RLIMIT_AS` less the current virtual size; `u64::MAX` when unlimited or unknown.
fn address_space_left() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return u64::MAX;
    }
    let vm_size =
        proc_kib("/proc/self/status", "VmSize:").map_or(0, |kib| kib.saturating_mul(1024));
    lim.rlim_cur.saturating_sub(vm_size)
}

/// `memory.max` less `memory.current` of this process's cgroup (v2); `u64::MAX` when there
/// is no limit or no cgroup v2.
fn cgroup_memory_left() -> u64 {
    let Some(rel) = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        })
    else {
        return u64::MAX;
    };
    let dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match (read("memory.max"), read("memory.current")) {
        (Some(max), Some(cur)) => max.saturating_sub(cur),
        _ => u64::MAX,
    }
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

fn binary_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Refuse a stack whose device models (the SSD FTL tables) and host page cache would need
/// more memory than `available` bytes, before anything is allocated; the error names the
/// largest consumer.
pub fn check_memory(stack: &Stack, available: u64) -> Result<(), SimError> {
    let mut total = 0u64;
    let mut largest: Option<(usize, u64, u64)> = None;
    // A sharing device has no model of its own: its hardware's is counted once.
    for (i, d) in stack.devices.iter().enumerate() {
        if d.share.is_some() {
            continue;
        }
        let (bytes, capacity) =
            crate::device::estimated_bytes(&d.name, &d.model, d.profile.as_deref(), &d.params)
                .map_err(|source| SimError::Device {
                    file: stack.file.clone(),
                    source,
                })?;
        total = total.saturating_add(bytes);
        if !matches!(largest, Some((_, b, _)) if b >= bytes) {
            largest = Some((i, bytes, capacity));
        }
    }
    let buffered = stack
        .vms
        .iter()
        .flat_map(|v| &v.disks)
        .any(|d| !d.cache.direct());
    let pc = if buffered {
        vmio_core::cache::estimated_bytes(&stack.page_cache)
            .map_err(|e| SimError::Job(format!("{}: {e}", stack.file)))?
    } else {
        0
    };
    if total.saturating_add(pc) <= available {
        return Ok(());
    }
    let (i, bytes, capacity) = largest.unwrap_or((0, 0, 0));
    let msg = if pc > bytes {
        format!(
            "{}: page_cache.memory {} needs ~{} of page-cache slots and index (with all devices: {}); {} of memory available; accepted: a smaller page_cache memory",
            stack.file,
            binary_size(stack.page_cache.memory_bytes),
            gb(pc),
            gb(total.saturating_add(pc)),
            gb(available)
        )
    } else {
        format!(
            "{}: device[{i}] '{}': capacity {} needs ~{} of FTL tables (all devices: {}); {} of memory available; accepted: smaller or fewer SSDs (about 4.5 bytes per 4 KiB of capacity)",
            stack.file,
            quote(&stack.devices[i].name),
            binary_size(capacity),
            gb(bytes),
            gb(total.saturating_add(pc)),
            gb(available)
        )
    };
    Err(SimError::Job(msg))
}
