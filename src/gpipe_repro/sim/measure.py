"""The ``measured`` hardware profile: costs measured on the present device, as a ``CostModel``.

Three measurements feed it (SIMULATION.md, "Inputs a calibrated simulator needs"):

- per-layer forward / no-grad forward / backward / update time and output bytes at a few
  micro-batch sizes (``profile_layers``, in ``sim.profile``);
- the link's latency and bandwidth (``measure_link``, in ``sim.link``);
- the engine's fixed per-micro-batch overhead (``measure_overhead``, here): the part of a real step
  that no layer accounts for.

``MeasuredCosts.layer_costs(n)`` interpolates the profile: piecewise linear in ``n`` per layer and
field, exact at the measured sizes, extrapolated linearly from the nearest two sizes beyond them,
never negative. Measure at the micro-batch sizes a sweep uses where possible: per-sample cost is
far from constant, so interpolation is only as good as the measured sizes are close.

Usage::

    prof = profile_layers(layers, sample_fn, [1, 4, 16, 64], loss_fn=F.cross_entropy)
    costs = MeasuredCosts(prof, measure_link().link,
                          measure_overhead(layers, sample_fn, 64, loss_fn=F.cross_entropy).overhead_s)
"""

from __future__ import annotations

import bisect
import copy
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from ..engine import Pipeline, single_process
from ..engine.checkpoint import uses_remat
from .costs import LayerCost, Link
from .link import LinkProfile, fit_link, measure_link
from .profile import LayerProfile, SampleFn, profile_layers

__all__ = [
    "LayerProfile",
    "LinkProfile",
    "EXTRAPOLATIONS",
    "MeasuredCosts",
    "OverheadFit",
    "fit_link",
    "interpolate",
    "measure_link",
    "measure_overhead",
    "profile_layers",
]


def interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear ``y(x)`` through the points (``xs`` sorted, distinct); beyond the range, the
    line through the nearest two points; clamped at 0. One point: that value everywhere."""
    if len(xs) == 1:
        return max(0.0, float(ys[0]))
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return max(0.0, float(ys[i]))
    i = min(max(i, 1), len(xs) - 1)  # segment [i-1, i]; the end segments extend outwards
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return max(0.0, float(y0 + (y1 - y0) * (x - x0) / (x1 - x0)))


EXTRAPOLATIONS = ("linear", "proportional")


@dataclass
class MeasuredCosts:
    """A ``CostModel`` from a measured profile, a link and a per-action overhead.

    Between measured sizes costs are piecewise linear. Beyond the largest size, ``extrapolate``:
    ``linear`` continues the line through the last two sizes; ``proportional`` keeps the per-sample
    cost of the largest size (the efficiency has saturated: right for paper-size layers profiled at a
    few samples, whose single operations are already large). Below the smallest size both use the
    line through the first two sizes; with one size, costs are proportional to the micro-batch.
    ``update_s`` never scales. ``step_overhead_s``: a per-step cost of every stage (the loss sum, the
    BatchNorm commit, the wait for the last sends), see ``simulate``."""

    profile: LayerProfile
    link: Link
    overhead_s: float = 0.0
    extrapolate: str = "linear"
    step_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.extrapolate not in EXTRAPOLATIONS:
            raise ValueError(
                f"extrapolate={self.extrapolate!r} is unknown; allowed: {', '.join(EXTRAPOLATIONS)}"
            )

    def _value(self, ys: list[float], n: int, scales: bool) -> float:
        sizes = self.profile.sizes
        if scales and len(sizes) == 1:
            return max(0.0, ys[0] * n / sizes[0])
        if scales and self.extrapolate == "proportional" and n > sizes[-1]:
            return max(0.0, ys[-1] * n / sizes[-1])
        return interpolate(sizes, ys, n)

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch={micro_batch} is invalid; allowed: an integer >= 1")
        sizes = self.profile.sizes
        rows = [self.profile.costs[n] for n in sizes]
        out = []
        for i in range(len(rows[0])):
            vals: dict[str, Any] = {}
            for f in fields(LayerCost):
                ys = [float(getattr(row[i], f.name)) for row in rows]
                v = self._value(ys, micro_batch, f.name != "update_s")
                vals[f.name] = int(round(v)) if f.name == "out_bytes" else v
            out.append(LayerCost(**vals))
        return out


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

    For each M a real ``engine.Pipeline`` on ``single_process`` runs steps of the mini-batch of
    ``N`` (``sample_fn(N)``) with ``checkpoint="never"`` unless ``pipeline_kwargs`` say otherwise;
    the median step time minus the profiled forward + backward of every layer at micro-batch ``N/M``
    for each of the M micro-batches (plus the no-grad pass for a rematerialised one) is the
    residual: splitting, bookkeeping, event recording, accumulation. A least-squares line through
    the residuals against the number of actions ``2M`` gives ``overhead_s`` (its slope, clamped at
    0) and ``fixed_s`` (its intercept: per-step costs such as the loss sum and
    the BatchNorm commit). ``profile`` must hold the sizes ``N/M``; by default they are profiled
    (and cached). Keep it cheap: a small model and a few M.
    """
    Ms = sorted({int(m) for m in Ms})
    for M in Ms:
        if M < 1 or N % M:
            raise ValueError(f"measure_overhead: M={M} must be >= 1 and divide N={N}")
    sizes = [N // M for M in Ms]
    if profile is None:
        profile = profile_layers(
            layers, sample_fn, sizes, device=device, loss_fn=loss_fn, use_cache=use_cache
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
        cell = profile.costs[N // M]
        plain = sum(c.forward_s + c.backward_s for c in cell)
        remat = sum(c.forward_nograd_s for c in cell) + plain  # no-grad pass, recompute, backward
        predicted = sum(remat if uses_remat(kw["checkpoint"], m, M) else plain for m in range(M))
        points.append((M, statistics.median(times), predicted))
    actions = np.array([2.0 * M for M, _, _ in points])
    resid = np.array([m - p for _, m, p in points])
    if len(points) >= 2:
        slope, intercept = np.polyfit(actions, resid, 1)
    else:
        slope, intercept = resid[0] / actions[0], 0.0
    return OverheadFit(max(0.0, float(slope)), float(intercept), points)
