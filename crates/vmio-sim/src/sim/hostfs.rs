//! The host filesystem driver: the simulator's side of vmio-core's host filesystem policy
//! ([`vmio_core::hostfs::HostFs`]: ext4 or XFS holding the images of the disks of a
//! `[[volume]]` with `filesystem`). It sits between the host cache driver's actions and the
//! block queue, for the disks of those volumes only:
//!
//! ```text
//! host_act: Io / Flush of a disk on a filesystem volume → policy.on_io / on_flush
//!           (any other disk: submit_range / flush_volume as before, one branch)
//! fs_zero_range(disk, range, h) (the block layer's write-zeroes of sub-request h)
//!           → policy.on_zero_range with token ZERO_RANGE_TOKEN | h
//!           (a disk on no filesystem: h is finished at once)
//! actions:
//!   Io { disk, op, volume_offset, len, sync, fua, token } → a barrier for token;
//!                                                            submit_volume (block queue)
//!   Flush { disk, token }  → flush_volume
//!   Wake { at, token }     → FsWake at `at`, then policy.on_done(token)
//!   Done { token }         → ZERO_RANGE_TOKEN set: sub_finish(h) (the block layer's
//!                            sub-request); else the host cache policy's on_done(token)
//!                            (its Io or Flush is done)
//! barrier of a token: the policy's (FS_TOKEN bit) → policy.on_done; else the host cache's
//! ```
//!
//! A Wake's token waits in a slab until its event comes (the event carries the slot).

use super::blockq::Barrier;
use super::breakdown::DevTimes;
use super::event::Event;
use super::{Sim, SimError};
use vmio_core::cache::Token;
use vmio_core::hostfs::{
    self, FsAction, FsVolume, HostFile, HostFs, HostFsStats, ZERO_RANGE_TOKEN,
};
use vmio_core::slab::Slab;
use vmio_core::stack::Stack;
use vmio_core::Ns;

/// The driver's state: the policy (None when no volume has a filesystem), which disks are
/// files, the action buffer and the wake-ups pending.
pub(super) struct HostFsDriver {
    policy: Option<HostFs>,
    /// Per VM disk (engine order): its Io and Flush go through the policy.
    on_fs: Vec<bool>,
    actions: Vec<FsAction>,
    wakes: Slab<Token>,
}

impl HostFsDriver {
    /// The policy over the stack's filesystem volumes and the disks on them; `disks` are
    /// (volume, offset, size, preallocation) in engine order.
    pub(super) fn new(
        stack: &Stack,
        vol_bytes: &[u64],
        disks: &[(usize, u64, u64)],
    ) -> Result<Self, SimError> {
        let specs: Vec<_> = stack.vms.iter().flat_map(|v| v.disks.iter()).collect();
        let mut fs_of_vol = vec![None; stack.volumes.len()];
        let mut volumes = Vec::new();
        for (i, v) in stack.volumes.iter().enumerate() {
            if let Some(spec) = &v.filesystem {
                fs_of_vol[i] = Some(volumes.len());
                volumes.push(FsVolume {
                    name: v.name.clone(),
                    spec: spec.clone(),
                    capacity_bytes: vol_bytes[i],
                });
            }
        }
        let on_fs: Vec<bool> = disks.iter().map(|d| fs_of_vol[d.0].is_some()).collect();
        if volumes.is_empty() {
            return Ok(HostFsDriver {
                policy: None,
                on_fs,
                actions: Vec::new(),
                wakes: Slab::new(),
            });
        }
        let files: Vec<Option<HostFile>> = disks
            .iter()
            .zip(&specs)
            .map(|(&(vol, offset, size), d)| {
                fs_of_vol[vol].map(|fs| {
                    let (initial, written_prefix) = hostfs::initial_state(&d.image, size);
                    HostFile {
                        fs,
                        volume_offset: offset,
                        size_bytes: size,
                        initial,
                        written_prefix,
                        // The virtual disk's size is the image's virtual size.
                        len_bytes: vmio_core::image::initial_file_len(&d.image, d.size_bytes),
                        own_bytes: d.image.own_file_bytes(d.size_bytes),
                        direct: d.cache.direct(),
                        // QEMU's thread pool makes the system calls (preadv / pwritev).
                        sync_dio: d.aio == vmio_core::vdisk::queue::Aio::Threads,
                    }
                })
            })
            .collect();
        let policy = HostFs::new(&volumes, &files)
            .map_err(|e| SimError::Job(format!("{}: {e}", stack.file)))?;
        Ok(HostFsDriver {
            policy: Some(policy),
            on_fs,
            actions: Vec::new(),
            wakes: Slab::new(),
        })
    }

    /// Whether VM disk `disk` is an image file on a host filesystem.
    #[inline(always)]
    pub(super) fn on_fs(&self, disk: usize) -> bool {
        self.on_fs[disk]
    }

    /// The figures of `disk`'s image file, when it is one.
    pub(super) fn stats(&self, disk: usize) -> Option<HostFsStats> {
        self.policy.as_ref()?.stats(disk as u32)
    }

    fn policy(&mut self) -> &mut HostFs {
        self.policy
            .as_mut()
            .expect("only disks on a filesystem volume reach the driver")
    }
}

impl Sim {
    /// An Io action of the host cache for a disk on a filesystem volume.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fs_io(
        &mut self,
        now: Ns,
        disk: u32,
        op: vmio_core::request::Op,
        offset: u64,
        len: u64,
        sync: bool,
        token: Token,
    ) {
        let mut out = std::mem::take(&mut self.hostfs.actions);
        self.hostfs
            .policy()
            .on_io(now, disk, op, offset, len, sync, token, &mut out);
        self.fs_act(now, out, None);
    }

    /// A Flush action of the host cache for a disk on a filesystem volume (its fdatasync).
    pub(super) fn fs_flush(&mut self, now: Ns, disk: u32, token: Token) {
        let mut out = std::mem::take(&mut self.hostfs.actions);
        self.hostfs.policy().on_flush(now, disk, token, &mut out);
        self.fs_act(now, out, None);
    }

    /// QEMU's write-zeroes on `disk`'s image file, a file of a filesystem volume
    /// (block/file-posix.c `handle_aiocb_write_zeroes`: `fallocate(FALLOC_FL_ZERO_RANGE)` of
    /// `[offset, offset + len)`); sub-request `h` of the disk's format driver is finished
    /// (`sub_finish`) when the policy's `on_zero_range` is done with it. A disk on no
    /// filesystem finishes it at once.
    pub(super) fn fs_zero_range(&mut self, now: Ns, disk: usize, offset: u64, len: u64, h: usize) {
        if self.hostfs.policy.is_none() || !self.hostfs.on_fs(disk) {
            return self.sub_finish(now, h);
        }
        let mut out = std::mem::take(&mut self.hostfs.actions);
        let token = Token(ZERO_RANGE_TOKEN | h as u64);
        self.hostfs
            .policy()
            .on_zero_range(now, disk as u32, offset, len, token, &mut out);
        self.fs_act(now, out, None);
    }

    /// A barrier or a wake-up of the policy's token completed.
    /// `dev`: the times of the device request that completed it (breakdown.rs).
    pub(super) fn fs_done(&mut self, now: Ns, token: Token, dev: Option<DevTimes>) {
        let mut out = std::mem::take(&mut self.hostfs.actions);
        self.hostfs.policy().on_done(now, token, &mut out);
        self.fs_act(now, out, dev);
    }

    /// FsWake: the wake-up in `slot` is due.
    pub(super) fn fs_wake(&mut self, now: Ns, slot: usize) {
        let token = self.hostfs.wakes.remove(slot);
        self.fs_done(now, token, None);
    }

    /// Carry out the policy's actions in order. A Done hands a token to the host cache
    /// policy, whose own actions may come back here with another buffer.
    /// `dev`: the device times a Done hands on to the host cache (breakdown.rs).
    fn fs_act(&mut self, now: Ns, mut out: Vec<FsAction>, dev: Option<DevTimes>) {
        for &a in &out {
            match a {
                FsAction::Io {
                    disk,
                    op,
                    volume_offset,
                    len,
                    sync,
                    fua,
                    token,
                } => {
                    let b = self.blockq.barriers.insert(Barrier {
                        remaining: 0,
                        cont: token,
                    });
                    let d = &self.disks[disk as usize];
                    let (vol, owner) = (d.volume, d.owner);
                    self.submit_volume(now, vol, owner, op, volume_offset, len, b, sync, fua);
                }
                FsAction::Flush { disk, token } => self.flush_volume(now, disk as usize, token),
                FsAction::Wake { at, token } => {
                    let slot = self.hostfs.wakes.insert(token);
                    self.q.push(at, Event::FsWake(slot).pack());
                }
                FsAction::Done { token } if token.0 & ZERO_RANGE_TOKEN != 0 => {
                    self.sub_finish(now, (token.0 & !ZERO_RANGE_TOKEN) as usize)
                }
                FsAction::Done { token } => self.barrier_continue(now, token, dev),
            }
        }
        out.clear();
        if out.capacity() > self.hostfs.actions.capacity() {
            self.hostfs.actions = out;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::output::RunOutput;
    use crate::run::{run, RunInput};

    /// An SSD whose volume holds an ext4 (or no filesystem), one disk of 256 MiB at 64 MiB.
    fn stack(filesystem: &str, preallocation: &str) -> String {
        format!(
            "[[device]]\nname = \"ssd\"\nmodel = \"ssd\"\n[[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"ssd\"]\n{filesystem}\
             [[vm]]\nname = \"vm\"\n[[vm.disk]]\nname = \"vda\"\nvolume = \"v\"\noffset = \"64m\"\nsize = \"256m\"\ncache = \"none\"\n{preallocation}"
        )
    }

    const EXT4: &str = "filesystem = \"ext4\"\n";
    const SPARSE: &str = "[vm.disk.image]\npreallocation = \"off\"\n";
    const FULL: &str = "[vm.disk.image]\npreallocation = \"full\"\n";

    /// 1024 sequential O_DIRECT writes of 4 KiB, each followed by an fdatasync.
    const JOB: &str = "[w]\nrw=write\nbs=4k\nioengine=psync\ndirect=1\nsize=4m\nfdatasync=1\n";

    fn sim(stack_text: &str) -> RunOutput {
        run(&RunInput::texts(stack_text, JOB, 1)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn device_writes(o: &RunOutput) -> (u64, u64) {
        let d = &o.report.devices[0].stats;
        (d.write_bytes, d.flush_ops)
    }

    #[test]
    fn a_first_write_with_fdatasync_on_a_sparse_ext4_image_costs_the_journal_commit_an_overwrite_does_not(
    ) {
        let sparse = sim(&stack(EXT4, SPARSE));
        let full = sim(&stack(EXT4, FULL));
        let writes = 1024;
        let s = sparse.report.host_fs[0].stats;
        assert_eq!(
            (s.blocks_allocated, s.extents_converted, s.journal_commits),
            (writes, writes, writes)
        );
        // Each commit: a descriptor, the group's bitmap and descriptor block, the inode, and
        // the commit block (sequential writes keep one extent: no leaf).
        assert_eq!(s.journal_bytes, writes * 5 * 4096);
        let f = full.report.host_fs[0].stats;
        assert_eq!((f.blocks_allocated, f.journal_commits), (0, 0));
        assert_eq!(f.flush_only, writes);
        // The device sees the journal's blocks on top of the same data, and one FLUSH per
        // fdatasync either way (the commit block's PREFLUSH, or the fdatasync's own).
        let (sw, sf) = device_writes(&sparse);
        let (fw, ff) = device_writes(&full);
        assert_eq!(sw - fw, writes * 5 * 4096);
        assert_eq!(sf, ff);
        // Per write: at least the allocation and conversion (5 + 10 us) more, and the
        // commit's writes on top.
        let per_write = |o: &RunOutput| o.report.jobs[0].runtime_ns as f64 / writes as f64;
        let extra = per_write(&sparse) - per_write(&full);
        assert!(extra > 15_000.0, "{extra} ns more per write");
        // A volume without a filesystem is a block device: no host_fs figures, and the same
        // run as the preallocated image's (an overwrite is the block device's write).
        let plain = sim(&stack("", SPARSE));
        assert!(plain.report.host_fs.is_empty());
        assert_eq!(
            plain.report.jobs[0].runtime_ns,
            full.report.jobs[0].runtime_ns
        );
    }

    /// 4 KiB random writes at QD 16 over the first 16 MiB of a new image.
    const RANDWRITE: &str =
        "[w]\nrw=randwrite\nbs=4k\nioengine=libaio\niodepth=16\ndirect=1\nsize=16m\n";

    #[test]
    fn a_sparse_raw_file_never_grows_while_a_new_qcow2_file_grows_by_every_cluster_it_appends() {
        let measure = |image: &str| {
            let o = run(&RunInput::texts(&stack(EXT4, image), RANDWRITE, 1))
                .unwrap_or_else(|e| panic!("{e}"));
            let fs = o.report.host_fs[0].stats;
            let allocations = o.report.images.first().map_or(0, |i| i.stats.allocations);
            (fs, allocations)
        };
        let (raw, _) = measure(SPARSE);
        // The raw file is as long as the disk: its first writes fill holes inside its size.
        assert_eq!(raw.extending_writes, 0);
        assert_eq!(raw.blocks_allocated, 4096);
        let (q, clusters) =
            measure("format = \"qcow2\"\n[vm.disk.image]\ncluster_size = \"64k\"\n");
        // qcow2 appends each new cluster at the file's end, so its write extends the file
        // (or a zero range grows it first), holding ext4's inode lock exclusively through its
        // I/O: the writes behind it wait. A cluster write queued behind one appended after it
        // (QD 16) finds the size past it already and does not extend: most, not all, do.
        assert!(clusters > 0);
        assert!(
            2 * (q.extending_writes + q.zero_ranges) > clusters,
            "{q:?} for {clusters} clusters"
        );
        assert!(q.lock_waits >= q.extending_writes, "{q:?}");
    }
}
