"""``gpipe-run plan=auto``: the run's pipeline options are the planner's best configuration.

Before the run is planned (``config.plan``), the planner (``search.choose``, the search ``gpipe-plan``
runs) ranks every configuration of the run's model, data, hardware, precision and
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
from ..config.device import DeviceMemory
from ..metrics.contract import AutoPlanInfo
from ..runplan.plan import BalanceChoice, ModelPlan
from ..search.choose import rank_configurations
from ..search.options import PlanConfig

__all__ = ["auto_plan", "AUTO_CHOICE"]

GiB = 2**30
AUTO_CHOICE = "plan=auto"


def auto_plan(
    spec: RunConfig, model: ModelPlan, memory: DeviceMemory | None
) -> tuple[RunConfig, AutoPlanInfo, BalanceChoice]:
    """The run as the planner would run it, its pick and the partition's provenance; ``memory``:
    the device the engine runs on (None: the simulator's hardware profile)."""
    a = spec.plan
    devices = a.devices
    assert devices is not None  # resolved at validation
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
    return replace(spec, pipeline=pipeline), info, choice
