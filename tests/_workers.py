"""Per-rank functions for the multi-process engine tests (imported by spawned ranks)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from gpipe_repro.engine import Pipeline, init_topology, stage_slice
from gpipe_repro.models.toy import tuplenet_layers


def make_layers(seed: int = 0, dropout: float = 0.0, batchnorm: bool = False) -> list[nn.Module]:
    torch.manual_seed(seed)
    return tuplenet_layers(in_channels=3, channels=8, cells=6, classes=5, dropout=dropout,
                           batchnorm=batchnorm)


def make_batch(N: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, 3, 8, 8, generator=g), torch.randint(0, 5, (N,), generator=g)


def reference_step(N: int = 16, dropout: float = 0.0, lr: float = 0.1, batchnorm: bool = False) -> dict:
    """One plain single-process SGD step on the whole mini-batch."""
    layers = make_layers(dropout=dropout, batchnorm=batchnorm)
    model = nn.Sequential(*layers)
    x, y = make_batch(N)
    torch.manual_seed(123)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return {"loss": loss.item(), "grads": grads, "params": [p.detach().clone() for p in model.parameters()],
            "buffers": {k: v.clone() for k, v in model.state_dict().items() if "running" in k}}


def pipeline_step(K: int, M: int, checkpoint: str, schedule: str, balance: list[int],
                  N: int = 16, dropout: float = 0.0, replicas: int = 1, lr: float = 0.1,
                  batchnorm: bool = False) -> dict:
    """One pipelined SGD step; returns this rank's slice of grads/params/buffers and its loss."""
    topo = init_topology(K, replicas)
    layers = make_layers(dropout=dropout, batchnorm=batchnorm)
    sl = stage_slice(balance, topo.stage)
    offset = sum(sum(1 for _ in l.parameters()) for l in layers[: sl.start])
    mine = copy.deepcopy(layers[sl])
    pipe = Pipeline(mine, topo, M=M, schedule=schedule, checkpoint=checkpoint,
                    loss_fn=nn.functional.cross_entropy)
    x, y = make_batch(N)
    n = N // replicas
    x, y = x[topo.replica * n:(topo.replica + 1) * n], y[topo.replica * n:(topo.replica + 1) * n]
    torch.manual_seed(123 + topo.rank * 0)
    loss = pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
    grads = [p.grad.clone() for p in pipe.parameters()]
    with torch.no_grad():
        for p in pipe.parameters():
            p -= lr * p.grad
    first_layer = sl.start
    bufs = {}
    for i, layer in enumerate(pipe.cell.layers):
        for k, v in layer.state_dict().items():
            if "running" in k:
                bufs[f"{first_layer + i}.{k}"] = v.clone()
    return {"stage": topo.stage, "replica": topo.replica, "offset": offset, "loss": loss,
            "grads": grads, "params": [p.detach().clone() for p in pipe.parameters()], "buffers": bufs,
            "peak_act": pipe.peak_activation_bytes}
