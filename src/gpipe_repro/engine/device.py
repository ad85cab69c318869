"""What the engine asks of its device: a clock for its spans, and the allocator's peak-memory counter.

On CUDA, kernels and NCCL transfers run asynchronously: a span timed with the host clock would
measure how long the launches took, not the work, and the measured bubble, busy times and traces
(the measured Fig. 2(c), GPipe §2.3) would be launch times. So spans take *marks* from the device
clock — CUDA events recorded on the stage's stream — and the marks become seconds once per step,
after one synchronisation at the step's end (:meth:`Clock.resolve`). On a CPU the device is the host:
a mark is ``time.perf_counter()`` and resolving changes nothing. Either way the seconds lie on the
host's ``perf_counter`` timeline, so the events of all ranks of a host line up.

How a CUDA mark finds its place on that timeline: at the step's end the clock records one more event,
waits for the device, and takes the host time; every mark lies ``elapsed_time(mark, end)`` before it.
The wait returns within microseconds of the device finishing, unless the host arrives after the
device went idle (a host-bound step): then every mark of the step shifts late by that gap, together.

Peak memory: ``reset_peak`` and ``peak_bytes`` wrap the CUDA allocator's peak counter (None on a CPU,
which has none; there the engine's saved-tensor accounting is the measure, see ``memory``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch

__all__ = ["Clock", "CudaClock", "HostClock", "clock_for", "peak_bytes", "reset_peak"]


class Clock(Protocol):
    def mark(self) -> Any:
        """A point on the device's timeline, now (in stream order on CUDA)."""
        ...

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        """Wait for the device, then the marks as seconds on the host's ``perf_counter`` timeline."""
        ...


class HostClock:
    """The CPU: the host clock is the device clock."""

    def mark(self) -> float:
        return time.perf_counter()

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        return [float(m) for m in marks]


class CudaClock:
    """CUDA events on the current stream of ``device``, resolved after a device synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return event

    def resolve(self, marks: Sequence[Any]) -> list[float]:
        end = self.mark()
        torch.cuda.synchronize(self.device)  # every stream: compute and NCCL's
        now = time.perf_counter()
        return [now - m.elapsed_time(end) / 1e3 for m in marks]


def clock_for(device: torch.device) -> Clock:
    return CudaClock(device) if device.type == "cuda" else HostClock()


def reset_peak(device: torch.device) -> None:
    """Start the allocator's peak counter afresh (after warm-up steps, before the timed ones)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> int | None:
    """The allocator's peak since the last reset; None where there is no allocator counter."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
