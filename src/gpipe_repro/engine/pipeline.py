"""One pipeline stage executing a schedule: the GPipe algorithm on one rank (paper §2.2-2.3).

A ``Pipeline`` holds this rank's cell (a contiguous slice of the model's layers) — or, under a
schedule with v virtual stages per rank, v cells, model stages k, k+K, ... (``cell.chunk_slices``)
— splits each mini-batch into M micro-batches, and executes its stage's action list (see
``schedule``): forward micro-batches, send boundary activations to the next stage, receive their
gradients, backward, send input gradients to the previous stage. Where the schedule splits the
backward (``zb-h1``), B computes only the input gradient and W, later, the weight gradient
(``split``). Gradients accumulate over the micro-batches, so after ``train_step`` every parameter's
``.grad`` equals the full-batch gradient; with replicas each cell's last backward (its last W under
a split) triggers DDP's bucketed all-reduce, overlapped with that backward. The caller then steps
its optimiser once: a synchronous update, the same for any K.

Layers are called as ``layer(x)`` where ``x`` is a tensor or a tuple of tensors, the previous layer's
output. The loss function runs on the last stage; ``loss_reduction`` says what it returns:

- ``mean`` (default): the mean over its micro-batch; the engine divides each by M. Exact when every
  micro-batch weighs the same (classification, fixed-length sequences).
- ``sum``: the micro-batch's *share* of the mini-batch loss, already divided by the whole
  mini-batch's normaliser (e.g. its number of target tokens, passed inside the targets); the engine
  adds the shares without dividing by M. Exact for per-token losses whose micro-batches hold unequal
  token counts. With D replicas the normaliser is the global mini-batch's, the engine scales the
  backward by D (DDP averages) and all-reduces the reported loss, so it is the global loss.

Boundary shapes may change from step to step (bucketed sentences): each stage describes its outputs
once per step and chunk (see ``comm``). Each direction of each link has a channel of its own, posted
in the order its peer posts (see ``transfers``), which is what NCCL needs (see ``fifo``).

Randomness: with ``seed`` given, every layer draws from generators seeded by (seed, step,
micro-batch, global layer index) — ``first_layer`` is each cell's first global index, ``train_step``
takes the step — so losses and updates are bit-identical whatever K and balance, for a given
schedule and M, whatever remat (see ``rng``). Without ``seed`` layers draw from the process's own
streams, as in plain PyTorch (then the draws depend on which rank runs a layer).

Timing: spans are measured on the device (CUDA events on a GPU), resolved at each step's end (see
``device``).

``precision="bf16"``: every forward and recompute runs under autocast, each layer's float outputs are
cast to bf16 at the layer boundary (so boundary activations and their gradients cross in bf16, and
the casts do not depend on K), the loss is fp32, parameters and gradients stay fp32 (see ``precision``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import device as devices
from .batchnorm import commit as commit_batchnorm
from .batchnorm import convert_batchnorm, recomputing
from .cell import Cell, chunk_slices, stage_slice
from .checkpoint import DEFAULT_CHECKPOINT, restored_rng, save_rng, uses_remat
from .comm import describe, rebuild, wire
from .errors import ArgumentError
from .events import Recorder
from .hostmem import DEFAULT_HOST_MEMORY, apply_host_memory, check_host_memory
from .memory import ActivationMeter
from .microbatch import Batch, as_tuple, from_tuple, join, split
from .precision import autocast, check_precision, compute_dtype, fp32_loss
from .rng import INFERENCE_STEP, Draws
from .schedule import (
    DEFAULT_SCHEDULE,
    Action,
    check_schedule,
    gradients_taken,
    splits_backward,
    stage_actions,
    virtual_stage,
)
from .split import Tape, backward_input, backward_weight, distinct_grad
from .topology import Topology
from .transfers import Transfers

__all__ = [
    "Cell",
    "DEFAULT_LOOKAHEAD",
    "LOSS_REDUCTIONS",
    "Pipeline",
    "chunk_slices",
    "stage_slice",
]

LOSS_REDUCTIONS: tuple[str, ...] = ("mean", "sum")
# receives are posted this many actions ahead (gloo moves a message only once its receive is posted)
DEFAULT_LOOKAHEAD = 4

LossFn = Callable[..., torch.Tensor]  # (output, targets) -> loss
# BatchNorm buffers are kept in step by MicroBatchNorm.commit, so DDP must not broadcast them.
_NO_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else {"broadcast_buffers": False}
)


def _to(x: Batch, device: torch.device) -> Batch:
    return from_tuple([t.to(device, non_blocking=True) for t in as_tuple(x)], isinstance(x, tuple))


class _Held:
    """What a micro-batch of one chunk keeps from its forward to its backward (and W)."""

    __slots__ = ("x", "remat", "rng", "y", "loss", "tape", "grads")

    def __init__(
        self, x: Batch | None, remat: bool, rng: Any, y: Batch | None, loss: Any, tape: Tape | None
    ) -> None:
        self.x, self.remat, self.rng, self.y, self.loss, self.tape = x, remat, rng, y, loss, tape
        self.grads: list[torch.Tensor] | None = None  # taken at B, used at W (the first cell)


class Pipeline:
    """Executes GPipe on one rank. Build one per rank with that rank's layers.

    ``layers``: this rank's cell; with ``virtual_stages`` v > 1, a list of its v cells' layers
    (model stages k, k+K, ...: ``chunk_slices``), and ``first_layer`` a list of their first
    global indices. ``schedule``: ``gpipe`` | ``1f1b`` | ``interleaved`` | ``zb-h1``
    (``schedule.SCHEDULES``; several chunks per rank need ``init_topology(ring=True)`` when K > 1);
    ``checkpoint``: ``never`` | ``except_last`` | ``always``; ``track_memory``: saved-tensor
    accounting (``peak_activation_bytes``); ``lookahead``: how many actions ahead receives are
    posted; ``host_memory``: ``retain`` (default) makes a CPU rank's malloc keep freed memory
    between steps, process-wide (see ``hostmem``), ``system`` leaves it alone; ``loss_reduction``:
    ``mean`` | ``sum``, what ``loss_fn`` returns (see the module docstring); ``precision``:
    ``fp32`` | ``bf16`` (autocast, fp32 master weights; see ``precision``); ``seed``: key every
    random draw by (seed, step, micro-batch, global layer), None: the process's own streams;
    ``first_layer``: the global index of each cell's first layer (see ``rng``).
    """

    def __init__(
        self,
        layers: Sequence[nn.Module] | Sequence[Sequence[nn.Module]],
        topology: Topology,
        *,
        M: int,
        schedule: str = DEFAULT_SCHEDULE,
        checkpoint: str = DEFAULT_CHECKPOINT,
        loss_fn: LossFn | None = None,
        track_memory: bool = True,
        bucket_cap_mb: float = 25.0,
        lookahead: int = DEFAULT_LOOKAHEAD,
        host_memory: str = DEFAULT_HOST_MEMORY,
        loss_reduction: str = "mean",
        precision: str = "fp32",
        seed: int | None = None,
        first_layer: int | Sequence[int] = 0,
        virtual_stages: int = 1,
    ) -> None:
        if M < 1:
            raise ArgumentError("M", M, "is invalid; allowed: an integer >= 1")
        if loss_reduction not in LOSS_REDUCTIONS:
            allowed = ", ".join(LOSS_REDUCTIONS)
            raise ArgumentError("loss_reduction", loss_reduction, f"is unknown; allowed: {allowed}")
        self.loss_reduction = loss_reduction
        uses_remat(checkpoint, 0, M)  # validates the mode
        check_precision(precision, topology.device.type)
        self.precision = precision
        check_host_memory(host_memory)
        v = virtual_stages
        check_schedule(schedule, topology.K, M, v)
        if v > 1 and topology.K > 1 and not topology.ring:
            raise ArgumentError(
                "virtual_stages", v, "needs a ring of stages: init_topology(..., ring=True)"
            )
        chunks: list[list[nn.Module]] = (
            [list(cast(Sequence[nn.Module], layers))]
            if v == 1
            else [list(c) for c in cast(Sequence[Sequence[nn.Module]], layers)]
        )
        firsts = [first_layer] if isinstance(first_layer, int) else list(first_layer)
        if len(chunks) != v or len(firsts) != v:
            raise ArgumentError(
                "layers", f"{len(chunks)} cells", f"do not match virtual_stages={v}: one per chunk"
            )
        if any(f < 0 for f in firsts):
            raise ArgumentError("first_layer", first_layer, "is invalid; allowed: integers >= 0")
        self.topo = topology
        self.K, self.M, self.v = topology.K, M, v
        self.S = self.K * v  # model stages
        self.schedule, self.checkpoint = schedule, checkpoint
        self.split = splits_backward(schedule)
        self.actions: list[Action] = stage_actions(schedule, self.K, M, topology.stage, v)
        self.device = topology.device
        # CPU activations are host memory: keep freed blocks for the next step (see hostmem).
        self.host_memory = (
            apply_host_memory(host_memory)
            if self.device.type == "cpu"
            else "system (not a CPU rank)"
        )
        dtype = compute_dtype(precision) if precision != "fp32" else None
        self.seed, self.first_layers = seed, firsts
        self.cells: list[Cell] = [
            cast(
                Cell,
                convert_batchnorm(
                    Cell(c, dtype, Draws(seed, f, self.device) if seed is not None else None)
                ).to(self.device),
            )
            for c, f in zip(chunks, firsts)
        ]
        self.modules: list[nn.Module] = list(self.cells)
        self.ddps: list[DistributedDataParallel | None] = [None] * v
        if topology.replicas > 1:
            for c, cell in enumerate(self.cells):
                if any(p.requires_grad for p in cell.parameters()):
                    ddp = DistributedDataParallel(
                        cell,
                        process_group=topology.dp_group,
                        **_NO_BUFFER_SYNC,
                        bucket_cap_mb=bucket_cap_mb,
                        device_ids=[self.device] if self.device.type == "cuda" else None,
                    )
                    self.ddps[c], self.modules[c] = ddp, ddp
        # each cell's last action that accumulates weight gradients: DDP's reducer is armed there
        weights = "W" if self.split else "B"
        self._arm = {
            max(i for i, a in enumerate(self.actions) if a.kind == weights and a.chunk == c)
            for c in range(v)
        }
        self._params = [[p for p in cell.parameters() if p.requires_grad] for cell in self.cells]
        if topology.is_last and loss_fn is None:
            raise ValueError("the last stage needs a loss_fn")
        self.loss_fn = loss_fn
        self.recorder = Recorder(topology.stage, topology.replica, devices.clock_for(self.device))
        self.meter = ActivationMeter(self.parameters()) if track_memory else None
        self.peak_activation_bytes = 0
        self.lookahead = lookahead
        taken = gradients_taken(schedule, self.K, M, topology.stage, v)
        self.transfers = Transfers(topology, self.actions, lookahead, self.recorder, taken, v)
        self.steps_done = 0  # train_step calls: the step of the keys when none is given

    # ------------------------------------------------------------------ public API
    @property
    def cell(self) -> Cell:
        """This rank's cell (one chunk per rank; with several: ``cells``)."""
        if self.v != 1:
            raise AttributeError(f"this rank holds {self.v} cells (virtual_stages); use .cells")
        return self.cells[0]

    @property
    def layers(self) -> list[nn.Module]:
        """Every layer this rank holds, cell after cell (their global indices: ``layer_indices``)."""
        return [layer for cell in self.cells for layer in cell.layers]

    @property
    def layer_indices(self) -> list[int]:
        """The global index of each of ``layers``."""
        return [
            f + i for cell, f in zip(self.cells, self.first_layers) for i in range(len(cell.layers))
        ]

    def parameters(self) -> Iterator[nn.Parameter]:
        for cell in self.cells:
            yield from cell.parameters()

    def reset_peak_memory(self) -> None:
        """Start both peak counters afresh — the accounted activation peak and, on CUDA, the
        allocator's — e.g. after warm-up steps, so a run reports its own steps' peak."""
        self.peak_activation_bytes = 0
        if self.meter is not None:
            self.meter.reset_peak()
        devices.reset_peak(self.device)

    @property
    def allocator_peak_bytes(self) -> int | None:
        """The device allocator's peak since the last reset (None on a CPU: see ``memory``)."""
        return devices.peak_bytes(self.device)

    def train_step(
        self, inputs: Batch | None = None, targets: Any = None, step: int | None = None
    ) -> float | None:
        """Forward and backward one mini-batch; returns its mean loss on the last stage, else None.

        ``inputs`` is needed on the first stage only, ``targets`` on the last only. ``step`` keys
        the random draws (with ``seed``): pass the run's step number, so a resumed run draws what an
        uninterrupted one would; None counts this Pipeline's calls from 0.
        """
        topo, M = self.topo, self.M
        self._step = self.steps_done if step is None else step
        for cell in self.cells:
            cell.train()
        self._xs = (
            split(_to(inputs, self.device), M) if topo.is_first and inputs is not None else None
        )
        if topo.is_last:
            self._ts = (
                split(_to(targets, self.device), M)
                if torch.is_tensor(targets) or isinstance(targets, tuple)
                else [targets] * M
            )
        self._state: dict[tuple[int, int], _Held] = {}
        self._loss = torch.zeros((), device=self.device)
        self.transfers.start()
        if self.meter is not None:
            self.meter.reset_peak()
        rec = self.recorder
        t0 = rec.mark()
        with contextlib.ExitStack() as stack:
            for ddp in self.ddps:
                if ddp is not None:
                    stack.enter_context(ddp.no_sync())
            for i, a in enumerate(self.actions):
                self.transfers.prepost(i)
                if a.kind == "F":
                    self._forward(a.chunk, a.mb)
                elif a.kind == "B":
                    self._backward(a.chunk, a.mb, i in self._arm)
                else:
                    self._weight(a.chunk, a.mb, i in self._arm)
                self.transfers.release()
        self.transfers.drain()
        if self.loss_reduction == "sum" and topo.is_last and topo.dp_group is not None:
            dist.all_reduce(self._loss, group=topo.dp_group)  # the replicas' shares of one loss
        for cell in self.cells:
            commit_batchnorm(cell, topo.dp_group)
        rec.add("step", -1, t0, rec.mark())
        rec.end_step()  # on CUDA: waits for the device, then the spans become device times
        self.steps_done += 1
        if self.meter is not None:
            self.peak_activation_bytes = max(self.peak_activation_bytes, self.meter.peak)
        return float(self._loss.item()) if topo.is_last else None

    @torch.no_grad()
    def forward(self, inputs: Batch | None = None) -> Batch | None:
        """Inference through the pipeline (eval mode, running BatchNorm statistics).

        Returns the joined output on the last stage, None elsewhere. The batch must divide by M.
        Cell by cell, all micro-batches of one before the next (each rank's cells in model order).
        """
        topo, tr = self.topo, self.transfers
        was_training = [cell.training for cell in self.cells]
        for cell in self.cells:
            cell.eval()
        xs: list[Batch | None] = (
            list(split(_to(inputs, self.device), self.M))
            if topo.is_first and inputs is not None
            else [None] * self.M
        )
        outs: list[Batch] = []
        sends: list[Any] = []
        local: dict[int, Batch] = {}
        try:
            for c, cell in enumerate(self.cells):
                s = virtual_stage(self.K, topo.stage, c)
                for m in range(self.M):
                    if s > 0 and tr.local:
                        x = local.pop(m)
                    elif s > 0:
                        assert topo.act_in is not None
                        metas, tup = topo.act_in.recv_meta(self.device)
                        bufs, works = topo.act_in.irecv(
                            [t for t in metas if t.crosses], self.device
                        )
                        for w in works:
                            w.wait()
                        x = rebuild(bufs, metas, tup)
                    else:
                        given = xs[m]
                        assert given is not None, "the first stage needs inputs"
                        x = given
                    with autocast(self.device.type, self.precision), cell.keyed(INFERENCE_STEP, m):
                        y = cell(x)
                    if s == self.S - 1:
                        outs.append(y)
                    elif tr.local:
                        local[m] = y
                    else:
                        assert topo.act_out is not None
                        ys = as_tuple(y)
                        out_metas = describe(ys, aliases=True)
                        sent = topo.act_out.send_meta(out_metas, isinstance(y, tuple), self.device)
                        sends += [sent] if sent is not None else []
                        sends += topo.act_out.isend(wire(ys, out_metas))
                        sends = [w for w in sends if not w.is_completed()]
            for sent in sends:
                sent.wait()
        finally:
            for cell, training in zip(self.cells, was_training):
                cell.train(training)
        return join(outs) if topo.is_last else None

    # ------------------------------------------------------------------ schedule steps
    def _micro_loss(self, y: Batch, m: int) -> torch.Tensor:
        """Micro-batch m's part of the mini-batch loss: mean / M, or the loss_fn's own share."""
        assert self.loss_fn is not None
        loss = fp32_loss(self.loss_fn, y, self._ts[m], self.device.type)
        return loss / self.M if self.loss_reduction == "mean" else loss

    def _key(self, c: int, m: int) -> int:
        return c * self.M + m  # the meter's key of a chunk's micro-batch

    def _run(self, c: int, m: int, x: Batch, tape: Tape | None) -> Batch:
        cell = self.cells[c]
        with autocast(self.device.type, self.precision), cell.keyed(self._step, m):
            with cell.taped(tape):
                return cast(Batch, self.modules[c](x))

    def _forward(self, c: int, m: int) -> None:
        rec, meter = self.recorder, self.meter
        s = virtual_stage(self.K, self.topo.stage, c)
        first, last = s == 0, s == self.S - 1
        if first:
            assert self._xs is not None, "the first stage needs inputs"
            x = self._xs[m]
        else:
            x = self.transfers.activations(c, m)
        remat = uses_remat(self.checkpoint, m, self.M)
        # keyed draws replay by themselves; the process's streams are saved for the recompute
        rng = save_rng(self.device) if remat and self.seed is None else None
        key = self._key(c, m)
        saved = _graph_key(key) if self.split else key
        record = (
            meter.record(saved) if meter is not None and not remat else contextlib.nullcontext()
        )
        tape = Tape() if self.split and not remat else None
        with rec.span("forward", m, c), torch.set_grad_enabled(not remat), record:
            y = self._run(c, m, x, tape)
            loss = None
            if last:  # the loss's saved tensors (log-softmax of the logits) count too
                loss = self._micro_loss(y, m)
        if loss is not None:
            self._loss += loss.detach()
        if meter is not None:
            meter.hold(key, as_tuple(x) if remat else (*as_tuple(x), *as_tuple(y)))
        if not last:
            self.transfers.send_activations(c, m, y)
        self._state[(c, m)] = _Held(
            x, remat, rng, None if remat else y, None if remat else loss, tape
        )

    def _backward(self, c: int, m: int, arm: bool) -> None:
        """B: the backward of chunk c's micro-batch m (only its input gradient under a split)."""
        topo, rec, meter = self.topo, self.recorder, self.meter
        s = virtual_stage(self.K, topo.stage, c)
        held = self._state[(c, m)] if self.split else self._state.pop((c, m))
        x, key = held.x, self._key(c, m)
        assert x is not None
        if self.split and s == 0:
            # The model's first cell sends no input gradient: none of its backward is on the
            # critical path, so B only takes the gradient (in its channel's order) and W runs the
            # whole split backward (the same passes, later: the same bits). No computing span: the
            # receive records its own wait, which must count as idle.
            held.grads = self.transfers.gradients(c, m) if s < self.S - 1 else None
            return
        outs, grads = self._roots(c, m, held, rec.span("recompute", m, c))
        ddp = self.ddps[c]
        inputs = (
            [t for t in wire(as_tuple(x), self.transfers.in_meta[c][0]) if t.is_floating_point()]
            if s > 0
            else []
        )
        if self.split:
            assert held.tape is not None
            with rec.span("backward", m, c):
                got = backward_input(held.tape, grads or [None], outs, self._params[c])
            by_id = {id(t): gi for t, gi in zip(distinct_grad(as_tuple(x)), got)}
            gx = [by_id.get(id(t)) for t in inputs]
            held.x = held.y = held.loss = None
            if meter is not None:  # the boundary tensors go; the graph and the kept gradients stay
                meter.release(key)
                meter.hold(_graph_key(key), held.tape.kept())
        else:
            if arm and ddp is not None:
                # All forwards ran under no_sync; arm DDP's reducer for exactly this backward, so
                # its bucketed all-reduce overlaps it and averages the fully accumulated gradients.
                ddp.reducer.prepare_for_backward([])
            with rec.span("backward", m, c):
                if outs:
                    torch.autograd.backward(outs, grads)
            gx = [t.grad for t in inputs]
        if s > 0:
            self.transfers.send_gradients(
                c, m, [gi if gi is not None else torch.zeros_like(t) for gi, t in zip(gx, inputs)]
            )
        if meter is not None and not self.split:
            meter.release(key)

    def _roots(
        self, c: int, m: int, held: _Held, span: Any
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """The backward's roots and their gradients: the loss on the model's last cell, else the
        crossing float outputs with the gradients received (taken now, or at B: ``held.grads``);
        under remat the cell recomputed first, inside ``span`` (before the gradient arrives, §2.3,
        replaying the same draws)."""
        s = virtual_stage(self.K, self.topo.stage, c)
        y, loss, meter = held.y, held.loss, self.meter
        if held.remat:
            key = self._key(c, m)
            saved = _graph_key(key) if self.split else key
            record = meter.record(saved) if meter is not None else contextlib.nullcontext()
            replay = restored_rng(held.rng) if held.rng is not None else contextlib.nullcontext()
            held.tape = Tape() if self.split else None
            assert held.x is not None
            with span, replay, recomputing(), record:
                y = self._run(c, m, held.x, held.tape)
                if s == self.S - 1:
                    loss = self._micro_loss(y, m)
        if s == self.S - 1:
            # "sum" with replicas: DDP averages the replicas' gradients, the shares must add up.
            ddp = self.ddps[c]
            scale = self.topo.replicas if self.loss_reduction == "sum" and ddp is not None else 1
            return [loss * scale if scale != 1 else loss], None
        assert y is not None
        g = held.grads if held.grads is not None else self.transfers.gradients(c, m)
        crossing = wire(as_tuple(y), self.transfers.out_meta[c])
        pairs = [
            (o, gi)
            for o, gi in zip([t for t in crossing if t.is_floating_point()], g)
            if o.requires_grad
        ]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def _weight(self, c: int, m: int, arm: bool) -> None:
        """W: the weight gradient of chunk c's micro-batch m, from what its B kept (``split``); on
        the model's first cell the whole split backward (its B took only the gradient)."""
        held = self._state.pop((c, m))
        ddp = self.ddps[c]
        first = virtual_stage(self.K, self.topo.stage, c) == 0
        key = self._key(c, m)
        with self.recorder.span("weight", m, c):
            if first:
                outs, grads = self._roots(c, m, held, contextlib.nullcontext())
                assert held.tape is not None
                backward_input(held.tape, grads or [None], outs, self._params[c])
            assert held.tape is not None
            if arm and ddp is not None:
                ddp.reducer.prepare_for_backward([])  # the all-reduce overlaps this cell's last W
            backward_weight(held.tape)
        if self.meter is not None:
            self.meter.release(_graph_key(key))
            if first:
                self.meter.release(key)


def _graph_key(key: int) -> int:
    """The meter's key for what a micro-batch holds between B and W (apart from its boundaries)."""
    return -1 - key
