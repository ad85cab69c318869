"""The simulator's validation as an artefact: measure the cells on this machine, simulate, compare.

    python -m gpipe_repro.paper validate-sim --publish     # make validate-sim -> reports/sim/ (~25 min)
    python -m gpipe_repro.paper validate-sim --quick       # a smoke run of every step

Experiments: ``run.Settings`` (the grid; ``--quick``: fewer cells, one round, two steps). Collect:
``measure`` (``validation.csv``, ``events.jsonl``, ``cpu.yaml``, ``roofline.csv``,
``calibration.json``). Render: ``text.markdown`` (``sim.md``, plots, traces) and ``split`` (the error
by remat, schedule and (model, K, remat) group: ``split.csv``, ``groups.csv``), from those files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...measure.roofline import RooflineRow
from ...measure.simulator import CellRow, measure
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import write_csv
from .text import markdown


class ValidateSim(Artefact[CellRow]):
    """The simulator against the real engine (K = 1, 2) and emulation (K = 4, 8) on this machine."""

    name = "validate-sim"
    folder = "sim"
    row = CellRow
    command = "make validate-sim"
    csv = "validation.csv"
    siblings = ("calibration.json", "events.jsonl", "roofline.csv", "cpu.yaml")
    in_process = True
    switch = ("quick", "fewer cells, one round, two steps: a smoke run")

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[CellRow]:
        v = measure(out, opts.quick)
        write_csv(out / "roofline.csv", RooflineRow, v.roofline)
        return Report(v.rows, Provenance.here(v.device.device))

    def render(self, report: Report[CellRow], out: Path) -> list[Path]:
        return markdown(report.rows, report.provenance, out)


ARTEFACT = ValidateSim()
