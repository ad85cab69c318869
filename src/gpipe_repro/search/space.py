"""The search's space: a model's memory and costs over every layer range, the partitions of a
(K, R, M, schedule) that fit a memory cap, and the lower bound on a candidate's step.

Partition and per-stage remat in one exact min-max (``engine.balance_by_cells``, GPipe §2.2): cell
k may hold layers i..j-1 in mode never if that fits the cap, else in mode always if that fits, else
not at all, at the cost of that mode (forward + backward, plus the recompute under remat). So for
each (K, R, M, schedule) the partition minimises the slowest stage over every remat vector, with
remat only where memory needs it (remat never makes a stage faster). The all-never and all-always
partitions are candidates too. Memory per cell comes from the memory planner's per-layer meta
measurements (``memory.stages``): state exactly, activations bounded from above (a cell saves at
most its layers' own saved tensors plus the outputs its inner layers take as inputs), times the
schedule's and mode's count of micro-batches alive (the memory planner's closed forms, ``_coef``);
the micro-batch in backward counts as the largest, over its layers m, of what layers up to m save
plus m's own working set (what later layers saved is freed by then), plus the gradient the cell
receives. The bound is never below the exact peak, and on validate-plan's imbalanced model stays
within the factor tests/paper/validate_plan/test_predict.py holds it to.

Pruning before simulating: a candidate's step time is at least, for every stage k, the forwards of
micro-batch 0 on stages before k, stage k's M forwards and backwards (recompute included), and the
backwards of the last micro-batch on stages before k (plus the step's fixed cost): a stage cannot
start before its first input exists, and its last gradient still has to flow back to stage 0. Those
backwards count without their recompute: a stage may recompute its last micro-batch while it waits
for that gradient (the engine's early recompute), so only the backward itself is on the chain.
With R > 1 replicas each stage all-reduces its gradients after its last backward (``sim.simulate``):
stage k's all-reduce is added after its own work, stage 0's after the gradient chain, the larger
counts (both are certainly on the way to the step's end; no other all-reduce is).

What makes the scoring fast (the same candidates, bounds and ranking as solving each
(K, R, M, schedule) on its own): the partitions of one K are solved together, C problems per numpy
operation (``engine.balance_by_bands``), and only on the layer ranges a partition of L layers into
K non-empty cells can use (cell k starts at k..L-K+k); before that min-max, a boolean walk over the
same ranges finds the configurations where no partition fits in any mode (most of them under a
tight cap: three candidates over the cap each, never solved). The fit masks depend on a cell's
position only through (mode, samples, micro-batches alive, last stage), so they are computed once
per such key; the partitions once per (K, micro-batch, micro-batches alive per stage), shared
across replicas and M; the bound's per-cell sums once per (micro-batch, layer range).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.partition import balance_by_bands, balance_by_cells, cell_band
from ..engine.pipeline import DEFAULT_LOOKAHEAD
from ..engine.schedule import splits_backward
from ..memory.activations import StageActivation, state_bytes
from ..sim import CostModel, StageCost, stage_costs
from ..sim.costs import CachedCosts
from .candidate import Candidate
from .holds import MODES, alive
from .holds import Hold as _Hold
from .holds import coef as _coef
from .holds import coef_of as _coef_of
from .holds import hold as _hold

__all__ = [
    "Space",
    "Shape",
    "Parts",
    "partitions_many",
    "largest_fit",
    "bound",
    "MODES",
    "alive",
]

MAX_FIT = 2**16  # the largest micro-batch ``fit`` tries


@dataclass
class Space:
    """The model as the search sees it: per-layer memory (per sample) and costs at a micro-batch."""

    layers: list[StageActivation]  # per sample
    params: list[int]
    optim: str
    costs: CostModel  # memoised per micro-batch here (``CachedCosts``): asked thousands of times
    cap: int  # bytes per device
    unit: int = 1  # dataset units per sample (token batches: tokens per sentence)
    step_bytes: Callable[[int], int] = lambda params: 0
    grads: Sequence[int] = ()  # per layer, gradient bytes the replicas all-reduce (() : 4 x params)
    _times: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _fits: dict[tuple[str, int, _Hold], np.ndarray] = field(default_factory=dict)
    _cells: dict[tuple[int, int, int], StageCost] = field(default_factory=dict)
    _parts: dict[Shape, list[tuple[tuple[int, ...], tuple[str, ...]]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.costs, CachedCosts):
            self.costs = CachedCosts(self.costs)
        L = len(self.layers)
        i = np.arange(L + 1)[:, None]
        j = np.arange(L + 1)[None, :]
        self.valid = i < j
        jm = np.clip(j - 1, 0, L - 1)
        ii = np.clip(i, 0, L - 1)

        def prefix(v: Sequence[float] | np.ndarray) -> np.ndarray:
            return np.concatenate([[0.0], np.cumsum(np.asarray(v, dtype=np.float64))])

        def seg(v: Sequence[float] | np.ndarray) -> np.ndarray:
            p = prefix(v)
            return p[None, :] - p[:, None]

        self.kept = seg([a.kept for a in self.layers])  # what a split backward keeps for W
        inp = np.array([a.input for a in self.layers], dtype=np.float64)
        self.inp = np.broadcast_to(inp[ii], (L + 1, L + 1))
        self.out = np.broadcast_to(
            np.array([a.output for a in self.layers], float)[jm], (L + 1, L + 1)
        )
        self.sent = np.broadcast_to(
            np.array([a.sent for a in self.layers], float)[jm], (L + 1, L + 1)
        )
        # saved tensors of a cell <= its layers' own plus the inputs of all but its first layer; an
        # inner layer's input is its predecessor's output, which that layer's own saved tensors, its
        # input (counted the same way, or the cell's input) or its ``output`` (the part counted by
        # neither) hold: so the inner inputs add at most the outputs of all but the cell's last layer
        po = prefix([a.output for a in self.layers])
        inner = np.where(self.valid, po[jm] - po[ii], 0.0)  # outputs of layers i..j-2
        self.saved = seg([a.saved for a in self.layers]) + inner
        self.weights = seg([a.weights for a in self.layers])
        # the micro-batch in backward: while layer m's backward runs (or its forward), the tensors
        # the cell's layers after m saved are freed (or not made yet), so its saved tensors and
        # working set together are at most the largest, over m, of what layers i..m save (with
        # their inputs, as above) plus layer m's own working set; plus the gradient the cell
        # receives (held through its whole backward); per sample. The part that does not scale:
        # the largest layer's.
        ps = prefix([a.saved for a in self.layers])
        upto = ps[1:] + po[:-1] + np.array([a.work for a in self.layers], dtype=np.float64)
        self.back = np.where(self.valid, _range_max(upto) - ps[ii] - po[ii], 0.0) + self.out
        self.work_fixed = _range_max([a.work_fixed for a in self.layers])
        nparams = seg(self.params)
        self.state = np.vectorize(lambda p: state_bytes(int(p), self.optim))(np.maximum(nparams, 0))
        self.step = np.vectorize(lambda p: self.step_bytes(int(p)))(np.maximum(nparams, 0))
        grads = list(self.grads) or [4 * p for p in self.params]
        self.grad_prefix = [0, *np.cumsum(grads, dtype=np.int64).tolist()]

    def grad_bytes(self, balance: Sequence[int]) -> list[int]:
        """Per stage of ``balance``, the gradient bytes its replicas all-reduce."""
        out, start = [], 0
        for b in balance:
            out.append(self.grad_prefix[start + b] - self.grad_prefix[start])
            start += b
        return out

    def times(self, micro_batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-cell seconds per micro-batch, mode never and always (inf where i >= j)."""
        if micro_batch not in self._times:
            lc = self.costs.layer_costs(micro_batch)
            c = self.costs
            f = np.concatenate([[0.0], np.cumsum([x.forward_s for x in lc])])
            fn = np.concatenate([[0.0], np.cumsum([x.forward_nograd_s for x in lc])])
            b = np.concatenate([[0.0], np.cumsum([x.backward_s for x in lc])])
            r = np.concatenate([[0.0], np.cumsum([x.recompute for x in lc])])

            def seg(p: np.ndarray) -> np.ndarray:
                return p[None, :] - p[:, None]

            never = seg(f) + seg(b) + 2 * c.overhead_s
            always = seg(fn) + seg(r) + seg(b) + 2 * c.overhead_s + c.recompute_overhead_s
            self._times[micro_batch] = (
                np.where(self.valid, never, np.inf),
                np.where(self.valid, always, np.inf),
            )
        return self._times[micro_batch]

    def memory(self, schedule: str, mode: str, K: int, M: int, n: int) -> np.ndarray:
        """Bytes per cell position k and layer range, shape (K, L+1, L+1), at n samples."""
        co = np.array([_coef(schedule, mode, K, M, k) for k in range(K)])  # (K, 6)
        return self._bytes([co[:, q][:, None, None] for q in range(6)], n)

    def least_memory(self, K: int, M: int) -> tuple[list[int], list[float]]:
        """The partition of K stages that needs the least memory per stage, at one sample per
        micro-batch, 1f1b, remat always (what no configuration of K stages can go below): its
        balance and each stage's bytes."""
        mem = self.memory("1f1b", "always", K, M, 1)
        bal = balance_by_cells(np.where(self.valid, mem, np.inf))
        need, start = [], 0
        for k, b in enumerate(bal):
            need.append(float(mem[k, start, start + b]))
            start += b
        return bal, need

    def _bytes(self, c: Sequence[Any], n: int) -> np.ndarray:
        """The working set counts once, whatever the mode and the micro-batches alive."""
        act = (
            n
            * (
                c[0] * self.inp
                + (c[1] - 1) * self.saved
                + c[2] * self.out
                + c[4] * self.sent
                + c[5] * self.kept
                + self.back
            )
            + c[3] * self.weights
            + self.work_fixed
        )
        return self.state + np.maximum(np.rint(act), self.step)

    def cell(self, micro_batch: int, start: int, stop: int) -> StageCost:
        """Layers start..stop-1 as one stage (``sim.stage_costs``'s sums, memoised: the bound asks
        for the same cells across M, replicas and schedules)."""
        key = (micro_batch, start, stop)
        if key not in self._cells:
            lc = self.costs.layer_costs(micro_batch)
            self._cells[key] = stage_costs(lc[start:stop], [stop - start])[0]
        return self._cells[key]

    def fits(self, mode: str, n: int, h: _Hold) -> np.ndarray:
        """Whether a cell at a position ``h`` (micro-batches alive, ...) of n samples fits the cap,
        per layer range (the same bytes as ``memory``, which depend on the cell's position only
        through these)."""
        key = (mode, n, h)
        if key not in self._fits:
            c = _coef_of(mode, h)
            self._fits[key] = self._bytes(c, n) <= self.cap / h.share
        return self._fits[key]


def _range_max(v: Sequence[int]) -> np.ndarray:
    """(L+1, L+1): the largest of v[i:j] for i < j, 0 elsewhere."""
    L = len(v)
    out = np.zeros((L + 1, L + 1))
    for i in range(L):
        out[i, i + 1 :] = np.maximum.accumulate(np.asarray(v[i:], dtype=np.float64))
    return out


Parts = list[tuple[tuple[int, ...], tuple[str, ...]]]
KINDS = ("mixed", "never", "always")
CHUNK = 2**22  # cost elements solved at once (32 MiB of float64)


@dataclass(frozen=True)
class Shape:
    """What a (K, R, M, schedule)'s partitions depend on: the micro-batch (costs), the samples in
    it and each stage's micro-batches alive and gradient sends held (memory). Configurations with
    the same shape share their partitions: the solve is cached on it."""

    K: int
    micro_batch: int
    n: int
    hold: tuple[_Hold, ...]

    @staticmethod
    def of(K: int, M: int, schedule: str, n: int, micro_batch: int, v: int = 1) -> Shape:
        """``K`` stages of ``v`` cells each: the partition has K·v cells (``Shape.K``), cell s
        on stage s mod K (``engine.schedule``)."""
        holds = tuple(
            _hold(schedule, K, M, s % K, DEFAULT_LOOKAHEAD, v, s // K) for s in range(K * v)
        )
        return Shape(K * v, micro_batch, n, holds)


def _masks(space: Space, s: Shape) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per cell position, whether each layer range fits in mode never and in mode always."""
    return [(space.fits("never", s.n, h), space.fits("always", s.n, h)) for h in s.hold]


def _fitting(space: Space, K: int, allowed: Sequence[Sequence[np.ndarray]]) -> np.ndarray:
    """Whether a partition fits, per problem: ``allowed[c][k]`` says which layer ranges cell k
    may hold; a walk over the ranges a partition can use (cheap beside the min-max solve, and
    most shapes of a tight cap have no partition at all)."""
    W = len(space.layers) + 1 - K
    upper = cell_band(space.valid, 0, K)
    reach = np.zeros((len(allowed), W), dtype=bool)
    reach[:, 0] = True
    for k in range(K):
        may = np.stack([cell_band(a[k], k, K) for a in allowed]) & upper
        reach = np.any(reach[:, :, None] & may, axis=1)
    return reach[:, W - 1]


def partitions_many(space: Space, shapes: Sequence[Shape]) -> list[Parts]:
    """For each shape (all of one K): the mixed, all-never and all-always min-max partitions that
    fit (deduplicated), solved together on the layer ranges a partition can use
    (``balance_by_bands``) and cached."""
    todo = list(dict.fromkeys(s for s in shapes if s not in space._parts))
    if todo:
        either = [[n | a for n, a in _masks(space, s)] for s in todo]  # some mode fits
        ok = _fitting(space, todo[0].K, either)
        space._parts.update({s: [] for s, fit in zip(todo, ok, strict=True) if not fit})
        todo = [s for s, fit in zip(todo, ok, strict=True) if fit]
    if todo:
        K, W = todo[0].K, len(space.layers) + 1 - todo[0].K
        per = max(1, CHUNK // (3 * K * W * W))
        for lo in range(0, len(todo), per):
            group = todo[lo : lo + per]
            masks = [_masks(space, s) for s in group]
            bands = []
            for k in range(K):
                cells = []
                for s, m in zip(group, masks, strict=True):
                    never_t, always_t = (cell_band(t, k, K) for t in space.times(s.micro_batch))
                    fits_n, fits_a = (cell_band(f, k, K) for f in m[k])
                    cells += [
                        np.where(fits_n, never_t, np.where(fits_a, always_t, np.inf)),
                        np.where(fits_n, never_t, np.inf),
                        np.where(fits_a, always_t, np.inf),
                    ]
                bands.append(np.stack(cells))
            sols = balance_by_bands(bands)
            for g, (s, m) in enumerate(zip(group, masks, strict=True)):
                out: Parts = []
                for kind, bal in zip(KINDS, sols[3 * g : 3 * g + 3], strict=True):
                    if bal is None:
                        continue
                    modes, start = [], 0
                    for k, b in enumerate(bal):
                        ok_never = bool(m[k][0][start, start + b]) and kind != "always"
                        modes.append("never" if ok_never else "always")
                        start += b
                    key = (tuple(bal), tuple(modes))
                    if key not in out:
                        out.append(key)
                space._parts[s] = out
    return [space._parts[s] for s in shapes]


def _partitions(
    space: Space, K: int, M: int, schedule: str, n: int, micro_batch: int, v: int = 1
) -> Parts:
    """The mixed, all-never and all-always min-max partitions that fit (deduplicated)."""
    return partitions_many(space, [Shape.of(K, M, schedule, n, micro_batch, v)])[0]


def _fits_any(
    space: Space, K: int, M: int, schedule: str, n: int, micro_batch: int, v: int = 1
) -> bool:
    """Whether some partition fits with every stage in mode always (the least memory)."""
    masks = _masks(space, Shape.of(K, M, schedule, n, micro_batch, v))
    return bool(_fitting(space, K * v, [[a for _, a in masks]])[0])


def largest_fit(space: Space, K: int, M: int, schedule: str, v: int = 1) -> int:
    """The largest micro-batch (samples) some partition fits at, 0 if none (bisection: memory
    grows with the micro-batch)."""

    def fits(n: int) -> bool:
        return _fits_any(space, K, M, schedule, n, n * space.unit, v)

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_FIT and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def bound(space: Space, c: Candidate) -> float:
    """The lower bound on ``c``'s step time (module doc). With several cells per stage only the
    stages' own work counts (M times their cells' forwards and backwards)."""
    o = space.costs.overhead_s
    split = splits_backward(c.schedule)
    v = c.virtual_stages
    fw, bw, chain, start = [], [], [], 0
    for i, b in enumerate(c.balance):
        mode = c.checkpoint[i % c.K]
        s = space.cell(c.micro_batch, start, start + b)
        start += b
        remat = mode == "always"
        fw.append((s.forward_nograd_s if remat else s.forward_s) + o)
        extra = s.recompute + space.costs.recompute_overhead_s if remat else 0.0
        bw.append(s.backward_s + o * (2 if split else 1) + extra)
        chain.append(s.backward_s + o)  # the recompute may run before the gradient arrives
    # with replicas, stage k's all-reduce follows its own last backward, and stage 0's follows the
    # end of the gradient chain: both certainly precede the step's end
    cells = space.grad_bytes(c.balance)  # per cell; a stage all-reduces its cells' together
    ar = (
        [space.costs.link.allreduce_s(sum(cells[k :: c.K]), c.replicas) for k in range(c.K)]
        if c.replicas > 1
        else [0.0] * c.K
    )
    if v > 1:
        best = max(c.M * sum(fw[k :: c.K]) + c.M * sum(bw[k :: c.K]) + ar[k] for k in range(c.K))
    elif split:  # W passes may overlap the gradient chain: the stage's own work after its input
        best = max(sum(fw[:k]) + c.M * (fw[k] + bw[k]) + ar[k] for k in range(c.K))
    else:
        best = max(
            sum(fw[:k]) + c.M * (fw[k] + bw[k]) + max(sum(chain[:k]) + ar[0], ar[k])
            for k in range(c.K)
        )
    return best + space.costs.step_overhead_s
