#!/usr/bin/env python3
"""Measure raw and qcow2 images for real (qemu-img, qemu-storage-daemon, fio's nbd engine) and
put vmio's prediction of every point beside them; see python/vmio/real/images.py.

  PYTHONPATH=python scripts/real-images.py --json real-images.json --markdown real-images.md
      [--dir /var/tmp] [--size 4g] [--runtime 3] [--rounds 3] [--parts a,b,c]
      [--aio threads,native,io_uring] [--images qcow2-64k-off,...]
      [--calibration vmio-calibration] [--no-sim]
  PYTHONPATH=python scripts/real-images.py --from tests/real_images_figures.json --json again.json

Part a: first write against overwrite; b: small against large L2 cache on random reads over a
populated image; c: qcow2 against raw. The images live in a new directory under --dir, removed
afterwards. --from predicts an earlier run's points again (a newer vmio) without measuring,
on the calibration it recorded unless --calibration names another. The predictions take the
[nbd] table of qemu-storage-daemon's own path (`vmio calibrate --serve-path --server
qemu-storage-daemon -o DIR --force`: DIR/serve-path-qsd.toml) where DIR has it, else vmio
serve's (serve-path.toml), and the JSON and the markdown say which; with DIR/host-fs.toml
(`vmio calibrate --host-fs -o DIR`) the host volume takes its measured alloc_cost and
convert_cost when it measured the scratch directory's filesystem. Exit status 2 on a missing
tool or a bad flag (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vmio.real import images
from vmio.sim import VmioError, read_text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2, as every vmio error
        print(f"real-images: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure here")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the tables here")
    p.add_argument("--dir", type=Path, default=images.DEFAULT_DIR, help="where images go")
    p.add_argument("--size", default="4g", help="image size (default 4g)")
    p.add_argument(
        "--runtime", type=float, default=images.DEFAULT_RUNTIME_S, help="seconds per run"
    )
    p.add_argument("--rounds", type=int, default=images.DEFAULT_ROUNDS, help="runs per point")
    p.add_argument("--parts", default=",".join(images.PARTS), help="a, b, c (module doc)")
    p.add_argument("--aio", default=",".join(images.AIOS), help="part c's engines")
    p.add_argument(
        "--images", help="only these images (default all): " + ", ".join(images.IMAGE_NAMES)
    )
    p.add_argument(
        "--calibration",
        type=Path,
        metavar="DIR",
        help="vmio calibrate's output (stack.toml; serve-path-qsd.toml, qemu-storage-daemon's "
        "[nbd] table, else serve-path.toml, vmio serve's, with a note; host-fs.toml, the "
        "host filesystem's costs); default "
        "./vmio-calibration",
    )
    p.add_argument("--no-sim", action="store_true", help="measure only")
    p.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="JSON",
        help="measure nothing: predict the points of an earlier run's JSON again",
    )
    a = p.parse_args(argv)
    try:
        for out in (a.json, a.markdown):
            if out is not None and out.exists():
                raise images.ImagesError(f"{out} exists; remove it first")
        size = images.check_size(a.size)
        runtime = images.check_runtime(a.runtime)
        rounds = images.check_rounds(a.rounds)
        parts = images.check_choices(a.parts.split(","), images.PARTS, "--parts")
        aios = images.check_choices(a.aio.split(","), images.AIOS, "--aio")
        names = None
        if a.images is not None:
            names = images.check_choices(a.images.split(","), images.IMAGE_NAMES, "--images")
        cal = None if a.no_sim else images.Calibration.find(a.calibration)
        if a.source is not None:
            text = read_text(a.source, "real-images JSON")
            try:
                rec = json.loads(text)
            except ValueError as e:
                raise images.ImagesError(f"{a.source}: not JSON ({e})") from None
            m = images.Measurement.of_record(rec)
            if a.calibration is None and not a.no_sim:
                cal = images.Calibration.of_record(rec) or cal
        else:
            m = images.run(a.dir, size, runtime, rounds, parts, aios, names=names)
        pred = images.predict(m, cal) if cal is not None else {}
    except VmioError as e:
        print(f"real-images: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("real-images: interrupted (images removed)", file=sys.stderr)
        return 130
    table = images.markdown(m, pred, cal)
    print(table, end="")
    if a.markdown is not None:
        a.markdown.write_text(table, encoding="utf-8")
    if a.json is not None:
        rec = images.record(m, pred, cal)
        a.json.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
