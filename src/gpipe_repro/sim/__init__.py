"""The schedule simulator: a training step of the engine's own schedules, timed from per-layer costs.

Published devices are data (``hardware``: a roofline on counted FLOPs and bytes, ``roofline``,
``count``, anchored on published throughputs, ``anchors``); this device is measured
(``measured``). Both are a ``Hardware`` (``interface``), resolved once per run.
"""

from .costs import CostModel, LayerCost, Link, StageCost, stage_costs
from .count import LayerCount, OpCount, count_amoebanet, count_layers, count_transformer_lm
from .hardware import HardwareConfig, PublishedDevice, load_config, load_profile
from .interface import Anchor, Hardware, HardwareError, Trust, Workload
from .render import render
from .resolve import resolve_hardware
from .roofline import HardwareProfile, RooflineCosts
from .simulate import ScheduleDeadlock, SimResult, simulate

__all__ = [
    "Anchor",
    "CostModel",
    "Hardware",
    "HardwareConfig",
    "HardwareError",
    "HardwareProfile",
    "LayerCost",
    "LayerCount",
    "Link",
    "OpCount",
    "PublishedDevice",
    "RooflineCosts",
    "ScheduleDeadlock",
    "SimResult",
    "StageCost",
    "Trust",
    "Workload",
    "count_amoebanet",
    "count_layers",
    "count_transformer_lm",
    "load_config",
    "load_profile",
    "render",
    "resolve_hardware",
    "simulate",
    "stage_costs",
]
