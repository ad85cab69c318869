"""Datasets by name: synthetic shapes, real digits shipped in packages, torchvision sets from a root.

Each option is a spec: its config dataclass (the ``data.*`` keys, with ``info()``: the shapes, known
without loading anything) and its builder. A process builds a dataset once, and only where data is
needed (the first and last stages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .base import DataInfo, Dataset
from .digits import DigitsConfig, MNISTConfig, digits, mnist
from .synthetic import SyntheticConfig, synthetic
from .vision import VISION_CONFIGS, vision

__all__ = ["DATASETS", "DataInfo", "DataSpec", "Dataset", "get_data"]


@dataclass(frozen=True)
class DataSpec:
    name: str
    config: type  # the option's dataclass (its fields are the data.* keys); has info()
    build: Callable[[Any], Dataset]


DATASETS: dict[str, DataSpec] = {
    "synthetic": DataSpec("synthetic", SyntheticConfig, synthetic),
    "mnist": DataSpec("mnist", MNISTConfig, mnist),
    "digits": DataSpec("digits", DigitsConfig, digits),
    **{name: DataSpec(name, cls, vision) for name, cls in VISION_CONFIGS.items()},
}


def get_data(name: str) -> DataSpec:
    if name not in DATASETS:
        raise UserError(f"data.name={name!r} is unknown; allowed: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]
