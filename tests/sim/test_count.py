import pytest
import torch
from torch import nn

from gpipe_repro.models import class_planning_loss
from gpipe_repro.models.toy import tuplenet_layers
from gpipe_repro.models.transformer import lm_param_formula
from gpipe_repro.sim.count import count_layers, count_transformer_lm


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_linear_flops_forward_and_real_backward():
    N, a, b, c = 6, 16, 32, 8
    with torch.device("meta"):
        layers = [nn.Linear(a, b), nn.Linear(b, c)]
    first, second = count_layers(layers, meta(N, a))
    assert first.fwd_flops == 2 * N * a * b
    assert first.bwd_flops == 2 * N * a * b  # first layer: weight gradient only, no input gradient
    assert second.fwd_flops == 2 * N * b * c
    assert second.bwd_flops == 4 * N * b * c  # weight and input gradients
    assert first.backward_counted and second.backward_counted
    assert first.params == a * b + b and first.param_bytes == 4 * (a * b + b)
    assert first.in_bytes == 4 * N * a and first.out_bytes == 4 * N * b
    assert all(p.device.type == "meta" for layer in layers for p in layer.parameters())


def test_loss_is_counted_in_the_last_layer():
    N, a, b, k = 4, 8, 16, 5
    with torch.device("meta"):
        layers = [nn.Linear(a, b), nn.Linear(b, b)]
    w = meta(b, k)
    plain = count_layers(layers, meta(N, a))
    with_loss = count_layers(layers, meta(N, a), lambda y: (y @ w).sum())
    assert with_loss[0] == plain[0]
    assert with_loss[1].fwd_flops - plain[1].fwd_flops == 2 * N * b * k
    assert with_loss[1].bwd_flops > plain[1].bwd_flops  # the loss's matmul has a backward too


def test_tuple_layers_sum_their_outputs():
    with torch.device("meta"):
        layers = tuplenet_layers(3, channels=4, cells=2, classes=10, dropout=0.0)
    counts = count_layers(layers, meta(2, 3, 8, 8), class_planning_loss)
    stem, cell = counts[0], counts[1]
    # (current, previous): two tensors of 2 x 4 channels x 8 x 8 fp32 each (see models/toy.py)
    assert stem.out_bytes == 2 * (2 * 4 * 8 * 8 * 4)
    assert cell.in_bytes == stem.out_bytes and cell.out_bytes == stem.out_bytes
    assert counts[-1].out_bytes == 2 * 10 * 4  # the head's logits


class _NoMetaBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError("no backward on meta")


class _Odd(nn.Linear):
    def forward(self, x):
        return _NoMetaBackward.apply(super().forward(x))


def test_backward_falls_back_to_twice_the_forward():
    with torch.device("meta"):
        layers = [nn.Linear(4, 4), _Odd(4, 6)]
    _, odd = count_layers(layers, meta(3, 4))
    assert not odd.backward_counted
    assert odd.bwd_ops == tuple(2 * f for f in odd.fwd_ops)
    assert odd.fwd_flops == 2 * 3 * 4 * 6


def test_counts_scale_exactly_with_the_micro_batch():
    with torch.device("meta"):
        layers = tuplenet_layers(3, channels=4, cells=2, classes=10, dropout=0.0)
    one = count_layers(layers, meta(1, 3, 8, 8), class_planning_loss)
    three = count_layers(layers, meta(3, 3, 8, 8), class_planning_loss)
    assert [c.at(3) for c in one] == three
    tr1 = count_transformer_lm(2, d=32, H=64, A=4, V=50, S=16, batch=1)
    tr3 = count_transformer_lm(2, d=32, H=64, A=4, V=50, S=16, batch=3)
    assert [c.at(3) for c in tr1] == tr3


def test_memo_reuses_identical_layers_without_changing_the_counts():
    args = dict(L=3, d=32, H=64, A=4, V=50, S=16)
    from gpipe_repro.models import token_planning_loss
    from gpipe_repro.models.transformer import transformer_lm_layers

    with torch.device("meta"):
        layers = transformer_lm_layers(args["L"], args["d"], args["H"], args["A"], args["V"])
    tokens = torch.zeros(2, args["S"], dtype=torch.long, device="meta")
    assert count_layers(layers, tokens, token_planning_loss, memo=True) == count_layers(
        layers, tokens, token_planning_loss, memo=False
    )


def test_transformer_48_matches_the_closed_forms():
    # Paper's Transformer-48 (d 2048, H 8192, A 32, V 32k, S 1024), one sequence.
    d, H, V, S = 2048, 8192, 32000, 1024
    counts = count_transformer_lm(48)
    assert len(counts) == 50
    assert sum(c.params for c in counts) == lm_param_formula(48)
    layer = 8 * S * d * d + 4 * S * d * H + 4 * S * S * d  # Q, K, V, O; FFN; QK^T and AV
    assert {c.fwd_flops for c in counts[1:-1]} == {layer}
    assert {c.bwd_flops for c in counts[1:-1]} == {2 * layer}
    assert counts[-1].fwd_flops == pytest.approx(2 * S * d * V)
    assert counts[0].fwd_flops == 0 and counts[0].out_bytes == S * d * 4
