"""Greedy decoding with a trained T(L, H, A) layer list, in one process.

The harness hands over the full flat layer list (trained at K = 1, or gathered from the K stages):
embed, L encoder layers, L decoder layers, softmax. The source is encoded once; then the decoder
runs step by step on the growing target prefix, taking the most likely next token, until every
sentence has produced EOS or reached its length limit ``a * source length + b`` (a = 1.5, b = 10
by default; target/source token ratios are ~1 on our corpora). Each step feeds only the newest token:
the decoder layers keep their self-attention keys/values and the projected source in a per-layer cache
(``DecoderLayer.forward(state, cache=...)``), so a step costs one position, not the whole prefix; the
tests check it against the full teacher-forced forward. Beam search is not implemented.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..data.translation.vocab import BOS, EOS, PAD, Vocab
from ..models.transformer import DecoderLayer, Embed, EncoderLayer, Softmax

__all__ = ["IncrementalDecoder", "split_layers", "greedy_decode", "translate_ids", "translate"]


def split_layers(
    layers: Sequence[nn.Module],
) -> tuple[Embed, list[nn.Module], list[nn.Module], Softmax]:
    """(embed, encoder layers, decoder layers, softmax) of a T(L, H, A) flat layer list."""
    layers = list(layers)
    if len(layers) < 4 or not isinstance(layers[0], Embed) or not isinstance(layers[-1], Softmax):
        raise ValueError(
            "layers must be a full T(L, H, A) list: embed, encoders, decoders, softmax"
        )
    enc: list[nn.Module] = [m for m in layers[1:-1] if isinstance(m, EncoderLayer)]
    dec: list[nn.Module] = [m for m in layers[1:-1] if isinstance(m, DecoderLayer)]
    if len(enc) + len(dec) != len(layers) - 2 or layers[1 : 1 + len(enc)] != enc:
        raise ValueError("layers must be embed, encoder layers, then decoder layers, then softmax")
    return layers[0], enc, dec, layers[-1]


class IncrementalDecoder:
    """The source encoded once; then ``step(tokens)`` feeds one target position and returns the
    next-token logits (B, V). Call it in eval mode, under ``torch.no_grad``."""

    def __init__(self, layers: Sequence[nn.Module], src: torch.Tensor) -> None:
        self.embed, encoders, self.decoders, self.softmax = split_layers(layers)
        self.mask = src != PAD
        enc = self.embed.embed(src)
        state: tuple[torch.Tensor, ...] = (enc, enc[:, :1], self.mask)  # no decoder state yet
        for layer in encoders:
            state = layer(state)
        self.enc = state[0]
        self.caches: list[dict] = [{} for _ in self.decoders]  # keys/values decoded so far
        self.t = 0

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        state = (self.enc, self.embed.embed(tokens[:, None], offset=self.t), self.mask)
        for layer, cache in zip(self.decoders, self.caches):
            state = layer(state, cache=cache)
        self.t += 1
        return self.softmax(state)[:, -1]


@torch.no_grad()
def greedy_decode(layers: Sequence[nn.Module], src: torch.Tensor, max_new: int) -> list[list[int]]:
    """Token ids (no BOS, no EOS) for each row of ``src`` (B, S), padded with PAD."""
    modules = list(layers)
    was_training = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        decoder = IncrementalDecoder(modules, src)
        ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_new):
            nxt = decoder.step(ys[:, -1]).argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == EOS
            if bool(done.all()):
                break
    finally:
        for m, t in zip(modules, was_training):
            m.train(t)
    out = []
    for row in ys[:, 1:].tolist():
        out.append(row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD])
    return out


def translate_ids(
    layers: Sequence[nn.Module],
    sources: Sequence[Sequence[int]],
    *,
    batch_sentences: int = 64,
    a: float = 1.5,
    b: int = 10,
) -> list[list[int]]:
    """Greedy output ids for source id lists (no specials), in the given order, batched by length."""
    device = next(layers[0].parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for k in range(0, len(order), batch_sentences):
        rows = order[k : k + batch_sentences]
        S = max(len(sources[i]) for i in rows) + 1
        src = torch.full((len(rows), S), PAD, dtype=torch.long)
        for j, i in enumerate(rows):
            src[j, : len(sources[i]) + 1] = torch.tensor([*sources[i], EOS])
        for i, hyp in zip(rows, greedy_decode(layers, src.to(device), int(a * S) + b)):
            out[i] = hyp
    return out


def translate(
    layers: Sequence[nn.Module], vocab: Vocab, texts: Sequence[str], **kwargs: int | float
) -> list[str]:
    """Plain-text translations of plain-text sources (SentencePiece in and out)."""
    return vocab.decode(translate_ids(layers, vocab.encode(texts), **kwargs))  # type: ignore[arg-type]
