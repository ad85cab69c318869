"""The planner's validation as an artefact: plan each scenario, measure every configuration, compare.

    python -m gpipe_repro.paper validate-plan --publish   # make validate-plan -> reports/plan/
    python -m gpipe_repro.paper validate-plan --quick     # make validate-plan-quick -> outputs/

Scenarios and grid: ``run.Settings`` (``--quick``: two models, two caps, K <= 4, M <= 4). Collect:
``run.collect`` (``validation.csv``, ``calibration.json``). Render: ``text.markdown`` (``plan.md``,
``plan.png``), from those files alone.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ...measure.planner import PlanRow, run
from ..artefact import Artefact, Report
from ..provenance import Provenance
from .text import markdown


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

    def render(self, report: Report[PlanRow], out: Path) -> list[Path]:
        return markdown(report.rows, report.provenance, out)


ARTEFACT = ValidatePlan()
