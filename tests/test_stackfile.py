"""vmio.stackfile: the stack as Rust reads it (its defaults, its errors) and the one writer
of stack files."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

from vmio import cli, stackfile
from vmio.sim import VmioError

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted((ROOT / "python" / "vmio" / "studies").rglob("*stack*.toml")) + sorted(
    (ROOT / "tests" / "realengine").glob("*stack.toml")
)

STACK = """\
[[device]]
name = "d"
model = "ssd"

[[volume]]
name = "v"
layout = "single"
devices = ["d"]

[[vm]]
name = "a"
workload = "jobs/a.fio"

[[vm.disk]]
name = "vda"
volume = "v"
size = "1g"

[[vm.disk]]
name = "vdb"
volume = "v"
offset = "1g"

[vm.disk.filesystem]
type = "ext4"
"""


def test_the_view_shows_the_defaults_rust_applies() -> None:
    s = stackfile.loads(STACK, "dir/stack.toml")
    vm = s.vm(None)
    vda, vdb = vm.disks
    assert (vda.interface, vda.cache, vda.volume) == ("virtio-blk", "writeback", "v")
    assert vda.filesystem is None
    assert vdb.filesystem is not None and vdb.filesystem.mount == "/mnt/vdb"
    assert vdb.filesystem.type == "ext4"
    assert (s.host.hypervisor, s.native, vm.weight, vm.vcpus) == ("kvm", False, 500, 1)
    assert vda.size_bytes == 1 << 30
    # A disk without size is the rest of its volume, of the model's capacity.
    assert vdb.size_bytes == s.volume("v").capacity_bytes - (1 << 30)
    assert s.volume("v").capacity_bytes == s.device("d").capacity_bytes
    assert s.device("d").settings["capacity_bytes"] == s.device("d").capacity_bytes
    assert s.device("d").profile  # the model's default profile
    assert s.volume_devices("v") == (s.device("d"),)
    assert s.workload_path(vm) == Path("dir/jobs/a.fio")
    assert s.scheduler.name and "read_expire_ns" in s.scheduler.params


def test_a_native_stack_defaults_its_disks_to_the_host_interface() -> None:
    text = STACK.replace("[[device]]", '[host]\nhypervisor = "native"\n\n[[device]]', 1)
    s = stackfile.loads(text)
    assert s.native
    assert {(d.interface, d.cache) for d in s.vm("a").disks} == {("host", "none")}


def test_the_view_is_read_only() -> None:
    s = stackfile.loads(STACK)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.vms[0].disks[0].interface = "ide"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.device("d").settings["capacity_bytes"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    "edit",
    [
        ('name = "vda"', 'name = "vda"\ninterface = "usb"'),
        ('model = "ssd"', 'model = "ssd"\nrpm = 5'),
        ('offset = "1g"', 'offset = "1000000g"'),
        ("[[vm]]", "[[vm]\n"),
    ],
)
def test_a_bad_stack_gives_the_same_one_line_error_as_vmio_sim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str]
) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.replace(*edit), encoding="utf-8")
    job = tmp_path / "job.fio"
    job.write_text("[j]\nrw=read\nsize=4k\nfilename=/dev/vda\n", encoding="utf-8")
    with pytest.raises(VmioError) as got:
        stackfile.load(stack)
    message = str(got.value)
    assert "\n" not in message and message.startswith(str(stack))
    assert cli.main(["sim", "--stack", str(stack), str(job)]) == 2
    assert capsys.readouterr().err == cli.error_line(message) + "\n"


@pytest.mark.parametrize("path", STACKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_stack_loads(path: Path) -> None:
    s = stackfile.load(path)
    assert s.vms and all(vm.disks for vm in s.vms)


def test_the_writer_round_trips_through_the_native_parser() -> None:
    doc = {
        "host": {"cores": 4, "hypervisor": "native"},
        "device": [{"name": "d", "model": "flash", "read_latency": "80000ns"}],
        "volume": [{"name": "d", "layout": "single", "devices": ["d"]}],
        "scheduler": {"name": "mq-deadline", "max_merge": "512k"},
        "vm": [
            {
                "name": "host",
                "disk": [
                    {
                        "name": "d",
                        "volume": "d",
                        "interface": "host",
                        "cache": "none",
                        "filesystem": {"type": "ext4", "mount": "/mnt/x"},
                    }
                ],
            }
        ],
    }
    text = stackfile.render(doc, ["made by a test", ""])
    assert text.startswith("# made by a test\n#\n")
    s = stackfile.loads(text, "w.toml")
    assert (s.host.cores, s.scheduler.name, s.devices[0].model) == (4, "mq-deadline", "flash")
    assert s.devices[0].params == {"read_latency": "80000ns"}
    fs = s.vm("host").disk("d").filesystem
    assert fs is not None and fs.mount == "/mnt/x"


def _recorded_stacks() -> list[str]:
    host = json.loads((ROOT / "tests" / "real_host_iozone_figures.json").read_text())
    val = json.loads((ROOT / "tests" / "real_validation_figures.json").read_text())
    return [r["stack"] for r in host["repetitions"]] + [val["stack"]]


@pytest.mark.parametrize("text", _recorded_stacks())
def test_the_writer_writes_the_stacks_vmio_wrote_before_byte_for_byte(text: str) -> None:
    comments = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    assert stackfile.render(tomllib.loads(text), comments) == text


def test_the_writer_puts_arrays_of_values_on_one_line_and_quotes_odd_keys() -> None:
    text = stackfile.render({"seed": 3, "volume": [{"devices": ["a", "b"], "x y": 1.5}]})
    assert text == 'seed = 3\n\n[[volume]]\ndevices = ["a", "b"]\n"x y" = 1.5\n'
    assert tomllib.loads(text) == {"seed": 3, "volume": [{"devices": ["a", "b"], "x y": 1.5}]}


BLOCK_LAYER = """\
[[device]]
name = "d"
model = "ssd"

[[volume]]
name = "v"
layout = "single"
devices = ["d"]
filesystem = "xfs"
log_sync = "30us"

[nbd]
handoff = "20us"
request = "9us"

[[vm]]
name = "a"
vcpus = 2
qemu_version = "5.2"

[[vm.disk]]
name = "vda"
volume = "v"
size = "1g"
interface = "virtio-blk"
cache = "none"
aio = "native"
format = "qcow2"

[vm.disk.image]
cluster_size = "2m"
l2_cache_size = "1m"
l2_cache_entry_size = "4k"
refcount_cache_size = "8m"
lazy_refcounts = true
populated = 0.5
discard = "unmap"
backing = [{ format = "qcow2", populated = 0.25, cluster_size = "64k" }, { format = "raw" }]

[vm.disk.queue]
num_queues = 2
queue_size = 128
iothreads = 1

[vm.disk.iotune]
total_iops_sec = 1000
total_iops_sec_max = 2000
total_iops_sec_max_length = 2
group_name = "g"

[[vm.disk]]
name = "vdb"
volume = "v"
offset = "8g"
size = "1g"
interface = "nbd"
format = "raw"

[vm.disk.image]
preallocation = "full"
discard = "unmap"

[vm.disk.queue]
num_queues = 1
"""


def test_the_view_carries_the_block_layers_keys() -> None:
    s = stackfile.loads(BLOCK_LAYER, "b.toml")
    vm = s.vm("a")
    vda, vdb = vm.disks
    assert vm.qemu_version == "5.2"
    assert (vda.format, vda.aio, vdb.format, vdb.aio) == ("qcow2", "native", "raw", "threads")
    assert dict(vda.image) | {"backing": None} == {
        "format": "qcow2",
        "cluster_size": 2 << 20,
        "l2_cache_size": 1 << 20,
        "l2_cache_entry_size": 4096,
        "refcount_cache_size": 8 << 20,
        "lazy_refcounts": True,
        "preallocation": "off",
        "populated": 0.5,
        "discard": "unmap",
        "backing": None,
    }
    assert [dict(b) for b in vda.image["backing"]] == [
        {"format": "qcow2", "populated": 0.25, "cluster_size": 64 << 10},
        {"format": "raw", "populated": 1.0, "cluster_size": 0},
    ]
    # Not set: QEMU's computed defaults are None.
    assert vdb.image["preallocation"] == "full" and vdb.image["l2_cache_size"] is None
    spread = {"wake_spread_ns": 2000}
    q = {"num_queues": 2, "queue_size": 128, "iothreads": 1, "wakeup_ns": 5000} | spread
    assert vda.queue == q == vda.queue_table
    vdb_q = {"num_queues": 1, "queue_size": 0, "iothreads": 0, "wakeup_ns": 5000} | spread
    assert vdb.queue == vdb_q
    assert vda.iotune == {
        "total_iops_sec": 1000,
        "total_iops_sec_max": 2000,
        "total_iops_sec_max_length": 2,
        "group_name": "g",
    }
    assert vdb.iotune is None
    fs = s.volume("v").filesystem
    assert fs is not None and fs.type == "xfs" and fs.params["log_sync_ns"] == 30_000
    # Without the tables: Rust's defaults, and still read-only.
    plain = stackfile.loads(STACK).vm("a").disks[0]
    assert (plain.format, plain.aio, plain.iotune, plain.queue_table) == (
        "raw",
        "threads",
        None,
        None,
    )
    assert stackfile.loads(STACK).volume("v").filesystem is None
    with pytest.raises(TypeError):
        vda.image["cluster_size"] = 1  # type: ignore[index]


@pytest.mark.parametrize("text", [BLOCK_LAYER, STACK], ids=["block layer", "guest filesystem"])
def test_a_stack_round_trips_through_the_view(text: str) -> None:
    """parse -> the view's tables -> render -> parse: the same stack."""
    s = stackfile.loads(text, "dir/stack.toml")
    again = stackfile.loads(stackfile.render(s.doc()), "dir/stack.toml")
    assert again == s
    assert again.doc() == s.doc()


@pytest.mark.parametrize("path", STACKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_stack_round_trips_through_the_view(path: Path) -> None:
    s = stackfile.load(path)
    assert stackfile.loads(stackfile.render(s.doc()), path) == s
