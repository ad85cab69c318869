"""Emulation mode: the real engine with each layer's compute replaced by its calibrated duration.

To check the simulator at K = 4 and 8 on a 2-core machine, run the *real* engine — real processes,
real schedule, real gloo transfers of the real boundary sizes — but let each layer **sleep** for its
measured cost instead of computing. Sleeping ranks do not compete for the cores, so eight of them
reproduce the timing eight devices would show, up to the transfers and the engine's own overhead,
which are real. The simulator's prediction for the same costs can then be compared with a run that
shares everything with it except the discrete-event model.

An ``EmulatedLayer`` stands in for one real layer at one micro-batch size:

- its output shapes and dtypes come from running the real layer on the **meta** device (no memory,
  no compute), tuples included (AmoebaNet cells pass ``(current, previous)``);
- one scalar parameter, so gradients, DDP and the optimiser have something to work on;
- forward sleeps until ``forward_s`` has passed since it was called (``forward_nograd_s`` when grad
  is disabled: the first pass of a rematerialised micro-batch), returns zero tensors of the real
  shapes produced by a custom ``autograd.Function`` of the input and the parameter, so autograd
  connects the stage; the recompute under remat is a graph-building forward and sleeps ``forward_s``,
  as the engine would spend;
- backward sleeps ``backward_s`` and returns zero gradients of the input's shapes; under a schedule
  that splits the backward (zb-h1: ``split``) the input's and the weight's gradients are two nodes,
  so B sleeps the layer's ``backward_input_s`` and W its ``backward_weight_s``, as the engine's split
  of the real layer spends them (``LayerCost.split``: its own overhead included);
- non-float outputs (token ids) are passed through from the input of the same shape and dtype.

Durations are deadlines from the call, so the allocation of the outputs is absorbed. ``time.sleep``
overshoots, more under load: each emulated action is that much longer than its cost, which the
calibration measures and the simulation of an emulated cell adds (``calibration.sleep_overshoot``;
the figure: ``reports/sim/sim.md``, *Calibration*).

The last layer's profiled cost includes the loss (``profile_layers(loss_fn=...)``), so emulated runs
use ``emulated_loss``, which costs next to nothing, instead of the real loss.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from ..engine.comm import TensorMeta, describe
from ..engine.microbatch import Batch, as_tuple, from_tuple
from ..sim.costs import LayerCost


def sleep_until(deadline: float) -> None:
    """Sleep (never spin: a spinning rank would take a core from the others) until ``deadline``."""
    while (rest := deadline - time.perf_counter()) > 0:
        time.sleep(rest)


class _Emulate(torch.autograd.Function):
    """(weight, *float inputs) -> zero tensors of the given specs, after a sleep; backward sleeps."""

    @staticmethod
    def forward(
        ctx: Any,
        w: torch.Tensor,
        deadline: float,
        backward_s: float,
        specs: list[TensorMeta],
        *inputs: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        outs = tuple(torch.zeros(s.shape, dtype=s.dtype, device=w.device) for s in specs)
        ctx.backward_s = backward_s
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in inputs]
        sleep_until(deadline)
        return outs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        deadline = time.perf_counter() + ctx.backward_s
        need = ctx.needs_input_grad
        gw = torch.zeros((), dtype=grads[0].dtype, device=grads[0].device) if need[0] else None
        gin = [
            torch.zeros(s, dtype=d, device=dev) if need[4 + i] else None
            for i, (s, d, dev) in enumerate(ctx.inputs)
        ]
        sleep_until(deadline)
        return (gw, None, None, None, *gin)


class _WeightTerm(torch.autograd.Function):
    """w -> a zero scalar that depends on w alone; backward sleeps the layer's W."""

    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, weight_s: float) -> torch.Tensor:
        ctx.weight_s = weight_s
        return torch.zeros((), dtype=w.dtype, device=w.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        deadline = time.perf_counter() + ctx.weight_s
        gw = torch.zeros((), dtype=grad.dtype, device=grad.device)
        sleep_until(deadline)
        return gw, None


class EmulatedLayer(nn.Module):
    """A layer that takes its real counterpart's time and returns tensors of its real shapes."""

    def __init__(
        self,
        in_specs: list[TensorMeta],
        in_tuple: bool,
        out_specs: list[TensorMeta],
        out_tuple: bool,
        cost: LayerCost,
        name: str = "",
        split: bool = False,
    ) -> None:
        super().__init__()
        self.in_specs, self.in_tuple = in_specs, in_tuple
        self.out_specs, self.out_tuple = out_specs, out_tuple
        self.cost, self.name, self.split = cost, name, split
        self.weight = nn.Parameter(torch.zeros(()))

    def extra_repr(self) -> str:
        return f"{self.name}: fwd {self.cost.forward_s:.2e}s, bwd {self.cost.backward_s:.2e}s"

    def forward(self, x: Batch) -> Batch:
        t0 = time.perf_counter()
        xs = as_tuple(x)
        got = describe(xs)
        if got != self.in_specs:
            raise ValueError(
                f"emulated layer {self.name!r} was built for inputs "
                f"{[(m.shape, m.dtype) for m in self.in_specs]}, got "
                f"{[(m.shape, m.dtype) for m in got]}; allowed: the sample's shapes"
            )
        dur = self.cost.forward_s if torch.is_grad_enabled() else self.cost.forward_nograd_s
        float_specs = [s for s in self.out_specs if s.is_float]
        if float_specs and self.split:  # B: the inputs' node alone; W: the weight's term alone
            b, w = self.cost.split
            ins = [t for t in xs if t.is_floating_point()]
            term = _WeightTerm.apply(self.weight, w)
            floats = tuple(
                y + term
                for y in _Emulate.apply(self.weight.detach(), t0 + dur, b, float_specs, *ins)
            )
        elif float_specs:
            floats = _Emulate.apply(
                self.weight,
                t0 + dur,
                self.cost.backward_s,
                float_specs,
                *[t for t in xs if t.is_floating_point()],
            )
        else:  # nothing differentiable leaves this layer: no backward to emulate
            floats = ()
            sleep_until(t0 + dur)
        fl, ints = iter(floats), [t for t in xs if not t.is_floating_point()]
        outs = []
        for s in self.out_specs:
            if s.is_float:
                outs.append(next(fl))
                continue
            same = [t for t in ints if tuple(t.shape) == s.shape and t.dtype == s.dtype]
            if same:
                ints.remove(same[0])
            outs.append(
                same[0] if same else torch.zeros(s.shape, dtype=s.dtype, device=self.weight.device)
            )
        return from_tuple(outs, self.out_tuple)


def _meta(x: Batch) -> Batch:
    return from_tuple(
        [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in as_tuple(x)],
        isinstance(x, tuple),
    )


@torch.no_grad()
def _shapes_of(layer: nn.Module, x: Batch) -> Batch:
    """The layer's output for input ``x``, computed on the meta device (no memory, no compute);
    for a layer that cannot run on meta, on a copy of it with zero inputs on the CPU."""
    state = {
        n: torch.empty(t.shape, dtype=t.dtype, device="meta")
        for n, t in [*layer.named_parameters(), *layer.named_buffers()]
    }
    try:
        return functional_call(layer, state, (x,))
    except (NotImplementedError, RuntimeError, TypeError):
        real = from_tuple(
            [torch.zeros(t.shape, dtype=t.dtype) for t in as_tuple(x)], isinstance(x, tuple)
        )
        return _meta(copy.deepcopy(layer).cpu()(real))


def emulated_layers(
    layers: Sequence[nn.Module], sample: Batch, costs: Sequence[LayerCost], split: bool = False
) -> list[EmulatedLayer]:
    """One ``EmulatedLayer`` per layer, for micro-batches shaped like ``sample`` (real or meta
    tensors); ``costs[i]`` is layer i's cost at that micro-batch size; ``split``: the schedule splits
    the backward into B and W (``engine.schedule.splits_backward``). The layers may live on the
    meta device: only their structure is used."""
    if len(costs) != len(layers):
        raise ValueError(
            f"emulated_layers: {len(costs)} costs for {len(layers)} layers; allowed: one each"
        )
    x = _meta(sample)
    out: list[EmulatedLayer] = []
    for i, (layer, cost) in enumerate(zip(layers, costs)):
        y = _shapes_of(layer, x)
        out.append(
            EmulatedLayer(
                describe(as_tuple(x)),
                isinstance(x, tuple),
                describe(as_tuple(y)),
                isinstance(y, tuple),
                cost,
                f"{i}:{type(layer).__name__}",
                split,
            )
        )
        x = y
    return out


def emulated_loss(y: Batch, targets: Any = None) -> torch.Tensor:
    """A loss costing next to nothing (the profiled last layer already includes the real loss)."""
    return as_tuple(y)[0].reshape(-1)[:1].sum()
