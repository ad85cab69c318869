"""Building on meta and materialising a slice gives every layer the same weights whatever the slice."""

import pytest
import torch
from torch import nn

from gpipe_repro.models import materialize
from gpipe_repro.models.transformer import transformer_lm_layers


def _build():
    with torch.device("meta"):
        return transformer_lm_layers(4, d=32, H=64, A=2, V=50, ffn_init_scale=True)


def test_a_slice_gets_the_same_weights_as_the_whole_model():
    whole = materialize(_build(), seed=3)
    tail = materialize(_build()[2:], seed=3, first_index=2)
    for a, b in zip(whole[2:], tail):
        for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
            assert na == nb and torch.equal(pa, pb), na
    other = materialize(_build()[2:], seed=4, first_index=2)
    assert not torch.equal(tail[0].ffn.fc1.weight, other[0].ffn.fc1.weight)


def test_children_are_initialised_before_a_parent_rescales_them():
    layers = materialize(_build(), seed=0)
    plain = materialize(
        [transformer_lm_layers(4, d=32, H=64, A=2, V=50, ffn_init_scale=False)[1].to("meta")], 0, 1
    )
    # ffn_init_scale divides the feed-forward initialisation by L = 4 (paper §5)
    assert torch.allclose(layers[1].ffn.fc1.weight, plain[0].ffn.fc1.weight / 4)
    assert layers[1].attn.per_dim_scale.abs().sum() == 0  # reset by its own module


def test_a_module_that_cannot_be_initialised_is_named():
    class Raw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(3, device="meta"))

    with pytest.raises(
        TypeError, match="Raw in layer 7 has parameters or buffers but no reset_parameters"
    ):
        materialize([Raw()], seed=0, first_index=7)
