"""Synthetic data with the model's shapes: the default for throughput and memory runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..options import opt
from .base import DataInfo, Dataset

__all__ = ["SyntheticConfig", "SyntheticImages", "SyntheticTokens", "SyntheticPairs", "synthetic"]

KINDS = ("image", "tokens", "pairs")


@dataclass
class SyntheticConfig:
    """Random data with the model's shapes: the default for throughput and memory runs."""

    name: str = "synthetic"
    kind: str = opt(
        "image",
        "image (classification), tokens (language model), pairs (translation)",
        choices=KINDS,
    )
    channels: int = opt(3, "image channels", min=1)
    image_size: int = opt(32, "image height and width", min=1)
    classes: int = opt(10, "image classes", min=1)
    seq_len: int = opt(64, "tokens per sequence", min=1)
    vocab: int = opt(1000, "vocabulary size", min=2)

    def info(self) -> DataInfo:
        if self.kind == "image":
            return DataInfo(
                "image", (self.channels, self.image_size, self.image_size), self.classes
            )
        return DataInfo("tokens" if self.kind == "tokens" else "pairs", (self.seq_len,), self.vocab)


class SyntheticImages(Dataset):
    name = "synthetic"

    def __init__(self, channels: int, image_size: int, classes: int) -> None:
        self.info = DataInfo("image", (channels, image_size, image_size), classes)

    def train_batch(
        self, step: int, batch_size: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return torch.randn(batch_size, *self.info.shape, generator=g), self.train_targets(
            step, batch_size, seed
        )

    def train_targets(self, step: int, batch_size: int, seed: int) -> torch.Tensor:
        """Labels from a generator of their own: the last stage draws them without the images."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step + 500_009)
        return torch.randint(0, self.info.classes, (batch_size,), generator=g)


class SyntheticTokens(Dataset):
    """Random token sequences; the target is the input shifted by one (a language-model task)."""

    name = "synthetic_tokens"

    def __init__(self, seq_len: int, vocab: int) -> None:
        self.info = DataInfo("tokens", (seq_len,), vocab)

    def train_batch(
        self, step: int, batch_size: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        seq = torch.randint(0, self.info.classes, (batch_size, self.info.shape[0] + 1), generator=g)
        return seq[:, :-1], seq[:, 1:]


class SyntheticPairs(Dataset):
    """Source/target token pairs for encoder-decoder models: the target is the reversed source.
    Input ``(source, target shifted right)``, label ``(target, tokens)`` with ``tokens`` the mini-batch's
    target-token count in every row (the per-token loss, ``models.transformer.token_loss``); token 0 is
    the start token (no padding: every token counts)."""

    name = "synthetic_pairs"

    def __init__(self, seq_len: int, vocab: int) -> None:
        self.info = DataInfo("pairs", (seq_len,), vocab)

    def train_batch(self, step: int, batch_size: int, seed: int) -> Any:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        src = torch.randint(1, self.info.classes, (batch_size, self.info.shape[0]), generator=g)
        tgt = src.flip(1)
        tgt_in = torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], dim=1)
        return (src, tgt_in), (tgt, torch.full((batch_size,), tgt.numel(), dtype=torch.long))


def synthetic(c: SyntheticConfig) -> Dataset:
    if c.kind == "image":
        return SyntheticImages(c.channels, c.image_size, c.classes)
    if c.kind == "tokens":
        return SyntheticTokens(c.seq_len, c.vocab)
    return SyntheticPairs(c.seq_len, c.vocab)
