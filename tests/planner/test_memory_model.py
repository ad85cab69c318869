"""The memory model (meta device) against what the engine measures on this CPU, and its edge cases."""

from pathlib import Path

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.planner.table1 import GiB, plan_amoebanet, plan_transformer
from gpipe_repro.runner import run


def measured(tmp_path, model, data, K, M, N, checkpoint, balance, schedule="gpipe"):
    s = compose([*model, *data, f"pipeline.K={K}", f"pipeline.M={M}", f"pipeline.checkpoint={checkpoint}",
                 f"pipeline.balance=[{','.join(map(str, balance))}]", f"pipeline.schedule={schedule}",
                 f"train.batch_size={N}", "train.steps=2", "train.warmup_steps=1", "train.progress=false",
                 "train.eval=false", "optim=rmsprop", "logger=none", "device=cpu"])
    m = run(s, tmp_path)
    assert m.status == "ok", m.error
    return m.stages


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint,schedule", [("never", "gpipe"), ("always", "gpipe"), ("except_last", "1f1b")])
def test_amoebanet_plan_matches_engine_within_10_percent(tmp_path: Path, checkpoint, schedule):
    bal = [4, 8]
    stages = measured(tmp_path, ["model=amoebanet_d", "model.L=6", "model.D=16"],
                      ["data=synthetic", "data.image_size=32"], 2, 4, 16, checkpoint, bal, schedule)
    plan = plan_amoebanet(6, 16, 2, 4, checkpoint, 16, 8 * GiB, schedule, image_size=32, classes=10, balance=bal)
    for st, act, state in zip(stages, plan.activation, plan.state):
        assert act == pytest.approx(st.activation_bytes, rel=0.10), (st.stage, act, st.activation_bytes)
        assert state == st.param_bytes + st.grad_bytes + st.optimizer_bytes


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", ["never", "always"])
def test_transformer_plan_matches_engine_within_10_percent(tmp_path: Path, checkpoint):
    bal = [3, 3]
    stages = measured(tmp_path, ["model=transformer_lm", "model.L=4", "model.d=32", "model.H=64", "model.A=2"],
                      ["data=synthetic", "data.kind=tokens", "data.seq_len=16", "data.vocab=50"], 2, 2, 8,
                      checkpoint, bal)
    plan = plan_transformer(4, 2, 2, checkpoint, 8, 16 * GiB, d=32, H=64, A=2, V=50, S=16, balance=bal)
    for st, act in zip(stages, plan.activation):
        assert act == pytest.approx(st.activation_bytes, rel=0.10), (st.stage, act, st.activation_bytes)


def test_remat_shrinks_the_planned_activations_as_the_paper_says():
    never = plan_amoebanet(6, 16, 1, 8, "never", 64, 8 * GiB, image_size=32, classes=10)
    always = plan_amoebanet(6, 16, 1, 8, "always", 64, 8 * GiB, image_size=32, classes=10)
    assert always.activation[0] < never.activation[0] / 3


def test_a_budget_too_small_for_one_layer_names_the_layer():
    plan = plan_transformer(4, 2, 1, "never", 32, GiB // 4)
    assert not plan.fits
    assert "layer 0 (Embed) alone needs" in plan.oversized


def test_a_model_too_large_is_reported_not_fitting():
    plan = plan_amoebanet(18, 2048, 1, 1, "never", 128, 8 * GiB)
    assert not plan.fits and plan.param_count > 1e9


def test_batch_not_divisible_is_one_line():
    with pytest.raises(ValueError, match="M=3 does not divide the mini-batch of 32"):
        plan_transformer(4, 2, 3, "always", 32, 16 * GiB)
