"""Validation at the edge: each message names the field, the value and what is allowed, in one line."""

from __future__ import annotations

from dataclasses import fields

import pytest

from gpipe_repro.config import PipelineConfig
from gpipe_repro.config.compose import compose
from gpipe_repro.engine import CHECKPOINT_MODES, SCHEDULES
from gpipe_repro.engine.cost import COST_KINDS
from gpipe_repro.engine.hostmem import HOST_MEMORY_MODES
from gpipe_repro.errors import UserError

BAD = [
    (
        ["pipeline.checkpoint=sometimes"],
        "pipeline.checkpoint='sometimes' is not allowed; allowed: never, except_last, always",
    ),
    (
        ["pipeline.host_memory=swap"],
        "pipeline.host_memory='swap' is not allowed; allowed: retain, system",
    ),
    (["pipeline.schedule=zb"], "pipeline.schedule='zb' is not allowed; allowed: gpipe, 1f1b"),
    (["pipeline.replicas=0"], "pipeline.replicas=0 is invalid; allowed: an integer >= 1"),
    (["pipeline.replicas=3"], "pipeline.replicas=3 does not divide train.batch_size=64"),
    (["pipeline.M=128"], "pipeline.M=128 exceeds the mini-batch of 64"),
    (["pipeline.K=2", "pipeline.balance=[1,2,3]"], "has 3 cells but pipeline.K=2"),
    (["train.steps=3", "train.warmup_steps=3"], "train.warmup_steps=3 leaves no timed step"),
    (["optim.name=lamb"], "optim.name='lamb' is not allowed; allowed: rmsprop, sgd, adam"),
    (["device=tpu"], "device='tpu' is not allowed; allowed: auto, cpu, cuda"),
    (["data.eval_size=-1"], "data.eval_size=-1 is invalid; allowed: an integer in 1..4999"),
    (["data.eval_size=0"], "data.eval_size=0 is invalid"),
    (["model.depth=0"], "model.depth=0 is invalid; allowed: an integer >= 1"),
    (["model.hidden=-5"], "model.hidden=-5 is invalid; allowed: an integer >= 1"),
    (["data=synthetic", "data.vocab=0"], "data.vocab=0 is invalid; allowed: an integer >= 2"),
    (["data=synthetic", "data.seq_len=0"], "data.seq_len=0 is invalid; allowed: an integer >= 1"),
    (
        ["optim=adam", "optim.betas=[0.9]"],
        "optim.betas=[0.9] is invalid; allowed: two numbers [beta1, beta2]",
    ),
    (["optim.lr=-1"], "optim.lr=-1.0 is invalid; allowed: a number >= 0"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_validation_messages(overrides, message):
    with pytest.raises(UserError) as err:
        compose(overrides, cuda_available=False)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_default_never_makes_a_valid_request_fail():
    spec = compose(
        ["train.steps=3"], cuda_available=False
    )  # warmup_steps defaults to null = automatic
    assert spec.train.timed_from == 1
    assert compose(["train.steps=1"], cuda_available=False).train.timed_from == 0
    assert compose([], cuda_available=False).train.timed_from == 5


def test_device_auto_resolves():
    assert compose([], cuda_available=False).device == "cpu"
    assert compose([], cuda_available=True).device == "cuda"
    with pytest.raises(UserError, match="no CUDA device is available"):
        compose(["device=cuda"], cuda_available=False)


def test_allowed_values_are_the_engines_own_constants():
    meta = {f.name: f.metadata for f in fields(PipelineConfig)}
    # checkpoint takes one mode or one per stage: validate.py checks it against the engine's modes
    with pytest.raises(UserError) as err:
        compose(["pipeline.checkpoint=sometimes"], cuda_available=False)
    assert ", ".join(CHECKPOINT_MODES) in str(err.value)
    assert meta["schedule"]["choices"] == tuple(SCHEDULES)
    assert meta["balance_by"]["choices"] == tuple(COST_KINDS)
    assert meta["host_memory"]["choices"] == tuple(HOST_MEMORY_MODES)
