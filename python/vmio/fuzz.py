"""A mutation fuzzer for vmio's inputs: `python -m vmio.fuzz --cases 3000 --seed 1 --jobs 2`.

Each case copies small versions of the built-in studies' files (runtimes shortened to 1 s,
traces cut to their first 300 requests, quick sweeps cut down) into a fresh directory,
mutates one input file (or one command-line value) with seeded, deterministic mutations and
runs the real command line on it in a subprocess with a timeout and a memory limit:

  kind         mutated input                                command
  stack        studies/*/stack.toml, gc-stack.toml          vmio sim --stack S [JOB]
  job          studies/**/*.fio                             vmio sim --stack S JOB
  trace        studies/mcfq/traces/*.spc                    vmio sim --stack S msn.fio ...
  experiment   experiment.toml, the mcfq parts              vmio study FILE --quick --out O
  study        studies/mcfq/study.toml                      vmio study DIR --quick --out O
  cli          a numeric or path option of sim/study/trace  vmio ...
  iozone       the iozone= string of studies/interfaces     vmio sim --stack S iozone.fio
  fio          a `vmio fio` command line (fio's options)    vmio fio --stack S --name=j ...
  compare      a fio JSON, a directory of repetitions, a    vmio compare REAL SIM
               results.csv
  import-libvirt  a domain XML of tests/data/libvirt       vmio import libvirt DOMAIN.xml
  import-qemu  a qemu-system-x86_64 command line            vmio import qemu -- ARGS
  report       a study, advise or compare output directory  vmio report DIR -o report.html
  advise       an advise command line (knobs, values, ...)  vmio advise --stack S --workload J

The last four kinds were appended after the others (weights 2 each): the kind a case index
gets changed with them, so a seed's cases before them (docs/fuzzing.md's seed-31 table) are
not the same cases now.

The stacks mutated include ones with [cpu], [nbd], [vm.cputune], [vm.page_cache],
[vm.disk.image], [vm.disk.filesystem] and [pdc] (`X_STACK`, studies/interfaces, studies/pdc).
`REGRESSIONS` is the corpus of past findings, each kept as a case that must stay a success
or a clean error (`--regressions` runs it; tests/test_fuzz.py runs each).

Mutations: byte flips, value replacements (huge, negative, zero, 2**64, NUL, unicode, very
long strings, /dev/zero, a FIFO, a directory), type changes (`vm = 5`, a value made an
array, a table or a bool), key deletion and duplication, line truncation, file truncation.

Every case is classified: `success` (exit 0), `clean error` (exit 2, the last stderr line is
the only `vmio: error: ...` line, at most 400 characters after the prefix, no traceback), or
anything else (`traceback`, `panic`, `exit N`, `signal N`, `timeout`, `multi-line`,
`too long`). The run prints a summary table by kind and the failing cases; each failing
case's directory (its inputs, `cmd`, `repro.sh`, `stderr.txt`) is saved under `--save`.

Every simulation a case runs (`vmio sim`, `vmio fio`, `vmio study`) is bounded by
`--max-events` (`MAX_EVENTS`) unless the case gives its own bound: a run asked for hours of
simulation ends in the bound's one-line error rather than the fuzzer's timeout.

The fuzzer sets VMIO_STRICT_ERRORS=1: an input error that reaches `vmio.cli.main` as a
ValueError/OverflowError/OSError (not a VmioError) keeps its traceback, so every missing
check shows up as a failure instead of hiding behind the last line of defence.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vmio.cli.common import MAX_ERROR

STUDIES = Path(__file__).resolve().parent / "studies"
KINDS = ("stack", "job", "trace", "experiment", "study", "cli", "iozone", "fio", "compare")
KINDS += ("import-libvirt", "import-qemu", "report", "advise")  # appended: see docs/fuzzing.md
# How often each kind comes up (experiments and studies are slower: whole sweeps).
WEIGHTS = {
    "stack": 6,
    "job": 5,
    "trace": 3,
    "experiment": 3,
    "study": 1,
    "cli": 4,
    "iozone": 3,
    "fio": 4,
    "compare": 3,
    "import-libvirt": 2,
    "import-qemu": 2,
    "report": 2,
    "advise": 2,
}
BOUNDED = ("sim", "fio", "study")
"""The commands that simulate: each case of these runs with `--max-events` (`MAX_EVENTS`)."""
MAX_EVENTS = 50_000_000
"""The fuzzer's bound on a simulation's events. A mutated runtime, size or rate can ask for
a simulation of hours (a legitimate request: fio would run that long too); the bound turns
it into the simulator's own one-line error, which is what the fuzzer checks, instead of a
timeout. About 10-30 s of simulation on this machine, below the 60 s timeout."""
ERROR_PREFIX = "vmio: error: "
SUCCESS, CLEAN = "success", "clean error"

HUGE_INT = "9" * 5000
LONG_TEXT = "x" * 100_000
NASTY = (
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775808",
    "9223372036854775807",
    "4294967296",
    "-1",
    "0",
    "-9223372036854775809",
    HUGE_INT,
    "-" + HUGE_INT,
    "0x" + "f" * 40,
    "1e400",
    "nan",
    "inf",
    "-0",
    "1.5",
    "",
    "\x00",
    "a\x00b",
    "é",
    "\U0001f4be",
    "\u202e",
    "\ufeff",
    LONG_TEXT,
    "/dev/zero",
    "/dev/null",
    "fifo",
    "/",
    ".",
    "..",
    "99999999999999999999g",
    "16e",
    "1p",
    "-5g",
    "0k",
    "true",
    "[1, 2]",
    "{ a = 1 }",
    "5",
    '"5"',
    '"/dev/zero"',
    '"fifo"',
    '"\\u0000"',
    '"' + LONG_TEXT + '"',
    '"' + HUGE_INT + '"',
)


@dataclass
class Case:
    index: int
    kind: str
    base: str
    """The input file mutated (relative to the case directory), or `cli`."""
    argv: list[str]
    mutations: list[str] = field(default_factory=list)
    setup: Callable[[Path], None] | None = None
    """For a regression case: writes its inputs into the case directory."""
    module: str = "vmio"
    """The module run as `python -m MODULE ARGV`."""


@dataclass
class Outcome:
    case: Case
    outcome: str
    returncode: int | None
    stderr: str
    seconds: float
    saved: Path | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in (SUCCESS, CLEAN)


# --- the base inputs ---------------------------------------------------------------------


# A stack with the sections the studies' stacks do not all have: [cpu] with its CFS
# parameters, [nbd] (the NBD path of experiments/nbd-cfs), [vm.cputune] and [vm.page_cache].
X_STACK = """\
[host]
cores = 2

[cpu]
model = "cfs"
kernel_complete = "10us"

[[device]]
name = "disk"
model = "ram"
capacity = "8g"
latency = "25us"
bandwidth = 2000000000

[[volume]]
name = "v"
layout = "single"
devices = ["disk"]

[scheduler]
name = "none"

[nbd]
handoff = "68us"
request = "0us"
read_rate = 730000000
write_rate = 720000000
client_cpu = "15us"
server_cpu = "10us"
server_wake = "15us"
pool_cpu = "30us"

[[vm]]
name = "vm1"
vcpus = 2
memory = "1g"

[vm.cputune]
vcpupin = ["0", "1"]
emulatorpin = "1"

[vm.page_cache]
dirty_ratio = 20
dirty_background_ratio = 10

[[vm.disk]]
name = "vda"
volume = "v"
size = "4g"
interface = "nbd"
cache = "none"
aio = "threads"
"""
X_JOB = """\
[w]
rw=randwrite
bs=4k
direct=1
ioengine=libaio
iodepth=16
size=256m
runtime=1
time_based
"""
# The minimal columns of a study's results.csv that `vmio compare` reads.
X_RESULTS_CSV = """\
layout,rw,direction,bw_bytes,iops,clat_mean_ns,clat_p99_ns
linear,read,read,104857600,25600,39000,120000
raid0,read,read,209715200,51200,19500,60000
"""
# A stack for `vmio serve` (the lockout regression): one file-backed device.
SERVE_STACK = """\
[[device]]
name = "a"
model = "ssd"
path = "a.img"
size = "16m"

[[volume]]
name = "data"
layout = "single"
devices = ["a"]

[[vm]]
name = "vm1"

[[vm.disk]]
name = "disk0"
volume = "data"
size = "8m"
cache = "writeback"
"""


def prepare_base(base: Path) -> None:
    """Small, quick versions of the built-in studies' files in `base`: vc/ (volumes-cache),
    mcfq/, ifc/ (interfaces: iozone job strings, [cpu], [vm.disk.image],
    [vm.disk.filesystem]), pdc/ (cache = "pdc" with a [pdc] table), x/ ([cpu], [nbd],
    [vm.cputune], [vm.page_cache]), cmp/ (`vmio compare` inputs: fio JSON outputs, a
    directory of repetitions, a results.csv) and serve/ (a stack for `vmio serve`)."""
    shutil.copytree(STUDIES / "volumes-cache", base / "vc")
    shutil.copytree(STUDIES / "mcfq", base / "mcfq")
    shutil.copytree(STUDIES / "interfaces", base / "ifc")
    (base / "pdc").mkdir()
    for name in ("stack-single.toml", "varmail.fio", "sqlite.fio"):
        shutil.copy(STUDIES / "pdc" / name, base / "pdc" / name)
    pdc_stack = base / "pdc" / "stack-single.toml"
    text = pdc_stack.read_text(encoding="utf-8")
    assert 'cache = "writeback"' in text
    text = text.replace('cache = "writeback"', 'cache = "pdc"', 1)
    pdc_stack.write_text(text + '\n[pdc]\ngroup = "128m"\nwindow = "1m"\n', encoding="utf-8")
    (base / "x").mkdir()
    (base / "x" / "stack.toml").write_text(X_STACK, encoding="utf-8")
    (base / "x" / "job.fio").write_text(X_JOB, encoding="utf-8")
    (base / "serve").mkdir()
    (base / "serve" / "stack.toml").write_text(SERVE_STACK, encoding="utf-8")
    for fio in base.rglob("*.fio"):
        text = fio.read_text(encoding="utf-8")
        text = re.sub(r"(?m)^runtime=\d+", "runtime=1", text)
        text = re.sub(r"(?m)^size=4g", "size=256m", text)
        text = re.sub(r"(?m)^size=1g", "size=64m", text)
        fio.write_text(text, encoding="utf-8")
    for trace in (base / "mcfq" / "traces").iterdir():
        lines = trace.read_text(encoding="utf-8").splitlines(keepends=True)
        trace.write_text("".join(lines[:300]), encoding="utf-8")
    for stack in (base / "mcfq").glob("*stack.toml"):  # no SSD aging outside the studies
        text = stack.read_text(encoding="utf-8")
        stack.write_text(text.replace('precondition = "aged"', 'precondition = "clean"'))
    exp = base / "vc" / "experiment.toml"
    text = exp.read_text(encoding="utf-8")
    text = text.replace('"job:runtime" = "2", "job:size" = "1g"', '"job:runtime" = "1"')
    text = text.replace(
        'values = { bs = ["32k", "1m", "8m"] }',
        'values = { bs = ["32k"], workload = ["read", "randrw"], layout = ["linear", "raid0"] }',
    )
    exp.write_text(text, encoding="utf-8")
    mcfq = base / "mcfq"
    for part, old, new in (
        ("gc.toml", 'values = { vm2_bs = ["4k", "64k", "512k"] }', 'values = { vm2_bs = ["64k"] }'),
        ("bw-window.toml", '"job:runtime" = "20"', '"job:runtime" = "2"'),
        ("error-rates.toml", '"job:runtime" = "10"', '"job:runtime" = "1"'),
        (
            "error-rates.toml",
            'values = { workload = ["fileserver", "varmail"] }',
            'values = { workload = ["msn"], precondition = ["clean"] }',
        ),
    ):
        text = (mcfq / part).read_text(encoding="utf-8")
        assert old in text, (part, old)
        (mcfq / part).write_text(text.replace(old, new), encoding="utf-8")
    study = mcfq / "study.toml"
    study.write_text(
        study.read_text(encoding="utf-8").replace(
            'parts = ["gc.toml", "bw-window.toml", "error-rates.toml"]',
            'parts = ["error-rates.toml"]',
        ),
        encoding="utf-8",
    )
    _compare_inputs(base)
    _new_command_inputs(base)


def _compare_inputs(base: Path) -> None:
    """cmp/: a real fio JSON output of vmio sim (vc's job, 1 s) as sim.json and real.json,
    the same as two repetitions in cmp/dir/, and a results.csv in cmp/study/."""
    cmp = base / "cmp"
    (cmp / "dir").mkdir(parents=True)
    (cmp / "study").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "vmio", "sim", "--stack", "vc/stack.toml", "vc/job.fio"]
        + ["--output-format=json"],
        cwd=base,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in ("sim.json", "real.json", "dir/a.rep1.json", "dir/a.rep2.json"):
        (cmp / name).write_text(out, encoding="utf-8")
    (cmp / "study" / "results.csv").write_text(X_RESULTS_CSV, encoding="utf-8")


# (kind, file to mutate, command) of every base case; paths relative to the case directory.
BASES: dict[str, list[tuple[str, list[str]]]] = {
    "stack": [
        ("vc/stack.toml", ["sim", "--stack", "vc/stack.toml", "vc/job.fio"]),
        ("mcfq/stack.toml", ["sim", "--stack", "mcfq/stack.toml"]),
        ("mcfq/gc-stack.toml", ["sim", "--stack", "mcfq/gc-stack.toml"]),
    ],
    "job": [
        ("vc/job.fio", ["sim", "--stack", "vc/stack.toml", "vc/job.fio", "--output-format=json"]),
        *(
            (f"mcfq/{j}.fio", ["sim", "--stack", "mcfq/stack.toml", f"mcfq/{j}.fio", "--vm", "vm1"])
            for j in ("fileserver", "varmail", "msn", "exchange", "financial")
        ),
        ("mcfq/gc-rand.fio", ["sim", "--stack", "mcfq/gc-stack.toml", "mcfq/gc-rand.fio"]),
    ],
    "trace": [
        (
            f"mcfq/traces/{t}.spc",
            ["sim", "--stack", "mcfq/stack.toml", f"mcfq/{t}.fio", "--vm", "vm2"],
        )
        for t in ("msn", "exchange", "financial")
    ],
    "experiment": [
        ("vc/experiment.toml", ["study", "vc/experiment.toml", "--quick", "--parallel", "1"]),
        ("mcfq/gc.toml", ["study", "mcfq/gc.toml", "--quick", "--parallel", "1"]),
        ("mcfq/error-rates.toml", ["study", "mcfq/error-rates.toml", "--quick", "--parallel", "1"]),
    ],
    "study": [("mcfq/study.toml", ["study", "mcfq", "--quick", "--parallel", "1"])],
    "iozone": [("ifc/iozone.fio", ["sim", "--stack", "ifc/stack.toml", "ifc/iozone.fio"])],
    "compare": [
        ("cmp/real.json", ["compare", "cmp/real.json", "cmp/sim.json"]),
        ("cmp/sim.json", ["compare", "cmp/real.json", "cmp/sim.json", "--csv", "e.csv"]),
        ("cmp/dir/a.rep1.json", ["compare", "cmp/dir", "cmp/sim.json"]),
        ("cmp/study/results.csv", ["compare", "cmp/study", "cmp/study"]),
    ],
}
# The stacks with [cpu], [nbd], [vm.cputune], [vm.page_cache], [vm.disk.image],
# [vm.disk.filesystem] and [pdc] are mutated as the other stacks.
BASES["stack"] += [
    ("x/stack.toml", ["sim", "--stack", "x/stack.toml", "x/job.fio"]),
    ("ifc/stack.toml", ["sim", "--stack", "ifc/stack.toml", "ifc/iozone.fio"]),
    ("pdc/stack-single.toml", ["sim", "--stack", "pdc/stack-single.toml"]),
]
BASES["job"] += [
    ("x/job.fio", ["sim", "--stack", "x/stack.toml", "x/job.fio"]),
    ("pdc/sqlite.fio", ["sim", "--stack", "pdc/stack-single.toml", "pdc/sqlite.fio"]),
]

# `vmio fio` command lines: fio's own options as --name=value arguments.
FIO_BASES: list[list[str]] = [
    ["fio", "--stack", "vc/stack.toml", "--name=j", "--rw=randread", "--bs=4k", "--size=64m"]
    + ["--runtime=1", "--time_based", "--iodepth=4"],
    ["fio", "--stack", "x/stack.toml", "--name=w", "--rw=randwrite", "--bs=4k", "--size=64m"]
    + ["--runtime=1", "--time_based", "--ioengine=libaio", "--iodepth=16", "--direct=1"],
    ["fio", "--stack", "vc/stack.toml", "vc/job.fio", "--output-format=json"],
    ["fio", "--stack", "ifc/stack.toml", "ifc/iozone.fio", "--output-format=terse"],
]
FIO_OPTIONS = (
    "--rate=1",
    "--rate_iops=1",
    "--numjobs=100000",
    "--iodepth=65536",
    "--bs=0",
    "--bs=16e",
    "--size=16e",
    "--size=0",
    "--runtime=1e9",
    "--runtime=-1",
    "--offset=99999999999999999999",
    "--read_iolog=/dev/zero",
    "--read_iolog=fifo",
    "--filename=fifo",
    "--directory=/dev/zero",
    "--iodepht=32",
    "--rw=nope",
    "--bssplit=4k/50:8k/50:16k/50",
    "--thinktime=99999999999d",
    "--output=vc",
    "--output=/dev/full",
    "--name=" + "j" * 100_000,
    "--" + "x" * 100_000 + "=1",
    "--cpuload=101",
    "--ioengine=cpuio",
    "--loops=0",
    "--nrfiles=100000",
    "--percentile_list=1:2:" + ":".join(["50"] * 1000),
)

# iozone's command line in a job's iozone= option (iozone(1): -s size, -r record, -i test,
# -t threads, -a auto mode, -y/-q min/max record, -n/-g min/max size, -I O_DIRECT, -e fsync).
IOZONE_TOKENS = (
    "-s",
    "-r",
    "-i",
    "-t",
    "-a",
    "-y",
    "-q",
    "-n",
    "-g",
    "-I",
    "-e",
    "-z",
    "-+u",
    "-F",
    "-f",
    "0",
    "99",
    "-1",
    "4k",
    "1p",
    "16e",
    "99999999999999999999g",
    "100000",
    "fifo",
    "/dev/zero",
    "-i 0 -i 0 -i 0",
    "-" + "x" * 10_000,
)

CLI_BASES: list[list[str]] = [
    ["sim", "--stack", "vc/stack.toml", "vc/job.fio", "--seed", "7"],
    ["sim", "--stack", "vc/stack.toml", "vc/job.fio", "--vm", "vm1"],
    ["sim", "--stack", "vc/stack.toml", "vc/job.fio", "--output", "report.txt"],
    ["trace", "synth", "msn", "--requests", "100", "--region", "1g", "--seed", "3"],
    ["study", "vc/experiment.toml", "--quick", "--parallel", "1", "--seed", "2"],
    ["study", "mcfq", "--quick", "--part", "error-rates", "--parallel", "1"],
    ["study", "--jobs-from", "vc", "--quick", "--parallel", "1"],
]


# --- mutations ---------------------------------------------------------------------------

_TOKEN = re.compile(rb'"[^"\n]*"|-?\d[\w.]*|[A-Za-z_/][\w./-]*')
_ASSIGN = re.compile(rb"(?m)^([ \t]*[\w.\"-]+[ \t]*=[ \t]*)(.*)$")
_HEADER = re.compile(rb"(?m)^\[\[?([\w-]+)")


def _pick_nasty(rng: random.Random) -> bytes:
    return rng.choice(NASTY).encode("utf-8", "surrogatepass")


def m_byte_flip(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    if not data:
        return b"\xff", "byte flip of an empty file"
    b = bytearray(data)
    i = rng.randrange(len(b))
    b[i] ^= 1 << rng.randrange(8)
    return bytes(b), f"byte flip at {i}"


def m_value(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """Replace the value of a `key = value` / `key=value` line."""
    ms = list(_ASSIGN.finditer(data))
    if not ms:
        return m_token(rng, data)
    m = rng.choice(ms)
    new = _pick_nasty(rng)
    line = data.count(b"\n", 0, m.start()) + 1
    return data[: m.start(2)] + new + data[m.end(2) :], f"value of line {line} := {new[:40]!r}"


def m_token(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    ms = list(_TOKEN.finditer(data))
    if not ms:
        return m_byte_flip(rng, data)
    m = rng.choice(ms)
    new = _pick_nasty(rng)
    return data[: m.start()] + new + data[m.end() :], f"token {m.group()[:30]!r} := {new[:40]!r}"


def m_type_change(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """`vm = 5`: a table (or array of tables) replaced by a value; or a value wrapped."""
    headers = sorted({m.group(1) for m in _HEADER.finditer(data)})
    if headers and rng.random() < 0.6:
        name = rng.choice(headers)
        value = rng.choice([b"5", b'"x"', b"[1, 2]", b"true", b"{}", b"[]", HUGE_INT.encode()])
        out, skipping = [], False
        for line in data.splitlines(keepends=True):
            m = _HEADER.match(line)
            if m:
                skipping = m.group(1) == name
            if not skipping:
                out.append(line)
        return (
            name + b" = " + value + b"\n" + b"".join(out),
            f"{name.decode()} := {value[:20]!r}",
        )
    ms = list(_ASSIGN.finditer(data))
    if not ms:
        return m_byte_flip(rng, data)
    m = rng.choice(ms)
    wrap = rng.choice([b"[%s]", b"{ x = %s }", b"true", b"[[%s]]", b"[]", b"{}"])
    new = wrap % m.group(2) if b"%s" in wrap else wrap
    line = data.count(b"\n", 0, m.start()) + 1
    return data[: m.start(2)] + new + data[m.end(2) :], f"line {line} value wrapped {wrap!r}"


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [b""]


def m_delete_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    del lines[i]
    return b"".join(lines), f"line {i + 1} deleted"


def m_duplicate_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    j = rng.randrange(len(lines) + 1)
    lines.insert(j, lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n")
    return b"".join(lines), f"line {i + 1} duplicated at {j + 1}"


def m_truncate_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    cut = rng.randrange(len(lines[i]) + 1)
    lines[i] = lines[i][:cut] + b"\n"
    return b"".join(lines), f"line {i + 1} cut at {cut}"


def m_truncate_file(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    cut = rng.randrange(len(data) + 1)
    return data[:cut], f"file cut at byte {cut}"


def m_insert_line(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    lines = _lines(data)
    j = rng.randrange(len(lines) + 1)
    new = rng.choice(
        [
            b"[global]",
            b"[[vm]]",
            b"[[device]]",
            b"[scheduler]",
            b"[[axis]]",
            b"[quick]",
            b"numjobs=100000",
            b"runtime=0",
            b"time_based",
            b"iodepth=65536",
            b"read_iolog=/dev/zero",
            b"read_iolog=fifo",
            b'workload = "/dev/zero"',
            b'workload = "fifo"',
            b'capacity = "16e"',
            b"seed = " + HUGE_INT.encode(),
            b"\x00\x00\x00",
            b"\xff\xfe",
            b"=" * 1000,
            b"a" * 1_000_000,
            b"include " + b"x" * 10,
        ]
    )
    lines.insert(j, new + b"\n")
    return b"".join(lines), f"inserted at line {j + 1}: {new[:40]!r}"


MUTATIONS: list[Callable[[random.Random, bytes], tuple[bytes, str]]] = [
    m_byte_flip,
    m_value,
    m_value,
    m_value,
    m_token,
    m_type_change,
    m_delete_line,
    m_duplicate_line,
    m_truncate_line,
    m_truncate_file,
    m_insert_line,
]

CLI_NASTY = (
    "-1",
    "0",
    "1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775808",
    HUGE_INT,
    "1" + "0" * 30,
    "0x" + "f" * 17,
    "1e9",
    "nan",
    "",
    "é",
    "\u202e",
    "\x01\x1b[2J",
    LONG_TEXT,
    "/dev/zero",
    "fifo",
    "/",
    "vc",
    "99999999999999999999g",
    "1p",
    "2p",
    "4095",
    "-5g",
)


def mutate_fio_cli(rng: random.Random, argv: list[str]) -> tuple[list[str], str]:
    """A `vmio fio` command line: one `--opt=value` gets a nasty value, or a fio option
    (real, misspelled or absurd) is added, or an argument is deleted."""
    argv = list(argv)
    valued = [i for i, a in enumerate(argv) if a.startswith("--") and "=" in a]
    r = rng.random()
    if valued and r < 0.45:
        i = rng.choice(valued)
        name = argv[i].split("=", 1)[0]
        new = rng.choice(CLI_NASTY)
        old, argv[i] = argv[i], f"{name}={new}"
        return argv, f"{old[:20]!r} := {argv[i][:40]!r}"
    if r < 0.85:
        new = rng.choice(FIO_OPTIONS)
        j = rng.randrange(1, len(argv) + 1)
        argv.insert(j, new)
        return argv, f"inserted {new[:40]!r} at {j}"
    i = rng.randrange(1, len(argv))
    old = argv.pop(i)
    return argv, f"argument {i} {old[:20]!r} deleted"


def m_iozone(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """The `iozone=` line of a job: a token replaced by, or a token inserted from,
    IOZONE_TOKENS."""
    m = re.search(rb"(?m)^iozone=(.*)$", data)
    if m is None:
        return m_value(rng, data)
    tokens = m.group(1).split()
    new = rng.choice(IOZONE_TOKENS).encode()
    if tokens and rng.random() < 0.5:
        i = rng.randrange(len(tokens))
        what = f"iozone token {tokens[i][:20]!r} := {new[:40]!r}"
        tokens[i] = new
    else:
        i = rng.randrange(len(tokens) + 1)
        tokens.insert(i, new)
        what = f"iozone token {new[:40]!r} inserted at {i}"
    return data[: m.start(1)] + b" ".join(tokens) + data[m.end(1) :], what


def m_json_nest(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A JSON value replaced by a deep nest of arrays or objects (balanced or not)."""
    ms = list(re.finditer(rb"-?\d[\d.eE+-]*|\"[^\"\n]*\"", data))
    if not ms:
        return m_byte_flip(rng, data)
    m = rng.choice(ms)
    depth = rng.choice([65, 1000, 100_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    nest = opener * depth + b"1" + closer * (depth if rng.random() < 0.8 else depth // 2)
    what = f"value {m.group()[:20]!r} := nest of {depth} {opener.decode()}"
    return data[: m.start()] + nest + data[m.end() :], what


def mutate_cli(rng: random.Random, argv: list[str]) -> tuple[list[str], str]:
    """Replace one argument (an option's value or a positional) with a nasty value."""
    argv = list(argv)
    i = rng.randrange(len(argv))
    if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
        i += 1
    new = rng.choice(CLI_NASTY)
    old = argv[i]
    argv[i] = new
    return argv, f"argument {i} {old[:20]!r} := {new[:40]!r}"


def make_case(index: int, seed: int) -> Case:
    rng = random.Random(f"vmio-fuzz:{seed}:{index}")
    kinds = [k for k in KINDS for _ in range(WEIGHTS[k])]
    kind = kinds[index % len(kinds)]
    if kind == "cli":
        argv, what = mutate_cli(rng, rng.choice(CLI_BASES))
        return Case(index, kind, "cli", argv, [what])
    if kind == "fio":
        argv, what = mutate_fio_cli(rng, rng.choice(FIO_BASES))
        return Case(index, kind, "cli", argv, [what])
    if kind in KINDS[9:]:
        return make_new_case(index, kind, rng)
    base, argv = rng.choice(BASES[kind])
    return Case(index, kind, base, list(argv))


def apply_mutations(case: Case, casedir: Path) -> None:
    """Mutate the case's file in `casedir` (deterministic in the case's seed)."""
    rng = random.Random(f"vmio-fuzz-mutate:{case.index}:{case.base}:{case.argv}")
    if case.base == "cli" or case.kind == "regression":
        return
    if case.kind == "report":
        case.mutations += m_report_dir(rng, casedir / case.base)
        return
    path = casedir / case.base
    data = path.read_bytes()
    n = 1 + (rng.random() < 0.3) + (rng.random() < 0.1)
    special = {"iozone": m_iozone, "compare": m_json_nest, "import-libvirt": m_xml}.get(case.kind)
    for _ in range(n):
        mutation = special if special and rng.random() < 0.6 else rng.choice(MUTATIONS)
        if case.base.endswith(".csv") and mutation is m_json_nest:
            mutation = m_value
        data, what = mutation(rng, data)
        case.mutations.append(what)
    path.write_bytes(data)


# --- the new commands: vmio import, vmio report, vmio advise ----------------------------
#
# The kinds appended after the nine above (the 10,000-case seed-31 table of docs/fuzzing.md
# was made before them: appending kinds changes which kind each case index gets).

TESTS_DATA_PLACES = (
    Path(__file__).resolve().parents[2] / "tests" / "data",  # an editable install's checkout
    Path("tests") / "data",  # the checkout the fuzzer runs from (an installed wheel)
)
"""Where tests/data is: beside the package in a checkout, else under the working directory."""
# The libvirt domains of tests/data/libvirt (tests/test_import.py's corpus) that import.
LIBVIRT_BASES = (
    "virtio-blk.xml",
    "virtio-scsi.xml",
    "ide.xml",
    "sata.xml",
    "iotune-full.xml",
    "cputune-full.xml",
    "memory-full.xml",
    "disk-extras.xml",
    "blkiotune.xml",
    "sources.xml",
    "xen-hvm.xml",
)
# qemu-system-x86_64 command lines (`vmio import qemu -- ARGS`): -drive, -blockdev with a
# throttle group and a JSON node, -device, -smp, -m, -machine (qemu-options.hx).
QEMU_BASES: list[list[str]] = [
    ["-m", "4G", "-smp", "4", "-drive", "file=vm1.qcow2,if=virtio,cache=none,aio=native"],
    ["-name", "guest=web1", "-machine", "pc-q35-7.2,accel=kvm", "-m", "4096", "-smp", "4"]
    + ["-object", "iothread,id=io1", "-object", "throttle-group,id=g,x-iops-total=5000"]
    + ["-blockdev", "driver=file,filename=/img/web1.qcow2,node-name=f0,cache.direct=on"]
    + ["-blockdev", "driver=qcow2,file=f0,node-name=q0"]
    + ["-blockdev", "driver=throttle,throttle-group=g,file=q0,node-name=t0"]
    + ["-device", "virtio-blk-pci,drive=t0,iothread=io1,num-queues=4,queue-size=256"],
    ["-M", "pc-q35-8.2", "-m", "1G", "-device", "virtio-scsi-pci,id=scsi0,num_queues=2"]
    + ["-blockdev", '{"driver":"file","filename":"/srv/a.img","node-name":"f0","aio":"io_uring"}']
    + ["-blockdev", '{"driver":"raw","file":"f0","node-name":"r0"}']
    + ["-device", "scsi-hd,bus=scsi0.0,drive=r0,write-cache=on"]
    + ["-drive", "file=/iso/a.iso,if=ide,index=2,media=cdrom"],
]
QEMU_TOKENS = (
    "-drive",
    "-blockdev",
    "-device",
    "-object",
    "-m",
    "-smp",
    "-M",
    "-machine",
    "-readconfig",
    "-drive",
    "file=fifo,if=virtio",
    "file=/dev/zero,if=virtio,cache=bogus",
    "file=a,,b.img,if=virtio,aio=native,cache=writeback",
    "file=a.img,if=virtio,iops=-1,bps=" + HUGE_INT,
    "file=a.img,if=virtio,throttling.iops-total=0x10",
    "file=a.img,if=scsi,index=99999999999999999999",
    "file=a.img,if=none,id=d0",
    "virtio-blk-pci,drive=nowhere",
    "virtio-blk-pci,drive=d0,num-queues=0,queue-size=3",
    "virtio-blk-pci,drive=d0,queue-size=" + HUGE_INT,
    "scsi-hd,bus=nobus.0,drive=d0",
    "ide-hd,drive=d0,drive=d0",
    "driver=raw,file=nonode,node-name=x",
    "driver=qcow2,file=q0,node-name=q0",
    "driver=throttle,throttle-group=nogroup,file=q0,node-name=t1",
    "{" * 10_000 + "}" * 10_000,
    '{"driver":"file","filename":' + "[" * 1000 + "]" * 1000 + "}",
    '{"driver":"file","filename":"a","node-name":"f9","cache":{"direct":"yes"}}',
    '{"driver":"file","filename":"a","node-name":"f9","aio":' + HUGE_INT + "}",
    '{"driver":"file","filename":"a","node-name":"f0","aio":5}',
    "iothread,id=io1",
    "throttle-group,id=g,x-iops-total=nan",
    "memory-backend-ram,id=m,size=16e",
    "4,sockets=0,cores=0,threads=0",
    "cpus=99999999999999999999",
    "0",
    "16E",
    "99999999999999999999G",
    "1T,slots=4,maxmem=-1",
    "pc-q35-99999999999999999999.1",
    "virt-8.1",
    "",
    ",",
    ",,,",
    "=",
    "--",
    LONG_TEXT,
    "@args",
)
# `vmio advise` command lines on vc/'s stack and job (4 configurations, 1 s each).
ADVISE_BASES: list[list[str]] = [
    ["advise", "--stack", "vc/stack.toml", "--workload", "vc/job.fio", "--vary", "cache"]
    + ["--budget", "4", "--parallel", "1", "--measure", "s0"],
    ["advise", "--stack", "vc/stack.toml", "--workload", "vc/job.fio", "--values"]
    + ["cache=none,writeback", "--values", "layout=linear,raid0", "--goal", "p99"]
    + ["--parallel", "1", "--out", "adv", "--top", "3"],
    ["advise", "--stack", "x/stack.toml", "--workload", "x/job.fio", "--vary", "queue_depth"]
    + ["--search", "random", "--budget", "3", "--seed", "5", "--parallel", "1"],
]
ADVISE_OPTIONS = (
    ("--vary", "nope"),
    ("--vary", "cache,cache"),
    ("--vary", ""),
    ("--vary", ",,,"),
    ("--vary", "layout,cache,interface,scheduler,format,aio,iothread,bs,queue_depth"),
    ("--values", "cache=bogus"),
    ("--values", "cache="),
    ("--values", "=none"),
    ("--values", "cache"),
    ("--values", "queue_depth=0"),
    ("--values", "queue_depth=-1,99999999999999999999"),
    ("--values", "queue_depth=" + HUGE_INT),
    ("--values", "bs=16e"),
    ("--values", "bs=0,1p"),
    ("--values", "read_ahead=nan"),
    ("--values", "read_ahead=" + HUGE_INT),
    ("--values", "host_read_ahead=\u00b2"),
    ("--values", "qemu_version=99.9"),
    ("--values", "cache=none,none,none"),
    ("--values", "interface=nvme"),
    ("--values", "iothread=maybe"),
    ("--values", "queue_depth=" + ",".join(str(i) for i in range(1, 2000))),
    ("--budget", "0"),
    ("--budget", "-1"),
    ("--budget", "10001"),
    ("--budget", HUGE_INT),
    ("--budget", "1.5"),
    ("--search", "exhaustive"),
    ("--search", "tpe"),
    ("--seed", HUGE_INT),
    ("--seed", "-1"),
    ("--top", "0"),
    ("--top", "-5"),
    ("--top", HUGE_INT),
    ("--parallel", "0"),
    ("--parallel", "100000"),
    ("--measure", "nope"),
    ("--measure", "layout"),
    ("--vm", "nope"),
    ("--goal", "speed"),
    ("--out", "vc"),
    ("--out", "/dev/zero"),
    ("--out", "fifo"),
    ("--out", "vc/stack.toml"),
    ("--verify", "1"),
    ("--verify", "0"),
    ("--verify", "99"),
    ("--target-size", "16e"),
    ("--stack", "vc/job.fio"),
    ("--stack", "/dev/zero"),
    ("--stack", "fifo"),
    ("--workload", "vc/stack.toml"),
    ("--workload", "fifo"),
    ("--workload", "/dev/zero"),
)
# The output directories `vmio report` reads: a quick study (results.csv, points.csv,
# figure.png, json/), an advise run (advise.json, results.csv, command.txt) and a compare
# --csv (compare.csv).
REPORT_BASES = ("rep/study", "rep/advise", "rep/compare")
# A PNG header claiming 100,000 x 100,000 pixels (PNG spec, IHDR), and garbage after it.
_PNG_HUGE = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01\x86\xa0\x00\x01\x86\xa0\x08\x06\x00\x00\x00"
    + b"\x00" * 4
    + b"\xff" * 100
)


def _new_command_inputs(base: Path) -> None:
    """lv/: the libvirt domains of tests/data/libvirt; rep/: the output directories of a quick
    study of vc, an advise run and a compare (`vmio report`'s inputs)."""
    places = [d / "libvirt" for d in TESTS_DATA_PLACES]
    corpus = next((p.resolve() for p in places if p.is_dir()), None)
    if corpus is None:
        raise SystemExit(
            f"vmio.fuzz: the import kinds need tests/data/libvirt (looked in {places[0]} and "
            f"{places[1].resolve()}): run from a checkout of vmio"
        )
    (base / "lv").mkdir()
    for name in LIBVIRT_BASES:
        shutil.copy(corpus / name, base / "lv" / name)
    (base / "rep").mkdir()

    def vmio(*argv: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "vmio", *argv],
            cwd=base,
            capture_output=True,
            check=True,
        )

    vmio("study", "vc/experiment.toml", "--quick", "--parallel", "1", "--out", "rep/study")
    vmio(*ADVISE_BASES[0][:-4], "--parallel", "1", "--out", "rep/advise", "--quiet")
    (base / "rep" / "compare").mkdir()
    vmio("compare", "cmp/real.json", "cmp/sim.json", "--csv", "rep/compare/compare.csv")


def m_xml(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A domain XML attacked where an XML reader breaks: entities (the billion laughs, an
    external entity on /dev/zero), deep nesting, a huge attribute, wrong types and units in
    <iotune>, a duplicated element, a required attribute removed."""
    text = data.decode("utf-8", "replace")
    r = rng.randrange(8)
    if r == 0:
        ents = (
            '<!ENTITY a "'
            + "x" * 100
            + '">'
            + "".join(
                f'<!ENTITY {c} "&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};&{p};">'
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
        )
        ext = rng.choice(
            [ents, '<!ENTITY a SYSTEM "file:///dev/zero">', '<!ENTITY a SYSTEM "fifo">']
        )
        text = re.sub(
            r"^(<\?xml[^>]*\?>\s*)?",
            lambda m: (m.group(0) or "") + (f"<!DOCTYPE domain [{ext}]>\n"),
            text,
            count=1,
        )
        name = "i" if "ENTITY i" in ext else "a"
        text = text.replace("</name>", f"&{name};</name>", 1)
        return text.encode(), f"DOCTYPE with entities, &{name}; in <name>"
    if r == 1:
        depth = rng.choice([65, 1000, 100_000])
        nest = "<x>" * depth + "</x>" * (depth if rng.random() < 0.8 else depth // 2)
        return text.replace("</devices>", nest + "</devices>", 1).encode(), f"nest of {depth}"
    if r == 2:
        ms = list(re.finditer(r"(\w+)='([^']*)'", text))
        if not ms:
            return m_byte_flip(rng, data)
        m = rng.choice(ms)
        new = rng.choice([LONG_TEXT * 10, HUGE_INT, "\x01", "&#0;", "&#x110000;", ""])
        new = new.replace("'", "")
        return (
            (text[: m.start(2)] + new + text[m.end(2) :]).encode(),
            f"attribute {m.group(1)} := {new[:20]!r} ({len(new)} chars)",
        )
    if r == 3:
        tag = rng.choice(
            [
                "total_iops_sec",
                "read_bytes_sec",
                "write_iops_sec_max",
                "total_bytes_sec_max_length",
                "size_iops_sec",
                "group_name",
                "weight",
                "memory",
                "vcpu",
                "shares",
                "period",
            ]
        )
        value = rng.choice(
            ["-1", "1.5", "1e3", "0x10", "10 MiB", HUGE_INT, "nan", "", "18446744073709551616"]
        )
        unit = rng.choice(["", " unit='KiB'", " unit='furlongs'", " unit=''", " unit='EiB'"])
        el = f"<{tag}{unit}>{value}</{tag}>"
        where = rng.choice(["<iotune>", "<blkiotune>", "<cputune>", "<domain type='kvm'>"])
        if where not in text:
            text = text.replace("</disk>", f"<iotune>{el}</iotune></disk>", 1)
        else:
            text = text.replace(where, where + el, 1)
        return text.encode(), f"{el[:60]} in {where}"
    if r == 4:
        ms = list(
            re.finditer(
                r"(?s)<(disk|target|driver|source|vcpu|memory|iotune|os)\b.*?"
                r"(?:/>|</\1>)",
                text,
            )
        )
        if not ms:
            return m_byte_flip(rng, data)
        m = rng.choice(ms)
        return (text[: m.end()] + m.group() + text[m.end() :]).encode(), f"<{m.group(1)}> twice"
    if r == 5:
        ms = list(re.finditer(r" (dev|bus|type|name|file|cache|io|unit|cpuset|vcpu)='[^']*'", text))
        if not ms:
            return m_byte_flip(rng, data)
        m = rng.choice(ms)
        return (text[: m.start()] + text[m.end() :]).encode(), f"attribute {m.group(1)} removed"
    if r == 6:
        ms = list(re.finditer(r">([^<>\s]+)<", text))
        if not ms:
            return m_byte_flip(rng, data)
        m = rng.choice(ms)
        new = _pick_nasty(rng).decode("utf-8", "replace").replace("<", "").replace("&", "")
        return (text[: m.start(1)] + new + text[m.end(1) :]).encode(), (
            f"text {m.group(1)[:20]!r} := {new[:40]!r}"
        )
    return rng.choice(MUTATIONS)(rng, data)


def mutate_qemu_cli(rng: random.Random, argv: list[str]) -> tuple[list[str], str]:
    """A qemu command line: an argument replaced by, or a pair inserted from, QEMU_TOKENS;
    an argument deleted or duplicated; or one `key=value` of an option given a nasty value."""
    argv = list(argv)
    r = rng.random()
    if r < 0.3:
        i = rng.randrange(len(argv))
        new = rng.choice(QEMU_TOKENS)
        old, argv[i] = argv[i], new
        return argv, f"argument {i} {old[:20]!r} := {new[:40]!r}"
    if r < 0.6:
        opt = rng.choice(["-drive", "-blockdev", "-device", "-object", "-m", "-smp", "-machine"])
        new = rng.choice(QEMU_TOKENS)
        j = rng.randrange(len(argv) + 1)
        argv[j:j] = [opt, new]
        return argv, f"inserted {opt} {new[:40]!r} at {j}"
    if r < 0.75:
        kv = [i for i, a in enumerate(argv) if "=" in a and not a.startswith("{")]
        if kv:
            i = rng.choice(kv)
            parts = argv[i].split(",")
            k = rng.randrange(len(parts))
            key = parts[k].split("=", 1)[0]
            new = rng.choice(CLI_NASTY)
            parts[k] = f"{key}={new}"
            old, argv[i] = argv[i], ",".join(parts)
            return argv, f"{old[:20]!r}: {key} := {new[:40]!r}"
    if r < 0.9:
        i = rng.randrange(len(argv))
        old = argv.pop(i)
        return argv, f"argument {i} {old[:20]!r} deleted"
    i = rng.randrange(len(argv))
    argv.insert(i, argv[i])
    return argv, f"argument {i} {argv[i][:20]!r} duplicated"


def mutate_advise_cli(rng: random.Random, argv: list[str]) -> tuple[list[str], str]:
    """An advise command line: a bad knob, value, budget or option added (or replacing the
    base's own), or one argument replaced by a nasty value (mutate_cli)."""
    if rng.random() < 0.3:
        return mutate_cli(rng, argv)
    argv = list(argv)
    opt, value = rng.choice(ADVISE_OPTIONS)
    if opt in argv and opt != "--values" and rng.random() < 0.7:
        i = argv.index(opt)
        old, argv[i + 1] = argv[i + 1], value
        return argv, f"{opt} {old[:20]!r} := {value[:40]!r}"
    argv += [opt, value]
    return argv, f"added {opt} {value[:40]!r}"


def m_report_dir(rng: random.Random, d: Path) -> list[str]:
    """One file of output directory `d` mutated (its contents as the other kinds', a PNG
    header made huge or cut), replaced by a link to /dev/zero, a FIFO, the directory itself or
    nowhere, made a directory, or made huge (a sparse 8 GiB file); or a new file added."""
    files = sorted(p for p in d.rglob("*") if p.is_file())
    path = rng.choice(files)
    rel = path.relative_to(d).as_posix()
    r = rng.random()
    if r < 0.6:
        data = path.read_bytes()
        if path.suffix == ".png":
            if rng.random() < 0.5:
                path.write_bytes(_PNG_HUGE)
                return [f"{rel}: a PNG of 100,000 x 100,000 pixels"]
            cut = rng.randrange(len(data) + 1)
            path.write_bytes(data[:cut])
            return [f"{rel}: cut at byte {cut}"]
        mutation = (
            m_json_nest if path.suffix == ".json" and rng.random() < 0.4 else rng.choice(MUTATIONS)
        )
        data, what = mutation(rng, data)
        path.write_bytes(data)
        return [f"{rel}: {what}"]
    path.unlink()
    if r < 0.7:
        target = rng.choice(["/dev/zero", "/nonexistent", ".", "/dev/stdin"])
        path.symlink_to(target)
        return [f"{rel} -> {target}"]
    if r < 0.78:
        os.mkfifo(path)
        return [f"{rel}: a FIFO"]
    if r < 0.85:
        path.mkdir()
        return [f"{rel}: a directory"]
    with path.open("wb") as f:
        f.truncate(8 << 30)
    return [f"{rel}: a sparse 8 GiB file"]


def make_new_case(index: int, kind: str, rng: random.Random) -> Case:
    """A case of one of the kinds for vmio import, report and advise."""
    if kind == "import-libvirt":
        name = rng.choice(LIBVIRT_BASES)
        return Case(index, kind, f"lv/{name}", ["import", "libvirt", f"lv/{name}"])
    if kind == "import-qemu":
        argv, what = mutate_qemu_cli(rng, rng.choice(QEMU_BASES))
        return Case(index, kind, "cli", ["import", "qemu", "--", *argv], [what])
    if kind == "report":
        d = rng.choice(REPORT_BASES)
        return Case(index, kind, d, ["report", d, "-o", "report.html"])
    argv, what = mutate_advise_cli(rng, rng.choice(ADVISE_BASES))
    return Case(index, kind, "cli", argv, [what])


# --- the regression corpus --------------------------------------------------------------


@dataclass(frozen=True)
class Regression:
    """A failure the fuzzer found, kept as a case that must stay a success or a clean
    error."""

    name: str
    finding: str
    argv: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    module: str = "vmio"


def _write(rel: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / rel).write_text(text, encoding="utf-8")


def _edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        text = (d / rel).read_text(encoding="utf-8")
        assert old in text, (rel, old)
        (d / rel).write_text(text.replace(old, new, 1), encoding="utf-8")

    return apply


def _link(rel: str, target: str) -> Callable[[Path], None]:
    return lambda d: (d / rel).symlink_to(target)


# Nine more axes of ten values each on vc's experiment (10**9 points x its own).
_BIG_GRID = "".join(
    f'\n[[axis]]\nname = "x{k}"\ntarget = "job:s0.{opt}"\nvalues = [{vals}]\n'
    for k, (opt, vals) in enumerate(
        [
            ("iodepth", ", ".join(f'"{v}"' for v in range(1, 11))),
            ("numjobs", ", ".join(f'"{v}"' for v in range(1, 11))),
            ("rwmixread", ", ".join(f'"{v}"' for v in range(10, 101, 10))),
            ("thinktime", ", ".join(f'"{v}"' for v in range(10))),
            ("thinktime_blocks", ", ".join(f'"{v}"' for v in range(1, 11))),
            ("rate_iops", ", ".join(f'"{v}"' for v in range(1000, 10001, 1000))),
            ("size", ", ".join(f'"{v}m"' for v in range(1, 11))),
            ("offset", ", ".join(f'"{v}m"' for v in range(10))),
            ("startdelay", ", ".join(f'"{v}"' for v in range(10))),
        ]
    )
)

REGRESSIONS: tuple[Regression, ...] = (
    Regression(
        "D1-fio-rate",
        "D1: a counter per second of simulated time: --rate=1 allocated 4 GB and aborted",
        ("fio", "--stack", "vc/stack.toml", "--name=j", "--rw=write", "--bs=4k", "--rate=1"),
    ),
    Regression(
        "D1-job-rate",
        "D1: a three-line job with rate=1 and no size",
        ("sim", "--stack", "vc/stack.toml", "r.fio"),
        _write("r.fio", "[j]\nrw=write\nrate=1\n"),
    ),
    Regression(
        "D1-ram-latency",
        'D1: a RAM device with latency = "1000d"',
        ("sim", "--stack", "x/stack.toml", "x/job.fio"),
        _edit("x/stack.toml", 'latency = "25us"', 'latency = "1000d"'),
    ),
    Regression(
        "D2-deep-json",
        "D2: vmio compare on '[' * 100000 + ']' * 100000 ended in a RecursionError",
        ("compare", "deep.json", "cmp/sim.json"),
        _write("deep.json", "[" * 100_000 + "]" * 100_000),
    ),
    Regression(
        "D2-deep-unbalanced",
        "D2: the same, unbalanced",
        ("compare", "cmp/real.json", "deep.json"),
        _write("deep.json", '{"jobs": ' + "[" * 100_000 + "}"),
    ),
    Regression(
        "F31-huge-integer",
        "fuzz seed 31 #2399: vmio compare on an integer of 5000 digits ended in a ValueError "
        "(Python's int conversion limit)",
        ("compare", "big.json", "cmp/sim.json"),
        _write("big.json", '{"jobs": [{"read": {"bw_bytes": -' + "9" * 5000 + "}}]}"),
    ),
    Regression(
        "D3-dev-zero",
        "D3: vmio compare read a link to /dev/zero until MemoryError",
        ("compare", "zero.json", "cmp/sim.json"),
        _link("zero.json", "/dev/zero"),
    ),
    Regression(
        "D4-fifo",
        "D4: vmio compare blocked forever on a FIFO",
        ("compare", "cmp/real.json", "fifo"),
    ),
    Regression(
        "D5-report-columns-list",
        "D5: [report] columns = [\"bs\"] gave TypeError: unhashable type: 'list'",
        ("study", "vc/experiment.toml", "--quick", "--parallel", "1"),
        _edit("vc/experiment.toml", 'columns = "bs"', 'columns = ["bs"]'),
    ),
    Regression(
        "D6-grid",
        "D6: no bound on a study's grid: 9 extra axes of 10 values ran out of memory",
        ("study", "vc/experiment.toml", "--quick", "--parallel", "1"),
        lambda d: (d / "vc/experiment.toml").open("a", encoding="utf-8").write(_BIG_GRID),
    ),
    Regression(
        "empty-value",
        "a stack cut after `name = ` gave an error line with no message",
        ("sim", "--stack", "t.toml", "vc/job.fio"),
        _write("t.toml", "[[device]]\nname = "),
    ),
    Regression(
        "F31-long-runtime",
        "fuzz seed 31: a run asked for hundreds of millions of I/Os (--runtime=4095) had no "
        "bound and timed out; --max-events ends it with one line",
        (
            "fio",
            "--stack",
            "vc/stack.toml",
            "--name=j",
            "--rw=randread",
            "--bs=4k",
            "--runtime=4095",
            "--time_based",
            "--max-events=100000",
        ),
    ),
    Regression(
        "F31-runtime-2-32",
        "fuzz seed 31: runtime=4294967296 (49,710 days) ran until the fuzzer's timeout; past "
        "the default bound on simulated time it is refused as the job starts",
        ("sim", "--stack", "vc/stack.toml", "r.fio"),
        _write("r.fio", "[j]\nrw=randread\nbs=4k\nruntime=4294967296\ntime_based\n"),
    ),
    Regression(
        "F31-rate-past-bound",
        "fuzz seed 31: --rate=1 drove simulated time towards 2^64 ns; the rate's next I/O "
        "past --max-sim-time is refused naming the rate",
        (
            "fio",
            "--stack",
            "vc/stack.toml",
            "--name=j",
            "--rw=write",
            "--bs=4k",
            "--rate=1",
            "--max-sim-time=1h",
        ),
    ),
    Regression(
        "F31-bad-bounds",
        "the bounds' own values: a huge --max-sim-time is one error line",
        ("sim", "--stack", "vc/stack.toml", "vc/job.fio", "--max-sim-time", "1e400"),
    ),
    Regression(
        "F28-blockdev-aio-number",
        'fuzz28 probe: vmio import qemu on a JSON -blockdev with "aio": 5 ended in a TypeError '
        "('int' object is not subscriptable) while naming the bad value",
        (
            "import",
            "qemu",
            "--",
            "-blockdev",
            '{"driver":"file","filename":"a.img","node-name":"f0","aio":5}',
            "-blockdev",
            '{"driver":"raw","file":"f0","node-name":"r0"}',
            "-device",
            "virtio-blk-pci,drive=r0",
        ),
    ),
    Regression(
        "F28-advise-read-ahead-digits",
        "fuzz28 probe: vmio advise --values read_ahead=<5000 digits> ended in a ValueError "
        "(Python's int conversion limit)",
        ("advise", "--stack", "vc/stack.toml", "--workload", "vc/job.fio")
        + ("--values", "read_ahead=" + HUGE_INT),
    ),
    Regression(
        "F28-advise-read-ahead-superscript",
        "fuzz28 probe: vmio advise --values host_read_ahead=\u00b2 passed str.isdigit and ended "
        "in a ValueError from int()",
        ("advise", "--stack", "vc/stack.toml", "--workload", "vc/job.fio")
        + ("--values", "host_read_ahead=\u00b2"),
    ),
    Regression(
        "serve-lockout",
        "vmio serve: 255 idle handshaken connections locked every new client out",
        ("lockout", "serve/stack.toml"),
        module="vmio.nbdprobe",
    ),
)


def regression_cases() -> list[Case]:
    """The corpus as cases (indices -1, -2, ...; kind `regression`)."""
    return [
        Case(-1 - i, "regression", r.name, list(r.argv), [r.finding], r.setup, r.module)
        for i, r in enumerate(REGRESSIONS)
    ]


# --- running and classifying -------------------------------------------------------------


def classify(returncode: int | None, stderr: str, timed_out: bool) -> str:
    """success, clean error, or what else happened."""
    if timed_out:
        return "timeout"
    assert returncode is not None
    if "panicked at" in stderr or "PanicException" in stderr:
        return "panic"
    if "Traceback (most recent call last)" in stderr:
        return "traceback"
    if returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    if returncode == 0:
        return SUCCESS
    if returncode != 2:
        return f"exit {returncode}"
    lines = stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith(ERROR_PREFIX)]
    if not errors:
        return "no error line"
    if len(errors) > 1 or lines[-1] != errors[0]:
        return "multi-line"
    if len(errors[0]) - len(ERROR_PREFIX) > MAX_ERROR:
        return "too long"
    return CLEAN


def _limits(mem_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _not_saved(d: str, names: list[str]) -> set[str]:
    """What a failing case's saved copy leaves out: out/, the FIFOs, files over 64 MiB (the
    report kind's sparse 8 GiB file: its mutation line says how to make it again)."""
    skip = {"out", "fifo"}
    for n in names:
        p = Path(d) / n
        if p.is_fifo() or (p.is_file() and not p.is_symlink() and p.stat().st_size > 64 << 20):
            skip.add(n)
    return skip


def run_case(
    case: Case,
    base: Path,
    work: Path,
    save: Path | None,
    timeout: float,
    mem_bytes: int,
    max_events: int | None = None,
) -> Outcome:
    casedir = work / f"case-{case.index:05d}"
    shutil.copytree(base, casedir, symlinks=True)
    os.mkfifo(casedir / "fifo")
    os.mkfifo(casedir / "vc" / "fifo")
    os.mkfifo(casedir / "mcfq" / "fifo")
    apply_mutations(case, casedir)
    if case.setup is not None:
        case.setup(casedir)
    argv = list(case.argv)
    if argv[0] == "study" and "--out" not in argv:
        argv += ["--out", "out"]
    if (
        max_events is not None
        and argv[0] in BOUNDED
        and not any(a.startswith("--max-events") for a in argv)
    ):
        argv += ["--max-events", str(max_events)]
    env = {**os.environ, "VMIO_STRICT_ERRORS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", case.module, *argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=casedir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=_limits(mem_bytes),
    )
    timed_out = False
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    seconds = time.monotonic() - t0
    stderr = err.decode("utf-8", "replace")
    outcome = classify(proc.returncode, stderr, timed_out)
    result = Outcome(case, outcome, proc.returncode, stderr, seconds)
    if not result.ok and save is not None:
        dest = save / (
            f"{case.kind}-{case.base}"
            if case.kind == "regression"
            else f"{case.kind}-{case.index:05d}"
        )
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(casedir, dest, symlinks=True, ignore=_not_saved)
        (dest / "cmd").write_text(shlex.join(["vmio", *argv]) + "\n", encoding="utf-8")
        (dest / "repro.sh").write_text(
            "#!/bin/sh\n# " + "; ".join(case.mutations) + f"\n# outcome: {outcome}\n"
            'cd "$(dirname "$0")" && for f in fifo vc/fifo mcfq/fifo; do '
            '[ -e "$f" ] || mkfifo "$f"; done\n'
            "rm -rf out; VMIO_STRICT_ERRORS=1 "
            + shlex.join(["python", "-m", case.module, *argv])
            + "\n",
            encoding="utf-8",
        )
        (dest / "stderr.txt").write_text(stderr[-20000:], encoding="utf-8")
        result.saved = dest
    shutil.rmtree(casedir, ignore_errors=True)
    return result


def run(
    cases: int,
    seed: int,
    jobs: int,
    timeout: float = 60.0,
    save: Path | None = None,
    mem_mib: int = 4096,
    kinds: tuple[str, ...] = KINDS,
    first: int = 0,
    log: Callable[[str], None] | None = None,
    regressions: bool = False,
    max_events: int | None = MAX_EVENTS,
) -> list[Outcome]:
    """Run cases `first`..`first+cases-1` of seed `seed` with `jobs` at once, after the
    regression corpus when `regressions`; each simulation bounded by `max_events` (None: the
    simulator's own default)."""
    chosen = [make_case(i, seed) for i in range(first, first + cases)]
    chosen = [c for c in chosen if c.kind in kinds]
    if regressions:
        chosen = regression_cases() + chosen
    with tempfile.TemporaryDirectory(prefix="vmio-fuzz-") as tmp:
        base = Path(tmp) / "base"
        prepare_base(base)
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
        out: list[Outcome] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [
                pool.submit(run_case, c, base, Path(tmp), save, timeout, mem_mib << 20, max_events)
                for c in chosen
            ]
            for n, fut in enumerate(futures, 1):
                o = fut.result()
                out.append(o)
                if log is not None and (not o.ok or n % 50 == 0):
                    status = "" if o.ok else f"  FAIL {o.outcome}: {o.case.kind} #{o.case.index}"
                    log(f"fuzz: {n}/{len(chosen)} done{status}")
    return out


def summary(outcomes: list[Outcome]) -> str:
    """The table of outcomes by kind, then every failing case."""
    from vmio.fioreport import text_table

    header = ["kind", "cases", SUCCESS, CLEAN, "anything else", "seconds"]
    rows = []
    for kind in (*KINDS, "regression", "all"):
        os_ = [o for o in outcomes if kind in ("all", o.case.kind)]
        if not os_:
            continue
        c = Counter(o.outcome for o in os_)
        rows.append(
            [
                kind,
                str(len(os_)),
                str(c[SUCCESS]),
                str(c[CLEAN]),
                str(len(os_) - c[SUCCESS] - c[CLEAN]),
                f"{sum(o.seconds for o in os_):.0f}",
            ]
        )
    text = text_table(header, rows, align="lrrrrr")
    bad = [o for o in outcomes if not o.ok]
    if bad:
        kinds = Counter(o.outcome for o in bad)
        text += "\n\nanything else: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common())
        text += "\n\nfailing cases:"
        for o in bad:
            last = (o.stderr.strip().splitlines() or ["(no stderr)"])[-1][:160]
            text += (
                f"\n  #{o.case.index} {o.case.kind} {o.case.base}: {o.outcome} "
                f"({'; '.join(o.case.mutations)[:160]})\n    {last}"
            )
            if o.saved is not None:
                text += f"\n    reproducer: {o.saved}/repro.sh"
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vmio.fuzz",
        description="Mutation fuzzer of vmio's inputs (see the module docstring and "
        "docs/fuzzing.md).",
    )
    p.add_argument("--cases", type=int, default=300, help="number of cases (default 300)")
    p.add_argument("--first", type=int, default=0, help="index of the first case (default 0)")
    p.add_argument("--seed", type=int, default=1, help="seed of the mutations (default 1)")
    p.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    p.add_argument("--mem", type=int, default=4096, help="address-space limit, MiB (4096)")
    p.add_argument(
        "--max-events",
        type=int,
        default=MAX_EVENTS,
        help="the bound given to every simulation a case runs (vmio sim/fio/study "
        f"--max-events), unless the case gives its own; 0: the simulator's default "
        f"(default {MAX_EVENTS:,})",
    )
    p.add_argument(
        "--kind", action="append", choices=KINDS, help="only cases of this kind (repeatable)"
    )
    p.add_argument(
        "--regressions",
        action="store_true",
        help="also run the regression corpus (the findings kept as cases; see REGRESSIONS)",
    )
    p.add_argument(
        "--save",
        type=Path,
        default=Path("vmio-fuzz-failures"),
        help="directory for the failing cases' reproducers (default vmio-fuzz-failures)",
    )
    a = p.parse_args(argv)
    t0 = time.monotonic()
    outcomes = run(
        a.cases,
        a.seed,
        a.jobs,
        timeout=a.timeout,
        save=a.save,
        mem_mib=a.mem,
        kinds=tuple(a.kind or KINDS),
        first=a.first,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        regressions=a.regressions,
        max_events=a.max_events or None,
    )
    print(summary(outcomes))
    print(f"\n{len(outcomes)} cases, seed {a.seed}, in {time.monotonic() - t0:.0f} s")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
