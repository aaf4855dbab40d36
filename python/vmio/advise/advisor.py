"""`vmio advise`'s run: the space, the search, the ranking, the uncertainty, the verification,
and the record of it all (`Advice.doc`, advise.json).

    view  = the stack as the simulator reads it; vm = --vm or its first VM
    space = space.build(view, vm, --vary, --values)   knobs that do not apply: one line each
    baseline = the stack and job as given, simulated (configuration 0)
    chosen = search.run(space, --budget, --seed)      each configuration: space.apply, then
                                                      the simulator with --seed (the same
                                                      for all: common random numbers), the
                                                      figures of the --measure job (rank)
    ranked = rank.rank(baseline + chosen, --goal)     a chosen configuration equal to the
                                                      baseline (same values, same figures)
                                                      stands for it
    explain the first max(TOP_EXPLAINED, N) ranked; uncertainty.of_stack(stack)
    --verify N: verify.run(the first N ranked)

Simulations run `parallel` at once in threads (the native simulator releases the GIL); the
order of completion never reaches the results, so one seed gives the same advise.json bytes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmio import stackfile
from vmio.advise import rank, search, space, uncertainty, verify
from vmio.advise.rank import Evaluated
from vmio.progress import Progress
from vmio.real.engine import job_sections
from vmio.sim import VmioError, parse_toml, read_text, simulate_text

DEFAULT_BUDGET = 200
MAX_BUDGET = 10_000
"""The most configurations one run simulates (`--budget`)."""
MAX_VERIFY = 20
TOP_EXPLAINED = 5
FORMAT = 1
"""advise.json's format version."""


@dataclass(frozen=True)
class Request:
    """What to advise on: `vmio advise`'s options."""

    stack: Path
    workload: Path
    goal: str = "iops"
    vary: tuple[str, ...] | None = None
    values: tuple[str, ...] = ()
    budget: int = DEFAULT_BUDGET
    seed: int = 1
    search: str = "auto"
    vm: str | None = None
    measure: str | None = None
    verify: int = 0
    target: Path | None = None
    target_size: int = 1 << 30
    substitute: bool = False
    parallel: int = 1

    def inputs(self) -> dict[str, Any]:
        return {
            "stack": str(self.stack),
            "workload": str(self.workload),
            "goal": self.goal,
            "vary": None if self.vary is None else list(self.vary),
            "values": list(self.values),
            "budget": self.budget,
            "seed": self.seed,
            "search": self.search,
            "vm": self.vm,
            "measure": self.measure,
            "verify": self.verify,
            "target": None if self.target is None else str(self.target),
            "substitute": self.substitute,
        }


@dataclass
class Advice:
    request: Request
    space: space.Space
    method: search.Method
    vm: str
    current: tuple[str, ...]
    evaluated: list[Evaluated]
    ranked: list[Evaluated]
    uncertainty: dict[str, Any]
    stack_text: str
    job_text: str
    verification: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def doc(self) -> dict[str, Any]:
        """advise.json (module doc of `vmio.advise`)."""
        from vmio.version import __version__

        fig, higher = rank.GOALS[self.request.goal]
        names = self.space.names
        return {
            "vmio_advise": FORMAT,
            "version": __version__,
            "inputs": self.request.inputs(),
            "vm": self.vm,
            "goal": {"name": self.request.goal, "figure": fig, "higher_is_better": higher},
            "space": {
                "size": self.space.size,
                "method": {"name": self.method.name, "detail": self.method.detail},
                "knobs": [
                    {
                        "name": d.knob.name,
                        "help": d.knob.help,
                        "kind": d.knob.kind,
                        "values": list(d.values),
                        "current": cur,
                    }
                    for d, cur in zip(self.space.dims, self.current, strict=True)
                ],
                "skipped": [{"knob": k, "why": why} for k, why in self.space.skipped],
            },
            "uncertainty": self.uncertainty,
            "ranking": [e.index for e in self.ranked],
            "configurations": [self._config_doc(e, names) for e in self.ordered()],
            "notes": self.notes,
        }

    def ordered(self) -> list[Evaluated]:
        """Ranked first (best first), then the unranked in evaluation order."""
        return [*self.ranked, *(e for e in self.evaluated if e.rank is None)]

    def _config_doc(self, e: Evaluated, names: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": e.index,
            "rank": e.rank,
            "baseline": e.baseline,
            "values": dict(zip(names, e.values, strict=True)),
            "figures": e.figures,
            "invalid": e.invalid,
            "uncertainty": None if e.figures is None else ranges(e.figures, self.uncertainty),
        }
        if e.explanation:
            out["explanation"] = {
                **e.explanation,
                "text": rank.explanation_lines(e, self.request.goal),
            }
        if e.index in self.verification:
            out["verification"] = self.verification[e.index]
        return out


def _span(v: float, e: float) -> list[float | None]:
    """The real values a prediction `v` with relative error at most `e` allows."""
    return [round(v / (1 + e), 3), round(v / (1 - e), 3) if e < 1 else None]


def ranges(figs: Mapping[str, float], record: Mapping[str, Any]) -> dict[str, Any]:
    """Per figure: the calibration's median and p90 error and the real values they allow,
    predicted / (1 + e) .. predicted / (1 - e) (error = predicted / real - 1); or the
    record's source (`uncalibrated`) when it has no error for the figure."""
    out: dict[str, Any] = {}
    for f in rank.FIGURES:
        s = record["figures"].get(f)
        if s is None:
            out[f] = record["source"] if record["source"] != "fit" else "no error record"
            continue
        out[f] = {
            "median_error": s["median"],
            "p90_error": s["p90"],
            "n": s["n"],
            "range_median": _span(figs[f], s["median"]),
            "range_p90": _span(figs[f], s["p90"]),
        }
    return out


def _check_measure(job_text: str, measure: str | None, where: str) -> None:
    names = [n for n, _ in job_sections(job_text)]
    if not names:
        raise VmioError(f"{where}: no job section")
    if measure is not None and measure not in names:
        raise VmioError(f"--measure: the job file has no job '{measure}'; jobs: {', '.join(names)}")


def advise(req: Request, log: Callable[[str], None] | None = None, quiet: bool = False) -> Advice:
    """Run the advice (module doc). `log` gets the one-line notes (stderr by default);
    progress goes to stderr unless `quiet`."""
    say = log or (lambda line: print(f"vmio: advise: {line}", file=sys.stderr, flush=True))
    if req.goal not in rank.GOALS:
        raise VmioError(f"--goal: '{req.goal}' is not valid; accepted: {', '.join(rank.GOALS)}")
    if not 1 <= req.budget <= MAX_BUDGET:
        raise VmioError(f"--budget: {req.budget} is not in 1..{MAX_BUDGET}")
    if req.verify and req.target is None:
        raise VmioError("--verify needs --target FILE (the file fio runs on)")
    if req.target is not None and not req.verify:
        raise VmioError("--target needs --verify N")
    if req.target is not None:
        verify.check_target(req.target)
    stack_path, job_path = str(req.stack), str(req.workload)
    stack_text = read_text(req.stack, "stack file")
    job_text = read_text(req.workload, "fio job file")
    view = stackfile.loads(stack_text, stack_path)
    vm = view.vm(req.vm).name
    if not view.vm(vm).disks:
        raise VmioError(f"{stack_path}: VM '{vm}' has no [[vm.disk]] for the job to run on")
    _check_measure(job_text, req.measure, job_path)
    doc = parse_toml(stack_text, stack_path)
    sp = space.build(view, vm, req.vary, space.parse_values(req.values))
    if not sp.dims:
        raise VmioError(
            "nothing to vary: "
            + ("; ".join(f"{k}: {why}" for k, why in sp.skipped) or "no knob given")
        )
    for name, why in sp.skipped:
        say(f"knob '{name}' does not apply: {why}")
    m = search.method(sp, req.budget, req.search)
    say(f"{search.space_text(sp)} = {sp.size:,} configurations; {m.detail}")
    current = tuple(d.knob.current(view, vm, job_text, req.measure) for d in sp.dims)

    total = 1 + min(req.budget, sp.size)
    bar = None if quiet else Progress(total, title="advise", stream=sys.stderr)
    counter = iter(range(total + sp.size * search.MAX_TRIALS_PER_POINT))

    def simulate(values: tuple[str, ...] | None) -> Evaluated:
        if values is None:
            s_text, j_text, spath = stack_text, job_text, stack_path
        else:
            s_text, j_text = space.apply(doc, job_text, view, vm, req.measure, sp, values)
            shown = ", ".join(f"{n}={v}" for n, v in zip(sp.names, values, strict=True))
            spath = f"{stack_path} (as set by advise: {shown})"
        try:
            result = json.loads(simulate_text(s_text, spath, j_text, job_path, req.seed, vm))
        except VmioError as err:
            return Evaluated(0, values or current, None, invalid=str(err))
        measured = rank.measured_jobs(result, req.measure)
        return Evaluated(
            0,
            values or current,
            rank.figures(measured),
            breakdown=rank.breakdown_of(result, req.measure),
        )

    def evaluate(batch: Sequence[tuple[str, ...] | None]) -> list[Evaluated]:
        out = []
        with ThreadPoolExecutor(max_workers=max(1, req.parallel)) as pool:
            for e in pool.map(simulate, batch):
                e.index = next(counter)
                if bar is not None:
                    bar.advance(f"#{e.index}")
                out.append(e)
        return out

    base = evaluate([None])[0]
    base.baseline, base.searched = True, False
    if base.figures is None:
        raise VmioError(f"the stack and job as given: {base.invalid}")
    chosen = search.run(sp, req.budget, req.seed, req.goal, m, evaluate)
    if bar is not None:
        bar.total = bar.done  # the search may end early (TPE repeating itself)
        bar.close()
    same = next((e for e in chosen if e.values == base.values and e.figures == base.figures), None)
    if same is not None:  # the baseline was chosen too: it stands for the given stack
        same.baseline = True
        evaluated = chosen
    else:
        evaluated = [base, *chosen]
    invalid = [e for e in chosen if e.figures is None]
    notes = []
    if invalid:
        notes.append(
            f"{len(invalid)} configuration(s) refused by the simulator (not ranked), e.g. "
            + (invalid[0].invalid or "")
        )
    ranked = rank.rank(evaluated, req.goal, sp.order)
    rank.explain(ranked, sp.names, req.goal, max(TOP_EXPLAINED, req.verify))
    advice = Advice(
        req,
        sp,
        m,
        vm,
        current,
        evaluated,
        ranked,
        uncertainty.of_stack(req.stack, stack_text),
        stack_text,
        job_text,
        notes=notes,
    )
    if req.verify:
        _verify(advice, doc, view, say)
    return advice


def _verify(advice: Advice, doc: dict[str, Any], view: stackfile.Stack, say: Callable) -> None:
    req = advice.request
    assert req.target is not None
    top = advice.ranked[: req.verify]
    configs = []
    for e in top:
        if e.baseline and e.values == advice.current:
            s_text, j_text = advice.stack_text, advice.job_text
        else:
            s_text, j_text = space.apply(
                doc, advice.job_text, view, advice.vm, req.measure, advice.space, e.values
            )
        configs.append((f"rank {e.rank}", s_text, j_text))
    target = verify.prepare_target(req.target, req.target_size)
    records = verify.run(
        configs,
        target=target,
        stack_path=str(req.stack),
        job_path=str(req.workload),
        vm=advice.vm,
        measure=req.measure,
        seed=req.seed,
        substitute=req.substitute,
        log=say,
    )
    advice.verification = {e.index: r for e, r in zip(top, records, strict=True)}
