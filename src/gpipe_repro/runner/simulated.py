"""The ``sim`` backend: a run's numbers from the discrete-event simulator instead of the engine.

Same input (the validated ``RunConfig`` and its meta-device plan), same output (``metrics.json`` with
``source: simulated`` and the hardware profile, ``trace.json``, ``timeline.png``, live progress for
wandb), so sweeps, reports and wandb never ask which backend produced a row. Per-layer costs come from
the ``hardware`` option: a published device (``sim.roofline`` on the FLOPs and bytes counted on the
meta device — nothing is allocated, a paper-size model simulates in seconds) or ``measured`` (each
layer timed on this device at the run's micro-batch, the link measured over the real backend,
cached: ``sim.measure``). Memory per stage is planned on the meta device (``planner.stages``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig
from ..engine import ArgumentError, balance_by_cost
from ..engine.cost import layer_costs
from ..errors import UserError
from ..metrics.contract import RunMetrics, StageMetrics
from ..metrics.progress import PROGRESS_FILE, ProgressWriter, StepRecord
from ..metrics.summary import base_metrics
from ..planner.stages import layer_memory, plan_stages
from ..rank import Plan
from ..sim.costs import CostModel, LayerCost, stage_costs
from ..sim.count import classification_loss, count_layers, lm_loss
from ..sim.hardware import HardwareError, HardwareProfile, load_profile
from ..sim.simulate import simulate

__all__ = ["simulate_run", "hardware_profile", "MEASURED"]

MEASURED = "measured"
GiB = 2**30


def hardware_profile(hw: Any) -> HardwareProfile | None:
    """The composed ``hardware`` option as a profile (None for ``measured``); one line when invalid."""
    data = dict(hw) if hw is not None else {"name": MEASURED}
    if data.get("name") == MEASURED:
        return None
    try:
        return load_profile(data)
    except HardwareError as err:
        raise UserError(str(err)) from None


def _out_loss(plan: Plan) -> Any:
    return classification_loss if plan.model.task == "classify" else lm_loss


_COUNTS: dict[str, list[Any]] = {}


def _counts(key: str, plan: Plan) -> list[Any]:
    """Per-layer counts at one sample (they scale linearly), once per model in this process: a sweep
    over K and M counts the model once."""
    if key not in _COUNTS:
        _COUNTS[key] = count_layers(plan.layers, plan.info.example(1, "meta"), _out_loss(plan))
    return _COUNTS[key]


def _cost_model(spec: RunConfig, plan: Plan, hw: HardwareProfile | None, micro_batch: int) -> CostModel:
    if hw is not None:
        from ..sim.roofline import RooflineCosts

        return RooflineCosts(hw, _counts(_model_key(spec, plan), plan))
    from ..models import materialize
    from ..sim.measure import MeasuredCosts, measure_link, profile_layers

    torch.set_num_threads(spec.train.threads)
    real = materialize([_copy(m) for m in plan.layers], spec.seed)
    info = plan.info

    def sample(n: int) -> tuple[Any, Any]:
        x = info.example(n)
        y = torch.zeros(n, *(info.shape if info.kind != "image" else ()), dtype=torch.long)
        return x, y

    prof = profile_layers(real, sample, [micro_batch], loss_fn=plan.model.loss_fn)
    return MeasuredCosts(prof, measure_link().link, 0.0)


def _copy(m: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(m)


def _model_key(spec: RunConfig, plan: Plan) -> str:
    return f"{spec.model!r}|{plan.info!r}"


def _balance(spec: RunConfig, plan: Plan, lc: list[LayerCost], micro_batch: int) -> tuple[list[int], list[float]]:
    p = spec.pipeline
    if p.balance_by == "time":
        costs = [c.forward_s + c.backward_s for c in lc]
    elif p.balance_by == "memory":
        costs = [float(b) for b in _layer_memory(spec, plan, micro_batch)]
    else:
        costs = layer_costs(plan.layers, plan.info.example(micro_batch, "meta"), p.balance_by)
    try:
        return (list(p.balance) if p.balance is not None else balance_by_cost(costs, p.K)), costs
    except ArgumentError as err:
        from ..config.validate import engine_error

        raise engine_error(err) from None


def _layer_memory(spec: RunConfig, plan: Plan, micro_batch: int) -> list[int]:
    return layer_memory(plan.layers, plan.info.example, _out_loss(plan), M=spec.pipeline.M,
                        micro_batch=micro_batch, schedule=spec.pipeline.schedule,
                        checkpoint=spec.pipeline.checkpoint, optim=spec.optim.name, key=_model_key(spec, plan),
                        precision=spec.train.precision)


def simulate_run(spec: RunConfig, plan: Plan, out: Path) -> tuple[RunMetrics, list[Any]]:
    """Simulate one training step of ``spec``; the metrics and the simulated events (trace)."""
    p, t = spec.pipeline, spec.train
    mb = t.batch_size // p.replicas // p.M
    hw = hardware_profile(spec.hardware)
    costs = _cost_model(spec, plan, hw, mb)
    lc = costs.layer_costs(mb)
    balance, part_costs = _balance(spec, plan, lc, mb)
    mem = plan_stages(plan.layers, plan.info.example, _out_loss(plan), balance, K=p.K, M=p.M, micro_batch=mb,
                      schedule=p.schedule, checkpoint=p.checkpoint, optim=spec.optim.name,
                      key=_model_key(spec, plan), precision=spec.train.precision)
    if hw is not None:
        per_layer = _layer_memory(spec, plan, mb)
        worst = max(range(len(per_layer)), key=lambda i: per_layer[i])
        if per_layer[worst] > hw.memory_bytes:
            raise UserError(f"hardware={hw.name}: layer {worst} ({type(plan.layers[worst]).__name__}) alone needs "
                            f"{per_layer[worst] / GiB:.2f} GiB > the {hw.memory_bytes / GiB:.2f} GiB of one device "
                            "at this micro-batch; a single layer must fit (GPipe §6)")
    res = simulate(p.K, p.M, p.schedule, p.checkpoint, stage_costs(lc, balance), costs.link, costs.overhead_s,
                   sender_busy=hw.send_occupies_sender if hw is not None else True)
    m = base_metrics(spec, launcher="sim")
    assert m.model is not None and m.pipeline is not None
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
        names = [type(layer).__name__ for layer in plan.layers[start:start + b]]
        params = sum(q.numel() for layer in plan.layers[start:start + b] for q in layer.parameters())
        st = mem[k]
        m.stages.append(StageMetrics(
            stage=k, layers=b, layer_names=names, param_count=params, param_bytes=4 * params,
            grad_bytes=4 * params, optimizer_bytes=st.state - 8 * params, activation_bytes=st.activation,
            peak_memory_bytes=st.total, accounted_memory_bytes=st.total, memory_source="planned",
            busy_s=res.busy_s[k]))
        start += b
    m.layer_costs = part_costs
    budget = hw.memory_bytes if hw is not None else None
    m.hardware = {**(asdict(hw) if hw is not None else {"name": MEASURED, "device": spec.device}),
                  "fits_memory": None if budget is None else max(s.total for s in mem) <= budget,
                  "peak_in_flight": res.peak_in_flight, "micro_batch": mb}
    m.env.device_names = [hw.name if hw is not None else f"{MEASURED} ({spec.device})"]
    progress = ProgressWriter(out / PROGRESS_FILE)
    for step in range(t.steps):  # one simulated step stands for each: wandb sees the same series
        progress.write(StepRecord(step, None, res.step_s, t.batch_size / res.step_s, m.tokens_per_s))
    for e in res.events:
        e.step = t.steps - 1
    return m, res.events

