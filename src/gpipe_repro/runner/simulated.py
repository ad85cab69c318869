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
come from the run's plan (``runplan.plan``), made against the profile's memory; the plan carries the
profile, resolved once for the run, and its costs. The step's costing is shared with the planner
(``runplan.costing``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..engine.cell import chunk_slices
from ..metrics.contract import RunMetrics, StageMetrics
from ..metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from ..metrics.summary import base_metrics, plan_info
from ..runplan.costing import simulate_plan
from ..runplan.model import ModelPlan
from ..runplan.plan import RunPlan

__all__ = ["simulate_run"]

Plan = ModelPlan


def simulate_run(run: RunPlan, plan: Plan, out: Path) -> tuple[RunMetrics, list[Any]]:
    """Simulate one training step of the planned run; the metrics and the simulated events (trace)."""
    spec = run.spec
    p, t = spec.pipeline, spec.train
    hw, costs = run.hardware, run.costs  # resolved once, when the run was planned
    assert hw is not None and costs is not None, "a simulated run's plan carries its profile"
    mb, balance, mem = run.micro_batch, run.balance, run.stages  # each layer fits (the plan)
    res = simulate_plan(spec, hw, costs, balance, mb, layers=plan.layers)
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
                recompute_s=res.recompute_s[k],
            )
        )
    m.layer_costs = run.choice.costs
    m.env.device_names = [record.get("device", hw.name)]
    m.env.threads_per_rank = torch.get_num_threads()  # as set for the profile (``hardware_of``)
    progress = ProgressWriter(out / PROGRESS_FILE)
    for step in range(t.steps):  # one simulated step stands for each: wandb sees the same series
        progress.write(
            StepRecord(step, None, res.step_s, t.batch_size / res.step_s, m.tokens_per_s)
        )
    for e in res.events:
        e.step = t.steps - 1
    return m, res.events
