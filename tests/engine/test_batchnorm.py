"""Micro-batch BatchNorm: micro-batch statistics in training, whole-mini-batch running statistics."""

import _workers as w
import pytest
import torch
from torch import nn

from gpipe_repro.engine import launch
from gpipe_repro.engine.batchnorm import MicroBatchNorm, commit, convert_batchnorm, recomputing


def test_running_stats_equal_batchnorm_on_whole_batch_single_process():
    torch.manual_seed(0)
    ref = nn.BatchNorm2d(5)
    mb = convert_batchnorm(nn.Sequential(nn.BatchNorm2d(5)))[0]
    assert isinstance(mb, MicroBatchNorm)
    x = torch.randn(16, 5, 3, 3) * 3 + 1
    for _ in range(3):  # three mini-batches
        ref(x)
        outs = [mb(part) for part in x.chunk(4)]
        commit(mb)
        x = x * 0.5 + 0.2
    assert torch.allclose(mb.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(mb.running_var, ref.running_var, atol=1e-6)
    assert int(mb.num_batches_tracked) == int(ref.num_batches_tracked) == 3
    # training output: each micro-batch normalised with its own statistics
    part = x.chunk(4)[0] / 0.5
    want = nn.functional.batch_norm(part, None, None, mb.weight, mb.bias, True, 0.0, mb.eps)
    assert torch.allclose(outs[0], want, atol=1e-5)
    assert not torch.allclose(outs[0], ref(x)[:4], atol=1e-3)


def test_unequal_micro_batches_fold_into_the_whole_batch_statistics():
    # a mini-batch that does not divide by M: the commit weighs each micro-batch by its count
    torch.manual_seed(1)
    ref, mb = nn.BatchNorm1d(4), MicroBatchNorm(4)
    x = torch.randn(11, 4) * 2 - 1
    ref(x)
    for part in x.split([5, 4, 2]):
        mb(part)
    commit(mb)
    assert torch.allclose(mb.running_mean, ref.running_mean, atol=1e-6)
    assert torch.allclose(mb.running_var, ref.running_var, atol=1e-6)


def test_the_commit_costs_a_handful_of_operations_whatever_m():
    # the fold is vectorised over the micro-batches: the number of tensor operations it runs does
    # not grow with M (a pairwise loop ran ~7 per micro-batch and layer: 1 ms per micro-batch on the
    # validation's AmoebaNet)
    from torch.profiler import ProfilerActivity, profile

    def ops(M: int) -> int:
        layer = MicroBatchNorm(8)
        for part in torch.randn(4 * M, 8).chunk(M):
            layer(part)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            commit(layer)
        return sum(1 for e in prof.events() if e.name.startswith("aten::"))

    assert ops(32) == ops(2)


def test_recomputation_does_not_count_twice():
    mb = MicroBatchNorm(3)
    x = torch.randn(8, 3)
    mb(x)
    with recomputing():
        mb(x * 100)
    commit(mb)
    ref = nn.BatchNorm1d(3)
    ref(x)
    assert torch.allclose(mb.running_var, ref.running_var, atol=1e-6)


@pytest.mark.slow
def test_pipelined_running_stats_equal_whole_batch_for_every_mode():
    ref = w.reference_step(batchnorm=True, M=4)
    # the schedules since GPipe too: zb-h1 (W apart from B), two cells per rank (interleaved)
    scheds = [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved", 2), ("zb-h1", 2)]
    configs = [
        dict(
            M=4,
            checkpoint=c,
            schedule=s,
            balance=[3, 5] if v == 1 else [2, 2, 2, 2],
            batchnorm=True,
            virtual_stages=v,
        )
        for c in ("never", "always")
        for s, v in scheds
    ]
    dp_configs = [
        dict(M=4, checkpoint="always", schedule="gpipe", balance=[3, 5], batchnorm=True),
        dict(
            M=4,
            checkpoint="always",
            schedule="zb-h1",
            balance=[2, 2, 2, 2],
            batchnorm=True,
            virtual_stages=2,
        ),
    ]
    per_rank = launch(w.grid, 2, (2, configs), threads=1)
    dp = launch(w.grid, 4, (2, dp_configs, 2), threads=1)
    runs = [[rank[i] for rank in per_rank] for i in range(len(configs))] + [
        [rank[i] for rank in dp] for i in range(len(dp_configs))
    ]
    configs += dp_configs
    # the data-parallel run sees the same global batch split over 2 replicas of M=4 chunks each,
    # i.e. 8 chunks of 2 samples: compare it with that reference.
    ref_dp = w.reference_step(batchnorm=True, M=8)
    for cfg, res in zip(configs, runs):
        if any(cfg is d for d in dp_configs):
            ref = ref_dp
        for r in res:
            for name, v in r["buffers"].items():
                layer, key = name.split(".", 1)
                want = ref["buffers"][f"{layer}.{key}"]
                assert torch.allclose(v.float(), want.float(), atol=1e-5), (cfg, name)
        # and the gradients match the micro-batch-statistics reference
        assert w.rel_err(w.gather(res, "grads"), ref["grads"]) <= 1e-5, cfg
        assert sum(len(r["buffers"]) for r in res if r["replica"] == 0) == len(ref["buffers"])
