"""The model as a run plans it: built on the meta device (nothing allocated), checked against K.

What every decision of a run's plan (``runplan.plan``) and every costing of it (``runplan.costing``)
starts from: the model's layers with their shapes but no storage, the data's shapes, and the
dataset's unit (token batches count target tokens), read once here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config.schema import RunConfig
from ..config.validate import engine_error
from ..data import DataInfo, get_data
from ..engine import ArgumentError, check_balance, check_cells
from ..engine.partition import check_k
from ..models import ModelSpec, get_model

__all__ = ["ModelPlan", "plan_model"]


@dataclass
class ModelPlan:
    """The model as a plan: its layers on the meta device (no memory), the data's shapes and the
    dataset's units per sample (``unit``: token batches count target tokens, ``tokens_per_sample``
    a sentence; else 1)."""

    model: ModelSpec
    info: DataInfo
    layers: list[nn.Module]
    unit: int = 1


def plan_model(spec: RunConfig) -> ModelPlan:
    """Build the model on ``meta`` and check K and balance against its layers (UserError)."""
    model = get_model(spec.model.name)
    info = spec.data.info()
    with torch.device("meta"):
        layers = model.layers(info, spec.model)
    try:
        check_k(spec.pipeline.K, len(layers))
        check_cells(spec.pipeline.K, spec.pipeline.virtual_stages, len(layers))
        if spec.pipeline.balance is not None:
            check_balance(spec.pipeline.balance, len(layers))
    except ArgumentError as err:
        raise engine_error(err) from None
    unit = info.tokens_per_sample if get_data(spec.data.name).batch_tokens else 1
    return ModelPlan(model, info, layers, unit)
