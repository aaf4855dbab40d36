"""Studies: sweep a stack and a fio job over a grid of axes, simulate (or run) every point,
report. Import what you use from the module that defines it:

- `vmio.study.experiment`: `Axis`, `Calibration`, `Point`, `Experiment`, `Study`; loading and
  checking experiment and study files, the built-in studies (`load_experiment`,
  `load_study`, `builtin_studies`);
- `vmio.study.quantities`: quantity names, values from a result, units, titles, formatting;
- `vmio.study.runner`: every point's inputs (stack and job edits), point keys, the store of
  finished points (resume), `run_study`, output directories, `write_outputs`;
- `vmio.study.evaluation`: `PointResult`, `StudyResult`, the evaluation of a study's
  `[[calibration]]` entries against its reference figures, the rows of calibration.csv;
- `vmio.study.tables`: the grid, calibration and summary text (tables.txt);
- `vmio.study.plot`: the figures; `vmio.study.bars`: matplotlib (Agg) and grouped bars;
- `vmio.study.pdc`: S3's gain and PDC detection tables and figures (`[report] gain`,
  `[figure] kind = "pdc"`);
- `vmio.study.iozone`: S2's iozone tables and figure (`[report] iozone`, `[figure] kind =
  "iozone"`);
- `vmio.study.benchfio`: bench-fio's directory layout of a study's results, for fio-plot.

Imports go downwards: runner -> (tables, plot, evaluation, experiment) -> quantities -> the base
modules (`vmio.sim`, `vmio.results`, `vmio.fioreport`); runner also runs points on
`vmio.real.engine`. Nothing here imports `vmio.cli`.
"""
