//! The virtual disk layer's table, `[[vm.disk]]`: how QEMU gives a VM a slice of a volume
//! (its interface, [`Interface::REGISTRY`]; its host cache mode, [`CacheMode::REGISTRY`];
//! queue depth, iothread) and what the guest makes of it (`read_ahead_kb` and
//! `[vm.disk.filesystem]`, read by [`crate::guest::params`]).
//!
//! ```text
//! interface: a name or alias of Interface::REGISTRY (default virtio-blk; host under
//!            hypervisor = "native", the only one accepted there)
//! cache:     a name of CacheMode::REGISTRY (default writeback; none, the only one, under
//!            hypervisor = "native": the group's page cache is the host kernel's)
//! offset, size: sizes, multiples of 4k (size 0: the rest of the volume, resolved by the
//!            engine that knows the volume's capacity)
//! queue_depth: at least 1; read_ahead_kb: guest::params::read_ahead_bytes
//! format:    raw (default) | qcow2; its parameters in [vm.disk.image] (crate::image::spec);
//!            size stays the guest-visible (virtual) size, the disk's region of its volume
//!            is ImageSpec::file_bytes(size) (an image and its backing files)
//! aio:       queue::Aio (threads, native, io_uring; queue::parse_aio's rules)
//! [vm.disk.queue]: queue::QueueSpec (num_queues, queue_size, iothreads, wakeup)
//! [vm.disk.guest_queue]: crate::guest::blk::GuestQueueSpec (the guest's scheduler,
//!            nr_requests, max_sectors_kb, nomerges; defaults resolved by the engine)
//! ```
//!
//! The VM's QEMU release (`[[vm]] qemu_version`, [`qemu::PROFILES`]) and vCPU count reach a
//! disk through its [`DiskContext`].
//!
//! The stack resolves `volume` (a reference to a `[[volume]]`) and checks that a VM's disks
//! have distinct names and that disks of one volume do not overlap.

pub mod qemu;
pub mod queue;
pub mod spread;

pub use queue::{Aio, QueueSpec, RawQueue};

use crate::cache::CacheMode;
use crate::guest::blk::GuestQueueSpec;
use crate::guest::params::{self, FsSpec};
use crate::image::{Format, ImageSpec};
use crate::table::{FieldError, SizeValue, Table};
use crate::throttle::IotuneSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Virtual disk interfaces (QEMU device models).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interface {
    VirtioBlk,
    VirtioScsi,
    Ide,
    /// An NBD export reached by an NBD client on the host (`[nbd]`, [`crate::nbd`]).
    Nbd,
    /// No VM: the host's own block layer (`hypervisor = "native"`).
    Host,
}

impl Interface {
    /// Every interface with its stack-file name, accepted aliases and help line: the one
    /// declaration the stack parser, its error lines and `vmio help stack` read.
    pub const REGISTRY: [(
        Interface,
        &'static str,
        &'static [&'static str],
        &'static str,
    ); 5] = [
        (
            Interface::VirtioBlk,
            "virtio-blk",
            &["virtio"],
            "paravirtual block device (QEMU virtio-blk-pci)",
        ),
        (
            Interface::VirtioScsi,
            "virtio-scsi",
            &["scsi"],
            "paravirtual SCSI host adapter with one disk (QEMU virtio-scsi-pci + scsi-hd)",
        ),
        (
            Interface::Ide,
            "ide",
            &[],
            "emulated IDE disk (QEMU ide-hd): port I/O, one command per channel",
        ),
        (
            Interface::Nbd,
            "nbd",
            &[],
            "an NBD export of vmio serve, reached by an NBD client on the host over a Unix socket (fio's nbd engine, qemu-io); costs in [nbd]",
        ),
        (
            Interface::Host,
            "host",
            &["native"],
            "no VM: the host's own block layer (hypervisor = \"native\" only)",
        ),
    ];

    /// The accepted names, for error lines: `virtio-blk, virtio-scsi, ide`.
    pub fn accepted() -> String {
        Self::REGISTRY.map(|(_, n, _, _)| n).join(", ")
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::REGISTRY
            .iter()
            .find(|(_, n, aliases, _)| *n == s || aliases.contains(&s))
            .map(|(i, _, _, _)| *i)
    }

    pub fn name(self) -> &'static str {
        Self::REGISTRY
            .iter()
            .find(|(i, _, _, _)| *i == self)
            .map_or("", |(_, n, _, _)| n)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDisk {
    pub name: String,
    pub volume: String,
    pub offset: Option<SizeValue>,
    pub size: Option<SizeValue>,
    pub interface: Option<String>,
    pub cache: Option<String>,
    pub queue_depth: Option<u32>,
    pub iothread: Option<bool>,
    pub aio: Option<String>,
    /// `[vm.disk.queue]`: [`queue::QueueSpec`].
    pub queue: Option<RawQueue>,
    pub read_ahead_kb: Option<u64>,
    /// `[vm.disk.filesystem]`: `type`, `mount` and [`crate::guest::params::FS_PARAMS`].
    pub filesystem: Option<BTreeMap<String, toml::Value>>,
    /// `raw` (default) or `qcow2` ([`Format::REGISTRY`]).
    pub format: Option<String>,
    /// `[vm.disk.image]`: [`crate::image::spec::PARAMS`] and `backing`.
    pub image: Option<BTreeMap<String, toml::Value>>,
    /// `[vm.disk.iotune]`: [`crate::throttle::KEYS`].
    pub iotune: Option<BTreeMap<String, toml::Value>>,
    /// `[vm.disk.guest_queue]`: [`crate::guest::blk::PARAMS`] and the scheduler's.
    pub guest_queue: Option<BTreeMap<String, toml::Value>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DiskSpec {
    pub name: String,
    /// Index into the stack's volumes.
    pub volume: usize,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub interface: Interface,
    pub cache: CacheMode,
    pub queue_depth: Option<u32>,
    pub iothread: bool,
    /// QEMU's I/O engine (shown when not the default, threads).
    #[serde(skip_serializing_if = "Aio::is_threads")]
    pub aio: Aio,
    /// The disk's queues and VMM threads (shown when the file has `[vm.disk.queue]`).
    #[serde(skip_serializing_if = "Option::is_none", rename = "queue")]
    pub queue_table: Option<QueueSpec>,
    #[serde(skip)]
    pub queue: QueueSpec,
    /// The guest's read-ahead window on this disk (`read_ahead_kb`), in bytes.
    pub read_ahead_bytes: u64,
    /// The guest filesystem on the disk; None: the guest uses the raw block device.
    pub filesystem: Option<FsSpec>,
    /// The image format of the disk's file (left out of the effective stack when raw).
    #[serde(skip_serializing_if = "Format::is_raw")]
    pub format: Format,
    /// `[vm.disk.image]` (raw without the table: left out of the effective stack).
    #[serde(skip_serializing_if = "ImageSpec::is_plain_raw")]
    pub image: ImageSpec,
    /// QEMU's I/O throttling of the disk (`[vm.disk.iotune]`); None: unthrottled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iotune: Option<IotuneSpec>,
    /// The guest's block layer on the disk (`[vm.disk.guest_queue]`; left out of the
    /// effective stack without the table: Linux's defaults, [`GuestQueueSpec::resolve`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_queue: Option<GuestQueueSpec>,
}

/// What a disk's checks read beyond its table: its volume (resolved by the stack, an index
/// into its volumes), the host's hypervisor, and its VM's vCPUs and QEMU release.
#[derive(Clone, Copy, Debug)]
pub struct DiskContext<'a> {
    pub volume: usize,
    pub hypervisor: &'a str,
    pub vcpus: u32,
    pub qemu: &'a qemu::QemuProfile,
}

/// `[[vm.disk]]` at `field` (`vm[0].disk[1]`).
impl Table for DiskSpec {
    const KEY: &'static str = "disk";
    type Raw = RawDisk;
    type Context<'a> = DiskContext<'a>;

    fn from_raw(d: &RawDisk, field: &str, cx: DiskContext) -> Result<Self, FieldError> {
        let f = |k: &str| format!("{field}.{k}");
        let native = cx.hypervisor == "native";
        let default_interface = if native { "host" } else { "virtio-blk" };
        let interface_name = d
            .interface
            .clone()
            .unwrap_or_else(|| default_interface.into());
        let interface = Interface::parse(&interface_name).ok_or_else(|| {
            FieldError::new(
                f("interface"),
                format!(
                    "'{interface_name}' is not valid; accepted: {}",
                    Interface::accepted()
                ),
            )
        })?;
        if native != (interface == Interface::Host) {
            return Err(FieldError::new(
                f("interface"),
                if native {
                    format!("'{interface_name}' needs a VM, but host.hypervisor is \"native\"; accepted: host")
                } else {
                    format!(
                        "'host' is only valid with host.hypervisor = \"native\" (here \"{}\"); accepted: virtio-blk, virtio-scsi, ide, nbd",
                        cx.hypervisor
                    )
                },
            ));
        }
        let default_cache = if native { "none" } else { "writeback" };
        let cache_name = d.cache.clone().unwrap_or_else(|| default_cache.into());
        let cache = CacheMode::parse(&cache_name).ok_or_else(|| {
            FieldError::new(
                f("cache"),
                format!(
                    "'{cache_name}' is not valid; accepted: {}",
                    CacheMode::accepted()
                ),
            )
        })?;
        if native && cache != CacheMode::None {
            return Err(FieldError::new(
                f("cache"),
                format!("'{cache_name}' needs a VMM, but host.hypervisor is \"native\": the host kernel's page cache is the group's [vm.page_cache]; accepted: none"),
            ));
        }
        let offset = match &d.offset {
            Some(s) => s.bytes(&f("offset"))?,
            None => 0,
        };
        let size = match &d.size {
            Some(s) => s.bytes(&f("size"))?,
            None => 0,
        };
        if offset % 4096 != 0 || size % 4096 != 0 {
            return Err(FieldError::new(
                f("offset"),
                "offset and size must be multiples of 4k",
            ));
        }
        if d.queue_depth == Some(0) {
            return Err(FieldError::new(f("queue_depth"), "must be at least 1"));
        }
        let read_ahead_bytes = params::read_ahead_bytes(d.read_ahead_kb)
            .map_err(|m| FieldError::new(f("read_ahead_kb"), m))?;
        let filesystem = match &d.filesystem {
            None => None,
            Some(t) => Some(FsSpec::from_raw(t, &f(FsSpec::KEY), &d.name)?),
        };
        let format = match &d.format {
            None => Format::Raw,
            Some(name) => Format::parse(name).ok_or_else(|| {
                FieldError::new(
                    f("format"),
                    format!(
                        "'{}' is not valid; accepted: {}",
                        crate::units::quote(name),
                        Format::accepted()
                    ),
                )
            })?,
        };
        let image = ImageSpec::from_raw(
            d.image.as_ref().unwrap_or(&BTreeMap::new()),
            &f(ImageSpec::KEY),
            format,
        )?;
        let iotune = match &d.iotune {
            None => None,
            Some(t) => Some(IotuneSpec::from_raw(t, &f(IotuneSpec::KEY), ())?),
        };
        let guest_queue = match &d.guest_queue {
            None => None,
            Some(t) => Some(GuestQueueSpec::from_raw(t, &f(GuestQueueSpec::KEY), ())?),
        };
        let aio = queue::parse_aio(d.aio.as_deref(), &f("aio"), cache, cx.qemu)?;
        let iothread = d.iothread.unwrap_or(false);
        let qcx = queue::QueueContext {
            interface,
            vcpus: cx.vcpus,
            qemu: cx.qemu,
            iothread,
        };
        let queue_table = match &d.queue {
            Some(q) => Some(QueueSpec::from_raw(q, &f(QueueSpec::KEY), qcx)?),
            None => None,
        };
        let queue = queue_table.unwrap_or_else(|| QueueSpec::defaults(&qcx));
        Ok(DiskSpec {
            name: d.name.clone(),
            volume: cx.volume,
            offset_bytes: offset,
            size_bytes: size,
            interface,
            cache,
            queue_depth: d.queue_depth,
            iothread,
            aio,
            queue_table,
            queue,
            read_ahead_bytes,
            filesystem,
            format,
            image,
            iotune,
            guest_queue,
        })
    }
}
