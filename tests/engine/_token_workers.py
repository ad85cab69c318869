"""Per-rank functions for the per-token loss and varying-shape engine tests (imported by spawned ranks).

A tiny T(1, 32, 1) translation model, padded sentence batches whose micro-batches hold unequal
numbers of target tokens, and a plain whole-batch reference step to compare against.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from gpipe_repro.engine import Pipeline, init_topology, single_process, stage_slice
from gpipe_repro.models.transformer import PAD_ID, token_loss, transformer_mt_layers

V = 23
BALANCE = {1: [4], 2: [2, 2]}
# (sentences, source length, target length) of three consecutive steps: the shapes change every step
SHAPES = [(8, 6, 5), (4, 9, 7), (8, 3, 4)]


def make_layers(seed: int = 0) -> list[nn.Module]:
    """In float64: pipelined and plain steps differ only in summation order, ~1e-12 here, so a real
    error stands far above the 1e-5 bound even after several updates."""
    torch.manual_seed(seed)
    return [layer.double() for layer in transformer_mt_layers(1, 32, 1, d=16, V=V)]


def make_batch(
    N: int, S: int, T: int, seed: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Sentences padded with PAD_ID at the end; the first rows are long, the last rows short, so the
    micro-batches of an even split hold different numbers of real tokens."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, V, (N, S), generator=g)
    tgt = torch.randint(1, V, (N, T + 1), generator=g)
    for i in range(N):
        keep_s = max(1, S - i * S // N)
        keep_t = max(2, T + 1 - i * (T + 1) // N)
        src[i, keep_s:] = PAD_ID
        tgt[i, keep_t:] = PAD_ID
    return (src, tgt[:, :-1]), tgt[:, 1:]


def with_count(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The targets ``token_loss`` takes: the whole mini-batch's token count on every row."""
    return tgt, torch.full((tgt.shape[0],), int((tgt != PAD_ID).sum()), dtype=torch.long)


def reference(steps: list[tuple[int, int, int]], lr: float = 0.1) -> dict:
    """Plain single-process SGD on whole mini-batches: mean NLL over all real target tokens."""
    model = nn.Sequential(*make_layers())
    losses, grads = [], []
    for i, (N, S, T) in enumerate(steps):
        x, y = make_batch(N, S, T, seed=i)
        loss = F.cross_entropy(model(x).flatten(0, -2), y.flatten(), ignore_index=PAD_ID)
        model.zero_grad()
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return {
        "losses": losses,
        "grads": grads,
        "params": [p.detach().clone() for p in model.parameters()],
    }


def pipeline_run(
    K: int,
    M: int,
    steps: list[tuple[int, int, int]],
    schedule: str = "gpipe",
    checkpoint: str = "except_last",
    replicas: int = 1,
    lr: float = 0.1,
    nccl_order: bool = False,
) -> dict:
    """The same steps through a K-stage pipeline (and D replicas, each taking a slice of the rows);
    ``nccl_order``: the transfers in NCCL's order (``engine.fifo``)."""
    topo = (
        init_topology(K, replicas, timeout_s=30.0, nccl_order=nccl_order)
        if K * replicas > 1
        else single_process()
    )
    layers = make_layers()
    sl = stage_slice(BALANCE[K], topo.stage)
    pipe = Pipeline(
        copy.deepcopy(layers[sl]),
        topo,
        M=M,
        schedule=schedule,
        checkpoint=checkpoint,
        loss_fn=token_loss,
        loss_reduction="sum",
    )
    losses, grads = [], []
    for i, (N, S, T) in enumerate(steps):
        x, y = make_batch(N, S, T, seed=i)
        tgt, count = with_count(y)  # the global mini-batch's count, before the replica's slice
        n = N // replicas
        rows = slice(topo.replica * n, (topo.replica + 1) * n)
        x, tgt, count = (x[0][rows], x[1][rows]), tgt[rows], count[rows]
        for p in pipe.parameters():
            p.grad = None
        losses.append(
            pipe.train_step(x if topo.is_first else None, (tgt, count) if topo.is_last else None)
        )
        grads.append([p.grad.clone() for p in pipe.parameters()])
        with torch.no_grad():
            for p in pipe.parameters():
                p -= lr * p.grad
    return {
        "stage": topo.stage,
        "replica": topo.replica,
        "losses": losses,
        "grads": grads,
        "params": [p.detach().clone() for p in pipe.parameters()],
    }


def rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """Worst per-tensor relative error. A tensor whose true gradient is ~0 (attention key biases:
    softmax ignores a shift shared by all keys) is measured against 1e-3 of the largest gradient
    instead of its own rounding noise."""
    assert len(got) == len(want)
    floor = 1e-3 * max(b.abs().max().item() for b in want)
    return max(
        ((a - b).abs().max() / max(b.abs().max().item(), floor)).item() for a, b in zip(got, want)
    )


def grid(K: int, configs: list[dict], replicas: int = 1) -> list[dict]:
    """Many runs on one set of ranks (one launch for the whole grid)."""
    return [pipeline_run(K=K, replicas=replicas, **c) for c in configs]
