"""The ``sim`` backend: a run's numbers from the discrete-event simulator instead of the engine.

Same input (the validated ``RunConfig`` and its meta-device plan), same output (``metrics.json`` with
``source: simulated`` and the hardware profile, ``trace.json``, ``timeline.png``, live progress for
wandb), so sweeps, reports and wandb never ask which backend produced a row. Per-layer costs come from
the ``hardware`` option, resolved once into a ``sim.Hardware``: a published device (a roofline on the
FLOPs and bytes counted on the meta device — nothing is allocated, a paper-size model simulates in
seconds) or ``measured`` (each distinct layer timed on this device at the micro-batches
``sim.profile_max_micro_batch`` allows, one layer in memory at a time; the link and the engine's
overheads calibrated once per device; all cached: ``sim.measured``). The micro-batch, the partition
(``balance_by=time``: the profile's per-layer time), every stage's memory and ``train.batch_mode=fit``
come from the run's plan (``config.plan``), made against the profile's memory (``sim_planning``).
The profile's resolution and the step's costing are shared with the planner (``runplan.costing``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig
from ..config.device import DeviceMemory
from ..engine.cell import chunk_slices
from ..engine.checkpoint import stage_mode
from ..engine.events import busy_time
from ..engine.schedule import ideal_bubble
from ..errors import UserError
from ..memory.stages import layer_memory
from ..metrics.contract import RunMetrics, StageMetrics
from ..metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from ..metrics.summary import base_metrics, plan_info
from ..runplan.costing import model_key, run_hardware, simulate_plan
from ..runplan.plan import ModelPlan, RunPlan
from ..sim.step import grad_bytes

__all__ = ["simulate_run", "sim_planning"]

Plan = ModelPlan

GiB = 2**30


def _layer_memory(spec: RunConfig, plan: Plan, micro_batch: int) -> list[int]:
    """Each layer alone with one micro-batch in flight: the least any partition and M need of it
    (with M in flight each layer would keep its own input M times, which inside a stage only the
    stage's first layer does)."""
    return layer_memory(
        plan.layers,
        plan.info.example,
        plan.model.planning_loss,
        M=1,
        micro_batch=micro_batch,
        schedule=spec.pipeline.schedule,
        checkpoint=stage_mode(spec.pipeline.checkpoint, 0),  # each layer alone: the first's mode
        optim=spec.optim.name,
        key=model_key(spec, plan),
        precision=spec.train.precision,
    )


def sim_planning(
    spec: RunConfig, plan: Plan
) -> tuple[DeviceMemory, Callable[[int], list[float]], str]:
    """What the run's plan needs from the profile: one device's memory, and the per-layer time
    (forward + backward) at a micro-batch, for ``balance_by=time``."""
    hw, costs = run_hardware(spec, plan)

    def times(n: int) -> list[float]:
        return [c.forward_s + c.backward_s for c in costs.layer_costs(n)]

    where = f"hardware={hw.name}"
    return DeviceMemory(where, hw.memory_bytes, hw.memory_bytes, 0), times, where


def simulate_run(run: RunPlan, plan: Plan, out: Path) -> tuple[RunMetrics, list[Any]]:
    """Simulate one training step of the planned run; the metrics and the simulated events (trace)."""
    spec = run.spec
    p, t = spec.pipeline, spec.train
    hw, costs = run_hardware(spec, plan)
    mb, balance, mem = run.micro_batch, run.balance, run.stages
    per_layer = _layer_memory(spec, plan, mb)
    worst = max(range(len(per_layer)), key=lambda i: per_layer[i])
    if per_layer[worst] > hw.memory_bytes:
        raise UserError(
            f"hardware={hw.name}: layer {worst} ({type(plan.layers[worst]).__name__}) alone needs "
            f"{per_layer[worst] / GiB:.2f} GiB > the {hw.memory_bytes / GiB:.2f} GiB of one device "
            "at this micro-batch; a single layer must fit (GPipe §6)"
        )
    res = simulate_plan(spec, hw, costs, balance, mb, layer_grad_bytes=grad_bytes(plan.layers))
    record = hw.record()
    budget = run.memory.budget()
    m = base_metrics(
        spec,
        launcher="sim",
        hardware={
            **record,
            "memory_bytes": budget,
            "fits_memory": max(s.total for s in mem) <= budget,
            "peak_in_flight": res.peak_in_flight,
            "micro_batch": mb,
        },
    )
    assert m.model is not None and m.pipeline is not None
    m.plan = plan_info(run)
    m.model.param_count = sum(q.numel() for layer in plan.layers for q in layer.parameters())
    m.pipeline.balance = balance
    m.step_time_s = res.step_s
    m.step_times_s = [res.step_s] * t.steps
    m.throughput = t.batch_size / res.step_s
    tokens = plan.info.tokens_per_sample
    m.tokens_per_s = m.throughput * tokens if tokens else None
    m.bubble_fraction = res.bubble_fraction
    m.bubble_ideal = ideal_bubble(p.schedule, p.K, p.M, p.virtual_stages)
    for k in range(p.K):  # a stage's cells: k, k + K, ... (one with virtual_stages=1)
        mine = [layer for sl in chunk_slices(balance, p.K, k) for layer in plan.layers[sl]]
        names = [type(layer).__name__ for layer in mine]
        params = sum(q.numel() for layer in mine for q in layer.parameters())
        st = mem[k]
        m.stages.append(
            StageMetrics(
                stage=k,
                layers=len(mine),
                layer_names=names,
                param_count=params,
                param_bytes=4 * params,
                grad_bytes=4 * params,
                optimizer_bytes=st.state - 8 * params,
                activation_bytes=st.activation,
                peak_memory_bytes=st.total,
                accounted_memory_bytes=st.total,
                memory_source="planned",
                busy_s=res.busy_s[k],
                recompute_s=busy_time(
                    e for e in res.events if (e.stage, e.action) == (k, "recompute")
                ),
            )
        )
    m.layer_costs = run.choice.costs
    m.env.device_names = [record.get("device", hw.name)]
    m.env.threads_per_rank = torch.get_num_threads()  # as set for the profile (``run_hardware``)
    progress = ProgressWriter(out / PROGRESS_FILE)
    for step in range(t.steps):  # one simulated step stands for each: wandb sees the same series
        progress.write(
            StepRecord(step, None, res.step_s, t.batch_size / res.step_s, m.tokens_per_s)
        )
    for e in res.events:
        e.step = t.steps - 1
    return m, res.events
