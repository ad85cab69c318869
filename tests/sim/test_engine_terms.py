"""What the engine pays beyond the per-layer profile, measured: the post-idle penalty and the collector."""

from __future__ import annotations

import gc
import statistics
import time

import pytest
import torch
from torch import nn

from gpipe_repro.sim.costs import Link
from gpipe_repro.sim.measured.device import DeviceModel
from gpipe_repro.sim.measured.idle import add_points, measure_idle
from gpipe_repro.sim.measured.stream import fresh_input, time_stream


class _Clock:
    """A fake ``time`` module: sleeping advances it, so does the fake work."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_penalty_is_what_the_work_after_a_wait_takes_beyond_back_to_back(monkeypatch):
    from gpipe_repro.sim.measured import idle

    clock = _Clock()
    monkeypatch.setattr(idle, "time", clock)
    last = [0.0]

    def work() -> None:  # 2 ms slower on its first call after more than 1 ms without work
        if clock.now - last[0] > 1e-3:
            clock.now += 2e-3
        clock.now += 2e-4
        last[0] = clock.now

    points = measure_idle(work, (5e-4, 5e-3), repeats=3, use_cache=False)
    assert [b for b, _ in points] == [5e-4, 5e-3]
    assert [p for _, p in points] == pytest.approx([0.0, 2e-3])
    with pytest.raises(ValueError, match="blocked"):
        measure_idle(work, (0.0,), use_cache=False)


def test_a_receiver_of_this_host_pays_the_penalty_beside_its_wake_up():
    link = Link(1e-5, 1e9, wake=((1e-3, 1e-4),))
    dm = DeviceModel("cpu", link, 0.0, 0.0, False, idle_penalty=((1e-3, 5e-4), (1e-2, 1e-3)))
    ranks = dm.ranks_link(2)
    assert ranks.wake_s(1e-3) == pytest.approx(6e-4)
    assert ranks.wake_s(1e-2) == pytest.approx(1.1e-3)  # the wake-up's last value beyond its points
    assert ranks.wake_s(5e-4) == pytest.approx(0.5 * 6e-4)  # linear from (0, 0)
    assert dm.link.wake_s(1e-2) == pytest.approx(1e-4)  # an emulated rank sleeps: no penalty
    assert add_points((), ()) == ()


class _Collects(nn.Module):
    """A linear layer whose forward pays a collector's pause the engine would pay: a pause of known
    length announced to ``gc.callbacks`` as the collector announces its own (a real collection's
    length depends on what the process holds and what the stream froze before its steps)."""

    PAUSE_S = 0.004

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        info = {"generation": 2, "collected": 0, "uncollectable": 0}
        for hook in list(gc.callbacks):
            hook("start", info)
        time.sleep(self.PAUSE_S)
        for hook in list(gc.callbacks):
            hook("stop", info)
        return self.fc(x)


def test_the_collectors_pauses_leave_the_calls_and_come_back_as_a_share_of_each_forward():
    layers = [_Collects(), nn.Linear(4, 4)]
    x = torch.randn(2, 4)
    M = 3
    t = time_stream(
        layers,
        [fresh_input(x, False) for _ in range(M)],
        None,
        None,
        device=torch.device("cpu"),
        warmup=0,
        repeats=2,
    )
    kept = [s for s in t.steps if s.forward]
    remat = [s for s in t.steps if s.nograd]
    assert all(s.collector > 0 for s in kept + remat)  # one full collection per forward call
    share = t.collector_share("forward")
    assert share == pytest.approx(statistics.fmean(s.collector for s in kept) / (M * 2))
    assert t.collector_share("backward") == 0.0
    # layer 0's calls are the linear layer's alone plus the share: the pause was taken out of them
    pause = min(s.collector for s in kept) / M
    own = statistics.median(t.samples("forward", 0)) - share
    assert own < 0.5 * pause
    assert statistics.median(t.samples("forward", 1)) >= share  # the other layer carries it too
