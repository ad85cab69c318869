"""Per-rank functions for the save tests (imported by spawned ranks): train, save, load, report."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpipe_repro.engine import Pipeline, chunk_slices, init_topology
from gpipe_repro.models.toy import tuplenet_layers
from gpipe_repro.save import describe_model, load, save
from gpipe_repro.save.keys import layer_tensors, optimizer_tensors

CONFIG = {"channels": 8, "cells": 6, "classes": 5}
N, M = 16, 2


def build(seed: int = 0, dropout: float = 0.0, classes: int = 5) -> list[nn.Module]:
    """The tuplenet (stem, 6 cells, head = 8 layers) with BatchNorm, initialised from ``seed``."""
    torch.manual_seed(seed)
    return tuplenet_layers(
        in_channels=3, channels=8, cells=6, classes=classes, dropout=dropout, batchnorm=True
    )


def record(classes: int = 5, channels: int = 8, name: str = "tuplenet") -> dict[str, Any]:
    with torch.device("meta"):
        layers = tuplenet_layers(3, channels, 6, classes, batchnorm=True)
    return describe_model(name, {**CONFIG, "channels": channels, "classes": classes}, layers)


def optimizer(name: str, params: Any) -> torch.optim.Optimizer:
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=0.01, alpha=0.9, momentum=0.9, eps=1e-3)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data stream is a function of the step (as the project's datasets are)."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(N, 3, 8, 8, generator=g), torch.randint(0, 5, (N,), generator=g)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Ranks run one thread each; so must an in-process K = 1 run, for bit-equal results."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Run:
    """One rank's stage: topology, pipeline, optimiser."""

    def __init__(
        self,
        K: int,
        balance: list[int],
        opt: str,
        seed: int = 0,
        dropout: float = 0.0,
        replicas: int = 1,
        schedule: str = "gpipe",
    ) -> None:
        v = len(balance) // K  # several cells per stage: balance has K·v entries
        self.topo = init_topology(K, replicas, ring=v > 1)
        self.balance = balance
        slices = chunk_slices(balance, K, self.topo.stage)
        layers = build(seed, dropout)
        self.pipe = Pipeline(
            layers[slices[0]] if v == 1 else [layers[sl] for sl in slices],
            self.topo,
            M=M,
            schedule=schedule,
            loss_fn=nn.functional.cross_entropy,
            first_layer=slices[0].start if v == 1 else [sl.start for sl in slices],
            virtual_stages=v,
        )
        self.offset = self.pipe.layer_indices  # every layer's global index
        self.opt = optimizer(opt, self.pipe.parameters())
        self.losses: list[float] = []

    @property
    def layers(self) -> Any:
        return self.pipe.layers

    def train(self, start: int, stop: int) -> list[float]:
        topo, new = self.topo, []
        for step in range(start, stop):
            x, y = batch(step)
            n = N // topo.replicas
            x, y = (
                x[topo.replica * n : (topo.replica + 1) * n],
                y[topo.replica * n : (topo.replica + 1) * n],
            )
            loss = self.pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
            if loss is not None:
                new.append(loss)
        self.losses += new
        return new

    def state(self) -> dict[str, torch.Tensor]:
        """Every weight, buffer and optimiser-state tensor of this stage by global key (copies)."""
        t = {
            **layer_tensors(self.layers, self.offset),
            **optimizer_tensors(self.opt, self.layers, self.offset),
        }
        return {k: v.clone() for k, v in t.items()}

    def save(self, directory: str, step: int, **kw: Any) -> Path:
        return save(
            directory,
            step,
            self.layers,
            self.balance,
            self.topo,
            indices=self.offset,
            model=record(),
            optimizer=self.opt,
            losses=self.losses,
            run_config={"seed": 0},
            **kw,
        )

    def load(self, path: str | Path) -> Any:
        return load(
            path, self.layers, self.offset, optimizer=self.opt, model=record(), topology=self.topo
        )


def write_then_continue(
    K: int, balance: list[int], directory: str, steps: int, opt: str, schedule: str = "gpipe"
) -> dict:
    """Train ``steps``, save, then one more step: the state saved and the loss that follows."""
    run = Run(K, balance, opt, schedule=schedule)
    run.train(0, steps)
    run.save(directory, steps)
    state = run.state()
    nxt = run.train(steps, steps + 1)
    return {"state": state, "next": nxt, "after": run.state()}


def load_then_continue(
    K: int, balance: list[int], path: str, opt: str, schedule: str = "gpipe"
) -> dict:
    """Fresh layers (another seed), load, one step: the state loaded and the step's loss."""
    with one_thread():
        run = Run(K, balance, opt, seed=7, schedule=schedule)
        report = run.load(path)
        state = run.state()
        nxt = run.train(report.step, report.step + 1)
        return {
            "state": state,
            "next": nxt,
            "after": run.state(),
            "rng": report.rng,
            "losses": report.losses,
        }


def straight_and_interrupted(
    K: int, balance: list[int], directory: str, S: int, s: int, opt: str, dropout: float
) -> dict:
    """S steps straight; then, from scratch again, s steps and a save."""
    run = Run(K, balance, opt, dropout=dropout)
    run.train(0, S)
    straight = {"losses": run.losses, "final": run.state()}
    run = Run(K, balance, opt, dropout=dropout)
    run.train(0, s)
    run.save(directory, s)
    return straight


def resumed(K: int, balance: list[int], path: str, S: int, opt: str, dropout: float) -> dict:
    """In fresh processes: build (another seed), load, train to S."""
    run = Run(K, balance, opt, seed=7, dropout=dropout)
    report = run.load(path)
    run.losses = list(report.losses)
    run.train(report.step, S)
    return {"losses": run.losses, "final": run.state(), "rng": report.rng}


def replicated_save(directory: str, steps: int) -> dict:
    """K = 2 x 2 replicas: train, save; each rank's stage state."""
    run = Run(2, [3, 5], "rmsprop", replicas=2)
    run.train(0, steps)
    path = run.save(directory, steps)
    return {
        "stage": run.topo.stage,
        "replica": run.topo.replica,
        "state": run.state(),
        "path": str(path),
    }
