"""The mutation fuzzer (vmio.fuzz): its classification, its determinism, and a short pass
through the real command line that must find nothing but successes and clean errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vmio import fuzz


def test_the_classifier_accepts_only_one_short_final_error_line():
    ok = "vmio: study x: 10% (1/10)\nvmio: error: s.toml:3:1: bad\n"
    assert fuzz.classify(2, ok, False) == fuzz.CLEAN
    assert fuzz.classify(0, "", False) == fuzz.SUCCESS
    assert fuzz.classify(2, "vmio: error: a\nvmio: error: b\n", False) == "multi-line"
    assert fuzz.classify(2, "vmio: error: a\n  |\n  ^ here\n", False) == "multi-line"
    assert fuzz.classify(2, "vmio: error: " + "x" * 401 + "\n", False) == "too long"
    assert fuzz.classify(1, "Traceback (most recent call last):\n", False) == "traceback"
    assert fuzz.classify(-6, "memory allocation of 8 bytes failed\n", False) == "signal SIGABRT"
    assert fuzz.classify(None, "", True) == "timeout"
    assert fuzz.classify(1, "thread 'x' panicked at src/a.rs:1:1\n", False) == "panic"
    assert fuzz.classify(3, "", False) == "exit 3"


def _contents(p: Path) -> object:
    """A file's bytes, or a directory's (name, kind, bytes) for every entry."""
    if p.is_file():
        return p.read_bytes()
    return sorted(
        (
            q.relative_to(p).as_posix(),
            "link" if q.is_symlink() else "fifo" if q.is_fifo() else "dir" if q.is_dir() else "",
            q.stat().st_size if q.is_file() and not q.is_symlink() else 0,
        )
        for q in p.rglob("*")
    )


def test_the_same_seed_makes_the_same_cases_and_mutations(tmp_path):
    fuzz.prepare_base(tmp_path / "base")
    made = []
    for run in ("a", "b"):
        cases = [fuzz.make_case(i, seed=5) for i in range(40)]
        for c in cases:
            if c.base != "cli":
                d = tmp_path / f"{run}-{c.index}"
                (d / c.base).parent.mkdir(parents=True)
                if c.kind == "report":  # a whole output directory
                    shutil.copytree(tmp_path / "base" / c.base, d / c.base)
                else:
                    (d / c.base).write_bytes((tmp_path / "base" / c.base).read_bytes())
                fuzz.apply_mutations(c, d)
        made.append(
            [
                (c.kind, c.base, c.argv, c.mutations)
                + (_contents(tmp_path / f"{run}-{c.index}" / c.base),)
                if c.base != "cli"
                else (c.kind, c.argv, c.mutations)
                for c in cases
            ]
        )
    assert made[0] == made[1]
    assert {c[0] for c in made[0]} == set(fuzz.KINDS)


def test_a_short_fuzz_pass_finds_only_successes_and_clean_errors(tmp_path):
    outcomes = fuzz.run(80, seed=1, jobs=2, timeout=60, save=tmp_path / "failures")
    assert len(outcomes) == 80
    assert {o.case.kind for o in outcomes} == set(fuzz.KINDS)
    assert all(o.ok for o in outcomes), fuzz.summary(outcomes)
    assert sum(o.outcome == fuzz.SUCCESS for o in outcomes) >= 10  # the bases do run


# Findings not fixed yet, each with why; drop a name once its fix lands.
PENDING: set[str] = set()


@pytest.fixture(scope="module")
def corpus_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("corpus") / "base"
    fuzz.prepare_base(base)
    return base


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=c.base,
            marks=pytest.mark.xfail(run=False, reason="fixed on another branch")
            if c.base in PENDING
            else (),
        )
        for c in fuzz.regression_cases()
    ],
)
def test_every_finding_of_the_regression_corpus_stays_a_success_or_a_clean_error(
    case, corpus_base, tmp_path
):
    o = fuzz.run_case(case, corpus_base, tmp_path, tmp_path / "saved", 60, 4096 << 20)
    assert o.ok, f"{case.base}: {o.outcome}: {o.stderr[-2000:]}"


def test_the_fuzzers_own_bound_ends_a_simulation_asked_to_run_for_hours_in_one_line(
    corpus_base, tmp_path
):
    # `vmio fio` for an hour of 4 KiB random reads at depth 16 (millions of simulated I/Os):
    # with the fuzzer's bound it is the simulator's bound line, well within the timeout;
    # a case that gives its own --max-events keeps it.
    argv = ["fio", "--stack", "vc/stack.toml", "--name=j", "--rw=randread", "--bs=4k"]
    argv += ["--iodepth=16", "--runtime=3600", "--time_based"]
    case = fuzz.Case(0, "fio", "cli", argv)
    o = fuzz.run_case(case, corpus_base, tmp_path, None, 60, 4096 << 20, max_events=20_000)
    assert o.outcome == "clean error"
    assert "passed its bound of 20000 events (--max-events" in o.stderr
    own = fuzz.Case(0, "fio", "cli", [*argv, "--max-events=30000"])
    o = fuzz.run_case(own, corpus_base, tmp_path, None, 60, 4096 << 20, max_events=20_000)
    assert "passed its bound of 30000 events" in o.stderr
