"""The working set of one micro-batch's forward and backward through a stage, counted on fake tensors.

``memory.activations`` counts what a micro-batch keeps between its forward and its backward (its input,
the tensors autograd saves, its output). While the micro-batch's backward runs (GPipe §2.2: the
backward pass of a partition, once per micro-batch) more is alive for a while: the incoming output
gradient, the gradients of every intermediate output, each backward kernel's outputs (the input and
weight gradients before they are accumulated) and their temporaries; under rematerialisation the
recompute's forward (GPipe §2.3) has its own temporaries too. All that is freed again when the
micro-batch's backward ends, so it occurs once per stage, for one micro-batch at a time.

How it is counted: the stage's forward and backward run on fake tensors (shapes and dtypes, no
storage), and a ``TorchDispatchMode`` records every storage an operation creates together with a
weak reference to it; the storages nobody holds any more are dropped whenever the sum could set a
new peak. The live sum is the bytes an allocator would hold; its peak over the forward and backward,
minus what is live when the forward has returned (the micro-batch's saved tensors and output,
counted by ``memory.activations``), is the working set. Storages that existed before (parameters, their
gradients, the input) are not counted. Scratch a kernel allocates and frees inside itself is
invisible to the mode; the one that matters on a CPU, the convolution's (oneDNN's layout copies), is
added from its operands' sizes (``scratch_bytes``).

Where the schedule splits the backward (``engine.split``: B the input gradient, W the weight
gradient later), B keeps gradients for W that live from B to W beside the graph; ``kept_bytes``
counts them, with B run the same way on fake tensors through the engine's taped cell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..engine.microbatch import Batch, as_tuple, from_tuple
from ..engine.pipeline import Cell
from ..engine.precision import autocast, compute_dtype, fp32_loss
from ..engine.split import Tape, backward_input

__all__ = ["LiveBytes", "scratch_bytes", "working_set", "split_working_set", "kept_bytes"]


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created under this mode that are still referenced (module doc).

    ``mark()`` records the bytes live now as the baseline; ``peak`` is the largest live sum seen
    since the mode was entered (or since ``reset_peak``)."""

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self._ignore = {StorageWeakRef(t.untyped_storage()).cdata for t in ignore}
        self.now = 0
        self.peak = 0

    def sweep(self) -> int:
        """Drop the storages no tensor holds any more; the bytes live after that."""
        dead = [k for k, (ref, _) in self._live.items() if ref.expired()]
        for k in dead:
            self.now -= self._live.pop(k)[1]
        return self.now

    def reset_peak(self) -> None:
        self.peak = self.sweep()

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        ref = StorageWeakRef(storage)
        if ref.cdata in self._ignore or ref.cdata in self._live:
            return
        self._live[ref.cdata] = (ref, storage.nbytes())
        self.now += storage.nbytes()

    def track(self, tensors: Iterable[Any], extra: int = 0) -> None:
        """Count ``tensors`` (an operation's outputs, or made outside one) as live, and the peak with
        ``extra`` bytes more for a moment. Dead storages are dropped only when the sum with them
        could set a new peak: it never undercounts, so a sum at or below the peak cannot exceed it
        once swept, and the peak stays exact without polling every storage at every operation."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._track(t)
        if self.now + extra > self.peak:
            self.peak = max(self.peak, self.sweep() + extra)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        self.track(tree_leaves(out), scratch_bytes(func, args, out))
        return out


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def scratch_bytes(func: Any, args: tuple[Any, ...], out: Any) -> int:
    """Bytes a CPU convolution allocates inside its kernel while its outputs exist (no operation
    returns them, so the dispatch mode cannot see them): oneDNN reorders its operands into its
    blocked layout — forward, a copy of the larger of input and output plus the weight; backward,
    copies of the output gradient, the input and the weight (measured with the CPU allocator's
    events: experiments/memback). 0 for every other operation and device."""
    if not args or not isinstance(args[0], torch.Tensor) or args[0].device.type != "cpu":
        return 0
    if func is torch.ops.aten.convolution.default:
        return _nbytes(args[1]) + max(_nbytes(args[0]), _nbytes(out))
    if func is torch.ops.aten.convolution_backward.default:
        return _nbytes(args[0]) + _nbytes(args[1]) + _nbytes(args[2])
    return 0


def _fake(t: torch.Tensor, mode: FakeTensorMode, device_type: str, batch: int = 1) -> torch.Tensor:
    """A fake tensor of ``t``'s shape (dimension 0 times ``batch``) and dtype on ``device_type``."""
    shape = (t.shape[0] * batch, *t.shape[1:]) if batch > 1 else t.shape
    with mode:
        return torch.empty(shape, dtype=t.dtype, device=device_type)


def working_set(
    cell: Cell,
    x: Batch,
    loss: Callable[[Any], torch.Tensor] | None,
    precision: str,
    device_type: str,
    batch: int = 1,
) -> int:
    """The working set of one micro-batch of ``batch`` times ``x``'s samples (module doc) through
    the stage's ``cell``: its forward as ``memory.activations.measure_stage`` runs it, then its
    backward, from the loss or from a received gradient per float output (held until the backward
    returns, as the engine holds it). The parameters' gradients exist beforehand (a step's backward
    adds into them in place)."""
    mode = FakeTensorMode()
    state = {
        n: _fake(p, mode, device_type).requires_grad_(p.requires_grad)
        for n, p in cell.named_parameters()
    }
    for p in state.values():
        if p.requires_grad:
            p.grad = _fake(p, mode, device_type)
    buffers = {n: _fake(b, mode, device_type) for n, b in cell.named_buffers()}
    xs = [
        _fake(t, mode, device_type, batch).requires_grad_(t.is_floating_point())
        for t in as_tuple(x)
    ]
    grads = [p.grad for p in state.values() if p.grad is not None]
    live = LiveBytes([*state.values(), *grads, *buffers.values(), *xs])
    with mode, live:
        with autocast(device_type, precision):
            y = functional_call(cell, {**state, **buffers}, (from_tuple(xs, isinstance(x, tuple)),))
        lost = None if loss is None else fp32_loss(lambda out, _: loss(out), y, None, device_type)
        kept = live.sweep()  # saved tensors and output: what the micro-batch keeps until backward
        if lost is not None:
            lost.backward()
        else:
            ys = [t for t in as_tuple(y) if t.requires_grad]
            received = [torch.empty_like(t) for t in ys]
            torch.autograd.backward(ys, received)
            del received
    return max(0, live.peak - kept)


def split_working_set(
    cell: Cell,
    x: Batch,
    loss: Callable[[Any], torch.Tensor] | None,
    precision: str,
    device_type: str,
) -> tuple[int, int]:
    """The working set at ``x``'s batch b as (part that scales, part that does not), from the
    working sets at b and 2b: w(b) = fixed + scaling, w(2b) = fixed + 2 scaling. Where the two
    are not linear, the split that is exact at 2b and above the measurement at b is kept."""
    one = working_set(cell, x, loss, precision, device_type)
    two = working_set(cell, x, loss, precision, device_type, batch=2)
    scaling = two - one
    if scaling < 0:
        return 0, one
    if one - scaling < 0:
        return (two + 1) // 2, 0
    return scaling, one - scaling


def kept_bytes(
    layers: Sequence[nn.Module],
    x: Batch,
    loss: Callable[[Any], torch.Tensor] | None,
    precision: str,
    device_type: str,
) -> int:
    """What a split backward's B keeps for W (``engine.split``): B run on fake tensors through the
    engine's taped cell, the gradients it kept counted."""
    mode = FakeTensorMode()
    cell = Cell(layers, compute_dtype(precision) if precision != "fp32" else None)
    state = {
        n: _fake(p, mode, device_type).requires_grad_(p.requires_grad)
        for n, p in cell.named_parameters()
    }
    buffers = {n: _fake(b, mode, device_type) for n, b in cell.named_buffers()}
    xs = [_fake(t, mode, device_type).requires_grad_(t.is_floating_point()) for t in as_tuple(x)]
    tape = Tape()
    with mode:
        with autocast(device_type, precision), cell.taped(tape):
            y = functional_call(
                cell, {**state, **buffers}, (tuple(xs) if isinstance(x, tuple) else xs[0],)
            )
        if loss is not None:
            outs = [fp32_loss(lambda out, _: loss(out), y, None, device_type)]
            grads: list[torch.Tensor | None] = [None]
        else:
            outs = list({id(t): t for t in as_tuple(y) if t.requires_grad}.values())
            grads = [torch.ones_like(t) for t in outs]
        if not outs:
            return 0
        params = [t for t in state.values() if t.requires_grad]
        backward_input(tape, grads, outs, params)
        return tape.nbytes_kept()
