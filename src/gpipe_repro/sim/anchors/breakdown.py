"""Where a simulated anchor's step goes: the roofline's seconds per pass and operator, and attention's share.

An anchor that misses its published throughput says the profile, the model or the run's description
is wrong, not which. The simulator's own breakdown narrows it: every operation of the step's passes
(forward, backward, and the recompute under ``remat``) timed by the roofline (``roofline.op_seconds``)
and summed per pass and aten operator (``mm``, ``bmm``, ``_softmax``...), plus what attention's L x L
memory traffic costs — the step with attention counted as the run computed it against the same step
with attention fused (``sim.attention``): the difference is what the scores' round trips through
memory cost, which a fused kernel does not pay.

    python -m gpipe_repro.sim.anchors a100 --breakdown
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ..interface import Anchor
from ..roofline import HardwareProfile, op_seconds, recompute_ops
from . import counts, simulate_anchor

__all__ = ["Breakdown", "breakdown"]


@dataclass(frozen=True)
class Breakdown:
    """One anchor's simulated step, split."""

    anchor: Anchor
    step_s: float  # the simulated optimiser step
    comm_s: float  # of which: data-parallel communication not hidden
    parts: list[tuple[str, str, float]]  # (pass, operator, seconds), largest first
    fused_step_s: float | None  # the same step with attention fused (None: fused already, images)

    @property
    def compute_s(self) -> float:
        return sum(s for _, _, s in self.parts)

    @property
    def attention_traffic_s(self) -> float | None:
        """What attention's L x L scores in memory cost the step (materialized minus fused)."""
        return None if self.fused_step_s is None else self.step_s - self.fused_step_s


def breakdown(hw: HardwareProfile, a: Anchor) -> Breakdown:
    """``a`` simulated on ``hw`` and split per pass and operator (module doc)."""
    res = simulate_anchor(hw, a)
    dev = replace(
        hw,
        peak_flops_fp32=hw.peak_flops_fp32 * a.peak_scale,
        peak_flops_half=hw.peak_flops_half * a.peak_scale,
        mem_bandwidth_Bps=hw.mem_bandwidth_Bps * a.mem_scale,
    )
    width = 0.5 if a.precision == "half" else 1.0
    cs = counts(a.model, a.seq, a.attention)
    parts: dict[tuple[str, str], float] = defaultdict(float)
    for i, c in enumerate(cs):
        c = c.at(a.batch)
        blocks = a.remat != "never" and 0 < i < len(cs) - 1
        again = recompute_ops(c.fwd, a.remat) if blocks else []
        for name, ops in (("forward", c.fwd), ("backward", c.bwd), ("recompute", again)):
            for o in ops:
                parts[(name, o.op or "?")] += op_seconds(dev, o, a.precision, width)
    scale = a.accumulate  # the breakdown is one micro-step's; the step holds ``accumulate``
    rows = sorted(((p, op, s * scale) for (p, op), s in parts.items()), key=lambda r: -r[2])
    fused = None
    if a.seq > 0 and a.attention != "fused":
        fused = simulate_anchor(hw, replace(a, attention="fused")).step_s
    return Breakdown(a, res.step_s, res.comm_s, rows, fused)
