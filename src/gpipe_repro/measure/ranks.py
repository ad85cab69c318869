"""Measured cells: the real engine, or the engine in emulation mode, timed on this machine.

A *cell* is one (model, K, M, schedule, checkpoint). Each ``launch`` starts K fresh ranks (one intra-op
thread each, the engine's host-memory setting) that run a list of cells one after the other; for each
cell a fresh ``Pipeline`` runs ``warmup`` untimed and ``steps`` timed training steps exactly like a run's
rank loop (``rank.RankRun.train``: ``train_step``, then the optimiser step and ``zero_grad``). A step's time is
its slowest rank's; events are kept for the trace.

Robustness on a shared machine (``simulator.validate`` drives it): every round is a new set of processes and
visits the cells in a new random order, so a burst of load from elsewhere hits different cells in
different rounds, and a cell's figure is the median over all its timed steps of all rounds.

Real cells probe the host's speed (``sim.measured.speed.probe_s``) just before every step, outside the timed
region, so ``simulator.validate`` can put each step on the profile's scale: on a machine whose speed
drifts, a step and the costs it is compared with were measured at different speeds. The probe runs
on the first rank alone, the others held at a barrier on either side (bounded by the process
group's timeout), so it sees the machine as the one-process profile did, not the cell's own ranks
competing with it. Emulated cells do not probe: their compute is sleeping, which does not follow
the host.

For the planner's validation (``planner``) a cell may also carry its own partition
(``balance``) and one remat mode per stage, and ``real_rank(memory=True)`` measures each rank's
peak memory over one more step (``peak_bytes``: the CPU allocator's events, ``memory.allocator``).

In emulation mode (``emulate``) every layer sleeps its profiled cost at the cell's micro-batch
instead of computing, so K = 4 and 8 ranks fit on 2 cores: the schedule, the transfers (real gloo, real
sizes) and the engine's own overhead are real, the compute is the calibrated duration.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ..engine import Event, Pipeline, init_topology, single_process, stage_slice
from ..engine.cell import chunk_slices
from ..engine.checkpoint import stage_mode
from ..engine.hostmem import apply_host_memory
from ..engine.schedule import splits_backward
from ..memory.activations import state_bytes
from ..memory.allocator import allocator_peak
from ..sim.costs import LayerCost
from ..sim.measured.speed import probe_s
from .emulate import emulated_layers, emulated_loss, sleep_until
from .models import N, model

__all__ = ["real_rank", "emulated_rank", "step_times", "CellTimes", "run_delay_s"]


def run_delay_s() -> float:
    """Seconds this thread has waited on a run queue (runnable, but another process had the core):
    Linux's /proc/thread-self/schedstat, 0 where it is missing. A step's share of it measures how much
    other load on the machine disturbed that step."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _topology(K: int, timeout_s: float, cells: Sequence[dict] = ()) -> Any:
    """K ranks; a ring where a cell holds several model cells per rank (``virtual_stages``)."""
    ring = any(c.get("virtual_stages", 1) > 1 for c in cells)
    return init_topology(K, timeout_s=timeout_s, ring=ring) if K > 1 else single_process()


def _mine(
    layers: Sequence[Any], cfg: dict, balance: list[int], stage: int, K: int
) -> tuple[Any, int | list[int]]:
    """This rank's layers for ``cfg`` and the first global index the Pipeline is given: its cell,
    or its v cells (``virtual_stages``: the cell's own balance of K·v cells) and each one's."""
    bal = cfg.get("balance", balance)
    if cfg.get("virtual_stages", 1) > 1:
        slices = chunk_slices(bal, K, stage)
        return [list(layers[sl]) for sl in slices], [sl.start for sl in slices]
    return layers[stage_slice(bal, stage)], 0  # as before (no seed: the index keys nothing)


def _probe(topo: Any) -> float:
    """The speed probe on the first rank while every other rank waits at a barrier; 0 elsewhere."""
    if not topo.distributed:
        return probe_s()
    dist.barrier()
    p = probe_s() if topo.is_first else 0.0
    dist.barrier()
    return p


def _timed(
    pipe: Pipeline,
    opt: torch.optim.Optimizer | None,
    x: Any,
    y: Any,
    warmup: int,
    steps: int,
    update_s: float = 0.0,
    probe: bool = False,
) -> tuple[list[float], list[float], list[float]]:
    """Run warmup + steps training steps; the timed steps' seconds on this rank, the seconds of
    each it spent waiting for a core (``run_delay_s``) and, with ``probe``, the speed probe's
    seconds just before each (untimed)."""
    topo = pipe.topo
    out: list[float] = []
    waits: list[float] = []
    probes: list[float] = []
    for s in range(warmup + steps):
        p = _probe(topo) if probe else 0.0
        w0 = run_delay_s()
        t0 = time.perf_counter()
        pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=False)
        else:  # emulation: the optimiser step is a sleep of its calibrated cost
            t1 = time.perf_counter()
            sleep_until(t1 + update_s)
            rec = pipe.recorder
            rec.events.append(
                Event("update", -1, t1, time.perf_counter(), rec.stage, rec.replica, rec.step - 1)
            )
        if s >= warmup:
            out.append(time.perf_counter() - t0)
            waits.append(run_delay_s() - w0)
            probes.append(p)
    return out, waits, probes


def _result(
    cfg: dict,
    pipe: Pipeline,
    timed: tuple[list[float], list[float], list[float]],
    every_step: bool = False,
) -> dict:
    """The cell's step times, core waits and probes on this rank, the events of its last step
    (``every_step``: of every step, warm-up included)."""
    last = pipe.recorder.step - 1
    return {
        "cell": cfg,
        "stage": pipe.topo.stage,
        "times": timed[0],
        "waits": timed[1],
        "probes": timed[2],
        "events": [e.to_dict() for e in pipe.recorder.events if every_step or e.step == last],
    }


def _cell_pipeline(
    layers: Any, topo: Any, cfg: dict, loss_fn: Any, first: int | list[int] = 0
) -> Pipeline:
    """The engine for one cell (its M, schedule and checkpoint: one mode, or one per stage) on this
    rank's layers."""
    return Pipeline(
        layers,
        topo,
        M=cfg["M"],
        schedule=cfg["schedule"],
        checkpoint=stage_mode(cfg["checkpoint"], topo.stage),
        loss_fn=loss_fn,
        virtual_stages=cfg.get("virtual_stages", 1),
        first_layer=first,
    )


def peak_bytes(pipe: Pipeline, opt: torch.optim.Optimizer, x: Any, y: Any) -> int:
    """This rank's peak memory over one more training step, optimiser step included: the CPU
    allocator's peak of bytes allocated during it (``memory.allocator``) plus the state already
    allocated (weights, gradients, RMSProp's square averages)."""
    from torch.profiler import ProfilerActivity, profile

    topo = pipe.topo
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
        opt.step()
        opt.zero_grad(set_to_none=False)
    return allocator_peak(prof) + state_bytes(sum(p.numel() for p in pipe.parameters()))


def real_rank(
    name: str,
    K: int,
    balance: list[int],
    cells: list[dict],
    warmup: int,
    steps: int,
    timeout_s: float = 120.0,
    memory: bool = False,
    every_step: bool = False,
) -> list[dict]:
    """One rank of a real K-stage pipeline running ``cells`` (dicts with M, schedule, checkpoint,
    and optionally their own ``balance``); ``memory``: after the timed steps, one more step
    measures the rank's peak (``peak_bytes``); ``every_step``: keep every step's events, not only
    the last one's."""
    topo = _topology(K, timeout_s, cells)
    apply_host_memory("retain")
    vm = model(name)
    every = vm.layers()
    x, y = vm.sample(N)
    out = []
    for cfg in cells:
        mine, first = _mine(every, cfg, balance, topo.stage, K)
        pipe = _cell_pipeline(copy.deepcopy(mine), topo, cfg, vm.loss, first)
        opt = torch.optim.RMSprop(pipe.parameters(), lr=1e-5)
        times = _timed(pipe, opt, x, y, warmup, steps, probe=True)
        res = _result(cfg, pipe, times, every_step)
        if memory:
            res["peak_bytes"] = peak_bytes(pipe, opt, x, y)
        out.append(res)
    return out


def emulated_rank(
    name: str,
    K: int,
    balance: list[int],
    cells: list[dict],
    costs: dict[int, list[LayerCost]],
    warmup: int,
    steps: int,
    timeout_s: float = 120.0,
) -> list[dict]:
    """One rank of an emulated K-stage pipeline; ``costs[n]``: every layer's cost at micro-batch n;
    a cell may carry its own ``balance``."""
    topo = _topology(K, timeout_s, cells)
    apply_host_memory("retain")
    vm = model(name)
    meta = vm.meta_layers()
    out = []
    for cfg in cells:
        n = N // cfg["M"]
        layers = emulated_layers(meta, vm.sample(n)[0], costs[n], splits_backward(cfg["schedule"]))
        mine, first = _mine(layers, cfg, balance, topo.stage, K)
        pipe = _cell_pipeline(mine, topo, cfg, emulated_loss, first)
        x = vm.sample(N)[0]
        flat = [m for c in mine for m in c] if cfg.get("virtual_stages", 1) > 1 else mine
        times = _timed(pipe, None, x, None, warmup, steps, sum(c.cost.update_s for c in flat))
        out.append(_result(cfg, pipe, times))
    return out


@dataclass
class CellTimes:
    """One cell's timed steps, gathered over its ranks."""

    cell: dict
    times: list[float]  # each step: the slowest rank's seconds
    waits: list[float]  # each step: the largest share of it any rank waited for a core
    probes: list[float]  # each step: the first rank's probe seconds before it (empty: not probed)
    events: list[dict]  # every rank's events of the last step
    peaks: list[int] = field(default_factory=list)  # per stage: its peak bytes (``memory``)


def step_times(per_rank: Sequence[list[dict]]) -> list[CellTimes]:
    """Per cell of a launch (``per_rank``: each rank's results), its ``CellTimes``."""
    out = []
    for i, first in enumerate(per_rank[0]):
        steps = range(len(first["times"]))
        times = [max(r[i]["times"][s] for r in per_rank) for s in steps]
        waits = [
            max(r[i]["waits"][s] / max(r[i]["times"][s], 1e-9) for r in per_rank) for s in steps
        ]
        first_probes = first.get("probes") or []
        probes = list(first_probes) if first_probes and min(first_probes) > 0 else []
        events = [e for r in per_rank for e in r[i]["events"]]
        peaks = [r[i]["peak_bytes"] for r in per_rank if "peak_bytes" in r[i]]
        out.append(CellTimes(first["cell"], times, waits, probes, events, peaks))
    return out
