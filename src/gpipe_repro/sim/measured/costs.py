"""The measured costs as the simulator's ``CostModel``: a profile interpolated between its sizes.

``MeasuredCosts.layer_costs(n)`` interpolates the profile (``profile.profile_layers`` or
``distinct.profile_planned``): piecewise linear in ``n`` per layer and field, exact at the measured
sizes, never negative. Measure at the micro-batch sizes a sweep uses where possible: per-sample cost is
far from constant, so interpolation is only as good as the measured sizes are close. The link and the
engine's own overheads come from this device's calibration (``device.device_model``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..costs import LayerCost, Link
from .profile import LayerProfile

__all__ = ["EXTRAPOLATIONS", "MeasuredCosts", "interpolate"]


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
    ``update_s`` (the optimiser step and the BatchNorm commit, as profiled) never scales.
    ``step_overhead_s``: a per-step cost of every stage (the loss sum, the wait for the last sends),
    see ``simulate``. A recompute costs ``LayerCost.recompute`` (as profiled; the forward where it was
    not) plus ``recompute_overhead_s``, measured with the profile."""

    profile: LayerProfile
    link: Link
    overhead_s: float = 0.0
    extrapolate: str = "linear"
    step_overhead_s: float = 0.0

    @property
    def recompute_overhead_s(self) -> float:
        return self.profile.recompute_overhead_s

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
                raw = [getattr(row[i], f.name) for row in rows]
                if any(y is None for y in raw):  # a recompute not measured: the forward's
                    vals[f.name] = None
                    continue
                ys = [float(y) for y in raw]
                v = self._value(ys, micro_batch, f.name != "update_s")
                vals[f.name] = int(round(v)) if f.name == "out_bytes" else v
            out.append(LayerCost(**vals))
        return out
