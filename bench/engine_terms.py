"""Each measured engine term's share of a validation's real cells, and the raw error with and without it.

    python bench/engine_terms.py outputs/validate-sim [--collector]

Reads a ``validate-sim`` folder (``validation.csv``, ``calibration.json``) and simulates every real
cell again on its raw profile, as the validation does (``measure.calibration.simulate_cell``), with
each term the simulator charges for what the engine pays beyond the per-layer profile, and with one
left out at a time:

- ``idle``: the post-idle penalty of a receiver that blocked (``sim.measured.idle``; the calibration's
  ``idle_penalty``), left out by simulating on the link without it;
- ``sharing``: what each message costs ranks sharing the host's cores (``sim.measured.sharing``);
- ``overhead``: the engine's per-action and per-step overheads (``sim.measured.overhead``);
- ``collector`` (with ``--collector``): the collector's pauses (``sim.measured.collector``), not kept
  apart in the profile: each model's layers are streamed again here at every micro-batch to measure
  their share, which is then taken off (a fresh measurement, so the share is this moment's).

Per term it prints its share of the simulated step (median over the real cells, and per model and K)
and the raw error's median |error|, bias and max with the term and without it; beside them the
host's drift as the validation's speed probe saw it (the median speed of the cells). Nothing here
is used by the simulator. The collector pass times layers: run it under the CPU lock.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpipe_repro.measure.calibration import simulate_cell
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured.device import DeviceModel


def _device(d: dict[str, Any]) -> DeviceModel:
    link = dict(d["link"])
    link["wake"] = tuple(tuple(p) for p in link.get("wake", ()))
    return DeviceModel(
        d["device"],
        Link(**link),
        float(d["overhead_s"]),
        float(d["step_overhead_s"]),
        bool(d["sender_busy"]),
        float(d["recompute_overhead_s"]),
        float(d["shared_message_s"]),
        "calibration",
        tuple((float(b), float(p)) for b, p in d.get("idle_penalty", ())),
    )


def _collector_shares(models: list[str], sizes: list[int]) -> dict[tuple[str, int], list[float]]:
    """Per (model, micro-batch): each layer's collector share of a kept forward and of a no-grad
    forward, measured afresh (``stream``)."""
    import torch

    from gpipe_repro.engine.hostmem import apply_host_memory
    from gpipe_repro.measure.models import N, model
    from gpipe_repro.sim.measured.stream import fresh_input, time_stream

    torch.set_num_threads(1)
    apply_host_memory("retain")
    out: dict[tuple[str, int], list[float]] = {}
    for name in models:
        vm = model(name)
        for n in sizes:
            M = max(1, N // n)
            x, y = vm.sample(n)
            t = time_stream(
                vm.layers(),
                [fresh_input(x, False) for _ in range(M)],
                [y] * M,
                vm.loss,
                device=torch.device("cpu"),
                warmup=1,
                repeats=3,
            )
            out[(name, n)] = [t.collector_share("forward"), t.collector_share("nograd")]
    return out


def _stats(errors: list[float]) -> str:
    return (
        f"median |error| {statistics.median(abs(e) for e in errors):.1%}, "
        f"bias {statistics.median(errors):+.1%}, max {max(abs(e) for e in errors):.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--collector", action="store_true", help="measure the collector's share too")
    a = ap.parse_args()
    cal = json.loads((a.folder / "calibration.json").read_text())
    rows = [r for r in csv.DictReader(open(a.folder / "validation.csv")) if r["kind"] == "real"]
    dm = _device(cal["device"])
    raw = {
        name: {int(n): [LayerCost(**c) for c in cs] for n, cs in p["raw"].items()}
        for name, p in cal["profiles"].items()
        if "raw" in p
    }
    shares = (
        _collector_shares(
            sorted({r["model"] for r in rows}), sorted({int(r["micro_batch"]) for r in rows})
        )
        if a.collector
        else {}
    )
    without_idle = replace(dm, idle_penalty=())
    without_sharing = replace(dm, shared_message_s=0.0)
    without_overhead = replace(dm, overhead_s=0.0, step_overhead_s=0.0)
    terms: dict[str, list[tuple[str, int, float, float, float]]] = {}
    base_errors = []
    speeds = []
    for r in rows:
        cell = {"M": int(r["M"]), "schedule": r["schedule"], "checkpoint": r["checkpoint"]}
        K, n = int(r["K"]), int(r["micro_batch"])
        balance = [int(b) for b in r["balance"].split("-")]
        costs = raw[r["model"]][n]
        measured = float(r["measured_raw_step_s"])
        full = simulate_cell(cell, K, balance, costs, dm, shared=True).step_s
        base_errors.append(full / measured - 1)
        if r["speed"]:
            speeds.append(float(r["speed"]))
        variants = {
            "idle": simulate_cell(cell, K, balance, costs, without_idle, shared=True).step_s,
            "sharing": simulate_cell(cell, K, balance, costs, without_sharing, shared=True).step_s,
            "overhead": simulate_cell(
                cell, K, balance, costs, without_overhead, shared=True
            ).step_s,
        }
        if shares:
            fwd, nograd = shares[(r["model"], n)]
            off = [
                replace(
                    c,
                    forward_s=max(0.0, c.forward_s - fwd),
                    forward_nograd_s=max(0.0, c.forward_nograd_s - nograd),
                )
                for c in costs
            ]
            variants["collector"] = simulate_cell(cell, K, balance, off, dm, shared=True).step_s
        for term, without in variants.items():
            terms.setdefault(term, []).append(
                (
                    r["model"],
                    K,
                    (full - without) / full,
                    full / measured - 1,
                    without / measured - 1,
                )
            )
    print(f"{len(rows)} real cells, raw (no probe): {_stats(base_errors)}")
    if speeds:
        print(
            f"the host's drift: the cells ran at {min(speeds):.2f}-{max(speeds):.2f} x the profile's "
            f"reference speed (median {statistics.median(speeds):.2f}); raw errors carry it"
        )
    for term, got in terms.items():
        print(
            f"{term}: share of the simulated step median {statistics.median(g[2] for g in got):.1%} "
            f"(max {max(g[2] for g in got):.1%}); raw error without it: "
            f"{_stats([g[4] for g in got])}"
        )
        for model in sorted({g[0] for g in got}):
            for K in sorted({g[1] for g in got}):
                sub = [g for g in got if g[0] == model and g[1] == K]
                if sub:
                    print(
                        f"    {model} K={K}: share {statistics.median(g[2] for g in sub):.1%}, "
                        f"bias with {statistics.median(g[3] for g in sub):+.1%}, without "
                        f"{statistics.median(g[4] for g in sub):+.1%}"
                    )


if __name__ == "__main__":
    main()
