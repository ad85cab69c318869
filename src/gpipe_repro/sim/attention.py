"""Attention counted as one fused kernel (FlashAttention) instead of its math, for the roofline.

On the meta device ``F.scaled_dot_product_attention`` runs its math: one matmul writes the L x L
scores, the mask is added, a softmax reads and writes them, a second matmul reads them, and the
backward does the same again — each a memory-bound operation over B x H x L x L elements. That is
how attention ran before fused kernels (XLA on a 2018 TPU, NVIDIA's 2021 BERT), and what
``sim.count`` records by default (``MATERIALIZED``).

A fused kernel (FlashAttention, Dao et al. 2022 and 2023; PyTorch's SDPA on a CUDA device picks one)
keeps the scores on chip. Counted with ``attention=FUSED``, every call of SDPA is one operation per
pass instead:

- forward (``FUSED_FORWARD``): the FLOPs of its two matmuls, Q K^T and P V; its bytes: Q, K, V (and
  a mask) read, the output and the row log-sum-exp written;
- backward (``FUSED_BACKWARD``): five matmuls' FLOPs (the scores recomputed, then dV, dP, dQ, dK:
  2.5 x the forward's); its bytes: Q, K, V, the output, its gradient and the log-sum-exp read, dQ,
  dK, dV written;
- causal attention (square, ``is_causal``) skips the blocks above the diagonal: half the FLOPs.

The roofline (``sim.roofline.pass_time``) times these two operations at the profile's
``fused_attention_efficiency`` (the fraction of peak a fused kernel reaches on that device, a
published figure), not at the matmul curve: their arithmetic is tiled, softmax-interleaved work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = [
    "ATTENTION",
    "FUSED",
    "FUSED_BACKWARD",
    "FUSED_FORWARD",
    "FUSED_OPS",
    "MATERIALIZED",
    "fused_attention",
]

MATERIALIZED, FUSED = "materialized", "fused"
ATTENTION = (MATERIALIZED, FUSED)
FUSED_FORWARD, FUSED_BACKWARD = "fused_attention", "fused_attention_backward"
FUSED_OPS = (FUSED_FORWARD, FUSED_BACKWARD)

Record = Callable[[float, float, str], None]  # (FLOPs, bytes, name): one operation, recorded


def _bytes(*ts: torch.Tensor | None) -> float:
    return float(sum(t.numel() * t.element_size() for t in ts if t is not None))


class _Fused(torch.autograd.Function):
    """SDPA as one operation per pass: outputs of the right shape, nothing computed (meta)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
        record: Record,
    ) -> torch.Tensor:
        B, H, Lq, D = q.shape  # H: the query heads (K and V may have fewer: grouped queries)
        Lk, Dv = k.shape[-2], v.shape[-1]
        share = 0.5 if causal and Lq == Lk else 1.0
        flops = 2.0 * B * H * Lq * Lk * (D + Dv) * share
        out = torch.empty((B, H, Lq, Dv), dtype=q.dtype, device=q.device)
        lse = 4.0 * B * H * Lq  # the row log-sum-exp, kept in fp32 for the backward
        record(flops, _bytes(q, k, v, mask, out) + lse, FUSED_FORWARD)
        ctx.shapes = (q, k, v, out)
        ctx.extra = (2.5 * flops, lse)
        ctx.record = record
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        q, k, v, out = ctx.shapes
        flops, lse = ctx.extra
        grads = [
            torch.empty(t.shape, dtype=t.dtype, device=t.device) if need else None
            for t, need in zip((q, k, v), ctx.needs_input_grad[:3])
        ]
        written = _bytes(*grads)
        ctx.record(flops, _bytes(q, k, v, out, grad) + lse + written, FUSED_BACKWARD)
        return (*grads, None, None, None)


class _Route(TorchFunctionMode):
    """Routes every ``F.scaled_dot_product_attention`` call through ``_Fused``."""

    def __init__(self, record: Record) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        q, k, v = args[:3]
        mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
        causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
        # grouped-query attention (K, V with fewer heads than Q): the kernel reads them as they are
        return _Fused.apply(q, k, v, mask, causal, self.record)


@contextmanager
def fused_attention(record: Record) -> Iterator[None]:
    """Inside it, every SDPA call is one fused operation per pass, handed to ``record``."""
    with _Route(record):
        yield
