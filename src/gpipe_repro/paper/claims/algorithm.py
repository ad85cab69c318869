"""The claims of the algorithm (GPipe §2.2-2.3): the synchronous update and the bubble, judged from
the demo's sweep (``reports/demo/results.csv``, the engine run for real), and the partition, from
Table 2's partition study (``reports/table2/sensitivity.csv``). The findings are worded by
``templates/claims_algorithm.md.j2``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..sweep_rows import SweepRow
from ..verdict import NOT, TOLERANCE, Finding, exact, reproduced
from . import Missing, results, worded
from .throughput import studies

SHARE = 0.85  # of the bubble's bound: the engine benchmark's goal at M = 8 (bench/engine.py)
found = partial(worded, "claims_algorithm")


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
    return found("synchronous", exact(not differ), differ=differ, Ks=Ks, Ms=Ms)


def bubble(folder: Path) -> Finding:
    """Rule *threshold*: at the largest M >= 4K, the speed-up over K = 1 at the same M is at least
    ``SHARE`` of K·M/(M+K-1)."""
    rs = [r for r in demo_rows(folder) if r.K and r.K > 1 and r.speedup_vs_k1 and r.speedup_ideal]
    deep = [r for r in rs if (r.M or 0) >= 4 * (r.K or 0)]
    if not deep:
        raise Missing("no K > 1 row with M >= 4K and a K = 1 row at its M")
    r = max(deep, key=lambda r: (r.K, r.M))
    share = (r.speedup_vs_k1 or 0) / (r.speedup_ideal or 1)
    verdict = reproduced("measured") if share >= SHARE else NOT
    return found("bubble", verdict, r=r, share=share, least=SHARE)


def partition(folder: Path) -> Finding:
    """Rule *exceeds*: at the study's largest (K, M), the partition by measured time beats the
    cruder ones (equal layers, by parameters) by more than the tolerance."""
    rs = studies(folder, "partition")
    if not rs:
        raise Missing("no partition study in sensitivity.csv")
    K, M = max((r.K, r.M) for r in rs)
    at = [r for r in rs if (r.K, r.M) == (K, M)]
    ours = next(r for r in at if r.variant.startswith("by time"))
    best = max((r for r in at if r is not ours), key=lambda r: r.throughput)
    gain = ours.throughput / best.throughput - 1
    verdict = reproduced("simulated") if gain > TOLERANCE else NOT
    return found("partition", verdict, K=K, M=M, ours=ours, best=best, gain=gain)
