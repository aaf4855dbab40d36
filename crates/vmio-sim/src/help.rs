//! `vmio help stack`: the stack file's selectable layers — `[[vm.disk]] interface` (with the
//! guest's `read_ahead_kb`), `cache` and `aio`, `[vm.disk.queue]`, `[[vm]] qemu_version`,
//! `[vm.disk.filesystem] type`, `[vm.disk.image]` (`format`: [`vmio_core::image::help_layer`]),
//! `[vm.page_cache]`
//! `eviction`, `[page_cache] eviction`, `[pdc]`, `[scheduler] name`, `[[volume]] layout`,
//! `[[device]] model`, `[vm.disk.iotune]` ([`vmio_core::throttle::KEYS`]) — with every entry's parameters (and the tables' own), rendered from
//! the registries and declarations ([`vmio_core::stack::Interface::REGISTRY`],
//! [`vmio_core::cache::CacheMode::REGISTRY`], [`vmio_core::guest::params::FS_PARAMS`] and
//! [`vmio_core::guest::params::FS_MOUNT`], [`vmio_core::cache::eviction::REGISTRY`] and
//! [`vmio_core::cache::linux::PARAMS`] (the guest's with its own `memory`,
//! [`vmio_core::guest::params::GUEST_CACHE_MEMORY`]), [`vmio_core::cache::pdc::PARAMS`], [`vmio_core::nbd::PARAMS`],
//! [`vmio_core::sched::REGISTRY`],
//! [`vmio_core::volume::REGISTRY`], [`crate::device::REGISTRY`]) the stack parser reads, as
//! `qemu-system-x86_64 -device help` lists device properties. The README's tables are this
//! command's Markdown output, kept equal by a test.
//!
//! ```text
//! layers() = [vdisk interfaces (note: aliases; key: read_ahead_kb), QEMU cache modes, QEMU's
//!             I/O engines (vmio_core::vdisk::Aio::REGISTRY), [vm.disk.queue]'s keys
//!             (vdisk::queue::QUEUE_KEYS, and queue::PARAMS: wakeup), QEMU versions
//!             (vdisk::qemu::PROFILES), guest filesystems (key: mount; FS_PARAMS but
//!             type), guest page cache (eviction policies; linux::PARAMS with the guest's
//!             memory), volume layouts (note: device count), schedulers, eviction
//!             policies with the page cache's parameters, the [pdc] detector's parameters
//!             (no selector), device models (note: profiles; keys: share, start,
//!             capacity; parameters of any model: the thin layer's, device::thin::PARAMS)]
//! text     = per layer: "table selector = a | b | c (default)", one line per entry,
//!            one line per key and parameter (entries sharing a declaration share the line)
//! markdown = per layer: an entry table and a parameter table
//! ```

use vmio_core::cache::{eviction, linux, pdc, CacheMode};
use vmio_core::cpu;
use vmio_core::guest::params as gp;
use vmio_core::params::{self, Described, Layer, ParamSpec};
use vmio_core::stack::{Interface, SHARE_KEYS};
use vmio_core::vdisk::{qemu, queue, Aio};
use vmio_core::{hostfs, nbd, sched, throttle, volume};

use crate::device;

/// The declarations help lists that are not a static list: `[vm.disk.filesystem]`'s
/// parameters but the selector `type`, and `[vm.page_cache]`'s (the host's, with the guest's
/// `memory`).
struct Derived {
    fs_params: Vec<ParamSpec>,
    /// `[cpu]`'s: CFS's and the hypervisor mechanisms'.
    cpu_params: Vec<ParamSpec>,
    guest_cache_params: Vec<ParamSpec>,
}

impl Derived {
    fn new() -> Self {
        Derived {
            fs_params: gp::FS_PARAMS
                .iter()
                .filter(|p| p.name != gp::FS_TYPE.name)
                .copied()
                .collect(),
            cpu_params: cpu::params().copied().collect(),
            guest_cache_params: linux::PARAMS
                .iter()
                .map(|p| {
                    if p.name == linux::MEMORY.name {
                        gp::GUEST_CACHE_MEMORY
                    } else if p.name == linux::COPY_RATE.name {
                        gp::GUEST_COPY_RATE
                    } else {
                        *p
                    }
                })
                .collect(),
        }
    }
}

/// The eviction policies as a page-cache table lists them (`note`: where they apply).
fn eviction_entries(note: &str) -> Vec<Described<'static>> {
    eviction::REGISTRY
        .iter()
        .map(|e| Described {
            name: e.name,
            help: e.help,
            note: note.to_string(),
            params: &[],
        })
        .collect()
}

/// The layers as help shows them.
fn layers(d: &Derived) -> Vec<Layer<'_>> {
    let fs_types = match gp::FS_TYPE.kind {
        params::Kind::Choice(names) => names,
        _ => &[],
    };
    let fs_default = match gp::FS_TYPE.default {
        params::Value::Choice(name) => name,
        _ => "",
    };
    vec![
        Layer {
            table: "[[vm.disk]]",
            selector: "interface",
            default: Interface::VirtioBlk.name(),
            entries: Interface::REGISTRY
                .iter()
                .map(|(_, name, aliases, help)| Described {
                    name,
                    help,
                    note: if aliases.is_empty() {
                        String::new()
                    } else {
                        format!("also: {}", aliases.join(", "))
                    },
                    params: &[],
                })
                .collect(),
            keys: &[gp::READ_AHEAD_KB_KEY],
            params: &[],
        },
        Layer {
            table: "[[vm.disk]]",
            selector: "cache",
            default: CacheMode::Writeback.name(),
            entries: CacheMode::REGISTRY
                .iter()
                .map(|(_, name, help)| Described {
                    name,
                    help,
                    note: String::new(),
                    params: &[],
                })
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[[vm.disk]]",
            selector: "aio",
            default: Aio::Threads.name(),
            entries: Aio::REGISTRY
                .iter()
                .map(|(_, name, help)| Described {
                    name,
                    help,
                    note: String::new(),
                    params: &[],
                })
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[vm.disk.queue]",
            selector: "",
            default: "the queues of a [[vm.disk]] and the VMM threads serving them",
            entries: Vec::new(),
            keys: queue::QUEUE_KEYS,
            params: queue::PARAMS,
        },
        Layer {
            table: "[vm.disk.guest_queue]",
            selector: "",
            default: "the guest's block layer on the disk, as /sys/block/<dev>/queue/ (plug, merges, scheduler; vmio_core::guest::blk); the scheduler's parameters (mq-deadline: read_expire, write_expire) go in the same table; without the table: Linux 6.1's defaults",
            entries: Vec::new(),
            keys: &[],
            params: vmio_core::guest::blk::PARAMS,
        },
        Layer {
            table: "[[vm]]",
            selector: "qemu_version",
            default: qemu::DEFAULT,
            entries: qemu::PROFILES
                .iter()
                .map(|p| Described {
                    name: p.name,
                    help: p.help,
                    note: String::new(),
                    params: &[],
                })
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[vm.disk.filesystem]",
            selector: "type",
            default: fs_default,
            entries: fs_types
                .iter()
                .map(|&name| Described {
                    name,
                    help: gp::FS_TYPE.help,
                    note: "without the table: a raw block device".to_string(),
                    params: &[],
                })
                .collect(),
            keys: &[gp::FS_MOUNT],
            params: &d.fs_params,
        },
        vmio_core::image::help_layer(),
        Layer {
            table: "[vm.disk.iotune]",
            selector: "",
            default: "QEMU's I/O throttling of the disk, libvirt's <iotune> (vmio sim and vmio serve; a total_ limit excludes the read_ and write_ ones of its kind); without the table: none",
            entries: Vec::new(),
            keys: &throttle::KEYS,
            params: &[],
        },
        Layer {
            table: "[vm.page_cache]",
            selector: "eviction",
            default: eviction::DEFAULT,
            entries: eviction_entries("the guest's page cache, vmio sim only"),
            keys: &[],
            params: &d.guest_cache_params,
        },
        Layer {
            table: "[[volume]]",
            selector: "layout",
            default: "required",
            entries: volume::REGISTRY
                .iter()
                .map(|e| Described::new(e, volume::device_count_note(e)))
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[[volume]]",
            selector: "filesystem",
            default: "none: the volume is a block device, its disks regions of it",
            entries: hostfs::REGISTRY
                .iter()
                .map(|e| Described::new(e, "holds one image file per disk: first writes allocate, fdatasync commits the journal".to_string()))
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[scheduler]",
            selector: "name",
            default: sched::DEFAULT,
            entries: sched::REGISTRY
                .iter()
                .map(|e| Described::new(e, String::new()))
                .collect(),
            keys: &[],
            params: &[],
        },
        Layer {
            table: "[page_cache]",
            selector: "eviction",
            default: eviction::DEFAULT,
            entries: eviction_entries("vmio sim only: in vmio serve the kernel evicts"),
            keys: &[],
            params: linux::PARAMS,
        },
        Layer {
            table: "[pdc]",
            selector: "",
            default: "the journal detector of every [[vm.disk]] with cache = \"pdc\"",
            entries: Vec::new(),
            keys: &[],
            params: pdc::PARAMS,
        },
        Layer {
            table: "[nbd]",
            selector: "",
            default: "the NBD path of every [[vm.disk]] with interface = \"nbd\" (vmio calibrate --serve-path measures it)",
            entries: Vec::new(),
            keys: &[],
            params: nbd::PARAMS,
        },
        Layer {
            table: "[host.cache]",
            selector: "profile",
            default: "none: no cache or memory-bus contention; without a profile, [[host.cache.bank]] (level, size, cpus) and the keys below",
            entries: cpu::cache::PROFILES
                .iter()
                .map(|p| Described {
                    name: p.name,
                    help: p.help,
                    note: "keys and [[host.cache.bank]] tables override the profile's".to_string(),
                    params: &[],
                })
                .collect(),
            keys: &[],
            params: cpu::cache::PARAMS,
        },
        Layer {
            table: "[cpu]",
            selector: "model",
            default: cpu::DEDICATED,
            entries: [
                (cpu::DEDICATED, "every host thread has a core of its own: the CPU never limits anything; interface costs are fixed delays (no [cpu] table means this)"),
                (cpu::CFS, "[host] cores shared by Linux's CFS: vCPUs, QEMU's main loop and iothreads, dom0 (xen), kernel threads; I/O and the hypervisor's mechanisms priced as CPU work"),
            ]
            .into_iter()
            .map(|(name, help)| Described {
                name,
                help,
                note: "xen: dom0_vcpus, dom0_pin (a cpuset); pinning: [vm.cputune] vcpupin, emulatorpin, iothreadpin".to_string(),
                params: &[],
            })
            .collect(),
            keys: &[],
            params: &d.cpu_params,
        },
        Layer {
            table: "[[device]]",
            selector: "model",
            default: "required, unless share",
            entries: device::REGISTRY
                .iter()
                .map(|e| {
                    let note = format!("profiles: {} (default)", e.build.profiles.join(", "));
                    Described::new(e, note)
                })
                .collect(),
            keys: &SHARE_KEYS,
            params: device::thin::PARAMS,
        },
    ]
}

/// The help text (`markdown`: the README's tables).
pub fn stack(markdown: bool) -> String {
    let d = Derived::new();
    if markdown {
        params::render_markdown(&layers(&d))
    } else {
        params::render_text(&layers(&d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- BEGIN vmio help stack --markdown -->\n";
    const END: &str = "<!-- END vmio help stack --markdown -->";

    #[test]
    fn the_readme_tables_are_the_generated_ones() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let start = readme.find(BEGIN).expect("README has the BEGIN marker") + BEGIN.len();
        let end = readme.find(END).expect("README has the END marker");
        assert!(
            readme[start..end].trim() == stack(true).trim(),
            "README.md's tables differ from `vmio help stack --markdown`; paste its output \
             between the markers:\n{}",
            stack(true)
        );
    }

    #[test]
    fn help_lists_every_registered_entry_and_parameter() {
        let text = stack(false);
        for name in ["raid0", "mq-deadline", "mcfq", "ssd", "hdd-7200-2tb"] {
            assert!(text.contains(name), "{name}: {text}");
        }
        assert!(
            text.contains(
                "[scheduler] name = none | mq-deadline | cfq | mcfq   (default: mq-deadline)"
            ),
            "{text}"
        );
        assert!(text.contains("slice_sync"), "{text}");
        assert!(
            text.contains("    quantum            cfq, mcfq: "),
            "{text}"
        );
        assert!(text.contains("chunk"), "{text}");
        assert!(
            text.contains("    dirty_ratio        % of the cache dirty at which writers"),
            "{text}"
        );
        assert!(text.contains("default half of [host] memory]"), "{text}");
        assert!(text.contains("gc_policy"), "{text}");
    }

    #[test]
    fn help_lists_the_guest_tables_with_their_own_defaults() {
        let text = stack(false);
        for line in [
            "[vm.disk.filesystem] type = ext4   (default: ext4)",
            "    mount              where the guest mounts it",
            "    journal_size       journal size (mke2fs -J size=)",
            "[vm.page_cache] eviction = clock | lru   (default: clock)",
            "default the VM's memory less 192 MiB, at most half of it]",
            "    read_ahead_kb      the guest's read-ahead window on the disk",
            "[pdc]   (the journal detector of every [[vm.disk]] with cache = \"pdc\")",
            "    min_syncs          times a stream must continue right after a FLUSH",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        // `type` is the selector, not a parameter row; the host's memory default stays.
        assert!(!text.contains("    type "), "{text}");
        assert!(text.contains("default half of [host] memory]"), "{text}");
    }
}
