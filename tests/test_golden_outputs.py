"""The simulator's results do not change unless a commit means them to (see golden_outputs.py):
`vmio sim` JSON of fifteen configurations and the quick volumes-cache study, byte for byte.
(The quick mcfq study is compared in test_study_mcfq.py, which already runs it.)"""

from __future__ import annotations

import shutil

import pytest

from conftest import run_vmio
from golden_outputs import CASES, CASES_DIR, GOLDEN, check_study_dir, compare, stack_text

TRACES = GOLDEN.parent.parent / "studies" / "mcfq" / "traces"


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmio_sim_json_is_byte_identical_to_the_golden_output(name, tmp_path):
    _, _, job, seed = CASES[name]
    for f in CASES_DIR.glob("*.fio"):
        shutil.copy(f, tmp_path / f.name)
    shutil.copytree(TRACES, tmp_path / "traces")
    (tmp_path / "stack.toml").write_text(stack_text(name), encoding="utf-8")
    # Relative paths: the JSON records the files as given, and must not name tmp_path.
    args = ["sim", "--stack", "stack.toml", "--seed", str(seed), "--output-format", "json"]
    if job is not None:
        args.append(job)
    r = run_vmio(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    compare(r.stdout, GOLDEN / "sim" / f"{name}.json")


def test_the_quick_volumes_cache_study_tables_are_byte_identical(tmp_path):
    out = tmp_path / "out"
    r = run_vmio("study", "volumes-cache", "--quick", "--out", out)
    assert r.returncode == 0, r.stderr
    check_study_dir(out, "volumes-cache")
