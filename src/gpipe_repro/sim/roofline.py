"""Per-layer costs on a published device: a roofline on the counted FLOPs and bytes.

Per layer and pass (forward, backward) at micro-batch size n (GPipe §3's devices, Calculon's
efficiency model, see reference/SIMULATION.md):

    time = max( sum over ops  flops_op(n) / (peak * efficiency(flops_op(n))),  bytes(n) / mem_bw )

with ``flops_op(n)`` each matrix operation's FLOPs scaled from the counted batch to n (exact for the
paper's models, see ``sim.count``) and ``bytes(n)`` from ``LayerCount`` (parameters do not scale,
activations do). Applying the efficiency per operation, not per layer, is what makes small
micro-batches cost more per sample: an op of n x f FLOPs runs further from peak as n shrinks.

- the no-grad forward (first forward of a rematerialised micro-batch) costs the same as the forward;
- ``update_s``: the optimiser step streams ``update_passes`` x parameter bytes through memory
  (RMSProp, the paper's optimiser: read weight, gradient and one slot, write weight and slot = 5);
- the link and the per-action overhead come from the profile.
"""

from __future__ import annotations

from collections.abc import Sequence

from .costs import LayerCost, Link
from .count import LayerCount
from .hardware import HardwareProfile

__all__ = ["RooflineCosts", "pass_time"]


def pass_time(
    hw: HardwareProfile, ops: Sequence[float], nbytes: float, precision: str | None = None
) -> float:
    """Seconds of one pass: the slower of compute (per-op efficiency) and memory traffic."""
    compute = sum(hw.op_time(f, precision) for f in ops)
    return max(compute, nbytes / hw.mem_bandwidth_Bps)


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

    def layer_cost(self, c: LayerCount) -> LayerCost:
        """One layer's costs at the batch ``c`` was counted (or scaled) at."""
        fwd = pass_time(self.hw, c.fwd_ops, c.fwd_bytes, self.precision)
        return LayerCost(
            forward_s=fwd,
            forward_nograd_s=fwd,
            backward_s=pass_time(self.hw, c.bwd_ops, c.bwd_bytes, self.precision),
            out_bytes=c.out_bytes,
            update_s=self.update_passes * c.param_bytes / self.hw.mem_bandwidth_Bps,
        )

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        if micro_batch < 1:
            raise ValueError(f"micro_batch={micro_batch} is invalid; allowed: an integer >= 1")
        return [self.layer_cost(c.at(micro_batch)) for c in self.counts]
