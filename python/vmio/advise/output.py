"""What `vmio advise` shows and writes: the terminal table (`table_text`) and the output
directory (`write_dir`):

    advise.json   Advice.doc(): inputs, space, method, uncertainty, every configuration
                  evaluated (values, figures, rank, uncertainty, explanation, verification)
    results.csv   one row per configuration: rank (empty: not ranked), index, baseline, the
                  knob values, the predicted figures, invalid (the simulator's refusal)
    stack.toml    the stack file as given
    job.fio       the fio job as given
    command.txt   the command that reproduces advise.json

(`vmio report DIR` renders the directory; keep the names.)
"""

from __future__ import annotations

import json
from pathlib import Path

from vmio import results
from vmio.advise import rank, uncertainty
from vmio.advise.advisor import Advice
from vmio.advise.rank import FIGURE_UNITS, FIGURES, Evaluated
from vmio.sim import VmioError

OUTPUT_FILES = ("advise.json", "results.csv", "stack.toml", "job.fio", "command.txt")


def _cell(e: Evaluated, f: str) -> str:
    if e.figures is None:
        return "-"
    title, scale = FIGURE_UNITS[f]
    v = e.figures[f] / scale
    return f"{v:,.0f}" if f == "iops" else f"{v:,.1f}"


def table_text(advice: Advice, top: int) -> str:
    """The first `top` ranked configurations (and the baseline's row when below them), the
    goal's uncertainty, the explanations and the verification, as text."""
    goal = advice.request.goal
    fig, higher = rank.GOALS[goal]
    names = list(advice.space.names)
    head = ["rank", *names, *(FIGURE_UNITS[f][0] for f in FIGURES), f"{goal} error"]
    shown = advice.ranked[:top]
    base = next((e for e in advice.ranked if e.baseline), None)
    if base is not None and base not in shown:
        shown = [*shown, base]
    rows = []
    for e in shown:
        label = f"{e.rank}" + (" (as given)" if e.baseline else "")
        rows.append(
            [
                label,
                *e.values,
                *(_cell(e, f) for f in FIGURES),
                uncertainty.shown(advice.uncertainty, fig),
            ]
        )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            f"{c:<{w}}" if i <= len(names) else f"{c:>{w}}"
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    better = "higher" if higher else "lower"
    out = [
        f"vmio advise: {len(advice.ranked)} configurations ranked by {goal} ({better} is "
        f"better); {advice.method.detail}; uncertainty: {advice.uncertainty['note']}",
        *lines,
    ]
    for k, why in advice.space.skipped:
        out.append(f"not varied: {k}: {why}")
    for e in advice.ranked[: min(top, rank_explained(advice))]:
        text = rank.explanation_lines(e, goal)
        if text:
            out.append(f"rank {e.rank}:")
            out += [f"  {t}" for t in text]
    for e in advice.ranked:
        v = advice.verification.get(e.index)
        if v is None:
            continue
        if "skipped" in v:
            out.append(f"verify rank {e.rank}: skipped: {v['skipped']}")
            continue
        cells = []
        for f in FIGURES:
            title, scale = FIGURE_UNITS[f]
            err = v["error"][f]
            cells.append(
                f"{title} real {v['real'][f] / scale:,.1f} predicted "
                f"{v['predicted_as_run'][f] / scale:,.1f}"
                + ("" if err is None else f" ({100 * err:+.0f}%)")
            )
        out.append(f"verify rank {e.rank} ({v['mode']} mode): " + "; ".join(cells))
    out += [f"note: {n}" for n in advice.notes]
    return "\n".join(out) + "\n"


def rank_explained(advice: Advice) -> int:
    return sum(1 for e in advice.ranked if e.explanation)


def csv_rows(advice: Advice) -> tuple[list[dict[str, object]], list[str]]:
    names = list(advice.space.names)
    columns = ["rank", "index", "baseline", *names, *FIGURES, "invalid"]
    rows = []
    for e in advice.ordered():
        row: dict[str, object] = {
            "rank": "" if e.rank is None else e.rank,
            "index": e.index,
            "baseline": int(e.baseline),
            **dict(zip(names, e.values, strict=True)),
            "invalid": e.invalid or "",
        }
        for f in FIGURES:
            row[f] = "" if e.figures is None else e.figures[f]
        rows.append(row)
    return rows, columns


def check_dir(out: Path, force: bool) -> None:
    """Refuse `out` when it is not a directory, or not empty without `force` (checked before
    the run and again before writing)."""
    if out.exists() and not out.is_dir():
        raise VmioError(f"--out '{out}' exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise VmioError(
            f"output directory '{out}' is not empty; pass --force to replace the advise "
            "files in it, or --out DIR to write elsewhere"
        )


def write_dir(advice: Advice, out: Path, command: str, force: bool) -> None:
    """Write OUTPUT_FILES into `out` (module doc); a non-empty `out` is refused unless
    `force`, which replaces only these files."""
    check_dir(out, force)
    out.mkdir(parents=True, exist_ok=True)
    doc = advice.doc()
    results.atomic_write(out / "advise.json", json.dumps(doc, indent=1, sort_keys=False) + "\n")
    rows, columns = csv_rows(advice)
    results.write_csv(out / "results.csv", rows, columns)
    results.atomic_write(out / "stack.toml", advice.stack_text)
    results.atomic_write(out / "job.fio", advice.job_text)
    results.atomic_write(out / "command.txt", command + "\n")
