"""The engine's own cost per micro-batch action and per step: real K = 1 steps minus their compute spans.

A step of the engine costs its layers' forwards, backwards and recomputes plus what no layer accounts
for: splitting the batch, event spans, posting and taking receives, the loss sum, the BatchNorm
commit. The engine logs every compute span (``engine.events``), so that remainder is read off real
K = 1 steps of a small model at several M — each step's time minus the sum of its own compute spans,
independent of any profile (a profile's own bias cannot leak into it) — and fitted by a line in the
number of compute actions per step: the slope is the per-action overhead, the intercept the per-step
one (SIMULATION.md, item 4).
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
from ...engine.events import COMPUTE
from .profile import SampleFn

__all__ = ["OverheadFit", "measure_overhead"]


@dataclass(frozen=True)
class OverheadFit:
    """``residual = fixed_s + actions * overhead_s`` fitted over the measured ``points``."""

    # per compute action (a forward, backward or recompute of a micro-batch), >= 0
    overhead_s: float
    fixed_s: float  # per step, whatever M
    points: list[tuple[int, float, float]]  # (M, median step s, median of its compute spans s)


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
    **pipeline_kwargs: Any,
) -> OverheadFit:
    """The engine's fixed cost per compute action and per step, from real K = 1 steps.

    For each M a real ``engine.Pipeline`` on ``single_process`` runs steps of the mini-batch of ``N``
    (``sample_fn(N)``) with ``checkpoint="never"`` unless ``pipeline_kwargs`` say otherwise, as a
    rank does (gradients dropped between steps, untimed). Per step, its time minus the sum of its
    compute spans is the residual; a least-squares line through (compute actions per step, median
    residual) gives ``overhead_s`` (its slope, clamped at 0) and ``fixed_s`` (its intercept). Keep it
    cheap: a small model and a few M.
    """
    Ms = sorted({int(m) for m in Ms})
    for M in Ms:
        if M < 1 or N % M:
            raise ValueError(f"measure_overhead: M={M} must be >= 1 and divide N={N}")
    kw = {"checkpoint": "never", **pipeline_kwargs}
    x, t = sample_fn(N)
    points, xs, ys = [], [], []
    for M in Ms:
        pipe = Pipeline(
            copy.deepcopy(list(layers)), single_process(device), M=M, loss_fn=loss_fn, **kw
        )
        steps, spans = [], []
        for r in range(warmup + repeats):
            t0 = time.perf_counter()
            pipe.train_step(x, t)
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            events = [e for e in pipe.recorder.events if e.step == pipe.recorder.step - 1]
            compute = [e for e in events if e.action in COMPUTE]
            if r >= warmup:
                steps.append(elapsed)
                spans.append(sum(e.end - e.start for e in compute))
            for p in pipe.parameters():  # as a rank's optimiser.zero_grad() does, untimed
                p.grad = None
        actions = len(compute)
        points.append((M, statistics.median(steps), statistics.median(spans)))
        xs.append(float(actions))
        ys.append(statistics.median(s - c for s, c in zip(steps, spans)))
    if len(points) >= 2:
        slope, intercept = np.polyfit(np.array(xs), np.array(ys), 1)
    else:
        slope, intercept = ys[0] / xs[0], 0.0
    return OverheadFit(max(0.0, float(slope)), float(intercept), points)
