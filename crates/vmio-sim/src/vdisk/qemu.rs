//! What a QEMU release's device models accept (the profile table is vmio-core's
//! [`vmio_core::vdisk::qemu::PROFILES`]): the largest request, and the merging of adjacent
//! requests of one notification (virtio-blk's multireq).
//!
//! ```text
//! largest request (one 4 KiB page per segment: the guest's buffers are not contiguous):
//!   virtio-blk, virtio-scsi: seg_max × 4 KiB, seg_max = queue_size - 2 with seg-max-adjust
//!       (QEMU >= 5.0: 254 × 4 KiB = 1016 KiB at queue size 256), else 128 - 2 = 126
//!       (QEMU 2.x-4.2: 504 KiB)
//!   ide: the bus-master PRD table, LIBATA_MAX_PRD = 128 entries of a page (ata_bmdma's
//!       sg_tablesize) = 512 KiB; QEMU's ide-hd reports LBA48, so libata's 128 KiB
//!       (ATA_MAX_SECTORS, LBA28 only) does not apply
//! multireq (virtio-blk, request-merging on by default): the requests popped in one
//!   notification are batched while of the same direction (a flush is alone), at most
//!   VIRTIO_BLK_MAX_MERGE_REQS (32) requests; a batch is sorted by offset and one is merged
//!   into the previous while contiguous, the iovecs together at most IOV_MAX (1024), and the
//!   sectors within the backend's max_transfer (0 for an image file:
//!   BDRV_REQUEST_MAX_SECTORS, never binding here)
//! ```
//!
//! Sources: QEMU hw/block/virtio-blk.c (`virtio_blk_update_config` writes seg_max;
//! `virtio_blk_handle_request` submits the batch when it reaches VIRTIO_BLK_MAX_MERGE_REQS or
//! the direction changes; `virtio_blk_submit_multireq` and `submit_requests`), hw/scsi/
//! virtio-scsi.c (seg_max likewise), hw/core/machine.c (`hw_compat_4_2`); Linux
//! drivers/block/virtio_blk.c (`sg_elems` = seg_max → max_segments), include/linux/libata.h
//! (`LIBATA_MAX_PRD`), drivers/ata/libata-sff.c (`ATA_BMDMA_SHT`: sg_tablesize).

use vmio_core::request::Op;
use vmio_core::stack::Interface;
use vmio_core::vdisk::qemu::QemuProfile;

const PAGE: u64 = 4096;
/// `IOV_MAX` on Linux.
pub const IOV_MAX: u64 = 1024;
/// hw/block/virtio-blk.c `VIRTIO_BLK_MAX_MERGE_REQS`.
pub const MAX_MERGE_REQS: u32 = 32;
/// include/linux/libata.h `LIBATA_MAX_PRD`.
pub const LIBATA_MAX_PRD: u64 = 128;

/// virtio's seg_max for a virtqueue of `queue_size` under `qemu`.
pub fn seg_max(qemu: &QemuProfile, queue_size: u32) -> u64 {
    if qemu.seg_max_adjust {
        queue_size.saturating_sub(2).max(1) as u64
    } else {
        128 - 2
    }
}

/// The largest request `interface` accepts under `qemu` (None: not a QEMU device).
pub fn max_request_bytes(interface: Interface, qemu: &QemuProfile, queue_size: u32) -> Option<u64> {
    match interface {
        Interface::VirtioBlk | Interface::VirtioScsi => Some(seg_max(qemu, queue_size) * PAGE),
        Interface::Ide => Some(LIBATA_MAX_PRD * PAGE),
        Interface::Nbd | Interface::Host => None,
    }
}

/// virtio-blk's multireq over the requests of one notification, `(op, offset, len)` in the
/// order the VMM pops them: the host requests, each a list of indices into `reqs` in offset
/// order. A run of reads or writes is cut at a change of direction, a flush (alone) and
/// VIRTIO_BLK_MAX_MERGE_REQS requests (`virtio_blk_handle_request`); each run is sorted by
/// offset and a request merged into the previous one while contiguous and the iovecs (one a
/// page) stay within IOV_MAX (`virtio_blk_submit_multireq`).
pub fn multireq(reqs: impl Iterator<Item = (Op, u64, u64)>) -> Vec<Vec<usize>> {
    let mut m = Multireq::default();
    m.plan(reqs);
    m.groups().map(<[usize]>::to_vec).collect()
}

/// [`multireq`] with its buffers kept from one notification to the next (the simulator
/// plans every notification of several requests; a plan allocates nothing once the
/// buffers have grown).
#[derive(Clone, Debug, Default)]
pub struct Multireq {
    reqs: Vec<(Op, u64, u64)>,
    run: Vec<usize>,
    /// The host requests' parts, one request after the other, and where each ends.
    order: Vec<usize>,
    ends: Vec<usize>,
}

impl Multireq {
    /// Plan the host requests of `reqs` (replacing the last plan).
    pub fn plan(&mut self, reqs: impl Iterator<Item = (Op, u64, u64)>) {
        self.reqs.clear();
        self.reqs.extend(reqs);
        self.order.clear();
        self.ends.clear();
        self.run.clear();
        for i in 0..self.reqs.len() {
            match self.reqs[i].0 {
                op @ (Op::Read | Op::Write) => {
                    if let Some(&first) = self.run.first() {
                        if self.run.len() as u32 == MAX_MERGE_REQS || self.reqs[first].0 != op {
                            self.submit();
                        }
                    }
                    self.run.push(i);
                }
                Op::Flush | Op::Trim => {
                    self.submit();
                    self.order.push(i);
                    self.ends.push(self.order.len());
                }
            }
        }
        self.submit();
    }

    /// Every request its own host request (no merging).
    pub fn singles(&mut self, n: usize) {
        self.order.clear();
        self.ends.clear();
        self.order.extend(0..n);
        self.ends.extend(1..=n);
    }

    /// The host requests of the last plan, in order.
    pub fn groups(&self) -> impl Iterator<Item = &[usize]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| &self.order[a..b])
    }

    /// The run so far, sorted by offset (stable: equal offsets keep their order), cut into
    /// host requests.
    fn submit(&mut self) {
        if self.run.is_empty() {
            return;
        }
        let reqs = &self.reqs;
        self.run.sort_unstable_by_key(|&i| (reqs[i].1, i));
        let (mut end, mut iov) = (0u64, 0u64);
        let mut open = false;
        for &i in self.run.iter() {
            let (_, off, len) = reqs[i];
            let pages = len.div_ceil(PAGE).max(1);
            if open && (off != end || iov + pages > IOV_MAX) {
                self.ends.push(self.order.len());
                iov = 0;
            }
            self.order.push(i);
            open = true;
            end = off + len;
            iov += pages;
        }
        self.ends.push(self.order.len());
        self.run.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmio_core::vdisk::qemu::lookup;

    #[test]
    fn the_largest_request_is_504_kib_on_qemu_2_and_1016_kib_from_5_0() {
        let old = lookup("2.11").unwrap();
        let new = lookup("7.2").unwrap();
        let blk = Interface::VirtioBlk;
        assert_eq!(max_request_bytes(blk, old, old.queue_size), Some(504 << 10));
        assert_eq!(
            max_request_bytes(blk, new, new.queue_size),
            Some(1016 << 10)
        );
        // seg-max-adjust follows a larger queue; QEMU 2.x stays at 126 whatever the size.
        assert_eq!(max_request_bytes(blk, new, 1024), Some(1022 * 4096));
        assert_eq!(max_request_bytes(blk, old, 1024), Some(504 << 10));
        assert_eq!(
            max_request_bytes(Interface::VirtioScsi, old, 128),
            Some(504 << 10)
        );
        assert_eq!(max_request_bytes(Interface::Ide, old, 0), Some(512 << 10));
        assert_eq!(max_request_bytes(Interface::Host, new, 0), None);
    }

    /// Run lengths of multireq over contiguous writes of `lens`.
    fn merge_runs(lens: &[u64]) -> Vec<usize> {
        let mut off = 0;
        let reqs: Vec<(Op, u64, u64)> = lens
            .iter()
            .map(|&l| {
                off += l;
                (Op::Write, off - l, l)
            })
            .collect();
        multireq(reqs.into_iter()).iter().map(Vec::len).collect()
    }

    #[test]
    fn multireq_merges_contiguous_parts_up_to_iov_max_and_32_requests() {
        // 4 MiB in 1016 KiB parts: 4 × 254 + 8 pages = 1024 iovecs, one request.
        let k = 1016 << 10;
        assert_eq!(merge_runs(&[k, k, k, k, 32 << 10]), vec![5]);
        // 16 MiB: 17 parts; four parts (1016 iovecs) per merged request, the fifth would
        // pass IOV_MAX.
        let mut parts = vec![k; 16];
        parts.push(256 << 10);
        assert_eq!(merge_runs(&parts), vec![4, 4, 4, 4, 1]);
        // 40 requests of 4 KiB: at most 32 per merge.
        assert_eq!(merge_runs(&[4096; 40]), vec![32, 8]);
        assert_eq!(merge_runs(&[4096]), vec![1]);
    }

    #[test]
    fn multireq_sorts_a_run_by_offset_and_cuts_at_a_change_of_direction_or_a_flush() {
        let (r, w, f) = (Op::Read, Op::Write, Op::Flush);
        let reqs = [
            (w, 8192, 4096),
            (w, 0, 4096),
            (w, 4096, 4096),
            (r, 12288, 4096),
            (f, 0, 0),
            (w, 16384, 4096),
            (w, 40960, 4096),
        ];
        let g = multireq(reqs.into_iter());
        assert_eq!(g, vec![vec![1, 2, 0], vec![3], vec![4], vec![5], vec![6]]);
    }
}
