"""The run's configuration: the schema (``schema``), its registration with Hydra (``store``), validation
at the edge (``validate``) and composition from a command line (``compose``).

Names are loaded on first use: the models', datasets' and optimisers' modules import ``config.options``
to declare their own configs, and the schema imports them back (their constants), so this package
must not import the schema as a side effect of importing ``config.options``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["opt", "RunConfig", "PipelineConfig", "TrainConfig", "LoggerConfig", "SweepConfig"]


def __getattr__(name: str) -> Any:
    if name == "opt":
        from .options import opt

        return opt
    if name in __all__:
        from . import schema

        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
