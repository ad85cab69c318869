"""Measured per-layer costs of a model planned on the meta device, timing each distinct layer once.

``profile.profile_layers`` needs the whole model in memory and runs it layer after layer. A paper-size
model does not fit that way (Transformer-48 is 10 GB of fp32 weights, AmoebaNet-D(18, 256) at 224x224
needs gigabytes of activations per micro-batch), and it does not need to: its layers repeat. Here the
layers stay on ``meta``; a meta pass gives every layer's input shapes; layers identical in structure
and input shapes (``cache.structure``: the 48 layers of Transformer-48, the normal cells of one
AmoebaNet stack) form one group; one representative per group is materialised (seeded like the run:
``models.materialize`` at its global index), timed on random inputs of its real shapes at every size,
and freed before the next. Timing does not depend on the values (dense kernels), so random inputs
stand in for real activations; the first layer gets the dataset's example batch (token ids stay ids).

Each representative is timed as ``profile`` times a model, in a stream of M micro-batches per size
(``stream``: a one-layer cell, its input a leaf that requires grad as a stage's received input does,
the loss after the last layer, each step ended by the optimiser's step), the same statistics and
recompute check; cached under the same key scheme (``cache``): the structure of every layer, the
sizes and stream lengths, the input shapes, torch, threads and the device.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ...engine.microbatch import Batch, as_tuple, from_tuple
from ..costs import LayerCost
from . import cache
from .profile import (
    STATS,
    LayerProfile,
    LossFn,
    OptimizerFn,
    _rmsprop,
    _to,
    checked_stream,
    profile_key,
    records,
    split_backward,
    stream_lengths,
)
from .split import split_factors
from .stream import StreamTimes, fresh_input, time_stream

__all__ = ["profile_planned", "layer_groups"]

ExampleFn = Callable[[int, str], Batch]  # (n, device) -> a batch of n model inputs
TargetFn = Callable[[int], Any]  # n -> the targets of n samples (used by the loss only)


def _meta_like(x: Batch) -> Batch:
    ts = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in as_tuple(x)]
    return from_tuple(ts, isinstance(x, tuple))


@torch.no_grad()
def layer_groups(layers: Sequence[nn.Module], example: ExampleFn) -> tuple[list[int], list[Batch]]:
    """For each layer, the index of the first layer identical to it (structure and input shapes,
    first/last position included); and each layer's meta input (at two samples)."""
    x: Batch = example(2, "meta")  # 2: BatchNorm refuses one sample per channel when training
    rep: list[int] = []
    inputs: list[Batch] = []
    seen: dict[str, int] = {}
    for i, layer in enumerate(layers):
        inputs.append(x)
        key = cache.key_digest(
            [
                cache.structure(layer),
                cache.tensor_shapes(as_tuple(x)),
                isinstance(x, tuple),
                i == 0,
                i == len(layers) - 1,
            ]
        )
        rep.append(seen.setdefault(key, i))
        x = _meta_like(layer(x))
    return rep, inputs


def _real_input(meta: Batch, n: int, first: bool, example: ExampleFn, g: torch.Generator) -> Batch:
    if first:
        return example(n, "cpu")
    ts = []
    for t in as_tuple(meta):
        shape = (n, *t.shape[1:])
        if t.dtype.is_floating_point:
            ts.append(torch.randn(shape, generator=g, dtype=t.dtype))
        else:
            ts.append(torch.ones(shape, dtype=t.dtype))
    return from_tuple(ts, isinstance(meta, tuple))


def profile_planned(
    layers: Sequence[nn.Module],
    example: ExampleFn,
    targets: TargetFn,
    sizes: Sequence[int],
    *,
    loss_fn: LossFn | None,
    seed: int = 0,
    repeats: int = 5,
    warmup: int = 1,
    stat: str = "median",
    optimizer_fn: OptimizerFn | None = None,
    use_cache: bool = True,
    log: Callable[[str], None] | None = None,
    device: torch.device | str = "cpu",
    stream: Mapping[int, int] | int | None = None,
) -> LayerProfile:
    """Per-layer costs at every micro-batch size in ``sizes`` for ``layers`` built on ``meta``;
    ``stream``: M per size, as in ``profile.profile_layers``.

    Only one layer (one group's representative) is in memory at a time; the caller's layers are not
    touched. See the module docstring for what is timed and how it is cached."""
    from ...models.materialize import materialize

    sizes = sorted({int(n) for n in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes={list(sizes)} is invalid; allowed: integers >= 1")
    if stat not in STATS:
        raise ValueError(f"stat={stat!r} is unknown; allowed: {', '.join(STATS)}")
    optimizer_fn = optimizer_fn or _rmsprop
    lengths = stream_lengths(sizes, stream)
    rep, inputs = layer_groups(layers, example)
    key = {
        **profile_key(
            torch.device(device),
            sizes,
            lengths,
            (repeats, warmup, stat),
            loss_fn,
            optimizer_fn,
            layers,
        ),
        "kind": "planned",
        "seed": seed,
        "inputs": cache.key_digest([cache.tensor_shapes(as_tuple(x)) for x in inputs]),
    }
    if use_cache and (stored := cache.load("layers", key)) is not None:
        try:
            return LayerProfile.from_json(stored, key)
        except (KeyError, TypeError, ValueError):
            pass  # corrupt content: measure again
    dev = torch.device(device)
    timed: dict[int, dict[int, LayerCost]] = {}
    overheads: list[float] = []
    g = torch.Generator().manual_seed(seed)
    last = len(layers) - 1
    for i in sorted(set(rep)):
        t0 = time.perf_counter()
        (lay,) = materialize([copy.deepcopy(layers[i])], seed, first_index=i, device=dev)
        per: dict[int, LayerCost] = {}
        for n in sizes:
            x = _to(_real_input(inputs[i], n, i == 0, example, g), dev)
            M = lengths[n]

            def time_it(
                lay: nn.Module = lay, x: Any = x, n: int = n, M: int = M, i: int = i
            ) -> StreamTimes:
                return time_stream(
                    [lay],
                    [fresh_input(x, i > 0) for _ in range(M)],
                    [_to(targets(n), dev)] * M if i == last and loss_fn is not None else None,
                    loss_fn if i == last else None,
                    device=dev,
                    warmup=warmup,
                    repeats=repeats,
                    optimizer_fn=optimizer_fn,
                )

            t, over = checked_stream(time_it, f"layer {i} at micro-batch {n} (M={M})")
            overheads.append(over)
            factors = split_factors(
                [lay],
                x,
                _to(targets(n), dev) if i == last else None,
                loss_fn if i == last else None,
                [0],
                device=dev,
                warmup=warmup,
                repeats=repeats,
                stat=stat,
                first=i == 0,
            )
            (per[n],) = split_backward(records(t, [0], stat), factors)
        timed[i] = per
        del lay
        if log is not None:
            log(
                f"profiled layer {i} ({type(layers[i]).__name__}, {rep.count(i)} alike) at sizes {sizes} "
                f"in {time.perf_counter() - t0:.1f} s"
            )
    costs = {n: [timed[rep[i]][n] for i in range(len(layers))] for n in sizes}
    profile = LayerProfile(
        sizes,
        costs,
        key,
        distinct=len(timed),
        recompute_overhead_s=statistics.median(overheads),
    )
    if use_cache:
        cache.save("layers", key, profile.to_json())
    return profile
