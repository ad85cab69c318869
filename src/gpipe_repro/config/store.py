"""Register the schema and every group's options in Hydra's ConfigStore (once per process).

The options of a group are the registries of the code that implements them — ``models.MODELS``,
``data.DATASETS``, ``optim.OPTIMIZERS`` — so adding a model is one entry there, not a YAML file and a
list to keep in step. ``conf/`` holds only the root's table of contents, experiments and hardware
profiles; a YAML file chooses options and overrides values, it never restates a default.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from .schema import LOGGERS, PLAN_MODES, AutoPlanConfig, LoggerConfig, PipelineConfig, RunConfig

__all__ = ["register", "group_options", "GROUPS"]

GROUPS = (
    "model",
    "data",
    "optim",
    "pipeline",
    "logger",
    "hardware",
    "plan",
    "experiment",
    "mt_size",  # conf/mt_size/: Fig. 3's model sizes
    "table5_run",  # conf/table5_run/: Table 5's batch and length pairs
)
_done = False


def _groups() -> dict[str, dict[str, object]]:
    from ..data import DATASETS
    from ..engine import SCHEDULES
    from ..models import MODELS
    from ..optim import OPTIMIZERS

    return {
        "model": {name: spec.config() for name, spec in MODELS.items()},
        "data": {name: spec.config() for name, spec in DATASETS.items()},
        "optim": {name: spec.config() for name, spec in OPTIMIZERS.items()},
        # the paper's fill-drain is `gpipe`; each other schedule of the engine is an option of its
        # own (interleaved with two cells per rank, its least)
        "pipeline": {
            name: replace(
                PipelineConfig(), schedule=name, virtual_stages=2 if name == "interleaved" else 1
            )
            for name in SCHEDULES
        },
        "logger": {name: LoggerConfig(name=name) for name in LOGGERS},
        "plan": {mode: AutoPlanConfig(mode=mode) for mode in PLAN_MODES},  # plan=auto
    }


def _stamp() -> str:
    """A run folder's name: the time and this process's id, so runs started in the same second by
    different processes never share a folder (Hydra's ${now:%H-%M-%S} alone does)."""
    return f"{datetime.now():%H-%M-%S}-{os.getpid()}"


def register() -> None:
    global _done
    if _done:
        return
    # Cached per config (and copied to every job of a sweep by Hydra), like Hydra's own ${now:}.
    OmegaConf.register_new_resolver("gpipe.stamp", _stamp, use_cache=True, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for group, options in _groups().items():
        for name, node in options.items():
            cs.store(group=group, name=name, node=node)
    _done = True


def group_options(group: str, conf_dir: object = None) -> list[str]:
    """The options of ``group``: the registered ones and any YAML file of the group in ``conf_dir``."""
    from pathlib import Path

    names = set(_groups().get(group, {}))
    if conf_dir is not None:
        names |= {p.stem for p in (Path(str(conf_dir)) / group).glob("*.yaml")}
    return sorted(names)
