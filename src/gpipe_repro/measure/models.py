"""The small models the simulator is validated on, sized so every cell runs in well under a second.

- ``amoebanet``: AmoebaNet-D(3, 8) on 48x48 images (9 layers passing ``(current, previous)``; uneven
  cells, the paper's architecture at a CPU's scale);
- ``transformer``: Transformer-LM with 6 pre-LN layers, d 64, H 256, 2 heads, vocabulary 512,
  sequence 32 (8 layers: identical middle layers, an embedding and a softmax);
- ``imbalanced``: a conv stack whose one wide layer holds most of the work, so no partition can
  balance it (K = 2 splits it 1 : 3 or worse) — the simulator has to get an idle stage right;
- held out (``HELD_OUT``, below): ``plainconv``, a plain conv stack that halves the image and doubles
  the channels block by block (VGG-like, BatchNorm), and ``mlp``, an MLP of uneven widths.

**Calibration and held-out models.** Every term of the simulator fitted or chosen by looking at
cells (the engine's overheads and the sharing term come from a separate reference MLP,
``sim.measured.device``; the emulated call's CPU from ``Settings.call_model``; the dilation and the
modelled engine terms were settled on the first three models' cells) touched the calibration
models alone. The rule, fixed here: a model's ``family`` is held out when it is in ``HELD_OUT``;
a held-out model is profiled (its own layers are the simulator's input, as for any user's model)
and its cells are measured and reported apart, but no calibration step may run it
(``calibration_model`` refuses it). Two families no calibration ever touched make the held-out set.

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

__all__ = [
    "ValidationModel",
    "MODELS",
    "PLAN_MODELS",
    "HELD_OUT",
    "N",
    "model",
    "held_out",
    "calibration_model",
]

N = 32


@dataclass(frozen=True)
class ValidationModel:
    name: str
    describe: str
    build: Callable[[], list[nn.Module]]  # the layers, built on the current device
    sample: Callable[[int], tuple[Any, torch.Tensor]]  # n -> (inputs, targets)
    loss: Callable[[Any, torch.Tensor], torch.Tensor]
    planning_loss: Callable[..., Any] = class_planning_loss  # the loss as the planner counts it
    family: str = ""  # the architecture family the split rule reads (``HELD_OUT``); "": its name

    @property
    def group(self) -> str:
        return self.family or self.name

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


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def _plainconv() -> list[nn.Module]:
    """A VGG-like stack on 32x32 images: each stage halves the image and doubles the channels."""
    layers: list[nn.Module] = [ConvBlock(3, 16)]
    for cin in (16, 32, 64):
        layers += [
            nn.Sequential(
                nn.Conv2d(cin, 2 * cin, 3, stride=2, padding=1), nn.BatchNorm2d(2 * cin), nn.ReLU()
            ),
            ConvBlock(2 * cin, 2 * cin),
        ]
    return [*layers, ConvHead(128, 10)]


MLP_WIDTHS = (192, 768, 96, 1024, 256, 512, 64)  # uneven: no two layers cost the same


def _mlp() -> list[nn.Module]:
    """An MLP of uneven widths on flattened 16x16 RGB images (768 inputs)."""
    widths = (3 * 16 * 16, *MLP_WIDTHS)
    layers: list[nn.Module] = [nn.Sequential(Flatten(), nn.Linear(widths[0], widths[1]), nn.ReLU())]
    layers += [
        nn.Sequential(nn.Linear(a, b), nn.ReLU())
        for a, b in zip(widths[1:-1], widths[2:], strict=True)
    ]
    return [*layers, nn.Linear(widths[-1], 10)]


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
    "plainconv": ValidationModel(
        "plainconv",
        "a plain conv stack on 32x32 images, 16 -> 128 channels, BatchNorm: 8 layers (held out)",
        _plainconv,
        _images(32),
        classify_loss,
        family="plain-conv",
    ),
    "mlp": ValidationModel(
        "mlp",
        f"an MLP of uneven widths {'-'.join(map(str, MLP_WIDTHS))} on 16x16 images: 8 layers "
        "(held out)",
        _mlp,
        _images(16),
        classify_loss,
        family="uneven-mlp",
    ),
}

# The families no calibration touches (module doc): their models' cells are the held-out set.
HELD_OUT = frozenset({"plain-conv", "uneven-mlp"})


def held_out(name: str) -> bool:
    """Whether the validation model ``name`` is held out of every calibration (``HELD_OUT``)."""
    return model(name).group in HELD_OUT


def calibration_model(name: str) -> str:
    """``name``, checked to be a calibration model: every calibration step asks this before it runs
    a model, so a held-out model can never be fitted on."""
    if held_out(name):
        raise ValueError(
            f"model {name!r} is held out of calibration (family {model(name).group!r} is in "
            f"HELD_OUT); calibrate on one of {sorted(n for n in MODELS if not held_out(n))}"
        )
    return name


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
