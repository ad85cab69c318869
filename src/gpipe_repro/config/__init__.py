"""The run's configuration: the schema (``schema``), its registration with Hydra (``store``), validation
at the edge (``validate``) and composition from a command line (``compose``)."""

from .options import opt
from .schema import LoggerConfig, PipelineConfig, RunConfig, SweepConfig, TrainConfig

__all__ = ["opt", "RunConfig", "PipelineConfig", "TrainConfig", "LoggerConfig", "SweepConfig"]
