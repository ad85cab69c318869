"""Everything ``make validate-sim`` measures, into one folder: the cells, this CPU's profile, its roofline.

``run.validate`` measures and simulates every cell (``events.jsonl``; the rows become
``validation.csv``); then the ``cpu`` profile calibrated here (``cpu.yaml``, ``cpu``) and its
roofline against the measured layers (``roofline.csv``); last ``calibration.json``: the settings,
the calibration, how long it took and how loaded the machine was before and after.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ...sim.measured.cpu import cpu_roofline
from ..rows import write_csv
from .cpu import RooflineRow, roofline_rows, write_profile
from .run import Settings, Validation, validate

PROFILE_HEADER = (
    "This CPU as a roofline profile, calibrated by `make validate-sim` (sim/measured/cpu.py):\n"
    "peak = the best 1-thread square fp32 matmul (16..1024), efficiency = each matmul's rate / peak\n"
    "by its FLOPs (non-decreasing), memory bandwidth = a 64 MiB copy, op_min_s = one eager operator\n"
    "call, link and overhead = this device's calibration (sim/measured/device.py). Use: hardware=<path to this file> is not a group option;\n"
    "copy it to conf/hardware/ to simulate on it."
)


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def measure(out: Path, quick: bool) -> Validation:
    """Measure into ``out`` (``quick``: ``Settings.quick``, a smoke run of every step)."""
    t0, load_before = time.perf_counter(), _load()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    v = validate(out, Settings.quick() if quick else Settings(), log=log)
    hw = cpu_roofline(v.device)
    write_profile(hw, out / "cpu.yaml", PROFILE_HEADER)
    write_csv(out / "roofline.csv", RooflineRow, roofline_rows(v.profiles, hw))
    calib = {
        **v.calibration,
        "seconds": time.perf_counter() - t0,
        "load_before": load_before,
        "load_after": _load(),
        "quick": quick,
    }
    (out / "calibration.json").write_text(json.dumps(calib, indent=1))
    return v
