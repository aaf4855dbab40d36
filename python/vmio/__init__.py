"""vmio: a laboratory for the storage I/O of VMs on KVM hosts.

The simulator is Rust (`vmio._native`); this package adds the command line (`vmio`), studies,
reports and plots. The Python API in short:

    import vmio
    result = vmio.simulate("studies/volumes-cache/stack.toml", "job.fio", seed=1)
    result.jobs[0].read.bw_bytes                   # typed: vmio.SimResult, JobResult...
    result.fio["jobs"][0]["read"]["bw_bytes"]      # fio's JSON output format, as a dict
    print(vmio.fio_text(result))                   # fio's human-readable report
    vmio.simulate(stack_text, job_text)            # the files' text works as well as paths

    exp = vmio.load_experiment("volumes-cache")    # a built-in study, a dir or a file
    res = vmio.run_study(exp, quick=True, progress=None)  # or a callback: vmio.StudyEvent
    res.tidy_table()                               # pyarrow.Table, one row per point/direction
    res.points_table()                             # one row per point: its stack and job
    vmio.run_study(exp, dask="tcp://host:8786")    # the points as Dask tasks (docs/cluster.md)

Every bad input raises `vmio.VmioError`, whose message is meant for the user.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vmio.api import DirectionResult, JobBreakdown, JobResult, LayerTime, SimResult, simulate
    from vmio.fioreport import fio_text
    from vmio.sim import VmioError, parse_size, simulate_text
    from vmio.study.evaluation import StudyResult
    from vmio.study.experiment import Experiment, load_experiment
    from vmio.study.runner import StudyEvent, run_study
    from vmio.version import __version__

# Each public name and the module that defines it, imported on first use (PEP 562's module
# `__getattr__`): `vmio sim` imports the package but needs neither the studies nor the table
# and plot libraries they bring (pyarrow, numpy, matplotlib).
_LAZY = {
    "DirectionResult": "vmio.api",
    "Experiment": "vmio.study.experiment",
    "JobBreakdown": "vmio.api",
    "JobResult": "vmio.api",
    "LayerTime": "vmio.api",
    "SimResult": "vmio.api",
    "StudyEvent": "vmio.study.runner",
    "StudyResult": "vmio.study.evaluation",
    "VmioError": "vmio.sim",
    "__version__": "vmio.version",
    "fio_text": "vmio.fioreport",
    "load_experiment": "vmio.study.experiment",
    "parse_size": "vmio.sim",
    "run_study": "vmio.study.runner",
    "simulate": "vmio.api",
    "simulate_text": "vmio.sim",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vmio' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DirectionResult",
    "Experiment",
    "JobBreakdown",
    "JobResult",
    "LayerTime",
    "SimResult",
    "StudyEvent",
    "StudyResult",
    "VmioError",
    "__version__",
    "fio_text",
    "load_experiment",
    "parse_size",
    "run_study",
    "simulate",
    "simulate_text",
]
