"""The planner's validation's summary maths on synthetic rows: regret, rank of the best, Spearman,
repeatability, the rules' gains, memory against the cap, and the target lines met or not."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.planner import PlanRow
from gpipe_repro.paper.template import words
from gpipe_repro.paper.validate_plan.findings import (
    real_picks,
    repeatability,
    summarize,
    targets,
)


def _row(sc: str, rank: int | None, pred: float, meas: float | None, **kw) -> PlanRow:
    base = dict(
        scenario=sc,
        model=sc.split("/")[0],
        cap=sc.split("/")[1],
        cap_mib=10.0,
        K=2,
        M=4,
        schedule="gpipe",
        checkpoint="never/never",
        balance="3-3",
        kind="real",
        micro_batch=8,
        planner_rank=rank,
        rules="",
        fits=True,
        predicted_step_s=pred,
        predicted_peak_mib="4.000/5.000",
        measured_step_s=meas,
    )
    return PlanRow(**{**base, **kw})


def _scenario(sc: str, measured: list[float], **pick_kw) -> list[PlanRow]:
    """Candidates ranked 1.. by predicted step 1, 2, 3 ...; ``measured`` in that order."""
    return [
        _row(sc, i + 1, float(i + 1), m, **(pick_kw if i == 0 else {}))
        for i, m in enumerate(measured)
    ]


def test_regret_rank_and_spearman_of_a_scenario():
    # the pick measures 1.1 s, the best (rank 2) 1.0 s: regret 1 - 1.0 / 1.1
    (s,) = summarize(_scenario("m/loose", [1.1, 1.0, 3.0, 4.0]))
    assert s.pick.planner_rank == 1 and s.best.planner_rank == 2
    assert s.regret == pytest.approx(1 - 1.0 / 1.1)
    assert s.best_rank == 2
    # measured order 2,1,3,4 against predicted 1,2,3,4: rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert s.spearman == pytest.approx(0.8)
    assert s.candidates == 4


def test_spearman_within_each_kind():
    rows = _scenario("m/loose", [1.0, 2.0, 4.0, 3.0])
    for r in rows[2:]:
        r.kind = "emulated"
    (s,) = summarize(rows)
    assert s.spearman_by_kind["real"] == pytest.approx(1.0)
    assert s.spearman_by_kind["emulated"] == pytest.approx(-1.0)  # two values, swapped
    assert s.spearman == pytest.approx(0.8)


def test_a_perfect_pick_has_no_regret_and_rank_one():
    (s,) = summarize(_scenario("m/tight", [1.0, 2.0, 3.0]))
    assert s.regret == 0.0 and s.best_rank == 1 and s.spearman == pytest.approx(1.0)


def test_unmeasured_and_over_cap_rows_are_not_candidates():
    rows = _scenario("m/mid", [2.0, 1.5])
    rows.append(_row("m/mid", 3, 3.0, None))  # not measured
    rows.append(_row("m/mid", 4, 4.0, 0.5, fits=False))  # over the cap: never a candidate
    (s,) = summarize(rows)
    assert s.candidates == 2 and s.best.planner_rank == 2
    assert s.regret == pytest.approx(0.25)


def test_repeatability_is_the_rounds_difference_over_their_mean():
    r = _row("m/loose", 1, 1.0, 1.0, round1_s=1.0, round2_s=1.2)
    assert repeatability(r) == pytest.approx(0.2 / 1.1)
    assert repeatability(_row("m/loose", 1, 1.0, 1.0, round1_s=1.0)) is None
    rows = [
        _row("m/loose", 1, 1.0, 1.0, round1_s=1.0, round2_s=1.1),
        _row("m/loose", 2, 2.0, 2.0, round1_s=2.0, round2_s=2.0),
        _row("m/loose", 3, 3.0, 3.0, round1_s=3.0, round2_s=3.6),
    ]
    (s,) = summarize(rows)
    assert s.repeat == pytest.approx(0.1 / 1.05)  # the median of 0.0952, 0, 0.1818


def test_rule_gains_and_a_rule_that_does_not_fit():
    rows = _scenario("m/loose", [1.0, 1.2], rules="params")  # the pick is the params rule's too
    rows.append(_row("m/loose", None, 5.0, 1.5, rules="equal_layers;M=4K"))
    rows.append(_row("m/loose", None, 6.0, None, rules="remat_always", fits=False))
    (s,) = summarize(rows)
    assert s.gains["params"] == pytest.approx(0.0)
    assert s.gains["equal_layers"] == pytest.approx(0.5)
    assert s.gains["M=4K"] == pytest.approx(0.5)
    assert s.gains["remat_always"] is None
    assert s.candidates == 2  # the rules' own rows are no candidates


def test_pick_memory_against_its_cap():
    (s,) = summarize(_scenario("m/loose", [1.0, 2.0], measured_peak_mib="9.500/10.500"))
    assert s.pick_peak_mib == pytest.approx(10.5) and s.pick_over_cap is True
    (s,) = summarize(_scenario("m/loose", [1.0, 2.0]))
    assert s.pick_peak_mib is None and s.pick_over_cap is None


def _by_what(sums):
    return {t.what: t for t in targets(sums)}


def test_targets_met_from_the_numbers():
    rows = _scenario("a/loose", [1.0, 2.0, 3.0], measured_peak_mib="5.000/5.000")
    # b: the best is second; over ten candidates one swapped pair: rho = 1 - 12 / 990
    b = [1.01, 1.0, *range(3, 11)]
    rows += _scenario("b/loose", [float(x) for x in b], measured_peak_mib="5.000/5.000")
    sums = summarize(rows)
    assert sums[1].spearman == pytest.approx(1 - 12 / 990)
    t = _by_what(sums)
    assert all(x.met for x in t.values()), t
    # regrets 0 and 1 - 1 / 1.01
    assert t["median regret"].value == {"regret": pytest.approx((1 - 1 / 1.01) / 2)}
    assert words("plan_lines", t["median regret"].line, **t["median regret"].value) == "0.5%"


def test_targets_not_met_from_the_numbers():
    # regret 50% and the best at rank 4 in one scenario; a pick over its cap; rho < 0.9
    rows = _scenario("a/loose", [2.0, 3.0, 4.0, 1.0], measured_peak_mib="11.000/1.000")
    rows += _scenario("b/loose", [1.0, 2.0, 3.0, 4.0])
    t = _by_what(summarize(rows))
    assert not t["worst regret"].met and t["worst regret"].value == {"regret": 0.5}
    assert not t["median regret"].met  # median of 0.5 and 0 = 25%
    top3 = t["best measured in the planner's top 3"]
    assert not top3.met and top3.value == {"share": 0.5}
    assert words("plan_lines", top3.line, **top3.value) == "50% of scenarios"
    over = t["picks over their cap when run"]  # b's pick: no peak, not measured
    assert not over.met and over.value == dict(over=["a/loose"], measured=1, unmeasured=["b/loose"])
    assert words("plan_lines", over.line, **over.value) == (
        "1 of 1 measured (a/loose); not measured (emulated pick): b/loose"
    )
    rho = t["Spearman(predicted, measured) per scenario"]
    assert not rho.met and rho.value["low"] == ["a/loose"] and rho.value["lowest"] < 0.9
    assert words("plan_lines", rho.line, **rho.value).endswith("below 0.9 or undefined: a/loose")


def test_no_measured_scenario_gives_no_target():
    assert summarize([_row("m/loose", 1, 1.0, None)]) == []
    assert targets([]) == []


def test_the_page_describes_the_emulation_as_the_calibration_ran_it(tmp_path):
    from gpipe_repro.measure.calibration import Calibration
    from gpipe_repro.paper.artefact import Report
    from gpipe_repro.paper.provenance import Provenance
    from gpipe_repro.paper.validate_plan import ARTEFACT

    def page(calib: Calibration | None, name: str) -> str:
        (tmp_path / name).mkdir()
        if calib is not None:
            calib.save(tmp_path / name)
        return ARTEFACT.markdown(Report([], Provenance(0)), tmp_path / name)

    calib = Calibration({"dilation_scale": 2.5, "Ks": [1, 2, 4, 8]}, dilations={"K=8": 10.0})
    plan = page(calib, "new")
    assert "2.5 times the ranks per core (K=8 ×10)" in plan and "K in [1, 2, 4, 8]" in plan
    assert "## Wall time" not in plan  # a calibration without the phases' seconds
    assert "(each layer sleeps its profiled cost)" in page(Calibration(), "old")  # no dilation
    none = page(None, "none")
    assert "K in ?" in none and "| (no scenario measured) | | | |" in none


def test_the_verdict_states_the_share_of_picks_that_ran_for_real(tmp_path):
    from gpipe_repro.paper.artefact import Report
    from gpipe_repro.paper.provenance import Provenance
    from gpipe_repro.paper.validate_plan import ARTEFACT

    rows = [
        *_scenario("a/loose", [1.0, 2.0]),
        *_scenario("b/loose", [1.0, 2.0], kind="emulated", K=4),
        *_scenario("c/loose", [1.0, 2.0], kind="emulated", K=8),
        *_scenario("d/loose", [1.0, 2.0]),
    ]
    rows[0:0] = [_row("a/loose", None, 9.0, 9.0, kind="emulated")]  # a rule's row: not a pick
    sums = summarize(rows)
    assert real_picks(sums) == (2, 4)
    page = ARTEFACT.markdown(Report(rows, Provenance(0)), tmp_path)
    met = sum(t.met for t in targets(sums))
    line = (
        f"Verdict: {met} of {len(targets(sums))} targets met; 2 of 4 picks (50%) ran for real, "
        "2 emulated."
    )
    assert f" |\n\n{line}\n\n## Regret per scenario" in page  # below the targets' table
    assert "Verdict:" not in ARTEFACT.markdown(
        Report([], Provenance(0)), tmp_path
    )  # nothing measured
