"""The validation of docs/validation.md as recorded on the development machine: the simulator,
run again on the recorded calibration, must give the recorded predictions, so a change of the
simulator that moves them is seen here (re-record with scripts/real-validation.py after
`vmio validate`; docs/validation.md has the figures and their reading).

Records: real_validation_figures.json (version 1: family 1, seed 5, with its raid0 part) and
real_validation_figures_offgrid.json (version 2: family 2, off the battery's grid, with the
percentiles; no raid0 part) and real_validation_figures_offgrid_29nov.json (version 2, seed 9 on
this machine's disk with the flash model's stream, draining processor and flush drain fitted)
and real_validation_figures_offgrid_29nov_b.json (version 2, seed 8, with the device-wide
freezes and the virtio ring fitted) and real_validation_figures_offgrid_29nov_c.json and _d.json
(version 2, seeds 8 and 9, with the ring's splits at max_segments and its merges) and _e and
_f (the same model, seeds 8 and 9, fresh calibrations of a later run) and _g and _h (seeds 8
and 9 with freezes started by commands, each direction's command cost and mq-deadline's
dispatch position fitted), when present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vmio.real import compare, validate

HERE = Path(__file__).parent
RECORDS = [
    p
    for p in (
        HERE / "real_validation_figures.json",
        HERE / "real_validation_figures_offgrid.json",
        HERE / "real_validation_figures_offgrid_29nov.json",
        HERE / "real_validation_figures_offgrid_29nov_b.json",
        HERE / "real_validation_figures_offgrid_29nov_c.json",
        HERE / "real_validation_figures_offgrid_29nov_d.json",
        HERE / "real_validation_figures_offgrid_29nov_e.json",
        HERE / "real_validation_figures_offgrid_29nov_f.json",
        HERE / "real_validation_figures_offgrid_29nov_g.json",
        HERE / "real_validation_figures_offgrid_29nov_h.json",
    )
    if p.is_file()
]


DOCS = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in RECORDS}
# Each record's parts (version 2 records have no raid0 part): only parts a record has are
# cases, so nothing here is skipped.
PARTS = [
    (stem, part) for stem, d in DOCS.items() for part in ("heldout", "raid0") if part in d["parts"]
]
RAID0 = [stem for stem, d in DOCS.items() if "raid0" in d["parts"]]


@pytest.fixture(scope="module", params=list(DOCS))
def doc(request) -> dict:
    return DOCS[request.param]


def test_the_recorded_workloads_are_the_held_out_family_of_the_recorded_seed(doc):
    family = 1 if doc["version"] == 1 else validate.FAMILY
    drawn = validate.heldout(doc["seed"], 400, family)
    for part in doc["parts"].values():
        assert set(part["workloads"]) <= {w.name for w in drawn}
    if family == 1:
        assert not any(w.in_battery_v1() for w in drawn)
    else:
        assert not any(w.in_battery() or w.on_grid() for w in drawn)


@pytest.mark.parametrize(("stem", "part"), PARTS, ids=[f"{s}-{p}" for s, p in PARTS])
def test_the_simulator_still_predicts_what_was_recorded_beside_the_real_figures(
    stem, part, tmp_path: Path
):
    doc = DOCS[stem]
    c = validate.recorded_comparison(doc, part, tmp_path / part)
    rec = doc["parts"][part]
    assert len(c.rows) == len(rec["real"]) and not c.unmatched_real and not c.unmatched_sim
    for row in c.rows:
        want = rec["sim"]["/".join(v for _, v in row.key)]
        assert row.sim.bw_bytes == pytest.approx(want["bw_bytes"], rel=1e-9)
        assert row.sim.lat_mean_ns == pytest.approx(want["lat_mean_ns"], rel=1e-9)
        assert row.real.runs >= 2, "several real repetitions per point"
    assert compare.summary_line(c) == rec["summary"]
    # Version 2 keeps the percentiles: the simulator's are still the recorded ones.
    for t in rec.get("tails", []):
        sim = validate._percentiles(tmp_path / part / f"{t['point']}.json")
        assert sim.get(t["direction"], {}).get(t["label"]) == t["sim"], t


@pytest.mark.parametrize("stem", RAID0)
def test_the_raid0_prediction_is_one_disk_shared_by_two_files(stem, tmp_path: Path):
    """Two regions of one device never beat the device: every raid0 prediction is within 5 %
    of the single file's at the same workload (both recorded parts ran the first workloads)."""
    doc = DOCS[stem]
    single = validate.recorded_comparison(doc, "heldout", tmp_path / "h")
    raid = validate.recorded_comparison(doc, "raid0", tmp_path / "r")
    one = {row.key: row.sim.bw_bytes for row in single.rows}
    both = [(row.sim.bw_bytes, one[row.key]) for row in raid.rows if row.key in one]
    assert both
    for r, s in both:
        assert r <= s * 1.05, (r, s)
