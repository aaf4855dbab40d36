//! The guest inside the VM: its ext4 filesystem and the JBD2 journal.
//!
//! - [`jbd2`]: the journal as a bookkeeping policy (transactions, commit plans, checkpoints).

pub mod jbd2;
