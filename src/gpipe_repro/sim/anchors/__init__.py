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
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from ...models import class_planning_loss, token_planning_loss
from ..costs import stage_costs
from ..count import LayerCount, count_layers
from ..interface import Anchor, Trust
from ..roofline import HardwareProfile, RooflineCosts
from ..simulate import simulate

__all__ = [
    "ANCHOR_MODELS",
    "AnchorResult",
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
class AnchorModel:
    """A known model, as its published runs train it: its layers and one input batch (meta device)."""

    describe: str
    build: Callable[[int], tuple[list[nn.Module], Any]]  # seq -> (layers, input of 2 samples)
    loss: Callable[[Any], torch.Tensor]


class _Bottleneck(nn.Module):
    """ResNet v1.5's bottleneck block (He et al., 2016; the stride in the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def _resnet(blocks: tuple[int, ...]) -> Callable[[int], tuple[list[nn.Module], Any]]:
    def build(_seq: int) -> tuple[list[nn.Module], Any]:
        stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = [stem]
        cin = 64
        for stage, n in enumerate(blocks):
            width = 64 * 2**stage
            for b in range(n):
                layers.append(_Bottleneck(cin, width, 2 if b == 0 and stage > 0 else 1))
                cin = 4 * width
        layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(cin, 1000)))
        return layers, torch.empty(2, 3, 224, 224)

    return build


def _transformer(
    L: int, d: int, H: int, A: int, V: int
) -> Callable[[int], tuple[list[nn.Module], Any]]:
    def build(seq: int) -> tuple[list[nn.Module], Any]:
        from ...models.transformer import transformer_lm_layers

        return transformer_lm_layers(L, d, H, A, V), torch.zeros(2, seq, dtype=torch.long)

    return build


def _translation(
    L: int, d: int, H: int, A: int, V: int, target: int | None = None
) -> Callable[[int], tuple[list[nn.Module], Any]]:
    """An encoder-decoder T(L, H, A) at width d (``transformer_mt_layers``): a sample is a source of
    ``seq`` tokens and a target of ``target`` tokens (``None``: ``seq`` too)."""

    def build(seq: int) -> tuple[list[nn.Module], Any]:
        from ...models.transformer import transformer_mt_layers

        tgt = seq if target is None else target
        src = torch.ones(2, seq, dtype=torch.long)  # token 1: not padding
        return transformer_mt_layers(L, H, A, d, V), (src, torch.ones(2, tgt, dtype=torch.long))

    return build


ANCHOR_MODELS: dict[str, AnchorModel] = {
    "resnet50": AnchorModel(
        "ResNet-50 v1.5, 224x224, 1000 classes", _resnet((3, 4, 6, 3)), class_planning_loss
    ),
    "bert_large": AnchorModel(
        "BERT-large as a Transformer encoder: L 24, d 1024, H 4096, A 16, vocabulary 30522, the "
        "masked-LM head over every token",
        _transformer(24, 1024, 4096, 16, 30522),
        token_planning_loss,
    ),
    "bert_large_squad": AnchorModel(
        "BERT-large fine-tuned for SQuAD: the same encoder, a 2-logit (start, end) head per token",
        _transformer(24, 1024, 4096, 16, 2),
        token_planning_loss,
    ),
    "transformer_base": AnchorModel(
        "Transformer base (Vaswani et al., 2017): 6 encoder + 6 decoder layers, d 512, H 2048, A 8, "
        "a shared vocabulary of 37000 (WMT'14 en-de BPE); a sample: seq source and seq target tokens",
        _translation(6, 512, 2048, 8, 37000),
        token_planning_loss,
    ),
    "t5_base": AnchorModel(
        "T5.1.1-base's FLOPs (Raffel et al., 2020): 12 + 12 layers, d 768, A 12, a 2-matrix FFN of H "
        "3072 (= GEGLU's 3 x 2048), vocabulary 32128; a sample: seq input tokens, 114 target tokens "
        "(span corruption's 512 -> 114)",
        _translation(12, 768, 3072, 12, 32128, target=114),
        token_planning_loss,
    ),
    "t5_large": AnchorModel(
        "T5.1.1-large's FLOPs: 24 + 24 layers, d 1024, A 16, a 2-matrix FFN of H 4224 (= GEGLU's 3 x "
        "2816), vocabulary 32128; a sample: seq input tokens, 114 target tokens",
        _translation(24, 1024, 4224, 16, 32128, target=114),
        token_planning_loss,
    ),
    "flax_wmt": AnchorModel(
        "Flax's WMT example (its default config): 6 + 6 layers, d 1024, H 4096, A 16, vocabulary "
        "32000; a sample: seq source and seq target tokens (packed)",
        _translation(6, 1024, 4096, 16, 32000),
        token_planning_loss,
    ),
    "llama3_8b": AnchorModel(
        "Llama-3 8B's FLOPs as a Transformer: L 32, d 4096, a 2-matrix FFN of H 21504 (= SwiGLU's "
        "3 x 14336), A 32 (full-width K, V: GQA's are narrower), vocabulary 128256",
        _transformer(32, 4096, 21504, 32, 128256),
        token_planning_loss,
    ),
}


@dataclass(frozen=True)
class AnchorResult:
    profile: str
    anchor: Anchor
    published: float  # samples per second per device
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1.0


_COUNTS: dict[tuple[str, int], list[LayerCount]] = {}


def counts(model: str, seq: int) -> list[LayerCount]:
    """The anchor model's per-layer counts (at 2 samples; they scale), once per process."""
    if model not in ANCHOR_MODELS:
        raise ValueError(f"anchor model={model!r} is unknown; allowed: {', '.join(ANCHOR_MODELS)}")
    if (model, seq) not in _COUNTS:
        m = ANCHOR_MODELS[model]
        with torch.device("meta"):
            layers, x = m.build(seq)
        _COUNTS[(model, seq)] = count_layers(layers, x, m.loss)
    return _COUNTS[(model, seq)]


def simulate_anchor(hw: HardwareProfile, a: Anchor) -> AnchorResult:
    """One device's training step of the anchor's model at its settings, on ``hw``'s roofline."""
    dev = replace(
        hw,
        peak_flops_fp32=hw.peak_flops_fp32 * a.peak_scale,
        peak_flops_half=hw.peak_flops_half * a.peak_scale,
    )
    cs = counts(a.model, a.seq)
    costs = RooflineCosts(dev, cs, precision=a.precision)
    res = simulate(
        1,
        1,
        "gpipe",
        "never",
        stage_costs(costs.layer_costs(a.batch), [len(cs)]),
        dev.link,
        dev.overhead_s,
        sender_busy=False,
    )
    return AnchorResult(hw.name, a, a.throughput / a.devices, a.batch / res.step_s)


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

    key = {"profile": asdict(hw), "torch": torch.__version__, "method": "roofline-per-op-1"}
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
