//! fio job files: the INI dialect of fio's `HOWTO` ("Job file format"), parsed into one
//! [`JobSpec`] per job section.
//!
//! Syntax: `[global]` and `[jobname]` section headers, `key=value` options (blanks around `=`
//! allowed), bare boolean keys (`time_based`), full-line and trailing comments starting with `#`
//! or `;` (a trailing comment must follow a blank, so `filename=a#b` keeps its `#`), blank
//! lines, CRLF line ends. A `[global]` section's options are the defaults of every job section
//! that follows it; several globals may appear and a later one overrides an earlier one, exactly
//! like fio. fio's `include`, `${VAR}` and `$ncpus`/`$pagesize`/`$mb_memory` are read as fio
//! reads them (rules in `fio/read.rs`; [`parse_job_file_with`] takes the environment, a file loader and the
//! simulated guest from the caller: vmio-core does no I/O).
//!
//! Editing: [`set_option`] sets one option in the text of a job file (what a study's `job:`
//! target does), finding it through the same reading of each line as the parser and under
//! every spelling the parser accepts ([`canonical_option`]: aliases; and inverses such as
//! `rwmixwrite` for `rwmixread`), keeping every other line.
//!
//! Modelled options (fio's HOWTO names; aliases in parentheses):
//! `rw` (`readwrite`, including fio's `:N` suffix, which is accepted and reported as ignored),
//! `rwmixread`, `rwmixwrite`, `bs` (`blocksize`), `bsrange` (`blocksize_range`), `bssplit`,
//! `ioengine` ([`engine`]: modelled, null, cpuio, or refused naming the engine),
//! `iodepth`, `numjobs`, `size`, `offset`, `filesize`, `io_size` (`io_limit`), `number_ios`,
//! `runtime` (`timeout`), `time_based`, `ramp_time`, `direct`, `buffered`, `sync`, `fsync`,
//! `fdatasync`, `end_fsync`, `invalidate`, `randseed`, `norandommap`, `filename`, `stonewall`
//! (`wait_for_previous`), `new_group` and `name` (overrides the
//! section name); files on a filesystem with `directory`, `nrfiles` (`nr_files`),
//! `openfiles`, `file_service_type`, `fallocate`, `create_fsync`, `create_on_open`, `unlink`
//! and `overwrite` (`workload::fio_files` follows them); trace replay with fio's
//! `read_iolog`, `replay_time_scale`, `replay_no_stall` and `loops`, plus vmio's `iolog_format` (msr, spc,
//! blkparse, fio), `filebench` (a FileBench personality, file level) and `app` (an application
//! workload: LinkBench, SQLite, LevelDB, file level). `description` is skipped
//! silently. Every other option fio 3.33 knows is accepted and listed once in
//! [`JobFile::ignored`] with the first line where it appeared, so callers can warn that vmio
//! does not model it; a name fio does not know is refused as fio refuses it
//! ([`names`]: `Bad option <key=value>` and fio's did-you-mean).
//!
//! fio semantics followed:
//! - sizes follow fio's `kb_base` (default 1024: `4k` = `4KB` = 4096 but `4KiB` = 4000, fio's
//!   "inverted" IEC prefixes; `kb_base=1000`: `4k` = 4000, `4KiB` = 4096), applied to the whole
//!   section wherever it is written, as fio does; a bare `runtime`/`ramp_time` is in seconds; `runtime=0`, `io_size=0` and `number_ios=0` mean "not set", as in fio;
//! - `bs=8k,32k` gives reads 8k and writes 32k (a third, trim, value is accepted and
//!   dropped); an empty field keeps fio's default 4k (`bs=,8k`);
//! - `bssplit=4k/10:64k/50:1m/` gives each size a percentage; blank percentages share the
//!   remainder evenly, entries are sorted by size like fio does and any percentage still
//!   missing (fio's integer division, or a list adding up to less than 100) goes to the
//!   largest size, which is where fio's draw falls through to. `bssplit=reads,writes` splits
//!   per direction; one list applies to both. When set, `bssplit` wins over `bs` for its
//!   direction, as in fio;
//! - a block size range (`bsrange=4k-64k` or `bs=4k-64k`) is modelled as equal weights over
//!   the sizes `a, 2a, 4a, ...` up to `b` (for power-of-two bounds: every power of two between
//!   them), not fio's uniform draw over every multiple of `a`;
//! - `rwmixwrite=N` sets `rwmixread=100-N` (the later of the two wins);
//! - `buffered=0` means `direct=1` and vice versa;
//! - `filesize=lo-hi` (or `lo:hi`) is a range each file's size is drawn from; `filename` and
//!   `directory` keep fio's `:`-separated lists (`\:` is a colon in a name) as written;
//! - `sync` takes fio's none, 0, sync, 1 (O_SYNC); `dsync` (O_DSYNC) is refused as not
//!   modelled. `file_service_type` takes roundrobin, sequential, random with fio's `:N`
//!   suffix; zipf, pareto and normal/gauss are refused as not modelled. `fallocate` takes
//!   none, native, posix, truncate, 0, 1 (fio's default on Linux: native); `keep` is refused;
//! - `group_id` follows fio's `groupid`: 0 for the first job, then +1 at every job with
//!   `stonewall` or `new_group`;
//! - `offset_increment` (bytes, %, zones) moves clone k's region k increments on;
//! - `size=50%`, `offset=10%` are kept as [`JobSpec::size_percent`]/[`JobSpec::offset_percent`]
//!   and resolved by the simulator against the disk; `size=8z` (also `offset`, `io_size`) is
//!   8 x `zonesize` under `zonemode=strided|zbd`, else refused as fio fails;
//! - `numjobs` is at most [`FIO_MAX_JOBS`] = 4096, fio's "maximum number of jobs" (`FIO_MAX_JOBS`
//!   in fio's `os/os.h`, checked in `init.c` when jobs are added), and so is the number of jobs
//!   of the whole file (every section's `numjobs` added up); a simulation checks the same
//!   limit over all VMs together.

pub mod engine;
pub mod fio_names;
pub mod names;
pub mod pace;
mod read;

pub use read::{Host, ReadContext, MAX_INCLUDE_DEPTH};

use crate::units::{parse_duration_ns, parse_size_kb_base, quote};
use crate::{Ns, SEC};
use read::SizeValue;
use serde::Serialize;
use std::collections::BTreeSet;
use thiserror::Error;

/// fio's limit on the number of jobs of one run (`FIO_MAX_JOBS` in fio's `os/os.h`: "maximum
/// number of jobs"); vmio applies it to `numjobs`, to one job file and to one simulation.
pub const FIO_MAX_JOBS: u32 = 4096;

/// The parsed job file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobFile {
    pub path: String,
    /// Job sections in file order (numjobs clones are not expanded).
    pub jobs: Vec<JobSpec>,
    /// Options vmio accepts but does not model, once per name, in order of first appearance.
    pub ignored: Vec<IgnoredOption>,
    /// Every `[global]` section's options as written, in file order (fio's `global options`).
    pub global_options: Vec<(String, Option<String>)>,
}

/// An option vmio does not model; `line` is the first line where it appeared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IgnoredOption {
    pub name: String,
    pub line: usize,
}

/// fio's `rw`/`readwrite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RwMode {
    #[serde(rename = "read")]
    Read,
    #[serde(rename = "write")]
    Write,
    #[serde(rename = "randread")]
    RandRead,
    #[serde(rename = "randwrite")]
    RandWrite,
    #[serde(rename = "rw")]
    ReadWrite,
    #[serde(rename = "randrw")]
    RandRw,
    /// fio's trims (BLKDISCARD on a block device); trims take the write block sizes.
    #[serde(rename = "trim")]
    Trim,
    #[serde(rename = "randtrim")]
    RandTrim,
    /// Each block is trimmed, then written (fio's `io_u.c`, `get_rw_ddir` for trimwrite).
    #[serde(rename = "trimwrite")]
    TrimWrite,
    #[serde(rename = "randtrimwrite")]
    RandTrimWrite,
}

impl RwMode {
    /// The values `rw=` accepts.
    pub const ACCEPTED: &'static str = "read, write, trim, randread, randwrite, randtrim, rw, readwrite, randrw, trimwrite, randtrimwrite";

    /// fio's canonical spelling (`rw` for mixed sequential).
    pub fn fio_name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::ReadWrite => "rw",
            RwMode::RandRw => "randrw",
            RwMode::Trim => "trim",
            RwMode::RandTrim => "randtrim",
            RwMode::TrimWrite => "trimwrite",
            RwMode::RandTrimWrite => "randtrimwrite",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(
            self,
            RwMode::RandRead
                | RwMode::RandWrite
                | RwMode::RandRw
                | RwMode::RandTrim
                | RwMode::RandTrimWrite
        )
    }

    /// Whether the mode issues reads.
    pub fn reads(self) -> bool {
        matches!(
            self,
            RwMode::Read | RwMode::RandRead | RwMode::ReadWrite | RwMode::RandRw
        )
    }

    /// Whether the mode issues writes.
    pub fn writes(self) -> bool {
        !matches!(
            self,
            RwMode::Read | RwMode::RandRead | RwMode::Trim | RwMode::RandTrim
        )
    }

    /// Whether the mode issues trims.
    pub fn trims(self) -> bool {
        matches!(
            self,
            RwMode::Trim | RwMode::RandTrim | RwMode::TrimWrite | RwMode::RandTrimWrite
        )
    }

    /// Parse one of [`RwMode::ACCEPTED`] (case-insensitive).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "read" => Some(RwMode::Read),
            "write" => Some(RwMode::Write),
            "randread" => Some(RwMode::RandRead),
            "randwrite" => Some(RwMode::RandWrite),
            "rw" | "readwrite" => Some(RwMode::ReadWrite),
            "randrw" => Some(RwMode::RandRw),
            "trim" => Some(RwMode::Trim),
            "randtrim" => Some(RwMode::RandTrim),
            "trimwrite" => Some(RwMode::TrimWrite),
            "randtrimwrite" => Some(RwMode::RandTrimWrite),
            _ => None,
        }
    }
}

/// Block sizes per direction as `(bytes, weight percent)`; weights add up to 100 when parsed
/// from a job file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockSizes {
    pub read: Vec<(u64, u32)>,
    pub write: Vec<(u64, u32)>,
}

impl BlockSizes {
    /// fio's default block size.
    pub const DEFAULT_BYTES: u64 = 4096;

    /// One size for both directions.
    pub fn uniform(bytes: u64) -> Self {
        Self {
            read: vec![(bytes, 100)],
            write: vec![(bytes, 100)],
        }
    }
}

impl Default for BlockSizes {
    fn default() -> Self {
        Self::uniform(Self::DEFAULT_BYTES)
    }
}

/// A size or a range of sizes (fio's `filesize=1m-4m`), in bytes; `lo == hi` for one size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SizeRange {
    pub lo_bytes: u64,
    pub hi_bytes: u64,
}

/// fio's `file_service_type` (fio's `io_u.c`, `__get_next_file`): how a job with several files
/// picks the file of its next I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum FileServiceKind {
    /// The next file in order, skipping finished ones (fio's default).
    #[default]
    #[serde(rename = "roundrobin")]
    RoundRobin,
    /// One file until it is finished, then the next.
    #[serde(rename = "sequential")]
    Sequential,
    /// A file drawn uniformly among the unfinished ones.
    #[serde(rename = "random")]
    Random,
}

/// `file_service_type=kind[:nr]`: `nr` I/Os go to a file before the next pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FileService {
    pub kind: FileServiceKind,
    pub nr: u32,
}

impl Default for FileService {
    fn default() -> Self {
        Self {
            kind: FileServiceKind::RoundRobin,
            nr: 1,
        }
    }
}

impl FileService {
    /// The values `file_service_type=` accepts.
    pub const ACCEPTED: &'static str =
        "roundrobin, sequential, random, each optionally with :N (N >= 1 I/Os per file)";
}

/// fio's `fallocate` (fio's `filesetup.c`, `fallocate_file`): what the layout phase does to a
/// file the job only writes. fio's default on Linux is `native` (`FIO_HAVE_DEFAULT_FALLOCATE`
/// in `os/os.h`), a `fallocate(fd, 0, 0, size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Fallocate {
    /// Nothing: the file is created empty (`none`, `0`).
    #[serde(rename = "none")]
    None,
    /// `fallocate(fd, 0, 0, size)`: unwritten extents, size set (`native`).
    #[serde(rename = "native")]
    Native,
    /// `posix_fallocate`: the same on a filesystem with fallocate (`posix`, `1`).
    #[serde(rename = "posix")]
    Posix,
    /// `ftruncate(fd, size)`: size set, no blocks (`truncate`).
    #[serde(rename = "truncate")]
    Truncate,
}

impl Fallocate {
    /// The values `fallocate=` accepts.
    pub const ACCEPTED: &'static str = "none, native, posix, truncate, 0, 1";
}

/// One job section with its `[global]` defaults applied. `Default` gives fio's defaults
/// (with an empty name and line 0).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    pub name: String,
    /// Line of the `[section]` header.
    pub line: usize,
    pub rw: RwMode,
    /// Percent of reads in mixed modes.
    pub rwmixread: u32,
    pub bs: BlockSizes,
    pub iodepth: u32,
    pub numjobs: u32,
    pub size_bytes: Option<u64>,
    pub offset_bytes: u64,
    /// fio's `filesize`: the size of each file, fixed (`filesize=1g`) or drawn per file from a
    /// range (`filesize=1m-4m`).
    pub filesize: Option<SizeRange>,
    pub runtime_ns: Option<Ns>,
    pub time_based: bool,
    pub ramp_time_ns: Ns,
    /// `io_size` or `io_limit`.
    pub io_size_bytes: Option<u64>,
    pub number_ios: Option<u64>,
    pub direct: bool,
    /// fio's `sync`: writes with O_SYNC (`sync=1` or `sync=sync`).
    pub sync: bool,
    /// Issue an fsync after every `fsync` writes (0: never).
    pub fsync: u32,
    /// Issue an fdatasync after every `fdatasync` writes (0: never); when both are due at the
    /// same write, the fsync wins (fio's `get_rw_ddir`).
    pub fdatasync: u32,
    /// fsync once when the job has issued everything (fio's `end_fsync`).
    pub end_fsync: bool,
    /// fio's `invalidate` (default 1): the guest drops the clean cached pages of the job's
    /// device or files as the job starts (fio's `file_invalidate_cache`: BLKFLSBUF on a block
    /// device, posix_fadvise DONTNEED on a file).
    pub invalidate: bool,
    /// fio's `create_fsync` (default 1): fsync a file the layout phase wrote.
    pub create_fsync: bool,
    /// fio's `nrfiles` (`nr_files`): files per job clone when no `filename` lists them.
    pub nrfiles: u32,
    /// fio's `openfiles`: most files open at once (0: `nrfiles`).
    pub openfiles: u32,
    /// fio's `file_service_type`: which file the next I/O goes to.
    pub file_service: FileService,
    /// fio's `directory`: where the files go (a ':'-separated list: clone `c` uses entry
    /// `c % n`); None: the filesystem's mount point.
    pub directory: Option<String>,
    /// fio's `filename_format`: the name of a job's own files, with `$jobname`, `$jobnum`
    /// (the clone), `$filenum` and `$clientuid` replaced (`workload::fio_files`); None: fio's
    /// default `$jobname.$jobnum.$filenum`.
    pub filename_format: Option<String>,
    /// fio's `fallocate`: how the layout phase allocates a file the job only writes.
    pub fallocate: Fallocate,
    /// fio's `create_on_open`: files are created when the job first opens them, not laid out.
    pub create_on_open: bool,
    /// fio's `unlink`: delete the files when the job ends.
    pub unlink: bool,
    /// fio's `overwrite`: a write-only job's files are laid out written, as for a reader.
    pub overwrite: bool,
    pub randseed: Option<u64>,
    pub norandommap: bool,
    pub filename: Option<String>,
    pub stonewall: bool,
    pub new_group: bool,
    /// fio's `groupid`.
    pub group_id: u32,
    /// Recorded only.
    pub ioengine: String,
    /// fio's `read_iolog`: replay this trace instead of generating I/O (fio iolog, or —
    /// vmio's extension — MSR-Cambridge, SPC/UMass or blkparse text; see `iolog_format`).
    pub read_iolog: Option<String>,
    /// vmio's `iolog_format` (msr, spc, blkparse, fio); None: detect from the first lines.
    pub iolog_format: Option<String>,
    /// fio's `replay_time_scale`: percentage applied to trace timestamps (100 = as recorded).
    pub replay_time_scale: u32,
    /// fio's `replay_no_stall`: replay the trace as fast as `iodepth` allows, in order,
    /// ignoring its timestamps (closed loop) instead of at its recorded times (open loop).
    pub replay_no_stall: bool,
    /// fio's `loops`: how many times the workload runs (traces: replay count).
    pub loops: u32,
    /// vmio's `filebench`: a FileBench personality (`workload::Personality`), file level.
    pub filebench: Option<String>,
    /// vmio's `app`: an application workload (`workload::App`), file level.
    pub app: Option<String>,
    /// vmio's `iozone`: an iozone command line's flags (`workload::iozone::Options`), file
    /// level.
    pub iozone: Option<String>,
    /// fio's `cpuload` (cpuio): percent of each cycle busy.
    pub cpuload: Option<u32>,
    /// fio's `cpuchunks` (cpuio): the cycle, given in microseconds.
    pub cpuchunks_ns: Ns,
    /// vmio's `cpu_profile`: a CPU-bound program with fixed work (`workload::cpu::PROFILES`).
    pub cpu_profile: Option<String>,
    /// vmio's `cpu_work`: the profile's CPU time on an idle core (its default when None).
    pub cpu_work_ns: Option<Ns>,
    /// vmio's `cpu_ipc`: the profile's instructions per cycle alone on this host (the
    /// profile's when None), which sets its miss rate against a shared cache.
    pub cpu_ipc: Option<f64>,
    /// fio's `cpus_allowed`: a cpuset of guest CPUs (vCPUs) in a VM, of host cores natively;
    /// resolved by the engine, which knows the counts.
    pub cpus_allowed: Option<String>,
    /// fio's `cpus_allowed_policy=split`: clone k gets the k-th CPU of `cpus_allowed` alone
    /// (`shared`, the default: every clone may use the whole set).
    pub cpus_allowed_split: bool,
    /// fiopace: rate, thinktime, startdelay, iodepth batching, random_distribution,
    /// percentage_random and verify ([`pace`]).
    pub pace: pace::Pace,
    /// fio's `size=N%` (1..100): that share of the disk (block jobs) or of the fixed
    /// `filesize` (file jobs), rounded down to the smallest block size; resolved by the
    /// simulator's `bind_jobs`. Setting `size` in bytes clears it.
    pub size_percent: Option<u32>,
    /// fio's `offset=N%` (1..100): the region starts at that share, rounded up to the
    /// smallest block size (fio's `get_start_offset`).
    pub offset_percent: Option<u32>,
    /// fio's `offset_increment`: clone k's region starts k increments after `offset`.
    pub offset_increment_bytes: u64,
    /// fio's `offset_increment=N%` (1..100), resolved like `offset_percent`.
    pub offset_increment_percent: Option<u32>,
    /// The options as written (fio's `job options` and `global options`).
    pub written: WrittenOptions,
}

/// Options as the job file wrote them, in order: fio's option name (an alias such as
/// `blocksize` becomes `bs`, as fio's `add_to_dump_list` keeps `o->name`) and the value as
/// written (None for a bare `key`). fio's JSON prints them (stat.c `json_add_job_opts`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WrittenOptions {
    /// The `[global]` sections read before this job's section.
    pub global: Vec<(String, Option<String>)>,
    /// The job's own section.
    pub own: Vec<(String, Option<String>)>,
}

impl JobSpec {
    /// How vmio runs the job's `ioengine` ([`engine::classify`]; an engine the parser would
    /// refuse, in a spec built by hand, runs as psync).
    pub fn engine(&self) -> engine::EngineModel {
        match engine::classify(&self.ioengine) {
            Some(Ok(model)) => model,
            _ => engine::EngineModel::Sync,
        }
    }

    /// The job runs CPU work, not I/O (`ioengine=cpuio` or a `cpu_profile`).
    pub fn is_cpu(&self) -> bool {
        self.ioengine == "cpuio" || self.cpu_profile.is_some()
    }
}

impl Default for JobSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            line: 0,
            rw: RwMode::Read,
            rwmixread: 50,
            bs: BlockSizes::default(),
            iodepth: 1,
            numjobs: 1,
            size_bytes: None,
            offset_bytes: 0,
            filesize: None,
            runtime_ns: None,
            time_based: false,
            ramp_time_ns: 0,
            io_size_bytes: None,
            number_ios: None,
            direct: false,
            sync: false,
            fsync: 0,
            fdatasync: 0,
            end_fsync: false,
            invalidate: true,
            create_fsync: true,
            nrfiles: 1,
            openfiles: 0,
            file_service: FileService::default(),
            directory: None,
            filename_format: None,
            fallocate: Fallocate::Native,
            create_on_open: false,
            unlink: false,
            overwrite: false,
            randseed: None,
            norandommap: false,
            filename: None,
            stonewall: false,
            new_group: false,
            group_id: 0,
            ioengine: "psync".to_string(),
            read_iolog: None,
            iolog_format: None,
            replay_time_scale: 100,
            replay_no_stall: false,
            loops: 1,
            filebench: None,
            app: None,
            iozone: None,
            cpuload: None,
            cpuchunks_ns: 50_000 * crate::US,
            cpu_profile: None,
            cpu_work_ns: None,
            cpu_ipc: None,
            cpus_allowed: None,
            cpus_allowed_split: false,
            pace: pace::Pace::default(),
            size_percent: None,
            offset_percent: None,
            offset_increment_bytes: 0,
            offset_increment_percent: None,
            written: WrittenOptions::default(),
        }
    }
}

/// A job file that vmio cannot use. Every message names the file, the line (when there is
/// one), the option, the offending text and what is accepted instead.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FioError {
    #[error("{file}:{line}: iozone: '{value}': {error}")]
    Iozone {
        file: String,
        line: usize,
        value: String,
        /// Boxed: a large variant would grow every `FioError`.
        error: Box<crate::workload::iozone::IozoneError>,
    },
    #[error("{file}:{line}: {option}: '{value}' is not valid; accepted: {accepted}")]
    BadValue {
        file: String,
        line: usize,
        option: String,
        value: String,
        accepted: String,
    },
    #[error("{file}:{line}: {option}: '{value}': {reason}; accepted: {accepted}")]
    Unsupported {
        file: String,
        line: usize,
        option: String,
        value: String,
        reason: &'static str,
        accepted: &'static str,
    },
    #[error(
        "{file}:{line}: option '{option}' appears before any section; accepted: options after a [global] or [jobname] header"
    )]
    OptionOutsideSection {
        file: String,
        line: usize,
        option: String,
    },
    #[error(
        "{file}:{line}: '{text}' is not a section header, an option or a comment; accepted: [jobname], [global], key=value, a bare boolean key, # comment, ; comment"
    )]
    BadLine {
        file: String,
        line: usize,
        text: String,
    },
    #[error("{file}:{line}: include {name}: {reason}; accepted: a readable job file of options only, included from a section, at most 16 levels deep, without cycles")]
    Include {
        file: String,
        line: usize,
        name: String,
        reason: String,
    },
    #[error("{file}:{line}: '{text}': {reason}; accepted: ${{NAME}} (environment), $ncpus, $pagesize, $mb_memory, with + - * / % ( ) after one of those")]
    Substitution {
        file: String,
        line: usize,
        text: String,
        reason: String,
    },
    #[error("{file}:{line}: ioengine={engine}: vmio does not model this engine: {reason}; accepted: {accepted}")]
    Engine {
        file: String,
        line: usize,
        engine: String,
        reason: &'static str,
        accepted: String,
    },
    #[error("{file}:{line}: Bad option <{text}>: {reason}; accepted: {accepted}")]
    BadOption {
        file: String,
        line: usize,
        text: String,
        reason: String,
        accepted: String,
    },
    #[error("{file}: no job section; accepted: at least one [jobname] section besides [global]")]
    NoJobs { file: String },
    #[error("{file}: cannot set '{option}={value}': {reason}; accepted: {accepted}")]
    BadEdit {
        file: String,
        option: String,
        value: String,
        reason: String,
        accepted: String,
    },
    #[error(
        "{file}:{line}: job '{job}': {what}, above fio's limit of {limit} jobs (FIO_MAX_JOBS); accepted: numjobs from 1 to {limit}, at most {limit} jobs in all"
    )]
    TooManyJobs {
        file: String,
        line: usize,
        job: String,
        what: String,
        limit: u32,
    },
}

const ACCEPT_BOOL: &str = "1, 0, true, false, or the bare option name for 1";
const ACCEPT_SIZE: &str =
    "a size like 4k, 64KiB, 1g (fio kb_base: 4k = 4096 and 4KiB = 4000 under the default 1024)";
const ACCEPT_REGION_SIZE: &str =
    "a size like 4k, 1g, a percentage 0% to 100% (size, offset, offset_increment) or a zone count like 8z";
const ACCEPT_DURATION: &str =
    "a duration like 30 (seconds), 500ms, 2m, 1h (suffixes ns, us, ms, s, m, h, d)";
const ACCEPT_BS: &str =
    "a block size (4k), a read,write pair (4k,64k; an empty field keeps 4k) or a range (4k-64k)";
const ACCEPT_BSSPLIT: &str =
    "size/percent entries joined by ':' (4k/10:64k/50:1m/), optionally reads,writes; <= 100 %";
const ACCEPT_PERCENT: &str = "an integer from 0 to 100";

/// Offending text as quoted in an error: see [`crate::units::quote`].
fn shown(text: &str) -> String {
    crate::units::quote(text)
}

/// Options as they accumulate for one section: the job spec plus what fio resolves only when
/// the job is complete (the name override and `bssplit`, which wins over `bs`).
#[derive(Clone, Debug)]
struct Settings {
    spec: JobSpec,
    name: Option<String>,
    bssplit_read: Option<Vec<(u64, u32)>>,
    bssplit_write: Option<Vec<(u64, u32)>>,
    /// fio's `kb_base` (1024 or 1000).
    kb_base: u64,
    /// fio's `zonesize` (0: none) and whether `zonemode` gives zones (strided or zbd).
    zonesize: u64,
    zoned: bool,
    /// Sizes given in zones (`size=8z`): (option, zones, file, line), resolved at the end.
    zone_sizes: Vec<(&'static str, u64, String, usize)>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            spec: JobSpec::default(),
            name: None,
            bssplit_read: None,
            bssplit_write: None,
            kb_base: 1024,
            zonesize: 0,
            zoned: false,
            zone_sizes: Vec::new(),
        }
    }
}

struct Parser {
    /// The file of the option being read (an included file's own name).
    path: String,
    ignored: Vec<IgnoredOption>,
    ignored_names: BTreeSet<String>,
}

/// Other spellings of the options vmio models, as `(spelling, canonical name)`: fio's aliases
/// (the `alias` of each option in fio's `options.c`), and `bsrange` (`blocksize_range`), which
/// vmio reads as `bs`: both set the block sizes, the later line wins.
const ALIASES: &[(&str, &str)] = &[
    ("readwrite", "rw"),
    ("blocksize", "bs"),
    ("bsrange", "bs"),
    ("blocksize_range", "bs"),
    ("io_limit", "io_size"),
    ("nr_files", "nrfiles"),
    ("timeout", "runtime"),
    ("wait_for_previous", "stonewall"),
];

/// Options that set the same thing the other way round, as `(inverse, canonical name)`:
/// `rwmixwrite=N` is `rwmixread=100-N`, `buffered=1` is `direct=0`.
const INVERSES: &[(&str, &str)] = &[("rwmixwrite", "rwmixread"), ("buffered", "direct")];

/// The canonical name of a lowercase option name (`blocksize` -> `bs`); other names are
/// their own.
pub fn canonical_option(key: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, canonical)| canonical)
}

/// Whether two option names (any case) set the same thing: the same canonical name, or one the
/// inverse of the other (`rwmixwrite` and `rwmixread`).
fn same_setting(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    let (a, b) = (canonical_option(&a), canonical_option(&b));
    a == b
        || INVERSES
            .iter()
            .any(|&(inv, canon)| (a, b) == (inv, canon) || (a, b) == (canon, inv))
}

/// Parse the text of a fio job file; `path` is used in error messages and recorded in the result.
/// Nothing from outside is known: `include`, `${VAR}` and `$ncpus`-style keywords need
/// [`parse_job_file_with`].
pub fn parse_job_file(text: &str, path: &str) -> Result<JobFile, FioError> {
    parse_job_file_with(text, path, &ReadContext::default())
}

/// One option line of the flattened file (includes expanded, substitutions done).
struct OptionLine {
    file: String,
    line: usize,
    key: String,
    value: Option<String>,
    /// The line as read (after substitution), for fio's `Bad option <...>`.
    text: String,
    /// Only some engines' own tables have the option: checked against the job's engine.
    engine_only: bool,
}

/// A line of the flattened file: a section header or an option.
enum Source {
    Header { name: String, line: usize },
    Option(OptionLine),
}

/// fio's `job options`/`global options` entries of a section's options: the option's name
/// and the value as written (after substitution, as fio prints it), in file order.
fn written(opts: &[OptionLine]) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    opts.iter()
        .map(|o| (canonical_option(&o.key).to_string(), o.value.clone()))
}

/// Parse a job file with what it needs from outside ([`ReadContext`]): the environment for `${VAR}`, a
/// loader for `include` and the simulated machine for `$ncpus`, `$pagesize`, `$mb_memory`.
pub fn parse_job_file_with(text: &str, path: &str, ctx: &ReadContext) -> Result<JobFile, FioError> {
    let mut p = Parser {
        path: path.to_string(),
        ignored: Vec::new(),
        ignored_names: BTreeSet::new(),
    };
    let mut source = Vec::new();
    let mut chain = vec![path.to_string()];
    p.flatten(text, path, ctx, &mut chain, false, &mut source)?;
    let mut defaults = Settings::default();
    // The open section: None before the first header, Some(None) for [global].
    let mut current: Option<Option<(String, usize)>> = None;
    let mut pending: Vec<OptionLine> = Vec::new();
    let mut jobs: Vec<JobSpec> = Vec::new();
    let mut close = |p: &mut Parser,
                     current: Option<Option<(String, usize)>>,
                     pending: &mut Vec<OptionLine>,
                     defaults: &mut Settings|
     -> Result<(), FioError> {
        match current {
            None => {}
            Some(None) => {
                p.apply_section(defaults, pending)?;
                defaults.spec.written.global.extend(written(pending));
            }
            Some(Some((name, line))) => {
                let mut settings = defaults.clone();
                p.apply_section(&mut settings, pending)?;
                settings.spec.written.own.extend(written(pending));
                jobs.push(p.finish(settings, &name, line)?);
            }
        }
        pending.clear();
        Ok(())
    };
    for item in source {
        match item {
            Source::Header { name, line } => {
                close(&mut p, current.take(), &mut pending, &mut defaults)?;
                current = Some((name != "global").then_some((name, line)));
            }
            Source::Option(opt) if current.is_none() => {
                return Err(FioError::OptionOutsideSection {
                    file: opt.file,
                    line: opt.line,
                    option: shown(&opt.key),
                })
            }
            Source::Option(opt) => pending.push(opt),
        }
    }
    close(&mut p, current, &mut pending, &mut defaults)?;
    if jobs.is_empty() {
        return Err(FioError::NoJobs {
            file: path.to_string(),
        });
    }
    let mut total = 0u64;
    for job in &jobs {
        total += u64::from(job.numjobs.max(1));
        if job.numjobs > FIO_MAX_JOBS || total > u64::from(FIO_MAX_JOBS) {
            let what = if job.numjobs > FIO_MAX_JOBS {
                format!("numjobs={}", job.numjobs)
            } else {
                format!("numjobs={} brings the file to {total} jobs", job.numjobs)
            };
            return Err(FioError::TooManyJobs {
                file: path.to_string(),
                line: job.line,
                job: shown(&job.name),
                what,
                limit: FIO_MAX_JOBS,
            });
        }
    }
    let mut group = 0u32;
    for (i, job) in jobs.iter_mut().enumerate() {
        if i > 0 && (job.stonewall || job.new_group) {
            group = group.saturating_add(1);
        }
        job.group_id = group;
    }
    Ok(JobFile {
        path: path.to_string(),
        jobs,
        ignored: p.ignored,
        global_options: defaults.spec.written.global,
    })
}

/// Set option `option=value` in the text of a job file, the way a study edits it (a target
/// `job:option` or `job:section.option`). A line is matched through the parser's reading of it
/// ([`read_line`]), so an option is found under any spelling fio accepts (any case, an alias
/// like `blocksize` for `bs`, an inverse like `rwmixwrite` for `rwmixread`). Every other line
/// (comments, blank lines, other options, `include`) is kept as it is; line ends become `\n`.
///
/// ```text
/// each line setting the option (in `section` only, when given) -> indent + option=value +
///     the line's trailing comment
/// section given, none of its lines set it  -> option=value right after its first header
///                                             (no such section: an error listing them)
/// no section, no line sets it              -> option=value right after the first header when
///                                             that is [global] (every job sees it), else
///                                             [global], option=value and a blank line on top
/// ```
///
/// An option set in some sections is left alone in the others: a study's `job:runtime` for
/// the measured job does not limit a job that only lays out the file.
///
/// `path` names the file in errors. The result is not parsed: a bad value is reported, with
/// its line, when the edited file is.
pub fn set_option(
    text: &str,
    path: &str,
    section: Option<&str>,
    option: &str,
    value: &str,
) -> Result<String, FioError> {
    let bad = |reason: String, accepted: String| FioError::BadEdit {
        file: path.to_string(),
        option: shown(option),
        value: shown(value),
        reason,
        accepted,
    };
    if !is_option_name(option) {
        return Err(bad(
            "not an option name".into(),
            "letters, digits, '_' and '-'".into(),
        ));
    }
    if value.contains(['\n', '\r']) {
        return Err(bad(
            "a value is one line".into(),
            "a value without line breaks".into(),
        ));
    }
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    let setting = format!("{option}={value}");
    let mut lines: Vec<String> = Vec::new();
    let mut headers: Vec<(usize, &str)> = Vec::new(); // (index in `lines`, section name)
    let mut current: Option<&str> = None;
    let mut replaced = false;
    for raw in body.lines() {
        match read_line(raw).1 {
            Line::Header(Some(name)) => {
                current = Some(name);
                headers.push((lines.len(), name));
            }
            Line::Option { key, .. }
                if current.is_some()
                    && (section.is_none() || current == section)
                    && same_setting(key, option) =>
            {
                let content = strip_comment(raw).trim_end();
                let indent = &raw[..raw.len() - raw.trim_start().len()];
                lines.push(format!("{indent}{setting}{}", &raw[content.len()..]));
                replaced = true;
                continue;
            }
            _ => {}
        }
        lines.push(raw.to_string());
    }
    match section {
        Some(s) if !replaced => {
            let Some(&(at, _)) = headers.iter().find(|(_, name)| *name == s) else {
                let names: Vec<String> = headers.iter().map(|(_, n)| format!("[{n}]")).collect();
                return Err(bad(
                    format!("the job file has no section [{}]", shown(s)),
                    if names.is_empty() {
                        "a section of the file (it has none)".into()
                    } else {
                        format!("a section of the file: {}", shown(&names.join(", ")))
                    },
                ));
            };
            lines.insert(at + 1, setting);
        }
        None if !replaced => match headers.first() {
            Some(&(at, "global")) => lines.insert(at + 1, setting),
            _ => {
                let top = ["[global]".to_string(), setting, String::new()];
                lines = top.into_iter().chain(lines).collect();
            }
        },
        _ => {}
    }
    let mut out = String::from(bom);
    for line in &lines {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// Cut a trailing `#` or `;` comment: at the start of the line or after a blank.
fn strip_comment(line: &str) -> &str {
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        if (c == '#' || c == ';') && prev_blank {
            return &line[..i];
        }
        prev_blank = c.is_whitespace();
    }
    line
}

/// One line of a job file as fio reads it (after [`strip_comment`] and trimming).
enum Line<'a> {
    Blank,
    /// `[name]`, the name trimmed; `None` when the header is malformed (`[a`, `[]`).
    Header(Option<&'a str>),
    /// `include FILE` (the rest of the line).
    Include(&'a str),
    /// `key=value` (blanks around `=` trimmed) or a bare `key`, as written (not lowercased).
    Option {
        key: &'a str,
        value: Option<&'a str>,
    },
    /// Anything else: not a header, an option or a comment.
    Bad,
}

/// Read one raw line: its content (comment cut, blanks trimmed) and what it is.
fn read_line(raw: &str) -> (&str, Line<'_>) {
    let line = strip_comment(raw).trim();
    if line.is_empty() {
        return (line, Line::Blank);
    }
    if line.starts_with('[') {
        let name = line
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .map(str::trim)
            .filter(|n| !n.is_empty() && !n.contains(['[', ']']));
        return (line, Line::Header(name));
    }
    if let Some(rest) = line.strip_prefix("include") {
        if rest.is_empty() || rest.starts_with(char::is_whitespace) {
            return (line, Line::Include(rest.trim()));
        }
    }
    let (key, value) = match line.split_once('=') {
        Some((k, v)) => (k.trim(), Some(v.trim())),
        None => (line, None),
    };
    if !is_option_name(key) {
        return (line, Line::Bad);
    }
    (line, Line::Option { key, value })
}

/// An option name as fio spells them: ASCII letters, digits, `_` and `-`, at least one.
fn is_option_name(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Parser {
    /// The lines of `text` (file `path`) with includes expanded and substitutions done, in
    /// order; `chain` is the files being read (for cycles), `nested` whether `text` is an
    /// included file (it may not open sections).
    fn flatten(
        &mut self,
        text: &str,
        path: &str,
        ctx: &ReadContext,
        chain: &mut Vec<String>,
        nested: bool,
        out: &mut Vec<Source>,
    ) -> Result<(), FioError> {
        self.path = path.to_string();
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            let (line, kind) = read_line(raw);
            match kind {
                Line::Blank => {}
                Line::Header(name) => {
                    let name = name.ok_or_else(|| self.bad_line(line_no, line))?;
                    if nested {
                        return Err(self.include_error(
                            line_no,
                            name,
                            "an included file cannot open a section (fio: \"No new sections in included files\")",
                        ));
                    }
                    out.push(Source::Header {
                        name: name.to_string(),
                        line: line_no,
                    });
                }
                Line::Include(name) => {
                    if !nested && !out.iter().any(|s| matches!(s, Source::Header { .. })) {
                        return Err(FioError::OptionOutsideSection {
                            file: path.to_string(),
                            line: line_no,
                            option: "include".to_string(),
                        });
                    }
                    let target = read::include_path(path, name);
                    if chain.contains(&target) {
                        return Err(self.include_error(
                            line_no,
                            name,
                            "it includes itself (a cycle)",
                        ));
                    }
                    if chain.len() > read::MAX_INCLUDE_DEPTH {
                        return Err(self.include_error(line_no, name, "includes nest too deep"));
                    }
                    let Some(load) = ctx.load else {
                        return Err(self.include_error(
                            line_no,
                            name,
                            "this reading of the job file has no file access",
                        ));
                    };
                    let included =
                        load(&target).map_err(|why| self.include_error(line_no, name, &why))?;
                    chain.push(target.clone());
                    self.flatten(&included, &target, ctx, chain, true, out)?;
                    chain.pop();
                    self.path = path.to_string();
                }
                Line::Bad => return Err(self.bad_line(line_no, line)),
                Line::Option { .. } => {
                    let text =
                        read::substitute(line, ctx).map_err(|why| FioError::Substitution {
                            file: path.to_string(),
                            line: line_no,
                            text: shown(line),
                            reason: why,
                        })?;
                    let (key, value, known) = match read_line(&text).1 {
                        Line::Option { key, value } => {
                            let known =
                                names::check(key).map_err(|reason| FioError::BadOption {
                                    file: path.to_string(),
                                    line: line_no,
                                    text: shown(&text),
                                    reason,
                                    accepted: names::ACCEPTED.to_string(),
                                })?;
                            (key.to_ascii_lowercase(), value.map(str::to_string), known)
                        }
                        _ => return Err(self.bad_line(line_no, &text)),
                    };
                    out.push(Source::Option(OptionLine {
                        file: path.to_string(),
                        line: line_no,
                        key,
                        value,
                        engine_only: known == names::Known::EngineOption,
                        text,
                    }));
                }
            }
        }
        Ok(())
    }

    /// Apply one section's options: `kb_base` first (fio sorts a section's options by
    /// priority, and `kb_base` has the first), then the others in order.
    fn apply_section(&mut self, s: &mut Settings, opts: &[OptionLine]) -> Result<(), FioError> {
        let (first, rest): (Vec<&OptionLine>, Vec<&OptionLine>) =
            opts.iter().partition(|o| o.key == "kb_base");
        for o in first.into_iter().chain(rest) {
            self.path.clone_from(&o.file);
            self.apply(s, &o.key, o.value.as_deref(), o.line)?;
        }
        // fio's second pass (names.rs): an engine's option needs the section's engine.
        let engine = s.spec.ioengine.as_str();
        if let Some(o) = opts
            .iter()
            .find(|o| o.engine_only && !names::is_engine_option(engine, &o.key))
        {
            return Err(FioError::BadOption {
                file: o.file.clone(),
                line: o.line,
                text: shown(&o.text),
                reason: format!(
                    "fio 3.33 reads '{}' only with ioengine={}, and this job's is {}",
                    o.key,
                    names::engines_of(&o.key).join(", "),
                    shown(engine)
                ),
                accepted: names::ACCEPTED.to_string(),
            });
        }
        Ok(())
    }

    /// The job spec of a complete section: the name override, `bssplit` (which wins over
    /// `bs`) and sizes in zones.
    fn finish(&mut self, mut s: Settings, section: &str, line: usize) -> Result<JobSpec, FioError> {
        s.spec.name = s.name.unwrap_or_else(|| section.to_string());
        s.spec.line = line;
        if let Some(r) = s.bssplit_read {
            s.spec.bs.read = r;
        }
        if let Some(w) = s.bssplit_write {
            s.spec.bs.write = w;
        }
        for (option, zones, file, at) in s.zone_sizes {
            if !s.zoned || s.zonesize == 0 {
                return Err(FioError::Unsupported {
                    file,
                    line: at,
                    option: option.to_string(),
                    value: format!("{zones}z"),
                    reason: "a size in zones needs a zone size (fio: \"you need to specify size=\"); vmio's disks are not zoned",
                    accepted: "zonemode=strided (or zbd) with zonesize=, or a size like 4k, 1g, 50%",
                });
            }
            let bytes = zones.saturating_mul(s.zonesize);
            match option {
                "size" => s.spec.size_bytes = Some(bytes),
                "offset" => s.spec.offset_bytes = bytes,
                "offset_increment" => s.spec.offset_increment_bytes = bytes,
                _ => s.spec.io_size_bytes = Some(bytes).filter(|&b| b > 0),
            }
        }
        Ok(s.spec)
    }

    fn include_error(&self, line: usize, name: &str, reason: &str) -> FioError {
        FioError::Include {
            file: self.path.clone(),
            line,
            name: shown(name),
            reason: reason.to_string(),
        }
    }

    fn bad_line(&self, line: usize, text: &str) -> FioError {
        FioError::BadLine {
            file: self.path.to_string(),
            line,
            text: shown(text),
        }
    }

    fn bad(&self, line: usize, option: &str, value: Option<&str>, accepted: &str) -> FioError {
        FioError::BadValue {
            file: self.path.to_string(),
            line,
            option: shown(option),
            value: shown(value.unwrap_or("")),
            accepted: accepted.to_string(),
        }
    }

    fn ignore(&mut self, name: &str, line: usize) {
        if self.ignored_names.insert(name.to_string()) {
            self.ignored.push(IgnoredOption {
                name: name.to_string(),
                line,
            });
        }
    }

    fn apply(
        &mut self,
        s: &mut Settings,
        key: &str,
        value: Option<&str>,
        line: usize,
    ) -> Result<(), FioError> {
        let j = &mut s.spec;
        match canonical_option(key) {
            "rw" => {
                let v = value.unwrap_or("");
                let (mode, modifier) = match v.split_once(':') {
                    Some((m, n)) => (m, Some(n)),
                    None => (v, None),
                };
                j.rw = RwMode::parse(mode)
                    .ok_or_else(|| self.bad(line, key, value, RwMode::ACCEPTED))?;
                if modifier.is_some() {
                    self.ignore(&format!("{key}:N"), line);
                }
            }
            "rwmixread" => j.rwmixread = self.percent(key, value, line)?,
            "rwmixwrite" => j.rwmixread = 100 - self.percent(key, value, line)?,
            "bs" => {
                j.bs = parse_bs(value.unwrap_or(""), s.kb_base).map_err(|why| {
                    self.bad(line, key, value, &format!("{ACCEPT_BS} ({})", quote(&why)))
                })?;
            }
            "bssplit" => {
                let (r, w) = parse_bssplit(value.unwrap_or(""), s.kb_base).map_err(|why| {
                    self.bad(
                        line,
                        key,
                        value,
                        &format!("{ACCEPT_BSSPLIT} ({})", quote(&why)),
                    )
                })?;
                s.bssplit_read = r;
                s.bssplit_write = w;
            }
            "iodepth" => j.iodepth = self.count(key, value, line)?,
            "numjobs" => j.numjobs = self.count(key, value, line)?,
            "size" | "offset" | "offset_increment" | "io_size" => {
                self.region_size(s, key, value, line)?
            }
            "filesize" => j.filesize = Some(self.size_range(key, value, line, s.kb_base)?),
            "kb_base" => {
                s.kb_base = match value {
                    Some("1024") => 1024,
                    Some("1000") => 1000,
                    _ => return Err(self.bad(line, key, value, "1024, 1000")),
                }
            }
            "zonesize" => {
                s.zonesize = self.size(key, value, line, s.kb_base)?;
                self.ignore(key, line);
            }
            "zonemode" => {
                s.zoned = match value.map(str::to_ascii_lowercase).as_deref() {
                    Some("none") => false,
                    Some("strided") | Some("zbd") => true,
                    _ => return Err(self.bad(line, key, value, "none, strided, zbd")),
                };
                self.ignore(key, line);
            }
            "number_ios" => j.number_ios = Some(self.int(key, value, line)?).filter(|&n| n > 0),
            "runtime" => j.runtime_ns = Some(self.duration(key, value, line)?).filter(|&t| t > 0),
            "ramp_time" => j.ramp_time_ns = self.duration(key, value, line)?,
            "time_based" => j.time_based = self.boolean(key, value, line)?,
            "direct" => j.direct = self.boolean(key, value, line)?,
            "buffered" => j.direct = !self.boolean(key, value, line)?,
            "sync" => j.sync = self.sync(key, value, line)?,
            "fsync" => j.fsync = self.int_u32(key, value, line)?,
            "fdatasync" => j.fdatasync = self.int_u32(key, value, line)?,
            "end_fsync" => j.end_fsync = self.boolean(key, value, line)?,
            "invalidate" => j.invalidate = self.boolean(key, value, line)?,
            "create_fsync" => j.create_fsync = self.boolean(key, value, line)?,
            "create_on_open" => j.create_on_open = self.boolean(key, value, line)?,
            "unlink" => j.unlink = self.boolean(key, value, line)?,
            "overwrite" => j.overwrite = self.boolean(key, value, line)?,
            "nrfiles" => j.nrfiles = self.count(key, value, line)?,
            "openfiles" => j.openfiles = self.int_u32(key, value, line)?,
            "file_service_type" => j.file_service = self.file_service(key, value, line)?,
            "fallocate" => j.fallocate = self.fallocate(key, value, line)?,
            "directory" => {
                j.directory =
                    Some(self.text(key, value, line, "a directory path (':' separates several)")?)
            }
            "filename_format" => {
                j.filename_format = Some(self.text(
                    key,
                    value,
                    line,
                    "a file name with $jobname, $jobnum, $filenum",
                )?)
            }
            "randseed" => j.randseed = Some(self.int(key, value, line)?),
            "norandommap" => j.norandommap = self.boolean(key, value, line)?,
            "stonewall" => j.stonewall = self.boolean(key, value, line)?,
            "new_group" => j.new_group = self.boolean(key, value, line)?,
            "filename" => {
                j.filename = Some(self.text(key, value, line, "a file or device path")?)
            }
            "ioengine" => {
                let v = self.text(key, value, line, "an fio ioengine name")?;
                match engine::classify(&v) {
                    Some(Ok(_)) => j.ioengine = v,
                    Some(Err(reason)) => {
                        return Err(FioError::Engine {
                            file: self.path.clone(),
                            line,
                            engine: shown(&v),
                            reason,
                            accepted: engine::accepted(),
                        })
                    }
                    None => return Err(self.bad(line, key, value, &engine::accepted())),
                }
            }
            "read_iolog" => {
                j.read_iolog = Some(self.text(key, value, line, "a trace file path")?)
            }
            "iolog_format" => {
                let v = self.text(key, value, line, "msr, spc, blkparse or fio")?;
                if !["msr", "spc", "blkparse", "fio"].contains(&v.as_str()) {
                    return Err(self.bad(line, key, Some(v.as_str()), "msr, spc, blkparse, fio"));
                }
                j.iolog_format = Some(v);
            }
            "replay_time_scale" => {
                j.replay_time_scale = u32::try_from(self.int(key, value, line)?)
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| self.bad(line, key, value, "a percentage > 0"))?
            }
            "replay_no_stall" => j.replay_no_stall = self.boolean(key, value, line)?,
            "loops" => {
                j.loops = u32::try_from(self.int(key, value, line)?)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| self.bad(line, key, value, "an integer >= 1"))?
            }
            "filebench" => {
                use crate::workload::filebench::Personality;
                let accepted = Personality::accepted();
                j.filebench = Some(self.named(key, value, line, &accepted, |v| {
                    Personality::parse(v).is_ok()
                })?)
            }
            "app" => {
                use crate::workload::apps::App;
                let accepted = App::accepted();
                j.app = Some(self.named(key, value, line, &accepted, |v| App::parse(v).is_ok())?)
            }
            "iozone" => {
                use crate::workload::iozone::{Options, ACCEPTED};
                let v = self.text(key, value, line, ACCEPTED)?;
                if let Err(e) = Options::parse(&v) {
                    return Err(FioError::Iozone {
                        file: self.path.to_string(),
                        line,
                        value: shown(&v),
                        error: Box::new(e),
                    });
                }
                j.iozone = Some(v)
            }
            "cpuload" => {
                j.cpuload = Some(
                    u32::try_from(self.int(key, value, line)?)
                        .ok()
                        .filter(|p| (1..=100).contains(p))
                        .ok_or_else(|| self.bad(line, key, value, "a percentage from 1 to 100"))?,
                )
            }
            "cpuchunks" => {
                j.cpuchunks_ns = self
                    .int(key, value, line)?
                    .checked_mul(crate::US)
                    .filter(|&n| n > 0)
                    .ok_or_else(|| self.bad(line, key, value, "microseconds, an integer >= 1"))?
            }
            "cpumode" => {
                let v = self.text(key, value, line, "noop")?;
                if v != "noop" {
                    return Err(self.bad(
                        line,
                        key,
                        Some(v.as_str()),
                        "noop (qsort is not modelled)",
                    ));
                }
            }
            "cpu_profile" => {
                use crate::workload::cpu;
                let accepted = cpu::accepted();
                j.cpu_profile =
                    Some(self.named(key, value, line, &accepted, |v| cpu::find(v).is_some())?)
            }
            "cpu_work" => {
                let ns = self.duration(key, value, line)?;
                if ns == 0 {
                    return Err(self.bad(line, key, value, "a CPU time > 0 such as 30s or 500ms"));
                }
                j.cpu_work_ns = Some(ns);
            }
            "cpu_ipc" => {
                const ACCEPTED: &str = "instructions per cycle, a number from 0.001 to 16";
                let v = self.text(key, value, line, ACCEPTED)?;
                match v.parse::<f64>() {
                    Ok(ipc) if (0.001..=16.0).contains(&ipc) => j.cpu_ipc = Some(ipc),
                    _ => return Err(self.bad(line, key, Some(v.as_str()), ACCEPTED)),
                }
            }
            "cpus_allowed_policy" => {
                let v = self.text(key, value, line, "shared or split")?;
                j.cpus_allowed_split = match v.as_str() {
                    "shared" => false,
                    "split" => true,
                    _ => return Err(self.bad(line, key, Some(v.as_str()), "shared, split")),
                };
            }
            "cpus_allowed" => {
                j.cpus_allowed = Some(self.text(key, value, line, "a CPU list such as 0-3,5")?)
            }
            "name" => s.name = Some(self.text(key, value, line, "a job name")?),
            "description" => {}
            // fiopace: options that change when and where a job issues (fio/pace.rs).
            k if pace::OPTIONS.contains(&k) => pace::apply(&mut j.pace, k, value)
                .map_err(|accepted| self.bad(line, key, value, &accepted))?,
            // fioout: options the output reads from `written` (vmio-sim output.rs,
            // sim/samples.rs): honoured there, so not reported as ignored.
            "group_reporting" | "write_bw_log" | "write_iops_log" | "write_lat_log"
            | "log_avg_msec" | "bw_avg_time" | "iops_avg_time" => {}
            _ => self.ignore(key, line),
        }
        Ok(())
    }

    fn boolean(&self, key: &str, value: Option<&str>, line: usize) -> Result<bool, FioError> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("1") | Some("true") => Ok(true),
            Some("0") | Some("false") => Ok(false),
            _ => Err(self.bad(line, key, value, ACCEPT_BOOL)),
        }
    }

    fn int(&self, key: &str, value: Option<&str>, line: usize) -> Result<u64, FioError> {
        let v = value.unwrap_or("");
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.bad(line, key, value, "a non-negative integer"));
        }
        v.parse()
            .map_err(|_| self.bad(line, key, value, "an integer from 0 to 2^64-1"))
    }

    fn int_u32(&self, key: &str, value: Option<&str>, line: usize) -> Result<u32, FioError> {
        u32::try_from(self.int(key, value, line)?)
            .map_err(|_| self.bad(line, key, value, "an integer from 0 to 4294967295"))
    }

    /// fio's `sync`: none, 0 -> off; sync, 1 (or the bare name) -> O_SYNC; dsync (O_DSYNC) is
    /// not modelled.
    fn sync(&self, key: &str, value: Option<&str>, line: usize) -> Result<bool, FioError> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            None | Some("1") | Some("sync") => Ok(true),
            Some("0") | Some("none") => Ok(false),
            Some("dsync") => Err(FioError::Unsupported {
                file: self.path.to_string(),
                line,
                option: shown(key),
                value: "dsync".to_string(),
                reason: "O_DSYNC is not modelled by vmio (only O_SYNC)",
                accepted: "none, 0, sync, 1",
            }),
            _ => Err(self.bad(line, key, value, "none, 0, sync, 1")),
        }
    }

    /// fio's `file_service_type=kind[:N]` (fio's `str_fst_cb`).
    fn file_service(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
    ) -> Result<FileService, FioError> {
        let v = value.unwrap_or("").to_ascii_lowercase();
        let (kind, nr) = match v.split_once(':') {
            Some((k, n)) => (k, Some(n)),
            None => (v.as_str(), None),
        };
        let kind = match kind {
            "roundrobin" => FileServiceKind::RoundRobin,
            "sequential" => FileServiceKind::Sequential,
            "random" => FileServiceKind::Random,
            "zipf" | "pareto" | "normal" | "gauss" => {
                return Err(FioError::Unsupported {
                    file: self.path.to_string(),
                    line,
                    option: shown(key),
                    value: shown(&v),
                    reason: "non-uniform file service is not modelled by vmio",
                    accepted: FileService::ACCEPTED,
                })
            }
            _ => return Err(self.bad(line, key, value, FileService::ACCEPTED)),
        };
        let nr = match nr {
            None => 1,
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| self.bad(line, key, value, FileService::ACCEPTED))?,
        };
        Ok(FileService { kind, nr })
    }

    fn fallocate(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
    ) -> Result<Fallocate, FioError> {
        match value.map(str::to_ascii_lowercase).as_deref() {
            Some("none") | Some("0") => Ok(Fallocate::None),
            Some("native") => Ok(Fallocate::Native),
            Some("posix") | Some("1") => Ok(Fallocate::Posix),
            Some("truncate") => Ok(Fallocate::Truncate),
            Some("keep") => Err(FioError::Unsupported {
                file: self.path.to_string(),
                line,
                option: shown(key),
                value: "keep".to_string(),
                reason: "FALLOC_FL_KEEP_SIZE (blocks beyond the file size) is not modelled by vmio",
                accepted: Fallocate::ACCEPTED,
            }),
            _ => Err(self.bad(line, key, value, Fallocate::ACCEPTED)),
        }
    }

    /// fio's `filesize`: one size, or a range `lo-hi` (also `lo:hi`) with lo <= hi.
    fn size_range(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
        kb_base: u64,
    ) -> Result<SizeRange, FioError> {
        let v = value.unwrap_or("");
        let accepted = "a size (1g) or a range lo-hi (1m-4m), sizes > 0, lo <= hi";
        let (lo, hi) = match v.split_once(['-', ':']) {
            Some((lo, hi)) => (
                self.size(key, Some(lo.trim()), line, kb_base)?,
                self.size(key, Some(hi.trim()), line, kb_base)?,
            ),
            None => {
                let b = self.size(key, value, line, kb_base)?;
                (b, b)
            }
        };
        if lo == 0 || lo > hi {
            return Err(self.bad(line, key, value, accepted));
        }
        Ok(SizeRange {
            lo_bytes: lo,
            hi_bytes: hi,
        })
    }

    fn count(&self, key: &str, value: Option<&str>, line: usize) -> Result<u32, FioError> {
        let accepted = "an integer from 1 to 4294967295";
        let v = value.unwrap_or("");
        match v.parse::<u32>() {
            Ok(n) if n >= 1 && v.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(self.bad(line, key, value, accepted)),
        }
    }

    fn percent(&self, key: &str, value: Option<&str>, line: usize) -> Result<u32, FioError> {
        let v = value.unwrap_or("");
        match v.parse::<u32>() {
            Ok(n) if n <= 100 && v.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
            _ => Err(self.bad(line, key, value, ACCEPT_PERCENT)),
        }
    }

    /// A size in bytes under `kb_base`.
    fn size(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
        kb_base: u64,
    ) -> Result<u64, FioError> {
        parse_size_kb_base(value.unwrap_or(""), kb_base)
            .map_err(|_| self.bad(line, key, value, ACCEPT_SIZE))
    }

    /// `size`, `offset`, `io_size`: bytes, a percentage (`size`, `offset`) or zones
    /// (`fio/read.rs`); the last setting of an option wins whatever its form.
    fn region_size(
        &self,
        s: &mut Settings,
        key: &str,
        value: Option<&str>,
        line: usize,
    ) -> Result<(), FioError> {
        let option: &'static str = match key {
            "size" => "size",
            "offset" => "offset",
            "offset_increment" => "offset_increment",
            _ => "io_size",
        };
        let parsed = read::size_value(value.unwrap_or(""), s.kb_base)
            .map_err(|_| self.bad(line, key, value, ACCEPT_REGION_SIZE))?;
        s.zone_sizes.retain(|z| z.0 != option);
        let j = &mut s.spec;
        match (option, parsed) {
            (_, SizeValue::Zones(n)) => s.zone_sizes.push((option, n, self.path.clone(), line)),
            ("size", SizeValue::Percent(p)) => {
                j.size_bytes = None;
                j.size_percent = Some(p).filter(|&p| p > 0);
            }
            ("offset", SizeValue::Percent(p)) => {
                j.offset_bytes = 0;
                j.offset_percent = Some(p).filter(|&p| p > 0);
            }
            ("offset_increment", SizeValue::Percent(p)) => {
                j.offset_increment_bytes = 0;
                j.offset_increment_percent = Some(p).filter(|&p| p > 0);
            }
            (_, SizeValue::Percent(_)) => {
                return Err(FioError::Unsupported {
                    file: self.path.clone(),
                    line,
                    option: shown(key),
                    value: shown(value.unwrap_or("")),
                    reason: "a percentage of io_size is not modelled by vmio",
                    accepted: ACCEPT_SIZE,
                })
            }
            ("size", SizeValue::Bytes(b)) => {
                j.size_bytes = Some(b);
                j.size_percent = None;
            }
            ("offset", SizeValue::Bytes(b)) => {
                j.offset_bytes = b;
                j.offset_percent = None;
            }
            ("offset_increment", SizeValue::Bytes(b)) => {
                j.offset_increment_bytes = b;
                j.offset_increment_percent = None;
            }
            (_, SizeValue::Bytes(b)) => j.io_size_bytes = Some(b).filter(|&b| b > 0),
        }
        Ok(())
    }

    fn duration(&self, key: &str, value: Option<&str>, line: usize) -> Result<Ns, FioError> {
        parse_duration_ns(value.unwrap_or(""), SEC)
            .map_err(|_| self.bad(line, key, value, ACCEPT_DURATION))
    }

    /// A name of a registry (`filebench=`, `app=`): `known` says whether it is one.
    fn named(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
        accepted: &str,
        known: impl Fn(&str) -> bool,
    ) -> Result<String, FioError> {
        let v = self.text(key, value, line, accepted)?;
        if !known(&v) {
            return Err(self.bad(line, key, Some(v.as_str()), accepted));
        }
        Ok(v)
    }

    fn text(
        &self,
        key: &str,
        value: Option<&str>,
        line: usize,
        accepted: &str,
    ) -> Result<String, FioError> {
        match value {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(self.bad(line, key, value, accepted)),
        }
    }
}

fn parse_block_size(text: &str, kb_base: u64) -> Result<u64, String> {
    match parse_size_kb_base(text, kb_base) {
        Ok(0) => Err("a block size must be > 0".to_string()),
        Ok(b) => Ok(b),
        Err(e) => Err(e.to_string()),
    }
}

/// One `bs`/`bsrange` field: `4k` or `4k-64k`.
fn parse_bs_field(field: &str, kb_base: u64) -> Result<Vec<(u64, u32)>, String> {
    let field = field.trim();
    if field.is_empty() {
        return Ok(vec![(BlockSizes::DEFAULT_BYTES, 100)]);
    }
    let Some((lo, hi)) = field.split_once('-') else {
        return Ok(vec![(parse_block_size(field, kb_base)?, 100)]);
    };
    let (lo, hi) = (
        parse_block_size(lo, kb_base)?,
        parse_block_size(hi, kb_base)?,
    );
    if lo > hi {
        return Err(format!("range {lo}-{hi} runs backwards"));
    }
    let mut sizes = Vec::new();
    let mut b = Some(lo);
    while let Some(x) = b.filter(|&x| x <= hi) {
        sizes.push(x);
        b = x.checked_mul(2);
    }
    let n = sizes.len() as u32; // at most 64
    Ok(sizes
        .into_iter()
        .enumerate()
        .map(|(i, s)| (s, 100 / n + u32::from((i as u32) < 100 % n)))
        .collect())
}

fn parse_bs(value: &str, kb_base: u64) -> Result<BlockSizes, String> {
    let fields: Vec<&str> = value.split(',').collect();
    if value.trim().is_empty() {
        return Err("empty value".to_string());
    }
    if fields.len() > 3 {
        return Err("at most read,write,trim".to_string());
    }
    let read = parse_bs_field(fields[0], kb_base)?;
    let write = match fields.get(1) {
        Some(f) => parse_bs_field(f, kb_base)?,
        None => read.clone(),
    };
    if let Some(f) = fields.get(2) {
        parse_bs_field(f, kb_base)?; // trim: validated, not modelled
    }
    Ok(BlockSizes { read, write })
}

type Split = Option<Vec<(u64, u32)>>;

fn parse_bssplit(value: &str, kb_base: u64) -> Result<(Split, Split), String> {
    if value.trim().is_empty() {
        return Err("empty value".to_string());
    }
    let fields: Vec<&str> = value.split(',').collect();
    if fields.len() > 3 {
        return Err("at most reads,writes,trims".to_string());
    }
    let read = parse_split_list(fields[0], kb_base)?;
    let write = match fields.get(1) {
        Some(f) => parse_split_list(f, kb_base)?,
        None => read.clone(),
    };
    if let Some(f) = fields.get(2) {
        parse_split_list(f, kb_base)?;
    }
    Ok((read, write))
}

/// One direction of `bssplit`; `None` for an empty field (that direction keeps `bs`).
fn parse_split_list(list: &str, kb_base: u64) -> Result<Split, String> {
    let mut entries: Vec<(u64, Option<u32>)> = Vec::new();
    for entry in list.split(':').map(str::trim).filter(|e| !e.is_empty()) {
        let (bs, pct) = match entry.split_once('/') {
            Some((b, p)) => (b, p.trim()),
            None => (entry, ""),
        };
        let bs = parse_block_size(bs, kb_base)?;
        let pct = if pct.is_empty() {
            None
        } else {
            match pct.parse::<u32>() {
                Ok(p) if p <= 100 && pct.bytes().all(|b| b.is_ascii_digit()) => Some(p),
                _ => return Err(format!("'{}' is not a percentage 0..100", shown(pct))),
            }
        };
        entries.push((bs, pct));
    }
    if entries.is_empty() {
        return Ok(None);
    }
    let given: u32 = entries.iter().filter_map(|e| e.1).sum();
    if given > 100 {
        return Err(format!("percentages add up to {given}"));
    }
    let missing = entries.iter().filter(|e| e.1.is_none()).count() as u32;
    let share = (100 - given).checked_div(missing).unwrap_or(0);
    let mut out: Vec<(u64, u32)> = entries
        .into_iter()
        .map(|(b, p)| (b, p.unwrap_or(share)))
        .collect();
    out.sort_by_key(|e| e.0);
    let total: u32 = out.iter().map(|e| e.1).sum();
    if let Some(last) = out.last_mut() {
        last.1 += 100 - total;
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> JobFile {
        parse_job_file(text, "job.fio").unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(text: &str) -> String {
        parse_job_file(text, "job.fio").unwrap_err().to_string()
    }

    fn set(text: &str, section: Option<&str>, option: &str, value: &str) -> String {
        set_option(text, "job.fio", section, option, value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cpu_ipc_gives_a_profile_its_measured_rate_and_refuses_what_is_not_a_rate() {
        let f = parse("[t]\ncpu_profile=triad\ncpu_ipc=0.2573\n");
        assert_eq!(f.jobs[0].cpu_ipc, Some(0.2573));
        assert_eq!(parse("[t]\ncpu_profile=triad\n").jobs[0].cpu_ipc, None);
        for bad in ["0", "-1", "17", "fast", ""] {
            let e = err(&format!("[t]\ncpu_profile=triad\ncpu_ipc={bad}\n"));
            assert!(e.contains("cpu_ipc") && e.contains("0.001 to 16"), "{e}");
        }
    }

    #[test]
    fn setting_an_option_replaces_it_in_every_section_and_keeps_the_other_lines() {
        let text = "[global]\nbs=4k\n; comment\n[a]\nbs=8k\n[b]\nrw=read\n";
        assert_eq!(
            set(text, None, "bs", "1m"),
            "[global]\nbs=1m\n; comment\n[a]\nbs=1m\n[b]\nrw=read\n"
        );
    }

    #[test]
    fn setting_an_option_finds_it_under_its_aliases_and_any_case() {
        let text = "[a]\n  BlockSize = 4k  # small\nreadwrite=read\ntimeout=10\nbsrange=4k-8k\n";
        let out = set(text, None, "bs", "64k");
        assert_eq!(
            out,
            "[a]\n  bs=64k  # small\nreadwrite=read\ntimeout=10\nbs=64k\n"
        );
        let out = set(&set(&out, None, "rw", "randwrite"), None, "runtime", "2");
        assert_eq!(
            out,
            "[a]\n  bs=64k  # small\nrw=randwrite\nruntime=2\nbs=64k\n"
        );
        let j = &parse(&out).jobs[0];
        assert_eq!((j.rw, j.bs.read[0].0), (RwMode::RandWrite, 65536));
        assert_eq!(j.runtime_ns, Some(2 * SEC));
    }

    #[test]
    fn setting_an_option_replaces_its_inverse() {
        let out = set(
            "[a]\nrw=randrw\nrwmixwrite=30\nbuffered=1\n",
            None,
            "rwmixread",
            "90",
        );
        assert_eq!(out, "[a]\nrw=randrw\nrwmixread=90\nbuffered=1\n");
        let out = set(&out, None, "direct", "1");
        assert_eq!(out, "[a]\nrw=randrw\nrwmixread=90\ndirect=1\n");
        let j = &parse(&out).jobs[0];
        assert!(j.direct && j.rwmixread == 90);
    }

    #[test]
    fn a_missing_option_goes_to_the_leading_global_or_a_new_one() {
        assert_eq!(
            set("[global]\n[a]\nrw=read\n", None, "bs", "64k"),
            "[global]\nbs=64k\n[a]\nrw=read\n"
        );
        assert_eq!(
            set("[a]\nrw=read\n", None, "bs", "64k"),
            "[global]\nbs=64k\n\n[a]\nrw=read\n"
        );
        // A [global] below a job does not reach it: a new one goes on top.
        let out = set(
            "[a]\nrw=read\n[global]\niodepth=4\n[b]\n",
            None,
            "bs",
            "64k",
        );
        assert_eq!(
            out,
            "[global]\nbs=64k\n\n[a]\nrw=read\n[global]\niodepth=4\n[b]\n"
        );
        assert!(parse(&out).jobs.iter().all(|j| j.bs.read[0].0 == 65536));
    }

    #[test]
    fn an_option_set_in_some_sections_is_left_alone_in_the_others() {
        let text = "[global]\nsize=4g\n[layout]\nrw=write\n[s0]\nruntime=20\n";
        let out = set(text, None, "runtime", "2");
        assert_eq!(
            out,
            "[global]\nsize=4g\n[layout]\nrw=write\n[s0]\nruntime=2\n"
        );
        let jobs = parse(&out).jobs;
        assert_eq!(
            (jobs[0].runtime_ns, jobs[1].runtime_ns),
            (None, Some(2 * SEC))
        );
    }

    #[test]
    fn a_section_target_edits_that_section_only() {
        let text = "[global]\nbs=4k\n[a]\nbs=8k\n[b]\nrw=read\n";
        assert_eq!(
            set(text, Some("a"), "blocksize", "16k"),
            "[global]\nbs=4k\n[a]\nblocksize=16k\n[b]\nrw=read\n"
        );
        assert_eq!(
            set(text, Some("b"), "bs", "16k"),
            "[global]\nbs=4k\n[a]\nbs=8k\n[b]\nbs=16k\nrw=read\n"
        );
        assert_eq!(
            set(text, Some("global"), "iodepth", "8"),
            "[global]\niodepth=8\nbs=4k\n[a]\nbs=8k\n[b]\nrw=read\n"
        );
    }

    #[test]
    fn a_bad_edit_is_one_line_naming_the_file_and_what_is_accepted() {
        let e = set_option("[a]\n[b]\n", "job.fio", Some("c"), "bs", "4k").unwrap_err();
        assert_eq!(
            e.to_string(),
            "job.fio: cannot set 'bs=4k': the job file has no section [c]; accepted: a section of the file: [a], [b]"
        );
        let e = set_option("[a]\n", "job.fio", None, "b s", "4k").unwrap_err();
        assert!(e.to_string().contains("not an option name"), "{e}");
        let e = set_option("[a]\n", "job.fio", None, "bs", "4k\n[x]").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("job.fio: cannot set 'bs=4k\\n[x]': a value is one line"),
            "{e}"
        );
    }

    #[test]
    fn setting_an_option_keeps_the_byte_order_mark_and_ends_lines_with_newlines() {
        let out = set("\u{feff}[a]\r\nbs=4k\r\n; end", None, "bs", "8k");
        assert_eq!(out, "\u{feff}[a]\nbs=8k\n; end\n");
    }

    #[test]
    fn defaults_follow_fio() {
        let f = parse("[a]\n");
        let j = &f.jobs[0];
        assert_eq!(j.name, "a");
        assert_eq!(j.line, 1);
        assert_eq!(j.rw, RwMode::Read);
        assert_eq!(j.rwmixread, 50);
        assert_eq!(j.bs, BlockSizes::uniform(4096));
        assert_eq!((j.iodepth, j.numjobs), (1, 1));
        assert_eq!(j.ioengine, "psync");
        assert!(!j.direct && !j.time_based && !j.norandommap);
        assert_eq!(f.path, "job.fio");
        assert!(f.ignored.is_empty());
    }

    #[test]
    fn global_options_apply_to_later_jobs() {
        let f = parse(
            "; a comment\n# another\n\n[global]\nbs=64k\niodepth=8\n\n[one]\nrw=randread\n\
             [global]\niodepth=32\ndirect=1\n[two]\nbs=8k\n[three]\n",
        );
        let [one, two, three] = &f.jobs[..] else {
            panic!("{:?}", f.jobs)
        };
        assert_eq!(
            (one.bs.read[0].0, one.iodepth, one.direct),
            (65536, 8, false)
        );
        assert_eq!(one.rw, RwMode::RandRead);
        assert_eq!(
            (two.bs.read[0].0, two.iodepth, two.direct),
            (8192, 32, true)
        );
        assert_eq!((three.bs.read[0].0, three.iodepth), (65536, 32));
        assert_eq!(
            three.rw,
            RwMode::Read,
            "job options do not leak to later jobs"
        );
        assert_eq!((one.line, two.line, three.line), (8, 13, 15));
    }

    #[test]
    fn every_modelled_option_is_parsed() {
        let f = parse(
            "[j]\nreadwrite=randrw\nrwmixread=70\nblocksize=16k\niodepth = 4\nnumjobs=3\n\
             size=1g\noffset=1m\nfilesize=2g\nruntime=30\ntime_based\nramp_time=500ms\n\
             io_limit=10m\nnumber_ios=1000\ndirect=true\nfsync=8\nrandseed=1234\n\
             norandommap=1\nfilename=/dev/vdb\nstonewall\nnew_group=0\nioengine=libaio\n\
             name=renamed\ndescription=hello world\n",
        );
        let j = &f.jobs[0];
        assert_eq!(j.name, "renamed");
        assert_eq!((j.rw, j.rwmixread), (RwMode::RandRw, 70));
        assert_eq!(j.bs, BlockSizes::uniform(16384));
        assert_eq!((j.iodepth, j.numjobs), (4, 3));
        assert_eq!(j.size_bytes, Some(1 << 30));
        assert_eq!(j.offset_bytes, 1 << 20);
        assert_eq!(
            j.filesize,
            Some(SizeRange {
                lo_bytes: 2 << 30,
                hi_bytes: 2 << 30
            })
        );
        assert_eq!(j.runtime_ns, Some(30 * SEC));
        assert!(j.time_based);
        assert_eq!(j.ramp_time_ns, 500_000_000);
        assert_eq!(j.io_size_bytes, Some(10 << 20));
        assert_eq!(j.number_ios, Some(1000));
        assert!(j.direct && j.norandommap && j.stonewall && !j.new_group);
        assert_eq!(j.fsync, 8);
        assert_eq!(j.randseed, Some(1234));
        assert_eq!(j.filename.as_deref(), Some("/dev/vdb"));
        assert_eq!(j.ioengine, "libaio");
        assert!(f.ignored.is_empty(), "{:?}", f.ignored);
    }

    #[test]
    fn aliases_and_inverse_options_work() {
        let f = parse("[a]\nbuffered=0\ntimeout=2m\nio_size=4m\nwait_for_previous=1\n");
        let j = &f.jobs[0];
        assert!(j.direct && j.stonewall);
        assert_eq!(j.runtime_ns, Some(120 * SEC));
        assert_eq!(j.io_size_bytes, Some(4 << 20));
        let f = parse("[a]\ndirect=1\nbuffered=1\nrw=readwrite\n");
        assert!(!f.jobs[0].direct);
        assert_eq!(f.jobs[0].rw, RwMode::ReadWrite);
        assert_eq!(f.jobs[0].rw.fio_name(), "rw");
    }

    #[test]
    fn zero_means_unset_for_runtime_io_size_and_number_ios() {
        let j = &parse("[a]\nruntime=0\nio_size=0\nnumber_ios=0\n").jobs[0];
        assert_eq!(
            (j.runtime_ns, j.io_size_bytes, j.number_ios),
            (None, None, None)
        );
    }

    #[test]
    fn rwmixwrite_sets_the_read_share() {
        assert_eq!(
            parse("[a]\nrw=randrw\nrwmixwrite=30\n").jobs[0].rwmixread,
            70
        );
        assert_eq!(
            parse("[a]\nrwmixwrite=30\nrwmixread=10\n").jobs[0].rwmixread,
            10
        );
    }

    #[test]
    fn rw_offset_modifier_is_accepted_and_reported() {
        let f = parse("[a]\nrw=randread:8\n[b]\nrw=write:4k\n");
        assert_eq!(f.jobs[0].rw, RwMode::RandRead);
        assert_eq!(f.jobs[1].rw, RwMode::Write);
        assert_eq!(
            f.ignored,
            vec![IgnoredOption {
                name: "rw:N".to_string(),
                line: 2
            }]
        );
    }

    #[test]
    fn bs_pairs_give_reads_and_writes_their_sizes() {
        let j = &parse("[a]\nbs=4k,64k\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 100)]);
        assert_eq!(j.bs.write, vec![(65536, 100)]);
        let j = &parse("[a]\nbs=,8k,\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 100)]);
        assert_eq!(j.bs.write, vec![(8192, 100)]);
    }

    #[test]
    fn bs_ranges_weigh_the_doublings_equally() {
        let j = &parse("[a]\nbsrange=4k-16k\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 34), (8192, 33), (16384, 33)]);
        assert_eq!(j.bs.write, j.bs.read);
        let j = &parse("[a]\nbs=4k-4k,8k-16k\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 100)]);
        assert_eq!(j.bs.write, vec![(8192, 50), (16384, 50)]);
        assert!(err("[a]\nbs=16k-4k\n").contains("runs backwards"));
    }

    #[test]
    fn bssplit_weights_fill_blanks_and_sort_like_fio() {
        let j = &parse("[a]\nbssplit=4k/10:64k/50:1m/\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 10), (65536, 50), (1 << 20, 40)]);
        assert_eq!(j.bs.write, j.bs.read);
        // Two blanks share the remainder; integer division leftover goes to the largest size.
        let j = &parse("[a]\nbssplit=64k/:4k/:8k/33\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 33), (8192, 33), (65536, 34)]);
        // A list adding up to less than 100 leaves the rest to the largest size (fio's draw).
        let j = &parse("[a]\nbssplit=4k/10:64k/50\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 10), (65536, 90)]);
    }

    #[test]
    fn bssplit_can_differ_per_direction_and_wins_over_bs() {
        let j = &parse("[a]\nbssplit=4k/50:8k/50,16k/100\nbs=128k\n").jobs[0];
        assert_eq!(j.bs.read, vec![(4096, 50), (8192, 50)]);
        assert_eq!(j.bs.write, vec![(16384, 100)]);
        let j = &parse("[a]\nbs=32k\nbssplit=,16k/100\n").jobs[0];
        assert_eq!(j.bs.read, vec![(32768, 100)], "an empty field keeps bs");
        assert_eq!(j.bs.write, vec![(16384, 100)]);
    }

    #[test]
    fn bssplit_over_100_percent_is_rejected() {
        let e = err("[a]\nbssplit=4k/60:8k/60\n");
        assert!(
            e.starts_with("job.fio:2: bssplit: '4k/60:8k/60' is not valid"),
            "{e}"
        );
        assert!(e.contains("add up to 120"), "{e}");
    }

    #[test]
    fn unmodelled_options_are_reported_once_with_their_first_line_and_group_reporting_is_not() {
        let f = parse(
            "[global]\ngroup_reporting\nthread\n[a]\nzero_buffers\ngroup_reporting\n\
             description=x\n[b]\nzero_buffers=1\nlat_percentiles=1\n",
        );
        let names: Vec<(&str, usize)> = f
            .ignored
            .iter()
            .map(|i| (i.name.as_str(), i.line))
            .collect();
        assert_eq!(
            names,
            vec![("thread", 3), ("zero_buffers", 5), ("lat_percentiles", 10)]
        );
    }

    #[test]
    fn group_ids_follow_stonewall_and_new_group() {
        let f = parse("[a]\nstonewall\n[b]\n[c]\nstonewall\n[d]\nnew_group\n[e]\n");
        let ids: Vec<u32> = f.jobs.iter().map(|j| j.group_id).collect();
        assert_eq!(ids, vec![0, 0, 1, 2, 2]);
    }

    #[test]
    fn comments_crlf_and_blanks_are_tolerated() {
        let f = parse("\u{feff}[a] ; job a\r\nrw = randwrite # why\r\n\r\nfilename=/tmp/x#1\r\n");
        assert_eq!(f.jobs[0].rw, RwMode::RandWrite);
        assert_eq!(f.jobs[0].filename.as_deref(), Some("/tmp/x#1"));
    }

    #[test]
    fn a_bad_rw_names_file_line_option_and_accepted_values() {
        let e = err("[global]\nbs=4k\n\n\n\n[j]\nrw=randon\n");
        assert_eq!(
            e,
            "job.fio:7: rw: 'randon' is not valid; accepted: read, write, trim, randread, randwrite, randtrim, rw, readwrite, randrw, trimwrite, randtrimwrite"
        );
    }

    #[test]
    fn bad_values_name_file_line_and_accepted_values() {
        let cases = [
            (
                "[a]\niodepth=0\n",
                "job.fio:2: iodepth: '0' is not valid; accepted: an integer from 1",
            ),
            (
                "[a]\nnumjobs=-1\n",
                "job.fio:2: numjobs: '-1' is not valid; accepted: an integer from 1",
            ),
            (
                "[a]\nrwmixread=101\n",
                "job.fio:2: rwmixread: '101' is not valid; accepted: an integer from 0 to 100",
            ),
            (
                "[a]\nrwmixwrite=x\n",
                "job.fio:2: rwmixwrite: 'x' is not valid; accepted: an integer from 0 to 100",
            ),
            (
                "[a]\ndirect=yes please\n",
                "job.fio:2: direct: 'yes please' is not valid; accepted: 1, 0, true, false",
            ),
            (
                "[a]\nsize=12q\n",
                "job.fio:2: size: '12q' is not valid; accepted: a size like 4k",
            ),
            (
                "[a]\nbs=0\n",
                "job.fio:2: bs: '0' is not valid; accepted: a block size (4k)",
            ),
            (
                "[a]\nbs\n",
                "job.fio:2: bs: '' is not valid; accepted: a block size",
            ),
            (
                "[a]\nruntime=3 weeks\n",
                "job.fio:2: runtime: '3 weeks' is not valid; accepted: a duration",
            ),
            (
                "[a]\nfsync=-2\n",
                "job.fio:2: fsync: '-2' is not valid; accepted: a non-negative integer",
            ),
            (
                "[a]\nrandseed=0x10\n",
                "job.fio:2: randseed: '0x10' is not valid; accepted: a non-negative integer",
            ),
            (
                "[a]\nfilename=\n",
                "job.fio:2: filename: '' is not valid; accepted: a file or device path",
            ),
            (
                "[a]\nrw\n",
                "job.fio:2: rw: '' is not valid; accepted: read, write",
            ),
            (
                "[a]\nbssplit=4k/x\n",
                "job.fio:2: bssplit: '4k/x' is not valid; accepted: size/percent entries",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.starts_with(want), "got  {e}\nwant {want}...");
        }
    }

    #[test]
    fn file_options_are_parsed_with_fios_defaults() {
        let j = &parse("[a]\n").jobs[0];
        assert_eq!((j.nrfiles, j.openfiles, j.fdatasync), (1, 0, 0));
        assert_eq!(j.file_service, FileService::default());
        assert_eq!(j.fallocate, Fallocate::Native);
        assert!(j.create_fsync && !j.sync && !j.create_on_open && !j.unlink && !j.overwrite);
        assert!(j.invalidate);
        let f = parse(
            "[a]\nnr_files=8\nopenfiles=2\nfile_service_type=random:4\nfallocate=none\n\
             sync=1\nfdatasync=16\ncreate_fsync=0\ncreate_on_open\nunlink=1\noverwrite=1\n\
             invalidate=0\n\
             directory=/mnt/a:/mnt/b\nfilesize=1m-4m\n",
        );
        let j = &f.jobs[0];
        assert_eq!((j.nrfiles, j.openfiles, j.fdatasync), (8, 2, 16));
        assert_eq!(
            j.file_service,
            FileService {
                kind: FileServiceKind::Random,
                nr: 4
            }
        );
        assert_eq!(j.fallocate, Fallocate::None);
        assert!(j.sync && !j.create_fsync && j.create_on_open && j.unlink && j.overwrite);
        assert!(!j.invalidate);
        assert_eq!(j.directory.as_deref(), Some("/mnt/a:/mnt/b"));
        assert_eq!(
            j.filesize,
            Some(SizeRange {
                lo_bytes: 1 << 20,
                hi_bytes: 4 << 20
            })
        );
        assert!(f.ignored.is_empty(), "{:?}", f.ignored);
        for (text, sync, fallocate) in [
            ("sync=sync\nfallocate=posix\n", true, Fallocate::Posix),
            ("sync=none\nfallocate=1\n", false, Fallocate::Posix),
            ("sync=0\nfallocate=truncate\n", false, Fallocate::Truncate),
            ("sync\nfallocate=0\n", true, Fallocate::None),
        ] {
            let j = &parse(&format!("[a]\n{text}")).jobs[0];
            assert_eq!((j.sync, j.fallocate), (sync, fallocate), "{text}");
        }
    }

    #[test]
    fn bad_or_unmodelled_file_options_are_one_line_errors_with_the_accepted_values() {
        assert_eq!(
            err("[a]\nfile_service_type=roundrobbin\n"),
            "job.fio:2: file_service_type: 'roundrobbin' is not valid; accepted: roundrobin, sequential, random, each optionally with :N (N >= 1 I/Os per file)"
        );
        assert!(err("[a]\nfile_service_type=zipf:1.2\n")
            .contains("non-uniform file service is not modelled by vmio; accepted: roundrobin"));
        assert!(err("[a]\nfile_service_type=random:0\n").contains("accepted: roundrobin"));
        assert_eq!(
            err("[a]\nnrfiles=0\n"),
            "job.fio:2: nrfiles: '0' is not valid; accepted: an integer from 1 to 4294967295"
        );
        assert!(err("[a]\nsync=dsync\n").contains("O_DSYNC is not modelled"));
        assert!(err("[a]\nsync=2\n").ends_with("accepted: none, 0, sync, 1"));
        assert!(err("[a]\nfallocate=keep\n").contains("FALLOC_FL_KEEP_SIZE"));
        assert!(err("[a]\nfallocate=yes\n").ends_with(Fallocate::ACCEPTED));
        assert!(err("[a]\nfilesize=4m-1m\n").contains("lo <= hi"));
        assert!(err("[a]\nfilesize=0\n").contains("sizes > 0"));
    }

    #[test]
    fn percent_sizes_and_offsets_are_kept_for_the_simulator_and_bytes_clear_them() {
        let j = &parse("[a]\nsize=50%\noffset=10%\n").jobs[0];
        assert_eq!((j.size_percent, j.offset_percent), (Some(50), Some(10)));
        assert_eq!((j.size_bytes, j.offset_bytes), (None, 0));
        let j = &parse("[global]\nsize=50%\n[a]\nsize=1m\n").jobs[0];
        assert_eq!((j.size_percent, j.size_bytes), (None, Some(1 << 20)));
        assert!(err("[a]\nsize=150%\n").contains("a percentage 0% to 100%"));
        assert!(err("[a]\nio_size=50%\n").contains("io_size is not modelled"));
    }

    #[test]
    fn a_size_in_zones_is_that_many_zone_sizes_and_needs_a_zone_size() {
        let j = &parse("[a]\nsize=8z\noffset=2z\nzonemode=strided\nzonesize=1m\n").jobs[0];
        assert_eq!((j.size_bytes, j.offset_bytes), (Some(8 << 20), 2 << 20));
        let e = err("[a]\nsize=8z\n");
        assert!(
            e.starts_with("job.fio:2: size: '8z': a size in zones needs a zone size"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn kb_base_follows_fio_inverting_iec_prefixes_under_the_default() {
        let bs = |text: &str| parse(text).jobs[0].bs.read[0].0;
        assert_eq!(bs("[a]\nbs=4KiB\n"), 4000);
        assert_eq!(bs("[a]\nbs=4k\n"), 4096);
        assert_eq!(bs("[a]\nbs=4kB\n"), 4096);
        // kb_base applies to the whole section wherever it stands, and from [global].
        assert_eq!(bs("[a]\nbs=4k\nkb_base=1000\n"), 4000);
        assert_eq!(bs("[a]\nbs=4KiB\nkb_base=1000\n"), 4096);
        assert_eq!(bs("[global]\nkb_base=1000\n[a]\nbs=1m\n"), 1_000_000);
        let j = &parse("[a]\nkb_base=1000\nsize=1m\nfilesize=2k\n").jobs[0];
        assert_eq!(
            (j.size_bytes, j.filesize.unwrap().lo_bytes),
            (Some(1_000_000), 2000)
        );
        assert!(err("[a]\nkb_base=1001\n").contains("accepted: 1024, 1000"));
    }

    fn with(text: &str, files: &[(&str, &str)]) -> Result<JobFile, String> {
        let files: Vec<(String, String)> = files
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let load = move |path: &str| {
            files
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, t)| t.clone())
                .ok_or_else(|| "no such file".to_string())
        };
        let env = |name: &str| (name == "FIO_BS").then(|| "16k".to_string());
        let ctx = ReadContext {
            env: Some(&env),
            load: Some(&load),
            host: Some(Host {
                ncpus: 6,
                pagesize: 4096,
                mb_memory: 1024,
            }),
        };
        parse_job_file_with(text, "/jobs/job.fio", &ctx).map_err(|e| e.to_string())
    }

    #[test]
    fn an_include_adds_its_options_to_the_section_from_the_including_files_directory() {
        let f = with(
            "[a]\nrw=write\ninclude common.fio\niodepth=4\n",
            &[
                ("/jobs/common.fio", "bs=64k\ninclude /etc/deep.fio\n"),
                ("/etc/deep.fio", "numjobs=2\n"),
            ],
        )
        .unwrap();
        let j = &f.jobs[0];
        assert_eq!(
            (j.rw, j.bs.read[0].0, j.numjobs, j.iodepth),
            (RwMode::Write, 65536, 2, 4)
        );
    }

    #[test]
    fn a_bad_include_is_one_line_naming_the_file_and_the_reason() {
        let e = with(
            "[a]\ninclude self.fio\n",
            &[("/jobs/self.fio", "include self.fio\n")],
        )
        .unwrap_err();
        assert!(
            e.starts_with("/jobs/self.fio:1: include self.fio: it includes itself"),
            "{e}"
        );
        let e = with("[a]\ninclude s.fio\n", &[("/jobs/s.fio", "[b]\n")]).unwrap_err();
        assert!(e.contains("cannot open a section"), "{e}");
        let e = with("[a]\ninclude gone.fio\n", &[]).unwrap_err();
        assert!(
            e.starts_with("/jobs/job.fio:2: include gone.fio: no such file"),
            "{e}"
        );
        let e = with("include x.fio\n[a]\n", &[]).unwrap_err();
        assert!(
            e.contains("option 'include' appears before any section"),
            "{e}"
        );
        let e = err("[a]\ninclude other.fio\n");
        assert!(e.contains("no file access"), "{e}");
        assert!(e.lines().count() == 1);
    }

    #[test]
    fn variables_and_keywords_are_substituted_as_fio_does() {
        let f = with(
            "[a]\nbs=${FIO_BS}\nnumjobs=$ncpus/2\ndirectory=/mnt${UNSET}\nfilename_format=f.$jobnum\n",
            &[],
        )
        .unwrap();
        let j = &f.jobs[0];
        assert_eq!((j.bs.read[0].0, j.numjobs), (16384, 3));
        assert_eq!(j.directory.as_deref(), Some("/mnt"));
        let e = err("[a]\nnumjobs=$ncpus\n");
        assert!(
            e.starts_with("job.fio:2: 'numjobs=$ncpus': $ncpus needs the simulated machine"),
            "{e}"
        );
    }

    #[test]
    fn structural_errors_name_file_and_line() {
        assert_eq!(
            err("bs=4k\n[a]\n"),
            "job.fio:1: option 'bs' appears before any section; accepted: options after a [global] or [jobname] header"
        );
        let e = err("[a]\nthis is not an option\n");
        assert!(e.starts_with("job.fio:2: 'this is not an option' is not a section header, an option or a comment; accepted: [jobname]"), "{e}");
        assert!(err("[a\n").starts_with("job.fio:1: '[a' is not a section header"));
        assert!(err("[a]\n[]\n").starts_with("job.fio:2: '[]' is not a section header"));
        assert!(err("[a]\n=4k\n").starts_with("job.fio:2: '=4k'"));
    }

    #[test]
    fn a_file_without_jobs_is_an_error_naming_the_file() {
        for text in ["", "\n# nothing\n", "[global]\nbs=4k\n"] {
            assert_eq!(
                err(text),
                "job.fio: no job section; accepted: at least one [jobname] section besides [global]"
            );
        }
    }

    #[test]
    fn numjobs_above_fios_limit_is_refused_naming_the_job_and_the_limit() {
        assert_eq!(parse("[a]\nnumjobs=4096\n").jobs[0].numjobs, 4096);
        let e = err("[global]\nbs=4k\n[big]\nnumjobs=4097\n");
        assert_eq!(
            e,
            "job.fio:3: job 'big': numjobs=4097, above fio's limit of 4096 jobs (FIO_MAX_JOBS); accepted: numjobs from 1 to 4096, at most 4096 jobs in all"
        );
        let e = err("[a]\nnumjobs=4000\n[b]\nnumjobs=97\n");
        assert!(
            e.starts_with("job.fio:3: job 'b': numjobs=97 brings the file to 4097 jobs, above fio's limit of 4096"),
            "{e}"
        );
        assert!(err("[a]\nnumjobs=4294967295\n").contains("limit of 4096"));
    }

    #[test]
    fn long_offending_text_is_shortened_in_errors() {
        let long = "x".repeat(10_000);
        let e = err(&format!("[a]\nrw={long}\n"));
        assert!(e.len() < 400, "{}", e.len());
        assert!(e.contains("..."));
    }

    #[test]
    fn garbage_input_never_panics() {
        let mut rng = crate::rng::Rng::new(99);
        let pieces = [
            "[",
            "]",
            "=",
            "global",
            "rw",
            "bs",
            "bssplit",
            "4k",
            "/",
            ":",
            ",",
            "-",
            "%",
            "$",
            "#",
            ";",
            " ",
            "\n",
            "\r\n",
            "1",
            "0",
            "99999999999999999999999",
            "k",
            "include",
            "time_based",
            "é",
            "\u{feff}",
            "size",
            "rwmixread",
            "randrw",
            "\0",
            "\t",
            "1m/",
            "16k-4k",
        ];
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..rng.below(40) {
                text.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
            }
            let _ = parse_job_file(&text, "fuzz.fio");
            let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next_u64() as u8).collect();
            let _ = parse_job_file(&String::from_utf8_lossy(&bytes), "fuzz.fio");
        }
    }

    #[test]
    fn trace_replay_and_filebench_options_are_parsed_and_checked() {
        let f = parse(
            "[t]\nread_iolog=msn.csv\niolog_format=spc\nreplay_time_scale=200\nloops=3\nreplay_no_stall=1\n\
             [fb]\nfilebench=varmail\n",
        );
        let t = &f.jobs[0];
        assert_eq!(t.read_iolog.as_deref(), Some("msn.csv"));
        assert_eq!(t.iolog_format.as_deref(), Some("spc"));
        assert_eq!(
            (t.replay_time_scale, t.loops, t.replay_no_stall),
            (200, 3, true)
        );
        assert_eq!(f.jobs[1].filebench.as_deref(), Some("varmail"));
        let e = parse_job_file("[t]\niolog_format=csv\n", "j.fio")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("j.fio:2") && e.contains("msr, spc, blkparse, fio"),
            "{e}"
        );
        let e = parse_job_file("[t]\nloops=0\n", "j.fio")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("j.fio:2") && e.contains("an integer >= 1"),
            "{e}"
        );
        let e = parse_job_file("[t]\nfilebench=webproxy\n", "j.fio")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fileserver, varmail, webserver, oltp"), "{e}");
        let f = parse("[a]\napp=SQLite-WAL\n");
        assert_eq!(f.jobs[0].app.as_deref(), Some("SQLite-WAL"));
        let e = parse_job_file("[t]\napp=mysql\n", "j.fio")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("j.fio:2") && e.contains("linkbench, sqlite-delete (sqlite), "),
            "{e}"
        );
    }
}
