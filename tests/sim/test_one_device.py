"""``hardware=measured`` on a host with one GPU (issue #34): nccl cannot pair two ranks on one device,
so its link is never measured; a K = 1 run is costed all the same (``train.predict``, the ``sim``
backend), and K >= 2 is refused in one line. On this CPU the "one device" is the CPU with its link
measurement made impossible (``link_pairs`` says why, ``measure_link`` raises if called)."""

from __future__ import annotations

import pytest
import torch

import gpipe_repro.sim.measured as measured
from gpipe_repro.config.compose import compose
from gpipe_repro.errors import UserError
from gpipe_repro.runner import run
from gpipe_repro.sim.costs import stage_costs
from gpipe_repro.sim.measured import device as device_mod
from gpipe_repro.sim.measured.link import LinkUnmeasured, UnmeasuredLink, link_pairs
from gpipe_repro.sim.simulate import simulate

pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py: one thread, own cache
WHY = "one device here: nccl cannot pair two ranks on one"
MLP = ["model.hidden=16", "model.depth=4", "logger=none", "train.progress=false"]


@pytest.fixture
def one_device(monkeypatch):
    """This host cannot pair two ranks: the link is never measured (calling it would fail)."""

    def never(*a, **k):
        raise AssertionError("measure_link called on a host that cannot pair two ranks")

    monkeypatch.setattr(device_mod, "link_pairs", lambda kind: WHY)
    monkeypatch.setattr(device_mod, "measure_link", never)
    monkeypatch.setattr(measured, "_CALIBRATION", {})  # no calibration of an earlier test
    monkeypatch.setattr(measured, "_COSTS", {})


def test_one_device_is_calibrated_without_its_link_and_cached_so(one_device):
    dm = device_mod.device_model("cpu")
    assert isinstance(dm.link, UnmeasuredLink) and not dm.link_measured
    assert dm.overhead_s > 0  # the rest is measured on the device all the same
    again = device_mod.device_model("cpu")  # from the cache: still no link
    assert again.source == "cache" and isinstance(again.link, UnmeasuredLink)
    assert measured.MeasuredDevice("cpu", calibration=dm).record()["link_latency_s"] is None


def test_k1_is_costed_and_k2_refused_in_one_line_on_the_unmeasured_link(one_device):
    dm = device_mod.device_model("cpu")
    st = stage_costs(_layers(), [2])  # two layers, one stage
    one = simulate(1, 4, "gpipe", "never", st, dm.link, dm.overhead_s, sender_busy=False)
    assert one.step_s > 0
    two = stage_costs(_layers(), [1, 1])
    with pytest.raises(LinkUnmeasured, match=WHY):
        simulate(2, 4, "gpipe", "never", two, dm.link, dm.overhead_s, sender_busy=False)
    with pytest.raises(LinkUnmeasured):  # data-parallel replicas all-reduce over it too
        dm.link.allreduce_s(1000, 2)
    assert dm.link.allreduce_s(1000, 1) == 0.0


def _layers():
    from gpipe_repro.sim.costs import LayerCost

    return [LayerCost(1e-3, 8e-4, 2e-3, 4096), LayerCost(1e-3, 8e-4, 2e-3, 4096)]


@pytest.mark.slow
def test_train_predict_at_k1_needs_no_link(one_device, tmp_path):
    """On the old code the prediction measured the link first, failed, and left the fields empty."""
    spec = compose(
        [*MLP, "train.steps=4", "train.warmup_steps=1", "train.predict=true", "train.eval=false"],
        cuda_available=False,
    )
    m = run(spec, tmp_path / "run")
    assert m is not None and m.status == "ok", m and m.error
    assert m.predicted_step_time_s is not None and m.predicted_step_time_s > 0


def test_the_sim_backend_at_k1_on_one_device_runs(one_device, tmp_path):
    spec = compose(
        [
            *MLP,
            "backend=sim",
            "hardware=measured",
            "train.steps=2",
            "sim.profile_max_micro_batch=4",
        ],
        cuda_available=False,
    )
    m = run(spec, tmp_path / "run")
    assert m is not None and m.status == "ok", m and m.error
    assert m.hardware["link_latency_s"] is None and m.step_time_s > 0


def test_a_cpu_pairs_its_ranks_and_one_gpu_does_not(monkeypatch):
    assert link_pairs("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "nccl cannot pair two ranks" in (link_pairs("cuda") or "")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert link_pairs("cuda") is None


def test_k2_on_one_gpu_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError) as err:  # the engine: one rank per device
        compose([*MLP, "pipeline.K=2", "device=cuda"])
    assert "\n" not in str(err.value) and "nccl cannot put two ranks on one device" in str(
        err.value
    )
    with pytest.raises(UserError) as err:  # hardware=measured: its link was never measured
        compose([*MLP, "pipeline.K=2", "device=cuda", "backend=sim", "hardware=measured"])
    assert "\n" not in str(err.value) and "pipeline.K >= 2" in str(err.value)
    ok = compose([*MLP, "pipeline.K=1", "device=cuda", "backend=sim", "hardware=measured"])
    assert (ok.device, ok.backend) == ("cuda", "sim")  # K = 1: costed on the GPU
