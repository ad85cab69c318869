"""Which experiments' cells are simulated on which hardware profile, read from ``conf/experiment/``.

A published profile vouches only for what its anchors check; every cell simulated on it rests on its
roofline. To say so beside the right cells, each experiment file is read as Hydra would sweep it:
its ``hardware`` and ``model`` (the root config's choice, a ``defaults`` override of it, or the swept
values of ``hydra.sweeper.params``) and the size of its sweep (parsed by Hydra's own override
grammar). Experiments with ``backend: engine`` are measured, never simulated, and are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import UserError

__all__ = ["UseRow", "uses"]

# what a model is fed, as the anchors' models are told apart (an anchor with a sequence: tokens)
INPUTS = {"image": "image", "tokens": "tokens", "pairs": "tokens"}


@dataclass
class UseRow:
    """The cells of one experiment simulated on one hardware profile."""

    experiment: str
    hardware: str
    model: str
    input: str  # image | tokens: what the model is fed (``INPUTS``)
    cells: int


def _defaults(cfg: dict[str, Any]) -> dict[str, str]:
    """The experiment's ``override /GROUP: OPTION`` entries as {GROUP: OPTION}."""
    out = {}
    for item in cfg.get("defaults") or []:
        if isinstance(item, dict):
            for k, v in item.items():
                out[str(k).removeprefix("override ").lstrip("/")] = str(v)
    return out


def _swept(params: dict[str, str], where: Path) -> dict[str, list[str]]:
    """Every swept parameter's values, by Hydra's override grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    lines = [f"{k}={v}" for k, v in params.items()]
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except HydraException as err:
        raise UserError(f"{where}: hydra.sweeper.params: {str(err).splitlines()[0]}") from None
    return {
        ov.key_or_group: (
            [str(v) for v in ov.sweep_string_iterator()]
            if ov.is_sweep_override()
            else [ov.get_value_element_as_str()]
        )
        for ov in parsed
    }


def uses(conf: Path, published: list[str]) -> list[UseRow]:
    """Per experiment of ``conf/experiment/`` and profile of ``published`` it simulates on: the
    number of its cells (by experiment, then profile, then model)."""
    from omegaconf import OmegaConf

    from ...models import MODELS

    def load(path: Path) -> dict[str, Any]:
        cfg = OmegaConf.to_container(OmegaConf.load(path))
        assert isinstance(cfg, dict)
        return {str(k): v for k, v in cfg.items()}

    root = _defaults(load(conf / "config.yaml"))  # the root's choices: model, hardware, ...
    rows = []
    for path in sorted((conf / "experiment").glob("*.yaml")):
        cfg = load(path)
        if cfg.get("backend", "engine") == "engine":
            continue
        groups = {**root, **_defaults(cfg)}
        params = ((cfg.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
        swept = _swept({str(k): str(v) for k, v in params.items()}, path)
        hardware = swept.pop("hardware", [groups["hardware"]])
        models = swept.pop("model", [groups["model"]])
        others = math.prod(len(v) for v in swept.values())
        for hw in hardware:
            if hw not in published:
                continue
            for model in models:
                if model not in MODELS:
                    raise UserError(
                        f"{path}: model={model} is unknown; allowed: {', '.join(MODELS)}"
                    )
                kind = INPUTS[MODELS[model].data_kind]
                rows.append(
                    UseRow(str(cfg.get("experiment_name") or path.stem), hw, model, kind, others)
                )
    return rows
