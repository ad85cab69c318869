"""The engine benchmark's model and one rank's training step, shared by ``bench/engine.py`` and
``bench/hostmem.py``.

A compute-bound model: a stem and 8 3x3 convolutions at 64 channels on 16x16 inputs, batch 64, a
linear head; balance [5, 5] splits its compute equally at K = 2. With ``GPIPE_BENCH_DEVICE=cuda``
(set in the environment, so the ranks — fresh processes — see it too) it is widened to 256 channels
on 32x32 inputs and a batch of 256 (the CPU size is launch-bound on a GPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .engine import Pipeline, Topology, init_topology, single_process, stage_slice

__all__ = ["DEVICE", "CH", "HW", "DEPTH", "N", "BALANCE", "layers", "batch", "loss_fn", "ours_step"]

DEVICE = os.environ.get("GPIPE_BENCH_DEVICE", "cpu")
CH, HW, DEPTH, N, CLASSES = (64, 16, 8, 64, 10) if DEVICE == "cpu" else (256, 32, 8, 256, 10)
BALANCE = [5, 5]  # stem + 4 convs | 4 convs + head: equal compute


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(CH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def layers() -> list[nn.Module]:
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Conv2d(3, CH, 3, padding=1), nn.ReLU())
    body = [nn.Sequential(nn.Conv2d(CH, CH, 3, padding=1), nn.ReLU()) for _ in range(DEPTH)]
    return [stem, *body, Head()]


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, 3, HW, HW, generator=g), torch.randint(0, CLASSES, (N,), generator=g)


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y)


def ours_step(
    K: int,
    M: int,
    checkpoint: str,
    host_memory: str = "retain",
    topo: Topology | None = None,
    **extra: Any,
) -> tuple[Callable[[], None], Pipeline]:
    """This rank's training step through our engine (K = 1: one process, no communication);
    ``topo``: a topology built by the caller; ``extra``: more ``Pipeline`` arguments."""
    torch.set_num_threads(1)
    if topo is None:
        topo = init_topology(K, device=DEVICE) if K > 1 else single_process(DEVICE)
    mine = layers()[stage_slice(BALANCE if K == 2 else [sum(BALANCE)], topo.stage)]
    pipe = Pipeline(
        mine,
        topo,
        M=M,
        checkpoint=checkpoint,
        loss_fn=loss_fn,
        track_memory=False,
        host_memory=host_memory,
        **extra,
    )
    opt = torch.optim.SGD(pipe.parameters(), lr=0.01)
    # on the rank's device once, as the baselines have theirs: no step pays a host-to-device copy
    x, y = (t.to(topo.device) for t in batch())

    def step() -> None:
        pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
        opt.step()
        opt.zero_grad()

    return step, pipe
