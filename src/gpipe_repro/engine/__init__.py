"""GPipe pipeline-parallel engine: partition, micro-batch, schedule, remat, execute. No Hydra, no files."""

from .batchnorm import MicroBatchNorm, convert_batchnorm
from .cell import Cell, check_cells, chunk_slices, stage_slice
from .checkpoint import CHECKPOINT_MODES
from .errors import ArgumentError
from .events import Event, chrome_trace, measured_bubble
from .launch import RankError, launch
from .microbatch import join, split
from .partition import PartitionError, balance_by_cost, check_balance
from .pipeline import Pipeline
from .precision import PRECISIONS
from .schedule import SCHEDULES, Action, bubble_fraction, check_schedule, stage_actions
from .topology import Topology, independent_pipelines, init_topology, single_process

__all__ = [
    "Action",
    "ArgumentError",
    "CHECKPOINT_MODES",
    "Cell",
    "Event",
    "MicroBatchNorm",
    "PartitionError",
    "Pipeline",
    "PRECISIONS",
    "RankError",
    "SCHEDULES",
    "Topology",
    "balance_by_cost",
    "bubble_fraction",
    "check_balance",
    "check_cells",
    "check_schedule",
    "chunk_slices",
    "chrome_trace",
    "convert_batchnorm",
    "independent_pipelines",
    "init_topology",
    "join",
    "launch",
    "measured_bubble",
    "single_process",
    "split",
    "stage_actions",
    "stage_slice",
]
