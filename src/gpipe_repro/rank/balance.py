"""``balance_by=time``: per-layer forward + backward time, measured by the ranks on their own devices.

Why the ranks and not the process that plans the run: the time that decides a pipeline's speed is the
time on the devices the stages run on — a GPU's, not the planning process's CPU's (which would also
have to hold the whole model, single-threaded, while the ranks waited; #22 item 3) — and the planning
process of a ``gpipe-run`` with several ranks touches no GPU, so that GPU 0 keeps its memory for its
rank. So every rank of the run (all stages of all replicas) times its share of the layers — layer i
on rank i mod world size — one layer in memory at a time, on its device with that device's
synchronisation around the clock; the shares are exchanged over the run's CPU group, and every rank
applies the one chooser (``runplan.plan.choose_balance``) to the same list, so all agree on the
partition. Bounded: a rank whose share takes longer than ``pipeline.timeout_s`` stops with one line,
and the exchange waits at most that long.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
import torch.distributed as dist

from ..config.device import Device
from ..engine import Topology
from ..engine.microbatch import Batch, as_tuple
from ..errors import UserError
from ..models import materialize
from ..runplan.plan import BalanceChoice, ModelPlan, RunPlan, choose_balance

__all__ = ["measure_layer_times", "time_balanced"]

REPEATS = 3  # timed forward + backward passes per layer after one warm-up; the fastest counts


def _inputs(model: ModelPlan, n: int) -> list[Batch]:
    """Every layer's input at ``n`` samples, on meta (shapes and dtypes only)."""
    x: Batch = model.info.example(n, "meta")
    out = []
    with torch.no_grad():
        for layer in model.layers:
            out.append(x)
            x = layer(x)
    return out


def _real(x: Batch, first: Batch | None, device: torch.device) -> Batch:
    """A real batch shaped like meta ``x`` on ``device``: the data's own example for the first layer
    (valid token ids), else random floats; integer tensors (token ids) are ones."""
    if first is not None:
        return first
    ts = [
        torch.randn(t.shape, dtype=t.dtype, device=device).requires_grad_()
        if t.is_floating_point()
        else torch.ones(t.shape, dtype=t.dtype, device=device)
        for t in as_tuple(x)
    ]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _time_one(layer: torch.nn.Module, x: Batch, device: Device) -> float:
    best = float("inf")
    for i in range(REPEATS + 1):
        device.synchronize()
        t0 = time.perf_counter()
        y = layer(x)
        outs = [t for t in as_tuple(y) if t.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        device.synchronize()
        if i:  # the first pass warms the kernels and the allocator
            best = min(best, time.perf_counter() - t0)
        layer.zero_grad(set_to_none=True)
    return best


def measure_layer_times(
    model: ModelPlan, n: int, topo: Topology, device: Device, seed: int, budget_s: float
) -> dict[int, float]:
    """This rank's share of the per-layer times (global index -> seconds) at ``n`` samples."""
    metas = _inputs(model, n)
    started = time.monotonic()
    mine: dict[int, float] = {}
    for i in range(topo.rank, len(model.layers), topo.world_size):
        layer = materialize([copy.deepcopy(model.layers[i])], seed, first_index=i)[0]
        layer = layer.to(topo.device).train()
        first = model.info.example(n, topo.device) if i == 0 else None
        mine[i] = _time_one(layer, _real(metas[i], first, topo.device), device)
        del layer
        if time.monotonic() - started > budget_s:
            raise UserError(
                f"pipeline.balance_by=time: timing rank {topo.rank}'s layers took more than "
                f"pipeline.timeout_s={budget_s:.0f} s; use pipeline.balance_by=flops or raise "
                "pipeline.timeout_s"
            )
    return mine


def time_balanced(
    plan: RunPlan, model: ModelPlan, topo: Topology, device: Device, group: Any
) -> RunPlan:
    """``plan`` with the partition of the per-layer times the ranks measured together."""
    spec = plan.spec
    mine = measure_layer_times(
        model, plan.sentences, topo, device, spec.seed, spec.pipeline.timeout_s
    )
    shares: list[Any] = [mine]
    if topo.distributed:
        shares = [None] * topo.world_size
        dist.all_gather_object(shares, mine, group=group)
    times = {i: t for share in shares for i, t in share.items()}
    costs = [times[i] for i in range(len(model.layers))]
    choice = BalanceChoice("time", f"measured by the ranks on {topo.device.type}", costs)
    cells = spec.pipeline.K * spec.pipeline.virtual_stages  # every model cell, K*v
    return plan.with_balance(choose_balance(costs, cells), choice)
