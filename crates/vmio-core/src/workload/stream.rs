//! A stream of timed requests as a [`Workload`]: the requests of a trace ([`Replay`]), of a
//! synthetic trace ([`SynthGen`]) or of a FileBench personality ([`FilebenchGen`]), relative
//! to the job's region, placed on the disk at the region's start and paced in one of two ways:
//!
//! - **open loop**: each request at its own time after the job started, whatever is
//!   outstanding (a trace replayed at its timestamps; fio's `read_iolog`);
//! - **closed loop**: times ignored, `depth` requests outstanding (fio's `replay_no_stall`;
//!   FileBench, one request per thread).
//!
//! ```text
//! new:  pending = stream's first request
//! next: no pending                          → Done
//!       open loop and pending not announced → announce it: At(pending.at_ns)
//!       else                                → Step::placed(pending, base); pending = stream's next
//! depth: open loop u32::MAX (nothing limits it), closed loop the given depth
//! ```
//!
//! Every open-loop request is announced by its own `At`, even when its time equals the
//! previous one's: the engine gives each request its own arrival event, as a replayer that
//! waits for each request's time before issuing it.
//!
//! [`Replay`]: super::Replay
//! [`SynthGen`]: super::SynthGen
//! [`FilebenchGen`]: super::FilebenchGen

use super::trace::TimedIo;
use super::{Step, Workload};
use crate::Ns;

/// A source of region-relative timed requests; `None` when it has no more.
pub trait IoStream: Send {
    fn next_io(&mut self) -> Option<TimedIo>;
}

/// How a [`Paced`] stream issues its requests. See the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Each request at its time after the job started, whatever is outstanding.
    Open,
    /// Times ignored; at most `depth` requests outstanding.
    Closed { depth: u32 },
}

/// A stream placed at `base_bytes` of the disk and paced. See the module doc.
#[derive(Clone, Debug)]
pub struct Paced<S> {
    stream: S,
    base_bytes: u64,
    pacing: Pacing,
    pending: Option<TimedIo>,
    announced: bool,
}

impl<S: IoStream> Paced<S> {
    pub fn new(mut stream: S, base_bytes: u64, pacing: Pacing) -> Self {
        let pending = stream.next_io();
        Self {
            stream,
            base_bytes,
            pacing,
            pending,
            announced: false,
        }
    }
}

impl<S: IoStream> Workload for Paced<S> {
    fn next(&mut self, _elapsed_ns: Ns) -> Step {
        let Some(io) = self.pending else {
            return Step::Done;
        };
        if self.pacing == Pacing::Open && !self.announced {
            self.announced = true;
            return Step::At(io.at_ns);
        }
        self.announced = false;
        self.pending = self.stream.next_io();
        Step::placed(io, self.base_bytes)
    }

    fn depth(&self) -> u32 {
        match self.pacing {
            Pacing::Open => u32::MAX,
            Pacing::Closed { depth } => depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Op;
    use crate::workload::trace::tests::io;
    use crate::workload::{SynthGen, SynthProfile};

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_synthetic_profile_replays_open_loop_each_request_at_its_own_time() {
        let region = 64 * MIB;
        let mut reference = SynthGen::profile(SynthProfile::Exchange, region, 3).unwrap();
        let g = SynthGen::profile(SynthProfile::Exchange, region, 3).unwrap();
        let mut w = Paced::new(g, 256 * MIB, Pacing::Open);
        assert_eq!(w.depth(), u32::MAX);
        for _ in 0..2000 {
            let want = reference.next();
            assert_eq!(w.next(0), Step::At(want.at_ns));
            let got = w.next(want.at_ns);
            assert_eq!(got, Step::placed(want, 256 * MIB));
            let Step::Io {
                offset_bytes,
                len_bytes,
                ..
            } = got
            else {
                panic!("a synthetic trace has only reads and writes: {got:?}");
            };
            assert!(offset_bytes >= 256 * MIB && offset_bytes + len_bytes <= 256 * MIB + region);
        }
    }

    #[test]
    fn closed_loop_pacing_ignores_times_and_an_ended_stream_is_done_for_good() {
        struct Two(Vec<TimedIo>);
        impl IoStream for Two {
            fn next_io(&mut self) -> Option<TimedIo> {
                self.0.pop()
            }
        }
        let stream = Two(vec![
            io(7_000, Op::Flush, 0, 0),
            io(5_000, Op::Trim, 0, 512),
        ]);
        let mut w = Paced::new(stream, 4096, Pacing::Closed { depth: 3 });
        assert_eq!(w.depth(), 3);
        let trim = Step::Io {
            op: Op::Trim,
            offset_bytes: 4096,
            len_bytes: 512,
        };
        let steps: Vec<Step> = (0..4).map(|_| w.next(0)).collect();
        assert_eq!(steps, [trim, Step::Flush, Step::Done, Step::Done]);
    }
}
