//! Request types shared by every layer and both engines.

use crate::Ns;

/// What a request asks for. `Flush` is a cache flush (guest FLUSH, fdatasync, SATA FLUSH CACHE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
        }
    }
}

/// A contiguous byte range on some address space (a vdisk, a volume or a device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

impl Extent {
    pub fn new(offset_bytes: u64, len_bytes: u64) -> Self {
        Self {
            offset_bytes,
            len_bytes,
        }
    }
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.len_bytes
    }
}

/// A request as it reaches a host block device (after the volume mapping), as seen by the
/// host I/O scheduler and the device. `tag` is the engine's handle for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevIo {
    pub tag: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Force unit access: the write is durable when it completes.
    pub fua: bool,
    /// Synchronous from the submitter's point of view (reads, O_DIRECT, O_DSYNC writes);
    /// background writeback is asynchronous.
    pub sync: bool,
    /// Who issued it (VM index), for proportional-share schedulers.
    pub owner: u32,
    /// When it entered the scheduler.
    pub queued_ns: Ns,
    /// Tags of requests merged into this one (back or front merges), in address order
    /// with `tag` itself. Empty when nothing was merged.
    pub merged: Vec<u64>,
}

impl DevIo {
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.len_bytes
    }
    /// Every engine tag this request completes.
    pub fn tags(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.tag).chain(self.merged.iter().copied())
    }
}
