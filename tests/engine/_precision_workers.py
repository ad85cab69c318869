"""Per-rank functions for the mixed-precision engine tests (imported by spawned ranks).

Two small models: a conv net with BatchNorm passing (current, previous) pairs (``tuplenet``) and a
Transformer language model (embedding, attention, LayerNorm, softmax layer). Each rank trains its
slice for a few SGD-with-momentum steps and reports its losses, what it sent to its neighbours and
the dtypes of its parameters, gradients, optimiser state and BatchNorm buffers.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from gpipe_repro.engine import Pipeline, init_topology, stage_slice
from gpipe_repro.engine import comm as comm_module
from gpipe_repro.models.toy import tuplenet_layers
from gpipe_repro.models.transformer import transformer_lm_layers

MODELS = ("conv", "transformer")
BALANCE = {  # 8 layers for conv, 6 for the transformer
    "conv": {1: [8], 2: [3, 5], 4: [2, 2, 2, 2]},
    "transformer": {1: [6], 2: [3, 3], 4: [2, 1, 1, 2]},
}
N, V, S = 16, 30, 8


def make_layers(model: str) -> list[nn.Module]:
    torch.manual_seed(0)
    if model == "conv":
        return tuplenet_layers(
            in_channels=3, channels=8, cells=6, classes=5, dropout=0.0, batchnorm=True
        )
    return transformer_lm_layers(4, d=16, H=32, A=2, V=V)


def make_batch(model: str, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    if model == "conv":
        return torch.randn(N, 3, 8, 8, generator=g), torch.randint(0, 5, (N,), generator=g)
    return torch.randint(0, V, (N, S), generator=g), torch.randint(0, V, (N, S), generator=g)


def loss_fn(model: str) -> Any:
    if model == "conv":
        return nn.functional.cross_entropy
    return lambda y, t: nn.functional.cross_entropy(y.flatten(0, 1), t.flatten())


def train(
    K: int,
    model: str,
    precision: str,
    steps: int,
    M: int = 4,
    checkpoint: str = "except_last",
    schedule: str = "gpipe",
    device: str = "cpu",
) -> dict[str, Any]:
    """``steps`` SGD steps of ``model`` on this rank's stage; what the tests look at.

    On CUDA every kernel is made deterministic (and attention uses the math kernel, whose backward
    is): bit-identical losses across K need the same sums in the same order on every run."""
    if device == "cuda":
        import os

        from torch.nn.attention import SDPBackend, sdpa_kernel

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        with sdpa_kernel(SDPBackend.MATH):
            return _train(K, model, precision, steps, M, checkpoint, schedule, device)
    return _train(K, model, precision, steps, M, checkpoint, schedule, device)


def _train(
    K: int,
    model: str,
    precision: str,
    steps: int,
    M: int,
    checkpoint: str,
    schedule: str,
    device: str,
) -> dict[str, Any]:
    topo = init_topology(K, device=device)
    mine = copy.deepcopy(make_layers(model)[stage_slice(BALANCE[model][K], topo.stage)])
    pipe = Pipeline(
        mine,
        topo,
        M=M,
        checkpoint=checkpoint,
        schedule=schedule,
        precision=precision,
        loss_fn=loss_fn(model),
    )
    opt = torch.optim.SGD(pipe.parameters(), lr=0.05, momentum=0.9)
    sent: list[tuple[str, int]] = []  # (dtype, bytes) of every tensor this rank sent
    real_isend = comm_module.Channel.isend

    def isend(channel: Any, tensors: Any) -> Any:
        sent.extend((str(t.dtype), t.numel() * t.element_size()) for t in tensors)
        return real_isend(channel, tensors)

    comm_module.Channel.isend = isend  # type: ignore[method-assign]
    losses = []
    try:
        for step in range(steps):
            x, y = make_batch(model, step)
            loss = pipe.train_step(x if topo.is_first else None, y if topo.is_last else None)
            opt.step()
            opt.zero_grad(set_to_none=False)
            losses.append(loss)
    finally:
        comm_module.Channel.isend = real_isend  # type: ignore[method-assign]
    return {
        "stage": topo.stage,
        "losses": losses,
        "sent": sent,
        "param_dtypes": sorted({str(p.dtype) for p in pipe.parameters()}),
        "grad_dtypes": sorted({str(p.grad.dtype) for p in pipe.parameters() if p.grad is not None}),
        "state_dtypes": sorted(
            {str(v.dtype) for st in opt.state.values() for v in st.values() if torch.is_tensor(v)}
        ),
        "buffer_dtypes": sorted(
            {str(b.dtype) for n, b in pipe.cell.named_buffers() if "running" in n}
        ),
    }


def grid(K: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several ``train`` runs on one set of ranks (one launch)."""
    return [train(K, **r) for r in runs]
