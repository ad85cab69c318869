"""The simulator's validation as an artefact: measure the cells on this machine, simulate, compare.

    python -m gpipe_repro.paper validate-sim --publish     # make validate-sim -> reports/sim/ (~20 min)
    python -m gpipe_repro.paper validate-sim --quick       # a smoke run of every step

Experiments: ``run.Settings`` (the grid; ``--quick``: fewer cells, one round, two steps). Collect:
``measure`` (``validation.csv``, ``events.jsonl``, ``cpu.yaml``, ``roofline.csv``,
``calibration.json``). Render: ``text.markdown`` (``sim.md``, plots, traces) and ``split`` (the error
by remat, schedule and (model, K, remat) group: ``split.csv``, ``groups.csv``), from those files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...errors import UserError
from ..artefact import Artefact, Report
from ..provenance import Provenance
from .measure import measure
from .run import CellRow
from .text import markdown


class ValidateSim(Artefact[CellRow]):
    """The simulator against the real engine (K = 1, 2) and emulation (K = 4, 8) on this machine."""

    name = "validate-sim"
    folder = "sim"
    row = CellRow
    command = "make validate-sim"
    csv = "validation.csv"
    siblings = ("calibration.json", "events.jsonl", "roofline.csv", "cpu.yaml")

    def options(self, parser: argparse.ArgumentParser) -> None:
        help = "fewer cells, one round, two steps: a smoke run"
        parser.add_argument("--quick", action="store_true", help=help)

    def variant(self, opts: argparse.Namespace) -> str | None:
        return "quick" if getattr(opts, "quick", False) else None

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[CellRow]:
        if source is not None:
            raise UserError("--from takes its validation.csv (re-render), not a folder")
        v = measure(out, opts.quick)
        return Report(v.rows, Provenance.here(v.device.device))

    def render(self, report: Report[CellRow], out: Path) -> list[Path]:
        return markdown(report.rows, report.provenance, out)


ARTEFACT = ValidateSim()
