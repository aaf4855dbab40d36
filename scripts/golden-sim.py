#!/usr/bin/env python3
"""Check the simulator against the golden `vmio sim` JSON (tests/golden/sim) without installing
the Python package: builds the `simrun` example in release and runs every golden case through
it. For developers moving simulator code; pytest's tests/test_golden_outputs.py is the check CI
runs (through the installed `vmio`).

    python3 scripts/golden-sim.py            # all cases
    python3 scripts/golden-sim.py ram        # cases whose name contains "ram"
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from golden_outputs import CASES, CASES_DIR, GOLDEN, stack_text  # noqa: E402


def main() -> int:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(
        ["cargo", "build", "-q", "--release", "-p", "vmio-sim", "--example", "simrun"],
        cwd=ROOT,
        check=True,
    )
    simrun = target / "release" / "examples" / "simrun"
    pattern = sys.argv[1] if len(sys.argv) > 1 else ""
    failed = 0
    for name in sorted(CASES):
        if pattern not in name:
            continue
        _, _, job, seed = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for f in CASES_DIR.glob("*.fio"):
                shutil.copy(f, t / f.name)
            shutil.copytree(ROOT / "studies" / "mcfq" / "traces", t / "traces")
            (t / "stack.toml").write_text(stack_text(name), encoding="utf-8")
            r = subprocess.run(
                [simrun, "stack.toml", job or "-", str(seed)],
                cwd=t,
                capture_output=True,
                text=True,
            )
        expected = (GOLDEN / "sim" / f"{name}.json").read_text(encoding="utf-8")
        same = r.returncode == 0 and r.stdout.rstrip("\n") == expected.rstrip("\n")
        print(f"{'same' if same else 'DIFFERENT'}  {name}")
        if not same:
            failed += 1
            if r.returncode != 0:
                print(r.stderr.strip())
    print(f"{failed} different" if failed else "all golden cases identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
