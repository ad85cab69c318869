"""Models by name. Each is a spec: its config (options, defaults, docs), how to build its flat layer
list for a dataset, and its task.

The runner never branches on a model's name: it asks the spec for layers, the loss and the metric.
Layers are built on whatever device is current — the runner builds them on ``meta`` (no memory) and
materialises only its own stage's layers (``models.materialize``).
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
from ..options import opt
from . import toy
from .amoebanet import amoebanet_layers
from .materialize import materialize
from .transformer import PAD_ID, token_loss, transformer_lm_layers, transformer_mt_layers

__all__ = [
    "ModelSpec",
    "MODELS",
    "get_model",
    "materialize",
    "class_planning_loss",
    "token_planning_loss",
]


def _classify_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _lm_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.flatten(0, -2), y.flatten())


def class_planning_loss(out: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of a (batch, classes) output against class 0: the loss's cost and saved tensors
    without targets, for counting and planning on the meta device."""
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long, device=out.device))


def token_planning_loss(out: torch.Tensor) -> torch.Tensor:
    """Token-level cross-entropy of a (batch, sequence, vocabulary) output against token 0: the
    same, for sequence models (language modelling and translation alike)."""
    flat = out.flatten(0, -2)
    return F.cross_entropy(flat, torch.zeros(flat.shape[0], dtype=torch.long, device=out.device))


def _correct(out: torch.Tensor, y: Any) -> tuple[int, int]:
    """Correct predictions and how many were counted; translation targets ``(tgt, tokens)`` count the
    non-padding target tokens only."""
    if isinstance(y, tuple):
        tgt = y[0]
        keep = tgt != PAD_ID
        return int(((out.argmax(dim=-1) == tgt) & keep).sum()), int(keep.sum())
    pred = out.argmax(dim=-1)
    return int((pred == y).sum()), int(y.numel())


# ------------------------------------------------------------------------------ configs
@dataclass
class MLPConfig:
    """Linear-BatchNorm-ReLU-Dropout blocks on flattened images: depth + 2 layers (the demo's model)."""

    name: str = "mlp"
    hidden: int = opt(256, "width of every hidden block", min=1)
    depth: int = opt(4, "hidden blocks", min=1)
    dropout: float = opt(0.1, "dropout after every block", min=0, max=1)
    batchnorm: bool = opt(True, "BatchNorm in every block (micro-batch BatchNorm in the pipeline)")


@dataclass
class TuplenetConfig:
    """AmoebaNet-shaped and small: stem, cells passing (current, previous), head: cells + 2 layers."""

    name: str = "tuplenet"
    channels: int = opt(16, "channels of every cell", min=1)
    cells: int = opt(6, "cells", min=1)
    dropout: float = opt(0.1, "dropout inside every cell", min=0, max=1)
    batchnorm: bool = opt(True, "BatchNorm in every cell")


@dataclass
class TokennetConfig:
    """Transformer-LM-shaped and small: embedding, residual blocks carrying (h, h0), softmax: blocks + 2 layers."""

    name: str = "tokennet"
    dim: int = opt(128, "model width", min=1)
    hidden: int = opt(512, "feed-forward width", min=1)
    blocks: int = opt(4, "residual blocks", min=1)
    dropout: float = opt(0.1, "dropout in every block", min=0, max=1)


@dataclass
class AmoebaNetDConfig:
    """AmoebaNet-D(L, D) (paper Tables 1-3): L + 6 layers passing (current, previous). Paper sizes:
    model.L=18 model.D=208 (82M) ... model.L=72 model.D=512 (1.8B) at 224x224, 1000 classes.
    The default AmoebaNet-D(6, 32) trains on a CPU (image size and classes come from the data)."""

    name: str = "amoebanet_d"
    L: int = opt(6, "normal cells, three stacks of L/3", min=3, allowed="a positive multiple of 3")
    D: int = opt(32, "filters of the first stack", min=4, allowed="a positive multiple of 4")
    dropout: float = opt(0.0, "dropout before the classifier", min=0, max=1)


@dataclass
class AmoebaNetBConfig(AmoebaNetDConfig):
    """AmoebaNet-B(L, D) (paper Table 4: AmoebaNet-B(18, 512), 557M parameters at 480x480)."""

    name: str = "amoebanet_b"


@dataclass
class TransformerLMConfig:
    """Transformer-L language model (paper Tables 1-3): embed, L pre-LN layers, softmax = L + 2 layers.
    Paper dims: model.d=2048 model.H=8192 model.A=32 with data.vocab=32000 data.seq_len=1024."""

    name: str = "transformer_lm"
    L: int = opt(4, "layers", min=1)
    d: int = opt(128, "model dimension", min=1)
    H: int = opt(512, "feed-forward hidden size", min=1)
    A: int = opt(4, "attention heads (must divide d)", min=1)
    dropout: float = opt(0.0, "dropout", min=0, max=1)
    ffn_init_scale: bool = opt(
        False, "paper §5: scale the feed-forward initialisation down by the layers"
    )
    logit_clip: float | None = opt(
        None, "paper §5: clip softmax pre-activations to [-c, c]; null = off", min=0
    )


@dataclass
class TransformerMTConfig:
    """T(L, H, A) encoder-decoder (paper §5): embed, L encoder + L decoder layers, softmax = 2L + 2
    layers. Paper dims: model.d=1024, data.vocab=64000; e.g. T(6,8192,16): model.L=6 model.H=8192 model.A=16."""

    name: str = "transformer_mt"
    L: int = opt(2, "encoder layers (and as many decoder layers)", min=1)
    H: int = opt(512, "feed-forward hidden size", min=1)
    A: int = opt(2, "attention heads of 64 dimensions", min=1)
    d: int = opt(128, "model dimension", min=1)
    dropout: float = opt(0.0, "dropout", min=0, max=1)
    ffn_init_scale: bool = opt(
        False, "paper §5: scale the feed-forward initialisation down by the layers"
    )
    logit_clip: float | None = opt(
        None, "paper §5: clip softmax pre-activations to [-c, c]; null = off", min=0
    )


# ------------------------------------------------------------------------------ builders
def _mlp(info: DataInfo, c: MLPConfig) -> list[nn.Module]:
    ch, h, w = info.shape
    return toy.mlp_layers(ch * h * w, c.hidden, c.depth, info.classes, c.dropout, c.batchnorm)


def _tuplenet(info: DataInfo, c: TuplenetConfig) -> list[nn.Module]:
    return toy.tuplenet_layers(
        info.shape[0], c.channels, c.cells, info.classes, c.dropout, c.batchnorm
    )


def _tokennet(info: DataInfo, c: TokennetConfig) -> list[nn.Module]:
    return toy.tokennet_layers(info.classes, c.dim, c.hidden, c.blocks, c.dropout)


def _amoebanet(genotype: str) -> Callable[[DataInfo, AmoebaNetDConfig], list[nn.Module]]:
    def build(info: DataInfo, c: AmoebaNetDConfig) -> list[nn.Module]:
        ch, h, w = info.shape
        if h != w:
            raise ValueError(f"AmoebaNet needs square images, got {h}x{w}")
        return amoebanet_layers(
            genotype,
            c.L,
            c.D,
            classes=info.classes,
            in_channels=ch,
            image_size=h,
            dropout=c.dropout,
        )

    return build


def _transformer_lm(info: DataInfo, c: TransformerLMConfig) -> list[nn.Module]:
    return transformer_lm_layers(
        c.L,
        c.d,
        c.H,
        c.A,
        info.classes,
        dropout=c.dropout,
        ffn_init_scale=c.ffn_init_scale,
        logit_clip=c.logit_clip,
    )


def _transformer_mt(info: DataInfo, c: TransformerMTConfig) -> list[nn.Module]:
    return transformer_mt_layers(
        c.L,
        c.H,
        c.A,
        c.d,
        info.classes,
        dropout=c.dropout,
        ffn_init_scale=c.ffn_init_scale,
        logit_clip=c.logit_clip,
    )


@dataclass(frozen=True)
class ModelSpec:
    name: str
    config: type  # the option's dataclass (its fields are the model.* keys)
    build: Callable[[DataInfo, Any], list[nn.Module]]
    task: Literal["classify", "lm", "translate"]
    data_kind: Literal["image", "tokens", "pairs"]
    # "mean": the loss is each micro-batch's mean (the engine divides by M); "sum": each micro-batch's
    # share of the mini-batch's per-token loss (translation: micro-batches hold unequal token counts)
    loss_reduction: Literal["mean", "sum"] = "mean"

    def layers(self, info: DataInfo, cfg: Any) -> list[nn.Module]:
        """The flat layer list, built on the current device (``meta`` for a plan: no memory)."""
        if info.kind != self.data_kind:
            raise UserError(
                f"model={self.name} needs {self.data_kind} data, but the dataset gives {info.kind}; "
                f"choose a data option with {self.data_kind}"
            )
        try:
            return self.build(info, cfg)
        except (TypeError, ValueError) as err:
            raise UserError(f"model={self.name}: {err}") from None

    @property
    def loss_fn(self) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        if self.task == "translate":
            return token_loss
        return _lm_loss if self.task == "lm" else _classify_loss

    @property
    def planning_loss(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The loss without targets (its FLOPs and saved tensors are the real loss's): what counting
        and memory planning on the meta device run after the last layer."""
        return class_planning_loss if self.task == "classify" else token_planning_loss

    @staticmethod
    def correct(out: torch.Tensor, y: Any) -> tuple[int, int]:
        return _correct(out, y)


MODELS: dict[str, ModelSpec] = {
    "amoebanet_d": ModelSpec("amoebanet_d", AmoebaNetDConfig, _amoebanet("D"), "classify", "image"),
    "amoebanet_b": ModelSpec("amoebanet_b", AmoebaNetBConfig, _amoebanet("B"), "classify", "image"),
    "transformer_lm": ModelSpec(
        "transformer_lm", TransformerLMConfig, _transformer_lm, "lm", "tokens"
    ),
    "transformer_mt": ModelSpec(
        "transformer_mt",
        TransformerMTConfig,
        _transformer_mt,
        "translate",
        "pairs",
        loss_reduction="sum",
    ),
    "mlp": ModelSpec("mlp", MLPConfig, _mlp, "classify", "image"),
    "tuplenet": ModelSpec("tuplenet", TuplenetConfig, _tuplenet, "classify", "image"),
    "tokennet": ModelSpec("tokennet", TokennetConfig, _tokennet, "lm", "tokens"),
}


def get_model(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UserError(f"model.name={name!r} is unknown; allowed: {', '.join(sorted(MODELS))}")
    return MODELS[name]
