"""What a message costs ranks that share the host's cores: its fit, where the simulator charges it, and
the calibration's real K = 2 steps of spinning stages."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.calibration import simulate_cell
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import DeviceModel
from gpipe_repro.sim.measured.sharing import fit_per_message, measure_sharing


def test_the_fit_is_the_residual_per_message_a_stage_handles():
    # residual = 1 ms + 50 us per message, a stage handling 2M messages at K = 2
    points = [(M, 0.1 + 1e-3 + 2 * M * 50e-6, 0.1) for M in (2, 8, 32)]
    slope, intercept = fit_per_message(points)
    assert slope == pytest.approx(50e-6) and intercept == pytest.approx(1e-3)
    # measured faster than simulated, more so with M: no negative cost
    assert fit_per_message([(2, 0.1, 0.1), (32, 0.1, 0.2)])[0] == 0.0
    assert fit_per_message([(4, 0.108, 0.1)]) == (pytest.approx(1e-3), 0.0)
    with pytest.raises(ValueError, match="points is empty"):
        fit_per_message([])


def _dm(shared: float) -> DeviceModel:
    return DeviceModel("test", Link(1e-5, 1e9, 1, 2e-5, 3e-5), 1e-5, 1e-4, False, 0.0, shared)


def test_ranks_sharing_the_host_pay_it_on_every_send_and_receive_emulated_ranks_do_not():
    dm = _dm(100e-6)
    assert dm.ranks_link().send_call_s == pytest.approx(120e-6)
    assert dm.ranks_link().recv_call_s == pytest.approx(130e-6)
    assert dm.link.send_call_s == 2e-5  # what an idle ping-pong measured stays as it was
    cell = {"M": 8, "schedule": "gpipe", "checkpoint": "never"}
    costs = [LayerCost(1e-3, 1e-3, 2e-3, 4096) for _ in range(4)]
    real = simulate_cell(cell, 2, [2, 2], costs, dm, shared=True).step_s
    emulated = simulate_cell(cell, 2, [2, 2], costs, dm).step_s
    undone = simulate_cell(cell, 2, [2, 2], costs, dm, variant="no_sharing", shared=True).step_s
    assert undone == emulated == simulate_cell(cell, 2, [2, 2], costs, _dm(0.0), shared=True).step_s
    # 2M = 16 messages on each stage: the step grows by at least some of their cost, at most all
    assert 8 * 100e-6 < real - emulated <= 2 * 16 * 100e-6 + 1e-9


@pytest.mark.slow
def test_the_calibration_runs_real_spinning_k2_steps():
    fwd = bwd = 0.5e-3
    fit = measure_sharing(
        Link(5e-5, 4e9, 1, 2e-5, 2e-5), 1e-5, 1e-4, Ms=(1, 4), fwd_s=fwd, bwd_s=bwd
    )
    assert [M for M, _, _ in fit.points] == [1, 4]
    for M, measured, simulated in fit.points:
        # each stage spins M forwards and M backwards: no step can be shorter than that
        assert measured >= M * (fwd + bwd) and simulated >= M * (fwd + bwd)
    assert fit.shared_message_s >= 0.0
