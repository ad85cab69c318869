"""Loading a save into this rank's layers at any K and balance: a resume, or weights for a new task.

:func:`load` (resume) fills the stage's weights, buffers and optimiser state by global key and
restores this rank's RNG streams (see ``rng`` for what happens at another K). :func:`load_weights`
(``init_from``, transfer learning) fills weights and buffers only, skipping chosen layers by global
index — a new classifier keeps its fresh initialisation. Both check the save against the run before
reading tensors, and fail with one line naming what differs. Neither needs a process group.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from ..engine.topology import Topology, single_process
from . import rng
from .errors import SaveError
from .folder import SaveFolder, open_save, rng_file
from .keys import (
    IMPLEMENTATION_HPARAMS,
    OPTIM_PREFIX,
    Indices,
    global_indices,
    layer_tensors,
    optimizer_groups,
    optimizer_name,
    optimizer_state_dict,
    param_keys,
)
from .record import check_model, check_shapes, config_difference
from .store import read_tensors, tensor_index

__all__ = ["LoadReport", "load", "load_weights"]


@dataclass
class LoadReport:
    """What a load did. ``rng``: ``restored`` (this rank's own streams), ``reseeded`` (another
    layout, see ``rng``) or ``untouched`` (weights only). ``hparams_changed``: hyper-parameters whose
    value differs between the run and the save, ``{"param_groups.0.lr": (run, save)}``."""

    path: Path
    step: int
    data_position: dict[str, Any]
    losses: list[float]
    loaded: list[str]
    skipped: list[str] = field(default_factory=list)
    rng: str = "untouched"
    hparams_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    run_config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)


def _check_tensors(
    index: Mapping[str, tuple[list[int], torch.dtype]],
    targets: Mapping[str, torch.Tensor],
    params: Iterable[str],
    dtypes: bool,
) -> None:
    check_shapes(
        {k: s for k, (s, _) in index.items()},
        {k: list(t.shape) for k, t in targets.items()},
        set(params),
    )
    if dtypes:
        for k, t in targets.items():
            if index[k][1] != t.dtype:
                raise SaveError(f"{k} has dtype {index[k][1]} in the save and {t.dtype} here")


def _report(folder: SaveFolder, loaded: list[str], **kw: Any) -> LoadReport:
    meta = folder.meta
    return LoadReport(
        path=folder.path,
        step=folder.step,
        data_position=dict(meta["data_position"]),
        losses=list(meta["losses"]),
        loaded=loaded,
        run_config=dict(meta["run_config"]),
        extra=dict(meta["extra"]),
        model=dict(meta["model"]),
        **kw,
    )


def _optimizer_targets(
    index: Mapping[str, tuple[list[int], torch.dtype]], keys: Iterable[str]
) -> dict[str, torch.Tensor]:
    """Empty CPU tensors for every saved optimiser-state entry of these parameter keys."""
    wanted = set(keys)
    out: dict[str, torch.Tensor] = {}
    for k, (shape, dtype) in index.items():  # optim.<param key>.<state name>
        if k.startswith(OPTIM_PREFIX) and k[len(OPTIM_PREFIX) :].rpartition(".")[0] in wanted:
            out[k] = torch.empty(shape, dtype=dtype)
    return out


def _check_optimizer(saved: Mapping[str, Any] | None, optimizer: torch.optim.Optimizer) -> None:
    name = optimizer_name(optimizer)
    if saved is None:
        raise SaveError(
            f"the save holds no optimiser state, this run's optimiser is {name}; "
            "load it with optimizer=None (weights only)"
        )
    if saved["name"] != name:
        raise SaveError(f"the save's optimiser is {saved['name']}, this run's is {name}")
    n_saved, n_here = len(saved["param_groups"]), len(optimizer.param_groups)
    if n_saved != n_here:
        raise SaveError(
            f"the save's optimiser has {n_saved} parameter groups, this run's has {n_here}"
        )


def _hparam_changes(
    saved: list[dict[str, Any]], here: list[dict[str, Any]]
) -> dict[str, tuple[Any, Any]]:
    out = {}
    for i, (s, h) in enumerate(zip(saved, here)):
        for k in sorted(s.keys() | h.keys()):
            if k not in IMPLEMENTATION_HPARAMS and s.get(k) != h.get(k):
                out[f"param_groups.{i}.{k}"] = (h.get(k), s.get(k))
    return out


def load(
    path: Path | str,
    layers: Sequence[nn.Module],
    offset: Indices,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    model: Mapping[str, Any] | None = None,
    topology: Topology | None = None,
    hparams: Literal["save", "run"] = "save",
) -> LoadReport:
    """Resume: fill ``layers`` (this stage's cell, the model's layers ``offset ..``; or its cells,
    ``offset`` listing each layer's global index) and the optimiser's state from the save at
    ``path``, and restore this rank's RNG streams.

    ``model``: this run's :func:`record.describe_model`, checked against the save's (name, config,
    layers, shapes); ``hparams``: the optimiser's hyper-parameters after loading, the save's (as
    ``torch.optim.Optimizer.load_state_dict`` does; they may have been scheduled) or this run's.
    """
    if hparams not in ("save", "run"):
        raise ValueError(f"hparams={hparams!r} is invalid; allowed: save, run")
    topo = topology or single_process()
    folder = open_save(path)
    meta = folder.meta
    if model is not None:
        check_model(meta["model"], model)
    index = tensor_index(folder.path)
    targets = layer_tensors(layers, offset)
    keys = param_keys(layers, offset)
    _check_tensors(index, targets, keys.values(), dtypes=True)
    if optimizer is not None:
        _check_optimizer(meta["optimizer"], optimizer)
        opt_targets = _optimizer_targets(index, keys.values())
        targets = {**targets, **opt_targets}
    read_tensors(folder.path, targets)
    changed: dict[str, tuple[Any, Any]] = {}
    if optimizer is not None:
        saved_groups = meta["optimizer"]["param_groups"]
        changed = _hparam_changes(saved_groups, optimizer_groups(optimizer))
        optimizer.load_state_dict(
            optimizer_state_dict(
                optimizer, layers, offset, opt_targets, saved_groups if hparams == "save" else None
            )
        )
    return _report(
        folder,
        sorted(targets),
        rng=_restore_rng(folder, topo, global_indices(layers, offset)),
        hparams_changed=changed,
    )


def _restore_rng(folder: SaveFolder, topo: Topology, indices: list[int]) -> str:
    """Restore this rank's own streams if the save has a rank with these very layers, else reseed."""
    layout = folder.meta["layout"]
    balance = layout["balance"]
    K = layout["K"]
    held = [  # the layers the save's rank at this stage held (several cells per stage too)
        i
        for s in range(topo.stage, len(balance), K)
        for i in range(sum(balance[:s]), sum(balance[: s + 1]))
    ]
    same_cell = K == topo.K and layout["replicas"] == topo.replicas and held == indices
    try:
        if same_cell:
            rng.restore(_read_json(folder.path / rng_file(topo.stage, topo.replica)), topo.device)
            return "restored"
        material = _read_json(folder.path / rng_file(0, 0))["torch"]
    except (KeyError, TypeError, ValueError) as err:
        raise SaveError(
            f"{folder.path} is corrupt: its RNG states cannot be read ({err})"
        ) from None
    rng.reseed(material, topo.stage, topo.replica)
    return "reseeded"


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def load_weights(
    path: Path | str,
    layers: Sequence[nn.Module],
    offset: Indices,
    *,
    skip: Iterable[int] = (),
    model: Mapping[str, Any] | None = None,
) -> LoadReport:
    """``init_from``: fill the weights and buffers of ``layers`` (global ``offset ..``) from a save,
    except the layers whose global index is in ``skip``, which keep their fresh initialisation.

    No optimiser state, step or RNG. ``model``: this run's record; only its name must match (the
    config may differ, e.g. in the number of classes); every loaded tensor must match in shape.
    """
    skipped_layers = set(skip)
    bad = sorted(i for i in skipped_layers if not isinstance(i, int) or i < 0)
    if bad:
        raise ValueError(f"skip={bad} is invalid; allowed: global layer indices >= 0")
    folder = open_save(path)
    if model is not None:
        check_model(folder.meta["model"], model, config=False, shapes=False)
    index = tensor_index(folder.path)
    everything = layer_tensors(layers, offset)
    targets = {k: t for k, t in everything.items() if int(k.split(".")[1]) not in skipped_layers}
    try:
        _check_tensors(index, targets, param_keys(layers, offset).values(), dtypes=False)
    except SaveError as err:  # another size of the same model: name both sizes, then the tensor
        differs = config_difference(folder.meta["model"], model) if model is not None else None
        if differs is None:
            raise
        raise SaveError(f"{differs}: {err}") from None
    read_tensors(folder.path, targets)
    return _report(folder, sorted(targets), skipped=sorted(everything.keys() - targets.keys()))
