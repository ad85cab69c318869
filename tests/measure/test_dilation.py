"""An emulated configuration's step back on the device's time scale (nothing timed): the factor is
the simulation's ratio of the two scales, so pure compute scales by exactly 1 / dilation and what
the emulation adds per layer call (the sleep's overshoot, the call's CPU) and per action is taken
out with it."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.models import N
from gpipe_repro.measure.planner import device_scale
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import DeviceModel, LayerProfile

M = 4
KEY = (4, M, "gpipe", ("never", "always", "never", "never"), (2, 2, 2, 2))


def _profile() -> LayerProfile:
    n = N // M
    costs = [LayerCost(1e-3 * (i + 1), 5e-4 * (i + 1), 2e-3 * (i + 1), 0) for i in range(8)]
    return LayerProfile([n], {n: costs})


def test_pure_compute_comes_back_by_exactly_the_dilation():
    dm = DeviceModel("test", Link(0.0, 1e18), 0.0, 0.0, False)
    assert device_scale(KEY, _profile(), dm, 20.0, 0.0, 0.0) == pytest.approx(1 / 20)


def test_the_emulations_own_costs_are_taken_out_with_the_dilation():
    dm = DeviceModel("test", Link(1e-4, 1e9), 2e-5, 2e-4, False)
    plain = device_scale(KEY, _profile(), dm, 20.0, 0.0, 0.0)
    # the transfers and the engine's overheads do not dilate: the step grows less than 20x
    assert 1 / 20 < plain < 1 / 10
    # a sleep that overshoots, a call that costs CPU: the emulated step is longer, the factor smaller
    called = device_scale(KEY, _profile(), dm, 20.0, 2e-4, 8e-5)
    assert called < plain
    # what K emulated ranks pay per action (``emulation_action_s``) is taken out too
    assert device_scale(KEY, _profile(), dm, 20.0, 2e-4, 8e-5, 1e-3) < called
