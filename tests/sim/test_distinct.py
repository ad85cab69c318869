"""Profiling a model planned on meta one distinct layer at a time; extrapolating measured costs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpipe_repro.sim.costs import LayerCost, Link, StageCost
from gpipe_repro.sim.measured.costs import MeasuredCosts
from gpipe_repro.sim.measured.distinct import layer_groups, profile_planned
from gpipe_repro.sim.measured.profile import LayerProfile
from gpipe_repro.sim.simulate import simulate

pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py


def _meta_stack() -> list[nn.Module]:
    with torch.device("meta"):
        return [
            nn.Linear(16, 64),
            *[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(5)],
            nn.Linear(64, 10),
        ]


def _example(n: int, device: str = "cpu") -> torch.Tensor:
    return torch.empty(n, 16, device="meta") if device == "meta" else torch.randn(n, 16)


def _targets(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


def test_identical_layers_form_one_group_and_first_and_last_are_their_own():
    rep, inputs = layer_groups(_meta_stack(), _example)
    assert rep == [0, 1, 1, 1, 1, 1, 6]
    assert [tuple(x.shape) for x in inputs] == [(2, 16)] + [(2, 64)] * 6


def test_a_meta_model_is_profiled_one_representative_per_group_and_left_on_meta():
    layers = _meta_stack()
    logged: list[str] = []
    prof = profile_planned(
        layers, _example, _targets, [2, 8], loss_fn=F.cross_entropy, repeats=2, log=logged.append
    )
    assert prof.distinct == 3 and len(logged) == 3  # first, one of the five, last
    assert all(p.device.type == "meta" for layer in layers for p in layer.parameters())
    for n in (2, 8):
        cs = prof.costs[n]
        assert len(cs) == 7 and len({id(c) for c in cs[1:6]}) == 1  # one record shared by the group
        assert all(c.forward_s > 0 and c.backward_s > 0 and c.update_s > 0 for c in cs)
        assert [c.out_bytes for c in cs] == [n * 64 * 4] * 6 + [n * 10 * 4]
    again = profile_planned(layers, _example, _targets, [2, 8], loss_fn=F.cross_entropy, repeats=2)
    assert again.source == "cache" and again.costs[2][3].forward_s == prof.costs[2][3].forward_s


def _profile(sizes: list[int], per_sample: dict[int, float]) -> LayerProfile:
    costs = {
        n: [LayerCost(per_sample[n] * n, per_sample[n] * n, 2 * per_sample[n] * n, 100 * n, 0.5)]
        for n in sizes
    }
    return LayerProfile(sizes, costs)


def test_extrapolation_beyond_the_profile():
    prof = _profile([1, 2], {1: 1.0, 2: 0.75})  # per-sample cost falls from 1 to 0.75
    lin = MeasuredCosts(prof, Link(0.0, 1.0), extrapolate="linear")
    prop = MeasuredCosts(prof, Link(0.0, 1.0), extrapolate="proportional")
    assert lin.layer_costs(8)[0].forward_s == pytest.approx(
        1.0 + 0.5 * 7
    )  # the line through 1 and 2
    assert prop.layer_costs(8)[0].forward_s == pytest.approx(0.75 * 8)  # the per-sample cost of 2
    for c in (lin, prop):
        got = c.layer_costs(8)[0]
        assert got.update_s == 0.5 and got.out_bytes == 800  # never scales / always exact
        assert c.layer_costs(2)[0].forward_s == pytest.approx(1.5)  # exact at a measured size
    one = MeasuredCosts(_profile([4], {4: 0.25}), Link(0.0, 1.0))
    assert one.layer_costs(2)[0].backward_s == pytest.approx(2 * 0.25 * 2)  # one size: proportional
    with pytest.raises(ValueError, match="extrapolate='cubic' is unknown"):
        MeasuredCosts(prof, Link(0.0, 1.0), extrapolate="cubic")


def test_the_step_overhead_is_paid_once_per_stage_and_step():
    free = Link(0.0, float("inf"))
    st = [StageCost(1.0, 1.0, 2.0, 0)] * 2
    base = simulate(2, 4, "gpipe", "never", st, free)
    more = simulate(2, 4, "gpipe", "never", st, free, step_overhead_s=0.25)
    assert more.step_s == pytest.approx(base.step_s + 0.25)
    assert more.busy_s == base.busy_s  # not compute
    with pytest.raises(ValueError, match="step_overhead_s=-1"):
        simulate(2, 4, "gpipe", "never", st, free, step_overhead_s=-1)
