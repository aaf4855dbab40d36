//! Host I/O schedulers: the order in which queued requests go to a device.
//!
//! One file per scheduler, one trait ([`IoScheduler`]), like the kernel's elevators:
//! - [`none`]: blk-mq `none` — first in, first out;
//! - [`mq_deadline`]: `mq-deadline` — sector-sorted batches, per-direction FIFO deadlines,
//!   reads preferred, adjacent requests merged;
//! - [`cfq`]: CFQ as KVM VMs see it — one queue per VM, weighted time slices, idling;
//! - [`mcfq`]: CFQ plus [`mots`], the MCFQ paper's feedback controller of the slices.
//!
//! Flushes do not pass through the scheduler (blk-flush sends them straight to the device).
//! Proportional-share schedulers (CFQ, MCFQ) implement the same trait and may idle:
//! [`IoScheduler::next_wakeup_ns`] tells the engine when to ask again. Engines drive a
//! scheduler through a device's request queue, [`crate::blockq::DeviceQueue`].

pub mod cfq;
pub mod mcfq;
pub mod mots;
pub mod mq_deadline;
pub mod none;

use crate::request::DevIo;
use crate::stack::SchedulerSpec;
use crate::Ns;

pub trait IoScheduler: Send {
    fn name(&self) -> &'static str;
    /// Queue a request (it may be merged into a queued one).
    fn insert(&mut self, now: Ns, io: DevIo);
    /// The next request for the device, if the scheduler wants to dispatch one now.
    fn dispatch(&mut self, now: Ns) -> Option<DevIo>;
    /// A dispatched request completed.
    fn completed(&mut self, _now: Ns, _io: &DevIo) {}
    /// When the scheduler wants `dispatch` called again although nothing else happened
    /// (idling schedulers). `None` for work-conserving ones.
    fn next_wakeup_ns(&self) -> Option<Ns> {
        None
    }
    /// Requests queued (after merging).
    fn queued(&self) -> usize;
}

/// Build the scheduler a stack file names (validated by the stack parser); `weights` are the
/// VMs' blkio weights, indexed by owner.
pub fn build(spec: &SchedulerSpec, weights: &[u32]) -> Box<dyn IoScheduler> {
    let cfq_params = || cfq::CfqParams {
        slice_sync_ns: spec.slice_sync_ns,
        slice_idle_ns: spec.slice_idle_ns,
        quantum: spec.quantum,
        ..cfq::CfqParams::with_weights(weights.to_vec())
    };
    match spec.name.as_str() {
        "mq-deadline" => Box::new(mq_deadline::MqDeadline::new(
            spec.read_expire_ns,
            spec.write_expire_ns,
            spec.max_merge_bytes,
        )),
        "cfq" => Box::new(cfq::Cfq::new(cfq_params())),
        "mcfq" => Box::new(mcfq::Mcfq::new(cfq_params(), spec.bw_window_s)),
        _ => Box::new(none::Fifo::default()),
    }
}

#[cfg(test)]
pub(crate) fn io(tag: u64, op: crate::request::Op, off: u64, len: u64) -> DevIo {
    DevIo {
        tag,
        op,
        offset_bytes: off,
        len_bytes: len,
        fua: false,
        sync: true,
        owner: 0,
        queued_ns: 0,
        merged: Vec::new(),
    }
}
