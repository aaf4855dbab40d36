//! File-level workloads: the files a workload uses and the file operations it asks the guest
//! for. A workload that runs on a guest filesystem (fio with `directory`/`filename` paths,
//! FileBench's personalities) declares its files once ([`Workload::files`](super::Workload::files))
//! and then asks for [`FileOp`]s on them through [`Step::File`](super::Step::File); the guest
//! layer (`crate::guest`) turns them into page-cache, filesystem and journal work.
//!
//! ```text
//! workload                          guest layer (crate::guest)
//!   files() ──────────────────────> lay out: create each file that `exists`, `size_bytes`
//!                                   long, blocks allocated and on disk, not cached
//!                                   (fio's layout phase, FileBench's prealloc; untimed)
//!   Step::File { op, tag } ───────> the operation runs (cache, allocation, journal, I/O);
//!   completed(tag) <─────────────── when it is done (the engine calls it, then asks again)
//! ```
//!
//! A `tag` names the thread of the workload that issued the operation (a FileBench thread, an
//! fio clone): a workload multiplexing several threads keeps one operation per tag
//! outstanding and learns through [`Workload::completed`](super::Workload::completed) which
//! one finished. Files are named by their index ([`FileId`]) into the workload's
//! [`FileDecl`] list; two workloads naming the same `path` share the file.

/// A file, as an index into the workload's [`FileDecl`] list.
pub type FileId = u32;

/// A file a workload uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDecl {
    /// Its path on the guest filesystem (`/mnt/fileset/00000012`); the guest shares files of
    /// equal paths between workloads.
    pub path: String,
    /// Whether the file exists before the run starts (laid out by fio's layout phase or
    /// FileBench's prealloc); otherwise the workload creates it.
    pub exists: bool,
    /// Its size before the run, when it exists (on disk, not in the guest cache).
    pub size_bytes: u64,
    /// How its `size_bytes` were laid out.
    pub layout: FileLayout,
    /// The directory it lives in (index of a directory of the workload: files of one
    /// directory share its directory blocks and, on ext4, its block group).
    pub dir: u32,
}

/// How a file that exists before the run was laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileLayout {
    /// Written with data (fio's layout of a file it reads; FileBench's prealloc).
    #[default]
    Written,
    /// Blocks allocated as unwritten extents (`fallocate`, fio's default for files it only
    /// writes): a write converts them, a read returns zeros without I/O.
    Fallocated,
    /// Only the size set (`ftruncate`, fio's `fallocate=none`): blocks allocated on first
    /// writeback (delayed allocation), reads of holes return zeros without I/O.
    Sparse,
}

/// How a read or write is done: fio's `direct` (O_DIRECT, around the guest page cache) and
/// `sync` (O_SYNC: each write durable before it completes), FileBench's `directio`, `dsync`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoFlags {
    pub direct: bool,
    pub sync: bool,
}

/// One file operation (the system calls a workload makes, in Linux's vocabulary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileOp {
    /// `open(O_CREAT)` of a file that does not exist: a new inode and directory entry.
    Create { file: FileId },
    /// `open` of an existing file (a path lookup; dentries and inodes are cached).
    Open { file: FileId },
    /// `close`.
    Close { file: FileId },
    /// `stat` (FileBench's statfile).
    Stat { file: FileId },
    /// `pread` of `len` bytes at `offset` (clamped at the end of the file).
    Read {
        file: FileId,
        offset: u64,
        len: u64,
        flags: IoFlags,
    },
    /// `pwrite` of `len` bytes at `offset`; the file grows when it ends beyond the file.
    Write {
        file: FileId,
        offset: u64,
        len: u64,
        flags: IoFlags,
    },
    /// `write` of `len` bytes at the end of the file (O_APPEND).
    Append {
        file: FileId,
        len: u64,
        flags: IoFlags,
    },
    /// `fallocate(0, offset, len)`: blocks allocated (unwritten extents), size extended.
    Fallocate { file: FileId, offset: u64, len: u64 },
    /// `fsync` (`datasync`: `fdatasync`).
    Fsync { file: FileId, datasync: bool },
    /// `unlink`: the name and, once closed, the inode and its blocks go.
    Delete { file: FileId },
}

impl FileOp {
    /// The file the operation names.
    pub fn file(self) -> FileId {
        match self {
            FileOp::Create { file }
            | FileOp::Open { file }
            | FileOp::Close { file }
            | FileOp::Stat { file }
            | FileOp::Read { file, .. }
            | FileOp::Write { file, .. }
            | FileOp::Append { file, .. }
            | FileOp::Fallocate { file, .. }
            | FileOp::Fsync { file, .. }
            | FileOp::Delete { file } => file,
        }
    }

    /// Bytes of data the operation transfers for the application (reads and writes).
    pub fn bytes(self) -> u64 {
        match self {
            FileOp::Read { len, .. } | FileOp::Write { len, .. } | FileOp::Append { len, .. } => {
                len
            }
            _ => 0,
        }
    }
}
