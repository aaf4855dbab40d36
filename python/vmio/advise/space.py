"""The knobs `vmio advise` varies: each a name, its help, its candidate values and the edit
that sets one value in a stack (parsed TOML, written back by `vmio.stackfile.render`) or in
a fio job (`vmio.study.runner.set_job_option`, the Rust fio parser's edit).

A knob is declared once, by `knob` on its edit, as fio's engines declare their options
(fio/options.c, `struct fio_option`: a name, a help line, the accepted values and the code
that sets it); that declaration is all there is to add one. A key of every VM disk is one
call; any other edit is the decorated function:

    knob("cache", "QEMU's cache mode of the VM's disks ([[vm.disk]] cache)",
         ("none", "writeback", "writethrough", "directsync"), vm=True,
         current=_disk_attr("cache"))(_disks("cache"))

    @knob("queue_depth", "the job's queue depth (fio iodepth)", ("1", "4", "16"),
          kind="job", current=_job_option(("iodepth",), "1"))
    def _queue_depth(c: Config, value: str) -> None:
        c.set_job("iodepth", value)

Scope. The knobs act on one VM (`--vm`, else the stack's first, the simulator's default):
every disk of it, and every volume under those disks; `[scheduler]` is the host's. A knob
that cannot act on the stack says why in one line (`Knob.applies`): the VM knobs on a
native stack (`host.hypervisor = "native"`: no VMM; the simulator refuses cache modes but
`none` there), `layout` when no volume under the VM has two devices.

The space is the product of the varied knobs' values (`Space.size`, counted before anything
runs); a configuration is one value per knob (`Config`'s `values`), applied in the knobs'
declaration order. Values are strings as a stack file or a job writes them; the edit turns
one into the TOML value (`true`, `512`).

Sources of the values: QEMU's cache modes and aio engines (qemu-options.hx `-drive
cache=, aio=`), libvirt's `<driver iothread=>`, Linux's schedulers (block/mq-deadline.c,
`none`; CFQ in Linux <= 4.20), LVM's and md's layouts (lvcreate(8) `-i`, mdadm(8)
`--level=0`), the read-ahead sysfs knob (`queue/read_ahead_kb`), fio's `iodepth` and `bs`
(fio/HOWTO.rst); each value's meaning in the simulator: `vmio help stack`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmio import stackfile
from vmio.real.engine import job_sections
from vmio.sim import VmioError
from vmio.study.runner import set_job_option


@dataclass
class Config:
    """One configuration being built: the stack's tables (a deep copy of the file's), the job's
    text, and the scope the knobs act on."""

    doc: dict[str, Any]
    job_text: str
    view: stackfile.Stack
    vm: str
    measure: str | None
    """The job section whose options job knobs set (None: wherever the option is set)."""

    def vm_table(self) -> dict[str, Any]:
        return next(v for v in self.doc.get("vm", []) if v.get("name") == self.vm)

    def disks(self) -> list[dict[str, Any]]:
        """The VM's `[[vm.disk]]` tables."""
        return list(self.vm_table().get("disk", []))

    def volumes(self) -> list[dict[str, Any]]:
        """The `[[volume]]` tables under the VM's disks."""
        names = {d.volume for d in self.view.vm(self.vm).disks}
        return [v for v in self.doc.get("volume", []) if v.get("name") in names]

    def set_job(self, option: str, value: str) -> None:
        target = f"{self.measure}.{option}" if self.measure else option
        self.job_text = set_job_option(self.job_text, target, value)


Edit = Callable[[Config, str], None]


@dataclass(frozen=True)
class Knob:
    """A knob (module doc): `values` its default candidates, `choices` what `--values` may
    name (None: any value the simulator takes)."""

    name: str
    help: str
    values: tuple[str, ...]
    edit: Edit
    kind: str
    """`stack` or `job`."""
    choices: tuple[str, ...] | None
    default: bool
    """In the default `--vary`."""
    vm: bool
    """Acts on the VM's disks through its VMM (not on a native stack)."""
    applies_to: Callable[[stackfile.Stack, str], str | None] | None
    current_of: Callable[[stackfile.Stack, str, str, str | None], str]

    def applies(self, view: stackfile.Stack, vm: str) -> str | None:
        """None when the knob acts on the stack, else why not (one line)."""
        if self.vm and view.native:
            return 'the stack is native (host.hypervisor = "native"): no VMM'
        return self.applies_to(view, vm) if self.applies_to is not None else None

    def current(self, view: stackfile.Stack, vm: str, job_text: str, measure: str | None) -> str:
        """The value the stack and job have now (the first disk's, the first volume's...)."""
        return self.current_of(view, vm, job_text, measure)


KNOBS: dict[str, Knob] = {}
"""Every knob, by name, in declaration order."""


def knob(
    name: str,
    help: str,
    values: Sequence[str],
    *,
    current: Callable[[stackfile.Stack, str, str, str | None], str],
    kind: str = "stack",
    choices: Sequence[str] | None = None,
    default: bool = False,
    vm: bool = False,
    applies: Callable[[stackfile.Stack, str], str | None] | None = None,
) -> Callable[[Edit], Edit]:
    """Declare knob `name` whose edit is the decorated function (module doc)."""

    def register(edit: Edit) -> Edit:
        if name in KNOBS:
            raise ValueError(f"knob '{name}' declared twice")
        KNOBS[name] = Knob(
            name,
            help,
            tuple(values),
            edit,
            kind,
            None if choices is None else tuple(choices),
            default,
            vm,
            applies,
            current,
        )
        return edit

    return register


def _disk0(view: stackfile.Stack, vm: str) -> stackfile.Disk:
    return view.vm(vm).disks[0]


def _volume0(view: stackfile.Stack, vm: str) -> stackfile.Volume:
    return view.volume(_disk0(view, vm).volume)


def _job_option(names: Sequence[str], default: str) -> Callable[..., str]:
    """The current value of a fio option (any of `names`) in the measured job (else the
    first job), fio's `default` when no section sets it."""

    def current(view: stackfile.Stack, vm: str, job_text: str, measure: str | None) -> str:
        jobs = job_sections(job_text)
        opts = next((o for n, o in jobs if n == measure), jobs[0][1] if jobs else {})
        return next((opts[n] for n in names if n in opts), default)

    return current


def _bool(text: str) -> bool:
    return text == "true"


def _int(text: str) -> int | str:
    return int(text) if _kib(text) else text


# The knobs whose values are a stack integer of KiB (read_ahead_kb): ASCII digits only
# (str.isdigit also holds for '²', which int() refuses) and at most 19 of them (a TOML
# integer is a signed 64-bit one, TOML 1.0 "Integer"; Python's int() refuses over 4,300).
KIB_KNOBS = ("read_ahead", "host_read_ahead")


def _kib(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 19


def _striped_volumes(view: stackfile.Stack, vm: str) -> str | None:
    vols = {d.volume for d in view.vm(vm).disks}
    if any(len(view.volume(v).devices) >= 2 for v in vols):
        return None
    shown = ", ".join(f"'{v}' ({', '.join(view.volume(v).devices)})" for v in sorted(vols))
    return f"no volume under VM '{vm}' has two devices to lay out: {shown}"


@knob(
    "layout",
    "volume layout of the volumes under the VM's disks ([[volume]] layout): LVM linear, "
    "LVM striped (its stripe_size, default 64k), md RAID 0 (its chunk, default 512k); "
    "volumes of two devices or more",
    ("linear", "stripe", "raid0"),
    choices=("linear", "stripe", "raid0"),
    default=True,
    applies=_striped_volumes,
    current=lambda view, vm, _j, _m: _volume0(view, vm).layout,
)
def _layout(c: Config, value: str) -> None:
    for vol in c.volumes():
        if len(vol.get("devices", [])) < 2:
            continue
        vol["layout"] = value
        # The stack accepts stripe_size only with "stripe" and chunk only with "raid0".
        if value != "stripe":
            vol.pop("stripe_size", None)
        if value != "raid0":
            vol.pop("chunk", None)


def _disks(key: str, typed: Callable[[str], Any] = str) -> Edit:
    """The edit that sets `key` of every disk of the VM."""

    def edit(c: Config, value: str) -> None:
        for disk in c.disks():
            disk[key] = typed(value)

    return edit


def _disk_attr(attr: str) -> Callable[..., str]:
    """The current value: `attr` of the VM's first disk, as a stack file writes it."""

    def current(view: stackfile.Stack, vm: str, _job: str, _measure: str | None) -> str:
        value = getattr(_disk0(view, vm), attr)
        return str(value).lower() if isinstance(value, bool) else str(value)

    return current


knob(
    "cache",
    "QEMU's cache mode of the VM's disks ([[vm.disk]] cache); unsafe (flushes ignored) and "
    "pdc only when named with --values",
    ("none", "writeback", "writethrough", "directsync"),
    choices=("none", "writeback", "writethrough", "directsync", "unsafe", "pdc"),
    default=True,
    vm=True,
    current=_disk_attr("cache"),
)(_disks("cache"))

knob(
    "interface",
    "the VM's disk interface ([[vm.disk]] interface): virtio-blk, virtio-scsi, emulated IDE",
    ("virtio-blk", "virtio-scsi", "ide"),
    choices=("virtio-blk", "virtio-scsi", "ide"),
    default=True,
    vm=True,
    current=_disk_attr("interface"),
)(_disks("interface"))


@knob(
    "scheduler",
    "the host's I/O scheduler ([scheduler] name); the file's scheduler parameters stay with "
    "its own scheduler only",
    ("none", "mq-deadline", "cfq"),
    choices=("none", "mq-deadline", "cfq", "mcfq"),
    default=True,
    current=lambda view, _vm, _j, _m: view.scheduler.name,
)
def _scheduler(c: Config, value: str) -> None:
    table = c.doc.setdefault("scheduler", {})
    if table.get("name", c.view.scheduler.name) != value:
        table.clear()  # parameters of another scheduler (read_expire, slice_idle...)
    table["name"] = value


knob(
    "format",
    "the VM disks' image format ([[vm.disk]] format): raw, qcow2 (QEMU's defaults for its "
    "[vm.disk.image] keys)",
    ("raw", "qcow2"),
    choices=("raw", "qcow2"),
    default=True,
    vm=True,
    current=_disk_attr("format"),
)(_disks("format"))

knob(
    "aio",
    "QEMU's I/O engine of the VM's disks ([[vm.disk]] aio): threads, native (needs cache "
    "none or directsync), io_uring",
    ("threads", "native", "io_uring"),
    choices=("threads", "native", "io_uring"),
    default=True,
    vm=True,
    current=_disk_attr("aio"),
)(_disks("aio"))

knob(
    "iothread",
    "a dedicated QEMU iothread for each VM disk ([[vm.disk]] iothread; false: the main loop)",
    ("false", "true"),
    choices=("false", "true"),
    default=True,
    vm=True,
    current=_disk_attr("iothread"),
)(_disks("iothread", _bool))


@knob(
    "queue_depth",
    "the job's queue depth (fio iodepth; in the --measure job only when given)",
    ("1", "2", "4", "8", "16", "32", "64"),
    kind="job",
    current=_job_option(("iodepth",), "1"),
)
def _queue_depth(c: Config, value: str) -> None:
    c.set_job("iodepth", value)


@knob(
    "bs",
    "the job's block size (fio bs; in the --measure job only when given)",
    ("4k", "16k", "64k", "256k", "1m"),
    kind="job",
    current=_job_option(("bs", "blocksize"), "4k"),
)
def _bs(c: Config, value: str) -> None:
    c.set_job("bs", value)


knob(
    "read_ahead",
    "the guest's read-ahead on the VM's disks, KiB ([[vm.disk]] read_ahead_kb; buffered "
    "I/O in the guest only)",
    ("128", "512", "2048"),
    vm=True,
    current=_disk_attr("read_ahead_kb"),
)(_disks("read_ahead_kb", _int))


@knob(
    "host_read_ahead",
    "the host's read-ahead on the volumes under the VM's disks, KiB ([[volume]] "
    "read_ahead_kb; host page-cache reads only)",
    ("128", "512", "4096"),
    current=lambda view, vm, _j, _m: str(_volume0(view, vm).read_ahead_kb),
)
def _host_read_ahead(c: Config, value: str) -> None:
    for vol in c.volumes():
        vol["read_ahead_kb"] = _int(value)


@knob(
    "guest_scheduler",
    "the guest's I/O scheduler on the VM's disks ([vm.disk.guest_queue] scheduler)",
    ("none", "mq-deadline"),
    choices=("none", "mq-deadline"),
    vm=True,
    current=lambda view, vm, _j, _m: "default",
)
def _guest_scheduler(c: Config, value: str) -> None:
    for disk in c.disks():
        table = disk.setdefault("guest_queue", {})
        if table.get("scheduler") != value:
            table.pop("read_expire", None)
            table.pop("write_expire", None)
        table["scheduler"] = value


@knob(
    "qemu_version",
    "the VM's QEMU release ([[vm]] qemu_version: virtqueue sizes, queues per disk, io_uring)",
    ("2.11", "5.2", "7.2", "8.2"),
    choices=("2.11", "5.2", "7.2", "8.2"),
    vm=True,
    current=lambda view, vm, _j, _m: view.vm(vm).qemu_version,
)
def _qemu_version(c: Config, value: str) -> None:
    c.vm_table()["qemu_version"] = value


def default_knobs() -> list[str]:
    """The knobs varied without `--vary`."""
    return [k.name for k in KNOBS.values() if k.default]


def knob_named(name: str, option: str = "--vary") -> Knob:
    """The knob `name`; a `VmioError` naming `option`, the closest knob and every accepted
    one otherwise."""
    if name in KNOBS:
        return KNOBS[name]
    close = difflib.get_close_matches(name, list(KNOBS), n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise VmioError(f"{option}: unknown knob '{name}'; {hint}accepted: {', '.join(KNOBS)}")


@dataclass(frozen=True)
class Dimension:
    knob: Knob
    values: tuple[str, ...]


@dataclass(frozen=True)
class Space:
    """The varied knobs with their values, and the knobs left out with why."""

    dims: tuple[Dimension, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())
    """(knob, why it does not apply): one line each in the output."""

    @property
    def size(self) -> int:
        return math.prod(len(d.values) for d in self.dims)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.knob.name for d in self.dims)

    def config(self, index: int) -> tuple[str, ...]:
        """Configuration `index` (0..size-1) in product order, the last knob fastest."""
        out = []
        for d in reversed(self.dims):
            index, i = divmod(index, len(d.values))
            out.append(d.values[i])
        return tuple(reversed(out))

    def order(self, values: tuple[str, ...]) -> tuple[int, ...]:
        """A configuration's place in product order (a value outside a knob's list: after
        its values)."""
        return tuple(
            d.values.index(v) if v in d.values else len(d.values)
            for d, v in zip(self.dims, values, strict=True)
        )

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        for i in range(self.size):
            yield self.config(i)


def parse_values(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """`--values KNOB=V1,V2` (repeatable) as {knob: values}, each value checked against the
    knob's choices."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        name, sep, rest = item.partition("=")
        values = tuple(v.strip() for v in rest.split(",") if v.strip())
        if not sep or not values:
            raise VmioError(f"--values: '{item}' must be KNOB=VALUE[,VALUE...]")
        k = knob_named(name.strip(), "--values")
        for v in values:
            if k.choices is not None and v not in k.choices:
                raise VmioError(
                    f"--values {k.name}: '{v}' is not valid; accepted: {', '.join(k.choices)}"
                )
            if k.name in KIB_KNOBS and not _kib(v):
                raise VmioError(
                    f"--values {k.name}: '{v[:40]}{'…' if len(v) > 40 else ''}' is not valid; "
                    "accepted: a whole number of KiB "
                    "(digits 0-9, at most 19)"
                )
        if len(set(values)) != len(values):
            raise VmioError(f"--values {k.name}: a value is given twice")
        out[k.name] = values
    return out


def build(
    view: stackfile.Stack,
    vm: str,
    vary: Sequence[str] | None,
    values: Mapping[str, tuple[str, ...]],
) -> Space:
    """The space of the knobs `vary` and those of `values` (without either: `default_knobs`),
    each knob with `values`' list or its own; knobs that do not apply to the stack are left
    out with why."""
    names = list(vary or ()) if vary is not None or values else default_knobs()
    names += [n for n in values if n not in names]
    dims, skipped = [], []
    for name in dict.fromkeys(names):
        k = knob_named(name)
        why = k.applies(view, vm)
        if why is not None:
            skipped.append((k.name, why))
            continue
        dims.append(Dimension(k, values.get(k.name, k.values)))
    return Space(tuple(dims), tuple(skipped))


def apply(
    doc: Mapping[str, Any],
    job_text: str,
    view: stackfile.Stack,
    vm: str,
    measure: str | None,
    space: Space,
    values: Sequence[str],
) -> tuple[str, str]:
    """The stack text and job text of configuration `values` of `space`."""
    import copy

    c = Config(copy.deepcopy(dict(doc)), job_text, view, vm, measure)
    for d, v in zip(space.dims, values, strict=True):
        d.knob.edit(c, v)
    return stackfile.render(c.doc), c.job_text
