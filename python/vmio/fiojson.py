"""Names of fio's JSON output format that the reports (`vmio.fioreport`) and the result
tables (`vmio.results`) share; standard library only, so that `vmio sim` does not load the
table libraries (pyarrow) it never uses. The format: fio's HOWTO, "Interpreting the output"
and `--output-format=json` (github.com/axboe/fio, HOWTO.rst)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DIRECTIONS = ("read", "write", "trim")


def job_options(result: Mapping[str, Any], job_index: int = 0) -> dict[str, str]:
    """Effective options of one job: the global section overlaid with the job's own."""
    job = result["jobs"][job_index]
    return {**result.get("global options", {}), **job.get("job options", {})}
