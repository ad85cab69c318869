"""``train.predict``: the simulator's step time for an engine run, beside the measured one.

After a measured run, its configuration is simulated on this device's measured costs (the
``measured`` hardware: each distinct layer profiled at exactly the run's micro-batch, in a stream of
the run's M, the link and the engine overheads calibrated once per device, all cached) with the
partition the run used. The result fills ``predicted_step_time_s`` and ``predicted_throughput`` of
``metrics.json`` and its ``prediction``: predicted against measured step time, the error, and the
host's load while the run measured (``metrics.hostload``: the share of their runnable time the ranks
waited for a core), with a sentence when that load is high enough that the gap is the host's, not the
simulator's. The run's one-line summary prints the same, so every run is a validation point.
Profiling runs after the ranks have finished, so it never disturbs the measurement; a prediction that
fails leaves the fields empty and says why on stderr rather than failing the run.
"""

from __future__ import annotations

import sys

import torch

from ..metrics.contract import PredictionInfo, RunMetrics
from ..metrics.hostload import compare
from ..runplan.costing import simulate_plan, workload
from ..runplan.model import ModelPlan
from ..runplan.plan import RunPlan
from ..sim import HardwareConfig, SimResult, resolve_hardware

__all__ = ["predict", "attach_prediction", "summary"]


def predict(run: RunPlan, model: ModelPlan, balance: list[int]) -> SimResult:
    """Simulate the planned run with ``balance`` (as run) on this device's measured costs."""
    spec, mb = run.spec, run.micro_batch
    p = spec.pipeline
    torch.set_num_threads(spec.train.threads)  # profiled with the run's threads
    hw = resolve_hardware(HardwareConfig(), spec.device, spec.sim.profile_repeats)  # measured
    costs = hw.cost_model(workload(spec, model), [mb], p.M)
    return simulate_plan(spec, hw, costs, balance, mb, layers=model.layers)


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
    if m.step_time_s:
        m.prediction = compare(res.step_s, m.step_time_s, m.host_wait_share)


def summary(p: PredictionInfo) -> str:
    """The prediction's part of the run's one-line summary."""
    load = "unknown" if p.host_wait_share is None else f"{p.host_wait_share:.0%}"
    line = (
        f"predicted step {p.predicted_step_time_s * 1e3:.1f} ms vs measured "
        f"{p.measured_step_time_s * 1e3:.1f} ms ({p.error:+.1%}), host wait {load}"
    )
    return f"{line}; {p.note}" if p.note else line
