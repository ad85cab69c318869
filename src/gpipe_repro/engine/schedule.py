"""Pipeline schedules as data: an ordered list of actions per stage.

``gpipe`` is the paper's fill-drain schedule (Fig. 2c): every stage runs the forwards of all M
micro-batches, then their backwards in reverse order. ``1f1b`` is PipeDream-flush (beyond the paper):
after K-k-1 warm-up forwards, stage k alternates one forward and one backward, so at most K-k
micro-batches are alive at once; the update stays synchronous, the bubble stays (K-1)/(M+K-1).

Because a schedule is a plain list, it can be printed, compared with a drawing in a test, fed to the
simulator (``gpipe_repro.sim.simulate``, which also draws it: ``sim.render``), and executed by the
engine unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ArgumentError

__all__ = [
    "Action",
    "ScheduleName",
    "SCHEDULES",
    "stage_actions",
    "peak_in_flight",
    "bubble_fraction",
]

ScheduleName = Literal["gpipe", "1f1b"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b")
DEFAULT_SCHEDULE = "gpipe"  # the paper's fill-drain


@dataclass(frozen=True)
class Action:
    kind: Literal["F", "B"]
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}"


def _check(K: int, M: int, stage: int, name: str) -> None:
    if name not in SCHEDULES:
        raise ArgumentError("schedule", name, f"is unknown; allowed: {', '.join(SCHEDULES)}")
    if K < 1 or M < 1 or not 0 <= stage < K:
        raise ValueError(f"invalid schedule arguments K={K}, M={M}, stage={stage}")


def stage_actions(name: str, K: int, M: int, stage: int) -> list[Action]:
    """The ordered actions stage ``stage`` of ``K`` executes for ``M`` micro-batches."""
    _check(K, M, stage, name)
    if name == "gpipe":
        return [Action("F", m) for m in range(M)] + [Action("B", m) for m in reversed(range(M))]
    warmup = min(K - stage - 1, M)
    acts = [Action("F", m) for m in range(warmup)]
    for i in range(M - warmup):
        acts += [Action("F", warmup + i), Action("B", i)]
    acts += [Action("B", m) for m in range(M - warmup, M)]
    return acts


def peak_in_flight(name: str, K: int, M: int, stage: int) -> int:
    """Most micro-batches stage ``stage`` holds at once: forwarded, their backward not yet finished.
    Read off the stage's own action list, so every schedule (and only a known one) has one answer:
    M for ``gpipe``, min(K - stage, M) for ``1f1b``."""
    alive = peak = 0
    for a in stage_actions(name, K, M, stage):
        alive += 1 if a.kind == "F" else -1
        peak = max(peak, alive)
    return peak


def bubble_fraction(K: int, M: int) -> float:
    """Ideal idle share of a fill-drain pipeline, (K-1)/(M+K-1) (GPipe §2.3)."""
    return (K - 1) / (M + K - 1)
