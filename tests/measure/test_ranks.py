"""The simulator composes a real K = 2 step as the engine ran it (``measure.ranks``); train.predict.

Whether the simulator's *costs* match this machine is a timing question for ``make validate-sim`` (it
needs a quiet machine and reports the error); what a test can check anywhere is the simulator's *event
model*: replayed with the per-action and per-message costs of a real step's own event log
(``sim.replay.Replay``), it must reproduce that step's timeline — every stage's actions in the
same order and at the same times. A rule of the simulator that is not the engine's (a recompute
that waits for its gradient, a send that occupies its sender, a stage that starts a backward before
its forward) would move them.
"""

from __future__ import annotations

import pytest

from gpipe_repro.engine import Event, balance_by_cost, launch
from gpipe_repro.engine.hostmem import apply_host_memory
from gpipe_repro.engine.schedule import splits_backward, stage_actions
from gpipe_repro.measure import ranks as C
from gpipe_repro.measure.models import MODELS
from gpipe_repro.sim.costs import Link, StageCost
from gpipe_repro.sim.replay import Replay
from gpipe_repro.sim.simulate import simulate

# float rounding only: the replay adds and takes the log's own clock readings
TOLERANCE_S = 1e-6
CELLS = [
    {"M": 4, "schedule": "gpipe", "checkpoint": "never"},
    {"M": 4, "schedule": "1f1b", "checkpoint": "always"},
    {"M": 2, "schedule": "gpipe", "checkpoint": "except_last"},  # M divides the mini-batch of 32
    {"M": 4, "schedule": "zb-h1", "checkpoint": "never"},  # B and W apart; the first cell's B
    {"M": 2, "schedule": "zb-h1", "checkpoint": "always"},  # only takes its gradient (no span)
]
COMPUTED = ("forward", "backward", "recompute", "weight")


pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py


@pytest.mark.slow
def test_a_real_k2_step_replays_exactly_from_its_own_event_log():
    apply_host_memory("retain")
    vm = MODELS["transformer"]
    balance = balance_by_cost([1.0] * len(vm.meta_layers()), 2)
    per_rank = launch(C.real_rank, 2, ("transformer", 2, balance, CELLS, 1, 1), threads=1)
    for ct in C.step_times(per_rank):
        cell = ct.cell
        events = [Event(**e) for e in ct.events if e["action"] != "step"]
        replay, t0 = Replay.from_events(events, 2, cell["M"], cell["schedule"], cell["checkpoint"])
        free = Link(0.0, float("inf"))
        zero = [StageCost(0.0, 0.0, 0.0, 0)] * 2  # every cost comes from the replay
        res = simulate(
            2,
            cell["M"],
            cell["schedule"],
            cell["checkpoint"],
            zero,
            free,
            sender_busy=False,
            replay=replay,
        )
        for k in range(2):
            logged = [
                e
                for e in sorted(events, key=lambda e: e.start)
                if e.stage == k and e.action in COMPUTED
            ]
            simulated = [
                e
                for e in sorted(res.events, key=lambda e: e.start)
                if e.stage == k and e.action in COMPUTED
            ]
            # the same actions in the same order: the engine's list (remat adds recomputes) ...
            order = [(e.action, e.mb) for e in logged]
            assert order == [(e.action, e.mb) for e in simulated], (cell, k)
            # (the model's first cell under a split backward: its B takes the gradient, no span)
            silent = splits_backward(cell["schedule"]) and k == 0
            assert [
                a.mb
                for a in stage_actions(cell["schedule"], 2, cell["M"], k)
                if not (silent and a.kind == "B")
            ] == [mb for act, mb in order if act != "recompute"]
            # ... and the compute of each ending when it ended
            for lg, sm in zip(logged, simulated):
                assert abs((lg.end - t0) - sm.end) <= TOLERANCE_S, (cell, k, lg, sm)


@pytest.mark.slow
def test_train_predict_puts_the_simulated_step_beside_the_measured_one(tmp_path):
    from gpipe_repro.config.compose import compose
    from gpipe_repro.paper.sweep_rows import sweep_rows
    from gpipe_repro.runner import run

    spec = compose(
        [
            "model=tuplenet",
            "data=digits",
            "train.steps=6",
            "train.warmup_steps=2",
            "train.batch_size=16",
            "pipeline.M=2",
            "train.predict=true",
            "logger=none",
            "train.progress=false",
            "train.eval=false",
        ],
        cuda_available=False,
    )
    m = run(spec, tmp_path / "0_K1-M2")
    assert m is not None and m.status == "ok", m and m.error
    assert (
        m.source == "measured"
        and m.predicted_step_time_s is not None
        and m.predicted_step_time_s > 0
    )
    assert m.predicted_throughput == pytest.approx(16 / m.predicted_step_time_s)
    # a generous sanity bound (the machine may be loaded): the same order of magnitude
    assert 0.2 < m.predicted_step_time_s / m.step_time_s < 5
    (row,) = sweep_rows(tmp_path)[0]
    assert row.predicted_throughput == pytest.approx(m.predicted_throughput)


def test_a_cells_probes_are_the_first_ranks_and_an_unprobed_cell_has_none():
    cell = {"M": 2, "schedule": "gpipe", "checkpoint": "never"}

    def rank(times, probes, stage):
        ev = [{"action": "forward", "stage": stage}]
        return [
            {
                "cell": cell,
                "stage": stage,
                "times": times,
                "waits": [0.0, 0.01],
                "probes": probes,
                "events": ev,
            }
        ]

    (ct,) = C.step_times([rank([0.1, 0.2], [0.004, 0.005], 0), rank([0.3, 0.1], [0.0, 0.0], 1)])
    assert ct.times == [0.3, 0.2]  # the slowest rank per step
    assert ct.probes == [0.004, 0.005]  # the first rank probes, the others wait at a barrier
    assert ct.waits == pytest.approx([0.0, 0.1]) and len(ct.events) == 2
    (un,) = C.step_times([rank([0.1, 0.2], [0.0, 0.0], 0), rank([0.3, 0.1], [0.0, 0.0], 1)])
    assert un.probes == []
