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
    };
    HostFs::new(&[vol], &[Some(file)]).unwrap()
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
    // The overwrite is the cache's own Io, as on a block device.
    let again = write(&mut fs, 0, 8192, 16384);
    assert_eq!(
        again,
        vec![FsAction::Io {
            disk: 0,
            op: Op::Write,
            volume_offset: REGION + 8192,
            len: 16384,
            sync: true,
            fua: false,
            token: CACHE,
        }]
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
    assert!(matches!(w[..], [FsAction::Io { token: CACHE, .. }]));
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
    assert!(
        matches!(out[..], [FsAction::Wake { at: 100, .. }]),
        "{out:?}"
    );
    assert_eq!(
        done(&mut fs, 100, &out[0]),
        vec![FsAction::Done { token: CACHE }]
    );
    first_write(&mut fs, 8192, 4096);
    let mut out = Vec::new();
    fs.on_io(0, 0, Op::Read, 0, 65536, true, CACHE, &mut out);
    let [FsAction::Io {
        volume_offset,
        len: 4096,
        ..
    }] = out[..]
    else {
        panic!("{out:?}")
    };
    assert_eq!(volume_offset, REGION + 8192);
    assert_eq!(
        done(&mut fs, 0, &out[0]),
        vec![FsAction::Done { token: CACHE }]
    );
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
