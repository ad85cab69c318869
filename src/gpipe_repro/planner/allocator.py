"""The planner's per-stage peak against the CPU allocator's: real tensors, one stage at a time.

``planner.memory`` counts what autograd saves (fake tensors, nothing allocated). This module runs a
small AmoebaNet-D's stages for real on this CPU, each in this process, through the engine's own
stage code (``engine.pipeline.Cell``) and in GPipe's fill-drain order (GPipe §2.2-2.3): all M
forwards, then the M backwards in reverse; with remat ``always`` the forwards keep only their inputs
and each backward recomputes its micro-batch first; a stage that is not the last sends its outputs on
(dropped here) and receives a gradient of their shape. The inputs a stage receives are computed
beforehand by the stages before it.

The measure: the c10 CPU allocator's allocation events, recorded by the torch profiler
(``profile_memory=True``): every byte allocated and freed during one training step (after a
warm-up step, so that gradients and the RMSProp state already exist), summed in time order; the
peak of that sum plus the stage's state (weights, gradients, RMSProp state, 12 bytes per
parameter, allocated before) is the stage's measured peak. It sees what saved-tensor accounting
does not: temporaries of the kernels, backward's gradient buffers, the loss's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from ..engine.microbatch import as_tuple, from_tuple, split
from ..engine.pipeline import Cell
from ..models.amoebanet import amoebanet_layers
from .table1 import GiB, plan_amoebanet

__all__ = ["Check", "allocator_peak", "check_amoebanet"]


@dataclass(frozen=True)
class Check:
    """One stage: the planner's peak beside the allocator's (bytes)."""

    K: int
    stage: int
    checkpoint: str
    M: int
    batch: int
    state: int  # weights + gradients + RMSProp state (both sides)
    planned: int  # the planner's peak: state + activations
    measured: int  # the allocator's peak during a step, plus the state

    @property
    def error(self) -> float:
        """(planned - measured) / measured."""
        return (self.planned - self.measured) / self.measured


def _walk(nodes: Any) -> Iterator[Any]:
    for n in nodes:
        yield n
        yield from _walk(n.children)


def allocator_peak(prof: Any) -> int:
    """The peak of bytes allocated minus freed since the profile began (CPU allocator events)."""
    events = [
        n
        for n in _walk(prof.profiler.kineto_results.experimental_event_tree())
        if n.typed[0] == _EventType.Allocation and n.typed[1].device.type == "cpu"
    ]
    now = peak = 0
    for n in sorted(events, key=lambda n: n.start_time_ns):
        now += n.typed[1].alloc_size
        peak = max(peak, now)
    return peak


def _loss(out: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long))


def _step(cell: Cell, inputs: list[Any], checkpoint: str, last: bool) -> None:
    """One fill-drain step of a stage on its micro-batch ``inputs`` (module doc)."""
    xs: list[Any] = [
        from_tuple(
            [t.clone().requires_grad_(t.is_floating_point()) for t in as_tuple(x)],
            isinstance(x, tuple),
        )
        for x in inputs
    ]
    outs: list[Any] = []
    for x in xs:
        if checkpoint == "never":
            outs.append(cell(x))
        else:
            with torch.no_grad():
                cell(x)  # sent on; only the input stays
    for m in reversed(range(len(xs))):
        y = outs.pop() if checkpoint == "never" else cell(xs[m])
        if last:
            _loss(y).backward()
        else:
            ys = as_tuple(y)
            torch.autograd.backward(list(ys), [torch.randn_like(t) for t in ys])
        del y
        xs[m] = None  # its input gradient is sent on


def check_amoebanet(
    L: int,
    D: int,
    K: int,
    M: int,
    checkpoint: str,
    N: int,
    balance: list[int],
    image_size: int = 32,
) -> list[Check]:
    """Every stage of AmoebaNet-D(L, D) at K stages, planned and measured (module doc)."""
    torch.manual_seed(0)
    plan = plan_amoebanet(
        L, D, K, M, checkpoint, N, 8 * GiB, image_size=image_size, classes=10, balance=balance
    )
    layers = amoebanet_layers("D", L, D, classes=10, image_size=image_size)
    x: Any = torch.randn(N, 3, image_size, image_size)
    out, start = [], 0
    for k, b in enumerate(balance):
        cell = Cell(layers[start : start + b])
        params = list(cell.parameters())
        inputs = split(x, M)
        opt = torch.optim.RMSprop(params, lr=1e-6)
        _step(cell, inputs, checkpoint, k == K - 1)  # warm-up: gradients and state exist
        opt.step()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            _step(cell, inputs, checkpoint, k == K - 1)
        state = 12 * sum(p.numel() for p in params)
        out.append(
            Check(K, k, checkpoint, M, N, state, plan.totals[k], state + allocator_peak(prof))
        )
        with torch.no_grad():
            x = cell(x)  # the next stage's input
        start += b
    return out
