"""What a save is of: a ``describe`` record of the model, and the one-line checks against it.

The record holds the model's name, its config dict (as the caller builds the model from it), the
number of layers, and every parameter's and buffer's global key and shape. It is built from the
*whole* flat layer list (on the meta device it costs nothing), so every rank can check a save
against the run before reading a byte of tensor data, and the message names what differs first:
the model, then its config, then the number of layers, then a tensor's shape.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from torch import nn

from .errors import SaveError
from .keys import jsonable

__all__ = [
    "describe_model",
    "check_model",
    "check_shapes",
    "config_difference",
    "flat_config",
    "run_differences",
]


def describe_model(
    name: str, config: Mapping[str, Any], layers: Sequence[nn.Module]
) -> dict[str, Any]:
    """The record of a model built as ``layers`` (the full flat list) from ``config``."""
    params: dict[str, list[int]] = {}
    buffers: dict[str, list[int]] = {}
    for i, layer in enumerate(layers):
        for n, p in layer.named_parameters():
            params[f"layers.{i}.{n}"] = list(p.shape)
        for n, b in layer.named_buffers():
            buffers[f"layers.{i}.{n}"] = list(b.shape)
    # As JSON from the start, so the record in memory equals the record read back from a save.
    plain = json.loads(json.dumps({k: jsonable(v) for k, v in config.items()}, default=str))
    return {
        "name": name,
        "config": plain,
        "layers": len(layers),
        "param_count": sum(_numel(s) for s in params.values()),
        "parameters": params,
        "buffers": buffers,
    }


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def flat_config(config: Mapping[str, Any], prefix: str = "model.") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"model.a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _json(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def run_differences(
    meta: Mapping[str, Any], run: Mapping[str, Any]
) -> dict[str, dict[str, list[Any]]]:
    """What differs between the run that made a save (its ``save.json``: ``meta``) and ``run`` (a
    run's config as a dict, ``dataclasses.asdict``), grouped by what ``train.resume_allow`` names:
    ``{"batch_size": {"train.batch_size": [save's, run's]}, "data": {...}, "model": {...}}``. The
    data order is the seed and the ``data`` options; the model, its name, else its config as
    ``describe_model`` records it."""
    was = meta.get("run_config") or {}
    out: dict[str, dict[str, list[Any]]] = {}
    batch = run["train"]["batch_size"]
    saved_batch = (was.get("train") or {}).get("batch_size")
    if saved_batch is not None and saved_batch != batch:
        out["batch_size"] = {"train.batch_size": [saved_batch, batch]}
    data: dict[str, list[Any]] = {}
    if "seed" in was and was["seed"] != run["seed"]:
        data["seed"] = [was["seed"], run["seed"]]
    mine = _json(run["data"])
    theirs = was.get("data") or {}
    for k in sorted(mine.keys() | theirs.keys()):
        if theirs and mine.get(k) != theirs.get(k):
            data[f"data.{k}"] = [theirs.get(k), mine.get(k)]
    if data:
        out["data"] = data
    old, name = meta["model"], run["model"]["name"]
    options = {k: v for k, v in run["model"].items() if k != "name"}
    if old["name"] != name:
        out["model"] = {"model": [old["name"], name]}
    else:
        a = flat_config(old["config"])
        b = flat_config(describe_model(name, options, [])["config"])
        model = {
            k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
        }
        if model:
            out["model"] = model
    return out


def _settings(cfg: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={cfg[k]}" if k in cfg else f"no {k}" for k in keys)


def check_model(
    saved: Mapping[str, Any], here: Mapping[str, Any], *, config: bool = True, shapes: bool = True
) -> None:
    """Raise :class:`SaveError` naming the first difference between two ``describe`` records.

    ``config=False`` (transfer learning) compares the name only, then the shapes the caller loads.
    """
    if saved["name"] != here["name"]:
        raise SaveError(f"the save is of {saved['name']}, this run's model is {here['name']}")
    if config:
        differs = config_difference(saved, here)
        if differs:
            raise SaveError(differs)
        if saved["layers"] != here["layers"]:
            raise SaveError(
                f"the save's model has {saved['layers']} layers, this run's has {here['layers']}"
            )
    if shapes:
        check_shapes(
            {**saved["parameters"], **saved["buffers"]},
            {**here["parameters"], **here["buffers"]},
            here["parameters"],
        )


_MISSING = object()


def config_difference(saved: Mapping[str, Any], here: Mapping[str, Any]) -> str | None:
    """``the save is of NAME with model.D=32, this run has model.D=16`` (the options that differ), or
    None when the two records were built from the same options."""
    a, b = flat_config(saved["config"]), flat_config(here["config"])
    diff = sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))
    if not diff:
        return None
    return f"the save is of {saved['name']} with {_settings(a, diff)}, this run has {_settings(b, diff)}"


def check_shapes(
    saved: Mapping[str, Sequence[int]],
    here: Mapping[str, Sequence[int]],
    params: Collection[str] | None = None,
) -> None:
    """Every key of ``here`` exists in ``saved`` with the same shape, else one line naming it."""
    for key, shape in here.items():
        kind = "parameter" if params is None or key in params else "buffer"
        if key not in saved:
            raise SaveError(f"{kind} {key} is not in the save (it holds {_span(saved)})")
        if list(saved[key]) != list(shape):
            raise SaveError(
                f"{kind} {key} has shape {list(saved[key])} in the save and {list(shape)} here"
            )


def _span(keys: Mapping[str, Any]) -> str:
    idx = sorted({int(k.split(".")[1]) for k in keys if k.startswith("layers.")})
    return f"layers {idx[0]}..{idx[-1]}" if idx else "no layers"
