"""``train.batch_mode=fit``: the largest mini-batch whose every stage fits the device's memory at this K.

The paper's Table 2 caption: "batch size was adjusted to fit memory if necessary". Per stage k the
planned memory (``planner.stages``, on the meta device) is its state (weights, gradients, optimiser
slots: fixed) plus its peak activations, linear in the micro-batch n: ``state_k + a_k * n``. So the
largest micro-batch is a closed form, ``min_k floor((memory - state_k) / a_k)``, and the mini-batch is
that times M (and the replicas). The partition may depend on the micro-batch (``balance_by=time``
costs layers at it), so partition and fit alternate until they agree (at most a few rounds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..errors import UserError
from ..planner.stages import StagePlan
from ..sim.measured.device import host_memory_bytes

if TYPE_CHECKING:
    from ..rank import Plan

__all__ = ["fit_micro_batch", "engine_batch", "GiB"]

GiB = 2**30
ROUNDS = 4


def _size(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB"


def fit_micro_batch(
    spec: RunConfig,
    memory_bytes: int,
    start: int,
    balance_at: Callable[[int], list[int]],
    plan_at: Callable[[Sequence[int], int], list[StagePlan]],
    where: str,
) -> tuple[int, list[int]]:
    """The largest micro-batch (and its partition) whose every stage fits ``memory_bytes``.

    ``balance_at(n)``: the partition at micro-batch n; ``plan_at(balance, n)``: the stages' memory.
    Raises a one-line ``UserError`` naming the stage when not even one sample fits."""
    n, seen = max(1, start), set()
    for _ in range(ROUNDS):
        balance = balance_at(n)
        plans = plan_at(balance, 1)
        fits = []
        for k, st in enumerate(plans):
            free = memory_bytes - st.state
            if free < st.per_sample or st.per_sample <= 0 and free < 0:
                raise UserError(
                    f"train.batch_mode=fit: no batch fits {where} ({_size(memory_bytes)} per device) at "
                    f"pipeline.K={spec.pipeline.K}: stage {k} needs {_size(st.state)} of weights and "
                    f"optimiser state + {_size(st.per_sample)} per sample; raise pipeline.K or use "
                    "train.batch_mode=fixed"
                )
            fits.append(int(free // st.per_sample) if st.per_sample > 0 else 1 << 30)
        best = min(fits)
        if best == n or (best, tuple(balance)) in seen:
            return best, balance
        seen.add((best, tuple(balance)))
        n = best
    return n, balance_at(n)


def engine_batch(spec: RunConfig, plan: Plan, memory_bytes: int | None = None) -> RunConfig:
    """``spec`` with ``train.batch_mode=fit`` resolved for a run on the engine: the largest batch whose
    stages fit ``memory_bytes`` (default: the CUDA device's, else this host's memory), partitioned as
    the engine will (explicit balance, else the min-max partition of ``balance_by`` — counted on meta;
    ``time`` and ``memory`` are measured by the ranks, so FLOPs stand in for them here). A ``fixed``
    spec comes back unchanged. (``runner.run`` should call this before launching the ranks.)"""
    from dataclasses import replace

    import torch

    from ..engine import balance_by_cost
    from ..engine.cost import COUNTED_KINDS, layer_costs
    from ..planner.stages import plan_stages

    if spec.train.batch_mode != "fit":
        return spec
    p = spec.pipeline
    if memory_bytes is None:
        cuda = spec.device == "cuda" and torch.cuda.is_available()
        memory_bytes = (
            int(torch.cuda.get_device_properties(0).total_memory) if cuda else host_memory_bytes()
        )
    kind = p.balance_by if p.balance_by in COUNTED_KINDS else "flops"
    loss = plan.model.planning_loss

    def balance_at(n: int) -> list[int]:
        if p.balance is not None:
            return list(p.balance)
        return balance_by_cost(layer_costs(plan.layers, plan.info.example(n, "meta"), kind), p.K)

    def plan_at(balance: Sequence[int], n: int) -> list[StagePlan]:
        return plan_stages(
            plan.layers,
            plan.info.example,
            loss,
            balance,
            K=p.K,
            M=p.M,
            micro_batch=n,
            schedule=p.schedule,
            checkpoint=p.checkpoint,
            optim=spec.optim.name,
            key=f"{spec.model!r}|{plan.info!r}",
        )

    start = spec.train.batch_size // p.replicas // p.M
    mb, _ = fit_micro_batch(spec, memory_bytes, start, balance_at, plan_at, f"device={spec.device}")
    return replace(spec, train=replace(spec.train, batch_size=mb * p.M * p.replicas))
