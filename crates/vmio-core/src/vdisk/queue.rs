//! `[vm.disk.queue]`: a virtual disk's queues and the VMM threads that serve them, and
//! `[[vm.disk]] aio`, the I/O engine QEMU's file-posix driver submits with.
//!
//! ```text
//! aio         threads (default) | native | io_uring        (QEMU -drive aio=)
//!             native needs cache = none | directsync (O_DIRECT: QEMU refuses linux-aio on a
//!             buffered file, block/file-posix.c raw_open_common); io_uring needs QEMU >= 5.0
//! num_queues  virtio-blk / virtio-scsi: 1..=1024 (VIRTIO_QUEUE_MAX); default the VM's vCPUs
//!             on QEMU >= 5.2, else 1; ide, nbd, host: 1 (no other value)
//! queue_size  virtqueue size, a power of 2 in 4..=1024 (VIRTQUEUE_MAX_SIZE); default the QEMU
//!             profile's (256; 128 on 2.x); virtio only
//! iothreads   0: the VM's main loop serves the disk; N >= 1: N iothreads of the disk, queue q
//!             served by iothread q mod N (N > 1 needs QEMU >= 8.2, iothread-vq-mapping);
//!             default 1 with the disk's `iothread = true`, else 0
//! wakeup      one wake-up of a sleeping host thread by another (a futex or eventfd write,
//!             then the sleeper runs): default 5us (estimate, below); the latency each request
//!             of a format driver's own I/O pays per hand-off of its I/O engine (a sleeping
//!             worker woken to take it with aio = threads; every engine's completion waking
//!             the AioContext's thread from ppoll): vmio-sim's block layer
//! wake_spread the mean of the exponential extra delay of each wake-up of a sleeping thread
//!             on the virtual disk's path (the VMM thread woken by the guest's kick or the
//!             host's completion, the vCPU woken by the interrupt) where the CPU layer gives
//!             the path constant costs (`[cpu] model = "dedicated"` or no `[cpu]`): default
//!             2us (an estimate, super::spread); 0 turns it off; not charged under cfs, whose
//!             scheduling of the same hand-offs gives their variability
//! ```
//!
//! Sources: QEMU hw/block/virtio-blk.c (`num-queues`, `queue-size`, `iothread`,
//! `iothread-vq-mapping`, realize's checks: queue size a power of 2, more than 2, at most
//! VIRTQUEUE_MAX_SIZE), hw/virtio/virtio.h (VIRTIO_QUEUE_MAX 1024), block/file-posix.c
//! (`aio=native` without O_DIRECT is refused: "aio=native was specified, but it requires
//! cache.direct=on"), docs of `-blockdev` (aio=io_uring since 5.0).
//!
//! `wakeup` is an estimate for a bare-metal host, of the order of a few microseconds: the
//! waker's system call and `try_to_wake_up` (kernel/sched/core.c), the IPI to the sleeper's
//! idle core and its exit from a shallow idle state (drivers/idle/intel_idle.c: C1 2 us, C1E
//! 10 us exit latency on Skylake-SP; the deep C6's 133 us is what QEMU's iothread polling,
//! `poll-max-ns`, exists to avoid), and the context switch in (lmbench's `lat_ctx` and
//! similar pipe or futex ping-pong measurements give 1-3 us per switch between two threads on
//! current x86 CPUs, e.g. E. Bendersky, "Measuring context switching and memory overheads for
//! Linux threads", 2018). User-level threads do it in 130-250 ns (Qin et al., "Arachne",
//! OSDI 2018), which is the kernel's share it avoids. Inside a VM every wake-up of an idle
//! vCPU adds an IPI exit and a vCPU scheduled again, tens of microseconds:
//! `vmio calibrate --serve-path --server qemu-storage-daemon` measures it on the machine at hand
//! (python/vmio/real/wakeup.py) and writes it as a `[queue]` table.

use super::qemu::QemuProfile;
use super::Interface;
use crate::cache::CacheMode;
use crate::params::{KeyDoc, Kind, ParamSpec, Value};
use crate::table::{FieldError, Table};
use crate::{Ns, MS, US};
use serde::{Deserialize, Serialize};

/// QEMU's I/O engines (`aio=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aio {
    /// util/thread-pool.c: a worker thread per request, up to 64 per AioContext.
    #[default]
    Threads,
    /// block/linux-aio.c: io_submit/io_getevents, O_DIRECT only.
    Native,
    /// block/io_uring.c (QEMU >= 5.0).
    IoUring,
}

impl Aio {
    /// Every engine with its `aio` name and help line.
    pub const REGISTRY: [(Aio, &'static str, &'static str); 3] = [
        (
            Aio::Threads,
            "threads",
            "QEMU's thread pool: each request handed to a worker (up to 64 per iothread or main loop), which makes the system call",
        ),
        (
            Aio::Native,
            "native",
            "Linux AIO: the requests of one notification in one io_submit (needs cache = none or directsync)",
        ),
        (
            Aio::IoUring,
            "io_uring",
            "io_uring: the requests of one notification in one io_uring_enter (QEMU >= 5.0)",
        ),
    ];

    pub fn parse(s: &str) -> Option<Aio> {
        Self::REGISTRY
            .iter()
            .find(|(_, n, _)| *n == s)
            .map(|(a, _, _)| *a)
    }

    pub fn name(self) -> &'static str {
        Self::REGISTRY
            .iter()
            .find(|(a, _, _)| *a == self)
            .map_or("", |(_, n, _)| n)
    }

    pub fn accepted() -> String {
        Self::REGISTRY.map(|(_, n, _)| n).join(", ")
    }

    pub fn is_threads(&self) -> bool {
        *self == Aio::Threads
    }
}

/// `[vm.disk.queue]`'s keys as help shows them.
pub const QUEUE_KEYS: &[KeyDoc] = &[
    KeyDoc {
        name: "num_queues",
        help: "virtqueues of a virtio disk; the guest maps its vCPUs to them (blk-mq), vCPU i to queue i mod num_queues",
        accepted: "1..=1024 (virtio); 1 for ide, nbd, host",
        default: "the VM's vCPUs on QEMU >= 5.2, else 1",
    },
    KeyDoc {
        name: "queue_size",
        help: "entries of each virtqueue; the guest's tags per queue and, with seg-max-adjust (QEMU >= 5.0), seg_max = queue_size - 2",
        accepted: "a power of 2 in 4..=1024 (virtio only)",
        default: "256 (128 on QEMU 2.x)",
    },
    KeyDoc {
        name: "iothreads",
        help: "VMM threads serving the disk: 0 the VM's main loop, N iothreads with queue q on iothread q mod N",
        accepted: "0..=num_queues; more than 1 needs QEMU >= 8.2 (iothread-vq-mapping)",
        default: "1 with iothread = true, else 0",
    },
];

/// `wakeup`: one wake-up of a sleeping host thread (module doc).
pub const WAKEUP: ParamSpec = ParamSpec {
    name: "wakeup",
    kind: Kind::Duration {
        bare: MS,
        positive: false,
    },
    default: Value::Int(5 * US),
    unit: "ns",
    help: "latency of one wake-up of a sleeping host thread (futex or eventfd, then the thread runs); each request of a format driver's own I/O pays its I/O engine's wake-ups (threads 2, native and io_uring 1); default an estimate for bare metal",
};
/// `wake_spread`: the mean of the virtual-disk path's wake-up spread ([`super::spread`]).
pub const WAKE_SPREAD: ParamSpec = ParamSpec {
    name: "wake_spread",
    kind: Kind::Duration {
        bare: MS,
        positive: false,
    },
    default: Value::Int(super::spread::DEFAULT_MEAN_NS),
    unit: "ns",
    help: "mean of the exponential extra delay of each wake-up of a sleeping thread on the virtual disk's path (VMM thread on the guest's kick and the host's completion, vCPU on the interrupt; polling windows absorb short sleeps) under [cpu] model = \"dedicated\" or without [cpu]; not charged under cfs; 0: none; default an estimate from intel_idle's C1 exit latency",
};
/// `[vm.disk.queue]`'s declared parameters (its other keys are [`QUEUE_KEYS`]).
pub const PARAMS: &[ParamSpec] = &[WAKEUP, WAKE_SPREAD];

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    pub num_queues: Option<u32>,
    pub queue_size: Option<u32>,
    pub iothreads: Option<u32>,
    pub wakeup: Option<toml::Value>,
    pub wake_spread: Option<toml::Value>,
}

/// A disk's queues, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct QueueSpec {
    pub num_queues: u32,
    pub queue_size: u32,
    /// 0: the VM's main loop.
    pub iothreads: u32,
    /// [`WAKEUP`] in ns (a stack file writes it back as `wakeup = "5000ns"`).
    pub wakeup_ns: Ns,
    /// [`WAKE_SPREAD`] in ns (0: none).
    pub wake_spread_ns: Ns,
}

/// [`WAKEUP`]'s default in ns.
const fn default_wakeup_ns() -> Ns {
    match WAKEUP.default {
        Value::Int(ns) => ns,
        _ => 0,
    }
}

/// What `[vm.disk.queue]` reads beyond its table.
#[derive(Clone, Copy, Debug)]
pub struct QueueContext<'a> {
    pub interface: Interface,
    pub vcpus: u32,
    pub qemu: &'a QemuProfile,
    /// The disk's `iothread = true`.
    pub iothread: bool,
}

const VIRTIO_QUEUE_MAX: u32 = 1024;
const VIRTQUEUE_MAX_SIZE: u32 = 1024;

impl QueueSpec {
    /// The defaults of a disk without the table.
    pub fn defaults(cx: &QueueContext) -> QueueSpec {
        let virtio = matches!(cx.interface, Interface::VirtioBlk | Interface::VirtioScsi);
        QueueSpec {
            num_queues: if virtio && cx.qemu.auto_num_queues {
                cx.vcpus.clamp(1, VIRTIO_QUEUE_MAX)
            } else {
                1
            },
            queue_size: if virtio { cx.qemu.queue_size } else { 0 },
            iothreads: u32::from(cx.iothread),
            wakeup_ns: default_wakeup_ns(),
            wake_spread_ns: super::spread::DEFAULT_MEAN_NS,
        }
    }
}

/// `[vm.disk.queue]` at `field` (`vm[0].disk[1].queue`).
impl Table for QueueSpec {
    const KEY: &'static str = "queue";
    type Raw = RawQueue;
    type Context<'a> = QueueContext<'a>;

    fn from_raw(q: &RawQueue, field: &str, cx: QueueContext) -> Result<Self, FieldError> {
        let f = |k: &str| format!("{field}.{k}");
        let d = QueueSpec::defaults(&cx);
        let virtio = matches!(cx.interface, Interface::VirtioBlk | Interface::VirtioScsi);
        let num_queues = q.num_queues.unwrap_or(d.num_queues);
        if virtio && !(1..=VIRTIO_QUEUE_MAX).contains(&num_queues) {
            return Err(FieldError::new(
                f("num_queues"),
                format!("{num_queues}: accepted: 1..={VIRTIO_QUEUE_MAX} (VIRTIO_QUEUE_MAX)"),
            ));
        }
        if !virtio && num_queues != 1 {
            return Err(FieldError::new(
                f("num_queues"),
                format!(
                    "{num_queues}: interface '{}' has one queue; accepted: 1",
                    cx.interface.name()
                ),
            ));
        }
        let queue_size = match q.queue_size {
            Some(_) if !virtio => {
                return Err(FieldError::new(
                    f("queue_size"),
                    format!(
                        "has no meaning for interface '{}'; accepted: virtio-blk, virtio-scsi",
                        cx.interface.name()
                    ),
                ));
            }
            Some(s) if !(s.is_power_of_two() && (4..=VIRTQUEUE_MAX_SIZE).contains(&s)) => {
                return Err(FieldError::new(
                    f("queue_size"),
                    format!("{s}: accepted: a power of 2 in 4..={VIRTQUEUE_MAX_SIZE}"),
                ));
            }
            Some(s) => s,
            None => d.queue_size,
        };
        let iothreads = q.iothreads.unwrap_or(d.iothreads);
        if iothreads > num_queues.max(1) {
            return Err(FieldError::new(
                f("iothreads"),
                format!("{iothreads}: more iothreads than queues ({num_queues}); accepted: 0..={num_queues}"),
            ));
        }
        if iothreads > 1 && !cx.qemu.iothread_vq_mapping {
            return Err(FieldError::new(
                f("iothreads"),
                format!(
                    "{iothreads}: spreading a disk's queues over several iothreads needs QEMU >= 8.2 (iothread-vq-mapping), here {}; accepted: 0, 1",
                    cx.qemu.name
                ),
            ));
        }
        if cx.iothread && iothreads == 0 {
            return Err(FieldError::new(
                f("iothreads"),
                "0 contradicts the disk's iothread = true; accepted: 1 or more, or drop iothread",
            ));
        }
        let duration = |spec: &ParamSpec, raw: &Option<toml::Value>, default: Ns| match raw {
            None => Ok(default),
            Some(raw) => match spec.parse(raw) {
                Ok(Value::Int(ns)) => Ok(ns),
                Ok(_) => Ok(default),
                Err(e) => Err(FieldError::param(field, e)),
            },
        };
        let wakeup_ns = duration(&WAKEUP, &q.wakeup, d.wakeup_ns)?;
        let wake_spread_ns = duration(&WAKE_SPREAD, &q.wake_spread, d.wake_spread_ns)?;
        Ok(QueueSpec {
            num_queues,
            queue_size,
            iothreads,
            wakeup_ns,
            wake_spread_ns,
        })
    }
}

/// `[[vm.disk]] aio` read against the disk's cache mode and QEMU profile.
pub fn parse_aio(
    name: Option<&str>,
    field: &str,
    cache: CacheMode,
    qemu: &QemuProfile,
) -> Result<Aio, FieldError> {
    let Some(name) = name else {
        return Ok(Aio::Threads);
    };
    let aio = Aio::parse(name).ok_or_else(|| {
        FieldError::new(
            field,
            format!("'{name}' is not valid; accepted: {}", Aio::accepted()),
        )
    })?;
    if aio == Aio::Native && !matches!(cache, CacheMode::None | CacheMode::Directsync) {
        return Err(FieldError::new(
            field,
            format!(
                "'native' needs O_DIRECT, but cache is '{}' (QEMU: aio=native requires cache.direct=on); accepted with it: cache = none or directsync",
                cache.name()
            ),
        ));
    }
    if aio == Aio::IoUring && !qemu.io_uring {
        return Err(FieldError::new(
            field,
            format!(
                "'io_uring' needs QEMU >= 5.0, but qemu_version is {}; accepted: threads, native",
                qemu.name
            ),
        ));
    }
    Ok(aio)
}

#[cfg(test)]
mod tests {
    use super::super::qemu::lookup;
    use super::*;

    fn cx(interface: Interface, vcpus: u32, v: &str) -> QueueContext<'static> {
        QueueContext {
            interface,
            vcpus,
            qemu: lookup(v).unwrap(),
            iothread: false,
        }
    }

    #[test]
    fn virtio_blk_gets_a_queue_per_vcpu_from_qemu_5_2_and_one_before() {
        let q = QueueSpec::defaults(&cx(Interface::VirtioBlk, 4, "7.2"));
        assert_eq!((q.num_queues, q.queue_size, q.iothreads), (4, 256, 0));
        let q = QueueSpec::defaults(&cx(Interface::VirtioBlk, 4, "2.11"));
        assert_eq!((q.num_queues, q.queue_size), (1, 128));
        assert_eq!(
            QueueSpec::defaults(&cx(Interface::Ide, 4, "8.2")).num_queues,
            1
        );
    }

    #[test]
    fn several_iothreads_per_disk_need_qemu_8_2() {
        let raw = RawQueue {
            num_queues: Some(4),
            queue_size: None,
            iothreads: Some(2),
            wakeup: None,
            wake_spread: None,
        };
        let e = QueueSpec::from_raw(&raw, "q", cx(Interface::VirtioBlk, 4, "7.2")).unwrap_err();
        assert!(e.message.contains("8.2"), "{}", e.message);
        let q = QueueSpec::from_raw(&raw, "q", cx(Interface::VirtioBlk, 4, "8.2")).unwrap();
        assert_eq!(q.iothreads, 2);
    }

    #[test]
    fn a_queue_size_that_is_not_a_power_of_two_is_refused() {
        let raw = RawQueue {
            queue_size: Some(200),
            ..Default::default()
        };
        let e = QueueSpec::from_raw(&raw, "q", cx(Interface::VirtioBlk, 1, "7.2")).unwrap_err();
        assert_eq!(e.field, "q.queue_size");
    }

    const STACK: &str = "[[device]]\nname = \"d\"\nmodel = \"ram\"\n\
        [[volume]]\nname = \"v\"\nlayout = \"single\"\ndevices = [\"d\"]\n\
        [[vm]]\nname = \"vm\"\nvcpus = 4\nQEMU\n[[vm.disk]]\nname = \"a\"\nvolume = \"v\"\nDISK\n";

    fn stack(qemu: &str, disk: &str) -> Result<crate::stack::Stack, String> {
        let text = STACK.replace("QEMU", qemu).replace("DISK", disk);
        crate::stack::Stack::from_toml(&text, "s.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn a_stack_reads_qemu_version_aio_and_the_queue_table_with_their_defaults() {
        let s = stack("", "").unwrap();
        let d = &s.vms[0].disks[0];
        assert_eq!(s.vms[0].qemu_version, "7.2");
        assert_eq!(
            (d.aio, d.queue.num_queues, d.queue.queue_size),
            (Aio::Threads, 4, 256)
        );
        let s = stack("qemu_version = \"2.11\"", "iothread = true").unwrap();
        let d = &s.vms[0].disks[0];
        assert_eq!(
            (d.queue.num_queues, d.queue.queue_size, d.queue.iothreads),
            (1, 128, 1)
        );
        let e = stack("qemu_version = \"4.0\"", "").unwrap_err();
        assert!(
            e.starts_with(
                "s.toml: vm[0].qemu_version: '4.0' is not valid; accepted: 2.11, 5.2, 7.2, 8.2"
            ),
            "{e}"
        );
        let e = stack("", "aio = \"native\"").unwrap_err();
        assert!(
            e.starts_with("s.toml: vm[0].disk[0].aio: 'native' needs O_DIRECT"),
            "{e}"
        );
        let e = stack("", "[vm.disk.queue]\nnum_queues = 2\niothreads = 3").unwrap_err();
        assert!(
            e.starts_with("s.toml: vm[0].disk[0].queue.iothreads: 3"),
            "{e}"
        );
    }

    #[test]
    fn wakeup_defaults_to_five_microseconds_reads_a_duration_and_refuses_a_negative_one() {
        let s = stack("", "").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wakeup_ns, 5_000);
        let s = stack("", "[vm.disk.queue]\nwakeup = \"60us\"").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wakeup_ns, 60_000);
        // A bare number is in milliseconds, as [nbd] handoff's.
        let s = stack("", "[vm.disk.queue]\nwakeup = 0.02").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wakeup_ns, 20_000);
        let s = stack("", "[vm.disk.queue]\nwakeup = 0").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wakeup_ns, 0);
        let e = stack("", "[vm.disk.queue]\nwakeup = -1").unwrap_err();
        assert!(
            e.starts_with("s.toml: vm[0].disk[0].queue.wakeup: -1: must be a duration"),
            "{e}"
        );
    }

    #[test]
    fn wake_spread_defaults_to_two_microseconds_reads_a_duration_and_zero_turns_it_off() {
        let s = stack("", "").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wake_spread_ns, 2_000);
        let s = stack("", "[vm.disk.queue]\nwake_spread = \"10us\"").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wake_spread_ns, 10_000);
        let s = stack("", "[vm.disk.queue]\nwake_spread = 0").unwrap();
        assert_eq!(s.vms[0].disks[0].queue.wake_spread_ns, 0);
        let e = stack("", "[vm.disk.queue]\nwake_spread = \"fast\"").unwrap_err();
        assert!(
            e.starts_with("s.toml: vm[0].disk[0].queue.wake_spread: "),
            "{e}"
        );
    }

    #[test]
    fn native_aio_needs_o_direct_and_io_uring_needs_qemu_5() {
        let v72 = lookup("7.2").unwrap();
        let e = parse_aio(Some("native"), "aio", CacheMode::Writeback, v72).unwrap_err();
        assert!(e.message.contains("none or directsync"), "{}", e.message);
        assert_eq!(
            parse_aio(Some("native"), "aio", CacheMode::None, v72).unwrap(),
            Aio::Native
        );
        let e = parse_aio(
            Some("io_uring"),
            "aio",
            CacheMode::None,
            lookup("2.11").unwrap(),
        )
        .unwrap_err();
        assert!(e.message.contains("5.0"), "{}", e.message);
        assert_eq!(
            parse_aio(None, "aio", CacheMode::Writeback, v72).unwrap(),
            Aio::Threads
        );
    }
}
