//! The guest's ext4 filesystem on disk: where mke2fs 1.47 puts every structure ([`Layout`]) and
//! how Linux 6.x allocates inodes and blocks in the mounted filesystem ([`Ext4`]). Pure data
//! structures: no clock, no I/O. Every operation reports the metadata blocks it dirties so the
//! journal layer can log them.
//!
//! # Sources
//!
//! - e2fsprogs 1.47.0 (the version installed with this project's test tools):
//!   `misc/mke2fs.conf` defaults (4096-byte blocks, `inode_size = 256`, `inode_ratio = 16384`,
//!   ext4 features `has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,
//!   extra_isize` on `sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr`);
//!   `misc/mke2fs.c` (size types; the inode count `blocks * blocksize / inode_ratio`;
//!   `flex_bg_size` 16; `create_root_dir`, `create_lost_and_found` (16 KiB), then
//!   `ext2fs_create_resize_inode`, then the journal); `misc/util.c` `figure_journal_size`
//!   (a requested journal of 1024 to 10 240 000 blocks and at most half the free blocks);
//!   `lib/ext2fs/initialize.c` `ext2fs_initialize` (inodes per group rounded to fill whole inode
//!   table blocks and to a multiple of 8; a last group smaller than its overhead + 50 blocks is
//!   dropped) and `calc_reserved_gdt_blocks` (GDT blocks for growth to 1024 × the size, at most
//!   2^32 blocks, capped at 1024); `lib/ext2fs/alloc_tables.c` `ext2fs_allocate_group_table` and
//!   `flexbg_offset` (flex_bg placement); `lib/ext2fs/mkjournal.c` `ext2fs_default_journal_size`,
//!   `get_midpoint_journal_block`, `write_journal_inode`; `lib/ext2fs/alloc.c`
//!   `ext2fs_new_block3` (first free block at or after the goal, then from the start);
//!   `lib/ext2fs/extent.c` `extent_node_split` (a new extent block goes just before the first
//!   extent).
//! - Linux: `fs/ext4/ialloc.c` `find_group_orlov`, `find_group_other`, `ext4_new_inode` (the
//!   lowest free inode of the chosen group); `fs/ext4/balloc.c` `ext4_inode_to_goal_block`;
//!   `fs/ext4/extents.c` `ext4_ext_find_goal`, `ext4_can_extents_be_merged` (`EXT_INIT_MAX_LEN`
//!   32768), `ext4_ext_new_meta_block`; `fs/ext4/mballoc.c` `ext4_mb_new_blocks`,
//!   `ext4_mb_mark_diskspace_used` (a block bitmap and a group descriptor per group touched);
//!   `fs/ext4/orphan.c` `ext4_orphan_add` / `ext4_orphan_del` (the superblock's `s_last_orphan`
//!   on unlink and truncate, without the `orphan_file` feature, which mke2fs.conf 1.47.0 does not
//!   enable); `fs/ext4/namei.c` (`ext4_append`: directory blocks allocated at once, not delayed).
//!
//! # mke2fs, as modelled (4096-byte blocks, 32768 blocks per group, 64-byte descriptors)
//!
//! ```text
//! blocks  = size / 4096;  inodes = blocks * 4096 / inode_ratio
//! loop: groups = ceil(blocks / 32768); desc_blocks = ceil(groups / 64)
//!       ipg = ceil(inodes / groups), rounded up to fill whole table blocks, then down to a multiple of 8
//!       rsv_gdt = min(1024, ceil(ceil(min(blocks*1024, 2^32-1) / 32768) / 64) - desc_blocks)
//!       last group shorter than 2 + itable (+ 1 + desc + rsv_gdt with a backup) + 50: drop it
//! backup superblocks (sparse_super): groups 0, 1 and powers of 3, 5, 7; each holds
//!       1 superblock + desc_blocks + rsv_gdt blocks at the group's start
//! flex group s (s = g & !(flex-1)), rem = groups in it, T = flex (last flex group: rem,
//!       or flex when it has one group): base = first block after s's superblock copy;
//!       block bitmap(g) = base + g-s; inode bitmap(g) = base + T + g-s;
//!       inode table(g) = base + 2T + (g-s) * itable_blocks
//! root dir 1 block, lost+found 4 blocks, resize inode's DIND 1 block: first free blocks
//! journal: goal group = group of blocks/2; with flex_bg and goal > flex: round down to the
//!       flex group start (skip full groups), else one group before; take the freest of it and
//!       the next group; allocate from that group's first block, first fit, extents of at most
//!       32768 blocks; more than 4 extents: one extent block at (first journal block - 1)
//! ```
//!
//! Default journal size (`ext2fs_default_journal_size`, blocks of 4 KiB): < 2048 blocks none;
//! < 128 MiB 1024; < 1 GiB 4096; < 2 GiB 8192; < 16 GiB 16384; < 32 GiB 32768; < 64 GiB 65536;
//! < 128 GiB 131072; else 262144 (1 GiB).
//!
//! Checked against the real tools: a test runs `mkfs.ext4` on sparse images (default options at
//! 700 MiB, 1 GiB, 5 GiB + 100 KiB, 16, 100 and 200 GiB; flex_bg 4 and 1, 512-byte inodes, a
//! requested journal) and compares block count, reserved GDT blocks, inodes per group, free
//! blocks, the bitmaps and inode tables of groups 0, 1, 15, 16, 17 and the last
//! (`dumpe2fs`), the journal's extents and extent block, root, lost+found and the resize inode
//! (`debugfs`).
//!
//! Memory is O(groups + files + extents): a free-extent tree, counts per group and flex group,
//! and per inode its extents; inode numbers come from a per-group high-water mark and a set of
//! freed ones.
//!
//! Kept as mke2fs does it for the default options; not modelled: the 1 KiB blocks and
//! `inode_ratio = 4096` mke2fs picks for filesystems under 512 MiB ("small", "floppy": this model
//! keeps 4 KiB blocks, as `mkfs.ext4 -b 4096 -T default`), meta_bg, bigalloc, fast_commit,
//! sparse_super2, filesystems of 2^32 blocks (16 TiB) or more.
//!
//! # The mounted filesystem, as modelled
//!
//! ```text
//! mkdir(parent):   group = find_group_orlov (top-level dirs: spread from a pseudo-random start
//!                  (Linux: the name's hash) over flex groups with >= average free inodes and blocks, fewest dirs; others
//!                  near the parent's last allocation); ino = lowest free inode of the group
//!                  dirty: inode bitmap, group desc, new inode's table block, new dir block
//!                  (+ its bitmap, desc), parent's dir block for the entry, parent's inode
//! create(dir):     group = find_group_other (first group of the dir's flex group with a free
//!                  inode, then the dir's last allocation group, then Orlov)
//!                  dirty: inode bitmap, group desc, inode table block, dir block, dir inode
//! allocate(ino, lblk, n)  (delayed allocation, at writeback):
//!                  for each unmapped run: goal = ext4_ext_find_goal (the nearest extent's pblk
//!                  + distance), else ext4_inode_to_goal_block (flex group start; regular files
//!                  one group further when flex_bg >= 4); first fit at or after the goal,
//!                  wrapping; extents merged with neighbours up to 32768 blocks
//!                  dirty: block bitmap + group desc per group touched, the inode, the extent
//!                  leaf holding the change; new extent blocks when the count needs them
//! unlink(ino):     dirty: dir block of the entry, dir inode, superblock (orphan list), inode
//!                  table block, inode bitmap + desc, block bitmap + desc per group freed
//! ```
//!
//! Extent tree: 4 extents in the inode; beyond, leaf blocks of 340 extents ((4096 - 12) / 12),
//! and index blocks of 340 entries above more than 4 leaves; blocks counted as if full
//! (Linux's splits leave leaves partly empty after inserts in the middle).
//!
//! Directories: entries of [`DIRENT_BYTES`] (8-byte header + an 8-byte name, `ext4_dir_entry_2`
//! rounded to 4), a 12-byte checksum tail per block (metadata_csum): [`DIRENTS_PER_BLOCK`] = 255
//! per block, "." and ".." count as two. A new entry takes the lowest free slot (first fit, as a
//! linear directory does); a full directory grows one block, allocated at once near the
//! directory. Not modelled: htree (dir_index) hashing of entries over leaf blocks.
//!
//! mballoc, as modelled: the goal, then the first free block at or after it (a free-extent tree,
//! O(log n) per run). A run may continue into the next group where the blocks are contiguous:
//! mballoc stops each request at the group's end, but the next request's goal is the following
//! block and the two extents merge, so the result is the same. Not modelled: buddy-order
//! criteria (cr0..cr3), request normalisation, inode and locality-group preallocation (small
//! files packed in per-CPU 512-block windows), deferred reuse of blocks freed in the running
//! transaction. The superblock is dirtied only
//! where Linux journals it (the orphan list); free counts live in group descriptors and
//! per-CPU counters.

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

use crate::rng::Rng;

/// Bytes per filesystem block (mke2fs.conf `blocksize = 4096`).
pub const BLOCK_BYTES: u64 = 4096;
/// Blocks per block group: one bitmap block's bits (`blocksize * 8`).
pub const BLOCKS_PER_GROUP: u64 = BLOCK_BYTES * 8;
/// Group descriptor size with the 64bit feature (`EXT2_MIN_DESC_SIZE_64BIT`).
pub const DESC_BYTES: u64 = 64;
const DESCS_PER_BLOCK: u64 = BLOCK_BYTES / DESC_BYTES;
/// Block pointers per block: the cap on reserved GDT blocks (`EXT2_ADDR_PER_BLOCK`).
const ADDR_PER_BLOCK: u64 = BLOCK_BYTES / 4;
/// The root directory's inode.
pub const ROOT_INO: u32 = 2;
/// The journal's inode.
pub const JOURNAL_INO: u32 = 8;
/// lost+found, the first non-reserved inode (`EXT2_GOOD_OLD_FIRST_INO`).
pub const LOST_FOUND_INO: u32 = 11;
/// lost+found's size: mke2fs expands it to 16 KiB (`create_lost_and_found`).
const LOST_FOUND_BLOCKS: u64 = 4;
/// Longest initialized extent (`EXT_INIT_MAX_LEN`).
pub const MAX_EXTENT_BLOCKS: u64 = 32768;
/// Extents held in the inode's `i_block` (60 bytes: a 12-byte header and 4 entries of 12).
const INODE_EXTENTS: u64 = 4;
/// Extents (or index entries) per extent block: (4096 - 12-byte header) / 12, less the tail.
const EXTENTS_PER_BLOCK: u64 = 340;
/// A directory entry with a short name: 8-byte header (`inode`, `rec_len`, `name_len`,
/// `file_type`) and an 8-byte name, rounded to 4 (`EXT4_DIR_REC_LEN`).
pub const DIRENT_BYTES: u64 = 16;
/// The metadata_csum tail of a directory block (`struct ext4_dir_entry_tail`).
const DIR_TAIL_BYTES: u64 = 12;
/// Entries per directory block.
pub const DIRENTS_PER_BLOCK: u64 = (BLOCK_BYTES - DIR_TAIL_BYTES) / DIRENT_BYTES;
/// Smallest filesystem with a journal (`ext2fs_default_journal_size` returns -1 below).
const MIN_JOURNAL_FS_BLOCKS: u64 = 2048;
/// A requested journal's bounds (`figure_journal_size`).
const MIN_JOURNAL_BLOCKS: u64 = 1024;
const MAX_JOURNAL_BLOCKS: u64 = 10_240_000;
/// Filesystems of 2^32 blocks and more are not modelled (meta_bg, "huge" usage type).
const MAX_FS_BLOCKS: u64 = 1 << 32;
/// mke2fs's "big" usage type (`inode_ratio = 32768`) starts at 4 TiB.
const BIG_FS_BYTES: u64 = 4 << 40;
/// With this many groups per flex group or more, regular files start in the flex group's second
/// group (`EXT4_FLEX_SIZE_DIR_ALLOC_SCHEME`).
const FLEX_SIZE_DIR_ALLOC_SCHEME: u32 = 4;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Ext4Error {
    #[error("filesystem size: {size_bytes} bytes leaves {blocks} blocks of 4 KiB; ext4 with a journal needs at least 2048 blocks (8 MiB)")]
    TooSmall { size_bytes: u64, blocks: u64 },
    #[error(
        "filesystem size: {size_bytes} bytes; accepted: less than 16 TiB (2^32 blocks of 4 KiB)"
    )]
    TooBig { size_bytes: u64 },
    #[error("journal_blocks: {blocks}; accepted: 1024 to 10240000 blocks and at most half of the {free} free blocks")]
    JournalSize { blocks: u64, free: u64 },
    #[error("flex_bg: {0}; accepted: a power of two from 1 to 2^31")]
    FlexBg(u32),
    #[error("inode_size: {0}; accepted: a power of two from 128 to 4096")]
    InodeSize(u32),
    #[error("inode_ratio: {0}; accepted: 4096 to 67108864 bytes per inode")]
    InodeRatio(u64),
    #[error("inode_ratio / inode_size / flex_bg: the bitmaps and inode tables of flex group {group} need {need} blocks, more than the {room} left in its first block group; raise inode_ratio, or lower inode_size or flex_bg")]
    TablesOverflow { group: u32, need: u64, room: u64 },
    #[error("no space left on device: {want} blocks wanted, {free} free")]
    NoSpace { want: u64, free: u64 },
    #[error("no free inode left: all {inodes} inodes are in use")]
    NoInodes { inodes: u64 },
    #[error("inode {0} is not in use")]
    NoInode(u32),
    #[error("inode {0} is not a directory")]
    NotDir(u32),
    #[error("directory inode {0} is not empty")]
    NotEmpty(u32),
    #[error("inode {0} is the root or the journal and cannot be unlinked")]
    Reserved(u32),
}

/// What mkfs.ext4 is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MkfsOptions {
    pub size_bytes: u64,
    /// None = `ext2fs_default_journal_size`.
    pub journal_blocks: Option<u64>,
    /// Groups per flex group (`-G`, mke2fs default 16).
    pub flex_bg: u32,
    /// Bytes per inode (`-i`, mke2fs.conf 16384; 32768 from 4 TiB, the "big" type).
    pub inode_ratio: u64,
    /// Inode size in bytes (`-I`, mke2fs.conf 256).
    pub inode_size: u32,
}

impl MkfsOptions {
    /// mke2fs's defaults for a filesystem of `size_bytes`.
    pub fn new(size_bytes: u64) -> Self {
        Self {
            size_bytes,
            journal_blocks: None,
            flex_bg: 16,
            inode_ratio: if size_bytes < BIG_FS_BYTES {
                16384
            } else {
                32768
            },
            inode_size: 256,
        }
    }
}

/// One run of a file: logical blocks `lblk..lblk+len` at physical `pblk..pblk+len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub lblk: u64,
    pub pblk: u64,
    pub len: u64,
}

/// One piece of a [`Ext4::map`] answer: `pblk` None is a hole (or not yet allocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    pub lblk: u64,
    pub len: u64,
    pub pblk: Option<u64>,
}

/// Where mke2fs put everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub blocks: u64,
    pub blocks_per_group: u64,
    pub groups: u32,
    pub flex_bg: u32,
    pub inodes_per_group: u32,
    pub inode_size: u32,
    /// Inode table blocks per group.
    pub inode_table_blocks: u64,
    /// Blocks of the group descriptor table (64 descriptors a block).
    pub desc_blocks: u64,
    /// GDT blocks reserved for online growth (resize_inode), after each superblock copy.
    pub reserved_gdt_blocks: u64,
    pub root_dir_block: u64,
    /// First of lost+found's 4 blocks.
    pub lost_found_block: u64,
    /// The resize inode's double-indirect block.
    pub resize_block: u64,
    pub journal_start: u64,
    pub journal_blocks: u64,
    /// The journal inode's extents, in logical order.
    pub journal_extents: Vec<Extent>,
    /// The journal's extent block, when it has more than 4 extents.
    pub journal_tree_block: Option<u64>,
}

impl Layout {
    /// The filesystem `mkfs.ext4` makes with these options.
    pub fn mkfs(opts: &MkfsOptions) -> Result<Layout, Ext4Error> {
        if opts.flex_bg == 0 || !opts.flex_bg.is_power_of_two() || opts.flex_bg > 1 << 31 {
            return Err(Ext4Error::FlexBg(opts.flex_bg));
        }
        if !(128..=BLOCK_BYTES as u32).contains(&opts.inode_size)
            || !opts.inode_size.is_power_of_two()
        {
            return Err(Ext4Error::InodeSize(opts.inode_size));
        }
        if !(BLOCK_BYTES..=64 << 20).contains(&opts.inode_ratio) {
            return Err(Ext4Error::InodeRatio(opts.inode_ratio));
        }
        let mut blocks = opts.size_bytes / BLOCK_BYTES;
        if blocks >= MAX_FS_BLOCKS {
            return Err(Ext4Error::TooBig {
                size_bytes: opts.size_bytes,
            });
        }
        let too_small = Ext4Error::TooSmall {
            size_bytes: opts.size_bytes,
            blocks,
        };
        if blocks < MIN_JOURNAL_FS_BLOCKS {
            return Err(too_small);
        }
        let inodes = blocks * BLOCK_BYTES / opts.inode_ratio;
        let isz = opts.inode_size as u64;
        let mut geo = loop {
            let groups = blocks.div_ceil(BLOCKS_PER_GROUP);
            if groups == 0 {
                return Err(too_small);
            }
            let desc_blocks = groups.div_ceil(DESCS_PER_BLOCK);
            let mut ipg = inodes.div_ceil(groups);
            if ipg > BLOCKS_PER_GROUP {
                return Err(Ext4Error::InodeRatio(opts.inode_ratio));
            }
            let itb = (ipg * isz).div_ceil(BLOCK_BYTES);
            ipg = (itb * BLOCK_BYTES / isz).max(8) & !7;
            let itb = (ipg * isz).div_ceil(BLOCK_BYTES);
            let max_blocks = if blocks < 0xffff_ffff / 1024 {
                blocks * 1024
            } else {
                0xffff_ffff
            };
            let rsv = (max_blocks
                .div_ceil(BLOCKS_PER_GROUP)
                .div_ceil(DESCS_PER_BLOCK))
            .saturating_sub(desc_blocks)
            .min(ADDR_PER_BLOCK);
            let geo = Layout {
                blocks,
                blocks_per_group: BLOCKS_PER_GROUP,
                groups: groups as u32,
                flex_bg: opts.flex_bg,
                inodes_per_group: ipg as u32,
                inode_size: opts.inode_size,
                inode_table_blocks: itb,
                desc_blocks,
                reserved_gdt_blocks: rsv,
                root_dir_block: 0,
                lost_found_block: 0,
                resize_block: 0,
                journal_start: 0,
                journal_blocks: 0,
                journal_extents: Vec::new(),
                journal_tree_block: None,
            };
            let last = geo.groups - 1;
            let overhead = 2 + itb + geo.super_blocks(last);
            let rem = blocks % BLOCKS_PER_GROUP;
            if groups == 1 && rem > 0 && rem < overhead {
                return Err(too_small);
            }
            if rem > 0 && rem < overhead + 50 {
                blocks -= rem;
                continue;
            }
            break geo;
        };
        if geo.blocks < MIN_JOURNAL_FS_BLOCKS {
            return Err(too_small);
        }
        for s in (0..geo.groups).step_by(geo.flex_bg as usize) {
            let need = geo.tables_end(s) - geo.tables_base(s);
            let room = geo.group_start(s) + geo.group_len(s) - geo.tables_base(s);
            if need > room {
                return Err(Ext4Error::TablesOverflow {
                    group: s,
                    need,
                    room,
                });
            }
        }
        let mut space = Space::new(&geo);
        geo.root_dir_block = space.alloc_one(0);
        geo.lost_found_block = space.alloc_one(0);
        for _ in 1..LOST_FOUND_BLOCKS {
            space.alloc_one(0);
        }
        geo.resize_block = space.alloc_one(0);
        let journal = match opts.journal_blocks {
            None => Self::default_journal_blocks(geo.blocks),
            Some(j) => {
                if !(MIN_JOURNAL_BLOCKS..=MAX_JOURNAL_BLOCKS).contains(&j) || j > space.total / 2 {
                    return Err(Ext4Error::JournalSize {
                        blocks: j,
                        free: space.total,
                    });
                }
                j
            }
        };
        let goal = geo.group_start(geo.midpoint_journal_group(&space.group_free));
        let runs = space.alloc(goal, journal)?;
        geo.journal_extents = to_extents(0, &runs);
        geo.journal_start = runs[0].0;
        geo.journal_blocks = journal;
        if geo.journal_extents.len() as u64 > INODE_EXTENTS {
            geo.journal_tree_block = Some(space.alloc_one(geo.journal_start.saturating_sub(1)));
        }
        Ok(geo)
    }

    /// `ext2fs_default_journal_size`: the journal mke2fs makes for a filesystem of `fs_blocks`
    /// blocks of 4 KiB; 0 below 2048 blocks (mke2fs: "Filesystem too small for a journal").
    pub fn default_journal_blocks(fs_blocks: u64) -> u64 {
        const TABLE: [(u64, u64); 8] = [
            (2048, 0),
            (32768, 1024),
            (256 * 1024, 4096),
            (512 * 1024, 8192),
            (4096 * 1024, 16384),
            (8192 * 1024, 32768),
            (16384 * 1024, 65536),
            (32768 * 1024, 131072),
        ];
        TABLE
            .iter()
            .find(|(below, _)| fs_blocks < *below)
            .map_or(262144, |&(_, j)| j)
    }

    /// Total inodes.
    pub fn inodes(&self) -> u64 {
        self.groups as u64 * self.inodes_per_group as u64
    }

    /// Whether group `g` holds a superblock copy (sparse_super: 0, 1 and powers of 3, 5, 7).
    pub fn has_super(&self, g: u32) -> bool {
        fn power_of(mut g: u32, base: u32) -> bool {
            while g > 1 && g.is_multiple_of(base) {
                g /= base;
            }
            g == 1
        }
        g == 0 || power_of(g, 3) || power_of(g, 5) || power_of(g, 7)
    }

    pub fn group_start(&self, g: u32) -> u64 {
        g as u64 * self.blocks_per_group
    }

    /// Blocks in group `g` (the last may be short).
    pub fn group_len(&self, g: u32) -> u64 {
        (self.blocks - self.group_start(g)).min(self.blocks_per_group)
    }

    /// The group holding `block`.
    pub fn group_of(&self, block: u64) -> u32 {
        (block / self.blocks_per_group) as u32
    }

    /// Superblock + GDT + reserved GDT blocks at the start of group `g` (0 without a copy).
    fn super_blocks(&self, g: u32) -> u64 {
        if self.has_super(g) {
            1 + self.desc_blocks + self.reserved_gdt_blocks
        } else {
            0
        }
    }

    fn flex_start(&self, g: u32) -> u32 {
        g & !(self.flex_bg - 1)
    }

    /// Groups in the flex group starting at `s`.
    fn flex_groups(&self, s: u32) -> u32 {
        self.flex_bg.min(self.groups - s)
    }

    /// The distance between the flex group's block bitmaps, inode bitmaps and inode tables
    /// (`table_offset` of `ext2fs_allocate_group_table`).
    fn table_offset(&self, s: u32) -> u64 {
        let last = (s | (self.flex_bg - 1)).min(self.groups - 1);
        if last != self.groups - 1 {
            return self.flex_bg as u64;
        }
        match (last & (self.flex_bg - 1)) as u64 {
            0 => self.flex_bg as u64,
            t => t + 1,
        }
    }

    fn tables_base(&self, s: u32) -> u64 {
        self.group_start(s) + self.super_blocks(s)
    }

    fn tables_end(&self, s: u32) -> u64 {
        self.tables_base(s)
            + 2 * self.table_offset(s)
            + self.flex_groups(s) as u64 * self.inode_table_blocks
    }

    pub fn block_bitmap(&self, group: u32) -> u64 {
        let s = self.flex_start(group);
        self.tables_base(s) + (group - s) as u64
    }

    pub fn inode_bitmap(&self, group: u32) -> u64 {
        let s = self.flex_start(group);
        self.tables_base(s) + self.table_offset(s) + (group - s) as u64
    }

    /// The first block of group `group`'s inode table.
    pub fn inode_table(&self, group: u32) -> u64 {
        let s = self.flex_start(group);
        self.tables_base(s)
            + 2 * self.table_offset(s)
            + (group - s) as u64 * self.inode_table_blocks
    }

    /// The group holding inode `ino` (1-based).
    pub fn inode_group(&self, ino: u32) -> u32 {
        (ino - 1) / self.inodes_per_group
    }

    /// The block holding inode `ino` (1-based).
    pub fn inode_table_block(&self, ino: u32) -> u64 {
        let index = ((ino - 1) % self.inodes_per_group) as u64;
        self.inode_table(self.inode_group(ino)) + index * self.inode_size as u64 / BLOCK_BYTES
    }

    /// The primary GDT block holding group `group`'s descriptor.
    pub fn group_desc_block(&self, group: u32) -> u64 {
        1 + group as u64 / DESCS_PER_BLOCK
    }

    /// The metadata runs (start, len) inside group `g`, in block order.
    fn used_runs(&self, g: u32) -> Vec<(u64, u64)> {
        let mut runs = Vec::with_capacity(4);
        if self.has_super(g) {
            runs.push((self.group_start(g), self.super_blocks(g)));
        }
        if self.flex_start(g) == g {
            let (base, t, n) = (
                self.tables_base(g),
                self.table_offset(g),
                self.flex_groups(g),
            );
            runs.push((base, n as u64));
            runs.push((base + t, n as u64));
            runs.push((base + 2 * t, n as u64 * self.inode_table_blocks));
        }
        runs
    }

    /// `get_midpoint_journal_block`'s group, from the groups' free block counts.
    fn midpoint_journal_group(&self, free: &[u64]) -> u32 {
        let mut group = self.group_of(self.blocks / 2);
        let start;
        if self.flex_bg > 1 && group > self.flex_bg {
            group &= !(self.flex_bg - 1);
            while group < self.groups && free[group as usize] == 0 {
                group += 1;
            }
            if group == self.groups {
                group = 0;
            }
            start = group;
        } else {
            start = group.saturating_sub(1);
        }
        let end = if group + 1 < self.groups {
            group + 1
        } else {
            group
        };
        let mut best = start;
        for g in start + 1..=end {
            if free[g as usize] > free[best as usize] {
                best = g;
            }
        }
        best
    }

    /// The filesystem block holding block `i` of the journal.
    pub fn journal_block(&self, i: u64) -> Option<u64> {
        self.journal_extents
            .iter()
            .find(|e| i >= e.lblk && i < e.lblk + e.len)
            .map(|e| e.pblk + (i - e.lblk))
    }
}

/// Splits physical runs into extents of at most [`MAX_EXTENT_BLOCKS`] from logical `lblk`.
fn to_extents(lblk: u64, runs: &[(u64, u64)]) -> Vec<Extent> {
    let mut out = Vec::new();
    for_extents(lblk, runs, |e| {
        out.push(e);
        Ok(())
    })
    .expect("pushing never fails");
    out
}

/// [`to_extents`]'s extents, in order, given to `f` (stops at its first error).
fn for_extents(
    mut lblk: u64,
    runs: &[(u64, u64)],
    mut f: impl FnMut(Extent) -> Result<(), Ext4Error>,
) -> Result<(), Ext4Error> {
    for &(mut pblk, mut len) in runs {
        while len > 0 {
            let n = len.min(MAX_EXTENT_BLOCKS);
            f(Extent { lblk, pblk, len: n })?;
            (lblk, pblk, len) = (lblk + n, pblk + n, len - n);
        }
    }
    Ok(())
}

/// Largest chunk of [`Runs`]: a full one splits in two.
const RUN_CHUNK: usize = 128;

/// The free runs as (end, start) pairs sorted by end, in chunks of at most [`RUN_CHUNK`]
/// (a two-level sorted vector; each chunk's last end is kept apart for the search). A look-up
/// is two binary searches over contiguous keys, a change in place writes one entry, and an
/// insertion or removal moves at most a chunk's entries: where a B-tree walks and rebalances
/// nodes for a map of a few hundred runs (varmail's 30 GiB filesystem keeps about 70), and a
/// single sorted vector would move half the map on every insertion when free space is very
/// fragmented.
///
/// ```text
/// at_or_after(k): c = first chunk whose last end >= k; i = first entry of c with end >= k
/// insert(pos, e): chunk.insert(i, e); if chunk.len > RUN_CHUNK: split it in halves
/// remove(pos):    chunk.remove(i); drop the chunk if it emptied
/// ```
#[derive(Clone, Debug, Default)]
struct Runs {
    chunks: Vec<Vec<(u64, u64)>>,
    /// The last end of each chunk (chunks are never empty).
    lasts: Vec<u64>,
}

/// A place in [`Runs`]: entry `i` of chunk `c` (`i` may be the chunk's length only for an
/// insertion after the last entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RunPos {
    c: usize,
    i: usize,
}

impl Runs {
    /// The first entry whose end is at least `end`, else where an entry of that end would go
    /// (Err: after the last entry, or the empty map's place).
    #[inline]
    fn at_or_after(&self, end: u64) -> Result<RunPos, RunPos> {
        let c = self.lasts.partition_point(|&l| l < end);
        if c == self.chunks.len() {
            let c = c.saturating_sub(1);
            let i = self.chunks.get(c).map_or(0, Vec::len);
            return Err(RunPos { c, i });
        }
        let i = self.chunks[c].partition_point(|&(e, _)| e < end);
        Ok(RunPos { c, i })
    }

    #[inline]
    fn get(&self, p: RunPos) -> (u64, u64) {
        self.chunks[p.c][p.i]
    }

    /// The entry after `p`, if any.
    #[inline]
    fn next(&self, p: RunPos) -> Option<RunPos> {
        if p.i + 1 < self.chunks[p.c].len() {
            Some(RunPos { c: p.c, i: p.i + 1 })
        } else if p.c + 1 < self.chunks.len() {
            Some(RunPos { c: p.c + 1, i: 0 })
        } else {
            None
        }
    }

    fn first(&self) -> Option<(u64, u64)> {
        self.chunks.first().map(|ch| ch[0])
    }

    /// Replace the entry at `p` by one that sorts at the same place.
    #[inline]
    fn set(&mut self, p: RunPos, run: (u64, u64)) {
        let ch = &mut self.chunks[p.c];
        ch[p.i] = run;
        if p.i + 1 == ch.len() {
            self.lasts[p.c] = run.0;
        }
    }

    /// Insert `run` at `p` (it sorts there).
    fn insert(&mut self, p: RunPos, run: (u64, u64)) {
        if self.chunks.is_empty() {
            self.chunks.push(vec![run]);
            self.lasts.push(run.0);
            return;
        }
        let ch = &mut self.chunks[p.c];
        ch.insert(p.i, run);
        if p.i + 1 == ch.len() {
            self.lasts[p.c] = run.0;
        }
        if ch.len() > RUN_CHUNK {
            let tail = ch.split_off(ch.len() / 2);
            let last = ch[ch.len() - 1].0;
            self.lasts[p.c] = last;
            self.lasts.insert(p.c + 1, tail[tail.len() - 1].0);
            self.chunks.insert(p.c + 1, tail);
        }
    }

    /// Remove the entry at `p`.
    fn remove(&mut self, p: RunPos) {
        let ch = &mut self.chunks[p.c];
        ch.remove(p.i);
        if ch.is_empty() {
            self.chunks.remove(p.c);
            self.lasts.remove(p.c);
        } else if p.i == ch.len() {
            self.lasts[p.c] = ch[ch.len() - 1].0;
        }
    }

    /// Every (end, start) pair in order.
    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.chunks.iter().flatten().copied()
    }
}

/// Free space: a tree of free runs and free counts per group and flex group.
///
/// The runs are keyed by their end (end -> start, `end` exclusive): first-fit allocation
/// takes blocks from a run's start, which changes the run's start in place (one search),
/// where a tree keyed by start removes and re-inserts the run; the run holding a block is
/// the first whose end is past it (one search). Runs are disjoint, so their order by end is
/// their order by start, and every answer is the one a start-keyed tree gives (the tests
/// check it against one).
#[derive(Clone, Debug)]
struct Space {
    free: Runs,
    group_free: Vec<u64>,
    flex_free: Vec<u64>,
    total: u64,
    blocks: u64,
    blocks_per_group: u64,
    flex_bg: u32,
}

impl Space {
    /// The free space of a fresh layout: every block but the superblock copies and tables.
    fn new(l: &Layout) -> Self {
        let mut s = Space {
            free: Runs::default(),
            group_free: vec![0; l.groups as usize],
            flex_free: vec![0; l.groups.div_ceil(l.flex_bg) as usize],
            total: 0,
            blocks: l.blocks,
            blocks_per_group: l.blocks_per_group,
            flex_bg: l.flex_bg,
        };
        for g in 0..l.groups {
            let mut at = l.group_start(g);
            let end = at + l.group_len(g);
            for (start, len) in l.used_runs(g).into_iter().chain([(end, 0)]) {
                if start > at {
                    s.release(at, start - at);
                }
                at = at.max(start + len);
            }
        }
        s
    }

    /// Calls `f(group, n)` for each group piece of `start..start+len`.
    fn per_group(&self, mut start: u64, mut len: u64, mut f: impl FnMut(u32, u64)) {
        while len > 0 {
            let g = start / self.blocks_per_group;
            let n = len.min((g + 1) * self.blocks_per_group - start);
            f(g as u32, n);
            (start, len) = (start + n, len - n);
        }
    }

    fn count(&mut self, start: u64, len: u64, add: bool) {
        let (flex, bpg) = (self.flex_bg, self.blocks_per_group);
        // per_group's pieces, walked in place (no list of pieces per call).
        let (mut at, mut left) = (start, len);
        while left > 0 {
            let g = at / bpg;
            let n = left.min((g + 1) * bpg - at);
            (at, left) = (at + n, left - n);
            let (gf, ff) = (
                &mut self.group_free[g as usize],
                &mut self.flex_free[(g as u32 / flex) as usize],
            );
            if add {
                *gf += n;
                *ff += n;
            } else {
                *gf -= n;
                *ff -= n;
            }
        }
        if add {
            self.total += len;
        } else {
            self.total -= len;
        }
    }

    /// Marks the free run piece `start..start+len` used (it must be free).
    fn take(&mut self, start: u64, len: u64) {
        let end = start + len;
        // The run holding `start`: the first whose end is past it.
        let p = self
            .free
            .at_or_after(start + 1)
            .expect("taking a free block");
        let (re, rs0) = self.free.get(p);
        debug_assert!(rs0 <= start && end <= re);
        if end < re {
            // Its tail stays free, under the same end: changed in place.
            self.free.set(p, (re, end));
        } else {
            self.free.remove(p);
        }
        if start > rs0 {
            // Its head stays free, ending at `start`: just before the tail (or where the run
            // was).
            self.free.insert(
                self.free.at_or_after(start).unwrap_or_else(|e| e),
                (start, rs0),
            );
        }
        self.count(start, len, false);
    }

    /// Returns `start..start+len` to the free tree, merged with its neighbours.
    fn release(&mut self, start: u64, len: u64) {
        let end = start + len;
        // A run ending at `start` is its left neighbour; no run ends inside the released
        // piece, so the next run is the first ending past `end`, its right neighbour if it
        // starts at `end`.
        let at = self.free.at_or_after(start);
        let left = at.ok().filter(|&p| self.free.get(p).0 == start);
        let right = match (left, at) {
            (Some(p), _) => self.free.next(p),
            (None, Ok(p)) => Some(p),
            (None, Err(_)) => None,
        }
        .filter(|&p| self.free.get(p).1 == end);
        match (left, right) {
            (Some(l), Some(r)) => {
                // Both: the right run now starts at the left one's start.
                let ls = self.free.get(l).1;
                self.free.set(r, (self.free.get(r).0, ls));
                self.free.remove(l);
            }
            // The left run now ends at `end` (nothing ends between: same place).
            (Some(l), None) => self.free.set(l, (end, self.free.get(l).1)),
            (None, Some(r)) => self.free.set(r, (self.free.get(r).0, start)),
            (None, None) => self.free.insert(at.unwrap_or_else(|e| e), (end, start)),
        }
        self.count(start, len, true);
    }

    /// The free run holding `pos` (from `pos`), else the next one, else the first (wrapping).
    fn run_from(&self, pos: u64) -> (u64, u64) {
        let (e, s) = match self.free.at_or_after(pos + 1) {
            Ok(p) => self.free.get(p),
            Err(_) => self.free.first().expect("free space is not empty"),
        };
        if s <= pos && pos < e {
            (pos, e - pos)
        } else {
            (s, e - s)
        }
    }

    /// First fit from `goal`: `n` blocks as physical runs (start, len) in allocation order.
    fn alloc(&mut self, goal: u64, n: u64) -> Result<Vec<(u64, u64)>, Ext4Error> {
        let mut runs = Vec::new();
        self.alloc_into(goal, n, &mut runs)?;
        Ok(runs)
    }

    /// [`Space::alloc`] into `runs` (cleared first), a buffer the caller keeps.
    fn alloc_into(
        &mut self,
        goal: u64,
        n: u64,
        runs: &mut Vec<(u64, u64)>,
    ) -> Result<(), Ext4Error> {
        runs.clear();
        if n > self.total {
            return Err(Ext4Error::NoSpace {
                want: n,
                free: self.total,
            });
        }
        let (mut pos, mut left) = (if goal < self.blocks { goal } else { 0 }, n);
        while left > 0 {
            let (s, l) = self.run_from(pos);
            let take = l.min(left);
            self.take(s, take);
            match runs.last_mut() {
                Some((ls, ll)) if *ls + *ll == s => *ll += take,
                _ => runs.push((s, take)),
            }
            (pos, left) = (s + take, left - take);
        }
        Ok(())
    }

    /// One block from `goal` (mke2fs's own allocations; space is never short there).
    fn alloc_one(&mut self, goal: u64) -> u64 {
        let (s, _) = self.run_from(if goal < self.blocks { goal } else { 0 });
        self.take(s, 1);
        s
    }
}

/// A directory's entry slots.
#[derive(Clone, Debug, Default)]
struct Dir {
    /// Slots ever used (the directory's blocks hold `ceil(high / 255)` blocks' worth).
    high: u64,
    /// Freed slots below `high`, reused lowest first.
    holes: BTreeSet<u64>,
}

impl Dir {
    fn entries(&self) -> u64 {
        self.high - self.holes.len() as u64
    }
}

#[derive(Clone, Debug)]
struct Inode {
    group: u32,
    dir: Option<Dir>,
    size: u64,
    /// lblk -> (pblk, len).
    extents: BTreeMap<u64, (u64, u64)>,
    /// Extent leaf blocks, then index blocks.
    tree: Vec<u64>,
    parent: u32,
    slot: u64,
    last_alloc_group: Option<u32>,
}

impl Inode {
    fn new(group: u32, dir: bool, parent: u32, slot: u64) -> Self {
        Inode {
            group,
            dir: dir.then(Dir::default),
            size: 0,
            extents: BTreeMap::new(),
            tree: Vec::new(),
            parent,
            slot,
            last_alloc_group: None,
        }
    }
}

/// A group's inodes: the high-water mark of used inode indexes and the freed ones below it.
#[derive(Clone, Debug)]
struct InodeGroup {
    free: u32,
    dirs: u32,
    high: u32,
    holes: BTreeSet<u32>,
}

/// Blocks of an extent tree for `n` extents: none up to 4, then full leaves of 340, and index
/// levels of 340 while a level has more than 4 blocks.
fn tree_blocks(n: u64) -> u64 {
    if n <= INODE_EXTENTS {
        return 0;
    }
    let (mut level, mut total) = (n.div_ceil(EXTENTS_PER_BLOCK), 0);
    total += level;
    while level > INODE_EXTENTS {
        level = level.div_ceil(EXTENTS_PER_BLOCK);
        total += level;
    }
    total
}

/// The mounted filesystem's allocation state.
#[derive(Clone, Debug)]
pub struct Ext4 {
    layout: Layout,
    space: Space,
    groups: Vec<InodeGroup>,
    flex_inodes: Vec<u64>,
    flex_dirs: Vec<u64>,
    free_inodes: u64,
    dirs: u64,
    /// By inode number (looked up, never iterated: a fast fixed hasher).
    inodes: FxHashMap<u32, Inode>,
    /// Top-level directories made so far: the seed of Orlov's pseudo-random start (Linux hashes
    /// the name with the filesystem's random hash seed).
    topdirs: u64,
    /// Buffers `allocate` and `free_from` keep between calls (empty in between).
    scratch: Scratch,
}

/// Working buffers of [`Ext4::allocate`] and [`Ext4::free_from`] (no allocation per call).
#[derive(Clone, Debug, Default)]
struct Scratch {
    pieces: Vec<Mapped>,
    runs: Vec<(u64, u64)>,
    freed: Vec<(u64, u64)>,
}

impl Ext4 {
    /// The filesystem as mke2fs leaves it: root (2), journal (8), lost+found (11); the next
    /// inode is 12.
    pub fn new(layout: Layout) -> Self {
        let mut space = Space::new(&layout);
        space.take(layout.root_dir_block, 1);
        space.take(layout.lost_found_block, LOST_FOUND_BLOCKS);
        space.take(layout.resize_block, 1);
        for e in &layout.journal_extents {
            space.take(e.pblk, e.len);
        }
        if let Some(b) = layout.journal_tree_block {
            space.take(b, 1);
        }
        let ipg = layout.inodes_per_group;
        let mut groups = vec![
            InodeGroup {
                free: ipg,
                dirs: 0,
                high: 0,
                holes: BTreeSet::new()
            };
            layout.groups as usize
        ];
        groups[0].free -= LOST_FOUND_INO;
        groups[0].high = LOST_FOUND_INO;
        groups[0].dirs = 2;
        let nflex = layout.groups.div_ceil(layout.flex_bg) as usize;
        let mut flex_inodes = vec![0u64; nflex];
        for (g, grp) in groups.iter().enumerate() {
            flex_inodes[g / layout.flex_bg as usize] += grp.free as u64;
        }
        let mut flex_dirs = vec![0u64; nflex];
        flex_dirs[0] = 2;
        let mut root = Inode::new(0, true, ROOT_INO, 0);
        root.dir = Some(Dir {
            high: 3,
            holes: BTreeSet::new(),
        });
        root.extents.insert(0, (layout.root_dir_block, 1));
        root.size = BLOCK_BYTES;
        let mut lpf = Inode::new(0, true, ROOT_INO, 2);
        lpf.dir = Some(Dir {
            high: 2,
            holes: BTreeSet::new(),
        });
        lpf.extents
            .insert(0, (layout.lost_found_block, LOST_FOUND_BLOCKS));
        lpf.size = LOST_FOUND_BLOCKS * BLOCK_BYTES;
        let mut journal = Inode::new(0, false, 0, 0);
        for e in &layout.journal_extents {
            journal.extents.insert(e.lblk, (e.pblk, e.len));
        }
        journal.tree.extend(layout.journal_tree_block);
        journal.size = layout.journal_blocks * BLOCK_BYTES;
        let inodes = FxHashMap::from_iter([
            (ROOT_INO, root),
            (LOST_FOUND_INO, lpf),
            (JOURNAL_INO, journal),
        ]);
        Ext4 {
            free_inodes: layout.inodes() - LOST_FOUND_INO as u64,
            layout,
            space,
            groups,
            flex_inodes,
            flex_dirs,
            dirs: 2,
            inodes,
            topdirs: 0,
            scratch: Scratch::default(),
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Free blocks (the group descriptors' sum).
    pub fn free_blocks(&self) -> u64 {
        self.space.total
    }

    pub fn free_inodes(&self) -> u64 {
        self.free_inodes
    }

    /// The group inode `ino` lives in.
    pub fn inode_group(&self, ino: u32) -> u32 {
        self.layout.inode_group(ino)
    }

    pub fn size(&self, ino: u32) -> u64 {
        self.inodes.get(&ino).map_or(0, |i| i.size)
    }

    /// The extents of `ino`, in logical order.
    pub fn extents(&self, ino: u32) -> Vec<Extent> {
        self.inodes.get(&ino).map_or_else(Vec::new, |i| {
            i.extents
                .iter()
                .map(|(&lblk, &(pblk, len))| Extent { lblk, pblk, len })
                .collect()
        })
    }

    /// The extent tree blocks of `ino` (leaves, then index blocks).
    pub fn extent_blocks(&self, ino: u32) -> &[u64] {
        self.inodes.get(&ino).map_or(&[], |i| &i.tree)
    }

    /// The directory block holding `ino`'s entry in its parent.
    pub fn entry_block(&self, ino: u32) -> Option<u64> {
        let i = self.inodes.get(&ino)?;
        self.block_of(i.parent, i.slot / DIRENTS_PER_BLOCK)
    }

    fn inode(&self, ino: u32) -> Result<&Inode, Ext4Error> {
        self.inodes.get(&ino).ok_or(Ext4Error::NoInode(ino))
    }

    fn dir(&self, ino: u32) -> Result<&Inode, Ext4Error> {
        let i = self.inode(ino)?;
        i.dir.as_ref().map(|_| i).ok_or(Ext4Error::NotDir(ino))
    }

    /// The physical block of logical block `lblk` of `ino`.
    fn block_of(&self, ino: u32, lblk: u64) -> Option<u64> {
        let (&l, &(p, n)) = self.inodes.get(&ino)?.extents.range(..=lblk).next_back()?;
        (lblk < l + n).then(|| p + (lblk - l))
    }

    /// Whether logical block `lblk` of `ino` is allocated (not a hole, not delayed).
    pub fn is_mapped(&self, ino: u32, lblk: u64) -> bool {
        self.block_of(ino, lblk).is_some()
    }

    /// Pieces of `[lblk, lblk+n)` in order, holes as `pblk: None`.
    pub fn map(&self, ino: u32, lblk: u64, n: u64, out: &mut Vec<Mapped>) {
        let end = lblk + n;
        let mut at = lblk;
        if let Some(i) = self.inodes.get(&ino) {
            let first = i
                .extents
                .range(..=lblk)
                .next_back()
                .map_or(lblk, |(&l, _)| l);
            for (&l, &(p, len)) in i.extents.range(first..end) {
                if l + len <= at {
                    continue;
                }
                if l > at {
                    out.push(Mapped {
                        lblk: at,
                        len: l - at,
                        pblk: None,
                    });
                    at = l;
                }
                let stop = (l + len).min(end);
                out.push(Mapped {
                    lblk: at,
                    len: stop - at,
                    pblk: Some(p + (at - l)),
                });
                at = stop;
            }
        }
        if at < end {
            out.push(Mapped {
                lblk: at,
                len: end - at,
                pblk: None,
            });
        }
    }

    /// Pushes the block bitmap and group descriptor block of every group of a run.
    fn dirty_run(&self, start: u64, len: u64, meta: &mut Vec<u64>) {
        self.space.per_group(start, len, |g, _| {
            meta.push(self.layout.block_bitmap(g));
            meta.push(self.layout.group_desc_block(g));
        });
    }

    /// `ext4_inode_to_goal_block` with delalloc: the first block of the inode's flex group,
    /// one group further for regular files.
    fn inode_goal(&self, ino: &Inode) -> u64 {
        let mut g = ino.group;
        if self.layout.flex_bg >= FLEX_SIZE_DIR_ALLOC_SCHEME {
            g &= !(self.layout.flex_bg - 1);
            if ino.dir.is_none() {
                g += 1;
            }
        }
        self.layout.group_start(g)
    }

    /// `ext4_ext_find_goal`: the nearest extent's pblk plus the distance to `lblk`.
    fn block_goal(&self, ino: &Inode, lblk: u64) -> u64 {
        if let Some((&l, &(p, _))) = ino.extents.range(..=lblk).next_back() {
            return p + (lblk - l);
        }
        if let Some((&l, &(p, _))) = ino.extents.range(lblk..).next() {
            return p.saturating_sub(l - lblk);
        }
        self.inode_goal(ino)
    }

    /// Allocates blocks for the unmapped logical blocks of `[lblk, lblk+n)` of `ino`.
    pub fn allocate(
        &mut self,
        ino: u32,
        lblk: u64,
        n: u64,
        meta: &mut Vec<u64>,
    ) -> Result<(), Ext4Error> {
        let mut holes = std::mem::take(&mut self.scratch.pieces);
        holes.clear();
        self.map(ino, lblk, n, &mut holes);
        let r = self.allocate_holes(ino, &holes, meta);
        self.scratch.pieces = holes;
        r
    }

    /// [`Ext4::allocate`] of the pieces `holes` of [`Ext4::map`].
    fn allocate_holes(
        &mut self,
        ino: u32,
        holes: &[Mapped],
        meta: &mut Vec<u64>,
    ) -> Result<(), Ext4Error> {
        let want: u64 = holes
            .iter()
            .filter(|m| m.pblk.is_none())
            .map(|m| m.len)
            .sum();
        if want == 0 {
            // Every block is mapped: nothing changes (the inode neither).
            return Ok(());
        }
        let extra = {
            let i = self.inode(ino)?;
            let gaps = holes.iter().filter(|m| m.pblk.is_none()).count() as u64;
            tree_blocks(i.extents.len() as u64 + want.div_ceil(MAX_EXTENT_BLOCKS) + gaps)
                .saturating_sub(i.tree.len() as u64)
        };
        if want + extra > self.space.total {
            return Err(Ext4Error::NoSpace {
                want,
                free: self.space.total,
            });
        }
        let mut runs = std::mem::take(&mut self.scratch.runs);
        let mut r = Ok(());
        for hole in holes.iter().filter(|m| m.pblk.is_none()) {
            let goal = self.block_goal(&self.inodes[&ino], hole.lblk);
            r = self.space.alloc_into(goal, hole.len, &mut runs);
            if r.is_err() {
                break;
            }
            for &(s, l) in &runs {
                self.dirty_run(s, l, meta);
            }
            r = for_extents(hole.lblk, &runs, |e| self.insert_extent(ino, e, meta));
            if r.is_err() {
                break;
            }
        }
        self.scratch.runs = runs;
        r?;
        meta.push(self.layout.inode_table_block(ino));
        Ok(())
    }

    /// Inserts one extent, merging it with its neighbours where `ext4_can_extents_be_merged`
    /// allows; dirties the leaf that changed and grows the tree when needed.
    fn insert_extent(&mut self, ino: u32, e: Extent, meta: &mut Vec<u64>) -> Result<(), Ext4Error> {
        let i = self.inodes.get_mut(&ino).ok_or(Ext4Error::NoInode(ino))?;
        let (mut l, mut p, mut len) = (e.lblk, e.pblk, e.len);
        if let Some((&pl, &(pp, plen))) = i.extents.range(..l).next_back() {
            if pl + plen == l && pp + plen == p && plen + len <= MAX_EXTENT_BLOCKS {
                i.extents.remove(&pl);
                (l, p, len) = (pl, pp, plen + len);
            }
        }
        if let Some(&(np, nlen)) = i.extents.get(&(l + len)) {
            if p + len == np && len + nlen <= MAX_EXTENT_BLOCKS {
                i.extents.remove(&(l + len));
                len += nlen;
            }
        }
        i.extents.insert(l, (p, len));
        self.fit_tree(ino, l, p + len, meta)
    }

    /// Resizes `ino`'s extent tree to its extent count (new blocks near `goal`, extra blocks
    /// freed) and dirties the leaf holding logical block `lblk`.
    fn fit_tree(
        &mut self,
        ino: u32,
        lblk: u64,
        goal: u64,
        meta: &mut Vec<u64>,
    ) -> Result<(), Ext4Error> {
        let i = &self.inodes[&ino];
        let need = tree_blocks(i.extents.len() as u64) as usize;
        let have = i.tree.len();
        let mut added = Vec::new();
        for _ in have..need {
            let runs = self.space.alloc(goal, 1)?;
            let b = runs[0].0;
            self.dirty_run(b, 1, meta);
            added.push(b);
        }
        let i = self.inodes.get_mut(&ino).expect("inode checked above");
        i.tree.extend(added.iter().copied());
        let dropped: Vec<u64> = if need < have {
            i.tree.drain(need..).collect()
        } else {
            Vec::new()
        };
        let leaf = if i.tree.is_empty() {
            None
        } else {
            let rank = i.extents.range(..=lblk).count().saturating_sub(1) as u64;
            let leaves = (i.extents.len() as u64).div_ceil(EXTENTS_PER_BLOCK);
            Some(i.tree[(rank / EXTENTS_PER_BLOCK).min(leaves - 1) as usize])
        };
        meta.extend(leaf);
        if !added.is_empty() {
            meta.extend(i.tree.iter().copied());
        }
        for b in dropped {
            self.space.release(b, 1);
            self.dirty_run(b, 1, meta);
        }
        Ok(())
    }

    /// Claims the lowest free inode of `group`.
    fn claim_inode(&mut self, group: u32, dir: bool, meta: &mut Vec<u64>) -> u32 {
        let ig = &mut self.groups[group as usize];
        let index = match ig.holes.pop_first() {
            Some(h) => h,
            None => {
                ig.high += 1;
                ig.high - 1
            }
        };
        ig.free -= 1;
        let flex = (group / self.layout.flex_bg) as usize;
        self.flex_inodes[flex] -= 1;
        self.free_inodes -= 1;
        if dir {
            ig.dirs += 1;
            self.flex_dirs[flex] += 1;
            self.dirs += 1;
        }
        let ino = group * self.layout.inodes_per_group + index + 1;
        meta.push(self.layout.inode_bitmap(group));
        meta.push(self.layout.group_desc_block(group));
        meta.push(self.layout.inode_table_block(ino));
        ino
    }

    /// Adds an entry for `child` to directory `dir`: the lowest free slot, a new block when the
    /// directory is full. Returns the slot.
    fn add_entry(&mut self, dir: u32, meta: &mut Vec<u64>) -> Result<u64, Ext4Error> {
        let d = self.dir(dir)?;
        let entries = d.dir.as_ref().expect("checked dir");
        let slot = entries.holes.first().copied().unwrap_or(entries.high);
        let block = slot / DIRENTS_PER_BLOCK;
        if self.block_of(dir, block).is_none() {
            let goal = self.block_goal(d, block);
            let b = self.space.alloc(goal, 1)?[0].0;
            self.dirty_run(b, 1, meta);
            self.insert_extent(
                dir,
                Extent {
                    lblk: block,
                    pblk: b,
                    len: 1,
                },
                meta,
            )?;
            self.inodes.get_mut(&dir).expect("checked dir").size = (block + 1) * BLOCK_BYTES;
        }
        let d = self
            .inodes
            .get_mut(&dir)
            .expect("checked dir")
            .dir
            .as_mut()
            .expect("checked dir");
        if !d.holes.remove(&slot) {
            d.high += 1;
        }
        meta.extend(self.block_of(dir, block));
        meta.push(self.layout.inode_table_block(dir));
        Ok(slot)
    }

    /// Checks that a new inode can be made in `dir`: a directory, a free inode, and `blocks`
    /// (the new directory's first block) plus 2 (a directory block and an extent block the
    /// entry may need).
    fn check_new(&self, dir: u32, blocks: u64) -> Result<(), Ext4Error> {
        self.dir(dir)?;
        if self.free_inodes == 0 {
            return Err(Ext4Error::NoInodes {
                inodes: self.layout.inodes(),
            });
        }
        if self.space.total < blocks + 2 {
            return Err(Ext4Error::NoSpace {
                want: blocks + 2,
                free: self.space.total,
            });
        }
        Ok(())
    }

    /// A new directory in `parent`.
    pub fn mkdir(&mut self, parent: u32, meta: &mut Vec<u64>) -> Result<u32, Ext4Error> {
        self.check_new(parent, 1)?;
        let group = self.find_group_orlov(parent, true);
        self.inodes
            .get_mut(&parent)
            .expect("checked dir")
            .last_alloc_group = Some(group);
        let ino = self.claim_inode(group, true, meta);
        let slot = self.add_entry(parent, meta)?;
        self.inodes
            .insert(ino, Inode::new(group, true, parent, slot));
        let d = self.inodes.get_mut(&ino).expect("just inserted");
        d.dir.as_mut().expect("a directory").high = 2;
        let goal = self.inode_goal(&self.inodes[&ino]);
        let b = self.space.alloc(goal, 1)?[0].0;
        self.dirty_run(b, 1, meta);
        self.insert_extent(
            ino,
            Extent {
                lblk: 0,
                pblk: b,
                len: 1,
            },
            meta,
        )?;
        self.inodes.get_mut(&ino).expect("just inserted").size = BLOCK_BYTES;
        meta.push(b);
        Ok(ino)
    }

    /// A new regular file in `dir` (its blocks come with [`Ext4::allocate`]).
    pub fn create(&mut self, dir: u32, meta: &mut Vec<u64>) -> Result<u32, Ext4Error> {
        self.check_new(dir, 0)?;
        let group = self.find_group_other(dir);
        self.inodes
            .get_mut(&dir)
            .expect("checked dir")
            .last_alloc_group = Some(group);
        let ino = self.claim_inode(group, false, meta);
        let slot = self.add_entry(dir, meta)?;
        self.inodes.insert(ino, Inode::new(group, false, dir, slot));
        Ok(ino)
    }

    /// An inode change (times): its inode table block.
    pub fn touch(&mut self, ino: u32, meta: &mut Vec<u64>) {
        meta.push(self.layout.inode_table_block(ino));
    }

    /// Frees `ino`'s blocks from logical block `from` on.
    fn free_from(&mut self, ino: u32, from: u64, meta: &mut Vec<u64>) {
        let Some(i) = self.inodes.get_mut(&ino) else {
            return;
        };
        let mut freed = std::mem::take(&mut self.scratch.freed);
        freed.clear();
        if from == 0 {
            // Every extent goes (unlink, truncation to 0), in logical order.
            freed.extend(i.extents.values().copied());
            i.extents.clear();
        } else {
            let mut at = i
                .extents
                .range(..from)
                .next_back()
                .map_or(from, |(&l, _)| l);
            while let Some((&l, &(p, len))) = i.extents.range(at..).next() {
                at = l + 1;
                if l + len <= from {
                    continue;
                }
                let keep = from.saturating_sub(l);
                if keep > 0 {
                    i.extents.insert(l, (p, keep));
                } else {
                    i.extents.remove(&l);
                }
                freed.push((p + keep, len - keep));
            }
        }
        for &(s, l) in &freed {
            self.space.release(s, l);
            self.dirty_run(s, l, meta);
        }
        self.scratch.freed = freed;
        let goal = self.inode_goal(&self.inodes[&ino]);
        // Shrinking never allocates.
        let _ = self.fit_tree(ino, from.saturating_sub(1), goal, meta);
    }

    /// Sets the size; shrinking frees the blocks past the new end (truncate: the orphan list
    /// in the superblock, the bitmaps, the extent leaf).
    pub fn set_size(&mut self, ino: u32, bytes: u64, meta: &mut Vec<u64>) {
        let Some(i) = self.inodes.get_mut(&ino) else {
            return;
        };
        let old = i.size;
        i.size = bytes;
        meta.push(self.layout.inode_table_block(ino));
        if bytes < old {
            meta.push(0);
            self.free_from(ino, bytes.div_ceil(BLOCK_BYTES), meta);
        }
    }

    /// Removes `ino` (a file or an empty directory) and frees its blocks and inode.
    pub fn unlink(&mut self, ino: u32, meta: &mut Vec<u64>) -> Result<(), Ext4Error> {
        if ino == ROOT_INO || ino == JOURNAL_INO {
            return Err(Ext4Error::Reserved(ino));
        }
        let i = self.inode(ino)?;
        if i.dir.as_ref().is_some_and(|d| d.entries() > 2) {
            return Err(Ext4Error::NotEmpty(ino));
        }
        let (parent, slot, is_dir) = (i.parent, i.slot, i.dir.is_some());
        meta.extend(self.block_of(parent, slot / DIRENTS_PER_BLOCK));
        meta.push(self.layout.inode_table_block(parent));
        if let Some(d) = self.inodes.get_mut(&parent).and_then(|p| p.dir.as_mut()) {
            d.holes.insert(slot);
        }
        meta.push(0);
        self.free_from(ino, 0, meta);
        self.inodes.remove(&ino);
        let group = self.layout.inode_group(ino);
        let index = (ino - 1) % self.layout.inodes_per_group;
        let ig = &mut self.groups[group as usize];
        ig.holes.insert(index);
        ig.free += 1;
        let flex = (group / self.layout.flex_bg) as usize;
        self.flex_inodes[flex] += 1;
        self.free_inodes += 1;
        if is_dir {
            ig.dirs -= 1;
            self.flex_dirs[flex] -= 1;
            self.dirs -= 1;
        }
        meta.push(self.layout.inode_table_block(ino));
        meta.push(self.layout.inode_bitmap(group));
        meta.push(self.layout.group_desc_block(group));
        Ok(())
    }

    /// Free inodes, free blocks and directories of flex group `f` (or group `f` without
    /// flex_bg: the flex groups are then single groups).
    fn flex_stats(&self, f: u32) -> (u64, u64, u64) {
        let f = f as usize;
        (
            self.flex_inodes[f],
            self.space.flex_free[f],
            self.flex_dirs[f],
        )
    }

    /// `find_group_orlov`.
    fn find_group_orlov(&mut self, parent: u32, is_dir: bool) -> u32 {
        let (p_group, p_last) = {
            let p = &self.inodes[&parent];
            (p.group, p.last_alloc_group)
        };
        let topdir = is_dir && parent == ROOT_INO;
        if topdir {
            self.topdirs += 1;
        }
        let l = &self.layout;
        let flex = l.flex_bg;
        let real_groups = l.groups;
        let ngroups = real_groups.div_ceil(flex);
        let ipg = l.inodes_per_group as u64;
        let avefreei = self.free_inodes / ngroups as u64;
        let avefreeb = self.space.total / ngroups as u64;
        let chosen = if topdir {
            let start = (Rng::new(self.topdirs).next_u64() % ngroups as u64) as u32;
            let mut best: Option<(u32, u64)> = None;
            for k in 0..ngroups {
                let g = (start + k) % ngroups;
                let (fi, fb, nd) = self.flex_stats(g);
                if fi == 0 || nd >= best.map_or(ipg, |b| b.1) || fi < avefreei || fb < avefreeb {
                    continue;
                }
                best = Some((g, nd));
            }
            best.map(|b| b.0)
        } else {
            let max_dirs = self.dirs / ngroups as u64 + ipg / 16;
            let min_inodes = avefreei.saturating_sub(ipg * flex as u64 / 4).max(1);
            let min_blocks = avefreeb.saturating_sub(l.blocks_per_group * flex as u64 / 4);
            let start = p_last.unwrap_or(p_group) / flex;
            (0..ngroups).map(|k| (start + k) % ngroups).find(|&g| {
                let (fi, fb, nd) = self.flex_stats(g);
                nd < max_dirs && fi >= min_inodes && fb >= min_blocks
            })
        };
        if let Some(f) = chosen {
            let first = f * flex;
            if let Some(g) =
                (first..(first + flex).min(real_groups)).find(|&g| self.groups[g as usize].free > 0)
            {
                return g;
            }
        }
        // fallback: from the parent's group, a group with at least the average free inodes,
        // then any group with a free inode.
        let avefreei = self.free_inodes / real_groups as u64;
        let from_parent = |ok: &dyn Fn(u64) -> bool| {
            (0..real_groups)
                .map(|k| (p_group + k) % real_groups)
                .find(|&g| ok(self.groups[g as usize].free as u64))
        };
        from_parent(&|free| free > 0 && free >= avefreei)
            .or_else(|| from_parent(&|free| free > 0))
            .expect("a free inode exists (checked)")
    }

    /// `find_group_other`.
    fn find_group_other(&mut self, dir: u32) -> u32 {
        let l = &self.layout;
        let p = &self.inodes[&dir];
        let ngroups = l.groups;
        if l.flex_bg > 1 {
            for pg in [Some(p.group), p.last_alloc_group].into_iter().flatten() {
                let first = pg & !(l.flex_bg - 1);
                if let Some(g) = (first..(first + l.flex_bg).min(ngroups))
                    .find(|&g| self.groups[g as usize].free > 0)
                {
                    return g;
                }
            }
            return self.find_group_orlov(dir, false);
        }
        let has_room =
            |g: u32| self.groups[g as usize].free > 0 && self.space.group_free[g as usize] > 0;
        if has_room(p.group) {
            return p.group;
        }
        let mut g = (p.group + dir) % ngroups;
        let mut i = 1;
        while i < ngroups {
            g = (g + i) % ngroups;
            if has_room(g) {
                return g;
            }
            i <<= 1;
        }
        (1..=ngroups)
            .map(|k| (p.group + k) % ngroups)
            .find(|&g| self.groups[g as usize].free > 0)
            .expect("a free inode exists (checked)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn layout(bytes: u64) -> Layout {
        Layout::mkfs(&MkfsOptions::new(bytes)).expect("a valid size")
    }

    fn fs(bytes: u64) -> Ext4 {
        Ext4::new(layout(bytes))
    }

    /// The free-run tree keyed by start (start -> len), as `Space` kept it before its runs
    /// were keyed by end: the reference `Space` must agree with.
    #[derive(Default)]
    struct StartKeyed {
        free: BTreeMap<u64, u64>,
    }

    impl StartKeyed {
        fn take(&mut self, start: u64, len: u64) {
            let (&rs, &rl) = self.free.range(..=start).next_back().unwrap();
            self.free.remove(&rs);
            if start > rs {
                self.free.insert(rs, start - rs);
            }
            if rs + rl > start + len {
                self.free.insert(start + len, rs + rl - start - len);
            }
        }
        fn release(&mut self, start: u64, len: u64) {
            let (mut s, mut l) = (start, len);
            if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
                if ps + pl == start {
                    self.free.remove(&ps);
                    (s, l) = (ps, pl + l);
                }
            }
            if let Some(nl) = self.free.remove(&(start + len)) {
                l += nl;
            }
            self.free.insert(s, l);
        }
        fn run_from(&self, pos: u64) -> (u64, u64) {
            if let Some((&s, &l)) = self.free.range(..=pos).next_back() {
                if s + l > pos {
                    return (pos, s + l - pos);
                }
            }
            let next = self
                .free
                .range(pos..)
                .next()
                .or_else(|| self.free.iter().next());
            next.map(|(&s, &l)| (s, l)).unwrap()
        }
        /// First fit one block at a time (the same runs as taking a run's piece at once).
        fn alloc(&mut self, goal: u64, blocks: u64, n: u64) -> Vec<(u64, u64)> {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            let mut pos = if goal < blocks { goal } else { 0 };
            for _ in 0..n {
                let b = self.run_from(pos).0;
                self.take(b, 1);
                match runs.last_mut().filter(|r| r.0 + r.1 == b) {
                    Some(r) => r.1 += 1,
                    None => runs.push((b, 1)),
                }
                pos = b + 1;
            }
            runs
        }
    }

    #[test]
    fn the_chunked_runs_answer_every_look_up_as_an_ordered_map_does_through_splits_and_empty_chunks(
    ) {
        // Random insertions, removals, changes and look-ups on Runs and on a BTreeMap of the
        // same pairs: the map grows past many chunks (splits), shrinks (chunks emptied and
        // dropped) and grows again.
        let mut rng = Rng::new(7);
        let mut runs = Runs::default();
        let mut map: BTreeMap<u64, u64> = BTreeMap::new();
        for phase in 0..3 {
            for step in 0..12_000 {
                let k = rng.below(6_000);
                let grow = match phase {
                    1 => rng.below(4) == 0,
                    _ => rng.below(4) != 0,
                };
                let found = runs.at_or_after(k);
                let want = map.range(k..).next().map(|(&e, &s)| (e, s));
                assert_eq!(found.ok().map(|p| runs.get(p)), want, "look-up {k}");
                if let Ok(p) = found {
                    let after = map
                        .range(want.unwrap().0 + 1..)
                        .next()
                        .map(|(&e, &s)| (e, s));
                    assert_eq!(runs.next(p).map(|q| runs.get(q)), after);
                }
                assert_eq!(runs.first(), map.iter().next().map(|(&e, &s)| (e, s)));
                match (map.contains_key(&k), grow) {
                    (false, true) => {
                        let v = rng.below(1 << 20);
                        runs.insert(found.unwrap_or_else(|e| e), (k, v));
                        map.insert(k, v);
                    }
                    (true, false) => {
                        runs.remove(found.unwrap());
                        map.remove(&k);
                    }
                    (true, true) => {
                        let v = rng.below(1 << 20);
                        runs.set(found.unwrap(), (k, v));
                        map.insert(k, v);
                    }
                    (false, false) => {}
                }
                let all: Vec<(u64, u64)> = runs.iter().collect();
                let want: Vec<(u64, u64)> = map.iter().map(|(&e, &s)| (e, s)).collect();
                assert_eq!(all, want, "phase {phase} step {step}");
                assert_eq!(runs.chunks.len(), runs.lasts.len());
                for (ch, &last) in runs.chunks.iter().zip(&runs.lasts) {
                    assert!(!ch.is_empty() && ch.len() <= RUN_CHUNK);
                    assert_eq!(ch[ch.len() - 1].0, last);
                }
            }
            if phase == 0 {
                assert!(runs.chunks.len() > 10, "the map spans many chunks");
            }
        }
    }

    #[test]
    fn the_free_runs_keyed_by_end_allocate_and_merge_as_runs_keyed_by_start_do() {
        let mut rng = Rng::new(29);
        for round in 0..200 {
            let (bpg, groups) = (64 + rng.below(64), 1 + rng.below(8));
            let blocks = bpg * groups;
            let mut sp = Space {
                free: Runs::default(),
                group_free: vec![0; groups as usize],
                flex_free: vec![0; groups as usize],
                total: 0,
                blocks,
                blocks_per_group: bpg,
                flex_bg: 1,
            };
            let mut reference = StartKeyed::default();
            // Free space in pieces, some adjacent (merged), some with used blocks between.
            let mut used = Vec::new();
            let mut at = 0;
            while at < blocks {
                let len = (1 + rng.below(20)).min(blocks - at);
                if rng.below(4) == 0 {
                    used.push((at, len));
                } else {
                    sp.release(at, len);
                    reference.release(at, len);
                }
                at += len;
            }
            let mut runs = Vec::new();
            for step in 0..300 {
                let free_now: Vec<(u64, u64)> = sp.free.iter().map(|(e, s)| (s, e - s)).collect();
                let want: Vec<(u64, u64)> = reference.free.iter().map(|(&s, &l)| (s, l)).collect();
                assert_eq!(free_now, want, "round {round} step {step}");
                assert_eq!(sp.total, want.iter().map(|r| r.1).sum::<u64>());
                let pos = rng.below(blocks);
                if sp.total > 0 {
                    assert_eq!(sp.run_from(pos), reference.run_from(pos), "{pos}");
                }
                if sp.total > 0 && (used.is_empty() || rng.below(2) == 0) {
                    let n = 1 + rng.below(sp.total.min(30));
                    let goal = rng.below(blocks + 10);
                    sp.alloc_into(goal, n, &mut runs).unwrap();
                    assert_eq!(runs, reference.alloc(goal, blocks, n), "alloc {goal} {n}");
                    used.extend(runs.iter().copied());
                } else if !used.is_empty() {
                    // A used piece (or a part of one) goes back.
                    let i = rng.below(used.len() as u64) as usize;
                    let (s, l) = used.swap_remove(i);
                    let k = 1 + rng.below(l);
                    if k < l {
                        used.push((s + k, l - k));
                    }
                    sp.release(s, k);
                    reference.release(s, k);
                }
            }
        }
    }

    #[test]
    fn default_journal_sizes_follow_the_e2fsprogs_table_at_its_boundaries() {
        let j = Layout::default_journal_blocks;
        // (filesystem blocks, journal blocks): each row's last size and the next row's first.
        let rows = [
            (2047, 0),
            (2048, 1024),
            (32767, 1024),
            (32768, 4096),      // 128 MiB: 16 MiB
            (262143, 4096),     // just under 1 GiB
            (262144, 8192),     // 1 GiB is in the "< 2 GiB" row: 32 MiB
            (524288, 16384),    // 2 GiB: 64 MiB
            (4194303, 16384),   // just under 16 GiB
            (4194304, 32768),   // 16 GiB: 128 MiB
            (8388608, 65536),   // 32 GiB: 256 MiB
            (16777216, 131072), // 64 GiB: 512 MiB
            (33554431, 131072), // just under 128 GiB
            (33554432, 262144), // 128 GiB and more: 1 GiB
        ];
        for (blocks, want) in rows {
            assert_eq!(j(blocks), want, "{blocks} blocks");
        }
    }

    #[test]
    fn a_1_gib_filesystem_gets_a_32_mib_journal_at_the_start_of_group_4() {
        // 262144 blocks, 8 groups; midpoint block 131072 is in group 4; 4 <= 16 (flex size), so
        // the freest of groups 3, 4, 5: 3 and 5 hold superblock copies, 4 is whole: 4 * 32768.
        let l = layout(GIB);
        assert_eq!((l.blocks, l.groups, l.journal_blocks), (262144, 8, 8192));
        assert_eq!(l.journal_start, 131072);
        assert_eq!(
            l.journal_extents,
            vec![Extent {
                lblk: 0,
                pblk: 131072,
                len: 8192
            }]
        );
    }

    #[test]
    fn a_16_gib_filesystem_gets_a_128_mib_journal_at_the_start_of_group_65() {
        // 4194304 blocks, 128 groups; midpoint group 64 > 16: rounded down to its flex group's
        // start, 64 (free: 32768 - 16 - 16 - 16 * 512 = 24544); group 65 is whole (32768 free),
        // so the goal is 65 * 32768 = 2129920; 16 GiB is in the "< 32 GiB" row: 32768 blocks,
        // one extent.
        let l = layout(16 * GIB);
        assert_eq!((l.groups, l.journal_blocks), (128, 32768));
        assert_eq!(l.journal_start, 2_129_920);
        assert_eq!(l.journal_extents.len(), 1);
        assert_eq!(l.journal_tree_block, None);
    }

    #[test]
    fn a_100_gib_filesystem_gets_a_512_mib_journal_in_four_full_extents_from_group_401() {
        // 26214400 blocks, 800 groups; midpoint group 400 = 25 * 16 is a flex group start;
        // group 401 is whole, so 401 * 32768 = 13139968; 131072 blocks in extents of 32768.
        let l = layout(100 * GIB);
        assert_eq!((l.groups, l.journal_blocks), (800, 131072));
        let starts: Vec<u64> = l.journal_extents.iter().map(|e| e.pblk).collect();
        assert_eq!(starts, vec![13_139_968, 13_172_736, 13_205_504, 13_238_272]);
        assert_eq!(l.journal_block(32768), Some(13_172_736));
        assert_eq!(l.journal_block(131072), None);
    }

    #[test]
    fn a_200_gib_journal_has_eight_extents_and_its_extent_block_just_before_it() {
        // 1600 groups, midpoint group 800 (a flex start) -> 801 * 32768 = 26247168; 262144
        // blocks = 8 extents > 4, so one extent block at 26247168 - 1.
        let l = layout(200 * GIB);
        assert_eq!(l.journal_start, 26_247_168);
        assert_eq!(l.journal_extents.len(), 8);
        assert_eq!(l.journal_tree_block, Some(26_247_167));
    }

    #[test]
    fn a_5_tib_filesystem_is_of_the_big_type_with_an_inode_per_32_kib() {
        // mke2fs.conf "big" (4 TiB to 16 TiB): inode_ratio 32768, so 32768 * 4096 / 32768 =
        // 4096 inodes a group; 40960 groups, midpoint group 20480 = 1280 * 16 (a flex start),
        // journal in group 20481: 20481 * 32768 = 671121408, its extent block one before
        // (as mkfs.ext4 1.47.0 made it on a sparse 5 TiB file).
        let l = layout(5 << 40);
        assert_eq!(
            (l.groups, l.inodes_per_group, l.inode_table_blocks),
            (40960, 4096, 256)
        );
        assert_eq!((l.journal_start, l.journal_blocks), (671_121_408, 262_144));
        assert_eq!(l.journal_tree_block, Some(671_121_407));
    }

    #[test]
    fn reserved_gdt_blocks_allow_growth_to_1024_times_the_size_and_shift_the_tables() {
        // 1 GiB: ceil(262144 * 1024 / 32768 / 64) - 1 = 127 reserved, so group 0's tables start
        // at 1 + 1 + 127 = 129; 8 groups (the last flex group): inode bitmaps 8 further, inode
        // tables 8 further again, 512 blocks each.
        let l = layout(GIB);
        assert_eq!((l.desc_blocks, l.reserved_gdt_blocks), (1, 127));
        assert_eq!(
            (l.block_bitmap(0), l.inode_bitmap(0), l.inode_table(0)),
            (129, 137, 145)
        );
        assert_eq!(l.inode_table(7), 145 + 7 * 512);
        // root, lost+found and the resize inode's block follow the tables: 145 + 8 * 512.
        assert_eq!(
            (l.root_dir_block, l.lost_found_block, l.resize_block),
            (4241, 4242, 4246)
        );
        // 16 GiB: 2^32 - 1 blocks / 32768 / 64 - 2 > 1024, capped: 1 + 2 + 1024 = 1027.
        let l = layout(16 * GIB);
        assert_eq!((l.desc_blocks, l.reserved_gdt_blocks), (2, 1024));
        assert_eq!(
            (l.block_bitmap(0), l.inode_bitmap(0), l.inode_table(0)),
            (1027, 1043, 1059)
        );
        // group 16 has no superblock copy: its flex group's tables start at its first block.
        assert_eq!((l.block_bitmap(17), l.inode_bitmap(17)), (524_289, 524_305));
        assert_eq!(l.inode_table(17), 524_288 + 32 + 512);
    }

    #[test]
    fn inode_n_is_in_its_groups_table_at_256_bytes_an_inode() {
        // 16 GiB: 8192 inodes a group, 16 a block; inode 12 is index 11 of group 0 (block 0 of
        // its table), inode 8192 + 17 index 16 of group 1 (block 1 of group 1's table).
        let l = layout(16 * GIB);
        assert_eq!(l.inodes_per_group, 8192);
        assert_eq!(l.inode_table_block(12), 1059);
        assert_eq!(l.inode_table_block(8192 + 17), 1059 + 512 + 1);
        assert_eq!(l.inode_table_block(16 * 8192 + 1), 524_288 + 32);
    }

    #[test]
    fn sixty_four_group_descriptors_share_a_gdt_block() {
        let l = layout(16 * GIB);
        assert_eq!(l.group_desc_block(0), 1);
        assert_eq!(l.group_desc_block(63), 1);
        assert_eq!(l.group_desc_block(64), 2);
        assert_eq!(l.group_of(2_129_920), 65);
    }

    #[test]
    fn a_last_group_too_short_for_its_tables_is_dropped() {
        // 2 GiB + 1 MiB: 524544 blocks, a 17th group of 256 blocks < 2 + 512 + 50: dropped.
        let l = layout(2 * GIB + (1 << 20));
        assert_eq!((l.blocks, l.groups), (524_288, 16));
        // 700 MiB: 179200 blocks, a last group of 15360 kept; 44800 inodes over 6 groups,
        // ceil(44800 / 6) = 7467 rounded up to fill 467 table blocks: 7472.
        let l = layout(700 << 20);
        assert_eq!(
            (l.groups, l.inodes_per_group, l.inode_table_blocks),
            (6, 7472, 467)
        );
    }

    #[test]
    fn bad_options_name_the_field_and_the_accepted_values() {
        let err = |o: MkfsOptions| Layout::mkfs(&o).unwrap_err().to_string();
        assert_eq!(
            err(MkfsOptions::new(4 << 20)),
            "filesystem size: 4194304 bytes leaves 1024 blocks of 4 KiB; ext4 with a journal needs at least 2048 blocks (8 MiB)"
        );
        let o = MkfsOptions {
            journal_blocks: Some(200_000),
            ..MkfsOptions::new(GIB)
        };
        assert!(err(o).starts_with("journal_blocks: 200000; accepted: 1024 to 10240000 blocks"));
        let o = MkfsOptions {
            flex_bg: 12,
            ..MkfsOptions::new(GIB)
        };
        assert_eq!(
            err(o),
            "flex_bg: 12; accepted: a power of two from 1 to 2^31"
        );
        let o = MkfsOptions {
            inode_ratio: 4096,
            inode_size: 4096,
            ..MkfsOptions::new(GIB)
        };
        assert!(err(o).starts_with(
            "inode_ratio / inode_size / flex_bg: the bitmaps and inode tables of flex group 0"
        ));
    }

    #[test]
    fn a_requested_journal_is_placed_like_the_default_one() {
        let o = MkfsOptions {
            journal_blocks: Some(4096),
            ..MkfsOptions::new(16 * GIB)
        };
        let l = Layout::mkfs(&o).expect("a valid journal");
        assert_eq!((l.journal_start, l.journal_blocks), (2_129_920, 4096));
    }

    #[test]
    fn a_fresh_filesystem_has_mke2fs_free_counts() {
        // 1 GiB (dumpe2fs): 249189 free blocks = 262144 - 5 superblock copies (groups 0, 1, 3,
        // 5, 7) of 1 + 1 + 127 blocks - 8 * (2 + 512) (bitmaps, tables) - 6 (root, lost+found,
        // resize) - 8192 (journal); 65525 free inodes = 65536 - 11.
        let f = fs(GIB);
        assert_eq!(f.free_blocks(), 262144 - 5 * 129 - 8 * 514 - 6 - 8192);
        assert_eq!(f.free_blocks(), 249_189);
        assert_eq!(f.free_inodes(), 65_525);
    }

    #[test]
    fn two_files_created_in_one_directory_land_in_the_same_group() {
        let mut f = fs(16 * GIB);
        let mut meta = Vec::new();
        let d = f.mkdir(ROOT_INO, &mut meta).expect("mkdir");
        let a = f.create(d, &mut meta).expect("create");
        let b = f.create(d, &mut meta).expect("create");
        assert_eq!(f.inode_group(a), f.inode_group(b));
        assert_eq!(f.inode_group(a), f.inode_group(d));
        assert_eq!(b, a + 1);
    }

    #[test]
    fn a_new_file_in_the_root_takes_inode_12_and_dirties_its_bitmap_descriptor_and_entry() {
        let mut f = fs(16 * GIB);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        assert_eq!(ino, 12);
        // inode bitmap, group descriptor, the new inode's block, the root's block, its inode.
        assert_eq!(meta, vec![1043, 1, 1059, 9251, 1059]);
        assert_eq!(f.entry_block(ino), Some(9251));
        assert!(!meta.contains(&0), "no superblock for a create");
    }

    #[test]
    fn a_file_written_in_two_calls_gets_one_merged_extent() {
        // A regular file of group 0 starts at group 1 (flex_bg >= 4), after group 1's
        // superblock copy: 32768 + 1 + 2 + 1024 = 33795.
        let mut f = fs(16 * GIB);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        f.allocate(ino, 0, 10, &mut meta).expect("space");
        meta.clear();
        f.allocate(ino, 10, 10, &mut meta).expect("space");
        assert_eq!(
            f.extents(ino),
            vec![Extent {
                lblk: 0,
                pblk: 33795,
                len: 20
            }]
        );
        // block bitmap and descriptor of group 1, the inode's block; no superblock.
        assert_eq!(meta, vec![f.layout().block_bitmap(1), 1, 1059]);
    }

    #[test]
    fn allocate_skips_mapped_blocks_and_map_reports_holes() {
        let mut f = fs(GIB);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        f.allocate(ino, 4, 2, &mut meta).expect("space");
        let p = f.extents(ino)[0].pblk;
        let before = f.free_blocks();
        f.allocate(ino, 0, 8, &mut meta).expect("space");
        assert_eq!(before - f.free_blocks(), 6);
        let mut out = Vec::new();
        f.map(ino, 3, 4, &mut out);
        assert_eq!(
            out[1],
            Mapped {
                lblk: 4,
                len: 2,
                pblk: Some(p)
            }
        );
        out.clear();
        let g = fs(GIB);
        g.map(ino, 0, 3, &mut out);
        assert_eq!(
            out,
            vec![Mapped {
                lblk: 0,
                len: 3,
                pblk: None
            }]
        );
    }

    #[test]
    fn unlink_returns_every_block_and_the_inode() {
        let mut f = fs(16 * GIB);
        let (blocks, inodes) = (f.free_blocks(), f.free_inodes());
        let mut meta = Vec::new();
        let d = f.mkdir(ROOT_INO, &mut meta).expect("mkdir");
        let ino = f.create(d, &mut meta).expect("create");
        for k in 0..6 {
            f.allocate(ino, k * 100, 50, &mut meta).expect("space");
        }
        assert_eq!(f.extent_blocks(ino).len(), 1);
        meta.clear();
        f.unlink(ino, &mut meta).expect("a file");
        assert!(meta.contains(&0), "the orphan list lives in the superblock");
        f.unlink(d, &mut meta).expect("an empty directory");
        assert_eq!((f.free_blocks(), f.free_inodes()), (blocks, inodes));
        let again = f.create(ROOT_INO, &mut meta).expect("create");
        assert_eq!(again, 12, "the lowest free inode is reused");
    }

    #[test]
    fn a_fifth_fragment_moves_the_extents_to_a_leaf_block() {
        let mut f = fs(GIB);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        for k in 0..4 {
            f.allocate(ino, 2 * k, 1, &mut meta).expect("space");
        }
        assert!(f.extent_blocks(ino).is_empty());
        meta.clear();
        f.allocate(ino, 8, 1, &mut meta).expect("space");
        assert_eq!(f.extents(ino).len(), 5);
        let leaf = f.extent_blocks(ino)[0];
        assert!(meta.contains(&leaf));
        assert_eq!(tree_blocks(340 * 4), 4);
        assert_eq!(tree_blocks(340 * 4 + 1), 5 + 1);
    }

    #[test]
    fn a_directory_grows_a_block_after_255_entries() {
        // The root holds ".", ".." and "lost+found": 252 more fill its first block.
        let mut f = fs(GIB);
        let mut meta = Vec::new();
        for _ in 0..252 {
            f.create(ROOT_INO, &mut meta).expect("create");
        }
        assert_eq!(f.extents(ROOT_INO).len(), 1);
        assert_eq!(f.size(ROOT_INO), BLOCK_BYTES);
        meta.clear();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        assert_eq!(f.size(ROOT_INO), 2 * BLOCK_BYTES);
        let second = f.entry_block(ino).expect("an entry");
        assert_eq!(
            second, 4247,
            "the first free block after the resize inode's"
        );
        assert!(meta.contains(&second));
    }

    #[test]
    fn top_level_directories_spread_over_the_flex_groups_with_average_free_space() {
        // 16 GiB: 8 flex groups. Flex 0 has fewer free inodes than the average (11 reserved),
        // flex 4 fewer free blocks (the journal); Orlov puts one directory in each other flex
        // group before a second in any.
        let mut f = fs(16 * GIB);
        let mut meta = Vec::new();
        let mut flexes = BTreeSet::new();
        for _ in 0..6 {
            let d = f.mkdir(ROOT_INO, &mut meta).expect("mkdir");
            flexes.insert(f.inode_group(d) / 16);
        }
        assert_eq!(flexes, BTreeSet::from([1, 2, 3, 5, 6, 7]));
    }

    #[test]
    fn allocating_past_the_free_blocks_fails_with_enospc() {
        let mut f = fs(64 << 20);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        let free = f.free_blocks();
        let err = f.allocate(ino, 0, free + 1, &mut meta).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "no space left on device: {} blocks wanted, {free} free",
                free + 1
            )
        );
        assert_eq!(f.free_blocks(), free, "nothing taken");
        f.allocate(ino, 0, free, &mut meta)
            .expect("exactly the free blocks");
        assert_eq!(f.free_blocks(), 0);
    }

    #[test]
    fn truncating_frees_the_tail_and_dirties_the_superblock() {
        let mut f = fs(GIB);
        let mut meta = Vec::new();
        let ino = f.create(ROOT_INO, &mut meta).expect("create");
        f.allocate(ino, 0, 100, &mut meta).expect("space");
        f.set_size(ino, 100 * BLOCK_BYTES, &mut meta);
        let before = f.free_blocks();
        meta.clear();
        f.set_size(ino, 10 * BLOCK_BYTES + 1, &mut meta);
        assert_eq!(f.free_blocks() - before, 89);
        assert_eq!(f.extents(ino)[0].len, 11);
        assert!(meta.contains(&0));
    }

    #[test]
    fn ten_thousand_files_of_256_kib_use_their_blocks_and_give_back_half() {
        // 100 directories (one block each) of 100 files (102 entries: one block), each file
        // written in 4 sequential calls of 16 blocks: one extent each, two where a file reaches
        // a group holding a superblock copy; 640100 blocks used;
        // unlinking every other file returns 5000 * 64.
        let mut f = fs(16 * GIB);
        let free0 = f.free_blocks();
        let mut meta = Vec::new();
        let mut files = Vec::new();
        for _ in 0..100 {
            let d = f.mkdir(ROOT_INO, &mut meta).expect("mkdir");
            for _ in 0..100 {
                let ino = f.create(d, &mut meta).expect("create");
                for k in 0..4 {
                    f.allocate(ino, 16 * k, 16, &mut meta).expect("space");
                }
                files.push(ino);
            }
            meta.clear();
        }
        assert_eq!(free0 - f.free_blocks(), 100 + 10_000 * 64);
        // A file runs into a superblock copy only at a group start: its second extent starts
        // right after the copy (1 + 2 + 1024 blocks).
        let l = f.layout().clone();
        for &ino in &files {
            let e = f.extents(ino);
            assert!(e.len() <= 2, "{ino}: {e:?}");
            if let [a, b] = e[..] {
                let g = l.group_of(b.pblk);
                assert_eq!(a.pblk + a.len, l.group_start(g), "{ino}: {e:?}");
                assert!(
                    l.has_super(g) && b.pblk == l.group_start(g) + 1027,
                    "{ino}: {e:?}"
                );
            }
        }
        for &ino in files.iter().step_by(2) {
            f.unlink(ino, &mut meta).expect("a file");
        }
        assert_eq!(free0 - f.free_blocks(), 100 + 5_000 * 64);
    }

    /// Runs a program of e2fsprogs, found on PATH or in /sbin, /usr/sbin.
    fn e2fs(tool: &str, args: &[&str]) -> Option<String> {
        for dir in ["", "/usr/sbin/", "/sbin/"] {
            let out = std::process::Command::new(format!("{dir}{tool}"))
                .args(args)
                .output();
            if let Ok(out) = out {
                assert!(
                    out.status.success(),
                    "{tool} {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                return Some(String::from_utf8_lossy(&out.stdout).into_owned());
            }
        }
        None
    }

    /// Parses debugfs's "EXTENTS:" line: `(ETB0):b`, `(a-b):c-d`, `(a):c` -> runs and ETBs.
    fn debugfs_extents(stat: &str) -> (Vec<Extent>, Vec<u64>) {
        let line = stat
            .lines()
            .skip_while(|l| !l.starts_with("EXTENTS:"))
            .nth(1)
            .unwrap_or("");
        let (mut runs, mut etbs) = (Vec::new(), Vec::new());
        for item in line.split(", ") {
            let (range, phys) = item.split_once(':').expect("(range):blocks");
            let num = |s: &str| s.trim().parse::<u64>().expect("a number");
            if range.starts_with("(ETB") {
                etbs.push(num(phys));
                continue;
            }
            let range = range.trim_matches(|c| c == '(' || c == ')');
            let lblk = num(range.split('-').next().expect("a start"));
            let mut p = phys.split('-');
            let pblk = num(p.next().expect("a block"));
            let len = p.next().map_or(1, |e| num(e) - pblk + 1);
            runs.push(Extent { lblk, pblk, len });
        }
        (runs, etbs)
    }

    /// dumpe2fs's "Block bitmap at", "Inode bitmap at", "Inode table at" of group `g`.
    fn dumpe2fs_group(dump: &str, g: u32) -> (u64, u64, u64) {
        let head = format!("Group {g}: ");
        let lines: Vec<&str> = dump
            .lines()
            .skip_while(|l| !l.starts_with(&head))
            .take(8)
            .collect();
        let at = |key: &str| -> u64 {
            let l = lines
                .iter()
                .find(|l| l.trim_start().starts_with(key))
                .expect(key);
            let rest = &l.trim_start()[key.len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a block")
        };
        (
            at("Block bitmap at "),
            at("Inode bitmap at "),
            at("Inode table at "),
        )
    }

    fn header(dump: &str, key: &str) -> u64 {
        let l = dump.lines().find(|l| l.starts_with(key)).expect(key);
        l[key.len()..].trim().parse().expect("a number")
    }

    #[test]
    fn the_layout_matches_mkfs_ext4_on_sparse_images() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        if e2fs("mkfs.ext4", &["-V"]).is_none() || e2fs("debugfs", &["-V"]).is_none() {
            assert!(
                !ci,
                "CI=true but mkfs.ext4 / debugfs (e2fsprogs) are not installed"
            );
            eprintln!("skipped: e2fsprogs is not installed");
            return;
        }
        // The default ext4 features of mke2fs.conf 1.47.0, spelled out so that a machine's own
        // mke2fs.conf cannot change them.
        let features = "none,has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,\
                        extra_isize,sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr";
        let sizes = [
            GIB,
            16 * GIB,
            100 * GIB,
            200 * GIB,
            5 * GIB + (100 << 10),
            700 << 20,
        ];
        let mut cases: Vec<MkfsOptions> = sizes.into_iter().map(MkfsOptions::new).collect();
        // Other options: fewer groups per flex group, none (tables in every group), bigger
        // inodes, a requested journal.
        let base = MkfsOptions::new(16 * GIB);
        cases.push(MkfsOptions {
            flex_bg: 4,
            ..base.clone()
        });
        cases.push(MkfsOptions {
            flex_bg: 1,
            ..MkfsOptions::new(3 * GIB)
        });
        cases.push(MkfsOptions {
            inode_size: 512,
            inode_ratio: 65536,
            ..base.clone()
        });
        cases.push(MkfsOptions {
            journal_blocks: Some(4096),
            ..base
        });
        for o in cases {
            let size = o.size_bytes;
            let path = std::env::temp_dir().join(format!("vmio-ext4-{}.img", std::process::id()));
            let file = std::fs::File::create(&path).expect("a temp file");
            file.set_len(size).expect("a sparse file");
            drop(file);
            let img = path.to_str().expect("a UTF-8 path");
            let (isz, ratio, flex) = (
                o.inode_size.to_string(),
                o.inode_ratio.to_string(),
                o.flex_bg.to_string(),
            );
            let mut mk = vec![
                "-F", "-q", "-T", "default", "-b", "4096", "-I", &isz, "-i", &ratio,
            ];
            mk.extend(["-G", &flex, "-O", features]);
            let journal = o
                .journal_blocks
                .map(|j| format!("size={}", (j * BLOCK_BYTES) >> 20));
            if let Some(j) = &journal {
                mk.extend(["-J", j]);
            }
            mk.push(img);
            e2fs("mkfs.ext4", &mk).expect("mkfs.ext4");
            let dump = e2fs("dumpe2fs", &[img]).expect("dumpe2fs");
            let stat = |ino: u32| {
                e2fs("debugfs", &["-R", &format!("stat <{ino}>"), img]).expect("debugfs")
            };
            let size = format!("{o:?}");
            let l = Layout::mkfs(&o).expect("valid options");
            assert_eq!(header(&dump, "Block count:"), l.blocks, "{size}: blocks");
            assert_eq!(
                header(&dump, "Reserved GDT blocks:"),
                l.reserved_gdt_blocks,
                "{size}"
            );
            assert_eq!(
                header(&dump, "Inodes per group:"),
                l.inodes_per_group as u64,
                "{size}"
            );
            assert_eq!(
                header(&dump, "Free blocks:"),
                Ext4::new(l.clone()).free_blocks(),
                "{size}"
            );
            for g in [0, 1, 15, 16, 17, l.groups - 1]
                .into_iter()
                .filter(|&g| g < l.groups)
            {
                let model = (l.block_bitmap(g), l.inode_bitmap(g), l.inode_table(g));
                assert_eq!(dumpe2fs_group(&dump, g), model, "{size}: group {g}");
            }
            let (journal, etbs) = debugfs_extents(&stat(JOURNAL_INO));
            assert_eq!(journal, l.journal_extents, "{size}: journal");
            assert_eq!(
                etbs,
                l.journal_tree_block.into_iter().collect::<Vec<_>>(),
                "{size}"
            );
            let (root, _) = debugfs_extents(&stat(ROOT_INO));
            assert_eq!(
                root,
                vec![Extent {
                    lblk: 0,
                    pblk: l.root_dir_block,
                    len: 1
                }],
                "{size}"
            );
            let (lpf, _) = debugfs_extents(&stat(LOST_FOUND_INO));
            assert_eq!(
                lpf,
                vec![Extent {
                    lblk: 0,
                    pblk: l.lost_found_block,
                    len: 4
                }],
                "{size}"
            );
            let resize = stat(7);
            assert!(
                resize.contains(&format!("(DIND):{}", l.resize_block)),
                "{size}: resize inode"
            );
            std::fs::remove_file(&path).expect("remove the image");
        }
    }
}
