"""A published device as data, and its per-layer costs: a roofline applied to every counted operation.

``HardwareProfile`` holds what the roofline needs of an accelerator (peak rates, memory, link, the
efficiency curve, ``hardware.HardwareConfig`` documents each field) and the curve's arithmetic: the
fraction of peak an operation reaches grows with its size, given as points (FLOPs of one operation,
efficiency) and interpolated linearly in log(size) between points, clamped outside them; a point at
size 0 is joined to the next point linearly in size (log 0 is undefined). The curve is stated for the
profile's ``precision``; at the other precision an operation is mapped to the size that takes as long
at the curve's peak (size x peak ratio), i.e. efficiency is taken to depend on the operation's
duration at peak (Calculon, see reference/SIMULATION.md).


Per layer and pass (forward, backward) at micro-batch size n (GPipe §3's devices; the per-operation
efficiency follows Calculon, see reference/SIMULATION.md), each operation of ``sim.count`` takes

    t_op = max( flops_op(n) / (peak * efficiency(flops_op(n))),  bytes_op(n) * width / (mem_bw * mem_eff),
                op_min_s )

and a pass is the sum over its operations. ``flops_op(n)`` are a matrix operation's FLOPs at n (zero for
elementwise work), ``bytes_op(n)`` what the operation reads and writes, counted in fp32 and scaled by
``width`` (0.5 when the profile computes in half precision: activations and their gradients move in 16
bits), at the profile's ``mem_efficiency`` of its bandwidth. Applying the efficiency per operation is what makes small micro-batches cost more per sample (an
operation of n x f FLOPs runs further from peak as n shrinks); counting every operation's bytes is what
makes normalisation, activations and pooling cost their memory traffic; ``op_min_s`` (the profile's
shortest kernel: launching one) is what makes a model of many tiny operations cost its count.

- the no-grad forward (first forward of a rematerialised micro-batch) costs the same as the forward;
- zero bubble's B and W (``engine.split``): the input gradient's and the weight gradient's operations,
  counted apart (``count``), each timed the same way;
- ``update_s``: the optimiser step streams ``update_passes`` x parameter bytes through memory
  (RMSProp, the paper's optimiser: read weight, gradient and one slot, write weight and slot = 5);
- the link and the per-action overhead come from the profile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .attention import FUSED_OPS
from .costs import LayerCost, Link
from .count import LayerCount, OpCount
from .interface import PRECISIONS, Anchor, HardwareError

__all__ = [
    "HardwareProfile",
    "REMAT_POLICIES",
    "RooflineCosts",
    "op_seconds",
    "pass_time",
    "recompute_ops",
]


@dataclass(frozen=True)
class HardwareProfile:
    """One published accelerator (a TPU core, a GPU) and the link to its pipeline neighbour. SI units."""

    name: str
    peak_flops_fp32: float  # FLOP/s
    peak_flops_half: float  # FLOP/s, bf16 or fp16 (dense, no sparsity)
    precision: str  # "fp32" | "half": the precision the roofline uses unless told otherwise
    mem_bandwidth_Bps: float  # device memory bandwidth, bytes/s
    memory_bytes: int  # device memory capacity
    link_latency_s: float  # per hop
    link_bandwidth_Bps: float  # per hop, one direction
    link_hops: int  # 2: device -> host -> device without a direct path (Table 3's P100s)
    efficiency_curve: tuple[tuple[float, float], ...]  # (FLOPs of one op, fraction of peak)
    overhead_s: float  # fixed cost per pipeline action (launch, bookkeeping)
    send_occupies_sender: bool = False  # True for gloo on CPU; DMA engines (nccl, ICI) overlap
    op_min_s: float = 0.0  # shortest operation: launching one kernel
    mem_efficiency: float = 1.0  # fraction of the memory bandwidth an operation reaches
    anchors: tuple[Anchor, ...] = ()
    # fraction of peak a fused attention kernel reaches (``sim.attention``); 0: none on this device,
    # such an operation is timed on the matrix curve
    fused_attention_efficiency: float = 0.0
    # data-parallel collectives (``sim.anchors.parallel``): devices sharing the ``link``; beyond
    # them a ring crosses nodes at ``internode_bandwidth_Bps`` (one node's, per direction, its NICs
    # summed) and ``internode_latency_s``; 0 devices: every device on the link
    devices_per_node: int = 0
    internode_bandwidth_Bps: float = 0.0
    internode_latency_s: float = 0.0

    def __post_init__(self) -> None:
        for f in ("peak_flops_fp32", "peak_flops_half", "mem_bandwidth_Bps", "link_bandwidth_Bps"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise HardwareError(f"hardware.{f}={v!r} is invalid; allowed: a number > 0")
        if not 0 < self.mem_efficiency <= 1:
            raise HardwareError(
                f"hardware.mem_efficiency={self.mem_efficiency!r} is invalid; allowed: 0 < x <= 1"
            )
        for f in (
            "link_latency_s",
            "overhead_s",
            "op_min_s",
            "internode_bandwidth_Bps",
            "internode_latency_s",
        ):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise HardwareError(f"hardware.{f}={v!r} is invalid; allowed: a number >= 0")
        if self.precision not in PRECISIONS:
            raise HardwareError(
                f"hardware.precision={self.precision!r} is unknown; allowed: {', '.join(PRECISIONS)}"
            )
        if not 0 <= self.fused_attention_efficiency <= 1:
            raise HardwareError(
                f"hardware.fused_attention_efficiency={self.fused_attention_efficiency!r} is "
                "invalid; allowed: 0 <= x <= 1 (0: no fused attention kernel)"
            )
        if not (isinstance(self.devices_per_node, int) and self.devices_per_node >= 0):
            raise HardwareError(
                f"hardware.devices_per_node={self.devices_per_node!r} is invalid; allowed: an "
                "integer >= 0 (0: every device on the link)"
            )
        if not (isinstance(self.link_hops, int) and self.link_hops >= 1):
            raise HardwareError(
                f"hardware.link_hops={self.link_hops!r} is invalid; allowed: an integer >= 1"
            )
        if not (isinstance(self.memory_bytes, int) and self.memory_bytes > 0):
            raise HardwareError(
                f"hardware.memory_bytes={self.memory_bytes!r} is invalid; allowed: an integer > 0"
            )
        pts = self.efficiency_curve
        ok = (
            len(pts) >= 1
            and all(len(p) == 2 and p[0] >= 0 and 0 < p[1] <= 1 for p in pts)
            and all(a[0] < b[0] for a, b in zip(pts, pts[1:]))
        )
        if not ok:
            raise HardwareError(
                f"hardware.efficiency_curve={pts!r} is invalid; allowed: [{{op_flops, efficiency}}, "
                "...] with op_flops >= 0 strictly increasing and 0 < efficiency <= 1"
            )
        for i, a in enumerate(self.anchors):
            if not (a.model and a.throughput > 0 and a.source):
                raise HardwareError(
                    f"hardware.anchors[{i}]={a.model or '?'}: model, throughput > 0 and source are "
                    "required"
                )

    # ------------------------------------------------------------------ the roofline's numbers
    def peak(self, precision: str | None = None) -> float:
        p = precision or self.precision
        if p not in PRECISIONS:
            raise HardwareError(f"precision={p!r} is unknown; allowed: {', '.join(PRECISIONS)}")
        return self.peak_flops_fp32 if p == "fp32" else self.peak_flops_half

    def efficiency(self, op_flops: float, precision: str | None = None) -> float:
        """Fraction of peak reached by one operation of ``op_flops`` FLOPs (Calculon's curve)."""
        size = op_flops * self.peak(self.precision) / self.peak(precision)
        pts = self.efficiency_curve
        if size <= pts[0][0]:
            return pts[0][1]
        for (s0, e0), (s1, e1) in zip(pts, pts[1:]):
            if size < s1:
                t = size / s1 if s0 == 0 else math.log(size / s0) / math.log(s1 / s0)
                return e0 + t * (e1 - e0)
        return pts[-1][1]

    def op_time(self, op_flops: float, precision: str | None = None, op: str = "") -> float:
        """Seconds one operation of ``op_flops`` FLOPs takes at its efficiency (a fused attention
        kernel, ``op`` in ``attention.FUSED_OPS``: at ``fused_attention_efficiency`` when given)."""
        if op_flops <= 0:
            return 0.0
        if op in FUSED_OPS and self.fused_attention_efficiency > 0:
            return op_flops / (self.peak(precision) * self.fused_attention_efficiency)
        return op_flops / (self.peak(precision) * self.efficiency(op_flops, precision))

    @property
    def link(self) -> Link:
        return Link(self.link_latency_s, self.link_bandwidth_Bps, self.link_hops)


def pass_time(hw: HardwareProfile, ops: Sequence[OpCount], precision: str | None = None) -> float:
    """Seconds of one pass: each operation at the slowest of its compute, memory and launch times."""
    p = precision or hw.precision
    width = 0.5 if p == "half" else 1.0
    total = 0.0
    for o in ops:
        total += op_seconds(hw, o, p, width)
    return total


def op_seconds(hw: HardwareProfile, o: OpCount, precision: str, width: float) -> float:
    """One operation at the slowest of its compute, memory and launch times."""
    compute = hw.op_time(o.flops, precision, o.op) if o.flops > 0 else 0.0
    memory = o.bytes * width / (hw.mem_bandwidth_Bps * hw.mem_efficiency)
    return max(compute, memory, hw.op_min_s)


REMAT_POLICIES = ("full", "selective")


def recompute_ops(ops: Sequence[OpCount], policy: str) -> list[OpCount]:
    """The forward's operations a rematerialising backward runs again. ``full``: all of them;
    ``selective``: torchtitan's per-operation policy (docs/activation_checkpoint, its
    ``_get_custom_policy``): every second matrix operation and every cheap operation again, the
    others and a fused attention kernel kept."""
    if policy not in REMAT_POLICIES:
        raise ValueError(f"policy={policy!r} is unknown; allowed: {', '.join(REMAT_POLICIES)}")
    if policy == "full":
        return list(ops)
    out, matrix = [], 0
    for o in ops:
        if o.op in FUSED_OPS:
            continue
        if o.matrix:
            matrix += 1
            if matrix % 2:
                continue
        out.append(o)
    return out


class RooflineCosts:
    """A ``CostModel`` for a model (its per-layer counts) on a ``HardwareProfile``."""

    def __init__(
        self,
        hw: HardwareProfile,
        counts: Sequence[LayerCount],
        precision: str | None = None,
        update_passes: float = 5.0,
        remat: str = "full",
    ) -> None:
        """``remat``: what a rematerialising backward runs again (``recompute_ops``)."""
        if not counts:
            raise ValueError("counts is empty; allowed: one LayerCount per layer of the model")
        if update_passes < 0:
            raise ValueError(f"update_passes={update_passes} is invalid; allowed: a number >= 0")
        hw.peak(precision)  # validates the precision
        recompute_ops((), remat)  # validates the policy
        self.remat = remat
        self.hw, self.counts = hw, list(counts)
        self.precision = precision or hw.precision
        self.update_passes = update_passes
        self.link: Link = hw.link
        self.overhead_s: float = hw.overhead_s
        self.step_overhead_s: float = 0.0
        self.recompute_overhead_s: float = 0.0

    def layer_cost(self, c: LayerCount) -> LayerCost:
        """One layer's costs at the batch ``c`` was counted (or scaled) at."""
        fwd = pass_time(self.hw, c.fwd, self.precision)
        split = bool(c.bwd_input or c.bwd_weight)  # B and W counted apart (``count``)
        return LayerCost(
            forward_s=fwd,
            forward_nograd_s=fwd,
            backward_s=pass_time(self.hw, c.bwd, self.precision),
            out_bytes=c.out_bytes,
            update_s=self.update_passes * c.param_bytes / self.hw.mem_bandwidth_Bps,
            recompute_s=(
                None
                if self.remat == "full"
                else pass_time(self.hw, recompute_ops(c.fwd, self.remat), self.precision)
            ),
            backward_input_s=pass_time(self.hw, c.bwd_input, self.precision) if split else None,
            backward_weight_s=pass_time(self.hw, c.bwd_weight, self.precision) if split else None,
        )

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch={micro_batch} is invalid; allowed: an integer >= 1")
        return [self.layer_cost(c.at(micro_batch)) for c in self.counts]
