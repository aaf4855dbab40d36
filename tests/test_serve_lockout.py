"""`vmio serve` is not locked out by idle connections: 255 connections that finish the NBD
handshake and then say nothing do not keep a new client out (the one unused longest is closed
to admit it), and a connection that has sent a request is never closed for idling.

The idle connections come from a minimal NBD client written here (fixed newstyle handshake
and NBD_OPT_GO, NBD protocol `doc/proto.md`); the new clients are nbdinfo and qemu-io."""

from __future__ import annotations

import select
import signal
import socket
import struct
import subprocess
from pathlib import Path

from conftest import finish, require_tool, start_vmio_serve

STACK = """\
[[device]]
name = "a"
model = "ssd"
path = "a.img"
size = "16m"

[[volume]]
name = "data"
layout = "single"
devices = ["a"]

[[vm]]
name = "vm1"

[[vm.disk]]
name = "disk0"
volume = "data"
size = "8m"
cache = "writeback"
"""

IHAVEOPT = 0x49484156454F5054
OPT_GO = 7
REP_MAGIC = 0x3E889045565A9
REP_ACK = 1
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
CMD_READ = 0


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError("closed by the server")
        b += chunk
    return b


def handshaken(sock: Path, export: str = "vm1/disk0") -> socket.socket:
    """A connection that has finished the fixed newstyle handshake (NBD_OPT_GO) and sent
    nothing since."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(sock))
    magic, opt, _flags = struct.unpack(">8sQH", recv_exact(s, 18))
    assert (magic, opt) == (b"NBDMAGIC", IHAVEOPT)
    s.sendall(struct.pack(">I", 3))  # NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES
    name = export.encode()
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data)
    while True:
        rmagic, _opt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
        assert rmagic == REP_MAGIC
        recv_exact(s, length)
        if rtype == REP_ACK:
            return s
        assert rtype < 0x80000000, f"option error {rtype:#x}"


def read_block(s: socket.socket, cookie: int) -> None:
    """One NBD_CMD_READ of 4 KiB at 0, answered without error."""
    s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, cookie, 0, 4096))
    magic, error, got = struct.unpack(">IIQ", recv_exact(s, 16))
    assert (magic, error, got) == (SIMPLE_REPLY_MAGIC, 0, cookie)
    recv_exact(s, 4096)


def is_closed(s: socket.socket) -> bool:
    """The server closed `s` (readable, and the read finds the end)."""
    r, _, _ = select.select([s], [], [], 0)
    if not r:
        return False
    try:
        return s.recv(1) == b""
    except ConnectionError:
        return True


def test_255_idle_connections_do_not_lock_out_a_new_client_and_a_used_idle_one_stays(
    tmp_path: Path,
):
    require_tool("nbdinfo", "libnbd-bin")
    require_tool("qemu-io", "qemu-utils")
    proc, sock = start_vmio_serve(tmp_path, STACK)
    held: list[socket.socket] = []
    try:
        # A guest that has used its disk and then idles.
        used = handshaken(sock)
        read_block(used, 1)
        # 255 connections that finish the handshake and then sit idle (the default table is
        # 256: past one peer's 255, each further one closes the oldest unused connection).
        for _ in range(255):
            held.append(handshaken(sock))
        uri = f"nbd+unix:///vm1/disk0?socket={sock}"
        info = subprocess.run(["nbdinfo", uri], capture_output=True, text=True, timeout=60)
        assert info.returncode == 0, info.stderr
        assert "8388608" in info.stdout
        io = subprocess.run(
            ["qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 64k", "-c", "read -P 0x5a 0 64k"]
            + [uri],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert io.returncode == 0 and "verification failed" not in io.stdout, io.stdout + io.stderr
        # The connections closed are the oldest unused ones (a prefix of those held), and
        # the used connection was not among them: it still reads.
        closed = [is_closed(s) for s in held]
        n = sum(closed)
        assert n >= 2, "one closed for nbdinfo and one for qemu-io at least"
        assert closed == [True] * n + [False] * (len(held) - n)
        read_block(used, 2)
        used.close()
    finally:
        for s in held:
            s.close()
        proc.send_signal(signal.SIGTERM)
        _, err = finish(proc, 30)
    assert proc.returncode == 0, err
    assert "never sent a request" in err
