"""How the simulator times transfers the way gloo does: posted sends, receives posted ahead, call costs."""

from __future__ import annotations

import pytest

from gpipe_repro.sim.costs import Link, StageCost
from gpipe_repro.sim.simulate import simulate


def _stages(f0: float, f1: float, out: int = 1) -> list[StageCost]:
    return [StageCost(f0, f0, 0.0, out), StageCost(f1, f1, 0.0, 0)]


def test_a_transfer_waits_for_its_receive_to_be_posted():
    # Stage 1 is slow (1.0 per forward) and receives the activation of F(m) only once it posts that
    # receive: with lookahead 1 at the start of F(m) itself, so every forward waits the whole transfer.
    link = Link(latency_s=0.25, bandwidth_Bps=float("inf"))
    M = 4
    ahead = simulate(2, M, "gpipe", "never", _stages(0.1, 1.0), link, sender_busy=False)
    late = simulate(2, M, "gpipe", "never", _stages(0.1, 1.0), link, sender_busy=False, lookahead=1)
    f1 = sorted(e.start for e in ahead.events if e.stage == 1 and e.action == "forward")
    assert f1 == pytest.approx([0.35, 1.35, 2.35, 3.35])  # only the first transfer is on the path
    f1_late = sorted(e.start for e in late.events if e.stage == 1 and e.action == "forward")
    assert f1_late == pytest.approx([0.35 + i * 1.25 for i in range(M)])
    # posted 4 actions ahead (the engine's default), the slow stage never waits after the first one
    four = simulate(2, M, "gpipe", "never", _stages(0.1, 1.0), link, sender_busy=False, lookahead=4)
    assert four.step_s == pytest.approx(ahead.step_s)


def test_posting_a_send_or_a_receive_costs_the_calling_stage():
    free = Link(latency_s=0.0, bandwidth_Bps=float("inf"))
    calls = Link(latency_s=0.0, bandwidth_Bps=float("inf"), send_call_s=0.01, recv_call_s=0.02)
    st = [StageCost(1.0, 1.0, 0.5, 1), StageCost(1.0, 1.0, 0.5, 0)]
    # M = 1: F0, send, F1, B1, send, B0 in a chain; both receives are posted while their stage idles
    a = simulate(2, 1, "gpipe", "never", st, free, sender_busy=False)
    b = simulate(2, 1, "gpipe", "never", st, calls, sender_busy=False)
    assert b.step_s == pytest.approx(a.step_s + 2 * 0.01)
    # M = 3: stage 1 posts its next receive after each forward, on its critical path
    a3 = simulate(2, 3, "gpipe", "never", st, free, sender_busy=False)
    b3 = simulate(2, 3, "gpipe", "never", st, calls, sender_busy=False)
    assert b3.step_s > a3.step_s + 2 * 0.01 + 2 * 0.02 - 1e-9
    sends = [e for e in b3.events if e.action == "send" and e.mb >= 0]
    assert len(sends) == 2 * 3 and all(e.end - e.start == pytest.approx(0.01) for e in sends)


def test_no_deadlock_with_posted_receives_for_every_small_pipeline():
    link = Link(latency_s=0.01, bandwidth_Bps=1e3, send_call_s=1e-4, recv_call_s=1e-4)
    for schedule in ("gpipe", "1f1b"):
        for K in range(1, 9):
            stages = [
                StageCost(0.1 + 0.05 * (k % 3), 0.1, 0.2 + 0.03 * k, 10 * (k + 1)) for k in range(K)
            ]
            for M in range(1, 2 * K + 1):
                for lookahead in (1, 2, 4):
                    r = simulate(
                        K,
                        M,
                        schedule,
                        "except_last",
                        stages,
                        link,
                        0.001,
                        sender_busy=False,
                        lookahead=lookahead,
                    )
                    assert r.step_s >= max(M * (s.forward_s + s.backward_s) for s in stages)
    with pytest.raises(ValueError, match="lookahead=0 is invalid"):
        simulate(2, 2, "gpipe", "never", _stages(1.0, 1.0), link, lookahead=0)
