//! The guest layer: the VM's own kernel between its applications and its virtual disks.
pub mod params;
