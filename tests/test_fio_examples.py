"""fio's own example job files run in `vmio sim` unchanged (but for a
bound on simulated runtime) or are refused with one line naming the engine or feature; none
crashes or hangs. The outcome table is printed (`pytest -s`) for the release note.

fio's examples come from Debian's `fio-examples` package (CI installs it); without them the
test fails rather than skips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fio-examples.py"


def test_fios_examples_run_or_are_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    print(p.stdout)
    assert out.exists(), p.stderr
    rows = json.loads(out.read_text())
    assert len(rows) >= 80, f"fio-examples has {len(rows)} job files; install fio-examples"
    by_file = {r["file"]: r for r in rows}
    failed = [r for r in rows if r["outcome"] == "failed"]
    assert not failed, "\n".join(f"{r['file']}: {r['reason']}" for r in failed)
    assert p.returncode == 0, p.stderr
    # Every refusal is vmio's one line: file and line (or job), what is wrong, what is accepted.
    for r in rows:
        if r["outcome"] == "refused":
            assert r["reason"].startswith("vmio: error: ") and "accepted: " in r["reason"], r
    # What vmio's fio front runs, and what it refuses by name.
    for name in ("fio-rand-read.fio", "null.fio", "zipf.fio", "tiobench-example.fio"):
        assert by_file[name]["outcome"] == "ran", by_file[name]
    for name, engine in (
        ("netio.fio", "net"),
        ("rdmaio-client.fio", "rdma"),
        ("http-s3.fio", "http"),
    ):
        assert f"ioengine={engine}: vmio does not model this engine" in by_file[name]["reason"]
