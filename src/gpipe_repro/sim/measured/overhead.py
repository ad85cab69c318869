"""The engine's own cost per micro-batch action and per step: real K = 1 steps minus their profiled layers.

A step of the engine costs its layers' forwards and backwards (profiled as the engine runs them,
``profile``) plus what no layer accounts for: splitting the batch, event spans, posting and taking
receives, the loss sum, the BatchNorm commit. That residual is measured on real K = 1 steps of a small
model at several M and fitted by a line in the number of actions, ``residual(M) = fixed + 2 M
overhead`` (a forward and a backward per micro-batch): the slope is the per-action overhead, the
intercept the per-step one (SIMULATION.md, item 4).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...engine import Pipeline, single_process
from ...engine.checkpoint import uses_remat
from .profile import LayerProfile, SampleFn, profile_layers

__all__ = ["OverheadFit", "measure_overhead"]


@dataclass(frozen=True)
class OverheadFit:
    """``residual(M) = fixed_s + 2 * M * overhead_s`` fitted over the measured ``points``."""

    overhead_s: float  # per micro-batch and action (a forward or a backward), >= 0
    fixed_s: float  # per step, whatever M
    points: list[tuple[int, float, float]]  # (M, measured step s, sum of profiled layer costs s)


def measure_overhead(
    layers: Sequence[nn.Module],
    sample_fn: SampleFn,
    N: int,
    Ms: Sequence[int] = (1, 2, 4),
    *,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    device: torch.device | str = "cpu",
    repeats: int = 3,
    warmup: int = 1,
    profile: LayerProfile | None = None,
    use_cache: bool = True,
    **pipeline_kwargs: Any,
) -> OverheadFit:
    """The engine's fixed cost per micro-batch action, from real K = 1 steps.

    For each M a real ``engine.Pipeline`` on ``single_process`` runs steps of the mini-batch of ``N``
    (``sample_fn(N)``) with ``checkpoint="never"`` unless ``pipeline_kwargs`` say otherwise; the
    median step time minus the profiled forward + backward of every layer at micro-batch ``N/M`` for
    each of the M micro-batches (plus the no-grad pass for a rematerialised one) is the residual, fitted
    by a line through the residuals against the number of actions ``2M``: ``overhead_s`` is its slope
    (clamped at 0), ``fixed_s`` its intercept. ``profile`` must hold the sizes ``N/M``, profiled in
    streams of M; by default they are profiled (and cached). Keep it cheap: a small model and a few M.
    """
    Ms = sorted({int(m) for m in Ms})
    for M in Ms:
        if M < 1 or N % M:
            raise ValueError(f"measure_overhead: M={M} must be >= 1 and divide N={N}")
    sizes = [N // M for M in Ms]
    if profile is None:
        profile = profile_layers(
            layers,
            sample_fn,
            sizes,
            device=device,
            loss_fn=loss_fn,
            use_cache=use_cache,
            stream={N // M: M for M in Ms},
        )
    missing = [n for n in sizes if n not in profile.costs]
    if missing:
        raise ValueError(
            f"measure_overhead: profile lacks micro-batch sizes {missing}; "
            f"allowed: a profile measured at {sizes}"
        )
    kw = {"checkpoint": "never", **pipeline_kwargs}
    x, t = sample_fn(N)
    points = []
    for M in Ms:
        pipe = Pipeline(
            copy.deepcopy(list(layers)), single_process(device), M=M, loss_fn=loss_fn, **kw
        )
        times = []
        for r in range(warmup + repeats):
            t0 = time.perf_counter()
            pipe.train_step(x, t)
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize(device)
            if r >= warmup:
                times.append(time.perf_counter() - t0)
            for p in pipe.parameters():  # as a rank's optimiser.zero_grad() does, untimed
                p.grad = None
        cell = profile.costs[N // M]
        plain = sum(c.forward_s + c.backward_s for c in cell)
        remat = sum(c.forward_nograd_s for c in cell) + plain + profile.recompute_overhead_s
        predicted = sum(remat if uses_remat(kw["checkpoint"], m, M) else plain for m in range(M))
        points.append((M, statistics.median(times), predicted))
    actions = np.array([2.0 * M for M, _, _ in points])
    resid = np.array([m - p for _, m, p in points])
    if len(points) >= 2:
        slope, intercept = np.polyfit(actions, resid, 1)
    else:
        slope, intercept = resid[0] / actions[0], 0.0
    return OverheadFit(max(0.0, float(slope)), float(intercept), points)
