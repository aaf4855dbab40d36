"""A throw-away QEMU guest for the real-engine tests: the host's Debian kernel, a busybox
initramfs built here (cpio "newc", written by hand) with the virtio modules, and a shell
script as /init. The guest runs the script against its virtio disk and powers off; its serial
console is returned. TCG (software emulation) is used: functional, not for timing.

Needs qemu-system-x86_64 (qemu-system-x86), a kernel under /boot with its modules under
/lib/modules (linux-image-cloud-amd64) and a static busybox (busybox-static); `missing()`
says what is absent so tests can skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
MODULES = ("virtio_pci", "virtio_blk")


def kernel() -> tuple[Path, Path] | None:
    """(vmlinuz, modules dir) of the newest kernel that has its modules installed."""
    for vmlinuz in sorted(Path("/boot").glob("vmlinuz-*"), reverse=True):
        mods = Path("/lib/modules") / vmlinuz.name[len("vmlinuz-") :]
        if (mods / "modules.dep").is_file():
            return vmlinuz, mods
    return None


def missing() -> str | None:
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 not installed (Debian package qemu-system-x86)"
    if kernel() is None:
        return "no kernel with modules under /boot (Debian package linux-image-cloud-amd64)"
    if not BUSYBOX.is_file():
        return "no static busybox (Debian package busybox-static)"
    return None


def _modules_in_load_order(mods: Path) -> list[Path]:
    deps: dict[str, list[str]] = {}
    for line in (mods / "modules.dep").read_text().splitlines():
        target, _, rest = line.partition(":")
        deps[target] = rest.split()
    by_name = {Path(t).name.split(".ko")[0]: t for t in deps}
    order: list[str] = []

    def visit(rel: str) -> None:
        # modules.dep lists every (transitive) dependency, most basic last
        for dep in reversed(deps.get(rel, [])):
            if dep not in order:
                order.append(dep)
        if rel not in order:
            order.append(rel)

    for name in MODULES:
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


def build_initramfs(script: str, path: Path) -> Path:
    """Write an initramfs whose /init loads the virtio modules and runs `script` (sh)."""
    found = kernel()
    assert found is not None
    _, mods = found
    modules = _modules_in_load_order(mods)
    init = "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n"
    init += "mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n"
    for m in modules:
        init += f"insmod /lib/{m.name}\n"
    init += "i=0; while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done\n"
    init += "echo VMIO-GUEST-BEGIN\n" + script + "\necho VMIO-GUEST-END\n"
    init += "sync\npoweroff -f\n"
    d, f = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o755
    entries = [("bin", d, b""), ("lib", d, b""), ("proc", d, b""), ("sys", d, b"")]
    entries += [("tmp", stat.S_IFDIR | 0o1777, b"")]
    entries += [("dev", d, b""), ("init", f, init.encode())]
    entries.append(("bin/busybox", f, BUSYBOX.read_bytes()))
    entries += [(f"lib/{m.name}", stat.S_IFREG | 0o644, m.read_bytes()) for m in modules]
    path.write_bytes(_cpio_newc(entries))
    return path


def run_guest(drive: str, script: str, workdir: Path, timeout: float = 300.0) -> str:
    """Boot the guest with `drive` (QEMU -drive file=... value, e.g. an nbd+unix:// URI) as
    its virtio disk /dev/vda, run `script`, return the serial console output."""
    found = kernel()
    assert found is not None
    vmlinuz, _ = found
    initrd = build_initramfs(script, workdir / "initramfs.cpio")
    cmd = [
        "qemu-system-x86_64",
        "-accel",
        "tcg",
        "-m",
        "256",
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
        "-drive",
        f"file={drive},format=raw,if=virtio,cache=none",
    ]
    env = {**os.environ, "LC_ALL": "C"}
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env
    )
    return r.stdout + r.stderr


def between_markers(console: str) -> list[str]:
    """The lines the script printed (between the guest's begin and end markers)."""
    # The firmware's terminal escapes may share the marker's line.
    lines = console.replace("\r", "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.endswith("VMIO-GUEST-BEGIN"))
        end = next(i for i, line in enumerate(lines) if line.endswith("VMIO-GUEST-END"))
    except StopIteration:
        raise AssertionError(f"the guest did not run its script; console:\n{console}") from None
    return lines[start + 1 : end]
