"""Pipeline schedules as data: an ordered list of actions per stage (rank of a pipeline).

An action is F (forward), B (backward) or W (weight gradient) of micro-batch ``mb`` on the stage's
model chunk ``chunk``. With ``v`` virtual stages per rank the model is cut into S = K·v chunks;
chunk c of stage k is virtual stage s = c·K + k (stage s of the model runs on rank s mod K), so a
rank holds v non-adjacent cells and activations go round the ring K-1 -> 0 between chunks.

- ``gpipe``: the paper's fill-drain (Fig. 2c): all M forwards, then the M backwards in reverse
  order. Bubble (K-1)/(M+K-1) (GPipe §2.3); every stage holds M micro-batches.
- ``1f1b``: PipeDream-flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training",
  ICML 2021): K-k-1 warm-up forwards, then one forward and one backward in turn, so stage k holds at
  most min(K-k, M) micro-batches; bubble as gpipe's.
- ``interleaved``: Megatron-LM's interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language
  Model Training on GPU Clusters Using Megatron-LM", SC 2021, §2.2): v >= 2 chunks per rank, forwards
  in groups of K micro-batches per chunk (depth first), 2(K-k-1) + (v-1)K warm-up forwards; the
  bubble shrinks by v ((K-1)/(v·M) of the ideal time), at v times the point-to-point messages and
  more warm-up activations. M must be a multiple of K, Megatron-LM's rule ("number of microbatches is
  not divisible by pipeline-model-parallel-size when using interleaved schedule",
  ``megatron/core/pipeline_parallel/schedules.py``); ``torch.distributed.pipelining``'s
  ``ScheduleInterleaved1F1B`` relaxes it to M a multiple of its rounds, max(1, M // K).
- ``zb-h1``: ZB-H1 of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, §2.1): every
  backward split into B (the input gradient, on the critical path) and W (the weight gradient,
  deferred). The warm-up is 1F1B's; stage k delays its W passes by k micro-batches, so every stage
  holds at most K micro-batches (F to W) — 1F1B's peak, which stage 0 sets — and the W passes fill
  the tail: about a third of 1F1B's bubble when F, B and W cost the same. With v >= 2 it is
  ``torch.distributed.pipelining``'s ``ScheduleInterleavedZeroBubble`` (ZB-H1 over interleaved
  chunks: (v-1)K + K-k-1 warm-up forwards), with the same rule on M.

Every schedule keeps the synchronous update: the optimiser steps after the last action. Because a
schedule is a plain list it can be printed, compared with a drawing in a test, fed to the simulator
(``sim.simulate``) and the memory planner (``memory.activations``), searched by ``gpipe-plan`` and
executed by the engine unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from .errors import ArgumentError

__all__ = [
    "Action",
    "Kind",
    "ScheduleName",
    "SCHEDULES",
    "SPLIT_SCHEDULES",
    "VIRTUAL_SCHEDULES",
    "DEFAULT_SCHEDULE",
    "check_schedule",
    "splits_backward",
    "stage_actions",
    "virtual_stage",
    "upstream",
    "peak_in_flight",
    "gradients_taken",
    "inputs_beyond_alive",
    "receives_ahead",
    "bubble_fraction",
    "ideal_bubble",
]

Kind = Literal["F", "B", "W"]
ScheduleName = Literal["gpipe", "1f1b", "interleaved", "zb-h1"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved", "zb-h1")
SPLIT_SCHEDULES: tuple[str, ...] = ("zb-h1",)  # B and W apart
VIRTUAL_SCHEDULES: tuple[str, ...] = ("interleaved", "zb-h1")  # may hold v > 1 chunks per rank
DEFAULT_SCHEDULE = "gpipe"  # the paper's fill-drain


@dataclass(frozen=True)
class Action:
    """F, B or W of micro-batch ``mb`` on this stage's chunk ``chunk`` (0 .. v-1)."""

    kind: Kind
    mb: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")


def splits_backward(name: str) -> bool:
    """Whether ``name`` runs a backward as B (input gradient) and W (weight gradient) apart."""
    return name in SPLIT_SCHEDULES


def virtual_stage(K: int, stage: int, chunk: int) -> int:
    """The model stage that chunk ``chunk`` of rank ``stage`` is: chunk·K + stage."""
    return chunk * K + stage


def upstream(K: int, stage: int, chunk: int) -> tuple[int, int] | None:
    """(rank, chunk) of the model stage before this one, None for the model's first stage."""
    s = virtual_stage(K, stage, chunk)
    return None if s == 0 else ((s - 1) % K, (s - 1) // K)


def check_schedule(name: str, K: int, M: int, v: int = 1) -> None:
    """One line (``ArgumentError``) unless ``name`` can run K stages, M micro-batches and v chunks."""
    if name not in SCHEDULES:
        raise ArgumentError("schedule", name, f"is unknown; allowed: {', '.join(SCHEDULES)}")
    if K < 1 or M < 1:
        raise ValueError(f"invalid schedule arguments K={K}, M={M}")
    if v < 1:
        raise ArgumentError("virtual_stages", v, "is invalid; allowed: an integer >= 1")
    if name == "interleaved" and v < 2:
        raise ArgumentError(
            "virtual_stages", v, "is too few for schedule interleaved; allowed: an integer >= 2"
        )
    if v > 1 and name not in VIRTUAL_SCHEDULES:
        raise ArgumentError(
            "virtual_stages",
            v,
            f"needs a schedule that holds several chunks per rank; allowed with schedule {name}: 1"
            f" ({', '.join(VIRTUAL_SCHEDULES)} take more)",
        )
    if v > 1 and M % K:
        raise ArgumentError(
            "M",
            M,
            f"cannot run schedule {name} with {v} chunks per rank at K={K}; allowed: a multiple "
            f"of K={K} (micro-batches go round the ring in groups of K: Megatron-LM's rule)",
        )


def stage_actions(name: str, K: int, M: int, stage: int, v: int = 1) -> list[Action]:
    """The ordered actions stage ``stage`` of ``K`` executes for ``M`` micro-batches, ``v`` chunks."""
    check_schedule(name, K, M, v)
    if not 0 <= stage < K:
        raise ValueError(f"invalid schedule arguments K={K}, stage={stage}")
    return list(_actions(name, K, M, stage, v))


@cache
def _actions(name: str, K: int, M: int, stage: int, v: int) -> tuple[Action, ...]:
    if name == "gpipe":
        return tuple(
            [Action("F", m) for m in range(M)] + [Action("B", m) for m in reversed(range(M))]
        )
    # 1F1B and its interleaved and zero-bubble forms share one shape: warm-up forwards, then a
    # forward and a backward in turn, then the remaining backwards (Megatron-LM's loop, with its
    # order of (chunk, micro-batch) pairs); zero bubble adds each W once ``stage`` backwards passed.
    total = M * v
    zb = splits_backward(name)
    hops = K - stage - 1
    warmup = min((v - 1) * K + (hops if zb or v == 1 else 2 * hops), total)

    def pair(i: int, backward: bool) -> tuple[int, int]:
        """The i-th forward's or backward's (chunk, micro-batch): groups of K micro-batches per
        chunk; backwards visit the chunks in reverse."""
        group = K if v > 1 else total
        c = (i // group) % v
        return (v - 1 - c if backward else c), (i // (group * v)) * group + i % group

    acts: list[Action] = []
    weights: list[tuple[int, int]] = []  # B done, W pending, in order

    def forward(i: int) -> None:
        c, m = pair(i, False)
        acts.append(Action("F", m, c))

    def backward(i: int) -> None:
        c, m = pair(i, True)
        acts.append(Action("B", m, c))
        if zb:
            weights.append((c, m))
            if i >= stage:  # W delayed by ``stage`` backwards (ZB-H1)
                wc, wm = weights.pop(0)
                acts.append(Action("W", wm, wc))

    for i in range(warmup):
        forward(i)
    for i in range(total - warmup):
        forward(warmup + i)
        backward(i)
    for i in range(total - warmup, total):
        backward(i)
    acts += [Action("W", m, c) for c, m in weights]
    return tuple(acts)


def _frees(name: str) -> Kind:
    """The action after which a micro-batch's activations are gone: W where the backward is split."""
    return "W" if splits_backward(name) else "B"


def peak_in_flight(name: str, K: int, M: int, stage: int, v: int = 1) -> int:
    """Most micro-batch chunks stage ``stage`` holds at once: forwarded, their backward (W, where it
    is split) not yet finished. Read off the stage's own action list, so every schedule (and only a
    known one) has one answer: M for ``gpipe``, min(K - stage, M) for ``1f1b``, min(K, M) for
    ``zb-h1`` (every stage holds stage 0's count, ZB-H1's design)."""
    alive = peak = 0
    frees = _frees(name)
    for a in stage_actions(name, K, M, stage, v):
        if a.kind == "F":
            alive += 1
        elif a.kind == frees:
            alive -= 1
        peak = max(peak, alive)
    return peak


def gradients_taken(
    name: str, K: int, M: int, stage: int, v: int = 1
) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """For each (chunk, micro-batch) whose activations stage ``stage`` receives from its upstream
    rank: the (chunk, micro-batch) pairs of this stage whose input gradients that rank took (ran
    their B) before it sent those activations, read off its action list. When the activations
    arrive, those gradient sends are complete (``engine.transfers``). Empty where nothing is
    received from another rank (stage 0 without chunks, or K = 1)."""
    check_schedule(name, K, M, v)
    if K == 1:
        return {}
    peer = (stage - 1) % K
    S = K * v
    done: list[tuple[int, int]] = []
    taken: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for a in stage_actions(name, K, M, peer, v):
        nxt = virtual_stage(K, peer, a.chunk) + 1
        if nxt >= S or nxt % K != stage or a.kind == "W":
            continue  # not a link to this stage
        mine = (nxt // K, a.mb)
        if a.kind == "B":
            done.append(mine)
        else:
            taken[mine] = done[:]
    return taken


def _receives(name: str, K: int, v: int, stage: int, a: Action) -> tuple[int, int]:
    """(activation, gradient) receives action ``a`` needs from other ranks."""
    s = virtual_stage(K, stage, a.chunk)
    remote = K > 1
    if a.kind == "F":
        return (1 if s > 0 and remote else 0), 0
    if a.kind == "B":
        return 0, (1 if s < K * v - 1 and remote else 0)
    return 0, 0


@cache
def receives_ahead(
    name: str, K: int, M: int, stage: int, lookahead: int, v: int = 1
) -> tuple[tuple[int, int], ...]:
    """Per action of stage ``stage``: the receives already posted for the actions after it,
    (activations, gradients). The engine posts each action's receive ``lookahead`` actions ahead
    (``engine.transfers``: actions i .. i + lookahead - 1 before action i runs); action i's own
    is what it consumes. The model's first stage receives no activations, its last no gradients."""
    acts = stage_actions(name, K, M, stage, v)
    need = [_receives(name, K, v, stage, a) for a in acts]
    out = []
    for i in range(len(acts)):
        ahead = need[i + 1 : i + lookahead]
        out.append((sum(n[0] for n in ahead), sum(n[1] for n in ahead)))
    return tuple(out)


def inputs_beyond_alive(name: str, K: int, M: int, stage: int, lookahead: int, v: int = 1) -> int:
    """Input-sized buffers stage ``stage`` holds besides its micro-batches alive, counted so that
    (most alive) x (a micro-batch's bytes) + this x (an input's bytes) bounds every action's bytes
    from above: the input gradients it sent and does not yet know taken (``gradients_taken``: gloo
    reports a send complete only once waited for) and the activation receives posted ahead
    (``receives_ahead``), taken at every action as (alive + those) less the most alive — a
    micro-batch alive weighs at least an input. 0 where the stage receives nothing and under
    ``gpipe``; under ``1f1b`` it depends on the stage only through its warm-up forwards, so it is
    computed once per those."""
    check_schedule(name, K, M, v)
    if K == 1 or (stage == 0 and v == 1):
        return 0
    if name in ("gpipe", "1f1b"):
        w = min(K - stage - 1, M)
        K, stage = w + 2, 1  # a stage with w warm-up forwards after a stage with min(w + 1, M)
    return _inputs_beyond_alive(name, K, M, stage, lookahead, v)


@cache
def _inputs_beyond_alive(name: str, K: int, M: int, stage: int, lookahead: int, v: int) -> int:
    taken = gradients_taken(name, K, M, stage, v)
    ahead = receives_ahead(name, K, M, stage, lookahead, v)
    frees = _frees(name)
    alive, sums = 0, []
    held: set[tuple[int, int]] = set()
    for i, a in enumerate(stage_actions(name, K, M, stage, v)):
        key = (a.chunk, a.mb)
        if a.kind == "F":
            held -= set(taken.get(key, []))
            alive += 1
        sums.append(alive + len(held) + ahead[i][0])
        if a.kind == frees:
            alive -= 1
        if a.kind == "B" and virtual_stage(K, stage, a.chunk) > 0:
            held.add(key)
    return max(sums) - peak_in_flight(name, K, M, stage, v)


def bubble_fraction(K: int, M: int) -> float:
    """Ideal idle share of a fill-drain pipeline, (K-1)/(M+K-1) (GPipe §2.3)."""
    return (K - 1) / (M + K - 1)


def ideal_bubble(name: str, K: int, M: int, v: int = 1) -> float | None:
    """The idle share of a step when every forward costs F, every backward 2F (under ``zb-h1``
    B = W = F) and nothing else costs: (K-1)/(M+K-1) for gpipe and 1f1b (GPipe §2.3);
    (K-1)/(v·M+K-1) interleaved (Megatron-LM §2.2: the bubble time divided by v); (K-1)/(3M+K-1)
    for zb-h1 (Qi et al. §2.1: a bubble of (K-1)F, a third of 1F1B's (K-1)·3F). None where no
    closed form is known (zb-h1 over v > 1 chunks: simulate it)."""
    check_schedule(name, K, M, v)
    if name in ("gpipe", "1f1b"):
        return bubble_fraction(K, M)
    if name == "interleaved":
        return (K - 1) / (v * M + K - 1)
    return (K - 1) / (3 * M + K - 1) if v == 1 else None
