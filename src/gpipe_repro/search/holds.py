"""What a cell position holds beside its layers, per schedule: the search's closed forms of the memory
planner's walk (``memory.activations.peak_activation_bytes``).

A cell's peak is a linear form of one micro-batch's (input, saved, output, weights, sent, kept) bytes
(``_coef``), whose coefficients depend on the cell's position only through a ``_Hold``: the
micro-batches of that cell alive at once, the transfer buffers beyond them, whether it is the model's
last cell, and — where the schedule splits the backward (zb-h1) — how many graphs remat keeps alive
between a B and its W. With several cells per stage (``virtual_stages`` v: interleaved, zb-h1 over
v chunks) each cell is held to a v-th of the device's memory (``_Hold.share``): the stage's peak is at
most the sum of its cells' peaks, so that bound never lets a stage over the cap; the exact plan of the
shown rows (``memory.stages.plan_stages``) has the last word.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..engine.errors import ArgumentError
from ..engine.pipeline import DEFAULT_LOOKAHEAD
from ..engine.schedule import (
    SCHEDULES,
    inputs_beyond_alive,
    peak_in_flight,
    splits_backward,
    stage_actions,
)

__all__ = ["MODES", "alive", "cell_alive", "graphs_alive", "Hold", "hold", "coef", "coef_of"]

MODES = ("never", "always")


@dataclass(frozen=True)
class Hold:
    """A cell position's peak besides its layers: micro-batches alive, whether it is the model's
    last cell, the input-sized and the output-sized transfer buffers (``coef``); under a split
    backward the graphs remat keeps (B to W), and the cell's share of the device (1 / v)."""

    alive: int
    last: bool
    inputs: int  # input-sized buffers beyond those alive: gradients sent, activation receives
    ahead_b: int
    graphs: int = 1  # rematerialised graphs alive at once (1 unless the backward is split)
    split: bool = False  # B and W apart: a micro-batch keeps the gradients for W (``kept``)
    share: int = 1  # cells per stage: this cell gets a ``share``-th of the device


def alive(schedule: str, K: int, M: int, k: int) -> int:
    """Micro-batches stage k holds at its peak: M under gpipe, min(K - k, M) under 1f1b, min(K, M)
    under zb-h1 (``engine.schedule.peak_in_flight``'s closed forms, checked against it in the
    tests); an unknown schedule is refused, not read as another."""
    if schedule == "gpipe":
        return M
    if schedule == "1f1b":
        return min(K - k, M)
    if schedule == "zb-h1":
        return min(K, M)
    if schedule in SCHEDULES:
        return peak_in_flight(schedule, K, M, k)
    raise ArgumentError("schedule", schedule, f"is unknown; allowed: {', '.join(SCHEDULES)}")


@cache
def cell_alive(schedule: str, K: int, M: int, k: int, v: int, chunk: int) -> int:
    """Micro-batches of one cell (stage k's chunk ``chunk``) alive at once, from F to its backward
    (to W where split), read off the stage's action list."""
    frees = "W" if splits_backward(schedule) else "B"
    n = peak = 0
    for a in stage_actions(schedule, K, M, k, v):
        if a.chunk != chunk:
            continue
        n += 1 if a.kind == "F" else -1 if a.kind == frees else 0
        peak = max(peak, n)
    return peak


@cache
def graphs_alive(schedule: str, K: int, M: int, k: int, v: int, chunk: int) -> int:
    """Under a split backward: the most graphs of one cell alive at once under remat — the one a B
    recomputes and those whose W has not run yet; 1 otherwise."""
    if not splits_backward(schedule):
        return 1
    n = peak = 0
    for a in stage_actions(schedule, K, M, k, v):
        if a.chunk != chunk:
            continue
        if a.kind == "B":
            n += 1
            peak = max(peak, n)
        elif a.kind == "W":
            n -= 1
    return peak


@cache
def hold(
    schedule: str,
    K: int,
    M: int,
    k: int,
    lookahead: int = DEFAULT_LOOKAHEAD,
    v: int = 1,
    chunk: int = 0,
) -> Hold:
    """What the cell of stage k, chunk ``chunk``, holds besides its layers (``Hold``), from the
    engine's schedule: input-sized transfer buffers beyond the micro-batches alive
    (``engine.schedule.inputs_beyond_alive``, the stage's, counted for each of its cells);
    gradient receives posted ahead, at most lookahead - 1 at once and at most M
    (``engine.schedule.receives_ahead``: exact under gpipe, a bound under 1f1b, which alternates
    them with activations; checked in the tests)."""
    S = K * v
    s = chunk * K + k
    n = alive(schedule, K, M, k) if v == 1 else cell_alive(schedule, K, M, k, v, chunk)
    return Hold(
        n,
        s == S - 1,
        inputs_beyond_alive(schedule, K, M, k, lookahead, v),
        min(lookahead - 1, M) if s < S - 1 else 0,
        graphs_alive(schedule, K, M, k, v, chunk),
        splits_backward(schedule),
        v,
    )


def coef(
    schedule: str, mode: str, K: int, M: int, k: int, lookahead: int = DEFAULT_LOOKAHEAD
) -> tuple[float, ...]:
    """Stage k's peak activations as a linear form of (input, saved, output, weights, sent, kept) of
    one micro-batch: the memory planner's closed forms (``memory.activations``'s table; its walk,
    ``peak_activation_bytes``, is checked against them in the tests) — never:
    n · (in + saved + out + weights), and under a split backward n kept gradient sets too; always:
    n · in + g · (saved + weights) + the recomputed output, g the graphs alive (1 unless split, then
    also g kept sets), and the outputs sent but still in transfer (n of them whole, none from the
    last cell); n = the micro-batches alive; in both, the input-sized transfer buffers (gradients
    sent and not yet known taken, activation receives posted ahead:
    ``engine.schedule.inputs_beyond_alive``) and the most gradient receives posted ahead at any
    action, the outputs' whole each. A bound: exact under remat never with a lookahead of 1 and one
    backward; under remat the walk frees a send when its gradient arrives, after the recompute that
    the closed form counts it beside. One micro-batch's working set comes on top once
    (``Space._bytes``)."""
    return coef_of(mode, hold(schedule, K, M, k, lookahead))


def coef_of(mode: str, h: Hold) -> tuple[float, ...]:
    n, g = h.alive, h.graphs
    kept = 1.0 if h.split else 0.0
    if mode == "never":
        return (n + h.inputs, n, n, n, h.ahead_b, kept * n)
    if mode == "always":
        return (n + h.inputs, g, 1, g, (0 if h.last else n) + h.ahead_b, kept * g)
    raise ValueError(f"mode={mode!r} is not searched; allowed: {', '.join(MODES)}")
