"""Per-stage memory accounting that works on every device.

CPU has no allocator peak counter, so the portable measure is accounting: parameter, gradient and
optimiser-state bytes from the tensors themselves, and activation bytes from what autograd saves for
backward (counted with saved-tensor hooks, storages de-duplicated, parameters excluded) plus the
boundary buffers a stage keeps per micro-batch (cell inputs for remat, received activations, outputs
awaiting their gradient). On CUDA the allocator's peak is reported beside it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import nn

__all__ = ["ActivationMeter", "tensor_bytes", "param_bytes", "grad_bytes", "optimizer_bytes"]


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def param_bytes(module: nn.Module) -> int:
    return sum(tensor_bytes(p) for p in module.parameters())


def grad_bytes(module: nn.Module) -> int:
    return sum(tensor_bytes(p) for p in module.parameters() if p.requires_grad)


def optimizer_bytes(opt: torch.optim.Optimizer | None, params: Iterable[nn.Parameter]) -> int:
    """Bytes of optimiser state attached to ``params`` (momentum, running averages, ...)."""
    if opt is None:
        return 0
    ids = {id(p) for p in params}
    total = 0
    for p, st in opt.state.items():
        if id(p) in ids:
            total += sum(tensor_bytes(v) for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    return total


class ActivationMeter:
    """Live activation bytes of one stage, with its peak over a step.

    ``record(mb)`` wraps a graph-building forward and counts the unique storages autograd saves;
    ``hold(mb, tensors)`` adds boundary buffers; ``release(mb)`` frees everything of a micro-batch.
    """

    def __init__(self, params: Iterable[torch.Tensor] = ()) -> None:
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self._per_mb: dict[int, set[int]] = {}
        self._owners: dict[int, set[int]] = {}  # storage -> micro-batches holding it
        self._sizes: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def reset_peak(self) -> None:
        self.peak = self.current

    def _add(self, mb: int, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in self._param_ptrs:
            return
        # A storage is counted once however many micro-batches hold views of it (the first
        # stage's micro-batches are views of one input batch).
        if ptr not in self._sizes:
            self._sizes[ptr] = st.nbytes()
            self.current += self._sizes[ptr]
            self.peak = max(self.peak, self.current)
        self._owners.setdefault(ptr, set()).add(mb)
        self._per_mb.setdefault(mb, set()).add(ptr)

    def hold(self, mb: int, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            self._add(mb, t)

    @contextlib.contextmanager
    def record(self, mb: int) -> Iterator[None]:
        def pack(t: torch.Tensor) -> torch.Tensor:
            self._add(mb, t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield

    def release(self, mb: int) -> None:
        for ptr in self._per_mb.pop(mb, set()):
            owners = self._owners[ptr]
            owners.discard(mb)
            if not owners:
                del self._owners[ptr]
                self.current -= self._sizes.pop(ptr)
