"""Pipelined gradients and updates equal a plain single-process step (the paper's synchronous update)."""

import itertools

import _workers as w
import pytest

from gpipe_repro.engine import launch

MS = [1, 2, 4, 8]
MODES = ["never", "except_last", "always"]
SCHEDS = ["gpipe", "1f1b"]
BALANCE = {1: [8], 2: [3, 5], 4: [2, 2, 2, 2]}


gather, rel_err = w.gather, w.rel_err


def run_grid(K, configs, replicas=1):
    if K * replicas == 1:
        return [[r] for r in w.grid(1, configs)]
    per_rank = launch(w.grid, K * replicas, (K, configs, replicas), threads=1)
    return [[rank[i] for rank in per_rank] for i in range(len(configs))]


def test_two_stages_four_micro_batches_with_remat_equal_single_process():
    """The fast-set exactness case (K=2, M=4, remat): the whole grid below is marked slow."""
    ref = w.reference_step()
    configs = [dict(M=4, checkpoint="always", schedule="gpipe", balance=BALANCE[2])]
    (res,) = run_grid(2, configs)
    assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5
    assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("K", [1, 2, 4])
def test_gradients_and_update_equal_single_process(K):
    ref = w.reference_step()
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=BALANCE[K])
        for M, c, s in itertools.product(MS, MODES, SCHEDS)
    ]
    for cfg, res in zip(configs, run_grid(K, configs)):
        assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5, cfg
        loss = next(r["loss"] for r in res if r["stage"] == K - 1)
        assert loss == pytest.approx(ref["loss"], rel=1e-5), cfg


@pytest.mark.slow
def test_dropout_remat_repeats_the_same_masks():
    K = 2
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=BALANCE[K], dropout=0.5)
        for M, s, c in itertools.product([2, 4], SCHEDS, MODES)
    ]
    res = run_grid(K, configs)
    for i in range(0, len(configs), 3):  # never, except_last, always of one (M, schedule)
        base = gather(res[i], "grads")
        assert rel_err(gather(res[i + 1], "grads"), base) <= 1e-5, configs[i + 1]
        assert rel_err(gather(res[i + 2], "grads"), base) <= 1e-5, configs[i + 2]
    # and dropout really is on: the gradients differ from the dropout-free reference
    assert rel_err(gather(res[0], "grads"), w.reference_step()["grads"]) > 1e-3


@pytest.mark.slow
def test_two_replicas_of_two_stages_equal_single_process_on_global_batch():
    ref = w.reference_step(N=16)
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=BALANCE[2])
        for M, c, s in [(2, "never", "gpipe"), (4, "always", "1f1b"), (1, "except_last", "gpipe")]
    ]
    for cfg, res in zip(configs, run_grid(2, configs, replicas=2)):
        for rep in (0, 1):
            assert rel_err(gather(res, "grads", rep), ref["grads"]) <= 1e-5, (cfg, rep)
            assert rel_err(gather(res, "params", rep), ref["params"]) <= 1e-5, (cfg, rep)
