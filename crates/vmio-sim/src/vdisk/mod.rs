//! Virtual disk interfaces: what a guest request costs between the guest and the host.
//!
//! Each interface is a queue-depth limit, a largest request the guest's block layer sends
//! (larger I/Os are split into several requests, submitted together), and three costs:
//! `guest_submit` (the guest's submission path including the notification exit — fio's slat),
//! `vmm_submit` and `vmm_complete` (work on the VMM thread that owns the device: QEMU's main
//! loop or an iothread, which serializes them; completion includes interrupt injection).
//!
//! Sources:
//! - virtio-blk: queue size 256 and `seg_max = queue_size - 2` (QEMU hw/block/virtio-blk.c,
//!   QEMU ≥ 5.0), so at most 254 × 4 KiB = 1016 KiB per request; per-request overhead of the
//!   order of 10–20 µs on KVM (S. Hajnoczi, "Virtio-blk performance improvements", KVM Forum
//!   2012; ioeventfd makes the guest's kick cheap).
//! - virtio-scsi: `cmd_per_lun` 128 and `seg_max = virtqueue_size - 2` (hw/scsi/virtio-scsi.c);
//!   SCSI CDB emulation adds a few µs over virtio-blk.
//! - ide (PIIX, QEMU's default `if=ide`): no command queueing (one command at a time), a
//!   command is programmed through ~8 port I/O writes, each a synchronous VM exit of a few µs,
//!   and a bus-master DMA table of 128 entries (LIBATA_MAX_PRD) → 512 KiB per request. The
//!   guest uses DMA (bus mastering), not PIO. libata's 128 KiB limit (ATA_MAX_SECTORS, 256
//!   sectors, drivers/ata/libata-core.c ata_dev_configure) applies only to a disk without
//!   LBA48; QEMU's ide-hd reports LBA48 (hw/ide/core.c ide_identify), so the SCSI host's
//!   1024 sectors and the DMA table bound a request instead.
//!
//! - host (`hypervisor = "native"`, no VM): the host's own block layer: no queue limit above
//!   the device's, requests up to `max_sectors_kb` = 1280 KiB (BLK_DEF_MAX_SECTORS_CAP, 2560
//!   sectors, block/blk-settings.c), a system call and block-layer submission of about
//!   1.5 µs (estimate), no VMM.
//!
//! - nbd: an NBD client on the host and vmio serve (vmio_core::nbd, the `[nbd]` table): no
//!   guest, so no guest costs; `request` split between submission and completion, a WRITE's
//!   payload copied on submission and a READ's on completion at the path's rates, and the
//!   thread hand-offs (`handoff`) added to the completion without occupying the path. Queue
//!   depth 256 and requests up to 32 MiB (vmio serve's bounds).
//!
//! `guest_complete` is the interrupt's cost in the guest (with `[cpu] model = "cfs"` it runs
//! on the issuing vCPU; the dedicated model does not charge it): virtio, an injected
//! interrupt and its EOI exit with the driver's handler (about 2 µs); IDE, that and libata's
//! three port reads (status, bus-master status and its acknowledgement, ata_bmdma_interrupt
//! and ata_sff_hsm_move), each an exit to QEMU (5 µs, `[cpu] user_exit`'s default): 17 µs;
//! native, waking the thread (1 µs).
//!
//! With `[cpu] model = "cfs"` these costs are work on host threads (sim/cpu.rs): the guest's
//! on the issuing vCPU, the VMM's on its main loop, iothread or dom0 vCPU.

use vmio_core::nbd::{self, NbdSpec};
use vmio_core::request::Op;
use vmio_core::stack::Interface;
use vmio_core::units::transfer_ns;
use vmio_core::{Ns, US};

pub trait VirtualDisk {
    fn interface(&self) -> Interface;
    fn queue_depth(&self) -> u32;
    fn max_request_bytes(&self) -> u64;
    fn guest_submit_ns(&self) -> Ns;
    fn vmm_submit_ns(&self, op: Op, len_bytes: u64) -> Ns;
    fn vmm_complete_ns(&self, op: Op, len_bytes: u64) -> Ns;
    fn guest_complete_ns(&self) -> Ns;
    /// Latency added to each completion that occupies nothing (thread hand-offs).
    fn handoff_ns(&self) -> Ns {
        0
    }
}

/// A table-driven interface model (one row per QEMU device).
#[derive(Clone, Debug)]
pub struct InterfaceModel {
    pub interface: Interface,
    pub queue_depth: u32,
    pub max_request_bytes: u64,
    pub guest_submit_ns: Ns,
    pub vmm_submit_ns: Ns,
    pub vmm_complete_ns: Ns,
    pub guest_complete_ns: Ns,
    /// The NBD path's copies and hand-offs (`interface = "nbd"` only).
    pub nbd: Option<NbdSpec>,
}

impl InterfaceModel {
    /// The model of `interface`; `nbd` gives the `[nbd]` costs of an NBD disk (default:
    /// [`NbdSpec::default`]) and is ignored by the others.
    pub fn new(interface: Interface, queue_depth: Option<u32>, nbd: Option<&NbdSpec>) -> Self {
        let path = (interface == Interface::Nbd).then(|| nbd.cloned().unwrap_or_default());
        let request = path.as_ref().map_or(0, |p| p.request_ns);
        let (qd, max, g, s, c, gc) = match interface {
            Interface::VirtioBlk => (256, 1016 << 10, 2 * US, 6 * US, 4 * US, 2 * US),
            Interface::VirtioScsi => (128, 1016 << 10, 2 * US, 8 * US, 5 * US, 2 * US),
            Interface::Ide => (1, 512 << 10, 25 * US, 20 * US, 15 * US, 17 * US),
            Interface::Nbd => {
                let (qd, max) = (nbd::QUEUE_DEPTH, nbd::MAX_REQUEST_BYTES);
                (qd, max, 0, request / 2, request - request / 2, 0)
            }
            Interface::Host => (u32::MAX, 1280 << 10, 1_500, 0, 0, US),
        };
        Self {
            interface,
            queue_depth: queue_depth
                .unwrap_or(qd)
                .min(if interface == Interface::Ide {
                    1
                } else {
                    u32::MAX
                }),
            max_request_bytes: max,
            guest_submit_ns: g,
            vmm_submit_ns: s,
            vmm_complete_ns: c,
            guest_complete_ns: gc,
            nbd: path,
        }
    }

    /// The path's copy of `len` bytes of `op` in direction `copied` (0 without `[nbd]`).
    fn copy_ns(&self, op: Op, copied: Op, len: u64) -> Ns {
        match &self.nbd {
            Some(p) if op == copied => transfer_ns(
                len,
                if op == Op::Read {
                    p.read_rate_bps
                } else {
                    p.write_rate_bps
                },
            ),
            _ => 0,
        }
    }
}

impl VirtualDisk for InterfaceModel {
    fn interface(&self) -> Interface {
        self.interface
    }
    fn queue_depth(&self) -> u32 {
        self.queue_depth
    }
    fn max_request_bytes(&self) -> u64 {
        self.max_request_bytes
    }
    fn guest_submit_ns(&self) -> Ns {
        self.guest_submit_ns
    }
    fn vmm_submit_ns(&self, op: Op, len_bytes: u64) -> Ns {
        self.vmm_submit_ns + self.copy_ns(op, Op::Write, len_bytes)
    }
    fn vmm_complete_ns(&self, op: Op, len_bytes: u64) -> Ns {
        self.vmm_complete_ns + self.copy_ns(op, Op::Read, len_bytes)
    }
    fn guest_complete_ns(&self) -> Ns {
        self.guest_complete_ns
    }
    fn handoff_ns(&self) -> Ns {
        self.nbd.as_ref().map_or(0, |p| p.handoff_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ide_has_no_command_queueing_and_costs_more_than_virtio() {
        let ide = InterfaceModel::new(Interface::Ide, Some(32), None);
        let blk = InterfaceModel::new(Interface::VirtioBlk, None, None);
        assert_eq!(ide.queue_depth(), 1);
        assert!(
            ide.guest_submit_ns() + ide.vmm_submit_ns(Op::Read, 4096)
                > 3 * (blk.guest_submit_ns() + blk.vmm_submit_ns(Op::Read, 4096))
        );
        assert_eq!(blk.queue_depth(), 256);
    }

    #[test]
    fn nbd_copies_a_write_on_submission_and_a_read_on_completion() {
        let spec = NbdSpec {
            handoff_ns: 100 * US,
            request_ns: 21 * US,
            read_rate_bps: 1_000_000_000,
            write_rate_bps: 500_000_000,
        };
        let m = InterfaceModel::new(Interface::Nbd, None, Some(&spec));
        assert_eq!(m.vmm_submit_ns(Op::Write, 1000), 10_500 + 2_000);
        assert_eq!(m.vmm_complete_ns(Op::Write, 1000), 10_500);
        assert_eq!(m.vmm_submit_ns(Op::Read, 1000), 10_500);
        assert_eq!(m.vmm_complete_ns(Op::Read, 1000), 10_500 + 1_000);
        assert_eq!(m.handoff_ns(), 100 * US);
        assert_eq!((m.queue_depth(), m.max_request_bytes()), (256, 32 << 20));
        assert_eq!(m.guest_submit_ns() + m.guest_complete_ns(), 0);
    }

    #[test]
    fn nbd_costs_are_ignored_by_the_other_interfaces() {
        let m = InterfaceModel::new(Interface::VirtioBlk, None, Some(&NbdSpec::default()));
        assert_eq!(m.handoff_ns(), 0);
        assert_eq!(m.vmm_submit_ns(Op::Write, 1 << 20), 6 * US);
    }
}
