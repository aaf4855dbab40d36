"""The Python API: `vmio.simulate` takes paths or text and returns a typed `SimResult`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vmio
from conftest import JOB as CONFTEST_JOB
from conftest import STACK
from vmio.results import direction_summary

# conftest's job, shorter: 0.2 s of simulated time on 64 MiB
JOB = (
    CONFTEST_JOB.format(rw="randrw", bs="4k")
    .replace("runtime=1", "runtime=0.2")
    .replace("size=1g", "size=64m")
    + "iodepth=4\n"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("api")
    (d / "stack.toml").write_text(
        STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8"
    )
    (d / "job.fio").write_text(JOB, encoding="utf-8")
    return d / "stack.toml", d / "job.fio"


def test_simulate_returns_each_job_s_figures_typed_and_fio_s_json_as_a_dict(files):
    stack, job = files
    r = vmio.simulate(stack, job, seed=3)
    assert isinstance(r, vmio.SimResult)
    assert isinstance(r.fio, dict)
    assert r.seed == 3
    (j,) = r.jobs
    assert (j.name, j.vm) == ("job1", "vm1")
    assert r.job("job1") is j
    for d in ("read", "write"):
        typed = getattr(j, d)
        assert isinstance(typed, vmio.DirectionResult)
        summary = direction_summary(r.fio, d)
        assert typed.bw_bytes == r.fio["jobs"][0][d]["bw_bytes"] == summary["bw_bytes"] > 0
        assert typed.total_ios == r.fio["jobs"][0][d]["total_ios"]
        assert typed.clat_p50_ns <= typed.clat_p99_ns <= typed.clat_p9999_ns
    assert j.trim.total_ios == 0


def test_a_sim_result_still_reads_as_fio_s_json_dict(files):
    stack, job = files
    r = vmio.simulate(stack, job, seed=3)
    assert r["jobs"][0]["read"]["bw_bytes"] == r.jobs[0].read.bw_bytes
    assert dict(r) == r.fio
    assert r == r.fio
    assert json.loads(json.dumps(r.fio)) == r.fio
    assert vmio.fio_text(r) == vmio.fio_text(r.fio)


def test_simulate_takes_the_files_text_as_well_as_their_paths(files):
    stack, job = files
    from_paths = vmio.simulate(str(stack), str(job), seed=5)
    from_text = vmio.simulate(stack.read_text(), job.read_text(), seed=5)
    assert from_text.jobs == from_paths.jobs
    assert from_text.fio["jobs"] == from_paths.fio["jobs"]


def test_a_bad_stack_given_as_text_is_one_error_line_naming_the_text():
    with pytest.raises(vmio.VmioError) as err:
        vmio.simulate("[host]\ncores = -1\n", "[j]\nrw=read\n")
    assert str(err.value).startswith("<stack file text>")
    assert "\n" not in str(err.value)


def test_simulate_refuses_an_input_that_is_neither_a_path_nor_text():
    with pytest.raises(vmio.VmioError) as err:
        vmio.simulate(42, "job.fio")  # type: ignore[arg-type]
    assert str(err.value) == "stack file: a path or the file's text, not 42"
