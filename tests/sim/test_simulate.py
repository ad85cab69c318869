import dataclasses
import importlib
import math

import pytest

from gpipe_repro.engine.checkpoint import uses_remat
from gpipe_repro.engine.events import Event, chrome_trace
from gpipe_repro.engine.schedule import Action, bubble_fraction, stage_actions
from gpipe_repro.sim.costs import Link, StageCost
from gpipe_repro.sim.simulate import ScheduleDeadlock, simulate

# the module, not the function of the same name that gpipe_repro.sim re-exports
sim_module = importlib.import_module("gpipe_repro.sim.simulate")

FREE = Link(latency_s=0.0, bandwidth_Bps=math.inf)


def stage(f, b, out=0, nograd=None, update=0.0):
    return StageCost(
        forward_s=f,
        forward_nograd_s=f if nograd is None else nograd,
        backward_s=b,
        out_bytes=out,
        update_s=update,
    )


def test_balanced_fill_drain_is_closed_form():
    # No transfers, K equal cells: the last stage's backward of micro-batch 0 ends at (M+K-1)(F+B).
    F, B = 0.3, 0.7
    for K in (1, 2, 3, 5):
        for M in (1, 2, 4, 7):
            r = simulate(K, M, "gpipe", "never", [stage(F, B)] * K, FREE)
            assert r.step_s == pytest.approx((M + K - 1) * (F + B))
            assert r.bubble_fraction == pytest.approx(bubble_fraction(K, M))


def test_both_schedules_have_the_ideal_bubble_with_unit_costs():
    for name in ("gpipe", "1f1b"):
        for K, M in [(2, 1), (2, 4), (4, 8), (3, 5)]:
            r = simulate(K, M, name, "never", [stage(1.0, 2.0)] * K, FREE)
            assert r.bubble_fraction == pytest.approx(bubble_fraction(K, M))


def test_unbalanced_forward_only_follows_alpa():
    # Alpa's pipeline latency: T = sum(t_i) + (M-1) * max(t_i) for identical micro-batches.
    t = [0.2, 0.5, 0.1, 0.3]
    for M in (1, 2, 5, 9):
        r = simulate(len(t), M, "gpipe", "never", [stage(x, 0.0) for x in t], FREE)
        assert r.step_s == pytest.approx(sum(t) + (M - 1) * max(t))


def test_1f1b_peak_in_flight_is_min_of_stages_left_and_M():
    for K in (1, 2, 4, 6):
        for M in (1, 2, K, 2 * K + 1):
            r = simulate(K, M, "1f1b", "never", [stage(1.0, 2.0)] * K, FREE)
            assert r.peak_in_flight == [min(K - k, M) for k in range(K)]
            g = simulate(K, M, "gpipe", "never", [stage(1.0, 2.0)] * K, FREE)
            assert g.peak_in_flight == [M] * K


def _check_order(r, K, M, name, checkpoint, link, stages):
    """Every engine action ran once per stage, in the engine's order, after its input arrived."""
    comp = {}
    for e in r.events:
        if e.action in ("forward", "backward", "recompute"):
            key = (e.stage, e.action, e.mb)
            assert key not in comp
            comp[key] = e
    for k in range(K):
        order = [e for e in r.events if e.stage == k and e.action in ("forward", "backward")]
        assert [
            Action("F" if e.action == "forward" else "B", e.mb) for e in order
        ] == stage_actions(name, K, M, k)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(order, order[1:]))
        for m in range(M):
            assert ((k, "recompute", m) in comp) == uses_remat(checkpoint, m, M)
            f, b = comp[(k, "forward", m)], comp[(k, "backward", m)]
            assert f.end <= b.start
            if k > 0:  # the activation left stage k-1 after its forward and crossed the link
                assert (
                    f.start
                    >= comp[(k - 1, "forward", m)].end + link.time(stages[k - 1].out_bytes) - 1e-12
                )
            if k < K - 1:
                assert (
                    b.start
                    >= comp[(k + 1, "backward", m)].end + link.time(stages[k].out_bytes) - 1e-12
                )


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_no_deadlock_for_every_small_pipeline(name):
    link = Link(latency_s=0.01, bandwidth_Bps=1e3)
    for K in range(1, 9):
        stages = [stage(0.1 + 0.05 * (k % 3), 0.2 + 0.03 * k, out=10 * (k + 1)) for k in range(K)]
        for M in range(1, 2 * K + 1):
            for checkpoint in ("never", "except_last", "always"):
                for busy in (True, False):
                    r = simulate(K, M, name, checkpoint, stages, link, 0.001, sender_busy=busy)
                    _check_order(r, K, M, name, checkpoint, link, stages)
                    assert r.step_s >= max(M * (s.forward_s + s.backward_s) for s in stages)


def test_deadlock_raises_naming_the_blocked_stage(monkeypatch):
    # A broken schedule: stage 0 runs B0 before F0, so it waits for a gradient that never comes.
    def broken(name, K, M, k, v=1):
        acts = stage_actions(name, K, M, k, v)
        return acts[::-1] if k == 0 else acts

    monkeypatch.setattr(sim_module, "stage_actions", broken)
    with pytest.raises(ScheduleDeadlock, match=r"K=2, M=3: stage 0 is blocked at B0"):
        simulate(2, 3, "gpipe", "never", [stage(1.0, 2.0)] * 2, FREE)


def test_remat_adds_exactly_the_recompute():
    F, B = 0.4, 0.9
    for M in (1, 3, 6):
        never = simulate(1, M, "gpipe", "never", [stage(F, B)], FREE)
        always = simulate(1, M, "gpipe", "always", [stage(F, B)], FREE)
        assert always.step_s - never.step_s == pytest.approx(M * F)
    K, M = 3, 5
    stages = [stage(F, B), stage(2 * F, B), stage(F, 3 * B)]
    never = simulate(K, M, "gpipe", "never", stages, FREE)
    for mode, n in (("always", M), ("except_last", M - 1)):
        r = simulate(K, M, "gpipe", mode, stages, FREE)
        assert [a - b for a, b in zip(r.busy_s, never.busy_s)] == pytest.approx(
            [n * s.forward_s for s in stages]
        )


def test_each_stage_recompute_time_is_its_recompute_events():
    F, B = 0.4, 0.9
    K, M = 3, 5
    stages = [stage(F, B), stage(2 * F, B), stage(F, 3 * B)]
    for mode, n in (("never", 0), ("always", M), ("except_last", M - 1)):
        r = simulate(K, M, "gpipe", mode, stages, FREE)
        assert r.recompute_s == pytest.approx([n * s.forward_s for s in stages])
        assert r.recompute_s == [
            sum(e.end - e.start for e in r.events if (e.stage, e.action) == (k, "recompute"))
            for k in range(K)
        ]


def test_remat_forward_uses_the_nograd_cost():
    s = stage(1.0, 2.0, nograd=0.25)
    r = simulate(1, 4, "gpipe", "except_last", [s], FREE)
    fwd = sorted((e.mb, e.end - e.start) for e in r.events if e.action == "forward")
    assert fwd == [(0, 0.25), (1, 0.25), (2, 0.25), (3, 1.0)]


def test_recompute_starts_before_the_gradient_arrives():
    # Stage 1's backward is slow; stage 0 recomputes micro-batch 0 while it runs (GPipe §2.3).
    r = simulate(2, 1, "gpipe", "always", [stage(1.0, 1.0), stage(1.0, 5.0)], FREE)
    rec = next(e for e in r.events if e.stage == 0 and e.action == "recompute")
    bwd1 = next(e for e in r.events if e.stage == 1 and e.action == "backward")
    assert rec.start < bwd1.end
    assert r.step_s == pytest.approx(1 + 1 + 1 + 5 + 1)  # F0, F1 (nograd), R1, B1, B0: R0 hidden


@pytest.mark.parametrize("busy", [True, False])
def test_transfers_add_latency_and_bytes_on_the_critical_path(busy):
    # M = 1: nothing overlaps, so each cut costs one activation and one gradient transfer.
    link = Link(latency_s=0.002, bandwidth_Bps=1e6, hops=2)
    stages = [stage(0.1, 0.2, out=1000), stage(0.3, 0.1, out=4000), stage(0.2, 0.2)]
    free = simulate(3, 1, "gpipe", "never", stages, FREE)
    r = simulate(3, 1, "gpipe", "never", stages, link, sender_busy=busy)
    transfers = 2 * (link.time(1000) + link.time(4000))
    assert r.step_s - free.step_s == pytest.approx(transfers)
    assert link.time(1000) == pytest.approx(2 * (0.002 + 1000 / 1e6))


def test_one_transfer_per_direction_at_a_time():
    # Slow link, fast compute, overlapped sends: activations queue on the link k -> k+1.
    link = Link(latency_s=1.0, bandwidth_Bps=math.inf)
    r = simulate(
        2, 3, "gpipe", "never", [stage(0.1, 0.1, out=1), stage(0.1, 0.1)], link, sender_busy=False
    )
    arrivals = [e.end for e in r.events if e.stage == 1 and e.action == "wait"][:3]
    assert arrivals == pytest.approx([1.1, 2.1, 3.1])


def test_sender_busy_occupies_the_sending_stage():
    link = Link(latency_s=0.5, bandwidth_Bps=math.inf)
    stages = [stage(0.1, 0.1, out=1), stage(0.1, 0.1)]
    busy = simulate(2, 2, "gpipe", "never", stages, link, sender_busy=True)
    free = simulate(2, 2, "gpipe", "never", stages, link, sender_busy=False)
    f1_busy = next(e for e in busy.events if (e.stage, e.action, e.mb) == (0, "forward", 1))
    f1_free = next(e for e in free.events if (e.stage, e.action, e.mb) == (0, "forward", 1))
    assert f1_busy.start == pytest.approx(0.6)  # F0 (0.1), then its send (0.5) on the same thread
    assert f1_free.start == pytest.approx(0.1)


def test_overhead_and_update_are_added():
    base = simulate(2, 4, "gpipe", "never", [stage(1.0, 2.0)] * 2, FREE)
    r = simulate(2, 4, "gpipe", "never", [stage(1.0, 2.0, update=0.5)] * 2, FREE, overhead_s=0.1)
    assert r.step_s - base.step_s == pytest.approx((4 + 1) * (0.1 + 0.1) + 0.5)
    assert r.busy_s == pytest.approx([4 * (3.0 + 0.2)] * 2)


def test_events_are_engine_events_and_make_an_engine_trace():
    link = Link(latency_s=0.001, bandwidth_Bps=1e6)
    r = simulate(3, 4, "1f1b", "except_last", [stage(1.0, 2.0, out=100)] * 3, link)
    assert all(isinstance(e, Event) for e in r.events)
    fields = {f.name for f in dataclasses.fields(r.events[0])}
    assert fields == {"action", "mb", "start", "end", "stage", "replica", "step", "chunk"}
    actions = {e.action for e in r.events}
    assert actions == {"forward", "backward", "recompute", "send", "wait", "step", "update"}
    trace = chrome_trace(r.events)
    spans = [t for t in trace["traceEvents"] if t["ph"] == "X"]
    assert len(spans) == len(r.events)
    assert {t["tid"] for t in spans} == {0, 1, 2}
    assert all(set(t) == {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"} for t in spans)
    assert max(t["ts"] + t["dur"] for t in spans) == pytest.approx(r.step_s * 1e6)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="exactly K=3"):
        simulate(3, 2, "gpipe", "never", [stage(1.0, 1.0)] * 2, FREE)
    with pytest.raises(ValueError, match="^schedule='zigzag' is unknown"):
        simulate(2, 2, "zigzag", "never", [stage(1.0, 1.0)] * 2, FREE)
    with pytest.raises(ValueError, match="^checkpoint='sometimes' is unknown"):
        simulate(2, 2, "gpipe", "sometimes", [stage(1.0, 1.0)] * 2, FREE)
    with pytest.raises(ValueError, match=r"stages\[1\].backward_s=-1"):
        simulate(2, 2, "gpipe", "never", [stage(1.0, 1.0), stage(1.0, -1)], FREE)


def test_a_receiver_blocked_for_long_sees_the_message_late():
    # stage 1's forward waits for stage 0's 1.0 s forward: blocked ~1 s, it wakes 0.2 s late
    st = [StageCost(1.0, 1.0, 1.0, 8), StageCost(0.1, 0.1, 0.1, 0)]
    quick = Link(0.0, math.inf)
    slow = Link(0.0, math.inf, wake=((0.5, 0.2),))
    a = simulate(2, 1, "gpipe", "never", st, quick, sender_busy=False)
    b = simulate(2, 1, "gpipe", "never", st, slow, sender_busy=False)
    waits = [e for e in b.events if e.action == "wait" and e.stage == 1]
    assert waits[0].end - waits[0].start == pytest.approx(1.2)
    # and stage 0, blocked 0.4 s for the gradient, 0.16 s late (linear from no delay at 0 s)
    assert b.step_s == pytest.approx(a.step_s + 0.2 + 0.16)


def test_a_recompute_pays_its_overhead_once_per_rematerialised_micro_batch():
    st = [StageCost(1.0, 0.5, 2.0, 0)]
    base = simulate(1, 4, "gpipe", "always", st, Link(0.0, math.inf))
    more = simulate(1, 4, "gpipe", "always", st, Link(0.0, math.inf), recompute_overhead_s=0.25)
    assert more.step_s == pytest.approx(base.step_s + 4 * 0.25)
    never = simulate(1, 4, "gpipe", "never", st, Link(0.0, math.inf), recompute_overhead_s=0.25)
    assert never.step_s == pytest.approx(4 * 3.0)  # nothing recomputed: nothing paid


@pytest.mark.parametrize(
    "schedule,checkpoint", [("gpipe", "never"), ("1f1b", "always"), ("gpipe", "except_last")]
)
def test_a_replay_of_a_simulated_log_reproduces_it(schedule, checkpoint):
    from gpipe_repro.sim.replay import Replay

    st = [
        StageCost(1.0, 0.6, 2.0, 1000),
        StageCost(1.5, 0.9, 2.5, 1000),
        StageCost(0.5, 0.3, 1.0, 0),
    ]
    link = Link(0.05, 1e4)  # 0.15 s per message: waits and queueing on the links
    res = simulate(3, 5, schedule, checkpoint, st, link, 0.01, sender_busy=False)
    logged = [e for e in res.events if e.action != "step"]
    replay, t0 = Replay.from_events(logged, 3, 5, schedule, checkpoint)
    zero = [StageCost(0.0, 0.0, 0.0, 0)] * 3
    again = simulate(
        3, 5, schedule, checkpoint, zero, Link(0.0, math.inf), sender_busy=False, replay=replay
    )

    def compute(events):
        return sorted(
            (e.stage, e.start, e.end, e.action, e.mb)
            for e in events
            if e.action in ("forward", "backward", "recompute")
        )

    for a, b in zip(compute(logged), compute(again.events)):
        assert a[0] == b[0] and a[3:] == b[3:]
        assert a[2] - t0 == pytest.approx(b[2], abs=1e-9)
