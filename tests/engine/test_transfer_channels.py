"""A stage's transfers: sends are released as they complete, not held to the end of the step."""

import _workers as w

from gpipe_repro.engine import launch


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
