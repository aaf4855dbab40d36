//! The request stream of one fio job clone, following fio's semantics for `rw`, `rwmixread`,
//! `bs`/`bssplit`, `size`/`offset`/`filesize`, `io_size`, `number_ios`, `time_based`,
//! `norandommap`, `randseed`, `fsync` and `fdatasync` (fio HOWTO). Pure and deterministic: the
//! same spec, clone, target size and seed give the same sequence. On a disk the requests are
//! [`Step::Io`]s in one region; on a filesystem ([`Generator::on_filesystem`]) each file is a
//! region and the steps are [`Step::File`]s ([`super::fio_files`]: names, layout, file
//! service, opens, syncs and the end of the job).
//!
//! ```text
//! new:  region = [offset, offset + (size | filesize | disk - offset))   (disk)
//!       regions = one [offset, offset + io size) per file               (filesystem)
//!       align  = smallest block size the mode uses             (fio's default blockalign)
//!       limits = io_size | region size bytes, number_ios | none I/Os   (none if time_based)
//!       base   = randseed ? derive(randseed, "randseed/<clone>")
//!                         : derive(run_seed, "job/<name>/<clone>")
//!       offset, size and mix streams are split off base, so one never shifts another;
//!       file sizes (a filesize range) come from their own derived stream "filesize/..."
//! next (disk):
//!       if a sync is pending: clear it, return Fsync
//!       if bytes done >= byte limit or I/Os done >= I/O limit:
//!           return Fsync once if end_fsync, then Done
//!       return Io(draw(region))
//! draw(region):
//!       op  = mixed mode ? (mix.below(100) < rwmixread ? Read : Write) : the mode's op
//!       len = a block size drawn from op's (bytes, weight) table
//!       off = sequential:  pos[op]                  (one position per direction, fio's last_pos)
//!             random map:  start + perm.at(i++) * align, new permutation when a pass is done
//!             norandommap: start + uniform(0 ..= (size - len) / align) * align
//!       len = min(len, region end - off)            (never cross the region end)
//!       sequential: pos[op] = off + len, back to start at the region end (a new pass)
//!       a pass ended (sequential wrap, random map complete): the region is exhausted
//!       count the I/O; after every fsync-th write mark an fsync pending, else after every
//!       fdatasync-th an fdatasync (fio's get_rw_ddir; on a disk both are Fsync)
//! ```
//!
//! fiopace options ([`crate::fio::pace`]):
//!
//! ```text
//! random offset: percentage_random < 100 and a draw in 1..=100 above it → sequential:
//!                pos[op], which follows every I/O (fio's last_pos), random past the end;
//!                a non-uniform random_distribution → its draw (workload::distribution),
//!                with no random map (fio's fixup_options)
//! verify (a job on a disk that writes, verify set, do_verify=1; fio's log_io_piece and
//!         do_verify): a clone of the generator at its start replays the writes, so the
//!         reads come in the order written with no log in memory
//!   every verify_backlog writes → that many reads of the oldest unverified writes
//!   a time_based job's size written → Drain, reads of every unverified write
//!   the job's bytes done (after its end_fsync) → Drain, reads of the rest, then Done
//!   verify_only → the writes are drawn, not issued; only the reads are
//!   stop (runtime over) → no verify (fio's do_verify stops on terminate)
//! ```
//!
//! fio's log of a job without the random map (norandommap, non-uniform distributions) is
//! sorted by offset and keeps one entry per overlapped block; vmio reads back in write order,
//! every write once.
//!
//! The random map is a keyed permutation of the region's `ceil(size / align)` blocks
//! (`workload::perm`), so a pass visits every block start exactly once in O(1) memory. Unlike
//! fio's bitmap it does not shrink an I/O that overlaps blocks already done, so with mixed
//! block sizes (`bssplit`) a pass may touch some bytes twice. On a disk a pending fsync is
//! returned even after the last I/O, so every group of `fsync` writes is followed by its
//! fsync; on files the job stops at its bytes first, as fio's `do_io` does.

use super::distribution::{self, OffsetDraw};
use super::fio_files::{self, FileJob};
use super::region::{Pattern, Region};
use super::{FileDecl, FileOp, Step, Workload, WorkloadError};
use crate::fio::engine::EngineModel;
use crate::fio::pace::Distribution;
use crate::fio::JobSpec;
use crate::request::{Extent, Op};
use crate::rng::Rng;
use crate::Ns;

/// Block sizes of one direction, prepared for weighted draws.
#[derive(Clone, Debug)]
struct SizeTable {
    sizes: Vec<u64>,
    /// Cumulative weights.
    cum: Vec<u64>,
}

impl SizeTable {
    fn new(entries: &[(u64, u32)]) -> Option<Self> {
        let mut sizes = Vec::new();
        let mut cum = Vec::new();
        let mut total = 0u64;
        for &(bytes, weight) in entries {
            if bytes > 0 && weight > 0 {
                total += u64::from(weight);
                sizes.push(bytes);
                cum.push(total);
            }
        }
        (!sizes.is_empty()).then_some(Self { sizes, cum })
    }

    fn min(&self) -> u64 {
        self.sizes.iter().copied().min().unwrap_or(1)
    }

    #[inline]
    fn draw(&self, rng: &mut Rng) -> u64 {
        if self.sizes.len() == 1 {
            return self.sizes[0];
        }
        let r = rng.below(self.cum[self.cum.len() - 1]);
        let i = self.cum.iter().position(|&c| r < c).unwrap_or(0);
        self.sizes[i]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dirs {
    Read,
    Write,
    Mixed,
    /// fio's trim and randtrim: trims of the write block sizes.
    Trim,
    /// fio's trimwrite and randtrimwrite: a trim, then a write of the same block.
    TrimWrite,
}

impl Dirs {
    fn uses_read(self) -> bool {
        matches!(self, Dirs::Read | Dirs::Mixed)
    }

    fn uses_write(self) -> bool {
        self != Dirs::Read
    }
}

/// Refuse a job that would run forever: fio's `time_based` without a `runtime` (fio warns
/// "time_based requires a runtime/timeout setting" and drops `time_based`; a simulator
/// running it as written would never end). Other endings (size, io_size, number_ios, loops)
/// are always finite.
pub fn check_ends(spec: &JobSpec) -> Result<(), WorkloadError> {
    if spec.time_based && spec.runtime_ns.unwrap_or(0) == 0 {
        return Err(WorkloadError::NeverEnds {
            job: crate::units::quote(&spec.name),
            line: spec.line,
        });
    }
    Ok(())
}

/// The requests a job keeps outstanding: 1 with a synchronous ioengine
/// ([`crate::fio::engine`], fio's `FIO_SYNCIO`) (fio(1) `iodepth`:
/// "increasing iodepth beyond 1 will not affect synchronous ioengines"), else
/// `max(iodepth, 1)`.
pub fn iodepth(spec: &JobSpec) -> u32 {
    if spec.engine() == EngineModel::Sync {
        1
    } else {
        spec.iodepth.max(1)
    }
}

/// The note for a run whose job asks a synchronous ioengine for an iodepth above 1.
pub fn iodepth_note(spec: &JobSpec) -> Option<String> {
    (spec.iodepth > 1 && spec.engine() == EngineModel::Sync).then(|| {
        format!(
            "job '{}': ioengine={} is synchronous; iodepth={} behaves as 1 (as in fio)",
            spec.name, spec.ioengine, spec.iodepth
        )
    })
}

/// Notes on what vmio does differently from fio for the job's fiopace options
/// ([`crate::fio::pace`]): the checksums' CPU time, verify on files.
pub fn pace_notes(spec: &JobSpec, on_files: bool) -> Vec<String> {
    let p = &spec.pace;
    let mut notes = Vec::new();
    if let Some(method) = p
        .verify
        .as_deref()
        .filter(|_| p.do_verify && spec.rw.writes())
    {
        notes.push(if on_files {
            format!(
                "job '{}': verify={method} on a filesystem's files is not modelled: no read-back phase",
                crate::units::quote(&spec.name)
            )
        } else {
            format!(
                "job '{}': verify={method}: the read-back phase is modelled, the checksum's CPU time is not",
                crate::units::quote(&spec.name)
            )
        });
    }
    notes
}

/// Most I/Os one numjobs clone may issue when no `runtime` stops it: 2^32, about an hour of
/// simulation at a million simulated I/Os per second (`vmio bench sim`).
pub const MAX_IOS_WITHOUT_RUNTIME: u64 = 1 << 32;

/// What a job's options make of its block sizes: directions, size tables, the largest size
/// used and the alignment (the smallest).
struct Shape {
    dirs: Dirs,
    read_sizes: SizeTable,
    write_sizes: SizeTable,
    largest: u64,
    align: u64,
}

impl Shape {
    fn new(spec: &JobSpec) -> Result<Self, WorkloadError> {
        let dirs = match (spec.rw.reads(), spec.rw.writes(), spec.rw.trims()) {
            (_, true, true) => Dirs::TrimWrite,
            (_, false, true) => Dirs::Trim,
            (true, false, _) => Dirs::Read,
            (false, true, _) => Dirs::Write,
            _ => Dirs::Mixed,
        };
        let table = |direction: &'static str, entries: &[(u64, u32)], used: bool| {
            match SizeTable::new(entries) {
                Some(t) => Ok(t),
                // An unused direction never draws; give it a harmless placeholder.
                None if !used => Ok(SizeTable {
                    sizes: vec![1],
                    cum: vec![1],
                }),
                None => Err(WorkloadError::BadBlockSizes {
                    job: crate::units::quote(&spec.name),
                    line: spec.line,
                    direction,
                    sizes: entries.to_vec(),
                }),
            }
        };
        let largest = |entries: &[(u64, u32)], used: bool| {
            if used {
                entries.iter().map(|&(b, _)| b).max().unwrap_or(0)
            } else {
                0
            }
        };
        let read_sizes = table("read", &spec.bs.read, dirs.uses_read())?;
        let write_sizes = table("write", &spec.bs.write, dirs.uses_write())?;
        let align = match dirs {
            Dirs::Read => read_sizes.min(),
            Dirs::Write | Dirs::Trim | Dirs::TrimWrite => write_sizes.min(),
            Dirs::Mixed => read_sizes.min().min(write_sizes.min()),
        };
        Ok(Self {
            dirs,
            largest: largest(&spec.bs.read, dirs.uses_read())
                .max(largest(&spec.bs.write, dirs.uses_write())),
            read_sizes,
            write_sizes,
            align,
        })
    }
}

/// The request stream of one numjobs clone of a fio job. See the module doc.
#[derive(Clone, Debug)]
pub struct Generator {
    /// One region on a disk; one per file on a filesystem.
    regions: Vec<Region>,
    pattern: Pattern,
    dirs: Dirs,
    rwmixread: u64,
    read_sizes: SizeTable,
    write_sizes: SizeTable,
    offsets: Rng,
    sizes_rng: Rng,
    mix: Rng,
    /// fio's `percentage_random` draws (seq_rand_state).
    choice: Rng,
    byte_limit: u64,
    io_limit: u64,
    bytes_done: u64,
    ios_done: u64,
    fsync_every: u64,
    fdatasync_every: u64,
    writes: u64,
    /// A sync is due before the next I/O: `Some(datasync)`.
    sync_pending: Option<bool>,
    end_fsync: bool,
    depth: u32,
    /// The files of a job on a filesystem ([`super::fio_files`]).
    files: Option<Box<FileJob>>,
    /// fio's verify phase (a job on a disk that writes, with `verify` and `do_verify`).
    verify: Option<Box<Verify>>,
    /// The direction of the next drawn I/O, chosen ahead ([`Generator::next_dir`]).
    forced: Option<Op>,
    /// trimwrite: the block just trimmed, to be written next.
    trimmed: Option<(u64, u64)>,
}

/// fio's verify of a job's writes (module doc, "verify"): a replay of the generator from its
/// start gives the written blocks again, in the order they were written.
#[derive(Clone, Debug)]
struct Verify {
    replay: Generator,
    /// fio's `verify_backlog` (0: verify at the end of each pass).
    backlog: u64,
    /// Writes issued, not yet verified.
    pending: u64,
    /// Verify reads to issue before anything else.
    queued: u64,
    /// A drain is due before the queued reads (the end of a pass: fio's do_io returns).
    drain: bool,
    /// The bytes of writes after which a time_based job's pass ends.
    pass_end: u64,
    pass_bytes: u64,
    /// fio's `verify_only`: the writes are drawn, not issued.
    only: bool,
}

impl Generator {
    /// One clone (0..numjobs) of a job against a disk of `disk_bytes`. The region is
    /// `[offset, offset + size)`; size defaults to `filesize`, then to the rest of the disk.
    pub fn new(
        spec: &JobSpec,
        clone_index: u32,
        disk_bytes: u64,
        run_seed: u64,
    ) -> Result<Self, WorkloadError> {
        check_clone(spec, clone_index)?;
        let job = || crate::units::quote(&spec.name);
        let shape = Shape::new(spec)?;
        // fio's get_start_offset: clone k starts k offset_increments further.
        let offset = spec
            .offset_bytes
            .saturating_add(u64::from(clone_index).saturating_mul(spec.offset_increment_bytes));
        let size = spec
            .size_bytes
            .or_else(|| {
                let mut rng = file_size_rng(spec, clone_index, run_seed);
                spec.filesize
                    .map(|r| fio_files::draw_size(r, shape.align, &mut rng))
            })
            .unwrap_or(disk_bytes.saturating_sub(offset));
        let region_err = |beyond: bool| {
            let (job, line) = (job(), spec.line);
            let (offset_bytes, size_bytes) = (offset, size);
            if beyond {
                WorkloadError::RegionBeyondDisk {
                    job,
                    line,
                    offset_bytes,
                    size_bytes,
                    disk_bytes,
                }
            } else {
                WorkloadError::EmptyRegion {
                    job,
                    line,
                    offset_bytes,
                    size_bytes,
                    disk_bytes,
                }
            }
        };
        if size == 0 || offset >= disk_bytes {
            return Err(region_err(false));
        }
        if offset.checked_add(size).is_none_or(|end| end > disk_bytes) {
            return Err(region_err(true));
        }
        if shape.largest > size {
            return Err(WorkloadError::BlockLargerThanRegion {
                job: job(),
                line: spec.line,
                bs_bytes: shape.largest,
                region_bytes: size,
            });
        }
        Self::build(
            spec,
            clone_index,
            run_seed,
            shape,
            &[(offset, size)],
            size,
            None,
        )
    }

    /// One clone of a job on the files of a filesystem of `fs_bytes` mounted at `mount`
    /// ([`super::fio_files`]): its steps are [`Step::File`]s, its files in
    /// [`Workload::files`].
    pub fn on_filesystem(
        spec: &JobSpec,
        clone_index: u32,
        fs_bytes: u64,
        mount: &str,
        run_seed: u64,
    ) -> Result<Self, WorkloadError> {
        check_clone(spec, clone_index)?;
        let shape = Shape::new(spec)?;
        let mut sizes = file_size_rng(spec, clone_index, run_seed);
        let plan = fio_files::plan(
            spec,
            clone_index,
            fs_bytes,
            mount,
            (shape.align, shape.largest),
            &mut sizes,
        )?;
        Self::build(
            spec,
            clone_index,
            run_seed,
            shape,
            &plan.regions,
            plan.bytes,
            Some(Box::new(plan.files)),
        )
    }

    /// The generator over `regions` (`(start, bytes)`), `bytes` per loop of the job.
    fn build(
        spec: &JobSpec,
        clone_index: u32,
        run_seed: u64,
        shape: Shape,
        regions: &[(u64, u64)],
        bytes: u64,
        files: Option<Box<FileJob>>,
    ) -> Result<Self, WorkloadError> {
        let align = shape.align;
        let mut base = match spec.randseed {
            Some(seed) => Rng::derive(seed, &format!("randseed/{clone_index}")),
            None => Rng::derive(run_seed, &format!("job/{}/{}", spec.name, clone_index)),
        };
        let mut offsets = Rng::new(base.next_u64());
        let sizes_rng = Rng::new(base.next_u64());
        let mix = Rng::new(base.next_u64());
        let mut dist_rng = Rng::new(base.next_u64());
        let choice = Rng::new(base.next_u64());
        let dist = &spec.pace.random_distribution;
        let regions = regions
            .iter()
            .map(|&(start, len)| {
                let draw = OffsetDraw::new(dist, len, align, &mut dist_rng)
                    .map_err(|end| distribution::zones_beyond(&spec.name, spec.line, end, len))?;
                Ok(Region::new(start, len, align, &mut offsets, draw))
            })
            .collect::<Result<_, WorkloadError>>()?;
        let (byte_limit, io_limit) = if spec.time_based {
            (u64::MAX, u64::MAX)
        } else {
            // fio's `loops` runs the whole job that many times.
            let loops = u64::from(spec.loops.max(1));
            (
                spec.io_size_bytes
                    .filter(|&b| b > 0)
                    .unwrap_or(bytes)
                    .saturating_mul(loops),
                spec.number_ios
                    .filter(|&n| n > 0)
                    .map_or(u64::MAX, |n| n.saturating_mul(loops)),
            )
        };
        // With no runtime to stop it, the job ends after its bytes or I/Os: refuse one that
        // would issue more than MAX_IOS_WITHOUT_RUNTIME (hours of simulation: a 4-byte bs over
        // a whole disk), as the jobs that would never end are refused.
        if !spec.time_based && spec.runtime_ns.unwrap_or(0) == 0 {
            let ios = (byte_limit / align.max(1)).min(io_limit);
            if ios > MAX_IOS_WITHOUT_RUNTIME {
                return Err(WorkloadError::TooManyIos {
                    job: crate::units::quote(&spec.name),
                    line: spec.line,
                    ios,
                    limit: MAX_IOS_WITHOUT_RUNTIME,
                });
            }
        }
        Ok(Self {
            regions,
            pattern: Pattern {
                align,
                random: spec.rw.is_random(),
                // fio's fixup_options: a non-uniform distribution has no random map.
                norandommap: spec.norandommap || *dist != Distribution::Random,
                perc_random: spec.pace.percentage_random,
            },
            dirs: shape.dirs,
            rwmixread: u64::from(spec.rwmixread.min(100)),
            read_sizes: shape.read_sizes,
            write_sizes: shape.write_sizes,
            offsets,
            sizes_rng,
            mix,
            choice,
            byte_limit,
            io_limit,
            bytes_done: 0,
            ios_done: 0,
            fsync_every: u64::from(spec.fsync),
            fdatasync_every: u64::from(spec.fdatasync),
            writes: 0,
            sync_pending: None,
            end_fsync: spec.end_fsync,
            depth: iodepth(spec),
            files,
            verify: None,
            forced: None,
            trimmed: None,
        })
        .map(|g| g.with_verify(spec, bytes))
    }

    /// fio's verify phase for a job on a disk that writes (`verify` set, `do_verify` on):
    /// the generator as it is now, replayed, gives the blocks to read back.
    fn with_verify(mut self, spec: &JobSpec, pass_bytes: u64) -> Self {
        let p = &spec.pace;
        if p.verify.is_none() || !p.do_verify || !spec.rw.writes() || self.files.is_some() {
            return self;
        }
        self.verify = Some(Box::new(Verify {
            replay: self.clone(),
            backlog: p.verify_backlog,
            pending: 0,
            queued: 0,
            drain: false,
            pass_end: if spec.time_based {
                pass_bytes
            } else {
                u64::MAX
            },
            pass_bytes,
            only: p.verify_only,
        }));
        self
    }

    /// Every clone of `spec` (numjobs of them, at least one), in clone order.
    pub fn clones(
        spec: &JobSpec,
        disk_bytes: u64,
        run_seed: u64,
    ) -> Result<Vec<Self>, WorkloadError> {
        (0..spec.numjobs.max(1))
            .map(|c| Self::new(spec, c, disk_bytes, run_seed))
            .collect()
    }

    /// The byte range this clone addresses (on a filesystem: of its first file).
    pub fn region(&self) -> Extent {
        self.regions[0].extent()
    }

    /// I/Os issued so far (fsyncs not counted).
    pub fn ios_done(&self) -> u64 {
        self.ios_done
    }

    /// Bytes of I/O issued so far.
    pub fn bytes_done(&self) -> u64 {
        self.bytes_done
    }

    /// The job's time is up (its runtime ended): from now on it hands out only what fio does
    /// after its I/O loop (on a disk: a pending fsync, then end_fsync; on files: the end
    /// sequence of [`super::fio_files`]), then Done.
    pub fn stop(&mut self) {
        self.byte_limit = 0;
        // fio's do_verify does nothing once the job is terminated.
        self.verify = None;
    }

    /// The next verify step, if one is due: a drain at the end of a pass, then a read of the
    /// oldest unverified write (the replay's next write).
    fn verify_step(&mut self) -> Option<Step> {
        let v = self.verify.as_deref_mut()?;
        if v.queued == 0 {
            return None;
        }
        if std::mem::take(&mut v.drain) {
            return Some(Step::Drain);
        }
        let (offset_bytes, len_bytes) = loop {
            if let (Op::Write, off, len) = v.replay.draw_io(0) {
                break (off, len);
            }
        };
        v.queued -= 1;
        v.pending -= 1;
        Some(Step::Io {
            op: Op::Read,
            offset_bytes,
            len_bytes,
        })
    }

    /// A write was drawn: log it for the verify (fio's log_io_piece), queue a backlog's
    /// reads (every verify_backlog writes) or a pass's (a time_based job's `size` written).
    /// Whether it is issued (not under verify_only).
    fn verify_logged(&mut self) -> bool {
        let bytes = self.bytes_done;
        let Some(v) = self.verify.as_deref_mut() else {
            return true;
        };
        v.pending += 1;
        if v.backlog > 0 && v.pending.is_multiple_of(v.backlog) {
            v.queued = v.backlog;
        }
        if bytes >= v.pass_end {
            v.pass_end = v.pass_end.saturating_add(v.pass_bytes);
            v.queued = v.pending;
            v.drain = true;
        }
        !v.only
    }

    /// The job's writes are done: verify what is left (after a drain), if anything.
    fn verify_rest(&mut self) -> Option<Step> {
        let v = self.verify.as_deref_mut()?;
        if v.pending == 0 {
            return None;
        }
        v.queued = v.pending;
        v.drain = true;
        self.verify_step()
    }

    fn limits_reached(&self) -> bool {
        self.bytes_done >= self.byte_limit || self.ios_done >= self.io_limit
    }

    /// The next read or write in region `r`: op, offset, length; counts it and marks a sync
    /// due after every `fsync`-th (else `fdatasync`-th) write (fio's `get_rw_ddir`).
    #[inline]
    fn draw_io(&mut self, r: usize) -> (Op, u64, u64) {
        let op = match self.dirs {
            Dirs::Read => Op::Read,
            Dirs::Write => Op::Write,
            Dirs::Trim => Op::Trim,
            Dirs::TrimWrite if self.trimmed.is_some() => Op::Write,
            Dirs::TrimWrite => Op::Trim,
            Dirs::Mixed => match self.forced.take() {
                Some(op) => op,
                None => self.mix_op(),
            },
        };
        let (bs, dir) = if op == Op::Read {
            (self.read_sizes.draw(&mut self.sizes_rng), 0)
        } else {
            (self.write_sizes.draw(&mut self.sizes_rng), 1)
        };
        let (offset, len) = match self.trimmed.take() {
            // trimwrite: the write of the block just trimmed.
            Some(block) if op == Op::Write => block,
            _ => self.regions[r].next(dir, bs, self.pattern, &mut self.offsets, &mut self.choice),
        };
        if op == Op::Trim && self.dirs == Dirs::TrimWrite {
            // fio counts a trimwrite job's size in its writes (backend.c, io_bytes_exceeded).
            self.trimmed = Some((offset, len));
            return (op, offset, len);
        }
        self.ios_done += 1;
        self.bytes_done = self.bytes_done.saturating_add(len);
        if op == Op::Write {
            self.writes += 1;
            let due = |every: u64| every > 0 && self.writes.is_multiple_of(every);
            if due(self.fsync_every) {
                self.sync_pending = Some(false);
            } else if due(self.fdatasync_every) {
                self.sync_pending = Some(true);
            }
        }
        (op, offset, len)
    }

    /// A mixed job's draw of its next direction (rwmixread).
    fn mix_op(&mut self) -> Op {
        if self.mix.below(100) < self.rwmixread {
            Op::Read
        } else {
            Op::Write
        }
    }

    /// For a job on a disk that issues both directions (0 < rwmixread < 100): the
    /// direction (0 read, 1 write) of its next drawn I/O, drawn from the mix now, as fio's
    /// get_rw_ddir does before rate_ddir may switch it ([`Generator::force_dir`]); None
    /// for any other job.
    pub fn next_dir(&mut self) -> Option<usize> {
        if self.dirs != Dirs::Mixed || !(1..100).contains(&self.rwmixread) || self.files.is_some() {
            return None;
        }
        let op = match self.forced {
            Some(op) => op,
            None => self.mix_op(),
        };
        self.forced = Some(op);
        Some(usize::from(op == Op::Write))
    }

    /// The next drawn I/O goes in direction `dir` (0 read, 1 write): fio's rate_ddir switched
    /// it.
    pub fn force_dir(&mut self, dir: usize) {
        self.forced = Some(if dir == 0 { Op::Read } else { Op::Write });
    }

    /// The next step of a job on files (module doc of [`super::fio_files`]).
    fn next_on_files(&mut self) -> Step {
        let Some(files) = self.files.as_deref_mut() else {
            return Step::Done;
        };
        if let Some(step) = files.queued() {
            return step;
        }
        // fio stops at its bytes before a pending sync (do_io's loop condition).
        if self.bytes_done >= self.byte_limit || self.ios_done >= self.io_limit {
            return files.end();
        }
        let file = files.pick(&mut self.regions, self.sync_pending.is_some());
        if let Some(datasync) = self.sync_pending.take() {
            return files.issue(FileOp::Fsync { file, datasync });
        }
        let flags = files.flags;
        let (op, offset, len) = self.draw_io(file as usize);
        let op = if op == Op::Read {
            FileOp::Read {
                file,
                offset,
                len,
                flags,
            }
        } else {
            FileOp::Write {
                file,
                offset,
                len,
                flags,
            }
        };
        match self.files.as_deref_mut() {
            Some(files) => files.issue(op),
            None => Step::Done,
        }
    }
}

/// Refuse a clone index beyond numjobs.
fn check_clone(spec: &JobSpec, clone_index: u32) -> Result<(), WorkloadError> {
    if clone_index >= spec.numjobs.max(1) {
        return Err(WorkloadError::NoSuchClone {
            job: crate::units::quote(&spec.name),
            line: spec.line,
            clone_index,
            numjobs: spec.numjobs,
        });
    }
    Ok(())
}

/// The stream file sizes are drawn from (a `filesize` range), apart from the offset, size
/// and mix streams so that it shifts none of them.
fn file_size_rng(spec: &JobSpec, clone_index: u32, run_seed: u64) -> Rng {
    match spec.randseed {
        Some(seed) => Rng::derive(seed, &format!("filesize/{clone_index}")),
        None => Rng::derive(run_seed, &format!("filesize/{}/{clone_index}", spec.name)),
    }
}

impl Workload for Generator {
    /// The next request (time plays no part). See the module doc for the algorithm.
    #[inline]
    fn next(&mut self, _elapsed_ns: Ns) -> Step {
        if self.files.is_some() {
            return self.next_on_files();
        }
        if let Some(step) = self.verify_step() {
            return step;
        }
        if self.sync_pending.take().is_some() {
            return Step::Fsync;
        }
        loop {
            if self.limits_reached() {
                if self.end_fsync {
                    self.end_fsync = false;
                    return Step::Fsync;
                }
                return self.verify_rest().unwrap_or(Step::Done);
            }
            let (op, offset_bytes, len_bytes) = self.draw_io(0);
            let issued = if op == Op::Write {
                self.verify_logged()
            } else {
                !self.verify.as_ref().is_some_and(|v| v.only)
            };
            if issued {
                return Step::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                };
            }
            // verify_only: nothing is issued until a pass's reads are due.
            if let Some(step) = self.verify_step() {
                return step;
            }
        }
    }

    fn depth(&self) -> u32 {
        self.depth
    }

    fn files(&self) -> &[FileDecl] {
        self.files.as_deref().map_or(&[], FileJob::decls)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::fio::{parse_job_file, BlockSizes};

    const KIB: u64 = 1024;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    pub(crate) fn job(text: &str) -> JobSpec {
        parse_job_file(&format!("[j]\n{text}"), "t.fio")
            .unwrap()
            .jobs
            .remove(0)
    }

    fn ios(g: &mut Generator, max: usize) -> Vec<(Op, u64, u64)> {
        let mut out = Vec::new();
        while out.len() < max {
            match g.next(0) {
                Step::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                } => out.push((op, offset_bytes, len_bytes)),
                Step::Fsync => {}
                Step::Done => break,
                s => panic!("a fio job on a disk never asks for {s:?}"),
            }
        }
        out
    }

    #[test]
    fn sequential_reads_advance_and_wrap_at_the_region_end() {
        let spec = job("rw=read\nbs=4k\noffset=8k\nsize=16k\ntime_based\n");
        let mut g = Generator::new(&spec, 0, MIB, 1).unwrap();
        assert_eq!(g.region(), Extent::new(8 * KIB, 16 * KIB));
        let offs: Vec<u64> = ios(&mut g, 10).iter().map(|x| x.1 / KIB).collect();
        assert_eq!(offs, vec![8, 12, 16, 20, 8, 12, 16, 20, 8, 12]);
    }

    #[test]
    fn offset_increment_starts_clone_k_k_increments_after_the_offset() {
        let spec = job("rw=read\nsize=64k\nnumjobs=3\noffset=1m\noffset_increment=256k\n");
        for k in 0..3u32 {
            let g = Generator::new(&spec, k, 4 * MIB, 1).unwrap();
            assert_eq!(
                g.region(),
                Extent::new(MIB + u64::from(k) * 256 * KIB, 64 * KIB)
            );
        }
    }

    #[test]
    fn trimwrite_trims_each_block_then_writes_it_and_counts_its_size_in_writes() {
        let spec = job("rw=trimwrite\nbs=4k\nsize=12k\n");
        let mut g = Generator::new(&spec, 0, MIB, 1).unwrap();
        let k = |n: u64| n * KIB;
        assert_eq!(
            ios(&mut g, 100),
            vec![
                (Op::Trim, 0, k(4)),
                (Op::Write, 0, k(4)),
                (Op::Trim, k(4), k(4)),
                (Op::Write, k(4), k(4)),
                (Op::Trim, k(8), k(4)),
                (Op::Write, k(8), k(4)),
            ]
        );
        let spec = job("rw=randtrim\nbs=4k\nsize=16k\n");
        let mut g = Generator::new(&spec, 0, MIB, 1).unwrap();
        let mut offs: Vec<u64> = ios(&mut g, 100).iter().map(|x| x.1 / KIB).collect();
        offs.sort_unstable();
        assert_eq!(offs, vec![0, 4, 8, 12]);
    }

    #[test]
    fn sequential_io_is_clipped_at_the_region_end() {
        let spec = job("rw=write\nbs=8k\nsize=20k\n");
        let mut g = Generator::new(&spec, 0, MIB, 1).unwrap();
        let got = ios(&mut g, 100);
        let want: Vec<(Op, u64, u64)> = vec![
            (Op::Write, 0, 8 * KIB),
            (Op::Write, 8 * KIB, 8 * KIB),
            (Op::Write, 16 * KIB, 4 * KIB),
        ];
        assert_eq!(got, want);
        assert_eq!(g.next(0), Step::Done);
    }

    #[test]
    fn mixed_sequential_keeps_one_position_per_direction() {
        let spec = job("rw=rw\nrwmixread=50\nbs=4k\nsize=1m\n");
        let mut g = Generator::new(&spec, 0, GIB, 3).unwrap();
        let got = ios(&mut g, 1000);
        for op in [Op::Read, Op::Write] {
            let offs: Vec<u64> = got.iter().filter(|x| x.0 == op).map(|x| x.1).collect();
            assert!(offs.len() > 50);
            for (i, o) in offs.iter().enumerate() {
                assert_eq!(*o, (i as u64 * 4 * KIB) % MIB);
            }
        }
    }

    #[test]
    fn random_map_covers_every_block_exactly_once_per_pass() {
        // 1000 blocks (not a power of two), three passes.
        let spec = job("rw=randwrite\nbs=4k\noffset=1m\nsize=4000k\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 11).unwrap();
        let got = ios(&mut g, 3000);
        let mut passes = Vec::new();
        for pass in got.chunks(1000) {
            let mut seen = vec![0u32; 1000];
            for &(_, off, len) in pass {
                assert_eq!(len, 4 * KIB);
                assert_eq!((off - MIB) % (4 * KIB), 0);
                seen[((off - MIB) / (4 * KIB)) as usize] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1));
            passes.push(pass.to_vec());
        }
        assert_ne!(passes[0], passes[1], "each pass gets a new order");
    }

    #[test]
    fn random_io_stays_inside_the_region() {
        for extra in ["", "norandommap\n"] {
            let spec = job(&format!(
                "rw=randrw\nbssplit=4k/40:64k/40:1m/\noffset=3m\nsize=10001k\ntime_based\n{extra}"
            ));
            let mut g = Generator::new(&spec, 0, GIB, 5).unwrap();
            let r = g.region();
            for (_, off, len) in ios(&mut g, 50_000) {
                assert!(
                    off >= r.offset_bytes && off + len <= r.end_bytes(),
                    "{off}+{len}"
                );
                assert!(len > 0);
                assert_eq!(off % (4 * KIB), 3 * MIB % (4 * KIB));
            }
        }
    }

    #[test]
    fn norandommap_draws_independent_aligned_offsets() {
        let spec = job("rw=randread\nbs=4k\nsize=40k\nnorandommap\nio_size=1g\nnumber_ios=10000\n");
        let mut g = Generator::new(&spec, 0, GIB, 2).unwrap();
        let got = ios(&mut g, 20_000);
        assert_eq!(got.len(), 10_000);
        let mut counts = [0u32; 10];
        for (_, off, len) in &got {
            assert_eq!((off % (4 * KIB), *len), (0, 4 * KIB));
            counts[(off / (4 * KIB)) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn rwmixread_ratio_holds_over_100k_draws() {
        let spec = job("rw=randrw\nrwmixread=70\nbs=4k\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 9).unwrap();
        let reads = ios(&mut g, 100_000)
            .iter()
            .filter(|x| x.0 == Op::Read)
            .count();
        assert!((69_300..70_700).contains(&reads), "{reads}");
        let spec = job("rw=randrw\nrwmixwrite=100\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 9).unwrap();
        assert!(ios(&mut g, 1000).iter().all(|x| x.0 == Op::Write));
    }

    #[test]
    fn loops_repeat_the_whole_job() {
        let spec = job("rw=read\nbs=4k\nsize=16k\nloops=3\n");
        let mut g = Generator::new(&spec, 0, 1 << 20, 1).unwrap();
        let n = std::iter::from_fn(|| match g.next(0) {
            Step::Done => None,
            x => Some(x),
        })
        .count();
        assert_eq!(n, 12);
    }

    #[test]
    fn a_stopped_disk_job_gives_its_pending_fsync_then_end_fsync_then_done() {
        let spec = job("rw=write\nbs=4k\nfsync=1\nend_fsync=1\ntime_based\nruntime=1\n");
        let mut g = Generator::new(&spec, 0, GIB, 1).unwrap();
        assert!(matches!(g.next(0), Step::Io { .. }));
        g.stop();
        let rest: Vec<Step> = (0..4).map(|_| g.next(0)).collect();
        assert_eq!(rest, [Step::Fsync, Step::Fsync, Step::Done, Step::Done]);
    }

    #[test]
    fn end_fsync_comes_once_after_the_last_io() {
        let spec = job("rw=write\nbs=4k\nsize=16k\nend_fsync=1\n");
        let mut g = Generator::new(&spec, 0, 1 << 20, 1).unwrap();
        let seq: Vec<Step> = std::iter::from_fn(|| Some(g.next(0))).take(6).collect();
        assert!(matches!(seq[3], Step::Io { .. }));
        assert_eq!(seq[4], Step::Fsync);
        assert_eq!(seq[5], Step::Done);
    }

    #[test]
    fn fsync_follows_every_nth_write() {
        let spec = job("rw=randrw\nrwmixread=50\nfsync=3\nsize=400k\n");
        let mut g = Generator::new(&spec, 0, GIB, 4).unwrap();
        let mut writes_since = 0;
        let (mut fsyncs, mut writes) = (0, 0);
        loop {
            match g.next(0) {
                Step::Io { op: Op::Write, .. } => {
                    writes += 1;
                    writes_since += 1;
                    assert!(writes_since <= 3);
                }
                Step::Io { .. } => {}
                Step::Fsync => {
                    assert_eq!(writes_since, 3);
                    writes_since = 0;
                    fsyncs += 1;
                }
                Step::Done => break,
                s => panic!("a fio job on a disk never asks for {s:?}"),
            }
        }
        assert_eq!(fsyncs, writes / 3);
        assert_eq!(writes_since, writes % 3);
        let spec = job("rw=write\nfsync=2\nsize=16k\n");
        let mut g = Generator::new(&spec, 0, GIB, 4).unwrap();
        let kinds: Vec<char> = std::iter::from_fn(|| match g.next(0) {
            Step::Io { .. } => Some('W'),
            Step::Fsync => Some('F'),
            Step::Done => None,
            s => panic!("a fio job on a disk never asks for {s:?}"),
        })
        .collect();
        assert_eq!(kinds.iter().collect::<String>(), "WWFWWF");
    }

    #[test]
    fn size_io_size_and_number_ios_decide_when_to_stop() {
        let count = |text: &str| {
            let mut g = Generator::new(&job(text), 0, GIB, 1).unwrap();
            let n = ios(&mut g, 1 << 20).len();
            assert_eq!(g.next(0), Step::Done, "Done stays Done");
            n
        };
        assert_eq!(count("bs=4k\nsize=1m\n"), 256);
        assert_eq!(count("rw=randread\nbs=4k\nsize=1m\n"), 256);
        assert_eq!(
            count("bs=4k\nsize=1m\nio_size=3m\n"),
            768,
            "io_size wraps the region"
        );
        assert_eq!(count("bs=4k\nsize=1m\nnumber_ios=10\n"), 10);
        assert_eq!(count("bs=4k\nsize=1m\nio_size=8k\nnumber_ios=10\n"), 2);
        assert_eq!(
            count("bs=4k\nsize=1m\nnumber_ios=1000\n"),
            256,
            "number_ios only caps"
        );
        assert_eq!(
            count("bs=64k\nfilesize=1m\n"),
            16,
            "filesize stands in for size"
        );
        assert_eq!(
            count("bs=1m\noffset=1020m\n"),
            4,
            "default size: rest of the disk"
        );
        let mut g = Generator::new(&job("size=1m\ntime_based\nnumber_ios=5\n"), 0, GIB, 1).unwrap();
        assert_eq!(ios(&mut g, 10_000).len(), 10_000, "time_based never stops");
    }

    #[test]
    fn same_inputs_give_the_same_sequence_and_clones_differ() {
        let spec = job("rw=randrw\nbssplit=4k/50:16k/50\nnumjobs=2\nsize=64m\n");
        let run = |clone, seed| {
            let mut g = Generator::new(&spec, clone, GIB, seed).unwrap();
            ios(&mut g, 2000)
        };
        assert_eq!(run(0, 42), run(0, 42));
        assert_ne!(run(0, 42), run(1, 42));
        assert_ne!(run(0, 42), run(0, 43));
        assert_eq!(Generator::clones(&spec, GIB, 1).unwrap().len(), 2);
    }

    #[test]
    fn randseed_gives_the_same_offsets_to_different_jobs() {
        let a = job("rw=randread\nrandseed=7\nsize=64m\n");
        let mut b = job("rw=randread\nrandseed=7\nsize=64m\n");
        b.name = "other".to_string();
        let mut ga = Generator::new(&a, 0, GIB, 1).unwrap();
        let mut gb = Generator::new(&b, 0, GIB, 2).unwrap();
        assert_eq!(ios(&mut ga, 500), ios(&mut gb, 500));
    }

    #[test]
    fn bssplit_proportions_hold() {
        let spec = job("rw=randread\nbssplit=4k/10:64k/50:1m/\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 8).unwrap();
        let got = ios(&mut g, 100_000);
        for (bs, pct) in [(4 * KIB, 10.0), (64 * KIB, 50.0), (MIB, 40.0)] {
            let share = got.iter().filter(|x| x.2 == bs).count() as f64 / 1000.0;
            assert!((share - pct).abs() < 1.0, "{bs}: {share}% vs {pct}%");
        }
    }

    #[test]
    fn each_direction_draws_from_its_own_sizes() {
        let spec = job("rw=randrw\nbs=4k,64k\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 8).unwrap();
        for (op, off, len) in ios(&mut g, 1000) {
            assert_eq!(len, if op == Op::Read { 4 * KIB } else { 64 * KIB });
            assert_eq!(off % (4 * KIB), 0);
        }
    }

    #[test]
    fn bad_regions_and_block_sizes_are_errors_naming_the_job() {
        let e = Generator::new(&job("offset=2g\n"), 0, GIB, 1).unwrap_err();
        assert!(matches!(e, WorkloadError::EmptyRegion { .. }));
        assert!(
            e.to_string()
                .starts_with("job 'j' (line 1): region offset=2147483648"),
            "{e}"
        );
        let e = Generator::new(&job("offset=512m\nsize=1g\n"), 0, GIB, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "job 'j' (line 1): region offset=536870912 size=1073741824 ends beyond the disk of 1073741824 bytes; accepted: offset + size <= disk size"
        );
        let e = Generator::new(&job("size=0\n"), 0, GIB, 1).unwrap_err();
        assert!(matches!(e, WorkloadError::EmptyRegion { .. }), "{e}");
        let e = Generator::new(&job("numjobs=2\n"), 2, GIB, 1).unwrap_err();
        assert!(e.to_string().contains("accepted: 0 to 1"), "{e}");
        let mut spec = job("rw=write\n");
        spec.bs = BlockSizes {
            read: vec![],
            write: vec![(4096, 0)],
        };
        let e = Generator::new(&spec, 0, GIB, 1).unwrap_err();
        assert!(e.to_string().contains("write block sizes"), "{e}");
        spec.bs.write = vec![(4096, 100)];
        assert!(
            Generator::new(&spec, 0, GIB, 1).is_ok(),
            "unused reads may be empty"
        );
    }

    #[test]
    fn a_block_size_larger_than_the_region_is_an_error_as_in_fio() {
        let e = Generator::new(&job("rw=randread\nbs=1m\nsize=12k\n"), 0, GIB, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "job 'j' (line 1): bs=1048576 is larger than the job's region of 12288 bytes (fio: \"blocksize too large for data set\"); accepted: every block size (the largest of bs, bsrange, bssplit) <= size, and size <= the disk size minus offset"
        );
        // The largest of a bssplit counts; so does the disk when there is no size.
        let spec = job("rw=randwrite\nbssplit=4k/90:1m/10\n");
        assert!(matches!(
            Generator::new(&spec, 0, 512 * KIB, 1),
            Err(WorkloadError::BlockLargerThanRegion { bs_bytes: MIB, .. })
        ));
        // An unused direction does not.
        assert!(Generator::new(&job("rw=read\nbs=4k,1m\nsize=12k\n"), 0, GIB, 1).is_ok());
    }

    #[test]
    fn a_job_of_billions_of_ios_without_a_runtime_is_refused_with_the_count() {
        let e = Generator::new(&job("rw=randwrite\nbs=4\n"), 0, 30 * GIB, 1).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("job 'j' (line 1): would issue 8053063680 I/Os with no runtime"),
            "{e}"
        );
        // A runtime ends it; so does a smaller region.
        let timed = job("rw=randwrite\nbs=4\nruntime=1\n");
        assert!(Generator::new(&timed, 0, 30 * GIB, 1).is_ok());
        assert!(Generator::new(&job("rw=randwrite\nbs=4\n"), 0, GIB, 1).is_ok());
    }

    #[test]
    fn time_based_without_a_runtime_is_an_error_naming_the_job() {
        let e = check_ends(&job("rw=read\ntime_based\nruntime=0\n")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("job 'j' (line 1): time_based without a runtime would never end"),
            "{e}"
        );
        assert!(check_ends(&job("rw=read\ntime_based\nruntime=1\n")).is_ok());
        assert!(check_ends(&job("rw=read\n")).is_ok());
    }

    #[test]
    fn percentage_random_makes_that_share_of_ios_random_and_the_rest_follow_the_last() {
        let spec = job("rw=randread\nbs=4k\nsize=1g\npercentage_random=30\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 4).unwrap();
        let got = ios(&mut g, 100_000);
        // An I/O that starts where the previous ended is sequential (a random one lands
        // there once in 262,144).
        let follows = got.windows(2).filter(|w| w[1].1 == w[0].1 + w[0].2).count();
        let share = follows as f64 / (got.len() - 1) as f64;
        assert!((share - 0.7).abs() < 0.01, "{share}");
        // percentage_random=100 (fio's default) draws exactly the plain random sequence.
        let plain = job("rw=randread\nbs=4k\nsize=1g\ntime_based\n");
        let full = job("rw=randread\nbs=4k\nsize=1g\ntime_based\npercentage_random=100\n");
        let a = ios(&mut Generator::new(&plain, 0, GIB, 4).unwrap(), 1000);
        let b = ios(&mut Generator::new(&full, 0, GIB, 4).unwrap(), 1000);
        assert_eq!(a, b);
    }

    #[test]
    fn a_zoned_distribution_places_the_generators_offsets_in_its_zones() {
        let spec = job("rw=randrw\nbs=4k\noffset=1m\nsize=100m\nrandom_distribution=zoned:50/10:50/90,100/5\ntime_based\n");
        let mut g = Generator::new(&spec, 0, GIB, 4).unwrap();
        let got = ios(&mut g, 100_000);
        let (mut reads, mut reads_low) = (0, 0);
        for &(op, off, len) in &got {
            assert!(off >= MIB && off + len <= 101 * MIB && (off - MIB).is_multiple_of(4 * KIB));
            if op == Op::Read {
                reads += 1;
                reads_low += usize::from(off < 11 * MIB);
            } else {
                assert!(off < 6 * MIB, "writes go to the first 5 %: {off}");
            }
        }
        let share = reads_low as f64 / reads as f64;
        assert!((share - 0.5).abs() < 0.01, "{share}");
        let bad = job("rw=randread\nsize=1m\nrandom_distribution=zoned_abs:50/1m:50/1m\n");
        let e = Generator::new(&bad, 0, GIB, 1).unwrap_err();
        assert!(
            e.to_string().contains("zoned_abs sizes exceed file size"),
            "{e}"
        );
    }

    /// Every step of `g` until Done (at most `max`).
    fn steps(g: &mut Generator, max: usize) -> Vec<Step> {
        std::iter::from_fn(|| Some(g.next(0)))
            .take_while(|s| *s != Step::Done)
            .take(max)
            .collect()
    }

    fn io_list(steps: &[Step], want: Op) -> Vec<(u64, u64)> {
        steps
            .iter()
            .filter_map(|s| match *s {
                Step::Io {
                    op,
                    offset_bytes,
                    len_bytes,
                } if op == want => Some((offset_bytes, len_bytes)),
                _ => None,
            })
            .collect()
    }

    /// Steps as letters: W a write, R a read, - anything else.
    fn kinds(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|x| match x {
                Step::Io { op: Op::Write, .. } => 'W',
                Step::Io { op: Op::Read, .. } => 'R',
                _ => '-',
            })
            .collect()
    }

    #[test]
    fn verify_reads_back_every_write_in_write_order_after_a_drain() {
        let spec = job("rw=randwrite\nbssplit=4k/50:16k/50\nsize=4m\nverify=crc32c\n");
        let s = steps(&mut Generator::new(&spec, 0, GIB, 5).unwrap(), 100_000);
        let writes = io_list(&s, Op::Write);
        let reads = io_list(&s, Op::Read);
        assert_eq!(reads, writes, "the same blocks, in the order written");
        let drain = s.iter().position(|x| *x == Step::Drain).unwrap();
        assert_eq!(
            drain,
            writes.len(),
            "every write, then the drain, then the reads"
        );
        let bytes = |v: &[(u64, u64)]| v.iter().map(|x| x.1).sum::<u64>();
        assert!(bytes(&writes) >= 4 * MIB);
        // do_verify=0 (or no verify) reads nothing.
        let off = job("rw=randwrite\nsize=4m\nverify=crc32c\ndo_verify=0\n");
        let s = steps(&mut Generator::new(&off, 0, GIB, 5).unwrap(), 100_000);
        assert!(io_list(&s, Op::Read).is_empty());
        assert!(pace_notes(&off, false).is_empty());
        assert_eq!(
            pace_notes(&spec, true),
            ["job 'j': verify=crc32c on a filesystem's files is not modelled: no read-back phase"]
        );
    }

    #[test]
    fn verify_backlog_reads_each_batch_of_writes_as_it_fills_and_verify_only_just_reads() {
        let spec = job("rw=write\nbs=4k\nsize=64k\nverify=md5\nverify_backlog=4\n");
        let s = steps(&mut Generator::new(&spec, 0, GIB, 5).unwrap(), 1000);
        assert_eq!(kinds(&s), "WWWWRRRR".repeat(4));
        let only = job("rw=write\nbs=4k\nsize=64k\nverify=md5\nverify_only\n");
        let s = steps(&mut Generator::new(&only, 0, GIB, 5).unwrap(), 1000);
        assert!(io_list(&s, Op::Write).is_empty());
        assert_eq!(
            io_list(&s, Op::Read),
            (0..16).map(|i| (i * 4 * KIB, 4 * KIB)).collect::<Vec<_>>()
        );
        // A time_based job verifies after each pass of size.
        let timed = job("rw=write\nbs=4k\nsize=16k\nverify=crc32c\ntime_based\nruntime=1\n");
        let s = steps(&mut Generator::new(&timed, 0, GIB, 5).unwrap(), 20);
        assert_eq!(kinds(&s), "WWWW-RRRRWWWW-RRRRWW");
    }

    #[test]
    fn huge_disks_need_no_memory_per_block() {
        let spec = job("rw=randwrite\nbs=4k\ntime_based\n");
        let disk = 1u64 << 50;
        let mut g = Generator::new(&spec, 0, disk, 1).unwrap();
        for (_, off, len) in ios(&mut g, 10_000) {
            assert!(off + len <= disk);
        }
        assert!(std::mem::size_of::<Generator>() < 512);
    }
}
