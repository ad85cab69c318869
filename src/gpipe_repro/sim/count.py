"""Per-layer FLOPs and bytes of a model, counted on the meta device (nothing is allocated).

For each layer of a flat layer list, at one micro-batch: the FLOPs of every matrix operation
(matmul, convolution, attention) of its forward and of its real backward, both counted with
``torch.utils.flop_counter.FlopCounterMode`` on meta tensors (the backward is run, not assumed to be
2x the forward: a first layer whose input needs no gradient computes no input gradient), plus the
bytes the roofline needs. Elementwise operations count no FLOPs (they are memory-bound); their cost
enters through the bytes.

Bytes, a roofline approximation per layer and micro-batch (P parameter bytes, I input bytes, O output
bytes, a tuple's tensors summed; fp32 as built):

- forward reads P and I and writes O:                     P + I + O
- backward reads W (P), read-modify-writes the accumulated gradient (2P), reads dY (O) and the
  saved input (I), writes dX (I):                           3P + 2I + O

Internal activations of a layer are ignored (as if fused), so memory-bound layers come out optimistic.

Layers take and return a tensor or a tuple of tensors (AmoebaNet cells pass ``(current, previous)``);
the last layer may carry the loss (its FLOPs count in that layer). FLOPs and activation bytes of these
models are exactly proportional to the micro-batch size (no operation mixes samples except
BatchNorm's statistics, whose cost is linear too), so ``count_*`` count at 1 sample and
``LayerCount.at(n)`` scales; parameters do not scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..engine.microbatch import Batch, as_tuple

__all__ = [
    "LayerCount",
    "count_layers",
    "count_amoebanet",
    "count_transformer_lm",
    "classification_loss",
    "lm_loss",
]


@dataclass(frozen=True)
class LayerCount:
    """One layer at ``batch`` samples. FLOPs per operation, so the roofline can apply an
    efficiency per operation size."""

    name: str
    batch: int
    params: int
    param_bytes: int
    in_bytes: int
    out_bytes: int  # everything the layer returns (a tuple summed): the boundary bytes of a cut
    fwd_ops: tuple[float, ...]  # FLOPs of each matrix operation of the forward (loss included)
    bwd_ops: tuple[float, ...]  # the same for the backward
    backward_counted: bool = True  # False: the backward could not run on meta; bwd_ops = 2x fwd_ops

    @property
    def fwd_flops(self) -> float:
        return float(sum(self.fwd_ops))

    @property
    def bwd_flops(self) -> float:
        return float(sum(self.bwd_ops))

    @property
    def fwd_bytes(self) -> int:
        return self.param_bytes + self.in_bytes + self.out_bytes

    @property
    def bwd_bytes(self) -> int:
        return 3 * self.param_bytes + 2 * self.in_bytes + self.out_bytes

    def at(self, n: int) -> LayerCount:
        """The same layer at ``n`` samples (FLOPs and activation bytes scale, parameters don't)."""
        f = n / self.batch
        return replace(
            self,
            batch=n,
            in_bytes=round(self.in_bytes * f),
            out_bytes=round(self.out_bytes * f),
            fwd_ops=tuple(x * f for x in self.fwd_ops),
            bwd_ops=tuple(x * f for x in self.bwd_ops),
        )


class _OpFlops(FlopCounterMode):
    """FlopCounterMode that also keeps each operation's FLOPs (Calculon's efficiency is per op)."""

    def __init__(self) -> None:
        super().__init__(display=False)
        self.ops: list[float] = []

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        if func_packet in self.flop_registry:
            self.ops.append(float(self.flop_registry[func_packet](*args, **kwargs, out_val=out)))
        return super()._count_flops(func_packet, out, args, kwargs)


def _nbytes(x: Batch) -> int:
    return sum(t.numel() * t.element_size() for t in as_tuple(x))


def _fresh(x: Batch, grad: bool) -> Batch:
    ts = [t.detach().requires_grad_(grad and t.is_floating_point()) for t in as_tuple(x)]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _ops(mode: _OpFlops) -> tuple[float, ...]:
    # Fall back to the total if a torch version stops routing through _count_flops.
    total = float(mode.get_total_flops())
    return tuple(mode.ops) if abs(sum(mode.ops) - total) <= 1e-6 * max(total, 1.0) else (total,)


_PLAIN = (int, float, bool, str, type(None))


def _plain(v: Any) -> bool:
    return isinstance(v, _PLAIN) or (isinstance(v, (tuple, list)) and all(_plain(x) for x in v))


def _signature(layer: nn.Module, x: Batch, last: bool) -> tuple:
    """What a layer's count depends on: every submodule's class, parameter shapes and plain
    attributes (flags, strides, indices), the input's shapes and dtypes, and whether the loss follows."""
    mods = tuple(
        (
            name,
            type(m).__qualname__,
            tuple((n, tuple(p.shape), p.dtype) for n, p in m.named_parameters(recurse=False)),
            tuple(
                sorted(
                    (k, repr(v)) for k, v in vars(m).items() if not k.startswith("_") and _plain(v)
                )
            ),
        )
        for name, m in layer.named_modules()
    )
    return mods, tuple((tuple(t.shape), t.dtype) for t in as_tuple(x)), isinstance(x, tuple), last


def _like(
    spec: tuple[list[tuple[tuple[int, ...], torch.dtype]], bool], device: torch.device
) -> Batch:
    ts = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in spec[0]]
    return tuple(ts) if spec[1] else ts[0]


def count_layers(
    layers: Sequence[nn.Module],
    sample: Batch,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    memo: bool = True,
) -> list[LayerCount]:
    """Count every layer at the batch of ``sample`` (meta tensors; dim 0 is the batch).

    The first layer's input needs no gradient (as on the engine's first stage); every later input
    does. ``loss_fn(output)`` runs after the last layer and is counted in it. With ``memo``, a layer
    identical to one already counted (same ``_signature``: the 48 layers of Transformer-48, the
    normal cells of an AmoebaNet stack) reuses that count instead of running again."""
    batch = as_tuple(sample)[0].shape[0]
    device = as_tuple(sample)[0].device
    out: list[LayerCount] = []
    seen: dict[tuple, tuple[LayerCount, tuple]] = {}
    x = sample
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        key = _signature(layer, x, last) + (i == 0,) if memo else None
        if key is not None and key in seen:
            count, spec = seen[key]
            out.append(count)
            x = _like(spec, device)
            continue
        xin = _fresh(x, grad=i > 0)
        with _OpFlops() as fwd:
            y = layer(xin)
            loss = loss_fn(y) if last and loss_fn is not None else None
        roots = [loss] if loss is not None else [t for t in as_tuple(y) if t.requires_grad]
        counted = True
        with _OpFlops() as bwd:
            try:
                if roots:
                    torch.autograd.backward(roots, [torch.ones_like(t) for t in roots])
            except (RuntimeError, NotImplementedError):
                counted = False
        f_ops = _ops(fwd)
        count = LayerCount(
            name=type(layer).__name__,
            batch=batch,
            params=sum(p.numel() for p in layer.parameters()),
            param_bytes=sum(p.numel() * p.element_size() for p in layer.parameters()),
            in_bytes=_nbytes(x),
            out_bytes=_nbytes(y),
            fwd_ops=f_ops,
            bwd_ops=_ops(bwd) if counted else tuple(2 * f for f in f_ops),
            backward_counted=counted,
        )
        out.append(count)
        if key is not None:
            spec = ([(tuple(t.shape), t.dtype) for t in as_tuple(y)], isinstance(y, tuple))
            seen[key] = (count, spec)
        x = _fresh(y, grad=False)
    return out


def classification_loss(out: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against class 0 (the targets' values do not change the cost)."""
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long, device=out.device))


def lm_loss(out: torch.Tensor) -> torch.Tensor:
    """Token-level cross-entropy of a (batch, sequence, vocabulary) output against token 0."""
    flat = out.flatten(0, -2)
    return F.cross_entropy(flat, torch.zeros(flat.shape[0], dtype=torch.long, device=out.device))


def count_amoebanet(
    L: int, D: int, image_size: int = 224, classes: int = 1000, genotype: str = "D", batch: int = 1
) -> list[LayerCount]:
    """AmoebaNet-{D,B}(L, D) per layer at ``batch`` images (Table 2: D(18, 256) at 224x224)."""
    from ..models.amoebanet import amoebanet_layers

    with torch.device("meta"):
        layers = amoebanet_layers(genotype, L, D, classes=classes, image_size=image_size)
        x = torch.empty(batch, 3, image_size, image_size)
    return count_layers(layers, x, classification_loss)


def count_transformer_lm(
    L: int, d: int = 2048, H: int = 8192, A: int = 32, V: int = 32000, S: int = 1024, batch: int = 1
) -> list[LayerCount]:
    """Transformer-L per layer at ``batch`` sequences of ``S`` tokens (Table 2: L = 48)."""
    from ..models.transformer import transformer_lm_layers

    with torch.device("meta"):
        layers = transformer_lm_layers(L, d, H, A, V)
        tokens = torch.zeros(batch, S, dtype=torch.long)
    return count_layers(layers, tokens, lm_loss)
