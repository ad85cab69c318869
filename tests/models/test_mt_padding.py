"""T(L, H, A) with padded sentences: the source mask makes padding invisible, the loss skips it,
and the unpadded two-state call path still works."""

import pytest
import torch
import torch.nn.functional as F

from gpipe_repro.models.transformer import PAD_ID, token_loss, transformer_mt_layers


def run(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def model():
    torch.manual_seed(0)
    return transformer_mt_layers(2, 64, 2, d=32, V=30)


def test_extra_source_padding_changes_nothing():
    layers = model()
    src = torch.randint(1, 30, (3, 5))
    tgt = torch.randint(1, 30, (3, 4))
    padded = torch.cat([src, torch.full((3, 6), PAD_ID)], dim=1)
    a, b = run(layers, (src, tgt)), run(layers, (padded, tgt))
    assert torch.allclose(a, b, atol=1e-5)
    # the mask matters: attending to the padding embeddings would change the output
    layers[0].forward = lambda t: (
        layers[0].embed(t[0]),
        layers[0].embed(t[1]),
        torch.ones_like(t[0], dtype=torch.bool),
    )
    assert not torch.allclose(run(layers, (padded, tgt)), a, atol=1e-3)


def test_state_carries_a_bool_source_mask():
    layers = model()
    src = torch.tensor([[5, 6, PAD_ID], [7, PAD_ID, PAD_ID]])
    h = layers[0]((src, torch.tensor([[1, 2], [3, 4]])))
    assert len(h) == 3 and h[2].dtype == torch.bool
    assert h[2].tolist() == [[True, True, False], [True, False, False]]
    for layer in layers[1:-1]:
        h = layer(h)
        assert torch.equal(h[2], src != PAD_ID)


def test_two_state_path_without_mask_still_runs_and_matches_an_unpadded_batch():
    layers = model()
    src, tgt = torch.randint(1, 30, (2, 6)), torch.randint(1, 30, (2, 3))
    enc, dec, _ = layers[0]((src, tgt))
    two = run(layers[1:], (enc, dec))
    assert torch.allclose(two, run(layers, (src, tgt)), atol=1e-6)


def test_token_loss_ignores_padding_and_normalises_by_the_given_count():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 9, generator=g)
    tgt = torch.tensor([[3, 4, 5, PAD_ID], [6, PAD_ID, PAD_ID, PAD_ID]])
    real = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD_ID)
    assert token_loss(logits, (tgt, torch.full((2,), 4))).item() == pytest.approx(
        real.item(), rel=1e-6
    )
    scrambled = logits.clone()
    scrambled[tgt == PAD_ID] = 100.0 * torch.randn(int((tgt == PAD_ID).sum()), 9, generator=g)
    assert token_loss(scrambled, (tgt, torch.full((2,), 4))).item() == pytest.approx(
        real.item(), rel=1e-6
    )
    # a share: the same sum divided by a larger mini-batch's count
    assert token_loss(logits, (tgt, torch.full((2,), 8))).item() == pytest.approx(
        real.item() / 2, rel=1e-6
    )
