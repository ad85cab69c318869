"""The planner's per-stage peak against the CPU allocator's: real tensors, one stage at a time.

``memory.activations`` counts what autograd saves (fake tensors, nothing allocated). This module runs a
small model's stages (AmoebaNet-D through the Table 1 planner, ``check_amoebanet``; any layer list
through ``memory.stages``, ``check_stages``) for real on this CPU, each in this process, through the engine's own
stage code (``engine.pipeline.Cell``) and in GPipe's fill-drain order (GPipe §2.2-2.3): all M
forwards, then the M backwards in reverse; with remat ``always`` the forwards keep only their inputs
and each backward recomputes its micro-batch first; a stage that is not the last sends its outputs on
(held until its gradient arrives, as the engine's send holds it) and receives a gradient of their
shape when its backward needs it (no receive posted ahead: planned with a lookahead of 1). The inputs a stage receives are computed
beforehand by the stages before it.

The measure: the c10 CPU allocator's allocation events, recorded by the torch profiler
(``profile_memory=True``): every byte allocated and freed during one training step (after a
warm-up step, so that gradients and the RMSProp state already exist), summed in time order; the
peak of that sum plus the stage's state (weights, gradients, RMSProp state, 12 bytes per
parameter, allocated before) is the stage's measured peak. It sees what saved-tensor accounting
does not: temporaries of the kernels, backward's gradient buffers, the loss's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile

from ..engine.microbatch import Batch, as_tuple, from_tuple, split
from ..engine.pipeline import Cell
from ..models.amoebanet import amoebanet_layers
from .stages import plan_stages
from .table1 import GiB, plan_amoebanet

__all__ = ["Check", "allocator_peak", "check_amoebanet", "check_stages"]


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


def _step(
    cell: Cell,
    inputs: list[Any],
    checkpoint: str,
    last: bool,
    loss: Callable[[Any], torch.Tensor] = _loss,
) -> None:
    """One fill-drain step of a stage on its micro-batch ``inputs`` (module doc)."""
    xs: list[Any] = [
        from_tuple(
            [t.clone().requires_grad_(t.is_floating_point()) for t in as_tuple(x)],
            isinstance(x, tuple),
        )
        for x in inputs
    ]
    outs: list[Any] = []
    sent: list[Any] = []  # under remat: each output, held by its send until its gradient arrives
    for x in xs:
        if checkpoint == "never":
            outs.append(cell(x))
        else:
            with torch.no_grad():
                y = cell(x)  # sent on; the input stays
            sent.append(None if last else y)
            del y
    for m in reversed(range(len(xs))):
        if sent:
            sent[m] = None  # its gradient arrived: the send is complete
        y = outs.pop() if checkpoint == "never" else cell(xs[m])
        if last:
            loss(y).backward()
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
        state, measured = _measure(cell, x, M, checkpoint, k == K - 1, _loss)
        out.append(Check(K, k, checkpoint, M, N, state, plan.totals[k], measured))
        with torch.no_grad():
            x = cell(x)  # the next stage's input
        start += b
    return out


def _measure(
    cell: Cell, x: Any, M: int, checkpoint: str, last: bool, loss: Callable[[Any], torch.Tensor]
) -> tuple[int, int]:
    """(state, measured peak) of one stage: a warm-up step and an RMSProp step, then the profiled
    step (module doc)."""
    params = list(cell.parameters())
    opt = torch.optim.RMSprop(params, lr=1e-6)
    _step(cell, split(x, M), checkpoint, last, loss)  # warm-up: gradients and state exist
    opt.step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(cell, split(x, M), checkpoint, last, loss)
    state = 12 * sum(p.numel() for p in params)
    return state, state + allocator_peak(prof)


def check_stages(
    layers: Sequence[torch.nn.Module],
    meta_layers: Sequence[torch.nn.Module],
    x: Batch,
    loss: Callable[[Any], torch.Tensor],
    balance: list[int],
    M: int,
    checkpoint: str,
) -> list[Check]:
    """Every stage of ``layers`` (real; ``meta_layers`` the same on meta) on the mini-batch ``x``,
    planned (``memory.stages.plan_stages``, schedule gpipe) and measured (module doc); ``loss``:
    the last stage's loss of its output."""
    K, N = len(balance), as_tuple(x)[0].shape[0]

    def sample(n: int, device: str) -> Batch:
        ts = [torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=device) for t in as_tuple(x)]
        return from_tuple(ts, isinstance(x, tuple))

    plan = plan_stages(
        meta_layers,
        sample,
        loss,
        balance,
        K=K,
        M=M,
        micro_batch=N // M,
        schedule="gpipe",
        checkpoint=checkpoint,
        lookahead=1,  # the replay receives each gradient as its backward needs it
    )
    out, start = [], 0
    for k, b in enumerate(balance):
        cell = Cell(layers[start : start + b])
        state, measured = _measure(cell, x, M, checkpoint, k == K - 1, loss)
        out.append(Check(K, k, checkpoint, M, N, state, plan[k].total, measured))
        with torch.no_grad():
            x = cell(x)  # the next stage's input
        start += b
    return out
