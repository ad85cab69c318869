"""The speed probe and a profile put on the reference speed (``sim.measured.speed``, ``profile_layers``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpipe_repro.sim.measured import speed
from gpipe_repro.sim.measured.profile import LayerProfile, profile_layers

WIDTH = 128


pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py


def _layers() -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()), nn.Linear(WIDTH, WIDTH)]


def _sample(n: int) -> tuple[torch.Tensor, None]:
    return torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(n)), None


def test_the_probe_times_a_fixed_workload_and_the_reference_is_a_median(monkeypatch):
    speed.probe_s()  # the operands are made and warmed once, untimed
    shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    monkeypatch.setattr(
        speed.torch, "mm", lambda x, a: shapes.append((tuple(x.shape), tuple(a.shape)))
    )
    ticks = [2.0, 1.5]  # perf_counter before and after the timed loop (popped from the end)
    monkeypatch.setattr(speed.time, "perf_counter", ticks.pop)
    assert speed.probe_s() == 0.5  # the loop's time, and nothing else
    assert len(shapes) == speed.PROBE_ITERS and len(set(shapes)) == 1  # the same product each time
    monkeypatch.setattr(speed, "probe_s", [0.001, 0.002, 0.009].pop)
    assert speed.reference_s(3) == 0.002  # the median (the mean would be 0.004)
    with pytest.raises(ValueError, match="samples=0"):
        speed.reference_s(0)


def test_normalized_scales_a_time_to_the_reference_speed():
    # measured while the machine ran at half the reference speed: half the time at the reference
    assert speed.normalized(0.2, probe=0.008, ref=0.004) == pytest.approx(0.1)
    assert speed.normalized(0.2, probe=0.004, ref=0.004) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="probe=0"):
        speed.normalized(0.2, probe=0.0, ref=0.004)


def test_a_profile_taken_at_half_speed_is_halved_and_keeps_its_raw_figures(monkeypatch):
    ref = 0.004
    monkeypatch.setattr(speed, "probe_s", lambda: 2 * ref)  # the machine at half the reference
    prof = profile_layers(_layers(), _sample, [4, 16], repeats=3, use_cache=False, normalize_to=ref)
    assert prof.raw is not None and prof.probe_s == pytest.approx(2 * ref)
    for n in prof.sizes:
        for c, r in zip(prof.costs[n], prof.raw[n]):
            assert r.forward_s > 0 and r.backward_s > 0
            assert c.forward_s == pytest.approx(r.forward_s / 2)
            assert c.forward_nograd_s == pytest.approx(r.forward_nograd_s / 2)
            assert c.backward_s == pytest.approx(r.backward_s / 2)
            assert c.recompute == pytest.approx(r.recompute / 2)
            # the optimiser step is timed in the stream too, so scaled; bytes are not
            assert c.update_s > 0 and c.update_s == pytest.approx(r.update_s / 2)
            assert c.out_bytes == r.out_bytes
    back = LayerProfile.from_json(prof.to_json(), prof.key)
    assert back.raw == prof.raw and back.costs == prof.costs and back.probe_s == prof.probe_s


def test_without_normalize_to_the_profile_has_no_raw_copy_and_never_probes(monkeypatch):
    def boom() -> float:
        raise AssertionError("probed without normalize_to")

    monkeypatch.setattr(speed, "probe_s", boom)
    prof = profile_layers(_layers(), _sample, [4], repeats=2, use_cache=False)
    assert prof.raw is None and prof.probe_s is None
    assert "raw" not in prof.to_json()


def test_normalize_to_must_be_positive_and_is_part_of_the_cache_key(monkeypatch):
    with pytest.raises(ValueError, match="normalize_to=0"):
        profile_layers(_layers(), _sample, [4], repeats=1, normalize_to=0.0)
    monkeypatch.setattr(speed, "probe_s", lambda: 0.004)
    # 3 repeats: one has no spread, and the profile's recompute check then has no noise to allow
    a = profile_layers(_layers(), _sample, [4], repeats=3, normalize_to=0.004)
    b = profile_layers(_layers(), _sample, [4], repeats=3)  # a different key: measured afresh
    assert a.source == "measured" and b.source == "measured" and b.raw is None
    c = profile_layers(_layers(), _sample, [4], repeats=3, normalize_to=0.004)
    assert c.source == "cache" and c.raw == a.raw
