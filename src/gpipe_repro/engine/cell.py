"""A cell: a contiguous run of the model's layers on one stage (paper §2.1), and which cells a rank holds.

A rank holds one cell (``stage_slice``), or with several virtual stages per rank v cells, model
stages k, k+K, ..., k+(v-1)K (``chunk_slices``; ``schedule``): ``balance`` then counts the layers of
every model stage, K·v entries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from .errors import ArgumentError
from .microbatch import Batch
from .precision import cast_floats
from .rng import Draws
from .split import Tape

__all__ = ["Cell", "stage_slice", "chunk_slices", "check_cells"]


class Cell(nn.Module):
    """A contiguous run of layers; each takes the previous one's output (tensor or tuple).

    ``dtype``: each layer's float outputs are cast to it (mixed precision: the casts sit at layer
    boundaries, so a stage boundary adds none); None leaves them as the layer returns them.
    ``draws``: key each layer's random draws (see ``rng``); a call inside :meth:`keyed` uses that
    (step, micro-batch), a call outside draws from the process's streams. A call inside
    :meth:`taped` records every layer's input and output on the tape (``split``), each layer
    reading a cut of the previous one's output."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        dtype: torch.dtype | None = None,
        draws: Draws | None = None,
    ) -> None:
        super().__init__()
        self.layers: nn.ModuleList = nn.ModuleList(layers)
        self.dtype = dtype
        self.draws = draws
        self._key: tuple[int, int] | None = None
        self._tape: Tape | None = None

    @contextlib.contextmanager
    def keyed(self, step: int, mb: int) -> Iterator[None]:
        """Calls inside draw with the keys of ``step`` and micro-batch ``mb`` (if keyed at all)."""
        self._key = (step, mb) if self.draws is not None else None
        try:
            yield
        finally:
            self._key = None

    @contextlib.contextmanager
    def taped(self, tape: Tape | None) -> Iterator[None]:
        """Calls inside record on ``tape`` (None: no tape)."""
        self._tape = tape
        try:
            yield
        finally:
            self._tape = None

    def forward(self, x: Batch) -> Batch:
        draws, key, tape = self.draws, self._key, self._tape
        keyed = draws is not None and key is not None
        with draws.kept_outside() if keyed and draws is not None else contextlib.nullcontext():
            y = x
            for j, layer in enumerate(self.layers):
                if keyed and draws is not None and key is not None:
                    draws.seed_layer(key[0], key[1], j)
                y = cast_floats(layer(x), self.dtype)
                x = tape.record(x, y) if tape is not None else y
        return y


def stage_slice(balance: Sequence[int], stage: int) -> slice:
    """The global layers of model stage ``stage`` (``balance``: layers per model stage)."""
    start = sum(balance[:stage])
    return slice(start, start + balance[stage])


def chunk_slices(balance: Sequence[int], K: int, stage: int) -> list[slice]:
    """The global layers of each chunk rank ``stage`` of K holds: model stages stage, stage + K, ...
    (``balance`` has K·v entries, v = len(balance) // K)."""
    if K < 1 or len(balance) % K or not 0 <= stage < K:
        raise ValueError(f"balance={list(balance)} does not give K={K} ranks whole chunks")
    return [stage_slice(balance, s) for s in range(stage, len(balance), K)]


def check_cells(K: int, v: int, num_layers: int) -> None:
    """One line unless K ranks of v cells each can hold ``num_layers`` layers, one at least each."""
    if K * v > num_layers:
        raise ArgumentError(
            "virtual_stages",
            v,
            f"leaves a cell empty: K={K} x {v} = {K * v} cells for the model's {num_layers} "
            f"layers; allowed: 1..{max(1, num_layers // K)}",
        )
