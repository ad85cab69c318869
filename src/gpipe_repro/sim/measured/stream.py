"""Each layer's forward, backward and recompute timed inside a stream of M micro-batches, as a stage runs them.

A pipeline stage (``engine.pipeline``, GPipe §2.2-2.3) does not call a layer once: it runs its cell on
M micro-batches in a row, keeping every micro-batch's saved tensors alive until its backward; under
rematerialisation it runs a no-grad forward of every micro-batch, then per micro-batch restores the RNG
state, runs the forward again with grad and runs the backward. A layer timed alone, outside that
stream, runs in another state of caches, allocator and autograd, and is not what the engine incurs
(timed alone, a layer can come out dearer than in the stream, and a no-grad pass dearer than the
forward it repeats). So a
*cell* of layers runs here exactly the engine's two kinds of step, and each layer is timed inside them:

- the kept step: the forward with grad of micro-batches 0 .. M-1 (the engine's saved-tensor accounting
  on, ``engine.memory.ActivationMeter``), then their backwards in reverse (fill-drain order);
- the remat step: the no-grad forward of 0 .. M-1 keeping each input and RNG state, then per
  micro-batch in reverse the engine's recompute (``restored_rng``, ``recomputing()``, the forward with
  grad) and its backward.

With an optimiser each step ends as a rank's does: each layer's BatchNorm statistics folded, then
the optimiser's step and the gradients zeroed in place, on the gradients the step's backwards left
and in the caches they left: a kept step runs one optimiser over the cell, as a rank does; a remat
step runs one per layer, timed apart, which gives each layer's share of the cell's step
(``StreamTimes.update_shares``: one optimiser per layer would pay the optimiser's fixed cost per
call once per layer, a rank pays it once). Timed apart from
the stream (a layer's step repeated on made-up gradients, its parameters hot in the caches), the
step came out far from what the engine pays: dearer on zero gradients, cheaper in warm caches
(``python bench/update_grads.py``).

A forward is timed per layer around its call (the loss, scaled by 1/M as the engine does, inside the
last layer's). A backward is one ``autograd.backward`` through the whole cell, as the engine calls it,
split per layer by a hook on each layer's input: autograd runs a graph's nodes in reverse creation
order on the calling thread, so the gradient of layer i's input is complete exactly when layer i's
backward nodes have run and layer i-1's have not started. A recompute's overhead is the time from the
start of its action to its first layer (restoring the RNG state, entering the contexts). Before each
timed step ``probe`` (the speed probe, ``speed.probe_s``) may run; its seconds come back with the step.

Python's cyclic collector runs when enough objects were allocated, in whichever call comes next: a
step of the engine pays its pauses, but the median of a layer's calls leaves them out (a layer's
pause falls in a few of its calls). So every pause is timed (``gc.callbacks``) and taken out of the
call it fell in, and each step's total (``Step.collector``) is charged back evenly: the mean over
the stream's steps of a kind, per micro-batch and layer, onto the forward (kept steps: the engine's
``never``) or the no-grad forward (remat steps: ``always``), ``StreamTimes.samples``. The
validation's AmoebaNet at M = 32 pays far more of them kept than rematerialised, the other models
almost none (each step's pauses: ``python bench/engine_vs_profile.py``). A pause scans every object alive, so
before its steps the stream moves what the process already held out of the collector's reach
(``gc.freeze``, as a rank freezes its set-up: ``engine.hostmem``): a profiling process holding other
models' profiles must not charge a rank for scanning them.
"""

from __future__ import annotations

import copy
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...engine.batchnorm import MicroBatchNorm, convert_batchnorm, recomputing
from ...engine.batchnorm import commit as commit_batchnorm
from ...engine.checkpoint import restored_rng, save_rng
from ...engine.hostmem import DEFAULT_HOST_MEMORY, apply_host_memory
from ...engine.memory import ActivationMeter
from ...engine.microbatch import Batch, as_tuple
from ...engine.precision import fp32_loss
from .cache import tensor_shapes
from .collector import NO_PAUSES, Pauses

__all__ = ["StreamTimes", "Step", "time_stream", "fresh_input"]

LossFn = Callable[..., torch.Tensor]


@dataclass
class Step:
    """One timed step of the stream (kept or remat), its seconds as measured."""

    probe_s: float  # the speed probe just before it (1.0 without a probe)
    forward: list[list[float]] = field(default_factory=list)  # per micro-batch: per layer
    nograd: list[list[float]] = field(default_factory=list)
    recompute: list[list[float]] = field(default_factory=list)
    backward: list[list[float]] = field(default_factory=list)
    recompute_overhead: list[float] = field(default_factory=list)  # per recompute action
    # per backward action, per layer: releasing the micro-batch's graph once its backward is done
    release: list[list[float]] = field(default_factory=list)
    # one row: per layer, folding its BatchNorm statistics at the end of the step
    commit: list[list[float]] = field(default_factory=list)
    # with an optimiser, after the commit: the optimiser's step and zeroing the gradients, over the
    # whole cell (kept steps: one entry, as a rank runs it) or per layer (remat steps: one row)
    update: list[list[float]] = field(default_factory=list)
    collector: float = 0.0  # seconds in Python's cyclic collector during the step (module doc)


@dataclass
class StreamTimes:
    """Every timed step of a cell at one micro-batch size, and the bytes each layer returns."""

    layers: int
    micro_batches: int
    steps: list[Step]
    out_bytes: list[int]  # per layer: bytes of everything it returns (the boundary after it)
    in_shapes: list[list]  # per layer: its input's shapes and dtypes (``cache.tensor_shapes``)

    def samples(self, kind: str, layer: int, ref: float | None = None) -> list[float]:
        """Every timed call of ``layer`` of one kind (forward, nograd, recompute, backward), each put
        on the reference speed ``ref`` when given (seconds x ref / that step's probe); a forward
        and a no-grad forward also carry their step kind's collector share (``collector_share``)."""
        share = self.collector_share(kind, ref)
        return [
            row[layer] * (ref / s.probe_s if ref is not None else 1.0) + share
            for s in self.steps
            for row in getattr(s, kind)
        ]

    def collector_share(self, kind: str, ref: float | None = None) -> float:
        """What the collector's pauses cost one call of a layer of ``kind``: the mean over the steps
        that ran it of their collector seconds, per micro-batch and layer, for ``forward`` (kept
        steps) and ``nograd`` (remat steps); 0 for the other kinds (module doc)."""
        if kind not in ("forward", "nograd"):
            return 0.0
        steps = [s for s in self.steps if getattr(s, kind)]
        if not steps:
            return 0.0
        paid = [s.collector * (ref / s.probe_s if ref is not None else 1.0) for s in steps]
        return sum(paid) / len(paid) / (self.micro_batches * self.layers)

    def update_shares(self, ref: float | None = None) -> list[float] | None:
        """Each layer's optimiser step: the median of the cell's whole step (kept steps) divided
        among the layers as the medians of their own steps (remat steps); None without updates."""

        def on_ref(s: Step) -> float:
            return ref / s.probe_s if ref is not None else 1.0

        whole = [s.update[0][0] * on_ref(s) for s in self.steps if s.forward and s.update]
        rows = [[u * on_ref(s) for u in s.update[0]] for s in self.steps if s.nograd and s.update]
        if not whole or not rows:
            return None
        apart = [statistics.median(row[i] for row in rows) for i in range(self.layers)]
        if not sum(apart) > 0:
            return None
        scale = statistics.median(whole) / sum(apart)
        return [a * scale for a in apart]

    def actions(self, kind: str, ref: float | None = None) -> list[float]:
        """Per micro-batch action: the cell's total of one kind (what an engine span covers)."""
        return [
            sum(row) * (ref / s.probe_s if ref is not None else 1.0)
            for s in self.steps
            for row in getattr(s, kind)
        ]

    def overheads(self, ref: float | None = None) -> list[float]:
        return [
            o * (ref / s.probe_s if ref is not None else 1.0)
            for s in self.steps
            for o in s.recompute_overhead
        ]


def fresh_input(x: Batch, requires_grad: bool) -> Batch:
    """A leaf copy of ``x`` (its float tensors requiring grad when asked): a stage's received input."""
    ts = [
        t.detach().clone().requires_grad_(requires_grad and t.is_floating_point())
        for t in as_tuple(x)
    ]
    return tuple(ts) if isinstance(x, tuple) else ts[0]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Boundaries:
    """When each layer's backward ended: a hook on layer i's input fires when its gradient is complete."""

    def __init__(self, L: int) -> None:
        self.t = [0.0] * (
            L + 1
        )  # t[i]: layer i's backward done (t[0]: the call returned); t[L]: start
        self.handles: list[Any] = []

    def watch(self, i: int, x: Batch) -> None:
        ts = [t for t in as_tuple(x) if t.requires_grad]
        if ts:
            self.handles.append(
                torch.autograd.graph.register_multi_grad_hook(ts, self._stamp(i), mode="any")
            )

    def _stamp(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_grad: torch.Tensor) -> None:
            self.t[i] = time.perf_counter()

        return hook

    def per_layer(self, pauses: Pauses = NO_PAUSES) -> list[float]:
        """Seconds of each layer's backward, the collector's ``pauses`` left out; a boundary whose
        hook never fired (no gradient crossed it) counts as the one after it."""
        t = self.t
        for i in range(len(t) - 2, 0, -1):
            t[i] = max(t[i], t[i + 1])
        for h in self.handles:
            h.remove()
        return [t[i] - t[i + 1] - pauses.within(t[i + 1], t[i]) for i in range(len(t) - 1)]


class _Cell:
    """The layers being timed, as a stage holds them (copies, micro-batch BatchNorm, on ``device``)."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        device: torch.device,
        optimizer_fn: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
    ) -> None:
        self.layers = [convert_batchnorm(copy.deepcopy(layer)).to(device) for layer in layers]
        self.params = [p for layer in self.layers for p in layer.parameters()]
        # one optimiser over the cell, as a rank has, and one per layer (None: no parameters), so
        # that each layer's share of the cell's step can be timed apart
        trained = [[p for p in layer.parameters() if p.requires_grad] for layer in self.layers]
        every = [p for ps in trained for p in ps]
        self.optimizer = optimizer_fn(every) if optimizer_fn is not None and every else None
        self.optimizers = [
            optimizer_fn(ps) if optimizer_fn is not None and ps else None for ps in trained
        ]
        # the layers with BatchNorm statistics to fold at the end of a step
        self.folds = [
            any(isinstance(m, MicroBatchNorm) for m in layer.modules()) for layer in self.layers
        ]
        self.device = device
        self.pauses = NO_PAUSES  # the collector's pauses to leave out of each timed call

    def forward(
        self,
        x: Batch,
        loss: Callable[[Batch], torch.Tensor] | None,
        bounds: _Boundaries | None,
        outs: list[Any] | None = None,
    ) -> tuple[Batch | torch.Tensor, list[float]]:
        """Run the cell, timing each layer; ``outs`` (when given) collects what each layer returned
        (the last one's loss, when there is one), so ``release`` can time dropping them."""
        times = []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            if bounds is not None and i > 0:
                bounds.watch(i, x)
            _sync(self.device)
            t0 = time.perf_counter()
            y = layer(x)
            if i == last and loss is not None:
                y = loss(y)
            _sync(self.device)
            t1 = time.perf_counter()
            times.append(t1 - t0 - self.pauses.within(t0, t1))
            if outs is not None:
                outs.append(y)
            x = y
        return x, times

    def backward(
        self, y: Batch | torch.Tensor, seeds: list[torch.Tensor] | None, bounds: _Boundaries
    ) -> list[float]:
        outs = [t for t in as_tuple(y) if t.requires_grad]
        _sync(self.device)
        bounds.t[-1] = time.perf_counter()
        if outs:
            torch.autograd.backward(outs, seeds if seeds is not None else None)
        _sync(self.device)
        bounds.t[0] = time.perf_counter()
        return bounds.per_layer(self.pauses)

    @staticmethod
    def release(outs: list[Any]) -> list[float]:
        """Drop what each layer returned, the last layer's first, timing each: what freeing the
        micro-batch's autograd graph costs per layer. The engine pays it when a backward's action
        ends (its state of the micro-batch goes); layer i's output holds the nodes of layer i's
        operations only, the earlier ones being held by layer i-1's output until it goes too."""
        times = [0.0] * len(outs)
        for i in reversed(range(len(outs))):
            t0 = time.perf_counter()
            outs[i] = None
            times[i] = time.perf_counter() - t0
        return times

    def commit(self) -> list[float]:
        """Fold each layer's BatchNorm statistics, timed per layer (0 for a layer without)."""
        commits = []
        for layer, folds in zip(self.layers, self.folds, strict=True):
            if not folds:
                commits.append(0.0)
                continue
            _sync(self.device)
            t0 = time.perf_counter()
            commit_batchnorm(layer)
            _sync(self.device)
            commits.append(time.perf_counter() - t0)
        return commits

    def end_step(self, per_layer: bool) -> tuple[list[float], list[float]]:
        """What a rank does between steps, timed: fold each layer's BatchNorm statistics (per layer;
        0 for a layer without BatchNorm), then, with an optimiser, the optimiser's step and zeroing
        the gradients in place (``rank.run``: ``zero_grad(set_to_none=False)``), on the gradients this
        step's backwards left and in the caches they left: one optimiser over the cell as a rank runs
        it (one time), or ``per_layer``, each layer's own, layer 0 first (one time per layer). The
        two differ by the optimiser's fixed cost per call, which a rank pays once per step. Without
        an optimiser the gradients are dropped (untimed) and no update is timed (an empty list)."""
        commits = self.commit()
        if self.optimizer is None:
            for p in self.params:
                p.grad = None
            return commits, []
        updates = []
        for opt in self.optimizers if per_layer else [self.optimizer]:
            if opt is None:
                updates.append(0.0)
                continue
            _sync(self.device)
            t0 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=False)
            _sync(self.device)
            t1 = time.perf_counter()
            updates.append(t1 - t0 - self.pauses.within(t0, t1))
        return commits, updates


def time_stream(
    layers: Sequence[nn.Module],
    inputs: Sequence[Batch],
    targets: Sequence[Any] | None,
    loss_fn: LossFn | None,
    *,
    device: torch.device,
    warmup: int,
    repeats: int,
    probe: Callable[[], float] | None = None,
    optimizer_fn: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
) -> StreamTimes:
    """Time ``layers`` (a cell; copies are timed) on the micro-batches ``inputs`` (M of them, leaves
    as the stage receives them), with ``loss_fn(output, targets[m])`` after the last layer when given
    (else the output's gradient is a tensor of ones, as if received). ``repeats`` timed pairs of steps
    (kept, remat) after ``warmup`` untimed ones; with ``optimizer_fn`` each step ends with the
    optimiser's step (``_Cell.end_step``). See the module doc."""
    M = len(inputs)
    if M < 1:
        raise ValueError("inputs is empty; allowed: one micro-batch per call of the stream")
    if loss_fn is not None and (targets is None or len(targets) != M):
        raise ValueError("targets must hold one entry per micro-batch when loss_fn is given")
    cell = _Cell(layers, device, optimizer_fn)
    if device.type == "cpu":  # the host settings a CPU stage runs under (the engine's default)
        apply_host_memory(DEFAULT_HOST_MEMORY)
    L = len(cell.layers)
    meter = ActivationMeter(cell.params)

    def loss_of(m: int) -> Callable[[Batch], torch.Tensor] | None:
        if loss_fn is None:
            return None
        assert targets is not None
        return lambda y: fp32_loss(loss_fn, y, targets[m], device.type) / M

    seeds: list[torch.Tensor] | None = None
    if loss_fn is None:  # made once, outside any timed region
        with torch.no_grad():
            y, _ = cell.forward(inputs[0], None, None)
        seeds = [torch.ones_like(t) for t in as_tuple(y) if t.is_floating_point()]
    out_bytes, in_shapes = _boundaries(cell, inputs[0])
    steps: list[Step] = []
    # what the process held before this stream out of the collector's scans (a rank freezes its
    # set-up the same way, ``engine.hostmem``): the pauses timed are the stream's own
    gc.collect()
    gc.freeze()
    with Pauses() as pauses:
        cell.pauses = pauses
        try:
            for r in range(warmup + repeats):
                kept, remat = _steps(cell, inputs, M, L, meter, loss_of, seeds, probe, pauses)
                if r >= warmup:
                    steps += [kept, remat]
        finally:
            cell.pauses = NO_PAUSES
    return StreamTimes(L, M, steps, out_bytes, in_shapes)


def _end_step(cell: _Cell, step: Step, per_layer: bool) -> None:
    commits, updates = cell.end_step(per_layer)
    step.commit.append(commits)
    if updates:
        step.update.append(updates)


def _steps(
    cell: _Cell,
    inputs: Sequence[Batch],
    M: int,
    L: int,
    meter: ActivationMeter,
    loss_of: Callable[[int], Callable[[Batch], torch.Tensor] | None],
    seeds: list[torch.Tensor] | None,
    probe: Callable[[], float] | None,
    pauses: Pauses,
) -> tuple[Step, Step]:
    """One kept step and one remat step of the stream (``time_stream``), each with the collector's
    pauses it paid."""
    device = cell.device
    kept = Step(probe() if probe is not None else 1.0)
    pauses.reset()
    graphs: dict[int, tuple[list[Any], _Boundaries]] = {}
    for m in range(M):
        bounds, outs = _Boundaries(L), list[Any]()
        with meter.record(m):
            times = cell.forward(inputs[m], loss_of(m), bounds, outs)[1]
        graphs[m] = (outs, bounds)
        kept.forward.append(times)
    for m in reversed(range(M)):
        outs, bounds = graphs.pop(m)
        kept.backward.append(cell.backward(outs[-1], seeds, bounds))
        kept.release.append(cell.release(outs))
        meter.release(m)
    _end_step(cell, kept, per_layer=False)
    kept.collector = pauses.total()
    remat = Step(probe() if probe is not None else 1.0)
    pauses.reset()
    rngs = {}
    for m in range(M):
        rngs[m] = save_rng(device)
        with torch.no_grad():
            _, times = cell.forward(inputs[m], loss_of(m), None)
        remat.nograd.append(times)
    for m in reversed(range(M)):
        bounds, outs = _Boundaries(L), list[Any]()
        t0 = time.perf_counter()
        with restored_rng(rngs.pop(m)), recomputing(), meter.record(m):
            remat.recompute_overhead.append(time.perf_counter() - t0)
            times = cell.forward(inputs[m], loss_of(m), bounds, outs)[1]
        remat.recompute.append(times)
        remat.backward.append(cell.backward(outs[-1], seeds, bounds))
        remat.release.append(cell.release(outs))
        meter.release(m)
    _end_step(cell, remat, per_layer=True)
    remat.collector = pauses.total()
    return kept, remat


@torch.no_grad()
def _boundaries(cell: _Cell, x: Batch) -> tuple[list[int], list[list]]:
    """Each layer's output bytes (a tuple's tensors summed) and input shapes, from one no-grad pass."""
    out, shapes = [], []
    for layer in cell.layers:
        shapes.append(tensor_shapes(as_tuple(x)))
        x = layer(x)
        out.append(sum(t.numel() * t.element_size() for t in as_tuple(x)))
    cell.commit()
    return out, shapes
