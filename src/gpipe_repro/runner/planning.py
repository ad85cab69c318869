"""A run's plan, made once before it runs: its hardware profile, ``plan=auto``'s pick, its decisions.

``plan`` is the one place a run is planned (``runplan.plan.RunPlan``): the ``hardware`` option is
resolved here, once per run (``backend=sim`` and ``plan=auto`` need it), and the plan carries it and
its costs to the simulated backend; the memory is the profile's, or the devices the engine's ranks
run on (``runplan.plan.engine_memory``).

``gpipe-run plan=auto``: the run's pipeline options are the planner's best configuration. Before the
run's decisions are made, the planner (``search.choose``, the search ``gpipe-plan`` runs) ranks every configuration of the run's model, data, hardware, precision and
``train.batch_size`` on ``plan.devices`` devices (resolved at validation, ``config.validate``) under
a per-device memory cap: ``plan.memory_gib``, else the device the run will use — the hardware
profile's memory (``backend=sim``), each GPU's budget, or on a CPU host an equal share of its RAM
per device (its ranks share it). The best row's K, replicas, M, schedule, per-stage remat and
balance replace the run's pipeline options, once, here; the ranks receive them in the run's plan
and never search. The pick and the planner's prediction go into ``metrics.json``
(``plan.auto``), beside what the run measures.
"""

from __future__ import annotations

from dataclasses import replace

from ..config import RunConfig
from ..metrics.contract import AutoPlanInfo
from ..runplan.costing import costs_of, hardware_of
from ..runplan.model import ModelPlan
from ..runplan.plan import BalanceChoice, RunPlan, engine_memory, plan_run
from ..search.choose import rank_configurations
from ..search.options import PlanConfig
from ..sim import Hardware

__all__ = ["plan", "auto_plan", "AUTO_CHOICE"]

GiB = 2**30
AUTO_CHOICE = "plan=auto"


def plan(spec: RunConfig, model: ModelPlan) -> RunPlan:
    """The run's plan, against the memory it will run in: the hardware profile's (``backend=sim``),
    or the devices the ranks run on — the GPU with the least free memory among this host's, or this
    host's RAM shared by its ranks. ``plan=auto``: the pipeline options are the planner's pick,
    chosen here once, on the same profile."""
    hw, picked = None, None
    if spec.plan.mode == "auto":
        spec, picked, hw = auto_plan(spec, model)
    if spec.backend == "sim":
        hw = hw or hardware_of(spec)
        costs = costs_of(spec, hw, model)  # at the run's own M (plan=auto: the pick's)
        planned = plan_run(spec, model, hardware=hw, costs=costs)
    else:
        planned = plan_run(spec, model, engine_memory(spec), device_type=spec.device)
    return planned if picked is None else replace(planned, auto=picked[0], choice=picked[1])


def auto_plan(
    spec: RunConfig, model: ModelPlan
) -> tuple[RunConfig, tuple[AutoPlanInfo, BalanceChoice], Hardware]:
    """The run as the planner would run it; its pick and the partition's provenance; the run's
    hardware profile (resolved here, once: the plan carries it on). The pick is held to the memory
    the run will use (the simulator's profile, or the engine's devices, ``plan.devices`` of them)
    and timed by the profile's costs of the model."""
    hw = hardware_of(spec)
    a = spec.plan
    devices = a.devices
    assert devices is not None  # resolved at validation
    memory = None if spec.backend == "sim" else engine_memory(spec, devices)
    if a.memory_gib is not None:
        cap: int | None = int(a.memory_gib * GiB)
    elif memory is None:
        cap = None  # the hardware profile's
    elif memory.shared:
        cap = memory.budget(devices) // devices
    else:
        cap = memory.budget()
    r = rank_configurations(
        spec,
        model,
        hw,
        costs_of(spec, hw, model),
        devices=devices,
        cap=cap,
        batch=spec.train.batch_size,
        max_m=a.max_m,
        top=PlanConfig().top,  # gpipe-plan's: the same inputs give the same pick
    )
    c = r.shown[0]
    checkpoint = list(c.checkpoint)
    pipeline = replace(
        spec.pipeline,
        K=c.K,
        M=c.M,
        replicas=c.replicas,
        schedule=c.schedule,
        virtual_stages=c.virtual_stages,
        checkpoint=checkpoint[0] if len(set(checkpoint)) == 1 else checkpoint,
        balance=list(c.balance),
        balance_by="time",
    )
    info = AutoPlanInfo(
        devices=devices,
        memory_cap_bytes=r.cap,
        hardware=r.hardware.name,
        K=c.K,
        replicas=c.replicas,
        M=c.M,
        schedule=c.schedule,
        virtual_stages=c.virtual_stages,
        checkpoint=checkpoint,
        balance=list(c.balance),
        micro_batch=c.micro_batch,
        predicted_step_time_s=c.step_s,
        predicted_throughput=c.samples_per_s,
        predicted_bubble=c.bubble,
        predicted_stage_bytes=list(c.stage_bytes),
        candidates=r.stats.enumerated,
        search_s=r.stats.seconds,
    )
    choice = BalanceChoice(
        AUTO_CHOICE,
        f"the planner's min-max partition of hardware={r.hardware.name}'s per-layer time under "
        f"a {r.cap / GiB:.3g} GiB cap per device",
    )
    return replace(spec, pipeline=pipeline), (info, choice), hw
