"""Which configurations of the space are simulated, within the budget.

    size = product of the varied knobs' value counts (space.Space.size)
    exhaustive  size <= budget (or --search exhaustive, refused when size > budget):
                every configuration, in product order
    sampled     size > budget: `budget` distinct configurations, by
      tpe       Optuna's TPE sampler (optuna.samplers.TPESampler, Bergstra et al., "Algorithms
                for Hyper-Parameter Optimization", NIPS 2011) when Optuna is installed (the
                `advise` extra): ask BATCH trials, simulate the new ones (in parallel), tell
                every trial its value in ask order; a trial whose configuration was simulated
                already is told that value and not counted; the simulator's refusal is a
                failed trial. Stops at `budget` distinct configurations, or after
                MAX_TRIALS_PER_POINT x budget trials (TPE keeps proposing what it knows)
      random    else: `budget` distinct indices drawn by random.Random(seed).randrange(size)
                (`sample`), each a configuration in product order (space.Space.config)

Deterministic for one seed: the sampler's seed is the seed, trials are asked and told in a
fixed order, and BATCH does not depend on --parallel, so the configurations chosen and their
order are the same on every run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vmio.advise.rank import GOALS, Evaluated
from vmio.advise.space import Space
from vmio.sim import VmioError

MODES = ("auto", "exhaustive", "tpe", "random")
BATCH = 8
"""Trials asked of TPE at once (simulated in parallel); fixed, so results do not depend on
--parallel."""
MAX_TRIALS_PER_POINT = 10

Evaluate = Callable[[Sequence[tuple[str, ...]]], list[Evaluated]]
"""Simulate configurations (in parallel), results in their order."""


@dataclass(frozen=True)
class Method:
    name: str
    """exhaustive, tpe or random."""
    detail: str


def optuna_version() -> str | None:
    try:
        import optuna
    except ImportError:
        return None
    return str(optuna.__version__)


def method(space: Space, budget: int, mode: str) -> Method:
    """The search method for `mode` on `space` (module doc); VmioError when the space is too
    large to search exhaustively or TPE is asked without Optuna."""
    if mode not in MODES:
        raise VmioError(f"--search: '{mode}' is not valid; accepted: {', '.join(MODES)}")
    size = space.size
    if mode == "exhaustive" or (mode == "auto" and size <= budget):
        if size > budget:
            raise VmioError(
                f"the space has {size:,} configurations ({space_text(space)}), over the "
                f"budget of {budget:,}; raise --budget, vary fewer knobs or values, or sample "
                "it (--search auto)"
            )
        return Method("exhaustive", f"all {size:,} configurations")
    version = optuna_version()
    if mode == "tpe" and version is None:
        raise VmioError("--search tpe needs Optuna: pip install 'vmio[advise]'")
    n = min(budget, size)
    if mode in ("tpe", "auto") and version is not None:
        return Method("tpe", f"Optuna {version} TPE, {n:,} of {size:,} configurations")
    return Method("random", f"seeded random sample of {n:,} of {size:,} configurations")


def space_text(space: Space) -> str:
    return " x ".join(f"{len(d.values)} {d.knob.name}" for d in space.dims) or "nothing varied"


def run(
    space: Space, budget: int, seed: int, goal: str, m: Method, evaluate: Evaluate
) -> list[Evaluated]:
    """The configurations `m` chooses, evaluated, in the order they were chosen."""
    if m.name == "exhaustive":
        return evaluate(list(space))
    if m.name == "random":
        return evaluate([space.config(i) for i in sample(space.size, budget, seed)])
    return _tpe(space, budget, seed, goal, evaluate)


def sample(size: int, n: int, seed: int) -> list[int]:
    """min(n, size) distinct indices of range(size), drawn by random.Random(seed) one at a
    time (any size: a product of many knobs may exceed what random.sample takes)."""
    rng = random.Random(seed)
    if n >= size:
        picks = list(range(size))
        rng.shuffle(picks)
        return picks
    seen: dict[int, None] = {}
    while len(seen) < n:
        seen.setdefault(rng.randrange(size))
    return list(seen)


def _tpe(space: Space, budget: int, seed: int, goal: str, evaluate: Evaluate) -> list[Evaluated]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    figure, higher = GOALS[goal]
    study = optuna.create_study(
        direction="maximize" if higher else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed % 2**32),
    )
    target = min(budget, space.size)
    done: dict[tuple[str, ...], Evaluated] = {}
    order: list[Evaluated] = []
    trials = 0
    while len(done) < target and trials < MAX_TRIALS_PER_POINT * target:
        asked = []
        for _ in range(min(BATCH, MAX_TRIALS_PER_POINT * target - trials)):
            t = study.ask()
            values = tuple(
                str(t.suggest_categorical(d.knob.name, list(d.values))) for d in space.dims
            )
            asked.append((t, values))
            trials += 1
        new = list(dict.fromkeys(v for _, v in asked if v not in done))[: target - len(done)]
        for e in evaluate(new):
            done[e.values] = e
            order.append(e)
        for t, values in asked:
            e = done.get(values)
            if e is None or e.figures is None or e.figures["total_ios"] <= 0:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(t, e.figures[figure])
    return order
