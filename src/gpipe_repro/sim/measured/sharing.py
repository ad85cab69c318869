"""What a message costs the ranks of one run when they share this host's cores and keep them busy.

A CPU run places its K ranks on one host. gloo moves a message on its own threads once it is posted
(``link``); on a host with a core to spare those threads cost the ranks next to nothing, which is what
an idle ping-pong measures. When every core runs a rank's compute — K = 2 on 2 cores, the validation's
real cells — a message's threads take a core from a rank's compute, and no idle measurement sees it
(``reports/sim/sim.md`` shows what undoing this term does to the real cells). A receiver pays it: a
message that arrives while every core computes waits to be taken in until a core frees, and the
core that frees is most often the receiver's own, blocking in its receive, which then wakes only
after the backend took the message in. Spinning steps of gpipe, 1f1b and interleaved 1F1B fit one
cost per receive far closer to each other than one per message posted while the other ranks
computed, the rule before it, under which interleaved's messages cost well under half the others'
(issue #39; each schedule's own fit: ``python bench/sharing_schedules.py``).

So the simulator charges ``shared_message_s`` to every receive of a run whose ranks fill the host's
cores: the receiver has its message no earlier than that after posting the receive, so one that
would wait that long anyway pays nothing more (``Link.shared_s``, ``Link.cores``: ``simulate``).
It is measured here: real
K = 2 steps with every stage *spinning* for a known time per action (its core as busy as compute
keeps it, its cost exact by construction), at several M, each simulated on those exact costs with
the idle link, the engine's measured overheads and a trial ``shared_message_s``; the value fitted is
the one whose simulated steps leave the measured ones a residual that does not grow with M (a
fixed part per step, ``fixed_s``, is left to the intercept, as before: what the spinning step pays
once, whatever M). Emulated ranks, which sleep, and separate devices do not pay it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from torch import nn

from ...engine import Pipeline, init_topology
from ...engine.launch import launch
from ...engine.pipeline import DEFAULT_LOOKAHEAD
from ..costs import Link, StageCost
from ..simulate import simulate

__all__ = ["SharingFit", "fit_shared", "measure_sharing"]


@dataclass(frozen=True)
class SharingFit:
    """The ``shared_message_s`` whose simulated steps leave the measured ``points`` a residual of
    ``fixed_s`` at every M (least squares)."""

    shared_message_s: float  # per receive of ranks that fill the host's cores, >= 0
    fixed_s: float
    # (M, median measured step s, the step simulated with the fitted shared_message_s)
    points: list[tuple[int, float, float]]


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class _SpinFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, w: torch.Tensor, x: torch.Tensor, fwd_s: float, bwd_s: float) -> Any:
        ctx.bwd_s = bwd_s
        _spin(fwd_s)
        return x * w

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        _spin(ctx.bwd_s)
        return g.sum().reshape(()), g, None, None


class Spin(nn.Module):
    """A stage that keeps its core busy for ``fwd_s`` / ``bwd_s`` per action and passes its input on."""

    def __init__(self, fwd_s: float, bwd_s: float) -> None:
        super().__init__()
        self.fwd_s, self.bwd_s = fwd_s, bwd_s
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> Any:
        return _SpinFn.apply(self.w, x, self.fwd_s, self.bwd_s)


def _loss(y: torch.Tensor, t: Any) -> torch.Tensor:
    return y.mean()


def _spin_rank(
    Ms: list[int], fwd_s: float, bwd_s: float, shape: tuple[int, int], warmup: int, steps: int
) -> list[list[float]]:
    """One rank of a K = 2 pipeline of spinning stages; per M, this rank's timed steps' seconds."""
    topo = init_topology(2, timeout_s=120.0)
    torch.set_num_threads(1)
    out = []
    for M in Ms:
        pipe = Pipeline([Spin(fwd_s, bwd_s)], topo, M=M, loss_fn=_loss, checkpoint="never")
        x = torch.ones(M * shape[0], shape[1])
        times = []
        for s in range(warmup + steps):
            t0 = time.perf_counter()
            pipe.train_step(x if topo.is_first else None, None)
            if s >= warmup:
                times.append(time.perf_counter() - t0)
            for p in pipe.parameters():
                p.grad = None
        out.append(times)
    return out


def fit_shared(
    measured: Sequence[float], simulated: Callable[[float], list[float]], upper_s: float = 0.02
) -> tuple[float, float]:
    """(shared_message_s, fixed_s): the cost per charged message in [0, ``upper_s``] whose
    ``simulated(cost)`` steps leave ``measured`` (the same Ms in order) the flattest residual — the
    least squares of ``measured - simulated(cost) - fixed_s`` over cost and fixed_s; one point:
    the cost that leaves it no residual (fixed_s 0)."""
    if not measured:
        raise ValueError("measured is empty; allowed: at least one step per M")
    target = np.asarray(measured, dtype=float)

    def spread(cost: float) -> float:
        r = target - np.asarray(simulated(cost))
        return float(np.sum((r - r.mean()) ** 2)) if len(r) > 1 else float(r[0] ** 2)

    fit = minimize_scalar(spread, bounds=(0.0, upper_s), method="bounded", options={"xatol": 1e-7})
    cost = float(fit.x) if spread(float(fit.x)) < spread(0.0) else 0.0
    fixed = float(np.mean(target - np.asarray(simulated(cost)))) if len(target) > 1 else 0.0
    return cost, fixed


def measure_sharing(
    link: Link,
    overhead_s: float,
    step_overhead_s: float,
    *,
    Ms: tuple[int, ...] = (2, 32),
    fwd_s: float = 1e-3,
    bwd_s: float = 1e-3,
    shape: tuple[int, int] = (4, 256),
    warmup: int = 2,
    steps: int = 8,
    rounds: int = 5,
) -> SharingFit:
    """Real K = 2 steps of spinning stages at each M of ``Ms`` against their simulation on ``link``
    and the engine's overheads (module doc). A message carries ``shape`` floats per micro-batch.
    ``rounds`` launches of fresh ranks, each fitted on its own (how the scheduler places gloo's
    threads, and so the cost, varies from one launch to the next); the result is the median of the
    rounds' costs, its points each M's median step and its simulation at that cost."""
    Ms_ = sorted({int(m) for m in Ms})
    if not Ms_ or Ms_[0] < 1 or not (fwd_s > 0 and bwd_s > 0) or rounds < 1:
        raise ValueError(
            f"Ms={list(Ms)}, fwd_s={fwd_s}, bwd_s={bwd_s}, rounds={rounds} are invalid; allowed: "
            "M >= 1, seconds > 0, rounds >= 1"
        )
    nbytes = shape[0] * shape[1] * 4
    stages = [StageCost(fwd_s, fwd_s, bwd_s, nbytes), StageCost(fwd_s, fwd_s, bwd_s, 0)]

    def simulated(cost: float) -> list[float]:
        shared = replace(link, shared_s=cost, cores=2)  # the two ranks on this host's cores
        return [
            simulate(2, M, "gpipe", "never", stages, shared, overhead_s, sender_busy=False,
                     step_overhead_s=step_overhead_s, lookahead=DEFAULT_LOOKAHEAD).step_s
            for M in Ms_
        ]  # fmt: skip

    per_round: list[list[float]] = []  # per round, each M's median step
    for _ in range(rounds):
        per_rank = launch(_spin_rank, 2, (Ms_, fwd_s, bwd_s, shape, warmup, steps), threads=1)
        per_round.append(
            [
                statistics.median(max(a, b) for a, b in zip(per_rank[0][i], per_rank[1][i]))
                for i in range(len(Ms_))
            ]
        )
    fits = [fit_shared(r, simulated) for r in per_round]
    cost = statistics.median(f[0] for f in fits)
    sims = simulated(cost)
    points = [(M, statistics.median(r[i] for r in per_round), sims[i]) for i, M in enumerate(Ms_)]
    return SharingFit(cost, statistics.median(f[1] for f in fits), points)
