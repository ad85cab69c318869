"""The run's configuration: the schema (``schema``), its registration with Hydra (``store``), validation
at the edge (``validate``) and composition from a command line (``compose``). Each option is declared
with ``gpipe_repro.options.opt``."""

from .schema import LoggerConfig, PipelineConfig, RunConfig, SweepConfig, TrainConfig

__all__ = ["RunConfig", "PipelineConfig", "TrainConfig", "LoggerConfig", "SweepConfig"]
