"""vmio: a laboratory for the storage I/O of VMs on KVM hosts.

The simulator is Rust (`vmio._native`); this package adds the command line (`vmio`), studies,
reports and plots. The Python API in short:

    import vmio
    result = vmio.simulate("studies/volumes-cache/stack.toml", "job.fio", seed=1)
    result["jobs"][0]["read"]["bw_bytes"]          # fio's JSON output format, as a dict
    print(vmio.fio_text(result))                   # fio's human-readable report

    exp = vmio.load_experiment("volumes-cache")    # a built-in study, a dir or a file
    res = vmio.run_study(exp, quick=True)
    res.tidy_table()                               # pyarrow.Table, one row per point/direction

Every bad input raises `vmio.VmioError`, whose message is meant for the user.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version

from vmio.calibration import StudyResult
from vmio.experiment import Experiment, load_experiment
from vmio.report import fio_text
from vmio.runner import run_study
from vmio.sim import VmioError, parse_size, simulate, simulate_text

try:
    __version__ = _dist_version("vmio")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Experiment",
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
