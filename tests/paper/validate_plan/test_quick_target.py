"""``make validate-plan-quick`` end to end: the planner runs, every configuration is measured, and
the report carries each scenario's regret and every target line judged met or not from its numbers.
Minutes: ``make test-targets`` runs it, ``make test`` does not."""

from __future__ import annotations

import json

import pytest
from _shared import make

from gpipe_repro.measure.planner import PlanRow
from gpipe_repro.paper.validate_plan.findings import summarize
from gpipe_repro.typed_csv import read_csv


@pytest.mark.target
@pytest.mark.timeout(900)
def test_validate_plan_quick_writes_its_report(tmp_path):
    make("validate-plan-quick", tmp_path, bound=840)
    out = tmp_path / "validate-plan"
    rows = read_csv(out / "validation.csv", PlanRow)
    sums = summarize(rows)
    assert {s.scenario for s in sums} == {
        f"{m}/{c}" for m in ("transformer", "imbalanced") for c in ("loose", "tight")
    }
    for s in sums:
        listed = [r for r in rows if r.scenario == s.scenario and r.planner_rank is not None]
        # every configuration the planner listed fits its cap and was measured, twice
        assert all(r.fits and r.measured_step_s and r.round2_s for r in listed)
        assert 0.0 <= s.regret < 1.0
        assert s.pick.measured_peak_mib  # measured for every pick, emulated ones included
    calib = json.loads((out / "calibration.json").read_text())
    for caps in calib["caps_mib"].values():  # the naive configuration fits loose, not tight
        assert caps["tight"] < caps["naive"] < caps["loose"]
    md = (out / "plan.md").read_text()
    assert (out / "plan.png").stat().st_size > 0
    assert md.count("| met |") + md.count("| **not met** |") == 5, md[:3000]
    assert calib["quick"] and calib["predicted_full_s"] > calib["seconds"]
