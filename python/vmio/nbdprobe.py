"""A minimal NBD client for probing `vmio serve`: the fixed newstyle handshake with
NBD_OPT_GO, one READ, and a check that the server closed a connection; and the lockout check
`python -m vmio.nbdprobe lockout STACK` (used by the fuzzer's regression corpus).

The wire format follows the NBD protocol specification (`doc/proto.md` of
NetworkBlockDevice/nbd): "Fixed newstyle negotiation", `NBD_OPT_GO`, "Simple reply message".

The lockout check starts `vmio serve --stack STACK` on a Unix socket in the current
directory, makes 255 connections that finish the handshake and then say nothing, and then
asks as a new client for 4 KiB; it exits 0 when the new client is served, 1 (one line saying
what failed) when it is locked out.
"""

from __future__ import annotations

import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

IHAVEOPT = 0x49484156454F5054
OPT_GO = 7
REP_MAGIC = 0x3E889045565A9
REP_ACK = 1
REP_FLAG_ERROR = 0x80000000
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
CMD_READ = 0
FLAG_C_FIXED_NEWSTYLE_NO_ZEROES = 3


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise ConnectionError("closed by the server")
        b += chunk
    return b


def handshaken(sock: Path, export: str = "vm1/disk0", timeout: float = 10) -> socket.socket:
    """A connection to the Unix socket `sock` that has finished the fixed newstyle handshake
    (NBD_OPT_GO on `export`) and sent nothing since; ConnectionError when refused."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    try:
        s.connect(str(sock))
        magic, opt, _flags = struct.unpack(">8sQH", recv_exact(s, 18))
        if (magic, opt) != (b"NBDMAGIC", IHAVEOPT):
            raise ConnectionError("not an NBD fixed newstyle server")
        s.sendall(struct.pack(">I", FLAG_C_FIXED_NEWSTYLE_NO_ZEROES))
        name = export.encode()
        data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
        s.sendall(struct.pack(">QII", IHAVEOPT, OPT_GO, len(data)) + data)
        while True:
            rmagic, _opt, rtype, length = struct.unpack(">QIII", recv_exact(s, 20))
            if rmagic != REP_MAGIC:
                raise ConnectionError("bad option reply magic")
            text = recv_exact(s, length)
            if rtype == REP_ACK:
                return s
            if rtype & REP_FLAG_ERROR:
                raise ConnectionError(f"option error {rtype:#x}: {text.decode('utf-8', 'replace')}")
    except BaseException:
        s.close()
        raise


def read_block(s: socket.socket, cookie: int, offset: int = 0, length: int = 4096) -> bytes:
    """One NBD_CMD_READ answered without error: its data."""
    s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, cookie, offset, length))
    magic, error, got = struct.unpack(">IIQ", recv_exact(s, 16))
    if (magic, error, got) != (SIMPLE_REPLY_MAGIC, 0, cookie):
        raise ConnectionError(f"bad reply: magic {magic:#x} error {error} cookie {got}")
    return recv_exact(s, length)


def is_closed(s: socket.socket) -> bool:
    """The server closed `s` (readable, and the read finds the end)."""
    r, _, _ = select.select([s], [], [], 0)
    if not r:
        return False
    try:
        return s.recv(1) == b""
    except ConnectionError:
        return True


def start_serve(stack: Path, sock: Path) -> subprocess.Popen[bytes]:
    """`vmio serve --stack STACK --socket SOCK`, once its socket accepts connections."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vmio", "serve", "--stack", str(stack), "--socket", str(sock)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vmio serve exited with status {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
            return proc
        except OSError:
            if time.monotonic() - t0 > 30:
                proc.kill()
                raise RuntimeError("vmio serve did not listen within 30 s") from None
            time.sleep(0.05)


def lockout_check(stack: Path, idle: int = 255) -> str | None:
    """None when a new client is served while `idle` handshaken connections sit idle; else
    what failed."""
    sock = Path("nbd.sock").resolve()
    proc = start_serve(stack, sock)
    held: list[socket.socket] = []
    try:
        for i in range(idle):
            try:
                held.append(handshaken(sock))
            except (ConnectionError, OSError) as err:
                return f"idle connection {i} refused: {err}"
        try:
            with handshaken(sock) as s:
                read_block(s, 1)
        except (ConnectionError, OSError) as err:
            return f"a new client was locked out by {idle} idle connections: {err}"
        return None
    finally:
        for s in held:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "lockout":
        print("usage: python -m vmio.nbdprobe lockout STACK", file=sys.stderr)
        return 2
    failed = lockout_check(Path(args[1]))
    if failed is not None:
        print(f"lockout: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
