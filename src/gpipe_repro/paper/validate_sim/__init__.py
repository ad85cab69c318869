"""The simulator's validation (issue #9): measure the cells on this machine, simulate, compare.

    python -m gpipe_repro.paper validate-sim --publish     # make validate-sim -> reports/sim/
    python -m gpipe_repro.paper validate-sim --quick       # a smoke run of every step

Experiments and measurement: ``measure.simulator`` (the grid: its ``Settings``; ``--quick``: fewer
cells, one round, two steps), which writes ``events.jsonl``, ``cpu.yaml`` and ``calibration.json``
and returns the rows of ``validation.csv`` and ``roofline.csv``. Summary: ``findings`` and ``split``
(the error by remat, schedule and (model, K, remat) group: ``split.csv``, ``groups.csv``). Page:
``templates/sim.md.j2``, the plots and the traces (``figures``), from those files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...measure.calibration import Calibration
from ...measure.roofline_check import RooflineRow
from ...measure.simulator import TRACE_CELL, CellRow, measure
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import write_csv
from ..template import render
from . import findings, split
from .figures import plot_cells, trace_cell

TRACES = ("cell", "worst_real", "worst_emulated")


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
        """``sim.md``, ``split.csv`` and ``groups.csv``, the plots and the traces of the chosen cell
        and of the worst real and emulated cells, from the rows and the files beside them."""
        rows, calib = report.rows, Calibration.load(out) or Calibration()
        plot_cells(rows, out / "validation.png")
        summ = findings.summarize(rows)
        worst = [
            (kind, trace_cell(out, key, f"worst_{kind}"), w)
            for kind, key, w in findings.worst_cells(rows)
        ]
        page = render(
            "sim", report.provenance, "Simulator validation", calib=calib,
            cores=calib.cores or "?", quiet=findings.QUIET,
            target_cells=findings.target_cells(summ), **split.summary(rows, out),
            speed=summ["real"] if summ.get("real", {}).get("normalized") else None,
            **findings.by_group(rows),
            dilations=", ".join(f"{k} ×{v:g}" for k, v in calib.dilations.items()),
            traced=trace_cell(out, TRACE_CELL, "cell"), worst=worst,
            cell_tables=findings.cell_tables(rows), variants=findings.variants(rows),
            roofline=findings.roofline(out),
        )  # fmt: skip
        (out / "sim.md").write_text(page)
        names = ["sim.md", "validation.png", "roofline.png"]
        names += [
            f"trace_{t}{e}" for t in TRACES for e in ("_measured.json", "_simulated.json", ".png")
        ]
        written = [out / "split.csv", out / "groups.csv"]
        return written + [out / n for n in names if (out / n).exists()]


ARTEFACT = ValidateSim()
