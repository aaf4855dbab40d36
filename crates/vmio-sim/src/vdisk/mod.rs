//! Virtual disk interfaces: what a guest request costs between the guest and the host.
//!
//! Each interface is a queue-depth limit, a largest request the guest's block layer sends
//! (larger I/Os are split into several requests, submitted together), and three costs:
//! `guest_submit` (the guest's submission path including the notification exit — fio's slat),
//! `vmm_submit` and `vmm_complete` (work on the VMM thread that owns the device: QEMU's main
//! loop or an iothread, which serializes them; completion includes interrupt injection).
//!
//! One file per mechanism: [`aio`] (QEMU's I/O engines: the VMM side's per-request and
//! per-batch costs and the engine's in-flight limit), [`ide`] (IDE's costs counted from its
//! register accesses), [`qemu`] (what a QEMU release's device models accept: the largest
//! request, virtio-blk's merging). This file keeps the trait and the table of devices.
//!
//! ```text
//! interface     queue depth                largest request       VMM work per request (device + engine)
//! virtio-blk    queue_size per queue       qemu::max_request     submit 4 µs + engine, complete 3 µs + engine
//!               (blk-mq tags per hw queue)
//! virtio-scsi   cmd_per_lun 128 per disk   qemu::max_request     submit 6 µs + engine, complete 4 µs + engine
//! ide           1 (no queueing)            PRD table 512 KiB     submit 18 µs + engine, complete 14 µs + engine
//! nbd           256 ([nbd])                32 MiB                [nbd] request split, copies, hand-offs
//! host          none                       1280 KiB              none (1.5 µs system call in guest_submit)
//! guest side: virtio: guest_submit 2 µs, guest_complete 2 µs; ide: ide::guest_submit_ns /
//!   guest_complete_ns (exits × [cpu] user_exit); host: 1.5 µs, 1 µs
//! queues: num_queues; the VMM threads ("lanes"): max(1, iothreads); queue q on lane q mod lanes
//! ```
//!
//! Sources:
//! - virtio-blk: queue size 256 and `seg_max = queue_size - 2` (QEMU hw/block/virtio-blk.c,
//!   QEMU ≥ 5.0; 128 and 126 before, see [`qemu`]); per-request overhead of the order of
//!   10–20 µs on KVM (S. Hajnoczi, "Virtio-blk performance improvements", KVM Forum 2012;
//!   ioeventfd makes the guest's kick cheap). The device's share (virtqueue pop and request
//!   parsing; virtqueue push and the irqfd notification) is the former per-request VMM cost
//!   less the thread pool's hand-off ([`aio`]): estimates.
//! - virtio-scsi: `cmd_per_lun` 128 and `seg_max = virtqueue_size - 2` (hw/scsi/virtio-scsi.c);
//!   SCSI CDB emulation adds a few µs over virtio-blk (estimate).
//! - ide (PIIX, QEMU's default `if=ide`): no command queueing (one command at a time), its
//!   commands programmed through port I/O ([`ide`]), a bus-master DMA table of 128 entries
//!   (LIBATA_MAX_PRD) → 512 KiB per request. The guest uses DMA (bus mastering), not PIO.
//!   libata's 128 KiB limit (ATA_MAX_SECTORS, 256 sectors, drivers/ata/libata-core.c
//!   ata_dev_configure) applies only to a disk without LBA48; QEMU's ide-hd reports LBA48
//!   (hw/ide/core.c ide_identify), so the SCSI host's 1024 sectors and the DMA table bound a
//!   request instead.
//! - host (`hypervisor = "native"`, no VM): the host's own block layer: no queue limit above
//!   the device's, requests up to `max_sectors_kb` = 1280 KiB (BLK_DEF_MAX_SECTORS_CAP, 2560
//!   sectors, block/blk-settings.c), a system call and block-layer submission of about
//!   1.5 µs (estimate), no VMM.
//! - nbd: an NBD client on the host and vmio serve (vmio_core::nbd, the `[nbd]` table): no
//!   guest, so no guest costs; `request` split between submission and completion, a WRITE's
//!   payload copied on submission and a READ's on completion at the path's rates, and the
//!   thread hand-offs (`handoff`) added to the completion without occupying the path. Queue
//!   depth 256 and requests up to 32 MiB (vmio serve's bounds).
//!
//! `guest_complete` is the interrupt's cost in the guest (with `[cpu] model = "cfs"` it runs
//! on the issuing vCPU; the dedicated model does not charge it): virtio, an injected
//! interrupt and its EOI exit with the driver's handler (about 2 µs); IDE, that and libata's
//! port accesses ([`ide`]); native, waking the thread (1 µs).
//!
//! With `[cpu] model = "cfs"` these costs are work on host threads (sim/cpu.rs): the guest's
//! on the issuing vCPU, the VMM's on the VMM thread of the request's queue (main loop,
//! iothread or dom0 vCPU).

pub mod aio;
pub mod ide;
pub mod qemu;

use aio::Engine;
use vmio_core::cpu::hypervisor::USER_EXIT;
use vmio_core::nbd::{self, NbdSpec};
use vmio_core::request::Op;
use vmio_core::stack::DiskSpec;
use vmio_core::stack::Interface;
use vmio_core::units::transfer_ns;
use vmio_core::vdisk::qemu::QemuProfile;
use vmio_core::vdisk::Aio;
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
    /// Requests in flight per tag set: per queue for virtio-blk, per disk otherwise.
    pub queue_depth: u32,
    pub max_request_bytes: u64,
    pub guest_submit_ns: Ns,
    /// The device model's VMM work per request (the engine's is added, [`Engine`]).
    pub vmm_submit_ns: Ns,
    pub vmm_complete_ns: Ns,
    pub guest_complete_ns: Ns,
    /// The NBD path's copies and hand-offs (`interface = "nbd"` only).
    pub nbd: Option<NbdSpec>,
    /// QEMU's I/O engine (QEMU's devices only).
    pub engine: Option<Engine>,
    /// IDE: the cost of one exit to QEMU in user space (`[cpu] user_exit`).
    pub user_exit_ns: Option<Ns>,
    pub num_queues: u32,
    /// VMM threads serving the disk (queue q on lane q mod lanes).
    pub lanes: u32,
    /// Tags per queue (virtio-blk's blk-mq tag set per hardware queue), else per disk.
    pub tags_per_queue: bool,
    /// virtio-blk's multireq merging of one notification's requests.
    pub merge: bool,
    /// `[cpu] model = "cfs"`, an NBD disk with `aio = "threads"`: a pool worker's CPU per
    /// request (`[nbd] pool_cpu`; 0: the request skips the pool, vmio_core::nbd).
    pub pool_cpu_ns: Ns,
}

impl InterfaceModel {
    /// The model of `interface`; `nbd` gives the `[nbd]` costs of an NBD disk (default:
    /// [`NbdSpec::default`]) and is ignored by the others.
    pub fn new(interface: Interface, queue_depth: Option<u32>, nbd: Option<&NbdSpec>) -> Self {
        let qemu = vmio_core::vdisk::qemu::default_profile();
        let user_exit = match USER_EXIT.default {
            vmio_core::params::Value::Int(v) => v,
            _ => 5 * US,
        };
        Self::build(
            interface,
            queue_depth,
            nbd,
            qemu,
            qemu.queue_size,
            Aio::Threads,
            user_exit,
        )
    }

    /// The model of VM disk `d` under QEMU `qemu`, an exit to user space costing `user_exit_ns`.
    pub fn for_disk(
        d: &DiskSpec,
        qemu: &QemuProfile,
        nbd: Option<&NbdSpec>,
        user_exit_ns: Ns,
    ) -> Self {
        let mut m = Self::build(
            d.interface,
            d.queue_depth,
            nbd,
            qemu,
            d.queue.queue_size,
            d.aio,
            user_exit_ns,
        );
        m.num_queues = d.queue.num_queues.max(1);
        m.lanes = d.queue.iothreads.clamp(1, m.num_queues);
        m
    }

    fn build(
        interface: Interface,
        queue_depth: Option<u32>,
        nbd: Option<&NbdSpec>,
        qemu: &QemuProfile,
        queue_size: u32,
        aio: Aio,
        user_exit_ns: Ns,
    ) -> Self {
        let path = (interface == Interface::Nbd).then(|| nbd.cloned().unwrap_or_default());
        let request = path.as_ref().map_or(0, |p| p.request_ns);
        let pool_cpu_ns = match (&path, aio) {
            (Some(p), Aio::Threads) => p.pool_cpu_ns,
            _ => 0,
        };
        let max_q = qemu::max_request_bytes(interface, qemu, queue_size).unwrap_or(0);
        let (ide_g, ide_gc) = (
            ide::guest_submit_ns(Op::Read, 0, 4096, user_exit_ns),
            ide::guest_complete_ns(Op::Read, 0, 4096, user_exit_ns),
        );
        let (qd, max, g, s, c, gc) = match interface {
            Interface::VirtioBlk => (queue_size, max_q, 2 * US, 4 * US, 3 * US, 2 * US),
            Interface::VirtioScsi => (128, max_q, 2 * US, 6 * US, 4 * US, 2 * US),
            Interface::Ide => (1, max_q, ide_g, 18 * US, 14 * US, ide_gc),
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
            engine: matches!(
                interface,
                Interface::VirtioBlk | Interface::VirtioScsi | Interface::Ide
            )
            .then(|| Engine::new(aio, qemu.linux_aio_max_batch)),
            user_exit_ns: (interface == Interface::Ide).then_some(user_exit_ns),
            num_queues: 1,
            lanes: 1,
            tags_per_queue: interface == Interface::VirtioBlk,
            merge: interface == Interface::VirtioBlk,
            pool_cpu_ns,
        }
    }

    /// The device model's VMM work to take a request (the engine's aside); `alone`: the
    /// request is the only one of its disk in flight (an NBD path's depth-1 copy rate).
    pub fn device_submit_ns(&self, op: Op, len_bytes: u64, alone: bool) -> Ns {
        self.vmm_submit_ns + self.copy_ns(op, Op::Write, len_bytes, alone)
    }

    /// The device model's VMM work to complete a request (the engine's aside).
    pub fn device_complete_ns(&self, op: Op, len_bytes: u64, alone: bool) -> Ns {
        self.vmm_complete_ns + self.copy_ns(op, Op::Read, len_bytes, alone)
    }

    /// The guest's submission of one request `[offset, offset + len)` (IDE: by its exits).
    pub fn guest_submit_for(&self, op: Op, offset: u64, len: u64) -> Ns {
        match self.user_exit_ns {
            Some(ue) => ide::guest_submit_ns(op, offset, len, ue),
            None => self.guest_submit_ns,
        }
    }

    /// The guest's handling of one request's interrupt (IDE: by its exits).
    pub fn guest_complete_for(&self, op: Op, offset: u64, len: u64) -> Ns {
        match self.user_exit_ns {
            Some(ue) => ide::guest_complete_ns(op, offset, len, ue),
            None => self.guest_complete_ns,
        }
    }

    /// The path's copy of `len` bytes of `op` in direction `copied` (0 without `[nbd]`), at
    /// the depth-1 rate when `alone` ([`NbdSpec::copy_rate_bps`]).
    fn copy_ns(&self, op: Op, copied: Op, len: u64, alone: bool) -> Ns {
        match &self.nbd {
            Some(p) if op == copied => transfer_ns(len, p.copy_rate_bps(op == Op::Read, alone)),
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
    /// A request alone in its batch, not alone in flight: the device's work and the engine's.
    fn vmm_submit_ns(&self, op: Op, len_bytes: u64) -> Ns {
        self.device_submit_ns(op, len_bytes, false) + self.engine.map_or(0, |e| e.submit_work_ns(0))
    }
    fn vmm_complete_ns(&self, op: Op, len_bytes: u64) -> Ns {
        self.device_complete_ns(op, len_bytes, false) + self.engine.map_or(0, |e| e.complete_ns)
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
    fn the_default_thread_pool_keeps_the_former_virtio_costs() {
        let blk = InterfaceModel::new(Interface::VirtioBlk, None, None);
        assert_eq!(blk.vmm_submit_ns(Op::Read, 4096), 6 * US);
        assert_eq!(blk.vmm_complete_ns(Op::Read, 4096), 4 * US);
        assert_eq!(
            (blk.queue_depth(), blk.max_request_bytes()),
            (256, 1016 << 10)
        );
        let scsi = InterfaceModel::new(Interface::VirtioScsi, None, None);
        assert_eq!(scsi.vmm_submit_ns(Op::Read, 4096), 8 * US);
        assert_eq!(scsi.vmm_complete_ns(Op::Read, 4096), 5 * US);
        let ide = InterfaceModel::new(Interface::Ide, None, None);
        assert_eq!(ide.vmm_submit_ns(Op::Read, 4096), 20 * US);
        assert_eq!(ide.vmm_complete_ns(Op::Read, 4096), 15 * US);
        // IDE's guest side is now counted: 18 exits to issue, 8 to complete, at 5 µs.
        assert_eq!(ide.guest_submit_ns(), 2 * US + 18 * 5 * US);
        assert_eq!(ide.guest_complete_ns(), 2 * US + 8 * 5 * US);
        assert_eq!(
            ide.guest_submit_for(Op::Write, 0, 512 << 10),
            2 * US + 23 * 5 * US
        );
    }

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
            ..NbdSpec::default()
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
