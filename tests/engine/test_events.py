"""Events: the measured bubble against (K-1)/(M+K-1), and the Chrome trace, on real gloo ranks."""

import statistics

import _workers as w
import pytest
import torch

from gpipe_repro.engine import (
    Event,
    Pipeline,
    bubble_fraction,
    chrome_trace,
    launch,
    measured_bubble,
    single_process,
)
from gpipe_repro.engine.events import COMPUTE, Recorder


class DeviceLikeClock:
    """A clock whose marks are tickets, known as seconds only once resolved — as CUDA events are,
    after the step's synchronisation."""

    def __init__(self) -> None:
        self.tickets = 0
        self.resolved: list[int] = []  # how many marks each resolve call got

    def mark(self) -> int:
        self.tickets += 1
        return self.tickets

    def resolve(self, marks: list[int]) -> list[float]:
        self.resolved.append(len(marks))
        return [100.0 + m for m in marks]


def test_spans_are_device_marks_resolved_once_at_the_step_end():
    clock = DeviceLikeClock()
    rec = Recorder(stage=1, clock=clock)
    with rec.span("forward", 0):
        pass
    with rec.span("backward", 0):
        pass
    assert rec.events == [] and clock.resolved == []  # nothing is read from the device mid-step
    rec.end_step()
    assert clock.resolved == [4] and rec.step == 1
    assert [(e.action, e.start, e.end, e.stage, e.step) for e in rec.events] == [
        ("forward", 101.0, 102.0, 1, 0),
        ("backward", 103.0, 104.0, 1, 0),
    ]


def test_a_step_records_every_action_through_its_clock():
    torch.manual_seed(0)
    pipe = Pipeline([torch.nn.Linear(4, 4)], single_process(), M=2, loss_fn=w.mse)
    clock = DeviceLikeClock()
    pipe.recorder = Recorder(clock=clock)
    pipe.transfers.recorder = pipe.recorder
    x = torch.randn(4, 4)
    pipe.train_step(x, x)
    pipe.train_step(x, x)
    assert len(clock.resolved) == 2  # one resolution per step
    names = [(e.action, e.mb) for e in pipe.recorder.events if e.step == 1]
    assert names == [
        ("forward", 0),
        ("forward", 1),
        ("backward", 1),  # except_last: only micro-batch 0 is rematerialised; backward in reverse
        ("recompute", 0),
        ("backward", 0),
        ("send", -1),
        ("step", -1),
    ], names


@pytest.mark.slow
@pytest.mark.parametrize(
    "K,M,schedule", [(2, 1, "gpipe"), (2, 4, "gpipe"), (4, 4, "gpipe"), (4, 8, "1f1b")]
)
def test_measured_bubble_matches_formula(K, M, schedule):
    # Each cell sleeps f/M per micro-batch forward and 2f/M backward: balanced and compute-free,
    # so the bubble is pure schedule. Tolerance 0.06 absolute covers transfer and Python overhead
    # (a few ms per action against f/M >= 62 ms of sleep).
    f = 0.25 * K / 2  # longer cells when more ranks share the 2 cores, so overheads stay small
    res = launch(w.bubble_run, K, (K, M, f, 3, schedule))
    events = [Event(**e) for r in res for e in r["events"] if e["action"] != "step"]
    fracs = []
    for step in range(1, 3):  # step 0 includes the shape handshake
        span, bubble, busy = measured_bubble([e for e in events if e.step == step], K)
        fracs.append(bubble)
    assert statistics.median(fracs) == pytest.approx(bubble_fraction(K, M), abs=0.06)
    trace = chrome_trace(events)
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"forward 0", "backward 0"} <= names
    assert all(e["dur"] >= 0 for e in trace["traceEvents"] if e["ph"] == "X")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_no_receive_is_counted_as_computation(schedule):
    # A stage's computing spans must not wrap its receives: measured_bubble counts a span as busy,
    # so a wait inside one would hide idle time (zb-h1's first cell takes the gradient at B, where
    # it has no other work: that receive is a wait, not a backward).
    K, M = 2, 4
    res = launch(w.bubble_run, K, (K, M, 0.04, 2, schedule))
    events = [Event(**e) for r in res for e in r["events"] if e["action"] != "step"]
    waits = [e for e in events if e.action == "wait"]
    assert waits  # the check below has something to check
    wrapped = [
        (c.action, c.stage, c.mb)
        for c in events
        if c.action in COMPUTE
        for x in waits
        if x.stage == c.stage and x.step == c.step and c.start <= x.start and x.end <= c.end
    ]
    assert wrapped == []
