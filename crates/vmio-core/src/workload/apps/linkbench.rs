//! LinkBench (`app=linkbench`): Facebook's social-graph benchmark (Armstrong et al.,
//! "LinkBench: a Database Benchmark Based on the Facebook Social Graph", SIGMOD 2013) run
//! against a MySQL/InnoDB-like store, as the file operations of its storage engine: 16 KiB
//! page reads of the tables through a buffer pool, a redo log write and fsync at each commit,
//! and a page cleaner that writes dirty pages through the doublewrite buffer.
//!
//! Sources: facebookarchive/linkbench `config/FBWorkload.properties` (the request mix, the
//! access distributions: `read_uncorr_shape` 0.8, `write_shape` 0.741, `node_read_shape`
//! 0.625, `node_update_shape` 0.606, uniform node deletes; "1M ids ~= 1GB" with MySQL/InnoDB),
//! `config/LinkConfigMysql.properties` (`requesters = 100`), `src/main/java/com/facebook/
//! LinkBench/LinkStoreMysql.java` (each write a transaction: addLink inserts the link and
//! updates the count, deleteLink and updateLink change the link and its count or data;
//! linktable has PRIMARY KEY (id1, id2, link_type) and the covering index id1_type);
//! MySQL 5.7 InnoDB defaults: `innodb_page_size` 16K, `innodb_buffer_pool_size` 128M,
//! `innodb_log_file_size` 48M × `innodb_log_files_in_group` 2, `innodb_flush_log_at_trx_commit`
//! 1 (write and flush the log at each commit), `innodb_flush_method` fsync, `innodb_doublewrite`
//! ON; `storage/innobase/log/log0log.cc` (`log_write_up_to`: whole 512-byte log blocks from
//! the last written block, the partial last block rewritten; `LOG_FILE_HDR_SIZE` 2048),
//! `buf/buf0dblwr.cc` (`buf_dblwr_flush_buffered_writes`: the batch written to the two
//! 64-page doublewrite blocks of the system tablespace, `fil_flush` of it, then each page
//! to its place, then the data files flushed; batches of `srv_doublewrite_batch_size` 120).
//!
//! ## The request mix (FBWorkload.properties, percent)
//!
//! | operation | % | pages (buffer pool) | commit |
//! |---|---|---|---|
//! | get_link_list | 50.7119145 | id1_type index page (link read) | - |
//! | get_node | 12.9326683 | nodetable page (node read) | - |
//! | add_link | 8.9886601 | link PK + id1_type + counttable pages (link write) | yes |
//! | update_link | 8.0122125 | link PK + id1_type pages (link write) | yes |
//! | update_node | 7.366437 | nodetable page (node update) | yes |
//! | count_link | 4.8863567 | counttable page (link read) | - |
//! | delete_link | 2.9907664 | link PK + id1_type + counttable pages (link write) | yes |
//! | add_node | 2.5732789 | nodetable's last page (auto-increment) | yes |
//! | delete_node | 1.0115914 | nodetable page (uniform) | yes |
//! | get_link | 0.5261142 | link PK page (link read) | - |
//!
//! ## Rules (vmio's mapping of the engine)
//!
//! ```text
//! files: linktable.ibd 768 MiB (PRIMARY first half, id1_type second half), counttable.ibd
//!        64 MiB, nodetable.ibd 192 MiB (1 GiB of tables: 1M ids, vmio's split), ib_logfile0/1
//!        48 MiB each, ibdata1 12 MiB (doublewrite blocks at pages 64..191); all laid out
//! requester (100 threads), each request:
//!   op  = a draw from the mix above
//!   x   = u^(1 / (1 - s)) for the op's Zipf shape s (a continuous Zipf: P(x < q) = q^(1-s);
//!         uniform for node deletes); one x per request: its pages are the same id's
//!   page of a table with P pages = perm_table(floor(x P))   (a fixed random permutation:
//!         hot ids scattered over the file); id1_type's page = PRIMARY's + P_link / 2
//!   each page: LRU buffer pool of 8192 pages; a miss reads 16 KiB at page * 16 KiB
//!   a write op: each page dirty (first dirtied time kept); redo += 128 bytes per page (vmio's
//!         estimate of a row change's records); commit:
//!         write [floor(lsn / 512) * 512, ceil((lsn + redo) / 512) * 512) of the circular log
//!         (2 files, 2048-byte headers skipped; split where a file ends); fsync each file written
//! page cleaner (1 thread): when >= 120 pages are dirty, the 120 dirtied longest ago:
//!   write them to the doublewrite blocks (64 pages a write) at 1 MiB of ibdata1; fsync ibdata1
//!   write each to its place, by file and page; fsync each data file written
//! ```
//!
//! Left out: the 10M-id default scale (1M ids here), CPU and lock time, InnoDB's midpoint LRU
//! (a plain LRU here), its adaptive flushing and checkpoint age (the cleaner flushes whenever
//! a batch is dirty; an evicted dirty page stays dirty until the cleaner writes it), group
//! commit (concurrent commits each fsync; the guest's journal may merge them), undo pages,
//! the binlog, and the 12-byte header and 4-byte trailer of each log block.

use super::super::files::{FileDecl, FileId, FileLayout, FileOp};
use super::super::perm::Permutation;
use super::{fsync, read, write};
use crate::rng::Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;
/// `innodb_page_size`.
const PAGE: u64 = 16 * KIB;
/// `requesters` (LinkConfigMysql.properties).
pub(crate) const REQUESTERS: usize = 100;
/// The requesters and the page cleaner.
pub(crate) const THREADS: usize = REQUESTERS + 1;
/// `innodb_buffer_pool_size` 128 MiB in pages.
pub(crate) const POOL_PAGES: usize = (128 * MIB / PAGE) as usize;
const LOG_FILE_BYTES: u64 = 48 * MIB;
const LOG_HEADER: u64 = 2048;
const LOG_BLOCK: u64 = 512;
/// Redo bytes per page a write changes (vmio's estimate).
pub(crate) const REDO_PER_PAGE: u64 = 128;
/// The doublewrite blocks: pages 64..191 of ibdata1, 64 pages each.
const DBLWR_OFFSET: u64 = 64 * PAGE;
const DBLWR_BLOCK_PAGES: usize = 64;
/// `srv_doublewrite_batch_size`.
pub(crate) const BATCH: usize = 120;

const LINK: FileId = 0;
const COUNT: FileId = 1;
const NODE: FileId = 2;
const LOG0: FileId = 3;
const IBDATA: FileId = 5;

/// (name, bytes) of each file, in FileId order.
const FILES: [(&str, u64); 6] = [
    ("linktable.ibd", 768 * MIB),
    ("counttable.ibd", 64 * MIB),
    ("nodetable.ibd", 192 * MIB),
    ("ib_logfile0", LOG_FILE_BYTES),
    ("ib_logfile1", LOG_FILE_BYTES),
    ("ibdata1", 12 * MIB),
];

/// LinkBench's operations, in [`MIX`]'s order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    GetLinkList,
    GetNode,
    AddLink,
    UpdateLink,
    UpdateNode,
    CountLink,
    DeleteLink,
    AddNode,
    DeleteNode,
    GetLink,
}

/// A page a request touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Page {
    LinkPk,
    LinkIdx,
    Count,
    Node,
    NodeLast,
}

/// One operation of the mix: its percentage, Zipf shape (None: uniform), pages, whether it
/// commits changes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mix {
    pub(crate) request: Request,
    pub(crate) percent: f64,
    shape: Option<f64>,
    pages: &'static [Page],
    pub(crate) write: bool,
}

const LINK_READ: Option<f64> = Some(0.8);
const LINK_WRITE: Option<f64> = Some(0.741);

const fn mix(
    request: Request,
    percent: f64,
    shape: Option<f64>,
    pages: &'static [Page],
    write: bool,
) -> Mix {
    Mix {
        request,
        percent,
        shape,
        pages,
        write,
    }
}

/// FBWorkload.properties' operation mix.
pub(crate) const MIX: [Mix; 10] = [
    mix(
        Request::GetLinkList,
        50.7119145,
        LINK_READ,
        &[Page::LinkIdx],
        false,
    ),
    mix(
        Request::GetNode,
        12.9326683,
        Some(0.625),
        &[Page::Node],
        false,
    ),
    mix(
        Request::AddLink,
        8.9886601,
        LINK_WRITE,
        &[Page::LinkPk, Page::LinkIdx, Page::Count],
        true,
    ),
    mix(
        Request::UpdateLink,
        8.0122125,
        LINK_WRITE,
        &[Page::LinkPk, Page::LinkIdx],
        true,
    ),
    mix(
        Request::UpdateNode,
        7.366437,
        Some(0.606),
        &[Page::Node],
        true,
    ),
    mix(
        Request::CountLink,
        4.8863567,
        LINK_READ,
        &[Page::Count],
        false,
    ),
    mix(
        Request::DeleteLink,
        2.9907664,
        LINK_WRITE,
        &[Page::LinkPk, Page::LinkIdx, Page::Count],
        true,
    ),
    mix(Request::AddNode, 2.5732789, None, &[Page::NodeLast], true),
    mix(Request::DeleteNode, 1.0115914, None, &[Page::Node], true),
    mix(
        Request::GetLink,
        0.5261142,
        LINK_READ,
        &[Page::LinkPk],
        false,
    ),
];

/// A plain LRU of page keys.
#[derive(Clone, Debug)]
struct Pool {
    cap: usize,
    clock: u64,
    stamp: HashMap<u64, u64>,
    order: BTreeMap<u64, u64>,
}

impl Pool {
    /// Touches `key`; whether it was cached. A miss evicts the least recently used page.
    fn access(&mut self, key: u64) -> bool {
        self.clock += 1;
        let hit = match self.stamp.insert(key, self.clock) {
            Some(old) => {
                self.order.remove(&old);
                true
            }
            None => false,
        };
        self.order.insert(self.clock, key);
        if self.stamp.len() > self.cap {
            if let Some((_, k)) = self.order.pop_first() {
                self.stamp.remove(&k);
            }
        }
        hit
    }
}

/// LinkBench on an InnoDB-like engine. See the module doc.
#[derive(Clone, Debug)]
pub struct Linkbench {
    rng: Rng,
    link: Permutation,
    count: Permutation,
    node: Permutation,
    pool: Pool,
    /// Dirty pages: key -> when first dirtied, and the reverse.
    dirty: HashMap<u64, u64>,
    dirty_order: BTreeMap<u64, u64>,
    clock: u64,
    /// Redo bytes written.
    lsn: u64,
    pub(crate) counts: [u64; 10],
}

/// The id (as a fraction of the ids) of a draw `u` in [0, 1) under Zipf shape `s` (< 1):
/// u^(1 / (1 - s)), so that P(x < q) = q^(1 - s); uniform without a shape.
fn zipf(u: f64, shape: Option<f64>) -> f64 {
    match shape {
        Some(s) => u.powf(1.0 / (1.0 - s)),
        None => u,
    }
}

fn key(file: FileId, page: u64) -> u64 {
    (file as u64) << 32 | page
}

fn pages(file: FileId) -> u64 {
    FILES[file as usize].1 / PAGE
}

impl Linkbench {
    pub fn new(dir: &str, seed: u64) -> (Self, Vec<FileDecl>) {
        let decls = FILES
            .iter()
            .map(|&(name, size)| FileDecl {
                path: format!("{dir}/{name}"),
                exists: true,
                size_bytes: size,
                layout: FileLayout::Written,
                dir: 0,
            })
            .collect();
        let mut setup = Rng::derive(seed, "app/linkbench/layout");
        let m = Self {
            rng: Rng::derive(seed, "app/linkbench/requests"),
            link: Permutation::new(pages(LINK) / 2, &mut setup),
            count: Permutation::new(pages(COUNT), &mut setup),
            node: Permutation::new(pages(NODE), &mut setup),
            pool: Pool {
                cap: POOL_PAGES,
                clock: 0,
                stamp: HashMap::new(),
                order: BTreeMap::new(),
            },
            dirty: HashMap::new(),
            dirty_order: BTreeMap::new(),
            clock: 0,
            lsn: 0,
            counts: [0; 10],
        };
        (m, decls)
    }

    /// Bytes of the files `decls` declares.
    pub fn bytes(decls: &[FileDecl]) -> u64 {
        decls.iter().map(|d| d.size_bytes).sum()
    }

    /// A draw from the mix.
    fn draw(&mut self) -> Mix {
        let mut u = self.rng.unit() * MIX.iter().map(|m| m.percent).sum::<f64>();
        for m in MIX {
            if u < m.percent {
                return m;
            }
            u -= m.percent;
        }
        MIX[MIX.len() - 1]
    }

    /// The (file, page) of `p` for the id at `x` in [0, 1).
    fn page(&self, p: Page, x: f64) -> (FileId, u64) {
        let rank = |n: u64| ((x * n as f64) as u64).min(n - 1);
        let half = pages(LINK) / 2;
        match p {
            Page::LinkPk => (LINK, self.link.at(rank(half))),
            Page::LinkIdx => (LINK, half + self.link.at(rank(half))),
            Page::Count => (COUNT, self.count.at(rank(pages(COUNT)))),
            Page::Node => (NODE, self.node.at(rank(pages(NODE)))),
            Page::NodeLast => (NODE, pages(NODE) - 1),
        }
    }

    fn requester(&mut self, out: &mut VecDeque<FileOp>) {
        let m = self.draw();
        self.counts[m.request as usize] += 1;
        let x = zipf(self.rng.unit(), m.shape);
        for &p in m.pages {
            let (file, page) = self.page(p, x);
            let k = key(file, page);
            if !self.pool.access(k) {
                out.push_back(read(file, page * PAGE, PAGE));
            }
            if m.write && !self.dirty.contains_key(&k) {
                self.clock += 1;
                self.dirty.insert(k, self.clock);
                self.dirty_order.insert(self.clock, k);
            }
        }
        if m.write {
            self.commit(m.pages.len() as u64 * REDO_PER_PAGE, out);
        }
    }

    /// The log write of `redo` bytes and its fsyncs.
    fn commit(&mut self, redo: u64, out: &mut VecDeque<FileOp>) {
        let per_file = LOG_FILE_BYTES - LOG_HEADER;
        let start = self.lsn / LOG_BLOCK * LOG_BLOCK;
        self.lsn += redo;
        let end = self.lsn.div_ceil(LOG_BLOCK) * LOG_BLOCK;
        let mut written = BTreeSet::new();
        let mut pos = start;
        while pos < end {
            let at = pos % (2 * per_file);
            let (file, offset) = (LOG0 + (at / per_file) as FileId, at % per_file);
            let len = (end - pos).min(per_file - offset);
            out.push_back(write(file, LOG_HEADER + offset, len));
            written.insert(file);
            pos += len;
        }
        for file in written {
            out.push_back(fsync(file));
        }
    }

    fn cleaner(&mut self, out: &mut VecDeque<FileOp>) {
        if self.dirty.len() < BATCH {
            return;
        }
        let mut batch: Vec<u64> = (0..BATCH)
            .filter_map(|_| self.dirty_order.pop_first().map(|(_, k)| k))
            .collect();
        for k in &batch {
            self.dirty.remove(k);
        }
        for (i, block) in batch.chunks(DBLWR_BLOCK_PAGES).enumerate() {
            let offset = DBLWR_OFFSET + (i * DBLWR_BLOCK_PAGES) as u64 * PAGE;
            out.push_back(write(IBDATA, offset, block.len() as u64 * PAGE));
        }
        out.push_back(fsync(IBDATA));
        batch.sort_unstable();
        let mut files = BTreeSet::new();
        for k in batch {
            let file = (k >> 32) as FileId;
            out.push_back(write(file, (k & 0xffff_ffff) * PAGE, PAGE));
            files.insert(file);
        }
        for file in files {
            out.push_back(fsync(file));
        }
    }

    /// A requester's next request, or the cleaner's next batch (nothing while fewer than
    /// [`BATCH`] pages are dirty).
    pub fn refill(&mut self, thread: usize, out: &mut VecDeque<FileOp>) {
        if thread < REQUESTERS {
            self.requester(out)
        } else {
            self.cleaner(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(seed: u64) -> Linkbench {
        Linkbench::new("/d", seed).0
    }

    #[test]
    fn the_mix_adds_up_to_100_percent_and_each_request_comes_at_its_rate() {
        let total: f64 = MIX.iter().map(|m| m.percent).sum();
        assert!((total - 100.0).abs() < 1e-6, "{total}");
        let mut m = model(3);
        let n = 200_000u64;
        let mut q = VecDeque::new();
        for _ in 0..n {
            m.refill(0, &mut q);
            q.clear();
        }
        for (i, mx) in MIX.iter().enumerate() {
            assert_eq!(mx.request as usize, i);
            let p = mx.percent / 100.0;
            let want = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            let got = m.counts[i] as f64;
            assert!(
                (got - want).abs() < 4.0 * sd,
                "{:?}: {got} vs {want}",
                mx.request
            );
        }
    }

    #[test]
    fn a_write_request_ends_with_its_log_blocks_and_an_fsync_a_read_request_writes_nothing() {
        let mut m = model(4);
        let mut q = VecDeque::new();
        let mut lsn = 0;
        for _ in 0..5000 {
            let before = m.counts;
            m.refill(0, &mut q);
            let i = (0..10).find(|&i| m.counts[i] != before[i]).unwrap();
            let ops: Vec<FileOp> = q.drain(..).collect();
            let reads = ops
                .iter()
                .take_while(|o| matches!(o, FileOp::Read { len, .. } if *len == PAGE))
                .count();
            assert!(reads <= MIX[i].pages.len());
            if !MIX[i].write {
                assert_eq!(reads, ops.len(), "{:?}", MIX[i].request);
                continue;
            }
            // The log write covers the redo in whole 512-byte blocks from the last
            // written block (rewritten), then one fsync of the log file.
            let redo = MIX[i].pages.len() as u64 * REDO_PER_PAGE;
            let start = lsn / 512 * 512;
            lsn += redo;
            let end = lsn.div_ceil(512) * 512;
            assert_eq!(
                ops[reads..],
                [write(LOG0, LOG_HEADER + start, end - start), fsync(LOG0)]
            );
        }
    }

    #[test]
    fn the_log_wraps_from_the_first_file_to_the_second_and_back_past_the_headers() {
        let mut m = model(1);
        let per_file = LOG_FILE_BYTES - LOG_HEADER;
        m.lsn = per_file - 100;
        let mut q = VecDeque::new();
        m.commit(300, &mut q);
        let start = (per_file - 100) / 512 * 512;
        assert_eq!(
            Vec::from(q.clone()),
            [
                write(LOG0, LOG_HEADER + start, per_file - start),
                write(LOG0 + 1, LOG_HEADER, 512),
                fsync(LOG0),
                fsync(LOG0 + 1),
            ]
        );
        q.clear();
        m.lsn = 2 * per_file - 10;
        m.commit(10, &mut q);
        assert_eq!(q[0], write(LOG0 + 1, LOG_HEADER + per_file - 512, 512));
        q.clear();
        m.commit(10, &mut q);
        assert_eq!(q[0], write(LOG0, LOG_HEADER, 512));
    }

    #[test]
    fn the_cleaner_waits_for_120_dirty_pages_then_writes_them_through_the_doublewrite_blocks() {
        let mut m = model(5);
        let mut q = VecDeque::new();
        m.refill(REQUESTERS, &mut q);
        assert!(q.is_empty());
        while m.dirty.len() < BATCH {
            m.refill(0, &mut q);
        }
        q.clear();
        let oldest: BTreeSet<u64> = m.dirty_order.values().take(BATCH).copied().collect();
        let left = m.dirty.len() - BATCH;
        m.refill(REQUESTERS, &mut q);
        let ops: Vec<FileOp> = q.drain(..).collect();
        assert_eq!(
            ops[..3],
            [
                write(IBDATA, 64 * PAGE, 64 * PAGE),
                write(IBDATA, 128 * PAGE, 56 * PAGE),
                fsync(IBDATA)
            ]
        );
        let pages: Vec<u64> = ops[3..3 + BATCH]
            .iter()
            .map(|o| match *o {
                FileOp::Write {
                    file, offset, len, ..
                } if len == PAGE => key(file, offset / PAGE),
                o => panic!("{o:?}"),
            })
            .collect();
        assert!(pages.windows(2).all(|w| w[0] < w[1]), "by file and page");
        assert_eq!(pages.iter().copied().collect::<BTreeSet<_>>(), oldest);
        let files: BTreeSet<FileId> = pages.iter().map(|k| (k >> 32) as FileId).collect();
        let fsyncs: Vec<FileOp> = files.iter().map(|&file| fsync(file)).collect();
        assert_eq!(ops[3 + BATCH..], fsyncs[..]);
        assert_eq!(m.dirty.len(), left);
    }

    #[test]
    fn the_buffer_pool_evicts_the_least_recently_used_page() {
        let mut p = Pool {
            cap: 2,
            clock: 0,
            stamp: HashMap::new(),
            order: BTreeMap::new(),
        };
        assert!(!p.access(1));
        assert!(!p.access(2));
        assert!(p.access(1));
        assert!(!p.access(3)); // evicts 2
        assert!(p.access(1));
        assert!(!p.access(2));
    }

    #[test]
    fn a_zipf_shape_of_0_8_puts_a_fifth_power_of_the_draws_below_one_percent() {
        // P(x < q) = q^(1 - s): with s = 0.8, the first 1 % of ids get 0.01^0.2 = 39.8 %;
        // uniform (node deletes): 1 %.
        let mut rng = Rng::new(9);
        let n = 100_000;
        for (shape, want) in [(Some(0.8), 0.01f64.powf(0.2)), (None, 0.01)] {
            let hot = (0..n).filter(|_| zipf(rng.unit(), shape) < 0.01).count();
            let got = hot as f64 / n as f64;
            assert!((got - want).abs() < 0.01, "{shape:?}: {got} vs {want}");
        }
    }
}
