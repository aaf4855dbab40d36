"""`vmio serve` as a subprocess, exercised with real NBD clients (nbdinfo, qemu-img, qemu-io)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import finish, require_tool, run_vmio, start_vmio_serve
from vmio.cli import build_parser
from vmio.sim import VmioError, native

STACK = """\
[[device]]
name = "a"
model = "ssd"
path = "a.img"
size = "16m"

[[device]]
name = "b"
model = "ssd"
path = "b.img"
size = "16m"

[[volume]]
name = "data"
layout = "stripe"
devices = ["a", "b"]

[scheduler]
name = "cfq"

[[vm]]
name = "vm1"
weight = 1000

[[vm.disk]]
name = "disk0"
volume = "data"
size = "8m"
cache = "writeback"

[[vm]]
name = "vm2"
weight = 100

[[vm.disk]]
name = "disk0"
volume = "data"
offset = "8m"
size = "8m"
cache = "writethrough"
"""


@pytest.fixture
def server(tmp_path: Path):
    """A running `vmio serve` on a Unix socket in tmp_path: (process, socket path)."""
    proc, sock = start_vmio_serve(tmp_path, STACK)
    yield proc, sock
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_nbdinfo_lists_the_vm_disks_and_qemu_tools_read_back_what_they_wrote(server):
    require_tool("nbdinfo", "libnbd-bin")
    require_tool("qemu-io", "qemu-utils")
    proc, sock = server
    out = subprocess.run(
        ["nbdinfo", "--list", f"nbd+unix:///?socket={sock}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'export="vm1/disk0"' in out and 'export="vm2/disk0"' in out
    info = subprocess.run(
        ["qemu-img", "info", f"nbd+unix:///vm2?socket={sock}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "8 MiB" in info
    io = subprocess.run(
        ["qemu-io", "-f", "raw", "-c", "write -P 0xab 0 64k", "-c", "read -P 0xab 0 64k"]
        + [f"nbd+unix:///vm1/disk0?socket={sock}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Pattern verification failed" not in io
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc, 30)
    assert proc.returncode == 0, err
    assert "vmio: shut down" in err and "vm1/disk0" in err
    assert not sock.exists()


def test_a_bad_stack_is_one_error_line_and_exit_status_2(tmp_path: Path):
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.replace('cache = "writeback"', 'cache = "fast"'), encoding="utf-8")
    r = run_vmio("serve", "--stack", stack, "--socket", tmp_path / "s.sock")
    assert r.returncode == 2
    assert r.stderr.startswith("vmio: error: ")
    assert "vm[0].disk[0].cache: 'fast' is not valid" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_vmio("serve", "--stack", tmp_path / "missing.toml")
    assert r.returncode == 2 and "does not exist" in r.stderr


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--workers", "5000"),
        ("--workers", "9" * 5000),
        ("--queue-depth", "0"),
        ("--max-connections", "-1"),
        ("--idle-timeout", "1e400"),
    ],
)
def test_an_out_of_range_serve_flag_is_one_line_naming_the_flag(tmp_path: Path, flag, value):
    (tmp_path / "stack.toml").write_text(STACK, encoding="utf-8")
    r = run_vmio("serve", "--stack", tmp_path / "stack.toml", flag, value)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("vmio: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert flag in r.stderr and len(r.stderr) < 400, r.stderr
    assert "Traceback" not in r.stderr


def _serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def test_vmio_serve_takes_the_options_of_the_native_table_with_its_help_and_defaults():
    table = native().serve_options()
    parser = _serve_parser()
    actions = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert [a.option_strings for a in actions] == [[o["flag"]] for o in table]
    for a, o in zip(actions, table, strict=True):
        assert (a.dest, a.help, a.required) == (o["dest"], o["help"], o["required"]), o["flag"]
        assert a.default is None, "an option not given is not passed: the server's default"
        if o["default_text"] is not None:
            args = ["--stack", "s.toml", o["flag"], o["default_text"]]
            if o["needs"]:
                args += [o["needs"], "t.iolog"]
            value = getattr(parser.parse_args(args), o["dest"])
            assert value == (Path(o["default"]) if o["kind"] == "path" else o["default"])
    flags = {o["flag"]: o for o in table}
    assert flags["--queue-depth"]["default"] == 32 and flags["--workers"]["range"] == "1..1024"
    assert flags["--max-conn-payload"]["default"] == 64 << 20
    assert flags["--max-conn-payload"]["range"] == "32m..1t"
    assert flags["--idle-timeout"]["default"] == 300.0
    assert flags["--trace-overwrite"]["needs"] == "--trace"
    assert flags["--socket"]["excludes"] == "--tcp"
    assert flags["--aio"]["default"] == "native"
    assert flags["--aio"]["choices"] == ["threads", "native", "io_uring"]
    about, epilog = native().serve_text("vmio serve")
    assert (parser.description, parser.epilog) == (about, epilog)


def test_serve_refuses_an_unknown_option_and_a_value_out_of_its_range_in_one_line(tmp_path):
    from vmio.real import serve

    stack = tmp_path / "stack.toml"
    stack.write_text(STACK, encoding="utf-8")
    with pytest.raises(VmioError, match=r"^unknown argument 'colour'$"):
        serve.serve(stack, colour=True)
    with pytest.raises(VmioError, match=r"^--workers '0': must be an integer in 1\.\.=1024$"):
        serve.serve(stack, workers=0)
    with pytest.raises(VmioError, match=r"^--queue-depth '-1': must be an integer in"):
        serve.serve(stack, queue_depth=-1)
    with pytest.raises(VmioError, match=r"^--max-conn-payload '1m': must be a size in 32m\.\.1t"):
        serve.serve(stack, max_conn_payload="1m")
    with pytest.raises(VmioError, match=r"^give only one of --socket and --tcp$"):
        serve.serve(stack, socket=tmp_path / "s.sock", tcp=0)
    with pytest.raises(VmioError, match=r"need --trace FILE$"):
        serve.serve(stack, trace_max_bytes=4096)
    with pytest.raises(
        VmioError, match=r"^--aio 'uring': must be one of threads, native, io_uring$"
    ):
        serve.serve(stack, aio="uring")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tcp", "70000"], "argument --tcp: '70000' is not an integer in 0..65535"),
        (["--trace-overwrite"], "--trace-max-bytes and --trace-overwrite need --trace FILE"),
        (
            ["--socket", "a.sock", "--tcp", "1"],
            "argument --tcp: not allowed with argument --socket",
        ),
        (["--max-conn-payload", "2g"], "--max-conn-payload 2147483648 exceeds --max-total-payload"),
    ],
)
def test_the_rules_between_serve_options_are_one_error_line(tmp_path: Path, args, message):
    (tmp_path / "stack.toml").write_text(STACK, encoding="utf-8")
    r = run_vmio("serve", "--stack", tmp_path / "stack.toml", *args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("vmio: error: ") and message in r.stderr, r.stderr


def test_a_served_trace_is_a_fio_iolog_v3_that_vmio_sim_replays(tmp_path: Path, write_stack):
    require_tool("qemu-io", "qemu-utils")
    trace = tmp_path / "served.iolog"
    proc, sock = start_vmio_serve(tmp_path, STACK, "--trace", str(trace))
    subprocess.run(
        ["qemu-io", "-f", "raw", "-t", "writeback", "-c", "write 0 64k", "-c", "flush"]
        + ["-c", "read 0 64k", f"nbd+unix:///vm1/disk0?socket={sock}"],
        capture_output=True,
        check=True,
    )
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc, 30)
    assert proc.returncode == 0, err
    lines = [line.split(" ", 1)[1] for line in trace.read_text().splitlines()[1:]]
    assert lines[2:5] == ["vm1/disk0 write 0 65536", "vm1/disk0 sync 0 0", "vm1/disk0 read 0 65536"]
    job = tmp_path / "replay.fio"
    job.write_text(f"[replay]\nread_iolog={trace}\n", encoding="utf-8")
    r = run_vmio("sim", "--stack", write_stack("sim.toml"), job, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)["jobs"][0]
    assert result["write"]["io_bytes"] == result["read"]["io_bytes"] == 65536
    # The file is not replaced without being asked: one error line, exit status 2.
    before = trace.read_text()
    r = run_vmio("serve", "--stack", tmp_path / "stack.toml", "--trace", trace)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "the file exists; give --trace-overwrite to replace it" in r.stderr
    assert trace.read_text() == before


def test_a_pdc_disk_is_named_at_start_and_its_detected_journal_is_in_the_statistics(
    tmp_path: Path,
):
    require_tool("qemu-io", "qemu-utils")
    stats = tmp_path / "stats.json"
    stack = STACK.replace('cache = "writeback"', 'cache = "pdc"')
    proc, sock = start_vmio_serve(tmp_path, stack, "--stats-file", str(stats))
    # A journal-like circular log over [1m, 2m): two passes of 64 KiB writes, a flush after
    # every 2. The detector confirms the wrap at the second pass's first commit (its third
    # write): from there, 14 writes go around the host page cache.
    mib, cmds = 1 << 20, []
    for pattern in (0x22, 0x33):
        for k in range(16):
            cmds += ["-c", f"write -P {pattern:#x} {mib + k * 65536} 64k"]
            cmds += ["-c", "flush"] if k % 2 else []
    cmds += ["-c", f"read -P 0x33 {mib} 1m"]
    out = subprocess.run(
        ["qemu-io", "-f", "raw", *cmds, f"nbd+unix:///vm1/disk0?socket={sock}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Pattern verification failed" not in out
    proc.send_signal(signal.SIGTERM)
    _, err = finish(proc, 30)
    assert proc.returncode == 0, err
    assert "vm1/disk0 is pdc, RWF_DONTCACHE" in err.splitlines()[0], err
    snaps = {s["export"]: s for s in json.loads(stats.read_text())}
    pdc = snaps["vm1/disk0"]["pdc"]
    assert pdc["journals"] == [{"lo": mib, "hi": 2 * mib}], pdc
    assert pdc["bypassed_writes"] == 14 and pdc["bypassed_bytes"] == 14 * 65536, pdc
    assert [e["kind"] for e in pdc["events"]] == ["detected"], pdc
    assert "pdc" not in snaps["vm2/disk0"]
    assert f"vm1/disk0 pdc: journals [{mib}, {2 * mib}); 14 of 32 writes bypassed" in err, err


def test_a_stack_that_is_a_device_or_a_fifo_is_refused_by_the_bounded_reader(tmp_path: Path):
    import os

    fifo = tmp_path / "stack.fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        r = run_vmio("serve", "--stack", path, "--socket", tmp_path / "s.sock")
        assert r.returncode == 2
        assert r.stderr == (
            f"vmio: error: stack file '{path}' is not a regular file (a device, FIFO or socket)\n"
        )


def test_the_bench_ceiling_is_the_same_fio_workload_on_the_file_with_libaio_and_o_direct():
    from vmio.real import serve

    for case in serve.CASES:
        nbd = serve.case_global(case, 1 << 30, 5)
        ceiling = serve.ceiling_global(case, 1 << 30, 5)
        assert "ioengine=nbd" in nbd and "ioengine=nbd" not in ceiling
        assert ceiling[-2:] == ["ioengine=libaio", "direct=1"]
        assert ceiling[:-2] == [x for x in nbd if x != "ioengine=nbd"]


def test_the_bench_reads_sequentially_once_and_randomly_for_a_time():
    """The 1M sequential row is one pass (io_size = the image, no time_based, no ramp): a
    time-based run read a 1 GiB image more than once, the second time from a buffered
    server's page cache. The random rows stay time-based with their ramp second."""
    from vmio.real import serve

    size = 1 << 30
    for case in serve.CASES:
        lines = serve.case_global(case, size, 5)
        if case.rw == "read":
            assert case.once and f"io_size={size}" in lines and f"size={size}" in lines
            assert not {"time_based", "ramp_time=1"} & set(lines), lines
        else:
            assert not case.once
            assert lines == serve.nbd_global(case.rw, case.bs, case.iodepth, size, 5, True)


def _image(path: Path, size: int) -> Path:
    import os

    with open(path, "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())
    return path


def test_the_one_pass_row_reads_every_byte_of_the_image_once_through_vmio_serve(tmp_path: Path):
    """fio's nbd engine against a real vmio serve on a 16 MiB image with a 30 s cap: it reads
    16 MiB in 16 requests of 1 MiB, and stops there."""
    from vmio.real import serve

    require_tool("fio", "fio")
    size = 16 << 20
    image = _image(tmp_path / "bench.img", size)
    case = next(c for c in serve.CASES if c.once)
    proc, uri = serve._start_server("vmio", image, tmp_path, 128 << 10)
    try:
        job = serve._fio([("j", uri)], case, 30, size)[0]
    finally:
        serve._stop(proc)
    fig = serve._figures(job, case.rw)
    assert (fig["io_bytes"], fig["ios"]) == (size, size >> 20)
    # The ceiling's one pass, on the file itself.
    job = serve._fio([], case, 30, size, image=image)[0]
    assert serve._figures(job, case.rw)["io_bytes"] == size


def test_the_cached_bytes_of_an_image_are_zero_after_eviction_and_all_after_a_read(
    tmp_path: Path,
):
    """mincore's count (as fincore's): a written and fsynced file evicted holds no page in the
    cache; read through once (buffered), all of its pages; a 5000-byte tail counts as a page."""
    from vmio.real import serve

    image = _image(tmp_path / "img", (1 << 20) + 5000)
    serve.evict(image)
    assert serve.cached_bytes(image) == 0
    image.read_bytes()
    assert serve.cached_bytes(image) == (1 << 20) + 8192
    assert serve.cached_bytes(_image(tmp_path / "empty", 0)) == 0
