"""The model as the planner sees it, whoever asks: its search space, a candidate's exact peaks and
its simulated step.

``gpipe-plan`` and ``gpipe-run plan=auto`` build a ``Subject`` from a run's config and meta-device
model (``search.choose.subject``), the planner's validation from a validation model; both then call
these functions, so the planner that is validated is the planner that ships. Per-layer memory
comes from the memory planner's meta measurements (``memory.stages``), costs from a hardware
profile's cost model, the step from the simulator (``sim.step``, GPipe §2.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..memory.activations import step_temporary_bytes
from ..memory.stages import layer_activations, plan_stages
from ..sim import CostModel, Hardware, SimResult
from ..sim.step import grad_bytes, simulate_step
from .candidate import Candidate
from .space import Space

__all__ = ["Subject", "space_of", "exact_peaks", "simulate_candidate", "Point", "schedule_point"]

OPTIMS = ("rmsprop", "sgd", "adam")  # the optimisers whose state the memory planner knows


@dataclass(frozen=True)
class Subject:
    """A model to plan: its layers on the meta device, how to feed them and the training's
    settings the memory depends on. ``key`` names the model and its data's shapes (the meta
    measurements are kept by it); ``unit``: dataset units per sample (token batches: tokens per
    sentence)."""

    layers: Sequence[nn.Module]
    example: Callable[[int, str], Any]  # (n, device) -> n model inputs
    planning_loss: Callable[[Any], torch.Tensor]
    key: str
    optim: str = "rmsprop"
    weight_decay: float = 0.0
    precision: str = "fp32"
    unit: int = 1

    @property
    def planned_optim(self) -> str:
        """The optimiser the memory is planned for (an unknown one: RMSProp, the paper's)."""
        return self.optim if self.optim in OPTIMS else "rmsprop"


def space_of(s: Subject, cap: int, costs: CostModel) -> Space:
    """The planner's search space for ``s``: per-layer activations, parameters, costs, the cap."""
    opt, wd = s.planned_optim, s.weight_decay
    acts = layer_activations(s.layers, s.example, s.planning_loss, key=s.key, precision=s.precision)
    return Space(
        layers=acts,
        params=[sum(p.numel() for p in layer.parameters()) for layer in s.layers],
        optim=opt,
        costs=costs,
        cap=cap,
        unit=s.unit,
        step_bytes=lambda n: step_temporary_bytes(n, opt, wd, "cpu"),
        grads=grad_bytes(s.layers),
    )


def exact_peaks(s: Subject, c: Candidate) -> tuple[int, ...]:
    """The candidate's per-stage peak, planned exactly (``memory.stages.plan_stages``)."""
    stages = plan_stages(
        s.layers,
        s.example,
        s.planning_loss,
        c.balance,
        K=c.K,
        M=c.M,
        micro_batch=max(1, c.micro_batch // s.unit),
        schedule=c.schedule,
        checkpoint=list(c.checkpoint),
        optim=s.planned_optim,
        key=s.key,
        precision=s.precision,
        virtual_stages=c.virtual_stages,
    )
    return tuple(t.total for t in stages)


def simulate_candidate(
    hw: Hardware, space: Space, c: Candidate, costs: CostModel | None = None
) -> SimResult:
    """The candidate's step on the space's costs, or ``costs`` where given (the same layers on
    another link: ``sim.step.simulate_step``), its replicas all-reducing the space's gradient bytes."""
    return simulate_step(
        hw,
        space.costs if costs is None else costs,
        K=c.K,
        M=c.M,
        schedule=c.schedule,
        checkpoint=c.checkpoint,
        balance=c.balance,
        micro_batch=c.micro_batch,
        replicas=c.replicas,
        layer_grad_bytes=space.grads,
        virtual_stages=c.virtual_stages,
    )


@dataclass(frozen=True)
class Point:
    """One schedule at one (K, M) on a hardware profile: its simulated step and each stage's
    planned peak (``schedule_point``)."""

    candidate: Candidate
    result: SimResult
    stage_bytes: tuple[int, ...]

    @property
    def samples_per_s(self) -> float:
        return self.candidate.batch_size / self.result.step_s


def schedule_point(
    s: Subject,
    hw: Hardware,
    space: Space,
    *,
    K: int,
    M: int,
    schedule: str,
    checkpoint: str,
    micro_batch: int,
    virtual_stages: int = 1,
) -> Point:
    """What a schedule buys at K stages and M micro-batches of ``micro_batch``: the exact min-max
    partition of the profile's per-layer time into K·v cells (GPipe §2.1), its step simulated
    (``simulate_candidate``: the engine's action lists, B and W as the profile costs them) and each
    stage's peak planned exactly (``exact_peaks``: the schedule's in-flight counts). The question a
    comparison of schedules asks, one cell at a time (``engine.schedule.check_schedule`` refuses a
    (schedule, K, M, v) that cannot run)."""
    from ..engine.partition import balance_by_cost
    from ..engine.schedule import check_schedule

    v = virtual_stages
    check_schedule(schedule, K, M, v)
    times = [c.forward_s + c.backward_s for c in space.costs.layer_costs(micro_batch)]
    balance = tuple(balance_by_cost(times, K * v))
    c = Candidate(
        K,
        1,
        M,
        schedule,
        (checkpoint,) * K,
        balance,
        micro_batch,
        micro_batch * M,
        0.0,
        virtual_stages=v,
    )
    result = simulate_candidate(hw, space, c)
    return Point(c, result, exact_peaks(s, c))
