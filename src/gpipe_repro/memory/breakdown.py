"""What one accelerator's saved activations are made of: bytes per layer type, operation and dtype.

Table 1's Naive-1 column (one accelerator, no remat, M = 1) is where our activation estimate is
furthest from the paper's. bf16 halves every floating-point tensor autograd saves, but not the
tensors that are not floating point (max-pool indices), nor those the engine keeps in fp32 on
purpose (BatchNorm's and LayerNorm's saved statistics, the loss's fp32 log-probabilities), and it
adds autocast's bf16 copies of the weights. To say what remains, from the numbers, the whole model
is measured as one stage (``memory.activations.measure_stage`` with ``detail``) and every saved tensor is
grouped by the layer type that saved it, the operation that produced it (the autograd node:
``Convolution``, ``NativeBatchNorm``, ``Relu``, ...; ``internal`` for tensors outside autograd, such
as statistics and indices) and its dtype, scaled to the column's mini-batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..engine.microbatch import Batch, as_tuple
from ..models import class_planning_loss, token_planning_loss
from ..models.amoebanet import amoebanet_layers
from ..models.transformer import transformer_lm_layers
from .activations import Saved, measure_stage

__all__ = [
    "SavedGroup",
    "saved_groups",
    "amoebanet_groups",
    "transformer_groups",
    "LOSS",
    "FUSED_AWAY",
    "fused_away",
]

LOSS = "loss"  # the layer type of the tensors the loss saves


# The XLA-like accounting mode (an estimate, labelled as such wherever it is shown): saved tensors a
# compiler that fuses element-wise work into its neighbours would not keep. Keyed by the producing
# operation (and dtype, where it decides), each with the reason; everything else is kept as eager
# PyTorch keeps it.
FUSED_AWAY: dict[tuple[str, str | None], str] = {
    ("Relu", None): "in-place / fused activations: a ReLU's output is recomputed in the backward "
    "fusion from the tensor it came from instead of being kept beside it",
    ("internal", "int64"): "index-free pooling: max-pool's gradient is taken from its input and "
    "output (select-and-scatter), no int64 argmax indices",
    ("ConstantPadNd", None): "fused padding: the 'SAME' padding is folded into the pooling window, "
    "no padded copy of the input",
    ("LogSoftmax", None): "fused softmax cross-entropy: the loss's log-probabilities are not kept "
    "beside the logits it is computed from",
    ("internal", None): "fused normalisation: the batch statistics live inside the fused "
    "normalisation kernel's output, not as separate saved tensors",
}


def fused_away(kind: str, dtype: str) -> str | None:
    """The reason the XLA-like accounting drops a saved group (``FUSED_AWAY``), or None: kept."""
    return FUSED_AWAY.get((kind, dtype)) or FUSED_AWAY.get((kind, None))


@dataclass(frozen=True)
class SavedGroup:
    layer_type: str  # "Cell", "Stem", "LMLayer", ..., or "loss"
    kind: str  # the producing operation, or "internal"; "weight copy" for autocast's cast weights
    dtype: str
    nbytes: int  # at the planned micro-batch


def saved_groups(
    layers: Sequence[nn.Module],
    x: Batch,
    loss: Callable[[Any], torch.Tensor] | None,
    precision: str,
    scale: float,
) -> list[SavedGroup]:
    """Every saved tensor of ``layers`` run as one stage on ``x``, grouped, and the stage's input and
    output (kept for backward too): what one micro-batch keeps. Activation bytes are multiplied by
    ``scale`` (planned micro-batch / measured batch), weight copies are not. Largest group first."""
    detail: list[Saved] = []
    act, y = measure_stage(layers, x, loss, precision, detail)
    groups: dict[tuple[str, str, str], float] = {}
    for name, i, ts, nbytes in (
        ("input", 0, as_tuple(x), act.input),
        ("output", -1, as_tuple(y), act.output),
    ):
        if nbytes:
            dtypes = "+".join(sorted({str(t.dtype).removeprefix("torch.") for t in ts}))
            groups[(type(layers[i]).__name__, name, dtypes)] = nbytes * scale
    for s in detail:
        ltype = type(layers[s.layer]).__name__ if s.layer < len(layers) else LOSS
        kind = "weight copy" if s.weight_copy else s.kind
        key = (ltype, kind, s.dtype)
        groups[key] = groups.get(key, 0.0) + s.nbytes * (1.0 if s.weight_copy else scale)
    out = [SavedGroup(*k, round(v)) for k, v in groups.items()]
    return sorted(out, key=lambda g: (-g.nbytes, g.layer_type, g.kind, g.dtype))


def amoebanet_groups(
    L: int, D: int, micro_batch: float, precision: str, image_size: int = 224, classes: int = 1000
) -> list[SavedGroup]:
    """AmoebaNet-D(L, D) on one accelerator, measured at 2 images and scaled to ``micro_batch``."""
    with torch.device("meta"):
        layers = amoebanet_layers("D", L, D, classes=classes, image_size=image_size)
        x = torch.empty(2, 3, image_size, image_size)
    return saved_groups(layers, x, class_planning_loss, precision, micro_batch / 2)


def transformer_groups(
    L: int,
    micro_batch: float,
    precision: str,
    d: int = 2048,
    H: int = 8192,
    A: int = 32,
    V: int = 32000,
    S: int = 1024,
) -> list[SavedGroup]:
    """Transformer-L on one accelerator, measured at one sequence and scaled to ``micro_batch``."""
    with torch.device("meta"):
        layers = transformer_lm_layers(L, d, H, A, V)
        tok = torch.zeros(1, S, dtype=torch.long)
    return saved_groups(layers, tok, token_planning_loss, precision, micro_batch)
