"""The schedule simulator: a training step of the engine's own schedules, timed from per-layer costs."""

from .costs import CostModel, LayerCost, Link, StageCost, stage_costs
from .count import LayerCount, count_amoebanet, count_layers, count_transformer_lm
from .hardware import HardwareError, HardwareProfile, load_profile
from .render import render
from .roofline import RooflineCosts
from .simulate import ScheduleDeadlock, SimResult, simulate

__all__ = [
    "CostModel",
    "HardwareError",
    "HardwareProfile",
    "LayerCost",
    "LayerCount",
    "Link",
    "RooflineCosts",
    "ScheduleDeadlock",
    "SimResult",
    "StageCost",
    "count_amoebanet",
    "count_layers",
    "count_transformer_lm",
    "load_profile",
    "render",
    "simulate",
    "stage_costs",
]
