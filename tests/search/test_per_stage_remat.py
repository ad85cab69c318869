"""pipeline.checkpoint as one mode per stage (issue #19 item 3): through the engine the losses stay
bit-identical, and the run's plan counts each stage's own mode."""

from __future__ import annotations

from gpipe_repro.config.compose import compose
from gpipe_repro.config.device import DeviceMemory
from gpipe_repro.runner import run
from gpipe_repro.runplan.plan import plan_model, plan_run

SMALL = [
    "model.hidden=16",
    "model.depth=2",
    "train.batch_size=16",
    "pipeline.M=4",
    "train.steps=3",
    "train.warmup_steps=1",
    "train.progress=false",
    "train.eval=false",
    "logger=none",
]


def test_a_per_stage_vector_keeps_the_losses_bit_identical(tmp_path):
    one = run(compose([*SMALL, "pipeline.checkpoint=never"], cuda_available=False), tmp_path / "a")
    two = run(
        compose(
            [*SMALL, "pipeline.K=2", "pipeline.checkpoint=[always,never]"], cuda_available=False
        ),
        tmp_path / "b",
    )
    assert one.status == two.status == "ok", (one.error, two.error)
    assert two.pipeline is not None and two.pipeline.checkpoint == "always,never"
    assert len(one.losses) == 3 and two.losses == one.losses


def test_the_run_plan_counts_each_stage_own_mode():
    memory = DeviceMemory("test", 2**40, 2**40, 0)

    def stages(mode: str) -> list[int]:
        spec = compose(
            [*SMALL, "pipeline.K=2", "pipeline.balance=[2,2]", f"pipeline.checkpoint={mode}"]
        )
        return plan_run(spec, plan_model(spec), memory).planned_bytes()

    never, always, mixed = stages("never"), stages("always"), stages("[never,always]")
    assert never[1] != always[1]
    assert mixed == [never[0], always[1]]
