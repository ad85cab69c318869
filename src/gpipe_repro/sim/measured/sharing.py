"""What a message costs the ranks of one run when they share this host's cores and keep them busy.

A CPU run places its K ranks on one host. gloo moves a message on its own threads once it is posted
(``link``); on a host with a core to spare those threads cost the ranks next to nothing, which is what
an idle ping-pong measures. When every core runs a rank's compute — K = 2 on 2 cores, the validation's
real cells — each message's threads take a core from a rank's compute, on the sending and on the
receiving side, and no idle measurement sees it (``reports/sim/sim.md`` shows what undoing this term
does to the real cells).

So real K = 2 steps run here with every stage *spinning* for a known time per action (its core as
busy as compute keeps it, its cost exact by construction), at several M; each step is simulated on
those exact costs with the idle link and the engine's measured overheads; the residual (measured -
simulated) is fitted by a line in the messages a stage sends and receives per step (2M at K = 2): its
slope, clamped at 0, is ``shared_message_s``, what each message costs a rank beyond posting it. The
simulator charges it to every send and every receive of ranks that share the host
(``DeviceModel.ranks_link``); emulated ranks, which sleep, and separate devices do not pay it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...engine import Pipeline, init_topology
from ...engine.launch import launch
from ...engine.pipeline import DEFAULT_LOOKAHEAD
from ..costs import Link, StageCost
from ..simulate import simulate

__all__ = ["SharingFit", "measure_sharing", "fit_per_message"]


@dataclass(frozen=True)
class SharingFit:
    """``residual = fixed_s + messages * shared_message_s`` over the measured ``points``."""

    shared_message_s: float  # per message a stage sends or receives, >= 0
    fixed_s: float
    points: list[tuple[int, float, float]]  # (M, median measured step s, simulated step s)


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


def fit_per_message(
    points: list[tuple[int, float, float]], messages_per_M: int = 2
) -> tuple[float, float]:
    """(slope per message, intercept) of the residual (measured - simulated) over the messages a
    stage handles per step (``messages_per_M`` x M); one point: the line through the origin."""
    if not points:
        raise ValueError("points is empty; allowed: at least one (M, measured, simulated)")
    xs = np.array([messages_per_M * M for M, _, _ in points], dtype=float)
    ys = np.array([m - s for _, m, s in points])
    if len(set(xs.tolist())) < 2:
        return max(0.0, float(ys[0] / xs[0])), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    return max(0.0, float(slope)), float(intercept)


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
    threads, and so the slope, varies from one launch to the next); the result is the median of the
    rounds' slopes, its points each M's median step."""
    Ms_ = sorted({int(m) for m in Ms})
    if not Ms_ or Ms_[0] < 1 or not (fwd_s > 0 and bwd_s > 0) or rounds < 1:
        raise ValueError(
            f"Ms={list(Ms)}, fwd_s={fwd_s}, bwd_s={bwd_s}, rounds={rounds} are invalid; allowed: "
            "M >= 1, seconds > 0, rounds >= 1"
        )
    nbytes = shape[0] * shape[1] * 4
    stage = StageCost(fwd_s, fwd_s, bwd_s, nbytes)
    sims = [
        simulate(
            2,
            M,
            "gpipe",
            "never",
            [stage, StageCost(fwd_s, fwd_s, bwd_s, 0)],
            link,
            overhead_s,
            sender_busy=False,
            step_overhead_s=step_overhead_s,
            lookahead=DEFAULT_LOOKAHEAD,
        ).step_s
        for M in Ms_
    ]
    per_round: list[list[float]] = []  # per round, each M's median step
    for _ in range(rounds):
        per_rank = launch(_spin_rank, 2, (Ms_, fwd_s, bwd_s, shape, warmup, steps), threads=1)
        per_round.append(
            [
                statistics.median(max(a, b) for a, b in zip(per_rank[0][i], per_rank[1][i]))
                for i in range(len(Ms_))
            ]
        )
    fits = [fit_per_message(list(zip(Ms_, r, sims))) for r in per_round]
    points = [(M, statistics.median(r[i] for r in per_round), sims[i]) for i, M in enumerate(Ms_)]
    return SharingFit(
        statistics.median(f[0] for f in fits), statistics.median(f[1] for f in fits), points
    )
