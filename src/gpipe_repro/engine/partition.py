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
    "balance_by_cells_many",
    "balance_by_bands",
    "cell_band",
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
    hold them, e.g. it would not fit a memory cap), shape (K, L+1, L+1); entries with i >= j are
    never read (a cell holds at least one layer). Minimises the largest cell cost, ties broken by
    the lowest sum of squared cell costs (the two passes of ``balance_by_cost``, which calls this
    with the same cost for every k). Raises ``PartitionError`` when no partition has a finite cost."""
    K, L = cell_cost.shape[0], cell_cost.shape[1] - 1
    (bal,) = balance_by_cells_many(cell_cost[None])
    if bal is None:
        raise PartitionError("costs", f"{K} cells of {L} layers", "admit no partition")
    return bal


def cell_band(cost: np.ndarray, k: int, K: int) -> np.ndarray:
    """The band of ``cost[..., i, j]`` (shape (..., L+1, L+1)) that cell k of K can hold: starts
    k..L-K+k (rows), ends k+1..L-K+k+1 (columns), a view of shape (..., W, W), W = L-K+1."""
    W = cost.shape[-1] - K
    return cost[..., k : k + W, k + 1 : k + 1 + W]


def balance_by_cells_many(cell_cost: np.ndarray) -> list[list[int] | None]:
    """``balance_by_cells`` of C problems at once, shape (C, K, L+1, L+1); None where a problem
    admits no partition (``balance_by_bands`` on each cell's band)."""
    K = cell_cost.shape[1]
    if K > cell_cost.shape[2] - 1:
        return [None] * cell_cost.shape[0]
    W = cell_cost.shape[2] - K
    upper = np.triu(np.ones((W, W), dtype=bool))  # a <= b: start k + a before end k + 1 + b
    return balance_by_bands(
        [np.where(upper, cell_band(cell_cost[:, k], k, K), np.inf) for k in range(K)]
    )


def balance_by_bands(bands: Sequence[np.ndarray]) -> list[list[int] | None]:
    """The min-max partitions of C problems given only what a partition can use: ``bands[k]``,
    shape (C, W, W), is cell k's cost of layers k+a..k+b (``cell_band``; W = L-K+1; +inf where
    a > b: no empty cell). None where a problem admits no partition.

    Both passes run on all C problems together (one numpy operation per cell position for all of
    them) and only on the band of layer ranges a cell can hold in a partition of L layers into K
    non-empty cells. Every element computed is the one the full (L+1) x (L+1) recurrence of
    ``balance_by_cells`` computes, so the result is the same partition, ties included (the first
    minimum in layer order)."""
    K = len(bands)
    C, W = bands[0].shape[0], bands[0].shape[-1]
    L = W + K - 1
    # Pass 1: best[:, a] = minimal bottleneck of the first k + a layers in k cells.
    best = np.full((C, W), np.inf)
    best[:, 0] = 0.0
    for k in range(K):
        best = np.min(np.maximum(best[:, :, None], bands[k]), axis=1)
    bottleneck = best[:, W - 1]
    tol = 1e-9 * np.maximum(1.0, np.abs(bottleneck))

    # Pass 2: minimal sum of squares with every cell <= bottleneck, keeping back-pointers.
    ss = np.full((C, W), np.inf)
    ss[:, 0] = 0.0
    limit = (bottleneck + tol)[:, None, None]
    parents: list[np.ndarray] = []
    for k in range(K):
        cand = ss[:, :, None] + np.where(bands[k] <= limit, bands[k], np.inf) ** 2
        parents.append(np.argmin(cand, axis=1))
        ss = np.min(cand, axis=1)
    out: list[list[int] | None] = []
    for c in range(C):
        if not (np.isfinite(bottleneck[c]) and np.isfinite(ss[c, W - 1])):
            out.append(None)
            continue
        bounds, b = [L], W - 1  # cell k ends at layer k + 1 + b
        for k in range(K - 1, -1, -1):
            b = int(parents[k][c, b])  # it starts at layer k + b
            bounds.append(k + b)
        bounds.reverse()
        out.append([bounds[i + 1] - bounds[i] for i in range(K)])
    return out
