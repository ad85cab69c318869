"""How would the simulator on this checkout have predicted the committed validation? A diagnostic.

    python bench/resimulate.py [--from reports/sim] [--shared-message-us 535 650 ...] [--json out.json]

``make validate-sim`` measures every cell and simulates it in the same run, so two of its reports
made with two versions of the simulator differ by the host's drift between the runs as well as by
the model. This holds the measurements fixed: it reads a validation's ``validation.csv`` (the
measured steps) and ``calibration.json`` (each model's layer profile, the device model) and
simulates every real cell again with the simulator of this checkout, as ``measure.simulator``
does, raw (the unscaled profile against the raw step) and probed (both at the speed probe's
reference speed). ``--shared-message-us`` tries other costs per message of ranks sharing the host's
cores in place of the calibrated one. Printed per schedule and K, and per model over K >= 2: the
cells, the median and largest |error| and the median signed error; with the simulator that made the
report, the first line says every error comes back as committed. Nothing here measures anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from gpipe_repro.measure import calibration
from gpipe_repro.measure.calibration import simulate_cell
from gpipe_repro.measure.simulator import CellRow
from gpipe_repro.sim.costs import Link
from gpipe_repro.sim.measured import DeviceModel
from gpipe_repro.sim.measured.profile import LayerProfile
from gpipe_repro.typed_csv import read_csv


def device(calib: dict[str, Any]) -> DeviceModel:
    """The device model a ``calibration.json`` recorded."""
    d = calib["device"]
    link = Link(**{**d["link"], "wake": tuple(tuple(p) for p in d["link"].get("wake", ()))})
    return DeviceModel(
        d["device"], link, d["overhead_s"], d["step_overhead_s"], d["sender_busy"],
        d["recompute_overhead_s"], d.get("shared_message_s", 0.0), "cache",
        tuple((float(b), float(p)) for b, p in d.get("idle_penalty", ())),
    )  # fmt: skip


def resimulate(
    rows: list[CellRow], profiles: dict[str, LayerProfile], dm: DeviceModel, cores: int
) -> list[dict[str, Any]]:
    """Per real cell of ``rows``: its committed and recomputed errors, raw and probed; its ranks
    on ``cores`` cores, the validation host's (``calibration.json``), not this one's."""
    with mock.patch.object(calibration, "cores", lambda: cores):  # what simulate_cell asks
        return [_cell(r, profiles[r.model], dm) for r in rows if r.kind == "real"]


def _cell(r: CellRow, prof: LayerProfile, dm: DeviceModel) -> dict[str, Any]:
    """One real cell simulated again as ``measure.simulator.validate`` simulated it."""
    balance = [int(b) for b in str(r.balance).split("-")]
    cell: dict[str, Any] = {"M": r.M, "schedule": r.schedule, "checkpoint": r.checkpoint}
    if len(balance) > r.K:  # several model cells per rank: the cell carries its own cut
        cell |= {"balance": balance, "virtual_stages": len(balance) // r.K}
    n = int(r.micro_batch)
    probed = simulate_cell(cell, r.K, balance, prof.costs[n], dm, shared=True).step_s
    raw = (
        simulate_cell(cell, r.K, balance, prof.raw[n], dm, shared=True).step_s
        if prof.raw is not None and r.speed is not None  # as the validation did
        else probed
    )
    measured_raw = r.measured_raw_step_s or r.measured_step_s
    return {
        "model": r.model, "K": r.K, "M": r.M, "schedule": r.schedule, "checkpoint": r.checkpoint,
        "error_raw": raw / measured_raw - 1, "committed_raw": r.rel_error_raw,
        "error": probed / r.measured_step_s - 1, "committed": r.rel_error,
    }  # fmt: skip


def summary(errors: list[float]) -> str:
    if not errors:
        return "—"
    return (
        f"{len(errors):3d} cells | median |e| {statistics.median(map(abs, errors)):6.1%} | "
        f"max {max(map(abs, errors)):6.1%} | bias {statistics.median(errors):+6.1%}"
    )


def groups(cells: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """All cells, then per schedule and K, then per model over K >= 2."""
    out = [("all", cells)]
    for sc, K in sorted({(c["schedule"], c["K"]) for c in cells}):
        out.append((f"{sc} K={K}", [c for c in cells if (c["schedule"], c["K"]) == (sc, K)]))
    for m in sorted({c["model"] for c in cells}):
        out.append((f"{m} K>=2", [c for c in cells if c["model"] == m and c["K"] >= 2]))
    return [(name, cs) for name, cs in out if cs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--from", dest="folder", type=Path, default=Path("reports/sim"))
    ap.add_argument("--shared-message-us", type=float, nargs="+", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        calib = json.loads((a.folder / "calibration.json").read_text())
        rows = read_csv(a.folder / "validation.csv", CellRow)
        profiles = {m: LayerProfile.from_json(p, {}) for m, p in calib["profiles"].items()}
        dm = device(calib)
        cores = int(calib["cores"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"resimulate: error: --from {a.folder}: {e}", file=sys.stderr)
        return 2
    if a.shared_message_us and any(not x >= 0 for x in a.shared_message_us):
        print(
            f"resimulate: error: --shared-message-us={a.shared_message_us}; allowed: numbers >= 0",
            file=sys.stderr,
        )
        return 2
    costs = [x * 1e-6 for x in a.shared_message_us] if a.shared_message_us else [None]
    report = []
    for cost in costs:
        model = dm if cost is None else replace(dm, shared_message_s=cost)
        cells = resimulate(rows, profiles, model, cores)
        off = max(
            (
                abs(c["error_raw"] - c["committed_raw"])
                for c in cells
                if c["committed_raw"] is not None
            ),
            default=0.0,
        )
        print(
            f"shared_message_s {model.shared_message_s * 1e6:.0f} us; largest change of a cell's "
            f"raw error from the committed: {off:.2%}"
        )
        print("group | raw: cells, median |e|, max, bias | probed: the same")
        for name, cs in groups(cells):
            raw = summary([c["error_raw"] for c in cs])
            probed = summary([c["error"] for c in cs])
            print(f"{name} | {raw} | {probed}")
        report.append({"shared_message_s": model.shared_message_s, "cells": cells})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
