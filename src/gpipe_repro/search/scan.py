"""The search: every pipeline configuration of a model on D devices under a memory cap, scored.

Searched: K (1..min(D, L)), replicas R (K * R <= D, R dividing the mini-batch), M (the divisors of
the per-replica batch up to ``plan.max_m``; with ``plan.batch_size=fit``, powers of two), the
schedule (gpipe, 1f1b), rematerialisation per stage (never / always for each stage) and the
partition; the micro-batch follows (batch / R / M, or with ``fit`` the largest that fits).

Each (K, R, M, schedule)'s partitions and per-stage remat that fit, and each candidate's lower
bound, come from the search's space (``search.space``, where the method is described). Candidates
are simulated in order of that bound's samples/s; once the bound cannot beat the ``plan.top``-th
best simulated, the rest are skipped: the table's rows are exactly the best. The shown rows are
then planned exactly (``memory.stages.plan_stages``, by ``search.choose``); a row over the cap there
is dropped.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import replace

from .candidate import Candidate, Stats
from .space import Parts, Shape, Space, bound, largest_fit, partitions_many

__all__ = ["search", "enumerate_candidates", "SEARCHED"]

# the schedules searched, with their cells per stage (``pipeline.virtual_stages``): the paper's
# fill-drain, 1F1B, zero bubble (one cell and two per stage) and interleaved 1F1B (two and four)
SEARCHED: tuple[tuple[str, int], ...] = (
    ("gpipe", 1),
    ("1f1b", 1),
    ("zb-h1", 1),
    ("interleaved", 2),
    ("interleaved", 4),
    ("zb-h1", 2),
)


def _divisors(n: int, most: int) -> list[int]:
    return [m for m in range(1, min(n, most) + 1) if n % m == 0]


def _searched(K: int, M: int, L: int) -> list[tuple[str, int]]:
    """The (schedule, cells per stage) pairs worth searching at K stages, M micro-batches, L
    layers: at M = 1 the schedules do the same work in the same order (gpipe alone); at K = 1
    gpipe and 1f1b do the same work but 1f1b holds one micro-batch instead of M (zb-h1 and
    interleaved add nothing there); several cells per stage need M a multiple of K and a layer
    per cell."""
    if M == 1:
        return [SEARCHED[0]]
    if K == 1:
        return [(s, v) for s, v in SEARCHED if v == 1 and s in ("gpipe", "1f1b")]
    return [(s, v) for s, v in SEARCHED if v == 1 or (M % K == 0 and K * v <= L)]


def enumerate_candidates(
    space: Space, devices: int, batch: int | None, max_m: int, stats: Stats
) -> list[Candidate]:
    """Every (K, R, M, schedule, remat, partition) that fits the cap (``batch`` None: fit); the
    partitions of one K are solved together (``partitions_many``)."""
    L = len(space.layers)
    out: list[Candidate] = []
    for K in range(1, min(devices, L) + 1):
        configs: list[tuple[int, int, str, int, int, Shape | None]] = []
        for R in range(1, devices // K + 1):
            if batch is not None and batch % R:
                continue
            per = None if batch is None else batch // R
            ms = (
                [m for m in (2**e for e in range(20)) if m <= max_m]
                if per is None
                else _divisors(per // space.unit if space.unit > 1 else per, max_m)
            )
            for M in ms:
                for schedule, v in _searched(K, M, L):
                    if per is None:
                        n = largest_fit(space, K, M, schedule, v)
                        mb = n * space.unit
                    else:
                        mb = per // M
                        n = max(1, mb // space.unit)
                    shape = Shape.of(K, M, schedule, n, mb, v) if n else None
                    configs.append((R, M, schedule, v, mb, shape))
        # the partitions of one cell count are solved together
        solved: dict[Shape, Parts] = {}
        for cells in sorted({c[5].K for c in configs if c[5] is not None}):
            group = [c[5] for c in configs if c[5] is not None and c[5].K == cells]
            solved.update(zip(group, partitions_many(space, group), strict=True))
        for R, M, schedule, v, mb, shape in configs:
            parts = solved[shape] if shape is not None else []
            stats.enumerated += 3
            stats.over_cap += 3 - len(parts)
            for bal, modes in parts:
                per_stage = modes[:K]
                if v > 1 and any(modes[s] != modes[s % K] for s in range(len(modes))):
                    continue  # one remat mode per stage: its cells share it
                c = Candidate(
                    K, R, M, schedule, per_stage, bal, mb, mb * M * R, 0.0, virtual_stages=v
                )
                out.append(replace(c, bound_s=bound(space, c)))
    return out


def search(
    space: Space,
    devices: int,
    batch: int | None,
    max_m: int,
    top: int,
    simulate: Callable[[Candidate], tuple[float, float]],
) -> tuple[list[Candidate], Stats]:
    """The ``top`` best candidates by simulated samples/s (``simulate(c)``: step seconds, bubble)."""
    stats = Stats()
    t0 = time.perf_counter()
    cands = enumerate_candidates(space, devices, batch, max_m, stats)
    cands.sort(key=lambda c: -c.samples_per_s)
    best: list[tuple[float, int, Candidate]] = []  # a min-heap of the top samples/s
    for i, c in enumerate(cands):
        if len(best) >= top and c.samples_per_s <= best[0][0]:
            stats.pruned += len(cands) - i  # sorted by the bound: none after this can enter
            break
        step, bubble = simulate(c)
        stats.simulated += 1
        done = Candidate(**{**c.__dict__, "step_s": step, "bubble": bubble})
        heapq.heappush(best, (done.samples_per_s, i, done))
        if len(best) > top:
            heapq.heappop(best)
    stats.seconds = time.perf_counter() - t0
    ranked = [c for _, _, c in sorted(best, key=lambda t: (-t[0], t[1]))]
    return ranked, stats
