"""This CPU's roofline against its measured layer costs: the one device where a roofline can be checked
layer by layer.

A published profile is checked end to end on published throughputs (``anchors``); here the same
roofline (``roofline.RooflineCosts``), on a profile of this CPU calibrated from micro-benchmarks only
(``measured.cpu.cpu_roofline``: peak matmul rate and curve, copy bandwidth, one eager operator call),
costs each layer of three small real models, and the engine's own costs of the same layers are timed
(``measured.profile_layers``, one intra-op thread as the ranks run), per micro-batch. The models are
AmoebaNet-shaped (``tuplenet``), Transformer-shaped (``tokennet``) and plain (``mlp``), so every kind of
layer the paper's two models are made of is costed both ways. ``LayerPair`` is one layer at one
micro-batch: the forward + backward seconds, measured and roofline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...models import MODELS
from ..count import count_layers
from ..measured import profile_layers
from ..measured.cpu import cpu_roofline
from ..roofline import HardwareProfile, RooflineCosts

__all__ = ["CPU_MODELS", "CPU_SIZES", "LayerPair", "measure_cpu"]

CPU_MODELS = ("tuplenet", "tokennet", "mlp")
CPU_SIZES = (2, 8, 32)


@dataclass(frozen=True)
class LayerPair:
    """One layer of a model at one micro-batch: its forward + backward, measured and by the roofline."""

    model: str
    layer: int
    kind: str  # the layer's class name
    micro_batch: int
    measured_s: float
    roofline_s: float


def _kind(layer: torch.nn.Module) -> str:
    """A layer's class name; a ``Sequential``'s by its children (``Linear+BatchNorm1d+ReLU``)."""
    if isinstance(layer, torch.nn.Sequential):
        return "+".join(type(c).__name__ for c in layer)
    return type(layer).__name__


def measure_cpu(
    models: tuple[str, ...] = CPU_MODELS, sizes: tuple[int, ...] = CPU_SIZES, repeats: int = 5
) -> tuple[HardwareProfile, list[LayerPair]]:
    """This CPU's roofline profile and every layer of ``models`` at every micro-batch of ``sizes``,
    timed (never from the cache) and costed by that roofline (one intra-op thread)."""
    from ...data import DATASETS

    torch.set_num_threads(1)
    hw = cpu_roofline()
    pairs: list[LayerPair] = []
    for name in models:
        spec = MODELS[name]
        data = DATASETS["synthetic"].config()
        data.kind = spec.data_kind
        info = data.info()
        with torch.device("meta"):
            meta = spec.layers(info, spec.config())
        real = spec.layers(info, spec.config())

        def sample(n: int, info: Any = info) -> tuple[Any, torch.Tensor]:
            shape = info.shape if info.kind != "image" else ()
            return info.example(n, "cpu"), torch.zeros(n, *shape, dtype=torch.long)

        prof = profile_layers(
            real, sample, list(sizes), loss_fn=spec.loss_fn, repeats=repeats, use_cache=False
        )
        roof = RooflineCosts(hw, count_layers(meta, info.example(2, "meta"), spec.planning_loss))
        for n in prof.sizes:
            for i, (m, r) in enumerate(zip(prof.costs[n], roof.layer_costs(n))):
                kind = _kind(meta[i])
                pairs.append(
                    LayerPair(
                        name, i, kind, n, m.forward_s + m.backward_s, r.forward_s + r.backward_s
                    )
                )
    return hw, pairs
