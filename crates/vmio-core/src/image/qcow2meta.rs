//! A qcow2 file's metadata as QEMU keeps it (docs/interop/qcow2.txt; block/qcow2-refcount.c,
//! block/qcow2-cache.c, block/qcow2-cluster.c `l2_allocate`): where the header, refcount
//! table, refcount blocks, L1 and L2 tables and data clusters sit in the file, how a cluster
//! is allocated and its refcount updated, and the rules by which dirty L2 slices and refcount
//! blocks are written back. Every operation appends the I/O it costs to a request's plan
//! ([`Step`]s, run by [`super::qcow2`]).
//!
//! ```text
//! layout (qcow2_co_create, alloc_clusters_noref):
//!   cluster 0 header | refcount table (T clusters: enough for the fully allocated file) |
//!   refcount block 0 | L1 table | then appended in allocation order: L2 tables, data
//!   clusters, refcount blocks (each placed at the end when the end enters a range without
//!   one, describing itself: alloc_refcount_block); freed clusters reused lowest first
//!   populated / preallocated: guest clusters 0..p allocated in guest order at creation
//!
//! alloc_cluster (qcow2_alloc_clusters -> update_refcount +1):
//!   h = lowest freed cluster, else the end (after placing a missing refcount block:
//!       block dirty in the cache, refcount cache flushed, the refcount table's sector
//!       written and synced: bdrv_pwrite_sync)
//!   refcount block of h: get (miss: replace the LRU entry, read the block), mark dirty
//! l2_allocate(t):
//!   alloc_cluster; qcow2_cache_flush(refcounts); every slice of the new table taken empty
//!   (qcow2_cache_get_empty) and dirty; qcow2_cache_flush(L2); qcow2_write_l1_entry (the L1
//!   entry's sector, bdrv_pwrite_sync)
//! get(cache, key) (qcow2_cache_do_get): hit, or replace the LRU entry: if it is dirty,
//!   qcow2_cache_entry_flush it (below), then read the new one (not for _get_empty)
//! qcow2_cache_entry_flush(c, e): if c depends on the other cache: qcow2_cache_flush(other)
//!   (its dirty entries written, then fdatasync), the dependency cleared; write e
//! qcow2_cache_write(c): entry_flush of every dirty entry in slot order
//! qcow2_cache_flush(c): qcow2_cache_write(c), then fdatasync
//! qcow2_cache_set_dependency(c, d): if d depends on c, flush that first; c depends on d
//! ```
//!
//! Metadata writes smaller than a sector (the L1 entry, a refcount table entry) are one
//! 512-byte sector (QEMU writes MAX(8, request_alignment) bytes: 8 through the page cache,
//! the logical block with O_DIRECT).

use super::l2cache::{Lookup, MetaCache};
use super::spec::{
    qcow2_file_bytes, refcount_metadata_clusters, refcounts_per_block, ImageSpec, ENTRY_BYTES,
};
use super::ImageStats;
use crate::request::Op;
use std::collections::BTreeSet;

/// A map entry: unallocated (reads go to the backing chain).
pub(super) const UNALLOC: u32 = 0;
/// A map entry: reads as zeroes (QCOW_OFLAG_ZERO, after a discard over a backing file).
pub(super) const ZERO: u32 = u32::MAX;
pub(super) const SECTOR: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Which {
    L2,
    Refcount,
}

/// One step of a request's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Metadata or copy-on-write I/O.
    Io {
        op: Op,
        offset: u64,
        len: u64,
    },
    /// The guest request's own data I/O (ImageAction::Io's `data`).
    Data {
        op: Op,
        offset: u64,
        len: u64,
    },
    /// A write-zeroes of the file's range (handle_alloc_space).
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    Flush,
    /// The driver's own work, `ns` with no I/O (zeroing a read's buffer).
    Delay {
        ns: crate::Ns,
    },
    /// Wait for every Io, WriteZeroes, Flush and Delay issued so far.
    Wait,
    /// Release the image lock.
    Unlock,
    /// Take the image lock again for the link phase.
    Relock,
    /// Take the image lock again for the request itself (after its block-status query).
    Again,
    /// The request is done: nothing of the plan after this step runs.
    Done,
}

/// One qcow2 file: its layout, map and caches.
#[derive(Clone, Debug)]
pub(super) struct File {
    /// Byte offset of the file in the disk's region.
    pub(super) base: u64,
    pub(super) cs: u64,
    /// L2 entries per table, per slice; slices per table; slice bytes.
    pub(super) ept: u64,
    pub(super) eps: u64,
    pub(super) spt: u64,
    pub(super) entry_bytes: u64,
    /// Guest cluster -> host cluster + 1 (UNALLOC, ZERO).
    pub(super) map: Vec<u32>,
    /// L2 table -> host cluster + 1 (0: none).
    pub(super) l2_host: Vec<u32>,
    /// Refcount block -> host cluster + 1 (0: none).
    pub(super) rb_host: Vec<u32>,
    pub(super) rpb: u64,
    /// Host clusters in use (the file's end).
    pub(super) end: u64,
    pub(super) free: BTreeSet<u32>,
    pub(super) reftable_off: u64,
    pub(super) l1_off: u64,
    pub(super) l2: MetaCache,
    pub(super) rc: MetaCache,
    /// qcow2_cache_set_dependency: the L2 cache's writes wait for the refcount cache, or the
    /// reverse.
    pub(super) l2_depends: bool,
    pub(super) rc_depends: bool,
    pub(super) lazy: bool,
    /// The header's dirty bit is set (lazy refcounts after the first allocation).
    pub(super) marked_dirty: bool,
    pub(super) scratch_l2: Vec<u32>,
    pub(super) scratch_rc: Vec<u32>,
}

impl File {
    pub(super) fn new(
        base: u64,
        virtual_size: u64,
        spec: &ImageSpec,
        populated_clusters: u64,
    ) -> Self {
        let cs = spec.cluster_size;
        let clusters = virtual_size.div_ceil(cs);
        let ept = cs / ENTRY_BYTES;
        let entry_bytes = spec.l2_cache_entry_bytes(virtual_size).min(cs);
        let eps = entry_bytes / ENTRY_BYTES;
        let spt = cs / entry_bytes;
        let tables = clusters.div_ceil(ept);
        let rpb = refcounts_per_block(cs);
        let full = qcow2_file_bytes(virtual_size, cs) / cs;
        let (_, table_clusters) = refcount_metadata_clusters(full, cs);
        let mut f = File {
            base,
            cs,
            ept,
            eps,
            spt,
            entry_bytes,
            map: vec![UNALLOC; clusters as usize],
            l2_host: vec![0; tables as usize],
            rb_host: vec![0; (full / rpb + 2) as usize],
            rpb,
            end: 0,
            free: BTreeSet::new(),
            reftable_off: cs,
            l1_off: 0,
            l2: MetaCache::new(
                spec.l2_cache_entries(virtual_size) as usize,
                (tables * spt) as usize,
            ),
            rc: MetaCache::new(
                spec.refcount_cache_entries() as usize,
                (full / rpb + 2) as usize,
            ),
            l2_depends: false,
            rc_depends: false,
            lazy: spec.lazy_refcounts,
            marked_dirty: false,
            scratch_l2: Vec::new(),
            scratch_rc: Vec::new(),
        };
        // header, refcount table, refcount block 0, L1 table
        f.end = 1 + table_clusters;
        f.rb_host[0] = f.end as u32 + 1;
        f.end += 1;
        f.l1_off = f.end * cs;
        f.end += (tables * ENTRY_BYTES).div_ceil(cs).max(1);
        // the ranges the L1 table spans (below 64 KiB clusters a block covers little)
        for rb in 1..=((f.end - 1) / rpb) as usize {
            if f.rb_host[rb] == 0 {
                f.rb_host[rb] = f.end as u32 + 1;
                f.end += 1;
            }
        }
        for c in 0..populated_clusters.min(clusters) {
            let t = (c / ept) as usize;
            if f.l2_host[t] == 0 {
                let h = f.alloc_quiet();
                f.l2_host[t] = h + 1;
            }
            let h = f.alloc_quiet();
            f.map[c as usize] = h + 1;
        }
        f
    }

    pub(super) fn host(&self, cluster: u32) -> u64 {
        self.base + cluster as u64 * self.cs
    }

    pub(super) fn slice_key(&self, c: u64) -> u32 {
        (c / self.eps) as u32
    }

    pub(super) fn entry_off(&self, which: Which, key: u32) -> (u64, u64) {
        match which {
            Which::L2 => {
                let t = key as u64 / self.spt;
                let table = self.l2_host[t as usize].saturating_sub(1);
                (
                    self.host(table) + (key as u64 % self.spt) * self.entry_bytes,
                    self.entry_bytes,
                )
            }
            Which::Refcount => (
                self.host(self.rb_host[key as usize].saturating_sub(1)),
                self.cs,
            ),
        }
    }

    pub(super) fn cache(&mut self, which: Which) -> &mut MetaCache {
        match which {
            Which::L2 => &mut self.l2,
            Which::Refcount => &mut self.rc,
        }
    }

    pub(super) fn depends(&mut self, which: Which) -> &mut bool {
        match which {
            Which::L2 => &mut self.l2_depends,
            Which::Refcount => &mut self.rc_depends,
        }
    }

    pub(super) fn write_entry(
        &mut self,
        which: Which,
        key: u32,
        plan: &mut Vec<Step>,
        st: &mut ImageStats,
    ) {
        let (offset, len) = self.entry_off(which, key);
        plan.push(Step::Io {
            op: Op::Write,
            offset,
            len,
        });
        plan.push(Step::Wait);
        st.metadata_written_bytes += len;
        self.cache(which).clean(key);
    }

    /// qcow2_cache_entry_flush's dependency: flush the other cache first.
    pub(super) fn flush_dependency_of(
        &mut self,
        which: Which,
        plan: &mut Vec<Step>,
        st: &mut ImageStats,
    ) {
        if *self.depends(which) {
            let other = match which {
                Which::L2 => Which::Refcount,
                Which::Refcount => Which::L2,
            };
            self.cache_flush(other, plan, st);
            *self.depends(which) = false;
        }
    }

    /// qcow2_cache_write: every dirty entry, in slot order.
    pub(super) fn cache_write(&mut self, which: Which, plan: &mut Vec<Step>, st: &mut ImageStats) {
        let mut keys = std::mem::take(match which {
            Which::L2 => &mut self.scratch_l2,
            Which::Refcount => &mut self.scratch_rc,
        });
        keys.clear();
        self.cache(which).dirty_keys(&mut keys);
        for &k in &keys {
            if self.cache(which).is_dirty(k) {
                self.flush_dependency_of(which, plan, st);
                self.write_entry(which, k, plan, st);
            }
        }
        match which {
            Which::L2 => self.scratch_l2 = keys,
            Which::Refcount => self.scratch_rc = keys,
        }
    }

    /// qcow2_cache_flush: write, then fdatasync.
    pub(super) fn cache_flush(&mut self, which: Which, plan: &mut Vec<Step>, st: &mut ImageStats) {
        self.cache_write(which, plan, st);
        plan.push(Step::Flush);
        plan.push(Step::Wait);
    }

    /// qcow2_cache_set_dependency(c, dependency).
    pub(super) fn set_dependency(&mut self, c: Which, plan: &mut Vec<Step>, st: &mut ImageStats) {
        let dependency = match c {
            Which::L2 => Which::Refcount,
            Which::Refcount => Which::L2,
        };
        if *self.depends(dependency) {
            self.flush_dependency_of(dependency, plan, st);
        }
        *self.depends(c) = true;
    }

    /// qcow2_cache_get (`read`) or qcow2_cache_get_empty of entry `key`.
    pub(super) fn get(
        &mut self,
        which: Which,
        key: u32,
        read: bool,
        plan: &mut Vec<Step>,
        st: &mut ImageStats,
    ) {
        match self.cache(which).get(key) {
            Lookup::Hit => {
                if which == Which::L2 && read {
                    st.l2_hits += 1;
                }
            }
            Lookup::Miss { victim } => {
                if which == Which::L2 && read {
                    st.l2_misses += 1;
                }
                if let Some((v, true)) = victim {
                    self.flush_dependency_of(which, plan, st);
                    let (offset, len) = self.entry_off(which, v);
                    plan.push(Step::Io {
                        op: Op::Write,
                        offset,
                        len,
                    });
                    plan.push(Step::Wait);
                    st.metadata_written_bytes += len;
                }
                if read {
                    let (offset, len) = self.entry_off(which, key);
                    plan.push(Step::Io {
                        op: Op::Read,
                        offset,
                        len,
                    });
                    plan.push(Step::Wait);
                    st.metadata_read_bytes += len;
                }
            }
        }
    }

    /// The L2 lookup of guest cluster `c`: false when its table does not exist (no I/O).
    pub(super) fn l2_lookup(&mut self, c: u64, plan: &mut Vec<Step>, st: &mut ImageStats) -> bool {
        if self.l2_host[(c / self.ept) as usize] == 0 {
            return false;
        }
        let key = self.slice_key(c);
        self.get(Which::L2, key, true, plan, st);
        true
    }

    /// Refcount blocks for every range up to the file's end (alloc_refcount_block: the new
    /// block sits at the end and describes itself). With a plan: the new block enters the
    /// cache dirty, the refcount cache is flushed, the refcount table's sector written + sync.
    pub(super) fn place_refblocks(
        &mut self,
        mut plan: Option<&mut Vec<Step>>,
        st: &mut ImageStats,
    ) {
        loop {
            let rb = (self.end / self.rpb) as usize;
            if rb >= self.rb_host.len() {
                self.rb_host.resize(rb + 1, 0);
            }
            if self.rb_host[rb] != 0 {
                return;
            }
            self.rb_host[rb] = self.end as u32 + 1;
            self.end += 1;
            if let Some(plan) = plan.as_deref_mut() {
                self.get(Which::Refcount, rb as u32, false, plan, st);
                self.rc.mark_dirty(rb as u32);
                self.cache_flush(Which::Refcount, plan, st);
                let off = self.reftable_off + rb as u64 * ENTRY_BYTES;
                plan.push(Step::Io {
                    op: Op::Write,
                    offset: self.base + off / SECTOR * SECTOR,
                    len: SECTOR,
                });
                plan.push(Step::Wait);
                plan.push(Step::Flush);
                plan.push(Step::Wait);
                st.metadata_written_bytes += SECTOR;
            }
        }
    }

    /// A host cluster without I/O (creation).
    pub(super) fn alloc_quiet(&mut self) -> u32 {
        if let Some(h) = self.free.pop_first() {
            return h;
        }
        self.place_refblocks(None, &mut ImageStats::default());
        let h = self.end as u32;
        self.end += 1;
        h
    }

    /// qcow2_alloc_clusters for one cluster: reuse the lowest freed one or append (a new
    /// refcount block first when the end reaches a range without one), then refcount +1 in
    /// the refcount cache (update_refcount).
    pub(super) fn alloc_cluster(&mut self, plan: &mut Vec<Step>, st: &mut ImageStats) -> u32 {
        let h = match self.free.pop_first() {
            Some(h) => h,
            None => {
                self.place_refblocks(Some(plan), st);
                let h = self.end as u32;
                self.end += 1;
                h
            }
        };
        let rb = (h as u64 / self.rpb) as u32;
        self.get(Which::Refcount, rb, true, plan, st);
        self.rc.mark_dirty(rb);
        h
    }

    /// l2_allocate(t): a new L2 table.
    pub(super) fn l2_allocate(&mut self, t: u64, plan: &mut Vec<Step>, st: &mut ImageStats) {
        let h = self.alloc_cluster(plan, st);
        self.cache_flush(Which::Refcount, plan, st);
        self.l2_host[t as usize] = h + 1;
        for s in 0..self.spt {
            let key = (t * self.spt + s) as u32;
            self.get(Which::L2, key, false, plan, st);
            self.l2.mark_dirty(key);
        }
        self.cache_flush(Which::L2, plan, st);
        let off = self.l1_off + t * ENTRY_BYTES;
        plan.push(Step::Io {
            op: Op::Write,
            offset: self.base + off / SECTOR * SECTOR,
            len: SECTOR,
        });
        plan.push(Step::Wait);
        plan.push(Step::Flush);
        plan.push(Step::Wait);
        st.metadata_written_bytes += SECTOR;
    }

    /// Whether this file holds guest cluster `c` (a backing file's view).
    pub(super) fn has(&self, c: u64) -> bool {
        matches!(self.map.get(c as usize), Some(&v) if v != UNALLOC && v != ZERO)
    }
}
