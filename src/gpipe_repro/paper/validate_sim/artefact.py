"""The simulator's validation as an artefact: measure the cells on this machine, simulate, compare.

    python -m gpipe_repro.paper validate-sim --publish     # make validate-sim -> reports/sim/ (~20 min)
    python -m gpipe_repro.paper validate-sim --quick       # a smoke run of every step

Experiments: ``run.Settings`` (the grid; ``--quick``: fewer cells, one round, two steps). Collect:
``run.validate`` measures and simulates every cell (``validation.csv``, ``events.jsonl``), then the
``cpu`` profile calibrated here (``cpu.yaml``) and its roofline against the measured layers
(``roofline.csv``), and ``calibration.json``. Render: ``text.markdown`` (``sim.md``, plots, traces).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from ...errors import UserError
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import write_csv
from .cpu import RooflineRow, calibrate_cpu, roofline_rows, write_profile
from .run import CellRow, Settings, validate
from .text import markdown

__all__ = ["ValidateSim", "ARTEFACT"]

PROFILE_HEADER = (
    "This CPU as a roofline profile, calibrated by `make validate-sim` (paper/validate_sim/cpu.py):\n"
    "peak = the best 1-thread square fp32 matmul (16..1024), efficiency = each matmul's rate / peak\n"
    "by its FLOPs (non-decreasing), memory bandwidth = a 64 MiB copy, link and overhead = this\n"
    "device's calibration (sim/device.py). Use: hardware=<path to this file> is not a group option;\n"
    "copy it to conf/hardware/ to simulate on it."
)


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


class ValidateSim(Artefact[CellRow]):
    """The simulator against the real engine (K = 1, 2) and emulation (K = 4, 8) on this machine."""

    name = "validate-sim"
    folder = "sim"
    row = CellRow
    command = "make validate-sim"
    csv = "validation.csv"
    siblings = ("calibration.json", "events.jsonl", "roofline.csv", "cpu.yaml")

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--quick", action="store_true", help="fewer cells, one round, two steps: a smoke run"
        )

    def variant(self, opts: argparse.Namespace) -> str | None:
        return "quick" if getattr(opts, "quick", False) else None

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[CellRow]:
        if source is not None:
            raise UserError("--from takes its validation.csv (re-render), not a folder")
        t0, load_before = time.perf_counter(), _load()
        log = lambda msg: print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)  # noqa: E731
        v = validate(out, Settings.quick() if opts.quick else Settings(), log=log)
        hw = calibrate_cpu(v.device)
        write_profile(hw, out / "cpu.yaml", PROFILE_HEADER)
        write_csv(out / "roofline.csv", RooflineRow, roofline_rows(v.profiles, hw))
        calib = {
            **v.calibration,
            "seconds": time.perf_counter() - t0,
            "load_before": load_before,
            "load_after": _load(),
            "quick": opts.quick,
        }
        (out / "calibration.json").write_text(json.dumps(calib, indent=1))
        return Report(v.rows, Provenance.here(v.device.device))

    def render(self, report: Report[CellRow], out: Path) -> list[Path]:
        return markdown(report.rows, report.provenance, out)


ARTEFACT = ValidateSim()
