use super::*;
use crate::image::{ImageSpec, Preallocation};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// The file's region starts 64 MiB into the volume (block group 0: blocks below 32768).
const REGION: u64 = 64 * MIB;

fn ext4(prealloc: Option<Preallocation>) -> HostFs {
    fs_of("ext4", prealloc)
}

fn fs_of(name: &str, prealloc: Option<Preallocation>) -> HostFs {
    let (spec, _) = FsSpec::read(name, &BTreeMap::new()).unwrap();
    let vol = FsVolume {
        name: "v".into(),
        spec,
        capacity_bytes: GIB,
    };
    // None: an image written before the run (populated), else a new raw image.
    let mut image = ImageSpec::raw();
    match prealloc {
        None => image.populated = 1.0,
        Some(p) => image.preallocation = p,
    }
    let (initial, written_prefix) = initial_state(&image, 64 * MIB);
    let file = HostFile {
        fs: 0,
        volume_offset: REGION,
        size_bytes: 64 * MIB,
        initial,
        written_prefix,
        len_bytes: 64 * MIB,
        own_bytes: 64 * MIB,
        direct: true,
        sync_dio: false,
    };
    HostFs::new(&[vol], &[Some(file)]).unwrap()
}

/// A new, empty image file of 64 MiB of room that grows as it is written (a qcow2 file
/// without preallocation), `len_bytes` long, holes throughout, opened with O_DIRECT or not.
fn growing(name: &str, len_bytes: u64, direct: bool) -> HostFs {
    growing_with(name, len_bytes, direct, false)
}

/// [`growing`], its direct I/O submitted by synchronous system calls or not (`sync_dio`:
/// QEMU's `aio=threads`).
fn growing_with(name: &str, len_bytes: u64, direct: bool, sync_dio: bool) -> HostFs {
    let (spec, _) = FsSpec::read(name, &BTreeMap::new()).unwrap();
    let vol = FsVolume {
        name: "v".into(),
        spec,
        capacity_bytes: GIB,
    };
    let file = HostFile {
        fs: 0,
        volume_offset: REGION,
        size_bytes: 64 * MIB,
        initial: BlockState::Hole,
        written_prefix: 0,
        len_bytes,
        own_bytes: 64 * MIB,
        direct,
        sync_dio,
    };
    HostFs::new(&[vol], &[Some(file)]).unwrap()
}

/// Carries a policy's actions out in virtual time over a device that serves every Io in
/// `service` ns, all in parallel (so that closed forms hold), FLUSHes at once; the commit
/// timer's wake-ups (a second or more ahead) are left aside. Records when each engine token was done.
struct Bench {
    fs: HostFs,
    service: Ns,
    queue: BTreeMap<(Ns, u64), Token>,
    seq: u64,
    done: Vec<(Token, Ns)>,
    /// The Ios issued, with their issue time.
    ios: Vec<(Ns, FsAction)>,
}

impl Bench {
    fn new(fs: HostFs, service: Ns) -> Self {
        Bench {
            fs,
            service,
            queue: BTreeMap::new(),
            seq: 0,
            done: Vec::new(),
            ios: Vec::new(),
        }
    }

    fn push(&mut self, at: Ns, token: Token) {
        self.queue.insert((at, self.seq), token);
        self.seq += 1;
    }

    fn act(&mut self, now: Ns, out: Vec<FsAction>) {
        for a in out {
            match a {
                FsAction::Io { token, .. } => {
                    self.ios.push((now, a));
                    self.push(now + self.service, token);
                }
                FsAction::Flush { token, .. } => self.push(now, token),
                FsAction::Wake { at, token } if at < now + SEC => self.push(at, token),
                FsAction::Wake { .. } => {}
                FsAction::Done { token } => self.done.push((token, now)),
            }
        }
    }

    fn io(&mut self, now: Ns, op: Op, offset: u64, len: u64, token: Token) {
        let mut out = Vec::new();
        self.fs
            .on_io(now, 0, op, offset, len, true, token, &mut out);
        self.act(now, out);
    }

    fn zero_range(&mut self, now: Ns, offset: u64, len: u64, token: Token) {
        let mut out = Vec::new();
        self.fs.on_zero_range(now, 0, offset, len, token, &mut out);
        self.act(now, out);
    }

    /// Run until nothing is left; the time the last engine token was done.
    fn run(&mut self) -> Ns {
        while let Some(((t, _), token)) = self.queue.pop_first() {
            if is_fs_token(token) {
                let mut out = Vec::new();
                self.fs.on_done(t, token, &mut out);
                self.act(t, out);
            } else {
                self.done.push((token, t));
            }
        }
        self.done.iter().map(|d| d.1).max().unwrap_or(0)
    }

    fn done_at(&self, token: Token) -> Ns {
        self.done
            .iter()
            .find(|d| d.0 == token)
            .unwrap_or_else(|| panic!("{token:?} never done"))
            .1
    }
}

/// The cache's token of request `k`.
fn req(k: u64) -> Token {
    Token(1 << 56 | k)
}

const CACHE: Token = Token(1 << 56 | 7);
const FLUSH: Token = Token(6 << 56 | 7);

fn write(fs: &mut HostFs, now: Ns, offset: u64, len: u64) -> Vec<FsAction> {
    let mut out = Vec::new();
    fs.on_io(now, 0, Op::Write, offset, len, true, CACHE, &mut out);
    out
}

fn done(fs: &mut HostFs, now: Ns, a: &FsAction) -> Vec<FsAction> {
    let token = match *a {
        FsAction::Io { token, .. }
        | FsAction::Flush { token, .. }
        | FsAction::Wake { token, .. } => token,
        FsAction::Done { token } => token,
    };
    assert!(is_fs_token(token), "{a:?} is not the policy's");
    let mut out = Vec::new();
    fs.on_done(now, token, &mut out);
    out
}

/// Carry a write of a sparse file through allocation, data and conversion; returns the
/// actions in order (each step's single action).
fn first_write(fs: &mut HostFs, offset: u64, len: u64) -> Vec<FsAction> {
    let mut seen = write(fs, 0, offset, len);
    seen.retain(|a| !matches!(a, FsAction::Wake { at, .. } if *at >= SEC));
    while let Some(a) = seen.last().copied() {
        if matches!(a, FsAction::Done { .. }) {
            break;
        }
        // Leave the commit timer (armed by the first dirtying) aside.
        let next: Vec<FsAction> = done(fs, 0, &a)
            .into_iter()
            .filter(|a| !matches!(a, FsAction::Wake { at, .. } if *at >= SEC))
            .collect();
        assert_eq!(next.len(), 1, "{next:?}");
        seen.extend(next);
    }
    seen
}

#[test]
fn a_first_write_to_a_sparse_file_allocates_exactly_its_blocks_and_an_overwrite_none() {
    let mut fs = ext4(Some(Preallocation::Off));
    let steps = first_write(&mut fs, 8192, 16384);
    assert!(
        matches!(steps[0], FsAction::Wake { at, .. } if at == 5 * US),
        "{steps:?}"
    );
    assert!(matches!(
        steps[1],
        FsAction::Io { op: Op::Write, volume_offset, len: 16384, fua: false, .. }
            if volume_offset == REGION + 8192
    ));
    assert!(matches!(steps[2], FsAction::Wake { at, .. } if at == 10 * US));
    assert_eq!(steps[3], FsAction::Done { token: CACHE });
    let st = fs.stats(0).unwrap();
    assert_eq!(st.blocks_allocated, 4);
    assert_eq!(st.extents_converted, 1);
    // The overwrite is the same Io at once, as on a block device (under the policy's token:
    // a direct I/O is counted in flight), done when it is.
    let again = write(&mut fs, 0, 8192, 16384);
    let [FsAction::Io {
        disk: 0,
        op: Op::Write,
        volume_offset,
        len: 16384,
        sync: true,
        fua: false,
        ..
    }] = again[..]
    else {
        panic!("{again:?}")
    };
    assert_eq!(volume_offset, REGION + 8192);
    assert_eq!(
        done(&mut fs, 0, &again[0]),
        vec![FsAction::Done { token: CACHE }]
    );
    assert_eq!(fs.stats(0).unwrap().blocks_allocated, 4);
}

#[test]
fn fdatasync_after_a_first_write_commits_the_journal_once_then_needs_no_other_flush() {
    let mut fs = ext4(Some(Preallocation::Off));
    first_write(&mut fs, 0, 4096);
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    // Descriptor + 3 metadata blocks (the group's block bitmap, its descriptor block, the
    // inode) in one write at the log head.
    let [FsAction::Io {
        op: Op::Write,
        len,
        fua: false,
        volume_offset: log,
        ..
    }] = out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(len, (1 + 3) * 4096);
    let out = done(&mut fs, 0, &out[0]);
    assert!(matches!(out[..], [FsAction::Flush { .. }]), "{out:?}");
    let out = done(&mut fs, 0, &out[0]);
    let [FsAction::Io {
        len: 4096,
        fua: true,
        volume_offset,
        ..
    }] = out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        volume_offset,
        log + 4 * 4096,
        "the commit block follows the log"
    );
    let out = done(&mut fs, 0, &out[0]);
    assert_eq!(out, vec![FsAction::Done { token: FLUSH }]);
    let st = fs.stats(0).unwrap();
    assert_eq!((st.journal_commits, st.journal_bytes), (1, 5 * 4096));
    // A second fdatasync has nothing to commit: the FLUSH alone.
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    assert_eq!(
        out,
        vec![FsAction::Flush {
            disk: 0,
            token: FLUSH
        }]
    );
}

#[test]
fn fdatasync_after_only_overwrites_issues_no_journal_commit_just_the_flush() {
    let mut fs = ext4(None);
    let w = write(&mut fs, 0, 0, 4096);
    assert!(matches!(w[..], [FsAction::Io { len: 4096, .. }]), "{w:?}");
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    assert_eq!(
        out,
        vec![FsAction::Flush {
            disk: 0,
            token: FLUSH
        }]
    );
    assert_eq!(fs.stats(0).unwrap().journal_commits, 0);
    assert_eq!(fs.stats(0).unwrap().flush_only, 1);
}

#[test]
fn reads_of_a_hole_do_no_device_io_and_a_partly_written_read_reads_only_the_written_blocks() {
    let mut fs = ext4(Some(Preallocation::Off));
    let mut out = Vec::new();
    fs.on_io(100, 0, Op::Read, 0, 65536, true, CACHE, &mut out);
    // The kernel zeroes the 64 KiB of the reader's buffer: 65536 B / 10 GB/s = 6554 ns.
    assert_eq!(transfer_ns(65536, crate::units::MEMSET_BYTES_PER_SEC), 6554);
    assert!(
        matches!(out[..], [FsAction::Wake { at: 6654, .. }]),
        "{out:?}"
    );
    assert_eq!(
        done(&mut fs, 100, &out[0]),
        vec![FsAction::Done { token: CACHE }]
    );
    first_write(&mut fs, 8192, 4096);
    let mut out = Vec::new();
    fs.on_io(0, 0, Op::Read, 0, 65536, true, CACHE, &mut out);
    // The written block read, the other 60 KiB zeroed beside it.
    let [FsAction::Io {
        volume_offset,
        len: 4096,
        ..
    }, FsAction::Wake { at, .. }] = out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(volume_offset, REGION + 8192);
    assert_eq!(at, transfer_ns(61440, crate::units::MEMSET_BYTES_PER_SEC));
    assert!(done(&mut fs, 0, &out[0]).is_empty());
    assert_eq!(
        done(&mut fs, at, &out[1]),
        vec![FsAction::Done { token: CACHE }]
    );
    assert_eq!(fs.stats(0).unwrap().zeroed_read_bytes, 65536 + 61440);
}

#[test]
fn a_falloc_file_converts_its_unwritten_extent_without_allocating_and_commits_the_inode() {
    let mut fs = ext4(Some(Preallocation::Falloc));
    let steps = first_write(&mut fs, 1 << 20, 4096);
    // No allocation step: the data goes out at once, the conversion follows it.
    assert!(matches!(steps[0], FsAction::Io { .. }), "{steps:?}");
    assert!(matches!(steps[1], FsAction::Wake { at, .. } if at == 10 * US));
    let st = fs.stats(0).unwrap();
    assert_eq!((st.blocks_allocated, st.extents_converted), (0, 1));
    // Split in three extents: still in the inode; the commit logs the inode alone.
    assert_eq!(fs.map(0).unwrap().extents(), 3);
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    assert!(
        matches!(out[..], [FsAction::Io { len, .. }] if len == 2 * 4096),
        "{out:?}"
    );
    // Reads of the still-unwritten blocks are holes to the reader.
    let mut out = Vec::new();
    fs.on_io(0, 0, Op::Read, 0, 4096, true, CACHE, &mut out);
    assert!(matches!(out[..], [FsAction::Wake { .. }]));
}

#[test]
fn a_256_gib_sparse_file_costs_megabytes_not_gigabytes_even_after_scattered_writes() {
    let blocks = 256 * GIB / BLOCK_BYTES;
    let mut m = ExtentMap::new(blocks, BlockState::Hole);
    // 16 bytes per MiB.
    assert_eq!(m.memory_bytes(), 256 * 1024 * 16);
    let mut rng = crate::rng::Rng::new(1);
    for _ in 0..10_000 {
        m.set(rng.below(blocks), 1, BlockState::Written);
    }
    assert!(
        m.memory_bytes() <= 256 * 1024 * 16 + 10_000 * 64,
        "{}",
        m.memory_bytes()
    );
    assert!(
        m.extents() > 9_900 && m.extents() <= 10_000,
        "{}",
        m.extents()
    );
}

#[test]
fn an_fdatasync_during_a_commit_of_its_transaction_waits_for_it_and_flushes_only_if_its_record_was_out(
) {
    let mut fs = ext4(Some(Preallocation::Off));
    first_write(&mut fs, 0, 4096);
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    let log = out[0];
    // A second fdatasync while the log is being written: the commit will send the barrier.
    let second = Token(6 << 56 | 8);
    let mut none = Vec::new();
    fs.on_flush(0, 0, second, &mut none);
    assert!(none.is_empty(), "{none:?}");
    let flush = done(&mut fs, 0, &log);
    let record = done(&mut fs, 0, &flush[0]);
    let out = done(&mut fs, 0, &record[0]);
    assert_eq!(
        out,
        vec![
            FsAction::Done { token: FLUSH },
            FsAction::Done { token: second }
        ]
    );
    assert_eq!(fs.stats(0).unwrap().journal_commits, 1);
}

#[test]
fn the_running_transaction_commits_by_itself_after_the_commit_interval() {
    let mut fs = ext4(Some(Preallocation::Off));
    let mut out = write(&mut fs, 0, 0, 4096);
    // The allocation armed the 5 s timer along with its own wake-up.
    assert_eq!(out.len(), 2, "{out:?}");
    let timer = out.remove(1);
    assert!(matches!(timer, FsAction::Wake { at, .. } if at == 5 * SEC));
    let log = done(&mut fs, 5 * SEC, &timer);
    assert!(
        matches!(log[..], [FsAction::Io { len, .. }] if len == 4 * 4096),
        "{log:?}"
    );
}

#[test]
fn xfs_forces_its_log_as_one_preflush_fua_write_of_the_logged_items() {
    let mut fs = fs_of("xfs", Some(Preallocation::Off));
    first_write(&mut fs, 0, 4096);
    let mut out = Vec::new();
    fs.on_flush(0, 0, FLUSH, &mut out);
    assert!(matches!(out[..], [FsAction::Flush { .. }]), "{out:?}");
    let out = done(&mut fs, 0, &out[0]);
    // 512 + 2*12 + inode (12 + 232) + 3 buffers (12 + 32 + 128) = 1296 -> one 4 KiB sector.
    assert!(
        matches!(
            out[..],
            [FsAction::Io {
                len: 4096,
                fua: true,
                ..
            }]
        ),
        "{out:?}"
    );
    let out = done(&mut fs, 0, &out[0]);
    assert_eq!(out, vec![FsAction::Done { token: FLUSH }]);
}

#[test]
fn a_volume_filesystem_is_read_with_its_parameters_and_refused_with_the_accepted_names() {
    let mut t = BTreeMap::new();
    t.insert(
        "journal_size".to_string(),
        toml::Value::String("64m".into()),
    );
    t.insert("stripe_size".to_string(), toml::Value::String("64k".into()));
    let (spec, rest) = FsSpec::read("ext4", &t).unwrap();
    assert_eq!(spec.params.int_or("journal_size", 0), 64 << 20);
    assert_eq!(rest.keys().collect::<Vec<_>>(), vec!["stripe_size"]);
    let e = FsSpec::read("btrfs", &t).err().unwrap();
    assert_eq!(
        e.to_string(),
        "'btrfs' is not valid; accepted: ext4, xfs, none"
    );
    let e = FsSpec::read("xfs", &t).err().unwrap();
    assert_eq!(
        e.to_string(),
        "journal_size: only valid with filesystem = \"ext4\""
    );
    assert!(FsSpec::refuse(&t).is_err());
}

/// The device's service time of the closed forms below, and the policy's default costs.
const S: Ns = 100 * US;
const ALLOC: Ns = 5 * US;
const CONVERT: Ns = 10 * US;
const N: u64 = 16;

#[test]
fn extending_direct_writes_on_ext4_complete_one_at_a_time_each_holding_the_inode_lock_through_its_io(
) {
    // A new file of size 0, appended to by 16 writes of 4 KiB at once (QD 16).
    let mut b = Bench::new(growing("ext4", 0, true), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 4096, 4096, req(k));
    }
    // Each holds i_rwsem exclusively from its allocation (written extents past EOF: nothing
    // to convert) to its completion: runtime = N x (alloc + service).
    assert_eq!(b.run(), N * (ALLOC + S));
    for k in 0..N {
        assert_eq!(b.done_at(req(k)), (k + 1) * (ALLOC + S));
    }
    let st = b.fs.stats(0).unwrap();
    assert_eq!(
        (
            st.extending_writes,
            st.blocks_allocated,
            st.extents_converted
        ),
        (N, N, 0)
    );
    // Write k waited for the k before it: sum of k x (alloc + service).
    assert_eq!(st.lock_waits, N - 1);
    assert_eq!(st.lock_wait_ns, N * (N - 1) / 2 * (ALLOC + S));
    assert_eq!(b.fs.size(0), Some(N * 4096));
    assert!(b.fs.map(0).unwrap().all(0, N, BlockState::Written));
}

#[test]
fn hole_filling_writes_inside_the_size_serialize_only_their_allocations() {
    // A sparse raw file (its size is the disk's): 16 first writes at once.
    let mut b = Bench::new(growing("ext4", 64 * MIB, true), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 65536, 4096, req(k));
    }
    // Each allocation holds the lock exclusively, the I/O does not: the last write's data
    // goes out after N allocations, then its service and its conversion.
    assert_eq!(b.run(), N * ALLOC + S + CONVERT);
    let st = b.fs.stats(0).unwrap();
    assert_eq!((st.extending_writes, st.extents_converted), (0, N));
    // An overwrite pass holds the lock shared: all 16 at once, one service time.
    let t0 = SEC;
    for k in 0..N {
        b.io(t0, Op::Write, k * 65536, 4096, req(100 + k));
    }
    assert_eq!(b.run(), t0 + S);
}

#[test]
fn synchronous_hole_filling_writes_on_ext4_hold_the_inode_lock_through_their_io_and_conversion() {
    // The same 16 first writes, each made by a thread's pwritev (aio=threads): iomap_dio_rw
    // waits for a sync kiocb before ext4_dio_write_iter unlocks, so the exclusive hold spans
    // allocation, service and the conversion of the completion: N x (alloc + service + convert).
    let mut b = Bench::new(growing_with("ext4", 64 * MIB, true, true), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 65536, 4096, req(k));
    }
    assert_eq!(b.run(), N * (ALLOC + S + CONVERT));
    for k in 0..N {
        assert_eq!(b.done_at(req(k)), (k + 1) * (ALLOC + S + CONVERT));
    }
    // Overwrites hold the lock shared, also through their I/O: still all 16 at once.
    let t0 = SEC;
    for k in 0..N {
        b.io(t0, Op::Write, k * 65536, 4096, req(100 + k));
    }
    assert_eq!(b.run(), t0 + S);
}

#[test]
fn a_synchronous_hole_filling_write_waits_for_the_overwrites_in_flight_and_later_ones_wait_for_it()
{
    let mut b = Bench::new(growing_with("ext4", 64 * MIB, true, true), S);
    for k in 0..4 {
        b.io(0, Op::Write, k * 4096, 4096, req(k));
    }
    b.run();
    // Four overwrites in flight (shared holds until done), then a write into a hole (it
    // queues for the exclusive lock), then a fifth overwrite (queued behind the writer: the
    // rwsem is fair).
    let t0 = SEC;
    for k in 0..4 {
        b.io(t0, Op::Write, k * 4096, 4096, req(10 + k));
    }
    b.io(t0 + 1, Op::Write, MIB, 4096, req(20));
    b.io(t0 + 2, Op::Write, 0, 4096, req(21));
    b.run();
    for k in 0..4 {
        assert_eq!(b.done_at(req(10 + k)), t0 + S);
    }
    let first = t0 + S + ALLOC + S + CONVERT;
    assert_eq!(b.done_at(req(20)), first);
    assert_eq!(b.done_at(req(21)), first + S);
    // Without synchronous submitters the shared holds end at submission: the first write
    // allocates at once and the fifth overwrite goes out after its allocation.
    let mut b = Bench::new(growing_with("ext4", 64 * MIB, true, false), S);
    for k in 0..4 {
        b.io(0, Op::Write, k * 4096, 4096, req(k));
    }
    b.run();
    for k in 0..4 {
        b.io(t0, Op::Write, k * 4096, 4096, req(10 + k));
    }
    b.io(t0 + 1, Op::Write, MIB, 4096, req(20));
    b.io(t0 + 2, Op::Write, 0, 4096, req(21));
    b.run();
    assert_eq!(b.done_at(req(20)), t0 + 1 + ALLOC + S + CONVERT);
    assert_eq!(b.done_at(req(21)), t0 + 1 + ALLOC + S);
}

#[test]
fn on_xfs_a_synchronous_hole_filling_write_keeps_only_a_shared_iolock_through_its_io() {
    // xfs_file_dio_write_aligned holds XFS_IOLOCK_SHARED through iomap_dio_rw; only the
    // allocation is exclusive (the ILOCK): the 16 first writes serialize their allocations,
    // then overlap, as with asynchronous submitters.
    let mut b = Bench::new(growing_with("xfs", 64 * MIB, true, true), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 65536, 4096, req(k));
    }
    assert_eq!(b.run(), N * ALLOC + S + CONVERT);
    for k in 0..N {
        assert_eq!(b.done_at(req(k)), (k + 1) * ALLOC + S + CONVERT);
    }
}

#[test]
fn xfs_drains_the_direct_io_before_a_write_past_eof_so_appends_also_go_one_at_a_time() {
    let mut b = Bench::new(growing("xfs", 0, true), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 4096, 4096, req(k));
    }
    // Write k starts past the EOF its predecessor moves only at its completion: exclusive
    // IOLOCK, inode_dio_wait until that completion (its unwritten conversion and the size in
    // one transaction), then its own allocation. runtime = N x (alloc + service + convert).
    assert_eq!(b.run(), N * (ALLOC + S + CONVERT));
    let st = b.fs.stats(0).unwrap();
    assert_eq!((st.extending_writes, st.extents_converted), (N, N));
    assert_eq!(b.fs.size(0), Some(N * 4096));
}

#[test]
fn writes_extending_from_eof_overlap_on_xfs_but_wait_for_the_first_whole_write_on_ext4() {
    // 16 writes of the same 4 KiB just past EOF, at once.
    let run = |name: &str| {
        let mut b = Bench::new(growing(name, 64 * 1024, true), S);
        for k in 0..N {
            b.io(0, Op::Write, 64 * 1024, 4096, req(k));
        }
        b.run()
    };
    // XFS: the shared IOLOCK; only the first allocation is exclusive (the ILOCK), the rest
    // map its unwritten block: all out after it, each converting at completion.
    assert_eq!(run("xfs"), ALLOC + S + CONVERT);
    // ext4: the first holds i_rwsem through its synchronous I/O; the rest, no longer
    // extending once they have the lock, submit and let it go.
    assert_eq!(run("ext4"), ALLOC + 2 * S);
}

#[test]
fn a_zero_range_drains_the_direct_io_in_flight_first_and_holds_off_later_requests() {
    // A fully written file: overwrites need no allocation.
    let mut b = Bench::new(ext4(Some(Preallocation::Full)), S);
    b.io(0, Op::Write, 0, 4096, req(0));
    b.io(0, Op::Write, 8192, 4096, req(1));
    let zero = Token(ZERO_RANGE_TOKEN | 7);
    b.zero_range(0, MIB, 65536, zero);
    // A read arriving behind the waiting zero range waits too (a fair rwsem).
    b.io(0, Op::Read, 0, 4096, req(2));
    assert_eq!(b.ios.len(), 2, "{:?}", b.ios);
    b.run();
    assert_eq!(b.done_at(req(0)), S);
    // The range is one written extent: one ext4_map_blocks call, after the drain.
    assert_eq!(b.done_at(zero), S + ALLOC);
    assert_eq!(b.done_at(req(2)), S + ALLOC + S);
    let st = b.fs.stats(0).unwrap();
    assert_eq!((st.zero_ranges, st.lock_waits), (1, 2));
    assert_eq!(st.lock_wait_ns, S + (S + ALLOC));
    // The range reads as zeros without I/O: its blocks are unwritten now.
    assert!(b
        .fs
        .map(0)
        .unwrap()
        .all(MIB / 4096, 16, BlockState::Unwritten));
    let ios = b.ios.len();
    b.io(SEC, Op::Read, MIB, 65536, req(3));
    assert_eq!(
        b.run(),
        SEC + transfer_ns(65536, crate::units::MEMSET_BYTES_PER_SEC)
    );
    assert_eq!(b.ios.len(), ios);
    // Its fdatasync commits the inode (the split extents fit in it): a descriptor and the
    // inode, then the commit block.
    let mut out = Vec::new();
    b.fs.on_flush(2 * SEC, 0, FLUSH, &mut out);
    assert!(
        matches!(out[..], [FsAction::Io { len, .. }] if len == 2 * 4096),
        "{out:?}"
    );
}

#[test]
fn a_zero_range_past_eof_allocates_unwritten_blocks_and_raises_the_size_so_later_writes_do_not_extend(
) {
    for name in ["ext4", "xfs"] {
        let mut b = Bench::new(growing(name, 0, true), S);
        let zero = Token(ZERO_RANGE_TOKEN | 1);
        b.zero_range(0, 0, 65536, zero);
        // One run of 16 holes: one allocation call.
        assert_eq!(b.run(), ALLOC, "{name}");
        assert_eq!(b.fs.size(0), Some(65536));
        assert!(b.fs.map(0).unwrap().all(0, 16, BlockState::Unwritten));
        // 16 writes into the cluster at once: inside the size, over unwritten blocks, with
        // the shared lock: all out at once, each converting its block.
        for k in 0..N {
            b.io(SEC, Op::Write, k * 4096, 4096, req(k));
        }
        assert_eq!(b.run(), SEC + S + CONVERT, "{name}");
        let st = b.fs.stats(0).unwrap();
        assert_eq!(
            (st.extending_writes, st.blocks_allocated, st.lock_waits),
            (0, 16, 0),
            "{name}"
        );
    }
}

#[test]
fn buffered_writeback_past_eof_takes_no_lock_and_raises_the_size() {
    let mut b = Bench::new(growing("ext4", 0, false), S);
    for k in 0..N {
        b.io(0, Op::Write, k * 4096, 4096, req(k));
    }
    // As a sparse file's first writes before this layer knew sizes: allocations in parallel.
    assert_eq!(b.run(), ALLOC + S + CONVERT);
    assert_eq!(b.fs.size(0), Some(N * 4096));
    assert_eq!(b.fs.stats(0).unwrap().lock_waits, 0);
}

#[test]
fn a_qcow2_image_preallocated_for_metadata_leaves_its_data_clusters_as_holes_a_raw_one_is_written()
{
    let mut q = ImageSpec::qcow2();
    q.preallocation = Preallocation::Metadata;
    assert_eq!(initial_state(&q, 64 * MIB), (BlockState::Hole, 0));
    q.populated = 0.5;
    assert_eq!(initial_state(&q, 64 * MIB), (BlockState::Hole, 32 * MIB));
    let mut r = ImageSpec::raw();
    r.preallocation = Preallocation::Metadata;
    assert_eq!(initial_state(&r, 64 * MIB).0, BlockState::Written);
    r.preallocation = Preallocation::Falloc;
    assert_eq!(initial_state(&r, 64 * MIB).0, BlockState::Unwritten);
}
