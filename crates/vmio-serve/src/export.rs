//! Exports: one per VM disk of the stack file, a byte range of a volume whose devices are
//! backing files or block devices, opened with the disk's QEMU cache mode.
//!
//! Export names are `VM/DISK` (`vm1/disk0`); `VM` alone names the VM's first disk and the
//! empty (default) name the first VM's first disk. `NBD_OPT_LIST` lists the `VM/DISK` names.
//!
//! Every request is mapped with vmio-core's volume layout (the same policy the simulator
//! uses: [`vmio_core::volume::VolumeLayout::map`]) into per-device pieces.
//!
//! Cache modes: the kernel's page cache holds the data, but what vmio does with it comes from
//! the same host-cache policy the simulator runs ([`vmio_core::cache::HostCache::real_io`]):
//! open flags, whether a FLUSH is honoured, whether a FUA write needs an fdatasync. For the
//! Linux page cache under QEMU's modes (`-drive cache=`, see [`vmio_core::cache::mode`]):
//!
//! | mode         | open flags          | FLUSH     | FUA write            |
//! |--------------|---------------------|-----------|----------------------|
//! | none         | O_DIRECT            | fdatasync | fdatasync            |
//! | writeback    | (page cache)        | fdatasync | fdatasync            |
//! | writethrough | O_DSYNC             | fdatasync | already durable      |
//! | directsync   | O_DIRECT \| O_DSYNC | fdatasync | already durable      |
//! | unsafe       | (page cache)        | ignored   | ignored (UNSAFE: acknowledged data may be lost on a crash) |
//! | pdc          | (page cache)        | fdatasync | fdatasync            |
//!
//! `pdc` is writeback plus a second, O_DIRECT descriptor per backing for the writes its
//! journal detector bypasses ([`crate::pdc`]).
//!
//! Read-ahead, writeback and eviction are the kernel's here (`[page_cache]` settings such as
//! `eviction` apply to the simulator only).
//!
//! O_DIRECT needs buffers, offsets and lengths aligned to the logical block size: payload
//! buffers are allocated 4096-aligned ([`AlignedBuf`]), and pieces that are not 4096-aligned
//! in offset or length go through a second, buffered descriptor of the same file (Linux keeps
//! direct and buffered I/O of one file coherent: a direct read first writes back dirty
//! cached pages of its range, a direct write invalidates them). File systems without O_DIRECT
//! (tmpfs before Linux 6.6) fail the open with EINVAL; vmio reports that with the file name
//! and the cache modes that work there, and does not fall back silently.
//!
//! Backing files: a missing file is created sparse at the device's `size`; an existing
//! regular file shorter than `size` is an error, unless `--create`, which sets every
//! backing file to exactly its `size` (extending or truncating it). Without `size`, the
//! file or block device must exist and its size is used.
//!
//! Locking, as QEMU locks images (`raw_apply_lock_bytes` and `raw_check_lock_bytes` in
//! QEMU's `block/file-posix.c`; the byte layout is described in its comment "Lock bytes"):
//! every served file (or block device) is opened once more, read-only, for an open-file-
//! description lock (`fcntl(F_OFD_SETLK)`, Linux >= 3.15; OFD locks conflict between any two
//! opens, also within one process, and go away with the descriptor). vmio takes shared
//! (`F_RDLCK`) locks on byte 100 + p for each permission p it uses (consistent read = 0,
//! write = 1) and on byte 200 + 1 (it does not share write), then tests with
//! `F_OFD_GETLK` that nobody else holds byte 101 (a writer), 201 (someone who does not share
//! write) or 200 (someone who does not share consistent reads). So a second vmio serve, a
//! qemu-nbd or a QEMU with the file open for writing refuses this one and vice versa
//! ([`ExportError::Locked`]), before anything is resized (`--create` runs after the lock).
//! The same file reached through two devices of the stack (`same.img` and `./same.img`, a
//! hard link, a symlink) is recognized by the (st_dev, st_ino) of the opened file and refused
//! ([`ExportError::SameFile`]): two devices on one file would overwrite each other.

use crate::pdc::{self, BypassPath, PdcExport};
use crate::stats::ExportStats;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use thiserror::Error;
use vmio_core::cache::{CacheError, CacheMode, FlushRule, HostDisk, RealIo};
use vmio_core::stack::{Stack, StackError};
use vmio_core::throttle::{plan_groups, GroupPlan};
use vmio_core::volume::{self, Piece, VolumeError, VolumeLayout};

pub use crate::aligned::{AlignedBuf, ALIGN_BYTES, POOL_MAX_BYTES};

#[derive(Debug, Error)]
pub enum ExportError {
    #[error("{file}: device[{index}] '{name}': needs path = \"...\" (a backing file or block device) to be served")]
    NoPath {
        file: String,
        index: usize,
        name: String,
    },
    #[error("{path}: does not exist and device '{name}' has no size to create it with (add size = \"...\")")]
    MissingNoSize { path: String, name: String },
    #[error("{path}: is {actual} bytes, smaller than device '{name}' size = {wanted} bytes; pass --create to extend it (or fix size)")]
    TooSmall {
        path: String,
        name: String,
        actual: u64,
        wanted: u64,
    },
    #[error("{path}: O_DIRECT is not supported by this file system (tmpfs?), which cache = \"{cache}\" needs; put the file on a disk file system or use cache = writeback, writethrough or unsafe")]
    DirectUnsupported { path: String, cache: &'static str },
    #[error("{path}: {op}: {source}")]
    Io {
        path: String,
        op: &'static str,
        source: io::Error,
    },
    #[error("{path}: is locked by another process (another vmio serve or QEMU?)")]
    Locked { path: String },
    #[error("device[{first}] '{first_name}' ({first_path}) and device[{second}] '{second_name}' ({second_path}) are the same file; each device needs its own file")]
    SameFile {
        first: usize,
        first_name: String,
        first_path: String,
        second: usize,
        second_name: String,
        second_path: String,
    },
    #[error(transparent)]
    Stack(#[from] StackError),
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error("{file}: {source}")]
    Cache {
        file: String,
        #[source]
        source: CacheError,
    },
}

/// One device of an export's volume, opened with the export's cache mode.
pub struct Backing {
    pub path: PathBuf,
    /// Index of the device in the stack's `[[device]]` list (its scheduler queue).
    pub device: usize,
    file: File,
    /// Buffered descriptor for unaligned pieces when `file` has O_DIRECT.
    unaligned: Option<File>,
    /// O_DIRECT descriptor for the bypassed writes of a PDC export.
    direct: Option<File>,
    /// RWF_DONTCACHE works on this backing (probed at start; PDC exports only).
    dontcache: bool,
    /// The descriptor holding the file's OFD locks (shared by every export on the file).
    _lock: std::sync::Arc<File>,
}

pub struct Export {
    pub name: String,
    /// Its position among the stack's disks (the dispatcher's per-export state).
    pub index: usize,
    /// Index of the VM in the stack (the scheduler's owner; its weight).
    pub vm: usize,
    pub cache: CacheMode,
    /// How the host-cache policy has this disk's I/O done (open flags, FLUSH, FUA).
    pub real_io: RealIo,
    pub volume: String,
    layout: Box<dyn VolumeLayout>,
    /// Where the disk starts in its volume.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub backings: Vec<Backing>,
    pub stats: ExportStats,
    /// The journal detector and bypass counters of a `cache = "pdc"` disk.
    pub pdc: Option<PdcExport>,
    /// Its throttle group and member in the dispatcher (`[vm.disk.iotune]`).
    pub throttle: Option<(usize, usize)>,
}

/// The throttle groups of the stack's disks, in stack order ([`vmio_core::throttle::plan_groups`]).
pub fn throttle_groups(stack: &Stack) -> Result<GroupPlan, StackError> {
    plan_groups(&stack.disk_iotunes()).map_err(|e| StackError::Field {
        file: stack.file.clone(),
        field: e.field,
        message: e.message,
    })
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ExportError + 'a {
    move |source| ExportError::Io {
        path: path.display().to_string(),
        op,
        source,
    }
}

/// Create a device's missing backing file, sparse at its `size`.
fn create_missing(path: &Path, name: &str, size: Option<u64>) -> Result<(), ExportError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(path, "stat")(e)),
    }
    let wanted = size.ok_or_else(|| ExportError::MissingNoSize {
        path: path.display().to_string(),
        name: name.to_string(),
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir, "create directory"))?;
    }
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(path, "create"))?;
    f.set_len(wanted).map_err(io_err(path, "set size"))
}

/// Size a device's (existing, locked) backing file and return its usable bytes.
fn prepare_device(
    path: &Path,
    name: &str,
    size: Option<u64>,
    create: bool,
) -> Result<u64, ExportError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(io_err(path, "stat"))?;
    if meta.file_type().is_block_device() {
        let mut f = File::open(path).map_err(io_err(path, "open"))?;
        let bytes = io::Seek::seek(&mut f, io::SeekFrom::End(0)).map_err(io_err(path, "size"))?;
        return Ok(size.map_or(bytes, |s| s.min(bytes)) / 4096 * 4096);
    }
    let actual = meta.len();
    match size {
        None => Ok(actual / 4096 * 4096),
        Some(wanted) if create && actual != wanted => {
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path, "open"))?;
            f.set_len(wanted).map_err(io_err(path, "set size"))?;
            Ok(wanted)
        }
        Some(wanted) if actual < wanted => Err(ExportError::TooSmall {
            path: shown,
            name: name.to_string(),
            actual,
            wanted,
        }),
        Some(wanted) => Ok(wanted),
    }
}

/// QEMU's lock-byte layout (`block/file-posix.c`): permission bytes from 100, "not shared"
/// bytes from 200; permission bits: consistent read 0, write 1.
const LOCK_PERM_BASE: i64 = 100;
const LOCK_SHARED_BASE: i64 = 200;
const PERM_CONSISTENT_READ: i64 = 0;
const PERM_WRITE: i64 = 1;

fn ofd_lock(f: &File, cmd: libc::c_int, ty: libc::c_short, byte: i64) -> io::Result<libc::c_short> {
    // SAFETY: flock is plain data; zeroed is a valid value (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte;
    fl.l_len = 1;
    // SAFETY: fcntl on a valid descriptor with a valid struct flock.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut fl) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type)
}

/// Open `path` for its locks: shared locks on the bytes of the permissions vmio uses and of
/// the one it does not share (write), then a check that nobody else conflicts.
fn lock_file(f: File, path: &Path) -> Result<File, ExportError> {
    let locked = || ExportError::Locked {
        path: path.display().to_string(),
    };
    for byte in [
        LOCK_PERM_BASE + PERM_CONSISTENT_READ,
        LOCK_PERM_BASE + PERM_WRITE,
        LOCK_SHARED_BASE + PERM_WRITE,
    ] {
        match ofd_lock(&f, libc::F_OFD_SETLK, libc::F_RDLCK as libc::c_short, byte) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                return Err(locked())
            }
            Err(e) => return Err(io_err(path, "lock (fcntl F_OFD_SETLK)")(e)),
        }
    }
    for byte in [
        LOCK_PERM_BASE + PERM_WRITE,
        LOCK_SHARED_BASE + PERM_WRITE,
        LOCK_SHARED_BASE + PERM_CONSISTENT_READ,
    ] {
        let held = ofd_lock(&f, libc::F_OFD_GETLK, libc::F_WRLCK as libc::c_short, byte)
            .map_err(io_err(path, "lock (fcntl F_OFD_GETLK)"))?;
        if held != libc::F_UNLCK as libc::c_short {
            return Err(locked());
        }
    }
    Ok(f)
}

/// The descriptors of one backing: the main one with the mode's flags, a buffered one for
/// unaligned pieces when the main one has O_DIRECT, an O_DIRECT one for the bypassed writes
/// of a PDC export.
struct Opened {
    file: File,
    unaligned: Option<File>,
    direct: Option<File>,
    dontcache: bool,
}

fn open_backing(path: &Path, cache: CacheMode, real: RealIo) -> Result<Opened, ExportError> {
    let mut flags = 0;
    if real.o_dsync {
        flags |= libc::O_DSYNC;
    }
    let open = |flags| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
    };
    let open_direct = || {
        open(flags | libc::O_DIRECT).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                ExportError::DirectUnsupported {
                    path: path.display().to_string(),
                    cache: cache.name(),
                }
            } else {
                io_err(path, "open")(e)
            }
        })
    };
    if real.o_direct {
        return Ok(Opened {
            file: open_direct()?,
            unaligned: Some(open(flags).map_err(io_err(path, "open"))?),
            direct: None,
            dontcache: false,
        });
    }
    let file = open(flags).map_err(io_err(path, "open"))?;
    if cache != CacheMode::Pdc {
        return Ok(Opened {
            file,
            unaligned: None,
            direct: None,
            dontcache: false,
        });
    }
    let direct = open_direct()?;
    pdc::no_reuse(&direct).map_err(io_err(path, "posix_fadvise NOREUSE"))?;
    let dontcache =
        pdc::probe_dontcache(&file, &direct).map_err(io_err(path, "probe RWF_DONTCACHE"))?;
    Ok(Opened {
        file,
        unaligned: None,
        direct: Some(direct),
        dontcache,
    })
}

/// Resolve a stack's device paths against the stack file's directory.
pub fn device_path(stack_dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        stack_dir.join(p)
    }
}

/// Open every VM disk of the stack as an export. `stack` must come from
/// [`Stack::from_toml`]; its disk sizes are resolved here from the devices' sizes.
pub fn open_exports(
    stack: &mut Stack,
    stack_dir: &Path,
    create: bool,
) -> Result<Vec<Export>, ExportError> {
    let used: Vec<usize> = {
        let mut v: Vec<usize> = stack
            .vms
            .iter()
            .flat_map(|vm| vm.disks.iter())
            .flat_map(|d| stack.volumes[d.volume].devices.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut dev_bytes = vec![0u64; stack.devices.len()];
    let mut dev_path = vec![PathBuf::new(); stack.devices.len()];
    let mut dev_lock: Vec<Option<std::sync::Arc<File>>> = vec![None; stack.devices.len()];
    // (st_dev, st_ino) of each opened file -> its device index.
    let mut seen: std::collections::HashMap<(u64, u64), usize> = Default::default();
    for i in used {
        let d = &stack.devices[i];
        let p = d.path.as_deref().ok_or_else(|| ExportError::NoPath {
            file: stack.file.clone(),
            index: i,
            name: d.name.clone(),
        })?;
        dev_path[i] = device_path(stack_dir, p);
        create_missing(&dev_path[i], &d.name, d.backing_size_bytes())?;
        let lock = {
            let f = File::open(&dev_path[i]).map_err(io_err(&dev_path[i], "open"))?;
            // The file is opened once for its identity and its locks.
            let m = f.metadata().map_err(io_err(&dev_path[i], "stat"))?;
            let id = (
                std::os::unix::fs::MetadataExt::dev(&m),
                std::os::unix::fs::MetadataExt::ino(&m),
            );
            if let Some(&j) = seen.get(&id) {
                return Err(ExportError::SameFile {
                    first: j,
                    first_name: stack.devices[j].name.clone(),
                    first_path: dev_path[j].display().to_string(),
                    second: i,
                    second_name: d.name.clone(),
                    second_path: dev_path[i].display().to_string(),
                });
            }
            seen.insert(id, i);
            lock_file(f, &dev_path[i])?
        };
        dev_lock[i] = Some(std::sync::Arc::new(lock));
        dev_bytes[i] = prepare_device(&dev_path[i], &d.name, d.backing_size_bytes(), create)?;
    }
    // Volumes no disk uses keep an unbounded size (their devices were not opened).
    let mut vol_bytes = Vec::new();
    for v in &stack.volumes {
        let caps: Vec<u64> = v.devices.iter().map(|&d| dev_bytes[d]).collect();
        vol_bytes.push(if caps.iter().all(|&c| c > 0) {
            volume::build(&v.name, v.layout, &caps, &v.params)?.capacity_bytes()
        } else {
            u64::MAX
        });
    }
    stack.resolve_disk_sizes(&vol_bytes)?;
    // The kernel reads ahead, writes back and evicts: the policy decides only RealIo here.
    let disks = stack
        .vms
        .iter()
        .flat_map(|vm| &vm.disks)
        .map(|d| HostDisk {
            mode: d.cache,
            size_bytes: d.size_bytes,
            read_ahead_pages: 0,
        })
        .collect();
    let host =
        vmio_core::cache::build(&stack.page_cache, disks).map_err(|source| ExportError::Cache {
            file: stack.file.clone(),
            source,
        })?;
    // The detector's parameters: the stack's [pdc] table (Some when a disk is pdc).
    let pdc_spec = stack.pdc.clone().unwrap_or_default();
    let throttle = throttle_groups(stack)?;
    let mut out = Vec::new();
    for (vi, vm) in stack.vms.iter().enumerate() {
        for d in &vm.disks {
            let real_io = host.real_io(out.len() as u32);
            let v = &stack.volumes[d.volume];
            let caps: Vec<u64> = v.devices.iter().map(|&i| dev_bytes[i]).collect();
            let layout = volume::build(&v.name, v.layout, &caps, &v.params)?;
            let mut backings = Vec::new();
            for &i in &v.devices {
                let o = open_backing(&dev_path[i], d.cache, real_io)?;
                let Some(lock) = dev_lock[i].clone() else {
                    continue;
                };
                backings.push(Backing {
                    path: dev_path[i].clone(),
                    device: i,
                    file: o.file,
                    unaligned: o.unaligned,
                    direct: o.direct,
                    dontcache: o.dontcache,
                    _lock: lock,
                });
            }
            let pdc = (d.cache == CacheMode::Pdc).then(|| {
                let dontcache = backings.iter().all(|b| b.dontcache);
                PdcExport::new(&pdc_spec, dontcache)
            });
            out.push(Export {
                name: format!("{}/{}", vm.name, d.name),
                index: out.len(),
                vm: vi,
                cache: d.cache,
                real_io,
                volume: v.name.clone(),
                layout,
                offset_bytes: d.offset_bytes,
                size_bytes: d.size_bytes,
                backings,
                stats: ExportStats::default(),
                throttle: throttle.of_disk[out.len()],
                pdc,
            });
        }
    }
    Ok(out)
}

/// Find an export by NBD name: `VM/DISK`, `VM` (its first disk) or "" (the first export).
pub fn find(exports: &[std::sync::Arc<Export>], name: &str) -> Option<usize> {
    if name.is_empty() {
        return (!exports.is_empty()).then_some(0);
    }
    exports.iter().position(|e| e.name == name).or_else(|| {
        exports
            .iter()
            .position(|e| e.name.split_once('/').is_some_and(|(vm, _)| vm == name))
    })
}

fn aligned(off: u64, len: usize, ptr: *const u8) -> bool {
    off.is_multiple_of(ALIGN_BYTES as u64)
        && len.is_multiple_of(ALIGN_BYTES)
        && (ptr as usize).is_multiple_of(ALIGN_BYTES)
}

impl Export {
    /// The per-device pieces of `[offset, offset + len)` of this export (already checked
    /// against the export size).
    pub fn map(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Piece>) {
        self.layout
            .map(self.offset_bytes + offset_bytes, len_bytes, out)
    }

    fn fd_for(&self, dev: usize, off: u64, len: usize, ptr: *const u8) -> &File {
        let b = &self.backings[dev];
        match &b.unaligned {
            Some(u) if !aligned(off, len, ptr) => u,
            _ => &b.file,
        }
    }

    /// The O_DIRECT descriptor a piece may use for Linux AIO ([`crate::aio`]): Some when the
    /// backing is open with O_DIRECT and the piece is aligned, the descriptor
    /// [`Export::read_piece`] and [`Export::write_piece`] would use.
    pub fn direct_fd(&self, dev: usize, off: u64, len: usize, ptr: *const u8) -> Option<i32> {
        let b = &self.backings[dev];
        (b.unaligned.is_some() && aligned(off, len, ptr)).then(|| b.file.as_raw_fd())
    }

    /// Read a piece; bytes past the end of a backing file read as zeros.
    pub fn read_piece(&self, dev: usize, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let f = self.fd_for(dev, off, buf.len(), buf.as_ptr());
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], off + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn write_piece(&self, dev: usize, off: u64, buf: &[u8]) -> io::Result<()> {
        self.fd_for(dev, off, buf.len(), buf.as_ptr())
            .write_all_at(buf, off)
    }

    /// Write a piece of a write the PDC detector bypasses (see [`crate::pdc`]): aligned
    /// through the O_DIRECT descriptor, unaligned with RWF_DONTCACHE or written back and
    /// dropped. An export without PDC writes it as any other.
    pub fn write_piece_bypass(&self, dev: usize, off: u64, buf: &[u8]) -> io::Result<()> {
        let b = &self.backings[dev];
        let (Some(p), Some(direct)) = (&self.pdc, &b.direct) else {
            return self.write_piece(dev, off, buf);
        };
        let path = pdc::bypass_path(off, buf.len(), b.dontcache);
        match path {
            BypassPath::Direct => pdc::write_direct(direct, off, buf)?,
            BypassPath::Dontcache => pdc::write_dontcache(&b.file, off, buf)?,
            BypassPath::Dropped => pdc::write_dropped(&b.file, off, buf)?,
        }
        p.count(path);
        Ok(())
    }

    /// TRIM: punch a hole (advisory; file systems without hole punching ignore it).
    pub fn trim_piece(&self, dev: usize, off: u64, len: u64) -> io::Result<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match fallocate(&self.backings[dev].file, mode, off, len) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            r => r,
        }
    }

    /// WRITE_ZEROES: punch a hole (or, with NO_HOLE, zero the range in place), falling back
    /// to writing zeros.
    pub fn zero_piece(&self, dev: usize, off: u64, len: u64, no_hole: bool) -> io::Result<()> {
        let f = &self.backings[dev].file;
        let mode = if no_hole {
            libc::FALLOC_FL_ZERO_RANGE
        } else {
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
        };
        match fallocate(f, mode, off, len) {
            Ok(()) => return Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {}
            Err(e) => return Err(e),
        }
        let zeros = AlignedBuf::zeroed(1 << 20)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            self.write_piece(dev, off + at, &zeros.as_slice()[..n])?;
            at += n as u64;
        }
        Ok(())
    }

    /// Make completed writes durable (FLUSH), as the host-cache policy decides.
    pub fn flush(&self) -> io::Result<()> {
        if self.real_io.flush == FlushRule::Ignore {
            return Ok(());
        }
        for b in &self.backings {
            b.file.sync_data()?;
        }
        Ok(())
    }

    /// Make one write durable before its reply (FUA), when the host-cache policy asks for it
    /// (not when every write already is durable, O_DSYNC, nor when flushes are ignored).
    pub fn sync_for_fua(&self, devices: impl Iterator<Item = usize>) -> io::Result<()> {
        if !self.real_io.fua_sync {
            return Ok(());
        }
        for d in devices {
            self.backings[d].file.sync_data()?;
        }
        Ok(())
    }
}

fn fallocate(f: &File, mode: libc::c_int, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Map an I/O error to the NBD error value of a reply (proto.md, "Error values").
pub fn nbd_errno(e: &io::Error) -> u32 {
    use crate::proto::{EINVAL, EIO, ENOSPC, EPERM};
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => ENOSPC,
        Some(libc::EPERM | libc::EACCES | libc::EROFS) => EPERM,
        Some(libc::EINVAL) => EINVAL,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_pieces_are_recognized() {
        let b = AlignedBuf::zeroed(4096).unwrap();
        assert!(aligned(8192, 4096, b.as_slice().as_ptr()));
        assert!(!aligned(512, 4096, b.as_slice().as_ptr()));
        assert!(!aligned(0, 512, b.as_slice().as_ptr()));
    }
}
