"""Where the time goes: the simulator's per-layer breakdown (`vmio.breakdown`, the simulator's
sim/breakdown.rs) in the JSON, the normal report, the Python API and a study's points.csv."""

from __future__ import annotations

import csv
import json

from conftest import run_vmio
from vmio import fioreport
from vmio.api import simulate
from vmio.results import breakdown_column, breakdown_layers

STACK = """\
[[device]]
name = "nv0"
model = "ssd"
capacity = "16g"
[[volume]]
name = "v"
layout = "single"
devices = ["nv0"]
[[vm]]
name = "vm1"
[[vm.disk]]
name = "vda"
volume = "v"
size = "4g"
cache = "writeback"
"""

JOB = """\
[a]
rw=randrw
bs=4k
ioengine=libaio
iodepth=8
direct=1
size=256m
runtime=200ms
time_based
[b]
rw=randread
bs=16k
ioengine=psync
direct=0
size=64m
runtime=200ms
time_based
"""


def lat_mean(job: dict) -> float:
    """fio's mean lat_ns over a job's reads, writes and trims."""
    dirs = [job[d] for d in ("read", "write", "trim")]
    n = sum(d["lat_ns"]["N"] for d in dirs)
    return sum(d["lat_ns"]["mean"] * d["lat_ns"]["N"] for d in dirs) / n


def test_every_job_has_a_breakdown_of_every_layer_in_the_shape_the_readers_expect():
    r = simulate(STACK, JOB)
    entries = r["vmio"]["breakdown"]
    assert [e["job"] for e in entries] == [j["jobname"] for j in r["jobs"]]
    for e in entries:
        assert set(e) == {"job", "layers"}
        assert [x["layer"] for x in e["layers"]] == list(breakdown_layers())
        for x in e["layers"]:
            assert set(x) == {"layer", "mean_ns", "p50_ns", "p99_ns", "p99.9_ns", "share"}
            assert x["p50_ns"] <= x["p99_ns"] <= x["p99.9_ns"]


def test_the_layers_means_add_up_to_each_jobs_mean_latency():
    r = simulate(STACK, JOB)
    for job, b in zip(r["jobs"], r.breakdowns, strict=True):
        assert abs(b.mean_ns - lat_mean(job)) <= 1e-3 * lat_mean(job) + 1e-3
        assert abs(sum(x.share for x in b.layers) - 1.0) < 1e-5
    # The buffered job's reads go through the guest's page cache; the direct one's never.
    assert r.breakdown("b").layer("vm.page_cache").mean_ns > 0
    assert r.breakdown("a").layer("vm.page_cache").mean_ns == 0
    assert r.breakdown().job == "a"


def test_the_normal_report_ends_with_where_the_time_went_and_keeps_fios_lines():
    r = simulate(STACK, JOB)
    text = fioreport.fio_text(r.fio)
    plain = json.loads(json.dumps(r.fio))
    del plain["vmio"]["breakdown"]
    before = fioreport.fio_text(plain)
    assert text.startswith(before.rstrip("\n") + "\n")
    added = text[len(before.rstrip("\n")) + 1 :].splitlines()
    assert added[0].startswith("vmio: where the time went, job 'a' (mean lat ")
    assert added[1].split() == ["vmio:", "layer", "mean", "share", "p50", "p99", "p99.9"]
    assert any(line.split()[1] == "device" for line in added[2:])
    assert all(line.startswith("vmio: ") for line in added)


def test_a_studys_points_csv_has_each_points_mean_time_per_layer(tmp_path):
    (tmp_path / "stack.toml").write_text(STACK, encoding="utf-8")
    (tmp_path / "job.fio").write_text(JOB.split("[b]")[0], encoding="utf-8")
    (tmp_path / "experiment.toml").write_text(
        '[experiment]\nname = "bd"\nstack = "stack.toml"\njob = "job.fio"\n'
        '[[axis]]\nname = "cache"\ntarget = "stack:vm.0.disk.0.cache"\n'
        'values = ["none", "writeback"]\n'
        '[[axis]]\nname = "bs"\ntarget = "job:bs"\nvalues = ["4k", "16k"]\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    r = run_vmio("study", str(tmp_path / "experiment.toml"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    with (out / "points.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = [breakdown_column(layer) for layer in breakdown_layers()]
    assert "breakdown_vm_disk_queue_mean_ns" in columns
    assert len(rows) == 4
    for row in rows:
        point = json.loads((out / "json" / f"{row['point']}.json").read_text(encoding="utf-8"))
        total = sum(float(row[c]) for c in columns)
        assert abs(total - lat_mean(point["jobs"][0])) <= 1e-3 * total
    # results.csv stays tidy: no breakdown columns.
    header = (out / "results.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "breakdown" not in header
