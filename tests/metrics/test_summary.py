"""metrics.summary.summarize on ranks' results made by hand: a resumed run with no step left, an
interrupted run, replicas (the loss is their mean, the stages are replica 0's), and the step time as
the median of the slowest rank's timed steps."""

from __future__ import annotations

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.config.device import DeviceMemory
from gpipe_repro.metrics.summary import RankResult, summarize
from gpipe_repro.runplan.plan import RunPlan, plan_model, plan_run

MLP = [
    "model.hidden=16",
    "model.depth=2",
    "train.batch_size=8",
    "train.steps=4",
    "train.warmup_steps=1",
    "logger=none",
    "train.progress=false",
    "train.eval=false",
]


def _plan(*overrides: str) -> RunPlan:
    spec = compose([*MLP, *overrides], cuda_available=False)
    memory = DeviceMemory("a test host", 2**40, 2**40, 0, shared=True)
    return plan_run(spec, plan_model(spec), memory)


def _result(
    plan: RunPlan,
    rank: int,
    losses: list[float],
    step_times: list[float],
    first_step: int = 0,
    stopped: bool = False,
) -> RankResult:
    K = plan.spec.pipeline.K
    return RankResult(
        rank=rank,
        stage=rank % K,
        replica=rank // K,
        balance=list(plan.balance),
        costs=[1.0] * sum(plan.balance),
        balance_cost="params",
        layer_names=["layer"],
        param_count=10 * (rank % K + 1),
        param_bytes=40,
        grad_bytes=40,
        optimizer_bytes=40,
        activation_bytes=100 + rank,
        allocator_peak_bytes=None,
        losses=losses,
        step_times=step_times,
        samples=[8] * len(step_times),
        tokens=[],
        first_step=first_step,
        stopped=stopped,
        events=[],
        eval=None,
        threads=1,
        device_name="cpu",
        host_memory="system",
    )


def test_a_resumed_run_with_no_step_left_keeps_its_losses_and_times_nothing():
    plan = _plan()
    earlier = [2.0, 1.5, 1.25, 1.0]
    m, events = summarize(plan, [_result(plan, 0, earlier, [], first_step=4)])
    assert m.status == "ok" and m.error is None
    assert m.losses == earlier and m.step_times_s == []
    assert m.step_time_s is None and m.throughput is None  # nothing was timed: no number made up
    assert m.bubble_fraction == 0.0 and events == []


@pytest.mark.parametrize("first_step,ran,done", [(0, 2, 2), (2, 1, 3)])
def test_a_stopped_run_is_interrupted_after_the_step_it_reached(first_step, ran, done):
    plan = _plan("pipeline.K=2", "pipeline.M=2")
    losses = [1.0] * (first_step + ran)
    results = [
        _result(plan, 0, [], [0.1] * ran, first_step, stopped=True),
        _result(plan, 1, losses, [0.1] * ran, first_step, stopped=True),
    ]
    m, _ = summarize(plan, results)
    assert m.status == "interrupted"
    assert m.error == f"stopped by SIGINT/SIGTERM after step {done} of 4"
    assert m.losses == losses


def test_replicas_average_the_loss_and_the_stages_are_replica_0s():
    plan = _plan("pipeline.K=2", "pipeline.M=2", "pipeline.replicas=2")
    times = {
        0: [9.0, 1.0, 2.0, 3.0],
        1: [9.0, 1.0, 1.0, 1.0],
        2: [9.0, 4.0, 1.0, 1.0],
        3: [1.0] * 4,
    }
    losses = {0: [], 1: [1.0, 2.0, 3.0, 4.0], 2: [], 3: [3.0, 4.0, 5.0, 6.0]}
    results = [_result(plan, r, losses[r], times[r]) for r in (3, 1, 0, 2)]  # any order
    m, _ = summarize(plan, results)
    assert m.status == "ok" and m.world_size == 4
    assert m.losses == [2.0, 3.0, 4.0, 5.0]  # the mean over the replicas' last stages
    assert [s.stage for s in m.stages] == [0, 1]
    assert [s.activation_bytes for s in m.stages] == [100, 101]  # ranks 0 and 1: replica 0
    assert m.model.param_count == 10 + 20
    # per step, the slowest rank; the step time is the median of the steps after the warm-up
    assert m.step_times_s == [9.0, 4.0, 2.0, 3.0]
    assert m.step_time_s == 3.0
    assert m.throughput == pytest.approx(3 * 8 / (4.0 + 2.0 + 3.0))  # samples over timed seconds


def test_a_run_that_runs_states_its_schedules_ideal_bubble_and_a_stopped_one_none():
    from gpipe_repro.engine.schedule import ideal_bubble
    from gpipe_repro.metrics.summary import base_metrics

    spec = compose(["pipeline.K=2", "pipeline.M=4"], cuda_available=False)
    assert base_metrics(spec).bubble_ideal == ideal_bubble("gpipe", 2, 4) == pytest.approx(1 / 5)
    assert base_metrics(spec, "failed", "boom").bubble_ideal is None
    assert base_metrics(spec, "interrupted", "stopped").bubble_ideal is None
