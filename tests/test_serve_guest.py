"""A real QEMU guest (TCG) whose virtio disk is a `vmio serve` export over NBD: it reads
what the host put on the backing files and writes through a RAID 0 layout, and the bytes land
where md's layout puts them."""

from __future__ import annotations

import hashlib
import signal

import guest
from conftest import finish, missing_tool, start_vmio_serve

CHUNK = 64 << 10
DEVICE_BYTES = 16 << 20

STACK = f"""\
[[device]]
name = "a"
model = "ssd"
path = "a.img"
size = "{DEVICE_BYTES}"

[[device]]
name = "b"
model = "ssd"
path = "b.img"
size = "{DEVICE_BYTES}"

[[volume]]
name = "md0"
layout = "raid0"
chunk = "{CHUNK}"
devices = ["a", "b"]

[scheduler]
name = "cfq"

[[vm]]
name = "vm1"

[[vm.disk]]
name = "vda"
volume = "md0"
cache = "none"
"""

PATTERN = b"VMIO-GUEST-DATA\n" * (2 * CHUNK // 16)  # two chunks: one on each backing file
OFFSET = 1 << 20  # chunk 16 -> device a, chunk 17 -> device b (both at 512 KiB)


def test_a_qemu_guest_reads_and_writes_its_disk_through_vmio_serve(tmp_path):
    if (why := guest.missing()) is not None:
        missing_tool(why)
    # What the host left on the disk: the first chunk of the array is device a's first 64 KiB.
    a = tmp_path / "a.img"
    with open(a, "wb") as f:
        f.write(b"HOST-WROTE-THIS\n")
        f.truncate(DEVICE_BYTES)
    proc, sock = start_vmio_serve(tmp_path, STACK, "--create")
    try:
        script = "\n".join(
            [
                "dd if=/dev/vda bs=16 count=1 2>/dev/null",
                f"yes VMIO-GUEST-DATA | head -c {len(PATTERN)} > /tmp/p",
                f"dd if=/tmp/p of=/dev/vda bs=65536 seek={OFFSET // 65536} conv=fsync 2>/dev/null",
                "echo 3 > /proc/sys/vm/drop_caches",
                f"dd if=/dev/vda bs=65536 skip={OFFSET // 65536} count=2 2>/dev/null | md5sum",
                "md5sum < /tmp/p",
                "cat /sys/block/vda/size",
            ]
        )
        console = guest.run_guest(f"nbd+unix:///vm1?socket={sock}", script, tmp_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc, 60)
    lines = guest.between_markers(console)
    assert lines[0] == "HOST-WROTE-THIS", console
    read_back, written = lines[1].split()[0], lines[2].split()[0]
    assert read_back == written == hashlib.md5(PATTERN).hexdigest(), console
    assert int(lines[3]) * 512 == 2 * DEVICE_BYTES  # the whole array, in 512-byte sectors
    assert proc.returncode == 0, err
    # md RAID 0: chunk 16 on device a, chunk 17 on device b, both at chunk 8 of the device.
    at = (OFFSET // CHUNK // 2) * CHUNK
    assert a.read_bytes()[at : at + CHUNK] == PATTERN[:CHUNK]
    assert (tmp_path / "b.img").read_bytes()[at : at + CHUNK] == PATTERN[CHUNK:]
