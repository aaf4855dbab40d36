"""vmio.real.wakeup: the closed form of one thread wake-up on fake qemu-img bench timings (the
real run is test_calserve.py's quick qemu-storage-daemon calibration, which writes it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmio.real import wakeup
from vmio.real.calibrate import CalibrateError

# Per-request times (ns) of a host with 40 us wake-ups: null-co 10 us; the psync read 2 us;
# threads = null + read + 3 us of thread-pool work + 2 wake-ups; io_uring = null + read +
# 2.5 us of its work + 1 wake-up.
NULL, READ, W = 10_000.0, 2_000.0, 40_000.0
TIMES = {
    "null": NULL,
    "threads": NULL + READ + 3_000 + 2 * W,
    "io_uring": NULL + READ + 2_500 + W,
}


def test_the_wakeup_is_half_of_threads_less_null_co_the_read_and_the_thread_pools_work() -> None:
    e = wakeup.estimate(TIMES, READ)
    assert e.wakeup_ns == pytest.approx(W)
    # io_uring paid one wake-up here, and threads less io_uring less the work is one too.
    assert e.io_uring_wakeups == pytest.approx(1.0)
    assert e.difference_ns == pytest.approx(W)
    # An io_uring that completes the read inline (tmpfs) pays none: the difference is two.
    inline = wakeup.estimate(TIMES | {"io_uring": NULL + READ + 2_500}, READ)
    assert inline.wakeup_ns == pytest.approx(W)
    assert inline.io_uring_wakeups == pytest.approx(0.0)
    assert inline.difference_ns == pytest.approx(2 * W)


def fake(times: dict[str, float], refuse: str | None = None, log: list[str] | None = None):
    """A qemu-img bench of fixed per-request `times` (ns): elapsed seconds for `count`."""

    def run(kind: str, count: int) -> float:
        if kind == refuse:
            raise wakeup.Refused(f"qemu-img bench -i {kind}: not supported")
        if log is not None:
            log.append(kind)
        return round(count * times[kind] / 1e9, 3)  # qemu-img prints milliseconds

    return run


def test_rounds_rotate_the_kinds_size_the_runs_and_take_the_median() -> None:
    log: list[str] = []
    w = wakeup.measure_with(fake(TIMES, log=log), READ, "none", quick=False)
    assert w.wakeup_ns == pytest.approx(W, rel=1e-3)
    assert len(w.rounds) == wakeup.ROUNDS and w.notes == []
    # Three pilots, then each round in a rotated order.
    assert log[3:] == [*wakeup.KINDS, *wakeup.KINDS[1:], "null", "io_uring", "null", "threads"]
    # Each run of about a second: count x time.
    for r in w.rounds:
        for k, n in r.count.items():
            assert n * TIMES[k] / 1e9 == pytest.approx(wakeup.TARGET_S, rel=0.01)
    rec = w.record()
    assert rec["wakeup_ns"] == w.wakeup_ns and len(rec["rounds"]) == wakeup.ROUNDS
    assert "median of 3 rounds" in w.comment()


def test_a_refused_io_uring_is_left_out_with_a_note_and_a_refused_threads_is_an_error() -> None:
    w = wakeup.measure_with(fake(TIMES, refuse="io_uring"), READ, "none", quick=True)
    assert w.wakeup_ns == pytest.approx(W, rel=1e-2)
    assert set(w.rounds[0].lat_ns) == {"null", "threads"}
    assert w.notes[0].startswith("io_uring left out: qemu-img bench -i io_uring")
    assert w.estimates[0].io_uring_wakeups is None
    with pytest.raises(wakeup.Refused):
        wakeup.measure_with(fake(TIMES, refuse="threads"), READ, "none", quick=True)


def test_a_wakeup_lost_in_the_noise_is_an_error() -> None:
    slow_read = NULL + 3_000 + 2 * W + 1_000  # a "read" longer than the whole threads request
    with pytest.raises(CalibrateError, match="not positive in most rounds"):
        wakeup.measure_with(fake(TIMES), slow_read, "none", quick=True)


def test_the_bench_command_lines_and_their_output() -> None:
    img = Path("/dev/shm/x.img")
    assert wakeup.bench_args("threads", img, 1 << 20, "none", 100) == [
        *("qemu-img", "bench", "-f", "raw", "-t", "none", "-i", "threads"),
        *("-d", "1", "-s", "4096", "-c", "100", "/dev/shm/x.img"),
    ]
    null = wakeup.bench_args("null", img, 1 << 20, "none", 100)
    assert null[-1] == "driver=raw,file.driver=null-co,file.size=1048576"
    out = "Sending 100 read requests, 4096 bytes each\nRun completed in 0.125 seconds.\n"
    assert wakeup.elapsed_of(out) == 0.125
    with pytest.raises(CalibrateError, match="no 'Run completed' line"):
        wakeup.elapsed_of("qemu-img: error\n")


def test_the_image_checks_put_the_measured_wakeup_into_the_image_disks_queue_table(
    tmp_path: Path,
) -> None:
    import json

    from vmio import stackfile
    from vmio.real import images

    d = tmp_path / "cal"
    d.mkdir()
    (d / "serve-path-qsd.toml").write_text(
        '[nbd]\nhandoff = "60us"\nrequest = "25us"\nread_rate = 700000000\n'
        'write_rate = 700000000\n\n[queue]\nwakeup = "6400ns"\n',
        encoding="utf-8",
    )
    cal = images.Calibration.find(d)
    assert cal.queue == {"wakeup": "6400ns"} and "[queue] wakeup 6400ns" in cal.describe()
    gib = 1 << 30
    p = images.Point(
        "b", images.IMAGES[2], images.Serve("threads", "small"), images.RAND_R_ALL, "over"
    )
    disk = images.sim_doc(p, gib, cal, "ext4")["vm"][0]["disk"][0]
    assert disk["queue"] == {"wakeup": "6400ns", "wake_spread": "0ns"}
    # The stack loader takes it as the disk's [vm.disk.queue] wakeup.
    stack = stackfile.loads(images.sim_stack(p, gib, cal, "ext4"))
    assert stack.vms[0].disks[0].queue["wakeup_ns"] == 6400
    # Without the image layer the disk has no queue table; the record keeps it for --from.
    assert "queue" not in images.sim_doc(p, gib, cal, "ext4", layer=False)["vm"][0]["disk"][0]
    m = images.Measurement(gib, 1.0, 1, "/x", "ext4")
    again = images.Calibration.of_record(json.loads(json.dumps(images.record(m, {}, cal))))
    assert again is not None and again.queue == cal.queue
    # vmio serve's table measures no wake-up: none is taken from it.
    (d / "serve-path-qsd.toml").rename(d / "serve-path.toml")
    assert images.Calibration.find(d).queue is None
