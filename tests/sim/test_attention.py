"""Attention counted as one fused kernel (``sim.attention``) and timed at its own efficiency."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_roofline import profile
from torch import nn

from gpipe_repro.sim.attention import FUSED_BACKWARD, FUSED_FORWARD
from gpipe_repro.sim.count import OpCount, count_layers
from gpipe_repro.sim.roofline import RooflineCosts, pass_time, recompute_ops

B, H, L, D = 2, 4, 64, 16  # the batch is doubled and quadrupled by count_layers: it scales exactly


class _Attend(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.proj = nn.Linear(D, 3 * H * D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.proj(x).view(x.shape[0], L, 3, H, D).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return y.transpose(1, 2).reshape(x.shape[0], L, H * D)


def _count(attention: str, causal: bool = False):
    with torch.device("meta"):
        layers = [_Attend(causal)]
        x = torch.empty(B, L, D)
    return count_layers(layers, x, attention=attention)[0]


def test_fused_attention_is_one_operation_per_pass_with_the_matmuls_flops():
    fused, plain = _count("fused"), _count("materialized")
    (fwd,) = [o for o in fused.fwd if o.op == FUSED_FORWARD]
    (bwd,) = [o for o in fused.bwd if o.op == FUSED_BACKWARD]
    assert fwd.flops == pytest.approx(4 * B * H * L * L * D)  # Q K^T and P V
    assert bwd.flops == pytest.approx(2.5 * fwd.flops)  # the scores recomputed: five matmuls
    assert not any(o.op in ("bmm", "_safe_softmax") for o in fused.fwd)
    assert any(o.op == "_safe_softmax" for o in plain.fwd)
    # no L x L tensor goes through memory: far fewer bytes than the materialized scores move
    assert sum(o.bytes for o in fused.fwd) < sum(o.bytes for o in plain.fwd) - 2 * 4 * B * H * L * L
    half = [o for o in _count("fused", causal=True).fwd if o.op == FUSED_FORWARD][0]
    assert half.flops == pytest.approx(fwd.flops / 2)  # blocks above the diagonal skipped


def test_a_fused_kernel_runs_at_the_profiles_attention_efficiency():
    op = OpCount(1e9, 1e3, 0.0, FUSED_FORWARD)
    curve = profile()  # no fused-attention figure: the matrix curve
    assert pass_time(curve, [op]) == pytest.approx(1e9 / (1e12 * curve.efficiency(1e9)))
    assert pass_time(profile(fused_attention_efficiency=0.25), [op]) == pytest.approx(4e-3)
    with pytest.raises(ValueError, match="fused_attention_efficiency"):
        profile(fused_attention_efficiency=1.5)


def test_selective_remat_recomputes_every_second_matmul_and_the_cheap_operations():
    mm = [OpCount(1e9, 1e6, 0.0, "mm") for _ in range(4)]
    cheap = OpCount(0.0, 1e6, 0.0, "mul")
    attn = OpCount(1e9, 1e6, 0.0, FUSED_FORWARD)
    ops = [mm[0], cheap, mm[1], attn, mm[2], cheap, mm[3]]
    again = recompute_ops(ops, "selective")
    assert [o.op for o in again] == ["mul", "mm", "mul", "mm"]  # mm 2 and 4; attention kept
    assert recompute_ops(ops, "full") == ops
    with pytest.raises(ValueError, match="policy='some'"):
        recompute_ops(ops, "some")
    layer = _count("fused")
    full = RooflineCosts(profile(), [layer]).layer_costs(B)[0]
    sel = RooflineCosts(profile(), [layer], remat="selective").layer_costs(B)[0]
    assert full.recompute == full.forward_s and 0 < sel.recompute < full.forward_s
