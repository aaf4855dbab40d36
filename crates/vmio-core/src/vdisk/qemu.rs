//! QEMU version profiles (`[[vm]] qemu_version`): what a VM's disks inherit from the QEMU
//! release that runs it. One table, [`PROFILES`], read by the stack parser (defaults and
//! checks of `[[vm.disk]] aio` and `[vm.disk.queue]`) and by the simulator's virtual disk
//! (vmio-sim's vdisk/qemu.rs: the largest request each device model accepts).
//!
//! ```text
//! version  virtqueue size  seg_max            num-queues (virtio-blk/scsi-pci)  io_uring  iothread-vq-mapping  qcow2 zero alloc
//! 2.11     128             128 - 2 = 126      1                                 no        no                   no
//! 5.2      256             queue_size - 2     the VM's vCPUs                    yes       no                   yes
//! 7.2      256             queue_size - 2     the VM's vCPUs                    yes       no                   yes
//! 8.2      256             queue_size - 2     the VM's vCPUs                    yes       yes                  yes
//! linux-aio io_submit batch: up to MAX_EVENTS (1024) before 6.2, DEFAULT_MAX_BATCH (32) since
//! ```
//!
//! Sources (QEMU): hw/core/machine.c `hw_compat_4_2` (`virtio-blk-device queue-size 128`,
//! `virtio-scsi-device virtqueue_size 128`, `seg-max-adjust off` for both: QEMU 5.0 raised
//! the queue size to 256 and made `seg_max = queue_size - 2`, hw/block/virtio-blk.c
//! `virtio_blk_update_config`; QEMU 2.x writes `seg_max` 128 - 2); `hw_compat_5_1`
//! (`virtio-blk-device num-queues 1`, `virtio-scsi-device num_queues 1`: since 5.2 virtio-pci
//! devices default to one queue per vCPU, `virtio_pci_optimal_num_queues`); block/io_uring.c
//! (added in QEMU 5.0); block/linux-aio.c `DEFAULT_MAX_BATCH` 32 and `aio-max-batch` (6.2);
//! hw/block/virtio-blk.c `iothread-vq-mapping` (8.2: a device's queues spread over several
//! iothreads; before, one iothread serves all the device's queues); block/qcow2.c
//! `handle_alloc_space` (commit c8bb23cbdbe3, "qcow2: skip writing zero buffers to empty COW
//! areas", merged for QEMU 4.1 in the block pull of 2019-05-28): a new cluster whose
//! copy-on-write areas read as zeroes is zeroed by one `bdrv_co_pwrite_zeroes(..,
//! BDRV_REQ_NO_FALLBACK)` of the protocol layer instead of written with zero buffers (what
//! the image driver does with it: [`crate::image::ImageCaps`]).

/// What one QEMU release gives a VM's disks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct QemuProfile {
    /// The name `qemu_version` takes ("7.2").
    pub name: &'static str,
    /// Its line in `vmio help stack`.
    pub help: &'static str,
    /// (major, minor), for ordering.
    pub version: (u32, u32),
    /// virtio-blk's `queue-size` and virtio-scsi's `virtqueue_size` default.
    pub queue_size: u32,
    /// `seg-max-adjust`: seg_max = queue_size - 2 (else 128 - 2).
    pub seg_max_adjust: bool,
    /// num-queues defaults to the VM's vCPU count (virtio-blk-pci, virtio-scsi-pci).
    pub auto_num_queues: bool,
    /// `aio=io_uring` exists.
    pub io_uring: bool,
    /// A device's queues may be spread over several iothreads (`iothread-vq-mapping`).
    pub iothread_vq_mapping: bool,
    /// linux-aio's largest `io_submit` batch (requests queued while plugged).
    pub linux_aio_max_batch: u32,
    /// qcow2 zeroes a new cluster's zero copy-on-write areas with one write-zeroes request
    /// of the protocol layer (`handle_alloc_space`, QEMU 4.1) instead of zero buffers.
    pub qcow2_zero_alloc: bool,
    /// file-posix makes a write-zeroes that reaches past the end of the file a serialising
    /// request up to the largest offset (block/file-posix.c `raw_do_pwrite_zeroes`, commit
    /// 292d06b925b2 "block/file-posix: Let post-EOF fallocate serialize", QEMU 4.2: an XFS
    /// workaround applied to every filesystem and AIO mode): it waits for the requests in
    /// flight past its start, and later ones there wait for it (block/io.c
    /// `bdrv_make_request_serialising`, `bdrv_wait_serialising_requests`).
    pub post_eof_serialising: bool,
}

/// The named profiles, oldest first.
pub const PROFILES: &[QemuProfile] = &[
    QemuProfile {
        name: "2.11",
        help: "QEMU 2.11 (Ubuntu 18.04; the seeds' era): virtqueues of 128, seg_max 126 (504 KiB requests), one queue per disk, no io_uring",
        version: (2, 11),
        queue_size: 128,
        seg_max_adjust: false,
        auto_num_queues: false,
        io_uring: false,
        iothread_vq_mapping: false,
        linux_aio_max_batch: 1024,
        qcow2_zero_alloc: false,
        post_eof_serialising: false,
    },
    QemuProfile {
        name: "5.2",
        help: "QEMU 5.2: virtqueues of 256, seg_max 254 (1016 KiB), a queue per vCPU, io_uring; io_submit batches up to 1024",
        version: (5, 2),
        queue_size: 256,
        seg_max_adjust: true,
        auto_num_queues: true,
        io_uring: true,
        iothread_vq_mapping: false,
        linux_aio_max_batch: 1024,
        qcow2_zero_alloc: true,
        post_eof_serialising: true,
    },
    QemuProfile {
        name: "7.2",
        help: "QEMU 7.2 (Debian 12, installed beside vmio): as 5.2, io_submit batches of 32 (aio-max-batch)",
        version: (7, 2),
        queue_size: 256,
        seg_max_adjust: true,
        auto_num_queues: true,
        io_uring: true,
        iothread_vq_mapping: false,
        linux_aio_max_batch: 32,
        qcow2_zero_alloc: true,
        post_eof_serialising: true,
    },
    QemuProfile {
        name: "8.2",
        help: "QEMU 8.2: as 7.2, and a disk's queues spread over several iothreads (iothread-vq-mapping)",
        version: (8, 2),
        queue_size: 256,
        seg_max_adjust: true,
        auto_num_queues: true,
        io_uring: true,
        iothread_vq_mapping: true,
        linux_aio_max_batch: 32,
        qcow2_zero_alloc: true,
        post_eof_serialising: true,
    },
];

/// The profile a VM gets without `qemu_version`: QEMU 7.2, the release installed beside
/// vmio (Debian 12), whose limits the calibrations were made with.
pub const DEFAULT: &str = "7.2";

/// The profile named `name`.
pub fn lookup(name: &str) -> Option<&'static QemuProfile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// The accepted names, for error lines.
pub fn accepted() -> String {
    PROFILES
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The default profile.
pub fn default_profile() -> &'static QemuProfile {
    lookup(DEFAULT).unwrap_or(&PROFILES[PROFILES.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_are_ordered_and_the_default_is_one_of_them() {
        assert!(PROFILES.windows(2).all(|w| w[0].version < w[1].version));
        assert_eq!(default_profile().name, DEFAULT);
        assert!(lookup("4.0").is_none());
    }
}
