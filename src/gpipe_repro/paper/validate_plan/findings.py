"""The planner's validation in numbers: one row per measured configuration, a summary per scenario.

A *scenario* is one model under one memory cap; its rows are the planner's ranked candidates
(``planner_rank`` 1 = the pick) and the configurations the rules of thumb give, each predicted and,
where it fits the cap, measured. ``summarize`` gives per scenario the pick's regret against the best
measured candidate, that one's rank, Spearman of predicted and measured step, the repeatability of
the same configuration in two rounds (the machine's noise), the pick's gain over each rule and its
memory against the cap. ``targets`` turns them into the issue's target lines; ``real_picks``
counts the picks that ran for real rather than emulated: a target met on emulated picks rests on
the emulation as much as on the planner (issue #38).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...measure.planner import PlanRow
from ...measure.scenarios import RULES
from ..stats import median, spearman


def peaks(text: str) -> list[float]:
    return [float(v) for v in text.split("/")] if text else []


def repeatability(row: PlanRow) -> float | None:
    """|round 1 - round 2| / their mean, None with one round."""
    a, b = row.round1_s, row.round2_s
    if a is None or b is None:
        return None
    return abs(a - b) / ((a + b) / 2)


@dataclass
class Summary:
    scenario: str
    model: str
    cap: str
    cap_mib: float
    candidates: int  # measured candidates
    pick: PlanRow
    best: PlanRow
    regret: float
    best_rank: int
    spearman: float | None
    repeat: float | None  # median repeatability over the candidates
    pick_peak_mib: float | None  # the pick's largest measured stage peak; None: not measured
    gains: dict[str, float | None]  # rule -> gain of the pick (None: the rule does not fit)
    spearman_by_kind: dict[str, float | None]  # real | emulated -> Spearman within that kind
    wait: float | None  # median share of a step a rank waited for a core (other load)

    @property
    def pick_over_cap(self) -> bool | None:
        return None if self.pick_peak_mib is None else self.pick_peak_mib > self.cap_mib


def _rho(rows: Sequence[PlanRow]) -> float | None:
    """Spearman of predicted and measured step time (None: fewer than two distinct values)."""
    return spearman(
        [r.predicted_step_s for r in rows], [float(r.measured_step_s or 0) for r in rows]
    )


def summarize(rows: Sequence[PlanRow]) -> list[Summary]:
    """One ``Summary`` per scenario with a measured pick, in the rows' order."""
    out = []
    for sc in dict.fromkeys(r.scenario for r in rows):
        rs = [r for r in rows if r.scenario == sc]
        cands = [
            r for r in rs if r.planner_rank is not None and r.measured_step_s is not None and r.fits
        ]
        picks = [r for r in cands if r.planner_rank == 1]
        if not picks:
            continue
        pick = picks[0]
        best = min(cands, key=lambda r: (r.measured_step_s, r.planner_rank))
        assert best.measured_step_s is not None and pick.measured_step_s is not None
        reps = [x for r in cands if (x := repeatability(r)) is not None]
        waits = [r.core_wait_share for r in cands if r.core_wait_share is not None]
        gains: dict[str, float | None] = {}
        for rule in RULES:
            got = [r for r in rs if rule in r.rules.split(";")]
            m = got[0].measured_step_s if got and got[0].fits else None
            gains[rule] = None if m is None else m / pick.measured_step_s - 1
        mp = peaks(pick.measured_peak_mib)
        out.append(
            Summary(
                sc,
                pick.model,
                pick.cap,
                pick.cap_mib,
                len(cands),
                pick,
                best,
                1 - best.measured_step_s / pick.measured_step_s,
                best.planner_rank or 0,
                _rho(cands),
                median(reps),
                max(mp, default=None),
                gains,
                {k: _rho([r for r in cands if r.kind == k]) for k in ("real", "emulated")},
                median(waits),
            )
        )
    return out


@dataclass
class Target:
    what: str
    line: str  # the macro of ``templates/plan_lines.md.j2`` that words the value ...
    value: dict[str, Any]  # ... from these arguments
    goal: str
    met: bool


def targets(summaries: Sequence[Summary]) -> list[Target]:
    """The issue's targets, each from the summaries (an empty list: nothing was measured); the
    values worded by ``templates/plan_lines.md.j2``."""
    if not summaries:
        return []
    regrets = [s.regret for s in summaries]
    med, worst = statistics.median(regrets), max(regrets)
    top3 = sum(s.best_rank <= 3 for s in summaries) / len(summaries)
    over = [s.scenario for s in summaries if s.pick_over_cap]
    unmeasured = [s.scenario for s in summaries if s.pick_over_cap is None]
    measured = len(summaries) - len(unmeasured)
    low = [s.scenario for s in summaries if s.spearman is None or s.spearman < 0.9]
    lowest = min((s.spearman for s in summaries if s.spearman is not None), default=None)
    return [
        Target("median regret", "regret", {"regret": med}, "<= 2%", med <= 0.02),
        Target("worst regret", "regret", {"regret": worst}, "<= 5%", worst <= 0.05),
        Target("best measured in the planner's top 3", "top3", {"share": top3}, ">= 90%",
               top3 >= 0.9),
        Target("picks over their cap when run", "over",
               {"over": over, "measured": measured, "unmeasured": unmeasured}, "none", not over),
        Target("Spearman(predicted, measured) per scenario", "spearman",
               {"lowest": lowest, "low": low}, ">= 0.9 in every scenario", not low),
    ]  # fmt: skip


def real_picks(summaries: Sequence[Summary]) -> tuple[int, int]:
    """How many of the scenarios' picks ran for real (``kind`` real, not emulated), of how many."""
    return sum(s.pick.kind == "real" for s in summaries), len(summaries)
