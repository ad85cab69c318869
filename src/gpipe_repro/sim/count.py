"""Per-layer FLOPs and bytes of a model, counted on the meta device (nothing is allocated).

For each layer of a flat layer list, at one micro-batch: every operation of its forward and of its real
backward (the backward is run, not assumed to be 2x the forward: a first layer whose input needs no
gradient computes no input gradient) — and that backward once more split as zero bubble runs it
(``engine.split``: B, the input gradient's operations, and W, the weight gradient's) — each with

- its FLOPs (matrix operations: matmul, convolution, attention, counted by
  ``torch.utils.flop_counter``'s formulas; elementwise work counts none, it is memory-bound),
- the bytes it moves: every tensor it reads (at most its storage) and writes. Views and detaches
  move nothing and are not operations. Parameters, their gradients and optimiser slots do not grow
  with the batch, activations do: each operation is counted at two batch sizes and its bytes split
  into a fixed part and a per-sample part, so ``LayerCount.at(n)`` is exact for these models.

A per-operation roofline (``sim.roofline``) times each operation by its own FLOPs and bytes, so the
memory-bound operations between matrix operations (normalisation, activations, pooling, softmax,
residual adds) and the sheer number of operations both count.

Layers take and return a tensor or a tuple of tensors (AmoebaNet cells pass ``(current, previous)``);
the last layer may carry the loss (its operations count in that layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ..engine.microbatch import Batch, as_tuple, from_tuple
from ..engine.split import Tape, backward_input, backward_weight
from ..models import class_planning_loss, token_planning_loss
from .attention import ATTENTION, FUSED, MATERIALIZED, fused_attention

__all__ = [
    "OpCount",
    "LayerCount",
    "count_layers",
    "count_amoebanet",
    "count_transformer_lm",
]

aten = torch.ops.aten
# allocations and aliasing: no data moved, not a kernel worth timing
_FREE = {
    aten.detach,
    aten.alias,
    aten.lift_fresh,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten._unsafe_view,
}


@dataclass(frozen=True)
class OpCount:
    """One operation at the layer's ``batch``: its FLOPs (matrix operations only) and the bytes it
    reads and writes, ``fixed_bytes`` of them independent of the batch (weights, their gradients)."""

    flops: float
    bytes: float
    fixed_bytes: float = 0.0
    op: str = ""  # the aten operator's name (``mm``, ``_softmax``...): what a breakdown groups by

    @property
    def matrix(self) -> bool:
        return self.flops > 0

    def at(self, f: float) -> OpCount:
        """The same operation at ``f`` times the batch."""
        return OpCount(
            self.flops * f,
            self.fixed_bytes + (self.bytes - self.fixed_bytes) * f,
            self.fixed_bytes,
            self.op,
        )


@dataclass(frozen=True)
class LayerCount:
    """One layer at ``batch`` samples: its operations, forward and backward, in execution order."""

    name: str
    batch: int
    params: int
    param_bytes: int
    in_bytes: int
    out_bytes: int  # everything the layer returns (a tuple summed): the boundary bytes of a cut
    fwd: tuple[OpCount, ...]  # the forward's operations (the loss's included in the last layer)
    bwd: tuple[OpCount, ...]  # the backward's
    backward_counted: bool = True  # False: the backward could not run on meta; bwd = 2x fwd
    # the backward split as zero bubble runs it (``engine.split``): B, the input gradient's
    # operations, and W, the weight gradient's; () where the split could not run on meta
    bwd_input: tuple[OpCount, ...] = ()
    bwd_weight: tuple[OpCount, ...] = ()

    @property
    def fwd_ops(self) -> tuple[float, ...]:
        """FLOPs of each matrix operation of the forward."""
        return tuple(o.flops for o in self.fwd if o.matrix)

    @property
    def bwd_ops(self) -> tuple[float, ...]:
        return tuple(o.flops for o in self.bwd if o.matrix)

    @property
    def fwd_flops(self) -> float:
        return float(sum(o.flops for o in self.fwd))

    @property
    def bwd_flops(self) -> float:
        return float(sum(o.flops for o in self.bwd))

    @property
    def fwd_bytes(self) -> float:
        return float(sum(o.bytes for o in self.fwd))

    @property
    def bwd_bytes(self) -> float:
        return float(sum(o.bytes for o in self.bwd))

    def at(self, n: int) -> LayerCount:
        """The same layer at ``n`` samples (FLOPs and activation bytes scale, parameters don't)."""
        f = n / self.batch
        return replace(
            self,
            batch=n,
            in_bytes=round(self.in_bytes * f),
            out_bytes=round(self.out_bytes * f),
            fwd=tuple(o.at(f) for o in self.fwd),
            bwd=tuple(o.at(f) for o in self.bwd),
            bwd_input=tuple(o.at(f) for o in self.bwd_input),
            bwd_weight=tuple(o.at(f) for o in self.bwd_weight),
        )


def _read(t: torch.Tensor) -> float:
    """Bytes an operation reads of ``t``: its elements, at most its storage (an expanded scalar)."""
    return float(min(t.numel() * t.element_size(), t.untyped_storage().nbytes()))


_Op = tuple[float, float, str]  # (FLOPs, bytes, the operator's name) of one recorded operation


class _Ops(TorchDispatchMode):
    """Records (FLOPs, bytes) of every operation that runs inside it."""

    active: list[_Ops] = []  # the recorders entered, innermost last (``_record`` appends to it)

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[_Op] = []

    def __enter__(self) -> _Ops:
        _Ops.active.append(self)
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        _Ops.active.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if func.is_view or packet in _FREE:
            return out
        flops = 0.0
        if packet in flop_registry:
            flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
        reads = sum(_read(a) for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor))
        writes = sum(
            float(t.numel() * t.element_size())
            for t in tree_leaves(out)
            if isinstance(t, torch.Tensor)
        )
        self.ops.append((flops, reads + writes, str(packet.__name__)))
        return out


def _record(flops: float, nbytes: float, name: str) -> None:
    """One operation counted as given (a fused kernel, ``attention``), by the innermost recorder."""
    _Ops.active[-1].ops.append((flops, nbytes, name))


def _nbytes(x: Batch) -> int:
    return sum(t.numel() * t.element_size() for t in as_tuple(x))


def _fresh(x: Batch, grad: bool) -> Batch:
    ts = [t.detach().requires_grad_(grad and t.is_floating_point()) for t in as_tuple(x)]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _double(x: Batch) -> Batch:
    """The batch twice over (dim 0)."""
    return from_tuple([torch.cat([t, t]) for t in as_tuple(x)], isinstance(x, tuple))


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


def _run(
    layer: nn.Module, x: Batch, first: bool, loss_fn: Callable[[Any], torch.Tensor] | None
) -> tuple[list[_Op], list[_Op] | None, Batch]:
    """(forward ops, backward ops or None where the backward cannot run on meta, output)."""
    xin = _fresh(x, grad=not first)
    for p in layer.parameters():  # each count starts from no gradient, whatever ran before
        p.grad = None
    with _Ops() as fwd:
        y = layer(xin)
        loss = loss_fn(y) if loss_fn is not None else None
    roots = [loss] if loss is not None else [t for t in as_tuple(y) if t.requires_grad]
    seeds = [torch.ones_like(t) for t in roots]
    with _Ops() as bwd:
        try:
            if roots:
                torch.autograd.backward(roots, seeds)
        except (RuntimeError, NotImplementedError):
            return fwd.ops, None, y
    return fwd.ops, bwd.ops, y


def _split(
    layer: nn.Module, x: Batch, first: bool, loss_fn: Callable[[Any], torch.Tensor] | None
) -> tuple[list[_Op], list[_Op]] | None:
    """(B's operations, W's) of the layer's backward split as the engine's zero-bubble schedule
    splits it (``engine.split``), or None where it cannot run on meta."""
    xin = _fresh(x, grad=not first)
    for p in layer.parameters():
        p.grad = None
    tape = Tape()
    with _Ops():  # the forward's operations are counted by ``_run``; here they are only recorded
        y = layer(xin)
        tape.record(xin, y)
        outs = [loss_fn(y)] if loss_fn is not None else [t for t in as_tuple(y) if t.requires_grad]
    params = [p for p in layer.parameters() if p.requires_grad]
    try:
        with _Ops() as b:
            backward_input(tape, [torch.ones_like(t) for t in outs], outs, params)
        with _Ops() as w:
            backward_weight(tape)
    except (RuntimeError, NotImplementedError):
        return None
    finally:
        for p in layer.parameters():
            p.grad = None
    return b.ops, w.ops


def _ops(a: list[_Op], b: list[_Op]) -> tuple[OpCount, ...]:
    """Operations counted at twice the batch (a) and four times it (b), as ``OpCount`` at the batch:
    bytes split into a fixed part and a per-sample part (both sizes hold >= 2 samples, so no
    operation takes a one-sample shortcut)."""
    if len(a) != len(b):  # the operations depend on the batch: take bytes as all per-sample
        return tuple(OpCount(f / 2, n / 2, 0.0, op) for f, n, op in a)
    out = []
    for (f, n, op), (_, n2, _) in zip(a, b):
        fixed = min(n, max(0.0, 2 * n - n2))
        out.append(OpCount(f / 2, fixed + (n - fixed) / 2, fixed, op))
    return tuple(out)


def count_layers(
    layers: Sequence[nn.Module],
    sample: Batch,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    memo: bool = True,
    attention: str = MATERIALIZED,
) -> list[LayerCount]:
    """Count every layer at the batch of ``sample`` (meta tensors; dim 0 is the batch).

    The first layer's input needs no gradient (as on the engine's first stage); every later input
    does. ``loss_fn(output)`` runs after the last layer and is counted in it. With ``memo``, a layer
    identical to one already counted (same ``_signature``: the 48 layers of Transformer-48, the
    normal cells of an AmoebaNet stack) reuses that count instead of running again. ``attention``:
    ``materialized`` counts SDPA's math (the L x L scores in memory), ``fused`` one fused kernel per
    pass (``sim.attention``)."""
    if attention not in ATTENTION:
        raise ValueError(f"attention={attention!r} is unknown; allowed: {', '.join(ATTENTION)}")
    if attention == FUSED:
        with fused_attention(_record):
            return count_layers(layers, sample, loss_fn, memo)
    batch = as_tuple(sample)[0].shape[0]
    device = as_tuple(sample)[0].device
    out: list[LayerCount] = []
    seen: dict[tuple, tuple[LayerCount, tuple]] = {}
    x = sample
    x2 = _double(sample)
    x4 = _double(x2)
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        key = _signature(layer, x, last) + (i == 0,) if memo else None
        if key is not None and key in seen:
            count, spec = seen[key]
            out.append(count)
            x, x2, x4 = (_like(spec, k * batch, device) for k in (1, 2, 4))
            continue
        lf = loss_fn if last else None
        f2, b2, y2 = _run(layer, x2, i == 0, lf)
        f4, b4, y4 = _run(layer, x4, i == 0, lf)
        fwd = _ops(f2, f4)
        counted = b2 is not None and b4 is not None
        bwd = (
            _ops(b2, b4)
            if b2 is not None and b4 is not None
            else tuple(OpCount(2 * o.flops, 2 * o.bytes, 2 * o.fixed_bytes, o.op) for o in fwd)
        )
        s2, s4 = _split(layer, x2, i == 0, lf), _split(layer, x4, i == 0, lf)
        split = (
            (_ops(s2[0], s4[0]), _ops(s2[1], s4[1]))
            if s2 is not None and s4 is not None
            else ((), ())
        )
        spec = ([(tuple(t.shape[1:]), t.dtype) for t in as_tuple(y2)], isinstance(y2, tuple))
        count = LayerCount(
            name=type(layer).__name__,
            batch=batch,
            params=sum(p.numel() for p in layer.parameters()),
            param_bytes=sum(p.numel() * p.element_size() for p in layer.parameters()),
            in_bytes=_nbytes(x),
            out_bytes=_nbytes(y2) // 2,
            fwd=fwd,
            bwd=bwd,
            backward_counted=counted,
            bwd_input=split[0],
            bwd_weight=split[1],
        )
        out.append(count)
        if key is not None:
            seen[key] = (count, spec)
        x, x2, x4 = _like(spec, batch, device), _fresh(y2, grad=False), _fresh(y4, grad=False)
    return out


def _like(
    spec: tuple[list[tuple[tuple[int, ...], torch.dtype]], bool], n: int, device: torch.device
) -> Batch:
    ts = [torch.empty((n, *shape), dtype=dtype, device=device) for shape, dtype in spec[0]]
    return tuple(ts) if spec[1] else ts[0]


def count_amoebanet(
    L: int, D: int, image_size: int = 224, classes: int = 1000, genotype: str = "D", batch: int = 1
) -> list[LayerCount]:
    """AmoebaNet-{D,B}(L, D) per layer at ``batch`` images (Table 2: D(18, 256) at 224x224)."""
    from ..models.amoebanet import amoebanet_layers

    with torch.device("meta"):
        layers = amoebanet_layers(genotype, L, D, classes=classes, image_size=image_size)
        x = torch.empty(batch, 3, image_size, image_size)
    return count_layers(layers, x, class_planning_loss)


def count_transformer_lm(
    L: int, d: int = 2048, H: int = 8192, A: int = 32, V: int = 32000, S: int = 1024, batch: int = 1
) -> list[LayerCount]:
    """Transformer-L per layer at ``batch`` sequences of ``S`` tokens (Table 2: L = 48)."""
    from ..models.transformer import transformer_lm_layers

    with torch.device("meta"):
        layers = transformer_lm_layers(L, d, H, A, V)
        tokens = torch.zeros(batch, S, dtype=torch.long)
    return count_layers(layers, tokens, token_planning_loss)
