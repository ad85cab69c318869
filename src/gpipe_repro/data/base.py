"""What a dataset gives the runner: its shapes, seeded training batches and an evaluation set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = ["DataInfo", "Dataset", "TensorDataset"]


@dataclass(frozen=True)
class DataInfo:
    kind: Literal["image", "tokens", "pairs"]
    shape: tuple[int, ...]  # (C, H, W) for images, (S,) for token sequences (and pairs of them)
    classes: int  # number of classes, or the vocabulary size for tokens

    @property
    def tokens_per_sample(self) -> int:
        return self.shape[0] if self.kind in ("tokens", "pairs") else 0

    def example(self, n: int, device: torch.device | str = "cpu") -> Any:
        """An input batch of ``n`` samples with this dataset's shapes (random images, token 1), for
        costing layers without the data: on ``meta`` it allocates nothing."""
        if self.kind == "image":
            if str(device) == "meta":
                return torch.empty(n, *self.shape, device="meta")
            return torch.randn(n, *self.shape, generator=torch.Generator().manual_seed(0)).to(
                device
            )
        tokens = torch.ones(n, *self.shape, dtype=torch.long, device=device)
        return (tokens, tokens.clone()) if self.kind == "pairs" else tokens


class Dataset:
    """Seeded, replica-aware mini-batches. ``batch(step)`` is the same on every rank."""

    info: DataInfo
    name: str = "dataset"

    def train_batch(
        self, step: int, batch_size: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def train_targets(self, step: int, batch_size: int, seed: int) -> Any:
        """The targets of ``train_batch(step, batch_size, seed)`` alone, for a stage that needs no
        inputs (the last); a dataset whose inputs cost more than its targets draws only these."""
        return self.train_batch(step, batch_size, seed)[1]

    def batches(
        self,
        start_step: int,
        batch_size: int,
        seed: int,
        *,
        multiple_of: int = 1,
        need_inputs: bool = True,
    ) -> Iterator[tuple[Any, Any]]:
        """Training mini-batches ``(inputs, targets)`` for steps ``start_step``, ``start_step + 1``, ...

        The sequence depends only on ``seed`` and the step, never on which process asks or where a run
        resumed (a save's data position is its step). ``multiple_of``: the number of sentences/samples in
        a batch must divide by it (the engine splits a mini-batch into M equal micro-batches) — datasets
        with a fixed ``batch_size`` already satisfy it. ``need_inputs=False`` lets a dataset skip loading
        inputs (the last stage only needs targets) and return ``None`` for them.
        """
        step = start_step
        while True:
            if need_inputs:
                yield self.train_batch(step, batch_size, seed)
            else:
                yield None, self.train_targets(step, batch_size, seed)
            step += 1

    def eval_set(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def eval_batches(self, batch_size: int = 256) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The evaluation split in order, ``batch_size`` samples at a time (none if there is no split).
        Image datasets stream it through a DataLoader instead of holding it in memory."""
        es = self.eval_set()
        if es is None:
            return
        x, y = es
        n = x[0].shape[0] if isinstance(x, tuple) else x.shape[0]
        for i in range(0, n, batch_size):
            xi = (
                tuple(t[i : i + batch_size] for t in x)
                if isinstance(x, tuple)
                else x[i : i + batch_size]
            )
            yield xi, y[i : i + batch_size]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "kind": self.info.kind,
            "shape": list(self.info.shape),
            "classes": self.info.classes,
        }


class TensorDataset(Dataset):
    """A dataset held in memory as tensors, with a held-out evaluation split."""

    def __init__(
        self,
        name: str,
        x: torch.Tensor,
        y: torch.Tensor,
        info: DataInfo,
        eval_size: int,
        seed: int = 0,
    ) -> None:
        self.name, self.info = name, info
        g = torch.Generator().manual_seed(1234)  # the split never depends on the run's seed
        perm = torch.randperm(x.shape[0], generator=g)
        ev, tr = perm[:eval_size], perm[eval_size:]
        self.x_train, self.y_train = x[tr], y[tr]
        self.x_eval, self.y_eval = x[ev], y[ev]

    def _indices(self, step: int, batch_size: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return torch.randint(0, self.x_train.shape[0], (batch_size,), generator=g)

    def train_batch(
        self, step: int, batch_size: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        idx = self._indices(step, batch_size, seed)
        return self.x_train[idx], self.y_train[idx]

    def train_targets(self, step: int, batch_size: int, seed: int) -> torch.Tensor:
        return self.y_train[self._indices(step, batch_size, seed)]

    def eval_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x_eval, self.y_eval

    def describe(self) -> dict:
        return {
            **super().describe(),
            "train_size": int(self.x_train.shape[0]),
            "eval_size": int(self.x_eval.shape[0]),
        }
