"""Image formats for real (python/vmio/real/images.py): qemu-img's images served by
qemu-storage-daemon, measured with fio's nbd engine; the prediction's stack for `vmio sim`.

The real test is short (a 256 MiB image, 1 s per point, one round): it checks that the harness
measures something sane. Without qemu-img, qemu-storage-daemon or fio it fails under CI and is
skipped elsewhere (conftest.missing_tool). The stack tests need no tool and no simulator."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import missing_tool
from vmio.real import images
from vmio.real.images import GIB, KIB, MIB
from vmio.sim import native

ROOT = Path(__file__).resolve().parent.parent


def test_the_l2_caches_cover_the_image_and_a_quarter_of_it_as_docs_qcow2_cache_says():
    # 4 GiB of 64 KiB clusters: 65536 entries of 8 bytes = 512 KiB maps all of it.
    large = images.l2_cache(64 * KIB, 4 * GIB, "large")
    small = images.l2_cache(64 * KIB, 4 * GIB, "small")
    assert (large.size, large.entry) == (512 * KIB, 64 * KIB)
    assert (small.size, small.entry) == (128 * KIB, 64 * KIB)
    assert large.coverage(64 * KIB) == 4 * GIB and small.coverage(64 * KIB) == GIB
    # 2 MiB clusters: 16 KiB maps 4 GiB; entries of 2 KiB keep the small cache at 2 entries.
    big = images.l2_cache(2 * MIB, 4 * GIB, "large")
    tiny = images.l2_cache(2 * MIB, 4 * GIB, "small")
    assert (big.size, big.entry, tiny.size, tiny.entry) == (16 * KIB, 2 * KIB, 4 * KIB, 2 * KIB)
    # A size whose coverage is no power of two still gets all of it.
    odd = images.l2_cache(64 * KIB, 3 * GIB, "large")
    assert odd.coverage(64 * KIB) >= 3 * GIB and odd.size % odd.entry == 0


def test_qemu_img_and_qemu_storage_daemon_get_the_options_of_the_image_and_the_cache():
    q = images.Image("qcow2", "metadata", 2 * MIB)
    assert q.create_args(Path("/d/x.qcow2"), GIB) == [
        "qemu-img", "create", "-q", "-f", "qcow2", "-o",
        "cluster_size=2097152,preallocation=metadata", "/d/x.qcow2", str(GIB),
    ]  # fmt: skip
    args = images.Serve("native", "small").args(q, Path("/d/x.qcow2"), 4 * GIB, Path("/d/s"))
    assert args[2] == "driver=file,filename=/d/x.qcow2,aio=native,cache.direct=on,node-name=file0"
    assert args[4] == (
        "driver=qcow2,file=file0,node-name=fmt0,l2-cache-size=4096,l2-cache-entry-size=2048"
    )
    assert args[6] == "addr.type=unix,addr.path=/d/s"
    raw = images.Serve("io_uring", None).args(images.RAW_FULL, Path("/d/r"), GIB, Path("/d/s"))
    assert raw[4] == "driver=raw,file=file0,node-name=fmt0"


def test_a_job_keeps_its_region_and_is_the_same_for_real_and_for_the_simulator_but_the_uri():
    real = images.RAND_W.text(4 * GIB, 3.0, "nbd+unix:///e0?socket=/s")
    sim = images.RAND_W.text(4 * GIB, 3.0)
    assert sim == (
        "[randwrite-4k-qd16]\nioengine=nbd\nrw=randwrite\nbs=4096\niodepth=16\ndirect=1\n"
        "offset=0\nsize=2147483648\nruntime=3000ms\ntime_based=1\n"
    )
    assert real.replace("uri=nbd+unix:///e0?socket=/s\n", "") == sim
    assert "offset=2147483648\nsize=2147483648\n" in images.SEQ_W.text(4 * GIB, 1.0)


def test_the_plan_measures_every_image_first_and_over_and_rounds_alternate_their_order():
    units = images.plan()
    a = [u for u in units if u.part == "a"]
    assert [u.image.name for u in a] == [
        "raw-off", "raw-full", "qcow2-64k-off", "qcow2-64k-metadata", "qcow2-64k-full",
        "qcow2-2048k-off", "qcow2-2048k-metadata", "qcow2-2048k-full",
    ]  # fmt: skip
    assert [p.state for p in a[0].points] == ["first", "first", "over", "over"]
    b = [p.serve.l2 for u in units if u.part == "b" for p in u.points]
    assert b == ["small", "large", "small", "large"]
    c = [u for u in units if u.part == "c"]
    assert len(c) == 6 and {u.points[0].serve.aio for u in c} == set(images.AIOS)
    keys = [p.key for u in units for p in u.points]
    assert len(keys) == len(set(keys)) == 8 * 4 + 4 + 6 * 4
    assert images.round_order(units, 1) == units[::-1] and images.round_order(units, 2) == units


def test_the_prediction_stack_carries_the_image_keys_over_the_calibrated_device():
    cal = images.Calibration(
        {
            "host": {"cores": 2, "hypervisor": "native"},
            "device": [
                {"name": "vda", "model": "flash", "capacity": GIB, "read_latency": "90000ns"}
            ],
            "volume": [{"name": "vda", "layout": "single", "devices": ["vda"]}],
            "scheduler": {"name": "mq-deadline"},
            "vm": [{"name": "host", "disk": [{"name": "vda", "volume": "vda"}]}],
        },
        {"handoff": "5000ns", "request": "9000ns", "read_rate": 2000000000},
        "cal",
    )
    p = images.Point(
        "b", images.Q64_OFF, images.Serve("threads", "small"), images.RAND_R_ALL, "over"
    )
    text = images.sim_stack(p, 4 * GIB, cal)
    body = text[text.index("[host]") :]
    assert body == (
        '[host]\ncores = 2\nhypervisor = "kvm"\n\n'
        '[[device]]\nname = "vda"\nmodel = "flash"\ncapacity = 8589934592\n'
        'read_latency = "90000ns"\n\n'
        '[[volume]]\nname = "vda"\nlayout = "single"\ndevices = ["vda"]\nfilesystem = "ext4"\n\n'
        '[scheduler]\nname = "mq-deadline"\n\n'
        # QEMU's NBD server asks a read's block status before reading it.
        '[nbd]\nhandoff = "5000ns"\nrequest = "9000ns"\nread_rate = 2000000000\n'
        "block_status = true\n\n"
        '[[vm]]\nname = "img"\n\n'
        '[[vm.disk]]\nname = "disk"\nvolume = "vda"\nsize = 4294967296\ninterface = "nbd"\n'
        'cache = "none"\nformat = "qcow2"\naio = "threads"\n\n'
        "[vm.disk.image]\ncluster_size = 65536\nl2_cache_size = 131072\n"
        'l2_cache_entry_size = 65536\npreallocation = "off"\npopulated = 1.0\n\n'
        # The measured [nbd] costs hold the real path's wake-ups: no spread on top.
        '[vm.disk.queue]\nwake_spread = "0ns"\n'
    )
    assert text.startswith("# vmio real-images ")
    first = images.Point("a", images.RAW_FULL, images.Serve("native", None), images.SEQ_W, "first")
    doc = tomllib.loads(images.sim_stack(first, GIB, images.Calibration(None, None, "none")))
    disk = doc["vm"][0]["disk"][0]
    assert (disk["format"], disk["aio"]) == ("raw", "native")
    # A raw image has no populated share (the simulator refuses it): its preallocation says.
    assert disk["image"] == {"preallocation": "full"}
    assert doc["device"] == [images.UNCALIBRATED_DEVICE]
    assert doc["nbd"] == {"block_status": True}, "the server's query, the costs left default"
    # Without the image layer (a vmio that refuses its keys) the stack is the path alone.
    bare = tomllib.loads(
        images.sim_stack(first, GIB, images.Calibration(None, None, "none"), layer=False)
    )
    assert "nbd" not in bare


TABLE = '[nbd]\nhandoff = "{h}ns"\nrequest = "9000ns"\nread_rate = 2000000000\n'


def test_the_prediction_takes_qemu_storage_daemons_table_and_else_vmio_serves_with_a_note(
    tmp_path: Path,
):
    (tmp_path / "serve-path.toml").write_text("# vmio serve\n" + TABLE.format(h=5000))
    cal = images.Calibration.find(tmp_path)
    assert cal.nbd is not None and cal.nbd["handoff"] == "5000ns" and cal.stack is None
    assert cal.nbd_from == "serve-path.toml"
    assert cal.note is not None and "no serve-path-qsd.toml in " in cal.note
    assert "--server qemu-storage-daemon" in cal.note
    (tmp_path / "serve-path-qsd.toml").write_text("# qsd\n" + TABLE.format(h=7000))
    cal = images.Calibration.find(tmp_path)
    assert cal.nbd is not None and cal.nbd["handoff"] == "7000ns"
    assert (cal.nbd_from, cal.note) == ("serve-path-qsd.toml", None)
    # The JSON and the markdown say which table the predictions ran on.
    m = images.Measurement(64 * MIB, 0.5, 1, "/tmp", "ext4")
    p = images.Point("c", images.RAW_OFF, images.Serve("threads", None), images.RAND_R_ALL, "over")
    m.points[p.key] = p
    m.runs[p.key] = [images.Run(1000.0, 4096e3, 16e6)]
    pred = {p.key: images.Run(900.0, 0, 0)}
    assert f"calibration: {tmp_path}, [nbd] from serve-path-qsd.toml" in images.markdown(
        m, pred, cal
    )
    rec = json.loads(json.dumps(images.record(m, pred, cal)))
    assert rec["vmio_real_images"]["calibration_nbd_from"] == "serve-path-qsd.toml"
    again = images.Calibration.of_record(rec)
    assert again is not None and (again.nbd, again.nbd_from) == (cal.nbd, cal.nbd_from)
    assert "[nbd] from serve-path-qsd.toml" in images.sim_stack(p, 64 * MIB, cal)
    (tmp_path / "serve-path-qsd.toml").unlink()
    (tmp_path / "serve-path.toml").unlink()
    with pytest.raises(images.ImagesError, match="none of stack.toml, serve-path-qsd.toml"):
        images.Calibration.find(tmp_path)


def test_ratios_pair_rounds_and_report_their_spread():
    m = images.Measurement(GIB, 1.0, 2, "/tmp", "ext4")
    first = images.Point("a", images.Q64_OFF, images.Serve(), images.RAND_W, "first")
    over = images.Point("a", images.Q64_OFF, images.Serve(), images.RAND_W, "over")
    for p, iops in ((first, (100.0, 300.0)), (over, (400.0, 500.0))):
        m.points[p.key] = p
        m.runs[p.key] = [images.Run(x, 4096 * x, 1e6) for x in iops]
    (r,) = images.ratios(m)
    assert r.name == "first/over qcow2-64k-off randwrite-4k-qd16"
    assert (r.spread.lo, r.spread.hi, r.spread.median) == (0.25, 0.6, 0.425)
    assert r.spread.rel == pytest.approx(0.35 / 0.425)
    md = images.markdown(m, {over.key: images.Run(450.0, 0, 0), first.key: images.Run(180, 0, 0)})
    assert "| first/over qcow2-64k-off randwrite-4k-qd16 | 0.42 | 0.25-0.60 | 82 % | 0.40 |" in md


def test_every_point_is_predicted_with_the_image_layer_or_else_without_it():
    m = images.Measurement(64 * MIB, 0.5, 1, "/tmp", "ext4")
    p = images.Point("c", images.Q64_OFF, images.Serve(), images.RAND_R_ALL, "over")
    m.points[p.key] = p
    m.runs[p.key] = [images.Run(1000.0, 4096e3, 16e6)]
    pred = images.predict(m, images.Calibration(None, None, "none"), io.StringIO())
    assert pred[p.key].iops > 0
    layer = images.NO_LAYER not in m.notes
    assert layer == (not any(n.startswith(images.SIM_REFUSES) for n in m.notes)), m.notes
    assert ("without the image layer" in images.markdown(m, pred)) != layer


def _script():
    spec = importlib.util.spec_from_file_location("real_images", ROOT / "scripts/real-images.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "1m"], "real-images: --size 1m: an image is a multiple of 1 MiB"),
        (["--parts", "a,x"], "real-images: --parts a,x: accepted values are a, b, c"),
        (["--aio", "posix"], "real-images: --aio posix: accepted values are threads"),
        (["--images", "vmdk"], "real-images: --images vmdk: accepted values are raw-off"),
        (["--rounds", "0"], "real-images: --rounds 0: from 1 to 100"),
        (["--runtime", "abc"], "real-images: argument --runtime: invalid float value"),
        (["--calibration", "/nonexistent"], "real-images: --calibration /nonexistent: none of"),
        (["--from", "/nonexistent"], "real-images: real-images JSON '/nonexistent' does not"),
        (["--dir", "/nonexistent", "--no-sim"], "real-images: --dir /nonexistent: not a dir"),
        (["--dir", "/", "--size", "100t", "--no-sim"], "real-images: --dir /: "),
    ],
)
def test_a_bad_flag_is_one_line_and_status_2(args, message, capsys):
    if images.tools_missing() and "--dir" in args:
        pytest.skip("the check needs the tools first")
    try:
        status = _script().main(args)
    except SystemExit as e:
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(message), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_run_s_json_gives_back_its_measurement_to_predict_again():
    m = images.Measurement(GIB, 1.0, 1, "/tmp", "ext4", notes=["x", images.SIM_REFUSES + " y"])
    p = images.Point("c", images.Q64_OFF, images.Serve("native", "large"), images.SEQ_R_ALL, "over")
    m.points[p.key] = p
    m.runs[p.key] = [images.Run(10.0, 1e7, 2e6)]
    back = images.Measurement.of_record(json.loads(json.dumps(images.record(m, {}, None))))
    assert back.points == m.points and back.runs == m.runs and back.notes == ["x"]
    with pytest.raises(images.ImagesError, match="not a real-images JSON"):
        images.Measurement.of_record({"points": []})


def test_a_short_real_run_measures_a_first_qcow2_write_slower_than_its_overwrite(tmp_path):
    if why := images.tools_missing():
        missing_tool(why)
    # 1 GiB: the first-write job's half holds 8,192 clusters of 64 KiB, more than a second of
    # 4 KiB writes at this disk's rates reaches, so the "first" run stays a run of first
    # writes (at 256 MiB most of its second rewrote clusters it had just allocated).
    m = images.run(
        tmp_path, 1024 * MIB, 1.0, 1, ["a", "b"], ["threads"], sys.stderr, ["qcow2-64k-off"]
    )
    assert not list(tmp_path.iterdir()), "the scratch directory is left behind"
    assert all(r.iops > 0 and r.bw_bytes > 0 for runs in m.runs.values() for r in runs)
    key = "a/qcow2-64k-off/threads/l2-large/randwrite-4k-qd16/"
    first, over = m.runs[key + "first"][0], m.runs[key + "over"][0]
    print(f"\n{images.markdown(m, {})}")
    # A first write allocates a cluster (L2 and refcount updates, the rest of the cluster
    # zeroed) and the host file's blocks; an overwrite only writes its 4 KiB.
    assert first.iops < over.iops, (first, over)
    ratios = {r.name: r.spread.median for r in images.ratios(m)}
    # Three random reads in four load a 64 KiB L2 table under the image lock first: every
    # recorded round on this disk, loaded or quiet, gave 0.10 to 0.38.
    assert ratios["small/large L2 qcow2-64k-off randread-4k-qd16"] < 0.8, ratios


RECORDED = Path(__file__).with_name("real_images_figures.json")


def test_the_recorded_run_on_this_machine_holds_every_point_of_the_plan_in_three_rounds():
    m = images.Measurement.of_record(json.loads(RECORDED.read_text(encoding="utf-8")))
    assert sorted(m.points) == sorted(p.key for u in images.plan() for p in u.points)
    assert m.rounds == 3 and all(len(runs) == 3 for runs in m.runs.values())
    # Every ratio of the plan has its pair measured: 8 x 2 first/over, 2 L2, 3 aio x 4 jobs.
    assert len(images.ratios(m)) == 16 + 2 + 12


# --- the [nbd] CPU bound of the prediction -------------------------------------------------

PATH_CPU = {"handoff": "5000ns", "request": "9000ns", "cores": 2, "cpu": "30000ns"}
IO_CPU = {"cpu": "20000ns", "cpu_rate": 1_000_000_000}
C_POINT = images.Point(
    "c", images.RAW_OFF, images.Serve("threads", None), images.RAND_W_ALL, "over"
)


def test_the_bound_adds_the_paths_cpu_and_the_host_kernels_per_direct_io_request():
    both = images.Calibration(None, {**PATH_CPU, "cpu_rate": 500_000_000}, "c", io_cpu=IO_CPU)
    # cpu 30 + 20 us; the payload's CPU per byte adds: 1 / (1/500 MB/s + 1/1 GB/s).
    assert both.nbd_cpu() == ({"cores": 2, "cpu": "50000ns", "cpu_rate": 333_333_333}, None)
    # A rate of 0 is none: the other alone.
    zero = images.Calibration(None, {**PATH_CPU, "cpu_rate": 0}, "c", io_cpu=IO_CPU)
    assert zero.nbd_cpu()[0]["cpu_rate"] == 1_000_000_000
    assert images.add_rates(0, 0) == 0 and images.add_rates(3, 0) == 3
    # The path's alone, or the host kernel's alone (the stack's cores): used, with a note.
    path, note = images.Calibration(None, PATH_CPU, "c").nbd_cpu()
    assert path == {"cores": 2, "cpu": "30000ns"} and note is not None
    assert note.startswith("the [nbd] CPU bound is the served path's alone: no [io_cpu]")
    io_only = images.Calibration({"host": {"cores": 4}}, {"handoff": "1ns"}, "c", io_cpu=IO_CPU)
    keys, note = io_only.nbd_cpu()
    assert keys == {"cores": 4, "cpu": "20000ns", "cpu_rate": 1_000_000_000}
    assert note is not None and "the host kernel's per direct I/O request alone" in note
    # Durations as a stack writes them.
    assert [images.parse_duration_ns(v) for v in ("25us", "1.5us", "2ms", 7, "30ns")] == [
        25_000, 1_500, 2_000_000, 7, 30,
    ]  # fmt: skip
    with pytest.raises(images.ImagesError, match="cpu = 'x'"):
        images.parse_duration_ns("x")


def test_the_prediction_carries_the_bound_and_the_simulator_takes_it():
    cal = images.Calibration(None, {**PATH_CPU, "cpu_rate": 500_000_000}, "c", io_cpu=IO_CPU)
    on = images.sim_doc(C_POINT, GIB, cal)["nbd"]
    assert on == {
        "handoff": "5000ns", "request": "9000ns",
        "cores": 2, "cpu": "50000ns", "cpu_rate": 333_333_333, "block_status": True,
    }  # fmt: skip
    text = images.sim_stack(C_POINT, GIB, cal)
    assert "# [nbd] CPU bound: None's cpu + host-fs.toml's [io_cpu]" in text
    assert tomllib.loads(text)["nbd"] == on
    # The simulator's loader takes the bound's keys as they are.
    assert native().load_stack(text, "s.toml")["nbd"]["cpu_ns"] == 50_000
    assert "[nbd] CPU bound cores 2, cpu 50000ns, cpu_rate 333333333" in cal.describe()


def test_host_fs_tomls_io_cpu_is_found_and_recorded_for_from(tmp_path: Path):
    (tmp_path / "serve-path-qsd.toml").write_text(
        '[nbd]\nhandoff = "5000ns"\nrequest = "9000ns"\ncores = 2\ncpu = "30000ns"\ncpu_rate = 0\n'
    )
    (tmp_path / "host-fs.toml").write_text(
        '[volume]\nfilesystem = "ext4"\nalloc_cost = "1ns"\nconvert_cost = "2ns"\n\n'
        '[io_cpu]\ncpu = "20000ns"\ncpu_rate = 1000000000\n'
    )
    cal = images.Calibration.find(tmp_path)
    assert cal.io_cpu == IO_CPU and cal.host_fs is not None and "io_cpu" not in cal.host_fs
    assert cal.nbd_cpu() == ({"cores": 2, "cpu": "50000ns", "cpu_rate": 1_000_000_000}, None)
    m = images.Measurement(GIB, 1.0, 1, "/x", "ext4")
    again = images.Calibration.of_record(json.loads(json.dumps(images.record(m, {}, cal))))
    assert again is not None and again.io_cpu == IO_CPU and again.nbd_cpu() == cal.nbd_cpu()
    (tmp_path / "host-fs.toml").write_text('[volume]\nfilesystem = "ext4"\nio_cpu = 1\n[io_cpu]\n')
    assert images.Calibration.find(tmp_path).io_cpu == {}


def test_the_recorded_calibration_without_a_cpu_bound_predicts_on_the_same_stacks():
    rec = json.loads(RECORDED.read_text(encoding="utf-8"))
    cal = images.Calibration.of_record(rec)
    m = images.Measurement.of_record(rec)
    assert cal is not None and cal.io_cpu is None and cal.nbd_cpu() == ({}, None)
    for p in m.points.values():
        on = images.sim_doc(p, m.size, cal, m.fstype)
        # Its [nbd] is the recorded table as it was, and QEMU's server's block-status query.
        assert on.get("nbd") == {**(cal.nbd or {}), "block_status": True}
        head = images.sim_stack(p, m.size, cal, m.fstype).split("[host]")[0]
        assert "CPU bound" not in head
