"""A published multi-device run's data-parallel communication, as it ran: what it adds to a device's step.

An anchor run on R devices (``Anchor.devices``) trains one replica per device and combines their
gradients; how it does so (``Anchor.parallel``) decides what each device's step pays beyond its
compute:

- ``allreduce``: every gradient all-reduced once the backward has ended, nothing overlapped (an XLA
  cross-replica sum after the step's gradients; GPipe §2.2's synchronous update);
- ``ddp``: PyTorch DDP — each layer's gradients all-reduced as soon as its backward has produced
  them, while the backward of the layers before it runs; only what is left when the backward ends is
  paid;
- ``zero1``: ``ddp``, then each device runs the optimiser on its 1/R of the parameters and the updated
  parameters are all-gathered (ZeRO stage 1, e.g. flash-attention's ``DDPStrategyZero1``);
- ``fsdp``: PyTorch FSDP2 as torchtitan runs it — each layer's parameters all-gathered (16-bit)
  before its forward and again before its backward (but the last layer's, kept from its forward),
  prefetched one layer ahead, its gradients reduce-scattered (32-bit) after its backward; the
  optimiser runs on the device's 1/R shard.

Collectives run one at a time, in issue order, on a ring of the R devices (``ring_link``): over the
profile's ``link`` while R fits one node (``devices_per_node``), else at the slower of the link and
the node's inter-node bandwidth. An all-reduce of n bytes takes 2(R-1) steps moving n/R each, an
all-gather or reduce-scatter R-1 (``Link.time``: latency + bytes / bandwidth per hop). Gradients
and the all-reduced or reduce-scattered figures are 32-bit (fp32 master weights, as AMP keeps them);
FSDP's gathered parameters are 16-bit (its ``param_dtype``).

With gradient accumulation (``Anchor.accumulate`` = A micro-steps per optimiser step) ``ddp``,
``zero1`` and ``allreduce`` communicate once per A micro-steps (DDP's ``no_sync``); ``fsdp`` gathers
and reduce-scatters on every micro-step.

``exposed_s`` returns the seconds the communication adds to a device's step, from per-layer compute
times: the timeline with it minus the timeline without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..costs import LayerCost, Link
from ..interface import ANCHOR_PARALLEL as PARALLEL
from ..roofline import HardwareProfile

__all__ = ["PARALLEL", "Exposed", "exposed_s", "ring_link"]


def ring_link(hw: HardwareProfile, R: int) -> Link:
    """The link a ring of ``R`` devices runs at: the profile's within a node, across nodes the
    slower of it and the node's inter-node bandwidth (its latency the larger)."""
    link = hw.link
    if hw.devices_per_node == 0 or R <= hw.devices_per_node:
        return link
    if hw.internode_bandwidth_Bps <= 0:
        raise ValueError(
            f"hardware={hw.name}: a ring of {R} devices crosses nodes of {hw.devices_per_node}, "
            "but the profile has no internode_bandwidth_Bps; allowed: at most "
            f"{hw.devices_per_node} devices, or an inter-node bandwidth in the profile"
        )
    return Link(
        max(link.latency_s, hw.internode_latency_s),
        min(link.bandwidth_Bps / link.hops, hw.internode_bandwidth_Bps),
    )


def _allreduce(link: Link, nbytes: float, R: int) -> float:
    return 2 * (R - 1) * link.time(nbytes / R)


def _gather(link: Link, nbytes: float, R: int) -> float:
    """An all-gather (or a reduce-scatter) of ``nbytes`` in all over ``R`` devices."""
    return (R - 1) * link.time(nbytes / R)


@dataclass(frozen=True)
class Exposed:
    """What data parallelism adds to one device's optimiser step (seconds)."""

    comm_s: float  # the collectives' time the compute did not hide
    update_s: float  # the optimiser step as run (1/R of it when sharded)
    busy_s: float  # the collectives' total time (hidden or not), for the report


def _queue(free: float, issued: float, seconds: float) -> tuple[float, float]:
    """A collective issued at ``issued`` on a link free at ``free``: (its end, the link's next free)."""
    end = max(free, issued) + seconds
    return end, end


def exposed_s(
    layers: Sequence[LayerCost],
    params: Sequence[int],
    hw: HardwareProfile,
    R: int,
    parallel: str,
    remat: bool,
    accumulate: int = 1,
) -> Exposed:
    """The communication ``parallel`` adds to one optimiser step on ``R`` devices (module doc), for
    per-layer costs ``layers`` of one micro-step (``remat``: each backward first recomputes) and
    ``params`` parameters per layer. The update is the layers' ``update_s`` (a 1/R shard of it under
    ``zero1`` and ``fsdp``)."""
    if parallel not in PARALLEL:
        raise ValueError(f"parallel={parallel!r} is unknown; allowed: {', '.join(PARALLEL)}")
    if len(params) != len(layers) or R < 1 or accumulate < 1:
        raise ValueError(
            f"params ({len(params)}), layers ({len(layers)}), R={R}, accumulate={accumulate} are "
            "invalid; allowed: one parameter count per layer, R >= 1, accumulate >= 1"
        )
    update = sum(c.update_s for c in layers)
    if R == 1:
        return Exposed(0.0, update, 0.0)
    link = ring_link(hw, R)
    back = [c.backward_s + (c.recompute if remat else 0.0) for c in layers]
    grads = [4.0 * p for p in params]  # fp32 gradients
    if parallel == "allreduce":
        t = _allreduce(link, sum(grads), R)
        return Exposed(t, update, t)
    if parallel in ("ddp", "zero1"):
        now, free, busy = 0.0, 0.0, 0.0
        end = 0.0
        for i in reversed(range(len(layers))):  # the backward: last layer first
            now += back[i]
            if grads[i]:
                t = _allreduce(link, grads[i], R)
                end, free = _queue(free, now, t)
                busy += t
        comm = max(0.0, end - now)
        if parallel == "zero1":
            gather = _gather(link, sum(grads), R)  # the updated fp32 parameters, gathered
            return Exposed(comm + gather, update / R, busy + gather)
        return Exposed(comm, update, busy)
    return _fsdp(layers, back, params, link, R, accumulate, update)


def _fsdp(
    layers: Sequence[LayerCost],
    back: list[float],
    params: Sequence[int],
    link: Link,
    R: int,
    accumulate: int,
    update: float,
) -> Exposed:
    """FSDP2's per-layer gathers and reduce-scatters against the layers' compute, each micro-step."""
    L = len(layers)
    gather = [_gather(link, 2.0 * p, R) for p in params]  # 16-bit parameters
    scatter = [_gather(link, 4.0 * p, R) for p in params]  # 32-bit gradients
    now = free = 0.0
    ends: list[float] = [0.0] * L
    end, free = _queue(free, 0.0, gather[0])
    ends[0] = end
    for i in range(L):  # forward: layer i+1's gather issued as layer i starts
        start = max(now, ends[i])
        if i + 1 < L:
            ends[i + 1], free = _queue(free, start, gather[i + 1])
        now = start + layers[i].forward_s
    # the last layer stays gathered for its backward (torchtitan: no reshard after its forward)
    last = 0.0
    for i in reversed(range(L)):  # backward: layer i-1's gather as layer i starts
        start = max(now, ends[i])
        if i > 0:
            ends[i - 1], free = _queue(free, start, gather[i - 1])
        now = start + back[i]
        last, free = _queue(free, now, scatter[i])
    pure = sum(c.forward_s for c in layers) + sum(back)
    comm = max(now, last) - pure
    busy = sum(gather) * 2 - gather[L - 1] + sum(scatter)
    return Exposed(comm * accumulate, update / R, busy * accumulate)
