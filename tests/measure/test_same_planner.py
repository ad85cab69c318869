"""The planner's validation predicts with ``gpipe-plan``'s own planner: for the same model, costs,
hardware and cap, every configuration the validation lists carries the numbers ``gpipe-plan``
ranks it with (step time, bubble, exact per-stage peaks), and both pick the same one."""

from __future__ import annotations

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.measure.models import N, ValidationModel
from gpipe_repro.measure.scenarios import Predictor
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.search import choose
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import DeviceModel, LayerProfile, MeasuredDevice

SIZES = [1, 2, 4, 8, 16, 32]
KS = [1, 2, 4]


def _key(c):
    return (c.K, c.M, c.schedule, c.checkpoint, c.balance)


@pytest.mark.parametrize("sender_busy", [False, True])
def test_the_validation_and_gpipe_plan_predict_the_same_numbers(sender_busy):
    # a run's model (the MLP on digits, RMSProp, fp32: the validation's optimiser and precision)
    spec = compose(["model.hidden=64", "optim=rmsprop"], cuda_available=False)
    model = plan_model(spec)
    params = [sum(p.numel() for p in la.parameters()) for la in model.layers]
    costs = {
        n: [LayerCost(1e-6 * p * n + 1e-4, 1e-6 * p * n, 2e-6 * p * n, 4096 * n) for p in params]
        for n in SIZES
    }
    dm = DeviceModel("test", Link(1e-4, 1e9), 2e-5, 2e-4, sender_busy)
    vm = ValidationModel(
        "mlp",
        "the run's MLP",
        lambda: model.model.layers(model.info, spec.model),
        lambda n: (model.info.example(n, "cpu"), None),
        lambda out, y: out.sum(),
    )
    pred = Predictor(vm, LayerProfile(SIZES, costs), dm, KS, 8)
    # gpipe-plan on the same device: the same calibration and measured costs
    hw = MeasuredDevice(calibration=dm)
    cap = pred.caps()["mid"]  # the validation's own cap: K = 1 without remat does not fit
    ranked = choose.rank_configurations(
        spec, model, hw, pred.costs, devices=max(KS), cap=cap, batch=N, max_m=8, top=10**6
    )
    shipped = {_key(c): c for c in ranked.shown if c.K in KS and c.replicas == 1}
    validated = pred.ranked(cap)
    assert len(validated) > 10 and set(shipped) == {_key(p.c) for p in validated}
    for p in validated:
        c = shipped[_key(p.c)]
        assert (p.step_s, p.c.bubble, p.stage_bytes) == (c.step_s, c.bubble, c.stage_bytes)
    assert _key(validated[0].c) == _key(max(shipped.values(), key=lambda c: c.samples_per_s))
    again = pred.planned(validated[0].c)  # a configuration off the list: the same numbers too
    assert (again.step_s, again.stage_bytes) == (validated[0].step_s, validated[0].stage_bytes)
