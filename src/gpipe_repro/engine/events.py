"""What each stage did and when: the measured version of the paper's Fig. 2(c).

Every stage records ``(action, micro-batch, start, end)`` for forward, backward, recompute, weight
(the deferred weight gradient of a split backward, ``split``), send, receive and wait, with the model
chunk it belongs to where a stage holds several (``schedule``). Spans take marks from the device's clock (``device``: CUDA events on a GPU, the
host clock on a CPU), resolved to seconds once per step, at its end; the seconds lie on the host's
``time.perf_counter`` timeline (CLOCK_MONOTONIC on Linux, shared by the processes of one machine),
so the events of all stages of one host line up without correction. From them: step time, per-stage
busy time, the measured bubble fraction, and a Chrome trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .device import Clock, HostClock

__all__ = ["Event", "Recorder", "COMPUTE", "busy_time", "measured_bubble", "chrome_trace"]

COMPUTE = ("forward", "backward", "recompute", "weight")


@dataclass
class Event:
    action: str  # forward | backward | recompute | weight | send | recv | wait | step
    mb: int
    start: float
    end: float
    stage: int = 0
    replica: int = 0
    step: int = 0
    chunk: int = 0  # the stage's model chunk (0 .. v-1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recorder:
    """Collects events on one rank; cheap enough to stay on during timed steps.

    A step's spans hold the clock's marks until :meth:`end_step` resolves them (on CUDA after one
    synchronisation); ``events`` holds the steps that ended."""

    def __init__(self, stage: int = 0, replica: int = 0, clock: Clock | None = None) -> None:
        self.stage, self.replica = stage, replica
        self.clock: Clock = clock if clock is not None else HostClock()
        self.mark = self.clock.mark
        self.events: list[Event] = []
        self.step = 0
        self._open: list[tuple[str, int, Any, Any, int]] = []

    def add(self, action: str, mb: int, start: Any, end: Any, chunk: int = 0) -> None:
        """A span of this step between two of the clock's marks."""
        self._open.append((action, mb, start, end, chunk))

    def span(self, action: str, mb: int = -1, chunk: int = 0) -> _Span:
        return _Span(self, action, mb, chunk)

    def end_step(self) -> None:
        """Resolve this step's marks into events and count the step."""
        secs = self.clock.resolve([m for _, _, s, e, _ in self._open for m in (s, e)])
        for i, (action, mb, _, _, chunk) in enumerate(self._open):
            start, end = secs[2 * i], secs[2 * i + 1]
            self.events.append(
                Event(action, mb, start, end, self.stage, self.replica, self.step, chunk)
            )
        self._open = []
        self.step += 1


class _Span:
    __slots__ = ("rec", "action", "mb", "chunk", "t0")

    def __init__(self, rec: Recorder, action: str, mb: int, chunk: int = 0) -> None:
        self.rec, self.action, self.mb, self.chunk = rec, action, mb, chunk

    def __enter__(self) -> _Span:
        self.t0 = self.rec.mark()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rec.add(self.action, self.mb, self.t0, self.rec.mark(), self.chunk)


def busy_time(events: Iterable[Event]) -> float:
    """Seconds spent computing (forward, backward, recompute, weight)."""
    return sum(e.end - e.start for e in events if e.action in COMPUTE)


def measured_bubble(events: Sequence[Event], K: int) -> tuple[float, float, list[float]]:
    """Step time, bubble fraction and per-stage busy time of one step of one replica.

    The step spans from the first computation of any stage to the last one (a stage that finished
    the previous step early and already waits for the next one does not stretch it); a stage's idle
    share is the part of that span it did not compute. Bubble = 1 - sum(busy) / (K * span) — the
    measured counterpart of (K-1)/(M+K-1) (GPipe §2.3); communication and waits count as idle.
    """
    compute = [e for e in events if e.action in COMPUTE]
    if not compute:
        return 0.0, 0.0, [0.0] * K
    t0 = min(e.start for e in compute)
    t1 = max(e.end for e in compute)
    span = t1 - t0
    busy = [busy_time(e for e in compute if e.stage == k) for k in range(K)]
    bubble = 1.0 - sum(busy) / (K * span) if span > 0 else 0.0
    return span, max(0.0, bubble), busy


def chrome_trace(events: Sequence[Event]) -> dict[str, Any]:
    """Chrome trace-event JSON (opens in Perfetto or chrome://tracing): one process per replica,
    one thread per stage, complete events in microseconds."""
    if not events:
        return {"traceEvents": []}
    t0 = min(e.start for e in events)
    out: list[dict[str, Any]] = []
    seen = set()
    for e in events:
        if (e.replica, e.stage) not in seen:
            seen.add((e.replica, e.stage))
            out.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": e.replica,
                    "tid": e.stage,
                    "args": {"name": f"stage {e.stage}"},
                }
            )
            out.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": e.replica,
                    "tid": e.stage,
                    "args": {"name": f"replica {e.replica}"},
                }
            )
        name = e.action if e.mb < 0 else f"{e.action} {e.mb}" + (f".{e.chunk}" if e.chunk else "")
        out.append(
            {
                "ph": "X",
                "name": name,
                "cat": e.action,
                "pid": e.replica,
                "tid": e.stage,
                "ts": (e.start - t0) * 1e6,
                "dur": max(0.0, (e.end - e.start) * 1e6),
                "args": {"step": e.step, "micro_batch": e.mb, "chunk": e.chunk},
            }
        )
    return {"traceEvents": out, "displayTimeUnit": "ms"}
