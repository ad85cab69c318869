"""How long a save and a load take, and how big a save is, at K = 1 and 2.

    python bench/save.py --out reports/save     # writes save.md and results.json (a few minutes)

Models: AmoebaNet-D(6, 32) (1000 classes) and a ~100M-parameter Transformer-L (L=8, d=768, H=3072,
A=12, V=32000), with RMSprop (momentum 0.9: two state tensors per parameter, the paper's optimiser).
Each case runs in fresh ranks on this machine's CPU; layers are balanced by parameter count. Times
are the median of 3 repetitions, taken on rank 0 for a save (collective: from the call to its return,
fsync included) and as the slowest rank for a load (each rank reads its own layers by key).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from gpipe_repro.engine import balance_by_cost, init_topology, launch, stage_slice
from gpipe_repro.models.amoebanet import amoebanet_layers
from gpipe_repro.models.transformer import transformer_lm_layers
from gpipe_repro.paper.provenance import Provenance
from gpipe_repro.save import describe_model, load, save
from gpipe_repro.save.write import barrier

MODELS = {
    "amoebanet_d(6,32)": (lambda: amoebanet_layers("D", 6, 32, classes=1000), {"L": 6, "D": 32}),
    "transformer_lm(8,768)": (
        lambda: transformer_lm_layers(8, d=768, H=3072, A=12, V=32000),
        {"L": 8, "d": 768, "H": 3072, "A": 12},
    ),
}
REPEATS = 3


def _rank(model: str, K: int, directory: str) -> dict:
    topo = init_topology(K)
    torch.manual_seed(0)
    build, config = MODELS[model]
    layers = build()
    record = describe_model(model, config, layers)
    balance = balance_by_cost([sum(p.numel() for p in m.parameters()) for m in layers], K)
    sl = stage_slice(balance, topo.stage)
    mine = layers[sl]
    del layers
    opt = torch.optim.RMSprop([p for m in mine for p in m.parameters()], lr=1e-3, momentum=0.9)
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.zeros_like(p)
    opt.step()  # creates the optimiser state
    saves, loads = [], []
    for i in range(REPEATS):
        barrier(topo, 300)
        t0 = time.perf_counter()
        path = save(directory, i, mine, balance, topo, model=record, optimizer=opt, keep=1)
        saves.append(time.perf_counter() - t0)
        barrier(topo, 300)
        t0 = time.perf_counter()
        load(path, mine, sl.start, optimizer=opt, model=record, topology=topo)
        loads.append(time.perf_counter() - t0)
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    return {
        "save_s": statistics.median(saves),
        "load_s": statistics.median(loads),
        "bytes": size,
        "params": record["param_count"],
        "balance": balance,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reports/save"))
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for K in (1, 2):
            directory = tempfile.mkdtemp(prefix="bench-save-")
            try:
                res = launch(_rank, K, (model, K, directory), threads=1)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            row = {
                "model": model,
                "K": K,
                "params": res[0]["params"],
                "balance": res[0]["balance"],
                "bytes": res[0]["bytes"],
                "save_s": res[0]["save_s"],
                "load_s": max(r["load_s"] for r in res),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1))
    prov = dataclasses.replace(Provenance.here(), command="make bench-save")
    prov.save(args.out)  # the CPU model and the commit the numbers come from
    lines = [
        "# Save and load: time and size",
        "",
        "No claim of the paper is judged here, and no goal: the measured cost of a save at K = 1 "
        "and 2 (every claim of the paper: [the scorecard](../README.md)).",
        "",
        prov.page("")[-1],
        "",
        "Measured on this CPU, one thread per rank; see `bench/save.py`'s docstring for what is "
        "timed. Weights + RMSprop state (2 tensors per parameter).",
        "",
        "| model | parameters | K | balance | save size | save (s) | load (s) |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['params'] / 1e6:.1f}M | {r['K']} | {r['balance']} | "
            f"{r['bytes'] / 2**20:.1f} MiB | {r['save_s']:.2f} | {r['load_s']:.2f} |"
        )
    (args.out / "save.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
