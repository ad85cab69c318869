"""A run's hardware profile, resolved and costed for its planned model, and its step simulated.

What the ``sim`` backend, ``gpipe-run plan=auto``, ``gpipe-plan`` and the paper's simulated tables
share: the run's ``hardware`` option resolved once into a ``sim.Hardware`` (``hardware_of``; the run's
plan carries it), its costs of the model (``costs_of``; both at once: ``run_hardware``), the
model as the profile costs it (``workload``; ``hardware=measured`` times each distinct layer at the
micro-batches ``profile_sizes`` names, with the run's threads), and one step of the run's pipeline
options on those costs (``simulate_plan``, over ``sim.step.simulate_step``, the one call).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..config.schema import RunConfig
from ..errors import UserError
from ..sim import CostModel, Hardware, HardwareError, SimResult, Workload, resolve_hardware
from ..sim.step import grad_bytes, simulate_step
from .model import ModelPlan

__all__ = [
    "model_key",
    "workload",
    "profile_sizes",
    "measured_sizes",
    "run_hardware",
    "hardware_of",
    "costs_of",
    "simulate_plan",
]


def model_key(spec: RunConfig, model: ModelPlan) -> str:
    """The model and its data's shapes: what profiles, counts and meta measurements are kept by."""
    return f"{spec.model!r}|{model.info!r}"


def workload(spec: RunConfig, model: ModelPlan) -> Workload:
    """The planned model as a hardware profile costs it (``sim.Workload``)."""
    info = model.info

    def targets(n: int) -> torch.Tensor:
        return torch.zeros(n, *(info.shape if info.kind != "image" else ()), dtype=torch.long)

    return Workload(
        key=model_key(spec, model),
        layers=model.layers,
        example=info.example,
        targets=targets,
        loss_fn=model.model.loss_fn,
        planning_loss=model.model.planning_loss,
        seed=spec.seed,
    )


def profile_sizes(cap: int, smallest: int = 1) -> list[int]:
    """The micro-batches ``hardware=measured`` profiles at: the powers of two from ``smallest`` up to
    ``cap`` (the same for every job of a sweep, so the sweep profiles once; others are interpolated,
    and below ``smallest`` scaled in proportion)."""
    sizes = [min(smallest, max(cap, 1))]
    while sizes[-1] * 2 <= cap:
        sizes.append(sizes[-1] * 2)
    return sizes


def _modules(model: ModelPlan) -> list[torch.nn.Module]:
    return [m for layer in model.layers for m in layer.modules()]


def measured_sizes(spec: RunConfig, model: ModelPlan) -> list[int]:
    """The micro-batches ``hardware=measured`` times ``model`` at: ``profile_sizes`` up to
    ``sim.profile_max_micro_batch``, from 2 where batch normalisation in training refuses one
    sample per channel."""
    norm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in _modules(model))
    return profile_sizes(spec.sim.profile_max_micro_batch, smallest=2 if norm else 1)


def run_hardware(spec: RunConfig, model: ModelPlan) -> tuple[Hardware, CostModel]:
    """The run's hardware and its costs for the planned model (``hardware_of``, ``costs_of``)."""
    hw = hardware_of(spec)
    return hw, costs_of(spec, hw, model)


def hardware_of(spec: RunConfig) -> Hardware:
    """The run's ``hardware`` option resolved (once per run: the plan carries it), with the run's
    threads set for a measured profile's timing; a bad profile is one line (UserError)."""
    try:
        hw = resolve_hardware(spec.hardware, spec.device, spec.sim.profile_repeats)
    except HardwareError as err:
        raise UserError(str(err)) from None
    torch.set_num_threads(spec.train.threads)
    return hw


def costs_of(spec: RunConfig, hw: Hardware, model: ModelPlan) -> CostModel:
    """``hw``'s per-layer costs of the planned model at ``spec``'s pipeline options (a measured
    profile times each distinct layer in streams of the run's M, or ``sim.profile_stream``)."""
    sizes = measured_sizes(spec, model)
    stream = spec.sim.profile_stream or spec.pipeline.M  # a stage's M calls, or the set length
    return hw.cost_model(workload(spec, model), sizes, stream)


def simulate_plan(
    spec: RunConfig,
    hw: Hardware,
    costs: CostModel,
    balance: Sequence[int],
    micro_batch: int,
    checkpoint: Sequence[str] | None = None,
    layers: Sequence[torch.nn.Module] = (),
) -> SimResult:
    """One training step of ``spec``'s pipeline cut by ``balance``, on ``costs`` from ``hw``;
    ``checkpoint``: one remat mode per stage (default: ``pipeline.checkpoint`` on every stage).
    With ``pipeline.replicas`` > 1, the gradients of the planned model's ``layers``
    (``sim.step.grad_bytes``; none given: nothing) are all-reduced per stage after its last
    backward."""
    p = spec.pipeline
    return simulate_step(
        hw,
        costs,
        K=p.K,
        M=p.M,
        schedule=p.schedule,
        checkpoint=p.checkpoint if checkpoint is None else checkpoint,
        balance=balance,
        micro_batch=micro_batch,
        replicas=p.replicas,
        layer_grad_bytes=grad_bytes(layers) if layers else (),
        virtual_stages=p.virtual_stages,
    )
