"""Every model's spec names the loss planning counts after its last layer (``ModelSpec.planning_loss``)."""

from __future__ import annotations

import pytest
import torch

from gpipe_repro.data import DATASETS
from gpipe_repro.models import MODELS, class_planning_loss, token_planning_loss

# one dataset of each kind a model may need
DATA = {"image": "mnist", "tokens": None, "pairs": "translation"}


def _info(kind: str):
    if kind == "tokens":  # synthetic token sequences
        cfg = DATASETS["synthetic"].config()
        cfg.kind = "tokens"
        return cfg.info()
    return DATASETS[DATA[kind]].config().info()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_planning_loss_runs_on_the_models_own_output(name):
    spec = MODELS[name]
    info = _info(spec.data_kind)
    with torch.device("meta"):
        layers = spec.layers(info, spec.config())
        x = info.example(2, "meta")
        for layer in layers:
            x = layer(x)
        loss = spec.planning_loss(x)
    assert loss.shape == ()


def test_sequence_models_plan_with_the_token_loss_and_classifiers_with_the_class_loss():
    # transformer_mt used to be planned with a classification loss by batch_mode=fit
    assert MODELS["transformer_mt"].planning_loss is token_planning_loss
    assert MODELS["transformer_lm"].planning_loss is token_planning_loss
    assert MODELS["amoebanet_d"].planning_loss is class_planning_loss
