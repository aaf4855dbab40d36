//! The simulator's events, and the one place that knows how they are packed into the event
//! queue's `u64` payload.
//!
//! ```text
//! payload = kind << 56 | id      kind: 0 JobStart .. 16 EngineStart (declaration order); id < 2^56
//! ```
//!
//! The queue stores the packed `u64` (a `Copy` word keeps its heap small and fast) and orders
//! by (time, push sequence) only, so the payload never decides the order of events.

/// What happens when an event comes due, and to which job, request or device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// A job starts (its phase began).
    JobStart(usize),
    /// The VMM has taken a virtual-disk request: the host side starts it.
    SubmitDone(usize),
    /// A page-cache copy of a request ended.
    HostDone(usize),
    /// The VMM completed a request to the guest.
    GuestDone(usize),
    /// A device model (a hardware, shared by its devices' queues) has completions due.
    DevWake(usize),
    /// A device's scheduler may dispatch again (an idle window or a slice ended).
    SchedWake(usize),
    /// The periodic writeback timer (dirty_writeback_centisecs).
    WbTimer,
    /// A job's runtime is over.
    JobEnd(usize),
    /// The next request of a trace job is due.
    Arrival(usize),
    /// A guest page-cache copy of an application operation ended.
    GuestCopy(usize),
    /// A guest's timer (its page cache's writeback, its journals' commits) of a VM.
    GuestTimer(usize),
    /// The CPU scheduler has completions due (cpu.rs).
    CpuWake,
    /// A periodic CPU source (cpu.rs: a VM's main loop, the host's housekeeping).
    CpuTick(usize),
    /// A format driver's sub-request completed at the host (blocklayer.rs).
    ImageDone(usize),
    /// A throttle group's timer (throttle.rs).
    ThrottleWake(usize),
    /// A wake-up of the host filesystem policy (hostfs.rs: CPU time, a commit timer).
    FsWake(usize),
    /// A host request that waited for its I/O engine (a free worker) starts (guest.rs).
    EngineStart(usize),
}

const ID_BITS: u32 = 56;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

impl Event {
    /// The queue payload of this event.
    #[inline(always)]
    pub(super) fn pack(self) -> u64 {
        let (kind, id) = match self {
            Event::JobStart(i) => (0, i),
            Event::SubmitDone(i) => (1, i),
            Event::HostDone(i) => (2, i),
            Event::GuestDone(i) => (3, i),
            Event::DevWake(i) => (4, i),
            Event::SchedWake(i) => (5, i),
            Event::WbTimer => (6, 0),
            Event::JobEnd(i) => (7, i),
            Event::Arrival(i) => (8, i),
            Event::GuestCopy(i) => (9, i),
            Event::GuestTimer(i) => (10, i),
            Event::CpuWake => (11, 0),
            Event::CpuTick(i) => (12, i),
            Event::ImageDone(i) => (13, i),
            Event::ThrottleWake(i) => (14, i),
            Event::FsWake(i) => (15, i),
            Event::EngineStart(i) => (16, i),
        };
        debug_assert!(
            id as u64 <= ID_MASK,
            "event id {id} does not fit {ID_BITS} bits"
        );
        (kind << ID_BITS) | id as u64
    }

    /// The event of a queue payload made by [`Event::pack`].
    #[inline(always)]
    pub(super) fn unpack(p: u64) -> Event {
        let id = (p & ID_MASK) as usize;
        match p >> ID_BITS {
            0 => Event::JobStart(id),
            1 => Event::SubmitDone(id),
            2 => Event::HostDone(id),
            3 => Event::GuestDone(id),
            4 => Event::DevWake(id),
            5 => Event::SchedWake(id),
            6 => Event::WbTimer,
            7 => Event::JobEnd(id),
            8 => Event::Arrival(id),
            9 => Event::GuestCopy(id),
            10 => Event::GuestTimer(id),
            11 => Event::CpuWake,
            12 => Event::CpuTick(id),
            13 => Event::ImageDone(id),
            14 => Event::ThrottleWake(id),
            15 => Event::FsWake(id),
            16 => Event::EngineStart(id),
            k => unreachable!("event payload {p:#x} of unknown kind {k}: not made by Event::pack"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Event;

    #[test]
    fn every_event_comes_back_unchanged_from_its_payload() {
        let big = (1usize << 56) - 1;
        for id in [0, 1, 7, big] {
            for e in [
                Event::JobStart(id),
                Event::SubmitDone(id),
                Event::HostDone(id),
                Event::GuestDone(id),
                Event::DevWake(id),
                Event::SchedWake(id),
                Event::WbTimer,
                Event::JobEnd(id),
                Event::Arrival(id),
                Event::GuestCopy(id),
                Event::GuestTimer(id),
                Event::CpuWake,
                Event::CpuTick(id),
                Event::ImageDone(id),
                Event::ThrottleWake(id),
                Event::FsWake(id),
                Event::EngineStart(id),
            ] {
                assert_eq!(Event::unpack(e.pack()), e);
            }
        }
    }

    #[test]
    fn events_of_different_kinds_or_ids_pack_to_different_payloads() {
        let a = Event::DevWake(3).pack();
        assert_ne!(a, Event::SchedWake(3).pack());
        assert_ne!(a, Event::DevWake(4).pack());
        assert_eq!(Event::WbTimer.pack(), 6 << 56);
    }
}
