"""Python's cyclic collector, timed: the pauses a profiled call should leave out and a step pays.

A step of the engine allocates many Python objects; once enough were allocated, the collector runs in
whichever call comes next, scanning every object alive (the frozen ones excepted,
``engine.hostmem``). The layer profile takes the median of a layer's calls, which leaves those pauses
out, while the engine pays every one. ``Pauses`` records them (``gc.callbacks``) while installed, so
``stream`` can take each out of the call it fell in and charge the step's total back evenly
(``stream.StreamTimes.collector_share``).
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["NO_PAUSES", "Pauses"]


class Pauses:
    """The collector's pauses while installed: their total, and how much of any interval they
    took (``within``), so a timed call can leave them out."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []
        self._start = 0.0

    def __enter__(self) -> Pauses:
        gc.callbacks.append(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self._hook)

    def _hook(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((self._start, time.perf_counter()))

    def within(self, t0: float, t1: float) -> float:
        return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in self.pauses)

    def total(self) -> float:
        return sum(b - a for a, b in self.pauses)

    def reset(self) -> None:
        self.pauses.clear()


NO_PAUSES = Pauses()  # never installed: nothing to leave out
