"""Global keys: a stage's tensors and optimiser state named by *global* layer index, and back.

A ``Pipeline`` holds a contiguous slice of the model's flat layer list, so layer ``i`` of this stage's
cell is layer ``offset + i`` of the model — or, holding several cells (``engine.cell.chunk_slices``),
non-adjacent runs of it: then ``offset`` is the list of each layer's global index. A save names every tensor by its global layer,
``layers.<global_i>.<name in the layer's state_dict>`` (weights and persistent buffers such as
BatchNorm running statistics), and every optimiser-state tensor by its parameter's key,
``optim.layers.<global_i>.<param>.<state>`` (e.g. ``...weight.square_avg``). Keys do not depend on
K or balance, which is what lets a save load at any K.

``torch.optim.Optimizer.state_dict()`` numbers parameters 0, 1, ... in ``param_groups`` order; this
module maps those integer ids to global keys on save and back on load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = [
    "Indices",
    "global_indices",
    "IMPLEMENTATION_HPARAMS",
    "OPTIM_PREFIX",
    "layer_tensors",
    "optimizer_name",
    "optimizer_groups",
    "optimizer_tensors",
    "optimizer_state_dict",
    "param_keys",
    "jsonable",
]

OPTIM_PREFIX = "optim."
# Switches of a torch optimiser's implementation, not of its update: never compared or restored.
IMPLEMENTATION_HPARAMS = frozenset({"foreach", "fused", "capturable", "differentiable"})


Indices = int | Sequence[int]  # the first layer's global index, or every layer's


def global_indices(layers: Sequence[nn.Module], offset: Indices) -> list[int]:
    """The global index of each of ``layers``: ``offset`` onwards, or ``offset`` itself (a list)."""
    if isinstance(offset, int):
        return list(range(offset, offset + len(layers)))
    if len(offset) != len(layers):
        raise ValueError(
            f"{len(offset)} global indices for {len(layers)} layers; allowed: one each"
        )
    return [int(i) for i in offset]


def layer_tensors(layers: Sequence[nn.Module], offset: Indices) -> dict[str, torch.Tensor]:
    """Every parameter and persistent buffer of ``layers`` under its global key (shares storage)."""
    out: dict[str, torch.Tensor] = {}
    for i, layer in zip(global_indices(layers, offset), layers):
        for name, t in layer.state_dict(keep_vars=True).items():
            out[f"layers.{i}.{name}"] = t.detach()
    return out


def param_keys(layers: Sequence[nn.Module], offset: Indices) -> dict[nn.Parameter, str]:
    """Each parameter object of ``layers`` -> its global key."""
    keys: dict[nn.Parameter, str] = {}
    for i, layer in zip(global_indices(layers, offset), layers):
        for name, p in layer.named_parameters():
            keys.setdefault(p, f"layers.{i}.{name}")
    return keys


def optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """``torch.optim.RMSprop`` -> ``rmsprop`` (the name a config uses)."""
    return type(optimizer).__name__.lower()


def _ordered_params(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    """Parameters in the order of ``optimizer.state_dict()``'s integer ids."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def jsonable(v: Any) -> Any:
    """A hyper-parameter as JSON: tuples as lists, 0-dim tensors as numbers."""
    if isinstance(v, torch.Tensor):
        return v.item()
    if isinstance(v, (tuple, list)):
        return [jsonable(x) for x in v]
    return v


def optimizer_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each parameter group's hyper-parameters (everything but ``params``), as JSON."""
    return [{k: jsonable(v) for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def optimizer_tensors(
    optimizer: torch.optim.Optimizer, layers: Sequence[nn.Module], offset: Indices
) -> dict[str, torch.Tensor]:
    """The optimiser's per-parameter state under ``optim.<param key>.<state name>``."""
    keys = param_keys(layers, offset)
    params = _ordered_params(optimizer)
    out: dict[str, torch.Tensor] = {}
    for pid, state in optimizer.state_dict()["state"].items():
        p = params[pid]
        if p not in keys:
            raise ValueError(
                f"the optimiser holds a parameter of shape {list(p.shape)} that is not in "
                "this stage's layers; build the optimiser from the stage's parameters only"
            )
        for name, value in state.items():
            if value is None:  # e.g. an unused momentum buffer: absent is equivalent
                continue
            if not isinstance(value, torch.Tensor):
                raise ValueError(
                    f"optimiser state {keys[p]}.{name} is a {type(value).__name__}; "
                    "allowed: tensors (torch's RMSprop, SGD, Adam keep tensors only)"
                )
            out[f"{OPTIM_PREFIX}{keys[p]}.{name}"] = value.detach()
    return out


def optimizer_state_dict(
    optimizer: torch.optim.Optimizer,
    layers: Sequence[nn.Module],
    offset: Indices,
    tensors: dict[str, torch.Tensor],
    groups: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """An ``optimizer.load_state_dict`` argument from global-key tensors (the inverse of
    :func:`optimizer_tensors`). ``groups``: hyper-parameters to set, one dict per group (None: keep
    the optimiser's own)."""
    keys = param_keys(layers, offset)
    current = optimizer.state_dict()
    state: dict[int, dict[str, torch.Tensor]] = {}
    for pid, p in enumerate(_ordered_params(optimizer)):
        prefix = f"{OPTIM_PREFIX}{keys[p]}." if p in keys else None
        if prefix is None:
            continue
        entry = {
            k[len(prefix) :]: v
            for k, v in tensors.items()
            if k.startswith(prefix) and "." not in k[len(prefix) :]
        }
        if entry:
            state[pid] = entry
    param_groups = []
    for i, g in enumerate(current["param_groups"]):
        g = dict(g)
        if groups is not None:
            for k, v in groups[i].items():
                if k in IMPLEMENTATION_HPARAMS:
                    continue
                g[k] = tuple(v) if isinstance(g.get(k), tuple) and isinstance(v, list) else v
        param_groups.append(g)
    return {"state": state, "param_groups": param_groups}
