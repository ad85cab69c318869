"""Rematerialisation policy and RNG restore (the recompute must draw the same dropout masks)."""

import pytest
import torch

from gpipe_repro.engine import ArgumentError
from gpipe_repro.engine.checkpoint import restored_rng, save_rng, uses_remat


def test_which_micro_batches_are_rematerialised():
    M = 4
    assert [uses_remat("never", m, M) for m in range(M)] == [False] * 4
    assert [uses_remat("always", m, M) for m in range(M)] == [True] * 4
    assert [uses_remat("except_last", m, M) for m in range(M)] == [True, True, True, False]
    with pytest.raises(ArgumentError, match="^checkpoint='sometimes' is unknown"):
        uses_remat("sometimes", 0, M)


def test_restored_rng_repeats_the_draws_and_leaves_the_outer_stream_alone():
    torch.manual_seed(0)
    state = save_rng(torch.device("cpu"))
    first = torch.rand(5)
    after = torch.rand(5)
    torch.manual_seed(0)
    torch.rand(5)
    with restored_rng(state):
        again = torch.rand(5)
    assert torch.equal(first, again)
    assert torch.equal(torch.rand(5), after)  # the outer stream went on as if nothing happened
