"""Per-layer cost estimates for partitioning (the paper's c_i, §2.1).

- ``params``: parameter count (free, but blind to activations: AmoebaNet's early cells are cheap in
  parameters and expensive in compute).
- ``flops``: floating-point operations of forward + backward (3x forward), counted with
  ``FlopCounterMode`` on the meta device — no memory, no compute.
- ``time``: measured forward + backward seconds at the micro-batch size actually used (per the
  environment notes, per-micro-batch cost is not proportional to its size).
- ``memory``: bytes autograd saves for backward, the activation memory a layer adds per micro-batch.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from .errors import ArgumentError
from .memory import ActivationMeter
from .microbatch import Batch, as_tuple

__all__ = ["COST_KINDS", "COUNTED_KINDS", "layer_costs"]

COST_KINDS = ("params", "flops", "time", "memory")
# the kinds known without running the model: counted on the meta device (the others are measured)
COUNTED_KINDS = ("params", "flops")


def _detach(x: Batch, requires_grad: bool) -> Batch:
    ts = [t.detach().requires_grad_(requires_grad and t.is_floating_point()) for t in as_tuple(x)]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _backward(y: Batch) -> None:
    outs = [t for t in as_tuple(y) if t.requires_grad]
    if outs:
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])


def layer_costs(
    layers: Sequence[nn.Module], sample: Batch | None, kind: str, repeats: int = 2
) -> list[float]:
    """Cost of each layer; ``sample`` is one micro-batch of model input (meta tensors allowed for
    ``flops``). Layers are not modified (timing runs on copies)."""
    if kind == "params":
        return [float(sum(p.numel() for p in layer.parameters())) for layer in layers]
    if kind not in COST_KINDS:
        raise ArgumentError("kind", kind, f"is unknown; allowed: {', '.join(COST_KINDS)}")
    assert sample is not None
    costs: list[float] = []
    x = sample
    for layer in layers:
        if kind == "flops":
            with FlopCounterMode(display=False) as fc:
                y = layer(_detach(x, False))
            costs.append(3.0 * fc.get_total_flops())  # backward ~ 2x forward
        elif kind == "memory":
            meter = ActivationMeter(layer.parameters())
            xin = _detach(x, True)
            with meter.record(0):
                y = layer(xin)
            costs.append(float(meter.peak))
        else:
            lay = copy.deepcopy(layer)
            best = float("inf")
            for _ in range(repeats + 1):
                xin = _detach(x, True)
                t0 = time.perf_counter()
                y = lay(xin)
                _backward(y)
                best = min(best, time.perf_counter() - t0)
            costs.append(best)
        x = _detach(y, False)
    return costs
