"""Per-rank functions for the K-independence tests: the project's own models (built on ``meta``,
each rank materialising its slice from the global layer seeds, as a run does), with dropout on,
trained a few SGD steps at any K, schedule and remat mode (imported by spawned ranks)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from gpipe_repro.data.base import DataInfo
from gpipe_repro.engine import Pipeline, chunk_slices, init_topology, single_process
from gpipe_repro.models import get_model, materialize
from gpipe_repro.models.transformer import PAD_ID

SEED, N, M, STEPS, DROPOUT = 7, 8, 4, 2, 0.3
V, S = 20, 6
MODELS: dict[str, tuple[dict[str, Any], DataInfo]] = {  # model options, data
    "mlp": (dict(hidden=16, depth=4, dropout=DROPOUT), DataInfo("image", (1, 6, 6), 5)),
    "transformer_lm": (dict(L=2, d=16, H=32, A=2, dropout=DROPOUT), DataInfo("tokens", (S,), V)),
    "amoebanet_d": (dict(L=3, D=4, dropout=DROPOUT), DataInfo("image", (3, 9, 9), 5)),
    "transformer_mt": (dict(L=1, H=32, A=1, d=16, dropout=DROPOUT), DataInfo("pairs", (S,), V)),
    "tuplenet": (dict(channels=8, cells=6, dropout=DROPOUT), DataInfo("image", (3, 8, 8), 5)),
}
# several chunks per rank need K·v cells: a Transformer LM of 8 layers (6 blocks) for K = 4, v = 2
MODELS["transformer_lm6"] = (
    dict(L=6, d=16, H=32, A=2, dropout=DROPOUT),
    MODELS["transformer_lm"][1],
)
SPEC = {"transformer_lm6": "transformer_lm"}  # the model a key builds (default: the key)
PAPER_MODELS = ("mlp", "transformer_lm", "amoebanet_d", "transformer_mt")
# layers: mlp 6, transformer_lm 4, amoebanet_d 9, transformer_mt 4, tuplenet 8. AmoebaNet's and
# tuplenet's stems return (h, h), the same tensor twice; alone on stage 0 at K = 4, the pair crosses.
BALANCE = {
    "mlp": {1: [6], 2: [2, 4], 4: [1, 2, 2, 1]},
    "transformer_lm": {1: [4], 2: [2, 2], 4: [1, 1, 1, 1]},
    "amoebanet_d": {1: [9], 2: [4, 5], 4: [1, 3, 3, 2]},
    "transformer_mt": {1: [4], 2: [2, 2], 4: [1, 1, 1, 1]},
    "tuplenet": {1: [8], 2: [1, 7], 4: [1, 2, 4, 1]},
    "transformer_lm6": {1: [8], 2: [4, 4], 4: [2, 2, 2, 2]},
}
# two chunks per rank: K·2 model stages
BALANCE_V2 = {
    "transformer_lm6": {1: [4, 4], 2: [2, 2, 2, 2], 4: [1] * 8},
    "amoebanet_d": {1: [4, 5], 2: [2, 2, 2, 3], 4: [1, 1, 1, 1, 1, 1, 1, 2]},
}


def batch(model: str, step: int) -> tuple[Any, Any]:
    """The data stream is a function of the step (as the project's datasets are)."""
    g = torch.Generator().manual_seed(1000 + step)
    info = MODELS[model][1]
    if info.kind == "image":
        return torch.randn(N, *info.shape, generator=g), torch.randint(0, 5, (N,), generator=g)
    if info.kind == "tokens":
        return torch.randint(0, V, (N, S), generator=g), torch.randint(0, V, (N, S), generator=g)
    src = torch.randint(1, V, (N, S), generator=g)
    tgt = torch.randint(1, V, (N, S + 1), generator=g)
    for i in range(N):  # padded sentences of different lengths
        src[i, S - i % 3 :] = PAD_ID
        tgt[i, S + 1 - i % 4 :] = PAD_ID
    tokens = torch.full((N,), int((tgt[:, 1:] != PAD_ID).sum()), dtype=torch.long)
    return (src, tgt[:, :-1]), (tgt[:, 1:], tokens)


def train(
    K: int,
    model: str,
    schedule: str = "gpipe",
    checkpoint: str = "except_last",
    seed: int = SEED,
    virtual_stages: int = 1,
) -> dict[str, Any]:
    """``STEPS`` SGD steps of this rank's slice (``virtual_stages`` v: its v cells); its losses
    (last stage) and final state by global layer index."""
    v = virtual_stages
    topo = init_topology(K, ring=v > 1) if K > 1 else single_process()
    spec = get_model(SPEC.get(model, model))
    options, info = MODELS[model]
    with torch.device("meta"):
        plan = spec.layers(info, spec.config(**options))
    slices = chunk_slices((BALANCE if v == 1 else BALANCE_V2)[model][K], K, topo.stage)
    cells = [materialize(copy.deepcopy(plan[sl]), SEED, first_index=sl.start) for sl in slices]
    pipe = Pipeline(
        cells[0] if v == 1 else cells,
        topo,
        M=M,
        schedule=schedule,
        checkpoint=checkpoint,
        loss_fn=spec.loss_fn,
        loss_reduction=spec.loss_reduction,
        seed=seed,
        first_layer=slices[0].start if v == 1 else [sl.start for sl in slices],
        virtual_stages=v,
    )
    params = list(pipe.parameters())  # none on MLP's first stage at K = 4 (a Flatten)
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9) if params else None
    losses = []
    for step in range(STEPS):
        x, y = batch(model, step)
        loss = pipe.train_step(x if topo.is_first else None, y if topo.is_last else None, step)
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=False)
        losses.append(loss)
    state = {
        f"{i}.{k}": t.clone()
        for i, layer in zip(pipe.layer_indices, pipe.layers)
        for k, t in layer.state_dict().items()
    }
    return {"stage": topo.stage, "losses": losses, "state": state}


def grid(K: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Several ``train`` runs on one set of ranks (one launch)."""
    return [train(K, **r) for r in runs]


def here(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The K = 1 runs in this process, with one intra-op thread as every rank has (a thread count
    changes the order of a kernel's sums)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return grid(1, runs)
    finally:
        torch.set_num_threads(before)
