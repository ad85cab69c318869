"""Writing a save, collectively over every rank of a run, atomically.

Every rank calls :func:`save` at the same step. Replica 0 of each stage writes its layers' weights,
buffers and optimiser state (the other replicas hold identical copies); every rank writes its own RNG
states; the last stage of replica 0, which holds the losses, writes ``save.json``. All of it goes into
``<dir>/save-<step>.tmp-<uid>/``; once every rank is done (a barrier with a bounded timeout), rank 0
renames the folder to ``<dir>/save-<step>/`` and writes the ``COMPLETE`` marker last (``folder``).
"""

from __future__ import annotations

import datetime
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..engine.topology import Topology, single_process
from . import rng
from .errors import SaveError
from .folder import (
    FORMAT,
    MARKER,
    META,
    RNG_DIR,
    VERSION,
    fsync_dir,
    list_files,
    prune,
    rng_file,
    run_of,
    save_path,
    write_json_synced,
)
from .keys import layer_tensors, optimizer_groups, optimizer_name, optimizer_tensors
from .record import check_shapes
from .store import write_tensors

__all__ = ["save", "barrier"]


def _distributed(topo: Topology) -> bool:
    return topo.distributed and dist.is_available() and dist.is_initialized()


def barrier(topo: Topology, timeout_s: float) -> None:
    """Wait for every rank, at most ``timeout_s`` on gloo (nccl: the process group's timeout)."""
    if not _distributed(topo):
        return
    if dist.get_backend() == "gloo":
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s))
    else:
        dist.barrier()


def _shared_uid(topo: Topology) -> str:
    obj = [uuid.uuid4().hex[:12] if topo.rank == 0 else None]
    if _distributed(topo):
        dist.broadcast_object_list(obj, src=0)
    return str(obj[0])


def save(
    directory: Path | str,
    step: int,
    layers: Sequence[nn.Module],
    balance: Sequence[int],
    topology: Topology | None = None,
    *,
    indices: Sequence[int] | None = None,
    model: Mapping[str, Any],
    optimizer: torch.optim.Optimizer | None = None,
    losses: Sequence[float] | None = None,
    run_config: Mapping[str, Any] | None = None,
    data_position: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    keep: int | None = None,
    timeout_s: float = 300.0,
    run: str | None = None,
) -> Path:
    """Save this rank's share of the training state after ``step`` optimiser steps; collective.

    ``layers``: this stage's cell (``pipe.cell.layers``); ``balance``: layers per stage (per model
    cell, K·v of them, where a stage holds v cells: then ``indices`` gives each of ``layers``' global
    index, ``pipe.layer_indices``; None: the stage's contiguous cell of ``balance``);
    ``model``: :func:`record.describe_model` of the whole model; ``losses``: every step's loss so far
    (read on the last stage of replica 0); ``data_position``: where the data stream resumes (``step``
    is always added); ``extra``: any JSON state of the caller (e.g. an LR schedule); ``keep``: then
    delete all but the ``keep`` newest saves (of ``run``: the id of the run writing it, recorded in
    ``save.json``; another run's saves are never pruned). Returns the save's folder.
    """
    topo = topology or single_process()
    if topo.distributed and not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            f"save(): the topology has {topo.world_size} ranks but no process group is initialised; "
            "call init_topology first"
        )
    if step < 0:
        raise ValueError(f"step={step} is invalid; allowed: an integer >= 0")
    if len(balance) % topo.K or not balance or any(b < 1 for b in balance):
        raise ValueError(
            f"balance={list(balance)} is invalid; allowed: {topo.K} (or a multiple of {topo.K}: "
            "several cells per stage) positive layer counts"
        )
    mine = [
        i
        for s in range(topo.stage, len(balance), topo.K)
        for i in range(sum(balance[:s]), sum(balance[: s + 1]))
    ]
    if len(layers) != len(mine) or (indices is not None and list(indices) != mine):
        raise ValueError(
            f"stage {topo.stage} has {len(layers)} layers"
            + (f" at {list(indices)}" if indices is not None else "")
            + f", balance={list(balance)} gives it {len(mine)} at {mine}"
        )
    if keep is not None and keep < 1:
        raise ValueError(
            f"keep={keep} is invalid; allowed: an integer >= 1 or None (keep every save)"
        )
    if sum(balance) != model["layers"]:
        raise ValueError(
            f"balance={list(balance)} covers {sum(balance)} layers, the model has {model['layers']}"
        )
    offset = mine
    tensors = layer_tensors(layers, offset)
    try:  # the record must describe these layers: a wrong offset or model fails here, not at load
        check_shapes(
            {**model["parameters"], **model["buffers"]},
            {k: list(t.shape) for k, t in tensors.items()},
        )
    except SaveError as err:
        raise ValueError(
            f"save(): the model record does not match stage {topo.stage}'s layers: {err}"
        ) from None
    if optimizer is not None:
        tensors.update(optimizer_tensors(optimizer, layers, offset))
    if topo.replica != 0:
        tensors = {}  # replicas hold the same weights and optimiser state as replica 0

    directory = Path(directory)
    final = save_path(directory, step)
    other = run_of(final) if (final / MARKER).is_file() else None
    if other is not None and other != run:  # every rank sees it: all refuse before any collective
        raise SaveError(
            f"{final} is another run's save; give this run a save folder of its own "
            "(train.save_dir)"
        )
    tmp = directory / f"save-{step}.tmp-{_shared_uid(topo)}"
    (tmp / RNG_DIR).mkdir(parents=True, exist_ok=True)
    write_json_synced(tmp / rng_file(topo.stage, topo.replica), rng.capture(topo.device))
    write_tensors(tmp, tensors, _distributed(topo))
    if topo.is_last and topo.replica == 0:
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "step": step,
            "run": run,
            "data_position": {**(data_position or {}), "step": step},
            "losses": [float(x) for x in (losses or [])],
            "model": dict(model),
            "run_config": dict(run_config or {}),
            "optimizer": None
            if optimizer is None
            else {"name": optimizer_name(optimizer), "param_groups": optimizer_groups(optimizer)},
            "layout": {"K": topo.K, "replicas": topo.replicas, "balance": list(balance)},
            "extra": dict(extra or {}),
            "torch": torch.__version__,
        }
        write_json_synced(tmp / META, meta)
    barrier(topo, timeout_s)  # every rank's files are complete
    if topo.rank == 0:
        if final.exists():  # a save of the same step (e.g. re-run after a resume) is replaced
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(directory)
        write_json_synced(final / MARKER, {"step": step, "files": list_files(final)})
        fsync_dir(final)
        if keep is not None:
            prune(directory, keep, current=final, run=run)
    barrier(topo, timeout_s)  # nobody returns before the save is complete
    return final
