"""Mixed precision for a pipeline stage: bf16 autocast over fp32 master weights.

The paper's TPUs keep activations in bfloat16; on GPUs (and CPUs that support it) the same is had
with ``torch.autocast``: matrix products and convolutions run in bf16 while the parameters, their
gradients and the optimiser state stay fp32 (the master weights), so an update is an fp32 update.

Where the casts sit decides whether a run depends on K. Autocast casts an op's *inputs*, so a tensor
produced in fp32 by one layer (an embedding, a BatchNorm fed by a promoted sum) would cross a stage
boundary in fp32 at one K and be cast by the next op inside the stage at another: the bytes sent and
the numerics would follow the partition. Here every layer's floating-point outputs are cast to the
compute dtype at the layer boundary, inside ``Cell`` (``cast_floats``), so a stage boundary adds no
cast of its own: the same casts happen in the same places whatever K, boundary activations (and so
their gradients) cross in bf16, half the bytes of fp32, and bf16 losses are identical across K.

The loss is computed in fp32, outside autocast, on the upcast last output (``fp32_loss``);
BatchNorm's statistics are accumulated in fp32 by ``MicroBatchNorm``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Literal

import torch

from .errors import ArgumentError
from .microbatch import Batch, as_tuple, from_tuple

__all__ = [
    "PRECISIONS",
    "Precision",
    "autocast",
    "cast_floats",
    "check_precision",
    "compute_dtype",
    "fp32_loss",
]

Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")
_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def check_precision(precision: str, device_type: str = "cpu") -> None:
    """One-line error for an unknown precision, or one this device cannot autocast to."""
    if precision not in PRECISIONS:
        raise ArgumentError("precision", precision, f"is unknown; allowed: {', '.join(PRECISIONS)}")
    if precision != "fp32" and not torch.amp.is_autocast_available(device_type):
        raise ArgumentError(
            "precision",
            precision,
            f"needs autocast on {device_type}, which this torch "
            f"{torch.__version__} lacks; allowed here: fp32",
        )


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype activations are computed, kept and sent in."""
    check_precision(precision)
    return _DTYPES[precision]


def autocast(device_type: str, precision: str) -> contextlib.AbstractContextManager[Any]:
    """The autocast region of one forward (or recompute) of a stage; a no-op for fp32.

    One region per forward, never one spanning several: autocast caches its bf16 copies of the
    weights per region, and a copy made under ``no_grad`` (a rematerialised forward) must not be
    reused by a graph-building one."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=compute_dtype(precision))


def cast_floats(x: Batch, dtype: torch.dtype | None) -> Batch:
    """``x`` with its floating-point tensors in ``dtype`` (integers, masks untouched); None: as is."""
    if dtype is None:
        return x
    ts = as_tuple(x)
    if all(not t.is_floating_point() or t.dtype == dtype for t in ts):
        return x
    return from_tuple(
        [t.to(dtype) if t.is_floating_point() else t for t in ts], isinstance(x, tuple)
    )


def fp32_loss(
    loss_fn: Callable[[Batch, Any], torch.Tensor], y: Batch, target: Any, device_type: str
) -> torch.Tensor:
    """``loss_fn`` in fp32: autocast off, the (bf16) output upcast first."""
    with torch.autocast(device_type, enabled=False):
        return loss_fn(_upcast(y), target)


def _upcast(y: Batch) -> Batch:
    ts = as_tuple(y)
    if all(t.dtype not in (torch.bfloat16, torch.float16) for t in ts):
        return y
    return from_tuple(
        [t.float() if t.dtype in (torch.bfloat16, torch.float16) else t for t in ts],
        isinstance(y, tuple),
    )
