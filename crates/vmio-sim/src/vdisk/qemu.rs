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
//!   notification are sorted by offset; one is merged into the previous while contiguous,
//!   of the same direction, at most VIRTIO_BLK_MAX_MERGE_REQS (32) requests, the iovecs
//!   together at most IOV_MAX (1024), and the sectors within the backend's max_transfer
//!   (0 for an image file: BDRV_REQUEST_MAX_SECTORS, never binding here)
//! ```
//!
//! Sources: QEMU hw/block/virtio-blk.c (`virtio_blk_update_config` writes seg_max;
//! `virtio_blk_handle_request` submits the batch when it reaches VIRTIO_BLK_MAX_MERGE_REQS or
//! the direction changes; `virtio_blk_submit_multireq` and `submit_requests`), hw/scsi/
//! virtio-scsi.c (seg_max likewise), hw/core/machine.c (`hw_compat_4_2`); Linux
//! drivers/block/virtio_blk.c (`sg_elems` = seg_max → max_segments), include/linux/libata.h
//! (`LIBATA_MAX_PRD`), drivers/ata/libata-sff.c (`ATA_BMDMA_SHT`: sg_tablesize).

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

/// virtio-blk's multireq over the parts of one notification, given as lengths of contiguous
/// requests of one direction in offset order: the number of parts each merged request takes.
pub fn merge_runs(lens: &[u64]) -> Vec<usize> {
    let mut runs = Vec::new();
    let (mut n, mut iov) = (0usize, 0u64);
    for &len in lens {
        let pages = len.div_ceil(PAGE).max(1);
        if n > 0 && (n as u32 == MAX_MERGE_REQS || iov + pages > IOV_MAX) {
            runs.push(n);
            n = 0;
            iov = 0;
        }
        n += 1;
        iov += pages;
    }
    if n > 0 {
        runs.push(n);
    }
    runs
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
}
