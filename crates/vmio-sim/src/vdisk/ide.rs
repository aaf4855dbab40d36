//! Emulated IDE (QEMU's PIIX `ide-hd`, Linux's ata_piix on libata-sff) from its register
//! accesses: every port read or write of the guest's driver is an exit to QEMU in user
//! space (`[cpu] user_exit`), so a command's cost is counted, not a constant.
//!
//! ```text
//! issue of a DMA read/write (ata_bmdma_qc_issue), on the issuing vCPU:
//!   ata_dev_select(wait=1): ata_wait_idle (status read), device write,     4
//!                           ata_sff_pause (altstatus read), ata_wait_idle
//!   ata_sff_tf_load:        LBA28: feature, nsect, lbal, lbam, lbah         5
//!                           LBA48: the hob_ five first                     +5
//!                           device write, ata_wait_idle (status read)      2
//!   ata_bmdma_setup:        PRD table address write, DMA command read and  5
//!                           write (direction), sff_exec_command (command
//!                           write, ata_sff_pause altstatus read)
//!   ata_bmdma_start:        DMA command read, write with START             2
//!                                                        DMA issue: 18 (LBA28), 23 (LBA48)
//! interrupt (ata_bmdma_interrupt → ata_bmdma_port_intr), on the issuing vCPU:
//!   ata_bmdma_status (DMA status read)                                     1
//!   ata_bmdma_stop (DMA command read, write, ata_sff_dma_pause altstatus)  3
//!   ata_sff_irq_status (altstatus read, status read: clears INTRQ)         2
//!   ata_bmdma_irq_clear (DMA status read, write back)                      2
//!                                                        DMA interrupt: 8
//! FLUSH CACHE (non-data, ata_sff_qc_issue): dev_select 4, tf_load 2 (device, wait),
//!   exec_command 2 = 8; interrupt: irq_status 2 + irq_clear 2 = 4
//! LBA48 when the request does not fit LBA28: more than 256 sectors or ending beyond 2^28
//!   sectors (ata_build_rw_tf, lba_28_ok)
//! guest_submit    = GUEST_DRIVER + issue exits × user_exit
//! guest_complete  = INTERRUPT + interrupt exits × user_exit
//! ```
//!
//! Sources: Linux drivers/ata/libata-sff.c (`ata_bmdma_qc_issue`, `ata_sff_tf_load`,
//! `ata_dev_select`/`ata_sff_dev_select`, `ata_bmdma_setup`, `ata_bmdma_start`,
//! `ata_bmdma_stop`, `ata_bmdma_port_intr`, `__ata_sff_port_intr`, `ata_sff_irq_status`,
//! `ata_bmdma_irq_clear`), drivers/ata/libata-core.c (`ata_build_rw_tf`, `lba_28_ok`),
//! drivers/ata/ata_piix.c (the bmdma port ops); QEMU hw/ide/core.c (`ide_ioport_write`,
//! `ide_status_read`, `ide_dma_cb`, `ide_set_irq`), hw/ide/pci.c (`bmdma_cmd_writeb`
//! starts and stops the DMA, `bmdma_prepare_buf` reads the PRD table). The emulation of one
//! register is included in `user_exit` (its help: the dispatch under the BQL); the DMA's own
//! emulation (PRD walk, `dma_blk_io`, completion and `ide_set_irq`) is the device's VMM work
//! (vdisk/mod.rs: 18 µs and 14 µs, estimates kept from the former per-command constants).
//! GUEST_DRIVER and INTERRUPT are virtio's figures (the block layer and driver; an injected
//! interrupt with its EOI exit and the handler), estimates.

use vmio_core::request::Op;
use vmio_core::{Ns, US};

/// The guest's block layer and driver work of one command, exits aside (estimate).
pub const GUEST_DRIVER_NS: Ns = 2 * US;
/// An injected interrupt, its EOI exit and the handler, port accesses aside (estimate).
pub const INTERRUPT_NS: Ns = 2 * US;
/// Sectors a command may carry under LBA28, and the LBA28 address space (lba_28_ok).
const LBA28_MAX_SECTORS: u64 = 256;
const LBA28_END: u64 = 1 << 28;

/// The port accesses of one command: (issue, interrupt).
pub fn exits(op: Op, offset: u64, len: u64) -> (u32, u32) {
    match op {
        Op::Flush | Op::Trim => (8, 4),
        Op::Read | Op::Write => {
            let sectors = len.div_ceil(512);
            let lba48 = sectors > LBA28_MAX_SECTORS || offset / 512 + sectors > LBA28_END;
            let dev_select = 4;
            let tf_load = 5 + if lba48 { 5 } else { 0 } + 2;
            let bmdma_setup = 5;
            let bmdma_start = 2;
            (
                dev_select + tf_load + bmdma_setup + bmdma_start,
                1 + 3 + 2 + 2,
            )
        }
    }
}

/// The guest's submission of a command: its driver and its exits.
pub fn guest_submit_ns(op: Op, offset: u64, len: u64, user_exit_ns: Ns) -> Ns {
    GUEST_DRIVER_NS + exits(op, offset, len).0 as Ns * user_exit_ns
}

/// The guest's handling of a command's interrupt.
pub fn guest_complete_ns(op: Op, offset: u64, len: u64, user_exit_ns: Ns) -> Ns {
    INTERRUPT_NS + exits(op, offset, len).1 as Ns * user_exit_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dma_command_costs_18_exits_to_issue_under_lba28_23_under_lba48_and_8_to_complete() {
        assert_eq!(exits(Op::Read, 0, 4096), (18, 8));
        assert_eq!(exits(Op::Write, 0, 128 << 10), (18, 8));
        // 129 KiB: more than 256 sectors.
        assert_eq!(exits(Op::Write, 0, 129 << 10), (23, 8));
        // A 4 KiB read ending beyond 128 GiB.
        assert_eq!(exits(Op::Read, 128 << 30, 4096), (23, 8));
        assert_eq!(exits(Op::Flush, 0, 0), (8, 4));
    }

    #[test]
    fn the_cost_of_a_command_is_its_exits_times_user_exit() {
        let ue = 5 * US;
        assert_eq!(guest_submit_ns(Op::Read, 0, 4096, ue), 2 * US + 18 * ue);
        assert_eq!(guest_complete_ns(Op::Read, 0, 4096, ue), 2 * US + 8 * ue);
        assert_eq!(guest_submit_ns(Op::Read, 0, 512 << 10, 0), 2 * US);
    }
}
