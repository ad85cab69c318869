"""Point-to-point transfer of boundary tensors between neighbouring stages.

Only cell-boundary activations (forward) and their gradients (backward) cross ranks (paper §2.3).

**Channels.** Each direction of each link is a :class:`Channel` with a process group of its own:
activations from stage k to k+1 on one, their gradients back on another. On NCCL a group is a
communicator whose operations run in posting order on one stream (see ``fifo``); a stage posts
each channel's operations strictly in the order its peer posts the matching ones (activations in
forward order, gradients in backward order), so the receives a stage posts ahead never stand in
front of a send its peer needs first. The same calls run on gloo (CPU) and nccl (CUDA); with
``fifo`` they run on gloo in NCCL's order.

**Handshake.** Shapes and dtypes cross a boundary once per step, in a small message on the
activation channel: a fixed-size int64 tensor describing the tuple, sent before the step's first
micro-batch (all M share one shape). After that the receiver allocates buffers itself and can post
the step's receives ahead of time. Once per step, not once per run, so sentence batches bucketed to
different lengths can follow each other: the 512-byte message costs little beside the activations,
and a middle stage could not know the next bucket's shape without a message anyway.

**Aliases.** A layer may return the same tensor twice (AmoebaNet-style stems return ``(h, h)``).
It crosses once and the receiver rebuilds the tuple with one tensor in both places, so autograd on
the receiver accumulates its gradients exactly as one process would, and one gradient goes back.
Every wait is bounded by the process group's timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .fifo import Fifo, FifoWork
from .microbatch import Batch, from_tuple

__all__ = [
    "Channel",
    "META_LEN",
    "TensorMeta",
    "Work",
    "describe",
    "rebuild",
    "wire",
]

META_LEN = 64
_ALIAS = -1  # the code of "the same tensor as position j" in the handshake
_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]

Work = dist.Work | FifoWork


@dataclass(frozen=True)
class TensorMeta:
    """One position of a boundary tuple; ``alias`` >= 0: the same tensor as that earlier position."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    alias: int = -1

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def crosses(self) -> bool:
        """Whether this position travels (an alias does not: the receiver rebuilds it)."""
        return self.alias < 0


def describe(tensors: Sequence[torch.Tensor], aliases: bool = False) -> list[TensorMeta]:
    """Shapes and dtypes; ``aliases``: also mark a position holding the very tensor of an earlier
    one (what crosses a boundary: see the module docstring)."""
    out = []
    for i, t in enumerate(tensors):
        first = next((j for j in range(i) if tensors[j] is t), -1) if aliases else -1
        out.append(TensorMeta(tuple(t.shape), t.dtype, first))
    return out


def wire(tensors: Sequence[torch.Tensor], metas: Sequence[TensorMeta]) -> list[torch.Tensor]:
    """The tensors that cross: every position but the aliases."""
    return [t for t, m in zip(tensors, metas) if m.crosses]


def rebuild(received: Sequence[torch.Tensor], metas: Sequence[TensorMeta], is_tuple: bool) -> Batch:
    """The boundary value from the received tensors, aliases pointing at the very same tensor."""
    it = iter(received)
    out: list[torch.Tensor] = []
    for m in metas:
        out.append(next(it) if m.crosses else out[m.alias])
    return from_tuple(out, is_tuple)


def _encode(metas: Sequence[TensorMeta], is_tuple: bool) -> torch.Tensor:
    vals = [int(is_tuple), len(metas)]
    for m in metas:
        vals += [_DTYPES.index(m.dtype), len(m.shape), *m.shape] if m.crosses else [_ALIAS, m.alias]
    if len(vals) > META_LEN:
        raise ValueError(f"boundary tuple too large to describe in {META_LEN} integers: {metas}")
    return torch.tensor(vals + [0] * (META_LEN - len(vals)), dtype=torch.int64)


def _decode(t: torch.Tensor) -> tuple[list[TensorMeta], bool]:
    v = t.tolist()
    is_tuple, n, i = bool(v[0]), v[1], 2
    out: list[TensorMeta] = []
    for _ in range(n):
        if v[i] == _ALIAS:
            j = v[i + 1]
            out.append(TensorMeta(out[j].shape, out[j].dtype, j))
            i += 2
            continue
        dt, nd = v[i], v[i + 1]
        out.append(TensorMeta(tuple(v[i + 2 : i + 2 + nd]), _DTYPES[dt]))
        i += 2 + nd
    return out, is_tuple


def _works(w: dist.Work | None) -> list[dist.Work]:
    return [w] if w is not None else []


class Channel:
    """One direction of one link: the peer's rank and the process group this direction uses.

    ``group`` None is the default group. ``fifo``: the queue that puts the group's operations in
    NCCL's order (see ``fifo``); None posts them to the backend directly.
    """

    def __init__(self, peer: int, group: dist.ProcessGroup | None, fifo: Fifo | None) -> None:
        self.peer, self.group, self.fifo = peer, group, fifo

    def _isend(self, t: torch.Tensor, what: str) -> Work | None:
        peer, group = self.peer, self.group
        if self.fifo is not None:
            return self.fifo.post(lambda: _works(dist.isend(t, peer, group=group)), what)
        return dist.isend(t, peer, group=group)

    def _irecv(self, t: torch.Tensor, what: str) -> Work | None:
        peer, group = self.peer, self.group
        if self.fifo is not None:
            return self.fifo.post(lambda: _works(dist.irecv(t, peer, group=group)), what)
        return dist.irecv(t, peer, group=group)

    def isend(self, tensors: Sequence[torch.Tensor]) -> list[Work]:
        works = []
        for t in tensors:
            w = self._isend(t.detach().contiguous(), f"send to rank {self.peer}")
            if w is not None:
                works.append(w)
        return works

    def irecv(
        self, metas: Sequence[TensorMeta], device: torch.device
    ) -> tuple[list[torch.Tensor], list[Work]]:
        bufs = [torch.empty(m.shape, dtype=m.dtype, device=device) for m in metas]
        works = []
        for b in bufs:
            w = self._irecv(b, f"receive from rank {self.peer}")
            if w is not None:
                works.append(w)
        return bufs, works

    def send_meta(
        self, metas: Sequence[TensorMeta], is_tuple: bool, device: torch.device
    ) -> Work | None:
        return self._isend(_encode(metas, is_tuple).to(device), f"handshake to rank {self.peer}")

    def recv_meta(self, device: torch.device) -> tuple[list[TensorMeta], bool]:
        buf = torch.empty(META_LEN, dtype=torch.int64, device=device)
        w = self._irecv(buf, f"handshake from rank {self.peer}")
        if w is not None:
            w.wait()
        return _decode(buf.cpu())
