"""Random draws keyed by what they belong to, so that K, the schedule and remat never change a bit.

GPipe's update is synchronous (§2.2): the partition is an execution detail, and a run at K = 4 should
be the very experiment it is at K = 1. Dropout breaks that if each rank draws from its own stream:
the masks a layer gets would depend on which process runs it and on what that process drew before.
So every layer draws from the default generators of its device re-seeded, just before it runs, from
its key: (run seed, step, micro-batch, global layer index). Then

- K, the balance, the schedule and remat change nothing: a layer's draws depend on its key only;
- recompute (§2.3) replays the forward's draws: same key, same masks, no state to save;
- a resumed run continues the same keys: the key holds the step number, nothing since process start.

Micro-batch boundaries do change the draws: M is part of the experiment (it also changes BatchNorm's
statistics), so the promise is "whatever K, schedule and remat, at fixed M". The outer streams are
left as they were (saved before the cell runs, restored after), so data order and anything else
the caller draws are untouched. On CUDA the device's generator (Philox: a seed and an offset) is
seeded too, beside the CPU's (a layer could draw on either).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["INFERENCE_STEP", "Draws", "derive_seed", "draw_seed"]

INFERENCE_STEP = -1  # the step of the keys of ``Pipeline.forward`` (inference draws nothing in
# eval mode unless a layer samples on purpose; keyed anyway, so it too is the same whatever K)
_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    # SplitMix64's finaliser (Steele, Lea & Flood 2014): decorrelates nearby integers.
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, e.g. ``(seed, epoch, index)``; different tuples give unrelated
    seeds (a valid seed for every generator)."""
    h = _splitmix64(len(parts))
    for p in parts:
        h = _splitmix64(h ^ (int(p) & _MASK))
    return h >> 1


def draw_seed(seed: int, step: int, mb: int, layer: int) -> int:
    """The generator seed of global layer ``layer`` for micro-batch ``mb`` of step ``step``."""
    return derive_seed(seed, step, mb, layer)


class Draws:
    """Seeds a cell's layers from their keys; ``first_layer`` is the cell's first global index."""

    def __init__(self, seed: int, first_layer: int, device: torch.device) -> None:
        self.seed, self.first_layer = seed, first_layer
        self._cpu = torch.default_generator
        self._gpu: torch.Generator | None = None
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._gpu = torch.cuda.default_generators[index]

    @contextlib.contextmanager
    def kept_outside(self) -> Iterator[None]:
        """Run the block; afterwards the default generators are where they were before it."""
        cpu = self._cpu.get_state()
        gpu = self._gpu.get_state() if self._gpu is not None else None
        try:
            yield
        finally:
            self._cpu.set_state(cpu)
            if self._gpu is not None and gpu is not None:
                self._gpu.set_state(gpu)

    def seed_layer(self, step: int, mb: int, j: int) -> None:
        """Seed the default generators for layer ``j`` of the cell (global ``first_layer + j``)."""
        s = draw_seed(self.seed, step, mb, self.first_layer + j)
        self._cpu.manual_seed(s)
        if self._gpu is not None:
            self._gpu.manual_seed(s)
