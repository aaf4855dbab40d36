//! Workload generation: the next request a guest application issues, as a pure function of
//! the workload description and a seed (no clock, no I/O). The engine decides *when* a
//! request is issued (iodepth, think time, runtime and ramp_time are the engine's business);
//! the generator decides *what* it is.
//!
//! - [`fio_job`]: a fio job ([`crate::fio::JobSpec`]) following fio's offset, block size and
//!   read/write-mix semantics; one [`Generator`] per numjobs clone.
//! - [`filebench`]: FileBench's `fileserver` and `varmail` personalities at block level
//!   (closed loop, one outstanding request per FileBench thread);
//! - [`trace`]: block traces (SNIA MSR-Cambridge, UMass/SPC, blkparse text, fio iolog v2/v3)
//!   and their open-loop [`Replay`] (time scaling, address folding, loops);
//! - [`synth`]: synthetic traces shaped like S1's MSN, Exchange and Financial traces;
//! - `perm` (internal): the O(1)-memory random permutation behind fio's random map.

pub mod filebench;
pub mod fio_job;
mod perm;
pub mod synth;
pub mod trace;

pub use filebench::{FilebenchGen, Personality};
pub use fio_job::Generator;
pub use synth::{SynthGen, SynthProfile};
pub use trace::{parse_trace, Replay, TimedIo, TraceError, TraceFormat};

use crate::request::Op;
use thiserror::Error;

/// What a workload asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A read or write of `len_bytes` at `offset_bytes` of the job's disk.
    Io {
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// An fsync of the job's file (fio's `fsync=N`), issued once all earlier I/O completed.
    Fsync,
    /// The job has issued everything it will issue.
    Done,
}

/// A workload that cannot run against the given disk.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WorkloadError {
    #[error(
        "job '{job}' (line {line}): region offset={offset_bytes} size={size_bytes} is empty on a disk of {disk_bytes} bytes; accepted: offset below the disk size and size > 0"
    )]
    EmptyRegion {
        job: String,
        line: usize,
        offset_bytes: u64,
        size_bytes: u64,
        disk_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): region offset={offset_bytes} size={size_bytes} ends beyond the disk of {disk_bytes} bytes; accepted: offset + size <= disk size"
    )]
    RegionBeyondDisk {
        job: String,
        line: usize,
        offset_bytes: u64,
        size_bytes: u64,
        disk_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): {direction} block sizes {sizes:?} have no usable entry; accepted: (bytes > 0, weight > 0) pairs"
    )]
    BadBlockSizes {
        job: String,
        line: usize,
        direction: &'static str,
        sizes: Vec<(u64, u32)>,
    },
    #[error(
        "job '{job}' (line {line}): bs={bs_bytes} is larger than the job's region of {region_bytes} bytes (fio: \"blocksize too large for data set\"); accepted: every block size (the largest of bs, bsrange, bssplit) <= size, and size <= the disk size minus offset"
    )]
    BlockLargerThanRegion {
        job: String,
        line: usize,
        bs_bytes: u64,
        region_bytes: u64,
    },
    #[error(
        "job '{job}' (line {line}): time_based without a runtime would never end (fio: \"time_based requires a runtime/timeout setting\"); accepted: runtime > 0 with time_based, or no time_based"
    )]
    NeverEnds { job: String, line: usize },
    #[error(
        "job '{job}' (line {line}): would issue {ios} I/Os with no runtime to stop it, more than vmio's {limit}; accepted: a runtime, or a larger bs, smaller size/io_size or number_ios"
    )]
    TooManyIos {
        job: String,
        line: usize,
        ios: u64,
        limit: u64,
    },
    #[error(
        "job '{job}' (line {line}): clone {clone_index} does not exist; accepted: 0 to {last} (numjobs={numjobs})",
        last = .numjobs.saturating_sub(1)
    )]
    NoSuchClone {
        job: String,
        line: usize,
        clone_index: u32,
        numjobs: u32,
    },
}
