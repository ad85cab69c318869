"""Per-rank functions for the multi-process engine tests (imported by spawned ranks)."""

from __future__ import annotations

import copy
import os
import time

import torch
from torch import nn

from gpipe_repro.engine import Pipeline, Topology, chunk_slices, init_topology
from gpipe_repro.models.toy import tuplenet_layers

_TOPOLOGIES: dict[tuple, Topology] = {}


def topology(
    K: int,
    replicas: int = 1,
    nccl_order: bool = False,
    one_group: bool = False,
    timeout_s=120.0,
    ring: bool = False,
) -> Topology:
    """This rank's topology in a communication mode, made once per launch (every rank asks for the
    modes in the same order, so every rank creates the same process groups in the same order).
    ``nccl_order``: the channels run in NCCL's order (``engine.fifo``); ``one_group``: every
    channel on the default group, as before the engine had channels; ``ring``: the link from the
    last stage to the first too (several chunks per rank)."""
    key = (K, replicas, nccl_order, one_group, ring)
    if key not in _TOPOLOGIES:
        _TOPOLOGIES[key] = init_topology(
            K, replicas, timeout_s=timeout_s, nccl_order=nccl_order, ring=ring, _one_group=one_group
        )
    return _TOPOLOGIES[key]


def make_layers(seed: int = 0, dropout: float = 0.0, batchnorm: bool = False) -> list[nn.Module]:
    torch.manual_seed(seed)
    return tuplenet_layers(
        in_channels=3, channels=8, cells=6, classes=5, dropout=dropout, batchnorm=batchnorm
    )


def make_batch(N: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, 3, 8, 8, generator=g), torch.randint(0, 5, (N,), generator=g)


class ChunkedBN(nn.Module):
    """Reference BatchNorm: normalises each of M chunks with its own statistics, and advances the
    running statistics with ``F.batch_norm`` on the whole mini-batch (plain PyTorch semantics)."""

    def __init__(self, bn: nn.BatchNorm2d, M: int) -> None:
        super().__init__()
        self.bn, self.M = bn, M

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        with torch.no_grad():
            nn.functional.batch_norm(
                x.detach(), bn.running_mean, bn.running_var, None, None, True, bn.momentum, bn.eps
            )
            bn.num_batches_tracked += 1
        return torch.cat(
            [
                nn.functional.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps)
                for c in x.chunk(self.M)
            ]
        )


def _chunk_bn(module: nn.Module, M: int) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, ChunkedBN(child, M))
        else:
            _chunk_bn(child, M)


def reference_step(
    N: int = 16, dropout: float = 0.0, lr: float = 0.1, batchnorm: bool = False, M: int = 1
) -> dict:
    """One plain single-process SGD step on the whole mini-batch (BatchNorm: M-chunk statistics)."""
    layers = make_layers(dropout=dropout, batchnorm=batchnorm)
    model = nn.Sequential(*layers)
    if batchnorm:
        _chunk_bn(model, M)
    x, y = make_batch(N)
    torch.manual_seed(123)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    res = {
        "loss": loss.item(),
        "grads": grads,
        "params": [p.detach().clone() for p in model.parameters()],
        "buffers": {
            _unwrap(k): v.clone()
            for k, v in model.state_dict().items()
            if "running" in k or "num_batches" in k
        },
        "out": None,
    }
    if not batchnorm:  # (ChunkedBN has no eval mode: it would count the inference batch)
        model.eval()
        with torch.no_grad():
            res["out"] = model(x)  # inference with the updated weights
    return res


def _unwrap(key: str) -> str:
    """'1.op.2.bn.running_mean' (ChunkedBN's inner .bn) -> '1.op.2.running_mean'."""
    prefix, leaf = key.rsplit(".", 1)
    return f"{prefix.removesuffix('.bn')}.{leaf}"


def pipeline_step(
    K: int,
    M: int,
    checkpoint: str,
    schedule: str,
    balance: list[int],
    N: int = 16,
    dropout: float = 0.0,
    replicas: int = 1,
    lr: float = 0.1,
    batchnorm: bool = False,
    nccl_order: bool = False,
    one_group: bool = False,
    timeout_s: float = 120.0,
    infer: bool = False,
    virtual_stages: int = 1,
) -> dict:
    """One pipelined SGD step; returns this rank's slice of grads/params/buffers and its loss
    (``infer``: and the last stage's inference output with the updated weights, else None).

    ``nccl_order``, ``one_group``: the communication mode (see :func:`topology`);
    ``virtual_stages`` v: ``balance`` has K·v entries, this rank holds v cells."""
    v = virtual_stages
    topo = topology(K, replicas, nccl_order, one_group, timeout_s, ring=v > 1)
    layers = make_layers(dropout=dropout, batchnorm=batchnorm)
    slices = chunk_slices(balance, K, topo.stage)
    chunks = [copy.deepcopy(layers[sl]) for sl in slices]
    pipe = Pipeline(
        chunks[0] if v == 1 else chunks,
        topo,
        M=M,
        schedule=schedule,
        checkpoint=checkpoint,
        loss_fn=nn.functional.cross_entropy,
        virtual_stages=v,
        first_layer=slices[0].start if v == 1 else [sl.start for sl in slices],
    )
    x, y = make_batch(N)
    n = N // replicas
    x, y = (
        x[topo.replica * n : (topo.replica + 1) * n],
        y[topo.replica * n : (topo.replica + 1) * n],
    )
    torch.manual_seed(123)  # same dropout stream on every rank and mode
    loss = pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
    grads = [p.grad.clone() for p in pipe.parameters()]
    with torch.no_grad():
        for p in pipe.parameters():
            p -= lr * p.grad
    out = pipe.forward(x if topo.is_first else None) if infer else None
    bufs = {}
    for i, layer in zip(pipe.layer_indices, pipe.layers):
        for k, t in layer.state_dict().items():
            if "running" in k or "num_batches" in k:
                bufs[f"{i}.{k}"] = t.clone()
    return {
        "stage": topo.stage,
        "replica": topo.replica,
        "loss": loss,
        "grads": grads,
        # the global layer of each parameter: a rank with several cells lists them cell by cell
        "owners": [
            i for i, layer in zip(pipe.layer_indices, pipe.layers) for _ in layer.parameters()
        ],
        "params": [p.detach().clone() for p in pipe.parameters()],
        "buffers": bufs,
        "peak_act": pipe.peak_activation_bytes,
        "out": out,
    }


def grid(K: int, configs: list[dict], replicas: int = 1) -> list[dict]:
    """Run many one-step configurations on one set of ranks (one launch for the whole grid)."""
    return [pipeline_step(K=K, replicas=replicas, **c) for c in configs]


class Sleep(nn.Module):
    """A layer that costs a fixed time: f seconds forward, 2f backward (a balanced synthetic cell)."""

    def __init__(self, f: float) -> None:
        super().__init__()
        self.f = f
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SleepFn.apply(x, self.w, self.f)


class _SleepFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, f):
        import time

        time.sleep(f)
        ctx.f = f
        return x * w

    @staticmethod
    def backward(ctx, g):
        import time

        time.sleep(2 * ctx.f)
        return g, g.sum() * 0, None


def bubble_run(K: int, M: int, f: float, steps: int, schedule: str) -> dict:

    topo = init_topology(K)
    pipe = Pipeline(
        [Sleep(f / M)],
        topo,
        M=M,
        schedule=schedule,
        checkpoint="never",
        loss_fn=lambda y, t: (y - t).pow(2).mean(),
    )
    x = torch.randn(M * 2, 4)
    for _ in range(steps):
        pipe.train_step(x if topo.is_first else None, x if topo.is_last else None)
    return {"events": [e.to_dict() for e in pipe.recorder.events]}


def memory_run(K: int, M: int, checkpoint: str, N: int, width: int, depth: int) -> dict:
    topo = init_topology(K)
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
    per = depth // K
    pipe = Pipeline(
        layers[topo.stage * per : (topo.stage + 1) * per],
        topo,
        M=M,
        checkpoint=checkpoint,
        loss_fn=lambda y, t: (y - t).pow(2).mean(),
    )
    x = torch.randn(N, width)
    pipe.train_step(x if topo.is_first else None, x if topo.is_last else None)
    return {"stage": topo.stage, "peak": pipe.peak_activation_bytes}


def failing(K: int, bad_rank: int) -> None:
    topo = init_topology(K)
    pipe = Pipeline([nn.Linear(4, 4)], topo, M=2, loss_fn=lambda y, t: (y - t).pow(2).mean())
    if topo.rank == bad_rank:
        raise ValueError("boom from the test rank")
    x = torch.randn(4, 4)
    pipe.train_step(x if topo.is_first else None, x if topo.is_last else None)


def rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    assert len(got) == len(want)
    return max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() for a, b in zip(got, want)
    )


def gather(results: list[dict], key: str, replica: int = 0) -> list[torch.Tensor]:
    """Concatenate one replica's per-stage lists in model order (a rank holding several cells
    lists its parameters cell by cell: they are put back in the order of the global layers)."""
    parts: list[tuple[int, int, torch.Tensor]] = []
    for r in (r for r in results if r["replica"] == replica):
        owners = r.get("owners") or [r["stage"]] * len(r[key])  # one cell per rank: its stage
        parts += [(owners[i], i, t) for i, t in enumerate(r[key])]
    return [t for _, _, t in sorted(parts, key=lambda p: (p[0], p[1]))]


def held_sends(K: int, M: int) -> list[dict]:
    """One 1F1B step on plain gloo, one in NCCL's order: see :func:`held_sends_step`."""
    return [held_sends_step(K, M, "1f1b", order) for order in (False, True)]


def held_sends_step(K: int, M: int, schedule: str, nccl_order: bool) -> dict:
    """One step; after every action, the micro-batches whose activation sends this stage still
    holds (the engine releases them as they complete)."""
    topo = topology(K, nccl_order=nccl_order)
    torch.manual_seed(0)
    pipe = Pipeline(
        [nn.Linear(64, 64)], topo, M=M, schedule=schedule, checkpoint="always", loss_fn=mse
    )
    held: list[list[int]] = []
    grads: list[list[int]] = []
    posted: list[tuple[int, int]] = []
    release = pipe.transfers.release

    def recorded() -> None:
        release()
        held.append(sorted(mb for kind, mb in pipe.transfers.held if kind == "F"))
        grads.append(sorted(mb for kind, mb in pipe.transfers.held if kind == "B"))
        keys = list(pipe.transfers._posted)
        posted.append((sum(k[0] == "F" for k in keys), sum(k[0] == "B" for k in keys)))

    pipe.transfers.release = recorded  # type: ignore[method-assign]
    x = torch.randn(4 * M, 64)
    pipe.train_step(x if topo.is_first else None, x if topo.is_last else None)
    return {
        "stage": topo.stage,
        "held": held,
        "grads": grads,
        "posted": posted,
        "after": pipe.transfers.held,
    }


def mse(y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return (y - t).pow(2).mean()


def environment(keys: list[str]) -> dict:
    """What a rank sees of its surroundings (tests/engine/test_launch.py)."""
    return {
        "env": {k: os.environ.get(k) for k in keys},
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
    }


def sleeper(folder: str, seconds: float) -> None:
    """Leave this rank's pid and its parent's in ``folder``, then sleep (tests/engine/test_launch.py)."""
    from pathlib import Path

    tmp = Path(folder, f".{os.getpid()}")
    tmp.write_text(str(os.getppid()))
    tmp.replace(Path(folder, str(os.getpid())))
    time.sleep(seconds)
