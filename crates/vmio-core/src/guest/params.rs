//! The guest layer's stack keys, declared once: a VM disk's `[vm.disk.filesystem]` table (the
//! ext4 filesystem made on it and its mount options) and the guest page cache's size rule.
//!
//! ```toml
//! [[vm.disk]]
//! name = "vdb"
//! read_ahead_kb = 128          # the guest's /sys/block/vdb/queue/read_ahead_kb
//! [vm.disk.filesystem]
//! type = "ext4"                # mke2fs 1.47 defaults (ext4.rs)
//! mount = "/mnt/vdb"           # where file-level jobs find it (fio directory/filename)
//! data = "ordered"             # mount -o data=ordered|writeback|journal (jbd2.rs)
//! commit = 5                   # mount -o commit=5 (seconds)
//! barrier = true               # mount -o barrier / nobarrier
//! journal_size = "64m"         # mke2fs -J size= (default: e2fsprogs' table)
//! size = "8g"                  # mke2fs's fs size (default: the whole disk)
//! [vm.page_cache]              # the guest's page cache: cache::linux::PARAMS
//! memory = "768m"              # default: the VM's memory less GUEST_RESERVE
//! ```
//!
//! Sources: mount(8) and Documentation/admin-guide/ext4.rst (`data=`, `commit=`, `barrier`,
//! `nobarrier`), mke2fs(8) (`-J size=`), Documentation/ABI/stable/sysfs-block
//! (`read_ahead_kb`, 128 by default: VM_READAHEAD_PAGES in include/linux/mm.h).

use crate::cache::linux;
use crate::params::{self, KeyDoc, Kind, ParamError, ParamSpec, Value, Values};
use crate::table::{FieldError, Table};
use crate::SEC;
use std::collections::BTreeMap;

/// Guest memory the page cache cannot use: the kernel (text, data, slab, per-CPU areas), the
/// `struct page` array (64 bytes per 4 KiB page, 1.6 % of memory: include/linux/mm_types.h),
/// `min_free_kbytes` (√(16 × memory in KiB): mm/page_alloc.c, 4 MiB for 1 GiB) and a minimal
/// userland (init, sshd, the benchmark's own memory). 192 MiB is what `free -m` leaves
/// unavailable on a freshly booted 1 GiB Debian 12 cloud image (MemTotal − MemAvailable
/// ≈ 190 MiB); never more than half the VM's memory.
pub const GUEST_RESERVE_BYTES: u64 = 192 << 20;

/// The guest page cache's default size for a VM of `memory_bytes`.
pub fn guest_cache_bytes(memory_bytes: u64) -> u64 {
    memory_bytes - GUEST_RESERVE_BYTES.min(memory_bytes / 2)
}

/// `[vm.page_cache] memory` as help shows it: [`linux::MEMORY`] read against the VM's memory
/// (default [`guest_cache_bytes`]); the table's other keys are [`linux::PARAMS`]'.
pub const GUEST_CACHE_MEMORY: ParamSpec = ParamSpec {
    default: Value::Computed("the VM's memory less 192 MiB, at most half of it"),
    help: "guest memory the VM's page cache may use (at most [[vm]] memory; the rest is the guest kernel and programs, GUEST_RESERVE_BYTES)",
    ..linux::MEMORY
};

/// `[vm.page_cache] copy_rate` as help shows it: the same key and default as the host's,
/// here the VM's memory bus (copies between the application's buffers and the guest cache).
pub const GUEST_COPY_RATE: ParamSpec = ParamSpec {
    help: "memory-copy bandwidth of the VM for guest page-cache hits and buffered writes (the same DDR4-2666 default as [page_cache]: the guest's memory is the host's)",
    ..linux::COPY_RATE
};

/// `[[vm.disk]] read_ahead_kb` default: VM_READAHEAD_PAGES (128 KiB).
pub const READ_AHEAD_KB: u64 = 128;
/// `read_ahead_kb` is counted in pages (4 KiB) ...
pub const READ_AHEAD_KB_STEP: u64 = 4;
/// ... and at most 1 GiB (in KiB).
pub const READ_AHEAD_KB_MAX: u64 = 1 << 20;

/// The guest's read-ahead window of a disk in bytes: `read_ahead_kb` as written (None:
/// [`READ_AHEAD_KB`]), a multiple of [`READ_AHEAD_KB_STEP`] up to [`READ_AHEAD_KB_MAX`]; the
/// error is the value and [`READ_AHEAD_KB_KEY`]'s accepted text.
pub fn read_ahead_bytes(read_ahead_kb: Option<u64>) -> Result<u64, String> {
    let kb = read_ahead_kb.unwrap_or(READ_AHEAD_KB);
    if !kb.is_multiple_of(READ_AHEAD_KB_STEP) || kb > READ_AHEAD_KB_MAX {
        return Err(format!("{kb}: accepted: {}", READ_AHEAD_KB_KEY.accepted));
    }
    Ok(kb * 1024)
}

/// `[[vm.disk]] read_ahead_kb` as help shows it ([`read_ahead_bytes`] states `accepted` in
/// its error; a test keeps the text equal to [`READ_AHEAD_KB_STEP`] and
/// [`READ_AHEAD_KB_MAX`]).
pub const READ_AHEAD_KB_KEY: KeyDoc = KeyDoc {
    name: "read_ahead_kb",
    help: "the guest's read-ahead window on the disk, in KiB (/sys/block/vdX/queue/read_ahead_kb; used by buffered I/O in the guest)",
    accepted: "a multiple of 4 (pages) up to 1048576",
    default: "128",
};

pub const FS_TYPE: ParamSpec = ParamSpec {
    name: "type",
    kind: Kind::Choice(&["ext4"]),
    default: Value::Choice("ext4"),
    unit: "",
    help: "the filesystem made on the disk (mkfs.ext4 of e2fsprogs 1.47 with its defaults)",
};
/// `mount`, a path (no declared kind: read by the stack parser beside [`FS_PARAMS`]).
pub const FS_MOUNT_KEY: &str = "mount";
/// `mount` as help shows it (the stack parser states `accepted` in its error).
pub const FS_MOUNT: KeyDoc = KeyDoc {
    name: FS_MOUNT_KEY,
    help: "where the guest mounts it: fio's directory= / filename= and FileBench's fileset are paths under it",
    accepted: "an absolute path other than /",
    default: "/mnt/<disk name>",
};
pub const FS_SIZE: ParamSpec = ParamSpec {
    name: "size",
    kind: Kind::Size {
        min: 16 << 20,
        max: u64::MAX,
        pow2: false,
    },
    default: Value::Computed("the whole disk"),
    unit: "bytes",
    help: "filesystem size (mke2fs fs-size), at most the disk's size",
};
pub const FS_DATA: ParamSpec = ParamSpec {
    name: "data",
    kind: Kind::Choice(&["ordered", "writeback", "journal"]),
    default: Value::Choice("ordered"),
    unit: "",
    help: "journaling mode (mount -o data=): ordered writes data before the metadata commit, writeback does not wait, journal logs data too",
};
pub const FS_COMMIT: ParamSpec = ParamSpec {
    name: "commit",
    kind: Kind::Duration {
        bare: SEC,
        positive: true,
    },
    default: Value::Int(5 * SEC),
    unit: "ns",
    help:
        "longest age of a running transaction (mount -o commit=, JBD2_DEFAULT_MAX_COMMIT_AGE: 5s)",
};
pub const FS_BARRIER: ParamSpec = ParamSpec {
    name: "barrier",
    kind: Kind::Bool,
    default: Value::Bool(true),
    unit: "",
    help: "flush the disk's write cache around each commit record (mount -o barrier; false = nobarrier)",
};
pub const FS_JOURNAL_SIZE: ParamSpec = ParamSpec {
    name: "journal_size",
    kind: Kind::Size {
        min: 1 << 20,
        max: 10 << 30,
        pow2: false,
    },
    default: Value::Computed("e2fsprogs' default for the filesystem size"),
    unit: "bytes",
    help: "journal size (mke2fs -J size=); default from ext2fs_default_journal_size: 4 MiB below 128 MiB, 16 MiB below 1 GiB ... 1 GiB from 128 GiB",
};

/// The `[vm.disk.filesystem]` keys, in the order result records list them.
pub const FS_PARAMS: &[ParamSpec] = &[
    FS_TYPE,
    FS_SIZE,
    FS_DATA,
    FS_COMMIT,
    FS_BARRIER,
    FS_JOURNAL_SIZE,
];

/// A VM disk's filesystem as the stack describes it (sizes resolved by the simulator, which
/// knows the disk's size).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FsSpec {
    pub fs_type: &'static str,
    pub mount: String,
    /// None: the whole disk.
    pub size_bytes: Option<u64>,
    pub data: &'static str,
    pub commit_ns: u64,
    pub barrier: bool,
    /// None: e2fsprogs' default.
    pub journal_bytes: Option<u64>,
}

/// `[vm.disk.filesystem]`: `mount` (a path, default `/mnt/<disk>`), `type` and the other
/// keys of [`FS_PARAMS`]. The context is the disk's name.
impl Table for FsSpec {
    const KEY: &'static str = "filesystem";
    type Raw = BTreeMap<String, toml::Value>;
    type Context<'a> = &'a str;

    fn from_raw(t: &Self::Raw, field: &str, disk: &str) -> Result<Self, FieldError> {
        let mount = match t.get(FS_MOUNT_KEY) {
            None => format!("/mnt/{disk}"),
            Some(toml::Value::String(m))
                if m.starts_with('/') && m.len() > 1 && !m.contains('\0') =>
            {
                m.trim_end_matches('/').to_string()
            }
            Some(other) => {
                return Err(FieldError::new(
                    format!("{field}.mount"),
                    format!(
                        "{other}: accepted: {}, e.g. \"/mnt/{disk}\"",
                        FS_MOUNT.accepted
                    ),
                ))
            }
        };
        let mut v = Values::defaults(FS_PARAMS);
        v.read(t, &[FS_MOUNT_KEY]).map_err(|e| {
            FieldError::param(
                field,
                match e {
                    ParamError::Unknown { key, accepted } => ParamError::Unknown {
                        key,
                        accepted: format!("{FS_MOUNT_KEY}, {accepted}"),
                    },
                    other => other,
                },
            )
        })?;
        let opt = |name: &str| match v.iter().find(|(s, _)| s.name == name) {
            Some((_, params::Value::Int(n))) => Some(n),
            _ => None,
        };
        Ok(FsSpec {
            fs_type: v.choice(FS_TYPE.name),
            mount,
            size_bytes: opt(FS_SIZE.name),
            data: v.choice(FS_DATA.name),
            commit_ns: v.int(FS_COMMIT.name),
            barrier: v.flag(FS_BARRIER.name),
            journal_bytes: opt(FS_JOURNAL_SIZE.name),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_ahead_rule_and_its_help_text_state_the_same_bounds() {
        assert_eq!(
            READ_AHEAD_KB_KEY.accepted,
            format!("a multiple of {READ_AHEAD_KB_STEP} (pages) up to {READ_AHEAD_KB_MAX}")
        );
        assert_eq!(read_ahead_bytes(None), Ok(READ_AHEAD_KB * 1024));
        assert_eq!(read_ahead_bytes(Some(READ_AHEAD_KB_MAX)), Ok(1 << 30));
        for bad in [READ_AHEAD_KB_MAX + READ_AHEAD_KB_STEP, 6] {
            assert_eq!(
                read_ahead_bytes(Some(bad)),
                Err(format!("{bad}: accepted: {}", READ_AHEAD_KB_KEY.accepted))
            );
        }
    }

    #[test]
    fn the_help_texts_state_the_defaults_the_code_applies() {
        assert_eq!(READ_AHEAD_KB_KEY.default, READ_AHEAD_KB.to_string());
        let reserve = format!("less {} MiB", GUEST_RESERVE_BYTES >> 20);
        assert!(
            GUEST_CACHE_MEMORY
                .show(GUEST_CACHE_MEMORY.default)
                .contains(&reserve),
            "{reserve}"
        );
        // 1 GiB less the reserve; a VM of 256 MiB keeps half.
        assert_eq!(guest_cache_bytes(1 << 30), (1 << 30) - (192 << 20));
        assert_eq!(guest_cache_bytes(256 << 20), 128 << 20);
    }
}
