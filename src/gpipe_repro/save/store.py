"""The tensor store of a save: ``torch.distributed.checkpoint`` (DCP) over global keys.

Why DCP (evaluated on torch 2.13 before writing this package): each stage passes DCP a flat dict of
its own keys (``layers.<global_i>.*``, ``optim.layers.<global_i>.*``); ``dcp.save`` is collective, and
every rank writes its own file, ``__<rank>_0.distcp``, plus one ``.metadata`` (key -> shape, dtype,
file and byte range) from the coordinator — DCP deduplicates plain tensors by key, and our keys never
repeat across stages. ``dcp.load`` with ``no_dist=True`` needs no process group, so any rank (or a
K = 1 process) reads exactly the keys of its own layers by byte range from whichever files hold them:
resharding to any K and balance is loading by key. The experiment: a tuplenet saved by 2 gloo ranks
with balance [3, 5] gave a 19 kB ``.metadata`` and one file per rank (60 kB, 96 kB), loaded
bit-exactly at K = 1 without a process group and as a 3-layer slice; a wrong shape is refused by DCP
(we check shapes ourselves first, for a better message). So one file per stage plus a JSON index,
the fallback, would only re-implement this. Two caveats: ``.metadata`` is a pickle (load only saves
you trust; tensor data itself is read with ``weights_only=True``), and the save folder must be on a
filesystem every rank sees. Cost: DCP stores each tensor as its own ``torch.save`` record, so a
load pays a fixed cost per tensor besides the bytes (AmoebaNet-D(6, 32) with RMSprop has 1809
tensors; the figures are in ``reports/save/save.md``, from ``bench/save.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from .errors import SaveError

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["write_tensors", "read_tensors", "tensor_index"]

_NO_DIST_WARNING = "torch.distributed is disabled, unavailable or uninitialized"


def _dcp() -> ModuleType:
    """DCP, imported on first use: its import took 0.60 s of the 2.25 s of ``import
    gpipe_repro.cli`` (``python -X importtime``, 2-core CPU host), and a run that never saves
    never needs it."""
    import torch.distributed.checkpoint as dcp

    return dcp


def write_tensors(folder: Path, tensors: Mapping[str, torch.Tensor], distributed: bool) -> None:
    """Write this rank's tensors; collective over the default group when ``distributed``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)
        dcp = _dcp()
        dcp.save(
            dict(tensors),
            storage_writer=dcp.FileSystemWriter(folder),
            no_dist=not (distributed and dist.is_initialized()),
        )


def read_tensors(folder: Path, targets: Mapping[str, torch.Tensor]) -> None:
    """Copy the saved values of ``targets``' keys into those tensors, in place (no collectives)."""
    if not targets:
        return
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_DIST_WARNING)
            dcp = _dcp()
            dcp.load(dict(targets), storage_reader=dcp.FileSystemReader(folder), no_dist=True)
    except Exception as err:  # DCP wraps I/O and unpickling errors in its own exception types
        line = str(err).strip().splitlines()
        raise SaveError(
            f"{folder} is corrupt: reading its tensors failed "
            f"({type(err).__name__}: {line[-1] if line else ''})"
        ) from None


def tensor_index(folder: Path) -> dict[str, tuple[list[int], torch.dtype]]:
    """Every saved tensor's key -> (shape, dtype), from DCP's ``.metadata``."""
    dcp = _dcp()
    try:
        md = dcp.FileSystemReader(folder).read_metadata()
    except Exception as err:
        raise SaveError(
            f"{folder} is corrupt: cannot read its .metadata ({type(err).__name__}: {err})"
        ) from None
    out: dict[str, tuple[list[int], torch.dtype]] = {}
    for key, m in md.state_dict_metadata.items():
        if isinstance(m, dcp.metadata.TensorStorageMetadata):
            out[key] = (list(m.size), m.properties.dtype)
    return out
