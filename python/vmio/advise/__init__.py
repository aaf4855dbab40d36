"""`vmio advise`: which configuration of a stack serves a workload best, predicted by the
simulator, with each figure's measured uncertainty, and verified for real on request.

One module per concern:

    space        the knobs (named choices of the stack and the job), each declared once
    search       exhaustive, or Optuna's TPE / a seeded random sample within the budget
    rank         figures of a configuration, ranking by the goal, explanations
    uncertainty  the calibration's measured error of each figure, or "uncalibrated"
    verify       the top configurations run for real (vmio.real.engine)
    advisor      the run that ties them together (`advise`) and advise.json (`Advice.doc`)
    output       the terminal table and the output directory

docs/advise.md describes the command and its output.
"""
