"""``bench/spans_vs_profile.py``: bad input is one line and exit 2; a stage's spans leave out the
receives inside them, the profile charges zb-h1's first cell the whole split backward in W, and
interleaved runs on its own cut of K·v cells."""

from __future__ import annotations

import pytest
from _shared import bench_module

from gpipe_repro.sim.costs import LayerCost


@pytest.fixture
def spv(monkeypatch):
    return bench_module("spans_vs_profile", monkeypatch)


def test_bad_input_is_one_line_and_exit_2(spv, capsys):
    assert spv.main(["--models", "resnet"]) == 2
    assert spv.main(["--schedules", "looped"]) == 2
    assert spv.main(["--M", "7"]) == 2
    assert spv.main(["--M", "1", "--schedules", "interleaved"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4
    assert "--models 'resnet'" in err[0] and "--schedules 'looped'" in err[1]
    assert "--M=7" in err[2] and "--M=1 is invalid with interleaved" in err[3]


def test_interleaved_runs_two_cells_per_rank_on_its_own_cut(spv):
    cut = [2, 2, 2, 3]
    assert spv._cell("interleaved", 8, cut) == {
        "M": 8, "schedule": "interleaved", "checkpoint": "never", "virtual_stages": 2, "balance": cut
    }  # fmt: skip
    assert spv._cell("1f1b", 8, cut) == {"M": 8, "schedule": "1f1b", "checkpoint": "never"}


def test_spans_sum_each_computing_kind_per_stage(spv):
    ev = [
        {"stage": 0, "action": "forward", "start": 0.0, "end": 1.0},
        {"stage": 0, "action": "wait", "start": 1.0, "end": 4.0},  # a receive: not computation
        {"stage": 0, "action": "weight", "start": 4.0, "end": 6.0},
        {"stage": 0, "action": "forward", "start": 6.0, "end": 6.5},
        {"stage": 1, "action": "forward", "start": 1.0, "end": 3.0},
    ]
    assert spv.spans(ev, 0) == {"forward": 1.5, "weight": 2.0}
    assert spv.spans(ev, 1) == {"forward": 2.0}


def test_the_profile_charges_what_each_schedule_runs(spv):
    costs = [
        LayerCost(1.0, 0.5, 2.0, 0, 0.0, backward_input_s=1.5, backward_weight_s=1.2),
        LayerCost(2.0, 1.0, 3.0, 0, 0.0, backward_input_s=2.0, backward_weight_s=2.5),
    ]
    assert spv.charged(costs, 4, "gpipe", first=True) == {"forward": 12.0, "backward": 20.0}
    assert spv.charged(costs, 4, "zb-h1", first=False) == {
        "forward": 12.0, "backward": 14.0, "weight": 14.8
    }  # fmt: skip
    first = spv.charged(costs, 4, "zb-h1", first=True)
    assert first["backward"] == 0.0 and first["weight"] == pytest.approx(28.8)
