"""A test that cannot test does not pass: under CI or the README's test command a missing
real tool fails the test, naming the package; elsewhere it is reported as skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = """\
from conftest import require_tool


def test_needs_a_tool_nobody_has():
    require_tool("vmio-no-such-tool-xyz", "vmio-no-such-package")
"""


def _run_probe(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text((HERE / "conftest.py").read_text(), encoding="utf-8")
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "VMIO_REQUIRE_TOOLS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_a_missing_tool_fails_its_test_under_the_test_command(tmp_path):
    r = _run_probe(tmp_path, VMIO_REQUIRE_TOOLS="1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout, r.stdout
    assert "apt-get install vmio-no-such-package" in r.stdout, r.stdout


def test_a_missing_tool_fails_its_test_under_ci(tmp_path):
    r = _run_probe(tmp_path, CI="true")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout, r.stdout


def test_a_missing_tool_is_reported_as_skipped_outside_ci(tmp_path):
    r = _run_probe(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 skipped" in r.stdout and "passed" not in r.stdout, r.stdout
    assert "vmio-no-such-tool-xyz" in r.stdout, r.stdout
