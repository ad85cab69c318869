"""Measured per-layer costs, their interpolation and cache, the link and the engine overhead."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpipe_repro.engine import events
from gpipe_repro.models.amoebanet import Pool
from gpipe_repro.sim.costs import LayerCost, Link
from gpipe_repro.sim.measured import cache, profile
from gpipe_repro.sim.measured.costs import MeasuredCosts, interpolate
from gpipe_repro.sim.measured.link import WAKE_BLOCKED_S, fit_link, measure_link
from gpipe_repro.sim.measured.overhead import measure_overhead
from gpipe_repro.sim.measured.profile import LayerProfile, profile_layers

WIDTH = 256


pytestmark = pytest.mark.usefixtures("private_cache")  # tests/conftest.py


def linear_stack(depth: int = 3, width: int = WIDTH) -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]


def sample_fn(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, WIDTH, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_profile_is_positive_and_per_sample_cost_falls_with_micro_batch_size():
    layers = linear_stack() + [nn.Linear(WIDTH, 10)]
    prof = profile_layers(
        layers, sample_fn, [1, 32], repeats=5, loss_fn=F.cross_entropy, use_cache=False
    )
    assert prof.sizes == [1, 32] and prof.source == "measured"
    for n in prof.sizes:
        for c in prof.costs[n]:
            assert (
                c.forward_s > 0 and c.forward_nograd_s > 0 and c.backward_s > 0 and c.update_s > 0
            )
        assert [c.out_bytes for c in prof.costs[n]] == [n * WIDTH * 4] * 3 + [n * 10 * 4]
    # ENVIRONMENT.md: cost is not proportional to the micro-batch size (weights re-read per call,
    # fixed per-call overheads), so one sample costs more alone than inside a micro-batch of 32.
    per_sample = {n: sum(c.forward_s + c.backward_s for c in prof.costs[n]) / n for n in prof.sizes}
    assert per_sample[1] >= per_sample[32]


def test_identical_layers_share_one_record():
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Dropout(0.1)) for _ in range(4)]
    layers.append(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Dropout(0.2)))  # same weights' shapes
    layers.append(nn.Linear(WIDTH, WIDTH))
    prof = profile_layers(layers, sample_fn, [4, 8], repeats=2, use_cache=False)
    # layer 0 (its input is data: no input gradient), one record for layers 1-3 (the statistic of
    # all their calls), layer 4, whose dropout rate makes it a different structure, and the last.
    assert prof.distinct == 4
    for n in prof.sizes:
        c = prof.costs[n]
        assert c[1] == c[2] == c[3]
        assert c[4] != c[1] and c[0] != c[1]


def test_structure_tells_layers_with_equal_parameters_apart():
    assert cache.structure(Pool("max", 3, 1)) != cache.structure(Pool("avg", 3, 1))
    assert cache.structure(Pool("max", 3, 1)) == cache.structure(Pool("max", 3, 1))
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    assert cache.structure(a) == cache.structure(b)  # weights' values do not matter
    assert cache.structure(a) != cache.structure(nn.Linear(4, 5))


def _profile_by_hand() -> LayerProfile:
    def lc(f: float, b: float, nbytes: int) -> LayerCost:
        return LayerCost(
            forward_s=f, forward_nograd_s=f / 2, backward_s=b, out_bytes=nbytes, update_s=0.5
        )

    return LayerProfile(
        [2, 8, 16],
        {
            2: [lc(1.0, 4.0, 200), lc(3.0, 1.0, 20)],
            8: [lc(2.0, 7.0, 800), lc(1.0, 1.0, 80)],
            16: [lc(4.0, 9.0, 1600), lc(0.5, 1.0, 160)],
        },
    )


def test_interpolation_is_exact_at_measured_sizes_and_linear_between_and_beyond():
    prof = _profile_by_hand()
    costs = MeasuredCosts(prof, Link(1e-4, 1e9))
    for n in prof.sizes:
        assert costs.layer_costs(n) == prof.costs[n]
    mid = costs.layer_costs(5)  # halfway between 2 and 8
    assert mid[0].forward_s == pytest.approx(1.5) and mid[0].backward_s == pytest.approx(5.5)
    assert mid[0].out_bytes == 500 and mid[0].update_s == pytest.approx(0.5)
    assert mid[1].forward_s == pytest.approx(2.0) and mid[1].forward_nograd_s == pytest.approx(1.0)
    big = costs.layer_costs(32)  # beyond: the line through sizes 8 and 16
    assert big[0].forward_s == pytest.approx(8.0) and big[0].out_bytes == 3200
    assert big[1].forward_s == 0.0  # 1.0 -> 0.5 extrapolates below zero: clamped
    small = costs.layer_costs(1)  # below: the line through sizes 2 and 8
    assert small[0].backward_s == pytest.approx(3.5)
    assert interpolate([4], [2.5], 100) == 2.5
    with pytest.raises(ValueError, match="micro_batch=0"):
        costs.layer_costs(0)


def test_second_call_loads_the_cache_and_a_corrupt_cache_is_measured_again(monkeypatch):
    layers = linear_stack(2)
    first = profile_layers(layers, sample_fn, [2, 4], repeats=2)
    assert first.source == "measured"
    calls = []
    real = profile.time_stream

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(profile, "time_stream", counting)
    second = profile_layers(layers, sample_fn, [4, 2], repeats=2)
    assert calls == [] and second.source == "cache"
    assert second.costs == first.costs and second.sizes == first.sizes
    # Another thread count is another key: measured again.
    torch.set_num_threads(2)
    profile_layers(layers, sample_fn, [2, 4], repeats=2)
    torch.set_num_threads(1)
    assert len(calls) == 2  # one stream per size
    (path,) = [
        p
        for p in cache.cache_dir().glob("layers-*.json")
        if json.loads(p.read_text())["key"]["threads"] == 1
    ]
    path.write_text("{ not json")
    third = profile_layers(layers, sample_fn, [2, 4], repeats=2)
    assert len(calls) == 4 and third.source == "measured"
    assert json.loads(path.read_text())["format"] == cache.FORMAT  # rewritten


def test_fit_link_recovers_latency_and_bandwidth_and_stays_positive():
    link = Link(50e-6, 2e9)
    pts = [(n, link.time(n)) for n in (1 << 10, 1 << 16, 1 << 20, 1 << 23)]
    fit = fit_link(pts)
    assert fit.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(2e9, rel=1e-6)
    noisy = fit_link([(1000, 1e-4), (2000, 0.5e-4)])  # slope < 0: falls back, stays positive
    assert noisy.latency_s > 0 and noisy.bandwidth_Bps > 0


@pytest.mark.slow
def test_measure_link_on_two_real_ranks():
    # 8 MiB takes ~2-3 ms at gloo's few GB/s, 1 KiB ~40 us (up to ~2 ms when other processes
    # share the cores, which stretches both).
    prof = measure_link([1 << 10, 1 << 23], repeats=5, warmup=1, use_cache=False)
    assert prof.link.latency_s > 0 and prof.link.bandwidth_Bps > 0
    (small, t_small), (big, t_big) = prof.points
    assert small < big and t_big > t_small
    # posting a transfer returns long before a round trip completes (gloo moves the data later)
    assert 0 < prof.link.send_call_s < t_big and 0 < prof.link.recv_call_s < t_big
    # the wake-up of a blocked receiver: one point per blocking time beyond zero, never negative
    assert [b for b, _ in prof.link.wake] == list(WAKE_BLOCKED_S[1:])
    assert all(w >= 0 for _, w in prof.link.wake)


def test_the_wake_up_delay_is_interpolated_between_measured_points():
    link = Link(1e-4, 1e9, wake=((1e-3, 2e-4), (1e-2, 4e-4)))
    assert link.wake_s(0.0) == 0.0 and link.wake_s(0.5e-3) == pytest.approx(1e-4)
    assert link.wake_s(5.5e-3) == pytest.approx(3e-4) and link.wake_s(1.0) == pytest.approx(4e-4)
    assert Link(1e-4, 1e9).wake_s(1.0) == 0.0  # no points: no delay


def test_measure_overhead_reads_the_engines_own_spans():
    layers = linear_stack(2) + [nn.Linear(WIDTH, 10)]
    fit = measure_overhead(layers, sample_fn, 16, (1, 2, 4), loss_fn=F.cross_entropy, repeats=2)
    assert [M for M, _, _ in fit.points] == [1, 2, 4]
    for _, step, spans in fit.points:
        assert 0 < spans < step  # a step is its compute spans and what no layer accounts for
    remat = measure_overhead(
        layers, sample_fn, 16, (2, 4), loss_fn=F.cross_entropy, repeats=1, checkpoint="always"
    )
    assert [M for M, _, _ in remat.points] == [2, 4]
    with pytest.raises(ValueError, match="M=3 must be >= 1 and divide N=16"):
        measure_overhead(layers, sample_fn, 16, (3,), loss_fn=F.cross_entropy)


def test_the_overhead_is_the_time_each_compute_action_costs_outside_its_span(monkeypatch):
    # On a clock of the test's own (a microsecond per reading, nothing else moves it), every compute
    # span (forward, backward, recompute) lasts 10 ms and is followed by 4 ms outside it: the fitted
    # cost per action is those 4 ms, whatever M (the clock's own readings add microseconds).
    inside, delay, now = 0.010, 0.004, [0.0]

    def clock() -> float:
        now[0] += 1e-6
        return now[0]

    real_exit = events._Span.__exit__

    def late_exit(span, *exc):
        compute = span.action in events.COMPUTE
        now[0] += inside if compute else 0.0
        real_exit(span, *exc)
        now[0] += delay if compute else 0.0

    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(events._Span, "__exit__", late_exit)
    layers = linear_stack(2) + [nn.Linear(WIDTH, 10)]
    fit = measure_overhead(layers, sample_fn, 16, (1, 2, 4), loss_fn=F.cross_entropy, repeats=2)
    assert fit.overhead_s == pytest.approx(delay, abs=1e-4), fit
    assert abs(fit.fixed_s) < 1e-3, fit  # nothing per step beyond the clock's readings


def test_b_and_w_are_costed_by_their_own_time_over_a_whole_backward():
    """A layer's B and W scale the stream's backward by what each took over a whole backward of the
    same layer (the split's own overhead included: B + W need not make one backward); the model's
    first layer, whose input needs no gradient, leaves its work to W."""
    from gpipe_repro.sim.measured.split import split_factors

    cost = LayerCost(forward_s=1.0, forward_nograd_s=0.8, backward_s=2.0, out_bytes=4)
    (got,) = profile.split_backward([cost], [(1.25, 0.75)])
    assert (got.backward_input_s, got.backward_weight_s) == (2.5, 1.5)
    assert got.split == (2.5, 1.5) and got.backward_s == 2.0  # the whole backward is kept

    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
    x = torch.randn(8, 3, 32, 32)
    cpu = torch.device("cpu")
    kw = dict(device=cpu, warmup=1, repeats=5, stat="median")
    [(b0, w0)] = split_factors([conv], x, None, None, [0], first=True, **kw)
    [(b1, w1)] = split_factors([conv], x, None, None, [0], first=False, **kw)
    assert all(f > 0 for f in (b0, w0, b1, w1))
    assert b0 < w0 / 2  # first: B computes nothing, W the whole backward
    assert b1 > b0  # later: B computes the input's gradient


def _profile(scale: float, probe: float | None = None, b: float | None = 0.4) -> LayerProfile:
    def costs(s: float) -> list[LayerCost]:
        return [
            LayerCost(1.0 * s, 0.8 * s, 2.0 * s, 64, 0.1 * s,
                      backward_input_s=None if b is None else b * s, backward_weight_s=0.3 * s),
            LayerCost(3.0 * s, 2.5 * s, 5.0 * s, 32, 0.2 * s),
        ]  # fmt: skip

    return LayerProfile([4, 8], {4: costs(scale), 8: costs(2 * scale)}, {"layers": "x"}, 2,
                        raw={4: costs(scale * 1.1), 8: costs(2.2 * scale)}, probe_s=probe,
                        recompute_overhead_s=scale * 1e-3)  # fmt: skip


def test_the_median_profile_takes_each_figure_from_the_middle_profile_and_keeps_the_bytes():
    # three passes, one of them slow (the host busy that minute): the median ignores it
    got = profile.median_profile([_profile(1.0, 0.01), _profile(1.5, 0.02), _profile(1.1, 0.03)])
    one = _profile(1.1)
    assert got.costs[4][0].forward_s == pytest.approx(one.costs[4][0].forward_s)
    assert got.costs[8][1].backward_s == pytest.approx(one.costs[8][1].backward_s)
    assert got.raw is not None and got.raw[8][0].update_s == pytest.approx(one.raw[8][0].update_s)
    assert [c.out_bytes for c in got.costs[4]] == [64, 32]
    assert got.probe_s == pytest.approx(0.02)
    assert got.recompute_overhead_s == pytest.approx(1.1e-3)
    assert got.key["passes"] == 3
    # a split time missing from one profile is missing from the median (never half of one)
    mixed = profile.median_profile([_profile(1.0), _profile(1.0, b=None)])
    assert mixed.costs[4][0].backward_input_s is None
    assert mixed.costs[4][1].backward_input_s is None
    # one profile is itself; none, or profiles of other layers, are refused
    single = _profile(1.0)
    assert profile.median_profile([single]) is single
    with pytest.raises(ValueError, match="profiles=\\[\\]"):
        profile.median_profile([])
    other = _profile(1.0)
    other.costs[4][0] = LayerCost(1.0, 0.8, 2.0, 128, 0.1)
    with pytest.raises(ValueError, match="differ in their layers"):
        profile.median_profile([_profile(1.0), other])
