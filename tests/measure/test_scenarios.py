"""The planner's side of the validation on synthetic costs (nothing timed): the caps' regimes, the
list under a cap, and the rules of thumb applied to the pick."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.models import N, model
from gpipe_repro.measure.scenarios import Predictor, rule_configs
from gpipe_repro.search.space import Candidate, _coef_of, _hold
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import DeviceModel, LayerProfile
from gpipe_repro.sim.measured.device import host_cores

SIZES = [1, 2, 4, 8, 16, 32]


@pytest.fixture(scope="module")
def pred() -> Predictor:
    vm = model("imbalanced")
    params = [sum(p.numel() for p in la.parameters()) for la in vm.meta_layers()]
    # a layer's cost grows with its parameters and the micro-batch (1 us per parameter-sample)
    costs = {
        n: [LayerCost(1e-6 * p * n + 1e-4, 1e-6 * p * n, 2e-6 * p * n, 4096 * n) for p in params]
        for n in SIZES
    }
    dm = DeviceModel("test", Link(1e-4, 1e9), 2e-5, 2e-4, False)
    return Predictor(vm, LayerProfile(SIZES, costs), dm, [1, 2, 4], 8)


def test_caps_run_from_everything_fits_to_the_naive_config_out(pred):
    caps = pred.caps()
    assert caps["tight"] < caps["mid"] < pred.naive() < caps["loose"]
    loose, tight = pred.ranked(caps["loose"]), pred.ranked(caps["tight"])
    assert any(p.c.K == 1 and p.c.M == 1 and p.c.checkpoint == ("never",) for p in loose)
    assert not any(p.c.K == 1 and p.c.M == 1 and p.c.checkpoint == ("never",) for p in tight)
    assert tight and len(tight) < len(loose)
    assert max(max(p.stage_bytes) for p in tight) <= caps["tight"]


def test_least_is_the_smallest_cap_under_which_the_planner_lists_anything(pred):
    # the fit test bounds memory from above: below ``least`` the list is empty, even where a
    # configuration's exact peak is lower (a tight cap there left a validate-plan scenario empty)
    least = pred.least()
    assert pred.ranked(least) and not pred.ranked(least - 1)
    assert least >= min(max(p.stage_bytes) for p in pred.ranked(2**62))


def test_the_list_is_best_first_within_the_cap_and_the_measurable_space(pred):
    cap = pred.caps()["mid"]
    ranked = pred.ranked(cap)
    steps = [p.step_s for p in ranked]
    assert steps == sorted(steps)
    assert all(max(p.stage_bytes) <= cap for p in ranked)
    assert {p.c.K for p in ranked} <= {1, 2, 4} and all(p.c.replicas == 1 for p in ranked)
    assert all(p.c.M <= 8 and N % p.c.M == 0 for p in ranked)


def test_rules_change_one_choice_of_the_pick(pred):
    cap = pred.caps()["loose"]
    pick = pred.ranked(cap)[0]
    rules = rule_configs(pred, pick, cap)
    K, L = pick.c.K, len(pred.layers)
    eq = rules["equal_layers"].c.balance
    assert sum(eq) == L and max(eq) - min(eq) <= 1 and len(eq) == K
    assert rules["M=4K"].c.M == 4 * K and rules["M=4K"].c.micro_batch == N // (4 * K)
    assert rules["remat_always"].c.checkpoint == ("always",) * K
    assert rules["remat_always"].c.balance == pick.c.balance
    for r in rules.values():  # at the loose cap every rule fits
        assert max(r.stage_bytes) <= cap


def test_the_search_bound_is_above_every_exact_peak_and_within_40_percent(pred):
    # the fit test (search.space) bounds each stage from above: never below the exact plan (a
    # configuration that fits is never listed over the cap by it), and, counting only what layers up
    # to m saved while m's backward runs, within 1.4x on this model (1.84x when it added every
    # layer's saved tensors, every inner input and the largest working set)
    space = pred._full
    ratios = []
    for p in pred.uncapped:
        c, start = p.c, 0
        if c.virtual_stages > 1:  # several cells per stage: bounded per cell (tests/search)
            continue
        if c.schedule == "zb-h1" and "always" in c.checkpoint:
            # known gap (#39): the closed form undercounts zb-h1's first cell under remat (its whole
            # split backward at W) by up to 1 / 0.76 on this model; the exact plan of the shown
            # rows has the last word (search.holds)
            continue
        for k, (b, exact) in enumerate(zip(c.balance, p.stage_bytes, strict=True)):
            co = _coef_of(c.checkpoint[k], _hold(c.schedule, c.K, c.M, k))
            ratios.append((c.schedule, space._bytes(co, c.micro_batch)[start, start + b] / exact))
            start += b
    assert min(r for _, r in ratios) >= 1.0
    # within 1.4x for the paper's schedules; zb-h1 (never) is bounded, more loosely (#39)
    assert max(r for sc, r in ratios if sc in ("gpipe", "1f1b")) <= 1.4, ratios


def test_configurations_run_for_real_pay_the_hosts_sharing_emulated_ones_do_not(pred):
    # K x replicas <= 2 run as real ranks on this host's cores (a receive costs them
    # ``shared_message_s`` more: so much here that the slack of the stage that waits cannot hide
    # it); K = 4 runs emulated, standing for separate devices
    from dataclasses import replace as _replace

    shared = Predictor(
        pred.vm, pred.costs.profile, _replace(pred.dm, shared_message_s=0.5), [1, 2, 4], 8
    )
    assert (shared.shared.link.shared_s, shared.shared.link.cores) == (0.5, host_cores())
    listed = {(p.c.K, p.c.M): p.c for p in pred.ranked(2**62)}
    two, four, one = listed[(2, 8)], listed[(4, 8)], listed[(1, 8)]
    assert shared.simulate(two)[0] > pred.simulate(two)[0] + 0.1
    assert shared.simulate(four)[0] == pred.simulate(four)[0]
    assert shared.simulate(one)[0] == pred.simulate(one)[0]  # one stage sends nothing

    # the list ranks them so too
    def key(c: Candidate) -> tuple[object, ...]:
        return c.K, c.M, c.schedule, c.checkpoint, c.balance

    steps = {key(p.c): p.step_s for p in shared.ranked(2**62)}
    assert steps[key(two)] == pytest.approx(shared.simulate(two)[0])
