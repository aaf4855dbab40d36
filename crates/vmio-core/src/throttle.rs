//! Disk I/O throttling as QEMU does it (`-drive throttling.*`, libvirt's `<iotune>`): one
//! pure policy both engines drive, the simulator in virtual time and `vmio serve` with the
//! monotonic clock; and its stack-file table, `[vm.disk.iotune]`, with libvirt's names.
//!
//! Sources (QEMU 7.2 and its master, read for this module): util/throttle.c
//! (`throttle_leak_bucket`, `throttle_compute_wait`, `throttle_compute_timer`,
//! `throttle_schedule_timer`, `throttle_account`, `throttle_fix_bucket`,
//! `throttle_is_valid`), docs/throttle.txt (the parameters, bursts, `iops-size`, groups, the
//! leaky bucket "as a meter"), block/throttle-groups.c (`next_throttle_token`,
//! `throttle_group_schedule_timer`, `schedule_next_request`,
//! `throttle_group_co_io_limits_intercept`: the round robin between a group's members),
//! block/block-backend.c (`blk_co_do_preadv_part`/`pwritev_part` throttle reads and writes
//! only; discards and flushes pass), libvirt's formatdomain (`<iotune>` element names,
//! `group_name`; "total and read/write of the same kind cannot be set together").
//!
//! ## Six leaky buckets
//!
//! ```text
//! buckets: bps and iops x total, read, write; each: avg (units/s, 0 = unlimited), max,
//!          burst_length (s, default 1), level, burst_level
//! throttle_fix_bucket: max = avg / 10 when avg is set and max is not  (100 ms of slack)
//! leak(now):   dt = now - previous_leak; level -= avg * dt; burst_level -= max * dt
//!              (burst_level only when burst_length > 1; both floored at 0)
//! wait(bucket) (throttle_compute_wait; 0 when avg = 0):
//!     extra = level - max * burst_length;   extra > 0 -> extra / avg seconds
//!     burst_length > 1: extra = burst_level - max / 10; extra > 0 -> extra / max seconds
//! wait(request of direction d) = max over the buckets total and d, bps and iops
//! account(d, len): bps total and d += len; iops total and d += units,
//!     units = len / iops_size when iops_size > 0 and len > iops_size, else 1
//! a request is admitted when wait = 0 (the check comes before the accounting: the bucket
//! may overflow by one request), and accounted then.
//! ```
//!
//! Closed forms (unit tests): saturated, the long-run rate is `avg`; from an idle bucket
//! with `max` and `burst_length = L > 1` the rate is `max` until the level reaches `max * L`,
//! which it does after `T = max * L / (max - avg)` seconds (the level rises at `max - avg`;
//! docs/throttle.txt: "it will take a bit more than 60 seconds"), so about
//! `max * T + max / 10` operations pass before the rate falls to `avg`.
//!
//! ## Groups and round robin
//!
//! Every throttled disk is a member of a group (`group_name`, by default the disk's own
//! name, as QEMU names a group after its device); the group's one [`Throttle`] holds the
//! limits for the combined I/O of its members. Per direction (read, write) the group has one
//! timer and a token (the member whose turn it is), each member a FIFO of waiting requests:
//!
//! ```text
//! submit(m, d, req): timer of d armed or m has requests of d waiting -> queue it
//!                    else wait = throttle.wait(now, d): 0 -> account, admit now
//!                    else queue it, arm the timer at now + wait, token = m
//! timer of d fires:  admit the token's first request (its wait was computed for it), then
//!                    repeatedly: next = the member after the token (circularly, the token
//!                    last) with a request of d waiting; wait = throttle.wait(now, d);
//!                    0 -> admit next's first request, token = next; else arm the timer at
//!                    now + wait, token = next, stop
//! ```
//!
//! A member with no limit of its own is no member: engines keep `None` for it (no work on
//! the hot path). Disks of one group must give the same limits (QEMU's last configuration
//! wins; here a difference is an error, [`plan_groups`]).
//!
//! The table's rules are `throttle_is_valid`'s (total with read/write of one kind, a burst
//! below its average or without one, a burst length without a burst rate or of 0, values
//! above `THROTTLE_VALUE_MAX`, `iops_size` without an iops limit); one is vmio's own: the
//! bucket `max x max_length` must stay within `THROTTLE_VALUE_MAX` too.
//!
//! Stats per member ([`ThrottleStats`]): requests, requests delayed, and the time spent
//! throttled (the sum of each delayed request's wait, submit to admission).

use crate::params::KeyDoc;
use crate::request::Op;
use crate::table::{FieldError, Table};
use crate::{Ns, SEC};
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, VecDeque};

/// QEMU's `THROTTLE_VALUE_MAX` (include/qemu/throttle.h): the largest rate or burst.
pub const VALUE_MAX: u64 = 1_000_000_000_000_000;

/// Bucket order as QEMU's `BucketType`.
pub const BPS_TOTAL: usize = 0;
pub const BPS_READ: usize = 1;
pub const BPS_WRITE: usize = 2;
pub const OPS_TOTAL: usize = 3;
pub const OPS_READ: usize = 4;
pub const OPS_WRITE: usize = 5;

/// The libvirt name of each bucket's average rate (`<iotune>`), in bucket order.
pub const BUCKET_KEYS: [&str; 6] = [
    "total_bytes_sec",
    "read_bytes_sec",
    "write_bytes_sec",
    "total_iops_sec",
    "read_iops_sec",
    "write_iops_sec",
];

/// One bucket's configured limit: `avg` units per second (0: unlimited), `max` the burst
/// rate (0: none) and `max_length` its length in seconds (1 unless a burst is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limit {
    pub avg: u64,
    pub max: u64,
    pub max_length: u64,
}

impl Default for Limit {
    fn default() -> Self {
        Limit {
            avg: 0,
            max: 0,
            max_length: 1,
        }
    }
}

/// `[vm.disk.iotune]`: the six limits (bucket order, [`BUCKET_KEYS`]), `size_iops_sec`
/// (QEMU's `iops-size`, 0: every request is one operation) and the group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IotuneSpec {
    pub buckets: [Limit; 6],
    pub size_iops_sec: u64,
    /// libvirt's `group_name`; None: the disk's own group (QEMU names it after the device).
    pub group_name: Option<String>,
}

/// The effective stack shows the keys that are set, with libvirt's names.
impl Serialize for IotuneSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, l) in BUCKET_KEYS.iter().zip(&self.buckets) {
            if l.avg > 0 {
                m.serialize_entry(k, &l.avg)?;
            }
            if l.max > 0 {
                m.serialize_entry(&format!("{k}_max"), &l.max)?;
                m.serialize_entry(&format!("{k}_max_length"), &l.max_length)?;
            }
        }
        if self.size_iops_sec > 0 {
            m.serialize_entry("size_iops_sec", &self.size_iops_sec)?;
        }
        if let Some(g) = &self.group_name {
            m.serialize_entry("group_name", g)?;
        }
        m.end()
    }
}

macro_rules! bucket_keys {
    ($avg:literal, $what:literal) => {
        [
            KeyDoc {
                name: $avg,
                help: concat!("average ", $what, " per second (QEMU throttling.*; 0: unlimited)"),
                accepted: "0..=1e15",
                default: "0",
            },
            KeyDoc {
                name: concat!($avg, "_max"),
                help: concat!("burst rate of ", $what, " per second (0: no burst; at least the average)"),
                accepted: "0..=1e15, >= the average",
                default: "0",
            },
            KeyDoc {
                name: concat!($avg, "_max_length"),
                help: "seconds the bucket holds at the burst rate (bucket size = max x max_length); needs _max",
                accepted: "1..=1e15 / max",
                default: "1",
            },
        ]
    };
}

const fn keys() -> [KeyDoc; 20] {
    let b = [
        bucket_keys!("total_bytes_sec", "bytes"),
        bucket_keys!("read_bytes_sec", "bytes read"),
        bucket_keys!("write_bytes_sec", "bytes written"),
        bucket_keys!("total_iops_sec", "requests"),
        bucket_keys!("read_iops_sec", "reads"),
        bucket_keys!("write_iops_sec", "writes"),
    ];
    let mut out = [b[0][0]; 20];
    let mut i = 0;
    while i < 18 {
        out[i] = b[i / 3][i % 3];
        i += 1;
    }
    out[18] = KeyDoc {
        name: "size_iops_sec",
        help: "a request larger than this many bytes counts as len / size_iops_sec operations (QEMU iops-size; 0: every request is one); needs an iops limit",
        accepted: "0..=1e15",
        default: "0",
    };
    out[19] = KeyDoc {
        name: "group_name",
        help: "throttle group: the disks of a VM with the same group share one budget, round robin between them; same limits in each",
        accepted: "a name",
        default: "the disk's name",
    };
    out
}

/// `[vm.disk.iotune]`'s keys, for `vmio help stack`.
pub const KEYS: [KeyDoc; 20] = keys();

/// The accepted keys, for error lines.
fn accepted_keys() -> String {
    KEYS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

/// `[vm.disk.iotune]` at `field` (`vm[0].disk[1].iotune`): every key libvirt's `<iotune>`
/// names, checked as QEMU's `throttle_is_valid` and libvirt check them.
impl Table for IotuneSpec {
    const KEY: &'static str = "iotune";
    type Raw = BTreeMap<String, toml::Value>;
    type Context<'a> = ();

    fn from_raw(raw: &Self::Raw, field: &str, _: ()) -> Result<Self, FieldError> {
        let f = |k: &str| format!("{field}.{k}");
        let mut spec = IotuneSpec::default();
        let mut set: BTreeMap<&str, u64> = BTreeMap::new();
        for (k, v) in raw {
            if k == "group_name" {
                match v.as_str() {
                    Some(s) if !s.is_empty() => spec.group_name = Some(s.to_string()),
                    _ => return Err(FieldError::new(f(k), "must be a non-empty string")),
                }
                continue;
            }
            let Some(doc) = KEYS.iter().find(|d| d.name == k) else {
                return Err(FieldError::new(
                    f(k),
                    format!("unknown key; accepted: {}", accepted_keys()),
                ));
            };
            let n = v
                .as_integer()
                .and_then(|n| u64::try_from(n).ok())
                .filter(|&n| n <= VALUE_MAX)
                .ok_or_else(|| {
                    FieldError::new(
                        f(k),
                        format!("{v}: must be an integer from 0 to {VALUE_MAX} (QEMU's THROTTLE_VALUE_MAX)"),
                    )
                })?;
            set.insert(doc.name, n);
        }
        let get = |k: &str| set.get(k).copied();
        for (i, k) in BUCKET_KEYS.iter().enumerate() {
            let avg = get(k).unwrap_or(0);
            let max_key = format!("{k}_max");
            let len_key = format!("{k}_max_length");
            let max = get(&max_key).unwrap_or(0);
            if max > 0 && avg == 0 {
                return Err(FieldError::new(
                    f(&max_key),
                    format!("a burst needs an average; accepted: with {k} > 0"),
                ));
            }
            if max > 0 && max < avg {
                return Err(FieldError::new(
                    f(&max_key),
                    format!("{max} is below {k} ({avg}); accepted: 0 (no burst) or at least {avg}"),
                ));
            }
            let max_length = match get(&len_key) {
                None => 1,
                Some(0) => {
                    return Err(FieldError::new(
                        f(&len_key),
                        "the burst length cannot be 0; accepted: 1 or more seconds",
                    ))
                }
                Some(l) if l > 1 && max == 0 => {
                    return Err(FieldError::new(
                        f(&len_key),
                        format!("a burst length needs a burst rate; accepted: with {max_key} > 0"),
                    ))
                }
                Some(l) if max > 0 && l > VALUE_MAX / max => {
                    return Err(FieldError::new(
                        f(&len_key),
                        format!(
                            "{l}: burst too long for {max_key} = {max}; accepted: 1..={}",
                            VALUE_MAX / max
                        ),
                    ))
                }
                Some(l) => l,
            };
            spec.buckets[i] = Limit {
                avg,
                max,
                max_length,
            };
        }
        for (total, rw) in [
            (BPS_TOTAL, [BPS_READ, BPS_WRITE]),
            (OPS_TOTAL, [OPS_READ, OPS_WRITE]),
        ] {
            let t = spec.buckets[total];
            for j in rw {
                let b = spec.buckets[j];
                let (clash, what) = if t.avg > 0 && b.avg > 0 {
                    (true, "")
                } else {
                    (t.max > 0 && b.max > 0, "_max")
                };
                if clash {
                    return Err(FieldError::new(
                        f(&format!("{}{what}", BUCKET_KEYS[j])),
                        format!(
                            "cannot be set with {}{what} (QEMU and libvirt refuse total and read/write limits of one kind together); accepted: {}{what} alone, or {}{what} and {}{what}",
                            BUCKET_KEYS[total], BUCKET_KEYS[total], BUCKET_KEYS[rw[0]], BUCKET_KEYS[rw[1]]
                        ),
                    ));
                }
            }
        }
        spec.size_iops_sec = get("size_iops_sec").unwrap_or(0);
        if spec.size_iops_sec > 0
            && [OPS_TOTAL, OPS_READ, OPS_WRITE]
                .iter()
                .all(|&i| spec.buckets[i].avg == 0)
        {
            return Err(FieldError::new(
                f("size_iops_sec"),
                "needs an iops limit; accepted: with total_iops_sec, read_iops_sec or write_iops_sec > 0",
            ));
        }
        Ok(spec)
    }
}

impl IotuneSpec {
    /// Whether any limit is set (QEMU's `throttle_enabled`).
    pub fn enabled(&self) -> bool {
        self.buckets.iter().any(|b| b.avg > 0)
    }
}

/// The direction a request is throttled in, or None: discards and flushes pass (QEMU's
/// BlockBackend throttles only reads and writes).
pub fn direction(op: Op) -> Option<usize> {
    match op {
        Op::Read => Some(0),
        Op::Write => Some(1),
        Op::Flush | Op::Trim => None,
    }
}

/// QEMU's `LeakyBucket` after `throttle_fix_bucket`.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    avg: f64,
    max: f64,
    burst_length: f64,
    level: f64,
    burst_level: f64,
}

impl Bucket {
    fn new(l: &Limit) -> Self {
        let avg = l.avg as f64;
        Bucket {
            avg,
            max: if l.avg > 0 && l.max == 0 {
                avg / 10.0
            } else {
                l.max as f64
            },
            burst_length: l.max_length.max(1) as f64,
            level: 0.0,
            burst_level: 0.0,
        }
    }

    /// `throttle_leak_bucket`.
    fn leak(&mut self, delta_ns: Ns) {
        let dt = delta_ns as f64 / SEC as f64;
        self.level = (self.level - self.avg * dt).max(0.0);
        if self.burst_length > 1.0 {
            self.burst_level = (self.burst_level - self.max * dt).max(0.0);
        }
    }

    /// `throttle_compute_wait`: nanoseconds until the bucket has room (0: now).
    fn wait(&self) -> Ns {
        if self.avg == 0.0 {
            return 0;
        }
        let extra = self.level - self.max * self.burst_length;
        if extra > 0.0 {
            return (extra * SEC as f64 / self.avg) as Ns;
        }
        if self.burst_length > 1.0 {
            let extra = self.burst_level - self.max / 10.0;
            if extra > 0.0 {
                return (extra * SEC as f64 / self.max) as Ns;
            }
        }
        0
    }

    fn add(&mut self, units: f64) {
        self.level += units;
        if self.burst_length > 1.0 {
            self.burst_level += units;
        }
    }
}

/// QEMU's `ThrottleState`: six buckets and the time of their last leak.
#[derive(Clone, Debug)]
pub struct Throttle {
    buckets: [Bucket; 6],
    op_size: u64,
    previous_leak: Ns,
}

impl Throttle {
    /// Empty buckets at time 0 (QEMU's `throttle_config`).
    pub fn new(spec: &IotuneSpec) -> Self {
        Throttle {
            buckets: spec.buckets.each_ref().map(Bucket::new),
            op_size: spec.size_iops_sec,
            previous_leak: 0,
        }
    }

    /// `throttle_compute_timer`: leak to `now`, then the wait of a request of direction
    /// `dir` (0 read, 1 write): the longest of its four buckets'.
    pub fn wait(&mut self, now: Ns, dir: usize) -> Ns {
        if now > self.previous_leak {
            let dt = now - self.previous_leak;
            self.buckets.iter_mut().for_each(|b| b.leak(dt));
            self.previous_leak = now;
        }
        let own = [[BPS_READ, OPS_READ], [BPS_WRITE, OPS_WRITE]][dir & 1];
        [BPS_TOTAL, OPS_TOTAL, own[0], own[1]]
            .iter()
            .map(|&i| self.buckets[i].wait())
            .max()
            .unwrap_or(0)
    }

    /// `throttle_account`: a request of `len` bytes of direction `dir` passed.
    pub fn account(&mut self, dir: usize, len: u64) {
        let units = if self.op_size > 0 && len > self.op_size {
            len as f64 / self.op_size as f64
        } else {
            1.0
        };
        let own = [[BPS_READ, OPS_READ], [BPS_WRITE, OPS_WRITE]][dir & 1];
        self.buckets[BPS_TOTAL].add(len as f64);
        self.buckets[own[0]].add(len as f64);
        self.buckets[OPS_TOTAL].add(units);
        self.buckets[own[1]].add(units);
    }

    /// One disk alone, without a queue: admit (and account) a request of `op` and `len` at
    /// `now`, or the time to try again. Discards and flushes always pass.
    pub fn admit(&mut self, now: Ns, op: Op, len: u64) -> Result<(), Ns> {
        let Some(dir) = direction(op) else {
            return Ok(());
        };
        match self.wait(now, dir) {
            0 => {
                self.account(dir, len);
                Ok(())
            }
            w => Err(now + w),
        }
    }
}

/// A member's throttling figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ThrottleStats {
    /// Reads and writes that went through the throttle.
    pub requests: u64,
    /// Of them, those that waited.
    pub delayed: u64,
    /// The sum of their waits (submit to admission), ns.
    pub throttled_ns: u64,
}

struct Waiting<T> {
    item: T,
    len: u64,
    since: Ns,
}

struct Member<T> {
    queue: [VecDeque<Waiting<T>>; 2],
    stats: ThrottleStats,
}

/// What [`ThrottleGroup::submit`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Submit<T> {
    /// Go on with it now.
    Now(T),
    /// It waits in its member's queue; `Some(at)`: the group armed a timer, call
    /// [`ThrottleGroup::wake`] at `at` (a timer already armed was announced before).
    Queued(Option<Ns>),
}

/// A throttle group: one [`Throttle`] shared by its members, a FIFO per member and
/// direction, a timer and a round-robin token per direction.
pub struct ThrottleGroup<T> {
    throttle: Throttle,
    members: Vec<Member<T>>,
    token: [usize; 2],
    timer: [Option<Ns>; 2],
}

impl<T> ThrottleGroup<T> {
    pub fn new(spec: &IotuneSpec, members: usize) -> Self {
        ThrottleGroup {
            throttle: Throttle::new(spec),
            members: (0..members.max(1))
                .map(|_| Member {
                    queue: [VecDeque::new(), VecDeque::new()],
                    stats: ThrottleStats::default(),
                })
                .collect(),
            token: [0; 2],
            timer: [None; 2],
        }
    }

    /// A request of member `m` (`op`, `len` bytes) at `now` (QEMU's
    /// `throttle_group_co_io_limits_intercept`).
    pub fn submit(&mut self, now: Ns, m: usize, op: Op, len: u64, item: T) -> Submit<T> {
        let Some(dir) = direction(op) else {
            return Submit::Now(item);
        };
        self.members[m].stats.requests += 1;
        let waiting = Waiting {
            item,
            len,
            since: now,
        };
        if self.timer[dir].is_some() || !self.members[m].queue[dir].is_empty() {
            self.members[m].queue[dir].push_back(waiting);
            return Submit::Queued(None);
        }
        match self.throttle.wait(now, dir) {
            0 => {
                self.throttle.account(dir, len);
                Submit::Now(waiting.item)
            }
            w => {
                self.members[m].queue[dir].push_back(waiting);
                self.token[dir] = m;
                self.timer[dir] = Some(now + w);
                Submit::Queued(Some(now + w))
            }
        }
    }

    /// The member after the token (circularly, the token itself last) with a request of
    /// `dir` waiting (`next_throttle_token`).
    fn next_token(&self, dir: usize) -> Option<usize> {
        let n = self.members.len();
        (1..=n)
            .map(|k| (self.token[dir] + k) % n)
            .find(|&i| !self.members[i].queue[dir].is_empty())
    }

    fn pass(&mut self, now: Ns, m: usize, dir: usize, out: &mut Vec<(usize, T)>) {
        if let Some(w) = self.members[m].queue[dir].pop_front() {
            self.throttle.account(dir, w.len);
            let s = &mut self.members[m].stats;
            s.delayed += 1;
            s.throttled_ns += now - w.since;
            out.push((m, w.item));
        }
    }

    /// The timers due at `now` fire: the requests admitted go to `out` as (member, item), in
    /// order; returns the timers armed again (call `wake` at each). A wake with no timer due
    /// does nothing.
    pub fn wake(&mut self, now: Ns, out: &mut Vec<(usize, T)>) -> [Option<Ns>; 2] {
        [0, 1].map(|dir| self.wake_dir(now, dir, out))
    }

    /// [`ThrottleGroup::wake`] for one direction: the timer it armed again, if any.
    fn wake_dir(&mut self, now: Ns, dir: usize, out: &mut Vec<(usize, T)>) -> Option<Ns> {
        match self.timer[dir] {
            Some(at) if at <= now => self.timer[dir] = None,
            _ => return None,
        }
        let token = self.token[dir];
        self.pass(now, token, dir, out);
        while let Some(next) = self.next_token(dir) {
            self.token[dir] = next;
            match self.throttle.wait(now, dir) {
                0 => self.pass(now, next, dir, out),
                w => {
                    self.timer[dir] = Some(now + w);
                    return Some(now + w);
                }
            }
        }
        None
    }

    /// Requests waiting in the group.
    pub fn queued(&self) -> usize {
        self.members
            .iter()
            .map(|m| m.queue[0].len() + m.queue[1].len())
            .sum()
    }

    pub fn stats(&self, m: usize) -> ThrottleStats {
        self.members[m].stats
    }
}

/// The throttle groups of a stack's disks: each throttled disk's (group, member), and each
/// group's limits and member count.
#[derive(Debug, Default)]
pub struct GroupPlan {
    pub groups: Vec<(IotuneSpec, usize)>,
    pub of_disk: Vec<Option<(usize, usize)>>,
}

/// Group the disks (in stack order: `field` for errors, the VM's name, the disk's name, its
/// iotune): disks of one VM with the same `group_name` (or, without one, named as it) are
/// one group; a member that gives other limits than the group's first is an error.
pub fn plan_groups(
    disks: &[(String, &str, &str, Option<&IotuneSpec>)],
) -> Result<GroupPlan, FieldError> {
    let mut plan = GroupPlan::default();
    let mut by_name: BTreeMap<(&str, &str), (usize, &str)> = BTreeMap::new();
    for (field, vm, disk, iotune) in disks {
        let Some(spec) = iotune.filter(|s| s.enabled()) else {
            plan.of_disk.push(None);
            continue;
        };
        let name = spec.group_name.as_deref().unwrap_or(disk);
        match by_name.get(&(*vm, name)) {
            Some(&(g, first)) => {
                let (gspec, n) = &mut plan.groups[g];
                if gspec.buckets != spec.buckets || gspec.size_iops_sec != spec.size_iops_sec {
                    return Err(FieldError::new(
                        format!("{field}.iotune"),
                        format!("throttle group '{name}' has other limits in {first}.iotune; accepted: the same limits in every disk of a group"),
                    ));
                }
                plan.of_disk.push(Some((g, *n)));
                *n += 1;
            }
            None => {
                by_name.insert((*vm, name), (plan.groups.len(), field.as_str()));
                plan.of_disk.push(Some((plan.groups.len(), 0)));
                plan.groups.push(((*spec).clone(), 1));
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests;
