//! The offsets of one region of a fio job: the job's span of a disk, or one file's `[offset,
//! offset + io size)` ([`super::fio_job`] draws from it on a disk, [`super::fio_files`] picks
//! among a job's file regions). fio keeps the same state per file (`last_pos`, the random map:
//! fio's `get_next_offset` and `fio_file_reset`).
//!
//! ```text
//! next(dir, bs):
//!   random = the job is random and (percentage_random >= 100 or a draw in 0..100 below it)
//!   off = sequential:  pos[dir]                 (one position per direction, fio's last_pos)
//!         distribution: start + draw.block(dir) * align    (non-uniform random_distribution)
//!         norandommap: start + uniform(0 ..= (size - bs) / align) * align
//!         random map:  start + perm.at(i++) * align, new permutation when a pass is done
//!   len = min(bs, end - off)                    (never cross the region end)
//!   pos[dir] = off + len when the job is sequential or percentage_random < 100; a
//!   sequential job goes back to start at the end (a new pass)
//!   a pass ended (sequential wrap, random map complete): the region is exhausted
//! reset: positions back at the start, a new random order at the next random draw
//! ```
//!
//! The random map is a keyed permutation of the region's `ceil(size / align)` blocks
//! (`workload::perm`): a pass visits every block start exactly once in O(1) memory.

use super::distribution::OffsetDraw;
use super::perm::Permutation;
use crate::request::Extent;
use crate::rng::Rng;

/// How offsets are drawn, the same for every region of a job.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pattern {
    pub(super) align: u64,
    pub(super) random: bool,
    pub(super) norandommap: bool,
    /// fio's `percentage_random` per direction [read, write].
    pub(super) perc_random: [u32; 2],
}

/// The offsets of one region: the job's span of a disk, or one file's `[offset, offset +
/// io size)` (fio keeps these per file: `last_pos`, the random map).
#[derive(Clone, Debug)]
pub(super) struct Region {
    start: u64,
    end: u64,
    /// Sequential positions, [read, write].
    pos: [u64; 2],
    perm: Permutation,
    perm_next: u64,
    blocks: u64,
    /// A non-uniform `random_distribution`'s draws (None: uniform).
    draw: Option<OffsetDraw>,
    /// The last I/O ended a pass (a sequential position wrapped, the random map is full).
    exhausted: bool,
}

impl Region {
    pub(super) fn new(
        start: u64,
        len: u64,
        align: u64,
        rng: &mut Rng,
        draw: Option<OffsetDraw>,
    ) -> Self {
        let blocks = len.div_ceil(align);
        Self {
            start,
            end: start + len,
            pos: [start, start],
            perm: Permutation::new(blocks, rng),
            perm_next: 0,
            blocks,
            draw,
            exhausted: false,
        }
    }

    /// The offset and length of an I/O of `bs` bytes in direction `dir` (module doc).
    #[inline]
    pub(super) fn next(
        &mut self,
        dir: usize,
        bs: u64,
        p: Pattern,
        rng: &mut Rng,
        choice: &mut Rng,
    ) -> (u64, u64) {
        // fio's should_do_random: a draw in 1..=100 at most percentage_random.
        let perc = p.perc_random[dir];
        let random = p.random && (perc >= 100 || choice.below(100) < u64::from(perc));
        let offset = if !random && self.pos[dir] < self.end {
            self.pos[dir]
        } else if let Some(draw) = &self.draw {
            self.start + draw.block(dir, rng) * p.align
        } else if p.norandommap {
            let room = (self.end - self.start).saturating_sub(bs) / p.align;
            self.start + rng.below(room + 1) * p.align
        } else {
            if self.perm_next == self.blocks {
                self.perm = Permutation::new(self.blocks, rng);
                self.perm_next = 0;
            }
            let block = self.perm.at(self.perm_next);
            self.perm_next += 1;
            self.exhausted |= self.perm_next == self.blocks;
            self.start + block * p.align
        };
        let len = bs.min(self.end - offset);
        if p.random && perc < 100 {
            // fio's last_pos follows every I/O: a sequential one continues from the last.
            self.pos[dir] = offset + len;
        } else if !p.random {
            let next = offset + len;
            self.pos[dir] = if next >= self.end {
                self.exhausted = true;
                self.start
            } else {
                next
            };
        }
        (offset, len)
    }

    /// The bytes the region spans.
    pub(super) fn extent(&self) -> Extent {
        Extent::new(self.start, self.end - self.start)
    }

    /// Whether the last I/O ended a pass over the region.
    pub(super) fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// A new pass (fio's `fio_file_reset`): positions back at the start, a new random order.
    pub(super) fn reset(&mut self) {
        self.pos = [self.start; 2];
        if self.perm_next > 0 {
            self.perm_next = self.blocks;
        }
        self.exhausted = false;
    }
}
