"""`vmio study --dask`: a study's points as Dask tasks, on a `LocalCluster` started here and on
a real `dask scheduler` with two `dask worker` processes on loopback (started and stopped by
the tests); results byte for byte those of a local run, resume, and the one-line errors."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import JOB, STACK, finish, missing_tool, run_vmio
from vmio.cli.study import run_study_to_dir
from vmio.sim import VmioError
from vmio.study import cluster, experiment, runner

try:
    import distributed
except ImportError:  # the tests below fail in CI (missing_tool), are skipped elsewhere
    distributed = None

EXPERIMENT = """\
[experiment]
name = "dk"
stack = "stack.toml"
{job}

[[axis]]
name = "cache"
target = "stack:vm.0.disk.0.cache"
values = ["none", "writeback"]

[[axis]]
name = "rw"
target = "job:rw"
values = ["read", "randread", "randwrite"]

[[axis]]
name = "bs"
target = "job:bs"
values = ["4k", "256k"]
"""


def _need_dask() -> None:
    if distributed is None:
        missing_tool("dask.distributed is not installed (pip install 'vmio[dask]')")


def _experiment_dir(d: Path, workloads: bool = False) -> Path:
    """A 12-point experiment: with `workloads`, without a job file (the stack's VM runs its
    own workload file, next to the stack)."""
    d.mkdir(parents=True, exist_ok=True)
    stack = STACK.format(layout="raid0", devices='["sdb", "sdc"]')
    if workloads:
        stack = stack.replace('memory = "4g"\n', 'memory = "4g"\nworkload = "w.fio"\n', 1)
    (d / "stack.toml").write_text(stack, encoding="utf-8")
    (d / ("w.fio" if workloads else "job.fio")).write_text(
        JOB.format(rw="read", bs="4k"), encoding="utf-8"
    )
    job = "" if workloads else 'job = "job.fio"\nvm = "vm1"'
    (d / "experiment.toml").write_text(EXPERIMENT.format(job=job), encoding="utf-8")
    return d / "experiment.toml"


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[object]:
    """A LocalCluster of two worker processes and a client of it."""
    _need_dask()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as lc,
        distributed.Client(lc, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """The workload experiment's points run locally, one at a time: (its file, JSON texts)."""
    path = _experiment_dir(tmp_path_factory.mktemp("local"), workloads=True)
    res = runner.run_study(experiment.load_experiment(path), progress=None)
    return path, [p.json_text for p in res.points]


def test_a_study_on_a_local_cluster_gives_every_point_s_json_of_a_local_run(
    tmp_path, local_cluster
):
    path = _experiment_dir(tmp_path / "exp", workloads=True).parent
    exp = experiment.load_experiment(path / "experiment.toml")
    local = [p.json_text for p in runner.run_study(exp, progress=None).points]
    # The tasks carry the files' contents: the workers need none of them once submitted.
    res = runner.run_study(
        exp, progress=None, dask=local_cluster, on_point=lambda p: shutil.rmtree(path, True)
    )
    assert not path.exists()
    assert [p.json_text for p in res.points] == local
    assert [p.point for p in res.points] == exp.points()


def test_a_study_interrupted_on_dask_resumes_without_rerunning_its_stored_points(
    tmp_path, local_cluster, local_run
):
    exp = experiment.load_experiment(local_run[0])
    out = runner.prepare_output_dir(tmp_path / "out", force=False, name=exp.name)

    def stop_at_the_third(point) -> None:
        if point == exp.points()[2]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run_study(
            exp, progress=None, store=out, dask=local_cluster, on_point=stop_at_the_third
        )
    stored = sorted(p.stem for p in (out / runner.PARTIAL_DIR).glob("*.key"))
    assert 3 <= len(stored) < 12
    assert runner.unfinished_run(out, exp.name)
    events: list[runner.StudyEvent] = []
    res = runner.run_study(exp, progress=events.append, store=out, dask=local_cluster)
    assert (events[0].kind, events[0].reused, events[0].total) == ("start", len(stored), 12)
    assert [e.done for e in events if e.kind == "point"] == list(range(1, 13))
    assert [p.json_text for p in res.points] == local_run[1]
    assert sorted(p.name for p in (out / "json").iterdir()) == sorted(
        f"{p.slug}.json" for p in exp.points()
    )


def test_a_worker_of_another_vmio_version_is_refused_in_one_line(local_cluster, local_run):
    exp = experiment.load_experiment(local_run[0])
    ours = cluster.worker_version()
    set_version = "import vmio.version as v; v.__version__ = {!r}"
    local_cluster.run(exec, set_version.format("0.0-elsewhere"))
    try:
        with pytest.raises(VmioError) as err:
            runner.run_study(exp, progress=None, dask=local_cluster)
    finally:
        local_cluster.run(exec, set_version.format(ours))
    workers = sorted(local_cluster.scheduler_info()["workers"])
    assert str(err.value) == (
        f"--dask: worker {workers[0]} runs vmio 0.0-elsewhere, this client vmio {ours} (and 1 "
        "more of 2 workers); install the same vmio version on every worker"
    )


def test_a_point_whose_worker_dies_more_often_than_dask_allows_is_one_error_line(tmp_path):
    _need_dask()
    import dask

    path = _experiment_dir(tmp_path / "exp")
    job = path.parent / "job.fio"  # points of a few seconds: the worker dies running one
    job.write_text(job.read_text(encoding="utf-8").replace("runtime=1\n", "runtime=600\n"))
    exp = experiment.load_experiment(path)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        ) as lc,
        distributed.Client(lc, set_as_default=False) as client,
    ):
        (pid,) = client.run(os.getpid).values()

        def kill_the_worker_once_it_runs_a_point() -> None:
            t0 = time.monotonic()
            while not any(client.processing().values()) and time.monotonic() - t0 < 120:
                time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_the_worker_once_it_runs_a_point, daemon=True)
        killer.start()
        with pytest.raises(VmioError) as err:
            runner.run_study(exp, progress=None, dask=client)
        killer.join()
    # The worker held the points queued on it as well: any of them may be the one named.
    labels = "|".join(re.escape(p.label) for p in exp.points())
    assert re.fullmatch(
        f"point ({labels}): 1 Dask worker running it died \\(the scheduler's "
        "distributed.scheduler.allowed-failures is 0; the last was tcp://127.0.0.1:\\d+\\); "
        "the points finished so far are saved: run the same command again to resume",
        str(err.value),
    ), str(err.value)


def test_without_dask_installed_the_study_is_one_line_naming_the_extra(
    tmp_path, monkeypatch, capsys
):
    from vmio.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails
    path = _experiment_dir(tmp_path / "exp")
    rc = main(["study", str(path), "--out", str(tmp_path / "out"), "--dask", "local:2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (
        "vmio: error: --dask needs Dask's distributed scheduler, which is not installed "
        "(import of distributed halted; None in sys.modules): pip install 'vmio[dask]'\n"
    )


def test_a_scheduler_that_cannot_be_reached_is_one_error_line_with_its_address(tmp_path):
    _need_dask()
    path = _experiment_dir(tmp_path / "exp")
    address = f"tcp://127.0.0.1:{_free_port()}"
    r = run_vmio("study", path, "--out", tmp_path / "out", "--dask", address, "--dask-timeout", 1)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith(
        f"vmio: error: --dask: cannot reach the Dask scheduler at {address} within 1 s "
        "(--dask-timeout): "
    )
    assert r.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def cli_local(tmp_path_factory) -> tuple[Path, Path, str]:
    """The job-file experiment run by `vmio study --parallel 1`: (its file, the output
    directory, stdout with that directory written OUT)."""
    d = tmp_path_factory.mktemp("cli")
    path = _experiment_dir(d / "exp")
    one = run_vmio("study", path, "--out", d / "one", "--parallel", 1)
    assert one.returncode == 0, one.stderr
    return path, d / "one", one.stdout.replace(str(d / "one"), "OUT")


def test_the_cli_on_a_local_cluster_writes_every_file_byte_for_byte_as_a_local_run(
    tmp_path, cli_local
):
    _need_dask()
    path, one, stdout = cli_local
    dask = run_vmio("study", path, "--out", tmp_path / "dask", "--dask", "local:2")
    assert dask.returncode == 0, dask.stderr
    assert dask.stdout.replace(str(tmp_path / "dask"), "OUT") == stdout
    assert _files(tmp_path / "dask") == _files(one)
    assert "12 of 12 done" in dask.stderr


@pytest.fixture(scope="module")
def loopback(tmp_path_factory) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """`dask scheduler` and two `dask worker` processes (no nanny: killing one kills its
    worker) on loopback, on free ports: (the scheduler's address, the worker processes);
    every process is stopped when the module's tests are done, whatever their outcome."""
    _need_dask()
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        missing_tool("the 'dask' command is not installed (pip install 'vmio[dask]')")
    d = tmp_path_factory.mktemp("loopback")
    address = f"tcp://127.0.0.1:{_free_port()}"
    procs: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> subprocess.Popen:
        with open(d / log, "wb") as f:
            p = subprocess.Popen([dask, *args], cwd=d, stdout=f, stderr=f, stdin=subprocess.DEVNULL)
        procs.append(p)
        return p

    try:
        port = address.rsplit(":", 1)[1]
        http = ["--dashboard-address", "127.0.0.1:0"]  # not :8787, which may be taken
        start("scheduler", "--host", "127.0.0.1", "--port", port, *http, log="scheduler.log")
        one_thread = ["--nthreads", "1", "--no-nanny", "--no-dashboard"]
        workers = [
            start("worker", address, *one_thread, "--name", f"w{i}", log=f"w{i}.log")
            for i in (1, 2)
        ]
        with distributed.Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, workers
    finally:  # the workers first (the scheduler gone, they would try to reconnect)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_the_cli_on_a_scheduler_and_two_workers_writes_every_file_as_a_local_run(
    tmp_path, loopback, cli_local
):
    path, one, stdout = cli_local
    dask = run_vmio("study", path, "--out", tmp_path / "dask", "--dask", loopback[0])
    assert dask.returncode == 0, dask.stderr
    assert dask.stdout.replace(str(tmp_path / "dask"), "OUT") == stdout
    assert _files(tmp_path / "dask") == _files(one)


def test_ctrl_c_stops_a_study_on_dask_and_the_same_command_resumes_it(tmp_path, loopback):
    path = _experiment_dir(tmp_path / "exp")
    job = path.parent / "job.fio"  # points of ~50 ms: the run is still going when stopped
    job.write_text(job.read_text(encoding="utf-8").replace("runtime=1\n", "runtime=5\n"))
    # What `vmio study --parallel 1` writes, in this process (one interpreter less).
    run_study_to_dir(
        experiment.load_experiment(path),
        seed=None,
        quick=False,
        out=tmp_path / "one",
        force=False,
        parallel=1,
        progress=io.StringIO(),
    )
    cmd = [sys.executable, "-m", "vmio", "study", path, "--out", tmp_path / "dask"]
    cmd += ["--dask", loopback[0]]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        # A shell without job control starts background commands with SIGINT ignored, and a
        # Python started so never raises KeyboardInterrupt: give the child Ctrl-C back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    keys = tmp_path / "dask" / runner.PARTIAL_DIR
    try:
        while proc.poll() is None and not any(keys.glob("*.key")):
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
    finally:
        _, err = finish(proc, 120)
    assert proc.returncode == 130, err
    assert err.endswith("vmio: interrupted (run the same command again to resume)\n"), err
    assert "Traceback" not in err
    stored = len(list(keys.glob("*.key")))
    assert 1 <= stored < 12
    again = run_vmio(*cmd[3:])
    assert again.returncode == 0, again.stderr
    assert f"resuming: {stored} of 12 points done" in again.stderr
    assert _files(tmp_path / "dask") == _files(tmp_path / "one")


def test_points_that_read_this_machine_s_environment_run_on_the_client_with_a_note(
    tmp_path, loopback, monkeypatch
):
    # The workers, started before, do not have the variable: a point run there would fail.
    monkeypatch.setenv("VMIO_TEST_IODEPTH", "8")
    path = _experiment_dir(tmp_path / "exp")
    text = path.read_text(encoding="utf-8").replace(
        'name = "bs"\ntarget = "job:bs"\nvalues = ["4k", "256k"]',
        'name = "qd"\ntarget = "job:iodepth"\nvalues = ["1", "${VMIO_TEST_IODEPTH}"]',
    )
    path.write_text(text, encoding="utf-8")
    exp = experiment.load_experiment(path)
    local = [p.json_text for p in runner.run_study(exp, progress=None).points]
    stream = io.StringIO()
    res = runner.run_study(exp, progress=stream, progress_tty=False, dask=loopback[0])
    assert [p.json_text for p in res.points] == local
    assert '"iodepth": "8"' in local[1] and '"iodepth": "1"' in local[0]
    assert (
        "vmio: note: 6 of 12 points read files or environment variables of this machine when "
        "simulated (include, read_iolog, ${VAR}): they run here, not on the Dask workers\n"
    ) in stream.getvalue()


def test_a_killed_worker_s_points_are_run_on_the_other_with_the_same_results(
    tmp_path, loopback, local_run
):
    # Last of the module: it leaves one worker.
    address, workers = loopback
    exp = experiment.load_experiment(local_run[0])

    def kill_a_worker(point) -> None:
        if workers[1].poll() is None:
            workers[1].kill()
            workers[1].wait()

    res = runner.run_study(exp, progress=None, dask=address, on_point=kill_a_worker)
    assert workers[1].returncode is not None
    assert [p.json_text for p in res.points] == local_run[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--dask", "sched.example"],
            "--dask: 'sched.example' is not a scheduler address; accepted: tcp://HOST:PORT (what "
            "'dask scheduler' prints; also tls, ws, wss, ucx), HOST:PORT, local or local:N (N "
            "worker processes here)",
        ),
        (["--dask", "local:0"], "--dask local:N: N is 1..1024 worker processes, not 0"),
        (
            ["--dask", "local", "--parallel", "2"],
            "--parallel and --dask: the Dask workers run the points (--dask local:N for N "
            "worker processes here)",
        ),
        (
            ["--dask", "local", "--engine", "real"],
            "--dask runs simulated points only; --engine real measures this machine",
        ),
        (["--dask-timeout", "5"], "--dask-timeout needs --dask"),
    ],
)
def test_a_bad_dask_option_is_one_line_before_anything_runs(tmp_path, capsys, args, message):
    from vmio.cli import main

    path = _experiment_dir(tmp_path / "exp")
    assert main(["study", str(path), "--out", str(tmp_path / "out"), *args]) == 2
    assert capsys.readouterr().err == f"vmio: error: {message}\n"
    assert not (tmp_path / "out").exists()
