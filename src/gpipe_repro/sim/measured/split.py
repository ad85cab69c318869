"""Each layer's backward split as zero bubble runs it: B (the input gradient) and W (the weight gradient)
timed apart on this device (``engine.split``; Qi et al., ICLR 2024).

How a backward divides between B and W is a property of the layer, not a constant: a convolution's
or a linear layer's two gradients are two products of about equal size, a normalisation's weight
gradient is a cheap reduction beside its input gradient, and the model's first layer, whose input needs
no gradient, has no B at all (the engine's split leaves all its work to W). So per distinct layer and
micro-batch size the layer runs forward on a taped input, as the engine's split schedules run it, and
B and W are timed apart (``warmup`` passes first, the statistic of ``repeats``). The profile keeps the
stream's backward (``stream``: timed as the engine's stage runs it) and divides it by the share B took
here: ``backward_input_s = backward_s · B / (B + W)``.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ...engine.microbatch import Batch, as_tuple
from ...engine.precision import fp32_loss
from ...engine.split import Tape, backward_input, backward_weight
from .stream import fresh_input

__all__ = ["input_shares"]

LossFn = Callable[..., torch.Tensor]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(device: torch.device) -> float:
    _sync(device)
    return time.perf_counter()


def _share(
    layer: nn.Module,
    x: Batch,
    first: bool,
    loss: Callable[[Batch], torch.Tensor] | None,
    device: torch.device,
    warmup: int,
    repeats: int,
    stat: str,
) -> float:
    """B's share of ``layer``'s split backward at input ``x``."""
    params = [p for p in layer.parameters() if p.requires_grad]
    bs, ws = [], []
    for r in range(warmup + repeats):
        tape = Tape()
        xin = fresh_input(x, not first)
        y = layer(xin)
        tape.record(xin, y)
        if loss is not None:
            outs: list[torch.Tensor] = [loss(y)]
            grads: list[torch.Tensor | None] = [None]
        else:
            outs = list({id(t): t for t in as_tuple(y) if t.requires_grad}.values())
            grads = [torch.ones_like(t) for t in outs]
        if not outs:
            return 0.5
        t0 = _clock(device)
        backward_input(tape, grads, outs, params)
        t1 = _clock(device)
        backward_weight(tape)
        t2 = _clock(device)
        b, w = t1 - t0, t2 - t1
        for p in params:
            p.grad = None
        if r >= warmup:
            bs.append(b)
            ws.append(w)
    pick = min if stat == "min" else statistics.median
    b, w = pick(bs), pick(ws)
    return b / (b + w) if b + w > 0 else 0.5


def input_shares(
    layers: Sequence[nn.Module],
    x: Batch,
    targets: Any,
    loss_fn: LossFn | None,
    groups: Sequence[int],
    *,
    device: torch.device,
    warmup: int,
    repeats: int,
    stat: str,
    first: bool = True,
) -> list[float]:
    """Per layer, B's share of its backward at micro-batch ``x`` (layers of one group share one
    timing: ``groups[i]`` names layer i's group). Layers are timed on copies; ``first``:
    ``layers[0]`` is the model's first layer, whose input needs no gradient (every later one's
    does); ``loss_fn`` follows the last of ``layers``."""
    cells = [copy.deepcopy(layer).to(device).train() for layer in layers]
    inputs: list[Batch] = []
    h = x
    with torch.no_grad():
        for cell in cells:
            inputs.append(h)
            h = cell(h)
    last = len(cells) - 1
    shares: dict[int, float] = {}
    for i, cell in enumerate(cells):
        if groups[i] in shares:
            continue

        def loss(y: Batch) -> torch.Tensor:
            assert loss_fn is not None
            return fp32_loss(loss_fn, y, targets, device.type)

        shares[groups[i]] = _share(
            cell,
            inputs[i],
            first and i == 0,
            loss if i == last and loss_fn is not None else None,
            device,
            warmup,
            repeats,
            stat,
        )
    return [shares[g] for g in groups]
