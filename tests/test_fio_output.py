"""`vmio sim` writes fio's JSON as fio 3.33 does.

Real fio and `vmio sim` run the same job file (fio on a small file of the test's directory,
vmio on its VM's disk: the file's `filename=` line is the only difference) and vmio's document
must have every key fio's has, recursively, with the same JSON type (an int where fio writes
an int, a float where fio writes a float), in `json` and in `json+`; job and global options
are fio's as written, and group_reporting gives fio's number of entries. Without fio the
tests fail under CI and the test command, and are skipped elsewhere (conftest.missing_tool).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import missing_tool, run_vmio

# The [global] lines both runs share; fio also gets filename=FILE.
GLOBAL = "[global]\nioengine={engine}\nsize=2m\nbs=4k\n"
JOBS = {
    "randread-psync": ("psync", "[a]\nrw=randread\niodepth=1\n"),
    "randrw-libaio-qd4": ("libaio", "[b]\nrw=randrw\nrwmixread=70\niodepth=4\n"),
    "group-reporting": ("psync", "[g]\nrw=randread\nnumjobs=2\ngroup_reporting\n"),
    "two-groups": ("psync", "[x]\nrw=read\n[y]\nstonewall\nrw=write\n"),
    "two-jobs-one-group": (
        "psync",
        "[g1]\nrw=randread\nnumjobs=2\ngroup_reporting\n[g2]\nrw=read\ngroup_reporting\n"
        "[h]\nstonewall\nrw=write\nnumjobs=2\n",
    ),
}


def fio_json(tmp_path: Path, engine: str, sections: str, fmt: str) -> dict[str, Any]:
    fio = shutil.which("fio")
    if fio is None:
        missing_tool("fio is not installed")
    data = tmp_path / "fio.data"
    job = tmp_path / "fio.fio"
    job.write_text(GLOBAL.format(engine=engine) + f"filename={data}\n" + sections)
    r = subprocess.run(
        [fio, f"--output-format={fmt}", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    del doc["global options"]["filename"]  # the one line vmio's job file lacks
    return doc


def vmio_json(tmp_path: Path, stack: Path, engine: str, sections: str, fmt: str) -> str:
    job = tmp_path / "vmio.fio"
    job.write_text(GLOBAL.format(engine=engine) + sections)
    r = run_vmio("sim", "--stack", stack, str(job), "--output-format", fmt, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def shape_differences(fio: Any, vmio: Any, path: str = "") -> list[str]:
    """Where vmio's value lacks a key of fio's or has another JSON type (lists: their first
    element; json+'s `bins`: keys are data, so only their types)."""
    if type(fio) is not type(vmio):
        return [f"{path}: fio has {type(fio).__name__}, vmio {type(vmio).__name__}"]
    if isinstance(fio, list):
        return shape_differences(fio[0], vmio[0], f"{path}[0]") if fio and vmio else []
    if not isinstance(fio, dict):
        return []
    if path.endswith("/bins"):
        bad = [k for k, v in vmio.items() if not (k.isdigit() and type(v) is int)]
        return [f"{path}: bins {bad[:3]} are not value: count"] if bad or not vmio else []
    out: list[str] = []
    for key, value in fio.items():
        if key not in vmio:
            out.append(f"{path}/{key}: missing")
        else:
            out += shape_differences(value, vmio[key], f"{path}/{key}")
    return out


@pytest.mark.parametrize("fmt", ["json", "json+"])
@pytest.mark.parametrize("name", sorted(JOBS))
def test_vmio_json_has_every_key_of_fio_s_with_its_type(name, fmt, tmp_path, write_stack):
    engine, sections = JOBS[name]
    fio = fio_json(tmp_path, engine, sections, fmt)
    vmio = json.loads(vmio_json(tmp_path, write_stack(), engine, sections, fmt))
    assert shape_differences(fio, vmio) == []
    assert len(vmio["jobs"]) == len(fio["jobs"]), "one entry per job, or per group"
    for f, v in zip(fio["jobs"], vmio["jobs"], strict=True):
        assert (v["jobname"], v["groupid"]) == (f["jobname"], f["groupid"])
        assert v.get("job options") == f.get("job options")
    assert vmio["global options"] == fio["global options"]
    # vmio's json is json+ (clat bins in both): a superset of fio's json.
    job = vmio["jobs"][0]
    assert "bins" in job["read"]["clat_ns"] or "bins" in job["write"]["clat_ns"]


def test_vmio_s_samples_and_distributions_are_real_figures(tmp_path, write_stack):
    # A 2 s time-based job: four 500 ms samples whose mean is the job's bandwidth, and
    # distributions that sum to 100 %.
    sections = "[t]\nrw=randread\ndirect=1\niodepth=8\ntime_based\nruntime=2\n"
    job = json.loads(vmio_json(tmp_path, write_stack(), "libaio", sections, "json"))["jobs"][0]
    read = job["read"]
    assert (read["bw_samples"], read["iops_samples"]) == (4, 4)
    assert abs(read["bw_mean"] - read["bw"]) <= 1
    assert read["bw_min"] <= read["bw_mean"] <= read["bw_max"]
    assert read["bw_dev"] > 0 and read["clat_ns"]["stddev"] > 0
    for key in ("iodepth_level", "iodepth_submit", "iodepth_complete"):
        assert sum(job[key].values()) == pytest.approx(100.0, abs=1e-3), key
    assert job["iodepth_level"]["8"] == pytest.approx(100.0, abs=0.5)
    lat = sum(sum(job[k].values()) for k in ("latency_ns", "latency_us", "latency_ms"))
    assert lat == pytest.approx(100.0, abs=1e-3)


def fio_text(tmp_path: Path, engine: str, sections: str, fmt: str) -> str:
    fio = shutil.which("fio")
    if fio is None:
        missing_tool("fio is not installed")
    job = tmp_path / "fio.fio"
    job.write_text(GLOBAL.format(engine=engine) + f"filename={tmp_path / 'fio.data'}\n" + sections)
    r = subprocess.run(
        [fio, f"--output-format={fmt}", str(job)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


# Terse v3 before its disks: 5 + 2 directions x 41 + 5 CPU + 7 depths + 10 usec + 12 msec.
TERSE_FIELDS = 121


def terse_shape(line: str) -> list[str]:
    """Each field's kind: percent, p%=v, float, int, text; then the disks' field count."""

    def kind(f: str) -> str:
        if "=" in f:
            return "p=v"
        if f.endswith("%"):
            return "pct"
        if f.replace(".", "", 1).isdigit():
            return "float" if "." in f else "int"
        return "text"

    fields = line.rstrip("\n").split(";")
    assert (len(fields) - TERSE_FIELDS) % 9 == 0, len(fields)
    return [kind(f) for f in fields[:TERSE_FIELDS]]


def test_terse_lines_have_fio_s_fields_in_fio_s_order(tmp_path, write_stack):
    engine, sections = JOBS["randrw-libaio-qd4"]
    fio = fio_text(tmp_path, engine, sections, "terse").splitlines()
    job = tmp_path / "vmio.fio"
    job.write_text(GLOBAL.format(engine=engine) + sections)
    r = run_vmio("sim", "--stack", write_stack(), job, "--output-format=terse", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    vmio = r.stdout.splitlines()
    assert len(vmio) == len(fio) == 1
    fio_kinds, vmio_kinds = terse_shape(fio[0]), terse_shape(vmio[0])
    # The version field is text in both ("fio-3.33", "vmio-x.y.z"); the rest match.
    assert vmio_kinds == fio_kinds
    assert vmio[0].split(";")[:5:2] == ["3", "b", "0"]


def test_several_formats_come_in_fio_s_order(tmp_path, write_stack):
    engine, sections = JOBS["randread-psync"]
    job = tmp_path / "vmio.fio"
    job.write_text(GLOBAL.format(engine=engine) + sections)
    r = run_vmio(
        "sim", "--stack", write_stack(), job, "--output-format=json,normal,terse", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # Normal's header, then terse, then json, then normal's report (stat.c's buffers).
    header = out.index("Starting 1 process")
    terse = out.index("\n3;vmio-")
    start, end = out.index("\n{\n"), out.index("\n}\n")
    report = out.index("Run status group 0")
    assert header < terse < start < end < report
    assert json.loads(out[start : end + 3])["jobs"][0]["jobname"] == "a"
    bad = run_vmio("sim", "--stack", write_stack(), job, "--output-format=json,xml", cwd=tmp_path)
    assert bad.returncode != 0
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--output-format: 'xml' is not a format; accepted: normal, json, json+, terse or a "
            "comma list of them"
        )
    )


def script_python(script: Path) -> str:
    """The interpreter a Python script's `#!` line names, found on PATH as the kernel would
    (`#!/usr/bin/env python3` is the first `python3` on PATH: a venv's when one is active)."""
    words = script.read_text(encoding="utf-8", errors="replace").splitlines()[0][2:].split()
    name = words[1] if Path(words[0]).name == "env" and len(words) > 1 else words[0]
    return shutil.which(name) or name


def modules_the_python_lacks(python: str, script: Path) -> list[str]:
    """The top-level modules `script` imports that `python` cannot find."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    roots = sorted({n.split(".")[0] for n in names} - {"__future__"})
    probe = (
        "import importlib.util as u, sys\nprint(*[m for m in sys.argv[1:] if not u.find_spec(m)])"
    )
    r = subprocess.run(
        [python, "-c", probe, *roots], capture_output=True, text=True, timeout=60, check=True
    )
    return r.stdout.split()


def test_fio_s_jsonplus_tool_reads_every_clat_bin_of_vmio_s_json_plus(tmp_path, write_stack):
    tool = shutil.which("fio_jsonplus_clat2csv")
    if tool is None:
        missing_tool("fio_jsonplus_clat2csv (fio's tools) is not installed")
    # The tool runs under the first python3 on PATH (a venv's in a venv): name what it lacks
    # rather than show its traceback. The test extras (pyproject.toml) install it.
    python = script_python(Path(tool))
    lacking = modules_the_python_lacks(python, Path(tool))
    if lacking:
        pytest.fail(
            f"fio_jsonplus_clat2csv runs under {python}, which cannot import "
            f"{', '.join(lacking)}: pip install '.[test]' (or pip install {' '.join(lacking)})",
            pytrace=False,
        )
    engine, sections = JOBS["randread-psync"]
    (tmp_path / "run.json").write_text(
        vmio_json(tmp_path, write_stack(), engine, sections, "json+"), encoding="utf-8"
    )
    r = subprocess.run(
        [tool, "run.json", "clat"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "clat_job0").read_text().splitlines()[1:]
    bins = json.loads((tmp_path / "run.json").read_text())["jobs"][0]["read"]["clat_ns"]["bins"]
    assert len(rows) == len(bins) > 0
    assert [int(r.split(",")[0]) for r in rows] == sorted(int(k) for k in bins)
