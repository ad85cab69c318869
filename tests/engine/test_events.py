"""Events: the measured bubble against (K-1)/(M+K-1), and the Chrome trace, on real gloo ranks."""

import statistics

import _workers as w
import pytest

from gpipe_repro.engine import Event, bubble_fraction, chrome_trace, launch, measured_bubble


@pytest.mark.slow
@pytest.mark.parametrize(
    "K,M,schedule", [(2, 1, "gpipe"), (2, 4, "gpipe"), (4, 4, "gpipe"), (4, 8, "1f1b")]
)
def test_measured_bubble_matches_formula(K, M, schedule):
    # Each cell sleeps f/M per micro-batch forward and 2f/M backward: balanced and compute-free,
    # so the bubble is pure schedule. Tolerance 0.06 absolute covers transfer and Python overhead.
    f = 0.4 * K / 2  # longer cells when more ranks share the 2 cores, so overheads stay small
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
