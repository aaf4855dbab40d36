"""iozone's automatic write/read/random tests run for real on a file of this machine (issue
#12 item 6, S2's host row): the same system calls, in the same order, with the same record
order as the simulator's `iozone=` workload (crates/vmio-core/src/workload/iozone.rs), timed
with time.perf_counter_ns, reported as iozone's `-a` table (vmio.iozone.table).

Sources: iozone.c 3.4xx (github Thomas134/iozone, src/current/iozone.c), `write_perf_test`,
`read_perf_test`, `random_perf_test`, `auto_test`:

```text
per record size r (numrecs = size // r), the tests in the order write, read, random:
  write (j=0), rewrite (j=1): j=0: creat (O_TRUNC), close
      open(O_RDWR | O_DIRECT under direct); fsync                   untimed
      write records 0..numrecs-1; include_flush (-e): fsync         timed
      fsync; close                                                  untimed
  read, reread: open; fsync; read record 0; seek 0                   untimed
      read records 0..numrecs-1; -e: fsync                          timed
      fsync; close                                                  untimed
  random read, random write over ONE order (vmio.iozone.shuffle, srand48(0)):
      open; read/write record order[i] for every i; -e: fsync       timed
      fsync; close                                                  untimed
  unlink
```

Buffers come from an anonymous mmap (page aligned, as O_DIRECT needs); reads and writes are
os.preadv/os.pwritev of that buffer at the record's offset (iozone's read/write after lseek).
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Sequence
from pathlib import Path

from vmio.iozone import Timing, shuffle, size, table

FILE_NAME = "iozone.tmp"


def parse_size(text: str, flag: str = "-s") -> int:
    """iozone's size argument of `flag`: KB, or with a k, m or g suffix; bytes."""
    return size(flag, text)


def _timed_pass(
    fd: int, buf: mmap.mmap, record: int, order: Sequence[int], write: bool, include_flush: bool
) -> int:
    """The timed region of one pass: each record of `order`, then fsync under -e; ns."""
    view = [buf]
    start = time.perf_counter_ns()
    for i in order:
        n = os.pwritev(fd, view, i * record) if write else os.preadv(fd, view, i * record)
        if n != record:
            raise OSError(f"short {'write' if write else 'read'} of record {i}: {n} of {record}")
    if include_flush:
        os.fsync(fd)
    return time.perf_counter_ns() - start


def run(
    directory: Path,
    size_bytes: int,
    records: Sequence[int],
    direct: bool = True,
    include_flush: bool = True,
) -> list[Timing]:
    """iozone -a -s size -r each record [-I] [-e] -i 0 -i 1 -i 2 on directory/iozone.tmp."""
    path = directory / FILE_NAME
    flags = os.O_RDWR | (os.O_DIRECT if direct else 0)
    out: list[Timing] = []
    for record in records:
        if record > size_bytes or (direct and record % 4096):
            raise ValueError(
                f"record size {record} bytes; accepted: at most the file size ({size_bytes}), "
                "a multiple of 4096 with O_DIRECT"
            )
        numrecs = size_bytes // record
        nbytes = numrecs * record
        buf = mmap.mmap(-1, record)
        buf.write(bytes(range(256)) * (record // 256) + bytes(record % 256))
        sequential = range(numrecs)
        random_order = shuffle(numrecs)
        passes = (
            ("write", True, sequential),
            ("rewrite", True, sequential),
            ("read", False, sequential),
            ("reread", False, sequential),
            ("random read", False, random_order),
            ("random write", True, random_order),
        )
        for phase, write, order in passes:
            if phase == "write":
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o640))
            fd = os.open(path, flags)
            try:
                if phase in ("write", "rewrite", "read", "reread"):
                    os.fsync(fd)
                if phase in ("read", "reread"):
                    os.preadv(fd, [buf], 0)
                ns = _timed_pass(fd, buf, record, order, write, include_flush)
                os.fsync(fd)
            finally:
                os.close(fd)
            out.append(Timing(size_bytes, record, phase, nbytes, ns))
        buf.close()
        path.unlink()
    return out


def report(timings: Sequence[Timing]) -> str:
    return table(timings)
