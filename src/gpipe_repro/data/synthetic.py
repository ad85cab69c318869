"""Synthetic data with the model's shapes: the default for throughput and memory runs."""

from __future__ import annotations

import torch

from ..errors import UserError
from .base import DataInfo, Dataset

__all__ = ["SyntheticImages", "SyntheticTokens", "synthetic"]


class SyntheticImages(Dataset):
    name = "synthetic"

    def __init__(self, channels: int, image_size: int, classes: int) -> None:
        self.info = DataInfo("image", (channels, image_size, image_size), classes)

    def train_batch(self, step: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return (torch.randn(batch_size, *self.info.shape, generator=g),
                torch.randint(0, self.info.classes, (batch_size,), generator=g))


class SyntheticTokens(Dataset):
    """Random token sequences; the target is the input shifted by one (a language-model task)."""

    name = "synthetic_tokens"

    def __init__(self, seq_len: int, vocab: int) -> None:
        self.info = DataInfo("tokens", (seq_len,), vocab)

    def train_batch(self, step: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        seq = torch.randint(0, self.info.classes, (batch_size, self.info.shape[0] + 1), generator=g)
        return seq[:, :-1], seq[:, 1:]


class SyntheticPairs(Dataset):
    """Source/target token pairs for encoder-decoder models: the target is the reversed source.
    Input ``(source, target shifted right)``, label ``target``; token 0 is the start token."""

    name = "synthetic_pairs"

    def __init__(self, seq_len: int, vocab: int) -> None:
        self.info = DataInfo("pairs", (seq_len,), vocab)

    def train_batch(self, step: int, batch_size: int, seed: int):  # type: ignore[override]
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        src = torch.randint(1, self.info.classes, (batch_size, self.info.shape[0]), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], dim=1)
        return (src, tgt_in), tgt


def synthetic(kind: str = "image", channels: int = 3, image_size: int = 32, classes: int = 10,
              seq_len: int = 64, vocab: int = 1000, **_: object) -> Dataset:
    if kind == "image":
        return SyntheticImages(channels, image_size, classes)
    if kind == "tokens":
        return SyntheticTokens(seq_len, vocab)
    if kind == "pairs":
        return SyntheticPairs(seq_len, vocab)
    raise UserError(f"data.kind={kind!r} is not allowed; allowed: image, tokens, pairs")
