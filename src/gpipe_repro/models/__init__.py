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
from .amoebanet import amoebanet_layers
from .transformer import transformer_lm_layers, transformer_mt_layers

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
    data_kind: Literal["image", "tokens", "pairs"]

    def layers(self, info: DataInfo, params: dict[str, Any]) -> list[nn.Module]:
        if info.kind != self.data_kind:
            raise UserError(f"model={self.name} needs {self.data_kind} data, but the dataset gives {info.kind}; "
                            f"choose a data option with {self.data_kind}")
        try:
            return self.build(info, **params)
        except (TypeError, ValueError) as err:
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


def _amoebanet(genotype: str):
    def build(info: DataInfo, L: int = 6, D: int = 32, dropout: float = 0.0) -> list[nn.Module]:
        c, h, w = info.shape
        if h != w:
            raise ValueError(f"AmoebaNet needs square images, got {h}x{w}")
        return amoebanet_layers(genotype, L, D, classes=info.classes, in_channels=c, image_size=h, dropout=dropout)

    return build


def _transformer_lm(info: DataInfo, L: int = 4, d: int = 128, H: int = 512, A: int = 4, dropout: float = 0.0,
                    ffn_init_scale: bool = False, logit_clip: float | None = None) -> list[nn.Module]:
    return transformer_lm_layers(L, d, H, A, info.classes, dropout=dropout, ffn_init_scale=ffn_init_scale,
                                 logit_clip=logit_clip)


def _transformer_mt(info: DataInfo, L: int = 2, H: int = 512, A: int = 2, d: int = 128, dropout: float = 0.0,
                    ffn_init_scale: bool = False, logit_clip: float | None = None) -> list[nn.Module]:
    return transformer_mt_layers(L, H, A, d, info.classes, dropout=dropout, ffn_init_scale=ffn_init_scale,
                                 logit_clip=logit_clip)


MODELS: dict[str, ModelSpec] = {
    "amoebanet_d": ModelSpec("amoebanet_d", _amoebanet("D"), "classify", "image"),
    "amoebanet_b": ModelSpec("amoebanet_b", _amoebanet("B"), "classify", "image"),
    "transformer_lm": ModelSpec("transformer_lm", _transformer_lm, "lm", "tokens"),
    "transformer_mt": ModelSpec("transformer_mt", _transformer_mt, "lm", "pairs"),
    "mlp": ModelSpec("mlp", _mlp, "classify", "image"),
    "tuplenet": ModelSpec("tuplenet", _tuplenet, "classify", "image"),
    "tokennet": ModelSpec("tokennet", _tokennet, "lm", "tokens"),
}


def get_model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UserError(f"model.name={name!r} is unknown; allowed: {', '.join(sorted(MODELS))}")
    return MODELS[name]
