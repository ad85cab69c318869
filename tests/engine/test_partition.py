import itertools

import numpy as np
import pytest

from gpipe_repro.engine.partition import PartitionError, balance_by_cost, cell_costs, check_balance


def brute_force(costs, K):
    L = len(costs)
    best = None
    for cuts in itertools.combinations(range(1, L), K - 1):
        b = [j - i for i, j in zip((0, *cuts), (*cuts, L))]
        cc = cell_costs(costs, b)
        key = (round(max(cc), 9), round(float(np.var(cc)), 9))
        if best is None or key < best[0]:
            best = (key, b)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_matches_brute_force_on_bottleneck_and_variance(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(2, 10))
    K = int(rng.integers(1, L + 1))
    costs = rng.integers(1, 20, size=L).astype(float).tolist()
    got = balance_by_cost(costs, K)
    (want_max, want_var), _ = brute_force(costs, K)
    cc = cell_costs(costs, got)
    assert sum(got) == L and len(got) == K and min(got) >= 1
    assert max(cc) == pytest.approx(want_max)
    assert float(np.var(cc)) == pytest.approx(want_var, abs=1e-9)


def test_heavy_first_layer_gets_its_own_cell():
    assert balance_by_cost([5, 1, 1, 1, 1, 1], 2) == [1, 5]


def test_uneven_amoebanet_like_costs_follow_cost_not_count():
    costs = [0.01] * 6 + [1.0] * 6 + [4.0] * 6
    b = balance_by_cost(costs, 4)
    assert b[0] > b[-1]  # the cheap early layers share a cell; the heavy last ones are spread


@pytest.mark.parametrize("K,msg", [(0, "K=0 is invalid"), (5, "K=5 exceeds the model's 4 layers")])
def test_bad_k(K, msg):
    with pytest.raises(PartitionError, match=msg):
        balance_by_cost([1, 1, 1, 1], K)


@pytest.mark.parametrize(
    "bal,msg",
    [
        ([2, 1], "sums to 3 but the model has 4 layers"),
        ([4, 0], "a cell with 0 layers"),
        ([], "empty"),
    ],
)
def test_bad_balance(bal, msg):
    with pytest.raises(PartitionError, match=msg):
        check_balance(bal, 4)


@pytest.mark.parametrize("seed", range(10))
def test_bisection_path_finds_the_same_bottleneck(seed, monkeypatch):
    import gpipe_repro.engine.partition as part

    rng = np.random.default_rng(seed)
    costs = rng.integers(1, 50, size=40).astype(float).tolist()
    K = int(rng.integers(2, 12))
    exact = max(cell_costs(costs, balance_by_cost(costs, K)))
    monkeypatch.setattr(part, "DP_LIMIT", 0)
    fast = balance_by_cost(costs, K)
    assert len(fast) == K and sum(fast) == 40 and min(fast) >= 1
    assert max(cell_costs(costs, fast)) == pytest.approx(exact)
