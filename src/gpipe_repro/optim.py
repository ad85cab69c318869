"""Optimisers by name: each option's config (the ``optim.*`` keys) and how to build it for a stage.

Every stage builds its own optimiser over its own parameters; since the engine leaves every stage's
gradients equal to the full mini-batch's, one step per stage is GPipe's synchronous update (§2.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .errors import UserError
from .options import opt

__all__ = [
    "RMSpropConfig",
    "SGDConfig",
    "AdamConfig",
    "OptimSpec",
    "OPTIMIZERS",
    "build_optimizer",
    "LR_SCHEDULES",
    "lr_factor",
    "set_lr",
]

LR_SCHEDULES = ("constant", "cosine", "rsqrt")


@dataclass
class RMSpropConfig:
    """The paper's optimiser (weights + grads + one running average: 12 bytes per parameter)."""

    name: str = "rmsprop"
    lr: float = opt(1e-3, "learning rate", min=0)
    alpha: float = opt(0.9, "decay of the running average of squared gradients", min=0, max=1)
    eps: float = opt(1e-8, "added to the denominator", min=0)
    momentum: float = opt(0.0, "momentum", min=0)
    weight_decay: float = opt(0.0, "L2 penalty", min=0)


@dataclass
class SGDConfig:
    """Stochastic gradient descent with momentum."""

    name: str = "sgd"
    lr: float = opt(0.05, "learning rate", min=0)
    momentum: float = opt(0.9, "momentum", min=0)
    weight_decay: float = opt(0.0, "L2 penalty", min=0)


@dataclass
class AdamConfig:
    """Adam."""

    name: str = "adam"
    lr: float = opt(1e-3, "learning rate", min=0)
    betas: list[float] = opt(
        [0.9, 0.999],
        "decay rates of the two moment estimates",
        allowed="two numbers [beta1, beta2], each in [0, 1)",
    )
    eps: float = opt(1e-8, "added to the denominator", min=0)
    weight_decay: float = opt(0.0, "L2 penalty", min=0)


def _rmsprop(params: Iterable[Any], c: RMSpropConfig) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(
        params, lr=c.lr, alpha=c.alpha, eps=c.eps, momentum=c.momentum, weight_decay=c.weight_decay
    )


def _sgd(params: Iterable[Any], c: SGDConfig) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay)


def _adam(params: Iterable[Any], c: AdamConfig) -> torch.optim.Optimizer:
    b1, b2 = c.betas
    return torch.optim.Adam(params, lr=c.lr, betas=(b1, b2), eps=c.eps, weight_decay=c.weight_decay)


def _check_betas(c: AdamConfig) -> None:
    b = list(c.betas)
    if len(b) != 2 or not all(0.0 <= float(v) < 1.0 for v in b):
        raise UserError(
            f"optim.betas={b} is invalid; allowed: two numbers [beta1, beta2], each in [0, 1)"
        )


@dataclass(frozen=True)
class OptimSpec:
    name: str
    config: type
    build: Callable[[Iterable[Any], Any], torch.optim.Optimizer]
    check: Callable[[Any], None] | None = None  # checks beyond each field's own bounds


OPTIMIZERS: dict[str, OptimSpec] = {
    "rmsprop": OptimSpec("rmsprop", RMSpropConfig, _rmsprop),
    "sgd": OptimSpec("sgd", SGDConfig, _sgd),
    "adam": OptimSpec("adam", AdamConfig, _adam, _check_betas),
}


def build_optimizer(params: Iterable[Any], cfg: Any) -> torch.optim.Optimizer:
    return OPTIMIZERS[cfg.name].build(params, cfg)


def lr_factor(schedule: str, step: int, steps: int, warmup: int = 0) -> float:
    """The learning rate of ``step`` (0-based) as a fraction of the configured one: a linear warm-up over
    ``warmup`` steps, then constant, a cosine decay reaching 0 after ``steps``, or the Transformer's
    inverse square root decay ``sqrt(warmup / (step + 1))`` (Vaswani et al. 2017, §5.3; the schedule
    of the paper's §5 models). A function of the step alone, so a resumed run follows the same
    schedule with no state to save; ``constant`` and ``rsqrt`` ignore ``steps``, so the first U steps
    of a longer run are a U-step run."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "rsqrt":
        return math.sqrt(max(warmup, 1) / (step + 1))
    span = max(steps - warmup, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, span) / span))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
