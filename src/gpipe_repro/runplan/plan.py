"""A run's plan: its decisions made once, before anything runs, and handed down (issue #17 item 3).

The micro-batch, the partition (one chooser: the exact min-max partition of one per-layer cost, or
the explicit ``pipeline.balance``), every stage's memory (one ``memory.stages.plan_stages`` call,
always with the run's precision, device and token sizing), the loss the planner runs the last stage
with, and the device memory it is held against. The memory guard, ``train.batch_mode=fit``, the
simulated backend, ``train.predict`` and every rank read this object; none recomputes any of it.

Two costs cannot be counted on the meta device, and say so:

- ``balance_by=time`` on the engine is measured by the ranks on their own devices when they start
  (``rank.balance``), because the time that matters is the GPU's, not this process's CPU's; until
  then FLOPs stand in for it (the memory guard and the fit plan that partition), and both the plan
  and ``metrics.json`` name the stand-in. On the simulator, time is the hardware profile's.
- ``balance_by=memory`` is the planner's per-layer memory (each layer alone), not a measurement.

Token sizing: a dataset that counts its mini-batch in target tokens (``DataSpec.batch_tokens``:
translation) is planned at its widest shape, ``micro_batch // max_len`` sentences of ``max_len``
tokens.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config.device import DeviceMemory, device_for, local_ranks
from ..config.schema import RunConfig
from ..config.validate import engine_error
from ..engine import ArgumentError, balance_by_cost
from ..engine.checkpoint import stage_mode
from ..engine.cost import COUNTED_KINDS, layer_costs
from ..errors import UserError
from ..memory.stages import StagePlan, plan_stages
from ..options import opt
from ..sim import CostModel, Hardware
from .model import ModelPlan, plan_model

__all__ = [
    "AutoPlanInfo",
    "ModelPlan",  # runplan.model's, named here too
    "BalanceChoice",
    "RunPlan",
    "plan_model",
    "plan_run",
    "engine_memory",
    "choose_balance",
]

GiB = 2**30
FIT_ROUNDS = (
    4  # partition and fit alternate until they agree (a time partition depends on the batch)
)


@dataclass
class AutoPlanInfo:
    """``plan=auto``: the planner's pick for this run (the pipeline options it ran with) and what
    the planner predicted for it, beside what the run measured."""

    devices: int = opt(0, "devices the planner searched for (K * replicas <= devices)")
    memory_cap_bytes: int = opt(0, "the per-device memory cap the planner held every stage to")
    hardware: str = opt("", "the hardware profile the planner costed the layers with")
    K: int = opt(0, "partitions chosen")
    replicas: int = opt(0, "data-parallel replicas chosen")
    M: int = opt(0, "micro-batches chosen")
    schedule: str = opt("", "schedule chosen")
    virtual_stages: int = opt(1, "cells per stage chosen (pipeline.virtual_stages)")
    checkpoint: list[str] = opt([], "rematerialisation chosen, one mode per stage")
    balance: list[int] = opt([], "layers per model cell chosen (K * virtual_stages of them)")
    micro_batch: int = opt(0, "samples (or target tokens) per micro-batch and replica")
    predicted_step_time_s: float = opt(0.0, "the planner's simulated step time")
    predicted_throughput: float = opt(0.0, "samples per second from predicted_step_time_s")
    predicted_bubble: float = opt(0.0, "the planner's simulated bubble fraction")
    predicted_stage_bytes: list[int] = opt([], "each stage's peak memory as the planner planned it")
    candidates: int = opt(0, "configurations the search scored")
    search_s: float = opt(0.0, "seconds the search took")


@dataclass(frozen=True)
class BalanceChoice:
    """How the partition was chosen: which per-layer cost, where it came from, what stands in."""

    cost: str  # params, flops, memory, time, or explicit (pipeline.balance)
    source: str  # how the costs were obtained, in words
    costs: list[float] = field(default_factory=list)
    stand_in: str | None = None  # the cost asked for, when ``cost`` stands in for it until measured

    def describe(self) -> str:
        if self.stand_in is not None:
            return f"{self.cost} standing in for {self.stand_in} ({self.source})"
        return f"{self.cost} ({self.source})"


def choose_balance(costs: Sequence[float], K: int) -> list[int]:
    """The one chooser: the exact min-max contiguous partition of per-layer ``costs`` (paper §2.1)."""
    try:
        return balance_by_cost(costs, K)
    except ArgumentError as err:
        raise engine_error(err) from None


@dataclass(frozen=True)
class RunPlan:
    """Everything decided about a run before it runs (plain data: it travels to every rank)."""

    spec: RunConfig  # as run: ``train.batch_mode=fit`` resolved into ``train.batch_size``
    micro_batch: int  # per replica, in the dataset's unit (samples, or target tokens)
    sentences: int  # the micro-batch the memory is planned at (token batches: sentences of max_len)
    balance: list[int]
    choice: BalanceChoice
    stages: list[StagePlan]
    memory: DeviceMemory
    measure_time: bool = False  # the ranks measure per-layer time and choose the partition with it
    auto: AutoPlanInfo | None = None  # plan=auto: the planner's pick (``runner.planning``)
    # backend=sim: the hardware profile, resolved once for the run, and its costs of this model at
    # the run's pipeline options (None on the engine, whose ranks measure on their own devices)
    hardware: Hardware | None = None
    costs: CostModel | None = None

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    def planned_bytes(self) -> list[int]:
        return [s.total for s in self.stages]

    def with_balance(self, balance: list[int], choice: BalanceChoice) -> RunPlan:
        """This plan with the partition the ranks chose from the time they measured."""
        return replace(self, balance=list(balance), choice=choice, measure_time=False)


class _Planner:
    """The run's one way to cost layers and plan stages (every call of ``plan_stages`` is here)."""

    def __init__(
        self,
        spec: RunConfig,
        model: ModelPlan,
        device_type: str,
        costs: CostModel | None,
        where: str,
    ) -> None:
        self.spec, self.model, self.device_type = spec, model, device_type
        self.costs, self.where = costs, where  # the profile's per-layer costs (time), and whose
        self.loss = model.model.planning_loss  # target-free: the loss of the last stage
        self.unit = model.unit
        self.key = f"{spec.model!r}|{model.info!r}"

    def sentences(self, micro_batch: int) -> int:
        return max(1, micro_batch // self.unit)

    def stages(
        self, balance: Sequence[int], n: int, K: int | None = None, M: int | None = None
    ) -> list[StagePlan]:
        """The stages' memory at ``n`` samples (sentences) per micro-batch."""
        s, p = self.spec, self.spec.pipeline
        per_layer = K is not None and K != p.K  # each layer alone: the first stage's mode
        kw: dict[str, Any] = dict(
            K=K or p.K,
            virtual_stages=1 if per_layer else p.virtual_stages,
            M=M or p.M,
            micro_batch=n,
            # each layer alone is one cell per stage: interleaved's is 1F1B's walk
            schedule="1f1b" if per_layer and p.schedule == "interleaved" else p.schedule,
            checkpoint=stage_mode(p.checkpoint, 0) if per_layer else p.checkpoint,
            optim=s.optim.name,
            key=self.key,
            precision=s.train.precision,
            weight_decay=float(getattr(s.optim, "weight_decay", 0.0)),
        )
        m = self.model
        while True:  # planned with the kernels and autocast policy of the device the ranks run on
            try:
                return plan_stages(
                    m.layers, m.info.example, self.loss, balance, device_type=self.device_type, **kw
                )
            except Exception as err:  # noqa: BLE001 - a plan is advice: fall back to CPU's kernels
                if self.device_type == "cpu":
                    raise
                print(
                    f"gpipe-run: planning on fake {self.device_type} tensors failed "
                    f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                    "planned with CPU's kernels",
                    file=sys.stderr,
                )
                self.device_type = "cpu"

    def balance(self, n: int) -> tuple[list[int], BalanceChoice, bool]:
        """The partition at ``n`` samples per micro-batch; True when the ranks must measure time."""
        p, layers = self.spec.pipeline, self.model.layers
        if p.balance is not None:
            return list(p.balance), BalanceChoice("explicit", "pipeline.balance"), False
        kind, measure, stand_in = p.balance_by, False, None
        cells = p.K * p.virtual_stages
        if kind == "time" and self.costs is not None:
            costs = [c.forward_s + c.backward_s for c in self.costs.layer_costs(n)]
            return choose_balance(costs, cells), BalanceChoice("time", self.where, costs), False
        if kind == "time" and cells == 1:
            return [len(layers)], BalanceChoice("time", "one stage: nothing to measure"), False
        if kind == "time":  # the ranks measure it on their devices; FLOPs until then
            kind, measure, stand_in = "flops", True, "time"
        if kind in COUNTED_KINDS:
            costs = layer_costs(layers, self.model.info.example(n, "meta"), kind)
            source = "counted on the meta device"
        else:  # memory
            each = self.stages([1] * len(layers), n, K=len(layers))
            costs = [float(s.total) for s in each]
            source = "planned per layer, each alone"
        choice = BalanceChoice(kind, source, costs, stand_in)
        return choose_balance(costs, cells), choice, measure


def _size(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB"


def _fits(stages: Sequence[StagePlan], n: int, memory: DeviceMemory, replicas: int) -> bool:
    if memory.shared:
        ranks = len(stages) * replicas
        return replicas * sum(s.at(n) for s in stages) <= memory.budget(ranks)
    return max(s.at(n) for s in stages) <= memory.budget()


def _largest(stages: Sequence[StagePlan], memory: DeviceMemory, spec: RunConfig) -> int:
    """The largest micro-batch (samples) whose stages fit ``memory``; one line when none does."""
    p = spec.pipeline
    if not _fits(stages, 1, memory, p.replicas):
        k = max(range(len(stages)), key=lambda i: stages[i].at(1))
        st = stages[k]
        room = (
            f"{_size(memory.budget(p.K * p.replicas))} for all {p.K * p.replicas} ranks"
            if memory.shared
            else f"{_size(memory.budget())} per device"
        )
        raise UserError(
            f"train.batch_mode=fit: no batch fits {memory.where} ({room}) at "
            f"pipeline.K={p.K}: stage {k} needs {_size(st.state)} of weights and optimiser state "
            f"+ {_size(st.per_sample)} per sample; raise pipeline.K or use train.batch_mode=fixed"
        )
    lo, hi = 1, 2
    while hi < 2**31 and _fits(stages, hi, memory, p.replicas):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # memory grows with the micro-batch: bisect the last size that fits
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits(stages, mid, memory, p.replicas) else (lo, mid)
    return lo


def _each_layer_fits(planner: _Planner, n: int, memory: DeviceMemory) -> None:
    """Each layer alone with one micro-batch of ``n`` in flight (the least any partition and M need
    of it) fits one device, or one line naming the largest (GPipe §6: a single layer must fit)."""
    layers = planner.model.layers
    alone = [s.total for s in planner.stages([1] * len(layers), n, K=len(layers), M=1)]
    worst = max(range(len(alone)), key=lambda i: alone[i])
    if alone[worst] > memory.budget():
        raise UserError(
            f"{memory.where}: layer {worst} ({type(layers[worst]).__name__}) alone needs "
            f"{alone[worst] / GiB:.2f} GiB > the {memory.budget() / GiB:.2f} GiB of one device "
            "at this micro-batch; a single layer must fit (GPipe §6)"
        )


def plan_run(
    spec: RunConfig,
    model: ModelPlan,
    memory: DeviceMemory | None = None,
    *,
    device_type: str = "cpu",
    hardware: Hardware | None = None,
    costs: CostModel | None = None,
) -> RunPlan:
    """Plan ``spec`` against ``memory`` (the engine's: ``engine_memory``). ``device_type``: the
    kernels the stages are planned with. ``hardware`` and its ``costs`` (backend=sim): the memory
    is one of the profile's devices, on which every layer alone must fit, and ``balance_by=time``
    its per-layer time; else ``balance_by=time`` is measured by the ranks."""
    p = spec.pipeline
    if hardware is not None:
        size = hardware.memory_bytes
        memory = DeviceMemory(f"hardware={hardware.name}", size, size, 0)
    assert memory is not None, "plan_run: the memory, or the hardware profile that has it"
    planner = _Planner(spec, model, device_type, costs, memory.where)
    mb = spec.train.batch_size // p.replicas // p.M
    if spec.train.batch_mode == "fit":
        n, seen = planner.sentences(mb), set()
        for _ in range(FIT_ROUNDS):
            balance, _, _ = planner.balance(n)
            best = _largest(planner.stages(balance, 1), memory, spec)
            if best == n or (best, tuple(balance)) in seen:
                break
            seen.add((best, tuple(balance)))
            n = best
        n = best
        mb = n * planner.unit
        spec = replace(spec, train=replace(spec.train, batch_size=mb * p.M * p.replicas))
    n = planner.sentences(mb)
    balance, choice, measure = planner.balance(n)
    stages = planner.stages(balance, n)
    if hardware is not None:
        _each_layer_fits(planner, n, memory)
    return RunPlan(spec, mb, n, balance, choice, stages, memory, measure, None, hardware, costs)


def engine_memory(spec: RunConfig, ranks: int | None = None) -> DeviceMemory:
    """The memory the engine's ranks run in (``ranks``: how many, default the run's world size):
    the GPU with the least free memory among those of this host they use, or this host's RAM."""
    if spec.device != "cuda":
        return device_for("cpu").memory()
    world = spec.world_size if ranks is None else ranks
    here = min(local_ranks(world), max(1, device_for("cuda").count()))
    return min((device_for("cuda", i).memory() for i in range(here)), key=lambda m: m.budget())
