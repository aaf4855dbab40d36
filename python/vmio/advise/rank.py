"""A configuration's figures, the ranking by the goal, and the explanation of the top ones.

Figures (`figures`), from fio's JSON of the jobs that count (`--measure`, else every job),
per direction as `vmio.results.direction_summary` sums them:

    iops        read + write + trim IOPS
    bw_bytes    read + write + trim bytes/s
    lat_mean_ns mean total latency (fio's lat_ns: submission + completion), weighted by I/Os
    p99_ns      the largest clat p99 of the directions with I/O (the slower direction's)
    p999_ns     the same for clat p99.9

Goals: `iops` and `bw` higher is better; `lat`, `p99`, `p99.9` lower is better. A
configuration the simulator refuses (`invalid`, its one-line reason kept) or that completes
no I/O is not ranked. Ties on the goal are broken by the mean latency, then the p99, then
IOPS (lower, lower, higher), then by the configuration's place in the space's product order
(`order`): the ranking does not depend on the order the search evaluated configurations in,
so an exhaustive and a sampled search that both evaluated the best agree on it.

Explanation (`explain`) of a ranked configuration:
- `differs`: the knob values that differ from the next-ranked configuration, and the goal's
  relative difference to it;
- `effects`: for each knob, the configurations evaluated that differ from this one in that
  knob alone, and the goal relative to them (a one-factor-at-a-time view; only where such
  neighbours were evaluated, which an exhaustive search guarantees);
- `breakdown`: where a request's time goes, from the simulator's per-layer account when its
  JSON has one (the top-level `vmio.breakdown`: per job, per layer, mean and percentiles and
  the layer's share of the time); else the note that it is unavailable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vmio.results import DIRECTIONS, direction_summary

GOALS = {
    "iops": ("iops", True),
    "bw": ("bw_bytes", True),
    "lat": ("lat_mean_ns", False),
    "p99": ("p99_ns", False),
    "p99.9": ("p999_ns", False),
}
"""Goal -> (figure, higher is better)."""

FIGURES = ("iops", "bw_bytes", "lat_mean_ns", "p99_ns", "p999_ns")
FIGURE_UNITS = {
    "iops": ("IOPS", 1.0),
    "bw_bytes": ("MB/s", 1e6),
    "lat_mean_ns": ("lat us", 1e3),
    "p99_ns": ("p99 us", 1e3),
    "p999_ns": ("p99.9 us", 1e3),
}
"""Figure -> (column title, scale) on the terminal."""


def measured_jobs(result: Mapping[str, Any], measure: str | None) -> dict[str, Any]:
    """`result` with only the jobs that count (all when `measure` is None)."""
    if measure is None:
        return dict(result)
    return {**result, "jobs": [j for j in result["jobs"] if j.get("jobname") == measure]}


def figures(result: Mapping[str, Any]) -> dict[str, float]:
    """The figures (module doc) of a fio JSON result."""
    sums = [direction_summary(result, d) for d in DIRECTIONS]
    ios = sum(s["total_ios"] for s in sums)
    active = [s for s in sums if s["total_ios"] > 0]
    return {
        "iops": round(sum(s["iops"] for s in sums), 3),
        "bw_bytes": float(sum(s["bw_bytes"] for s in sums)),
        "lat_mean_ns": round(sum(s["lat_mean_ns"] * s["total_ios"] for s in sums) / ios, 1)
        if ios
        else 0.0,
        "p99_ns": float(max((s["clat_p99_ns"] for s in active), default=0)),
        "p999_ns": float(max((s["clat_p999_ns"] for s in active), default=0)),
        "total_ios": float(ios),
    }


@dataclass
class Evaluated:
    """One configuration evaluated: its knob values, figures (None: invalid), and, once
    ranked, its rank and explanation."""

    index: int
    """Order of evaluation (0: the stack as given, the baseline)."""
    values: tuple[str, ...]
    figures: dict[str, float] | None
    invalid: str | None = None
    baseline: bool = False
    searched: bool = True
    """False for the stack as given when the search did not choose its values (its edits
    may differ from every searched configuration's: it is no knob's neighbour)."""
    breakdown: list[dict[str, Any]] | None = None
    """The simulator's per-layer account of the measured jobs (None: not in its JSON)."""
    rank: int | None = None
    explanation: dict[str, Any] = field(default_factory=dict)


def breakdown_of(result: Mapping[str, Any], measure: str | None) -> list[dict[str, Any]] | None:
    """The per-layer breakdown (`vmio.breakdown`) of the jobs that count, None when the
    simulator's JSON has none."""
    items = (result.get("vmio") or {}).get("breakdown")
    if not isinstance(items, list):
        return None
    return [
        b for b in items if isinstance(b, Mapping) and (measure is None or b.get("job") == measure)
    ]


def rank(
    evaluated: Sequence[Evaluated],
    goal: str,
    order: Callable[[tuple[str, ...]], tuple[int, ...]] = lambda v: (),
) -> list[Evaluated]:
    """The valid configurations with I/O, best first (module doc; `order`: a configuration's
    place in the space); sets each one's `rank` (1 = best)."""
    fig, higher = GOALS[goal]
    ok = [e for e in evaluated if e.figures is not None and e.figures["total_ios"] > 0]

    def key(e: Evaluated) -> tuple[Any, ...]:
        f = e.figures
        assert f is not None
        return (
            -f[fig] if higher else f[fig],
            f["lat_mean_ns"],
            f["p99_ns"],
            -f["iops"],
            order(e.values),
        )

    ranked = sorted(ok, key=key)
    for i, e in enumerate(ranked):
        e.rank = i + 1
    return ranked


def relative(a: float, b: float) -> float | None:
    """a / b - 1 (None when b is 0)."""
    return a / b - 1 if b else None


def explain(ranked: Sequence[Evaluated], names: Sequence[str], goal: str, top: int) -> None:
    """Fill `explanation` of the first `top` ranked configurations (module doc)."""
    fig, _ = GOALS[goal]
    by_values: dict[tuple[str, ...], Evaluated] = {}
    for e in ranked:
        by_values.setdefault(e.values, e)
    for pos, e in enumerate(ranked[:top]):
        assert e.figures is not None
        out: dict[str, Any] = {}
        if pos + 1 < len(ranked):
            nxt = ranked[pos + 1]
            assert nxt.figures is not None
            out["next"] = {
                "rank": nxt.rank,
                "differs": {
                    n: {"this": a, "next": b}
                    for n, a, b in zip(names, e.values, nxt.values, strict=True)
                    if a != b
                },
                "goal_vs_next": relative(e.figures[fig], nxt.figures[fig]),
            }
        effects = {}
        for i, n in enumerate(names):
            alts = {}
            for e2 in ranked:
                if e2 is e or not e2.searched:
                    continue
                if all(
                    (a == b) == (j != i)
                    for j, (a, b) in enumerate(zip(e.values, e2.values, strict=True))
                ):
                    assert e2.figures is not None
                    alts[e2.values[i]] = relative(e.figures[fig], e2.figures[fig])
            if alts:
                effects[n] = {"value": e.values[i], "goal_vs": alts}
        out["effects"] = effects
        if e.breakdown:
            out["breakdown"] = e.breakdown
        else:
            out["breakdown"] = None
            out["breakdown_note"] = (
                "breakdown unavailable: the simulator's JSON has no vmio.breakdown"
                if e.breakdown is None
                else "breakdown unavailable for the measured job"
            )
        e.explanation = out


SHOWN_SHARE = 0.005
"""Layers with a smaller share of the time are left out of the explanation's line."""
TIE = 0.005
"""Goal differences below this share are shown as ties."""


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "the same (within 0.5%)" if abs(x) < TIE else f"{100 * x:+.0f}%"


def explanation_lines(e: Evaluated, goal: str) -> list[str]:
    """The explanation of `e` as text lines (the terminal's and advise.json's `text`)."""
    lines = []
    x = e.explanation
    nxt = x.get("next")
    if nxt is not None:
        diffs = ", ".join(f"{n}={d['next']} (this: {d['this']})" for n, d in nxt["differs"].items())
        lines.append(f"{goal} {_pct(nxt['goal_vs_next'])} vs rank {nxt['rank']}, which has {diffs}")
    for n, eff in x.get("effects", {}).items():
        alts = ", ".join(f"{_pct(r)} vs {v}" for v, r in eff["goal_vs"].items())
        lines.append(f"{n}={eff['value']}: {goal} {alts} (the other knobs the same)")
    if x.get("breakdown"):
        for b in x["breakdown"]:
            layers = sorted(
                (la for la in b.get("layers", []) if float(la.get("share") or 0) >= SHOWN_SHARE),
                key=lambda la: -float(la.get("share") or 0),
            )
            shown = ", ".join(
                f"{la.get('layer')} {100 * float(la.get('share') or 0):.0f}% "
                f"(mean {float(la.get('mean_ns') or 0) / 1e3:.1f} us)"
                for la in layers[:4]
            )
            lines.append(f"time of job {b.get('job')}: {shown}")
    elif x.get("breakdown_note"):
        lines.append(x["breakdown_note"])
    return lines
