"""Pipelined gradients and updates equal a plain single-process step (the paper's synchronous update)."""

import itertools

import _workers as w
import pytest

from gpipe_repro.engine import launch

MS = [1, 2, 4, 8]
MODES = ["never", "except_last", "always"]
SCHEDS = ["gpipe", "1f1b"]
BALANCE = {1: [8], 2: [3, 5], 4: [2, 2, 2, 2]}
# the schedules since GPipe: (schedule, virtual stages); two cells per rank need K·2 of them
LATER = [("zb-h1", 1), ("interleaved", 2), ("zb-h1", 2)]
BALANCE_V2 = {1: [4, 4], 2: [2, 2, 2, 2], 4: [1] * 8}


def later(K: int, v: int) -> list[int]:
    return BALANCE[K] if v == 1 else BALANCE_V2[K]


# Communication modes: plain gloo, and NCCL's order on gloo (``engine.fifo``: each channel's
# operations one at a time, as on a GPU); each runs on its own topology inside one launch.
COMM = {"gloo": dict(), "nccl_order": dict(nccl_order=True)}


gather, rel_err = w.gather, w.rel_err


def run_grid(K, configs, replicas=1):
    if K * replicas == 1:
        return [[r] for r in w.grid(1, configs)]
    per_rank = launch(w.grid, K * replicas, (K, configs, replicas), threads=1)
    return [[rank[i] for rank in per_rank] for i in range(len(configs))]


def last(res: list[dict]) -> dict:
    return max(res, key=lambda r: r["stage"])


@pytest.mark.parametrize("comm", COMM)
def test_two_stages_four_micro_batches_with_remat_equal_single_process(comm):
    """The fast-set exactness case (K=2, M=4, remat, both schedules, then inference): the whole
    grid below is marked slow. On plain gloo also with every channel on the default group (the
    engine before channels), which completes there and deadlocks in NCCL's order (``test_fifo``)."""
    ref = w.reference_step()
    layouts = [COMM[comm]] + ([dict(one_group=True)] if comm == "gloo" else [])
    configs = [
        dict(M=4, checkpoint="always", schedule=s, balance=BALANCE[2], infer=True, **layout)
        for layout in layouts
        for s in SCHEDS
    ]
    for cfg, res in zip(configs, run_grid(2, configs)):
        assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5, cfg
        assert rel_err([last(res)["out"]], [ref["out"]]) <= 1e-5, cfg


@pytest.mark.parametrize("K", [2, 4])
def test_the_schedules_since_gpipe_equal_single_process(K):
    """zb-h1 (B and W apart), interleaved and zb-h1 over two cells per rank (activations round the
    ring K-1 -> 0) equal a plain step at K = 2 and 4, remat never and always, in NCCL's order
    (every channel's operations one at a time: a schedule posting out of order would hang, and
    every wait is bounded), then inference through the cells."""
    ref = w.reference_step()
    M = 4
    configs = [
        dict(
            M=M,
            checkpoint=c,
            schedule=s,
            balance=later(K, v),
            virtual_stages=v,
            infer=True,
            nccl_order=True,
            timeout_s=60.0,
        )
        for s, v in LATER
        for c in ("never", "always")
    ]
    for cfg, res in zip(configs, run_grid(K, configs)):
        assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5, cfg
        assert rel_err([last(res)["out"]], [ref["out"]]) <= 1e-5, cfg


def test_two_cells_on_one_rank_hand_over_in_process():
    """K = 1 with v cells: a cell's output reaches the next as a copy, as a transfer makes it."""
    ref = w.reference_step()
    configs = [
        dict(
            M=M,
            checkpoint=c,
            schedule=s,
            balance=[2, 2, 2, 2] if v == 4 else later(1, v),
            virtual_stages=v,
            infer=True,
        )
        for s, v in [*LATER, ("interleaved", 4)]
        for M, c in ((4, "except_last"), (2, "never"))
    ]
    for cfg, res in zip(configs, run_grid(1, configs)):
        assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert rel_err([last(res)["out"]], [ref["out"]]) <= 1e-5, cfg


@pytest.mark.long
@pytest.mark.parametrize("K", [1, 2, 4])
def test_the_schedules_since_gpipe_equal_single_process_on_the_grid(K):
    """Every M (a multiple of K with two cells per rank), remat mode and later schedule; at K >= 2
    in both communication modes."""
    ref = w.reference_step()
    comms = COMM.values() if K > 1 else [{}]
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=later(K, v), virtual_stages=v, **comm)
        for M, c, (s, v), comm in itertools.product(MS, MODES, LATER, comms)
        if v == 1 or M % K == 0
    ]
    for cfg, res in zip(configs, run_grid(K, configs)):
        assert rel_err(gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5, cfg


@pytest.mark.slow
@pytest.mark.parametrize("K", [1, 2, 4])
def test_gradients_and_update_equal_single_process(K):
    """Every M from 1 to 2K, remat mode and schedule; at K >= 2 in both communication modes."""
    ref = w.reference_step()
    comms = COMM.values() if K > 1 else [{}]
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=BALANCE[K], **comm)
        for M, c, s, comm in itertools.product(MS, MODES, SCHEDS, comms)
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
    """DDP's all-reduce runs on the stage's data-parallel group, beside the channels: in NCCL's
    order too."""
    ref = w.reference_step(N=16)
    configs = [
        dict(M=M, checkpoint=c, schedule=s, balance=later(2, v), virtual_stages=v, **comm)
        for M, c, s, v in [
            (2, "never", "gpipe", 1),
            (4, "always", "1f1b", 1),
            (1, "except_last", "gpipe", 1),
            (2, "never", "zb-h1", 1),  # each cell's all-reduce overlaps its last W
            (4, "always", "interleaved", 2),
            (2, "except_last", "zb-h1", 2),
        ]
        for comm in COMM.values()
    ]
    for cfg, res in zip(configs, run_grid(2, configs, replicas=2)):
        for rep in (0, 1):
            assert rel_err(gather(res, "grads", rep), ref["grads"]) <= 1e-5, (cfg, rep)
            assert rel_err(gather(res, "params", rep), ref["params"]) <= 1e-5, (cfg, rep)
