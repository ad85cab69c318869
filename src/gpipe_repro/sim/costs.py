"""What the simulator needs to know about a model on a device: per-layer costs and the link.

Costs come from two sources that produce the same records (see ARCHITECTURE.md, "Backends"):
measured on the present device (``sim.measured``) or derived from a published hardware profile by a
roofline (``sim.roofline``). Both are functions of the micro-batch size, because per-sample cost is
not proportional to the micro-batch size (weights are re-read per micro-batch; small operations
run far from peak).

Units: seconds and bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["LayerCost", "StageCost", "Link", "CostModel", "CachedCosts", "stage_costs"]


@dataclass(frozen=True)
class LayerCost:
    """One layer, one micro-batch of a given size."""

    forward_s: float  # graph-building forward (also the recompute under remat)
    forward_nograd_s: float  # forward under no_grad: the first pass of a rematerialised micro-batch
    backward_s: float  # backward of that micro-batch through this layer (and releasing its graph)
    out_bytes: int  # bytes of everything the layer returns (a tuple's tensors summed): the boundary
    # bytes when a cut follows this layer; its gradient going back has the same size
    # once per mini-batch, after the last action: the optimiser step for this layer's parameters
    # (and, measured, folding its BatchNorm statistics)
    update_s: float = 0.0
    # the forward again under remat, None: ``forward_s`` (measured: the stream's recompute, which
    # skips what only a first forward does — BatchNorm's statistics of the micro-batch)
    recompute_s: float | None = None
    # the backward split in two (``engine.split``, zb-h1): B, the input gradient, and W, the weight
    # gradient, as profiled (measured apart, or from the input- and weight-gradient operations
    # counted apart); None: not profiled, ``split`` halves ``backward_s``
    backward_input_s: float | None = None
    backward_weight_s: float | None = None

    @property
    def recompute(self) -> float:
        return self.forward_s if self.recompute_s is None else self.recompute_s

    @property
    def split(self) -> tuple[float, float]:
        """(B, W) seconds: the profiled ones, or half the backward each where none was profiled."""
        return _split(self.backward_s, self.backward_input_s, self.backward_weight_s)


def _split(backward: float, b: float | None, w: float | None) -> tuple[float, float]:
    if b is None or w is None:
        return backward / 2, backward / 2
    return b, w


@dataclass(frozen=True)
class StageCost:
    """One pipeline stage (a cell: consecutive layers), one micro-batch."""

    forward_s: float
    forward_nograd_s: float
    backward_s: float
    out_bytes: int  # activations sent to the next stage per micro-batch (0 on the last stage)
    update_s: float = 0.0
    recompute_s: float | None = None  # as ``LayerCost.recompute_s``
    backward_input_s: float | None = None  # as ``LayerCost``'s
    backward_weight_s: float | None = None

    @property
    def recompute(self) -> float:
        return self.forward_s if self.recompute_s is None else self.recompute_s

    @property
    def split(self) -> tuple[float, float]:
        """(B, W) seconds of the split backward (``LayerCost.split``)."""
        return _split(self.backward_s, self.backward_input_s, self.backward_weight_s)


@dataclass(frozen=True)
class Link:
    """A point-to-point link between neighbouring stages, one direction.

    A transfer of ``n`` bytes takes ``hops * (latency_s + n / bandwidth_Bps)``; ``hops`` = 2 models
    device -> host -> device copies over PCIe without a direct path (the paper's Table 3).
    ``send_call_s`` / ``recv_call_s``: what posting one send / one receive costs the calling rank's
    thread when the backend then moves the data in the background (gloo's ``isend`` returns at once and
    its own threads copy; measured in ``measured.link``). ``wake``: points (seconds a receiver was
    blocked, extra seconds before it sees the message), beyond ``latency_s`` (which a ping-pong
    measures with its receiver blocked only a round trip); none: no extra delay."""

    latency_s: float
    bandwidth_Bps: float
    hops: int = 1
    send_call_s: float = 0.0
    recv_call_s: float = 0.0
    wake: tuple[tuple[float, float], ...] = ()
    # the ranks of one run share ``cores`` cores of one host (0: each rank has its own device):
    # where they fill them, a receiver has its message no earlier than ``shared_s`` after posting
    # the receive (``simulate``)
    shared_s: float = 0.0
    cores: int = 0

    def time(self, nbytes: float) -> float:
        return self.hops * (self.latency_s + nbytes / self.bandwidth_Bps)

    def allreduce_s(self, nbytes: int, replicas: int) -> float:
        """A ring all-reduce of ``nbytes`` over ``replicas`` devices joined by this link: 2(R-1)
        steps, each moving nbytes/R over every link of the ring at once, so 2(R-1)/R x nbytes over
        the bandwidth plus 2(R-1) latencies (each step ``time`` of its share: hops included);
        0 for one replica (nothing to reduce)."""
        if replicas < 1:
            raise ValueError(f"replicas={replicas} is invalid; allowed: an integer >= 1")
        if replicas == 1:
            return 0.0
        return 2 * (replicas - 1) * self.time(nbytes / replicas)

    def wake_s(self, blocked_s: float) -> float:
        """Extra delay for a receiver blocked ``blocked_s`` seconds: linear between the measured
        points (from no delay at 0), the last point's delay beyond them."""
        x0, y0 = 0.0, 0.0
        for x1, y1 in self.wake:
            if blocked_s <= x1:
                return y0 + (y1 - y0) * (blocked_s - x0) / (x1 - x0) if x1 > x0 else y1
            x0, y0 = x1, y1
        return y0


class CostModel(Protocol):
    """Per-layer costs at any micro-batch size, the link, and the fixed per-micro-batch overhead."""

    link: Link
    overhead_s: float  # fixed cost per micro-batch and action on every stage (launch, bookkeeping)
    step_overhead_s: float  # fixed cost per step on every stage (the loss sum, the final waits)

    @property
    def recompute_overhead_s(self) -> float:
        """Fixed cost of a recompute beyond its forward (restoring the RNG state)."""
        ...

    def layer_costs(self, micro_batch: int) -> list[LayerCost]: ...


class CachedCosts:
    """A cost model whose per-layer costs are computed once per micro-batch (a search asks the
    same few sizes thousands of times)."""

    def __init__(self, costs: CostModel) -> None:
        self.inner = costs
        self.link = costs.link
        self.overhead_s = costs.overhead_s
        self.step_overhead_s = costs.step_overhead_s
        self._memo: dict[int, list[LayerCost]] = {}

    @property
    def recompute_overhead_s(self) -> float:
        return self.inner.recompute_overhead_s

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        if micro_batch not in self._memo:
            self._memo[micro_batch] = self.inner.layer_costs(micro_batch)
        return self._memo[micro_batch]


def stage_costs(layers: Sequence[LayerCost], balance: Sequence[int]) -> list[StageCost]:
    """Sum per-layer costs over the cells of ``balance`` (one per model cell: K·v of them with v
    cells per stage); a cell sends its last layer's output."""
    out: list[StageCost] = []
    start = 0
    for k, n in enumerate(balance):
        cell = layers[start : start + n]
        last = k == len(balance) - 1
        splits = [c.split for c in cell]
        out.append(
            StageCost(
                forward_s=sum(c.forward_s for c in cell),
                forward_nograd_s=sum(c.forward_nograd_s for c in cell),
                backward_s=sum(c.backward_s for c in cell),
                out_bytes=0 if last else cell[-1].out_bytes,
                update_s=sum(c.update_s for c in cell),
                recompute_s=sum(c.recompute for c in cell),
                backward_input_s=sum(b for b, _ in splits),
                backward_weight_s=sum(w for _, w in splits),
            )
        )
        start += n
    return out
