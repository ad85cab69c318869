"""The paper's models at the paper's sizes: exact parameter counts on the meta device, and shapes."""

import pytest
import torch

from gpipe_repro.models.amoebanet import amoebanet_layers, amoebanet_param_formula
from gpipe_repro.models.transformer import (
    lm_param_formula,
    transformer_lm_layers,
    transformer_mt_layers,
)


def count(layers):
    return sum(p.numel() for layer in layers for p in layer.parameters())


# (genotype, L, D, image size, exact count per the reference recipe, the paper's count, tolerance)
AMOEBA = [
    # MODELS.md gives this recipe's ratio to the paper's "82M" as 0.990 (1.05% below): the exact
    # recipe wins over the 1% goal here.
    ("D", 18, 208, 224, 81_137_437, 82e6, 0.011),
    ("D", 18, 416, 224, 317_541_696, 318e6, 0.01),
    ("D", 18, 544, 224, 540_196_240, 542e6, 0.01),
    ("D", 36, 544, 224, 1_053_293_776, 1.05e9, 0.01),
    ("D", 72, 512, 224, 1_842_610_248, 1.8e9, 0.025),
    ("B", 18, 512, 480, 557_277_864, 557e6, 0.01),
    ("D", 18, 256, 224, 121_911_016, None, None),
    ("D", 18, 128, 224, 31_555_384, None, None),
]


@pytest.mark.parametrize("g,L,D,size,exact,paper,tol", AMOEBA)
def test_amoebanet_counts(g, L, D, size, exact, paper, tol):
    with torch.device("meta"):
        layers = amoebanet_layers(g, L, D, image_size=size)
    assert len(layers) == L + 6
    assert count(layers) == exact
    if g == "D" and D != 128:  # at D = 128 the stem's 32 channels equal D/4 and the closed form's
        assert count(layers) == amoebanet_param_formula(L, D)  # extra 1x1 disappears
    if paper:
        assert abs(count(layers) / paper - 1) <= tol


@pytest.mark.parametrize(
    "L,paper", [(3, 282.2e6), (13, 785.8e6), (103, 5.3e9), (415, 21.0e9), (1663, 83.9e9)]
)
def test_transformer_lm_counts(L, paper):
    with torch.device("meta"):
        layers = transformer_lm_layers(L)
    assert len(layers) == L + 2
    assert count(layers) == lm_param_formula(L)
    assert abs(count(layers) / paper - 1) <= 0.005


@pytest.mark.parametrize(
    "L,H,A,exact,paper",
    [
        (6, 8192, 16, 408_206_976, 400e6),
        (24, 8192, 16, 1_239_419_904, 1.3e9),
        (12, 16384, 32, 1_239_233_280, 1.3e9),
        (32, 16384, 32, 3_086_062_080, 3e9),
        (64, 16384, 32, 6_040_988_160, 6e9),
    ],
)
def test_transformer_mt_counts(L, H, A, exact, paper):
    with torch.device("meta"):
        layers = transformer_mt_layers(L, H, A)
    assert len(layers) == 2 * L + 2
    assert count(layers) == exact
    assert abs(exact / paper - 1) <= 0.05


def test_small_amoebanet_passes_pairs_and_classifies():
    torch.manual_seed(0)
    layers = amoebanet_layers("D", 6, 16, classes=7, image_size=32)
    x = torch.randn(2, 3, 32, 32)
    h = layers[0](x)
    assert isinstance(h, tuple) and len(h) == 2
    for layer in layers[1:-1]:
        h = layer(h)
        assert isinstance(h, tuple) and len(h) == 2
    assert layers[-1](h).shape == (2, 7)


def test_amoebanet_b_small_forward():
    layers = amoebanet_layers("B", 3, 16, classes=5, image_size=32)
    y = torch.randn(2, 3, 32, 32)
    for layer in layers:
        y = layer(y)
    assert y.shape == (2, 5)


def test_trainability_options():
    torch.manual_seed(0)
    plain = transformer_lm_layers(8, d=32, H=64, A=2, V=50)
    torch.manual_seed(0)
    scaled = transformer_lm_layers(8, d=32, H=64, A=2, V=50, ffn_init_scale=True, logit_clip=0.5)
    ratio = float(plain[1].ffn.fc1.weight.detach().std() / scaled[1].ffn.fc1.weight.detach().std())
    assert ratio == pytest.approx(8, rel=1e-4)  # divided by the number of layers
    y = torch.randint(0, 50, (2, 6))
    for layer in scaled:
        y = layer(y)
    assert y.shape == (2, 6, 50) and y.abs().max() <= 0.5


def test_translation_model_carries_encoder_and_decoder_states():
    layers = transformer_mt_layers(2, 64, 2, d=32, V=40)
    x = (torch.randint(0, 40, (3, 7)), torch.randint(0, 40, (3, 5)))
    h = layers[0](x)
    for layer in layers[1:-1]:
        h = layer(h)
        assert h[0].shape == (3, 7, 32) and h[1].shape == (3, 5, 32)
    assert layers[-1](h).shape == (3, 5, 40)
