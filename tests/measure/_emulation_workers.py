"""Per-rank function for the emulation tests (imported by spawned ranks): several pipelines of
different K, one after another, on one set of ranks — one launch instead of one per K."""

from __future__ import annotations

import os
import time

import torch.distributed as dist

from gpipe_repro.engine import independent_pipelines, init_topology
from gpipe_repro.measure.emulate import run_emulated


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
