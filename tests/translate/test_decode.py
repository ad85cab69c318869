"""Greedy decoding: a tiny T(1, 64, 2) trained here to copy its source reproduces unseen sequences."""

import pytest
import torch

from gpipe_repro.data.translation import BOS, EOS, PAD
from gpipe_repro.data.translation.batches import pad_pairs
from gpipe_repro.engine import Pipeline, single_process
from gpipe_repro.models.transformer import token_loss, transformer_mt_layers
from gpipe_repro.translate.decode import (
    IncrementalDecoder,
    greedy_decode,
    split_layers,
    translate_ids,
)

V = 12  # ids 4..11 are "words"; 0..3 are PAD, UNK, BOS, EOS


def sequences(n: int, g: torch.Generator) -> list[list[int]]:
    lengths = torch.randint(2, 6, (n,), generator=g).tolist()
    return [torch.randint(4, V, (k,), generator=g).tolist() for k in lengths]


@pytest.fixture(scope="module")
def copier() -> list[torch.nn.Module]:
    """~5 s on one thread: 500 Adam steps on 32 random sequences each, through the engine (300 left
    it at the edge: one CPU's rounding decoded a held-out sequence short)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only contend on a shared machine
    torch.manual_seed(0)
    layers = transformer_mt_layers(1, 64, 2, d=32, V=V)
    pipe = Pipeline(
        layers,
        single_process(),
        M=2,
        loss_fn=token_loss,
        loss_reduction="sum",
        checkpoint="never",
        track_memory=False,
    )
    opt = torch.optim.Adam(pipe.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(1)
    try:
        for _ in range(500):
            seqs = sequences(32, g)
            inputs, targets = pad_pairs(seqs, seqs)
            pipe.train_step(inputs, targets)
            opt.step()
            opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
    return layers


def test_greedy_decoding_of_a_copy_model_reproduces_unseen_sequences(copier):
    layers = copier
    held_out = sequences(16, torch.Generator().manual_seed(99))
    assert translate_ids(layers, held_out, batch_sentences=5) == held_out
    assert all(m.training for m in layers)  # decoding left the training mode as it found it


def test_decoding_stops_at_eos_and_respects_the_length_limit(copier):
    src = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD]])  # rows finish at different steps
    assert greedy_decode(copier, src, max_new=12) == [[5, 6, 7], [8]]
    assert greedy_decode(copier, src, max_new=2) == [[5, 6], [8]]  # cut by the limit, then by EOS
    untrained = transformer_mt_layers(1, 64, 2, d=32, V=V)
    assert all(len(o) <= 3 and EOS not in o for o in greedy_decode(untrained, src, max_new=3))


def test_split_layers_refuses_a_partial_model():
    layers = transformer_mt_layers(2, 64, 2, d=32, V=V)
    embed, enc, dec, out = split_layers(layers)
    assert (len(enc), len(dec)) == (2, 2) and embed is layers[0] and out is layers[-1]
    with pytest.raises(ValueError, match="full T\\(L, H, A\\) list"):
        split_layers(layers[:3])
    with pytest.raises(ValueError, match="encoder layers, then decoder layers"):
        split_layers([layers[0], layers[3], layers[1], layers[2], layers[4], layers[5]])


def test_cached_decoding_steps_give_the_teacher_forced_logits():
    torch.manual_seed(0)
    layers = transformer_mt_layers(2, 64, 2, d=32, V=V)
    for m in layers:
        m.eval()
    src = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD]])
    tgt_in = torch.tensor([[BOS, 5, 6, 7, 9], [BOS, 8, 9, 4, 4]])
    with torch.no_grad():
        full = torch.nn.Sequential(*layers)((src, tgt_in))
        decoder = IncrementalDecoder(layers, src)
        steps = torch.stack([decoder.step(tgt_in[:, t]) for t in range(tgt_in.shape[1])], dim=1)
    assert torch.allclose(steps, full, atol=1e-5)
