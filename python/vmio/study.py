"""Studies: sweep a stack and a fio job over a grid of axes, simulate every point, report.

This module gathers the public names of the modules that do the work, for the callers of
`vmio.study` (`from vmio import study; study.run_study(...)`):

- `vmio.quantities`: quantity names, values from a result, units, titles, formatting;
- `vmio.experiment`: `Axis`, `Calibration`, `Point`, `Experiment`, `Study`; loading and
  checking experiment and study files;
- `vmio.runner`: every point's inputs (stack and job edits), point keys, the store of finished
  points (resume), `run_study`, output directories, `write_outputs`;
- `vmio.calibration`: `PointResult`, `StudyResult`, the evaluation of `[[calibration]]` entries
  and the rows of calibration.csv;
- `vmio.tables`: the grid, calibration and summary text;
- `vmio.plot`: the figures;
- `vmio.pdcreport`: S3's gain and PDC detection tables and figures (`[report] gain`,
  `[figure] kind = "pdc"`);
- `vmio.iozonereport`: S2's iozone tables and figure (`[report] iozone`, `[figure] kind =
  "iozone"`).
"""

from vmio.calibration import (
    CALIBRATION_COLUMNS,
    CalibrationRow,
    PointResult,
    StudyResult,
    calibration_records,
    evaluate_calibration,
)
from vmio.experiment import (
    BUILTIN_STUDIES,
    STUDY_FILES,
    Axis,
    Calibration,
    Experiment,
    Point,
    Study,
    builtin_studies,
    find_experiment,
    load_experiment,
    load_study,
)
from vmio.quantities import (
    QUANTITIES,
    REDUCERS,
    SHARE_QUANTITIES,
    VM_QUANTITIES,
    check_quantity,
    format_quantity,
    quantity_title,
    quantity_unit,
    quantity_value,
)
from vmio.runner import (
    OUTPUT_FILES,
    PARTIAL_DIR,
    PointInput,
    default_parallelism,
    finish_output_dir,
    next_free_dir,
    point_inputs,
    point_key,
    prepare_output_dir,
    run_study,
    set_job_option,
    set_stack_value,
    unfinished_run,
    write_outputs,
)
from vmio.tables import calibration_table, grid_tables, summary_text

__all__ = [
    "BUILTIN_STUDIES",
    "CALIBRATION_COLUMNS",
    "OUTPUT_FILES",
    "PARTIAL_DIR",
    "QUANTITIES",
    "REDUCERS",
    "SHARE_QUANTITIES",
    "STUDY_FILES",
    "VM_QUANTITIES",
    "Axis",
    "Calibration",
    "CalibrationRow",
    "Experiment",
    "Point",
    "PointInput",
    "PointResult",
    "Study",
    "StudyResult",
    "builtin_studies",
    "calibration_records",
    "calibration_table",
    "check_quantity",
    "default_parallelism",
    "evaluate_calibration",
    "find_experiment",
    "finish_output_dir",
    "format_quantity",
    "grid_tables",
    "load_experiment",
    "load_study",
    "next_free_dir",
    "point_inputs",
    "point_key",
    "prepare_output_dir",
    "quantity_title",
    "quantity_unit",
    "quantity_value",
    "run_study",
    "set_job_option",
    "set_stack_value",
    "summary_text",
    "unfinished_run",
    "write_outputs",
]
