"""``make validate-sim``: the simulator against the real engine on this machine -> ``reports/sim/``.

    python -m gpipe_repro.validation --out reports/sim            # the full validation (~20 min)
    python -m gpipe_repro.validation --out /tmp/sim --quick       # a smoke run of every step

Writes ``validation.csv`` (one row per cell), ``calibration.json``, ``events.jsonl``, the ``cpu``
profile calibrated here (``cpu.yaml``) and its roofline against the measured layers (``roofline.csv``),
then the report (``validation.report``: ``sim.md``, plots, traces).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

from ..metrics.summary import git_commit
from .cpu import ROOFLINE_COLUMNS, calibrate_cpu, roofline_rows, write_profile
from .report import write_report
from .run import Settings, validate


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reports/sim"))
    ap.add_argument(
        "--quick", action="store_true", help="fewer cells, one round, two steps: a smoke run"
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    load_before = _load()
    s = Settings.quick() if args.quick else Settings()
    v = validate(
        args.out, s, log=lambda msg: print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)
    )
    hw = calibrate_cpu(v.device)
    write_profile(
        hw,
        args.out / "cpu.yaml",
        "This CPU as a roofline profile, calibrated by `make validate-sim` (validation/cpu.py):\n"
        "peak = the best 1-thread square fp32 matmul (16..1024), efficiency = each matmul's rate / peak\n"
        "by its FLOPs (non-decreasing), memory bandwidth = a 64 MiB copy, link and overhead = this\n"
        "device's calibration (sim/device.py). Use: hardware=<path to this file> is not a group option;\n"
        "copy it to conf/hardware/ to simulate on it.",
    )
    rows = roofline_rows(v.profiles, hw)
    with open(args.out / "roofline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROOFLINE_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    calib = {
        **v.calibration,
        "seconds": time.perf_counter() - t0,
        "commit": git_commit(),
        "load_before": load_before,
        "load_after": _load(),
        "quick": args.quick,
    }
    (args.out / "calibration.json").write_text(json.dumps(calib, indent=1))
    print(write_report(args.out))


if __name__ == "__main__":
    main()
