"""One training step of a pipeline configuration on a hardware profile's costs: the one call.

Every caller that scores a configuration asks this module, with nothing but the configuration:
the ``sim`` backend (one run), the planner (each candidate it simulates), the paper's simulated
tables and the planner's validation. So a configuration is timed the same way whoever asks: its
per-layer costs summed per stage (``costs.stage_costs``), the link and the engine's overheads from
the cost model, and the profile's sending rules (``Hardware.send_occupies_sender``,
``Hardware.lookahead``) handed to the simulator (``simulate``). With R > 1 data-parallel replicas
each stage all-reduces its gradients after its last backward (GPipe §2.2: the synchronous update).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .costs import CostModel, stage_costs
from .interface import Hardware
from .simulate import SimResult, simulate

__all__ = ["simulate_step", "grad_bytes"]


def grad_bytes(layers: Sequence[torch.nn.Module]) -> list[int]:
    """Per layer, the bytes of its parameters' gradients, what data-parallel replicas all-reduce:
    fp32 whatever ``train.precision`` (the engine keeps fp32 master weights and gradients,
    ``engine.precision``)."""
    return [4 * sum(q.numel() for q in layer.parameters() if q.requires_grad) for layer in layers]


def simulate_step(
    hw: Hardware,
    costs: CostModel,
    *,
    K: int,
    M: int,
    schedule: str,
    checkpoint: str | Sequence[str],
    balance: Sequence[int],
    micro_batch: int,
    replicas: int = 1,
    layer_grad_bytes: Sequence[int] = (),
    virtual_stages: int = 1,
) -> SimResult:
    """One step of K stages cut by ``balance``, M micro-batches of ``micro_batch`` each, on
    ``costs`` from ``hw``; ``checkpoint``: one remat mode, or one per stage. With ``replicas`` > 1,
    ``layer_grad_bytes`` (``grad_bytes``, one per layer) are summed per stage and all-reduced.
    ``virtual_stages`` v: ``balance`` cuts K·v cells, stage k holding cells k, k+K, ...
    (``engine.schedule``)."""
    per_cell, start = [], 0
    for b in balance if layer_grad_bytes else ():
        per_cell.append(sum(layer_grad_bytes[start : start + b]))
        start += b
    per_stage = [sum(per_cell[k::K]) for k in range(K)] if per_cell else []
    return simulate(
        K,
        M,
        schedule,
        checkpoint if isinstance(checkpoint, str) else list(checkpoint),
        stage_costs(costs.layer_costs(micro_batch), balance),
        costs.link,
        costs.overhead_s,
        sender_busy=hw.send_occupies_sender,
        step_overhead_s=costs.step_overhead_s,
        lookahead=hw.lookahead,
        recompute_overhead_s=costs.recompute_overhead_s,
        replicas=replicas,
        grad_bytes=per_stage,
        virtual_stages=virtual_stages,
    )
