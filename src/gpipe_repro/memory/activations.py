"""Per-stage memory of a pipelined model, computed on the meta device (nothing is allocated).

The terms mirror what the engine accounts on a real run (``engine.memory``), so the two can be
compared (tests/planner): per stage,

- state: parameters, gradients and optimiser state. RMSProp keeps one running average, so weights +
  gradients + state = 12 bytes per fp32 parameter (the paper's figure).
- activations of one micro-batch: the unique tensors autograd saves for backward while the stage
  runs forward (the loss's too on the last stage), plus the stage's input (kept for backward or
  for rematerialisation) and its output (kept until its gradient arrives);
- the working set of one micro-batch (``memory.working``): what its forward and backward hold for
  a while beyond the above — the received output gradient, the gradients of intermediate outputs,
  backward's outputs and the kernels' scratch; it occurs for one micro-batch at a time, so it counts
  once per stage, whatever the schedule and remat mode;
- how many micro-batches are alive at the peak, from the schedule and the remat mode:

  | schedule, remat | peak activation bytes of stage k |
  |---|---|
  | gpipe, never | M · (in + saved + out) + work |
  | gpipe, always | M · in + saved + out + work (one micro-batch recomputed at a time) |
  | gpipe, except_last | M · in + saved + out + work |
  | 1f1b | the same with M replaced by the micro-batches in flight, min(K - k, M); with except_last a
  |      | stage that has warm-up forwards (k < K-1) also holds a second micro-batch's saved tensors |
  |      | and output (the kept last one's, while it recomputes another); a stage k > 0 with fewer |
  |      | than M in flight also holds one input gradient it sent (+ in) |

- what the transfers hold (``peak_activation_bytes``' walk; the table above is the walk with no
  receive posted ahead): a rematerialised micro-batch's output, held whole by its send until its
  gradient arrives; the input gradients a stage sent, until the previous stage is known to have
  taken them (gloo reports a send complete only once waited for: ``engine.transfers``); the
  receives posted ahead of the actions that need them (the engine's lookahead).

These follow GPipe §2.3: O(N · L/K) without remat, O(N + L/K · N/M) with it.

How a stage is measured: the layers are built on the meta device (nothing allocated), and run here
on *fake* CPU tensors (``FakeTensorMode``: shapes, dtypes and strides, no storage) so that torch
dispatches every operation exactly as it would for the engine's CPU tensors — the same kernel choice
(CPU's flash attention keeps only the log-sum-exp, never the S×S probabilities that a meta-device
run's math fallback would save) and, with ``precision="bf16"``, the same autocast policy, which
meta tensors do not get. The stage runs through the engine's own ``Cell`` (each layer's outputs cast
to the compute dtype), under the engine's autocast region, with the loss in fp32 as the engine
computes it (``engine.precision``), so the bytes counted per dtype are the bytes the engine saves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

from ..engine.checkpoint import uses_remat
from ..engine.microbatch import Batch, as_tuple
from ..engine.pipeline import DEFAULT_LOOKAHEAD, Cell
from ..engine.precision import autocast, compute_dtype, fp32_loss
from ..engine.schedule import (
    Action,
    gradients_taken,
    splits_backward,
    stage_actions,
    virtual_stage,
)
from .working import kept_bytes, split_working_set

__all__ = [
    "Saved",
    "StageActivation",
    "measure_stage",
    "peak_activation_bytes",
    "step_temporary_bytes",
    "STATE_BYTES_PER_PARAM",
    "state_bytes",
]

# The device type a stage is measured for (fake tensors: no memory). CPU by default, the engine's
# validated device here; "cuda" on a CUDA build plans with CUDA's kernels and autocast policy.
MEASURE_DEVICE = "cpu"

# weights (4) + gradients (4) + one optimiser slot (4): RMSProp/SGD-momentum in fp32
STATE_BYTES_PER_PARAM = {"rmsprop": 12, "sgd": 12, "adam": 16}


def state_bytes(params: int, optim: str = "rmsprop") -> int:
    return params * STATE_BYTES_PER_PARAM[optim]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass(frozen=True)
class StageActivation:
    """Bytes of one micro-batch on one stage."""

    input: int  # the stage's input tensors (kept for backward / remat)
    saved: int  # unique tensors saved for backward, input excluded
    output: int  # output tensors not already counted (kept until their gradient arrives)
    # Autocast's compute-dtype copies of the weights that a micro-batch's graph saves: one set per
    # graph alive, whatever the micro-batch's size (so ``scaled`` leaves them); 0 in fp32.
    weights: int = 0
    # One micro-batch's working set (``memory.working``), linear in the micro-batch: the part that
    # scales with it (gradients of activations, their scratch) and the part that does not (weight
    # gradients before they are accumulated, their scratch).
    work: int = 0
    work_fixed: int = 0
    # The stage's outputs whole, whatever saves them: what a send holds (and a gradient received
    # for them takes) once the micro-batch's saved tensors are gone or not yet made.
    sent: int = 0
    # With the backward split (``engine.split``): the gradients B keeps for W, one at each node
    # that feeds a weight; held from B to W beside the graph.
    kept: int = 0

    def scaled(self, f: float) -> StageActivation:
        return StageActivation(
            round(self.input * f),
            round(self.saved * f),
            round(self.output * f),
            self.weights,
            round(self.work * f),
            self.work_fixed,
            round(self.sent * f),
            round(self.kept * f),
        )

    @property
    def working(self) -> int:
        return self.work + self.work_fixed

    @property
    def graph(self) -> int:
        """What one micro-batch's graph saves: activations plus the weight copies."""
        return self.saved + self.weights


@dataclass(frozen=True)
class Saved:
    """One tensor a stage saves for backward (``measure_stage(detail=...)``)."""

    layer: int  # index of the layer (in the stage) whose forward saved it; len(layers): the loss
    # what produced it: the autograd node's name ("Convolution", "Relu", ...) or "internal"
    kind: str
    dtype: str  # "bfloat16", "float32", "int64", ...
    nbytes: int
    weight_copy: bool  # autocast's copy of a parameter (does not scale with the micro-batch)


def _key(t: torch.Tensor) -> int:
    base = t._base if t._base is not None else t
    return id(base)


def _kind(t: torch.Tensor) -> str:
    """The operation that produced ``t``: its autograd node without "Backward0", or "internal" for a
    tensor outside autograd (BatchNorm's saved statistics, max-pool indices, ...)."""
    fn = t.grad_fn
    return "internal" if fn is None else fn.name().removesuffix("0").removesuffix("Backward")


def _copies_a_parameter(t: torch.Tensor, params: set[int]) -> bool:
    """Whether ``t`` is autocast's cast of a parameter (a ToCopy whose input is a parameter leaf)."""
    fn = t.grad_fn
    if fn is None or not fn.name().startswith("ToCopyBackward"):
        return False
    nxt = fn.next_functions[0][0] if fn.next_functions else None
    var = getattr(nxt, "variable", None)
    return var is not None and id(var) in params


def _fake_like(
    t: torch.Tensor, mode: FakeTensorMode, device_type: str, requires_grad: bool = False
) -> torch.Tensor:
    """A fake tensor of ``t``'s shape and dtype on ``device_type`` (``t`` may be meta, fake or real)."""
    with mode:
        f = torch.empty(t.shape, dtype=t.dtype, device=device_type)
    return f.requires_grad_(requires_grad)


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def measure_stage(
    layers: Sequence[nn.Module],
    x: Batch,
    loss: Callable[[Any], torch.Tensor] | None = None,
    precision: str = "fp32",
    detail: list[Saved] | None = None,
    device_type: str = MEASURE_DEVICE,
    working: bool = True,
) -> tuple[StageActivation, Batch]:
    """Run ``layers`` forward on input ``x`` (meta tensors) as the engine's stage would run them and
    count what a training step keeps (see the module docstring).

    Returns the per-micro-batch bytes and the stage's output, on meta (the next stage's input).
    ``detail``: a list that receives every saved tensor counted (the loss's with layer index
    ``len(layers)``). ``device_type``: the device the engine will run on ("cpu" or "cuda").
    ``working``: also measure the working set (else 0), at ``x``'s batch and at twice it, which
    splits it into the part that scales with the micro-batch and the part that does not."""
    mode = FakeTensorMode()
    cell = Cell(layers, compute_dtype(precision) if precision != "fp32" else None)
    state: dict[str, torch.Tensor] = {
        n: _fake_like(p, mode, device_type, p.requires_grad) for n, p in cell.named_parameters()
    }
    buffers = {n: _fake_like(b, mode, device_type) for n, b in cell.named_buffers()}
    params = {id(t) for t in state.values()}
    not_activations = params | {id(t) for t in buffers.values()}
    xs = [_fake_like(t, mode, device_type, t.is_floating_point()) for t in as_tuple(x)]
    x_in: Batch = tuple(xs) if isinstance(x, tuple) else xs[0]
    inputs = {_key(t) for t in xs}
    seen: dict[int, int] = {}
    copies: set[int] = set()  # keys of autocast's weight copies among ``seen``
    keep: list[torch.Tensor] = []  # keep saved tensors alive so ids stay unique
    layer = [0]  # the layer running now (for ``detail``)

    def pack(t: torch.Tensor) -> torch.Tensor:
        k = _key(t)
        if id(t) in not_activations or k in not_activations or k in inputs or k in seen:
            return t
        base = t._base if t._base is not None else t
        seen[k] = _nbytes(base)
        copy = _copies_a_parameter(base, params)
        if copy:
            copies.add(k)
        if detail is not None:
            detail.append(
                Saved(layer[0], _kind(base), str(base.dtype).removeprefix("torch."), seen[k], copy)
            )
        keep.append(t)
        return t

    def entering(i: int) -> Callable[..., None]:
        def hook(*_: object) -> None:
            layer[0] = i

        return hook

    hooks = (
        [m.register_forward_pre_hook(entering(i)) for i, m in enumerate(cell.layers)]
        if detail is not None
        else []
    )
    try:
        with mode, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with autocast(device_type, precision):
                y = functional_call(cell, {**state, **buffers}, (x_in,), strict=True)
            if loss is not None:
                layer[0] = len(cell.layers)
                fp32_loss(lambda out, _: loss(out), y, None, device_type)
    finally:
        for h in hooks:
            h.remove()
    out = sum(_nbytes(t) for t in as_tuple(y) if _key(t) not in seen and _key(t) not in inputs)
    weights = sum(seen[k] for k in copies)
    work, fixed = split_working_set(cell, x, loss, precision, device_type) if working else (0, 0)
    kept = kept_bytes(layers, x, loss, precision, device_type) if working else 0
    act = StageActivation(
        sum(_nbytes(t) for t in xs),
        sum(seen.values()) - weights,
        out,
        weights,
        work,
        fixed,
        sum(_nbytes(t) for t in as_tuple(y)),
        kept,
    )
    ys = tuple(_meta_like(t) for t in as_tuple(y))
    return act, (ys if isinstance(y, tuple) else ys[0])


def peak_activation_bytes(
    a: StageActivation | Sequence[StageActivation],
    schedule: str,
    checkpoint: str,
    K: int,
    M: int,
    stage: int,
    working: bool = True,
    lookahead: int = DEFAULT_LOOKAHEAD,
    virtual_stages: int = 1,
) -> int:
    """The stage's peak activation bytes, walking its own action list (``engine.schedule``; an
    unknown schedule is refused there): a kept micro-batch holds input, saved tensors and output
    from its forward to its backward; a rematerialised one holds its input, and its saved tensors
    and output from the recompute until its backward ends (GPipe §2.3). One micro-batch's working
    set comes on top while it runs forward or backward: counted at each action, so once.

    ``a``: one micro-batch's bytes, or with ``virtual_stages`` v > 1 one per cell of the stage
    (its model stages stage, stage + K, ...): each action counts its own cell's. Where the
    schedule splits the backward (``zb-h1``) a micro-batch keeps its graph from B until its W,
    and the gradients B kept for W (``kept``), its input and output going at B (``engine.split``);
    on the model's first cell, whose B only takes the gradient, all of it until W.

    The transfers hold more. A rematerialised micro-batch's output, sent whole (``sent``), until
    its gradient arrives: after its recompute (the engine recomputes first), before its backward;
    a kept one's is held by its saved tensors anyway, and the model's last stage sends none. A
    stage that receives activations holds each input gradient it sent (its input's bytes) until
    the stage before is known to have taken it (``engine.schedule.gradients_taken``: at most one
    under 1f1b at its peak, none under gpipe). And the receive buffers posted for the actions
    ahead (``engine.schedule.receives_ahead`` with the engine's ``lookahead``): an input's bytes
    each for activations, the outputs' whole for gradients.

    The closed forms of the module doc follow from this walk. ``working=False``: without the
    working set, the recomputed output and the transfers, the saved-tensor accounting the
    engine's meter does (``engine.memory``) rather than the allocator's peak."""
    v = virtual_stages
    cells = [a] * v if isinstance(a, StageActivation) else list(a)
    if len(cells) != v:
        raise ValueError(f"{len(cells)} cells' bytes for virtual_stages={v}; allowed: one per cell")
    S = K * v
    split = splits_backward(schedule)
    acts = stage_actions(schedule, K, M, stage, v)
    taken = gradients_taken(schedule, K, M, stage, v) if working else {}
    sent: set[tuple[int, int]] = set()  # input gradients sent (an input's bytes each), not taken
    sends: set[tuple[int, int]] = set()  # rematerialised outputs sent until their gradient
    held = peak = 0

    def receive(b: Action) -> int:
        """The buffer ``b``'s receive holds once posted (0 if it receives nothing)."""
        s = virtual_stage(K, stage, b.chunk)
        if K == 1:
            return 0
        if b.kind == "F" and s > 0:
            return cells[b.chunk].input
        if b.kind == "B" and s < S - 1:
            return cells[b.chunk].sent
        return 0

    posted = [receive(b) for b in acts]
    for i, act in enumerate(acts):
        c = cells[act.chunk]
        s = virtual_stage(K, stage, act.chunk)
        key = (act.chunk, act.mb)
        remat = uses_remat(checkpoint, act.mb, M)
        work = c.working if working else 0
        whole = c.input + c.graph + c.output
        if act.kind == "F":
            sent -= set(taken.get(key, []))
        # besides the micro-batches held: gradients sent, receives posted ahead, sends in transfer
        extra = (
            sum(cells[x].input for x, _ in sent)
            + sum(posted[i + 1 : i + lookahead])
            + sum(cells[x].sent for x, _ in sends)
            if working
            else 0
        )
        if act.kind == "F":
            held += c.input if remat else whole
            if remat and working and s < S - 1:
                sends.add(key)  # a kept output is held by its saved tensors anyway
                extra += c.sent
            peak = max(peak, held + extra + work)
            continue
        if act.kind == "W" and s == 0:  # the model's first cell: its whole backward is here
            recomputed = c.graph + (c.output if working else 0)
            kept = c.kept if working else 0  # B's kept gradients, until its W right after
            if remat:
                peak = max(peak, held + recomputed + kept + extra + work)
                held -= c.input
            else:
                peak = max(peak, held + kept + extra + work)
                held -= whole
            continue
        if act.kind == "W":
            peak = max(peak, held + extra + work)
            held -= c.graph + c.kept
            continue
        if split and s == 0:  # its B only takes the gradient (``engine.pipeline``)
            peak = max(peak, held + extra)
            continue
        recomputed = c.graph + (c.output if working else 0)
        # a split B makes the gradients it keeps for W while the micro-batch is whole (the
        # allocator sees both; the engine's meter takes the boundaries off first)
        kept = c.kept if split and working else 0
        if remat:
            # the recompute (before the gradient arrives, so the send still holds the output), then
            # the backward's working set (the gradient arrived: the send is complete)
            peak = max(peak, held + recomputed + extra)
            if key in sends:
                sends.discard(key)
                extra -= c.sent
            peak = max(peak, held + recomputed + kept + extra + work)
            held += (c.graph + c.kept if split else 0) - c.input
        else:
            peak = max(peak, held + kept + extra + work)
            held -= c.input + c.output - c.kept if split else whole
        peak = max(peak, held + extra)  # what stays after it (the graph and kept, where split)
        if working and s > 0 and K > 1:
            sent.add(key)
    return peak


def step_temporary_bytes(params: int, optim: str, weight_decay: float, device_type: str) -> int:
    """What ``opt.step()`` allocates on top of the state: on CUDA torch's optimisers run their
    multi-tensor (foreach) form, which builds whole-model temporaries — RMSProp's and Adam's square
    root of the running average, and the gradient plus weight decay — in fp32 (4 bytes per
    parameter). On a CPU they step one tensor at a time (temporaries of one parameter: ignored).
    They exist after backward, when the step's activations are gone."""
    if device_type != "cuda":
        return 0
    copies = (1 if optim in ("rmsprop", "adam") else 0) + (1 if weight_decay > 0 else 0)
    return 4 * params * copies
