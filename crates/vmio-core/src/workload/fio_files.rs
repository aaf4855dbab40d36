//! The files of a fio job on a guest filesystem: their names, sizes and layout (what fio's
//! layout phase leaves on disk before the run), and which file each operation goes to, with
//! the opens, closes, fsyncs and unlinks fio makes around the I/O. The offsets inside a file
//! come from the same generator as on a disk ([`super::fio_job`]), one region per file.
//!
//! Sources (fio, `axboe/fio`): `init.c` (`add_job`, `make_filename`: `jobname.clone.filenum`),
//! `filesetup.c` (`add_file` and `set_name_idx`: `directory` prefix, clone `c` uses entry
//! `c % n` of a `:` list; `setup_files`: sizes, offsets, "Laying out IO file"; `extend_file`
//! and `fallocate_file`: layout; `close_and_free_files`: unlink then close), `options.c`
//! (`str_filename_cb`: `filename` lists; defaults of `nrfiles`, `openfiles`, `fallocate`,
//! `create_fsync`, `create_on_open`, `unlink`), `io_u.c` (`get_rw_ddir`: fsync and fdatasync
//! after every N-th write; `__get_next_file`, `get_next_file_rr`, `get_next_file_rand`,
//! `set_io_u_file`: file service, open limit, a finished file closed), `backend.c` (`do_io`:
//! the job stops at its bytes before a pending sync, then reaps what is in flight and fsyncs
//! every file with `end_fsync` when it writes and did not just sync).
//!
//! ```text
//! names:  filename=a:b  -> dir/a, dir/b (every clone the same files)
//!         else          -> dir/<job>.<clone>.<i> for i < nrfiles
//!         dir = directory entry (clone % entries) | the mount point
//! sizes:  filesize=lo[-hi] -> file = lo + uniform(0 .. hi - lo) rounded down to the smallest
//!                              bs (fio's get_rand_file_size), io = file - offset
//!         else (size)      -> io = size / n, + smallest bs for the first
//!                              (size - n * (size / n)) / bs files, file = offset + io
//!         job bytes = min(size, sum of io)  (io_size replaces it when set)
//! layout: create_on_open           -> does not exist (Create at first open)
//!         reads, or overwrite=1    -> Written (fio writes it, then fsyncs: create_fsync)
//!         writes only: native/posix -> Fallocated; truncate -> Sparse; none -> empty (size 0)
//! pick (one per I/O and per fsync, fio's get_next_file):
//!   the current file again while it is open and unfinished and (sequential, or nr - 1
//!   picks of it are left); else roundrobin/sequential: the next file in order, random: a
//!   uniform draw, skipping finished files and, when openfiles are open, closed ones;
//!   a file picked closed is opened (Create if it does not exist yet); a file found at the end
//!   of its pass is closed and finished; all finished -> a new pass over every file
//!   (time_based with random offsets or a single file: files wrap in place, never finish)
//!   in a mixed job the first direction to reach the end of a file ends its pass (fio notices
//!   it when that direction is next drawn for the file)
//! fsync=N / fdatasync=N: after the job's N-th, 2N-th ... write, the next pick is fsynced
//! end:    Drain; end_fsync (job writes, last op not a sync): per file [Open] Fsync Drain [Close];
//!         per file: unlink -> Delete, open -> Close; Done
//! ```
//!
//! `filename_format` names a job's own files as fio's `make_filename` does ([`file_name`]).
//! Not modelled: `unique_filename`, `file_append`, `unlink_each_loop`,
//! `fsync_on_close`, `end_syncfs`, non-uniform file service (refused by the parser) and the
//! wait fio makes for a completion when its open limit refuses a pick (fio's EBUSY reap).

use super::region::Region;
use super::{FileDecl, FileId, FileLayout, FileOp, IoFlags, Step, WorkloadError};
use crate::fio::{Fallocate, FileServiceKind, JobSpec, SizeRange};
use crate::rng::Rng;
use crate::units::quote;
use std::collections::VecDeque;

/// Most files one job clone may have: a million (fio sets no limit; each file costs vmio a
/// declaration and the guest an inode, so a mistyped `nrfiles=4294967295` is refused rather
/// than allocated).
pub const MAX_FILES_PER_CLONE: u32 = 1 << 20;

/// One size of `range`, fio's `get_rand_file_size`: `lo + uniform(0 .. hi - lo)`, rounded
/// down to a multiple of `min_bs`; `lo` itself for a single size.
pub(super) fn draw_size(range: SizeRange, min_bs: u64, rng: &mut Rng) -> u64 {
    if range.hi_bytes <= range.lo_bytes {
        return range.lo_bytes;
    }
    let size = range.lo_bytes + rng.below(range.hi_bytes - range.lo_bytes);
    size - size % min_bs.max(1)
}

/// The entries of a fio list option (`filename`, `directory`): split at `:`, where `\:` is a
/// colon inside an entry (fio's `get_next_str`); empty entries dropped.
fn entries(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&':') => {
                cur.push(':');
                chars.next();
            }
            ':' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.retain(|e| !e.trim().is_empty());
    out.iter_mut().for_each(|e| *e = e.trim().to_string());
    out
}

/// `name` in directory `dir`: fio prefixes `directory/` to every name (`add_file`); without
/// a `directory`, an absolute name stands as it is and a relative one is under the mount.
fn join(dir: &str, name: &str, explicit_dir: bool) -> String {
    if !explicit_dir && name.starts_with('/') {
        return name.to_string();
    }
    format!(
        "{}/{}",
        dir.trim_end_matches('/'),
        name.trim_start_matches('/')
    )
}

/// The paths of clone `clone`'s files (see the module doc).
pub(super) fn file_paths(spec: &JobSpec, clone: u32, mount: &str) -> Vec<String> {
    let dirs = spec
        .directory
        .as_deref()
        .map(entries)
        .filter(|d| !d.is_empty());
    let explicit = dirs.is_some();
    let dirs = dirs.unwrap_or_else(|| vec![mount.to_string()]);
    match spec.filename.as_deref().map(entries) {
        Some(names) if !names.is_empty() => {
            names.iter().map(|n| join(&dirs[0], n, explicit)).collect()
        }
        _ => {
            let dir = &dirs[clone as usize % dirs.len()];
            (0..spec.nrfiles)
                .map(|i| join(dir, &file_name(spec, clone, i), true))
                .collect()
        }
    }
}

/// The name of file `filenum` of clone `clone` (fio's `make_filename`, init.c): the job's
/// `filename_format` with each of `$jobname`, `$jobnum`, `$filenum` and `$clientuid` replaced
/// wherever it appears, in any case (fio looks them up with `strcasestr`); `$clientuid` is the
/// client's address in fio's client/server mode and empty in a local run, as here. Without a
/// format, fio's default `$jobname.$jobnum.$filenum`.
fn file_name(spec: &JobSpec, clone: u32, filenum: u32) -> String {
    let Some(format) = spec.filename_format.as_deref() else {
        return format!("{}.{clone}.{filenum}", spec.name);
    };
    let values = [
        ("$jobname", spec.name.clone()),
        ("$jobnum", clone.to_string()),
        ("$filenum", filenum.to_string()),
        ("$clientuid", String::new()),
    ];
    let mut name = format.to_string();
    for (keyword, value) in values {
        // Replace left to right; a value is never searched again for the same keyword.
        let mut from = 0;
        while let Some(at) = name[from..].to_ascii_lowercase().find(keyword) {
            let at = from + at;
            name.replace_range(at..at + keyword.len(), &value);
            from = at + value.len();
        }
    }
    name
}

/// What the generator needs of a job's files: the declarations, each file's I/O region
/// `(offset, bytes)` and the job's bytes per loop (fio's `o->size` after `setup_files`).
pub(super) struct Plan {
    pub files: FileJob,
    pub regions: Vec<(u64, u64)>,
    pub bytes: u64,
}

/// The files of clone `clone` of `spec` on a filesystem of `fs_bytes` mounted at `mount`;
/// `min_bs`/`max_bs`: the smallest and largest block size the job uses.
pub(super) fn plan(
    spec: &JobSpec,
    clone: u32,
    fs_bytes: u64,
    mount: &str,
    (min_bs, max_bs): (u64, u64),
    sizes: &mut Rng,
) -> Result<Plan, WorkloadError> {
    let (job, line) = (quote(&spec.name), spec.line);
    if spec.filename.is_none() && spec.nrfiles > MAX_FILES_PER_CLONE {
        return Err(WorkloadError::TooManyFiles {
            job,
            line,
            files: spec.nrfiles,
            limit: MAX_FILES_PER_CLONE,
        });
    }
    let paths = file_paths(spec, clone, mount);
    if paths.is_empty() {
        return Err(WorkloadError::NoFiles { job, line });
    }
    let n = paths.len() as u64;
    let offset = spec.offset_bytes;
    let mut regions = Vec::with_capacity(paths.len());
    let mut file_bytes = Vec::with_capacity(paths.len());
    match (spec.filesize, spec.size_bytes) {
        (Some(range), _) => {
            for path in &paths {
                let size = draw_size(range, min_bs, sizes);
                if offset >= size {
                    return Err(WorkloadError::OffsetBeyondFile {
                        job,
                        line,
                        path: quote(path),
                        offset_bytes: offset,
                        file_bytes: size,
                    });
                }
                regions.push((offset, size - offset));
                file_bytes.push(size);
            }
        }
        (None, Some(size)) => {
            let each = size / n;
            let extra = (size - each * n) / min_bs.max(1);
            for i in 0..n {
                let io = each + if i < extra { min_bs } else { 0 };
                regions.push((offset, io));
                file_bytes.push(offset.saturating_add(io));
            }
        }
        (None, None) => return Err(WorkloadError::NeedsSize { job, line }),
    }
    for (path, &bytes) in paths.iter().zip(&file_bytes) {
        if bytes > fs_bytes {
            return Err(WorkloadError::FileLargerThanFilesystem {
                job,
                line,
                path: quote(path),
                file_bytes: bytes,
                fs_bytes,
            });
        }
    }
    let smallest = regions.iter().map(|r| r.1).min().unwrap_or(0);
    if max_bs > smallest || smallest == 0 {
        return Err(WorkloadError::BlockLargerThanRegion {
            job,
            line,
            bs_bytes: max_bs,
            region_bytes: smallest,
        });
    }
    let total = regions.iter().fold(0u64, |sum, r| sum.saturating_add(r.1));
    let bytes = spec.size_bytes.map_or(total, |s| s.min(total));

    let mut dirs: Vec<&str> = Vec::new();
    let decls = paths
        .iter()
        .zip(&file_bytes)
        .map(|(path, &size)| {
            let parent = path.rsplit_once('/').map_or("", |(d, _)| d);
            let dir = dirs.iter().position(|&d| d == parent).unwrap_or_else(|| {
                dirs.push(parent);
                dirs.len() - 1
            }) as u32;
            let (exists, size_bytes, layout) = if spec.create_on_open {
                (false, 0, FileLayout::Written)
            } else if spec.rw.reads() || spec.overwrite {
                (true, size, FileLayout::Written)
            } else {
                match spec.fallocate {
                    Fallocate::Native | Fallocate::Posix => (true, size, FileLayout::Fallocated),
                    Fallocate::Truncate => (true, size, FileLayout::Sparse),
                    Fallocate::None => (true, 0, FileLayout::Sparse),
                }
            };
            FileDecl {
                path: path.clone(),
                exists,
                size_bytes,
                layout,
                dir,
            }
        })
        .collect::<Vec<_>>();
    let count = decls.len() as u32;
    let open_limit = match spec.openfiles {
        0 => count,
        k => k.min(count),
    };
    // fio resets a file in place in a time_based run with random offsets
    // (get_next_rand_block) or a single file (get_next_seq_offset).
    let wrap_in_place = spec.time_based && (spec.rw.is_random() || count == 1);
    let files = FileJob {
        state: vec![FileState::default(); decls.len()],
        exists: decls.iter().map(|d| d.exists).collect(),
        decls,
        kind: spec.file_service.kind,
        nr: spec.file_service.nr.max(1),
        open_limit,
        open_count: 0,
        done_count: 0,
        next_rr: 0,
        current: None,
        left: 0,
        pick: Rng::new(sizes.next_u64()),
        queue: VecDeque::new(),
        wrap_in_place,
        flags: IoFlags {
            direct: spec.direct,
            sync: spec.sync,
        },
        unlink: spec.unlink,
        end_fsync: spec.end_fsync && spec.rw.writes(),
        last_was_sync: false,
        finished: false,
    };
    Ok(Plan {
        files,
        regions,
        bytes,
    })
}

#[derive(Clone, Copy, Debug, Default)]
struct FileState {
    open: bool,
    /// Finished for this pass (found at the end of its region, then closed).
    done: bool,
}

/// The file side of a fio job on a filesystem: its files and the state of fio's file service.
#[derive(Clone, Debug)]
pub(super) struct FileJob {
    decls: Vec<FileDecl>,
    state: Vec<FileState>,
    /// Whether each file exists now (`create_on_open` files once created).
    exists: Vec<bool>,
    kind: FileServiceKind,
    nr: u32,
    open_limit: u32,
    open_count: u32,
    done_count: u32,
    next_rr: usize,
    current: Option<usize>,
    /// Picks of `current` left before the next choice.
    left: u32,
    pick: Rng,
    /// Steps to hand out before anything else (opens before an I/O, the end sequence).
    queue: VecDeque<Step>,
    wrap_in_place: bool,
    pub(super) flags: IoFlags,
    unlink: bool,
    end_fsync: bool,
    last_was_sync: bool,
    finished: bool,
}

fn file_step(op: FileOp) -> Step {
    Step::File { op, tag: 0 }
}

impl FileJob {
    pub(super) fn decls(&self) -> &[FileDecl] {
        &self.decls
    }

    /// The next queued step, or `Done` once the end sequence was handed out.
    pub(super) fn queued(&mut self) -> Option<Step> {
        match self.queue.pop_front() {
            Some(s) => Some(s),
            None if self.finished => Some(Step::Done),
            None => None,
        }
    }

    /// Queue `op` on the file `pick` chose; returns the first queued step.
    pub(super) fn issue(&mut self, op: FileOp) -> Step {
        self.last_was_sync = matches!(op, FileOp::Fsync { .. });
        self.queue.push_back(file_step(op));
        self.queue.pop_front().unwrap_or(Step::Done)
    }

    /// The file of the next operation (fio's `__get_next_file`); opens and closes it needs
    /// are queued. A `sync` takes no offset, so a file at the end of its pass still takes it
    /// (fio decides the sync in `get_rw_ddir` before `fill_io_u` finds the file done).
    pub(super) fn pick(&mut self, regions: &mut [Region], sync: bool) -> FileId {
        if let Some(c) = self.current {
            let keep = self.kind == FileServiceKind::Sequential || self.left > 0;
            if keep && self.usable(c, regions, sync) {
                if self.kind != FileServiceKind::Sequential {
                    self.left -= 1;
                }
                return c as FileId;
            }
        }
        let f = self.choose(regions, sync);
        self.current = Some(f);
        self.left = self.nr - 1;
        f as FileId
    }

    /// Whether open file `f` can take an I/O; one at the end of its pass is closed and
    /// finished instead (fio's `set_io_u_file`).
    fn usable(&mut self, f: usize, regions: &[Region], sync: bool) -> bool {
        if !self.state[f].open || self.state[f].done {
            return false;
        }
        if !sync && !self.wrap_in_place && regions[f].exhausted() {
            self.queue
                .push_back(file_step(FileOp::Close { file: f as FileId }));
            self.state[f] = FileState {
                open: false,
                done: true,
            };
            self.open_count -= 1;
            self.done_count += 1;
            return false;
        }
        true
    }

    /// A new choice of file (fio's `get_next_file_rr` / `get_next_file_rand`).
    fn choose(&mut self, regions: &mut [Region], sync: bool) -> usize {
        let n = self.state.len();
        loop {
            if self.done_count as usize == n {
                for (s, r) in self.state.iter_mut().zip(regions.iter_mut()) {
                    s.done = false;
                    r.reset();
                }
                self.done_count = 0;
            }
            let f = if self.kind == FileServiceKind::Random {
                self.pick.below(n as u64) as usize
            } else {
                let f = self.next_rr;
                self.next_rr = (f + 1) % n;
                f
            };
            if self.state[f].done {
                continue;
            }
            if self.state[f].open {
                if self.usable(f, regions, sync) {
                    return f;
                }
                continue;
            }
            if self.open_count < self.open_limit {
                self.open(f);
                return f;
            }
        }
    }

    fn open(&mut self, f: usize) {
        let file = f as FileId;
        let op = if self.exists[f] {
            FileOp::Open { file }
        } else {
            self.exists[f] = true;
            FileOp::Create { file }
        };
        self.queue.push_back(file_step(op));
        self.state[f].open = true;
        self.open_count += 1;
    }

    /// Queue the end of the job (see the module doc) and return its first step.
    pub(super) fn end(&mut self) -> Step {
        self.queue.push_back(Step::Drain);
        if self.end_fsync && !self.last_was_sync {
            for f in 0..self.state.len() {
                let file = f as FileId;
                let was_open = self.state[f].open;
                if !was_open {
                    self.open(f);
                }
                self.queue.push_back(file_step(FileOp::Fsync {
                    file,
                    datasync: false,
                }));
                self.queue.push_back(Step::Drain);
                if !was_open {
                    self.queue.push_back(file_step(FileOp::Close { file }));
                    self.state[f].open = false;
                    self.open_count -= 1;
                }
            }
        }
        for f in 0..self.state.len() {
            let file = f as FileId;
            if self.unlink && self.exists[f] {
                self.queue.push_back(file_step(FileOp::Delete { file }));
            }
            if self.state[f].open {
                self.queue.push_back(file_step(FileOp::Close { file }));
                self.state[f].open = false;
            }
        }
        self.finished = true;
        self.queued().unwrap_or(Step::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fio_job::tests::job;
    use super::super::{workloads, Generator, JobWorkload, Target, Workload};
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1 << 20;
    const FS: u64 = 1 << 34;

    fn clones(text: &str) -> Vec<JobWorkload> {
        let target = Target::Filesystem {
            bytes: FS,
            mount: "/mnt",
        };
        workloads(&job(text), target, None, 7, &mut Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn first(text: &str) -> Generator {
        Generator::on_filesystem(&job(text), 0, FS, "/mnt", 7).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The steps until Done, shortest form: O open, N create, X close, U unlink, R/W read or
    /// write (file@KiB), F fsync, D fdatasync, | drain.
    fn trail(w: &mut impl Workload, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        while out.len() < max {
            let s = match w.next(0) {
                Step::Done => break,
                Step::Drain => "|".to_string(),
                Step::File { op, tag: 0 } => match op {
                    FileOp::Open { file } => format!("O{file}"),
                    FileOp::Create { file } => format!("N{file}"),
                    FileOp::Close { file } => format!("X{file}"),
                    FileOp::Delete { file } => format!("U{file}"),
                    FileOp::Read { file, offset, .. } => format!("R{file}@{}", offset / KIB),
                    FileOp::Write { file, offset, .. } => format!("W{file}@{}", offset / KIB),
                    FileOp::Fsync { file, datasync } => {
                        format!("{}{file}", if datasync { 'D' } else { 'F' })
                    }
                    op => panic!("a fio job never asks for {op:?}"),
                },
                s => panic!("a fio job on files never asks for {s:?}"),
            };
            out.push(s);
        }
        out
    }

    /// The whole trail of the first clone of `text`.
    fn run(text: &str) -> Vec<String> {
        trail(&mut first(text), 100)
    }

    fn paths(w: &impl Workload) -> Vec<&str> {
        w.files().iter().map(|d| d.path.as_str()).collect()
    }

    #[test]
    fn numjobs_2_nrfiles_3_names_files_jobname_clone_filenum_under_the_mount() {
        let w = clones("numjobs=2\nnrfiles=3\nsize=3m\n");
        assert_eq!(
            paths(&w[0]),
            ["/mnt/j.0.0", "/mnt/j.0.1", "/mnt/j.0.2"],
            "clone 0"
        );
        assert_eq!(paths(&w[1]), ["/mnt/j.1.0", "/mnt/j.1.1", "/mnt/j.1.2"]);
        assert!(w[0].files().iter().all(|d| d.dir == 0));
    }

    #[test]
    fn filename_format_replaces_jobname_jobnum_and_filenum_in_any_case_as_fio_does() {
        let w = clones("numjobs=2\nnrfiles=2\nsize=2m\nfilename_format=data.$JOBNUM.$filenum\n");
        assert_eq!(paths(&w[0]), ["/mnt/data.0.0", "/mnt/data.0.1"]);
        assert_eq!(paths(&w[1]), ["/mnt/data.1.0", "/mnt/data.1.1"]);
        // Every occurrence, the job's name too; $clientuid is empty outside client/server.
        let w = clones("size=1m\nfilename_format=$jobname-$jobname.$clientuid$jobnum\n");
        assert_eq!(paths(&w[0]), ["/mnt/j-j.0"]);
    }

    #[test]
    fn clones_take_directories_in_turn_and_share_the_files_a_filename_lists() {
        let w = clones("numjobs=3\nnrfiles=1\nsize=1m\ndirectory=/a:/b/\n");
        let all: Vec<Vec<&str>> = w.iter().map(|w| paths(w)).collect();
        assert_eq!(all, [["/a/j.0.0"], ["/b/j.1.0"], ["/a/j.2.0"]]);
        let w = clones("numjobs=2\nsize=2m\nfilename=data:/srv/x\\:y:logs/z\n");
        for c in &w {
            assert_eq!(paths(c), ["/mnt/data", "/srv/x:y", "/mnt/logs/z"]);
            let dirs: Vec<u32> = c.files().iter().map(|d| d.dir).collect();
            assert_eq!(dirs, [0, 1, 2]);
        }
        let w = clones("size=2m\nfilename=data:/srv/x\ndirectory=/d\n");
        assert_eq!(
            paths(&w[0]),
            ["/d/data", "/d/srv/x"],
            "fio prefixes every name"
        );
    }

    #[test]
    fn size_is_split_evenly_among_the_files_after_the_offset() {
        let g = first("nrfiles=3\nsize=12m\noffset=1m\n");
        let sizes: Vec<u64> = g.files().iter().map(|d| d.size_bytes).collect();
        assert_eq!(sizes, [5 * MIB; 3], "offset + size / nrfiles");
        assert_eq!(g.region().offset_bytes, MIB);
        assert_eq!(g.region().len_bytes, 4 * MIB);
        // fio gives the first files one block more when size / nrfiles leaves whole blocks.
        let g = first("nrfiles=1000\nbs=512\nsize=4097536\n");
        let sizes: Vec<u64> = g.files().iter().map(|d| d.size_bytes).collect();
        assert_eq!((sizes[0], sizes[1], sizes[999]), (4097 + 512, 4097, 4097));
    }

    #[test]
    fn a_filesize_range_draws_each_file_a_block_multiple_in_the_range() {
        let sizes = |seed| {
            let spec = job("nrfiles=50\nfilesize=1m-2m\n");
            let g = Generator::on_filesystem(&spec, 0, FS, "/mnt", seed).unwrap();
            g.files().iter().map(|d| d.size_bytes).collect::<Vec<_>>()
        };
        let a = sizes(1);
        assert!(a
            .iter()
            .all(|&s| (MIB..2 * MIB).contains(&s) && s % (4 * KIB) == 0));
        assert!(a.iter().any(|&s| s != a[0]), "{a:?}");
        assert_eq!(a, sizes(1));
        assert_ne!(a, sizes(2));
    }

    #[test]
    fn a_read_job_finds_its_files_written_a_write_job_fallocated_or_sparse() {
        let layout = |text: &str| {
            let g = first(&format!("size=8m\n{text}"));
            let d = &g.files()[0];
            (d.exists, d.size_bytes, d.layout)
        };
        assert_eq!(layout("rw=read\n"), (true, 8 * MIB, FileLayout::Written));
        assert_eq!(layout("rw=randrw\n"), (true, 8 * MIB, FileLayout::Written));
        assert_eq!(
            layout("rw=randwrite\n"),
            (true, 8 * MIB, FileLayout::Fallocated)
        );
        assert_eq!(
            layout("rw=write\nfallocate=posix\n"),
            (true, 8 * MIB, FileLayout::Fallocated)
        );
        assert_eq!(
            layout("rw=write\noverwrite=1\n"),
            (true, 8 * MIB, FileLayout::Written)
        );
        assert_eq!(
            layout("rw=write\nfallocate=truncate\n"),
            (true, 8 * MIB, FileLayout::Sparse)
        );
        // fallocate=none: fio creates the file and leaves it empty (extend_file).
        assert_eq!(
            layout("rw=write\nfallocate=none\n"),
            (true, 0, FileLayout::Sparse)
        );
        assert!(!layout("rw=write\ncreate_on_open=1\n").0);
    }

    #[test]
    fn create_on_open_makes_the_first_operation_a_create() {
        let mut g = first("rw=write\nbs=4k\nsize=16k\nnrfiles=2\ncreate_on_open=1\nunlink=1\n");
        assert!(g.files().iter().all(|d| !d.exists));
        assert_eq!(
            trail(&mut g, 100),
            ["N0", "W0@0", "N1", "W1@0", "W0@4", "W1@4", "|", "U0", "X0", "U1", "X1"]
        );
    }

    #[test]
    fn roundrobin_cycles_the_files_and_opens_each_at_its_first_use() {
        assert_eq!(
            run("rw=write\nbs=4k\nsize=24k\nnrfiles=3\n"),
            [
                "O0", "W0@0", "O1", "W1@0", "O2", "W2@0", "W0@4", "W1@4", "W2@4", "|", "X0", "X1",
                "X2"
            ]
        );
        assert_eq!(
            run("rw=read\nbs=4k\nsize=16k\nnrfiles=2\nfile_service_type=roundrobin:2\n"),
            ["O0", "R0@0", "R0@4", "O1", "R1@0", "R1@4", "|", "X0", "X1"]
        );
    }

    #[test]
    fn sequential_service_finishes_a_file_then_closes_it() {
        assert_eq!(
            run("rw=write\nbs=4k\nsize=16k\nnrfiles=2\nfile_service_type=sequential\n"),
            ["O0", "W0@0", "W0@4", "X0", "O1", "W1@0", "W1@4", "|", "X1"]
        );
    }

    #[test]
    fn openfiles_below_nrfiles_works_on_that_many_files_and_opens_the_next_when_one_is_done() {
        assert_eq!(
            run("rw=read\nbs=4k\nsize=24k\nnrfiles=3\nopenfiles=1\n"),
            [
                "O0", "R0@0", "R0@4", "X0", "O1", "R1@0", "R1@4", "X1", "O2", "R2@0", "R2@4", "|",
                "X2"
            ]
        );
    }

    #[test]
    fn a_second_loop_reopens_the_file_and_reads_it_again_from_the_start() {
        assert_eq!(
            run("rw=read\nbs=4k\nsize=8k\nloops=2\n"),
            ["O0", "R0@0", "R0@4", "X0", "O0", "R0@0", "R0@4", "|", "X0"]
        );
    }

    #[test]
    fn random_service_spreads_ios_evenly_over_the_files() {
        let mut g = first(
            "rw=randread\nbs=4k\nsize=64m\nnrfiles=4\nfile_service_type=random\ntime_based\nruntime=1\n",
        );
        let mut per_file = [0u32; 4];
        for s in trail(&mut g, 40_004) {
            if let Some(rest) = s.strip_prefix('R') {
                per_file[usize::from(rest.as_bytes()[0] - b'0')] += 1;
            }
        }
        // Binomial(40000, 1/4): sd ~87.
        assert!(
            per_file.iter().all(|&n| (9_600..10_400).contains(&n)),
            "{per_file:?}"
        );
    }

    #[test]
    fn fsync_2_fsyncs_the_next_picked_file_after_every_second_write() {
        // fio's sync I/O takes a file from the file service like any I/O (set_io_u_file, then
        // get_rw_ddir): with round robin over two files it is the file not just written.
        assert_eq!(
            run("rw=write\nbs=4k\nsize=32k\nnrfiles=2\nfsync=2\n"),
            [
                "O0", "W0@0", "O1", "W1@0", "F0", "W1@4", "W0@4", "F1", "W0@8", "W1@8", "F0",
                "W1@12", "W0@12", "|", "X0", "X1"
            ]
        );
        assert_eq!(
            run("rw=write\nbs=4k\nsize=16k\nfdatasync=2\n"),
            ["O0", "W0@0", "W0@4", "D0", "W0@8", "W0@12", "|", "X0"],
            "one file: its own writes; the last sync comes after the job's bytes, as in fio"
        );
    }

    #[test]
    fn a_file_at_the_end_of_its_pass_still_takes_the_fsync_of_its_last_write() {
        // fsync=1, roundrobin:2 (a sync counts as one of the file's 2 I/Os): W0@4 ends f0's
        // pass, and its fsync still goes to f0 — fio decides the sync before it finds the
        // file done (fio 3.33 under strace: pwrite(f0) fsync(f0) pwrite(f1) fsync(f1) ...).
        assert_eq!(
            run("rw=write\nbs=4k\nsize=16k\nnrfiles=2\nfsync=1\nfile_service_type=roundrobin:2\n"),
            ["O0", "W0@0", "F0", "O1", "W1@0", "F1", "W0@4", "F0", "W1@4", "|", "X0", "X1"]
        );
    }

    #[test]
    fn end_fsync_fsyncs_every_file_after_a_drain_and_unlink_deletes_them_before_closing() {
        let mut g = first("rw=write\nbs=4k\nsize=16k\nnrfiles=2\nend_fsync=1\nunlink=1\n");
        assert_eq!(
            trail(&mut g, 100),
            [
                "O0", "W0@0", "O1", "W1@0", "W0@4", "W1@4", "|", "F0", "|", "F1", "|", "U0", "X0",
                "U1", "X1"
            ]
        );
        assert_eq!(g.next(0), Step::Done, "Done stays Done");
        // A file closed before the end is reopened for its fsync; a read job has none.
        assert_eq!(
            run(
                "rw=write\nbs=4k\nsize=16k\nnrfiles=2\nend_fsync=1\nfile_service_type=sequential\n"
            ),
            [
                "O0", "W0@0", "W0@4", "X0", "O1", "W1@0", "W1@4", "|", "O0", "F0", "|", "X0", "F1",
                "|", "X1"
            ]
        );
        assert_eq!(
            run("rw=read\nbs=4k\nsize=8k\nend_fsync=1\n"),
            ["O0", "R0@0", "R0@4", "|", "X0"]
        );
    }

    #[test]
    fn a_stopped_job_ends_as_fio_does_after_its_runtime_and_skips_end_fsync_right_after_a_sync() {
        let base = "rw=randwrite\nbs=4k\nsize=1m\nnrfiles=2\nend_fsync=1\nunlink=1\ntime_based\nruntime=1\n";
        let kinds =
            |steps: Vec<String>| steps.iter().map(|s| s[..1].to_string()).collect::<String>();
        let mut g = first(base);
        assert_eq!(kinds(trail(&mut g, 4)), "OWOW");
        g.stop();
        assert_eq!(
            trail(&mut g, 100),
            ["|", "F0", "|", "F1", "|", "U0", "X0", "U1", "X1"]
        );
        // fio's should_fsync: no end_fsync when the last operation was a sync.
        let mut g = first(&format!("{base}fsync=1\n"));
        assert_eq!(kinds(trail(&mut g, 4)), "OWOF");
        g.stop();
        assert_eq!(trail(&mut g, 100), ["|", "U0", "X0", "U1", "X1"]);
    }

    #[test]
    fn direct_and_sync_reach_every_read_and_write() {
        for (text, want) in [
            ("", IoFlags::default()),
            (
                "direct=1\nsync=1\n",
                IoFlags {
                    direct: true,
                    sync: true,
                },
            ),
            (
                "buffered=1\nsync=sync\n",
                IoFlags {
                    direct: false,
                    sync: true,
                },
            ),
        ] {
            let mut g = first(&format!("rw=randrw\nsize=1m\n{text}"));
            let mut n = 0;
            while let Step::File { op, .. } = g.next(0) {
                if let FileOp::Read { flags, .. } | FileOp::Write { flags, .. } = op {
                    assert_eq!(flags, want, "{text}");
                    n += 1;
                }
            }
            assert_eq!(n, 256);
        }
    }

    #[test]
    fn jobs_whose_files_cannot_exist_are_refused_naming_the_job_and_what_is_accepted() {
        let err = |text: &str| {
            Generator::on_filesystem(&job(text), 0, 64 * MIB, "/mnt", 7)
                .expect_err(text)
                .to_string()
        };
        assert_eq!(
            err("filesize=1g\n"),
            "job 'j' (line 1): file '/mnt/j.0.0' of 1073741824 bytes is larger than the filesystem of 67108864 bytes; accepted: offset + the file's size (filesize, or size / nrfiles) <= the filesystem size"
        );
        assert!(err("rw=read\n").contains("files on a filesystem need a size"));
        assert!(err("filesize=1m\noffset=1m\n").contains("offset=1048576 is not inside file"));
        assert!(err("size=1m\nnrfiles=1024\n")
            .contains("bs=4096 is larger than the job's region of 1024 bytes"));
        assert_eq!(
            err("size=1m\nnrfiles=4294967295\n"),
            "job 'j' (line 1): nrfiles=4294967295 is more files than vmio's 1048576 per job clone; accepted: nrfiles <= 1048576"
        );
        let mut none = job("size=1m\n");
        none.nrfiles = 0;
        let e = Generator::on_filesystem(&none, 0, FS, "/mnt", 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            "job 'j' (line 1): no file to run on (nrfiles=0, or an empty filename list); accepted: nrfiles >= 1 or filename=name[:name...]"
        );
    }
}
