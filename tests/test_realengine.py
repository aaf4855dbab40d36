"""`vmio study --engine real` (vmio/real/engine.py): the same experiment simulated and run on
this machine gives the same tidy schema and fio JSON keys; points this machine cannot run are
skipped with their reason. The experiments are in tests/realengine/ (2 points of 1 s each)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import require_tool, run_vmio
from vmio.real import engine as realengine
from vmio.real import machine
from vmio.sim import parse_size
from vmio.study.evaluation import evaluate_calibration
from vmio.study.experiment import load_experiment
from vmio.study.runner import point_inputs, point_key

HERE = Path(__file__).parent / "realengine"
SIZE = "64m"


def study(tmp_path: Path, name: str, *flags: str) -> Path:
    """Run experiment tests/realengine/NAME.toml into tmp_path/<engine>-NAME; its output dir."""
    engine = "real" if "--engine" in flags else "sim"
    out = tmp_path / f"{engine}-{name}{'-substitute' if '--substitute' in flags else ''}"
    extra = ["--real-dir", str(tmp_path / "real"), "--real-size", SIZE] if engine == "real" else []
    r = run_vmio("study", HERE / f"{name}.toml", "--out", out, *flags, *extra)
    assert r.returncode == 0, r.stderr
    return out


def on_a_disk_without_hdds(tmp_path: Path) -> None:
    """The test needs fio and the directory of the images (tmp_path/real) on a disk whose
    class is not hdd (an HDD stack runs there)."""
    require_tool("fio", "fio")
    (tmp_path / "real").mkdir()
    if realengine.disk_class(machine.disk(tmp_path / "real")) == "hdd":
        pytest.skip("this machine's disk is an HDD: HDD stacks run on it")


def fio_keys(path: Path) -> dict:
    """What results.py reads of a point's JSON, per job and direction: the keys present."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for job in doc["jobs"]:
        for d in ("read", "write"):
            side = job[d]
            out[(job["jobname"], d)] = (
                {k for k in ("bw_bytes", "iops", "io_bytes", "total_ios", "runtime") if k in side},
                "mean" in side["lat_ns"],
                "mean" in side["clat_ns"],
                "99.000000" in side["clat_ns"].get("percentile", {}),
            )
    return out


def _csv_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def check_same_schema(sim: Path, real: Path) -> list[dict]:
    """sim's and real's tidy and points tables and point JSON agree in form; real's points
    rows (engine, machine, job options: one per point) returned."""
    for name in ("results", "points"):
        s, r = pq.read_schema(sim / f"{name}.parquet"), pq.read_schema(real / f"{name}.parquet")
        assert [(f.name, f.type) for f in s] == [(f.name, f.type) for f in r]
    sim_rows, real_rows = _csv_rows(sim / "results.csv"), _csv_rows(real / "results.csv")
    assert [(x["block"], x["direction"]) for x in sim_rows] == [
        (x["block"], x["direction"]) for x in real_rows
    ]
    sim_points, real_points = _csv_rows(sim / "points.csv"), _csv_rows(real / "points.csv")
    assert {x["engine"] for x in sim_points} == {"sim"}
    assert {x["machine_json"] for x in sim_points} == {"{}"}
    assert {x["engine"] for x in real_points} == {"real"}
    for point in ("randread-4k", "randread-64k"):
        assert fio_keys(sim / "json" / f"{point}.json") == fio_keys(real / "json" / f"{point}.json")
    for row in real_rows:
        assert int(row["bw_bytes"]) > 0 and float(row["clat_mean_ns"]) > 0
    for row in real_points:
        m = json.loads(row["machine_json"])
        assert m["cores"] >= 1 and m["memory_bytes"] > 0 and m["kernel"] and m["fio"]
        assert [d["path"] for d in m["disks"]] == [str((real.parent / "real").resolve())]
    return real_points


def test_a_native_host_experiment_run_for_real_has_the_simulators_columns_types_and_fio_keys(
    tmp_path,
):
    require_tool("fio", "fio")
    sim = study(tmp_path, "host")
    real = study(tmp_path, "host", "--engine", "real")
    rows = check_same_schema(sim, real)
    assert {json.loads(r["job_options_json"])["filename"] for r in rows} == {
        str((tmp_path / "real" / "ssd0.img").resolve())
    }
    assert (tmp_path / "real" / "ssd0.img").stat().st_size == 64 << 20
    doc = json.loads((real / "json" / "randread-64k.json").read_text(encoding="utf-8"))
    assert doc["vmio"]["engine"] == "real" and doc["vmio"]["mode"] == "host"
    assert doc["vmio"]["seed"] == 1 and doc["vmio"]["stack"]["host"]["hypervisor"] == "native"
    assert doc["jobs"][0]["job options"]["bs"] == "64k"
    assert not (real / "skipped.csv").exists()


def test_a_vm_stack_runs_through_vmio_serve_with_fios_nbd_engine_in_the_same_schema(tmp_path):
    require_tool("fio", "fio")
    sim = study(tmp_path, "vm")
    real = study(tmp_path, "vm", "--engine", "real")
    check_same_schema(sim, real)
    doc = json.loads((real / "json" / "randread-4k.json").read_text(encoding="utf-8"))
    v = doc["vmio"]
    assert v["mode"] == "serve" and v["vm"] == "vm1"
    assert v["replaced"]["ioengine"] == "nbd" and v["replaced"]["direct"] == "0"
    assert v["replaced"]["uri"].startswith("nbd+unix:///vm1/vda?socket=")
    assert v["stack"]["device"][0]["path"] == str((tmp_path / "real" / "ssd0.img").resolve())
    # The server saw every read fio completed (fio counts after its ramp, the server all).
    (export,) = v["server"]
    assert export["export"] == "vm1/vda"
    assert export["read_ops"] >= doc["jobs"][0]["read"]["total_ios"] > 0


def test_two_vms_own_workloads_run_at_once_against_one_server_as_the_simulator_merges_them(
    tmp_path,
):
    require_tool("fio", "fio")
    sim = study(tmp_path, "two-vms")
    real = study(tmp_path, "two-vms", "--engine", "real")
    s, r = pq.read_schema(sim / "results.parquet"), pq.read_schema(real / "results.parquet")
    assert [(f.name, f.type) for f in s] == [(f.name, f.type) for f in r]
    docs = [json.loads((d / "json" / "none-64k.json").read_text()) for d in (sim, real)]
    for doc in docs:
        assert [(j["vmio_vm"], parse_size(j["job options"]["bs"])) for j in doc["jobs"]] == [
            ("vm1", 4096),
            ("vm2", 65536),
        ]
        assert [(v["name"], v["weight"]) for v in doc["vmio"]["vms"]] == [
            ("vm1", 1000),
            ("vm2", 100),
        ]
    v = docs[1]["vmio"]
    assert [x["bw_bytes"] for x in v["vms"]] == [j["read"]["bw_bytes"] for j in docs[1]["jobs"]]
    assert [(e["export"], e["read_ops"] > 0) for e in v["server"]] == [
        ("vm1/vda", True),
        ("vm2/vda", True),
    ]
    assert "bandwidth of vm1" in (real / "tables.txt").read_text(encoding="utf-8")


def test_an_hdd_stack_is_skipped_with_its_reason_and_runs_on_files_with_substitute(tmp_path):
    on_a_disk_without_hdds(tmp_path)
    out = study(tmp_path, "hdd", "--engine", "real")
    with open(out / "skipped.csv", encoding="utf-8") as f:
        skipped = list(csv.DictReader(f))
    assert [s["point"] for s in skipped] == ["randread block=4k", "randread block=64k"]
    assert all(
        "device 'hdd0' (model hdd) needs a disk of class hdd" in s["reason"] for s in skipped
    )
    assert (out / "results.csv").read_text(encoding="utf-8").count("\n") == 1  # header only
    with open(out / "calibration.csv", encoding="utf-8") as f:
        assert [c["status"] for c in csv.DictReader(f)] == ["skipped"]
    assert "0 points, 2 skipped" in (out / "tables.txt").read_text(encoding="utf-8")
    assert not (out / "figure.png").exists()  # nothing to draw
    out = study(tmp_path, "hdd", "--engine", "real", "--substitute")
    assert not (out / "skipped.csv").exists()
    doc = json.loads((out / "json" / "randread-4k.json").read_text(encoding="utf-8"))
    assert "needs a disk of class hdd" in doc["vmio"]["substituted"][0]
    assert doc["vmio"]["stack"]["device"][0]["real_substitute"] == doc["vmio"]["substituted"][0]


def test_a_skipped_point_is_a_dash_in_the_tables_and_its_calibration_says_skipped(tmp_path):
    on_a_disk_without_hdds(tmp_path)
    out = study(tmp_path, "mixed", "--engine", "real")
    tables = (out / "tables.txt").read_text(encoding="utf-8")
    assert "1 points, 1 skipped" in tables and re.search(r"\nhdd +-\n", tables)
    with open(out / "calibration.csv", encoding="utf-8") as f:
        assert [(c["id"], c["status"]) for c in csv.DictReader(f)] == [
            ("ssd-moves", "PASS"),
            ("hdd-moves", "skipped"),
        ]
    with open(out / "results.csv", encoding="utf-8") as f:
        assert [r["model"] for r in csv.DictReader(f)] == ["ssd"]
    assert (out / "figure.png").stat().st_size > 0
    assert sorted(p.name for p in (out / "json").iterdir()) == ["ssd-4k.json"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--real-size", "64m"], "--real-dir, --real-size and --substitute need --engine real"),
        (["--substitute"], "--real-dir, --real-size and --substitute need --engine real"),
        (["--engine", "fast"], "argument --engine: invalid choice: 'fast'"),
        (
            ["--engine", "real", "--real-size", "1k"],
            "argument --real-size: '1k' is not a size in 1m..1p",
        ),
    ],
)
def test_bad_engine_flags_give_one_error_line(tmp_path, flags, message):
    r = run_vmio("study", HERE / "host.toml", "--out", tmp_path / "out", *flags)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


VM_STACK = (HERE / "vm-stack.toml").read_text(encoding="utf-8")
OPTS = realengine.Options(Path("/nonexistent-real-dir"))


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ("[j]\nrw=write\ndirectory=/mnt/vda\n", "needs a guest (QEMU): job 'j' works on files"),
        ("[j]\nrw=read\nfilename=/data/f\n", "filename=/data/f, not a disk of VM 'vm1'"),
        ("[j]\nioengine=cpuio\ncpuload=50\n", "burns CPU (ioengine=cpuio)"),
    ],
)
def test_a_vm_job_on_files_or_cpu_is_skipped_as_needing_a_guest(job, reason):
    with pytest.raises(realengine.Skipped) as e:
        realengine.plan(VM_STACK, "vm-stack.toml", job, None, OPTS)
    assert reason in str(e.value)


def test_a_vm_disk_larger_than_the_served_images_is_laid_out_anew_and_the_job_cut_to_it():
    stack = VM_STACK.replace('size = "32m"', 'size = "100g"')
    job = "[j]\nioengine=psync\nfilename=/dev/vda\nsize=4g\nrw=read\niodepth=8\n"
    p = realengine.plan(stack, "vm-stack.toml", job, None, realengine.Options(Path("/x"), 8 << 20))
    disk = p.served_stack["vm"][0]["disk"][0]
    assert (disk["offset"], disk["size"]) == (0, 8 << 20)
    assert p.replaced == {
        "ioengine": "nbd",
        "filename": "vm1/vda",
        "direct": "0",
        "iodepth": "1",  # psync's depth
        "size": str(8 << 20),
    }


def test_a_vm_job_with_its_own_ioengine_gets_the_nbd_uri_where_fio_accepts_it(tmp_path):
    require_tool("fio", "fio")
    job = "[a]\nioengine=psync\nfilename=/dev/vda\nrw=read\n[b]\nrw=write\n"
    p = realengine.plan(VM_STACK, "vm-stack.toml", job, None, OPTS)
    text = realengine.with_uri(p.job_text, "nbd+unix:///vm1/vda?socket=/s")
    (tmp_path / "job.fio").write_text(text, encoding="utf-8")
    r = subprocess.run(["fio", "--parse-only", str(tmp_path / "job.fio")], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert [o["uri"] for _, o in realengine.job_sections(text)] == [
        "nbd+unix:///vm1/vda?socket=/s"
    ] * 2


def test_job_sections_overlay_each_global_section_on_the_jobs_after_it():
    text = "[global]\nbs=4k\n; c\n[a]\nrw=read\n[global]\nbs=8k\ndirect\n[b]\nbs=1m\n"
    assert realengine.job_sections(text) == [
        ("a", {"bs": "4k", "rw": "read"}),
        ("b", {"bs": "1m", "direct": ""}),
    ]


@pytest.mark.parametrize(
    ("disk", "klass"),
    [
        ({"device": "vda", "model": "virtio_blk", "rotational": True}, "flash"),
        ({"device": "sda", "model": "ST2000DM008", "rotational": True}, "hdd"),
        ({"device": "nvme0n1", "model": "Samsung SSD 980", "rotational": False}, "flash"),
        ({"device": "", "fstype": "tmpfs"}, "memory"),
    ],
)
def test_a_disks_class_comes_from_its_rotational_flag_unless_its_driver_is_paravirtual(disk, klass):
    assert realengine.disk_class(disk) == klass


def test_the_machine_description_reads_cpuinfo_and_meminfo_and_has_one_line():
    assert machine.cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n") == "AMD EPYC 7B13"
    assert machine.cpu_model("Hardware\t: BCM2835\n") == "BCM2835"
    assert machine.memory_bytes("MemTotal:       24684096 kB\n") == 24684096 * 1024
    d = machine.describe([Path("/")])
    assert list(d) == ["cpu", "cores", "memory_bytes", "kernel", "fio", "disks"]
    assert "\n" not in machine.short(d) and d["disks"][0]["path"] == "/"


def test_a_points_key_depends_on_the_engine_and_the_real_engines_options():
    exp = load_experiment(HERE / "host.toml")
    inp = point_inputs(exp)[0]
    keys = {
        point_key(exp, inp, 1, None, e)
        for e in (
            None,
            OPTS,
            realengine.Options(OPTS.real_dir, 2 << 20),
            realengine.Options(Path("/y")),
        )
    }
    assert len(keys) == 4


def test_a_calibration_whose_points_were_skipped_says_skipped():
    exp = load_experiment(HERE / "host.toml")
    points = [inp.point for inp in point_inputs(exp)]
    (row,) = evaluate_calibration(exp, [], skipped=[points[1]])
    assert row.status == "skipped"
    (row,) = evaluate_calibration(exp, [], skipped=[points[0]])  # not the 64k point it checks
    assert row.status == "N/A"


def test_a_block_device_path_is_described_as_that_device_not_as_devtmpfs():
    root = machine.disk(Path("/"))
    source = Path(root["source"])
    if not source.is_block_device():
        pytest.skip(f"/ is on {source}, not a block device")
    d = machine.disk(source)
    assert (d["device"], d["model"], d["rotational"]) == (
        root["device"],
        root["model"],
        root["rotational"],
    )


def test_a_native_device_with_its_own_path_is_used_as_it_is_and_the_job_cut_to_its_size(
    tmp_path,
):
    disk = tmp_path / "disk.bin"
    disk.write_bytes(b"\0" * (4 << 20))
    stack = (HERE / "host-stack.toml").read_text(encoding="utf-8")
    stack = stack.replace('model = "ssd"', f'model = "ssd"\npath = "{disk}"')
    job = (HERE / "job.fio").read_text(encoding="utf-8")
    p = realengine.plan(stack, "host-stack.toml", job, None, realengine.Options(tmp_path / "r"))
    assert (p.mode, p.images) == ("host", [])
    assert p.replaced == {"filename": str(disk), "size": str(4 << 20)}
    assert p.targets == {"j": f"device 'ssd0': {disk}"}
