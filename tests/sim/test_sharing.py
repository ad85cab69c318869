"""What a message costs ranks that share the host's cores: its fit, which messages the simulator
charges it to (every receive of ranks that fill the cores), and the calibration's real K = 2 steps
of spinning stages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gpipe_repro.measure.calibration import simulate_cell
from gpipe_repro.sim.costs import LayerCost, Link, StageCost
from gpipe_repro.sim.measured import DeviceModel
from gpipe_repro.sim.measured.sharing import fit_shared, measure_sharing
from gpipe_repro.sim.simulate import SimResult, simulate


def _spin_steps(link: Link, Ms: tuple[int, ...]) -> Callable[[float], list[float]]:
    stages = [StageCost(1e-3, 1e-3, 1e-3, 4096), StageCost(1e-3, 1e-3, 1e-3, 0)]

    def steps(cost: float) -> list[float]:
        shared = replace(link, shared_s=cost, cores=2)
        return [
            simulate(2, M, "gpipe", "never", stages, shared, sender_busy=False).step_s for M in Ms
        ]

    return steps


def test_the_fit_is_the_cost_whose_simulated_steps_leave_a_flat_residual():
    steps = _spin_steps(Link(1e-5, 1e9, 1, 2e-5, 3e-5), (2, 8, 32))
    # measured: the steps at 300 us per charged message, plus 1 ms per step whatever M
    measured = [t + 1e-3 for t in steps(300e-6)]
    cost, fixed = fit_shared(measured, steps)
    assert cost == pytest.approx(300e-6, rel=1e-3) and fixed == pytest.approx(1e-3, rel=1e-3)
    # measured no slower than the idle link, less so with M: no negative cost
    assert fit_shared([t - 1e-4 * i for i, t in enumerate(steps(0.0))], steps)[0] == 0.0
    with pytest.raises(ValueError, match="measured is empty"):
        fit_shared([], steps)


def _dm(shared: float) -> DeviceModel:
    return DeviceModel("test", Link(1e-5, 1e9, 1, 2e-5, 3e-5), 1e-5, 1e-4, False, 0.0, shared)


def test_ranks_sharing_the_host_pay_it_and_emulated_ones_do_not():
    dm = _dm(100e-6)
    link = dm.ranks_link(2)
    assert (link.shared_s, link.cores) == (100e-6, 2)
    assert (link.send_call_s, link.recv_call_s) == (2e-5, 3e-5)  # the idle ping-pong's, as measured
    cell = {"M": 8, "schedule": "gpipe", "checkpoint": "never"}
    costs = [LayerCost(1e-3, 1e-3, 2e-3, 4096) for _ in range(4)]
    real = simulate_cell(cell, 2, [2, 2], costs, dm, shared=True).step_s
    emulated = simulate_cell(cell, 2, [2, 2], costs, dm).step_s
    undone = simulate_cell(cell, 2, [2, 2], costs, dm, variant="no_sharing", shared=True).step_s
    assert undone == emulated == simulate_cell(cell, 2, [2, 2], costs, _dm(0.0), shared=True).step_s
    # 2M = 16 messages on each stage: the step grows by some of their cost, at most all of it
    assert 4 * 100e-6 < real - emulated <= 2 * 16 * 100e-6 + 1e-9
    free = simulate_cell(cell, 2, [2, 2], costs, dm, variant="no_calls", shared=True).step_s
    assert free < emulated  # posting for free: neither the calls nor the sharing


def test_every_receive_pays_it_and_no_send_where_the_ranks_fill_the_cores():
    link = Link(1e-5, 1e9, 1, 2e-5, 2e-5)
    stage = StageCost(1e-3, 1e-3, 1e-3, 4096)

    def step(shared: float, cores: int, M: int = 1, K: int = 2) -> SimResult:
        return simulate(
            K, M, "gpipe", "never", [stage] * K, replace(link, shared_s=shared, cores=cores),
            sender_busy=False,
        )  # fmt: skip

    # M = 1: each receive is posted a millisecond or more before its message arrives, so the
    # receiver waits anyway and pays nothing more; the two sends, on the critical path, neither
    assert step(1e-3, 2).step_s == step(0.0, 2).step_s
    # M = 8: stage 1's activations arrive as it reaches their receives (lockstep): each of its 7
    # later forwards pays it, one after the other
    assert step(1e-3, 2, M=8).step_s - step(0.0, 2, M=8).step_s >= 7e-3
    # a core to spare for every rank's messages (K < cores): nothing charged, however busy the ranks
    assert step(1e-3, 4, M=8).step_s == step(0.0, 4, M=8).step_s
    assert step(1e-3, 3, M=8, K=3).step_s > step(0.0, 3, M=8, K=3).step_s
    with pytest.raises(ValueError, match="cores"):
        step(1e-3, 0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("M", [1, 4, 16])
def test_the_charge_never_shortens_a_step_where_a_blocked_receiver_wakes_late(schedule, M):
    # a wake-up that grows with the time blocked (the calibration's kind, with its post-idle
    # penalty): the charge must not shorten a wait, and with it the wake-up
    wake = ((5e-4, 1e-5), (2e-3, 3e-4), (8e-3, 1.2e-3), (3e-2, 1.5e-3))
    link = Link(1e-4, 1e9, 1, 5e-5, 4e-5, wake)
    stages = [StageCost(2e-3, 2e-3, 4e-3, 4096), StageCost(1e-3, 1e-3, 2e-3, 0)]

    def step(shared: float) -> float:
        lk = replace(link, shared_s=shared, cores=2)
        return simulate(2, M, schedule, "never", stages, lk, sender_busy=False).step_s

    base = step(0.0)
    assert all(step(c) >= base - 1e-12 for c in (1e-4, 5e-4, 2e-3))


@pytest.mark.slow
def test_the_calibration_runs_real_spinning_k2_steps():
    fwd = bwd = 0.5e-3
    # two rounds (launches) of the default five: the rounds' median is still taken, and what is
    # checked holds for every round's steps
    fit = measure_sharing(
        Link(5e-5, 4e9, 1, 2e-5, 2e-5), 1e-5, 1e-4, Ms=(1, 4), fwd_s=fwd, bwd_s=bwd, rounds=2
    )
    assert [M for M, _, _ in fit.points] == [1, 4]
    for M, measured, simulated in fit.points:
        # each stage spins M forwards and M backwards: no step can be shorter than that
        assert measured >= M * (fwd + bwd) and simulated >= M * (fwd + bwd)
    assert fit.shared_message_s >= 0.0
