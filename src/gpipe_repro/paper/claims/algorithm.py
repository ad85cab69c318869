"""The claims of the algorithm (GPipe §2.2-2.3): the synchronous update and the bubble, judged from
the demo's sweep (``reports/demo/results.csv``, the engine run for real), and the partition, from
Table 2's partition study (``reports/table2/sensitivity.csv``).
"""

from __future__ import annotations

from pathlib import Path

from ..sweep import SweepRow
from ..verdict import NOT, TOLERANCE, Finding, exact, reproduced
from . import Missing, results
from .throughput import studies

SHARE = 0.85  # of the bubble's bound: the engine benchmark's goal at M = 8 (bench/engine.py)


def demo_rows(folder: Path) -> list[SweepRow]:
    return [r for r in results(folder, SweepRow) if r.status == "ok" and r.K and r.M]


def synchronous(folder: Path) -> Finding:
    """Rule *exact*: every M's final losses bit-equal across K."""
    rs = demo_rows(folder)
    Ms = sorted({r.M for r in rs if r.M})
    Ks = sorted({r.K for r in rs if r.K})
    if len(Ks) < 2:
        raise Missing("the sweep has one K")
    differ = [M for M in Ms if len({r.final_loss for r in rs if r.M == M}) > 1]
    ours = (
        f"final losses bit-equal across K = {', '.join(map(str, Ks))} at M = "
        f"{', '.join(map(str, Ms))}"
        if not differ
        else f"final losses differ across K at M = {', '.join(map(str, differ))}"
    )
    return Finding(exact(not differ), ours, "measured: the engine ran each (K, M) for real")


def bubble(folder: Path) -> Finding:
    """Rule *threshold*: at the largest M >= 4K, the speed-up over K = 1 at the same M is at least
    ``SHARE`` of K·M/(M+K-1)."""
    rs = [r for r in demo_rows(folder) if r.K and r.K > 1 and r.speedup_vs_k1 and r.speedup_ideal]
    deep = [r for r in rs if (r.M or 0) >= 4 * (r.K or 0)]
    if not deep:
        raise Missing("no K > 1 row with M >= 4K and a K = 1 row at its M")
    r = max(deep, key=lambda r: (r.K, r.M))
    share = (r.speedup_vs_k1 or 0) / (r.speedup_ideal or 1)
    ours = (
        f"K = {r.K}, M = {r.M}: {r.speedup_vs_k1:.2f}× K = 1, {share:.1%} of K·M/(M+K−1) = "
        f"{r.speedup_ideal:.2f}; measured idle share {r.bubble_fraction:.3f} against "
        f"(K−1)/(M+K−1) = {r.bubble_ideal:.3f}"
    )
    ok = share >= SHARE
    reason = (
        f"criterion ≥ {SHARE:.0%} of the bound (measured on {r.K} ranks of this CPU; deeper "
        "pipelines only simulated: Table 2)"
    )
    return Finding(reproduced("measured") if ok else NOT, ours, reason)


def partition(folder: Path) -> Finding:
    """Rule *exceeds*: at the study's largest (K, M), the partition by measured time beats the
    cruder ones (equal layers, by parameters) by more than the tolerance."""
    rs = studies(folder, "partition")
    if not rs:
        raise Missing("no partition study in sensitivity.csv")
    K, M = max((r.K, r.M) for r in rs)
    at = [r for r in rs if (r.K, r.M) == (K, M)]
    ours_row = next(r for r in at if r.variant.startswith("by time"))
    others = [r for r in at if r is not ours_row]
    best = max(others, key=lambda r: r.throughput)
    gain = ours_row.throughput / best.throughput - 1
    ours = (
        f"K = {K}, M = {M}: by time {ours_row.normalized:.2f} (slowest/mean "
        f"{ours_row.imbalance:.2f}) against {best.variant} {best.normalized:.2f} (slowest/mean "
        f"{best.imbalance:.2f}): {gain:+.0%}"
    )
    ok = gain > TOLERANCE
    return Finding(reproduced("simulated") if ok else NOT, ours,
                   f"{ours_row.model}, simulated on the sweeps' profile, timing only")  # fmt: skip
