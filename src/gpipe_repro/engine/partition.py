"""Cut a flat sequence of L layers into K contiguous cells by per-layer cost (paper §2.2).

The bottleneck cell decides the pipeline's speed, so the partition minimises the largest cell cost
exactly (dynamic programming over prefix sums); among the partitions that reach that optimum it takes
the one with the lowest variance of cell costs, which is the paper's own criterion. Two passes make
the tie-break exact: a lexicographic (max, variance) DP is not, because a prefix with a larger maximum
can still end with a lower variance once the last cell dominates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import ArgumentError

__all__ = [
    "PartitionError",
    "balance_by_cost",
    "balance_by_cells",
    "check_balance",
    "check_k",
    "cell_costs",
]


class PartitionError(ArgumentError):
    """A K, balance or cost list that cannot describe a partition."""


def check_balance(balance: Sequence[int], num_layers: int) -> list[int]:
    """Validate an explicit balance (layers per cell) against the layer count."""
    bal = [int(b) for b in balance]
    if not bal:
        raise PartitionError("balance", bal, "is empty; give the number of layers of each cell")
    if any(b < 1 for b in bal):
        raise PartitionError(
            "balance", bal, f"has a cell with {min(bal)} layers; every cell needs at least 1"
        )
    if sum(bal) != num_layers:
        raise PartitionError(
            "balance", bal, f"sums to {sum(bal)} but the model has {num_layers} layers"
        )
    return bal


def check_k(K: int, num_layers: int) -> None:
    """One-line error unless 1 <= K <= num_layers."""
    if K < 1:
        raise PartitionError("K", K, "is invalid; allowed: an integer >= 1")
    if K > num_layers:
        raise PartitionError(
            "K", K, f"exceeds the model's {num_layers} layers; allowed: 1..{num_layers}"
        )


def cell_costs(costs: Sequence[float], balance: Sequence[int]) -> list[float]:
    """Sum of per-layer costs in each cell."""
    out, start = [], 0
    for b in balance:
        out.append(float(sum(costs[start : start + b])))
        start += b
    return out


# Above this many DP cell updates ((L+1)^2 * K) the two-pass DP is too slow and memory-hungry; the
# bottleneck is then found exactly by bisection with a greedy feasibility test, and ties are broken
# greedily instead of by variance.
DP_LIMIT = 2e8


def _greedy_cells(prefix: np.ndarray, B: float) -> list[int] | None:
    """Fewest contiguous cells with cost <= B (greedy, longest first cell), or None if a layer > B."""
    L = len(prefix) - 1
    bounds, i = [0], 0
    while i < L:
        j = int(np.searchsorted(prefix, prefix[i] + B, side="right")) - 1
        if j <= i:
            return None
        bounds.append(j)
        i = j
    return [bounds[k + 1] - bounds[k] for k in range(len(bounds) - 1)]


def _bisect_partition(prefix: np.ndarray, K: int) -> list[int]:
    lo, hi = 0.0, float(prefix[-1])
    for _ in range(200):
        mid = (lo + hi) / 2
        cells = _greedy_cells(prefix, mid)
        if cells is not None and len(cells) <= K:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    cells = _greedy_cells(prefix, hi)
    assert cells is not None
    while len(cells) < K:  # split the longest cell: the bottleneck cannot grow
        i = max(range(len(cells)), key=lambda k: cells[k])
        cells[i : i + 1] = [cells[i] - cells[i] // 2, cells[i] // 2]
    return cells


def balance_by_cost(costs: Sequence[float], K: int) -> list[int]:
    """Exact min-max contiguous partition of ``costs`` into ``K`` non-empty cells.

    Returns the number of layers per cell. Ties on the bottleneck are broken by the lowest sum of
    squared cell costs (equivalently the lowest variance, the total being fixed); for very long
    sequences (see ``DP_LIMIT``) the bottleneck stays exact and ties are broken greedily.
    """
    L = len(costs)
    check_k(K, L)
    c = np.asarray(costs, dtype=np.float64)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise PartitionError("costs", list(costs), "must be finite and non-negative")
    prefix = np.concatenate([[0.0], np.cumsum(c)])
    if (L + 1) ** 2 * K > DP_LIMIT:
        return _bisect_partition(prefix, K)
    # seg[i, j] = cost of layers i..j-1 (valid for i < j); +inf elsewhere.
    seg = prefix[None, :] - prefix[:, None]
    i_idx = np.arange(L + 1)[:, None]
    j_idx = np.arange(L + 1)[None, :]
    seg = np.where(i_idx < j_idx, seg, np.inf)
    return balance_by_cells(np.broadcast_to(seg, (K, L + 1, L + 1)))


def balance_by_cells(cell_cost: np.ndarray) -> list[int]:
    """Exact min-max contiguous partition on a cost per cell position and layer range.

    ``cell_cost[k, i, j]``: the cost of cell k holding layers i..j-1 (+inf where that cell may not
    hold them, e.g. it would not fit a memory cap), shape (K, L+1, L+1). Minimises the largest cell
    cost, ties broken by the lowest sum of squared cell costs (the two passes of ``balance_by_cost``,
    which calls this with the same cost for every k). Raises ``PartitionError`` when no partition
    has a finite cost."""
    K, L = cell_cost.shape[0], cell_cost.shape[1] - 1
    # Pass 1: best[j] after k cells = minimal bottleneck for the first j layers in k cells.
    best = np.full(L + 1, np.inf)
    best[0] = 0.0
    for k in range(K):
        best = np.min(np.maximum(best[:, None], cell_cost[k]), axis=0)
    bottleneck = best[L]
    if not np.isfinite(bottleneck):
        raise PartitionError("costs", f"{K} cells of {L} layers", "admit no partition")
    tol = 1e-9 * max(1.0, abs(bottleneck))

    # Pass 2: minimal sum of squares with every cell <= bottleneck, keeping back-pointers.
    ss = np.full(L + 1, np.inf)
    ss[0] = 0.0
    parents: list[np.ndarray] = []
    for k in range(K):
        seg = cell_cost[k]
        sq = np.where(seg <= bottleneck + tol, seg, np.inf) ** 2
        cand = ss[:, None] + sq  # (i, j)
        parents.append(np.argmin(cand, axis=0))
        ss = np.min(cand, axis=0)
    if not np.isfinite(ss[L]):  # pragma: no cover - pass 1 guarantees feasibility
        raise PartitionError("costs", f"{K} cells of {L} layers", "admit no partition")
    bounds = [L]
    j = L
    for k in range(K - 1, -1, -1):
        j = int(parents[k][j])
        bounds.append(j)
    bounds.reverse()
    return [bounds[i + 1] - bounds[i] for i in range(K)]
