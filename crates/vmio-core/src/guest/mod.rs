//! The guest layer: the VM's own kernel between its applications and its virtual disks.
//!
//! - [`params`]: the stack keys of the guest (`[vm.page_cache]`, `[vm.disk.filesystem]`).
//! - [`blk`]: the guest's block layer (`[vm.disk.guest_queue]`): plug, merges, limits, scheduler.
//! - [`ext4`]: the filesystem's on-disk layout and block allocation (mke2fs 1.47, Linux 6.x).
//! - [`jbd2`]: the journal as a bookkeeping policy (transactions, commit plans, checkpoints).
//! - [`os`]: the guest kernel of one VM, driving its page cache, filesystems and journals.
pub mod blk;
pub mod ext4;
pub mod jbd2;
pub mod os;
pub mod params;
