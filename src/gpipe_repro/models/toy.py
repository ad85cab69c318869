"""Small models of our own, each a flat list of layers, that exercise what the paper's models need.

- ``mlp``: Linear-BatchNorm-ReLU-Dropout blocks on flattened images (the demo's model).
- ``tuplenet``: AmoebaNet-shaped: a stem, then cells that take and return ``(current, previous)``
  with Conv-BatchNorm and dropout, then a classifier head.
- ``tokennet``: an embedding, tuple-passing residual blocks with LayerNorm and dropout, a softmax
  layer — the shape of a Transformer language model, small.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["mlp_layers", "tuplenet_layers", "tokennet_layers", "PairCell", "TokenBlock"]


def mlp_layers(
    in_features: int,
    hidden: int,
    depth: int,
    classes: int,
    dropout: float = 0.1,
    batchnorm: bool = True,
) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for _ in range(depth):
        block: list[nn.Module] = [nn.Linear(width, hidden)]
        if batchnorm:
            block.append(nn.BatchNorm1d(hidden))
        block += [nn.ReLU(), nn.Dropout(dropout)]
        layers.append(nn.Sequential(*block))
        width = hidden
    layers.append(nn.Linear(width, classes))
    return layers


def _bn(ch: int, batchnorm: bool) -> nn.Module:
    return nn.BatchNorm2d(ch) if batchnorm else nn.Identity()


class Stem(nn.Module):
    def __init__(self, in_ch: int, ch: int, batchnorm: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, ch, 3, padding=1, bias=False)
        self.bn = _bn(ch, batchnorm)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.bn(self.conv(x))
        return h, h


class PairCell(nn.Module):
    """(current, previous) -> (new, current), new = op(current) + 1x1(previous)."""

    def __init__(self, ch: int, dropout: float, batchnorm: bool = True) -> None:
        super().__init__()
        self.op = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1, bias=False),
            _bn(ch, batchnorm),
            nn.Dropout(dropout),
        )
        self.skip = nn.Sequential(nn.ReLU(), nn.Conv2d(ch, ch, 1, bias=False), _bn(ch, batchnorm))

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        cur, prev = pair
        return self.op(cur) + self.skip(prev), cur


class PairHead(nn.Module):
    def __init__(self, ch: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(ch, classes)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.fc(torch.relu(pair[0]).mean(dim=(2, 3)))


def tuplenet_layers(
    in_channels: int,
    channels: int,
    cells: int,
    classes: int,
    dropout: float = 0.1,
    batchnorm: bool = True,
) -> list[nn.Module]:
    return [
        Stem(in_channels, channels, batchnorm),
        *[PairCell(channels, dropout, batchnorm) for _ in range(cells)],
        PairHead(channels, classes),
    ]


class Embed(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.emb(tokens)
        return h, h


class TokenBlock(nn.Module):
    """(h, h0) -> (h + FFN(LN(h)), h0): residual block that carries the embedding along."""

    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.ff = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, dim)
        )

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, h0 = pair
        return h + self.ff(self.ln(h)), h0


class TokenHead(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, vocab)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h, h0 = pair
        return self.proj(h + h0)


def tokennet_layers(
    vocab: int, dim: int, hidden: int, blocks: int, dropout: float = 0.1
) -> list[nn.Module]:
    return [
        Embed(vocab, dim),
        *[TokenBlock(dim, hidden, dropout) for _ in range(blocks)],
        TokenHead(dim, vocab),
    ]
