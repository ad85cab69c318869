"""Datasets by name: synthetic shapes, real digits shipped in packages, Fashion-MNIST from Debian's
archive, torchvision sets from a root, and parallel text for translation (Debian packages or a root).

Each option is a spec: its config dataclass (the ``data.*`` keys, with ``info()``: the shapes, known
without loading anything) and its builder. A process builds a dataset once, and only where data is
needed (the first and last stages). Image builders import torchvision only when called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .base import DataInfo, Dataset
from .digits import (
    DigitsConfig,
    DigitsImagesConfig,
    MNISTConfig,
    MNISTImagesConfig,
    digits,
    digits_images,
    mnist,
    mnist_images,
)
from .fashion_mnist import FashionMNISTConfig, fashion_mnist
from .synthetic import SyntheticConfig, synthetic
from .translation import TranslationConfig, translation
from .vision import VISION_CONFIGS, vision

__all__ = ["DATASETS", "DataInfo", "DataSpec", "Dataset", "get_data", "build_dataset"]


@dataclass(frozen=True)
class DataSpec:
    name: str
    config: type  # the option's dataclass (its fields are the data.* keys); has info()
    build: Callable[[Any], Dataset]
    batch_tokens: bool = False  # train.batch_size counts target tokens, not samples (translation)
    text: bool = False  # real text: a translation model on it is decoded and scored with BLEU


DATASETS: dict[str, DataSpec] = {
    "synthetic": DataSpec("synthetic", SyntheticConfig, synthetic),
    "mnist": DataSpec("mnist", MNISTConfig, mnist),
    "digits": DataSpec("digits", DigitsConfig, digits),
    "fashion_mnist": DataSpec("fashion_mnist", FashionMNISTConfig, fashion_mnist),
    "mnist_images": DataSpec("mnist_images", MNISTImagesConfig, mnist_images),
    "digits_images": DataSpec("digits_images", DigitsImagesConfig, digits_images),
    "translation": DataSpec(
        "translation", TranslationConfig, translation, batch_tokens=True, text=True
    ),
    **{name: DataSpec(name, cls, vision) for name, cls in VISION_CONFIGS.items()},
}


def get_data(name: str) -> DataSpec:
    if name not in DATASETS:
        raise UserError(f"data.name={name!r} is unknown; allowed: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def build_dataset(name: str, options: dict[str, Any] | None = None) -> Dataset:
    """Build dataset ``name`` with ``options`` (its ``data.*`` keys) outside a composed config: checked
    like a config would be (unknown keys and bounds, one line). For scripts and tests."""
    from dataclasses import fields

    from ..options import check_fields

    spec = get_data(name)
    allowed = [f.name for f in fields(spec.config) if f.name != "name"]
    for key in options or {}:
        if key not in allowed:
            raise UserError(
                f"data.{key} is not an option of data={name}; allowed: {', '.join(allowed)}"
            )
    cfg = spec.config(**(options or {}))
    check_fields(cfg, "data")
    return spec.build(cfg)
