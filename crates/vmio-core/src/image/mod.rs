//! QEMU's block layer between a virtual disk and the host: the image format driver of a VM
//! disk (raw, qcow2) as decisions the engine carries out, like the host cache's
//! ([`crate::cache::HostCache`]).
//!
//! ```text
//! virtio/IDE device model ─> throttle (crate::throttle) ─> format driver (here) ─> host file
//!                                                          (block/raw-format.c,      (page cache
//!                                                           block/qcow2*.c)           by cache mode)
//! ```
//!
//! The driver sees a guest request on the virtual disk and answers with [`ImageAction`]s on
//! its host file: reads and writes of data and metadata, flushes of the file, and the guest
//! request's completion. The file's bytes are the disk's region of its volume (the image
//! file and, after it, its backing files, laid out by the driver: [`ImageFormat::file_bytes`]).
//!
//! ```text
//! engine                                     driver (ImageFormat)
//!   a guest request reaches the driver ────>  on_request(now, req, out)
//!   out: Io / WriteZeroes / Flush / Delay / Complete, executed in order, never calling back
//!   the action of `token` is done ──────────>  on_done(now, token, out)
//! ```
//!
//! What the layers under the driver can do is [`ImageCaps`], fixed when the driver is built
//! ([`build`]): whether a write-zeroes of the image file succeeds without falling back to
//! writing zero buffers, which decides how qcow2 fills a new cluster around a partial write.
//!
//! raw is the identity (one Io of the same range, then Complete), so the engine passes a raw
//! disk's requests straight to the host cache without a driver ([`build`] returns None).
//!
//! - [`spec`]: `[[vm.disk]] format` and `[vm.disk.image]` ([`ImageSpec`]), QEMU's cache-size
//!   defaults and the host bytes of an image and its backing chain ([`ImageSpec::file_bytes`]);
//! - [`qcow2`]: the qcow2 driver (layout, allocation, copy-on-write, backing reads, flush,
//!   discard, the image lock);
//! - [`qcow2meta`]: a qcow2 file's layout, cluster allocation, refcounts and the write-back
//!   rules of its metadata caches;
//! - [`l2cache`]: the LRU metadata cache the driver keeps for L2 slices and refcount blocks.

pub mod l2cache;
pub mod qcow2;
pub mod qcow2meta;
pub mod spec;

pub use spec::{BackingSpec, Discard, Format, ImageSpec, Preallocation};

use crate::cache::{ReqId, Request, Token};
use crate::request::Op;
use crate::vdisk::qemu::QemuProfile;
use crate::Ns;

/// What the layers under a format driver offer it (fixed for a run).
///
/// `write_zeroes`: the QEMU release zeroes a new qcow2 cluster whose copy-on-write areas read
/// as zeroes with one write-zeroes request (block/qcow2.c `handle_alloc_space`, QEMU 4.1:
/// [`QemuProfile::qcow2_zero_alloc`]), and the protocol layer can do it without a fallback
/// (`bdrv_co_pwrite_zeroes(.., BDRV_REQ_NO_FALLBACK)`; block/file-posix.c). file-posix
/// declares `BDRV_REQ_NO_FALLBACK` for every file it opens (`raw_open_common`:
/// `supported_zero_flags`), and `handle_aiocb_write_zeroes` decides: on a regular file it is
/// `fallocate(FALLOC_FL_ZERO_RANGE)` (ext4 and XFS have it), on a block device
/// (`handle_aiocb_write_zeroes_block`) the kernel's `BLKZEROOUT` may fall back to writing
/// zeroes itself, so with NO_FALLBACK it is not tried and the request fails with -ENOTSUP:
/// qcow2 then writes the zero buffers, as before 4.1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageCaps {
    pub write_zeroes: bool,
    /// The server in front of the image asks a read's block status before reading it
    /// (QEMU's NBD server: `[nbd] block_status`, crate::nbd), a lookup of its own under the
    /// image lock.
    pub status_before_read: bool,
    /// The protocol layer makes a write-zeroes past the end of the file serialising (QEMU
    /// 4.2 and later, [`QemuProfile::post_eof_serialising`]); only with `write_zeroes`, the
    /// one way the driver issues it. The engine runs the rule (vmio-sim's blocklayer.rs).
    pub serialise_past_eof: bool,
}

impl ImageCaps {
    /// The capabilities of an image run by `qemu`, its file on a host filesystem
    /// (`on_filesystem`: `[[volume]] filesystem = "ext4" | "xfs"`) or on a block device.
    pub fn of(qemu: &QemuProfile, on_filesystem: bool) -> Self {
        let write_zeroes = qemu.qcow2_zero_alloc && on_filesystem;
        ImageCaps {
            write_zeroes,
            status_before_read: false,
            serialise_past_eof: write_zeroes && qemu.post_eof_serialising,
        }
    }

    /// These capabilities with reads preceded by a block-status query (`status`).
    pub fn with_status_before_read(self, status: bool) -> Self {
        ImageCaps {
            status_before_read: status,
            ..self
        }
    }
}

/// A decision of a format driver for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageAction {
    /// Read, write or trim `[offset, offset + len)` bytes of the disk's host file (its
    /// region: the image, then its backing files) through the host cache under the disk's
    /// cache mode; `on_done(token)` when it completed. `data`: the guest request's own data
    /// (the reads or writes of its bytes QEMU issues after the image lock, as a raw disk
    /// would issue the request itself), not the driver's metadata or copy-on-write I/O.
    Io {
        op: Op,
        offset: u64,
        len: u64,
        token: Token,
        data: bool,
    },
    /// Zero `[offset, offset + len)` of the disk's host file (offsets as for Io) without
    /// writing data: QEMU's `bdrv_co_pwrite_zeroes(.., BDRV_REQ_NO_FALLBACK)` to file-posix,
    /// `fallocate(FALLOC_FL_ZERO_RANGE)` of the image file (only with
    /// [`ImageCaps::write_zeroes`]); `on_done(token)` when it completed.
    WriteZeroes { offset: u64, len: u64, token: Token },
    /// Flush the host file (QEMU's `bdrv_co_flush` to the protocol layer: the host cache's
    /// FLUSH of the disk: fdatasync, then FLUSH CACHE); `on_done(token)` when it completed.
    Flush { token: Token },
    /// `ns` of the driver's own work with no I/O (filling the guest's buffer with zeroes for
    /// a read of a cluster no layer holds); `on_done(token)` when the time has passed.
    Delay { ns: Ns, token: Token },
    /// The driver is done with guest request `req`.
    Complete { req: ReqId },
}

/// A disk's format-driver figures for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImageStats {
    pub l2_hits: u64,
    pub l2_misses: u64,
    pub metadata_read_bytes: u64,
    pub metadata_written_bytes: u64,
    /// Clusters allocated by writes (first writes to a cluster).
    pub allocations: u64,
    /// Bytes copied from the backing chain or written as zero buffers around partial writes
    /// to newly allocated clusters (perform_cow).
    pub cow_bytes: u64,
    /// Bytes of the image file zeroed by write-zeroes requests (whole new clusters whose
    /// copy-on-write areas read as zeroes: handle_alloc_space).
    pub zeroed_bytes: u64,
    /// Bytes of guest reads answered by filling the buffer with zeroes (clusters no layer
    /// of the chain holds, zero clusters).
    pub zero_fill_bytes: u64,
    /// Bytes read from backing files (reads of clusters the top image lacks, copy-up).
    pub backing_read_bytes: u64,
    /// Clusters freed by discards.
    pub discarded_clusters: u64,
    /// Requests to the image file that waited for a write-zeroes past its end (QEMU's
    /// serialising request: file-posix `raw_do_pwrite_zeroes`), those write-zeroes included
    /// when they waited themselves; filled by the engine, which runs that rule.
    pub serialised_waits: u64,
    /// Their total wait, in ns.
    pub serialised_wait_ns: u64,
}

/// A format driver of one disk. Calls never reenter: the engine executes the actions a call
/// pushed onto `out` (in order) after it returns.
pub trait ImageFormat: Send {
    /// A guest request (read, write, trim or flush) of `[req.offset, req.offset + req.len)` of
    /// the virtual disk (`req.disk` is the engine's and only echoed).
    fn on_request(&mut self, now: Ns, req: Request, out: &mut Vec<ImageAction>);
    /// The Io, WriteZeroes, Flush or Delay of `token` completed.
    fn on_done(&mut self, now: Ns, token: Token, out: &mut Vec<ImageAction>);
    fn stats(&self) -> ImageStats;
    /// Bytes of the disk's host file the driver may use (image and backing files): the
    /// disk's region of its volume, and its page-cache file's size.
    fn file_bytes(&self) -> u64;
}

/// The format driver of an image of `virtual_size` bytes over layers that offer `caps`: None
/// for raw (the identity), the qcow2 driver otherwise.
pub fn build(spec: &ImageSpec, virtual_size: u64, caps: ImageCaps) -> Option<Box<dyn ImageFormat>> {
    match spec.format {
        Format::Raw => None,
        Format::Qcow2 => Some(Box::new(
            qcow2::Qcow2::new(spec, virtual_size).with_caps(caps),
        )),
    }
}

/// The image file's size (its `i_size` on the host filesystem) before the run: what `qemu-img
/// create` leaves, then `populated`'s fill. raw: the virtual size, whatever the preallocation
/// (block/file-posix.c `raw_co_create` truncates the file to it, sparse with `off`); qcow2
/// with `preallocation = off`: the header, refcount table and block, L1 table, and the L2
/// tables and data clusters of the populated head, i.e. where the next cluster is appended
/// (block/qcow2.c `qcow2_co_create`); with any preallocation, the fully allocated size
/// (`qcow2_co_truncate` to `qcow2_calc_prealloc_size`). Backing files are never written, so
/// only the top file's size is given.
pub fn initial_file_len(spec: &ImageSpec, virtual_size: u64) -> u64 {
    match spec.format {
        Format::Raw => virtual_size,
        Format::Qcow2 if spec.preallocation != Preallocation::Off => {
            spec.own_file_bytes(virtual_size)
        }
        Format::Qcow2 => qcow2::Qcow2::new(spec, virtual_size).file_end(),
    }
}

/// `vmio help stack`'s layer for `[vm.disk.image]`: the formats, `format` and `backing`, and
/// [`spec::PARAMS`].
pub fn help_layer() -> crate::params::Layer<'static> {
    crate::params::Layer {
        table: "[vm.disk.image]",
        selector: "format",
        default: "raw",
        entries: Format::REGISTRY
            .iter()
            .map(|(_, name, help)| crate::params::Described {
                name,
                help,
                note: "format is a key of [[vm.disk]]".to_string(),
                params: &[],
            })
            .collect(),
        keys: &HELP_KEYS,
        params: spec::PARAMS,
    }
}

static HELP_KEYS: [crate::params::KeyDoc; 1] = [spec::BACKING_KEY];

#[cfg(test)]
mod tests;
