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
from functools import cache
from typing import Literal

from .errors import ArgumentError

__all__ = [
    "Action",
    "ScheduleName",
    "SCHEDULES",
    "stage_actions",
    "peak_in_flight",
    "gradients_taken",
    "inputs_beyond_alive",
    "receives_ahead",
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


def gradients_taken(name: str, K: int, M: int, stage: int) -> dict[int, list[int]]:
    """For each micro-batch j that stage ``stage`` receives: the micro-batches whose backward the
    previous stage runs before its forward of j, read off that stage's action list. When j's
    activations arrive, the previous stage has taken those gradients, so their sends are complete
    (``engine.transfers``). Empty for the first stage, which receives no activations."""
    _check(K, M, stage, name)
    if stage == 0:
        return {}
    done: list[int] = []
    taken: dict[int, list[int]] = {}
    for a in stage_actions(name, K, M, stage - 1):
        if a.kind == "B":
            done.append(a.mb)
        else:
            taken[a.mb] = done[:]
    return taken


def inputs_beyond_alive(name: str, K: int, M: int, stage: int, lookahead: int) -> int:
    """Input-sized buffers stage ``stage`` holds besides its micro-batches alive, counted so that
    (most alive) x (a micro-batch's bytes) + this x (an input's bytes) bounds every action's bytes
    from above: the input gradients it sent and does not yet know taken (``gradients_taken``: gloo
    reports a send complete only once waited for) and the activation receives posted ahead
    (``receives_ahead``), taken at every action as (alive + those) less the most alive — a
    micro-batch alive weighs at least an input. 0 on stage 0 and under ``gpipe``; under ``1f1b``
    it depends on the stage only through its warm-up forwards, so it is computed once per those."""
    _check(K, M, stage, name)
    if stage == 0:
        return 0
    w = min(K - stage - 1, M)
    return _inputs_beyond_alive(name, w, M, lookahead)


@cache
def _inputs_beyond_alive(name: str, w: int, M: int, lookahead: int) -> int:
    K, stage = w + 2, 1  # a stage with w warm-up forwards after a stage with min(w + 1, M)
    taken = gradients_taken(name, K, M, stage)
    ahead = receives_ahead(name, K, M, stage, lookahead)
    alive, sums = 0, []
    held: set[int] = set()
    for i, a in enumerate(stage_actions(name, K, M, stage)):
        if a.kind == "F":
            held -= set(taken.get(a.mb, []))
            alive += 1
            sums.append(alive + len(held) + ahead[i][0])
        else:
            sums.append(alive + len(held) + ahead[i][0])
            alive -= 1
            held.add(a.mb)
    return max(sums) - peak_in_flight(name, K, M, stage)


@cache
def receives_ahead(
    name: str, K: int, M: int, stage: int, lookahead: int
) -> tuple[tuple[int, int], ...]:
    """Per action of stage ``stage``: the receives already posted for the actions after it,
    (activations, gradients). The engine posts each action's receive ``lookahead`` actions ahead
    (``engine.transfers``: actions i .. i + lookahead - 1 before action i runs); action i's own
    is what it consumes. A first stage receives no activations, a last stage no gradients."""
    acts = stage_actions(name, K, M, stage)
    out = []
    for i in range(len(acts)):
        ahead = acts[i + 1 : i + lookahead]
        out.append(
            (
                sum(1 for a in ahead if a.kind == "F") if stage > 0 else 0,
                sum(1 for a in ahead if a.kind == "B") if stage < K - 1 else 0,
            )
        )
    return tuple(out)


def bubble_fraction(K: int, M: int) -> float:
    """Ideal idle share of a fill-drain pipeline, (K-1)/(M+K-1) (GPipe §2.3)."""
    return (K - 1) / (M + K - 1)
