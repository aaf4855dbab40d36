"""Throttling checked for real (python/vmio/real/throttle.py): one fio job (the nbd engine)
against `vmio serve` with a `[vm.disk.iotune]` limit and against qemu-storage-daemon with the
same limit through its throttle filter; each achieves the limit within 5 %, the two agree
within 5 %, a burst lasts its closed-form length, and `vmio sim` predicts the same. A short
version of `python -m vmio.real.throttle` (3 rounds, docs/validation.md)."""

from __future__ import annotations

from pathlib import Path

from conftest import missing_tool
from vmio.real import throttle as rt

SHORT = rt.CASES


def test_vmio_serve_and_qemu_throttle_to_the_same_limit_and_the_simulator_predicts_it(
    tmp_path: Path,
):
    if why := rt.tools_missing():
        missing_tool(why)
    runs = rt.check(tmp_path, rounds=1, runtime_s=2, burst_runtime_s=4, cases=SHORT)
    rows = rt.summary(runs, SHORT)
    print("\n" + rt.table(rows))
    by = {(r["case"], r["server"]): r for r in rows}
    for case in SHORT:
        vmio, qemu, sim = (by[(case.name, s)] for s in ("vmio", "qemu", "vmio sim"))
        # Bursts: measured in 250 ms windows, so within 10 % of the closed form's length.
        tol = 0.10 if case.burst else 0.05
        for r in (vmio, qemu, sim):
            assert r["mean"] is not None, (case.name, r)
            assert abs(r["error"]) <= tol, (case.name, r)
        assert abs(vmio["mean"] / qemu["mean"] - 1) <= tol, (case.name, vmio, qemu)


def test_the_burst_ends_at_the_first_window_below_the_middle_of_the_two_rates():
    case = rt.CASES[2]
    # 400 IOPS for 3 windows, one 40 % in the burst (760-1000 ms: 220 IOPS), then 100.
    windows = [(250.0, 400.0), (500.0, 400.0), (760.0, 400.0), (1000.0, 220.0), (1250.0, 100.0)]
    assert abs(rt.burst_length_s(windows, case) - (760 + 0.4 * 240) / 1000) < 1e-9
    assert rt.burst_length_s(windows[:3], case) is None
    # (max x max_length - max / 10) / (max - avg) = (800 - 40) / 300
    assert abs(case.burst_closed_form_s() - 760 / 300) < 1e-9


def test_the_same_limits_reach_both_servers_by_their_own_names(tmp_path: Path):
    case = rt.CASES[2]
    assert case.qemu_limits() == ("x-iops-total=100,x-iops-total-max=400,x-iops-total-max-length=2")
    image = tmp_path / "i.raw"
    image.write_bytes(b"\0" * 8192)
    text = rt.stack_text(image, case)
    assert "[vm.disk.iotune]\ntotal_iops_sec = 100\ntotal_iops_sec_max = 400\n" in text
    assert 'interface = "nbd"' in rt.stack_text(image, case, interface="nbd")
