//! Host I/O schedulers: the order in which queued requests go to a device.
//!
//! One file per scheduler, one trait ([`IoScheduler`]), like the kernel's elevators:
//! - [`none`]: blk-mq `none` — first in, first out;
//! - [`mq_deadline`]: `mq-deadline` — sector-sorted batches, per-direction FIFO deadlines,
//!   reads preferred, adjacent requests merged;
//! - [`cfq`]: CFQ as KVM VMs see it — one queue per VM, weighted time slices, idling;
//! - [`mcfq`]: CFQ plus [`mots`], the MCFQ paper's feedback controller of the slices.
//!
//! Each file declares its scheduler once, as a [`SchedulerEntry`] named `ENTRY` (name, help,
//! parameters as [`crate::params::ParamSpec`]s, build function); [`REGISTRY`] lists them. A
//! new scheduler is one file and one line there: the stack parser, its error messages and
//! `vmio help stack` read the list.
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

use crate::params::{self, Entry, Values};
use crate::request::DevIo;
use crate::table::{FieldError, Table};
use crate::Ns;
use serde::Serialize;

/// A registered scheduler: `build` makes it from its parameters' values and the VMs' blkio
/// weights (indexed by owner).
pub type SchedulerEntry = Entry<fn(&Values, &[u32]) -> Box<dyn IoScheduler>>;

/// Every scheduler a stack file's `[scheduler] name` accepts, in the order help lists them.
pub const REGISTRY: &[&SchedulerEntry] =
    &[&none::ENTRY, &mq_deadline::ENTRY, &cfq::ENTRY, &mcfq::ENTRY];

/// The scheduler of a stack file without `[scheduler] name` (Linux's default for SATA disks).
pub const DEFAULT: &str = "mq-deadline";

/// `[scheduler]`: `name` and the parameters the schedulers declare ([`REGISTRY`]).
pub type RawScheduler = std::collections::BTreeMap<String, toml::Value>;

/// The scheduler a stack names, valid by construction: a registered entry and the values of
/// every registered scheduler's parameters (its own as set, the others' at their defaults:
/// result records list them all, `{"name": ..., "read_expire_ns": ..., ...}`).
#[derive(Clone, Debug)]
pub struct SchedulerSpec {
    pub entry: &'static SchedulerEntry,
    pub params: Values,
}

impl SchedulerSpec {
    pub fn name(&self) -> &'static str {
        self.entry.name
    }
}

impl Serialize for SchedulerSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", self.entry.name)?;
        for (spec, v) in self.params.iter() {
            m.serialize_entry(&spec.record_key(), &v)?;
        }
        m.end()
    }
}

/// `[scheduler]`: `name` selects an entry of [`REGISTRY`] ([`DEFAULT`] without it); every
/// other key is a parameter of that entry (one of another entry's is "only valid with").
impl Table for SchedulerSpec {
    const KEY: &'static str = "scheduler";
    type Raw = RawScheduler;
    type Context<'a> = ();

    fn from_raw(s: &RawScheduler, field: &str, _: ()) -> Result<Self, FieldError> {
        let name_field = format!("{field}.name");
        let name = match s.get("name") {
            None => DEFAULT,
            Some(toml::Value::String(n)) => n.as_str(),
            Some(other) => {
                return Err(FieldError::new(
                    name_field,
                    format!(
                        "{other} is not a scheduler name; accepted: {}",
                        params::names(REGISTRY)
                    ),
                ))
            }
        };
        let entry = params::lookup(REGISTRY, name).map_err(|m| FieldError::new(&name_field, m))?;
        let mut values = params::union(REGISTRY);
        params::read_for(&mut values, s, &["name"], entry, REGISTRY, "name")
            .map_err(|e| FieldError::param(field, e))?;
        Ok(SchedulerSpec {
            entry,
            params: values,
        })
    }
}

pub trait IoScheduler: Send {
    fn name(&self) -> &'static str;
    /// Queue a request (it may be merged into a queued one).
    fn insert(&mut self, now: Ns, io: DevIo);
    /// Merge a request into a queued one if the scheduler would on insertion; else hand it
    /// back (the guest's block layer tries a bio's merges before it allocates a request:
    /// block/blk-mq.c `blk_mq_attempt_bio_merge`). Schedulers that never merge need not
    /// override it.
    fn try_merge(&mut self, io: DevIo) -> Result<(), DevIo> {
        Err(io)
    }
    /// Queue a request without trying to merge it (after [`Self::try_merge`]). Schedulers
    /// that never merge need not override it.
    fn insert_unmerged(&mut self, now: Ns, io: DevIo) {
        self.insert(now, io)
    }
    /// The next request for the device, if the scheduler wants to dispatch one now.
    fn dispatch(&mut self, now: Ns) -> Option<DevIo>;
    /// A request arriving while nothing is queued, passed on at once if the scheduler
    /// would dispatch it now: exactly [`Self::insert_unmerged`] then [`Self::dispatch`]
    /// (the default), which a scheduler may do without queueing it, leaving the same state.
    fn pass_alone(&mut self, now: Ns, io: DevIo) -> Option<DevIo> {
        self.insert_unmerged(now, io);
        self.dispatch(now)
    }
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

/// Build the scheduler a stack file names (the spec holds a registered entry and values
/// checked against its parameters); `weights` are the VMs' blkio weights, indexed by owner.
pub fn build(spec: &SchedulerSpec, weights: &[u32]) -> Box<dyn IoScheduler> {
    (spec.entry.build)(&spec.params, weights)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Values;

    #[test]
    fn every_registered_scheduler_builds_from_its_defaults_under_its_own_name() {
        for e in REGISTRY {
            let s = (e.build)(&Values::defaults(e.params), &[500, 250]);
            assert_eq!(s.name(), e.name);
            assert_eq!(s.queued(), 0);
        }
        assert!(REGISTRY.iter().any(|e| e.name == DEFAULT));
    }
}

#[cfg(test)]
mod pass_alone_tests {
    use super::mq_deadline::MqDeadline;
    use super::none::Fifo;
    use super::{io, IoScheduler};
    use crate::request::Op;

    /// Some traffic first (so that the scheduler's direction, batch and starvation count
    /// are not their initial values), drained; then a lone request passed by `pass_alone`
    /// or by insert then dispatch: the scheduler's whole state afterwards.
    fn state_after<S: IoScheduler + std::fmt::Debug>(mut s: S, fast: bool, lone: Op) -> String {
        for (k, (op, off)) in [
            (Op::Write, 64u64),
            (Op::Read, 8),
            (Op::Read, 2),
            (Op::Write, 65),
        ]
        .into_iter()
        .enumerate()
        {
            s.insert(k as u64, io(10 + k as u64, op, off << 20, 4096));
        }
        while s.dispatch(1_000).is_some() {}
        let r = io(1, lone, 1 << 20, 4096);
        let got = if fast {
            s.pass_alone(2_000, r)
        } else {
            s.insert_unmerged(2_000, r);
            s.dispatch(2_000)
        };
        assert_eq!(got.map(|i| i.tag), Some(1));
        format!("{s:?}")
    }

    #[test]
    fn passing_a_lone_request_leaves_none_and_mq_deadline_as_insert_then_dispatch_would() {
        let dl = || MqDeadline::new(500_000_000, 5_000_000_000, 1 << 20);
        for lone in [Op::Read, Op::Write] {
            assert_eq!(
                state_after(Fifo::default(), true, lone),
                state_after(Fifo::default(), false, lone)
            );
            assert_eq!(
                state_after(dl(), true, lone),
                state_after(dl(), false, lone),
                "lone {lone:?}"
            );
            let pos = || dl().tracking_position();
            assert_eq!(
                state_after(pos(), true, lone),
                state_after(pos(), false, lone),
                "lone {lone:?}, tracking the dispatch position"
            );
        }
    }
}
