"""Split a mini-batch of N into M micro-batches along dim 0, and join them back (paper §2.2).

A layer may take and return a tensor or a tuple of tensors (AmoebaNet cells pass
``(current, previous)``), so everything here works on both. The split must be even: N divisible by M,
so every micro-batch has the same shape (one handshake per boundary and step) and the scaled gradient
sum equals the full-batch gradient exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import ArgumentError

__all__ = ["Batch", "as_tuple", "from_tuple", "split", "join", "check_micro_batches"]

Batch = torch.Tensor | tuple[torch.Tensor, ...]


def as_tuple(x: Batch) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


def from_tuple(xs: Sequence[torch.Tensor], was_tuple: bool) -> Batch:
    return tuple(xs) if was_tuple else xs[0]


def check_micro_batches(N: int, M: int) -> None:
    """One-line errors for an impossible split."""
    if M < 1:
        raise ArgumentError("M", M, "is invalid; allowed: an integer >= 1")
    if M > N:
        raise ArgumentError("M", M, f"exceeds the mini-batch of {N}; allowed: 1..{N}")
    if N % M:
        raise ArgumentError(
            "M",
            M,
            f"does not divide the mini-batch of {N}; allowed: a divisor of {N} (the split must be even)",
        )


def split(batch: Batch, M: int) -> list[Batch]:
    """Split every tensor of ``batch`` into M equal chunks along dim 0."""
    xs = as_tuple(batch)
    N = xs[0].shape[0]
    for x in xs:
        if x.shape[0] != N:
            raise ValueError(f"tensors of one batch disagree on dim 0: {x.shape[0]} != {N}")
    check_micro_batches(N, M)
    chunks = [x.chunk(M, dim=0) for x in xs]
    tup = isinstance(batch, tuple)
    return [from_tuple([c[m] for c in chunks], tup) for m in range(M)]


def join(parts: Sequence[Batch]) -> Batch:
    """Concatenate micro-batch outputs back into one batch."""
    tup = isinstance(parts[0], tuple)
    cols = list(zip(*[as_tuple(p) for p in parts]))
    return from_tuple([torch.cat(list(col), dim=0) for col in cols], tup)
