"""The `vmio` command line, run as a subprocess against the installed package."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import run_vmio


def test_main_help_lists_the_commands_and_examples():
    r = run_vmio("--help")
    assert r.returncode == 0
    for word in ("sim", "study", "bench", "examples:"):
        assert word in r.stdout


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["sim"], ["--stack", "--seed", "--vm", "--output-format", "--output", "--force"]),
        (["study"], ["--seed", "--out", "--quick", "--jobs-from", "--force", "--parallel"]),
        (["bench"], ["sim"]),
        (["bench", "sim"], ["--case", "--no-study", "--quick"]),
    ],
)
def test_every_subcommand_help_exits_0_and_mentions_its_options(args, options):
    r = run_vmio(*args, "--help")
    assert r.returncode == 0, r.stderr
    assert "examples:" in r.stdout
    for option in options:
        assert option in r.stdout


def test_a_bad_option_value_is_a_one_line_error_with_exit_status_2(write_stack, write_job):
    r = run_vmio("sim", "--stack", write_stack(), write_job(), "--seed", "many")
    assert r.returncode == 2
    assert "vmio: error: argument --seed: 'many' is not an integer in 0..2**64-1" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_missing_job_file_is_named_in_the_error(write_stack, tmp_path):
    r = run_vmio("sim", "--stack", write_stack(), tmp_path / "nope.fio")
    assert r.returncode == 2
    assert "vmio: error:" in r.stderr and "nope.fio" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_unknown_layout_is_an_error_naming_the_stack_file_and_field(write_stack, write_job):
    stack = write_stack("bad-layout.toml", layout="mirror")
    r = run_vmio("sim", "--stack", stack, write_job())
    assert r.returncode == 2
    assert "vmio: error:" in r.stderr
    assert "bad-layout.toml" in r.stderr
    assert "layout" in r.stderr and "mirror" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_volume_on_a_missing_device_is_an_error_naming_the_file_and_device(
    write_stack, write_job
):
    stack = write_stack("bad-device.toml", devices='["sdb", "sdz"]')
    r = run_vmio("sim", "--stack", stack, write_job())
    assert r.returncode == 2
    assert "bad-device.toml" in r.stderr and "sdz" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_bad_rw_value_is_an_error_naming_the_job_file_and_line(write_stack, write_job):
    job = write_job("bad-rw.fio", rw="sideways")
    r = run_vmio("sim", "--stack", write_stack(), job)
    assert r.returncode == 2
    assert "bad-rw.fio:9" in r.stderr, r.stderr
    assert "sideways" in r.stderr
    assert "Traceback" not in r.stderr


def test_json_output_parses_and_reports_read_bandwidth(write_stack, write_job):
    r = run_vmio("sim", "--stack", write_stack(), write_job(), "--output-format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["jobs"][0]["read"]["bw_bytes"] > 0
    assert result["vmio"]["seed"] == 1
    assert "raid0" in json.dumps(result["vmio"]["stack"])  # the effective stack


def test_the_same_seed_gives_byte_identical_output_and_another_seed_differs(write_stack, write_job):
    args = ("sim", "--stack", write_stack(), write_job(rw="randread"), "--output-format=json")
    first = run_vmio(*args, "--seed", "7")
    again = run_vmio(*args, "--seed", "7")
    other = run_vmio(*args, "--seed", "8")
    assert first.returncode == again.returncode == other.returncode == 0
    assert first.stdout == again.stdout
    assert first.stdout != other.stdout


def test_normal_output_looks_like_fio(write_stack, write_job):
    r = run_vmio("sim", "--stack", write_stack(), write_job(rw="randrw"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "  read: IOPS=" in out and "  write: IOPS=" in out
    assert "BW=" in out and "msec)" in out
    assert "    clat (" in out and "clat percentiles (" in out and "99.00th=[" in out
    assert "Run status group 0 (all jobs):" in out
    assert "   READ: bw=" in out and "  WRITE: bw=" in out


def test_unmodelled_fio_options_are_noted_once_on_stderr(write_stack, tmp_path):
    job = tmp_path / "noted.fio"
    job.write_text(
        "[global]\nthread\nruntime=1\ntime_based\nsize=1g\n\n[a]\nrw=read\nbs=64k\n",
        encoding="utf-8",
    )
    r = run_vmio("sim", "--stack", write_stack(), job)
    assert r.returncode == 0, r.stderr
    note = f"vmio: note: fio option 'thread' ({job}:2) is not modelled; ignored"
    assert r.stderr.count(note) == 1, r.stderr


def test_output_never_overwrites_an_existing_file_without_force(write_stack, write_job, tmp_path):
    out = tmp_path / "run.json"
    out.write_text("keep me\n", encoding="utf-8")
    args = ("sim", "--stack", write_stack(), write_job(), "--output-format", "json")
    r = run_vmio(*args, "--output", out)
    assert r.returncode == 2
    assert "run.json" in r.stderr and "--force" in r.stderr
    assert out.read_text(encoding="utf-8") == "keep me\n"
    r = run_vmio(*args, "--output", out, "--force")
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["jobs"][0]["read"]["bw_bytes"] > 0


def test_output_to_a_new_file_writes_the_report_there_and_nothing_on_stdout(
    write_stack, write_job, tmp_path
):
    out = tmp_path / "run.txt"
    r = run_vmio("sim", "--stack", write_stack(), write_job(), "--output", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "Run status group 0" in out.read_text(encoding="utf-8")


def test_the_input_files_are_left_untouched(write_stack, write_job):
    stack, job = write_stack(), write_job()
    before = [(p.read_bytes(), p.stat().st_mtime_ns) for p in (stack, job)]
    assert run_vmio("sim", "--stack", stack, job).returncode == 0
    assert [(p.read_bytes(), p.stat().st_mtime_ns) for p in (stack, job)] == before


def test_the_study_stack_and_job_simulate_as_they_are():
    from vmio.study.experiment import BUILTIN_STUDIES

    d = BUILTIN_STUDIES / "volumes-cache"
    r = run_vmio("sim", "--stack", d / "stack.toml", d / "job.fio", "--output-format", "json")
    assert r.returncode == 0, r.stderr
    jobs = {j["jobname"]: j for j in json.loads(r.stdout)["jobs"]}
    assert jobs["layout"]["write"]["io_bytes"] == 4 << 30  # fio lays out the whole file
    assert jobs["s0"]["read"]["bw_bytes"] > 0


def test_without_a_job_file_every_vm_runs_its_own_workload(write_stack, write_job, tmp_path):
    stack = write_stack()
    write_job("a.fio", rw="read", bs="1m")
    write_job("b.fio", rw="randwrite", bs="4k")
    text = stack.read_text(encoding="utf-8").replace(
        'name = "vm1"\nvcpus = 2',
        'name = "vm1"\nworkload = "a.fio"\nvcpus = 2',
    )
    text += (
        '\n[[vm]]\nname = "vm2"\nworkload = "b.fio"\n[[vm.disk]]\nname = "vdb"\n'
        'volume = "data"\noffset = "100g"\nsize = "100g"\ncache = "none"\n'
    )
    stack.write_text(text, encoding="utf-8")
    r = run_vmio("sim", "--stack", stack, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    jobs = json.loads(r.stdout)["jobs"]
    assert [j["vmio_vm"] for j in jobs] == ["vm1", "vm2"]
    assert jobs[0]["read"]["bw_bytes"] > 0 and jobs[1]["write"]["bw_bytes"] > 0


def test_without_a_job_file_a_stack_with_no_workload_is_an_error(write_stack):
    r = run_vmio("sim", "--stack", write_stack())
    assert r.returncode == 2
    assert "no job file given and no [[vm]] has a workload" in r.stderr
    assert "Traceback" not in r.stderr


HEAVY_MODULES = ("numpy", "pyarrow", "pandas", "matplotlib", "vmio.study", "vmio.real")


def test_vmio_sim_runs_without_loading_numpy_pyarrow_matplotlib_or_the_studies(
    write_stack, write_job
):
    # `vmio sim` runs in the process as `python -m vmio sim` does; then the modules it loaded
    # are listed. The heavy libraries belong to the studies and benchmarks only.
    code = (
        "import sys, contextlib, io\n"
        "from vmio.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = main(sys.argv[1:])\n"
        f"print(status, *sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY_MODULES!r}\n"
        f"    or m.startswith(('vmio.study', 'vmio.real'))))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "sim", "--stack", str(write_stack()), str(write_job())],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]


def test_importing_the_vmio_package_loads_only_what_is_used():
    # The public API (`vmio.simulate`, `vmio.run_study`, ...) is imported on first use.
    code = "import sys, vmio; print(*sorted(m for m in sys.modules if m.startswith('vmio')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["vmio"]
    code = "import vmio; print(vmio.run_study.__module__, vmio.fio_text.__module__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.stdout.split() == ["vmio.study.runner", "vmio.fioreport"], r.stderr


def test_bench_startup_prints_every_phase_of_a_short_vmio_sim():
    r = run_vmio("bench", "startup", "--runs", "1")
    assert r.returncode == 0, r.stderr
    rows = [line.strip().split("  ")[0] for line in r.stdout.splitlines()[2:11]]
    assert rows == [
        "interpreter",
        "imports",
        "native call",
        "of which native set-up",
        "rest of 'sim'",
        "outside the simulation",
        "whole process",
        "whole process, CPU",
        "one-request process, CPU",
    ]


def test_version_prints_the_installed_version_and_exits_0():
    from vmio.version import __version__

    r = run_vmio("--version")
    assert (r.returncode, r.stdout) == (0, f"vmio {__version__}\n")
