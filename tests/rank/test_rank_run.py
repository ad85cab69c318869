"""A rank's run (``rank.RankRun``): what its loop measures and when, through the device interface."""

from __future__ import annotations

import time

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.data.synthetic import SyntheticImages
from gpipe_repro.engine.topology import single_process
from gpipe_repro.rank import balance as rank_balance
from gpipe_repro.rank import run as rank_run
from gpipe_repro.runner import run
from gpipe_repro.runplan.plan import choose_balance, plan_model

MLP = [
    "model.hidden=16",
    "model.depth=4",
    "data=synthetic",
    "train.batch_size=16",
    "logger=none",
    "train.progress=false",
]


class Recorder:
    """A device that does nothing but remember what it was asked, in order."""

    type = "cpu"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def count(self) -> int:
        return 0

    def synchronize(self) -> None:
        self.log.append("sync")

    def reset_peak(self) -> None:
        self.log.append("reset")

    def peak_bytes(self) -> int:
        self.log.append("peak")
        return 123

    def name(self) -> str:
        return "recorder"


def test_the_last_stage_draws_the_targets_without_the_inputs():
    data = SyntheticImages(3, 8, 10)
    full = next(data.batches(2, 16, seed=1))
    x, y = next(data.batches(2, 16, seed=1, need_inputs=False))
    assert x is None and y.equal(full[1])


def test_batches_are_drawn_outside_the_clock(tmp_path, monkeypatch):
    slow = SyntheticImages.train_batch

    def train_batch(self, *a):
        time.sleep(0.3)
        return slow(self, *a)

    monkeypatch.setattr(SyntheticImages, "train_batch", train_batch)
    m = run(compose([*MLP, "train.steps=3", "train.eval=false"], cuda_available=False), tmp_path)
    assert m.status == "ok" and max(m.step_times_s) < 0.3, m.step_times_s


def test_the_peak_is_reset_after_warm_up_and_read_before_evaluation(tmp_path, monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(rank_run, "device_for", lambda kind, index=0: Recorder(log))
    evaluate = rank_run.RankRun.evaluate

    def evaluating(self):
        log.append("evaluate")
        return evaluate(self)

    monkeypatch.setattr(rank_run.RankRun, "evaluate", evaluating)
    spec = compose([*MLP, "train.steps=4", "train.warmup_steps=2"], cuda_available=False)
    m = run(spec, tmp_path)
    assert m.status == "ok"
    steps = [e for e in log if e != "sync"]
    assert steps == ["reset", "reset", "peak", "evaluate"]  # at the start, after 2 steps
    assert log.index("reset", 1) == 1 + 2 * 2  # two synchronised steps before the second reset
    assert m.stages[0].peak_memory_bytes == 123 and m.stages[0].memory_source == "cuda_allocator"


def test_layer_times_are_taken_between_the_devices_synchronisations():
    spec = compose([*MLP, "pipeline.balance_by=time"], cuda_available=False)
    model = plan_model(spec)
    log: list[str] = []
    times = rank_balance.measure_layer_times(
        model, 4, single_process(), Recorder(log), spec.seed, budget_s=60
    )
    assert sorted(times) == list(range(len(model.layers))) and all(t > 0 for t in times.values())
    per_layer = 2 * (rank_balance.REPEATS + 1)
    assert log == ["sync"] * per_layer * len(model.layers)


@pytest.mark.slow
def test_balance_by_time_is_measured_by_the_ranks_and_agreed(tmp_path):
    spec = compose(
        [*MLP, "pipeline.K=2", "pipeline.M=2", "pipeline.balance_by=time", "train.steps=2"],
        cuda_available=False,
    )
    m = run(spec, tmp_path)
    assert m.status == "ok", m.error
    assert m.plan.balance_cost == "time (measured by the ranks on cpu)"
    assert len(m.layer_costs) == len(plan_model(spec).layers)
    assert m.pipeline.balance == choose_balance(m.layer_costs, 2)
