//! Which 4 KiB blocks of an image file are allocated, and which of those are written: the
//! state an extent tree encodes (a hole, an unwritten extent, a written extent), kept per
//! 1 MiB chunk so that a file of any size costs memory in proportion to its size in MiB, and
//! a chunk whose 256 blocks are in one state costs one enum (16 bytes).
//!
//! ```text
//! chunk c (blocks 256c .. 256c+255): Hole | Unwritten | Written     every block in that state
//!                                  | Mixed(alloc bits, written bits) 2 x 256 bits, boxed
//! state(b) = Hole if !alloc(b); Unwritten if alloc(b) & !written(b); Written otherwise
//! set(b, n, s): each block; a Mixed chunk that becomes uniform is folded back
//! extents: maximal runs of allocated blocks in one state (ext4 keeps a written and an
//!   unwritten run apart; ext4_can_extents_be_merged), counted incrementally: the runs of
//!   the window [b-1, b+n+1) before and after a change differ by what the change did,
//!   since the blocks on the window's edges keep their state
//! ```
//!
//! Memory: 16 bytes per MiB of file (4 MiB for 256 GiB), plus 64 bytes per chunk that holds
//! blocks in more than one state (20 MiB for 256 GiB if every chunk did).
//!
//! Left out: ext4 and XFS cap an extent's length (32768 blocks written, 32767 unwritten in
//! ext4: `EXT_INIT_MAX_LEN`, `EXT_UNWRITTEN_MAX_LEN`); a run longer than that is counted as
//! one extent, except in a new file's count ([`ExtentMap::new`]).

/// Blocks per chunk: 1 MiB of 4 KiB blocks.
pub const CHUNK_BLOCKS: u64 = 256;
const WORDS: usize = (CHUNK_BLOCKS / 64) as usize;
/// ext4's longest written extent (`EXT_INIT_MAX_LEN`), in blocks.
pub const MAX_EXTENT_BLOCKS: u64 = 32768;

/// The state of one block of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Not allocated: reads return zeros without I/O, a write allocates.
    Hole,
    /// Allocated as an unwritten extent (fallocate, or a write in flight): reads return
    /// zeros without I/O, a write converts it.
    Unwritten,
    Written,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Bits {
    alloc: [u64; WORDS],
    written: [u64; WORDS],
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunk {
    Uniform(BlockState),
    Mixed(Box<Bits>),
}

/// The allocation map of one file of `blocks` blocks.
#[derive(Clone, Debug)]
pub struct ExtentMap {
    blocks: u64,
    chunks: Vec<Chunk>,
    extents: u64,
}

impl ExtentMap {
    /// A file of `blocks` blocks, every one in `state` (its extents: none for a hole, else as
    /// many as the longest extent needs to cover it).
    pub fn new(blocks: u64, state: BlockState) -> Self {
        let chunks = vec![Chunk::Uniform(state); blocks.div_ceil(CHUNK_BLOCKS) as usize];
        let extents = match state {
            BlockState::Hole => 0,
            _ => blocks.div_ceil(MAX_EXTENT_BLOCKS),
        };
        ExtentMap {
            blocks,
            chunks,
            extents,
        }
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Extents of the file (runs of allocated blocks in one state).
    pub fn extents(&self) -> u64 {
        self.extents
    }

    /// Bytes this map holds (for memory estimates and the bounded-memory test).
    pub fn memory_bytes(&self) -> u64 {
        let boxed = self
            .chunks
            .iter()
            .filter(|c| matches!(c, Chunk::Mixed(_)))
            .count() as u64;
        self.chunks.capacity() as u64 * std::mem::size_of::<Chunk>() as u64
            + boxed * std::mem::size_of::<Bits>() as u64
    }

    pub fn get(&self, b: u64) -> BlockState {
        match &self.chunks[(b / CHUNK_BLOCKS) as usize] {
            Chunk::Uniform(s) => *s,
            Chunk::Mixed(bits) => {
                let i = (b % CHUNK_BLOCKS) as usize;
                let bit = 1u64 << (i % 64);
                match (
                    bits.alloc[i / 64] & bit != 0,
                    bits.written[i / 64] & bit != 0,
                ) {
                    (false, _) => BlockState::Hole,
                    (true, false) => BlockState::Unwritten,
                    (true, true) => BlockState::Written,
                }
            }
        }
    }

    /// Every block of `[b, b + n)` is in `state` (chunk by chunk: a uniform chunk answers
    /// at once).
    pub fn all(&self, b: u64, n: u64, state: BlockState) -> bool {
        let end = (b + n).min(self.blocks);
        let mut x = b;
        while x < end {
            let c = x / CHUNK_BLOCKS;
            let chunk_end = ((c + 1) * CHUNK_BLOCKS).min(end);
            match &self.chunks[c as usize] {
                Chunk::Uniform(s) if *s == state => {}
                Chunk::Uniform(_) => return false,
                Chunk::Mixed(_) => {
                    if (x..chunk_end).any(|y| self.get(y) != state) {
                        return false;
                    }
                }
            }
            x = chunk_end;
        }
        true
    }

    /// Blocks of `[b, b + n)` in `state`.
    pub fn count(&self, b: u64, n: u64, state: BlockState) -> u64 {
        let end = (b + n).min(self.blocks);
        let mut x = b;
        let mut k = 0;
        while x < end {
            let c = x / CHUNK_BLOCKS;
            let chunk_end = ((c + 1) * CHUNK_BLOCKS).min(end);
            match &self.chunks[c as usize] {
                Chunk::Uniform(s) => {
                    if *s == state {
                        k += chunk_end - x;
                    }
                }
                Chunk::Mixed(_) => {
                    k += (x..chunk_end).filter(|&y| self.get(y) == state).count() as u64
                }
            }
            x = chunk_end;
        }
        k
    }

    /// The maximal runs of `[b, b + n)` whose blocks are in `state`, in order, as
    /// (first block, blocks).
    pub fn runs(&self, b: u64, n: u64, state: BlockState, mut f: impl FnMut(u64, u64)) {
        let end = (b + n).min(self.blocks);
        let mut start = None;
        for y in b..end {
            match (self.get(y) == state, start) {
                (true, None) => start = Some(y),
                (false, Some(s)) => {
                    f(s, y - s);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            f(s, end - s);
        }
    }

    /// Runs of allocated blocks in one state within `[lo, hi)`.
    fn runs_in(&self, lo: u64, hi: u64) -> u64 {
        let mut runs = 0;
        let mut prev = BlockState::Hole;
        for y in lo..hi {
            let s = self.get(y);
            if s != BlockState::Hole && s != prev {
                runs += 1;
            }
            prev = s;
        }
        runs
    }

    /// Put `[b, b + n)` in `state`; returns how many of its blocks were in each state before
    /// (hole, unwritten, written).
    pub fn set(&mut self, b: u64, n: u64, state: BlockState) -> [u64; 3] {
        let end = (b + n).min(self.blocks);
        let before = [
            self.count(b, n, BlockState::Hole),
            self.count(b, n, BlockState::Unwritten),
            self.count(b, n, BlockState::Written),
        ];
        let idx = match state {
            BlockState::Hole => 0,
            BlockState::Unwritten => 1,
            BlockState::Written => 2,
        };
        if before[idx] == end.saturating_sub(b) {
            return before;
        }
        let (lo, hi) = (b.saturating_sub(1), (end + 1).min(self.blocks));
        let runs_before = self.runs_in(lo, hi);
        let mut x = b;
        while x < end {
            let c = x / CHUNK_BLOCKS;
            let chunk_start = c * CHUNK_BLOCKS;
            let chunk_end = ((c + 1) * CHUNK_BLOCKS).min(self.blocks);
            let to = chunk_end.min(end);
            let chunk = &mut self.chunks[c as usize];
            if x == chunk_start && to == chunk_end {
                *chunk = Chunk::Uniform(state);
            } else {
                if let Chunk::Uniform(s) = *chunk {
                    let (a, w) = match s {
                        BlockState::Hole => (0, 0),
                        BlockState::Unwritten => (u64::MAX, 0),
                        BlockState::Written => (u64::MAX, u64::MAX),
                    };
                    *chunk = Chunk::Mixed(Box::new(Bits {
                        alloc: [a; WORDS],
                        written: [w; WORDS],
                    }));
                }
                if let Chunk::Mixed(bits) = chunk {
                    for y in x..to {
                        let i = (y - chunk_start) as usize;
                        let bit = 1u64 << (i % 64);
                        let (a, w) = match state {
                            BlockState::Hole => (false, false),
                            BlockState::Unwritten => (true, false),
                            BlockState::Written => (true, true),
                        };
                        bits.alloc[i / 64] = if a {
                            bits.alloc[i / 64] | bit
                        } else {
                            bits.alloc[i / 64] & !bit
                        };
                        bits.written[i / 64] = if w {
                            bits.written[i / 64] | bit
                        } else {
                            bits.written[i / 64] & !bit
                        };
                    }
                    // Fold back to uniform when the chunk's live blocks agree.
                    let live = (chunk_end - chunk_start) as usize;
                    let all = |words: &[u64; WORDS], v: bool| {
                        (0..live).all(|i| (words[i / 64] >> (i % 64) & 1 == 1) == v)
                    };
                    let uniform = [BlockState::Hole, BlockState::Unwritten, BlockState::Written]
                        .into_iter()
                        .find(|s| {
                            let (a, w) = match s {
                                BlockState::Hole => (false, false),
                                BlockState::Unwritten => (true, false),
                                BlockState::Written => (true, true),
                            };
                            all(&bits.alloc, a) && all(&bits.written, w)
                        });
                    if let Some(s) = uniform {
                        *chunk = Chunk::Uniform(s);
                    }
                }
            }
            x = to;
        }
        let runs_after = self.runs_in(lo, hi);
        self.extents = (self.extents + runs_after).saturating_sub(runs_before);
        before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_into_a_hole_makes_one_extent_and_a_neighbouring_one_extends_it() {
        let mut m = ExtentMap::new(1024, BlockState::Hole);
        assert_eq!(m.set(10, 2, BlockState::Written), [2, 0, 0]);
        assert_eq!(m.extents(), 1);
        assert_eq!(m.set(12, 1, BlockState::Written), [1, 0, 0]);
        assert_eq!(m.extents(), 1);
        m.set(300, 1, BlockState::Written);
        assert_eq!(m.extents(), 2);
        assert_eq!(m.get(11), BlockState::Written);
        assert_eq!(m.get(13), BlockState::Hole);
        assert_eq!(m.count(0, 1024, BlockState::Written), 4);
    }

    #[test]
    fn converting_the_middle_of_an_unwritten_extent_splits_it_in_three() {
        let mut m = ExtentMap::new(1024, BlockState::Unwritten);
        assert_eq!(m.extents(), 1);
        assert_eq!(m.set(500, 4, BlockState::Written), [0, 4, 0]);
        assert_eq!(m.extents(), 3);
        m.set(504, 520, BlockState::Written);
        assert_eq!(m.extents(), 2);
        m.set(0, 500, BlockState::Written);
        assert_eq!(m.extents(), 1);
        assert!(m.all(0, 1024, BlockState::Written));
    }

    #[test]
    fn a_chunk_whose_blocks_agree_again_is_folded_back() {
        let mut m = ExtentMap::new(512, BlockState::Hole);
        m.set(3, 1, BlockState::Written);
        assert!(m.memory_bytes() > 2 * 16);
        m.set(0, 256, BlockState::Written);
        assert_eq!(m.memory_bytes(), 2 * std::mem::size_of::<Chunk>() as u64);
        let mut runs = Vec::new();
        m.runs(250, 10, BlockState::Written, |b, n| runs.push((b, n)));
        assert_eq!(runs, vec![(250, 6)]);
    }
}
