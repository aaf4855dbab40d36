"""bench-fio's directory layout from a study, so that fio-plot reads vmio's results as it
reads bench-fio's.

bench-fio (PyPI fio-plot, `bench_fio/benchlib`: `supporting.generate_output_directory`,
`runfio.run_fio`) writes one fio JSON output per benchmark:

    <output>/<basename of the target>/<bs>/<rw>-<iodepth>-<numjobs>.json
    a mixed mode (bench-fio's `mixed`: readwrite, rw, randrw):
    <output>/<basename of the target>/<rw><rwmixread>/<bs>/<rw>-<iodepth>-<numjobs>.json

fio-plot (`fio_plot/fiolib/jsonimport.py`, `filter_json_files`) takes every `*.json` of the
directory given with `-i` and picks files by `rw`, `iodepth` and `numjobs` of
`jobs[0]["job options"]` merged with `"global options"`: the file names are bench-fio's
convention, the options in the JSON are what fio-plot reads.

A study whose axes sweep both `iodepth` and `numjobs` (`job:` targets) writes this layout
under `<study output>/bench-fio/`, one file per point (the point's fio JSON, unchanged):

    target = basename of the measured job's `filename`, else the VM's first disk
    bs, rw, iodepth, numjobs, rwmixread = the job's options, as the JSON gives them
      (job options over global options; rwmixread defaults to fio's 50)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vmio import results
from vmio.sim import VmioError
from vmio.study.evaluation import StudyResult
from vmio.study.experiment import Experiment

DIRECTORY = "bench-fio"
"""Where a study writes the layout, under its output directory."""

MIXED = ("readwrite", "rw", "randrw")
"""bench-fio's mixed modes (its `mixed` setting), whose directory adds rwmixread."""


def _option(target: str) -> str:
    """The fio option of a `job:` target (`job:iodepth`, `job:seq.iodepth`,
    `job[vm1]:iodepth`); "" for a stack target."""
    kind, _, path = target.partition(":")
    if not kind.startswith("job"):
        return ""
    return path.rsplit(".", 1)[-1]


def sweeps_iodepth_and_numjobs(exp: Experiment) -> bool:
    """The experiment has an axis on `iodepth` and one on `numjobs`."""
    swept = {_option(a.target) for a in exp.axes}
    return {"iodepth", "numjobs"} <= swept


def job_options(result: Mapping[str, Any]) -> dict[str, str]:
    """The first job's options with the global ones beneath them."""
    jobs = result.get("jobs") or []
    if not jobs:
        raise VmioError("a point's result has no job; bench-fio's layout needs one")
    return {**(result.get("global options") or {}), **(jobs[0].get("job options") or {})}


def target_name(result: Mapping[str, Any], options: Mapping[str, str]) -> str:
    """bench-fio's target directory: the job's file name, else the VM's first disk."""
    if filename := options.get("filename"):
        return Path(filename.split(":")[0]).name
    vm_name = result["jobs"][0].get("vmio_vm")
    vms = ((result.get("vmio") or {}).get("stack") or {}).get("vms") or []
    for vm in vms:
        if vm.get("name") == vm_name and vm.get("disks"):
            return str(vm["disks"][0]["name"])
    raise VmioError("a point's result names no disk for bench-fio's target directory")


def layout_path(result: Mapping[str, Any]) -> Path:
    """The path of a point's JSON in bench-fio's layout, relative to the output directory."""
    options = job_options(result)
    missing = [k for k in ("rw", "bs", "iodepth", "numjobs") if k not in options]
    if missing:
        raise VmioError(
            f"a point's job options lack {', '.join(missing)}; bench-fio's layout needs "
            "rw, bs, iodepth and numjobs"
        )
    rw, bs = options["rw"], options["bs"]
    mode_dir = Path(f"{rw}{options.get('rwmixread', '50')}") if rw in MIXED else Path()
    name = f"{rw}-{options['iodepth']}-{options['numjobs']}.json"
    return Path(target_name(result, options)) / mode_dir / bs / name


def write_layout(res: StudyResult, out: Path) -> list[Path]:
    """Write every point's fio JSON into `out/bench-fio/` in bench-fio's layout; the files
    written, in point order. Two points at one path (an axis bench-fio does not name) are an
    error naming both."""
    base = out / DIRECTORY
    taken: dict[Path, str] = {}
    written: list[Path] = []
    for pr in res.points:
        rel = layout_path(pr.result)
        if rel in taken:
            raise VmioError(
                f"points {taken[rel]} and {pr.point.label} share bench-fio's file {rel}; "
                "bench-fio's layout names only target, bs, rw, iodepth and numjobs"
            )
        taken[rel] = pr.point.label
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = pr.json_text if pr.json_text.endswith("\n") else pr.json_text + "\n"
        results.atomic_write(path, text)
        written.append(path)
    for old in base.rglob("*.json"):  # points of an earlier grid of a resumed run
        if old not in written:
            old.unlink()
    return written
