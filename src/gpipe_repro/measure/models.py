"""The three small models the simulator is validated on, sized so every cell runs in well under a second.

- ``amoebanet``: AmoebaNet-D(3, 8) on 48x48 images (9 layers passing ``(current, previous)``; uneven
  cells, the paper's architecture at a CPU's scale);
- ``transformer``: Transformer-LM with 6 pre-LN layers, d 64, H 256, 2 heads, vocabulary 512,
  sequence 32 (8 layers: identical middle layers, an embedding and a softmax);
- ``imbalanced``: a conv stack whose one wide layer holds most of the work, so no partition can
  balance it (K = 2 splits it 1 : 3 or worse) — the simulator has to get an idle stage right.

Every model trains on a fixed random mini-batch of ``N`` = 32 samples (32 divides by every M of the
sweep, 1 .. 32; M = 32 is a micro-batch of one), with the real loss (cross-entropy) and RMSProp.
Weights are seeded per global layer index (``models.materialize``), as in a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..models import class_planning_loss, token_planning_loss
from ..models.amoebanet import amoebanet_layers
from ..models.materialize import materialize
from ..models.transformer import transformer_lm_layers, transformer_mt_layers

__all__ = ["ValidationModel", "MODELS", "PLAN_MODELS", "N", "model"]

N = 32


@dataclass(frozen=True)
class ValidationModel:
    name: str
    describe: str
    build: Callable[[], list[nn.Module]]  # the layers, built on the current device
    sample: Callable[[int], tuple[Any, torch.Tensor]]  # n -> (inputs, targets)
    loss: Callable[[Any, torch.Tensor], torch.Tensor]
    planning_loss: Callable[..., Any] = class_planning_loss  # the loss as the planner counts it

    def layers(self, seed: int = 0) -> list[nn.Module]:
        """Real, seeded layers (built on meta, then materialised per global index)."""
        with torch.device("meta"):
            meta = self.build()
        return materialize(meta, seed)

    def meta_layers(self) -> list[nn.Module]:
        with torch.device("meta"):
            return self.build()

    def received(self, layers: list[nn.Module], first: int, n: int) -> Any:
        """What ``layers[first]`` receives for the sample of ``n``: the layers before it run on it."""
        x = self.sample(n)[0]
        with torch.no_grad():
            for la in layers[:first]:
                x = la(x)
        return x


def _images(
    size: int, channels: int = 3, classes: int = 10
) -> Callable[[int], tuple[Any, torch.Tensor]]:
    def sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1000 + n)
        return (
            torch.randn(n, channels, size, size, generator=g),
            torch.randint(0, classes, (n,), generator=g),
        )

    return sample


def _tokens(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2000 + n)
    return torch.randint(0, 512, (n, 32), generator=g), torch.randint(0, 512, (n, 32), generator=g)


def _pairs(n: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """(source, target) token pairs of 16 tokens, no padding, and the target as the labels."""
    g = torch.Generator().manual_seed(3000 + n)
    src = torch.randint(1, 512, (n, 16), generator=g)
    tgt = torch.randint(1, 512, (n, 16), generator=g)
    return (src, tgt), tgt


def classify_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def lm_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.flatten(0, -2), y.flatten())


class ConvBlock(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())


class ConvHead(nn.Module):
    def __init__(self, cin: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def _imbalanced() -> list[nn.Module]:
    # conv 3x3 cost ~ cin * cout: 16x16 blocks cost 1, the 16->96 and 96x96 blocks 6 and 36.
    return [
        ConvBlock(3, 16),
        ConvBlock(16, 16),
        ConvBlock(16, 16),
        ConvBlock(16, 16),
        ConvBlock(16, 96),
        ConvBlock(96, 96),
        ConvBlock(96, 16),
        ConvBlock(16, 16),
        ConvHead(16, 10),
    ]


MODELS: dict[str, ValidationModel] = {
    "amoebanet": ValidationModel(
        "amoebanet",
        "AmoebaNet-D(3, 8), 48x48 images, 10 classes: 9 layers",
        lambda: amoebanet_layers("D", 3, 8, classes=10, image_size=48),
        _images(48),
        classify_loss,
    ),
    "transformer": ValidationModel(
        "transformer",
        "Transformer-LM L=6, d=64, H=256, A=2, vocabulary 512, sequence 32: 8 layers",
        lambda: transformer_lm_layers(6, 64, 256, 2, 512),
        _tokens,
        lm_loss,
        token_planning_loss,
    ),
    "imbalanced": ValidationModel(
        "imbalanced",
        "9 conv layers at 16x16, one 96x96 block holding most of the work",
        _imbalanced,
        _images(16),
        classify_loss,
    ),
}


# Measured only by the planner's validation (``planner``), not swept by validate-sim.
PLAN_MODELS: dict[str, ValidationModel] = {
    "translation": ValidationModel(
        "translation",
        "T(3, 256, 2): d=64, vocabulary 512, 16 source and 16 target tokens: 8 layers",
        lambda: transformer_mt_layers(3, 256, 2, d=64, V=512),
        _pairs,
        lm_loss,
        token_planning_loss,
    )
}


def model(name: str) -> ValidationModel:
    """A validation model by name, the planner's validation's own included."""
    return MODELS[name] if name in MODELS else PLAN_MODELS[name]
