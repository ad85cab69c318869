"""The ASCII picture of a schedule: the paper's Fig. 2(c) in text, drawn from ``simulate``.

Unit costs (forward 1, backward 2, free transfers, no remat) make one column per time unit, so the
picture shows the fill, the steady state and the drain of the engine's own action lists. Tests
compare it with a literal drawing (torchgpipe's style).
"""

from __future__ import annotations

from .costs import Link, StageCost
from .simulate import simulate

__all__ = ["render", "unit_stages"]

_FREE = Link(latency_s=0.0, bandwidth_Bps=float("inf"))


def unit_stages(K: int, f: float = 1.0, b: float = 2.0) -> list[StageCost]:
    """K identical stages with forward ``f`` and backward ``b`` and nothing to send."""
    return [StageCost(forward_s=f, forward_nograd_s=f, backward_s=b, out_bytes=0) for _ in range(K)]


def render(schedule: str, K: int, M: int) -> str:
    """One row per stage, one 4-character column per time unit (F = 1, B = 2); idle shows '.'."""
    result = simulate(K, M, schedule, "never", unit_stages(K), _FREE)
    computed = [e for e in result.events if e.action in ("forward", "backward")]
    width = round(max(e.end for e in computed))
    rows = [["  . "] * width for _ in range(K)]
    for e in computed:
        label = f"{'F' if e.action == 'forward' else 'B'}{e.mb:<3d}"[:4]
        for t in range(round(e.start), round(e.end)):
            rows[e.stage][t] = label
    return "\n".join(f"stage {k}: " + "".join(row).rstrip() for k, row in enumerate(rows))
