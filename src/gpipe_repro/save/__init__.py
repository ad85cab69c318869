"""Saves of pipelined training state that load at any K and balance (resume, transfer learning).

A *save* (never "checkpoint": in this project that word means rematerialisation) is a folder
``<dir>/save-<step>/`` holding, by **global** layer index: every layer's weights and buffers
(BatchNorm running statistics included) and the optimiser's per-parameter state; plus the step, the
data position, the losses so far, every rank's RNG states keyed by (stage, replica), the optimiser's
name and hyper-parameters, a ``describe`` record of the model and the run's config. Tensors go through
``torch.distributed.checkpoint`` (why: ``store``); the rest is JSON.

Use (every rank, after building its ``Pipeline`` and optimiser)::

    record = describe_model("tuplenet", params, all_layers)      # the whole flat layer list
    save(dir, step, pipe.cell.layers, balance, topo, model=record, optimizer=opt, losses=losses)
    report = load(latest(dir), pipe.cell.layers, offset, optimizer=opt, model=record, topology=topo)
    report = load_weights(path, pipe.cell.layers, offset, skip=[n_layers - 1], model=record)
"""

from .errors import SaveError
from .folder import SaveFolder, latest, open_save, prune, resolve, run_of, save_path
from .read import LoadReport, load, load_weights
from .record import check_model, describe_model
from .write import save

__all__ = [
    "LoadReport",
    "SaveError",
    "SaveFolder",
    "check_model",
    "describe_model",
    "latest",
    "load",
    "load_weights",
    "open_save",
    "prune",
    "resolve",
    "run_of",
    "save",
    "save_path",
]
