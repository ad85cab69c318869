"""Rematerialisation for a pipeline stage (paper §2.3).

Why not ``torch.utils.checkpoint``: it recomputes a segment *inside* autograd, when the gradient of the
segment's output arrives. In a pipeline that gradient comes from the next stage, so the recompute
would sit on the critical path after a wait. GPipe recomputes the cell *before* the gradient arrives,
overlapping the recompute with the next stage's backward. The engine therefore does remat by hand:
forward under ``no_grad`` keeping only the cell input and the RNG state, and in backward a second,
graph-building forward from that input with the RNG state restored (dropout draws the same mask),
then ``autograd.backward`` once the gradient is there. Recomputing forwards run inside
``batchnorm.recomputing()`` so running statistics are not counted twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .errors import ArgumentError

__all__ = [
    "CheckpointMode",
    "CHECKPOINT_MODES",
    "RngState",
    "save_rng",
    "restored_rng",
    "uses_remat",
    "stage_mode",
]

CheckpointMode = Literal["never", "except_last", "always"]
CHECKPOINT_MODES: tuple[str, ...] = ("never", "except_last", "always")
DEFAULT_CHECKPOINT = (
    "except_last"  # torchgpipe's default: the last micro-batch's backward follows at once
)


def uses_remat(mode: str, mb: int, M: int) -> bool:
    """Whether micro-batch ``mb`` of ``M`` is rematerialised under ``mode``.

    ``except_last`` skips the last micro-batch: its backward follows its forward most closely, so
    keeping its activations costs one micro-batch and saves one recompute.
    """
    if mode not in CHECKPOINT_MODES:
        raise ArgumentError(
            "checkpoint", mode, f"is unknown; allowed: {', '.join(CHECKPOINT_MODES)}"
        )
    return mode == "always" or (mode == "except_last" and mb != M - 1)


def stage_mode(checkpoint: str | Sequence[str], stage: int) -> str:
    """Stage ``stage``'s mode: ``checkpoint`` is one mode for every stage, or one per stage."""
    return checkpoint if isinstance(checkpoint, str) else checkpoint[stage]


@dataclass
class RngState:
    cpu: torch.Tensor
    cuda: torch.Tensor | None
    device: torch.device


def save_rng(device: torch.device) -> RngState:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return RngState(torch.get_rng_state(), cuda, device)


@contextlib.contextmanager
def restored_rng(state: RngState) -> Iterator[None]:
    """Run the block with the saved RNG state, leaving the outer RNG stream untouched."""
    devices = [state.device] if state.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, enabled=True):
        torch.set_rng_state(state.cpu)
        if state.cuda is not None:
            torch.cuda.set_rng_state(state.cuda, state.device)
        yield
