//! The guest's block layer: what a Linux 6.1 guest does with the requests of its page cache,
//! filesystems and `O_DIRECT` programs before they reach its virtual disk — the per-task plug
//! and its merges, the request size limits the virtual device advertises, and the I/O
//! scheduler of each disk (`[vm.disk.guest_queue]`, named after sysfs's
//! `/sys/block/<dev>/queue/`). Pure: no clock; the simulator (vmio-sim `sim/guest.rs`) holds
//! a [`Plug`] and a [`crate::blockq::DeviceQueue`] per hardware queue of each virtual disk and
//! carries the requests out in virtual time.
//!
//! ```toml
//! [[vm.disk]]
//! name = "vdb"
//! [vm.disk.guest_queue]
//! scheduler = "mq-deadline"   # /sys/block/vdb/queue/scheduler: none | mq-deadline
//! nr_requests = 256           # /sys/block/vdb/queue/nr_requests
//! max_sectors_kb = 1280       # /sys/block/vdb/queue/max_sectors_kb
//! nomerges = 0                # /sys/block/vdb/queue/nomerges: 0 | 1 | 2
//! read_expire = "500ms"       # the scheduler's own parameters (mq-deadline: read_expire, write_expire)
//! ```
//!
//! **Limits** (block/blk-settings.c `blk_queue_max_hw_sectors`, `blk_queue_max_segments`;
//! include/linux/blkdev.h `BLK_DEF_MAX_SECTORS` = 2560 sectors in 6.1, renamed
//! `BLK_DEF_MAX_SECTORS_CAP` in 6.7 with the same value): `max_sectors_kb` defaults to
//! min(`max_hw_sectors_kb`, 1280). virtio-blk (drivers/block/virtio_blk.c `virtblk_probe`)
//! sets `max_hw_sectors` to -1U (no device limit), `max_segments` = the device's `seg_max` and
//! `max_segment_size` = `size_max`; virtio-scsi the device's `max_sectors` (QEMU: 0xFFFF) and
//! `seg_max`; ata_piix 128 PRD entries (`LIBATA_MAX_PRD`). A guest's buffers are pages that
//! are not physically contiguous, so a segment is a page and `max_segments` bounds a request
//! at `max_segments` × 4 KiB: the device side is vmio-sim's `vdisk::qemu::max_request_bytes`
//! (virtio: `seg_max` × 4 KiB = 1016 KiB on QEMU >= 5.0; IDE 512 KiB). A request is at most
//! [`max_request_bytes`] = min(`max_sectors_kb` KiB, that); a larger bio is split there
//! (block/blk-merge.c `bio_split_to_limits`) and no merge makes a request larger.
//!
//! **Plug** (block/blk-core.c `blk_start_plug`/`blk_finish_plug`, block/blk-mq.c
//! `blk_mq_submit_bio`, `blk_add_rq_to_plug`, `blk_mq_flush_plug_list`,
//! block/blk-merge.c `blk_attempt_plug_merge`, `blk_rq_merge_ok`, `blk_try_merge`; Linux
//! 6.1). A batch of submissions (one call of the guest policy: a writeback pass, a read-ahead,
//! a JBD2 commit's log writes; one io_submit of more than two requests, fs/aio.c
//! `AIO_PLUG_THRESHOLD`) is one plug:
//!
//! ```text
//! add(bio):                                           # blk_mq_submit_bio, plug held
//!     last = the plug's most recent request            # rq_list_peek: 6.1 checks only it
//!     if nomerges < 2 and bio mergeable with last      # same op, no FLUSH/FUA, adjacent
//!        and last.len + bio.len <= max_request_bytes:  # ll_back/front_merge_fn limits
//!         back merge (last ends at bio) or front merge (bio ends at last): merged, done
//!     if requests == BLK_MAX_REQUEST_COUNT (32)         # blk_plug_max_rq_count
//!        or (nomerges < 2 and last.len >= BLK_PLUG_FLUSH_SIZE (128 KiB)):
//!         flush the plug first
//!     push bio as a new request                         # rq_list_add: at the list's head
//! flush (blk_finish_plug, a FLUSH or the task sleeping):
//!     no elevator: the list from its head, i.e. the newest request first
//!        (blk_mq_plug_issue_direct / the driver's queue_rqs pop rq_list: 6.1 reverses the
//!        submission order; 6.13's "block: don't reorder requests in blk_add_rq_to_plug"
//!        ended that)
//!     an elevator: in submission order (blk_mq_dispatch_plug_list rebuilds the list
//!        with list_add), into the scheduler, which may merge them into queued requests
//! ```
//!
//! So a JBD2 commit whose log wraps the journal's end (fs/jbd2/commit.c writes descriptor
//! and logged blocks in log order, `jbd2_journal_next_log_block` wrapping from `j_last` to
//! `j_first`, all under one plug) reaches a 6.1 guest's virtio-blk disk with `none` as two
//! requests, the piece at the journal's start first, then the piece up to its end — unless
//! the first piece reached 128 KiB, which flushes the plug before the second is added. The
//! JBD2 policy ([`super::jbd2`]) keeps the log order (as jbd2 submits it); the order the disk
//! sees is the plug's.
//!
//! Without a plug (a direct-I/O job submitting one request at a time: fio's
//! `iodepth_batch_submit` = 1 and io_submit of at most two), each request goes to the queue
//! as it comes: `none` issues it (blk_mq_try_issue_directly) and with an elevator it is
//! inserted there (where mq-deadline may merge it: `dd_bio_merge`, `dd_request_merge`).
//! `none` never merges outside the plug: blk-mq without an elevator only merges a bio into a
//! request still on the software queue (`blk_bio_list_merge` from `blk_mq_sched_bio_merge`),
//! where a request sits only while the hardware queue is stopped or busy — not modelled
//! (a request waiting for a driver tag with `none` waits before it exists, in
//! `blk_mq_get_tag`, and is not mergeable).
//!
//! **Scheduler and depth** (block/elevator.c `elevator_get_default`, block/blk-mq-sched.c
//! `blk_mq_init_sched`): a disk with one hardware queue gets `mq-deadline`, one with several
//! (and no shared tags) `none`; so virtio-blk with `num_queues` > 1 has `none`, a one-queue
//! virtio-blk or an IDE disk `mq-deadline`. With an elevator `nr_requests` =
//! 2 × min(queue depth, `BLKDEV_DEFAULT_RQ` = 128): 256 at virtio's 256 tags, 2 at IDE's 1;
//! without one it is the tag set's depth. A request holds its scheduler tag from its
//! allocation to its completion: at most `nr_requests` are queued or in flight per hardware
//! queue; beyond that the submitter waits (FIFO) before its request exists. Under `none`
//! `nr_requests` is the driver tag depth (blk_mq_update_nr_requests resizes the hardware
//! queue's tags), at most the device's queue depth. The guest's schedulers are the blk-mq
//! ones vmio has, `none` and `mq-deadline`; `bfq` and `kyber` are not modelled, and `cfq`
//! (and vmio's `mcfq` built on it) left Linux with the legacy block layer in 5.0.
//!
//! `nomerges` (Documentation/ABI/stable/sysfs-block): 0 all merges, 1 the simple one-hit
//! merges only (here: the plug's, no lookups in the scheduler; the elevator's one-hit
//! `last_merge` cache is not modelled), 2 none.
//!
//! Simplifications: one plug per disk (Linux's plug is per task across queues; its request
//! count limit is per plug); one scheduler instance per hardware queue (mq-deadline is one
//! per request queue in Linux: it differs only with several hardware queues, whose default
//! is `none`).

use crate::blockq::DeviceQueue;
use crate::params::{Kind, ParamError, ParamSpec, Value, Values};
use crate::request::{DevIo, Op};
use crate::sched::mq_deadline::{self, MqDeadline};
use crate::sched::none::{self, Fifo};
use crate::sched::{self, IoScheduler, SchedulerSpec};
use crate::table::{FieldError, Table};
use crate::Ns;
use std::collections::{BTreeMap, VecDeque};

/// block/blk-mq.c `BLK_PLUG_FLUSH_SIZE`: a plug is flushed before a request is added after
/// one of this size.
pub const BLK_PLUG_FLUSH_SIZE: u64 = 128 << 10;
/// include/linux/blkdev.h `BLK_MAX_REQUEST_COUNT`: requests a plug holds.
pub const BLK_MAX_REQUEST_COUNT: usize = 32;
/// include/linux/blkdev.h `BLKDEV_DEFAULT_RQ`.
pub const BLKDEV_DEFAULT_RQ: u32 = 128;
/// `BLK_DEF_MAX_SECTORS` (2560 sectors) in KiB: `max_sectors_kb`'s default.
pub const MAX_SECTORS_KB: u64 = 1280;

/// The schedulers a guest disk accepts: the blk-mq ones vmio has (a test keeps them in the
/// host's registry). CFQ left Linux with the legacy block layer in 5.0 (a 6.1 guest cannot
/// have it) and mcfq is a host scheduler; bfq and kyber are not modelled.
pub const SCHEDULERS: &[&str] = &["none", "mq-deadline"];

pub const SCHEDULER: ParamSpec = ParamSpec {
    name: "scheduler",
    kind: Kind::Choice(SCHEDULERS),
    default: Value::Computed("mq-deadline with one hardware queue, else none (elevator_get_default)"),
    unit: "",
    help: "the guest's I/O scheduler of the disk (/sys/block/vdX/queue/scheduler; bfq and kyber are not modelled); its parameters (mq-deadline: read_expire, write_expire) go in the same table",
};
pub const NR_REQUESTS: ParamSpec = ParamSpec {
    name: "nr_requests",
    kind: Kind::Count { min: 1, max: 65536 },
    default: Value::Computed("2 x min(queue depth, 128) with a scheduler, else the queue depth"),
    unit: "",
    help: "requests allocated per hardware queue, queued or in flight (/sys/block/vdX/queue/nr_requests); without a scheduler the driver tags, at most the queue depth",
};
pub const MAX_SECTORS: ParamSpec = ParamSpec {
    name: "max_sectors_kb",
    kind: Kind::Count {
        min: 4,
        max: 1 << 21,
    },
    default: Value::Int(MAX_SECTORS_KB),
    unit: "KiB",
    help: "largest request the guest builds (/sys/block/vdX/queue/max_sectors_kb, BLK_DEF_MAX_SECTORS); requests are also bounded by the device's segments (seg_max x 4 KiB)",
};
pub const NOMERGES: ParamSpec = ParamSpec {
    name: "nomerges",
    kind: Kind::Count { min: 0, max: 2 },
    default: Value::Int(0),
    unit: "",
    help: "/sys/block/vdX/queue/nomerges: 0 every merge, 1 the plug's only, 2 none",
};

/// The `[vm.disk.guest_queue]` keys of the block layer (the scheduler's own follow them).
pub const PARAMS: &[ParamSpec] = &[SCHEDULER, NR_REQUESTS, MAX_SECTORS, NOMERGES];

/// The scheduler parameter the block layer sets itself (from [`max_request_bytes`]).
const SCHED_SET_BY_LIMITS: &str = "max_merge";

/// `[vm.disk.guest_queue]` as written (defaults resolved against the disk by
/// [`GuestQueueSpec::resolve`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GuestQueueSpec {
    /// None: [`default_scheduler`].
    pub scheduler: Option<&'static str>,
    /// The scheduler's own parameters (`read_expire`, ...) as written.
    #[serde(skip)]
    pub sched_params: BTreeMap<String, toml::Value>,
    pub nr_requests: Option<u32>,
    pub max_sectors_kb: u64,
    pub nomerges: u8,
}

impl Default for GuestQueueSpec {
    fn default() -> Self {
        GuestQueueSpec {
            scheduler: None,
            sched_params: BTreeMap::new(),
            nr_requests: None,
            max_sectors_kb: MAX_SECTORS_KB,
            nomerges: 0,
        }
    }
}

/// A disk's guest queue with every default resolved.
#[derive(Clone, Debug)]
pub struct GuestQueue {
    pub scheduler: SchedulerSpec,
    /// Requests queued or in flight per hardware queue.
    pub nr_requests: u32,
    /// Requests in flight per hardware queue (driver tags).
    pub depth: u32,
    /// Largest request ([`max_request_bytes`]).
    pub max_bytes: u64,
    pub nomerges: u8,
}

impl GuestQueue {
    /// The scheduler is `none`: no elevator.
    pub fn no_elevator(&self) -> bool {
        self.scheduler.entry.name == "none"
    }
}

/// elevator_get_default: `mq-deadline` for a single hardware queue, else `none`.
pub fn default_scheduler(hw_queues: u32) -> &'static str {
    if hw_queues <= 1 {
        "mq-deadline"
    } else {
        "none"
    }
}

/// The largest request: min(`max_sectors_kb`, the device's segments × 4 KiB).
pub fn max_request_bytes(max_sectors_kb: u64, device_max_bytes: u64) -> u64 {
    (max_sectors_kb << 10).min(device_max_bytes).max(4096)
}

impl GuestQueueSpec {
    /// The queue of a disk with `hw_queues` hardware queues of `queue_depth` tags each whose
    /// device accepts requests up to `device_max_bytes`; the error names `field`'s key.
    pub fn resolve(
        &self,
        field: &str,
        hw_queues: u32,
        queue_depth: u32,
        device_max_bytes: u64,
    ) -> Result<GuestQueue, FieldError> {
        let name = self.scheduler.unwrap_or(default_scheduler(hw_queues));
        let max_bytes = max_request_bytes(self.max_sectors_kb, device_max_bytes);
        let mut raw = self.sched_params.clone();
        raw.insert("name".into(), toml::Value::String(name.into()));
        let mut spec = SchedulerSpec::from_raw(&raw, field, ())?;
        // The block layer's limit is the scheduler's merge limit (0: no scheduler merges).
        let merge = if self.nomerges == 0 { max_bytes } else { 0 };
        let mut set = BTreeMap::new();
        if spec.params.names().contains(&SCHED_SET_BY_LIMITS) {
            set.insert(
                SCHED_SET_BY_LIMITS.to_string(),
                toml::Value::Integer(merge as i64),
            );
            spec.params
                .read(&set, &[])
                .map_err(|e| FieldError::param(field, e))?;
        }
        let depth = queue_depth.max(1);
        let elevator = name != "none";
        let nr = self.nr_requests.unwrap_or(if elevator {
            2 * depth.min(BLKDEV_DEFAULT_RQ)
        } else {
            depth
        });
        Ok(GuestQueue {
            scheduler: spec,
            nr_requests: if elevator { nr } else { nr.min(depth) },
            depth: if elevator { depth } else { nr.min(depth) },
            max_bytes,
            nomerges: self.nomerges,
        })
    }
}

/// `[vm.disk.guest_queue]` at `field`: [`PARAMS`] and the parameters of the scheduler it
/// names (checked when the disk is resolved, [`GuestQueueSpec::resolve`]).
impl Table for GuestQueueSpec {
    const KEY: &'static str = "guest_queue";
    type Raw = BTreeMap<String, toml::Value>;
    type Context<'a> = ();

    fn from_raw(t: &Self::Raw, field: &str, _: ()) -> Result<Self, FieldError> {
        let mut own = BTreeMap::new();
        let mut rest = BTreeMap::new();
        for (k, v) in t {
            if PARAMS.iter().any(|p| p.name == k) {
                own.insert(k.clone(), v.clone());
            } else if k == SCHED_SET_BY_LIMITS || k == "name" {
                return Err(FieldError::param(
                    field,
                    ParamError::Unknown {
                        key: k.clone(),
                        accepted: accepted_keys(),
                    },
                ));
            } else {
                rest.insert(k.clone(), v.clone());
            }
        }
        let mut v = Values::defaults(PARAMS);
        v.read(&own, &[]).map_err(|e| FieldError::param(field, e))?;
        let scheduler = match v.iter().find(|(s, _)| s.name == SCHEDULER.name) {
            Some((_, Value::Choice(c))) => Some(c),
            _ => None,
        };
        let nr_requests = match v.iter().find(|(s, _)| s.name == NR_REQUESTS.name) {
            Some((_, Value::Int(n))) => Some(n as u32),
            _ => None,
        };
        let spec = GuestQueueSpec {
            scheduler,
            sched_params: rest,
            nr_requests,
            max_sectors_kb: v.int(MAX_SECTORS.name),
            nomerges: v.int(NOMERGES.name) as u8,
        };
        // The scheduler's parameters are checked now against the scheduler named (or, when
        // none is named, against every scheduler's).
        let mut raw = spec.sched_params.clone();
        if let Some(s) = scheduler {
            raw.insert("name".into(), toml::Value::String(s.into()));
            SchedulerSpec::from_raw(&raw, field, ())?;
        } else if !raw.is_empty() {
            let guest: Vec<&'static sched::SchedulerEntry> = sched::REGISTRY
                .iter()
                .copied()
                .filter(|e| SCHEDULERS.contains(&e.name))
                .collect();
            let mut all = crate::params::union(&guest);
            all.read(&raw, &[]).map_err(|e| match e {
                ParamError::Unknown { key, .. } => FieldError::param(
                    field,
                    ParamError::Unknown {
                        key,
                        accepted: accepted_keys(),
                    },
                ),
                other => FieldError::param(field, other),
            })?;
        }
        Ok(spec)
    }
}

/// Every key `[vm.disk.guest_queue]` accepts, for error lines.
fn accepted_keys() -> String {
    let mut names: Vec<&str> = PARAMS.iter().map(|p| p.name).collect();
    for e in sched::REGISTRY
        .iter()
        .filter(|e| SCHEDULERS.contains(&e.name))
    {
        for p in e.params {
            if p.name != SCHED_SET_BY_LIMITS && !names.contains(&p.name) {
                names.push(p.name);
            }
        }
    }
    names.join(", ")
}

/// A request (or bio) `b` may join request `r` (blk_rq_merge_ok): same direction, a read or
/// write, neither FUA (REQ_NOMERGE_FLAGS), the same hardware queue; and adjacent:
/// `Some(true)` a back merge (r ends where b starts), `Some(false)` a front merge.
fn mergeable(r: &DevIo, b: &DevIo, max_bytes: u64) -> Option<bool> {
    if r.op != b.op
        || !matches!(r.op, Op::Read | Op::Write)
        || r.fua
        || b.fua
        || r.owner != b.owner
        || r.len_bytes + b.len_bytes > max_bytes
    {
        return None;
    }
    if r.end_bytes() == b.offset_bytes {
        Some(true)
    } else if b.end_bytes() == r.offset_bytes {
        Some(false)
    } else {
        None
    }
}

/// Merge bio `b` into request `r` (back or front, [`mergeable`]'s answer): `r` keeps its
/// tag; `b`'s tags join `r.merged`.
fn merge_into(r: &mut DevIo, b: DevIo, back: bool) {
    if !back {
        r.offset_bytes = b.offset_bytes;
    }
    r.len_bytes += b.len_bytes;
    r.sync |= b.sync;
    r.queued_ns = r.queued_ns.min(b.queued_ns);
    r.merged.push(b.tag);
    r.merged.extend(b.merged);
}

/// A task's plug on one disk (module doc): requests in submission order.
#[derive(Default)]
pub struct Plug {
    rqs: Vec<DevIo>,
}

impl Plug {
    /// Requests held.
    pub fn len(&self) -> usize {
        self.rqs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rqs.is_empty()
    }

    /// Add bio `io` under queue `q`: true when it merged into the plug's newest request; a
    /// flush the addition forces first appends the plug's requests to `out` in dispatch
    /// order ([`Plug::flush`]).
    pub fn add(&mut self, q: &GuestQueue, io: DevIo, out: &mut Vec<DevIo>) -> bool {
        let n = self.rqs.len();
        if let Some(last) = self.rqs.last_mut() {
            if q.nomerges < 2 {
                if let Some(back) = mergeable(last, &io, q.max_bytes) {
                    merge_into(last, io, back);
                    return true;
                }
            }
            if n >= BLK_MAX_REQUEST_COUNT
                || (q.nomerges < 2 && last.len_bytes >= BLK_PLUG_FLUSH_SIZE)
            {
                self.flush(q, out);
            }
        }
        self.rqs.push(io);
        false
    }

    /// Flush the plug: its requests appended to `out` in the order 6.1 dispatches them
    /// (newest first without an elevator, submission order into one).
    pub fn flush(&mut self, q: &GuestQueue, out: &mut Vec<DevIo>) {
        if q.no_elevator() {
            out.extend(self.rqs.drain(..).rev());
        } else {
            out.append(&mut self.rqs);
        }
    }
}

/// A guest disk's scheduler: the guest's schedulers ([`SCHEDULERS`]) matched, not called
/// through a trait object (several calls per request on the simulator's hot path); any
/// other registered scheduler boxed. The same schedulers as the host's, the same behaviour.
// One per hardware queue, boxed by its DeviceQueue: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Elevator {
    None(Fifo),
    MqDeadline(MqDeadline),
    Other(Box<dyn IoScheduler>),
}

impl Elevator {
    /// The scheduler `spec` names, as [`sched::build`] makes it (mq-deadline's parameters
    /// read as its `build` reads them).
    pub fn build(spec: &SchedulerSpec) -> Self {
        let name = spec.entry.name;
        if name == none::ENTRY.name {
            Elevator::None(Fifo::default())
        } else if name == mq_deadline::ENTRY.name {
            let p = &spec.params;
            Elevator::MqDeadline(MqDeadline::new(
                p.int("read_expire"),
                p.int("write_expire"),
                p.int("max_merge"),
            ))
        } else {
            Elevator::Other(sched::build(spec, &[]))
        }
    }
}

/// Each call matched to the scheduler's own method.
macro_rules! elevator_call {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Elevator::None($s) => $e,
            Elevator::MqDeadline($s) => $e,
            Elevator::Other($s) => $e,
        }
    };
}

impl IoScheduler for Elevator {
    fn name(&self) -> &'static str {
        elevator_call!(self, s => s.name())
    }
    #[inline]
    fn insert(&mut self, now: Ns, io: DevIo) {
        elevator_call!(self, s => s.insert(now, io))
    }
    #[inline]
    fn try_merge(&mut self, io: DevIo) -> Result<(), DevIo> {
        elevator_call!(self, s => s.try_merge(io))
    }
    #[inline]
    fn insert_unmerged(&mut self, now: Ns, io: DevIo) {
        elevator_call!(self, s => s.insert_unmerged(now, io))
    }
    #[inline]
    fn dispatch(&mut self, now: Ns) -> Option<DevIo> {
        elevator_call!(self, s => s.dispatch(now))
    }
    #[inline]
    fn pass_alone(&mut self, now: Ns, io: DevIo) -> Option<DevIo> {
        elevator_call!(self, s => s.pass_alone(now, io))
    }
    #[inline]
    fn completed(&mut self, now: Ns, io: &DevIo) {
        elevator_call!(self, s => s.completed(now, io))
    }
    #[inline]
    fn next_wakeup_ns(&self) -> Option<Ns> {
        elevator_call!(self, s => s.next_wakeup_ns())
    }
    #[inline]
    fn queued(&self) -> usize {
        elevator_call!(self, s => s.queued())
    }
}

/// What became of a request given to a [`HwQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Merged into a queued request (a bio merge: diskstats' rd_merges / wr_merges).
    Merged,
    /// A request of its own, queued (it holds one of the `nr_requests`).
    Queued,
    /// `nr_requests` are allocated: its submitter waits for one (FIFO), unmergeable.
    Waiting,
    /// Nothing was queued and a driver tag was free: it started at once, in this slot
    /// ([`HwQueue::issue`]; as queued then dispatched).
    Started(usize),
}

/// One hardware queue of a guest disk (module doc): its scheduler and driver tags (a
/// [`DeviceQueue`]), the requests allocated (queued or in flight, at most `nr_requests`) and
/// the submitters waiting for one.
///
/// ```text
/// insert(io):   the scheduler merges it into a queued request: Merged   (the bio merge
///               comes before the request's allocation: blk_mq_attempt_bio_merge)
///               allocated == nr_requests or someone waits → waiting.push(io): Waiting
///               else allocated += 1, DeviceQueue::insert_unmerged: Queued
/// dispatch:     DeviceQueue::dispatch (driver tags: depth)
/// issue(io):    nothing queued, a request and a driver tag free → allocated += 1,
///               DeviceQueue::start_if_idle: Started(slot) (no merge candidate: the same as
///               insert then dispatch); else insert(io)
/// complete(slot): DeviceQueue::complete; allocated -= 1; while allocated < nr_requests:
///               a waiter's request enters, unmerged (blk-mq tried its merges before the wait)
/// ```
pub struct HwQueue {
    dq: DeviceQueue<Elevator>,
    nr_requests: u32,
    allocated: u32,
    waiting: VecDeque<DevIo>,
}

impl HwQueue {
    pub fn new(q: &GuestQueue) -> Self {
        HwQueue {
            dq: DeviceQueue::new(Box::new(Elevator::build(&q.scheduler)), q.depth as usize),
            nr_requests: q.nr_requests.max(1),
            allocated: 0,
            waiting: VecDeque::new(),
        }
    }

    /// [`Self::insert`], and the request started at once when nothing is queued before it
    /// and a request and a driver tag are free ([`Inserted::Started`]; the caller's
    /// dispatch would start it and nothing else).
    #[inline]
    pub fn issue(&mut self, now: Ns, io: DevIo) -> Inserted {
        if self.allocated < self.nr_requests && self.waiting.is_empty() {
            match self.dq.start_if_idle(now, io) {
                Ok(started) => {
                    self.allocated += 1;
                    return started.map_or(Inserted::Queued, Inserted::Started);
                }
                Err(io) => return self.insert(now, io),
            }
        }
        self.insert(now, io)
    }

    #[inline]
    pub fn insert(&mut self, now: Ns, io: DevIo) -> Inserted {
        if self.dq.queued() == 0 {
            // Nothing queued to merge with (flushes never merge).
            return self.admit(now, io);
        }
        let io = match self.dq.try_merge(io) {
            Ok(()) => return Inserted::Merged,
            Err(io) => io,
        };
        self.admit(now, io)
    }

    /// A request of its own for `io` (its merges tried), or its submitter waits.
    #[inline]
    fn admit(&mut self, now: Ns, io: DevIo) -> Inserted {
        if self.allocated >= self.nr_requests || !self.waiting.is_empty() {
            self.waiting.push_back(io);
            return Inserted::Waiting;
        }
        self.allocated += 1;
        self.dq.insert_unmerged(now, io);
        Inserted::Queued
    }

    /// Start requests while driver tags are free: `start(slot, io)` for each.
    #[inline]
    pub fn dispatch(&mut self, now: Ns, start: impl FnMut(usize, &DevIo)) {
        self.dq.dispatch(now, start)
    }

    /// The request in `slot` completed: its tag and request are free, a waiter enters.
    #[inline]
    pub fn complete(&mut self, now: Ns, slot: usize) -> DevIo {
        let io = self.dq.complete(now, slot);
        self.allocated -= 1;
        while self.allocated < self.nr_requests {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            self.allocated += 1;
            self.dq.insert_unmerged(now, w);
        }
        io
    }

    /// Requests queued and not yet started (a dispatch may start some).
    #[inline]
    pub fn queued(&self) -> usize {
        self.dq.queued()
    }

    /// Requests allocated (queued in the scheduler or in flight).
    pub fn allocated(&self) -> u32 {
        self.allocated
    }
    /// Requests in flight on the device.
    pub fn in_flight(&self) -> usize {
        self.dq.in_flight()
    }
    /// Submitters waiting for a request.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(sched: &str, hw: u32, max_sectors_kb: u64) -> GuestQueue {
        let spec = GuestQueueSpec {
            scheduler: Some(SCHEDULERS.iter().copied().find(|s| *s == sched).unwrap()),
            max_sectors_kb,
            ..Default::default()
        };
        spec.resolve("d", hw, 256, 1016 << 10).unwrap()
    }

    fn w(tag: u64, off: u64, len: u64) -> DevIo {
        crate::sched::io(tag, Op::Write, off, len)
    }

    /// Plug every bio, flush at the end: the requests in dispatch order.
    fn plugged(q: &GuestQueue, bios: impl IntoIterator<Item = DevIo>) -> Vec<DevIo> {
        let mut plug = Plug::default();
        let mut out = Vec::new();
        for b in bios {
            plug.add(q, b, &mut out);
        }
        plug.flush(q, &mut out);
        out
    }

    #[test]
    fn the_guest_schedulers_are_the_registered_ones() {
        let names: Vec<&str> = sched::REGISTRY.iter().map(|e| e.name).collect();
        assert!(SCHEDULERS.iter().all(|s| names.contains(s)), "{names:?}");
    }

    #[test]
    fn a_plugged_batch_of_adjacent_4k_writes_becomes_requests_of_max_sectors_kb() {
        for (n, kb) in [
            (1u64, 1280),
            (32, 1280),
            (100, 64),
            (300, 128),
            (257, 4),
            (64, 12),
        ] {
            for sched in ["none", "mq-deadline"] {
                let q = queue(sched, 1, kb);
                let out = plugged(&q, (0..n).map(|i| w(i, i * 4096, 4096)));
                let expect = (n * 4096).div_ceil(kb << 10);
                assert_eq!(out.len() as u64, expect, "{n} x 4k, {kb} KiB, {sched}");
                let tags: usize = out.iter().map(|r| r.tags().count()).sum();
                assert_eq!(tags as u64, n);
                assert!(out.iter().all(|r| r.len_bytes <= kb << 10));
            }
        }
    }

    #[test]
    fn the_device_segments_bound_a_request_below_max_sectors_kb() {
        // virtio-blk on QEMU >= 5.0: 254 segments of a page, 1016 KiB < 1280 KiB.
        let q = queue("none", 1, 1280);
        assert_eq!(q.max_bytes, 1016 << 10);
        let out = plugged(&q, (0..512).map(|i| w(i, i * 4096, 4096)));
        assert_eq!(out.len(), 3); // 2 MiB in 1016 KiB requests
    }

    #[test]
    fn a_front_merge_joins_a_bio_that_ends_where_the_newest_request_starts() {
        let q = queue("none", 1, 1280);
        let out = plugged(&q, [w(1, 8192, 4096), w(2, 4096, 4096), w(3, 0, 4096)]);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].offset_bytes, out[0].len_bytes), (0, 12288));
    }

    #[test]
    fn nothing_merges_across_a_flush_or_fua_or_with_nomerges_2() {
        let q = queue("none", 1, 1280);
        let mut f = w(2, 0, 0);
        f.op = Op::Flush;
        let out = plugged(&q, [w(1, 0, 4096), f, w(3, 4096, 4096)]);
        assert_eq!(out.len(), 3);
        let mut fua = w(2, 4096, 4096);
        fua.fua = true;
        assert_eq!(plugged(&q, [w(1, 0, 4096), fua]).len(), 2);
        let mut spec = GuestQueueSpec {
            nomerges: 2,
            ..Default::default()
        };
        let q2 = spec.resolve("d", 4, 256, 1 << 30).unwrap();
        assert_eq!(plugged(&q2, (0..8).map(|i| w(i, i * 4096, 4096))).len(), 8);
        spec.nomerges = 1;
        let q1 = spec.resolve("d", 4, 256, 1 << 30).unwrap();
        assert_eq!(plugged(&q1, (0..8).map(|i| w(i, i * 4096, 4096))).len(), 1);
    }

    #[test]
    fn a_plug_holds_32_requests_and_flushes_after_a_request_of_128k() {
        let q = queue("none", 1, 1280);
        let mut plug = Plug::default();
        let mut out = Vec::new();
        for i in 0..33u64 {
            plug.add(&q, w(i, i << 20, 4096), &mut out);
        }
        assert_eq!((out.len(), plug.len()), (32, 1));
        let mut plug = Plug::default();
        out.clear();
        plug.add(&q, w(1, 0, 128 << 10), &mut out);
        plug.add(&q, w(2, 1 << 30, 4096), &mut out);
        assert_eq!((out.len(), plug.len()), (1, 1));
    }

    #[test]
    fn a_jbd2_commit_that_wraps_reaches_a_61_guests_disk_start_piece_first() {
        // The log in log order (jbd2's submission): 13 blocks up to the journal's end, then
        // 3 from its start, one plug. Without an elevator 6.1 pops the plug's list from its
        // head: the newest request, the journal's start, goes first.
        let (start, end) = (1u64 << 30, (1u64 << 30) + (1024 << 12));
        let log = [
            w(1, end - 13 * 4096, 13 * 4096),
            w(2, start + 4096, 3 * 4096),
        ];
        let order: Vec<u64> = plugged(&queue("none", 4, 1280), log.clone())
            .iter()
            .map(|r| r.tag)
            .collect();
        assert_eq!(order, [2, 1]);
        // With mq-deadline the plug hands them over in log order (the elevator sorts).
        let order: Vec<u64> = plugged(&queue("mq-deadline", 1, 1280), log)
            .iter()
            .map(|r| r.tag)
            .collect();
        assert_eq!(order, [1, 2]);
        // A first piece of 128 KiB or more flushes the plug before the second is added.
        let log = [w(1, end - (32 << 12), 32 << 12), w(2, start + 4096, 4096)];
        let order: Vec<u64> = plugged(&queue("none", 4, 1280), log)
            .iter()
            .map(|r| r.tag)
            .collect();
        assert_eq!(order, [1, 2]);
    }

    #[test]
    fn nr_requests_bounds_the_requests_queued_or_in_flight_and_the_rest_wait() {
        let spec = GuestQueueSpec {
            scheduler: Some("mq-deadline"),
            nr_requests: Some(4),
            ..Default::default()
        };
        let q = spec.resolve("d", 1, 1, 1 << 20).unwrap();
        let mut hq = HwQueue::new(&q);
        // Ten random (non-adjacent) reads on a device of one tag.
        let r = |t: u64| crate::sched::io(t, Op::Read, t << 30, 4096);
        let got: Vec<Inserted> = (0..10).map(|t| hq.insert(0, r(t))).collect();
        assert_eq!(&got[..4], [Inserted::Queued; 4]);
        assert_eq!(&got[4..], [Inserted::Waiting; 6]);
        let mut slots = Vec::new();
        hq.dispatch(0, |s, _| slots.push(s));
        assert_eq!((slots.len(), hq.allocated(), hq.waiting()), (1, 4, 6));
        // A completion lets one waiter in: still 4 allocated.
        hq.complete(1, slots[0]);
        assert_eq!((hq.allocated(), hq.waiting(), hq.in_flight()), (4, 5, 0));
        // A bio adjacent to a queued request merges even with every request allocated (the
        // merge comes before the allocation); one that is not waits.
        let mut hq = HwQueue::new(&q);
        for t in 0..4 {
            assert_eq!(hq.insert(0, r(t)), Inserted::Queued);
        }
        let next = crate::sched::io(9, Op::Read, (3 << 30) + 4096, 4096);
        assert_eq!(hq.insert(0, next), Inserted::Merged);
        let away = crate::sched::io(10, Op::Read, 7 << 30, 4096);
        assert_eq!(hq.insert(0, away), Inserted::Waiting);
    }

    #[test]
    fn issuing_a_request_starts_it_as_inserting_then_dispatching_would() {
        // A mix of adjacent and scattered reads, writes and flushes on a queue of 4 tags and
        // 6 requests, completions now and then: issue (with its start at once) and
        // insert + dispatch give the same outcomes, slots and requests started.
        for sched in ["none", "mq-deadline"] {
            let spec = GuestQueueSpec {
                scheduler: Some(SCHEDULERS.iter().copied().find(|s| *s == sched).unwrap()),
                nr_requests: Some(6),
                ..Default::default()
            };
            let q = spec.resolve("d", 1, 4, 1 << 20).unwrap();
            let run = |fast: bool| {
                let mut hq = HwQueue::new(&q);
                let (mut log, mut on_device) = (Vec::new(), VecDeque::new());
                for t in 0..400u64 {
                    let op = [Op::Read, Op::Write, Op::Read, Op::Flush][(t % 7 % 4) as usize];
                    let off = if t % 3 == 0 {
                        t * 4096
                    } else {
                        (t * 7919 % 97) << 20
                    };
                    let io = crate::sched::io(t, op, off, 4096);
                    let got = if fast {
                        hq.issue(t, io)
                    } else {
                        hq.insert(t, io)
                    };
                    let code = match got {
                        Inserted::Merged => 0,
                        Inserted::Queued | Inserted::Started(_) => 1,
                        Inserted::Waiting => 2,
                    };
                    log.push((t, None, code));
                    if let Inserted::Started(slot) = got {
                        on_device.push_back(slot);
                        log.push((t, Some(slot), t));
                    }
                    hq.dispatch(t, |slot, io| {
                        on_device.push_back(slot);
                        log.push((t, Some(slot), io.tag));
                    });
                    if t % 3 != 1 {
                        if let Some(slot) = on_device.pop_front() {
                            let done = hq.complete(t, slot);
                            log.push((t, Some(slot), done.len_bytes));
                        }
                    }
                }
                log
            };
            let fast = run(true);
            assert!(fast.len() > 800, "{sched}: {}", fast.len());
            assert_eq!(fast, run(false), "{sched}");
        }
    }

    #[test]
    fn mq_deadline_merges_into_queued_requests_and_none_does_not() {
        let w = |t: u64| crate::sched::io(t, Op::Write, t * 4096, 4096);
        for (sched, merged) in [("mq-deadline", 7), ("none", 0)] {
            let spec = GuestQueueSpec {
                scheduler: Some(SCHEDULERS.iter().copied().find(|s| *s == sched).unwrap()),
                nr_requests: Some(64),
                ..Default::default()
            };
            let mut hq = HwQueue::new(&spec.resolve("d", 1, 64, 1 << 20).unwrap());
            let n = (0..8)
                .filter(|&t| hq.insert(0, w(t)) == Inserted::Merged)
                .count();
            assert_eq!(n, merged, "{sched}");
        }
    }

    #[test]
    fn defaults_follow_the_hardware_queues_as_linux_61_sets_them() {
        let d = GuestQueueSpec::default();
        let one = d.resolve("d", 1, 256, 1016 << 10).unwrap();
        assert_eq!(one.scheduler.entry.name, "mq-deadline");
        assert_eq!((one.nr_requests, one.depth), (256, 256));
        assert_eq!(one.scheduler.params.int("max_merge"), 1016 << 10);
        let many = d.resolve("d", 4, 256, 1016 << 10).unwrap();
        assert_eq!(many.scheduler.entry.name, "none");
        assert_eq!((many.nr_requests, many.depth), (256, 256));
        // IDE: one tag, mq-deadline, 2 requests; 512 KiB of PRD entries.
        let ide = d.resolve("d", 1, 1, 512 << 10).unwrap();
        assert_eq!(
            (ide.nr_requests, ide.depth, ide.max_bytes),
            (2, 1, 512 << 10)
        );
    }

    #[test]
    fn the_table_reads_its_keys_and_the_schedulers_and_names_the_accepted_ones() {
        let t: BTreeMap<String, toml::Value> = toml::from_str(
            "scheduler = \"mq-deadline\"\nnr_requests = 64\nmax_sectors_kb = 512\nread_expire = \"100ms\"\n",
        )
        .unwrap();
        let s = GuestQueueSpec::from_raw(&t, "vm[0].disk[0].guest_queue", ()).unwrap();
        let q = s.resolve("f", 1, 256, 1 << 30).unwrap();
        assert_eq!((q.nr_requests, q.max_bytes), (64, 512 << 10));
        assert_eq!(q.scheduler.params.int("read_expire"), 100_000_000);
        let bad: BTreeMap<String, toml::Value> = toml::from_str("scheduler = \"bfq\"\n").unwrap();
        let e = GuestQueueSpec::from_raw(&bad, "g", ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("g.scheduler") && e.contains("none, mq-deadline"),
            "{e}"
        );
        let bad: BTreeMap<String, toml::Value> = toml::from_str("max_merge = 4096\n").unwrap();
        let e = GuestQueueSpec::from_raw(&bad, "g", ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("max_merge") && e.contains("max_sectors_kb"),
            "{e}"
        );
        let bad: BTreeMap<String, toml::Value> = toml::from_str("nomerges = 3\n").unwrap();
        assert!(GuestQueueSpec::from_raw(&bad, "g", ()).is_err());
    }
}
