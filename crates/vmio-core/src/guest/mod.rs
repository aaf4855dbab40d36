//! The guest layer: the VM's own kernel between its applications and its virtual disks.
//!
//! - [`params`]: the stack keys of the guest (`[vm.page_cache]`, `[vm.disk.filesystem]`).
//! - [`jbd2`]: the journal as a bookkeeping policy (transactions, commit plans, checkpoints).
pub mod jbd2;
pub mod params;
