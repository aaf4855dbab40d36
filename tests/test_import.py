"""`vmio import libvirt` and `vmio import qemu` (vmio.importer): the corpus of domain XMLs in
tests/data/libvirt (each imports, or is refused with one line naming the element its first
comment names), a round trip (import, then simulate) on a virtio-blk, a virtio-scsi and an
IDE domain, the QEMU command lines of the same domains giving the same stack, the host probe
on a made-up sysfs, and no output overwritten without --force."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_vmio
from vmio import stackfile
from vmio.importer import HostSide, libvirt, probe, qemu, stack_text
from vmio.importer.build import stack_doc
from vmio.importer.model import cache_mode, qemu_version_of_machine
from vmio.importer.safexml import parse_text
from vmio.sim import VmioError

CORPUS = Path(__file__).parent / "data" / "libvirt"
GOOD = sorted(p for p in CORPUS.glob("*.xml") if not p.name.startswith("bad-"))
BAD = sorted(CORPUS.glob("bad-*.xml"))

JOB = """\
[job]
filename=/dev/{disk}
rw=randrw
bs=4k
ioengine=libaio
direct=1
iodepth=8
size=64m
runtime=0.2
time_based=1
"""


def doc_of(path: Path) -> dict:
    """The tables an import of `path` writes (without its header)."""
    doc, _ = stack_doc(libvirt.load(str(path)), HostSide())
    return doc


def header_of(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))


# --- the corpus ----------------------------------------------------------------------------


def test_the_corpus_has_domains_to_import_and_to_refuse():
    assert len(GOOD) >= 10 and len(BAD) >= 10


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_a_corpus_domain_imports_into_a_stack_the_simulator_accepts(path):
    text = stack_text(libvirt.load(str(path)), HostSide())
    stack = stackfile.loads(text, "imported.toml")
    assert str(path) in text.splitlines()[0]
    assert stack.vms[0].disks


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_a_bad_corpus_file_is_refused_with_one_line_naming_the_element(path):
    expected = re.search(r"refused: (.*?) -->", path.read_text()).group(1)
    r = run_vmio("import", "libvirt", path)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vmio: error: "), r.stderr
    assert str(path) in lines[0] and expected in lines[0], lines[0]
    assert r.stdout == ""


def test_an_entity_expansion_is_refused_before_anything_is_expanded():
    bomb = '<!DOCTYPE d [<!ENTITY a "xxxxxxxxxx">]><domain type="kvm">&a;</domain>'
    with pytest.raises(VmioError, match="DOCTYPE is not accepted"):
        parse_text(bomb, "bomb.xml")
    with pytest.raises(VmioError, match=r"x\.xml:1:.*not well-formed"):
        parse_text("<domain>&undeclared;</domain>", "x.xml")


# --- what is mapped ------------------------------------------------------------------------


def test_the_virtio_blk_domain_maps_every_disk_cpu_and_tuning_value():
    doc = doc_of(CORPUS / "virtio-blk.xml")
    vm = doc["vm"][0]
    assert (vm["name"], vm["vcpus"], vm["memory"], vm["weight"]) == ("web1", 4, "4g", 800)
    assert vm["qemu_version"] == "7.2"  # pc-q35-7.2
    assert vm["cputune"] == {
        "vcpupin": ["2", "3", "4", "5"],
        "emulatorpin": "0-1",
        "iothreadpin": ["6", "7"],
    }
    vda, vdb = vm["disk"]
    assert (vda["interface"], vda["cache"], vda["aio"], vda["format"]) == (
        "virtio-blk",
        "none",
        "native",
        "qcow2",
    )
    assert vda["iothread"] is True and vda["queue"] == {"num_queues": 4, "queue_size": 256}
    assert vda["image"] == {"discard": "unmap"}
    assert vda["iotune"] == {
        "total_iops_sec": 5000,
        "total_iops_sec_max": 10000,
        "total_iops_sec_max_length": 10,
        "size_iops_sec": 16384,
        "group_name": "web",
    }
    # the block device is a volume of its own, the image file on the ext4 volume
    assert vda["volume"] == "images" and vdb["volume"] == "block0"
    assert {v["name"]: v.get("filesystem") for v in doc["volume"]} == {
        "images": "ext4",
        "block0": None,
    }


def test_every_iotune_element_becomes_the_same_key_of_the_disks_iotune():
    vda, vdb = doc_of(CORPUS / "iotune-full.xml")["vm"][0]["disk"]
    assert len(vda["iotune"]) == 14 and vda["iotune"]["read_bytes_sec_max_length"] == 5
    assert vda["iotune"]["group_name"] == "pair" and vdb["iotune"]["group_name"] == "solo"
    assert vdb["iotune"]["total_bytes_sec"] == 150000000


def test_blkiotune_gives_the_weight_and_the_device_throttles_of_the_disk_on_that_device():
    d = libvirt.load(str(CORPUS / "blkiotune.xml"))
    vm = stack_doc(d, HostSide())[0]["vm"][0]
    assert vm["weight"] == 300
    assert vm["disk"][0]["iotune"] == {
        "read_iops_sec": 1500,
        "write_iops_sec": 800,
        "read_bytes_sec": 80000000,
        "write_bytes_sec": 40000000,
    }
    assert "iotune" not in vm["disk"][1]
    assert any("per-device weight" in n for n in d.notes)
    assert any("/dev/sdz" in n for n in d.notes)


def test_cputune_pins_fill_unpinned_vcpus_with_the_vcpu_cpuset_and_raise_the_host_cores():
    d = libvirt.load(str(CORPUS / "cputune-full.xml"))
    doc, header = stack_doc(d, HostSide())
    vm = doc["vm"][0]
    assert vm["vcpus"] == 4  # current='4' of 8
    assert vm["cputune"]["vcpupin"] == ["2", "1-7,^4", "3", "1-7,^4"]
    assert vm["cputune"]["iothreadpin"] == ["9"]  # iothread 2 serves vda
    assert doc["host"]["cores"] == 10  # core 9 pinned
    text = "\n".join(header)
    for element in ("shares", "period", "quota", "vcpusched", "cachetune", "memorytune"):
        assert f"cputune/{element}" in text


def test_a_cpuset_beyond_vmios_64_cores_leaves_the_pinning_out_with_a_note(tmp_path):
    # libvirt's own tests pin to core 525 (<vcpu cpuset='1-4,8-20,525'>): the domain imports,
    # floating, with the note, instead of the simulator refusing the whole stack.
    text = (CORPUS / "cputune-full.xml").read_text().replace("1-7,^4", "1-4,8-20,525")
    src = tmp_path / "wide.xml"
    src.write_text(text)
    doc, header = stack_doc(libvirt.load(str(src)), HostSide())
    assert "cputune" not in doc["vm"][0]
    assert doc["host"]["cores"] <= 64
    assert any("pins core 525; vmio models at most 64 host cores" in h for h in header)
    out = tmp_path / "wide.toml"
    r = run_vmio("import", "libvirt", src, "-o", out)
    assert r.returncode == 0, r.stderr


def test_the_current_memory_is_the_guests_and_memory_tuning_is_noted():
    d = libvirt.load(str(CORPUS / "memory-full.xml"))
    assert d.memory == 16000 * 10**6
    text = "\n".join(d.notes)
    for element in ("maxMemory", "memoryBacking", "memtune", "numatune"):
        assert element in text
    assert "devices/memory" in text and "devices/memballoon" in text


def test_a_qcow2_backing_chain_becomes_the_images_backing_list():
    vm = doc_of(CORPUS / "ide.xml")["vm"][0]
    (hda,) = vm["disk"]
    assert hda["interface"] == "ide" and hda["cache"] == "writethrough"
    assert hda["image"]["backing"] == [{"format": "qcow2"}, {"format": "raw"}]
    assert vm["qemu_version"] == "2.11" and vm["memory"] == "1g"


def test_every_unmodelled_attribute_and_child_of_a_disk_is_a_note_with_its_line():
    d = libvirt.load(str(CORPUS / "disk-extras.xml"))
    text = "\n".join(d.notes)
    for attr in ("detect_zeroes", "copy_on_read", "error_policy", "rerror_policy", "ioeventfd"):
        assert f"driver@{attr}=" in text
    for child in ("serial", "wwn", "boot", "geometry", "encryption", "shareable", "transient"):
        assert re.search(rf"/{child} \(line \d+\)", text), child
    assert "bus='usb'" in text and "bus='sd'" in text and "type='vmdk'" in text


def test_sources_of_every_type_are_modelled_or_left_out_with_a_note():
    d = libvirt.load(str(CORPUS / "sources.xml"))
    kinds = {x.name: x.source_kind for x in d.disks}
    assert kinds["vda"] == "file" and kinds["vdb"] == "block" and kinds["vdc"] == "volume"
    assert kinds["vdd"] == "network" and kinds["vdh"] == "nvme"
    text = "\n".join(d.notes)
    assert "type='dir'" in text and "type='vhostuser'" in text and "lsilogic" in text


def test_sata_is_the_ide_model_with_a_note_and_xen_domains_keep_their_hypervisor():
    d = libvirt.load(str(CORPUS / "sata.xml"))
    assert [x.interface for x in d.disks] == ["ide", "ide"]
    assert [x.cache for x in d.disks] == ["unsafe", "writeback"]
    assert any("AHCI" in n for n in d.notes)
    x = libvirt.load(str(CORPUS / "xen-hvm.xml"))
    assert x.hypervisor == "xen" and [y.name for y in x.disks] == ["hda"]


def test_qemu_cache_flags_map_to_the_modes_of_qemus_table():
    assert cache_mode(True, False, False) == ("writeback", None)
    assert cache_mode(True, True, False) == ("none", None)
    assert cache_mode(False, False, False) == ("writethrough", None)
    assert cache_mode(False, True, False) == ("directsync", None)
    assert cache_mode(True, False, True) == ("unsafe", None)


def test_a_versioned_machine_type_picks_the_qemu_profile_of_its_compat_properties():
    assert qemu_version_of_machine("pc-i440fx-4.2") == "2.11"
    assert qemu_version_of_machine("pc-q35-5.0") == "5.2"
    assert qemu_version_of_machine("pc-q35-7.1") == "5.2"
    assert qemu_version_of_machine("virt-8.1") == "7.2"
    assert qemu_version_of_machine("pc-q35-10.0") == "8.2"
    assert qemu_version_of_machine("q35") is None


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "disk"), [("virtio-blk.xml", "vda"), ("virtio-scsi.xml", "sda"), ("ide.xml", "hda")]
)
def test_an_imported_domain_runs_a_short_fio_job_in_the_simulator(tmp_path, name, disk):
    out = tmp_path / "stack.toml"
    r = run_vmio("import", "libvirt", CORPUS / name, "-o", out)
    assert r.returncode == 0, r.stderr
    job = tmp_path / "job.fio"
    job.write_text(JOB.format(disk=disk))
    r = run_vmio("sim", "--stack", out, job)
    assert r.returncode == 0, r.stderr
    assert f"{disk}: ios=" in r.stdout and "read: IOPS=" in r.stdout


# The command lines libvirt builds for the three domains (qemuBuildDiskCommandLine: -blockdev
# protocol and format nodes, a throttle node for a group, -device with write-cache).
QEMU_LINES = {
    "virtio-blk.xml": """qemu-system-x86_64 -name guest=web1 -machine pc-q35-7.2,accel=kvm
        -m 4096 -smp 4 -object iothread,id=iothread1 -object iothread,id=iothread2
        -object throttle-group,id=web,x-iops-total=5000,x-iops-total-max=10000,x-iops-total-max-length=10,x-iops-size=16384
        -blockdev driver=file,filename=/var/lib/libvirt/images/web1.qcow2,node-name=f0,cache.direct=on,aio=native,discard=unmap
        -blockdev driver=qcow2,file=f0,node-name=q0,cache.direct=on,discard=unmap
        -blockdev driver=throttle,throttle-group=web,file=q0,node-name=t0
        -device virtio-blk-pci,drive=t0,iothread=iothread1,num-queues=4,queue-size=256,write-cache=on
        -blockdev driver=host_device,filename=/dev/vg0/web1-data,node-name=f1,aio=threads
        -blockdev driver=raw,file=f1,node-name=r1
        -device virtio-blk-pci,drive=r1,iothread=iothread2,write-cache=on
        -drive if=none,id=cd0,media=cdrom -device ide-cd,drive=cd0""",  # noqa: E501
    "virtio-scsi.xml": """qemu-system-x86_64 -name guest=db1 -machine pc-q35-8.2,accel=kvm
        -m 8G -smp 2 -object iothread,id=iothread1
        -device virtio-scsi-pci,id=scsi0,num_queues=2,iothread=iothread1
        -blockdev {"driver":"file","filename":"/srv/images/db1-root.img","node-name":"f0","cache":{"direct":true},"aio":"io_uring","discard":"unmap"}
        -blockdev {"driver":"raw","file":"f0","node-name":"r0","discard":"ignore"}
        -device scsi-hd,bus=scsi0.0,drive=r0,write-cache=on
        -blockdev driver=host_device,filename=/dev/mapper/db1-data,node-name=f1,cache.direct=on,aio=native
        -blockdev driver=raw,file=f1,node-name=r1
        -device scsi-hd,bus=scsi0.0,drive=r1,write-cache=off
        -blockdev driver=host_device,filename=/dev/sdc,node-name=f2,cache.direct=on
        -blockdev driver=raw,file=f2,node-name=r2
        -device scsi-block,bus=scsi0.0,drive=r2""",  # noqa: E501
    "ide.xml": """qemu-system-x86_64 -name legacy1 -enable-kvm -M pc-i440fx-2.11 -m 1G
        -blockdev driver=file,filename=/var/lib/libvirt/images/golden.raw,node-name=g0
        -blockdev driver=raw,file=g0,node-name=g1
        -blockdev driver=file,filename=/var/lib/libvirt/images/base-os.qcow2,node-name=b0
        -blockdev driver=qcow2,file=b0,backing=g1,node-name=b1
        -blockdev driver=file,filename=/var/lib/libvirt/images/legacy1.qcow2,node-name=l0,aio=threads
        -blockdev driver=qcow2,file=l0,backing=b1,node-name=l1
        -device ide-hd,drive=l1,write-cache=off
        -drive file=/iso/install.iso,if=ide,index=2,media=cdrom
        -drive file=/iso/drivers.img,if=floppy""",  # noqa: E501
}


@pytest.mark.parametrize("name", sorted(QEMU_LINES))
def test_the_qemu_command_line_of_a_domain_gives_the_same_stack_as_its_xml(name):
    from_xml = doc_of(CORPUS / name)
    for vm in from_xml["vm"]:
        # what a QEMU command line cannot say: pinning is done by libvirt (sched_setaffinity),
        # the weight by cgroups
        vm.pop("cputune", None)
        vm.pop("weight", None)
    argv = QEMU_LINES[name].split()
    from_qemu, _ = stack_doc(qemu.parse(argv), HostSide())
    assert from_qemu == from_xml


def test_qemu_options_split_as_qemu_does():
    assert qemu.split_opts("file=a,,b.img,if=virtio", None, "-drive") == {
        "file": "a,b.img",
        "if": "virtio",
    }
    assert qemu.split_opts("4,sockets=1", "cpus", "-smp") == {"cpus": "4", "sockets": "1"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-m"], "-m: has no value"),
        (["-device", "virtio-blk-pci,drive=nope"], "drive='nope' names no -drive"),
        (["-drive", "file=a.img,if=virtio,cache=fast"], "cache=fast is not valid"),
        (["-drive", "file=a.img,if=virtio,aio=native"], "aio=native with cache=writeback"),
        (["-netdev", "user,id=n0"], "no disk vmio can model"),
        (["-smp", "many", "-hda", "a.img"], "'many' is not valid"),
    ],
)
def test_a_bad_qemu_command_line_is_one_error_line(args, expected):
    r = run_vmio("import", "qemu", "--", *args)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr


@pytest.mark.parametrize("aio", ["5", "1e308", "{}", "[1]", "true"])
def test_a_json_blockdev_whose_aio_is_not_a_string_is_refused_in_one_line_naming_it(aio):
    # QEMU's JSON -blockdev types aio as an enum of strings (qapi/block-core.json)
    r = run_vmio(
        "import",
        "qemu",
        "--",
        "-blockdev",
        '{"driver":"file","filename":"a.img","node-name":"f0","aio":' + aio + "}",
        "-blockdev",
        '{"driver":"raw","file":"f0","node-name":"r0"}',
        "-device",
        "virtio-blk-pci,drive=r0",
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "is not valid; accepted: threads, native, io_uring" in lines[0]


# --- output files --------------------------------------------------------------------------


def test_an_existing_output_is_not_overwritten_without_force(tmp_path):
    out = tmp_path / "s.toml"
    out.write_text("mine\n")
    r = run_vmio("import", "libvirt", CORPUS / "virtio-blk.xml", "-o", out)
    assert r.returncode == 2 and "exists; pass --force" in r.stderr
    assert out.read_text() == "mine\n"
    r = run_vmio("import", "libvirt", CORPUS / "virtio-blk.xml", "-o", out, "--force")
    assert r.returncode == 0 and out.read_text().startswith("# vmio stack imported")


# --- the probe -----------------------------------------------------------------------------


def fake_sys(root: Path, disks: dict[str, dict[str, str]]) -> Path:
    """A sysfs of `disks` (name -> queue attributes, plus size and dev) under root/sys."""
    sys = root / "sys"
    for name, attrs in disks.items():
        dev = sys / "devices" / name
        (dev / "queue").mkdir(parents=True)
        for k, v in attrs.items():
            target = dev / ("queue" if k not in ("size", "dev") else "") / k
            target.write_text(v + "\n")
        (sys / "block").mkdir(exist_ok=True)
        (sys / "block" / name).symlink_to(dev)
        (sys / "class" / "block").mkdir(parents=True, exist_ok=True)
        (sys / "class" / "block" / name).symlink_to(dev)
        (sys / "dev" / "block").mkdir(parents=True, exist_ok=True)
        (sys / "dev" / "block" / attrs["dev"]).symlink_to(dev)
    return sys


def test_the_probe_guesses_a_profile_from_the_device_name_and_rotational_flag(tmp_path):
    sys = fake_sys(
        tmp_path,
        {
            "sdb": {
                "rotational": "1",
                "scheduler": "[mq-deadline] none",
                "size": "3907029168",
                "dev": "8:16",
            },
            "sdc": {"rotational": "0", "scheduler": "[none]", "size": "1000", "dev": "8:32"},
            "nvme0n1": {"rotational": "0", "size": "2000409264", "dev": "259:0"},
            "vdb": {"rotational": "1", "size": "2097152", "dev": "254:16", "read_ahead_kb": "4096"},
        },
    )
    p = probe.Prober(str(sys), str(tmp_path / "proc"), run=lambda cmd: None)
    notes: list[str] = []
    assert p.device("sdb", notes)["model"] == "hdd"
    assert p.device("sdb", notes)["capacity"] == 3907029168 * 512
    assert p.device("sdc", notes)["model"] == "ssd"
    assert p.device("nvme0n1", notes)["model"] == "flash"
    vdb = p.storage("vdb", notes)
    assert vdb.devices[0]["model"] == "flash" and vdb.read_ahead_kb == 4096
    assert any("vmio calibrate" in n for n in notes)  # a virtio disk's rotational flag lies
    assert p.block_of("8:16") == "sdb"


def test_the_probe_reads_a_striped_lv_from_dmsetup_and_a_raid0_from_md(tmp_path):
    sys = fake_sys(
        tmp_path,
        {
            "sdb": {"rotational": "0", "size": "1000000", "dev": "8:16"},
            "sdc": {"rotational": "0", "size": "1000000", "dev": "8:32"},
            "dm-0": {"size": "2000000", "dev": "253:0"},
            "md0": {"size": "2000000", "dev": "9:0"},
        },
    )
    for top in ("dm-0", "md0"):
        (sys / "devices" / top / "slaves").mkdir()
        for s in ("sdb", "sdc"):
            (sys / "devices" / top / "slaves" / s).symlink_to(sys / "devices" / s)
    (sys / "devices" / "md0" / "md").mkdir()
    (sys / "devices" / "md0" / "md" / "level").write_text("raid0\n")
    (sys / "devices" / "md0" / "md" / "chunk_size").write_text("524288\n")
    table = "0 2000000 striped 2 128 8:16 0 8:32 0\n"

    def run(cmd):
        return table if cmd[:2] == ["dmsetup", "table"] else None

    p = probe.Prober(str(sys), str(tmp_path / "proc"), run=run)
    dm = p.storage("dm-0", [])
    assert (dm.layout, dm.params, [d["name"] for d in dm.devices]) == (
        "stripe",
        {"stripe_size": "64k"},
        ["sdb", "sdc"],
    )
    md = p.storage("md0", [])
    assert (md.layout, md.params) == ("raid0", {"chunk": "512k"})


def test_probe_on_this_machine_sizes_a_raw_image_and_names_the_host_side(tmp_path):
    img = tmp_path / "disk.img"
    img.write_bytes(b"\0" * (1 << 20))
    r = run_vmio(
        "import",
        "qemu",
        "--probe",
        "--",
        "-enable-kvm",
        "-drive",
        f"file={img},if=virtio,format=raw",
    )
    assert r.returncode == 0, r.stderr
    assert "host side: probed on this machine" in r.stdout
    stack = stackfile.loads(r.stdout, "probed.toml")
    disk = stack.vms[0].disks[0]
    if "is not on this machine" not in r.stdout and "not a block device" not in r.stdout:
        assert disk.size_bytes == 1 << 20


def test_a_qcow2_images_virtual_size_is_read_from_its_header(tmp_path):
    img = tmp_path / "a.qcow2"
    img.write_bytes(b"QFI\xfb" + b"\0" * 20 + (10 << 30).to_bytes(8, "big") + b"\0" * 64)
    assert probe.image_size(str(img), "qcow2") == 10 << 30
    assert probe.image_size(str(img), "raw") == img.stat().st_size


def test_a_command_line_as_libvirt_logs_it_imports_with_json_options_and_vq_mapping():
    # environment assignments, the program, JSON -object/-blockdev/-device as libvirt writes
    # them (qemuBuildDiskCommandLine), and a disk's queues on two iothreads
    line = [
        "LC_ALL=C",
        "HOME=/var/lib/libvirt/qemu/domain-1-vm",
        "/usr/bin/qemu-system-x86_64",
        "-name",
        "guest=vm,debug-threads=on",
        "-machine",
        "pc-q35-9.0,usb=off",
        "-accel",
        "kvm",
        "-m",
        "size=4194304k",
        "-smp",
        "4,sockets=4,cores=1,threads=1",
        "-object",
        '{"qom-type":"iothread","id":"iothread1"}',
        "-object",
        '{"qom-type":"iothread","id":"iothread2"}',
        "-blockdev",
        '{"driver":"file","filename":"/srv/vm.qcow2","node-name":"s","auto-read-only":true,'
        '"discard":"unmap","cache":{"direct":true,"no-flush":false}}',
        "-blockdev",
        '{"node-name":"f","read-only":false,"cache":{"direct":true,"no-flush":false},'
        '"driver":"qcow2","file":"s"}',
        "-device",
        '{"driver":"virtio-blk-pci","num-queues":4,"iothread-vq-mapping":[{"iothread":'
        '"iothread1","vqs":[0,2]},{"iothread":"iothread2","vqs":[1,3]}],"drive":"f",'
        '"id":"virtio-disk0","write-cache":"on"}',
    ]
    d = qemu.parse(line)
    (disk,) = d.disks
    assert (d.name, d.vcpus, d.memory, d.hypervisor) == ("vm", 4, 4 << 30, "kvm")
    assert (disk.name, disk.cache, disk.format, disk.source) == (
        "vda",
        "none",
        "qcow2",
        "/srv/vm.qcow2",
    )
    assert (disk.num_queues, disk.iothreads, disk.iothread) == (4, 2, "iothread1")
    assert disk.discard is None  # the protocol node's discard= is not the guest's
    stack = stackfile.loads(stack_text(d, HostSide()), "s.toml")
    assert stack.vms[0].qemu_version == "8.2"


def test_an_imported_iops_limit_bounds_the_simulated_requests_to_qemus_bucket(tmp_path):
    # QEMU's leaky bucket (util/throttle.c, throttle_fix_bucket): without a burst (_max = 0)
    # the bucket holds avg / 10, so a saturating job completes avg x T + avg / 10 requests
    xml = tmp_path / "thr.xml"
    xml.write_text(
        "<domain type='kvm'><name>thr</name><memory unit='GiB'>1</memory><devices>"
        "<disk type='file' device='disk'><driver name='qemu' type='raw' cache='none' "
        "io='native'/><source file='/srv/thr.img'/><target dev='vda' bus='virtio'/>"
        "<iotune><total_iops_sec>500</total_iops_sec></iotune></disk></devices></domain>"
    )
    out = tmp_path / "thr.toml"
    assert run_vmio("import", "libvirt", xml, "-o", out).returncode == 0
    job = tmp_path / "thr.fio"
    job.write_text(JOB.format(disk="vda").replace("randrw", "randread").replace("0.2", "2"))
    r = run_vmio("sim", "--stack", out, job, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"][0]["read"]["total_ios"] == 500 * 2 + 500 // 10
