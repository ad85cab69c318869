"""The planner on a composed run: its search space, the search, the exact check of the shown rows.

One function, ``rank_configurations``, for both callers: ``gpipe-plan`` (which prints and writes the
ranking) and ``gpipe-run plan=auto`` (which runs the best row, ``runner.planning``). The model is on
the meta device; per-layer costs come from the run's ``hardware`` (resolved by the caller,
``runplan.costing``), memory from
the memory planner (``memory.stages``), both through ``search.subject``, which the planner's
validation calls too. What is searched: ``search.scan``; how it is pruned: ``search.space``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import RunConfig
from ..errors import UserError
from ..runplan.costing import model_key
from ..runplan.model import ModelPlan
from ..sim import CostModel, Hardware
from .candidate import Candidate, Stats
from .scan import search
from .space import MODES, Space
from .subject import Subject, exact_peaks, simulate_candidate, space_of

__all__ = ["Ranked", "rank_configurations", "search_space", "subject"]

GiB = 2**30


@dataclass(frozen=True)
class Ranked:
    """The search's answer: the rows that fit (planned exactly), best first, and how it went."""

    shown: list[Candidate]
    stats: Stats
    hardware: Hardware
    cap: int  # bytes per device


def subject(spec: RunConfig, model: ModelPlan) -> Subject:
    """The run's model as the planner sees it (``search.subject``): its layers, data and the
    training settings its memory depends on."""
    return Subject(
        layers=model.layers,
        example=model.info.example,
        planning_loss=model.model.planning_loss,
        key=model_key(spec, model),  # the run's plan memoises under the same key
        optim=spec.optim.name,
        weight_decay=float(getattr(spec.optim, "weight_decay", 0.0)),
        precision=spec.train.precision,
        unit=model.unit,
    )


def search_space(spec: RunConfig, model: ModelPlan, cap: int, costs: CostModel) -> Space:
    """The planner's search space for ``spec``'s model: per-layer activations, parameters, costs, cap."""
    return space_of(subject(spec, model), cap, costs)


def rank_configurations(
    spec: RunConfig,
    model: ModelPlan,
    hw: Hardware,
    costs: CostModel,
    *,
    devices: int,
    cap: int | None,
    batch: int | None,
    max_m: int,
    top: int,
) -> Ranked:
    """The ``top`` fastest configurations of ``spec``'s model on ``devices`` devices whose stages
    fit ``cap`` bytes each (None: the hardware profile's memory), timed by ``hw``'s ``costs`` of the
    model (``runplan.costing.run_hardware``: the caller resolves the profile, once); ``batch`` None:
    the largest that fits. Raises UserError (one line) for more devices than layers, no memory,
    nothing that fits."""
    L = len(model.layers)
    if devices > L:
        raise UserError(
            f"plan.devices={devices} exceeds the model's {L} layers; allowed: 1..{L} "
            "(one stage per device at most)"
        )
    cap = cap if cap is not None else hw.memory_bytes
    if cap <= 0:
        raise UserError(f"hardware={hw.name} states no memory; set plan.memory_gib")
    s = subject(spec, model)
    space = space_of(s, cap, costs)

    def simulate(c: Candidate) -> tuple[float, float]:
        r = simulate_candidate(hw, space, c)
        return r.step_s, r.bubble_fraction

    ranked, stats = search(space, devices, batch, max_m, top, simulate)
    shown = []
    for c in ranked:  # the shown rows, planned exactly; never one over the cap
        exact = exact_peaks(s, c)
        if max(exact) <= cap:
            shown.append(replace(c, stage_bytes=exact))
    shown.sort(key=lambda c: (-c.samples_per_s, max(c.stage_bytes)))  # ties: the least memory
    if not shown:  # the least any needs: the least-memory partition at one sample, 1f1b, remat
        K = min(devices, L)
        bal, need = space.least_memory(K, max_m)
        gib = ", ".join(f"{n / 2**20:.3f}" for n in need)
        raise UserError(
            f"plan.memory_gib={cap / GiB:.3g}: no configuration fits; the least any needs (K={K}, "
            f"one sample per micro-batch, 1f1b, remat {MODES[1]}, balance "
            f"{'-'.join(map(str, bal))}) is [{gib}] MiB per stage; raise plan.memory_gib or "
            "plan.devices"
        )
    return Ranked(shown, stats, hw, cap)
