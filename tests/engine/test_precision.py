"""bf16 through the engine: identical losses across K (fp32's too), close to fp32, bf16 on the wire,
fp32 state.

The casts sit at layer boundaries (``Cell``), so a stage boundary adds none: the same casts happen
in the same places whatever K, and bf16 losses are bit-identical across K = 1, 2, 4 at the same M
(every rank runs one intra-op thread, as ``train.threads=1`` does: a different thread count changes
the order of a kernel's sums, in fp32 as in bf16).
"""

import _precision_workers as pw
import pytest
import torch
from torch import nn

from gpipe_repro.engine import ArgumentError, Pipeline, launch, single_process
from gpipe_repro.engine.batchnorm import MicroBatchNorm
from gpipe_repro.models.toy import tuplenet_layers

STEPS = 3
# Measured on this CPU (torch 2.13, both models, K = 2): the largest relative difference of a bf16
# step loss from the fp32 one was 3.3e-4 over these 3 steps (1.3e-3 by step 10, as the weights
# drift apart); the bound leaves 3x room for other CPUs' kernels.
BF16_VS_FP32_REL = 1e-3
RUNS = [dict(model=m, precision=p, steps=STEPS) for m in pw.MODELS for p in ("bf16", "fp32")]


@pytest.fixture(scope="module")
def by_k() -> dict[int, list[list[dict]]]:
    """K -> per run (RUNS order) -> per rank results; one launch per K."""
    out = {}
    for K in (1, 2, 4):
        per_rank = launch(pw.grid, K, (K, RUNS), threads=1)
        out[K] = [[rank[i] for rank in per_rank] for i in range(len(RUNS))]
    return out


def _losses(res: list[dict]) -> list[float]:
    return next(r["losses"] for r in res if r["stage"] == max(x["stage"] for x in res))


def _run(by_k: dict, K: int, model: str, precision: str) -> list[dict]:
    return by_k[K][RUNS.index(dict(model=model, precision=precision, steps=STEPS))]


@pytest.mark.parametrize("model", pw.MODELS)
def test_bf16_losses_are_identical_across_K(by_k, model):
    per_k = {K: _losses(_run(by_k, K, model, "bf16")) for K in (1, 2, 4)}
    assert len(per_k[1]) == STEPS and len(set(per_k[1])) == STEPS  # it trains: the losses move
    assert per_k[2] == per_k[1], per_k
    assert per_k[4] == per_k[1], per_k


@pytest.mark.parametrize("model", pw.MODELS)
def test_fp32_losses_are_identical_across_K(by_k, model):
    per_k = {K: _losses(_run(by_k, K, model, "fp32")) for K in (1, 2, 4)}
    assert len(set(per_k[1])) == STEPS  # it trains: the losses move
    assert per_k[2] == per_k[1], per_k
    assert per_k[4] == per_k[1], per_k


@pytest.mark.parametrize("model", pw.MODELS)
def test_bf16_is_close_to_fp32_and_not_equal(by_k, model):
    bf16, fp32 = _losses(_run(by_k, 2, model, "bf16")), _losses(_run(by_k, 2, model, "fp32"))
    rel = max(abs(a - b) / abs(b) for a, b in zip(bf16, fp32))
    assert rel <= BF16_VS_FP32_REL, (bf16, fp32)
    assert bf16 != fp32  # bf16 really ran


@pytest.mark.parametrize("model", pw.MODELS)
def test_boundaries_cross_in_bf16_at_half_the_bytes_and_state_stays_fp32(by_k, model):
    for K in (2, 4):
        bf16, fp32 = _run(by_k, K, model, "bf16"), _run(by_k, K, model, "fp32")
        floats = [d for r in bf16 for d, _ in r["sent"] if d != "torch.int64"]
        assert floats and set(floats) == {"torch.bfloat16"}  # activations forward, gradients back
        assert {d for r in fp32 for d, _ in r["sent"] if d != "torch.int64"} == {"torch.float32"}

        # every activation and gradient crossed at half the bytes (int64 handshakes aside)
        def float_bytes(res: list[dict]) -> int:
            return sum(b for r in res for d, b in r["sent"] if d != "torch.int64")

        assert 2 * float_bytes(bf16) == float_bytes(fp32)
        for r in bf16:
            assert r["param_dtypes"] == r["grad_dtypes"] == ["torch.float32"]
            assert r["state_dtypes"] == ["torch.float32"]  # momentum buffers: master state in fp32
            assert r["buffer_dtypes"] in ([], ["torch.float32"])
        assert any(r["buffer_dtypes"] for r in bf16) == (model == "conv")


def test_bf16_remat_recomputes_under_the_same_autocast():
    """checkpoint=always recomputes every micro-batch in backward: the same losses as never only if
    the recompute casts exactly as the forward did."""
    runs = [
        dict(model=m, precision="bf16", steps=STEPS, checkpoint=c)
        for m in pw.MODELS
        for c in ("never", "always")
    ]
    per_rank = launch(pw.grid, 2, (2, runs), threads=1)
    losses = [_losses([rank[i] for rank in per_rank]) for i in range(len(runs))]
    assert losses[0] == losses[1] and losses[2] == losses[3], losses


def test_batchnorm_statistics_stay_fp32_and_equal_the_whole_mini_batch():
    """Running statistics after one bf16 step equal those of the whole mini-batch of the very bf16
    inputs BatchNorm saw (float64 reference): accumulated in fp32, once per mini-batch."""
    torch.manual_seed(0)
    layers = tuplenet_layers(
        in_channels=3, channels=8, cells=3, classes=5, dropout=0.0, batchnorm=True
    )
    pipe = Pipeline(
        layers,
        single_process(),
        M=4,
        checkpoint="always",
        precision="bf16",
        loss_fn=nn.functional.cross_entropy,
    )
    bns = [m for m in pipe.cell.modules() if isinstance(m, MicroBatchNorm)]
    seen: dict[int, list[torch.Tensor]] = {id(m): [] for m in bns}
    from gpipe_repro.engine.batchnorm import _RECOMPUTING

    hooks = [
        m.register_forward_pre_hook(
            lambda mod, args: (
                None if _RECOMPUTING[0] else seen[id(mod)].append(args[0].detach().clone())
            )
        )
        for m in bns
    ]
    x = torch.randn(16, 3, 8, 8) * 2 + 0.5
    pipe.train_step(x, torch.randint(0, 5, (16,)))
    for h in hooks:
        h.remove()
    assert pipe._loss.dtype == torch.float32  # the loss is computed in fp32
    for m in bns:
        ins = seen[id(m)]
        assert len(ins) == 4 and {t.dtype for t in ins} == {torch.bfloat16}  # bf16 activations in
        whole = torch.cat(ins).double().transpose(0, 1).flatten(1)
        want_mean = 0.9 * 0 + 0.1 * whole.mean(1)
        want_var = 0.9 * 1 + 0.1 * whole.var(1, unbiased=True)
        assert m.running_mean.dtype == m.running_var.dtype == torch.float32
        assert torch.allclose(m.running_mean.double(), want_mean, rtol=1e-5, atol=1e-6)
        assert torch.allclose(m.running_var.double(), want_var, rtol=1e-5, atol=1e-6)


def test_an_unknown_precision_is_one_line():
    with pytest.raises(ArgumentError, match="precision='fp16' is unknown; allowed: fp32, bf16"):
        Pipeline(
            [nn.Linear(2, 2)],
            single_process(),
            M=1,
            precision="fp16",
            loss_fn=nn.functional.mse_loss,
        )
