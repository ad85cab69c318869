"""Per-token losses through the pipeline: M, K and replicas leave loss and gradients unchanged, and
boundary shapes may change from step to step (real gloo ranks)."""

import _token_workers as tw
import pytest
import torch
import torch.nn.functional as F
from _workers import gather

from gpipe_repro.engine import Pipeline, launch, single_process
from gpipe_repro.models.transformer import PAD_ID, token_loss

ONE_STEP = tw.SHAPES[:1]
rel_err = tw.rel_err
MS = [1, 2, 4]


def test_micro_batches_really_hold_unequal_token_counts():
    # Otherwise the test below could not tell a per-token mean from a mean of micro-batch means.
    _, y = tw.make_batch(*ONE_STEP[0], seed=0)
    counts = [int((c != PAD_ID).sum()) for c in y.chunk(4)]
    assert len(set(counts)) == 4
    logits = torch.randn(
        *y.shape, tw.V, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    token_mean = F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=PAD_ID)
    mean_of_means = (
        sum(
            F.cross_entropy(a.flatten(0, 1), b.flatten(), ignore_index=PAD_ID)
            for a, b in zip(logits.chunk(4), y.chunk(4))
        )
        / 4
    )
    assert abs(token_mean - mean_of_means) > 1e-3
    tgt, count = tw.with_count(y)
    shares = sum(
        token_loss(a, (b, c)) for a, b, c in zip(logits.chunk(4), tgt.chunk(4), count.chunk(4))
    )
    assert shares.item() == pytest.approx(token_mean.item(), rel=1e-6)


@pytest.mark.parametrize("M", MS)
def test_sum_reduction_equals_whole_batch_at_k1(M):
    ref = tw.reference(ONE_STEP)
    res = tw.pipeline_run(1, M, ONE_STEP)
    assert res["losses"][0] == pytest.approx(ref["losses"][0], rel=1e-5)
    assert rel_err(res["grads"][0], ref["grads"][0]) <= 1e-5


def test_mean_reduction_would_weigh_micro_batches_equally():
    # The default "mean" divides each micro-batch's mean by M: with unequal token counts that is
    # not the whole-batch per-token mean, which is why "sum" exists.
    ref = tw.reference(ONE_STEP)
    pipe = Pipeline(
        tw.make_layers(),
        single_process(),
        M=4,
        loss_fn=lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten(), ignore_index=PAD_ID),
    )
    x, y = tw.make_batch(*ONE_STEP[0], seed=0)
    loss = pipe.train_step(x, y)
    assert abs(loss - ref["losses"][0]) / ref["losses"][0] > 1e-3


def test_unknown_loss_reduction_is_one_line():
    with pytest.raises(ValueError, match=r"loss_reduction='avg' is unknown; allowed: mean, sum"):
        Pipeline(tw.make_layers(), single_process(), M=1, loss_fn=token_loss, loss_reduction="avg")


@pytest.mark.slow
def test_k2_any_m_and_shapes_varying_per_step_equal_single_process():
    """One launch of 2 ranks: M in {1, 2, 4} on one step, then three steps of changing shapes
    (gpipe and 1f1b, with and without remat, on plain gloo and in NCCL's order): no hang, same
    losses, gradients and updates."""
    configs = (
        [dict(M=M, steps=ONE_STEP) for M in MS]
        + [
            dict(M=2, steps=tw.SHAPES, schedule="gpipe", checkpoint="never", nccl_order=order)
            for order in (False, True)
        ]
        + [
            dict(M=4, steps=tw.SHAPES, schedule="1f1b", checkpoint="always", nccl_order=order)
            for order in (False, True)
        ]
    )
    per_rank = launch(tw.grid, 2, (2, configs), threads=1)
    one, many = tw.reference(ONE_STEP), tw.reference(tw.SHAPES)
    for i, cfg in enumerate(configs):
        res = [rank[i] for rank in per_rank]
        ref = one if len(cfg["steps"]) == 1 else many
        last = next(r for r in res if r["stage"] == 1)
        assert last["losses"] == pytest.approx(ref["losses"], rel=1e-5), cfg
        for step in range(len(cfg["steps"])):
            got = [g for r in sorted(res, key=lambda r: r["stage"]) for g in r["grads"][step]]
            assert rel_err(got, ref["grads"][step]) <= 1e-5, (cfg, step)
        assert rel_err(gather(res, "params"), ref["params"]) <= 1e-5, cfg


@pytest.mark.slow
def test_two_replicas_with_the_global_token_count_equal_single_process():
    """D = 2 replicas of K = 1: each normalises by the global count, the engine scales the backward
    by D against DDP's average and all-reduces the reported loss."""
    configs = [dict(M=2, steps=tw.SHAPES)]
    per_rank = launch(tw.grid, 2, (1, configs, 2), threads=1)
    ref = tw.reference(tw.SHAPES)
    for rank in per_rank:
        res = rank[0]
        assert res["losses"] == pytest.approx(ref["losses"], rel=1e-5)
        assert rel_err(res["params"], ref["params"]) <= 1e-5
