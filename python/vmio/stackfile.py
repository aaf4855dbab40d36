"""The stack file as the simulator reads it, and the one writer of stack files.

Reading: `load(path)` or `loads(text, path)` give the stack after Rust has parsed, defaulted
and validated it (`vmio._native.load_stack`, crates/vmio-py/src/stackview.rs): the same
checks as `vmio sim`, in its order, with its one-line errors (`VmioError`). Every default is
the one Rust applies, so no Python module repeats one (a disk without `interface` shows
`virtio-blk`, a filesystem without `mount` shows `/mnt/<disk>`, a disk without `size` shows
the rest of its volume of the device models' capacities). The view is read-only: frozen
dataclasses, tuples and read-only mappings; references between tables are names. The block
layer's tables are the Rust specs' own serializations, held as read-only mappings so that no
key is listed here a second time: `Disk.image` (`[vm.disk.image]`: format, cluster_size,
l2_cache_size, l2_cache_entry_size, refcount_cache_size, lazy_refcounts, preallocation,
populated, discard, backing; None where QEMU computes the default), `Disk.queue` (the queues
in effect; `queue_table` as the file set `[vm.disk.queue]`), `Disk.iotune` (the limits set),
`Volume.filesystem.params`.

    stack = load("stack.toml")
    vm = stack.vm(None)                 # the first VM (the simulator's default)
    disk = vm.disks[0]                  # disk.interface, disk.cache, disk.filesystem.mount
    devs = stack.volume_devices(disk.volume)
    disk.format, disk.aio, disk.image["cluster_size"], vm.qemu_version

`stack.doc()` is the same stack as a stack file writes it (Rust's `tables`: every key the
file set or that is in effect, each value as the file takes it); `render(stack.doc())`
parses back into the same stack (crates/vmio-py/src/stackview.rs, `file_doc`).

Writing: `render(doc, comments)` is a stack file's text from a dict of its tables, in the
house style of the shipped stacks (`[[device]]` tables separated by blank lines, arrays of
values on one line; scalars as tomli_w writes them), `comments` as `# ` lines on top;
`write(path, ...)` writes it. Every stack file Python writes comes from it. Only Python that
edits a user's stack on purpose (a study's `stack:` targets, the real engine's served stack)
builds such a dict from the file's own TOML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tomli_w

from vmio.sim import VmioError, native, read_text

Params = Mapping[str, Any]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _ro(m: Mapping[str, Any] | None) -> Params:
    return MappingProxyType(dict(m or {}))


def _frozen(x: Any) -> Any:
    """`x` read-only all the way down: mappings as read-only mappings, lists as tuples."""
    if isinstance(x, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    return x


def _thawed(x: Any) -> Any:
    """`_frozen`'s inverse: dicts and lists, as `render` and tomli_w take them."""
    if isinstance(x, Mapping):
        return {k: _thawed(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_thawed(v) for v in x]
    return x


@dataclass(frozen=True)
class Host:
    cores: int
    memory_bytes: int
    hypervisor: str
    """kvm, xen or native (no VM: the [[vm]]s are groups of host processes)."""
    ept: bool = True
    """`[host] ept`: the processor has EPT (false: shadow paging's exits)."""
    cache: Params | None = None
    """`[host.cache]` (banks, memory bus) when the file has it."""


@dataclass(frozen=True)
class Share:
    """`share = "a"`: the device is a region of device `device`'s hardware."""

    device: str
    start_bytes: int | None
    capacity_bytes: int | None


@dataclass(frozen=True)
class Device:
    name: str
    model: str
    profile: str
    """The profile in effect (the model's first without `profile`; a sharing device's
    hardware's)."""
    settings: Params
    """Every parameter of the model in effect, under its record key (`capacity_bytes`)."""
    params: Params
    """The model parameters as the file writes them."""
    path: str | None
    size_bytes: int | None
    backing_size_bytes: int | None
    """What `vmio serve` sizes the backing file to: `size`, else a sharing device's
    `capacity`."""
    share: Share | None
    start_bytes: int
    """Where the device begins on its hardware (0 unless it is a region of shared hardware)."""
    capacity_bytes: int
    """Its capacity as the simulator sees it: the model's, or its region's."""


@dataclass(frozen=True)
class HostFilesystem:
    """`[[volume]] filesystem`: the host filesystem holding the volume's image files."""

    type: str
    params: Params
    """Its parameters in effect, under their record keys (`alloc_cost_ns`)."""


@dataclass(frozen=True)
class Volume:
    name: str
    layout: str
    devices: tuple[str, ...]
    params: Params
    read_ahead_kb: int
    """Set, or the layout's default."""
    capacity_bytes: int
    filesystem: HostFilesystem | None
    """None: a block device (no `filesystem`, or "none")."""


@dataclass(frozen=True)
class Scheduler:
    name: str
    params: Params


@dataclass(frozen=True)
class PageCache:
    memory_bytes: int
    dirty_ratio: int
    dirty_background_ratio: int
    dirty_expire_ns: int
    writeback_interval_ns: int
    copy_rate_bps: int
    eviction: str


@dataclass(frozen=True)
class Cpu:
    model: str
    params: Params
    dom0_vcpus: int
    dom0_pin: tuple[int, ...] | None


@dataclass(frozen=True)
class CpuTune:
    """`[vm.cputune]`: each cpuset as its cores (None: not pinned)."""

    vcpupin: tuple[tuple[int, ...] | None, ...]
    emulatorpin: tuple[int, ...] | None
    iothreadpin: tuple[tuple[int, ...] | None, ...]


@dataclass(frozen=True)
class Filesystem:
    type: str
    mount: str
    size_bytes: int | None
    data: str
    commit_ns: int
    barrier: bool
    journal_bytes: int | None


@dataclass(frozen=True)
class Disk:
    name: str
    volume: str
    offset_bytes: int
    size_bytes: int
    interface: str
    cache: str
    queue_depth: int | None
    iothread: bool
    read_ahead_kb: int
    """The guest's read-ahead on the disk."""
    aio: str
    """QEMU's I/O engine: threads, native or io_uring."""
    format: str
    """The image format: raw or qcow2."""
    image: Params
    """`[vm.disk.image]` in effect (module doc)."""
    queue: Params
    """The disk's queues in effect: num_queues, queue_size (0: no virtqueue), iothreads,
    wakeup_ns (one host thread wake-up), wake_spread_ns (the mean of the path's wake-up spread
    under dedicated cores, vmio_core::vdisk::spread)."""
    queue_table: Params | None
    """`[vm.disk.queue]` as the file set it (resolved); None without the table."""
    iotune: Params | None
    """`[vm.disk.iotune]`: the limits set, with libvirt's names; None: unthrottled."""
    filesystem: Filesystem | None


@dataclass(frozen=True)
class Vm:
    name: str
    vcpus: int
    memory_bytes: int
    weight: int
    workload: str | None
    """The `workload` job file as written (relative to the stack file's directory)."""
    qemu_version: str
    """The QEMU release (a profile name of `vmio help stack`)."""
    cputune: CpuTune
    page_cache: PageCache
    disks: tuple[Disk, ...]

    def disk(self, name: str) -> Disk:
        for d in self.disks:
            if d.name == name:
                return d
        raise VmioError(
            f"VM '{self.name}': no disk named '{name}'; defined: "
            + ", ".join(d.name for d in self.disks)
        )


@dataclass(frozen=True)
class Stack:
    file: str
    seed: int | None
    host: Host
    devices: tuple[Device, ...]
    volumes: tuple[Volume, ...]
    scheduler: Scheduler
    page_cache: PageCache
    pdc: Params | None
    """`[pdc]` in effect when a disk has cache = "pdc", else None."""
    nbd: Params | None
    """`[nbd]` in effect when a disk has interface = "nbd", else None."""
    cpu: Cpu | None
    """`[cpu]` when the file has it."""
    cpu_model: str
    vms: tuple[Vm, ...]
    tables: Params
    """The stack as a stack file writes it (module doc); `doc()` gives it to `render`."""

    def doc(self) -> dict[str, Any]:
        """The stack's tables as `render` takes them: rendered and parsed, the same stack."""
        return _thawed(self.tables)

    @property
    def native(self) -> bool:
        """No VM: the [[vm]]s are groups of host processes (`hypervisor = "native"`)."""
        return self.host.hypervisor == "native"

    def vm(self, name: str | None) -> Vm:
        """The VM named `name`; None: the first (the simulator's default)."""
        for v in self.vms:
            if name is None or v.name == name:
                return v
        raise VmioError(
            f"{self.file}: no VM named '{name}'; defined: " + ", ".join(v.name for v in self.vms)
        )

    def device(self, name: str) -> Device:
        return next(d for d in self.devices if d.name == name)

    def volume(self, name: str) -> Volume:
        return next(v for v in self.volumes if v.name == name)

    def volume_devices(self, volume: str) -> tuple[Device, ...]:
        """The devices of volume `volume`, in its order."""
        return tuple(self.device(n) for n in self.volume(volume).devices)

    def workload_path(self, vm: Vm) -> Path | None:
        """VM `vm`'s workload job file, relative to the stack file's directory."""
        return None if vm.workload is None else Path(self.file).parent / vm.workload


def _cores(c: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if c is None else tuple(c)


def _page_cache(p: Mapping[str, Any]) -> PageCache:
    return PageCache(**p)


def _volume(v: Mapping[str, Any]) -> Volume:
    fs = v["filesystem"]
    return Volume(
        **{k: x for k, x in v.items() if k not in ("devices", "params", "filesystem")},
        devices=tuple(v["devices"]),
        params=_ro(v["params"]),
        filesystem=None if fs is None else HostFilesystem(fs["type"], _ro(fs["params"])),
    )


def _vm(v: Mapping[str, Any]) -> Vm:
    t = v["cputune"]
    tables = ("image", "queue", "queue_table", "iotune")
    disks = tuple(
        Disk(
            **{k: x for k, x in d.items() if k != "filesystem" and k not in tables},
            **{k: None if d[k] is None else _frozen(d[k]) for k in tables},
            filesystem=Filesystem(**d["filesystem"]) if d["filesystem"] else None,
        )
        for d in v["disks"]
    )
    return Vm(
        name=v["name"],
        vcpus=v["vcpus"],
        memory_bytes=v["memory_bytes"],
        weight=v["weight"],
        workload=v["workload"],
        qemu_version=v["qemu_version"],
        cputune=CpuTune(
            vcpupin=tuple(_cores(c) for c in t["vcpupin"]),
            emulatorpin=_cores(t["emulatorpin"]),
            iothreadpin=tuple(_cores(c) for c in t["iothreadpin"]),
        ),
        page_cache=_page_cache(v["page_cache"]),
        disks=disks,
    )


def from_native(s: Mapping[str, Any]) -> Stack:
    """The typed view of `vmio._native.load_stack`'s dict."""
    cpu = s["cpu"]
    return Stack(
        file=s["file"],
        seed=s["seed"],
        host=Host(
            **{k: x for k, x in s["host"].items() if k != "cache"},
            cache=None if s["host"].get("cache") is None else _frozen(s["host"]["cache"]),
        ),
        devices=tuple(
            Device(
                **{k: x for k, x in d.items() if k not in ("settings", "params", "share")},
                settings=_ro(d["settings"]),
                params=_ro(d["params"]),
                share=Share(**d["share"]) if d["share"] else None,
            )
            for d in s["devices"]
        ),
        volumes=tuple(_volume(v) for v in s["volumes"]),
        scheduler=Scheduler(s["scheduler"]["name"], _ro(s["scheduler"]["params"])),
        page_cache=_page_cache(s["page_cache"]),
        pdc=None if s["pdc"] is None else _ro(s["pdc"]),
        nbd=None if s["nbd"] is None else _ro(s["nbd"]),
        cpu=None
        if cpu is None
        else Cpu(cpu["model"], _ro(cpu["params"]), cpu["dom0_vcpus"], _cores(cpu["dom0_pin"])),
        cpu_model=s["cpu_model"],
        vms=tuple(_vm(v) for v in s["vms"]),
        tables=_frozen(s["tables"]),
    )


def loads(text: str, path: str | Path = "stack.toml") -> Stack:
    """The stack of stack-file `text` as the simulator reads it; `path` names the file in
    errors and is where relative backing and workload paths start."""
    return from_native(native().load_stack(text, str(path)))


def load(path: str | Path) -> Stack:
    """The stack file at `path` as the simulator reads it."""
    return loads(read_text(path, "stack file"), path)


def _value(v: Any) -> str:
    """A TOML value as stack files write it: scalars as tomli_w writes them, an array of
    scalars on one line (`devices = ["a", "b"]`)."""
    if isinstance(v, (list, tuple)) and not any(isinstance(x, Mapping) for x in v):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return tomli_w.dumps({"v": v})[len("v = ") : -1]  # inline tables: tomli_w's layout


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _value(k)


def _is_tables(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(x, Mapping) for x in v)


def _sections(name: str, table: Mapping[str, Any], header: str) -> list[str]:
    """Table `table` at dotted `name` under `header` (`[name]`, `[[name]]`, or "" at the top),
    then its tables and arrays of tables: one section each."""
    keys = [
        f"{_key(k)} = {_value(v)}\n"
        for k, v in table.items()
        if not isinstance(v, Mapping) and not _is_tables(v)
    ]
    out = [header + "".join(keys)] if header or keys else []
    for k, v in table.items():
        sub = f"{name}.{_key(k)}" if name else _key(k)
        if isinstance(v, Mapping):
            out += _sections(sub, v, f"[{sub}]\n")
        elif _is_tables(v):
            for t in v:
                out += _sections(sub, t, f"[[{sub}]]\n")
    return out


def render(doc: Mapping[str, Any], comments: Iterable[str] = ()) -> str:
    """A stack file's text, as vmio writes every stack: `comments` as `# ` lines on top, then
    each table of `doc` (keys in its order) after a blank line, arrays of tables as
    `[[device]]` tables, arrays of values on one line."""
    head = "".join(f"# {c}\n" if c else "#\n" for c in comments)
    return head + "\n".join(_sections("", doc, ""))


def write(path: str | Path, doc: Mapping[str, Any], comments: Iterable[str] = ()) -> Path:
    """Write `render(doc, comments)` to `path`; returns the path."""
    p = Path(path)
    p.write_text(render(doc, comments), encoding="utf-8")
    return p
