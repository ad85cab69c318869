"""The transfer recipe's image transforms (GPipe §4: resize, random horizontal flip, cutout), seeded per sample.

GPipe §4 fine-tunes with inputs resized to the model's size, random horizontal flips and cutout
(DeVries & Taylor 2017, "Improved Regularization of Convolutional Neural Networks with Cutout").
Evaluation is resize + normalise only (single crop).

Reproducibility: every random draw of a training sample comes from a generator seeded by
``derive_seed(seed, epoch, index)`` (see :func:`apply_seeded`), never from a worker's RNG state, so a
sample is the same image whatever the number of DataLoader workers and after a resume.

Importing this module imports torchvision (seconds); dataset builders import it lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..engine.rng import derive_seed
from ._torchvision import import_torchvision

import_torchvision()
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

__all__ = [
    "Cutout",
    "apply_seeded",
    "channel_stats",
    "derive_seed",
    "eval_transform",
    "train_transform",
]


def apply_seeded(transform: Any, image: Any, seed: int) -> torch.Tensor:
    """``transform(image)`` with torch's global RNG seeded by ``seed`` for the call and restored after.

    torchvision's random transforms draw from the global CPU generator; seeding it for the call makes
    the draws a pure function of ``seed``, and restoring it leaves the caller's (or the worker's) RNG
    stream untouched (dropout in the training process must not depend on the data pipeline). Done by
    hand on the CPU generator alone: ``torch.random.fork_rng`` saves and restores every device's
    generator on every call, work out of proportion to a small image's transforms.
    """
    gen = torch.default_generator
    state = gen.get_state()
    try:
        gen.manual_seed(seed)
        out = transform(image)
    finally:
        gen.set_state(state)
    return out.as_subclass(torch.Tensor)


class Cutout(v2.Transform):
    """Zero a ``size`` x ``size`` square centred at a uniformly random pixel, clipped at the border.

    DeVries & Taylor (2017), §3: the centre is drawn over the whole image, so a square near the border
    is partly outside it and only its inside part is zeroed. As in their code, it is applied after
    normalisation, so the erased value 0 is the dataset mean. For even ``size`` the centre pixel is at
    offset ``size // 2`` inside the square. ``p``: the probability of applying it at all.
    (``v2.RandomErasing`` is different: it keeps the whole rectangle inside the image and draws its area
    and aspect ratio.)
    """

    def __init__(self, size: int, p: float = 1.0, value: float = 0.0) -> None:
        super().__init__()
        if size < 1:
            raise ValueError(f"Cutout size={size} must be >= 1")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Cutout p={p} must be in [0, 1]")
        self.size, self.p, self.value = int(size), float(p), float(value)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        h, w = F.get_size(flat_inputs[0])
        apply = torch.rand(1).item() < self.p
        cy, cx = int(torch.randint(h, (1,))), int(torch.randint(w, (1,)))
        if not apply:
            return {"box": None}
        top, left = cy - self.size // 2, cx - self.size // 2
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + self.size, h), min(left + self.size, w)
        return {"box": (y0, x0, y1 - y0, x1 - x0)}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if params["box"] is None:
            return inpt
        i, j, h, w = params["box"]
        return self._call_kernel(
            F.erase, inpt, i, j, h, w, v=torch.tensor(self.value), inplace=False
        )


def _to_float(image_size: int, native: tuple[int, int] | None) -> list[Any]:
    steps: list[Any] = [v2.ToImage()]
    if native != (image_size, image_size):  # unknown or different size: resize (antialiased)
        steps.append(v2.Resize((image_size, image_size), antialias=True))
    steps.append(v2.ToDtype(torch.float32, scale=True))
    return steps


def train_transform(
    image_size: int,
    *,
    mean: Sequence[float],
    std: Sequence[float],
    flip: bool,
    cutout: int,
    cutout_p: float = 1.0,
    native: tuple[int, int] | None = None,
) -> v2.Compose:
    """Resize, random horizontal flip (when ``flip``), normalise, cutout (when ``cutout`` > 0).

    ``native``: the source images' (H, W) when all share it (the resize is skipped when it equals
    ``image_size``); ``None`` when sizes vary.
    """
    steps = _to_float(image_size, native)
    if flip:
        steps.append(v2.RandomHorizontalFlip(p=0.5))
    steps.append(v2.Normalize(list(mean), list(std)))
    if cutout > 0:
        steps.append(Cutout(cutout, p=cutout_p))
    return v2.Compose(steps)


def eval_transform(
    image_size: int,
    *,
    mean: Sequence[float],
    std: Sequence[float],
    native: tuple[int, int] | None = None,
) -> v2.Compose:
    """Resize and normalise only: the single-crop evaluation of GPipe §4."""
    return v2.Compose(_to_float(image_size, native) + [v2.Normalize(list(mean), list(std))])


def channel_stats(images: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of uint8 images ``(N, C, H, W)`` on the [0, 1] scale.

    Exact and cheap: a 256-bin histogram per channel instead of a float copy of the whole set.
    """
    if images.dtype != torch.uint8 or images.dim() != 4:
        raise ValueError(
            f"images must be uint8 (N, C, H, W); got {images.dtype} {tuple(images.shape)}"
        )
    values = torch.arange(256, dtype=torch.float64) / 255.0
    means, stds = [], []
    for c in range(images.shape[1]):
        hist = torch.bincount(images[:, c].reshape(-1), minlength=256).double()
        n = hist.sum()
        m = (hist * values).sum() / n
        var = (hist * (values - m) ** 2).sum() / n
        means.append(float(m))
        stds.append(max(float(var.sqrt()), 1e-6))
    return means, stds
