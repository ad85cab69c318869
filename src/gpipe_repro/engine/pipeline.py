"""One pipeline stage executing a schedule: the GPipe algorithm on one rank (paper §2.2-2.3).

A ``Pipeline`` holds this rank's cell (a contiguous slice of the model's layers), splits each
mini-batch into M micro-batches, and executes its stage's action list (see ``schedule``): forward
micro-batches, send boundary activations to the next stage, receive their gradients, backward,
send input gradients to the previous stage. Gradients accumulate over the micro-batches, so after
``train_step`` every parameter's ``.grad`` equals the full-batch gradient; with replicas the last
backward of the step triggers DDP's bucketed all-reduce, overlapped with that backward. The caller then
steps its optimiser once: a synchronous update, the same for any K.

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
once per step (see ``comm``). Each direction of each link has a channel of its own, posted in the
order its peer posts (see ``transfers``), which is what NCCL needs (see ``fifo``).

Randomness: with ``seed`` given, every layer draws from generators seeded by (seed, step,
micro-batch, global layer index) — ``first_layer`` is this cell's first global index, ``train_step``
takes the step — so losses and updates are bit-identical whatever K, balance, schedule and remat, at
a fixed M (see ``rng``). Without ``seed`` layers draw from the process's own streams, as in plain
PyTorch (then the draws depend on which rank runs a layer).

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
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from . import device as devices
from .batchnorm import commit as commit_batchnorm
from .batchnorm import convert_batchnorm, recomputing
from .checkpoint import DEFAULT_CHECKPOINT, restored_rng, save_rng, uses_remat
from .comm import describe, rebuild, wire
from .errors import ArgumentError
from .events import Recorder
from .hostmem import DEFAULT_HOST_MEMORY, apply_host_memory, check_host_memory
from .memory import ActivationMeter
from .microbatch import Batch, as_tuple, from_tuple, join, split
from .precision import autocast, cast_floats, check_precision, compute_dtype, fp32_loss
from .rng import INFERENCE_STEP, Draws
from .schedule import DEFAULT_SCHEDULE, Action, gradients_taken, stage_actions
from .topology import Topology
from .transfers import Transfers

__all__ = ["Cell", "DEFAULT_LOOKAHEAD", "LOSS_REDUCTIONS", "Pipeline", "stage_slice"]

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


class Cell(nn.Module):
    """A contiguous run of layers; each takes the previous one's output (tensor or tuple).

    ``dtype``: each layer's float outputs are cast to it (mixed precision: the casts sit at layer
    boundaries, so a stage boundary adds none); None leaves them as the layer returns them.
    ``draws``: key each layer's random draws (see ``rng``); a call inside :meth:`keyed` uses that
    (step, micro-batch), a call outside draws from the process's streams."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        dtype: torch.dtype | None = None,
        draws: Draws | None = None,
    ) -> None:
        super().__init__()
        self.layers: nn.ModuleList = nn.ModuleList(layers)
        self.dtype = dtype
        self.draws = draws
        self._key: tuple[int, int] | None = None

    @contextlib.contextmanager
    def keyed(self, step: int, mb: int) -> Iterator[None]:
        """Calls inside draw with the keys of ``step`` and micro-batch ``mb`` (if keyed at all)."""
        self._key = (step, mb) if self.draws is not None else None
        try:
            yield
        finally:
            self._key = None

    def forward(self, x: Batch) -> Batch:
        draws, key = self.draws, self._key
        if draws is None or key is None:
            for layer in self.layers:
                x = cast_floats(layer(x), self.dtype)
            return x
        with draws.kept_outside():
            for j, layer in enumerate(self.layers):
                draws.seed_layer(key[0], key[1], j)
                x = cast_floats(layer(x), self.dtype)
        return x


def stage_slice(balance: Sequence[int], stage: int) -> slice:
    start = sum(balance[:stage])
    return slice(start, start + balance[stage])


def _to(x: Batch, device: torch.device) -> Batch:
    return from_tuple([t.to(device, non_blocking=True) for t in as_tuple(x)], isinstance(x, tuple))


class Pipeline:
    """Executes GPipe on one rank. Build one per rank with that rank's layers.

    ``schedule``: ``gpipe`` | ``1f1b``; ``checkpoint``: ``never`` | ``except_last`` | ``always``;
    ``track_memory``: saved-tensor accounting (``peak_activation_bytes``); ``lookahead``: how many
    actions ahead receives are posted; ``host_memory``: ``retain`` (default) makes a CPU rank's malloc
    keep freed memory between steps, process-wide (see ``hostmem``), ``system`` leaves it alone;
    ``loss_reduction``: ``mean`` | ``sum``, what ``loss_fn`` returns (see the module docstring);
    ``precision``: ``fp32`` | ``bf16`` (autocast, fp32 master weights; see ``precision``);
    ``seed``: key every random draw by (seed, step, micro-batch, global layer), None: the process's
    own streams; ``first_layer``: the global index of ``layers[0]`` (see ``rng``).
    """

    def __init__(
        self,
        layers: Sequence[nn.Module],
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
        first_layer: int = 0,
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
        self.topo = topology
        self.K, self.M = topology.K, M
        self.schedule, self.checkpoint = schedule, checkpoint
        self.actions: list[Action] = stage_actions(schedule, self.K, M, topology.stage)
        self.last_backward = max(i for i, a in enumerate(self.actions) if a.kind == "B")
        self.device = topology.device
        # CPU activations are host memory: keep freed blocks for the next step (see hostmem).
        self.host_memory = (
            apply_host_memory(host_memory)
            if self.device.type == "cpu"
            else "system (not a CPU rank)"
        )
        if first_layer < 0:
            raise ArgumentError("first_layer", first_layer, "is invalid; allowed: an integer >= 0")
        dtype = compute_dtype(precision) if precision != "fp32" else None
        draws = Draws(seed, first_layer, self.device) if seed is not None else None
        self.seed, self.first_layer = seed, first_layer
        self.cell: Cell = convert_batchnorm(Cell(layers, dtype, draws)).to(self.device)  # type: ignore[assignment]
        self.module: nn.Module = self.cell
        self.ddp: DistributedDataParallel | None = None
        if topology.replicas > 1 and any(p.requires_grad for p in self.cell.parameters()):
            self.ddp = DistributedDataParallel(
                self.cell,
                process_group=topology.dp_group,
                **_NO_BUFFER_SYNC,
                bucket_cap_mb=bucket_cap_mb,
                device_ids=[self.device] if self.device.type == "cuda" else None,
            )
            self.module = self.ddp
        if topology.is_last and loss_fn is None:
            raise ValueError("the last stage needs a loss_fn")
        self.loss_fn = loss_fn
        self.recorder = Recorder(topology.stage, topology.replica, devices.clock_for(self.device))
        self.meter = ActivationMeter(self.cell.parameters()) if track_memory else None
        self.peak_activation_bytes = 0
        self.lookahead = lookahead
        taken = gradients_taken(schedule, self.K, M, topology.stage)
        self.transfers = Transfers(topology, self.actions, lookahead, self.recorder, taken)
        self.steps_done = 0  # train_step calls: the step of the keys when none is given

    # ------------------------------------------------------------------ public API
    def parameters(self) -> Iterator[nn.Parameter]:
        return self.cell.parameters()

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
        self.cell.train()
        self._xs = (
            split(_to(inputs, self.device), M) if topo.is_first and inputs is not None else None
        )
        if topo.is_last:
            self._ts = (
                split(_to(targets, self.device), M)
                if torch.is_tensor(targets) or isinstance(targets, tuple)
                else [targets] * M
            )
        self._state: dict[int, tuple[Any, ...]] = {}
        self._loss = torch.zeros((), device=self.device)
        self.transfers.start()
        if self.meter is not None:
            self.meter.reset_peak()
        rec = self.recorder
        t0 = rec.mark()
        ctx = self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext()
        with ctx:
            for i, a in enumerate(self.actions):
                self.transfers.prepost(i)
                if a.kind == "F":
                    self._forward(a.mb)
                else:
                    self._backward(a.mb, i == self.last_backward)
                self.transfers.release()
        self.transfers.drain()
        if self.loss_reduction == "sum" and topo.is_last and topo.dp_group is not None:
            dist.all_reduce(self._loss, group=topo.dp_group)  # the replicas' shares of one loss
        commit_batchnorm(self.cell, topo.dp_group)
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
        """
        topo = self.topo
        was_training = self.cell.training
        self.cell.eval()
        xs: list[Batch | None] = (
            list(split(_to(inputs, self.device), self.M))
            if topo.is_first and inputs is not None
            else [None] * self.M
        )
        outs: list[Batch] = []
        sends: list[Any] = []
        try:
            for m in range(self.M):
                if topo.act_in is not None:
                    metas, tup = topo.act_in.recv_meta(self.device)
                    bufs, works = topo.act_in.irecv([t for t in metas if t.crosses], self.device)
                    for w in works:
                        w.wait()
                    x = rebuild(bufs, metas, tup)
                else:
                    given = xs[m]
                    assert given is not None, "the first stage needs inputs"
                    x = given
                with autocast(self.device.type, self.precision), self.cell.keyed(INFERENCE_STEP, m):
                    y = self.cell(x)
                if topo.act_out is not None:
                    ys = as_tuple(y)
                    out_metas = describe(ys, aliases=True)
                    sent = topo.act_out.send_meta(out_metas, isinstance(y, tuple), self.device)
                    sends += [sent] if sent is not None else []
                    sends += topo.act_out.isend(wire(ys, out_metas))
                    sends = [w for w in sends if not w.is_completed()]
                else:
                    outs.append(y)
            for sent in sends:
                sent.wait()
        finally:
            self.cell.train(was_training)
        return join(outs) if topo.is_last else None

    # ------------------------------------------------------------------ schedule steps
    def _micro_loss(self, y: Batch, m: int) -> torch.Tensor:
        """Micro-batch m's part of the mini-batch loss: mean / M, or the loss_fn's own share."""
        assert self.loss_fn is not None
        loss = fp32_loss(self.loss_fn, y, self._ts[m], self.device.type)
        return loss / self.M if self.loss_reduction == "mean" else loss

    def _forward(self, m: int) -> None:
        topo, rec, meter = self.topo, self.recorder, self.meter
        if topo.is_first:
            assert self._xs is not None, "the first stage needs inputs"
            x = self._xs[m]
        else:
            x = self.transfers.activations(m)
        remat = uses_remat(self.checkpoint, m, self.M)
        # keyed draws replay by themselves; the process's streams are saved for the recompute
        rng = save_rng(self.device) if remat and self.seed is None else None
        record = meter.record(m) if meter is not None and not remat else contextlib.nullcontext()
        with rec.span("forward", m), torch.set_grad_enabled(not remat), record:
            with autocast(self.device.type, self.precision), self.cell.keyed(self._step, m):
                y = self.module(x)
            loss = None
            if topo.is_last:  # the loss's saved tensors (log-softmax of the logits) count too
                loss = self._micro_loss(y, m)
        if loss is not None:
            self._loss += loss.detach()
        if meter is not None:
            meter.hold(m, as_tuple(x) if remat else (*as_tuple(x), *as_tuple(y)))
        if not topo.is_last:
            self.transfers.send_activations(m, y)
        self._state[m] = (x, remat, rng, None if remat else y, None if remat else loss)

    def _backward(self, m: int, last_backward: bool) -> None:
        topo, rec, meter = self.topo, self.recorder, self.meter
        x, remat, rng, y, loss = self._state.pop(m)
        if remat:  # rematerialise before the gradient arrives (§2.3), replaying the same draws
            record = meter.record(m) if meter is not None else contextlib.nullcontext()
            replay = restored_rng(rng) if rng is not None else contextlib.nullcontext()
            with rec.span("recompute", m), replay, recomputing(), record:
                with autocast(self.device.type, self.precision), self.cell.keyed(self._step, m):
                    y = self.module(x)
                if topo.is_last:
                    loss = self._micro_loss(y, m)
        if topo.is_last:
            # "sum" with replicas: DDP averages the replicas' gradients, the shares must add up.
            scale = self.topo.replicas if self.loss_reduction == "sum" and self.ddp else 1
            outs, grads = [loss * scale if scale != 1 else loss], None
        else:
            g = self.transfers.gradients(m)
            assert self.transfers.out_meta is not None
            crossing = wire(as_tuple(y), self.transfers.out_meta)
            pairs = [
                (o, gi)
                for o, gi in zip([t for t in crossing if t.is_floating_point()], g)
                if o.requires_grad
            ]
            outs, grads = [p[0] for p in pairs], [p[1] for p in pairs]
        if last_backward and self.ddp is not None:
            # All forwards ran under no_sync; arm DDP's reducer for exactly this backward, so its
            # bucketed all-reduce overlaps it and averages the fully accumulated gradients.
            self.ddp.reducer.prepare_for_backward([])
        with rec.span("backward", m):
            if outs:
                torch.autograd.backward(outs, grads)
        if not topo.is_first:
            assert self.transfers.in_meta is not None
            gx = [
                t.grad if t.grad is not None else torch.zeros_like(t)
                for t in wire(as_tuple(x), self.transfers.in_meta[0])
                if t.is_floating_point()
            ]
            self.transfers.send_gradients(m, gx)
        if meter is not None:
            meter.release(m)
