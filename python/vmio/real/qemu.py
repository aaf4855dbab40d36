"""A throw-away QEMU guest: the host's Debian kernel, a busybox initramfs built here (cpio
"newc", written by hand) with the disk driver's modules and, when asked, the host's fio with
every shared library it loads, and a shell script as /init. The guest runs the script
against its disk (a `-drive file=` value, e.g. an `nbd+unix://` URI of `vmio serve`) and
powers off; its serial console is returned. Used by `vmio study --engine real --real-mode
guest` (vmio.real.engine, `run_fio`) and by the tests that boot guests against `vmio serve`
(tests/guest.py re-exports this module).

Sources: the newc format and how the kernel unpacks it (linux Documentation/driver-api/
early-userspace/buffer-format.rst; init/initramfs.c `do_header`, `do_name`: a file's parent
directory must come before it); QEMU 7.2's `-drive` (docs/system/invocation: `if=virtio`
is a virtio-blk-pci disk, `if=ide` an IDE disk on the PIIX3 controller of the default
machine, `if=none` + `-device scsi-hd` a disk on a `virtio-scsi-pci` adapter) and its NBD
block driver (block/nbd.c: `nbd+unix:///EXPORT?socket=PATH`); the guest drivers' names
(drivers/block/virtio_blk.c `virtblk_probe` names disks vda, vdb...; drivers/scsi/sd.c
`sd_probe` names sda... for virtio_scsi and ata_piix alike).

```text
/init:  busybox --install; mount proc, sys, devtmpfs
        insmod each module of the interface, dependencies first (modules.dep)
        wait (<= 10 s) for the disk's node           (/dev/vda or /dev/sda)
        echo VMIO-GUEST-BEGIN; SCRIPT; echo VMIO-GUEST-END; poweroff -f
fio:    /usr/bin/fio and each library `ldd /usr/bin/fio` lists, at its path (the loader at
        its own), LD_LIBRARY_PATH = their directories: the host's fio 3.33, unchanged
result: fio --output-format=json --output=/tmp/fio.json JOB; then on the console
        VMIO-FIO-STATUS s / VMIO-FIO-JSON md5 / base64 lines / VMIO-FIO-JSON-END /
        VMIO-FIO-LOG lines (fio's own output); the host keeps only base64 lines between
        the markers (stray console text dropped) and checks the md5
accel:  tcg, or kvm when /dev/kvm opens read-write and a probe boot (this kernel, a
        script that prints a marker) ends within PROBE_TIMEOUT; probed once per process
bounds: boot (start -> VMIO-GUEST-BEGIN) within boot_timeout; the script within
        run_timeout after it; else QEMU is killed and GuestError names the phase
```

Needs qemu-system-x86_64 (qemu-system-x86), a kernel under /boot with its modules under
/lib/modules (linux-image-cloud-amd64), a static busybox (busybox-static) and, for fio, the
host's fio (fio); `missing()` says what is absent, in one line.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vmio.sim import VmioError

BUSYBOX = Path("/bin/busybox")
FIO = Path("/usr/bin/fio")
MODULES = ("virtio_pci", "virtio_blk")
"""The modules of the virtio-blk disk (`run_guest`)."""
MEMORY_MIB = 256
"""Guest memory for a script of busybox commands."""
FIO_MEMORY_MIB = 512
"""Guest memory with fio: the initramfs (fio and its libraries, ~80 MiB, held twice while
the kernel unpacks it) plus fio's own buffers."""
PROBE_TIMEOUT = 20.0
"""Seconds a KVM probe boot may take before KVM is deemed unusable here."""
BEGIN, END = "VMIO-GUEST-BEGIN", "VMIO-GUEST-END"
ACCELS = ("auto", "kvm", "tcg")


class GuestError(VmioError):
    """The guest could not be built, did not boot or did not finish; one line."""


@dataclass(frozen=True)
class Interface:
    """How a VM disk interface is attached to the guest and what the guest calls it."""

    name: str
    device: str
    """The disk's node in the guest."""
    modules: tuple[str, ...]
    """Guest modules to load (their dependencies come from modules.dep)."""

    def qemu_args(self, drive: str) -> list[str]:
        """QEMU's arguments attaching `drive` (a -drive file= value) through this interface."""
        spec = f"file={drive},format=raw,cache=none"
        if self.name == "virtio-scsi":
            return [
                "-device",
                "virtio-scsi-pci,id=scsi0",
                "-drive",
                f"{spec},if=none,id=disk0",
                "-device",
                "scsi-hd,drive=disk0,bus=scsi0.0",
            ]
        return ["-drive", f"{spec},if={'virtio' if self.name == 'virtio-blk' else 'ide'}"]


INTERFACES = {
    i.name: i
    for i in (
        Interface("virtio-blk", "/dev/vda", MODULES),
        Interface("virtio-scsi", "/dev/sda", ("virtio_pci", "virtio_scsi", "sd_mod")),
        Interface("ide", "/dev/sda", ("ata_piix", "sd_mod")),
    )
}
"""The interfaces a guest can have, by the name the validated stack gives a disk's
(`vmio.stackfile`: Rust's names, its aliases and its default resolved)."""


def kernel() -> tuple[Path, Path] | None:
    """(vmlinuz, modules dir) of the newest kernel that has its modules installed."""
    for vmlinuz in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        mods = Path("/lib/modules") / vmlinuz.name[len("vmlinuz-") :]
        if (mods / "modules.dep").is_file():
            return vmlinuz, mods
    return None


def missing(fio: bool = False) -> str | None:
    """What the guest lacks on this machine (one line, naming the Debian package), or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 not installed (Debian package qemu-system-x86)"
    if kernel() is None:
        return "no kernel with modules under /boot (Debian package linux-image-cloud-amd64)"
    if not BUSYBOX.is_file():
        return f"no static busybox at {BUSYBOX} (Debian package busybox-static)"
    if fio and not FIO.is_file():
        return f"no fio at {FIO} to run in the guest (Debian package fio)"
    return None


def _kernel() -> tuple[Path, Path]:
    if (why := missing()) is not None:
        raise GuestError(why)
    found = kernel()
    assert found is not None  # missing() checked it
    return found


def _modules_in_load_order(mods: Path, names: Sequence[str]) -> list[Path]:
    deps: dict[str, list[str]] = {}
    for line in (mods / "modules.dep").read_text().splitlines():
        target, _, rest = line.partition(":")
        deps[target] = rest.split()
    by_name = {Path(t).name.split(".ko")[0].replace("-", "_"): t for t in deps}
    order: list[str] = []

    def visit(rel: str) -> None:
        # modules.dep lists every (transitive) dependency, most basic last
        for dep in reversed(deps.get(rel, [])):
            if dep not in order:
                order.append(dep)
        if rel not in order:
            order.append(rel)

    for name in names:
        if name not in by_name:
            raise GuestError(f"module {name} is not in {mods}/modules.dep")
        visit(by_name[name])
    return [mods / rel for rel in order]


def _cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A cpio archive in the "newc" format the kernel unpacks as initramfs."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        raw = name.encode() + b"\0"
        header = "070701" + "".join(
            f"{v:08x}" for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        )
        out += header.encode() + raw
        out += b"\0" * (-len(out) % 4)
        out += data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)$")
"""A line of ldd naming a file: `libz.so.1 => /lib/.../libz.so.1 (0x...)` or the loader's
`/lib64/ld-linux-x86-64.so.2 (0x...)`."""


def ldd_paths(ldd_output: str) -> list[str]:
    """The files ldd lists (libraries as resolved, the dynamic loader), in its order."""
    return [m.group(1) for line in ldd_output.splitlines() if (m := LDD_LINE.match(line))]


@functools.cache
def fio_files() -> tuple[tuple[str, bytes], ...]:
    """(path, content) of /usr/bin/fio and of every file `ldd` lists for it."""
    if (why := missing(fio=True)) is not None:
        raise GuestError(why)
    r = subprocess.run(["ldd", str(FIO)], capture_output=True, text=True, check=False)
    paths = ldd_paths(r.stdout)
    if r.returncode != 0 or not paths:
        raise GuestError(f"ldd {FIO} failed (status {r.returncode}): {r.stderr.strip()}")
    return tuple((p, Path(p).read_bytes()) for p in [str(FIO), *paths])


def _with_parents(
    files: Sequence[tuple[str, bytes]], have: set[str]
) -> list[tuple[str, int, bytes]]:
    """cpio entries of `files` (absolute paths), each preceded by its missing parent dirs."""
    out: list[tuple[str, int, bytes]] = []
    for path, data in files:
        rel = path.lstrip("/")
        parents = list(Path(rel).parents)[-2::-1]  # outermost first, without "."
        for d in map(str, parents):
            if d not in have:
                have.add(d)
                out.append((d, stat.S_IFDIR | 0o755, b""))
        out.append((rel, stat.S_IFREG | 0o755, data))
    return out


def build_initramfs(
    script: str,
    path: Path,
    modules: Sequence[str] = MODULES,
    device: str | None = "/dev/vda",
    files: Sequence[tuple[str, bytes]] = (),
) -> Path:
    """Write an initramfs whose /init loads `modules`, waits for `device` (None: none) and
    runs `script` (sh) between the markers; `files` (absolute path, content) go in as well,
    executable, their directories on LD_LIBRARY_PATH."""
    _, mods = _kernel()
    loaded = _modules_in_load_order(mods, modules)
    libdirs = dict.fromkeys(str(Path(p).parent) for p, _ in files if ".so" in Path(p).name)
    init = "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin:/usr/bin\n"
    if libdirs:
        init += f"export LD_LIBRARY_PATH={':'.join(libdirs)}\n"
    init += "mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n"
    for m in loaded:
        init += f"insmod /lib/{m.name}\n"
    if device is not None:
        init += f"i=0; while [ ! -b {device} ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done\n"
    init += f"echo {BEGIN}\n{script}\necho {END}\nsync\npoweroff -f\n"
    d, f = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o755
    entries = [("bin", d, b""), ("lib", d, b""), ("proc", d, b""), ("sys", d, b"")]
    entries += [("tmp", stat.S_IFDIR | 0o1777, b"")]
    entries += [("dev", d, b""), ("init", f, init.encode())]
    entries.append(("bin/busybox", f, BUSYBOX.read_bytes()))
    entries += [(f"lib/{m.name}", stat.S_IFREG | 0o644, m.read_bytes()) for m in loaded]
    entries += _with_parents(files, {"bin", "lib", "proc", "sys", "tmp", "dev"})
    path.write_bytes(_cpio_newc(entries))
    return path


def qemu_command(initrd: Path, accel: str, memory_mib: int, disk: Sequence[str] = ()) -> list[str]:
    """The QEMU command line: this kernel, `initrd`, serial console on stdio, `disk`'s args."""
    vmlinuz, _ = _kernel()
    cpu = ["-cpu", "host"] if accel == "kvm" else []
    return [
        "qemu-system-x86_64",
        "-accel",
        accel,
        *cpu,
        "-m",
        str(memory_mib),
        "-smp",
        "1",
        "-nographic",
        "-no-reboot",
        "-nodefaults",
        "-serial",
        "stdio",
        "-kernel",
        str(vmlinuz),
        "-initrd",
        str(initrd),
        "-append",
        "console=ttyS0 panic=-1 quiet loglevel=3",
        *disk,
    ]


def boot(cmd: Sequence[str], boot_timeout: float, run_timeout: float) -> str:
    """Run QEMU (`qemu_command`) and return its console (stdout and stderr); GuestError if
    the script has not begun within `boot_timeout` s or not ended `run_timeout` s later."""
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LC_ALL": "C"},
    )
    lines: list[str] = []
    begun = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace")
            lines.append(line)
            if BEGIN in line:
                begun.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait(done: threading.Event | None, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while proc.poll() is None and not (done is not None and done.is_set()):
            if time.monotonic() >= end:
                return False
            time.sleep(0.1)
        return True

    try:
        if not wait(begun, boot_timeout):
            raise GuestError(f"the guest did not boot within {boot_timeout:g} s{_tail(lines)}")
        if not wait(None, run_timeout):
            raise GuestError(
                f"the guest's script did not end within {run_timeout:g} s{_tail(lines)}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    return "".join(lines)


def _tail(lines: Sequence[str]) -> str:
    shown = [x.strip() for x in lines if x.strip()][-1:]
    return f" (console's last line: {shown[0][:200]})" if shown else " (console empty)"


def run_guest(drive: str, script: str, workdir: Path, timeout: float = 300.0) -> str:
    """Boot a TCG guest with `drive` (a -drive file= value, e.g. an nbd+unix:// URI) as its
    virtio disk /dev/vda, run `script`, return the serial console output."""
    initrd = build_initramfs(script, workdir / "initramfs.cpio")
    disk = INTERFACES["virtio-blk"].qemu_args(drive)
    return boot(qemu_command(initrd, "tcg", MEMORY_MIB, disk), timeout, timeout)


def between_markers(console: str) -> list[str]:
    """The lines the script printed (between the guest's begin and end markers)."""
    # The firmware's terminal escapes may share the marker's line.
    lines = console.replace("\r", "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.endswith(BEGIN))
        end = next(i for i, line in enumerate(lines) if line.endswith(END))
    except StopIteration:
        raise GuestError(f"the guest did not run its script{_tail(console.splitlines())}") from None
    return lines[start + 1 : end]


# --- the accelerator ---------------------------------------------------------------------------


def kvm_unusable() -> str | None:
    """Why /dev/kvm cannot be used by this process, or None."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"/dev/kvm: {e.strerror}"
    os.close(fd)
    return None


@functools.cache
def _probe_kvm() -> str | None:
    """Why a KVM boot of this kernel fails here (PROBE_TIMEOUT), or None; once per process."""
    with tempfile.TemporaryDirectory(prefix="vmio-kvm-probe-") as tmp:
        initrd = build_initramfs("echo VMIO-PROBE-OK", Path(tmp) / "probe.cpio", device=None)
        try:
            console = boot(qemu_command(initrd, "kvm", MEMORY_MIB), PROBE_TIMEOUT, PROBE_TIMEOUT)
        except GuestError as e:
            return f"a KVM probe boot failed: {e}"
    if "VMIO-PROBE-OK" not in console:
        return f"a KVM probe boot failed{_tail(console.splitlines())}"
    return None


def accelerator(choice: str) -> tuple[str, str]:
    """(`kvm`|`tcg`, why) for `--real-accel CHOICE` (module doc); GuestError when kvm is
    forced and /dev/kvm cannot be opened."""
    if choice not in ACCELS:
        raise GuestError(f"--real-accel: '{choice}' is not valid; accepted: {', '.join(ACCELS)}")
    if choice == "tcg":
        return "tcg", "--real-accel tcg"
    why = kvm_unusable()
    if choice == "kvm":
        if why is not None:
            raise GuestError(f"--real-accel kvm: {why}")
        return "kvm", "--real-accel kvm"
    if why is None:
        why = _probe_kvm()
    if why is None:
        return "kvm", f"a KVM probe boot ended within {PROBE_TIMEOUT:g} s"
    return "tcg", f"KVM unusable here ({why})"


# --- fio in the guest ------------------------------------------------------------------------

FIO_SCRIPT = """\
fio --output-format=json --output=/tmp/fio.json /job.fio > /tmp/fio.log 2>&1
echo "VMIO-FIO-STATUS $?"
if [ -s /tmp/fio.json ]; then
  echo "VMIO-FIO-JSON $(md5sum < /tmp/fio.json | cut -d' ' -f1)"
  base64 /tmp/fio.json
  echo VMIO-FIO-JSON-END
fi
tail -n 20 /tmp/fio.log | sed 's/^/VMIO-FIO-LOG /'"""
STATUS_RE = re.compile(r"VMIO-FIO-STATUS (\d+)$")
JSON_RE = re.compile(r"VMIO-FIO-JSON ([0-9a-f]{32})$")
BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]+")


@dataclass(frozen=True)
class FioRun:
    """What fio in the guest left: its status, its JSON (text, "" if none), its log lines."""

    status: int
    json_text: str
    log: list[str]
    console: str


def read_fio(console: str) -> FioRun:
    """fio's status, JSON and log from the guest's console (module doc); GuestError when the
    JSON came back damaged."""
    lines = [x.strip() for x in between_markers(console)]
    status = next((int(m.group(1)) for x in lines if (m := STATUS_RE.search(x))), None)
    if status is None:
        raise GuestError(f"fio did not run in the guest{_tail(console.splitlines())}")
    log = [x.split("VMIO-FIO-LOG ", 1)[1] for x in lines if "VMIO-FIO-LOG " in x]
    found = next(((i, m) for i, x in enumerate(lines) if (m := JSON_RE.search(x))), None)
    if found is None:
        return FioRun(status, "", log, console)
    start, md5 = found[0], found[1].group(1)
    body = []
    for x in lines[start + 1 :]:
        if x.endswith("VMIO-FIO-JSON-END"):
            break
        if BASE64_LINE.fullmatch(x):
            body.append(x)
    try:
        data = base64.b64decode("".join(body), validate=True)
    except ValueError:
        data = b""
    if hashlib.md5(data).hexdigest() != md5:
        raise GuestError("fio's JSON came back damaged over the guest's console (md5 differs)")
    return FioRun(status, data.decode("utf-8", errors="replace"), log, console)


def run_fio(
    job_text: str,
    drive: str,
    interface: str,
    workdir: Path,
    accel: str,
    boot_timeout: float,
    run_timeout: float,
) -> FioRun:
    """Boot a guest whose disk is `drive` on `interface` (INTERFACES) and run the host's fio
    on `job_text` (its /job.fio) in it; what fio left (`read_fio`)."""
    i = INTERFACES[interface]
    files = [*fio_files(), ("/job.fio", job_text.encode())]
    initrd = build_initramfs(FIO_SCRIPT, workdir / "initramfs.cpio", i.modules, i.device, files)
    cmd = qemu_command(initrd, accel, FIO_MEMORY_MIB, i.qemu_args(drive))
    return read_fio(boot(cmd, boot_timeout, run_timeout))
