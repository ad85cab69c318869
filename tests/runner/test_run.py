"""One run through the runner, in this process: failures, divergence and the plan, as metrics."""

import json

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run
from gpipe_repro.runplan.plan import plan_model

FAST = [
    "train.steps=4",
    "train.warmup_steps=1",
    "logger=none",
    "model.hidden=32",
    "model.depth=2",
    "train.progress=false",
    "train.eval=false",
]


def test_a_diverging_loss_is_reported_as_diverged_not_ok(tmp_path):
    m = run(
        compose(
            [*FAST, "train.steps=12", "optim=sgd", "optim.lr=1e6", "optim.momentum=0"],
            cuda_available=False,
        ),
        tmp_path,
    )
    assert m.status == "diverged", (m.status, m.error)
    assert "the loss diverged at step" in m.error and "optim.lr=1000000.0" in m.error
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["status"] == "diverged" and saved["losses"]  # the steps it ran are kept


def test_k_beyond_the_layers_is_named_in_config_terms(tmp_path):
    m = run(compose([*FAST, "pipeline.K=5"], cuda_available=False), tmp_path)
    assert (
        m.status == "failed"
        and m.error == "pipeline.K=5 exceeds the model's 4 layers; allowed: 1..4"
    )


def test_the_plan_builds_on_meta_without_memory():
    plan = plan_model(
        compose(
            [
                "model=amoebanet_d",
                "model.L=18",
                "model.D=256",
                "data=synthetic",
                "data.image_size=224",
                "data.classes=1000",
            ],
            cuda_available=False,
        )
    )
    assert len(plan.layers) == 24
    assert all(p.device.type == "meta" for layer in plan.layers for p in layer.parameters())
