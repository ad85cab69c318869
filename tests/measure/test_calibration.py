"""The one host calibration: its typed ``calibration.json`` (both experiments' files read back), the
emulation's dilation and call-cost fit, and this CPU's profile written as a file ``load_profile`` reads."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import pytest

from gpipe_repro.measure.calibration import (
    Calibration,
    Settings,
    as_emulated,
    dilated,
    emulation_dilation,
    fit_extra,
    fit_slope,
)
from gpipe_repro.measure.roofline_check import write_profile
from gpipe_repro.sim.costs import LayerCost
from gpipe_repro.sim.hardware import load_profile
from gpipe_repro.sim.roofline import HardwareProfile

REPORTS = Path(__file__).resolve().parents[2] / "reports"


@pytest.mark.parametrize("folder", ["sim", "plan"])
def test_both_experiments_calibration_files_read_as_one_typed_shape(folder, tmp_path):
    calib = Calibration.load(REPORTS / folder)
    assert calib is not None and calib.device["link"]["latency_s"] > 0
    assert calib.settings["dilation_scale"] > 0 and calib.dilations
    # the dilation of each K as the run recorded it, from the settings and the cores
    cores = calib.cores or 2  # the planner's file of #19 predates the cores field
    for K, d in calib.dilations.items():
        k = int(K.split("=")[1])
        assert d == pytest.approx(emulation_dilation(k, calib.settings["dilation_scale"], cores))
    calib.save(tmp_path)
    assert Calibration.load(tmp_path) == calib
    assert Calibration.load(tmp_path / "none") is None


def test_a_calibration_keeps_the_settings_and_leaves_out_keys_it_does_not_know(tmp_path):
    calib = Calibration(asdict(Settings(dilation_scale=2.5)), cores=2)
    assert calib.dilation(8) == 10.0 and calib.dilation(1) == 1.25  # 2.5 x 1 rank / 2 cores
    (tmp_path / "calibration.json").write_text('{"cores": 4, "from_a_later_version": 1}')
    assert Calibration.load(tmp_path) == Calibration(cores=4)


def test_this_cpus_profile_is_written_as_a_file_load_profile_reads(tmp_path):
    hw = HardwareProfile(
        "cpu", 1.1e11, 1.1e11, "fp32", 4e10, 2**34, 4.6e-5, 4e9, 1,
        ((8192.0, 0.0642), (65536.0, 0.3349), (2.1e9, 1.0)), 6.9e-6, False, 2.6e-6,
    )  # fmt: skip
    path = tmp_path / "cpu.yaml"
    write_profile(hw, path, "This CPU.\n\nCalibrated from micro-benchmarks.")
    assert path.read_text().startswith("# This CPU.\n#\n# Calibrated from micro-benchmarks.\n")
    assert load_profile(path) == hw


def test_dilation_scales_compute_not_bytes_and_the_call_cost_is_a_clamped_slope():
    c = LayerCost(0.01, 0.005, 0.02, 4096, 0.001)
    (d,) = dilated({8: [c]}, 3.0)[8]
    assert (d.forward_s, d.forward_nograd_s, d.backward_s, d.update_s) == pytest.approx(
        (0.03, 0.015, 0.06, 0.003)
    )
    assert d.out_bytes == 4096
    # B and W apart (zb-h1) dilate too, and each is its own emulated call: the overshoot added to each
    s = LayerCost(0.01, 0.005, 0.02, 4096, 0.001, backward_input_s=0.015, backward_weight_s=0.02)
    (ds,) = dilated({8: [s]}, 3.0)[8]
    assert ds.split == pytest.approx((0.045, 0.06))
    ((e,), _) = as_emulated([ds], 0.001, 0.0005)
    assert e.split == pytest.approx((0.0465, 0.0615)) and e.backward_s == pytest.approx(0.0615)
    assert as_emulated([d], 0.001, 0.0)[0][0].split == pytest.approx((0.0305, 0.0305))
    with pytest.raises(ValueError, match="dilation=0.5"):
        dilated({8: [c]}, 0.5)
    # residual = 2 ms + 150 us per call: the slope is the per-call cost, the intercept ignored
    assert fit_slope([(16, 0.002 + 16 * 150e-6), (64, 0.002 + 64 * 150e-6)]) == pytest.approx(
        150e-6
    )
    assert fit_slope([(16, 0.01), (64, 0.001)]) == 0.0  # a falling residual is no negative cost
    assert fit_slope([(20, 0.002), (20, 0.004)]) == pytest.approx(0.003 / 20)  # one x: y / x
    with pytest.raises(ValueError, match="points"):
        fit_slope([])


def test_the_per_action_cost_of_emulated_ranks_is_the_overhead_that_fits_their_steps():
    from gpipe_repro.measure.calibration import simulate_cell
    from gpipe_repro.sim.costs import Link
    from gpipe_repro.sim.measured import DeviceModel

    dm = DeviceModel("cpu", Link(1e-4, 2e9), 3e-5, 1.6e-4, False)
    costs = [LayerCost(0.004, 0.002, 0.008, 4096, 0.001)] * 4
    cells = [{"M": M, "schedule": "gpipe", "checkpoint": "never"} for M in (1, 4, 16)]

    def steps(x: float) -> list[float]:
        d = replace(dm, overhead_s=dm.overhead_s + x)
        return [simulate_cell(c, 2, [2, 2], costs, d).step_s for c in cells]

    # steps measured as if each action cost 700 us more: the fit finds it again
    assert fit_extra(steps(7e-4), steps, hi=0.01) == pytest.approx(7e-4, abs=2e-6)
    # steps faster than the simulation: no negative cost, none at all
    assert fit_extra([0.9 * t for t in steps(0.0)], steps, hi=0.01) == 0.0
    with pytest.raises(ValueError, match="measured"):
        fit_extra([], steps, hi=0.01)
    # the simulation of an emulated cell charges the K it was measured at, nothing elsewhere
    calib = Calibration(emulation_action_s={"K=4": 9e-4})
    assert calib.emulated_device(dm, 4).overhead_s == pytest.approx(3e-5 + 9e-4)
    assert calib.emulated_device(dm, 8) == dm


def test_the_emulation_dilation_grows_with_the_ranks_per_core():
    assert emulation_dilation(8, 5.0, 2) == 20.0  # 8 ranks on 2 cores
    assert emulation_dilation(4, 5.0, 2) == 10.0
    assert emulation_dilation(4, 5.0, 64) == 1.0  # a core each and more: no dilation needed
    with pytest.raises(ValueError, match="cores=0"):
        emulation_dilation(4, 5.0, 0)


def test_each_model_is_profiled_in_passes_over_every_model_and_its_median_kept(monkeypatch):
    from gpipe_repro.errors import UserError
    from gpipe_repro.measure import calibration
    from gpipe_repro.sim.measured.profile import LayerProfile

    order: list[str] = []
    speed = iter([1.0, 5.0, 1.2, 6.0, 9.0, 7.0])  # a, b, a, b, a, b: a's third pass slow

    def fake(name, sizes, repeats, seed, ref):
        order.append(name)
        s = next(speed)
        return LayerProfile(sizes, {n: [LayerCost(s, s, 2 * s, 8, 0.0)] for n in sizes}, {}, 1)

    monkeypatch.setattr(calibration, "profile_model", fake)
    s = Settings(profile_passes=3)
    got = calibration.profile_models({"a": [4], "b": [4, 8]}, s, None, lambda m: None)
    assert order == ["a", "b"] * 3  # one model's profiles lie a pass apart
    assert got["a"].costs[4][0].forward_s == 1.2  # the slow pass left out
    assert got["b"].costs[8][0].backward_s == 12.0
    assert got["b"].key["passes"] == 3
    with pytest.raises(UserError, match="profile_passes=0"):
        calibration.profile_models({"a": [4]}, Settings(profile_passes=0), None, lambda m: None)
