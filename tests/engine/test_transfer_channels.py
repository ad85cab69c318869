"""A stage's transfers: sends are released as they complete, not held to the end of the step."""

import _workers as w

from gpipe_repro.engine import launch
from gpipe_repro.engine.pipeline import DEFAULT_LOOKAHEAD
from gpipe_repro.engine.schedule import gradients_taken, receives_ahead, stage_actions


def test_activation_sends_are_released_per_micro_batch():
    """1F1B at K = 2, M = 8, on plain gloo and in NCCL's order: stage 0 gets micro-batch m's gradient
    after at most K forwards, so it holds at most K micro-batches' sent activations (it held all M
    before); none after the step."""
    K, M = 2, 8
    stage0 = launch(w.held_sends, K, (K, M), threads=1)[0]
    for mode, first in zip(("gloo", "nccl_order"), stage0):
        assert first["stage"] == 0 and len(first["held"]) == 2 * M, mode  # one entry per action
        assert max(len(h) for h in first["held"]) <= K, (mode, first["held"])
        assert first["after"] == [], mode


def test_gradient_sends_are_released_once_the_previous_stage_took_them():
    """1F1B at K = 2, M = 8 on plain gloo (a send reports completion only once waited for): stage 1
    releases micro-batch m's gradient send when an activation arrives that stage 0 sent after its
    backward of m (``schedule.gradients_taken``), so it holds at most 2 after any action (it held
    all M until the step's end before) and the planner's walk counts the same sends. Its receives
    posted ahead are the planner's ``receives_ahead`` once the first activation's handshake has
    told their shapes (none can be posted before it)."""
    K, M = 2, 8
    stage1 = launch(w.held_sends, K, (K, M), threads=1)[1][0]  # plain gloo
    assert stage1["stage"] == 1 and stage1["after"] == []
    taken = gradients_taken("1f1b", K, M, 1)
    sent: set[int] = set()
    expected = []
    for a in stage_actions("1f1b", K, M, 1):
        if a.kind == "F":
            sent -= {mb for _, mb in taken.get((a.chunk, a.mb), [])}
        else:
            sent.add(a.mb)
        expected.append(sorted(sent))
    assert stage1["grads"] == expected
    assert max(len(g) for g in stage1["grads"]) == 2
    ahead = receives_ahead("1f1b", K, M, 1, DEFAULT_LOOKAHEAD)
    assert [tuple(p) for p in stage1["posted"][1:]] == list(ahead[1:])
    assert tuple(stage1["posted"][0]) <= ahead[0]
