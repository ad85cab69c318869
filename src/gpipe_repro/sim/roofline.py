"""Per-layer costs on a published device: a roofline applied to every counted operation.

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
- ``update_s``: the optimiser step streams ``update_passes`` x parameter bytes through memory
  (RMSProp, the paper's optimiser: read weight, gradient and one slot, write weight and slot = 5);
- the link and the per-action overhead come from the profile.
"""

from __future__ import annotations

from collections.abc import Sequence

from .costs import LayerCost, Link
from .count import LayerCount, OpCount
from .hardware import HardwareProfile

__all__ = ["RooflineCosts", "pass_time"]


def pass_time(hw: HardwareProfile, ops: Sequence[OpCount], precision: str | None = None) -> float:
    """Seconds of one pass: each operation at the slowest of its compute, memory and launch times."""
    p = precision or hw.precision
    width = 0.5 if p == "half" else 1.0
    total = 0.0
    for o in ops:
        compute = hw.op_time(o.flops, p) if o.flops > 0 else 0.0
        memory = o.bytes * width / (hw.mem_bandwidth_Bps * hw.mem_efficiency)
        total += max(compute, memory, hw.op_min_s)
    return total


class RooflineCosts:
    """A ``CostModel`` for a model (its per-layer counts) on a ``HardwareProfile``."""

    def __init__(
        self,
        hw: HardwareProfile,
        counts: Sequence[LayerCount],
        precision: str | None = None,
        update_passes: float = 5.0,
    ) -> None:
        if not counts:
            raise ValueError("counts is empty; allowed: one LayerCount per layer of the model")
        if update_passes < 0:
            raise ValueError(f"update_passes={update_passes} is invalid; allowed: a number >= 0")
        hw.peak(precision)  # validates the precision
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
        return LayerCost(
            forward_s=fwd,
            forward_nograd_s=fwd,
            backward_s=pass_time(self.hw, c.bwd, self.precision),
            out_bytes=c.out_bytes,
            update_s=self.update_passes * c.param_bytes / self.hw.mem_bandwidth_Bps,
        )

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch={micro_batch} is invalid; allowed: an integer >= 1")
        return [self.layer_cost(c.at(micro_batch)) for c in self.counts]
