"""Datasets by name: synthetic shapes, real digits shipped in packages, Fashion-MNIST from Debian, and
torchvision sets from a root. Image builders import torchvision only when called."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import UserError
from .base import DataInfo, Dataset
from .digits import digits, digits_images, mnist, mnist_images
from .fashion_mnist import fashion_mnist
from .synthetic import synthetic
from .vision import VISION_SETS, vision

__all__ = ["DATASETS", "DataInfo", "Dataset", "build_dataset"]

DATASETS: dict[str, Callable[..., Dataset]] = {
    "synthetic": synthetic,
    "mnist": mnist,
    "digits": digits,
    "fashion_mnist": fashion_mnist,
    "mnist_images": mnist_images,
    "digits_images": digits_images,
    **{name: partial(vision, name) for name in VISION_SETS},
}


def build_dataset(name: str, params: dict[str, Any]) -> Dataset:
    if name not in DATASETS:
        raise UserError(f"data.name={name!r} is unknown; allowed: {', '.join(sorted(DATASETS))}")
    return DATASETS[name](**params)
