"""`vmio serve` is not locked out by idle connections: 255 connections that finish the NBD
handshake and then say nothing do not keep a new client out (the one unused longest is closed
to admit it), and a connection that has sent a request is never closed for idling.

The idle connections come from vmio.nbdprobe, a minimal NBD client (fixed newstyle handshake
and NBD_OPT_GO, NBD protocol `doc/proto.md`); the new clients are nbdinfo and qemu-io."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from conftest import finish, require_tool, start_vmio_serve
from vmio.fuzz import SERVE_STACK
from vmio.nbdprobe import handshaken, is_closed, read_block


def test_255_idle_connections_do_not_lock_out_a_new_client_and_a_used_idle_one_stays(
    tmp_path: Path,
):
    require_tool("nbdinfo", "libnbd-bin")
    require_tool("qemu-io", "qemu-utils")
    proc, sock = start_vmio_serve(tmp_path, SERVE_STACK)
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
