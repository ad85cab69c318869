"""Models by name. Each is a spec: how to build its flat layer list for a dataset, and its task.

The runner never branches on a model's name: it asks the spec for layers, the loss and the metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..data.base import DataInfo
from ..errors import UserError
from . import toy

__all__ = ["ModelSpec", "MODELS", "get_model"]


def _classify_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _lm_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.flatten(0, -2), y.flatten())


def _correct(out: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    pred = out.argmax(dim=-1)
    return int((pred == y).sum()), int(y.numel())


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Callable[..., list[nn.Module]]  # build(info: DataInfo, **params)
    task: Literal["classify", "lm"]
    data_kind: Literal["image", "tokens"]

    def layers(self, info: DataInfo, params: dict[str, Any]) -> list[nn.Module]:
        if info.kind != self.data_kind:
            raise UserError(f"model={self.name} needs {self.data_kind} data, but the dataset gives {info.kind}; "
                            f"choose a data option with {self.data_kind}")
        try:
            return self.build(info, **params)
        except TypeError as err:
            raise UserError(f"model={self.name}: {err}") from None

    @property
    def loss_fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return _lm_loss if self.task == "lm" else _classify_loss

    @staticmethod
    def correct(out: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
        return _correct(out, y)


def _mlp(info: DataInfo, hidden: int = 256, depth: int = 4, dropout: float = 0.1, batchnorm: bool = True) -> list[nn.Module]:
    c, h, w = info.shape
    return toy.mlp_layers(c * h * w, hidden, depth, info.classes, dropout, batchnorm)


def _tuplenet(info: DataInfo, channels: int = 16, cells: int = 6, dropout: float = 0.1, batchnorm: bool = True) -> list[nn.Module]:
    return toy.tuplenet_layers(info.shape[0], channels, cells, info.classes, dropout, batchnorm)


def _tokennet(info: DataInfo, dim: int = 128, hidden: int = 512, blocks: int = 4, dropout: float = 0.1) -> list[nn.Module]:
    return toy.tokennet_layers(info.classes, dim, hidden, blocks, dropout)


MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec("mlp", _mlp, "classify", "image"),
    "tuplenet": ModelSpec("tuplenet", _tuplenet, "classify", "image"),
    "tokennet": ModelSpec("tokennet", _tokennet, "lm", "tokens"),
}


def get_model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UserError(f"model.name={name!r} is unknown; allowed: {', '.join(sorted(MODELS))}")
    return MODELS[name]
