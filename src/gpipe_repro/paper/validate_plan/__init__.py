"""The planner's validation: plan each scenario, measure every configuration, compare (issue #19).

    python -m gpipe_repro.paper validate-plan --publish   # make validate-plan -> reports/plan/
    python -m gpipe_repro.paper validate-plan --quick     # make validate-plan-quick -> outputs/

Scenarios, grid and measurement: ``measure.planner`` (``--quick``: two models, two caps, K <= 4,
M <= 4; ``validation.csv``, ``calibration.json``). Summary: ``findings`` (per scenario, and the
targets). Page: ``templates/plan.md.j2`` and ``plan.png``, from those files alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...engine.schedule import SCHEDULES
from ...measure.calibration import Calibration
from ...measure.models import N
from ...measure.planner import PlanRow, run
from ...measure.scenarios import RULES
from ..artefact import Artefact, Report
from ..claims import TARGETS_LEAD, Answer, targeted
from ..plot import figure
from ..provenance import Provenance
from ..stats import median
from ..template import render
from .findings import Summary, peaks, real_picks, summarize, targets

TITLE = "The planner against every configuration measured (gpipe-plan, issue #19)"


class ValidatePlan(Artefact[PlanRow]):
    """The planner's pick against every configuration measured, per model and memory cap (#19)."""

    name = "validate-plan"
    folder = "plan"
    row = PlanRow
    command = "make validate-plan"
    csv = "validation.csv"
    siblings = ("calibration.json",)
    page = "plan"
    in_process = True
    switch = ("quick", "two models, two caps, K <= 4, M <= 4: every step in a few minutes")

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[PlanRow]:
        t0 = time.perf_counter()

        def log(msg: str) -> None:
            print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

        rows, calib = run(out, opts.quick, log)
        return Report(rows, Provenance.here(calib.device["device"]))

    def markdown(self, report: Report[PlanRow], out: Path) -> str:
        s = summary(report.rows, Calibration.load(out))
        return render("plan", report.provenance, TITLE, answer(s), TARGETS_LEAD, **s)

    def plot(self, report: Report[PlanRow], path: Path) -> None:
        plot(summarize(report.rows), report.rows, path)


def _sps(step: float | None) -> float:
    return N / step if step else 0.0


def answer(s: dict[str, Any]) -> list[Answer]:
    """The page's answer from its ``summary``: the targets met or not, and the condition they rest
    on — how many of the picks ran for real (K <= 2) and how many are emulated configurations."""
    ts = s["targets"]
    if not ts:
        return []
    missed = [t.what for t in ts if not t.met]
    verdict = "every target met" if not missed else f"not met: {', '.join(missed)}"
    return [targeted("plan", verdict, "Targets", scenarios=len(s["summaries"]), targets=len(ts),
                     missed=missed, real=s["real"], n=s["n"])]  # fmt: skip


def summary(rows: Sequence[PlanRow], calib: Calibration | None) -> dict[str, Any]:
    """What the page says (its tables: ``templates/plan.md.j2``): the targets and how many picks ran
    for real, each scenario's regret, the rules' gains, the picks' memory (``findings.summarize``),
    the predicted peaks' error over every measured stage, the calibration."""
    sums = summarize(rows)
    errs = [
        (p - m) / m
        for r in rows
        if r.measured_peak_mib
        for p, m in zip(peaks(r.predicted_peak_mib), peaks(r.measured_peak_mib))
        if m > 0
    ]
    real, n = real_picks(sums)
    return {
        "summaries": sums,
        "targets": targets(sums),
        "real": real,
        "n": n,
        "schedules": ", ".join(s for s in SCHEDULES if any(r.schedule == s for r in rows)),
        "calib": calib,
        "rules": list(RULES.values()),
        "sps": _sps,
        "errors": errs,
        "errors_median": median(errs),
        "deciles": statistics.quantiles(errs, n=10) if len(errs) >= 2 else errs * 9,
        "under": sum(e < 0 for e in errs) / len(errs) if errs else None,
    }


def plot(sums: Sequence[Summary], rows: Sequence[PlanRow], path: Path) -> None:
    with figure(path, 1, 2, figsize=(12, 4.5)) as (_, (a, b)):
        names = [s.scenario for s in sums]
        x = range(len(sums))
        a.bar([i - 0.2 for i in x], [100 * s.regret for s in sums], 0.4, label="regret")
        a.bar(
            [i + 0.2 for i in x],
            [100 * (s.repeat or 0) for s in sums],
            0.4,
            label="repeatability (same config twice)",
        )
        a.axhline(2, ls="--", c="gray", lw=0.8)
        a.set_xticks(list(x), names, rotation=60, ha="right", fontsize=7)
        a.set_ylabel("%")
        a.set_title("regret of the pick vs the machine's repeatability")
        a.legend(fontsize=7)
        for s in sums:
            rs = [
                r for r in rows if r.scenario == s.scenario and r.planner_rank and r.measured_step_s
            ]
            b.scatter(
                [_sps(r.predicted_step_s) for r in rs],
                [_sps(r.measured_step_s) for r in rs],
                s=8,
                label=s.scenario,
            )
        b.set_xlabel("predicted samples/s")
        b.set_ylabel("measured samples/s")
        b.set_xscale("log")
        b.set_yscale("log")
        b.set_title("every listed configuration")
        b.legend(fontsize=6, ncol=2)


ARTEFACT = ValidatePlan()
