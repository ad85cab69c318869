"""Each layer's backward split as zero bubble runs it: B (the input gradient) and W (the weight gradient)
timed apart on this device (``engine.split``; Qi et al., ICLR 2024), against the same layer's whole
backward.

How a backward divides between B and W is a property of the layer, not a constant: a convolution's
or a linear layer's two gradients are two products of about equal size, a normalisation's weight
gradient is a cheap reduction beside its input gradient, and the model's first layer, whose input needs
no gradient, has no B at all (the engine's split leaves all its work to W). Nor do B and W add up to
the whole backward: the split analyses each layer's graph per micro-batch and makes one autograd call
per group of parameters in W, each with its fixed cost, which a small layer at a small micro-batch
pays many times over. So per distinct layer and micro-batch size the layer runs forward on a taped
input, as the engine's split schedules run it, and B and W are timed apart, beside a whole backward
of the same layer from the same input (``warmup`` passes first, the statistic of ``repeats``). The
profile keeps the stream's backward (``stream``: timed as the engine's stage runs it) and scales it
by each part's cost relative to that whole backward: ``backward_input_s = backward_s · B / P``,
``backward_weight_s = backward_s · W / P``.
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

__all__ = ["split_factors"]

LossFn = Callable[..., torch.Tensor]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _clock(device: torch.device) -> float:
    _sync(device)
    return time.perf_counter()


def _factors(
    layer: nn.Module,
    x: Batch,
    first: bool,
    loss: Callable[[Batch], torch.Tensor] | None,
    device: torch.device,
    warmup: int,
    repeats: int,
    stat: str,
) -> tuple[float, float]:
    """``layer``'s B and W at input ``x``, each over its whole backward at the same input."""
    params = [p for p in layer.parameters() if p.requires_grad]

    def graph(tape: Tape | None) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        xin = fresh_input(x, not first)
        y = layer(xin)
        if tape is not None:
            tape.record(xin, y)
        if loss is not None:
            return [loss(y)], [None]
        outs = list({id(t): t for t in as_tuple(y) if t.requires_grad}.values())
        return outs, [torch.ones_like(t) for t in outs]

    bs, ws, ps = [], [], []
    for r in range(warmup + repeats):
        outs, grads = graph(None)
        if not outs:
            return 0.5, 0.5
        t0 = _clock(device)
        torch.autograd.backward(outs, grads)
        p = _clock(device) - t0
        tape = Tape()
        outs, grads = graph(tape)
        t0 = _clock(device)
        backward_input(tape, grads, outs, params)
        t1 = _clock(device)
        backward_weight(tape)
        t2 = _clock(device)
        for q in params:
            q.grad = None
        if r >= warmup:
            ps.append(p)
            bs.append(t1 - t0)
            ws.append(t2 - t1)
    pick = min if stat == "min" else statistics.median
    b, w, p = pick(bs), pick(ws), pick(ps)
    if p <= 0:
        return (b / (b + w), w / (b + w)) if b + w > 0 else (0.5, 0.5)
    return b / p, w / p


def split_factors(
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
) -> list[tuple[float, float]]:
    """Per layer, (B, W): each part of its split backward over its whole backward at micro-batch
    ``x`` (layers of one group share one timing: ``groups[i]`` names layer i's group). Layers are
    timed on copies; ``first``:
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
    factors: dict[int, tuple[float, float]] = {}
    for i, cell in enumerate(cells):
        if groups[i] in factors:
            continue

        def loss(y: Batch) -> torch.Tensor:
            assert loss_fn is not None
            return fp32_loss(loss_fn, y, targets, device.type)

        factors[groups[i]] = _factors(
            cell,
            inputs[i],
            first and i == 0,
            loss if i == last and loss_fn is not None else None,
            device,
            warmup,
            repeats,
            stat,
        )
    return [factors[g] for g in groups]
