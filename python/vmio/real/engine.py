"""`vmio study --engine real`: a study's points run for real on this machine, with fio 3.33,
instead of in the simulator; the results go into the same files, in the same schema.

`--real-mode` decides the mode (`plan`, `_mode`); `auto`, the default, is host for a native
stack and serve for a VM stack; serve or guest on a native stack is skipped:

- **host** (`[host] hypervisor = "native"`: the `[[vm]]` is a group of host processes on the
  host's block layer): fio runs the job on the host. The job's file `/dev/<disk>` (a disk of
  the job's VM, `filename=`; none: the VM's first disk) becomes the file of the device under
  the disk's volume: the device's `path` (a file or block device, as the stack gives it) or,
  when it has none, `DIR/<device>.img` of `--real-size` bytes. `directory=<mount>` of a disk's
  `[vm.disk.filesystem]` becomes `DIR/fs-<disk>/`, a directory of the filesystem under DIR
  (the host's own). ioengine, direct, iodepth and the rest stay as the job says.
- **serve** (every other hypervisor: a VM stack): the stack is served for real by `vmio
  serve` (a `python -m vmio serve` process on a Unix socket in a temporary directory,
  `vmio.real.serve.start_vmio`), every device's `path` set to `DIR/<device>.img` and its `size` to
  `--real-size`: the volume layout, the host cache mode of each VM disk and the scheduler with
  the VMs' weights are the server's, real (docs/serve.md). fio's nbd engine (fio/engines/nbd.c,
  libnbd) runs the job against the VM's export: `ioengine=nbd`, `uri=nbd+unix:///VM/DISK?
  socket=...`, `filename=VM/DISK` (a name only: the engine opens no file), `direct=0` (the
  export's cache mode decides O_DIRECT on the host); a synchronous engine's job (psync, sync,
  pvsync, pvsync2) gets `iodepth=1`, the depth it had. VM disks that do not fit in the served
  volume (`--real-size` per device) are laid out anew, the volume shared evenly.
- **guest** (`--real-mode guest`, a VM stack): served as in serve mode; the job runs with the
  host's fio in a QEMU guest (`vmio.real.qemu.run_fio`) whose disk is the VM's export through
  QEMU's NBD client, on the disk's `interface` (`qemuguest.INTERFACES`: virtio-blk /dev/vda,
  ide and virtio-scsi /dev/sda; others skipped): `filename=` that device, the rest as the job
  says. Each VM boots its own guest, all at once. The accelerator is `--real-accel`
  (`qemuguest.accelerator`: auto is kvm when a probe boot ends, else tcg). Bounds
  (`boot_timeout`, `run_timeout`):

      boot   BOOT_TIMEOUT[accel]                          (tcg 180 s, kvm 60 s)
      run    RUN_MARGIN + SLOWDOWN[accel] x max over VMs of sum over jobs of
             (runtime + ramp_time)                        (120 s + 10x tcg, 2x kvm);
             NO_RUNTIME_TIMEOUT (1800 s) when a job has no runtime

In every mode a job `size` larger than its target (the file, the export) is cut to it. What
the job, the stack and the machine then were goes into the point's JSON. Without a job file,
every VM's `workload` runs at once, each in its own fio process (in serve mode all against
one server, so the scheduler shares the devices among them by the VMs' weights), and their
jobs are merged as the simulator merges them (`merge`).

Skipped points (`Skipped`, one line of reason each; `vmio.study.runner` prints each once, writes
`skipped.csv` and leaves them out of the tables), checked in this order:

    --real-mode serve or guest on a native stack       no VM disk to serve
    a job on files or needing a CPU                    "needs a guest (QEMU)": cpuio, a
                                                       filename that is no disk of the VM;
                                                       in serve mode also directory= and a
                                                       disk with a [vm.disk.filesystem]; in
                                                       guest mode the same, as
                                                       GUEST_HAS_NO_FS
    a device of a class this machine lacks             hdd on a flash disk, ssd/flash on an
      (unless --substitute: run on files anyway,       hdd, ram off tmpfs, an aged ssd
       the substitutions recorded)                     (`precondition = "aged"`), more devices
                                                       than distinct disks under them (a
                                                       device with `share` is on its
                                                       hardware's disk: not counted)
    host mode, a volume of several devices             needs md/dm, which the engine does not
                                                       build (a VM stack is served instead)
    serve, guest mode: one VM's jobs on several disks  one export per fio process
    guest mode, a disk of an interface no guest has    interface = "nbd" (serve mode runs it)
    fio --parse-only refuses the edited job            a vmio extension (iozone=, cpu_profile=)

A disk's class: tmpfs is `memory`; a block device whose queue is rotational is `hdd`, unless
its driver is paravirtual (virtio_blk, xen-blkfront: drivers/block/virtio_blk.c
`virtblk_probe` leaves the queue rotational, the kernel's default, whatever the host's
storage is); else `flash`.

Not real: in serve mode (said in each point's `vmio.notes`), the guest (its kernel, virtio-blk
or IDE driver, vCPU and exits) is replaced by fio's nbd client on the host, so the path
measured is NBD over a Unix socket into vmio's server, not a VM's (but for a disk with
`interface = "nbd"`, which models that very path with `[nbd]`: its client is the one the
stack says, and its note says so); in both modes the stack's `[cpu]`, `[page_cache]` and
`[vm]` memory settings are the simulator's only (the host's kernel and page cache are what
they are). In guest mode under TCG (software emulation, the only way guests boot where KVM
does not) the timings mean nothing: the point's `vmio.timing` is "functional-only" and
`vmio compare` leaves it out.

A real point's JSON is fio's JSON as fio wrote it, plus a `vmio` object:

    engine "real", mode "host"|"serve"|"guest", machine (vmio.real.machine.describe of DIR and
    the device paths), stack (the effective stack as run, parsed; a substituted device carries
    `real_substitute` = why), stack_file, job_file, vm, targets {job name: what fio ran on},
    replaced {option: value set in the job} (vm, targets, replaced: the first VM's), vms
    [{name, weight, bw_bytes, job_file, targets, replaced}] (one per VM that ran a job, as
    the simulator's `vmio.vms`), substituted [reasons], seed (the experiment's: fio's own
    random seeds are its defaults), notes [...], server (serve and guest modes: `vmio
    serve`'s final per-export statistics), accel "tcg"|"kvm" and timing
    "functional-only" (tcg) | "measured" (kvm) (guest mode); every job carries `vmio_vm`, as
    the simulator's

Images `DIR/<device>.img` are written through once (`vmio.real.calibrate.write_through`: fio's
sequential 1 MiB writes, O_DIRECT where the file takes it) so reads hit
written blocks, and reused by later points and runs while their size is `--real-size`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio import stackfile
from vmio.real import machine, machineprofile
from vmio.results import total_bw_bytes
from vmio.sim import VmioError, native, parse_size, parse_toml

MIB = 1 << 20
DEFAULT_SIZE = 1 << 30
"""`--real-size`: each device's image file."""

PARAVIRTUAL = ("virtio_blk", "xen_blkfront", "xen-vbd")
"""Disk drivers whose rotational flag is the kernel's default, not the storage's."""
SYNC_ENGINES = ("psync", "sync", "pvsync", "pvsync2", "vsync")
DEVICE_CLASS = {"hdd": "hdd", "ssd": "flash", "flash": "flash", "ram": "memory"}
"""The class of disk each device model needs."""


Jobs = Sequence[tuple[str, dict[str, str]]]
"""A job file's jobs with their effective options (`job_sections`)."""


class Skipped(Exception):
    """A point the real engine does not run; the message is the reason, one line."""


MODES = ("auto", "host", "serve", "guest")
"""`--real-mode`: auto is host for a native stack, serve for a VM stack."""


@dataclass(frozen=True)
class Options:
    """`--real-dir`, `--real-size`, `--substitute`, `--real-mode`, `--real-accel`."""

    real_dir: Path
    size: int = DEFAULT_SIZE
    substitute: bool = False
    mode: str = "auto"
    accel: str = "auto"

    def key(self) -> dict[str, Any]:
        """What a point's stored result depends on (`vmio.study.runner.point_key`); the mode and
        accelerator only when chosen (results stored before they existed stay valid)."""
        chosen = {k: v for k, v in (("mode", self.mode), ("accel", self.accel)) if v != "auto"}
        return {
            "real_dir": str(self.real_dir),
            "size": self.size,
            "substitute": self.substitute,
            **chosen,
        }


def disk_class(d: Mapping[str, Any]) -> str:
    """`memory`, `hdd` or `flash`: the class of `machine.disk`'s description (module doc)."""
    if not d.get("device"):
        return "memory" if d.get("fstype") == "tmpfs" else "flash"
    if d.get("rotational") and d.get("model") not in PARAVIRTUAL:
        return "hdd"
    return "flash"


def job_sections(text: str) -> Jobs:
    """Each job of a fio job file with its effective options (the `[global]` sections before
    it, then its own); option names as written, bare options as ""."""
    glob: dict[str, str] = {}
    jobs: list[tuple[str, dict[str, str]]] = []
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip()
            if name == "global":
                current = glob
            else:
                current = dict(glob)
                jobs.append((name, current))
            continue
        if current is not None:
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    return jobs


def _size(value: Any, where: str) -> int:
    try:
        return parse_size(value)
    except VmioError as e:
        raise VmioError(f"{where}: {e}") from None


@dataclass
class Plan:
    """What one point runs: the mode, the job as edited, the stack as run."""

    mode: str
    job_text: str
    stack: dict[str, Any]
    """The stack file's tables as written (the point's record; `served_stack` edits a copy)."""
    view: stackfile.Stack
    """The stack as the simulator reads it: every fact the plan needs, with Rust's defaults."""
    served_stack: dict[str, Any] | None = None
    images: list[Path] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)
    substituted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    vm: str = ""
    export: str = ""
    interface: str = ""
    """Guest mode: the VM disk's interface (`vmio.real.qemu.INTERFACES`)."""

    def set(self, option: str, value: str) -> None:
        """Set a fio option in every job and record it: where the job file sets it
        (vmio.study.runner.set_job_option), then in each job that still does not see it (a job
        after one that sets it, without a [global] that does)."""
        text = native().set_job_option(self.job_text, "job file", None, option, value)
        for name, opts in job_sections(text):
            if opts.get(option) != value:
                text = native().set_job_option(text, "job file", name, option, value)
        self.job_text = text
        self.replaced[option] = value


def _vm(stack: stackfile.Stack, vm: str | None, where: str) -> stackfile.Vm:
    for v in stack.vms:
        if vm is None or v.name == vm:
            return v
    raise VmioError(f"{where}: no [[vm]] named '{vm}'")


def _check_devices(p: Plan, opts: Options, disks: Mapping[str, dict[str, Any]]) -> list[str]:
    """The substitutions the stack's devices need on this machine (each a reason, also in
    the recorded device's `real_substitute`); raise Skipped on the first without
    --substitute. `disks`: the machine's disk under each device's file (by device name)."""
    subs = []
    under: dict[str, list[str]] = {}
    written = {str(d.get("name")): d for d in p.stack.get("device") or []}
    for dev in p.view.devices:
        if dev.share:  # a region of an earlier device's hardware: on that disk
            continue
        name, model = dev.name, dev.model
        d = disks[name]
        have, want = disk_class(d), DEVICE_CLASS.get(model, "flash")
        where = f"{d['device']} ({d.get('model')})" if d.get("device") else d.get("fstype")
        why = None
        if model == "ssd" and dev.settings.get("precondition") == "aged":
            why = (
                f"device '{name}' is an aged SSD (precondition = \"aged\"): its garbage "
                "collection cannot be reproduced on a file"
            )
        elif have != want:
            why = (
                f"device '{name}' (model {model}) needs a disk of class {want}; {where} "
                f"under {d.get('path')} is of class {have}"
            )
        if why is not None:
            if not opts.substitute:
                raise Skipped(f"{why} (--substitute runs it on files anyway)")
            subs.append(why)
            written[name]["real_substitute"] = why
        under.setdefault(str(d.get("device") or d.get("mount")), []).append(name)
    for disk, names in sorted(under.items()):
        if len(names) > 1:
            why = (
                f"devices {', '.join(names)} would share one disk ({disk}); the stack has "
                f"{len(names)} devices there"
                + (", give each a path on its own disk" if p.mode == "host" else "")
            )
            if not opts.substitute:
                raise Skipped(f"{why} (--substitute runs them on files anyway)")
            subs.append(why)
    return subs


GUEST_HAS_NO_FS = "guest mode runs jobs on a VM disk only (no mkfs, no files in its initramfs)"
"""The reason guest mode skips a job on files or on CPU."""


def _disk_target(jobs: Jobs, vm: stackfile.Vm, mode: str) -> dict[str, tuple[str, str]]:
    """Per job: ("disk", disk name) or ("dir", disk name) for directory= on its filesystem."""
    by_name = {d.name: d for d in vm.disks}
    needs = GUEST_HAS_NO_FS if mode == "guest" else "needs a guest (QEMU)"
    out = {}
    for name, o in jobs:
        if o.get("ioengine") == "cpuio":
            raise Skipped(f"{needs}: job '{name}' burns CPU (ioengine=cpuio)")
        if "directory" in o:
            mount = o["directory"].rstrip("/")
            owner = next(
                (n for n, d in by_name.items() if d.filesystem and d.filesystem.mount == mount),
                None,
            )
            if mode != "host" or owner is None:
                raise Skipped(
                    f"{needs}: job '{name}' works on files in "
                    f"directory={o['directory']} of the VM's filesystem"
                )
            out[name] = ("dir", owner)
            continue
        files = o.get("filename", f"/dev/{next(iter(by_name))}").split(":")
        disk = files[0].removeprefix("/dev/")
        if len(files) > 1 or not files[0].startswith("/dev/") or disk not in by_name:
            raise Skipped(
                f"{needs}: job '{name}' works on filename={o['filename']}, "
                f"not a disk of VM '{vm.name}' ({', '.join('/dev/' + n for n in by_name)})"
            )
        if mode != "host" and by_name[disk].filesystem:
            raise Skipped(
                f"{needs}: disk '{disk}' of VM '{vm.name}' carries a [vm.disk.filesystem]"
            )
        out[name] = ("disk", disk)
    return out


def image(path: Path, size: int) -> None:
    """`path` as a file of `size` bytes written through once (module doc); kept when it is
    already that size."""
    from vmio.real.calibrate import direct_ok, write_through  # calibrate imports vmio's top

    if path.is_file() and path.stat().st_size == size:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    write_through(path, size, int(direct_ok(path)))


def _cap_size(plan: Plan, jobs: Jobs, limit: int) -> None:
    if any(_size(o.get("size", "0"), f"job '{n}' size") > limit for n, o in jobs):
        plan.set("size", str(limit))


def plan(
    stack_text: str,
    stack_path: str,
    job_text: str,
    vm_name: str | None,
    opts: Options,
) -> Plan:
    """The point's mode and edits (module doc); raises Skipped with the reason."""
    view = stackfile.loads(stack_text, stack_path)
    mode = _mode(view, opts)
    vm = _vm(view, vm_name, stack_path)
    jobs = job_sections(job_text)
    if not jobs:
        raise VmioError("job file: no job section")
    targets = _disk_target(jobs, vm, mode)
    real_dir = opts.real_dir.resolve()
    files: dict[str, Path] = {}
    for dev in view.devices:
        own = dev.path if mode == "host" else None
        # A device's own path is relative to the current directory, as `vmio serve` takes it.
        files[dev.name] = Path(own).absolute() if own else real_dir / f"{dev.name}.img"
    disks = {n: machine.disk(p if p.exists() else p.parent) for n, p in files.items()}
    stack = parse_toml(stack_text, stack_path)
    p = Plan(mode=mode, job_text=job_text, stack=stack, view=view, vm=vm.name)
    p.substituted = _check_devices(p, opts, disks)
    vdisks = {d.name: d for d in vm.disks}
    if mode == "host":
        _plan_host(p, jobs, targets, vdisks, files, disks, opts)
    elif mode == "guest":
        _plan_guest(p, jobs, targets, files, opts)
    else:
        _plan_serve(p, jobs, targets, files, opts)
    return p


def _mode(stack: stackfile.Stack, opts: Options) -> str:
    """The point's mode: `--real-mode`, or (auto) host for a native stack, serve for a VM's;
    Skipped for serve or guest on a native stack (no VM disk to serve)."""
    if opts.mode == "auto":
        return "host" if stack.native else "serve"
    if stack.native and opts.mode != "host":
        raise Skipped(
            f"--real-mode {opts.mode} needs a VM stack; this one is native "
            '(host.hypervisor = "native": no VM disk to serve)'
        )
    return opts.mode


def _plan_host(
    p: Plan,
    jobs: Jobs,
    targets: Mapping[str, tuple[str, str]],
    vdisks: Mapping[str, stackfile.Disk],
    files: Mapping[str, Path],
    disks: Mapping[str, Mapping[str, Any]],
    opts: Options,
) -> None:
    """Host mode: the jobs' disks become their device's file (module doc)."""
    chosen: dict[str, str] = {}
    for job, (kind, disk) in targets.items():
        devs = p.view.volume_devices(vdisks[disk].volume)
        if len(devs) != 1:
            raise Skipped(
                f"disk '{disk}' is on volume '{vdisks[disk].volume}' of {len(devs)} "
                "devices: the host mode would need md/dm, which this engine does not build"
            )
        name = devs[0].name
        if kind == "dir":
            chosen[job] = str(opts.real_dir.resolve() / f"fs-{disk}")
            Path(chosen[job]).mkdir(parents=True, exist_ok=True)
            p.targets[job] = f"directory {chosen[job]} (the filesystem under --real-dir)"
            continue
        path = files[name]
        chosen[job] = str(path)
        if not devs[0].path:
            p.images.append(path)
        p.targets[job] = f"device '{name}': {path}"
    option = "directory" if all(k == "dir" for k, _ in targets.values()) else "filename"
    if len(set(chosen.values())) == 1:
        p.set(option, next(iter(chosen.values())))
    else:
        for job, target in chosen.items():
            kind = targets[job][0]
            opt = "directory" if kind == "dir" else "filename"
            p.job_text = native().set_job_option(p.job_text, "job file", job, opt, target)
            p.replaced[f"{job}.{opt}"] = target
    sizes = [
        opts.size if Path(f) in p.images else _file_bytes(Path(f))
        for job, f in chosen.items()
        if targets[job][0] == "disk"
    ]
    if sizes:
        _cap_size(p, jobs, min(sizes))
    if any(disk_class(d) == "memory" for d in disks.values()):
        p.set("direct", "0")
        p.notes.append("direct=0 on tmpfs, which refuses O_DIRECT")


def _file_bytes(path: Path) -> int:
    if path.is_block_device():
        with open(path, "rb") as f:
            return f.seek(0, os.SEEK_END)
    return path.stat().st_size if path.exists() else 0


def _one_export(
    p: Plan, targets: Mapping[str, tuple[str, str]], files: Mapping[str, Path], opts: Options
) -> dict[str, Any]:
    """The stack as served on DIR's images (`p.served_stack`, VM disks laid out anew when they
    do not fit) and the one VM disk the jobs work on (`p.export`): serve and guest modes."""
    served = json.loads(json.dumps(p.stack))
    for dev in served.get("device") or []:
        dev.pop("real_substitute", None)
        dev["path"] = str(files[str(dev.get("name"))])
        dev["size"] = opts.size
        p.images.append(files[str(dev.get("name"))])
    vol_disks: dict[str, list[dict[str, Any]]] = {}
    for vm in served.get("vm") or []:
        for d in vm.get("disk") or []:
            vol_disks.setdefault(str(d.get("volume")), []).append(d)
    for vol, ds in vol_disks.items():
        cap = opts.size * len(p.view.volume(vol).devices)
        fits = all(
            "size" in d and _size(d.get("offset", 0), "offset") + _size(d["size"], "size") <= cap
            for d in ds
        )
        if not fits:
            share = cap // len(ds) // MIB * MIB
            for i, d in enumerate(ds):
                d["offset"], d["size"] = i * share, share
            p.notes.append(
                f"volume '{vol}': VM disks laid out anew, {share // MIB} MiB each, to fit "
                f"{len(ds)} disk(s) in --real-size x {cap // opts.size} device(s)"
            )
    p.served_stack = served
    disks = {
        str(d.get("name")): d for vm in served["vm"] if vm.get("name") == p.vm for d in vm["disk"]
    }
    exports = {job: f"{p.vm}/{disk}" for job, (_, disk) in targets.items()}
    if len(set(exports.values())) != 1:
        raise Skipped(
            "the jobs work on several disks of the VM; the engine serves one per job file"
        )
    p.export = next(iter(exports.values()))
    return disks[p.export.split("/", 1)[1]]


def _plan_guest(
    p: Plan,
    jobs: Jobs,
    targets: Mapping[str, tuple[str, str]],
    files: Mapping[str, Path],
    opts: Options,
) -> None:
    """Guest mode: the stack served as in serve mode, the job in a QEMU guest whose disk is
    the VM's export (module doc)."""
    from vmio.real import qemu as qemuguest

    disk = _one_export(p, targets, files, opts)
    name = p.view.vm(p.vm).disk(str(disk.get("name"))).interface
    iface = qemuguest.INTERFACES.get(name)
    if iface is None:
        raise Skipped(
            f"guest mode: disk '{disk.get('name')}' has interface = \"{name}\", which the guest "
            f"has no driver for (accepted: {', '.join(qemuguest.INTERFACES)}); serve mode runs it"
        )
    p.interface = name = iface.name
    p.set("filename", iface.device)
    _cap_size(p, jobs, _size(disk["size"], "size"))
    p.targets = {
        job: f"{iface.device} of the guest ({name}): export {p.export} of vmio serve"
        for job in targets
    }
    p.notes.append(
        f"guest mode: fio in a QEMU guest (the host's kernel and fio, a busybox initramfs) "
        f"whose {name} disk is the export, through QEMU's NBD client"
    )


def _plan_serve(
    p: Plan,
    jobs: Jobs,
    targets: Mapping[str, tuple[str, str]],
    files: Mapping[str, Path],
    opts: Options,
) -> None:
    """Serve mode: the stack served on DIR's images, the job on the VM's export."""
    disk = _one_export(p, targets, files, opts)
    exports = dict.fromkeys(targets, p.export)
    p.set("ioengine", "nbd")
    p.set("filename", p.export)
    p.set("direct", "0")
    if any(o.get("ioengine", "psync") in SYNC_ENGINES for _, o in jobs):
        p.set("iodepth", "1")
    _cap_size(p, jobs, _size(disk["size"], "size"))
    p.targets = {job: f"export {e} of vmio serve" for job, e in exports.items()}
    p.notes.append(
        'serve mode: the disk is interface = "nbd": fio\'s nbd engine on the host is the NBD '
        "client the stack models"
        if p.view.vm(p.vm).disk(str(disk.get("name"))).interface == "nbd"
        else "serve mode: fio's nbd engine on the host stands for the guest (no guest kernel, "
        "driver or vCPU in the measurement)"
    )


def with_uri(job_text: str, uri: str) -> str:
    """The job with fio's nbd `uri=` in each job section: an engine option, which fio knows
    only after `ioengine=nbd` (in the same section or before), not in a `[global]` above it."""
    for name, _ in job_sections(job_text):
        job_text = native().set_job_option(job_text, "job file", name, "uri", uri)
    return job_text


def _fio_json(stdout: str, stderr: str, status: int) -> dict[str, Any]:
    """fio's JSON output (the nbd engine prints a line before it); VmioError when fio failed."""
    text = stdout[stdout.find("{") :] if "{" in stdout else ""
    if status != 0 or not text:
        why = (stderr.strip() or stdout.strip()).splitlines()
        raise VmioError(f"fio failed (status {status}): {why[-1] if why else '?'}")
    doc = json.loads(text)
    for job in doc.get("jobs") or []:
        if job.get("error"):
            raise VmioError(f"fio job '{job.get('jobname')}' ended with error {job['error']}")
    return doc


def _fio_all(job_files: Sequence[Path], cwd: Path) -> list[dict[str, Any]]:
    """fio on each job file, all at once (one process each); their JSON outputs."""
    procs = [
        subprocess.Popen(
            ["fio", "--output-format=json", str(f)],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for f in job_files
    ]
    outs = [(*proc.communicate(), proc.returncode) for proc in procs]
    return [_fio_json(out, err, status) for out, err, status in outs]


def merge(plans: Sequence[Plan], docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One point's fio JSON from each VM's: one VM's as fio wrote it; several VMs' jobs in one
    list, each job's options with its file's global ones folded in (`global options` then
    empty), as the simulator writes several VMs' workloads. Every job gets `vmio_vm`."""
    doc = dict(docs[0])
    several = len(docs) > 1
    doc["jobs"] = [
        {
            **j,
            **(
                {"job options": {**d.get("global options", {}), **j.get("job options", {})}}
                if several
                else {}
            ),
            "vmio_vm": p.vm,
        }
        for p, d in zip(plans, docs, strict=True)
        for j in d["jobs"]
    ]
    if several:
        doc["global options"] = {}
    return doc


def _vm_record(p: Plan, doc: Mapping[str, Any], job_file: str) -> dict[str, Any]:
    """A VM's entry of `vmio.vms`: its name, weight, bandwidth (read + write + trim of its
    jobs, as the simulator's `vmio.vms`), job file and what the engine changed in it."""
    return {
        "name": p.vm,
        "weight": p.view.vm(p.vm).weight,
        "bw_bytes": total_bw_bytes(doc),
        "job_file": job_file,
        "targets": p.targets,
        "replaced": p.replaced,
    }


class Engine:
    """The real engine of one run: `run` runs a point (module doc)."""

    def __init__(self, opts: Options) -> None:
        if (why := machineprofile.fio_missing()) is not None:
            raise VmioError(f"--engine real: {why}")
        if opts.mode not in MODES:
            raise VmioError(
                f"--real-mode: '{opts.mode}' is not valid; accepted: {', '.join(MODES)}"
            )
        if opts.mode == "guest":
            from vmio.real import qemu as qemuguest

            if (why := qemuguest.missing(fio=True)) is not None:
                raise VmioError(f"--real-mode guest: {why}")
            if opts.accel not in qemuguest.ACCELS:
                raise VmioError(
                    f"--real-accel: '{opts.accel}' is not valid; accepted: "
                    + ", ".join(qemuguest.ACCELS)
                )
        self.opts = opts
        self._machines: dict[tuple[str, ...], dict[str, Any]] = {}
        self._accel: tuple[str, str] | None = None

    def machine(self, paths: Sequence[str]) -> dict[str, Any]:
        """machine.describe of `paths`, once per run."""
        key = tuple(sorted(set(paths)))
        if key not in self._machines:
            self._machines[key] = machine.describe(key)
        return self._machines[key]

    def run(
        self,
        stack_text: str,
        stack_path: str,
        jobs: Sequence[tuple[str | None, str, str]],
        seed: int,
    ) -> str:
        """Run one point: each (VM or None for the first, job text, job file) at once; the
        point's JSON text (module doc). Raises Skipped with the reason."""
        self.opts.real_dir.mkdir(parents=True, exist_ok=True)
        plans = [plan(stack_text, stack_path, text, vm, self.opts) for vm, text, _ in jobs]
        first = plans[0]
        with tempfile.TemporaryDirectory(prefix="vmio-real-") as tmpdir:
            tmp = Path(tmpdir)
            files = [tmp / f"job{i}.fio" for i in range(len(plans))]
            for p, f in zip(plans, files, strict=True):
                f.write_text(p.job_text, encoding="utf-8")
                parsed = subprocess.run(
                    ["fio", "--parse-only", str(f)], capture_output=True, text=True, check=False
                )
                if parsed.returncode != 0:
                    why = (parsed.stderr.strip() or parsed.stdout.strip()).splitlines() or ["?"]
                    raise Skipped(f"fio cannot run the job of VM '{p.vm}': {why[0]}")
            for img in dict.fromkeys(i for p in plans for i in p.images):
                image(img, self.opts.size)
            server = None
            if first.mode == "serve":
                docs, server = self._serve(plans, tmp, files)
            elif first.mode == "guest":
                docs, server = self._guests(plans, tmp)
            else:
                docs = _fio_all(files, tmp)
        paths = [str(self.opts.real_dir.resolve())]
        if first.mode == "host":
            paths += [str(Path(d.path)) for d in first.view.devices if d.path]
        vms = [_vm_record(p, d, j) for p, d, (_, _, j) in zip(plans, docs, jobs, strict=True)]
        doc = merge(plans, docs)
        notes = [n for p in plans for n in p.notes]
        doc["vmio"] = {
            "engine": "real",
            "mode": first.mode,
            "machine": self.machine(paths),
            "stack": first.served_stack if first.served_stack is not None else first.stack,
            "stack_file": stack_path,
            "job_file": jobs[0][2],
            "vm": first.vm,
            "targets": first.targets,
            "replaced": first.replaced,
            "substituted": first.substituted,
            "seed": seed,
            "notes": list(
                dict.fromkeys([*notes, *(f"substituted: {s}" for s in first.substituted)])
            ),
            "vms": vms,
            **({"server": server} if server is not None else {}),
            **(self._guest_record() if first.mode == "guest" else {}),
        }
        return json.dumps(doc, indent=2) + "\n"

    def _serve(
        self, plans: Sequence[Plan], tmp: Path, job_files: Sequence[Path]
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """Serve the stack, run fio's nbd engine on each VM's export at once; (fio's JSON of
        each, the server's final statistics)."""
        sock = tmp / "nbd.sock"
        for p, f in zip(plans, job_files, strict=True):
            p.replaced["uri"] = f"nbd+unix:///{p.export}?socket=<a socket of vmio serve>"
            f.write_text(with_uri(p.job_text, f"nbd+unix:///{p.export}?socket={sock}"))
        return _served(plans, tmp, lambda: _fio_all(job_files, tmp))

    def _guests(self, plans: Sequence[Plan], tmp: Path) -> tuple[list[dict[str, Any]], list[Any]]:
        """Serve the stack, boot one guest per VM at once, each running its job on its
        export; (fio's JSON of each, the server's final statistics)."""
        from concurrent.futures import ThreadPoolExecutor

        from vmio.real import qemu as qemuguest

        accel, why = self.accelerator()
        sock = tmp / "nbd.sock"
        timeout = boot_timeout(accel), run_timeout(accel, [job_sections(p.job_text) for p in plans])

        def one(i: int, p: Plan) -> dict[str, Any]:
            (work := tmp / f"guest{i}").mkdir()
            uri = f"nbd+unix:///{p.export}?socket={sock}"
            r = qemuguest.run_fio(p.job_text, uri, p.interface, work, accel, *timeout)
            return _fio_json(r.json_text, "\n".join(r.log), r.status)

        def run() -> list[dict[str, Any]]:
            with ThreadPoolExecutor(max_workers=len(plans)) as pool:
                return list(pool.map(one, range(len(plans)), plans))

        for p in plans:
            p.notes.append(GUEST_NOTE[accel].format(why=why))
        return _served(plans, tmp, run)

    def accelerator(self) -> tuple[str, str]:
        """(`kvm`|`tcg`, why) of this run's guests (`vmio.real.qemu.accelerator`), once."""
        from vmio.real import qemu as qemuguest

        if self._accel is None:
            self._accel = qemuguest.accelerator(self.opts.accel)
            print(f"vmio: guest mode under {self._accel[0]}: {self._accel[1]}", file=sys.stderr)
        return self._accel

    def _guest_record(self) -> dict[str, str]:
        """`vmio.accel` and `vmio.timing` of a guest-mode point."""
        assert self._accel is not None
        accel = self._accel[0]
        return {"accel": accel, "timing": "functional-only" if accel == "tcg" else "measured"}


GUEST_NOTE = {
    "tcg": "guest under TCG ({why}): software emulation, its timings are functional-only, "
    "never used in timing comparisons (vmio compare leaves the point out)",
    "kvm": "guest under KVM ({why})",
}
"""The note of a guest-mode point, by accelerator."""
BOOT_TIMEOUT = {"tcg": 180.0, "kvm": 60.0}
"""Seconds from QEMU's start until the guest runs its script (a TCG boot with fio's
libraries takes ~10 s on an idle core)."""
SLOWDOWN = {"tcg": 10.0, "kvm": 2.0}
"""How many times its runtime a job may take in the guest (fio's setup, the layout of its
file, emulation)."""
RUN_MARGIN = 120.0
"""Seconds added to a guest's run timeout (fio's start, the JSON over the console)."""
NO_RUNTIME_TIMEOUT = 1800.0
"""A guest's run timeout when some job has no `runtime` (a size-based job)."""


def boot_timeout(accel: str) -> float:
    """Seconds a guest may take to boot (BOOT_TIMEOUT)."""
    return BOOT_TIMEOUT[accel]


def run_timeout(accel: str, job_files: Sequence[Jobs]) -> float:
    """Seconds a guest may take to run its job file once booted: RUN_MARGIN + SLOWDOWN x
    the longest file's sum of ramp_time + runtime over its jobs (jobs in turn at worst);
    NO_RUNTIME_TIMEOUT when a job has no runtime."""
    longest = 0.0
    for jobs in job_files:
        total = 0.0
        for _, o in jobs:
            if "runtime" not in o:
                return NO_RUNTIME_TIMEOUT
            total += fio_seconds(o["runtime"]) + fio_seconds(o.get("ramp_time", "0"))
        longest = max(longest, total)
    return RUN_MARGIN + SLOWDOWN[accel] * longest


FIO_TIME = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(usec|us|msec|ms|s|m|h|d)?\s*$", re.IGNORECASE)
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""fio's time suffixes (fio HOWTO "Time"): a bare number is seconds."""


def fio_seconds(value: str) -> float:
    """A fio time value in seconds; VmioError naming it when it is not one."""
    m = FIO_TIME.match(value)
    if m is None:
        raise VmioError(
            f"job file: '{value}' is not a fio time (a number with us, ms, s, m, h or d)"
        )
    return float(m.group(1)) * TIME_UNITS[(m.group(2) or "s").lower().replace("sec", "s")]


def _served(
    plans: Sequence[Plan], tmp: Path, run: Callable[[], list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[Any]]:
    """`run` while `vmio serve` serves the plans' stack on tmp/nbd.sock; (what `run`
    returned, the server's final statistics)."""
    from vmio.real import serve

    served = plans[0].served_stack
    assert served is not None
    stackfile.write(tmp / "stack.toml", served)
    sock, stats = tmp / "nbd.sock", tmp / "stats.json"
    proc = serve.start_vmio(tmp / "stack.toml", sock, "--stats-file", str(stats), cwd=tmp)
    try:
        docs = run()
    finally:
        serve._stop(proc)
    try:
        snaps = json.loads(stats.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        snaps = []
    return docs, snaps
