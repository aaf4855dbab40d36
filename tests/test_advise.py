"""`vmio advise`: the best configuration where it is known in closed form, exhaustive and
sampled searches, determinism, bad input, the calibration's uncertainty, the breakdown, and
the `--verify` path run for real with fio on a file."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from conftest import STACK, missing_tool, run_vmio
from vmio.advise import rank, uncertainty
from vmio.real import engine as realengine
from vmio.real import machine

# conftest's two 7200 rpm HDDs (hdd-7200-2tb: outer_rate 220 MB/s, track_to_track 0.8 ms)
# under one volume, one VM on it with cache = "none".
# The file is laid out first (fio's sequential write of it): with cache=writeback its pages
# stay in the host page cache, so the random reads after it find the cache warm.
RANDREAD = """\
[global]
ioengine=libaio
direct=1
filename=/dev/sda
size=512m

[layout]
rw=write
bs=1m
end_fsync=1

[rr]
stonewall
rw=randread
bs=4k
iodepth=4
runtime=1
time_based
"""

SEQREAD = """\
[global]
ioengine=libaio
direct=1
filename=/dev/sda
size=2g

[seq]
rw=read
bs=1m
iodepth={qd}
runtime=1
time_based
"""

OUTER_RATE = 220e6
"""hdd-7200-2tb's media rate at the outer zone: one disk's sequential bound (bytes/s)."""
TRACK_TO_TRACK_NS = 800e3
"""hdd-7200-2tb's shortest seek: a read the disk must fetch waits at least this long."""


def _files(tmp_path: Path, job: str, devices: str = '["sdb", "sdc"]') -> tuple[Path, Path]:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(layout="linear", devices=devices), encoding="utf-8")
    fio = tmp_path / "job.fio"
    fio.write_text(job, encoding="utf-8")
    return stack, fio


def _advise(tmp_path: Path, name: str, *args: str | Path) -> dict:
    stack, fio = tmp_path / "stack.toml", tmp_path / "job.fio"
    out = tmp_path / name
    r = run_vmio("advise", "--stack", stack, "--workload", fio, "--out", out, "--quiet", *args)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "advise.json").read_text(encoding="utf-8"))


def _best(doc: dict) -> dict:
    return next(c for c in doc["configurations"] if c["rank"] == 1)


def _config(doc: dict, **values: str) -> dict:
    return next(
        c for c in doc["configurations"] if all(c["values"][k] == v for k, v in values.items())
    )


def test_a_random_read_on_a_warm_host_cache_ranks_writeback_first_and_none_behind_a_seek(
    tmp_path: Path,
) -> None:
    _files(tmp_path, RANDREAD)
    doc = _advise(
        tmp_path, "adv", "--values", "cache=none,writeback", "--measure", "rr", "--goal", "iops"
    )
    assert doc["space"]["method"]["name"] == "exhaustive"
    assert _best(doc)["values"] == {"cache": "writeback"}
    wb, none = _config(doc, cache="writeback"), _config(doc, cache="none")
    # Closed form: with cache=none every read goes to the disk, which needs at least a
    # track-to-track seek for a random block it has not read ahead; a host page-cache hit
    # is a memory copy and the virtual disk's path, well under one seek.
    assert none["figures"]["lat_mean_ns"] >= 0.5 * TRACK_TO_TRACK_NS
    assert wb["figures"]["lat_mean_ns"] < TRACK_TO_TRACK_NS
    assert wb["figures"]["iops"] > none["figures"]["iops"]
    # The stack as given (cache=none) is the searched configuration cache=none: one row.
    assert none["baseline"] and len(doc["configurations"]) == 2
    assert doc["uncertainty"]["source"] == "uncalibrated"
    assert _best(doc)["uncertainty"]["iops"] == "uncalibrated"
    # Explained by the knob against its neighbour, and by the simulator's per-layer account
    # of the time when its JSON has one (feature-detected).
    text = _best(doc)["explanation"]["text"]
    assert "cache=writeback: iops +" in text[-2] and text[-2].endswith(
        "vs none (the other knobs the same)"
    )
    if _best(doc)["explanation"]["breakdown"] is None:
        assert text[-1] == "breakdown unavailable: the simulator's JSON has no vmio.breakdown"
    else:
        assert text[-1].startswith("time of job rr: ")


def test_a_direct_sequential_read_ranks_a_striped_layout_first_and_linear_below_one_disk(
    tmp_path: Path,
) -> None:
    _files(tmp_path, SEQREAD.format(qd=4))
    doc = _advise(tmp_path, "adv", "--vary", "layout", "--goal", "bw")
    best = _best(doc)
    assert best["values"]["layout"] in ("stripe", "raid0")
    linear = _config(doc, layout="linear")
    # Closed form: a linear volume reads a region within its first disk from that disk
    # alone, so no faster than one disk's media rate; 1 MiB requests striped over two disks
    # (64 KiB stripes, 512 KiB chunks) keep both busy.
    assert linear["figures"]["bw_bytes"] <= OUTER_RATE * 1.001
    assert best["figures"]["bw_bytes"] > OUTER_RATE
    ranks = {c["values"]["layout"]: c["rank"] for c in doc["configurations"]}
    assert ranks["linear"] == max(ranks.values())


def test_exhaustive_and_sampled_searches_of_one_small_space_find_the_same_best(
    tmp_path: Path,
) -> None:
    _files(tmp_path, SEQREAD.format(qd=4))
    space = ("--vary", "layout,queue_depth", "--values", "queue_depth=1,2,4,8", "--goal", "bw")
    full = _advise(tmp_path, "full", *space, "--search", "exhaustive", "--budget", "12")
    assert full["space"]["size"] == 12 and full["space"]["method"]["name"] == "exhaustive"
    modes = ["random"]
    try:
        import optuna  # noqa: F401

        modes.append("tpe")
    except ImportError:
        pass
    for mode in modes:
        sampled = _advise(tmp_path, mode, *space, "--search", mode, "--budget", "12")
        assert sampled["space"]["method"]["name"] == mode
        assert _best(sampled)["values"] == _best(full)["values"]
        assert _best(sampled)["figures"] == _best(full)["figures"]


def test_one_seed_gives_the_same_advise_json_bytes_whatever_the_parallelism(
    tmp_path: Path,
) -> None:
    _files(tmp_path, RANDREAD)
    args = ("--measure", "rr", "--budget", "12", "--seed", "5")
    _advise(tmp_path, "a", *args, "--parallel", "1")
    _advise(tmp_path, "b", *args, "--parallel", "2")
    a = (tmp_path / "a" / "advise.json").read_bytes()
    assert a == (tmp_path / "b" / "advise.json").read_bytes()
    doc = json.loads(a)
    assert doc["space"]["size"] > 12  # sampled, not exhaustive
    assert doc["space"]["method"]["name"] in ("tpe", "random")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["advise.json", "command.txt", "job.fio", "results.csv", "stack.toml"]
    rows = list(csv.DictReader((tmp_path / "a" / "results.csv").open(encoding="utf-8")))
    assert len(rows) == len(doc["configurations"])
    assert [r["rank"] for r in rows[: len(doc["ranking"])]] == [
        str(i + 1) for i in range(len(doc["ranking"]))
    ]
    cmd = (tmp_path / "a" / "command.txt").read_text(encoding="utf-8")
    assert cmd.startswith("vmio advise --stack ") and "--seed 5" in cmd


def test_an_unknown_knob_is_one_line_with_the_closest_and_the_accepted_ones(
    tmp_path: Path,
) -> None:
    stack, fio = _files(tmp_path, RANDREAD)
    r = run_vmio("advise", "--stack", stack, "--workload", fio, "--vary", "cahce")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1, r.stderr
    assert "unknown knob 'cahce'; did you mean 'cache'? accepted: layout, cache" in r.stderr


@pytest.mark.parametrize("value", ["9" * 5000, "\u00b2", "nan", "1" + "0" * 19, "-1"])
def test_a_read_ahead_value_that_is_no_whole_number_of_kib_is_one_line_before_any_simulation(
    tmp_path: Path, value: str
) -> None:
    # 5,000 digits passed Python's int() limit and '²' passed str.isdigit(): both tracebacks
    stack, fio = _files(tmp_path, RANDREAD)
    for knob in ("read_ahead", "host_read_ahead"):
        r = run_vmio("advise", "--stack", stack, "--workload", fio, "--values", f"{knob}={value}")
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        assert f"--values {knob}: '" in r.stderr
        assert "accepted: a whole number of KiB (digits 0-9, at most 19)" in r.stderr


def test_a_knob_that_does_not_apply_is_named_in_one_line_not_skipped_silently(
    tmp_path: Path,
) -> None:
    stack, fio = _files(tmp_path, RANDREAD, devices='["sdb"]')
    r = run_vmio(
        "advise",
        "--stack",
        stack,
        "--workload",
        fio,
        "--vary",
        "layout,iothread",
        "--measure",
        "rr",
    )
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if "'layout' does not apply" in x]
    assert lines == [
        "vmio: advise: knob 'layout' does not apply: no volume under VM 'vm1' has two devices "
        "to lay out: 'data' (sdb)"
    ]
    assert "not varied: layout:" in r.stdout
    r = run_vmio("advise", "--stack", stack, "--workload", fio, "--vary", "layout")
    assert r.returncode == 2
    assert r.stderr.startswith("vmio: error: nothing to vary: layout: no volume")


def test_a_verify_target_that_is_no_regular_file_is_one_line_before_any_simulation(
    tmp_path: Path,
) -> None:
    stack, fio = _files(tmp_path, RANDREAD)
    r = run_vmio(
        "advise", "--stack", stack, "--workload", fio, "--verify", "1", "--target", tmp_path
    )
    assert r.returncode == 2
    assert r.stderr == f"vmio: error: --target '{tmp_path}': a directory\n"
    r = run_vmio("advise", "--stack", stack, "--workload", fio, "--verify", "1")
    assert r.stderr == "vmio: error: --verify needs --target FILE (the file fio runs on)\n"


def test_a_space_over_the_budget_is_refused_for_an_exhaustive_search(tmp_path: Path) -> None:
    stack, fio = _files(tmp_path, RANDREAD)
    r = run_vmio(
        "advise", "--stack", stack, "--workload", fio, "--search", "exhaustive", "--budget", "5"
    )
    assert r.returncode == 2
    assert "over the budget of 5" in r.stderr and r.stderr.count("\n") == 1


FIT_TXT = """\
point                MB/s    model     err      sim     err   lat us    model     err      sim     err
read-4k-qd1          74.0     66.5  -10.2%     66.7  -10.0%     55.1     61.6  +11.8%     61.4  +10.0%
read-4k-qd8         259.0    321.7  +24.2%    293.2  +20.0%    126.3    101.9  -19.4%    111.8  -20.0%
randwrite-4k-qd16   522.5    392.0  -25.0%    373.4  -30.0%    125.2    167.2  +33.6%    175.2  +40.0%
fdatasync-4k            -        -                -             47.0     48.4   +3.0%     49.9   +5.0%
median |error|: bandwidth model 11.5 %, vmio sim 10.8 %; mean latency model 10.2 %, vmio sim 9.0 %
(the fdatasync points: mean latency of the fdatasync calls; model = flush_latency)

QD1 clat            pct       us    model     err      sim     err
randread-4k-qd1     p50     38.7     40.6   +5.0%     40.7   +5.3%
randread-4k-qd1     p99     66.0    110.3  +66.9%    108.0  +60.0%
randwrite-4k-qd1    p99     56.1     50.0  -10.8%     49.9  -20.0%
"""  # noqa: E501 (fit.txt's own layout)


def test_a_calibrated_stack_carries_its_fits_median_and_p90_error_and_others_say_so(
    tmp_path: Path,
) -> None:
    stack = tmp_path / "stack.toml"
    rec = uncertainty.of_stack(stack, "[host]\n")
    assert rec["source"] == "uncalibrated" and rec["figures"] == {}
    rec = uncertainty.of_stack(stack, "# vmio calibrate 0.1.0 on /x (file)\n[host]\n")
    assert rec["source"] == "header"
    (tmp_path / "fit.txt").write_text(FIT_TXT, encoding="utf-8")
    rec = uncertainty.of_stack(stack, "# vmio calibrate 0.1.0 on /x (file)\n[host]\n")
    assert rec["source"] == "fit"
    # |sim err| of bandwidth: 0.10, 0.20, 0.30 (the fdatasync point has none): median 0.20,
    # p90 by linear interpolation 0.20 + 0.8 x 0.10 = 0.28.
    bw = rec["figures"]["bw_bytes"]
    assert bw["n"] == 3 and bw["median"] == pytest.approx(0.20)
    assert bw["p90"] == pytest.approx(0.28)
    assert rec["figures"]["iops"] == bw
    # Mean latency: 0.10, 0.20, 0.40 and the fdatasync point's 0.05.
    lat = rec["figures"]["lat_mean_ns"]
    assert lat["n"] == 4 and lat["median"] == pytest.approx(0.15)
    p99 = rec["figures"]["p99_ns"]
    assert p99["n"] == 2 and p99["median"] == pytest.approx(0.40)
    assert rec["figures"]["p999_ns"] is None
    assert uncertainty.shown(rec, "bw_bytes") == "±20% (p90 28%)"


def test_a_stack_in_a_validate_directory_carries_the_held_out_error_of_its_runs(
    tmp_path: Path,
) -> None:
    from vmio.api import simulate

    # A vmio validate directory: calibration/stack.toml, real/<w>.rep1.json, sim/<w>.json,
    # compare.csv. The "real" runs here are simulations at another block size, so each
    # point's error is known: sim / real - 1 of the two runs' figures.
    (tmp_path / "calibration").mkdir()
    stack = tmp_path / "calibration" / "stack.toml"
    stack.write_text(STACK.format(layout="raid0", devices='["sdb", "sdc"]'), encoding="utf-8")
    for d in ("real", "sim"):
        (tmp_path / d).mkdir()
    (tmp_path / "compare.csv").write_text("file\n", encoding="utf-8")
    errors = []
    for w, (bs_real, bs_sim) in {"a": ("4k", "8k"), "b": ("64k", "16k"), "c": ("4k", "4k")}.items():
        job = "[w]\nrw=randread\nioengine=libaio\ndirect=1\nsize=1g\nruntime=1\ntime_based\n"
        real = simulate(stack, job + f"bs={bs_real}\n", seed=3)
        sim = simulate(stack, job + f"bs={bs_sim}\n", seed=3)
        (tmp_path / "real" / f"{w}.rep1.json").write_text(json.dumps(real.fio), encoding="utf-8")
        (tmp_path / "sim" / f"{w}.json").write_text(json.dumps(sim.fio), encoding="utf-8")
        errors.append(abs(sim.jobs[0].read.bw_bytes / real.jobs[0].read.bw_bytes - 1))
    rec = uncertainty.of_stack(stack, stack.read_text(encoding="utf-8"))
    assert rec["source"] == "validation" and rec["file"] == str(tmp_path)
    bw = rec["figures"]["bw_bytes"]
    lo, mid, hi = sorted(errors)
    assert bw["n"] == 3 and bw["median"] == pytest.approx(mid)
    assert bw["p90"] == pytest.approx(mid + 0.8 * (hi - mid))


def test_the_explanation_uses_the_simulators_breakdown_when_its_json_has_one() -> None:
    layers = [
        {
            "layer": "device service",
            "mean_ns": 9e6,
            "p50_ns": 8e6,
            "p99_ns": 2e7,
            "p99.9_ns": 3e7,
            "share": 0.9,
        },
        {
            "layer": "host queue wait",
            "mean_ns": 1e6,
            "p50_ns": 0,
            "p99_ns": 5e6,
            "p99.9_ns": 6e6,
            "share": 0.1,
        },
    ]
    result = {"vmio": {"breakdown": [{"job": "rr", "layers": layers}, {"job": "x", "layers": []}]}}
    assert rank.breakdown_of(result, "rr") == [{"job": "rr", "layers": layers}]
    assert rank.breakdown_of({"vmio": {}}, "rr") is None
    figs = dict.fromkeys(rank.FIGURES, 1.0) | {"total_ios": 10.0}
    a = rank.Evaluated(
        1, ("none",), figs | {"iops": 10.0}, breakdown=[{"job": "rr", "layers": layers}]
    )
    b = rank.Evaluated(2, ("writeback",), figs | {"iops": 5.0})
    ranked = rank.rank([b, a], "iops")
    assert ranked == [a, b]
    rank.explain(ranked, ("cache",), "iops", 2)
    text = rank.explanation_lines(a, "iops")
    assert text[0] == "iops +100% vs rank 2, which has cache=writeback (this: none)"
    assert text[-1] == (
        "time of job rr: device service 90% (mean 9000.0 us), host queue wait 10% (mean 1000.0 us)"
    )
    assert rank.explanation_lines(b, "iops")[-1] == (
        "breakdown unavailable: the simulator's JSON has no vmio.breakdown"
    )


NATIVE = """\
[host]
cores = 2
hypervisor = "native"

[[device]]
name = "d"
model = "{model}"

[[volume]]
name = "d"
layout = "single"
devices = ["d"]

[[vm]]
name = "host"

[[vm.disk]]
name = "d"
volume = "d"
interface = "host"
cache = "none"
"""

NATIVE_JOB = """\
[rr]
filename=/dev/d
ioengine=libaio
direct=1
rw=randread
bs=4k
size=16m
runtime=1
time_based
"""


def _real_model(where: Path) -> str:
    """The device model of the class of the disk under `where`, so that the real engine runs
    it rather than skipping it as a device this machine lacks; fio is required."""
    if shutil.which("fio") is None:
        missing_tool("'fio' is not installed (apt-get install fio)")
    cls = realengine.disk_class(machine.disk(where))
    return {"memory": "ram", "hdd": "hdd"}.get(cls, "flash")


def test_verify_runs_the_top_two_for_real_with_fio_on_a_file_beside_their_prediction(
    tmp_path: Path,
) -> None:
    (tmp_path / "stack.toml").write_text(NATIVE.format(model=_real_model(tmp_path)), "utf-8")
    (tmp_path / "job.fio").write_text(NATIVE_JOB, encoding="utf-8")
    target = tmp_path / "target.img"
    doc = _advise(
        tmp_path,
        "adv",
        "--vary",
        "queue_depth",
        "--values",
        "queue_depth=1,4",
        "--verify",
        "2",
        "--target",
        target,
        "--target-size",
        "16m",
    )
    verified = [c for c in doc["configurations"] if "verification" in c]
    assert [c["rank"] for c in verified] == [1, 2]
    for c in verified:
        v = c["verification"]
        assert "skipped" not in v, v
        assert v["mode"] == "host"
        assert v["real"]["iops"] > 0 and v["predicted_as_run"]["iops"] > 0
        assert v["error"]["iops"] == pytest.approx(
            v["predicted_as_run"]["iops"] / v["real"]["iops"] - 1
        )
    assert not target.exists()  # created for the run, removed after it


VM_STACK = """\
[host]
cores = 2

[[device]]
name = "d"
model = "{model}"

[[volume]]
name = "v"
layout = "single"
devices = ["d"]

[[vm]]
name = "vm1"
vcpus = 2
memory = "2g"

[[vm.disk]]
name = "sda"
volume = "v"
size = "16m"
cache = "none"
"""


def test_verify_serves_a_vm_stack_on_the_file_and_leaves_nothing_beside_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "stack.toml").write_text(VM_STACK.format(model=_real_model(tmp_path)), "utf-8")
    (tmp_path / "job.fio").write_text(NATIVE_JOB.replace("/dev/d", "/dev/sda"), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    doc = _advise(
        tmp_path,
        "adv",
        "--values",
        "cache=none,writeback",
        "--verify",
        "1",
        "--target",
        work / "target.img",
        "--target-size",
        "16m",
    )
    best = next(c for c in doc["configurations"] if c["rank"] == 1)
    v = best["verification"]
    assert "skipped" not in v, v
    # vmio serve of the stack, fio's nbd engine on its export: the device's image was FILE.
    assert v["mode"] == "serve" and v["replaced"]["ioengine"] == "nbd"
    assert v["real"]["iops"] > 0
    # The prediction beside it is the job's own: the engine's direct=0 is fio's nbd engine's,
    # not the guest's, and the job's 16m fit the 16m export (no size cut).
    assert v["replaced"]["direct"] == "0" and "size" not in v["replaced"]
    assert v["predicted_as_run"] == best["figures"]
    assert list(work.iterdir()) == []  # FILE created and removed, no image directory left


def test_a_random_sample_is_distinct_seeded_and_takes_a_space_beyond_a_machine_integer() -> None:
    from vmio.advise.search import sample

    picks = sample(10**30, 50, seed=7)
    assert len(set(picks)) == 50 and all(0 <= i < 10**30 for i in picks)
    assert picks == sample(10**30, 50, seed=7) != sample(10**30, 50, seed=8)
    assert sorted(sample(12, 20, seed=1)) == list(range(12))
