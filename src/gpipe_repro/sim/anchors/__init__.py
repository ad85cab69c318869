"""Published hardware checked against published numbers: every anchor simulated at its own settings.

An anchor (``hardware.Anchor``) is one published end-to-end training throughput of a known model on a
profile's device — a row of a vendor's performance table, a benchmark page, a paper — with its batch,
sequence length, precision and device count. Here its model is built on the meta device
(``ANCHOR_MODELS``), counted (``count``), and one device's training step is simulated on the
profile's roofline (``roofline``, ``simulate`` at K = 1, M = 1); the throughput that comes out is
compared with the published one per device. The error is the profile's, end to end: compute
efficiency, memory traffic, operation count and overheads together.

The curve's shape is Calculon's; its height is fitted: ``fit`` scales every efficiency (capped at 1) by
the one factor that makes the anchors marked ``fit`` right in the median (log error 0), so the anchors
marked ``check`` test the profile on numbers it was not fitted to. ``trust`` sums a profile up for
reports (``interface.Trust``, cached on disk): validated when it has at least ``MIN_ANCHORS`` anchors
and every one is within ``TOLERANCE``.

(the command line is ``__main__``; the report of every profile, ``make validate-hw``)

    python -m gpipe_repro.sim.anchors                      # every published profile: each anchor's error
    python -m gpipe_repro.sim.anchors a100 --fit           # the fitted curve of a100, and its errors
    python -m gpipe_repro.sim.anchors a100 --fit --write   # ... written into conf/hardware/a100.yaml

``cpu`` checks the roofline on the one device whose costs can be measured here, layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch

from ..costs import LayerCost, stage_costs
from ..count import LayerCount, count_layers
from ..interface import Anchor, Trust
from ..roofline import HardwareProfile, RooflineCosts
from ..simulate import simulate
from .models import ANCHOR_MODELS
from .parallel import exposed_s

__all__ = [
    "ANCHOR_MODELS",
    "AnchorResult",
    "anchor_costs",
    "counts",
    "simulate_anchor",
    "MIN_ANCHORS",
    "TOLERANCE",
    "check",
    "fit",
    "trust",
    "validated",
    "within",
]

TOLERANCE = 0.20  # |predicted / published - 1| an anchor must stay within
MIN_ANCHORS = 2


def within(error: float) -> bool:
    """Whether an anchor's relative error meets the target."""
    return abs(error) <= TOLERANCE


def validated(anchors: int, within: int) -> bool:
    """A profile's targets: at least ``MIN_ANCHORS`` anchors, every one within ``TOLERANCE``."""
    return anchors >= MIN_ANCHORS and within == anchors


@dataclass(frozen=True)
class AnchorResult:
    profile: str
    anchor: Anchor
    published: float  # samples per second per device
    predicted: float
    step_s: float = 0.0  # the simulated optimiser step (its ``accumulate`` micro-steps)
    comm_s: float = 0.0  # of which: data-parallel communication the compute did not hide

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


_COUNTS: dict[tuple[str, int, str], list[LayerCount]] = {}


def counts(model: str, seq: int, attention: str = "materialized") -> list[LayerCount]:
    """The anchor model's per-layer counts (at 2 samples; they scale), once per process;
    ``attention``: how the run computed it (``sim.attention``)."""
    if model not in ANCHOR_MODELS:
        raise ValueError(f"anchor model={model!r} is unknown; allowed: {', '.join(ANCHOR_MODELS)}")
    if (model, seq, attention) not in _COUNTS:
        m = ANCHOR_MODELS[model]
        with torch.device("meta"):
            layers, x = m.build(seq)
        _COUNTS[(model, seq, attention)] = count_layers(layers, x, m.loss, attention=attention)
    return _COUNTS[(model, seq, attention)]


def anchor_costs(hw: HardwareProfile, a: Anchor) -> tuple[list[LayerCost], list[LayerCount]]:
    """Every layer's costs at the anchor's batch on ``hw`` (its ``peak_scale`` and ``mem_scale``
    applied), as the run
    computed them: its attention, and under ``remat`` each layer but the first and last (the
    embedding or stem, the head: the blocks a run checkpoints) recomputed by its policy."""
    dev = replace(
        hw,
        peak_flops_fp32=hw.peak_flops_fp32 * a.peak_scale,
        peak_flops_half=hw.peak_flops_half * a.peak_scale,
        mem_bandwidth_Bps=hw.mem_bandwidth_Bps * a.mem_scale,
    )
    cs = counts(a.model, a.seq, a.attention)
    policy = "full" if a.remat == "never" else a.remat
    layers = RooflineCosts(dev, cs, precision=a.precision, remat=policy).layer_costs(a.batch)
    if a.remat != "never":
        layers = [
            c if 0 < i < len(layers) - 1 else replace(c, recompute_s=0.0)
            for i, c in enumerate(layers)
        ]
    return layers, cs


def simulate_anchor(hw: HardwareProfile, a: Anchor) -> AnchorResult:
    """One device's optimiser step of the anchor's model at its settings on ``hw``'s roofline:
    ``accumulate`` micro-steps of its batch (``simulate``, K = 1), then what its data parallelism
    over ``devices`` adds (``parallel.exposed_s``)."""
    layers, cs = anchor_costs(hw, a)
    remat = a.remat != "never"
    micro = simulate(
        1,
        1,
        "gpipe",
        "always" if remat else "never",
        stage_costs([replace(c, update_s=0.0) for c in layers], [len(cs)]),
        hw.link,
        hw.overhead_s,
        sender_busy=False,
    ).step_s
    dp = exposed_s(layers, [c.params for c in cs], hw, a.devices, a.parallel, remat, a.accumulate)
    step = a.accumulate * micro + dp.comm_s + dp.update_s
    per_device = a.accumulate * a.batch / step
    return AnchorResult(hw.name, a, a.throughput / a.devices, per_device, step, dp.comm_s)


def check(hw: HardwareProfile) -> list[AnchorResult]:
    return [simulate_anchor(hw, a) for a in hw.anchors]


def scaled(
    hw: HardwareProfile, factor: float, mem_efficiency: float | None = None
) -> HardwareProfile:
    """``hw`` with every efficiency of its curve times ``factor`` (at most 1), and optionally another
    memory efficiency."""
    curve = tuple((s, min(1.0, e * factor)) for s, e in hw.efficiency_curve)
    mem = hw.mem_efficiency if mem_efficiency is None else mem_efficiency
    return replace(hw, efficiency_curve=curve, mem_efficiency=mem)


def _loss(hw: HardwareProfile, anchors: list[Anchor]) -> float:
    """Sum of squared log errors of ``anchors`` on ``hw``."""
    return sum(
        math.log(simulate_anchor(hw, a).predicted / (a.throughput / a.devices)) ** 2
        for a in anchors
    )


def fit(hw: HardwareProfile) -> tuple[HardwareProfile, float]:
    """``hw`` fitted to its anchors marked ``fit``: the curve's height (one factor on every
    efficiency) and, with two or more fit anchors, the memory efficiency, by least squares on log
    errors over a grid refined three times; returns the profile and the curve's factor."""
    anchors = [a for a in hw.anchors if a.use == "fit"]
    if not anchors:
        raise ValueError(f"hardware={hw.name} has no anchor with use: fit")
    top = 1.0 / min(e for _, e in hw.efficiency_curve)
    factors = [0.05 * (top / 0.05) ** (i / 24) for i in range(25)]
    mems = [0.3 + 0.05 * i for i in range(15)] if len(anchors) >= 2 else [hw.mem_efficiency]
    best = min((_loss(scaled(hw, f, m), anchors), f, m) for f in factors for m in mems)
    _, f, m = best
    for step in (1.25, 1.08, 1.02):  # refine around the best point
        grid_f = [f / step, f, f * step]
        grid_m = [max(0.05, min(1.0, m * k)) for k in (1 / step, 1, step)] if len(mems) > 1 else [m]
        _, f, m = min((_loss(scaled(hw, a, b), anchors), a, b) for a in grid_f for b in grid_m)
    return scaled(hw, f, m), f


def trust(hw: HardwareProfile) -> Trust:
    """The profile's anchors summed up (cached on disk: counting the anchor models takes a while)."""
    from ..measured import cache

    # 2: data parallelism as run, fused attention, selective remat (``parallel``, ``attention``)
    key = {"profile": asdict(hw), "torch": torch.__version__, "method": "roofline-per-op-2"}
    stored = cache.load("anchors", key)
    if stored is None:
        errors = [r.error for r in check(hw)]
        stored = {"errors": errors}
        cache.save("anchors", key, stored)
    errors = [float(e) for e in stored["errors"]]
    worst = max((abs(e) for e in errors), default=None)
    fitted = sum(a.use == "fit" for a in hw.anchors)
    return Trust(
        validated=validated(len(errors), sum(map(within, errors))),
        max_error=worst,
        checks=len(errors),
        basis=f"published training throughputs ({len(errors)} anchors, {fitted} fitted)",
    )
