//! The qcow2 driver against closed forms.

use super::qcow2::Qcow2;
use super::*;
use crate::table::Table;
use std::collections::VecDeque;

const K: u64 = 1024;
const M: u64 = 1 << 20;
const G: u64 = 1 << 30;

fn spec(text: &str) -> ImageSpec {
    let t: std::collections::BTreeMap<String, toml::Value> = toml::from_str(text).unwrap();
    ImageSpec::from_raw(&t, "vm[0].disk[0].image", Format::Qcow2).unwrap()
}

/// An engine that completes every Io, WriteZeroes, Flush and Delay at once, in issue order.
struct Engine {
    d: Qcow2,
    next: u32,
    log: Vec<ImageAction>,
}

impl Engine {
    fn new(text: &str, size: u64) -> Self {
        Self::with_caps(text, size, ImageCaps::default())
    }

    fn with_caps(text: &str, size: u64, caps: ImageCaps) -> Self {
        Engine {
            d: Qcow2::new(&spec(text), size).with_caps(caps),
            next: 0,
            log: Vec::new(),
        }
    }

    /// Submit one request, run it to completion, return its actions (all but Complete).
    fn run(&mut self, op: Op, offset: u64, len: u64) -> Vec<ImageAction> {
        self.next += 1;
        let req = Request {
            id: self.next,
            disk: 0,
            op,
            offset,
            len,
        };
        let mut out = Vec::new();
        self.d.on_request(0, req, &mut out);
        let mut q: VecDeque<ImageAction> = out.drain(..).collect();
        let mut seen = Vec::new();
        let mut completed = false;
        while let Some(a) = q.pop_front() {
            match a {
                ImageAction::Io { token, .. }
                | ImageAction::WriteZeroes { token, .. }
                | ImageAction::Flush { token }
                | ImageAction::Delay { token, .. } => {
                    seen.push(a);
                    self.d.on_done(0, token, &mut out);
                    q.extend(out.drain(..));
                }
                ImageAction::Complete { req: r } => {
                    assert_eq!(r, req.id);
                    completed = true;
                }
            }
        }
        assert!(completed, "request {req:?} did not complete");
        self.log.extend(seen.iter().copied());
        seen
    }

    fn stats(&self) -> ImageStats {
        self.d.stats()
    }
}

/// (op, offset, len) of the Ios, "Z" for a WriteZeroes, "F" for a Flush, "D" for a Delay
/// (its ns as the length).
fn shape(a: &[ImageAction]) -> Vec<(char, u64, u64)> {
    a.iter()
        .map(|a| match *a {
            ImageAction::Io {
                op, offset, len, ..
            } => (
                match op {
                    Op::Read => 'R',
                    Op::Write => 'W',
                    Op::Trim => 'T',
                    Op::Flush => 'f',
                },
                offset,
                len,
            ),
            ImageAction::WriteZeroes { offset, len, .. } => ('Z', offset, len),
            ImageAction::Flush { .. } => ('F', 0, 0),
            ImageAction::Delay { ns, .. } => ('D', 0, ns),
            ImageAction::Complete { .. } => ('C', 0, 0),
        })
        .collect()
}

fn kinds(a: &[ImageAction]) -> String {
    shape(a).iter().map(|s| s.0).collect()
}

#[test]
fn an_l2_cache_of_s_bytes_covers_s_times_cluster_size_over_8_bytes_of_disk() {
    // 16 GiB, fully populated, 64 KiB clusters, 1 MiB of L2 cache: 4 KiB slices (the cache
    // does not cover the 2 MiB of L2 tables), 256 of them, covering 1 MiB x 64 KiB / 8 = 8 GiB.
    let mut e = Engine::new("populated = 1.0\nl2_cache_size = \"1m\"", 16 * G);
    let covered = M * 64 * K / 8;
    assert_eq!(covered, 8 * G);
    let slice_span = 4 * K / 8 * 64 * K; // 32 MiB of disk per slice
    let slices = covered / slice_span;
    assert_eq!(slices, 256);
    for i in 0..slices {
        e.run(Op::Read, i * slice_span + 12 * K, 4 * K);
    }
    assert_eq!(e.stats().l2_misses, 256);
    for i in (0..slices).rev() {
        e.run(Op::Read, i * slice_span, 4 * K);
    }
    let s = e.stats();
    assert_eq!(
        (s.l2_hits, s.l2_misses),
        (256, 256),
        "the first 8 GiB stay cached"
    );
    // One slice beyond the covered range evicts the least recently used (slice 255).
    e.run(Op::Read, covered, 4 * K);
    e.run(Op::Read, 255 * slice_span, 4 * K);
    assert_eq!(e.stats().l2_misses, 258);
    e.run(Op::Read, 0, 4 * K);
    assert_eq!(e.stats().l2_misses, 258, "slice 0 was used last, it stays");
}

#[test]
fn a_cold_random_read_costs_one_metadata_read_and_one_data_read_and_a_warm_one_only_the_data() {
    let mut e = Engine::new("populated = 1.0\nl2_cache_size = \"1m\"", 16 * G);
    let a = e.run(Op::Read, 5 * G + 8 * K, 4 * K);
    let s = shape(&a);
    assert_eq!(kinds(&a), "RR");
    assert_eq!(s[0].2, 4 * K, "one L2 slice");
    assert_eq!(s[1].2, 4 * K, "the data");
    // The data of a sequentially filled image: [L2][8192 clusters][L2]... after the header,
    // refcount table, first refcount block and L1 table.
    assert!(s[1].1 > 5 * G);
    let b = e.run(Op::Read, 5 * G + 32 * K, 4 * K);
    assert_eq!(kinds(&b), "R");
    assert_eq!(shape(&b)[0].1, s[1].1 + 24 * K);
    let st = e.stats();
    assert_eq!((st.l2_misses, st.l2_hits), (1, 1));
    assert_eq!(st.metadata_read_bytes, 4 * K);
}

#[test]
fn a_read_of_a_new_image_completes_after_the_lookup_with_no_io_only_the_zero_fill() {
    let mut e = Engine::new("", G);
    assert_eq!(kinds(&e.run(Op::Read, 0, 64 * K)), "D");
    assert_eq!(e.stats().l2_misses, 0, "no L2 table, no lookup I/O");
}

#[test]
fn an_unallocated_1_mib_read_costs_1_mib_over_the_zero_fill_rate() {
    let mut e = Engine::new("", G);
    let a = e.run(Op::Read, 3 * M, M);
    // qemu_iovec_memset of 1 MiB at 10 GB/s: 104,857.6 ns, rounded up.
    assert_eq!(shape(&a), vec![('D', 0, 104_858)]);
    assert_eq!(
        104_858,
        (M as u128 * 1_000_000_000).div_ceil(crate::units::MEMSET_BYTES_PER_SEC as u128) as u64
    );
    assert_eq!(e.stats().zero_fill_bytes, M);
    // Half of it allocated: the other half is filled while the data is read, one Delay of
    // 512 KiB beside the read.
    let mut h = Engine::new("populated = 0.5", 16 * M);
    let b = h.run(Op::Read, 8 * M - 512 * K, M);
    let s = shape(&b);
    assert_eq!(kinds(&b), "RDR", "the L2 slice, the zero fill, the data");
    assert_eq!(s[1].2, 52_429);
    assert_eq!(s[2].2, 512 * K);
}

/// QEMU `version` with the image file on a filesystem volume (`on_fs`) or a block device.
fn caps(version: &str, on_fs: bool) -> ImageCaps {
    ImageCaps::of(crate::vdisk::qemu::lookup(version).unwrap(), on_fs)
}

#[test]
fn a_4k_first_write_to_a_64k_cluster_on_qemu_7_2_over_ext4_zeroes_the_cluster_then_writes_the_data()
{
    let mut e = Engine::with_caps("populated = 0.25", G, caps("7.2", true));
    let a = e.run(Op::Write, 5000 * 64 * K + 4 * K, 4 * K);
    let s = shape(&a);
    // L2 slice read, refcount block read, then handle_alloc_space: one write-zeroes of the
    // whole new cluster at the file's end, then the guest's 4 KiB alone in it; no zero COW.
    assert_eq!(kinds(&a), "RRZW");
    let cluster = e.d.image_clusters() * 64 * K - 64 * K;
    assert_eq!(s[2], ('Z', cluster, 64 * K));
    assert_eq!(s[3], ('W', cluster + 4 * K, 4 * K));
    let st = e.stats();
    assert_eq!(
        (st.allocations, st.zeroed_bytes, st.cow_bytes),
        (1, 64 * K, 0)
    );
}

#[test]
fn the_same_write_on_qemu_2_11_or_on_a_block_device_writes_the_zeroes_with_the_data() {
    // QEMU 2.11 has no handle_alloc_space; on a block device QEMU >= 4.1 tries it, file-posix
    // refuses BLKZEROOUT under BDRV_REQ_NO_FALLBACK, and the zero buffers are written.
    for c in [caps("2.11", true), caps("7.2", false), caps("2.11", false)] {
        let mut e = Engine::with_caps("populated = 0.25", G, c);
        let a = e.run(Op::Write, 5000 * 64 * K + 4 * K, 4 * K);
        let cluster = e.d.image_clusters() * 64 * K - 64 * K;
        assert_eq!(kinds(&a), "RRW", "{c:?}");
        assert_eq!(shape(&a)[2], ('W', cluster, 64 * K));
        let st = e.stats();
        assert_eq!(
            (st.zeroed_bytes, st.cow_bytes),
            (0, 60 * K),
            "4 KiB head + 56 KiB tail"
        );
    }
}

#[test]
fn with_a_backing_file_holding_the_data_the_first_write_copies_it_up_whatever_the_release() {
    let text = "backing = [{ format = \"raw\" }]";
    let top = qcow2_file_bytes(G);
    let mut e = Engine::with_caps(text, G, caps("7.2", true));
    let a = e.run(Op::Write, 768 * M + 4 * K, 4 * K);
    let s = shape(&a);
    assert!(!kinds(&a).contains('Z'), "{s:?}");
    let reads: Vec<_> = s.iter().filter(|x| x.0 == 'R' && x.1 >= top).collect();
    assert_eq!(
        reads,
        vec![
            &('R', top + 768 * M, 4 * K),
            &('R', top + 768 * M + 8 * K, 56 * K)
        ]
    );
    assert!(s.last().unwrap().0 == 'W' && s.last().unwrap().2 == 64 * K);
    let st = e.stats();
    assert_eq!(
        (st.zeroed_bytes, st.cow_bytes, st.backing_read_bytes),
        (0, 60 * K, 60 * K)
    );
}

#[test]
fn a_backing_chain_without_the_cluster_reads_as_zeroes_so_the_cluster_is_zeroed() {
    // is_zero_cow asks the whole chain: the qcow2 backing file has no table for the second
    // half of the disk (its lookup costs nothing), so the areas read as zeroes.
    let text = "backing = [{ format = \"qcow2\", populated = 0.5 }]";
    let mut e = Engine::with_caps(text, G, caps("8.2", true));
    let a = e.run(Op::Write, 768 * M + 60 * K, 8 * K);
    // Two new clusters, contiguous at the file's end: one write-zeroes of both, then the
    // guest's 8 KiB across their boundary.
    let s = shape(&a);
    let z: Vec<_> = s.iter().filter(|x| x.0 == 'Z').collect();
    assert_eq!(z.len(), 1);
    assert_eq!(z[0].2, 128 * K);
    assert_eq!(s.last().unwrap(), &('W', z[0].1 + 60 * K, 8 * K));
    let st = e.stats();
    assert_eq!(
        (
            st.allocations,
            st.zeroed_bytes,
            st.cow_bytes,
            st.backing_read_bytes
        ),
        (2, 128 * K, 0, 0)
    );
    // A whole-cluster write has no COW area: nothing to zero.
    e.run(Op::Write, 900 * M, 64 * K);
    assert_eq!(e.stats().zeroed_bytes, 128 * K);
}

#[test]
fn a_first_write_in_an_existing_table_dirties_one_slice_and_one_refcount_block() {
    // 1 GiB, a quarter populated: table 0 exists; cluster 5000 is not allocated.
    // The L2 cache covers the image (128 KiB of tables): whole-cluster slices.
    let mut e = Engine::new("populated = 0.25", G);
    let a = e.run(Op::Write, 5000 * 64 * K + 4 * K, 4 * K);
    let s = shape(&a);
    // L2 slice read, refcount block read, the data with its copy-on-write: one write of the
    // whole new cluster, at the file's end.
    assert_eq!(kinds(&a), "RRW");
    assert_eq!((s[0].2, s[1].2, s[2].2), (64 * K, 64 * K, 64 * K));
    assert_eq!(s[2].1, e.d.image_clusters() * 64 * K - 64 * K);
    let st = e.stats();
    assert_eq!(st.allocations, 1);
    assert_eq!(st.cow_bytes, 60 * K, "4 KiB head + 56 KiB tail");
    assert_eq!(
        st.metadata_written_bytes, 0,
        "the metadata waits in the caches"
    );
    // A guest flush: the L2 slice depends on the refcount block (set_dependency), so the
    // refcount block is written and synced first, then the slice, then the fdatasync.
    let f = e.run(Op::Flush, 0, 0);
    assert_eq!(kinds(&f), "WFWF");
    assert_eq!(shape(&f)[0].1, s[1].1, "the refcount block");
    assert_eq!(shape(&f)[2].1, s[0].1, "the L2 slice");
    assert_eq!(e.stats().metadata_written_bytes, 128 * K);
    // Every dirty entry is written once: a second flush only syncs.
    assert_eq!(kinds(&e.run(Op::Flush, 0, 0)), "F");
    // The cluster is allocated now: an overwrite is one data write in place.
    let o = e.run(Op::Write, 5000 * 64 * K, 4 * K);
    assert_eq!(shape(&o), vec![('W', s[2].1, 4 * K)]);
}

#[test]
fn lazy_refcounts_set_the_dirty_bit_once_and_flushes_write_only_l2_slices() {
    let mut e = Engine::new("populated = 0.25\nlazy_refcounts = true", G);
    let a = e.run(Op::Write, 5000 * 64 * K, 4 * K);
    // lookups, the data, then qcow2_mark_dirty: the header's sector written and synced.
    assert_eq!(kinds(&a), "RRWWF");
    assert_eq!(shape(&a)[3], ('W', 0, 512));
    let f = e.run(Op::Flush, 0, 0);
    assert_eq!(kinds(&f), "WF", "the L2 slice, then the fdatasync");
    let b = e.run(Op::Write, 5001 * 64 * K, 4 * K);
    assert_eq!(
        kinds(&b),
        "W",
        "cached slice and refcount block, dirty bit already set"
    );
}

#[test]
fn copy_on_write_covers_the_untouched_head_and_tail_and_a_full_cluster_has_none() {
    let mut e = Engine::new("", G);
    let c = 64 * K;
    e.run(Op::Write, 10 * c + 8 * K, 4 * K);
    assert_eq!(e.stats().cow_bytes, 8 * K + 52 * K);
    e.run(Op::Write, 20 * c, c);
    assert_eq!(
        e.stats().cow_bytes,
        60 * K,
        "a whole cluster: no copy-on-write"
    );
    // Two clusters from the middle of one to the middle of the next: head and tail.
    let a = e.run(Op::Write, 30 * c + 16 * K, c);
    assert_eq!(e.stats().cow_bytes, 60 * K + 16 * K + 48 * K);
    // Both new clusters are contiguous at the file's end: one write of 128 KiB.
    let w: Vec<_> = shape(&a)
        .into_iter()
        .filter(|s| s.0 == 'W' && s.2 > 512)
        .collect();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].2, 2 * c);
    assert_eq!(e.stats().allocations, 4);
}

#[test]
fn the_first_write_to_a_new_image_allocates_an_l2_table_with_three_syncs() {
    // l2_allocate: the table's cluster (refcount block read and dirtied), the refcount
    // cache flushed (block + sync), the new table written (all its slices) + sync, the L1
    // entry's sector + sync; then the data cluster.
    let mut e = Engine::new("", G);
    let a = e.run(Op::Write, 0, 64 * K);
    let s = shape(&a);
    assert_eq!(kinds(&a), "RWFWFWFW");
    assert_eq!(s[0].2, 64 * K, "the refcount block");
    assert_eq!(s[3].2, 64 * K, "the new L2 table, one slice of a cluster");
    assert_eq!(s[5].2, 512, "the L1 entry's sector");
    assert_eq!(s[7].2, 64 * K, "the data");
    assert_eq!(
        s[7].1,
        s[3].1 + 64 * K,
        "the data cluster follows its table"
    );
}

#[test]
fn a_flush_writes_every_dirty_slice_once_then_one_fdatasync() {
    // 4 KiB slices (the 1 MiB cache does not cover 16 GiB of tables): four writes in four
    // slices of one populated table, with lazy refcounts (no refcount writes at a flush).
    let mut e = Engine::new(
        "populated = 0.0\nlazy_refcounts = true\nl2_cache_size = \"1m\"",
        16 * G,
    );
    e.run(Op::Write, 0, 4 * K); // allocates table 0 (its slices written at once)
    e.run(Op::Flush, 0, 0);
    let slice_span = 512 * 64 * K;
    for i in 1..5 {
        e.run(Op::Write, i * slice_span, 4 * K);
    }
    let f = e.run(Op::Flush, 0, 0);
    assert_eq!(kinds(&f), "WWWWF");
    assert!(shape(&f)[..4].iter().all(|s| s.2 == 4 * K));
}

#[test]
fn a_backing_chain_read_goes_down_to_the_nearest_layer_that_has_the_cluster() {
    // top (empty) -> qcow2 backing, half populated -> raw backing.
    let text = "backing = [{ format = \"qcow2\", populated = 0.5 }, { format = \"raw\" }]";
    let mut e = Engine::new(text, G);
    let top = qcow2_file_bytes(G);
    // A cluster in the first half: the qcow2 backing file's L2 slice, then its data.
    let a = e.run(Op::Read, 64 * K, 4 * K);
    let s = shape(&a);
    assert_eq!(kinds(&a), "RR");
    assert!(s[0].1 >= top && s[0].1 < 2 * top);
    assert!(s[1].1 >= top && s[1].1 < 2 * top);
    // A cluster of the second half: the qcow2 backing file's lookup finds no L2 table
    // (its tables cover its first half only), so the raw file at the same offset.
    let b = e.run(Op::Read, 768 * M, 4 * K);
    assert_eq!(shape(&b), vec![('R', 2 * top + 768 * M, 4 * K)]);
    assert_eq!(e.stats().backing_read_bytes, 8 * K);
    // A partial first write copies the rest of the cluster up from the backing file.
    let w = e.run(Op::Write, 768 * M, 4 * K);
    let reads: Vec<_> = shape(&w)
        .into_iter()
        .filter(|s| s.0 == 'R' && s.1 >= top)
        .collect();
    assert_eq!(reads, vec![('R', 2 * top + 768 * M + 4 * K, 60 * K)]);
    assert_eq!(e.stats().backing_read_bytes, 8 * K + 60 * K);
    // Now the top image has it.
    let r = e.run(Op::Read, 768 * M, 4 * K);
    assert!(shape(&r).iter().all(|s| s.1 < top));
}

fn qcow2_file_bytes(size: u64) -> u64 {
    spec::qcow2_file_bytes(size, 64 * K)
}

#[test]
fn preallocated_metadata_makes_first_writes_plain_writes() {
    let mut e = Engine::new("preallocation = \"metadata\"", G);
    let a = e.run(Op::Write, 100 * M, 4 * K);
    assert_eq!(kinds(&a), "RW", "the L2 lookup and the data in place");
    assert_eq!(shape(&a)[1].2, 4 * K);
    let st = e.stats();
    assert_eq!(
        (st.allocations, st.cow_bytes, st.metadata_written_bytes),
        (0, 0, 0)
    );
    assert_eq!(kinds(&e.run(Op::Flush, 0, 0)), "F");
}

#[test]
fn a_discard_with_unmap_frees_the_clusters_and_trims_them() {
    let mut e = Engine::new("populated = 1.0\ndiscard = \"unmap\"", G);
    let before = e.run(Op::Read, 0, 4 * K);
    let host0 = shape(&before)[1].1; // [0] is the L2 slice
                                     // 200 KiB from 10 KiB: clusters 1 and 2 are whole, 0 and 3 partial (ignored).
    let d = e.run(Op::Trim, 10 * K, 200 * K);
    let trims: Vec<_> = shape(&d).into_iter().filter(|s| s.0 == 'T').collect();
    assert_eq!(trims, vec![('T', host0 + 64 * K, 128 * K)]);
    assert_eq!(e.stats().discarded_clusters, 2);
    // They read as zeroes now (the buffer filled, no I/O), and the next allocation reuses
    // the lowest freed cluster.
    assert_eq!(kinds(&e.run(Op::Read, 64 * K, 4 * K)), "D");
    let w = e.run(Op::Write, 64 * K, 64 * K);
    assert!(shape(&w).contains(&('W', host0 + 64 * K, 64 * K)));
    // discard = ignore (the default) completes at once.
    let mut i = Engine::new("populated = 1.0", G);
    assert_eq!(kinds(&i.run(Op::Trim, 0, M)), "");
    assert_eq!(i.stats().discarded_clusters, 0);
}

#[test]
fn a_request_over_several_clusters_is_one_io_per_contiguous_run() {
    let mut e = Engine::new("populated = 1.0", G);
    let a = e.run(Op::Read, 0, M);
    assert_eq!(kinds(&a), "RR");
    assert_eq!(shape(&a)[1].2, M);
    // Across an L2 table boundary (8192 clusters = 512 MiB): the table's cluster sits
    // between the runs, two lookups, two reads.
    let b = e.run(Op::Read, 512 * M - 64 * K, 128 * K);
    assert_eq!(kinds(&b), "RRR");
}

#[test]
fn a_write_to_a_cluster_being_allocated_waits_for_the_first() {
    let mut d = Qcow2::new(&spec("populated = 0.25"), G);
    let req = |id, offset| Request {
        id,
        disk: 0,
        op: Op::Write,
        offset,
        len: 4 * K,
    };
    let c = 5000 * 64 * K;
    let mut out = Vec::new();
    d.on_request(0, req(1, c), &mut out);
    d.on_request(0, req(2, c + 8 * K), &mut out);
    // Only the first request's L2 lookup is out: the lock serialises metadata.
    assert_eq!(out.len(), 1);
    let mut pending: VecDeque<ImageAction> = out.drain(..).collect();
    let mut order = Vec::new();
    while let Some(a) = pending.pop_front() {
        match a {
            ImageAction::Io { token, op, len, .. } => {
                order.push((token.0, op, len));
                d.on_done(0, token, &mut out);
            }
            ImageAction::WriteZeroes { token, .. }
            | ImageAction::Flush { token }
            | ImageAction::Delay { token, .. } => d.on_done(0, token, &mut out),
            ImageAction::Complete { req } => order.push((100 + req as u64, Op::Flush, 0)),
        }
        pending.extend(out.drain(..));
    }
    // Request 1 allocates (whole-cluster write); request 2 waits for its link, then finds
    // the cluster allocated: a 4 KiB write in place, no second allocation.
    let st = d.stats();
    assert_eq!(st.allocations, 1);
    let first_done = order.iter().position(|o| o.0 == 101).unwrap();
    let second_write = order
        .iter()
        .position(|o| o.1 == Op::Write && o.2 == 4 * K)
        .unwrap();
    assert!(second_write > first_done, "{order:?}");
}

#[test]
fn build_gives_no_driver_for_raw_and_the_region_for_qcow2() {
    assert!(build(&ImageSpec::raw(), G, ImageCaps::default()).is_none());
    let d = build(&ImageSpec::qcow2(), G, ImageCaps::default()).unwrap();
    assert_eq!(d.file_bytes(), 1_074_135_040);
}

#[test]
fn requests_at_depth_completed_in_any_order_all_complete_and_allocate_each_cluster_once() {
    // 64 MiB image of 4 KiB clusters so requests span several; a small L2 cache (slices
    // evicted while dirty) and a qcow2 backing file; completions in a scrambled order.
    let text = "cluster_size = \"4k\"\nl2_cache_size = \"2k\"\nl2_cache_entry_size = \"1k\"\nrefcount_cache_size = \"16k\"\nbacking = [{ format = \"qcow2\", populated = 0.5, cluster_size = \"64k\" }]";
    for c in [ImageCaps::default(), caps("7.2", true)] {
        let (st, written) = scrambled(text, c);
        assert_eq!(
            st.allocations, written,
            "each written cluster allocated once"
        );
        assert_eq!(st.zeroed_bytes > 0, c.write_zeroes, "{st:?}");
        // With discard = unmap, freed clusters are allocated again by later writes.
        let (st, written) = scrambled(&format!("{text}\ndiscard = \"unmap\""), c);
        assert!(st.discarded_clusters > 0, "{st:?}");
        assert!(st.allocations >= written, "{} < {written}", st.allocations);
    }
}

/// 3000 random requests (reads, writes, flushes, trims after the 2000th), 8 open at a time,
/// their I/O completed in a random order: every one completes once; the stats and the number of
/// distinct clusters written before the first trim.
fn scrambled(text: &str, caps: ImageCaps) -> (ImageStats, u64) {
    let size = 64 * M;
    let mut d = Qcow2::new(&spec(text), size).with_caps(caps);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut out = Vec::new();
    let mut outstanding: Vec<Token> = Vec::new();
    let mut open = std::collections::BTreeSet::new();
    let mut written = std::collections::BTreeSet::new();
    let mut trimmed = false;
    for id in 0..3000u32 {
        let op = match rnd(20) {
            0 => Op::Flush,
            1 if id > 2000 => Op::Trim,
            2..=9 => Op::Write,
            _ => Op::Read,
        };
        let offset = rnd(size / 512) * 512;
        let len = (1 + rnd(32)) * 512;
        if op == Op::Write && !trimmed {
            for c in offset / (4 * K)..=(offset + len - 1).min(size - 1) / (4 * K) {
                written.insert(c);
            }
        }
        trimmed |= op == Op::Trim && text.contains("unmap");
        open.insert(id);
        d.on_request(
            0,
            Request {
                id,
                disk: 0,
                op,
                offset,
                len,
            },
            &mut out,
        );
        loop {
            for a in out.drain(..) {
                match a {
                    ImageAction::Io { token, .. }
                    | ImageAction::WriteZeroes { token, .. }
                    | ImageAction::Flush { token }
                    | ImageAction::Delay { token, .. } => outstanding.push(token),
                    ImageAction::Complete { req } => assert!(open.remove(&req), "{req} twice"),
                }
            }
            // keep up to 8 requests open; complete a random I/O
            if open.len() < 8 && id < 2999 || open.is_empty() {
                break;
            }
            assert!(
                !outstanding.is_empty(),
                "requests {open:?} wait with no I/O out"
            );
            let t = outstanding.swap_remove(rnd(outstanding.len() as u64) as usize);
            d.on_done(0, t, &mut out);
        }
    }
    assert!(open.is_empty(), "requests left: {open:?}");
    assert!(outstanding.is_empty());
    let st = d.stats();
    assert!(st.l2_misses > 0 && st.metadata_written_bytes > 0 && st.backing_read_bytes > 0);
    (st, written.len() as u64)
}

#[test]
fn an_image_file_starts_at_the_size_qemu_img_create_leaves() {
    let size = 1 << 30;
    let raw = ImageSpec::raw();
    assert_eq!(super::initial_file_len(&raw, size), size);
    let mut q = ImageSpec::qcow2();
    // 1 GiB of 64 KiB clusters: header, a refcount table cluster, refcount block 0 and the
    // L1 table (16,384 L2 entries need 2 tables: 16 bytes of L1, one cluster).
    assert_eq!(super::initial_file_len(&q, size), 4 * 65536);
    // A populated half: 8,192 data clusters, all mapped by the first L2 table (8,192
    // entries a table), appended after the metadata.
    q.populated = 0.5;
    assert_eq!(super::initial_file_len(&q, size), (4 + 1 + 8192) * 65536);
    q.populated = 0.0;
    q.preallocation = super::Preallocation::Metadata;
    assert_eq!(super::initial_file_len(&q, size), q.own_file_bytes(size));
}

fn status_caps() -> ImageCaps {
    ImageCaps::default().with_status_before_read(true)
}

#[test]
fn a_cold_read_behind_a_block_status_query_loads_its_slice_once_and_hits_it_for_the_data() {
    // nbd/server.c nbd_co_send_sparse_read: qcow2_co_block_status's lookup (a miss: the
    // slice is read), then qcow2_co_preadv_part's (a hit): one metadata read, one data read.
    let mut e = Engine::with_caps(
        "populated = 1.0\nl2_cache_size = \"1m\"",
        16 * G,
        status_caps(),
    );
    let a = e.run(Op::Read, 5 * G + 8 * K, 4 * K);
    assert_eq!(kinds(&a), "RR");
    let st = e.stats();
    assert_eq!((st.l2_misses, st.l2_hits), (1, 1));
    // Writes ask nothing first: a warm overwrite is one lookup, a hit.
    e.run(Op::Write, 5 * G + 8 * K, 4 * K);
    assert_eq!(e.stats().l2_hits, 2);
}

#[test]
fn between_a_reads_status_query_and_its_lookup_another_read_can_evict_its_slice() {
    // QEMU's smallest L2 cache, two 4 KiB slices (MIN_L2_CACHE_SIZE): reads A, B, C of three
    // slices a, b, c, submitted at once. FIFO lock: the queries load a, b, then c (evicting
    // a); the reads then find a evicted (loads it, evicting b), b (evicting c), c (evicting
    // a): 6 slice reads for 3 requests, against 3 without the queries.
    let text = "populated = 1.0\nl2_cache_size = \"8k\"\nl2_cache_entry_size = \"4k\"";
    let slice_span = 4 * K / 8 * 64 * K;
    let misses = |caps: ImageCaps| {
        let mut d = Qcow2::new(&spec(text), 16 * G).with_caps(caps);
        let mut out = Vec::new();
        for (id, off) in [
            (1, 3 * slice_span),
            (2, 7 * slice_span),
            (3, 11 * slice_span),
        ] {
            let req = Request {
                id,
                disk: 0,
                op: Op::Read,
                offset: off,
                len: 4 * K,
            };
            d.on_request(0, req, &mut out);
        }
        let mut q: VecDeque<ImageAction> = out.drain(..).collect();
        let mut done = 0;
        while let Some(a) = q.pop_front() {
            match a {
                ImageAction::Complete { .. } => done += 1,
                ImageAction::Io { token, .. }
                | ImageAction::WriteZeroes { token, .. }
                | ImageAction::Flush { token }
                | ImageAction::Delay { token, .. } => d.on_done(0, token, &mut out),
            }
            q.extend(out.drain(..));
        }
        assert_eq!(done, 3);
        let st = d.stats();
        (st.l2_misses, st.metadata_read_bytes)
    };
    assert_eq!(misses(ImageCaps::default()), (3, 12 * K));
    assert_eq!(misses(status_caps()), (6, 24 * K));
}

#[test]
fn a_read_the_status_query_finds_all_zeroes_is_answered_as_a_hole_without_reading() {
    // The server sends NBD_REPLY_TYPE_OFFSET_HOLE: no blk_co_pread, so no zero fill either.
    let mut e = Engine::with_caps("", G, status_caps());
    assert_eq!(kinds(&e.run(Op::Read, 3 * M, M)), "");
    assert_eq!(e.stats().zero_fill_bytes, 0);
    // Half allocated: the query finds data, and the read runs as without it.
    let mut h = Engine::with_caps("populated = 0.5", 16 * M, status_caps());
    assert_eq!(kinds(&h.run(Op::Read, 8 * M - 512 * K, M)), "RDR");
}
