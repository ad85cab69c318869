"""What the schedules since GPipe buy (#39): fill-drain, 1F1B, interleaved 1F1B and ZB-H1 side by side.

    python -m gpipe_repro.paper schedules --publish   # make schedules -> reports/schedules/
    python -m gpipe_repro.paper schedules --no-cpu    # the published profile alone (not published)

The cells come from ``studies.schedules`` (simulated on each profile, and measured at K = 2 on this
CPU). Files: ``results.csv`` (``ScheduleRow``), ``timelines.json`` (the simulated events of one K, M
per schedule); page and ``schedules.png`` from those alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..studies.schedules import ScheduleRow, Settings, measured, simulated
from .artefact import Artefact, Report
from .provenance import Provenance
from .schedules_page import plot, summary
from .template import render

__all__ = ["Schedules", "ARTEFACT"]

TITLE = "What the schedules since GPipe buy"


class Schedules(Artefact[ScheduleRow]):
    """What the schedules since GPipe buy: throughput and per-stage memory of gpipe, 1f1b,
    interleaved and zb-h1 on the paper's Table 2 models, simulated, and measured at K = 2."""

    name = "schedules"
    folder = "schedules"
    row = ScheduleRow
    command = "make schedules"
    siblings = ("timelines.json",)
    page = "schedules"
    in_process = True
    switch = ("no-cpu", "the published profile alone: no CPU profile, no measured demo (minutes)")

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()

    def collect(
        self, source: Path | None, opts: argparse.Namespace, out: Path
    ) -> Report[ScheduleRow]:
        s = self.settings
        cpu = not getattr(opts, "no_cpu", False)
        hardware = s.hardware if cpu else tuple(h for h in s.hardware if h != "measured")
        rows, lines = simulated(s, hardware)
        (out / "timelines.json").write_text(json.dumps(lines))
        if cpu and s.demo:
            rows += measured(s, out)
        return Report(rows, Provenance.here())

    def markdown(self, report: Report[ScheduleRow], out: Path) -> str:
        return render("schedules", report.provenance, TITLE, **summary(report.rows))

    def plot(self, report: Report[ScheduleRow], path: Path) -> None:
        lines = path.parent / "timelines.json"
        plot(report.rows, json.loads(lines.read_text()) if lines.exists() else {}, path)


ARTEFACT = Schedules()
