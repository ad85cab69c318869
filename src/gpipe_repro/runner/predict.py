"""``train.predict``: the simulator's step time for an engine run, beside the measured one.

After a measured run, its configuration is simulated on this device's measured costs (the
``measured`` hardware: each distinct layer profiled at exactly the run's micro-batch, in a stream of
the run's M, the link and the engine overheads calibrated once per device, all cached) with the
partition the run used. The result fills ``predicted_step_time_s`` and ``predicted_throughput`` of
``metrics.json``, so a report can print prediction and measurement side by side (``make demo``).
Profiling runs after the ranks have finished, so it never disturbs the measurement; a prediction that
fails leaves the fields empty and says why on stderr rather than failing the run.
"""

from __future__ import annotations

import sys

import torch

from ..metrics.contract import RunMetrics
from ..runplan.costing import simulate_plan, workload
from ..runplan.model import ModelPlan
from ..runplan.plan import RunPlan
from ..sim import HardwareConfig, SimResult, resolve_hardware
from ..sim.step import grad_bytes

__all__ = ["predict", "attach_prediction"]


def predict(run: RunPlan, model: ModelPlan, balance: list[int]) -> SimResult:
    """Simulate the planned run with ``balance`` (as run) on this device's measured costs."""
    spec, mb = run.spec, run.micro_batch
    p = spec.pipeline
    torch.set_num_threads(spec.train.threads)  # profiled with the run's threads
    hw = resolve_hardware(HardwareConfig(), spec.device, spec.sim.profile_repeats)  # measured
    costs = hw.cost_model(workload(spec, model), [mb], p.M)
    return simulate_plan(spec, hw, costs, balance, mb, layer_grad_bytes=grad_bytes(model.layers))


def attach_prediction(run: RunPlan, model: ModelPlan, m: RunMetrics) -> None:
    """Fill ``m.predicted_step_time_s`` / ``m.predicted_throughput`` for a finished measured run."""
    if m.status != "ok" or m.pipeline is None or not m.pipeline.balance:
        return
    try:
        res = predict(run, model, list(m.pipeline.balance))
    except Exception as err:  # noqa: BLE001 - a prediction must never cost the measured run
        print(
            f"gpipe-run: train.predict failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
            file=sys.stderr,
            flush=True,
        )
        return
    m.predicted_step_time_s = res.step_s
    m.predicted_throughput = run.spec.train.batch_size / res.step_s
