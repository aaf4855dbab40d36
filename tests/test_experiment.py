"""Experiment files, grid expansion, stack/job editing and calibration (pure Python).

The simulator is replaced by a fake where a test is about the Python side only.
"""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest

from vmio.sim import VmioError
from vmio.study import cluster, experiment, runner, tables


def test_the_built_in_experiment_has_the_s0_grid():
    exp = experiment.load_experiment("volumes-cache")
    assert [a.name for a in exp.axes] == ["layout", "cache", "guest", "workload", "bs"]
    assert exp.axis("layout").values == ("linear", "stripe", "raid0")
    assert exp.axis("cache").values == ("none", "writeback")
    assert exp.axis("guest").values == ("1", "0")
    assert exp.axis("workload").values == ("read", "randread", "randrw")
    assert exp.axis("bs").values == ("32k", "64k", "128k", "256k", "512k", "1m", "2m", "4m", "8m")
    assert len(exp.points()) == 324
    assert exp.points()[0].label == "linear/none/1/read bs=32k"
    assert exp.points()[-1].slug == "raid0-writeback-0-randrw-8m"


def test_points_set_the_stack_and_job_as_the_axes_say():
    exp = experiment.load_experiment("volumes-cache")
    inputs = runner.point_inputs(exp, quick=True)
    p = next(i for i in inputs if i.point.label == "stripe/writeback/0/randrw bs=1m")
    stack = tomllib.loads(p.stack_text)
    assert stack["volume"][0]["layout"] == "stripe"
    assert stack["volume"][0]["stripe_size"] == "64k" and "chunk" not in stack["volume"][0]
    assert stack["vm"][0]["disk"][0]["cache"] == "writeback"
    assert "rw=randrw\n" in p.job_text and "bs=1m\n" in p.job_text
    assert "direct=0\n" in p.job_text and "direct=1" not in p.job_text
    assert "runtime=2\n" in p.job_text  # [quick].set
    assert "volume.0.layout=stripe" in p.stack_path


def test_an_axis_value_brings_its_also_settings():
    exp = experiment.load_experiment("volumes-cache")
    by_layout = {
        i.point.get("layout"): tomllib.loads(i.stack_text) for i in runner.point_inputs(exp)
    }
    assert by_layout["raid0"]["volume"][0]["chunk"] == "512k"
    assert "stripe_size" not in by_layout["raid0"]["volume"][0]
    assert "chunk" not in by_layout["linear"]["volume"][0]
    assert "stripe_size" not in by_layout["linear"]["volume"][0]


def test_set_job_option_replaces_in_every_section_and_keeps_line_numbers():
    text = "[global]\nbs=4k\n; comment\n[a]\nbs=8k\n[b]\nrw=read\n"
    out = runner.set_job_option(text, "bs", "1m")
    assert out == "[global]\nbs=1m\n; comment\n[a]\nbs=1m\n[b]\nrw=read\n"


def test_set_job_option_adds_a_missing_option_to_global():
    assert runner.set_job_option("[global]\n[a]\nrw=read\n", "bs", "64k") == (
        "[global]\nbs=64k\n[a]\nrw=read\n"
    )
    assert runner.set_job_option("[a]\nrw=read\n", "bs", "64k") == (
        "[global]\nbs=64k\n\n[a]\nrw=read\n"
    )


def test_set_job_option_finds_an_option_under_every_spelling_fio_accepts():
    text = "[global]\nBlockSize=4k  ; small\n[a]\nreadwrite=randrw\nrwmixwrite=30\n"
    out = runner.set_job_option(runner.set_job_option(text, "bs", "1m"), "rw", "randread")
    assert out == "[global]\nbs=1m  ; small\n[a]\nrw=randread\nrwmixwrite=30\n"
    assert runner.set_job_option(out, "a.rwmixread", "90").endswith("\nrwmixread=90\n")


def test_set_job_option_names_the_file_and_the_missing_section():
    with pytest.raises(VmioError, match=r"^x.fio: cannot set 'bs=4k': the job file has no "):
        runner.set_job_option("[a]\nrw=read\n", "b.bs", "4k", "x.fio")


def test_an_axis_sets_a_job_option_the_job_file_spells_with_an_alias(tmp_path):
    path = _experiment(
        tmp_path, '[[axis]]\nname = "bs"\ntarget = "job:s0.bs"\nvalues = ["8k", "16k"]\n'
    )
    job = tmp_path / "job.fio"
    job.write_text(job.read_text(encoding="utf-8").replace("\nbs=32k", "\nblocksize=32k"))
    inputs = runner.point_inputs(experiment.load_experiment(path))
    options = [[line for line in i.job_text.splitlines() if line.startswith("bs=")] for i in inputs]
    assert options == [["bs=1m", "bs=8k"], ["bs=1m", "bs=16k"]]  # [layout]'s, [s0]'s


def test_set_stack_value_names_the_bad_path():
    stack = {"volume": [{"layout": "linear"}]}
    runner.set_stack_value(stack, "volume.0.layout", "raid0", "x.toml")
    assert stack["volume"][0]["layout"] == "raid0"
    with pytest.raises(VmioError, match=r"x.toml: stack target 'volume.3.layout'"):
        runner.set_stack_value(stack, "volume.3.layout", "raid0", "x.toml")
    with pytest.raises(VmioError, match="the stack has no 'vm'"):
        runner.set_stack_value(stack, "vm.0.disk.0.cache", "none", "x.toml")


def _experiment(tmp_path: Path, body: str) -> Path:
    src = experiment.BUILTIN_STUDIES / "volumes-cache"
    for name in ("stack.toml", "job.fio"):
        (tmp_path / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")
    path = tmp_path / "experiment.toml"
    path.write_text(
        '[experiment]\nname = "t"\nstack = "stack.toml"\njob = "job.fio"\n' + body,
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "at least one [[axis]]"),
        ('[[axis]]\nname = "x"\ntarget = "disk:foo"\nvalues = ["a"]\n', "must be 'stack:"),
        ('[[axis]]\nname = "x"\ntarget = "job:bs"\nvalues = []\n', "axis[0] 'x'.values"),
        (
            '[[axis]]\nname = "bs"\ntarget = "job:bs"\nvalues = ["4k"]\n'
            '[[calibration]]\nid = "c"\ndescription = "d"\nreference_mb_s = 1.0\n'
            'where = { bs = "8k" }\n',
            "'8k' is not a value of axis 'bs'",
        ),
        (
            '[[axis]]\nname = "bs"\ntarget = "job:bs"\nvalues = ["4k"]\n'
            '[[calibration]]\nid = "c"\ndescription = "d"\nreduce = "median"\n'
            "reference_mb_s = 1.0\n",
            "'median' is not one of mean, max, min",
        ),
        ("[typo]\n", "typo: unknown key"),
    ],
)
def test_a_bad_experiment_file_is_an_error_naming_the_file_and_field(tmp_path, body, message):
    path = _experiment(tmp_path, body)
    with pytest.raises(VmioError) as err:
        experiment.load_experiment(path)
    assert str(path) in str(err.value)
    assert message in str(err.value)


def _fake_result(bw_by_direction: dict[str, int], rw: str, seed: int) -> str:
    jobs = [
        {
            "jobname": "s0",  # the measured job of the built-in study
            "groupid": 0,
            "error": 0,
            "job options": {"rw": rw, "bs": "32k"},
            **{
                d: {
                    "bw_bytes": bw_by_direction.get(d, 0),
                    "iops": bw_by_direction.get(d, 0) / 32768,
                    "io_bytes": bw_by_direction.get(d, 0),
                    "total_ios": 1 if d in bw_by_direction else 0,
                    "runtime": 1000,
                    "clat_ns": {"mean": 1000.0, "percentile": {"99.000000": 2000}},
                }
                for d in ("read", "write", "trim")
            },
        }
    ]
    return json.dumps(
        {
            "global options": {},
            "jobs": jobs,
            "vmio": {"seed": seed, "stack": {}, "ignored_options": [{"name": "x", "line": 3}]},
        }
    )


@pytest.fixture
def fake_simulator(monkeypatch):
    """Replace the native simulator: bandwidth = f(layout, cache, rw, bs) in MB."""

    def fake(stack_text, stack_path, job_text, job_path, seed, vm, limits=None):
        stack = tomllib.loads(stack_text)
        layout = stack["volume"][0]["layout"]
        cache = stack["vm"][0]["disk"][0]["cache"]
        opts = dict(
            line.split("=", 1) for line in job_text.splitlines() if "=" in line and line[0] != ";"
        )
        mb = {"linear": 200, "stripe": 300, "raid0": 350}[layout]
        mb *= 100 if cache == "writeback" else 1
        if opts["rw"] == "randrw":
            return _fake_result({"read": mb * 10**6 // 2, "write": mb * 10**6 // 2}, "randrw", seed)
        return _fake_result({"read": mb * 10**6}, opts["rw"], seed)

    monkeypatch.setattr(cluster, "simulate_text", fake)  # what simulates a point (SimTask)


def test_run_study_keeps_grid_order_whatever_the_parallelism(fake_simulator):
    exp = experiment.load_experiment("volumes-cache")
    serial = runner.run_study(exp, quick=True, parallel=1, progress_tty=False)
    threaded = runner.run_study(exp, quick=True, parallel=3, progress_tty=False)
    assert [p.point for p in serial.points] == exp.points(quick=True)
    assert [p.json_text for p in serial.points] == [p.json_text for p in threaded.points]
    assert tables.summary_text(serial) == tables.summary_text(threaded)
    assert serial.notes == [
        "vmio: note: fio option 'x' (" + str(exp.job_path) + ":3) is not modelled; ignored"
    ]


def test_calibration_compares_reduced_points_within_the_tolerance(fake_simulator):
    exp = experiment.load_experiment("volumes-cache")
    res = runner.run_study(exp, quick=True, progress_tty=False)
    rows = {r.calibration.id: r for r in res.calibration}
    linear = rows["A-linear-read"]
    assert linear.simulated == pytest.approx(200.0)
    assert linear.rel_error_pct == pytest.approx((200 - 211) / 211 * 100)
    assert linear.status == "PASS"
    assert rows["A-stripe-read-32k"].status == "MISS"  # 300 vs 151
    assert rows["A-raid0-read-large"].n_points == len(exp.quick_values["bs"]) - 1
    assert rows["A-randrw-32k"].simulated == pytest.approx((200 + 300 + 350) / 3)
    gain = rows["B-randread-gain"]
    assert gain.simulated == pytest.approx(100.0) and gain.status == "PASS"
    assert gain.reference_text() == ">= 10x"


def test_study_outputs_are_deterministic(fake_simulator, tmp_path):
    exp = experiment.load_experiment("volumes-cache")
    outs = []
    for name in ("a", "b"):
        res = runner.run_study(exp, quick=True, progress_tty=False)
        out = runner.prepare_output_dir(tmp_path / name, force=False)
        runner.write_outputs(res, out)
        outs.append(out)
    for name in ("results.csv", "calibration.csv", "tables.txt", "figure.png"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_the_default_output_directory_is_numbered_when_taken(tmp_path):
    base = tmp_path / "volumes-cache"
    assert runner.next_free_dir(base) == base
    base.mkdir()
    assert runner.next_free_dir(base) == base  # empty: reuse
    (base / "results.csv").write_text("x", encoding="utf-8")
    assert runner.next_free_dir(base) == tmp_path / "volumes-cache-2"


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_study_killed_after_some_points_resumes_to_byte_identical_files(
    fake_simulator, tmp_path, capsys
):
    from vmio.cli.study import run_study_to_dir

    exp = experiment.load_experiment("volumes-cache")
    run = dict(seed=None, quick=True, force=False, parallel=2, progress=io.StringIO())
    run_study_to_dir(exp, out=tmp_path / "a", **run)

    def stop_after(k):
        seen = []

        def hook(point):
            seen.append(point)
            if len(seen) == k:
                raise KeyboardInterrupt

        return hook

    b = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):
        run_study_to_dir(exp, out=b, on_point=stop_after(5), **{**run, "parallel": 1})
    assert not (b / "results.csv").exists()  # summaries only once every point is done
    # a point whose inputs changed since is recomputed, never mixed in
    first = exp.points(quick=True)[0].slug
    (b / runner.PARTIAL_DIR / f"{first}.key").write_text("stale", encoding="utf-8")
    (b / "json" / f"{first}.json").write_text("{}", encoding="utf-8")
    (b / "json" / ".tmp-1-x.json").write_text("half", encoding="utf-8")  # killed mid-write
    progress = io.StringIO()
    run_study_to_dir(exp, out=b, **{**run, "progress": progress})
    n = len(exp.points(quick=True))
    assert f"vmio: study volumes-cache: resuming: 4 of {n} points done" in progress.getvalue()
    assert _files(tmp_path / "a") == _files(b)
    # a finished directory is left alone without --force
    with pytest.raises(VmioError, match="not empty"):
        run_study_to_dir(exp, out=b, **run)
