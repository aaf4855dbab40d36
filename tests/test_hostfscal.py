"""`vmio calibrate --host-fs` (vmio.real.hostfscal): the closed form of alloc_cost and
convert_cost on synthetic runs, the table it writes read back by the stack loader and by the
image checks' Calibration (merged into a prediction's volume of the same filesystem only),
the refusals as one line, and a quick real run with fio on /var/tmp.

Tolerance of the real run (--quick: 2 rounds of 1.5 s per kind on a shared cloud disk): it
asserts that every kind and pass was measured and that the costs are the closed form of the
medians; not the costs' size or sign, which the disk's noise moves (on this project's second
cloud disk a write into a hole and an overwrite came out within 1 % of each other in one run,
18 % apart in the next).
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import require_tool, run_vmio
from test_calibrate import vmio
from vmio import stackfile
from vmio.real import cpuwork, hostfscal, images
from vmio.real.calibrate import CalibrateError

GIB = 1024**3
MIB = 1024**2
US = 1000.0
# Mean latencies (ns) per kind and round: medians 150, 100, 80 us.
LATENCIES = {
    "holes": [150 * US, 160 * US, 140 * US],
    "unwritten": [100 * US, 95 * US, 104 * US],
    "written": [80 * US, 83 * US, 78 * US],
}
STACK = """\
[host]
cores = 2

[[device]]
name = "vda"
model = "flash"

{volume}
[scheduler]
name = "none"

[[vm]]
name = "img"

[[vm.disk]]
name = "disk"
volume = "v"
size = "1g"
interface = "nbd"
cache = "none"
"""


def runs_of(latencies: dict[str, list[float]]) -> list[hostfscal.Run]:
    """The runs fio would report for these mean latencies, round by round."""
    return [
        hostfscal.Run(kind, rnd, 1.5, 1e9 / lat, lat, lat, {"write": {"lat_ns": {"mean": lat}}})
        for kind, lats in latencies.items()
        for rnd, lat in enumerate(lats)
    ]


def settings(directory: Path, fstype: str = "ext4") -> hostfscal.Settings:
    return hostfscal.Settings(directory, fstype, GIB, 1.5, 3, True)


def test_the_costs_are_the_differences_of_the_kinds_median_latencies():
    c = hostfscal.solve(runs_of(LATENCIES))
    assert {k: s.median for k, s in c.latency.items()} == {
        "holes": 150 * US,
        "unwritten": 100 * US,
        "written": 80 * US,
    }
    # alloc = t_holes - t_unwritten, convert = t_unwritten - t_written.
    assert (c.alloc_ns, c.convert_ns) == (50_000, 20_000)
    assert c.latency["holes"].rel == pytest.approx(20 / 150)
    # Each round's own differences, beside the medians'.
    assert [(r["alloc_cost"], r["convert_cost"]) for r in c.rounds] == [
        (50 * US, 20 * US),
        (65 * US, 12 * US),
        (36 * US, 26 * US),
    ]
    assert c.notes == ()
    assert c.table("ext4") == {
        "filesystem": "ext4",
        "alloc_cost": "50000ns",
        "convert_cost": "20000ns",
    }


def test_a_kind_faster_than_the_next_gives_a_cost_of_zero_with_a_note():
    c = hostfscal.solve(
        runs_of({"holes": [90 * US], "unwritten": [100 * US], "written": [120 * US]})
    )
    assert (c.alloc_ns, c.convert_ns) == (0, 0)
    assert len(c.notes) == 2
    assert c.notes[0].startswith("alloc_cost: the writes into holes (90.0 us) came out faster")
    assert c.notes[1].startswith("convert_cost: the writes into unwritten (100.0 us)")
    # Only the negative one is clamped.
    c = hostfscal.solve(
        runs_of({"holes": [90 * US], "unwritten": [100 * US], "written": [70 * US]})
    )
    assert (c.alloc_ns, c.convert_ns) == (0, 30_000) and len(c.notes) == 1


def test_a_run_into_new_blocks_that_wrote_more_blocks_than_the_file_has_gets_a_note():
    runs = runs_of(LATENCIES)
    fast = [replace(r, ios=70_000) if r.round == 1 else replace(r, ios=1000) for r in runs]
    c = hostfscal.solve(fast, 256 * 1024**2)
    assert [n.split(" made ")[0] for n in c.notes] == [
        "the holes run of round 2",
        "the unwritten run of round 2",
    ]
    assert "made 70000 writes into a file of 65536 blocks" in c.notes[0]
    # The written file's overwrites are what it measures; without the size, no check.
    assert hostfscal.solve(fast).notes == ()


def test_a_missing_kind_is_one_error():
    with pytest.raises(
        CalibrateError, match=r"needs a run of every kind \(none of \['written'\]\)"
    ):
        hostfscal.solve(runs_of({"holes": [1.0], "unwritten": [1.0]}))


def test_rounds_alternate_the_order_of_the_kinds():
    assert hostfscal.round_kinds(0) == ("holes", "unwritten", "written")
    assert hostfscal.round_kinds(1) == ("written", "unwritten", "holes")
    assert hostfscal.round_kinds(2) == hostfscal.round_kinds(0)


def test_fio_writes_4k_at_qd1_with_psync_direct_and_preallocates_nothing(tmp_path: Path):
    args = hostfscal.fio_args("holes", tmp_path / "f", GIB, 1.5)
    assert args[0] == "fio" and args[-1] == "--output-format=json"
    assert {
        "--ioengine=psync",
        "--direct=1",
        "--rw=randwrite",
        "--bs=4096",
        "--iodepth=1",
        f"--size={GIB}",
        "--fallocate=none",
        "--runtime=1500ms",
        "--time_based=1",
    } <= set(args)


def test_the_files_are_holes_or_unwritten_extents_of_the_size(tmp_path: Path):
    holes, unwritten = tmp_path / "h", tmp_path / "u"
    hostfscal.make_file("holes", holes, 64 * 1024**2)
    assert holes.stat().st_size == 64 * 1024**2 and holes.stat().st_blocks == 0
    try:
        hostfscal.make_file("unwritten", unwritten, 64 * 1024**2)
    except OSError as e:  # a /tmp whose filesystem has no fallocate (glibc then writes)
        pytest.skip(f"posix_fallocate on {tmp_path}: {e}")
    st = unwritten.stat()
    assert st.st_size == 64 * 1024**2 and st.st_blocks * 512 >= 64 * 1024**2
    # A file left there is replaced, not refused.
    hostfscal.make_file("holes", unwritten, 4096)
    assert unwritten.stat().st_size == 4096


def test_the_table_parses_back_through_the_stack_loader_and_into_the_image_checks(
    tmp_path: Path,
):
    out = tmp_path / "cal"
    h = hostfscal.write(runs_of(LATENCIES), settings(tmp_path), out)
    text = h.toml_path.read_text(encoding="utf-8")
    assert text.startswith("# vmio calibrate --host-fs ")
    assert (
        "# mean write latency, median of 3 rounds: holes 150.0 us (140.0-160.0, spread 13 %)"
        in text
    )
    table = tomllib.loads(text)
    assert table == {
        "volume": {"filesystem": "ext4", "alloc_cost": "50000ns", "convert_cost": "20000ns"}
    }
    # The stack loader (vmio sim's checks) takes the table as a [[volume]]'s keys.
    volume = stackfile.render(
        {"volume": [{"name": "v", "layout": "single", "devices": ["vda"], **table["volume"]}]}
    )
    stack = stackfile.loads(STACK.format(volume=volume))
    fs = stack.volumes[0].filesystem
    assert fs is not None and fs.type == "ext4"
    assert (fs.params["alloc_cost_ns"], fs.params["convert_cost_ns"]) == (50_000, 20_000)
    rec = json.loads(h.json_path.read_text(encoding="utf-8"))
    head = rec["vmio_calibrate_host_fs"]
    assert (head["alloc_cost_ns"], head["convert_cost_ns"]) == (50_000, 20_000)
    assert head["table"] == table["volume"] and len(rec["runs"]) == 9
    assert "holes" in hostfscal.report(h) and "alloc_cost = 50.0 us" in hostfscal.report(h)

    # The image checks' calibration finds it; a prediction's volume on ext4 takes its costs.
    cal = images.Calibration.find(out)
    assert cal.host_fs == table["volume"] and cal.stack is None and cal.nbd is None
    p = images.Point("a", images.RAW_OFF, images.Serve("threads", None), images.RAND_W, "first")
    vol = images.sim_doc(p, GIB, cal, "ext4")["volume"][0]
    assert (vol["filesystem"], vol["alloc_cost"], vol["convert_cost"]) == (
        "ext4",
        "50000ns",
        "20000ns",
    )
    assert "# host filesystem: host-fs.toml's costs" in images.sim_stack(p, GIB, cal, "ext4")
    assert "host filesystem ext4 (alloc_cost 50000ns, convert_cost 20000ns)" in cal.describe()
    # Without the image layer, and on another filesystem, the volume keeps the defaults.
    assert "alloc_cost" not in images.sim_doc(p, GIB, cal, "ext4", layer=False)["volume"][0]
    xfs = images.sim_doc(p, GIB, cal, "xfs")["volume"][0]
    assert xfs["filesystem"] == "xfs" and "alloc_cost" not in xfs
    note = cal.host_fs_keys("xfs")[1]
    assert note is not None and note.startswith("host-fs.toml measured ext4, the images are on xfs")
    m = images.Measurement(GIB, 1.0, 1, "/x", "xfs")
    images.predict(m, cal, progress=io.StringIO(), baseline=False)
    assert note in m.notes
    # The run's JSON keeps it: --from predicts again with the same costs.
    rec = json.loads(json.dumps(images.record(m, {}, cal)))
    again = images.Calibration.of_record(rec)
    assert again is not None and again.host_fs == cal.host_fs
    assert images.Measurement.of_record(rec).notes == []
    # Without host-fs.toml everything stays as before.
    h.toml_path.unlink()
    with pytest.raises(images.ImagesError, match="host-fs.toml in it"):
        images.Calibration.find(out)
    assert images.Calibration(None, None, "none").host_fs_keys("ext4") == ({}, None)


def io_runs_of(cpu_ns: float, rate: float, rounds: int = 3) -> list[hostfscal.IoRun]:
    """I/O runs whose windows give `cpu_ns + bs / rate` a request, the rounds 10 % apart
    (round 1 the line itself, round 0 10 % below, round 2 10 % above)."""
    out = []
    for rnd in range(rounds):
        scale = 1.0 + 0.1 * (rnd - 1)
        for job in hostfscal.round_io_jobs(rnd):
            per = (cpu_ns + job.bs * 1e9 / rate) * scale
            # 1 s window, 0.1 cores of background, X requests a second: busy = X per + 0.1.
            x = 10_000.0 if job.bs < MIB else 500.0
            load = cpuwork.Load(1.0, x * per / 1e9 + 0.1, 0.1, x, 2)
            out.append(hostfscal.IoRun(job, rnd, 1.0, x, 1e6, load, {}))
    return out


def test_the_host_kernels_cpu_per_request_is_the_line_through_the_jobs_medians():
    io = hostfscal.solve_io(io_runs_of(20_000.0, 1e9))
    # Each job's median is round 1's, on the line: the fit gives it back.
    assert io.fit.cpu_ns == 20_000 and io.fit.cpu_rate == pytest.approx(1e9, rel=1e-6)
    spread = io.per_job["io-randread-4k-qd16"]
    assert spread.median == pytest.approx(20_000 + 4096, rel=1e-9)
    assert (spread.lo, spread.hi) == pytest.approx((0.9 * spread.median, 1.1 * spread.median))
    # Each round's own fit: the line scaled by the round's factor.
    assert [r["cpu_ns"] for r in io.rounds] == [18_000, 20_000, 22_000]
    assert io.table() == {"cpu": "20000ns", "cpu_rate": 1_000_000_000}
    assert io.background == pytest.approx(0.1) and io.notes == ()
    with pytest.raises(CalibrateError, match="no I/O run"):
        hostfscal.solve_io([])


def test_runs_whose_background_ate_their_cpu_leave_the_table_out_with_a_note():
    # The 4 KiB windows busy exactly as the background: 0 ns a request, so only one size is
    # left to fit (other processes' load changed during the runs): no table, one note.
    runs = [
        r if r.job.bs >= MIB else replace(r, load=replace(r.load, busy_s=r.load.background_s))
        for r in io_runs_of(20_000.0, 1e9)
    ]
    io = hostfscal.solve_io(runs)
    assert io.rejected and len(io.notes) == 1
    assert "needs points of two sizes" in io.notes[0] and "keys are left out" in io.notes[0]


def test_the_io_jobs_are_libaio_direct_on_the_written_file_and_alternate_by_round():
    job = hostfscal.IO_JOBS[0]
    args = hostfscal.io_fio_args(job, Path("/d/w.img"), GIB, 2.0)
    assert args == [
        "fio", "--name=io-randread-4k-qd16", "--filename=/d/w.img", "--ioengine=libaio",
        "--direct=1", "--rw=randread", "--bs=4096", "--iodepth=16", f"--size={GIB}",
        "--fallocate=none", "--runtime=2000ms", "--time_based=1", "--output-format=json",
    ]  # fmt: skip
    assert [j.name for j in hostfscal.IO_JOBS] == [
        "io-randread-4k-qd16", "io-randwrite-4k-qd16", "io-read-1m-qd4", "io-write-1m-qd4",
    ]  # fmt: skip
    assert hostfscal.round_io_jobs(1) == hostfscal.IO_JOBS[::-1]


def test_the_io_cpu_table_is_written_and_added_to_the_paths_cpu_by_the_image_checks(
    tmp_path: Path,
):
    out = tmp_path / "cal"
    h = hostfscal.write(
        runs_of(LATENCIES), settings(tmp_path), out, io_runs=io_runs_of(20_000.0, 1e9)
    )
    text = h.toml_path.read_text(encoding="utf-8")
    assert tomllib.loads(text)["io_cpu"] == {"cpu": "20000ns", "cpu_rate": 1_000_000_000}
    assert "# [io_cpu]: the host kernel's and fio's CPU per direct I/O request" in text
    rec = json.loads(h.json_path.read_text(encoding="utf-8"))
    head = rec["vmio_calibrate_host_fs"]
    assert (head["io_cpu_ns"], head["io_cpu_rate"]) == (20_000, 1_000_000_000)
    assert len(rec["io_runs"]) == 12 and rec["io_runs"][0]["cpu"]["cpu_ns"] > 0
    assert "[io_cpu] cpu = 20.0 us, cpu_rate = 1000000000" in hostfscal.report(h)
    (out / "serve-path-qsd.toml").write_text('[nbd]\ncores = 2\ncpu = "30000ns"\ncpu_rate = 0\n')
    cal = images.Calibration.find(out)
    assert cal.nbd_cpu() == ({"cores": 2, "cpu": "50000ns", "cpu_rate": 1_000_000_000}, None)


def test_a_busy_machine_leaves_the_io_cpu_table_out_with_a_note(tmp_path: Path):
    # Other processes took 0.5 cores in the idle windows: the subtraction is not trusted.
    runs = [
        replace(r, load=replace(r.load, background_s=0.5, busy_s=r.load.busy_s + 0.4))
        for r in io_runs_of(20_000.0, 1e9)
    ]
    io = hostfscal.solve_io(runs)
    assert io.rejected and io.background == pytest.approx(0.5)
    assert "0.50 cores busy" in io.notes[0] and "its keys are left out" in io.notes[0]
    h = hostfscal.write(runs_of(LATENCIES), settings(tmp_path), tmp_path / "cal", io_runs=runs)
    text = h.toml_path.read_text(encoding="utf-8")
    assert "io_cpu" not in tomllib.loads(text) and "# note: the host kernel's CPU" in text
    assert json.loads(h.json_path.read_text())["vmio_calibrate_host_fs"]["io_cpu"] is None
    assert images.Calibration.find(tmp_path / "cal").io_cpu is None


def test_existing_files_are_refused_without_force(tmp_path: Path):
    out = tmp_path / "cal"
    hostfscal.write(runs_of(LATENCIES), settings(tmp_path), out)
    with pytest.raises(CalibrateError, match=r"host-fs.toml exists; pass --force to overwrite it"):
        hostfscal.write(runs_of(LATENCIES), settings(tmp_path), out)
    faster = {**LATENCIES, "holes": [120 * US] * 3}
    h = hostfscal.write(runs_of(faster), settings(tmp_path), out, force=True)
    assert h.costs.alloc_ns == 20_000 and 'alloc_cost = "20000ns"' in h.toml_path.read_text()


def test_a_directory_without_the_space_is_one_error_naming_what_it_needs():
    var = hostfscal.DEFAULT_DIR
    if images.mounted_fstype(var) not in hostfscal.FILESYSTEMS:
        pytest.skip(f"{var} is not on ext4 or xfs")
    with pytest.raises(
        CalibrateError, match=r"free, the run needs .* \(7 files of .* and 9 first-write files"
    ):
        hostfscal.check_dir(var, 2**60, 3)
    assert hostfscal.check_dir(var, 1024**2) == images.mounted_fstype(var)


# --- the disk's first writes (thin provisioning) ------------------------------------------


def thin_runs_of(extra_us: dict[int, list[float]], over_us: float = 100.0) -> list:
    """FIRST and OVER passes whose differences are `extra_us` per size, round by round."""
    out = []
    for bs, xs in extra_us.items():
        for rnd, x in enumerate(xs):
            out.append(hostfscal.ThinRun(bs, rnd, "first", (over_us + x) * US, 100, {}))
            out.append(hostfscal.ThinRun(bs, rnd, "over", over_us * US, 100, {}))
    return out


def test_the_first_touch_share_is_one_for_a_few_writes_and_a_block_in_sixteen_for_all():
    n = GIB // hostfscal.BS
    assert hostfscal.first_touch_share(1, GIB) == 1.0
    # Every 4 KiB block written once: each 64 KiB block is first touched once in 16.
    assert hostfscal.first_touch_share(n, GIB) == pytest.approx(1 / 16)
    assert hostfscal.first_touch_share(2 * n, GIB) == pytest.approx(1 / 16)
    # 1 % of the blocks: a 64 KiB block holds two of them with probability about 1 - 0.99^15.
    share = hostfscal.first_touch_share(n // 100, GIB)
    assert 0.9 < share < 0.95, share


def test_the_first_write_line_recovers_a_cost_per_write_and_per_block_and_corrects_convert():
    # 50 us a write + 8.5 us a 64 KiB block: 58.5, 84 and 186 us at 64k, 256k and 1m.
    runs = thin_runs_of(
        {
            64 * 1024: [58.5, 60.0, 57.0],
            256 * 1024: [84.0, 80.0, 90.0],
            MIB: [186.0, 180.0, 200.0],
        }
    )
    costs = hostfscal.solve(runs_of(LATENCIES))  # convert_cost 20 us
    # Every write of the unwritten kind the first into its block: 20 - 8.5 us remain.
    t = hostfscal.solve_thin(runs, costs, 1, GIB)
    assert (t.intercept_ns, t.block_cost_ns) == (50_000, 8_500)
    assert t.first_share == 1.0 and t.convert_ns == 11_500
    assert t.table() == {
        "thin_block": "64k",
        "thin_block_cost": "8500ns",
        "thin_request": "0ns",
        "thin_zero": False,
        "convert_cost": "11500ns",
    }
    # A thick disk: no extra time growing with the size, no cost per block, convert kept.
    flat = hostfscal.solve_thin(
        thin_runs_of({64 * 1024: [3.0, 1.0], MIB: [1.0, 2.0]}), costs, 1, GIB
    )
    assert flat.block_cost_ns == 0 and flat.convert_ns == 20_000 and flat.notes
    with pytest.raises(CalibrateError, match="two sizes"):
        hostfscal.solve_thin(thin_runs_of({MIB: [1.0]}), costs, 1, GIB)


def test_the_thin_table_goes_to_the_image_files_device_with_its_convert_cost(tmp_path: Path):
    """host-fs.toml's [thin]: a prediction's device under the image volume takes the thin_*
    keys, its volume the [thin] convert_cost; another filesystem takes neither; vmio sim
    runs the stack, and a first write of the new raw image pays the device's blocks."""
    runs = thin_runs_of({64 * 1024: [58.5, 58.5], 256 * 1024: [84.0, 84.0], MIB: [186.0, 186.0]})
    out = tmp_path / "cal"
    h = hostfscal.write(runs_of(LATENCIES), settings(tmp_path), out, thin_runs=runs)
    table = tomllib.loads(h.toml_path.read_text(encoding="utf-8"))
    assert table["thin"]["thin_block_cost"] == "8500ns" and "[thin] 50.0 us" in hostfscal.report(h)
    cal = images.Calibration.find(out)
    p = images.Point("a", images.RAW_OFF, images.Serve("threads", None), images.RAND_W, "first")
    doc = images.sim_doc(p, GIB, cal, "ext4")
    assert doc["volume"][0]["convert_cost"] == table["thin"]["convert_cost"]
    assert {k: doc["device"][0][k] for k in cal.thin_keys("ext4")} == {
        "thin_block": "64k",
        "thin_block_cost": "8500ns",
        "thin_request": "0ns",
        "thin_zero": False,
    }
    other = images.sim_doc(p, GIB, cal, "xfs")
    assert "thin_block" not in other["device"][0]
    assert "thin_block" not in images.sim_doc(p, GIB, cal, "ext4", layer=False)["device"][0]
    assert "[thin] thin_block 64k, thin_block_cost 8500ns" in cal.describe()
    # The run's JSON keeps it.
    m = images.Measurement(GIB, 1.0, 1, "/x", "ext4")
    again = images.Calibration.of_record(json.loads(json.dumps(images.record(m, {}, cal))))
    assert again is not None and again.thin == cal.thin
    # vmio sim takes the keys: the device provisions the image's blocks on first writes.
    stack = tmp_path / "stack.toml"
    stack.write_text(images.sim_stack(p, 64 * MIB, cal, "ext4"), encoding="utf-8")
    job = tmp_path / "w.fio"
    job.write_text("[w]\nfilename=/dev/vda\nrw=write\nbs=1m\nioengine=libaio\ndirect=1\nsize=16m\n")
    r = run_vmio("sim", "--stack", stack, job, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    dev = json.loads(r.stdout)["vmio"]["devices"][0]
    assert dev["stats"].get("thin_blocks", 0) == 16 * 16, dev["stats"]


def test_a_first_write_pass_is_one_sequential_psync_direct_pass_with_no_preallocation(
    tmp_path: Path,
):
    args = hostfscal.thin_fio_args(MIB, tmp_path / "f", 64 * MIB, "thin-1024k-first")
    opts = dict(a.removeprefix("--").split("=", 1) for a in args[1:])
    assert opts["rw"] == "write" and opts["bs"] == str(MIB) and opts["ioengine"] == "psync"
    assert opts["direct"] == "1" and opts["fallocate"] == "none" and opts["size"] == str(64 * MIB)
    assert "time_based" not in opts and "runtime" not in opts
    # Rounds alternate the sizes' order.
    assert hostfscal.thin_sizes(1) == hostfscal.thin_sizes(0)[::-1]


# --- the command line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--serve-path"], "--serve-path: not with --host-fs"),
        (["--server", "vmio"], "--server: not with --host-fs"),
        (["x.tmp"], "TARGET: not with --host-fs, which measures files it makes in --dir"),
        (["--size", "64m"], "--size: not with --host-fs"),
        (["--write"], "--write: not with --host-fs"),
        (["--budget", "30"], "--budget: not with --host-fs"),
        (["--dir", "/nonexistent-vmio"], "--dir /nonexistent-vmio: no such directory; accepted: "),
        (["--dir", "/dev/shm"], "--dir /dev/shm is on tmpfs, not a host filesystem"),
    ],
)
def test_bad_host_fs_options_are_one_error_line(tmp_path: Path, capsys, args, message):
    require_tool("fio", "fio")
    if args[-1] == "/dev/shm" and images.mounted_fstype(Path("/dev/shm")) != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    rc, out, err = vmio(capsys, "calibrate", "--host-fs", *args, "-o", tmp_path / "cal")
    assert rc == 2 and len(err.splitlines()) == 1 and out == "", err
    assert err.startswith("vmio: error: ") and message in err
    assert not (tmp_path / "cal").exists()


def test_a_missing_fio_is_one_error_line(tmp_path: Path, capsys, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    rc, _, err = vmio(capsys, "calibrate", "--host-fs", "-o", tmp_path / "cal")
    assert rc == 2 and err == "vmio: error: 'fio' is not installed (apt-get install fio)\n"


def test_the_help_says_what_dir_means_for_each_mode(capsys):
    rc, out, _ = vmio(capsys, "calibrate", "--help")
    assert rc == 0
    flat = " ".join(out.split())
    assert "with --host-fs: where the measured files go" in flat
    assert "with --serve-path: the tmpfs directory of the RAM image" in flat
    assert "vmio calibrate --host-fs --quick" in out


# --- for real ------------------------------------------------------------------------------


def test_a_quick_run_measures_every_kind_and_solves_the_closed_form_of_its_medians(
    tmp_path: Path,
):
    require_tool("fio", "fio")
    base = hostfscal.DEFAULT_DIR
    if images.mounted_fstype(base) not in hostfscal.FILESYSTEMS:
        pytest.skip(f"{base} is not on ext4 or xfs")
    need = hostfscal.space_needed(hostfscal.QUICK_FILE_SIZE, hostfscal.QUICK_ROUNDS)
    if shutil.disk_usage(base).free < need:
        pytest.skip(f"{base} has less than {need} bytes free")
    work = Path(tempfile.mkdtemp(prefix="vmio-test-host-fs-", dir=base))
    out = tmp_path / "cal"
    try:
        r = run_vmio("calibrate", "--host-fs", "--quick", "--dir", work, "-o", out)
        assert r.returncode == 0, r.stderr
        # The run's own directory under --dir is gone.
        assert list(work.iterdir()) == []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert "alloc_cost = " in r.stdout and "convert_cost = " in r.stdout
    rec = json.loads((out / "host-fs.json").read_text(encoding="utf-8"))
    head = rec["vmio_calibrate_host_fs"]
    lat = {k: v["median"] for k, v in head["latency_ns"].items()}
    assert len(rec["runs"]) == 3 * hostfscal.QUICK_ROUNDS
    # The disk's first writes: both passes of every size in every round, and the line.
    n_thin = 2 * len(hostfscal.THIN_SIZES) * hostfscal.QUICK_ROUNDS
    assert len(rec["thin_runs"]) == n_thin
    assert all(t["lat_mean_ns"] > 0 and t["ios"] > 0 for t in rec["thin_runs"])
    thin = head["thin"]
    assert set(thin["extra_ns"]) == {str(b) for b in hostfscal.THIN_SIZES}
    assert thin["block_cost_ns"] >= 0 and 0 <= thin["convert_cost_ns"] <= head["convert_cost_ns"]
    # The costs are the closed form of the kinds' medians (a fast disk's costs of a few us
    # drown in its noise here, so their sign is not asserted: >= 0 by construction).
    assert min(lat.values()) > 0, lat
    assert head["alloc_cost_ns"] == round(max(0.0, lat["holes"] - lat["unwritten"]))
    assert head["convert_cost_ns"] == round(max(0.0, lat["unwritten"] - lat["written"]))
    cal = images.Calibration.find(out)
    assert cal.host_fs is not None and cal.host_fs["filesystem"] == head["fstype"]
    assert cal.host_fs["alloc_cost"] == f"{head['alloc_cost_ns']}ns"
    p = images.Point("a", images.RAW_OFF, images.Serve("threads", None), images.RAND_W, "first")
    vol = images.sim_doc(p, GIB, cal, head["fstype"])["volume"][0]
    # With a [thin] table the volume takes its convert_cost (the device charges the blocks).
    thin_table = head["thin"]["table"] if head["thin"] else None
    assert vol["convert_cost"] == (
        thin_table["convert_cost"] if thin_table else f"{head['convert_cost_ns']}ns"
    )
    # The host kernel's CPU per direct I/O request: every job of every round has its window
    # and a positive CPU time; a 1 MiB request costs more CPU than a 4 KiB one.
    # On a machine other processes kept busy the table is left out with a note instead.
    assert len(rec["io_runs"]) == len(hostfscal.IO_JOBS) * hostfscal.QUICK_ROUNDS
    assert cal.io_cpu == head["io_cpu"]
    if head["io_cpu"] is None:
        assert any("its keys are left out" in n for n in head["io_cpu_notes"]), head
        return
    assert all(r["cpu"]["cpu_ns"] > 0 and r["iops"] > 0 for r in rec["io_runs"])
    per = {k: v["median"] for k, v in head["io_cpu_per_job_ns"].items()}
    assert per["io-read-1m-qd4"] > per["io-randread-4k-qd16"], per
    assert head["io_cpu_ns"] > 0
