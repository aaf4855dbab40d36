"""`vmio study --engine real --real-mode guest` (vmio/real/engine.py, vmio/real/qemu.py): a VM
point's job runs with the host's fio inside a QEMU guest whose disk is the `vmio serve` export;
under TCG its timings are functional-only and `vmio compare` leaves it out. One guest boot
(tests/realengine/guest.toml: one point, 1 s of random reads then 1 MiB written and verified);
the rest needs no QEMU."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import missing_tool, require_tool, run_vmio
from vmio.real import engine as realengine
from vmio.real import qemu as qemuguest
from vmio.sim import VmioError

HERE = Path(__file__).parent / "realengine"
VM_STACK = (HERE / "vm-stack.toml").read_text(encoding="utf-8")
OPTS = realengine.Options(Path("/nonexistent-real-dir"), mode="guest")
JOB = "[j]\nioengine=libaio\ndirect=1\nfilename=/dev/vda\nrw=randread\nsize=1g\n"


def study(tmp_path: Path, out: str, *flags: str) -> Path:
    """tests/realengine/guest.toml into tmp_path/OUT (the images in tmp_path/real, 64 MiB)."""
    real = ["--real-dir", str(tmp_path / "real"), "--real-size", "64m", "--substitute"]
    extra = real if "--engine" in flags else []
    r = run_vmio("study", HERE / "guest.toml", "--out", tmp_path / out, *flags, *extra)
    assert r.returncode == 0, r.stderr
    return tmp_path / out


def point(out: Path) -> dict:
    return json.loads((out / "json" / "4-4k.json").read_text(encoding="utf-8"))


def test_a_vm_point_runs_in_a_tcg_guest_in_serve_modes_schema_and_compare_leaves_it_out(
    tmp_path,
):
    require_tool("fio", "fio")
    if (why := qemuguest.missing(fio=True)) is not None:
        missing_tool(why)
    sim = study(tmp_path, "sim")
    serve = study(tmp_path, "serve", "--engine", "real")
    guest = study(
        tmp_path, "guest", "--engine", "real", "--real-mode", "guest", "--real-accel", "tcg"
    )
    schema = [
        [(f.name, f.type) for f in pq.read_schema(d / "results.parquet")] for d in (sim, guest)
    ]
    assert schema[0] == schema[1]
    s, g = point(serve), point(guest)
    # The same keys at job level and in each direction as serve mode's run of the experiment.
    assert [(j["jobname"], sorted(j)) for j in g["jobs"]] == [
        (j["jobname"], sorted(j)) for j in s["jobs"]
    ]
    assert [sorted(j["read"]) for j in g["jobs"]] == [sorted(j["read"]) for j in s["jobs"]]
    v = g["vmio"]
    assert (v["mode"], v["accel"], v["timing"]) == ("guest", "tcg", "functional-only")
    assert v["replaced"] == {"filename": "/dev/vda"}
    assert any("functional-only" in n for n in v["notes"])
    rr, wv = g["jobs"]
    assert rr["read"]["total_ios"] > 0 and rr["error"] == wv["error"] == 0
    # 1 MiB written in 4 KiB blocks and read back (verify); the server saw every byte of it,
    # the guest's block layer merging writes (fewer requests than fio's 256).
    assert wv["write"]["total_ios"] == wv["read"]["total_ios"] == 256
    (export,) = v["server"]
    assert export["export"] == "vm1/vda" and export["write_bytes"] == 1 << 20
    assert 0 < export["write_ops"] <= 256
    assert export["read_bytes"] >= rr["read"]["io_bytes"] + (1 << 20)
    r = run_vmio("compare", guest, sim)
    assert r.returncode == 0, r.stderr
    *_, excluded, summary = r.stdout.splitlines()
    assert excluded == (
        "1 REAL point(s) left out of the errors and summary, timing functional-only "
        "(a guest under tcg): depth=4 block=4k direction=read"
    )
    assert summary.startswith("vmio compare: 0 points;")


@pytest.mark.parametrize(
    ("written", "interface", "device"),
    [
        ("virtio-blk", "virtio-blk", "/dev/vda"),
        ("virtio", "virtio-blk", "/dev/vda"),  # vmio-core's alias
        ("ide", "ide", "/dev/sda"),
        ("virtio-scsi", "virtio-scsi", "/dev/sda"),
        ("scsi", "virtio-scsi", "/dev/sda"),
    ],
)
def test_guest_mode_points_the_job_at_the_disk_the_guest_sees_on_the_vm_disks_interface(
    written, interface, device
):
    stack = VM_STACK.replace('interface = "virtio-blk"', f'interface = "{written}"')
    p = realengine.plan(stack, "vm-stack.toml", JOB, None, OPTS)
    assert (p.mode, p.interface, p.export) == ("guest", interface, "vm1/vda")
    # the job's size cut to the 32 MiB disk; ioengine and direct as the job says
    assert p.replaced == {"filename": device, "size": str(32 << 20)}
    assert p.served_stack["device"][0]["path"] == "/nonexistent-real-dir/ssd0.img"
    assert p.targets == {"j": f"{device} of the guest ({interface}): export vm1/vda of vmio serve"}


@pytest.mark.parametrize(
    ("stack", "job", "reason"),
    [
        (
            VM_STACK.replace('interface = "virtio-blk"', 'interface = "nbd"'),
            JOB,
            "guest mode: disk 'vda' has interface = \"nbd\", which the guest has no driver for "
            "(accepted: virtio-blk, virtio-scsi, ide); serve mode runs it",
        ),
        (VM_STACK, "[j]\nrw=write\ndirectory=/mnt/vda\n", realengine.GUEST_HAS_NO_FS),
        (VM_STACK, "[j]\nioengine=cpuio\ncpuload=50\n", realengine.GUEST_HAS_NO_FS),
        (
            (HERE / "host-stack.toml").read_text(encoding="utf-8"),
            JOB,
            "--real-mode guest needs a VM stack; this one is native",
        ),
    ],
)
def test_guest_mode_skips_a_disk_without_guest_driver_a_job_on_files_and_a_native_stack(
    stack, job, reason
):
    with pytest.raises(realengine.Skipped) as e:
        realengine.plan(stack, "stack.toml", job, None, OPTS)
    assert reason in str(e.value)


def test_a_guests_run_timeout_is_a_margin_plus_its_jobs_runtime_times_the_accelerators_slowdown():
    jobs = realengine.job_sections("[a]\nruntime=2\nramp_time=500ms\n[b]\nruntime=1m\n")
    assert realengine.run_timeout("tcg", [jobs]) == realengine.RUN_MARGIN + 10.0 * 62.5
    assert realengine.run_timeout("kvm", [jobs]) == realengine.RUN_MARGIN + 2.0 * 62.5
    size_based = realengine.job_sections("[a]\nruntime=1\n[b]\nsize=1g\n")
    assert realengine.run_timeout("tcg", [jobs, size_based]) == realengine.NO_RUNTIME_TIMEOUT
    assert realengine.fio_seconds("250msec") == realengine.fio_seconds("250ms") == 0.25
    with pytest.raises(VmioError, match="'2x' is not a fio time"):
        realengine.fio_seconds("2x")


def console(payload: bytes, *, damage: bool = False) -> str:
    """A guest console as the guest prints fio's results (qemuguest.FIO_SCRIPT), with the
    firmware's escapes on the begin marker's line and a kernel message among the base64."""
    b64 = base64.b64encode(payload).decode()
    lines = [b64[i : i + 76] for i in range(0, len(b64), 76)]
    if damage:
        lines[0] = lines[0][:-1]
    lines.insert(1, "[    3.141592] random: crng init done")
    return "\r\n".join(
        [
            "SeaBIOS", "\x1bc\x1b[?7l\x1b[2JVMIO-GUEST-BEGIN", "VMIO-FIO-STATUS 0",
            f"VMIO-FIO-JSON {hashlib.md5(payload).hexdigest()}", *lines,
            "VMIO-FIO-JSON-END", "VMIO-FIO-LOG fio: a line", "VMIO-GUEST-END", "reboot: Power down",
        ]
    )  # fmt: skip


def test_fios_json_comes_back_over_the_console_whole_or_is_refused_when_damaged():
    payload = json.dumps({"jobs": [{"jobname": "j", "x": "y" * 300}]}).encode()
    run = qemuguest.read_fio(console(payload))
    assert (run.status, run.json_text, run.log) == (0, payload.decode(), ["fio: a line"])
    with pytest.raises(qemuguest.GuestError, match="md5 differs"):
        qemuguest.read_fio(console(payload, damage=True))
    with pytest.raises(qemuguest.GuestError, match="did not run its script"):
        qemuguest.read_fio("SeaBIOS\nKernel panic\n")


def test_the_initramfs_carries_fios_libraries_at_their_paths_each_directory_once():
    ldd = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f10)\n"
        "\tlibceph-common.so.2 => /usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2 (0x7f)\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f10c7c0d000)\n"
    )
    paths = qemuguest.ldd_paths(ldd)
    assert paths == [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2",
        "/lib64/ld-linux-x86-64.so.2",
    ]
    entries = qemuguest._with_parents([(p, b"x") for p in paths], {"lib"})
    dirs = stat.S_IFDIR | 0o755
    assert [(n, m) for n, m, _ in entries] == [
        ("lib/x86_64-linux-gnu", dirs),
        ("lib/x86_64-linux-gnu/libz.so.1", stat.S_IFREG | 0o755),
        ("usr", dirs),
        ("usr/lib", dirs),
        ("usr/lib/x86_64-linux-gnu", dirs),
        ("usr/lib/x86_64-linux-gnu/ceph", dirs),
        ("usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2", stat.S_IFREG | 0o755),
        ("lib64", dirs),
        ("lib64/ld-linux-x86-64.so.2", stat.S_IFREG | 0o755),
    ]


def test_auto_falls_back_to_tcg_with_the_reason_and_a_forced_kvm_needs_dev_kvm(monkeypatch):
    monkeypatch.setattr(qemuguest, "kvm_unusable", lambda: "/dev/kvm: Permission denied")
    assert qemuguest.accelerator("auto") == (
        "tcg",
        "KVM unusable here (/dev/kvm: Permission denied)",
    )
    assert qemuguest.accelerator("tcg") == ("tcg", "--real-accel tcg")
    with pytest.raises(qemuguest.GuestError, match=r"^--real-accel kvm: /dev/kvm: Permission"):
        qemuguest.accelerator("kvm")
    monkeypatch.setattr(qemuguest, "kvm_unusable", lambda: None)
    assert qemuguest.accelerator("kvm") == ("kvm", "--real-accel kvm")  # forced: no probe
    monkeypatch.setattr(qemuguest, "_probe_kvm", lambda: None)
    assert qemuguest.accelerator("auto") == ("kvm", "a KVM probe boot ended within 20 s")
    monkeypatch.setattr(qemuguest, "_probe_kvm", lambda: "a KVM probe boot failed: hung")
    assert qemuguest.accelerator("auto") == (
        "tcg",
        "KVM unusable here (a KVM probe boot failed: hung)",
    )


def test_a_compared_point_with_functional_only_timing_is_left_out_of_errors_and_summary(
    tmp_path,
):
    def fio_json(name: str, bw: int, vmio: dict) -> Path:
        side = {"bw_bytes": bw, "iops": bw / 4096, "lat_ns": {"mean": 1e5}, "clat_ns": {}}
        idle = {"bw_bytes": 0, "iops": 0.0, "lat_ns": {"mean": 0.0}, "clat_ns": {}}
        jobs = [{"jobname": "j", "job options": {"rw": "read"}, "read": side, "write": idle}]
        path = tmp_path / name
        path.write_text(json.dumps({"jobs": jobs, "vmio": vmio}), encoding="utf-8")
        return path

    (tmp_path / "real").mkdir()
    (tmp_path / "sim").mkdir()
    fio_json("real/a.json", 100, {"mode": "serve"})
    fio_json("real/b.json", 100, {"mode": "guest", "accel": "tcg", "timing": "functional-only"})
    fio_json("sim/a.json", 110, {})
    fio_json("sim/b.json", 500, {})
    r = run_vmio("compare", tmp_path / "real", tmp_path / "sim")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-2] == (
        "1 REAL point(s) left out of the errors and summary, timing functional-only "
        "(a guest under tcg): file=b job=j direction=read"
    )
    # only a's +10 %: b's +400 % is not an error of the model
    assert lines[-1].startswith("vmio compare: 1 point; bandwidth error median 10.0 %, p90 10.0 %")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--real-mode", "guest"], "--real-mode and --real-accel need --engine real"),
        (["--engine", "real", "--real-accel", "tcg"], "--real-accel needs --real-mode guest"),
        (["--engine", "real", "--real-mode", "vm"], "argument --real-mode: invalid choice: 'vm'"),
    ],
)
def test_bad_guest_mode_flags_give_one_error_line(tmp_path, flags, message):
    r = run_vmio("study", HERE / "guest.toml", "--out", tmp_path / "out", *flags)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_what_the_guest_lacks_is_one_line_naming_its_debian_package(monkeypatch, tmp_path):
    monkeypatch.setattr(qemuguest.shutil, "which", lambda _: None)
    assert (
        qemuguest.missing() == "qemu-system-x86_64 not installed (Debian package qemu-system-x86)"
    )
    monkeypatch.setattr(qemuguest.shutil, "which", lambda _: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(qemuguest, "kernel", lambda: None)
    assert qemuguest.missing() == (
        "no kernel with modules under /boot (Debian package linux-image-cloud-amd64)"
    )
    monkeypatch.setattr(qemuguest, "kernel", lambda: (tmp_path / "vmlinuz", tmp_path))
    monkeypatch.setattr(qemuguest, "BUSYBOX", tmp_path / "no-busybox")
    assert qemuguest.missing() == (
        f"no static busybox at {tmp_path}/no-busybox (Debian package busybox-static)"
    )
    monkeypatch.setattr(qemuguest, "BUSYBOX", tmp_path / "busybox")
    (tmp_path / "busybox").write_bytes(b"")
    monkeypatch.setattr(qemuguest, "FIO", tmp_path / "no-fio")
    assert qemuguest.missing() is None
    assert qemuguest.missing(fio=True) == (
        f"no fio at {tmp_path}/no-fio to run in the guest (Debian package fio)"
    )
