#!/usr/bin/env python3
"""Run iozone's write/rewrite, read/reread, random read/write tests for real on a file of
this machine, with iozone's sequence and record order (vmio.real.iozone), and print iozone's
-a table: `iozone -e -I -a -s SIZE -r R [-r R2 ...] -i 0 -i 1 -i 2`.

  PYTHONPATH=python scripts/real-iozone.py --size 100m -r 4k -r 4m -r 16m --dir DIR

--no-direct drops -I (O_DIRECT), --no-flush drops -e (the fsync inside the timed region).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmio.real import iozone as realiozone


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", "-s", required=True, help="file size (KB, or 4k, 100m, 1g)")
    p.add_argument(
        "-r", dest="records", action="append", required=True, help="record size (repeatable)"
    )
    p.add_argument("--dir", type=Path, required=True, help="directory of iozone.tmp")
    p.add_argument("--no-direct", action="store_true", help="without -I (O_DIRECT)")
    p.add_argument("--no-flush", action="store_true", help="without -e (fsync timed)")
    a = p.parse_args()
    try:
        size = realiozone.parse_size(a.size)
        records = [realiozone.parse_size(r, "-r") for r in a.records]
        timings = realiozone.run(
            a.dir, size, records, direct=not a.no_direct, include_flush=not a.no_flush
        )
    except (ValueError, OSError) as e:
        print(f"real-iozone: {e}", file=sys.stderr)
        return 2
    print(realiozone.report(timings), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
