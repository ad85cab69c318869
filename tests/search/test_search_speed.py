"""gpipe-plan's fast search (issue #19's search speed): the banded, batched min-max equals the full
two-pass recurrence it replaced and brute force, and the batched search finds the same partitions
as solving each configuration on its own."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.engine.partition import PartitionError, balance_by_cells, balance_by_cells_many
from gpipe_repro.runplan.costing import run_hardware
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.search.candidate import Stats
from gpipe_repro.search.choose import search_space
from gpipe_repro.search.scan import _divisors, _searched, enumerate_candidates
from gpipe_repro.search.space import _partitions

GiB = 2**30


def full_recurrence(cell_cost: np.ndarray) -> list[int] | None:
    """The solver before the band: both passes over every (i, j) of an (L+1) x (L+1) matrix."""
    K, L = cell_cost.shape[0], cell_cost.shape[1] - 1
    best = np.full(L + 1, np.inf)
    best[0] = 0.0
    for k in range(K):
        best = np.min(np.maximum(best[:, None], cell_cost[k]), axis=0)
    if not np.isfinite(best[L]):
        return None
    limit = best[L] + 1e-9 * max(1.0, abs(best[L]))
    ss = np.full(L + 1, np.inf)
    ss[0] = 0.0
    parents = []
    for k in range(K):
        cand = ss[:, None] + np.where(cell_cost[k] <= limit, cell_cost[k], np.inf) ** 2
        parents.append(np.argmin(cand, axis=0))
        ss = np.min(cand, axis=0)
    bounds, j = [L], L
    for k in range(K - 1, -1, -1):
        j = int(parents[k][j])
        bounds.append(j)
    bounds.reverse()
    return [bounds[i + 1] - bounds[i] for i in range(K)]


def brute_force(cell_cost: np.ndarray) -> float:
    """The least bottleneck over every partition."""
    K, L = cell_cost.shape[0], cell_cost.shape[1] - 1
    best = np.inf
    for cuts in itertools.combinations(range(1, L), K - 1):
        b = (0, *cuts, L)
        best = min(best, max(cell_cost[k, b[k], b[k + 1]] for k in range(K)))
    return float(best)


def random_problem(rng: np.random.Generator) -> np.ndarray:
    """Per-layer costs (some tied) and per-layer memory under a per-position cap: +inf where cell
    k may not hold layers i..j-1."""
    L = int(rng.integers(1, 12))
    K = int(rng.integers(1, L + 1))
    costs = rng.integers(1, 5, L).astype(float) if rng.random() < 0.5 else rng.random(L)
    mem = rng.random(L)
    p, q = np.concatenate([[0.0], np.cumsum(costs)]), np.concatenate([[0.0], np.cumsum(mem)])
    i, j = np.arange(L + 1)[:, None], np.arange(L + 1)[None, :]
    seg, used = p[None, :] - p[:, None], q[None, :] - q[:, None]
    caps = rng.uniform(0.2, 1.5, K) * mem.sum() / K * 2  # per position: some tight, some loose
    fits = (used[None] <= caps[:, None, None]) & (i < j)[None]
    return np.where(fits, seg[None], np.inf)


def test_the_banded_solver_equals_the_full_recurrence_and_brute_force():
    rng = np.random.default_rng(19)
    problems = [random_problem(rng) for _ in range(400)]
    infeasible = 0
    for cells in problems:
        want = full_recurrence(cells)
        try:
            got: list[int] | None = balance_by_cells(cells)
        except PartitionError:
            got = None
        assert got == want
        if want is None:
            infeasible += 1
            assert brute_force(cells) == np.inf
        else:
            start, worst = 0, 0.0
            for k, b in enumerate(got):
                worst = max(worst, cells[k, start, start + b])
                start += b
            assert worst == brute_force(cells)
    assert 20 < infeasible < 380  # both kinds of problem were drawn
    same_shape = [c for c in problems if c.shape == problems[0].shape]
    assert balance_by_cells_many(np.stack(same_shape)) == [full_recurrence(c) for c in same_shape]


@pytest.mark.parametrize("cap_gib", [0.016, 0.025, 1.0])  # 0.016: 6 candidates fit
def test_the_batched_search_finds_each_configuration_own_partitions(cap_gib):
    spec = compose(["hardware=tpu_v3", "model.hidden=1024", "backend=sim"])
    model = plan_model(spec)
    hw, costs = run_hardware(spec, model)
    space = search_space(spec, model, int(cap_gib * GiB), costs)
    cands = enumerate_candidates(space, 4, 64, 64, Stats())
    # one cell per stage (the several-cell schedules hold each cell to a share of the cap: their
    # partitions are the same solve on K·v cells)
    got = {
        (c.K, c.replicas, c.M, c.schedule, c.balance, c.checkpoint)
        for c in cands
        if c.virtual_stages == 1
    }
    assert {c.schedule_name for c in cands if c.K > 1 and c.M % c.K == 0} >= {"zb-h1", "1f1b"}
    want = set()
    for K in range(1, 5):
        for R in (r for r in range(1, 4 // K + 1) if 64 % r == 0):
            for M in _divisors(64 // R, 64):
                for schedule in [s for s, v in _searched(K, M, len(model.layers)) if v == 1]:
                    mb = 64 // R // M
                    fresh = search_space(spec, model, int(cap_gib * GiB), costs)  # nothing cached
                    for bal, modes in reference_partitions(fresh, K, M, schedule, mb):
                        want.add((K, R, M, schedule, bal, modes))
    assert got == want and len(want) > 0
    assert _partitions(space, 2, 4, "gpipe", 8, 8) == reference_partitions(space, 2, 4, "gpipe", 8)


def reference_partitions(space, K, M, schedule, mb):
    """Each configuration on its own, on full matrices (``Space.memory``, the full recurrence)."""
    never_t, always_t = space.times(mb)
    fits_n = space.memory(schedule, "never", K, M, mb) <= space.cap
    fits_a = space.memory(schedule, "always", K, M, mb) <= space.cap
    out = []
    for kind, cost in (
        ("mixed", np.where(fits_n, never_t, np.where(fits_a, always_t, np.inf))),
        ("never", np.where(fits_n, never_t, np.inf)),
        ("always", np.where(fits_a, always_t, np.inf)),
    ):
        bal = full_recurrence(cost)
        if bal is None:
            continue
        modes, start = [], 0
        for k, b in enumerate(bal):
            modes.append("never" if fits_n[k, start, start + b] and kind != "always" else "always")
            start += b
        if (tuple(bal), tuple(modes)) not in out:
            out.append((tuple(bal), tuple(modes)))
    return out


def test_the_least_memory_partition_is_the_min_max_of_each_stages_bytes():
    spec = compose(["hardware=tpu_v3", "model.hidden=1024", "backend=sim"])
    model = plan_model(spec)
    _, costs = run_hardware(spec, model)
    space = search_space(spec, model, GiB, costs)
    L, K, M = len(model.layers), 3, 4
    mem = space.memory("1f1b", "always", K, M, 1)

    def needs(bal):
        starts = np.cumsum([0, *bal])
        return [float(mem[k, starts[k], starts[k + 1]]) for k in range(K)]

    bal, need = space.least_memory(K, M)
    assert sum(bal) == L and len(bal) == K and need == needs(bal)
    every = [b for b in itertools.product(range(1, L), repeat=K) if sum(b) == L]
    assert max(need) == min(max(needs(b)) for b in every)
