"""The paper's Table 1: the largest model that fits, per number of accelerators.

For each column (Naive-1 = one accelerator without GPipe; Pipeline-K = GPipe with K partitions, remat,
M micro-batches) this computes, without allocating, the paper's configuration's parameter count,
total parameter memory (weights + gradients + RMSProp state = 12 bytes per parameter), peak
activation memory (summed over the accelerators, as the paper's table does, and the largest single
one), and searches the largest model that fits the per-accelerator budget (largest D at the paper's L
for AmoebaNet-D; largest L for Transformer-L). Partitions are the engine's exact min-max partition of
the per-layer memory (state + activations). ``precision``: the activations as the engine keeps them
in fp32 or bf16 (``memory.activations``); the state is fp32 master weights in both. Activations are the
saved-tensor accounting the paper's table reports (GPipe §3) and the engine's meter keeps: one
micro-batch's working set (``memory.working``), which every other plan counts, is left out here
(``peak_activation_bytes(working=False)``; nothing measures it), so the columns stay comparable
with the paper's and with the committed report.

``accounting``: ``eager`` counts every tensor autograd saves, as eager PyTorch keeps them (the
engine's own accounting); ``xla-like`` leaves out the saved tensors a compiler fusing element-wise
work into its neighbours would not keep (``memory.breakdown.FUSED_AWAY``: ReLU outputs, max-pool
indices, padded copies, the loss's log-probabilities, normalisation statistics) — a labelled
estimate of what the paper measured under XLA on TPUs, not a measurement of XLA.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..engine.microbatch import check_micro_batches
from ..engine.partition import balance_by_cost
from ..models import class_planning_loss, token_planning_loss
from ..models.amoebanet import amoebanet_layers
from ..models.transformer import transformer_lm_layers
from .activations import (
    Saved,
    StageActivation,
    measure_stage,
    peak_activation_bytes,
    state_bytes,
)
from .breakdown import fused_away

__all__ = [
    "Column",
    "COLUMNS",
    "Plan",
    "plan_amoebanet",
    "plan_transformer",
    "plan_column",
    "largest",
    "GiB",
    "ACCOUNTINGS",
]

GiB = 2**30
ACCOUNTINGS = ("eager", "xla-like")


def _measure(
    layers: Any, x: Any, loss: Any, precision: str, accounting: str
) -> tuple[StageActivation, Any]:
    """``measure_stage`` (no working set) under ``accounting``: ``xla-like`` drops the saved
    tensors ``memory.breakdown.fused_away`` names from the stage's saved bytes."""
    if accounting not in ACCOUNTINGS:
        raise ValueError(f"accounting={accounting!r}; allowed: {', '.join(ACCOUNTINGS)}")
    detail: list[Saved] | None = [] if accounting == "xla-like" else None
    a, y = measure_stage(layers, x, loss, precision, detail, working=False)
    if detail:
        dropped = sum(s.nbytes for s in detail if not s.weight_copy and fused_away(s.kind, s.dtype))
        a = replace(a, saved=a.saved - dropped)
    return a, y


@dataclass(frozen=True)
class Column:
    model: str  # "amoebanet_d" | "transformer_lm"
    label: str  # "Naive-1" | "Pipeline-K"
    K: int
    checkpoint: str
    M: int
    size: tuple[int, int]  # (L, D) for AmoebaNet; (L, 0) for the Transformer
    batch: int
    budget: int
    schedule: str = "gpipe"


# The paper's Table 1 columns (GPipe §3; their printed numbers: ``studies.published``). AmoebaNet:
# 224x224, batch 128, 8 GB per accelerator; Transformer: batch 32 x 1024 tokens, 16 GB per
# accelerator. M: 32 micro-batches for every pipelined column (the largest M of the paper's Table 2;
# activation memory falls with M).
_A: dict[str, Any] = dict(batch=128, budget=8 * GiB)
_T: dict[str, Any] = dict(batch=32, budget=16 * GiB)
COLUMNS: list[Column] = [
    Column("amoebanet_d", "Naive-1", 1, "never", 1, (18, 208), **_A),
    Column("amoebanet_d", "Pipeline-1", 1, "always", 32, (18, 416), **_A),
    Column("amoebanet_d", "Pipeline-2", 2, "always", 32, (18, 544), **_A),
    Column("amoebanet_d", "Pipeline-4", 4, "always", 32, (36, 544), **_A),
    Column("amoebanet_d", "Pipeline-8", 8, "always", 32, (72, 512), **_A),
    Column("transformer_lm", "Naive-1", 1, "never", 1, (3, 0), **_T),
    Column("transformer_lm", "Pipeline-1", 1, "always", 32, (13, 0), **_T),
    Column("transformer_lm", "Pipeline-8", 8, "always", 32, (103, 0), **_T),
    Column("transformer_lm", "Pipeline-32", 32, "always", 32, (415, 0), **_T),
    Column("transformer_lm", "Pipeline-128", 128, "always", 32, (1663, 0), **_T),
]


@dataclass
class Plan:
    param_count: int
    balance: list[int]
    state: list[int]  # per stage
    activation: list[int]  # per stage, peak
    budget: int
    layer_costs: list[float] = field(default_factory=list)  # per layer, alone on an accelerator
    layer_names: list[str] = field(default_factory=list)
    weight_copies: list[int] = field(
        default_factory=list
    )  # per stage: autocast's weight copies in activation

    @property
    def oversized(self) -> str | None:
        """One line naming the first layer that alone exceeds the budget, or None."""
        for i, (c, name) in enumerate(zip(self.layer_costs, self.layer_names)):
            if c > self.budget:
                return (
                    f"layer {i} ({name}) alone needs {c / GiB:.2f} GiB > the {self.budget / GiB:.2f} GiB "
                    "budget per accelerator: no partition can fit it (a single layer must fit, GPipe §6)"
                )
        return None

    @property
    def totals(self) -> list[int]:
        return [s + a for s, a in zip(self.state, self.activation)]

    @property
    def fits(self) -> bool:
        return max(self.totals) <= self.budget


def _nparams(layer: torch.nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def _finish(
    K: int,
    M: int,
    checkpoint: str,
    schedule: str,
    budget: int,
    params: list[int],
    stage_acts: list[StageActivation],
    balance: list[int],
    costs: list[float],
    names: list[str],
) -> Plan:
    state, acts, copies, start = [], [], [], 0
    for k, b in enumerate(balance):
        state.append(state_bytes(sum(params[start : start + b])))
        acts.append(
            peak_activation_bytes(stage_acts[k], schedule, checkpoint, K, M, k, working=False)
        )
        copies.append(
            peak_activation_bytes(
                StageActivation(0, 0, 0, stage_acts[k].weights),
                schedule,
                checkpoint,
                K,
                M,
                k,
                working=False,
            )
        )
        start += b
    return Plan(sum(params), balance, state, acts, budget, costs, names, copies)


def plan_amoebanet(
    L: int,
    D: int,
    K: int,
    M: int,
    checkpoint: str,
    N: int,
    budget: int,
    schedule: str = "gpipe",
    image_size: int = 224,
    classes: int = 1000,
    balance: list[int] | None = None,
    precision: str = "fp32",
    accounting: str = "eager",
) -> Plan:
    """AmoebaNet-D(L, D): measure each layer at 2 samples, partition, measure each stage."""
    check_micro_batches(N, M)
    with torch.device("meta"):
        layers = amoebanet_layers("D", L, D, classes=classes, image_size=image_size)
        x = torch.empty(2, 3, image_size, image_size)
    n = N / M
    params = [_nparams(layer) for layer in layers]
    costs: list[float] = []
    inputs: list[Any] = []
    y: Any = x
    for i, layer in enumerate(layers):
        inputs.append(y)
        a, y = _measure(
            [layer], y, class_planning_loss if i == len(layers) - 1 else None, precision, accounting
        )
        a = a.scaled(n / 2)
        costs.append(
            state_bytes(params[i])
            + peak_activation_bytes(a, schedule, checkpoint, K, M, 0, working=False)
        )
    balance = balance or balance_by_cost(costs, K)
    acts, start = [], 0
    for k, b in enumerate(balance):
        a, _ = _measure(
            layers[start : start + b],
            inputs[start],
            class_planning_loss if k == K - 1 else None,
            precision,
            accounting,
        )
        acts.append(a.scaled(n / 2))
        start += b
    names = [type(layer).__name__ for layer in layers]
    return _finish(K, M, checkpoint, schedule, budget, params, acts, balance, costs, names)


@functools.cache
def _transformer_pieces(
    d: int, H: int, A: int, V: int, S: int, precision: str = "fp32", accounting: str = "eager"
) -> dict:
    """Per-sequence activation pieces of a Transformer-L stage, measured once on a 2-layer model.

    All L layers are identical, so a stage of n layers costs the 1-layer stage plus (n-1) times
    the difference between the 2-layer and the 1-layer stages (exact by construction)."""
    with torch.device("meta"):
        layers = transformer_lm_layers(2, d, H, A, V)
        tok = torch.zeros(1, S, dtype=torch.long)
    E, _, Sm = layers[0], layers[1:3], layers[3]

    loss = token_planning_loss

    _, h = _measure([E], tok, None, precision, accounting)
    pieces = {}
    for emb in (False, True):
        for soft in (False, True):
            for nl in (0, 1, 2):
                if nl == 0 and emb and soft:
                    continue
                seq = ([E] if emb else []) + list(layers[1 : 1 + nl]) + ([Sm] if soft else [])
                if not seq:
                    continue
                a, _ = _measure(
                    seq, tok if emb else h, loss if soft else None, precision, accounting
                )
                pieces[(emb, soft, nl)] = a
    params = {"embed": _nparams(E), "layer": _nparams(layers[1]), "softmax": _nparams(Sm)}
    return {"pieces": pieces, "params": params}


def _stage_act(pieces: dict, emb: bool, soft: bool, nl: int) -> StageActivation:
    if nl <= 2:
        return pieces[(emb, soft, nl)]
    a1, a2 = pieces[(emb, soft, 1)], pieces[(emb, soft, 2)]
    return StageActivation(
        a1.input,
        a1.saved + (nl - 1) * (a2.saved - a1.saved),
        a1.output,
        a1.weights + (nl - 1) * (a2.weights - a1.weights),
    )


def plan_transformer(
    L: int,
    K: int,
    M: int,
    checkpoint: str,
    N: int,
    budget: int,
    schedule: str = "gpipe",
    d: int = 2048,
    H: int = 8192,
    A: int = 32,
    V: int = 32000,
    S: int = 1024,
    balance: list[int] | None = None,
    precision: str = "fp32",
    accounting: str = "eager",
) -> Plan:
    check_micro_batches(N, M)
    info = _transformer_pieces(d, H, A, V, S, precision, accounting)
    pieces, p = info["pieces"], info["params"]
    n = N / M
    params = [p["embed"]] + [p["layer"]] * L + [p["softmax"]]
    one = {  # per-layer memory cost for partitioning
        "embed": state_bytes(p["embed"])
        + peak_activation_bytes(
            pieces[(True, False, 0)].scaled(n), schedule, checkpoint, K, M, 0, working=False
        ),
        "layer": state_bytes(p["layer"])
        + peak_activation_bytes(
            StageActivation(
                0,
                pieces[(False, False, 2)].saved - pieces[(False, False, 1)].saved,
                0,
                pieces[(False, False, 2)].weights - pieces[(False, False, 1)].weights,
            ).scaled(n),
            schedule,
            checkpoint,
            K,
            M,
            0,
            working=False,
        ),
        "softmax": state_bytes(p["softmax"])
        + peak_activation_bytes(
            pieces[(False, True, 0)].scaled(n), schedule, checkpoint, K, M, 0, working=False
        ),
    }
    costs = [float(one["embed"])] + [float(one["layer"])] * L + [float(one["softmax"])]
    balance = balance or balance_by_cost(costs, K)
    acts, start = [], 0
    for b in balance:
        emb, soft = start == 0, start + b == L + 2
        nl = b - int(emb) - int(soft)
        acts.append(_stage_act(pieces, emb, soft, nl).scaled(n))
        start += b
    names = ["Embed"] + ["LMLayer"] * L + ["Softmax"]
    return _finish(K, M, checkpoint, schedule, budget, params, acts, balance, costs, names)


def plan_column(
    c: Column,
    size: tuple[int, int] | None = None,
    precision: str = "fp32",
    accounting: str = "eager",
) -> Plan:
    L, D = size or c.size
    kw: dict[str, Any] = dict(precision=precision, accounting=accounting)
    if c.model == "amoebanet_d":
        return plan_amoebanet(L, D, c.K, c.M, c.checkpoint, c.batch, c.budget, c.schedule, **kw)
    return plan_transformer(L, c.K, c.M, c.checkpoint, c.batch, c.budget, c.schedule, **kw)


def largest(
    c: Column, precision: str = "fp32", accounting: str = "eager"
) -> tuple[tuple[int, int], Plan] | None:
    """Binary search of the largest D (AmoebaNet, multiples of 8, at the paper's L) or L
    (Transformer) whose plan fits; None when even the smallest does not."""
    L0, _ = c.size
    if c.model == "amoebanet_d":
        lo, hi, step = 1, 1024, 8  # D = step * i

        def size_of(i: int) -> tuple[int, int]:
            return (L0, step * i)
    else:
        lo, hi = max(1, c.K - 2), 8192

        def size_of(i: int) -> tuple[int, int]:
            return (i, 0)

    first = plan_column(c, size_of(lo), precision, accounting)
    if not first.fits:
        return None
    best = (size_of(lo), first)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        p = plan_column(c, size_of(mid), precision, accounting)
        if p.fits:
            lo, best = mid, (size_of(mid), p)
        else:
            hi = mid - 1
    return best
