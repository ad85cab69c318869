"""Per-rank functions for the emulation tests (imported by spawned ranks): several pipelines of
different K, one after another, on one set of ranks — one launch instead of one per K — each running
the engine on emulated layers (``run_emulated``)."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from gpipe_repro.engine import (
    Event,
    Pipeline,
    Topology,
    balance_by_cost,
    independent_pipelines,
    init_topology,
    stage_slice,
)
from gpipe_repro.engine.microbatch import from_tuple
from gpipe_repro.measure.emulate import EmulatedLayer, emulated_loss, sleep_until


def phases(runs: list[tuple], timeout_s: float = 60.0) -> list[dict | None]:
    """``runs``: (K, layers, configs, steps, balance) each. In a world of W ranks, phase K runs
    W // K independent pipelines on ranks 0 .. (W // K) * K - 1 (the others wait at the barrier)."""
    world = int(os.environ["WORLD_SIZE"])
    init_topology(world, timeout_s=timeout_s)
    out: list[dict | None] = []
    for K, layers, configs, steps, balance in runs:
        dist.barrier()
        topo = independent_pipelines(K, timeout_s=timeout_s)  # collective: every rank
        if topo is not None:
            t0 = time.perf_counter()
            res = run_emulated(topo, layers, configs, steps, balance)
            out.append({"results": res, "seconds": time.perf_counter() - t0})
        else:
            out.append(None)
    dist.barrier()
    return out


def run_emulated(
    topo: Topology,
    layers: Sequence[EmulatedLayer],
    configs: Sequence[dict],
    steps: int = 2,
    balance: Sequence[int] | None = None,
) -> list[dict]:
    """Run the engine on emulated layers on this rank of ``topo``: for each config (``M`` and any
    ``Pipeline`` keyword: ``schedule``, ``checkpoint``...) ``steps`` training steps, each followed
    by a sleep for the stage's optimiser update (an ``update`` event). Returns per config this
    stage's events. ``balance`` defaults to the min-max partition of forward + backward time."""
    K = topo.K
    bal = (
        list(balance)
        if balance is not None
        else balance_by_cost([la.cost.forward_s + la.cost.backward_s for la in layers], K)
    )
    mine = list(layers[stage_slice(bal, topo.stage)])
    update_s = sum(la.cost.update_s for la in mine)
    results = []
    for cfg in configs:
        M = int(cfg["M"])
        kw = {
            "checkpoint": "never",
            "loss_fn": emulated_loss,
            **{k: v for k, v in cfg.items() if k != "M"},
        }
        pipe = Pipeline(copy.deepcopy(mine), topo, M=M, **kw)
        x = from_tuple(
            [
                torch.zeros((M * s.shape[0], *s.shape[1:]), dtype=s.dtype, device=topo.device)
                for s in layers[0].in_specs
            ],
            layers[0].in_tuple,
        )
        for _ in range(steps):
            pipe.train_step(x if topo.is_first else None, None)
            t0 = time.perf_counter()
            sleep_until(t0 + update_s)
            rec = pipe.recorder  # the step counter has moved on: label the update with its step
            rec.events.append(
                Event("update", -1, t0, time.perf_counter(), rec.stage, rec.replica, rec.step - 1)
            )
        results.append(
            {
                "config": dict(cfg),
                "stage": topo.stage,
                "replica": topo.replica,
                "balance": bal,
                "events": [e.to_dict() for e in pipe.recorder.events],
            }
        )
    return results
