"""The simulator's validation (issue #9): measure the cells on this machine, simulate, compare.

    python -m gpipe_repro.paper validate-sim --publish     # make validate-sim -> reports/sim/
    python -m gpipe_repro.paper validate-sim --quick       # a smoke run of every step

Measurement: ``measure.simulator``. Summary: ``findings``, ``split`` (by remat, schedule and
group) and ``heldout`` (calibration and held-out models apart). Page: ``templates/sim.md.j2`` (its
lines: ``templates/sim_lines.md.j2``) and ``figures``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...measure.calibration import Calibration
from ...measure.roofline_check import RooflineRow
from ...measure.simulator import TRACE_CELL, CellRow, measure
from ...typed_csv import write_csv
from ..artefact import Artefact, Report
from ..claims import TARGETS_LEAD, targeted
from ..provenance import Provenance
from ..template import render
from . import findings, heldout, split
from .figures import plot_cells, trace_cell

TRACES = ("cell", "worst_real", "worst_emulated")
# what ``render`` writes, in order: the summary's CSVs, the page, the plots, the traces
WRITTEN = "split.csv groups.csv heldout.csv sim.md validation.png roofline.png".split() + [
    f"trace_{t}{e}" for t in TRACES for e in ("_measured.json", "_simulated.json", ".png")
]


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
        """The page, the summary's CSVs, the plots and the traces, from the rows and the files
        beside them."""
        rows, calib = report.rows, Calibration.load(out) or Calibration()
        plot_cells(rows, out / "validation.png")
        summ = findings.summarize(rows)
        worst = [
            (kind, trace_cell(out, key, f"worst_{kind}"), w)
            for kind, key, w in findings.worst_cells(rows)
        ]
        sp = split.summary(rows, out)
        judged = [
            targeted("sim_cells", "met" if s["met"] else "not met", "Targets", kind=kind, s=s,
                     goal=findings.TARGETS[kind])
            for kind, s in summ.items()
        ] + [
            targeted("sim_bias", v["target"], "Bias per (model, K, remat) group", v=v,
                     bias=split.BIAS, noise=split.NOISE)
            for v in sp["verdicts"]
        ]  # fmt: skip
        held = heldout.summary(rows, out)
        real = [r for r in rows if r.kind == "real"]
        judged += [
            targeted("sim_raw", "?" if top.met is None else "met" if top.met else "not met",
                     "What a user sees: the raw error, calibration and held-out models apart",
                     top=top, groups=groups, top_max=heldout.MAX, twins=findings.twins(
                         [r for r in real if heldout.set_of(r.model) == top.part], raw=True))
            for top, groups in (held["heldout"] or {}).get("sets", [])
        ]  # fmt: skip
        page = render(
            "sim", report.provenance, "Simulator validation", judged, TARGETS_LEAD, calib=calib,
            quiet=findings.QUIET, summ=summ, targets=findings.TARGETS, **sp, **held,
            speed=summ["real"] if summ.get("real", {}).get("normalized") else None,
            **findings.by_group(rows), traced=trace_cell(out, TRACE_CELL, "cell"), worst=worst,
            cell_tables=findings.cell_tables(rows), variants=findings.variants(rows),
            roofline=findings.roofline(out),
        )  # fmt: skip
        (out / "sim.md").write_text(page)
        return [out / n for n in WRITTEN if (out / n).exists()]


ARTEFACT = ValidateSim()
