"""Per-rank function for the emulation tests (imported by spawned ranks): several pipelines of
different K, one after another, on one set of ranks — one launch instead of one per K."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from gpipe_repro.engine import Topology, init_topology
from gpipe_repro.paper.validate_sim.emulate import run_emulated


def phases(runs: list[tuple], timeout_s: float = 60.0) -> list[dict | None]:
    """``runs``: (K, layers, configs, steps, balance) each. In a world of W ranks, phase K runs
    W // K independent pipelines on ranks 0 .. (W // K) * K - 1 (the others wait at the barrier)."""
    world = int(os.environ["WORLD_SIZE"])
    init_topology(world, timeout_s=timeout_s)
    rank = dist.get_rank()
    out: list[dict | None] = []
    for K, layers, configs, steps, balance in runs:
        dist.barrier()
        if rank < (world // K) * K:
            topo = Topology(K=K, replicas=1, rank=rank, device=torch.device("cpu"))
            t0 = time.perf_counter()
            res = run_emulated(topo, layers, configs, steps, balance)
            out.append({"results": res, "seconds": time.perf_counter() - t0})
        else:
            out.append(None)
    dist.barrier()
    return out
