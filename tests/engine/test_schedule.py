"""Schedules as data: each one's action lists against a drawing, the rules on K, M and v, and that
every schedule runs to its end on any grid (no stage waits for what nobody makes) with every
channel's messages posted in the same order by both ends (what NCCL needs)."""

import itertools

import pytest

from gpipe_repro.engine.errors import ArgumentError
from gpipe_repro.engine.schedule import (
    SCHEDULES,
    bubble_fraction,
    check_schedule,
    gradients_taken,
    ideal_bubble,
    peak_in_flight,
    stage_actions,
    upstream,
)


def names(name, K, M, v=1):
    return [" ".join(str(a) for a in stage_actions(name, K, M, k, v)) for k in range(K)]


def test_gpipe_is_fill_drain():
    assert names("gpipe", 3, 4) == [
        "F0 F1 F2 F3 B3 B2 B1 B0",
        "F0 F1 F2 F3 B3 B2 B1 B0",
        "F0 F1 F2 F3 B3 B2 B1 B0",
    ]


def test_1f1b_warms_up_then_alternates():
    assert names("1f1b", 3, 4) == [
        "F0 F1 F2 B0 F3 B1 B2 B3",
        "F0 F1 B0 F2 B1 F3 B2 B3",
        "F0 B0 F1 B1 F2 B2 F3 B3",
    ]


def test_zb_h1_is_1f1b_with_each_w_delayed_by_the_stage():
    """Qi et al. §2.1, Fig. 3 (top): 1F1B's warm-up, B in 1F1B's place, stage k runs its W passes
    k micro-batches late, the last ones fill the tail."""
    assert names("zb-h1", 3, 4) == [
        "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3",
        "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3",
        "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3",
    ]


def test_interleaved_visits_chunks_in_groups_of_k():
    """Megatron-LM's interleaved 1F1B at K = 2, v = 2, M = 4 (F3.1: micro-batch 3 on the rank's
    chunk 1, model stage 1·K + k): 2(K-k-1) + (v-1)K warm-up forwards, chunks in groups of K
    micro-batches, backwards from the last chunk."""
    assert names("interleaved", 2, 4, 2) == [
        "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3",
        "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3",
    ]


def test_zero_bubble_over_two_chunks_is_torchs_interleaved_zero_bubble():
    """ZB-H1 over v = 2 chunks (``ScheduleInterleavedZeroBubble``): (v-1)K + K-k-1 warm-up
    forwards, each stage's W passes k backwards late."""
    assert names("zb-h1", 2, 4, 2) == [
        "F0 F1 F0.1 F1.1 B0.1 W0.1 F2 B1.1 W1.1 F3 B0 W0 F2.1 B1 W1 F3.1 B2.1 W2.1 B3.1 W3.1 "
        "B2 W2 B3 W3",
        "F0 F1 F0.1 B0.1 F1.1 B1.1 W0.1 F2 B0 W1.1 F3 B1 W0 F2.1 B2.1 W1 F3.1 B3.1 W2.1 B2 W3.1 "
        "B3 W2 W3",
    ]


def test_1f1b_keeps_fewer_micro_batches_alive():
    assert peak_in_flight("gpipe", 4, 8, 0) == 8
    assert [peak_in_flight("1f1b", 4, 8, k) for k in range(4)] == [4, 3, 2, 1]
    assert [peak_in_flight("1f1b", 4, 2, k) for k in range(4)] == [2, 2, 2, 1]  # min(K - k, M)


def test_zb_h1_holds_1f1b_peak_on_every_stage_and_interleaving_holds_more():
    """ZB-H1 keeps a micro-batch from F to W: every stage holds K (1F1B's stage 0). Interleaving
    holds 2(K-k-1) + (v-1)K + 1 chunk-micro-batches at its peak (each a v-th of a stage)."""
    assert [peak_in_flight("zb-h1", 4, 8, k) for k in range(4)] == [4, 4, 4, 4]
    assert [peak_in_flight("zb-h1", 4, 2, k) for k in range(4)] == [2, 2, 2, 2]
    assert [peak_in_flight("interleaved", 4, 8, k, 2) for k in range(4)] == [11, 9, 7, 5]


def test_an_unknown_schedule_has_no_in_flight_count():
    with pytest.raises(ArgumentError, match="schedule='zb' is unknown"):
        peak_in_flight("zb", 4, 8, 0)


@pytest.mark.parametrize(
    "args, message",
    [
        (("zb", 2, 4, 1), "schedule='zb' is unknown; allowed: gpipe, 1f1b, interleaved, zb-h1"),
        (("interleaved", 2, 4, 1), "virtual_stages=1 is too few for schedule interleaved"),
        (("1f1b", 2, 4, 2), "virtual_stages=2 needs a schedule that holds several chunks"),
        (("interleaved", 4, 6, 2), "M=6 cannot run schedule interleaved with 2 chunks per rank"),
        (("zb-h1", 4, 2, 2), "allowed: a multiple of K=4"),
        (("zb-h1", 2, 4, 0), "virtual_stages=0 is invalid"),
    ],
)
def test_impossible_arguments_are_one_line(args, message):
    with pytest.raises(ArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_schedule(*args)


GRID = [
    (name, K, M, v)
    for name in SCHEDULES
    for K in (1, 2, 3, 4, 8)
    for v in ((1,) if name in ("gpipe", "1f1b") else (2, 3) if name == "interleaved" else (1, 2))
    for M in (1, 2, 3, 4, 8, 12, 16)
    if v == 1 or M % K == 0
]


def _sources(name, K, M, v, k, a):
    """What action ``a`` of stage k needs done first (a model stage's F before the next one's F,
    the next one's B before this one's B, a micro-batch's B before its W)."""
    s, S = a.chunk * K + k, K * v
    if a.kind == "F":
        return [("F", s - 1, a.mb)] if s > 0 else []
    if a.kind == "B":
        return [("B", s + 1, a.mb)] if s < S - 1 else [("F", s, a.mb)]
    return [("B", s, a.mb)]


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_runs_to_its_end_and_does_each_action_once(name):
    """A stage runs its list in order and waits for its inputs: the whole grid finishes, every
    model stage does F and B (and W where split) of every micro-batch exactly once."""
    for sched, K, M, v in GRID:
        if sched != name:
            continue
        acts = [stage_actions(name, K, M, k, v) for k in range(K)]
        kinds = "FBW" if name == "zb-h1" else "FB"
        for k in range(K):
            want = {(x, c, m) for x in kinds for c in range(v) for m in range(M)}
            assert sorted((a.kind, a.chunk, a.mb) for a in acts[k]) == sorted(want), (K, M, v)
        pos, done = [0] * K, set()
        while any(pos[k] < len(acts[k]) for k in range(K)):
            moved = False
            for k in range(K):
                while pos[k] < len(acts[k]):
                    a = acts[k][pos[k]]
                    if any(n not in done for n in _sources(name, K, M, v, k, a)):
                        break
                    done.add((a.kind, a.chunk * K + k, a.mb))
                    pos[k] += 1
                    moved = True
            assert moved, f"{name} deadlocks at K={K}, M={M}, v={v}: stages at {pos}"


@pytest.mark.parametrize("name", SCHEDULES)
def test_both_ends_of_every_channel_post_in_the_same_order(name):
    """Each directed link (k -> k+1 mod K for activations, back for gradients) carries every
    chunk's messages in one queue: the sender's sends and the receiver's receives must come in
    the same order, or a receive posted ahead stands before a send the peer needs first
    (``engine.fifo``). Read off the action lists for the grid (the ring link K-1 -> 0 included)."""
    for sched, K, M, v in GRID:
        if sched != name or K == 1:
            continue
        S = K * v
        sent = {(k, d): [] for k in range(K) for d in "FB"}
        got = {(k, d): [] for k in range(K) for d in "FB"}
        for k in range(K):
            for a in stage_actions(name, K, M, k, v):
                s = a.chunk * K + k
                if a.kind == "F":
                    if s < S - 1:
                        sent[(k, "F")].append((s + 1, a.mb))  # to (k+1) mod K
                    if s > 0:
                        got[((k - 1) % K, "F")].append((s, a.mb))
                elif a.kind == "B":
                    if s > 0:
                        sent[(k, "B")].append((s - 1, a.mb))  # to (k-1) mod K
                    if s < S - 1:
                        got[((k + 1) % K, "B")].append((s, a.mb))
        for key in sent:  # (receiving model stage, micro-batch), in each end's order
            assert sent[key] == got[key], (name, K, M, v, key)


def test_gradients_taken_name_the_chunks_the_peer_backwarded_before_sending():
    """Interleaved at K = 2, v = 2: stage 1's activations (model stage 1 = its chunk 0, and 3 = its
    chunk 1) come from stage 0 after stage 0 ran the B passes listed."""
    taken = gradients_taken("interleaved", 2, 4, 1, 2)
    # stage 0: F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 ...; its B0.1 (model stage 2)
    # takes the gradient stage 1's chunk 1 (model stage 3) sent for micro-batch 0, its F3 then
    # sends stage 1's chunk-0 input of micro-batch 3, ...
    assert taken[(0, 2)] == [] and taken[(0, 3)] == [(1, 0)]
    assert taken[(1, 2)] == [(1, 0), (1, 1)]
    assert taken[(1, 3)] == [(1, 0), (1, 1), (0, 0)]
    assert upstream(2, 0, 1) == (1, 0) and upstream(2, 0, 0) is None


def test_bubble_formula():
    # GPipe §2.3: (K-1)/(M+K-1); no bubble with one stage, and it shrinks as M grows.
    assert bubble_fraction(1, 8) == 0.0
    assert bubble_fraction(4, 1) == 3 / 4
    assert bubble_fraction(4, 32) < bubble_fraction(4, 4) < bubble_fraction(4, 1)


def test_ideal_bubbles_order_the_schedules():
    """Interleaving divides the bubble time by v, ZB-H1 leaves a third of it (same K, M)."""
    for K, M in itertools.product((2, 4, 8), (8, 16, 32)):
        gpipe = ideal_bubble("gpipe", K, M)
        assert gpipe == ideal_bubble("1f1b", K, M) == bubble_fraction(K, M)
        assert ideal_bubble("interleaved", K, M, 4) < ideal_bubble("interleaved", K, M, 2) < gpipe
        assert ideal_bubble("zb-h1", K, M) < gpipe
    assert ideal_bubble("zb-h1", 4, 8, 2) is None
