"""The ``sim`` backend: a run's numbers from the discrete-event simulator instead of the engine.

Same input (the validated ``RunConfig`` and its meta-device plan), same output (``metrics.json`` with
``source: simulated`` and the hardware profile, ``trace.json``, ``timeline.png``, live progress for
wandb), so sweeps, reports and wandb never ask which backend produced a row. Per-layer costs come from
the ``hardware`` option: a published device (``sim.roofline`` on the FLOPs and bytes counted on the
meta device — nothing is allocated, a paper-size model simulates in seconds) or ``measured`` (each
distinct layer timed on this device at the micro-batches ``sim.profile_max_micro_batch`` allows, one
layer in memory at a time; the link and the engine's overheads calibrated once per device; all
cached: ``sim.device``). The micro-batch, the partition (``balance_by=time``: the profile's
per-layer time), every stage's memory and ``train.batch_mode=fit`` come from the run's plan
(``config.plan``), made against the profile's memory (``sim_planning``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig
from ..config.device import DeviceMemory
from ..config.plan import ModelPlan, RunPlan, planning_loss
from ..errors import UserError
from ..metrics.contract import RunMetrics, StageMetrics
from ..metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from ..metrics.summary import base_metrics, plan_info
from ..planner.stages import layer_memory
from ..sim.costs import CostModel, stage_costs
from ..sim.count import count_layers
from ..sim.device import host_memory_bytes
from ..sim.hardware import MEASURED, HardwareError, HardwareProfile, hardware_profile
from ..sim.simulate import simulate

__all__ = ["simulate_run", "sim_planning", "measured_model", "profile_sizes"]

Plan = ModelPlan

GiB = 2**30
LOOKAHEAD = (
    4  # engine.Pipeline's default: receives are posted 4 actions ahead (gloo waits for them)
)


def _out_loss(plan: Plan) -> Any:
    return planning_loss(plan.model)


_COUNTS: dict[str, list[Any]] = {}


def _counts(key: str, plan: Plan) -> list[Any]:
    """Per-layer counts at one sample (they scale linearly), once per model in this process: a sweep
    over K and M counts the model once."""
    if key not in _COUNTS:
        # at 2 samples: BatchNorm refuses one sample per channel in training mode (counts scale linearly)
        _COUNTS[key] = count_layers(plan.layers, plan.info.example(2, "meta"), _out_loss(plan))
    return _COUNTS[key]


def _cost_model(spec: RunConfig, plan: Plan, hw: HardwareProfile | None) -> CostModel:
    if hw is not None:
        from ..sim.roofline import RooflineCosts

        return RooflineCosts(hw, _counts(_model_key(spec, plan), plan))
    return measured_model(
        spec,
        plan,
        profile_sizes(spec.sim.profile_max_micro_batch),
        repeats=spec.sim.profile_repeats,
    )


def profile_sizes(cap: int) -> list[int]:
    """The micro-batches ``hardware=measured`` profiles at: the powers of two up to ``cap`` (the same
    for every job of a sweep, so the sweep profiles once; others are interpolated)."""
    sizes = [1]
    while sizes[-1] * 2 <= cap:
        sizes.append(sizes[-1] * 2)
    return sizes


_MEASURED: dict[tuple, CostModel] = {}


def measured_model(spec: RunConfig, plan: Plan, sizes: list[int], repeats: int = 5) -> CostModel:
    """This device's costs for ``plan``: each distinct layer timed at ``sizes`` (one layer in memory at a
    time, cached on disk, and in this process for the rest of a sweep), beyond them the largest size's
    per-sample cost; the link and engine overheads calibrated once per device (``sim.device``)."""
    from ..sim.device import measured_costs

    memo = (_model_key(spec, plan), spec.seed, spec.train.threads, tuple(sizes), repeats)
    if memo in _MEASURED:
        return _MEASURED[memo]

    torch.set_num_threads(spec.train.threads)
    info = plan.info

    def targets(n: int) -> torch.Tensor:
        return torch.zeros(n, *(info.shape if info.kind != "image" else ()), dtype=torch.long)

    costs, _ = measured_costs(
        plan.layers,
        info.example,
        targets,
        sizes,
        loss_fn=plan.model.loss_fn,
        seed=spec.seed,
        repeats=repeats,
        extrapolate="proportional",
        on=spec.device,
    )
    _MEASURED[memo] = costs
    return costs


def _model_key(spec: RunConfig, plan: Plan) -> str:
    return f"{spec.model!r}|{plan.info!r}"


def _layer_memory(spec: RunConfig, plan: Plan, micro_batch: int) -> list[int]:
    return layer_memory(
        plan.layers,
        plan.info.example,
        _out_loss(plan),
        M=spec.pipeline.M,
        micro_batch=micro_batch,
        schedule=spec.pipeline.schedule,
        checkpoint=spec.pipeline.checkpoint,
        optim=spec.optim.name,
        key=_model_key(spec, plan),
        precision=spec.train.precision,
    )


def _profile(spec: RunConfig) -> HardwareProfile | None:
    try:
        return hardware_profile(spec.hardware)
    except HardwareError as err:
        raise UserError(str(err)) from None


def _device_memory(hw: HardwareProfile | None, spec: RunConfig) -> DeviceMemory:
    if hw is not None:
        return DeviceMemory(f"hardware={hw.name}", hw.memory_bytes, hw.memory_bytes, 0)
    total = (
        int(torch.cuda.get_device_properties(0).total_memory)
        if spec.device == "cuda"
        else host_memory_bytes()
    )
    return DeviceMemory(f"hardware={MEASURED}", total, total, 0)


def sim_planning(
    spec: RunConfig, plan: Plan
) -> tuple[DeviceMemory, Callable[[int], list[float]], str]:
    """What the run's plan needs from the profile: one device's memory, and the per-layer time
    (forward + backward) at a micro-batch, for ``balance_by=time``."""
    hw = _profile(spec)
    costs = _cost_model(spec, plan, hw)

    def times(n: int) -> list[float]:
        return [c.forward_s + c.backward_s for c in costs.layer_costs(n)]

    return _device_memory(hw, spec), times, f"hardware={hw.name if hw else MEASURED}"


def simulate_run(run: RunPlan, plan: Plan, out: Path) -> tuple[RunMetrics, list[Any]]:
    """Simulate one training step of the planned run; the metrics and the simulated events (trace)."""
    spec = run.spec
    p, t = spec.pipeline, spec.train
    hw = _profile(spec)
    costs = _cost_model(spec, plan, hw)
    mb, balance, mem = run.micro_batch, run.balance, run.stages
    lc = costs.layer_costs(mb)
    if hw is not None:
        per_layer = _layer_memory(spec, plan, mb)
        worst = max(range(len(per_layer)), key=lambda i: per_layer[i])
        if per_layer[worst] > hw.memory_bytes:
            raise UserError(
                f"hardware={hw.name}: layer {worst} ({type(plan.layers[worst]).__name__}) alone needs "
                f"{per_layer[worst] / GiB:.2f} GiB > the {hw.memory_bytes / GiB:.2f} GiB of one device "
                "at this micro-batch; a single layer must fit (GPipe §6)"
            )
    res = simulate(
        p.K,
        p.M,
        p.schedule,
        p.checkpoint,
        stage_costs(lc, balance),
        costs.link,
        costs.overhead_s,
        sender_busy=hw.send_occupies_sender if hw is not None else False,
        step_overhead_s=costs.step_overhead_s,
        lookahead=None if hw is not None else LOOKAHEAD,
    )
    m = base_metrics(spec, launcher="sim")
    assert m.model is not None and m.pipeline is not None
    m.plan = plan_info(run)
    m.source = "simulated"
    m.model.param_count = sum(q.numel() for layer in plan.layers for q in layer.parameters())
    m.pipeline.balance = balance
    m.step_time_s = res.step_s
    m.step_times_s = [res.step_s] * t.steps
    m.throughput = t.batch_size / res.step_s
    tokens = plan.info.tokens_per_sample
    m.tokens_per_s = m.throughput * tokens if tokens else None
    m.bubble_fraction = res.bubble_fraction
    m.bubble_ideal = (p.K - 1) / (p.M + p.K - 1)
    start = 0
    for k, b in enumerate(balance):
        names = [type(layer).__name__ for layer in plan.layers[start : start + b]]
        params = sum(
            q.numel() for layer in plan.layers[start : start + b] for q in layer.parameters()
        )
        st = mem[k]
        m.stages.append(
            StageMetrics(
                stage=k,
                layers=b,
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
            )
        )
        start += b
    m.layer_costs = run.choice.costs
    budget = run.memory.budget()
    m.hardware = {
        **(asdict(hw) if hw is not None else {"name": MEASURED, "device": spec.device}),
        "memory_bytes": budget,
        "fits_memory": max(s.total for s in mem) <= budget,
        "peak_in_flight": res.peak_in_flight,
        "micro_batch": mb,
    }
    m.env.device_names = [hw.name if hw is not None else f"{MEASURED} ({spec.device})"]
    progress = ProgressWriter(out / PROGRESS_FILE)
    for step in range(t.steps):  # one simulated step stands for each: wandb sees the same series
        progress.write(
            StepRecord(step, None, res.step_s, t.batch_size / res.step_s, m.tokens_per_s)
        )
    for e in res.events:
        e.step = t.steps - 1
    return m, res.events
