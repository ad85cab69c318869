"""The simulator runs the engine's own action lists of the schedules since GPipe: cells on their
stages (s mod K), B and W as separate costs, the extra messages of interleaving; its bubbles are the
papers' closed forms where costs are equal, and a replay of its own trace gives its step."""

import itertools

import pytest

from gpipe_repro.engine.schedule import ideal_bubble
from gpipe_repro.sim import Link, StageCost, simulate
from gpipe_repro.sim.replay import Replay

FREE = Link(latency_s=0.0, bandwidth_Bps=1e30)
COMPUTING = ("forward", "backward", "recompute", "weight")


def cell(f: float, b: float, w: float | None = None, out: int = 0) -> StageCost:
    """A cell of forward f and backward b (w: W's part of it where split)."""
    return StageCost(
        forward_s=f,
        forward_nograd_s=f,
        backward_s=b,
        out_bytes=out,
        backward_input_s=None if w is None else b - w,
        backward_weight_s=w,
    )


@pytest.mark.parametrize("K,M", list(itertools.product((2, 4, 8), (8, 16, 32))))
def test_equal_costs_give_the_papers_bubbles(K, M):
    """F = 1, B = 2 per stage: gpipe and 1f1b (K-1)/(M+K-1) (GPipe §2.3), interleaved with v
    cells of a v-th each (K-1)/(vM+K-1) (Megatron-LM §2.2); zb-h1 with B = W = 1
    (K-1)/(3M+K-1), a third of 1F1B's bubble time (Qi et al. §2.1)."""
    for name, v in (
        ("gpipe", 1),
        ("1f1b", 1),
        ("interleaved", 2),
        ("interleaved", 4),
        ("zb-h1", 1),
    ):
        cells = [cell(1 / v, 2 / v, 1 / v)] * (K * v)
        r = simulate(K, M, name, "never", cells, FREE, virtual_stages=v)
        assert r.bubble_fraction == pytest.approx(ideal_bubble(name, K, M, v), abs=1e-9), (name, v)


def test_zb_h1_charges_w_apart_from_b():
    """Only the split schedule reads W's cost: a layer whose W is cheap shortens zb-h1's step
    (W fills the bubble, B carries the critical path) and leaves 1f1b's alone."""
    K, M = 4, 8
    even = [cell(1.0, 2.0, 1.0)] * K
    cheap_w = [cell(1.0, 2.0, 0.2)] * K  # the same backward, most of it B
    for name in ("1f1b", "gpipe"):
        a = simulate(K, M, name, "never", even, FREE)
        b = simulate(K, M, name, "never", cheap_w, FREE)
        assert a.step_s == b.step_s, name
    zb_even = simulate(K, M, "zb-h1", "never", even, FREE)
    zb_cheap = simulate(K, M, "zb-h1", "never", cheap_w, FREE)
    assert zb_even.step_s != zb_cheap.step_s
    actions = {e.action for e in zb_even.events}
    assert "weight" in actions and sum(e.action == "weight" for e in zb_even.events) == K * M


def test_interleaving_sends_v_times_the_messages_round_the_ring():
    """Every cell but the model's last sends each micro-batch's activation on (v x the messages of
    one cell per stage); the last stage's cells send to stage 0 (the ring link)."""
    K, M, v = 2, 4, 2
    link = Link(latency_s=1e-3, bandwidth_Bps=1e9)
    plain = simulate(K, M, "1f1b", "never", [cell(1.0, 2.0, out=100)] * K, link)
    inter = simulate(
        K, M, "interleaved", "never", [cell(0.5, 1.0, out=100)] * (K * v), link, virtual_stages=v
    )

    def sends(r):
        return sum(e.action == "send" and e.mb >= 0 for e in r.events)

    # activations K·v - 1 cells x M, gradients as many
    assert sends(plain) == 2 * (K - 1) * M
    assert sends(inter) == 2 * (K * v - 1) * M
    assert {e.chunk for e in inter.events if e.action == "forward"} == {0, 1}
    # the last stage sends its cell 0's activations to stage 0 (cell 2): stage 1 sends both ways
    assert {e.stage for e in inter.events if e.action == "send" and e.mb >= 0} == {0, 1}


@pytest.mark.parametrize("name,v", [("interleaved", 2), ("zb-h1", 1), ("zb-h1", 2)])
def test_a_replay_of_a_simulated_trace_is_that_step(name, v):
    """Replay (the engine's event log's costs) composes the logged actions by the simulator's rules:
    replaying a simulated step of cells and W gives the same step time."""
    K, M = 2, 4
    link = Link(latency_s=2e-3, bandwidth_Bps=1e6)
    cells = [cell(1.0 + s / 10, 2.0, 0.7, out=1000) for s in range(K * v)]
    r = simulate(K, M, name, "always", cells, link, virtual_stages=v, sender_busy=False)
    rp, t0 = Replay.from_events(r.events, K, M, name, "always", virtual_stages=v)
    again = simulate(
        K, M, name, "always", cells, link, virtual_stages=v, sender_busy=False, replay=rp
    )
    assert t0 == 0.0
    assert again.step_s == pytest.approx(r.step_s, rel=1e-9)


def test_cells_must_match_k_times_v():
    with pytest.raises(ValueError, match=r"exactly K\*v=4, one per model cell"):
        simulate(2, 4, "interleaved", "never", [cell(1.0, 2.0)] * 2, FREE, virtual_stages=2)


def test_zb_h1s_first_cell_runs_its_whole_split_backward_in_w():
    """The engine's first cell takes only the gradient at B and runs B's and W's passes at W
    (``engine.pipeline``): its W costs B + W as split, which on a small layer exceeds the whole
    backward (the split's own calls), not the whole backward."""
    K, M = 2, 4
    first = StageCost(
        forward_s=1.0, forward_nograd_s=1.0, backward_s=2.0, out_bytes=0,
        backward_input_s=1.5, backward_weight_s=1.3,
    )  # fmt: skip
    r = simulate(K, M, "zb-h1", "never", [first, cell(1.0, 2.0, 1.0)], FREE)
    w0 = [e.end - e.start for e in r.events if e.action == "weight" and e.stage == 0]
    b0 = [e.end - e.start for e in r.events if e.action == "backward" and e.stage == 0]
    assert w0 == pytest.approx([2.8] * M) and b0 == []  # B: no computing span (the engine's)
    w1 = [e.end - e.start for e in r.events if e.action == "weight" and e.stage == 1]
    assert w1 == pytest.approx([1.0] * M)  # a later cell's W is its own part alone


@pytest.mark.parametrize("checkpoint", ["never", "always"])
def test_zb_h1s_first_cell_computes_nothing_in_its_b_as_the_engine_records_it(checkpoint):
    """The model's first cell under a split backward: its B only takes the gradient (its whole
    backward runs in W), so the simulated log, like the engine's, has no backward or recompute
    span for it, and its receives count as idle in the bubble."""
    K, M = 2, 4
    cells = [cell(1.0, 2.0, 0.7, out=1000) for _ in range(K)]
    r = simulate(K, M, "zb-h1", checkpoint, cells, FREE, sender_busy=False)
    first = [e.action for e in r.events if e.stage == 0 and e.action in ("backward", "recompute")]
    assert first == []
    assert [e.mb for e in r.events if e.stage == 0 and e.action == "weight"] == list(range(M))
    assert len([e for e in r.events if e.stage == 1 and e.action == "backward"]) == M
    # its receives are idle: busy is the computing spans alone, as the engine's bubble counts it
    span = max(e.end for e in r.events if e.action in COMPUTING) - min(
        e.start for e in r.events if e.action in COMPUTING
    )
    busy = sum(e.end - e.start for e in r.events if e.action in COMPUTING)
    waited = sum(e.end - e.start for e in r.events if e.stage == 0 and e.action == "wait")
    assert waited > 0 and r.bubble_fraction == pytest.approx(1 - busy / (K * span))
