"""Point-to-point transfer of boundary tensors between neighbouring stages.

Only cell-boundary activations (forward) and their gradients (backward) cross ranks (paper §2.3).
Shapes and dtypes cross a boundary once per step, in a small handshake: a fixed-size int64 tensor
describing the tuple, sent before the step's first micro-batch (all M share one shape). After that the
receiver allocates buffers itself and can post the step's receives ahead of time. Once per step, not
once per run, so sentence batches bucketed to different lengths can follow each other: the 512-byte
message costs little beside the activations, and a middle stage could not know the next bucket's shape
without a message anyway. The same calls run on gloo (CPU) and nccl (CUDA). Every wait is bounded by
the process group's timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["TensorMeta", "describe", "send_meta", "recv_meta", "isend", "irecv", "META_LEN"]

META_LEN = 64
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


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point


def describe(tensors: Sequence[torch.Tensor]) -> list[TensorMeta]:
    return [TensorMeta(tuple(t.shape), t.dtype) for t in tensors]


def _encode(metas: Sequence[TensorMeta], is_tuple: bool) -> torch.Tensor:
    vals = [int(is_tuple), len(metas)]
    for m in metas:
        vals += [_DTYPES.index(m.dtype), len(m.shape), *m.shape]
    if len(vals) > META_LEN:
        raise ValueError(f"boundary tuple too large to describe in {META_LEN} integers: {metas}")
    return torch.tensor(vals + [0] * (META_LEN - len(vals)), dtype=torch.int64)


def _decode(t: torch.Tensor) -> tuple[list[TensorMeta], bool]:
    v = t.tolist()
    is_tuple, n, i, out = bool(v[0]), v[1], 2, []
    for _ in range(n):
        dt, nd = v[i], v[i + 1]
        out.append(TensorMeta(tuple(v[i + 2 : i + 2 + nd]), _DTYPES[dt]))
        i += 2 + nd
    return out, is_tuple


def send_meta(
    metas: Sequence[TensorMeta], is_tuple: bool, dst: int, device: torch.device
) -> dist.Work | None:
    return dist.isend(_encode(metas, is_tuple).to(device), dst)


def recv_meta(src: int, device: torch.device) -> tuple[list[TensorMeta], bool]:
    buf = torch.empty(META_LEN, dtype=torch.int64, device=device)
    dist.recv(buf, src)
    return _decode(buf.cpu())


def isend(tensors: Sequence[torch.Tensor], dst: int) -> list[dist.Work]:
    works = []
    for t in tensors:
        w = dist.isend(t.detach().contiguous(), dst)
        if w is not None:
            works.append(w)
    return works


def irecv(
    metas: Sequence[TensorMeta], src: int, device: torch.device
) -> tuple[list[torch.Tensor], list[dist.Work]]:
    bufs = [torch.empty(m.shape, dtype=m.dtype, device=device) for m in metas]
    works = []
    for b in bufs:
        w = dist.irecv(b, src)
        if w is not None:
            works.append(w)
    return bufs, works
