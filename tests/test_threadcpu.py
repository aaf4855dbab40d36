"""vmio.real.threadcpu: the NBD path's CPU split by thread role, against closed forms on a
/proc tree written by the test, and on this machine's own /proc with a process whose threads'
work the test knows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vmio.real import threadcpu
from vmio.real.calibrate import CalibrateError

TICK = os.sysconf("SC_CLK_TCK")


def _stat(tid: int, comm: str, utime: int, stime: int) -> str:
    # Fields 3..13 before utime (14) and stime (15), then the rest.
    return f"{tid} ({comm}) S 1 1 1 0 -1 4194560 0 0 0 0 {utime} {stime} 0 0 20 0 1 0\n"


def _task(root: Path, pid: int, tid: int, comm: str, ticks: tuple[int, int], sw: int) -> None:
    d = root / str(pid) / "task" / str(tid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(_stat(tid, comm, *ticks))
    (d / "status").write_text(f"Name:\t{comm}\nvoluntary_ctxt_switches:\t{sw}\n")
    (root / str(pid) / "comm").write_text(comm + "\n")


def _children(root: Path, pid: int, kids: list[int]) -> None:
    d = root / str(pid) / "task" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "children").write_text(" ".join(map(str, kids)) + " ")


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields():
    assert threadcpu.parse_stat(_stat(7, "qemu (x) d", 120, 30)) == 150.0
    assert threadcpu.parse_switches("Name:\tx\nvoluntary_ctxt_switches:\t42\nnonvol: 3\n") == 42


def test_threads_are_counted_by_role_and_a_thread_that_has_gone_keeps_its_time(tmp_path):
    launcher, server, fio, job = 1, 100, 200, 201
    _task(tmp_path, server, server, "qemu-storage-d", (3 * TICK, TICK), 500)  # main: 4 s
    _task(tmp_path, server, 101, "qemu-storage-d", (TICK, TICK), 900)  # a worker: 2 s
    _children(tmp_path, launcher, [fio, 300])
    _task(tmp_path, 300, 300, "sleep", (9 * TICK, 0), 1)  # not fio: not counted
    _task(tmp_path, fio, fio, "fio", (TICK, 0), 10)
    _children(tmp_path, fio, [job])
    _task(tmp_path, job, job, "fio", (2 * TICK, TICK), 70)  # the job process: 3 s
    _task(tmp_path, job, 202, "fio", (TICK, 0), 5)  # and its second thread: 1 s
    r = threadcpu.PathThreads(server, launcher, tmp_path)
    t = r.read()
    assert t.cpu_s == {"main": 4.0, "pool": 2.0, "client": 4.0, "fio": 1.0}
    assert t.switches == {"main": 500, "pool": 900, "client": 75, "fio": 10}
    # The job's process exits: its threads keep their last value, the main loop goes on.
    import shutil

    shutil.rmtree(tmp_path / str(job))
    _task(tmp_path, server, server, "qemu-storage-d", (5 * TICK, TICK), 800)
    d = r.read() - t
    assert d.cpu_s == {"main": 2.0, "pool": 0.0, "client": 0.0, "fio": 0.0}
    assert d.switches["main"] == 300


def test_a_runs_split_is_per_request_and_the_rest_is_the_machines_total_less_the_roles():
    delta = threadcpu.Totals(
        {"main": 0.2, "pool": 0.3, "client": 0.1, "fio": 0.0}, {"main": 4000, "pool": 0}
    )
    r = threadcpu.RoleLoad.of(delta, 10_000, 80_000.0)
    assert r.cpu_ns == {"main": 20_000.0, "pool": 30_000.0, "client": 10_000.0, "fio": 0.0}
    assert r.main_wakes == 0.4
    assert r.rest_ns == pytest.approx(20_000.0)
    with pytest.raises(CalibrateError):
        threadcpu.RoleLoad.of(delta, 0, 1.0)


def test_the_main_loops_split_recovers_its_request_and_wake_costs():
    # cpu = 9 us + wakes x 17 us: one wake-up a request at QD1, fewer at depth.
    pts = [(w, 9_000 + w * 17_000) for w in (1.0, 1.02, 0.31, 0.27)]
    request, wake = threadcpu.wake_split(pts)
    assert request == pytest.approx(9_000) and wake == pytest.approx(17_000)
    # CPU falling with more wake-ups is no cost of a wake-up: all of it per request.
    assert threadcpu.wake_split([(1.0, 10.0), (0.5, 20.0)]) == (15.0, 0.0)
    with pytest.raises(CalibrateError, match="different wake-ups"):
        threadcpu.wake_split([(1.0, 10.0), (1.0, 12.0)])


def test_a_real_process_main_thread_work_and_a_sleeping_threads_wakeups_are_seen():
    """A child whose main thread spins 0.4 s of CPU while another thread sleeps 1 ms 200
    times: the main role holds the spin, the other the wake-ups."""
    code = (
        "import threading, time\n"
        "naps = threading.Event()\n"
        "def nap():\n"
        "    for _ in range(200): time.sleep(0.001)\n"
        "    naps.set(); time.sleep(30)\n"
        "t = threading.Thread(target=nap, daemon=True); t.start()\n"
        "end = time.thread_time() + 0.4\n"
        "while time.thread_time() < end: pass\n"
        "naps.wait(); print('done', flush=True); time.sleep(30)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        r = threadcpu.PathThreads(p.pid, launcher_pid=os.getpid())
        before = r.read()
        assert p.stdout is not None and p.stdout.readline().strip() == "done"
        d = r.read() - before
        # The spin is at least 0.4 s (ticks of 10 ms: a tick less at worst).
        assert d.cpu_s["main"] >= 0.39
        assert d.cpu_s["pool"] < 0.1
        assert d.switches["pool"] >= 150  # 200 sleeps, a few may have started before
    finally:
        p.kill()
        p.wait()


def test_the_cfs_keys_are_the_main_loops_split_and_the_depth_medians_or_none():
    doc = {
        "main": {"bs": 4096, "request_ns": 10772, "wake_ns": 13946},
        "median_depth_ns": {"main": 12575, "pool": 4171, "client": 8199, "fio": 349},
    }
    assert threadcpu.cfs_keys(doc) == {
        "client_cpu": "8199ns",
        "server_cpu": "10772ns",
        "server_wake": "13946ns",
        "pool_cpu": "4171ns",
    }
    assert threadcpu.cfs_keys({**doc, "main": {"bs": 4096, "note": "no split"}}) is None
    assert threadcpu.cfs_keys({"main": doc["main"]}) is None
