"""Pipeline schedules as data: an ordered list of actions per stage.

``gpipe`` is the paper's fill-drain schedule (Fig. 2c): every stage runs the forwards of all M
micro-batches, then their backwards in reverse order. ``1f1b`` is PipeDream-flush (beyond the paper):
after K-k-1 warm-up forwards, stage k alternates one forward and one backward, so at most K-k
micro-batches are alive at once; the update stays synchronous, the bubble stays (K-1)/(M+K-1).

Because a schedule is a plain list, it can be printed, compared with a drawing in a test, fed to a
simulator, and executed by the engine unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ArgumentError

__all__ = ["Action", "ScheduleName", "SCHEDULES", "stage_actions", "clock_table", "render", "bubble_fraction"]

ScheduleName = Literal["gpipe", "1f1b"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b")


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


def clock_table(name: str, K: int, M: int, f: float = 1.0, b: float = 2.0) -> list[list[tuple[float, float, Action]]]:
    """Simulate the schedule with forward time ``f`` and backward time ``b`` per cell.

    Returns per stage a list of (start, end, action) respecting the dependencies
    F(k, m) after F(k-1, m) and B(k, m) after B(k+1, m), in each stage's action order.
    """
    acts = [stage_actions(name, K, M, k) for k in range(K)]
    done: dict[tuple[int, str, int], float] = {}
    pos = [0] * K
    free = [0.0] * K
    out: list[list[tuple[float, float, Action]]] = [[] for _ in range(K)]
    remaining = sum(len(a) for a in acts)
    while remaining:
        progressed = False
        for k in range(K):
            if pos[k] == len(acts[k]):
                continue
            a = acts[k][pos[k]]
            if a.kind == "F":
                dep = done.get((k - 1, "F", a.mb)) if k > 0 else 0.0
            else:
                dep = done.get((k + 1, "B", a.mb)) if k < K - 1 else done.get((k, "F", a.mb))
            if dep is None:
                continue
            start = max(free[k], dep)
            end = start + (f if a.kind == "F" else b)
            done[(k, a.kind, a.mb)] = end
            free[k] = end
            out[k].append((start, end, a))
            pos[k] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # pragma: no cover - both schedules are deadlock-free
            raise RuntimeError(f"schedule {name} deadlocks at K={K}, M={M}")
    return out


def render(name: str, K: int, M: int) -> str:
    """ASCII picture of the schedule, one row per stage, one column per unit time (F=1, B=2)."""
    table = clock_table(name, K, M, 1.0, 2.0)
    width = int(max(e for row in table for _, e, _ in row))
    lines = []
    for k, row in enumerate(table):
        cells = ["  . "] * width
        for s, e, a in row:
            for t in range(int(s), int(e)):
                cells[t] = f"{a.kind}{a.mb:<3d}"[:4]
        lines.append(f"stage {k}: " + "".join(cells).rstrip())  # idle cells show as "."
    return "\n".join(lines)


def bubble_fraction(K: int, M: int) -> float:
    """Ideal idle share of a fill-drain pipeline, (K-1)/(M+K-1) (GPipe §2.3)."""
    return (K - 1) / (M + K - 1)
